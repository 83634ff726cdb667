/*
 * internal_req: builds packed kvdpb.InternalRequest records from the raw bytes of a client
 * request, without unpacking and repacking it: an embedded message field is just
 * tag + length + the message bytes (proto3 wire format), so the request travels to the
 * apply path as the client sent it.
 */
#ifndef KV_INTERNAL_REQ_H
#define KV_INTERNAL_REQ_H

#include <stddef.h>
#include <stdint.h>

#include "common/etcd_errors.h"

/* Field numbers of kvdpb.InternalRequest's oneof (proto/internal.proto). */
enum kv_ireq_field {
    KV_IREQ_PUT = 3,
    KV_IREQ_DELETE_RANGE = 4,
    KV_IREQ_TXN = 5,
    KV_IREQ_COMPACTION = 6,
    KV_IREQ_LEASE_GRANT = 7,
    KV_IREQ_LEASE_REVOKE = 8,
    KV_IREQ_LEASE_CHECKPOINT = 9,
    KV_IREQ_ALARM = 10,
    /* Auth (60..70; 11, 12, 20, 21 are the node's member records, never wrapped here) */
    KV_IREQ_AUTH_ENABLE = 60,
    KV_IREQ_AUTH_DISABLE = 61,
    KV_IREQ_AUTH_USER_ADD = 62,
    KV_IREQ_AUTH_USER_DELETE = 63,
    KV_IREQ_AUTH_USER_CHANGE_PASSWORD = 64,
    KV_IREQ_AUTH_USER_GRANT_ROLE = 65,
    KV_IREQ_AUTH_USER_REVOKE_ROLE = 66,
    KV_IREQ_AUTH_ROLE_ADD = 67,
    KV_IREQ_AUTH_ROLE_DELETE = 68,
    KV_IREQ_AUTH_ROLE_GRANT_PERMISSION = 69,
    KV_IREQ_AUTH_ROLE_REVOKE_PERMISSION = 70,
    /* 71, 72: auth_user, auth_revision (not oneof members) */
    KV_IREQ_AUTH_AUTHENTICATE = 73, /* kvdpb.AuthAuthenticate (api/service_auth.c) */
};

/* *out is malloc'd (caller owns). Returns 0 or -ENOMEM / -EINVAL. */
int kv_internal_wrap(enum kv_ireq_field field, uint64_t id, const uint8_t *msg, size_t len,
                     uint8_t **out, size_t *out_len);

/* What a client's request carries into the log besides its message, filled in by the member
 * that takes it (api/services.c, api/conc_client.c). */
typedef struct kv_ireq_origin {
    const char *user;            /* auth_user (71), with auth_revision */
    uint64_t auth_revision;      /* auth_revision (72) of the caller's check (api/auth_gate.c);
                                  * 0: auth disabled, neither field is sent */
    uint32_t max_keys_per_lease; /* lease_key_limit (75) of a Put or Txn: this member's
                                  * --max-keys-per-lease, see KV_IREQ_LEASE_KEY_LIMIT */
    int lease_id_by_leader;      /* 1: lease_id_by_leader (74) = true, see below */
} kv_ireq_origin;

/* kv_internal_wrap, plus the fields of o, in one allocation. *out is malloc'd (caller owns).
 * 0 or -ENOMEM / -EINVAL. */
int kv_internal_wrap_client(enum kv_ireq_field field, uint64_t id, const uint8_t *msg, size_t len,
                            const kv_ireq_origin *o, uint8_t **out, size_t *out_len);

/* Server-chosen lease ids in log order (docs/ARCHITECTURE.md "Leases"). A LeaseGrant whose
 * id the server chooses is proposed with a valid id named by the member that received it and
 * InternalRequest.lease_id_by_leader = true. The leader, just before it hands the entry to
 * raft (node/node_ready.c), names the id again with kv_internal_name_lease, so ids increase
 * in log order. An entry that no leader renamed (a leader that predates the field) applies
 * the first id. Pure functions, any thread. */
#define KV_IREQ_LEASE_ID_BY_LEADER 74

/* Appends lease_id_by_leader = true to the packed InternalRequest *req of *len bytes
 * (realloc'd; the caller owns it either way). 0 or -ENOMEM (*req unchanged). */
int kv_internal_mark_lease_id_by_leader(uint8_t **req, size_t *len);

/* The proposer's --max-keys-per-lease travels with its Put and Txn entries (InternalRequest
 * lease_key_limit = 75, kv_internal_wrap_client), and the apply uses it instead of the
 * applying member's own flag: the apply stays a function of the log when members' flags
 * differ. A limit of 0 (none) is sent as KV_LEASE_KEYS_UNLIMITED. */
#define KV_IREQ_LEASE_KEY_LIMIT 75
#define KV_LEASE_KEYS_UNLIMITED UINT32_MAX

/* 1 if the packed InternalRequest p (len bytes) asks the leader to name its lease id: the last
 * lease_id_by_leader it holds is true. 0 otherwise, for bytes that do not parse too. Walks the
 * top-level fields only. */
int kv_internal_lease_id_by_leader(const uint8_t *p, size_t len);

/* Gives the grant in the packed InternalRequest *entry (*len bytes, marked as above) the id
 * id, and clears its lease_id_by_leader. In place when id's varint fits where the grant's id
 * is (the member's id was a server-chosen one too: always, in practice), padded to that
 * length; otherwise *entry is realloc'd and the grant is appended again with the same TTL
 * and id, then lease_id_by_leader = false (protobuf keeps the last value of a field read
 * twice). 0; -EINVAL: no mark or no grant, or bytes that do not parse (*entry unchanged);
 * -ENOMEM (*entry unchanged, still the caller's). */
int kv_internal_name_lease(uint8_t **entry, size_t *len, int64_t id);

/* Pre-scan of a client's TxnRequest bytes before they are wrapped and queued, so nesting
 * depth and op counts are bounded before anything unpacks them (pb/pb_scan.h).
 * max_txn_ops is --max-txn-ops. Returns KV_ERR_NONE if the request may be proposed;
 * otherwise the error to answer: KV_ERR_TOO_MANY_OPS, or KV_ERR_GRPC_UNMARSHAL (what kvd
 * answers for undecodable requests). Any thread. */
kv_etcd_err kv_internal_check_txn(const uint8_t *msg, size_t len, uint32_t max_txn_ops);

#endif
