/*
 * sendbuf.c - outgoing byte queue of a shared gRPC stream (contract in sendbuf.h).
 */
#include "sendbuf.h"

#include <nghttp2/nghttp2.h>
#include <stdlib.h>
#include <string.h>

uint8_t *kvc_sendbuf_frame(struct kvc_sendbuf *b, size_t n, size_t max)
{
    size_t need = 5 + n;
    if (b->len - b->off + need > max) /* the bytes not yet taken: sent ones do not count */
        return NULL;
    /* The bytes already read go when they are at least as many as the unread ones (each
     * byte is moved O(1) times), or before the allocation would pass 2 * max. */
    if (b->off > 0 && b->len + need > b->cap &&
        (b->off >= b->len - b->off || b->len + need > 2 * max)) {
        memmove(b->buf, b->buf + b->off, b->len - b->off);
        b->len -= b->off;
        b->off = 0;
    }
    if (b->len + need > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        while (cap < b->len + need)
            cap *= 2;
        uint8_t *p = realloc(b->buf, cap);
        if (!p)
            return NULL;
        b->buf = p;
        b->cap = cap;
    }
    uint8_t *d = b->buf + b->len;
    d[0] = 0;
    d[1] = (uint8_t)(n >> 24);
    d[2] = (uint8_t)(n >> 16);
    d[3] = (uint8_t)(n >> 8);
    d[4] = (uint8_t)n;
    b->len += need;
    return d + 5;
}

ssize_t kvc_sendbuf_read(struct kvc_sendbuf *b, uint8_t *out, size_t length)
{
    size_t left = b->len - b->off;
    if (left == 0) {
        b->deferred = 1;
        return NGHTTP2_ERR_DEFERRED;
    }
    size_t n = left < length ? left : length;
    memcpy(out, b->buf + b->off, n);
    b->off += n;
    if (b->off == b->len)
        b->off = b->len = 0;
    return (ssize_t)n;
}

void kvc_sendbuf_clear(struct kvc_sendbuf *b)
{
    b->len = b->off = 0;
}

void kvc_sendbuf_free(struct kvc_sendbuf *b)
{
    free(b->buf);
    b->buf = NULL;
    b->len = b->off = b->cap = 0;
}
