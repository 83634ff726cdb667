/*
 * grpc_server.h - server-side gRPC transport (h2c, HTTP/2 via nghttp2) on one libuv loop.
 *
 * Contract:
 * - Everything runs on the loop thread passed to kv_grpc_server_init(); no function here is
 *   thread-safe. Callbacks are invoked on that loop.
 * - The process must ignore SIGPIPE (libuv writes with write(2); a peer that reset the
 *   connection would otherwise kill the process).
 * - One HTTP/2 stream is one RPC (kv_grpc_call). The transport owns every kv_grpc_call: the
 *   app may use a call pointer from the first callback it receives for it until it either
 *   calls kv_grpc_call_finish() or receives on_cancel(); after that the pointer is invalid.
 *   Calls and connections are freed only from libuv callbacks outside nghttp2 callbacks
 *   (deferred free); handles are freed only in their close callbacks.
 * - Request messages are delivered synchronously (no queue of undelivered messages exists).
 *   Inbound memory per connection is bounded by max_recv_buffer_bytes plus the HTTP/2
 *   connection window (4 MiB); outbound app bytes per connection by max_send_buffer_bytes.
 * - TLS: not implemented yet; connection I/O goes through a small vtable (grpc_io.h) so a TLS
 *   layer (OpenSSL memory BIOs) can sit between the socket and nghttp2.
 * - Error codes: functions return 0 or a negative errno (-EINVAL, -ENOMEM, -ENOBUFS,
 *   -ECONNRESET, ...) or a negative libuv code (listen errors).
 */
#ifndef KV_GRPC_SERVER_H
#define KV_GRPC_SERVER_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "grpc/grpc_wire.h" /* KV_GRPC_* status codes */
#include "metrics/metrics.h"

typedef struct kv_grpc_server kv_grpc_server;
typedef struct kv_grpc_call kv_grpc_call; /* one HTTP/2 stream = one RPC */

typedef struct kv_grpc_method {
    const char *path; /* e.g. "/etcdserverpb.KV/Range" */
    int streaming;    /* 0 = unary, 1 = client/server/bidi streaming */
    /* Unary: called once, after END_STREAM, with the one request message (zero messages ->
     * INTERNAL "grpc: half-closed without a request", more than one -> INTERNAL
     * "grpc: too many request messages for a unary RPC"; the app is not called). Streaming:
     * called for every complete message as it arrives. msg is valid only during the call. */
    void (*on_message)(kv_grpc_call *call, const uint8_t *msg, size_t len);
    /* Streaming only: the client half-closed (END_STREAM). May be NULL: then a streaming call
     * that never delivered a message to the app is finished with OK by the transport. */
    void (*on_half_close)(kv_grpc_call *call);
    /* The stream went away (RST_STREAM, connection closed, deadline exceeded, oversized or
     * malformed message, server shutdown) before the app called kv_grpc_call_finish(). After
     * this returns the call pointer is invalid. Never called after finish, and never for a
     * call the app has not yet seen (no on_message/on_half_close delivered). May be NULL. */
    void (*on_cancel)(kv_grpc_call *call);
} kv_grpc_method;

/* etcd parity: etcd's --max-request-bytes defaults to 1.5 MiB and its gRPC server accepts
 * messages up to max-request-bytes + 512 KiB (grpcOverheadBytes); the application layer
 * enforces max-request-bytes itself ("etcdserver: request is too large"). This transport limit
 * is the gRPC one: default 1.5 MiB + 512 KiB = 2 MiB. */
#define KV_GRPC_DEFAULT_MAX_REQUEST_BYTES ((size_t)(1536 * 1024 + 512 * 1024))

typedef struct kv_grpc_config {
    size_t max_request_bytes;        /* one gRPC message; default 2 MiB (see above) */
    uint32_t max_concurrent_streams; /* per connection, advertised in SETTINGS; default 1000 */
    size_t max_send_buffer_bytes;    /* per connection outbound bytes; default 16 MiB */
    uint32_t max_connections;        /* default 10000; excess accepted then closed */
    uint32_t ping_interval_ms;       /* 0 = no keepalive pings; a ping unanswered by the next
                                        interval closes the connection */
    size_t max_recv_buffer_bytes;    /* (addition) per connection bytes held for partially
                                        received messages and paused streams; default 64 MiB;
                                        a stream that would exceed it gets RESOURCE_EXHAUSTED */
} kv_grpc_config;

/* Fills cfg with the defaults above. */
void kv_grpc_config_default(kv_grpc_config *cfg);

/* Creates a server on loop. methods (n_methods entries) is borrowed and must outlive the
 * server; app is opaque (kv_grpc_call_app()); metrics may be NULL, else it is borrowed and must
 * outlive the server (the server registers kvd_grpc_* series in it). cfg NULL = defaults; zero
 * fields take their default (except ping_interval_ms). *out is freed by kv_grpc_server_close().
 * Unknown paths get grpc-status 12 UNIMPLEMENTED with grpc-go's wording: "unknown service S"
 * or "unknown method M for service S" ("malformed method name: \"P\"" without a '/'). */
int kv_grpc_server_init(kv_grpc_server **out, uv_loop_t *loop, const kv_grpc_config *cfg,
                        const kv_grpc_method *methods, size_t n_methods, void *app,
                        kv_metrics *metrics);
/* Binds and listens on host:port (IPv4/IPv6 literal, or a name resolved once with blocking
 * getaddrinfo: call at startup only; port 0 picks a free port). */
int kv_grpc_server_listen(kv_grpc_server *s, const char *host, int port);
/* The bound port, or a negative error if not listening. */
int kv_grpc_server_port(kv_grpc_server *s);
/* Closes the listener and all connections (on_cancel for live calls, synchronously, so it
 * must not be called from inside a kv_grpc callback); frees in close callbacks; cb (may be
 * NULL) runs once everything is freed. s is invalid after this call returns. */
void kv_grpc_server_close(kv_grpc_server *s, void (*cb)(void *arg), void *arg);

/* Number of open connections (for tests/metrics). */
size_t kv_grpc_server_connections(kv_grpc_server *s);

void *kv_grpc_call_app(kv_grpc_call *c);
void kv_grpc_call_set_data(kv_grpc_call *c, void *data);
void *kv_grpc_call_data(kv_grpc_call *c);
/* The method path (static storage of the method table). */
const char *kv_grpc_call_method(kv_grpc_call *c);
/* Unique per server connection id (starting at 1). */
uint64_t kv_grpc_call_conn_id(kv_grpc_call *c);
/* (addition) Value of request metadata `name` (lower-case), or NULL if absent. Only these
 * keys are retained (each value up to 4 KiB, first occurrence): "token" (etcd auth token),
 * "authorization", "hasleader" (etcd WithRequireLeader). Valid while the call is. */
const char *kv_grpc_call_header(kv_grpc_call *c, const char *name);
/* Absolute deadline in uv_now() ms from grpc-timeout, or 0 if none. The transport itself
 * cancels calls whose deadline passes (DEADLINE_EXCEEDED trailers + on_cancel). */
uint64_t kv_grpc_call_deadline(kv_grpc_call *c);
/* Queue one response message (copied; 5-byte prefix added). Sends response HEADERS first if
 * not yet sent. Returns 0, -ENOBUFS if the connection's outbound buffer would exceed
 * max_send_buffer_bytes (counted as refused{reason="send_buffer"}), -ECONNRESET if the
 * connection is closing, -EINVAL if the call is finished. */
int kv_grpc_call_send(kv_grpc_call *c, const uint8_t *msg, size_t len);
/* End the RPC: trailers grpc-status/grpc-message (message percent-encoded; trailers-only
 * response if nothing was sent). The call is invalid after this returns (freed when the
 * stream closes). status 0 = OK. grpc_message may be NULL. Returns 0, -ECONNRESET (connection
 * closing: nothing sent, the call is still released) or -ENOMEM. */
int kv_grpc_call_finish(kv_grpc_call *c, int grpc_status, const char *grpc_message);
/* Streaming calls: stop consuming HTTP/2 flow-control window; DATA already in flight (at
 * most one stream window, 1 MiB) is held undelivered and the peer is flow-controlled.
 * on_message/on_half_close are not called while paused. No-op for unary calls. */
void kv_grpc_call_pause_recv(kv_grpc_call *c);
/* Resumes delivery; held messages are delivered from the loop (not from inside this call). */
void kv_grpc_call_resume_recv(kv_grpc_call *c);

/* (addition) Response bytes of this call queued in the transport and not yet taken by HTTP/2
 * (the peer's stream window or the socket is full): the call's own send buffer. */
size_t kv_grpc_call_send_queued(kv_grpc_call *c);

#endif
