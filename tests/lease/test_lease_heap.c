/* lease_heap: order invariants under random operations and O(log n) operation counts. */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "lease/lease_heap.h"

typedef struct owner {
    uint32_t *pos; /* ref -> position, KV_LEASE_HEAP_NONE when absent */
    const kv_lease_heap *h;
} owner;

static void moved(void *arg, uint32_t ref, uint32_t pos)
{
    owner *o = arg;
    o->pos[ref] = pos;
}

static uint64_t rng_state = 88172645463325252ULL;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static void check_index(const kv_lease_heap *h, const uint32_t *pos)
{
    for (uint32_t i = 0; i < h->len; i++)
        cr_assert_eq(pos[h->items[i].ref], i, "back-index of ref %u wrong", h->items[i].ref);
}

static uint32_t ceil_log2(uint32_t n)
{
    uint32_t b = 0;
    while ((1ull << b) < n)
        b++;
    return b;
}

Test(lease_heap, invariants_under_random_ops)
{
    enum { N = 4000 };
    uint32_t *pos = malloc(N * sizeof(*pos));
    for (uint32_t i = 0; i < N; i++)
        pos[i] = KV_LEASE_HEAP_NONE;
    owner o = {.pos = pos};
    kv_lease_heap h;
    kv_lease_heap_init(&h, moved, &o);
    uint32_t present = 0;
    for (int step = 0; step < 200000; step++) {
        uint32_t ref = (uint32_t)(rnd() % N);
        int64_t key = (int64_t)(rnd() % 100000);
        if (pos[ref] == KV_LEASE_HEAP_NONE) {
            cr_assert_eq(kv_lease_heap_push(&h, key, ref), 0);
            present++;
        } else {
            switch (rnd() % 3) {
            case 0:
                kv_lease_heap_update(&h, pos[ref], key);
                cr_assert_eq(h.items[pos[ref]].key, key);
                break;
            case 1: {
                uint32_t p = pos[ref];
                cr_assert_eq(kv_lease_heap_remove(&h, p), ref);
                pos[ref] = KV_LEASE_HEAP_NONE;
                present--;
                break;
            }
            default: {
                int64_t min = h.items[0].key;
                kv_lease_heap_item t = kv_lease_heap_pop(&h);
                cr_assert_eq(t.key, min);
                pos[t.ref] = KV_LEASE_HEAP_NONE;
                present--;
            }
            }
        }
        cr_assert_eq(kv_lease_heap_size(&h), present);
        if (step % 997 == 0) {
            cr_assert_eq(kv_lease_heap_check(&h), 0);
            check_index(&h, pos);
        }
    }
    cr_assert_eq(kv_lease_heap_check(&h), 0);
    check_index(&h, pos);
    /* draining yields keys in order */
    int64_t last = INT64_MIN;
    while (kv_lease_heap_size(&h)) {
        kv_lease_heap_item t = kv_lease_heap_pop(&h);
        cr_assert_geq(t.key, last);
        last = t.key;
    }
    cr_assert_leq(h.cap, 64, "array shrinks when emptied (cap %u)", h.cap);
    kv_lease_heap_free(&h);
    free(pos);
}

Test(lease_heap, heapify_and_reindex)
{
    enum { N = 10000 };
    uint32_t *pos = malloc(N * sizeof(*pos));
    owner o = {.pos = pos};
    kv_lease_heap h;
    kv_lease_heap_init(&h, moved, &o);
    for (uint32_t i = 0; i < N; i++)
        cr_assert_eq(kv_lease_heap_append(&h, (int64_t)(rnd() % 1000), i), 0);
    h.stats.cmps = 0;
    kv_lease_heap_heapify(&h);
    cr_assert_leq(h.stats.cmps, 4u * N, "heapify is O(n): %llu cmps",
                  (unsigned long long)h.stats.cmps);
    kv_lease_heap_reindex(&h);
    cr_assert_eq(kv_lease_heap_check(&h), 0);
    check_index(&h, pos);
    kv_lease_heap_free(&h);
    cr_assert_eq(kv_lease_heap_size(&h), 0);
    cr_assert_null(kv_lease_heap_top(&h));
    free(pos);
}

/* 100,000 leases: each grant (push), renew (update), expiry pop and revoke (remove) costs at
 * most 2*ceil(log2 n)+1 comparisons and ceil(log2 n) swaps, counted, not timed. */
Test(lease_heap, hundred_thousand_ops_are_logarithmic)
{
    enum { N = 100000 };
    uint32_t *pos = malloc(N * sizeof(*pos));
    owner o = {.pos = pos};
    kv_lease_heap h;
    kv_lease_heap_init(&h, moved, &o);
    const uint64_t max_cmps = 2 * ceil_log2(N) + 1, max_swaps = ceil_log2(N);
    uint64_t worst_c = 0, worst_s = 0, total_c = 0;
#define MEASURE(op)                                                                                \
    do {                                                                                           \
        uint64_t c0 = h.stats.cmps, s0 = h.stats.swaps;                                            \
        op;                                                                                        \
        uint64_t dc = h.stats.cmps - c0, ds = h.stats.swaps - s0;                                  \
        total_c += dc;                                                                             \
        if (dc > worst_c)                                                                          \
            worst_c = dc;                                                                          \
        if (ds > worst_s)                                                                          \
            worst_s = ds;                                                                          \
    } while (0)
    /* grant: deadlines in decreasing order make every push sift to the root (worst case) */
    for (uint32_t i = 0; i < N; i++)
        MEASURE(cr_assert_eq(kv_lease_heap_push(&h, (int64_t)(N - i) * 10, i), 0));
    cr_assert_eq(kv_lease_heap_size(&h), N);
    cr_assert_geq(worst_s, ceil_log2(N) - 1, "the worst case was exercised");
    /* renew: random refreshes to later deadlines */
    for (uint32_t i = 0; i < N; i++)
        MEASURE(kv_lease_heap_update(&h, pos[rnd() % N], (int64_t)(N * 10 + rnd() % (N * 10))));
    /* revoke: remove arbitrary leases */
    for (uint32_t i = 0; i < N / 2; i++) {
        uint32_t ref = (uint32_t)(rnd() % N);
        if (pos[ref] == KV_LEASE_HEAP_NONE)
            continue;
        MEASURE(kv_lease_heap_remove(&h, pos[ref]));
        pos[ref] = KV_LEASE_HEAP_NONE;
    }
    /* expiry: pop everything */
    while (kv_lease_heap_size(&h)) {
        kv_lease_heap_item t;
        MEASURE(t = kv_lease_heap_pop(&h));
        pos[t.ref] = KV_LEASE_HEAP_NONE;
    }
    cr_assert_leq(worst_c, max_cmps, "worst op: %llu comparisons > %llu",
                  (unsigned long long)worst_c, (unsigned long long)max_cmps);
    cr_assert_leq(worst_s, max_swaps, "worst op: %llu swaps > %llu", (unsigned long long)worst_s,
                  (unsigned long long)max_swaps);
    cr_log_info("worst comparisons %llu (bound %llu), total %llu", (unsigned long long)worst_c,
                (unsigned long long)max_cmps, (unsigned long long)total_c);
    kv_lease_heap_free(&h);
    free(pos);
}
