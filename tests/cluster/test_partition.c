/*
 * cluster_partition: cut one follower's peer traffic both ways for 3 s (kvd: failpoint,
 * etcd: peer proxies), keep writing through the leader, heal. With pre-vote and check-quorum
 * the partitioned follower does not disrupt the leader (same leader, same term) and it
 * catches up.
 */
#include "cl_util.h"

#include <criterion/criterion.h>

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static kvt_cluster g_c; /* fixture of the running test */

static void fini(void)
{
    kvt_cluster_destroy(&g_c);
}

Test(cluster_partition, follower_rejoins_without_disruption, .fini = fini, .timeout = 180)
{
    cr_assert_eq(cl_start(&g_c, 3, 0), 0);
    int l = kvt_cluster_wait_leader(&g_c, 10000, NULL);
    cr_assert_geq(l, 0);
    int f = cl_other(&g_c, l, -1);
    kvt_status before, st;
    cr_assert_eq(kvt_member_status(&g_c, l, &before, 5000), 0);
    char err[256];
    cr_assert_eq(kvt_put(&g_c, l, "/part/before", "b", 5000, NULL, err, sizeof(err)), 0, "%s", err);
    cr_assert_geq(cl_wait_value(&g_c, f, "/part/before", "b", 1, 10000), 0);

    cr_assert_eq(kvt_member_partition(&g_c, f, 1), 0);
    uint64_t t0 = kvt_now_ms();
    int k = 0;
    char key[32], val[32];
    while (kvt_now_ms() - t0 < 3000) {
        snprintf(key, sizeof(key), "/part/k%d", k % 20);
        snprintf(val, sizeof(val), "v%d", k);
        int r = kvt_put(&g_c, l, key, val, 5000, NULL, err, sizeof(err));
        cr_assert_eq(r, 0, "put through the leader during the partition: %d %s", r, err);
        k++;
        kvt_sleep_ms(20);
    }
    /* The follower is really cut off: it has not seen the last write. */
    char got[64];
    int found = 0;
    int r = kvt_get(&g_c, f, key, 1, 2000, got, sizeof(got), &found, NULL, err, sizeof(err));
    cr_assert(r != 0 || !found || strcmp(got, val) != 0,
              "the partitioned follower served the latest write %s=%s", key, val);
    cr_assert_eq(kvt_member_partition(&g_c, f, 0), 0);
    uint64_t t1 = kvt_now_ms();
    int w = cl_wait_value(&g_c, f, key, val, 1, 20000);
    cr_assert_geq(w, 0, "%s did not catch up after the partition healed", g_c.m[f].name);
    fprintf(stderr,
            "  %d writes during a 3 s partition of %s; caught up %" PRIu64 " ms after healing\n", k,
            g_c.m[f].name, kvt_now_ms() - t1);
    /* Let a rejoining member with a higher term (no pre-vote) show itself. */
    kvt_sleep_ms(4 * CL_ELECTION_MS);
    cr_assert_eq(kvt_cluster_wait_leader(&g_c, 10000, NULL), l, "leadership moved");
    cr_assert_eq(kvt_member_status(&g_c, l, &st, 5000), 0);
    fprintf(stderr, "  leader term before %" PRIu64 ", after %" PRIu64 "\n", before.term, st.term);
    cr_assert_eq(st.term, before.term, "the leader's term changed: %" PRIu64 " -> %" PRIu64,
                 before.term, st.term);
    cr_assert_eq(kvt_member_status(&g_c, f, &st, 5000), 0);
    cr_assert_eq(st.term, before.term, "the follower's term is %" PRIu64 ", leader's %" PRIu64,
                 st.term, before.term);
    cl_assert_hash_equal(&g_c, l);
}
