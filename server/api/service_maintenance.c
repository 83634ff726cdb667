/*
 * service_maintenance: etcdserverpb.Maintenance (Status, Alarm, HashKV, Defragment).
 * Snapshot, Hash and MoveLeader are not implemented yet and say so.
 */
#include "api/read_req.h"
#include "api/services.h"
#include "rpc.pb-c.h"
#include "server.h"

#include <stdlib.h>

#define KVD_API_VERSION "3.4.0+kvd.0.1.0"

static void fill_header(kv_server *s, Etcdserverpb__ResponseHeader *h, int64_t rev)
{
    const kv_header_info *hi = kv_node_header(s->node);
    h->cluster_id = hi->cluster_id;
    h->member_id = hi->member_id;
    h->raft_term = hi->raft_term;
    h->revision = rev;
}

static int unpack_ok(kv_grpc_call *call, const ProtobufCMessageDescriptor *d, const uint8_t *msg,
                     size_t len, ProtobufCMessage **out)
{
    *out = protobuf_c_message_unpack(d, NULL, len, msg);
    if (*out == NULL) {
        kv_reply_error(call, 13, "grpc: error unmarshalling request: malformed protobuf");
        return 0;
    }
    return 1;
}

static void on_status(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    kv_server *s = kv_grpc_call_app(call);
    ProtobufCMessage *req;
    if (!unpack_ok(call, &etcdserverpb__status_request__descriptor, msg, len, &req))
        return;
    protobuf_c_message_free_unpacked(req, NULL);
    kv_store_status ss;
    if (kv_store_get_status(s->store, &ss) < 0) {
        kv_reply_error(call, 13, "etcdserver: request failed: storage error");
        return;
    }
    Etcdserverpb__StatusResponse r = ETCDSERVERPB__STATUS_RESPONSE__INIT;
    Etcdserverpb__ResponseHeader h = ETCDSERVERPB__RESPONSE_HEADER__INIT;
    fill_header(s, &h, ss.revision);
    r.header = &h;
    r.version = (char *)KVD_API_VERSION;
    r.dbsize = ss.db_size;
    r.dbsizeinuse = ss.db_size_in_use;
    r.leader = s->id.member_id; /* a single member is its own leader */
    r.raftindex = ss.applied_index;
    r.raftappliedindex = ss.applied_index;
    r.raftterm = h.raft_term;
    kv_reply_message(call, &r.base);
}

static void on_alarm(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    kv_server *s = kv_grpc_call_app(call);
    Etcdserverpb__AlarmRequest *req;
    if (!unpack_ok(call, &etcdserverpb__alarm_request__descriptor, msg, len,
                   (ProtobufCMessage **)&req))
        return;
    int action = req->action;
    protobuf_c_message_free_unpacked(&req->base, NULL);
    if (action != ETCDSERVERPB__ALARM_REQUEST__ALARM_ACTION__GET) {
        kv_reply_error(call, 12, "kvd: activating or deactivating alarms is not implemented yet");
        return;
    }
    kv_store_status ss = {0};
    kv_store_get_status(s->store, &ss);
    Etcdserverpb__AlarmResponse r = ETCDSERVERPB__ALARM_RESPONSE__INIT;
    Etcdserverpb__ResponseHeader h = ETCDSERVERPB__RESPONSE_HEADER__INIT;
    fill_header(s, &h, ss.revision);
    r.header = &h;
    kv_reply_message(call, &r.base); /* no alarm is ever raised yet */
}

/* HashKV walks every stored revision: it runs on a read worker, never on the loop (D4). */
static void on_hash_kv(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    kv_read_unary(call, kv_store_hash_kv_request, msg, len);
}

/* LMDB reuses freed pages in place, so there is nothing to defragment: succeed as etcd does
 * once defragmentation has finished. */
static void on_defragment(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    kv_server *s = kv_grpc_call_app(call);
    (void)msg;
    (void)len;
    kv_store_status ss = {0};
    kv_store_get_status(s->store, &ss);
    Etcdserverpb__DefragmentResponse r = ETCDSERVERPB__DEFRAGMENT_RESPONSE__INIT;
    Etcdserverpb__ResponseHeader h = ETCDSERVERPB__RESPONSE_HEADER__INIT;
    fill_header(s, &h, ss.revision);
    r.header = &h;
    kv_reply_message(call, &r.base);
}

const kv_grpc_method kv_service_maintenance[] = {
    {"/etcdserverpb.Maintenance/Status", 0, on_status, NULL, NULL},
    {"/etcdserverpb.Maintenance/Alarm", 0, on_alarm, NULL, NULL},
    {"/etcdserverpb.Maintenance/HashKV", 0, on_hash_kv, NULL, kv_read_cancel},
    {"/etcdserverpb.Maintenance/Defragment", 0, on_defragment, NULL, NULL},
};
const size_t kv_service_maintenance_len =
    sizeof(kv_service_maintenance) / sizeof(kv_service_maintenance[0]);
