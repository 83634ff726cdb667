/*
 * cluster_early_ack: a write is acknowledged once the commit that applies it has its results,
 * without waiting for that commit's flush (node_ready.c kv_node__on_early: the entry is durable
 * in a quorum's logs already), and the member that answered still reads its own write
 * (kv_node_read_visible: a serializable Range waits until the commit is visible).
 * A follower stalls every apply-only commit KVD_FAILPOINT_APPLY_COMMIT_DELAY_MS before
 * committing it; a put through it must come back well before the stall ends, and a
 * serializable get through it right after must see the value. kvd only.
 */
#include "cl_util.h"

#include <criterion/criterion.h>

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define STALL_MS 3000u

static kvt_cluster g_c;

static void fini(void)
{
    kvt_cluster_destroy(&g_c);
}

static const char *const g_env[] = {"KVD_FAILPOINT_APPLY_COMMIT_DELAY_MS=3000", NULL};

Test(cluster_early_ack, put_answered_before_the_apply_flush, .fini = fini, .timeout = 180)
{
    kvt_cluster_opts o;
    kvt_cluster_opts_default(&o, 3);
    if (o.target != KV_TEST_SERVER_KVD)
        cr_skip_test("kvd failpoint");
    o.heartbeat_ms = CL_HEARTBEAT_MS;
    o.election_ms = CL_ELECTION_MS;
    cr_assert_eq(kvt_cluster_init(&g_c, &o), 0);
    int r = kvt_cluster_start(&g_c, 60000);
    if (r)
        kvt_cluster_dump(&g_c);
    cr_assert_eq(r, 0, "cluster start: %d", r);
    cr_assert_geq(kvt_cluster_wait_writable(&g_c, 60000), 0);
    int l = kvt_cluster_leader(&g_c);
    cr_assert_geq(l, 0);
    int f = cl_other(&g_c, l, -1);
    cr_assert_geq(f, 0);
    /* one follower stalls (the leader and the other follower keep the quorum) */
    g_c.m[f].env = g_env;
    r = kvt_member_restart(&g_c, f, 60000);
    g_c.m[f].env = NULL;
    cr_assert_eq(r, 0, "restart of m%d with the failpoint: %d", f + 1, r);
    l = kvt_cluster_leader(&g_c);
    cr_assert(l >= 0 && l != f, "the stalling member must stay a follower (leader %d)", l);
    char err[256], val[64];
    int found = 0;
    int64_t rev = 0, grev = 0;
    for (int round = 0; round < 2; round++) {
        /* let the follower finish every stalled commit first: a linearizable read waits
         * until it applied the leader's commit index */
        int gr = -1;
        for (uint64_t end = kvt_now_ms() + 60000; gr != 0 && kvt_now_ms() < end;) {
            err[0] = 0; /* the server's request timeout may end one wait: ask again */
            gr = kvt_get(&g_c, f, "none", 0, 20000, val, sizeof(val), &found, NULL, err,
                         sizeof(err));
        }
        cr_assert_eq(gr, 0, "linearizable get through the follower: %s", err);
        kvt_sleep_ms(STALL_MS + 500); /* the read may have been served before a stall began */
        char key[32], want[32];
        snprintf(key, sizeof(key), "early-%d", round);
        snprintf(want, sizeof(want), "v%d", round);
        uint64_t t0 = kvt_now_ms();
        err[0] = 0;
        cr_assert_eq(kvt_put(&g_c, f, key, want, 20000, &rev, err, sizeof(err)), 0,
                     "put through the follower: %s", err);
        uint64_t took = kvt_now_ms() - t0;
        fprintf(stderr,
                "  round %d: put through follower m%d answered in %" PRIu64
                " ms (apply commit stalled %u ms), revision %" PRId64 "\n",
                round, f + 1, took, STALL_MS, rev);
        cr_assert_lt(took, STALL_MS - 1000,
                     "the put waited for the stalled apply commit (%" PRIu64 " ms)", took);
        /* read your writes on the member that answered, while its commit is still stalled */
        err[0] = 0;
        found = 0;
        cr_assert_eq(
            kvt_get(&g_c, f, key, 1, 20000, val, sizeof(val), &found, &grev, err, sizeof(err)), 0,
            "serializable get through the follower: %s", err);
        cr_assert(found, "serializable get right after the put did not see %s", key);
        cr_assert_str_eq(val, want);
        cr_assert_geq(grev, rev, "serializable get at revision %" PRId64 " < put's %" PRId64, grev,
                      rev);
    }
    cl_assert_hash_equal(&g_c, l);
}
