/*
 * txn_wire: hand encoding of etcdserverpb.TxnRequest wire bytes for the nesting tests
 * (a Txn nested too deep must be refused before it is unpacked; docs/LESSONS.md, lesson 11).
 * protobuf-c's pack recurses once per level, so a 100,000-deep txn cannot be built with it;
 * these encoders compute the sizes from the inside out and then write the bytes front to back,
 * without recursion. Test support only; pure functions.
 */
#ifndef KV_TEST_TXN_WIRE_H
#define KV_TEST_TXN_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "common/varint.h"

/* Varints: kv_varint_put and kv_varint_len (common/varint.h). */

/* A TxnRequest nested `depth` txn levels deep (depth >= 1). Level i < depth holds the bytes
 * `extra` (TxnRequest fields, e.g. more success ops; may be empty) followed by
 * success[RequestOp{request_txn: level i+1}]; the innermost level holds `inner` (may be
 * empty). *out is malloc'd (caller frees). Returns 0 or -ENOMEM/-EINVAL. */
int kv_tw_nested_txn(size_t depth, const uint8_t *extra, size_t extra_len, const uint8_t *inner,
                     size_t inner_len, uint8_t **out, size_t *out_len);

/* Appends one TxnRequest field `field` (1 compare, 2 success, 3 failure) holding the given
 * message bytes to buf at *len (buf must have room for body_len + 11). */
void kv_tw_field(uint8_t *buf, size_t *len, uint32_t field, const uint8_t *body, size_t body_len);

/* The bytes of a RequestOp{request_put: {key, value}} (key/value NUL-terminated strings) into
 * buf (room for strlen(key) + strlen(value) + 16); returns the length. */
size_t kv_tw_put_op(uint8_t *buf, const char *key, const char *value);

#endif
