/*
 * proxy_register.c - the proxy registers itself under --resolver-prefix (etcd 3.4's
 * proxy/grpcproxy/register.go; docs/proxy.md, "Registration").
 *
 * With --resolver-prefix (which requires --advertise-client-url and --resolver-ttl): grant a
 * lease of --resolver-ttl seconds, put <prefix>/<advertise-client-url> = etcd's naming.Update
 * JSON (proxy_naming.h) on it, and keep the lease alive. When the lease is lost (expired
 * while the cluster was away, revoked) or a step fails, start again one second later
 * (etcd's rate limiter: one attempt per second). A put that fails after its grant revokes
 * that lease (best effort). On a clean stop the lease is revoked, so the key goes at once
 * (etcd's session Close); after a kill it goes when the lease expires.
 *
 * All calls go through the proxy's one upstream client (kv_proxy.up): LeaseGrant, Put and
 * LeaseRevoke as raw async unary calls, the keepalive on libkvclient's own shared keepalive
 * stream (kvc_lease_keepalive; one more LeaseKeepAlive stream upstream, beside the proxy's
 * folded one).
 *
 * Threads: the loop, except call_io / ka_io (libkvclient's I/O thread), which only post
 * bridge events. Ownership: kv_proxy_reg is owned by kv_proxy (freed by
 * kv_proxy_register_free once the bridge is drained); one op per call in flight, owned by
 * the call until its KV_PROXY_EV_REG_CALL event, freed by the loop. Staleness: a lost-lease
 * event names its lease id and is ignored unless that lease is the registered one.
 */
#include "proxy/proxy_int.h"
#include "proxy/proxy_naming.h"

#include "rpc.pb-c.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CALL_TIMEOUT_MS 5000
#define RETRY_MS 1000
#define REVOKE_ON_STOP_MS 1000

enum { ST_IDLE = 0, ST_GRANT, ST_PUT, ST_UP };
enum { OP_GRANT = 1, OP_PUT, OP_REVOKE };

struct kv_proxy_reg {
    kv_proxy *p;
    char *key, *val;
    size_t key_len, val_len;
    int state;
    int64_t lease; /* granted (ST_PUT, ST_UP), else 0 */
    kvc_keepalive *ka;
    uv_timer_t retry;
    int closing;
    kv_metric *m_up, *m_registered, *m_lost, *m_failed;
};

typedef struct op {
    kv_proxy_reg *r;
    int kind;
    int64_t lease;
} op;

static void step(kv_proxy_reg *r);

static void call_io(void *arg, int status, const kvc_error *err, uint8_t *resp, size_t len)
{
    op *o = arg;
    int code = status == 0 ? 0 : err ? err->code : -status;
    kv_proxy_bridge_post_reply(&o->r->p->bridge, KV_PROXY_EV_REG_CALL, o, code,
                               err ? err->message : NULL, resp, len, kvc_free);
}

static void ka_io(void *arg, const kvc_ka_event *e)
{
    kv_proxy_reg *r = arg;
    if (e->type != KVC_KA_LOST)
        return;
    kv_proxy_ev *ev = kv_proxy_ev_new(KV_PROXY_EV_REG_LOST, r, 0, &e->id, sizeof e->id);
    if (ev)
        kv_proxy_bridge_post(&r->p->bridge, ev);
}

static void retry_cb(uv_timer_t *h)
{
    step(h->data);
}

/* Back to idle; next attempt in RETRY_MS. */
static void again(kv_proxy_reg *r)
{
    r->state = ST_IDLE;
    r->lease = 0;
    kv_metric_set(r->m_up, 0);
    if (!r->closing)
        uv_timer_start(&r->retry, retry_cb, RETRY_MS, 0);
}

/* One async call about lease (0: none yet); its outcome comes back as KV_PROXY_EV_REG_CALL. */
static int call(kv_proxy_reg *r, int kind, int64_t lease, const char *method, const uint8_t *req,
                size_t len, int flags)
{
    op *o = calloc(1, sizeof *o);
    if (!o)
        return -ENOMEM;
    o->r = r;
    o->kind = kind;
    o->lease = lease;
    kvc_error e;
    int rc =
        kvc_call_unary_async(r->p->up, method, req, len, CALL_TIMEOUT_MS, flags, call_io, o, &e);
    if (rc != 0) {
        fprintf(stderr, "kvd grpc-proxy: warning: registration: %s\n", e.message);
        free(o);
    }
    return rc;
}

static void revoke_async(kv_proxy_reg *r, int64_t id)
{
    Etcdserverpb__LeaseRevokeRequest q = ETCDSERVERPB__LEASE_REVOKE_REQUEST__INIT;
    uint8_t b[16];
    q.id = id;
    size_t n = etcdserverpb__lease_revoke_request__pack(&q, b);
    (void)call(r, OP_REVOKE, id, "/etcdserverpb.Lease/LeaseRevoke", b, n, KVC_IDEMPOTENT);
}

/* The next call of an idle registration: grant a lease. */
static void step(kv_proxy_reg *r)
{
    if (r->closing || r->state != ST_IDLE)
        return;
    Etcdserverpb__LeaseGrantRequest q = ETCDSERVERPB__LEASE_GRANT_REQUEST__INIT;
    uint8_t b[32];
    q.ttl = r->p->cfg->resolver_ttl;
    size_t n = etcdserverpb__lease_grant_request__pack(&q, b);
    r->state = ST_GRANT;
    if (call(r, OP_GRANT, 0, "/etcdserverpb.Lease/LeaseGrant", b, n, 0) != 0) {
        kv_metric_inc(r->m_failed);
        again(r);
    }
}

static void put(kv_proxy_reg *r)
{
    Etcdserverpb__PutRequest q = ETCDSERVERPB__PUT_REQUEST__INIT;
    q.key.data = (uint8_t *)r->key;
    q.key.len = r->key_len;
    q.value.data = (uint8_t *)r->val;
    q.value.len = r->val_len;
    q.lease = r->lease;
    size_t n = etcdserverpb__put_request__get_packed_size(&q);
    uint8_t *b = malloc(n ? n : 1);
    int rc = -ENOMEM;
    if (b) {
        etcdserverpb__put_request__pack(&q, b);
        r->state = ST_PUT;
        /* the same key, value and lease: a replay is harmless */
        rc = call(r, OP_PUT, r->lease, "/etcdserverpb.KV/Put", b, n, KVC_IDEMPOTENT);
        free(b);
    }
    if (rc != 0) {
        kv_metric_inc(r->m_failed);
        revoke_async(r, r->lease);
        again(r);
    }
}

static void on_granted(kv_proxy_reg *r, kv_proxy_ev *ev)
{
    Etcdserverpb__LeaseGrantResponse *g =
        ev->code ? NULL : etcdserverpb__lease_grant_response__unpack(NULL, ev->len, ev->buf);
    if (!g || g->id == 0 || (g->error && g->error[0])) {
        fprintf(stderr, "kvd grpc-proxy: warning: registration: failed to create a session (%s)\n",
                ev->code ? (const char *)ev->buf
                : g      ? g->error
                         : "bad LeaseGrantResponse");
        if (g)
            etcdserverpb__lease_grant_response__free_unpacked(g, NULL);
        kv_metric_inc(r->m_failed);
        again(r);
        return;
    }
    r->lease = g->id;
    etcdserverpb__lease_grant_response__free_unpacked(g, NULL);
    put(r);
}

static void on_put(kv_proxy_reg *r, kv_proxy_ev *ev)
{
    if (ev->code) {
        fprintf(stderr, "kvd grpc-proxy: warning: registration: put %s: %s\n", r->key,
                (const char *)ev->buf);
        kv_metric_inc(r->m_failed);
        revoke_async(r, r->lease);
        again(r);
        return;
    }
    kvc_error e;
    int rc = kvc_lease_keepalive(r->p->up, r->lease, r->p->cfg->resolver_ttl, ka_io, r, &r->ka, &e);
    if (rc != 0) {
        fprintf(stderr, "kvd grpc-proxy: warning: registration: keepalive: %s\n", e.message);
        kv_metric_inc(r->m_failed);
        revoke_async(r, r->lease);
        again(r);
        return;
    }
    r->state = ST_UP;
    kv_metric_set(r->m_up, 1);
    kv_metric_inc(r->m_registered);
    fprintf(stderr, "kvd grpc-proxy: registered \"%s\" with %lld-second lease %llx\n",
            r->p->cfg->advertise_client_url, (long long)r->p->cfg->resolver_ttl,
            (unsigned long long)r->lease);
}

static void on_lost(kv_proxy_reg *r, int64_t id)
{
    if (r->state != ST_UP || id != r->lease)
        return; /* an older lease's */
    kvc_keepalive_stop(r->ka);
    r->ka = NULL;
    kv_metric_inc(r->m_lost);
    fprintf(stderr, "kvd grpc-proxy: warning: registration: session expired; possible network "
                    "partition or server restart; creating a new session to rejoin\n");
    again(r);
}

void kv_proxy_register_on_event(kv_proxy *p, kv_proxy_ev *ev)
{
    kv_proxy_reg *r = p->reg;
    if (ev->kind == KV_PROXY_EV_REG_CALL) {
        op *o = ev->target;
        if (r && !r->closing) {
            if (o->kind == OP_GRANT && r->state == ST_GRANT)
                on_granted(r, ev);
            else if (o->kind == OP_PUT && r->state == ST_PUT && o->lease == r->lease)
                on_put(r, ev);
        }
        free(o);
    } else if (r && !r->closing && ev->len == sizeof(int64_t)) {
        int64_t id;
        memcpy(&id, ev->buf, sizeof id);
        on_lost(r, id);
    }
    kv_proxy_ev_free(ev);
}

int kv_proxy_register_init(kv_proxy *p)
{
    const kv_proxy_config *cfg = p->cfg;
    if (!cfg->resolver_prefix)
        return 0;
    kv_proxy_reg *r = calloc(1, sizeof *r);
    if (!r)
        return -ENOMEM;
    char host[256] = "";
    if (gethostname(host, sizeof host - 1) != 0)
        host[0] = 0;
    /* etcd 3.4 registers through its namespaced client: the key is <namespace><prefix>/<url> */
    const char *ns = cfg->ns ? cfg->ns : "";
    size_t kl = strlen(ns) + strlen(cfg->resolver_prefix) + 1 + strlen(cfg->advertise_client_url);
    r->key = malloc(kl + 1);
    int rc = r->key ? kv_proxy_naming_encode(cfg->advertise_client_url, host, &r->val, &r->val_len)
                    : -ENOMEM;
    if (rc < 0) {
        free(r->key);
        free(r);
        return rc;
    }
    snprintf(r->key, kl + 1, "%s%s/%s", ns, cfg->resolver_prefix, cfg->advertise_client_url);
    r->key_len = kl;
    r->p = p;
    uv_timer_init(p->loop, &r->retry);
    r->retry.data = r;
    kv_metrics *m = p->metrics;
    r->m_up = kv_metrics_gauge(m, "kvd_proxy_registered",
                               "1 while this proxy's key under --resolver-prefix is on a live "
                               "lease.",
                               NULL);
    r->m_registered = kv_metrics_counter(m, "kvd_proxy_registrations_total",
                                         "Registrations done (lease granted, key put).", NULL);
    r->m_lost = kv_metrics_counter(m, "kvd_proxy_registration_leases_lost_total",
                                   "Registration leases lost (expired or revoked): registered "
                                   "again.",
                                   NULL);
    r->m_failed =
        kv_metrics_counter(m, "kvd_proxy_registration_failures_total",
                           "Registration attempts that failed (retried each second).", NULL);
    kv_metric_set(r->m_up, 0);
    p->reg = r;
    return 0;
}

void kv_proxy_register_start(kv_proxy *p)
{
    if (p->reg)
        step(p->reg);
}

void kv_proxy_register_stop(kv_proxy *p)
{
    kv_proxy_reg *r = p->reg;
    if (!r || r->closing)
        return;
    r->closing = 1;
    uv_timer_stop(&r->retry);
    uv_close((uv_handle_t *)&r->retry, NULL);
    if (r->ka) {
        kvc_keepalive_stop(r->ka);
        r->ka = NULL;
    }
    if (r->state == ST_UP && r->lease && p->up) {
        kvc_error e;
        if (kvc_lease_revoke(p->up, r->lease, REVOKE_ON_STOP_MS, NULL, &e) != 0)
            fprintf(stderr, "kvd grpc-proxy: warning: registration: revoke: %s\n", e.message);
    }
    kv_metric_set(r->m_up, 0);
}

void kv_proxy_register_free(kv_proxy *p)
{
    kv_proxy_reg *r = p->reg;
    if (!r)
        return;
    free(r->key);
    free(r->val);
    free(r);
    p->reg = NULL;
}
