/*
 * auth_read: the linearizable side of etcdserverpb.Auth (service_auth_read.c). etcd 3.4 sends
 * UserGet/UserList/RoleGet/RoleList through raft and Authenticate waits for
 * linearizableReadNotify; kvd runs them behind the ReadIndex barrier (node/node.h
 * kv_node_read_index, as a linearizable Range), then reads this member's committed state.
 * Waiting calls are listed in kv_auth (api/auth_srv.h `reads`) so a cancel finds them.
 * Loop thread only.
 */
#ifndef KV_API_AUTH_READ_H
#define KV_API_AUTH_READ_H

#include "grpc/grpc_server.h"

#include <stddef.h>
#include <stdint.h>

typedef void (*kv_auth_read_fn)(kv_grpc_call *call, const uint8_t *msg, size_t len);

/* Runs fn(call, copy of msg) once this member applied the leader's commit index as of now;
 * answers the call with the barrier's error instead ("no leader", "too many requests",
 * "server stopped", "request timed out"). The copy is cleansed when freed (Authenticate's
 * holds the password). */
void kv_auth_after_barrier(kv_grpc_call *call, const uint8_t *msg, size_t len, kv_auth_read_fn fn);
/* on_cancel helper: 1 if call was waiting for the barrier (it will not run), else 0. */
int kv_auth_read_cancel(kv_grpc_call *call);

/* The method handlers (on_message) of UserList and RoleList, UserGet, RoleGet. */
void kv_auth_on_list(kv_grpc_call *call, const uint8_t *msg, size_t len);
void kv_auth_on_user_get(kv_grpc_call *call, const uint8_t *msg, size_t len);
void kv_auth_on_role_get(kv_grpc_call *call, const uint8_t *msg, size_t len);

#endif
