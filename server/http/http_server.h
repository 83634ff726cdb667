/*
 * http_server.h - a tiny HTTP/1.1 server on libuv for --listen-metrics-urls.
 *
 * Contract:
 * - GET /metrics -> 200 "text/plain; version=0.0.4" with kv_metrics_render() output.
 * - GET /health  -> calls the app's async health hook; 200 {"health":"true"} or
 *   503 {"health":"false","reason":"..."} (etcd 3.4 format). If the hook has not answered
 *   within health_timeout_ms: 503 with reason "timeout".
 * - GET /debug/pprof/... -> with cfg.pprof, Go's profiling endpoints (pprof_http.h); the
 *   request timeout does not run while a profile is taken.
 * - Anything else: 404 (405 for methods other than GET/HEAD-less GET only; 431 when the request
 *   head exceeds max_header_bytes; 408-less silent close when the head does not arrive within
 *   request_timeout_ms). Every response carries "Connection: close" and the connection is
 *   closed after it is written; request bodies are not read.
 * - TLS (cfg.tls set, etcd's https:// metrics URL): the same protocol inside TLS on every
 *   connection (net/tls.h, memory BIOs; ALPN offers only http/1.1). A failed handshake (wrong
 *   CA, missing client certificate with --client-cert-auth, plain HTTP, garbage) gets its alert
 *   (or the tls layer's HTTP 400 text) written and the connection closed; the handshake counts
 *   against request_timeout_ms and the connection against max_connections like any other.
 * - One libuv loop, not thread-safe. Handles are freed only in close callbacks. The process must
 *   ignore SIGPIPE (libuv writes with write(2)).
 * - Bounds: max_header_bytes per request, max_connections. When max_connections are open, a
 *   new connection evicts the oldest one that has not sent a complete request yet (so idle
 *   or slow sockets cannot lock /health out); only when every connection has a
 *   request in progress is the new one accepted then closed. A connection must send its
 *   request head within request_timeout_ms or is closed. Metrics (when a registry is given,
 *   shared by every listener): kvd_metrics_http_connections, kvd_metrics_http_evicted_total,
 *   kvd_metrics_http_request_timeouts_total, kvd_metrics_http_rejected_total.
 */
#ifndef KV_HTTP_SERVER_H
#define KV_HTTP_SERVER_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "http/pprof_http.h"
#include "metrics/metrics.h"
#include "net/tls.h"

typedef struct kv_http_server kv_http_server;

/* Completion for a health check. ctx is the transport's; ok nonzero = healthy; reason is
 * copied (may be NULL). Must be called exactly once per hook invocation, on the loop thread,
 * possibly synchronously from inside the hook, possibly after the HTTP connection (or the
 * whole server) is gone: the transport keeps ctx alive until done is called. */
typedef void (*kv_http_health_done_fn)(void *ctx, int ok, const char *reason);
/* App hook: check health and eventually call done(ctx, ok, reason). */
typedef void (*kv_http_health_fn)(void *app, kv_http_health_done_fn done, void *ctx);

typedef struct kv_http_config {
    size_t max_header_bytes;     /* default 8192 */
    uint32_t health_timeout_ms;  /* default 5000 */
    uint32_t request_timeout_ms; /* time to receive the request head, and to write the answer
                                  * out; default 10000 */
    uint32_t max_connections;    /* default 256 */
    kv_tls_ctx *tls;             /* server context: serve HTTPS (ALPN http/1.1); NULL = plain.
                                    The server takes its own reference. */
    kv_pprof_http *pprof;        /* GET /debug/pprof/... (pprof_http.h; the grpc-proxy's
                                    --enable-pprof); NULL = 404. Borrowed: must outlive the
                                    server. */
} kv_http_config;

void kv_http_config_default(kv_http_config *cfg);

/* /health's answers are etcd 3.4's bodies, {"health":"true"} and {"health":"false"}; the
 * reason of a failing check travels in this response header instead (etcd 3.4 logs it). */
#define KV_HTTP_HEALTH_REASON_HEADER "X-Kvd-Health-Reason"
/* Writes "X-Kvd-Health-Reason: <reason>\r\n" into dst (cap bytes, NUL-terminated), the
 * reason cut to 200 bytes and every byte outside printable ASCII replaced by '?'. Returns
 * the length written. */
size_t kv_http_health_reason_line(char *dst, size_t cap, const char *reason);

/* Creates the server. cfg NULL = defaults (zero fields take defaults). metrics may be NULL
 * (then /metrics serves an empty body); it is borrowed and must outlive the server. health may
 * be NULL (then /health always reports healthy). *out is freed by kv_http_server_close().
 * Returns 0, -EINVAL or -ENOMEM. */
int kv_http_server_init(kv_http_server **out, uv_loop_t *loop, const kv_http_config *cfg,
                        kv_metrics *metrics, kv_http_health_fn health, void *app);
/* Binds and listens (IPv4/IPv6 literal or a name resolved with blocking getaddrinfo, so call
 * at startup; port 0 allowed). Returns 0 or a negative error. */
int kv_http_server_listen(kv_http_server *s, const char *host, int port);
/* Bound port or a negative error. */
int kv_http_server_port(kv_http_server *s);
/* Closes the listener and all connections; cb (may be NULL) runs when all is freed.
 * Pending health hooks may still call done afterwards (safe no-op). */
void kv_http_server_close(kv_http_server *s, void (*cb)(void *arg), void *arg);

#endif
