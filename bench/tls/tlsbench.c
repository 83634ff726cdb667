/*
 * tlsbench: kvd vs etcd 3.4, single members on loopback, in one run:
 *  - put throughput and p50/p99 with N clients (default 64) over h2c and over TLS;
 *  - new connections per second: open a client, one Range, close (TLS and h2c), T threads;
 *  - Authenticate/s with M concurrent clients once a root user exists and auth is enabled.
 * Not a test: prints figures (medians over --repeats, kvd and etcd interleaved, alternating
 * which goes first). Certificates are made at run time with tests/tls/gen_certs.sh.
 * Any failed call aborts the run with its error.
 */
#include "bsrv.h"
#include "rpc.pb-c.h"
#include "kvt_proc.h"
#include "kvt_util.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef KV_SOURCE_DIR
#define KV_SOURCE_DIR "."
#endif

typedef enum { OP_PUT, OP_AUTH, OP_CONN } op_kind;

typedef struct opts {
    double duration, warmup, auth_duration;
    int repeats, clients, conns, auth_clients, value_size, keyspace;
    int hs_threads[2];
} opts;

typedef struct run_res {
    double ops_s, p50, p99, cpu_us_per_op;
} run_res;

typedef struct shared {
    const opts *o;
    const bsrv_server *s;
    op_kind op;
    kvc_loop_group *group;
    double t_start, t_end; /* measured window */
    int per_thread;        /* OP_CONN: connections per thread */
    pthread_mutex_t mu;
    char err[300];
    int failed;
} shared;

typedef struct worker {
    shared *sh;
    int idx;
    uint64_t ops;
    bsrv_samples lat;
    pthread_t th;
} worker;

static void fail(shared *sh, const char *what, const kvc_error *e)
{
    pthread_mutex_lock(&sh->mu);
    if (!sh->failed)
        snprintf(sh->err, sizeof(sh->err), "%s: %d %s", what, e ? e->code : 0, e ? e->message : "");
    sh->failed = 1;
    pthread_mutex_unlock(&sh->mu);
}

static int auth_call(kvc_client *c, uint32_t tmo, kvc_error *e)
{
    Etcdserverpb__AuthenticateRequest rq = ETCDSERVERPB__AUTHENTICATE_REQUEST__INIT;
    rq.name = "root";
    rq.password = "pw";
    uint8_t buf[64];
    size_t len = etcdserverpb__authenticate_request__pack(&rq, buf);
    uint8_t *resp = NULL;
    size_t rl = 0;
    int rc = kvc_call_unary(c, "/etcdserverpb.Auth/Authenticate", buf, len, &resp, &rl, tmo, 0, e);
    if (rc == 0) {
        Etcdserverpb__AuthenticateResponse *r =
            etcdserverpb__authenticate_response__unpack(NULL, rl, resp);
        if (!r || !r->token || !*r->token) {
            snprintf(e->message, sizeof(e->message), "no token in AuthenticateResponse");
            rc = -EPROTO;
        }
        if (r)
            etcdserverpb__authenticate_response__free_unpacked(r, NULL);
    }
    kvc_free(resp);
    return rc;
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    shared *sh = w->sh;
    kvc_error e;
    char key[32];
    unsigned seed = (unsigned)(w->idx * 7919 + 1);
    if (sh->op == OP_CONN) {
        for (int i = 0; i < sh->per_thread && !sh->failed; i++) {
            kvc_client *c = NULL;
            double t0 = bsrv_now();
            if (bsrv_client(&c, sh->s, sh->group, NULL, &e)) {
                fail(sh, "kvc_open", &e);
                break;
            }
            kvc_range_result r;
            int rc = kvc_get(c, "hs", 2, NULL, 10000, &r, &e);
            if (rc == 0)
                kvc_range_result_free(&r);
            kvc_close(c);
            if (rc) {
                fail(sh, "range on a new connection", &e);
                break;
            }
            bsrv_samples_add(&w->lat, (bsrv_now() - t0) * 1e3);
            w->ops++;
        }
        return NULL;
    }
    kvc_client *c = NULL;
    if (bsrv_client(&c, sh->s, sh->group, NULL, &e)) {
        fail(sh, "kvc_open", &e);
        return NULL;
    }
    char *val = malloc((size_t)sh->o->value_size);
    memset(val, 'v', (size_t)sh->o->value_size);
    while (bsrv_now() < sh->t_start - sh->o->warmup)
        bsrv_sleep_ms(1);
    for (;;) {
        double t0 = bsrv_now();
        if (t0 >= sh->t_end || sh->failed)
            break;
        int rc;
        if (sh->op == OP_PUT) {
            int n = snprintf(key, sizeof(key), "bench/%08d", rand_r(&seed) % sh->o->keyspace);
            kvc_put_result r;
            rc = kvc_put(c, key, (size_t)n, val, (size_t)sh->o->value_size, NULL, 10000, &r, &e);
            if (rc == 0)
                kvc_put_result_free(&r);
        } else {
            rc = auth_call(c, 30000, &e);
        }
        if (rc) {
            fail(sh, sh->op == OP_PUT ? "put" : "Authenticate", &e);
            break;
        }
        double t1 = bsrv_now();
        /* a call counts when it completes inside the window (Authenticate takes ~1 s) */
        if (t1 >= sh->t_start && t1 <= sh->t_end) {
            w->ops++;
            bsrv_samples_add(&w->lat, (t1 - t0) * 1e3);
        }
    }
    free(val);
    kvc_close(c);
    return NULL;
}

/* One closed-loop run of op with n threads against s. */
static int run(const opts *o, const bsrv_server *s, op_kind op, int n, int conns, run_res *out,
               char *err, size_t errcap)
{
    shared sh = {.o = o, .s = s, .op = op};
    pthread_mutex_init(&sh.mu, NULL);
    kvc_error e;
    if (kvc_loop_group_new(&sh.group, &e)) {
        snprintf(err, errcap, "loop group: %s", e.message);
        return -ENOMEM;
    }
    worker *w = calloc((size_t)n, sizeof(*w));
    double now = bsrv_now();
    sh.t_start = now + 0.5 + o->warmup; /* 0.5 s to connect */
    double dur = op == OP_AUTH ? o->auth_duration : o->duration;
    sh.t_end = sh.t_start + dur;
    sh.per_thread = conns / n;
    double cpu0 = 0, cpu1 = 0, t0 = bsrv_now();
    if (op == OP_CONN)
        bsrv_cpu(s->proc.pid, &cpu0);
    for (int i = 0; i < n; i++) {
        w[i].sh = &sh;
        w[i].idx = i;
        pthread_create(&w[i].th, NULL, worker_main, &w[i]);
    }
    if (op != OP_CONN) {
        while (bsrv_now() < sh.t_start)
            bsrv_sleep_ms(1);
        bsrv_cpu(s->proc.pid, &cpu0);
        while (bsrv_now() < sh.t_end)
            bsrv_sleep_ms(1);
        bsrv_cpu(s->proc.pid, &cpu1);
    }
    bsrv_samples all = {0};
    uint64_t ops = 0;
    for (int i = 0; i < n; i++) {
        pthread_join(w[i].th, NULL);
        ops += w[i].ops;
        bsrv_samples_merge(&all, &w[i].lat);
        bsrv_samples_free(&w[i].lat);
    }
    double secs = dur;
    if (op == OP_CONN) {
        secs = bsrv_now() - t0;
        bsrv_cpu(s->proc.pid, &cpu1);
    }
    out->ops_s = (double)ops / secs;
    out->p50 = bsrv_samples_pct(&all, 50);
    out->p99 = bsrv_samples_pct(&all, 99);
    out->cpu_us_per_op = ops ? (cpu1 - cpu0) * 1e6 / (double)ops : 0;
    bsrv_samples_free(&all);
    free(w);
    kvc_loop_group_free(sh.group);
    pthread_mutex_destroy(&sh.mu);
    if (sh.failed) {
        snprintf(err, errcap, "%s %s: %s", bsrv_name(s->kind), s->tls ? "TLS" : "h2c", sh.err);
        return -EIO;
    }
    return 0;
}

#define MAXR 15
enum { S_KVD_H2C, S_KVD_TLS, S_ETCD_H2C, S_ETCD_TLS, NSRV };
enum { M_PUT, M_CONN1, M_CONN2, M_AUTH, NMET };
static const char *const srv_label[NSRV] = {"kvd h2c", "kvd TLS", "etcd h2c", "etcd TLS"};

typedef struct cell {
    run_res r[MAXR];
    int n;
} cell;

static double med(cell *c, int field)
{
    double v[MAXR];
    for (int i = 0; i < c->n; i++)
        v[i] = field == 0   ? c->r[i].ops_s
               : field == 1 ? c->r[i].p50
               : field == 2 ? c->r[i].p99
                            : c->r[i].cpu_us_per_op;
    return bsrv_median(v, (size_t)c->n);
}

static void usage(void)
{
    fprintf(stderr,
            "tlsbench [--duration S(5)] [--warmup S(1)] [--repeats N(3)] [--clients N(64)]\n"
            "         [--conns N(400)] [--hs-threads A,B(1,4)] [--auth-clients M(16)]\n"
            "         [--auth-duration S(10)] [--value-size B(256)] [--keyspace N(10000)]\n");
}

int main(int argc, char **argv)
{
    opts o = {.duration = 5,
              .warmup = 1,
              .auth_duration = 10,
              .repeats = 3,
              .clients = 64,
              .conns = 400,
              .auth_clients = 16,
              .value_size = 256,
              .keyspace = 10000,
              .hs_threads = {1, 4}};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            usage();
            return 2;
        }
        if (!strcmp(a, "--duration"))
            o.duration = atof(v);
        else if (!strcmp(a, "--auth-duration"))
            o.auth_duration = atof(v);
        else if (!strcmp(a, "--warmup"))
            o.warmup = atof(v);
        else if (!strcmp(a, "--repeats"))
            o.repeats = atoi(v);
        else if (!strcmp(a, "--clients"))
            o.clients = atoi(v);
        else if (!strcmp(a, "--conns"))
            o.conns = atoi(v);
        else if (!strcmp(a, "--hs-threads"))
            sscanf(v, "%d,%d", &o.hs_threads[0], &o.hs_threads[1]);
        else if (!strcmp(a, "--auth-clients"))
            o.auth_clients = atoi(v);
        else if (!strcmp(a, "--value-size"))
            o.value_size = atoi(v);
        else if (!strcmp(a, "--keyspace"))
            o.keyspace = atoi(v);
        else {
            usage();
            return 2;
        }
        i++;
    }
    if (o.repeats < 1 || o.repeats > MAXR || o.clients < 1 || o.keyspace < 1 || o.value_size < 1 ||
        o.hs_threads[0] < 1 || o.hs_threads[1] < 1 || o.auth_clients < 1) {
        usage();
        return 2;
    }
    char script[1024], err[512];
    kvt_tmpdir certs; /* removed at the end (kept with KV_TEST_KEEP_DIRS=1) */
    int trc = kvt_tmpdir_create(&certs, "tlsbench-certs");
    if (trc) {
        fprintf(stderr, "tlsbench: temp dir: %s\n", strerror(-trc));
        return 1;
    }
    const char *certdir = certs.path;
    snprintf(script, sizeof(script), "%s/tests/tls/gen_certs.sh", KV_SOURCE_DIR);
    const char *gen[] = {"/bin/sh", script, certdir, NULL};
    kvt_cmd_result gr = {0};
    trc = kvt_run(gen, NULL, NULL, 0, 60000, &gr);
    if (trc || gr.timed_out || gr.exit_code != 0) {
        fprintf(stderr, "tlsbench: sh %s %s failed (%d, exit %d): %s\n", script, certdir, trc,
                gr.exit_code, gr.err ? gr.err : "");
        kvt_cmd_result_free(&gr);
        kvt_tmpdir_destroy(&certs);
        return 1;
    }
    kvt_cmd_result_free(&gr);
    bsrv_server srv[NSRV];
    memset(srv, 0, sizeof(srv));
    int rc = 0;
    for (int i = 0; i < NSRV && !rc; i++) {
        rc = bsrv_start(&srv[i], i < S_ETCD_H2C ? BSRV_KVD : BSRV_ETCD,
                        i == S_KVD_TLS || i == S_ETCD_TLS, certdir, NULL, err, sizeof(err));
        if (rc)
            fprintf(stderr, "tlsbench: start %s: %s\n", srv_label[i], err);
    }
    static cell cells[NSRV][NMET];
    printf("tlsbench: %d clients put %d B values, %.0f s (+%.0f s warm-up) x %d repeats; "
           "%d new connections with %d and %d threads; Authenticate with %d clients for %.0f s\n",
           o.clients, o.value_size, o.duration, o.warmup, o.repeats, o.conns, o.hs_threads[0],
           o.hs_threads[1], o.auth_clients, o.auth_duration);
    fflush(stdout);
    for (int r = 0; r < o.repeats && !rc; r++) {
        for (int k = 0; k < NSRV && !rc; k++) {
            /* alternate kvd first / etcd first */
            int si = (r % 2) ? (k + 2) % NSRV : k;
            run_res res;
            rc = run(&o, &srv[si], OP_PUT, o.clients, 0, &res, err, sizeof(err));
            if (rc)
                break;
            cells[si][M_PUT].r[cells[si][M_PUT].n++] = res;
            printf("  repeat %d %-8s put %d clients: %9.0f ops/s p50 %6.2f ms p99 %6.2f ms "
                   "CPU %5.0f us/op\n",
                   r + 1, srv_label[si], o.clients, res.ops_s, res.p50, res.p99, res.cpu_us_per_op);
            fflush(stdout);
            for (int t = 0; t < 2 && !rc; t++) {
                rc = run(&o, &srv[si], OP_CONN, o.hs_threads[t], o.conns, &res, err, sizeof(err));
                if (rc)
                    break;
                cells[si][M_CONN1 + t].r[cells[si][M_CONN1 + t].n++] = res;
                printf("  repeat %d %-8s new connection + Range, %d thread(s): %7.0f /s p50 "
                       "%6.2f ms p99 %6.2f ms CPU %5.0f us/conn\n",
                       r + 1, srv_label[si], o.hs_threads[t], res.ops_s, res.p50, res.p99,
                       res.cpu_us_per_op);
                fflush(stdout);
            }
        }
    }
    /* Authenticate: root user + auth enable on the TLS members (etcdctl), then M clients. */
    for (int si = S_KVD_TLS; si < NSRV && !rc; si += 2) {
        const char *ua[] = {"user", "add", "root:pw", "--interactive=false", NULL};
        const char *ae[] = {"auth", "enable", NULL};
        if (bsrv_etcdctl_run(&srv[si], ua, NULL, NULL) ||
            bsrv_etcdctl_run(&srv[si], ae, NULL, NULL)) {
            fprintf(stderr,
                    "tlsbench: etcdctl user add / auth enable failed on %s (see %s/ctl.log)\n",
                    srv_label[si], srv[si].dir);
            rc = -EIO;
        }
    }
    for (int r = 0; r < o.repeats && !rc; r++) {
        for (int k = 0; k < 2 && !rc; k++) {
            int si = ((r + k) % 2) ? S_ETCD_TLS : S_KVD_TLS;
            run_res res;
            rc = run(&o, &srv[si], OP_AUTH, o.auth_clients, 0, &res, err, sizeof(err));
            if (rc)
                break;
            cells[si][M_AUTH].r[cells[si][M_AUTH].n++] = res;
            printf("  repeat %d %-8s Authenticate, %d clients: %7.0f /s p50 %7.2f ms p99 %7.2f "
                   "ms CPU %6.0f us/op\n",
                   r + 1, srv_label[si], o.auth_clients, res.ops_s, res.p50, res.p99,
                   res.cpu_us_per_op);
            fflush(stdout);
        }
    }
    for (int i = 0; i < NSRV; i++)
        bsrv_stop(&srv[i]);
    kvt_tmpdir_destroy(&certs);
    if (rc) {
        fprintf(stderr, "tlsbench: %s\n", err);
        return 1;
    }
    /* medians */
    double put[NSRV], p99[NSRV], p50[NSRV], cpu[NSRV], c1[NSRV], c2[NSRV], c1cpu[NSRV], au[NSRV],
        aup99[NSRV], aucpu[NSRV];
    for (int i = 0; i < NSRV; i++) {
        put[i] = med(&cells[i][M_PUT], 0);
        p50[i] = med(&cells[i][M_PUT], 1);
        p99[i] = med(&cells[i][M_PUT], 2);
        cpu[i] = med(&cells[i][M_PUT], 3);
        c1[i] = med(&cells[i][M_CONN1], 0);
        c1cpu[i] = med(&cells[i][M_CONN1], 3);
        c2[i] = med(&cells[i][M_CONN2], 0);
        au[i] = cells[i][M_AUTH].n ? med(&cells[i][M_AUTH], 0) : 0;
        aup99[i] = cells[i][M_AUTH].n ? med(&cells[i][M_AUTH], 2) : 0;
        aucpu[i] = cells[i][M_AUTH].n ? med(&cells[i][M_AUTH], 3) : 0;
    }
    double kcost = 1 - put[S_KVD_TLS] / put[S_KVD_H2C];
    double ecost = 1 - put[S_ETCD_TLS] / put[S_ETCD_H2C];
    double ratio = put[S_KVD_TLS] / put[S_ETCD_TLS];
    printf("\nMedians over %d repeats (%d clients; new connections: %d each)\n\n", o.repeats,
           o.clients, o.conns);
    printf("| | kvd | etcd 3.4 | kvd/etcd | target |\n|---|---|---|---|---|\n");
    printf("| put, %d clients, h2c, ops/s | %.0f | %.0f | %.2f | |\n", o.clients, put[S_KVD_H2C],
           put[S_ETCD_H2C], put[S_KVD_H2C] / put[S_ETCD_H2C]);
    printf("| put, %d clients, TLS, ops/s | %.0f | %.0f | %.2f | >= 2: **%s** |\n", o.clients,
           put[S_KVD_TLS], put[S_ETCD_TLS], ratio, ratio >= 2 ? "met" : "missed");
    printf("| TLS cost (1 - TLS/h2c put ops/s) | %.1f %% | %.1f %% | | kvd <= 15 %%: **%s** |\n",
           kcost * 100, ecost * 100, kcost <= 0.15 ? "met" : "missed");
    printf("| put p50 / p99, h2c | %.2f / %.2f ms | %.2f / %.2f ms | %.2f / %.2f | |\n",
           p50[S_KVD_H2C], p99[S_KVD_H2C], p50[S_ETCD_H2C], p99[S_ETCD_H2C],
           p50[S_KVD_H2C] / p50[S_ETCD_H2C], p99[S_KVD_H2C] / p99[S_ETCD_H2C]);
    printf("| put p50 / p99, TLS | %.2f / %.2f ms | %.2f / %.2f ms | %.2f / %.2f | |\n",
           p50[S_KVD_TLS], p99[S_KVD_TLS], p50[S_ETCD_TLS], p99[S_ETCD_TLS],
           p50[S_KVD_TLS] / p50[S_ETCD_TLS], p99[S_KVD_TLS] / p99[S_ETCD_TLS]);
    printf("| server CPU per put, h2c / TLS | %.0f / %.0f us | %.0f / %.0f us | %.2f / %.2f | |\n",
           cpu[S_KVD_H2C], cpu[S_KVD_TLS], cpu[S_ETCD_H2C], cpu[S_ETCD_TLS],
           cpu[S_KVD_H2C] / cpu[S_ETCD_H2C], cpu[S_KVD_TLS] / cpu[S_ETCD_TLS]);
    printf("| new TLS connections/s (handshake + 1 Range), %d / %d thread(s) | %.0f / %.0f | "
           "%.0f / %.0f | %.2f / %.2f | |\n",
           o.hs_threads[0], o.hs_threads[1], c1[S_KVD_TLS], c2[S_KVD_TLS], c1[S_ETCD_TLS],
           c2[S_ETCD_TLS], c1[S_KVD_TLS] / c1[S_ETCD_TLS], c2[S_KVD_TLS] / c2[S_ETCD_TLS]);
    printf("| new h2c connections/s (reference), %d / %d thread(s) | %.0f / %.0f | %.0f / %.0f | "
           "%.2f / %.2f | |\n",
           o.hs_threads[0], o.hs_threads[1], c1[S_KVD_H2C], c2[S_KVD_H2C], c1[S_ETCD_H2C],
           c2[S_ETCD_H2C], c1[S_KVD_H2C] / c1[S_ETCD_H2C], c2[S_KVD_H2C] / c2[S_ETCD_H2C]);
    printf("| server CPU per new TLS connection (1 thread) | %.0f us | %.0f us | %.2f | |\n",
           c1cpu[S_KVD_TLS], c1cpu[S_ETCD_TLS], c1cpu[S_KVD_TLS] / c1cpu[S_ETCD_TLS]);
    printf("| Authenticate/s, %d clients, TLS | %.1f | %.1f | %.2f | |\n", o.auth_clients,
           au[S_KVD_TLS], au[S_ETCD_TLS], au[S_KVD_TLS] / au[S_ETCD_TLS]);
    printf(
        "| Authenticate p99 / server CPU per call | %.0f ms / %.0f us | %.0f ms / %.0f us | | |\n",
        aup99[S_KVD_TLS], aucpu[S_KVD_TLS], aup99[S_ETCD_TLS], aucpu[S_ETCD_TLS]);
    return 0;
}
