/* move_leader: Maintenance.MoveLeader (see move_leader.h). */
#include "api/move_leader.h"

#include "api/services.h"
#include "mvcc/members.h"
#include "pb/pb_strip.h"
#include "rpc.pb-c.h"
#include "api/api.h"

#include <errno.h>
#include <stdlib.h>

typedef struct move_ctx {
    kv_grpc_call *call; /* NULL once the client went away */
} move_ctx;

static void reply_ok(kv_grpc_call *call)
{
    Etcdserverpb__MoveLeaderResponse r = ETCDSERVERPB__MOVE_LEADER_RESPONSE__INIT;
    kv_reply_message(call, &r.base);
}

static void reply_status(kv_grpc_call *call, int status)
{
    switch (status) {
    case 0:
        reply_ok(call);
        break;
    case -EPERM:
        kv_reply_etcd_err(call, KV_ERR_NOT_LEADER);
        break;
    case -EINVAL:
        kv_reply_etcd_err(call, KV_ERR_BAD_LEADER_TRANSFEREE);
        break;
    case -ETIMEDOUT: /* etcd's ErrTimeoutLeaderTransfer has no gRPC mapping: codes.Unknown */
        kv_reply_etcd_err(call, KV_ERR_LEADER_TRANSFER_TIMEOUT);
        break;
    case -ECANCELED:
    case -ESHUTDOWN:
        kv_reply_etcd_err(call, KV_ERR_STOPPED);
        break;
    case -ENOTSUP:
        kv_reply_etcd_err(call, KV_ERR_TRANSFER_NO_NODE);
        break;
    default:
        kv_reply_propose_error(call, status);
        break;
    }
}

static void on_done(void *arg, int status)
{
    move_ctx *c = arg;
    if (c->call) {
        kv_grpc_call_set_data(c->call, NULL);
        reply_status(c->call, status);
    }
    free(c);
}

void kv_move_leader_on_cancel(kv_grpc_call *call)
{
    move_ctx *c = kv_grpc_call_data(call);
    if (c)
        c->call = NULL;
}

void kv_move_leader_on_message(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    kv_api *s = kv_grpc_call_app(call);
    Etcdserverpb__MoveLeaderRequest *req = (Etcdserverpb__MoveLeaderRequest *)kv_pb_unpack(
        &etcdserverpb__move_leader_request__descriptor, msg, len);
    if (!req) {
        kv_reply_etcd_err(call, KV_ERR_GRPC_UNMARSHAL);
        return;
    }
    uint64_t target = req->targetid;
    etcdserverpb__move_leader_request__free_unpacked(req, NULL);
    kv_node_raft_status rs;
    kv_node_get_raft_status(s->node, &rs);
    if (rs.leader != s->member_id) {
        reply_status(call, -EPERM);
        return;
    }
    Kvdpb__Member *m = NULL;
    int rc = kv_store_member_get(s->store, target, &m);
    if (rc == -ENOENT && target == s->member_id)
        rc = 0; /* a table not initialised yet still knows this member */
    else if (rc == 0 && m->is_learner)
        rc = -ENOENT;
    if (m)
        kvdpb__member__free_unpacked(m, NULL);
    if (rc == -ENOENT) {
        reply_status(call, -EINVAL);
        return;
    }
    if (rc < 0) {
        kv_reply_etcd_err(call, rc == -EBADMSG ? KV_ERR_CORRUPT : KV_ERR_STORAGE);
        return;
    }
    if (target == s->member_id) {
        reply_ok(call);
        return;
    }
    move_ctx *c = calloc(1, sizeof(*c));
    if (!c) {
        kv_reply_etcd_err(call, KV_ERR_REQUEST_NOMEM);
        return;
    }
    c->call = call;
    kv_grpc_call_set_data(call, c);
    rc = kv_node_move_leader(s->node, target, on_done, c);
    if (rc < 0) {
        kv_grpc_call_set_data(call, NULL);
        free(c);
        reply_status(call, rc);
    }
}
