/*
 * proxy_pb.c - the few protobuf fields the proxy reads or writes without unpacking (proxy_pb.h).
 */
#include "proxy/proxy_pb.h"

#include <errno.h>

static int read_varint(const uint8_t *p, size_t len, size_t *off, uint64_t *out)
{
    uint64_t v = 0;
    for (unsigned shift = 0; shift < 70; shift += 7) {
        if (*off >= len)
            return -EINVAL;
        uint8_t b = p[(*off)++];
        if (shift == 63 && b > 1)
            return -EINVAL;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = v;
            return 0;
        }
    }
    return -EINVAL;
}

/* The last field `field` of msg[0..len): a varint (wt 0: *v) or bytes (wt 2: *p, *n). A field
 * of that number with another wire type, or bytes that are not a message, is -EINVAL. */
static int last_field(const uint8_t *msg, size_t len, uint32_t field, uint32_t want, uint64_t *out,
                      const uint8_t **p, size_t *n)
{
    size_t off = 0;
    while (off < len) {
        uint64_t key, v;
        if (read_varint(msg, len, &off, &key) < 0)
            return -EINVAL;
        uint32_t wt = (uint32_t)(key & 7);
        uint64_t num = key >> 3;
        if (num == 0 || (num == field && wt != want))
            return -EINVAL;
        switch (wt) {
        case 0:
            if (read_varint(msg, len, &off, &v) < 0)
                return -EINVAL;
            if (num == field)
                *out = v;
            break;
        case 1:
            if (len - off < 8)
                return -EINVAL;
            off += 8;
            break;
        case 2:
            if (read_varint(msg, len, &off, &v) < 0 || v > len - off)
                return -EINVAL;
            if (num == field) {
                *p = msg + off;
                *n = (size_t)v;
            }
            off += (size_t)v;
            break;
        case 5:
            if (len - off < 4)
                return -EINVAL;
            off += 4;
            break;
        default:
            return -EINVAL;
        }
    }
    return 0;
}

int kv_proxy_pb_varint_field(const uint8_t *msg, size_t len, uint32_t field, int64_t *out)
{
    uint64_t v = 0;
    int rc = last_field(msg, len, field, 0, &v, NULL, NULL);
    *out = rc == 0 ? (int64_t)v : 0;
    return rc;
}

int kv_proxy_pb_header_revision(const uint8_t *msg, size_t len, int64_t *rev)
{
    const uint8_t *h = NULL;
    size_t hn = 0;
    *rev = 0;
    int rc = last_field(msg, len, 1, 2, NULL, &h, &hn);
    if (rc < 0)
        return rc;
    return h ? kv_proxy_pb_varint_field(h, hn, 3, rev) : 0;
}

size_t kv_proxy_pb_keepalive_req(uint8_t *buf, int64_t id)
{
    size_t n = 0;
    uint64_t v = (uint64_t)id;
    if (v == 0)
        return 0; /* proto3: the default is not written */
    buf[n++] = 0x08;
    do {
        uint8_t b = v & 0x7f;
        v >>= 7;
        buf[n++] = v ? (uint8_t)(b | 0x80) : b;
    } while (v);
    return n;
}
