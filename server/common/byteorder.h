/*
 * byteorder: reading and writing fixed-width integers in byte buffers, little-endian (bbolt
 * and LMDB file formats) or big-endian (kvd's record keys and values), whatever the host's
 * order or the buffer's alignment. Header-only, no state, any thread. Preconditions: p points
 * at least at the width's bytes (2, 4 or 8); callers check the bounds of what they read or
 * write (file formats: mvcc/verify.c, mvcc/lmdb_verify.c, bbolt/; records: mvcc/;
 * identity: identity.c).
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

static inline uint32_t kv_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static inline uint64_t kv_be64(const uint8_t *p)
{
    return (uint64_t)kv_be32(p) << 32 | (uint64_t)kv_be32(p + 4);
}

static inline void kv_put_le16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static inline void kv_put_le32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline void kv_put_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline void kv_put_be32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (24 - 8 * i));
}

static inline void kv_put_be64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (56 - 8 * i));
}

#endif
