/* http_server.c - see http_server.h. */
#include "http/http_server.h"
#include "common/list.h"
#include "net/accept_gate.h"
#include "net/listen.h"
#include "net/tls.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct http_conn http_conn;

/* Outlives the connection until the app calls done (the only thing done touches). */
typedef struct health_req {
    http_conn *conn; /* NULL once the connection is gone */
} health_req;

enum { ST_READ, ST_HEALTH, ST_PPROF, ST_WRITE, ST_CLOSING };
enum { RAW_BYTES = 16384 };

struct http_conn {
    kv_http_server *srv;
    uv_tcp_t tcp;
    uv_timer_t timer;
    uv_write_t wreq;
    uv_shutdown_t sreq;
    int handles; /* open handles (tcp, timer) */
    int state;
    char *buf;
    size_t len;
    char *resp;
    health_req *hr;
    kv_pprof_req *pr; /* a CPU profile being taken for this connection (ST_PPROF) */
    char sink[64];    /* ST_PPROF: what the client sends meanwhile, read and dropped */
    kv_tls_conn *tls; /* NULL on a plain listener */
    char *raw;        /* TLS: ciphertext read buffer (RAW_BYTES) */
    kv_list link;     /* srv->conns */
};

struct kv_http_server {
    uv_loop_t *loop;
    kv_http_config cfg;
    kv_metrics *metrics;
    kv_http_health_fn health;
    void *app;
    uv_tcp_t listener;
    kv_accept_gate accept_gate; /* at most KV_ACCEPT_BURST accepts per loop iteration */
    int listening, closing;
    int listener_open; /* the listener and the gate's handle, until their close callbacks */
    kv_list conns;     /* http_conn.link, newest first */
    size_t n_conns, n_rejecting;
    size_t n_closing; /* conns closed, waiting for their close callbacks */
    kv_metric *m_conns, *m_evicted, *m_timeouts, *m_rejected;
    void (*close_cb)(void *);
    void *close_arg;
};

void kv_http_config_default(kv_http_config *cfg)
{
    cfg->max_header_bytes = 8192;
    cfg->health_timeout_ms = 5000;
    cfg->request_timeout_ms = 10000;
    cfg->max_connections = 256;
    cfg->tls = NULL;
    cfg->pprof = NULL;
}

static void on_connection(uv_stream_t *l, int status);

int kv_http_server_init(kv_http_server **out, uv_loop_t *loop, const kv_http_config *cfg,
                        kv_metrics *metrics, kv_http_health_fn health, void *app)
{
    if (!out || !loop)
        return -EINVAL;
    kv_http_server *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    kv_list_init(&s->conns);
    kv_http_config def;
    kv_http_config_default(&def);
    s->cfg = cfg ? *cfg : def;
    if (s->cfg.tls)
        kv_tls_ctx_ref(s->cfg.tls); /* dropped in maybe_finalize */
    if (!s->cfg.max_header_bytes)
        s->cfg.max_header_bytes = def.max_header_bytes;
    if (!s->cfg.health_timeout_ms)
        s->cfg.health_timeout_ms = def.health_timeout_ms;
    if (!s->cfg.request_timeout_ms)
        s->cfg.request_timeout_ms = def.request_timeout_ms;
    if (!s->cfg.max_connections)
        s->cfg.max_connections = def.max_connections;
    s->loop = loop;
    s->metrics = metrics;
    if (metrics) {
        /* Shared by every metrics listener (same series): totals over the listeners. */
        s->m_conns =
            kv_metrics_gauge(metrics, "kvd_metrics_http_connections",
                             "Open connections on the /metrics and /health listeners.", NULL);
        s->m_evicted = kv_metrics_counter(
            metrics, "kvd_metrics_http_evicted_total",
            "Metrics-port connections with no complete request closed to admit a new one "
            "(--metrics-max-connections reached).",
            NULL);
        s->m_timeouts =
            kv_metrics_counter(metrics, "kvd_metrics_http_request_timeouts_total",
                               "Metrics-port connections closed: no complete request within "
                               "--metrics-request-timeout.",
                               NULL);
        s->m_rejected = kv_metrics_counter(
            metrics, "kvd_metrics_http_rejected_total",
            "Metrics-port connections refused: every slot busy with a request in progress.", NULL);
    }
    s->health = health;
    s->app = app;
    int rv = uv_tcp_init(loop, &s->listener);
    if (rv < 0) {
        free(s);
        return rv;
    }
    s->listener.data = s;
    kv_accept_gate_init(&s->accept_gate, loop, 0, on_connection, s);
    s->listener_open = 2;
    *out = s;
    return 0;
}

static void maybe_finalize(kv_http_server *s)
{
    if (!s->closing || s->listener_open || !kv_list_empty(&s->conns) || s->n_rejecting)
        return;
    kv_tls_ctx_unref(s->cfg.tls);
    void (*cb)(void *) = s->close_cb;
    void *arg = s->close_arg;
    free(s);
    if (cb)
        cb(arg);
}

static void conn_handle_closed(uv_handle_t *h)
{
    http_conn *c = h->data;
    if (--c->handles > 0)
        return;
    kv_http_server *s = c->srv;
    kv_list_remove(&c->link);
    s->n_conns--;
    s->n_closing--;
    kv_metric_gauge_add(s->m_conns, -1);
    free(c->buf);
    free(c->resp);
    free(c->raw);
    kv_tls_conn_free(c->tls);
    free(c);
    maybe_finalize(s);
}

static void conn_close(http_conn *c)
{
    if (c->state == ST_CLOSING)
        return;
    c->state = ST_CLOSING;
    c->srv->n_closing++;
    if (c->hr) {
        c->hr->conn = NULL; /* the hook may still answer; it will find no connection */
        c->hr = NULL;
    }
    kv_pprof_http_cancel(c->pr); /* a profile for nobody: discarded */
    c->pr = NULL;
    uv_close((uv_handle_t *)&c->tcp, conn_handle_closed);
    uv_close((uv_handle_t *)&c->timer, conn_handle_closed);
}

static void shutdown_cb(uv_shutdown_t *req, int status)
{
    (void)status;
    conn_close(req->data);
}

static void write_cb(uv_write_t *req, int status)
{
    http_conn *c = req->data;
    if (c->state == ST_CLOSING)
        return;
    if (status < 0 || uv_shutdown(&c->sreq, (uv_stream_t *)&c->tcp, shutdown_cb) < 0)
        conn_close(c);
}

static const char *reason_phrase(int code)
{
    switch (code) {
    case 200:
        return "OK";
    case 400:
        return "Bad Request";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 431:
        return "Request Header Fields Too Large";
    case 500:
        return "Internal Server Error";
    case 503:
        return "Service Unavailable";
    default:
        return "Error";
    }
}

size_t kv_http_health_reason_line(char *dst, size_t cap, const char *reason)
{
    if (cap == 0)
        return 0;
    int n = snprintf(dst, cap, "%s: ", KV_HTTP_HEALTH_REASON_HEADER);
    size_t o = n < 0 ? 0 : (size_t)n;
    const char *r = reason ? reason : "";
    for (size_t i = 0; r[i] && i < 200 && o + 3 < cap; i++) {
        unsigned char ch = (unsigned char)r[i];
        dst[o++] = ch >= 0x20 && ch < 0x7f ? (char)ch : '?';
    }
    if (o + 3 <= cap) {
        dst[o++] = '\r';
        dst[o++] = '\n';
    }
    dst[o < cap ? o : cap - 1] = '\0';
    return o < cap ? o : cap - 1;
}

static void timer_cb(uv_timer_t *t);

/* The last write of a connection (c->resp or NULL): then shutdown and close. The request
 * timeout bounds the write too: a client that never reads the answer would otherwise hold
 * its slot for ever, and ST_WRITE connections are not evicted for newcomers. */
static void send_final(http_conn *c, char *p, size_t n)
{
    uv_timer_start(&c->timer, timer_cb, c->srv->cfg.request_timeout_ms, 0);
    uv_read_stop((uv_stream_t *)&c->tcp);
    c->state = ST_WRITE;
    uv_buf_t b = uv_buf_init(p, (unsigned)n);
    c->wreq.data = c;
    if (uv_write(&c->wreq, (uv_stream_t *)&c->tcp, &b, 1, write_cb) < 0)
        conn_close(c);
}

/* Takes ownership of nothing: body is copied. extra: more header lines ("Name: v\r\n"...)
 * or NULL. */
static void respond_hdr(http_conn *c, int code, const char *ctype, const char *extra,
                        const char *body, size_t blen)
{
    if (c->state == ST_CLOSING || c->state == ST_WRITE)
        return;
    uv_timer_stop(&c->timer);
    uv_read_stop((uv_stream_t *)&c->tcp);
    char head[512];
    int hl = snprintf(head, sizeof(head),
                      "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                      "%sConnection: close\r\n\r\n",
                      code, reason_phrase(code), ctype, blen, extra ? extra : "");
    if (hl < 0 || (size_t)hl >= sizeof(head)) {
        conn_close(c);
        return;
    }
    c->resp = malloc((size_t)hl + blen);
    if (!c->resp) {
        conn_close(c);
        return;
    }
    memcpy(c->resp, head, (size_t)hl);
    if (blen)
        memcpy(c->resp + hl, body, blen);
    size_t n = (size_t)hl + blen;
    if (c->tls) { /* c->resp becomes the ciphertext of the response */
        int rc = kv_tls_conn_write(c->tls, (const uint8_t *)c->resp, n);
        free(c->resp);
        c->resp = NULL;
        n = rc < 0 ? 0 : kv_tls_conn_out_pending(c->tls);
        if (n == 0 || !(c->resp = malloc(n))) {
            conn_close(c);
            return;
        }
        n = kv_tls_conn_out_read(c->tls, (uint8_t *)c->resp, n);
    }
    send_final(c, c->resp, n);
}

static void respond(http_conn *c, int code, const char *ctype, const char *body, size_t blen)
{
    respond_hdr(c, code, ctype, NULL, body, blen);
}

static void respond_text(http_conn *c, int code, const char *text)
{
    respond(c, code, "text/plain; charset=utf-8", text, strlen(text));
}

static void respond_health(http_conn *c, int ok, const char *reason)
{
    if (ok) {
        static const char body[] = "{\"health\":\"true\"}";
        respond(c, 200, "application/json", body, sizeof(body) - 1);
        return;
    }
    static const char body[] = "{\"health\":\"false\"}";
    char line[256];
    kv_http_health_reason_line(line, sizeof(line), reason);
    respond_hdr(c, 503, "application/json", line, body, sizeof(body) - 1);
}

static void health_done(void *ctx, int ok, const char *reason)
{
    health_req *hr = ctx;
    http_conn *c = hr->conn;
    free(hr);
    if (!c)
        return; /* connection (or server) already gone */
    c->hr = NULL;
    if (c->state == ST_HEALTH)
        respond_health(c, ok, reason);
}

static void pprof_reply(void *ctx, int status, const char *ctype, const char *extra,
                        const char *body, size_t len)
{
    http_conn *c = ctx;
    c->pr = NULL;
    respond_hdr(c, status, ctype, extra, body, len);
}

static void timer_cb(uv_timer_t *t)
{
    http_conn *c = t->data;
    if (c->state == ST_HEALTH) {
        if (c->hr) {
            c->hr->conn = NULL;
            c->hr = NULL;
        }
        respond_health(c, 0, "timeout");
    } else if (c->state == ST_READ || c->state == ST_WRITE) {
        kv_metric_inc(c->srv->m_timeouts);
        conn_close(c);
    }
}

static void handle_request(http_conn *c)
{
    kv_http_server *s = c->srv;
    char *line_end = memchr(c->buf, '\n', c->len); /* read_cb saw a complete head */
    if (line_end > c->buf && line_end[-1] == '\r')
        line_end--;
    char *sp1 = memchr(c->buf, ' ', (size_t)(line_end - c->buf));
    char *sp2 = sp1 ? memchr(sp1 + 1, ' ', (size_t)(line_end - sp1 - 1)) : NULL;
    if (!sp1 || !sp2) {
        respond_text(c, 404, "bad request\n");
        return;
    }
    *sp1 = 0;
    *sp2 = 0;
    char *target = sp1 + 1;
    char *q = strchr(target, '?');
    if (q)
        *q = 0;
    if (strcmp(c->buf, "GET") != 0) {
        respond_text(c, 405, "method not allowed\n");
        return;
    }
    if (s->cfg.pprof && kv_pprof_http_match(target)) {
        c->state = ST_PPROF; /* no request timeout while a profile runs; reads go on, so that a
                              * client that leaves ends its profile (read_cb) */
        uv_timer_stop(&c->timer);
        kv_pprof_http_handle(s->cfg.pprof, target, q ? q + 1 : NULL, pprof_reply, c, &c->pr);
        return;
    }
    if (strcmp(target, "/metrics") == 0) {
        char *out = NULL;
        size_t len = 0;
        if (s->metrics && kv_metrics_render(s->metrics, &out, &len) != 0) {
            respond_text(c, 500, "out of memory\n");
            return;
        }
        respond(c, 200, "text/plain; version=0.0.4", out ? out : "", len);
        free(out);
        return;
    }
    if (strcmp(target, "/health") == 0) {
        if (!s->health) {
            respond_health(c, 1, NULL);
            return;
        }
        health_req *hr = calloc(1, sizeof(*hr));
        if (!hr) {
            respond_health(c, 0, "out of memory");
            return;
        }
        hr->conn = c;
        c->hr = hr;
        c->state = ST_HEALTH;
        uv_read_stop((uv_stream_t *)&c->tcp);
        uv_timer_start(&c->timer, timer_cb, s->cfg.health_timeout_ms, 0);
        s->health(s->app, health_done, hr); /* may answer synchronously */
        return;
    }
    respond_text(c, 404, "404 page not found\n");
}

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    http_conn *c = h->data;
    if (c->state == ST_PPROF) { /* reading only to see the client leave */
        *buf = uv_buf_init(c->sink, sizeof(c->sink));
        return;
    }
    if (c->tls) {
        *buf = uv_buf_init(c->raw, RAW_BYTES);
        return;
    }
    size_t room = c->srv->cfg.max_header_bytes - c->len;
    *buf = uv_buf_init(c->buf + c->len, (unsigned)room);
}

/* c->buf holds c->len bytes of request head so far: answer once it is complete. */
static void process_head(http_conn *c)
{
    c->buf[c->len] = 0;
    /* The head ends at an empty line; lines end with CRLF or a bare LF (Go's net/textproto,
     * etcd's server, tolerates it). A NUL anywhere in it is refused (400). */
    if (memchr(c->buf, '\0', c->len)) {
        respond_text(c, 400, "bad request\n");
        return;
    }
    for (size_t i = 0; i + 1 < c->len; i++)
        if (c->buf[i] == '\n' &&
            (c->buf[i + 1] == '\n' ||
             (c->buf[i + 1] == '\r' && i + 2 < c->len && c->buf[i + 2] == '\n'))) {
            handle_request(c);
            return;
        }
    if (c->len >= c->srv->cfg.max_header_bytes)
        respond_text(c, 431, "request header too large\n");
}

/* TLS: decrypted request bytes; beyond max_header_bytes they are dropped (431 follows). */
static int plain_in(void *arg, const uint8_t *p, size_t n)
{
    http_conn *c = arg;
    size_t room = c->srv->cfg.max_header_bytes - c->len;
    if (n > room)
        n = room;
    memcpy(c->buf + c->len, p, n);
    c->len += n;
    return c->len >= c->srv->cfg.max_header_bytes; /* full: stop */
}

static void raw_written(uv_write_t *req, int status)
{
    (void)status;
    free(req); /* the data follows the request in the same block */
}

/* TLS: puts the handshake output waiting in c->tls on the wire. Returns 0 or negative. */
static int tls_flush(http_conn *c)
{
    size_t n = kv_tls_conn_out_pending(c->tls);
    if (n == 0)
        return 0;
    uv_write_t *req = malloc(sizeof(*req) + n);
    if (!req)
        return -ENOMEM;
    char *p = (char *)(req + 1);
    n = kv_tls_conn_out_read(c->tls, (uint8_t *)p, n);
    uv_buf_t b = uv_buf_init(p, (unsigned)n);
    int rc = uv_write(req, (uv_stream_t *)&c->tcp, &b, 1, raw_written);
    if (rc < 0)
        free(req);
    return rc;
}

static void tls_read(http_conn *c, size_t nread)
{
    int rc = kv_tls_conn_recv(c->tls, (const uint8_t *)c->raw, nread, plain_in, c);
    if (rc < 0) {
        /* Handshake or record failure (wrong CA, no client certificate, plain HTTP, garbage):
         * the alert (or the HTTP 400 answer) goes out, then the connection closes. */
        size_t n = kv_tls_conn_out_pending(c->tls);
        if (n == 0 || !(c->resp = malloc(n))) {
            conn_close(c);
            return;
        }
        n = kv_tls_conn_out_read(c->tls, (uint8_t *)c->resp, n);
        send_final(c, c->resp, n);
        return;
    }
    if (tls_flush(c) < 0) {
        conn_close(c);
        return;
    }
    if (c->len > 0)
        process_head(c);
}

static void read_cb(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
    (void)buf;
    http_conn *c = st->data;
    if (c->state == ST_PPROF && nread < 0) { /* the client left: its profile is discarded */
        conn_close(c);
        return;
    }
    if (c->state != ST_READ)
        return;
    if (nread < 0) {
        conn_close(c);
        return;
    }
    if (c->tls) {
        tls_read(c, (size_t)nread);
        return;
    }
    c->len += (size_t)nread;
    process_head(c);
}

static void reject_closed_cb(uv_handle_t *h)
{
    kv_http_server *s = h->data;
    free(h);
    s->n_rejecting--;
    maybe_finalize(s);
}

/* TLS: the connection's session, named by the peer address in log lines. */
static int tls_attach(http_conn *c)
{
    char who[64] = "?";
    (void)kv_net_peer_name(&c->tcp, who, sizeof(who));
    int rc = kv_tls_conn_new(c->srv->cfg.tls, who, NULL, &c->tls);
    if (rc == 0)
        kv_tls_conn_http1(c->tls);
    return rc;
}

static void on_connection(uv_stream_t *l, int status)
{
    kv_http_server *s = l->data;
    if (status < 0 || s->closing)
        return;
    if (!kv_accept_gate_admit(&s->accept_gate, l))
        return; /* this iteration's accepts are spent: resumed after the other I/O */
    if (s->n_conns - s->n_closing >= s->cfg.max_connections) {
        /* Full: make room by closing the oldest connection that has not sent a complete
         * request (idle sockets must not lock /health out); refuse only when every slot is
         * busy with a request in progress. The list is newest first. */
        http_conn *victim = NULL;
        kv_list *e;
        kv_list_foreach(e, &s->conns) {
            http_conn *c = kv_list_data(e, http_conn, link);
            if (c->state == ST_READ)
                victim = c;
        }
        if (victim) {
            kv_metric_inc(s->m_evicted);
            conn_close(victim);
        }
    }
    if (s->n_conns - s->n_closing >= s->cfg.max_connections) {
        kv_metric_inc(s->m_rejected);
        uv_tcp_t *t = malloc(sizeof(*t));
        if (!t || uv_tcp_init(s->loop, t) < 0) {
            free(t);
            return;
        }
        t->data = s;
        s->n_rejecting++;
        uv_accept(l, (uv_stream_t *)t);
        uv_close((uv_handle_t *)t, reject_closed_cb);
        return;
    }
    http_conn *c = calloc(1, sizeof(*c));
    if (!c)
        return;
    c->buf = malloc(s->cfg.max_header_bytes + 1);
    if (s->cfg.tls)
        c->raw = malloc(RAW_BYTES);
    if (!c->buf || (s->cfg.tls && !c->raw) || uv_tcp_init(s->loop, &c->tcp) < 0) {
        free(c->buf);
        free(c->raw);
        free(c);
        return;
    }
    uv_timer_init(s->loop, &c->timer);
    c->srv = s;
    c->tcp.data = c;
    c->timer.data = c;
    c->sreq.data = c;
    c->handles = 2;
    c->state = ST_READ;
    kv_list_insert_head(&s->conns, &c->link);
    s->n_conns++;
    kv_metric_gauge_add(s->m_conns, 1);
    if (uv_accept(l, (uv_stream_t *)&c->tcp) < 0 || (s->cfg.tls && tls_attach(c) < 0) ||
        uv_read_start((uv_stream_t *)&c->tcp, alloc_cb, read_cb) < 0) {
        conn_close(c);
        return;
    }
    uv_timer_start(&c->timer, timer_cb, s->cfg.request_timeout_ms, 0);
}

int kv_http_server_listen(kv_http_server *s, const char *host, int port)
{
    if (!s || s->listening || s->closing)
        return -EINVAL;
    int rv = kv_net_listen(&s->listener, host, port, 128, on_connection);
    if (rv < 0)
        return rv;
    s->listening = 1;
    return 0;
}

int kv_http_server_port(kv_http_server *s)
{
    if (!s || !s->listening)
        return -EINVAL;
    return kv_net_bound_port(&s->listener);
}

static void listener_closed(uv_handle_t *h)
{
    kv_http_server *s = h->data;
    s->listener_open--;
    maybe_finalize(s);
}

void kv_http_server_close(kv_http_server *s, void (*cb)(void *arg), void *arg)
{
    if (!s || s->closing)
        return;
    s->closing = 1;
    s->close_cb = cb;
    s->close_arg = arg;
    uv_close((uv_handle_t *)&s->listener, listener_closed);
    kv_accept_gate_close(&s->accept_gate, listener_closed);
    kv_list *e;
    kv_list_foreach(e, &s->conns)
        conn_close(kv_list_data(e, http_conn, link));
}
