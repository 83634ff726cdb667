/* Connection saturation (kv_grpc_conn_sync): a connection is saturated (new unary requests
 * refused with RESOURCE_EXHAUSTED, SETTINGS_MAX_CONCURRENT_STREAMS lowered) only while it
 * really holds its --max-recv-buffer-bytes of unconsumed input or withholds window credit it
 * cannot return. Regression: every DATA frame marked the connection saturated for a moment,
 * because the window credit of that frame was counted as withheld before it was returned in
 * the same pass; pipelined requests behind it were refused and the client saw SETTINGS flap.
 * The real bound is covered by test_live.c (recv_buffer_limit_withholds_window,
 * interleaved_bodies_make_progress). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grpc_raw.h"
#include "test_support.h"

/* One connection: a long-lived bidi stream (a keepalive) plus rounds of pipelined unary calls,
 * each round written in one go so the server reads HEADERS and DATA of many calls in one pass.
 * Under this light load (a few KiB against a 16 MiB budget) nothing may be refused and the
 * server must never lower SETTINGS_MAX_CONCURRENT_STREAMS. */
Test(saturation, light_load_never_refuses_streams)
{
    harness h;
    harness_start(&h, NULL, NULL);
    kv_it_grpc *c;
    cr_assert_eq(kv_it_grpc_open_opts(&c, "127.0.0.1", (uint16_t)h.grpc_port, 5000, NULL), 0);
    kv_it_grpc_stream *ka = kv_it_grpc_stream_start(c, "/test.Echo/Stream", NULL);
    cr_assert_not_null(ka);
    cr_assert_eq(kv_it_grpc_send_msg(ka, "ka-0", 4, 0), 0);
    cr_assert(kv_it_grpc_wait_bytes(c, ka, 9, 5000), "keepalive stream echoes");
    /* The server's initial SETTINGS and its ACK of ours are in by now. */
    kv_it_grpc_wait(c, NULL, 100);
    uint64_t settings0 = kv_it_grpc_frames_received(c, NGHTTP2_SETTINGS);
    enum { ROUNDS = 40, PER = 16 };
    int ok = 0, exhausted = 0, refused = 0, other = 0;
    size_t ka_expect = 9;
    for (int r = 0; r < ROUNDS; r++) {
        kv_it_grpc_stream *st[PER];
        char msg[32];
        for (int i = 0; i < PER; i++) {
            st[i] = kv_it_grpc_stream_start(c, "/test.Echo/Unary", NULL);
            cr_assert_not_null(st[i]);
            snprintf(msg, sizeof(msg), "u-%d-%d", r, i);
            cr_assert_eq(kv_it_grpc_send_msg(st[i], msg, strlen(msg), 1), 0);
        }
        snprintf(msg, sizeof(msg), "ka-%d", r % 10);
        cr_assert_eq(kv_it_grpc_send_msg(ka, msg, strlen(msg), 0), 0);
        ka_expect += 5 + strlen(msg);
        cr_assert_eq(kv_it_grpc_flush(c, 5000), 0);
        for (int i = 0; i < PER; i++) {
            cr_assert(kv_it_grpc_wait(c, st[i], 5000), "round %d call %d never ended", r, i);
            if (st[i]->grpc_status == 0)
                ok++;
            else if (st[i]->grpc_status == 8)
                exhausted++;
            else if (st[i]->close_code == NGHTTP2_REFUSED_STREAM)
                refused++;
            else
                other++;
            kv_it_grpc_stream_free(st[i]);
        }
        cr_assert(kv_it_grpc_wait_bytes(c, ka, ka_expect, 5000), "keepalive echo, round %d", r);
        cr_assert_not(ka->closed, "the keepalive stream stays open");
    }
    uint64_t settings1 = kv_it_grpc_frames_received(c, NGHTTP2_SETTINGS);
    cr_log_info("ok %d exhausted %d refused %d other %d; SETTINGS frames %llu -> %llu", ok,
                exhausted, refused, other, (unsigned long long)settings0,
                (unsigned long long)settings1);
    cr_expect_eq(exhausted, 0, "no request refused with RESOURCE_EXHAUSTED under light load");
    cr_expect_eq(refused, 0, "no stream refused (REFUSED_STREAM) under light load");
    cr_expect_eq(other, 0);
    cr_expect_eq(ok, ROUNDS * PER);
    cr_expect_eq(settings1, settings0, "SETTINGS never re-sent (MAX_CONCURRENT_STREAMS kept)");
    kv_it_grpc_send_raw(ka, "", 0, 1);
    cr_assert(kv_it_grpc_wait(c, ka, 5000));
    cr_assert_eq(ka->grpc_status, 0);
    kv_it_grpc_close(c);
    harness_stop(&h);
    cr_assert_eq(h.loop_close_rv, 0);
    cr_assert_not_null(h.metrics_text);
    cr_expect_eq(
        metric_value(h.metrics_text, "\nkvd_grpc_requests_refused_total{reason=\"recv_buffer\"} "),
        0, "%s", h.metrics_text);
    cr_expect_eq(metric_value(h.metrics_text, "\nkvd_grpc_recv_window_withheld_bytes "), 0);
    free(h.metrics_text);
}

/* The bound still holds with the fix: a connection holding more than max_recv_buffer_bytes of
 * partial input is saturated (a new unary request on it is held back, not run), and recovers
 * once the input completes. */
Test(saturation, real_bound_still_saturates)
{
    harness h;
    kv_grpc_config cfg;
    kv_grpc_config_default(&cfg);
    cfg.max_request_bytes = 1 << 20;
    cfg.max_recv_buffer_bytes = 64 * 1024;
    harness_start(&h, &cfg, NULL);
    kv_it_grpc *c;
    cr_assert_eq(kv_it_grpc_open_opts(&c, "127.0.0.1", (uint16_t)h.grpc_port, 5000, NULL), 0);
    kv_it_grpc_wait(c, NULL, 100); /* SETTINGS exchanged */
    uint64_t settings0 = kv_it_grpc_frames_received(c, NGHTTP2_SETTINGS);
    kv_it_grpc_stream *st = kv_it_grpc_stream_start(c, "/test.Echo/Stream", NULL);
    size_t total = 512 * 1024, n = 200 * 1024;
    uint8_t *body = calloc(1, total + 5);
    cr_assert_not_null(body);
    body[2] = 0x08; /* 512 KiB message, only 200 KiB of it sent for now */
    kv_it_grpc_send_raw(st, body, n + 5, 0);
    kv_it_grpc_wait(c, NULL, 300);
    kv_it_grpc_stream *q = kv_it_grpc_stream_start(c, "/test.Echo/Unary", NULL);
    kv_it_grpc_send_msg(q, "queued", 6, 1);
    kv_it_grpc_wait(c, NULL, 200);
    cr_assert_not(q->closed, "a saturated connection runs no new request");
    cr_assert_gt(kv_it_grpc_frames_received(c, NGHTTP2_SETTINGS), settings0,
                 "MAX_CONCURRENT_STREAMS lowered while saturated");
    kv_it_grpc_send_raw(st, body + n + 5, total - n, 0);
    free(body);
    cr_assert(kv_it_grpc_wait_bytes(c, st, total + 5, 5000), "the message completes");
    kv_it_grpc_send_raw(st, "", 0, 1);
    cr_assert(kv_it_grpc_wait(c, st, 5000));
    cr_assert_eq(st->grpc_status, 0);
    cr_assert(kv_it_grpc_wait(c, q, 5000), "the held request runs once the budget frees");
    cr_assert_eq(q->grpc_status, 0);
    kv_it_grpc_close(c);
    harness_stop(&h);
    cr_assert_eq(h.loop_close_rv, 0);
    free(h.metrics_text);
}

/* Priority methods (kv_grpc_config.priority_methods: kvd's lease renewals and lease reads) are
 * served ahead of bulk requests: while the app holds max_pending_request_bytes of unanswered
 * unary requests (e.g. writes waiting for a commit), other unary requests wait, but a
 * priority one is delivered and answered at once. */
Test(saturation, priority_method_not_held_behind_pending_requests)
{
    static const char *const prio[] = {"/test.Echo/Priority", NULL};
    harness h;
    kv_grpc_config cfg;
    kv_grpc_config_default(&cfg);
    cfg.max_pending_request_bytes = 8; /* two "hold" requests (4 bytes each) fill it */
    cfg.priority_methods = prio;
    harness_start(&h, &cfg, NULL);
    kv_it_grpc *c;
    cr_assert_eq(kv_it_grpc_open_opts(&c, "127.0.0.1", (uint16_t)h.grpc_port, 5000, NULL), 0);
    kv_it_grpc_stream *hold[2];
    for (int i = 0; i < 2; i++) {
        hold[i] = kv_it_grpc_stream_start(c, "/test.Echo/Unary", NULL);
        cr_assert_not_null(hold[i]);
        kv_it_grpc_send_msg(hold[i], "hold", 4, 1);
    }
    kv_it_grpc_wait(c, NULL, 200);
    cr_assert_not(hold[0]->closed);
    cr_assert_not(hold[1]->closed);
    kv_it_grpc_stream *bulk = kv_it_grpc_stream_start(c, "/test.Echo/Unary", NULL);
    kv_it_grpc_send_msg(bulk, "bulk", 4, 1);
    kv_it_grpc_wait(c, NULL, 300);
    cr_assert_not(bulk->closed, "an ordinary request waits while the app is full");
    kv_it_grpc_stream *p = kv_it_grpc_stream_start(c, "/test.Echo/Priority", NULL);
    kv_it_grpc_send_msg(p, "renew", 5, 1);
    cr_assert(kv_it_grpc_wait(c, p, 5000), "the priority request is answered");
    cr_assert_eq(p->grpc_status, 0, "%d '%s'", p->grpc_status, p->grpc_message);
    cr_assert_eq(kv_it_grpc_stream_msgs(p, 0, NULL, NULL), 1);
    cr_assert_not(bulk->closed, "the ordinary request still waits");
    /* The held requests go away: the ordinary one is delivered. */
    kv_it_grpc_stream_cancel(hold[0]);
    kv_it_grpc_stream_cancel(hold[1]);
    cr_assert(kv_it_grpc_wait(c, bulk, 5000));
    cr_assert_eq(bulk->grpc_status, 0);
    kv_it_grpc_close(c);
    harness_stop(&h);
    cr_assert_eq(h.loop_close_rv, 0);
    free(h.metrics_text);
}
