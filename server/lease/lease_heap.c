/* lease_heap.c: indexed binary min-heap; see lease_heap.h. */
#include "lease/lease_heap.h"

#include <errno.h>
#include <stdlib.h>

void kv_lease_heap_init(kv_lease_heap *h, void (*moved)(void *arg, uint32_t ref, uint32_t pos),
                        void *arg)
{
    h->items = NULL;
    h->len = h->cap = 0;
    h->moved = moved;
    h->arg = arg;
    h->stats.cmps = h->stats.swaps = 0;
}

void kv_lease_heap_free(kv_lease_heap *h)
{
    free(h->items);
    h->items = NULL;
    h->len = h->cap = 0;
}

static int less(kv_lease_heap *h, uint32_t a, uint32_t b)
{
    h->stats.cmps++;
    return h->items[a].key < h->items[b].key;
}

static void place(kv_lease_heap *h, uint32_t pos, kv_lease_heap_item it)
{
    h->items[pos] = it;
    if (h->moved)
        h->moved(h->arg, it.ref, pos);
}

static void swap(kv_lease_heap *h, uint32_t a, uint32_t b)
{
    kv_lease_heap_item t = h->items[a];
    h->stats.swaps++;
    place(h, a, h->items[b]);
    place(h, b, t);
}

/* Returns 1 if the item moved. */
static int sift_up(kv_lease_heap *h, uint32_t pos)
{
    int moved = 0;
    while (pos > 0) {
        uint32_t parent = (pos - 1) / 2;
        if (!less(h, pos, parent))
            break;
        swap(h, pos, parent);
        pos = parent;
        moved = 1;
    }
    return moved;
}

static void sift_down(kv_lease_heap *h, uint32_t pos)
{
    for (;;) {
        uint32_t l = 2 * pos + 1, r = l + 1, m = pos;
        if (l >= h->len)
            break;
        m = l;
        if (r < h->len && less(h, r, l))
            m = r;
        if (!less(h, m, pos))
            break;
        swap(h, pos, m);
        pos = m;
    }
}

static int grow(kv_lease_heap *h)
{
    if (h->len < h->cap)
        return 0;
    if (h->cap >= UINT32_MAX / 2)
        return -EOVERFLOW;
    uint32_t ncap = h->cap ? h->cap * 2 : 64;
    kv_lease_heap_item *n = realloc(h->items, (size_t)ncap * sizeof(*n));
    if (!n)
        return -ENOMEM;
    h->items = n;
    h->cap = ncap;
    return 0;
}

static void maybe_shrink(kv_lease_heap *h)
{
    if (h->cap > 64 && h->len < h->cap / 4) {
        uint32_t ncap = h->cap / 2;
        kv_lease_heap_item *n = realloc(h->items, (size_t)ncap * sizeof(*n));
        if (n) { /* keeping the larger array is harmless */
            h->items = n;
            h->cap = ncap;
        }
    }
}

int kv_lease_heap_append(kv_lease_heap *h, int64_t key, uint32_t ref)
{
    int rc = grow(h);
    if (rc)
        return rc;
    place(h, h->len++, (kv_lease_heap_item){.key = key, .ref = ref});
    return 0;
}

int kv_lease_heap_push(kv_lease_heap *h, int64_t key, uint32_t ref)
{
    int rc = kv_lease_heap_append(h, key, ref);
    if (rc)
        return rc;
    sift_up(h, h->len - 1);
    return 0;
}

void kv_lease_heap_heapify(kv_lease_heap *h)
{
    for (uint32_t i = h->len / 2; i-- > 0;)
        sift_down(h, i);
}

void kv_lease_heap_update(kv_lease_heap *h, uint32_t pos, int64_t key)
{
    h->items[pos].key = key;
    if (!sift_up(h, pos))
        sift_down(h, pos);
}

uint32_t kv_lease_heap_remove(kv_lease_heap *h, uint32_t pos)
{
    uint32_t ref = h->items[pos].ref;
    uint32_t last = --h->len;
    if (pos != last) {
        place(h, pos, h->items[last]);
        if (!sift_up(h, pos))
            sift_down(h, pos);
    }
    maybe_shrink(h);
    return ref;
}

kv_lease_heap_item kv_lease_heap_pop(kv_lease_heap *h)
{
    kv_lease_heap_item top = h->items[0];
    kv_lease_heap_remove(h, 0);
    return top;
}

int kv_lease_heap_check(const kv_lease_heap *h)
{
    for (uint32_t i = 1; i < h->len; i++)
        if (h->items[i].key < h->items[(i - 1) / 2].key)
            return -EINVAL;
    return 0;
}

void kv_lease_heap_reindex(kv_lease_heap *h)
{
    if (!h->moved)
        return;
    for (uint32_t i = 0; i < h->len; i++)
        h->moved(h->arg, h->items[i].ref, i);
}
