/* peerbench.c - throughput of the peer transport: two members (ids 1 and 2) in one process on
 * one libuv loop over 127.0.0.1, so both ends share one core. Measures frames/s for small
 * frames (raft appends/heartbeats), MB/s for 64 KiB frames, one 200 MB snapshot, and the
 * process peak RSS. Usage: peerbench [seconds per phase, default 3]. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "metrics/metrics.h"
#include "peer/peer_net.h"

typedef struct member {
    kv_peer_net *net;
    uint64_t msgs, bytes;
    int snaps;
    char snap_path[4096];
} member;

static void on_message(void *arg, uint64_t from, uint32_t type, const uint8_t *buf, size_t len)
{
    (void)from;
    (void)type;
    (void)buf;
    member *m = arg;
    m->msgs++;
    m->bytes += len;
}

static void on_snapshot(void *arg, uint64_t from, const uint8_t *hdr, size_t hdr_len,
                        const char *path)
{
    (void)from;
    (void)hdr;
    (void)hdr_len;
    member *m = arg;
    m->snaps++;
    unlink(path);
}

static void on_done(void *arg, int status)
{
    *(int *)arg = status == 0 ? 1 : -1;
}

static uint64_t peak_rss_kib(void)
{
    FILE *fp = fopen("/proc/self/status", "r");
    char line[256];
    uint64_t v = 0;
    while (fp && fgets(line, sizeof(line), fp))
        if (strncmp(line, "VmHWM:", 6) == 0)
            v = strtoull(line + 6, NULL, 10);
    if (fp)
        fclose(fp);
    return v;
}

/* Keeps the queue of 1 -> 2 full for `secs` with frames of `len`; returns frames/s. */
static double pump(uv_loop_t *loop, member *a, member *b, size_t len, double secs)
{
    static uint8_t buf[64 * 1024];
    uint64_t m0 = b->msgs, t0 = uv_hrtime();
    while ((double)(uv_hrtime() - t0) / 1e9 < secs) {
        for (int k = 0; k < 256; k++)
            if (kv_peer_net_send(a->net, 2, 1, buf, len) == -EAGAIN)
                break; /* queue full: let the loop drain it */
        uv_run(loop, UV_RUN_NOWAIT);
    }
    double dt = (double)(uv_hrtime() - t0) / 1e9;
    return (double)(b->msgs - m0) / dt;
}

int main(int argc, char **argv)
{
    double secs = argc > 1 ? atof(argv[1]) : 3.0;
    signal(SIGPIPE, SIG_IGN); /* as kvd's main(): peer_net.h's contract */
    uv_loop_t loop;
    uv_loop_init(&loop);
    char dir[] = "/tmp/peerbench-XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    member m[2] = {{0}};
    kv_metrics *reg[2];
    char snapdir[2][64];
    for (int i = 0; i < 2; i++) {
        kv_peer_net_config c;
        kv_peer_net_config_default(&c);
        c.self_id = (uint64_t)i + 1;
        c.cluster_id = 0xc1;
        c.listen_urls[0] = "http://127.0.0.1:0";
        c.n_listen = 1;
        snprintf(snapdir[i], sizeof(snapdir[i]), "%s/snap%d", dir, i);
        c.snap_dir = snapdir[i];
        kv_peer_handler h = {.arg = &m[i], .on_message = on_message, .on_snapshot = on_snapshot};
        kv_metrics_new(&reg[i], 0);
        if (kv_peer_net_start(&m[i].net, &loop, &c, &h, reg[i]) != 0)
            return 1;
    }
    char url[2][64];
    for (int i = 0; i < 2; i++)
        snprintf(url[i], sizeof(url[i]), "http://127.0.0.1:%d",
                 kv_peer_net_listen_port(m[i].net, 0));
    kv_peer_net_add_peer(m[0].net, 2, url[1]);
    kv_peer_net_add_peer(m[1].net, 1, url[0]);
    while (!kv_peer_net_is_up(m[0].net, 2) || !kv_peer_net_is_up(m[1].net, 1))
        uv_run(&loop, UV_RUN_ONCE);
    size_t sizes[] = {128, 1024, 64 * 1024};
    for (size_t i = 0; i < 3; i++) {
        double fps = pump(&loop, &m[0], &m[1], sizes[i], secs);
        printf("frames of %6zu B: %10.0f frames/s %8.1f MB/s\n", sizes[i], fps,
               fps * (double)sizes[i] / 1e6);
    }
    /* one 200 MB snapshot, 2 (acceptor) -> 1 (dialer) */
    char src[128];
    snprintf(src, sizeof(src), "%s/src.bin", dir);
    int fd = open(src, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    static uint8_t chunk[1 << 20];
    memset(chunk, 0x5a, sizeof(chunk));
    for (int k = 0; k < 200; k++)
        if (write(fd, chunk, sizeof(chunk)) != (ssize_t)sizeof(chunk))
            return 1;
    close(fd);
    int done = 0;
    uint64_t t0 = uv_hrtime();
    if (kv_peer_net_send_snapshot(m[1].net, 1, (const uint8_t *)"h", 1, src, on_done, &done) != 0)
        return 1;
    while (!done)
        uv_run(&loop, UV_RUN_ONCE);
    double dt = (double)(uv_hrtime() - t0) / 1e9;
    printf("snapshot 200 MiB: %s in %.2f s (%.0f MB/s, incl. fsync)\n", done > 0 ? "ok" : "FAILED",
           dt, 209.7152 / dt);
    printf("peak RSS: %llu KiB\n", (unsigned long long)peak_rss_kib());
    unlink(src);
    for (int i = 0; i < 2; i++)
        kv_peer_net_close(m[i].net);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    for (int i = 0; i < 2; i++) {
        rmdir(snapdir[i]);
        kv_metrics_free(reg[i]);
    }
    rmdir(dir);
    return 0;
}
