/* grpc_server.c - listener, accept, connection limits, deadline and keepalive timers, and
 * the idle handle that flushes connections touched outside their own read/write callbacks. */
#include "grpc/grpc_internal.h"
#include "net/listen.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void kv_grpc_config_default(kv_grpc_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->max_request_bytes = KV_GRPC_DEFAULT_MAX_REQUEST_BYTES;
    cfg->max_concurrent_streams = 1000;
    cfg->max_send_buffer_bytes = 16u * 1024 * 1024;
    cfg->max_connections = 10000;
    cfg->ping_interval_ms = 0;
    cfg->max_recv_buffer_bytes = 16u * 1024 * 1024;
    cfg->max_response_bytes = KV_GRPC_DEFAULT_MAX_RESPONSE_BYTES;
    cfg->max_buffered_bytes = KV_GRPC_DEFAULT_MAX_BUFFERED_BYTES;
    cfg->handshake_timeout_ms = 10000;
    cfg->max_connection_idle_ms = 0;
    cfg->keepalive_min_time_ms = 5000;
    cfg->ping_timeout_ms = 0;
    cfg->send_stall_timeout_ms = 30000;
    cfg->max_pending_request_bytes = 64u * 1024 * 1024;
}

/* ---- connection FIFOs (handshaking, idle) ---- */

void kv_grpc_list_push(kv_grpc_conn_list *l, kv_grpc_conn *c)
{
    kv_list_insert_tail(&l->list, &c->fifo_link);
    l->n++;
    if (&c->srv->hs == l)
        c->in_hs = 1;
    else
        c->in_idle = 1;
}

void kv_grpc_list_remove(kv_grpc_conn_list *l, kv_grpc_conn *c)
{
    kv_list_remove(&c->fifo_link);
    l->n--;
    if (&c->srv->hs == l)
        c->in_hs = 0;
    else
        c->in_idle = 0;
}

/* The oldest connection of l, NULL if none. */
static kv_grpc_conn *list_first(kv_grpc_conn_list *l)
{
    kv_list *e = kv_list_head(&l->list);
    return e ? kv_list_data(e, kv_grpc_conn, fifo_link) : NULL;
}

/* ---- dirty list + idle flush ---- */

static void idle_cb(uv_idle_t *h)
{
    kv_grpc_server *s = h->data;
    /* First the on_cancel calls that resets made inside other calls' sends owe (oldest
     * first; each one removes its call from the list). */
    while (!kv_list_empty(&s->cancel_due))
        kv_grpc_call_run_due_cancel(
            kv_list_data(kv_list_head(&s->cancel_due), kv_grpc_call, cancel_link));
    /* Each flush unmarks its connection; flushes may mark others (or re-mark) dirty. */
    size_t budget = s->n_conns + 1;
    while (!kv_list_empty(&s->dirty) && budget--)
        kv_grpc_conn_flush(kv_list_data(kv_list_head(&s->dirty), kv_grpc_conn, dirty_link));
    if (kv_list_empty(&s->dirty) && kv_list_empty(&s->cancel_due))
        uv_idle_stop(&s->idle);
}

void kv_grpc_srv_wake(kv_grpc_server *s)
{
    if (!s->closing)
        uv_idle_start(&s->idle, idle_cb);
}

void kv_grpc_srv_mark_dirty(kv_grpc_conn *c)
{
    kv_grpc_server *s = c->srv;
    if (c->dirty || c->closing)
        return;
    c->dirty = 1;
    kv_list_insert_head(&s->dirty, &c->dirty_link);
    if (!s->closing)
        uv_idle_start(&s->idle, idle_cb);
}

void kv_grpc_srv_unmark_dirty(kv_grpc_conn *c)
{
    if (!c->dirty)
        return;
    kv_list_remove(&c->dirty_link);
    c->dirty = 0;
}

/* ---- the housekeeping scan's list ---- */

void kv_grpc_srv_watch(kv_grpc_conn *c)
{
    /* not a pseudo connection (grpc_h2raw.c: on no server list, its real one is watched) */
    if (c->closing || c->raw_call || !kv_list_empty(&c->hk_link))
        return;
    kv_list_insert_head(&c->srv->watched, &c->hk_link);
    kv_metric_gauge_add(c->srv->m_watched, 1);
}

void kv_grpc_srv_unwatch(kv_grpc_conn *c)
{
    if (kv_list_empty(&c->hk_link))
        return;
    kv_list_remove(&c->hk_link);
    kv_metric_gauge_add(c->srv->m_watched, -1);
}

/* 1 while the scan has something to time out on this connection (kv_grpc_srv_watch). */
static int has_watch(const kv_grpc_conn *c)
{
    return c->close_at || c->ping_outstanding || c->writing || c->out_app_bytes || c->owed ||
           c->saturated;
}

/* ---- deadlines: one timer armed for the earliest deadline (O(n) scan of calls that have
 * a deadline; good enough for etcd's few deadline-carrying RPCs, a heap would be next) ---- */

static void deadline_cb(uv_timer_t *t);

static void arm_deadline(kv_grpc_server *s)
{
    uint64_t min = 0;
    kv_list *e;
    kv_list_foreach(e, &s->deadlines) {
        kv_grpc_call *x = kv_list_data(e, kv_grpc_call, dl_link);
        if (!min || x->deadline < min)
            min = x->deadline;
    }
    if (!min || s->closing) {
        uv_timer_stop(&s->deadline_timer);
        return;
    }
    uint64_t now = uv_now(s->loop);
    uv_timer_start(&s->deadline_timer, deadline_cb, min > now ? min - now : 0, 0);
}

static void deadline_cb(uv_timer_t *t)
{
    kv_grpc_server *s = t->data;
    uint64_t now = uv_now(s->loop);
    /* Restart the scan after each expiry: callbacks may remove other entries. */
    for (;;) {
        kv_grpc_call *x = NULL;
        kv_list *e;
        kv_list_foreach(e, &s->deadlines) {
            kv_grpc_call *y = kv_list_data(e, kv_grpc_call, dl_link);
            if (y->deadline <= now) {
                x = y;
                break;
            }
        }
        if (!x)
            break;
        kv_grpc_srv_deadline_remove(x);
        kv_grpc_call_fail(x, KV_GRPC_DEADLINE_EXCEEDED, "context deadline exceeded");
    }
    arm_deadline(s);
}

void kv_grpc_srv_deadline_add(kv_grpc_call *call)
{
    kv_grpc_server *s = call->conn->srv;
    if (call->in_dl || !call->deadline)
        return;
    call->in_dl = 1;
    kv_list_insert_head(&s->deadlines, &call->dl_link);
    uint64_t due = uv_timer_get_due_in(&s->deadline_timer);
    uint64_t now = uv_now(s->loop);
    uint64_t in = call->deadline > now ? call->deadline - now : 0;
    if (!uv_is_active((uv_handle_t *)&s->deadline_timer) || in < due)
        uv_timer_start(&s->deadline_timer, deadline_cb, in, 0);
}

void kv_grpc_srv_deadline_remove(kv_grpc_call *call)
{
    if (!call->in_dl)
        return;
    kv_list_remove(&call->dl_link);
    call->in_dl = 0;
}

/* ---- keepalive ---- */

static void ping_cb(uv_timer_t *t)
{
    kv_grpc_server *s = t->data;
    kv_list *e;
    kv_list_foreach(e, &s->conns) {
        kv_grpc_conn *c = kv_list_data(e, kv_grpc_conn, link);
        if (c->closing || c->http1 || !c->detected) /* no HTTP/2 (yet): grpc_http1.h */
            continue;
        if (c->ping_outstanding) { /* unanswered for a whole interval */
            if (!s->cfg.ping_timeout_ms) {
                kv_metric_inc(s->m_close_ping_timeout);
                kv_grpc_conn_close(c);
            }
            continue;
        }
        if (nghttp2_submit_ping(c->h2, NGHTTP2_FLAG_NONE, NULL) == 0) {
            c->ping_outstanding = 1;
            c->ping_sent_at = uv_now(s->loop);
            kv_grpc_srv_watch(c);
            kv_grpc_srv_mark_dirty(c);
        }
    }
}

/* ---- process-wide cap ---- */

typedef struct cand {
    kv_grpc_call *call;
    size_t bytes;
} cand;

static int cand_cmp(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    if (x->bytes != y->bytes)
        return x->bytes < y->bytes ? 1 : -1;
    return 0;
}

/* Collects calls with bytes(call) > 0, largest first. *out is malloc'd (may be NULL if n=0). */
static size_t collect(kv_grpc_server *s, size_t (*bytes)(kv_grpc_call *, uint64_t), cand **out)
{
    uint64_t now = uv_now(s->loop);
    size_t n = 0, cap = 0;
    cand *v = NULL;
    kv_list *ce, *xe;
    kv_list_foreach(ce, &s->conns) {
        kv_grpc_conn *c = kv_list_data(ce, kv_grpc_conn, link);
        if (c->closing)
            continue;
        kv_list_foreach(xe, &c->calls) {
            kv_grpc_call *x = kv_list_data(xe, kv_grpc_call, link);
            size_t b = bytes(x, now);
            if (!b)
                continue;
            if (n == cap) {
                size_t nc = cap ? cap * 2 : 64;
                cand *nv = realloc(v, nc * sizeof(*v));
                if (!nv)
                    goto done;
                v = nv;
                cap = nc;
            }
            v[n].call = x;
            v[n].bytes = b;
            n++;
        }
    }
done:
    if (n)
        qsort(v, n, sizeof(*v), cand_cmp);
    *out = v;
    return n;
}

/* Output that made no progress for a while (a reader that does not read). */
static size_t stalled_out(kv_grpc_call *x, uint64_t now)
{
    if (x->reset || !kv_grpc_buf_size(&x->outq) || x->out_progress + KV_GRPC_STALL_GRACE_MS > now)
        return 0;
    return kv_grpc_buf_size(&x->outq);
}

int kv_grpc_srv_make_room(kv_grpc_server *s, size_t need, kv_grpc_call *skip)
{
    size_t cap = s->cfg.max_buffered_bytes;
    if (s->buffered + need <= cap)
        return 1;
    cand *v;
    size_t n = collect(s, stalled_out, &v);
    for (size_t i = 0; i < n && s->buffered + need > cap; i++) {
        if (v[i].call == skip || v[i].call->reset)
            continue;
        /* deferred: this runs inside another call's send (kv_grpc_call_reset_deferred) */
        kv_grpc_call_reset_deferred(v[i].call, NGHTTP2_INTERNAL_ERROR, s->m_reset_cap);
    }
    free(v);
    return s->buffered + need <= cap;
}

static size_t inbound(kv_grpc_call *x, uint64_t now)
{
    (void)now;
    if (x->finished)
        return 0;
    return kv_grpc_call_partial_bytes(x) + kv_grpc_buf_size(&x->in_pending);
}

void kv_grpc_srv_shed_inbound(kv_grpc_server *s)
{
    size_t cap = s->cfg.max_buffered_bytes;
    if (s->buffered <= cap)
        return;
    size_t target = cap - cap / 8; /* hysteresis: one scan sheds a batch */
    cand *v;
    size_t n = collect(s, inbound, &v);
    for (size_t i = 0; i < n && s->buffered > target; i++) {
        if (v[i].call->finished)
            continue;
        kv_metric_inc(s->m_ref_cap_recv);
        kv_grpc_call_fail(v[i].call, KV_GRPC_RESOURCE_EXHAUSTED,
                          "grpc: server receive buffer limit exceeded");
    }
    free(v);
}

/* ---- housekeeping: handshake / idle / keepalive timeouts, stalled output ---- */

static void housekeep_cb(uv_timer_t *t)
{
    kv_grpc_server *s = t->data;
    uint64_t now = uv_now(s->loop);
    kv_grpc_conn *h;
    while ((h = list_first(&s->hs)) && h->accepted_at + s->cfg.handshake_timeout_ms <= now) {
        kv_metric_inc(s->m_close_handshake);
        kv_grpc_conn_goaway_close(h, NGHTTP2_NO_ERROR, "handshake timeout");
    }
    while (s->cfg.max_connection_idle_ms && (h = list_first(&s->idle_conns)) &&
           h->idle_since + s->cfg.max_connection_idle_ms <= now) {
        kv_metric_inc(s->m_close_idle);
        kv_grpc_conn_goaway_close(h, NGHTTP2_NO_ERROR, "max_idle");
    }
    uint64_t stall = s->cfg.send_stall_timeout_ms;
    kv_list *ce, *tmp, *xe;
    /* Only the watched connections: the others have nothing that could time out. Nothing in
     * the body takes another connection off the list (frees happen in close callbacks). */
    kv_list_foreach_safe(ce, tmp, &s->watched) {
        kv_grpc_conn *c = kv_list_data(ce, kv_grpc_conn, hk_link);
        if (c->closing || !has_watch(c)) {
            kv_grpc_srv_unwatch(c);
            continue;
        }
        if (!c->h2)
            continue;
        if (c->close_at && now >= c->close_at) {
            kv_grpc_conn_close(c);
            continue;
        }
        if (s->cfg.ping_timeout_ms && c->ping_outstanding &&
            c->ping_sent_at + s->cfg.ping_timeout_ms <= now) {
            kv_metric_inc(s->m_close_ping_timeout);
            kv_grpc_conn_close(c);
            continue;
        }
        if (c->writing && c->wire_progress + stall <= now) { /* the socket takes nothing */
            kv_metric_inc(s->m_close_stalled);
            kv_grpc_conn_close(c);
            continue;
        }
        if (c->out_app_bytes) {
            kv_list_foreach(xe, &c->calls) {
                if (c->closing)
                    break;
                kv_grpc_call *x = kv_list_data(xe, kv_grpc_call, link);
                if (!x->reset && kv_grpc_buf_size(&x->outq) && x->out_progress + stall <= now)
                    kv_grpc_call_reset(x, NGHTTP2_INTERNAL_ERROR, s->m_reset_stalled);
            }
        }
        if (c->owed && !c->closing)
            kv_grpc_conn_sync(c); /* the cap may have room again */
        /* Saturated and nothing delivered for a while: the peer may be spending its window on
         * streams refused at admission while the admitted ones starve (nghttp2's scheduler,
         * e.g. h2load's, favours new streams). Shed the partial unary requests furthest from
         * done until admission reopens. */
        if (c->saturated && !c->closing && c->last_delivery + KV_GRPC_HOUSEKEEP_MS <= now)
            kv_grpc_conn_relieve(c, 1);
    }
}

/* ---- metrics ---- */

static double conn_bytes(const kv_grpc_conn *c)
{
    return (double)(c->in_bytes + c->out_app_bytes + kv_grpc_buf_size(&c->out) +
                    kv_grpc_buf_size(&c->wbuf));
}

static double buffered_max(void *arg)
{
    kv_grpc_server *s = arg;
    double m = 0;
    kv_list *e;
    kv_list_foreach(e, &s->conns) {
        const kv_grpc_conn *c = kv_list_data(e, kv_grpc_conn, link);
        if (conn_bytes(c) > m)
            m = conn_bytes(c);
    }
    return m;
}

static double buffered_total(void *arg)
{
    kv_grpc_server *s = arg;
    double t = 0;
    kv_list *e;
    kv_list_foreach(e, &s->conns)
        t += conn_bytes(kv_list_data(e, kv_grpc_conn, link));
    return t;
}

static double buffered_limit(void *arg)
{
    return (double)((kv_grpc_server *)arg)->cfg.max_buffered_bytes;
}

static double pending_requests(void *arg)
{
    return (double)((kv_grpc_server *)arg)->app_held;
}

static double conns_handshaking(void *arg)
{
    return (double)((kv_grpc_server *)arg)->hs.n;
}

static double conns_idle(void *arg)
{
    return (double)((kv_grpc_server *)arg)->idle_conns.n;
}

static double conns_gated(void *arg)
{
    kv_grpc_server *s = arg;
    double n = 0;
    kv_list *e;
    kv_list_foreach(e, &s->conns) {
        const kv_grpc_conn *c = kv_list_data(e, kv_grpc_conn, link);
        n += c->gated && !c->closing;
    }
    return n;
}

void kv_grpc_srv_count_request(kv_grpc_server *s, kv_grpc_call *call, int status)
{
    if (!s->metrics)
        return;
    const kv_grpc_method *m = call->method;
    kv_grpc_metrics_handled(call, status);
    /* Only method paths from our own table become label values (bounded cardinality). */
    char labels[KV_GRPC_MAX_PATH + 64];
    snprintf(labels, sizeof(labels), "method=\"%s\",code=\"%s\"", m ? m->path : "unknown",
             kv_grpc_code_name(status));
    kv_metric_inc(kv_metrics_counter(s->metrics, "kvd_grpc_requests_total",
                                     "gRPC requests by method and final status code.", labels));
}

static kv_metric *refused(kv_metrics *m, const char *reason)
{
    char labels[64];
    snprintf(labels, sizeof(labels), "reason=\"%s\"", reason);
    return kv_metrics_counter(m, "kvd_grpc_requests_refused_total",
                              "gRPC requests or connections refused by a transport bound.", labels);
}

static void register_metrics(kv_grpc_server *s)
{
    kv_metrics *m = s->metrics;
    if (!m)
        return;
    if (kv_grpc_metrics_init(s) < 0)
        fprintf(stderr, "kvd: warning: out of memory: no per-method gRPC metrics\n");
    s->m_conn_open =
        kv_metrics_gauge(m, "kvd_grpc_connections_open", "Open gRPC connections.", NULL);
    s->m_conn_total =
        kv_metrics_counter(m, "kvd_grpc_connections_total", "Accepted gRPC connections.", NULL);
    s->m_streams_open =
        kv_metrics_gauge(m, "kvd_grpc_streams_open", "Open gRPC streams (calls).", NULL);
    s->m_ref_oversized = refused(m, "oversized");
    s->m_ref_streams = refused(m, "too_many_streams");
    s->m_ref_conn = refused(m, "conn_limit");
    s->m_ref_sendbuf = refused(m, "send_buffer");
    s->m_ref_recvbuf = refused(m, "recv_buffer");
    s->m_ref_resp_size = refused(m, "response_size");
    s->m_ref_cap_send = refused(m, "buffered_cap_send");
    s->m_ref_cap_recv = refused(m, "buffered_cap_recv");
    static const struct {
        const char *reason;
        size_t off;
    } closed[] = {
        {"handshake_timeout", offsetof(kv_grpc_server, m_close_handshake)},
        {"idle_timeout", offsetof(kv_grpc_server, m_close_idle)},
        {"evicted", offsetof(kv_grpc_server, m_close_evicted)},
        {"too_many_pings", offsetof(kv_grpc_server, m_close_pings)},
        {"ping_timeout", offsetof(kv_grpc_server, m_close_ping_timeout)},
        {"send_stalled", offsetof(kv_grpc_server, m_close_stalled)},
    };
    char labels[64];
    for (size_t i = 0; i < sizeof(closed) / sizeof(closed[0]); i++) {
        snprintf(labels, sizeof(labels), "reason=\"%s\"", closed[i].reason);
        *(kv_metric **)((char *)s + closed[i].off) = kv_metrics_counter(
            m, "kvd_grpc_connections_closed_total",
            "gRPC connections closed by the server's timeouts and limits.", labels);
    }
    static const struct {
        const char *reason;
        size_t off;
    } resets[] = {
        {"send_stalled", offsetof(kv_grpc_server, m_reset_stalled)},
        {"buffered_cap", offsetof(kv_grpc_server, m_reset_cap)},
        {"undeliverable", offsetof(kv_grpc_server, m_reset_undeliverable)},
    };
    for (size_t i = 0; i < sizeof(resets) / sizeof(resets[0]); i++) {
        snprintf(labels, sizeof(labels), "reason=\"%s\"", resets[i].reason);
        *(kv_metric **)((char *)s + resets[i].off) =
            kv_metrics_counter(m, "kvd_grpc_streams_reset_total",
                               "gRPC streams reset (RST_STREAM) by the server.", labels);
    }
    s->m_gated_total = kv_metrics_counter(
        m, "kvd_grpc_conn_backpressure_total",
        "Times a connection's request delivery paused because its output was over "
        "max_send_buffer_bytes.",
        NULL);
    s->m_window_withheld =
        kv_metrics_gauge(m, "kvd_grpc_recv_window_withheld_bytes",
                         "Received bytes not yet credited to the peers' connection windows.", NULL);
    s->m_watched = kv_metrics_gauge(
        m, "kvd_grpc_connections_watched",
        "Connections the 250 ms timeout scan looks at: output queued or in flight, a keepalive "
        "PING unanswered, window withheld or a close pending.",
        NULL);
}

/* Per-listener callback gauges, so several servers can share one registry. */
static void register_listener_metrics(kv_grpc_server *s, const char *host, int port)
{
    if (!s->metrics)
        return;
    char labels[160];
    int n = snprintf(labels, sizeof(labels), "listener=\"%.100s:%d\"", host, port);
    for (int i = 10; i < n - 1 && i < (int)sizeof(labels) - 1; i++)
        if (labels[i] == '"' || labels[i] == '\\' || labels[i] == '\n')
            labels[i] = '_';
    kv_metrics_gauge_fn_labeled(s->metrics, "kvd_grpc_conn_buffered_bytes_max",
                                "Largest per-connection buffered bytes (in + out).", labels,
                                buffered_max, s);
    kv_metrics_gauge_fn_labeled(s->metrics, "kvd_grpc_conn_buffered_bytes_total",
                                "Buffered bytes (in + out) over all connections.", labels,
                                buffered_total, s);
    kv_metrics_gauge_fn_labeled(
        s->metrics, "kvd_grpc_buffered_bytes_limit",
        "Cap on buffered bytes over all connections (--max-buffered-bytes).", labels,
        buffered_limit, s);
    kv_metrics_gauge_fn_labeled(s->metrics, "kvd_grpc_pending_request_bytes",
                                "Unary request bytes handed to the app and not yet answered.",
                                labels, pending_requests, s);
    kv_metrics_gauge_fn_labeled(s->metrics, "kvd_grpc_connections_handshaking",
                                "Connections that have not completed a request yet.", labels,
                                conns_handshaking, s);
    kv_metrics_gauge_fn_labeled(s->metrics, "kvd_grpc_connections_idle",
                                "Connections with no open call.", labels, conns_idle, s);
    kv_metrics_gauge_fn_labeled(s->metrics, "kvd_grpc_connections_backpressured",
                                "Connections whose request delivery is paused (output full).",
                                labels, conns_gated, s);
}

/* ---- lifecycle ---- */

static void on_connection(uv_stream_t *l, int status);

int kv_grpc_server_init(kv_grpc_server **out, uv_loop_t *loop, const kv_grpc_config *cfg,
                        const kv_grpc_method *methods, size_t n_methods, void *app,
                        kv_metrics *metrics)
{
    if (!out || !loop || (n_methods && !methods))
        return -EINVAL;
    for (size_t i = 0; i < n_methods; i++)
        if (!methods[i].path || !methods[i].on_message ||
            strlen(methods[i].path) > KV_GRPC_MAX_PATH)
            return -EINVAL;
    kv_grpc_server *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    kv_list_init(&s->hs.list);
    kv_list_init(&s->idle_conns.list);
    kv_list_init(&s->conns);
    kv_list_init(&s->dirty);
    kv_list_init(&s->cancel_due);
    kv_list_init(&s->watched);
    kv_list_init(&s->deadlines);
    kv_grpc_config def;
    kv_grpc_config_default(&def);
    s->cfg = cfg ? *cfg : def;
    if (!s->cfg.max_request_bytes)
        s->cfg.max_request_bytes = def.max_request_bytes;
    if (s->cfg.max_request_bytes > UINT32_MAX)
        s->cfg.max_request_bytes = UINT32_MAX;
    if (!s->cfg.max_concurrent_streams)
        s->cfg.max_concurrent_streams = def.max_concurrent_streams;
    if (!s->cfg.max_send_buffer_bytes)
        s->cfg.max_send_buffer_bytes = def.max_send_buffer_bytes;
    if (!s->cfg.max_connections)
        s->cfg.max_connections = def.max_connections;
    if (!s->cfg.max_recv_buffer_bytes)
        s->cfg.max_recv_buffer_bytes = def.max_recv_buffer_bytes;
    if (!s->cfg.max_buffered_bytes)
        s->cfg.max_buffered_bytes = def.max_buffered_bytes;
    if (!s->cfg.max_response_bytes)
        s->cfg.max_response_bytes = def.max_response_bytes;
    if (s->cfg.max_response_bytes > s->cfg.max_buffered_bytes)
        s->cfg.max_response_bytes = s->cfg.max_buffered_bytes;
    if (s->cfg.max_response_bytes > UINT32_MAX) /* the gRPC length prefix is 32 bits */
        s->cfg.max_response_bytes = UINT32_MAX;
    if (!s->cfg.handshake_timeout_ms)
        s->cfg.handshake_timeout_ms = def.handshake_timeout_ms;
    if (!s->cfg.keepalive_min_time_ms)
        s->cfg.keepalive_min_time_ms = def.keepalive_min_time_ms;
    if (!s->cfg.send_stall_timeout_ms)
        s->cfg.send_stall_timeout_ms = def.send_stall_timeout_ms;
    if (!s->cfg.max_pending_request_bytes)
        s->cfg.max_pending_request_bytes = def.max_pending_request_bytes;
    s->loop = loop;
    s->methods = methods;
    s->n_methods = n_methods;
    s->app = app;
    s->metrics = metrics;
    int rv = -ENOMEM;
    s->rbuf = malloc(KV_GRPC_READ_BUF);
    if (!s->rbuf)
        goto fail;
    rv = kv_grpc_session_callbacks(&s->cbs);
    if (rv < 0)
        goto fail;
    rv = -ENOMEM;
    if (nghttp2_option_new(&s->opt) != 0)
        goto fail;
    nghttp2_option_set_no_auto_window_update(s->opt, 1);
    /* nghttp2's HTTP messaging checks reject what grpc-go clients send in practice, e.g.
     * etcdctl's ":authority: http://127.0.0.1:2379" (a '/' is not valid in an authority),
     * which Go's HTTP/2 server accepts. grpc_call.c does the checks gRPC needs itself
     * (POST, :path, content-type); everything else is framing, which nghttp2 still checks. */
    nghttp2_option_set_no_http_messaging(s->opt, 1);
    /* gRPC does not use stream priorities, so closed streams need not be kept for the
     * priority tree: without this each connection retains up to max-concurrent-streams
     * finished streams (measured: +7 MB over 100 busy connections). */
    nghttp2_option_set_no_closed_streams(s->opt, 1);
    if (s->cfg.no_hpack_dynamic_table)
        nghttp2_option_set_max_deflate_dynamic_table_size(s->opt, 0);
    rv = uv_tcp_init(loop, &s->listener);
    if (rv < 0)
        goto fail;
    s->listener.data = s;
    uv_idle_init(loop, &s->idle);
    s->idle.data = s;
    uv_timer_init(loop, &s->deadline_timer);
    s->deadline_timer.data = s;
    uv_timer_init(loop, &s->ping_timer);
    s->ping_timer.data = s;
    uv_timer_init(loop, &s->housekeep_timer);
    s->housekeep_timer.data = s;
    kv_accept_gate_init(&s->accept_gate, loop, 0, on_connection, s);
    s->open_handles = 6;
    register_metrics(s);
    *out = s;
    return 0;
fail:
    if (s->opt)
        nghttp2_option_del(s->opt);
    if (s->cbs)
        nghttp2_session_callbacks_del(s->cbs);
    free(s->rbuf);
    free(s);
    return rv;
}

static void reject_closed_cb(uv_handle_t *h)
{
    kv_grpc_server *s = h->data;
    free(h);
    s->n_rejecting--;
    kv_grpc_srv_conn_freed(s);
}

static void reject_one(kv_grpc_server *s)
{
    uv_tcp_t *t = malloc(sizeof(*t));
    if (!t || uv_tcp_init(s->loop, t) < 0) {
        free(t);
        return;
    }
    t->data = s;
    s->n_rejecting++;
    uv_accept((uv_stream_t *)&s->listener, (uv_stream_t *)t);
    uv_close((uv_handle_t *)t, reject_closed_cb);
}

static void on_connection(uv_stream_t *l, int status)
{
    kv_grpc_server *s = l->data;
    if (status < 0 || s->closing)
        return;
    if (!kv_accept_gate_admit(&s->accept_gate, l))
        return; /* this iteration's accepts are spent: resumed after the other I/O */
    if (s->n_conns - s->n_closing >= s->cfg.max_connections) {
        /* Idle sockets must not lock active clients out: make room by closing the oldest
         * connection that never completed a request, else the longest idle one. */
        kv_grpc_conn *victim = list_first(&s->hs);
        if (!victim)
            victim = list_first(&s->idle_conns);
        if (!victim) {
            kv_metric_inc(s->m_ref_conn);
            reject_one(s);
            return;
        }
        kv_metric_inc(s->m_close_evicted);
        kv_grpc_conn_goaway_close(victim, NGHTTP2_NO_ERROR, "evicted: connection limit");
    }
    kv_grpc_conn *c;
    if (kv_grpc_conn_start(s, &c) != 0) {
        reject_one(s);
        return;
    }
    if (uv_accept(l, (uv_stream_t *)&c->tcp) < 0 || kv_grpc_conn_begin(c) < 0)
        kv_grpc_conn_close(c);
}

int kv_grpc_server_listen(kv_grpc_server *s, const char *host, int port)
{
    if (!s || s->listening || s->closing)
        return -EINVAL;
    int rv = kv_net_listen(&s->listener, host, port, 511, on_connection);
    if (rv < 0)
        return rv;
    s->listening = 1;
    register_listener_metrics(s, host, kv_grpc_server_port(s));
    if (s->cfg.ping_interval_ms)
        uv_timer_start(&s->ping_timer, ping_cb, s->cfg.ping_interval_ms, s->cfg.ping_interval_ms);
    uv_timer_start(&s->housekeep_timer, housekeep_cb, KV_GRPC_HOUSEKEEP_MS, KV_GRPC_HOUSEKEEP_MS);
    return 0;
}

int kv_grpc_server_port(kv_grpc_server *s)
{
    if (!s || !s->listening)
        return -EINVAL;
    return kv_net_bound_port(&s->listener);
}

size_t kv_grpc_server_connections(kv_grpc_server *s)
{
    return s ? s->n_conns : 0;
}

static int ends(kv_grpc_call *x, const char *header, const char *value)
{
    if (!x->method || !x->method->streaming || !x->app_owned || x->app_done || x->finished)
        return 0;
    const char *v = kv_grpc_call_header(x, header);
    return v && strcmp(v, value) == 0;
}

size_t kv_grpc_server_end_streams(kv_grpc_server *s, const char *header, const char *value,
                                  int grpc_status, const char *msg)
{
    /* Collected first: an app's on_cancel may queue output on other calls (never frees one:
     * calls are freed by the connection's flush, connections in their close callback). */
    size_t n = 0, cap = 0, done = 0;
    kv_list *e, *f;
    kv_list_foreach(e, &s->conns) {
        kv_grpc_conn *c = kv_list_data(e, kv_grpc_conn, link);
        kv_list_foreach(f, &c->calls)
            cap += ends(kv_list_data(f, kv_grpc_call, link), header, value);
    }
    if (cap == 0)
        return 0;
    kv_grpc_call **v = malloc(cap * sizeof *v);
    if (!v)
        return 0; /* retried by the caller's next check */
    kv_list_foreach(e, &s->conns) {
        kv_grpc_conn *c = kv_list_data(e, kv_grpc_conn, link);
        kv_list_foreach(f, &c->calls) {
            kv_grpc_call *x = kv_list_data(f, kv_grpc_call, link);
            if (n < cap && ends(x, header, value))
                v[n++] = x;
        }
    }
    for (size_t i = 0; i < n; i++)
        if (ends(v[i], header, value)) {
            kv_grpc_call_fail(v[i], grpc_status, msg);
            done++;
        }
    free(v);
    return done;
}

static void maybe_finalize(kv_grpc_server *s)
{
    if (!s->closing || s->open_handles || !kv_list_empty(&s->conns) || s->n_rejecting)
        return;
    void (*cb)(void *) = s->close_cb;
    void *arg = s->close_arg;
    nghttp2_option_del(s->opt);
    nghttp2_session_callbacks_del(s->cbs);
    kv_grpc_metrics_free(s);
    free(s->rbuf);
    free(s);
    if (cb)
        cb(arg);
}

void kv_grpc_srv_conn_freed(kv_grpc_server *s)
{
    maybe_finalize(s);
}

static void handle_closed_cb(uv_handle_t *h)
{
    kv_grpc_server *s = h->data;
    s->open_handles--;
    maybe_finalize(s);
}

void kv_grpc_server_close(kv_grpc_server *s, void (*cb)(void *arg), void *arg)
{
    if (!s || s->closing)
        return;
    s->closing = 1;
    s->close_cb = cb;
    s->close_arg = arg;
    kv_metrics_gauge_fn_remove(s->metrics, s);
    uv_close((uv_handle_t *)&s->listener, handle_closed_cb);
    kv_accept_gate_close(&s->accept_gate, handle_closed_cb);
    uv_close((uv_handle_t *)&s->idle, handle_closed_cb);
    uv_close((uv_handle_t *)&s->deadline_timer, handle_closed_cb);
    uv_close((uv_handle_t *)&s->ping_timer, handle_closed_cb);
    uv_close((uv_handle_t *)&s->housekeep_timer, handle_closed_cb);
    kv_list *e;
    kv_list_foreach(e, &s->conns)
        kv_grpc_conn_close(kv_list_data(e, kv_grpc_conn, link));
}
