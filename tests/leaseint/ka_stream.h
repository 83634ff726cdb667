/*
 * ka_stream: a LeaseKeepAlive (bidirectional gRPC stream) client for the lease integration
 * tests, on tests/lib's grpc_raw streams (the one HTTP/2 test client).
 *
 * Contract:
 * - One kvli_ka object is one TCP connection carrying one LeaseKeepAlive stream. Not
 *   thread-safe. Every call is bounded by its timeout.
 * - Requests are written as they are sent; responses are read one message at a time.
 * - Return 0 on success or a negative errno-style code: -ETIMEDOUT (no response in time),
 *   -ECONNRESET (stream or connection ended; *grpc_status tells why when known), -EPROTO,
 *   -ENOMEM.
 */
#ifndef KVLI_KA_STREAM_H
#define KVLI_KA_STREAM_H

#include <stdint.h>

typedef struct kvli_ka kvli_ka;

/* Connects to 127.0.0.1:port and opens the stream. *out is owned by the caller and
 * released with kvli_ka_close(). */
int kvli_ka_open(kvli_ka **out, uint16_t port, uint32_t timeout_ms);

/* Closes the connection and frees ka (NULL allowed). */
void kvli_ka_close(kvli_ka *ka);

/* Sends one LeaseKeepAliveRequest{id}. */
int kvli_ka_send(kvli_ka *ka, int64_t id, uint32_t timeout_ms);

/* Receives the next LeaseKeepAliveResponse: *id and *ttl. */
int kvli_ka_recv(kvli_ka *ka, int64_t *id, int64_t *ttl, uint32_t timeout_ms);

/* grpc-status received in trailers, or -1 if none yet. */
int kvli_ka_grpc_status(const kvli_ka *ka);

#endif
