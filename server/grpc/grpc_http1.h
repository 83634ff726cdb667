/*
 * grpc_http1.h - what the client port answers besides gRPC: the per-connection protocol split
 * and in-process ("local") calls into the gRPC method table.
 *
 * Protocol detection: a client connection's first plaintext bytes are compared with the HTTP/2
 * client preface ("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"). A connection whose bytes match it is
 * gRPC/h2c as before (the server's SETTINGS go out once the first bytes arrived); any other
 * first bytes hand the connection to the HTTP/1.x handler installed with
 * kv_grpc_server_set_http1() (without one, such a connection is closed as before, by the
 * HTTP/2 session's "bad client magic"). Detection runs on plaintext, so it works the same
 * under a TLS io layer (grpc_io.h).
 *
 * An HTTP/1 connection keeps the server's connection accounting, output path (io layer,
 * batching, write stall timeout) and the handshake list: it sits in that list while it waits
 * for a request head, so handshake_timeout_ms is its idle / slow-head timeout and idle HTTP/1
 * connections are evicted first at max_connections. It never sees nghttp2 frames.
 *
 * Local calls: the HTTP/1 handler (the grpc-gateway JSON API) runs a method of the server's
 * table with a request message it built; the method's handler sees an ordinary kv_grpc_call
 * (every kv_grpc_call_* function works; kv_grpc_call_header() returns the "authorization"
 * value the handler set with kv_grpc_local_set_authorization() and NULL for anything else,
 * there is no deadline) and its responses go to the sink instead of a stream. All on the
 * loop thread.
 *
 * HTTP/2 streams that are not gRPC: with a handler installed, an HTTP/2 request whose
 * content-type is not application/grpc (etcd sends those to its HTTP mux) is handed to the
 * same handler as one HTTP/1.1 request ("Connection: close") on a pseudo connection of its
 * own, once the request's END_STREAM arrived; the handler's HTTP/1.1 response is turned into
 * HEADERS and DATA (grpc_h2raw.c). The handler cannot tell: every kv_grpc_http1_* function
 * works on a pseudo connection (waiting is a no-op, hold checks the process-wide cap), and
 * its close op runs when the stream ends. Without a handler such a request gets 415 as before.
 */
#ifndef KV_GRPC_HTTP1_H
#define KV_GRPC_HTTP1_H

#include "grpc/grpc_server.h"

#include <stddef.h>
#include <stdint.h>

typedef struct kv_grpc_conn kv_grpc_conn;

typedef struct kv_grpc_http1_ops {
    /* A connection turned out to be HTTP/1.x. Returns the handler's per-connection state, or
     * NULL (the connection is closed). arg is kv_grpc_server_set_http1()'s. */
    void *(*open)(void *arg, kv_grpc_conn *c);
    /* Plaintext bytes from the client. Returns 0, or a negative error (closes at once). */
    int (*recv)(void *st, const uint8_t *in, size_t len);
    /* The connection's output was written out (nothing queued or in flight). May be NULL. */
    void (*drained)(void *st);
    /* The connection is closing: cancel local calls. st is freed here (the connection is
     * gone once this returns; no kv_grpc_http1_* call may name it afterwards). */
    void (*close)(void *st);
} kv_grpc_http1_ops;

/* Installs the HTTP/1 handler (ops borrowed, must outlive the server). Before listening. */
void kv_grpc_server_set_http1(kv_grpc_server *s, const kv_grpc_http1_ops *ops, void *arg);

/* Queues bytes on an HTTP/1 connection's output (through its io layer). 0, -ENOMEM,
 * -ECONNRESET (closing). */
int kv_grpc_http1_write(kv_grpc_conn *c, const void *data, size_t len);
/* Bytes queued or being written on the connection. */
size_t kv_grpc_http1_pending(kv_grpc_conn *c);
/* 1 while the connection's unread output is over the server's max_send_buffer_bytes
 * (--max-send-buffer-bytes): the HTTP/1 handler then takes no further pipelined request until
 * the output drained to half of it, as gRPC connections get no request delivered (each pause
 * counts once in kvd_grpc_conn_backpressure_total). 0 otherwise. */
int kv_grpc_http1_paused(kv_grpc_conn *c);
/* Closes the connection once its queued output is written. */
void kv_grpc_http1_end(kv_grpc_conn *c);
/* The connection waits for a request head (1: enters the timeout list, 0: leaves it). */
void kv_grpc_http1_waiting(kv_grpc_conn *c, int waiting);
/* The HTTP/1 handler holds `bytes` of input for this connection (its request buffer): counted
 * in the server's process-wide buffer cap (max_buffered_bytes) like gRPC's partial messages.
 * Returns 0, or -ENOBUFS if growing to `bytes` would pass the cap (nothing changed; the
 * refusal is counted in kvd_grpc_requests_refused_total{reason="buffered_cap_recv"}). */
int kv_grpc_http1_hold(kv_grpc_conn *c, size_t bytes);
/* The server's app pointer and metrics registry. */
void *kv_grpc_http1_app(kv_grpc_conn *c);
/* The connection's server. */
kv_grpc_server *kv_grpc_http1_server(kv_grpc_conn *c);

/* ---- local calls ---- */
typedef struct kv_grpc_local_sink {
    /* One response message (copied by the sink as needed). Returns 0 or a negative errno
     * (returned to the handler's kv_grpc_call_send). */
    int (*send)(void *arg, const uint8_t *msg, size_t len);
    /* The handler finished (status, message may be NULL) or aborted (status -1: the outcome
     * is unknown). The call must not be used by the handler afterwards; the sink's owner
     * frees it with kv_grpc_local_free() (possibly from inside this callback). */
    void (*finish)(void *arg, int status, const char *msg);
    /* Response bytes the sink still holds (kv_grpc_call_send_queued). May be NULL. */
    size_t (*queued)(void *arg);
} kv_grpc_local_sink;

/* Creates a local call of method `path` for connection c. Returns 0, -ENOENT (no such method:
 * the caller answers UNIMPLEMENTED) or -ENOMEM. */
int kv_grpc_local_new(kv_grpc_conn *c, const char *path, const kv_grpc_local_sink *sink, void *arg,
                      kv_grpc_call **out);
/* The call's "authorization" metadata (grpc-gateway forwards the HTTP Authorization header
 * so; kv_grpc_call_header(call, "authorization") returns it), copied. Before the first
 * kv_grpc_local_deliver. As gRPC metadata: the first value wins and a value over 4 KiB
 * (KV_GRPC_MAX_META_VALUE) is dropped. 0 or -ENOMEM. */
int kv_grpc_local_set_authorization(kv_grpc_call *call, const char *value, size_t len);
/* Delivers one request message (unary: exactly once). The handler may finish synchronously. */
void kv_grpc_local_deliver(kv_grpc_call *call, const uint8_t *msg, size_t len);
/* Streaming: the client half-closed (the method's on_half_close, if any). */
void kv_grpc_local_half_close(kv_grpc_call *call);
/* Whether the method is streaming. */
int kv_grpc_local_streaming(kv_grpc_call *call);
/* Frees the call; if the handler has not finished it, its on_cancel runs first. */
void kv_grpc_local_free(kv_grpc_call *call);

#endif
