/*
 * clusterbench: kvd against etcd 3.4 as 3-member clusters on loopback.
 * In one run, for each repeat (alternating which server goes first): starts a fresh
 * 3-member cluster, preloads keys, runs put with 1, 64 and 256 clients and a linearizable
 * range with 64 clients (clients spread round-robin over the members), then stops it; then
 * a fresh single member for put with 1 and 64 clients. The disk's fdatasync floor is measured
 * before the first run and after the last (bench/wal/floor.h). Prints the medians as a
 * markdown table with kvd/etcd ratios and the write path's targets (the 1-client put also
 * against the floor), plus syncs per committed write, peer TCP connections and RSS per
 * member. Not a test. See bench/README.md. Usage: clusterbench --help.
 */
#include "cluster.h"
#include "floor.h"
#include "harness.h"
#include "kvt_util.h"
#include "loader.h"
#include "rpc_client.h"
#include "workload.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_REPEATS 15
#define N_SERVERS 2 /* index: kv_it_kind (KV_IT_KVD = 0, KV_IT_ETCD = 1) */

/* Workloads; the first N_CLUSTER_WORK run on the cluster, the last on a single member. */
enum { W_PUT1, W_PUT64, W_PUT256, W_RANGE64, W_SINGLE_PUT1, W_SINGLE_PUT64, N_WORK };
#define N_CLUSTER_WORK W_SINGLE_PUT1

static const struct {
    kv_bench_kind kind;
    uint32_t clients;
    const char *label;
} work[N_WORK] = {
    {KV_BENCH_PUT, 1, "put, 1 client"},
    {KV_BENCH_PUT, 64, "put, 64 clients"},
    {KV_BENCH_PUT, 256, "put, 256 clients"},
    {KV_BENCH_RANGE, 64, "linearizable range, 64 clients"},
    {KV_BENCH_PUT, 1, "single member, put, 1 client"},
    {KV_BENCH_PUT, 64, "single member, put, 64 clients"},
};

typedef struct opts {
    uint32_t duration_ms, warmup_ms, repeats, keyspace, value_size, start_timeout_ms;
    int members;
    int do_server[N_SERVERS];
    int do_single;
    int serializable;             /* the range workload reads serializably */
    int client_threads;           /* --client-threads */
    const char *extra[N_SERVERS]; /* --kvd-args / --etcd-args */
    int one_on_leader;            /* 1-client runs talk to the leader (default: a follower) */
} opts;

typedef struct cell {
    kv_bench_result runs[MAX_REPEATS];
    double syncs[MAX_REPEATS]; /* syncs per put per member; NAN when unknown */
    int n;
    int failed; /* a run failed (error printed) */
} cell;

/* Per server: what the cluster runs observed. */
typedef struct server_stats {
    int cluster_runs;                              /* cluster repeats that ran workloads */
    double rss_mb[MAX_REPEATS][KV_BC_MAX_MEMBERS]; /* per cluster run, per member, at the end */
    int peer_max[MAX_REPEATS];                     /* most peer connections at once */
    int peer_distinct[MAX_REPEATS];                /* distinct peer connections seen */
    int peer_samples[MAX_REPEATS];
    int single_runs;
    double single_rss_mb[MAX_REPEATS];
    int cluster_down; /* did not start: skipped from then on */
    int single_down;
    char cluster_why[1024];
} server_stats;

/* Samples the peer connections of the current cluster every 500 ms. */
typedef struct sampler {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    kv_bc_cluster *c; /* NULL: idle */
    int stop;
} sampler;

/* Sync-counter window around one measured run. */
typedef struct sync_window {
    kv_bc_cluster *c;
    double before, after;
    int ok_before, ok_after;
} sync_window;

static const char *wlabel(const opts *o, int w)
{
    return w == W_RANGE64 && o->serializable ? "serializable range, 64 clients" : work[w].label;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: clusterbench [options]\n"
               "  --duration S      seconds per measured run (default 5)\n"
               "  --warmup S        unmeasured seconds before each run (default 1)\n"
               "  --repeats N       runs per cell, medians printed (default 3, max 15)\n"
               "  --members N       cluster size (default 3; 1..5)\n"
               "  --keyspace N      keys preloaded and addressed by put/range (default 10000)\n"
               "  --value-size N    bytes per value (default 256)\n"
               "  --server kvd|etcd|both   (default both; etcd only if found)\n"
               "  --no-single       skip the single-member put\n"
               "  --serializable    range reads are serializable (default linearizable)\n"
               "  --client-threads  one thread per client making synchronous calls (default:\n"
               "                    all clients on one I/O thread, each completion issuing\n"
               "                    the next call: the cheapest client for the servers' CPU)\n"
               "  --one-client leader|follower  member of the 1-client cluster runs\n"
               "                    (default follower: its writes are forwarded)\n"
               "  --kvd-args 'A B'  more flags for every kvd member (split on blanks)\n"
               "  --etcd-args 'A B' more flags for every etcd member\n"
               "  --start-timeout S seconds for a cluster to elect a leader (default 30)\n"
               "Binaries: kvd from $KV_BUILD_DIR/server/kvd (or $KV_KVD_BIN), etcd from\n"
               "$KV_ETCD_BIN or /usr/bin/etcd. Peer connections are counted with ss(8).\n");
}

static int parse_opts(int argc, char **argv, opts *o)
{
    *o = (opts){.duration_ms = 5000,
                .warmup_ms = 1000,
                .repeats = 3,
                .keyspace = 10000,
                .value_size = 256,
                .start_timeout_ms = 30000,
                .members = 3,
                .do_server = {1, 1},
                .do_single = 1};
    static const struct option lo[] = {{"duration", required_argument, NULL, 'd'},
                                       {"warmup", required_argument, NULL, 'w'},
                                       {"repeats", required_argument, NULL, 'r'},
                                       {"members", required_argument, NULL, 'm'},
                                       {"keyspace", required_argument, NULL, 'k'},
                                       {"value-size", required_argument, NULL, 'v'},
                                       {"server", required_argument, NULL, 's'},
                                       {"no-single", no_argument, NULL, 'N'},
                                       {"serializable", no_argument, NULL, 'S'},
                                       {"client-threads", no_argument, NULL, 'T'},
                                       {"kvd-args", required_argument, NULL, 'K'},
                                       {"one-client", required_argument, NULL, 'O'},
                                       {"etcd-args", required_argument, NULL, 'E'},
                                       {"start-timeout", required_argument, NULL, 't'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
    int ch;
    while ((ch = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        switch (ch) {
        case 'd':
            o->duration_ms = (uint32_t)(atof(optarg) * 1000);
            break;
        case 'w':
            o->warmup_ms = (uint32_t)(atof(optarg) * 1000);
            break;
        case 'r':
            o->repeats = (uint32_t)atoi(optarg);
            break;
        case 'm':
            o->members = atoi(optarg);
            break;
        case 'k':
            o->keyspace = (uint32_t)atoi(optarg);
            break;
        case 'v':
            o->value_size = (uint32_t)atoi(optarg);
            break;
        case 's':
            o->do_server[KV_IT_KVD] = strcmp(optarg, "etcd") != 0;
            o->do_server[KV_IT_ETCD] = strcmp(optarg, "kvd") != 0;
            break;
        case 'N':
            o->do_single = 0;
            break;
        case 'S':
            o->serializable = 1;
            break;
        case 'T':
            o->client_threads = 1;
            break;
        case 'O':
            if (strcmp(optarg, "leader") && strcmp(optarg, "follower")) {
                fprintf(stderr, "clusterbench: --one-client leader|follower\n");
                return -EINVAL;
            }
            o->one_on_leader = strcmp(optarg, "leader") == 0;
            break;
        case 'K':
            o->extra[KV_IT_KVD] = optarg;
            break;
        case 'E':
            o->extra[KV_IT_ETCD] = optarg;
            break;
        case 't':
            o->start_timeout_ms = (uint32_t)(atof(optarg) * 1000);
            break;
        case 'h':
            usage(stdout);
            exit(0);
        default:
            usage(stderr);
            return -EINVAL;
        }
    }
    if (o->repeats < 1 || o->repeats > MAX_REPEATS || o->keyspace < 1 || o->value_size < 1 ||
        o->duration_ms < 100 || o->members < 1 || o->members > KV_BC_MAX_MEMBERS ||
        o->start_timeout_ms < 1000) {
        fprintf(stderr, "clusterbench: bad option values (repeats 1..%d, members 1..%d)\n",
                MAX_REPEATS, KV_BC_MAX_MEMBERS);
        return -EINVAL;
    }
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median of v[0..n) ignoring NANs; NAN if none. */
static double median(const double *in, int n)
{
    double v[MAX_REPEATS];
    int k = 0;
    for (int i = 0; i < n; i++)
        if (!isnan(in[i]))
            v[k++] = in[i];
    if (!k)
        return NAN;
    qsort(v, (size_t)k, sizeof(double), cmp_double);
    return k % 2 ? v[k / 2] : (v[k / 2 - 1] + v[k / 2]) / 2;
}

static double cell_median(const cell *c, size_t off)
{
    double v[MAX_REPEATS];
    for (int i = 0; i < c->n; i++)
        v[i] = *(const double *)((const char *)&c->runs[i] + off);
    return median(v, c->n);
}

#define MED(c, field) cell_median((c), offsetof(kv_bench_result, field))

static void *sampler_main(void *arg)
{
    sampler *s = arg;
    pthread_mutex_lock(&s->mu);
    while (!s->stop) {
        if (s->c)
            kv_bc_peer_sample(s->c);
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 500 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static void sampler_set(sampler *s, kv_bc_cluster *c)
{
    pthread_mutex_lock(&s->mu);
    s->c = c;
    if (c)
        kv_bc_peer_sample(c);
    pthread_mutex_unlock(&s->mu);
}

/* Syncs so far, summed over members: kvd_fsyncs_total for kvd; for etcd its WAL fsyncs plus
 * its backend (bbolt) commits. -ENOENT when the counter is missing. */
static int sync_count(kv_bc_cluster *c, double *v)
{
    if (c->kind == KV_IT_KVD)
        return kv_bc_metric_sum(c, "kvd_fsyncs_total", v);
    double wal = 0, be = 0;
    int rc = kv_bc_metric_sum(c, "etcd_disk_wal_fsync_duration_seconds_count", &wal);
    if (rc == 0)
        rc = kv_bc_metric_sum(c, "etcd_disk_backend_commit_duration_seconds_count", &be);
    *v = wal + be;
    return rc;
}

static void window_cb(void *arg, int begin)
{
    sync_window *w = arg;
    if (begin)
        w->ok_before = sync_count(w->c, &w->before) == 0;
    else
        w->ok_after = sync_count(w->c, &w->after) == 0;
}

static int preload(kv_bc_cluster *c, uint32_t n, uint32_t value_size)
{
    char err[256] = "";
    kv_it_load_opts lo = {.endpoint = c->endpoints[0],
                          .prefix = "bench/",
                          .n_keys = n,
                          .value_size = value_size,
                          .seed = 1,
                          .threads = 4,
                          .batch = 100,
                          .timeout_ms = 60000};
    int rc = kv_it_load(&lo, NULL, err, sizeof(err));
    if (rc)
        fprintf(stderr, "clusterbench: preload %u keys into %s: %s\n", n, kv_it_kind_name(c->kind),
                err);
    return rc;
}

/* One fresh cluster of kind with n members: the workloads [w0, w1), then RSS and peer
 * connections. Fails soft: a cluster that does not start marks the server down for that
 * phase; a failed run marks its cell. */
static void run_phase(const opts *o, kv_it_kind k, int n, int w0, int w1, uint32_t rep,
                      cell cells[N_WORK][N_SERVERS], server_stats *st, sampler *smp)
{
    const char *name = kv_it_kind_name(k);
    int is_cluster = w0 == 0;
    kv_bc_cluster *c = calloc(1, sizeof(*c));
    char why[1024] = "";
    if (!c) {
        fprintf(stderr, "clusterbench: out of memory\n");
        return;
    }
    int rc = kv_bc_cluster_start(c, k, n, o->extra[k], o->start_timeout_ms, why, sizeof(why));
    if (rc) {
        if (is_cluster) {
            printf("%s cluster did not start (%d members): %s\n", name, n, why);
            st->cluster_down = 1;
            snprintf(st->cluster_why, sizeof(st->cluster_why), "%s", why);
        } else {
            printf("%s single member did not start: %s\n", name, why);
            st->single_down = 1;
        }
        fflush(stdout);
        goto out;
    }
    uint64_t t0 = kv_it_now_ms();
    if (preload(c, o->keyspace, o->value_size)) {
        if (is_cluster)
            st->cluster_down = 1;
        else
            st->single_down = 1;
        goto out;
    }
    /* Clients go round-robin over eps; eps[0] (the only member a 1-client run talks to)
     * is the leader or a follower as asked, so both servers are measured the same way. */
    const char *eps[KV_BC_MAX_MEMBERS];
    int leader = n > 1 ? kv_bc_leader(c) : 0, first = 0;
    if (n > 1 && leader >= 0)
        first = o->one_on_leader ? leader : (leader + 1) % n;
    for (int i = 0; i < n; i++)
        eps[i] = c->endpoints[(first + i) % n];
    printf("  run %u: %s %d member%s up, %u keys loaded in %.1f s", rep + 1, name, n,
           n > 1 ? "s" : "", o->keyspace, (double)(kv_it_now_ms() - t0) / 1000.0);
    if (n > 1 && leader < 0)
        printf("; leader unknown (no member's Status names itself), 1-client runs on %s",
               c->m[first].name);
    else if (n > 1)
        printf("; leader %s, 1-client runs on %s (%s)", c->m[leader].name, c->m[first].name,
               first == leader ? "leader" : "follower");
    printf("\n");
    fflush(stdout);
    if (n > 1)
        sampler_set(smp, c);
    int ran = 0;
    for (int w = w0; w < w1; w++) {
        cell *ce = &cells[w][k];
        if (ce->failed)
            continue;
        sync_window sw = {.c = c};
        kv_bench_params p = {.kind = work[w].kind,
                             .endpoint = eps[0],
                             .server_pid = 0,
                             .clients = work[w].clients,
                             .duration_ms = o->duration_ms,
                             .warmup_ms = o->warmup_ms,
                             .keyspace = o->keyspace,
                             .value_size = o->value_size,
                             .timeout_ms = 30000,
                             .serializable = o->serializable,
                             .client_threads = o->client_threads,
                             .endpoints = eps,
                             .n_endpoints = (uint32_t)n,
                             .pids = c->pids,
                             .n_pids = (uint32_t)n,
                             .window_cb = work[w].kind == KV_BENCH_PUT ? window_cb : NULL,
                             .window_arg = &sw};
        char err[256] = "";
        kv_bench_result r;
        rc = kv_bench_run(&p, &r, err, sizeof(err));
        if (rc) {
            printf("  run %u: %s: %s %s failed: %s\n", rep + 1, wlabel(o, w), name,
                   n > 1 ? "cluster" : "member", err);
            fflush(stdout);
            ce->failed = 1;
            continue;
        }
        ran++;
        double syncs = NAN;
        if (sw.ok_before && sw.ok_after && r.ops > 0)
            syncs = (sw.after - sw.before) / (double)r.ops / n;
        ce->syncs[ce->n] = syncs;
        ce->runs[ce->n++] = r;
        char sbuf[48] = "";
        if (work[w].kind == KV_BENCH_PUT) {
            if (isnan(syncs))
                snprintf(sbuf, sizeof(sbuf), "  syncs/put/member n/a");
            else
                snprintf(sbuf, sizeof(sbuf), "  syncs/put/member %.3f", syncs);
        }
        printf("  run %u: %-30s %-4s %9.0f ops/s  p50 %7.3f ms  p99 %8.3f ms  cpu %5.2f s%s\n",
               rep + 1, wlabel(o, w), name, r.ops_per_s, r.p50_ms, r.p99_ms, r.cpu_s, sbuf);
        fflush(stdout);
    }
    if (n > 1)
        sampler_set(smp, NULL);
    int alive = kv_bc_cluster_alive(c);
    if (alive < n)
        printf("  run %u: %s: only %d of %d members still running at the end\n", rep + 1, name,
               alive, n);
    if (!ran)
        goto out;
    double *rss = is_cluster ? st->rss_mb[st->cluster_runs] : &st->single_rss_mb[st->single_runs];
    printf("  run %u: %s RSS at the end:", rep + 1, name);
    for (int i = 0; i < n; i++) {
        uint64_t b = 0;
        rss[i] = c->m[i].proc.pid > 0 && kv_it_proc_rss(c->m[i].proc.pid, &b) == 0
                     ? (double)b / 1048576.0
                     : NAN;
        printf(" %s %.1f MB", c->m[i].name, rss[i]);
    }
    if (n > 1) {
        int r = st->cluster_runs;
        st->peer_max[r] = c->max_established;
        st->peer_distinct[r] = c->conns_overflow ? -1 : c->n_conns;
        st->peer_samples[r] = c->samples;
        printf("; peer connections: %d at most at once, %d distinct (%d samples)",
               c->max_established, c->n_conns, c->samples);
    }
    printf("\n");
    fflush(stdout);
    if (is_cluster)
        st->cluster_runs++;
    else
        st->single_runs++;
out:
    kv_bc_cluster_destroy(c);
    free(c);
}

/* "12,345" */
static const char *fmt_int(char *buf, size_t cap, double v)
{
    long long x = llround(v);
    char raw[32];
    snprintf(raw, sizeof(raw), "%lld", x < 0 ? -x : x);
    size_t len = strlen(raw), o = 0;
    if (x < 0 && o + 1 < cap)
        buf[o++] = '-';
    for (size_t i = 0; i < len && o + 2 < cap; i++) {
        if (i && (len - i) % 3 == 0)
            buf[o++] = ',';
        buf[o++] = raw[i];
    }
    buf[o] = 0;
    return buf;
}

/* Text of one server's result for workload w. */
static void fmt_cell(char *buf, size_t cap, const cell *c, int w, int down, const char *why)
{
    if (c->n == 0) {
        snprintf(buf, cap, "%s", down ? why : (c->failed ? "failed" : "n/a"));
        return;
    }
    char ops[32];
    fmt_int(ops, sizeof(ops), MED(c, ops_per_s));
    if (w == W_PUT256)
        snprintf(buf, cap, "%s ops/s, p50 %.2f ms, p99 %.1f ms", ops, MED(c, p50_ms),
                 MED(c, p99_ms));
    else if (w == W_PUT1 || w == W_SINGLE_PUT1)
        snprintf(buf, cap, "%s ops/s, p50 %.2f ms", ops, MED(c, p50_ms));
    else
        snprintf(buf, cap, "%s ops/s", ops);
}

/* The disk's fdatasync floor (bench/wal/floor.h), measured in a temporary directory beside
 * the members' data dirs before the first run and after the last: the physical limit a
 * 1-client put is held to. */
#define FLOOR_ITERS 200
typedef struct floor_stats {
    double v[2 * FLOOR_ITERS];
    int n;
} floor_stats;

static void floor_measure(floor_stats *f)
{
    kvt_tmpdir d;
    if (f->n + FLOOR_ITERS > (int)(sizeof f->v / sizeof f->v[0]))
        return; /* room for two measurements: before the first run and after the last */
    if (kvt_tmpdir_create(&d, "kvbc-floor") != 0)
        return;
    if (kv_bench_fsync_floor(d.path, FLOOR_ITERS, f->v + f->n) == 0) {
        printf("  fdatasync floor (4 KiB into a preallocated file in %s): p50 %.3f ms, p99 "
               "%.3f ms\n",
               d.path, f->v[f->n + FLOOR_ITERS / 2] / 1000.0,
               f->v[f->n + FLOOR_ITERS * 99 / 100] / 1000.0);
        f->n += FLOOR_ITERS;
    }
    kvt_tmpdir_destroy(&d);
}

/* The put-1 row's second target: its p50 within 1.3x one fdatasync of this disk. */
static void print_floor_row(const floor_stats *f, const cell *K, const cell *E)
{
    if (f->n == 0) {
        printf("| ... p50 against one fdatasync | n/a (floor not measured) | | | ≤ 1.3× | not "
               "evaluated |\n");
        return;
    }
    double v[2 * FLOOR_ITERS];
    memcpy(v, f->v, (size_t)f->n * sizeof *v);
    qsort(v, (size_t)f->n, sizeof *v, cmp_double); /* median() holds MAX_REPEATS values */
    double fl = v[f->n / 2] / 1000.0;
    char kb[64] = "n/a", eb[64] = "n/a", res[32] = "not evaluated";
    if (K->n) {
        double r = MED(K, p50_ms) / fl;
        snprintf(kb, sizeof kb, "%.2f ms = %.1f×", MED(K, p50_ms), r);
        snprintf(res, sizeof res, "%s", r <= 1.3 ? "**met**" : "**missed**");
    }
    if (E->n)
        snprintf(eb, sizeof eb, "%.2f ms = %.1f×", MED(E, p50_ms), MED(E, p50_ms) / fl);
    printf("| ... p50 against one fdatasync (floor p50 %.3f ms, same run) | %s | %s | | ≤ 1.3× | "
           "%s |\n",
           fl, kb, eb, res);
}

static void fmt_rss(char *buf, size_t cap, const server_stats *st, int n)
{
    if (!st->cluster_runs) {
        snprintf(buf, cap, "n/a");
        return;
    }
    size_t used = 0;
    buf[0] = 0;
    for (int i = 0; i < n; i++) {
        double v[MAX_REPEATS];
        for (int r = 0; r < st->cluster_runs; r++)
            v[r] = st->rss_mb[r][i];
        used += (size_t)snprintf(buf + used, cap - used, "%s%.1f", i ? " / " : "",
                                 median(v, st->cluster_runs));
        if (used >= cap)
            return;
    }
    snprintf(buf + used, cap - used, " MB");
}

static void fmt_syncs(char *buf, size_t cap, cell cells[N_WORK][N_SERVERS], int k)
{
    static const int ws[] = {W_PUT1, W_PUT64, W_PUT256};
    size_t used = 0;
    buf[0] = 0;
    for (int i = 0; i < 3; i++) {
        const cell *c = &cells[ws[i]][k];
        double m = median(c->syncs, c->n);
        if (isnan(m))
            used += (size_t)snprintf(buf + used, cap - used, "%sn/a", i ? " / " : "");
        else
            used += (size_t)snprintf(buf + used, cap - used, "%s%.2f", i ? " / " : "", m);
        if (used >= cap)
            return;
    }
}

static void etcd_version(char *buf, size_t cap)
{
    char bin[PATH_MAX];
    snprintf(buf, cap, "3.4");
    if (kv_it_server_bin(KV_IT_ETCD, bin, sizeof(bin)))
        return;
    const char *argv[] = {bin, "--version", NULL};
    kv_it_cmd_result res = {0};
    if (kv_it_run(argv, NULL, NULL, 0, 10000, &res) == 0 && res.out) {
        const char *v = strstr(res.out, "etcd Version: ");
        if (v) {
            v += strlen("etcd Version: ");
            snprintf(buf, cap, "%.*s", (int)strcspn(v, "\r\n"), v);
        }
    }
    kv_it_cmd_result_free(&res);
}

int main(int argc, char **argv)
{
    opts o;
    if (parse_opts(argc, argv, &o))
        return 2;
    char path[PATH_MAX];
    int have[N_SERVERS] = {0, 0};
    for (int k = 0; k < N_SERVERS; k++) {
        if (!o.do_server[k])
            continue;
        have[k] = kv_it_server_bin((kv_it_kind)k, path, sizeof(path)) == 0;
        if (!have[k])
            fprintf(stderr, "clusterbench: %s not found at %s\n", kv_it_kind_name((kv_it_kind)k),
                    path);
    }
    if (!have[KV_IT_KVD] && !have[KV_IT_ETCD]) {
        fprintf(stderr, "clusterbench: no server to benchmark\n");
        return 1;
    }
    char ever[64];
    etcd_version(ever, sizeof(ever));
    int pairs = o.members * (o.members - 1) / 2;
    printf("clusterbench: %d-member clusters on loopback, %u x %.1f s runs (+%.1f s warm-up), "
           "medians; keyspace %u, value %u B; clients round-robin over the members; client "
           "backend %s (%s); %ld CPUs; etcd %s%s\n",
           o.members, o.repeats, o.duration_ms / 1000.0, o.warmup_ms / 1000.0, o.keyspace,
           o.value_size, kv_it_rpc_backend(),
           o.client_threads ? "a thread per client" : "one I/O thread",
           sysconf(_SC_NPROCESSORS_ONLN), ever, o.serializable ? "; range reads SERIALIZABLE" : "");
    fflush(stdout);

    static cell cells[N_WORK][N_SERVERS];
    static server_stats st[N_SERVERS];
    sampler smp = {.c = NULL, .stop = 0};
    pthread_mutex_init(&smp.mu, NULL);
    pthread_cond_init(&smp.cv, NULL);
    pthread_t sth;
    if (pthread_create(&sth, NULL, sampler_main, &smp)) {
        fprintf(stderr, "clusterbench: pthread_create\n");
        return 1;
    }
    static floor_stats fsync_floor; /* not "floor": libm has one */
    floor_measure(&fsync_floor);
    for (uint32_t rep = 0; rep < o.repeats; rep++) {
        /* Alternate which server goes first so drift does not favour one. */
        int order[N_SERVERS] = {rep % 2 ? KV_IT_KVD : KV_IT_ETCD, rep % 2 ? KV_IT_ETCD : KV_IT_KVD};
        for (int i = 0; i < N_SERVERS; i++) {
            int k = order[i];
            if (have[k] && !st[k].cluster_down)
                run_phase(&o, (kv_it_kind)k, o.members, 0, N_CLUSTER_WORK, rep, cells, &st[k],
                          &smp);
        }
        for (int i = 0; i < N_SERVERS && o.do_single; i++) {
            int k = order[i];
            if (have[k] && !st[k].single_down)
                run_phase(&o, (kv_it_kind)k, 1, W_SINGLE_PUT1, N_WORK, rep, cells, &st[k], &smp);
        }
    }
    floor_measure(&fsync_floor);
    pthread_mutex_lock(&smp.mu);
    smp.stop = 1;
    pthread_cond_signal(&smp.cv);
    pthread_mutex_unlock(&smp.mu);
    pthread_join(sth, NULL);
    pthread_mutex_destroy(&smp.mu);
    pthread_cond_destroy(&smp.cv);

    /* Details: every median. */
    printf("\n%-32s %-5s %4s %10s %9s %9s %8s %10s %12s\n", "workload", "server", "runs", "ops/s",
           "p50 ms", "p99 ms", "cpu s", "cpu us/op", "client us/op");
    for (int w = 0; w < N_WORK; w++)
        for (int k = 0; k < N_SERVERS; k++) {
            const cell *c = &cells[w][k];
            if (!c->n)
                continue;
            double ops = MED(c, ops_per_s) * MED(c, seconds);
            printf("%-32s %-5s %4d %10.0f %9.3f %9.3f %8.2f %10.1f %12.1f\n", wlabel(&o, w),
                   kv_it_kind_name((kv_it_kind)k), c->n, MED(c, ops_per_s), MED(c, p50_ms),
                   MED(c, p99_ms), MED(c, cpu_s), ops > 0 ? MED(c, cpu_s) / ops * 1e6 : 0,
                   ops > 0 ? MED(c, client_cpu_s) / ops * 1e6 : 0);
        }

    /* The targets table (bench/README.md). */
    const cell *K, *E;
    char kb[256], eb[256], ratio[96], res[64];
    printf("\n| Workload (%d members on loopback) | kvd | etcd %s | kvd/etcd | Target | Result |\n"
           "|---|---|---|---|---|---|\n",
           o.members, ever);
    /* The write path's targets (bench/README.md, "clusterbench"). */
    static const double target[N_WORK] = {1.0, 2.5, 3.0, 3.5, 1.2, 2.5};
    const char *kvd_why = "kvd cluster did not start";
    for (int w = 0; w < N_WORK; w++) {
        if (w >= W_SINGLE_PUT1 && !o.do_single)
            continue;
        K = &cells[w][KV_IT_KVD];
        E = &cells[w][KV_IT_ETCD];
        int single = w >= W_SINGLE_PUT1;
        int kdown = single ? st[KV_IT_KVD].single_down : st[KV_IT_KVD].cluster_down;
        int edown = single ? st[KV_IT_ETCD].single_down : st[KV_IT_ETCD].cluster_down;
        fmt_cell(kb, sizeof(kb), K, w, kdown, single ? "kvd did not start" : kvd_why);
        fmt_cell(eb, sizeof(eb), E, w, edown,
                 single ? "etcd did not start" : "etcd cluster did not start");
        if (!have[KV_IT_KVD])
            snprintf(kb, sizeof(kb), "not run");
        if (!have[KV_IT_ETCD])
            snprintf(eb, sizeof(eb), "not run");
        char tg[64];
        snprintf(tg, sizeof(tg), "≥ %g× etcd%s", target[w],
                 w == W_PUT256 ? ", p99 below etcd's" : "");
        if (K->n && E->n) {
            double r = MED(K, ops_per_s) / MED(E, ops_per_s);
            int met = r >= target[w];
            if (w == W_PUT256) {
                double pr = MED(K, p99_ms) / MED(E, p99_ms);
                snprintf(ratio, sizeof(ratio), "%.2f (p99 %.2f)", r, pr);
                met = met && pr < 1.0;
            } else {
                snprintf(ratio, sizeof(ratio), "%.2f", r);
            }
            snprintf(res, sizeof(res), "%s", met ? "**met**" : "**missed**");
        } else {
            snprintf(ratio, sizeof(ratio), "n/a");
            snprintf(res, sizeof(res), "not evaluated");
        }
        printf("| %s | %s | %s | %s | %s | %s |\n", wlabel(&o, w), kb, eb, ratio, tg, res);
        if (w == W_PUT1)
            print_floor_row(&fsync_floor, K, E);
    }
    fmt_syncs(kb, sizeof(kb), cells, KV_IT_KVD);
    fmt_syncs(eb, sizeof(eb), cells, KV_IT_ETCD);
    printf("| syncs per committed write, per member (put 1 / 64 / 256 clients; kvd: "
           "kvd_fsyncs_total, etcd: WAL fsyncs + backend commits) | %s | %s | | one sync per "
           "batch | reported |\n",
           have[KV_IT_KVD] && !st[KV_IT_KVD].cluster_down ? kb : "n/a",
           have[KV_IT_ETCD] && !st[KV_IT_ETCD].cluster_down ? eb : "n/a");
    if (o.members > 1) {
        for (int k = 0; k < N_SERVERS; k++) {
            char *b = k == KV_IT_KVD ? kb : eb;
            const server_stats *s = &st[k];
            if (!s->cluster_runs) {
                snprintf(b, sizeof(kb), "n/a");
                continue;
            }
            int mx = 0, dist = 0, overflow = 0, unsampled = 0;
            for (int r = 0; r < s->cluster_runs; r++) {
                unsampled |= s->peer_samples[r] == 0;
                if (s->peer_max[r] > mx)
                    mx = s->peer_max[r];
                if (s->peer_distinct[r] < 0)
                    overflow = 1;
                else if (s->peer_distinct[r] > dist)
                    dist = s->peer_distinct[r];
            }
            if (unsampled)
                snprintf(b, sizeof(kb), "n/a (ss failed)");
            else
                snprintf(b, sizeof(kb), "%d / %s%d", mx, overflow ? ">" : "",
                         overflow ? KV_BC_MAX_CONNS : dist);
        }
        const char *pres = "not evaluated";
        if (st[KV_IT_KVD].cluster_runs) {
            int ok = 1;
            for (int r = 0; r < st[KV_IT_KVD].cluster_runs; r++)
                ok = ok && st[KV_IT_KVD].peer_max[r] == pairs &&
                     st[KV_IT_KVD].peer_distinct[r] == pairs && st[KV_IT_KVD].peer_samples[r] > 0;
            pres = ok ? "**met**" : "**missed**";
        }
        printf(
            "| peer TCP connections (most at once / distinct over a run; %d pairs) | %s | %s | | "
            "one per pair (%d) | %s |\n",
            pairs, kb, eb, pairs, pres);
        fmt_rss(kb, sizeof(kb), &st[KV_IT_KVD], o.members);
        fmt_rss(eb, sizeof(eb), &st[KV_IT_ETCD], o.members);
        printf("| RSS of each member at the end | %s | %s | | | reported |\n", kb, eb);
    }
    if (o.do_single) {
        double a = median(st[KV_IT_KVD].single_rss_mb, st[KV_IT_KVD].single_runs);
        double b = median(st[KV_IT_ETCD].single_rss_mb, st[KV_IT_ETCD].single_runs);
        printf("| RSS, single member at the end | %s | %s | | | reported |\n",
               isnan(a) ? "n/a" : (snprintf(kb, sizeof(kb), "%.1f MB", a), kb),
               isnan(b) ? "n/a" : (snprintf(eb, sizeof(eb), "%.1f MB", b), eb));
    }
    if (st[KV_IT_KVD].cluster_down)
        printf("\nkvd cluster did not start: %s\n", st[KV_IT_KVD].cluster_why);
    if (st[KV_IT_ETCD].cluster_down)
        printf("\netcd cluster did not start: %s\n", st[KV_IT_ETCD].cluster_why);
    return 0;
}
