/*
 * grpc_io.h - the seam between a connection's socket and its nghttp2 session.
 *
 * Contract: inbound socket bytes go through ops->recv, which hands zero or more plaintext
 * chunks to kv_grpc_conn_recv_plain(); outbound plaintext from nghttp2 goes through
 * ops->send, which appends the bytes to put on the wire to `out`. The plain (h2c) layer is
 * the identity. A TLS layer implements the same ops with OpenSSL memory BIOs (recv: write
 * ciphertext into the read BIO, SSL_read plaintext out; send: SSL_write, drain the write BIO
 * into out); handshake bytes are produced into `out` from recv, which is why recv receives
 * the connection (it may append to the connection's out buffer). TLS: grpc_tls.c.
 */
#ifndef KV_GRPC_IO_H
#define KV_GRPC_IO_H

#include <stddef.h>
#include <stdint.h>

typedef struct kv_grpc_conn kv_grpc_conn;

/* A growable byte buffer: live bytes are p[off..len). Storage exists only while the buffer
 * holds bytes: the first append allocates (at least KV_GRPC_BUF_MIN, doubling), draining it
 * (kv_grpc_buf_consume of the last byte) frees it, so an idle connection or stream costs
 * no buffer memory (server/grpc/README.md "Memory per connection"). */
#define KV_GRPC_BUF_MIN 512
typedef struct kv_grpc_buf {
    uint8_t *p;
    size_t off, len, cap;
} kv_grpc_buf;

/* Appends n bytes (compacting consumed space first). Returns 0 or -ENOMEM. */
int kv_grpc_buf_append(kv_grpc_buf *b, const void *data, size_t n);
/* Live bytes. */
size_t kv_grpc_buf_size(const kv_grpc_buf *b);
/* Drops n live bytes from the front. */
void kv_grpc_buf_consume(kv_grpc_buf *b, size_t n);
/* Frees storage. */
void kv_grpc_buf_free(kv_grpc_buf *b);

typedef struct kv_grpc_io_ops {
    const char *name;
    /* Returns 0 or a negative error (the connection is then closed). */
    int (*recv)(void *io, kv_grpc_conn *c, const uint8_t *in, size_t len);
    /* Returns 0 or a negative error (the connection is then closed). */
    int (*send)(void *io, kv_grpc_conn *c, const uint8_t *plain, size_t len, kv_grpc_buf *out);
    /* Frees io (called from the connection's close callback). May be NULL. */
    void (*destroy)(void *io);
} kv_grpc_io_ops;

/* The identity layer (h2c, prior knowledge). Its io pointer is unused (NULL). */
extern const kv_grpc_io_ops kv_grpc_io_plain;

/* Feeds plaintext into the connection's HTTP/2 session. Returns 0 or a negative error. */
int kv_grpc_conn_recv_plain(kv_grpc_conn *c, const uint8_t *in, size_t len);

#endif
