/* conc_client: proposals and linearizable reads for the election and lock services
 * (see conc_client.h). */
#include "api/conc_client.h"

#include "common/etcd_errors.h"
#include "node/read_pool.h"
#include "api/api.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void kv_conc_errno_result(int rc, kv_result *res)
{
    kv_etcd_err e;
    switch (rc) {
    case -EBUSY:
        e = KV_ERR_TOO_MANY_REQUESTS;
        break;
    case -ESHUTDOWN:
    case -ECANCELED:
        e = KV_ERR_STOPPED;
        break;
    case -E2BIG:
        e = KV_ERR_REQUEST_TOO_LARGE;
        break;
    case -EAGAIN:
        e = KV_ERR_NO_LEADER;
        break;
    case -ETIMEDOUT:
        e = KV_ERR_TIMEOUT;
        break;
    default:
        e = KV_ERR_REQUEST_NOMEM;
        break;
    }
    kv_result_set_err(res, e);
}

int kv_conc_propose(kv_api *s, const kv_conc_ident *id, enum kv_ireq_field field,
                    const ProtobufCMessage *m, kv_conc_done_fn done, void *arg)
{
    size_t len = protobuf_c_message_get_packed_size(m);
    uint8_t *msg = malloc(len ? len : 1);
    uint8_t *req = NULL;
    size_t rlen = 0;
    int rc = -ENOMEM;
    if (msg == NULL)
        goto out;
    protobuf_c_message_pack(m, msg);
    kv_ireq_origin o = {.max_keys_per_lease = s->cfg->max_keys_per_lease};
    if (id && id->auth_revision) {
        o.user = id->user;
        o.auth_revision = id->auth_revision;
    }
    rc = kv_internal_wrap_client(field, 0, msg, len, &o, &req, &rlen);
    if (rc < 0)
        goto out;
    if (rlen > s->cfg->max_request_bytes) { /* as kv_propose_unary (services.c) */
        free(req);
        rc = -E2BIG;
        goto out;
    }
    rc = kv_node_propose(s->node, req, rlen, done, arg, NULL); /* takes req */
out:
    free(msg);
    return rc;
}

typedef struct conc_read {
    kv_api *srv;
    kv_conc_done_fn done;
    void *arg;
    kv_header_info hdr;
    int rc;
    kv_result res;
    size_t len;
    uint8_t msg[]; /* the packed RangeRequest */
} conc_read;

static void read_finish(conc_read *r)
{
    if (r->rc < 0 && r->res.err == KV_ERR_NONE)
        kv_result_set_err(&r->res, KV_ERR_STORAGE);
    r->done(r->arg, &r->res);
    free(r->res.resp);
    free(r);
}

static void read_work(void *arg)
{
    conc_read *r = arg;
    r->rc = kv_store_range(r->srv->store, r->msg, r->len, &r->hdr, &r->res);
}

static void read_pool_done(void *arg, int status)
{
    conc_read *r = arg;
    if (status < 0) {
        free(r->res.resp);
        memset(&r->res, 0, sizeof(r->res));
        r->rc = 0;
        kv_conc_errno_result(status, &r->res);
    }
    read_finish(r);
}

/* The barrier passed (status 0) or failed: read on a reader thread (inline without a pool). */
static void read_start(void *arg, int status)
{
    conc_read *r = arg;
    if (status < 0) {
        kv_conc_errno_result(status, &r->res);
        read_finish(r);
        return;
    }
    r->hdr = *kv_node_header(r->srv->node);
    if (r->srv->read_pool == NULL) {
        read_work(r);
        read_finish(r);
        return;
    }
    int rc = kv_read_pool_submit(r->srv->read_pool, read_work, read_pool_done, r);
    if (rc < 0) {
        kv_conc_errno_result(rc, &r->res);
        read_finish(r);
    }
}

int kv_conc_range(kv_api *s, const ProtobufCMessage *m, kv_conc_done_fn done, void *arg)
{
    size_t len = protobuf_c_message_get_packed_size(m);
    conc_read *r = calloc(1, sizeof(*r) + len);
    if (r == NULL)
        return -ENOMEM;
    r->srv = s;
    r->done = done;
    r->arg = arg;
    r->len = len;
    protobuf_c_message_pack(m, r->msg);
    /* a cluster: the ReadIndex barrier of a linearizable Range; a single member: only a write
     * answered before its commit returned (node.h kv_node_read_visible) to wait for */
    int rc = s->peers != NULL ? kv_node_read_index(s->node, read_start, r)
                              : kv_node_read_visible(s->node, read_start, r);
    if (rc < 0) {
        free(r);
        return rc;
    }
    if (rc == 1) /* nothing to wait for */
        read_start(r, 0);
    return 0;
}
