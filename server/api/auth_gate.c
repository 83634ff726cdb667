/*
 * auth_gate: authorization of the non-auth services when auth is enabled (etcd 3.4:
 * v3_server.go Range/Txn checks, apply_auth.go authApplierV3, v3rpc/watch.go
 * isWatchPermitted, v3rpc/maintenance.go authMaintenanceServer, checkMembershipOperation
 * Permission). kv_auth_wrap_methods() replaces the on_message of the gated methods in the
 * server's method table with gated_on_message, which resolves the caller (api/auth_srv.h),
 * checks the request and either answers the error or calls the method's own handler, found
 * by its path pointer in the const service tables. The service files are not changed.
 *
 *   Range                          READ [key, range_end)
 *   Put                            WRITE key; prev_kv: READ key; lease: WRITE on every key
 *                                  already attached to the lease (etcd checkLeasePuts)
 *   DeleteRange                    WRITE [key, range_end); prev_kv: READ too
 *   Txn                            compares READ; ops as above (nested txns too; the lease
 *                                  of a put is checked too, which etcd 3.4 does not do)
 *   Watch (create requests)        READ [key, range_end); denied: created + canceled response
 *                                  with cancel_reason "etcdserver: permission denied"
 *   LeaseRevoke                    WRITE on every key attached to the lease
 *   LeaseTimeToLive with keys      READ on every key attached to the lease (etcd 3.4.26
 *                                  checkLeaseTimeToLive, CVE-2023-32082); anonymous: "user
 *                                  name is empty"; without keys: not gated
 *   Defragment, Snapshot, Hash, HashKV, MoveLeader, MemberAdd/Remove/Update/Promote: root
 *   Compact, Alarm ACTIVATE/DEACTIVATE: root (stricter than etcd 3.4, which lets any
 *                                  authenticated user do them; README "Authentication")
 *   LeaseGrant, Alarm GET          a token, if given, must be valid (etcd raftRequest)
 * Not gated (as etcd): LeaseKeepAlive, LeaseLeases, Status, MemberList.
 *
 * A KV request (Range, Put, DeleteRange, Txn) is first validated as etcd's api/v3rpc/key.go
 * does before any authorization (apply/request_check.h): an invalid one gets its own error
 * ("key is not provided", "duplicate key given in txn request"), never "permission denied" or
 * "user name is empty". With auth disabled the method and the applier give the same errors.
 *
 * Checked when the request arrives, against the committed auth state; a linearizable Range
 * refused there is answered only after its ReadIndex barrier, checked again (etcd's order,
 * v3_server.go Range: a token-less read through a member that does not serve times out as
 * anyone's does, which the grpc-proxy's probe relies on); one whose ReadIndex barrier saw an
 * auth change become visible is checked again after it
 * (kv_auth_recheck, as etcd's doSerialize), so a token or permission taken away by an
 * acknowledged write is refused through a follower that had not applied it yet. Auth
 * changes are answered only once committed (node_apply.c early_ok). A Put, DeleteRange,
 * Txn or LeaseRevoke that passed is proposed with the caller and the auth revision it was
 * checked at (InternalRequest auth_user / auth_revision, as etcd's RequestHeader); the
 * applier refuses it with "etcdserver: revision of auth store is old" if auth changed
 * meanwhile, and with "user name is empty" if auth was enabled after an unchecked write was
 * proposed (apply_auth.c). The lease checks (Put/Txn puts with a lease, LeaseRevoke) are
 * made again at apply on the lease's keys at that point (apply_perm.c): a key attached
 * between arrival and apply is seen.
 * Loop thread only.
 */
#include "api/auth_srv.h"
#include "apply/internal_req.h"
#include "apply/request_check.h"
#include "api/services.h"
#include "api/api.h"

#include "rpc.pb-c.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum gate {
    G_NONE,
    G_RANGE,
    G_PUT,
    G_DELETE,
    G_TXN,
    G_WATCH,
    G_LEASE_REVOKE,
    G_LEASE_TTL,
    G_ALARM,
    G_ADMIN,
    G_TOKEN,
};

static const struct {
    const char *path;
    enum gate g;
} gates[] = {
    {"/etcdserverpb.KV/Range", G_RANGE},
    {"/etcdserverpb.KV/Put", G_PUT},
    {"/etcdserverpb.KV/DeleteRange", G_DELETE},
    {"/etcdserverpb.KV/Txn", G_TXN},
    {"/etcdserverpb.KV/Compact", G_ADMIN},
    {"/etcdserverpb.Watch/Watch", G_WATCH},
    {"/etcdserverpb.Lease/LeaseGrant", G_TOKEN},
    {"/etcdserverpb.Lease/LeaseRevoke", G_LEASE_REVOKE},
    {"/etcdserverpb.Lease/LeaseTimeToLive", G_LEASE_TTL},
    {"/etcdserverpb.Maintenance/Alarm", G_ALARM},
    {"/etcdserverpb.Maintenance/Defragment", G_ADMIN},
    {"/etcdserverpb.Maintenance/Snapshot", G_ADMIN},
    {"/etcdserverpb.Maintenance/Hash", G_ADMIN},
    {"/etcdserverpb.Maintenance/HashKV", G_ADMIN},
    {"/etcdserverpb.Maintenance/MoveLeader", G_ADMIN},
    {"/etcdserverpb.Cluster/MemberAdd", G_ADMIN},
    {"/etcdserverpb.Cluster/MemberRemove", G_ADMIN},
    {"/etcdserverpb.Cluster/MemberUpdate", G_ADMIN},
    {"/etcdserverpb.Cluster/MemberPromote", G_ADMIN},
};

static enum gate gate_of(const char *path)
{
    for (size_t i = 0; i < sizeof gates / sizeof gates[0]; i++)
        if (strcmp(gates[i].path, path) == 0)
            return gates[i].g;
    return G_NONE;
}

/* The method's own entry in the const service tables (path pointers are shared). */
static const kv_grpc_method *original(const char *path)
{
    const struct {
        const kv_grpc_method *m;
        size_t n;
    } parts[] = {
        {kv_service_kv, kv_service_kv_len},
        {kv_service_lease, kv_service_lease_len},
        {kv_service_maintenance, kv_service_maintenance_len},
        {kv_service_cluster, kv_service_cluster_len},
        {kv_service_watch, kv_service_watch_len},
    };
    for (size_t p = 0; p < sizeof parts / sizeof parts[0]; p++)
        for (size_t i = 0; i < parts[p].n; i++)
            if (parts[p].m[i].path == path)
                return &parts[p].m[i];
    for (size_t p = 0; p < sizeof parts / sizeof parts[0]; p++) /* copied strings */
        for (size_t i = 0; i < parts[p].n; i++)
            if (strcmp(parts[p].m[i].path, path) == 0)
                return &parts[p].m[i];
    return NULL;
}

#define MAY(c, w, k, e) kv_auth_caller_may((c), (w), (k).data, (k).len, (e).data, (e).len)

static const ProtobufCBinaryData no_end = {0, NULL};

typedef struct lease_keys_ctx {
    const kv_auth_caller *c;
    int ok;
} lease_keys_ctx;

static int lease_key_fn(void *arg, const uint8_t *key, size_t klen)
{
    lease_keys_ctx *x = arg;
    if (!kv_auth_caller_may(x->c, KV_PERM_WRITE, key, klen, NULL, 0)) {
        x->ok = 0;
        return 1; /* stop */
    }
    return 0;
}

static int lease_read_fn(void *arg, const uint8_t *key, size_t klen)
{
    lease_keys_ctx *x = arg;
    if (!kv_auth_caller_may(x->c, KV_PERM_READ, key, klen, NULL, 0)) {
        x->ok = 0;
        return 1; /* stop */
    }
    return 0;
}

/* etcd 3.4.26 checkLeaseTimeToLive: READ on every key attached to the lease (the walk is
 * bounded by --max-keys-per-lease, enforced when keys are attached). */
static int lease_keys_readable(const kv_auth_caller *c, kv_store *st, int64_t lease)
{
    if (c->root)
        return 1;
    lease_keys_ctx x = {c, 1};
    if (kv_store_lease_keys(st, lease, lease_read_fn, &x) < 0)
        return 0; /* storage failure: deny */
    return x.ok;
}

/* etcd checkLeasePuts: WRITE on every key attached to the lease (root: always; no lease or
 * an unknown one: nothing to check, the method answers its own error). */
static int lease_ok(const kv_auth_caller *c, kv_store *st, int64_t lease)
{
    if (lease == 0 || c->root)
        return 1;
    lease_keys_ctx x = {c, 1};
    if (kv_store_lease_keys(st, lease, lease_key_fn, &x) < 0)
        return 0; /* storage failure: deny (the applier checks again anyway) */
    return x.ok;
}

static int check_ops(const kv_auth_caller *c, kv_store *st, Etcdserverpb__RequestOp **ops, size_t n,
                     int depth);

static int check_txn(const kv_auth_caller *c, kv_store *st, const Etcdserverpb__TxnRequest *t,
                     int depth)
{
    if (depth > 300)
        return 0;
    for (size_t i = 0; i < t->n_compare; i++)
        if (!MAY(c, KV_PERM_READ, t->compare[i]->key, t->compare[i]->range_end))
            return 0;
    return check_ops(c, st, t->success, t->n_success, depth) &&
           check_ops(c, st, t->failure, t->n_failure, depth);
}

static int check_ops(const kv_auth_caller *c, kv_store *st, Etcdserverpb__RequestOp **ops, size_t n,
                     int depth)
{
    for (size_t i = 0; i < n; i++) {
        const Etcdserverpb__RequestOp *op = ops[i];
        switch (op->request_case) {
        case ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_RANGE:
            if (!MAY(c, KV_PERM_READ, op->request_range->key, op->request_range->range_end))
                return 0;
            break;
        case ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT:
            if (!MAY(c, KV_PERM_WRITE, op->request_put->key, no_end) ||
                (op->request_put->prev_kv && !MAY(c, KV_PERM_READ, op->request_put->key, no_end)) ||
                !lease_ok(c, st, op->request_put->lease))
                return 0;
            break;
        case ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_DELETE_RANGE: {
            const Etcdserverpb__DeleteRangeRequest *d = op->request_delete_range;
            if ((d->prev_kv && !MAY(c, KV_PERM_READ, d->key, d->range_end)) ||
                !MAY(c, KV_PERM_WRITE, d->key, d->range_end))
                return 0;
            break;
        }
        case ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_TXN:
            if (!check_txn(c, st, op->request_txn, depth + 1))
                return 0;
            break;
        default:
            break;
        }
    }
    return 1;
}

/* A denied Watch create: etcd answers on the stream and keeps it open. If that answer
 * cannot be queued the call ends, and an HTTP gateway call is freed then: the caller must not
 * touch call after this returns. */
static void deny_watch(kv_grpc_call *call, const Etcdserverpb__WatchCreateRequest *cr)
{
    kv_api *s = kv_grpc_call_app(call);
    Etcdserverpb__ResponseHeader h = ETCDSERVERPB__RESPONSE_HEADER__INIT;
    const kv_header_info *hi = kv_node_header(s->node);
    h.cluster_id = hi->cluster_id;
    h.member_id = hi->member_id;
    h.raft_term = hi->raft_term;
    h.revision = kv_node_revision(s->node);
    Etcdserverpb__WatchResponse wr = ETCDSERVERPB__WATCH_RESPONSE__INIT;
    wr.header = &h;
    wr.watch_id = cr->watch_id;
    wr.created = 1;
    wr.canceled = 1;
    wr.cancel_reason = (char *)kv_etcd_err_msg(KV_ERR_PERMISSION_DENIED);
    if (kv_send_message(call, &wr.base) < 0)
        kv_reply_etcd_err(call, KV_ERR_TOO_MANY_REQUESTS);
}

/* A linearizable Range refused at arrival is answered after its barrier when the member has
 * the state to carry the deferral (srv->auth; a cluster member). */
static bool may_defer(kv_grpc_call *call, enum gate g, int arrival)
{
    kv_api *srv = kv_grpc_call_app(call);
    return g == G_RANGE && arrival && srv->peers != NULL && srv->node != NULL && srv->auth;
}

static bool range_linearizable(const uint8_t *msg, size_t len)
{
    Etcdserverpb__RangeRequest *r = etcdserverpb__range_request__unpack(NULL, len, msg);
    bool lin = r && !r->serializable;
    etcdserverpb__range_request__free_unpacked(r, NULL);
    return lin;
}

/* 0: pass on to the method; 1: answered (or, for Watch, handled); 2: a linearizable Range
 * refused at arrival (its permission, or an invalid token), passed on so that the refusal is
 * answered after the read barrier (auth_srv.h cur_denied). */
/* A Watch message whose token does not resolve (expired, unknown): etcd checks a watch's
 * auth only on create (isWatchPermitted), so a create is denied on the stream and the stream
 * stays open, and a cancel or progress request passes. 1: answered, 0: pass on. */
static int watch_token_refused(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    Etcdserverpb__WatchRequest *r = etcdserverpb__watch_request__unpack(NULL, len, msg);
    int create =
        r && r->request_union_case == ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_CREATE_REQUEST;
    if (create)
        deny_watch(call, r->create_request);
    etcdserverpb__watch_request__free_unpacked(r, NULL);
    return create;
}

/* etcd validates a KV request before it authorizes it (api/v3rpc/key.go, then the server's
 * auth checks): an invalid one gets its own error, e.g. "key is not provided", never
 * "permission denied". KV_ERR_NONE when valid or undecodable (the method answers that). */
static kv_etcd_err invalid(kv_grpc_call *call, enum gate g, const uint8_t *msg, size_t len)
{
    enum kv_request_kind kind;
    switch (g) {
    case G_RANGE:
        kind = KV_REQ_RANGE;
        break;
    case G_PUT:
        kind = KV_REQ_PUT;
        break;
    case G_DELETE:
        kind = KV_REQ_DELETE_RANGE;
        break;
    case G_TXN:
        kind = KV_REQ_TXN;
        break;
    default:
        return KV_ERR_NONE;
    }
    kv_api *s = kv_grpc_call_app(call);
    kv_etcd_err e = kv_request_check(kind, msg, len, s->cfg->max_txn_ops);
    return e == KV_ERR_GRPC_UNMARSHAL ? KV_ERR_NONE : e;
}

static int gate(kv_grpc_call *call, enum gate g, const uint8_t *msg, size_t len, int arrival)
{
    kv_auth_caller c;
    int cerr = kv_auth_caller_open(call, &c);
    kv_etcd_err verr;
    if (cerr == KV_ERR_INVALID_AUTH_TOKEN && (verr = invalid(call, g, msg, len)) != KV_ERR_NONE) {
        kv_reply_etcd_err(call, verr); /* etcd validates before it reads the token */
        return 1;
    }
    if (cerr == KV_ERR_INVALID_AUTH_TOKEN && may_defer(call, g, arrival) &&
        range_linearizable(msg, len))
        return 2; /* etcd's Range: linearizableReadNotify, then AuthInfoFromCtx */
    if (cerr == KV_ERR_INVALID_AUTH_TOKEN && g == G_WATCH)
        return watch_token_refused(call, msg, len); /* the caller was not opened */
    if (cerr) {
        kv_reply_etcd_err(call, (kv_etcd_err)cerr);
        return 1;
    }
    int err = 0, handled = 0, linearizable = 0;
    if (!c.enabled || g == G_TOKEN)
        goto out;
    /* (with auth disabled the method and the applier give the same errors: no second unpack
     * of every request on the loop; a Range that arrived then and meets auth enabled after
     * its ReadIndex is validated here, at its recheck) */
    if ((err = (int)invalid(call, g, msg, len)) != 0)
        goto out;
    if (g == G_ADMIN) {
        err = kv_auth_caller_admin_err(&c);
        goto out;
    }
    int ok = 1;
    switch (g) {
    case G_RANGE: {
        Etcdserverpb__RangeRequest *r = etcdserverpb__range_request__unpack(NULL, len, msg);
        if (r) { /* undecodable: the method answers its own error */
            ok = MAY(&c, KV_PERM_READ, r->key, r->range_end);
            linearizable = !r->serializable;
        }
        etcdserverpb__range_request__free_unpacked(r, NULL);
        break;
    }
    case G_PUT: {
        Etcdserverpb__PutRequest *r = etcdserverpb__put_request__unpack(NULL, len, msg);
        if (r)
            ok = MAY(&c, KV_PERM_WRITE, r->key, no_end) &&
                 (!r->prev_kv || MAY(&c, KV_PERM_READ, r->key, no_end)) &&
                 lease_ok(&c, ((kv_api *)kv_grpc_call_app(call))->store, r->lease);
        etcdserverpb__put_request__free_unpacked(r, NULL);
        break;
    }
    case G_DELETE: {
        Etcdserverpb__DeleteRangeRequest *r =
            etcdserverpb__delete_range_request__unpack(NULL, len, msg);
        if (r)
            ok = (!r->prev_kv || MAY(&c, KV_PERM_READ, r->key, r->range_end)) &&
                 MAY(&c, KV_PERM_WRITE, r->key, r->range_end);
        etcdserverpb__delete_range_request__free_unpacked(r, NULL);
        break;
    }
    case G_TXN: {
        kv_api *s = kv_grpc_call_app(call);
        /* bound the nesting before the recursive unpack, as service_kv.c does */
        if (kv_internal_check_txn(msg, len, s->cfg->max_txn_ops) != KV_ERR_NONE)
            break; /* the method answers the same error */
        Etcdserverpb__TxnRequest *r = etcdserverpb__txn_request__unpack(NULL, len, msg);
        if (r)
            ok = check_txn(&c, s->store, r, 0);
        etcdserverpb__txn_request__free_unpacked(r, NULL);
        break;
    }
    case G_WATCH: {
        Etcdserverpb__WatchRequest *r = etcdserverpb__watch_request__unpack(NULL, len, msg);
        if (r &&
            r->request_union_case == ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_CREATE_REQUEST &&
            !MAY(&c, KV_PERM_READ, r->create_request->key, r->create_request->range_end)) {
            deny_watch(call, r->create_request);
            handled = 1;
        }
        etcdserverpb__watch_request__free_unpacked(r, NULL);
        if (handled)
            goto out; /* call may be gone (deny_watch) */
        break;
    }
    case G_LEASE_TTL: {
        kv_api *s = kv_grpc_call_app(call);
        Etcdserverpb__LeaseTimeToLiveRequest *r =
            etcdserverpb__lease_time_to_live_request__unpack(NULL, len, msg);
        if (r && r->keys) {
            if (c.anonymous) /* etcd: no auth info at all is ErrUserEmpty */
                err = KV_ERR_USER_EMPTY;
            else
                ok = lease_keys_readable(&c, s->store, r->id);
        }
        etcdserverpb__lease_time_to_live_request__free_unpacked(r, NULL);
        break;
    }
    case G_ALARM: {
        Etcdserverpb__AlarmRequest *r = etcdserverpb__alarm_request__unpack(NULL, len, msg);
        if (r && r->action != ETCDSERVERPB__ALARM_REQUEST__ALARM_ACTION__GET)
            err = kv_auth_caller_admin_err(&c);
        etcdserverpb__alarm_request__free_unpacked(r, NULL);
        break;
    }
    case G_LEASE_REVOKE: {
        kv_api *s = kv_grpc_call_app(call);
        Etcdserverpb__LeaseRevokeRequest *r =
            etcdserverpb__lease_revoke_request__unpack(NULL, len, msg);
        if (r)
            ok = lease_ok(&c, s->store, r->id);
        etcdserverpb__lease_revoke_request__free_unpacked(r, NULL);
        break;
    }
    default:
        break;
    }
    kv_api *srv = kv_grpc_call_app(call);
    if (!ok && linearizable && may_defer(call, g, arrival)) {
        /* etcd's order: the barrier, then the refusal (srv->auth carries the deferral to the
         * Range: without it the refusal is answered here) */
        handled = 2;
        goto out;
    }
    if (!ok)
        err = kv_auth_caller_deny_err(&c);
    if (!err && !handled && srv->auth &&
        (g == G_PUT || g == G_DELETE || g == G_TXN || g == G_LEASE_REVOKE)) {
        /* etcd's request header: the write is re-checked at apply against this revision */
        snprintf(srv->auth->cur_user, sizeof srv->auth->cur_user, "%s", c.user);
        srv->auth->cur_revision = c.revision;
    }
out:
    kv_auth_caller_end(&c);
    if (err) {
        kv_reply_etcd_err(call, (kv_etcd_err)err);
        return 1;
    }
    return handled;
}

static void gated_on_message(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    const char *path = kv_grpc_call_method(call);
    const kv_grpc_method *m = original(path);
    if (!m) {
        kv_reply_etcd_err(call, KV_ERR_REQUEST_INTERNAL);
        return;
    }
    kv_api *s = kv_grpc_call_app(call);
    uint64_t gen = s->node ? kv_node_auth_generation(s->node) : 0;
    int g = gate(call, gate_of(path), msg, len, 1);
    if (g == 1)
        return;
    if (s->auth) {
        s->auth->cur_gated = true;
        s->auth->cur_gen = gen;
        s->auth->cur_denied = g == 2;
    }
    m->on_message(call, msg, len); /* synchronous: proposes with s->auth->cur_* */
    if (s->auth) {
        s->auth->cur_revision = 0;
        s->auth->cur_gated = false;
        s->auth->cur_denied = false;
    }
}

int kv_auth_recheck(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    enum gate g = gate_of(kv_grpc_call_method(call));
    if (g != G_RANGE)
        return 0; /* msg is a Range's own request only there (writes: checked at apply) */
    return gate(call, g, msg, len, 0);
}

void kv_auth_wrap_methods(kv_grpc_method *methods, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (gate_of(methods[i].path) != G_NONE && original(methods[i].path))
            methods[i].on_message = gated_on_message;
}
