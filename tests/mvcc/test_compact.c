/* Batched physical compaction: Compact is O(1) and records the point; the
 * records go in bounded steps (kv_store_compact_step) that resume after a restart; reads
 * below the point fail at once; HashKV does not depend on the physical progress; the end
 * state equals a compaction done in one go. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvt_store.h"
#include "mvcc/events.h"
#include "common/crc32c.h"

static kvt_store t, ref;
/* Without fsync: durability is not under test here, a restart is a close and an open, and a
 * lost step is an aborted batch. */
static void open_nosync(kvt_store *x)
{
    kv_store_config cfg;
    kv_store_config_default(&cfg);
    cfg.unsafe_no_fsync = 1;
    kvt_store_open(x, &cfg);
}

static void setup(void)
{
    open_nosync(&t);
    open_nosync(&ref);
    t.defer_compaction = 1; /* ref compacts at once, inside the Compact's batch */
}
static void teardown(void)
{
    kvt_store_close(&t);
    kvt_store_close(&ref);
}
TestSuite(mvcc_compact, .init = setup, .fini = teardown);

static size_t rev_records(kvt_store *x)
{
    MDB_txn *txn;
    MDB_dbi dbi;
    MDB_stat st;
    cr_assert_eq(mdb_txn_begin(kv_store_env(x->s), NULL, MDB_RDONLY, &txn), 0);
    cr_assert_eq(mdb_dbi_open(txn, "rev", 0, &dbi), 0);
    cr_assert_eq(mdb_stat(txn, dbi, &st), 0);
    mdb_txn_abort(txn);
    return st.ms_entries;
}

/* 40 keys, 3 versions each; every 5th key deleted, every 10th recreated after deletion. */
static int64_t populate(kvt_store *x)
{
    char k[16], v[16];
    int64_t rev = 0;
    for (int round = 0; round < 3; round++)
        for (int i = 0; i < 40; i++) {
            snprintf(k, sizeof k, "key%02d", i);
            snprintf(v, sizeof v, "v%d", round);
            rev = kvt_store_put(x, k, v, 0);
        }
    for (int i = 0; i < 40; i += 5) {
        snprintf(k, sizeof k, "key%02d", i);
        rev = kvt_store_del(x, k, NULL);
    }
    for (int i = 0; i < 40; i += 10) {
        snprintf(k, sizeof k, "key%02d", i);
        rev = kvt_store_put(x, k, "again", 0);
    }
    return rev;
}

static int step(kvt_store *x, uint32_t max_keys, uint64_t *keys, uint64_t *removed)
{
    kv_store_batch *b;
    cr_assert_eq(kv_store_batch_begin(x->s, &b), 0);
    int rc = kv_store_compact_step(x->s, b, max_keys, 0, 0, keys, removed);
    cr_assert_geq(rc, 0, "compact step: %d", rc);
    cr_assert_eq(kv_store_batch_commit(x->s, b), 0);
    return rc;
}

static uint32_t hash_at(kvt_store *x, int64_t rev)
{
    uint32_t h = 0;
    int64_t cr = 0;
    cr_assert_eq(kv_store_hash_kv(x->s, rev, &h, &cr), 0);
    return h;
}

Test(mvcc_compact, compact_is_o1_then_steps_match_one_go)
{
    int64_t last = populate(&t);
    cr_assert_eq(populate(&ref), last);
    int64_t at = last - 10; /* between the deletes and the recreations */
    size_t before = rev_records(&t);
    kv_result res;
    Etcdserverpb__CompactionResponse *c = kvt_store_compact(&t, at, &res);
    cr_assert_not_null(c, "%s", KVT_STORE_MSG(res));
    etcdserverpb__compaction_response__free_unpacked(c, NULL);
    c = kvt_store_compact(&ref, at, &res);
    etcdserverpb__compaction_response__free_unpacked(c, NULL);

    cr_assert_eq(rev_records(&t), before, "the Compact request itself removes nothing");
    int64_t prev = 0;
    cr_assert_eq(kv_store_compact_pending(t.s, &prev), 1);
    cr_assert_eq(prev, at);
    cr_assert_eq(kv_store_compact_pending(ref.s, NULL), 0);
    /* reads below the point fail at once, whatever the physical progress */
    Etcdserverpb__RangeRequest q = ETCDSERVERPB__RANGE_REQUEST__INIT;
    q.key = kvt_bin("key01");
    q.revision = at - 1;
    cr_assert_null(kvt_store_range_req(&t, &q, &res));
    cr_assert_eq(KVT_STORE_CODE(res), 11);
    cr_assert_str_eq(KVT_STORE_MSG(res), "etcdserver: mvcc: required revision has been compacted");
    kv_store_status st;
    cr_assert_eq(kv_store_get_status(t.s, &st), 0);
    cr_assert_eq(st.compact_revision, at);

    uint32_t want = hash_at(&ref, 0), want_last = hash_at(&ref, last - 3);
    cr_assert_eq(hash_at(&t, 0), want, "HashKV must not depend on the physical progress");
    uint64_t keys = 0, removed = 0;
    int steps = 0, rc;
    do {
        rc = step(&t, 7, &keys, &removed);
        steps++;
        cr_assert_eq(hash_at(&t, 0), want, "after step %d", steps);
        cr_assert_eq(hash_at(&t, last - 3), want_last, "after step %d", steps);
    } while (rc == 1 && steps < 100);
    cr_assert_eq(rc, 0);
    cr_assert_geq(steps, 40 / 7, "bounded steps of 7 keys (%d steps)", steps);
    cr_assert_eq(keys, 40 - 4 + 4, "every key visited once (%llu)", (unsigned long long)keys);
    cr_assert_eq(removed, before - rev_records(&t));
    cr_assert_eq(rev_records(&t), rev_records(&ref), "same records as a compaction in one go");
    cr_assert_eq(kv_store_compact_pending(t.s, NULL), 0);
    Mvccpb__KeyValue *kv = kvt_store_get(&t, "key01", at);
    kvt_store_expect_kv(kv, "key01", "v2");
    mvccpb__key_value__free_unpacked(kv, NULL);
    cr_assert_null(kvt_store_get(&t, "key05", at), "deleted key gone at the compaction point");
}

Test(mvcc_compact, progress_survives_a_restart)
{
    int64_t last = populate(&t);
    populate(&ref);
    kv_result res;
    Etcdserverpb__CompactionResponse *c = kvt_store_compact(&t, last, &res);
    etcdserverpb__compaction_response__free_unpacked(c, NULL);
    c = kvt_store_compact(&ref, last, &res);
    etcdserverpb__compaction_response__free_unpacked(c, NULL);
    uint64_t keys = 0;
    cr_assert_eq(step(&t, 10, &keys, NULL), 1);
    cr_assert_eq(step(&t, 10, &keys, NULL), 1);
    kvt_store_reopen(&t);
    cr_assert_eq(kv_store_compact_pending(t.s, NULL), 1, "pending after restart");
    int rc;
    while ((rc = step(&t, 10, &keys, NULL)) == 1)
        ;
    cr_assert_eq(keys, 40, "resumed from the cursor: each key visited once (%llu)",
                 (unsigned long long)keys);
    cr_assert_eq(rev_records(&t), rev_records(&ref));
    cr_assert_eq(hash_at(&t, 0), hash_at(&ref, 0));
}

Test(mvcc_compact, newer_compaction_restarts_the_walk)
{
    int64_t last = populate(&t);
    populate(&ref);
    kv_result res;
    Etcdserverpb__CompactionResponse *c = kvt_store_compact(&t, last - 20, &res);
    etcdserverpb__compaction_response__free_unpacked(c, NULL);
    cr_assert_eq(step(&t, 5, NULL, NULL), 1);
    c = kvt_store_compact(&t, last, &res);
    cr_assert_not_null(c, "%s", KVT_STORE_MSG(res));
    etcdserverpb__compaction_response__free_unpacked(c, NULL);
    int64_t prev = 0;
    cr_assert_eq(kv_store_compact_pending(t.s, &prev), 1);
    cr_assert_eq(prev, last);
    while (step(&t, 5, NULL, NULL) == 1)
        ;
    c = kvt_store_compact(&ref, last, &res);
    etcdserverpb__compaction_response__free_unpacked(c, NULL);
    cr_assert_eq(rev_records(&t), rev_records(&ref));
    cr_assert_eq(hash_at(&t, 0), hash_at(&ref, 0));
}

Test(mvcc_compact, step_without_pending_compaction_is_a_noop)
{
    populate(&t);
    size_t before = rev_records(&t);
    uint64_t keys = 0;
    cr_assert_eq(step(&t, 10, &keys, NULL), 0);
    cr_assert_eq(keys, 0);
    cr_assert_eq(rev_records(&t), before);
}

/* The events a watcher starting at the compaction revision reads, as "PUT key" / "DEL key"
 * lines, into buf. */
static int ev_line(void *arg, const kv_store_event *e)
{
    Mvccpb__KeyValue *kv = mvccpb__key_value__unpack(NULL, e->kv_len, e->kv);
    cr_assert_not_null(kv);
    char *buf = arg;
    size_t n = strlen(buf);
    snprintf(buf + n, 4096 - n, "%s %.*s@%lld\n", e->tomb ? "DEL" : "PUT", (int)kv->key.len,
             (const char *)kv->key.data, (long long)e->main);
    mvccpb__key_value__free_unpacked(kv, NULL);
    return 0;
}

static void events_from(kvt_store *x, int64_t from, char *buf)
{
    kv_store_reader rd;
    int64_t last = 0;
    buf[0] = 0;
    cr_assert_eq(kv_store_reader_begin(x->s, &rd), 0);
    cr_assert_eq(kv_store_events(x->s, &rd, from, rd.rev, 0, ev_line, buf, &last), 0);
    kv_store_reader_end(&rd);
}

/* A tombstone at the compaction revision is gone once compaction finishes; a watcher from that
 * revision must not see it just because the physical steps have not reached its key yet. */
Test(mvcc_compact, events_at_compact_rev_do_not_depend_on_progress)
{
    kvt_store *xs[2] = {&t, &ref};
    int64_t del = 0;
    for (int i = 0; i < 2; i++) {
        kvt_store_put(xs[i], "wk", "1", 0);
        kvt_store_put(xs[i], "wk2", "2", 0);
        kvt_store_del(xs[i], "wk", NULL);
        del = kvt_store_rev(xs[i]);
        kvt_store_put(xs[i], "wk", "x y", 0);
        kvt_store_put(xs[i], "wl", "9", 0);
    }
    kv_result res;
    Etcdserverpb__CompactionResponse *c = kvt_store_compact(&t, del, &res);
    cr_assert_not_null(c, "%s", KVT_STORE_MSG(res));
    etcdserverpb__compaction_response__free_unpacked(c, NULL);
    c = kvt_store_compact(&ref, del, &res);
    cr_assert_not_null(c, "%s", KVT_STORE_MSG(res));
    etcdserverpb__compaction_response__free_unpacked(c, NULL);
    static char pending[4096], done[4096];
    events_from(&t, del, pending); /* t: nothing removed yet */
    events_from(&ref, del, done);  /* ref: compacted inside the Compact's batch */
    char want[128];
    snprintf(want, sizeof want, "PUT wk@%lld\nPUT wl@%lld\n", (long long)del + 1,
             (long long)del + 2);
    cr_assert_str_eq(done, want);
    cr_assert_str_eq(pending, done, "before the physical steps:\n%s", pending);
    uint64_t keys = 0;
    while (step(&t, 1000, &keys, NULL) > 0)
        ;
    events_from(&t, del, pending);
    cr_assert_str_eq(pending, done);
}

/* ---- steps bounded by records removed (a key with many revisions is split over steps) ---- */

/* CRC-32C over every record of the keyspace databases (rev, kidx, lkidx, lkey). */
static uint32_t ks_digest(kvt_store *x)
{
    static const char *const dbs[] = {"rev", "kidx", "lkidx", "lkey"};
    MDB_txn *txn;
    cr_assert_eq(mdb_txn_begin(kv_store_env(x->s), NULL, MDB_RDONLY, &txn), 0);
    uint32_t crc = 0;
    for (size_t i = 0; i < sizeof dbs / sizeof dbs[0]; i++) {
        MDB_dbi dbi;
        if (mdb_dbi_open(txn, dbs[i], 0, &dbi) != 0)
            continue; /* format 1: no long-key databases */
        MDB_cursor *c;
        cr_assert_eq(mdb_cursor_open(txn, dbi, &c), 0);
        MDB_val k, v;
        for (int rc = mdb_cursor_get(c, &k, &v, MDB_FIRST); rc == 0;
             rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
            crc = kv_crc32c(crc, k.mv_data, k.mv_size);
            crc = kv_crc32c(crc, v.mv_data, v.mv_size);
        }
        mdb_cursor_close(c);
    }
    mdb_txn_abort(txn);
    return crc;
}

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

#define RK 10 /* keys of a random history: 0 is hot, 8 and 9 are long (> 511 bytes) */
static char rk_names[RK][700];

static const char *rkey(uint64_t *s)
{
    uint64_t r = rnd(s) % 100;
    return rk_names[r < 40 ? 0 : (size_t)(r % RK)];
}

/* One random write on both stores (same request, same revision). */
static int64_t rnd_write(kvt_store *a, kvt_store *b, uint64_t *s)
{
    const char *k = rkey(s);
    char v[32];
    int64_t ra, rb;
    if (rnd(s) % 100 < 20) {
        cr_assert_eq(kvt_store_del(a, k, NULL), kvt_store_del(b, k, NULL));
        ra = kvt_store_rev(a);
        rb = kvt_store_rev(b);
    } else {
        snprintf(v, sizeof v, "v%llu", (unsigned long long)(rnd(s) % 100000));
        ra = kvt_store_put(a, k, v, 0);
        rb = kvt_store_put(b, k, v, 0);
    }
    cr_assert_eq(ra, rb);
    return ra;
}

static void compact_both(kvt_store *a, kvt_store *b, int64_t at)
{
    kv_result res;
    Etcdserverpb__CompactionResponse *c = kvt_store_compact(a, at, &res);
    cr_assert_not_null(c, "%s", KVT_STORE_MSG(res));
    etcdserverpb__compaction_response__free_unpacked(c, NULL);
    c = kvt_store_compact(b, at, &res);
    cr_assert_not_null(c, "%s", KVT_STORE_MSG(res));
    etcdserverpb__compaction_response__free_unpacked(c, NULL);
}

/* One bounded step on x; checks the bounds; aborts it instead of committing when crash. */
static int bounded_step(kvt_store *x, uint32_t max_keys, uint32_t max_revs, bool crash)
{
    kv_store_batch *b;
    uint64_t keys = 0, removed = 0;
    cr_assert_eq(kv_store_batch_begin(x->s, &b), 0);
    int rc = kv_store_compact_step(x->s, b, max_keys, max_revs, 0, &keys, &removed);
    cr_assert_geq(rc, 0, "compact step: %d", rc);
    cr_assert_leq(keys, max_keys, "a step visits at most %u keys (%llu)", max_keys,
                  (unsigned long long)keys);
    cr_assert_leq(removed, max_revs, "a step removes at most %u records (%llu)", max_revs,
                  (unsigned long long)removed);
    if (crash) {
        kv_store_batch_abort(x->s, b); /* the process died before this commit */
        return 1;
    }
    cr_assert_eq(kv_store_batch_commit(x->s, b), 0);
    return rc;
}

Test(mvcc_compact, hot_key_is_split_over_steps)
{
    /* 300 revisions of one key, 3 of another: the hot key alone is 299 records to remove */
    int64_t last = 0;
    for (int i = 0; i < 300; i++) {
        char v[16];
        snprintf(v, sizeof v, "v%d", i);
        last = kvt_store_put(&t, "hot", v, 0);
        cr_assert_eq(kvt_store_put(&ref, "hot", v, 0), last);
        if (i % 100 == 0) {
            last = kvt_store_put(&t, "cold", v, 0);
            cr_assert_eq(kvt_store_put(&ref, "cold", v, 0), last);
        }
    }
    size_t before = rev_records(&t);
    compact_both(&t, &ref, last);
    /* reads at a compacted revision fail at once, before any step ran */
    Etcdserverpb__RangeRequest q = ETCDSERVERPB__RANGE_REQUEST__INIT;
    q.key = kvt_bin("hot");
    q.revision = last - 1;
    kv_result res;
    cr_assert_null(kvt_store_range_req(&t, &q, &res));
    cr_assert_eq(KVT_STORE_CODE(res), 11);
    cr_assert_eq(rev_records(&t), before);
    uint32_t want = hash_at(&ref, 0);
    int steps = 0, rc;
    do {
        rc = bounded_step(&t, 1000, 50, false);
        steps++;
        cr_assert_eq(hash_at(&t, 0), want, "HashKV after step %d", steps);
    } while (rc == 1 && steps < 100);
    cr_assert_eq(rc, 0);
    cr_assert_geq(steps, 6, "299 + 2 records in steps of at most 50 (%d steps)", steps);
    cr_assert_eq(rev_records(&t), 2, "hot and cold keep their latest value");
    cr_assert_eq(ks_digest(&t), ks_digest(&ref), "same records as a compaction in one go");
    Mvccpb__KeyValue *kv = kvt_store_get(&t, "hot", 0);
    kvt_store_expect_kv(kv, "hot", "v299");
    mvccpb__key_value__free_unpacked(kv, NULL);
}

Test(mvcc_compact, stop_inside_a_key_resumes_after_restart)
{
    int64_t last = 0;
    for (int i = 0; i < 120; i++) {
        char v[16];
        snprintf(v, sizeof v, "v%d", i);
        last = kvt_store_put(&t, i % 2 ? "a" : "b", v, 0);
        cr_assert_eq(kvt_store_put(&ref, i % 2 ? "a" : "b", v, 0), last);
    }
    compact_both(&t, &ref, last);
    cr_assert_eq(bounded_step(&t, 1000, 25, false), 1); /* stops inside "a" */
    cr_assert_eq(bounded_step(&t, 1000, 25, false), 1); /* "a" done, stops inside "b" */
    cr_assert_eq(bounded_step(&t, 1000, 25, true), 1);  /* crash: this step is lost */
    kvt_store_reopen(&t);
    cr_assert_eq(kv_store_compact_pending(t.s, NULL), 1, "pending after restart");
    cr_assert_eq(hash_at(&t, 0), hash_at(&ref, 0));
    int rc, steps = 0;
    while ((rc = bounded_step(&t, 1000, 25, false)) == 1 && steps < 100)
        steps++;
    cr_assert_eq(rc, 0);
    cr_assert_eq(rev_records(&t), 2);
    cr_assert_eq(ks_digest(&t), ks_digest(&ref));
    cr_assert_eq(hash_at(&t, 0), hash_at(&ref, 0));
}

/* Random histories (puts and deletes, a hot key, long keys), compacted in random bounded
 * steps interleaved with more writes, newer compactions, restarts and lost steps: the end
 * state equals a one-go compaction record for record, and HashKV never differs. */
Test(mvcc_compact, random_histories_stepwise_equals_one_go, .timeout = 240)
{
    for (int i = 0; i < RK; i++) {
        if (i < RK - 2) {
            snprintf(rk_names[i], sizeof rk_names[i], "key%d", i);
        } else {
            memset(rk_names[i], 'L', 600);
            rk_names[i][600] = (char)('0' + i);
            rk_names[i][601] = 0;
        }
    }
    for (uint64_t seed = 1; seed <= 8; seed++) {
        kvt_store_close(&t);
        kvt_store_close(&ref);
        open_nosync(&t);
        open_nosync(&ref);
        t.defer_compaction = 1;
        uint64_t s = seed * 0x9E3779B97F4A7C15ull;
        int64_t last = 0;
        int n = 150 + (int)(rnd(&s) % 300);
        for (int i = 0; i < n; i++)
            last = rnd_write(&t, &ref, &s);
        int64_t cpt = last / 3 + (int64_t)(rnd(&s) % (uint64_t)(last - last / 3));
        compact_both(&t, &ref, cpt);
        int rc = 1, steps = 0;
        bool recompacted = false;
        while (rc == 1) {
            cr_assert_lt(++steps, 5000, "seed %llu: the compaction must end",
                         (unsigned long long)seed);
            int w = (int)(rnd(&s) % 3);
            for (int i = 0; i < w; i++)
                last = rnd_write(&t, &ref, &s);
            uint64_t r = rnd(&s) % 100;
            if (r < 3) {
                kvt_store_reopen(&t);
            } else if (r < 6 && !recompacted && last > cpt) {
                cpt = last - (int64_t)(rnd(&s) % (uint64_t)(last - cpt)); /* > cpt */
                compact_both(&t, &ref, cpt);
                recompacted = true;
            }
            rc = bounded_step(&t, 1 + (uint32_t)(rnd(&s) % 5), 1 + (uint32_t)(rnd(&s) % 40),
                              r >= 6 && r < 10);
            cr_assert_eq(hash_at(&t, 0), hash_at(&ref, 0), "seed %llu, step %d: HashKV",
                         (unsigned long long)seed, steps);
        }
        cr_assert_eq(kv_store_compact_pending(t.s, NULL), 0);
        cr_assert_eq(rev_records(&t), rev_records(&ref), "seed %llu", (unsigned long long)seed);
        cr_assert_eq(ks_digest(&t), ks_digest(&ref), "seed %llu: same records",
                     (unsigned long long)seed);
        for (int i = 0; i < 5; i++) /* HashKV at revisions after the compaction point */
            last = rnd_write(&t, &ref, &s);
        cr_assert_eq(hash_at(&t, cpt + 1), hash_at(&ref, cpt + 1));
    }
}
