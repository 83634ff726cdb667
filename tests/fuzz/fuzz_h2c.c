/* fuzz_h2c.c - gRPC client encoder for the fuzz harnesses; see fuzz_h2c.h. */
#include "fuzz_h2c.h"

#include <errno.h>
#include <nghttp2/nghttp2.h>
#include <stdlib.h>
#include <string.h>

#define H2C_MAX_STREAMS 256

typedef struct h2c_stream {
    int32_t id;
    uint8_t *buf;
    size_t len, off, cap;
    int eof;      /* END_STREAM after buf */
    int deferred; /* the data provider returned DEFERRED */
    int started;  /* a data provider is attached */
    int closed;
} h2c_stream;

struct kv_fuzz_h2c {
    nghttp2_session *s;
    h2c_stream st[H2C_MAX_STREAMS];
    int n;
    int failed;
    unsigned responses;
    uint8_t *out;
    size_t out_len, out_cap;
};

static ssize_t read_cb(nghttp2_session *s, int32_t id, uint8_t *buf, size_t length, uint32_t *flags,
                       nghttp2_data_source *src, void *ud)
{
    (void)s;
    (void)id;
    (void)ud;
    h2c_stream *st = src->ptr;
    size_t n = st->len - st->off;
    if (n > length)
        n = length;
    memcpy(buf, st->buf + st->off, n);
    st->off += n;
    if (st->off == st->len) {
        if (st->eof) {
            *flags |= NGHTTP2_DATA_FLAG_EOF;
        } else if (n == 0) {
            st->deferred = 1;
            return NGHTTP2_ERR_DEFERRED;
        }
    }
    return (ssize_t)n;
}

static int on_frame_recv(nghttp2_session *s, const nghttp2_frame *f, void *ud)
{
    (void)s;
    kv_fuzz_h2c *c = ud;
    if (f->hd.type == NGHTTP2_HEADERS || f->hd.type == NGHTTP2_DATA)
        c->responses++;
    return 0;
}

static int on_stream_close(nghttp2_session *s, int32_t id, uint32_t err, void *ud)
{
    (void)s;
    (void)err;
    kv_fuzz_h2c *c = ud;
    for (int i = 0; i < c->n; i++)
        if (c->st[i].id == id)
            c->st[i].closed = 1;
    return 0;
}

int kv_fuzz_h2c_new(kv_fuzz_h2c **out)
{
    kv_fuzz_h2c *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return -ENOMEM;
    nghttp2_session_callbacks *cbs;
    if (nghttp2_session_callbacks_new(&cbs) != 0) {
        free(c);
        return -ENOMEM;
    }
    nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
    int rv = nghttp2_session_client_new(&c->s, cbs, c);
    nghttp2_session_callbacks_del(cbs);
    if (rv != 0) {
        free(c);
        return -ENOMEM;
    }
    nghttp2_submit_settings(c->s, NGHTTP2_FLAG_NONE, NULL, 0);
    *out = c;
    return 0;
}

void kv_fuzz_h2c_free(kv_fuzz_h2c *c)
{
    if (c == NULL)
        return;
    nghttp2_session_del(c->s);
    for (int i = 0; i < c->n; i++)
        free(c->st[i].buf);
    free(c->out);
    free(c);
}

#define NV(n, v)                                                                                   \
    {                                                                                              \
        (uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), NGHTTP2_NV_FLAG_NONE             \
    }

int kv_fuzz_h2c_open(kv_fuzz_h2c *c, const char *path, const char *timeout)
{
    if (c->n == H2C_MAX_STREAMS)
        return -ENOSPC;
    h2c_stream *st = &c->st[c->n];
    nghttp2_nv nv[] = {
        NV(":method", "POST"),
        NV(":scheme", "http"),
        NV(":path", path),
        NV(":authority", "localhost"),
        NV("content-type", "application/grpc"),
        NV("te", "trailers"),
        NV("grpc-timeout", timeout ? timeout : ""),
    };
    size_t nnv = sizeof(nv) / sizeof(nv[0]) - (timeout ? 0 : 1);
    nghttp2_data_provider dp = {.source.ptr = st, .read_callback = read_cb};
    int32_t id = nghttp2_submit_request(c->s, NULL, nv, nnv, &dp, NULL);
    if (id < 0)
        return -EPROTO;
    st->id = id;
    st->started = 1;
    return c->n++;
}

int kv_fuzz_h2c_send_raw(kv_fuzz_h2c *c, int h, const uint8_t *p, size_t len)
{
    if (h < 0 || h >= c->n)
        return -EINVAL;
    h2c_stream *st = &c->st[h];
    if (st->eof || st->closed)
        return -EPIPE;
    if (st->len + len > st->cap) {
        size_t cap = st->cap ? st->cap : 256;
        while (cap < st->len + len)
            cap *= 2;
        uint8_t *nb = realloc(st->buf, cap);
        if (nb == NULL)
            return -ENOMEM;
        st->buf = nb;
        st->cap = cap;
    }
    if (len)
        memcpy(st->buf + st->len, p, len);
    st->len += len;
    if (st->deferred) {
        st->deferred = 0;
        nghttp2_session_resume_data(c->s, st->id);
    }
    return 0;
}

int kv_fuzz_h2c_send(kv_fuzz_h2c *c, int h, const uint8_t *msg, size_t len)
{
    uint8_t pre[5] = {0, (uint8_t)(len >> 24), (uint8_t)(len >> 16), (uint8_t)(len >> 8),
                      (uint8_t)len};
    int rc = kv_fuzz_h2c_send_raw(c, h, pre, sizeof(pre));
    return rc ? rc : kv_fuzz_h2c_send_raw(c, h, msg, len);
}

int kv_fuzz_h2c_end(kv_fuzz_h2c *c, int h)
{
    if (h < 0 || h >= c->n)
        return -EINVAL;
    h2c_stream *st = &c->st[h];
    if (st->eof || st->closed)
        return 0;
    st->eof = 1;
    if (st->deferred) {
        st->deferred = 0;
        nghttp2_session_resume_data(c->s, st->id);
    }
    return 0;
}

int kv_fuzz_h2c_reset(kv_fuzz_h2c *c, int h)
{
    if (h < 0 || h >= c->n)
        return -EINVAL;
    h2c_stream *st = &c->st[h];
    if (st->closed)
        return 0;
    st->closed = 1;
    return nghttp2_submit_rst_stream(c->s, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_CANCEL) ? -EPROTO : 0;
}

int kv_fuzz_h2c_pull(kv_fuzz_h2c *c, const uint8_t **p, size_t *n)
{
    c->out_len = 0;
    for (;;) {
        const uint8_t *d;
        ssize_t k = nghttp2_session_mem_send(c->s, &d);
        if (k < 0)
            return -EPROTO;
        if (k == 0)
            break;
        if (c->out_len + (size_t)k > c->out_cap) {
            size_t cap = c->out_cap ? c->out_cap : 4096;
            while (cap < c->out_len + (size_t)k)
                cap *= 2;
            uint8_t *nb = realloc(c->out, cap);
            if (nb == NULL)
                return -ENOMEM;
            c->out = nb;
            c->out_cap = cap;
        }
        memcpy(c->out + c->out_len, d, (size_t)k);
        c->out_len += (size_t)k;
    }
    *p = c->out;
    *n = c->out_len;
    return 0;
}

void kv_fuzz_h2c_recv(kv_fuzz_h2c *c, const uint8_t *p, size_t n)
{
    if (c->failed)
        return;
    if (nghttp2_session_mem_recv(c->s, p, n) < 0)
        c->failed = 1;
}

int kv_fuzz_h2c_failed(const kv_fuzz_h2c *c)
{
    return c->failed;
}

unsigned kv_fuzz_h2c_responses(const kv_fuzz_h2c *c)
{
    return c->responses;
}
