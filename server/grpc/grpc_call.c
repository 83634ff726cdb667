/* grpc_call.c - per-RPC state machine and the kv_grpc_call_* API; see grpc_internal.h. */
#include "grpc/grpc_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAKE_NV(n, v, vl)                                                                          \
    {                                                                                              \
        (uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, (vl), NGHTTP2_NV_FLAG_NONE                  \
    }

static size_t call_in_bytes(const kv_grpc_call *call)
{
    return kv_grpc_deframer_buffered(&call->df) + kv_grpc_buf_size(&call->in_pending) +
           call->unary_len + call->app_held + kv_grpc_raw_held(call);
}

size_t kv_grpc_call_partial_bytes(const kv_grpc_call *call)
{
    return kv_grpc_deframer_buffered(&call->df) + call->unary_len + kv_grpc_raw_held(call);
}

void kv_grpc_call_account(kv_grpc_call *call)
{
    size_t now = call_in_bytes(call);
    call->conn->in_bytes = call->conn->in_bytes - call->in_acct + now;
    call->in_acct = now;
    kv_grpc_conn_sync(call->conn);
}

/* Delivery of this call's input waits: paused by the app, the connection is gated, or (unary,
 * not a priority method) the app has max_pending_request_bytes of requests to answer. */
static int held(const kv_grpc_call *call)
{
    return call->paused || call->conn->gated ||
           (call->conn->srv->app_full && call->method && !call->method->streaming &&
            !call->priority);
}

void kv_grpc_call_set_app_held(kv_grpc_call *call, size_t n)
{
    kv_grpc_server *s = call->conn->srv;
    s->app_held = s->app_held - call->app_held + n;
    call->app_held = n;
    size_t lim = s->cfg.max_pending_request_bytes;
    if (!s->app_full && s->app_held >= lim) {
        s->app_full = 1;
    } else if (s->app_full && s->app_held < lim - lim / 4) {
        s->app_full = 0;
        kv_list *e;
        kv_list_foreach(e, &s->conns) {
            kv_grpc_conn *c = kv_list_data(e, kv_grpc_conn, link);
            if (!c->closing && !c->gated)
                kv_grpc_conn_ungate(c);
        }
    }
}

kv_grpc_call *kv_grpc_call_new(kv_grpc_conn *c, int32_t stream_id)
{
    kv_grpc_call *call = calloc(1, sizeof(*call));
    if (!call)
        return NULL;
    call->conn = c;
    call->stream_id = stream_id;
    kv_list_init(&call->dl_link);
    kv_list_init(&call->resume_link);
    kv_grpc_deframer_init(&call->df, c->srv->cfg.max_request_bytes);
    if (c->in_idle)
        kv_grpc_list_remove(&c->srv->idle_conns, c);
    kv_list_insert_head(&c->calls, &call->link);
    c->n_calls++;
    kv_metric_gauge_add(c->srv->m_streams_open, 1);
    return call;
}

/* Drops held inbound bytes, returning their flow-control credit. */
static void drop_input(kv_grpc_call *call)
{
    size_t held = kv_grpc_buf_size(&call->in_pending);
    if (held && !call->conn->closing)
        nghttp2_session_consume(call->conn->h2, call->stream_id, held);
    kv_grpc_buf_free(&call->in_pending);
    kv_grpc_deframer_free(&call->df);
    free(call->unary_msg);
    call->unary_msg = NULL;
    call->unary_len = 0;
    kv_grpc_call_set_app_held(call, 0);
    kv_grpc_call_account(call);
}

void kv_grpc_call_free(kv_grpc_call *call)
{
    kv_grpc_conn *c = call->conn;
    kv_grpc_call_run_due_cancel(call); /* the app lets go before the call is freed */
    kv_grpc_raw_free(call);
    kv_grpc_srv_deadline_remove(call);
    c->out_app_bytes -= kv_grpc_buf_size(&call->outq);
    kv_grpc_buf_free(&call->outq);
    kv_grpc_buf_free(&call->in_pending);
    kv_grpc_deframer_free(&call->df);
    free(call->unary_msg);
    call->unary_msg = NULL;
    call->unary_len = 0;
    kv_grpc_call_set_app_held(call, 0);
    kv_grpc_call_account(call);
    free(call->path);
    free(call->content_type);
    free(call->bad_timeout);
    for (int i = 0; i < KV_GRPC_N_META; i++)
        free(call->meta[i]);
    free(call->status_msg);
    kv_metric_gauge_add(c->srv->m_streams_open, -1);
    free(call);
}

/* Also from the batch kv_grpc_conn_flush is walking. */
static void remove_from_resume(kv_grpc_call *call)
{
    if (!call->in_resume)
        return;
    kv_list_remove(&call->resume_link);
    call->in_resume = 0;
}

static void add_to_resume(kv_grpc_call *call)
{
    if (call->in_resume)
        return;
    call->in_resume = 1;
    kv_list_insert_head(&call->conn->resume, &call->resume_link);
    kv_grpc_srv_mark_dirty(call->conn);
}

static int streq(const uint8_t *a, size_t alen, const char *b)
{
    size_t bl = strlen(b);
    return alen == bl && memcmp(a, b, bl) == 0;
}

static char *dupn(const uint8_t *v, size_t n)
{
    char *s = malloc(n + 1);
    if (s) {
        memcpy(s, v, n);
        s[n] = 0;
    }
    return s;
}

/* Metadata the app may read; anything else is not retained (bounded memory per call). */
static const char *const meta_names[KV_GRPC_N_META] = {"token", "authorization", "hasleader"};

int kv_grpc_call_on_header(kv_grpc_call *call, const uint8_t *name, size_t nlen,
                           const uint8_t *value, size_t vlen)
{
    if (call->started)
        return 0; /* client trailers: ignored */
    for (int i = 0; i < KV_GRPC_N_META; i++) {
        if (streq(name, nlen, meta_names[i])) {
            if (call->meta[i] || vlen > KV_GRPC_MAX_META_VALUE)
                return 0; /* first value wins; oversized values are dropped */
            call->meta[i] = dupn(value, vlen);
            return call->meta[i] ? 0 : -ENOMEM;
        }
    }
    if (streq(name, nlen, ":path")) {
        if (call->path)
            return 0;
        if (vlen > KV_GRPC_MAX_PATH) {
            call->path_too_long = 1;
            return 0;
        }
        call->path = dupn(value, vlen);
        return call->path ? 0 : -ENOMEM;
    }
    if (streq(name, nlen, ":method")) {
        if (!call->saw_method)
            kv_grpc_raw_set_method(call, value, vlen);
        call->saw_method = 1;
        call->saw_post = streq(value, vlen, "POST");
        return 0;
    }
    if (streq(name, nlen, "content-type")) {
        if (call->content_type)
            return 0;
        call->content_type = dupn(value, vlen > 128 ? 128 : vlen);
        return call->content_type ? 0 : -ENOMEM;
    }
    if (streq(name, nlen, "grpc-timeout")) {
        uint64_t ms;
        if (kv_grpc_parse_timeout((const char *)value, vlen, &ms) != 0) {
            free(call->bad_timeout);
            call->bad_timeout = dupn(value, vlen > 32 ? 32 : vlen);
            return call->bad_timeout ? 0 : -ENOMEM;
        }
        uint64_t d = uv_now(call->conn->srv->loop) + ms;
        call->deadline = d ? d : 1;
        return 0;
    }
    return 0;
}

/* "application/grpc" optionally followed by "+subtype" or ";params". */
static int is_grpc_content_type(const char *ct)
{
    static const char pfx[] = "application/grpc";
    if (!ct || strncmp(ct, pfx, sizeof(pfx) - 1) != 0)
        return 0;
    char next = ct[sizeof(pfx) - 1];
    return next == 0 || next == '+' || next == ';';
}

/* Queues the final status. http_status != 200 only for early aborts (always trailers-only). */
static int finish_internal(kv_grpc_call *call, int http_status, int status, const char *msg)
{
    kv_grpc_conn *c = call->conn;
    kv_grpc_server *s = c->srv;
    if (call->finished)
        return -EALREADY;
    call->finished = 1;
    call->status = status;
    if (!call->counted) {
        call->counted = 1;
        kv_grpc_srv_count_request(s, call, status);
    }
    kv_grpc_srv_deadline_remove(call);
    remove_from_resume(call);
    drop_input(call);
    call->status_msg = kv_grpc_percent_encode(msg);
    if (!call->status_msg)
        return -ENOMEM;
    if (c->closing || call->stream_closed)
        return c->closing ? -ECONNRESET : 0;
    if (!call->headers_sent) {
        char st[8], hs[8];
        snprintf(st, sizeof(st), "%d", status);
        snprintf(hs, sizeof(hs), "%d", http_status);
        nghttp2_nv nva[] = {
            MAKE_NV(":status", hs, strlen(hs)),
            MAKE_NV("content-type", "application/grpc", 16),
            MAKE_NV("grpc-status", st, strlen(st)),
            MAKE_NV("grpc-message", call->status_msg, strlen(call->status_msg)),
        };
        size_t n = call->status_msg[0] ? 4 : 3;
        call->headers_sent = 1;
        call->trailers_sent = 1;
        nghttp2_submit_response(c->h2, call->stream_id, nva, n, NULL);
    } else {
        nghttp2_session_resume_data(c->h2, call->stream_id);
    }
    kv_grpc_srv_mark_dirty(c);
    return 0;
}

void kv_grpc_call_fail(kv_grpc_call *call, int status, const char *msg)
{
    if (call->finished)
        return;
    if (call->raw) { /* no gRPC status to give: the stream is reset */
        kv_grpc_call_reset(call, NGHTTP2_INTERNAL_ERROR, NULL);
        return;
    }
    if (call->app_owned && !call->app_done) {
        call->app_done = 1;
        if (call->method && call->method->on_cancel)
            call->method->on_cancel(call);
    }
    call->app_done = 1;
    finish_internal(call, 200, status, msg);
}

static void early_abort(kv_grpc_call *call, int http_status, const char *msg)
{
    call->app_done = 1;
    finish_internal(call, http_status, KV_GRPC_INTERNAL, msg);
}

static void route(kv_grpc_call *call)
{
    kv_grpc_server *s = call->conn->srv;
    char msg[KV_GRPC_MAX_PATH + 64];
    const char *path = call->path ? call->path : "";
    for (size_t i = 0; i < s->n_methods; i++) {
        if (strcmp(s->methods[i].path, path) == 0) {
            call->method = &s->methods[i];
            for (const char *const *p = s->cfg.priority_methods; p && *p && !call->priority; p++)
                call->priority = strcmp(*p, path) == 0;
            kv_grpc_metrics_started(call);
            return;
        }
    }
    /* grpc-go wording (server.go handleStream). */
    const char *sm = path[0] == '/' ? path + 1 : path;
    const char *slash = strrchr(sm, '/');
    if (!slash) {
        snprintf(msg, sizeof(msg), "malformed method name: \"%s\"", path);
    } else {
        int svc_len = (int)(slash - sm);
        int known = 0;
        for (size_t i = 0; i < s->n_methods && !known; i++) {
            const char *p = s->methods[i].path + (s->methods[i].path[0] == '/');
            known = strncmp(p, sm, (size_t)svc_len) == 0 && p[svc_len] == '/';
        }
        if (known)
            snprintf(msg, sizeof(msg), "unknown method %s for service %.*s", slash + 1, svc_len,
                     sm);
        else
            snprintf(msg, sizeof(msg), "unknown service %.*s", svc_len, sm);
    }
    call->app_done = 1;
    finish_internal(call, 200, KV_GRPC_UNIMPLEMENTED, msg);
}

void kv_grpc_call_on_headers_done(kv_grpc_call *call)
{
    char msg[256];
    if (call->started)
        return;
    call->started = 1;
    kv_grpc_conn *c = call->conn;
    if (!c->got_request) {
        c->got_request = 1;
        if (c->in_hs)
            kv_grpc_list_remove(&c->srv->hs, c);
    }
    /* Not gRPC, on the client port: etcd's HTTP API (grpc_http1.h), as etcd routes an HTTP/2
     * request whose content-type is not application/grpc to its HTTP mux. */
    if (c->srv->http1_ops && !is_grpc_content_type(call->content_type)) {
        if (kv_grpc_raw_start(call) != 0)
            early_abort(call, 500, "transport: out of memory");
        return;
    }
    if (!call->saw_post) {
        early_abort(call, 405, "transport: :method must be POST");
        return;
    }
    if (!is_grpc_content_type(call->content_type)) {
        snprintf(msg, sizeof(msg), "transport: received unexpected content-type \"%s\"",
                 call->content_type ? call->content_type : "");
        early_abort(call, 415, msg);
        return;
    }
    if (call->bad_timeout) {
        snprintf(msg, sizeof(msg), "transport: malformed grpc-timeout: \"%s\"", call->bad_timeout);
        early_abort(call, 400, msg);
        return;
    }
    if (call->path_too_long) {
        call->app_done = 1;
        finish_internal(call, 200, KV_GRPC_UNIMPLEMENTED, "malformed method name: too long");
        return;
    }
    route(call);
    if (call->finished)
        return;
    /* Admission: a connection that holds its budget of partial and unanswered requests (see
     * kv_grpc_conn_sync: until half of it is free again) takes no new unary request. Refusing it at
     * the headers costs no window (its DATA is discarded and credited at once), so the requests
     * already admitted can complete instead of sharing the window with newcomers. */
    kv_grpc_server *s = c->srv;
    if (!call->method->streaming && !call->priority && c->saturated) {
        kv_metric_inc(s->m_ref_recvbuf);
        call->app_done = 1;
        finish_internal(call, 200, KV_GRPC_RESOURCE_EXHAUSTED,
                        "grpc: connection receive buffer limit exceeded");
        return;
    }
    if (call->deadline) {
        if (call->deadline <= uv_now(call->conn->srv->loop)) {
            call->app_done = 1;
            finish_internal(call, 200, KV_GRPC_DEADLINE_EXCEEDED, "context deadline exceeded");
            return;
        }
        kv_grpc_srv_deadline_add(call);
    }
}

/* The server's admit hook before a call's first delivery: 1 if it ended the call. */
static int not_admitted(kv_grpc_call *call)
{
    int (*admit)(kv_grpc_call *) = call->conn->srv->cfg.admit;
    if (!admit || admit(call) == 0)
        return 0;
    if (!call->app_done) { /* the hook must finish the call; never leave it open */
        call->app_done = 1;
        finish_internal(call, 200, KV_GRPC_INTERNAL, "grpc: call refused");
    }
    return 1;
}

static int deliver_msg(void *arg, const uint8_t *msg, size_t len)
{
    kv_grpc_call *call = arg;
    kv_grpc_metrics_bytes(call->conn->srv, 0, len);
    if (!call->method->streaming) {
        if (call->n_msgs++ > 0) {
            kv_grpc_call_fail(call, KV_GRPC_INTERNAL,
                              "grpc: too many request messages for a unary RPC");
            return 1;
        }
        call->unary_msg = malloc(len ? len : 1);
        if (!call->unary_msg) {
            kv_grpc_call_fail(call, KV_GRPC_RESOURCE_EXHAUSTED, "grpc: out of memory");
            return 1;
        }
        memcpy(call->unary_msg, msg, len);
        call->unary_len = len;
        return 0;
    }
    if (call->n_msgs == 0 && not_admitted(call))
        return 1;
    call->n_msgs++;
    call->app_owned = 1;
    call->conn->last_delivery = uv_now(call->conn->srv->loop);
    call->method->on_message(call, msg, len);
    return call->finished || call->app_done || held(call);
}

/* Runs bytes through the deframer; returns how many were processed (the rest, if any, must
 * be held because the app paused the call). */
static size_t process_input(kv_grpc_call *call, const uint8_t *data, size_t len)
{
    kv_grpc_conn *c = call->conn;
    kv_grpc_server *s = c->srv;
    char msg[128];
    size_t used = 0;
    int rv = kv_grpc_deframer_feed(&call->df, data, len, &used, deliver_msg, call);
    if (call->finished)
        return len; /* finished by the app or by deliver_msg: discard the rest */
    if (rv == KV_GRPC_DF_STOPPED) {
        kv_grpc_call_account(call);
        return used; /* paused */
    }
    switch (rv) {
    case 0:
        break;
    case KV_GRPC_DF_TOO_LARGE:
        kv_metric_inc(s->m_ref_oversized);
        snprintf(msg, sizeof(msg), "grpc: received message larger than max (%u vs. %zu)",
                 call->df.msg_len, s->cfg.max_request_bytes);
        kv_grpc_call_fail(call, KV_GRPC_RESOURCE_EXHAUSTED, msg);
        return len;
    case KV_GRPC_DF_COMPRESSED:
        kv_grpc_call_fail(call, KV_GRPC_UNIMPLEMENTED, "grpc: compressed messages not supported");
        return len;
    case KV_GRPC_DF_BAD_FLAG:
        snprintf(msg, sizeof(msg), "grpc: received unexpected payload format %u", call->df.flag);
        kv_grpc_call_fail(call, KV_GRPC_INTERNAL, msg);
        return len;
    default:
        kv_grpc_call_fail(call, KV_GRPC_RESOURCE_EXHAUSTED, "grpc: out of memory");
        return len;
    }
    kv_grpc_call_account(call);
    return len;
}

static void deliver_half_close(kv_grpc_call *call)
{
    call->half_close_done = 1;
    if (kv_grpc_deframer_partial(&call->df)) {
        kv_grpc_call_fail(call, KV_GRPC_INTERNAL, "grpc: unexpected EOF inside a message");
        return;
    }
    if (!call->method->streaming) {
        if (call->n_msgs == 0) {
            kv_grpc_call_fail(call, KV_GRPC_INTERNAL, "grpc: half-closed without a request");
            return;
        }
        if (not_admitted(call))
            return;
        uint8_t *m = call->unary_msg;
        size_t len = call->unary_len;
        call->unary_msg = NULL;
        call->unary_len = 0;
        kv_grpc_call_set_app_held(call, len); /* the app (proposal queue) holds a copy */
        kv_grpc_call_account(call);
        call->app_owned = 1;
        call->conn->last_delivery = uv_now(call->conn->srv->loop);
        call->method->on_message(call, m, len);
        free(m);
        return;
    }
    if (call->n_msgs == 0 && not_admitted(call))
        return;
    if (call->method->on_half_close) {
        call->app_owned = 1;
        call->method->on_half_close(call);
    } else if (!call->app_owned) {
        call->app_done = 1;
        finish_internal(call, 200, KV_GRPC_OK, NULL);
    }
}

void kv_grpc_call_on_data(kv_grpc_call *call, const uint8_t *data, size_t len)
{
    kv_grpc_conn *c = call->conn;
    if (call->raw) {
        kv_grpc_raw_on_data(call, data, len);
        return;
    }
    if (!call->started || call->finished || !call->method) {
        nghttp2_session_consume(c->h2, call->stream_id, len);
        return;
    }
    /* Held input stays unconsumed: the peer is stopped by its stream/connection window. */
    if (held(call) || kv_grpc_buf_size(&call->in_pending)) {
        if (kv_grpc_buf_append(&call->in_pending, data, len) != 0) {
            nghttp2_session_consume(c->h2, call->stream_id, len);
            kv_grpc_call_fail(call, KV_GRPC_RESOURCE_EXHAUSTED, "grpc: out of memory");
            return;
        }
        kv_grpc_call_account(call);
        return;
    }
    size_t used = process_input(call, data, len);
    if (call->finished) { /* everything was delivered or dropped */
        nghttp2_session_consume(c->h2, call->stream_id, len);
        return;
    }
    /* Taken bytes: the stream window reopens now (a message may exceed it); the connection
     * window only while the connection's buffers are under budget (kv_grpc_conn_credit). */
    nghttp2_session_consume_stream(c->h2, call->stream_id, used);
    if (used < len) {
        if (kv_grpc_buf_append(&call->in_pending, data + used, len - used) != 0) {
            nghttp2_session_consume(c->h2, call->stream_id, len - used);
            kv_grpc_call_fail(call, KV_GRPC_RESOURCE_EXHAUSTED, "grpc: out of memory");
        } else {
            kv_grpc_call_account(call);
        }
    }
    kv_grpc_conn_credit(c, used);
}

void kv_grpc_call_on_remote_close(kv_grpc_call *call)
{
    if (call->remote_closed)
        return;
    call->remote_closed = 1;
    if (call->raw) {
        kv_grpc_raw_on_remote_close(call);
        return;
    }
    if (!call->started || call->finished || !call->method)
        return;
    if (held(call) || kv_grpc_buf_size(&call->in_pending))
        return; /* delivered after the held input, on resume / ungate */
    deliver_half_close(call);
}

void kv_grpc_call_process_pending(kv_grpc_call *call)
{
    kv_grpc_conn *c = call->conn;
    if (call->finished || call->stream_closed || held(call) || !call->method)
        return;
    size_t n = kv_grpc_buf_size(&call->in_pending);
    if (n) {
        /* Copy out: the app may grow in_pending? No (only nghttp2 callbacks append), but the
         * buffer may be freed by a finish from inside on_message, so process from a copy. */
        uint8_t *tmp = malloc(n);
        if (!tmp) {
            kv_grpc_call_fail(call, KV_GRPC_RESOURCE_EXHAUSTED, "grpc: out of memory");
            return;
        }
        memcpy(tmp, call->in_pending.p + call->in_pending.off, n);
        size_t used = process_input(call, tmp, n);
        free(tmp);
        if (call->finished)
            return; /* drop_input already returned the credit */
        kv_grpc_buf_consume(&call->in_pending, used);
        nghttp2_session_consume_stream(c->h2, call->stream_id, used);
        kv_grpc_call_account(call);
        kv_grpc_conn_credit(c, used);
        if (call->finished || kv_grpc_buf_size(&call->in_pending))
            return;
    }
    if (call->remote_closed && !call->half_close_done && !held(call))
        deliver_half_close(call);
}

static void unlink_call(kv_grpc_call *call)
{
    kv_grpc_conn *c = call->conn;
    kv_list_remove(&call->link);
    c->n_calls--;
    if (c->n_calls == 0 && c->got_request && !c->closing && !c->in_idle) {
        c->idle_since = uv_now(c->srv->loop);
        kv_grpc_list_push(&c->srv->idle_conns, c);
    }
}

void kv_grpc_call_on_stream_close(kv_grpc_call *call)
{
    kv_grpc_conn *c = call->conn;
    kv_grpc_call_run_due_cancel(call);
    call->stream_closed = 1;
    kv_grpc_raw_release(call);
    if (!call->finished) {
        if (call->app_owned && !call->app_done) {
            call->app_done = 1;
            if (call->method->on_cancel)
                call->method->on_cancel(call);
        }
        call->app_done = 1;
        call->finished = 1;
        if (!call->counted) {
            call->counted = 1;
            kv_grpc_srv_count_request(c->srv, call, KV_GRPC_CANCELLED);
        }
    }
    kv_grpc_srv_deadline_remove(call);
    remove_from_resume(call);
    /* Held bytes: the stream is gone, return connection-level credit only. */
    size_t held = kv_grpc_buf_size(&call->in_pending);
    if (held)
        nghttp2_session_consume_connection(c->h2, held);
    kv_grpc_buf_free(&call->in_pending);
    kv_grpc_call_account(call);
    unlink_call(call);
    kv_list_insert_head(&c->zombies, &call->link);
}

void kv_grpc_call_on_conn_close(kv_grpc_call *call)
{
    kv_grpc_call_run_due_cancel(call);
    kv_grpc_raw_release(call);
    kv_grpc_srv_deadline_remove(call);
    remove_from_resume(call);
    if (call->finished)
        return;
    call->finished = 1;
    if (call->app_owned && !call->app_done) {
        call->app_done = 1;
        if (call->method->on_cancel)
            call->method->on_cancel(call);
    }
    call->app_done = 1;
    if (!call->counted) {
        call->counted = 1;
        kv_grpc_srv_count_request(call->conn->srv, call, KV_GRPC_CANCELLED);
    }
}

ssize_t kv_grpc_call_read_data(kv_grpc_call *call, uint8_t *buf, size_t length,
                               uint32_t *data_flags)
{
    kv_grpc_conn *c = call->conn;
    if (call->reset)
        return NGHTTP2_ERR_DEFERRED; /* RST_STREAM is queued ahead and closes the stream */
    size_t avail = kv_grpc_buf_size(&call->outq);
    size_t n = avail < length ? avail : length;
    if (n) {
        memcpy(buf, call->outq.p + call->outq.off, n);
        kv_grpc_buf_consume(&call->outq, n);
        c->out_app_bytes -= n;
        call->out_progress = uv_now(c->srv->loop);
    }
    if (kv_grpc_buf_size(&call->outq) == 0 && call->finished) {
        *data_flags |= NGHTTP2_DATA_FLAG_EOF;
        if (!call->trailers_sent) {
            char st[8];
            const char *m = call->status_msg ? call->status_msg : "";
            snprintf(st, sizeof(st), "%d", call->status);
            nghttp2_nv nva[] = {
                MAKE_NV("grpc-status", st, strlen(st)),
                MAKE_NV("grpc-message", m, strlen(m)),
            };
            call->trailers_sent = 1;
            if (nghttp2_submit_trailer(c->h2, call->stream_id, nva, m[0] ? 2 : 1) == 0)
                *data_flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
        }
        return (ssize_t)n;
    }
    if (n == 0)
        return NGHTTP2_ERR_DEFERRED;
    return (ssize_t)n;
}

ssize_t kv_grpc_call_data_source_read(nghttp2_session *session, int32_t stream_id, uint8_t *buf,
                                      size_t length, uint32_t *data_flags,
                                      nghttp2_data_source *source, void *user_data)
{
    (void)session;
    (void)stream_id;
    (void)user_data;
    return kv_grpc_call_read_data(source->ptr, buf, length, data_flags);
}

/* ---- public API ---- */

void *kv_grpc_call_app(kv_grpc_call *c)
{
    return c->conn->srv->app;
}

void kv_grpc_call_set_data(kv_grpc_call *c, void *data)
{
    c->data = data;
}

void *kv_grpc_call_data(kv_grpc_call *c)
{
    return c->data;
}

const char *kv_grpc_call_method(kv_grpc_call *c)
{
    return c->method ? c->method->path : (c->path ? c->path : "");
}

uint64_t kv_grpc_call_conn_id(kv_grpc_call *c)
{
    return c->conn->id;
}

const char *kv_grpc_call_header(kv_grpc_call *c, const char *name)
{
    for (int i = 0; i < KV_GRPC_N_META; i++)
        if (strcmp(meta_names[i], name) == 0)
            return c->meta[i];
    return NULL;
}

uint64_t kv_grpc_call_deadline(kv_grpc_call *c)
{
    return c->deadline;
}

int kv_grpc_call_send(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    if (call->local) /* an HTTP/1 gateway call (grpc_http1.h) */
        return kv_grpc_local_send(call, msg, len);
    kv_grpc_conn *c = call->conn;
    kv_grpc_server *s = c->srv;
    if (call->app_done || call->finished)
        return -EINVAL;
    if (c->closing || call->stream_closed)
        return -ECONNRESET;
    if (len > s->cfg.max_response_bytes) {
        kv_metric_inc(s->m_ref_resp_size);
        return -EMSGSIZE;
    }
    /* A streaming call's reader that does not read: end it rather than queue without end. A
     * unary call sends one message, whatever its size; the connection is gated instead. */
    if (call->method && call->method->streaming && kv_grpc_buf_size(&call->outq) &&
        kv_grpc_buf_size(&call->outq) + 5 + len > s->cfg.max_send_buffer_bytes) {
        kv_metric_inc(s->m_ref_sendbuf);
        return -ENOBUFS;
    }
    if (call->app_held) { /* answering: the request's bytes no longer count */
        kv_grpc_call_set_app_held(call, 0);
        kv_grpc_call_account(call);
    }
    if (s->buffered + 5 + len > s->cfg.max_buffered_bytes &&
        !kv_grpc_srv_make_room(s, 5 + len, call)) {
        kv_metric_inc(s->m_ref_cap_send);
        return -ENOBUFS;
    }
    uint8_t hdr[5] = {0, (uint8_t)(len >> 24), (uint8_t)(len >> 16), (uint8_t)(len >> 8),
                      (uint8_t)len};
    size_t before = kv_grpc_buf_size(&call->outq);
    if (kv_grpc_buf_append(&call->outq, hdr, 5) != 0 ||
        kv_grpc_buf_append(&call->outq, msg, len) != 0) {
        call->outq.len = call->outq.off + before;
        return -ENOMEM;
    }
    c->out_app_bytes += 5 + len;
    kv_grpc_srv_watch(c);
    kv_grpc_metrics_bytes(s, len, 0);
    if (before == 0)
        call->out_progress = uv_now(s->loop);
    kv_grpc_conn_sync(c);
    if (!call->headers_sent) {
        nghttp2_nv nva[] = {
            MAKE_NV(":status", "200", 3),
            MAKE_NV("content-type", "application/grpc", 16),
        };
        nghttp2_data_provider prd;
        prd.source.ptr = call;
        prd.read_callback = kv_grpc_call_data_source_read;
        int rv = nghttp2_submit_response(c->h2, call->stream_id, nva, 2, &prd);
        if (rv != 0)
            return rv == NGHTTP2_ERR_NOMEM ? -ENOMEM : -ECONNRESET;
        call->headers_sent = 1;
    } else {
        nghttp2_session_resume_data(c->h2, call->stream_id);
    }
    kv_grpc_srv_mark_dirty(c);
    return 0;
}

void kv_grpc_call_run_due_cancel(kv_grpc_call *call)
{
    if (!call->cancel_due)
        return;
    call->cancel_due = 0;
    kv_list_remove(&call->cancel_link);
    call->method->on_cancel(call);
}

static void call_reset(kv_grpc_call *call, uint32_t error_code, kv_metric *metric, int defer)
{
    kv_grpc_conn *c = call->conn;
    if (call->reset)
        return;
    call->reset = 1;
    kv_metric_inc(metric);
    /* a raw stream's handler is closed when the stream closes, never from here: this may run
     * inside the handler's own write (grpc_h2raw.c) */
    if (!call->finished) {
        if (call->app_owned && !call->app_done) {
            call->app_done = 1;
            if (call->method && call->method->on_cancel) {
                if (defer) {
                    call->cancel_due = 1;
                    kv_list_insert_tail(&c->srv->cancel_due, &call->cancel_link);
                    kv_grpc_srv_wake(c->srv);
                } else {
                    call->method->on_cancel(call);
                }
            }
        }
        call->app_done = 1;
        call->finished = 1;
        if (!call->counted) {
            call->counted = 1;
            kv_grpc_srv_count_request(c->srv, call, KV_GRPC_CANCELLED);
        }
    }
    kv_grpc_srv_deadline_remove(call);
    remove_from_resume(call);
    c->out_app_bytes -= kv_grpc_buf_size(&call->outq);
    kv_grpc_buf_free(&call->outq);
    drop_input(call); /* also re-accounts the connection */
    if (!c->closing && !call->stream_closed) {
        nghttp2_submit_rst_stream(c->h2, NGHTTP2_FLAG_NONE, call->stream_id, error_code);
        kv_grpc_srv_mark_dirty(c);
    }
}

void kv_grpc_call_reset(kv_grpc_call *call, uint32_t error_code, kv_metric *metric)
{
    call_reset(call, error_code, metric, 0);
}

void kv_grpc_call_reset_deferred(kv_grpc_call *call, uint32_t error_code, kv_metric *metric)
{
    call_reset(call, error_code, metric, 1);
}

void kv_grpc_conn_ungate(kv_grpc_conn *c)
{
    kv_list *e;
    kv_list_foreach(e, &c->calls) {
        kv_grpc_call *x = kv_list_data(e, kv_grpc_call, link);
        if (!x->finished && !x->paused &&
            (kv_grpc_buf_size(&x->in_pending) || (x->remote_closed && !x->half_close_done)))
            add_to_resume(x);
    }
}

size_t kv_grpc_call_max_response_bytes(kv_grpc_call *call)
{
    return call->conn->srv->cfg.max_response_bytes;
}

int kv_grpc_call_abort(kv_grpc_call *call)
{
    if (call->local)
        return kv_grpc_local_finish(call, -1, NULL);
    if (call->app_done)
        return -EINVAL;
    call->app_done = 1;
    call->app_owned = 1;
    if (!call->counted) {
        call->counted = 1;
        kv_grpc_srv_count_request(call->conn->srv, call, KV_GRPC_INTERNAL);
    }
    kv_grpc_call_reset(call, NGHTTP2_INTERNAL_ERROR, call->conn->srv->m_reset_undeliverable);
    return 0;
}

int kv_grpc_call_finish(kv_grpc_call *call, int grpc_status, const char *grpc_message)
{
    if (call->local)
        return kv_grpc_local_finish(call, grpc_status, grpc_message);
    if (call->app_done)
        return -EINVAL;
    call->app_done = 1;
    call->app_owned = 1;
    int rv = finish_internal(call, 200, grpc_status, grpc_message);
    return rv == -EALREADY ? 0 : rv;
}

void kv_grpc_call_pause_recv(kv_grpc_call *call)
{
    if (call->method && call->method->streaming && !call->finished)
        call->paused = 1;
}

void kv_grpc_call_resume_recv(kv_grpc_call *call)
{
    if (!call->paused)
        return;
    call->paused = 0;
    if (call->finished || call->conn->closing)
        return;
    if (kv_grpc_buf_size(&call->in_pending) || (call->remote_closed && !call->half_close_done))
        add_to_resume(call);
}
