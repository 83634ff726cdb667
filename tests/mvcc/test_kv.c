/* MVCC store: revisions, Put options, Range options, DeleteRange (etcd 3.4 semantics). */
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
TestSuite(mvcc_kv, .init = setup, .fini = teardown);

Test(mvcc_kv, fresh_store_is_at_revision_1)
{
    cr_assert_eq(kvt_store_rev(&t), 1);
    Etcdserverpb__RangeResponse *r = kvt_store_range(&t, "a", NULL);
    cr_assert_eq(r->n_kvs, 0);
    cr_assert_eq(r->count, 0);
    cr_assert_eq(r->header->revision, 1);
    cr_assert_eq(r->header->cluster_id, 11);
    cr_assert_eq(r->header->member_id, 22);
    cr_assert_eq(r->header->raft_term, 33);
    etcdserverpb__range_response__free_unpacked(r, NULL);
}

Test(mvcc_kv, create_mod_version_across_put_delete_reput)
{
    cr_assert_eq(kvt_store_put(&t, "k", "v1", 0), 2);
    cr_assert_eq(kvt_store_put(&t, "k", "v2", 0), 3);
    Mvccpb__KeyValue *kv = kvt_store_get(&t, "k", 0);
    kvt_store_expect_kv(kv, "k", "v2");
    cr_assert_eq(kv->create_revision, 2);
    cr_assert_eq(kv->mod_revision, 3);
    cr_assert_eq(kv->version, 2);
    mvccpb__key_value__free_unpacked(kv, NULL);

    cr_assert_eq(kvt_store_del(&t, "k", NULL), 1);
    cr_assert_eq(kvt_store_rev(&t), 4);
    cr_assert_null(kvt_store_get(&t, "k", 0));
    /* deleting nothing does not take a revision (etcd) */
    cr_assert_eq(kvt_store_del(&t, "k", NULL), 0);
    cr_assert_eq(kvt_store_rev(&t), 4);

    cr_assert_eq(kvt_store_put(&t, "k", "v3", 0), 5);
    kv = kvt_store_get(&t, "k", 0);
    cr_assert_eq(kv->create_revision, 5);
    cr_assert_eq(kv->mod_revision, 5);
    cr_assert_eq(kv->version, 1);
    mvccpb__key_value__free_unpacked(kv, NULL);

    /* history */
    kv = kvt_store_get(&t, "k", 3);
    kvt_store_expect_kv(kv, "k", "v2");
    cr_assert_eq(kv->version, 2);
    mvccpb__key_value__free_unpacked(kv, NULL);
    kv = kvt_store_get(&t, "k", 2);
    kvt_store_expect_kv(kv, "k", "v1");
    mvccpb__key_value__free_unpacked(kv, NULL);
    cr_assert_null(kvt_store_get(&t, "k", 4));
    cr_assert_null(kvt_store_get(&t, "k", 1));
}

Test(mvcc_kv, put_prev_kv_and_header)
{
    kvt_store_put(&t, "k", "old", 0);
    Etcdserverpb__PutRequest p = ETCDSERVERPB__PUT_REQUEST__INIT;
    p.key = kvt_bin("k");
    p.value = kvt_bin("new");
    p.prev_kv = 1;
    kv_result res;
    Etcdserverpb__PutResponse *r = kvt_store_put_req(&t, &p, &res);
    cr_assert_not_null(r);
    kvt_store_expect_kv(r->prev_kv, "k", "old");
    cr_assert_eq(r->prev_kv->mod_revision, 2);
    cr_assert_eq(r->header->revision, 3);
    cr_assert_eq(r->header->cluster_id, 11);
    etcdserverpb__put_response__free_unpacked(r, NULL);
    /* prev_kv on a new key: absent */
    p.key = kvt_bin("fresh");
    r = kvt_store_put_req(&t, &p, &res);
    cr_assert_null(r->prev_kv);
    etcdserverpb__put_response__free_unpacked(r, NULL);
}

Test(mvcc_kv, put_ignore_value_and_ignore_lease)
{
    kv_result res;
    Etcdserverpb__LeaseGrantResponse *g = kvt_store_grant(&t, 7, 60, &res);
    cr_assert_not_null(g);
    etcdserverpb__lease_grant_response__free_unpacked(g, NULL);
    kvt_store_put(&t, "k", "val", 7);

    Etcdserverpb__PutRequest p = ETCDSERVERPB__PUT_REQUEST__INIT;
    p.key = kvt_bin("k");
    p.ignore_value = 1;
    Etcdserverpb__PutResponse *r = kvt_store_put_req(&t, &p, &res);
    cr_assert_not_null(r, "%s", KVT_STORE_MSG(res));
    etcdserverpb__put_response__free_unpacked(r, NULL);
    Mvccpb__KeyValue *kv = kvt_store_get(&t, "k", 0);
    kvt_store_expect_kv(kv, "k", "val");
    cr_assert_eq(kv->lease, 0, "put without ignore_lease detaches");
    cr_assert_eq(kv->version, 2);
    mvccpb__key_value__free_unpacked(kv, NULL);

    kvt_store_put(&t, "k", "val", 7);
    Etcdserverpb__PutRequest q = ETCDSERVERPB__PUT_REQUEST__INIT;
    q.key = kvt_bin("k");
    q.value = kvt_bin("v2");
    q.ignore_lease = 1;
    r = kvt_store_put_req(&t, &q, &res);
    cr_assert_not_null(r);
    etcdserverpb__put_response__free_unpacked(r, NULL);
    kv = kvt_store_get(&t, "k", 0);
    kvt_store_expect_kv(kv, "k", "v2");
    cr_assert_eq(kv->lease, 7, "ignore_lease keeps the lease");
    mvccpb__key_value__free_unpacked(kv, NULL);
}

Test(mvcc_kv, put_option_errors)
{
    kv_result res;
    Etcdserverpb__PutRequest p = ETCDSERVERPB__PUT_REQUEST__INIT;
    p.value = kvt_bin("v");
    cr_assert_null(kvt_store_put_req(&t, &p, &res));
    cr_assert_eq(KVT_STORE_CODE(res), 3);
    cr_assert_str_eq(KVT_STORE_MSG(res), "etcdserver: key is not provided");

    p.key = kvt_bin("k");
    p.ignore_value = 1;
    cr_assert_null(kvt_store_put_req(&t, &p, &res));
    cr_assert_eq(KVT_STORE_CODE(res), 3);
    cr_assert_str_eq(KVT_STORE_MSG(res), "etcdserver: value is provided");

    Etcdserverpb__PutRequest q = ETCDSERVERPB__PUT_REQUEST__INIT;
    q.key = kvt_bin("k");
    q.lease = 5;
    q.ignore_lease = 1;
    cr_assert_null(kvt_store_put_req(&t, &q, &res));
    cr_assert_str_eq(KVT_STORE_MSG(res), "etcdserver: lease is provided");

    Etcdserverpb__PutRequest u = ETCDSERVERPB__PUT_REQUEST__INIT;
    u.key = kvt_bin("missing");
    u.ignore_value = 1;
    cr_assert_null(kvt_store_put_req(&t, &u, &res));
    cr_assert_eq(KVT_STORE_CODE(res), 3);
    cr_assert_str_eq(KVT_STORE_MSG(res), "etcdserver: key not found");

    Etcdserverpb__PutRequest l = ETCDSERVERPB__PUT_REQUEST__INIT;
    l.key = kvt_bin("k");
    l.lease = 12345;
    cr_assert_null(kvt_store_put_req(&t, &l, &res));
    cr_assert_eq(KVT_STORE_CODE(res), 5);
    cr_assert_str_eq(KVT_STORE_MSG(res), "etcdserver: requested lease not found");
    /* nothing of the failed requests was kept, no revision taken */
    cr_assert_eq(kvt_store_rev(&t), 1);
    cr_assert_null(kvt_store_get(&t, "k", 0));
}

static void put_abc(void)
{
    kvt_store_put(&t, "a", "1", 0);   /* 2 */
    kvt_store_put(&t, "b", "2", 0);   /* 3 */
    kvt_store_put(&t, "b/x", "3", 0); /* 4 */
    kvt_store_put(&t, "b/y", "4", 0); /* 5 */
    kvt_store_put(&t, "c", "5", 0);   /* 6 */
}

Test(mvcc_kv, range_prefix_from_key_and_all)
{
    put_abc();
    Etcdserverpb__RangeResponse *r = kvt_store_range(&t, "b/", "b0");
    cr_assert_eq(r->n_kvs, 2);
    kvt_store_expect_kv(r->kvs[0], "b/x", "3");
    kvt_store_expect_kv(r->kvs[1], "b/y", "4");
    cr_assert_eq(r->count, 2);
    cr_assert_eq(r->header->revision, 6);
    etcdserverpb__range_response__free_unpacked(r, NULL);

    char zero[2] = {0, 0};
    Etcdserverpb__RangeRequest q = ETCDSERVERPB__RANGE_REQUEST__INIT;
    q.key = kvt_bin("b/y");
    q.range_end.data = (uint8_t *)zero;
    q.range_end.len = 1;
    kv_result res;
    r = kvt_store_range_req(&t, &q, &res);
    cr_assert_eq(r->n_kvs, 2, "from key: b/y, c");
    kvt_store_expect_kv(r->kvs[0], "b/y", NULL);
    kvt_store_expect_kv(r->kvs[1], "c", NULL);
    etcdserverpb__range_response__free_unpacked(r, NULL);

    q.key.data = (uint8_t *)zero;
    q.key.len = 1;
    r = kvt_store_range_req(&t, &q, &res);
    cr_assert_eq(r->n_kvs, 5, "all keys");
    cr_assert_eq(r->count, 5);
    etcdserverpb__range_response__free_unpacked(r, NULL);
}

Test(mvcc_kv, range_limit_more_count_count_only_keys_only)
{
    put_abc();
    Etcdserverpb__RangeRequest q = ETCDSERVERPB__RANGE_REQUEST__INIT;
    q.key = kvt_bin("a");
    q.range_end = kvt_bin("z");
    q.limit = 2;
    kv_result res;
    Etcdserverpb__RangeResponse *r = kvt_store_range_req(&t, &q, &res);
    cr_assert_eq(r->n_kvs, 2);
    cr_assert(r->more);
    cr_assert_eq(r->count, 5);
    kvt_store_expect_kv(r->kvs[0], "a", "1");
    kvt_store_expect_kv(r->kvs[1], "b", "2");
    etcdserverpb__range_response__free_unpacked(r, NULL);

    q.limit = 5;
    r = kvt_store_range_req(&t, &q, &res);
    cr_assert_eq(r->n_kvs, 5);
    cr_assert(!r->more);
    etcdserverpb__range_response__free_unpacked(r, NULL);

    q.limit = 0;
    q.count_only = 1;
    r = kvt_store_range_req(&t, &q, &res);
    cr_assert_eq(r->n_kvs, 0);
    cr_assert_eq(r->count, 5);
    cr_assert(!r->more);
    etcdserverpb__range_response__free_unpacked(r, NULL);

    q.count_only = 0;
    q.keys_only = 1;
    r = kvt_store_range_req(&t, &q, &res);
    cr_assert_eq(r->n_kvs, 5);
    for (size_t i = 0; i < r->n_kvs; i++) {
        cr_assert_eq(r->kvs[i]->value.len, 0);
        cr_assert_gt(r->kvs[i]->mod_revision, 0);
    }
    etcdserverpb__range_response__free_unpacked(r, NULL);
}

static void expect_order(Etcdserverpb__RangeResponse *r, const char **keys, size_t n)
{
    cr_assert_eq(r->n_kvs, n);
    for (size_t i = 0; i < n; i++)
        kvt_store_expect_kv(r->kvs[i], keys[i], NULL);
}

Test(mvcc_kv, range_sorts)
{
    kvt_store_put(&t, "a", "z", 0); /* 2 */
    kvt_store_put(&t, "b", "y", 0); /* 3 */
    kvt_store_put(&t, "c", "x", 0); /* 4 */
    kvt_store_put(&t, "a", "w", 0); /* 5: a version 2, mod 5 */
    Etcdserverpb__RangeRequest q = ETCDSERVERPB__RANGE_REQUEST__INIT;
    q.key = kvt_bin("a");
    q.range_end = kvt_bin("z");
    kv_result res;

    q.sort_order = ETCDSERVERPB__RANGE_REQUEST__SORT_ORDER__DESCEND;
    q.sort_target = ETCDSERVERPB__RANGE_REQUEST__SORT_TARGET__KEY;
    Etcdserverpb__RangeResponse *r = kvt_store_range_req(&t, &q, &res);
    expect_order(r, (const char *[]){"c", "b", "a"}, 3);
    etcdserverpb__range_response__free_unpacked(r, NULL);

    q.sort_order = ETCDSERVERPB__RANGE_REQUEST__SORT_ORDER__ASCEND;
    q.sort_target = ETCDSERVERPB__RANGE_REQUEST__SORT_TARGET__VALUE;
    r = kvt_store_range_req(&t, &q, &res);
    expect_order(r, (const char *[]){"a", "c", "b"}, 3); /* w x y */
    etcdserverpb__range_response__free_unpacked(r, NULL);

    q.sort_order = ETCDSERVERPB__RANGE_REQUEST__SORT_ORDER__DESCEND;
    q.sort_target = ETCDSERVERPB__RANGE_REQUEST__SORT_TARGET__MOD;
    r = kvt_store_range_req(&t, &q, &res);
    expect_order(r, (const char *[]){"a", "c", "b"}, 3); /* 5 4 3 */
    etcdserverpb__range_response__free_unpacked(r, NULL);

    q.sort_order = ETCDSERVERPB__RANGE_REQUEST__SORT_ORDER__ASCEND;
    q.sort_target = ETCDSERVERPB__RANGE_REQUEST__SORT_TARGET__CREATE;
    r = kvt_store_range_req(&t, &q, &res);
    expect_order(r, (const char *[]){"a", "b", "c"}, 3); /* 2 3 4 */
    etcdserverpb__range_response__free_unpacked(r, NULL);

    q.sort_order = ETCDSERVERPB__RANGE_REQUEST__SORT_ORDER__DESCEND;
    q.sort_target = ETCDSERVERPB__RANGE_REQUEST__SORT_TARGET__VERSION;
    q.limit = 1;
    r = kvt_store_range_req(&t, &q, &res);
    expect_order(r, (const char *[]){"a"}, 1); /* sorted over all, then truncated */
    cr_assert(r->more);
    cr_assert_eq(r->count, 3);
    etcdserverpb__range_response__free_unpacked(r, NULL);

    /* sort target != KEY with order NONE sorts ascending (etcd 3.4) */
    q.limit = 0;
    q.sort_order = ETCDSERVERPB__RANGE_REQUEST__SORT_ORDER__NONE;
    q.sort_target = ETCDSERVERPB__RANGE_REQUEST__SORT_TARGET__MOD;
    r = kvt_store_range_req(&t, &q, &res);
    expect_order(r, (const char *[]){"b", "c", "a"}, 3);
    etcdserverpb__range_response__free_unpacked(r, NULL);

    q.sort_order = 7;
    cr_assert_null(kvt_store_range_req(&t, &q, &res));
    cr_assert_eq(KVT_STORE_CODE(res), 3);
    cr_assert_str_eq(KVT_STORE_MSG(res), "etcdserver: invalid sort option");
}

Test(mvcc_kv, range_historical_and_revision_errors)
{
    put_abc();
    kvt_store_del(&t, "b", NULL); /* 7 */
    Etcdserverpb__RangeRequest q = ETCDSERVERPB__RANGE_REQUEST__INIT;
    q.key = kvt_bin("a");
    q.range_end = kvt_bin("z");
    q.revision = 3;
    kv_result res;
    Etcdserverpb__RangeResponse *r = kvt_store_range_req(&t, &q, &res);
    expect_order(r, (const char *[]){"a", "b"}, 2);
    cr_assert_eq(r->count, 2);
    cr_assert_eq(r->header->revision, 7, "header revision is the current revision");
    etcdserverpb__range_response__free_unpacked(r, NULL);

    q.revision = 0;
    r = kvt_store_range_req(&t, &q, &res);
    expect_order(r, (const char *[]){"a", "b/x", "b/y", "c"}, 4);
    etcdserverpb__range_response__free_unpacked(r, NULL);

    q.revision = 8;
    cr_assert_null(kvt_store_range_req(&t, &q, &res));
    cr_assert_eq(KVT_STORE_CODE(res), 11);
    cr_assert_str_eq(KVT_STORE_MSG(res),
                     "etcdserver: mvcc: required revision is a future revision");
}

Test(mvcc_kv, range_mod_and_create_filters)
{
    put_abc();                      /* a2 b3 b/x4 b/y5 c6 */
    kvt_store_put(&t, "a", "1", 0); /* a: create 2, mod 7 */
    Etcdserverpb__RangeRequest q = ETCDSERVERPB__RANGE_REQUEST__INIT;
    q.key = kvt_bin("a");
    q.range_end = kvt_bin("z");
    kv_result res;
    q.min_mod_revision = 4;
    q.max_mod_revision = 6;
    Etcdserverpb__RangeResponse *r = kvt_store_range_req(&t, &q, &res);
    expect_order(r, (const char *[]){"b/x", "b/y", "c"}, 3);
    cr_assert_eq(r->count, 5, "count is unaffected by filters");
    etcdserverpb__range_response__free_unpacked(r, NULL);

    Etcdserverpb__RangeRequest c = ETCDSERVERPB__RANGE_REQUEST__INIT;
    c.key = kvt_bin("a");
    c.range_end = kvt_bin("z");
    c.max_create_revision = 3;
    r = kvt_store_range_req(&t, &c, &res);
    expect_order(r, (const char *[]){"a", "b"}, 2);
    etcdserverpb__range_response__free_unpacked(r, NULL);
    c.max_create_revision = 0;
    c.min_create_revision = 5;
    c.limit = 1;
    r = kvt_store_range_req(&t, &c, &res);
    expect_order(r, (const char *[]){"b/y"}, 1);
    cr_assert(r->more);
    etcdserverpb__range_response__free_unpacked(r, NULL);
}

Test(mvcc_kv, range_empty_key_is_rejected)
{
    Etcdserverpb__RangeRequest q = ETCDSERVERPB__RANGE_REQUEST__INIT;
    kv_result res;
    cr_assert_null(kvt_store_range_req(&t, &q, &res));
    cr_assert_eq(KVT_STORE_CODE(res), 3);
    cr_assert_str_eq(KVT_STORE_MSG(res), "etcdserver: key is not provided");
}

Test(mvcc_kv, delete_range_prev_kv_and_tombstones)
{
    put_abc();
    Etcdserverpb__DeleteRangeRequest d = ETCDSERVERPB__DELETE_RANGE_REQUEST__INIT;
    d.key = kvt_bin("b");
    d.range_end = kvt_bin("c");
    d.prev_kv = 1;
    kv_result res;
    Etcdserverpb__DeleteRangeResponse *r = kvt_store_del_req(&t, &d, &res);
    cr_assert_not_null(r);
    cr_assert_eq(r->deleted, 3);
    cr_assert_eq(r->n_prev_kvs, 3);
    kvt_store_expect_kv(r->prev_kvs[0], "b", "2");
    kvt_store_expect_kv(r->prev_kvs[1], "b/x", "3");
    kvt_store_expect_kv(r->prev_kvs[2], "b/y", "4");
    cr_assert_eq(r->header->revision, 7, "one revision for the whole delete");
    etcdserverpb__delete_range_response__free_unpacked(r, NULL);

    Etcdserverpb__RangeResponse *rr = kvt_store_range(&t, "a", "z");
    expect_order(rr, (const char *[]){"a", "c"}, 2);
    etcdserverpb__range_response__free_unpacked(rr, NULL);
    kv_store_status st;
    cr_assert_eq(kv_store_get_status(t.s, &st), 0);
    cr_assert_eq(st.keys, 2);
    cr_assert_eq(st.revision, 7);

    /* still readable before the delete */
    Mvccpb__KeyValue *kv = kvt_store_get(&t, "b/x", 6);
    kvt_store_expect_kv(kv, "b/x", "3");
    mvccpb__key_value__free_unpacked(kv, NULL);

    Etcdserverpb__DeleteRangeRequest e = ETCDSERVERPB__DELETE_RANGE_REQUEST__INIT;
    cr_assert_null(kvt_store_del_req(&t, &e, &res));
    cr_assert_eq(KVT_STORE_CODE(res), 3);
    cr_assert_str_eq(KVT_STORE_MSG(res), "etcdserver: key is not provided");
}

Test(mvcc_kv, delete_from_key)
{
    put_abc();
    char zero[1] = {0};
    Etcdserverpb__DeleteRangeRequest d = ETCDSERVERPB__DELETE_RANGE_REQUEST__INIT;
    d.key = kvt_bin("b/");
    d.range_end.data = (uint8_t *)zero;
    d.range_end.len = 1;
    kv_result res;
    Etcdserverpb__DeleteRangeResponse *r = kvt_store_del_req(&t, &d, &res);
    cr_assert_eq(r->deleted, 3);
    etcdserverpb__delete_range_response__free_unpacked(r, NULL);
    Etcdserverpb__RangeResponse *rr = kvt_store_range(&t, "a", "z");
    expect_order(rr, (const char *[]){"a", "b"}, 2);
    etcdserverpb__range_response__free_unpacked(rr, NULL);
}

Test(mvcc_kv, whole_keyspace_count_and_limit)
{
    put_abc();                    /* 5 keys, revision 6 */
    kvt_store_del(&t, "b", NULL); /* 7: 4 live keys */
    char zero[1] = {0};
    Etcdserverpb__RangeRequest q = ETCDSERVERPB__RANGE_REQUEST__INIT;
    q.key.data = (uint8_t *)zero;
    q.key.len = 1;
    q.range_end = q.key;
    q.count_only = 1;
    kv_result res;
    Etcdserverpb__RangeResponse *r = kvt_store_range_req(&t, &q, &res);
    cr_assert_eq(r->count, 4);
    cr_assert_eq(r->n_kvs, 0);
    etcdserverpb__range_response__free_unpacked(r, NULL);

    q.count_only = 0;
    q.limit = 2;
    r = kvt_store_range_req(&t, &q, &res);
    expect_order(r, (const char *[]){"a", "b/x"}, 2);
    cr_assert(r->more);
    cr_assert_eq(r->count, 4);
    etcdserverpb__range_response__free_unpacked(r, NULL);

    /* historical: walked, at that revision */
    q.limit = 0;
    q.count_only = 1;
    q.revision = 4;
    r = kvt_store_range_req(&t, &q, &res);
    cr_assert_eq(r->count, 3);
    etcdserverpb__range_response__free_unpacked(r, NULL);

    /* same answer as a walk over an equivalent range */
    Etcdserverpb__RangeRequest w = ETCDSERVERPB__RANGE_REQUEST__INIT;
    w.key = kvt_bin("\x01");
    w.range_end = q.range_end;
    w.count_only = 1;
    r = kvt_store_range_req(&t, &w, &res);
    cr_assert_eq(r->count, 4);
    etcdserverpb__range_response__free_unpacked(r, NULL);
}

/* Many revisions of one key move its kidx dups into an LMDB sub-database: historical
 * lookups (GET_BOTH_RANGE + PREV_DUP) must still find the right revision. */
Test(mvcc_kv, many_revisions_of_one_key)
{
    kv_store_batch *b;
    kv_result res;
    char v[32];
    cr_assert_eq(kv_store_batch_begin(t.s, &b), 0);
    for (int i = 0; i < 3000; i++) {
        snprintf(v, sizeof v, "v%d", i);
        Etcdserverpb__PutRequest p = ETCDSERVERPB__PUT_REQUEST__INIT;
        p.key = kvt_bin(i % 2 ? "hot" : "other");
        p.value = kvt_bin(v);
        Kvdpb__InternalRequest ir = KVDPB__INTERNAL_REQUEST__INIT;
        ir.request_case = KVDPB__INTERNAL_REQUEST__REQUEST_PUT;
        ir.put = &p;
        uint8_t buf[64];
        size_t n = kvdpb__internal_request__pack(&ir, buf);
        cr_assert_eq(kv_store_apply(t.s, b, ++t.index, buf, n, NULL, &res), 0);
        free(res.resp);
    }
    cr_assert_eq(kv_store_batch_commit(t.s, b), 0);
    /* put i has revision i + 2; "hot" holds odd i */
    for (int rev = 3; rev <= 3001; rev += 97) {
        int i = rev - 2;
        int want = i % 2 ? i : i - 1;
        Mvccpb__KeyValue *kv = kvt_store_get(&t, "hot", rev);
        snprintf(v, sizeof v, "v%d", want);
        kvt_store_expect_kv(kv, "hot", v);
        cr_assert_eq(kv->mod_revision, want + 2);
        cr_assert_eq(kv->version, (want + 1) / 2);
        cr_assert_eq(kv->create_revision, 3);
        mvccpb__key_value__free_unpacked(kv, NULL);
    }
    cr_assert_null(kvt_store_get(&t, "hot", 2));
    Etcdserverpb__CompactionResponse *c = kvt_store_compact(&t, 2500, &res);
    cr_assert_not_null(c, "%s", KVT_STORE_MSG(res));
    etcdserverpb__compaction_response__free_unpacked(c, NULL);
    Mvccpb__KeyValue *kv = kvt_store_get(&t, "hot", 2500);
    kvt_store_expect_kv(kv, "hot", "v2497");
    mvccpb__key_value__free_unpacked(kv, NULL);
    kv = kvt_store_get(&t, "hot", 2600);
    kvt_store_expect_kv(kv, "hot", "v2597");
    mvccpb__key_value__free_unpacked(kv, NULL);
}
