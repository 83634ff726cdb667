/* lessor: expiry, renewal, rate limits, promote/demote, checkpoints, TTL clamp, ids, and the
 * follower heap (lesson 4). A fake clock and loop == NULL: the test drives kv_lessor_tick(). */
#include <criterion/criterion.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "lease/lease_table.h"
#include "lease/lessor.h"

typedef struct prop {
    int64_t t; /* fake time of the proposal */
    size_t n;
} prop;

typedef struct harness {
    int64_t now;
    kv_lessor *l;
    /* revoke proposals */
    int64_t *ids;
    size_t nids, capids;
    prop *calls;
    size_t ncalls, capcalls;
    int fail_revoke;
    int apply_sync; /* apply proposed revokes inside the call, as a single member may */
    int leader;     /* answer of ops.is_leader */
    /* checkpoint proposals */
    kv_lease_checkpoint cps[4096];
    size_t ncps, cp_calls, max_cp_batch;
} harness;

static uint64_t fake_now(void *arg)
{
    return (uint64_t)((harness *)arg)->now;
}

static int propose_revoke(void *arg, const int64_t *ids, size_t n)
{
    harness *h = arg;
    cr_assert_gt(n, 0);
    if (h->fail_revoke)
        return -EAGAIN;
    if (h->ncalls == h->capcalls) {
        h->capcalls = h->capcalls ? h->capcalls * 2 : 64;
        h->calls = realloc(h->calls, h->capcalls * sizeof(*h->calls));
    }
    h->calls[h->ncalls++] = (prop){.t = h->now, .n = n};
    for (size_t i = 0; i < n; i++) {
        if (h->nids == h->capids) {
            h->capids = h->capids ? h->capids * 2 : 1024;
            h->ids = realloc(h->ids, h->capids * sizeof(*h->ids));
        }
        h->ids[h->nids++] = ids[i];
    }
    if (h->apply_sync)
        for (size_t i = 0; i < n; i++)
            kv_lessor_on_revoked(h->l, ids[i]);
    return 0;
}

static int propose_checkpoint(void *arg, const kv_lease_checkpoint *cps, size_t n)
{
    harness *h = arg;
    h->cp_calls++;
    if (n > h->max_cp_batch)
        h->max_cp_batch = n;
    for (size_t i = 0; i < n && h->ncps < 4096; i++)
        h->cps[h->ncps++] = cps[i];
    return 0;
}

static int is_leader(void *arg)
{
    return ((harness *)arg)->leader;
}

static const kv_lessor_ops OPS = {
    .now_ms = fake_now,
    .propose_revoke = propose_revoke,
    .propose_checkpoint = propose_checkpoint,
    .is_leader = is_leader,
};

/* A harness whose lessor gets cfg as it is (a zero seed stays zero: ids follow the clock). */
static void h_init_exact(harness *h, const kv_lessor_config *cfg)
{
    memset(h, 0, sizeof(*h));
    h->now = 1000000;
    h->leader = 1;
    cr_assert_eq(kv_lessor_create(&h->l, NULL, cfg, &OPS, h), 0);
}

/* A harness with cfg_in (NULL: the defaults), seeded: the same seed, the same ids. */
static void h_init(harness *h, const kv_lessor_config *cfg_in)
{
    kv_lessor_config cfg;
    if (cfg_in)
        cfg = *cfg_in;
    else
        kv_lessor_config_default(&cfg);
    if (!cfg.seed)
        cfg.seed = 12345;
    h_init_exact(h, &cfg);
}

static void h_fini(harness *h)
{
    kv_lessor_free(h->l);
    free(h->ids);
    free(h->calls);
}

static void h_reset(harness *h)
{
    h->nids = h->ncalls = h->ncps = h->cp_calls = h->max_cp_batch = 0;
}

static int proposed(const harness *h, int64_t id)
{
    int n = 0;
    for (size_t i = 0; i < h->nids; i++)
        n += h->ids[i] == id;
    return n;
}

/* Advances the fake clock to t in steps of step ms, ticking at each step. */
static void run_to(harness *h, int64_t t, int64_t step)
{
    while (h->now < t) {
        h->now = h->now + step > t ? t : h->now + step;
        kv_lessor_tick(h->l);
    }
}

Test(lessor, expiry_proposes_right_ids_after_ttl)
{
    harness h;
    h_init(&h, NULL);
    int64_t t0 = h.now;
    cr_assert_eq(kv_lessor_promote(h.l, 0, NULL, NULL), 0);
    cr_assert_eq(kv_lessor_on_granted(h.l, 1, 5, 0), 0);
    cr_assert_eq(kv_lessor_on_granted(h.l, 2, 10, 0), 0);
    cr_assert_eq(kv_lessor_on_granted(h.l, 3, 60, 0), 0);
    cr_assert_eq(kv_lessor_heap_size(h.l), 3);
    cr_assert_eq(kv_lessor_next_due_ms(h.l), t0 + 5000);
    run_to(&h, t0 + 4999, 100);
    cr_assert_eq(h.nids, 0);
    run_to(&h, t0 + 5000, 1);
    cr_assert_eq(h.nids, 1);
    cr_assert_eq(h.ids[0], 1);
    /* not proposed again before the retry timeout, although not revoked yet */
    run_to(&h, t0 + 7999, 100);
    cr_assert_eq(proposed(&h, 1), 1);
    run_to(&h, t0 + 8000, 1);
    cr_assert_eq(proposed(&h, 1), 2, "re-proposed after 3 s while still unrevoked");
    kv_lessor_on_revoked(h.l, 1);
    cr_assert_eq(kv_lessor_heap_size(h.l), 2);
    cr_assert_not(kv_lessor_exists(h.l, 1));
    run_to(&h, t0 + 10000, 100);
    cr_assert_eq(proposed(&h, 2), 1);
    cr_assert_eq(proposed(&h, 3), 0);
    kv_lessor_metrics m;
    kv_lessor_metrics_get(h.l, &m);
    cr_assert_eq(m.expired_total, 3);
    cr_assert_eq(m.revoked_total, 1);
    cr_assert_eq(m.active_leases, 2);
    cr_assert_eq(m.heap_size, 2);
    cr_assert_eq(m.is_primary, 1);
    h_fini(&h);
}

Test(lessor, failed_proposal_keeps_lease_and_retries)
{
    harness h;
    h_init(&h, NULL);
    int64_t t0 = h.now;
    cr_assert_eq(kv_lessor_promote(h.l, 0, NULL, NULL), 0);
    cr_assert_eq(kv_lessor_on_granted(h.l, 9, 2, 0), 0);
    h.fail_revoke = 1;
    run_to(&h, t0 + 2000, 100);
    cr_assert_eq(h.nids, 0);
    cr_assert_eq(kv_lessor_heap_size(h.l), 1);
    h.fail_revoke = 0;
    run_to(&h, t0 + 2400, 100);
    cr_assert_eq(h.nids, 0, "retry waits propose_fail_retry_ms");
    run_to(&h, t0 + 2500, 100);
    cr_assert_eq(proposed(&h, 9), 1);
    h_fini(&h);
}

Test(lessor, renewal_postpones_expiry)
{
    harness h;
    h_init(&h, NULL);
    int64_t t0 = h.now, ttl = -1;
    cr_assert_eq(kv_lessor_renew(h.l, 1, &ttl), -EAGAIN, "not primary");
    cr_assert_eq(kv_lessor_promote(h.l, 0, NULL, NULL), 0);
    cr_assert_eq(kv_lessor_on_granted(h.l, 1, 10, 0), 0);
    cr_assert_eq(kv_lessor_renew(h.l, 77, &ttl), -ENOENT);
    run_to(&h, t0 + 9000, 500);
    cr_assert_eq(kv_lessor_renew(h.l, 1, &ttl), 0);
    cr_assert_eq(ttl, 10);
    int64_t rem, granted;
    cr_assert_eq(kv_lessor_time_to_live(h.l, 1, &rem, &granted), 0);
    cr_assert_eq(rem, 10);
    cr_assert_eq(granted, 10);
    run_to(&h, t0 + 18999, 500);
    cr_assert_eq(h.nids, 0);
    cr_assert_eq(kv_lessor_time_to_live(h.l, 1, &rem, &granted), 0);
    cr_assert_eq(rem, 0);
    run_to(&h, t0 + 19000, 1);
    cr_assert_eq(proposed(&h, 1), 1);
    /* an expired lease awaiting its revoke cannot be renewed */
    cr_assert_eq(kv_lessor_renew(h.l, 1, &ttl), -ENOENT);
    kv_lessor_metrics m;
    kv_lessor_metrics_get(h.l, &m);
    cr_assert_eq(m.keepalives_total, 4);
    h_fini(&h);
}

Test(lessor, recheck_before_propose)
{
    harness h;
    h_init(&h, NULL);
    int64_t t0 = h.now;
    cr_assert_eq(kv_lessor_promote(h.l, 0, NULL, NULL), 0);
    cr_assert_eq(kv_lessor_on_granted(h.l, 1, 5, 0), 0);
    cr_assert_eq(kv_lessor_on_granted(h.l, 2, 5, 0), 0);
    h.now = t0 + 4000;
    int64_t ttl;
    cr_assert_eq(kv_lessor_renew(h.l, 1, &ttl), 0);
    h.now = t0 + 5000;
    kv_lessor_tick(h.l);
    cr_assert_eq(proposed(&h, 1), 0, "renewed lease not proposed");
    cr_assert_eq(proposed(&h, 2), 1);
    /* the raft layer says we lost leadership before demote() arrives: nothing proposed */
    h.leader = 0;
    h.now = t0 + 9000;
    kv_lessor_tick(h.l);
    cr_assert_eq(proposed(&h, 1), 0);
    h.leader = 1;
    h.now = t0 + 12500;
    kv_lessor_tick(h.l);
    cr_assert_eq(proposed(&h, 1), 1, "proposed once leadership is confirmed again");
    /* a demoted lessor proposes nothing */
    cr_assert_eq(kv_lessor_on_granted(h.l, 3, 5, 0), 0);
    kv_lessor_demote(h.l);
    h_reset(&h);
    run_to(&h, t0 + 60000, 250);
    cr_assert_eq(h.nids, 0);
    cr_assert_eq(h.cp_calls, 0);
    cr_assert_eq(kv_lessor_next_due_ms(h.l), INT64_MAX);
    h_fini(&h);
}

Test(lessor, rate_limit_spreads_proposals)
{
    kv_lessor_config cfg;
    kv_lessor_config_default(&cfg);
    cfg.revoke_rate = 100;
    harness h;
    h_init(&h, &cfg);
    h.apply_sync = 1;
    int64_t t0 = h.now;
    cr_assert_eq(kv_lessor_promote(h.l, 0, NULL, NULL), 0);
    enum { N = 1000 };
    for (int64_t id = 1; id <= N; id++)
        cr_assert_eq(kv_lessor_on_granted(h.l, id, 5, 0), 0);
    /* tick as the timer would: at next_due */
    int guard = 0;
    while (kv_lessor_count(h.l) > 0 && guard++ < 100000) {
        int64_t due = kv_lessor_next_due_ms(h.l);
        cr_assert_neq(due, INT64_MAX);
        if (due > h.now)
            h.now = due;
        kv_lessor_tick(h.l);
    }
    cr_assert_eq(h.nids, N);
    for (int64_t id = 1; id <= N; id++)
        cr_assert_eq(proposed(&h, id), 1);
    /* at most rate/2 per call, and rate * T + burst (rate/2) in any window of T = 1 s */
    for (size_t i = 0; i < h.ncalls; i++) {
        cr_assert_leq(h.calls[i].n, 50);
        size_t in_window = 0;
        for (size_t j = i; j < h.ncalls && h.calls[j].t < h.calls[i].t + 1000; j++)
            in_window += h.calls[j].n;
        cr_assert_leq(in_window, 150, "%zu proposals within 1 s of t=%lld", in_window,
                      (long long)(h.calls[i].t - t0));
    }
    int64_t span = h.calls[h.ncalls - 1].t - h.calls[0].t;
    cr_assert_geq(span, 9400, "1000 leases at 100/s take >= 9.5 s (took %lld ms)", (long long)span);
    cr_assert_lt(h.ncalls, 200, "batched: %zu calls", h.ncalls);
    cr_assert_eq(kv_lessor_heap_size(h.l), 0);
    h_fini(&h);
}

Test(lessor, heap_empty_after_demote_and_full_after_promote)
{
    harness h;
    h_init(&h, NULL);
    for (int64_t id = 1; id <= 500; id++)
        cr_assert_eq(kv_lessor_on_granted(h.l, id, 30 + id % 7, 0), 0);
    cr_assert_eq(kv_lessor_heap_size(h.l), 0, "followers keep no heap");
    cr_assert_eq(kv_lessor_promote(h.l, 1000, NULL, NULL), 0);
    cr_assert_eq(kv_lessor_heap_size(h.l), 500);
    cr_assert(kv_lessor_is_primary(h.l));
    kv_lessor_demote(h.l);
    cr_assert_eq(kv_lessor_heap_size(h.l), 0);
    cr_assert_eq(kv_lessor_count(h.l), 500, "the map stays on every member");
    cr_assert_not(kv_lessor_is_primary(h.l));
    int64_t r, g, d;
    cr_assert_eq(kv_lessor_time_to_live(h.l, 1, &r, &g), -EAGAIN);
    cr_assert_eq(kv_lessor_deadline_ms(h.l, 1, &d), -EAGAIN);
    kv_lessor_demote(h.l); /* idempotent */
    cr_assert_eq(kv_lessor_promote(h.l, 0, NULL, NULL), 0);
    cr_assert_eq(kv_lessor_heap_size(h.l), 500);
    cr_assert_eq(kv_lessor_promote(h.l, 0, NULL, NULL), 0); /* re-promote: one item per lease */
    cr_assert_eq(kv_lessor_heap_size(h.l), 500);
    kv_lessor_metrics m;
    kv_lessor_metrics_get(h.l, &m);
    cr_assert_eq(m.heap_size, 500);
    h_fini(&h);
}

static int cmp64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

Test(lessor, promote_spreads_expiry_by_rate)
{
    harness h;
    h_init(&h, NULL); /* revoke_rate 1000 */
    enum { N = 5000 };
    for (int64_t id = 1; id <= N; id++)
        cr_assert_eq(kv_lessor_on_granted(h.l, id, 60, 0), 0);
    int64_t t0 = h.now;
    cr_assert_eq(kv_lessor_promote(h.l, 2000, NULL, NULL), 0);
    int64_t *d = malloc(N * sizeof(*d));
    for (int64_t id = 1; id <= N; id++)
        cr_assert_eq(kv_lessor_deadline_ms(h.l, id, &d[id - 1]), 0);
    qsort(d, N, sizeof(*d), cmp64);
    cr_assert_eq(d[0], t0 + 62000, "deadline = now + TTL + extend");
    size_t j = 0, worst = 0;
    for (size_t i = 0; i < N; i++) {
        while (d[i] - d[j] >= 1000)
            j++;
        if (i - j + 1 > worst)
            worst = i - j + 1;
    }
    cr_assert_leq(worst, 1000, "%zu expiries within one second", worst);
    cr_assert_geq(d[N - 1] - d[0], 5000, "5000 leases spread over >= 5 s");
    cr_log_info("worst expiries per second after promote: %zu, spread %lld ms", worst,
                (long long)(d[N - 1] - d[0]));
    free(d);

    /* fewer leases than the rate: no spreading */
    harness s;
    h_init(&s, NULL);
    for (int64_t id = 1; id <= 100; id++)
        cr_assert_eq(kv_lessor_on_granted(s.l, id, 60, 0), 0);
    cr_assert_eq(kv_lessor_promote(s.l, 0, NULL, NULL), 0);
    for (int64_t id = 1; id <= 100; id++) {
        int64_t dl;
        cr_assert_eq(kv_lessor_deadline_ms(s.l, id, &dl), 0);
        cr_assert_eq(dl, s.now + 60000);
    }
    h_fini(&s);
    h_fini(&h);
}

Test(lessor, checkpoints_for_long_leases_only)
{
    kv_lessor_config cfg;
    kv_lessor_config_default(&cfg);
    cfg.checkpoint_interval_ms = 10000;
    harness h;
    h_init(&h, &cfg);
    int64_t t0 = h.now, ttl;
    cr_assert_eq(kv_lessor_promote(h.l, 0, NULL, NULL), 0);
    cr_assert_eq(kv_lessor_on_granted(h.l, 1, 10, 0), 0);   /* TTL == interval: never */
    cr_assert_eq(kv_lessor_on_granted(h.l, 2, 60, 0), 0);   /* long */
    cr_assert_eq(kv_lessor_on_granted(h.l, 3, 3600, 0), 0); /* long */
    cr_assert_eq(kv_lessor_next_due_ms(h.l), t0 + 10000);
    h.now = t0 + 9000;
    cr_assert_eq(kv_lessor_renew(h.l, 1, &ttl), 0);
    kv_lessor_tick(h.l);
    cr_assert_eq(h.cp_calls, 0, "no round before the interval");
    h.now = t0 + 10000;
    kv_lessor_tick(h.l);
    cr_assert_eq(h.cp_calls, 1, "one batched proposal");
    cr_assert_eq(h.ncps, 2);
    for (size_t i = 0; i < h.ncps; i++) {
        cr_assert_neq(h.cps[i].id, 1);
        if (h.cps[i].id == 2)
            cr_assert_eq(h.cps[i].remaining_ttl, 50);
        else
            cr_assert_eq(h.cps[i].remaining_ttl, 3590);
    }
    kv_lessor_metrics m;
    kv_lessor_metrics_get(h.l, &m);
    cr_assert_eq(m.checkpoints_total, 2);
    /* next round one interval later (lease 1 renewed so it does not expire first) */
    cr_assert_eq(kv_lessor_renew(h.l, 1, &ttl), 0);
    cr_assert_eq(kv_lessor_next_due_ms(h.l), t0 + 20000);
    kv_lessor_on_checkpointed(h.l, 2, 50);
    int64_t rttl, rem;
    cr_assert_eq(kv_lessor_lookup(h.l, 2, &rttl, &rem), 0);
    cr_assert_eq(rem, 50);
    /* renewing a checkpointed lease proposes clearing it, once */
    h_reset(&h);
    cr_assert_eq(kv_lessor_renew(h.l, 2, &ttl), 0);
    cr_assert_eq(h.ncps, 1);
    cr_assert_eq(h.cps[0].id, 2);
    cr_assert_eq(h.cps[0].remaining_ttl, 0);
    cr_assert_eq(kv_lessor_renew(h.l, 2, &ttl), 0);
    cr_assert_eq(h.ncps, 1, "clear not re-proposed while pending");
    kv_lessor_on_checkpointed(h.l, 2, 0);
    cr_assert_eq(kv_lessor_renew(h.l, 2, &ttl), 0);
    cr_assert_eq(h.ncps, 1, "nothing to clear");
    /* a renewed long lease with full TTL left is not checkpointed (etcd rule) */
    h_reset(&h);
    h.now = t0 + 20000;
    cr_assert_eq(kv_lessor_renew(h.l, 2, &ttl), 0);
    kv_lessor_tick(h.l);
    cr_assert_eq(h.ncps, 1);
    cr_assert_eq(h.cps[0].id, 3);
    cr_assert_eq(h.cps[0].remaining_ttl, 3580);
    /* follower: no rounds */
    kv_lessor_demote(h.l);
    h_reset(&h);
    run_to(&h, t0 + 100000, 1000);
    cr_assert_eq(h.cp_calls, 0);
    h_fini(&h);
}

Test(lessor, checkpoint_rate_and_batch_limits)
{
    kv_lessor_config cfg;
    kv_lessor_config_default(&cfg);
    cfg.checkpoint_interval_ms = 10000;
    cfg.checkpoint_rate = 200;
    cfg.checkpoint_batch = 30;
    harness h;
    h_init(&h, &cfg);
    int64_t t0 = h.now;
    cr_assert_eq(kv_lessor_promote(h.l, 0, NULL, NULL), 0);
    for (int64_t id = 1; id <= 1000; id++)
        cr_assert_eq(kv_lessor_on_granted(h.l, id, 3600, 0), 0);
    h.now = t0 + 10000;
    kv_lessor_tick(h.l);
    cr_assert_eq(h.ncps, 100, "burst = rate/2 (%zu)", h.ncps);
    cr_assert_leq(h.max_cp_batch, 30);
    int guard = 0;
    while (h.ncps < 1000 && guard++ < 10000) {
        int64_t due = kv_lessor_next_due_ms(h.l);
        if (due > h.now)
            h.now = due;
        kv_lessor_tick(h.l);
    }
    cr_assert_eq(h.ncps, 1000);
    cr_assert_geq(h.now - (t0 + 10000), 4400, "900 more at 200/s take >= 4.5 s");
    cr_assert_leq(h.max_cp_batch, 30);
    /* the round is over: next one an interval after it started */
    cr_assert_eq(kv_lessor_next_due_ms(h.l), t0 + 20000);
    h_fini(&h);
}

/* ---- lease table backed tests ---- */

typedef struct db {
    char dir[64];
    MDB_env *env;
    kv_lease_table t;
} db;

static void db_open(db *d)
{
    snprintf(d->dir, sizeof(d->dir), "/tmp/kv-lessor-XXXXXX");
    cr_assert_not_null(mkdtemp(d->dir));
    cr_assert_eq(mdb_env_create(&d->env), 0);
    cr_assert_eq(mdb_env_set_maxdbs(d->env, 4), 0);
    cr_assert_eq(mdb_env_set_mapsize(d->env, 64u << 20), 0);
    cr_assert_eq(mdb_env_open(d->env, d->dir, MDB_NOSYNC, 0644), 0);
    MDB_txn *txn;
    cr_assert_eq(mdb_txn_begin(d->env, NULL, 0, &txn), 0);
    cr_assert_eq(kv_lease_table_open(&d->t, txn), 0);
    cr_assert_eq(mdb_txn_commit(txn), 0);
}

static void db_close(db *d)
{
    char p[128];
    mdb_env_close(d->env);
    snprintf(p, sizeof(p), "%s/data.mdb", d->dir);
    unlink(p);
    snprintf(p, sizeof(p), "%s/lock.mdb", d->dir);
    unlink(p);
    rmdir(d->dir);
}

Test(lessor, promote_uses_checkpointed_remaining_ttl)
{
    db d;
    db_open(&d);
    MDB_txn *txn;
    cr_assert_eq(mdb_txn_begin(d.env, NULL, 0, &txn), 0);
    kv_lease_rec a = {.id = 1, .ttl = 600, .remaining_ttl = 100};
    kv_lease_rec b = {.id = 2, .ttl = 60, .remaining_ttl = 0};
    kv_lease_rec tiny = {.id = 5, .ttl = 0}; /* below the minimum TTL (1 s) */
    cr_assert_eq(kv_lease_table_put(&d.t, txn, &a), 0);
    cr_assert_eq(kv_lease_table_put(&d.t, txn, &b), 0);
    cr_assert_eq(kv_lease_table_put(&d.t, txn, &tiny), 0);
    cr_assert_eq(mdb_txn_commit(txn), 0);

    harness h;
    h_init(&h, NULL);
    /* a follower starting up loads the map, no heap */
    cr_assert_eq(mdb_txn_begin(d.env, NULL, MDB_RDONLY, &txn), 0);
    cr_assert_eq(kv_lessor_recover(h.l, txn, &d.t), 0);
    cr_assert_eq(kv_lessor_count(h.l), 3);
    cr_assert_eq(kv_lessor_heap_size(h.l), 0);
    int64_t ttl, rem;
    cr_assert_eq(kv_lessor_lookup(h.l, 1, &ttl, &rem), 0);
    cr_assert_eq(ttl, 600);
    cr_assert_eq(rem, 100);
    cr_assert_eq(kv_lessor_lookup(h.l, 5, &ttl, &rem), 0);
    cr_assert_eq(ttl, 1, "stored TTL below the minimum is raised to it");
    /* becoming leader rebuilds from the table */
    cr_assert_eq(kv_lessor_promote(h.l, 2000, txn, &d.t), 0);
    mdb_txn_abort(txn);
    cr_assert_eq(kv_lessor_heap_size(h.l), 3);
    kv_lessor_on_revoked(h.l, 5);
    int64_t dl;
    cr_assert_eq(kv_lessor_deadline_ms(h.l, 1, &dl), 0);
    cr_assert_eq(dl, h.now + 100000 + 2000);
    cr_assert_eq(kv_lessor_deadline_ms(h.l, 2, &dl), 0);
    cr_assert_eq(dl, h.now + 60000 + 2000);
    /* in-memory path: an applied checkpoint is used by the next promote */
    kv_lessor_on_checkpointed(h.l, 2, 30);
    kv_lessor_demote(h.l);
    cr_assert_eq(kv_lessor_promote(h.l, 0, NULL, NULL), 0);
    cr_assert_eq(kv_lessor_deadline_ms(h.l, 2, &dl), 0);
    cr_assert_eq(dl, h.now + 30000);
    /* recover on the primary (snapshot install, aborted batch): map and heap follow the table */
    cr_assert_eq(mdb_txn_begin(d.env, NULL, 0, &txn), 0);
    kv_lease_rec c = {.id = 3, .ttl = 90};
    cr_assert_eq(kv_lease_table_put(&d.t, txn, &c), 0);
    cr_assert_eq(kv_lease_table_del(&d.t, txn, 1), 0);
    cr_assert_eq(kv_lease_table_del(&d.t, txn, 5), 0);
    cr_assert_eq(mdb_txn_commit(txn), 0);
    cr_assert_eq(mdb_txn_begin(d.env, NULL, MDB_RDONLY, &txn), 0);
    cr_assert_eq(kv_lessor_recover(h.l, txn, &d.t), 0);
    mdb_txn_abort(txn);
    cr_assert(kv_lessor_is_primary(h.l));
    cr_assert_eq(kv_lessor_count(h.l), 2);
    cr_assert_eq(kv_lessor_heap_size(h.l), 2);
    cr_assert_not(kv_lessor_exists(h.l, 1));
    cr_assert_eq(kv_lessor_deadline_ms(h.l, 3, &dl), 0);
    cr_assert_eq(dl, h.now + 90000);
    h_fini(&h);
    db_close(&d);
}

Test(lessor, promote_reports_corrupt_table)
{
    db d;
    db_open(&d);
    MDB_txn *txn;
    cr_assert_eq(mdb_txn_begin(d.env, NULL, 0, &txn), 0);
    kv_lease_rec a = {.id = 1, .ttl = 600};
    cr_assert_eq(kv_lease_table_put(&d.t, txn, &a), 0);
    uint8_t kb[8] = {0, 0, 0, 0, 0, 0, 0, 1}, junk[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    MDB_val k = {.mv_size = 8, .mv_data = kb}, v = {.mv_size = 8, .mv_data = junk};
    cr_assert_eq(mdb_put(txn, d.t.leases, &k, &v, 0), 0);
    harness h;
    h_init(&h, NULL);
    cr_assert_eq(kv_lessor_promote(h.l, 0, txn, &d.t), -EIO);
    cr_assert_not(kv_lessor_is_primary(h.l));
    cr_assert_eq(kv_lessor_heap_size(h.l), 0);
    mdb_txn_abort(txn);
    h_fini(&h);
    db_close(&d);
}

Test(lessor, ttl_clamp)
{
    kv_lessor_config cfg;
    kv_lessor_config_default(&cfg);
    cfg.min_ttl_s = 3;
    cfg.max_ttl_s = 100;
    harness h;
    h_init(&h, &cfg);
    cr_assert_eq(kv_lessor_clamp_ttl(h.l, -5), 3);
    cr_assert_eq(kv_lessor_clamp_ttl(h.l, 0), 3);
    cr_assert_eq(kv_lessor_clamp_ttl(h.l, 2), 3);
    cr_assert_eq(kv_lessor_clamp_ttl(h.l, 3), 3);
    cr_assert_eq(kv_lessor_clamp_ttl(h.l, 50), 50);
    cr_assert_eq(kv_lessor_clamp_ttl(h.l, 100), 100);
    cr_assert_eq(kv_lessor_clamp_ttl(h.l, 101), -ERANGE);
    h_fini(&h);
    /* invalid configurations are refused */
    kv_lessor *l = NULL;
    kv_lessor_config bad = cfg;
    bad.min_ttl_s = 0;
    cr_assert_eq(kv_lessor_create(&l, NULL, &bad, &OPS, NULL), -EINVAL);
    bad = cfg;
    bad.max_ttl_s = 2;
    cr_assert_eq(kv_lessor_create(&l, NULL, &bad, &OPS, NULL), -EINVAL);
    bad = cfg;
    bad.revoke_rate = 0;
    cr_assert_eq(kv_lessor_create(&l, NULL, &bad, &OPS, NULL), -EINVAL);
    kv_lessor_ops no_revoke = OPS;
    no_revoke.propose_revoke = NULL;
    cr_assert_eq(kv_lessor_create(&l, NULL, &cfg, &no_revoke, NULL), -EINVAL);
}

Test(lessor, id_generator)
{
    kv_lessor_config cfg;
    kv_lessor_config_default(&cfg);
    cfg.seed = 777;
    harness a, b;
    h_init(&a, &cfg);
    h_init(&b, &cfg);
    enum { N = 20000 };
    int64_t *ids = malloc(N * sizeof(*ids));
    for (int i = 0; i < N; i++) {
        ids[i] = kv_lessor_new_id(a.l);
        cr_assert_gt(ids[i], 0);
        cr_assert_eq(kv_lessor_check_grant(a.l, ids[i]), 0);
        cr_assert_eq(kv_lessor_on_granted(a.l, ids[i], 10, 0), 0);
    }
    qsort(ids, N, sizeof(*ids), cmp64);
    for (int i = 1; i < N; i++)
        cr_assert_neq(ids[i], ids[i - 1]);
    /* same seed, same sequence -- unless the id is taken, then it is skipped */
    int64_t first = kv_lessor_new_id(b.l);
    harness c;
    h_init(&c, &cfg);
    cr_assert_eq(kv_lessor_on_granted(c.l, first, 10, 0), 0);
    int64_t next = kv_lessor_new_id(c.l);
    cr_assert_neq(next, first);
    cr_assert_eq(next, kv_lessor_new_id(b.l));
    /* admission */
    cr_assert_eq(kv_lessor_check_grant(c.l, first), -EEXIST);
    cr_assert_eq(kv_lessor_check_grant(c.l, 0), -EINVAL);
    free(ids);
    h_fini(&a);
    h_fini(&b);
    h_fini(&c);

    kv_lessor_config small = cfg;
    small.max_leases = 2;
    harness s;
    h_init(&s, &small);
    cr_assert_eq(kv_lessor_on_granted(s.l, 1, 10, 0), 0);
    cr_assert_eq(kv_lessor_check_grant(s.l, 2), 0);
    cr_assert_eq(kv_lessor_on_granted(s.l, 2, 10, 0), 0);
    cr_assert_eq(kv_lessor_check_grant(s.l, 3), -ENOSPC);
    h_fini(&s);
}

/* A counter that follows the wall clock in bits 16-62, the member in bits 0-15: one member's
 * ids increase, and ids named at the same time by different members sort together, so LMDB
 * appends the lease records (lessor.h). */
Test(lessor, ids_follow_the_clock_and_carry_the_member)
{
    kv_lessor_config cfg;
    kv_lessor_config_default(&cfg);
    cfg.id_member = 0x8a2c;
    const uint64_t epoch_ms = 1735689600000ULL; /* 2025-01-01 */
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    uint64_t ms = (uint64_t)wall.tv_sec * 1000u + (uint64_t)wall.tv_nsec / 1000000u - epoch_ms;
    harness a; /* not h_init, which seeds the counter: this one follows the clock */
    h_init_exact(&a, &cfg);
    int64_t first = 0, prev = 0;
    for (int i = 0; i < 1000; i++) {
        int64_t id = kv_lessor_new_id(a.l);
        cr_assert_gt(id, prev, "ids increase: %" PRId64 " after %" PRId64, id, prev);
        cr_assert_eq((uint64_t)id & 0xffff, 0x8a2cu, "member in the low bits of %" PRIx64,
                     (uint64_t)id);
        first = first ? first : id;
        prev = id;
    }
    uint64_t first_ms = ((uint64_t)first >> 16) >> 7;
    cr_assert(first_ms >= ms && first_ms <= ms + 60000,
              "the counter starts at the clock: %" PRIu64 " ms against %" PRIu64, first_ms, ms);
    /* a taken id is skipped */
    int64_t next = kv_lessor_new_id(a.l);
    int64_t step = (int64_t)1 << 16;
    cr_assert_eq(kv_lessor_on_granted(a.l, next + step, 10, 0), 0);
    int64_t after = kv_lessor_new_id(a.l);
    cr_assert_gt(after, next + step);
    cr_assert_eq(after & 0xffff, 0x8a2c);
    /* a second member, a millisecond later, names ids that sort after the first's */
    usleep(2000);
    kv_lessor_config cfg2 = cfg;
    cfg2.id_member = 0x0001;
    harness b;
    h_init_exact(&b, &cfg2);
    int64_t other = kv_lessor_new_id(b.l);
    cr_assert_gt(other >> 16, first >> 16, "clock order across members");
    h_fini(&b);
    h_fini(&a);
}

/* Lesson 4: a follower never holds expiry state, however many leases come and go. */
Test(lessor, follower_100k_grant_expire_cycles_keep_heap_empty)
{
    harness h;
    h_init(&h, NULL);
    enum { CYCLES = 100000, LIVE = 1000 };
    uint64_t mem_at_warm = 0;
    for (int64_t i = 1; i <= CYCLES; i++) {
        cr_assert_eq(kv_lessor_on_granted(h.l, i, 5, 0), 0);
        if (i > LIVE)
            kv_lessor_on_revoked(h.l, i - LIVE);
        h.now += 7;
        if (i % 1000 == 0) {
            kv_lessor_tick(h.l);
            cr_assert_eq(kv_lessor_heap_size(h.l), 0);
            kv_lessor_metrics m;
            kv_lessor_metrics_get(h.l, &m);
            cr_assert_eq(m.heap_size, 0);
            cr_assert_eq(m.is_primary, 0);
            if (i == 2 * LIVE)
                mem_at_warm = m.mem_bytes;
            if (i > 2 * LIVE)
                cr_assert_eq(m.mem_bytes, mem_at_warm, "memory flat: %llu vs %llu",
                             (unsigned long long)m.mem_bytes, (unsigned long long)mem_at_warm);
        }
    }
    cr_assert_eq(kv_lessor_count(h.l), LIVE);
    cr_assert_eq(h.nids, 0);
    uint64_t cmps, swaps;
    kv_lessor_heap_stats(h.l, &cmps, &swaps);
    cr_assert_eq(cmps, 0, "the heap was never touched");
    int64_t ttl;
    cr_assert_eq(kv_lessor_renew(h.l, CYCLES, &ttl), -EAGAIN);
    h_fini(&h);
}

/* 100k leases on the primary: renew and revoke cost O(log n) heap operations each, and the
 * whole lessor stays well under the memory budget per lease. */
Test(lessor, primary_100k_leases_log_cost_and_memory)
{
    harness h;
    h_init(&h, NULL);
    cr_assert_eq(kv_lessor_promote(h.l, 0, NULL, NULL), 0);
    enum { N = 100000 };
    for (int64_t id = 1; id <= N; id++)
        cr_assert_eq(kv_lessor_on_granted(h.l, id, 30 + id % 1000, 0), 0);
    kv_lessor_metrics m;
    kv_lessor_metrics_get(h.l, &m);
    cr_assert_eq(m.heap_size, N);
    double per = (double)m.mem_bytes / N;
    cr_log_info("lessor memory per lease at 100k (primary): %.1f bytes", per);
    cr_assert_leq(per, 150.0, "%.1f bytes per lease", per);
    const uint64_t bound = 2 * 17 + 1; /* 2*ceil(log2 100000)+1 */
    uint64_t c0, s0, c1, s1, worst = 0;
    int64_t ttl;
    for (int i = 0; i < 20000; i++) {
        h.now += 1;
        int64_t id = 1 + (int64_t)(((uint64_t)i * 2654435761u) % N);
        kv_lessor_heap_stats(h.l, &c0, &s0);
        cr_assert_eq(kv_lessor_renew(h.l, id, &ttl), 0);
        kv_lessor_heap_stats(h.l, &c1, &s1);
        if (c1 - c0 > worst)
            worst = c1 - c0;
    }
    for (int64_t id = 1; id <= N; id += 3) {
        kv_lessor_heap_stats(h.l, &c0, &s0);
        kv_lessor_on_revoked(h.l, id);
        kv_lessor_heap_stats(h.l, &c1, &s1);
        if (c1 - c0 > worst)
            worst = c1 - c0;
    }
    cr_assert_leq(worst, bound, "worst renew/revoke: %llu comparisons", (unsigned long long)worst);
    kv_lessor_metrics_get(h.l, &m);
    cr_assert_eq(m.heap_size, m.active_leases);
    h_fini(&h);
}

/* The real timer on a uv loop: a 1 s lease is proposed for revoke without manual ticks. */
typedef struct loop_ctx {
    kv_lessor *l;
    uv_timer_t guard;
    int proposals;
    int64_t id;
} loop_ctx;

static int loop_propose(void *arg, const int64_t *ids, size_t n)
{
    loop_ctx *c = arg;
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(ids[i], c->id);
        c->proposals++;
        kv_lessor_on_revoked(c->l, ids[i]);
    }
    uv_close((uv_handle_t *)&c->guard, NULL);
    return 0;
}

static void on_guard(uv_timer_t *t)
{
    uv_stop(t->loop);
}

Test(lessor, uv_timer_drives_expiry)
{
    uv_loop_t loop;
    cr_assert_eq(uv_loop_init(&loop), 0);
    loop_ctx c = {.id = 4242};
    kv_lessor_ops ops = {.propose_revoke = loop_propose};
    kv_lessor_config cfg;
    kv_lessor_config_default(&cfg);
    cr_assert_eq(kv_lessor_create(&c.l, &loop, &cfg, &ops, &c), 0);
    cr_assert_eq(uv_timer_init(&loop, &c.guard), 0);
    cr_assert_eq(uv_timer_start(&c.guard, on_guard, 10000, 0), 0);
    cr_assert_eq(kv_lessor_promote(c.l, 0, NULL, NULL), 0);
    cr_assert_eq(kv_lessor_on_granted(c.l, c.id, 1, 0), 0);
    uv_run(&loop, UV_RUN_DEFAULT); /* ends when the lessor's timer stops (heap empty) */
    cr_assert_eq(c.proposals, 1);
    cr_assert_eq(kv_lessor_heap_size(c.l), 0);
    kv_lessor_free(c.l);
    uv_run(&loop, UV_RUN_DEFAULT); /* runs the close callback */
    cr_assert_eq(uv_loop_close(&loop), 0);
}

Test(lessor, checkpoints_disabled_and_large_rate_batches)
{
    kv_lessor_config cfg;
    kv_lessor_config_default(&cfg);
    cfg.checkpoint_interval_ms = 0; /* --lease-checkpoint-interval 0 */
    cfg.checkpoint_rate = 0;
    cfg.revoke_rate = 1u << 20;
    harness h;
    h_init(&h, &cfg);
    h.apply_sync = 1;
    int64_t t0 = h.now;
    cr_assert_eq(kv_lessor_promote(h.l, 0, NULL, NULL), 0);
    for (int64_t id = 1; id <= 5000; id++)
        cr_assert_eq(kv_lessor_on_granted(h.l, id, 7200, 0), 0);
    cr_assert_eq(kv_lessor_next_due_ms(h.l), t0 + 7200000, "no checkpoint round scheduled");
    h.now = t0 + 7200000;
    int guard = 0;
    while (kv_lessor_count(h.l) && guard++ < 100)
        kv_lessor_tick(h.l);
    cr_assert_eq(h.nids, 5000);
    cr_assert_eq(h.cp_calls, 0);
    for (size_t i = 0; i < h.ncalls; i++)
        cr_assert_leq(h.calls[i].n, 1000, "a propose_revoke call is capped at 1000 ids");
    h_fini(&h);
}
