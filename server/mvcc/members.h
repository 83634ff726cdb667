/*
 * members: the cluster membership table (etcd 3.4 etcdserver/api/membership: the "members"
 * and "members_removed" buckets), kept in the store's LMDB environment so that it changes in
 * the same transaction as the applied index of the entry that changed it.
 *
 * Storage (named LMDB databases of the store, see store.h):
 *   "members"         id (8, BE) -> crc32c(4, BE) | packed kvdpb.Member
 *   "members_removed" id (8, BE) -> crc32c(4, BE)
 *   "members_staged"  id (8, BE) -> crc32c(4, BE) | index (8, BE) | packed kvdpb.Member, as
 *                     the MemberAdd record entry at that log index carried it
 *                     (kv_store_member_stage)
 *   The CRC covers the 8-byte key followed by the payload (the packed Member, or nothing);
 *   a record failing it is reported as -EBADMSG, never returned. The Member's own id field is
 *   always the key's.
 *
 * Who writes what (as etcd):
 *   - configuration (id, peer URLs, learner flag): the initial cluster (bootstrap) and raft
 *     configuration changes, applied by the node with kv_store_member_put / _remove /
 *     _set_learner inside its open batch;
 *   - name and client URLs: each member's publish (InternalRequest member_publish), once it
 *     has a leader; peer URLs also by MemberUpdate (InternalRequest member_update). Both are
 *     applied by the applier (server/apply/) through kv_ks_member_publish / _update
 *     (mvcc/keyspace.h), change no revision and answer a packed
 *     etcdserverpb.MemberUpdateResponse (header + every member after the change).
 *   - a removed id is remembered for ever: it can not be put again (-EPERM) and a publish
 *     for it is ignored (as etcd's UpdateAttributes).
 * Limits: at most KV_MEMBERS_MAX members (a MemberAdd beyond it is refused by the API), at
 * most KV_MEMBER_MAX_URLS URLs per list and KV_MEMBER_MAX_STR bytes per name or URL (-EINVAL
 * from put, INVALID_ARGUMENT from apply).
 *
 * Threads: the batch functions run on the apply thread with the batch open (as
 * kv_store_apply); kv_store_members_list / _member_get / _member_is_removed use their own read
 * transaction and may run on any thread.
 * Return values: 0 or a negative errno; -EBADMSG for a record failing its check.
 */
#ifndef KV_MVCC_MEMBERS_H
#define KV_MVCC_MEMBERS_H

#include <stddef.h>
#include <stdint.h>

#include "internal.pb-c.h"
#include "mvcc/store.h"

#define KV_MEMBERS_MAX 64
#define KV_MEMBER_MAX_URLS 8 /* = config.h KV_MAX_URLS (member ids hash at most 8 URLs) */
#define KV_MEMBER_MAX_STR 512

/* Writes the n initial members (each with its id set) if the table is empty and no member
 * was ever removed; otherwise does nothing (idempotent: a restart passes the same list).
 * Returns 1 when it wrote them, 0 when the table was already initialised, < 0 on error
 * (-EINVAL: a member with id 0, a duplicate id or over the limits). Apply thread, batch open. */
int kv_store_members_bootstrap(kv_store *s, kv_store_batch *b, const Kvdpb__Member *const *m,
                               size_t n);

/* Adds or replaces member id from a packed kvdpb.Member (the record of a membership change;
 * its id field is ignored, id wins). -EPERM if id was removed, -EINVAL for a record that does
 * not decode or is over the limits, -ENOSPC past KV_MEMBERS_MAX members. Apply thread. */
int kv_store_member_put(kv_store *s, kv_store_batch *b, uint64_t id, const uint8_t *record,
                        size_t len);
/* Removes member id and remembers the id as removed. -ENOENT if id is not a member. */
int kv_store_member_remove(kv_store *s, kv_store_batch *b, uint64_t id);
/* Sets the learner flag (promote: learner = 0). -ENOENT if id is not a member. */
int kv_store_member_set_learner(kv_store *s, kv_store_batch *b, uint64_t id, int learner);

/* A MemberAdd is two log entries: a normal entry with the new member's record (peer URLs),
 * then, once the leader applied it, the configuration entry that adds the id (server/node/
 * node_conf.c). Between the two the record is staged here, in the same transaction as the
 * applied index of the entry that carried it, so that a member restarting between them, or
 * one whose state a snapshot taken between them replaced, still has it when the configuration
 * entry applies. stage: writes (or replaces) the record of id, from the entry at index; at
 * most KV_MEMBERS_MAX_STAGED are kept (a change the leader never completed, or refused, leaves
 * its record: when full, the one of the oldest entry goes, alike on every member; that is
 * twice the changes a leader keeps waiting for their configuration entry, node_int.h
 * KV_NODE_MAX_RECORDS, so the changes in progress are the newest and stay). -EINVAL for a
 * record over the limits. take_staged: 0 and
 * *record (malloc'd, the caller frees) of *len bytes, deleted from the table; -ENOENT if none;
 * -EBADMSG for a record failing its check. Apply thread, batch open. */
#define KV_MEMBERS_MAX_STAGED 16
int kv_store_member_stage(kv_store *s, kv_store_batch *b, uint64_t id, uint64_t index,
                          const uint8_t *record, size_t len);
int kv_store_member_take_staged(kv_store *s, kv_store_batch *b, uint64_t id, uint8_t **record,
                                size_t *len);

/* Raft configuration change ops (node.h's KV_NODE_MEMBER_* have the same values); applied,
 * with etcd's errors for refusals, by apply/apply.h kv_store_member_change. */
enum { KV_MEMBER_OP_ADD = 1, KV_MEMBER_OP_ADD_LEARNER, KV_MEMBER_OP_REMOVE, KV_MEMBER_OP_PROMOTE };
#define KV_MEMBERS_MAX_LEARNERS 1
/* A raft configuration change as it applies, validated as etcd's
 * RaftCluster.ValidateConfigurationChange then applied (inside the node's batch; deterministic
 * on every member), with plain results: returns 0, or < 0 on storage failure / -EBADMSG /
 * -EINVAL (bad op). record: the packed kvdpb.Member of an add (NULL otherwise). *refused gets 0
 * (applied) or the refusal, which changed nothing: -ENOENT id removed or not a member,
 * -EEXIST add of an existing id, -EADDRINUSE peer URL in use, -EMLINK a second learner,
 * -EALREADY promote of a voter, -EDQUOT more than KV_MEMBERS_MAX, -EINVAL a record that does
 * not decode or is over the limits. kv_store_member_change (apply/apply.h) maps the refusal
 * to etcd's error. */
int kv_store_member_conf_change(kv_store *s, kv_store_batch *b, int op, uint64_t id,
                                const uint8_t *record, size_t len, int *refused);

/* Committed members in id order (own read txn, any thread). *out is a malloc'd array of *n
 * malloc'd members (free with kv_store_members_free); an empty table gives *out NULL, *n 0. */
int kv_store_members_list(kv_store *s, Kvdpb__Member ***out, size_t *n);
void kv_store_members_free(Kvdpb__Member **m, size_t n);
/* One committed member (own read txn): *out malloc'd (kvdpb__member__free_unpacked) or
 * -ENOENT. */
int kv_store_member_get(kv_store *s, uint64_t id, Kvdpb__Member **out);
/* 1 if id was removed from the cluster, 0 if not, < 0 on error (own read txn). */
int kv_store_member_is_removed(kv_store *s, uint64_t id);

/* etcd's member id (computeMemberId): SHA-1 of the sorted peer URLs (at most
 * KV_MEMBERS_MAX_URLS) and the cluster token (at most 255 bytes), its first 8 bytes big-endian.
 * Used for --initial-cluster members (daemon/identity.c) and MemberAdd (api/service_cluster.c).
 * Pure; any thread. */
#define KV_MEMBERS_MAX_URLS 8
uint64_t kv_members_compute_id(const char *const *peer_urls, size_t n, const char *token);

#endif
