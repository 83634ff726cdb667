/*
 * fuzz_kvd.h - an in-process kvd for the fuzz harnesses: the real store (LMDB in a temp
 * dir), node (apply worker), lessor (promoted, as a single member) and gRPC server with the
 * real service table (server/api/services.c), on a private libuv loop. Client connections are
 * one end of a socketpair handed to the transport's own connection code
 * (kv_grpc_conn_start/kv_grpc_conn_begin, the functions the listener's accept path calls), so
 * every byte goes through kvd's read path, nghttp2 callbacks, gRPC call layer and services.
 *
 * Ownership: kv_fuzz_kvd_start() fills *k; kv_fuzz_kvd_stop() frees everything and removes the
 * temp dir. Threads: the caller's thread runs the loop (the node's apply runs on libuv's pool).
 * Bounds: the store map is small (64 MiB) and fsync is off (MDB_NOSYNC); the harnesses restart
 * the kvd (kv_fuzz_kvd_maybe_reset) once its revision or lease count grows past a bound so
 * state and disk stay small during long runs.
 */
#ifndef KV_FUZZ_KVD_H
#define KV_FUZZ_KVD_H

#include "api/services.h"
#include "daemon/config.h"
#include "grpc/grpc_server.h"
#include "daemon/server.h"

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef struct kv_fuzz_kvd {
    uv_loop_t loop;
    kv_config cfg;
    kv_server srv;
    kv_grpc_method methods[KV_SERVICES_MAX];
    size_t n_methods;
    kv_grpc_server *grpc;
    struct kv_client_http *chttp; /* the client port's HTTP branch (JSON gateway) */
    char dir[512];
    int running;
} kv_fuzz_kvd;

/* Creates a fresh temp data dir (under $TMPDIR, default /tmp) and starts kvd in it.
 * 0 or a negative errno. */
int kv_fuzz_kvd_start(kv_fuzz_kvd *k);
/* Stops kvd, runs the loop until every handle is closed, removes the data dir. */
void kv_fuzz_kvd_stop(kv_fuzz_kvd *k);
/* Restarts kvd on a fresh data dir if its revision or lease count passed a bound. */
int kv_fuzz_kvd_maybe_reset(kv_fuzz_kvd *k);

/* Called with server output bytes (valid during the call). */
typedef void (*kv_fuzz_out_fn)(void *arg, const uint8_t *p, size_t n);

/* Produces the next chunk of client bytes into *p and *n (valid until the next call). Returns 0
 * with a chunk, nonzero when the client has nothing more to send. */
typedef int (*kv_fuzz_next_fn)(void *arg, const uint8_t **p, size_t *n);

/* One client connection. For each chunk from next(): writes it, lets the server read and
 * process it, waits until the apply path has drained (a node barrier) and hands the server's
 * output to out (may be NULL). Then half-closes the client side and runs the loop until the
 * server has freed the connection (a connection that outlives its peer's EOF aborts: leak).
 * All waits are bounded. 0, or a negative errno if the connection could not be set up. */
int kv_fuzz_kvd_session(kv_fuzz_kvd *k, kv_fuzz_next_fn next, kv_fuzz_out_fn out, void *arg);

/* Temp dir helpers shared with fuzz_request.c: mkdtemp under $TMPDIR (default /tmp) into
 * buf; rm -r of a flat directory (files only). */
int kv_fuzz_mkdtemp(char *buf, size_t cap, const char *prefix);
void kv_fuzz_rmdir(const char *dir);

#endif
