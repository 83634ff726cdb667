/*
 * pprof_http.h - /debug/pprof/ for --enable-pprof (etcd's flag), on the client port
 * (client_http.h) and on the grpc-proxy's --metrics-addr (http_server.h). Go's
 * net/http/pprof endpoints, as far as they mean something for a C process (docs/pprof.md):
 *   /debug/pprof/                  -> an index (text/html)
 *   /debug/pprof/profile?seconds=N -> a CPU profile over N s (default 30, as Go; at most
 *                                     86400), pprof's protobuf (server/prof/prof.h),
 *                                     application/octet-stream, for `go tool pprof URL`
 *   /debug/pprof/cmdline           -> the command line, arguments separated by NUL bytes
 *   anything else under it         -> 404 "Unknown profile" (heap, goroutine, ... are Go's
 *                                     runtime's: kvd has none of them)
 * One CPU profile at a time per process: another request meanwhile gets Go's 500 "Could not
 * enable CPU profiling: cpu profiling already in use". The profile is symbolized and encoded
 * on the loop thread when its time is up (tens of milliseconds, once per profile).
 *
 * Threads: loop thread only. Ownership: the caller owns the kv_pprof_http; a request that is
 * answered later is owned by it until its reply or its cancel.
 */
#ifndef KV_PPROF_HTTP_H
#define KV_PPROF_HTTP_H

#include <stddef.h>
#include <uv.h>

typedef struct kv_pprof_http kv_pprof_http;
typedef struct kv_pprof_req kv_pprof_req;

/* The answer: status, Content-Type, more header lines ("Name: v\r\n"..., or ""), body.
 * Everything is borrowed for the call only. */
typedef void (*kv_pprof_reply_fn)(void *ctx, int status, const char *ctype, const char *extra,
                                  const char *body, size_t len);

/* Returns 0 or -ENOMEM. */
int kv_pprof_http_new(kv_pprof_http **out, uv_loop_t *loop);
/* Frees h. Close the connections that may hold its requests first (their cancel ends a
 * running profile); a request still running is left to its connection, whose reply or
 * cancel ends it. */
void kv_pprof_http_free(kv_pprof_http *h);

/* Nonzero if path (without the query) is under /debug/pprof (then pass it to handle). */
int kv_pprof_http_match(const char *path);

/* Answers path with its query string (the part after '?'; may be NULL). reply is called exactly
 * once, now or later, unless *later is set and kv_pprof_http_cancel(*later) comes first. *later is
 * NULL when reply has been called. */
void kv_pprof_http_handle(kv_pprof_http *h, const char *path, const char *query,
                          kv_pprof_reply_fn reply, void *ctx, kv_pprof_req **later);

/* The request's connection is gone: its profile is discarded, reply is never called. */
void kv_pprof_http_cancel(kv_pprof_req *r);

#endif
