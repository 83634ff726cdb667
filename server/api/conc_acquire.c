/* conc_acquire: Campaign and Lock (see conc_acquire.h). */
#include "api/conc_acquire.h"

#include "api/conc_util.h"
#include "api/conc_watch.h"
#include "api/quota.h"
#include "api/services.h"
#include "lease/lessor.h"
#include "api/api.h"

#include "v3election.pb-c.h"
#include "v3lock.pb-c.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define SESSION_TTL 60 /* clientv3/concurrency session.go defaultSessionTTL */

typedef struct acq {
    kv_api *srv;
    kv_grpc_call *call; /* NULL once the call went away */
    kv_conc_kind kind;
    kv_conc_ident id;
    uint64_t conn_id;
    uint8_t *name, *value, *key, *pfx, *end;
    size_t nlen, vlen, klen;
    int64_t lease;
    int64_t rev; /* the key's creation revision; 0 while not known to exist */
    Etcdserverpb__ResponseHeader hdr;
    kv_conc_watch *w; /* while waiting for a DELETE */
} acq;

static void acq_step_txn(acq *a);
static void acq_step_wait(acq *a);

static void acq_free(acq *a)
{
    kv_conc_release(a->srv);
    free(a->name);
    free(a->value);
    free(a->key);
    free(a->pfx);
    free(a->end);
    free(a);
}

/* Deletes the key if it is still the one this call created (fire and forget). */
static void acq_cleanup(acq *a)
{
    if (a->rev <= 0)
        return;
    Etcdserverpb__Compare cmp = ETCDSERVERPB__COMPARE__INIT;
    cmp.result = ETCDSERVERPB__COMPARE__COMPARE_RESULT__EQUAL;
    cmp.target = ETCDSERVERPB__COMPARE__COMPARE_TARGET__CREATE;
    cmp.key.data = a->key;
    cmp.key.len = a->klen;
    cmp.target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_CREATE_REVISION;
    cmp.create_revision = a->rev;
    Etcdserverpb__Compare *cmps[] = {&cmp};
    Etcdserverpb__DeleteRangeRequest del = ETCDSERVERPB__DELETE_RANGE_REQUEST__INIT;
    del.key = cmp.key;
    Etcdserverpb__RequestOp op = ETCDSERVERPB__REQUEST_OP__INIT;
    op.request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_DELETE_RANGE;
    op.request_delete_range = &del;
    Etcdserverpb__RequestOp *ops[] = {&op};
    Etcdserverpb__TxnRequest t = ETCDSERVERPB__TXN_REQUEST__INIT;
    t.n_compare = 1;
    t.compare = cmps;
    t.n_success = 1;
    t.success = ops;
    /* the member's own undo: at the auth revision of now, not the caller's */
    kv_conc_ident id = a->id;
    kv_conc_ident_refresh(a->srv, &id);
    /* a full queue or a stopping member loses it: the key then goes with its lease */
    (void)kv_conc_propose(a->srv, &id, KV_IREQ_TXN, &t.base, NULL, NULL);
}

/* The call went away or failed: undo and free. */
static void acq_abort(acq *a)
{
    kv_conc_watch_close(a->w);
    a->w = NULL;
    acq_cleanup(a);
    acq_free(a);
}

/* Answers e (+ detail): as a step's error (kv_reply_step_err) if step, else with e's status. */
static void acq_fail(acq *a, kv_etcd_err e, const char *detail, bool step)
{
    if (a->call) {
        kv_grpc_call_set_data(a->call, NULL);
        if (step)
            kv_reply_step_err(a->call, e, detail);
        else
            kv_reply_etcd_err_detail(a->call, e, detail);
        a->call = NULL;
    }
    acq_abort(a);
}

static void acq_fail_errno(acq *a, int rc)
{
    kv_result r = {0};
    kv_conc_errno_result(rc, &r);
    acq_fail(a, r.err, r.detail, true); /* a step's error: see conc_client.h */
}

/* 1 when the step may go on; otherwise the state was ended (cancelled or an error). */
static int acq_check(acq *a, const kv_result *res)
{
    if (a->call == NULL) {
        acq_abort(a);
        return 0;
    }
    if (res->err != KV_ERR_NONE) {
        acq_fail(a, res->err, res->detail, true);
        return 0;
    }
    return 1;
}

static void acq_reply(acq *a)
{
    kv_grpc_call *call = a->call;
    kv_grpc_call_set_data(call, NULL);
    if (a->kind == KV_CONC_CAMPAIGN) {
        V3electionpb__LeaderKey lk = V3ELECTIONPB__LEADER_KEY__INIT;
        lk.name.data = a->name;
        lk.name.len = a->nlen;
        lk.key.data = a->key;
        lk.key.len = a->klen;
        lk.rev = a->rev;
        lk.lease = a->lease;
        V3electionpb__CampaignResponse r = V3ELECTIONPB__CAMPAIGN_RESPONSE__INIT;
        r.header = &a->hdr;
        r.leader = &lk;
        kv_reply_message(call, &r.base);
    } else {
        V3lockpb__LockResponse r = V3LOCKPB__LOCK_RESPONSE__INIT;
        r.header = &a->hdr;
        r.key.data = a->key;
        r.key.len = a->klen;
        kv_reply_message(call, &r.base);
    }
    a->call = NULL;
    acq_free(a); /* the key is the caller's now */
}

static void copy_header(Etcdserverpb__ResponseHeader *dst, const Etcdserverpb__ResponseHeader *h)
{
    etcdserverpb__response_header__init(dst);
    if (h) {
        dst->cluster_id = h->cluster_id;
        dst->member_id = h->member_id;
        dst->revision = h->revision;
        dst->raft_term = h->raft_term;
    }
}

/* ---- wait: waitDeletes(prefix, rev - 1) ---- */

static int wait_on_resp(void *arg, const Etcdserverpb__WatchResponse *wr)
{
    (void)arg;
    for (size_t i = 0; i < wr->n_events; i++)
        if (wr->events[i]->type == MVCCPB__EVENT__EVENT_TYPE__DELETE)
            return 1;
    return 0;
}

static void wait_on_done(void *arg)
{
    acq *a = arg;
    kv_conc_watch_close(a->w); /* deleted (or the watch was canceled): look again */
    a->w = NULL;
    acq_step_wait(a);
}

static const kv_conc_watch_ops wait_ops = {wait_on_resp, wait_on_done, NULL};

static void wait_on_range(void *arg, kv_result *res)
{
    acq *a = arg;
    if (!acq_check(a, res))
        return;
    Etcdserverpb__RangeResponse *r =
        etcdserverpb__range_response__unpack(NULL, res->resp_len, res->resp);
    if (r == NULL) {
        acq_fail(a, KV_ERR_STORAGE, NULL, true);
        return;
    }
    if (r->n_kvs == 0) {
        if (a->kind == KV_CONC_LOCK) /* Mutex.Lock: the header of waitDeletes */
            copy_header(&a->hdr, r->header);
        etcdserverpb__range_response__free_unpacked(r, NULL);
        acq_reply(a);
        return;
    }
    int64_t from = r->header ? r->header->revision : 0;
    int rc = kv_conc_watch_open(a->srv, a->conn_id, r->kvs[0]->key.data, r->kvs[0]->key.len, NULL,
                                0, from, &wait_ops, a, &a->w);
    etcdserverpb__range_response__free_unpacked(r, NULL);
    if (rc == -EMFILE) {
        char d[64];
        snprintf(d, sizeof(d), " (--max-watch-streams-per-connection %u)",
                 a->srv->cfg->max_watch_streams_per_conn);
        acq_fail(a, KV_ERR_TOO_MANY_WATCH_STREAMS, d, false);
    } else if (rc < 0) {
        acq_fail_errno(a, rc);
    }
}

static void acq_step_wait(acq *a)
{
    if (a->call == NULL) {
        acq_abort(a);
        return;
    }
    Etcdserverpb__RangeRequest rr = ETCDSERVERPB__RANGE_REQUEST__INIT;
    rr.key.data = a->pfx;
    rr.key.len = a->nlen + 1;
    rr.range_end.data = a->end;
    rr.range_end.len = a->nlen + 1;
    rr.limit = 1;
    rr.sort_order = ETCDSERVERPB__RANGE_REQUEST__SORT_ORDER__DESCEND;
    rr.sort_target = ETCDSERVERPB__RANGE_REQUEST__SORT_TARGET__CREATE;
    rr.max_create_revision = a->rev - 1;
    int rc = kv_conc_range(a->srv, &rr.base, wait_on_range, a);
    if (rc < 0)
        acq_fail_errno(a, rc);
}

/* ---- proclaim (Campaign over an existing key with another value) ---- */

static void on_proclaimed(void *arg, kv_result *res)
{
    acq *a = arg;
    if (!acq_check(a, res))
        return;
    Etcdserverpb__TxnResponse *t =
        etcdserverpb__txn_response__unpack(NULL, res->resp_len, res->resp);
    int ok = t && t->succeeded;
    etcdserverpb__txn_response__free_unpacked(t, NULL);
    if (!ok) {
        acq_fail(a, KV_ERR_ELECTION_NOT_LEADER, NULL, false);
        return;
    }
    acq_step_wait(a);
}

static void put_op(acq *a, Etcdserverpb__PutRequest *put, Etcdserverpb__RequestOp *op)
{
    etcdserverpb__put_request__init(put);
    put->key.data = a->key;
    put->key.len = a->klen;
    put->value.data = a->value;
    put->value.len = a->vlen;
    put->lease = a->lease;
    etcdserverpb__request_op__init(op);
    op->request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT;
    op->request_put = put;
}

static void proclaim(acq *a)
{
    Etcdserverpb__Compare cmp = ETCDSERVERPB__COMPARE__INIT;
    cmp.result = ETCDSERVERPB__COMPARE__COMPARE_RESULT__EQUAL;
    cmp.target = ETCDSERVERPB__COMPARE__COMPARE_TARGET__CREATE;
    cmp.key.data = a->key;
    cmp.key.len = a->klen;
    cmp.target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_CREATE_REVISION;
    cmp.create_revision = a->rev;
    Etcdserverpb__Compare *cmps[] = {&cmp};
    Etcdserverpb__PutRequest put;
    Etcdserverpb__RequestOp op;
    put_op(a, &put, &op);
    Etcdserverpb__RequestOp *ops[] = {&op};
    Etcdserverpb__TxnRequest t = ETCDSERVERPB__TXN_REQUEST__INIT;
    t.n_compare = 1;
    t.compare = cmps;
    t.n_success = 1;
    t.success = ops;
    int rc = kv_conc_propose(a->srv, &a->id, KV_IREQ_TXN, &t.base, on_proclaimed, a);
    if (rc < 0)
        acq_fail_errno(a, rc);
}

/* ---- txn ---- */

static const Etcdserverpb__RangeResponse *txn_range(const Etcdserverpb__TxnResponse *t, size_t i)
{
    if (i >= t->n_responses ||
        t->responses[i]->response_case != ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_RANGE)
        return NULL;
    return t->responses[i]->response_range;
}

static void on_txn(void *arg, kv_result *res)
{
    acq *a = arg;
    if (res->err != KV_ERR_NONE) { /* not applied (or the member stops): nothing to undo */
        acq_check(a, res);
        return;
    }
    /* even if the call went away meanwhile: learn the key's revision to delete it */
    Etcdserverpb__TxnResponse *t =
        etcdserverpb__txn_response__unpack(NULL, res->resp_len, res->resp);
    const Etcdserverpb__RangeResponse *mine = t ? txn_range(t, 0) : NULL;
    if (t == NULL || (!t->succeeded && (mine == NULL || mine->n_kvs == 0))) {
        etcdserverpb__txn_response__free_unpacked(t, NULL);
        acq_fail(a, KV_ERR_STORAGE, NULL, true);
        return;
    }
    copy_header(&a->hdr, t->header);
    a->rev = t->succeeded ? (t->header ? t->header->revision : 0) : mine->kvs[0]->create_revision;
    int differs = !t->succeeded && a->kind == KV_CONC_CAMPAIGN &&
                  (mine->kvs[0]->value.len != a->vlen ||
                   (a->vlen && memcmp(mine->kvs[0]->value.data, a->value, a->vlen) != 0));
    int owner = 0;
    if (a->kind == KV_CONC_LOCK) {
        const Etcdserverpb__RangeResponse *first = txn_range(t, 1);
        owner = first == NULL || first->n_kvs == 0 || first->kvs[0]->create_revision == a->rev;
    }
    etcdserverpb__txn_response__free_unpacked(t, NULL);
    if (a->call == NULL) {
        acq_abort(a);
        return;
    }
    if (differs)
        proclaim(a);
    else if (owner)
        acq_reply(a);
    else
        acq_step_wait(a);
}

static void acq_step_txn(acq *a)
{
    Etcdserverpb__Compare cmp = ETCDSERVERPB__COMPARE__INIT;
    cmp.result = ETCDSERVERPB__COMPARE__COMPARE_RESULT__EQUAL;
    cmp.target = ETCDSERVERPB__COMPARE__COMPARE_TARGET__CREATE;
    cmp.key.data = a->key;
    cmp.key.len = a->klen;
    cmp.target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_CREATE_REVISION;
    cmp.create_revision = 0;
    Etcdserverpb__Compare *cmps[] = {&cmp};
    Etcdserverpb__PutRequest put;
    Etcdserverpb__RequestOp op_put;
    put_op(a, &put, &op_put);
    Etcdserverpb__RangeRequest get = ETCDSERVERPB__RANGE_REQUEST__INIT;
    get.key = cmp.key;
    Etcdserverpb__RequestOp op_get = ETCDSERVERPB__REQUEST_OP__INIT;
    op_get.request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_RANGE;
    op_get.request_range = &get;
    /* clientv3.WithFirstCreate: the prefix, by creation revision ascending, limit 1 */
    Etcdserverpb__RangeRequest owner = ETCDSERVERPB__RANGE_REQUEST__INIT;
    owner.key.data = a->pfx;
    owner.key.len = a->nlen + 1;
    owner.range_end.data = a->end;
    owner.range_end.len = a->nlen + 1;
    owner.limit = 1;
    owner.sort_order = ETCDSERVERPB__RANGE_REQUEST__SORT_ORDER__ASCEND;
    owner.sort_target = ETCDSERVERPB__RANGE_REQUEST__SORT_TARGET__CREATE;
    Etcdserverpb__RequestOp op_owner = ETCDSERVERPB__REQUEST_OP__INIT;
    op_owner.request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_RANGE;
    op_owner.request_range = &owner;
    Etcdserverpb__RequestOp *succ[] = {&op_put, &op_owner};
    Etcdserverpb__RequestOp *fail[] = {&op_get, &op_owner};
    size_t nops = a->kind == KV_CONC_LOCK ? 2 : 1;
    Etcdserverpb__TxnRequest t = ETCDSERVERPB__TXN_REQUEST__INIT;
    t.n_compare = 1;
    t.compare = cmps;
    t.n_success = nops;
    t.success = succ;
    t.n_failure = nops;
    t.failure = fail;
    int rc = kv_conc_propose(a->srv, &a->id, KV_IREQ_TXN, &t.base, on_txn, a);
    if (rc < 0)
        acq_fail_errno(a, rc);
}

/* ---- session ---- */

static void on_granted(void *arg, kv_result *res)
{
    acq *a = arg;
    if (!acq_check(a, res))
        return;
    acq_step_txn(a);
}

static void acq_step_session(acq *a)
{
    Etcdserverpb__LeaseGrantRequest g = ETCDSERVERPB__LEASE_GRANT_REQUEST__INIT;
    g.id = a->lease;
    g.ttl = kv_lessor_clamp_ttl(a->srv->lessor, SESSION_TTL);
    if (g.ttl < 0)
        g.ttl = SESSION_TTL;
    int rc = kv_conc_propose(a->srv, &a->id, KV_IREQ_LEASE_GRANT, &g.base, on_granted, a);
    if (rc < 0)
        acq_fail_errno(a, rc);
}

static uint8_t *dup_bytes(const uint8_t *p, size_t n)
{
    uint8_t *d = malloc(n ? n : 1);
    if (d && n)
        memcpy(d, p, n);
    return d;
}

/* Starts an admitted acquisition: grant, lease is a new id to grant first; id, the caller. */
static void acquire_start(kv_grpc_call *call, kv_conc_kind kind, const uint8_t *name, size_t nlen,
                          const uint8_t *value, size_t vlen, int64_t lease, int grant,
                          const kv_conc_ident *id)
{
    kv_api *s = kv_grpc_call_app(call);
    acq *a = calloc(1, sizeof(*a));
    if (a == NULL) {
        kv_conc_release(s);
        kv_reply_etcd_err(call, KV_ERR_REQUEST_NOMEM);
        return;
    }
    a->srv = s;
    a->call = call;
    a->kind = kind;
    a->id = *id;
    a->conn_id = kv_grpc_call_conn_id(call);
    a->lease = lease;
    a->nlen = nlen;
    a->vlen = vlen;
    a->name = dup_bytes(name, nlen);
    a->value = dup_bytes(value, vlen);
    if (a->name == NULL || a->value == NULL || kv_conc_prefix(name, nlen, &a->pfx, &a->end) < 0 ||
        kv_conc_key(name, nlen, lease, &a->key, &a->klen) < 0) {
        a->call = NULL;
        acq_free(a);
        kv_reply_etcd_err(call, KV_ERR_REQUEST_NOMEM);
        return;
    }
    kv_grpc_call_set_data(call, a);
    if (grant)
        acq_step_session(a);
    else
        acq_step_txn(a);
}

void kv_conc_acquire_cancel(kv_grpc_call *call)
{
    acq *a = kv_grpc_call_data(call);
    if (a == NULL)
        return;
    a->call = NULL;
    if (a->w != NULL) /* waiting for a DELETE: nothing in flight, undo now */
        acq_abort(a);
    /* otherwise a proposal or a read is in flight: its completion undoes */
}

void kv_conc_acquire(kv_grpc_call *call, kv_conc_kind kind, const uint8_t *name, size_t nlen,
                     const uint8_t *value, size_t vlen, int64_t lease, size_t req_len)
{
    kv_api *s = kv_grpc_call_app(call);
    uint8_t *pfx = NULL, *end = NULL, *key = NULL;
    size_t klen = 0;
    if (kv_quota_admit(s, call, KV_IREQ_TXN, req_len))
        return;
    int grant = lease == 0;
    if (grant)
        lease = kv_lessor_new_id(s->lessor);
    if (kv_conc_prefix(name, nlen, &pfx, &end) < 0 ||
        kv_conc_key(name, nlen, lease, &key, &klen) < 0) {
        kv_reply_etcd_err(call, KV_ERR_REQUEST_NOMEM);
        goto out;
    }
    kv_conc_perm perms[] = {
        {KV_PERM_READ, pfx, nlen + 1, end, nlen + 1},
        {KV_PERM_WRITE, key, klen, NULL, 0},
    };
    kv_conc_ident id;
    if (kv_conc_authorize(call, perms, 2, &id))
        goto out;
    if ((grant && kv_conc_admit_lease(call, lease)) || kv_conc_admit(call))
        goto out;
    acquire_start(call, kind, name, nlen, value, vlen, lease, grant, &id);
out:
    free(pfx);
    free(end);
    free(key);
}
