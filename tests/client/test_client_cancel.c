/*
 * test_client_cancel: kvc_call_unary_start / kvc_call_cancel against a real server. A v3lock
 * Lock that waits behind a holder is cancelled: the RST_STREAM reaches the server, which
 * withdraws the waiter (its key under the lock's prefix disappears), the callback never runs,
 * and the next Lock acquires as soon as the holder unlocks. Also: cancel after completion
 * only releases the handle (returns 0), a handle outlives kvc_close, and a call still waiting
 * for a connection is dropped (never sent, no callback).
 */
#include "testutil.h"

#include "v3lock.pb-c.h"

#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
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

static int64_t grant(kvc_client *c)
{
    kvc_lease_grant_result g;
    kvc_error e;
    cr_assert_eq(kvc_lease_grant(c, 60, 0, 0, 5000, &g, &e), 0, "%s", e.message);
    return g.id;
}

static int64_t keys_under(kvc_client *c, const char *prefix)
{
    kvc_range_opts o = {.prefix = 1, .count_only = 1};
    kvc_range_result r;
    kvc_error e;
    cr_assert_eq(kvc_get(c, prefix, strlen(prefix), &o, 5000, &r, &e), 0, "%s", e.message);
    int64_t n = r.count;
    kvc_range_result_free(&r);
    return n;
}

/* Polls up to ms until keys_under(prefix) == want; returns the last count. */
static int64_t wait_keys(kvc_client *c, const char *prefix, int64_t want, unsigned ms)
{
    uint64_t end = kvt_now_ms() + ms;
    int64_t n;
    while ((n = keys_under(c, prefix)) != want && kvt_now_ms() < end)
        kvt_sleep_ms(50);
    return n;
}

/* Synchronous Lock; returns the gRPC status and the held key in key[cap]. */
static int lock(kvc_client *c, const char *name, int64_t lease, uint32_t ms, char *key, size_t cap)
{
    size_t n, rn = 0;
    uint8_t *req = kvt_lock_req(name, lease, &n), *resp = NULL;
    kvc_error e;
    int rc = kvc_call_unary(c, "/v3lockpb.Lock/Lock", req, n, &resp, &rn, ms, 0, &e);
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
static atomic_int g_status;

static void count_cb(void *arg, int status, const kvc_error *err, uint8_t *resp, size_t len)
{
    (void)arg;
    (void)err;
    (void)len;
    kvc_free(resp);
    atomic_store(&g_status, status);
    atomic_fetch_add(&g_calls, 1);
}

Test(client_cancel, waiting_lock_cancelled, .init = setup, .fini = teardown, .timeout = 60)
{
    kvc_client *c = kvt_client(srv.endpoint);
    int64_t la = grant(c), lb = grant(c), lc = grant(c);
    char ka[128], kc[128];
    cr_assert_eq(lock(c, "L", la, 5000, ka, sizeof ka), 0);

    atomic_store(&g_calls, 0);
    size_t n;
    uint8_t *req = kvt_lock_req("L", lb, &n);
    kvc_call *h = NULL;
    kvc_error e;
    cr_assert_eq(kvc_call_unary_start(c, "/v3lockpb.Lock/Lock", req, n, 30000, 0, NULL, count_cb,
                                      NULL, &h, &e),
                 0, "%s", e.message);
    free(req);
    cr_assert_not_null(h);
    cr_assert_eq(wait_keys(c, "L/", 2, 5000), 2, "B's waiter key never appeared");
    cr_assert_eq(kvc_call_cancel(h), 1, "the call was still waiting");
    /* the RST reached the server: it deleted B's waiter key */
    cr_assert_eq(wait_keys(c, "L/", 1, 3000), 1, "B's waiter key is still there");

    unlock(c, ka);
    uint64_t t0 = kvt_now_ms();
    cr_assert_eq(lock(c, "L", lc, 2000, kc, sizeof kc), 0, "C could not acquire L");
    cr_assert_lt(kvt_now_ms() - t0, 2000);
    kvt_sleep_ms(200);
    cr_assert_eq(atomic_load(&g_calls), 0, "callback ran after kvc_call_cancel");
    unlock(c, kc);
    kvc_close(c);
}

Test(client_cancel, after_completion_and_close, .init = setup, .fini = teardown, .timeout = 60)
{
    kvc_client *c = kvt_client(srv.endpoint);
    int64_t la = grant(c), lb = grant(c);
    size_t n;
    uint8_t *req = kvt_lock_req("M", la, &n);
    kvc_call *h = NULL;
    kvc_error e;
    /* finished call: the callback ran once; cancel only releases the handle */
    atomic_store(&g_calls, 0);
    cr_assert_eq(kvc_call_unary_start(c, "/v3lockpb.Lock/Lock", req, n, 5000, 0, NULL, count_cb,
                                      NULL, &h, &e),
                 0, "%s", e.message);
    uint64_t end = kvt_now_ms() + 5000;
    while (atomic_load(&g_calls) == 0 && kvt_now_ms() < end)
        kvt_sleep_ms(10);
    cr_assert_eq(atomic_load(&g_calls), 1);
    cr_assert_eq(atomic_load(&g_status), 0);
    cr_assert_eq(kvc_call_cancel(h), 0);
    cr_assert_eq(keys_under(c, "M/"), 1);
    /* a handle outlives kvc_close: close finishes the waiting call (callback CANCELLED) */
    free(req);
    req = kvt_lock_req("M", lb, &n);
    atomic_store(&g_calls, 0);
    cr_assert_eq(kvc_call_unary_start(c, "/v3lockpb.Lock/Lock", req, n, 30000, 0, NULL, count_cb,
                                      NULL, &h, &e),
                 0, "%s", e.message);
    free(req);
    cr_assert_eq(wait_keys(c, "M/", 2, 5000), 2, "the second Lock is not waiting");
    kvc_close(c);
    cr_assert_eq(atomic_load(&g_calls), 1);
    cr_assert_eq(atomic_load(&g_status), -KVC_CANCELLED);
    cr_assert_eq(kvc_call_cancel(h), 0);
    cr_assert_eq(kvc_call_cancel(NULL), 0);
    cr_assert_eq(kvt_leaks(), 0);
}

Test(client_cancel, dropped_before_send, .timeout = 30)
{
    char ep[32];
    snprintf(ep, sizeof ep, "127.0.0.1:%d", kvt_free_port()); /* nobody listens */
    kvc_client *c = kvt_client(ep);
    atomic_store(&g_calls, 0);
    kvc_call *h = NULL;
    kvc_error e;
    cr_assert_eq(kvc_call_unary_start(c, "/etcdserverpb.KV/Range", NULL, 0, 0, 0, NULL, count_cb,
                                      NULL, &h, &e),
                 0, "%s", e.message);
    kvt_sleep_ms(100);
    cr_assert_eq(kvc_call_cancel(h), 1, "the call was waiting for a connection");
    kvt_sleep_ms(3500); /* past the 3 s dial timeout that would have failed it */
    cr_assert_eq(atomic_load(&g_calls), 0, "callback ran after kvc_call_cancel");
    kvc_close(c);
    cr_assert_eq(atomic_load(&g_calls), 0);
}
