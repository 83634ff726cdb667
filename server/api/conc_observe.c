/* conc_observe: Election/Observe (see conc_observe.h). */
#include "api/conc_observe.h"

#include "api/conc_client.h"
#include "api/conc_util.h"
#include "api/conc_watch.h"
#include "api/services.h"
#include "auth/auth_perm.h"
#include "pb/pb_strip.h"
#include "api/api.h"

#include "v3election.pb-c.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct observe {
    kv_api *srv;
    kv_grpc_call *call; /* NULL once the call went away */
    uint64_t conn_id;
    uint8_t *pfx, *end;
    size_t plen;
    int following; /* the watch follows the leader key (else: the prefix, for a PUT) */
    uint8_t *key;  /* the leader key found by the prefix watch */
    size_t klen;
    int64_t key_rev; /* its mod revision */
    kv_conc_watch *w;
    int reading; /* a Range is in flight */
} observe;

static void obs_step_get(observe *o);

static void obs_free(observe *o)
{
    kv_conc_watch_close(o->w);
    kv_conc_release(o->srv);
    free(o->pfx);
    free(o->end);
    free(o->key);
    free(o);
}

/* Answers e (+ detail): as a step's error (kv_reply_step_err) if step, else with e's status. */
static void obs_end(observe *o, kv_etcd_err e, const char *detail, bool step)
{
    if (o->call) {
        kv_grpc_call_set_data(o->call, NULL);
        if (step)
            kv_reply_step_err(o->call, e, detail);
        else
            kv_reply_etcd_err_detail(o->call, e, detail);
        o->call = NULL;
    }
    obs_free(o);
}

static void obs_end_errno(observe *o, int rc)
{
    kv_result r = {0};
    if (rc == -EMFILE) {
        char d[64];
        snprintf(d, sizeof(d), " (--max-watch-streams-per-connection %u)",
                 o->srv->cfg->max_watch_streams_per_conn);
        obs_end(o, KV_ERR_TOO_MANY_WATCH_STREAMS, d, false);
        return;
    }
    kv_conc_errno_result(rc, &r);
    obs_end(o, r.err, r.detail, true); /* a step's error: see conc_client.h */
}

static int obs_send(observe *o, Etcdserverpb__ResponseHeader *h, Mvccpb__KeyValue *kv)
{
    V3electionpb__LeaderResponse r = V3ELECTIONPB__LEADER_RESPONSE__INIT;
    r.header = h;
    r.kv = kv;
    return kv_send_message(o->call, &r.base);
}

static size_t obs_queued(void *arg)
{
    observe *o = arg;
    return o->call ? kv_grpc_call_send_queued(o->call) : 0;
}

/* In the hub: the leader key's events (following) or the prefix's (waiting for a PUT). */
static int obs_on_resp(void *arg, const Etcdserverpb__WatchResponse *wr)
{
    observe *o = arg;
    if (o->call == NULL)
        return 1;
    for (size_t i = 0; i < wr->n_events; i++) {
        Mvccpb__Event *ev = wr->events[i];
        if (o->following) {
            if (ev->type == MVCCPB__EVENT__EVENT_TYPE__DELETE)
                return 1; /* leadership passes on: look again */
            int rc = obs_send(o, wr->header, ev->kv);
            if (rc < 0)
                return rc;
            continue;
        }
        if (ev->type != MVCCPB__EVENT__EVENT_TYPE__PUT || ev->kv == NULL)
            continue; /* only a put makes a leader (a delete would make observe spin) */
        Etcdserverpb__ResponseHeader h = ETCDSERVERPB__RESPONSE_HEADER__INIT;
        if (wr->header)
            h = *wr->header;
        h.revision = ev->kv->mod_revision; /* etcd: the kv's, the batch may hold more puts */
        uint8_t *k = malloc(ev->kv->key.len ? ev->kv->key.len : 1);
        if (k == NULL)
            return -ENOMEM;
        int rc = obs_send(o, &h, ev->kv);
        if (rc < 0) {
            free(k);
            return rc;
        }
        if (ev->kv->key.len)
            memcpy(k, ev->kv->key.data, ev->kv->key.len);
        free(o->key);
        o->key = k;
        o->klen = ev->kv->key.len;
        o->key_rev = ev->kv->mod_revision;
        return 1;
    }
    return 0;
}

static void obs_follow(observe *o, const uint8_t *key, size_t klen, int64_t from);

static void obs_on_done(void *arg)
{
    observe *o = arg;
    int canceled = kv_conc_watch_canceled(o->w);
    kv_conc_watch_close(o->w);
    o->w = NULL;
    if (o->call == NULL) {
        obs_free(o);
        return;
    }
    if (!o->following && !canceled && o->key) {
        obs_follow(o, o->key, o->klen, o->key_rev + 1);
        return;
    }
    obs_step_get(o); /* the leader key was deleted (or a watch was canceled): look again */
}

static const kv_conc_watch_ops obs_ops = {obs_on_resp, obs_on_done, obs_queued};

static void obs_follow(observe *o, const uint8_t *key, size_t klen, int64_t from)
{
    o->following = 1;
    int rc = kv_conc_watch_open(o->srv, o->conn_id, key, klen, NULL, 0, from, &obs_ops, o, &o->w);
    if (rc < 0)
        obs_end_errno(o, rc);
}

static void obs_on_range(void *arg, kv_result *res)
{
    observe *o = arg;
    o->reading = 0;
    if (o->call == NULL) {
        obs_free(o);
        return;
    }
    if (res->err != KV_ERR_NONE) {
        obs_end(o, res->err, res->detail, true);
        return;
    }
    Etcdserverpb__RangeResponse *r =
        etcdserverpb__range_response__unpack(NULL, res->resp_len, res->resp);
    if (r == NULL) {
        obs_end(o, KV_ERR_STORAGE, NULL, true);
        return;
    }
    int64_t rev = r->header ? r->header->revision : 0;
    if (r->n_kvs == 0) {
        etcdserverpb__range_response__free_unpacked(r, NULL);
        o->following = 0;
        free(o->key);
        o->key = NULL;
        int rc = kv_conc_watch_open(o->srv, o->conn_id, o->pfx, o->plen, o->end, o->plen, rev,
                                    &obs_ops, o, &o->w);
        if (rc < 0)
            obs_end_errno(o, rc);
        return;
    }
    int rc = obs_send(o, r->header, r->kvs[0]);
    if (rc < 0) {
        etcdserverpb__range_response__free_unpacked(r, NULL);
        obs_end(o, KV_ERR_TOO_MANY_REQUESTS, NULL, false);
        return;
    }
    obs_follow(o, r->kvs[0]->key.data, r->kvs[0]->key.len, rev + 1);
    etcdserverpb__range_response__free_unpacked(r, NULL);
}

static void obs_step_get(observe *o)
{
    Etcdserverpb__RangeRequest rr = ETCDSERVERPB__RANGE_REQUEST__INIT;
    rr.key.data = o->pfx;
    rr.key.len = o->plen;
    rr.range_end.data = o->end;
    rr.range_end.len = o->plen;
    rr.limit = 1;
    rr.sort_order = ETCDSERVERPB__RANGE_REQUEST__SORT_ORDER__ASCEND;
    rr.sort_target = ETCDSERVERPB__RANGE_REQUEST__SORT_TARGET__CREATE;
    o->reading = 1;
    int rc = kv_conc_range(o->srv, &rr.base, obs_on_range, o);
    if (rc < 0) {
        o->reading = 0;
        obs_end_errno(o, rc);
    }
}

void kv_conc_observe_message(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    if (kv_grpc_call_data(call) != NULL)
        return; /* one request per stream; more are ignored (etcd reads only the first) */
    kv_api *s = kv_grpc_call_app(call);
    V3electionpb__LeaderRequest *r = (V3electionpb__LeaderRequest *)kv_pb_unpack(
        &v3electionpb__leader_request__descriptor, msg, len);
    observe *o = NULL;
    if (r == NULL) {
        kv_reply_etcd_err(call, KV_ERR_GRPC_UNMARSHAL);
        return;
    }
    o = calloc(1, sizeof(*o));
    if (o == NULL || kv_conc_prefix(r->name.data, r->name.len, &o->pfx, &o->end) < 0) {
        if (o)
            free(o);
        kv_reply_etcd_err(call, KV_ERR_REQUEST_NOMEM);
        goto out;
    }
    o->plen = r->name.len + 1;
    o->srv = s;
    kv_conc_perm perm = {KV_PERM_READ, o->pfx, o->plen, o->end, o->plen};
    kv_conc_ident id;
    if (kv_conc_authorize(call, &perm, 1, &id) || kv_conc_admit(call)) {
        free(o->pfx);
        free(o->end);
        free(o);
        goto out;
    }
    o->call = call;
    o->conn_id = kv_grpc_call_conn_id(call);
    kv_grpc_call_set_data(call, o);
    obs_step_get(o);
out:
    v3electionpb__leader_request__free_unpacked(r, NULL);
}

void kv_conc_observe_half_close(kv_grpc_call *call)
{
    /* the client sent its request: the stream goes on until it cancels */
    if (kv_grpc_call_data(call) == NULL) /* no request at all (kvd's unary wording) */
        kv_reply_etcd_err(call, KV_ERR_GRPC_HALF_CLOSED);
}

void kv_conc_observe_cancel(kv_grpc_call *call)
{
    observe *o = kv_grpc_call_data(call);
    if (o == NULL)
        return;
    o->call = NULL;
    if (!o->reading) /* nothing in flight but the watch (whose kick is closed with it) */
        obs_free(o);
}
