/* read_req: a read request travelling to a reader thread and back (see read_req.h). */
#include "api/read_req.h"

#include "api/auth_srv.h"
#include "api/services.h"
#include "node/read_pool.h"
#include "api/api.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

typedef struct read_req {
    kv_grpc_call *call;   /* NULL once the RPC was cancelled (loop thread only) */
    atomic_int cancelled; /* set on the loop, read by the worker: skip work not yet started */
    kv_store *store;
    kv_read_fn fn;
    kv_header_info hdr;
    int rc;
    kv_result res;
    int point;         /* after the barrier: run inline */
    int recheck;       /* passed the auth gate at arrival (auth_srv.h cur_gated) */
    int denied;        /* refused by it, answered after the barrier (auth_srv.h cur_denied) */
    uint64_t auth_gen; /* ... at this auth generation */
    size_t len;
    uint8_t msg[]; /* copy of the request message */
} read_req;

static void reply(kv_grpc_call *call, int rc, kv_result *res)
{
    if (rc < 0 && res->err == KV_ERR_NONE)
        kv_reply_etcd_err(call, KV_ERR_STORAGE);
    else
        kv_reply_result(call, res);
}

static void work(void *arg)
{
    read_req *r = arg;
    if (atomic_load(&r->cancelled))
        return;
    r->rc = r->fn(r->store, r->msg, r->len, &r->hdr, &r->res);
}

static void done(void *arg, int status)
{
    read_req *r = arg;
    if (r->call) {
        kv_grpc_call_set_data(r->call, NULL);
        if (status < 0)
            kv_reply_etcd_err(r->call, KV_ERR_STOPPED);
        else
            reply(r->call, r->rc, &r->res);
    }
    free(r->res.resp);
    free(r);
}

static void read_after(kv_grpc_call *call, kv_read_fn fn, const uint8_t *msg, size_t len, int point,
                       int visible_only);

void kv_read_unary(kv_grpc_call *call, kv_read_fn fn, const uint8_t *msg, size_t len)
{
    kv_api *s = kv_grpc_call_app(call);
    if (s->node && !kv_node_writes_visible(s->node)) {
        /* a write this member acknowledged is still being committed to LMDB (its answer went
         * out once it was durable in the WAL or a quorum's logs): read your writes */
        read_after(call, fn, msg, len, 0, 1);
        return;
    }
    if (s->read_pool == NULL) {
        kv_result res = {0};
        int rc = fn(s->store, msg, len, kv_node_header(s->node), &res);
        reply(call, rc, &res);
        free(res.resp);
        return;
    }
    read_req *r = calloc(1, sizeof(*r) + len);
    if (r == NULL) {
        kv_reply_etcd_err(call, KV_ERR_REQUEST_NOMEM);
        return;
    }
    r->call = call;
    r->store = s->store;
    r->fn = fn;
    r->hdr = *kv_node_header(s->node);
    r->len = len;
    if (len)
        memcpy(r->msg, msg, len);
    int rc = kv_read_pool_submit(s->read_pool, work, done, r);
    if (rc < 0) {
        free(r);
        kv_reply_propose_error(call, rc); /* -EBUSY: too many requests; -ESHUTDOWN: stopped */
        return;
    }
    kv_grpc_call_set_data(call, r);
}

void kv_read_cancel(kv_grpc_call *call)
{
    read_req *r = kv_grpc_call_data(call);
    if (r) {
        r->call = NULL;
        atomic_store(&r->cancelled, 1);
    }
}

/* The read index is applied here (or the barrier failed): run the read. */
static void on_read_index(void *arg, int status)
{
    read_req *r = arg;
    kv_grpc_call *call = r->call;
    if (call == NULL) { /* cancelled while waiting */
        free(r);
        return;
    }
    kv_grpc_call_set_data(call, NULL);
    if (status < 0) {
        kv_reply_etcd_err(call, status == -EAGAIN      ? KV_ERR_NO_LEADER
                                : status == -EBUSY     ? KV_ERR_TOO_MANY_REQUESTS
                                : status == -ECANCELED ? KV_ERR_STOPPED
                                                       : KV_ERR_TIMEOUT);
        free(r);
        return;
    }
    kv_api *s = kv_grpc_call_app(call);
    if (s->auth && (r->denied || (r->recheck && kv_node_auth_generation(s->node) != r->auth_gen)) &&
        kv_auth_recheck(call, r->msg, r->len)) {
        free(r); /* answered: refused at arrival, or the caller lost its right meanwhile */
        return;
    }
    if (r->point || s->read_pool == NULL) {
        kv_result res = {0};
        int rc = r->fn(s->store, r->msg, r->len, kv_node_header(s->node), &res);
        reply(call, rc, &res);
        free(res.resp);
        free(r);
        return;
    }
    r->hdr = *kv_node_header(s->node);
    int rc = kv_read_pool_submit(s->read_pool, work, done, r);
    if (rc < 0) {
        free(r);
        kv_reply_propose_error(call, rc);
        return;
    }
    kv_grpc_call_set_data(call, r);
}

void kv_read_unary_linearizable(kv_grpc_call *call, kv_read_fn fn, const uint8_t *msg, size_t len,
                                int point)
{
    read_after(call, fn, msg, len, point, 0);
}

void kv_read_unary_visible(kv_grpc_call *call, kv_read_fn fn, const uint8_t *msg, size_t len,
                           int point)
{
    read_after(call, fn, msg, len, point, 1);
}

static void read_after(kv_grpc_call *call, kv_read_fn fn, const uint8_t *msg, size_t len, int point,
                       int visible_only)
{
    kv_api *s = kv_grpc_call_app(call);
    read_req *r = calloc(1, sizeof(*r) + len);
    if (r == NULL) {
        kv_reply_etcd_err(call, KV_ERR_REQUEST_NOMEM);
        return;
    }
    r->call = call;
    r->store = s->store;
    r->fn = fn;
    r->point = point;
    r->recheck = s->auth && s->auth->cur_gated;
    r->auth_gen = s->auth ? s->auth->cur_gen : 0;
    r->denied = s->auth && s->auth->cur_denied;
    r->len = len;
    if (len)
        memcpy(r->msg, msg, len);
    int rc = visible_only ? kv_node_read_visible(s->node, on_read_index, r)
                          : kv_node_read_index(s->node, on_read_index, r);
    if (rc == 1) { /* nothing to wait for */
        kv_grpc_call_set_data(call, r);
        on_read_index(r, 0);
        return;
    }
    if (rc < 0) {
        free(r);
        kv_reply_propose_error(call, rc);
        return;
    }
    kv_grpc_call_set_data(call, r);
}
