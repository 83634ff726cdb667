/* test_peer_net.c - the peer transport's frames, connections, bounds and failure handling,
 * with 2-3 in-process members on one uv loop (fixture.h). */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fixture.h"

#if defined(__SANITIZE_ADDRESS__)
/* ASan keeps freed blocks in a quarantine (256 MB by default) that counts in RSS; a small one
 * keeps the RSS assertion below meaningful in the sanitizer build. ASAN_OPTIONS still wins. */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
    return "quarantine_size_mb=4";
}
#endif

typedef struct pair_arg {
    fx *f;
    int a, b;
} pair_arg;

typedef struct count_arg {
    fx_node *n;
    uint64_t want;
} count_arg;

static int got_msgs(void *arg)
{
    count_arg *c = arg;
    return c->n->msgs >= c->want;
}

Test(peer_net, frames_both_directions_in_order_one_connection_per_pair)
{
    fx f;
    fx_init(&f);
    for (int i = 0; i < 3; i++) {
        fx_config(&f, i, 0xc1);
        fx_start(&f, i);
    }
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            if (i != j)
                fx_add(&f, i, j);
    fx_wait_up(&f, 0, 1);
    fx_wait_up(&f, 0, 2);
    fx_wait_up(&f, 1, 2);
    /* every member sends N frames of assorted sizes to each other member, interleaved */
    const int N = 600;
    for (int k = 0; k < N; k++)
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 3; j++)
                if (i != j) {
                    size_t len = 8 + (size_t)((k * 131 + i * 17 + j) % 3000);
                    if (k % 97 == 0)
                        len = 200 * 1024; /* some frames span many DATA frames */
                    cr_assert_eq(fx_send(&f, i, j, (uint32_t)k, (uint64_t)k, len), 0);
                    if (k % 50 == 0)
                        uv_run(&f.loop, UV_RUN_NOWAIT);
                }
    for (int i = 0; i < 3; i++) {
        count_arg c = {&f.n[i], 2 * (uint64_t)N};
        cr_assert(fx_run_until(&f, got_msgs, &c, 20000), "member %d got %llu of %d frames", i,
                  (unsigned long long)f.n[i].msgs, 2 * N);
        cr_assert_eq(f.n[i].msgs, 2 * (uint64_t)N);
        cr_assert_eq(f.n[i].order_errors, 0);
        cr_assert_eq(f.n[i].content_errors, 0);
    }
    cr_assert_eq(fx_metric(&f, 0, "kvd_peer_frames_sent_total", 2), N);
    cr_assert_eq(fx_metric(&f, 2, "kvd_peer_frames_received_total", 1), N);
    /* stay idle for several PING intervals: connections are kept, never duplicated */
    fx_run_for(&f, 1000);
    /* 1 dials 2 and 3; 2 dials 3. Accepted sockets: 0 on member 1, 1 on 2, 2 on 3. */
    cr_assert_eq(fx_established_local(f.n[0].port), 0);
    cr_assert_eq(fx_established_local(f.n[1].port), 1);
    cr_assert_eq(fx_established_local(f.n[2].port), 2);
    cr_assert_eq(fx_established_remote(f.n[1].port), 1);
    cr_assert_eq(fx_established_remote(f.n[2].port), 2);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            if (i != j) {
                cr_assert_eq(fx_metric(&f, i, "kvd_peer_connects_total", f.n[j].id), 1);
                cr_assert_eq(fx_metric(&f, i, "kvd_peer_connected", f.n[j].id), 1);
            }
    fx_fini(&f);
}

Test(peer_net, queue_bound_drops_with_eagain_and_memory_stays_flat)
{
    fx f;
    fx_init(&f);
    for (int i = 0; i < 2; i++) {
        fx_config(&f, i, 0xc1);
        f.n[i].cfg.max_queue_bytes = 256 * 1024;
    }
    fx_start(&f, 0);
    fx_start(&f, 1);
    fx_add(&f, 0, 1);
    fx_add(&f, 1, 0);
    fx_wait_up(&f, 0, 1);
    cr_assert_eq(fx_send(&f, 0, 1, 1, 0, 300 * 1024), -EMSGSIZE);
    uint64_t seq = 0, dropped = 0, rss0 = 0;
    for (int round = 0; round < 120; round++) {
        /* a burst far larger than the queue, without running the loop */
        int eagain = 0;
        for (int k = 0; k < 400; k++) {
            int rc = fx_send(&f, 0, 1, 7, seq, 4096);
            if (rc == 0) {
                seq++;
            } else {
                cr_assert_eq(rc, -EAGAIN);
                eagain++;
            }
            cr_assert_leq(fx_metric(&f, 0, "kvd_peer_queued_bytes", 2), 256 * 1024);
        }
        cr_assert_gt(eagain, 0);
        dropped += (uint64_t)eagain;
        count_arg c = {&f.n[1], seq};
        cr_assert(fx_run_until(&f, got_msgs, &c, 10000));
        if (round == 20)
            rss0 = fx_rss();
    }
    uint64_t rss1 = fx_rss();
    cr_assert_eq(f.n[1].msgs, seq);
    cr_assert_eq(f.n[1].content_errors, 0);
    /* frames accepted arrive in order; the rejected ones were never queued */
    cr_assert_eq(f.n[1].order_errors, 0);
    cr_assert_eq(fx_metric(&f, 0, "kvd_peer_frames_dropped_total", 2), (double)dropped);
    cr_assert_eq(fx_metric(&f, 0, "kvd_peer_queued_bytes", 2), 0);
    cr_log_info("sent %llu, dropped %llu, rss %llu -> %llu KiB", (unsigned long long)seq,
                (unsigned long long)dropped, (unsigned long long)rss0 / 1024,
                (unsigned long long)rss1 / 1024);
    /* 100 rounds push ~100 x 1.6 MB through a 256 KiB queue */
    cr_assert_lt(rss1, rss0 + 8 * 1024 * 1024, "RSS grew from %llu to %llu",
                 (unsigned long long)rss0, (unsigned long long)rss1);
    fx_fini(&f);
}

static int down_seen(void *arg)
{
    pair_arg *p = arg;
    return !kv_peer_net_is_up(p->f->n[p->a].net, p->f->n[p->b].id);
}

Test(peer_net, restarted_peer_is_redialed_and_frames_flow)
{
    fx f;
    fx_start_pair(&f);
    cr_assert_eq(fx_send(&f, 0, 1, 1, 0, 100), 0);
    count_arg c = {&f.n[1], 1};
    cr_assert(fx_run_until(&f, got_msgs, &c, 5000));
    for (int r = 0; r < 2; r++) {
        /* restart the acceptor (2), then the dialer (1) */
        int victim = r == 0 ? 1 : 0, other = 1 - victim;
        fx_stop(&f, victim);
        pair_arg p = {&f, other, victim};
        cr_assert(fx_run_until(&f, down_seen, &p, 5000));
        cr_assert_eq(fx_send(&f, other, victim, 1, 1, 100), -ENOTCONN);
        fx_run_for(&f, 300); /* a few failed dials */
        fx_start(&f, victim);
        fx_add(&f, victim, other);
        fx_wait_up(&f, 0, 1);
        f.n[victim].msgs = 0;
        f.n[other].msgs = 0;
        f.n[victim].next_seq[f.n[other].id] = 10;
        f.n[other].next_seq[f.n[victim].id] = 10;
        for (uint64_t k = 10; k < 20; k++) {
            cr_assert_eq(fx_send(&f, other, victim, 1, k, 64), 0);
            cr_assert_eq(fx_send(&f, victim, other, 1, k, 64), 0);
        }
        count_arg c1 = {&f.n[victim], 10}, c2 = {&f.n[other], 10};
        cr_assert(fx_run_until(&f, got_msgs, &c1, 5000));
        cr_assert(fx_run_until(&f, got_msgs, &c2, 5000));
        cr_assert_eq(f.n[victim].order_errors + f.n[other].order_errors, 0);
        cr_assert_eq(fx_metric(&f, other, "kvd_peer_connects_total", f.n[victim].id), 2 + r);
        cr_assert_geq(f.n[other].downs[f.n[victim].id], 1 + r);
    }
    fx_fini(&f);
}

/* Captures stderr into a file for log assertions. */
typedef struct cap {
    int saved;
    char path[300];
} cap;

static void cap_start(cap *c, fx *f)
{
    fflush(stderr);
    snprintf(c->path, sizeof(c->path), "%s/stderr.log", f->dir);
    int fd = open(c->path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    cr_assert_geq(fd, 0);
    c->saved = dup(2);
    dup2(fd, 2);
    close(fd);
}

/* Restores stderr; returns the captured text (malloc'd) and echoes it. */
static char *cap_stop(cap *c)
{
    fflush(stderr);
    dup2(c->saved, 2);
    close(c->saved);
    FILE *fp = fopen(c->path, "r");
    cr_assert_not_null(fp);
    char *buf = calloc(1, 1 << 20);
    size_t n = fread(buf, 1, (1 << 20) - 1, fp);
    buf[n] = 0;
    fclose(fp);
    fputs(buf, stderr);
    return buf;
}

static int never(void *arg)
{
    (void)arg;
    return 0;
}

Test(peer_net, cluster_id_mismatch_and_wrong_member_refused)
{
    fx f;
    cap c;
    fx_init(&f);
    fx_config(&f, 0, 0xaaa);
    fx_config(&f, 1, 0xbbb);
    fx_config(&f, 2, 0xaaa);
    for (int i = 0; i < 3; i++)
        fx_start(&f, i);
    cap_start(&c, &f);
    fx_add(&f, 0, 1); /* member 1 (cluster aaa) dials member 2 (cluster bbb) */
    fx_add(&f, 1, 0);
    /* member 1 dials member 3's port believing it is member 4 */
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", f.n[2].port);
    cr_assert_eq(kv_peer_net_add_peer(f.n[0].net, 4, url), 0);
    fx_run_until(&f, never, NULL, 1000);
    char *log = cap_stop(&c);
    cr_assert_not(kv_peer_net_is_up(f.n[0].net, 2));
    cr_assert_not(kv_peer_net_is_up(f.n[1].net, 1));
    cr_assert_not(kv_peer_net_is_up(f.n[0].net, 4));
    cr_assert_eq(fx_metric(&f, 1, "kvd_peer_connects_total", 1), 0);
    cr_assert_eq(fx_send(&f, 0, 1, 1, 0, 8), -ENOTCONN);
    /* the acceptor (2) and the dialer (1) both say why */
    cr_assert_not_null(
        strstr(log, "(member 2): rejected peer 1: cluster id mismatch (theirs aaa, ours bbb)"),
        "%s", log);
    cr_assert_not_null(
        strstr(log, "(member 1): rejected peer 2: cluster id mismatch (theirs bbb, ours aaa)"),
        "%s", log);
    cr_assert_not_null(strstr(log, "(member 3): rejected peer 1: member id mismatch"), "%s", log);
    free(log);
    fx_fini(&f);
}

typedef struct sock_arg {
    int fd;
    int closed;
} sock_arg;

static int sock_closed(void *arg)
{
    sock_arg *s = arg;
    struct pollfd p = {.fd = s->fd, .events = POLLIN};
    if (poll(&p, 1, 0) > 0) {
        char b[4096];
        ssize_t r = read(s->fd, b, sizeof(b));
        if (r <= 0)
            s->closed = 1;
    }
    return s->closed;
}

static int raw_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    return fd;
}

Test(peer_net, garbage_and_oversized_frames_close_only_that_connection)
{
    fx f;
    fx_init(&f);
    fx_config(&f, 0, 0xc1);
    fx_config(&f, 1, 0xc1);
    f.n[1].cfg.max_frame_bytes = 1024; /* member 2 accepts smaller frames than 1 sends */
    fx_start(&f, 0);
    fx_start(&f, 1);
    fx_add(&f, 0, 1);
    fx_add(&f, 1, 0);
    fx_wait_up(&f, 0, 1);
    /* garbage preface on both members' peer ports */
    for (int i = 0; i < 2; i++) {
        sock_arg s = {raw_connect(f.n[i].port), 0};
        const char junk[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n\x00\xff\xfe garbage garbage";
        cr_assert_eq(write(s.fd, junk, sizeof(junk)), (ssize_t)sizeof(junk));
        cr_assert(fx_run_until(&f, sock_closed, &s, 5000), "garbage connection kept open");
        close(s.fd);
    }
    /* a client that sends nothing is closed after the handshake deadline */
    sock_arg idle = {raw_connect(f.n[1].port), 0};
    cr_assert(fx_run_until(&f, sock_closed, &idle, 5000), "silent connection kept open");
    close(idle.fd);
    cr_assert(kv_peer_net_is_up(f.n[0].net, 2));
    cr_assert_eq(fx_metric(&f, 0, "kvd_peer_connects_total", 2), 1);
    /* an oversized frame closes the member connection (only), which is redialed */
    cr_assert_eq(fx_send(&f, 0, 1, 1, 0, 2048), 0);
    pair_arg p = {&f, 0, 1};
    cr_assert(fx_run_until(&f, down_seen, &p, 5000));
    fx_wait_up(&f, 0, 1);
    cr_assert_eq(f.n[1].msgs, 0);
    f.n[1].next_seq[1] = 5;
    cr_assert_eq(fx_send(&f, 0, 1, 1, 5, 512), 0);
    count_arg c = {&f.n[1], 1};
    cr_assert(fx_run_until(&f, got_msgs, &c, 5000));
    cr_assert_eq(f.n[1].order_errors, 0);
    cr_assert_eq(fx_metric(&f, 0, "kvd_peer_connects_total", 2), 2);
    fx_fini(&f);
}

/* Sends req on a fresh connection to port and reads the answer until the peer closes. */
typedef struct h1_arg {
    int fd;
    char buf[8192];
    size_t len;
    int closed;
} h1_arg;

static int h1_done(void *arg)
{
    h1_arg *h = arg;
    struct pollfd p = {.fd = h->fd, .events = POLLIN};
    while (!h->closed && poll(&p, 1, 0) > 0) {
        ssize_t r = read(h->fd, h->buf + h->len, sizeof(h->buf) - 1 - h->len);
        if (r <= 0)
            h->closed = 1;
        else
            h->len += (size_t)r;
        h->buf[h->len] = 0;
    }
    return h->closed;
}

static void h1_ask(fx *f, int i, const char *req, h1_arg *h)
{
    memset(h, 0, sizeof(*h));
    h->fd = raw_connect(f->n[i].port);
    cr_assert_eq(write(h->fd, req, strlen(req)), (ssize_t)strlen(req));
    cr_assert(fx_run_until(f, h1_done, h, 5000), "no complete answer to %s", req);
    close(h->fd);
}

/* etcd's GET /members on the peer port (a joiner's id lookup, server/daemon/members_join.h):
 * answered over HTTP/1.1 with the handler's JSON and X-Etcd-Cluster-ID, next to the members' HTTP/2
 * connection, which stays up; other paths and methods are refused, a 200 is no refusal. */
Test(peer_net, http1_get_members_answers_etcd_json)
{
    fx f;
    fx_init(&f);
    fx_config(&f, 0, 0xc1);
    fx_config(&f, 1, 0xc1);
    f.n[1].members_json = "[{\"id\":1,\"peerURLs\":[\"http://127.0.0.1:1\"]}]\n";
    fx_start(&f, 0);
    fx_start(&f, 1);
    fx_add(&f, 0, 1);
    fx_add(&f, 1, 0);
    fx_wait_up(&f, 0, 1);
    h1_arg h;
    h1_ask(&f, 1, "GET /members HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", &h);
    cr_assert(strncmp(h.buf, "HTTP/1.1 200 OK\r\n", 17) == 0, "%s", h.buf);
    cr_assert(strstr(h.buf, "\r\nX-Etcd-Cluster-ID: c1\r\n"), "%s", h.buf);
    cr_assert(strstr(h.buf, "\r\nContent-Type: application/json\r\n"), "%s", h.buf);
    cr_assert(strstr(h.buf, "\r\n\r\n[{\"id\":1,\"peerURLs\":[\"http://127.0.0.1:1\"]}]\n"), "%s",
              h.buf);
    h1_ask(&f, 1, "POST /members HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", &h);
    cr_assert(strncmp(h.buf, "HTTP/1.1 405 ", 13) == 0, "%s", h.buf);
    h1_ask(&f, 1, "GET /version HTTP/1.1\r\nHost: x\r\n\r\n", &h);
    cr_assert(strncmp(h.buf, "HTTP/1.1 404 ", 13) == 0, "%s", h.buf);
    /* a member without the handler answers 503 (kvd: while it is joining itself) */
    h1_ask(&f, 0, "GET /members HTTP/1.1\r\n\r\n", &h);
    cr_assert(strncmp(h.buf, "HTTP/1.1 503 ", 13) == 0, "%s", h.buf);
    /* a request header past 4 KiB is refused without an answer */
    char big[6000];
    memset(big, 'a', sizeof(big));
    memcpy(big, "GET /members HTTP/1.1\r\nX: ", 26);
    big[sizeof(big) - 1] = 0;
    h1_ask(&f, 1, big, &h);
    cr_assert_eq(h.len, 0, "%s", h.buf);
    cr_assert(kv_peer_net_is_up(f.n[0].net, 2) && kv_peer_net_is_up(f.n[1].net, 1));
    cr_assert_eq(fx_metric(&f, 0, "kvd_peer_connects_total", 2), 1);
    fx_fini(&f);
}

Test(peer_net, isolation_drops_frames_both_ways_and_keeps_the_connection)
{
    fx f;
    fx_start_pair(&f);
    kv_peer_net_set_isolated(f.n[0].net, 1);
    for (uint64_t k = 0; k < 20; k++) {
        cr_assert_eq(fx_send(&f, 0, 1, 1, k, 64), 0);
        cr_assert_eq(fx_send(&f, 1, 0, 1, k, 64), 0);
    }
    fx_run_for(&f, 800); /* 8 PING intervals */
    cr_assert_eq(f.n[0].msgs, 0);
    cr_assert_eq(f.n[1].msgs, 0);
    cr_assert(kv_peer_net_is_up(f.n[0].net, 2));
    cr_assert(kv_peer_net_is_up(f.n[1].net, 1));
    cr_assert_eq(fx_metric(&f, 0, "kvd_peer_frames_dropped_total", 2), 40);
    kv_peer_net_set_isolated(f.n[0].net, 0);
    f.n[0].next_seq[2] = 100;
    f.n[1].next_seq[1] = 100;
    cr_assert_eq(fx_send(&f, 0, 1, 1, 100, 64), 0);
    cr_assert_eq(fx_send(&f, 1, 0, 1, 100, 64), 0);
    count_arg c1 = {&f.n[0], 1}, c2 = {&f.n[1], 1};
    cr_assert(fx_run_until(&f, got_msgs, &c1, 5000));
    cr_assert(fx_run_until(&f, got_msgs, &c2, 5000));
    cr_assert_eq(f.n[0].order_errors + f.n[1].order_errors, 0);
    cr_assert_eq(fx_metric(&f, 0, "kvd_peer_connects_total", 2), 1);
    fx_fini(&f);
}

typedef struct acc_arg {
    int lfd;
    int accepted;
} acc_arg;

static int accepted_twice(void *arg)
{
    acc_arg *a = arg;
    int fd;
    while ((fd = accept(a->lfd, NULL, NULL)) >= 0) {
        a->accepted++; /* never answer; keep it open until the dialer gives up */
    }
    return a->accepted >= 2;
}

Test(peer_net, silent_peer_is_closed_after_missed_pings_and_redialed)
{
    fx f;
    fx_init(&f);
    fx_config(&f, 0, 0xc1);
    fx_start(&f, 0);
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(bind(lfd, (struct sockaddr *)&a, sizeof(a)), 0);
    cr_assert_eq(listen(lfd, 16), 0);
    socklen_t al = sizeof(a);
    getsockname(lfd, (struct sockaddr *)&a, &al);
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", ntohs(a.sin_port));
    cap c;
    cap_start(&c, &f);
    cr_assert_eq(kv_peer_net_add_peer(f.n[0].net, 2, url), 0);
    acc_arg aa = {lfd, 0};
    int ok = fx_run_until(&f, accepted_twice, &aa, 10000);
    char *log = cap_stop(&c);
    cr_assert(ok, "the dialer did not give up on a silent peer");
    cr_assert_not_null(strstr(log, "the peer stopped answering PINGs"), "%s", log);
    free(log);
    close(lfd);
    fx_fini(&f);
}

Test(peer_net, remove_and_add_peer)
{
    fx f;
    fx_start_pair(&f);
    cr_assert_eq(kv_peer_net_add_peer(f.n[0].net, 2, "http://127.0.0.1:1"), -EEXIST);
    cr_assert_eq(kv_peer_net_add_peer(f.n[0].net, 1, "http://127.0.0.1:1"), -EINVAL);
    cr_assert_eq(kv_peer_net_add_peer(f.n[0].net, 9, "127.0.0.1:1"), -EINVAL);
    cr_assert_eq(kv_peer_net_remove_peer(f.n[0].net, 2), 0);
    cr_assert_eq(kv_peer_net_remove_peer(f.n[0].net, 2), -ENOENT);
    cr_assert_eq(fx_send(&f, 0, 1, 1, 0, 8), -ENOENT);
    cr_assert_not(kv_peer_net_is_up(f.n[0].net, 2));
    pair_arg p = {&f, 1, 0};
    cr_assert(fx_run_until(&f, down_seen, &p, 5000));
    fx_run_for(&f, 300); /* member 2 has no connection and does not dial (it has the higher id) */
    cr_assert_not(kv_peer_net_is_up(f.n[1].net, 1));
    fx_add(&f, 0, 1);
    fx_wait_up(&f, 0, 1);
    f.n[1].next_seq[1] = 3;
    cr_assert_eq(fx_send(&f, 0, 1, 1, 3, 8), 0);
    count_arg c = {&f.n[1], 1};
    cr_assert(fx_run_until(&f, got_msgs, &c, 5000));
    cr_assert_eq(f.n[1].order_errors, 0);
    fx_fini(&f);
}

static double net_metric(fx *f, int i, const char *name, const char *labels)
{
    kv_metric *m = strstr(name, "_total") ? kv_metrics_counter(f->n[i].m, name, "x", labels)
                                          : kv_metrics_gauge(f->n[i].m, name, "x", labels);
    return kv_metric_value(m);
}

/* 1 when the member closed fd (everything it sent is read first). */
static int drained_closed(int fd)
{
    char b[4096];
    for (;;) {
        ssize_t r = recv(fd, b, sizeof(b), MSG_DONTWAIT);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK))
            return 1;
        if (r < 0)
            return 0;
    }
}

static int count_str(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

static int all_accepted(void *arg)
{
    fx *f = arg;
    return net_metric(f, 1, "kvd_peer_connections_refused_total", "reason=\"pending_full\"") +
               net_metric(f, 1, "kvd_peer_pending_connections", NULL) >=
           12;
}

/* Strangers get --peer-max-pending-connections slots (the oldest is closed for a new one),
 * counted and logged once; a member still gets through and is not a pending connection. */
Test(peer_net, strangers_take_only_the_pending_slots_and_a_member_gets_through)
{
    fx f;
    cap c;
    fx_init(&f);
    fx_config(&f, 0, 0xc1);
    fx_config(&f, 1, 0xc1);
    f.n[1].cfg.max_pending_conns = 4;
    f.n[1].cfg.handshake_timeout_ms = 60000; /* only the bound closes them here */
    fx_start(&f, 0);
    fx_start(&f, 1);
    cap_start(&c, &f);
    int s[12];
    for (int k = 0; k < 12; k++)
        s[k] = raw_connect(f.n[1].port);
    fx_run_until(&f, all_accepted, &f, 10000);
    cr_assert_eq(net_metric(&f, 1, "kvd_peer_pending_connections", NULL), 4, "pending %f",
                 net_metric(&f, 1, "kvd_peer_pending_connections", NULL));
    cr_assert_eq(net_metric(&f, 1, "kvd_peer_connections_refused_total", "reason=\"pending_full\""),
                 8);
    int closed = 0;
    for (int k = 0; k < 12; k++) {
        int cl = drained_closed(s[k]);
        closed += cl;
        if (k < 8) /* the oldest ones */
            cr_assert(cl, "stranger %d (old) kept", k);
    }
    cr_assert_eq(closed, 8, "%d of 12 strangers closed", closed);
    /* a member dials into the full pending set */
    fx_add(&f, 0, 1);
    fx_add(&f, 1, 0);
    fx_wait_up(&f, 0, 1);
    cr_assert_leq(net_metric(&f, 1, "kvd_peer_pending_connections", NULL), 4);
    fx_run_until(&f, never, NULL, 300);
    cr_assert(kv_peer_net_is_up(f.n[1].net, 1));
    char *log = cap_stop(&c);
    /* one line for the first refusal; the others go into the 10 s summary */
    cr_assert_eq(count_str(log, "unidentified peer connection from"), 1, "%s", log);
    cr_assert_not_null(strstr(log, "--peer-max-pending-connections 4"), "%s", log);
    free(log);
    for (int k = 0; k < 12; k++)
        close(s[k]);
    fx_fini(&f);
}

static int raw_connect_from(int port, const char *src)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in b = {.sin_family = AF_INET};
    cr_assert_eq(inet_pton(AF_INET, src, &b.sin_addr), 1);
    cr_assert_eq(bind(fd, (struct sockaddr *)&b, sizeof(b)), 0, "bind %s", src);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    return fd;
}

static int flood_accepted(void *arg)
{
    fx *f = arg;
    return net_metric(f, 1, "kvd_peer_connections_refused_total", "reason=\"pending_full\"") >= 37;
}

/* A flood from one address evicts only its own pending connections: a connection from
 * another address that has not sent its handshake yet (a member slow to write it, as on a
 * loaded machine) keeps its slot however many strangers arrive after it. Before: the oldest
 * pending connection was closed whatever its address, so a flood of a few thousand
 * connections a second closed a member's dial before its first bytes were read. */
Test(peer_net, a_flood_from_one_address_evicts_only_its_own_connections)
{
    fx f;
    fx_init(&f);
    fx_config(&f, 0, 0xc1);
    fx_config(&f, 1, 0xc1);
    f.n[1].cfg.max_pending_conns = 4;
    f.n[1].cfg.handshake_timeout_ms = 60000; /* only the bound closes them here */
    fx_start(&f, 1);
    int slow = raw_connect_from(f.n[1].port, "127.0.0.1");
    int s[40];
    for (int k = 0; k < 40; k++)
        s[k] = raw_connect_from(f.n[1].port, "127.0.0.2");
    fx_run_until(&f, flood_accepted, &f, 10000);
    cr_assert_eq(net_metric(&f, 1, "kvd_peer_connections_refused_total", "reason=\"pending_full\""),
                 37);
    cr_assert_eq(net_metric(&f, 1, "kvd_peer_pending_connections", NULL), 4);
    cr_assert_not(drained_closed(slow), "the connection from 127.0.0.1 was evicted by the flood");
    int closed = 0;
    for (int k = 0; k < 40; k++)
        closed += drained_closed(s[k]);
    cr_assert_eq(closed, 37, "%d of 40 flood connections closed", closed);
    close(slow);
    for (int k = 0; k < 40; k++)
        close(s[k]);
    fx_fini(&f);
}
