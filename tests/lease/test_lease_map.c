/* lease_map: lookups stay right under random inserts/removes (backward-shift deletion,
 * growth, shrink, release when empty); slots are stable and reused. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>

#include "lease/lease_map.h"

static uint64_t rs = 0x243f6a8885a308d3ULL;
static uint64_t rnd(void)
{
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return rs;
}

Test(lease_map, random_ops_match_reference)
{
    enum { RANGE = 5000 };
    kv_lease_map m;
    kv_lease_map_init(&m, 99);
    uint8_t *in = calloc(RANGE + 1, 1);
    uint32_t *slot = calloc(RANGE + 1, sizeof(*slot));
    uint32_t n = 0;
    for (int step = 0; step < 300000; step++) {
        /* drift between growing and shrinking phases */
        int grow = (step / 50000) % 2 == 0;
        int64_t id = 1 + (int64_t)(rnd() % RANGE);
        if (!in[id] && (grow ? rnd() % 4 != 0 : rnd() % 4 == 0)) {
            kv_lease *e;
            cr_assert_eq(kv_lease_map_insert(&m, id, &e), 0);
            cr_assert_eq(e->id, id);
            cr_assert_eq(e->heap_idx, KV_LEASE_NONE);
            e->ttl_s = id * 3;
            in[id] = 1;
            slot[id] = kv_lease_map_slot(&m, e);
            n++;
        } else if (in[id]) {
            cr_assert_eq(kv_lease_map_remove(&m, id), 0);
            in[id] = 0;
            n--;
        } else {
            cr_assert_eq(kv_lease_map_remove(&m, id), -ENOENT);
        }
        cr_assert_eq(kv_lease_map_count(&m), n);
        if (step % 4999 == 0) {
            for (int64_t k = 1; k <= RANGE; k++) {
                kv_lease *e = kv_lease_map_find(&m, k);
                if (in[k]) {
                    cr_assert_not_null(e, "id %lld lost", (long long)k);
                    cr_assert_eq(e->ttl_s, k * 3);
                    cr_assert_eq(kv_lease_map_slot(&m, e), slot[k], "slot of a lease is stable");
                } else {
                    cr_assert_null(e, "id %lld found after removal", (long long)k);
                }
            }
            if (n)
                cr_assert_leq((uint64_t)n * 4, (uint64_t)m.cap * 3, "load <= 3/4");
            cr_assert_leq(m.slots_used, RANGE, "free slots reused");
        }
    }
    /* drain: memory is released when empty */
    for (int64_t k = 1; k <= RANGE; k++)
        if (in[k])
            cr_assert_eq(kv_lease_map_remove(&m, k), 0);
    cr_assert_eq(kv_lease_map_count(&m), 0);
    cr_assert_eq(kv_lease_map_bytes(&m), 0);
    cr_assert_null(kv_lease_map_find(&m, 1));
    kv_lease_map_free(&m);
    free(in);
    free(slot);
}

Test(lease_map, extreme_ids_and_bytes)
{
    kv_lease_map m;
    kv_lease_map_init(&m, 1);
    int64_t ids[] = {INT64_MAX, INT64_MIN, -1, 1, 0x100000000LL, -0x100000000LL};
    for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
        kv_lease *e;
        cr_assert_eq(kv_lease_map_insert(&m, ids[i], &e), 0);
    }
    for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++)
        cr_assert_not_null(kv_lease_map_find(&m, ids[i]));
    cr_assert_null(kv_lease_map_find(&m, 2));
    cr_assert_eq(kv_lease_map_bytes(&m), 64 * sizeof(kv_lease) + 64 * 8);
    kv_lease_map_free(&m);
    cr_assert_eq(kv_lease_map_bytes(&m), 0);
}
