#include "api/services.h"

#include "api/internal_req.h"
#include "server.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

size_t kv_services_collect(kv_grpc_method *out, size_t cap)
{
    const struct {
        const kv_grpc_method *m;
        size_t n;
    } parts[] = {
        {kv_service_kv, kv_service_kv_len},
        {kv_service_lease, kv_service_lease_len},
        {kv_service_maintenance, kv_service_maintenance_len},
        {kv_service_cluster, kv_service_cluster_len},
        {kv_service_unimplemented, kv_service_unimplemented_len},
        {kv_service_watch, kv_service_watch_len},
    };
    size_t len = 0;
    for (size_t p = 0; p < sizeof(parts) / sizeof(parts[0]); p++)
        for (size_t i = 0; i < parts[p].n; i++) {
            if (len == cap)
                return 0;
            out[len++] = parts[p].m[i];
        }
    return len;
}

void kv_reply_error(kv_grpc_call *call, int code, const char *msg)
{
    kv_grpc_call_finish(call, code, msg);
}

void kv_reply_result(kv_grpc_call *call, const kv_result *res)
{
    if (res->code != 0) {
        kv_grpc_call_finish(call, res->code, res->msg);
        return;
    }
    if (kv_grpc_call_send(call, res->resp ? res->resp : (const uint8_t *)"", res->resp_len) < 0) {
        kv_grpc_call_finish(call, 8, "etcdserver: too many requests");
        return;
    }
    kv_grpc_call_finish(call, 0, NULL);
}

int kv_send_message(kv_grpc_call *call, const ProtobufCMessage *m)
{
    uint8_t small[256];
    size_t len = protobuf_c_message_get_packed_size(m);
    uint8_t *buf = len <= sizeof(small) ? small : malloc(len);
    if (buf == NULL)
        return -ENOMEM;
    protobuf_c_message_pack(m, buf);
    int rc = kv_grpc_call_send(call, buf, len);
    if (buf != small)
        free(buf);
    return rc;
}

void kv_reply_message(kv_grpc_call *call, const ProtobufCMessage *m)
{
    if (kv_send_message(call, m) < 0)
        kv_grpc_call_finish(call, 8, "etcdserver: too many requests");
    else
        kv_grpc_call_finish(call, 0, NULL);
}

void kv_reply_propose_error(kv_grpc_call *call, int rc)
{
    switch (rc) {
    case -EBUSY:
        kv_grpc_call_finish(call, 8, "etcdserver: too many requests");
        break;
    case -ESHUTDOWN:
        kv_grpc_call_finish(call, 14, "etcdserver: server stopped");
        break;
    default:
        kv_grpc_call_finish(call, 13, "etcdserver: request failed: out of memory");
        break;
    }
}

static void on_write_done(void *arg, kv_result *res)
{
    kv_grpc_call *call = arg;
    kv_reply_result(call, res);
}

void kv_propose_unary(kv_grpc_call *call, int field, const uint8_t *msg, size_t len)
{
    kv_server *s = kv_grpc_call_app(call);
    uint8_t *req;
    size_t rlen;
    int rc = kv_internal_wrap((enum kv_ireq_field)field, 0, msg, len, &req, &rlen);
    if (rc < 0) {
        kv_reply_propose_error(call, rc);
        return;
    }
    kv_node_req *h = NULL;
    rc = kv_node_propose(s->node, req, rlen, on_write_done, call, &h);
    if (rc < 0) {
        kv_reply_propose_error(call, rc);
        return;
    }
    kv_grpc_call_set_data(call, h);
}

void kv_propose_cancel(kv_grpc_call *call)
{
    kv_node_req_detach(kv_grpc_call_data(call));
}
