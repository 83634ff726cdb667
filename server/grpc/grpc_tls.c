/*
 * grpc_tls.c - the TLS I/O layer of a client connection (grpc_io.h ops over net/tls.h).
 *
 * recv: ciphertext -> kv_tls_conn_recv -> plaintext into the HTTP/2 session; handshake output
 * (and alerts) drained into c->out. send: nghttp2 output -> kv_tls_conn_write -> c->out. A
 * failed handshake (wrong CA, no client certificate, garbage, plain h2c) closes only that
 * connection, after its alert (or the HTTP 400 answer to plain HTTP) is written.
 * Loop thread only.
 */
#include "grpc/grpc_internal.h"
#include "net/listen.h"
#include "net/tls.h"

#include <errno.h>
#include <stdio.h>

static int emit_out(void *arg, const uint8_t *p, size_t n)
{
    kv_grpc_conn *c = arg;
    return kv_grpc_buf_append(&c->out, p, n);
}

static int plain_in(void *arg, const uint8_t *p, size_t n)
{
    return kv_grpc_conn_recv_plain(arg, p, n);
}

static void close_soon(kv_grpc_conn *c)
{
    c->close_after_write = 1;
    c->close_at = uv_now(c->srv->loop) + KV_GRPC_CLOSE_GRACE_MS;
    kv_grpc_srv_watch(c);
}

static int tls_recv(void *io, kv_grpc_conn *c, const uint8_t *in, size_t len)
{
    int rc = kv_tls_conn_recv(io, in, len, plain_in, c);
    int d = kv_tls_conn_drain(io, emit_out, c);
    if (d < 0)
        return d;
    if (rc == -EPROTO || rc == -ECONNRESET) {
        close_soon(c); /* the alert / HTTP 400 answer goes out first */
        return 0;
    }
    return rc;
}

static int tls_send(void *io, kv_grpc_conn *c, const uint8_t *plain, size_t len, kv_grpc_buf *out)
{
    (void)out; /* == &c->out */
    int rc = kv_tls_conn_write(io, plain, len);
    if (rc == -EPROTO && c->close_after_write)
        return 0; /* failed session being closed: drop the plaintext */
    if (rc < 0)
        return rc;
    return kv_tls_conn_drain(io, emit_out, c);
}

static void tls_destroy(void *io)
{
    kv_tls_conn_free(io);
}

static const kv_grpc_io_ops tls_ops = {
    .name = "tls",
    .recv = tls_recv,
    .send = tls_send,
    .destroy = tls_destroy,
};

int kv_grpc_tls_attach(kv_grpc_conn *c)
{
    char who[64] = "?";
    (void)kv_net_peer_name(&c->tcp, who, sizeof(who));
    kv_tls_conn *t = NULL;
    int rc = kv_tls_conn_new(c->srv->cfg.tls, who, NULL, &t);
    if (rc < 0)
        return rc;
    c->io_ops = &tls_ops;
    c->io = t;
    return 0;
}

const char *kv_grpc_call_peer_cn(kv_grpc_call *call)
{
    kv_grpc_conn *c = call->conn;
    if (c->raw_call) /* the stand-in of an HTTP/2 gateway stream: its stream's connection */
        c = c->raw_call->conn;
    if (c->io_ops != &tls_ops)
        return "";
    return kv_tls_conn_peer_cn(c->io);
}
