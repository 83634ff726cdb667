/*
 * service_lease: etcdserverpb.Lease.
 *
 * Grant and Revoke are writes: they travel the ordered apply path (the store persists the
 * lease table in the same transaction as the keys, then tells the lessor). Keepalive and
 * TimeToLive are answered from the lessor's memory on the primary, never through the log:
 * a renewal costs one heap sift, and renewals never wait behind bulk writes (lesson 3).
 *
 * Linearizable through any member (docs/ARCHITECTURE.md "Leases"): the leader answers a
 * renewal or TimeToLive from its lessor only once it applied its commit index as of the
 * request's arrival (etcd's waitAppliedIndex; until then the request waits in lease_fwd.h's
 * batch, one wait per batch). On a follower (no deadlines there) renewals and TimeToLive
 * queries are forwarded to the leader in batches, which holds each batch the same way; the
 * keys of a forwarded TimeToLive are read after a ReadIndex barrier. LeaseLeases reads the
 * replicated lease table after a ReadIndex barrier. Lease existence for Grant and Revoke is
 * decided at apply, from the log, never from a member's map.
 *
 * Keepalive streams hold no receive queue: each renewal is answered as soon as the transport
 * delivers it. The one buffer is the connection's outbound queue, bounded by
 * --max-send-buffer-bytes; a client that stops reading its responses gets its stream ended
 * with RESOURCE_EXHAUSTED instead of growing our memory.
 */
#include "apply/internal_req.h"
#include "api/read_req.h"
#include "api/services.h"
#include "pb/pb_strip.h"
#include "lease/lessor.h"
#include "lease/lease_fwd.h"
#include "rpc.pb-c.h"
#include "api/api.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static void reply_malformed(kv_grpc_call *call)
{
    kv_reply_etcd_err(call, KV_ERR_GRPC_UNMARSHAL);
}

static void on_grant(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    kv_api *s = kv_grpc_call_app(call);
    Etcdserverpb__LeaseGrantRequest *req = (Etcdserverpb__LeaseGrantRequest *)kv_pb_unpack(
        &etcdserverpb__lease_grant_request__descriptor, msg, len);
    if (req == NULL) {
        reply_malformed(call);
        return;
    }
    int64_t ttl = kv_lessor_clamp_ttl(s->lessor, req->ttl);
    /* A server-chosen id is named here, and again by the leader (kv_propose_lease_grant). */
    int by_leader = req->id == 0;
    int64_t id = req->id ? req->id : kv_lessor_new_id(s->lessor);
    etcdserverpb__lease_grant_request__free_unpacked(req, NULL);
    if (ttl == -ERANGE) {
        kv_reply_etcd_err(call, KV_ERR_LEASE_TTL_TOO_LARGE);
        return;
    }
    switch (kv_lessor_check_grant(s->lessor, id)) {
    case 0:
    case -EEXIST: /* a duplicate id is decided at apply, from the log (apply_lease.c) */
        break;
    case -ENOSPC:
        kv_reply_etcd_err(call, KV_ERR_TOO_MANY_LEASES);
        return;
    default:
        kv_reply_etcd_err(call, KV_ERR_INVALID_LEASE_ID);
        return;
    }
    /* The entry carries the id and the clamped TTL, so every member applies the same; the
     * leader names a server-chosen id again before it proposes the entry. */
    Etcdserverpb__LeaseGrantRequest g = ETCDSERVERPB__LEASE_GRANT_REQUEST__INIT;
    g.id = id;
    g.ttl = ttl;
    uint8_t buf[32];
    size_t blen = etcdserverpb__lease_grant_request__pack(&g, buf);
    kv_propose_lease_grant(call, buf, blen, by_leader);
}

static void on_revoke(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    Etcdserverpb__LeaseRevokeRequest *req = (Etcdserverpb__LeaseRevokeRequest *)kv_pb_unpack(
        &etcdserverpb__lease_revoke_request__descriptor, msg, len);
    if (req == NULL) {
        reply_malformed(call);
        return;
    }
    etcdserverpb__lease_revoke_request__free_unpacked(req, NULL);
    /* No local "not found" check: a member's map may lag the log (a grant acknowledged
     * elsewhere); the apply answers "requested lease not found" from the log, as etcd. */
    kv_propose_unary(call, KV_IREQ_LEASE_REVOKE, msg, len);
}

/* Ends keepalive stream call with e (the forwarder forgets it first). */
static void ka_end(kv_api *s, kv_grpc_call *call, kv_etcd_err e)
{
    kv_lease_fwd_call_gone(s->lease_fwd, call);
    kv_reply_etcd_err(call, e);
}

static int ka_send(kv_grpc_call *call, int64_t id, int64_t ttl)
{
    Etcdserverpb__LeaseKeepAliveResponse r = ETCDSERVERPB__LEASE_KEEP_ALIVE_RESPONSE__INIT;
    Etcdserverpb__ResponseHeader h = ETCDSERVERPB__RESPONSE_HEADER__INIT;
    kv_fill_header(call, &h, KV_HDR_REVISION_NOW);
    r.header = &h;
    r.id = id;
    r.ttl = ttl;
    return kv_send_message(call, &r.base);
}

static kv_etcd_err fwd_err(int status)
{
    switch (status) {
    case -ETIMEDOUT:
        return KV_ERR_TIMEOUT;
    case -EBUSY:
        return KV_ERR_TOO_MANY_REQUESTS;
    case -ECANCELED:
        return KV_ERR_STOPPED;
    case -ENOMEM:
        return KV_ERR_NOMEM;
    default:
        return KV_ERR_NO_LEADER;
    }
}

/* The leader answered a renewal this follower forwarded (lease_fwd.h). Negative statuses
 * reaching here are the ones etcd ends the stream for: no leader within the time bound, the
 * server closing, a timeout on a half-closed stream; a renewal shed or timed out on an open
 * stream is dropped by the forwarder without calling this. */
static int ka_forwarded(void *c, int64_t id, int status, int64_t ttl)
{
    kv_grpc_call *call = c;
    if (status < 0) {
        kv_reply_etcd_err(call, fwd_err(status));
        return 1;
    }
    if (ka_send(call, id, ttl) < 0) {
        kv_reply_etcd_err(call, KV_ERR_KEEPALIVE_BACKLOG);
        return 1;
    }
    return 0;
}

static void on_keepalive(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    kv_api *s = kv_grpc_call_app(call);
    uint64_t t0 = uv_hrtime(); /* receipt (kvd_lease_renewal_duration_seconds) */
    Etcdserverpb__LeaseKeepAliveRequest *req = (Etcdserverpb__LeaseKeepAliveRequest *)kv_pb_unpack(
        &etcdserverpb__lease_keep_alive_request__descriptor, msg, len);
    if (req == NULL) {
        kv_lease_fwd_call_gone(s->lease_fwd, call);
        reply_malformed(call);
        return;
    }
    int64_t id = req->id;
    etcdserverpb__lease_keep_alive_request__free_unpacked(req, NULL);
    s->keepalive_requests++;
    kv_metric_inc(s->m_keepalives);

    int64_t ttl = 0;
    int rc = -EAGAIN;
    if (kv_lease_fwd_current(s->lease_fwd, s->lessor, 0))
        rc = kv_lessor_renew(s->lessor, id, &ttl);
    if (rc == -EAGAIN && s->lease_fwd != NULL) {
        /* A leader that must wait for the answer moves the deadline now
         * (kv_lease_fwd_serve_early: a renewal that waits must not let its lease expire). */
        if (kv_lessor_is_primary(s->lessor))
            (void)kv_lessor_renew(s->lessor, id, &ttl);
        /* A follower: the leader renews; this loop turn's renewals travel as one frame. A
         * leader that has not applied its commit index yet (a revoke acknowledged elsewhere
         * may not be in its lessor), or whose lessor does not serve yet (it has not applied
         * an entry of its term), queues it the same way: the forwarder answers it from the
         * local lessor once it may, within the request timeout (etcd LeaseRenew waits too),
         * rather than ending the stream with "no leader". */
        rc = kv_lease_fwd_renew(s->lease_fwd, call, id, ka_forwarded);
        /* -EBUSY: the forwarder's bound shed this one renewal (counted there). It is dropped
         * without an answer and the stream stays open: ending it would drop every other
         * lease renewed on it, and the client renews again on its TTL/3 schedule. A lease
         * being kept alive must not expire because of overload (docs/). */
        if (rc == 0 || rc == -EBUSY)
            return;
        ka_end(s, call, fwd_err(rc)); /* the server is closing, or out of memory */
        return;
    }
    if (rc == -EAGAIN) {
        ka_end(s, call, KV_ERR_NO_LEADER);
        return;
    }
    if (rc < 0)
        ttl = 0; /* unknown or expired: TTL 0, as etcd */
    if (ka_send(call, id, ttl) < 0)
        ka_end(s, call, KV_ERR_KEEPALIVE_BACKLOG);
    else
        kv_metric_observe(s->m_renew_local, (double)(uv_hrtime() - t0) / 1e9);
}

static void on_keepalive_half_close(kv_grpc_call *call)
{
    kv_api *s = kv_grpc_call_app(call);
    if (kv_lease_fwd_half_close(s->lease_fwd, call))
        return; /* forwarded renewals pending: the forwarder finishes the call after them */
    kv_grpc_call_finish(call, KV_GRPC_OK, NULL);
}

static void on_keepalive_cancel(kv_grpc_call *call)
{
    kv_api *s = kv_grpc_call_app(call);
    kv_lease_fwd_call_gone(s->lease_fwd, call);
}

typedef struct keys_acc {
    ProtobufCBinaryData *keys;
    size_t n, cap;
    int oom;
} keys_acc;

static int collect_key(void *arg, const uint8_t *key, size_t klen)
{
    keys_acc *a = arg;
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 16;
        ProtobufCBinaryData *k = realloc(a->keys, cap * sizeof(*k));
        if (k == NULL)
            goto oom;
        a->keys = k;
        a->cap = cap;
    }
    uint8_t *copy = malloc(klen ? klen : 1);
    if (copy == NULL)
        goto oom;
    memcpy(copy, key, klen);
    a->keys[a->n].data = copy;
    a->keys[a->n].len = klen;
    a->n++;
    return 0;
oom:
    a->oom = 1;
    return -ENOMEM;
}

/* Reader thread: msg is the packed LeaseTimeToLiveResponse the loop built from the lessor
 * (TTLs, header); adds the lease's keys from LMDB. A lease with many keys costs O(keys), so
 * this never runs on the loop. */
static int ttl_add_keys(kv_store *store, const uint8_t *msg, size_t len, const kv_header_info *h,
                        kv_result *res)
{
    (void)h;
    memset(res, 0, sizeof(*res));
    Etcdserverpb__LeaseTimeToLiveResponse *r =
        etcdserverpb__lease_time_to_live_response__unpack(NULL, len, msg);
    if (r == NULL)
        return -ENOMEM; /* we packed it ourselves: only allocation can fail */
    keys_acc acc = {0};
    int rc = kv_store_lease_keys(store, r->id, collect_key, &acc);
    if (rc == 0 && acc.oom)
        rc = -ENOMEM;
    if (rc < 0)
        goto out;
    r->keys = acc.keys;
    r->n_keys = acc.n;
    size_t n = etcdserverpb__lease_time_to_live_response__get_packed_size(r);
    res->resp = malloc(n ? n : 1);
    if (res->resp == NULL) {
        rc = -ENOMEM;
    } else {
        res->resp_len = etcdserverpb__lease_time_to_live_response__pack(r, res->resp);
    }
    r->keys = NULL;
    r->n_keys = 0;
out:
    for (size_t i = 0; i < acc.n; i++)
        free(acc.keys[i].data);
    free(acc.keys);
    etcdserverpb__lease_time_to_live_response__free_unpacked(r, NULL);
    return rc;
}

/* Answers TimeToLive of id from rc/remaining/granted (rc: kv_lessor_time_to_live's). linear:
 * the keys are read after a ReadIndex barrier (the TTLs came from another member). */
static void ttl_reply(kv_grpc_call *call, int64_t id, int want_keys, int rc, int64_t remaining,
                      int64_t granted, int linear)
{
    Etcdserverpb__LeaseTimeToLiveResponse r = ETCDSERVERPB__LEASE_TIME_TO_LIVE_RESPONSE__INIT;
    Etcdserverpb__ResponseHeader h = ETCDSERVERPB__RESPONSE_HEADER__INIT;
    kv_fill_header(call, &h, KV_HDR_REVISION_NOW);
    r.header = &h;
    r.id = id;
    if (rc < 0) {
        r.ttl = -1; /* not found: TTL -1, as etcd */
    } else {
        r.ttl = remaining;
        r.grantedttl = granted;
    }
    if (rc < 0 || !want_keys) {
        kv_reply_message(call, &r.base);
        return;
    }
    /* The TTLs come from the lessor (loop only); the keys from a reader thread. On the
     * leader the store has applied the commit index as of the request's arrival; on a
     * follower the keys come from its own replicated store once it applied the leader's
     * commit index (ReadIndex, started after the leader answered). */
    uint8_t buf[128];
    size_t n = etcdserverpb__lease_time_to_live_response__get_packed_size(&r);
    if (n > sizeof(buf)) {
        kv_reply_etcd_err(call, KV_ERR_REQUEST_INTERNAL);
        return;
    }
    n = etcdserverpb__lease_time_to_live_response__pack(&r, buf);
    if (linear)
        kv_read_unary_linearizable(call, ttl_add_keys, buf, n, 0);
    else
        kv_read_unary(call, ttl_add_keys, buf, n);
}

/* The leader answered a TimeToLive this follower forwarded (remaining -1: unknown). */
static void ttl_forwarded(void *c, int64_t id, int want_keys, int status, int64_t remaining,
                          int64_t granted)
{
    kv_grpc_call *call = c;
    if (status < 0) {
        kv_reply_etcd_err(call, fwd_err(status));
        return;
    }
    /* Served by this member's own lessor (it leads and waited for its applied index), or
     * by the leader: then the keys need the barrier. */
    kv_api *s = kv_grpc_call_app(call);
    ttl_reply(call, id, want_keys, remaining < 0 ? -ENOENT : 0, remaining, granted,
              !kv_lessor_is_primary(s->lessor));
}

static void on_time_to_live(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    kv_api *s = kv_grpc_call_app(call);
    Etcdserverpb__LeaseTimeToLiveRequest *req =
        (Etcdserverpb__LeaseTimeToLiveRequest *)kv_pb_unpack(
            &etcdserverpb__lease_time_to_live_request__descriptor, msg, len);
    if (req == NULL) {
        reply_malformed(call);
        return;
    }
    int64_t id = req->id;
    int want_keys = req->keys;
    etcdserverpb__lease_time_to_live_request__free_unpacked(req, NULL);

    int64_t remaining = 0, granted = 0;
    int rc = -EAGAIN;
    if (kv_lease_fwd_current(s->lease_fwd, s->lessor, want_keys))
        rc = kv_lessor_time_to_live(s->lessor, id, &remaining, &granted);
    if (rc == -EAGAIN && s->lease_fwd != NULL) {
        /* A follower has no deadlines: ask the leader (batched with the renewals); a leader
         * that has not applied its commit index, or whose lessor does not serve yet, answers
         * once it may (as renewals, above). */
        rc = kv_lease_fwd_ttl(s->lease_fwd, call, id, want_keys, ttl_forwarded);
        if (rc < 0)
            kv_reply_etcd_err(call, fwd_err(rc));
        return;
    }
    if (rc == -EAGAIN) {
        kv_reply_etcd_err(call, KV_ERR_NO_LEADER);
        return;
    }
    ttl_reply(call, id, want_keys, rc, remaining, granted, 0);
}

static void on_time_to_live_cancel(kv_grpc_call *call)
{
    kv_api *s = kv_grpc_call_app(call);
    if (!kv_lease_fwd_ttl_gone(s->lease_fwd, call))
        kv_read_cancel(call);
}

typedef struct leases_acc {
    Etcdserverpb__LeaseStatus *st;
    Etcdserverpb__LeaseStatus **ptrs;
    size_t n, cap;
} leases_acc;

static int collect_lease(void *arg, int64_t id, int64_t ttl)
{
    (void)ttl;
    leases_acc *a = arg;
    if (a->n == a->cap)
        return -ENOSPC;
    etcdserverpb__lease_status__init(&a->st[a->n]);
    a->st[a->n].id = id;
    a->ptrs[a->n] = &a->st[a->n];
    a->n++;
    return 0;
}

/* Runs on the loop (a "point" read) after the ReadIndex barrier: this member applied the
 * leader's commit index as of the request's arrival, and its lessor's map (every member keeps
 * one, fed by the apply path) took those entries. msg holds the server pointer. */
static int leases_list(kv_store *store, const uint8_t *msg, size_t len, const kv_header_info *hi,
                       kv_result *res)
{
    (void)store;
    memset(res, 0, sizeof(*res));
    kv_api *s = NULL;
    if (len != sizeof(s))
        return -EINVAL;
    memcpy(&s, msg, sizeof(s));
    const kv_lessor *l = s->lessor;
    leases_acc a = {0};
    int rc = -ENOMEM;
    a.cap = kv_lessor_count(l);
    a.st = calloc(a.cap ? a.cap : 1, sizeof(*a.st));
    a.ptrs = calloc(a.cap ? a.cap : 1, sizeof(*a.ptrs));
    if (a.st == NULL || a.ptrs == NULL)
        goto out;
    kv_lessor_each(l, collect_lease, &a);
    Etcdserverpb__LeaseLeasesResponse r = ETCDSERVERPB__LEASE_LEASES_RESPONSE__INIT;
    Etcdserverpb__ResponseHeader h = ETCDSERVERPB__RESPONSE_HEADER__INIT;
    h.cluster_id = hi->cluster_id;
    h.member_id = hi->member_id;
    h.revision = kv_node_revision(s->node);
    h.raft_term = hi->raft_term;
    r.header = &h;
    r.leases = a.ptrs;
    r.n_leases = a.n;
    size_t n = etcdserverpb__lease_leases_response__get_packed_size(&r);
    res->resp = malloc(n ? n : 1);
    if (res->resp == NULL)
        goto out;
    res->resp_len = etcdserverpb__lease_leases_response__pack(&r, res->resp);
    rc = 0;
out:
    free(a.st);
    free(a.ptrs);
    return rc;
}

static void on_leases(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    kv_api *s = kv_grpc_call_app(call);
    (void)msg;
    (void)len;
    /* Linearizable on every member: a lease granted or revoked through another member and
     * acknowledged before this request arrived is reflected (ReadIndex, then the map). */
    kv_read_unary_linearizable(call, leases_list, (const uint8_t *)&s, sizeof(s), 1);
}

const kv_grpc_method kv_service_lease[] = {
    {"/etcdserverpb.Lease/LeaseGrant", 0, on_grant, NULL, kv_propose_cancel},
    {"/etcdserverpb.Lease/LeaseRevoke", 0, on_revoke, NULL, kv_propose_cancel},
    {"/etcdserverpb.Lease/LeaseKeepAlive", 1, on_keepalive, on_keepalive_half_close,
     on_keepalive_cancel},
    {"/etcdserverpb.Lease/LeaseTimeToLive", 0, on_time_to_live, NULL, on_time_to_live_cancel},
    {"/etcdserverpb.Lease/LeaseLeases", 0, on_leases, NULL, kv_read_cancel},
};
const size_t kv_service_lease_len = sizeof(kv_service_lease) / sizeof(kv_service_lease[0]);

/* Renewals and lease reads are served ahead of bulk writes (lesson 3): their unary
 * requests are not held behind --max-pending-request-bytes of unanswered writes nor refused by
 * a connection saturated with write bodies (grpc_server.h, priority_methods). */
const char *const kv_service_priority_methods[] = {
    "/etcdserverpb.Lease/LeaseKeepAlive",
    "/etcdserverpb.Lease/LeaseTimeToLive",
    "/etcdserverpb.Lease/LeaseLeases",
    NULL,
};

/* The forwarder's view of a keepalive stream (lease/lease_fwd.h): the call's data slot, and
 * ending a half-closed stream OK. */
static void *call_owner(void *call)
{
    return kv_grpc_call_data(call);
}

static void call_set_owner(void *call, void *owner)
{
    kv_grpc_call_set_data(call, owner);
}

static void call_finish_ok(void *call)
{
    kv_grpc_call_finish(call, KV_GRPC_OK, NULL);
}

const kv_lease_fwd_call_ops kv_service_lease_call_ops = {
    .get_owner = call_owner,
    .set_owner = call_set_owner,
    .finish_ok = call_finish_ok,
};

void kv_api_metrics_init(kv_api *a)
{
    kv_metrics *m = a->metrics;
    if (m == NULL)
        return;
    a->m_keepalives =
        kv_metrics_counter(m, "kvd_lease_keepalive_requests_total",
                           "Lease renewals received on LeaseKeepAlive streams.", NULL);
    a->m_renew_local = kv_lease_renewal_histogram(m, "local");
    /* the election and lock services' bound (api/conc_util.h) */
    a->m_conc_waiters = kv_metrics_gauge(m, "kvd_concurrency_waiters",
                                         "Election and lock calls in progress (Campaign, Lock, "
                                         "Observe).",
                                         NULL);
    a->m_conc_refused = kv_metrics_counter(
        m, "kvd_concurrency_refused_total",
        "Campaign, Lock and Observe calls refused by --max-concurrency-waiters.", NULL);
}
