/*
 * proxy_health.c - /health on --listen-addr and --metrics-addr, answered as etcd 3.4's proxy
 * answers it (proxy/grpcproxy/health.go checkHealth): a linearizable Range of the key "a" (in
 * the --namespace, as etcd's namespaced client reads it) through the upstream client, deadline
 * 1 s; healthy when it succeeds or is refused with PERMISSION_DENIED (auth on, a user without
 * access: the cluster answered). Anything else, e.g. no member reachable or no leader, is
 * unhealthy, with the member's or libkvclient's message as the reason.
 *
 * The upstream probe (--upstream-probe-interval, 5 s) sends the same Range on a timer, one
 * at a time. A member that answers PINGs but no longer serves (its raft stalled, cut off from
 * its peers: nothing ends the proxy's streams, and watchers alone send no call that could
 * fail) answers it UNAVAILABLE "etcdserver: request timed out" or "etcdserver: no leader"
 * within its request timeout, and libkvclient leaves a connection whose member answered
 * UNAVAILABLE (client/src/call.c): the proxy's streams fail over to the next endpoint
 * (docs/proxy.md, "A member that stopped serving"). A member that has simply seen no write
 * since it stalled answers the read, correctly: its watchers miss nothing.
 *
 * Threads: kv_proxy_health_check and the probe's timer run on the loop (kv_http's hook);
 * health_io and probe_io on libkvclient's I/O thread only post a KV_PROXY_EV_HEALTH or
 * KV_PROXY_EV_PROBE event; the answer is handled on the loop. Ownership: one check per
 * /health request in flight (bounded by the metrics port's connections), freed when
 * answered; kv_http keeps ctx alive until done is called. The probe is the kv_proxy's own
 * (p->probe_inflight: at most one in flight).
 */
#include "proxy/proxy_int.h"

#include "common/status.h"
#include "proxy/proxy_pb.h"

#include "rpc.pb-c.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HEALTH_TIMEOUT_MS 1000
#define HEALTH_KEY "a"
/* the probe waits at most this long: longer than a member's own request timeout (5 s + 2
 * election timeouts), so that the member's answer, not this deadline, ends it */
#define PROBE_TIMEOUT_MS 30000

typedef struct check {
    kv_proxy *p;
    kv_http_health_done_fn done;
    void *ctx;
} check;

static void health_io(void *arg, int status, const kvc_error *err, uint8_t *resp, size_t len)
{
    check *c = arg;
    int code = status == 0 ? 0 : err ? err->code : -status;
    kv_proxy_bridge_post_reply(&c->p->bridge, KV_PROXY_EV_HEALTH, c, code,
                               err ? err->message : NULL, resp, len, kvc_free);
}

/* Sends the linearizable Range of HEALTH_KEY (in the --namespace) up: 0, or a negative errno
 * with err set (kvc_call_unary_async's refusal, or out of memory). */
static int send_range(kv_proxy *p, uint32_t timeout_ms, kvc_unary_cb cb, void *arg, kvc_error *err)
{
    const char *ns = p->cfg->ns ? p->cfg->ns : "";
    size_t nl = strlen(ns), kl = nl + strlen(HEALTH_KEY);
    uint8_t *key = malloc(kl + 1), *req = NULL;
    int rc = -ENOMEM;
    if (!key)
        goto nomem;
    memcpy(key, ns, nl);
    memcpy(key + nl, HEALTH_KEY, strlen(HEALTH_KEY));
    Etcdserverpb__RangeRequest q = ETCDSERVERPB__RANGE_REQUEST__INIT;
    q.key.data = key;
    q.key.len = kl;
    size_t n = etcdserverpb__range_request__get_packed_size(&q);
    if (!(req = malloc(n ? n : 1)))
        goto nomem;
    etcdserverpb__range_request__pack(&q, req);
    rc = kvc_call_unary_async(p->up, "/etcdserverpb.KV/Range", req, n, timeout_ms, 0, cb, arg,
                              err) != 0
             ? -EIO
             : 0;
    free(req);
    free(key);
    return rc;
nomem:
    snprintf(err->message, sizeof err->message, "out of memory");
    free(key);
    return rc;
}

void kv_proxy_health_check(void *app, kv_http_health_done_fn done, void *ctx)
{
    kv_proxy *p = app;
    check *c = malloc(sizeof *c);
    kvc_error e = {0};
    if (!c) {
        done(ctx, 0, "out of memory");
        return;
    }
    c->p = p;
    c->done = done;
    c->ctx = ctx;
    if (send_range(p, HEALTH_TIMEOUT_MS, health_io, c, &e) < 0) {
        free(c);
        done(ctx, 0, e.message);
    }
}

void kv_proxy_health_on_event(kv_proxy *p, kv_proxy_ev *ev)
{
    (void)p;
    check *c = ev->target;
    int ok = ev->code == 0 || ev->code == KV_GRPC_PERMISSION_DENIED;
    c->done(c->ctx, ok, ok ? NULL : (const char *)ev->buf);
    free(c);
    kv_proxy_ev_free(ev);
}

/* ---- the upstream probe (--upstream-probe-interval) ---- */

static void probe_io(void *arg, int status, const kvc_error *err, uint8_t *resp, size_t len)
{
    kv_proxy *p = arg;
    int code = status == 0 ? 0 : err ? err->code : -status;
    kv_proxy_bridge_post_reply(&p->bridge, KV_PROXY_EV_PROBE, p, code, err ? err->message : NULL,
                               resp, len, kvc_free);
}

static void probe_cb(uv_timer_t *t)
{
    kv_proxy *p = t->data;
    kvc_error e = {0};
    if (p->probe_inflight || p->stopping || !p->up)
        return;
    if (send_range(p, PROBE_TIMEOUT_MS, probe_io, p, &e) < 0)
        return; /* libkvclient's queue is full, or no memory: the next tick tries again */
    p->probe_inflight = 1;
    kv_metric_inc(p->m_probes);
}

int kv_proxy_probe_start(kv_proxy *p)
{
    uint32_t every = p->cfg->upstream_probe_interval_ms;
    p->m_probes = kv_metrics_counter(p->metrics, "kvd_proxy_upstream_probes_total",
                                     "Linearizable reads sent to the upstream member by "
                                     "--upstream-probe-interval.",
                                     NULL);
    p->m_probe_failures = kv_metrics_counter(
        p->metrics, "kvd_proxy_upstream_probe_failures_total",
        "Upstream probes that failed; one answered UNAVAILABLE (request timed out, no leader) "
        "also moved the proxy to the next member.",
        NULL);
    if (!every)
        return 0;
    int rc = uv_timer_init(p->loop, &p->probe);
    if (rc < 0)
        return rc;
    p->probe.data = p;
    p->probe_on = 1;
    /* with --experimental-serializable-ordering the first read goes at once: its revision is
     * the floor later answers are held to (etcd's proxy reads "_" before it serves) */
    uv_timer_start(&p->probe, probe_cb, p->cfg->serializable_ordering ? 0 : every, every);
    uv_unref((uv_handle_t *)&p->probe);
    return 0;
}

void kv_proxy_probe_stop(kv_proxy *p)
{
    if (!p->probe_on)
        return;
    p->probe_on = 0;
    uv_close((uv_handle_t *)&p->probe, NULL);
}

void kv_proxy_probe_on_event(kv_proxy *p, kv_proxy_ev *ev)
{
    p->probe_inflight = 0;
    /* Only a member that did not serve the read counts: UNAVAILABLE (request timed out, no
     * leader, the connection lost) or no answer at all. Any other answer came from a member
     * that serves (an auth refusal: with auth on, a member refuses the token-less read only
     * after its read barrier, server/api/auth_gate.c); CANCELLED: the proxy is stopping. */
    /* a linearizable read: a floor for --experimental-serializable-ordering */
    int64_t rev;
    if (ev->code == 0 && kv_proxy_pb_header_revision(ev->buf, ev->len, &rev) == 0 &&
        rev > p->ord_rev)
        p->ord_rev = rev;
    int failed = ev->code == KV_GRPC_UNAVAILABLE || ev->code == KV_GRPC_DEADLINE_EXCEEDED;
    if (failed && !p->stopping)
        kv_metric_inc(p->m_probe_failures);
    if (failed && !p->stopping && !p->probe_failing) /* one line per run of failures */
        fprintf(stderr,
                "kvd grpc-proxy: warning: upstream probe (a linearizable read) failed: %s%s\n",
                (const char *)ev->buf,
                ev->code == KV_GRPC_UNAVAILABLE ? " (the proxy moves to the next endpoint)" : "");
    p->probe_failing = failed;
    kv_proxy_ev_free(ev);
}
