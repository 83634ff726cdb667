#include "api/services.h"

#include "api/auth_srv.h"
#include "apply/internal_req.h"
#include "api/quota.h"
#include "common/etcd_status.h"
#include "rpc.pb-c.h"
#include "api/api.h"

#include <errno.h>
#include <stdio.h>
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
        {kv_service_auth, kv_service_auth_len},
        {kv_service_watch, kv_service_watch_len},
        {kv_service_health, kv_service_health_len},
        {kv_service_election, kv_service_election_len},
        {kv_service_lock, kv_service_lock_len},
    };
    size_t len = 0;
    for (size_t p = 0; p < sizeof(parts) / sizeof(parts[0]); p++)
        for (size_t i = 0; i < parts[p].n; i++) {
            if (len == cap)
                return 0;
            out[len++] = parts[p].m[i];
        }
    kv_auth_wrap_methods(out, len); /* authorization when auth is enabled (auth_gate.c) */
    return len;
}

kv_grpc_code kv_api_status_of(kv_etcd_err e)
{
    return kv_etcd_err_code(e);
}

void kv_reply_etcd_err(kv_grpc_call *call, kv_etcd_err e)
{
    kv_grpc_call_finish(call, kv_api_status_of(e), kv_etcd_err_msg(e));
}

void kv_reply_etcd_err_detail(kv_grpc_call *call, kv_etcd_err e, const char *detail)
{
    char text[KV_ETCD_ERR_TEXT_MAX];
    kv_grpc_call_finish(call, kv_api_status_of(e),
                        kv_etcd_err_format(text, sizeof text, e, detail));
}

void kv_reply_result_err(kv_grpc_call *call, const kv_result *res)
{
    kv_reply_etcd_err_detail(call, res->err, res->detail);
}

void kv_reply_step_err(kv_grpc_call *call, kv_etcd_err e, const char *detail)
{
    char text[KV_ETCD_ERR_TEXT_MAX];
    kv_grpc_call_finish(call, KV_GRPC_UNKNOWN, kv_etcd_err_format(text, sizeof text, e, detail));
}

/* A response that could not be queued, for a request that changed nothing: say why. */
static void reply_send_failed(kv_grpc_call *call, int rc, size_t len)
{
    char d[64];
    switch (rc) {
    case -EMSGSIZE: /* grpc-go's wording (rpc_util.go) */
        snprintf(d, sizeof(d), " (%zu vs. %zu)", len, kv_grpc_call_max_response_bytes(call));
        kv_reply_etcd_err_detail(call, KV_ERR_GRPC_SEND_TOO_LARGE, d);
        break;
    case -ECONNRESET: /* the connection is going away: nobody to answer */
    case -EINVAL:
        kv_reply_etcd_err(call, KV_ERR_CANCELED);
        break;
    default: /* -ENOBUFS (process-wide buffer cap), -ENOMEM */
        kv_reply_etcd_err(call, KV_ERR_TOO_MANY_REQUESTS);
        break;
    }
}

void kv_reply_result(kv_grpc_call *call, const kv_result *res)
{
    if (res->err != KV_ERR_NONE) {
        kv_reply_result_err(call, res);
        return;
    }
    int rc = kv_grpc_call_send(call, res->resp ? res->resp : (const uint8_t *)"", res->resp_len);
    if (rc < 0) {
        reply_send_failed(call, rc, res->resp_len);
        return;
    }
    kv_grpc_call_finish(call, KV_GRPC_OK, NULL);
}

/* The completion of an applied write. Its effect is committed: if the response cannot be
 * queued the stream is reset (the client learns "outcome unknown"), never answered with a
 * status such as RESOURCE_EXHAUSTED that means "not applied". */
static void reply_committed(kv_grpc_call *call, const kv_result *res)
{
    if (res->err != KV_ERR_NONE) {
        kv_reply_result_err(call, res);
        return;
    }
    if (kv_grpc_call_send(call, res->resp ? res->resp : (const uint8_t *)"", res->resp_len) < 0) {
        kv_grpc_call_abort(call);
        return;
    }
    kv_grpc_call_finish(call, KV_GRPC_OK, NULL);
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
    int rc = kv_send_message(call, m);
    if (rc < 0)
        reply_send_failed(call, rc, protobuf_c_message_get_packed_size(m));
    else
        kv_grpc_call_finish(call, KV_GRPC_OK, NULL);
}

void kv_reply_propose_error(kv_grpc_call *call, int rc)
{
    switch (rc) {
    case -EBUSY:
        kv_reply_etcd_err(call, KV_ERR_TOO_MANY_REQUESTS);
        break;
    case -ESHUTDOWN:
        kv_reply_etcd_err(call, KV_ERR_STOPPED);
        break;
    default:
        kv_reply_etcd_err(call, KV_ERR_REQUEST_NOMEM);
        break;
    }
}

static void on_write_done(void *arg, kv_result *res)
{
    kv_grpc_call *call = arg;
    reply_committed(call, res);
}

static void propose_unary(kv_grpc_call *call, int field, const uint8_t *msg, size_t len,
                          int lease_id_by_leader)
{
    kv_api *s = kv_grpc_call_app(call);
    if (kv_quota_admit(s, call, field, len)) /* quota and alarms (api/quota.h) */
        return;
    uint8_t *req;
    size_t rlen;
    kv_ireq_origin o = {.max_keys_per_lease = s->cfg->max_keys_per_lease,
                        .lease_id_by_leader = lease_id_by_leader};
    if (s->auth && s->auth->cur_revision) {
        o.user = s->auth->cur_user;
        o.auth_revision = s->auth->cur_revision;
    }
    int rc = kv_internal_wrap_client((enum kv_ireq_field)field, 0, msg, len, &o, &req, &rlen);
    if (rc < 0) {
        kv_reply_propose_error(call, rc);
        return;
    }
    /* etcd (processInternalRaftRequestOnce): the marshalled raft request may not exceed
     * --max-request-bytes; the transport admits up to that plus 512 KiB (main.c). */
    if (rlen > s->cfg->max_request_bytes) {
        free(req);
        kv_reply_etcd_err(call, KV_ERR_REQUEST_TOO_LARGE);
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

void kv_propose_unary(kv_grpc_call *call, int field, const uint8_t *msg, size_t len)
{
    propose_unary(call, field, msg, len, 0);
}

void kv_propose_lease_grant(kv_grpc_call *call, const uint8_t *msg, size_t len, int id_by_leader)
{
    propose_unary(call, KV_IREQ_LEASE_GRANT, msg, len, id_by_leader);
}

void kv_propose_cancel(kv_grpc_call *call)
{
    kv_node_req_detach(kv_grpc_call_data(call));
}

void kv_fill_header(kv_grpc_call *call, Etcdserverpb__ResponseHeader *h, int64_t rev)
{
    kv_api *s = kv_grpc_call_app(call);
    const kv_header_info *hi = kv_node_header(s->node);
    h->cluster_id = hi->cluster_id;
    h->member_id = hi->member_id;
    h->raft_term = hi->raft_term;
    h->revision = rev == KV_HDR_REVISION_NOW ? kv_node_revision(s->node) : rev;
}
