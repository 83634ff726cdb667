/*
 * byteorder: reading fixed-width integers from byte buffers, whatever the host's order or the
 * buffer's alignment. Header-only, no state. Preconditions: p points at least at the width's
 * bytes (2, 4 or 8); callers check the bounds of what they read (file formats: mvcc/verify.c,
 * mvcc/lmdb_verify.c; identity records: identity.c).
 */
#ifndef KV_COMMON_BYTEORDER_H
#define KV_COMMON_BYTEORDER_H

#include <stdint.h>

static inline uint16_t kv_le16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

static inline uint32_t kv_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t kv_le64(const uint8_t *p)
{
    return (uint64_t)kv_le32(p) | (uint64_t)kv_le32(p + 4) << 32;
}

static inline uint64_t kv_be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

#endif
