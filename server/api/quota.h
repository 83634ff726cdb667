/*
 * quota: the admission check of writes before they are proposed (etcd 3.4
 * etcdserver/quota.go + api/v3rpc/quota.go), and the refusal of writes while CORRUPT is active.
 *
 * - Put, Txn and LeaseGrant: if backend size + cost >= quota (etcd: Available() is
 *   size + cost < quota), the NOSPACE alarm is raised (proposed for this member) and the
 *   request fails with RESOURCE_EXHAUSTED "etcdserver: mvcc: database space exceeded".
 *   Backend size is kv_store_db_size (the data file's used pages, etcd's backend.Size()),
 *   which only shrinks with Defragment, as in etcd. Cost: Put 256 + the request's bytes
 *   (etcd: 256 + key + value); LeaseGrant 64; Txn 0 here (its puts are refused at apply
 *   while NOSPACE is active, etcd's capped applier; not unpacking keeps the check O(1)).
 * - While CORRUPT is active, Put, DeleteRange, Txn, Compact, LeaseGrant and LeaseRevoke fail
 *   with DATA_LOSS "etcdserver: corrupt cluster" (etcd's applierV3Corrupt).
 * Everything else (Range, DeleteRange, Compact, LeaseRevoke, Alarm, Defragment, Status) is
 * admitted while NOSPACE is active.
 * - Every request but Alarm, whatever the alarms: the raft log lives in the data file, so an
 *   entry that would take the retained log past --max-raft-log-bytes is refused with
 *   RESOURCE_EXHAUSTED "etcdserver: too many requests" (kv_node_log_admit; the log compacts
 *   early, by bytes, so a retry soon passes).
 *
 * Loop thread only.
 */
#ifndef KV_API_QUOTA_H
#define KV_API_QUOTA_H

#include "grpc/grpc_server.h"

#include <stddef.h>

struct kv_api;

/* field: the InternalRequest field (enum kv_ireq_field). Returns 0 to go on, or 1 when the
 * call was refused and finished. */
int kv_quota_admit(struct kv_api *s, kv_grpc_call *call, int field, size_t len);

#endif
