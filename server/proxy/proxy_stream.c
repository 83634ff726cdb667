/*
 * proxy_stream.c - server-streaming calls relayed one to one: Election.Observe
 * (docs/proxy.md, "Election, lock, auth") and Maintenance.Snapshot (docs/proxy.md,
 * "Snapshot").
 *
 * The client's one request goes up on its own upstream stream (a kvc_bidi on the proxy's one
 * connection, with the client's token and hasleader metadata); every response message comes
 * back byte for byte, and the upstream's end (status and message) ends the client's call.
 * The client's half-close is expected right after its request and ends nothing. As for Watch,
 * a client that does not read cannot hold up the others: its queue past
 * --max-send-buffer-bytes ends only its call with RESOURCE_EXHAUSTED "etcdserver: too many
 * requests" (kvd_proxy_refused_total{reason="client_send_buffer"}).
 *
 * Ownership: one relay per client call, owned by the loop, freed on the
 * KV_PROXY_EV_STREAM_FREE event posted right after its upstream stream is freed
 * (kvc_bidi_free is synchronous: every event of the stream is already in the bridge).
 * Bound: --max-watch-streams relays (kvd_proxy_observe_streams), apart from the Watch relays.
 *
 * Snapshot flow control: a snapshot is large and its reader may be slow, so instead of
 * ending the call at the send bound, the relay stops reading the upstream stream
 * (kvc_bidi_set_recv_paused: no WINDOW_UPDATE to the member) once the client's unsent bytes
 * (kv_grpc_call_send_queued) pass --max-snapshot-buffer-bytes, polls them every
 * SNAP_POLL_MS, and resumes at half the bound. The loop alone would see the bound too late
 * when it falls behind the I/O thread (a busy or descheduled loop: the I/O thread credits
 * the member's window as DATA arrives, so the bridge would fill at the network's speed), so
 * the I/O thread pauses the stream itself as soon as the bytes it posted and the loop has
 * not handled (bridged) pass half the bound, and flags it (io_held) for the loop, which
 * owns the resume: it resumes only when the client's queue is at half the bound and the
 * bridge at a quarter. Every message the I/O thread posts over that mark pauses again, so
 * a resume racing a pause costs at most one more stream window. A relay holds at most:
 * the bound plus one message in the client's queue, half the bound plus one stream window
 * (1 MiB) plus one message in the bridge.
 * The poll timer is a separate allocation (uv_close is asynchronous): its data is NULLed
 * when the relay is released and the close callback frees only the handle.
 */
#include "proxy/proxy_int.h"

#include "common/etcd_errors.h"
#include "grpc/grpc_wire.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define SNAP_PATH "/etcdserverpb.Maintenance/Snapshot"
#define SNAP_POLL_MS 5

typedef struct srelay {
    kv_proxy *p;
    kv_grpc_call *call;    /* NULL once finished or cancelled */
    kvc_bidi *up;          /* NULL once freed */
    int counted;           /* in p->observe_streams */
    int snapshot;          /* Maintenance.Snapshot: flow control instead of the send bound */
    int paused;            /* loop: upstream receive paused, poll running (snapshot) */
    atomic_size_t bridged; /* snapshot: bytes posted by the I/O thread, not yet handled */
    atomic_int io_held;    /* snapshot: the I/O thread paused the stream; the loop resumes */
    uv_timer_t *poll;      /* snapshot: drain poll while paused; NULL until first pause */
} srelay;

static void poll_closed(uv_handle_t *h)
{
    free(h);
}

/* Snapshot: resume reading the member once the client took half of its queue. */
static void on_poll(uv_timer_t *t)
{
    srelay *r = t->data;
    if (!r || !r->paused || !r->call || !r->up)
        return;
    size_t bound = r->p->cfg->max_snapshot_buffer_bytes;
    if (kv_grpc_call_send_queued(r->call) > bound / 2 || atomic_load(&r->bridged) > bound / 4)
        return;
    r->paused = 0;
    uv_timer_stop(t);
    atomic_store(&r->io_held, 0); /* before the resume: a pause after it is seen again */
    kvc_bidi_set_recv_paused(r->up, 0);
}

/* Snapshot: after a send, stop reading the member while the client's queue is over the
 * bound, or start the resume poll when the I/O thread paused it. Returns 0 or -ENOMEM. */
static int snap_check(srelay *r)
{
    if (r->paused)
        return 0;
    if (!atomic_load(&r->io_held) &&
        kv_grpc_call_send_queued(r->call) <= r->p->cfg->max_snapshot_buffer_bytes)
        return 0;
    if (!r->poll) {
        r->poll = malloc(sizeof *r->poll);
        if (!r->poll)
            return -ENOMEM;
        uv_timer_init(r->p->loop, r->poll);
        r->poll->data = r;
    }
    r->paused = 1;
    kv_metric_inc(r->p->m_snapshot_paused);
    kvc_bidi_set_recv_paused(r->up, 1);
    uv_timer_start(r->poll, on_poll, SNAP_POLL_MS, SNAP_POLL_MS);
    return 0;
}

static void up_msg_io(void *arg, const uint8_t *msg, size_t len)
{
    srelay *r = arg;
    if (r->snapshot &&
        atomic_fetch_add(&r->bridged, len) + len > r->p->cfg->max_snapshot_buffer_bytes / 2) {
        kvc_bidi_set_recv_paused(r->up, 1); /* on the I/O thread: at once, no wait */
        atomic_store(&r->io_held, 1);       /* before the post: the loop sees it with it */
    }
    kv_proxy_ev *ev = kv_proxy_ev_new(KV_PROXY_EV_STREAM_MSG, r, 0, msg, len);
    if (!ev) /* out of memory: end the call rather than lose a message silently */
        ev = kv_proxy_ev_new(KV_PROXY_EV_STREAM_END, r, KV_GRPC_RESOURCE_EXHAUSTED, "", 0);
    if (ev)
        kv_proxy_bridge_post(&r->p->bridge, ev);
}

static void up_end_io(void *arg, int status, const kvc_error *err)
{
    srelay *r = arg;
    const char *m = err ? err->message : "";
    kv_proxy_ev *ev = kv_proxy_ev_new(KV_PROXY_EV_STREAM_END, r,
                                      status == 0 ? 0 : (err ? err->code : -status), m, strlen(m));
    if (ev)
        kv_proxy_bridge_post(&r->p->bridge, ev);
}

static void release(srelay *r)
{
    if (r->poll) {
        uv_timer_stop(r->poll);
        r->poll->data = NULL;
        uv_close((uv_handle_t *)r->poll, poll_closed);
        r->poll = NULL;
    }
    if (r->counted) {
        r->counted = 0;
        r->p->observe_streams--;
        kv_metric_set(r->p->m_observe_streams, r->p->observe_streams);
    }
    if (!r->up) {
        free(r);
        return;
    }
    kvc_bidi_free(r->up);
    r->up = NULL;
    kv_proxy_ev *ev = kv_proxy_ev_new(KV_PROXY_EV_STREAM_FREE, r, 0, "", 0);
    if (ev)
        kv_proxy_bridge_post(&r->p->bridge, ev);
    /* else: the relay leaks (out of memory), never a use after free */
}

/* Detach the client call and end it with code/msg (refuse: count it as a bound's refusal). */
static void end_call(srelay *r, int code, const char *msg, int refuse)
{
    kv_grpc_call *call = r->call;
    if (!call)
        return;
    r->call = NULL;
    kv_grpc_call_set_data(call, NULL);
    if (refuse)
        kv_proxy_refuse(r->p, call, KV_PROXY_REFUSED_CLIENT_SEND);
    else
        kv_grpc_call_finish(call, code, msg);
}

void kv_proxy_stream_on_event(kv_proxy *p, kv_proxy_ev *ev)
{
    srelay *r = ev->target;
    switch (ev->kind) {
    case KV_PROXY_EV_STREAM_MSG: {
        char m[96];
        if (r->snapshot)
            atomic_fetch_sub(&r->bridged, ev->len);
        if (r->call && kv_proxy_recv_too_big(p, ev->len, m, sizeof m)) {
            end_call(r, KV_GRPC_RESOURCE_EXHAUSTED, m, 0); /* --max-recv-bytes */
            release(r);
        } else if (r->call && kv_grpc_call_send(r->call, ev->buf, ev->len) < 0) {
            end_call(r, 0, NULL, 1); /* a client that does not read: only its call ends */
            release(r);
        } else if (r->call && r->snapshot && snap_check(r) < 0) {
            end_call(r, KV_GRPC_RESOURCE_EXHAUSTED, kv_etcd_err_msg(KV_ERR_TOO_MANY_REQUESTS), 0);
            release(r);
        }
        break;
    }
    case KV_PROXY_EV_STREAM_END:
        if (r->call) {
            kv_proxy_debug(p, "stream %s ended: %s %.200s", kv_grpc_call_method(r->call),
                           kv_grpc_code_name(ev->code), ev->code ? (const char *)ev->buf : "");
            end_call(r, ev->code, ev->code ? (const char *)ev->buf : NULL, 0);
            release(r);
        }
        break;
    case KV_PROXY_EV_STREAM_FREE:
        free(r);
        break;
    }
    kv_proxy_ev_free(ev);
}

void kv_proxy_stream_on_message(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    kv_proxy *p = kv_grpc_call_app(call);
    if (kv_grpc_call_data(call)) { /* a server-streaming call carries one request */
        srelay *r = kv_grpc_call_data(call);
        end_call(r, KV_GRPC_INVALID_ARGUMENT, "kvd grpc-proxy: more than one request message", 0);
        release(r);
        return;
    }
    if (p->observe_streams >= p->cfg->max_watch_streams) {
        kv_proxy_refuse(p, call, KV_PROXY_REFUSED_WATCH_STREAMS);
        return;
    }
    if (kv_proxy_send_too_big(p, call, len))
        return;
    srelay *r = calloc(1, sizeof *r);
    if (!r) {
        kv_grpc_call_finish(call, KV_GRPC_RESOURCE_EXHAUSTED,
                            kv_etcd_err_msg(KV_ERR_TOO_MANY_REQUESTS));
        return;
    }
    r->p = p;
    r->call = call;
    r->snapshot = strcmp(kv_grpc_call_method(call), SNAP_PATH) == 0;
    kvc_call_md md;
    kv_proxy_call_md(call, &md);
    kvc_error e;
    if (kvc_bidi_open_md(p->up, kv_grpc_call_method(call), p->cfg->max_upstream_send_bytes, &md,
                         up_msg_io, up_end_io, r, &r->up, &e) != 0) {
        free(r);
        kv_grpc_call_finish(call, KV_GRPC_UNAVAILABLE, e.message);
        return;
    }
    kv_grpc_call_set_data(call, r);
    r->counted = 1;
    p->observe_streams++;
    kv_metric_set(p->m_observe_streams, p->observe_streams);
    if (kvc_bidi_send(r->up, msg, len, &e) != 0) {
        end_call(r, KV_GRPC_UNAVAILABLE, e.message, 0);
        release(r);
    }
}

void kv_proxy_stream_on_half_close(kv_grpc_call *call)
{
    if (!kv_grpc_call_data(call)) /* half-closed without a request */
        kv_grpc_call_finish(call, KV_GRPC_INVALID_ARGUMENT,
                            "kvd grpc-proxy: stream closed before its request");
    /* else: expected after the request; the upstream's end ends the call */
}

void kv_proxy_stream_on_cancel(kv_grpc_call *call)
{
    srelay *r = kv_grpc_call_data(call);
    if (!r)
        return;
    r->call = NULL;
    release(r);
}

int kv_proxy_stream_init(kv_proxy *p)
{
    p->m_observe_streams = kv_metrics_gauge(p->metrics, "kvd_proxy_observe_streams",
                                            "Client Election.Observe and Maintenance.Snapshot "
                                            "streams relayed (bound: --max-watch-streams).",
                                            NULL);
    p->m_snapshot_paused = kv_metrics_counter(
        p->metrics, "kvd_proxy_snapshot_upstream_paused_total",
        "Times a Maintenance.Snapshot relay stopped reading the member because its client's "
        "unsent bytes passed --max-snapshot-buffer-bytes.",
        NULL);
    return 0;
}
