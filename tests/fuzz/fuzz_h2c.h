/*
 * fuzz_h2c.h - a small gRPC-over-h2c client encoder (nghttp2 client session, memory I/O) for
 * the fuzz harnesses and the corpus generator: it turns "open a call, send a message,
 * half-close, reset" into the exact client bytes, and parses the server's bytes so stream
 * states and flow-control windows follow the server.
 *
 * Ownership: kv_fuzz_h2c_new() returns a client freed by kv_fuzz_h2c_free(). Streams are
 * small integer handles valid until the client is freed. Single-threaded.
 */
#ifndef KV_FUZZ_H2C_H
#define KV_FUZZ_H2C_H

#include <stddef.h>
#include <stdint.h>

typedef struct kv_fuzz_h2c kv_fuzz_h2c;

int kv_fuzz_h2c_new(kv_fuzz_h2c **out);
void kv_fuzz_h2c_free(kv_fuzz_h2c *c);
/* Starts a POST to path with gRPC headers (plus "grpc-timeout: timeout" if not NULL).
 * Returns a stream handle >= 0 or a negative errno. */
int kv_fuzz_h2c_open(kv_fuzz_h2c *c, const char *path, const char *timeout);
/* Opens a request that is not gRPC (content-type application/json): etcd's HTTP API over
 * HTTP/2. Send its body with kv_fuzz_h2c_send_raw. Returns the handle or a negative errno. */
int kv_fuzz_h2c_open_http(kv_fuzz_h2c *c, const char *method, const char *path);
/* Queues one gRPC message (5-byte prefix added) on the stream. 0 or a negative errno. */
int kv_fuzz_h2c_send(kv_fuzz_h2c *c, int h, const uint8_t *msg, size_t len);
/* Queues raw DATA bytes (no prefix) on the stream. */
int kv_fuzz_h2c_send_raw(kv_fuzz_h2c *c, int h, const uint8_t *p, size_t len);
/* Half-closes the stream after its queued data (END_STREAM). */
int kv_fuzz_h2c_end(kv_fuzz_h2c *c, int h);
/* Sends RST_STREAM(CANCEL). */
int kv_fuzz_h2c_reset(kv_fuzz_h2c *c, int h);
/* Bytes to put on the wire now (preface first); *p is valid until the next call.
 * 0 with *n possibly 0, or a negative errno. */
int kv_fuzz_h2c_pull(kv_fuzz_h2c *c, const uint8_t **p, size_t *n);
/* Feeds server bytes. Errors are remembered (kv_fuzz_h2c_failed) and later bytes ignored. */
void kv_fuzz_h2c_recv(kv_fuzz_h2c *c, const uint8_t *p, size_t n);
int kv_fuzz_h2c_failed(const kv_fuzz_h2c *c);
/* Response frames (HEADERS/DATA) received so far. */
unsigned kv_fuzz_h2c_responses(const kv_fuzz_h2c *c);

#endif
