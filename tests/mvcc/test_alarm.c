/* MVCC store: the alarm table (etcd's Maintenance.Alarm applied in order), the NOSPACE
 * (capped) and CORRUPT appliers, and Defragment. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvt_store.h"

static kvt_store t;
static void setup(void)
{
    kvt_store_open(&t, NULL);
}
static void teardown(void)
{
    kvt_store_close(&t);
}
TestSuite(mvcc_alarm, .init = setup, .fini = teardown);

static Etcdserverpb__AlarmResponse *alarm(int action, uint64_t member, int type, kv_result *res)
{
    Etcdserverpb__AlarmRequest a = ETCDSERVERPB__ALARM_REQUEST__INIT;
    a.action = (Etcdserverpb__AlarmRequest__AlarmAction)action;
    a.memberid = member;
    a.alarm = (Etcdserverpb__AlarmType)type;
    Kvdpb__InternalRequest ir = KVDPB__INTERNAL_REQUEST__INIT;
    ir.request_case = KVDPB__INTERNAL_REQUEST__REQUEST_ALARM;
    ir.alarm = &a;
    kvt_store_apply(&t, &ir, res);
    if (KVT_STORE_CODE(*res) != 0)
        return NULL;
    Etcdserverpb__AlarmResponse *r =
        etcdserverpb__alarm_response__unpack(NULL, res->resp_len, res->resp);
    cr_assert_not_null(r);
    free(res->resp);
    res->resp = NULL;
    return r;
}

enum { GET = 0, ACTIVATE = 1, DEACTIVATE = 2 };

static size_t count_alarms(int type)
{
    kv_result res;
    Etcdserverpb__AlarmResponse *r = alarm(GET, 0, type, &res);
    cr_assert_not_null(r, "%s", KVT_STORE_MSG(res));
    size_t n = r->n_alarms;
    etcdserverpb__alarm_response__free_unpacked(r, NULL);
    return n;
}

Test(mvcc_alarm, activate_get_deactivate_persisted)
{
    kv_result res;
    cr_assert_eq(count_alarms(KV_ALARM_NONE), 0);
    Etcdserverpb__AlarmResponse *r = alarm(ACTIVATE, 7, KV_ALARM_NOSPACE, &res);
    cr_assert_not_null(r, "%s", KVT_STORE_MSG(res));
    cr_assert_eq(r->n_alarms, 1);
    cr_assert_eq(r->alarms[0]->memberid, 7);
    cr_assert_eq(r->alarms[0]->alarm, KV_ALARM_NOSPACE);
    cr_assert_not_null(r->header);
    etcdserverpb__alarm_response__free_unpacked(r, NULL);
    cr_assert_eq(kv_store_alarms(t.s), 1u << KV_ALARM_NOSPACE);

    kvt_store_reopen(&t); /* persisted in LMDB */
    cr_assert_eq(kv_store_alarms(t.s), 1u << KV_ALARM_NOSPACE);
    cr_assert_eq(count_alarms(KV_ALARM_NONE), 1);
    cr_assert_eq(count_alarms(KV_ALARM_NOSPACE), 1);
    cr_assert_eq(count_alarms(KV_ALARM_CORRUPT), 0);

    /* activating again answers the existing alarm; NONE activates nothing */
    r = alarm(ACTIVATE, 7, KV_ALARM_NOSPACE, &res);
    cr_assert_eq(r->n_alarms, 1);
    etcdserverpb__alarm_response__free_unpacked(r, NULL);
    r = alarm(ACTIVATE, 7, KV_ALARM_NONE, &res);
    cr_assert_eq(r->n_alarms, 0);
    etcdserverpb__alarm_response__free_unpacked(r, NULL);
    cr_assert_eq(count_alarms(KV_ALARM_NONE), 1);
    cr_assert_null(alarm(ACTIVATE, 7, 9, &res));
    cr_assert_eq(KVT_STORE_CODE(res), KV_GRPC_INVALID_ARGUMENT);

    /* a second member's alarm of the same type keeps the type active */
    r = alarm(ACTIVATE, 8, KV_ALARM_NOSPACE, &res);
    etcdserverpb__alarm_response__free_unpacked(r, NULL);
    r = alarm(DEACTIVATE, 7, KV_ALARM_NOSPACE, &res);
    cr_assert_eq(r->n_alarms, 1);
    cr_assert_eq(r->alarms[0]->memberid, 7);
    etcdserverpb__alarm_response__free_unpacked(r, NULL);
    cr_assert_eq(kv_store_alarms(t.s), 1u << KV_ALARM_NOSPACE);
    r = alarm(DEACTIVATE, 7, KV_ALARM_NOSPACE, &res); /* not active: empty answer */
    cr_assert_eq(r->n_alarms, 0);
    etcdserverpb__alarm_response__free_unpacked(r, NULL);
    r = alarm(DEACTIVATE, 8, KV_ALARM_NOSPACE, &res);
    etcdserverpb__alarm_response__free_unpacked(r, NULL);
    cr_assert_eq(kv_store_alarms(t.s), 0u);
    kvt_store_reopen(&t);
    cr_assert_eq(kv_store_alarms(t.s), 0u);
    cr_assert_eq(count_alarms(KV_ALARM_NONE), 0);
}

Test(mvcc_alarm, alarm_table_is_bounded)
{
    kv_result res;
    for (uint64_t m = 1; m <= 64; m++) {
        Etcdserverpb__AlarmResponse *r = alarm(ACTIVATE, m, KV_ALARM_NOSPACE, &res);
        cr_assert_not_null(r, "%s", KVT_STORE_MSG(res));
        etcdserverpb__alarm_response__free_unpacked(r, NULL);
    }
    cr_assert_null(alarm(ACTIVATE, 65, KV_ALARM_NOSPACE, &res));
    cr_assert_eq(KVT_STORE_CODE(res), KV_GRPC_RESOURCE_EXHAUSTED);
    /* the error is a value with a detail; the text clients see is unchanged */
    cr_assert_eq(res.err, KV_ERR_TOO_MANY_ALARMS);
    cr_assert_str_eq(KVT_STORE_MSG(res), "kvd: too many alarms (limit 64)");
    cr_assert_eq(count_alarms(KV_ALARM_NONE), 64);
}

static const char *NOSPACE = "etcdserver: mvcc: database space exceeded";

Test(mvcc_alarm, nospace_refuses_growth_only)
{
    kv_result res;
    kvt_store_put(&t, "a", "1", 0);
    kvt_store_put(&t, "b", "1", 0);
    Etcdserverpb__LeaseGrantResponse *g = kvt_store_grant(&t, 5, 100, &res);
    cr_assert_not_null(g);
    etcdserverpb__lease_grant_response__free_unpacked(g, NULL);
    Etcdserverpb__AlarmResponse *r = alarm(ACTIVATE, 1, KV_ALARM_NOSPACE, &res);
    etcdserverpb__alarm_response__free_unpacked(r, NULL);

    Etcdserverpb__PutRequest p = ETCDSERVERPB__PUT_REQUEST__INIT;
    p.key = kvt_bin("c");
    p.value = kvt_bin("1");
    cr_assert_null(kvt_store_put_req(&t, &p, &res));
    cr_assert_eq(KVT_STORE_CODE(res), KV_GRPC_RESOURCE_EXHAUSTED);
    cr_assert_str_eq(KVT_STORE_MSG(res), NOSPACE);
    cr_assert_null(kvt_store_grant(&t, 6, 100, &res));
    cr_assert_eq(KVT_STORE_CODE(res), KV_GRPC_RESOURCE_EXHAUSTED);
    cr_assert_str_eq(KVT_STORE_MSG(res), NOSPACE);
    /* a txn with a put is refused, a read-only txn is not (etcd's capped applier) */
    Etcdserverpb__RequestOp op = ETCDSERVERPB__REQUEST_OP__INIT;
    op.request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT;
    op.request_put = &p;
    Etcdserverpb__RequestOp *ops[1] = {&op};
    Etcdserverpb__TxnRequest x = ETCDSERVERPB__TXN_REQUEST__INIT;
    x.n_success = 1;
    x.success = ops;
    cr_assert_null(kvt_store_txn(&t, &x, &res));
    cr_assert_eq(KVT_STORE_CODE(res), KV_GRPC_RESOURCE_EXHAUSTED);
    Etcdserverpb__RangeRequest q = ETCDSERVERPB__RANGE_REQUEST__INIT;
    q.key = kvt_bin("a");
    op.request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_RANGE;
    op.request_range = &q;
    Etcdserverpb__TxnResponse *tr = kvt_store_txn(&t, &x, &res);
    cr_assert_not_null(tr, "%s", KVT_STORE_MSG(res));
    etcdserverpb__txn_response__free_unpacked(tr, NULL);
    /* reads, deletes, compaction and lease revokes go on */
    Mvccpb__KeyValue *kv = kvt_store_get(&t, "a", 0);
    cr_assert_not_null(kv);
    mvccpb__key_value__free_unpacked(kv, NULL);
    int64_t rev = kvt_store_del(&t, "a", NULL);
    Etcdserverpb__CompactionResponse *c = kvt_store_compact(&t, rev, &res);
    cr_assert_not_null(c, "%s", KVT_STORE_MSG(res));
    etcdserverpb__compaction_response__free_unpacked(c, NULL);
    Etcdserverpb__LeaseRevokeRequest rv = ETCDSERVERPB__LEASE_REVOKE_REQUEST__INIT;
    rv.id = 5;
    Kvdpb__InternalRequest ir = KVDPB__INTERNAL_REQUEST__INIT;
    ir.request_case = KVDPB__INTERNAL_REQUEST__REQUEST_LEASE_REVOKE;
    ir.lease_revoke = &rv;
    kvt_store_apply(&t, &ir, &res);
    cr_assert_eq(KVT_STORE_CODE(res), 0, "%s", KVT_STORE_MSG(res));
    free(res.resp);
    /* disarm: puts work again */
    r = alarm(DEACTIVATE, 1, KV_ALARM_NOSPACE, &res);
    etcdserverpb__alarm_response__free_unpacked(r, NULL);
    kvt_store_put(&t, "c", "1", 0);
}

Test(mvcc_alarm, corrupt_refuses_reads_and_writes)
{
    kv_result res;
    kvt_store_put(&t, "a", "1", 0);
    Etcdserverpb__AlarmResponse *r = alarm(ACTIVATE, 1, KV_ALARM_CORRUPT, &res);
    etcdserverpb__alarm_response__free_unpacked(r, NULL);
    Etcdserverpb__PutRequest p = ETCDSERVERPB__PUT_REQUEST__INIT;
    p.key = kvt_bin("c");
    cr_assert_null(kvt_store_put_req(&t, &p, &res));
    cr_assert_eq(KVT_STORE_CODE(res), KV_GRPC_DATA_LOSS);
    cr_assert_str_eq(KVT_STORE_MSG(res), "etcdserver: corrupt cluster");
    Etcdserverpb__DeleteRangeRequest d = ETCDSERVERPB__DELETE_RANGE_REQUEST__INIT;
    d.key = kvt_bin("a");
    cr_assert_null(kvt_store_del_req(&t, &d, &res));
    cr_assert_eq(KVT_STORE_CODE(res), KV_GRPC_DATA_LOSS);
    cr_assert_null(kvt_store_compact(&t, 1, &res));
    cr_assert_eq(KVT_STORE_CODE(res), KV_GRPC_DATA_LOSS);
    Etcdserverpb__RangeRequest q = ETCDSERVERPB__RANGE_REQUEST__INIT;
    q.key = kvt_bin("a");
    uint8_t buf[64];
    size_t n = etcdserverpb__range_request__pack(&q, buf);
    cr_assert_eq(kv_store_range(t.s, buf, n, NULL, &res), 0);
    cr_assert_eq(KVT_STORE_CODE(res), KV_GRPC_DATA_LOSS);
    cr_assert_str_eq(KVT_STORE_MSG(res), "etcdserver: corrupt cluster");
    cr_assert_eq(count_alarms(KV_ALARM_CORRUPT), 1, "alarms are still served");
    r = alarm(DEACTIVATE, 1, KV_ALARM_CORRUPT, &res);
    etcdserverpb__alarm_response__free_unpacked(r, NULL);
    Mvccpb__KeyValue *kv = kvt_store_get(&t, "a", 0);
    kvt_store_expect_kv(kv, "a", "1");
    mvccpb__key_value__free_unpacked(kv, NULL);
}

Test(mvcc_alarm, defragment_shrinks_the_file_and_keeps_the_data)
{
    char *v = malloc(8001);
    memset(v, 'v', 8000);
    v[8000] = 0;
    char k[32];
    for (int round = 0; round < 4; round++)
        for (int i = 0; i < 200; i++) {
            snprintf(k, sizeof k, "key%03d", i);
            v[0] = (char)('a' + round);
            kvt_store_put(&t, k, v, 0);
        }
    int64_t rev = kvt_store_rev(&t);
    kv_result res;
    Etcdserverpb__CompactionResponse *c = kvt_store_compact(&t, rev, &res);
    cr_assert_not_null(c, "%s", KVT_STORE_MSG(res));
    etcdserverpb__compaction_response__free_unpacked(c, NULL);
    int64_t before = kv_store_db_size(t.s);
    kv_store_status st0;
    cr_assert_eq(kv_store_get_status(t.s, &st0), 0);

    kv_store_defrag_stats ds;
    cr_assert_eq(kv_store_defrag_copy(t.s, &ds), 0);
    cr_assert_eq(kv_store_defrag_swap(t.s, &ds), 0);
    int64_t after = kv_store_db_size(t.s);
    cr_assert_eq(ds.file_before, before, "%lld %lld", (long long)ds.file_before, (long long)before);
    cr_assert(after < before / 2, "db size %lld -> %lld", (long long)before, (long long)after);
    cr_assert_eq(ds.file_after, after);
    kv_store_status st1;
    cr_assert_eq(kv_store_get_status(t.s, &st1), 0);
    cr_assert_eq(st1.revision, st0.revision);
    cr_assert_eq(st1.applied_index, st0.applied_index);
    cr_assert_eq(st1.keys, 200);
    for (int i = 0; i < 200; i += 37) {
        snprintf(k, sizeof k, "key%03d", i);
        Mvccpb__KeyValue *kv = kvt_store_get(&t, k, 0);
        cr_assert_not_null(kv);
        cr_assert_eq(kv->value.len, 8000);
        cr_assert_eq(kv->value.data[0], 'd');
        mvccpb__key_value__free_unpacked(kv, NULL);
    }
    kvt_store_put(&t, "after", "1", 0); /* writes go to the new file */
    kvt_store_reopen(&t);
    Mvccpb__KeyValue *kv = kvt_store_get(&t, "after", 0);
    kvt_store_expect_kv(kv, "after", "1");
    mvccpb__key_value__free_unpacked(kv, NULL);
    free(v);
}

Test(mvcc_alarm, one_batch_cannot_eat_the_headroom)
{
    kv_store_config cfg;
    kv_store_config_default(&cfg);
    cfg.quota_bytes = 1 << 20; /* map: 1 MiB + 16 MiB headroom */
    kvt_store_close(&t);
    kvt_store_open(&t, &cfg);
    char *big = malloc(100001);
    memset(big, 'x', 100000);
    big[100000] = 0;
    kv_store_batch *b;
    kv_result res;
    cr_assert_eq(kv_store_batch_begin(t.s, &b), 0);
    int i, refused = 0;
    for (i = 1; i <= 170 && !refused; i++) { /* 17 MB: would fill the whole map */
        char k[32];
        snprintf(k, sizeof k, "big%03d", i);
        Etcdserverpb__PutRequest p = ETCDSERVERPB__PUT_REQUEST__INIT;
        p.key = kvt_bin(k);
        p.value = kvt_bin(big);
        Kvdpb__InternalRequest ir = KVDPB__INTERNAL_REQUEST__INIT;
        ir.request_case = KVDPB__INTERNAL_REQUEST__REQUEST_PUT;
        ir.put = &p;
        size_t n = kvdpb__internal_request__get_packed_size(&ir);
        uint8_t *buf = malloc(n);
        kvdpb__internal_request__pack(&ir, buf);
        cr_assert_eq(kv_store_apply(t.s, b, (uint64_t)i, buf, n, NULL, &res), 0);
        free(buf);
        free(res.resp);
        if (KVT_STORE_CODE(res) != 0) {
            cr_assert_eq(KVT_STORE_CODE(res), KV_GRPC_RESOURCE_EXHAUSTED);
            cr_assert_str_eq(KVT_STORE_MSG(res), NOSPACE);
            refused = 1;
        }
    }
    cr_assert(refused, "growth past quota + half the headroom is refused");
    cr_assert_lt(i, 60, "refused at put %d: before the map is full (~170)", i);
    cr_assert_eq(kv_store_batch_commit(t.s, b), 0);
    t.index = (uint64_t)i;
    cr_assert_eq(kv_store_take_alarms(t.s), 1u << KV_ALARM_NOSPACE);
    /* the remaining headroom takes a delete of everything and a compaction */
    int64_t rev = kvt_store_del(&t, "big", "bih");
    kv_result cres;
    Etcdserverpb__CompactionResponse *c = kvt_store_compact(&t, rev, &cres);
    cr_assert_not_null(c, "%s", KVT_STORE_MSG(cres));
    etcdserverpb__compaction_response__free_unpacked(c, NULL);
    free(big);
}
