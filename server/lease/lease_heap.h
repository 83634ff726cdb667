/*
 * lease_heap: an indexed binary min-heap of (key, ref) items, used by the lessor as its
 * expiry queue (key = next time to look at the lease, ms; ref = the lease's slot).
 *
 * Contract:
 * - Exactly one item per ref is the caller's invariant; the heap does not check it.
 * - Whenever an item lands at a new position (push, sift, removal fix-up, heapify) the heap
 *   calls moved(arg, ref, pos), so the owner can keep ref -> position in O(1) and update
 *   or remove an arbitrary item in O(log n). The removed item itself gets no callback.
 * - push/update/remove/pop are O(log n): at most 2*floor(log2 n)+1 key comparisons and
 *   floor(log2 n) swaps each. Every comparison and swap is counted in stats so tests can
 *   prove it.
 * - Memory: the item array doubles on growth and halves when a quarter full; free()
 *   releases it. Nothing else is allocated. Not thread-safe.
 */
#ifndef KV_LEASE_HEAP_H
#define KV_LEASE_HEAP_H

#include <stddef.h>
#include <stdint.h>

#define KV_LEASE_HEAP_NONE UINT32_MAX

typedef struct kv_lease_heap_item {
    int64_t key;
    uint32_t ref;
} kv_lease_heap_item;

typedef struct kv_lease_heap_stats {
    uint64_t cmps;  /* key comparisons since init / last stats reset */
    uint64_t swaps; /* item moves (one per sift step) */
} kv_lease_heap_stats;

typedef struct kv_lease_heap {
    kv_lease_heap_item *items; /* owned */
    uint32_t len, cap;
    void (*moved)(void *arg, uint32_t ref, uint32_t pos);
    void *arg;
    kv_lease_heap_stats stats;
} kv_lease_heap;

/* Initialises an empty heap (no allocation). moved may be NULL. */
void kv_lease_heap_init(kv_lease_heap *h, void (*moved)(void *arg, uint32_t ref, uint32_t pos),
                        void *arg);
/* Frees the item array; the heap is empty and reusable afterwards. */
void kv_lease_heap_free(kv_lease_heap *h);

static inline uint32_t kv_lease_heap_size(const kv_lease_heap *h)
{
    return h->len;
}
/* Smallest item, or NULL when empty. Valid until the next modifying call. */
static inline const kv_lease_heap_item *kv_lease_heap_top(const kv_lease_heap *h)
{
    return h->len ? &h->items[0] : NULL;
}

/* Adds an item. 0, -ENOMEM, or -EOVERFLOW past UINT32_MAX-1 items. */
int kv_lease_heap_push(kv_lease_heap *h, int64_t key, uint32_t ref);
/* Changes the key of the item at pos (pos < size) and restores order. */
void kv_lease_heap_update(kv_lease_heap *h, uint32_t pos, int64_t key);
/* Removes the item at pos (pos < size) and returns its ref. */
uint32_t kv_lease_heap_remove(kv_lease_heap *h, uint32_t pos);
/* Removes the top (heap not empty) and returns it. */
kv_lease_heap_item kv_lease_heap_pop(kv_lease_heap *h);

/* Bulk build: append items without ordering (append), then heapify() in O(n).
 * The heap must not be used between the first append and heapify(). */
int kv_lease_heap_append(kv_lease_heap *h, int64_t key, uint32_t ref);
void kv_lease_heap_heapify(kv_lease_heap *h);
/* Calls moved() for every item (after the owner reordered items[] itself, e.g. sorted it;
 * a sorted array is a valid heap). O(n). */
void kv_lease_heap_reindex(kv_lease_heap *h);

/* Test helper: 0 if the heap order holds everywhere, else -EINVAL. O(n). */
int kv_lease_heap_check(const kv_lease_heap *h);

#endif
