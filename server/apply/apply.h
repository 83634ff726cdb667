/*
 * apply.h - the apply API: the ordered apply function of log entries (etcd 3.4
 * etcdserver/apply.go), the serializable reads that share its request layer, and their
 * result. Implemented in server/apply/ (library kv_apply) on the keyspace operations of
 * mvcc/keyspace.h; the raft driver (node/), the services (api/) and the tools that apply
 * entries call it.
 *
 * Errors are values: a request error is a kv_etcd_err (common/etcd_errors.h) in
 * kv_result.err, plus an optional detail appended to its message; nothing below the api edge
 * names a gRPC status. The services turn the value into the status and message clients see
 * in one place (api/services.h kv_api_status_of; etcd's togRPCError).
 *
 * Linking: kv_mvcc's link interface brings kv_apply along (apply.cmake), so every program that
 * links the store can apply entries.
 */
#ifndef KV_APPLY_APPLY_H
#define KV_APPLY_APPLY_H

#include <stddef.h>
#include <stdint.h>

#include "common/etcd_errors.h"
#include "mvcc/store.h"

/* The outcome of one request. Owned by the caller; resp (when set) too. */
typedef struct kv_result {
    kv_etcd_err err;  /* KV_ERR_NONE (0): done; else the request's error (it changed nothing) */
    char detail[64];  /* appended to err's message, "" for most errors: " (limit 64)" */
    uint8_t *resp;    /* packed etcdserverpb response (malloc'd, caller frees) when err == 0 */
    size_t resp_len;  /* (resp may be NULL when resp_len == 0 or skipped) */
    int64_t revision; /* store revision after the request */
    int skipped;      /* 1 when apply skipped an already-applied index */
    int auth_tokens;  /* KV_RESULT_AUTH_*: the entry changes the member's tokens (quiet too) */
    int barrier;      /* KV_RESULT_BARRIER_*: the entry changes what request admission reads,
                       * so its answer waits for the commit that makes it visible (node_apply.c
                       * early_ok) */
} kv_result;

/* kv_result.barrier: an auth management entry (apply_auth.c: tokens, users, permissions;
 * node.h kv_node_auth_generation moves once it is visible), an alarm ACTIVATE/DEACTIVATE
 * (apply_cluster.c: the alarms a write is admitted against, api/quota.c), or a KV Compact
 * (apply_kv.c: the compact revision a Watch's start revision is checked against). */
enum {
    KV_RESULT_BARRIER_NONE = 0,
    KV_RESULT_BARRIER_AUTH = 1,
    KV_RESULT_BARRIER_ALARM = 2,
    KV_RESULT_BARRIER_COMPACT = 3,
};

/* kv_result.auth_tokens (apply/apply_authn.c; node/node.h kv_node_set_auth_hook). */
enum { KV_RESULT_AUTH_NONE = 0, KV_RESULT_AUTH_ASSIGN = 1, KV_RESULT_AUTH_CLEAR = 2 };

/* The text a client gets for res's error (kv_etcd_err_format: message + detail) in buf (n
 * bytes; KV_ETCD_ERR_TEXT_MAX never truncates); "" when res->err is KV_ERR_NONE. Returns buf. */
char *kv_result_text(const kv_result *res, char *buf, size_t n);

/* Sets res to the error e with no detail (resp, revision and the rest untouched). */
void kv_result_set_err(kv_result *res, kv_etcd_err e);

/* Applies one packed kvdpb.InternalRequest at raft/log index `index` (strictly increasing),
 * inside the open batch b of store s (mvcc/store.h write path; apply thread).
 * index <= applied index (stored or earlier in this batch) -> skipped (res->skipped = 1,
 * err 0, no resp). Request-level errors return 0 with res->err (and res->detail) set
 * (nothing of the request is kept; the batch goes on and the index counts as applied).
 * Returns < 0 only on storage failure or corruption, or -EAGAIN when a shared batch
 * (kv_store_batch_set_shared) took part of a request that failed; the caller must then abort
 * the batch (after -EAGAIN: and apply the same entries again in a batch that is not shared). h
 * may be NULL (zero header). res is fully overwritten; on err 0 the caller frees res->resp.
 * Alarm requests (AlarmRequest GET/ACTIVATE/DEACTIVATE) are applied here too (etcd's
 * applierV3backend.Alarm); while NOSPACE is active Put, LeaseGrant and Txns with puts fail
 * with KV_ERR_NO_SPACE (etcd's capped applier); while CORRUPT is active every KV and lease
 * write fails with KV_ERR_CORRUPT. A record failing its checksum (-EBADMSG) fails only its
 * request, with KV_ERR_RECORD_CHECKSUM, and asks for the CORRUPT alarm. */
int kv_store_apply(kv_store *s, kv_store_batch *b, uint64_t index, const uint8_t *req, size_t len,
                   const kv_header_info *h, kv_result *res);

/* Reads (own read txn, sees the last committed batch; any thread): packed
 * etcdserverpb.RangeRequest -> packed RangeResponse in res (err 0), or res->err set and 0
 * returned for request errors. A record failing its checksum gives 0 with
 * KV_ERR_RECORD_CHECKSUM and asks for the CORRUPT alarm; while CORRUPT is active
 * (kv_store_alarms) every range gets KV_ERR_CORRUPT. Returns < 0 on storage failure.
 * Implemented on kv_store_range_read (mvcc/range.h), apply/apply_range.c. */
int kv_store_range(kv_store *s, const uint8_t *req, size_t len, const kv_header_info *h,
                   kv_result *res);

/* HashKV as a request (own read txn, any thread; the signature of kv_store_range): packed
 * etcdserverpb.HashKVRequest -> packed HashKVResponse (header revision = current revision),
 * KV_ERR_COMPACTED / KV_ERR_FUTURE_REV for compacted and future revisions; < 0 on storage
 * failure/corruption. */
int kv_store_hash_kv_request(kv_store *s, const uint8_t *req, size_t len, const kv_header_info *h,
                             kv_result *res);

/* A raft configuration change as it applies (the node calls it when the configuration entry
 * applies, inside its batch; deterministic on every member): mvcc/members.h
 * kv_store_member_conf_change, its refusals mapped to etcd's errors in res->err (changing
 * nothing). op: KV_MEMBER_OP_* (mvcc/members.h, equal to node.h's KV_NODE_MEMBER_*). record:
 * the packed kvdpb.Member of an add (NULL otherwise).
 *   id removed before            KV_ERR_MEMBER_NOT_FOUND (etcd's ErrIDRemoved answers so)
 *   add of an existing id        KV_ERR_MEMBER_EXIST
 *   add with a peer URL in use   KV_ERR_PEER_URL_EXIST
 *   a second learner             KV_ERR_TOO_MANY_LEARNERS (etcd 3.4 allows one)
 *   remove/promote of no member  KV_ERR_MEMBER_NOT_FOUND
 *   promote of a voter           KV_ERR_MEMBER_NOT_LEARNER
 *   more than KV_MEMBERS_MAX     KV_ERR_TOO_MANY_MEMBERS, detail " (limit 64)"
 *   a record that does not decode KV_ERR_MEMBER_BAD_URLS
 * Returns 0 (res->err 0 = applied), or < 0 on storage failure / -EBADMSG / -EINVAL (bad op). */
int kv_store_member_change(kv_store *s, kv_store_batch *b, int op, uint64_t id,
                           const uint8_t *record, size_t len, kv_result *res);

#endif
