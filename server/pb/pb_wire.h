/*
 * pb_wire: reads one protobuf field from wire bytes with protobuf-c 1.4's own rules, for the
 * pre-scans that look at client bytes before protobuf-c unpacks them (pb_scan.h, pb_strip.h):
 * tags of at most 5 bytes with a 32-bit result and tag 0 refused, varints of at most 10
 * bytes, length prefixes of at most 5 bytes and at most INT_MAX that fit the buffer, wire
 * types 3, 4, 6 and 7 refused. Pure function; any thread.
 */
#ifndef KV_PB_WIRE_H
#define KV_PB_WIRE_H

#include <stddef.h>
#include <stdint.h>

enum { KV_PB_WT_VARINT = 0, KV_PB_WT_64BIT = 1, KV_PB_WT_LEN = 2, KV_PB_WT_32BIT = 5 };

typedef struct kv_pb_field {
    uint32_t tag;       /* field number */
    uint8_t wt;         /* wire type */
    const uint8_t *val; /* KV_PB_WT_LEN: the payload (after the length prefix) */
    size_t vlen;
} kv_pb_field;

/* Reads the field at p (precondition p < end). Returns the bytes it occupies (tag included),
 * 0 if protobuf-c would refuse it. */
size_t kv_pb_read_field(const uint8_t *p, const uint8_t *end, kv_pb_field *f);

#endif
