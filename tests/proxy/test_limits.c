/*
 * proxy_limits: etcd's message limits of `grpc-proxy start` and the per-connection stream
 * limit (docs/proxy.md, "Message sizes"). One member, a proxy with --max-send-bytes=1000
 * --max-recv-bytes=3000 --max-concurrent-streams=4 --debug:
 *   - a Put of 2,000 bytes through the proxy is refused before it goes up: RESOURCE_EXHAUSTED
 *     "trying to send message larger than max (N vs. 1000)", N its size (etcd's proxy answers
 *     exactly that); the key is not written; a small Put works;
 *   - a Range whose answer is over 3,000 bytes: RESOURCE_EXHAUSTED "grpc: received message
 *     larger than max (N vs. 3000)"; a small Range works;
 *   - (kvd) a watch create over --max-send-bytes is answered created and canceled with the
 *     send text; its stream stays open and a watcher on another stream is not disturbed;
 *   - (kvd) a Watch whose upstream message is over the limit ends with that status: etcd
 *     3.4's proxy retries its upstream stream for ever and the watcher hears nothing;
 *   - (kvd) SETTINGS_MAX_CONCURRENT_STREAMS = 4 on a client connection (etcd 3.4 applies its
 *     flag to the HTTP/1 listener only);
 *   - (kvd) --debug logs each forwarded call; kvd_proxy_message_too_large_total counts.
 * Answers only, with deadlines of 5 s: not serial.
 */
#include "px_util.h"

#include "grpc_raw.h"
#include "kvt_grpc.h"
#include "rpc.pb-c.h"

#include <criterion/criterion.h>

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
    static const char *const flags[] = {"--max-send-bytes=1000", "--max-recv-bytes=3000",
                                        "--max-concurrent-streams=4", "--debug", NULL};
    cr_assert_eq(px_cluster_start(&g_c, 1), 0, "cluster");
    cr_assert_eq(px_start(&g_x, &g_c, NULL, 0, flags), 0, "proxy");
}

/* Does the proxy's log have a line containing s? */
static int log_has(const char *s)
{
    FILE *f = fopen(g_x.log, "r");
    if (!f)
        return 0;
    char line[1024];
    int found = 0;
    while (!found && fgets(line, sizeof line, f))
        found = strstr(line, s) != NULL;
    fclose(f);
    return found;
}

static int is_kvd(void)
{
    return kvt_target_from_env() == KV_TEST_SERVER_KVD;
}

/* One unary call of m to the proxy: the grpc-status (0 OK) and message. */
static int call(const char *method, const ProtobufCMessage *m, char *msg, size_t cap)
{
    kv_it_grpc *h = NULL;
    cr_assert_eq(kv_it_grpc_open(&h, "127.0.0.1", g_x.port, 5000), 0);
    int st = kvt_grpc_unary_msg(h, method, m, 5000, msg, cap);
    kv_it_grpc_close(h);
    cr_assert_geq(st, 0, "%s: transport %d", method, st);
    return st;
}

/* A Put of key k with n bytes of 'v' through the proxy; *len: the request's size. */
static int put(const char *k, size_t n, size_t *len, char *msg, size_t cap)
{
    char *v = malloc(n + 1);
    cr_assert_not_null(v);
    memset(v, 'v', n);
    Etcdserverpb__PutRequest req = ETCDSERVERPB__PUT_REQUEST__INIT;
    req.key.data = (uint8_t *)k;
    req.key.len = strlen(k);
    req.value.data = (uint8_t *)v;
    req.value.len = n;
    *len = etcdserverpb__put_request__get_packed_size(&req);
    int st = call("/etcdserverpb.KV/Put", &req.base, msg, cap);
    free(v);
    return st;
}

static int range(const char *k, char *msg, size_t cap)
{
    Etcdserverpb__RangeRequest req = ETCDSERVERPB__RANGE_REQUEST__INIT;
    req.key.data = (uint8_t *)k;
    req.key.len = strlen(k);
    return call("/etcdserverpb.KV/Range", &req.base, msg, cap);
}

Test(proxy_limits, a_request_over_max_send_bytes_is_refused, .init = setup, .fini = fini,
     .timeout = 120)
{
    char msg[256], want[128];
    size_t len;
    int st = put("big", 2000, &len, msg, sizeof msg);
    snprintf(want, sizeof want, "trying to send message larger than max (%zu vs. 1000)", len);
    cr_assert_eq(st, 8, "status %d: %s", st, msg);
    cr_assert_str_eq(msg, want);
    char err[256], val[16];
    int found = -1;
    cr_assert_eq(kvt_get(&g_c, 0, "big", 0, 5000, val, sizeof val, &found, NULL, err, sizeof err),
                 0, "get: %s", err);
    cr_assert_eq(found, 0, "the refused put was written");

    st = put("small", 100, &len, msg, sizeof msg);
    cr_assert_eq(st, 0, "small put: %d %s", st, msg);
    if (is_kvd()) {
        cr_assert_eq(px_metric(&g_x, "kvd_proxy_message_too_large_total{direction=\"send\"}"), 1);
        cr_assert(log_has("kvd grpc-proxy: debug: unary /etcdserverpb.KV/Put: OK"),
                  "--debug logged no forwarded Put (%s)", g_x.log);
    }
}

Test(proxy_limits, an_answer_over_max_recv_bytes_is_refused, .init = setup, .fini = fini,
     .timeout = 120)
{
    char err[256], msg[256];
    static char val[5001];
    memset(val, 'b', sizeof val - 1);
    cr_assert_eq(kvt_put(&g_c, 0, "wide", val, 5000, NULL, err, sizeof err), 0, "%s", err);
    cr_assert_eq(kvt_put(&g_c, 0, "narrow", "n", 5000, NULL, err, sizeof err), 0, "%s", err);
    int st = range("wide", msg, sizeof msg);
    cr_assert_eq(st, 8, "status %d: %s", st, msg);
    const char *pfx = "grpc: received message larger than max (";
    cr_assert(strncmp(msg, pfx, strlen(pfx)) == 0 && strstr(msg, " vs. 3000)"), "%s", msg);
    size_t n = strtoul(msg + strlen(pfx), NULL, 10);
    cr_assert(n > 5000 && n < 5200, "answer of %zu bytes", n);
    st = range("narrow", msg, sizeof msg);
    cr_assert_eq(st, 0, "small range: %d %s", st, msg);
    if (!is_kvd())
        return; /* etcd 3.4's proxy: its watcher below would wait for ever */
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_message_too_large_total{direction=\"recv\"}"), 1);

    /* WatchRequest{create_request{key "wide", start_revision 1}} */
    static const uint8_t create[] = {0x0a, 0x08, 0x0a, 0x04, 'w', 'i', 'd', 'e', 0x18, 0x01};
    kv_it_grpc *h = NULL;
    cr_assert_eq(kv_it_grpc_open(&h, "127.0.0.1", g_x.port, 5000), 0);
    kv_it_grpc_stream *w = kv_it_grpc_stream_start(h, "/etcdserverpb.Watch/Watch", NULL);
    cr_assert_not_null(w);
    cr_assert_eq(kv_it_grpc_send_msg(w, create, sizeof create, 0), 0);
    kv_it_grpc_wait(h, w, 5000);
    cr_assert_eq(w->grpc_status, 8, "watch: status %d %s", w->grpc_status, w->grpc_message);
    cr_assert(strncmp(w->grpc_message, pfx, strlen(pfx)) == 0, "%s", w->grpc_message);
    kv_it_grpc_close(h);
}

Test(proxy_limits, max_concurrent_streams_is_advertised, .init = setup, .fini = fini,
     .timeout = 120)
{
    if (!is_kvd())
        cr_skip_test("etcd 3.4's proxy applies --max-concurrent-streams to HTTP/1 only");
    kv_it_grpc *h = NULL;
    cr_assert_eq(kv_it_grpc_open(&h, "127.0.0.1", g_x.port, 5000), 0);
    uint8_t *resp = NULL;
    size_t rl = 0;
    int st = -1;
    char msg[128];
    /* one call: the server's SETTINGS have arrived once it is answered */
    cr_assert_eq(kv_it_grpc_call(h, "/etcdserverpb.Maintenance/Status", NULL, 0, &resp, &rl, 5000,
                                 &st, msg, sizeof msg),
                 0, "%s", msg);
    free(resp);
    uint32_t v = nghttp2_session_get_remote_settings(kv_it_grpc_session(h),
                                                     NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS);
    cr_assert_eq(v, 4, "SETTINGS_MAX_CONCURRENT_STREAMS %u", v);
    kv_it_grpc_close(h);
}

/* The WatchResponses on st so far, unpacked into out (at most cap); their number. */
static size_t watch_resps(kv_it_grpc_stream *st, Etcdserverpb__WatchResponse **out, size_t cap)
{
    size_t n = 0;
    const uint8_t *m;
    size_t len;
    while (n < cap && kv_it_grpc_stream_msgs(st, n, &m, &len) > n) {
        out[n] = etcdserverpb__watch_response__unpack(NULL, len, m);
        cr_assert_not_null(out[n]);
        n++;
    }
    return n;
}

/* (kvd) A watch create whose upstream message would be over --max-send-bytes is refused by
 * the proxy with etcd's text (created and canceled, the stream stays open), as a unary
 * request is: sent up, a member over its own limit would end the shared upstream stream and
 * every watcher on it with it. A watcher on another client stream is not disturbed. */
Test(proxy_limits, a_watch_create_over_max_send_bytes_is_refused, .init = setup, .fini = fini,
     .timeout = 120)
{
    if (!is_kvd())
        return; /* etcd 3.4's proxy sends it up */
    kv_it_grpc *h = NULL;
    cr_assert_eq(kv_it_grpc_open(&h, "127.0.0.1", g_x.port, 5000), 0);
    /* WatchRequest{create_request{key "narrow"}} */
    static const uint8_t small[] = {0x0a, 0x08, 0x0a, 0x06, 'n', 'a', 'r', 'r', 'o', 'w'};
    kv_it_grpc_stream *a = kv_it_grpc_stream_start(h, "/etcdserverpb.Watch/Watch", NULL);
    cr_assert_eq(kv_it_grpc_send_msg(a, small, sizeof small, 0), 0);
    cr_assert(kv_it_grpc_wait_bytes(h, a, 1, 5000), "no Created for the small watcher");

    static char key[2001];
    memset(key, 'k', sizeof key - 1);
    Etcdserverpb__WatchCreateRequest c = ETCDSERVERPB__WATCH_CREATE_REQUEST__INIT;
    c.key.data = (uint8_t *)key;
    c.key.len = sizeof key - 1;
    Etcdserverpb__WatchRequest r = ETCDSERVERPB__WATCH_REQUEST__INIT;
    r.request_union_case = ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_CREATE_REQUEST;
    r.create_request = &c;
    uint8_t buf[2100];
    size_t n = etcdserverpb__watch_request__pack(&r, buf);
    kv_it_grpc_stream *b = kv_it_grpc_stream_start(h, "/etcdserverpb.Watch/Watch", NULL);
    cr_assert_eq(kv_it_grpc_send_msg(b, buf, n, 0), 0);
    cr_assert(kv_it_grpc_wait_bytes(h, b, 1, 5000), "no answer to the large create");
    Etcdserverpb__WatchResponse *resp[4];
    size_t got = watch_resps(b, resp, 4);
    cr_assert_eq(got, 1);
    const char *pfx = "trying to send message larger than max (";
    cr_assert(resp[0]->created && resp[0]->canceled && resp[0]->cancel_reason &&
                  strncmp(resp[0]->cancel_reason, pfx, strlen(pfx)) == 0 &&
                  strstr(resp[0]->cancel_reason, " vs. 1000)"),
              "created %d canceled %d reason '%s'", resp[0]->created, resp[0]->canceled,
              resp[0]->cancel_reason ? resp[0]->cancel_reason : "");
    etcdserverpb__watch_response__free_unpacked(resp[0], NULL);
    cr_assert(!b->closed, "the client stream was ended");
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_message_too_large_total{direction=\"send\"}"), 1);

    char err[256];
    cr_assert_eq(kvt_put(&g_c, 0, "narrow", "x", 5000, NULL, err, sizeof err), 0, "%s", err);
    uint64_t end = kvt_now_ms() + 5000;
    size_t events = 0;
    while (events == 0 && kvt_now_ms() < end) {
        kv_it_grpc_pump(h, 50);
        got = watch_resps(a, resp, 4);
        for (size_t i = 0; i < got; i++) {
            events += resp[i]->n_events;
            etcdserverpb__watch_response__free_unpacked(resp[i], NULL);
        }
    }
    cr_assert_eq(events, 1, "the other watcher missed the put");
    kv_it_grpc_close(h);
}
