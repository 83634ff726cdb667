/*
 * lease_map: the lessor's table of live leases, id -> struct kv_lease, on every member.
 *
 * Contract:
 * - Leases live in a slot array (kv_lease, 40 bytes) whose indices are stable for the life
 *   of the lease, so other structures (the expiry heap) refer to a lease by slot. Pointers
 *   returned by find/insert are valid until the next insert (the array may move).
 * - The index is open addressing with linear probing and backward-shift deletion: 8-byte
 *   cells (hash tag << 32 | slot + 1), power-of-two size kept between 1/8 and 3/4 full.
 *   Ids are client-chosen, so the hash is keyed with a per-map seed. find/insert/remove are
 *   O(1) expected.
 * - Memory: slots double when full and are reused through a free list; everything is
 *   released when the map becomes empty. Steady state ~40 + 11..21 bytes per lease.
 * - Not thread-safe; no callbacks.
 */
#ifndef KV_LEASE_MAP_H
#define KV_LEASE_MAP_H

#include <stddef.h>
#include <stdint.h>

#define KV_LEASE_NONE UINT32_MAX

typedef struct kv_lease {
    int64_t id;          /* 0 = free slot */
    int64_t ttl_s;       /* granted TTL */
    int64_t remaining_s; /* applied checkpoint; 0 = none */
    int64_t deadline_ms; /* owner's (lessor: primary only) */
    uint32_t heap_idx;   /* owner's; free slots chain the free list through it */
    uint32_t flags;      /* owner's */
} kv_lease;

typedef struct kv_lease_map {
    kv_lease *slots; /* owned */
    uint32_t slots_used, slots_cap, free_head, count;
    uint64_t *cells; /* owned */
    uint32_t cap;    /* 0 or a power of two */
    uint64_t seed;
} kv_lease_map;

/* Empty map (no allocation); seed keys the hash. */
void kv_lease_map_init(kv_lease_map *m, uint64_t seed);
/* Releases all memory; the map is empty and reusable (same seed). */
void kv_lease_map_free(kv_lease_map *m);

kv_lease *kv_lease_map_find(const kv_lease_map *m, int64_t id);
/* Inserts id (precondition: absent, id != 0) with all other fields zero and heap_idx
 * KV_LEASE_NONE. 0 and *out; -ENOMEM; -ENOSPC past 2^31 leases. */
int kv_lease_map_insert(kv_lease_map *m, int64_t id, kv_lease **out);
/* Removes id. 0 or -ENOENT. May shrink (or, when empty, release) the arrays. */
int kv_lease_map_remove(kv_lease_map *m, int64_t id);

static inline uint32_t kv_lease_map_count(const kv_lease_map *m)
{
    return m->count;
}
/* Slot of a lease returned by find/insert. */
static inline uint32_t kv_lease_map_slot(const kv_lease_map *m, const kv_lease *e)
{
    return (uint32_t)(e - m->slots);
}
/* Lease in slot s (s < slots_used); id == 0 means a free slot. Iterate slots [0, slots_used). */
static inline kv_lease *kv_lease_map_at(const kv_lease_map *m, uint32_t s)
{
    return &m->slots[s];
}
/* Bytes held by the arrays. */
static inline size_t kv_lease_map_bytes(const kv_lease_map *m)
{
    return (size_t)m->slots_cap * sizeof(kv_lease) + (size_t)m->cap * sizeof(uint64_t);
}

#endif
