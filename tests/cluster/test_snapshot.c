/*
 * cluster_snapshot: a follower that missed many writes and a compaction catches up by
 * snapshot (--snapshot-count 100): stop it, write 6,000 keys, compact, restart it; it
 * serves the latest write and every member's HashKV matches. The leader must have sent a
 * snapshot: kvd_peer_snapshots_sent_total (kvd) / etcd_network_snapshot_send_success (etcd)
 * on its /metrics.
 */
#include "cl_util.h"

#include <criterion/criterion.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Writes while the follower is down. etcd 3.4 and kvd both keep 5,000 raft entries after a
 * snapshot (etcd's SnapshotCatchUpEntries, kvd's KV_CATCHUP_ENTRIES): with fewer writes the
 * leader replays its log instead of sending a snapshot (checked: 3,000 writes give
 * etcd_network_snapshot_send_success 0), so the test writes 6,000. */
#define CL_SNAP_KEYS 6000

static kvt_cluster g_c; /* fixture of the running test */

static void fini(void)
{
    kvt_cluster_destroy(&g_c);
}

/* Sum of every sample of metric name in text (0 if none). */
static double metric_sum(const char *text, const char *name)
{
    double sum = 0;
    size_t nl = strlen(name);
    for (const char *p = text; p && *p;) {
        const char *eol = strchr(p, '\n');
        if (p[0] != '#' && strncmp(p, name, nl) == 0 && (p[nl] == ' ' || p[nl] == '{')) {
            const char *sp = strchr(p + nl, ' ');
            if (sp && (!eol || sp < eol))
                sum += strtod(sp + 1, NULL);
        }
        p = eol ? eol + 1 : NULL;
    }
    return sum;
}

Test(cluster_snapshot, lagging_follower_catches_up_by_snapshot, .fini = fini, .timeout = 300)
{
    cr_assert_eq(cl_start(&g_c, 3, 100), 0);
    int l = kvt_cluster_wait_leader(&g_c, 10000, NULL);
    cr_assert_geq(l, 0);
    int f = cl_other(&g_c, l, -1);
    char err[256];
    cr_assert_eq(kvt_put(&g_c, l, "/snap/first", "1", 5000, NULL, err, sizeof(err)), 0, "%s", err);
    cr_assert_geq(cl_wait_value(&g_c, f, "/snap/first", "1", 1, 10000), 0);
    cr_assert_eq(kvt_member_stop(&g_c, f, 10000), 0);

    int keys = CL_SNAP_KEYS;
    uint64_t t0 = kvt_now_ms();
    int64_t rev = 0;
    for (int k = 0; k < keys; k++) {
        char key[32], val[32];
        snprintf(key, sizeof(key), "/snap/k%d", k % 500);
        snprintf(val, sizeof(val), "v%d", k);
        int r = kvt_put(&g_c, l, key, val, 5000, &rev, err, sizeof(err));
        cr_assert_eq(r, 0, "put %d: %d %s", k, r, err);
    }
    fprintf(stderr, "  %d puts through the leader in %" PRIu64 " ms\n", keys, kvt_now_ms() - t0);
    cr_assert_eq(kvt_compact(&g_c, l, rev, 10000, err, sizeof(err)), 0, "compact: %s", err);
    cr_assert_eq(kvt_put(&g_c, l, "/snap/last", "after-compaction", 5000, NULL, err, sizeof(err)),
                 0, "%s", err);

    uint64_t t1 = kvt_now_ms();
    cr_assert_eq(kvt_member_restart(&g_c, f, 30000), 0);
    int w = cl_wait_value(&g_c, f, "/snap/last", "after-compaction", 1, 60000);
    cr_assert_geq(w, 0, "%s did not catch up", g_c.m[f].name);
    fprintf(stderr, "  %s caught up %" PRIu64 " ms after its restart\n", g_c.m[f].name,
            kvt_now_ms() - t1);

    char *metrics = NULL;
    cr_assert_eq(kvt_member_metrics(&g_c, l, &metrics), 0, "GET /metrics of the leader");
    const char *name = g_c.o.target == KVT_TARGET_KVD ? "kvd_peer_snapshots_sent_total"
                                                      : "etcd_network_snapshot_send_success";
    double sent = metric_sum(metrics, name);
    free(metrics);
    fprintf(stderr, "  leader %s: %s = %.0f\n", g_c.m[l].name, name, sent);
    cr_assert_gt(sent, 0, "the leader sent no snapshot (%s)", name);
    cl_assert_hash_equal(&g_c, l);
}
