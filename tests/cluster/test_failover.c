/*
 * cluster_failover: kill -9 the leader, a follower, a majority; 5 members losing 2 then 3.
 * The right members keep serving, a minority answers an error (no hang), nothing acknowledged
 * is lost, restarted members catch up, and every member ends with equal HashKV.
 * Figures (election time, catch-up time) are logged to stderr.
 */
#include "cl_util.h"

#include <criterion/criterion.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static kvt_cluster g_c; /* fixture of the running test */
static cl_acks *g_acks;

static void init(void)
{
    g_acks = calloc(1, sizeof(*g_acks));
    cr_assert_not_null(g_acks);
}

static void fini(void)
{
    kvt_cluster_destroy(&g_c);
    free(g_acks);
    g_acks = NULL;
}

/* Puts count keys prefix<k>=val<k> through member i, all must succeed. */
static void put_many(int i, const char *prefix, int from, int count)
{
    for (int k = from; k < from + count; k++) {
        char key[32], val[32], err[256];
        snprintf(key, sizeof(key), "%s%d", prefix, k);
        snprintf(val, sizeof(val), "v%d", k);
        int r = cl_put_ack(&g_c, g_acks, i, key, val, 5000, err, sizeof(err));
        cr_assert_eq(r, 0, "put %s through %s: %d %s", key, g_c.m[i].name, r, err);
    }
}

/* Restarts member i and waits until a serializable get on it returns the last ack. */
static void restart_and_catch_up(int i)
{
    uint64_t t0 = kvt_now_ms();
    int r = kvt_member_restart(&g_c, i, 30000);
    cr_assert_eq(r, 0, "restart %s: %d", g_c.m[i].name, r);
    const char *key = g_acks->key[g_acks->n - 1], *val = g_acks->val[g_acks->n - 1];
    int w = cl_wait_value(&g_c, i, key, val, 1, 30000);
    cr_assert(w >= 0, "%s never served %s=%s (serializable)", g_c.m[i].name, key, val);
    fprintf(stderr, "  %s restarted and caught up in %" PRIu64 " ms\n", g_c.m[i].name,
            kvt_now_ms() - t0);
}

/* A put through member i fails with an error (not a hang): returns elapsed ms. */
static uint64_t put_fails(int i, const char *key)
{
    char err[256];
    uint64_t t0 = kvt_now_ms();
    int r = kvt_put(&g_c, i, key, "never", 12000, NULL, err, sizeof(err));
    uint64_t ms = kvt_now_ms() - t0;
    fprintf(stderr, "  put through %s without quorum: rc %d '%s' after %" PRIu64 " ms\n",
            g_c.m[i].name, r, err, ms);
    cr_assert_eq(r, KVT_GRPC_ERR, "put through %s without quorum: rc %d (%s), want an error",
                 g_c.m[i].name, r, err);
    cr_assert_lt(ms, 11000, "the error took %" PRIu64 " ms", ms);
    return ms;
}

Test(cluster_failover, kill_leader, .init = init, .fini = fini, .timeout = 180)
{
    cr_assert_eq(cl_start(&g_c, 3, 0), 0);
    int l = kvt_cluster_wait_leader(&g_c, 10000, NULL);
    cr_assert_geq(l, 0);
    put_many(l, "/fo/a", 0, 10);
    uint64_t t0 = kvt_now_ms();
    kvt_member_kill9(&g_c, l);
    uint64_t waited = 0;
    int nl = kvt_cluster_wait_leader(&g_c, 15000, &waited);
    uint64_t ms = kvt_now_ms() - t0;
    if (nl < 0)
        kvt_cluster_dump(&g_c);
    cr_assert_geq(nl, 0, "no new leader within 15 s of killing %s", g_c.m[l].name);
    cr_assert_neq(nl, l);
    fprintf(stderr,
            "  leader %s killed: new leader %s after %" PRIu64 " ms (election timeout %u ms)\n",
            g_c.m[l].name, g_c.m[nl].name, ms, CL_ELECTION_MS);
    /* 2 election timeouts plus a generous margin for a loaded 2-core machine. */
    cr_assert_lt(ms, 2 * CL_ELECTION_MS + 4000, "election took %" PRIu64 " ms", ms);
    for (int i = 0; i < g_c.n; i++)
        if (i != l)
            put_many(i, "/fo/b", i * 100, 10);
    restart_and_catch_up(l);
    cr_assert_eq(cl_verify_acks(&g_c, g_acks, l), 0, "acknowledged writes lost");
    cl_assert_hash_equal(&g_c, nl);
}

Test(cluster_failover, kill_follower, .init = init, .fini = fini, .timeout = 180)
{
    cr_assert_eq(cl_start(&g_c, 3, 0), 0);
    int l = kvt_cluster_wait_leader(&g_c, 10000, NULL);
    cr_assert_geq(l, 0);
    int f = cl_other(&g_c, l, -1);
    put_many(f, "/fo/a", 0, 10);
    kvt_member_kill9(&g_c, f);
    int f2 = cl_other(&g_c, l, f);
    cr_assert_geq(f2, 0);
    put_many(l, "/fo/b", 0, 20);
    put_many(f2, "/fo/c", 0, 20);
    cr_assert_eq(kvt_cluster_wait_leader(&g_c, 5000, NULL), l, "the leader changed");
    restart_and_catch_up(f);
    cr_assert_eq(cl_verify_acks(&g_c, g_acks, f), 0, "acknowledged writes lost");
    cl_assert_hash_equal(&g_c, l);
}

Test(cluster_failover, kill_majority, .init = init, .fini = fini, .timeout = 180)
{
    cr_assert_eq(cl_start(&g_c, 3, 0), 0);
    int l = kvt_cluster_wait_leader(&g_c, 10000, NULL);
    cr_assert_geq(l, 0);
    int f = cl_other(&g_c, l, -1);
    int s = cl_other(&g_c, l, f); /* the survivor */
    put_many(s, "/fo/a", 0, 20);
    kvt_member_kill9(&g_c, l);
    kvt_member_kill9(&g_c, f);
    /* The minority answers an error within a bounded time: etcd's "etcdserver: request
     * timed out" or "etcdserver: no leader" (either is accepted). */
    put_fails(s, "/fo/minority1");
    put_fails(s, "/fo/minority2");
    /* /health is false on a member with no leader. */
    int status = 0;
    char *body = NULL;
    cr_assert_eq(kvt_http_get(g_c.m[s].metrics_port, "/health", 15000, &status, &body), 0);
    fprintf(stderr, "  /health of the minority member: %d %s\n", status, body);
    cr_assert(status == 503 && strstr(body, "\"health\":\"false\"") != NULL,
              "/health of a member without quorum: %d %s", status, body);
    free(body);
    cr_assert_eq(kvt_member_restart(&g_c, l, 30000), 0);
    cr_assert_eq(kvt_member_restart(&g_c, f, 30000), 0);
    int ms = kvt_cluster_wait_writable(&g_c, 20000);
    cr_assert_geq(ms, 0, "not writable again after restarting the majority");
    fprintf(stderr, "  majority restarted: writable after %d ms\n", ms);
    put_many(l, "/fo/b", 0, 10);
    for (int i = 0; i < g_c.n; i++)
        cr_assert_eq(cl_verify_acks(&g_c, g_acks, i), 0, "acknowledged writes lost (via %s)",
                     g_c.m[i].name);
    cl_assert_hash_equal(&g_c, s);
}

Test(cluster_failover, five_members, .init = init, .fini = fini, .timeout = 180)
{
    cr_assert_eq(cl_start(&g_c, 5, 0), 0);
    int l = kvt_cluster_wait_leader(&g_c, 10000, NULL);
    cr_assert_geq(l, 0);
    int f = cl_other(&g_c, l, -1);
    put_many(f, "/fo/a", 0, 10);
    kvt_member_kill9(&g_c, l);
    kvt_member_kill9(&g_c, f);
    int ms = kvt_cluster_wait_writable(&g_c, 15000);
    if (ms < 0)
        kvt_cluster_dump(&g_c);
    cr_assert_geq(ms, 0, "5 members minus 2 not writable");
    fprintf(stderr, "  5 members, leader and a follower killed: writable after %d ms\n", ms);
    int s = cl_other(&g_c, -1, -1);
    put_many(s, "/fo/b", 0, 10);
    int third = cl_other(&g_c, s, -1);
    kvt_member_kill9(&g_c, third);
    s = cl_other(&g_c, -1, -1);
    put_fails(s, "/fo/minority");
    int s2 = cl_other(&g_c, s, -1);
    put_fails(s2, "/fo/minority2");
}
