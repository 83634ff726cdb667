/*
 * client_http.h - HTTP/1.1 on the client port, as etcd 3.4 multiplexes it with gRPC.
 *
 * Installed on a gRPC server with kv_client_http_attach(); the transport hands it every
 * connection whose first bytes are not the HTTP/2 preface, and every HTTP/2 stream that is not
 * gRPC as a connection of its own carrying one request (server/grpc/grpc_http1.h). Serves:
 *   GET /health   -> {"health":"true"} / 503 {"health":"false","reason":"..."} (the same hook
 *                    and format as the metrics port, server/http/http_server.h)
 *   GET /version  -> {"etcdserver":"<server version>","etcdcluster":"3.4.0"}
 *   GET /metrics  -> the Prometheus text of the registry (the metrics port's)
 *   /debug/pprof/ -> with cfg.pprof (--enable-pprof), Go's profiling endpoints
 *                    (http/pprof_http.h); 404 otherwise, as etcd without the flag
 *   POST /v3/...  -> the grpc-gateway JSON API (http/gateway.h): the JSON body becomes the
 *                    protobuf request of the gRPC method, run through the method table like a
 *                    gRPC call (every limit, quota and raft rule applies); the response is
 *                    jsonpb (http/json_pb.h); errors {"error":m,"code":c,"message":m} with the
 *                    grpc-gateway HTTP status. Streaming methods (watch, lease keepalive,
 *                    snapshot) answer chunked, one {"result":{...}} object per line; only the
 *                    first request object of the body is sent.
 * With cfg.grpc_proxy (kvd grpc-proxy's --listen-addr) only /health, /metrics and
 * /debug/pprof/ are served, as by etcd's proxy; everything else is Go's 404. With
 * cfg.no_gateway (--enable-grpc-gateway=false) /v3/... is not served: 404 as any unknown path,
 * as etcd without its gateway.
 *
 * Connections: HTTP/1.1 keep-alive (HTTP/1.0: close unless "Connection: keep-alive"); one
 * request answered at a time, later pipelined requests are buffered. Bounds: the request head
 * <= max_header_bytes (else 431 and close), a body <= max_body_bytes (else 413 and close:
 * --max-request-bytes + 512 KiB, as etcd's gRPC transport allows), input buffered while a
 * request is answered <= max_header_bytes + max_body_bytes (else the connection closes);
 * every request buffer counts in the gRPC server's process-wide max_buffered_bytes (past it:
 * 503 and close, kvd_grpc_requests_refused_total{reason="buffered_cap_recv"});
 * a connection waiting for a request head is closed after the gRPC server's
 * handshake_timeout_ms (idle timeout). Malformed requests get 400 and close.
 *
 * Gateway calls share one stream limit: etcd's gateway is one gRPC client connection to its
 * own server, so at most --max-concurrent-streams gateway calls (unary or streaming, from all
 * HTTP/1 connections together) run at once. A complete POST /v3/... request beyond that waits,
 * in arrival order, until a call ends or its client goes away; it is not refused, as with
 * etcd (whose gateway request then waits for stream quota). Waiting requests are bounded by
 * the connection cap (one per connection) and counted in kvd_client_http_gateway_waiting.
 *
 * Threads: loop thread only. Ownership: the caller owns the kv_client_http, which must outlive
 * every server it is attached to.
 */
#ifndef KV_CLIENT_HTTP_H
#define KV_CLIENT_HTTP_H

#include "grpc/grpc_server.h"
#include "http/http_server.h"
#include "http/pprof_http.h"
#include "metrics/metrics.h"

#include <stddef.h>

typedef struct kv_client_http_config {
    kv_metrics *metrics;        /* /metrics source; may be NULL */
    kv_http_health_fn health;   /* /health hook; NULL = always healthy */
    void *app;                  /* passed to health */
    const char *server_version; /* /version "etcdserver" */
    size_t max_header_bytes;    /* default 8192 */
    size_t max_body_bytes;      /* default 1.5 MiB + 512 KiB */
    uint32_t health_timeout_ms; /* default 5000 */
    uint32_t max_streams;       /* gateway calls in flight at once; 0 = no limit */
    kv_pprof_http *pprof;       /* --enable-pprof: /debug/pprof/ (pprof_http.h); NULL = 404 */
    int grpc_proxy; /* 1: only what etcd 3.4's grpc-proxy serves beside gRPC on --listen-addr
                     * (/health, /metrics, /debug/pprof/ with pprof); /version, /v3/... and any
                     * other path get 404 "404 page not found"; no CORS headers or preflight
                     * answers */
    int no_gateway; /* 1: no grpc-gateway (--enable-grpc-gateway=false): /v3/... gets 404 "404
                     * page not found", as other unknown paths */
} kv_client_http_config;

typedef struct kv_client_http kv_client_http;

/* Creates the handler (cfg copied, its pointers borrowed). Returns 0 or -ENOMEM. */
int kv_client_http_new(kv_client_http **out, const kv_client_http_config *cfg, uv_loop_t *loop);
/* Installs it on the gRPC server (before listening). */
void kv_client_http_attach(kv_client_http *h, kv_grpc_server *s);
/* Frees the handler; every server it is attached to must be closed first. Pending health
 * checks keep their own context and complete harmlessly. */
void kv_client_http_free(kv_client_http *h);

#endif
