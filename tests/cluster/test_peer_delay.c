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
 *
 * deposed_leader_answers_no_lease_from_its_map: a leader whose peer frames are held longer
 * than an election timeout keeps running (ticks taken, its raft driven) while the others elect
 * a new leader. A lease granted through the new side, and acknowledged, must then not be
 * "unknown" to TimeToLive or a renewal through the old leader: it may wait (until it learns
 * of the new term and forwards) or fail, never answer from its own map (node.h
 * kv_node_lease_live: a quorum-confirmed round is required). The functional suite's
 * DELAY_PEER_PORT_TX_RX_LEADER found this (TimeToLive -1 4 ms after the grant's ack).
 */
#include "cl_util.h"
#include "grpc_raw.h"
#include "rpc.pb-c.h"

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
    if (o.target != KV_TEST_SERVER_KVD)
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

/* TimeToLive of id through g: *status the grpc-status, the TTL when it is 0 (else 0). */
static int64_t ttl_through(kv_it_grpc *g, int64_t id, int *status, char *msg, size_t cap)
{
    Etcdserverpb__LeaseTimeToLiveRequest r = ETCDSERVERPB__LEASE_TIME_TO_LIVE_REQUEST__INIT;
    r.id = id;
    uint8_t buf[32], *resp = NULL;
    size_t len = etcdserverpb__lease_time_to_live_request__pack(&r, buf), rlen = 0;
    int rc = kv_it_grpc_call(g, "/etcdserverpb.Lease/LeaseTimeToLive", buf, len, &resp, &rlen,
                             20000, status, msg, cap);
    cr_assert(rc == 0 || rc == KV_IT_GRPC_STATUS, "TimeToLive: rc %d", rc);
    int64_t ttl = 0;
    if (*status == 0) {
        Etcdserverpb__LeaseTimeToLiveResponse *a =
            etcdserverpb__lease_time_to_live_response__unpack(NULL, rlen, resp);
        cr_assert_not_null(a);
        ttl = a->ttl;
        etcdserverpb__lease_time_to_live_response__free_unpacked(a, NULL);
    }
    free(resp);
    return ttl;
}

/* One renewal of id through g: 1 and *ttl when answered, 0 when the stream ended without. */
static int renew_through(kv_it_grpc *g, int64_t id, int64_t *ttl)
{
    Etcdserverpb__LeaseKeepAliveRequest r = ETCDSERVERPB__LEASE_KEEP_ALIVE_REQUEST__INIT;
    r.id = id;
    uint8_t buf[32];
    size_t len = etcdserverpb__lease_keep_alive_request__pack(&r, buf);
    kv_it_grpc_stream *st = kv_it_grpc_stream_start(g, "/etcdserverpb.Lease/LeaseKeepAlive", NULL);
    cr_assert_not_null(st);
    cr_assert_eq(kv_it_grpc_send_msg(st, buf, len, 1), 0);
    uint8_t *m = NULL;
    size_t mlen = 0;
    int got = kv_it_grpc_stream_recv(st, &m, &mlen, 20000) == 0;
    if (got) {
        Etcdserverpb__LeaseKeepAliveResponse *a =
            etcdserverpb__lease_keep_alive_response__unpack(NULL, mlen, m);
        cr_assert_not_null(a);
        *ttl = a->ttl;
        etcdserverpb__lease_keep_alive_response__free_unpacked(a, NULL);
    } else {
        fprintf(stderr, "  renewal stream ended: grpc-status %d '%s'\n", st->grpc_status,
                st->grpc_message);
    }
    free(m);
    kv_it_grpc_stream_free(st);
    return got;
}

static const char *const g_env_long[] = {"KVD_FAILPOINT_PEER_DELAY_MS=3000", NULL};

Test(cluster_peer_delay, deposed_leader_answers_no_lease_from_its_map, .fini = fini, .timeout = 300)
{
    kvt_cluster_opts o;
    kvt_cluster_opts_default(&o, 3);
    if (o.target != KV_TEST_SERVER_KVD)
        cr_skip_test("kvd failpoint");
    cr_assert_eq(kvt_cluster_init(&g_c, &o), 0);
    for (int i = 0; i < g_c.n; i++)
        g_c.m[i].env = g_env_long;
    int r = kvt_cluster_start(&g_c, 60000);
    if (r)
        kvt_cluster_dump(&g_c);
    cr_assert_eq(r, 0, "cluster start: %d", r);
    cr_assert_geq(kvt_cluster_wait_writable(&g_c, 60000), 0);
    int l = kvt_cluster_leader(&g_c);
    cr_assert_geq(l, 0);
    int f = cl_other(&g_c, l, -1);
    cr_assert_geq(f, 0);
    kvt_status st;
    cr_assert_eq(kvt_member_status(&g_c, l, &st, 5000), 0);
    uint64_t old_id = st.id;
    kv_it_grpc *gl = NULL, *gf = NULL;
    cr_assert_eq(kv_it_grpc_open(&gl, "127.0.0.1", g_c.m[l].client_port, 5000), 0);
    cr_assert_eq(kv_it_grpc_open(&gf, "127.0.0.1", g_c.m[f].client_port, 5000), 0);
    int status;
    char msg[160];
    int64_t warm = cl_lease_grant(gl, 60);
    cr_assert_gt(ttl_through(gl, warm, &status, msg, sizeof(msg)), 0, "TimeToLive before");

    /* cut the leader off by delay: the two others elect one of them */
    cr_assert_eq(kvt_proc_signal(&g_c.m[l].proc, SIGRTMIN + 3), 0);
    uint64_t t0 = kvt_now_ms(), elected = 0, new_id = 0;
    while (kvt_now_ms() - t0 < 10000) {
        if (kvt_member_status(&g_c, f, &st, 2000) == 0 && st.leader != 0 && st.leader != old_id) {
            elected = kvt_now_ms() - t0;
            new_id = st.leader;
            break;
        }
        kvt_sleep_ms(20);
    }
    cr_assert_gt(elected, 0, "no new leader among the others within 10 s");
    cr_assert(kvt_member_running(&g_c, l), "the old leader died of the delay signal");
    cr_assert_eq(kvt_member_status(&g_c, l, &st, 5000), 0);
    fprintf(stderr,
            "  new leader %016" PRIx64 " after %" PRIu64 " ms; m%d still says %016" PRIx64 "\n",
            new_id, elected, l + 1, st.leader);

    /* acknowledged through the new side, then asked of the old leader at once */
    int64_t id = cl_lease_grant(gf, 60);
    uint64_t t1 = kvt_now_ms();
    int64_t ttl = ttl_through(gl, id, &status, msg, sizeof(msg));
    fprintf(stderr,
            "  TimeToLive through the old leader: grpc-status %d '%s', TTL %" PRId64
            " after %" PRIu64 " ms\n",
            status, msg, ttl, kvt_now_ms() - t1);
    cr_assert(status != 0 || ttl > 0,
              "TimeToLive of a lease acknowledged before the call answered TTL %" PRId64
              " through the deposed leader (unknown lease)",
              ttl);
    int64_t rttl = -1;
    t1 = kvt_now_ms();
    int got = renew_through(gl, id, &rttl);
    fprintf(stderr, "  renewal through the old leader: %s TTL %" PRId64 " after %" PRIu64 " ms\n",
            got ? "answered" : "not answered", rttl, kvt_now_ms() - t1);
    cr_assert(!got || rttl > 0,
              "a renewal of a lease acknowledged before it answered TTL %" PRId64
              " through the deposed leader",
              rttl);

    cr_assert_eq(kvt_proc_signal(&g_c.m[l].proc, SIGRTMIN + 3), 0); /* off */
    kvt_sleep_ms(3500);                                             /* held frames drain */
    cr_assert_gt(ttl_through(gl, id, &status, msg, sizeof(msg)), 0,
                 "TimeToLive through m%d after the delay: grpc-status %d '%s'", l + 1, status, msg);
    kv_it_grpc_close(gl);
    kv_it_grpc_close(gf);
    cl_assert_hash_equal(&g_c, f);
}
