/* Keys of any length: keys longer than LMDB's 511-byte key limit are stored
 * under a handle (server/mvcc/longkey.c) and must behave exactly as short keys: put, get,
 * range (bounds, limit, count, keys_only, revision, sort), delete, compaction, leases, Txn
 * compares, with etcd's byte order across the 511-byte boundary. */
#include <errno.h>
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvt_store.h"
#include "mvcc/events.h"
#include "mvcc/verify.h"

static kvt_store t;
static void setup(void)
{
    kvt_store_open(&t, NULL);
}
static void teardown(void)
{
    kvt_store_close(&t);
}
TestSuite(mvcc_longkeys, .init = setup, .fini = teardown);

/* prefix, then `fill` repeated up to n bytes, then tail (total n + strlen(tail)). */
static char *mk(const char *prefix, char fill, size_t n, const char *tail)
{
    size_t pl = strlen(prefix), tl = strlen(tail);
    cr_assert_geq(n, pl);
    char *k = malloc(n + tl + 1);
    memcpy(k, prefix, pl);
    memset(k + pl, fill, n - pl);
    memcpy(k + n, tail, tl);
    k[n + tl] = 0;
    return k;
}

static int cmp_str(const void *a, const void *b)
{
    const char *x = *(char *const *)a, *y = *(char *const *)b;
    size_t xl = strlen(x), yl = strlen(y), n = xl < yl ? xl : yl;
    int c = memcmp(x, y, n);
    return c ? c : xl < yl ? -1 : xl > yl ? 1 : 0;
}

static void expect_keys(const Etcdserverpb__RangeResponse *r, char **want, size_t n,
                        const char *what)
{
    cr_assert_eq(r->n_kvs, n, "%s: %zu keys, want %zu", what, r->n_kvs, n);
    for (size_t i = 0; i < n; i++) {
        size_t wl = strlen(want[i]);
        cr_assert(r->kvs[i]->key.len == wl && memcmp(r->kvs[i]->key.data, want[i], wl) == 0,
                  "%s: key %zu has length %zu, want %zu", what, i, r->kvs[i]->key.len, wl);
    }
}

static size_t db_entries(kvt_store *x, const char *name)
{
    MDB_txn *txn;
    MDB_dbi dbi;
    MDB_stat st;
    cr_assert_eq(mdb_txn_begin(kv_store_env(x->s), NULL, MDB_RDONLY, &txn), 0);
    int rc = mdb_dbi_open(txn, name, 0, &dbi);
    if (rc == MDB_NOTFOUND) {
        mdb_txn_abort(txn);
        return 0;
    }
    cr_assert_eq(rc, 0);
    cr_assert_eq(mdb_stat(txn, dbi, &st), 0);
    mdb_txn_abort(txn);
    return st.ms_entries;
}

static uint32_t format_of(kvt_store *x)
{
    MDB_txn *txn;
    MDB_dbi dbi;
    MDB_val k = {6, "format"}, v;
    cr_assert_eq(mdb_txn_begin(kv_store_env(x->s), NULL, MDB_RDONLY, &txn), 0);
    cr_assert_eq(mdb_dbi_open(txn, "meta", 0, &dbi), 0);
    cr_assert_eq(mdb_get(txn, dbi, &k, &v), 0);
    cr_assert_eq(v.mv_size, 8);
    const uint8_t *p = v.mv_data;
    uint32_t f = (uint32_t)p[4] << 24 | (uint32_t)p[5] << 16 | (uint32_t)p[6] << 8 | p[7];
    mdb_txn_abort(txn);
    return f;
}

static const size_t sizes[] = {1, 510, 511, 512, 4096, 100000};
#define NSIZES (sizeof sizes / sizeof sizes[0])

Test(mvcc_longkeys, put_get_range_delete_every_size)
{
    char *k[NSIZES];
    for (size_t i = 0; i < NSIZES; i++)
        k[i] = mk("a", 'k', sizes[i], "");
    cr_assert_eq(format_of(&t), 1, "a new store starts at format 1");
    for (size_t i = 0; i < NSIZES; i++) {
        char v[32];
        snprintf(v, sizeof v, "v%zu", sizes[i]);
        kvt_store_put(&t, k[i], v, 0);
    }
    cr_assert_eq(format_of(&t), 2, "the first long key moves the data dir to format 2");
    for (size_t i = 0; i < NSIZES; i++) {
        char v[32];
        snprintf(v, sizeof v, "v%zu", sizes[i]);
        Mvccpb__KeyValue *kv = kvt_store_get(&t, k[i], 0);
        cr_assert_not_null(kv, "get of a %zu-byte key", sizes[i]);
        kvt_store_expect_kv(kv, k[i], v);
        cr_assert_eq(kv->version, 1);
        mvccpb__key_value__free_unpacked(kv, NULL);
        kvt_store_put(&t, k[i], "second", 0);
        kv = kvt_store_get(&t, k[i], 0);
        cr_assert_eq(kv->version, 2, "size %zu", sizes[i]);
        mvccpb__key_value__free_unpacked(kv, NULL);
    }
    /* each key is a prefix of the next: the order is the size order */
    Etcdserverpb__RangeResponse *r = kvt_store_range(&t, "a", "b");
    expect_keys(r, k, NSIZES, "prefix range");
    etcdserverpb__range_response__free_unpacked(r, NULL);
    /* a range starting at each key */
    for (size_t i = 0; i < NSIZES; i++) {
        r = kvt_store_range(&t, k[i], "b");
        expect_keys(r, k + i, NSIZES - i, "from each key");
        etcdserverpb__range_response__free_unpacked(r, NULL);
        r = kvt_store_range(&t, "a", k[i]);
        expect_keys(r, k, i, "up to each key");
        etcdserverpb__range_response__free_unpacked(r, NULL);
    }
    kvt_store_reopen(&t);
    cr_assert_eq(format_of(&t), 2);
    for (size_t i = 0; i < NSIZES; i++) {
        cr_assert_eq(kvt_store_del(&t, k[i], NULL) > 0, 1);
        cr_assert_null(kvt_store_get(&t, k[i], 0), "deleted %zu-byte key", sizes[i]);
        r = kvt_store_range(&t, "a", "b");
        expect_keys(r, k + i + 1, NSIZES - i - 1, "after a delete");
        etcdserverpb__range_response__free_unpacked(r, NULL);
    }
    kv_store_status st;
    cr_assert_eq(kv_store_get_status(t.s, &st), 0);
    cr_assert_eq(st.keys, 0);
    for (size_t i = 0; i < NSIZES; i++)
        free(k[i]);
}

/* Keys around the boundary, keys sharing the 448-byte handle prefix and the first 500 bytes,
 * inserted in a scrambled order; every range, limit and option against a sorted list. */
#define NORD 40
Test(mvcc_longkeys, ordering_across_the_511_byte_boundary)
{
    char *k[NORD];
    size_t n = 0;
    const size_t lens[] = {400, 447, 448, 449, 500, 509, 510, 511, 512, 513, 600, 1000, 4096};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++)
        k[n++] = mk("o/", 'm', lens[i], "");
    /* same first 500 bytes, different later bytes and lengths */
    const char *tails[] = {"a", "b", "z", "aa", "ab", "\x01", "\x7f", "ma", "mz", "zzzz", "A"};
    for (size_t i = 0; i < sizeof tails / sizeof tails[0]; i++)
        k[n++] = mk("o/", 'm', 500, tails[i]);
    /* differ before, at and after byte 448 and 511 */
    const size_t at[] = {100, 447, 448, 449, 510, 511, 512, 700};
    for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
        char *x = mk("o/", 'm', 900, "");
        x[at[i]] = 'c';
        k[n++] = x;
        char *y = mk("o/", 'm', 900, "");
        y[at[i]] = 'q';
        k[n++] = y;
    }
    cr_assert_leq(n, NORD);
    /* scrambled insertion order */
    for (size_t i = 0; i < n; i++) {
        size_t j = (i * 17 + 5) % n;
        char v[16];
        snprintf(v, sizeof v, "%zu", j);
        kvt_store_put(&t, k[j], v, 0);
    }
    int64_t mid = kvt_store_rev(&t);
    kvt_store_put(&t, "o0", "after", 0); /* outside the prefix */
    char *sorted[NORD];
    memcpy(sorted, k, n * sizeof *k);
    qsort(sorted, n, sizeof *sorted, cmp_str);

    Etcdserverpb__RangeResponse *r = kvt_store_range(&t, "o/", "o0");
    expect_keys(r, sorted, n, "prefix");
    cr_assert_eq(r->count, (int64_t)n);
    etcdserverpb__range_response__free_unpacked(r, NULL);
    /* every [sorted[i], sorted[j]) */
    for (size_t i = 0; i < n; i += 3)
        for (size_t j = i; j < n; j += 4) {
            r = kvt_store_range(&t, sorted[i], sorted[j]);
            expect_keys(r, sorted + i, j - i, "sub range");
            etcdserverpb__range_response__free_unpacked(r, NULL);
        }
    /* from-key, limit, count_only, keys_only, revision, sort */
    Etcdserverpb__RangeRequest q = ETCDSERVERPB__RANGE_REQUEST__INIT;
    kv_result res;
    q.key.data = (uint8_t *)sorted[7];
    q.key.len = strlen(sorted[7]);
    q.range_end = kvt_bin("\0");
    q.range_end.len = 1;
    q.range_end.data = (uint8_t *)"";
    r = kvt_store_range_req(&t, &q, &res);
    cr_assert_not_null(r);
    char *fromkey[NORD + 1];
    memcpy(fromkey, sorted + 7, (n - 7) * sizeof *fromkey);
    fromkey[n - 7] = "o0";
    expect_keys(r, fromkey, n - 7 + 1, "from key");
    etcdserverpb__range_response__free_unpacked(r, NULL);
    q.range_end = kvt_bin("o0");
    q.limit = 5;
    r = kvt_store_range_req(&t, &q, &res);
    expect_keys(r, sorted + 7, 5, "limit");
    cr_assert_eq(r->more, 1);
    cr_assert_eq(r->count, (int64_t)(n - 7));
    etcdserverpb__range_response__free_unpacked(r, NULL);
    q.limit = 0;
    q.count_only = 1;
    r = kvt_store_range_req(&t, &q, &res);
    cr_assert_eq(r->n_kvs, 0);
    cr_assert_eq(r->count, (int64_t)(n - 7));
    etcdserverpb__range_response__free_unpacked(r, NULL);
    q.count_only = 0;
    q.keys_only = 1;
    q.revision = mid;
    q.sort_order = ETCDSERVERPB__RANGE_REQUEST__SORT_ORDER__DESCEND;
    r = kvt_store_range_req(&t, &q, &res);
    cr_assert_eq(r->n_kvs, n - 7);
    for (size_t i = 0; i < n - 7; i++) {
        const char *w = sorted[n - 1 - i];
        cr_assert(r->kvs[i]->key.len == strlen(w) && !memcmp(r->kvs[i]->key.data, w, strlen(w)),
                  "descending %zu", i);
        cr_assert_eq(r->kvs[i]->value.len, 0, "keys_only");
    }
    etcdserverpb__range_response__free_unpacked(r, NULL);
    /* an older revision sees only the keys put by then */
    q = (Etcdserverpb__RangeRequest)ETCDSERVERPB__RANGE_REQUEST__INIT;
    q.key = kvt_bin("o/");
    q.range_end = kvt_bin("o0");
    q.revision = 1 + (int64_t)n / 2;
    r = kvt_store_range_req(&t, &q, &res);
    cr_assert_eq(r->n_kvs, n / 2, "revision %lld", (long long)q.revision);
    for (size_t i = 1; i < r->n_kvs; i++) {
        ProtobufCBinaryData *a = &r->kvs[i - 1]->key, *b = &r->kvs[i]->key;
        size_t m = a->len < b->len ? a->len : b->len;
        int c = memcmp(a->data, b->data, m);
        cr_assert(c < 0 || (c == 0 && a->len < b->len), "historical order at %zu", i);
    }
    etcdserverpb__range_response__free_unpacked(r, NULL);

    /* delete a sub range crossing the boundary: exactly those keys go, in order */
    Etcdserverpb__DeleteRangeRequest d = ETCDSERVERPB__DELETE_RANGE_REQUEST__INIT;
    d.key.data = (uint8_t *)sorted[5];
    d.key.len = strlen(sorted[5]);
    d.range_end.data = (uint8_t *)sorted[25];
    d.range_end.len = strlen(sorted[25]);
    d.prev_kv = 1;
    Etcdserverpb__DeleteRangeResponse *dr = kvt_store_del_req(&t, &d, &res);
    cr_assert_not_null(dr, "%s", KVT_STORE_MSG(res));
    cr_assert_eq(dr->deleted, 20);
    for (size_t i = 0; i < 20; i++) {
        const char *w = sorted[5 + i];
        cr_assert(dr->prev_kvs[i]->key.len == strlen(w) &&
                      !memcmp(dr->prev_kvs[i]->key.data, w, strlen(w)),
                  "prev_kv %zu in key order", i);
    }
    etcdserverpb__delete_range_response__free_unpacked(dr, NULL);
    r = kvt_store_range(&t, "o/", "o0");
    cr_assert_eq(r->n_kvs, n - 20);
    etcdserverpb__range_response__free_unpacked(r, NULL);
    r = kvt_store_range(&t, "o/", sorted[25]);
    expect_keys(r, sorted, 5, "left of the deleted range");
    etcdserverpb__range_response__free_unpacked(r, NULL);
    r = kvt_store_range(&t, sorted[25], "o0");
    expect_keys(r, sorted + 25, n - 25, "right of the deleted range");
    etcdserverpb__range_response__free_unpacked(r, NULL);
    for (size_t i = 0; i < n; i++)
        free(k[i]);
}

/* 60 long keys that share their first 600 bytes (one bucket) in reverse insertion order. */
Test(mvcc_longkeys, one_bucket_of_many_keys_is_sorted)
{
    char *k[60];
    for (int i = 0; i < 60; i++) {
        char tail[16];
        snprintf(tail, sizeof tail, "%03d", 59 - i);
        k[i] = mk("b/", 'x', 600 + (size_t)(i % 7), tail);
    }
    for (int i = 0; i < 60; i++)
        kvt_store_put(&t, k[i], "v", 0);
    kvt_store_put(&t, "b/", "short", 0);
    kvt_store_put(&t, "b/y", "short", 0);
    char *sorted[62];
    memcpy(sorted, k, sizeof k);
    sorted[60] = "b/";
    sorted[61] = "b/y";
    qsort(sorted, 62, sizeof *sorted, cmp_str);
    Etcdserverpb__RangeResponse *r = kvt_store_range(&t, "b/", "b0");
    expect_keys(r, sorted, 62, "bucket");
    etcdserverpb__range_response__free_unpacked(r, NULL);
    r = kvt_store_range(&t, sorted[10], sorted[40]);
    expect_keys(r, sorted + 10, 30, "inside the bucket");
    etcdserverpb__range_response__free_unpacked(r, NULL);
    for (int i = 0; i < 60; i++)
        free(k[i]);
}

Test(mvcc_longkeys, compaction_removes_long_key_records)
{
    char *a = mk("c/", 'a', 2000, ""), *b = mk("c/", 'b', 512, ""), *c = mk("c/", 'a', 100000, "");
    kvt_store_put(&t, a, "1", 0);
    kvt_store_put(&t, b, "1", 0);
    kvt_store_put(&t, c, "1", 0);
    kvt_store_put(&t, a, "2", 0);
    int64_t del = kvt_store_del(&t, b, NULL);
    int64_t last = kvt_store_put(&t, a, "3", 0);
    cr_assert_eq(db_entries(&t, "lkey"), 3);
    kv_result res;
    t.defer_compaction = 1;
    Etcdserverpb__CompactionResponse *cp = kvt_store_compact(&t, last - 1, &res);
    cr_assert_not_null(cp, "%s", KVT_STORE_MSG(res));
    etcdserverpb__compaction_response__free_unpacked(cp, NULL);
    /* one key per step, so the walk crosses from the short to the long keys between steps */
    kvt_store_put(&t, "c/short", "s", 0);
    int rc, steps = 0;
    do {
        kv_store_batch *bt;
        cr_assert_eq(kv_store_batch_begin(t.s, &bt), 0);
        rc = kv_store_compact_step(t.s, bt, 1, 0, 0, NULL, NULL);
        cr_assert_geq(rc, 0, "step: %d", rc);
        cr_assert_eq(kv_store_batch_commit(t.s, bt), 0);
        if (steps == 1)
            kvt_store_reopen(&t); /* progress persists across a restart */
    } while (rc == 1 && ++steps < 20);
    cr_assert_eq(rc, 0);
    cr_assert_eq(kv_store_compact_pending(t.s, NULL), 0);
    cr_assert_eq(db_entries(&t, "lkey"), 2, "the deleted key's handle is gone (del at %lld)",
                 (long long)del);
    cr_assert_eq(db_entries(&t, "lkidx"), 3, "a: 2 revisions (one kept at the point), c: 1");
    cr_assert_null(kvt_store_get(&t, b, 0));
    Mvccpb__KeyValue *kv = kvt_store_get(&t, a, last - 1);
    kvt_store_expect_kv(kv, a, "2");
    mvccpb__key_value__free_unpacked(kv, NULL);
    kv = kvt_store_get(&t, c, 0);
    kvt_store_expect_kv(kv, c, "1");
    mvccpb__key_value__free_unpacked(kv, NULL);
    free(a);
    free(b);
    free(c);
}

static int collect(void *arg, const uint8_t *key, size_t klen)
{
    char **out = arg;
    for (int i = 0; i < 8; i++)
        if (!out[i]) {
            /* not strndup: key is not NUL-terminated (ASan flags strndup's read of it) */
            out[i] = malloc(klen + 1);
            cr_assert_not_null(out[i]);
            memcpy(out[i], key, klen);
            out[i][klen] = '\0';
            return 0;
        }
    return -ENOSPC;
}

static int ev_collect(void *arg, const kv_store_event *e)
{
    Mvccpb__KeyValue *kv = mvccpb__key_value__unpack(NULL, e->kv_len, e->kv);
    cr_assert_not_null(kv);
    cr_assert_eq(e->tomb, 1);
    int rc = collect(arg, kv->key.data, kv->key.len);
    mvccpb__key_value__free_unpacked(kv, NULL);
    return rc;
}

Test(mvcc_longkeys, lease_attach_and_revoke_long_keys)
{
    kv_result res;
    Etcdserverpb__LeaseGrantResponse *g = kvt_store_grant(&t, 9, 100, &res);
    cr_assert_not_null(g, "%s", KVT_STORE_MSG(res));
    etcdserverpb__lease_grant_response__free_unpacked(g, NULL);
    char *k[4] = {mk("l/", 'z', 700, ""), mk("l/", 'a', 511, ""), mk("l/", 'a', 512, ""),
                  mk("l/", 'a', 5000, "")};
    for (int i = 0; i < 4; i++)
        kvt_store_put(&t, k[i], "v", 9);
    kvt_store_put(&t, "l/other", "v", 0);
    char *got[8] = {0};
    cr_assert_eq(kv_store_lease_keys(t.s, 9, collect, got), 0);
    char *sorted[4];
    memcpy(sorted, k, sizeof k);
    qsort(sorted, 4, sizeof *sorted, cmp_str);
    for (int i = 0; i < 4; i++) {
        cr_assert_not_null(got[i]);
        cr_assert_str_eq(got[i], sorted[i], "attached key %d in key order", i);
        free(got[i]);
    }
    cr_assert_null(got[4]);
    /* re-put without the lease detaches */
    kvt_store_put(&t, k[0], "v2", 0);
    memset(got, 0, sizeof got);
    cr_assert_eq(kv_store_lease_keys(t.s, 9, collect, got), 0);
    cr_assert_null(got[3], "3 keys left");
    for (int i = 0; i < 3; i++)
        free(got[i]);
    kvt_store_put(&t, k[0], "v3", 9);
    int64_t before = kvt_store_rev(&t);
    Etcdserverpb__LeaseRevokeResponse *rv = kvt_store_revoke(&t, 9, &res);
    cr_assert_not_null(rv, "%s", KVT_STORE_MSG(res));
    etcdserverpb__lease_revoke_response__free_unpacked(rv, NULL);
    cr_assert_eq(kvt_store_rev(&t), before + 1, "one revision for the whole revoke");
    for (int i = 0; i < 4; i++)
        cr_assert_null(kvt_store_get(&t, k[i], 0), "key %d deleted by the revoke", i);
    Mvccpb__KeyValue *kv = kvt_store_get(&t, "l/other", 0);
    cr_assert_not_null(kv);
    mvccpb__key_value__free_unpacked(kv, NULL);
    /* the revoke deleted the keys in key order (sub revisions 0..3), as etcd */
    kv_store_reader rd;
    cr_assert_eq(kv_store_reader_begin(t.s, &rd), 0);
    char *ev[8] = {0};
    int64_t last = 0;
    cr_assert_eq(kv_store_events(t.s, &rd, before + 1, before + 1, 0, ev_collect, ev, &last), 0);
    kv_store_reader_end(&rd);
    for (int i = 0; i < 4; i++) {
        cr_assert_not_null(ev[i]);
        cr_assert_str_eq(ev[i], sorted[i], "delete event %d in key order", i);
        free(ev[i]);
    }
    cr_assert_null(ev[4]);
    cr_assert_eq(db_entries(&t, "lease_lkeys"), 0);
    for (int i = 0; i < 4; i++)
        free(k[i]);
}

Test(mvcc_longkeys, txn_compare_on_a_long_key)
{
    char *k = mk("t/", 'q', 3000, ""), *k2 = mk("t/", 'q', 3000, "x");
    kvt_store_put(&t, k, "old", 0);
    Etcdserverpb__Compare c = ETCDSERVERPB__COMPARE__INIT, *cs[1] = {&c};
    c.key.data = (uint8_t *)k;
    c.key.len = strlen(k);
    c.target = ETCDSERVERPB__COMPARE__COMPARE_TARGET__VALUE;
    c.result = ETCDSERVERPB__COMPARE__COMPARE_RESULT__EQUAL;
    c.target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_VALUE;
    c.value = kvt_bin("old");
    Etcdserverpb__PutRequest p = ETCDSERVERPB__PUT_REQUEST__INIT;
    p.key.data = (uint8_t *)k2;
    p.key.len = strlen(k2);
    p.value = kvt_bin("new");
    Etcdserverpb__RequestOp op = ETCDSERVERPB__REQUEST_OP__INIT, *ops[1] = {&op};
    op.request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT;
    op.request_put = &p;
    Etcdserverpb__TxnRequest x = ETCDSERVERPB__TXN_REQUEST__INIT;
    x.compare = cs;
    x.n_compare = 1;
    x.success = ops;
    x.n_success = 1;
    kv_result res;
    Etcdserverpb__TxnResponse *tr = kvt_store_txn(&t, &x, &res);
    cr_assert_not_null(tr, "%s", KVT_STORE_MSG(res));
    cr_assert_eq(tr->succeeded, 1, "the long key's value compares equal");
    etcdserverpb__txn_response__free_unpacked(tr, NULL);
    Mvccpb__KeyValue *kv = kvt_store_get(&t, k2, 0);
    kvt_store_expect_kv(kv, k2, "new");
    mvccpb__key_value__free_unpacked(kv, NULL);
    c.value = kvt_bin("other");
    tr = kvt_store_txn(&t, &x, &res);
    cr_assert_not_null(tr, "%s", KVT_STORE_MSG(res));
    cr_assert_eq(tr->succeeded, 0);
    etcdserverpb__txn_response__free_unpacked(tr, NULL);
    free(k);
    free(k2);
}

/* A data dir without long keys stays format 1 (readable by older builds), also through
 * restarts and compaction. */
Test(mvcc_longkeys, short_keys_keep_format_1)
{
    for (int i = 0; i < 30; i++) {
        char *k = mk("s/", 'a', 300 + (size_t)i * 7, "");
        kvt_store_put(&t, k, "v", 0);
        free(k);
    }
    kv_result res;
    Etcdserverpb__CompactionResponse *cp = kvt_store_compact(&t, kvt_store_rev(&t) - 3, &res);
    cr_assert_not_null(cp);
    etcdserverpb__compaction_response__free_unpacked(cp, NULL);
    kvt_store_reopen(&t);
    cr_assert_eq(format_of(&t), 1);
    cr_assert_eq(kv_store_compact_pending(t.s, NULL), 0);
}

/* The startup record check covers the long-key databases: a clean store verifies, a flipped
 * byte in a long key's "lkey" record is reported and never returned by a read. */
Test(mvcc_longkeys, records_are_checked)
{
    char *a = mk("v/", 'a', 1500, "");
    kvt_store_put(&t, a, "1", 0);
    kvt_store_put(&t, "v/short", "1", 0);
    char err[256] = "";
    cr_assert_eq(kv_store_verify_records(t.s, 100000, err, sizeof err), 0, "%s", err);
    MDB_txn *txn;
    MDB_dbi dbi;
    MDB_cursor *c;
    MDB_val k, v;
    cr_assert_eq(mdb_txn_begin(kv_store_env(t.s), NULL, 0, &txn), 0);
    cr_assert_eq(mdb_dbi_open(txn, "lkey", 0, &dbi), 0);
    cr_assert_eq(mdb_cursor_open(txn, dbi, &c), 0);
    cr_assert_eq(mdb_cursor_get(c, &k, &v, MDB_FIRST), 0);
    uint8_t *copy = malloc(v.mv_size);
    memcpy(copy, v.mv_data, v.mv_size);
    copy[v.mv_size - 1] ^= 1;
    MDB_val nv = {v.mv_size, copy};
    cr_assert_eq(mdb_cursor_put(c, &k, &nv, MDB_CURRENT), 0);
    mdb_cursor_close(c);
    cr_assert_eq(mdb_txn_commit(txn), 0);
    free(copy);
    cr_assert_eq(kv_store_verify_records(t.s, 100000, err, sizeof err), -EBADMSG);
    kv_result res;
    Etcdserverpb__RangeRequest q = ETCDSERVERPB__RANGE_REQUEST__INIT;
    q.key = kvt_bin("v/");
    q.range_end = kvt_bin("v0");
    cr_assert_null(kvt_store_range_req(&t, &q, &res));
    cr_assert_eq(KVT_STORE_CODE(res), 15, "DATA_LOSS, not a wrong key (%d %s)", KVT_STORE_CODE(res),
                 KVT_STORE_MSG(res));
    free(a);
}

/* A data dir of the previous format (1: no long-key databases at all) opens, reads, and
 * takes its first long key. */
Test(mvcc_longkeys, a_format_1_data_dir_opens_and_takes_long_keys)
{
    kvt_store_put(&t, "old/a", "1", 0);
    kvt_store_put(&t, "old/b", "2", 0);
    MDB_txn *txn;
    cr_assert_eq(mdb_txn_begin(kv_store_env(t.s), NULL, 0, &txn), 0);
    const char *fresh[] = {"lkidx", "lkey", "lease_lkeys"};
    for (int i = 0; i < 3; i++) {
        MDB_dbi dbi;
        cr_assert_eq(mdb_dbi_open(txn, fresh[i], 0, &dbi), 0);
        cr_assert_eq(mdb_drop(txn, dbi, 1), 0, "remove %s as a format-1 file has none", fresh[i]);
    }
    cr_assert_eq(mdb_txn_commit(txn), 0);
    kvt_store_reopen(&t);
    cr_assert_eq(format_of(&t), 1);
    Etcdserverpb__RangeResponse *r = kvt_store_range(&t, "old/", "old0");
    cr_assert_eq(r->n_kvs, 2);
    etcdserverpb__range_response__free_unpacked(r, NULL);
    char *k = mk("old/", 'c', 800, "");
    kvt_store_put(&t, k, "3", 0);
    cr_assert_eq(format_of(&t), 2);
    r = kvt_store_range(&t, "old/", "old0");
    cr_assert_eq(r->n_kvs, 3);
    cr_assert_eq(r->kvs[2]->key.len, 800);
    etcdserverpb__range_response__free_unpacked(r, NULL);
    free(k);
}

/* max_keys_per_lease counts long attachments too. */
Test(mvcc_longkeys, lease_key_limit_counts_long_keys)
{
    kvt_store_close(&t);
    kv_store_config cfg;
    kv_store_config_default(&cfg);
    cfg.max_keys_per_lease = 2;
    kvt_store_open(&t, &cfg);
    kv_result res;
    Etcdserverpb__LeaseGrantResponse *g = kvt_store_grant(&t, 4, 100, &res);
    cr_assert_not_null(g, "%s", KVT_STORE_MSG(res));
    etcdserverpb__lease_grant_response__free_unpacked(g, NULL);
    char *a = mk("m/", 'a', 600, ""), *b = mk("m/", 'b', 9000, "");
    kvt_store_put(&t, "m/short", "v", 4);
    kvt_store_put(&t, a, "v", 4);
    kvt_store_put(&t, a, "again", 4); /* already attached: no new attachment */
    Etcdserverpb__PutRequest p = ETCDSERVERPB__PUT_REQUEST__INIT;
    p.key.data = (uint8_t *)b;
    p.key.len = strlen(b);
    p.value = kvt_bin("v");
    p.lease = 4;
    cr_assert_null(kvt_store_put_req(&t, &p, &res));
    cr_assert_eq(KVT_STORE_CODE(res), 9, "FAILED_PRECONDITION (%d %s)", KVT_STORE_CODE(res),
                 KVT_STORE_MSG(res));
    free(a);
    free(b);
}
