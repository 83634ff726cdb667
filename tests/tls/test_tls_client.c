/*
 * test_tls_client.c - TLS on the client port: etcdctl 3.4 over TLS with the
 * right CA, a wrong CA, mutual TLS without a client certificate, plain h2c to a TLS port,
 * garbage before a handshake (only that connection closes), ALPN h2, TLS 1.1 refused.
 * Certificates are made at test time (gen_certs.sh).
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "tls_fixture.h"

static tls_fx g_f;

static void fini(void)
{
    tls_fx_destroy(&g_f);
}

static void start(const char *const *extra)
{
    cr_assert_eq(tls_fx_certs(&g_f, "kvd-tls"), 0, "certificates");
    int rc = tls_fx_start(&g_f, extra);
    if (rc != 0) {
        char cmd[4400];
        snprintf(cmd, sizeof(cmd), "cat %s >&2", g_f.kvd.log_path);
        (void)!system(cmd);
    }
    cr_assert_eq(rc, 0, "kvd with an https client port did not start: %d", rc);
}

/* etcdctl with the CA (and the client certificate when cert != 0); returns the exit code. */
static int ctl(const char *ca, int cert, const char *a1, const char *a2, const char *a3, char *out,
               size_t cap)
{
    const char *args[12];
    int n = 0;
    char cacert[4300], c1[4300], c2[4300];
    snprintf(cacert, sizeof(cacert), "--cacert=%s", tls_fx_path(&g_f, ca));
    args[n++] = cacert;
    if (cert) {
        snprintf(c1, sizeof(c1), "--cert=%s", tls_fx_path(&g_f, "client.pem"));
        snprintf(c2, sizeof(c2), "--key=%s", tls_fx_path(&g_f, "client-key.pem"));
        args[n++] = c1;
        args[n++] = c2;
    }
    args[n++] = a1;
    if (a2)
        args[n++] = a2;
    if (a3)
        args[n++] = a3;
    args[n] = NULL;
    kvt_cmd_result r;
    cr_assert_eq(tls_fx_ctl(&g_f, &r, args), 0);
    int code = r.timed_out ? 999 : r.exit_code;
    if (out)
        snprintf(out, cap, "%s%s", r.out, r.err);
    kvt_cmd_result_free(&r);
    return code;
}

Test(tls_client, etcdctl_put_get_over_tls, .fini = fini, .timeout = 120)
{
    start(NULL);
    char out[4096];
    cr_assert_eq(ctl("ca.pem", 0, "put", "tls-key", "tls-value", out, sizeof(out)), 0, "%s", out);
    cr_assert_eq(ctl("ca.pem", 0, "get", "tls-key", NULL, out, sizeof(out)), 0, "%s", out);
    cr_assert(strstr(out, "tls-key\ntls-value") != NULL, "%s", out);
    cr_assert_geq(tls_fx_metric(&g_f, "kvd_tls_handshakes_total{port=\"client\"}"), 2);
    cr_assert_eq(tls_fx_metric(&g_f, "kvd_tls_handshake_failures_total{port=\"client\"}"), 0);
}

Test(tls_client, wrong_ca_fails, .fini = fini, .timeout = 120)
{
    start(NULL);
    char out[4096];
    int code = ctl("ca2.pem", 0, "get", "k", NULL, out, sizeof(out));
    cr_assert_neq(code, 0, "etcdctl trusting another CA must fail: %s", out);
    cr_assert_geq(tls_fx_metric(&g_f, "kvd_tls_handshake_failures_total{port=\"client\"}"), 1);
    /* the server keeps serving */
    cr_assert_eq(ctl("ca.pem", 0, "put", "k", "v", out, sizeof(out)), 0, "%s", out);
}

Test(tls_client, client_cert_auth_rejects_client_without_cert, .fini = fini, .timeout = 120)
{
    start((const char *const[]){"--trusted-ca-file", "@ca.pem", "--client-cert-auth", NULL});
    char out[4096];
    int code = ctl("ca.pem", 0, "put", "k", "v", out, sizeof(out));
    cr_assert_neq(code, 0, "mutual TLS must refuse a client without a certificate: %s", out);
    cr_assert(tls_fx_log_has(&g_f, "did not return a certificate"), "no log line");
    cr_assert_eq(ctl("ca.pem", 1, "put", "k", "v", out, sizeof(out)), 0, "%s", out);
    cr_assert_eq(ctl("ca.pem", 1, "get", "k", NULL, out, sizeof(out)), 0, "%s", out);
    cr_assert(strstr(out, "k\nv") != NULL, "%s", out);
}

/* As etcd 3.4 (pkg/transport TLSInfo.ServerConfig: a trusted CA file or --client-cert-auth
 * means RequireAndVerifyClientCert): a trusted CA file alone requires client certificates,
 * so a configuration moved from etcd does not open the port to clients without one. */
Test(tls_client, a_trusted_ca_file_alone_requires_client_certificates, .fini = fini, .timeout = 120)
{
    start((const char *const[]){"--trusted-ca-file", "@ca.pem", NULL});
    char out[4096];
    int code = ctl("ca.pem", 0, "put", "k", "v", out, sizeof(out));
    cr_assert_neq(code, 0, "a client without a certificate was served: %s", out);
    cr_assert_eq(ctl("ca.pem", 1, "put", "k", "v", out, sizeof(out)), 0, "%s", out);
}

/* Reads until EOF or timeout; returns the bytes read (NUL-terminated in buf). */
static size_t read_until_eof(int fd, char *buf, size_t cap, int *eof)
{
    size_t got = 0;
    *eof = 0;
    uint64_t deadline = kvt_now_ms() + 10000;
    while (kvt_now_ms() < deadline && got + 1 < cap) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 200) <= 0)
            continue;
        ssize_t n = read(fd, buf + got, cap - 1 - got);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
            *eof = 1;
            break;
        }
        if (n > 0)
            got += (size_t)n;
    }
    buf[got] = 0;
    return got;
}

Test(tls_client, plain_h2c_gets_clear_error_and_server_keeps_serving, .fini = fini, .timeout = 120)
{
    start(NULL);
    int fd = kvt_connect_loopback(g_f.client_port, 3000);
    cr_assert_geq(fd, 0);
    static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
                                  "\x00\x00\x00\x04\x00\x00\x00\x00\x00"; /* empty SETTINGS */
    cr_assert_eq(kvt_send_all(fd, preface, sizeof(preface) - 1, kvt_now_ms() + 3000), 0);
    char buf[1024];
    int eof;
    read_until_eof(fd, buf, sizeof(buf), &eof);
    close(fd);
    cr_assert(strstr(buf, "HTTP/1.0 400 Bad Request") != NULL, "answer: '%s'", buf);
    cr_assert(strstr(buf, "Client sent an HTTP request to an HTTPS server") != NULL, "%s", buf);
    cr_assert(eof, "the server must close the connection");
    cr_assert(tls_fx_log_has(&g_f, "plain HTTP/2 (h2c) to a TLS port"), "no log line");
    char out[4096];
    cr_assert_eq(ctl("ca.pem", 0, "put", "after-h2c", "1", out, sizeof(out)), 0, "%s", out);
}

/* A blocking TLS client connection (trusting ca.pem, ALPN h2). */
typedef struct tcli {
    SSL_CTX *ctx;
    SSL *ssl;
    int fd;
} tcli;

static int tcli_open(tcli *t, int max_version)
{
    memset(t, 0, sizeof(*t));
    t->fd = kvt_connect_loopback(g_f.client_port, 3000);
    if (t->fd < 0)
        return -1;
    /* blocking from here */
    fcntl(t->fd, F_SETFL, fcntl(t->fd, F_GETFL) & ~O_NONBLOCK);
    struct timeval tv = {.tv_sec = 5};
    setsockopt(t->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(t->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    t->ctx = SSL_CTX_new(TLS_client_method());
    SSL_CTX_load_verify_locations(t->ctx, tls_fx_path(&g_f, "ca.pem"), NULL);
    SSL_CTX_set_verify(t->ctx, SSL_VERIFY_PEER, NULL);
    if (max_version) {
        SSL_CTX_set_security_level(t->ctx, 0);
        SSL_CTX_set_min_proto_version(t->ctx, TLS1_VERSION);
        SSL_CTX_set_max_proto_version(t->ctx, max_version);
    }
    static const unsigned char alpn[] = {2, 'h', '2'};
    SSL_CTX_set_alpn_protos(t->ctx, alpn, sizeof(alpn));
    t->ssl = SSL_new(t->ctx);
    SSL_set_fd(t->ssl, t->fd);
    return SSL_connect(t->ssl) == 1 ? 0 : -1;
}

static void tcli_close(tcli *t)
{
    SSL_free(t->ssl);
    SSL_CTX_free(t->ctx);
    if (t->fd >= 0)
        close(t->fd);
    ERR_clear_error();
}

/* Sends the h2 preface + SETTINGS and reads the server's SETTINGS: the session is alive. */
static int tcli_h2_alive(tcli *t)
{
    static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
                                  "\x00\x00\x00\x04\x00\x00\x00\x00\x00";
    if (SSL_write(t->ssl, preface, sizeof(preface) - 1) <= 0)
        return 0;
    unsigned char hdr[9];
    int n = SSL_read(t->ssl, hdr, sizeof(hdr));
    return n == 9 && hdr[3] == 0x04; /* a SETTINGS frame */
}

Test(tls_client, garbage_before_handshake_closes_only_that_connection, .fini = fini, .timeout = 120)
{
    start(NULL);
    /* A healthy TLS connection, handshake done, h2 not started yet. */
    tcli good;
    cr_assert_eq(tcli_open(&good, 0), 0, "TLS handshake failed");
    const unsigned char *proto = NULL;
    unsigned plen = 0;
    SSL_get0_alpn_selected(good.ssl, &proto, &plen);
    cr_assert(plen == 2 && memcmp(proto, "h2", 2) == 0, "ALPN h2 expected");
    cr_assert_geq(SSL_version(good.ssl), TLS1_2_VERSION);

    /* Garbage that looks like a TLS record header, then random bytes. */
    int fd = kvt_connect_loopback(g_f.client_port, 3000);
    cr_assert_geq(fd, 0);
    char junk[600];
    junk[0] = 0x16;
    junk[1] = 0x03;
    junk[2] = 0x01;
    junk[3] = 0x02;
    junk[4] = 0x00;
    for (size_t i = 5; i < sizeof(junk); i++)
        junk[i] = (char)(i * 37 + 11);
    cr_assert_eq(kvt_send_all(fd, junk, sizeof(junk), kvt_now_ms() + 3000), 0);
    char buf[256];
    int eof;
    read_until_eof(fd, buf, sizeof(buf), &eof);
    close(fd);
    cr_assert(eof, "the garbage connection must be closed");
    cr_assert(tls_fx_log_has(&g_f, "TLS handshake with 127.0.0.1:"), "no log line");
    cr_assert_geq(tls_fx_metric(&g_f, "kvd_tls_handshake_failures_total{port=\"client\"}"), 1);

    /* The other connection still works, and so do new ones. */
    cr_assert(tcli_h2_alive(&good), "the healthy connection was affected");
    tcli_close(&good);
    char out[4096];
    cr_assert_eq(ctl("ca.pem", 0, "put", "after-garbage", "1", out, sizeof(out)), 0, "%s", out);
}

Test(tls_client, tls_1_1_is_refused, .fini = fini, .timeout = 120)
{
    start(NULL);
    tcli old;
    int rc = tcli_open(&old, TLS1_1_VERSION);
    tcli_close(&old);
    cr_assert_neq(rc, 0, "a TLS 1.1 handshake must fail");
    tcli ok;
    rc = tcli_open(&ok, 0);
    tcli_close(&ok);
    cr_assert_eq(rc, 0);
}

Test(tls_client, stalled_handshake_times_out_without_blocking_the_loop, .fini = fini,
     .timeout = 120)
{
    start((const char *const[]){"--grpc-handshake-timeout=1s", NULL});
    /* Half a TLS record header, then nothing. */
    int fd = kvt_connect_loopback(g_f.client_port, 3000);
    cr_assert_geq(fd, 0);
    cr_assert_eq(kvt_send_all(fd, "\x16\x03\x01", 3, kvt_now_ms() + 3000), 0);
    uint64_t t0 = kvt_now_ms();
    /* Meanwhile other clients are served. */
    char out[4096];
    cr_assert_eq(ctl("ca.pem", 0, "put", "during-stall", "1", out, sizeof(out)), 0, "%s", out);
    char buf[64];
    int eof;
    read_until_eof(fd, buf, sizeof(buf), &eof);
    uint64_t waited = kvt_now_ms() - t0;
    close(fd);
    cr_assert(eof, "a stalled handshake must be closed");
    cr_assert_lt(waited, 8000, "closed after %llu ms", (unsigned long long)waited);
    cr_assert(tls_fx_log_has(&g_f, "did not complete"), "no log line");
}

/* Copies file src over dst (atomically, via a temp file and rename). */
static void replace_file(const char *src, const char *dst)
{
    char tmp[4400], cmd[9000];
    snprintf(tmp, sizeof(tmp), "%s.new", dst);
    snprintf(cmd, sizeof(cmd), "cp '%s' '%s' && mv '%s' '%s'", src, tmp, tmp, dst);
    cr_assert_eq(system(cmd), 0);
}

Test(tls_client, certificate_reload_keeps_established_connections, .fini = fini, .timeout = 120)
{
    cr_assert_eq(tls_fx_certs(&g_f, "kvd-tls"), 0, "certificates");
    /* kvd reads its own copies, which the test then replaces. */
    char cert[4300], key[4300], a1[4400], a2[4400];
    snprintf(cert, sizeof(cert), "%s", tls_fx_path(&g_f, "live.pem"));
    snprintf(key, sizeof(key), "%s", tls_fx_path(&g_f, "live-key.pem"));
    replace_file(tls_fx_path(&g_f, "server.pem"), cert);
    replace_file(tls_fx_path(&g_f, "server-key.pem"), key);
    snprintf(a1, sizeof(a1), "--cert-file=%s", cert);
    snprintf(a2, sizeof(a2), "--key-file=%s", key);
    int rc = tls_fx_start(&g_f, (const char *const[]){a1, a2, NULL});
    cr_assert_eq(rc, 0, "kvd did not start: %d", rc);
    tcli before;
    cr_assert_eq(tcli_open(&before, 0), 0, "TLS handshake failed");
    /* Swap in the certificate of CA 2 (key first: a check between the two sees a mismatch
     * and keeps the old pair, then picks up the new pair at the next check). */
    replace_file(tls_fx_path(&g_f, "other-key.pem"), key);
    replace_file(tls_fx_path(&g_f, "other.pem"), cert);
    char out[4096];
    int new_ca_ok = 0;
    for (int i = 0; i < 40 && !new_ca_ok; i++) {
        kvt_sleep_ms(250);
        new_ca_ok = ctl("ca2.pem", 0, "put", "after-reload", "1", out, sizeof(out)) == 0;
    }
    cr_assert(new_ca_ok, "new handshakes must use the reloaded certificate: %s", out);
    cr_assert_neq(ctl("ca.pem", 0, "get", "after-reload", NULL, out, sizeof(out)), 0,
                  "the old certificate must no longer be served");
    cr_assert(tcli_h2_alive(&before), "the established connection was dropped by the reload");
    tcli_close(&before);
    cr_assert(tls_fx_log_has(&g_f, "reloaded the certificate"), "no log line");
}

/* curl on url with --cacert ca (and the client certificate when cert != 0), -f so an HTTP
 * error status fails too; its exit code (999 on timeout), the body in out. */
static int curl_get(const char *url, const char *ca, int cert, char *out, size_t cap)
{
    const char *argv[16];
    int n = 0;
    argv[n++] = "/usr/bin/curl";
    argv[n++] = "-sSf";
    argv[n++] = "--max-time";
    argv[n++] = "5";
    if (ca) {
        argv[n++] = "--cacert";
        argv[n++] = tls_fx_path(&g_f, ca);
    }
    if (cert) {
        argv[n++] = "--cert";
        argv[n++] = tls_fx_path(&g_f, "client.pem");
        argv[n++] = "--key";
        argv[n++] = tls_fx_path(&g_f, "client-key.pem");
    }
    argv[n++] = url;
    argv[n] = NULL;
    kvt_cmd_result r;
    cr_assert_eq(kvt_run(argv, NULL, NULL, 0, 15000, &r), 0, "run curl");
    int code = r.timed_out ? 999 : r.exit_code;
    if (out)
        snprintf(out, cap, "%s%s", r.out, r.err);
    kvt_cmd_result_free(&r);
    return code;
}

/* An https --listen-metrics-urls URL serves TLS with the client port's context (etcd 3.4),
 * client-certificate auth included; plain HTTP to it gets no metrics. */
Test(tls_client, https_metrics_url_serves_tls_with_the_client_context, .fini = fini, .timeout = 120)
{
    uint16_t mport = 0;
    cr_assert_eq(tls_fx_certs(&g_f, "kvd-tls"), 0, "certificates"); /* resets the fixture */
    cr_assert_eq(kvt_port_free(&g_f.client_port), 0);
    cr_assert_eq(kvt_port_free(&g_f.peer_port), 0);
    cr_assert_eq(kvt_port_free(&g_f.metrics_port), 0);
    cr_assert_eq(kvt_port_free(&mport), 0);
    g_f.keep_ports = 1;
    char lm[160];
    snprintf(lm, sizeof lm, "--listen-metrics-urls=http://127.0.0.1:%u,https://127.0.0.1:%u",
             g_f.metrics_port, mport);
    cr_assert_eq(tls_fx_start(&g_f, (const char *const[]){"--trusted-ca-file", "@ca.pem",
                                                          "--client-cert-auth", lm, NULL}),
                 0, "kvd did not start (log %s)", g_f.kvd.log_path);
    static char out[1 << 16];
    char https[64], http[64];
    snprintf(https, sizeof https, "https://127.0.0.1:%u/metrics", mport);
    snprintf(http, sizeof http, "http://127.0.0.1:%u/metrics", mport);
    cr_assert_eq(curl_get(https, "ca.pem", 1, out, sizeof out), 0, "https /metrics: %s", out);
    cr_assert(strstr(out, "# TYPE etcd_cluster_version gauge"), "no metrics over TLS: %.300s", out);
    snprintf(https, sizeof https, "https://127.0.0.1:%u/health", mport);
    cr_assert_eq(curl_get(https, "ca.pem", 1, out, sizeof out), 0, "https /health: %s", out);
    cr_assert(strstr(out, "{\"health\":\"true\"}"), "%s", out);
    snprintf(https, sizeof https, "https://127.0.0.1:%u/metrics", mport);
    cr_assert_neq(curl_get(https, "ca.pem", 0, out, sizeof out), 0,
                  "--client-cert-auth did not apply to the https metrics URL");
    cr_assert_neq(curl_get(https, "ca2.pem", 1, out, sizeof out), 0, "another CA passed");
    cr_assert_neq(curl_get(http, NULL, 0, out, sizeof out), 0, "plain HTTP on the TLS port");
    cr_assert(!strstr(out, "# TYPE"), "plain HTTP got metrics: %.300s", out);
    /* the server keeps serving after the failures */
    cr_assert_eq(curl_get(https, "ca.pem", 1, out, sizeof out), 0, "https /metrics: %s", out);
}

/* Without client TLS (no --cert-file/--key-file, no --auto-tls) an https metrics URL is
 * refused at start with etcd's words, instead of serving plain HTTP on it. */
Test(tls_client, https_metrics_url_without_client_tls_refused, .fini = fini, .timeout = 60)
{
    cr_assert_eq(tls_fx_certs(&g_f, "kvd-tls"), 0, "certificates");
    char bin[4096], dd[4200];
    snprintf(dd, sizeof dd, "--data-dir=%s/data-nometricstls", g_f.dir.path);
    const char *argv[] = {tls_fx_kvd_bin(bin, sizeof bin),
                          dd,
                          "--listen-client-urls=http://127.0.0.1:0",
                          "--advertise-client-urls=http://127.0.0.1:2379",
                          "--listen-metrics-urls=https://127.0.0.1:0",
                          NULL};
    kvt_cmd_result r;
    cr_assert_eq(kvt_run(argv, NULL, NULL, 0, 20000, &r), 0);
    cr_assert(!r.timed_out && r.exit_code != 0, "exit %d: %s", r.exit_code, r.err);
    cr_assert(strstr(r.err, "cannot listen on TLS for 127.0.0.1:0: KeyFile and CertFile are not "
                            "presented"),
              "%s", r.err);
    kvt_cmd_result_free(&r);
}
