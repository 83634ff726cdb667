/*
 * server_http1_parse: the HTTP/1.1 request heads kvd's two HTTP servers (the client port's
 * HTTP/1.1 branch, server/http/client_http.c, and the metrics port, http_server.c) accept,
 * against a real kvd:
 *  - bare_lf_is_answered: lines ending in a bare LF are answered at once, as etcd's Go server
 *    (net/textproto) does, instead of waiting for a CRLF CRLF that never comes.
 *  - nul_in_header_is_refused: a NUL in a header name (or value, or the request line) is
 *    answered 400 and the connection closed.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "kvt_util.h"

static kv_it_server *srv;

static void setup(void)
{
    srv = calloc(1, sizeof(*srv));
    cr_assert(srv);
    /* the smallest send buffer: pipelined_requests_wait_for_the_reader pauses at it */
    static const char *const args[] = {"--max-send-buffer-bytes", "65536", NULL};
    cr_assert_eq(kv_it_server_init(srv, KV_IT_KVD, args), 0);
    cr_assert_eq(kv_it_server_start(srv, 60000), 0, "kvd did not start");
}

static void teardown(void)
{
    if (srv) {
        kv_it_server_destroy(srv);
        free(srv);
        srv = NULL;
    }
}

TestSuite(server_http1_parse, .init = setup, .fini = teardown, .timeout = 120);

/* Sends len raw bytes on a new connection and reads until the head of a response has arrived
 * (an empty line after the status line), the server closed, or 20 s passed (far above any
 * answer time; an unanswered request shows as an empty result). Returns the bytes read
 * (malloc'd, NUL-terminated). */
static char *exchange(uint16_t port, const char *req, size_t len)
{
    int fd = kvt_connect_loopback(port, 5000);
    cr_assert(fd >= 0, "connect %u: %d", port, fd);
    uint64_t deadline = (uint64_t)(kvt_now_us() / 1000) + 20000;
    cr_assert_eq(kvt_send_all(fd, req, len, deadline), 0, "send");
    size_t cap = 65536, n = 0;
    char *buf = calloc(1, cap);
    cr_assert(buf);
    while (n + 1 < cap && !strstr(buf, "\r\n\r\n")) {
        int64_t left = (int64_t)deadline - kvt_now_us() / 1000;
        if (left <= 0)
            break;
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, (int)left) <= 0)
            break;
        ssize_t r = read(fd, buf + n, cap - n - 1);
        if (r < 0 && errno == EAGAIN)
            continue;
        if (r <= 0)
            break;
        n += (size_t)r;
        buf[n] = '\0';
    }
    close(fd);
    return buf;
}

static void expect_status(uint16_t port, const char *what, const char *req, size_t len,
                          const char *want)
{
    char *r = exchange(port, req, len);
    cr_assert(strncmp(r, want, strlen(want)) == 0, "%s on port %u: want \"%s\", got \"%.200s\"",
              what, port, want, r);
    free(r);
}

Test(server_http1_parse, bare_lf_is_answered)
{
    static const char ver[] = "GET /version HTTP/1.1\nHost: kvd\nConnection: close\n\n";
    expect_status(srv->client_port, "bare-LF /version", ver, sizeof(ver) - 1, "HTTP/1.1 200");
    static const char mixed[] = "GET /version HTTP/1.1\r\nHost: kvd\nConnection: close\r\n\n";
    expect_status(srv->client_port, "mixed CRLF/LF /version", mixed, sizeof(mixed) - 1,
                  "HTTP/1.1 200");
    static const char met[] = "GET /metrics HTTP/1.1\nHost: kvd\n\n";
    expect_status(srv->metrics_port, "bare-LF /metrics", met, sizeof(met) - 1, "HTTP/1.1 200");
    /* A bare CR is not a line end. */
    static const char cr[] = "GET /version HTTP/1.1\r\nHost: k\rvd\r\n\r\n";
    expect_status(srv->client_port, "bare CR", cr, sizeof(cr) - 1, "HTTP/1.1 400");
    /* Still serving CRLF requests. */
    static const char ok[] = "GET /version HTTP/1.1\r\nHost: kvd\r\nConnection: close\r\n\r\n";
    expect_status(srv->client_port, "CRLF /version", ok, sizeof(ok) - 1, "HTTP/1.1 200");
}

Test(server_http1_parse, nul_in_header_is_refused)
{
    static const char name[] = "GET /version HTTP/1.1\r\nX-A\0B: 1\r\nHost: kvd\r\n\r\n";
    expect_status(srv->client_port, "NUL in a header name", name, sizeof(name) - 1, "HTTP/1.1 400");
    static const char lead[] = "GET /version HTTP/1.1\r\n\0X: 1\r\nHost: kvd\r\n\r\n";
    expect_status(srv->client_port, "NUL leading a header name", lead, sizeof(lead) - 1,
                  "HTTP/1.1 400");
    static const char val[] = "GET /version HTTP/1.1\r\nX-A: 1\0 2\r\nHost: kvd\r\n\r\n";
    expect_status(srv->client_port, "NUL in a header value", val, sizeof(val) - 1, "HTTP/1.1 400");
    static const char met[] = "GET /metrics HTTP/1.1\r\nX-A\0B: 1\r\n\r\n";
    expect_status(srv->metrics_port, "NUL in a header name (metrics port)", met, sizeof(met) - 1,
                  "HTTP/1.1 400");
    static const char ok[] = "GET /version HTTP/1.1\r\nHost: kvd\r\nConnection: close\r\n\r\n";
    expect_status(srv->client_port, "CRLF /version", ok, sizeof(ok) - 1, "HTTP/1.1 200");
}

/* A client that pipelines requests and never reads the answers: kvd answers until
 * --max-send-buffer-bytes wait for the reader (64 KiB here), then waits too (Go's net/http
 * answers one request before it reads the next), and counts the pause in
 * kvd_grpc_conn_backpressure_total. It used to answer every buffered request at once, into
 * memory: 3,000 "GET /metrics" held hundreds of MiB. The answers still come once the client
 * reads. */
static double backpressure_total(void)
{
    int status = 0;
    char *body = NULL;
    double v = -1;
    cr_assert_eq(kvt_http_get(srv->client_port, "/metrics", 5000, &status, &body), 0);
    cr_assert_eq(status, 200);
    cr_assert_eq(kvt_metric_value(body, "kvd_grpc_conn_backpressure_total", &v), 0);
    free(body);
    return v;
}

Test(server_http1_parse, pipelined_requests_wait_for_the_reader)
{
    static const char one[] = "GET /metrics HTTP/1.1\r\nHost: kvd\r\n\r\n";
    enum { N = 3000 };
    size_t len = (sizeof one - 1) * N;
    char *req = malloc(len);
    cr_assert(req);
    for (size_t i = 0; i < N; i++)
        memcpy(req + i * (sizeof one - 1), one, sizeof one - 1);
    long rss0 = kvt_proc_rss_kib(srv->pid);
    cr_assert_gt(rss0, 0);
    double paused0 = backpressure_total();
    int fd = kvt_connect_loopback(srv->client_port, 5000);
    cr_assert(fd >= 0);
    uint64_t deadline = (uint64_t)(kvt_now_us() / 1000) + 20000;
    cr_assert_eq(kvt_send_all(fd, req, len, deadline), 0, "send");
    free(req);
    kvt_sleep_ms(3000); /* far more than answering them all takes */
    long rss1 = kvt_proc_rss_kib(srv->pid);
    fprintf(stderr, "  %d pipelined GET /metrics, none read: kvd RSS %ld -> %ld KiB\n", N, rss0,
            rss1);
    /* 64 KiB queued: about 0.5 MiB more in a release build; ASan's quarantine keeps the freed
     * answers resident (22 MiB seen); unbounded, hundreds of MiB */
    cr_assert_lt(rss1 - rss0, 48 * 1024, "kvd queued the answers nobody reads (%ld KiB more)",
                 rss1 - rss0);
    cr_assert_gt(backpressure_total(), paused0, "the pause is not in the metric");
    /* the reader reads: answers follow */
    size_t cap = 1 << 20, n = 0, seen = 0;
    char *buf = malloc(cap + 1);
    cr_assert(buf);
    while (seen < 20) {
        struct pollfd p = {fd, POLLIN, 0};
        cr_assert_gt(poll(&p, 1, 10000), 0, "no more answers after %zu", seen);
        ssize_t r = read(fd, buf + n, cap - n);
        cr_assert_gt(r, 0, "closed after %zu answers", seen);
        n += (size_t)r;
        buf[n] = 0;
        for (char *q = buf; (q = strstr(q, "HTTP/1.1 200")) != NULL; q++)
            seen++;
        /* keep 11 bytes: a status line (12) may straddle two reads, and 11 hold none whole */
        size_t keep = n < 11 ? n : 11;
        memmove(buf, buf + n - keep, keep);
        n = keep;
    }
    free(buf);
    close(fd);
}
