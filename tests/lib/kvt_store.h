/*
 * kvt_store: temporary MVCC stores (server/mvcc's kv_store on LMDB) for the tests that drive
 * the store and the apply path without a server: tests/mvcc, tests/apply, tests/auth (apply
 * level), tests/watch (hub). Library `kvt_store` (links kv_mvcc; kvt_lib does not).
 *
 * A kvt_store owns a temporary directory (kvt_tmpdir rules: under $TMPDIR, removed by
 * kvt_store_close unless KV_TEST_KEEP_DIRS=1) and the store opened in it. Each request helper
 * (kvt_store_put_req, _del_req, _txn, _compact, _grant, _revoke) applies one request in a
 * batch of its own at the next index (asserting storage success) and returns the unpacked
 * response (caller frees with the matching *_free_unpacked) or NULL when res->err !=
 * KV_ERR_NONE. The short forms (kvt_store_put, _del, _range, _get) assert success.
 *
 * KVT_STORE_CODE(res) and KVT_STORE_MSG(res): the gRPC status and the text a client would
 * get for a kv_result (the api edge's mapping, api/services.h kv_api_status_of, is the error
 * table's code: common/etcd_status.h); 0 and "" for success. KVT_STORE_MSG's buffer lives
 * until the end of the enclosing block.
 *
 * Criterion assertions: call from a test (or its init/fini) only. Not thread-safe: one
 * thread per kvt_store.
 */
#ifndef KVT_STORE_H
#define KVT_STORE_H

#include <criterion/criterion.h>

#include "apply/apply.h"
#include "common/etcd_status.h"
#include "internal.pb-c.h"
#include "kv.pb-c.h"
#include "mvcc/store.h"
#include "rpc.pb-c.h"

#define KVT_STORE_CODE(r) ((r).err == KV_ERR_NONE ? 0 : (int)kv_etcd_err_code((r).err))
#define KVT_STORE_MSG(r) kv_result_text(&(r), (char[KV_ETCD_ERR_TEXT_MAX]){0}, KV_ETCD_ERR_TEXT_MAX)

typedef struct kvt_store {
    char dir[256]; /* the store's directory (a kvt_tmpdir; a path that fits) */
    kv_store *s;
    kv_store_config cfg;
    uint64_t index;       /* last index applied */
    int defer_compaction; /* 1: kvt_store_apply does not run kv_store_compact_step */
} kvt_store;

/* Creates a temporary directory and opens a store in it (cfg NULL: kv_store_config_default;
 * cfg->dir is replaced by the directory). t is caller-owned (static or on the stack). */
void kvt_store_open(kvt_store *t, const kv_store_config *cfg);
/* Closes the store and opens it again on the same directory with the same config. */
void kvt_store_reopen(kvt_store *t);
/* Closes the store and removes its directory (kept with KV_TEST_KEEP_DIRS=1). */
void kvt_store_close(kvt_store *t);

/* A borrowed view of s (NULL: empty). */
ProtobufCBinaryData kvt_bin(const char *s);
/* Applies ir at the next index in a batch of its own (with the whole physical compaction step
 * in it, as the node does, unless t->defer_compaction). */
void kvt_store_apply(kvt_store *t, const Kvdpb__InternalRequest *ir, kv_result *res);

Etcdserverpb__PutResponse *kvt_store_put_req(kvt_store *t, const Etcdserverpb__PutRequest *p,
                                             kv_result *res);
/* Simple put; asserts success; returns the header revision. */
int64_t kvt_store_put(kvt_store *t, const char *k, const char *v, int64_t lease);
Etcdserverpb__DeleteRangeResponse *
kvt_store_del_req(kvt_store *t, const Etcdserverpb__DeleteRangeRequest *d, kv_result *res);
int64_t kvt_store_del(kvt_store *t, const char *k, const char *end);
Etcdserverpb__TxnResponse *kvt_store_txn(kvt_store *t, const Etcdserverpb__TxnRequest *x,
                                         kv_result *res);
Etcdserverpb__CompactionResponse *kvt_store_compact(kvt_store *t, int64_t rev, kv_result *res);
Etcdserverpb__LeaseGrantResponse *kvt_store_grant(kvt_store *t, int64_t id, int64_t ttl,
                                                  kv_result *res);
Etcdserverpb__LeaseRevokeResponse *kvt_store_revoke(kvt_store *t, int64_t id, kv_result *res);

Etcdserverpb__RangeResponse *kvt_store_range_req(kvt_store *t, const Etcdserverpb__RangeRequest *r,
                                                 kv_result *res);
/* Range of [k, end) (end NULL = single key); asserts success. */
Etcdserverpb__RangeResponse *kvt_store_range(kvt_store *t, const char *k, const char *end);
/* Single-key get at revision rev (0 = latest); NULL when missing. Caller frees. */
Mvccpb__KeyValue *kvt_store_get(kvt_store *t, const char *k, int64_t rev);
int64_t kvt_store_rev(kvt_store *t);

/* Checks kv's key and value. */
void kvt_store_expect_kv(const Mvccpb__KeyValue *kv, const char *k, const char *v);

#endif
