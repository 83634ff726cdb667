/*
 * proxy_bridge.h - the hand-off from libkvclient's I/O thread to the proxy's loop: a
 * mutex-protected FIFO of events and a uv_async_t (docs/proxy.md, "Threads").
 *
 * Contract:
 * - kv_proxy_bridge_post may be called from any thread (libkvclient's callbacks, or the loop
 *   itself to queue a release marker behind every earlier event); it never blocks on the
 *   loop. Events are handled on the loop thread, in posting order, by the handler given to
 *   kv_proxy_bridge_init, which takes ownership of each event (kv_proxy_ev_free).
 * - Size: one event per upstream answer or stream message. Its count is bounded by what the
 *   proxy asked for (pending unary calls, renewals) and, for watch streams, by the upstream
 *   stream's flow control; the loop drains the whole queue at each wake-up. The current length
 *   is exported as kvd_proxy_bridge_queued.
 * - kv_proxy_bridge_drain handles every queued event synchronously (shutdown, after the
 *   upstream client is closed, when no thread posts any more).
 */
#ifndef KV_PROXY_BRIDGE_H
#define KV_PROXY_BRIDGE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

enum kv_proxy_ev_kind {
    KV_PROXY_EV_UNARY = 1,   /* a forwarded unary call finished (target: its fwd) */
    KV_PROXY_EV_LEASE_MSG,   /* a LeaseKeepAliveResponse on the upstream stream (target: tag) */
    KV_PROXY_EV_LEASE_END,   /* the upstream keepalive stream ended (target: tag) */
    KV_PROXY_EV_WATCH_MSG,   /* a WatchResponse for one client's stream (target: its relay) */
    KV_PROXY_EV_WATCH_END,   /* that upstream Watch stream ended */
    KV_PROXY_EV_WATCH_FREE,  /* posted by the loop after freeing an upstream stream: every
                                event of it was handled, the relay may go */
    KV_PROXY_EV_CACHE_MSG,   /* a WatchResponse of the range cache's watch (target: its tag) */
    KV_PROXY_EV_CACHE_END,   /* that stream ended */
    KV_PROXY_EV_CACHE_FREE,  /* posted by the loop after freeing that stream */
    KV_PROXY_EV_STREAM_MSG,  /* a message of a server-streaming relay (proxy_stream.c) */
    KV_PROXY_EV_STREAM_END,  /* that upstream stream ended */
    KV_PROXY_EV_STREAM_FREE, /* as KV_PROXY_EV_WATCH_FREE, for that relay */
    KV_PROXY_EV_REG_CALL,    /* a registration call finished (target: its op) */
    KV_PROXY_EV_REG_LOST,    /* the registration lease was lost (buf: its id) */
    KV_PROXY_EV_CLUSTER,     /* the range of a MemberList finished (target: its op) */
    KV_PROXY_EV_HEALTH,      /* the range of a /health check finished (target: its check) */
    KV_PROXY_EV_PROBE,       /* the upstream probe's range finished (target: the kv_proxy) */
};

typedef struct kv_proxy_ev {
    struct kv_proxy_ev *next;
    int kind;     /* enum kv_proxy_ev_kind */
    void *target; /* the loop-side object the event is for */
    int code;     /* gRPC status code (0 = OK) of an end or a unary completion */
    uint8_t *buf; /* message bytes, or the status message (NUL-terminated) when code != 0 */
    size_t len;
    void (*buf_free)(void *); /* how buf is freed (free or kvc_free); NULL: not owned */
} kv_proxy_ev;

/* New event with a copy of data[0..len) (+ a NUL). NULL on out-of-memory. Any thread. */
kv_proxy_ev *kv_proxy_ev_new(int kind, void *target, int code, const void *data, size_t len);
void kv_proxy_ev_free(kv_proxy_ev *ev);

typedef struct kv_proxy_bridge {
    uv_async_t async;
    pthread_mutex_t mu;
    kv_proxy_ev *head, *tail; /* mu */
    size_t queued;            /* mu */
    void (*handle)(void *app, kv_proxy_ev *ev);
    void *app;
} kv_proxy_bridge;

/* Loop thread. handle takes each event's ownership. Returns 0 or a negative libuv error. */
int kv_proxy_bridge_init(kv_proxy_bridge *b, uv_loop_t *loop,
                         void (*handle)(void *app, kv_proxy_ev *ev), void *app);
/* Any thread. ev non-NULL, owned by the bridge from here on. */
void kv_proxy_bridge_post(kv_proxy_bridge *b, kv_proxy_ev *ev);
/* Loop thread: handles every queued event now. */
void kv_proxy_bridge_drain(kv_proxy_bridge *b);
/* Loop thread: closes the async handle (b must stay valid until the loop ran its close). */
void kv_proxy_bridge_close(kv_proxy_bridge *b);
size_t kv_proxy_bridge_queued(kv_proxy_bridge *b);

/* Any thread (a libkvclient unary callback): posts the outcome of a unary call to target.
 * code 0: resp[0..len) is the reply, owned by the event from here on and freed with
 * resp_free; otherwise resp is freed and the event carries code and msg (NULL: ""). Out of
 * memory posts RESOURCE_EXHAUSTED without the reply, or nothing if even that fails (the
 * client's call then ends at its deadline or its cancel). */
void kv_proxy_bridge_post_reply(kv_proxy_bridge *b, int kind, void *target, int code,
                                const char *msg, uint8_t *resp, size_t len,
                                void (*resp_free)(void *));

#endif
