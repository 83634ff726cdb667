/* kvt_store: see kvt_store.h. */
#include "kvt_store.h"
#include "kvt_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void kvt_store_open(kvt_store *t, const kv_store_config *cfg)
{
    kvt_tmpdir d;
    memset(t, 0, sizeof *t);
    int rc = kvt_tmpdir_create(&d, "kv-mvcc-test");
    cr_assert_eq(rc, 0, "kvt_tmpdir_create: %d", rc);
    cr_assert_lt(strlen(d.path), sizeof t->dir, "temp dir path too long: %s", d.path);
    snprintf(t->dir, sizeof t->dir, "%s", d.path);
    if (cfg)
        t->cfg = *cfg;
    else
        kv_store_config_default(&t->cfg);
    t->cfg.dir = t->dir;
    rc = kv_store_open(&t->s, &t->cfg);
    cr_assert_eq(rc, 0, "kv_store_open: %d", rc);
}

void kvt_store_reopen(kvt_store *t)
{
    kv_store_close(t->s);
    t->s = NULL;
    int rc = kv_store_open(&t->s, &t->cfg);
    cr_assert_eq(rc, 0, "kv_store_open: %d", rc);
}

void kvt_store_close(kvt_store *t)
{
    kvt_tmpdir d;
    kv_store_close(t->s);
    t->s = NULL;
    snprintf(d.path, sizeof d.path, "%s", t->dir);
    kvt_tmpdir_destroy(&d); /* removes it unless KV_TEST_KEEP_DIRS=1 */
}

ProtobufCBinaryData kvt_bin(const char *s)
{
    ProtobufCBinaryData b = {s ? strlen(s) : 0, (uint8_t *)s};
    return b;
}

void kvt_store_apply(kvt_store *t, const Kvdpb__InternalRequest *ir, kv_result *res)
{
    size_t n = kvdpb__internal_request__get_packed_size(ir);
    uint8_t *buf = malloc(n + 1);
    kvdpb__internal_request__pack(ir, buf);
    kv_store_batch *b;
    cr_assert_eq(kv_store_batch_begin(t->s, &b), 0);
    kv_header_info h = {11, 22, 33};
    int rc = kv_store_apply(t->s, b, ++t->index, buf, n, &h, res);
    free(buf);
    cr_assert_eq(rc, 0, "kv_store_apply: %d", rc);
    /* As the node does with batches of keys: here the whole physical compaction at once. */
    if (!t->defer_compaction)
        cr_assert_geq(kv_store_compact_step(t->s, b, 0, 0, 0, NULL, NULL), 0);
    cr_assert_eq(kv_store_batch_commit(t->s, b), 0);
}

#define UNPACK_OR_NULL(type, fn)                                                                   \
    do {                                                                                           \
        if (KVT_STORE_CODE(*res) != 0)                                                             \
            return NULL;                                                                           \
        type *r = fn(NULL, res->resp_len, res->resp);                                              \
        cr_assert_not_null(r);                                                                     \
        free(res->resp);                                                                           \
        res->resp = NULL;                                                                          \
        return r;                                                                                  \
    } while (0)

Etcdserverpb__PutResponse *kvt_store_put_req(kvt_store *t, const Etcdserverpb__PutRequest *p,
                                             kv_result *res)
{
    Kvdpb__InternalRequest ir = KVDPB__INTERNAL_REQUEST__INIT;
    ir.request_case = KVDPB__INTERNAL_REQUEST__REQUEST_PUT;
    ir.put = (Etcdserverpb__PutRequest *)p;
    kvt_store_apply(t, &ir, res);
    UNPACK_OR_NULL(Etcdserverpb__PutResponse, etcdserverpb__put_response__unpack);
}

int64_t kvt_store_put(kvt_store *t, const char *k, const char *v, int64_t lease)
{
    Etcdserverpb__PutRequest p = ETCDSERVERPB__PUT_REQUEST__INIT;
    p.key = kvt_bin(k);
    p.value = kvt_bin(v);
    p.lease = lease;
    kv_result res;
    Etcdserverpb__PutResponse *r = kvt_store_put_req(t, &p, &res);
    cr_assert_not_null(r, "put %s: %d %s", k, KVT_STORE_CODE(res), KVT_STORE_MSG(res));
    int64_t rev = r->header->revision;
    cr_assert_eq(rev, res.revision);
    etcdserverpb__put_response__free_unpacked(r, NULL);
    return rev;
}

Etcdserverpb__DeleteRangeResponse *
kvt_store_del_req(kvt_store *t, const Etcdserverpb__DeleteRangeRequest *d, kv_result *res)
{
    Kvdpb__InternalRequest ir = KVDPB__INTERNAL_REQUEST__INIT;
    ir.request_case = KVDPB__INTERNAL_REQUEST__REQUEST_DELETE_RANGE;
    ir.delete_range = (Etcdserverpb__DeleteRangeRequest *)d;
    kvt_store_apply(t, &ir, res);
    UNPACK_OR_NULL(Etcdserverpb__DeleteRangeResponse, etcdserverpb__delete_range_response__unpack);
}

int64_t kvt_store_del(kvt_store *t, const char *k, const char *end)
{
    Etcdserverpb__DeleteRangeRequest d = ETCDSERVERPB__DELETE_RANGE_REQUEST__INIT;
    d.key = kvt_bin(k);
    d.range_end = kvt_bin(end);
    kv_result res;
    Etcdserverpb__DeleteRangeResponse *r = kvt_store_del_req(t, &d, &res);
    cr_assert_not_null(r, "delete %s: %d %s", k, KVT_STORE_CODE(res), KVT_STORE_MSG(res));
    int64_t n = r->deleted;
    etcdserverpb__delete_range_response__free_unpacked(r, NULL);
    return n;
}

Etcdserverpb__TxnResponse *kvt_store_txn(kvt_store *t, const Etcdserverpb__TxnRequest *x,
                                         kv_result *res)
{
    Kvdpb__InternalRequest ir = KVDPB__INTERNAL_REQUEST__INIT;
    ir.request_case = KVDPB__INTERNAL_REQUEST__REQUEST_TXN;
    ir.txn = (Etcdserverpb__TxnRequest *)x;
    kvt_store_apply(t, &ir, res);
    UNPACK_OR_NULL(Etcdserverpb__TxnResponse, etcdserverpb__txn_response__unpack);
}

Etcdserverpb__CompactionResponse *kvt_store_compact(kvt_store *t, int64_t rev, kv_result *res)
{
    Etcdserverpb__CompactionRequest c = ETCDSERVERPB__COMPACTION_REQUEST__INIT;
    c.revision = rev;
    Kvdpb__InternalRequest ir = KVDPB__INTERNAL_REQUEST__INIT;
    ir.request_case = KVDPB__INTERNAL_REQUEST__REQUEST_COMPACTION;
    ir.compaction = &c;
    kvt_store_apply(t, &ir, res);
    UNPACK_OR_NULL(Etcdserverpb__CompactionResponse, etcdserverpb__compaction_response__unpack);
}

Etcdserverpb__LeaseGrantResponse *kvt_store_grant(kvt_store *t, int64_t id, int64_t ttl,
                                                  kv_result *res)
{
    Etcdserverpb__LeaseGrantRequest g = ETCDSERVERPB__LEASE_GRANT_REQUEST__INIT;
    g.id = id;
    g.ttl = ttl;
    Kvdpb__InternalRequest ir = KVDPB__INTERNAL_REQUEST__INIT;
    ir.request_case = KVDPB__INTERNAL_REQUEST__REQUEST_LEASE_GRANT;
    ir.lease_grant = &g;
    kvt_store_apply(t, &ir, res);
    UNPACK_OR_NULL(Etcdserverpb__LeaseGrantResponse, etcdserverpb__lease_grant_response__unpack);
}

Etcdserverpb__LeaseRevokeResponse *kvt_store_revoke(kvt_store *t, int64_t id, kv_result *res)
{
    Etcdserverpb__LeaseRevokeRequest r = ETCDSERVERPB__LEASE_REVOKE_REQUEST__INIT;
    r.id = id;
    Kvdpb__InternalRequest ir = KVDPB__INTERNAL_REQUEST__INIT;
    ir.request_case = KVDPB__INTERNAL_REQUEST__REQUEST_LEASE_REVOKE;
    ir.lease_revoke = &r;
    kvt_store_apply(t, &ir, res);
    UNPACK_OR_NULL(Etcdserverpb__LeaseRevokeResponse, etcdserverpb__lease_revoke_response__unpack);
}

Etcdserverpb__RangeResponse *kvt_store_range_req(kvt_store *t, const Etcdserverpb__RangeRequest *r,
                                                 kv_result *res)
{
    size_t n = etcdserverpb__range_request__get_packed_size(r);
    uint8_t *buf = malloc(n + 1);
    etcdserverpb__range_request__pack(r, buf);
    kv_header_info h = {11, 22, 33};
    int rc = kv_store_range(t->s, buf, n, &h, res);
    free(buf);
    cr_assert_eq(rc, 0, "kv_store_range: %d", rc);
    UNPACK_OR_NULL(Etcdserverpb__RangeResponse, etcdserverpb__range_response__unpack);
}

Etcdserverpb__RangeResponse *kvt_store_range(kvt_store *t, const char *k, const char *end)
{
    Etcdserverpb__RangeRequest r = ETCDSERVERPB__RANGE_REQUEST__INIT;
    r.key = kvt_bin(k);
    r.range_end = kvt_bin(end);
    kv_result res;
    Etcdserverpb__RangeResponse *resp = kvt_store_range_req(t, &r, &res);
    cr_assert_not_null(resp, "range %s: %d %s", k, KVT_STORE_CODE(res), KVT_STORE_MSG(res));
    return resp;
}

Mvccpb__KeyValue *kvt_store_get(kvt_store *t, const char *k, int64_t rev)
{
    Etcdserverpb__RangeRequest r = ETCDSERVERPB__RANGE_REQUEST__INIT;
    r.key = kvt_bin(k);
    r.revision = rev;
    kv_result res;
    Etcdserverpb__RangeResponse *resp = kvt_store_range_req(t, &r, &res);
    cr_assert_not_null(resp, "get %s@%lld: %d %s", k, (long long)rev, KVT_STORE_CODE(res),
                       KVT_STORE_MSG(res));
    Mvccpb__KeyValue *kv = NULL;
    if (resp->n_kvs == 1) {
        size_t n = mvccpb__key_value__get_packed_size(resp->kvs[0]);
        uint8_t *buf = malloc(n + 1);
        mvccpb__key_value__pack(resp->kvs[0], buf);
        kv = mvccpb__key_value__unpack(NULL, n, buf);
        free(buf);
    }
    cr_assert_leq(resp->n_kvs, 1);
    etcdserverpb__range_response__free_unpacked(resp, NULL);
    return kv;
}

int64_t kvt_store_rev(kvt_store *t)
{
    kv_store_status st;
    cr_assert_eq(kv_store_get_status(t->s, &st), 0);
    return st.revision;
}

void kvt_store_expect_kv(const Mvccpb__KeyValue *kv, const char *k, const char *v)
{
    cr_assert_not_null(kv);
    cr_assert_eq(kv->key.len, strlen(k));
    cr_assert(memcmp(kv->key.data, k, kv->key.len) == 0, "key %.*s != %s", (int)kv->key.len,
              (char *)kv->key.data, k);
    if (v) {
        cr_assert_eq(kv->value.len, strlen(v), "value len %zu != %zu for %s", kv->value.len,
                     strlen(v), k);
        cr_assert(memcmp(kv->value.data, v, kv->value.len) == 0);
    }
}
