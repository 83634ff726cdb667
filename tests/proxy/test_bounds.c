/*
 * proxy_bounds: each bound of `kvd grpc-proxy start` holds under a flood, answers etcd's
 * RESOURCE_EXHAUSTED "etcdserver: too many requests" and counts kvd_proxy_refused_total:
 *   - --max-watch-streams=2: a third Watch stream is refused, the first two work;
 *   - --max-pending-renewals=8: 20 keepalive requests read in one loop turn: 8 wait for the
 *     leader and are answered, 12 streams are refused;
 *   - --max-pending-requests=4: 300 puts sent at once: every one either succeeds or is
 *     refused (some of each), nothing else; nothing stays pending;
 *   - --max-watchers=4: a stream creating 5 watchers gets 4 Created, then is ended; another
 *     stream's watcher then fits (the ended stream's watchers were released);
 *   - a slow watcher (a client that never opens its HTTP/2 window) does not hold up another
 *     watcher of the same keys: the other one gets all 200 events (8 KiB each) at once, and
 *     only the slow one's stream ends once its buffer (--max-send-buffer-bytes=256 KiB) is
 *     full.
 */
#include "px_util.h"

#include "grpc_raw.h"
#include "kvclient.h"

#include <criterion/criterion.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static kvt_cluster g_c;
static px g_x;

static void fini(void)
{
    px_stop(&g_x);
    kvt_cluster_destroy(&g_c);
}

static void setup(void)
{
    static const char *const flags[] = {
        "--max-watch-streams=2",          "--max-pending-renewals=8", "--max-pending-requests=4",
        "--max-send-buffer-bytes=262144", "--max-watchers=4",         NULL};
    cr_assert_eq(px_cluster_start(&g_c, 1), 0, "cluster");
    cr_assert_eq(px_start(&g_x, &g_c, NULL, 0, flags), 0, "proxy");
}

static double refused(const char *reason)
{
    char s[128];
    snprintf(s, sizeof s, "kvd_proxy_refused_total{reason=\"%s\"}", reason);
    return px_metric(&g_x, s);
}

Test(proxy_bounds, watch_streams_and_pending_renewals, .init = setup, .fini = fini, .timeout = 120)
{
    /* WatchRequest{create_request{key "w"}} */
    static const uint8_t create[] = {0x0a, 0x03, 0x0a, 0x01, 'w'};
    kv_it_grpc *h = NULL;
    cr_assert_eq(kv_it_grpc_open(&h, "127.0.0.1", g_x.port, 5000), 0);
    kv_it_grpc_stream *w[3];
    for (int i = 0; i < 3; i++) {
        w[i] = kv_it_grpc_stream_start(h, "/etcdserverpb.Watch/Watch", NULL);
        cr_assert_eq(kv_it_grpc_send_msg(w[i], create, sizeof create, 0), 0);
    }
    cr_assert_eq(kv_it_grpc_flush(h, 5000), 0);
    for (int i = 0; i < 2; i++) {
        uint8_t *m = NULL;
        size_t n = 0;
        cr_assert_eq(kv_it_grpc_stream_recv(w[i], &m, &n, 5000), 0, "watch %d created", i);
        free(m);
    }
    kv_it_grpc_wait(h, w[2], 5000);
    cr_assert_eq(w[2]->grpc_status, 8, "third watch stream: status %d", w[2]->grpc_status);
    cr_assert_str_eq(w[2]->grpc_message, "etcdserver: too many requests");
    cr_assert_eq(refused("watch_streams"), 1);
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_watch_streams"), 2);

    kvc_client *c = px_client(g_x.endpoint);
    kvc_lease_grant_result g;
    kvc_error e;
    cr_assert_eq(kvc_lease_grant(c, 60, 0, 0, 5000, &g, &e), 0, "%s", e.message);
    kvc_close(c);
    uint8_t req[16];
    size_t rl = 0;
    uint64_t v = (uint64_t)g.id;
    req[rl++] = 0x08;
    do {
        req[rl++] = (uint8_t)((v & 0x7f) | (v >> 7 ? 0x80 : 0));
        v >>= 7;
    } while (v);
    kv_it_grpc *k = NULL;
    cr_assert_eq(kv_it_grpc_open(&k, "127.0.0.1", g_x.port, 5000), 0);
    kv_it_grpc_stream *ks[20];
    for (int i = 0; i < 20; i++) {
        ks[i] = kv_it_grpc_stream_start(k, "/etcdserverpb.Lease/LeaseKeepAlive", NULL);
        cr_assert_eq(kv_it_grpc_send_msg(ks[i], req, rl, 0), 0);
    }
    cr_assert_eq(kv_it_grpc_flush(k, 5000), 0);
    int answered = 0, refusedn = 0;
    for (int i = 0; i < 20; i++) {
        uint8_t *m = NULL;
        size_t n = 0;
        int r = kv_it_grpc_stream_recv(ks[i], &m, &n, 5000);
        free(m);
        if (r == 0)
            answered++;
        else if (ks[i]->grpc_status == 8 &&
                 strcmp(ks[i]->grpc_message, "etcdserver: too many requests") == 0)
            refusedn++;
    }
    fprintf(stderr, "proxy_bounds: 20 renewals, bound 8: %d answered, %d refused\n", answered,
            refusedn);
    cr_assert_eq(answered, 8);
    cr_assert_eq(refusedn, 12);
    cr_assert_eq(refused("pending_renewals"), 12);
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_pending_renewals"), 0);
    kv_it_grpc_close(k);
    kv_it_grpc_close(h);
}

typedef struct flood {
    pthread_mutex_t mu;
    int done, ok, too_many, other;
    char other_msg[256];
} flood;

static void put_cb(void *arg, int status, const kvc_error *err, kvc_put_result *r)
{
    flood *f = arg;
    pthread_mutex_lock(&f->mu);
    f->done++;
    if (status == 0)
        f->ok++;
    else if (status == -KVC_RESOURCE_EXHAUSTED && err &&
             strcmp(err->message, "etcdserver: too many requests") == 0)
        f->too_many++;
    else {
        f->other++;
        snprintf(f->other_msg, sizeof f->other_msg, "%d %.200s", status, err ? err->message : "");
    }
    pthread_mutex_unlock(&f->mu);
    if (r)
        kvc_put_result_free(r);
}

Test(proxy_bounds, pending_requests_flood, .init = setup, .fini = fini, .timeout = 120)
{
    kvc_client *c = px_client(g_x.endpoint);
    static flood f;
    memset(&f, 0, sizeof f);
    pthread_mutex_init(&f.mu, NULL);
    kvc_error e;
    for (int i = 0; i < 300; i++) {
        char key[16];
        int kl = snprintf(key, sizeof key, "f%d", i);
        cr_assert_eq(kvc_put_async(c, key, (size_t)kl, "v", 1, NULL, 10000, put_cb, &f, &e), 0);
    }
    uint64_t end = kvt_now_ms() + 15000;
    for (;;) {
        pthread_mutex_lock(&f.mu);
        int d = f.done;
        pthread_mutex_unlock(&f.mu);
        if (d == 300 || kvt_now_ms() > end)
            break;
        kvt_sleep_ms(10);
    }
    fprintf(stderr, "proxy_bounds: 300 puts at once, bound 4: %d ok, %d too many, %d other\n", f.ok,
            f.too_many, f.other);
    cr_assert_eq(f.done, 300);
    cr_assert_eq(f.other, 0, "unexpected: %s", f.other_msg);
    cr_assert(f.ok >= 4 && f.too_many > 0, "ok %d refused %d", f.ok, f.too_many);
    cr_assert_eq(refused("pending_requests"), f.too_many);
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_unary_pending"), 0);
    kvc_close(c);
}

Test(proxy_bounds, max_watchers, .init = setup, .fini = fini, .timeout = 120)
{
    static const uint8_t create[] = {0x0a, 0x03, 0x0a, 0x01, 'w'};
    kv_it_grpc *h = NULL;
    cr_assert_eq(kv_it_grpc_open(&h, "127.0.0.1", g_x.port, 5000), 0);
    kv_it_grpc_stream *w = kv_it_grpc_stream_start(h, "/etcdserverpb.Watch/Watch", NULL);
    uint8_t *m = NULL;
    size_t n = 0;
    for (int i = 0; i < 4; i++) { /* one at a time, as clientv3 creates */
        cr_assert_eq(kv_it_grpc_send_msg(w, create, sizeof create, 0), 0);
        cr_assert_eq(kv_it_grpc_stream_recv(w, &m, &n, 5000), 0, "watcher %d created", i);
        free(m);
    }
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_watchers"), 4);
    cr_assert_eq(kv_it_grpc_send_msg(w, create, sizeof create, 0), 0);
    kv_it_grpc_wait(h, w, 5000);
    cr_assert_eq(w->grpc_status, 8, "status %d", w->grpc_status);
    cr_assert_str_eq(w->grpc_message, "etcdserver: too many requests");
    cr_assert_eq(refused("watchers"), 1);
    uint64_t end = kvt_now_ms() + 5000;
    while (px_metric(&g_x, "kvd_proxy_watchers") != 0 && kvt_now_ms() < end)
        kvt_sleep_ms(20);
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_watchers"), 0);
    kv_it_grpc_stream *w2 = kv_it_grpc_stream_start(h, "/etcdserverpb.Watch/Watch", NULL);
    cr_assert_eq(kv_it_grpc_send_msg(w2, create, sizeof create, 0), 0);
    cr_assert_eq(kv_it_grpc_stream_recv(w2, &m, &n, 5000), 0, "a watcher fits again");
    free(m);
    kv_it_grpc_close(h);
}

typedef struct wrec {
    pthread_mutex_t mu;
    int events;
} wrec;

static void watch_cb(void *arg, const kvc_watch_response *r)
{
    wrec *w = arg;
    pthread_mutex_lock(&w->mu);
    w->events += (int)r->n_events;
    pthread_mutex_unlock(&w->mu);
}

Test(proxy_bounds, a_slow_watcher_does_not_hold_up_the_others, .init = setup, .fini = fini,
     .timeout = 120)
{
    /* the slow one: a connection that never lets the proxy send DATA */
    kv_it_grpc_opts o = {.set_window = 1, .window = 0};
    kv_it_grpc *slow = NULL;
    cr_assert_eq(kv_it_grpc_open_opts(&slow, "127.0.0.1", g_x.port, 5000, &o), 0);
    /* WatchRequest{create_request{key "s", range_end "t"}} */
    static const uint8_t create[] = {0x0a, 0x06, 0x0a, 0x01, 's', 0x12, 0x01, 't'};
    kv_it_grpc_stream *ws = kv_it_grpc_stream_start(slow, "/etcdserverpb.Watch/Watch", NULL);
    cr_assert_eq(kv_it_grpc_send_msg(ws, create, sizeof create, 0), 0);
    cr_assert_eq(kv_it_grpc_flush(slow, 5000), 0);

    kvc_client *c = px_client(g_x.endpoint);
    static wrec w;
    memset(&w, 0, sizeof w);
    pthread_mutex_init(&w.mu, NULL);
    kvc_watch_opts wo = {.prefix = 1};
    kvc_watch *wt = NULL;
    kvc_error e;
    cr_assert_eq(kvc_watch_create(c, "s", 1, &wo, 5000, watch_cb, &w, &wt, NULL, &e), 0, "%s",
                 e.message);
    uint64_t end = kvt_now_ms() + 5000;
    while (px_metric(&g_x, "kvd_proxy_watch_streams") < 2 && kvt_now_ms() < end)
        kvt_sleep_ms(20);
    kvt_sleep_ms(200);

    kvc_client *direct = px_client(g_c.m[0].endpoint);
    static char val[8192];
    memset(val, 'x', sizeof val);
    uint64_t t0 = kvt_now_ms();
    for (int i = 0; i < 200; i++) {
        char key[16];
        int kl = snprintf(key, sizeof key, "s%03d", i);
        cr_assert_eq(kvc_put(direct, key, (size_t)kl, val, sizeof val, NULL, 5000, NULL, &e), 0,
                     "%s", e.message);
    }
    int got = 0;
    end = kvt_now_ms() + 10000;
    while (kvt_now_ms() < end) {
        pthread_mutex_lock(&w.mu);
        got = w.events;
        pthread_mutex_unlock(&w.mu);
        if (got >= 200)
            break;
        kvt_sleep_ms(10);
    }
    uint64_t took = kvt_now_ms() - t0;
    double slow_refused = refused("client_send_buffer");
    fprintf(stderr,
            "proxy_bounds: 200 events of 8 KiB: the reading watcher got %d in %llu ms; slow "
            "watcher refused %.0f\n",
            got, (unsigned long long)took, slow_refused);
    cr_assert_eq(got, 200, "the reading watcher got %d of 200 events", got);
    cr_assert_eq(slow_refused, 1, "only the slow watcher's stream ended");
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_watch_streams"), 1);
    kvc_watch_cancel(wt);
    kvc_close(direct);
    kvc_close(c);
    kv_it_grpc_close(slow);
}
