/*
 * cluster_peer_delay: kvd's peer delay failpoint (server/peer/peer_delay.h; kvt_cluster starts
 * kvd with --enable-failpoints, the test adds KVD_FAILPOINT_PEER_DELAY_MS=300).
 *
 * SIGRTMIN+3 to the leader holds every raft frame it sends and receives 300 ms: a put through
 * it needs an append to a follower and its answer, so its latency rises above 300 ms while the
 * delay is on and falls back once it is off; the leader's kvd_peer_frames_delayed_total grows;
 * nothing acknowledged is lost and HashKV is equal on every member at the end.
 * Without the failpoint kvd installs no SIGRTMIN+3 handler and the signal's default action
 * kills the leader, so the test fails. kvd only.
 */
#include "cl_util.h"

#include <criterion/criterion.h>

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DELAY_MS 300u
#define N_PUTS 9

static kvt_cluster g_c;
static cl_acks g_acks;

static void fini(void)
{
    kvt_cluster_destroy(&g_c);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* N_PUTS puts through member i; returns the median latency in ms. */
static uint64_t timed_puts(int i, const char *tag)
{
    uint64_t ms[N_PUTS];
    char err[256];
    for (int k = 0; k < N_PUTS; k++) {
        char key[32], val[32];
        snprintf(key, sizeof(key), "%s-%d", tag, k);
        snprintf(val, sizeof(val), "v%d", k);
        uint64_t t0 = kvt_now_ms();
        err[0] = 0;
        int r = cl_put_ack(&g_c, &g_acks, i, key, val, 20000, err, sizeof(err));
        cr_assert_eq(r, 0, "put %s through m%d: %s", key, i + 1, err);
        ms[k] = kvt_now_ms() - t0;
    }
    qsort(ms, N_PUTS, sizeof(ms[0]), cmp_u64);
    fprintf(stderr, "  %s: %d puts through m%d, median %" PRIu64 " ms, max %" PRIu64 " ms\n", tag,
            N_PUTS, i + 1, ms[N_PUTS / 2], ms[N_PUTS - 1]);
    return ms[N_PUTS / 2];
}

static double delayed_frames(int i)
{
    char *body = NULL;
    double v = 0;
    cr_assert_eq(kvt_member_metrics(&g_c, i, &body), 0, "GET /metrics of m%d", i + 1);
    if (kvt_metric_value(body, "kvd_peer_frames_delayed_total", &v) != 0)
        v = 0; /* registered on the first toggle */
    free(body);
    return v;
}

static const char *const g_env[] = {"KVD_FAILPOINT_PEER_DELAY_MS=300", NULL};

Test(cluster_peer_delay, delay_at_the_leader_slows_puts_and_loses_nothing, .fini = fini,
     .timeout = 300)
{
    kvt_cluster_opts o;
    kvt_cluster_opts_default(&o, 3);
    if (o.target != KVT_TARGET_KVD)
        cr_skip_test("kvd failpoint");
    /* heartbeats and their answers arrive 300 ms late: keep elections well away */
    o.heartbeat_ms = 100;
    o.election_ms = 2500;
    cr_assert_eq(kvt_cluster_init(&g_c, &o), 0);
    for (int i = 0; i < g_c.n; i++)
        g_c.m[i].env = g_env;
    int r = kvt_cluster_start(&g_c, 60000);
    if (r)
        kvt_cluster_dump(&g_c);
    cr_assert_eq(r, 0, "cluster start: %d", r);
    cr_assert_geq(kvt_cluster_wait_writable(&g_c, 60000), 0);
    int l = kvt_cluster_leader(&g_c);
    cr_assert_geq(l, 0);
    memset(&g_acks, 0, sizeof(g_acks));

    uint64_t before = timed_puts(l, "before");
    double d0 = delayed_frames(l);
    cr_assert_eq(kvt_proc_signal(&g_c.m[l].proc, SIGRTMIN + 3), 0);
    kvt_sleep_ms(200);
    cr_assert(kvt_member_running(&g_c, l), "the leader died of the delay signal");
    uint64_t under = timed_puts(l, "delayed");
    double d1 = delayed_frames(l);
    cr_assert_gt(under, DELAY_MS,
                 "puts through the delayed leader took %" PRIu64 " ms (median), before %" PRIu64
                 " ms",
                 under, before);
    cr_assert_gt(d1, d0 + N_PUTS, "kvd_peer_frames_delayed_total %.0f -> %.0f", d0, d1);
    cr_assert_eq(kvt_cluster_leader(&g_c), l, "leadership moved during the delay");

    cr_assert_eq(kvt_proc_signal(&g_c.m[l].proc, SIGRTMIN + 3), 0); /* off */
    kvt_sleep_ms(2 * DELAY_MS + 200);                               /* held frames drain */
    double d2 = delayed_frames(l);
    uint64_t after = timed_puts(l, "after");
    cr_assert_lt(after, DELAY_MS, "puts after the delay took %" PRIu64 " ms (median)", after);
    cr_assert_eq(delayed_frames(l), d2,
                 "frames still delayed after the failpoint was switched off");
    fprintf(stderr, "  kvd_peer_frames_delayed_total on m%d: %.0f -> %.0f -> %.0f\n", l + 1, d0, d1,
            d2);

    char *log = NULL;
    cr_assert_eq(kvt_member_log(&g_c, l, 1 << 20, &log), 0);
    cr_assert(strstr(log, "failpoint: peer delay on") != NULL, "no toggle logged");
    cr_assert(strstr(log, "failpoint: peer delay off") != NULL, "no toggle logged");
    free(log);
    for (int i = 0; i < g_c.n; i++)
        cr_assert_eq(cl_verify_acks(&g_c, &g_acks, i), 0, "acknowledged writes lost (m%d)", i + 1);
    cl_assert_hash_equal(&g_c, l);
}
