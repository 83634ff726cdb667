/* Batched physical compaction (issue 8, D4): Compact is O(1) and records the point; the
 * records go in bounded steps (kv_store_compact_step) that resume after a restart; reads
 * below the point fail at once; HashKV does not depend on the physical progress; the end
 * state equals a compaction done in one go. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

static th t, ref;
static void setup(void)
{
    th_open(&t, NULL);
    th_open(&ref, NULL);
    t.defer_compaction = 1; /* ref compacts at once, inside the Compact's batch */
}
static void teardown(void)
{
    th_close(&t);
    th_close(&ref);
}
TestSuite(mvcc_compact, .init = setup, .fini = teardown);

static size_t rev_records(th *x)
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
static int64_t populate(th *x)
{
    char k[16], v[16];
    int64_t rev = 0;
    for (int round = 0; round < 3; round++)
        for (int i = 0; i < 40; i++) {
            snprintf(k, sizeof k, "key%02d", i);
            snprintf(v, sizeof v, "v%d", round);
            rev = th_put(x, k, v, 0);
        }
    for (int i = 0; i < 40; i += 5) {
        snprintf(k, sizeof k, "key%02d", i);
        rev = th_del(x, k, NULL);
    }
    for (int i = 0; i < 40; i += 10) {
        snprintf(k, sizeof k, "key%02d", i);
        rev = th_put(x, k, "again", 0);
    }
    return rev;
}

static int step(th *x, uint32_t max_keys, uint64_t *keys, uint64_t *removed)
{
    kv_store_batch *b;
    cr_assert_eq(kv_store_batch_begin(x->s, &b), 0);
    int rc = kv_store_compact_step(x->s, b, max_keys, keys, removed);
    cr_assert_geq(rc, 0, "compact step: %d", rc);
    cr_assert_eq(kv_store_batch_commit(x->s, b), 0);
    return rc;
}

static uint32_t hash_at(th *x, int64_t rev)
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
    Etcdserverpb__CompactionResponse *c = th_compact(&t, at, &res);
    cr_assert_not_null(c, "%s", res.msg);
    etcdserverpb__compaction_response__free_unpacked(c, NULL);
    c = th_compact(&ref, at, &res);
    etcdserverpb__compaction_response__free_unpacked(c, NULL);

    cr_assert_eq(rev_records(&t), before, "the Compact request itself removes nothing");
    int64_t prev = 0;
    cr_assert_eq(kv_store_compact_pending(t.s, &prev), 1);
    cr_assert_eq(prev, at);
    cr_assert_eq(kv_store_compact_pending(ref.s, NULL), 0);
    /* reads below the point fail at once, whatever the physical progress */
    Etcdserverpb__RangeRequest q = ETCDSERVERPB__RANGE_REQUEST__INIT;
    q.key = th_bin("key01");
    q.revision = at - 1;
    cr_assert_null(th_range_req(&t, &q, &res));
    cr_assert_eq(res.code, 11);
    cr_assert_str_eq(res.msg, "etcdserver: mvcc: required revision has been compacted");
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
    Mvccpb__KeyValue *kv = th_get(&t, "key01", at);
    th_expect_kv(kv, "key01", "v2");
    mvccpb__key_value__free_unpacked(kv, NULL);
    cr_assert_null(th_get(&t, "key05", at), "deleted key gone at the compaction point");
}

Test(mvcc_compact, progress_survives_a_restart)
{
    int64_t last = populate(&t);
    populate(&ref);
    kv_result res;
    Etcdserverpb__CompactionResponse *c = th_compact(&t, last, &res);
    etcdserverpb__compaction_response__free_unpacked(c, NULL);
    c = th_compact(&ref, last, &res);
    etcdserverpb__compaction_response__free_unpacked(c, NULL);
    uint64_t keys = 0;
    cr_assert_eq(step(&t, 10, &keys, NULL), 1);
    cr_assert_eq(step(&t, 10, &keys, NULL), 1);
    th_reopen(&t);
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
    Etcdserverpb__CompactionResponse *c = th_compact(&t, last - 20, &res);
    etcdserverpb__compaction_response__free_unpacked(c, NULL);
    cr_assert_eq(step(&t, 5, NULL, NULL), 1);
    c = th_compact(&t, last, &res);
    cr_assert_not_null(c, "%s", res.msg);
    etcdserverpb__compaction_response__free_unpacked(c, NULL);
    int64_t prev = 0;
    cr_assert_eq(kv_store_compact_pending(t.s, &prev), 1);
    cr_assert_eq(prev, last);
    while (step(&t, 5, NULL, NULL) == 1)
        ;
    c = th_compact(&ref, last, &res);
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
