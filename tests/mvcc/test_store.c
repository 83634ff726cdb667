/* MVCC store: compaction, apply idempotence, group commit, flushes per commit, durability,
 * checksums, format version, startup cost, limits, quota, leases and observers, hashes, status. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvt_store.h"
#include "common/crc32c.h"

static kvt_store t;
static void setup(void)
{
    kvt_store_open(&t, NULL);
}
static void teardown(void)
{
    kvt_store_close(&t);
}
TestSuite(mvcc_store, .init = setup, .fini = teardown);

static size_t rev_records(void)
{
    MDB_txn *txn;
    MDB_dbi dbi;
    MDB_stat st;
    cr_assert_eq(mdb_txn_begin(kv_store_env(t.s), NULL, MDB_RDONLY, &txn), 0);
    cr_assert_eq(mdb_dbi_open(txn, "rev", 0, &dbi), 0);
    cr_assert_eq(mdb_stat(txn, dbi, &st), 0);
    mdb_txn_abort(txn);
    return st.ms_entries;
}

static void expect_range_err(const char *k, int64_t rev, int code, const char *msg)
{
    Etcdserverpb__RangeRequest q = ETCDSERVERPB__RANGE_REQUEST__INIT;
    q.key = kvt_bin(k);
    q.revision = rev;
    kv_result res;
    cr_assert_null(kvt_store_range_req(&t, &q, &res));
    cr_assert_eq(KVT_STORE_CODE(res), code);
    cr_assert_str_eq(KVT_STORE_MSG(res), msg);
}

static const char *COMPACTED = "etcdserver: mvcc: required revision has been compacted";
static const char *FUTURE = "etcdserver: mvcc: required revision is a future revision";

Test(mvcc_store, compaction)
{
    kvt_store_put(&t, "k", "v1", 0); /* 2 */
    kvt_store_put(&t, "k", "v2", 0); /* 3 */
    kvt_store_put(&t, "d", "x", 0);  /* 4 */
    kvt_store_del(&t, "d", NULL);    /* 5 */
    kvt_store_put(&t, "k", "v3", 0); /* 6 */
    cr_assert_eq(rev_records(), 5);
    kv_result res;
    cr_assert_null(kvt_store_compact(&t, 7, &res));
    cr_assert_eq(KVT_STORE_CODE(res), 11);
    cr_assert_str_eq(KVT_STORE_MSG(res), FUTURE);

    Etcdserverpb__CompactionResponse *c = kvt_store_compact(&t, 4, &res);
    cr_assert_not_null(c, "%s", KVT_STORE_MSG(res));
    cr_assert_eq(c->header->revision, 6, "compaction takes no revision");
    cr_assert_eq(c->header->member_id, 22);
    etcdserverpb__compaction_response__free_unpacked(c, NULL);
    cr_assert_eq(rev_records(), 4, "k@2 removed, k@3 kept as latest <= 4");
    expect_range_err("k", 3, 11, COMPACTED);
    Mvccpb__KeyValue *kv = kvt_store_get(&t, "k", 4);
    kvt_store_expect_kv(kv, "k", "v2");
    mvccpb__key_value__free_unpacked(kv, NULL);
    kv = kvt_store_get(&t, "d", 4);
    kvt_store_expect_kv(kv, "d", "x");
    mvccpb__key_value__free_unpacked(kv, NULL);

    cr_assert_null(kvt_store_compact(&t, 4, &res));
    cr_assert_eq(KVT_STORE_CODE(res), 11);
    cr_assert_str_eq(KVT_STORE_MSG(res), COMPACTED);
    cr_assert_null(kvt_store_compact(&t, 2, &res));
    cr_assert_str_eq(KVT_STORE_MSG(res), COMPACTED);

    c = kvt_store_compact(&t, 5, &res);
    etcdserverpb__compaction_response__free_unpacked(c, NULL);
    cr_assert_eq(rev_records(), 2, "deleted key d removed with its tombstone");
    cr_assert_null(kvt_store_get(&t, "d", 5));
    c = kvt_store_compact(&t, 6, &res);
    etcdserverpb__compaction_response__free_unpacked(c, NULL);
    cr_assert_eq(rev_records(), 1);
    kv = kvt_store_get(&t, "k", 0);
    kvt_store_expect_kv(kv, "k", "v3");
    cr_assert_eq(kv->version, 3, "version survives compaction");
    cr_assert_eq(kv->create_revision, 2);
    mvccpb__key_value__free_unpacked(kv, NULL);

    kv_store_status st;
    cr_assert_eq(kv_store_get_status(t.s, &st), 0);
    cr_assert_eq(st.compact_revision, 6);
    cr_assert_eq(st.keys, 1);
    kvt_store_reopen(&t);
    expect_range_err("k", 5, 11, COMPACTED);
}

Test(mvcc_store, fresh_store_compaction_point_is_minus_one)
{
    kv_store_status st;
    cr_assert_eq(kv_store_get_status(t.s, &st), 0);
    cr_assert_eq(st.compact_revision, -1);
    kv_result res;
    Etcdserverpb__CompactionResponse *c = kvt_store_compact(&t, 1, &res);
    cr_assert_not_null(c, "%s", KVT_STORE_MSG(res));
    etcdserverpb__compaction_response__free_unpacked(c, NULL);
}

static uint8_t *pack_put(const char *k, const char *v, size_t *len)
{
    Etcdserverpb__PutRequest p = ETCDSERVERPB__PUT_REQUEST__INIT;
    p.key = kvt_bin(k);
    p.value = kvt_bin(v);
    Kvdpb__InternalRequest ir = KVDPB__INTERNAL_REQUEST__INIT;
    ir.request_case = KVDPB__INTERNAL_REQUEST__REQUEST_PUT;
    ir.put = &p;
    *len = kvdpb__internal_request__get_packed_size(&ir);
    uint8_t *buf = malloc(*len + 1);
    kvdpb__internal_request__pack(&ir, buf);
    return buf;
}

static void apply_put(kv_store_batch *b, uint64_t index, const char *k, const char *v,
                      kv_result *res)
{
    size_t n;
    uint8_t *buf = pack_put(k, v, &n);
    cr_assert_eq(kv_store_apply(t.s, b, index, buf, n, NULL, res), 0);
    free(buf);
    free(res->resp);
    res->resp = NULL;
}

Test(mvcc_store, apply_idempotence)
{
    kv_store_batch *b;
    kv_result res;
    cr_assert_eq(kv_store_batch_begin(t.s, &b), 0);
    apply_put(b, 5, "a", "1", &res);
    cr_assert_eq(res.skipped, 0);
    cr_assert_eq(res.revision, 2);
    apply_put(b, 5, "a", "again", &res);
    cr_assert_eq(res.skipped, 1, "same index within a batch");
    cr_assert_eq(res.revision, 2);
    cr_assert_eq(kv_store_batch_commit(t.s, b), 0);

    cr_assert_eq(kv_store_batch_begin(t.s, &b), 0);
    apply_put(b, 3, "a", "old", &res);
    cr_assert_eq(res.skipped, 1, "index below the stored applied index");
    apply_put(b, 5, "a", "old", &res);
    cr_assert_eq(res.skipped, 1);
    apply_put(b, 6, "b", "1", &res);
    cr_assert_eq(res.skipped, 0);
    cr_assert_eq(kv_store_batch_commit(t.s, b), 0);
    Mvccpb__KeyValue *kv = kvt_store_get(&t, "a", 0);
    kvt_store_expect_kv(kv, "a", "1");
    cr_assert_eq(kv->version, 1);
    mvccpb__key_value__free_unpacked(kv, NULL);

    /* after restart, replaying the log from an earlier index skips what was applied */
    kvt_store_reopen(&t);
    cr_assert_eq(kv_store_batch_begin(t.s, &b), 0);
    apply_put(b, 6, "b", "replayed", &res);
    cr_assert_eq(res.skipped, 1);
    apply_put(b, 7, "c", "1", &res);
    cr_assert_eq(res.skipped, 0);
    cr_assert_eq(res.revision, 4);
    cr_assert_eq(kv_store_batch_commit(t.s, b), 0);
    kv_store_status st;
    cr_assert_eq(kv_store_get_status(t.s, &st), 0);
    cr_assert_eq(st.applied_index, 7);
}

Test(mvcc_store, group_commit_one_commit_per_batch)
{
    kv_store_counters c0, c1;
    kv_store_get_counters(t.s, &c0);
    kv_store_batch *b, *b2;
    kv_result res;
    cr_assert_eq(kv_store_batch_begin(t.s, &b), 0);
    cr_assert_eq(kv_store_batch_begin(t.s, &b2), -EBUSY);
    char k[32];
    for (int i = 0; i < 200; i++) {
        snprintf(k, sizeof k, "key-%03d", i);
        apply_put(b, (uint64_t)i + 1, k, "v", &res);
        cr_assert_eq(KVT_STORE_CODE(res), 0);
        cr_assert_eq(res.revision, i + 2);
    }
    /* not visible to readers before the commit */
    Etcdserverpb__RangeResponse *r = kvt_store_range(&t, "key-", "key.");
    cr_assert_eq(r->count, 0);
    etcdserverpb__range_response__free_unpacked(r, NULL);
    cr_assert_eq(kv_store_batch_commit(t.s, b), 0);
    kv_store_get_counters(t.s, &c1);
    cr_assert_eq(c1.commits - c0.commits, 1);
    cr_assert_eq(c1.applies - c0.applies, 200);
    r = kvt_store_range(&t, "key-", "key.");
    cr_assert_eq(r->count, 200);
    etcdserverpb__range_response__free_unpacked(r, NULL);
}

Test(mvcc_store, abort_drops_the_batch)
{
    kvt_store_put(&t, "a", "1", 0);
    kv_store_batch *b;
    kv_result res;
    cr_assert_eq(kv_store_batch_begin(t.s, &b), 0);
    apply_put(b, 10, "b", "1", &res);
    kv_store_batch_abort(t.s, b);
    cr_assert_null(kvt_store_get(&t, "b", 0));
    kv_store_status st;
    cr_assert_eq(kv_store_get_status(t.s, &st), 0);
    cr_assert_eq(st.applied_index, 1);
    cr_assert_eq(st.revision, 2);
    /* index 10 was not applied: it can be applied again */
    cr_assert_eq(kv_store_batch_begin(t.s, &b), 0);
    apply_put(b, 10, "b", "1", &res);
    cr_assert_eq(res.skipped, 0);
    cr_assert_eq(kv_store_batch_commit(t.s, b), 0);
}

Test(mvcc_store, durability_across_reopen)
{
    kv_result res;
    Etcdserverpb__LeaseGrantResponse *g = kvt_store_grant(&t, 5, 30, &res);
    etcdserverpb__lease_grant_response__free_unpacked(g, NULL);
    kvt_store_put(&t, "a", "1", 5);
    kvt_store_put(&t, "b", "2", 0);
    kvt_store_put(&t, "a", "3", 5);
    kvt_store_del(&t, "b", NULL);
    kvt_store_reopen(&t);
    kv_store_status st;
    cr_assert_eq(kv_store_get_status(t.s, &st), 0);
    cr_assert_eq(st.applied_index, t.index);
    cr_assert_eq(st.revision, 5);
    cr_assert_eq(st.keys, 1);
    Mvccpb__KeyValue *kv = kvt_store_get(&t, "a", 0);
    kvt_store_expect_kv(kv, "a", "3");
    cr_assert_eq(kv->version, 2);
    cr_assert_eq(kv->lease, 5);
    mvccpb__key_value__free_unpacked(kv, NULL);
    kv = kvt_store_get(&t, "b", 3);
    kvt_store_expect_kv(kv, "b", "2");
    mvccpb__key_value__free_unpacked(kv, NULL);
    cr_assert_null(kvt_store_get(&t, "b", 0));
    /* the lease and its attachment survived too */
    MDB_txn *txn;
    cr_assert_eq(mdb_txn_begin(kv_store_env(t.s), NULL, MDB_RDONLY, &txn), 0);
    size_t n = 0;
    cr_assert_eq(kv_lease_table_key_count(kv_store_leases(t.s), txn, 5, &n), 0);
    mdb_txn_abort(txn);
    cr_assert_eq(n, 1);
    /* writes continue at the restored revision */
    cr_assert_eq(kvt_store_put(&t, "c", "1", 0), 6);
}

/* Flips one byte of the payload of the record at (main, sub) with raw LMDB access. */
static void corrupt_record(int64_t main, int64_t sub)
{
    MDB_txn *txn;
    MDB_dbi dbi;
    cr_assert_eq(mdb_txn_begin(kv_store_env(t.s), NULL, 0, &txn), 0);
    cr_assert_eq(mdb_dbi_open(txn, "rev", 0, &dbi), 0);
    uint8_t key[16] = {0};
    for (int i = 0; i < 8; i++) {
        key[7 - i] = (uint8_t)((uint64_t)main >> (8 * i));
        key[15 - i] = (uint8_t)((uint64_t)sub >> (8 * i));
    }
    MDB_val k = {16, key}, v;
    cr_assert_eq(mdb_get(txn, dbi, &k, &v), 0);
    uint8_t *copy = malloc(v.mv_size);
    memcpy(copy, v.mv_data, v.mv_size);
    copy[v.mv_size - 1] ^= 0x40;
    MDB_val nv = {v.mv_size, copy};
    cr_assert_eq(mdb_put(txn, dbi, &k, &nv, 0), 0);
    cr_assert_eq(mdb_txn_commit(txn), 0);
    free(copy);
}

Test(mvcc_store, checksum_corruption_is_detected)
{
    kvt_store_put(&t, "a", "hello", 0); /* 2 */
    kvt_store_put(&t, "b", "world", 0); /* 3 */
    uint32_t h;
    int64_t cr;
    cr_assert_eq(kv_store_hash_kv(t.s, 0, &h, &cr), 0);
    corrupt_record(2, 0);
    kvt_store_reopen(&t); /* open does not scan: it still opens */

    Etcdserverpb__RangeRequest q = ETCDSERVERPB__RANGE_REQUEST__INIT;
    q.key = kvt_bin("a");
    size_t n = etcdserverpb__range_request__get_packed_size(&q);
    uint8_t buf[64];
    etcdserverpb__range_request__pack(&q, buf);
    kv_result res;
    /* the apply path reports corruption as a DATA_LOSS request error and asks for CORRUPT */
    kv_store_batch *b;
    cr_assert_eq(kv_store_batch_begin(t.s, &b), 0);
    size_t plen;
    uint8_t *p = pack_put("a", "x", &plen);
    cr_assert_eq(kv_store_apply(t.s, b, 100, p, plen, NULL, &res), 0);
    cr_assert_eq(KVT_STORE_CODE(res), KV_GRPC_DATA_LOSS, "%d %s", KVT_STORE_CODE(res),
                 KVT_STORE_MSG(res));
    free(p);
    kv_store_batch_abort(t.s, b);
    cr_assert_eq(kv_store_take_alarms(t.s), 1u << KV_ALARM_CORRUPT);
    kvt_store_reopen(&t);

    /* other records still read until the first corrupt one is seen */
    Mvccpb__KeyValue *kv = kvt_store_get(&t, "b", 0);
    kvt_store_expect_kv(kv, "b", "world");
    mvccpb__key_value__free_unpacked(kv, NULL);
    cr_assert_eq(kv_store_alarms(t.s), 0u);
    cr_assert_eq(kv_store_range(t.s, buf, n, NULL, &res), 0);
    cr_assert_eq(KVT_STORE_CODE(res), KV_GRPC_DATA_LOSS);
    cr_assert_null(res.resp, "the corrupted record is not returned");
    /* from now on this member refuses to serve (D10), and asks for the CORRUPT alarm */
    cr_assert_eq(kv_store_alarms(t.s), 1u << KV_ALARM_CORRUPT);
    cr_assert_eq(kv_store_take_alarms(t.s), 1u << KV_ALARM_CORRUPT);
    cr_assert_eq(kv_store_take_alarms(t.s), 0u, "taken once");
    q.key = kvt_bin("b");
    n = etcdserverpb__range_request__get_packed_size(&q);
    etcdserverpb__range_request__pack(&q, buf);
    cr_assert_eq(kv_store_range(t.s, buf, n, NULL, &res), 0);
    cr_assert_eq(KVT_STORE_CODE(res), KV_GRPC_DATA_LOSS);
    cr_assert_str_eq(KVT_STORE_MSG(res), "etcdserver: corrupt cluster");
    cr_assert_eq(kv_store_hash_kv(t.s, 0, &h, &cr), -EBADMSG);
}

static void rewrite_meta(const char *name, const uint8_t *payload, size_t len, bool good_crc)
{
    MDB_txn *txn;
    MDB_dbi dbi;
    cr_assert_eq(mdb_txn_begin(kv_store_env(t.s), NULL, 0, &txn), 0);
    cr_assert_eq(mdb_dbi_open(txn, "meta", 0, &dbi), 0);
    uint8_t v[64];
    uint32_t c = kv_crc32c(0, payload, len) ^ (good_crc ? 0u : 1u);
    v[0] = (uint8_t)(c >> 24);
    v[1] = (uint8_t)(c >> 16);
    v[2] = (uint8_t)(c >> 8);
    v[3] = (uint8_t)c;
    memcpy(v + 4, payload, len);
    MDB_val k = {strlen(name), (void *)name}, d = {4 + len, v};
    cr_assert_eq(mdb_put(txn, dbi, &k, &d, 0), 0);
    cr_assert_eq(mdb_txn_commit(txn), 0);
}

Test(mvcc_store, unknown_format_version_is_refused)
{
    uint8_t ver[4] = {0, 0, 0, 99};
    rewrite_meta("format", ver, 4, true);
    kv_store_close(t.s);
    t.s = NULL;
    cr_assert_eq(kv_store_open(&t.s, &t.cfg), -EPROTONOSUPPORT);
    cr_assert_null(t.s);
}

Test(mvcc_store, corrupted_meta_is_refused)
{
    uint8_t state[32] = {0};
    rewrite_meta("state", state, 32, false);
    kv_store_close(t.s);
    t.s = NULL;
    cr_assert_eq(kv_store_open(&t.s, &t.cfg), -EBADMSG);
}

Test(mvcc_store, crc32c_known_vector)
{
    /* RFC 3720 / iSCSI check value */
    cr_assert_eq(kv_crc32c(0, "123456789", 9), 0xE3069283u);
    cr_assert_eq(kv_crc32c(kv_crc32c(0, "1234", 4), "56789", 5), 0xE3069283u);
    cr_assert_eq(kv_crc32c_portable(0, "123456789", 9), 0xE3069283u);
}

/* kv_crc32c (the CPU's crc32 instruction where there is one) equals the table at every
 * length and alignment, whole or continued. */
Test(mvcc_store, crc32c_matches_the_table)
{
    static uint8_t buf[4096 + 16];
    uint64_t x = 0x9e3779b97f4a7c15u;
    for (size_t i = 0; i < sizeof(buf); i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        buf[i] = (uint8_t)x;
    }
    for (size_t off = 0; off < 16; off++)
        for (size_t len = 0; len <= 4096; len += len < 64 ? 1 : 61) {
            uint32_t want = kv_crc32c_portable(0x12345678u, buf + off, len);
            cr_assert_eq(kv_crc32c(0x12345678u, buf + off, len), want, "off %zu len %zu", off, len);
            size_t h = len / 3;
            cr_assert_eq(kv_crc32c(kv_crc32c(0x12345678u, buf + off, h), buf + off + h, len - h),
                         want, "continued: off %zu len %zu", off, len);
        }
}

static uint64_t open_reads_with(size_t nkeys)
{
    kv_store_batch *b;
    kv_result res;
    char k[32];
    cr_assert_eq(kv_store_batch_begin(t.s, &b), 0);
    for (size_t i = 0; i < nkeys; i++) {
        ++t.index;
        snprintf(k, sizeof k, "k%06llu", (unsigned long long)t.index);
        apply_put(b, t.index, k, "value", &res);
    }
    cr_assert_eq(kv_store_batch_commit(t.s, b), 0);
    kvt_store_reopen(&t);
    kv_store_counters c;
    kv_store_get_counters(t.s, &c);
    return c.open_meta_reads;
}

Test(mvcc_store, startup_reads_meta_only)
{
    uint64_t small = open_reads_with(10);
    uint64_t big = open_reads_with(5000);
    cr_assert_eq(small, 2, "format + state");
    cr_assert_eq(big, small, "startup work does not depend on the key count");
    kv_store_status st;
    cr_assert_eq(kv_store_get_status(t.s, &st), 0);
    cr_assert_eq(st.keys, 5010, "key count comes from the counter");
}

/* Keys longer than LMDB's 511-byte key limit are accepted (etcd has no key
 * limit besides the request size) and order after their 511-byte prefix. */
Test(mvcc_store, key_size_limit)
{
    size_t max = 511;
    cr_assert_eq(kv_store_max_key_size(t.s), SIZE_MAX);
    char *k = malloc(max + 2);
    memset(k, 'k', max + 1);
    k[max + 1] = 0;
    Etcdserverpb__PutRequest p = ETCDSERVERPB__PUT_REQUEST__INIT;
    p.key = kvt_bin(k);
    p.value = kvt_bin("v");
    kv_result res;
    Etcdserverpb__PutResponse *pr = kvt_store_put_req(&t, &p, &res);
    cr_assert_not_null(pr, "%s", KVT_STORE_MSG(res));
    etcdserverpb__put_response__free_unpacked(pr, NULL);
    Mvccpb__KeyValue *kv = kvt_store_get(&t, k, 0);
    cr_assert_not_null(kv);
    cr_assert_eq(kv->key.len, max + 1);
    mvccpb__key_value__free_unpacked(kv, NULL);
    k[max] = 0;
    cr_assert_eq(kvt_store_put(&t, k, "v", 0), 3);
    kv = kvt_store_get(&t, k, 0);
    cr_assert_eq(kv->key.len, max);
    mvccpb__key_value__free_unpacked(kv, NULL);
    /* a range starting at a longer key still orders correctly */
    char *longer = malloc(max + 3);
    memset(longer, 'k', max + 2);
    longer[max + 2] = 0;
    char *shorter = malloc(max);
    memset(shorter, 'k', max - 1);
    shorter[max - 1] = 0;
    Etcdserverpb__RangeResponse *r = kvt_store_range(&t, longer, "z");
    cr_assert_eq(r->n_kvs, 0);
    etcdserverpb__range_response__free_unpacked(r, NULL);
    r = kvt_store_range(&t, shorter, "z");
    cr_assert_eq(r->n_kvs, 2);
    cr_assert_eq(r->kvs[0]->key.len, max);
    cr_assert_eq(r->kvs[1]->key.len, max + 1);
    etcdserverpb__range_response__free_unpacked(r, NULL);
    free(k);
    free(longer);
    free(shorter);
}

/* In a cluster (deterministic apply) a per-member limit must not become a per-member result:
 * the growth guard refuses nothing, and a full LMDB map fails the batch (the member stops)
 * instead of one request. */
Test(mvcc_store, deterministic_apply_turns_a_full_map_into_a_storage_failure)
{
    kv_store_config cfg;
    kv_store_config_default(&cfg);
    cfg.quota_bytes = 1 << 20;
    kvt_store_close(&t);
    kvt_store_open(&t, &cfg);
    kv_store_set_deterministic(t.s, 1);
    char *big = malloc(100000);
    memset(big, 'x', 99999);
    big[99999] = 0;
    kv_store_batch *b;
    kv_result res;
    cr_assert_eq(kv_store_batch_begin(t.s, &b), 0);
    int rc = 0;
    uint64_t i;
    for (i = 1; i < 400 && rc == 0; i++) {
        char k[32];
        snprintf(k, sizeof k, "big%03llu", (unsigned long long)i);
        size_t n;
        uint8_t *buf = pack_put(k, big, &n);
        rc = kv_store_apply(t.s, b, i, buf, n, NULL, &res);
        free(buf);
        if (rc == 0) {
            cr_assert_eq(KVT_STORE_CODE(res), 0, "request %llu refused: %s", (unsigned long long)i,
                         KVT_STORE_MSG(res));
            free(res.resp);
        }
    }
    cr_assert_eq(rc, -ENOSPC, "a full map is a storage failure (%d after %llu puts)", rc,
                 (unsigned long long)i);
    cr_assert_gt(i, 100, "past the quota plus half the headroom: nothing refused early");
    kv_store_batch_abort(t.s, b);
    free(big);
}

/* The fsync metric counts what the store says a commit flushes: nothing under
 * --unsafe-no-fsync (MDB_NOSYNC), else the data pages (MDB_NOMETASYNC) or both pages. */
Test(mvcc_store, commit_flushes_follow_the_sync_mode)
{
    cr_assert_eq(kv_store_commit_flushes(t.s, 1), 1);
    cr_assert_eq(kv_store_commit_flushes(t.s, 0), 2);
    kv_store_config cfg;
    kv_store_config_default(&cfg);
    cfg.unsafe_no_fsync = 1;
    kvt_store_close(&t);
    kvt_store_open(&t, &cfg);
    cr_assert_eq(kv_store_commit_flushes(t.s, 1), 0);
    cr_assert_eq(kv_store_commit_flushes(t.s, 0), 0);
}

Test(mvcc_store, quota_exceeded_fails_the_request_only)
{
    kv_store_config cfg;
    kv_store_config_default(&cfg);
    cfg.quota_bytes = 1 << 20;
    kvt_store_close(&t);
    kvt_store_open(&t, &cfg);
    char *big = malloc(100000);
    memset(big, 'x', 99999);
    big[99999] = 0;
    kv_store_batch *b;
    kv_result res;
    cr_assert_eq(kv_store_batch_begin(t.s, &b), 0);
    int got = 0;
    char k[32];
    uint64_t i;
    /* the map holds the quota plus headroom (kv_store_map_size): 1 MiB + 16 MiB */
    cr_assert_eq(kv_store_map_size(1 << 20), (size_t)17 << 20);
    for (i = 1; i < 400 && !got; i++) {
        snprintf(k, sizeof k, "big%03llu", (unsigned long long)i);
        apply_put(b, i, k, big, &res);
        if (KVT_STORE_CODE(res) == KV_GRPC_RESOURCE_EXHAUSTED)
            got = 1;
        else
            cr_assert_eq(KVT_STORE_CODE(res), 0, "%s", KVT_STORE_MSG(res));
    }
    cr_assert(got, "quota reached");
    cr_assert_str_eq(KVT_STORE_MSG(res), "etcdserver: mvcc: database space exceeded");
    int64_t rev = res.revision;
    /* the batch goes on: a request that does not grow the store still applies (further puts
     * of this batch are refused: it is past the quota plus half the headroom) */
    Etcdserverpb__DeleteRangeRequest d = ETCDSERVERPB__DELETE_RANGE_REQUEST__INIT;
    d.key = kvt_bin("big001");
    Kvdpb__InternalRequest ir = KVDPB__INTERNAL_REQUEST__INIT;
    ir.request_case = KVDPB__INTERNAL_REQUEST__REQUEST_DELETE_RANGE;
    ir.delete_range = &d;
    size_t dn = kvdpb__internal_request__get_packed_size(&ir);
    uint8_t dbuf[64];
    kvdpb__internal_request__pack(&ir, dbuf);
    cr_assert_eq(kv_store_apply(t.s, b, i, dbuf, dn, NULL, &res), 0);
    cr_assert_eq(KVT_STORE_CODE(res), 0, "%s", KVT_STORE_MSG(res));
    free(res.resp);
    cr_assert_eq(res.revision, rev + 1);
    cr_assert_eq(kv_store_batch_commit(t.s, b), 0);
    cr_assert_null(kvt_store_get(&t, "big001", 0));
    Mvccpb__KeyValue *kv = kvt_store_get(&t, "big002", 0);
    cr_assert_not_null(kv);
    mvccpb__key_value__free_unpacked(kv, NULL);
    free(big);
}

typedef struct obs_log {
    int granted, revoked, checkpointed;
    int64_t last_id, last_ttl, last_rem;
} obs_log;
static void on_grant(void *arg, int64_t id, int64_t ttl, int64_t rem)
{
    obs_log *l = arg;
    l->granted++;
    l->last_id = id;
    l->last_ttl = ttl;
    l->last_rem = rem;
}
static void on_revoke(void *arg, int64_t id)
{
    obs_log *l = arg;
    l->revoked++;
    l->last_id = id;
}
static void on_checkpoint(void *arg, int64_t id, int64_t rem)
{
    obs_log *l = arg;
    l->checkpointed++;
    l->last_id = id;
    l->last_rem = rem;
}

Test(mvcc_store, leases_grant_revoke_checkpoint)
{
    obs_log log = {0};
    kv_store_lease_observer o = {&log, on_grant, on_revoke, on_checkpoint};
    kv_store_set_lease_observer(t.s, &o);
    kv_result res;
    Etcdserverpb__LeaseGrantResponse *g = kvt_store_grant(&t, 42, 10, &res);
    cr_assert_not_null(g);
    cr_assert_eq(g->id, 42);
    cr_assert_eq(g->ttl, 10);
    cr_assert_eq(g->header->revision, 1);
    etcdserverpb__lease_grant_response__free_unpacked(g, NULL);
    cr_assert_eq(log.granted, 1);
    cr_assert_eq(log.last_id, 42);
    cr_assert_eq(log.last_ttl, 10);

    cr_assert_null(kvt_store_grant(&t, 42, 10, &res));
    cr_assert_eq(KVT_STORE_CODE(res), 9);
    cr_assert_str_eq(KVT_STORE_MSG(res), "etcdserver: lease already exists");
    cr_assert_null(kvt_store_grant(&t, 43, 9000000001LL, &res));
    cr_assert_eq(KVT_STORE_CODE(res), 11);
    cr_assert_str_eq(KVT_STORE_MSG(res), "etcdserver: too large lease TTL");
    cr_assert_null(kvt_store_grant(&t, 0, 10, &res));
    cr_assert_eq(KVT_STORE_CODE(res), 5);
    cr_assert_eq(log.granted, 1, "failed grants are not observed");

    kvt_store_put(&t, "a", "1", 42); /* 2 */
    kvt_store_put(&t, "b", "1", 42); /* 3 */
    kvt_store_put(&t, "c", "1", 0);  /* 4 */

    Etcdserverpb__LeaseCheckpoint cp = ETCDSERVERPB__LEASE_CHECKPOINT__INIT, cp2 = cp;
    cp.id = 42;
    cp.remaining_ttl = 4;
    cp2.id = 999; /* unknown: ignored */
    Etcdserverpb__LeaseCheckpoint *cps[] = {&cp, &cp2};
    Etcdserverpb__LeaseCheckpointRequest creq = ETCDSERVERPB__LEASE_CHECKPOINT_REQUEST__INIT;
    creq.checkpoints = cps;
    creq.n_checkpoints = 2;
    Kvdpb__InternalRequest ir = KVDPB__INTERNAL_REQUEST__INIT;
    ir.request_case = KVDPB__INTERNAL_REQUEST__REQUEST_LEASE_CHECKPOINT;
    ir.lease_checkpoint = &creq;
    kvt_store_apply(&t, &ir, &res);
    cr_assert_eq(KVT_STORE_CODE(res), 0);
    free(res.resp);
    cr_assert_eq(log.checkpointed, 1);
    cr_assert_eq(log.last_rem, 4);
    MDB_txn *txn;
    kv_lease_rec rec;
    cr_assert_eq(mdb_txn_begin(kv_store_env(t.s), NULL, MDB_RDONLY, &txn), 0);
    cr_assert_eq(kv_lease_table_get(kv_store_leases(t.s), txn, 42, &rec), 0);
    mdb_txn_abort(txn);
    cr_assert_eq(rec.remaining_ttl, 4);
    cr_assert_eq(rec.ttl, 10);

    Etcdserverpb__LeaseRevokeResponse *rv = kvt_store_revoke(&t, 42, &res);
    cr_assert_not_null(rv, "%s", KVT_STORE_MSG(res));
    cr_assert_eq(rv->header->revision, 5, "all attached keys deleted in one revision");
    etcdserverpb__lease_revoke_response__free_unpacked(rv, NULL);
    cr_assert_eq(log.revoked, 1);
    cr_assert_null(kvt_store_get(&t, "a", 0));
    cr_assert_null(kvt_store_get(&t, "b", 0));
    Mvccpb__KeyValue *kv = kvt_store_get(&t, "c", 0);
    cr_assert_not_null(kv);
    mvccpb__key_value__free_unpacked(kv, NULL);
    cr_assert_null(kvt_store_revoke(&t, 42, &res));
    cr_assert_eq(KVT_STORE_CODE(res), 5);
    cr_assert_str_eq(KVT_STORE_MSG(res), "etcdserver: requested lease not found");
    cr_assert_eq(mdb_txn_begin(kv_store_env(t.s), NULL, MDB_RDONLY, &txn), 0);
    cr_assert_eq(kv_lease_table_get(kv_store_leases(t.s), txn, 42, &rec), -ENOENT);
    mdb_txn_abort(txn);
}

Test(mvcc_store, lease_reattach_and_detach_on_delete)
{
    kv_result res;
    Etcdserverpb__LeaseGrantResponse *g = kvt_store_grant(&t, 1, 10, &res);
    etcdserverpb__lease_grant_response__free_unpacked(g, NULL);
    g = kvt_store_grant(&t, 2, 10, &res);
    etcdserverpb__lease_grant_response__free_unpacked(g, NULL);
    kvt_store_put(&t, "k", "v", 1);
    kvt_store_put(&t, "k", "v", 2); /* moves to lease 2 */
    kvt_store_put(&t, "j", "v", 1);
    kvt_store_del(&t, "j", NULL); /* detaches */
    MDB_txn *txn;
    size_t n1 = 9, n2 = 9;
    cr_assert_eq(mdb_txn_begin(kv_store_env(t.s), NULL, MDB_RDONLY, &txn), 0);
    cr_assert_eq(kv_lease_table_key_count(kv_store_leases(t.s), txn, 1, &n1), 0);
    cr_assert_eq(kv_lease_table_key_count(kv_store_leases(t.s), txn, 2, &n2), 0);
    mdb_txn_abort(txn);
    cr_assert_eq(n1, 0);
    cr_assert_eq(n2, 1);
    /* revoking lease 1 deletes nothing and takes no revision */
    int64_t rev = kvt_store_rev(&t);
    Etcdserverpb__LeaseRevokeResponse *rv = kvt_store_revoke(&t, 1, &res);
    cr_assert_not_null(rv, "%s", KVT_STORE_MSG(res));
    cr_assert_eq(rv->header->revision, rev);
    etcdserverpb__lease_revoke_response__free_unpacked(rv, NULL);
    Mvccpb__KeyValue *kv = kvt_store_get(&t, "k", 0);
    cr_assert_eq(kv->lease, 2);
    mvccpb__key_value__free_unpacked(kv, NULL);
}

Test(mvcc_store, max_keys_per_lease)
{
    kv_store_config cfg;
    kv_store_config_default(&cfg);
    cfg.max_keys_per_lease = 2;
    kvt_store_close(&t);
    kvt_store_open(&t, &cfg);
    kv_result res;
    Etcdserverpb__LeaseGrantResponse *g = kvt_store_grant(&t, 1, 10, &res);
    etcdserverpb__lease_grant_response__free_unpacked(g, NULL);
    kvt_store_put(&t, "a", "v", 1);
    kvt_store_put(&t, "b", "v", 1);
    kvt_store_put(&t, "a", "v2", 1); /* already attached: allowed */
    Etcdserverpb__PutRequest p = ETCDSERVERPB__PUT_REQUEST__INIT;
    p.key = kvt_bin("c");
    p.value = kvt_bin("v");
    p.lease = 1;
    cr_assert_null(kvt_store_put_req(&t, &p, &res));
    cr_assert_eq(KVT_STORE_CODE(res), 9);
    cr_assert_str_eq(KVT_STORE_MSG(res), "etcdserver: too many keys attached to lease");
    cr_assert_null(kvt_store_get(&t, "c", 0));
}

Test(mvcc_store, hash_kv)
{
    kvt_store t2;
    kvt_store_open(&t2, NULL);
    kvt_store *both[] = {&t, &t2};
    for (int i = 0; i < 2; i++) {
        kvt_store_put(both[i], "a", "1", 0);
        kvt_store_put(both[i], "b", "2", 0);
        kvt_store_del(both[i], "a", NULL);
    }
    uint32_t h1, h2, h3;
    int64_t c1, c2;
    cr_assert_eq(kv_store_hash_kv(t.s, 0, &h1, &c1), 0);
    cr_assert_eq(kv_store_hash_kv(t2.s, 0, &h2, &c2), 0);
    cr_assert_eq(h1, h2, "same history, same hash");
    cr_assert_eq(c1, -1);
    cr_assert_eq(kv_store_hash_kv(t.s, 3, &h3, &c1), 0);
    kvt_store_put(&t, "c", "3", 0);
    cr_assert_eq(kv_store_hash_kv(t.s, 3, &h2, &c1), 0);
    cr_assert_eq(h2, h3, "hash at a past revision is stable");
    cr_assert_eq(kv_store_hash_kv(t.s, 0, &h2, &c1), 0);
    cr_assert_neq(h2, h1);
    kvt_store_put(&t2, "c", "different", 0);
    cr_assert_eq(kv_store_hash_kv(t2.s, 0, &h3, &c2), 0);
    cr_assert_neq(h2, h3, "different data, different hash");
    cr_assert_eq(kv_store_hash_kv(t.s, 99, &h2, &c1), KV_STORE_ERR_FUTURE_REV);
    kv_result res;
    Etcdserverpb__CompactionResponse *c = kvt_store_compact(&t, 4, &res);
    etcdserverpb__compaction_response__free_unpacked(c, NULL);
    cr_assert_eq(kv_store_hash_kv(t.s, 2, &h2, &c1), KV_STORE_ERR_COMPACTED);
    cr_assert_eq(kv_store_hash_kv(t.s, 4, &h2, &c1), KV_STORE_ERR_COMPACTED);
    cr_assert_eq(kv_store_hash_kv(t.s, 0, &h2, &c1), 0);
    cr_assert_eq(c1, 4);
    kvt_store_close(&t2);
}

Test(mvcc_store, status)
{
    kvt_store_put(&t, "a", "1", 0);
    kvt_store_put(&t, "b", "1", 0);
    kv_store_status st;
    cr_assert_eq(kv_store_get_status(t.s, &st), 0);
    cr_assert_eq(st.revision, 3);
    cr_assert_eq(st.keys, 2);
    cr_assert_eq(st.applied_index, 2);
    cr_assert_gt(st.db_size, 0);
    cr_assert_gt(st.db_size_in_use, 0);
    cr_assert_leq(st.db_size_in_use, st.db_size);
}

/* The store's packed responses are valid etcdserverpb messages: unpack + repack gives the
 * same bytes. */
Test(mvcc_store, protobuf_round_trips)
{
    kvt_store_put(&t, "a", "1", 0);
    Etcdserverpb__RangeRequest q = ETCDSERVERPB__RANGE_REQUEST__INIT;
    q.key = kvt_bin("a");
    q.range_end = kvt_bin("z");
    size_t n = etcdserverpb__range_request__get_packed_size(&q);
    uint8_t buf[64];
    etcdserverpb__range_request__pack(&q, buf);
    kv_result res;
    cr_assert_eq(kv_store_range(t.s, buf, n, NULL, &res), 0);
    Etcdserverpb__RangeResponse *r =
        etcdserverpb__range_response__unpack(NULL, res.resp_len, res.resp);
    cr_assert_not_null(r);
    cr_assert_eq(r->n_kvs, 1);
    size_t m = etcdserverpb__range_response__get_packed_size(r);
    cr_assert_eq(m, res.resp_len);
    uint8_t *again = malloc(m);
    etcdserverpb__range_response__pack(r, again);
    cr_assert(memcmp(again, res.resp, m) == 0);
    free(again);
    etcdserverpb__range_response__free_unpacked(r, NULL);
    free(res.resp);

    Etcdserverpb__PutRequest p = ETCDSERVERPB__PUT_REQUEST__INIT;
    p.key = kvt_bin("a");
    p.value = kvt_bin("2");
    p.prev_kv = 1;
    Kvdpb__InternalRequest ir = KVDPB__INTERNAL_REQUEST__INIT;
    ir.request_case = KVDPB__INTERNAL_REQUEST__REQUEST_PUT;
    ir.put = &p;
    kvt_store_apply(&t, &ir, &res);
    Etcdserverpb__PutResponse *pr =
        etcdserverpb__put_response__unpack(NULL, res.resp_len, res.resp);
    cr_assert_not_null(pr);
    cr_assert_not_null(pr->prev_kv);
    m = etcdserverpb__put_response__get_packed_size(pr);
    cr_assert_eq(m, res.resp_len);
    again = malloc(m);
    etcdserverpb__put_response__pack(pr, again);
    cr_assert(memcmp(again, res.resp, m) == 0);
    free(again);
    etcdserverpb__put_response__free_unpacked(pr, NULL);
    free(res.resp);
}

Test(mvcc_store, undecodable_and_alarm_requests)
{
    kv_store_batch *b;
    kv_result res;
    cr_assert_eq(kv_store_batch_begin(t.s, &b), 0);
    uint8_t junk[] = {0xff, 0xff, 0xff};
    cr_assert_eq(kv_store_apply(t.s, b, 1, junk, sizeof junk, NULL, &res), 0);
    cr_assert_eq(KVT_STORE_CODE(res), KV_GRPC_INTERNAL);
    Etcdserverpb__AlarmRequest a = ETCDSERVERPB__ALARM_REQUEST__INIT;
    Kvdpb__InternalRequest ir = KVDPB__INTERNAL_REQUEST__INIT;
    ir.request_case = KVDPB__INTERNAL_REQUEST__REQUEST_ALARM;
    ir.alarm = &a;
    uint8_t buf[64];
    size_t n = kvdpb__internal_request__pack(&ir, buf);
    cr_assert_eq(kv_store_apply(t.s, b, 2, buf, n, NULL, &res), 0);
    cr_assert_eq(KVT_STORE_CODE(res), 0, "alarm GET is applied: %s", KVT_STORE_MSG(res));
    Etcdserverpb__AlarmResponse *ar =
        etcdserverpb__alarm_response__unpack(NULL, res.resp_len, res.resp);
    cr_assert_not_null(ar);
    cr_assert_eq(ar->n_alarms, 0);
    etcdserverpb__alarm_response__free_unpacked(ar, NULL);
    free(res.resp);
    cr_assert_eq(kv_store_batch_commit(t.s, b), 0);
    kv_store_status st;
    cr_assert_eq(kv_store_get_status(t.s, &st), 0);
    cr_assert_eq(st.applied_index, 2, "failed requests still count as applied");
    cr_assert_eq(st.revision, 1);
}

/* --unsafe-no-fsync: the environment is opened MDB_NOSYNC only when asked, and a defragment
 * reopen keeps it (both use kv_store_env_open with the store's own config). */
Test(mvcc_store, unsafe_no_fsync_opens_nosync)
{
    unsigned flags = 0;
    cr_assert_eq(mdb_env_get_flags(kv_store_env(t.s), &flags), 0);
    cr_assert_eq(flags & MDB_NOSYNC, 0, "default store must sync its commits");
    kv_store_config cfg;
    kv_store_config_default(&cfg);
    cfg.unsafe_no_fsync = 1;
    kvt_store_close(&t);
    kvt_store_open(&t, &cfg);
    cr_assert_eq(mdb_env_get_flags(kv_store_env(t.s), &flags), 0);
    cr_assert_neq(flags & MDB_NOSYNC, 0, "unsafe_no_fsync must open MDB_NOSYNC");
    kvt_store_put(&t, "k", "v", 0);
    Mvccpb__KeyValue *kv = kvt_store_get(&t, "k", 0);
    kvt_store_expect_kv(kv, "k", "v");
    mvccpb__key_value__free_unpacked(kv, NULL);
}
