/* harness: see harness.h. */
#include "harness.h"
#include "grpc_raw.h"
#include "kvt_proc.h"
#include "kvt_util.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

uint64_t kv_it_now_ms(void)
{
    return kvt_now_ms();
}

static void sleep_ms(unsigned ms)
{
    kvt_sleep_ms(ms);
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
    return kvt_port_free(port);
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

int kv_it_server_alive(kv_it_server *s)
{
    int alive = kvt_proc_alive(&s->proc);
    s->pid = s->proc.pid;
    return alive;
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
            /* auth enabled: an anonymous Range is refused, but it was served */
            if (rc == KV_IT_GRPC_STATUS && (status == 3 || status == 7 || status == 16))
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
        int in_use = kv_it_server_log(s, &log) == 0 && kvt_log_port_taken(log);
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

    struct stat st;
    s->log_offset = stat(s->log_path, &st) == 0 ? st.st_size : 0;
    kvt_proc_init(&s->proc, s->log_path);
    s->proc.no_banner = 1; /* kv_it_server_log() returns exactly the server's output */
    int rc0 = kvt_proc_spawn(&s->proc, argv);
    if (rc0)
        return rc0;
    s->pid = s->proc.pid;
    int rc = kv_it_server_wait_ready(s, ready_timeout_ms);
    if (rc) {
        kv_it_server_kill9(s);
        return rc;
    }
    return 0;
}

int kv_it_server_stop(kv_it_server *s, uint32_t grace_ms)
{
    int rc = kvt_proc_term(&s->proc, grace_ms);
    s->pid = s->proc.pid;
    return rc;
}

int kv_it_server_kill9(kv_it_server *s)
{
    int rc = kvt_proc_kill9(&s->proc);
    s->pid = s->proc.pid;
    return rc;
}

void kv_it_server_destroy(kv_it_server *s)
{
    kv_it_server_stop(s, 5000);
    if (s->dir[0] && !getenv("KV_TEST_KEEP_DIRS"))
        kvt_rmtree(s->dir);
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

int kv_it_run(const char *const *argv, const char *const *env_add, const void *stdin_data,
              size_t stdin_len, uint32_t timeout_ms, kv_it_cmd_result *res)
{
    return kvt_run(argv, env_add, stdin_data, stdin_len, timeout_ms, res);
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
    kvt_cmd_result_free(res);
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

int kv_it_http_get(uint16_t port, const char *path, uint32_t timeout_ms, int *status, char **body)
{
    return kvt_http_get(port, path, timeout_ms, status, body);
}

int kv_it_metric_value(const char *text, const char *series, double *value)
{
    return kvt_metric_value(text, series, value);
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
    int fd = kvt_connect_loopback(port, timeout_ms);
    if (fd < 0)
        return fd;
    int rc = kvt_send_all(fd, data, len, deadline);
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
