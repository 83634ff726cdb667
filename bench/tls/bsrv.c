/* bsrv: see bsrv.h. */
#include "bsrv.h"
#include "kvt_util.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

const char *bsrv_name(bsrv_kind k)
{
    return k == BSRV_KVD ? "kvd" : "etcd";
}

const char *bsrv_bin(bsrv_kind k, char *buf, size_t cap)
{
    const char *e = getenv(k == BSRV_KVD ? "KV_KVD_BIN" : "KV_ETCD_BIN");
    if (e && *e)
        return e;
    if (k == BSRV_ETCD)
        return "/usr/bin/etcd";
    const char *b = getenv("KV_BUILD_DIR");
    snprintf(buf, cap, "%s/server/kvd", b && *b ? b : "build");
    return buf;
}

const char *bsrv_etcdctl(void)
{
    const char *e = getenv("KV_ETCDCTL_BIN");
    return e && *e ? e : "/usr/bin/etcdctl";
}

double bsrv_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void bsrv_sleep_ms(uint32_t ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0)
        ;
}

/* Starts the server argv with kvt_proc, stdout and stderr appended to log_path after a line
 * with the whole command (a kept dir, KV_TEST_KEEP_DIRS=1, can be started again by hand). */
static int spawn(bsrv_server *s, const char *const *argv, const char *log_path)
{
    FILE *f = fopen(log_path, "a");
    if (f) {
        fputs("=== exec:", f);
        for (int i = 0; argv[i]; i++)
            fprintf(f, " %s", argv[i]);
        fputc('\n', f);
        fclose(f);
    }
    kvt_proc_init(&s->proc, log_path);
    s->proc.no_banner = 1; /* the line above says more */
    return kvt_proc_spawn(&s->proc, argv);
}

int bsrv_client(kvc_client **out, const bsrv_server *s, kvc_loop_group *g, const char *token,
                kvc_error *err)
{
    char ca[512];
    const char *ep[1] = {s->url};
    kvc_config cfg;
    kvc_config_default(&cfg);
    cfg.endpoints = ep;
    cfg.n_endpoints = 1;
    cfg.loop_group = g;
    cfg.auth_token = token;
    if (s->tls) {
        snprintf(ca, sizeof(ca), "%s/ca.pem", s->certdir);
        cfg.ca_file = ca;
    }
    return kvc_open(out, &cfg, err);
}

/* Builds the argv from s (kind, tls, certdir, data dir, urls, ports, extra), starts the
 * server and polls every poll_ms until a Range of one key answers, for up to timeout_s.
 * *serve_s (if non-NULL): seconds from the fork to that answer. */
static int launch(bsrv_server *s, double timeout_s, uint32_t poll_ms, double *serve_s, char *errbuf,
                  size_t errcap)
{
    const char *certdir = s->certdir;
    char bin[512], a_data[400], a_lc[128], a_ac[128], a_lp[128], a_iap[128], a_ic[160];
    char a_cert[600], a_key[600], a_ca[600], log[400];
    snprintf(a_data, sizeof(a_data), "--data-dir=%s", s->data_dir);
    snprintf(a_lc, sizeof(a_lc), "--listen-client-urls=%s", s->url);
    snprintf(a_ac, sizeof(a_ac), "--advertise-client-urls=%s", s->url);
    snprintf(a_lp, sizeof(a_lp), "--listen-peer-urls=http://127.0.0.1:%u", s->peer_port);
    snprintf(a_iap, sizeof(a_iap), "--initial-advertise-peer-urls=http://127.0.0.1:%u",
             s->peer_port);
    snprintf(a_ic, sizeof(a_ic), "--initial-cluster=b1=http://127.0.0.1:%u", s->peer_port);
    snprintf(a_cert, sizeof(a_cert), "--cert-file=%s/server.pem", certdir ? certdir : "");
    snprintf(a_key, sizeof(a_key), "--key-file=%s/server-key.pem", certdir ? certdir : "");
    snprintf(a_ca, sizeof(a_ca), "--trusted-ca-file=%s/ca.pem", certdir ? certdir : "");
    snprintf(log, sizeof(log), "%s/log", s->dir);
    const char *argv[40];
    int n = 0;
    argv[n++] = bsrv_bin(s->kind, bin, sizeof(bin));
    argv[n++] = "--name=b1";
    argv[n++] = a_data;
    argv[n++] = a_lc;
    argv[n++] = a_ac;
    argv[n++] = a_lp;
    argv[n++] = a_iap;
    argv[n++] = a_ic;
    argv[n++] = "--initial-cluster-state=new";
    if (s->tls) {
        argv[n++] = a_cert;
        argv[n++] = a_key;
        /* No --trusted-ca-file: etcd 3.4 then requires client certificates (mutual TLS)
         * even without --client-cert-auth; both servers run server-side TLS only. */
        (void)a_ca;
    }
    for (int i = 0; s->extra && s->extra[i] && n < 38; i++)
        argv[n++] = s->extra[i];
    argv[n] = NULL;
    double t0 = bsrv_now();
    int rc = spawn(s, argv, log);
    if (rc) {
        snprintf(errbuf, errcap, "start %s: %s", argv[0], strerror(-rc));
        return rc;
    }
    double deadline = t0 + timeout_s;
    while (bsrv_now() < deadline) {
        if (!kvt_proc_alive(&s->proc)) {
            snprintf(errbuf, errcap, "%s exited at start (see %s)", bsrv_name(s->kind), log);
            return -ECHILD;
        }
        kvc_client *c = NULL;
        kvc_error e;
        if (bsrv_client(&c, s, NULL, NULL, &e) == 0) {
            kvc_range_result r;
            int ok = kvc_get(c, "ready", 5, NULL, 1000, &r, &e) == 0;
            double t1 = bsrv_now();
            if (ok)
                kvc_range_result_free(&r);
            kvc_close(c);
            if (ok) {
                if (serve_s)
                    *serve_s = t1 - t0;
                return 0;
            }
        }
        bsrv_sleep_ms(poll_ms);
    }
    snprintf(errbuf, errcap, "%s did not answer within %.0f s (see %s)", bsrv_name(s->kind),
             timeout_s, log);
    return -ETIMEDOUT;
}

int bsrv_start(bsrv_server *s, bsrv_kind k, int tls, const char *certdir, const char *const *extra,
               char *errbuf, size_t errcap)
{
    memset(s, 0, sizeof(*s));
    s->kind = k;
    s->tls = tls;
    s->certdir = certdir;
    s->extra = extra;
    kvt_proc_init(&s->proc, NULL);
    char prefix[32];
    kvt_tmpdir d;
    snprintf(prefix, sizeof(prefix), "kvbench-%s", bsrv_name(k));
    int rc = kvt_tmpdir_create(&d, prefix);
    if (!rc && strlen(d.path) >= sizeof(s->dir)) {
        kvt_tmpdir_destroy(&d);
        rc = -ENAMETOOLONG;
    }
    if (rc) {
        snprintf(errbuf, errcap, "temp dir: %s", strerror(-rc));
        return rc;
    }
    snprintf(s->dir, sizeof(s->dir), "%s", d.path);
    snprintf(s->data_dir, sizeof(s->data_dir), "%s/data", s->dir);
    rc = kvt_port_free(&s->port);
    if (!rc)
        do
            rc = kvt_port_free(&s->peer_port);
        while (!rc && s->peer_port == s->port);
    if (rc) {
        snprintf(errbuf, errcap, "free port: %s", strerror(-rc));
        return rc;
    }
    const char *sch = tls ? "https" : "http";
    snprintf(s->url, sizeof(s->url), "%s://127.0.0.1:%u", sch, s->port);
    return launch(s, 30, 100, NULL, errbuf, errcap);
}

int bsrv_restart(bsrv_server *s, int kill9, double timeout_s, double *serve_s, char *errbuf,
                 size_t errcap)
{
    if (s->proc.pid <= 0 || !s->dir[0]) {
        snprintf(errbuf, errcap, "%s is not running", bsrv_name(s->kind));
        return -ESRCH;
    }
    int rc = 0;
    if (kill9) {
        kvt_proc_kill9(&s->proc);
    } else if (kvt_proc_signal(&s->proc, SIGTERM) == 0 &&
               kvt_proc_wait(&s->proc, 30000) == -ETIMEDOUT) {
        kvt_proc_kill9(&s->proc);
        rc = -ETIMEDOUT;
    }
    if (rc) {
        snprintf(errbuf, errcap, "%s did not exit within 30 s of SIGTERM", bsrv_name(s->kind));
        goto cleanup;
    }
    rc = launch(s, timeout_s, 5, serve_s, errbuf, errcap);
cleanup:
    return rc;
}

void bsrv_stop(bsrv_server *s)
{
    kvt_proc_term(&s->proc, 10000); /* SIGTERM, SIGKILL after 10 s; no-op if not running */
    if (s->dir[0]) {
        kvt_tmpdir d;
        snprintf(d.path, sizeof(d.path), "%s", s->dir);
        kvt_tmpdir_destroy(&d); /* kept with KV_TEST_KEEP_DIRS=1 */
    }
    s->dir[0] = 0;
}

int bsrv_etcdctl_run(const bsrv_server *s, const char *const *args, const char *out_path,
                     double *seconds)
{
    char ep[96], cacert[600], log[400];
    snprintf(ep, sizeof(ep), "--endpoints=%s", s->url);
    snprintf(cacert, sizeof(cacert), "--cacert=%s/ca.pem", s->certdir ? s->certdir : "");
    snprintf(log, sizeof(log), "%s/ctl.log", s->dir);
    const char *argv[32];
    int n = 0;
    argv[n++] = bsrv_etcdctl();
    argv[n++] = ep;
    argv[n++] = "--command-timeout=600s";
    argv[n++] = "--dial-timeout=10s";
    if (s->tls)
        argv[n++] = cacert;
    for (int i = 0; args[i] && n < 31; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    static const char *const env[] = {"ETCDCTL_API=3", NULL};
    kvt_proc p;
    kvt_proc_init(&p, out_path ? out_path : log);
    p.no_banner = 1; /* out_path holds the command's output only */
    double t0 = bsrv_now();
    int rc = kvt_proc_spawn_env(&p, argv, env);
    if (rc)
        return rc;
    if (kvt_proc_wait(&p, 700000) == -ETIMEDOUT) { /* --command-timeout=600s */
        kvt_proc_kill9(&p);
        return -ETIMEDOUT;
    }
    if (seconds)
        *seconds = bsrv_now() - t0;
    int st = p.last_status;
    return st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -EIO;
}

typedef struct dir_acc {
    uint64_t largest, total;
} dir_acc;

static int bsrv_dir_sizes_impl(const char *dir, dir_acc *acc)
{
    char p[1024];
    FILE *f;
    snprintf(p, sizeof(p), "find '%s' -type f -printf '%%s\\n' 2>/dev/null", dir);
    if (!(f = popen(p, "r")))
        return -errno;
    unsigned long long v;
    while (fscanf(f, "%llu", &v) == 1) {
        acc->total += v;
        if (v > acc->largest)
            acc->largest = v;
    }
    pclose(f);
    return 0;
}

int bsrv_dir_sizes(const char *dir, uint64_t *largest, uint64_t *total)
{
    dir_acc acc = {0, 0};
    int rc = bsrv_dir_sizes_impl(dir, &acc);
    *largest = acc.largest;
    *total = acc.total;
    return rc;
}

int bsrv_cpu(pid_t pid, double *seconds)
{
    char p[64], buf[2048];
    snprintf(p, sizeof(p), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(p, "r");
    if (!f)
        return -errno;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    char *q = strrchr(buf, ')');
    if (!q)
        return -EINVAL;
    unsigned long ut = 0, st = 0;
    /* fields after ") ": state(3) ... utime(14) stime(15) */
    if (sscanf(q + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
        return -EINVAL;
    *seconds = (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
    return 0;
}

int bsrv_samples_add(bsrv_samples *s, double ms)
{
    if (s->n == s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 4096;
        double *nv = realloc(s->v, nc * sizeof(*nv));
        if (!nv)
            return -ENOMEM;
        s->v = nv;
        s->cap = nc;
    }
    s->v[s->n++] = ms;
    return 0;
}

void bsrv_samples_merge(bsrv_samples *dst, const bsrv_samples *src)
{
    for (size_t i = 0; i < src->n; i++)
        if (bsrv_samples_add(dst, src->v[i]))
            return;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double bsrv_samples_pct(bsrv_samples *s, double pct)
{
    if (!s->n)
        return 0;
    qsort(s->v, s->n, sizeof(double), cmp_d);
    size_t i = (size_t)(pct / 100.0 * (double)(s->n - 1) + 0.5);
    return s->v[i < s->n ? i : s->n - 1];
}

double bsrv_samples_max(const bsrv_samples *s)
{
    double m = 0;
    for (size_t i = 0; i < s->n; i++)
        if (s->v[i] > m)
            m = s->v[i];
    return m;
}

void bsrv_samples_free(bsrv_samples *s)
{
    free(s->v);
    memset(s, 0, sizeof(*s));
}

double bsrv_median(double *v, size_t n)
{
    if (!n)
        return 0;
    qsort(v, n, sizeof(double), cmp_d);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}
