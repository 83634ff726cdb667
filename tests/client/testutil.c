/*
 * testutil.c - see testutil.h.
 */
#include "testutil.h"
#include "kvt_proc.h"
#include "kvt_util.h"
#include "v3lock.pb-c.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#define KVT_HAVE_LSAN 1
#endif

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int kvt_leaks(void)
{
#ifdef KVT_HAVE_LSAN
    return __lsan_do_recoverable_leak_check();
#else
    return 0;
#endif
}

int kvt_free_port(void)
{
    uint16_t port;
    return kvt_port_free(&port) == 0 ? port : -1;
}

int kvt_wait_port(int port, int timeout_ms)
{
    uint64_t end = kvt_now_ms() + (uint64_t)timeout_ms;
    while (kvt_now_ms() < end) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a;
        memset(&a, 0, sizeof a);
        a.sin_family = AF_INET;
        a.sin_port = htons((uint16_t)port);
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        int rc = connect(fd, (struct sockaddr *)&a, sizeof a);
        close(fd);
        if (rc == 0)
            return 0;
        kvt_sleep_ms(20);
    }
    return -1;
}

int kvt_wait_h2(int port, int timeout_ms)
{
    static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
                                  "\x00\x00\x00\x04\x00\x00\x00\x00\x00";
    uint64_t end = kvt_now_ms() + (uint64_t)timeout_ms;
    while (kvt_now_ms() < end) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a;
        memset(&a, 0, sizeof a);
        a.sin_family = AF_INET;
        a.sin_port = htons((uint16_t)port);
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        int ok = 0;
        if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
            write(fd, preface, sizeof preface - 1) == (ssize_t)(sizeof preface - 1)) {
            struct pollfd p = {fd, POLLIN, 0};
            char buf[64];
            ok = poll(&p, 1, 50) > 0 && read(fd, buf, sizeof buf) > 0;
        }
        close(fd);
        if (ok)
            return 0;
        kvt_sleep_ms(5);
    }
    return -1;
}

double kvt_metric(const struct kvt_server *s, const char *name, const char *filter)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)s->metrics_port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    const char *req = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (write(fd, req, strlen(req)) < 0) {
        close(fd);
        return -1;
    }
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (len + 4096 > cap) {
            cap *= 2;
            buf = realloc(buf, cap);
        }
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 3000) <= 0)
            break;
        ssize_t n = read(fd, buf + len, cap - len - 1);
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    close(fd);
    buf[len] = '\0';
    double sum = -1;
    size_t nl = strlen(name);
    for (char *line = buf; line && *line;) {
        char *next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        if (strncmp(line, name, nl) == 0 && (line[nl] == '{' || line[nl] == ' ') &&
            (!filter || strstr(line, filter))) {
            char *sp = strrchr(line, ' ');
            if (sp) {
                if (sum < 0)
                    sum = 0;
                sum += strtod(sp + 1, NULL);
            }
        }
        line = next;
    }
    free(buf);
    return sum;
}

double kvt_server_keepalives(const struct kvt_server *s)
{
    if (strcmp(s->kind, "kvd") == 0)
        return kvt_metric(s, "kvd_lease_keepalive_requests_total", NULL);
    return kvt_metric(s, "grpc_server_msg_received_total", "grpc_method=\"LeaseKeepAlive\"");
}

static void pick_kind(struct kvt_server *s)
{
    const char *k = getenv("KV_TEST_SERVER");
    const char *bd = getenv("KV_BUILD_DIR");
    char path[512];
    if (k && *k) {
        snprintf(s->kind, sizeof s->kind, "%s", k);
        return;
    }
    snprintf(path, sizeof path, "%s/server/kvd", bd ? bd : ".");
    snprintf(s->kind, sizeof s->kind, "%s", access(path, X_OK) == 0 ? "kvd" : "etcd");
}

static int spawn(struct kvt_server *s)
{
    char curl[64], purl[64], murl[64], cluster[96], log[300], bin[512];
    snprintf(curl, sizeof curl, "http://127.0.0.1:%d", s->client_port);
    snprintf(purl, sizeof purl, "http://127.0.0.1:%d", s->peer_port);
    snprintf(murl, sizeof murl, "http://127.0.0.1:%d", s->metrics_port);
    snprintf(cluster, sizeof cluster, "default=%s", purl);
    snprintf(log, sizeof log, "%s.log", s->dir);
    if (strcmp(s->kind, "kvd") == 0) {
        const char *bd = getenv("KV_BUILD_DIR");
        snprintf(bin, sizeof bin, "%s/server/kvd", bd ? bd : ".");
    } else {
        snprintf(bin, sizeof bin, "/usr/bin/etcd");
    }
    const char *kvd_argv[] = {bin,       "--name",
                              "default", "--data-dir",
                              s->dir,    "--listen-client-urls",
                              curl,      "--listen-peer-urls",
                              purl,      "--listen-metrics-urls",
                              murl,      NULL};
    const char *etcd_argv[] = {bin,       "--name",
                               "default", "--data-dir",
                               s->dir,    "--listen-client-urls",
                               curl,      "--advertise-client-urls",
                               curl,      "--listen-peer-urls",
                               purl,      "--initial-advertise-peer-urls",
                               purl,      "--initial-cluster",
                               cluster,   "--listen-metrics-urls",
                               murl,      NULL};
    /* tests/lib's launcher: log file, PR_SET_PDEATHSIG, signals and reaping. */
    kvt_proc_init(&s->proc, log);
    if (kvt_proc_spawn(&s->proc, strcmp(s->kind, "kvd") == 0 ? kvd_argv : etcd_argv) != 0)
        return -1;
    s->pid = s->proc.pid;
    return 0;
}

/* 1 if the server's log says a port was taken (kvd and etcd: "address already in use"). */
static int port_was_taken(const struct kvt_server *s)
{
    char path[300];
    snprintf(path, sizeof path, "%s.log", s->dir);
    char *log = kvt_file_read(path);
    int taken = kvt_log_port_taken(log);
    free(log);
    return taken;
}

/* One start on fresh ports: 0, -EADDRINUSE if the server exited because another process took
 * one of its ports between kvt_free_port and its bind (then the port may even answer the wait
 * below: it is that other process's), or -1. */
static int start_once(struct kvt_server *s)
{
    memset(s, 0, sizeof *s);
    pick_kind(s);
    snprintf(s->dir, sizeof s->dir, "/tmp/kvc-test-XXXXXX");
    if (!mkdtemp(s->dir)) {
        perror("mkdtemp");
        return -1;
    }
    s->client_port = kvt_free_port();
    s->peer_port = kvt_free_port();
    s->metrics_port = kvt_free_port();
    snprintf(s->endpoint, sizeof s->endpoint, "127.0.0.1:%d", s->client_port);
    if (spawn(s) != 0)
        return -1;
    if (kvt_wait_port(s->client_port, 15000) != 0) {
        fprintf(stderr, "server %s did not listen on %d (log %s.log)\n", s->kind, s->client_port,
                s->dir);
        return kvt_proc_alive(&s->proc) || !port_was_taken(s) ? -1 : -EADDRINUSE;
    }
    /* Listening is not serving: wait for a successful read. */
    kvc_client *c = kvt_client(s->endpoint);
    int rc = -1;
    for (int i = 0; i < 100 && rc != 0 && kvt_proc_alive(&s->proc); i++) {
        rc = kvc_get(c, "x", 1, NULL, 1000, NULL, NULL);
        if (rc != 0)
            kvt_sleep_ms(100);
    }
    kvc_close(c);
    if (rc == 0)
        return 0;
    if (!kvt_proc_alive(&s->proc) && port_was_taken(s))
        return -EADDRINUSE;
    fprintf(stderr, "server %s on %d did not serve a read (log %s.log)\n", s->kind, s->client_port,
            s->dir);
    return -1;
}

int kvt_server_start(struct kvt_server *s)
{
    for (int attempt = 0; attempt < 3; attempt++) {
        int rc = start_once(s);
        if (rc != -EADDRINUSE)
            return rc == 0 ? 0 : -1;
        fprintf(stderr, "server %s: a port was taken before it bound it; new ports\n", s->kind);
        kvt_server_stop(s);
    }
    return -1;
}

int kvt_server_restart(struct kvt_server *s)
{
    if (spawn(s) != 0)
        return -1;
    return kvt_wait_port(s->client_port, 15000);
}

void kvt_server_signal(struct kvt_server *s, int sig)
{
    if (s->pid <= 0)
        return;
    if (sig == SIGSTOP)
        kvt_proc_pause(&s->proc);
    else if (sig == SIGCONT)
        kvt_proc_resume(&s->proc);
    else if (sig == SIGKILL)
        kvt_proc_kill9(&s->proc);
    else
        kvt_proc_signal(&s->proc, sig);
    if (sig == SIGSTOP) {
        /* kill() returns before every thread has stopped: wait for state 'T'. */
        char path[64], buf[256];
        snprintf(path, sizeof path, "/proc/%d/stat", (int)s->pid);
        for (int i = 0; i < 200; i++) {
            FILE *f = fopen(path, "r");
            size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
            if (f)
                fclose(f);
            buf[n] = '\0';
            char *rp = strrchr(buf, ')');
            if (rp && rp[1] == ' ' && rp[2] == 'T')
                break;
            kvt_sleep_ms(5);
        }
    }
    if (sig == SIGTERM && kvt_proc_wait(&s->proc, 60000) != 0)
        kvt_proc_kill9(&s->proc);
    s->pid = s->proc.pid;
}

void kvt_server_stop(struct kvt_server *s)
{
    if (s->pid > 0) {
        kvt_proc_resume(&s->proc);
        kvt_server_signal(s, SIGKILL);
    }
    if (s->dir[0]) {
        char log[300];
        snprintf(log, sizeof log, "%s.log", s->dir);
        if (kvt_rmtree(s->dir) != 0 || kvt_rmtree(log) != 0)
            fprintf(stderr, "cleanup of %s failed\n", s->dir);
        s->dir[0] = '\0';
    }
}

/* Socket inodes of this process's fds. */
static int own_sockets(unsigned long *inodes, int max)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < max) {
        char path[300], link[64];
        snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
        ssize_t l = readlink(path, link, sizeof link - 1);
        if (l <= 0)
            continue;
        link[l] = '\0';
        unsigned long ino;
        if (sscanf(link, "socket:[%lu]", &ino) == 1)
            inodes[n++] = ino;
    }
    closedir(d);
    return n;
}

/* Counts each of our sockets once: /proc/net/tcp is produced a page at a time, and a socket
 * opened or closed elsewhere between two reads can shift the listing so that one of ours is
 * listed twice (CI once counted 3 for the one connection of test_client_threads, under load). */
static int count_in(const char *path, int port, const unsigned long *inodes, int ninodes)
{
    static unsigned char seen[4096];
    if (ninodes > (int)sizeof seen)
        ninodes = (int)sizeof seen;
    memset(seen, 0, (size_t)ninodes);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    char line[512];
    int n = 0;
    if (!fgets(line, sizeof line, f)) {
        fclose(f);
        return 0;
    }
    while (fgets(line, sizeof line, f)) {
        char local[80], remote[80];
        unsigned st;
        unsigned long ino;
        if (sscanf(line, "%*d: %79s %79s %x %*s %*s %*s %*s %*s %lu", local, remote, &st, &ino) !=
            4)
            continue;
        char *colon = strrchr(remote, ':');
        if (!colon)
            continue;
        unsigned rport = (unsigned)strtoul(colon + 1, NULL, 16);
        if (st != 1 || rport != (unsigned)port)
            continue;
        for (int i = 0; i < ninodes; i++)
            if (inodes[i] == ino) {
                n += !seen[i];
                seen[i] = 1;
                break;
            }
    }
    fclose(f);
    return n;
}

int kvt_count_established(int port)
{
    static unsigned long inodes[4096];
    int n = own_sockets(inodes, 4096);
    return count_in("/proc/net/tcp", port, inodes, n) + count_in("/proc/net/tcp6", port, inodes, n);
}

static int count_dir(const char *path)
{
    DIR *d = opendir(path);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n - (strcmp(path, "/proc/self/fd") == 0 ? 1 : 0); /* the DIR's own fd */
}

void kvt_warmup(void)
{
    kvc_client *c = kvt_client("127.0.0.1:1");
    kvc_close(c);
}

int kvt_count_fds(void)
{
    return count_dir("/proc/self/fd");
}

int kvt_count_threads(void)
{
    return count_dir("/proc/self/task");
}

int kvt_threads_settle(int expected, int timeout_ms)
{
    int n = kvt_count_threads();
    for (int waited = 0; n != expected && waited < timeout_ms; waited += 5) {
        poll(NULL, 0, 5);
        n = kvt_count_threads();
    }
    return n;
}

kvc_client *kvt_client(const char *endpoint)
{
    const char *eps[] = {endpoint};
    kvc_config cfg;
    kvc_config_default(&cfg);
    cfg.endpoints = eps;
    cfg.n_endpoints = 1;
    cfg.dial_timeout_ms = 3000;
    kvc_client *c = NULL;
    kvc_error e;
    if (kvc_open(&c, &cfg, &e) != 0) {
        fprintf(stderr, "kvc_open(%s): %s\n", endpoint, e.message);
        abort();
    }
    return c;
}

/* ---- fake servers ---- */

struct kvt_fake {
    int lfd;
    int mode;
    int wake[2];
    pthread_t th;
    int accepted;
    int conns[64];
    int nconns;
    pthread_mutex_t mu;
};

static void *fake_main(void *arg)
{
    struct kvt_fake *f = arg;
    for (;;) {
        struct pollfd p[2] = {{f->lfd, POLLIN, 0}, {f->wake[0], POLLIN, 0}};
        if (poll(p, 2, -1) < 0 && errno != EINTR)
            break;
        if (p[1].revents)
            break;
        if (!(p[0].revents & POLLIN))
            continue;
        int fd = accept(f->lfd, NULL, NULL);
        if (fd < 0)
            continue;
        pthread_mutex_lock(&f->mu);
        f->accepted++;
        pthread_mutex_unlock(&f->mu);
        if (f->mode == KVT_FAKE_CLOSE) {
            close(fd);
        } else if (f->mode == KVT_FAKE_HTTP1) {
            char buf[512];
            struct pollfd rp = {fd, POLLIN, 0};
            if (poll(&rp, 1, 1000) > 0 && read(fd, buf, sizeof buf) < 0)
                perror("fake read");
            const char *resp = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n"
                               "Connection: close\r\n\r\n";
            if (write(fd, resp, strlen(resp)) < 0)
                perror("fake write");
            close(fd);
        } else {
            pthread_mutex_lock(&f->mu);
            if (f->nconns < 64)
                f->conns[f->nconns++] = fd;
            else
                close(fd);
            pthread_mutex_unlock(&f->mu);
        }
    }
    return NULL;
}

struct kvt_fake *kvt_fake_start(int mode, int *port)
{
    struct kvt_fake *f = calloc(1, sizeof *f);
    f->mode = mode;
    pthread_mutex_init(&f->mu, NULL);
    f->lfd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(f->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t l = sizeof a;
    if (bind(f->lfd, (struct sockaddr *)&a, sizeof a) != 0 || listen(f->lfd, 16) != 0 ||
        getsockname(f->lfd, (struct sockaddr *)&a, &l) != 0 || pipe(f->wake) != 0) {
        perror("fake server");
        abort();
    }
    *port = ntohs(a.sin_port);
    pthread_create(&f->th, NULL, fake_main, f);
    return f;
}

int kvt_fake_accepted(struct kvt_fake *f)
{
    pthread_mutex_lock(&f->mu);
    int n = f->accepted;
    pthread_mutex_unlock(&f->mu);
    return n;
}

void kvt_fake_stop(struct kvt_fake *f)
{
    if (write(f->wake[1], "x", 1) < 0)
        perror("fake stop");
    pthread_join(f->th, NULL);
    for (int i = 0; i < f->nconns; i++)
        close(f->conns[i]);
    close(f->lfd);
    close(f->wake[0]);
    close(f->wake[1]);
    pthread_mutex_destroy(&f->mu);
    free(f);
}

uint8_t *kvt_lock_req(const char *name, int64_t lease, size_t *len)
{
    V3lockpb__LockRequest r = V3LOCKPB__LOCK_REQUEST__INIT;
    r.name.data = (uint8_t *)name;
    r.name.len = strlen(name);
    r.lease = lease;
    *len = v3lockpb__lock_request__get_packed_size(&r);
    uint8_t *b = malloc(*len ? *len : 1);
    if (b == NULL)
        abort(); /* a test helper: out of memory ends the test */
    v3lockpb__lock_request__pack(&r, b);
    return b;
}
