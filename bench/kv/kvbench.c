/*
 * kvbench: put and range throughput/latency of kvd against a single-member etcd started
 * the same way (same machine, loopback, fresh temp data dir), plus RSS with 100,000 keys
 * of 256 bytes. Not a test: it prints numbers and whether the targets are met
 * (bench/README.md, "Targets").
 * See bench/README.md. Usage: kvbench --help.
 */
#include "harness.h"
#include "loader.h"
#include "rpc_client.h"
#include "workload.h"

#include <errno.h>
#include <getopt.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_CLIENT_COUNTS 8
#define MAX_REPEATS 15

typedef struct opts {
    uint32_t duration_ms;
    uint32_t warmup_ms;
    uint32_t repeats;
    uint32_t clients[MAX_CLIENT_COUNTS];
    int n_clients;
    uint32_t keyspace;
    uint32_t value_size;
    uint32_t rss_keys;
    int do_kvd, do_etcd, do_rss;
    int do_work[2]; /* indexed by kv_bench_kind */
    int serializable;
    int client_threads; /* --client-threads */
} opts;

typedef struct cell {
    kv_bench_result runs[MAX_REPEATS];
    int n;
    kv_bench_result median;
} cell;

static void usage(FILE *f)
{
    fprintf(f, "usage: kvbench [options]\n"
               "  --duration S      seconds per measured run (default 5)\n"
               "  --warmup S        unmeasured seconds before each run (default 1)\n"
               "  --repeats N       runs per cell; medians are printed (default 3)\n"
               "  --clients A,B     concurrent clients (default 1,64)\n"
               "  --keyspace N      keys preloaded and addressed by put/range (default 10000)\n"
               "  --value-size N    bytes per value (default 256)\n"
               "  --rss-keys N      keys for the RSS measurement (default 100000; 0 skips it)\n"
               "  --server kvd|etcd|both   (default both; etcd only if found)\n"
               "  --workloads put,range    (default both)\n"
               "  --serializable    range reads are serializable (default linearizable)\n"
               "  --client-threads  one thread per client making synchronous calls (default:\n"
               "                    all clients on one I/O thread, each completion issuing\n"
               "                    the next call: the cheapest client for the servers' CPU)\n"
               "Binaries: kvd from $KV_BUILD_DIR/server/kvd (or $KV_KVD_BIN), etcd from\n"
               "$KV_ETCD_BIN or /usr/bin/etcd. Client backend: libkvclient when built.\n");
}

static int parse_opts(int argc, char **argv, opts *o)
{
    *o = (opts){.duration_ms = 5000,
                .warmup_ms = 1000,
                .repeats = 3,
                .clients = {1, 64},
                .n_clients = 2,
                .keyspace = 10000,
                .value_size = 256,
                .rss_keys = 100000,
                .do_kvd = 1,
                .do_etcd = 1,
                .do_rss = 1,
                .do_work = {1, 1}};
    static const struct option lo[] = {{"duration", required_argument, NULL, 'd'},
                                       {"warmup", required_argument, NULL, 'w'},
                                       {"repeats", required_argument, NULL, 'r'},
                                       {"clients", required_argument, NULL, 'c'},
                                       {"keyspace", required_argument, NULL, 'k'},
                                       {"value-size", required_argument, NULL, 'v'},
                                       {"rss-keys", required_argument, NULL, 'R'},
                                       {"server", required_argument, NULL, 's'},
                                       {"workloads", required_argument, NULL, 'W'},
                                       {"serializable", no_argument, NULL, 'S'},
                                       {"client-threads", no_argument, NULL, 'T'},
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
        case 'c': {
            o->n_clients = 0;
            char *save = NULL, *s = strdup(optarg);
            if (!s)
                return -ENOMEM;
            for (char *t = strtok_r(s, ",", &save); t && o->n_clients < MAX_CLIENT_COUNTS;
                 t = strtok_r(NULL, ",", &save))
                o->clients[o->n_clients++] = (uint32_t)atoi(t);
            free(s);
            break;
        }
        case 'k':
            o->keyspace = (uint32_t)atoi(optarg);
            break;
        case 'v':
            o->value_size = (uint32_t)atoi(optarg);
            break;
        case 'R':
            o->rss_keys = (uint32_t)atoi(optarg);
            o->do_rss = o->rss_keys > 0;
            break;
        case 's':
            o->do_kvd = strcmp(optarg, "etcd") != 0;
            o->do_etcd = strcmp(optarg, "kvd") != 0;
            break;
        case 'W':
            o->do_work[KV_BENCH_PUT] = strstr(optarg, "put") != NULL;
            o->do_work[KV_BENCH_RANGE] = strstr(optarg, "range") != NULL;
            break;
        case 'S':
            o->serializable = 1;
            break;
        case 'T':
            o->client_threads = 1;
            break;
        case 'h':
            usage(stdout);
            exit(0);
        default:
            usage(stderr);
            return -EINVAL;
        }
    }
    if (o->repeats < 1 || o->repeats > MAX_REPEATS || o->n_clients < 1 || o->keyspace < 1 ||
        o->value_size < 1 || o->duration_ms < 100) {
        fprintf(stderr, "kvbench: bad option values (repeats 1..%d)\n", MAX_REPEATS);
        return -EINVAL;
    }
    for (int i = 0; i < o->n_clients; i++)
        if (o->clients[i] < 1 || o->clients[i] > 1024) {
            fprintf(stderr, "kvbench: clients must be 1..1024\n");
            return -EINVAL;
        }
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median of one field across the runs of a cell. */
static double median_of(const cell *c, size_t off)
{
    double v[MAX_REPEATS];
    for (int i = 0; i < c->n; i++)
        v[i] = *(const double *)((const char *)&c->runs[i] + off);
    qsort(v, (size_t)c->n, sizeof(double), cmp_double);
    return c->n % 2 ? v[c->n / 2] : (v[c->n / 2 - 1] + v[c->n / 2]) / 2;
}

static void finish_cell(cell *c)
{
    c->median.ops_per_s = median_of(c, offsetof(kv_bench_result, ops_per_s));
    c->median.p50_ms = median_of(c, offsetof(kv_bench_result, p50_ms));
    c->median.p99_ms = median_of(c, offsetof(kv_bench_result, p99_ms));
    c->median.cpu_s = median_of(c, offsetof(kv_bench_result, cpu_s));
    c->median.seconds = median_of(c, offsetof(kv_bench_result, seconds));
    double rss[MAX_REPEATS];
    for (int i = 0; i < c->n; i++)
        rss[i] = (double)c->runs[i].rss;
    qsort(rss, (size_t)c->n, sizeof(double), cmp_double);
    c->median.rss = (uint64_t)rss[c->n / 2];
}

static int start_server(kv_it_server *s, kv_it_kind kind)
{
    int rc = kv_it_server_init(s, kind, NULL);
    if (rc) {
        fprintf(stderr, "kvbench: %s binary %s: %s\n", kv_it_kind_name(kind), s->bin,
                strerror(-rc));
        return rc;
    }
    rc = kv_it_server_start(s, 60000);
    if (rc) {
        char *log = NULL;
        kv_it_server_log(s, &log);
        fprintf(stderr, "kvbench: %s did not start (%s); log:\n%s\n", kv_it_kind_name(kind),
                strerror(-rc), log ? log : "");
        free(log);
        kv_it_server_destroy(s);
    }
    return rc;
}

static int preload(kv_it_server *s, const char *prefix, uint32_t n, uint32_t value_size)
{
    char err[256] = "";
    kv_it_load_opts lo = {.endpoint = s->endpoint,
                          .prefix = prefix,
                          .n_keys = n,
                          .value_size = value_size,
                          .seed = 1,
                          .threads = 4,
                          .batch = 100,
                          .timeout_ms = 60000};
    int rc = kv_it_load(&lo, NULL, err, sizeof(err));
    if (rc)
        fprintf(stderr, "kvbench: preload %u keys into %s: %s\n", n, kv_it_kind_name(s->kind), err);
    return rc;
}

static void sleep_ms(uint32_t ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0)
        ;
}

/* RSS of a fresh server after loading n keys of value_size bytes; 0 on failure. */
static uint64_t rss_with_keys(kv_it_kind kind, uint32_t n, uint32_t value_size)
{
    kv_it_server s;
    uint64_t rss = 0;
    if (start_server(&s, kind))
        return 0;
    uint64_t t0 = kv_it_now_ms();
    if (preload(&s, "rss/", n, value_size) == 0) {
        uint64_t t1 = kv_it_now_ms();
        sleep_ms(1000);
        kv_it_proc_rss(s.pid, &rss);
        printf("  %-5s loaded %u keys x %u B in %.1f s; RSS %.1f MB\n", kv_it_kind_name(kind), n,
               value_size, (double)(t1 - t0) / 1000.0, (double)rss / 1048576.0);
        fflush(stdout);
    }
    kv_it_server_destroy(&s);
    return rss;
}

int main(int argc, char **argv)
{
    opts o;
    if (parse_opts(argc, argv, &o))
        return 2;
    char path[PATH_MAX];
    int have[2] = {0, 0}; /* index: kv_it_kind */
    if (o.do_kvd) {
        have[KV_IT_KVD] = kv_it_server_bin(KV_IT_KVD, path, sizeof(path)) == 0;
        if (!have[KV_IT_KVD])
            fprintf(stderr, "kvbench: kvd not found at %s (set KV_BUILD_DIR or KV_KVD_BIN)\n",
                    path);
    }
    if (o.do_etcd) {
        have[KV_IT_ETCD] = kv_it_server_bin(KV_IT_ETCD, path, sizeof(path)) == 0;
        if (!have[KV_IT_ETCD])
            fprintf(stderr, "kvbench: etcd not found at %s; kvd only\n", path);
    }
    if (!have[0] && !have[1]) {
        fprintf(stderr, "kvbench: no server to benchmark\n");
        return 1;
    }
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    printf("kvbench: %u x %.1f s runs (+%.1f s warm-up), medians; keyspace %u, value %u B; "
           "%s reads; client backend %s (%s); %ld CPUs\n",
           o.repeats, o.duration_ms / 1000.0, o.warmup_ms / 1000.0, o.keyspace, o.value_size,
           o.serializable ? "serializable" : "linearizable", kv_it_rpc_backend(),
           o.client_threads ? "a thread per client" : "one I/O thread", ncpu);
    fflush(stdout);

    kv_it_server srv[2];
    int up[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        if (!have[k])
            continue;
        if (start_server(&srv[k], (kv_it_kind)k) ||
            preload(&srv[k], "bench/", o.keyspace, o.value_size)) {
            if (srv[k].pid)
                kv_it_server_destroy(&srv[k]);
            return 1;
        }
        up[k] = 1;
    }

    /* cells[workload][client count][server] */
    static cell cells[2][MAX_CLIENT_COUNTS][2];
    int failed = 0;
    for (uint32_t rep = 0; rep < o.repeats && !failed; rep++) {
        for (int w = 0; w < 2 && !failed; w++) {
            if (!o.do_work[w])
                continue;
            for (int ci = 0; ci < o.n_clients && !failed; ci++) {
                /* Alternate which server goes first so drift does not favour one. */
                for (int kk = 0; kk < 2 && !failed; kk++) {
                    int k = (int)((rep + (uint32_t)kk) % 2);
                    if (!up[k])
                        continue;
                    kv_bench_params p = {.kind = (kv_bench_kind)w,
                                         .endpoint = srv[k].endpoint,
                                         .server_pid = srv[k].pid,
                                         .clients = o.clients[ci],
                                         .duration_ms = o.duration_ms,
                                         .warmup_ms = o.warmup_ms,
                                         .keyspace = o.keyspace,
                                         .value_size = o.value_size,
                                         .timeout_ms = 30000,
                                         .serializable = o.serializable,
                                         .client_threads = o.client_threads};
                    cell *c = &cells[w][ci][k];
                    char err[256] = "";
                    int rc = kv_bench_run(&p, &c->runs[c->n], err, sizeof(err));
                    if (rc) {
                        fprintf(stderr, "kvbench: %s %u clients on %s failed: %s\n",
                                kv_bench_kind_name(p.kind), p.clients,
                                kv_it_kind_name((kv_it_kind)k), err);
                        failed = 1;
                        break;
                    }
                    kv_bench_result *r = &c->runs[c->n++];
                    printf("  run %u: %-5s %3u clients %-4s %9.0f ops/s  p50 %7.3f ms  p99 "
                           "%7.3f ms  cpu %5.2f s  rss %6.1f MB\n",
                           rep + 1, kv_bench_kind_name(p.kind), p.clients,
                           kv_it_kind_name((kv_it_kind)k), r->ops_per_s, r->p50_ms, r->p99_ms,
                           r->cpu_s, (double)r->rss / 1048576.0);
                    fflush(stdout);
                }
            }
        }
    }
    for (int k = 0; k < 2; k++)
        if (up[k])
            kv_it_server_destroy(&srv[k]);
    if (failed)
        return 1;

    printf("\n%-6s %7s %-5s %10s %9s %9s %8s %10s %8s\n", "work", "clients", "server", "ops/s",
           "p50 ms", "p99 ms", "cpu s", "cpu us/op", "rss MB");
    for (int w = 0; w < 2; w++)
        for (int ci = 0; ci < o.n_clients; ci++)
            for (int k = 0; k < 2; k++) {
                if (!up[k] || !o.do_work[w])
                    continue;
                cell *c = &cells[w][ci][k];
                finish_cell(c);
                kv_bench_result *m = &c->median;
                double ops = m->ops_per_s * m->seconds;
                printf("%-6s %7u %-5s %10.0f %9.3f %9.3f %8.2f %10.1f %8.1f\n",
                       kv_bench_kind_name((kv_bench_kind)w), o.clients[ci],
                       kv_it_kind_name((kv_it_kind)k), m->ops_per_s, m->p50_ms, m->p99_ms, m->cpu_s,
                       ops > 0 ? m->cpu_s / ops * 1e6 : 0, (double)m->rss / 1048576.0);
            }

    if (up[0] && up[1]) {
        printf("\nratios kvd/etcd (throughput: higher is better; latency, cpu/op, rss: lower "
               "is better)\n");
        printf("%-6s %7s %8s %8s %8s %10s %8s\n", "work", "clients", "ops/s", "p50", "p99",
               "cpu/op", "rss");
        for (int w = 0; w < 2; w++)
            for (int ci = 0; ci < o.n_clients; ci++) {
                if (!o.do_work[w])
                    continue;
                kv_bench_result *a = &cells[w][ci][KV_IT_KVD].median;
                kv_bench_result *b = &cells[w][ci][KV_IT_ETCD].median;
                double cpa = a->cpu_s / (a->ops_per_s * a->seconds + 1e-9);
                double cpb = b->cpu_s / (b->ops_per_s * b->seconds + 1e-9);
                printf("%-6s %7u %8.2f %8.2f %8.2f %10.2f %8.2f\n",
                       kv_bench_kind_name((kv_bench_kind)w), o.clients[ci],
                       a->ops_per_s / (b->ops_per_s + 1e-9), a->p50_ms / (b->p50_ms + 1e-9),
                       a->p99_ms / (b->p99_ms + 1e-9), cpa / (cpb + 1e-12),
                       (double)a->rss / ((double)b->rss + 1e-9));
            }
    }

    uint64_t rss_keys[2] = {0, 0};
    if (o.do_rss) {
        printf("\nRSS after loading %u keys of %u bytes (fresh server each):\n", o.rss_keys,
               o.value_size);
        for (int k = 0; k < 2; k++) {
            if (!have[k])
                continue;
            double v[MAX_REPEATS];
            uint32_t n = 0;
            for (uint32_t rep = 0; rep < o.repeats; rep++) {
                uint64_t r = rss_with_keys((kv_it_kind)k, o.rss_keys, o.value_size);
                if (r)
                    v[n++] = (double)r;
            }
            if (n) {
                qsort(v, n, sizeof(double), cmp_double);
                rss_keys[k] = (uint64_t)v[n / 2];
                printf("  %-5s median RSS %.1f MB\n", kv_it_kind_name((kv_it_kind)k),
                       (double)rss_keys[k] / 1048576.0);
            }
        }
    }

    /* The targets of bench/README.md (defined for 64 clients and 100,000 x 256 B). */
    printf("\ntargets (bench/README.md, kvbench):\n");
    int ci64 = -1;
    for (int ci = 0; ci < o.n_clients; ci++)
        if (o.clients[ci] == 64)
            ci64 = ci;
    if (up[0] && up[1] && ci64 >= 0 && o.do_work[0] && o.do_work[1]) {
        kv_bench_result *kp = &cells[KV_BENCH_PUT][ci64][KV_IT_KVD].median;
        kv_bench_result *ep = &cells[KV_BENCH_PUT][ci64][KV_IT_ETCD].median;
        kv_bench_result *kr = &cells[KV_BENCH_RANGE][ci64][KV_IT_KVD].median;
        kv_bench_result *er = &cells[KV_BENCH_RANGE][ci64][KV_IT_ETCD].median;
        double rp = kp->ops_per_s / (ep->ops_per_s + 1e-9);
        double rr = kr->ops_per_s / (er->ops_per_s + 1e-9);
        printf("  64-client put   kvd/etcd >= 2.0 : %5.2f  %s\n", rp, rp >= 2.0 ? "MET" : "MISSED");
        printf("  64-client range kvd/etcd >= 3.0 : %5.2f  %s\n", rr, rr >= 3.0 ? "MET" : "MISSED");
        for (int w = 0; w < 2; w++)
            for (int ci = 0; ci < o.n_clients; ci++) {
                kv_bench_result *a = &cells[w][ci][KV_IT_KVD].median;
                kv_bench_result *b = &cells[w][ci][KV_IT_ETCD].median;
                printf("  p99 %-5s %3u clients kvd <= etcd : %.3f vs %.3f ms  %s\n",
                       kv_bench_kind_name((kv_bench_kind)w), o.clients[ci], a->p99_ms, b->p99_ms,
                       a->p99_ms <= b->p99_ms ? "MET" : "MISSED");
            }
    } else {
        printf("  throughput/latency ratios: not evaluated (needs kvd, etcd and 64 clients)\n");
    }
    if (have[KV_IT_KVD] && rss_keys[KV_IT_KVD])
        printf("  kvd RSS < 64 MB with %u x %u B : %.1f MB  %s%s\n", o.rss_keys, o.value_size,
               (double)rss_keys[KV_IT_KVD] / 1048576.0,
               rss_keys[KV_IT_KVD] < 64ull * 1048576ull ? "MET" : "MISSED",
               o.rss_keys == 100000 && o.value_size == 256 ? "" : " (non-standard sizes)");
    else
        printf("  kvd RSS target: not evaluated\n");
    return 0;
}
