/*
 * varint: the protobuf base-128 varint writer, for code that packs protobuf wire bytes by hand
 * (apply/internal_req.c, mvcc/snapshot_bbolt.c, node/node.c, watch/watch_hub.c). Pure function, any
 * thread. The readers of client bytes stay in pb/pb_wire.h, which follow protobuf-c's
 * acceptance rules.
 */
#ifndef KV_COMMON_VARINT_H
#define KV_COMMON_VARINT_H

#include <stddef.h>
#include <stdint.h>

#define KV_VARINT_MAX 10 /* bytes of the longest varint (a uint64_t) */

/* Writes v as a varint at p (precondition: room for KV_VARINT_MAX bytes, or for the value's
 * length if the caller knows it). Returns the bytes written (1 to KV_VARINT_MAX). */
size_t kv_varint_put(uint8_t *p, uint64_t v);
/* The bytes kv_varint_put writes for v (1 to KV_VARINT_MAX). */
size_t kv_varint_len(uint64_t v);
/* Reads a varint at p (p < end): *v gets it. Returns the bytes read, 0 if it runs past end or
 * past KV_VARINT_MAX bytes. A lenient reader for files kvd reads but did not write (etcd's
 * WAL, server/daemon/etcd_datadir.c); client bytes go through pb/pb_wire.h. */
size_t kv_varint_get(const uint8_t *p, const uint8_t *end, uint64_t *v);

#endif
