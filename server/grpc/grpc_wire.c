/* grpc_wire.c - see grpc_wire.h. */
#include "grpc/grpc_wire.h"
#include "common/hex.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

const char *kv_grpc_code_name(int code)
{
    static const char *const names[] = {
        "OK",
        "CANCELLED",
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
        "UNAUTHENTICATED",
    };
    if (code < 0 || code >= (int)(sizeof(names) / sizeof(names[0])))
        return "UNKNOWN";
    return names[code];
}

int kv_grpc_parse_timeout(const char *v, size_t len, uint64_t *ms_out)
{
    if (!v || len < 2 || len > 9)
        return -EINVAL;
    uint64_t n = 0;
    for (size_t i = 0; i + 1 < len; i++) {
        if (v[i] < '0' || v[i] > '9')
            return -EINVAL;
        n = n * 10 + (uint64_t)(v[i] - '0');
    }
    uint64_t ms;
    switch (v[len - 1]) {
    case 'H':
        ms = n * 3600000ULL;
        break;
    case 'M':
        ms = n * 60000ULL;
        break;
    case 'S':
        ms = n * 1000ULL;
        break;
    case 'm':
        ms = n;
        break;
    case 'u':
        ms = (n + 999) / 1000;
        break;
    case 'n':
        ms = (n + 999999) / 1000000;
        break;
    default:
        return -EINVAL;
    }
    *ms_out = ms;
    return 0;
}

char *kv_grpc_percent_encode(const char *msg)
{
    static const char hex[] = "0123456789ABCDEF";
    if (!msg)
        msg = "";
    size_t n = strlen(msg);
    char *out = malloc(n * 3 + 1);
    if (!out)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t c = (uint8_t)msg[i];
        if (c < 0x20 || c > 0x7e || c == '%') {
            out[o++] = '%';
            out[o++] = hex[c >> 4];
            out[o++] = hex[c & 15];
        } else {
            out[o++] = (char)c;
        }
    }
    out[o] = 0;
    return out;
}

size_t kv_grpc_percent_decode(const char *in, size_t n, char *out)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        int hi = i + 2 < n ? kv_hex_digit((unsigned char)in[i + 1]) : -1;
        int lo = i + 2 < n ? kv_hex_digit((unsigned char)in[i + 2]) : -1;
        if (in[i] == '%' && hi >= 0 && lo >= 0) {
            out[o++] = (char)(hi * 16 + lo);
            i += 2;
        } else {
            out[o++] = in[i];
        }
    }
    out[o] = 0;
    return o;
}

void kv_grpc_deframer_init(kv_grpc_deframer *d, size_t max_len)
{
    memset(d, 0, sizeof(*d));
    d->max_len = max_len;
}

void kv_grpc_deframer_free(kv_grpc_deframer *d)
{
    free(d->buf);
    d->buf = NULL;
    d->have = d->cap = 0;
}

int kv_grpc_deframer_partial(const kv_grpc_deframer *d)
{
    return d->hdr_have > 0 || d->in_body;
}

size_t kv_grpc_deframer_buffered(const kv_grpc_deframer *d)
{
    return d->cap;
}

/* Appends to the partial body, growing geometrically up to msg_len. */
static int body_append(kv_grpc_deframer *d, const uint8_t *p, size_t n)
{
    if (d->have + n > d->cap) {
        size_t cap = d->cap ? d->cap : 4096;
        while (cap < d->have + n)
            cap *= 2;
        if (cap > d->msg_len)
            cap = d->msg_len;
        uint8_t *nb = realloc(d->buf, cap);
        if (!nb)
            return KV_GRPC_DF_NOMEM;
        d->buf = nb;
        d->cap = cap;
    }
    memcpy(d->buf + d->have, p, n);
    d->have += n;
    return 0;
}

int kv_grpc_deframer_feed(kv_grpc_deframer *d, const uint8_t *in, size_t n, size_t *consumed,
                          kv_grpc_msg_cb cb, void *arg)
{
    size_t off = 0;
    int rv = 0;
    for (;;) {
        if (!d->in_body) {
            if (off == n)
                break;
            size_t take = 5 - d->hdr_have;
            if (take > n - off)
                take = n - off;
            memcpy(d->hdr + d->hdr_have, in + off, take);
            d->hdr_have += take;
            off += take;
            if (d->hdr_have < 5)
                break;
            d->flag = d->hdr[0];
            d->msg_len = ((uint32_t)d->hdr[1] << 24) | ((uint32_t)d->hdr[2] << 16) |
                         ((uint32_t)d->hdr[3] << 8) | d->hdr[4];
            if (d->flag == 1) {
                rv = KV_GRPC_DF_COMPRESSED;
                break;
            }
            if (d->flag != 0) {
                rv = KV_GRPC_DF_BAD_FLAG;
                break;
            }
            if (d->msg_len > d->max_len) {
                rv = KV_GRPC_DF_TOO_LARGE;
                break;
            }
            d->in_body = 1;
            d->have = 0;
        }
        size_t need = d->msg_len - d->have;
        size_t avail = n - off;
        const uint8_t *msg;
        if (d->have == 0 && avail >= need) {
            msg = in + off; /* whole body in this chunk: zero-copy */
            off += need;
        } else {
            if (avail == 0)
                break;
            size_t take = avail < need ? avail : need;
            rv = body_append(d, in + off, take);
            if (rv)
                break;
            off += take;
            if (d->have < d->msg_len)
                break;
            msg = d->buf;
        }
        d->in_body = 0;
        d->hdr_have = 0;
        size_t len = d->msg_len;
        int stop = cb(arg, msg, len);
        d->have = 0;
        if (d->cap) /* no buffer between messages: an idle stream holds none */
            kv_grpc_deframer_free(d);
        if (stop) {
            rv = KV_GRPC_DF_STOPPED;
            break;
        }
    }
    if (consumed)
        *consumed = off;
    return rv;
}
