/*
 * proxy_unary.c - unary calls forwarded as raw bytes (docs/proxy.md, "Unary calls").
 *
 * A client's request message goes up unchanged on the proxy's one upstream connection
 * (kvc_call_unary_start); the member's response bytes, or its grpc-status and grpc-message,
 * come back through the bridge and are relayed unchanged. Reads (Range, TimeToLive, Leases,
 * MemberList, Status, Hash, HashKV, the Auth reads, Election.Leader, Health.Check) are marked
 * idempotent, so libkvclient retries them
 * on the next endpoint after UNAVAILABLE or "no leader"; writes are never re-sent behind the
 * client's back (a write whose connection died is answered UNAVAILABLE "... may or may not
 * have been applied", as libkvclient says). The client's "token" (etcd auth) and "hasleader"
 * (clientv3.WithRequireLeader) metadata go up with its call (kv_proxy_call_md).
 *
 * Range cache: kv_proxy_kvcache_request may answer a Range itself; every forwarded call's
 * outcome goes to kv_proxy_kvcache_done (proxy_kvcache.c).
 *
 * --namespace (proxy_ns.h): a KV request is rewritten (prefixed) before the range cache and
 * the upstream see it, and an OK answer stripped before the cache and the client do: the
 * cache keys and invalidates in the members' key space and stores what clients get.
 *
 * Cancellation: a client call cancelled (RST_STREAM, or its connection gone) cancels its
 * upstream call (kvc_call_cancel: RST_STREAM CANCEL to the member), as etcd's proxy does
 * through its Go context: a v3lock Lock or an Election Campaign left waiting is withdrawn by
 * the member instead of acquiring for a client that has gone.
 *
 * Ownership: one fwd per forwarded call, owned by the proxy loop from the forward until its
 * completion event, or until the cancel when kvc_call_cancel dropped the upstream call before
 * its completion (then no event comes); a cancel after the completion was queued on the
 * bridge only clears fwd->call and the event frees the fwd. fwd->up is the handle, given back
 * exactly once (cancel or event). Bound: --max-pending-requests forwarded calls without an
 * answer.
 */
#include "proxy/proxy_int.h"

#include "common/etcd_errors.h"
#include "grpc/grpc_wire.h"
#include "proxy/proxy_pb.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct fwd {
    kv_proxy *p;
    kv_grpc_call *call; /* NULL once the client went away */
    void *ctag;         /* the range cache's (kv_proxy_kvcache_done) */
    const char *method; /* static (the method table's) */
    kvc_call *up;       /* the upstream call's handle; NULL once given back */
    /* --experimental-serializable-ordering: order 1 for a Put or DeleteRange (its answer's
     * revision raises kv_proxy.ord_rev), 2 for a Range or Txn (also checked against it, and
     * sent again from req, owned, after a move to the next endpoint: moves so far) */
    int order;
    uint8_t *req;
    size_t req_len;
    uint32_t moves;
} fwd;

static void fwd_free(fwd *f)
{
    free(f->req);
    free(f);
}

static int is_read(const char *m)
{
    static const char *const reads[] = {
        "/etcdserverpb.KV/Range",           "/etcdserverpb.Lease/LeaseTimeToLive",
        "/etcdserverpb.Lease/LeaseLeases",  "/etcdserverpb.Cluster/MemberList",
        "/etcdserverpb.Maintenance/Status", "/etcdserverpb.Maintenance/Hash",
        "/etcdserverpb.Maintenance/HashKV", "/etcdserverpb.Auth/UserGet",
        "/etcdserverpb.Auth/UserList",      "/etcdserverpb.Auth/RoleGet",
        "/etcdserverpb.Auth/RoleList",      "/v3electionpb.Election/Leader",
        "/grpc.health.v1.Health/Check",     NULL};
    for (size_t i = 0; reads[i]; i++)
        if (strcmp(m, reads[i]) == 0)
            return 1;
    return 0;
}

void kv_proxy_call_md(kv_grpc_call *call, kvc_call_md *md)
{
    const char *hl = kv_grpc_call_header(call, "hasleader");
    md->auth_token = kv_grpc_call_header(call, "token");
    md->require_leader = hl && strcmp(hl, "true") == 0;
}

uint32_t kv_proxy_call_timeout(kv_proxy *p, kv_grpc_call *call)
{
    uint64_t dl = kv_grpc_call_deadline(call);
    if (!dl)
        return 0;
    uint64_t now = uv_now(p->loop);
    if (dl <= now)
        return 1;
    uint64_t left = dl - now;
    return left > UINT32_MAX ? UINT32_MAX : (uint32_t)left;
}

/* etcd's ordering.ErrNoGreaterRev, returned by its proxy as a plain error (status Unknown) */
#define ERR_NO_GREATER_REV                                                                         \
    "etcdclient: no cluster members have a revision higher than the previously received "          \
    "revision"

static int order_of(const char *m)
{
    if (strcmp(m, "/etcdserverpb.KV/Range") == 0 || strcmp(m, "/etcdserverpb.KV/Txn") == 0)
        return 2;
    if (strcmp(m, "/etcdserverpb.KV/Put") == 0 || strcmp(m, "/etcdserverpb.KV/DeleteRange") == 0)
        return 1;
    return 0;
}

/* libkvclient's I/O thread: hand the outcome to the loop. */
static void on_done_io(void *arg, int status, const kvc_error *err, uint8_t *resp, size_t len)
{
    fwd *f = arg;
    int code = status == 0 ? 0 : err ? err->code : -status;
    kv_proxy_bridge_post_reply(&f->p->bridge, KV_PROXY_EV_UNARY, f, code, err ? err->message : NULL,
                               resp, len, kvc_free);
}

/* --namespace: the member's OK answer with the prefix stripped, in place of ev's bytes; an
 * answer that cannot be rewritten becomes an error (never relayed with the members' keys). */
static void ns_strip(kv_proxy *p, const char *method, kv_proxy_ev *ev)
{
    kv_proxy_ns ns;
    uint8_t *out;
    size_t olen;
    if (ev->code != 0 || !kv_proxy_ns_of(p, &ns))
        return;
    int rc = kv_proxy_ns_response(&ns, method, ev->buf, ev->len, &out, &olen);
    if (rc == 0 && !out)
        return;
    if (ev->buf_free)
        ev->buf_free(ev->buf);
    if (rc == 0) {
        ev->buf = out;
        ev->len = olen;
        ev->buf_free = free;
        return;
    }
    /* the status message: static, not owned */
    const char *m = rc == -ENOMEM ? kv_etcd_err_msg(KV_ERR_TOO_MANY_REQUESTS)
                                  : "kvd grpc-proxy: cannot strip the namespace from the answer";
    ev->code = rc == -ENOMEM ? KV_GRPC_RESOURCE_EXHAUSTED : KV_GRPC_INTERNAL;
    ev->buf = (uint8_t *)(uintptr_t)m;
    ev->len = strlen(m);
    ev->buf_free = NULL;
}

/* --namespace: the request as the member must see it (*out NULL: msg as is), or the call
 * finished with etcd's error (-1). */
static int ns_prefix(kv_proxy *p, kv_grpc_call *call, const char *method, const uint8_t *msg,
                     size_t len, uint8_t **out, size_t *olen)
{
    kv_proxy_ns ns;
    *out = NULL;
    if (!kv_proxy_ns_of(p, &ns))
        return 0;
    int rc = kv_proxy_ns_request(&ns, method, msg, len, out, olen);
    if (rc == 0)
        return 0;
    if (rc == -ENODATA)
        kv_grpc_call_finish(call, KV_GRPC_INVALID_ARGUMENT, kv_etcd_err_msg(KV_ERR_EMPTY_KEY));
    else if (rc == -E2BIG)
        kv_grpc_call_finish(call, KV_GRPC_INVALID_ARGUMENT, kv_etcd_err_msg(KV_ERR_TOO_MANY_OPS));
    else if (rc == -EBADMSG)
        kv_grpc_call_finish(call, KV_GRPC_INTERNAL, kv_etcd_err_msg(KV_ERR_GRPC_UNMARSHAL));
    else
        kv_grpc_call_finish(call, KV_GRPC_RESOURCE_EXHAUSTED,
                            kv_etcd_err_msg(KV_ERR_TOO_MANY_REQUESTS));
    return -1;
}

/* --max-recv-bytes: an OK answer over it becomes grpc-go's RESOURCE_EXHAUSTED, as etcd's
 * proxy's client refuses it (never cached, never relayed). */
static void recv_limit(kv_proxy *p, kv_proxy_ev *ev)
{
    char m[96];
    if (ev->code != 0 || !kv_proxy_recv_too_big(p, ev->len, m, sizeof m))
        return;
    char *dup = strdup(m);
    if (ev->buf_free)
        ev->buf_free(ev->buf);
    ev->code = KV_GRPC_RESOURCE_EXHAUSTED;
    ev->buf =
        dup ? (uint8_t *)dup : (uint8_t *)(uintptr_t)kv_etcd_err_msg(KV_ERR_TOO_MANY_REQUESTS);
    ev->len = strlen((const char *)ev->buf);
    ev->buf_free = dup ? free : NULL;
}

/* Sends f's request (again) on the upstream client: 0, or a negative libkvclient code with
 * e set. */
static int send_up(kv_proxy *p, fwd *f, const uint8_t *msg, size_t len, kvc_error *e)
{
    kvc_call_md md;
    kv_proxy_call_md(f->call, &md);
    int rc = kvc_call_unary_start(p->up, f->method, msg, len, kv_proxy_call_timeout(p, f->call),
                                  is_read(f->method) ? KVC_IDEMPOTENT : 0, &md, on_done_io, f,
                                  &f->up, e);
    if (rc == 0) {
        p->unary_pending++;
        kv_metric_set(p->m_unary_pending, p->unary_pending);
    }
    return rc;
}

/* ev's answer replaced by a status (msg static, not owned). */
static void ev_set_error(kv_proxy_ev *ev, int code, const char *msg)
{
    if (ev->buf_free)
        ev->buf_free(ev->buf);
    ev->code = code;
    ev->buf = (uint8_t *)(uintptr_t)msg;
    ev->len = strlen(msg);
    ev->buf_free = NULL;
}

/* --experimental-serializable-ordering, etcd's ordering.NewKV with its endpoint-switching
 * violation func, on Range as well as Txn (etcd 3.4's proxy sends its Ranges through the
 * unordered Do, so only its Txns are ordered): an OK answer raises p->ord_rev to its header
 * revision; a Range or Txn answered below it (a member behind the one that answered before)
 * makes the proxy leave that member (kvc_failover) and send the request again, at most once
 * per endpoint, then is answered ErrNoGreaterRev. Returns 1 when f was sent again (f lives
 * on), else 0 (ev is f's answer, maybe replaced by that error). */
static int ordered(kv_proxy *p, fwd *f, kv_proxy_ev *ev)
{
    int64_t rev;
    if (!f->order || ev->code != 0 || kv_proxy_pb_header_revision(ev->buf, ev->len, &rev) < 0)
        return 0;
    if (rev >= p->ord_rev || f->order < 2) {
        if (rev > p->ord_rev)
            p->ord_rev = rev;
        return 0;
    }
    kv_metric_inc(p->m_ord_violations);
    if (f->call && f->moves < p->cfg->n_endpoints) {
        char why[160];
        snprintf(why, sizeof why,
                 "serializable ordering: answered at revision %lld, %lld seen before",
                 (long long)rev, (long long)p->ord_rev);
        kv_proxy_debug(p, "unary %s: %s", f->method, why);
        kvc_failover(p->up, why);
        f->moves++;
        kvc_error e;
        if (send_up(p, f, f->req, f->req_len, &e) == 0)
            return 1;
    }
    ev_set_error(ev, KV_GRPC_UNKNOWN, ERR_NO_GREATER_REV);
    return 0;
}

void kv_proxy_unary_on_event(kv_proxy *p, kv_proxy_ev *ev)
{
    fwd *f = ev->target;
    (void)kvc_call_cancel(f->up); /* finished: only releases the handle */
    f->up = NULL;
    p->unary_pending--;
    kv_metric_set(p->m_unary_pending, p->unary_pending);
    recv_limit(p, ev);
    if (ordered(p, f, ev)) {
        kv_proxy_ev_free(ev);
        return;
    }
    kv_proxy_debug(p, "unary %s: %s %.200s (%zu bytes)", f->method, kv_grpc_code_name(ev->code),
                   ev->code ? (const char *)ev->buf : "", ev->code ? 0 : ev->len);
    ns_strip(p, f->method, ev);
    /* before the answer: a write's entries are gone when its client hears of it */
    kv_proxy_kvcache_done(p, f->ctag, ev->code, ev->buf, ev->len);
    if (f->call) {
        kv_grpc_call_set_data(f->call, NULL);
        if (ev->code == 0) {
            int rc = kv_grpc_call_send(f->call, ev->buf, ev->len);
            if (rc < 0)
                kv_grpc_call_finish(f->call, KV_GRPC_RESOURCE_EXHAUSTED,
                                    "kvd grpc-proxy: response does not fit the client's buffers");
            else
                kv_grpc_call_finish(f->call, KV_GRPC_OK, NULL);
        } else {
            kv_grpc_call_finish(f->call, ev->code, (const char *)ev->buf);
        }
    }
    fwd_free(f);
    kv_proxy_ev_free(ev);
}

void kv_proxy_unary_on_message(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    kv_proxy *p = kv_grpc_call_app(call);
    const char *method = kv_grpc_call_method(call);
    void *ctag;
    uint8_t *nsmsg;
    size_t nslen;
    if (ns_prefix(p, call, method, msg, len, &nsmsg, &nslen) < 0)
        return;
    if (nsmsg) {
        msg = nsmsg;
        len = nslen;
    }
    if (kv_proxy_kvcache_request(p, call, method, msg, len, &ctag) == 1)
        goto out; /* answered from the range cache */
    if (kv_proxy_send_too_big(p, call, len)) {
        kv_proxy_kvcache_done(p, ctag, KV_GRPC_RESOURCE_EXHAUSTED, NULL, 0);
        goto out;
    }
    if (p->unary_pending >= p->cfg->max_pending_requests) {
        kv_proxy_kvcache_done(p, ctag, KV_GRPC_UNAVAILABLE, NULL, 0);
        kv_proxy_refuse(p, call, KV_PROXY_REFUSED_PENDING_REQUESTS);
        goto out;
    }
    fwd *f = calloc(1, sizeof *f);
    if (!f) {
        kv_proxy_kvcache_done(p, ctag, KV_GRPC_UNAVAILABLE, NULL, 0);
        kv_grpc_call_finish(call, KV_GRPC_RESOURCE_EXHAUSTED, "etcdserver: too many requests");
        goto out;
    }
    f->p = p;
    f->call = call;
    f->ctag = ctag;
    f->method = method;
    f->order = p->cfg->serializable_ordering ? order_of(method) : 0;
    kvc_error e;
    int rc = 0;
    if (f->order == 2) { /* kept to be sent again */
        if (!(f->req = malloc(len ? len : 1)))
            rc = -KVC_RESOURCE_EXHAUSTED;
        else if (len)
            memcpy(f->req, msg, len);
        f->req_len = len;
    }
    if (rc == 0)
        rc = send_up(p, f, msg, len, &e);
    else
        snprintf(e.message, sizeof e.message, "out of memory");
    if (rc != 0) {
        kv_proxy_kvcache_done(p, ctag, KV_GRPC_UNAVAILABLE, NULL, 0);
        fwd_free(f);
        if (-rc == KVC_RESOURCE_EXHAUSTED)
            kv_proxy_refuse(p, call, KV_PROXY_REFUSED_PENDING_REQUESTS);
        else
            kv_grpc_call_finish(call, -rc, e.message);
        goto out;
    }
    kv_grpc_call_set_data(call, f);
    kv_metric_inc(p->m_unary_forwarded);
out:
    free(nsmsg);
}

void kv_proxy_unary_on_cancel(kv_grpc_call *call)
{
    fwd *f = kv_grpc_call_data(call);
    if (!f)
        return;
    kv_proxy *p = f->p;
    kv_grpc_call_set_data(call, NULL);
    f->call = NULL;
    kvc_call *up = f->up;
    f->up = NULL;
    if (kvc_call_cancel(up) != 1)
        return; /* its completion is already on the bridge: the event frees f */
    /* dropped upstream (RST_STREAM CANCEL sent): no completion will come */
    p->unary_pending--;
    kv_metric_set(p->m_unary_pending, p->unary_pending);
    kv_proxy_kvcache_done(p, f->ctag, KV_GRPC_CANCELLED, NULL, 0);
    fwd_free(f);
}

int kv_proxy_unary_init(kv_proxy *p)
{
    p->m_unary_forwarded = kv_metrics_counter(p->metrics, "kvd_proxy_unary_forwarded_total",
                                              "Unary calls forwarded upstream.", NULL);
    p->m_unary_pending = kv_metrics_gauge(p->metrics, "kvd_proxy_unary_pending",
                                          "Unary calls forwarded and not yet answered "
                                          "(bound: --max-pending-requests).",
                                          NULL);
    p->m_ord_violations = kv_metrics_counter(
        p->metrics, "kvd_proxy_ordering_violations_total",
        "Ranges and Txns answered at a revision below one already seen "
        "(--experimental-serializable-ordering: sent again on the next endpoint).",
        NULL);
    return 0;
}
