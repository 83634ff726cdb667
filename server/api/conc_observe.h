/*
 * conc_observe: v3electionpb.Election/Observe, a server stream of LeaderResponse (etcd 3.4
 * clientv3/concurrency/election.go observe()):
 *   1. the prefix's first-created key (a linearizable Range). None: watch the prefix from
 *      the Range's revision until a PUT; that key (header revision = its mod revision) is
 *      the leader.
 *   2. send {header, leader kv}; watch the leader key from header revision + 1: every PUT is
 *      sent ({watch header, kv}); its DELETE goes back to 1.
 * The stream ends only when the client cancels it (or the member stops). Counted in the
 * --max-concurrency-waiters bound (conc_util.h); each watch counts against the connection's
 * --max-watch-streams-per-connection. A reader that does not read holds events back in the
 * watch hub (conc_watch.h queued), never in memory here. Loop thread only.
 */
#ifndef KV_API_CONC_OBSERVE_H
#define KV_API_CONC_OBSERVE_H

#include "grpc/grpc_server.h"

#include <stddef.h>
#include <stdint.h>

/* The method's callbacks (service_election.c's table). */
void kv_conc_observe_message(kv_grpc_call *call, const uint8_t *msg, size_t len);
void kv_conc_observe_half_close(kv_grpc_call *call);
void kv_conc_observe_cancel(kv_grpc_call *call);

#endif
