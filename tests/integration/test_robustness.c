/*
 * it_robustness: hostile or oversized input on the client port affects only the offending
 * request or connection. Proves: an oversized request (2 MiB value, default
 * --max-request-bytes 1.5 MiB) is refused with a clear error while the member keeps
 * serving; 1 MB of random bytes, and a truncated HTTP/2 frame, close that connection only
 * (an already-open connection keeps working) and the member's RSS does not grow over 20
 * rounds.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grpc_raw.h"
#include "harness.h"
#include "rpc.pb-c.h"

#define BIG_VALUE (2u * 1024u * 1024u)
#define MID_VALUE (1600u * 1024u)
#define ROUNDS 20
/* Allowed RSS growth over all rounds: generous for allocator noise, far below the
 * 20 MB that was sent. */
#define RSS_SLACK (4u * 1024u * 1024u)

static kv_it_server *srv;

static void setup(void)
{
    srv = calloc(1, sizeof(*srv));
    cr_assert(srv);
    kv_it_kind kind = kv_it_kind_from_env();
    int rc = kv_it_server_init(srv, kind, NULL);
    cr_assert_eq(rc, 0, "init %s (%s): %d", kv_it_kind_name(kind), srv->bin, rc);
    rc = kv_it_server_start(srv, 20000);
    cr_assert_eq(rc, 0, "start %s: %d", kv_it_kind_name(kind), rc);
}

static void teardown(void)
{
    if (srv) {
        kv_it_server_destroy(srv);
        free(srv);
        srv = NULL;
    }
}

TestSuite(robustness, .init = setup, .fini = teardown, .timeout = 300);

/* A put and a get of a fresh key succeed on conn (or a new connection if conn is NULL). */
static void assert_serving(kv_it_grpc *conn, const char *key)
{
    kv_it_grpc *own = NULL;
    if (!conn) {
        cr_assert_eq(kv_it_grpc_open(&own, "127.0.0.1", srv->client_port, 5000), 0,
                     "member no longer accepts connections");
        conn = own;
    }
    Etcdserverpb__PutRequest put = ETCDSERVERPB__PUT_REQUEST__INIT;
    put.key = (ProtobufCBinaryData){strlen(key), (uint8_t *)key};
    put.value = (ProtobufCBinaryData){5, (uint8_t *)"alive"};
    uint8_t buf[256], *resp = NULL;
    size_t len = etcdserverpb__put_request__pack(&put, buf), rl;
    int st;
    char msg[256];
    int rc = kv_it_grpc_call(conn, "/etcdserverpb.KV/Put", buf, len, &resp, &rl, 10000, &st, msg,
                             sizeof(msg));
    cr_assert_eq(rc, 0, "put %s after abuse: rc %d status %d %s", key, rc, st, msg);
    free(resp);
    Etcdserverpb__RangeRequest get = ETCDSERVERPB__RANGE_REQUEST__INIT;
    get.key = put.key;
    len = etcdserverpb__range_request__pack(&get, buf);
    rc = kv_it_grpc_call(conn, "/etcdserverpb.KV/Range", buf, len, &resp, &rl, 10000, &st, msg,
                         sizeof(msg));
    cr_assert_eq(rc, 0, "get %s after abuse: rc %d status %d %s", key, rc, st, msg);
    Etcdserverpb__RangeResponse *r = etcdserverpb__range_response__unpack(NULL, rl, resp);
    free(resp);
    cr_assert(r && r->n_kvs == 1 && r->kvs[0]->value.len == 5, "get %s: wrong answer", key);
    etcdserverpb__range_response__free_unpacked(r, NULL);
    kv_it_grpc_close(own);
}

static uint64_t rss(void)
{
    uint64_t b = 0;
    cr_assert_eq(kv_it_proc_rss(srv->pid, &b), 0);
    return b;
}

/* kvd only: sums metric `name` over the series whose labels contain label_substr (NULL: all)
 * from /metrics. Under etcd returns 0 (nothing to check). */
static int kvd_metric_l(const char *name, const char *label_substr, double *v)
{
    if (srv->kind != KV_IT_KVD)
        return 0;
    int status = 0;
    char *body = NULL;
    int rc = kv_it_http_get(srv->metrics_port, "/metrics", 5000, &status, &body);
    cr_assert_eq(rc, 0, "GET /metrics: %d", rc);
    cr_assert_eq(status, 200, "GET /metrics: HTTP %d", status);
    rc = kv_it_metric_sum(body, name, label_substr, v, NULL);
    cr_assert_eq(rc, 0, "metric %s{%s} not found in /metrics:\n%.2000s", name,
                 label_substr ? label_substr : "", body);
    free(body);
    return 1;
}

static int kvd_metric(const char *name, double *v)
{
    return kvd_metric_l(name, NULL, v);
}

/* kvd only: waits up to 3 s for a gauge to come back to at most want. */
static void expect_gauge_back(const char *series, double want)
{
    double v = 0;
    uint64_t deadline = kv_it_now_ms() + 3000;
    do {
        if (!kvd_metric(series, &v))
            return;
        if (v <= want)
            return;
    } while (kv_it_now_ms() < deadline);
    cr_expect(v <= want, "%s is %.0f, expected it back to %.0f", series, v, want);
}

static int contains_ci(const char *hay, const char *needle)
{
    size_t n = strlen(needle);
    for (const char *p = hay; *p; p++)
        if (strncasecmp(p, needle, n) == 0)
            return 1;
    return 0;
}

Test(robustness, oversized_request_refused_member_keeps_serving)
{
    char etcdctl[PATH_MAX];
    cr_assert_eq(kv_it_etcdctl_bin(etcdctl, sizeof(etcdctl)), 0);
    char *big = malloc(BIG_VALUE + 1);
    cr_assert(big);
    memset(big, 'x', BIG_VALUE);
    big[BIG_VALUE] = 0;
    kv_it_grpc *held = NULL;
    cr_assert_eq(kv_it_grpc_open(&held, "127.0.0.1", srv->client_port, 5000), 0);

    /* etcdctl reads the value from stdin when it is not an argument. */
    kv_it_cmd_result r;
    cr_assert_eq(kv_it_ctl(srv, etcdctl, big, 30000, &r, "put", "big", NULL), 0);
    cr_log_info("etcdctl put 2 MiB: exit %d, stderr: %s", r.exit_code, r.err);
    cr_expect_neq(r.exit_code, 0, "a 2 MiB put was accepted");
    cr_expect(contains_ci(r.err, "larger than max") || contains_ci(r.err, "too large") ||
                  contains_ci(r.err, "resource exhausted") ||
                  contains_ci(r.err, "ResourceExhausted") || contains_ci(r.err, "limit"),
              "error does not mention the limit: %s", r.err);
    kv_it_cmd_result_free(&r);

    /* 1.6 MiB: below etcdctl's own 2 MiB send limit, so the server has to refuse it. */
    big[MID_VALUE] = 0;
    cr_assert_eq(kv_it_ctl(srv, etcdctl, big, 30000, &r, "put", "mid", NULL), 0);
    cr_log_info("etcdctl put 1.6 MiB: exit %d, stderr: %s", r.exit_code, r.err);
    cr_expect_neq(r.exit_code, 0, "a 1.6 MiB put was accepted (limit 1.5 MiB)");
    cr_expect(contains_ci(r.err, "larger than max") || contains_ci(r.err, "too large") ||
                  contains_ci(r.err, "resource exhausted") ||
                  contains_ci(r.err, "ResourceExhausted") || contains_ci(r.err, "limit"),
              "error does not mention the limit: %s", r.err);
    kv_it_cmd_result_free(&r);
    big[MID_VALUE] = 'x';

    /* The same over raw gRPC: RESOURCE_EXHAUSTED (8); repeated, RSS stays flat. */
    Etcdserverpb__PutRequest put = ETCDSERVERPB__PUT_REQUEST__INIT;
    put.key = (ProtobufCBinaryData){3, (uint8_t *)"big"};
    put.value = (ProtobufCBinaryData){BIG_VALUE, (uint8_t *)big};
    size_t len = etcdserverpb__put_request__get_packed_size(&put);
    uint8_t *buf = malloc(len);
    cr_assert(buf);
    etcdserverpb__put_request__pack(&put, buf);
    double refused0 = 0, refused1 = 0;
    static const char refused_name[] = "kvd_grpc_requests_refused_total";
    static const char refused_label[] = "reason=\"oversized\"";
    int have_metrics = kvd_metric_l(refused_name, refused_label, &refused0);
    uint64_t base = 0;
    for (int i = 0; i < ROUNDS; i++) {
        if (i == 2)
            base = rss();
        kv_it_grpc *c = NULL;
        cr_assert_eq(kv_it_grpc_open(&c, "127.0.0.1", srv->client_port, 5000), 0);
        uint8_t *resp = NULL;
        size_t rl;
        int st = -1;
        char msg[256];
        int rc = kv_it_grpc_call(c, "/etcdserverpb.KV/Put", buf, len, &resp, &rl, 10000, &st, msg,
                                 sizeof(msg));
        free(resp);
        kv_it_grpc_close(c);
        /* The server may also reset the stream/connection; either way it is refused. */
        cr_expect(rc != 0, "round %d: oversized put accepted", i);
        if (rc == KV_IT_GRPC_STATUS)
            cr_expect_eq(st, 8, "round %d: grpc-status %d (%s), want 8 RESOURCE_EXHAUSTED", i, st,
                         msg);
        if (i == 0)
            cr_log_info("raw oversized put: rc %d status %d message %s", rc, st, msg);
    }
    uint64_t after = rss();
    cr_log_info("%s RSS after %d oversized requests: %llu -> %llu KiB", kv_it_kind_name(srv->kind),
                ROUNDS, (unsigned long long)base / 1024, (unsigned long long)after / 1024);
    cr_expect(after < base + RSS_SLACK + 2 * BIG_VALUE, "RSS grew from %llu to %llu",
              (unsigned long long)base, (unsigned long long)after);
    free(buf);
    free(big);
    if (have_metrics) {
        kvd_metric_l(refused_name, refused_label, &refused1);
        cr_expect(refused1 - refused0 >= ROUNDS, "%s{%s} went from %.0f to %.0f after %d refusals",
                  refused_name, refused_label, refused0, refused1, ROUNDS);
    } else {
        cr_log_info("etcd: kvd metrics not checked");
    }

    /* The member keeps serving, on a fresh connection and on the one held open. */
    assert_serving(NULL, "after-oversize");
    assert_serving(held, "after-oversize-held");
    kv_it_grpc_close(held);
    cr_assert_eq(kv_it_ctl(srv, etcdctl, NULL, 20000, &r, "get", "big", NULL), 0);
    cr_expect_eq(r.exit_code, 0);
    cr_expect_str_eq(r.out, "", "the oversized key was stored");
    kv_it_cmd_result_free(&r);
    cr_assert_eq(kv_it_ctl(srv, etcdctl, NULL, 20000, &r, "get", "mid", NULL), 0);
    cr_expect_eq(r.exit_code, 0);
    cr_expect_str_eq(r.out, "", "the 1.6 MiB key was stored");
    kv_it_cmd_result_free(&r);
}

/* Sends payload ROUNDS times on fresh connections; each must be closed by the server. */
static void abuse(const uint8_t *payload, size_t len, const char *what)
{
    kv_it_grpc *held = NULL;
    cr_assert_eq(kv_it_grpc_open(&held, "127.0.0.1", srv->client_port, 5000), 0);
    assert_serving(held, "before");
    double open0 = 0;
    if (!kvd_metric("kvd_grpc_connections_open", &open0))
        cr_log_info("etcd: kvd metrics not checked");
    uint64_t base = 0;
    for (int i = 0; i < ROUNDS; i++) {
        if (i == 2)
            base = rss();
        int rc = kv_it_send_raw(srv->client_port, payload, len, 10000);
        cr_expect_eq(rc, 0, "%s round %d: server did not close the connection (%d)", what, i, rc);
        cr_assert(kv_it_server_alive(srv), "%s round %d: server died", what, i);
    }
    uint64_t after = rss();
    cr_log_info("%s RSS after %d rounds of %s: %llu -> %llu KiB", kv_it_kind_name(srv->kind),
                ROUNDS, what, (unsigned long long)base / 1024, (unsigned long long)after / 1024);
    cr_expect(after < base + RSS_SLACK, "%s: RSS grew from %llu to %llu KiB", what,
              (unsigned long long)base / 1024, (unsigned long long)after / 1024);
    /* Only the abusive connections were closed: the held one is still counted. */
    expect_gauge_back("kvd_grpc_connections_open", open0);
    expect_gauge_back("kvd_grpc_conn_buffered_bytes_total", 1024 * 1024);
    assert_serving(NULL, "after-fresh");
    assert_serving(held, "after-held");
    kv_it_grpc_close(held);
}

Test(robustness, random_megabyte_closes_only_that_connection)
{
    size_t len = 1024u * 1024u;
    uint8_t *junk = malloc(len);
    cr_assert(junk);
    cr_assert_eq(kv_it_random_bytes(junk, len), 0);
    abuse(junk, len, "1 MB random bytes");
    free(junk);
}

Test(robustness, truncated_http2_frame_closes_only_that_connection)
{
    uint8_t msg[256];
    size_t n = 0;
    static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    memcpy(msg, preface, sizeof(preface) - 1);
    n += sizeof(preface) - 1;
    /* empty SETTINGS frame */
    static const uint8_t settings[9] = {0, 0, 0, 4, 0, 0, 0, 0, 0};
    memcpy(msg + n, settings, 9);
    n += 9;
    /* HEADERS frame announcing 100 bytes of payload on stream 1, END_HEADERS, followed by
     * only 50 of them. */
    static const uint8_t headers[9] = {0, 0, 100, 1, 4, 0, 0, 0, 1};
    memcpy(msg + n, headers, 9);
    n += 9;
    memset(msg + n, 0x82, 50); /* indexed ":method: GET", repeated */
    n += 50;
    abuse(msg, n, "truncated HEADERS frame");
}
