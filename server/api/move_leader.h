/*
 * move_leader: Maintenance.MoveLeader (etcd 3.4 maintenanceServer.MoveLeader and
 * EtcdServer.MoveLeader): only the leader may transfer ("etcdserver: not leader"); the
 * target must be a voting member ("etcdserver: bad leader transferee"); the call waits until
 * the target leads (kv_node_move_leader) and answers an empty MoveLeaderResponse (etcd sets no
 * header). A leader moving the leadership to itself is answered at once (etcd's wait loop ends
 * immediately). Loop thread; a cancelled call leaves the transfer running and its completion
 * only frees the context.
 */
#ifndef KV_API_MOVE_LEADER_H
#define KV_API_MOVE_LEADER_H

#include "grpc/grpc_server.h"

#include <stddef.h>
#include <stdint.h>

void kv_move_leader_on_message(kv_grpc_call *call, const uint8_t *msg, size_t len);
void kv_move_leader_on_cancel(kv_grpc_call *call);

#endif
