/* test_support.c - see test_support.h. */
#include "test_support.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "grpc/grpc_wire.h"

/* ---------------- server side: test app ---------------- */

typedef struct later_ctx {
    uv_timer_t t;
    kv_grpc_call *call;
} later_ctx;

static void later_closed(uv_handle_t *hd)
{
    free(hd->data);
}

/* Answers a held unary call from a timer, like an app waiting for raft to apply. */
static void later_fire(uv_timer_t *t)
{
    later_ctx *l = t->data;
    if (l->call) {
        static const uint8_t reply[] = "async-reply";
        kv_grpc_call_send(l->call, reply, sizeof(reply) - 1);
        kv_grpc_call_finish(l->call, KV_GRPC_OK, NULL);
    }
    uv_close((uv_handle_t *)&l->t, later_closed);
}

static void on_cancel(kv_grpc_call *call);

static void unary_cancel(kv_grpc_call *call)
{
    later_ctx *l = kv_grpc_call_data(call);
    if (l)
        l->call = NULL;
    on_cancel(call);
}

static void echo_unary(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    if (len == 5 && memcmp(msg, "later", 5) == 0) {
        harness *h = kv_grpc_call_app(call);
        later_ctx *l = calloc(1, sizeof(*l));
        uv_timer_init(&h->loop, &l->t);
        l->t.data = l;
        l->call = call;
        kv_grpc_call_set_data(call, l);
        uv_timer_start(&l->t, later_fire, 150, 0);
        return;
    }
    if (len == 4 && memcmp(msg, "fail", 4) == 0) {
        kv_grpc_call_finish(call, KV_GRPC_INVALID_ARGUMENT, "bad arg: \xc3\xbc 100%\n");
        return;
    }
    if (len == 5 && memcmp(msg, "token", 5) == 0) {
        const char *tok = kv_grpc_call_header(call, "token");
        tok = tok ? tok : "(none)";
        kv_grpc_call_send(call, (const uint8_t *)tok, strlen(tok));
        kv_grpc_call_finish(call, KV_GRPC_OK, NULL);
        return;
    }
    if (len == 4 && memcmp(msg, "hold", 4) == 0)
        return; /* never answered: deadline or cancel ends it */
    if (len == 5 && memcmp(msg, "abort", 5) == 0) {
        kv_grpc_call_abort(call); /* e.g. a committed write whose response cannot be sent */
        return;
    }
    if (kv_grpc_call_send(call, msg, len) != 0) {
        kv_grpc_call_finish(call, KV_GRPC_RESOURCE_EXHAUSTED, "send buffer full");
        return;
    }
    kv_grpc_call_finish(call, KV_GRPC_OK, NULL);
}

static void on_cancel(kv_grpc_call *call)
{
    harness *h = kv_grpc_call_app(call);
    atomic_fetch_add(&h->cancels, 1);
}

typedef struct resume_ctx {
    uv_timer_t t;
    kv_grpc_call *call;
} resume_ctx;

static void resume_closed(uv_handle_t *hd)
{
    free(hd->data);
}

static void resume_fire(uv_timer_t *t)
{
    resume_ctx *r = t->data;
    if (r->call) {
        kv_grpc_call_set_data(r->call, NULL);
        kv_grpc_call_resume_recv(r->call);
    }
    uv_close((uv_handle_t *)&r->t, resume_closed);
}

static void echo_stream(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    if (kv_grpc_call_send(call, msg, len) != 0) {
        kv_grpc_call_finish(call, KV_GRPC_RESOURCE_EXHAUSTED, "send buffer full");
        return;
    }
    if (len == 5 && memcmp(msg, "pause", 5) == 0) {
        /* pause for 100 ms, then resume from a timer */
        harness *h = kv_grpc_call_app(call);
        resume_ctx *r = calloc(1, sizeof(*r));
        uv_timer_init(&h->loop, &r->t);
        r->t.data = r;
        r->call = call;
        kv_grpc_call_set_data(call, r);
        kv_grpc_call_pause_recv(call);
        uv_timer_start(&r->t, resume_fire, 100, 0);
    }
}

static void stream_half_close(kv_grpc_call *call)
{
    harness *h = kv_grpc_call_app(call);
    atomic_fetch_add(&h->half_closes, 1);
    kv_grpc_call_finish(call, KV_GRPC_OK, NULL);
}

static void stream_cancel(kv_grpc_call *call)
{
    resume_ctx *r = kv_grpc_call_data(call);
    if (r)
        r->call = NULL;
    on_cancel(call);
}

static const kv_grpc_method test_methods[] = {
    {"/test.Echo/Unary", 0, echo_unary, NULL, unary_cancel},
    {"/test.Echo/Stream", 1, echo_stream, stream_half_close, stream_cancel},
};

static void health_hook(void *app, kv_http_health_done_fn done, void *ctx)
{
    harness *h = app;
    switch (atomic_load(&h->health_mode)) {
    case HEALTH_OK:
        done(ctx, 1, NULL);
        break;
    case HEALTH_FAIL:
        done(ctx, 0, "raft: no \"leader\"");
        break;
    default:
        h->slow_done = done; /* answered at stop, after the connection is gone */
        h->slow_ctx = ctx;
        break;
    }
}

static void loop_thread(void *arg)
{
    harness *h = arg;
    uv_run(&h->loop, UV_RUN_DEFAULT);
}

static void stop_cb(uv_async_t *a)
{
    harness *h = a->data;
    kv_grpc_server_close(h->grpc, NULL, NULL);
    kv_http_server_close(h->http, NULL, NULL);
    if (h->slow_done) {
        h->slow_done(h->slow_ctx, 1, NULL); /* late answer: must be a safe no-op */
        h->slow_done = NULL;
    }
    uv_close((uv_handle_t *)a, NULL);
}

static void die(const char *what, int rv)
{
    fprintf(stderr, "harness: %s failed: %d\n", what, rv);
    abort();
}

void harness_start(harness *h, const kv_grpc_config *cfg, const kv_http_config *http_cfg)
{
    int rv;
    /* libuv writes with write(2): a peer that reset the connection would raise SIGPIPE.
     * Servers using this transport must ignore it (kvd's main() does). */
    signal(SIGPIPE, SIG_IGN);
    memset(h, 0, sizeof(*h));
    if ((rv = uv_loop_init(&h->loop)) != 0)
        die("uv_loop_init", rv);
    if ((rv = kv_metrics_new(&h->metrics, 0)) != 0)
        die("kv_metrics_new", rv);
    rv = kv_grpc_server_init(&h->grpc, &h->loop, cfg, test_methods,
                             sizeof(test_methods) / sizeof(test_methods[0]), h, h->metrics);
    if (rv)
        die("kv_grpc_server_init", rv);
    if ((rv = kv_grpc_server_listen(h->grpc, "127.0.0.1", 0)) != 0)
        die("kv_grpc_server_listen", rv);
    h->grpc_port = kv_grpc_server_port(h->grpc);
    rv = kv_http_server_init(&h->http, &h->loop, http_cfg, h->metrics, health_hook, h);
    if (rv)
        die("kv_http_server_init", rv);
    if ((rv = kv_http_server_listen(h->http, "127.0.0.1", 0)) != 0)
        die("kv_http_server_listen", rv);
    h->http_port = kv_http_server_port(h->http);
    uv_async_init(&h->loop, &h->stop, stop_cb);
    h->stop.data = h;
    if ((rv = uv_thread_create(&h->thread, loop_thread, h)) != 0)
        die("uv_thread_create", rv);
}

void harness_stop(harness *h)
{
    uv_async_send(&h->stop);
    uv_thread_join(&h->thread);
    h->loop_close_rv = uv_loop_close(&h->loop);
    size_t len;
    if (kv_metrics_render(h->metrics, &h->metrics_text, &len) != 0)
        h->metrics_text = NULL;
    kv_metrics_free(h->metrics);
    h->metrics = NULL;
}

/* ---------------- client side ---------------- */

int tcp_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in sa = {0};
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static h2stream *find_stream(h2client *c, int32_t id)
{
    for (int i = 0; i < c->n; i++)
        if (c->streams[i].id == id)
            return &c->streams[i];
    return NULL;
}

static int cl_on_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name, size_t nl,
                        const uint8_t *value, size_t vl, uint8_t flags, void *ud)
{
    (void)s;
    (void)flags;
    h2stream *st = find_stream(ud, f->hd.stream_id);
    if (!st)
        return 0;
    char v[512];
    size_t n = vl < sizeof(v) - 1 ? vl : sizeof(v) - 1;
    memcpy(v, value, n);
    v[n] = 0;
    if (nl == 7 && memcmp(name, ":status", 7) == 0)
        st->http_status = atoi(v);
    else if (nl == 11 && memcmp(name, "grpc-status", 11) == 0)
        st->grpc_status = atoi(v);
    else if (nl == 12 && memcmp(name, "grpc-message", 12) == 0)
        kv_grpc_percent_decode(v, n, st->grpc_message);
    return 0;
}

static int cl_on_data(nghttp2_session *s, uint8_t flags, int32_t id, const uint8_t *data,
                      size_t len, void *ud)
{
    (void)s;
    (void)flags;
    h2stream *st = find_stream(ud, id);
    if (!st)
        return 0;
    st->data = realloc(st->data, st->dlen + len);
    memcpy(st->data + st->dlen, data, len);
    st->dlen += len;
    return 0;
}

static int cl_on_close(nghttp2_session *s, int32_t id, uint32_t code, void *ud)
{
    (void)s;
    h2stream *st = find_stream(ud, id);
    if (st) {
        st->closed = 1;
        st->close_code = code;
    }
    return 0;
}

static int cl_on_frame_recv(nghttp2_session *s, const nghttp2_frame *f, void *ud)
{
    (void)s;
    if (f->hd.type == NGHTTP2_GOAWAY)
        ((h2client *)ud)->goaway = 1;
    return 0;
}

int h2c_connect_window(h2client *c, int port, uint32_t window)
{
    if (h2c_connect(c, port) != 0)
        return -1;
    nghttp2_settings_entry iv = {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, window};
    nghttp2_submit_settings(c->s, NGHTTP2_FLAG_NONE, &iv, 1);
    return 0;
}

int h2c_connect(h2client *c, int port)
{
    memset(c, 0, sizeof(*c));
    c->fd = tcp_connect(port);
    if (c->fd < 0)
        return -1;
    nghttp2_session_callbacks *cbs;
    nghttp2_session_callbacks_new(&cbs);
    nghttp2_session_callbacks_set_on_header_callback(cbs, cl_on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, cl_on_data);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, cl_on_close);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, cl_on_frame_recv);
    nghttp2_session_client_new(&c->s, cbs, c);
    nghttp2_session_callbacks_del(cbs);
    nghttp2_submit_settings(c->s, NGHTTP2_FLAG_NONE, NULL, 0);
    return 0;
}

void h2c_close(h2client *c)
{
    for (int i = 0; i < c->n; i++) {
        free(c->streams[i].data);
        free(c->streams[i].out);
    }
    nghttp2_session_del(c->s);
    if (c->fd >= 0)
        close(c->fd);
    memset(c, 0, sizeof(*c));
    c->fd = -1;
}

static ssize_t cl_read(nghttp2_session *s, int32_t id, uint8_t *buf, size_t length, uint32_t *flags,
                       nghttp2_data_source *src, void *ud)
{
    (void)s;
    (void)id;
    (void)ud;
    h2stream *st = src->ptr;
    size_t avail = st->out_len - st->out_off;
    size_t n = avail < length ? avail : length;
    memcpy(buf, st->out + st->out_off, n);
    st->out_off += n;
    if (st->out_off == st->out_len && st->out_eof)
        *flags |= NGHTTP2_DATA_FLAG_EOF;
    else if (n == 0)
        return NGHTTP2_ERR_DEFERRED;
    return (ssize_t)n;
}

h2stream *h2c_start(h2client *c, const char *path, const char *content_type, const char *timeout)
{
    return h2c_start_md(c, path, content_type, timeout, NULL, NULL);
}

h2stream *h2c_start_md(h2client *c, const char *path, const char *content_type, const char *timeout,
                       const char *md_name, const char *md_value)
{
    if (c->n >= (int)(sizeof(c->streams) / sizeof(c->streams[0])))
        return NULL;
    h2stream *st = &c->streams[c->n++];
    memset(st, 0, sizeof(*st));
    st->grpc_status = -1;
    const char *ct = content_type ? content_type : "application/grpc";
#define NV(n, v) {(uint8_t *)(n), (uint8_t *)(v), strlen(n), strlen(v), NGHTTP2_NV_FLAG_NONE}
    nghttp2_nv nva[] = {
        NV(":method", c->method ? c->method : "POST"),
        NV(":scheme", "http"),
        NV(":authority", c->authority ? c->authority : "localhost"),
        NV(":path", path),
        NV("content-type", ct),
        NV("te", "trailers"),
        NV("grpc-timeout", timeout ? timeout : ""),
        NV(md_name ? md_name : "x-none", md_value ? md_value : ""),
    };
    size_t nv = 6;
    if (timeout)
        nva[nv++] = nva[6];
    if (md_name)
        nva[nv++] = nva[7];
    nghttp2_data_provider prd;
    prd.source.ptr = st;
    prd.read_callback = cl_read;
    st->id = nghttp2_submit_request(c->s, NULL, nva, nv, &prd, st);
    if (st->id < 0)
        return NULL;
    return st;
}

void h2c_send(h2client *c, h2stream *st, const void *data, size_t n, int eof)
{
    st->out = realloc(st->out, st->out_len + n + 1);
    memcpy(st->out + st->out_len, data, n);
    st->out_len += n;
    if (eof)
        st->out_eof = 1;
    nghttp2_session_resume_data(c->s, st->id);
}

void h2c_send_msg(h2client *c, h2stream *st, const void *msg, size_t n, int eof)
{
    uint8_t hdr[5] = {0, (uint8_t)(n >> 24), (uint8_t)(n >> 16), (uint8_t)(n >> 8), (uint8_t)n};
    h2c_send(c, st, hdr, 5, 0);
    h2c_send(c, st, msg, n, eof);
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* One round: flush, then read for up to wait_ms. Returns -1 when the connection is gone. */
static int pump_once(h2client *c, int wait_ms)
{
    for (;;) {
        const uint8_t *p;
        ssize_t n = nghttp2_session_mem_send(c->s, &p);
        if (n < 0)
            return -1;
        if (n == 0)
            break;
        size_t off = 0;
        while (off < (size_t)n) {
            ssize_t w = send(c->fd, p + off, (size_t)n - off, MSG_NOSIGNAL);
            if (w <= 0) {
                c->conn_closed = 1;
                return -1;
            }
            off += (size_t)w;
        }
    }
    struct pollfd pfd = {c->fd, POLLIN, 0};
    if (poll(&pfd, 1, wait_ms) <= 0)
        return 0;
    uint8_t buf[65536];
    ssize_t r = recv(c->fd, buf, sizeof(buf), 0);
    if (r <= 0) {
        c->conn_closed = 1;
        return -1;
    }
    if (nghttp2_session_mem_recv(c->s, buf, (size_t)r) < 0) {
        c->conn_closed = 1;
        return -1;
    }
    return 0;
}

int h2c_wait(h2client *c, h2stream *st, int timeout_ms)
{
    uint64_t end = now_ms() + (uint64_t)timeout_ms;
    while (now_ms() < end) {
        if (st && st->closed)
            return 1;
        if (c->conn_closed)
            return st ? st->closed : 1;
        pump_once(c, 20);
    }
    return st ? st->closed : c->conn_closed;
}

int h2c_wait_bytes(h2client *c, h2stream *st, size_t n, int timeout_ms)
{
    uint64_t end = now_ms() + (uint64_t)timeout_ms;
    while (now_ms() < end && st->dlen < n && !st->closed && !c->conn_closed)
        pump_once(c, 20);
    return st->dlen >= n;
}

size_t grpc_msgs(const h2stream *st, size_t idx, const uint8_t **msg, size_t *len)
{
    size_t off = 0, count = 0;
    while (off + 5 <= st->dlen) {
        const uint8_t *p = st->data + off;
        size_t l = ((size_t)p[1] << 24) | ((size_t)p[2] << 16) | ((size_t)p[3] << 8) | p[4];
        if (off + 5 + l > st->dlen)
            break;
        if (count == idx && msg) {
            *msg = p + 5;
            *len = l;
        }
        count++;
        off += 5 + l;
    }
    return count;
}

char *http_get(int port, const char *path)
{
    int fd = tcp_connect(port);
    if (fd < 0)
        return NULL;
    char req[512];
    int n = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: localhost\r\n\r\n", path);
    if (send(fd, req, (size_t)n, MSG_NOSIGNAL) != n) {
        close(fd);
        return NULL;
    }
    size_t cap = 4096, len = 0;
    char *out = malloc(cap);
    for (;;) {
        if (len + 1024 > cap) {
            cap *= 2;
            out = realloc(out, cap);
        }
        ssize_t r = recv(fd, out + len, cap - len - 1, 0);
        if (r <= 0)
            break;
        len += (size_t)r;
    }
    close(fd);
    out[len] = 0;
    return out;
}
