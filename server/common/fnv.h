/*
 * fnv: FNV-1a, 64 bits, over bytes. For in-memory hash tables keyed by byte strings, and for
 * the formats that specify it (bbolt's meta checksum). Pure, any thread.
 */
#ifndef KV_COMMON_FNV_H
#define KV_COMMON_FNV_H

#include <stddef.h>
#include <stdint.h>

#define KV_FNV64_OFFSET 14695981039346656037ULL /* FNV-1a's standard offset basis */

/* Continues hash h over p[0..n). */
static inline uint64_t kv_fnv1a64_add(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 1099511628211ULL;
    }
    return h;
}

static inline uint64_t kv_fnv1a64(const void *p, size_t n)
{
    return kv_fnv1a64_add(KV_FNV64_OFFSET, p, n);
}

#endif
