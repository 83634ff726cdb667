/*
 * proxy_pb.c - reading and writing the lease id of keepalive messages (proxy_pb.h).
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

int kv_proxy_pb_varint_field(const uint8_t *msg, size_t len, uint32_t field, int64_t *out)
{
    size_t off = 0;
    *out = 0;
    while (off < len) {
        uint64_t key, v;
        if (read_varint(msg, len, &off, &key) < 0)
            return -EINVAL;
        uint32_t wt = (uint32_t)(key & 7);
        uint64_t num = key >> 3;
        if (num == 0)
            return -EINVAL;
        switch (wt) {
        case 0:
            if (read_varint(msg, len, &off, &v) < 0)
                return -EINVAL;
            if (num == field)
                *out = (int64_t)v;
            break;
        case 1:
            if (num == field || len - off < 8)
                return -EINVAL;
            off += 8;
            break;
        case 2:
            if (num == field || read_varint(msg, len, &off, &v) < 0 || v > len - off)
                return -EINVAL;
            off += (size_t)v;
            break;
        case 5:
            if (num == field || len - off < 4)
                return -EINVAL;
            off += 4;
            break;
        default:
            return -EINVAL;
        }
    }
    return 0;
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
