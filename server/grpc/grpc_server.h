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
 * - Memory bounds (see server/grpc/README.md "Backpressure and memory"):
 *   inbound: DATA is credited to the peer's connection window only while the connection holds
 *   less than max_recv_buffer_bytes of partial messages and unanswered unary requests, so a
 *   connection holds at most that plus its window (4 MiB); a connection whose window is used
 *   up by partial messages sheds the ones furthest from completion (RESOURCE_EXHAUSTED).
 *   outbound: a response message may be up to max_response_bytes; it is streamed as the
 *   peer's flow-control window allows. A connection whose queued output exceeds
 *   max_send_buffer_bytes gets no further request delivered until it drains (backpressure);
 *   a stream whose output makes no progress for send_stall_timeout_ms is reset.
 *   process: the sum over all connections stays under max_buffered_bytes (stalled output
 *   and the largest partial requests are shed first; a send that still does not fit fails).
 * - TLS: cfg.tls set = every accepted connection is TLS (grpc_tls.c over net/tls.h, OpenSSL
 *   memory BIOs between the socket and nghttp2; the handshake counts as part of
 *   handshake_timeout_ms).
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
                                        received messages, paused streams and unanswered unary
                                        requests before the connection window stops being
                                        credited; default 16 MiB */
    /* Hardening additions; 0 = default unless stated. */
    size_t max_response_bytes;        /* one response message; default 256 MiB, at most
                                         max_buffered_bytes; larger -> kv_grpc_call_send -EMSGSIZE */
    size_t max_buffered_bytes;        /* cap on in + out bytes over all connections; 512 MiB */
    uint32_t handshake_timeout_ms;    /* close a connection that completes no request header
                                         block within this after accept; default 10 s */
    uint32_t max_connection_idle_ms;  /* GOAWAY + close a connection without calls for this
                                         long (grpc-go MaxConnectionIdle); 0 = never */
    uint32_t keepalive_min_time_ms;   /* grpc-go EnforcementPolicy.MinTime: more than 2 PINGs
                                         closer than this -> GOAWAY ENHANCE_YOUR_CALM
                                         "too_many_pings"; default 5 s (etcd's) */
    uint32_t ping_timeout_ms;         /* our keepalive PING unanswered this long closes the
                                         connection; 0 = ping_interval_ms */
    uint32_t send_stall_timeout_ms;   /* a stream whose queued output makes no progress this long
                                         is reset; a socket write this long closes; 30 s */
    size_t max_pending_request_bytes; /* unary requests handed to the app and not yet answered
                                         (e.g. queued proposals), all connections: past it no
                                         unary request is delivered (its DATA stays unconsumed)
                                         until the app drains to 3/4; default 64 MiB */
    /* NULL-terminated method paths served ahead of bulk requests (lease renewals and lease
     * reads), or NULL: a unary request of one of them is delivered even
     * while max_pending_request_bytes is reached, and admitted on a saturated connection.
     * Only for methods whose requests are small and answered from memory. Borrowed: must
     * outlive the server. */
    const char *const *priority_methods;
    /* 1: HPACK without dynamic tables, both ways (SETTINGS_HEADER_TABLE_SIZE 0 for what
     * clients send, no table for what we send): headers cost ~100-200 more bytes on the wire
     * per request, a connection ~0.7 KiB less memory (bench/conn). For many long-lived,
     * mostly idle connections (the grpc-proxy's agents). 0: nghttp2's 4 KiB tables. */
    int no_hpack_dynamic_table;
    /* (addition) Called on the loop before a call's first delivery to its method (a unary
     * request; a stream's first message, or its half-close if it sent none), NULL = admit all.
     * Returns 0 to deliver; nonzero when it ended the call itself with kv_grpc_call_finish
     * (the method then never sees the call). Called the same way for in-process calls (the
     * HTTP gateway's, grpc_local.c), whose sink's finish may free the call. */
    int (*admit)(kv_grpc_call *call);
    struct kv_tls_ctx *tls; /* NULL: h2c; else a server context of
                               net/tls.h (borrowed: keep it until the server is
                               closed; connections hold their own reference) */
} kv_grpc_config;

#define KV_GRPC_DEFAULT_MAX_RESPONSE_BYTES ((size_t)256 * 1024 * 1024)
#define KV_GRPC_DEFAULT_MAX_BUFFERED_BYTES ((size_t)512 * 1024 * 1024)

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
/* (addition) Ends every open streaming call the app has seen and not finished whose request
 * metadata `header` (one of the retained keys, kv_grpc_call_header) equals value: the method's
 * on_cancel runs, then the client gets trailers grpc_status / msg. Not from inside a kv_grpc
 * callback of an affected call. Returns how many were ended. */
size_t kv_grpc_server_end_streams(kv_grpc_server *s, const char *header, const char *value,
                                  int grpc_status, const char *msg);

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
 * not yet sent. The message is streamed under HTTP/2 flow control; a full connection is not an
 * error (it stops the connection's request delivery instead). Returns 0, -EMSGSIZE if len >
 * max_response_bytes (refused{reason="response_size"}), -ENOBUFS if the process-wide cap
 * cannot fit it (refused{reason="buffered_cap_send"}) or, for streaming calls only, if this
 * call's own unsent output (not empty) would exceed max_send_buffer_bytes (its reader is not
 * reading; refused{reason="send_buffer"}), -ECONNRESET if the connection is closing, -EINVAL if the
 * call is finished. On any error nothing was queued. */
int kv_grpc_call_send(kv_grpc_call *c, const uint8_t *msg, size_t len);
/* (addition) End the RPC with RST_STREAM(INTERNAL_ERROR) instead of a status: for a request
 * whose effect is committed but whose response cannot be delivered (a gRPC status would claim
 * an outcome; a reset says "unknown"). The call is invalid after this returns. Returns 0 or
 * -EINVAL if the call is already finished. */
int kv_grpc_call_abort(kv_grpc_call *c);
/* (addition) The server's max_response_bytes (for error messages). */
size_t kv_grpc_call_max_response_bytes(kv_grpc_call *c);
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

/* The subject CN of the client certificate verified on the call's TLS connection,
 * "" without TLS or without a client certificate (for auth later). Valid while the call is. */
const char *kv_grpc_call_peer_cn(kv_grpc_call *c);

/* (addition) Response bytes of this call queued in the transport and not yet taken by HTTP/2
 * (the peer's stream window or the socket is full): the call's own send buffer. */
size_t kv_grpc_call_send_queued(kv_grpc_call *c);

#endif
