/*
 * test_accept_gate: a listener cannot hold the event loop (server/net/accept_gate.h).
 *
 * The flood here is deterministic: every accepted connection is closed and, from inside the
 * connection callback, replaced by a new loopback connect (the kernel queues it at once), so
 * the listener's accept queue is never empty while the flood lasts, like a stranger who
 * reconnects as fast as kvd closes it. Without the gate libuv stays in its accept loop until
 * the flood ends: every accept happens in one loop iteration and a 1 ms timer never fires
 * during it. With the gate each iteration accepts at most the burst, and the timer fires.
 */
#include "net/accept_gate.h"
#include "net/listen.h"

#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#define FLOOD_TOTAL 3000

typedef struct fixture {
    uv_loop_t loop;
    uv_tcp_t listener;
    uv_timer_t timer;
    uv_check_t iter; /* counts loop iterations that accepted something */
    kv_accept_gate gate;
    int use_gate, port;
    int accepted, in_iter, max_in_iter, timer_fires, timer_fires_during_flood, iters;
    int flood_fds[8];
} fixture;

static int connect_nb(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0 && errno != EINPROGRESS) {
        int e = -errno;
        close(fd);
        return e;
    }
    return fd;
}

static void closed_free(uv_handle_t *h)
{
    free(h);
}

static void on_conn(uv_stream_t *server, int status)
{
    fixture *f = server->data;
    if (status < 0)
        return;
    if (f->use_gate && !kv_accept_gate_admit(&f->gate, server))
        return;
    uv_tcp_t *c = malloc(sizeof(*c));
    cr_assert_not_null(c);
    uv_tcp_init(&f->loop, c);
    cr_assert_eq(uv_accept(server, (uv_stream_t *)c), 0);
    uv_close((uv_handle_t *)c, closed_free);
    f->accepted++;
    f->in_iter++;
    if (f->in_iter > f->max_in_iter)
        f->max_in_iter = f->in_iter;
    /* the stranger reconnects at once: one slot of 8 client sockets, reused round-robin */
    int slot = f->accepted % 8;
    if (f->flood_fds[slot] >= 0)
        close(f->flood_fds[slot]);
    f->flood_fds[slot] = -1;
    if (f->accepted + 8 <= FLOOD_TOTAL)
        f->flood_fds[slot] = connect_nb(f->port);
}

static void on_timer(uv_timer_t *t)
{
    fixture *f = t->data;
    f->timer_fires++;
    if (f->accepted < FLOOD_TOTAL - 8)
        f->timer_fires_during_flood++;
    if (f->accepted >= FLOOD_TOTAL - 8) {
        uv_timer_stop(t);
        uv_close((uv_handle_t *)&f->listener, NULL);
        uv_close((uv_handle_t *)&f->timer, NULL);
        uv_close((uv_handle_t *)&f->iter, NULL);
        if (f->use_gate)
            kv_accept_gate_close(&f->gate, NULL);
    }
}

static void on_iter(uv_check_t *h)
{
    fixture *f = h->data;
    if (f->in_iter > 0)
        f->iters++;
    f->in_iter = 0;
}

static void run_flood(fixture *f, int use_gate)
{
    memset(f, 0, sizeof(*f));
    for (int i = 0; i < 8; i++)
        f->flood_fds[i] = -1;
    f->use_gate = use_gate;
    cr_assert_eq(uv_loop_init(&f->loop), 0);
    uv_tcp_init(&f->loop, &f->listener);
    f->listener.data = f;
    uv_timer_init(&f->loop, &f->timer);
    f->timer.data = f;
    uv_check_init(&f->loop, &f->iter);
    f->iter.data = f;
    uv_check_start(&f->iter, on_iter);
    if (use_gate)
        cr_assert_eq(kv_accept_gate_init(&f->gate, &f->loop, 0, on_conn, f), 0);
    cr_assert_eq(kv_net_listen(&f->listener, "127.0.0.1", 0, 128, on_conn), 0);
    f->port = kv_net_bound_port(&f->listener);
    cr_assert_gt(f->port, 0);
    for (int i = 0; i < 8; i++)
        f->flood_fds[i] = connect_nb(f->port);
    uv_timer_start(&f->timer, on_timer, 1, 1);
    cr_assert_eq(uv_run(&f->loop, UV_RUN_DEFAULT), 0);
    for (int i = 0; i < 8; i++)
        if (f->flood_fds[i] >= 0)
            close(f->flood_fds[i]);
    cr_assert_eq(uv_loop_close(&f->loop), 0);
    fprintf(stderr,
            "  gate %s: %d accepted in %d loop iterations (at most %d in one); the 1 ms timer "
            "fired %d times during the flood\n",
            use_gate ? "on" : "off", f->accepted, f->iters, f->max_in_iter,
            f->timer_fires_during_flood);
}

Test(accept_gate, a_reconnecting_flood_cannot_hold_the_loop, .timeout = 60)
{
    static fixture f;
    run_flood(&f, 1);
    cr_assert_geq(f.accepted, FLOOD_TOTAL - 8);
    cr_assert_leq(f.max_in_iter, KV_ACCEPT_BURST + 1, "one iteration accepted %d", f.max_in_iter);
    cr_assert_gt(f.timer_fires_during_flood, 0, "timers starved for the whole flood");
    cr_assert_gt(f.gate.deferrals, 0, "the burst was never reached: the flood did not flood");
}

/* The premise: without the gate the same flood holds the loop in one iteration. If libuv ever
 * bounds its accept loop itself this fails, and the gate can go. */
Test(accept_gate, without_the_gate_the_flood_holds_the_loop, .timeout = 60)
{
    static fixture f;
    run_flood(&f, 0);
    cr_assert_geq(f.accepted, FLOOD_TOTAL - 8);
    cr_assert_gt(f.max_in_iter, 10 * KV_ACCEPT_BURST, "libuv's accept loop is bounded now?");
}
