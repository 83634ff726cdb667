/*
 * grpc.c - gRPC-over-HTTP/2 details: message framing, status headers, error texts.
 * Pure functions and per-stream state; no I/O.
 */
#include "internal.h"
#include "common/hex.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void kvc_grpc_stream_reset(struct kvc_h2stream *s)
{
    s->http_status = 0;
    s->grpc_status = -1;
    s->grpc_message[0] = '\0';
    s->rb.len = 0;
    s->nmsgs = 0;
    s->bad = 0;
}

uint64_t kvc_now_ms(void)
{
    return uv_hrtime() / 1000000u;
}

void kvc_set_err(kvc_error *err, int code, const char *fmt, ...)
{
    if (!err)
        return;
    err->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
}

int kvc_fail(kvc_error *err, int code, const char *fmt, ...)
{
    if (err) {
        err->code = code;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
    }
    return -code;
}

int kvc_rbuf_append(struct kvc_rbuf *b, const uint8_t *d, size_t n)
{
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n)
            cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (!p)
            return -1;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, d, n);
    b->len += n;
    return 0;
}

void kvc_rbuf_consume(struct kvc_rbuf *b, size_t n)
{
    if (n >= b->len) {
        b->len = 0;
        /* Do not keep a large buffer around after a big message. */
        if (b->cap > 64 * 1024) {
            free(b->p);
            b->p = NULL;
            b->cap = 0;
        }
        return;
    }
    memmove(b->p, b->p + n, b->len - n);
    b->len -= n;
}

void kvc_rbuf_free(struct kvc_rbuf *b)
{
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

void kvc_percent_decode(char *dst, size_t dstsz, const uint8_t *src, size_t n)
{
    size_t o = 0;
    for (size_t i = 0; i < n && o + 1 < dstsz; i++) {
        if (src[i] == '%' && i + 2 < n && kv_hex_digit(src[i + 1]) >= 0 &&
            kv_hex_digit(src[i + 2]) >= 0) {
            dst[o++] = (char)(kv_hex_digit(src[i + 1]) * 16 + kv_hex_digit(src[i + 2]));
            i += 2;
        } else {
            dst[o++] = (char)src[i];
        }
    }
    if (dstsz)
        dst[o] = '\0';
}

int kvc_http_to_grpc(int http_status)
{
    switch (http_status) {
    case 400:
        return KVC_INTERNAL;
    case 401:
        return KVC_UNAUTHENTICATED;
    case 403:
        return KVC_PERMISSION_DENIED;
    case 404:
        return KVC_UNIMPLEMENTED;
    case 429:
    case 502:
    case 503:
    case 504:
        return KVC_UNAVAILABLE;
    default:
        return KVC_UNKNOWN;
    }
}

int kvc_h2_error_to_grpc(uint32_t h2err)
{
    switch (h2err) {
    case NGHTTP2_REFUSED_STREAM:
        return KVC_UNAVAILABLE;
    case NGHTTP2_CANCEL:
        return KVC_CANCELLED;
    case NGHTTP2_ENHANCE_YOUR_CALM:
        return KVC_RESOURCE_EXHAUSTED;
    case NGHTTP2_INADEQUATE_SECURITY:
        return KVC_PERMISSION_DENIED;
    default:
        return KVC_INTERNAL;
    }
}

static int name_is(const uint8_t *name, size_t namelen, const char *lit)
{
    size_t l = strlen(lit);
    return namelen == l && memcmp(name, lit, l) == 0;
}

void kvc_grpc_on_header(struct kvc_h2stream *s, const uint8_t *name, size_t namelen,
                        const uint8_t *value, size_t valuelen)
{
    if (name_is(name, namelen, ":status")) {
        int v = 0;
        for (size_t i = 0; i < valuelen && i < 4; i++)
            if (isdigit(value[i]))
                v = v * 10 + (value[i] - '0');
        s->http_status = v;
    } else if (name_is(name, namelen, "grpc-status")) {
        int v = 0;
        for (size_t i = 0; i < valuelen && i < 6; i++)
            if (isdigit(value[i]))
                v = v * 10 + (value[i] - '0');
        s->grpc_status = v;
    } else if (name_is(name, namelen, "grpc-message")) {
        kvc_percent_decode(s->grpc_message, sizeof s->grpc_message, value, valuelen);
    }
}

int kvc_grpc_parse(struct kvc_h2stream *s, uint32_t max_msg,
                   void (*on_msg)(void *ctx, const uint8_t *m, size_t n), void *ctx)
{
    while (s->rb.len >= 5) {
        const uint8_t *p = s->rb.p;
        uint32_t mlen = ((uint32_t)p[1] << 24) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 8) |
                        (uint32_t)p[4];
        if (p[0] != 0) {
            s->bad = 1;
            s->bad_code = KVC_INTERNAL;
            snprintf(s->bad_msg, sizeof s->bad_msg,
                     "kvclient: compressed response message (not negotiated)");
            return -1;
        }
        if (mlen > max_msg) {
            s->bad = 1;
            s->bad_code = KVC_RESOURCE_EXHAUSTED;
            snprintf(s->bad_msg, sizeof s->bad_msg,
                     "kvclient: response message of %u bytes exceeds the limit of %u", mlen,
                     max_msg);
            return -1;
        }
        if (s->rb.len < 5 + (size_t)mlen)
            return 0;
        s->nmsgs++;
        on_msg(ctx, p + 5, mlen);
        kvc_rbuf_consume(&s->rb, 5 + (size_t)mlen);
        if (s->bad) /* on_msg failed the stream: deliver nothing more */
            return -1;
    }
    return 0;
}

int kvc_grpc_refused(const struct kvc_h2stream *s, uint32_t h2err)
{
    return h2err == NGHTTP2_REFUSED_STREAM && !s->bad && s->grpc_status < 0 &&
           (s->http_status == 0 || s->http_status == 200);
}

int kvc_grpc_final_status(const struct kvc_h2stream *s, uint32_t h2err, int got_msg, char *msg,
                          size_t msgsz)
{
    if (s->bad) {
        snprintf(msg, msgsz, "%s", s->bad_msg);
        return s->bad_code;
    }
    if (s->grpc_status >= 0) {
        if (s->grpc_status == 0 && !got_msg) {
            snprintf(msg, msgsz, "kvclient: OK status without a response message");
            return KVC_INTERNAL;
        }
        snprintf(msg, msgsz, "%s", s->grpc_message);
        return s->grpc_status;
    }
    if (s->http_status != 0 && s->http_status != 200) {
        snprintf(msg, msgsz, "kvclient: HTTP status %d from server", s->http_status);
        return kvc_http_to_grpc(s->http_status);
    }
    if (h2err != NGHTTP2_NO_ERROR) {
        snprintf(msg, msgsz, "kvclient: stream reset by server: %s", nghttp2_http2_strerror(h2err));
        return kvc_h2_error_to_grpc(h2err);
    }
    snprintf(msg, msgsz, "kvclient: stream ended without grpc-status");
    return KVC_INTERNAL;
}
