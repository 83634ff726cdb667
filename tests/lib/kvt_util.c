/* kvt_util: see kvt_util.h. */

#include "kvt_util.h"
#include "common/clock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ftw.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

int64_t kvt_now_us(void)
{
    return (int64_t)kv_mono_us();
}

uint64_t kvt_now_ms(void)
{
    return (uint64_t)(kvt_now_us() / 1000);
}

void kvt_sleep_ms(uint32_t ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

int kvt_tmpdir_create(kvt_tmpdir *d, const char *prefix)
{
    const char *t = getenv("TMPDIR");
    int n = snprintf(d->path, sizeof(d->path), "%s/%s.XXXXXX", t && *t ? t : "/tmp",
                     prefix ? prefix : "kvt");
    if (n < 0 || (size_t)n >= sizeof(d->path))
        return -ENAMETOOLONG;
    if (!mkdtemp(d->path)) {
        int e = -errno;
        d->path[0] = '\0';
        return e;
    }
    return 0;
}

/* Best effort: an entry that cannot be removed does not stop the walk (kvt_rmtree then
 * reports it, since its parents remain). */
static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

int kvt_rmtree(const char *path)
{
    if (!path || !path[0])
        return -EINVAL;
    if (access(path, F_OK) != 0)
        return 0;
    if (nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
        return errno ? -errno : -EIO;
    return access(path, F_OK) == 0 ? -ENOTEMPTY : 0;
}

void kvt_tmpdir_destroy(kvt_tmpdir *d)
{
    if (!d->path[0])
        return;
    if (getenv("KV_TEST_KEEP_DIRS")) /* set: keep (tests, benches: one rule) */
        fprintf(stderr, "kvt: kept %s\n", d->path);
    else
        kvt_rmtree(d->path);
    d->path[0] = '\0';
}

/* Appends n bytes to a growing NUL-terminated buffer, capped at 64 MiB. */
static int append(char **buf, size_t *len, size_t *cap, const char *data, size_t n)
{
    const size_t limit = 64u << 20;
    if (*len >= limit)
        n = 0;
    else if (n > limit - *len)
        n = limit - *len;
    if (*len + n + 1 > *cap) {
        size_t c = *cap ? *cap : 4096;
        while (c < *len + n + 1)
            c *= 2;
        char *p = realloc(*buf, c);
        if (!p)
            return -ENOMEM;
        *buf = p;
        *cap = c;
    }
    if (n > 0)
        memcpy(*buf + *len, data, n);
    *len += n;
    (*buf)[*len] = 0;
    return 0;
}

int kvt_connect_loopback(uint16_t port, uint32_t timeout_ms)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        if (errno != EINPROGRESS) {
            int e = errno;
            close(fd);
            return -e;
        }
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        int soerr = 0;
        socklen_t sl = sizeof(soerr);
        if (poll(&p, 1, (int)timeout_ms) <= 0) {
            close(fd);
            return -ETIMEDOUT;
        }
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
        if (soerr) {
            close(fd);
            return -soerr;
        }
    }
    return fd;
}

int kvt_send_all(int fd, const char *data, size_t len, uint64_t deadline)
{
    size_t off = 0;
    while (off < len) {
        ssize_t w = send(fd, data + off, len - off, MSG_NOSIGNAL);
        if (w > 0) {
            off += (size_t)w;
            continue;
        }
        if (w < 0 && (errno == EPIPE || errno == ECONNRESET))
            return 1;
        if (w < 0 && errno != EAGAIN && errno != EINTR)
            return -errno;
        uint64_t t = kvt_now_ms();
        if (t >= deadline)
            return -ETIMEDOUT;
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        poll(&p, 1, (int)(deadline - t));
    }
    return 0;
}

int kvt_http_get(uint16_t port, const char *path, uint32_t timeout_ms, int *status, char **body)
{
    uint64_t deadline = kvt_now_ms() + timeout_ms;
    *body = NULL;
    *status = 0;
    int fd = kvt_connect_loopback(port, timeout_ms);
    if (fd < 0)
        return fd;
    char req[512];
    int n =
        snprintf(req, sizeof(req),
                 "GET %s HTTP/1.0\r\nHost: 127.0.0.1:%u\r\nConnection: close\r\n\r\n", path, port);
    int rc = kvt_send_all(fd, req, (size_t)n, deadline);
    if (rc) {
        close(fd);
        return rc < 0 ? rc : -ECONNRESET;
    }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    append(&buf, &len, &cap, "", 0);
    for (;;) {
        char tmp[65536];
        ssize_t r = recv(fd, tmp, sizeof(tmp), 0);
        if (r > 0) {
            append(&buf, &len, &cap, tmp, (size_t)r);
            continue;
        }
        if (r == 0)
            break;
        if (errno != EAGAIN && errno != EINTR) {
            rc = -errno;
            break;
        }
        uint64_t t = kvt_now_ms();
        if (t >= deadline) {
            rc = -ETIMEDOUT;
            break;
        }
        struct pollfd p = {.fd = fd, .events = POLLIN};
        poll(&p, 1, (int)(deadline - t));
    }
    close(fd);
    if (rc || !buf) {
        free(buf);
        return rc ? rc : -ENOMEM;
    }
    if (sscanf(buf, "HTTP/%*d.%*d %d", status) != 1) {
        free(buf);
        return -EPROTO;
    }
    char *sep = strstr(buf, "\r\n\r\n");
    const char *b = sep ? sep + 4 : "";
    char *out = strdup(b);
    free(buf);
    if (!out)
        return -ENOMEM;
    *body = out;
    return 0;
}

int kvt_metric_value(const char *text, const char *series, double *value)
{
    size_t sl = strlen(series);
    const char *p = text;
    while (p && *p) {
        const char *eol = strchr(p, '\n');
        size_t ll = eol ? (size_t)(eol - p) : strlen(p);
        if (p[0] != '#' && ll > sl && strncmp(p, series, sl) == 0 && p[sl] == ' ') {
            char *end;
            double v = strtod(p + sl + 1, &end);
            if (end != p + sl + 1) {
                *value = v;
                return 0;
            }
        }
        p = eol ? eol + 1 : NULL;
    }
    return -ENOENT;
}

const char *kvt_str_tail(const char *s, size_t max)
{
    size_t n = strlen(s);
    return n > max ? s + (n - max) : s;
}

char *kvt_file_read(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    while (b) {
        n += fread(b + n, 1, cap - n - 1, f);
        if (n + 1 < cap || cap >= (16u << 20))
            break;
        char *nb = realloc(b, cap * 2);
        if (!nb) {
            free(b);
            b = NULL;
            break;
        }
        b = nb;
        cap *= 2;
    }
    fclose(f);
    if (b)
        b[n] = '\0';
    return b;
}
