/* test_peer_snap.c - snapshots streamed over the peer transport in both directions (sender is
 * the dialer, sender is the acceptor): byte-identical, fsynced, with RSS growth far below the
 * file size. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fixture.h"
#include "peer/peer_internal.h"

#define SNAP_SIZE (50ull * 1000 * 1000)
#define CHUNK (1 << 20)

static void make_file(const char *path, uint64_t seed, uint64_t size)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    cr_assert_geq(fd, 0);
    uint8_t *buf = malloc(CHUNK);
    for (uint64_t off = 0; off < size; off += CHUNK) {
        size_t n = size - off < CHUNK ? (size_t)(size - off) : CHUNK;
        for (size_t k = 0; k < n; k++)
            buf[k] = fx_pattern(seed, off + k);
        cr_assert_eq(write(fd, buf, n), (ssize_t)n);
    }
    free(buf);
    close(fd);
}

static void check_file(const char *path, uint64_t seed, uint64_t size)
{
    struct stat st;
    cr_assert_eq(stat(path, &st), 0, "%s", path);
    cr_assert_eq((uint64_t)st.st_size, size);
    int fd = open(path, O_RDONLY);
    cr_assert_geq(fd, 0);
    uint8_t *buf = malloc(CHUNK);
    for (uint64_t off = 0; off < size; off += CHUNK) {
        size_t n = size - off < CHUNK ? (size_t)(size - off) : CHUNK;
        cr_assert_eq(read(fd, buf, n), (ssize_t)n);
        for (size_t k = 0; k < n; k++)
            if (buf[k] != fx_pattern(seed, off + k))
                cr_assert_fail("byte %llu differs", (unsigned long long)(off + k));
    }
    free(buf);
    close(fd);
}

typedef struct done_arg {
    int calls, status;
} done_arg;

static void on_done(void *arg, int status)
{
    done_arg *d = arg;
    d->calls++;
    d->status = status;
}

typedef struct wait_arg {
    done_arg *d;
    fx_node *rx;
    int snaps;
} wait_arg;

static int snap_done(void *arg)
{
    wait_arg *w = arg;
    return w->d->calls > 0 && w->rx->snaps >= w->snaps;
}

/* Sends a SNAP_SIZE file from member `from` to member `to`; frames keep flowing meanwhile. */
static void send_one(fx *f, int from, int to, uint64_t seed)
{
    char src[400];
    snprintf(src, sizeof(src), "%s/src-%d.bin", f->dir, from);
    make_file(src, seed, SNAP_SIZE);
    char hdr[32];
    int hl = snprintf(hdr, sizeof(hdr), "snap-meta-%llu", (unsigned long long)seed);
    fx_node *rx = &f->n[to];
    int before = rx->snaps;
    done_arg d = {0, 1};
    uint64_t rss0 = fx_rss();
    fx_reset_hwm();
    uint64_t t0 = uv_hrtime();
    cr_assert_eq(kv_peer_net_send_snapshot(f->n[from].net, rx->id, (const uint8_t *)hdr, (size_t)hl,
                                           src, on_done, &d),
                 0);
    cr_assert_eq(kv_peer_net_send_snapshot(f->n[from].net, rx->id, (const uint8_t *)hdr, (size_t)hl,
                                           src, on_done, &d),
                 -EBUSY);
    /* raft frames share the connection with the snapshot stream */
    rx->next_seq[f->n[from].id] = 0;
    rx->msgs = 0;
    for (uint64_t k = 0; k < 50; k++)
        cr_assert_eq(fx_send(f, from, to, 1, k, 100), 0);
    wait_arg w = {&d, rx, before + 1};
    cr_assert(fx_run_until(f, snap_done, &w, 120000), "snapshot not delivered");
    double secs = (double)(uv_hrtime() - t0) / 1e9;
    uint64_t hwm = fx_hwm();
    cr_assert_eq(d.calls, 1);
    cr_assert_eq(d.status, 0);
    cr_assert_eq(rx->msgs, 50);
    cr_assert_eq(rx->order_errors, 0);
    cr_assert_eq(rx->snap_hdr_len, (size_t)hl);
    cr_assert_eq(memcmp(rx->snap_hdr, hdr, (size_t)hl), 0);
    cr_assert_eq(strncmp(rx->snap_path, f->dir, strlen(f->dir)), 0);
    check_file(rx->snap_path, seed, SNAP_SIZE);
    cr_assert_eq(unlink(rx->snap_path), 0); /* the callee owns it */
    cr_assert_eq(fx_metric(f, from, "kvd_peer_snapshots_sent_total", rx->id), 1);
    cr_assert_eq(fx_metric(f, to, "kvd_peer_snapshots_received_total", f->n[from].id), 1);
    cr_log_info("snapshot %d->%d: %.0f MB in %.2f s; RSS %llu KiB, peak %llu KiB", from + 1, to + 1,
                SNAP_SIZE / 1e6, secs, (unsigned long long)rss0 / 1024,
                (unsigned long long)hwm / 1024);
    fprintf(stderr, "snapshot %d->%d: %.0f MB in %.2f s; RSS %llu KiB, peak %llu KiB\n", from + 1,
            to + 1, SNAP_SIZE / 1e6, secs, (unsigned long long)rss0 / 1024,
            (unsigned long long)hwm / 1024);
    /* the file is streamed: the peak grows by flow-control windows, not by the file */
    cr_assert_lt(hwm, rss0 + 16ull * 1024 * 1024, "peak RSS %llu vs %llu before",
                 (unsigned long long)hwm, (unsigned long long)rss0);
    unlink(src);
}

Test(peer_snap, fifty_mb_both_directions_byte_identical_with_flat_rss)
{
    fx f;
    fx_start_pair(&f);
    send_one(&f, 0, 1, 1001); /* member 1 dials: POST */
    send_one(&f, 1, 0, 2002); /* member 2 accepted: offer + GET */
    /* no temp files left behind */
    char cmd[800];
    snprintf(cmd, sizeof(cmd), "test -z \"$(ls -A %s/snap0 %s/snap1 | grep -v : | grep .)\"", f.dir,
             f.dir);
    cr_assert_eq(system(cmd), 0, "temp files left in the snapshot dirs");
    fx_fini(&f);
}

static int done_called(void *arg)
{
    return ((done_arg *)arg)->calls > 0;
}

Test(peer_snap, peer_lost_mid_snapshot_fails_the_send_and_leaves_no_temp_file)
{
    fx f;
    fx_start_pair(&f);
    char src[400];
    snprintf(src, sizeof(src), "%s/src.bin", f.dir);
    make_file(src, 7, 20ull * 1000 * 1000);
    done_arg d = {0, 1};
    cr_assert_eq(kv_peer_net_send_snapshot(f.n[1].net, 1, NULL, 0, src, on_done, &d), 0);
    for (int k = 0; k < 30; k++) /* let part of it flow */
        uv_run(&f.loop, UV_RUN_NOWAIT);
    fx_stop(&f, 0); /* the receiver (the dialer) goes away */
    cr_assert(fx_run_until(&f, done_called, &d, 10000));
    cr_assert_eq(d.calls, 1);
    cr_assert_lt(d.status, 0);
    cr_assert_eq(f.n[0].snaps, 0);
    char cmd[800];
    snprintf(cmd, sizeof(cmd), "test -z \"$(ls -A %s/snap0)\"", f.dir);
    cr_assert_eq(system(cmd), 0, "temp file left behind");
    cr_assert_eq(kv_peer_net_send_snapshot(f.n[1].net, 1, NULL, 0, src, on_done, &d), -ENOTCONN);
    unlink(src);
    fx_fini(&f);
}

static int done_and_snaps(void *arg)
{
    wait_arg *w = arg;
    return w->d->calls > 0 && w->rx->snaps >= w->snaps;
}

/* --max-snapshot-bytes: a body past the bound resets the stream and removes the
 * partial file, in both directions (POST to the acceptor, GET by the dialer); a file of exactly
 * the bound still passes, on the same connection. */
Test(peer_snap, snapshot_past_max_snapshot_bytes_is_refused_in_both_directions)
{
    const uint64_t max = 1u << 20;
    const uint8_t hdr[4] = {'m', 'e', 't', 'a'};
    fx f;
    fx_init(&f);
    for (int i = 0; i < 2; i++) {
        fx_config(&f, i, 0xc1);
        f.n[i].cfg.max_snapshot_bytes = max;
        fx_start(&f, i);
    }
    fx_add(&f, 0, 1);
    fx_add(&f, 1, 0);
    fx_wait_up(&f, 0, 1);
    char big[400], exact[400];
    snprintf(big, sizeof(big), "%s/big.bin", f.dir);
    snprintf(exact, sizeof(exact), "%s/exact.bin", f.dir);
    make_file(big, 11, 5 * max);
    make_file(exact, 12, max);
    for (int from = 0; from < 2; from++) {
        int to = 1 - from;
        fx_node *rx = &f.n[to];
        done_arg d = {0, 0};
        cr_assert_eq(
            kv_peer_net_send_snapshot(f.n[from].net, rx->id, hdr, sizeof(hdr), big, on_done, &d),
            0);
        cr_assert(fx_run_until(&f, done_called, &d, 20000), "send %d->%d never ended", from + 1,
                  to + 1);
        cr_assert_lt(d.status, 0, "an oversized snapshot was accepted");
        cr_assert_eq(rx->snaps, 0);
        cr_assert_eq(fx_metric(&f, to, "kvd_peer_snapshots_refused_total", f.n[from].id), 1);
        char cmd[800];
        snprintf(cmd, sizeof(cmd), "test -z \"$(ls -A %s/snap%d)\"", f.dir, to);
        cr_assert_eq(system(cmd), 0, "partial file left behind in snap%d", to);
        /* the bound itself passes, on the same connection */
        done_arg d2 = {0, 1};
        cr_assert_eq(
            kv_peer_net_send_snapshot(f.n[from].net, rx->id, hdr, sizeof(hdr), exact, on_done, &d2),
            0);
        wait_arg w = {&d2, rx, 1};
        cr_assert(fx_run_until(&f, done_and_snaps, &w, 20000), "exact-size snapshot %d->%d",
                  from + 1, to + 1);
        cr_assert_eq(d2.status, 0);
        check_file(rx->snap_path, 12, max);
        cr_assert_eq(unlink(rx->snap_path), 0);
        rx->snaps = 0;
    }
    unlink(big);
    unlink(exact);
    fx_fini(&f);
}

/* A peer's snapshot offers are fetched at most PEER_MAX_SNAP_IN (2) at a time, as snapshots
 * pushed to a member are: each fetch holds a temp file, and offers cost the peer nothing.
 * Ten offers in one burst (ids the acceptor does not have) open 2 fetches; the rest are
 * ignored and counted; no temp file is left behind. */
Test(peer_snap, a_burst_of_offers_opens_at_most_two_fetches)
{
    fx f;
    fx_start_pair(&f);
    int acc = -1;
    for (int i = 0; i < 2 && acc < 0; i++) {
        kv_peer *p = kv_peer_find(f.n[i].net, f.n[1 - i].id);
        cr_assert_not_null(p);
        if (!p->dialer)
            acc = i;
    }
    cr_assert_geq(acc, 0, "no acceptor side");
    int dial = 1 - acc;
    kv_peer *p = kv_peer_find(f.n[acc].net, f.n[dial].id);
    for (uint64_t id = 1000; id < 1010; id++) {
        uint8_t b[8];
        for (int k = 0; k < 8; k++)
            b[k] = (uint8_t)(id >> (56 - 8 * k));
        cr_assert_eq(kv_peer_enqueue(p, PEER_CTL_SNAP_OFFER, b, sizeof b), 0);
    }
    fx_run_for(&f, 500);
    double ignored = fx_metric(&f, dial, "kvd_peer_snapshot_offers_ignored_total", f.n[acc].id);
    cr_assert_geq(ignored, 1, "every offer of the burst opened a fetch");
    cr_assert_leq(ignored, 8);
    char cmd[800];
    snprintf(cmd, sizeof(cmd), "test -z \"$(ls -A %s/snap%d)\"", f.dir, dial);
    cr_assert_eq(system(cmd), 0, "temp files left behind in snap%d", dial);
    fx_fini(&f);
}
