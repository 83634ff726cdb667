/*
 * pb_strip: unpacking client messages without paying protobuf-c's price for unknown fields.
 *
 * Why: protobuf-c keeps every unknown field (one allocation each, plus its scan slabs). A
 * 1.5 MiB RangeRequest made of 786,000 two-byte unknown fields took ~200 ms of kvd's event
 * loop to unpack and ~34 MB of heap; etcd (gogo protobuf appends them to one byte slice)
 * answers the same request in ~10 ms. etcd ignores unknown fields, so dropping them before
 * unpacking changes no answer (audit of client input).
 *
 * Only the top level of a message is filtered: for the etcd requests unpacked on the loop
 * (Range, Lease*, Maintenance, Cluster) and the writes wrapped for the apply path that is the
 * whole message; for TxnRequest / InternalRequest the nested messages keep theirs.
 *
 * Pure functions; any thread.
 */
#ifndef KV_PB_STRIP_H
#define KV_PB_STRIP_H

#include <protobuf-c/protobuf-c.h>
#include <stddef.h>
#include <stdint.h>

/* Up to this many unknown fields are left to protobuf-c (no copy). */
#define KV_PB_UNKNOWN_KEEP 16
/* kv_pb_unpack leaves messages shorter than this to protobuf-c as they are (at most 512
 * fields: ~0.1 ms), so small requests pay no extra pass or copy. */
#define KV_PB_STRIP_MIN_LEN 1024

/* Counts the top-level fields of buf that d does not know. Returns the count, or -1 if the
 * framing is malformed (protobuf-c would refuse the bytes). */
long kv_pb_count_unknown(const ProtobufCMessageDescriptor *d, const uint8_t *buf, size_t len);

/* Copies the known top-level fields of buf, in order, to out (room for len bytes; out may
 * not overlap buf) and returns the bytes written. Precondition: kv_pb_count_unknown() >= 0. */
size_t kv_pb_strip_unknown(const ProtobufCMessageDescriptor *d, const uint8_t *buf, size_t len,
                           uint8_t *out);

/* protobuf_c_message_unpack(d, NULL, len, buf), after dropping the top-level unknown fields
 * when there are more than KV_PB_UNKNOWN_KEEP (messages of KV_PB_STRIP_MIN_LEN bytes or more;
 * one pass and one copy of len bytes). NULL if the bytes are malformed or on
 * allocation failure. Free with protobuf_c_message_free_unpacked(m, NULL). */
ProtobufCMessage *kv_pb_unpack(const ProtobufCMessageDescriptor *d, const uint8_t *buf, size_t len);

#endif
