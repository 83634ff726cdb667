/* harness: see harness.h. */
#include "harness.h"
#include "grpc_raw.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CAPTURE_LIMIT (64u * 1024u * 1024u)

uint64_t kv_it_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

kv_it_kind kv_it_kind_from_env(void)
{
    const char *v = getenv("KV_TEST_SERVER");
    return (v && strcmp(v, "etcd") == 0) ? KV_IT_ETCD : KV_IT_KVD;
}

const char *kv_it_kind_name(kv_it_kind k)
{
    return k == KV_IT_ETCD ? "etcd" : "kvd";
}

static int check_exec(const char *path)
{
    return access(path, X_OK) == 0 ? 0 : -ENOENT;
}

static int bin_from(char *buf, size_t cap, const char *env_override, const char *build_rel,
                    const char *fallback)
{
    const char *v = env_override ? getenv(env_override) : NULL;
    if (v && *v) {
        snprintf(buf, cap, "%s", v);
    } else if (build_rel) {
        const char *bd = getenv("KV_BUILD_DIR");
        snprintf(buf, cap, "%s/%s", bd && *bd ? bd : ".", build_rel);
    } else {
        snprintf(buf, cap, "%s", fallback);
    }
    return check_exec(buf);
}

int kv_it_server_bin(kv_it_kind kind, char *buf, size_t cap)
{
    if (kind == KV_IT_ETCD)
        return bin_from(buf, cap, "KV_ETCD_BIN", NULL, "/usr/bin/etcd");
    return bin_from(buf, cap, "KV_KVD_BIN", "server/kvd", NULL);
}

int kv_it_kvctl_bin(char *buf, size_t cap)
{
    return bin_from(buf, cap, "KV_KVCTL_BIN", "client/kvctl", NULL);
}

int kv_it_etcdctl_bin(char *buf, size_t cap)
{
    return bin_from(buf, cap, "KV_ETCDCTL_BIN", NULL, "/usr/bin/etcdctl");
}

int kv_it_free_port(uint16_t *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof(sa);
    int rc = 0;
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &sl) < 0)
        rc = -errno;
    else
        *port = ntohs(sa.sin_port);
    close(fd);
    return rc;
}

static int pick_ports(kv_it_server *s);

int kv_it_server_init(kv_it_server *s, kv_it_kind kind, const char *const *extra_args)
{
    int rc;
    memset(s, 0, sizeof(*s));
    s->kind = kind;
    rc = kv_it_server_bin(kind, s->bin, sizeof(s->bin));
    if (rc)
        return rc;
    if ((rc = pick_ports(s))) /* three distinct free ports */
        return rc;
    const char *tmp = getenv("TMPDIR");
    snprintf(s->dir, sizeof(s->dir), "%.900s/kvit-%s-XXXXXX", tmp && *tmp ? tmp : "/tmp",
             kv_it_kind_name(kind));
    if (!mkdtemp(s->dir))
        return -errno;
    snprintf(s->data_dir, sizeof(s->data_dir), "%s/data", s->dir);
    snprintf(s->log_path, sizeof(s->log_path), "%s/server.log", s->dir);
    for (int i = 0; extra_args && extra_args[i]; i++) {
        if (s->n_extra == KV_IT_MAX_EXTRA) {
            rmdir(s->dir);
            return -E2BIG;
        }
        snprintf(s->extra[s->n_extra++], sizeof(s->extra[0]), "%s", extra_args[i]);
    }
    return 0;
}

static int reap(kv_it_server *s, int options)
{
    int st;
    pid_t r = waitpid(s->pid, &st, options);
    if (r == s->pid || (r < 0 && errno == ECHILD)) {
        s->pid = 0;
        return 1;
    }
    return 0;
}

int kv_it_server_alive(kv_it_server *s)
{
    if (s->pid <= 0)
        return 0;
    return reap(s, WNOHANG) ? 0 : 1;
}

int kv_it_server_wait_ready(kv_it_server *s, uint32_t timeout_ms)
{
    uint64_t deadline = kv_it_now_ms() + timeout_ms;
    /* RangeRequest{key="kvit-ready"}: field 1 (bytes) */
    static const uint8_t req[] = {0x0a, 10, 'k', 'v', 'i', 't', '-', 'r', 'e', 'a', 'd', 'y'};
    while (kv_it_now_ms() < deadline) {
        if (!kv_it_server_alive(s))
            return -ECHILD;
        kv_it_grpc *c = NULL;
        if (kv_it_grpc_open(&c, "127.0.0.1", s->client_port, 500) == 0) {
            uint8_t *resp = NULL;
            size_t resp_len = 0;
            int status = -1;
            int rc = kv_it_grpc_call(c, "/etcdserverpb.KV/Range", req, sizeof(req), &resp,
                                     &resp_len, 1000, &status, NULL, 0);
            free(resp);
            kv_it_grpc_close(c);
            if (rc == 0)
                return 0;
        }
        sleep_ms(50);
    }
    return -ETIMEDOUT;
}

static int pick_ports(kv_it_server *s)
{
    int rc;
    do {
        if ((rc = kv_it_free_port(&s->client_port)) || (rc = kv_it_free_port(&s->peer_port)) ||
            (rc = kv_it_free_port(&s->metrics_port)))
            return rc;
    } while (s->client_port == s->peer_port || s->client_port == s->metrics_port ||
             s->peer_port == s->metrics_port);
    snprintf(s->endpoint, sizeof(s->endpoint), "127.0.0.1:%u", s->client_port);
    return 0;
}

static int start_once(kv_it_server *s, uint32_t ready_timeout_ms);

int kv_it_server_start(kv_it_server *s, uint32_t ready_timeout_ms)
{
    int rc = start_once(s, ready_timeout_ms);
    /* A free port can be taken by someone else between our probe and the server's bind.
     * Before the first successful start the ports are not part of the contract: retry. */
    for (int attempt = 0; rc == -ECHILD && s->starts == 0 && attempt < 3; attempt++) {
        char *log = NULL;
        int in_use = kv_it_server_log(s, &log) == 0 && log &&
                     (strstr(log, "address already in use") || strstr(log, "Address in use") ||
                      strstr(log, "EADDRINUSE"));
        free(log);
        if (!in_use || pick_ports(s))
            break;
        rc = start_once(s, ready_timeout_ms);
    }
    if (rc == 0)
        s->starts++;
    return rc;
}

int kv_it_server_restart(kv_it_server *s, uint32_t grace_ms, uint32_t ready_timeout_ms)
{
    int rc = kv_it_server_stop(s, grace_ms);
    return rc ? rc : kv_it_server_start(s, ready_timeout_ms);
}

static int start_once(kv_it_server *s, uint32_t ready_timeout_ms)
{
    if (s->pid > 0)
        return -EBUSY;
    char a_name[64], a_data[PATH_MAX + 16], a_lc[96], a_ac[96], a_lp[96], a_lm[96], a_iap[96],
        a_ic[160];
    snprintf(a_name, sizeof(a_name), "kvit");
    snprintf(a_data, sizeof(a_data), "--data-dir=%s", s->data_dir);
    snprintf(a_lc, sizeof(a_lc), "--listen-client-urls=http://127.0.0.1:%u", s->client_port);
    snprintf(a_ac, sizeof(a_ac), "--advertise-client-urls=http://127.0.0.1:%u", s->client_port);
    snprintf(a_lp, sizeof(a_lp), "--listen-peer-urls=http://127.0.0.1:%u", s->peer_port);
    snprintf(a_lm, sizeof(a_lm), "--listen-metrics-urls=http://127.0.0.1:%u", s->metrics_port);
    snprintf(a_iap, sizeof(a_iap), "--initial-advertise-peer-urls=http://127.0.0.1:%u",
             s->peer_port);
    snprintf(a_ic, sizeof(a_ic), "--initial-cluster=%s=http://127.0.0.1:%u", a_name, s->peer_port);
    const char *argv[32];
    int n = 0;
    argv[n++] = s->bin;
    argv[n++] = "--name";
    argv[n++] = a_name;
    argv[n++] = a_data;
    argv[n++] = a_lc;
    argv[n++] = a_ac;
    argv[n++] = a_lp;
    argv[n++] = a_lm;
    /* kvd takes etcd's flags: both servers are started exactly the same way. */
    argv[n++] = a_iap;
    argv[n++] = a_ic;
    for (int i = 0; i < s->n_extra; i++)
        argv[n++] = s->extra[i];
    argv[n] = NULL;

    int logfd = open(s->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (logfd < 0)
        return -errno;
    struct stat st;
    s->log_offset = fstat(logfd, &st) == 0 ? st.st_size : 0;
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(logfd);
        return -e;
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        int devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0)
            dup2(devnull, 0);
        dup2(logfd, 1);
        dup2(logfd, 2);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(logfd);
    s->pid = pid;
    int rc = kv_it_server_wait_ready(s, ready_timeout_ms);
    if (rc) {
        kv_it_server_kill9(s);
        return rc;
    }
    return 0;
}

int kv_it_server_stop(kv_it_server *s, uint32_t grace_ms)
{
    if (s->pid <= 0)
        return 0;
    kill(s->pid, SIGTERM);
    uint64_t deadline = kv_it_now_ms() + grace_ms;
    while (kv_it_now_ms() < deadline) {
        if (reap(s, WNOHANG))
            return 0;
        sleep_ms(10);
    }
    return kv_it_server_kill9(s);
}

int kv_it_server_kill9(kv_it_server *s)
{
    if (s->pid <= 0)
        return 0;
    kill(s->pid, SIGKILL);
    reap(s, 0);
    return 0;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

void kv_it_server_destroy(kv_it_server *s)
{
    kv_it_server_stop(s, 5000);
    if (s->dir[0] && !getenv("KV_TEST_KEEP_DIRS"))
        nftw(s->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    s->dir[0] = 0;
}

int kv_it_server_log(const kv_it_server *s, char **out)
{
    *out = NULL;
    FILE *f = fopen(s->log_path, "rb");
    if (!f)
        return -errno;
    fseeko(f, 0, SEEK_END);
    off_t end = ftello(f);
    off_t start = s->log_offset <= end ? s->log_offset : 0;
    size_t len = (size_t)(end - start);
    char *buf = malloc(len + 1);
    if (!buf) {
        fclose(f);
        return -ENOMEM;
    }
    fseeko(f, start, SEEK_SET);
    size_t got = fread(buf, 1, len, f);
    buf[got] = 0;
    fclose(f);
    *out = buf;
    return 0;
}

static int append(char **buf, size_t *len, size_t *cap, const char *data, size_t n)
{
    if (*len >= CAPTURE_LIMIT)
        n = 0;
    else if (n > CAPTURE_LIMIT - *len)
        n = CAPTURE_LIMIT - *len;
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

int kv_it_run(const char *const *argv, const char *const *env_add, const void *stdin_data,
              size_t stdin_len, uint32_t timeout_ms, kv_it_cmd_result *res)
{
    int pin[2] = {-1, -1}, pout[2] = {-1, -1}, perr[2] = {-1, -1};
    int rc = 0;
    memset(res, 0, sizeof(*res));
    /* A command that exits without reading its stdin must not kill us with SIGPIPE. */
    struct sigaction old_pipe;
    if (sigaction(SIGPIPE, NULL, &old_pipe) == 0 && old_pipe.sa_handler == SIG_DFL)
        signal(SIGPIPE, SIG_IGN);
    size_t out_cap = 0, err_cap = 0;
    if (append(&res->out, &res->out_len, &out_cap, "", 0) ||
        append(&res->err, &res->err_len, &err_cap, "", 0)) {
        rc = -ENOMEM;
        goto fail;
    }
    if (pipe2(pin, O_CLOEXEC) || pipe2(pout, O_CLOEXEC) || pipe2(perr, O_CLOEXEC)) {
        rc = -errno;
        goto fail;
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        rc = -errno;
        goto fail;
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        dup2(pin[0], 0);
        dup2(pout[1], 1);
        dup2(perr[1], 2);
        for (int i = 0; env_add && env_add[i]; i++)
            putenv((char *)env_add[i]);
        execv(argv[0], (char *const *)argv);
        fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(pin[0]);
    close(pout[1]);
    close(perr[1]);
    pin[0] = pout[1] = perr[1] = -1;
    fcntl(pin[1], F_SETFL, O_NONBLOCK);
    size_t in_off = 0;
    if (!stdin_data || stdin_len == 0) {
        close(pin[1]);
        pin[1] = -1;
    }
    uint64_t deadline = kv_it_now_ms() + timeout_ms;
    while (pout[0] >= 0 || perr[0] >= 0) {
        struct pollfd p[3];
        int np = 0, iout = -1, ierr = -1, iin = -1;
        if (pout[0] >= 0) {
            iout = np;
            p[np++] = (struct pollfd){.fd = pout[0], .events = POLLIN};
        }
        if (perr[0] >= 0) {
            ierr = np;
            p[np++] = (struct pollfd){.fd = perr[0], .events = POLLIN};
        }
        if (pin[1] >= 0) {
            iin = np;
            p[np++] = (struct pollfd){.fd = pin[1], .events = POLLOUT};
        }
        uint64_t t = kv_it_now_ms();
        if (t >= deadline) {
            res->timed_out = 1;
            kill(pid, SIGKILL);
            break;
        }
        int pr = poll(p, (nfds_t)np, (int)(deadline - t));
        if (pr < 0 && errno != EINTR)
            break;
        char buf[65536];
        if (iout >= 0 && p[iout].revents) {
            ssize_t r = read(pout[0], buf, sizeof(buf));
            if (r > 0)
                append(&res->out, &res->out_len, &out_cap, buf, (size_t)r);
            else if (r == 0 || errno != EINTR) {
                close(pout[0]);
                pout[0] = -1;
            }
        }
        if (ierr >= 0 && p[ierr].revents) {
            ssize_t r = read(perr[0], buf, sizeof(buf));
            if (r > 0)
                append(&res->err, &res->err_len, &err_cap, buf, (size_t)r);
            else if (r == 0 || errno != EINTR) {
                close(perr[0]);
                perr[0] = -1;
            }
        }
        if (iin >= 0 && p[iin].revents) {
            ssize_t w = write(pin[1], (const char *)stdin_data + in_off, stdin_len - in_off);
            if (w > 0)
                in_off += (size_t)w;
            if ((w < 0 && errno != EAGAIN && errno != EINTR) || in_off == stdin_len) {
                close(pin[1]);
                pin[1] = -1;
            }
        }
    }
    int st = 0;
    /* The pipes are closed (or we timed out and killed it); wait, bounded. */
    uint64_t wdl = kv_it_now_ms() + 5000;
    for (;;) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid)
            break;
        if (r < 0) {
            st = 0;
            break;
        }
        if (kv_it_now_ms() >= wdl) {
            res->timed_out = 1;
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            break;
        }
        sleep_ms(5);
    }
    res->exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
fail:
    for (int i = 0; i < 2; i++) {
        if (pin[i] >= 0)
            close(pin[i]);
        if (pout[i] >= 0)
            close(pout[i]);
        if (perr[i] >= 0)
            close(perr[i]);
    }
    if (rc)
        kv_it_cmd_result_free(res);
    return rc;
}

int kv_it_ctl(const kv_it_server *s, const char *ctl_bin, const char *stdin_data,
              uint32_t timeout_ms, kv_it_cmd_result *res, ...)
{
    const char *argv[64];
    char ep[96];
    int n = 0;
    snprintf(ep, sizeof(ep), "--endpoints=%s", s->endpoint);
    argv[n++] = ctl_bin;
    argv[n++] = ep;
    va_list ap;
    va_start(ap, res);
    const char *a;
    while ((a = va_arg(ap, const char *)) != NULL) {
        if (n == 63) {
            va_end(ap);
            return -E2BIG;
        }
        argv[n++] = a;
    }
    va_end(ap);
    argv[n] = NULL;
    static const char *const env[] = {"ETCDCTL_API=3", NULL};
    return kv_it_run(argv, env, stdin_data, stdin_data ? strlen(stdin_data) : 0, timeout_ms, res);
}

void kv_it_cmd_result_free(kv_it_cmd_result *res)
{
    free(res->out);
    free(res->err);
    res->out = res->err = NULL;
    res->out_len = res->err_len = 0;
}

int kv_it_proc_rss(pid_t pid, uint64_t *bytes)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -errno;
    int rc = -ENOENT;
    while (fgets(line, sizeof(line), f)) {
        unsigned long long kb;
        if (sscanf(line, "VmRSS: %llu kB", &kb) == 1) {
            *bytes = (uint64_t)kb * 1024u;
            rc = 0;
            break;
        }
    }
    fclose(f);
    return rc;
}

int kv_it_proc_cpu(pid_t pid, double *seconds)
{
    char path[64], buf[4096];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return -EIO;
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    if (!p)
        return -EPROTO;
    /* After ") ": field 3 (state) ... utime is field 14, stime field 15. */
    unsigned long long ut, stt;
    if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &stt) != 2)
        return -EPROTO;
    long hz = sysconf(_SC_CLK_TCK);
    *seconds = (double)(ut + stt) / (double)(hz > 0 ? hz : 100);
    return 0;
}

static int connect_loopback(uint16_t port, uint32_t timeout_ms)
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

/* Sends all of data (bounded); 1 if the peer closed/reset while sending. */
static int send_all(int fd, const char *data, size_t len, uint64_t deadline)
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
        uint64_t t = kv_it_now_ms();
        if (t >= deadline)
            return -ETIMEDOUT;
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        poll(&p, 1, (int)(deadline - t));
    }
    return 0;
}

int kv_it_http_get(uint16_t port, const char *path, uint32_t timeout_ms, int *status, char **body)
{
    uint64_t deadline = kv_it_now_ms() + timeout_ms;
    *body = NULL;
    *status = 0;
    int fd = connect_loopback(port, timeout_ms);
    if (fd < 0)
        return fd;
    char req[512];
    int n =
        snprintf(req, sizeof(req),
                 "GET %s HTTP/1.0\r\nHost: 127.0.0.1:%u\r\nConnection: close\r\n\r\n", path, port);
    int rc = send_all(fd, req, (size_t)n, deadline);
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
        uint64_t t = kv_it_now_ms();
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

int kv_it_metric_value(const char *text, const char *series, double *value)
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

int kv_it_metric_sum(const char *text, const char *name, const char *label_substr, double *sum,
                     int *n_series)
{
    size_t nl = strlen(name);
    int n = 0;
    double total = 0;
    const char *p = text;
    while (p && *p) {
        const char *eol = strchr(p, '\n');
        size_t ll = eol ? (size_t)(eol - p) : strlen(p);
        if (p[0] != '#' && ll > nl && strncmp(p, name, nl) == 0 && (p[nl] == ' ' || p[nl] == '{')) {
            const char *val = p + nl;
            int ok = 1;
            if (*val == '{') {
                const char *close = memchr(val, '}', ll - nl);
                if (!close) {
                    ok = 0;
                } else {
                    if (label_substr) {
                        size_t sl = strlen(label_substr), span = (size_t)(close - val);
                        ok = 0;
                        for (size_t i = 0; i + sl <= span; i++)
                            if (memcmp(val + i, label_substr, sl) == 0)
                                ok = 1;
                    }
                    val = close + 1;
                }
            } else if (label_substr) {
                ok = 0;
            }
            if (ok && *val == ' ') {
                char *end;
                double v = strtod(val + 1, &end);
                if (end != val + 1) {
                    total += v;
                    n++;
                }
            }
        }
        p = eol ? eol + 1 : NULL;
    }
    if (n_series)
        *n_series = n;
    if (n == 0)
        return -ENOENT;
    *sum = total;
    return 0;
}

int kv_it_random_bytes(void *buf, size_t len)
{
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    size_t off = 0;
    while (off < len) {
        ssize_t r = read(fd, (char *)buf + off, len - off);
        if (r <= 0) {
            close(fd);
            return -EIO;
        }
        off += (size_t)r;
    }
    close(fd);
    return 0;
}

int kv_it_send_raw(uint16_t port, const void *data, size_t len, uint32_t timeout_ms)
{
    uint64_t deadline = kv_it_now_ms() + timeout_ms;
    int fd = connect_loopback(port, timeout_ms);
    if (fd < 0)
        return fd;
    int rc = send_all(fd, data, len, deadline);
    if (rc < 0) {
        close(fd);
        return rc;
    }
    if (rc == 1) { /* peer already closed/reset */
        close(fd);
        return 0;
    }
    shutdown(fd, SHUT_WR);
    rc = -ETIMEDOUT;
    for (;;) {
        char tmp[4096];
        ssize_t r = recv(fd, tmp, sizeof(tmp), 0);
        if (r > 0)
            continue;
        if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
            rc = 0;
            break;
        }
        uint64_t t = kv_it_now_ms();
        if (t >= deadline)
            break;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        poll(&p, 1, (int)(deadline - t));
    }
    close(fd);
    return rc;
}
