/* lease_map.c: slot array + open-addressed index; see lease_map.h. */
#include "lease/lease_map.h"
#include "common/mix64.h"

#include <errno.h>
#include <stdlib.h>

#define MAP_MIN 64u

_Static_assert(sizeof(kv_lease) == 40, "struct kv_lease grew");

static uint64_t hash_id(const kv_lease_map *m, int64_t id)
{
    return kv_mix64((uint64_t)id ^ m->seed);
}

void kv_lease_map_init(kv_lease_map *m, uint64_t seed)
{
    m->slots = NULL;
    m->cells = NULL;
    m->slots_used = m->slots_cap = m->count = m->cap = 0;
    m->free_head = KV_LEASE_NONE;
    m->seed = seed;
}

void kv_lease_map_free(kv_lease_map *m)
{
    free(m->slots);
    free(m->cells);
    kv_lease_map_init(m, m->seed);
}

/* Cell index of id, or KV_LEASE_NONE. */
static uint32_t find_cell(const kv_lease_map *m, int64_t id)
{
    if (!m->cap)
        return KV_LEASE_NONE;
    uint64_t h = hash_id(m, id);
    uint32_t mask = m->cap - 1, tag = (uint32_t)(h >> 32);
    for (uint32_t i = (uint32_t)h & mask;; i = (i + 1) & mask) {
        uint64_t c = m->cells[i];
        if (!c)
            return KV_LEASE_NONE;
        if ((uint32_t)(c >> 32) == tag && m->slots[(uint32_t)c - 1].id == id)
            return i;
    }
}

kv_lease *kv_lease_map_find(const kv_lease_map *m, int64_t id)
{
    uint32_t c = find_cell(m, id);
    return c == KV_LEASE_NONE ? NULL : &m->slots[(uint32_t)m->cells[c] - 1];
}

static void put_cell(uint64_t *cells, uint32_t cap, uint64_t h, uint32_t slot)
{
    uint32_t mask = cap - 1, i = (uint32_t)h & mask;
    while (cells[i])
        i = (i + 1) & mask;
    cells[i] = (h >> 32) << 32 | ((uint64_t)slot + 1);
}

static int resize(kv_lease_map *m, uint32_t ncap)
{
    uint64_t *n = calloc(ncap, sizeof(*n));
    if (!n)
        return -ENOMEM;
    for (uint32_t i = 0; i < m->cap; i++) {
        uint64_t c = m->cells[i];
        if (c) {
            uint32_t s = (uint32_t)c - 1;
            put_cell(n, ncap, hash_id(m, m->slots[s].id), s);
        }
    }
    free(m->cells);
    m->cells = n;
    m->cap = ncap;
    return 0;
}

static int slot_alloc(kv_lease_map *m, uint32_t *out)
{
    if (m->free_head != KV_LEASE_NONE) {
        *out = m->free_head;
        m->free_head = m->slots[*out].heap_idx;
        return 0;
    }
    if (m->slots_used == m->slots_cap) {
        if (m->slots_cap >= (1u << 31))
            return -ENOSPC;
        uint32_t ncap = m->slots_cap ? m->slots_cap * 2 : MAP_MIN;
        kv_lease *n = realloc(m->slots, (size_t)ncap * sizeof(*n));
        if (!n)
            return -ENOMEM;
        m->slots = n;
        m->slots_cap = ncap;
    }
    *out = m->slots_used++;
    return 0;
}

static void slot_free(kv_lease_map *m, uint32_t s)
{
    m->slots[s].id = 0;
    m->slots[s].heap_idx = m->free_head;
    m->free_head = s;
}

int kv_lease_map_insert(kv_lease_map *m, int64_t id, kv_lease **out)
{
    if ((uint64_t)(m->count + 1) * 4 > (uint64_t)m->cap * 3) {
        if (m->cap >= (1u << 31))
            return -ENOSPC;
        int rc = resize(m, m->cap ? m->cap * 2 : MAP_MIN);
        if (rc)
            return rc;
    }
    uint32_t s;
    int rc = slot_alloc(m, &s);
    if (rc)
        return rc;
    kv_lease *e = &m->slots[s];
    *e = (kv_lease){.id = id, .heap_idx = KV_LEASE_NONE};
    put_cell(m->cells, m->cap, hash_id(m, id), s);
    m->count++;
    *out = e;
    return 0;
}

int kv_lease_map_remove(kv_lease_map *m, int64_t id)
{
    uint32_t i = find_cell(m, id);
    if (i == KV_LEASE_NONE)
        return -ENOENT;
    slot_free(m, (uint32_t)m->cells[i] - 1);
    m->count--;
    if (m->count == 0) {
        kv_lease_map_free(m);
        return 0;
    }
    /* backward-shift deletion: pull later cells of the probe run into the hole */
    uint32_t mask = m->cap - 1, j = i;
    for (;;) {
        j = (j + 1) & mask;
        uint64_t c = m->cells[j];
        if (!c)
            break;
        uint32_t home = (uint32_t)hash_id(m, m->slots[(uint32_t)c - 1].id) & mask;
        if (((j - home) & mask) >= ((j - i) & mask)) {
            m->cells[i] = c;
            i = j;
        }
    }
    m->cells[i] = 0;
    if (m->cap > MAP_MIN && (uint64_t)m->count * 8 < m->cap)
        (void)resize(m, m->cap / 2); /* on -ENOMEM the larger index stays */
    return 0;
}
