/*
 * read_req: unary reads answered from the read worker pool (node/read_pool.h).
 *
 * kv_read_unary() copies the request message and submits a job; the job runs fn on a reader
 * thread (fn must only use the store's thread-safe read functions, see mvcc/store.h) and the
 * reply goes out on the loop thread. A full pool answers RESOURCE_EXHAUSTED
 * "etcdserver: too many requests" at once. If the RPC is cancelled meanwhile (kv_read_cancel
 * as the method's on_cancel), the request object is detached from the call: the read still
 * finishes on its thread (or is skipped if it had not started), and nothing is sent.
 * Without a pool (srv->read_pool NULL) fn runs inline.
 *
 * Read your writes: a write may be answered before the LMDB commit that applied it is visible
 * (node_ready.c, "early acknowledgement"); kv_read_unary then waits for that commit
 * (kv_node_read_visible) before it opens its read transaction, so it sees every write this
 * member acknowledged before the request arrived.
 *
 * Threads: both functions run on the loop thread.
 */
#ifndef KV_API_READ_REQ_H
#define KV_API_READ_REQ_H

#include "apply/apply.h"
#include "grpc/grpc_server.h"
#include "mvcc/store.h"

#include <stddef.h>
#include <stdint.h>

/* Runs on a reader thread. Returns as kv_store_range: 0 with res set (err 0: res->resp is
 * the packed response, malloc'd; or a request error in res->err/detail), or < 0 on storage
 * failure (then the call gets res->err if set, else KV_ERR_STORAGE). */
typedef int (*kv_read_fn)(kv_store *store, const uint8_t *msg, size_t len, const kv_header_info *h,
                          kv_result *res);

void kv_read_unary(kv_grpc_call *call, kv_read_fn fn, const uint8_t *msg, size_t len);
/* The same after a ReadIndex barrier (kv_node_read_index): the read starts once this member
 * applied everything the leader had committed when the read arrived, so it is linearizable on
 * a follower too. point: run fn inline on the loop (O(log n) reads) instead of the pool.
 * Errors of the barrier: UNAVAILABLE "etcdserver: no leader" / "etcdserver: request timed
 * out", RESOURCE_EXHAUSTED "etcdserver: too many requests". kv_read_cancel covers both phases. */
void kv_read_unary_linearizable(kv_grpc_call *call, kv_read_fn fn, const uint8_t *msg, size_t len,
                                int point);
/* The same after kv_node_read_visible (a serializable read in a cluster): waits only while a
 * write this member acknowledged is not visible in LMDB yet (its commit is being flushed). */
void kv_read_unary_visible(kv_grpc_call *call, kv_read_fn fn, const uint8_t *msg, size_t len,
                           int point);
/* on_cancel for calls started with kv_read_unary. */
void kv_read_cancel(kv_grpc_call *call);

#endif
