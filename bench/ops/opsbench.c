/*
 * opsbench: snapshot save and defragment of a large store, kvd vs
 * etcd 3.4 (single members on loopback, one after the other in the same run; not a test).
 * For each server: fill to --size-mb with --value-kb values from --fill-clients clients;
 * `etcdctl snapshot save` (Maintenance.Snapshot) timed, MB/s, while a 1-client put loop
 * measures put p99 before and during the save; then delete every other key, compact
 * (physical) and time `etcdctl defrag` while a 1-client Range loop measures the longest
 * stall; file sizes before and after. Any failed call aborts the run with its error.
 */
#include "bsrv.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

typedef struct opts {
    int size_mb, value_kb, fill_clients;
    double before_s, settle_s;
    int do_kvd, do_etcd;
} opts;

typedef struct fill_sh {
    const bsrv_server *s;
    kvc_loop_group *g;
    int nkeys, clients, value_len, del; /* del: delete every other key instead of put */
    int64_t max_rev;
    pthread_mutex_t mu;
    int failed;
    char err[300];
} fill_sh;

typedef struct fill_w {
    fill_sh *sh;
    int idx;
    pthread_t th;
} fill_w;

static void *fill_main(void *arg)
{
    fill_w *w = arg;
    fill_sh *sh = w->sh;
    kvc_client *c = NULL;
    kvc_error e;
    char key[32];
    int rc = bsrv_client(&c, sh->s, sh->g, NULL, &e);
    char *val = rc ? NULL : malloc((size_t)sh->value_len);
    if (val)
        memset(val, 'x', (size_t)sh->value_len);
    int64_t rev = 0;
    for (int i = w->idx; !rc && i < sh->nkeys && !sh->failed; i += sh->clients) {
        if (sh->del && i % 2)
            continue;
        int n = snprintf(key, sizeof(key), "fill/%08d", i);
        if (sh->del) {
            kvc_delete_result r;
            rc = kvc_delete(c, key, (size_t)n, NULL, 60000, &r, &e);
            if (!rc) {
                rev = r.header.revision > rev ? r.header.revision : rev;
                kvc_delete_result_free(&r);
            }
        } else {
            kvc_put_result r;
            rc = kvc_put(c, key, (size_t)n, val, (size_t)sh->value_len, NULL, 60000, &r, &e);
            if (!rc) {
                rev = r.header.revision > rev ? r.header.revision : rev;
                kvc_put_result_free(&r);
            }
        }
    }
    pthread_mutex_lock(&sh->mu);
    if (rc && !sh->failed) {
        sh->failed = 1;
        snprintf(sh->err, sizeof(sh->err), "%s: %d %s", sh->del ? "delete" : "put", e.code,
                 e.message);
    }
    if (rev > sh->max_rev)
        sh->max_rev = rev;
    pthread_mutex_unlock(&sh->mu);
    free(val);
    kvc_close(c);
    return NULL;
}

static int fill(const bsrv_server *s, int nkeys, int clients, int value_len, int del, int64_t *rev,
                char *err, size_t errcap)
{
    fill_sh sh = {.s = s, .nkeys = nkeys, .clients = clients, .value_len = value_len, .del = del};
    pthread_mutex_init(&sh.mu, NULL);
    kvc_error e;
    if (kvc_loop_group_new(&sh.g, &e)) {
        snprintf(err, errcap, "loop group: %s", e.message);
        return -ENOMEM;
    }
    fill_w *w = calloc((size_t)clients, sizeof(*w));
    for (int i = 0; i < clients; i++) {
        w[i].sh = &sh;
        w[i].idx = i;
        pthread_create(&w[i].th, NULL, fill_main, &w[i]);
    }
    for (int i = 0; i < clients; i++)
        pthread_join(w[i].th, NULL);
    free(w);
    kvc_loop_group_free(sh.g);
    pthread_mutex_destroy(&sh.mu);
    *rev = sh.max_rev;
    if (sh.failed) {
        snprintf(err, errcap, "%s: %s", bsrv_name(s->kind), sh.err);
        return -EIO;
    }
    return 0;
}

/* A 1-client loop (put of 256 B, or Range of one key) recording each call's start time
 * and latency until stopped. */
typedef struct probe {
    const bsrv_server *s;
    int is_put;
    volatile int stop;
    bsrv_samples t0, lat;
    int failed;
    char err[300];
    pthread_t th;
} probe;

static void *probe_main(void *arg)
{
    probe *p = arg;
    kvc_client *c = NULL;
    kvc_error e;
    char val[256], key[32];
    memset(val, 'p', sizeof(val));
    if (bsrv_client(&c, p->s, NULL, NULL, &e)) {
        p->failed = 1;
        snprintf(p->err, sizeof(p->err), "open: %s", e.message);
        return NULL;
    }
    for (unsigned i = 0; !p->stop; i++) {
        int n = snprintf(key, sizeof(key), "probe/%04u", i % 1000);
        double t0 = bsrv_now();
        int rc;
        if (p->is_put) {
            kvc_put_result r;
            rc = kvc_put(c, key, (size_t)n, val, sizeof(val), NULL, 600000, &r, &e);
            if (!rc)
                kvc_put_result_free(&r);
        } else {
            kvc_range_result r;
            rc = kvc_get(c, "fill/00000000", 13, NULL, 600000, &r, &e);
            if (!rc)
                kvc_range_result_free(&r);
        }
        if (rc) {
            p->failed = 1;
            snprintf(p->err, sizeof(p->err), "%s: %d %s", p->is_put ? "put" : "range", e.code,
                     e.message);
            break;
        }
        bsrv_samples_add(&p->t0, t0);
        bsrv_samples_add(&p->lat, (bsrv_now() - t0) * 1e3);
    }
    kvc_close(c);
    return NULL;
}

/* Latencies of the calls that started in [a, b) (started == 1), or that overlap [a, b). */
static void probe_window(const probe *p, double a, double b, int overlap, bsrv_samples *out)
{
    for (size_t i = 0; i < p->lat.n; i++) {
        double s = p->t0.v[i], e = s + p->lat.v[i] / 1e3;
        int in = overlap ? (s < b && e > a) : (s >= a && s < b);
        if (in)
            bsrv_samples_add(out, p->lat.v[i]);
    }
}

typedef struct result {
    int ok;
    double fill_s, fill_mb_s;
    uint64_t db_full, total_full;
    double snap_s, snap_mb;
    double put_p50_before, put_p99_before, put_max_before, put_p50_during, put_p99_during,
        put_max_during;
    size_t put_n_during;
    uint64_t db_before_defrag, db_after_defrag, total_before_defrag, total_after_defrag;
    double defrag_s, range_stall_ms, range_p99_before, range_p99_during;
} result;

static double mb(uint64_t b)
{
    return (double)b / (1024.0 * 1024.0);
}

static int bench_one(const opts *o, bsrv_kind k, result *r, char *err, size_t errcap)
{
    memset(r, 0, sizeof(*r));
    bsrv_server s;
    char quota[64];
    long long q = 3LL * o->size_mb * 1024 * 1024;
    if (q < 2147483648LL)
        q = 2147483648LL;
    snprintf(quota, sizeof(quota), "--quota-backend-bytes=%lld", q);
    const char *extra[] = {quota, NULL};
    int rc = bsrv_start(&s, k, 0, NULL, extra, err, errcap);
    if (rc)
        return rc;
    const char *name = bsrv_name(k);
    int vlen = o->value_kb * 1024;
    int nkeys = (int)((long long)o->size_mb * 1024 / o->value_kb);
    int64_t rev = 0;
    double t0 = bsrv_now();
    printf("%s: filling %d keys x %d KiB with %d clients ...\n", name, nkeys, o->value_kb,
           o->fill_clients);
    fflush(stdout);
    if ((rc = fill(&s, nkeys, o->fill_clients, vlen, 0, &rev, err, errcap)))
        goto out;
    r->fill_s = bsrv_now() - t0;
    r->fill_mb_s = (double)nkeys * o->value_kb / 1024.0 / r->fill_s;
    bsrv_dir_sizes(s.data_dir, &r->db_full, &r->total_full);
    printf("%s: filled in %.1f s (%.1f MB/s of values); largest file %.0f MB, data dir %.0f MB\n",
           name, r->fill_s, r->fill_mb_s, mb(r->db_full), mb(r->total_full));
    fflush(stdout);

    bsrv_sleep_ms((uint32_t)(o->settle_s * 1000)); /* let background work after the fill end */
    /* snapshot save with a 1-client put probe */
    probe pp = {.s = &s, .is_put = 1};
    pthread_create(&pp.th, NULL, probe_main, &pp);
    bsrv_sleep_ms((uint32_t)(o->before_s * 1000) + 500);
    char snap[400];
    snprintf(snap, sizeof(snap), "%s/snapshot.db", s.dir);
    const char *sa[] = {"snapshot", "save", snap, NULL};
    double sa0 = bsrv_now();
    rc = bsrv_etcdctl_run(&s, sa, NULL, &r->snap_s);
    double sa1 = bsrv_now();
    bsrv_sleep_ms(500);
    pp.stop = 1;
    pthread_join(pp.th, NULL);
    if (rc || pp.failed) {
        snprintf(err, errcap, "%s: snapshot save %s (see %.200s/ctl.log) %.200s", name,
                 rc ? "failed" : "ok", s.dir, pp.failed ? pp.err : "");
        rc = -EIO;
        goto probe_out;
    }
    uint64_t snap_sz = 0, dummy = 0;
    bsrv_dir_sizes(snap, &snap_sz, &dummy);
    r->snap_mb = mb(snap_sz);
    unlink(snap);
    {
        bsrv_samples b = {0}, d = {0};
        probe_window(&pp, sa0 - o->before_s, sa0, 0, &b);
        probe_window(&pp, sa0, sa1, 1, &d);
        r->put_p50_before = bsrv_samples_pct(&b, 50);
        r->put_p99_before = bsrv_samples_pct(&b, 99);
        r->put_max_before = bsrv_samples_max(&b);
        r->put_p50_during = bsrv_samples_pct(&d, 50);
        r->put_p99_during = bsrv_samples_pct(&d, 99);
        r->put_max_during = bsrv_samples_max(&d);
        r->put_n_during = d.n;
        bsrv_samples_free(&b);
        bsrv_samples_free(&d);
    }
    printf("%s: snapshot save %.0f MB in %.2f s = %.1f MB/s; put p50/p99 before %.2f/%.2f ms, "
           "during %.2f/%.2f ms (%zu puts, max %.1f ms)\n",
           name, r->snap_mb, r->snap_s, r->snap_mb / r->snap_s, r->put_p50_before,
           r->put_p99_before, r->put_p50_during, r->put_p99_during, r->put_n_during,
           r->put_max_during);
    fflush(stdout);

    /* delete half, compact, defrag with a Range probe */
    if ((rc = fill(&s, nkeys, o->fill_clients, vlen, 1, &rev, err, errcap)))
        goto probe_out;
    {
        kvc_client *c = NULL;
        kvc_error e;
        if ((rc = bsrv_client(&c, &s, NULL, NULL, &e)) == 0) {
            kvc_put_result pr;
            rc = kvc_put(c, "last", 4, "x", 1, NULL, 60000, &pr, &e);
            if (!rc) {
                rev = pr.header.revision;
                kvc_put_result_free(&pr);
                rc = kvc_compact(c, rev, 1, 0, 600000, NULL, &e);
            }
            kvc_close(c);
        }
        if (rc) {
            snprintf(err, errcap, "%s: compact: %d %s", name, e.code, e.message);
            goto probe_out;
        }
    }
    bsrv_sleep_ms(1000);
    bsrv_dir_sizes(s.data_dir, &r->db_before_defrag, &r->total_before_defrag);
    probe rp = {.s = &s, .is_put = 0};
    pthread_create(&rp.th, NULL, probe_main, &rp);
    bsrv_sleep_ms((uint32_t)(o->before_s * 1000) + 500);
    const char *da[] = {"defrag", NULL};
    double d0 = bsrv_now();
    rc = bsrv_etcdctl_run(&s, da, NULL, &r->defrag_s);
    double d1 = bsrv_now();
    bsrv_sleep_ms(500);
    rp.stop = 1;
    pthread_join(rp.th, NULL);
    if (rc || rp.failed) {
        snprintf(err, errcap, "%s: defrag %s (see %.200s/ctl.log) %.200s", name,
                 rc ? "failed" : "ok", s.dir, rp.failed ? rp.err : "");
        rc = -EIO;
    } else {
        bsrv_samples b = {0}, d = {0};
        probe_window(&rp, d0 - o->before_s, d0, 0, &b);
        probe_window(&rp, d0, d1, 1, &d);
        r->range_p99_before = bsrv_samples_pct(&b, 99);
        r->range_p99_during = bsrv_samples_pct(&d, 99);
        r->range_stall_ms = bsrv_samples_max(&d);
        bsrv_samples_free(&b);
        bsrv_samples_free(&d);
        bsrv_dir_sizes(s.data_dir, &r->db_after_defrag, &r->total_after_defrag);
        printf("%s: defrag %.2f s; largest file %.0f -> %.0f MB (data dir %.0f -> %.0f MB); "
               "Range p99 before %.2f ms, during %.2f ms, longest stall %.0f ms\n",
               name, r->defrag_s, mb(r->db_before_defrag), mb(r->db_after_defrag),
               mb(r->total_before_defrag), mb(r->total_after_defrag), r->range_p99_before,
               r->range_p99_during, r->range_stall_ms);
        r->ok = 1;
    }
    bsrv_samples_free(&rp.t0);
    bsrv_samples_free(&rp.lat);
probe_out:
    bsrv_samples_free(&pp.t0);
    bsrv_samples_free(&pp.lat);
out:
    fflush(stdout);
    bsrv_stop(&s);
    return rc;
}

static void usage(void)
{
    fprintf(stderr, "opsbench [--size-mb N(1024)] [--value-kb N(64)] [--fill-clients N(16)]\n"
                    "         [--before-s S(3)] [--settle-s S(5)] [--server kvd|etcd|both]\n");
}

int main(int argc, char **argv)
{
    opts o = {.size_mb = 1024,
              .value_kb = 64,
              .fill_clients = 16,
              .before_s = 3,
              .settle_s = 5,
              .do_kvd = 1,
              .do_etcd = 1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            usage();
            return 2;
        }
        if (!strcmp(a, "--size-mb"))
            o.size_mb = atoi(v);
        else if (!strcmp(a, "--value-kb"))
            o.value_kb = atoi(v);
        else if (!strcmp(a, "--fill-clients"))
            o.fill_clients = atoi(v);
        else if (!strcmp(a, "--settle-s"))
            o.settle_s = atof(v);
        else if (!strcmp(a, "--before-s"))
            o.before_s = atof(v);
        else if (!strcmp(a, "--server")) {
            o.do_kvd = strcmp(v, "etcd") != 0;
            o.do_etcd = strcmp(v, "kvd") != 0;
        } else {
            usage();
            return 2;
        }
        i++;
    }
    if (o.size_mb < 1 || o.value_kb < 1 || o.value_kb > 1024 || o.fill_clients < 1) {
        usage();
        return 2;
    }
    const char *tmp = getenv("TMPDIR");
    struct statvfs vf;
    if (statvfs(tmp && *tmp ? tmp : "/tmp", &vf) == 0) {
        double free_mb = (double)vf.f_bavail * (double)vf.f_frsize / 1048576.0;
        /* etcd: WAL + db + snapshot file ~ 3x the data, one server at a time */
        if (free_mb < 4.0 * o.size_mb) {
            fprintf(stderr, "opsbench: %.0f MB free, need about %d MB; use --size-mb\n", free_mb,
                    4 * o.size_mb);
            return 1;
        }
    }
    printf("opsbench: %d MB store (%d KiB values, %d fill clients), probes 1 client, %.0f s "
           "baseline after %.0f s settle\n",
           o.size_mb, o.value_kb, o.fill_clients, o.before_s, o.settle_s);
    result res[2];
    memset(res, 0, sizeof(res));
    char err[1024];
    int failed = 0;
    for (int k = 0; k < 2; k++) {
        if ((k == 0 && !o.do_kvd) || (k == 1 && !o.do_etcd))
            continue;
        if (bench_one(&o, (bsrv_kind)k, &res[k], err, sizeof(err))) {
            fprintf(stderr, "opsbench: %s\n", err);
            failed = 1;
        }
    }
    printf("\n| | kvd | etcd 3.4 | kvd/etcd |\n|---|---|---|---|\n");
#define ROW(label, fmt, f)                                                                         \
    do {                                                                                           \
        double a = res[0].ok ? (f(res[0])) : 0, b = res[1].ok ? (f(res[1])) : 0;                   \
        printf("| " label " | " fmt " | " fmt " | ", a, b);                                        \
        if (a > 0 && b > 0)                                                                        \
            printf("%.2f |\n", a / b);                                                             \
        else                                                                                       \
            printf("n/a |\n");                                                                     \
    } while (0)
#define F_FILL(r) (r).fill_mb_s
#define F_DB(r) mb((r).db_full)
#define F_SNAPMB(r) (r).snap_mb
#define F_SNAPS(r) (r).snap_s
#define F_SNAPRATE(r) ((r).snap_mb / (r).snap_s)
#define F_P50B(r) (r).put_p50_before
#define F_P50D(r) (r).put_p50_during
#define F_P99B(r) (r).put_p99_before
#define F_P99D(r) (r).put_p99_during
#define F_MAXD(r) (r).put_max_during
#define F_DBB(r) mb((r).db_before_defrag)
#define F_DBA(r) mb((r).db_after_defrag)
#define F_DEFS(r) (r).defrag_s
#define F_STALL(r) (r).range_stall_ms
#define F_RP99B(r) (r).range_p99_before
    ROW("fill (values written, 16 clients), MB/s", "%.1f", F_FILL);
    ROW("backend file after fill, MB", "%.0f", F_DB);
    ROW("snapshot file, MB", "%.0f", F_SNAPMB);
    ROW("snapshot save time, s", "%.2f", F_SNAPS);
    ROW("snapshot save, MB/s", "%.1f", F_SNAPRATE);
    ROW("put p50 (1 client) before save, ms", "%.2f", F_P50B);
    ROW("put p50 (1 client) during save, ms", "%.2f", F_P50D);
    ROW("put p99 (1 client) before save, ms", "%.2f", F_P99B);
    ROW("put p99 (1 client) during save, ms", "%.2f", F_P99D);
    ROW("longest put during save, ms", "%.1f", F_MAXD);
    ROW("backend file after delete half + compact, MB", "%.0f", F_DBB);
    ROW("backend file after defrag, MB", "%.0f", F_DBA);
    ROW("defrag time, s", "%.2f", F_DEFS);
    ROW("Range p99 (1 client) before defrag, ms", "%.2f", F_RP99B);
    ROW("longest Range stall during defrag, ms", "%.0f", F_STALL);
    return failed;
}
