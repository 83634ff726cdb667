/*
 * grpc_raw: a minimal, synchronous, single-connection gRPC unary client over h2c
 * (HTTP/2 with prior knowledge), used by the integration tests and kvbench.
 *
 * Contract:
 * - One kv_it_grpc object is one TCP connection carrying one call at a time; it is not
 *   thread-safe (use one per thread).
 * - Every call is bounded by its timeout; nothing blocks forever.
 * - It exists so that the tests and the benchmark can talk to kvd and etcd independently
 *   of libkvclient (which has its own tests). It is deliberately small: no retries, no
 *   compression, no TLS.
 *
 * Return codes: 0 on success (grpc-status 0), KV_IT_GRPC_STATUS when the server answered
 * with a non-zero grpc-status (see *status / message), or a negative errno-style code for
 * transport failures (-ETIMEDOUT, -ECONNRESET, -EPROTO, -ENOMEM, ...).
 */
#ifndef KV_IT_GRPC_RAW_H
#define KV_IT_GRPC_RAW_H

#include <stddef.h>
#include <stdint.h>

#define KV_IT_GRPC_STATUS 1

typedef struct kv_it_grpc kv_it_grpc;

/* Connects to host:port and sends the HTTP/2 preface. On success *out is owned by the
 * caller and must be released with kv_it_grpc_close(). */
int kv_it_grpc_open(kv_it_grpc **out, const char *host, uint16_t port, uint32_t timeout_ms);

/* Closes the connection and frees c (NULL is allowed). */
void kv_it_grpc_close(kv_it_grpc *c);

/* Performs one unary call. method is the full path, e.g. "/etcdserverpb.KV/Put".
 * req/req_len is the serialized request message (not framed). On 0, *resp (malloc'd,
 * caller frees with free()) and *resp_len hold the response message. *status receives the
 * grpc-status (or -1 if none was received) and message (may be NULL) the grpc-message,
 * NUL-terminated and truncated to message_cap. After a transport error the connection is
 * unusable; close it. */
int kv_it_grpc_call(kv_it_grpc *c, const char *method, const uint8_t *req, size_t req_len,
                    uint8_t **resp, size_t *resp_len, uint32_t timeout_ms, int *status,
                    char *message, size_t message_cap);

#endif
