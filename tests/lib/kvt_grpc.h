/*
 * kvt_grpc: one unary gRPC call of a protobuf-c message over a grpc_raw connection, for the
 * tests that only need the call's status (grpc_raw itself stays protobuf-agnostic).
 *
 * Contract: c is the caller's open connection (one thread's). The request is packed, sent and
 * the answer discarded. Returns the grpc-status (0 = OK, else the code, with the
 * grpc-message in msg, NUL-terminated and truncated to cap) or a negative transport error
 * (after which c is unusable: close it). Bounded by timeout_ms.
 */
#ifndef KVT_GRPC_H
#define KVT_GRPC_H

#include "grpc_raw.h"

#include <protobuf-c/protobuf-c.h>

#include <stddef.h>
#include <stdint.h>

int kvt_grpc_unary_msg(kv_it_grpc *c, const char *method, const ProtobufCMessage *m,
                       uint32_t timeout_ms, char *msg, size_t cap);

#endif
