/* pb_wire: one protobuf field, read exactly as protobuf-c 1.4 does (parse_tag_and_wiretype,
 * scan_length_prefixed_data and the unpack scan loop), see pb_wire.h. */
#include "pb/pb_wire.h"

#include <limits.h>

size_t kv_pb_read_field(const uint8_t *p, const uint8_t *end, kv_pb_field *f)
{
    size_t rem = (size_t)(end - p);
    /* tag: as parse_tag_and_wiretype: at most 5 bytes, 32-bit result, tag 0 refused */
    if ((p[0] & 0xf8u) == 0)
        return 0;
    f->wt = p[0] & 7u;
    uint32_t tag = (uint32_t)(p[0] & 0x7fu) >> 3;
    size_t used = 1;
    if (p[0] & 0x80u) {
        size_t max = rem > 5 ? 5 : rem;
        unsigned shift = 4;
        for (;;) {
            if (used == max)
                return 0;
            uint8_t b = p[used++];
            tag |= (uint32_t)(b & 0x7fu) << shift;
            shift += 7;
            if (!(b & 0x80u))
                break;
        }
    }
    f->tag = tag;
    p += used;
    rem -= used;
    f->val = p;
    f->vlen = 0;
    switch (f->wt) {
    case KV_PB_WT_VARINT: {
        size_t max = rem < 10 ? rem : 10, i = 0;
        while (i < max && (p[i] & 0x80u))
            i++;
        if (i == max)
            return 0;
        return used + i + 1;
    }
    case KV_PB_WT_64BIT:
        return rem < 8 ? 0 : used + 8;
    case KV_PB_WT_32BIT:
        return rem < 4 ? 0 : used + 4;
    case KV_PB_WT_LEN: {
        size_t max = rem < 5 ? rem : 5, i = 0;
        uint64_t v = 0;
        for (; i < max; i++) {
            v |= (uint64_t)(p[i] & 0x7fu) << (7 * i);
            if (!(p[i] & 0x80u))
                break;
        }
        if (i == max || v > (uint64_t)INT_MAX)
            return 0;
        size_t hdr = i + 1;
        if (v > rem - hdr)
            return 0;
        f->val = p + hdr;
        f->vlen = (size_t)v;
        return used + hdr + (size_t)v;
    }
    default: /* groups (3, 4) and 6, 7: protobuf-c refuses them */
        return 0;
    }
}
