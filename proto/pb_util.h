/*
 * pb_util: small helpers over protobuf-c descriptors, shared by the server's JSON gateway
 * (server/http/json_pb*.c) and kvctl's JSON output (client/kvctl/json.c).
 * Pure functions; any thread.
 */
#ifndef KV_PB_UTIL_H
#define KV_PB_UTIL_H

#include <protobuf-c/protobuf-c.h>
#include <stddef.h>

/* Bytes one value of type t occupies in a protobuf-c message struct (a repeated field's
 * element size); 0 for an unknown type. */
size_t kv_pb_elem_size(ProtobufCType t);

#endif
