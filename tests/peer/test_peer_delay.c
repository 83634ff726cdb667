/* test_peer_delay.c - the peer delay failpoint (peer_delay.c, kv_peer_net_set_delay): frames
 * member 0 sends and receives are held D +- J ms, in order per peer and direction; held
 * outgoing bytes count against the peer's send queue bound; switched off, held frames drain
 * and later frames are not held; closing with frames held leaks nothing. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "fixture.h"
#include "peer/peer_delay.h"

typedef struct count_arg {
    fx_node *n;
    uint64_t want;
} count_arg;

static int got_msgs(void *arg)
{
    count_arg *c = arg;
    return c->n->msgs >= c->want;
}

static double net_metric(fx *f, int i, const char *name)
{
    kv_metric *m = strstr(name, "_total") ? kv_metrics_counter(f->n[i].m, name, "x", NULL)
                                          : kv_metrics_gauge(f->n[i].m, name, "x", NULL);
    return kv_metric_value(m);
}

Test(peer_delay, parse)
{
    uint32_t d = 0, j = 0;
    cr_assert_eq(kv_peer_delay_parse("300", &d, &j), 0);
    cr_assert(d == 300 && j == 0);
    cr_assert_eq(kv_peer_delay_parse("600,500", &d, &j), 0);
    cr_assert(d == 600 && j == 500);
    cr_assert_eq(kv_peer_delay_parse("0", &d, &j), -EINVAL);
    cr_assert_eq(kv_peer_delay_parse("100,200", &d, &j), -EINVAL);
    cr_assert_eq(kv_peer_delay_parse("10x", &d, &j), -EINVAL);
    cr_assert_eq(kv_peer_delay_parse("", &d, &j), -EINVAL);
}

/* 200 +- 150 ms on member 0: 100 frames each way are held (none arrives within 40 ms), then
 * all arrive, in order, intact; 200 frames counted as delayed. */
Test(peer_delay, tx_and_rx_held_in_order_with_jitter)
{
    fx f;
    fx_start_pair(&f);
    cr_assert_eq(kv_peer_net_set_delay(f.n[0].net, 200, 150), 0);
    enum { N = 100 };
    for (int k = 0; k < N; k++) {
        cr_assert_eq(fx_send(&f, 0, 1, 7, (uint64_t)k, 1000), 0);
        cr_assert_eq(fx_send(&f, 1, 0, 7, (uint64_t)k, 1000), 0);
    }
    fx_run_for(&f, 40);
    cr_assert_eq(f.n[1].msgs, 0, "a sent frame was not held");
    cr_assert_eq(f.n[0].msgs, 0, "a received frame was not held");
    cr_assert_gt(net_metric(&f, 0, "kvd_peer_delayed_bytes"), 0);
    count_arg c1 = {&f.n[1], N}, c0 = {&f.n[0], N};
    cr_assert(fx_run_until(&f, got_msgs, &c1, 10000));
    cr_assert(fx_run_until(&f, got_msgs, &c0, 10000));
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(f.n[i].order_errors, 0, "m%d: frames reordered", i);
        cr_assert_eq(f.n[i].content_errors, 0);
    }
    cr_assert_eq(net_metric(&f, 0, "kvd_peer_frames_delayed_total"), 2 * N);
    cr_assert_eq(net_metric(&f, 0, "kvd_peer_delayed_bytes"), 0);
    fx_fini(&f);
}

/* Held outgoing frames count against max_queue_bytes (64 KiB): -EAGAIN past it, counted as
 * dropped; after the delay is off the held ones arrive in order and new frames are not held. */
Test(peer_delay, bounded_by_the_send_queue_then_off)
{
    fx f;
    fx_init(&f);
    for (int i = 0; i < 2; i++) {
        fx_config(&f, i, 0xc1);
        f.n[i].cfg.max_queue_bytes = 64 * 1024;
    }
    fx_start(&f, 0);
    fx_start(&f, 1);
    fx_add(&f, 0, 1);
    fx_add(&f, 1, 0);
    fx_wait_up(&f, 0, 1);
    cr_assert_eq(kv_peer_net_set_delay(f.n[0].net, 300, 0), 0);
    uint64_t seq = 0;
    while (seq < 1000 && fx_send(&f, 0, 1, 7, seq, 4096) == 0)
        seq++;
    cr_assert_lt(seq, 16, "%llu frames of 4 KiB held within a 64 KiB bound",
                 (unsigned long long)seq);
    cr_assert_eq(fx_send(&f, 0, 1, 7, seq, 4096), -EAGAIN);
    cr_assert_geq(fx_metric(&f, 0, "kvd_peer_frames_dropped_total", 2), 2);
    cr_assert_eq(kv_peer_net_set_delay(f.n[0].net, 0, 0), 0);
    count_arg c = {&f.n[1], seq};
    cr_assert(fx_run_until(&f, got_msgs, &c, 10000));
    cr_assert_eq(f.n[1].order_errors, 0);
    double held = net_metric(&f, 0, "kvd_peer_frames_delayed_total");
    cr_assert_eq(held, (double)seq);
    cr_assert_eq(fx_send(&f, 0, 1, 7, seq, 4096), 0);
    c.want = seq + 1;
    cr_assert(fx_run_until(&f, got_msgs, &c, 10000));
    cr_assert_eq(net_metric(&f, 0, "kvd_peer_frames_delayed_total"), held, "held while off");
    fx_fini(&f);
}

/* Closing member 0 with frames held frees them (ASan's leak check; fx_fini checks handles). */
Test(peer_delay, close_with_frames_held)
{
    fx f;
    fx_start_pair(&f);
    cr_assert_eq(kv_peer_net_set_delay(f.n[0].net, 5000, 0), 0);
    for (int k = 0; k < 10; k++) {
        cr_assert_eq(fx_send(&f, 0, 1, 7, (uint64_t)k, 500), 0);
        cr_assert_eq(fx_send(&f, 1, 0, 7, (uint64_t)k, 500), 0);
    }
    fx_run_for(&f, 50);
    cr_assert_eq(f.n[0].msgs + f.n[1].msgs, 0);
    fx_fini(&f);
}
