/*
 * grpc_wire.h - pure gRPC-over-HTTP/2 wire helpers, no I/O (unit-testable).
 *
 * Contract:
 * - kv_grpc_deframer splits a DATA byte stream into length-prefixed gRPC messages
 *   (1 flag byte + 4 byte big-endian length + body). It rejects a message whose length
 *   exceeds max_len as soon as the 5-byte prefix is seen, before buffering any of its body.
 *   Bodies split across chunks are assembled in a buffer that grows with the bytes actually
 *   received (never pre-allocated from the untrusted prefix); a body wholly inside one chunk
 *   is delivered zero-copy.
 * - grpc-timeout parsing, grpc-message percent-encoding and status code names follow the
 *   gRPC HTTP/2 protocol spec (doc/PROTOCOL-HTTP2.md).
 */
#ifndef KV_GRPC_WIRE_H
#define KV_GRPC_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

/* gRPC status codes: KV_GRPC_OK .. KV_GRPC_UNAUTHENTICATED come from common/status.h, the one
 * status enum of the server (it lives below this transport so mvcc can use it too). */

/* "OK", "CANCELLED", ... ; "UNKNOWN" for out-of-range codes. Static storage. */
const char *kv_grpc_code_name(int code);

/* Parses a grpc-timeout value ("1*8DIGIT unit", unit one of H M S m u n) into milliseconds,
 * rounding sub-millisecond values up. Returns 0 or -EINVAL. */
int kv_grpc_parse_timeout(const char *v, size_t len, uint64_t *ms_out);

/* Percent-encodes a grpc-message: bytes outside 0x20..0x7E and '%' become %XX (upper-case).
 * Returns a malloc'd NUL-terminated string owned by the caller, or NULL on out-of-memory.
 * msg NULL is treated as "". */
char *kv_grpc_percent_encode(const char *msg);
/* Decodes in[0..n) into out (capacity >= n + 1, NUL-terminated); malformed escapes are copied
 * verbatim (as the spec asks). Returns the decoded length. */
size_t kv_grpc_percent_decode(const char *in, size_t n, char *out);

/* Called for each complete message; msg is valid only during the call. Return 0 to continue,
 * nonzero to stop consuming right after this message. */
typedef int (*kv_grpc_msg_cb)(void *arg, const uint8_t *msg, size_t len);

typedef struct kv_grpc_deframer {
    size_t max_len;   /* largest accepted message body */
    uint8_t hdr[5];   /* prefix being assembled */
    size_t hdr_have;  /* bytes of hdr received */
    int in_body;      /* prefix complete, body pending */
    uint32_t msg_len; /* length from the current prefix */
    uint8_t flag;     /* flag byte from the current prefix */
    uint8_t *buf;     /* partial body (grown as bytes arrive) */
    size_t have, cap;
} kv_grpc_deframer;

/* Feed errors (negative). For KV_GRPC_DF_TOO_LARGE d->msg_len holds the announced length. */
#define KV_GRPC_DF_STOPPED 1          /* cb returned nonzero; *consumed says how far */
#define KV_GRPC_DF_TOO_LARGE (-7001)  /* prefix length > max_len */
#define KV_GRPC_DF_COMPRESSED (-7002) /* flag byte 1 (we negotiate no compression) */
#define KV_GRPC_DF_BAD_FLAG (-7003)   /* flag byte not 0/1; d->flag holds it */
#define KV_GRPC_DF_NOMEM (-7004)

void kv_grpc_deframer_init(kv_grpc_deframer *d, size_t max_len);
/* Frees the body buffer; d may be re-initialised afterwards. */
void kv_grpc_deframer_free(kv_grpc_deframer *d);
/* Consumes in[0..n). Returns 0 (all consumed), KV_GRPC_DF_STOPPED, or a negative
 * KV_GRPC_DF_* error (the deframer is then unusable). *consumed (may be NULL) is set to the
 * bytes consumed in every case. */
int kv_grpc_deframer_feed(kv_grpc_deframer *d, const uint8_t *in, size_t n, size_t *consumed,
                          kv_grpc_msg_cb cb, void *arg);
/* Nonzero if a message is partially received (prefix or body). */
int kv_grpc_deframer_partial(const kv_grpc_deframer *d);
/* Bytes of memory currently held for partial bodies. */
size_t kv_grpc_deframer_buffered(const kv_grpc_deframer *d);

#endif
