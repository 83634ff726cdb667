/* grpc_io.c - byte buffer and the plain (h2c) I/O layer; see grpc_io.h. */
#include "grpc/grpc_io.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int kv_grpc_buf_append(kv_grpc_buf *b, const void *data, size_t n)
{
    if (n == 0)
        return 0;
    if (b->off > 0 && b->len + n > b->cap) {
        memmove(b->p, b->p + b->off, b->len - b->off);
        b->len -= b->off;
        b->off = 0;
    }
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : KV_GRPC_BUF_MIN;
        while (cap < b->len + n)
            cap *= 2;
        uint8_t *np = realloc(b->p, cap);
        if (!np)
            return -ENOMEM;
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->len, data, n);
    b->len += n;
    return 0;
}

size_t kv_grpc_buf_size(const kv_grpc_buf *b)
{
    return b->len - b->off;
}

void kv_grpc_buf_consume(kv_grpc_buf *b, size_t n)
{
    b->off += n;
    if (b->off >= b->len) /* drained: an idle connection or stream holds no storage */
        kv_grpc_buf_free(b);
}

void kv_grpc_buf_free(kv_grpc_buf *b)
{
    free(b->p);
    memset(b, 0, sizeof(*b));
}

static int plain_recv(void *io, kv_grpc_conn *c, const uint8_t *in, size_t len)
{
    (void)io;
    return kv_grpc_conn_recv_plain(c, in, len);
}

static int plain_send(void *io, kv_grpc_conn *c, const uint8_t *plain, size_t len, kv_grpc_buf *out)
{
    (void)io;
    (void)c;
    return kv_grpc_buf_append(out, plain, len);
}

const kv_grpc_io_ops kv_grpc_io_plain = {
    .name = "plain",
    .recv = plain_recv,
    .send = plain_send,
    .destroy = NULL,
};
