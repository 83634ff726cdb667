/*
 * lbconn: one gRPC connection of leasebench on a libuv loop: tests/lib's HTTP/2 client
 * (grpc_raw.h, non-blocking mode: kv_it_grpc_io on a uv_poll_t of its socket) carrying any
 * number of concurrent unary calls and at most one LeaseKeepAlive bidirectional stream. This
 * file is only the glue (callbacks, the keepalive protocol); it has no HTTP/2 code.
 *
 * Contract:
 * - Single-threaded: every function runs on the loop's thread.
 * - lb_conn_open connects at once (bounded); afterwards the event callback reports only a
 *   failure (connect error, reset, protocol error), once, with a negative errno-style code.
 *   Unary calls still pending then never complete (they are dropped at lb_conn_close).
 * - Callbacks run from the loop's poll callback, after the read; they may start new calls and
 *   send on the keepalive stream, not close the connection. Bytes are written when
 *   lb_conn_flush() is called (the connection also flushes after each read).
 * - lb_conn_close() closes the handle; the memory is freed in the close callback (libuv
 *   rule), so run the loop afterwards.
 * - Functions return 0 or a negative errno-style code.
 */
#ifndef LB_LBCONN_H
#define LB_LBCONN_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef struct lb_conn lb_conn;

/* Called once when the connection fails (err < 0). */
typedef void (*lb_conn_event_cb)(lb_conn *c, void *arg, int err);
/* A unary call finished: grpc_status (-1 when the stream ended without one, or without a
 * complete response message), grpc_message (percent-decoded; "" on success) and the response
 * message (all valid only during the callback). */
typedef void (*lb_unary_cb)(lb_conn *c, void *arg, int grpc_status, const char *grpc_message,
                            const uint8_t *msg, size_t len);
/* One LeaseKeepAliveResponse arrived. */
typedef void (*lb_ka_cb)(lb_conn *c, void *arg, int64_t id, int64_t ttl);

/* Connects to 127.0.0.1:port (at most 5 s) with 1 MiB stream and 16 MiB connection windows
 * and starts polling its socket on loop. On 0, *out is owned by the caller until
 * lb_conn_close(); on_event(c, arg, err) reports a later failure. */
int lb_conn_open(uv_loop_t *loop, uint16_t port, lb_conn_event_cb on_event, void *arg,
                 lb_conn **out);

/* Starts a unary call; req is copied. */
int lb_conn_unary(lb_conn *c, const char *method, const uint8_t *req, size_t len, lb_unary_cb cb,
                  void *arg);

/* Opens the connection's LeaseKeepAlive stream; responses go to cb. Can be called again
 * once the previous stream ended (lb_conn_ka_open_p() == 0). */
int lb_conn_ka_open(lb_conn *c, lb_ka_cb cb, void *arg);

/* Queues one LeaseKeepAliveRequest{id} on the stream (written at the next flush);
 * -ENOTCONN when the stream has ended. */
int lb_conn_ka_send(lb_conn *c, int64_t id);

/* Half-closes the keepalive stream (sends END_STREAM after the queued requests). */
void lb_conn_ka_end(lb_conn *c);

/* Non-zero while the keepalive stream is open. */
int lb_conn_ka_open_p(const lb_conn *c);

/* Keepalive streams that ended without lb_conn_ka_end() (server reset or error trailers);
 * *status / *message (either may be NULL) receive the last stream's grpc-status (-1 if
 * none) and grpc-message (valid until the next call on c). */
uint64_t lb_conn_ka_resets(lb_conn *c, int *status, const char **message);

/* Writes what is queued (as much as the socket takes; the rest when it is writable). */
void lb_conn_flush(lb_conn *c);

/* Unary calls started and not yet finished. */
size_t lb_conn_inflight(const lb_conn *c);

/* Non-zero once the connection failed. */
int lb_conn_failed(const lb_conn *c);

/* Closes the connection; freed in the close callback, with any unary call still in flight
 * (whose callback then never runs). NULL allowed. */
void lb_conn_close(lb_conn *c);

#endif
