/*
 * gateway.h - the grpc-gateway route table of etcd 3.4 (api/etcdserverpb/gw/rpc.pb.gw.go):
 * an HTTP POST path under /v3/ (also /v3beta/ and /v3alpha/, the older prefixes etcd 3.4 still
 * answers) names one gRPC method. Static data, no state.
 */
#ifndef KV_GATEWAY_H
#define KV_GATEWAY_H

#include <protobuf-c/protobuf-c.h>

typedef struct kv_gw_route {
    char grpc_path[96]; /* "/etcdserverpb.KV/Range" */
    const ProtobufCMessageDescriptor *in, *out;
    int streaming; /* a streaming method: the answer is one JSON object per line */
} kv_gw_route;

/* Looks up the HTTP path (without query). Returns 0 and fills r, or -ENOENT. */
int kv_gw_lookup(const char *path, kv_gw_route *r);

/* The HTTP status grpc-gateway v1 maps a gRPC code to (runtime.HTTPStatusFromCode). */
int kv_gw_http_status(int grpc_code);
/* Its reason phrase (as Go's net/http StatusText). */
const char *kv_gw_status_text(int http_status);

#endif
