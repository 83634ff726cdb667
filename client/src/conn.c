/*
 * conn.c - the client's single HTTP/2 connection: TCP over libuv, an nghttp2 client session
 * (h2c prior knowledge), endpoint rotation and reconnect backoff with jitter.
 *
 * All functions run on the I/O thread. A connection becomes "ready" when the server's first
 * SETTINGS frame arrives (so a peer that is not an HTTP/2 server never receives a request).
 * The nghttp2 session is deleted only in the TCP handle's close callback, never inside an
 * nghttp2 callback; callbacks of a dead connection return NGHTTP2_ERR_CALLBACK_FAILURE.
 */
#include "internal.h"
#include "net/tls.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct wreq {
    uv_write_t req;
    struct kvc_conn *cn;
    size_t len;
    uint8_t data[];
};

static uint64_t rng_next(kvc_client *c)
{
    /* xorshift64*: per-client state, seeded in kvc_open. */
    uint64_t x = c->rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    c->rng = x;
    return x * 0x2545F4914F6CDD1DULL;
}

uint32_t kvc_backoff_ms(kvc_client *c, unsigned attempt)
{
    uint64_t d = c->cfg.backoff_base_ms;
    for (unsigned i = 0; i < attempt && d < c->cfg.backoff_max_ms; i++)
        d *= 2;
    if (d > c->cfg.backoff_max_ms)
        d = c->cfg.backoff_max_ms;
    /* "equal jitter": [d/2, d] */
    uint64_t half = d / 2;
    return (uint32_t)(half + rng_next(c) % (d - half + 1));
}

static int has_demand(const kvc_client *c)
{
    return c->waiting.n > 0 || c->retrying.n > 0 || c->ka.map.n > 0 || !kv_list_empty(&c->wt.q) ||
           c->wt.creating || c->wt.map.n > 0 || c->bidi.n_waiting > 0 || c->bidi.n_open > 0;
}

static void conn_start(kvc_client *c);

static void conn_timer_cb(uv_timer_t *t)
{
    kvc_client *c = t->data;
    if (c->closing)
        return;
    if (c->state == CS_BACKOFF) {
        c->state = CS_IDLE;
        if (has_demand(c))
            conn_start(c);
    } else if (c->state == CS_CONNECTING) {
        char why[80];
        snprintf(why, sizeof why, "no HTTP/2 connection within %u ms", c->cfg.dial_timeout_ms);
        kvc_conn_fail(c, why);
    }
}

void kvc_conn_demand(kvc_client *c)
{
    if (c->state == CS_IDLE && !c->closing)
        conn_start(c);
}

int kvc_conn_usable(const kvc_client *c)
{
    return c->state == CS_READY && c->conn && !c->conn->dead && !c->conn->draining;
}

static void on_tcp_close(uv_handle_t *h)
{
    struct kvc_conn *cn = h->data;
    kvc_client *c = cn->c;
    if (cn->h2)
        nghttp2_session_del(cn->h2);
    kv_tls_conn_free(cn->tls);
    free(cn);
    kvc_client_handle_closed(c);
}

/* Detach every stream of the connection so no nghttp2 callback reaches a call again. */
static void detach_streams(kvc_client *c, struct kvc_conn *cn)
{
    if (!cn->h2)
        return;
    kv_list *e;
    kv_list_foreach(e, &c->inflight.list) {
        struct kvc_call *k = kv_list_data(e, struct kvc_call, link);
        if (k->s.id > 0)
            nghttp2_session_set_stream_user_data(cn->h2, k->s.id, NULL);
    }
    if (c->ka.stream_open && c->ka.s.id > 0)
        nghttp2_session_set_stream_user_data(cn->h2, c->ka.s.id, NULL);
    if (c->wt.stream_open && c->wt.s.id > 0)
        nghttp2_session_set_stream_user_data(cn->h2, c->wt.s.id, NULL);
    for (struct kvc_bidi *b = c->bidi.open; b; b = b->next)
        if (b->s.id > 0)
            nghttp2_session_set_stream_user_data(cn->h2, b->s.id, NULL);
}

void kvc_conn_fail(kvc_client *c, const char *reason)
{
    struct kvc_conn *cn = c->conn;
    if (!cn || cn->dead)
        return;
    uint64_t now = kvc_now_ms();
    int was_ready = cn->ready;
    cn->dead = 1;
    c->conn = NULL;
    snprintf(c->last_err, sizeof c->last_err, "%s: %s", c->eps[c->ep_idx].text, reason);
    uv_timer_stop(&c->conn_timer);
    detach_streams(c, cn);
    uv_read_stop((uv_stream_t *)&cn->tcp);
    uv_close((uv_handle_t *)&cn->tcp, on_tcp_close);
    c->state = CS_IDLE;
    kvc_ping_stop(c);
    if (was_ready && now - c->ready_at > 2000)
        c->backoff_attempt = 0;
    /* The next endpoint and the backoff are set before the callbacks below run: a callback
     * that asks for a connection (kvc_lease_keepalive, a retried call) then waits for the
     * backoff timer, which starts one if anything still wants it. Started from here, in
     * CS_IDLE, it would be a second connection the timer then orphans. */
    if (!c->closing) {
        c->ep_idx = (c->ep_idx + 1) % c->n_eps;
        c->state = CS_BACKOFF;
        uv_timer_start(&c->conn_timer, conn_timer_cb, kvc_backoff_ms(c, c->backoff_attempt++), 0);
    }
    kvc_calls_on_conn_lost(c, c->last_err);
    kvc_ka_on_conn_lost(c);
    kvc_watch_on_conn_lost(c);
    kvc_bidi_on_conn_lost(c, c->last_err);
}

void kvc_conn_drain(kvc_client *c, const char *reason)
{
    struct kvc_conn *cn = c->conn;
    if (!cn || cn->dead || cn->draining || c->n_eps <= 1)
        return;
    cn->draining = 1;
    snprintf(cn->fail_reason, sizeof cn->fail_reason, "failover: %s", reason);
    if (c->ka.stream_open && c->ka.s.id > 0)
        nghttp2_submit_rst_stream(cn->h2, NGHTTP2_FLAG_NONE, c->ka.s.id, NGHTTP2_CANCEL);
    if (c->wt.stream_open && c->wt.s.id > 0)
        nghttp2_submit_rst_stream(cn->h2, NGHTTP2_FLAG_NONE, c->wt.s.id, NGHTTP2_CANCEL);
    kvc_bidi_on_conn_lost(c, cn->fail_reason); /* raw streams end; their owners re-open */
}

/* ---- nghttp2 callbacks ---- */

static int on_frame_recv(nghttp2_session *session, const nghttp2_frame *frame, void *ud)
{
    (void)session;
    struct kvc_conn *cn = ud;
    kvc_client *c = cn->c;
    if (cn->dead)
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    if (frame->hd.type == NGHTTP2_SETTINGS && !(frame->hd.flags & NGHTTP2_FLAG_ACK) && !cn->ready) {
        cn->ready = 1;
        c->state = CS_READY;
        c->ready_at = kvc_now_ms();
        uv_timer_stop(&c->conn_timer);
        if (atomic_fetch_add_explicit(&c->st.connects, 1, memory_order_relaxed) > 0)
            KVC_STAT_INC(c, reconnects);
        kvc_ping_on_ready(c);
        kvc_calls_on_ready(c);
        kvc_ka_on_ready(c);
        kvc_watch_on_ready(c);
        kvc_bidi_on_ready(c);
    } else if (frame->hd.type == NGHTTP2_GOAWAY) {
        cn->draining = 1;
        snprintf(cn->fail_reason, sizeof cn->fail_reason, "server sent GOAWAY (%s)",
                 nghttp2_http2_strerror(frame->goaway.error_code));
    }
    return 0;
}

static int on_frame_send(nghttp2_session *session, const nghttp2_frame *frame, void *ud)
{
    struct kvc_conn *cn = ud;
    if (cn->dead)
        return 0;
    if (frame->hd.type == NGHTTP2_HEADERS) {
        struct kvc_h2stream *s = nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
        if (s)
            s->wire = 1;
    }
    return 0;
}

static int on_header(nghttp2_session *session, const nghttp2_frame *frame, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags, void *ud)
{
    (void)flags;
    struct kvc_conn *cn = ud;
    if (cn->dead)
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    if (frame->hd.type != NGHTTP2_HEADERS)
        return 0;
    struct kvc_h2stream *s = nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
    if (s)
        kvc_grpc_on_header(s, name, namelen, value, valuelen);
    return 0;
}

static int on_data_chunk(nghttp2_session *session, uint8_t flags, int32_t stream_id,
                         const uint8_t *data, size_t len, void *ud)
{
    (void)flags;
    struct kvc_conn *cn = ud;
    /* No automatic WINDOW_UPDATE (session_new): the connection window is credited at once;
     * a stream's too, unless it is a raw stream whose receive is paused
     * (kvc_bidi_set_recv_paused), which credits it on resume. */
    nghttp2_session_consume_connection(session, len);
    if (cn->dead)
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    struct kvc_h2stream *s = nghttp2_session_get_stream_user_data(session, stream_id);
    if (s && s->kind == STREAM_BIDI && ((struct kvc_bidi *)s)->recv_paused)
        ((struct kvc_bidi *)s)->recv_held += len;
    else
        nghttp2_session_consume_stream(session, stream_id, len);
    if (!s)
        return 0;
    if (s->kind == STREAM_CALL)
        kvc_call_on_data((struct kvc_call *)s, data, len);
    else if (s->kind == STREAM_BIDI)
        kvc_bidi_on_data((struct kvc_bidi *)s, data, len);
    else if (s->kind == STREAM_WATCH)
        kvc_watch_on_data(cn->c, data, len);
    else
        kvc_ka_on_data(cn->c, data, len);
    return 0;
}

static int on_stream_close(nghttp2_session *session, int32_t stream_id, uint32_t error_code,
                           void *ud)
{
    struct kvc_conn *cn = ud;
    if (cn->dead)
        return 0;
    struct kvc_h2stream *s = nghttp2_session_get_stream_user_data(session, stream_id);
    if (!s)
        return 0;
    nghttp2_session_set_stream_user_data(session, stream_id, NULL);
    if (s->kind == STREAM_CALL)
        kvc_call_on_stream_close((struct kvc_call *)s, error_code);
    else if (s->kind == STREAM_BIDI)
        kvc_bidi_on_stream_close((struct kvc_bidi *)s, error_code);
    else if (s->kind == STREAM_WATCH)
        kvc_watch_on_stream_close(cn->c, error_code);
    else
        kvc_ka_on_stream_close(cn->c, error_code);
    return 0;
}

/* ---- I/O ---- */

static void on_write(uv_write_t *req, int status)
{
    struct wreq *w = (struct wreq *)req;
    struct kvc_conn *cn = w->cn;
    cn->write_pending -= w->len;
    free(w);
    if (cn->dead)
        return;
    if (status < 0) {
        char why[120];
        snprintf(why, sizeof why, "write failed: %s", uv_strerror(status));
        kvc_conn_fail(cn->c, why);
        return;
    }
    kvc_conn_flush(cn->c);
}

void kvc_conn_flush(kvc_client *c)
{
    struct kvc_conn *cn = c->conn;
    if (!cn || cn->dead || !cn->h2 || cn->in_recv)
        return;
    kvc_loop_group *g = c->lg;
    size_t used;
again:
    used = 0;
    /* TLS: nothing is pulled from nghttp2 before the handshake completes; its output is
     * encrypted into the TLS layer and drained into the scratch buffer below. */
    while (cn->write_pending + used + (cn->tls ? kv_tls_conn_out_pending(cn->tls) : 0) <
               KVC_WRITE_HIGH_WATER &&
           (!cn->tls || kv_tls_conn_established(cn->tls))) {
        const uint8_t *data;
        ssize_t n = nghttp2_session_mem_send(cn->h2, &data);
        if (n < 0) {
            char why[120];
            snprintf(why, sizeof why, "HTTP/2 send error: %s", nghttp2_strerror((int)n));
            kvc_conn_fail(c, why);
            return;
        }
        if (n == 0)
            break;
        if (cn->tls) {
            if (kv_tls_conn_write(cn->tls, data, (size_t)n) != 0) {
                kvc_conn_fail(c, "TLS write failed");
                return;
            }
            continue;
        }
        if (used + (size_t)n > g->scratch_cap) {
            size_t cap = g->scratch_cap ? g->scratch_cap : 16384;
            while (cap < used + (size_t)n)
                cap *= 2;
            uint8_t *p = realloc(g->scratch, cap);
            if (!p) {
                kvc_conn_fail(c, "out of memory");
                return;
            }
            g->scratch = p;
            g->scratch_cap = cap;
        }
        memcpy(g->scratch + used, data, (size_t)n);
        used += (size_t)n;
    }
    size_t tls_out = cn->tls ? kv_tls_conn_out_pending(cn->tls) : 0;
    if (tls_out) {
        if (tls_out > g->scratch_cap) {
            uint8_t *p = realloc(g->scratch, tls_out);
            if (!p) {
                kvc_conn_fail(c, "out of memory");
                return;
            }
            g->scratch = p;
            g->scratch_cap = tls_out;
        }
        used = kv_tls_conn_out_read(cn->tls, g->scratch, tls_out);
    }
    if (used && cn->write_pending == 0) {
        /* Straight to the socket first: a write the kernel takes whole needs no request (no
         * copy, no completion, no epoll re-arm by libuv); only the rest is queued. */
        uv_buf_t b0 = uv_buf_init((char *)g->scratch, (unsigned)used);
        int n = uv_try_write((uv_stream_t *)&cn->tcp, &b0, 1);
        if (n < 0 && n != UV_EAGAIN) {
            char why[120];
            snprintf(why, sizeof why, "write failed: %s", uv_strerror(n));
            kvc_conn_fail(c, why);
            return;
        }
        if (n > 0 && (size_t)n == used)
            goto again; /* nghttp2 (or TLS) may hold more than one high-water mark */
        if (n > 0) {
            memmove(g->scratch, g->scratch + n, used - (size_t)n);
            used -= (size_t)n;
        }
    }
    if (used) {
        struct wreq *w = malloc(sizeof *w + used);
        if (!w) {
            kvc_conn_fail(c, "out of memory");
            return;
        }
        w->cn = cn;
        w->len = used;
        memcpy(w->data, g->scratch, used);
        /* Release a big coalescing buffer once it is no longer needed. */
        if (g->scratch_cap > 1024 * 1024) {
            free(g->scratch);
            g->scratch = NULL;
            g->scratch_cap = 0;
        }
        uv_buf_t b = uv_buf_init((char *)w->data, (unsigned)used);
        cn->write_pending += used;
        int rc = uv_write(&w->req, (uv_stream_t *)&cn->tcp, &b, 1, on_write);
        if (rc < 0) {
            cn->write_pending -= used;
            free(w);
            char why[120];
            snprintf(why, sizeof why, "write failed: %s", uv_strerror(rc));
            kvc_conn_fail(c, why);
            return;
        }
    }
    /* A draining connection is replaced once its last stream is gone. */
    if (cn->draining && c->inflight.n == 0 && !c->ka.stream_open && !c->wt.stream_open &&
        c->bidi.n_open == 0) {
        kvc_conn_fail(c, cn->fail_reason[0] ? cn->fail_reason : "connection drained");
        return;
    }
    if (cn->ready && !nghttp2_session_want_read(cn->h2) && !nghttp2_session_want_write(cn->h2) &&
        cn->write_pending == 0)
        kvc_conn_fail(c, "HTTP/2 session finished");
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    struct kvc_conn *cn = h->data;
    /* One read buffer per loop: reads are processed synchronously. */
    *buf = uv_buf_init((char *)cn->c->lg->readbuf, KVC_READBUF_SIZE);
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
    struct kvc_conn *cn = st->data;
    kvc_client *c = cn->c;
    if (cn->dead)
        return;
    if (nread < 0) {
        char why[160];
        if (nread == UV_EOF)
            snprintf(why, sizeof why, "connection closed by server%s",
                     cn->ready ? "" : " before the HTTP/2 handshake");
        else
            snprintf(why, sizeof why, "read failed: %s%s", uv_strerror((int)nread),
                     cn->ready ? "" : " before the HTTP/2 handshake");
        kvc_conn_fail(c, why);
        return;
    }
    if (nread == 0)
        return;
    kvc_ping_on_read(c);
    if (!cn->got_bytes && !cn->tls) {
        cn->got_bytes = 1;
        if (nread >= 5 && memcmp(buf->base, "HTTP/", 5) == 0) {
            char line[64];
            size_t n = 0;
            while (n < (size_t)nread && n + 1 < sizeof line && buf->base[n] != '\r' &&
                   buf->base[n] != '\n')
                n++;
            memcpy(line, buf->base, n);
            line[n] = '\0';
            char why[160];
            snprintf(why, sizeof why,
                     "server speaks HTTP/1.x, not HTTP/2 (h2c prior knowledge); it said \"%s\"",
                     line);
            kvc_conn_fail(c, why);
            return;
        }
    }
    cn->in_recv = 1;
    if (cn->tls) {
        char why[300];
        int trc = kvc_tls_conn_recv(cn, (const uint8_t *)buf->base, (size_t)nread, why, sizeof why);
        cn->in_recv = 0;
        if (cn->dead)
            return;
        if (trc < 0) {
            kvc_conn_fail(c, why);
            return;
        }
        kvc_conn_flush(c);
        return;
    }
    ssize_t rv = nghttp2_session_mem_recv(cn->h2, (const uint8_t *)buf->base, (size_t)nread);
    cn->in_recv = 0;
    if (cn->dead)
        return;
    if (rv < 0) {
        char why[160];
        snprintf(why, sizeof why, "HTTP/2 protocol error: %s", nghttp2_strerror((int)rv));
        kvc_conn_fail(c, why);
        return;
    }
    kvc_conn_flush(c);
}

static int session_new(struct kvc_conn *cn)
{
    nghttp2_session_callbacks *cbs;
    nghttp2_option *opt;
    if (nghttp2_option_new(&opt) != 0)
        return -1;
    nghttp2_option_set_no_auto_window_update(opt, 1); /* on_data_chunk consumes */
    if (nghttp2_session_callbacks_new(&cbs) != 0) {
        nghttp2_option_del(opt);
        return -1;
    }
    nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
    nghttp2_session_callbacks_set_on_frame_send_callback(cbs, on_frame_send);
    nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data_chunk);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
    int rc = nghttp2_session_client_new2(&cn->h2, cbs, cn, opt);
    nghttp2_session_callbacks_del(cbs);
    nghttp2_option_del(opt);
    if (rc != 0)
        return -1;
    nghttp2_settings_entry iv[] = {
        {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1u << 20},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, 64u * 1024u},
    };
    if (nghttp2_submit_settings(cn->h2, NGHTTP2_FLAG_NONE, iv, sizeof iv / sizeof iv[0]) != 0)
        return -1;
    nghttp2_session_set_local_window_size(cn->h2, NGHTTP2_FLAG_NONE, 0, 1 << 24);
    return 0;
}

static void on_connect(uv_connect_t *req, int status)
{
    struct kvc_conn *cn = req->data;
    kvc_client *c = cn->c;
    if (cn->dead)
        return;
    if (status < 0) {
        char why[120];
        snprintf(why, sizeof why, "connect failed: %s", uv_strerror(status));
        kvc_conn_fail(c, why);
        return;
    }
    if (session_new(cn) != 0) {
        kvc_conn_fail(c, "cannot create HTTP/2 session");
        return;
    }
    if (kvc_tls_conn_start(cn) != 0) {
        kvc_conn_fail(c, cn->tls && kv_tls_conn_error(cn->tls)[0] ? kv_tls_conn_error(cn->tls)
                                                                  : "cannot start TLS");
        return;
    }
    int rc = uv_read_start((uv_stream_t *)&cn->tcp, on_alloc, on_read);
    if (rc < 0) {
        kvc_conn_fail(c, uv_strerror(rc));
        return;
    }
    kvc_conn_flush(c);
}

static void conn_start(kvc_client *c)
{
    struct kvc_conn *cn = calloc(1, sizeof *cn);
    if (!cn) {
        snprintf(c->last_err, sizeof c->last_err, "out of memory");
        c->state = CS_BACKOFF;
        uv_timer_start(&c->conn_timer, conn_timer_cb, kvc_backoff_ms(c, c->backoff_attempt++), 0);
        return;
    }
    cn->c = c;
    uv_tcp_init(&c->lg->loop, &cn->tcp);
    cn->tcp.data = cn;
    cn->creq.data = cn;
    c->open_handles++;
    c->conn = cn;
    c->state = CS_CONNECTING;
    uv_timer_start(&c->conn_timer, conn_timer_cb, c->cfg.dial_timeout_ms, 0);
    uv_tcp_nodelay(&cn->tcp, 1);
    int rc = uv_tcp_connect(&cn->creq, &cn->tcp, (const struct sockaddr *)&c->eps[c->ep_idx].addr,
                            on_connect);
    if (rc < 0) {
        char why[120];
        snprintf(why, sizeof why, "connect failed: %s", uv_strerror(rc));
        kvc_conn_fail(c, why);
    }
}

int32_t kvc_conn_submit(kvc_client *c, const char *path, uint64_t deadline, const struct kvc_md *md,
                        nghttp2_data_source_read_callback rd, void *stream_user_data)
{
    struct kvc_conn *cn = c->conn;
    char tmo[24];
#define NV(n, v) {(uint8_t *)(n), (uint8_t *)(v), strlen(n), strlen(v), NGHTTP2_NV_FLAG_NONE}
    nghttp2_nv nva[10] = {
        NV(":method", "POST"),
        NV(":scheme", cn->tls ? "https" : "http"),
        NV(":path", path),
        NV(":authority", c->eps[c->ep_idx].authority),
        NV("content-type", "application/grpc"),
        NV("te", "trailers"),
        NV("user-agent", "kvclient/"
                         "0.1.0"),
    };
    size_t n = 7;
    if (deadline) {
        uint64_t now = kvc_now_ms();
        uint64_t left = deadline > now ? deadline - now : 1;
        if (left > 99999999u)
            snprintf(tmo, sizeof tmo, "%lluS", (unsigned long long)(left / 1000));
        else
            snprintf(tmo, sizeof tmo, "%llum", (unsigned long long)left);
        nghttp2_nv t = NV("grpc-timeout", tmo);
        nva[n++] = t;
    }
    const char *token = md && md->token ? md->token : c->auth_token;
    if (token[0]) { /* etcd's auth metadata */
        nghttp2_nv t = NV("token", token);
        nva[n++] = t;
    }
    if (md && md->hasleader) { /* etcd's WithRequireLeader */
        nghttp2_nv t = NV("hasleader", "true");
        nva[n++] = t;
    }
#undef NV
    nghttp2_data_provider prd;
    prd.source.ptr = stream_user_data;
    prd.read_callback = rd;
    return nghttp2_submit_request(cn->h2, NULL, nva, n, &prd, stream_user_data);
}

void kvc_conn_reset_stream(kvc_client *c, int32_t id, uint32_t h2err)
{
    struct kvc_conn *cn = c->conn;
    if (!cn || cn->dead || !cn->h2 || id <= 0)
        return;
    nghttp2_session_set_stream_user_data(cn->h2, id, NULL);
    nghttp2_submit_rst_stream(cn->h2, NGHTTP2_FLAG_NONE, id, h2err);
}

void kvc_conn_close_handles(kvc_client *c)
{
    struct kvc_conn *cn = c->conn;
    if (cn && !cn->dead) {
        cn->dead = 1;
        c->conn = NULL;
        detach_streams(c, cn);
        uv_read_stop((uv_stream_t *)&cn->tcp);
        uv_close((uv_handle_t *)&cn->tcp, on_tcp_close);
    }
    c->state = CS_CLOSED;
    uv_timer_stop(&c->conn_timer);
    uv_close((uv_handle_t *)&c->conn_timer, kvc_handle_closed_cb);
    kvc_ping_close(c);
}
