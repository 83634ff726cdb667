/* test_peer_prio.c - the per-peer priority queue (peer_prio.c, kv_peer_net_send_prio): frames
 * sent on it overtake ordinary frames queued before them, at a frame boundary; they are bounded
 * by their own max_prio_queue_bytes and never by a full ordinary queue. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "fixture.h"

typedef struct count_arg {
    fx_node *n;
    uint64_t want;
} count_arg;

static int got_msgs(void *arg)
{
    count_arg *c = arg;
    return c->n->msgs >= c->want;
}

/* Frame seq (len bytes) in the fixture's format, on the priority queue. */
static int send_prio(fx *f, int i, int j, uint64_t seq, size_t len)
{
    static uint8_t buf[128 * 1024];
    cr_assert(len >= 8 && len <= sizeof(buf));
    for (int k = 0; k < 8; k++)
        buf[k] = (uint8_t)(seq >> (56 - 8 * k));
    for (size_t k = 8; k < len; k++)
        buf[k] = fx_pattern(seq, k);
    return kv_peer_net_send_prio(f->n[i].net, f->n[j].id, 9, buf, len);
}

/* 40 ordinary frames of 200 KiB (8 MB) are queued, then one priority frame (sequence number
 * 40). The receiver's order check (fixture: seq must follow the previous one) then counts
 * exactly 2 errors when the priority frame arrived ahead of ordinary ones (40 where 0..39 was
 * due, then 0 where 41 was), and 0 if it waited behind them (plain FIFO). */
Test(peer_prio, priority_frame_overtakes_queued_frames)
{
    fx f;
    fx_start_pair(&f);
    enum { N = 40 };
    for (int k = 0; k < N; k++)
        cr_assert_eq(fx_send(&f, 0, 1, 7, (uint64_t)k, 200 * 1024), 0);
    cr_assert_gt(fx_metric(&f, 0, "kvd_peer_queued_bytes", 2), 4 << 20);
    cr_assert_eq(send_prio(&f, 0, 1, N, 100), 0);
    cr_assert_eq(fx_metric(&f, 0, "kvd_peer_priority_queued_bytes", 2), 108);
    count_arg c = {&f.n[1], N + 1};
    cr_assert(fx_run_until(&f, got_msgs, &c, 20000), "got %llu of %d frames",
              (unsigned long long)f.n[1].msgs, N + 1);
    cr_assert_eq(f.n[1].content_errors, 0);
    cr_assert_eq(f.n[1].order_errors, 2, "the priority frame did not overtake (%llu)",
                 (unsigned long long)f.n[1].order_errors);
    cr_assert_eq(fx_metric(&f, 0, "kvd_peer_priority_frames_sent_total", 2), 1);
    cr_assert_eq(fx_metric(&f, 0, "kvd_peer_priority_queued_bytes", 2), 0);
    cr_assert_eq(fx_metric(&f, 0, "kvd_peer_queued_bytes", 2), 0);
    fx_fini(&f);
}

/* A full ordinary queue does not stop priority frames; the priority queue has its own bound
 * (-EAGAIN, counted), and frames on it arrive in order among themselves. */
Test(peer_prio, own_bound_independent_of_ordinary_queue)
{
    fx f;
    fx_init(&f);
    for (int i = 0; i < 2; i++) {
        fx_config(&f, i, 0xc1);
        f.n[i].cfg.max_queue_bytes = 256 * 1024;
        f.n[i].cfg.max_prio_queue_bytes = 64 * 1024;
    }
    fx_start(&f, 0);
    fx_start(&f, 1);
    fx_add(&f, 0, 1);
    fx_add(&f, 1, 0);
    fx_wait_up(&f, 0, 1);
    uint64_t seq = 0;
    while (fx_send(&f, 0, 1, 7, seq, 4096) == 0)
        seq++;
    cr_assert_eq(fx_send(&f, 0, 1, 7, seq, 4096), -EAGAIN, "the ordinary queue is full");
    /* Priority frames: numbered on, so the receiver's order check still holds for them. */
    cr_assert_eq(send_prio(&f, 0, 1, 1000, 70 * 1024), -EMSGSIZE);
    int ok = 0, eagain = 0;
    for (int k = 0; k < 40; k++) {
        int rc = send_prio(&f, 0, 1, 1000 + (uint64_t)ok, 4096);
        if (rc == 0)
            ok++;
        else {
            cr_assert_eq(rc, -EAGAIN);
            eagain++;
        }
    }
    cr_assert_eq(ok, 15, "64 KiB hold 15 frames of 4104 bytes");
    cr_assert_eq(eagain, 40 - 15);
    cr_assert_eq(fx_metric(&f, 0, "kvd_peer_priority_frames_dropped_total", 2), 40 - 15);
    count_arg c = {&f.n[1], seq + (uint64_t)ok};
    cr_assert(fx_run_until(&f, got_msgs, &c, 10000));
    cr_assert_eq(f.n[1].content_errors, 0);
    /* ordinary 0..seq-1 and priority 1000.. interleave: each switch is one order error */
    cr_assert_geq(f.n[1].order_errors, 1);
    cr_assert_eq(fx_metric(&f, 0, "kvd_peer_priority_frames_sent_total", 2), ok);
    cr_assert_eq(fx_metric(&f, 0, "kvd_peer_priority_queued_bytes", 2), 0);
    fx_fini(&f);
}
