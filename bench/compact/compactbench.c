/*
 * compactbench: does a Compact of many revisions stall writes? kvd vs etcd 3.4, single
 * members on loopback, one after the other in the same run (not a test).
 *
 * For each server: --revisions puts (256 B) spread over --keys keys (every key rewritten
 * revisions/keys times), --txn-puts puts on distinct keys per Txn (100: each put is a stored
 * revision main.sub, what compaction removes; 1: plain puts), from --fill-clients clients; then a
 * 1-client put loop runs for
 * --idle seconds (put latency idle), a Compact at the last fill revision is sent (as
 * `etcdctl compact`, not physical: its answer time is the Compact latency), and the put
 * loop goes on until the server reports the physical compaction finished (kvd:
 * kvd_compaction_pending 0; etcd: the count of
 * etcd_debugging_mvcc_db_compaction_total_duration_milliseconds grows), read from /metrics
 * on the client port every 50 ms. Put latency during = every put that overlapped
 * [Compact sent, compaction finished]. Prints p50/p99/max idle and during, the ratio
 * p99 during / p99 idle, and kvd/etcd. Any failed call aborts the run with its error.
 */
#include "bsrv.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct opts {
    int revisions, keys, fill_clients, txn_puts;
    double idle_s;
    int do_kvd, do_etcd, repeats;
    int kvd_batch_limit; /* 0: kvd's default --experimental-compaction-batch-limit */
} opts;

/* ---- fill ---- */

typedef struct fill_sh {
    const bsrv_server *s;
    kvc_loop_group *g;
    int revisions, keys, clients, txn_puts;
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
    char key[32], val[256];
    memset(val, 'x', sizeof(val));
    int rc = bsrv_client(&c, sh->s, sh->g, NULL, &e);
    int64_t rev = 0;
    int groups = (sh->revisions + sh->txn_puts - 1) / sh->txn_puts;
    for (int g = w->idx; !rc && g < groups && !sh->failed; g += sh->clients) {
        if (sh->txn_puts == 1) {
            int n = snprintf(key, sizeof(key), "fill/%08d", g % sh->keys);
            kvc_put_result r;
            rc = kvc_put(c, key, (size_t)n, val, sizeof(val), NULL, 60000, &r, &e);
            if (!rc) {
                rev = r.header.revision > rev ? r.header.revision : rev;
                kvc_put_result_free(&r);
            }
            continue;
        }
        /* one txn of txn_puts puts on distinct keys: txn_puts stored revisions (main.sub) */
        kvc_txn *t = kvc_txn_new();
        for (int j = 0; t && j < sh->txn_puts && g * sh->txn_puts + j < sh->revisions; j++) {
            int n = snprintf(key, sizeof(key), "fill/%08d", (g * sh->txn_puts + j) % sh->keys);
            kvc_txn_put(t, KVC_TXN_SUCCESS, key, (size_t)n, val, sizeof(val), NULL);
        }
        kvc_txn_result r;
        rc = t ? kvc_txn_commit(c, t, 0, 60000, &r, &e) : -ENOMEM;
        if (!rc) {
            rev = r.header.revision > rev ? r.header.revision : rev;
            kvc_txn_result_free(&r);
        }
        kvc_txn_free(t);
    }
    pthread_mutex_lock(&sh->mu);
    if (rc && !sh->failed) {
        sh->failed = 1;
        snprintf(sh->err, sizeof(sh->err), "put: %d %s", e.code, e.message);
    }
    if (rev > sh->max_rev)
        sh->max_rev = rev;
    pthread_mutex_unlock(&sh->mu);
    kvc_close(c);
    return NULL;
}

static int fill(const bsrv_server *s, const opts *o, int64_t *rev, char *err, size_t errcap)
{
    fill_sh sh = {.s = s,
                  .revisions = o->revisions,
                  .keys = o->keys,
                  .clients = o->fill_clients,
                  .txn_puts = o->txn_puts};
    pthread_mutex_init(&sh.mu, NULL);
    kvc_error e;
    if (kvc_loop_group_new(&sh.g, &e)) {
        snprintf(err, errcap, "loop group: %s", e.message);
        return -ENOMEM;
    }
    fill_w *w = calloc((size_t)o->fill_clients, sizeof(*w));
    for (int i = 0; i < o->fill_clients; i++) {
        w[i].sh = &sh;
        w[i].idx = i;
        pthread_create(&w[i].th, NULL, fill_main, &w[i]);
    }
    for (int i = 0; i < o->fill_clients; i++)
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

/* ---- put probe: 1 client, start time and latency of every call ---- */

typedef struct probe {
    const bsrv_server *s;
    volatile int stop;
    int timeouts; /* puts answered "request timed out" */
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
        kvc_put_result r;
        int rc = kvc_put(c, key, (size_t)n, val, sizeof(val), NULL, 600000, &r, &e);
        if (rc && e.code == 14 && strstr(e.message, "timed out")) {
            /* the server gave up waiting for the apply (etcd's request timeout): a stall as
             * long as that call, counted and kept in the samples */
            p->timeouts++;
            bsrv_samples_add(&p->t0, t0);
            bsrv_samples_add(&p->lat, (bsrv_now() - t0) * 1e3);
            continue;
        }
        if (rc) {
            p->failed = 1;
            snprintf(p->err, sizeof(p->err), "put: %d %s", e.code, e.message);
            break;
        }
        kvc_put_result_free(&r);
        bsrv_samples_add(&p->t0, t0);
        bsrv_samples_add(&p->lat, (bsrv_now() - t0) * 1e3);
    }
    kvc_close(c);
    return NULL;
}

static void probe_window(const probe *p, double a, double b, int overlap, bsrv_samples *out)
{
    for (size_t i = 0; i < p->lat.n; i++) {
        double s = p->t0.v[i], e = s + p->lat.v[i] / 1e3;
        int in = overlap ? (s < b && e > a) : (s >= a && s < b);
        if (in)
            bsrv_samples_add(out, p->lat.v[i]);
    }
}

/* ---- /metrics on the client port (curl; the run is not timed by it) ---- */

/* Value of the first sample line of metric `name` (exact name, no labels), or -1. */
static double metric(const bsrv_server *s, const char *name)
{
    char cmd[256], line[512];
    snprintf(cmd, sizeof(cmd), "curl -s -m 5 %s/metrics", s->url);
    FILE *f = popen(cmd, "r");
    if (f == NULL)
        return -1;
    double v = -1;
    size_t nl = strlen(name);
    while (fgets(line, sizeof(line), f)) {
        if (v < 0 && strncmp(line, name, nl) == 0 && line[nl] == ' ')
            v = strtod(line + nl + 1, NULL);
    }
    pclose(f);
    return v;
}

/* 1 when the physical compaction is finished (etcd: done_before = count before the
 * Compact), 0 when not, -1 when the metric is missing. */
static int compaction_done(const bsrv_server *s, double done_before)
{
    if (s->kind == BSRV_KVD) {
        double v = metric(s, "kvd_compaction_pending");
        return v < 0 ? -1 : v == 0;
    }
    double v = metric(s, "etcd_debugging_mvcc_db_compaction_total_duration_milliseconds_count");
    return v < 0 ? -1 : v > done_before;
}

/* ---- one server ---- */

typedef struct result {
    double fill_s, compact_ms, physical_s;
    double p50_idle, p99_idle, max_idle, p50_during, p99_during, max_during;
    size_t n_idle, n_during;
    double steps, step_max; /* kvd only */
    char compact_err[300];  /* the Compact's error, if it failed */
} result;

static int bench_one(const opts *o, bsrv_kind k, result *r, char *err, size_t errcap)
{
    memset(r, 0, sizeof(*r));
    bsrv_server s;
    char bl[64];
    snprintf(bl, sizeof(bl), "--experimental-compaction-batch-limit=%d", o->kvd_batch_limit);
    const char *extra[] = {bl, NULL};
    int rc =
        bsrv_start(&s, k, 0, NULL, k == BSRV_KVD && o->kvd_batch_limit ? extra : NULL, err, errcap);
    if (rc)
        return rc;
    const char *name = bsrv_name(k);
    int64_t rev = 0;
    printf("%s: %d revisions (puts, %d per txn) over %d keys with %d clients ...\n", name,
           o->revisions, o->txn_puts, o->keys, o->fill_clients);
    fflush(stdout);
    double t0 = bsrv_now();
    if ((rc = fill(&s, o, &rev, err, errcap)))
        goto out;
    r->fill_s = bsrv_now() - t0;
    double done_before = k == BSRV_ETCD ? metric(&s, "etcd_debugging_mvcc_db_compaction_total_"
                                                     "duration_milliseconds_count")
                                        : 0;
    if (k == BSRV_ETCD && done_before < 0)
        done_before = 0; /* no compaction observed yet: the histogram has no samples */
    bsrv_sleep_ms(1000);

    probe pp = {.s = &s};
    pthread_create(&pp.th, NULL, probe_main, &pp);
    bsrv_sleep_ms((uint32_t)(o->idle_s * 1000) + 300);
    kvc_client *c = NULL;
    kvc_error e;
    double c0 = bsrv_now(), c1 = 0, c2 = 0;
    rc = bsrv_client(&c, &s, NULL, NULL, &e);
    if (!rc) {
        c0 = bsrv_now();
        rc = kvc_compact(c, rev, 0, 0, 600000, NULL, &e);
        c1 = bsrv_now();
        kvc_close(c);
    }
    if (rc && c1 > 0) {
        /* answered with an error (e.g. kvd before the bounded steps: "request timed out"
         * while the one-step compaction ran): recorded, the compaction still goes on */
        snprintf(r->compact_err, sizeof(r->compact_err), "%d %s", e.code, e.message);
        printf("%s: Compact answered with an error after %.0f ms: %s\n", name, (c1 - c0) * 1e3,
               r->compact_err);
        rc = 0;
    } else if (rc) {
        snprintf(err, errcap, "%s: compact: %d %s", name, e.code, e.message);
    }
    int done = 0;
    while (!rc && bsrv_now() - c0 < 600) {
        done = compaction_done(&s, done_before);
        if (done)
            break;
        bsrv_sleep_ms(50);
    }
    c2 = bsrv_now();
    if (!rc && done < 0) {
        snprintf(err, errcap, "%s: compaction progress metric missing", name);
        rc = -EIO;
    } else if (!rc && !done) {
        snprintf(err, errcap, "%s: compaction not finished after 600 s", name);
        rc = -ETIMEDOUT;
    }
    if (k == BSRV_KVD) {
        r->steps = metric(&s, "kvd_compaction_batches_total");
        r->step_max = metric(&s, "kvd_compaction_step_removed_max");
    }
    bsrv_sleep_ms(300);
    pp.stop = 1;
    pthread_join(pp.th, NULL);
    if (!rc && pp.failed) {
        snprintf(err, errcap, "%s: %s", name, pp.err);
        rc = -EIO;
    }
    if (!rc) {
        bsrv_samples b = {0}, d = {0};
        probe_window(&pp, c0 - o->idle_s, c0, 0, &b);
        probe_window(&pp, c0, c2, 1, &d);
        r->compact_ms = (c1 - c0) * 1e3;
        r->physical_s = c2 - c0;
        r->p50_idle = bsrv_samples_pct(&b, 50);
        r->p99_idle = bsrv_samples_pct(&b, 99);
        r->max_idle = bsrv_samples_max(&b);
        r->n_idle = b.n;
        r->p50_during = bsrv_samples_pct(&d, 50);
        r->p99_during = bsrv_samples_pct(&d, 99);
        r->max_during = bsrv_samples_max(&d);
        r->n_during = d.n;
        bsrv_samples_free(&b);
        bsrv_samples_free(&d);
        printf("%s: fill %.1f s; Compact at %lld answered in %.1f ms, physical compaction "
               "done after %.2f s; put p50/p99/max idle %.2f/%.2f/%.1f ms (%zu), during "
               "%.2f/%.2f/%.1f ms (%zu)",
               name, r->fill_s, (long long)rev, r->compact_ms, r->physical_s, r->p50_idle,
               r->p99_idle, r->max_idle, r->n_idle, r->p50_during, r->p99_during, r->max_during,
               r->n_during);
        if (k == BSRV_KVD)
            printf("; %.0f steps, at most %.0f revisions per step", r->steps, r->step_max);
        if (pp.timeouts)
            printf("; %d puts answered \"request timed out\"", pp.timeouts);
        printf("\n");
        fflush(stdout);
    }
    bsrv_samples_free(&pp.t0);
    bsrv_samples_free(&pp.lat);
out:
    bsrv_stop(&s);
    return rc;
}

static void usage(void)
{
    fprintf(
        stderr,
        "usage: compactbench [--revisions N] [--keys N] [--fill-clients N] "
        "[--txn-puts N] [--kvd-batch-limit N] [--idle S] [--repeats N] [--server kvd|etcd|both]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    opts o = {.revisions = 250000,
              .keys = 1000,
              .fill_clients = 16,
              .txn_puts = 100,
              .idle_s = 5,
              .do_kvd = 1,
              .do_etcd = 1,
              .repeats = 1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            usage();
        if (!strcmp(a, "--revisions"))
            o.revisions = atoi(v);
        else if (!strcmp(a, "--keys"))
            o.keys = atoi(v);
        else if (!strcmp(a, "--kvd-batch-limit"))
            o.kvd_batch_limit = atoi(v);
        else if (!strcmp(a, "--txn-puts"))
            o.txn_puts = atoi(v);
        else if (!strcmp(a, "--fill-clients"))
            o.fill_clients = atoi(v);
        else if (!strcmp(a, "--idle"))
            o.idle_s = atof(v);
        else if (!strcmp(a, "--repeats"))
            o.repeats = atoi(v);
        else if (!strcmp(a, "--server")) {
            o.do_kvd = !strcmp(v, "kvd") || !strcmp(v, "both");
            o.do_etcd = !strcmp(v, "etcd") || !strcmp(v, "both");
        } else
            usage();
        i++;
    }
    if (o.revisions < 1 || o.keys < 1 || o.fill_clients < 1 || o.repeats < 1 || o.idle_s <= 0 ||
        o.txn_puts < 1 || o.txn_puts > 128 || o.txn_puts > o.keys)
        usage();
    char kb[512], eb[512];
    printf("compactbench: %d revisions over %d keys, kvd %s, etcd %s\n", o.revisions, o.keys,
           o.do_kvd ? bsrv_bin(BSRV_KVD, kb, sizeof(kb)) : "-",
           o.do_etcd ? bsrv_bin(BSRV_ETCD, eb, sizeof(eb)) : "-");
    result rk[16], re[16];
    int nk = 0, ne = 0;
    char err[600];
    for (int rep = 0; rep < o.repeats && rep < 16; rep++) {
        for (int j = 0; j < 2; j++) {
            bsrv_kind k = (rep + j) % 2 ? BSRV_ETCD : BSRV_KVD; /* alternate who goes first */
            if ((k == BSRV_KVD && !o.do_kvd) || (k == BSRV_ETCD && !o.do_etcd))
                continue;
            result *r = k == BSRV_KVD ? &rk[nk] : &re[ne];
            if (bench_one(&o, k, r, err, sizeof(err))) {
                fprintf(stderr, "compactbench: %s\n", err);
                return 1;
            }
            if (k == BSRV_KVD)
                nk++;
            else
                ne++;
        }
    }
    /* medians */
    double mk[6], me[6], v[16];
#define MED(arr, n, field, out)                                                                    \
    do {                                                                                           \
        for (int q = 0; q < (n); q++)                                                              \
            v[q] = (arr)[q].field;                                                                 \
        (out) = (n) ? bsrv_median(v, (size_t)(n)) : 0;                                             \
    } while (0)
    MED(rk, nk, compact_ms, mk[0]);
    MED(rk, nk, physical_s, mk[1]);
    MED(rk, nk, p50_idle, mk[2]);
    MED(rk, nk, p99_idle, mk[3]);
    MED(rk, nk, p99_during, mk[4]);
    MED(rk, nk, max_during, mk[5]);
    MED(re, ne, compact_ms, me[0]);
    MED(re, ne, physical_s, me[1]);
    MED(re, ne, p50_idle, me[2]);
    MED(re, ne, p99_idle, me[3]);
    MED(re, ne, p99_during, me[4]);
    MED(re, ne, max_during, me[5]);
    static const char *const rows[] = {
        "Compact answered, ms", "physical compaction done, s",   "put p50 idle, ms",
        "put p99 idle, ms",     "put p99 during compaction, ms", "put max during compaction, ms"};
    printf("\n| medians of %d run(s) | kvd | etcd | kvd/etcd |\n|---|---|---|---|\n", o.repeats);
    for (int i = 0; i < 6; i++)
        printf("| %s | %.2f | %.2f | %.2f |\n", rows[i], mk[i], me[i],
               me[i] > 0 ? mk[i] / me[i] : 0);
    printf("| put p99 during / idle | %.2f | %.2f | |\n", mk[3] > 0 ? mk[4] / mk[3] : 0,
           me[3] > 0 ? me[4] / me[3] : 0);
    if (nk)
        printf("target (kvd put p99 during compaction <= 2 x idle): %s\n",
               mk[4] <= 2 * mk[3] ? "MET" : "MISSED");
    return 0;
}
