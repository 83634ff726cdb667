/*
 * snapshot_stream: handlers of Maintenance.Snapshot (server streaming) and Maintenance.Hash,
 * listed in service_maintenance.c's method table. Contract in snapshot_stream.c's header
 * comment and mvcc/snapshot.h. Loop thread only.
 */
#ifndef KV_API_SNAPSHOT_STREAM_H
#define KV_API_SNAPSHOT_STREAM_H

#include "grpc/grpc_server.h"

#include <stddef.h>
#include <stdint.h>

void kv_snapshot_on_message(kv_grpc_call *call, const uint8_t *msg, size_t len);
void kv_snapshot_on_half_close(kv_grpc_call *call);
void kv_snapshot_on_cancel(kv_grpc_call *call);
void kv_hash_on_message(kv_grpc_call *call, const uint8_t *msg, size_t len);

#endif
