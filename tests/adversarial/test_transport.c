/*
 * adv_transport: the gRPC transport under load and abuse, against a real
 * kvd process. Each test reproduces one defect found by adversarial testing, scaled down so it
 * runs in seconds; each failed on the code before the fix:
 *
 * - D5 large responses: a 20 x 1 MB `get --prefix` (20 MB response) and a DeleteRange with
 *   prev_kv over those keys succeed (they were refused with RESOURCE_EXHAUSTED; the delete was
 *   applied but reported as failed); 50 concurrent 1 MB gets on one connection all succeed.
 * - D5/D6 zero-window readers: streams whose reader never opens its window are reset after
 *   --send-stall-timeout and the process-wide --max-buffered-bytes bounds RSS meanwhile; a
 *   normal client is served throughout.
 * - D6 idle sockets: preface-only connections at --max-connections do not lock a new client
 *   out (the oldest idle one is evicted) and are closed by --grpc-handshake-timeout; an idle
 *   connection costs little memory.
 * - D6 partial messages: many connections holding unfinished 1.5 MiB messages stay under the
 *   cap (their window is withheld, the largest are shed).
 * - D8 overload: many streams of 100 KB puts keep a substantial goodput, the excess gets
 *   RESOURCE_EXHAUSTED, RSS stays bounded.
 *
 * The load is generated in C (no h2load dependency): tests/lib grpc_raw connections driven by
 * one poll loop below (tc_*).
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nghttp2/nghttp2.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "grpc_raw.h"
#include "harness.h"
#include "rpc.pb-c.h"

#define MB (1024u * 1024u)

/* Under AddressSanitizer RSS says nothing about our buffers (quarantine, shadow memory) and
 * kvd is ~3x slower: RSS bounds are checked through kvd's own buffered-bytes gauge instead, and
 * the overload runs longer (its first 100 KB-put batches take seconds to commit). */
#if defined(__SANITIZE_ADDRESS__)
#define ASAN_BUILD 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ASAN_BUILD 1
#endif
#endif
#ifndef ASAN_BUILD
#define ASAN_BUILD 0
#endif

/* ------------------------------------------------------------------------------------------
 * Many connections, many streams, one poll loop: tests/lib grpc_raw connections driven with
 * kv_it_grpc_io(). Responses are counted, not kept (st->discard); request bodies borrowed.
 * ------------------------------------------------------------------------------------------ */

typedef struct tconn {
    kv_it_grpc *g;
    kv_it_grpc_stream **open; /* streams started and not reaped (load_run) */
    size_t n_open, cap;
} tconn;

static int tc_dead(const tconn *c)
{
    return !c->g || kv_it_grpc_conn_closed(c->g);
}

/* window: SETTINGS_INITIAL_WINDOW_SIZE we advertise (0 = a reader that never lets the server
 * send DATA; negative = nghttp2's default 64 KiB - 1). A reader with window > 0 opens its
 * connection window to 16 MiB and consumes automatically. */
static int tc_open(tconn *c, uint16_t port, int64_t window)
{
    memset(c, 0, sizeof(*c));
    kv_it_grpc_opts o = {.max_concurrent = 1000};
    if (window >= 0) {
        o.set_window = 1;
        o.window = (uint32_t)(window > (1 << 24) ? (1 << 24) : window);
    }
    if (window != 0)
        o.conn_window = 16 * MB;
    return kv_it_grpc_open_opts(&c->g, "127.0.0.1", port, 5000, &o) ? -1 : 0;
}

static void tc_close(tconn *c)
{
    kv_it_grpc_close(c->g);
    free(c->open);
    memset(c, 0, sizeof(*c));
}

/* Starts a gRPC call; body = framed message bytes (borrowed until the stream ends); eof 0
 * leaves the stream half-open after them. */
/* tc_call with a content type (NULL: application/grpc). */
static kv_it_grpc_stream *tc_call_as(tconn *c, const char *path, const char *ct,
                                     const uint8_t *body, size_t len, int eof)
{
    if (c->n_open == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 64;
        kv_it_grpc_stream **p = realloc(c->open, cap * sizeof(*p));
        if (!p)
            return NULL;
        c->open = p;
        c->cap = cap;
    }
    kv_it_grpc_req rq = {.authority = "127.0.0.1", .content_type = ct};
    kv_it_grpc_stream *st = kv_it_grpc_stream_start(c->g, path, &rq);
    if (!st)
        return NULL;
    st->discard = 1;
    if (kv_it_grpc_send_ref(st, body, len, eof)) {
        kv_it_grpc_stream_free(st);
        return NULL;
    }
    c->open[c->n_open++] = st;
    return st;
}

static kv_it_grpc_stream *tc_call(tconn *c, const char *path, const uint8_t *body, size_t len,
                                  int eof)
{
    return tc_call_as(c, path, NULL, body, len, eof);
}

/* Frames msg as one gRPC message; caller frees. */
static uint8_t *frame(const uint8_t *msg, size_t len, size_t *out_len)
{
    uint8_t *b = malloc(len + 5);
    b[0] = 0;
    b[1] = (uint8_t)(len >> 24);
    b[2] = (uint8_t)(len >> 16);
    b[3] = (uint8_t)(len >> 8);
    b[4] = (uint8_t)len;
    memcpy(b + 5, msg, len);
    *out_len = len + 5;
    return b;
}

/* A blocking-connected, then non-blocking, raw TCP socket (idle-connection tests). */
static int tcp_open(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in sa = {0};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(fd);
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    return fd;
}

/* Pumps every connection for up to ms, or until done(arg) returns nonzero. */
static void tc_pump(tconn *cs, size_t n, uint32_t ms, int (*done)(void *), void *arg)
{
    struct pollfd *p = calloc(n, sizeof(*p));
    uint64_t end = kv_it_now_ms() + ms;
    while (kv_it_now_ms() < end) {
        if (done && done(arg))
            break;
        for (size_t i = 0; i < n; i++) {
            p[i].fd = tc_dead(&cs[i]) ? -1 : kv_it_grpc_fd(cs[i].g);
            p[i].events = POLLIN;
            if (p[i].fd >= 0 && kv_it_grpc_want_write(cs[i].g))
                p[i].events |= POLLOUT;
            p[i].revents = 0;
        }
        int64_t left = (int64_t)(end - kv_it_now_ms());
        if (poll(p, n, left > 20 ? 20 : (int)(left > 0 ? left : 0)) < 0 && errno != EINTR)
            break;
        for (size_t i = 0; i < n; i++)
            if (p[i].fd >= 0)
                kv_it_grpc_io(cs[i].g, (p[i].revents & (POLLIN | POLLHUP | POLLERR)) != 0);
    }
    free(p);
}

/* ------------------------------------------------------------------------------------------
 * Fixture and helpers
 * ------------------------------------------------------------------------------------------ */

static kv_it_server *srv;

static void start_server(const char *const *args)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max; /* kvd inherits it */
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    srv = calloc(1, sizeof(*srv));
    cr_assert(srv);
    int rc = kv_it_server_init(srv, KV_IT_KVD, args);
    cr_assert_eq(rc, 0, "init: %d", rc);
    rc = kv_it_server_start(srv, 20000);
    cr_assert_eq(rc, 0, "start: %d", rc);
}

static void teardown(void)
{
    if (srv) {
        kv_it_server_destroy(srv);
        free(srv);
        srv = NULL;
    }
}

TestSuite(transport, .fini = teardown, .timeout = 240);

/* Anonymous resident memory (RssAnon): what kvd allocated. File-backed pages of the LMDB map
 * (RssFile) are page cache the kernel reclaims; they grow with the data written (the raft log
 * doubles it), not with what a client buffers. */
static uint64_t rss(void)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)srv->pid);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    uint64_t kb = 0;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "RssAnon: %" SCNu64 " kB", &kb) == 1)
            break;
    fclose(f);
    cr_assert_gt(kb, 0);
    return kb * 1024;
}

static double metric(const char *name, const char *labels)
{
    int st = 0;
    char *body = NULL;
    double v = -1;
    if (kv_it_http_get(srv->metrics_port, "/metrics", 5000, &st, &body) == 0 && st == 200)
        if (kv_it_metric_sum(body, name, labels, &v, NULL) != 0)
            v = -1;
    free(body);
    return v;
}

static uint8_t *pack_put(const char *key, size_t vlen, size_t *len)
{
    uint8_t *val = malloc(vlen ? vlen : 1);
    memset(val, 'v', vlen);
    Etcdserverpb__PutRequest put = ETCDSERVERPB__PUT_REQUEST__INIT;
    put.key = (ProtobufCBinaryData){strlen(key), (uint8_t *)key};
    put.value = (ProtobufCBinaryData){vlen, val};
    *len = etcdserverpb__put_request__get_packed_size(&put);
    uint8_t *b = malloc(*len);
    etcdserverpb__put_request__pack(&put, b);
    free(val);
    return b;
}

static uint8_t *pack_range(const char *key, const char *end, size_t *len)
{
    Etcdserverpb__RangeRequest r = ETCDSERVERPB__RANGE_REQUEST__INIT;
    r.key = (ProtobufCBinaryData){strlen(key), (uint8_t *)key};
    if (end)
        r.range_end = (ProtobufCBinaryData){strlen(end), (uint8_t *)end};
    *len = etcdserverpb__range_request__get_packed_size(&r);
    uint8_t *b = malloc(*len);
    etcdserverpb__range_request__pack(&r, b);
    return b;
}

/* Puts n keys prefix%02d with vlen-byte values over one raw connection. */
static void put_values(const char *prefix, int n, size_t vlen)
{
    kv_it_grpc *g;
    cr_assert_eq(kv_it_grpc_open(&g, "127.0.0.1", srv->client_port, 5000), 0);
    for (int i = 0; i < n; i++) {
        char key[64];
        snprintf(key, sizeof(key), "%s%02d", prefix, i);
        size_t len;
        uint8_t *req = pack_put(key, vlen, &len), *resp = NULL;
        size_t rl;
        int st;
        char msg[256];
        int rc = kv_it_grpc_call(g, "/etcdserverpb.KV/Put", req, len, &resp, &rl, 20000, &st, msg,
                                 sizeof(msg));
        free(req);
        free(resp);
        cr_assert_eq(rc, 0, "put %s: rc %d status %d %s", key, rc, st, msg);
    }
    kv_it_grpc_close(g);
}

/* One Range over a fresh raw connection; returns the number of kvs, or -status. */
static int raw_get(const char *key, const char *end, size_t *bytes)
{
    kv_it_grpc *g;
    if (kv_it_grpc_open(&g, "127.0.0.1", srv->client_port, 5000) != 0)
        return -1000;
    size_t len, rl = 0;
    uint8_t *req = pack_range(key, end, &len), *resp = NULL;
    int st = -1;
    char msg[256] = "";
    int rc = kv_it_grpc_call(g, "/etcdserverpb.KV/Range", req, len, &resp, &rl, 20000, &st, msg,
                             sizeof(msg));
    free(req);
    kv_it_grpc_close(g);
    if (rc != 0) {
        free(resp);
        cr_log_info("raw get: rc %d status %d %s", rc, st, msg);
        return st > 0 ? -st : -999;
    }
    Etcdserverpb__RangeResponse *r = etcdserverpb__range_response__unpack(NULL, rl, resp);
    free(resp);
    if (!r)
        return -998;
    int n = (int)r->n_kvs;
    if (bytes)
        *bytes = rl;
    etcdserverpb__range_response__free_unpacked(r, NULL);
    return n;
}

/* ------------------------------------------------------------------------------------------
 * D5: large responses
 * ------------------------------------------------------------------------------------------ */

Test(transport, large_prefix_get_and_prev_kv_delete)
{
    start_server(NULL);
    put_values("/big/", 20, 1000 * 1000);
    char ctl[4096];
    cr_assert_eq(kv_it_etcdctl_bin(ctl, sizeof(ctl)), 0, "etcdctl: %s", ctl);

    kv_it_cmd_result res;
    int rc = kv_it_ctl(srv, ctl, NULL, 60000, &res, "get", "--prefix", "/big/", NULL);
    cr_assert_eq(rc, 0);
    cr_assert_eq(res.exit_code, 0, "etcdctl get --prefix (20 MB): %s", res.err);
    cr_assert_geq(res.out_len, 20u * 1000 * 1000, "all 20 values: %zu bytes", res.out_len);
    kv_it_cmd_result_free(&res);

    size_t bytes = 0;
    cr_assert_eq(raw_get("/big/", "/big0", &bytes), 20);
    cr_assert_geq(bytes, 20u * 1000 * 1000);

    /* A write whose (large) response used to be refused after it was applied. */
    rc = kv_it_ctl(srv, ctl, NULL, 60000, &res, "del", "--prefix", "--prev-kv", "/big/", NULL);
    cr_assert_eq(rc, 0);
    cr_assert_eq(res.exit_code, 0, "etcdctl del --prev-kv (20 MB response): %s", res.err);
    cr_assert(strncmp(res.out, "20\n", 3) == 0, "deleted count first: %.40s", res.out);
    cr_assert_geq(res.out_len, 20u * 1000 * 1000, "prev kvs returned");
    kv_it_cmd_result_free(&res);
    cr_assert_eq(raw_get("/big/", "/big0", NULL), 0);
}

typedef struct gets_state {
    tconn *c;
    kv_it_grpc_stream **st;
    int n;
} gets_state;

static int all_closed(void *arg)
{
    gets_state *g = arg;
    for (int i = 0; i < g->n; i++)
        if (!g->st[i]->closed)
            return tc_dead(g->c);
    return 1;
}

Test(transport, concurrent_1mb_gets_on_one_connection)
{
    start_server(NULL);
    put_values("/m/", 1, 1000 * 1000);
    tconn c;
    cr_assert_eq(tc_open(&c, srv->client_port, 1 << 20), 0);
    size_t len, flen;
    uint8_t *req = pack_range("/m/00", NULL, &len);
    uint8_t *body = frame(req, len, &flen);
    free(req);
    enum { N = 50 };
    kv_it_grpc_stream *st[N];
    for (int i = 0; i < N; i++) {
        st[i] = tc_call(&c, "/etcdserverpb.KV/Range", body, flen, 1);
        cr_assert_not_null(st[i]);
    }
    gets_state g = {&c, st, N};
    tc_pump(&c, 1, 60000, all_closed, &g);
    int ok = 0;
    for (int i = 0; i < N; i++) {
        if (st[i]->closed && st[i]->grpc_status == 0 && st[i]->received >= 1000 * 1000)
            ok++;
        else
            cr_log_info("get %d: closed %d status %d rst %u got %zu %s", i, st[i]->closed,
                        st[i]->grpc_status, st[i]->close_code, (size_t)st[i]->received,
                        st[i]->grpc_message);
    }
    cr_assert_eq(ok, N, "%d of %d concurrent 1 MB gets succeeded", ok, N);
    tc_close(&c);
    free(body);
}

/* ------------------------------------------------------------------------------------------
 * D5/D6: readers that never read
 * ------------------------------------------------------------------------------------------ */

Test(transport, zero_window_readers_are_reset_and_bounded)
{
    const char *args[] = {"--max-buffered-bytes=67108864", "--send-stall-timeout=3s", NULL};
    start_server(args);
    put_values("/z/", 4, 1000 * 1000); /* each Range below is a 4 MB response */
    uint64_t base = rss();
    size_t len, flen;
    uint8_t *req = pack_range("/z/", "/z0", &len);
    uint8_t *body = frame(req, len, &flen);
    free(req);
    enum { N = 60 }; /* 240 MB of responses nobody reads, cap 64 MiB */
    tconn *cs = calloc(N, sizeof(*cs));
    kv_it_grpc_stream *st[N];
    for (int i = 0; i < N; i++) {
        cr_assert_eq(tc_open(&cs[i], srv->client_port, 0), 0);
        st[i] = tc_call(&cs[i], "/etcdserverpb.KV/Range", body, flen, 1);
    }
    tc_pump(cs, N, 1500, NULL, NULL);
    uint64_t peak = rss();
    /* Meanwhile a normal client is served. While the stuck responses fill the cap a request
     * may be refused with RESOURCE_EXHAUSTED (a loaded machine gets there before the stalled
     * readers are reset, --send-stall-timeout 3 s): it must then succeed within a few
     * seconds, never hang or fail otherwise. */
    int got = -1, tries = 0;
    for (uint64_t t_end = kv_it_now_ms() + 10000; kv_it_now_ms() < t_end; tries++) {
        got = raw_get("/z/", "/z0", NULL);
        if (got != -8) /* anything but RESOURCE_EXHAUSTED is the answer */
            break;
        tc_pump(cs, N, 250, NULL, NULL);
    }
    cr_assert_eq(got, 4, "a reading client is served (result %d after %d tries)", got, tries + 1);
    gets_state g = {NULL, NULL, 0};
    (void)g;
    uint64_t t0 = kv_it_now_ms();
    int all = 0;
    double buf_peak = metric("kvd_grpc_conn_buffered_bytes_total", NULL);
    while (kv_it_now_ms() - t0 < 20000 && !all) {
        tc_pump(cs, N, 250, NULL, NULL);
        uint64_t r = rss();
        if (r > peak)
            peak = r;
        double b = metric("kvd_grpc_conn_buffered_bytes_total", NULL);
        buf_peak = b > buf_peak ? b : buf_peak;
        all = 1;
        for (int i = 0; i < N; i++)
            all &= st[i]->closed || tc_dead(&cs[i]);
    }
    int reset = 0, refused = 0;
    for (int i = 0; i < N; i++) {
        reset += st[i]->closed && st[i]->grpc_status == -1 && st[i]->close_code != 0;
        refused += st[i]->closed && st[i]->grpc_status == 8;
    }
    cr_log_info("zero-window: RSS %llu -> peak %llu MB; reset %d, refused %d",
                (unsigned long long)(base / MB), (unsigned long long)(peak / MB), reset, refused);
    cr_assert(all, "every stalled stream ends (reset after the stall timeout, or refused)");
    cr_assert_gt(reset, 0, "stalled streams are reset");
    cr_assert_leq(buf_peak, 64.0 * MB, "buffered bytes under the cap: %.0f", buf_peak);
    if (!ASAN_BUILD)
        cr_assert_lt(peak - base, 64u * MB + 48u * MB, "RSS bounded by the buffer cap: +%llu MB",
                     (unsigned long long)((peak - base) / MB));
    cr_assert_gt(metric("kvd_grpc_streams_reset_total", "reason=\"send_stalled\""), 0);
    for (int i = 0; i < N; i++)
        tc_close(&cs[i]);
    free(cs);
    free(body);
    cr_assert_eq(raw_get("/z/", "/z0", NULL), 4);
}

/* ------------------------------------------------------------------------------------------
 * D6: idle connections
 * ------------------------------------------------------------------------------------------ */

Test(transport, idle_connections_do_not_lock_clients_out)
{
    enum { N = 400 };
    const char *args[] = {"--max-connections=400", "--grpc-handshake-timeout=3s", NULL};
    start_server(args);
    uint64_t base = rss();
    int *fd = calloc(N, sizeof(int));
    static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    for (int i = 0; i < N; i++) {
        fd[i] = tcp_open(srv->client_port);
        cr_assert_geq(fd[i], 0);
        cr_assert_eq(send(fd[i], preface, 24, MSG_NOSIGNAL), 24);
    }
    /* Let kvd accept them all and read their prefaces. */
    double open = 0;
    for (int t = 0; t < 100 && (open = metric("kvd_grpc_connections_open", NULL)) < N; t++)
        usleep(20000);
    cr_log_info("idle: %.0f connections open (limit %d)", open, N);
    uint64_t idle_rss = rss();
    double per_conn = (double)(idle_rss > base ? idle_rss - base : 0) / N;
    cr_log_info("idle: %.1f KB RSS per preface-only connection", per_conn / 1024);

    /* At the limit, a new client is served at once (the oldest idle connection makes room). */
    uint64_t t0 = kv_it_now_ms();
    put_values("/idle/", 1, 10);
    cr_assert_eq(raw_get("/idle/", "/idle0", NULL), 1);
    cr_assert_lt(kv_it_now_ms() - t0, 2500, "served before any timeout");
    cr_assert_geq(metric("kvd_grpc_connections_closed_total", "reason=\"evicted\""), 1);

    /* The handshake timeout closes the rest. */
    int closed = 0;
    uint64_t end = kv_it_now_ms() + 10000;
    while (kv_it_now_ms() < end && closed < N) {
        closed = 0;
        for (int i = 0; i < N; i++) {
            char b[256];
            ssize_t r = recv(fd[i], b, sizeof(b), MSG_DONTWAIT);
            while (r > 0)
                r = recv(fd[i], b, sizeof(b), MSG_DONTWAIT);
            if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
                closed++;
            }
        }
        usleep(100000);
    }
    cr_assert_eq(closed, N, "idle connections closed by the handshake timeout: %d of %d", closed,
                 N);
    cr_assert_geq(metric("kvd_grpc_connections_closed_total", "reason=\"handshake_timeout\""),
                  N - 10);
    for (int i = 0; i < N; i++)
        close(fd[i]);
    free(fd);
    if (!ASAN_BUILD)
        cr_assert_lt(per_conn, 32 * 1024.0, "an idle connection costs < 32 KB (%.1f KB)",
                     per_conn / 1024);
}

/* ------------------------------------------------------------------------------------------
 * D6: connections holding unfinished messages
 * ------------------------------------------------------------------------------------------ */

/* Pumps the n connections for 6 s, recording the member's peak RSS and buffered bytes. */
static void pump_for_peaks(tconn *cs, size_t n, uint64_t *peak, double *buf_peak)
{
    for (int t = 0; t < 24; t++) {
        tc_pump(cs, n, 250, NULL, NULL);
        uint64_t r = rss();
        *peak = r > *peak ? r : *peak;
        double b = metric("kvd_grpc_conn_buffered_bytes_total", NULL);
        *buf_peak = b > *buf_peak ? b : *buf_peak;
    }
}

Test(transport, partial_messages_stay_under_the_cap)
{
    const char *args[] = {"--max-buffered-bytes=67108864", NULL};
    start_server(args);
    uint64_t base = rss();
    enum { NC = 12, NS = 24 };
    size_t announce = 1536 * 1024, partial = 1400 * 1024;
    uint8_t *body = calloc(1, partial + 5);
    body[1] = (uint8_t)(announce >> 24);
    body[2] = (uint8_t)(announce >> 16);
    body[3] = (uint8_t)(announce >> 8);
    body[4] = (uint8_t)announce;
    tconn cs[NC];
    for (int i = 0; i < NC; i++) {
        cr_assert_eq(tc_open(&cs[i], srv->client_port, -1), 0);
        for (int j = 0; j < NS; j++) /* 24 x 1.4 MiB, never finished */
            cr_assert_not_null(tc_call(&cs[i], "/etcdserverpb.KV/Put", body, partial + 5, 0));
    }
    uint64_t peak = 0;
    double buf_peak = 0;
    pump_for_peaks(cs, NC, &peak, &buf_peak);
    cr_log_info("partial messages: buffered peak %.1f MB", buf_peak / MB);
    /* Inbound is checked against the cap after each chunk: allow one chunk over. */
    cr_assert_leq(buf_peak, 65.0 * MB, "buffered bytes under the cap: %.0f", buf_peak);
    cr_log_info("partial messages: RSS %llu -> peak %llu MB (attempted %u MB)",
                (unsigned long long)(base / MB), (unsigned long long)(peak / MB),
                (unsigned)((size_t)NC * NS * partial / MB));
    if (!ASAN_BUILD)
        cr_assert_lt(peak - base, 64u * MB + 64u * MB, "RSS bounded: +%llu MB",
                     (unsigned long long)((peak - base) / MB));
    /* The member still serves. */
    put_values("/p/", 1, 100);
    cr_assert_eq(raw_get("/p/", "/p0", NULL), 1);
    for (int i = 0; i < NC; i++)
        tc_close(&cs[i]);
    free(body);
}

/* The same with HTTP/2 streams that are not gRPC (the JSON gateway over h2c): their bodies are
 * held until END_STREAM like partial messages, so the connection's window is withheld and the
 * cap sheds them. They used to return the window at once and count for nothing the cap could
 * shed: 12 x 24 x 1.4 MiB were all held. */
Test(transport, gateway_bodies_stay_under_the_cap)
{
    const char *args[] = {"--max-buffered-bytes=67108864", NULL};
    start_server(args);
    uint64_t base = rss();
    enum { NC = 12, NS = 24 };
    size_t partial = 1400 * 1024;
    uint8_t *body = malloc(partial);
    memset(body, ' ', partial); /* JSON whitespace, never finished */
    tconn cs[NC];
    for (int i = 0; i < NC; i++) {
        cr_assert_eq(tc_open(&cs[i], srv->client_port, -1), 0);
        for (int j = 0; j < NS; j++)
            cr_assert_not_null(
                tc_call_as(&cs[i], "/v3/kv/put", "application/json", body, partial, 0));
    }
    uint64_t peak = 0;
    double buf_peak = 0;
    pump_for_peaks(cs, NC, &peak, &buf_peak);
    cr_log_info("gateway bodies: buffered peak %.1f MB, RSS %llu -> peak %llu MB (attempted %u MB)",
                buf_peak / MB, (unsigned long long)(base / MB), (unsigned long long)(peak / MB),
                (unsigned)((size_t)NC * NS * partial / MB));
    cr_assert_leq(buf_peak, 65.0 * MB, "buffered bytes under the cap: %.0f", buf_peak);
    if (!ASAN_BUILD)
        cr_assert_lt(peak - base, 64u * MB + 64u * MB, "RSS bounded: +%llu MB",
                     (unsigned long long)((peak - base) / MB));
    put_values("/g/", 1, 100); /* the member still serves */
    cr_assert_eq(raw_get("/g/", "/g0", NULL), 1);
    for (int i = 0; i < NC; i++)
        tc_close(&cs[i]);
    free(body);
}

/* An HTTP/2 stream that is not gRPC is handed to the HTTP/1 handler as a request line built
 * from :method and :path: a CR, LF or space in them would end that line and start a request
 * of the client's making. Such a stream is reset (PROTOCOL_ERROR); a clean one is answered. */
Test(transport, a_gateway_path_cannot_inject_a_request)
{
    start_server(NULL);
    tconn c;
    cr_assert_eq(tc_open(&c, srv->client_port, -1), 0);
    static const uint8_t body[] = "{}";
    kv_it_grpc_stream *bad =
        tc_call_as(&c, "/version HTTP/1.1\r\nX-Injected: 1\r\n\r\nGET /metrics", "application/json",
                   body, 2, 1);
    kv_it_grpc_stream *good =
        tc_call_as(&c, "/v3/maintenance/status", "application/json", body, 2, 1);
    cr_assert(bad && good);
    bad->discard = good->discard = 0;
    for (int i = 0; i < 40 && !(bad->closed && good->closed); i++)
        tc_pump(&c, 1, 100, NULL, NULL);
    cr_assert(bad->closed && good->closed, "no answer");
    cr_assert_eq(bad->close_code, NGHTTP2_PROTOCOL_ERROR, "status %d rst %u", bad->http_status,
                 bad->close_code);
    cr_assert_eq(good->http_status, 200, "status %d rst %u", good->http_status, good->close_code);
    tc_close(&c);
}

/* ------------------------------------------------------------------------------------------
 * D8: overload goodput
 * ------------------------------------------------------------------------------------------ */

typedef struct load {
    tconn *cs;
    size_t nc;
    int per_conn;
    uint8_t *body;
    size_t blen;
    long ok, exhausted, refused, other;
    char other_msg[256];
} load;

/* Keeps per_conn streams in flight on every connection, counting outcomes. */
static void load_run(load *l, uint32_t ms)
{
    uint64_t end = kv_it_now_ms() + ms;
    while (kv_it_now_ms() < end) {
        for (size_t i = 0; i < l->nc; i++) {
            tconn *c = &l->cs[i];
            size_t keep = 0;
            for (size_t j = 0; j < c->n_open; j++) { /* reap finished streams */
                kv_it_grpc_stream *st = c->open[j];
                if (!st->closed) {
                    c->open[keep++] = st;
                    continue;
                }
                if (st->grpc_status == 0)
                    l->ok++;
                else if (st->grpc_status == 8)
                    l->exhausted++;
                else if (st->grpc_status == -1 && st->close_code == NGHTTP2_REFUSED_STREAM)
                    l->refused++; /* not processed (SETTINGS_MAX_CONCURRENT_STREAMS lowered) */
                else {
                    l->other++;
                    snprintf(l->other_msg, sizeof(l->other_msg), "status %d rst %u %.200s",
                             st->grpc_status, st->close_code, st->grpc_message);
                }
                kv_it_grpc_stream_free(st);
            }
            c->n_open = keep;
            while (!tc_dead(c) && (int)c->n_open < l->per_conn)
                if (!tc_call(c, "/etcdserverpb.KV/Put", l->body, l->blen, 1))
                    break;
        }
        tc_pump(l->cs, l->nc, 50, NULL, NULL);
    }
}

Test(transport, overload_keeps_goodput)
{
    /* Admitted requests must be answered, not time out: --max-pending-request-bytes bounds the
     * unanswered requests kvd holds, and they must commit within the request timeout (7 s).
     * The default (64 MiB: ~640 of these 100 KB puts) drains in ~1 s in a release build; the
     * ASan build commits ~75 of them a second, so it would hold 8 s of work and time some
     * out (CI saw 78 "request timed out"). Under ASan the bound is scaled to its throughput:
     * the bound is a byte count, not a delay (docs/ARCHITECTURE.md, "Bounds"). */
    static const char *const asan_args[] = {"--max-pending-request-bytes=16777216", NULL};
    start_server(ASAN_BUILD ? asan_args : NULL);
    size_t len;
    uint8_t *req = pack_put("/load/key", 100 * 1000, &len);
    load l = {0};
    l.body = frame(req, len, &l.blen);
    free(req);
    /* Capacity first: a modest load (one connection, 8 streams). */
    tconn one;
    cr_assert_eq(tc_open(&one, srv->client_port, -1), 0);
    l.cs = &one;
    l.nc = 1;
    l.per_conn = 8;
    load_run(&l, 3000);
    long capacity = l.ok;
    cr_assert_eq(l.other, 0, "%s", l.other_msg);
    tc_close(&one);
    uint64_t base = rss();

    /* Overload: 6 connections x 1000 streams of 100 KB puts (100 MB in flight per connection;
     * h2load found the collapse at 20 x 1000). */
    enum { NC = 6 };
    tconn cs[NC];
    for (int i = 0; i < NC; i++)
        cr_assert_eq(tc_open(&cs[i], srv->client_port, -1), 0);
    l.ok = l.exhausted = l.refused = l.other = 0;
    l.cs = cs;
    l.nc = NC;
    l.per_conn = 1000;
    uint64_t peak = 0;
    int rounds = ASAN_BUILD ? 40 : 12;
    for (int t = 0; t < rounds; t++) {
        load_run(&l, 500);
        uint64_t r = rss();
        peak = r > peak ? r : peak;
    }
    cr_log_info("overload: kvd_apply_batches_total %.0f, kvd_apply_batch_size_max %.0f, "
                "kvd_proposals_pending %.0f, buffered %.0f",
                metric("kvd_apply_batches_total", NULL), metric("kvd_apply_batch_size_max", NULL),
                metric("kvd_proposals_pending", NULL),
                metric("kvd_grpc_conn_buffered_bytes_total", NULL));
    cr_log_info("overload: capacity %ld ok/3s; under overload %ld ok, %ld RESOURCE_EXHAUSTED, "
                "%ld REFUSED_STREAM, %ld other in %d s; RSS %llu -> peak %llu MB",
                capacity, l.ok, l.exhausted, l.refused, l.other, rounds / 2,
                (unsigned long long)(base / MB), (unsigned long long)(peak / MB));
    cr_assert_eq(l.other, 0, "only RESOURCE_EXHAUSTED / REFUSED_STREAM shed: %s", l.other_msg);
    cr_assert_gt(l.exhausted, 0, "the excess is shed with RESOURCE_EXHAUSTED");
    /* Goodput stays substantial: measured 40-80% of the modest load's rate on a 2-core box
     * where the load generator competes with kvd for CPU; the code before the fix served 0.
     * Asserted with a wide margin for noisy CI: an eighth of that rate. */
    cr_assert_geq(l.ok, capacity / 4 > 30 ? capacity / 4 : 30, "goodput %ld vs capacity %ld/3s",
                  l.ok, capacity);
    if (!ASAN_BUILD)
        cr_assert_lt(peak - base, 300u * MB, "RSS bounded: +%llu MB",
                     (unsigned long long)((peak - base) / MB));
    for (int i = 0; i < NC; i++)
        tc_close(&cs[i]);
    free(l.body);
    cr_assert_eq(raw_get("/load/", "/load0", NULL), 1, "member still serves");
}
