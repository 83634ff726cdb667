/*
 * service_kv: etcdserverpb.KV.
 *
 * Writes (Put, DeleteRange, Txn, Compact) travel to the ordered apply path as InternalRequest
 * records and are answered after their batch is durable. Range is answered from the store in
 * a read transaction: on a single member every acknowledged write is already applied, so a
 * local read is linearizable. (With raft, non-serializable reads will wait for ReadIndex.)
 */
#include "api/internal_req.h"
#include "api/services.h"
#include "server.h"

#include <stdlib.h>

static void on_range(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    kv_server *s = kv_grpc_call_app(call);
    kv_result res = {0};
    int rc = kv_store_range(s->store, msg, len, kv_node_header(s->node), &res);
    if (rc < 0)
        kv_reply_error(call, 13, "etcdserver: request failed: storage error");
    else
        kv_reply_result(call, &res);
    free(res.resp);
}

static void on_put(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    kv_propose_unary(call, KV_IREQ_PUT, msg, len);
}

static void on_delete_range(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    kv_propose_unary(call, KV_IREQ_DELETE_RANGE, msg, len);
}

static void on_txn(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    kv_server *s = kv_grpc_call_app(call);
    int code;
    const char *emsg;
    /* nesting and op counts are bounded before anything unpacks the request (issue 8, D1) */
    if (kv_internal_check_txn(msg, len, s->cfg->max_txn_ops, &code, &emsg)) {
        kv_reply_error(call, code, emsg);
        return;
    }
    kv_propose_unary(call, KV_IREQ_TXN, msg, len);
}

static void on_compact(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    kv_propose_unary(call, KV_IREQ_COMPACTION, msg, len);
}

const kv_grpc_method kv_service_kv[] = {
    {"/etcdserverpb.KV/Range", 0, on_range, NULL, NULL},
    {"/etcdserverpb.KV/Put", 0, on_put, NULL, kv_propose_cancel},
    {"/etcdserverpb.KV/DeleteRange", 0, on_delete_range, NULL, kv_propose_cancel},
    {"/etcdserverpb.KV/Txn", 0, on_txn, NULL, kv_propose_cancel},
    {"/etcdserverpb.KV/Compact", 0, on_compact, NULL, kv_propose_cancel},
};
const size_t kv_service_kv_len = sizeof(kv_service_kv) / sizeof(kv_service_kv[0]);
