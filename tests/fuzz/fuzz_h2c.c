/* fuzz_h2c.c - gRPC client encoder for the fuzz harnesses; see fuzz_h2c.h. A thin layer over
 * tests/lib grpc_raw (a no_socket connection): stream handles, the output buffer, and the
 * harness's error conventions. */
#include "fuzz_h2c.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "grpc_raw.h"

#define H2C_MAX_STREAMS 256

struct kv_fuzz_h2c {
    kv_it_grpc *g;
    kv_it_grpc_stream *st[H2C_MAX_STREAMS]; /* owned by g */
    int reset[H2C_MAX_STREAMS];             /* RST_STREAM submitted by the harness */
    int n;
    uint8_t *out;
    size_t out_len, out_cap;
};

int kv_fuzz_h2c_new(kv_fuzz_h2c **out)
{
    kv_fuzz_h2c *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return -ENOMEM;
    kv_it_grpc_opts o = {.no_socket = 1}; /* an empty SETTINGS frame: nghttp2's defaults */
    int rc = kv_it_grpc_open_opts(&c->g, NULL, 0, 0, &o);
    if (rc) {
        free(c);
        return rc;
    }
    *out = c;
    return 0;
}

void kv_fuzz_h2c_free(kv_fuzz_h2c *c)
{
    if (c == NULL)
        return;
    kv_it_grpc_close(c->g);
    free(c->out);
    free(c);
}

int kv_fuzz_h2c_open(kv_fuzz_h2c *c, const char *path, const char *timeout)
{
    if (c->n == H2C_MAX_STREAMS)
        return -ENOSPC;
    kv_it_grpc_req rq = {.authority = "localhost", .timeout = timeout};
    kv_it_grpc_stream *st = kv_it_grpc_stream_start(c->g, path, &rq);
    if (st == NULL)
        return -EPROTO;
    c->st[c->n] = st;
    return c->n++;
}

int kv_fuzz_h2c_open_http(kv_fuzz_h2c *c, const char *method, const char *path)
{
    if (c->n == H2C_MAX_STREAMS)
        return -ENOSPC;
    kv_it_grpc_req rq = {
        .method = method, .authority = "localhost", .content_type = "application/json"};
    kv_it_grpc_stream *st = kv_it_grpc_stream_start(c->g, path, &rq);
    if (st == NULL)
        return -EPROTO;
    c->st[c->n] = st;
    return c->n++;
}

static kv_it_grpc_stream *handle(kv_fuzz_h2c *c, int h)
{
    return h < 0 || h >= c->n ? NULL : c->st[h];
}

/* The stream of handle h if the harness may still send on it: 0, -EINVAL or -EPIPE. */
static int writable(kv_fuzz_h2c *c, int h, kv_it_grpc_stream **st)
{
    if ((*st = handle(c, h)) == NULL)
        return -EINVAL;
    return c->reset[h] ? -EPIPE : 0;
}

int kv_fuzz_h2c_send_raw(kv_fuzz_h2c *c, int h, const uint8_t *p, size_t len)
{
    kv_it_grpc_stream *st;
    int rc = writable(c, h, &st);
    return rc ? rc : kv_it_grpc_send_raw(st, p, len, 0);
}

int kv_fuzz_h2c_send(kv_fuzz_h2c *c, int h, const uint8_t *msg, size_t len)
{
    kv_it_grpc_stream *st;
    int rc = writable(c, h, &st);
    return rc ? rc : kv_it_grpc_send_msg(st, msg, len, 0);
}

int kv_fuzz_h2c_end(kv_fuzz_h2c *c, int h)
{
    kv_it_grpc_stream *st = handle(c, h);
    if (st == NULL)
        return -EINVAL;
    if (c->reset[h])
        return 0;
    int rc = kv_it_grpc_send_raw(st, NULL, 0, 1);
    return rc == -EPIPE ? 0 : rc; /* already half-closed or closed */
}

int kv_fuzz_h2c_reset(kv_fuzz_h2c *c, int h)
{
    kv_it_grpc_stream *st = handle(c, h);
    if (st == NULL)
        return -EINVAL;
    if (c->reset[h] || st->closed)
        return 0;
    c->reset[h] = 1;
    kv_it_grpc_stream_cancel(st);
    return 0;
}

int kv_fuzz_h2c_pull(kv_fuzz_h2c *c, const uint8_t **p, size_t *n)
{
    c->out_len = 0;
    for (;;) {
        if (c->out_cap - c->out_len < 4096) {
            size_t cap = c->out_cap ? c->out_cap * 2 : 8192;
            uint8_t *nb = realloc(c->out, cap);
            if (nb == NULL)
                return -ENOMEM;
            c->out = nb;
            c->out_cap = cap;
        }
        size_t k = kv_it_grpc_output(c->g, c->out + c->out_len, c->out_cap - c->out_len);
        if (k == 0)
            break;
        c->out_len += k;
    }
    *p = c->out;
    *n = c->out_len;
    return 0;
}

void kv_fuzz_h2c_recv(kv_fuzz_h2c *c, const uint8_t *p, size_t n)
{
    if (!kv_it_grpc_conn_closed(c->g))
        kv_it_grpc_input(c->g, p, n);
}

int kv_fuzz_h2c_failed(const kv_fuzz_h2c *c)
{
    return kv_it_grpc_conn_closed(c->g);
}

unsigned kv_fuzz_h2c_responses(const kv_fuzz_h2c *c)
{
    return (unsigned)(kv_it_grpc_frames_received(c->g, NGHTTP2_HEADERS) +
                      kv_it_grpc_frames_received(c->g, NGHTTP2_DATA));
}
