/*
 * helpers: test fixtures for the MVCC store tests. A th owns a temporary data directory
 * and an open store; each th_* request helper applies one request in its own batch at the
 * next index (asserting storage success) and returns the unpacked response (caller frees
 * with the matching *_free_unpacked) or NULL when res->err != KV_ERR_NONE.
 *
 * TH_CODE(res) and TH_MSG(res): the gRPC status and the text a client would get for a
 * kv_result (the api edge's mapping, api/services.h kv_api_status_of, is the error table's
 * code: common/etcd_status.h); 0 and "" for success. TH_MSG's buffer lives until the end of
 * the enclosing block.
 */
#ifndef KV_TEST_MVCC_HELPERS_H
#define KV_TEST_MVCC_HELPERS_H

#include <criterion/criterion.h>

#include "apply/apply.h"
#include "common/etcd_status.h"
#include "internal.pb-c.h"
#include "kv.pb-c.h"
#include "mvcc/store.h"
#include "rpc.pb-c.h"

#define TH_CODE(r) ((r).err == KV_ERR_NONE ? 0 : (int)kv_etcd_err_code((r).err))
#define TH_MSG(r) kv_result_text(&(r), (char[KV_ETCD_ERR_TEXT_MAX]){0}, KV_ETCD_ERR_TEXT_MAX)

typedef struct th {
    char dir[256];
    kv_store *s;
    kv_store_config cfg;
    uint64_t index;       /* last index applied */
    int defer_compaction; /* 1: th_apply does not run kv_store_compact_step */
} th;

void th_open(th *t, const kv_store_config *cfg); /* cfg NULL: defaults */
void th_reopen(th *t);
void th_close(th *t); /* closes and removes the directory */

ProtobufCBinaryData th_bin(const char *s);
/* Applies ir at the next index in a batch of its own. */
void th_apply(th *t, const Kvdpb__InternalRequest *ir, kv_result *res);

Etcdserverpb__PutResponse *th_put_req(th *t, const Etcdserverpb__PutRequest *p, kv_result *res);
/* Simple put; asserts success; returns the header revision. */
int64_t th_put(th *t, const char *k, const char *v, int64_t lease);
Etcdserverpb__DeleteRangeResponse *th_del_req(th *t, const Etcdserverpb__DeleteRangeRequest *d,
                                              kv_result *res);
int64_t th_del(th *t, const char *k, const char *end);
Etcdserverpb__TxnResponse *th_txn(th *t, const Etcdserverpb__TxnRequest *x, kv_result *res);
Etcdserverpb__CompactionResponse *th_compact(th *t, int64_t rev, kv_result *res);
Etcdserverpb__LeaseGrantResponse *th_grant(th *t, int64_t id, int64_t ttl, kv_result *res);
Etcdserverpb__LeaseRevokeResponse *th_revoke(th *t, int64_t id, kv_result *res);

Etcdserverpb__RangeResponse *th_range_req(th *t, const Etcdserverpb__RangeRequest *r,
                                          kv_result *res);
/* Range of [k, end) (end NULL = single key); asserts success. */
Etcdserverpb__RangeResponse *th_range(th *t, const char *k, const char *end);
/* Single-key get at revision rev (0 = latest); NULL when missing. Caller frees. */
Mvccpb__KeyValue *th_get(th *t, const char *k, int64_t rev);
int64_t th_rev(th *t);

/* Checks kv's key and value. */
void th_expect_kv(const Mvccpb__KeyValue *kv, const char *k, const char *v);

#endif
