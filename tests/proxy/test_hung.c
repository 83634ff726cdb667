/*
 * proxy_hung: a hung upstream member (SIGSTOP: its TCP connection open, nothing ends the
 * proxy's streams) and no lease kept alive through the proxy, so the renewal watchdog
 * (proxy_failover hung_upstream_member_is_left) has nothing to see. Only the upstream
 * connection's keepalive pings can tell. Not RUN_SERIAL: one bound, 20 s for an expected
 * 12 s; stalled_member_is_left_by_the_probe(_with_auth_on): 25 s for about 9 s.
 */
#include "px_util.h"

#include "kvclient.h"

#include <criterion/criterion.h>

#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

static kvt_cluster g_c;
static px g_x;

static void fini(void)
{
    px_stop(&g_x);
    kvt_cluster_destroy(&g_c);
}

/* A hung upstream member and no lease kept alive through the proxy: the watchdog above has no
 * renewal in flight to miss, so only the upstream connection's keepalive pings can tell
 * (--upstream-keepalive-time=10s, the least, --upstream-keepalive-timeout=2s). A watcher through
 * the proxy must get a put made on the leader while the upstream member (a follower) is still
 * stopped: the ping goes unanswered, the proxy moves to the next member and its watch resumes
 * there. With the pings off (--upstream-keepalive-time=0) the event comes only after the resume. */
typedef struct {
    atomic_int events;
} wrx;

static void on_watch(void *arg, const kvc_watch_response *r)
{
    wrx *w = arg;
    atomic_fetch_add(&w->events, (int)r->n_events);
}

static int wait_events(wrx *w, int n, uint32_t ms)
{
    uint64_t end = kvt_now_ms() + ms;
    while (atomic_load(&w->events) < n && kvt_now_ms() < end)
        kvt_sleep_ms(20);
    return atomic_load(&w->events);
}

/* A client of the proxy watching key (2 bytes), and the watcher's first event: a put of it
 * through the proxy. The caller cancels *wt and closes the client. */
static kvc_client *watch_through_proxy(const char *key, wrx *w, kvc_watch **wt)
{
    kvc_client *cl = px_client(g_x.endpoint);
    cr_assert(cl);
    atomic_store(&w->events, 0);
    kvc_error e;
    cr_assert_eq(kvc_watch_create(cl, key, 2, NULL, 5000, on_watch, w, wt, NULL, &e), 0, "%s",
                 e.message);
    cr_assert_eq(kvc_put(cl, key, 2, "1", 1, NULL, 5000, NULL, &e), 0, "%s", e.message);
    cr_assert_eq(wait_events(w, 1, 5000), 1, "the watcher got the first put");
    return cl;
}

Test(proxy_hung, upstream_member_is_left_by_keepalive_pings, .fini = fini, .timeout = 300)
{
    /* the probe off: it would find the hung member too (its read silent, then a PING) */
    const char *const extra[] = {"--upstream-keepalive-time=10s", "--upstream-keepalive-timeout=2s",
                                 "--upstream-probe-interval=0", NULL};
    int hung, leader;
    cr_assert_eq(px_start_on_follower(&g_x, &g_c, extra, &hung, &leader), 0, "cluster and proxy");

    static wrx w;
    kvc_watch *wt = NULL;
    kvc_client *cl = watch_through_proxy("hk", &w, &wt);

    cr_assert_eq(kvt_member_pause(&g_c, hung), 0);
    uint64_t t0 = kvt_now_ms();
    char err[256];
    cr_assert_eq(kvt_put(&g_c, leader, "hk", "2", 5000, NULL, err, sizeof err), 0,
                 "put on the leader: %s", err);
    /* at most 10 s without a read, 2 s for the ping, then the reconnect and the watch resume */
    int got = wait_events(&w, 2, 20000);
    uint64_t dt = kvt_now_ms() - t0;
    fprintf(stderr,
            "proxy_hung: member m%d stopped, no lease: the watcher got the put after %llu ms "
            "(%d events)\n",
            hung, (unsigned long long)dt, got);
    double pings = px_metric(&g_x, "kvd_proxy_upstream_ping_timeouts_total");
    double connects = px_metric(&g_x, "kvd_proxy_upstream_connects_total");
    cr_assert_eq(kvt_member_resume(&g_c, hung), 0);
    cr_assert_eq(got, 2, "the put made while the upstream member hung never reached the watcher");
    /* at least: a healthy member slow to answer under CI's load would add one, harmlessly */
    cr_assert_geq(pings, 1, "upstream ping timeouts: %.0f", pings);
    cr_assert_geq(connects, 2, "upstream connects: %.0f", connects);
    kvc_watch_cancel(wt);
    kvc_close(cl);
}

/* A member that stopped serving but still answers PINGs and forwards renewals: its raft
 * stalled (SIGUSR1, --enable-failpoints: the node processes no ready, its tick still fails
 * requests at their deadline). Nothing ends the proxy's streams and a watcher alone sends no
 * call that could fail, so only the upstream probe (--upstream-probe-interval, a linearizable
 * read) can tell: the member answers it "etcdserver: request timed out" after its request
 * timeout (7 s), libkvclient leaves the connection, and the watch resumes on the next member.
 * With the probe off (--upstream-probe-interval=0) the put never reaches the watcher while
 * the member is stalled. */
Test(proxy_hung, stalled_member_is_left_by_the_probe, .fini = fini, .timeout = 300)
{
    if (kvt_target_from_env() != KV_TEST_SERVER_KVD) /* SIGUSR1 would end an etcd member */
        cr_skip_test("kvd's --enable-failpoints and kvd's proxy (etcd 3.4's has no probe)");
    const char *probe = getenv("PX_TEST_PROBE_INTERVAL"); /* "0": the control, by hand */
    char flag[64];
    snprintf(flag, sizeof flag, "--upstream-probe-interval=%s", probe ? probe : "2s");
    const char *const extra[] = {flag, NULL};
    int stalled, leader;
    cr_assert_eq(px_start_on_follower(&g_x, &g_c, extra, &stalled, &leader), 0,
                 "cluster and proxy");

    static wrx w;
    kvc_watch *wt = NULL;
    kvc_client *cl = watch_through_proxy("sk", &w, &wt);
    double connects0 = px_metric(&g_x, "kvd_proxy_upstream_connects_total");

    cr_assert_eq(kill(g_c.m[stalled].proc.pid, SIGUSR1), 0, "stall m%d", stalled);
    kvt_sleep_ms(200); /* the member's loop takes the signal */
    uint64_t t0 = kvt_now_ms();
    char err[256];
    cr_assert_eq(kvt_put(&g_c, leader, "sk", "2", 5000, NULL, err, sizeof err), 0,
                 "put on the leader: %s", err);
    /* a probe within 2 s, the member's answer after its 7 s request timeout, the reconnect
     * and the watch resume */
    int got = wait_events(&w, 2, 25000);
    uint64_t dt = kvt_now_ms() - t0;
    fprintf(stderr,
            "proxy_hung: member m%d stalled: the watcher got the put after %llu ms (%d events)\n",
            stalled, (unsigned long long)dt, got);
    double failures = px_metric(&g_x, "kvd_proxy_upstream_probe_failures_total");
    double probes = px_metric(&g_x, "kvd_proxy_upstream_probes_total");
    double pings = px_metric(&g_x, "kvd_proxy_upstream_ping_timeouts_total");
    double connects = px_metric(&g_x, "kvd_proxy_upstream_connects_total");
    fprintf(stderr, "proxy_hung: probes %.0f, failed %.0f, ping timeouts %.0f, connects %.0f\n",
            probes, failures, pings, connects);
    kill(g_c.m[stalled].proc.pid, SIGUSR1); /* resume, so the cluster stops cleanly */
    cr_assert_eq(got, 2,
                 "the put made while the upstream member was stalled never reached the "
                 "watcher");
    cr_assert_geq(failures, 1, "upstream probe failures: %.0f", failures);
    cr_assert_gt(connects, connects0, "upstream connects: %.0f, before the stall %.0f", connects,
                 connects0);
    cr_assert_eq(pings, 0, "the stalled member answered the PINGs: %.0f ping timeouts", pings);
    kvc_watch_cancel(wt);
    kvc_close(cl);
}

/* etcdctl through the proxy; fails the test unless it exits 0. */
static void ctl_ok(const char *a1, const char *a2, const char *a3, const char *a4)
{
    kvt_cmd_result r;
    cr_assert_eq(px_ctl(&g_x, 15000, &r, a1, a2, a3, a4, NULL), 0);
    cr_assert_eq(r.exit_code, 0, "etcdctl %s %s: %s %s", a1, a2, r.out, r.err);
    kvt_cmd_result_free(&r);
}

/* The same stall with auth on. The probe carries no token, so the member refuses it ("user
 * name is empty"), but only after its read barrier, as etcd does (server/api/auth_gate.c): a
 * stalled member answers it "request timed out", and the proxy leaves it. Before that order,
 * the refusal came at once from the stalled member too and the probe told nothing. */
Test(proxy_hung, stalled_member_is_left_by_the_probe_with_auth_on, .fini = fini, .timeout = 300)
{
    if (kvt_target_from_env() != KV_TEST_SERVER_KVD) /* SIGUSR1 would end an etcd member */
        cr_skip_test("kvd's --enable-failpoints and kvd's proxy (etcd 3.4's has no probe)");
    const char *const extra[] = {"--upstream-probe-interval=1s", NULL};
    int stalled, leader;
    cr_assert_eq(px_start_on_follower(&g_x, &g_c, extra, &stalled, &leader), 0,
                 "cluster and proxy");
    ctl_ok("user", "add", "root:rootpw", NULL);
    ctl_ok("user", "grant-role", "root", "root");
    ctl_ok("auth", "enable", NULL, NULL);
    /* probes answered with auth on: refused, not failed */
    double probes0 = px_metric(&g_x, "kvd_proxy_upstream_probes_total");
    uint64_t end = kvt_now_ms() + 10000;
    while (px_metric(&g_x, "kvd_proxy_upstream_probes_total") < probes0 + 2 && kvt_now_ms() < end)
        kvt_sleep_ms(100);
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_upstream_probe_failures_total"), 0,
                 "a probe failed with auth on before the stall");
    double connects0 = px_metric(&g_x, "kvd_proxy_upstream_connects_total");

    cr_assert_eq(kill(g_c.m[stalled].proc.pid, SIGUSR1), 0, "stall m%d", stalled);
    uint64_t t0 = kvt_now_ms();
    end = t0 + 25000;
    double failures = 0, connects = connects0;
    while ((failures < 1 || connects <= connects0) && kvt_now_ms() < end) {
        kvt_sleep_ms(200);
        failures = px_metric(&g_x, "kvd_proxy_upstream_probe_failures_total");
        connects = px_metric(&g_x, "kvd_proxy_upstream_connects_total");
    }
    fprintf(stderr,
            "proxy_hung: auth on, member m%d stalled: probe failures %.0f, connects %.0f -> %.0f "
            "after %llu ms\n",
            stalled, failures, connects0, connects, (unsigned long long)(kvt_now_ms() - t0));
    kill(g_c.m[stalled].proc.pid, SIGUSR1); /* resume, so the cluster stops cleanly */
    cr_assert_geq(failures, 1, "with auth on, no probe failed through the stalled member");
    cr_assert_gt(connects, connects0, "the proxy did not leave the stalled member");
}
