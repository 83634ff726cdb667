/*
 * proxy_ordering: --experimental-serializable-ordering. Two proxies in front of one 3-member
 * cluster, the same --endpoints (a follower A, the other follower B, the leader C), the range
 * cache off; only the second has the flag. B's raft is stalled (SIGUSR1, --enable-failpoints),
 * so it stays at an old revision while puts go on. Both proxies read at the new revision
 * through A; A is killed; both move to B, the next endpoint. A serializable Range through the
 * first is answered by B at the old revision: time goes backwards for its client. Through the
 * second, the answer below the revision already seen makes it leave B for C and send the
 * Range again: its client gets the new revision, and a violation is counted.
 */
#include "px_util.h"

#include "kvclient.h"

#include <criterion/criterion.h>

#include <signal.h>
#include <stdio.h>

static kvt_cluster g_c;
static px g_plain, g_ordered;

static void fini(void)
{
    px_stop(&g_plain);
    px_stop(&g_ordered);
    kvt_cluster_destroy(&g_c);
}

/* The header revision of a serializable Range of "ok" through client cl. */
static int64_t serializable_rev(kvc_client *cl, const char *who)
{
    kvc_range_opts o = {.serializable = 1};
    kvc_range_result r;
    kvc_error e;
    cr_assert_eq(kvc_get(cl, "ok", 2, &o, 15000, &r, &e), 0, "%s: %s", who, e.message);
    int64_t rev = r.header.revision;
    kvc_range_result_free(&r);
    return rev;
}

Test(proxy_ordering, serializable_reads_never_go_back_in_revision, .fini = fini, .timeout = 300)
{
    if (kvt_target_from_env() != KV_TEST_SERVER_KVD) /* SIGUSR1 would end an etcd member */
        cr_skip_test("kvd's --enable-failpoints and kvd's proxy (etcd 3.4's orders only Txns)");
    static const char *const plain_flags[] = {"--max-cache-entries=0",
                                              "--upstream-probe-interval=0", NULL};
    static const char *const ordered_flags[] = {"--max-cache-entries=0",
                                                "--upstream-probe-interval=0",
                                                "--experimental-serializable-ordering", NULL};
    int a, c;
    cr_assert_eq(px_start_on_follower(&g_plain, &g_c, plain_flags, &a, &c), 0, "cluster, proxy");
    int b = 3 - a - c;
    int order[3] = {a, b, c};
    cr_assert_eq(px_start(&g_ordered, &g_c, order, 3, ordered_flags), 0, "ordered proxy");

    char err[256];
    cr_assert_eq(kvt_put(&g_c, c, "ok", "0", 5000, NULL, err, sizeof err), 0, "%s", err);
    cr_assert_eq(kill(g_c.m[b].proc.pid, SIGUSR1), 0, "stall m%d", b);
    kvt_sleep_ms(200); /* the member's loop takes the signal */
    int64_t top = 0;
    for (int i = 1; i <= 20; i++)
        cr_assert_eq(kvt_put(&g_c, c, "ok", "1", 5000, &top, err, sizeof err), 0, "%s", err);

    kvc_client *pl = px_client(g_plain.endpoint), *od = px_client(g_ordered.endpoint);
    cr_assert(pl && od);
    /* through A, which has applied the puts (a serializable read may lag a moment) */
    int64_t r_pl = 0, r_od = 0;
    for (uint64_t end = kvt_now_ms() + 5000; (r_pl < top || r_od < top) && kvt_now_ms() < end;
         kvt_sleep_ms(20)) {
        r_pl = serializable_rev(pl, "plain proxy, through A");
        r_od = serializable_rev(od, "ordered proxy, through A");
    }
    cr_assert_eq(r_pl, top, "plain proxy through A: %lld, the last put %lld", (long long)r_pl,
                 (long long)top);
    cr_assert_eq(r_od, top);

    cr_assert_eq(kvt_member_kill9(&g_c, a), 0);
    r_pl = serializable_rev(pl, "plain proxy, after the kill");
    r_od = serializable_rev(od, "ordered proxy, after the kill");
    double violations = px_metric(&g_ordered, "kvd_proxy_ordering_violations_total");
    double plain_violations = px_metric(&g_plain, "kvd_proxy_ordering_violations_total");
    fprintf(stderr,
            "proxy_ordering: last put at %lld; after the kill of m%d, a serializable Range "
            "through the plain proxy answered at %lld (m%d stalled), through the ordered one "
            "at %lld, %.0f violation(s)\n",
            (long long)top, a, (long long)r_pl, b, (long long)r_od, violations);
    kill(g_c.m[b].proc.pid, SIGUSR1); /* resume, so the cluster stops cleanly */
    /* the hazard is real: the stalled member answers below what the client saw before */
    cr_assert_lt(r_pl, top, "the plain proxy did not reach the stalled member");
    cr_assert_eq(plain_violations, 0);
    cr_assert_geq(r_od, top, "the ordered proxy answered at %lld after %lld", (long long)r_od,
                  (long long)top);
    cr_assert_geq(violations, 1, "violations %.0f", violations);
    kvc_close(pl);
    kvc_close(od);
}
