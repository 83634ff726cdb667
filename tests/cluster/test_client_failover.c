/*
 * cluster_client_failover: libkvclient and kvctl fail over between the members of a real
 * 3-member cluster.
 *   - a client keeps 100 leases alive on its one keepalive stream; the member it is connected
 *     to is killed (kill -9), first a follower, then (after it is back) the leader. Every lease
 *     survives and the stream resumes on another member: each lease has a renewal answered by
 *     another member within TTL/3 of the kill (+0.5 s stated margin for CI noise);
 *   - the same when the member hangs (SIGSTOP, connection open): the client gives it up when a
 *     renewal is due again and the previous one is unanswered with nothing else answered
 *     since, and re-sends at once on another member (bound 2 x TTL/3 + 0.5 s);
 *   - kvctl --endpoints a,b,c tries the next endpoint when a connection fails, as etcdctl
 *     does (dead port first, killed member first).
 * Figures (time to the first answered renewal on the new member, longest gap between two
 * answered renewals of a lease) are logged to stderr.
 */
#include "cl_util.h"
#include "kvclient.h"

#include <criterion/criterion.h>

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static kvt_cluster g_c;

static void fini(void)
{
    kvt_cluster_destroy(&g_c);
}

/* A client whose endpoint list starts with member `first`, then the other running members. */
static kvc_client *client_first(int first)
{
    const char *eps[KVT_MAX_MEMBERS];
    size_t n = 0;
    for (int k = 0; k < g_c.n; k++) {
        int j = (first + k) % g_c.n;
        if (g_c.m[j].in_config)
            eps[n++] = g_c.m[j].endpoint;
    }
    kvc_config cfg;
    kvc_config_default(&cfg);
    cfg.endpoints = eps;
    cfg.n_endpoints = n;
    cfg.dial_timeout_ms = 3000;
    kvc_client *c = NULL;
    kvc_error err;
    cr_assert_eq(kvc_open(&c, &cfg, &err), 0, "kvc_open: %s", err.message);
    return c;
}

enum { N_KA = 100 };

/* Per-lease record of answered renewals, written by the client's I/O thread. */
typedef struct ka_rec {
    pthread_mutex_t *mu;
    uint64_t last_ms;     /* last answered renewal */
    uint64_t last_member; /* header.member_id of it */
    uint64_t kill_ms;     /* 0 until the kill */
    uint64_t victim;      /* member id killed */
    uint64_t resumed_ms;  /* first answer from another member after the kill */
    uint64_t max_gap_ms;  /* longest time between two answers since the kill */
    int lost;
} ka_rec;

static void on_ka(void *arg, const kvc_ka_event *ev)
{
    ka_rec *r = arg;
    uint64_t now = kvt_now_ms();
    pthread_mutex_lock(r->mu);
    if (ev->type != KVC_KA_RESPONSE) {
        r->lost = 1;
    } else {
        if (r->kill_ms && r->last_ms && now - r->last_ms > r->max_gap_ms)
            r->max_gap_ms = now - r->last_ms;
        if (r->kill_ms && !r->resumed_ms && ev->header.member_id != r->victim)
            r->resumed_ms = now;
        r->last_ms = now;
        r->last_member = ev->header.member_id;
    }
    pthread_mutex_unlock(r->mu);
}

static int64_t grant(kvc_client *c, int64_t ttl)
{
    kvc_lease_grant_result g;
    kvc_error err;
    int r = kvc_lease_grant(c, ttl, 0, 0, 10000, &g, &err);
    cr_assert_eq(r, 0, "grant: %d %s", r, err.message);
    return g.id;
}

/*
 * Keeps N_KA leases alive through a client connected to member `victim` first, kills it and
 * checks that every lease resumes on another member within TTL/3 (+ margin) and none is lost.
 */
static void kill_connected_member(int victim, const char *what, int hang)
{
    const int64_t ttl = 6;
    /* Killed: the connection drops at once, renewals resume within TTL/3. Hung: detected when
     * a renewal is due again with the previous one unanswered (TTL/3), then re-sent at once. */
    const uint64_t bound = (uint64_t)ttl * 1000 / 3 * (hang ? 2 : 1) + 500;
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static ka_rec rec[N_KA];
    static int64_t ids[N_KA];
    static kvc_keepalive *ka[N_KA];
    kvc_client *c = client_first(victim);
    kvt_status st;
    cr_assert_eq(kvt_member_status(&g_c, victim, &st, 5000), 0);
    uint64_t vid = st.id;
    kvc_error err;
    uint64_t tg = kvt_now_ms();
    for (int k = 0; k < N_KA; k++) {
        memset(&rec[k], 0, sizeof(rec[k]));
        rec[k].mu = &mu;
        ids[k] = grant(c, ttl);
        cr_assert_eq(kvc_lease_keepalive(c, ids[k], ttl, on_ka, &rec[k], &ka[k], &err), 0,
                     "keepalive: %s", err.message);
    }
    /* Every lease answered by the victim (the client is connected to it). */
    uint64_t t0 = kvt_now_ms();
    int ready = 0;
    while (!ready && kvt_now_ms() - t0 < 10000) {
        kvt_sleep_ms(100);
        ready = 1;
        pthread_mutex_lock(&mu);
        for (int k = 0; k < N_KA; k++)
            if (rec[k].last_member != vid)
                ready = 0;
        pthread_mutex_unlock(&mu);
    }
    {
        kvc_stats st0;
        kvc_stats_get(c, &st0);
        cr_assert(ready,
                  "%s: not every lease renewed through %s (%" PRIx64 "; lease 0: %" PRIx64
                  " = member %d); reconnects %" PRIu64 " calls retried %" PRIu64,
                  what, g_c.m[victim].name, vid, rec[0].last_member,
                  kvt_cluster_index_of(&g_c, rec[0].last_member), st0.reconnects,
                  st0.calls_retried);
    }
    fprintf(stderr, "  %s: %d leases granted and renewed through %s in %" PRIu64 " ms\n", what,
            N_KA, g_c.m[victim].name, kvt_now_ms() - tg);
    /* Kill it a random fraction of a renewal period after the last answers. */
    kvt_sleep_ms(300 + (uint32_t)(kvt_now_ms() % 1000));
    pthread_mutex_lock(&mu);
    uint64_t tk = kvt_now_ms();
    for (int k = 0; k < N_KA; k++) {
        rec[k].kill_ms = tk;
        rec[k].victim = vid;
    }
    pthread_mutex_unlock(&mu);
    if (hang) /* SIGSTOP: the TCP connection stays open, nothing is answered */
        cr_assert_eq(kvt_member_pause(&g_c, victim), 0);
    else
        cr_assert_eq(kvt_member_kill9(&g_c, victim), 0);

    /* One TTL + 1 s after the kill: every lease's deadline as of its last answer before it
     * has passed, so a lease that was not renewed elsewhere is reported lost by now. */
    while (kvt_now_ms() - tk < (uint64_t)ttl * 1000 + 1000)
        kvt_sleep_ms(100);
    uint64_t worst = 0, max_gap = 0;
    int lost = 0, not_resumed = 0, late = 0;
    pthread_mutex_lock(&mu);
    for (int k = 0; k < N_KA; k++) {
        lost += rec[k].lost || kvc_keepalive_lost(ka[k]);
        if (!rec[k].resumed_ms) {
            not_resumed++;
            continue;
        }
        uint64_t d = rec[k].resumed_ms - tk;
        if (d > worst)
            worst = d;
        if (d > bound)
            late++;
        if (rec[k].max_gap_ms > max_gap)
            max_gap = rec[k].max_gap_ms;
    }
    pthread_mutex_unlock(&mu);
    kvc_stats stats;
    kvc_stats_get(c, &stats);
    fprintf(stderr,
            "  %s: %d leases, renewals answered by another member at most %" PRIu64
            " ms after the kill/stop (bound %" PRIu64 " ms), longest gap between "
            "answers %" PRIu64 " ms; %d lost, %d not resumed; client reconnects %" PRIu64 "\n",
            what, N_KA, worst, bound, max_gap, lost, not_resumed, (uint64_t)stats.reconnects);
    cr_assert_eq(lost, 0, "%s: %d leases lost", what, lost);
    cr_assert_eq(not_resumed, 0, "%s: %d leases never renewed on another member", what,
                 not_resumed);
    cr_assert_eq(late, 0, "%s: %d leases resumed later than %" PRIu64 " ms (worst %" PRIu64 ")",
                 what, late, bound, worst);
    /* The leases are alive on the cluster. */
    for (int k = 0; k < N_KA; k++) {
        kvc_lease_ttl_result t;
        cr_assert_eq(kvc_lease_time_to_live(c, ids[k], 0, 10000, &t, &err), 0, "%s", err.message);
        cr_assert_gt(t.ttl, 0, "%s: lease %d expired", what, k);
        kvc_lease_ttl_result_free(&t);
    }
    for (int k = 0; k < N_KA; k++)
        kvc_keepalive_stop(ka[k]);
    kvc_close(c);
    if (hang)
        cr_assert_eq(kvt_member_resume(&g_c, victim), 0);
}

Test(cluster_client_failover, keepalive_resumes_on_another_member, .fini = fini, .timeout = 240)
{
    cr_assert_eq(cl_start(&g_c, 3, 0), 0);
    int l = kvt_cluster_wait_leader(&g_c, 10000, NULL);
    cr_assert_geq(l, 0);
    int f = (l + 1) % 3;
    kill_connected_member(f, "follower killed", 0);
    cr_assert_eq(kvt_member_restart(&g_c, f, 20000), 0, "restart %s", g_c.m[f].name);
    l = kvt_cluster_wait_leader(&g_c, 10000, NULL);
    cr_assert_geq(l, 0);
    kill_connected_member(l, "leader killed", 0);
}

/* The member a client's keepalive stream is on stops answering (SIGSTOP) but its connection
 * stays open: the client gives it up when renewals go unanswered and resumes elsewhere. */
Test(cluster_client_failover, keepalive_leaves_a_hung_member, .fini = fini, .timeout = 240)
{
    cr_assert_eq(cl_start(&g_c, 3, 0), 0);
    int l = kvt_cluster_wait_leader(&g_c, 10000, NULL);
    cr_assert_geq(l, 0);
    kill_connected_member((l + 1) % 3, "follower stopped", 1);
    l = kvt_cluster_wait_leader(&g_c, 10000, NULL);
    cr_assert_geq(l, 0);
    kill_connected_member(l, "leader stopped", 1);
}

static const char *kvctl_bin(void)
{
    static char path[4096];
    const char *b = getenv("KV_BUILD_DIR");
    snprintf(path, sizeof(path), "%s/client/kvctl", b ? b : ".");
    return path;
}

/* Runs kvctl --endpoints=<eps> args... (NULL-terminated); res filled. */
static void kvctl_run(const char *eps, kvt_cmd_result *res, const char *a1, const char *a2,
                      const char *a3)
{
    char epflag[512];
    snprintf(epflag, sizeof(epflag), "--endpoints=%s", eps);
    const char *argv[] = {kvctl_bin(), epflag, "--dial-timeout=2s", a1, a2, a3, NULL};
    cr_assert_eq(kvt_run(argv, NULL, NULL, 0, 30000, res), 0, "run kvctl");
}

Test(cluster_client_failover, kvctl_tries_the_next_endpoint, .fini = fini, .timeout = 180)
{
    cr_assert_eq(cl_start(&g_c, 3, 0), 0);
    int l = kvt_cluster_wait_leader(&g_c, 10000, NULL);
    cr_assert_geq(l, 0);
    char eps[512];
    uint16_t dead = 0;
    cr_assert_eq(kvt_port_free(&dead), 0);
    /* A port nobody listens on first. */
    snprintf(eps, sizeof(eps), "127.0.0.1:%u,%s,%s", (unsigned)dead, g_c.m[0].endpoint,
             g_c.m[1].endpoint);
    kvt_cmd_result res;
    kvctl_run(eps, &res, "put", "/fo/a", "1");
    cr_assert(res.exit_code == 0 && strcmp(res.out, "OK\n") == 0,
              "put with a dead first endpoint: exit %d out '%s' err '%s'", res.exit_code, res.out,
              res.err ? res.err : "");
    kvt_cmd_result_free(&res);
    /* A killed member (the leader) first. */
    cr_assert_eq(kvt_member_kill9(&g_c, l), 0);
    cr_assert_geq(kvt_cluster_wait_leader(&g_c, 15000, NULL), 0);
    int a = (l + 1) % 3, b = (l + 2) % 3;
    snprintf(eps, sizeof(eps), "%s,%s,%s", g_c.m[l].endpoint, g_c.m[a].endpoint, g_c.m[b].endpoint);
    uint64_t t0 = kvt_now_ms();
    kvctl_run(eps, &res, "get", "/fo/a", NULL);
    fprintf(stderr, "  kvctl get with the killed leader first: exit %d in %" PRIu64 " ms\n",
            res.exit_code, kvt_now_ms() - t0);
    cr_assert(res.exit_code == 0 && strcmp(res.out, "/fo/a\n1\n") == 0,
              "get with a killed first endpoint: exit %d out '%s' err '%s'", res.exit_code, res.out,
              res.err ? res.err : "");
    kvt_cmd_result_free(&res);
    kvctl_run(eps, &res, "put", "/fo/b", "2");
    cr_assert(res.exit_code == 0 && strcmp(res.out, "OK\n") == 0,
              "put with a killed first endpoint: exit %d out '%s' err '%s'", res.exit_code, res.out,
              res.err ? res.err : "");
    kvt_cmd_result_free(&res);
    /* etcdctl behaves the same (reference). */
    cr_assert_eq(kvt_ctl(&g_c, -1, 20000, &res, "get", "/fo/b", NULL), 0);
    cr_assert(res.exit_code == 0 && strcmp(res.out, "/fo/b\n2\n") == 0, "etcdctl get: '%s'",
              res.out);
    kvt_cmd_result_free(&res);
}
