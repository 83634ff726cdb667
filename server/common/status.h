/*
 * status.h - THE enum of gRPC status codes (all 17, named as in grpc's codes.proto /
 * doc/statuscodes.md). Only the gRPC edge uses these names: the gRPC transport
 * (grpc/grpc_wire.h includes this header), the services (api/: api/services.h
 * kv_api_status_of maps an error value to its status) and the gRPC column of the error table
 * (common/etcd_status.h). Below the edge (apply, node, mvcc, lease, watch) errors are
 * kv_etcd_err values (common/etcd_errors.h), which never include this header.
 *
 * Layering: this header lives in server/common/ and includes nothing, so the edge can use the
 * codes without depending on the HTTP/2 server or on nghttp2. There is no other status enum
 * in server/; never write a raw number where a code is meant.
 */
#ifndef KV_COMMON_STATUS_H
#define KV_COMMON_STATUS_H

/* gRPC status codes; the values are fixed by the gRPC protocol (grpc-status header). */
typedef enum kv_grpc_code {
    KV_GRPC_OK = 0,
    KV_GRPC_CANCELLED = 1,
    KV_GRPC_UNKNOWN = 2,
    KV_GRPC_INVALID_ARGUMENT = 3,
    KV_GRPC_DEADLINE_EXCEEDED = 4,
    KV_GRPC_NOT_FOUND = 5,
    KV_GRPC_ALREADY_EXISTS = 6,
    KV_GRPC_PERMISSION_DENIED = 7,
    KV_GRPC_RESOURCE_EXHAUSTED = 8,
    KV_GRPC_FAILED_PRECONDITION = 9,
    KV_GRPC_ABORTED = 10,
    KV_GRPC_OUT_OF_RANGE = 11,
    KV_GRPC_UNIMPLEMENTED = 12,
    KV_GRPC_INTERNAL = 13,
    KV_GRPC_UNAVAILABLE = 14,
    KV_GRPC_DATA_LOSS = 15,
    KV_GRPC_UNAUTHENTICATED = 16,
} kv_grpc_code;

/* Number of codes (valid codes are 0 .. KV_GRPC_CODE_COUNT - 1). */
#define KV_GRPC_CODE_COUNT 17

#endif
