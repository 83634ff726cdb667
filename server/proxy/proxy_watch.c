/*
 * proxy_watch.c - Watch streams relayed one to one (docs/proxy.md, "Watch").
 *
 * Each client Watch stream gets its own upstream Watch stream (a kvc_bidi) on the proxy's
 * one upstream connection; requests go up and responses come back byte for byte. Watchers are
 * not coalesced yet (docs/proxy.md, "Not done yet"). A slow client cannot hold up the others:
 * the upstream bytes are always taken off the connection (libkvclient's I/O thread never
 * waits for the proxy) and queued on that client's own stream, up to --max-send-buffer-bytes;
 * past it the client's stream ends with RESOURCE_EXHAUSTED "etcdserver: too many requests"
 * (kvd_proxy_refused_total{reason="client_send_buffer"}), and only that one. When the upstream
 * stream ends (member died), the client's stream ends with its status (UNAVAILABLE): clientv3
 * re-creates its watchers from their next revision.
 *
 * Ownership: one relay per client stream, owned by the loop. It is freed on the
 * KV_PROXY_EV_WATCH_FREE event the loop posts right after freeing the upstream stream
 * (kvc_bidi_free is synchronous), so every event of that stream was handled before.
 * Bound: --max-watch-streams client streams (kvd_proxy_watch_streams).
 */
#include "proxy/proxy_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WATCH_PATH "/etcdserverpb.Watch/Watch"

typedef struct relay {
    kv_proxy *p;
    kv_grpc_call *call; /* NULL once finished or cancelled */
    kvc_bidi *up;       /* NULL once freed */
    int counted;        /* in p->watch_streams */
} relay;

static void up_msg_io(void *arg, const uint8_t *msg, size_t len)
{
    relay *r = arg;
    kv_proxy_ev *ev = kv_proxy_ev_new(KV_PROXY_EV_WATCH_MSG, r, 0, msg, len);
    if (!ev) /* out of memory: end the stream rather than lose an event silently */
        ev = kv_proxy_ev_new(KV_PROXY_EV_WATCH_END, r, KV_GRPC_RESOURCE_EXHAUSTED, "", 0);
    if (ev)
        kv_proxy_bridge_post(&r->p->bridge, ev);
}

static void up_end_io(void *arg, int status, const kvc_error *err)
{
    relay *r = arg;
    const char *m = err ? err->message : "";
    kv_proxy_ev *ev = kv_proxy_ev_new(KV_PROXY_EV_WATCH_END, r,
                                      status == 0 ? 0 : (err ? err->code : -status), m, strlen(m));
    if (ev)
        kv_proxy_bridge_post(&r->p->bridge, ev);
}

static void uncount(relay *r)
{
    if (!r->counted)
        return;
    r->counted = 0;
    r->p->watch_streams--;
    kv_metric_set(r->p->m_watch_streams, r->p->watch_streams);
}

/* Free the upstream stream and queue the relay's release behind its last event. */
static void release(relay *r)
{
    uncount(r);
    if (r->up) {
        kvc_bidi_free(r->up);
        r->up = NULL;
        kv_proxy_ev *ev = kv_proxy_ev_new(KV_PROXY_EV_WATCH_FREE, r, 0, "", 0);
        if (ev)
            kv_proxy_bridge_post(&r->p->bridge, ev);
        /* else: the relay leaks (out of memory), never a use after free */
    } else {
        free(r);
    }
}

static void finish(relay *r, int code, const char *msg)
{
    if (!r->call)
        return;
    kv_grpc_call_set_data(r->call, NULL);
    kv_grpc_call_finish(r->call, code, msg);
    r->call = NULL;
}

void kv_proxy_watch_on_event(kv_proxy *p, kv_proxy_ev *ev)
{
    relay *r = ev->target;
    (void)p;
    switch (ev->kind) {
    case KV_PROXY_EV_WATCH_MSG:
        if (r->call && kv_grpc_call_send(r->call, ev->buf, ev->len) < 0) {
            kv_grpc_call *call = r->call; /* a slow watcher: only its stream ends */
            kv_grpc_call_set_data(call, NULL);
            r->call = NULL;
            kv_proxy_refuse(r->p, call, KV_PROXY_REFUSED_CLIENT_SEND);
            release(r);
        }
        break;
    case KV_PROXY_EV_WATCH_END:
        if (r->call) {
            finish(r, ev->code, ev->code ? (const char *)ev->buf : NULL);
            release(r);
        }
        break;
    case KV_PROXY_EV_WATCH_FREE:
        free(r);
        break;
    }
    kv_proxy_ev_free(ev);
}

void kv_proxy_watch_on_message(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    kv_proxy *p = kv_grpc_call_app(call);
    relay *r = kv_grpc_call_data(call);
    if (!r) {
        if (p->watch_streams >= p->cfg->max_watch_streams) {
            kv_proxy_refuse(p, call, KV_PROXY_REFUSED_WATCH_STREAMS);
            return;
        }
        r = calloc(1, sizeof *r);
        if (!r) {
            kv_grpc_call_finish(call, KV_GRPC_RESOURCE_EXHAUSTED, "etcdserver: too many requests");
            return;
        }
        r->p = p;
        r->call = call;
        kvc_error e;
        if (kvc_bidi_open(p->up, WATCH_PATH, p->cfg->max_upstream_send_bytes, up_msg_io, up_end_io,
                          r, &r->up, &e) != 0) {
            free(r);
            kv_grpc_call_finish(call, KV_GRPC_UNAVAILABLE, e.message);
            return;
        }
        kv_grpc_call_set_data(call, r);
        r->counted = 1;
        p->watch_streams++;
        kv_metric_set(p->m_watch_streams, p->watch_streams);
        kv_metric_inc(p->m_watch_upstream_opened);
    }
    if (!r->up)
        return;
    kvc_error e;
    if (kvc_bidi_send(r->up, msg, len, &e) == -KVC_RESOURCE_EXHAUSTED) {
        kv_grpc_call_set_data(call, NULL);
        r->call = NULL;
        kv_proxy_refuse(p, call, KV_PROXY_REFUSED_UPSTREAM_SEND);
        release(r);
    }
    /* -KVC_UNAVAILABLE: the stream ended; its end event finishes the client's stream */
}

void kv_proxy_watch_on_half_close(kv_grpc_call *call)
{
    relay *r = kv_grpc_call_data(call);
    if (!r) {
        kv_grpc_call_finish(call, KV_GRPC_OK, NULL);
        return;
    }
    finish(r, KV_GRPC_OK, NULL);
    release(r);
}

void kv_proxy_watch_on_cancel(kv_grpc_call *call)
{
    relay *r = kv_grpc_call_data(call);
    if (!r)
        return;
    r->call = NULL;
    release(r);
}

int kv_proxy_watch_init(kv_proxy *p)
{
    p->m_watch_streams = kv_metrics_gauge(p->metrics, "kvd_proxy_watch_streams",
                                          "Client Watch streams relayed (bound: "
                                          "--max-watch-streams).",
                                          NULL);
    p->m_watch_upstream_opened =
        kv_metrics_counter(p->metrics, "kvd_proxy_watch_upstream_streams_opened_total",
                           "Upstream Watch streams opened.", NULL);
    return 0;
}
