/* grpc_conn.c - one client connection: socket I/O, batching, nghttp2 session callbacks. */
#include "grpc/grpc_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static kv_grpc_call *stream_call(nghttp2_session *h2, int32_t stream_id)
{
    return nghttp2_session_get_stream_user_data(h2, stream_id);
}

/* ---- nghttp2 callbacks (never free anything here) ---- */

static int on_begin_headers(nghttp2_session *h2, const nghttp2_frame *frame, void *ud)
{
    kv_grpc_conn *c = ud;
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    kv_grpc_call *call = kv_grpc_call_new(c, frame->hd.stream_id);
    if (!call)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* RST_STREAM INTERNAL_ERROR */
    nghttp2_session_set_stream_user_data(h2, frame->hd.stream_id, call);
    return 0;
}

static int on_header(nghttp2_session *h2, const nghttp2_frame *frame, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags, void *ud)
{
    (void)flags;
    (void)ud;
    if (frame->hd.type != NGHTTP2_HEADERS)
        return 0;
    kv_grpc_call *call = stream_call(h2, frame->hd.stream_id);
    if (!call)
        return 0;
    if (kv_grpc_call_on_header(call, name, namelen, value, valuelen) != 0)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    return 0;
}

/* grpc-go's keepalive enforcement (http2_server.go handlePing): a PING closer than
 * keepalive_min_time to the previous one (2 h when no call is open: PermitWithoutStream is
 * false, as in etcd) is a strike, unless we sent HEADERS or DATA since; more than 2 strikes ->
 * GOAWAY ENHANCE_YOUR_CALM "too_many_pings". nghttp2 acks the PING itself. */
static void on_client_ping(kv_grpc_conn *c)
{
    kv_grpc_server *s = c->srv;
    uint64_t now = uv_now(s->loop);
    uint64_t last = c->last_ping_recv;
    c->last_ping_recv = now ? now : 1;
    if (c->reset_strikes) {
        c->reset_strikes = 0;
        c->ping_strikes = 0;
        return;
    }
    uint64_t min = c->n_calls ? s->cfg.keepalive_min_time_ms : KV_GRPC_PING_NOSTREAM_MS;
    if (last && last + min > now)
        c->ping_strikes++;
    if (c->ping_strikes > KV_GRPC_MAX_PING_STRIKES) {
        kv_metric_inc(s->m_close_pings);
        nghttp2_submit_goaway(c->h2, NGHTTP2_FLAG_NONE,
                              nghttp2_session_get_last_proc_stream_id(c->h2),
                              NGHTTP2_ENHANCE_YOUR_CALM, (const uint8_t *)"too_many_pings", 14);
        c->close_after_write = 1;
        c->close_at = now + KV_GRPC_CLOSE_GRACE_MS;
        kv_grpc_srv_watch(c);
    }
}

static int on_frame_recv(nghttp2_session *h2, const nghttp2_frame *frame, void *ud)
{
    kv_grpc_conn *c = ud;
    kv_grpc_call *call;
    switch (frame->hd.type) {
    case NGHTTP2_HEADERS:
        call = stream_call(h2, frame->hd.stream_id);
        if (!call)
            return 0;
        if (frame->headers.cat == NGHTTP2_HCAT_REQUEST)
            kv_grpc_call_on_headers_done(call);
        if (frame->hd.flags & NGHTTP2_FLAG_END_STREAM)
            kv_grpc_call_on_remote_close(call);
        break;
    case NGHTTP2_DATA:
        if (!(frame->hd.flags & NGHTTP2_FLAG_END_STREAM))
            return 0;
        call = stream_call(h2, frame->hd.stream_id);
        if (call)
            kv_grpc_call_on_remote_close(call);
        break;
    case NGHTTP2_PING:
        if (frame->hd.flags & NGHTTP2_FLAG_ACK)
            c->ping_outstanding = 0;
        else
            on_client_ping(c);
        break;
    default:
        break;
    }
    return 0;
}

static int on_data_chunk_recv(nghttp2_session *h2, uint8_t flags, int32_t stream_id,
                              const uint8_t *data, size_t len, void *ud)
{
    (void)flags;
    (void)ud;
    kv_grpc_call *call = stream_call(h2, stream_id);
    if (!call) {
        nghttp2_session_consume(h2, stream_id, len);
        return 0;
    }
    kv_grpc_call_on_data(call, data, len);
    return 0;
}

static int on_frame_send(nghttp2_session *h2, const nghttp2_frame *frame, void *ud)
{
    kv_grpc_conn *c = ud;
    if (frame->hd.type == NGHTTP2_HEADERS || frame->hd.type == NGHTTP2_DATA)
        c->reset_strikes = 1;
    if ((frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA) ||
        !(frame->hd.flags & NGHTTP2_FLAG_END_STREAM))
        return 0;
    kv_grpc_call *call = stream_call(h2, frame->hd.stream_id);
    /* We are done but the client is still sending: tell it to stop (grpc-go does the same). */
    if (call && !call->remote_closed)
        nghttp2_submit_rst_stream(h2, NGHTTP2_FLAG_NONE, frame->hd.stream_id, NGHTTP2_NO_ERROR);
    return 0;
}

static int on_stream_close(nghttp2_session *h2, int32_t stream_id, uint32_t error_code, void *ud)
{
    (void)error_code;
    (void)ud;
    kv_grpc_call *call = stream_call(h2, stream_id);
    if (!call)
        return 0;
    nghttp2_session_set_stream_user_data(h2, stream_id, NULL);
    kv_grpc_call_on_stream_close(call);
    return 0;
}

static int on_invalid_frame_recv(nghttp2_session *h2, const nghttp2_frame *frame,
                                 int lib_error_code, void *ud)
{
    (void)h2;
    kv_grpc_conn *c = ud;
    if (frame->hd.type == NGHTTP2_HEADERS && lib_error_code == NGHTTP2_ERR_REFUSED_STREAM)
        kv_metric_inc(c->srv->m_ref_streams);
    return 0;
}

int kv_grpc_session_callbacks(nghttp2_session_callbacks **out)
{
    nghttp2_session_callbacks *cbs;
    if (nghttp2_session_callbacks_new(&cbs) != 0)
        return -ENOMEM;
    nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data_chunk_recv);
    nghttp2_session_callbacks_set_on_frame_send_callback(cbs, on_frame_send);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
    nghttp2_session_callbacks_set_on_invalid_frame_recv_callback(cbs, on_invalid_frame_recv);
    *out = cbs;
    return 0;
}

/* ---- socket I/O ---- */

static void conn_closed_cb(uv_handle_t *h)
{
    kv_grpc_conn *c = h->data;
    kv_grpc_server *s = c->srv;
    kv_list *e, *tmp;
    kv_list_foreach_safe(e, tmp, &c->calls)
        kv_grpc_call_free(kv_list_data(e, kv_grpc_call, link));
    kv_list_foreach_safe(e, tmp, &c->zombies)
        kv_grpc_call_free(kv_list_data(e, kv_grpc_call, link));
    nghttp2_session_del(c->h2);
    if (c->io_ops->destroy)
        c->io_ops->destroy(c->io);
    kv_grpc_buf_free(&c->out);
    kv_grpc_buf_free(&c->wbuf);
    kv_list_remove(&c->link);
    kv_grpc_srv_unwatch(c);
    s->n_conns--;
    s->n_closing--;
    kv_metric_gauge_add(s->m_conn_open, -1);
    free(c);
    kv_grpc_srv_conn_freed(s);
}

void kv_grpc_conn_close(kv_grpc_conn *c)
{
    if (c->closing)
        return;
    c->closing = 1;
    kv_grpc_server *s = c->srv;
    s->n_closing++;
    if (c->in_hs)
        kv_grpc_list_remove(&s->hs, c);
    if (c->in_idle)
        kv_grpc_list_remove(&s->idle_conns, c);
    kv_grpc_srv_unmark_dirty(c);
    uv_read_stop((uv_stream_t *)&c->tcp);
    if (c->http1) { /* grpc_http1.h: the HTTP/1 handler cancels its local calls */
        void *st = c->http1;
        c->http1 = NULL;
        s->http1_ops->close(st);
    }
    /* on_cancel may finish other calls of this connection; they see c->closing. */
    kv_list *e;
    kv_list_foreach(e, &c->calls)
        kv_grpc_call_on_conn_close(kv_list_data(e, kv_grpc_call, link));
    while ((e = kv_list_head(&c->resume))) {
        kv_list_remove(e);
        kv_list_data(e, kv_grpc_call, resume_link)->in_resume = 0;
    }
    /* Its buffers are freed in the close callback; stop counting them against the cap now. */
    s->buffered -= c->acct;
    c->acct = 0;
    uv_close((uv_handle_t *)&c->tcp, conn_closed_cb);
}

void kv_grpc_conn_goaway_close(kv_grpc_conn *c, uint32_t error_code, const char *debug)
{
    if (c->closing)
        return;
    if (c->h2 && !c->writing && !c->http1 && c->detected &&
        nghttp2_submit_goaway(c->h2, NGHTTP2_FLAG_NONE,
                              nghttp2_session_get_last_proc_stream_id(c->h2), error_code,
                              (const uint8_t *)debug, debug ? strlen(debug) : 0) == 0) {
        for (;;) {
            const uint8_t *p;
            ssize_t n = nghttp2_session_mem_send(c->h2, &p);
            if (n <= 0 || c->io_ops->send(c->io, c, p, (size_t)n, &c->out) != 0)
                break;
            if (kv_grpc_buf_size(&c->out) >= KV_GRPC_OUT_HIGH_WATER)
                break;
        }
        if (kv_grpc_buf_size(&c->out)) {
            uv_buf_t b =
                uv_buf_init((char *)c->out.p + c->out.off, (unsigned)kv_grpc_buf_size(&c->out));
            (void)uv_try_write((uv_stream_t *)&c->tcp, &b, 1); /* best effort */
        }
    }
    kv_grpc_conn_close(c);
}

/* ---- accounting, output gate, connection window credit ---- */

void kv_grpc_conn_sync(kv_grpc_conn *c)
{
    kv_grpc_server *s = c->srv;
    if (c->closing || !c->h2)
        return;
    size_t out = c->out_app_bytes + kv_grpc_buf_size(&c->out) + kv_grpc_buf_size(&c->wbuf);
    size_t now = c->in_bytes + out;
    s->buffered = s->buffered - c->acct + now;
    c->acct = now;
    /* Backpressure: no new request is delivered while the peer has this much to read. */
    if (!c->gated && out > s->cfg.max_send_buffer_bytes) {
        c->gated = 1;
        kv_metric_inc(s->m_gated_total);
    } else if (c->gated && out <= s->cfg.max_send_buffer_bytes / 2) {
        c->gated = 0;
        kv_grpc_conn_ungate(c);
    }
    /* Withheld window: credited once the connection's held input drops under its budget.
     * First, so that owed below is only credit that could NOT be returned: counting the
     * credit of the bytes just consumed would mark the connection saturated on every DATA
     * frame (and flap SETTINGS_MAX_CONCURRENT_STREAMS) under any load. */
    if (c->owed && c->in_bytes < s->cfg.max_recv_buffer_bytes &&
        s->buffered < s->cfg.max_buffered_bytes) {
        size_t n = c->owed;
        c->owed = 0;
        kv_metric_gauge_add(s->m_window_withheld, -(double)n);
        nghttp2_session_consume_connection(c->h2, n);
        kv_grpc_srv_mark_dirty(c); /* a WINDOW_UPDATE may be due */
    }
    /* Admission hysteresis: once full, newcomers wait until half the budget is free, so the
     * window goes to requests already admitted (a client scheduling streams fairly would
     * otherwise hand most of it to each new stream, which would then be shed). */
    if (!c->saturated && (c->in_bytes >= s->cfg.max_recv_buffer_bytes || c->owed)) {
        c->saturated = 1;
        kv_grpc_srv_watch(c);
        /* Also stop the peer from opening streams (SETTINGS_MAX_CONCURRENT_STREAMS = the
         * calls still in progress): its scheduler would hand new streams the window first. */
        uint32_t live = 0;
        kv_list *e;
        kv_list_foreach(e, &c->calls)
            live += !kv_list_data(e, kv_grpc_call, link)->finished;
        nghttp2_settings_entry iv = {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, live ? live : 1};
        if (nghttp2_submit_settings(c->h2, NGHTTP2_FLAG_NONE, &iv, 1) == 0)
            kv_grpc_srv_mark_dirty(c);
    } else if (c->saturated && c->in_bytes < s->cfg.max_recv_buffer_bytes / 2 && !c->owed) {
        c->saturated = 0;
        nghttp2_settings_entry iv = {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS,
                                     s->cfg.max_concurrent_streams};
        if (nghttp2_submit_settings(c->h2, NGHTTP2_FLAG_NONE, &iv, 1) == 0)
            kv_grpc_srv_mark_dirty(c);
    }
}

/* Orders shedding candidates: furthest from completion first, then the newest stream. */
typedef struct shed_cand {
    kv_grpc_call *call;
    size_t remaining;
} shed_cand;

static int shed_cmp(const void *a, const void *b)
{
    const shed_cand *x = a, *y = b;
    if (x->remaining != y->remaining)
        return x->remaining < y->remaining ? 1 : -1;
    return x->call->stream_id < y->call->stream_id ? 1 : -1;
}

/* The peer's connection window is (almost) all held in partial messages that cannot complete
 * without more window (e.g. a client interleaving 1000 streams' bodies): fail the partial
 * requests furthest from completion until the withheld window can be credited again. Those
 * requests were never delivered, so RESOURCE_EXHAUSTED is true: they were not applied. */
void kv_grpc_conn_relieve(kv_grpc_conn *c, int until_unsaturated)
{
    kv_grpc_server *s = c->srv;
    size_t n = 0, partial = 0;
    kv_list *e;
    kv_list_foreach(e, &c->calls) {
        kv_grpc_call *x = kv_list_data(e, kv_grpc_call, link);
        if (!x->finished && kv_grpc_call_partial_bytes(x) &&
            !(until_unsaturated && x->method && x->method->streaming)) {
            n++;
            partial += kv_grpc_call_partial_bytes(x);
        }
    }
    /* If requests the app is still answering (and paused input) fill the budget alone,
     * shedding partial requests would not reopen the window: wait for the app instead. */
    if (!n || c->in_bytes - partial >= s->cfg.max_recv_buffer_bytes)
        return;
    shed_cand *v = malloc(n * sizeof(*v));
    if (!v)
        return;
    size_t k = 0;
    kv_list_foreach(e, &c->calls) {
        if (k == n)
            break;
        kv_grpc_call *x = kv_list_data(e, kv_grpc_call, link);
        if (x->finished || !kv_grpc_call_partial_bytes(x) ||
            (until_unsaturated && x->method && x->method->streaming))
            continue;
        size_t have = x->df.have;
        size_t want = x->df.in_body ? x->df.msg_len : s->cfg.max_request_bytes;
        v[k].call = x;
        v[k].remaining = want > have ? want - have : 0;
        if (x->method && !x->method->streaming && x->n_msgs)
            v[k].remaining = 0; /* complete, only END_STREAM missing */
        k++;
    }
    qsort(v, k, sizeof(*v), shed_cmp);
    for (size_t i = 0; i < k && !c->closing && (until_unsaturated ? c->saturated : c->owed != 0);
         i++) {
        if (v[i].call->finished)
            continue;
        kv_metric_inc(s->m_ref_recvbuf);
        kv_grpc_call_fail(v[i].call, KV_GRPC_RESOURCE_EXHAUSTED,
                          "grpc: connection receive buffer limit exceeded");
        kv_grpc_conn_sync(c);
    }
    free(v);
}

void kv_grpc_conn_credit(kv_grpc_conn *c, size_t n)
{
    kv_grpc_server *s = c->srv;
    if (!n || c->closing)
        return;
    c->owed += n;
    kv_grpc_srv_watch(c);
    kv_metric_gauge_add(s->m_window_withheld, (double)n);
    kv_grpc_conn_sync(c);
    /* What the peer may still send: our window minus what it sent that we have not yet
     * announced back (withheld bytes, and consumed bytes nghttp2 batches into the next
     * WINDOW_UPDATE). Nearly nothing left while we withhold: shed so the rest can complete. */
    int32_t local = nghttp2_session_get_effective_local_window_size(c->h2);
    int32_t recvd = nghttp2_session_get_effective_recv_data_length(c->h2);
    if (c->owed && local - recvd < KV_GRPC_CONN_WINDOW / 4)
        kv_grpc_conn_relieve(c, 0);
    if (s->buffered > s->cfg.max_buffered_bytes)
        kv_grpc_srv_shed_inbound(s);
}

static void start_write(kv_grpc_conn *c);

static void write_cb(uv_write_t *req, int status)
{
    kv_grpc_conn *c = req->data;
    c->writing = 0;
    kv_grpc_buf_consume(&c->wbuf, kv_grpc_buf_size(&c->wbuf));
    if (c->closing)
        return;
    c->wire_progress = uv_now(c->srv->loop);
    if (status < 0) {
        kv_grpc_conn_close(c);
        return;
    }
    kv_grpc_conn_flush(c);
}

/* Writes c->out: first straight to the socket (uv_try_write); what the kernel does not take
 * goes through one uv_write. A write taken whole needs no request, so libuv neither queues a
 * completion nor re-arms epoll for it: libuv 1.44 issues an epoll_ctl(MOD) after every
 * uv_write that drains, one per answer before this (docs/ARCHITECTURE.md, "One loop"). */
static void start_write(kv_grpc_conn *c)
{
    if (c->writing || kv_grpc_buf_size(&c->out) == 0)
        return;
    c->wire_progress = uv_now(c->srv->loop);
    uv_buf_t b0 = uv_buf_init((char *)c->out.p + c->out.off, (unsigned)kv_grpc_buf_size(&c->out));
    int n = uv_try_write((uv_stream_t *)&c->tcp, &b0, 1);
    if (n > 0) {
        kv_grpc_buf_consume(&c->out, (size_t)n);
        if (kv_grpc_buf_size(&c->out) == 0)
            return;
    } else if (n != UV_EAGAIN) {
        kv_grpc_conn_close(c);
        return;
    }
    kv_grpc_buf tmp = c->wbuf; /* empty (no storage: drained buffers are freed) */
    c->wbuf = c->out;
    c->out = tmp;
    uv_buf_t b = uv_buf_init((char *)c->wbuf.p + c->wbuf.off, (unsigned)kv_grpc_buf_size(&c->wbuf));
    c->wreq.data = c;
    int rv = uv_write(&c->wreq, (uv_stream_t *)&c->tcp, &b, 1, write_cb);
    if (rv < 0) {
        kv_grpc_conn_close(c);
        return;
    }
    c->writing = 1;
    kv_grpc_srv_watch(c);
}

void kv_grpc_conn_flush(kv_grpc_conn *c)
{
    if (c->closing)
        return;
    kv_grpc_srv_unmark_dirty(c);
    /* Resumed calls: deliver their held input. New resumes during this go to the next turn.
     * A call finished meanwhile leaves the batch (kv_list_remove from wherever it is). */
    kv_list batch;
    kv_list_init(&batch);
    kv_list_move(&c->resume, &batch);
    kv_list *e;
    while ((e = kv_list_head(&batch)) && !c->closing) {
        kv_grpc_call *call = kv_list_data(e, kv_grpc_call, resume_link);
        kv_list_remove(e);
        call->in_resume = 0;
        kv_grpc_call_process_pending(call);
    }
    if (c->closing) {
        /* kv_grpc_conn_close took every call out of the batch; it must not outlive us. */
        while ((e = kv_list_head(&batch))) {
            kv_list_remove(e);
            kv_list_data(e, kv_grpc_call, resume_link)->in_resume = 0;
        }
        return;
    }
    /* Pull frames from nghttp2 until it has nothing or the wire buffer is full enough (not
     * before the first bytes told HTTP/2 from HTTP/1: grpc_http1.h), and write them; a full
     * buffer the socket took whole at once is followed by the next one. */
    int full;
    do {
        full = 0;
        while (c->detected && !c->http1) {
            if (kv_grpc_buf_size(&c->out) >= KV_GRPC_OUT_HIGH_WATER) {
                full = 1;
                break;
            }
            const uint8_t *p;
            ssize_t n = nghttp2_session_mem_send(c->h2, &p);
            if (n < 0) {
                kv_grpc_conn_close(c);
                return;
            }
            if (n == 0)
                break;
            if (c->io_ops->send(c->io, c, p, (size_t)n, &c->out) != 0) {
                kv_grpc_conn_close(c);
                return;
            }
        }
        /* Deferred free: streams nghttp2 closed during recv/send. */
        while ((e = kv_list_head(&c->zombies))) {
            kv_list_remove(e);
            kv_grpc_call_free(kv_list_data(e, kv_grpc_call, link));
        }
        start_write(c);
        if (c->closing)
            return;
    } while (full && !c->writing);
    kv_grpc_conn_sync(c);
    int idle_out = !c->writing && kv_grpc_buf_size(&c->out) == 0;
    if (idle_out && c->http1 && !c->close_after_write) {
        if (c->srv->http1_ops->drained)
            c->srv->http1_ops->drained(c->http1);
        return;
    }
    if (idle_out && (c->close_after_write ||
                     (!nghttp2_session_want_read(c->h2) && !nghttp2_session_want_write(c->h2))))
        kv_grpc_conn_close(c);
}

int kv_grpc_conn_recv_plain(kv_grpc_conn *c, const uint8_t *in, size_t len)
{
    if (!c->detected || c->http1) /* HTTP/2 preface or HTTP/1.x (grpc_http1.h) */
        return kv_grpc_http1_detect(c, in, len);
    ssize_t rv = nghttp2_session_mem_recv(c->h2, in, len);
    if (rv < 0) {
        if (rv == NGHTTP2_ERR_BAD_CLIENT_MAGIC || nghttp2_is_fatal((int)rv))
            return -EPROTO;
        /* Non-fatal (e.g. flooding): nghttp2 queued GOAWAY; send it, then close. */
        nghttp2_session_terminate_session(c->h2, NGHTTP2_PROTOCOL_ERROR);
        c->close_after_write = 1;
    }
    return 0;
}

/* One read buffer per server: libuv calls alloc_cb, read(2), read_cb for one stream at a time
 * on the loop thread, and nghttp2_session_mem_recv consumes all input before read_cb returns,
 * so nothing refers to the buffer between reads (an idle connection holds no read buffer). */
static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    kv_grpc_conn *c = h->data;
    *buf = uv_buf_init((char *)c->srv->rbuf, KV_GRPC_READ_BUF);
}

static void read_cb(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    kv_grpc_conn *c = stream->data;
    if (c->closing)
        return;
    if (nread < 0) {
        kv_grpc_conn_close(c);
        return;
    }
    if (nread == 0)
        return;
    if (c->io_ops->recv(c->io, c, (const uint8_t *)buf->base, (size_t)nread) != 0) {
        kv_grpc_conn_close(c);
        return;
    }
    if (c->close_after_write)
        uv_read_stop(stream);
    kv_grpc_conn_flush(c);
}

int kv_grpc_conn_start(kv_grpc_server *s, kv_grpc_conn **out)
{
    kv_grpc_conn *c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    c->srv = s;
    c->id = ++s->next_conn_id;
    c->io_ops = &kv_grpc_io_plain;
    kv_list_init(&c->calls);
    kv_list_init(&c->zombies);
    kv_list_init(&c->resume);
    kv_list_init(&c->fifo_link);
    kv_list_init(&c->link);
    kv_list_init(&c->dirty_link);
    kv_list_init(&c->hk_link);
    int rv = uv_tcp_init(s->loop, &c->tcp);
    if (rv < 0) {
        free(c);
        return rv;
    }
    c->tcp.data = c;
    /* From here on the handle exists: errors go through uv_close. */
    kv_list_insert_head(&s->conns, &c->link);
    s->n_conns++;
    kv_metric_gauge_add(s->m_conn_open, 1);
    kv_metric_inc(s->m_conn_total);
    *out = c;
    return 0;
}

/* Second half of connection setup, after uv_accept succeeded. */
int kv_grpc_conn_begin(kv_grpc_conn *c)
{
    kv_grpc_server *s = c->srv;
    if (s->cfg.tls && kv_grpc_tls_attach(c) != 0)
        return -ENOMEM;
    nghttp2_mem mem; /* copied into the session */
    int rv = nghttp2_session_server_new3(&c->h2, s->cbs, c, s->opt, kv_grpc_h2_mem(&mem));
    if (rv != 0)
        return -ENOMEM;
    nghttp2_settings_entry iv[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, s->cfg.max_concurrent_streams},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, KV_GRPC_STREAM_WINDOW},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, 64 * 1024},
        {NGHTTP2_SETTINGS_HEADER_TABLE_SIZE, 0}, /* sent only with no_hpack_dynamic_table */
    };
    size_t n_iv = sizeof(iv) / sizeof(iv[0]) - (s->cfg.no_hpack_dynamic_table ? 0 : 1);
    if (nghttp2_submit_settings(c->h2, NGHTTP2_FLAG_NONE, iv, n_iv) != 0)
        return -ENOMEM;
    if (nghttp2_session_set_local_window_size(c->h2, NGHTTP2_FLAG_NONE, 0, KV_GRPC_CONN_WINDOW) !=
        0)
        return -ENOMEM;
    uv_tcp_nodelay(&c->tcp, 1);
    c->accepted_at = c->wire_progress = uv_now(s->loop);
    kv_grpc_list_push(&s->hs, c);
    c->in_hs = 1;
    rv = uv_read_start((uv_stream_t *)&c->tcp, alloc_cb, read_cb);
    if (rv < 0)
        return rv;
    /* Our SETTINGS go out with the first answer to the client's first bytes, once they told
     * HTTP/2 from HTTP/1 (grpc_http1.h). */
    kv_grpc_conn_flush(c);
    return 0;
}
