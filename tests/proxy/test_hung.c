/*
 * proxy_hung: a hung upstream member (SIGSTOP: its TCP connection open, nothing ends the
 * proxy's streams) and no lease kept alive through the proxy, so the renewal watchdog
 * (proxy_failover hung_upstream_member_is_left) has nothing to see. Only the upstream
 * connection's keepalive pings can tell. Not RUN_SERIAL: one bound, 20 s for an expected
 * 12 s.
 */
#include "px_util.h"

#include "kvclient.h"

#include <criterion/criterion.h>

#include <stdatomic.h>
#include <stdio.h>

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

Test(proxy_hung, upstream_member_is_left_by_keepalive_pings, .fini = fini, .timeout = 300)
{
    const char *const extra[] = {"--upstream-keepalive-time=10s", "--upstream-keepalive-timeout=2s",
                                 NULL};
    int hung, leader;
    cr_assert_eq(px_start_on_follower(&g_x, &g_c, extra, &hung, &leader), 0, "cluster and proxy");

    kvc_client *cl = px_client(g_x.endpoint);
    cr_assert(cl);
    static wrx w;
    atomic_store(&w.events, 0);
    kvc_watch *wt = NULL;
    kvc_error e;
    cr_assert_eq(kvc_watch_create(cl, "hk", 2, NULL, 5000, on_watch, &w, &wt, NULL, &e), 0, "%s",
                 e.message);
    cr_assert_eq(kvc_put(cl, "hk", 2, "1", 1, NULL, 5000, NULL, &e), 0, "%s", e.message);
    cr_assert_eq(wait_events(&w, 1, 5000), 1, "the watcher got the first put");

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
