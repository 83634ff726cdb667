/*
 * cluster_lease_newleader: a new leader whose lessor does not serve yet holds renewals and
 * TimeToLive queries until it does, as etcd 3.4 does (LeaseRenew waits for the leader within
 * the request timeout), instead of ending the client's keepalive stream with "etcdserver: no
 * leader". Ending the stream would make every agent on it reconnect at once after each
 * leader change.
 *
 * The window between "raft made this member the leader" and "its lessor promoted" (it has
 * applied an entry of its term) is normally a few milliseconds; KVD_FAILPOINT_PRIMARY_DELAY_MS
 * widens it to PRIMARY_DELAY_MS on every member. The test moves leadership to a follower T
 * (Maintenance.MoveLeader), then at once renews a lease on a keepalive stream opened on each
 * member and asks T for its TimeToLive. It checks that T's lessor was really not serving when
 * the renewal was sent (kvd_is_leader 0 on T after sending), and asserts that every stream
 * stays open and every renewal and the TimeToLive are answered with a positive TTL within the
 * request timeout.
 * Clients: grpc_raw (tests/lib), so every answer and every status is seen.
 */
#include "cl_util.h"
#include "grpc_raw.h"
#include "rpc.pb-c.h"

#include <criterion/criterion.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 3
#define PRIMARY_DELAY_MS 2500u
#define LEASE_TTL 30

static kvt_cluster g_c;
static kv_it_grpc *g_conn[N];

static void fini(void)
{
    for (int i = 0; i < N; i++)
        kv_it_grpc_close(g_conn[i]);
    kvt_cluster_destroy(&g_c);
}

static const char *const g_env[] = {"KVD_FAILPOINT_PRIMARY_DELAY_MS=2500", NULL};

static void renew(kv_it_grpc_stream *st, int64_t id)
{
    Etcdserverpb__LeaseKeepAliveRequest req = ETCDSERVERPB__LEASE_KEEP_ALIVE_REQUEST__INIT;
    req.id = id;
    uint8_t buf[32];
    size_t len = etcdserverpb__lease_keep_alive_request__pack(&req, buf);
    cr_assert_eq(kv_it_grpc_send_msg(st, buf, len, 0), 0);
}

/* The TTL of the next answer on st within timeout_ms; fails the test if the stream ends. */
static int64_t answer(kv_it_grpc_stream *st, int member, uint32_t timeout_ms)
{
    uint8_t *msg = NULL;
    size_t len = 0;
    int rc = kv_it_grpc_stream_recv(st, &msg, &len, timeout_ms);
    cr_assert_eq(rc, 0,
                 "member %d: no keepalive answer within %u ms (rc %d; stream closed %d, "
                 "grpc-status %d '%s')",
                 member, timeout_ms, rc, st->closed, st->grpc_status, st->grpc_message);
    Etcdserverpb__LeaseKeepAliveResponse *r =
        etcdserverpb__lease_keep_alive_response__unpack(NULL, len, msg);
    free(msg);
    cr_assert_not_null(r, "member %d: undecodable keepalive answer", member);
    int64_t ttl = r->ttl;
    etcdserverpb__lease_keep_alive_response__free_unpacked(r, NULL);
    return ttl;
}

Test(cluster_lease_newleader, renewals_wait_for_the_new_leaders_lessor, .fini = fini,
     .timeout = 300)
{
    kvt_cluster_opts o;
    kvt_cluster_opts_default(&o, N);
    o.heartbeat_ms = CL_HEARTBEAT_MS;
    o.election_ms = CL_ELECTION_MS;
    if (o.target != KV_TEST_SERVER_KVD)
        cr_skip_test("kvd only: the failpoint is kvd's");
    cr_assert_eq(kvt_cluster_init(&g_c, &o), 0);
    for (int i = 0; i < N; i++)
        g_c.m[i].env = g_env;
    cr_assert_eq(kvt_cluster_start(&g_c, 60000), 0, "cluster start");
    int leader = kvt_cluster_wait_leader(&g_c, 30000, NULL);
    cr_assert_geq(leader, 0);
    /* the first leader's lessor serves PRIMARY_DELAY_MS after the election */
    uint64_t until = kvt_now_ms() + 30000;
    while (cl_metric(&g_c, leader, "kvd_is_leader") != 1 && kvt_now_ms() < until)
        kvt_sleep_ms(50);
    cr_assert_eq(cl_metric(&g_c, leader, "kvd_is_leader"), 1, "leader's lessor never served");

    for (int i = 0; i < N; i++)
        cr_assert_eq(kv_it_grpc_open(&g_conn[i], "127.0.0.1", g_c.m[i].client_port, 5000), 0);
    int64_t id = cl_lease_grant(g_conn[leader], LEASE_TTL);
    kv_it_grpc_stream *ka[N];
    for (int i = 0; i < N; i++) {
        ka[i] = kv_it_grpc_stream_start(g_conn[i], "/etcdserverpb.Lease/LeaseKeepAlive", NULL);
        cr_assert_not_null(ka[i]);
        renew(ka[i], id);
        cr_assert_gt(answer(ka[i], i, 10000), 0, "member %d: lease unknown before the move", i);
    }

    int t = (leader + 1) % N;
    char err[256] = "";
    cr_assert_eq(kvt_cluster_move_leader(&g_c, t, 10000, err, sizeof(err)), 0, "move: %s", err);
    /* The move returns once t leads; its lessor serves PRIMARY_DELAY_MS later. */
    uint64_t t0 = kvt_now_ms();
    for (int i = 0; i < N; i++)
        renew(ka[i], id);
    for (int i = 0; i < N; i++)
        cr_assert_eq(kv_it_grpc_flush(g_conn[i], 2000), 0);
    Etcdserverpb__LeaseTimeToLiveRequest q = ETCDSERVERPB__LEASE_TIME_TO_LIVE_REQUEST__INIT;
    q.id = id;
    uint8_t qbuf[32];
    size_t qlen = etcdserverpb__lease_time_to_live_request__pack(&q, qbuf);
    kv_it_grpc *qc = NULL;
    cr_assert_eq(kv_it_grpc_open(&qc, "127.0.0.1", g_c.m[t].client_port, 5000), 0);
    kv_it_grpc_stream *ttl =
        kv_it_grpc_stream_start(qc, "/etcdserverpb.Lease/LeaseTimeToLive", NULL);
    cr_assert_not_null(ttl);
    cr_assert_eq(kv_it_grpc_send_msg(ttl, qbuf, qlen, 1), 0);
    cr_assert_eq(kv_it_grpc_flush(qc, 2000), 0);
    double serving = cl_metric(&g_c, t, "kvd_is_leader");
    uint64_t sent_ms = kvt_now_ms() - t0;
    fprintf(stderr,
            "leadership moved to member %d; renewals sent %" PRIu64
            " ms later, its lessor serving then: %g\n",
            t, sent_ms, serving);
    /* the test is only meaningful if the renewals met a lessor that did not serve yet */
    cr_assert_eq(serving, 0,
                 "member %d's lessor already served when the renewals had been sent (%" PRIu64
                 " ms after the move): the window was missed",
                 t, sent_ms);

    /* Answered once t's lessor serves: within the failpoint's delay plus margin, well inside
     * the request timeout (5 s + 2 election timeouts). */
    for (int i = 0; i < N; i++) {
        int64_t v = answer(ka[i], i, 5000 + 2 * CL_ELECTION_MS);
        cr_assert_gt(v, 0, "member %d: renewal answered with TTL %" PRId64, i, v);
        cr_assert_not(ka[i]->closed, "member %d: keepalive stream ended: %d '%s'", i,
                      ka[i]->grpc_status, ka[i]->grpc_message);
        fprintf(stderr, "member %d: renewal answered after %" PRIu64 " ms, TTL %" PRId64 "\n", i,
                kvt_now_ms() - t0, v);
    }
    uint64_t until_q = kvt_now_ms() + 5000 + 2 * CL_ELECTION_MS;
    while (!ttl->closed && kvt_now_ms() < until_q)
        kv_it_grpc_wait(qc, ttl, 100);
    cr_assert(ttl->closed, "TimeToLive on member %d not answered", t);
    cr_assert_eq(ttl->grpc_status, 0, "TimeToLive on member %d: %d '%s'", t, ttl->grpc_status,
                 ttl->grpc_message);
    uint8_t *msg = NULL;
    size_t len = 0;
    cr_assert_eq(kv_it_grpc_stream_next(ttl, &msg, &len), 1, "TimeToLive: no message");
    Etcdserverpb__LeaseTimeToLiveResponse *r =
        etcdserverpb__lease_time_to_live_response__unpack(NULL, len, msg);
    free(msg);
    cr_assert_not_null(r);
    cr_assert_gt(r->ttl, 0, "TimeToLive on member %d: TTL %" PRId64, t, r->ttl);
    etcdserverpb__lease_time_to_live_response__free_unpacked(r, NULL);
    kv_it_grpc_close(qc);

    /* the streams keep working under the new leader */
    for (int i = 0; i < N; i++) {
        renew(ka[i], id);
        cr_assert_gt(answer(ka[i], i, 10000), 0, "member %d: renewal after the move", i);
    }
}
