/*
 * proxy_health.c - /health on --metrics-addr, answered as etcd 3.4's proxy answers it
 * (proxy/grpcproxy/health.go checkHealth): a linearizable Range of the key "a" (in the
 * --namespace, as etcd's namespaced client reads it) through the upstream client, deadline
 * 1 s; healthy when it succeeds or is refused with PERMISSION_DENIED (auth on, a user without
 * access: the cluster answered). Anything else, e.g. no member reachable or no leader, is
 * unhealthy, with the member's or libkvclient's message as the reason.
 *
 * Threads: kv_proxy_health_check runs on the loop (kv_http's hook); health_io on libkvclient's
 * I/O thread only posts a KV_PROXY_EV_HEALTH event; the answer is given on the loop.
 * Ownership: one check per /health request in flight (bounded by the metrics port's
 * connections), freed when answered. kv_http keeps ctx alive until done is called.
 */
#include "proxy/proxy_int.h"

#include "common/status.h"

#include "rpc.pb-c.h"

#include <stdlib.h>
#include <string.h>

#define HEALTH_TIMEOUT_MS 1000
#define HEALTH_KEY "a"

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

void kv_proxy_health_check(void *app, kv_http_health_done_fn done, void *ctx)
{
    kv_proxy *p = app;
    const char *ns = p->cfg->ns ? p->cfg->ns : "";
    size_t kl = strlen(ns) + strlen(HEALTH_KEY);
    check *c = malloc(sizeof *c);
    uint8_t *key = malloc(kl + 1), *req = NULL;
    kvc_error e = {0};
    if (!c || !key)
        goto nomem;
    memcpy(key, ns, strlen(ns));
    memcpy(key + strlen(ns), HEALTH_KEY, strlen(HEALTH_KEY));
    Etcdserverpb__RangeRequest q = ETCDSERVERPB__RANGE_REQUEST__INIT;
    q.key.data = key;
    q.key.len = kl;
    size_t n = etcdserverpb__range_request__get_packed_size(&q);
    if (!(req = malloc(n ? n : 1)))
        goto nomem;
    etcdserverpb__range_request__pack(&q, req);
    c->p = p;
    c->done = done;
    c->ctx = ctx;
    if (kvc_call_unary_async(p->up, "/etcdserverpb.KV/Range", req, n, HEALTH_TIMEOUT_MS, 0,
                             health_io, c, &e) != 0) {
        free(c);
        done(ctx, 0, e.message);
    }
    free(req);
    free(key);
    return;
nomem:
    free(c);
    free(key);
    done(ctx, 0, "out of memory");
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
