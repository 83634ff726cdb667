/*
 * proxy_cancel: a client's cancelled unary call cancels its upstream call (docs/proxy.md,
 * "Cancellation"). Through `kvd grpc-proxy start` in front of a 1-member kvd cluster: A
 * holds v3lock "L"; B's Lock on "L" waits through the proxy and B cancels it
 * (kvc_call_cancel: RST_STREAM CANCEL to the proxy). The proxy must reset its upstream call
 * so that the member withdraws B's waiter: B's key under "L/" disappears on the member, and
 * when A unlocks, C's Lock through the proxy acquires "L" at once. Without the propagation,
 * B's upstream Lock keeps waiting, acquires "L" for a client that has gone, and C waits
 * until B's lease (60 s here, no keepalive needed) expires.
 */
#include "px_util.h"

#include "v3lock.pb-c.h"

#include <kvclient.h>

#include <criterion/criterion.h>
#include <stdatomic.h>
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
    cr_assert_eq(px_cluster_start(&g_c, 1), 0, "cluster");
    cr_assert_eq(px_start(&g_x, &g_c, NULL, 0, NULL), 0, "proxy");
}

static uint8_t *lock_req(const char *name, int64_t lease, size_t *len)
{
    V3lockpb__LockRequest r = V3LOCKPB__LOCK_REQUEST__INIT;
    r.name.data = (uint8_t *)name;
    r.name.len = strlen(name);
    r.lease = lease;
    *len = v3lockpb__lock_request__get_packed_size(&r);
    uint8_t *b = malloc(*len ? *len : 1);
    cr_assert(b);
    v3lockpb__lock_request__pack(&r, b);
    return b;
}

static int64_t grant(kvc_client *c)
{
    kvc_lease_grant_result g;
    kvc_error e;
    cr_assert_eq(kvc_lease_grant(c, 60, 0, 0, 5000, &g, &e), 0, "%s", e.message);
    return g.id;
}

/* Keys under prefix on c's endpoint, polled up to ms until there are `want`. */
static int64_t wait_keys(kvc_client *c, const char *prefix, int64_t want, unsigned ms)
{
    uint64_t end = kvt_now_ms() + ms;
    for (;;) {
        kvc_range_opts o = {.prefix = 1, .count_only = 1};
        kvc_range_result r;
        kvc_error e;
        cr_assert_eq(kvc_get(c, prefix, strlen(prefix), &o, 5000, &r, &e), 0, "%s", e.message);
        int64_t n = r.count;
        kvc_range_result_free(&r);
        if (n == want || kvt_now_ms() >= end)
            return n;
        kvt_sleep_ms(50);
    }
}

/* Synchronous Lock through c: the gRPC status; the held key in key[cap]. */
static int lock(kvc_client *c, const char *name, int64_t lease, uint32_t ms, char *key, size_t cap,
                kvc_error *e)
{
    size_t n, rn = 0;
    uint8_t *req = lock_req(name, lease, &n), *resp = NULL;
    int rc = kvc_call_unary(c, "/v3lockpb.Lock/Lock", req, n, &resp, &rn, ms, 0, e);
    free(req);
    if (rc == 0) {
        V3lockpb__LockResponse *lr = v3lockpb__lock_response__unpack(NULL, rn, resp);
        cr_assert(lr && lr->key.len < cap);
        memcpy(key, lr->key.data, lr->key.len);
        key[lr->key.len] = '\0';
        v3lockpb__lock_response__free_unpacked(lr, NULL);
    }
    kvc_free(resp);
    return rc;
}

static void unlock(kvc_client *c, const char *key)
{
    V3lockpb__UnlockRequest r = V3LOCKPB__UNLOCK_REQUEST__INIT;
    r.key.data = (uint8_t *)key;
    r.key.len = strlen(key);
    uint8_t buf[256], *resp = NULL;
    size_t n = v3lockpb__unlock_request__pack(&r, buf), rn;
    kvc_error e;
    cr_assert_eq(kvc_call_unary(c, "/v3lockpb.Lock/Unlock", buf, n, &resp, &rn, 5000, 0, &e), 0,
                 "%s", e.message);
    kvc_free(resp);
}

static atomic_int g_calls;

static void b_done(void *arg, int status, const kvc_error *err, uint8_t *resp, size_t len)
{
    (void)arg;
    (void)status;
    (void)err;
    (void)len;
    kvc_free(resp);
    atomic_fetch_add(&g_calls, 1);
}

Test(proxy_cancel, cancelled_lock_waiter_is_withdrawn_upstream, .init = setup, .fini = fini,
     .timeout = 90)
{
    kvc_client *via = px_client(g_x.endpoint);      /* A, B and C, through the proxy */
    kvc_client *mem = px_client(g_c.m[0].endpoint); /* the member, directly */
    int64_t la = grant(mem), lb = grant(mem), lc = grant(mem);
    char ka[128], kc[128];
    kvc_error e;
    cr_assert_eq(lock(via, "L", la, 5000, ka, sizeof ka, &e), 0, "A: %s", e.message);

    size_t n;
    uint8_t *req = lock_req("L", lb, &n);
    kvc_call *h = NULL;
    cr_assert_eq(kvc_call_unary_start(via, "/v3lockpb.Lock/Lock", req, n, 60000, 0, NULL, b_done,
                                      NULL, &h, &e),
                 0, "%s", e.message);
    free(req);
    cr_assert_eq(wait_keys(mem, "L/", 2, 5000), 2, "B's waiter never reached the member");
    cr_assert_eq(kvc_call_cancel(h), 1, "B's call was not waiting any more");

    /* the cancel went up: the member withdrew B's waiter key (checked, then C's lock too) */
    int64_t left = wait_keys(mem, "L/", 1, 3000);
    cr_expect_eq(left, 1, "B's waiter key is still on the member (%lld keys under L/)",
                 (long long)left);

    unlock(via, ka);
    uint64_t t0 = kvt_now_ms();
    int rc = lock(via, "L", lc, 2500, kc, sizeof kc, &e);
    cr_assert_eq(rc, 0, "C could not acquire L within 2.5 s: %s", e.message);
    cr_assert_lt(kvt_now_ms() - t0, 2500);
    cr_assert_eq(wait_keys(mem, "L/", 1, 0), 1, "C's key alone");
    unlock(via, kc);
    cr_assert_eq(atomic_load(&g_calls), 0, "B's callback ran after kvc_call_cancel");
    /* every forwarded call was accounted for, including B's dropped one */
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_unary_pending"), 0);
    kvc_close(mem);
    kvc_close(via);
}

static atomic_int g_done;

static void count_done(void *arg, int status, const kvc_error *err, uint8_t *resp, size_t len)
{
    (void)arg;
    (void)status;
    (void)err;
    (void)len;
    kvc_free(resp);
    atomic_fetch_add(&g_done, 1);
}

/* Cancels racing completions: 400 Puts through the proxy, each cancelled by its client at
 * once, after a moment, or after its answer; the proxy accounts for every one (its completion
 * on the bridge or its cancel, never both: kvd_proxy_unary_pending back to 0) and still
 * answers. With an ASan kvd (KV_BUILD_DIR of a -DKV_SANITIZE=address build) a double free
 * would crash the proxy. */
Test(proxy_cancel, cancels_racing_completions, .init = setup, .fini = fini, .timeout = 90)
{
    kvc_client *via = px_client(g_x.endpoint);
    enum { N = 400 };
    static kvc_call *h[N];
    uint8_t req[64];
    atomic_store(&g_done, 0);
    int cancelled = 0;
    for (int i = 0; i < N; i++) {
        /* PutRequest {key "r<i>", value "v"} */
        char key[16];
        int kl = snprintf(key, sizeof key, "r%d", i);
        size_t n = 0;
        req[n++] = 0x0a;
        req[n++] = (uint8_t)kl;
        memcpy(req + n, key, (size_t)kl);
        n += (size_t)kl;
        req[n++] = 0x12;
        req[n++] = 1;
        req[n++] = 'v';
        kvc_error e;
        cr_assert_eq(kvc_call_unary_start(via, "/etcdserverpb.KV/Put", req, n, 10000, 0, NULL,
                                          count_done, NULL, &h[i], &e),
                     0, "%s", e.message);
        if (i % 4 == 0)
            cancelled += kvc_call_cancel(h[i]) == 1;
        else if (i % 4 == 1) {
            kvt_sleep_ms(i % 3);
            cancelled += kvc_call_cancel(h[i]) == 1;
        }
    }
    uint64_t end = kvt_now_ms() + 15000;
    while (atomic_load(&g_done) + cancelled < N && kvt_now_ms() < end)
        kvt_sleep_ms(20);
    cr_assert_eq(atomic_load(&g_done) + cancelled, N, "%d answered + %d cancelled",
                 atomic_load(&g_done), cancelled);
    cr_log_info("%d answered, %d cancelled", atomic_load(&g_done), cancelled);
    cr_assert_gt(cancelled, 0);
    for (int i = 0; i < N; i++)
        if (i % 4 >= 2)
            cr_assert_eq(kvc_call_cancel(h[i]), 0); /* answered: only frees the handle */
    double pending = -1;
    end = kvt_now_ms() + 5000;
    while ((pending = px_metric(&g_x, "kvd_proxy_unary_pending")) != 0 && kvt_now_ms() < end)
        kvt_sleep_ms(50);
    cr_assert_eq(pending, 0, "forwarded calls not accounted for");
    char k[128];
    kvc_error e;
    kvc_client *mem = px_client(g_c.m[0].endpoint);
    int64_t l = grant(mem);
    cr_assert_eq(lock(via, "after", l, 5000, k, sizeof k, &e), 0, "proxy answers: %s", e.message);
    kvc_close(mem);
    kvc_close(via);
}
