/*
 * proxy_health.c - `/health` on --metrics-addr as etcd 3.4's grpc-proxy answers it
 * (proxy/grpcproxy/health.go, checkHealth): a Range of key "a" through the proxy's upstream
 * connection with a 1 s deadline; healthy when it succeeds or is refused with
 * PERMISSION_DENIED (auth on: the cluster answered), {"health":"false"} otherwise, the
 * upstream's error in the X-Kvd-Health-Reason header (docs/proxy.md, "/health").
 *
 * Ownership: one check per /health request, allocated here, freed on the loop when its
 * KV_PROXY_EV_HEALTH event is handled (the libkvclient callback runs exactly once, on the
 * I/O thread, and only posts). Threads: kv_proxy_health and the event on the loop.
 * Bound: the HTTP server's --metrics-addr connections (kv_http max_connections, 256).
 */
#include "proxy/proxy_int.h"

#include <stdlib.h>
#include <string.h>

#define HEALTH_KEY "a"
#define HEALTH_TIMEOUT_MS 1000

typedef struct hcheck {
    kv_proxy *p;
    kv_http_health_done_fn done;
    void *ctx;
} hcheck;

static void on_range_io(void *arg, int status, const kvc_error *err, kvc_range_result *r)
{
    hcheck *h = arg;
    if (r)
        kvc_range_result_free(r);
    int code = status == 0 ? 0 : (err ? err->code : -status);
    if (code == KVC_PERMISSION_DENIED)
        code = 0;
    const char *m = code && err ? err->message : "";
    kv_proxy_ev *ev = kv_proxy_ev_new(KV_PROXY_EV_HEALTH, h, code, m, strlen(m));
    if (ev)
        kv_proxy_bridge_post(&h->p->bridge, ev);
    /* else: out of memory; the HTTP server answers 503 "timeout" and h leaks */
}

void kv_proxy_health(void *app, kv_http_health_done_fn done, void *ctx)
{
    kv_proxy *p = app;
    hcheck *h = calloc(1, sizeof *h);
    if (!h) {
        done(ctx, 0, "kvd grpc-proxy: out of memory");
        return;
    }
    h->p = p;
    h->done = done;
    h->ctx = ctx;
    kvc_error e;
    if (kvc_get_async(p->up, HEALTH_KEY, strlen(HEALTH_KEY), NULL, HEALTH_TIMEOUT_MS, on_range_io,
                      h, &e) != 0) {
        free(h);
        done(ctx, 0, e.message);
    }
}

void kv_proxy_health_on_event(kv_proxy *p, kv_proxy_ev *ev)
{
    hcheck *h = ev->target;
    (void)p;
    h->done(h->ctx, ev->code == 0, ev->code ? (const char *)ev->buf : NULL);
    free(h);
    kv_proxy_ev_free(ev);
}
