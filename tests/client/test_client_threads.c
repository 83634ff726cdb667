/*
 * test_client_threads.c - lesson 14: 50 threads share one client, each does 1,000 puts (300
 * under the sanitizers).
 * All succeed, and the process holds exactly one TCP connection to the server throughout
 * (sampled from /proc/net/tcp while the threads run). Also: the bounded request queue
 * refuses work with RESOURCE_EXHAUSTED instead of blocking.
 */
#include "testutil.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#define NTHREADS 50
#if defined(__SANITIZE_ADDRESS__)
/* The lesson is about connections, not throughput: under ASan+UBSan on a loaded 2-core CI
 * machine 50,000 puts took more than the 170 s bound; 15,000 still keep all 50 threads on the
 * one connection for the whole run. */
#define NPUTS 300
#else
#define NPUTS 1000
#endif

static struct kvt_server srv;

static void setup(void)
{
    cr_assert_eq(kvt_server_start(&srv), 0, "server start");
}

static void teardown(void)
{
    kvt_server_stop(&srv);
}

TestSuite(client_threads, .init = setup, .fini = teardown, .timeout = 170);

struct worker {
    kvc_client *c;
    int idx;
    int ok;
    int first_rc;
    char first_err[256];
};

static atomic_int running;

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    char key[32], val[32];
    for (int i = 0; i < NPUTS; i++) {
        snprintf(key, sizeof key, "t/%02d/%04d", w->idx, i);
        snprintf(val, sizeof val, "v%d", i);
        kvc_error e;
        int rc = kvc_put(w->c, key, strlen(key), val, strlen(val), NULL, 10000, NULL, &e);
        if (rc == 0) {
            w->ok++;
        } else if (!w->first_rc) {
            w->first_rc = rc;
            snprintf(w->first_err, sizeof w->first_err, "%s", e.message);
        }
    }
    atomic_fetch_sub(&running, 1);
    return NULL;
}

Test(client_threads, fifty_threads_one_connection)
{
    kvc_client *c = kvt_client(srv.endpoint);
    /* Connect first so that the baseline includes our connection. */
    cr_assert_eq(kvc_get(c, "warmup", 6, NULL, 5000, NULL, NULL), 0);
    cr_assert_eq(kvt_count_established(srv.client_port), 1);

    static struct worker w[NTHREADS];
    pthread_t th[NTHREADS];
    atomic_store(&running, NTHREADS);
    for (int i = 0; i < NTHREADS; i++) {
        w[i] = (struct worker){.c = c, .idx = i};
        cr_assert_eq(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
    }
    int max_conns = 0, min_conns = 1 << 30, samples = 0;
    double srv_max = -1;
    while (atomic_load(&running) > 0) {
        /* kvd reports its open client connections; etcd has no such metric. */
        double open = kvt_metric(&srv, "kvd_grpc_connections_open", NULL);
        if (open > srv_max)
            srv_max = open;
        int n = kvt_count_established(srv.client_port);
        if (n > max_conns)
            max_conns = n;
        if (n < min_conns)
            min_conns = n;
        samples++;
        kvt_sleep_ms(20);
    }
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(th[i], NULL);
    int total = 0;
    for (int i = 0; i < NTHREADS; i++) {
        cr_expect_eq(w[i].ok, NPUTS, "thread %d: %d ok, first error %d %s", i, w[i].ok,
                     w[i].first_rc, w[i].first_err);
        total += w[i].ok;
    }
    cr_assert_eq(total, NTHREADS * NPUTS);
    cr_log_info("connections to the server during the run: min %d max %d (%d samples)", min_conns,
                max_conns, samples);
    kvc_stats st;
    kvc_stats(c, &st);
    /* printed before the asserts, so that a failure says whether the client reconnected (CI
     * once saw 3 sockets in one sample, not reproduced in 13 runs, 5 of them under load) */
    cr_log_info("client: %llu connects, %llu reconnects, %llu calls failed",
                (unsigned long long)st.connects, (unsigned long long)st.reconnects,
                (unsigned long long)st.calls_failed);
    cr_assert_eq(max_conns, 1, "more than one connection: %d (client: %llu connects)", max_conns,
                 (unsigned long long)st.connects);
    if (srv_max >= 0) {
        cr_log_info("server-side open connections (max): %.0f", srv_max);
        cr_assert_eq(srv_max, 1);
    }
    cr_assert_eq(min_conns, 1);
    cr_assert_eq(st.connects, 1);
    cr_assert_eq(st.reconnects, 0);
    cr_assert_eq(st.calls_failed, 0);

    kvc_range_result r;
    kvc_range_opts o = {.prefix = 1, .count_only = 1};
    cr_assert_eq(kvc_get(c, "t/", 2, &o, 5000, &r, NULL), 0);
    cr_assert_eq(r.count, NTHREADS * NPUTS);
    kvc_range_result_free(&r);
    kvc_close(c);
    kvt_sleep_ms(100);
    cr_assert_eq(kvt_count_established(srv.client_port), 0);
}

static atomic_int cb_count;
static void count_cb(void *arg, int status, const kvc_error *err, uint8_t *resp, size_t len)
{
    (void)arg;
    (void)status;
    (void)err;
    (void)len;
    kvc_free(resp);
    atomic_fetch_add(&cb_count, 1);
}

Test(client_threads, full_queue_fails_fast)
{
    /* A server that accepts and never answers keeps calls outstanding. */
    int port;
    struct kvt_fake *f = kvt_fake_start(KVT_FAKE_SILENT, &port);
    char ep[32];
    snprintf(ep, sizeof ep, "127.0.0.1:%d", port);
    const char *eps[] = {ep};
    kvc_config cfg;
    kvc_config_default(&cfg);
    cfg.endpoints = eps;
    cfg.n_endpoints = 1;
    cfg.max_pending = 4;
    cfg.dial_timeout_ms = 2000;
    kvc_client *c;
    cr_assert_eq(kvc_open(&c, &cfg, NULL), 0);
    atomic_store(&cb_count, 0);
    kvc_error e;
    for (int i = 0; i < 4; i++)
        cr_assert_eq(
            kvc_call_unary_async(c, "/etcdserverpb.KV/Range", NULL, 0, 1500, 0, count_cb, NULL, &e),
            0);
    uint64_t t0 = kvt_now_ms();
    uint8_t *resp;
    size_t len;
    int rc = kvc_call_unary(c, "/etcdserverpb.KV/Range", NULL, 0, &resp, &len, 1500, 0, &e);
    cr_assert_lt(kvt_now_ms() - t0, 100, "a full queue must not block");
    cr_assert_eq(rc, -KVC_RESOURCE_EXHAUSTED);
    cr_assert_str_eq(e.message, "kvclient: request queue full (4 pending)");
    kvc_stats st;
    kvc_stats(c, &st);
    cr_assert_eq(st.queue_full, 1);
    /* The outstanding calls end by their deadline (the server never answers). */
    for (int i = 0; i < 100 && atomic_load(&cb_count) < 4; i++)
        kvt_sleep_ms(50);
    cr_assert_eq(atomic_load(&cb_count), 4);
    kvc_close(c);
    kvt_fake_stop(f);
}
