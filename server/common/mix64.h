/*
 * mix64: a 64-bit finaliser (splitmix64's: two xor-shift-multiply rounds) that spreads every
 * input bit over the whole output. For in-memory hash tables and seeding a PRNG; not
 * persisted, not sent, never part of the on-disk or wire format. Pure, any thread.
 */
#ifndef KV_COMMON_MIX64_H
#define KV_COMMON_MIX64_H

#include <stdint.h>

static inline uint64_t kv_mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

#endif
