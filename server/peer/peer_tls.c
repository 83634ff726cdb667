/*
 * peer_tls.c - TLS under a peer connection: net/tls.h between the socket and the
 * nghttp2 session of peer_conn.c. One handshake per connection; connections are long-lived,
 * so kvd_tls_handshakes_total{port="peer"} equals the peer connections made (dialed +
 * accepted, kvd_peer_connects_total) plus failed attempts counted in
 * kvd_tls_handshake_failures_total{port="peer"}. Loop thread only.
 */
#include "peer/peer_internal.h"
#include "net/tls.h"

#include <stdio.h>
#include <stdlib.h>

#define PEER_TLS_WBUF (PEER_WRITE_CHUNK + 32 * 1024) /* peer_conn.c's wbuf size */

int kv_peer_tls_attach(peer_conn *c, kv_tls_ctx *ctx, const char *verify_host)
{
    int rc = kv_tls_conn_new(ctx, c->where, verify_host, &c->tls);
    if (rc < 0)
        return rc;
    if (verify_host) /* dialer: ClientHello */
        rc = kv_tls_conn_start(c->tls);
    return rc;
}

static int plain_in(void *arg, const uint8_t *p, size_t n)
{
    peer_conn *c = arg;
    if (kv_peer_h1_wants(c, p, n)) /* etcd's GET /members (peer_h1.c) */
        return kv_peer_h1_recv(c, p, n);
    /* plaintext exists only after a completed (and, with client-certificate auth, verified)
     * handshake: only now does an accepted connection get its HTTP/2 session */
    if (!c->h2 && kv_peer_conn_session_new(c) != 0) {
        kv_peer_conn_close(c, "cannot start the HTTP/2 session");
        return -1;
    }
    ssize_t rv = nghttp2_session_mem_recv(c->h2, p, n);
    if (rv < 0) {
        kv_peer_conn_close(c, nghttp2_strerror((int)rv));
        return -1;
    }
    return c->closing ? -1 : 0;
}

/* A failed handshake leaves its alert (bad certificate, ...) in the TLS output: send it, best
 * effort, before the close, so the other member learns why (Go logs "remote error: tls: bad
 * certificate", and so does kvd: net/tls.c). */
static void flush_alert(peer_conn *c)
{
    uint8_t buf[512];
    size_t n = kv_tls_conn_out_read(c->tls, buf, sizeof(buf));
    if (n == 0)
        return;
    uv_buf_t b = uv_buf_init((char *)buf, (unsigned)n);
    (void)uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
}

int kv_peer_tls_recv(peer_conn *c, const uint8_t *in, size_t len)
{
    int rc = kv_tls_conn_recv(c->tls, in, len, plain_in, c);
    if (rc == 0 || c->closing)
        return c->closing ? -1 : 0;
    if (!kv_tls_conn_established(c->tls) && c->wlen == 0)
        flush_alert(c); /* nothing else queued ahead of it */
    char why[300];
    snprintf(why, sizeof(why), "TLS: %s",
             kv_tls_conn_error(c->tls)[0] ? kv_tls_conn_error(c->tls) : "error");
    kv_peer_conn_close(c, why);
    return -1;
}

int kv_peer_tls_fill(peer_conn *c)
{
    if (!c->wbuf) {
        c->wbuf = malloc(PEER_TLS_WBUF);
        if (!c->wbuf) {
            kv_peer_conn_close(c, "out of memory");
            return -1;
        }
    }
    for (;;) {
        c->wlen += kv_tls_conn_out_read(c->tls, c->wbuf + c->wlen, PEER_TLS_WBUF - c->wlen);
        /* Nothing is pulled from nghttp2 before the handshake completes: its output would
         * pile up as plaintext inside the TLS layer. */
        if (c->wlen >= PEER_WRITE_CHUNK || kv_tls_conn_out_pending(c->tls) ||
            !kv_tls_conn_established(c->tls) || !c->h2)
            return 0;
        const uint8_t *d;
        ssize_t k = nghttp2_session_mem_send(c->h2, &d);
        if (k < 0) {
            kv_peer_conn_close(c, nghttp2_strerror((int)k));
            return -1;
        }
        if (k == 0)
            return 0;
        if (kv_tls_conn_write(c->tls, d, (size_t)k) != 0) {
            kv_peer_conn_close(c, "TLS write failed");
            return -1;
        }
    }
}
