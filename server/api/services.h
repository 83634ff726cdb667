/*
 * services: the gRPC method table of the client port.
 *
 * Each service_*.c file implements one etcd service; this file joins their methods into one
 * table for kv_grpc_server_init(). Methods kvd does not implement yet are registered too and
 * answer UNIMPLEMENTED with a message naming the method, so clients get a clear error rather
 * than a generic "unknown method".
 *
 * Handlers find the member state through kv_grpc_call_app() (a kv_api *).
 */
#ifndef KV_SERVICES_H
#define KV_SERVICES_H

#include "apply/apply.h"
#include "common/etcd_errors.h"
#include "common/status.h"
#include "grpc/grpc_server.h"
#include "lease/lease_fwd.h"
#include "mvcc/store.h"

#include <protobuf-c/protobuf-c.h>

#include <stddef.h>

/* Copies every method of every service into out (cap entries). Returns the count, or 0 if
 * cap is too small. The caller owns out (main() keeps it for the server's lifetime). */
#define KV_SERVICES_MAX 96
size_t kv_services_collect(kv_grpc_method *out, size_t cap);

/* Per-service tables (each file exports one). */
extern const kv_grpc_method kv_service_kv[];
extern const size_t kv_service_kv_len;
extern const kv_grpc_method kv_service_lease[];
/* Methods served ahead of bulk writes (kv_grpc_config.priority_methods): LeaseKeepAlive,
 * LeaseTimeToLive, LeaseLeases. NULL-terminated. */
extern const char *const kv_service_priority_methods[];
extern const size_t kv_service_lease_len;
/* The keepalive stream as the lease forwarder sees it (lease/lease_fwd.h): the daemon passes
 * it to kv_lease_fwd_start. */
extern const kv_lease_fwd_call_ops kv_service_lease_call_ops;
extern const kv_grpc_method kv_service_maintenance[];
extern const size_t kv_service_maintenance_len;
extern const kv_grpc_method kv_service_cluster[];
extern const size_t kv_service_cluster_len;
extern const kv_grpc_method kv_service_auth[]; /* etcdserverpb.Auth (service_auth.c) */
extern const size_t kv_service_auth_len;
extern const kv_grpc_method kv_service_watch[];
extern const size_t kv_service_watch_len;
extern const kv_grpc_method kv_service_health[]; /* grpc.health.v1.Health/Check */
extern const size_t kv_service_health_len;
extern const kv_grpc_method kv_service_election[]; /* v3electionpb.Election (service_election.c) */
extern const size_t kv_service_election_len;
extern const kv_grpc_method kv_service_lock[]; /* v3lockpb.Lock (service_lock.c) */
extern const size_t kv_service_lock_len;

/* THE mapping of an error value to the gRPC status clients see (etcd's togRPCError): the
 * code of e's row in the error table (common/etcd_status.h). Every error that reaches a
 * client as an RPC status goes through it; below this edge (apply, node, mvcc, lease, watch)
 * errors are kv_etcd_err values. KV_GRPC_UNKNOWN for a value that is not an error. */
kv_grpc_code kv_api_status_of(kv_etcd_err e);

/* Shared reply helpers. */
/* Sends the packed response (if res->err == KV_ERR_NONE) and finishes the call; else finishes
 * with res's error (kv_reply_etcd_err_detail). */
void kv_reply_result(kv_grpc_call *call, const kv_result *res);
/* Packs m and sends it as one message of the call (no finish). Small messages are packed on
 * the stack. Returns 0, -ENOMEM, or kv_grpc_call_send's error (-ENOBUFS: outbound full). */
int kv_send_message(kv_grpc_call *call, const ProtobufCMessage *m);
/* Unary reply: sends m and finishes OK; RESOURCE_EXHAUSTED if it cannot be queued. */
void kv_reply_message(kv_grpc_call *call, const ProtobufCMessage *m);
/* Finishes with the status of e (kv_api_status_of) and its exact message. */
void kv_reply_etcd_err(kv_grpc_call *call, kv_etcd_err e);
/* The same with detail (NULL or "": none) appended to the message (kv_etcd_err_format). */
void kv_reply_etcd_err_detail(kv_grpc_call *call, kv_etcd_err e, const char *detail);
/* Finishes with res's error (res->err != KV_ERR_NONE): kv_reply_etcd_err_detail. */
void kv_reply_result_err(kv_grpc_call *call, const kv_result *res);
/* The election and lock services' answer to the error of one of their key-value steps
 * (api/conc_client.h): etcd's v3election/v3lock servers get it from clientv3 as a plain
 * error, which gRPC answers with UNKNOWN and the error's text (e's message + detail). */
void kv_reply_step_err(kv_grpc_call *call, kv_etcd_err e, const char *detail);
/* Maps a negative errno from kv_node_propose to the etcd error. */
void kv_reply_propose_error(kv_grpc_call *call, int rc);
/* Unary write: wraps msg as the given InternalRequest field and proposes it; the response goes
 * out after the batch commits. Cancellation detaches the request. */
void kv_propose_unary(kv_grpc_call *call, int field, const uint8_t *msg, size_t len);
/* kv_propose_unary of a packed LeaseGrantRequest; id_by_leader: its id was chosen by this
 * member for a client that asked for id 0, and the leader names it again (apply/internal_req.h
 * kv_internal_mark_lease_id_by_leader). */
void kv_propose_lease_grant(kv_grpc_call *call, const uint8_t *msg, size_t len, int id_by_leader);
/* on_cancel for calls started with kv_propose_unary. */
void kv_propose_cancel(kv_grpc_call *call);
/* Fills h with this member's cluster id, member id and raft term, and the revision: rev > 0
 * as given, KV_HDR_REVISION_NOW the node's current store revision, 0 none (etcd's Cluster
 * service headers carry none). call's app is the kv_api. */
#define KV_HDR_REVISION_NOW (-1)
struct Etcdserverpb__ResponseHeader;
void kv_fill_header(kv_grpc_call *call, struct Etcdserverpb__ResponseHeader *h, int64_t rev);

#endif
