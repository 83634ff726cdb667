/*
 * require_leader: etcd's WithRequireLeader, the "hasleader: true" request metadata (etcd 3.4
 * etcdserver/api/v3rpc/interceptor.go). A client that sets it would rather fail over than be
 * served by a member cut off from its cluster:
 *
 *   - kv_require_leader_admit, the gRPC server's admit hook (grpc_server.h): a call carrying
 *     hasleader=true that arrives while this member knows no leader is answered UNAVAILABLE
 *     "etcdserver: no leader" before its method sees it (unary calls and streams alike);
 *     first, on a learner, any call but Status, Range and Snapshot is answered UNAVAILABLE
 *     "etcdserver: rpc not supported for learner" (etcd 3.4's interceptors; a linearizable
 *     Range is refused the same way by the Range itself);
 *   - the monitor: every election timeout it asks the node for a leader; after 3 checks in a
 *     row without one (etcd's maxNoLeaderCnt), every open stream carrying hasleader=true (a
 *     watch, a keepalive stream) is ended with the same status, and again at every later check
 *     while there is still none. clientv3 then retries on another endpoint.
 *
 * Streams without the metadata are left alone (etcd's behaviour: a plain watcher on an
 * isolated member waits). Metric kvd_require_leader_streams_ended_total.
 * Threads: loop thread only. Return values: 0 or a negative errno.
 */
#ifndef KV_API_REQUIRE_LEADER_H
#define KV_API_REQUIRE_LEADER_H

#include "api/api.h"
#include "grpc/grpc_server.h"

#include <stddef.h>
#include <stdint.h>

typedef struct kv_require_leader kv_require_leader;

/* The admit hook: kv_grpc_call_app(call) must be the kv_api. 0 = deliver. */
int kv_require_leader_admit(kv_grpc_call *call);
/* 1 when this member is a learner (raft's configuration lists it as one). */
int kv_api_is_learner(const kv_api *a);

/* Starts the monitor on a->loop, checking every interval_ms (the election timeout) the
 * servers[0..n) (borrowed: the array and the servers must outlive the monitor). */
int kv_require_leader_start(kv_require_leader **out, kv_api *a, kv_grpc_server *const *servers,
                            const size_t *n, uint32_t interval_ms);
/* Stops the timer; freed in its close callback. r may be NULL. Before the servers close. */
void kv_require_leader_stop(kv_require_leader *r);

#endif
