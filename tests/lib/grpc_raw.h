/*
 * grpc_raw: the one HTTP/2 (gRPC over h2c, prior knowledge) test client. Tests and kvbench
 * use it to talk to kvd and etcd independently of libkvclient (which has its own tests).
 * Deliberately small: no retries, no compression; TLS only when the caller gives an OpenSSL
 * context (kv_it_grpc_opts.ssl_ctx: its verification and ALPN settings apply).
 *
 * Two levels on one connection (kv_it_grpc):
 * - Unary: kv_it_grpc_call() — one call at a time, bounded by its timeout (sent as
 *   grpc-timeout too).
 * - Streams: any number of concurrent HTTP/2 streams (kv_it_grpc_stream): bidi or server
 *   streams (LeaseKeepAlive, Watch, Snapshot), pipelined unary calls, or requests with odd
 *   headers / raw DATA bytes for transport tests. Sending only queues; I/O happens in
 *   kv_it_grpc_pump / _wait / _flush / _io (the caller drives it: a stream the caller does
 *   not pump is a reader that does not read). Responses are read incrementally with
 *   kv_it_grpc_stream_next / _recv, or left in st->data.
 * - Raw frames: kv_it_grpc_session() gives the nghttp2 session, only for tests that
 *   deliberately send unusual frames (RST_STREAM, PING floods, SETTINGS changes).
 *
 * Contract:
 * - A kv_it_grpc is one TCP connection; it is not thread-safe (use one per thread). Streams
 *   belong to their connection (freed by kv_it_grpc_close at the latest).
 * - Every blocking function is bounded by its timeout; nothing blocks forever.
 * - Return codes: 0 on success, KV_IT_GRPC_STATUS when a unary call was answered with a
 *   non-zero grpc-status (see *status / message), or a negative errno-style code for
 *   transport failures (-ETIMEDOUT, -ECONNRESET, -EPROTO, -EMSGSIZE, -ENOMEM, ...). After a
 *   transport error the connection is unusable; close it.
 */
#ifndef KV_IT_GRPC_RAW_H
#define KV_IT_GRPC_RAW_H

#include <stddef.h>
#include <stdint.h>

#include <nghttp2/nghttp2.h>

#define KV_IT_GRPC_STATUS 1
/* Response bytes one stream may hold unread (st->data) before the connection fails with
 * -EMSGSIZE. */
#define KV_IT_GRPC_STREAM_LIMIT (64u * 1024u * 1024u)

typedef struct kv_it_grpc kv_it_grpc;

/* Connection options (kv_it_grpc_open_opts). Zero-initialised = nghttp2's defaults: 64 KiB
 * stream and connection windows, nothing else advertised. */
typedef struct kv_it_grpc_opts {
    int set_window;          /* 1: advertise SETTINGS_INITIAL_WINDOW_SIZE = window */
    uint32_t window;         /* 0 = a reader that never lets the server send DATA */
    uint32_t conn_window;    /* >0: open the connection receive window to this size */
    uint32_t max_concurrent; /* >0: advertise SETTINGS_MAX_CONCURRENT_STREAMS */
    int rcvbuf;              /* >0: SO_RCVBUF of the socket (set before connect) */
    int no_socket;           /* 1: no connection; frames are only produced, see
                              * kv_it_grpc_output() (host/port ignored) */
    void *ssl_ctx;           /* an SSL_CTX *: TLS over the socket, the handshake done in the
                              * open (bounded by its timeout; SIGPIPE is then set to SIG_IGN
                              * if at its default, as OpenSSL writes with write(2)); NULL: h2c */
} kv_it_grpc_opts;

/* Connects to host:port (IPv4 literal) and sends the HTTP/2 preface with 16 MiB stream and
 * 64 MiB connection windows. On success *out is owned by the caller and must be released
 * with kv_it_grpc_close(). */
int kv_it_grpc_open(kv_it_grpc **out, const char *host, uint16_t port, uint32_t timeout_ms);
/* The same with explicit options (opts NULL = zeroed options). */
int kv_it_grpc_open_opts(kv_it_grpc **out, const char *host, uint16_t port, uint32_t timeout_ms,
                         const kv_it_grpc_opts *opts);

/* Closes the connection and frees c and all its streams (NULL is allowed). */
void kv_it_grpc_close(kv_it_grpc *c);

/* Performs one unary call. method is the full path, e.g. "/etcdserverpb.KV/Put".
 * req/req_len is the serialized request message (not framed). On 0, *resp (malloc'd,
 * caller frees with free()) and *resp_len hold the response message. *status receives the
 * grpc-status (or -1 if none was received) and message (may be NULL) the grpc-message,
 * percent-decoded, NUL-terminated and truncated to message_cap. */
int kv_it_grpc_call(kv_it_grpc *c, const char *method, const uint8_t *req, size_t req_len,
                    uint8_t **resp, size_t *resp_len, uint32_t timeout_ms, int *status,
                    char *message, size_t message_cap);

/* ---- streams ---- */

/* Request headers of a stream; every field may be NULL/0. */
typedef struct kv_it_grpc_req {
    const char *method;          /* :method; NULL = "POST" */
    const char *authority;       /* :authority; NULL = "host:port" of the connection */
    const char *content_type;    /* NULL = "application/grpc" */
    const char *timeout;         /* grpc-timeout value as sent, e.g. "50m"; NULL = none */
    const char *const *metadata; /* extra headers: name, value, ..., NULL */
} kv_it_grpc_req;

/* One HTTP/2 stream. The fields above "private" are the caller's to read (updated by the
 * I/O functions); data/dlen may also be consumed by the caller (memmove + dlen). */
typedef struct kv_it_grpc_stream {
    int32_t id;
    int http_status;        /* :status, 0 until seen */
    int grpc_status;        /* -1 until seen (headers or trailers) */
    char grpc_message[512]; /* percent-decoded grpc-message */
    uint8_t *data;          /* response DATA received and not yet taken (gRPC-framed) */
    size_t dlen;
    uint64_t received;   /* response DATA bytes received in total */
    int closed;          /* the stream is closed (both ways, or reset) */
    uint32_t close_code; /* HTTP/2 error code it closed with (0 = NO_ERROR) */
    int discard;         /* set by the caller: count DATA in `received` but keep none */
    /* private */
    kv_it_grpc *conn_;
    uint8_t *out_;
    size_t out_len_, out_off_, out_cap_;
    int out_eof_;
    const uint8_t *ref_; /* borrowed request bytes (kv_it_grpc_send_ref) */
    size_t ref_len_, ref_off_;
    size_t dcap_;
    struct kv_it_grpc_stream *next_;
} kv_it_grpc_stream;

/* Submits a request on path (e.g. "/etcdserverpb.Watch/Watch"); the request body follows
 * with kv_it_grpc_send_*. NULL on failure (nghttp2 refused, ENOMEM). The stream is owned
 * by c; release it early with kv_it_grpc_stream_free. */
kv_it_grpc_stream *kv_it_grpc_stream_start(kv_it_grpc *c, const char *path,
                                           const kv_it_grpc_req *req);
/* Queues raw DATA bytes (eof = END_STREAM after them; n may be 0). */
int kv_it_grpc_send_raw(kv_it_grpc_stream *st, const void *data, size_t n, int eof);
/* Like kv_it_grpc_send_raw without a copy: data is borrowed until it is sent (until the
 * stream ends at the latest). -EBUSY while other request bytes are queued (and raw sends are
 * refused with -EBUSY while borrowed bytes are). For load generators with large bodies. */
int kv_it_grpc_send_ref(kv_it_grpc_stream *st, const void *data, size_t n, int eof);
/* Queues one gRPC message (5-byte prefix + msg). */
int kv_it_grpc_send_msg(kv_it_grpc_stream *st, const void *msg, size_t n, int eof);
/* Resets the stream with RST_STREAM(CANCEL) (queued) if it is still open. */
void kv_it_grpc_stream_cancel(kv_it_grpc_stream *st);
/* Cancels st if open and frees it (NULL allowed). */
void kv_it_grpc_stream_free(kv_it_grpc_stream *st);

/* Takes the first complete gRPC message out of st->data: 1 with *msg (malloc'd, caller
 * frees) and *len, 0 if none is complete yet, -EPROTO for a compressed or corrupt prefix.
 * No I/O. */
int kv_it_grpc_stream_next(kv_it_grpc_stream *st, uint8_t **msg, size_t *len);
/* kv_it_grpc_stream_next, pumping the connection for up to timeout_ms: 0 with a message;
 * -ECONNRESET once the stream has ended and holds no complete message (see grpc_status),
 * -ETIMEDOUT, or the connection's error. */
int kv_it_grpc_stream_recv(kv_it_grpc_stream *st, uint8_t **msg, size_t *len, uint32_t timeout_ms);
/* Takes every complete gRPC message out of st->data, in order: fn(arg, msg, len) for each (msg
 * points into st->data, valid during the call only; fn must not free st), then one memmove of
 * what is left. For readers of long or busy streams (Watch, LeaseKeepAlive under load), where
 * kv_it_grpc_stream_next's copy and shift per message would cost O(n^2) per read.
 * Returns the number of messages taken, or -EPROTO at a compressed or corrupt prefix (the
 * messages before it are taken). No I/O. */
int kv_it_grpc_stream_take(kv_it_grpc_stream *st,
                           void (*fn)(void *arg, const uint8_t *msg, size_t len), void *arg);
/* Number of complete gRPC messages in st->data; if msg, *msg and *len point at message idx
 * (inside st->data). */
size_t kv_it_grpc_stream_msgs(const kv_it_grpc_stream *st, size_t idx, const uint8_t **msg,
                              size_t *len);

/* ---- I/O ---- */

/* Writes what is queued, then waits up to wait_ms for input and processes one read.
 * 0, or -ECONNRESET / -EPROTO / -EMSGSIZE once the connection is gone. */
int kv_it_grpc_pump(kv_it_grpc *c, uint32_t wait_ms);
/* Pumps until st is closed (st NULL: until the connection closes) or timeout_ms passes;
 * 1 if that happened (a closed connection also ends the wait for st: then st->closed). */
int kv_it_grpc_wait(kv_it_grpc *c, kv_it_grpc_stream *st, uint32_t timeout_ms);
/* Pumps until st has received at least n response bytes (or closed); 1 if it has. */
int kv_it_grpc_wait_bytes(kv_it_grpc *c, kv_it_grpc_stream *st, size_t n, uint32_t timeout_ms);
/* Writes everything queued (all frames nghttp2 has, concatenated into one send() where the
 * socket takes it), waiting up to timeout_ms. 0, -ETIMEDOUT or -errno. */
int kv_it_grpc_flush(kv_it_grpc *c, uint32_t timeout_ms);
/* Non-blocking step for callers with their own poll loop over many connections (poll
 * kv_it_grpc_fd for POLLIN, and POLLOUT when kv_it_grpc_want_write; or an event loop's poll
 * handle on the fd, as bench/lease does with libuv): reads what is there if readable (until
 * the socket would block, at most 64 reads), writes what the socket takes. Never blocks.
 * 0 or the connection's error. The caller then looks at its streams (st->closed, st->data;
 * kv_it_grpc_stream_take). */
int kv_it_grpc_io(kv_it_grpc *c, int readable);
int kv_it_grpc_want_write(kv_it_grpc *c);
int kv_it_grpc_fd(const kv_it_grpc *c);

/* 1 once the connection was closed by the peer or failed. */
int kv_it_grpc_conn_closed(const kv_it_grpc *c);
/* 1 once a GOAWAY frame was received. */
int kv_it_grpc_goaway(const kv_it_grpc *c);
/* The nghttp2 session, for tests that deliberately submit raw frames (they are written by
 * the next I/O call). */
nghttp2_session *kv_it_grpc_session(kv_it_grpc *c);
/* Frames of the given type (NGHTTP2_DATA, NGHTTP2_HEADERS, ...) received so far. */
uint64_t kv_it_grpc_frames_received(const kv_it_grpc *c, uint8_t type);
/* no_socket connections: feeds the server's bytes to the session as if read from a socket.
 * 0, or -EPROTO (the connection is then closed; kv_it_grpc_conn_closed). */
int kv_it_grpc_input(kv_it_grpc *c, const uint8_t *data, size_t len);
/* no_socket connections: copies up to cap bytes of the frames produced so far (preface,
 * SETTINGS, requests) into out and returns how many. */
size_t kv_it_grpc_output(kv_it_grpc *c, uint8_t *out, size_t cap);

#endif
