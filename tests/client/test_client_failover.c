/*
 * test_client_failover.c - endpoints, retries and backoff: a dead endpoint is skipped; on a
 * dropped connection an in-flight put fails (never replayed) while an in-flight read is
 * retried on the new connection; reconnects back off instead of spinning; with keepalive
 * pings on, a hung member (stopped, its connection open) is left for the next endpoint;
 * kvc_failover moves to the next endpoint on request; a call in flight without a deadline
 * (a Lock waiting behind a holder) does not hold the connection being left past the next
 * due renewal of a lease kept alive.
 */
#include "testutil.h"

#include <criterion/criterion.h>
#include <stdatomic.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

static struct kvt_server srv;

static void setup(void)
{
    cr_assert_eq(kvt_server_start(&srv), 0, "server start");
}

static void teardown(void)
{
    kvt_server_stop(&srv);
}

TestSuite(client_failover, .init = setup, .fini = teardown, .timeout = 90);

/* A client of two endpoints, a and b, that has made its first connection by a put of key (a
 * put is safe there: it reached whichever endpoint answered). */
static kvc_client *two_endpoint_client(const char *a, const char *b, const char *key)
{
    const char *eps[] = {a, b};
    kvc_config cfg;
    kvc_config_default(&cfg);
    cfg.endpoints = eps;
    cfg.n_endpoints = 2;
    kvc_client *c;
    cr_assert_eq(kvc_open(&c, &cfg, NULL), 0);
    kvc_error e;
    cr_assert_eq(kvc_put(c, key, strlen(key), "v", 1, NULL, 5000, NULL, &e), 0, "%s", e.message);
    kvc_stats s;
    kvc_stats(c, &s);
    cr_assert_eq(s.connects, 1);
    return c;
}

Test(client_failover, dead_first_endpoint_is_skipped)
{
    char dead[32];
    snprintf(dead, sizeof dead, "127.0.0.1:%d", kvt_free_port());
    /* A put is safe here: it was never sent to the dead endpoint. */
    kvc_close(two_endpoint_client(dead, srv.endpoint, "f/k"));
}

struct done {
    pthread_mutex_t mu;
    int fired;
    int status;
    kvc_error err;
};

static void on_done(void *arg, int status, const kvc_error *err, uint8_t *resp, size_t len)
{
    (void)len;
    struct done *d = arg;
    kvc_free(resp);
    pthread_mutex_lock(&d->mu);
    d->fired = 1;
    d->status = status;
    if (err)
        d->err = *err;
    pthread_mutex_unlock(&d->mu);
}

static int fired(struct done *d)
{
    pthread_mutex_lock(&d->mu);
    int f = d->fired;
    pthread_mutex_unlock(&d->mu);
    return f;
}

#include "rpc.pb-c.h"

static size_t pack_put(uint8_t *buf, const char *k)
{
    Etcdserverpb__PutRequest p = ETCDSERVERPB__PUT_REQUEST__INIT;
    p.key.data = (uint8_t *)k;
    p.key.len = strlen(k);
    p.value.data = (uint8_t *)"v";
    p.value.len = 1;
    return etcdserverpb__put_request__pack(&p, buf);
}

static size_t pack_range(uint8_t *buf, const char *k)
{
    Etcdserverpb__RangeRequest r = ETCDSERVERPB__RANGE_REQUEST__INIT;
    r.key.data = (uint8_t *)k;
    r.key.len = strlen(k);
    return etcdserverpb__range_request__pack(&r, buf);
}

Test(client_failover, in_flight_put_is_not_replayed_in_flight_read_is_retried)
{
    kvc_client *c = kvt_client(srv.endpoint);
    cr_assert_eq(kvc_get(c, "warm", 4, NULL, 5000, NULL, NULL), 0);
    kvt_server_signal(&srv, SIGSTOP); /* requests reach the socket, nobody answers */
    static struct done dp = {.mu = PTHREAD_MUTEX_INITIALIZER};
    static struct done dg = {.mu = PTHREAD_MUTEX_INITIALIZER};
    uint8_t buf[64];
    size_t n = pack_put(buf, "f/put-once");
    cr_assert_eq(
        kvc_call_unary_async(c, "/etcdserverpb.KV/Put", buf, n, 20000, 0, on_done, &dp, NULL), 0);
    n = pack_range(buf, "warm");
    cr_assert_eq(kvc_call_unary_async(c, "/etcdserverpb.KV/Range", buf, n, 20000, KVC_IDEMPOTENT,
                                      on_done, &dg, NULL),
                 0);
    kvt_sleep_ms(300);
    kvt_server_signal(&srv, SIGKILL); /* the connection drops with both in flight */
    for (int i = 0; i < 200 && !fired(&dp); i++)
        kvt_sleep_ms(10);
    cr_assert(fired(&dp), "the put failed at once");
    cr_assert_eq(dp.status, -KVC_UNAVAILABLE);
    cr_assert(strstr(dp.err.message, "may or may not have been applied"), "%s", dp.err.message);
    cr_assert_not(fired(&dg), "the read waits for a new connection");
    cr_assert_eq(kvt_server_restart(&srv), 0);
    for (int i = 0; i < 1000 && !fired(&dg); i++)
        kvt_sleep_ms(10);
    cr_assert(fired(&dg), "the read completed after the restart");
    cr_assert_eq(dg.status, 0, "%s", dg.err.message);
    kvc_stats s;
    kvc_stats(c, &s);
    /* The put completed with its error above (a completed call is never resent), the read
     * was retried. */
    cr_assert_geq(s.calls_retried, 1);
    cr_assert_geq(s.reconnects, 1);
    /* The server may have applied the put before it stopped ("may or may not"), but at most
     * once. */
    kvc_range_result r;
    cr_assert_eq(kvc_get(c, "f/put-once", 10, NULL, 5000, &r, NULL), 0);
    cr_assert(r.n_kvs == 0 || r.kvs[0].version == 1);
    kvc_range_result_free(&r);
    kvc_close(c);
}

Test(client_failover, reconnects_back_off)
{
    int port;
    struct kvt_fake *f = kvt_fake_start(KVT_FAKE_CLOSE, &port);
    char ep[32];
    snprintf(ep, sizeof ep, "127.0.0.1:%d", port);
    kvc_client *c = kvt_client(ep);
    kvc_keepalive *ka; /* gives the client a reason to keep reconnecting */
    cr_assert_eq(kvc_lease_keepalive(c, 42, 60, NULL, NULL, &ka, NULL), 0);
    kvt_sleep_ms(4000);
    int accepted = kvt_fake_accepted(f);
    /* Backoff 50 ms doubling to 1 s with jitter: about 6-10 connects in 4 s, not hundreds. */
    cr_log_info("%d connection attempts in 4 s", accepted);
    cr_assert_geq(accepted, 4);
    cr_assert_leq(accepted, 16);
    kvc_stats s;
    kvc_stats(c, &s);
    cr_assert_eq(s.connects, 0);
    cr_assert_eq(s.renewals_sent, 0, "nothing is sent to a peer that is not HTTP/2");
    kvc_keepalive_stop(ka);
    kvc_close(c);
    kvt_fake_stop(f);
}

static void on_watch_ignore(void *arg, const kvc_watch_response *r)
{
    (void)arg;
    (void)r;
}

/* keepalive_time_ms (10 s, the least) / keepalive_timeout_ms (1 s): with a watch stream open,
 * a healthy member answers the pings (no timeout, no reconnect, and the member never counts
 * them as too many); once it is stopped (SIGSTOP: the TCP connection stays open, nothing
 * ends the stream) the unanswered ping gives the connection up and the client connects to
 * its next endpoint. Without pings the client would wait on the stopped member forever. */
/* Starts *srv2 and fills cfg with the endpoints {srv, srv2} (eps holds them: 2 entries). */
static void two_members(struct kvt_server *srv2, const char **eps, kvc_config *cfg)
{
    cr_assert_eq(kvt_server_start(srv2), 0, "second server");
    eps[0] = srv.endpoint;
    eps[1] = srv2->endpoint;
    kvc_config_default(cfg);
    cfg->endpoints = eps;
    cfg->n_endpoints = 2;
}

Test(client_failover, hung_member_is_left_by_keepalive_pings, .timeout = 120)
{
    static struct kvt_server srv2;
    const char *eps[2];
    kvc_config cfg;
    two_members(&srv2, eps, &cfg);
    cfg.keepalive_time_ms = 2000; /* raised to 10 s */
    cfg.keepalive_timeout_ms = 1000;
    kvc_client *c;
    kvc_error e;
    cr_assert_eq(kvc_open(&c, &cfg, &e), 0, "%s", e.message);
    kvc_watch *w = NULL;
    cr_assert_eq(kvc_watch_create(c, "ping", 4, NULL, 5000, on_watch_ignore, NULL, &w, NULL, &e), 0,
                 "%s", e.message);
    kvt_sleep_ms(12500); /* one ping at 10 s, answered */
    kvc_stats s;
    kvc_stats(c, &s);
    cr_assert_eq(s.ping_timeouts, 0);
    cr_assert_eq(s.connects, 1, "a healthy member is not left");
    cr_assert_eq(kvt_metric(&srv, "kvd_grpc_connections_closed_total", "too_many_pings"), 0);

    kvt_server_signal(&srv, SIGSTOP);
    uint64_t t0 = kvt_now_ms();
    for (int i = 0; i < 1500 && (s.ping_timeouts == 0 || s.connects < 2); i++) {
        kvt_sleep_ms(10);
        kvc_stats(c, &s);
    }
    uint64_t dt = kvt_now_ms() - t0;
    kvt_server_signal(&srv, SIGCONT);
    fprintf(stderr, "client_failover: stopped member left after %llu ms\n", (unsigned long long)dt);
    cr_assert_eq(s.ping_timeouts, 1, "the unanswered ping gave the connection up");
    cr_assert_eq(s.connects, 2, "connected to the next endpoint");
    cr_assert_eq(kvc_put(c, "ping", 4, "v", 1, NULL, 5000, NULL, &e), 0, "%s", e.message);
    kvc_watch_cancel(w);
    kvc_close(c);
    kvt_server_stop(&srv2);
}

/* keepalive_call_ms (1 s; kvd grpc-proxy's --upstream-answer-timeout): a call that waits on a
 * live member (a Lock held by another lease) is not cut: the PING sent after 1 s of silence
 * is acked. On a stopped member (SIGSTOP: its connection stays open) a Range is unanswered,
 * the PING too, and 1 s later the connection is given up: the Range is retried on the next
 * endpoint, long before its deadline (without keepalive_call_ms it waits out the 15 s). */
Test(client_failover, silent_call_leaves_a_hung_member_by_a_ping, .timeout = 120)
{
    static struct kvt_server srv2;
    const char *eps[2];
    kvc_config cfg;
    two_members(&srv2, eps, &cfg);
    cfg.keepalive_call_ms = 1000;
    kvc_client *c;
    kvc_error e;
    cr_assert_eq(kvc_open(&c, &cfg, &e), 0, "%s", e.message);
    kvc_lease_grant_result g1, g2;
    cr_assert_eq(kvc_lease_grant(c, 60, 0, 0, 5000, &g1, &e), 0, "%s", e.message);
    cr_assert_eq(kvc_lease_grant(c, 60, 0, 0, 5000, &g2, &e), 0, "%s", e.message);
    uint8_t *resp = NULL;
    size_t rl = 0, n;
    uint8_t *req = kvt_lock_req("lk", g1.id, &n);
    cr_assert_eq(kvc_call_unary(c, "/v3lockpb.Lock/Lock", req, n, &resp, &rl, 5000, 0, &e), 0, "%s",
                 e.message);
    free(req);
    kvc_free(resp);
    resp = NULL;
    req = kvt_lock_req("lk", g2.id, &n);
    uint64_t t0 = kvt_now_ms();
    int rc = kvc_call_unary(c, "/v3lockpb.Lock/Lock", req, n, &resp, &rl, 2500, 0, &e);
    free(req);
    uint64_t waited = kvt_now_ms() - t0;
    kvc_free(resp);
    kvc_stats s;
    kvc_stats(c, &s);
    cr_assert_eq(rc, -KVC_DEADLINE_EXCEEDED, "the second Lock waits out its deadline: %d %s", rc,
                 e.message);
    cr_assert_geq(waited, 2400, "not cut short: %llu ms", (unsigned long long)waited);
    cr_assert_eq(s.ping_timeouts, 0, "the live member acked the PING");
    cr_assert_eq(s.connects, 1, "a live member is not left");
    cr_assert_eq(kvt_metric(&srv, "kvd_grpc_connections_closed_total", "too_many_pings"), 0);
    kvc_close(c);

    /* a fresh client (its first PING may go out at once): the member stopped under a call */
    cr_assert_eq(kvc_open(&c, &cfg, &e), 0, "%s", e.message);
    cr_assert_eq(kvc_put(c, "k", 1, "v", 1, NULL, 5000, NULL, &e), 0, "%s", e.message);
    kvt_server_signal(&srv, SIGSTOP);
    kvc_range_result rr = {0};
    t0 = kvt_now_ms();
    rc = kvc_get(c, "k", 1, NULL, 15000, &rr, &e);
    uint64_t dt = kvt_now_ms() - t0;
    kvt_server_signal(&srv, SIGCONT);
    kvc_range_result_free(&rr);
    kvc_stats(c, &s);
    fprintf(stderr,
            "client_failover: a Range on the stopped member answered by the next after %llu ms\n",
            (unsigned long long)dt);
    cr_assert_eq(rc, 0, "the Range was retried on the next endpoint: %s", e.message);
    cr_assert_lt(dt, 8000, "left after %llu ms", (unsigned long long)dt);
    cr_assert_eq(s.ping_timeouts, 1, "the unanswered PING gave the connection up");
    cr_assert_eq(s.connects, 2, "connected to the next endpoint");
    kvc_close(c);
    kvt_server_stop(&srv2);
}

/* kvc_failover: the client leaves its connection for the next endpoint (here the same server
 * listed twice) at once when nothing is in flight, and the next call works there; with one
 * endpoint it is a no-op. */
Test(client_failover, kvc_failover_moves_to_the_next_endpoint)
{
    kvc_client *c = two_endpoint_client(srv.endpoint, srv.endpoint, "f/fo");
    kvc_error e;
    kvc_stats s;
    kvc_failover(c, "test: next endpoint");
    cr_assert_eq(kvc_get(c, "f/fo", 4, NULL, 5000, NULL, &e), 0, "%s", e.message);
    kvc_stats(c, &s);
    cr_assert_eq(s.connects, 2, "connects %llu", (unsigned long long)s.connects);
    kvc_close(c);

    kvc_client *one = kvt_client(srv.endpoint);
    cr_assert_eq(kvc_get(one, "f/fo", 4, NULL, 5000, NULL, &e), 0, "%s", e.message);
    kvc_failover(one, NULL);
    cr_assert_eq(kvc_get(one, "f/fo", 4, NULL, 5000, NULL, &e), 0, "%s", e.message);
    kvc_stats(one, &s);
    cr_assert_eq(s.connects, 1);
    kvc_close(one);
}

static void lock_done(void *arg, int status, const kvc_error *err, uint8_t *resp, size_t len)
{
    (void)err;
    (void)len;
    kvc_free(resp);
    atomic_store((atomic_int *)arg, status == 0 ? 1 : -1);
}

/* A lease kept alive through a failover while a Lock without a deadline waits behind a
 * holder on the connection being left: the connection used to stay until every call on it
 * ended, and no renewal went out meanwhile, so the lease (TTL 3 s) expired. Now the next due
 * renewal ends the drain: the Lock ends UNAVAILABLE and the lease lives. */
Test(client_failover, a_waiting_call_does_not_stall_renewals_through_a_failover, .timeout = 120)
{
    kvc_client *holder = kvt_client(srv.endpoint);
    kvc_client *c = two_endpoint_client(srv.endpoint, srv.endpoint, "f/lk");
    kvc_lease_grant_result g;
    kvc_error e;
    cr_assert_eq(kvc_lease_grant(holder, 60, 0, 0, 5000, &g, &e), 0, "%s", e.message);
    size_t n, rn = 0;
    uint8_t *req = kvt_lock_req("f/lock", g.id, &n), *resp = NULL;
    cr_assert_eq(kvc_call_unary(holder, "/v3lockpb.Lock/Lock", req, n, &resp, &rn, 5000, 0, &e), 0,
                 "%s", e.message);
    free(req);
    kvc_free(resp);

    kvc_lease_grant_result lg;
    cr_assert_eq(kvc_lease_grant(c, 3, 0, 0, 5000, &lg, &e), 0, "%s", e.message);
    kvc_keepalive *ka = NULL;
    cr_assert_eq(kvc_lease_keepalive(c, lg.id, 3, NULL, NULL, &ka, &e), 0, "%s", e.message);
    kvc_lease_grant_result wl;
    cr_assert_eq(kvc_lease_grant(c, 60, 0, 0, 5000, &wl, &e), 0, "%s", e.message);
    static atomic_int lock_rc;
    atomic_store(&lock_rc, 0);
    req = kvt_lock_req("f/lock", wl.id, &n);
    cr_assert_eq(
        kvc_call_unary_async(c, "/v3lockpb.Lock/Lock", req, n, 0, 0, lock_done, &lock_rc, &e), 0,
        "%s", e.message);
    free(req);
    kvt_sleep_ms(300); /* the Lock waits on the server */
    cr_assert_eq(atomic_load(&lock_rc), 0, "the Lock did not wait");
    kvc_failover(c, "test: leave the member");
    kvt_sleep_ms(7000); /* more than two TTLs */
    int lost = kvc_keepalive_lost(ka);
    kvc_lease_ttl_result t;
    cr_assert_eq(kvc_lease_time_to_live(holder, lg.id, 0, 5000, &t, &e), 0, "%s", e.message);
    int64_t ttl = t.ttl;
    kvc_lease_ttl_result_free(&t);
    fprintf(stderr, "client_failover: after the failover: lease lost %d, TTL %lld, Lock %d\n", lost,
            (long long)ttl, atomic_load(&lock_rc));
    cr_assert_eq(lost, 0, "the lease was lost while a Lock held the connection being left");
    cr_assert_gt(ttl, 0, "the lease expired");
    cr_assert_eq(atomic_load(&lock_rc), -1, "the waiting Lock should have ended UNAVAILABLE");
    kvc_keepalive_stop(ka);
    kvc_close(c);
    kvc_close(holder);
}
