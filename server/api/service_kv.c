/*
 * service_kv: etcdserverpb.KV.
 *
 * Writes (Put, DeleteRange, Txn, Compact) travel to the ordered apply path as InternalRequest
 * records and are answered after their batch is durable. A Range over a key range is answered
 * from the store in a read transaction on a read worker thread (api/read_req.h), never on the
 * loop: its cost grows with the data (sorts, counts, unlimited ranges). A single-key Range is
 * O(log n) and answered inline (a worker round trip would cost more than the read). On a
 * single member every acknowledged write is already applied, so a local read is
 * linearizable. In a cluster a Range that is not serializable first passes a ReadIndex barrier
 * (node.h kv_node_read_index): concurrent reads share one heartbeat round, then wait until this
 * member applied the leader's commit index. Serializable reads are served locally at once.
 */
#include "apply/internal_req.h"
#include "api/auth_srv.h"
#include "api/read_req.h"
#include "api/require_leader.h"
#include "api/services.h"
#include "api/api.h"

#include "rpc.pb-c.h"

#include <errno.h>
#include <stdlib.h>

/* A Range of one key (range_end empty) costs O(log n) whatever the data size: one index
 * probe and at most one record. Found by scanning the wire bytes for field 2 (range_end),
 * without unpacking. Anything else, or bytes that do not parse, goes to the pool. */
/* 1 when the Range names one key; *serializable = field 7 (serializable) set. */
static int range_scan(const uint8_t *p, size_t len, int *serializable)
{
    int point = 1;
    *serializable = 0;
    const uint8_t *end = p + len;
    while (p < end) {
        uint64_t tag = 0, v = 0;
        int shift = 0;
        do {
            if (p >= end || shift > 63)
                return 0;
            tag |= (uint64_t)(*p & 0x7f) << shift;
            shift += 7;
        } while (*p++ & 0x80);
        switch (tag & 7) {
        case 0:
            shift = 0;
            do {
                if (p >= end || shift > 63)
                    return 0;
                v |= (uint64_t)(*p & 0x7f) << shift;
                shift += 7;
            } while (*p++ & 0x80);
            if ((tag >> 3) == 7) /* the last occurrence wins, as protobuf decodes it */
                *serializable = v != 0;
            break;
        case 1:
            if ((size_t)(end - p) < 8)
                return 0;
            p += 8;
            break;
        case 5:
            if ((size_t)(end - p) < 4)
                return 0;
            p += 4;
            break;
        case 2:
            shift = 0;
            do {
                if (p >= end || shift > 63)
                    return 0;
                v |= (uint64_t)(*p & 0x7f) << shift;
                shift += 7;
            } while (*p++ & 0x80);
            if (v > (uint64_t)(end - p))
                return 0;
            if ((tag >> 3) == 2 && v > 0)
                point = 0; /* a range_end: proportional to the data */
            p += v;
            break;
        default:
            return 0;
        }
    }
    return point;
}

static void on_range(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    kv_api *srv = kv_grpc_call_app(call);
    int serializable;
    int point = range_scan(msg, len, &serializable);
    if (!serializable && kv_api_is_learner(srv)) { /* etcd: isRPCSupportedForLearner */
        kv_reply_etcd_err(call, KV_ERR_NOT_SUPPORTED_FOR_LEARNER);
        return;
    }
    /* a Range the auth gate refused is answered only after the barrier (auth_srv.h) */
    if ((!serializable && srv->peers != NULL) || (srv->auth && srv->auth->cur_denied)) {
        kv_read_unary_linearizable(call, kv_store_range, msg, len, point);
        return;
    }
    if (!kv_node_writes_visible(srv->node)) {
        /* an acknowledged write's commit is still being flushed: read your writes */
        kv_read_unary_visible(call, kv_store_range, msg, len, point);
        return;
    }
    if (point) {
        /* Bounded: answered inline (measured: 5x lower latency than a pool round trip). */
        kv_api *s = kv_grpc_call_app(call);
        kv_result res = {0};
        int rc = kv_store_range(s->store, msg, len, kv_node_header(s->node), &res);
        if (rc < 0 && res.err == KV_ERR_NONE)
            kv_reply_etcd_err(call, KV_ERR_STORAGE);
        else
            kv_reply_result(call, &res);
        free(res.resp);
        return;
    }
    kv_read_unary(call, kv_store_range, msg, len); /* off the loop: see api/read_req.h */
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
    kv_api *s = kv_grpc_call_app(call);
    /* nesting and op counts are bounded before anything unpacks the request */
    kv_etcd_err e = kv_internal_check_txn(msg, len, s->cfg->max_txn_ops);
    if (e != KV_ERR_NONE) {
        kv_reply_etcd_err(call, e);
        return;
    }
    kv_propose_unary(call, KV_IREQ_TXN, msg, len);
}

/* Compact: the request itself is O(1) (it records the compaction point); the revisions are
 * removed in bounded batches by the write path (node.h). With physical=true the answer waits
 * until that finished, as etcd's. The request object is detached on cancel. */
typedef struct compact_req {
    kv_grpc_call *call;
    kv_api *srv;
    kv_node_req *h;            /* while the request is queued/applied */
    kv_node_compact_waiter *w; /* while waiting for the physical compaction */
    uint8_t *resp;
    size_t resp_len;
    int physical;
} compact_req;

static void compact_reply(compact_req *cr)
{
    kv_result res = {0};
    res.resp = cr->resp;
    res.resp_len = cr->resp_len;
    kv_grpc_call_set_data(cr->call, NULL);
    kv_reply_result(cr->call, &res);
}

static void compact_free(compact_req *cr)
{
    free(cr->resp);
    free(cr);
}

static void on_physical_done(void *arg, int status)
{
    compact_req *cr = arg;
    cr->w = NULL;
    if (status == -ECANCELED) {
        kv_grpc_call_set_data(cr->call, NULL);
        kv_reply_etcd_err(cr->call, KV_ERR_STOPPED);
    } else if (status < 0) {
        kv_grpc_call_set_data(cr->call, NULL);
        kv_reply_etcd_err(cr->call, KV_ERR_STORAGE);
    } else {
        compact_reply(cr);
    }
    compact_free(cr);
}

static void on_compact_applied(void *arg, kv_result *res)
{
    compact_req *cr = arg;
    cr->h = NULL;
    if (res->err != KV_ERR_NONE) {
        kv_grpc_call_set_data(cr->call, NULL);
        kv_reply_result(cr->call, res);
        compact_free(cr);
        return;
    }
    cr->resp = res->resp; /* taken */
    cr->resp_len = res->resp_len;
    res->resp = NULL;
    int rc = cr->physical ? kv_node_compact_wait(cr->srv->node, on_physical_done, cr, &cr->w) : 1;
    if (rc == 0)
        return;
    if (rc == 1) {
        compact_reply(cr);
    } else {
        kv_grpc_call_set_data(cr->call, NULL);
        kv_reply_propose_error(cr->call, rc);
    }
    compact_free(cr);
}

static void on_compact(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    Etcdserverpb__CompactionRequest *c = etcdserverpb__compaction_request__unpack(NULL, len, msg);
    int physical = c && c->physical;
    if (c)
        etcdserverpb__compaction_request__free_unpacked(c, NULL);
    kv_api *s = kv_grpc_call_app(call);
    compact_req *cr = calloc(1, sizeof(*cr));
    uint8_t *req = NULL;
    size_t rlen = 0;
    int rc = cr ? kv_internal_wrap(KV_IREQ_COMPACTION, 0, msg, len, &req, &rlen) : -ENOMEM;
    if (rc < 0) {
        free(cr);
        kv_reply_propose_error(call, rc);
        return;
    }
    cr->call = call;
    cr->srv = s;
    cr->physical = physical;
    rc = kv_node_propose(s->node, req, rlen, on_compact_applied, cr, &cr->h);
    if (rc < 0) {
        free(cr);
        kv_reply_propose_error(call, rc);
        return;
    }
    kv_grpc_call_set_data(call, cr);
}

static void on_compact_cancel(kv_grpc_call *call)
{
    compact_req *cr = kv_grpc_call_data(call);
    if (cr == NULL)
        return;
    if (cr->h) {
        kv_node_req_detach(cr->h);
        compact_free(cr);
    } else if (cr->w) {
        kv_node_compact_wait_detach(cr->w);
        compact_free(cr);
    }
}

const kv_grpc_method kv_service_kv[] = {
    {"/etcdserverpb.KV/Range", 0, on_range, NULL, kv_read_cancel},
    {"/etcdserverpb.KV/Put", 0, on_put, NULL, kv_propose_cancel},
    {"/etcdserverpb.KV/DeleteRange", 0, on_delete_range, NULL, kv_propose_cancel},
    {"/etcdserverpb.KV/Txn", 0, on_txn, NULL, kv_propose_cancel},
    {"/etcdserverpb.KV/Compact", 0, on_compact, NULL, on_compact_cancel},
};
const size_t kv_service_kv_len = sizeof(kv_service_kv) / sizeof(kv_service_kv[0]);
