/* h2conn: see h2conn.h. */
#include "h2conn.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nghttp2/nghttp2.h>

#include "rpc.pb-c.h"

#define LB_RESP_LIMIT (4u * 1024u * 1024u)

typedef struct lb_call {
    lb_conn *c;
    struct lb_call *prev, *next; /* the connection's calls in flight */
    int32_t sid;
    uint8_t *req; /* framed */
    size_t req_len, req_off;
    uint8_t *resp;
    size_t resp_len, resp_cap;
    int grpc_status;
    char grpc_message[128];
    lb_unary_cb cb;
    void *arg;
} lb_call;

typedef struct lb_buf {
    uint8_t *p;
    size_t len, off, cap;
} lb_buf;

struct lb_conn {
    uv_tcp_t tcp;
    uv_connect_t connect_req;
    uv_loop_t *loop;
    nghttp2_session *sess;
    char authority[32];
    lb_conn_event_cb on_event;
    void *arg;
    size_t inflight;
    lb_call *calls; /* in flight, freed at close if never finished */
    int failed, closing, ready;
    /* keepalive stream */
    int32_t ka_sid;
    int ka_eof;
    int ka_status; /* grpc-status of the last keepalive stream, -1 if none */
    char ka_message[128];
    uint64_t ka_resets; /* keepalive streams ended by the server or the transport */
    lb_buf ka_out, ka_in;
    lb_ka_cb ka_cb;
    void *ka_arg;
    uint8_t rbuf[65536];
};

typedef struct lb_write {
    uv_write_t req;
    uv_buf_t buf;
} lb_write;

static int buf_reserve(lb_buf *b, size_t more)
{
    if (b->len + more <= b->cap)
        return 0;
    if (b->off) { /* compact first */
        memmove(b->p, b->p + b->off, b->len - b->off);
        b->len -= b->off;
        b->off = 0;
        if (b->len + more <= b->cap)
            return 0;
    }
    size_t cap = b->cap ? b->cap * 2 : 4096;
    while (cap < b->len + more)
        cap *= 2;
    uint8_t *p = realloc(b->p, cap);
    if (!p)
        return -ENOMEM;
    b->p = p;
    b->cap = cap;
    return 0;
}

static void fail(lb_conn *c, int err)
{
    if (c->failed)
        return;
    c->failed = err ? err : -EIO;
    if (c->on_event)
        c->on_event(c, c->arg, c->failed);
}

static void call_unlink(lb_conn *c, lb_call *call)
{
    if (call->prev)
        call->prev->next = call->next;
    else
        c->calls = call->next;
    if (call->next)
        call->next->prev = call->prev;
    c->inflight--;
}

static void call_free(lb_call *call)
{
    free(call->req);
    free(call->resp);
    free(call);
}

static int on_header(nghttp2_session *s, const nghttp2_frame *frame, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags, void *ud)
{
    (void)flags;
    lb_conn *c = ud;
    if (frame->hd.stream_id == c->ka_sid && c->ka_sid) {
        if (namelen == 11 && memcmp(name, "grpc-status", 11) == 0) {
            char tmp[16];
            size_t n = valuelen < sizeof(tmp) - 1 ? valuelen : sizeof(tmp) - 1;
            memcpy(tmp, value, n);
            tmp[n] = 0;
            c->ka_status = atoi(tmp);
        } else if (namelen == 12 && memcmp(name, "grpc-message", 12) == 0) {
            size_t n = valuelen < sizeof(c->ka_message) - 1 ? valuelen : sizeof(c->ka_message) - 1;
            memcpy(c->ka_message, value, n);
            c->ka_message[n] = 0;
        }
        return 0;
    }
    lb_call *call = nghttp2_session_get_stream_user_data(s, frame->hd.stream_id);
    if (call && namelen == 11 && memcmp(name, "grpc-status", 11) == 0) {
        char tmp[16];
        size_t n = valuelen < sizeof(tmp) - 1 ? valuelen : sizeof(tmp) - 1;
        memcpy(tmp, value, n);
        tmp[n] = 0;
        call->grpc_status = atoi(tmp);
    } else if (call && namelen == 12 && memcmp(name, "grpc-message", 12) == 0) {
        size_t n =
            valuelen < sizeof(call->grpc_message) - 1 ? valuelen : sizeof(call->grpc_message) - 1;
        memcpy(call->grpc_message, value, n);
        call->grpc_message[n] = 0;
    }
    return 0;
}

static void ka_parse(lb_conn *c)
{
    lb_buf *b = &c->ka_in;
    while (b->len - b->off >= 5) {
        const uint8_t *f = b->p + b->off;
        size_t mlen = ((size_t)f[1] << 24) | ((size_t)f[2] << 16) | ((size_t)f[3] << 8) | f[4];
        if (b->len - b->off < 5 + mlen)
            break;
        Etcdserverpb__LeaseKeepAliveResponse *r =
            etcdserverpb__lease_keep_alive_response__unpack(NULL, mlen, f + 5);
        b->off += 5 + mlen;
        if (r) {
            if (c->ka_cb)
                c->ka_cb(c, c->ka_arg, r->id, r->ttl);
            etcdserverpb__lease_keep_alive_response__free_unpacked(r, NULL);
        }
    }
    if (b->off == b->len)
        b->off = b->len = 0;
}

static int on_data(nghttp2_session *s, uint8_t flags, int32_t sid, const uint8_t *data, size_t len,
                   void *ud)
{
    lb_conn *c = ud;
    (void)flags;
    if (sid == c->ka_sid) {
        if (buf_reserve(&c->ka_in, len))
            return NGHTTP2_ERR_CALLBACK_FAILURE;
        memcpy(c->ka_in.p + c->ka_in.len, data, len);
        c->ka_in.len += len;
        ka_parse(c);
        return 0;
    }
    lb_call *call = nghttp2_session_get_stream_user_data(s, sid);
    if (!call)
        return 0;
    if (call->resp_len + len > LB_RESP_LIMIT)
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    if (call->resp_len + len > call->resp_cap) {
        size_t cap = call->resp_cap ? call->resp_cap * 2 : 256;
        while (cap < call->resp_len + len)
            cap *= 2;
        uint8_t *p = realloc(call->resp, cap);
        if (!p)
            return NGHTTP2_ERR_CALLBACK_FAILURE;
        call->resp = p;
        call->resp_cap = cap;
    }
    memcpy(call->resp + call->resp_len, data, len);
    call->resp_len += len;
    return 0;
}

static int on_close(nghttp2_session *s, int32_t sid, uint32_t error_code, void *ud)
{
    lb_conn *c = ud;
    (void)error_code;
    if (sid == c->ka_sid) {
        c->ka_sid = 0;
        if (!c->ka_eof)
            c->ka_resets++;
        return 0;
    }
    lb_call *call = nghttp2_session_get_stream_user_data(s, sid);
    if (!call)
        return 0;
    nghttp2_session_set_stream_user_data(s, sid, NULL);
    call_unlink(c, call);
    const uint8_t *msg = NULL;
    size_t mlen = 0;
    int st = call->grpc_status;
    if (st == 0) {
        if (call->resp_len >= 5) {
            mlen = ((size_t)call->resp[1] << 24) | ((size_t)call->resp[2] << 16) |
                   ((size_t)call->resp[3] << 8) | call->resp[4];
            if (mlen + 5 <= call->resp_len)
                msg = call->resp + 5;
            else
                st = -1;
        } else {
            st = -1;
        }
    }
    call->cb(c, call->arg, st, st ? call->grpc_message : "", msg, msg ? mlen : 0);
    call_free(call);
    return 0;
}

static ssize_t read_unary(nghttp2_session *s, int32_t sid, uint8_t *buf, size_t length,
                          uint32_t *data_flags, nghttp2_data_source *src, void *ud)
{
    (void)s;
    (void)sid;
    (void)ud;
    lb_call *call = src->ptr;
    size_t n = call->req_len - call->req_off;
    if (n > length)
        n = length;
    memcpy(buf, call->req + call->req_off, n);
    call->req_off += n;
    if (call->req_off == call->req_len)
        *data_flags |= NGHTTP2_DATA_FLAG_EOF;
    return (ssize_t)n;
}

static ssize_t read_ka(nghttp2_session *s, int32_t sid, uint8_t *buf, size_t length,
                       uint32_t *data_flags, nghttp2_data_source *src, void *ud)
{
    (void)s;
    (void)sid;
    (void)src;
    lb_conn *c = ud;
    lb_buf *b = &c->ka_out;
    size_t n = b->len - b->off;
    if (n == 0) {
        if (c->ka_eof) {
            *data_flags |= NGHTTP2_DATA_FLAG_EOF;
            return 0;
        }
        return NGHTTP2_ERR_DEFERRED;
    }
    if (n > length)
        n = length;
    memcpy(buf, b->p + b->off, n);
    b->off += n;
    if (b->off == b->len)
        b->off = b->len = 0;
    return (ssize_t)n;
}

static void on_written(uv_write_t *req, int status)
{
    lb_write *w = (lb_write *)req;
    lb_conn *c = req->data;
    free(w->buf.base);
    free(w);
    if (status < 0)
        fail(c, status);
}

void lb_conn_flush(lb_conn *c)
{
    if (c->failed || c->closing || !c->ready)
        return;
    uint8_t *out = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        const uint8_t *data;
        ssize_t n = nghttp2_session_mem_send(c->sess, &data);
        if (n < 0) {
            free(out);
            fail(c, -EPROTO);
            return;
        }
        if (n == 0)
            break;
        if (len + (size_t)n > cap) {
            size_t nc = cap ? cap * 2 : 16384;
            while (nc < len + (size_t)n)
                nc *= 2;
            uint8_t *p = realloc(out, nc);
            if (!p) {
                free(out);
                fail(c, -ENOMEM);
                return;
            }
            out = p;
            cap = nc;
        }
        memcpy(out + len, data, (size_t)n);
        len += (size_t)n;
    }
    if (!len)
        return;
    lb_write *w = malloc(sizeof(*w));
    if (!w) {
        free(out);
        fail(c, -ENOMEM);
        return;
    }
    w->buf = uv_buf_init((char *)out, (unsigned)len);
    w->req.data = c;
    int rc = uv_write(&w->req, (uv_stream_t *)&c->tcp, &w->buf, 1, on_written);
    if (rc < 0) {
        free(out);
        free(w);
        fail(c, rc);
    }
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    lb_conn *c = h->data;
    (void)suggested;
    *buf = uv_buf_init((char *)c->rbuf, sizeof(c->rbuf));
}

static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf)
{
    lb_conn *c = st->data;
    if (n < 0) {
        fail(c, (int)n);
        uv_read_stop(st);
        return;
    }
    if (n == 0)
        return;
    if (nghttp2_session_mem_recv(c->sess, (const uint8_t *)buf->base, (size_t)n) < 0) {
        fail(c, -EPROTO);
        uv_read_stop(st);
        return;
    }
    lb_conn_flush(c);
}

static void on_connect(uv_connect_t *req, int status)
{
    lb_conn *c = req->data;
    if (status < 0) {
        fail(c, status);
        return;
    }
    if (c->closing)
        return;
    uv_tcp_nodelay(&c->tcp, 1);
    c->ready = 1;
    uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
    nghttp2_settings_entry iv[] = {{NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1 << 20}};
    nghttp2_submit_settings(c->sess, NGHTTP2_FLAG_NONE, iv, 1);
    nghttp2_session_set_local_window_size(c->sess, NGHTTP2_FLAG_NONE, 0, 1 << 24);
    lb_conn_flush(c);
    if (c->on_event)
        c->on_event(c, c->arg, 0);
}

int lb_conn_open(uv_loop_t *loop, uint16_t port, lb_conn_event_cb on_event, void *arg,
                 lb_conn **out)
{
    nghttp2_session_callbacks *cbs = NULL;
    lb_conn *c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    c->ka_status = -1;
    c->loop = loop;
    c->on_event = on_event;
    c->arg = arg;
    snprintf(c->authority, sizeof(c->authority), "127.0.0.1:%u", port);
    if (nghttp2_session_callbacks_new(&cbs)) {
        free(c);
        return -ENOMEM;
    }
    nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_close);
    int rc = nghttp2_session_client_new(&c->sess, cbs, c);
    nghttp2_session_callbacks_del(cbs);
    if (rc) {
        free(c);
        return -ENOMEM;
    }
    uv_tcp_init(loop, &c->tcp);
    c->tcp.data = c;
    struct sockaddr_in sa;
    uv_ip4_addr("127.0.0.1", port, &sa);
    c->connect_req.data = c;
    rc = uv_tcp_connect(&c->connect_req, &c->tcp, (const struct sockaddr *)&sa, on_connect);
    if (rc < 0) {
        c->on_event = NULL;
        lb_conn_close(c);
        return rc;
    }
    *out = c;
    return 0;
}

static size_t headers(lb_conn *c, const char *path, nghttp2_nv h[6])
{
#define NV(i, k, v)                                                                                \
    h[i] = (nghttp2_nv){(uint8_t *)(k), (uint8_t *)(v), strlen(k), strlen(v), NGHTTP2_NV_FLAG_NONE}
    NV(0, ":method", "POST");
    NV(1, ":scheme", "http");
    NV(2, ":path", path);
    NV(3, ":authority", c->authority);
    NV(4, "content-type", "application/grpc");
    NV(5, "te", "trailers");
#undef NV
    return 6;
}

int lb_conn_unary(lb_conn *c, const char *method, const uint8_t *req, size_t len, lb_unary_cb cb,
                  void *arg)
{
    if (c->failed)
        return c->failed;
    lb_call *call = calloc(1, sizeof(*call));
    if (!call)
        return -ENOMEM;
    call->req = malloc(len + 5);
    if (!call->req) {
        free(call);
        return -ENOMEM;
    }
    call->req[0] = 0;
    call->req[1] = (uint8_t)(len >> 24);
    call->req[2] = (uint8_t)(len >> 16);
    call->req[3] = (uint8_t)(len >> 8);
    call->req[4] = (uint8_t)len;
    memcpy(call->req + 5, req, len);
    call->req_len = len + 5;
    call->c = c;
    call->cb = cb;
    call->arg = arg;
    call->grpc_status = -1;
    nghttp2_nv h[6];
    size_t n = headers(c, method, h);
    nghttp2_data_provider dp = {.source.ptr = call, .read_callback = read_unary};
    call->sid = nghttp2_submit_request(c->sess, NULL, h, n, &dp, call);
    if (call->sid < 0) {
        free(call->req);
        free(call);
        return -EPROTO;
    }
    call->next = c->calls;
    if (c->calls)
        c->calls->prev = call;
    c->calls = call;
    c->inflight++;
    return 0;
}

int lb_conn_ka_open(lb_conn *c, lb_ka_cb cb, void *arg)
{
    if (c->failed)
        return c->failed;
    if (c->ka_sid)
        return -EBUSY;
    c->ka_cb = cb;
    c->ka_arg = arg;
    c->ka_eof = 0;
    c->ka_status = -1;
    c->ka_out.len = c->ka_out.off = 0; /* whatever the previous stream did not send is lost */
    c->ka_in.len = c->ka_in.off = 0;
    nghttp2_nv h[6];
    size_t n = headers(c, "/etcdserverpb.Lease/LeaseKeepAlive", h);
    nghttp2_data_provider dp = {.read_callback = read_ka};
    int32_t sid = nghttp2_submit_request(c->sess, NULL, h, n, &dp, NULL);
    if (sid < 0)
        return -EPROTO;
    c->ka_sid = sid;
    return 0;
}

int lb_conn_ka_send(lb_conn *c, int64_t id)
{
    if (c->failed)
        return c->failed;
    if (!c->ka_sid)
        return -ENOTCONN;
    Etcdserverpb__LeaseKeepAliveRequest r = ETCDSERVERPB__LEASE_KEEP_ALIVE_REQUEST__INIT;
    r.id = id;
    size_t len = etcdserverpb__lease_keep_alive_request__get_packed_size(&r);
    if (buf_reserve(&c->ka_out, len + 5))
        return -ENOMEM;
    uint8_t *f = c->ka_out.p + c->ka_out.len;
    f[0] = 0;
    f[1] = (uint8_t)(len >> 24);
    f[2] = (uint8_t)(len >> 16);
    f[3] = (uint8_t)(len >> 8);
    f[4] = (uint8_t)len;
    etcdserverpb__lease_keep_alive_request__pack(&r, f + 5);
    c->ka_out.len += len + 5;
    nghttp2_session_resume_data(c->sess, c->ka_sid);
    return 0;
}

void lb_conn_ka_end(lb_conn *c)
{
    if (!c->ka_sid)
        return;
    c->ka_eof = 1;
    nghttp2_session_resume_data(c->sess, c->ka_sid);
}

int lb_conn_ka_open_p(const lb_conn *c)
{
    return c->ka_sid != 0;
}

uint64_t lb_conn_ka_resets(const lb_conn *c, int *status, const char **message)
{
    if (status)
        *status = c->ka_status;
    if (message)
        *message = c->ka_message;
    return c->ka_resets;
}

size_t lb_conn_inflight(const lb_conn *c)
{
    return c->inflight;
}

int lb_conn_failed(const lb_conn *c)
{
    return c->failed;
}

static void on_closed(uv_handle_t *h)
{
    lb_conn *c = h->data;
    if (c->sess) {
        c->on_event = NULL;
        nghttp2_session_del(c->sess);
    }
    while (c->calls) { /* unfinished calls: dropped without their callbacks */
        lb_call *call = c->calls;
        call_unlink(c, call);
        call_free(call);
    }
    free(c->ka_out.p);
    free(c->ka_in.p);
    free(c);
}

void lb_conn_close(lb_conn *c)
{
    if (!c || c->closing)
        return;
    c->closing = 1;
    c->on_event = NULL;
    uv_close((uv_handle_t *)&c->tcp, on_closed);
}
