/* Live tests: a kv_grpc_server on a loop thread driven by tests/lib grpc_raw (the one HTTP/2
 * test client). */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "grpc_raw.h"
#include "test_support.h"

static void expect_clean_stop(harness *h)
{
    harness_stop(h);
    cr_assert_eq(h->loop_close_rv, 0, "all handles closed after server close");
    cr_assert_not_null(h->metrics_text);
    cr_assert(strstr(h->metrics_text, "kvd_grpc_connections_open 0\n"), "%s", h->metrics_text);
    cr_assert(strstr(h->metrics_text, "kvd_grpc_streams_open 0\n"), "%s", h->metrics_text);
}

static int has(const harness *h, const char *s)
{
    return strstr(h->metrics_text, s) != NULL;
}

/* h2c with nghttp2's default windows (64 KiB). */
static int connect_h2(kv_it_grpc **c, int port)
{
    return kv_it_grpc_open_opts(c, "127.0.0.1", (uint16_t)port, 5000, NULL);
}

/* Like connect_h2, advertising SETTINGS_INITIAL_WINDOW_SIZE = window (0: a reader that never
 * opens its stream windows, so the server can send no DATA). */
static int connect_h2_window(kv_it_grpc **c, int port, uint32_t window)
{
    kv_it_grpc_opts o = {.set_window = 1, .window = window};
    return kv_it_grpc_open_opts(c, "127.0.0.1", (uint16_t)port, 5000, &o);
}

/* Starts a request; content_type NULL = "application/grpc"; timeout NULL = none; md_name
 * (may be NULL) one extra metadata header. */
static kv_it_grpc_stream *start_md(kv_it_grpc *c, const char *path, const char *content_type,
                                   const char *timeout, const char *md_name, const char *md_value)
{
    const char *md[] = {md_name, md_value, NULL};
    kv_it_grpc_req rq = {
        .content_type = content_type, .timeout = timeout, .metadata = md_name ? md : NULL};
    return kv_it_grpc_stream_start(c, path, &rq);
}

static kv_it_grpc_stream *start(kv_it_grpc *c, const char *path, const char *content_type,
                                const char *timeout)
{
    return start_md(c, path, content_type, timeout, NULL, NULL);
}

/* One /test.Echo/Unary call with request headers rq (may be NULL), waited for. */
static void unary_req(kv_it_grpc *c, const kv_it_grpc_req *rq, const char *msg,
                      kv_it_grpc_stream **out)
{
    kv_it_grpc_stream *st = kv_it_grpc_stream_start(c, "/test.Echo/Unary", rq);
    cr_assert_not_null(st);
    kv_it_grpc_send_msg(st, msg, strlen(msg), 1);
    cr_assert(kv_it_grpc_wait(c, st, 5000), "unary call did not complete");
    *out = st;
}

static void unary(kv_it_grpc *c, const char *msg, kv_it_grpc_stream **out)
{
    unary_req(c, NULL, msg, out);
}

Test(live, unary_ok)
{
    harness h;
    harness_start(&h, NULL, NULL);
    kv_it_grpc *c;
    cr_assert_eq(connect_h2(&c, h.grpc_port), 0);
    kv_it_grpc_stream *st;
    unary(c, "hello", &st);
    cr_assert_eq(st->http_status, 200);
    cr_assert_eq(st->grpc_status, 0);
    const uint8_t *m;
    size_t len;
    cr_assert_eq(kv_it_grpc_stream_msgs(st, 0, &m, &len), 1);
    cr_assert_eq(len, 5);
    cr_assert_eq(memcmp(m, "hello", 5), 0);
    /* a second call on the same connection */
    unary(c, "again", &st);
    cr_assert_eq(st->grpc_status, 0);
    kv_it_grpc_close(c);
    expect_clean_stop(&h);
    cr_assert(has(&h, "kvd_grpc_requests_total{method=\"/test.Echo/Unary\",code=\"OK\"} 2\n"), "%s",
              h.metrics_text);
    cr_assert(has(&h, "kvd_grpc_connections_total 1\n"));
    free(h.metrics_text);
}

Test(live, unary_answered_asynchronously)
{
    harness h;
    harness_start(&h, NULL, NULL);
    kv_it_grpc *c;
    cr_assert_eq(connect_h2(&c, h.grpc_port), 0);
    /* several calls in flight at once, each answered later from a timer */
    kv_it_grpc_stream *st[4];
    for (int i = 0; i < 4; i++) {
        st[i] = start(c, "/test.Echo/Unary", NULL, NULL);
        kv_it_grpc_send_msg(st[i], "later", 5, 1);
    }
    for (int i = 0; i < 4; i++) {
        cr_assert(kv_it_grpc_wait(c, st[i], 5000));
        cr_assert_eq(st[i]->grpc_status, 0);
        const uint8_t *m;
        size_t len;
        cr_assert_eq(kv_it_grpc_stream_msgs(st[i], 0, &m, &len), 1);
        cr_assert_eq(len, 11);
        cr_assert_eq(memcmp(m, "async-reply", 11), 0);
    }
    /* a held call whose client goes away before the answer: on_cancel, no late use */
    kv_it_grpc_stream *gone = start(c, "/test.Echo/Unary", NULL, NULL);
    kv_it_grpc_send_msg(gone, "later", 5, 1);
    kv_it_grpc_wait(c, NULL, 5);
    nghttp2_submit_rst_stream(kv_it_grpc_session(c), NGHTTP2_FLAG_NONE, gone->id, NGHTTP2_CANCEL);
    kv_it_grpc_wait(c, gone, 1000);
    usleep(300 * 1000); /* the timer fires after the cancel */
    kv_it_grpc_close(c);
    expect_clean_stop(&h);
    cr_assert_eq(atomic_load(&h.cancels), 1);
    free(h.metrics_text);
}

Test(live, metadata_header_is_exposed)
{
    harness h;
    harness_start(&h, NULL, NULL);
    kv_it_grpc *c;
    cr_assert_eq(connect_h2(&c, h.grpc_port), 0);
    kv_it_grpc_stream *st = start_md(c, "/test.Echo/Unary", NULL, NULL, "token", "abc.123");
    kv_it_grpc_send_msg(st, "token", 5, 1);
    cr_assert(kv_it_grpc_wait(c, st, 5000));
    const uint8_t *m;
    size_t len;
    cr_assert_eq(kv_it_grpc_stream_msgs(st, 0, &m, &len), 1);
    cr_assert_eq(len, 7);
    cr_assert_eq(memcmp(m, "abc.123", 7), 0);
    st = start(c, "/test.Echo/Unary", NULL, NULL);
    kv_it_grpc_send_msg(st, "token", 5, 1);
    cr_assert(kv_it_grpc_wait(c, st, 5000));
    cr_assert_eq(kv_it_grpc_stream_msgs(st, 0, &m, &len), 1);
    cr_assert_eq(memcmp(m, "(none)", 6), 0);
    kv_it_grpc_close(c);
    expect_clean_stop(&h);
    free(h.metrics_text);
}

Test(live, unary_error_message_is_percent_encoded)
{
    harness h;
    harness_start(&h, NULL, NULL);
    kv_it_grpc *c;
    cr_assert_eq(connect_h2(&c, h.grpc_port), 0);
    kv_it_grpc_stream *st;
    unary(c, "fail", &st);
    cr_assert_eq(st->grpc_status, 3);
    cr_assert_str_eq(st->grpc_message, "bad arg: \xc3\xbc 100%\n");
    cr_assert_eq(st->dlen, 0, "trailers-only response");
    kv_it_grpc_close(c);
    expect_clean_stop(&h);
    cr_assert(has(&h, "code=\"INVALID_ARGUMENT\"} 1\n"));
    free(h.metrics_text);
}

Test(live, unary_without_message_is_internal)
{
    harness h;
    harness_start(&h, NULL, NULL);
    kv_it_grpc *c;
    cr_assert_eq(connect_h2(&c, h.grpc_port), 0);
    kv_it_grpc_stream *st = start(c, "/test.Echo/Unary", NULL, NULL);
    kv_it_grpc_send_raw(st, "", 0, 1);
    cr_assert(kv_it_grpc_wait(c, st, 5000));
    cr_assert_eq(st->grpc_status, 13);
    cr_assert_str_eq(st->grpc_message, "grpc: half-closed without a request");
    /* two messages on a unary call */
    st = start(c, "/test.Echo/Unary", NULL, NULL);
    kv_it_grpc_send_msg(st, "a", 1, 0);
    kv_it_grpc_send_msg(st, "b", 1, 1);
    cr_assert(kv_it_grpc_wait(c, st, 5000));
    cr_assert_eq(st->grpc_status, 13);
    kv_it_grpc_close(c);
    expect_clean_stop(&h);
    free(h.metrics_text);
}

Test(live, streaming_echo)
{
    harness h;
    harness_start(&h, NULL, NULL);
    kv_it_grpc *c;
    cr_assert_eq(connect_h2(&c, h.grpc_port), 0);
    kv_it_grpc_stream *st = start(c, "/test.Echo/Stream", NULL, NULL);
    kv_it_grpc_send_msg(st, "m1", 2, 0);
    cr_assert(kv_it_grpc_wait_bytes(c, st, 7, 5000));
    cr_assert_eq(st->http_status, 200);
    cr_assert_eq(kv_it_grpc_stream_msgs(st, 0, NULL, NULL), 1);
    /* two messages in one DATA frame */
    uint8_t two[] = {0, 0, 0, 0, 2, 'm', '2', 0, 0, 0, 0, 3, 'm', '3', '!'};
    kv_it_grpc_send_raw(st, two, sizeof(two), 0);
    cr_assert(kv_it_grpc_wait_bytes(c, st, 7 + 7 + 8, 5000));
    /* one message split over two DATA frames */
    uint8_t split[] = {0, 0, 0, 0, 4, 'm', '4', 'x', 'y'};
    kv_it_grpc_send_raw(st, split, 6, 0);
    for (int i = 0; i < 5; i++)
        kv_it_grpc_wait(c, NULL, 20); /* flush the first part on its own */
    kv_it_grpc_send_raw(st, split + 6, 3, 0);
    cr_assert(kv_it_grpc_wait_bytes(c, st, 7 + 7 + 8 + 9, 5000));
    const uint8_t *m;
    size_t len;
    cr_assert_eq(kv_it_grpc_stream_msgs(st, 3, &m, &len), 4);
    cr_assert_eq(len, 4);
    cr_assert_eq(memcmp(m, "m4xy", 4), 0);
    cr_assert_eq(kv_it_grpc_stream_msgs(st, 2, &m, &len), 4);
    cr_assert_eq(memcmp(m, "m3!", 3), 0);
    kv_it_grpc_send_raw(st, "", 0, 1); /* half-close */
    cr_assert(kv_it_grpc_wait(c, st, 5000));
    cr_assert_eq(st->grpc_status, 0);
    kv_it_grpc_close(c);
    expect_clean_stop(&h);
    cr_assert_eq(atomic_load(&h.half_closes), 1);
    cr_assert_eq(atomic_load(&h.cancels), 0);
    free(h.metrics_text);
}

/* kv_it_grpc_stream_take's callback: appends "<msg>;" to the string at arg. */
static void take_append(void *arg, const uint8_t *msg, size_t len)
{
    char *acc = arg;
    size_t n = strlen(acc);
    cr_assert_lt(n + len + 1, 64);
    memcpy(acc + n, msg, len);
    acc[n + len] = ';';
    acc[n + len + 1] = 0;
}

Test(live, stream_take_consumes_complete_messages_in_place)
{
    harness h;
    harness_start(&h, NULL, NULL);
    kv_it_grpc *c;
    cr_assert_eq(connect_h2(&c, h.grpc_port), 0);
    kv_it_grpc_stream *st = start(c, "/test.Echo/Stream", NULL, NULL);
    /* two whole messages and the first 2 bytes of a third, in one DATA frame */
    uint8_t two[] = {0, 0, 0, 0, 2, 'a', 'b', 0, 0, 0, 0, 1, 'c', 0, 0, 0, 0, 3, 'd', 'e'};
    kv_it_grpc_send_raw(st, two, sizeof(two), 0);
    cr_assert(kv_it_grpc_wait_bytes(c, st, 7 + 6, 5000));
    for (int i = 0; i < 10 && st->received < sizeof(two); i++)
        kv_it_grpc_wait(c, NULL, 20); /* the server echoes whole messages only */
    char acc[64] = "";
    cr_assert_eq(kv_it_grpc_stream_take(st, take_append, acc), 2);
    cr_assert_str_eq(acc, "ab;c;");
    cr_assert_eq(st->dlen, 0, "only whole messages were echoed: %zu left", st->dlen);
    cr_assert_eq(kv_it_grpc_stream_take(st, take_append, acc), 0);
    kv_it_grpc_send_raw(st, "f", 1, 0);
    cr_assert(kv_it_grpc_wait_bytes(c, st, 7 + 6 + 8, 5000));
    cr_assert_eq(kv_it_grpc_stream_take(st, take_append, acc), 1);
    cr_assert_str_eq(acc, "ab;c;def;");
    cr_assert_eq(st->dlen, 0);
    kv_it_grpc_send_raw(st, "", 0, 1); /* half-close */
    cr_assert(kv_it_grpc_wait(c, st, 5000));
    cr_assert_eq(st->grpc_status, 0);
    kv_it_grpc_close(c);
    expect_clean_stop(&h);
    free(h.metrics_text);
}

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

Test(live, pause_and_resume)
{
    harness h;
    harness_start(&h, NULL, NULL);
    kv_it_grpc *c;
    cr_assert_eq(connect_h2(&c, h.grpc_port), 0);
    kv_it_grpc_stream *st = start(c, "/test.Echo/Stream", NULL, NULL);
    /* "pause" makes the app pause for 100 ms; "after" arrives in the same frame and must be
     * held, not delivered, until the resume. The half-close must also wait. */
    uint8_t b[] = {0, 0, 0, 0, 5, 'p', 'a', 'u', 's', 'e', 0, 0, 0, 0, 5, 'a', 'f', 't', 'e', 'r'};
    kv_it_grpc_send_raw(st, b, sizeof(b), 1);
    cr_assert(kv_it_grpc_wait_bytes(c, st, 10, 5000));
    uint64_t t0 = mono_ms();
    cr_assert_eq(kv_it_grpc_stream_msgs(st, 0, NULL, NULL), 1);
    cr_assert(kv_it_grpc_wait_bytes(c, st, 20, 5000));
    uint64_t waited = mono_ms() - t0;
    cr_assert_geq(waited, 50, "held message delivered after %llu ms", (unsigned long long)waited);
    cr_assert(kv_it_grpc_wait(c, st, 5000));
    cr_assert_eq(st->grpc_status, 0);
    const uint8_t *m;
    size_t len;
    cr_assert_eq(kv_it_grpc_stream_msgs(st, 1, &m, &len), 2);
    cr_assert_eq(memcmp(m, "after", 5), 0);
    kv_it_grpc_close(c);
    expect_clean_stop(&h);
    cr_assert_eq(atomic_load(&h.half_closes), 1);
    free(h.metrics_text);
}

Test(live, unknown_method_and_service)
{
    harness h;
    harness_start(&h, NULL, NULL);
    kv_it_grpc *c;
    cr_assert_eq(connect_h2(&c, h.grpc_port), 0);
    kv_it_grpc_stream *a = start(c, "/test.Echo/Nope", NULL, NULL);
    kv_it_grpc_send_msg(a, "x", 1, 1);
    kv_it_grpc_stream *b = start(c, "/foo.Bar/Baz", NULL, NULL);
    kv_it_grpc_send_msg(b, "x", 1, 0); /* not half-closed: server must RST after trailers */
    cr_assert(kv_it_grpc_wait(c, a, 5000));
    cr_assert(kv_it_grpc_wait(c, b, 5000));
    cr_assert_eq(a->http_status, 200);
    cr_assert_eq(a->grpc_status, 12);
    cr_assert_str_eq(a->grpc_message, "unknown method Nope for service test.Echo");
    cr_assert_eq(b->grpc_status, 12);
    cr_assert_str_eq(b->grpc_message, "unknown service foo.Bar");
    kv_it_grpc_close(c);
    expect_clean_stop(&h);
    cr_assert(has(&h, "kvd_grpc_requests_total{method=\"unknown\",code=\"UNIMPLEMENTED\"} 2\n"),
              "%s", h.metrics_text);
    free(h.metrics_text);
}

Test(live, url_style_authority_is_accepted)
{
    /* etcdctl endpoint status --cluster dials "http://127.0.0.1:2379" as the authority */
    harness h;
    harness_start(&h, NULL, NULL);
    kv_it_grpc *c;
    cr_assert_eq(connect_h2(&c, h.grpc_port), 0);
    kv_it_grpc_req rq = {.authority = "http://127.0.0.1:2379"};
    kv_it_grpc_stream *st;
    unary_req(c, &rq, "hi", &st);
    cr_assert_eq(st->close_code, 0);
    cr_assert_eq(st->grpc_status, 0);
    /* GET is refused the way grpc-go does (405 + INTERNAL), the connection survives */
    rq.method = "GET";
    unary_req(c, &rq, "hi", &st);
    cr_assert_eq(st->http_status, 405);
    cr_assert_eq(st->grpc_status, 13);
    rq.method = NULL;
    unary_req(c, &rq, "hi", &st);
    cr_assert_eq(st->grpc_status, 0);
    kv_it_grpc_close(c);
    expect_clean_stop(&h);
    free(h.metrics_text);
}

Test(live, bad_content_type_is_415)
{
    harness h;
    harness_start(&h, NULL, NULL);
    kv_it_grpc *c;
    cr_assert_eq(connect_h2(&c, h.grpc_port), 0);
    kv_it_grpc_stream *st = start(c, "/test.Echo/Unary", "application/json", NULL);
    kv_it_grpc_send_msg(st, "x", 1, 1);
    cr_assert(kv_it_grpc_wait(c, st, 5000));
    cr_assert_eq(st->http_status, 415);
    cr_assert_eq(st->grpc_status, 13);
    /* application/grpc+proto is fine */
    st = start(c, "/test.Echo/Unary", "application/grpc+proto", NULL);
    kv_it_grpc_send_msg(st, "y", 1, 1);
    cr_assert(kv_it_grpc_wait(c, st, 5000));
    cr_assert_eq(st->grpc_status, 0);
    kv_it_grpc_close(c);
    expect_clean_stop(&h);
    free(h.metrics_text);
}

Test(live, oversized_refused_on_prefix)
{
    harness h;
    kv_grpc_config cfg;
    kv_grpc_config_default(&cfg);
    cfg.max_request_bytes = 1024;
    harness_start(&h, &cfg, NULL);
    kv_it_grpc *c;
    cr_assert_eq(connect_h2(&c, h.grpc_port), 0);
    /* unary and streaming: only the 5-byte prefix is ever sent */
    const char *paths[] = {"/test.Echo/Unary", "/test.Echo/Stream"};
    for (int i = 0; i < 2; i++) {
        kv_it_grpc_stream *st = start(c, paths[i], NULL, NULL);
        uint8_t prefix[5] = {0, 0, 0x10, 0, 0}; /* 1 MiB */
        kv_it_grpc_send_raw(st, prefix, 5, 0);
        cr_assert(kv_it_grpc_wait(c, st, 5000), "error must arrive without the body");
        cr_assert_eq(st->grpc_status, 8);
        cr_assert_str_eq(st->grpc_message,
                         "grpc: received message larger than max (1048576 vs. 1024)");
    }
    /* a streaming call that got messages first: the app sees on_cancel */
    kv_it_grpc_stream *st = start(c, "/test.Echo/Stream", NULL, NULL);
    kv_it_grpc_send_msg(st, "ok", 2, 0);
    cr_assert(kv_it_grpc_wait_bytes(c, st, 7, 5000));
    char big[2000];
    memset(big, 'b', sizeof(big));
    kv_it_grpc_send_msg(st, big, sizeof(big), 0);
    cr_assert(kv_it_grpc_wait(c, st, 5000));
    cr_assert_eq(st->grpc_status, 8);
    /* the connection still works */
    unary(c, "small", &st);
    cr_assert_eq(st->grpc_status, 0);
    kv_it_grpc_close(c);
    expect_clean_stop(&h);
    cr_assert_eq(atomic_load(&h.cancels), 1);
    cr_assert(has(&h, "kvd_grpc_requests_refused_total{reason=\"oversized\"} 3\n"), "%s",
              h.metrics_text);
    cr_assert(has(&h, "code=\"RESOURCE_EXHAUSTED\"} 2\n"), "%s", h.metrics_text);
    free(h.metrics_text);
}

Test(live, compressed_message_unimplemented)
{
    harness h;
    harness_start(&h, NULL, NULL);
    kv_it_grpc *c;
    cr_assert_eq(connect_h2(&c, h.grpc_port), 0);
    kv_it_grpc_stream *st = start(c, "/test.Echo/Unary", NULL, NULL);
    uint8_t m[] = {1, 0, 0, 0, 1, 'z'};
    kv_it_grpc_send_raw(st, m, sizeof(m), 1);
    cr_assert(kv_it_grpc_wait(c, st, 5000));
    cr_assert_eq(st->grpc_status, 12);
    cr_assert_str_eq(st->grpc_message, "grpc: compressed messages not supported");
    kv_it_grpc_close(c);
    expect_clean_stop(&h);
    free(h.metrics_text);
}

Test(live, deadline_exceeded)
{
    harness h;
    harness_start(&h, NULL, NULL);
    kv_it_grpc *c;
    cr_assert_eq(connect_h2(&c, h.grpc_port), 0);
    kv_it_grpc_stream *st = start(c, "/test.Echo/Unary", NULL, "100m");
    kv_it_grpc_send_msg(st, "hold", 4, 1);
    cr_assert(kv_it_grpc_wait(c, st, 5000));
    cr_assert_eq(st->grpc_status, 4);
    cr_assert_str_eq(st->grpc_message, "context deadline exceeded");
    /* malformed timeout */
    st = start(c, "/test.Echo/Unary", NULL, "1x");
    kv_it_grpc_send_msg(st, "hi", 2, 1);
    cr_assert(kv_it_grpc_wait(c, st, 5000));
    cr_assert_eq(st->grpc_status, 13);
    kv_it_grpc_close(c);
    expect_clean_stop(&h);
    cr_assert_eq(atomic_load(&h.cancels), 1, "the app learns about the expiry");
    cr_assert(has(&h, "code=\"DEADLINE_EXCEEDED\"} 1\n"));
    free(h.metrics_text);
}

Test(live, client_reset_cancels)
{
    harness h;
    harness_start(&h, NULL, NULL);
    kv_it_grpc *c;
    cr_assert_eq(connect_h2(&c, h.grpc_port), 0);
    kv_it_grpc_stream *st = start(c, "/test.Echo/Stream", NULL, NULL);
    kv_it_grpc_send_msg(st, "x", 1, 0);
    cr_assert(kv_it_grpc_wait_bytes(c, st, 6, 5000));
    nghttp2_submit_rst_stream(kv_it_grpc_session(c), NGHTTP2_FLAG_NONE, st->id, NGHTTP2_CANCEL);
    kv_it_grpc_wait(c, st, 2000);
    /* a held unary call cancelled by closing the connection */
    kv_it_grpc_stream *u = start(c, "/test.Echo/Unary", NULL, NULL);
    kv_it_grpc_send_msg(u, "hold", 4, 1);
    kv_it_grpc_wait(c, NULL, 300);
    kv_it_grpc_close(c);
    usleep(200 * 1000);
    expect_clean_stop(&h);
    cr_assert_eq(atomic_load(&h.cancels), 2);
    cr_assert(
        has(&h, "kvd_grpc_requests_total{method=\"/test.Echo/Stream\",code=\"CANCELLED\"} 1\n"),
        "%s", h.metrics_text);
    free(h.metrics_text);
}

Test(live, server_close_cancels_live_calls)
{
    harness h;
    harness_start(&h, NULL, NULL);
    kv_it_grpc *c;
    cr_assert_eq(connect_h2(&c, h.grpc_port), 0);
    kv_it_grpc_stream *st = start(c, "/test.Echo/Stream", NULL, NULL);
    kv_it_grpc_send_msg(st, "x", 1, 0);
    cr_assert(kv_it_grpc_wait_bytes(c, st, 6, 5000));
    expect_clean_stop(&h); /* client still connected */
    cr_assert_eq(atomic_load(&h.cancels), 1);
    kv_it_grpc_close(c);
    free(h.metrics_text);
}

Test(live, garbage_closes_only_that_connection)
{
    harness h;
    harness_start(&h, NULL, NULL);
    kv_it_grpc *good;
    cr_assert_eq(connect_h2(&good, h.grpc_port), 0);
    kv_it_grpc_stream *st;
    unary(good, "before", &st);
    cr_assert_eq(st->grpc_status, 0);

    int fd = tcp_connect(h.grpc_port);
    cr_assert_geq(fd, 0);
    size_t n = 1 << 20;
    uint8_t *junk = malloc(n);
    srand(42);
    for (size_t i = 0; i < n; i++)
        junk[i] = (uint8_t)rand();
    size_t off = 0;
    while (off < n) {
        ssize_t w = send(fd, junk + off, n - off, MSG_NOSIGNAL);
        if (w <= 0)
            break; /* the server closed on us: expected */
        off += (size_t)w;
    }
    free(junk);
    char buf[4096];
    ssize_t r;
    int closed = 0;
    for (int i = 0; i < 100; i++) {
        r = recv(fd, buf, sizeof(buf), 0);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
            closed = 1;
            break;
        }
        if (r < 0)
            break; /* 5 s timeout */
    }
    cr_assert(closed, "server must close a connection that sends garbage");
    close(fd);

    unary(good, "after", &st);
    cr_assert_eq(st->grpc_status, 0, "other connections keep working");
    kv_it_grpc *fresh;
    cr_assert_eq(connect_h2(&fresh, h.grpc_port), 0);
    unary(fresh, "new", &st);
    cr_assert_eq(st->grpc_status, 0, "new connections are served");
    kv_it_grpc_close(fresh);
    kv_it_grpc_close(good);
    expect_clean_stop(&h);
    cr_assert(has(&h, "kvd_grpc_connections_total 3\n"));
    free(h.metrics_text);
}

static int recv_until_closed(int fd)
{
    char buf[4096];
    for (int i = 0; i < 1000; i++) {
        ssize_t r = recv(fd, buf, sizeof(buf), 0);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK))
            return 1;
        if (r < 0)
            return 0;
    }
    return 0;
}

Test(live, truncated_frame_then_eof)
{
    harness h;
    harness_start(&h, NULL, NULL);
    int fd = tcp_connect(h.grpc_port);
    cr_assert_geq(fd, 0);
    static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    cr_assert_eq(send(fd, preface, 24, MSG_NOSIGNAL), 24);
    /* SETTINGS frame header announcing 12 bytes of payload, then only 4 of them */
    uint8_t fr[] = {0, 0, 12, 4, 0, 0, 0, 0, 0, 0x03, 0, 0};
    cr_assert_eq(send(fd, fr, sizeof(fr) - 2, MSG_NOSIGNAL), (ssize_t)sizeof(fr) - 2);
    shutdown(fd, SHUT_WR);
    cr_assert(recv_until_closed(fd), "server closes on EOF mid-frame");
    close(fd);
    /* a frame that is malformed (SETTINGS with length not a multiple of 6) */
    fd = tcp_connect(h.grpc_port);
    cr_assert_eq(send(fd, preface, 24, MSG_NOSIGNAL), 24);
    uint8_t bad[] = {0, 0, 5, 4, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5};
    cr_assert_eq(send(fd, bad, sizeof(bad), MSG_NOSIGNAL), (ssize_t)sizeof(bad));
    cr_assert(recv_until_closed(fd), "server sends GOAWAY and closes on a protocol error");
    close(fd);
    kv_it_grpc *c;
    cr_assert_eq(connect_h2(&c, h.grpc_port), 0);
    kv_it_grpc_stream *st;
    unary(c, "still", &st);
    cr_assert_eq(st->grpc_status, 0);
    kv_it_grpc_close(c);
    expect_clean_stop(&h);
    free(h.metrics_text);
}

Test(live, too_many_streams_refused)
{
    harness h;
    kv_grpc_config cfg;
    kv_grpc_config_default(&cfg);
    cfg.max_concurrent_streams = 2;
    harness_start(&h, &cfg, NULL);
    kv_it_grpc *c;
    cr_assert_eq(connect_h2(&c, h.grpc_port), 0);
    /* opened before the server's SETTINGS arrive, so the client does not hold them back */
    kv_it_grpc_stream *s[3];
    for (int i = 0; i < 3; i++) {
        s[i] = start(c, "/test.Echo/Stream", NULL, NULL);
        kv_it_grpc_send_msg(s[i], "x", 1, 0);
    }
    cr_assert(kv_it_grpc_wait(c, s[2], 5000));
    cr_assert_eq(s[2]->close_code, NGHTTP2_REFUSED_STREAM);
    cr_assert(kv_it_grpc_wait_bytes(c, s[0], 6, 5000));
    cr_assert(kv_it_grpc_wait_bytes(c, s[1], 6, 5000));
    for (int i = 0; i < 2; i++) {
        kv_it_grpc_send_raw(s[i], "", 0, 1);
        cr_assert(kv_it_grpc_wait(c, s[i], 5000));
        cr_assert_eq(s[i]->grpc_status, 0);
    }
    kv_it_grpc_close(c);
    expect_clean_stop(&h);
    cr_assert(has(&h, "kvd_grpc_requests_refused_total{reason=\"too_many_streams\"} 1\n"), "%s",
              h.metrics_text);
    free(h.metrics_text);
}

/* D5: the per-connection send bound is backpressure, not an error: a unary response larger
 * than it is streamed; only a response over max_response_bytes is refused (-EMSGSIZE). */
Test(live, send_buffer_bound_is_backpressure)
{
    harness h;
    kv_grpc_config cfg;
    kv_grpc_config_default(&cfg);
    cfg.max_send_buffer_bytes = 64 * 1024;
    cfg.max_response_bytes = 512 * 1024;
    harness_start(&h, &cfg, NULL);
    kv_it_grpc *c;
    cr_assert_eq(connect_h2(&c, h.grpc_port), 0);
    size_t n = 300 * 1024;
    char *big = malloc(600 * 1024 + 1);
    memset(big, 'q', 600 * 1024);
    big[n] = 0;
    kv_it_grpc_stream *st[8];
    for (int i = 0; i < 8; i++) { /* 8 x 300 KiB queued at once on one connection */
        st[i] = start(c, "/test.Echo/Unary", NULL, NULL);
        kv_it_grpc_send_msg(st[i], big, n, 1);
    }
    for (int i = 0; i < 8; i++) {
        cr_assert(kv_it_grpc_wait(c, st[i], 10000));
        cr_assert_eq(st[i]->grpc_status, 0, "stream %d: %s", i, st[i]->grpc_message);
        const uint8_t *m;
        size_t len;
        cr_assert_eq(kv_it_grpc_stream_msgs(st[i], 0, &m, &len), 1);
        cr_assert_eq(len, n);
    }
    big[600 * 1024] = 0;
    kv_it_grpc_stream *too = start(c, "/test.Echo/Unary", NULL, NULL);
    kv_it_grpc_send_msg(too, big, 600 * 1024, 1);
    free(big);
    cr_assert(kv_it_grpc_wait(c, too, 10000));
    cr_assert_eq(too->grpc_status, 8);
    cr_assert_str_eq(too->grpc_message, "send buffer full");
    kv_it_grpc_stream *u;
    unary(c, "small", &u);
    cr_assert_eq(u->grpc_status, 0);
    kv_it_grpc_close(c);
    expect_clean_stop(&h);
    cr_assert(has(&h, "kvd_grpc_requests_refused_total{reason=\"response_size\"} 1\n"), "%s",
              h.metrics_text);
    cr_assert(has(&h, "kvd_grpc_requests_refused_total{reason=\"send_buffer\"} 0\n"));
    free(h.metrics_text);
}

/* A streaming call whose reader never opens its window: its own output is bounded (-ENOBUFS,
 * the lease keepalive stream relies on it), and the stalled stream is reset after
 * send_stall_timeout_ms. */
Test(live, zero_window_reader_is_bounded_then_reset)
{
    harness h;
    kv_grpc_config cfg;
    kv_grpc_config_default(&cfg);
    cfg.max_send_buffer_bytes = 64 * 1024;
    cfg.send_stall_timeout_ms = 600;
    harness_start(&h, &cfg, NULL);
    kv_it_grpc *c;
    cr_assert_eq(connect_h2_window(&c, h.grpc_port, 0), 0);
    kv_it_grpc_stream *st = start(c, "/test.Echo/Stream", NULL, NULL);
    char chunk[20000];
    memset(chunk, 'z', sizeof(chunk));
    for (int i = 0; i < 5; i++) /* 100 KB of echoes > 64 KiB: the 4th send fails */
        kv_it_grpc_send_msg(st, chunk, sizeof(chunk), 0);
    /* The app ends it (RESOURCE_EXHAUSTED after -ENOBUFS), but its trailers queue behind
     * output that cannot move: the stalled stream is reset. */
    cr_assert(kv_it_grpc_wait(c, st, 5000));
    cr_assert_eq(st->close_code, NGHTTP2_INTERNAL_ERROR);
    /* A unary response that cannot move at all is reset once it stalls. */
    kv_it_grpc_stream *u = start(c, "/test.Echo/Unary", NULL, NULL);
    kv_it_grpc_send_msg(u, chunk, sizeof(chunk), 1);
    uint64_t t0 = mono_ms();
    cr_assert(kv_it_grpc_wait(c, u, 10000));
    uint64_t took = mono_ms() - t0;
    cr_assert_eq(u->grpc_status, -1);
    cr_assert_eq(u->close_code, NGHTTP2_INTERNAL_ERROR);
    cr_assert_geq(took, 400, "reset after the stall timeout, not at once (%llu ms)",
                  (unsigned long long)took);
    kv_it_grpc_close(c);
    expect_clean_stop(&h);
    cr_assert(has(&h, "kvd_grpc_streams_reset_total{reason=\"send_stalled\"} 2\n"), "%s",
              h.metrics_text);
    cr_assert(has(&h, "kvd_grpc_requests_refused_total{reason=\"send_buffer\"} 1\n"));
    free(h.metrics_text);
}

/* The value of the first sample of `name` (e.g. "\nkvd_grpc_connections_watched ") in the
 * harness's live /metrics, or -1. */
static double live_metric(const harness *h, const char *name)
{
    char *m = http_get(h->http_port, "/metrics");
    double v = m ? metric_value(m, name) : -1;
    free(m);
    return v;
}

/* The 250 ms timeout scan looks only at connections with something pending (output queued or
 * in flight, an unanswered PING, withheld window, a close due), not at every open one: a
 * fleet's idle keepalive connections cost the loop nothing between their requests (a proxy
 * with 10,000 agents spent 15% of its CPU scanning them, bench/README.md "Proxy"). A stalled
 * connection is still watched, and reset on time. */
Test(live, timeout_scan_watches_only_connections_with_work_pending)
{
    harness h;
    kv_grpc_config cfg;
    kv_grpc_config_default(&cfg);
    cfg.send_stall_timeout_ms = 1500;
    harness_start(&h, &cfg, NULL);
    enum { N = 40 };
    kv_it_grpc *c[N];
    for (int i = 0; i < N; i++) {
        cr_assert_eq(connect_h2(&c[i], h.grpc_port), 0);
        kv_it_grpc_stream *st;
        unary(c[i], "hello", &st);
        cr_assert_eq(st->grpc_status, 0);
    }
    /* Every answer was written whole: after a scan or two nothing is watched. */
    double watched = -1;
    for (int t = 0; t < 40 && watched != 0; t++) {
        usleep(50 * 1000);
        watched = live_metric(&h, "\nkvd_grpc_connections_watched ");
    }
    cr_assert_eq(watched, 0, "%d idle connections open, %.0f watched", N, watched);
    cr_assert_eq(live_metric(&h, "\nkvd_grpc_connections_open "), N);
    /* A reader that never opens its window, answered 700 ms after its request (two scans
     * have passed its quiet connection by then): the answer stays queued, the scan watches
     * the connection again and resets the stream after the stall timeout. */
    kv_it_grpc *z;
    cr_assert_eq(connect_h2_window(&z, h.grpc_port, 0), 0);
    kv_it_grpc_stream *u = start(z, "/test.Echo/Unary", NULL, NULL);
    kv_it_grpc_send_msg(u, "slow", 4, 1);
    kv_it_grpc_wait(z, NULL, 600);
    cr_assert_eq(live_metric(&h, "\nkvd_grpc_connections_watched "), 0, "nothing pending yet");
    kv_it_grpc_wait(z, NULL, 400);
    cr_assert_eq(live_metric(&h, "\nkvd_grpc_connections_watched "), 1);
    uint64_t t0 = mono_ms();
    cr_assert(kv_it_grpc_wait(z, u, 10000));
    cr_assert_eq(u->close_code, NGHTTP2_INTERNAL_ERROR);
    cr_assert_geq(mono_ms() - t0, 900, "reset after the stall timeout, not at once");
    kv_it_grpc_close(z);
    for (int i = 0; i < N; i++)
        kv_it_grpc_close(c[i]);
    expect_clean_stop(&h);
    cr_assert(has(&h, "kvd_grpc_streams_reset_total{reason=\"send_stalled\"} 1\n"), "%s",
              h.metrics_text);
    free(h.metrics_text);
}

/* A connection whose output is over its bound gets no new request delivered until the peer
 * reads; then everything is answered. */
Test(live, output_over_bound_stops_request_delivery)
{
    harness h;
    kv_grpc_config cfg;
    kv_grpc_config_default(&cfg);
    cfg.max_send_buffer_bytes = 64 * 1024;
    harness_start(&h, &cfg, NULL);
    kv_it_grpc *c;
    cr_assert_eq(connect_h2_window(&c, h.grpc_port, 0), 0);
    char chunk[100000];
    memset(chunk, 'y', sizeof(chunk));
    kv_it_grpc_stream *a = start(c, "/test.Echo/Unary", NULL, NULL);
    kv_it_grpc_send_msg(a, chunk, sizeof(chunk), 1);
    kv_it_grpc_wait(c, NULL, 300);
    kv_it_grpc_stream *b[4];
    for (int i = 0; i < 4; i++) {
        b[i] = start(c, "/test.Echo/Unary", NULL, NULL);
        kv_it_grpc_send_msg(b[i], "later-ok", 8, 1);
    }
    kv_it_grpc_wait(c, NULL, 300);
    char *m = http_get(h.http_port, "/metrics");
    cr_assert_not_null(m);
    cr_assert(strstr(m, "kvd_grpc_connections_backpressured{"), "%s", m);
    cr_assert(strstr(m, "kvd_grpc_conn_backpressure_total 1\n"), "%s", m);
    free(m);
    /* open the window: everything drains and the held requests are answered */
    nghttp2_settings_entry iv = {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1 << 20};
    nghttp2_submit_settings(kv_it_grpc_session(c), NGHTTP2_FLAG_NONE, &iv, 1);
    nghttp2_submit_window_update(kv_it_grpc_session(c), NGHTTP2_FLAG_NONE, 0, 1 << 20);
    cr_assert(kv_it_grpc_wait(c, a, 5000));
    cr_assert_eq(a->grpc_status, 0);
    for (int i = 0; i < 4; i++) {
        cr_assert(kv_it_grpc_wait(c, b[i], 5000));
        cr_assert_eq(b[i]->grpc_status, 0);
    }
    kv_it_grpc_close(c);
    expect_clean_stop(&h);
    free(h.metrics_text);
}

Test(live, abort_resets_the_stream)
{
    harness h;
    harness_start(&h, NULL, NULL);
    kv_it_grpc *c;
    cr_assert_eq(connect_h2(&c, h.grpc_port), 0);
    kv_it_grpc_stream *st;
    unary(c, "abort", &st);
    cr_assert_eq(st->grpc_status, -1, "no status: the outcome is unknown");
    cr_assert_eq(st->close_code, NGHTTP2_INTERNAL_ERROR);
    unary(c, "after", &st);
    cr_assert_eq(st->grpc_status, 0);
    kv_it_grpc_close(c);
    expect_clean_stop(&h);
    cr_assert(has(&h, "kvd_grpc_streams_reset_total{reason=\"undeliverable\"} 1\n"));
    free(h.metrics_text);
}

/* D6: at the limit, an idle connection makes room; a busy one does not. */
Test(live, connection_limit)
{
    harness h;
    kv_grpc_config cfg;
    kv_grpc_config_default(&cfg);
    cfg.max_connections = 1;
    harness_start(&h, &cfg, NULL);
    kv_it_grpc *a;
    cr_assert_eq(connect_h2(&a, h.grpc_port), 0);
    kv_it_grpc_stream *st;
    unary(a, "first", &st);
    cr_assert_eq(st->grpc_status, 0);
    kv_it_grpc_stream *hold = start(a, "/test.Echo/Unary", NULL, "30S");
    kv_it_grpc_send_msg(hold, "hold", 4, 1);
    kv_it_grpc_wait(a, NULL, 200);
    int fd = tcp_connect(h.grpc_port);
    cr_assert_geq(fd, 0);
    cr_assert(recv_until_closed(fd), "excess connection is closed while the other is busy");
    close(fd);
    unary(a, "still", &st);
    cr_assert_eq(st->grpc_status, 0);
    nghttp2_submit_rst_stream(kv_it_grpc_session(a), NGHTTP2_FLAG_NONE, hold->id, NGHTTP2_CANCEL);
    kv_it_grpc_wait(a, NULL, 200); /* a is idle now */
    kv_it_grpc *b;
    cr_assert_eq(connect_h2(&b, h.grpc_port), 0);
    unary(b, "newcomer", &st);
    cr_assert_eq(st->grpc_status, 0, "a new client is served: the idle connection made room");
    kv_it_grpc_wait(a, NULL, 1000);
    cr_assert(kv_it_grpc_conn_closed(a), "the idle connection was evicted");
    cr_assert(kv_it_grpc_goaway(a), "with a GOAWAY");
    kv_it_grpc_close(a);
    kv_it_grpc_close(b);
    expect_clean_stop(&h);
    cr_assert(has(&h, "kvd_grpc_requests_refused_total{reason=\"conn_limit\"} 1\n"));
    cr_assert(has(&h, "kvd_grpc_connections_closed_total{reason=\"evicted\"} 1\n"));
    free(h.metrics_text);
}

Test(live, handshake_timeout_closes_silent_connections)
{
    harness h;
    kv_grpc_config cfg;
    kv_grpc_config_default(&cfg);
    cfg.handshake_timeout_ms = 300;
    harness_start(&h, &cfg, NULL);
    int fd = tcp_connect(h.grpc_port);
    send(fd, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 24, MSG_NOSIGNAL);
    uint64_t t0 = mono_ms();
    cr_assert(recv_until_closed(fd), "a preface-only connection is closed");
    cr_assert_geq(mono_ms() - t0, 250);
    close(fd);
    kv_it_grpc *c; /* one that makes a request in time stays */
    cr_assert_eq(connect_h2(&c, h.grpc_port), 0);
    kv_it_grpc_stream *st;
    unary(c, "quick", &st);
    cr_assert_eq(st->grpc_status, 0);
    kv_it_grpc_wait(c, NULL, 700);
    cr_assert_not(kv_it_grpc_conn_closed(c));
    kv_it_grpc_close(c);
    expect_clean_stop(&h);
    cr_assert(has(&h, "kvd_grpc_connections_closed_total{reason=\"handshake_timeout\"} 1\n"));
    free(h.metrics_text);
}

Test(live, max_connection_idle_sends_goaway)
{
    harness h;
    kv_grpc_config cfg;
    kv_grpc_config_default(&cfg);
    cfg.max_connection_idle_ms = 300;
    harness_start(&h, &cfg, NULL);
    kv_it_grpc *c;
    cr_assert_eq(connect_h2(&c, h.grpc_port), 0);
    kv_it_grpc_stream *st;
    unary(c, "one", &st);
    cr_assert_eq(st->grpc_status, 0);
    cr_assert(kv_it_grpc_wait(c, NULL, 3000));
    cr_assert(kv_it_grpc_goaway(c));
    kv_it_grpc_close(c);
    expect_clean_stop(&h);
    cr_assert(has(&h, "kvd_grpc_connections_closed_total{reason=\"idle_timeout\"} 1\n"));
    free(h.metrics_text);
}

/* grpc-go keepalive enforcement: PINGs faster than allowed -> GOAWAY too_many_pings. */
Test(live, ping_flood_gets_too_many_pings)
{
    harness h;
    harness_start(&h, NULL, NULL);
    kv_it_grpc *c;
    cr_assert_eq(connect_h2(&c, h.grpc_port), 0);
    kv_it_grpc_stream *st;
    unary(c, "one", &st);
    cr_assert_eq(st->grpc_status, 0);
    for (int i = 0; i < 5; i++) {
        nghttp2_submit_ping(kv_it_grpc_session(c), NGHTTP2_FLAG_NONE, NULL);
        kv_it_grpc_wait(c, NULL, 30);
    }
    cr_assert(kv_it_grpc_wait(c, NULL, 3000));
    cr_assert(kv_it_grpc_goaway(c));
    kv_it_grpc_close(c);
    expect_clean_stop(&h);
    cr_assert(has(&h, "kvd_grpc_connections_closed_total{reason=\"too_many_pings\"} 1\n"));
    free(h.metrics_text);
}

/* A harness whose process-wide output cap (max_buffered_bytes) and largest response are
 * both 1 MiB. */
static void start_with_a_1mib_cap(harness *h)
{
    kv_grpc_config cfg;
    kv_grpc_config_default(&cfg);
    cfg.max_buffered_bytes = 1 << 20;
    cfg.max_response_bytes = 1 << 20;
    harness_start(h, &cfg, NULL);
}

/* The process-wide cap: output nobody reads is shed (largest stalled first) or a new response
 * that cannot fit is refused; buffered bytes never pass the cap. */
Test(live, buffered_cap_holds)
{
    harness h;
    start_with_a_1mib_cap(&h);
    kv_it_grpc *c[6];
    char *chunk = malloc(300 * 1024);
    memset(chunk, 'c', 300 * 1024);
    kv_it_grpc_stream *st[6];
    for (int i = 0; i < 6; i++) {
        cr_assert_eq(connect_h2_window(&c[i], h.grpc_port, 0), 0);
        st[i] = start(c[i], "/test.Echo/Unary", NULL, NULL);
        kv_it_grpc_send_msg(st[i], chunk, 300 * 1024, 1);
        kv_it_grpc_wait(c[i], NULL, 100);
    }
    free(chunk);
    int refused = 0;
    for (int i = 0; i < 6; i++) {
        kv_it_grpc_wait(c[i], st[i], 200);
        refused += st[i]->closed && st[i]->grpc_status == 8;
    }
    cr_assert_geq(refused, 3, "3 x 300 KiB fit under 1 MiB, the rest are refused");
    char *m = http_get(h.http_port, "/metrics");
    double total = -1;
    const char *p = strstr(m, "\nkvd_grpc_conn_buffered_bytes_total{");
    cr_assert_not_null(p);
    sscanf(strchr(p, '}') + 1, "%lf", &total);
    cr_assert_leq(total, 1 << 20, "%s", m);
    free(m);
    for (int i = 0; i < 6; i++)
        kv_it_grpc_close(c[i]);
    expect_clean_stop(&h);
    free(h.metrics_text);
}

/* A send that needs room resets a stalled stream (kv_grpc_srv_make_room), but the victim's
 * on_cancel runs later, never inside the sender's send: the sending app may be walking
 * objects that on_cancel frees (the watch hub's watcher set). */
Test(live, a_reset_for_room_cancels_outside_the_send)
{
    harness h;
    start_with_a_1mib_cap(&h);
    size_t big = 500 * 1024; /* its request and its echo fit under the cap together */
    char *chunk = malloc(big);
    memset(chunk, 'c', big);
    kv_it_grpc *v; /* the victim: a stream whose reader never reads */
    cr_assert_eq(connect_h2_window(&v, h.grpc_port, 0), 0);
    kv_it_grpc_stream *vs = start(v, "/test.Echo/Stream", NULL, NULL);
    kv_it_grpc_send_msg(vs, chunk, big, 0);
    kv_it_grpc_wait(v, NULL, 100);
    usleep(1300 * 1000); /* stalled past the 1 s grace (KV_GRPC_STALL_GRACE_MS) */
    kv_it_grpc *c;
    cr_assert_eq(connect_h2(&c, h.grpc_port), 0);
    kv_it_grpc_stream *st = start(c, "/test.Echo/Unary", NULL, NULL);
    static const char ask[] = "big:600000"; /* 600,000 + 500 KiB: over the 1 MiB cap */
    kv_it_grpc_send_msg(st, ask, sizeof ask - 1, 1);
    cr_assert(kv_it_grpc_wait(c, st, 10000));
    cr_assert_eq(st->grpc_status, 0, "the echo got room: status %d", st->grpc_status);
    for (int i = 0; i < 100 && atomic_load(&h.cancels) == 0; i++)
        kv_it_grpc_wait(v, NULL, 50);
    cr_assert_eq(atomic_load(&h.cancels), 1, "the stalled stream was reset and cancelled");
    cr_assert_eq(atomic_load(&h.cancels_in_send), 0, "on_cancel ran inside another call's send");
    free(chunk);
    kv_it_grpc_close(c);
    kv_it_grpc_close(v);
    expect_clean_stop(&h);
    cr_assert(has(&h, "kvd_grpc_streams_reset_total{reason=\"buffered_cap\"} 1\n"), "%s",
              h.metrics_text);
    free(h.metrics_text);
}

/* D8: many streams interleaving large bodies on one connection; held input past the budget is
 * not credited to the connection window, and when the window is used up the requests furthest
 * from completion are shed, so the rest complete (no deadlock, no collapse). */
Test(live, interleaved_bodies_make_progress)
{
    harness h;
    kv_grpc_config cfg;
    kv_grpc_config_default(&cfg);
    cfg.max_recv_buffer_bytes = 1 << 20;
    harness_start(&h, &cfg, NULL);
    kv_it_grpc *c;
    cr_assert_eq(connect_h2(&c, h.grpc_port), 0);
    size_t n = 100 * 1024;
    char *body = malloc(n);
    memset(body, 'b', n);
    enum { N = 60 }; /* 6 MB > the 4 MiB connection window */
    kv_it_grpc_stream *st[N];
    for (int i = 0; i < N; i++) {
        st[i] = start(c, "/test.Echo/Unary", NULL, NULL);
        cr_assert_not_null(st[i]);
        kv_it_grpc_send_msg(st[i], body, n, 1);
    }
    free(body);
    int ok = 0, shed = 0;
    for (int i = 0; i < N; i++) {
        cr_assert(kv_it_grpc_wait(c, st[i], 20000), "stream %d never ended", i);
        ok += st[i]->grpc_status == 0;
        shed += st[i]->grpc_status == 8;
    }
    cr_assert_eq(ok + shed, N);
    cr_assert_geq(ok, 5, "ok %d shed %d", ok, shed);
    kv_it_grpc_stream *u;
    unary(c, "after", &u);
    cr_assert_eq(u->grpc_status, 0);
    kv_it_grpc_close(c);
    expect_clean_stop(&h);
    free(h.metrics_text);
}

Test(live, large_messages_both_ways)
{
    harness h;
    harness_start(&h, NULL, NULL);
    kv_it_grpc *c;
    cr_assert_eq(connect_h2(&c, h.grpc_port), 0);
    size_t n = 1536 * 1024; /* bigger than one stream window: needs WINDOW_UPDATEs */
    char *big = malloc(n + 1);
    for (size_t i = 0; i < n; i++)
        big[i] = (char)('a' + i % 26);
    big[n] = 0;
    kv_it_grpc_stream *st = start(c, "/test.Echo/Unary", NULL, NULL);
    kv_it_grpc_send_msg(st, big, n, 1);
    cr_assert(kv_it_grpc_wait(c, st, 10000));
    cr_assert_eq(st->grpc_status, 0);
    const uint8_t *m;
    size_t len;
    cr_assert_eq(kv_it_grpc_stream_msgs(st, 0, &m, &len), 1);
    cr_assert_eq(len, n);
    cr_assert_eq(memcmp(m, big, n), 0);
    free(big);
    kv_it_grpc_close(c);
    expect_clean_stop(&h);
    free(h.metrics_text);
}

Test(live, keepalive_ping_timeout_closes)
{
    harness h;
    kv_grpc_config cfg;
    kv_grpc_config_default(&cfg);
    cfg.ping_interval_ms = 100;
    harness_start(&h, &cfg, NULL);
    /* a raw client that sends the preface + SETTINGS and then never reads/acks anything */
    int fd = tcp_connect(h.grpc_port);
    static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    uint8_t settings[] = {0, 0, 0, 4, 0, 0, 0, 0, 0};
    send(fd, preface, 24, MSG_NOSIGNAL);
    send(fd, settings, sizeof(settings), MSG_NOSIGNAL);
    cr_assert(recv_until_closed(fd), "unanswered keepalive ping closes the connection");
    close(fd);
    /* a live nghttp2 client answers pings and stays up */
    kv_it_grpc *c;
    cr_assert_eq(connect_h2(&c, h.grpc_port), 0);
    kv_it_grpc_wait(c, NULL, 500);
    cr_assert_not(kv_it_grpc_conn_closed(c));
    kv_it_grpc_stream *st;
    unary(c, "alive", &st);
    cr_assert_eq(st->grpc_status, 0);
    kv_it_grpc_close(c);
    expect_clean_stop(&h);
    free(h.metrics_text);
}

/* Partial input past max_recv_buffer_bytes is not an error: it is held and no longer credited
 * to the connection window (the peer is flow-controlled); other calls still work, and the
 * message completes once the rest arrives. */
Test(live, recv_buffer_limit_withholds_window)
{
    harness h;
    kv_grpc_config cfg;
    kv_grpc_config_default(&cfg);
    cfg.max_request_bytes = 1 << 20;
    cfg.max_recv_buffer_bytes = 64 * 1024;
    harness_start(&h, &cfg, NULL);
    kv_it_grpc *c;
    cr_assert_eq(connect_h2(&c, h.grpc_port), 0);
    /* announce 512 KiB (allowed) but send only 200 KiB of it */
    kv_it_grpc_stream *st = start(c, "/test.Echo/Stream", NULL, NULL);
    size_t total = 512 * 1024, n = 200 * 1024;
    uint8_t *body = calloc(1, total + 5);
    body[2] = 0x08; /* 0x00080000 = 512 KiB */
    kv_it_grpc_send_raw(st, body, n + 5, 0);
    kv_it_grpc_wait(c, NULL, 300);
    cr_assert_not(st->closed, "%d %s", st->grpc_status, st->grpc_message);
    char *m = http_get(h.http_port, "/metrics");
    double withheld = 0;
    const char *p = strstr(m, "\nkvd_grpc_recv_window_withheld_bytes ");
    cr_assert_not_null(p, "%s", m);
    sscanf(p + strlen("\nkvd_grpc_recv_window_withheld_bytes "), "%lf", &withheld);
    cr_assert_gt(withheld, 100 * 1024, "%s", m);
    free(m);
    /* While saturated the connection takes no new stream (SETTINGS_MAX_CONCURRENT_STREAMS is
     * lowered to the calls in progress; the client queues the request), and would refuse a
     * new unary request with RESOURCE_EXHAUSTED; other connections are unaffected. */
    kv_it_grpc_stream *q = start(c, "/test.Echo/Unary", NULL, NULL);
    kv_it_grpc_send_msg(q, "queued", 6, 1);
    kv_it_grpc_wait(c, NULL, 200);
    cr_assert_not(q->closed);
    kv_it_grpc_stream *u;
    kv_it_grpc *other;
    cr_assert_eq(connect_h2(&other, h.grpc_port), 0);
    unary(other, "fine", &u);
    cr_assert_eq(u->grpc_status, 0);
    kv_it_grpc_close(other);
    kv_it_grpc_send_raw(st, body + n + 5, total - n, 0);
    free(body);
    cr_assert(kv_it_grpc_wait_bytes(c, st, total + 5, 5000), "the message completes");
    kv_it_grpc_send_raw(st, "", 0, 1);
    cr_assert(kv_it_grpc_wait(c, st, 5000));
    cr_assert_eq(st->grpc_status, 0);
    cr_assert(kv_it_grpc_wait(c, q, 5000), "the queued request runs once the budget frees");
    cr_assert_eq(q->grpc_status, 0);
    unary(c, "fine again", &u);
    cr_assert_eq(u->grpc_status, 0);
    kv_it_grpc_close(c);
    expect_clean_stop(&h);
    free(h.metrics_text);
}

/* Captures what a well-behaved client would send for a few calls, as raw bytes. */
static size_t client_bytes(uint8_t *out, size_t cap, unsigned seed)
{
    kv_it_grpc *c;
    kv_it_grpc_opts o = {.no_socket = 1};
    cr_assert_eq(kv_it_grpc_open_opts(&c, NULL, 0, 0, &o), 0);
    const char *paths[] = {"/test.Echo/Unary", "/test.Echo/Stream", "/nope/x"};
    for (int i = 0; i < 4; i++) {
        kv_it_grpc_stream *st =
            start(c, paths[(seed + (unsigned)i) % 3], NULL, i == 1 ? "50m" : NULL);
        char msg[64];
        snprintf(msg, sizeof(msg), "msg-%u-%d", seed, i);
        kv_it_grpc_send_msg(st, msg, strlen(msg), i != 2);
    }
    size_t len = kv_it_grpc_output(c, out, cap);
    kv_it_grpc_close(c);
    return len;
}

Test(live, mutated_client_streams_do_not_hurt_the_server)
{
    harness h;
    harness_start(&h, NULL, NULL);
    uint8_t buf[8192];
    srand(7);
    for (unsigned it = 0; it < 150; it++) {
        size_t n = client_bytes(buf, sizeof(buf), it);
        cr_assert_gt(n, 24);
        int flips = 1 + rand() % 4;
        for (int f = 0; f < flips; f++)
            buf[24 + (size_t)rand() % (n - 24)] ^= (uint8_t)(1 + rand() % 255);
        if (it % 5 == 0)
            n = 24 + (size_t)rand() % (n - 24); /* truncated as well */
        int fd = tcp_connect(h.grpc_port);
        cr_assert_geq(fd, 0);
        send(fd, buf, n, MSG_NOSIGNAL);
        if (it % 2)
            shutdown(fd, SHUT_WR);
        /* read whatever comes back for a short while, then drop the connection */
        struct timeval tv = {0, 20000};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        char rb[4096];
        while (recv(fd, rb, sizeof(rb), 0) > 0) {
        }
        close(fd);
    }
    kv_it_grpc *c;
    cr_assert_eq(connect_h2(&c, h.grpc_port), 0);
    kv_it_grpc_stream *st;
    unary(c, "survived", &st);
    cr_assert_eq(st->grpc_status, 0);
    kv_it_grpc_close(c);
    usleep(100 * 1000);
    expect_clean_stop(&h);
    free(h.metrics_text);
}
