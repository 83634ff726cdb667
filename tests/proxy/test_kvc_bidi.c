/*
 * proxy_kvc_bidi: libkvclient's raw streams (kvc_bidi_*, client/include/kvclient.h), which
 * kvd grpc-proxy relays LeaseKeepAlive and Watch with, against one kvd member:
 *   - a LeaseKeepAlive stream carries raw requests and answers (id and TTL of a real lease),
 *     several messages on one stream, sent before and after the stream is on the wire;
 *   - a message over max_send_bytes is refused with RESOURCE_EXHAUSTED, nothing queued;
 *   - the member's kill -9 ends the stream once with UNAVAILABLE, and a send afterwards
 *     fails with UNAVAILABLE "kvclient: stream ended";
 *   - kvc_bidi_free from inside on_msg is safe (no callback after it).
 */
#include "px_util.h"

#include "kvclient.h"

#include <criterion/criterion.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static kvt_cluster g_c;

static void fini(void)
{
    kvt_cluster_destroy(&g_c);
}

typedef struct rec {
    pthread_mutex_t mu;
    int64_t ids[64];
    int64_t ttls[64];
    int n;
    int ended, end_status, end_code;
    char end_msg[256];
    kvc_bidi *free_in_cb; /* free this stream from on_msg */
} rec;

/* LeaseKeepAliveResponse: header = 1 (bytes), ID = 2, TTL = 3 (varints). */

static void on_msg(void *arg, const uint8_t *m, size_t n)
{
    rec *r = arg;
    pthread_mutex_lock(&r->mu);
    if (r->n < 64) {
        (void)px_ka_resp(m, n, &r->ids[r->n], &r->ttls[r->n]);
        r->n++;
    }
    kvc_bidi *f = r->free_in_cb;
    r->free_in_cb = NULL;
    pthread_mutex_unlock(&r->mu);
    if (f)
        kvc_bidi_free(f);
}

static void on_end(void *arg, int status, const kvc_error *err)
{
    rec *r = arg;
    pthread_mutex_lock(&r->mu);
    r->ended++;
    r->end_status = status;
    r->end_code = err ? err->code : 0;
    snprintf(r->end_msg, sizeof r->end_msg, "%s", err ? err->message : "");
    pthread_mutex_unlock(&r->mu);
}

static int wait_n(rec *r, int n, uint32_t ms)
{
    uint64_t end = kvt_now_ms() + ms;
    for (;;) {
        pthread_mutex_lock(&r->mu);
        int got = r->n;
        pthread_mutex_unlock(&r->mu);
        if (got >= n || kvt_now_ms() > end)
            return got;
        kvt_sleep_ms(5);
    }
}

static size_t pack_req(uint8_t *b, int64_t id)
{
    size_t n = 0;
    uint64_t v = (uint64_t)id;
    b[n++] = 0x08;
    do {
        b[n++] = (uint8_t)((v & 0x7f) | (v >> 7 ? 0x80 : 0));
        v >>= 7;
    } while (v);
    return n;
}

Test(proxy_kvc_bidi, raw_keepalive_stream_bounds_and_end, .fini = fini, .timeout = 120)
{
    cr_assert_eq(px_cluster_start(&g_c, 1), 0);
    kvc_client *c = px_client(g_c.m[0].endpoint);
    kvc_lease_grant_result g;
    kvc_error e;
    cr_assert_eq(kvc_lease_grant(c, 30, 0, 0, 5000, &g, &e), 0, "grant: %s", e.message);

    static rec r;
    memset(&r, 0, sizeof r);
    pthread_mutex_init(&r.mu, NULL);
    kvc_bidi *b = NULL;
    cr_assert_eq(
        kvc_bidi_open(c, "/etcdserverpb.Lease/LeaseKeepAlive", 64, on_msg, on_end, &r, &b, &e), 0,
        "open: %s", e.message);
    uint8_t req[16];
    size_t rl = pack_req(req, g.id);
    /* sent at once: probably before the stream is on the wire */
    cr_assert_eq(kvc_bidi_send(b, req, rl, &e), 0, "send: %s", e.message);
    cr_assert_eq(wait_n(&r, 1, 5000), 1);
    cr_assert_eq(r.ids[0], g.id);
    cr_assert(r.ttls[0] > 0 && r.ttls[0] <= 30, "ttl %lld", (long long)r.ttls[0]);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(kvc_bidi_send(b, req, rl, &e), 0, "send %d: %s", i, e.message);
    cr_assert_eq(wait_n(&r, 4, 5000), 4, "4 answers on one stream");
    for (int i = 1; i < 4; i++)
        cr_assert_eq(r.ids[i], g.id);

    uint8_t big[128] = {0};
    cr_assert_eq(kvc_bidi_send(b, big, sizeof big, &e), -KVC_RESOURCE_EXHAUSTED,
                 "over max_send_bytes");
    cr_assert(strstr(e.message, "send buffer full"), "%s", e.message);

    /* kvc_bidi_free from on_msg of a second stream */
    static rec r2;
    memset(&r2, 0, sizeof r2);
    pthread_mutex_init(&r2.mu, NULL);
    kvc_bidi *b2 = NULL;
    cr_assert_eq(
        kvc_bidi_open(c, "/etcdserverpb.Lease/LeaseKeepAlive", 0, on_msg, on_end, &r2, &b2, &e), 0);
    pthread_mutex_lock(&r2.mu);
    r2.free_in_cb = b2;
    pthread_mutex_unlock(&r2.mu);
    cr_assert_eq(kvc_bidi_send(b2, req, rl, &e), 0);
    cr_assert_eq(wait_n(&r2, 1, 5000), 1);
    kvt_sleep_ms(100);
    cr_assert_eq(r2.ended, 0, "no end callback after kvc_bidi_free");

    /* the member dies: one end, UNAVAILABLE; sends fail afterwards */
    cr_assert_eq(kvt_member_kill9(&g_c, 0), 0);
    uint64_t end = kvt_now_ms() + 5000;
    while (!r.ended && kvt_now_ms() < end)
        kvt_sleep_ms(5);
    cr_assert_eq(r.ended, 1, "one end event");
    cr_assert_eq(r.end_status, -KVC_UNAVAILABLE, "status %d (%s)", r.end_status, r.end_msg);
    cr_assert_eq(r.end_code, KVC_UNAVAILABLE);
    cr_assert_eq(kvc_bidi_send(b, req, rl, &e), -KVC_UNAVAILABLE);
    cr_assert(strstr(e.message, "stream ended"), "%s", e.message);
    kvc_bidi_free(b);
    kvc_close(c);
    kvt_sleep_ms(50);
    cr_assert_eq(r.ended, 1);
}
