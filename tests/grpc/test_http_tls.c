/* Live tests: the /metrics and /health server with TLS (kv_http_config.tls, an https metrics
 * URL): HTTP/1.1 inside TLS (ALPN http/1.1 even when h2 is offered first), plain HTTP and
 * garbage on the TLS port closed without metrics, and the request timeout and connection
 * bound still holding for connections stuck in or before the handshake. */
#include <criterion/criterion.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/ssl.h>

#include "net/tls.h"
#include "net/tls_self.h"
#include "test_support.h"

typedef struct tfx {
    char dir[64];
    kv_tls_ctx *ctx;
    SSL_CTX *cli;
} tfx;

static void tfx_init(tfx *f)
{
    snprintf(f->dir, sizeof f->dir, "/tmp/kvd-httptls-XXXXXX");
    cr_assert_not_null(mkdtemp(f->dir));
    char certs[96], cert[128], key[128], err[256] = "";
    snprintf(certs, sizeof certs, "%s/c", f->dir);
    const char *hosts[] = {"127.0.0.1"};
    cr_assert_eq(kv_tls_self_cert(certs, hosts, 1, 1, err, sizeof err), 0, "%s", err);
    snprintf(cert, sizeof cert, "%s/cert.pem", certs);
    snprintf(key, sizeof key, "%s/key.pem", certs);
    kv_tls_options o = {.cert_file = cert, .key_file = key, .server = 1, .label = "metrics"};
    cr_assert_eq(kv_tls_ctx_new(&f->ctx, &o, err, sizeof err), 0, "%s", err);
    f->cli = SSL_CTX_new(TLS_client_method());
    cr_assert_not_null(f->cli);
    cr_assert_eq(SSL_CTX_load_verify_locations(f->cli, cert, NULL), 1);
    SSL_CTX_set_verify(f->cli, SSL_VERIFY_PEER, NULL);
    static const unsigned char alpn[] = {2, 'h', '2', 8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
    SSL_CTX_set_alpn_protos(f->cli, alpn, sizeof alpn);
}

static void tfx_free(tfx *f)
{
    kv_tls_ctx_unref(f->ctx);
    SSL_CTX_free(f->cli);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", f->dir);
    (void)!system(cmd);
}

/* GET path over TLS; the whole response (malloc'd) or NULL. *alpn gets the selected one. */
static char *tls_get(tfx *f, int port, const char *path, char *alpn, size_t alpn_cap)
{
    int fd = tcp_connect(port);
    cr_assert(fd >= 0);
    SSL *ssl = SSL_new(f->cli);
    SSL_set_fd(ssl, fd);
    char *resp = NULL;
    if (SSL_connect(ssl) != 1)
        goto out;
    const unsigned char *sel = NULL;
    unsigned sl = 0;
    SSL_get0_alpn_selected(ssl, &sel, &sl);
    snprintf(alpn, alpn_cap, "%.*s", (int)sl, sel ? (const char *)sel : "");
    char req[256];
    int n = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path);
    if (SSL_write(ssl, req, n) != n)
        goto out;
    size_t cap = 1 << 20, len = 0;
    resp = calloc(1, cap + 1);
    int r;
    while (len < cap && (r = SSL_read(ssl, resp + len, (int)(cap - len))) > 0)
        len += (size_t)r;
out:
    SSL_free(ssl);
    close(fd);
    return resp;
}

/* Reads until EOF (1) or 3 s (0); the bytes read in buf. */
static int read_to_eof(int fd, char *buf, size_t cap)
{
    size_t len = 0;
    for (int i = 0; i < 30; i++) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 100) <= 0)
            continue;
        ssize_t r = recv(fd, buf + len, cap - 1 - len, 0);
        if (r <= 0) {
            buf[len] = 0;
            return 1;
        }
        len += (size_t)r;
    }
    buf[len] = 0;
    return 0;
}

Test(http_tls, metrics_and_health_over_tls)
{
    tfx f;
    tfx_init(&f);
    harness h;
    kv_http_config hc;
    kv_http_config_default(&hc);
    hc.tls = f.ctx;
    harness_start(&h, NULL, &hc);
    char alpn[32];
    char *r = tls_get(&f, h.http_port, "/metrics", alpn, sizeof alpn);
    cr_assert_not_null(r, "TLS handshake failed");
    cr_assert(strncmp(r, "HTTP/1.1 200 OK\r\n", 17) == 0, "%s", r);
    cr_assert(strstr(r, "# TYPE kvd_grpc_connections_open gauge\n"), "%s", r);
    cr_assert_str_eq(alpn, "http/1.1", "ALPN selected %s", alpn);
    free(r);
    r = tls_get(&f, h.http_port, "/health", alpn, sizeof alpn);
    cr_assert(r && strstr(r, "\r\n\r\n{\"health\":\"true\"}"), "%s", r ? r : "(null)");
    free(r);
    /* plain HTTP on the TLS port: no metrics, the connection closes */
    int fd = tcp_connect(h.http_port);
    const char get[] = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
    cr_assert_eq(send(fd, get, sizeof get - 1, 0), (ssize_t)sizeof get - 1);
    char buf[4096];
    cr_assert(read_to_eof(fd, buf, sizeof buf), "plain HTTP: connection left open");
    cr_assert(!strstr(buf, "200 OK") && !strstr(buf, "# TYPE"), "%s", buf);
    close(fd);
    /* garbage: closed too */
    fd = tcp_connect(h.http_port);
    cr_assert_eq(send(fd, "\x01\x02\x03garbage\r\n\r\n", 13, 0), 13);
    cr_assert(read_to_eof(fd, buf, sizeof buf), "garbage: connection left open");
    close(fd);
    /* still serving */
    r = tls_get(&f, h.http_port, "/metrics", alpn, sizeof alpn);
    cr_assert(r && strncmp(r, "HTTP/1.1 200 OK\r\n", 17) == 0, "%s", r ? r : "(null)");
    free(r);
    harness_stop(&h);
    cr_assert_eq(h.loop_close_rv, 0);
    free(h.metrics_text);
    tfx_free(&f);
}

/* A connection that never completes its handshake is closed at request_timeout_ms and
 * counted; with max_connections busy with silent handshakes, a new TLS client evicts one. */
Test(http_tls, stalled_handshakes_time_out_and_are_evicted)
{
    tfx f;
    tfx_init(&f);
    harness h;
    kv_http_config hc;
    kv_http_config_default(&hc);
    hc.tls = f.ctx;
    hc.request_timeout_ms = 1000;
    hc.max_connections = 2;
    harness_start(&h, NULL, &hc);
    int fd = tcp_connect(h.http_port);
    char buf[4096];
    cr_assert(read_to_eof(fd, buf, sizeof buf), "a silent connection was not closed");
    close(fd);
    int a = tcp_connect(h.http_port), b = tcp_connect(h.http_port);
    usleep(50 * 1000);
    char alpn[32];
    char *r = tls_get(&f, h.http_port, "/metrics", alpn, sizeof alpn);
    cr_assert(r && strncmp(r, "HTTP/1.1 200 OK\r\n", 17) == 0, "%s", r ? r : "(null)");
    cr_assert(strstr(r, "kvd_metrics_http_request_timeouts_total 1\n"), "%s", r);
    cr_assert(strstr(r, "kvd_metrics_http_evicted_total 1\n"), "%s", r);
    free(r);
    close(a);
    close(b);
    harness_stop(&h);
    cr_assert_eq(h.loop_close_rv, 0);
    free(h.metrics_text);
    tfx_free(&f);
}
