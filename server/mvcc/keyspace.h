/*
 * keyspace: the write operations of the MVCC store in plain C (the store speaks no gRPC). The
 * applier (server/apply/) decodes a log entry, runs these operations and
 * builds the etcdserverpb response; nothing here knows a request or response message.
 *
 * A request runs in one kv_ks: an LMDB child transaction of the open batch (store.h), or the
 * batch's own transaction when the batch is shared (kv_store_batch_set_shared), plus the
 * request's copy of the batch state (revision, compaction point, key count, alarm mask).
 * kv_ks_commit keeps everything the request changed; kv_ks_abort drops it (in a shared batch
 * it cannot drop what the request wrote: the batch is spoilt, see kv_ks_mark_writing). All writes
 * of one request share one main revision (begin revision + 1) with increasing sub revisions; a
 * request that wrote nothing keeps the revision (etcd: a DeleteRange or Txn that changes
 * nothing takes no revision).
 *
 * Return values: 0 or a negative errno. Besides storage errors (-EIO, -ENOMEM, -ENOSPC for
 * MDB_MAP_FULL, -E2BIG for MDB_TXN_FULL, -EBADMSG for a record failing its checksum), each
 * operation documents its request-level results; they change nothing.
 * Threads: the apply thread, with the batch open (as kv_store_batch_*). At most one kv_ks per
 * batch at a time (it lives in the batch).
 */
#ifndef KV_MVCC_KEYSPACE_H
#define KV_MVCC_KEYSPACE_H

#include <stddef.h>
#include <stdint.h>

#include "mvcc/store.h"

typedef struct kv_ks kv_ks;

/* A key-value as stored (mvccpb.KeyValue fields). The pointers are valid only during the
 * callback that receives it, or until free() for kv_ks_get's copy. */
typedef struct kv_ks_kv {
    const uint8_t *key;
    size_t key_len;
    const uint8_t *value;
    size_t value_len;
    int64_t create_revision, mod_revision, version, lease;
} kv_ks_kv;
/* A non-zero return stops the walk and is returned. */
typedef int (*kv_ks_kv_fn)(void *arg, const kv_ks_kv *kv);

/* ---- batch state, for the applier ---- */
typedef struct kv_ks_batch_info {
    uint64_t applied;  /* applied index as of the batch */
    int64_t rev;       /* store revision as of the batch */
    unsigned alarms;   /* alarm mask (1u << KV_ALARM_*) as of the batch */
    int quiet;         /* kv_store_batch_set_quiet */
    int deterministic; /* kv_store_set_deterministic */
    size_t max_key;    /* longest key a write may have */
    int growth_over;   /* 1: the batch's growing requests passed quota + headroom / 2
                        * (never with deterministic set; see store.h) */
} kv_ks_batch_info;
/* -EINVAL if b is not s's open batch, -EAGAIN if it is spoilt (kv_ks_abort). */
int kv_ks_batch_info_get(kv_store *s, kv_store_batch *b, kv_ks_batch_info *out);
/* Marks index applied in the batch (the entry's result is final); counted as an apply
 * (kv_store_counters.applies) when counted is 1. */
void kv_ks_batch_mark_applied(kv_store_batch *b, uint64_t index, int counted);
/* Adds one request's operations to the batch's counts (kv_store_count_ops at its commit). */
void kv_ks_batch_count_ops(kv_store_batch *b, unsigned ranges, unsigned puts, unsigned deletes);

/* ---- one request ---- */
/* Opens the request's child transaction (none in a shared batch). *out belongs to the batch;
 * it ends with exactly one kv_ks_commit or kv_ks_abort. -EBUSY if one is already open, -EAGAIN
 * if the batch is spoilt. */
int kv_ks_begin(kv_store *s, kv_store_batch *b, kv_ks **out);
/* Commits the child transaction into the batch: the batch takes the request's revision,
 * compaction point, key count and alarm mask, adds `grown` bytes to its growth estimate, and
 * the lease observer (kv_store_set_lease_observer) hears the request's lease events. On
 * failure nothing of the request is kept. ks is released whatever the result. */
int kv_ks_commit(kv_ks *ks, int64_t grown);
/* From here on the request may write (the applier calls it before running the operations;
 * the checks before it only read). */
void kv_ks_mark_writing(kv_ks *ks);
/* Drops the request. ks may be NULL. In a shared batch, after kv_ks_mark_writing, the writes
 * stay in the batch's transaction: the batch is spoilt (store.h kv_store_batch_set_shared). */
void kv_ks_abort(kv_ks *ks);

/* The limit of keys per lease for this request's puts: the proposer's (InternalRequest
 * lease_key_limit; max 0 = unlimited), which replaces the store's cfg.max_keys_per_lease that
 * kv_ks_begin starts with, so that members whose flags differ apply an entry alike. */
void kv_ks_set_max_keys_per_lease(kv_ks *ks, uint32_t max);

/* Revisions as seen by the request: rev = the revision before it; read_rev = what its reads
 * see (rev, or rev + 1 once it wrote: etcd storeTxnWrite.Range); end_rev = its revision after
 * it ends (= read_rev). compact_rev: -1 = never compacted. */
int64_t kv_ks_rev(const kv_ks *ks);
int64_t kv_ks_read_rev(const kv_ks *ks);
int64_t kv_ks_end_rev(const kv_ks *ks);
int64_t kv_ks_compact_rev(const kv_ks *ks);
unsigned kv_ks_alarms(const kv_ks *ks);

/* ---- keys ---- */
/* The live key-value of key at read_rev: *out malloc'd (one block, free()), or -ENOENT.
 * -ENODATA: the index points to a record that is missing (a storage failure). */
int kv_ks_get(kv_ks *ks, const uint8_t *key, size_t klen, kv_ks_kv **out);
/* Calls fn for each live key-value in [key, end) at read_rev (end as etcd: len 0 = key only,
 * "\0" = every key >= key), in key order. *n (may be NULL) gets the number visited. */
int kv_ks_walk(kv_ks *ks, const uint8_t *key, size_t klen, const uint8_t *end, size_t elen,
               kv_ks_kv_fn fn, void *arg, size_t *n);
/* Puts key = val with lease (0 = none; the caller checked that it exists, kv_ks_lease_get).
 * -EDQUOT: the lease already has cfg.max_keys_per_lease keys. */
int kv_ks_put(kv_ks *ks, const uint8_t *key, size_t klen, const uint8_t *val, size_t vlen,
              int64_t lease);
/* Deletes every live key in [key, end); *deleted gets the count; prev (may be NULL) is called
 * with each deleted key-value, in key order. */
int kv_ks_delete_range(kv_ks *ks, const uint8_t *key, size_t klen, const uint8_t *end, size_t elen,
                       int64_t *deleted, kv_ks_kv_fn prev, void *arg);
/* Compacts at rev (O(1): the records go in bounded batches, kv_store_compact_step).
 * KV_STORE_ERR_COMPACTED if rev <= the compaction point, KV_STORE_ERR_FUTURE_REV if
 * rev > the current revision. */
int kv_ks_compact(kv_ks *ks, int64_t rev);

/* ---- leases ---- */
/* 0 (*ttl, may be NULL, gets the granted TTL) or -ENOENT. */
int kv_ks_lease_get(kv_ks *ks, int64_t id, int64_t *ttl);
/* -EINVAL id 0, -ERANGE ttl above etcd's MaxLeaseTTL, -EEXIST lease exists. */
int kv_ks_lease_grant(kv_ks *ks, int64_t id, int64_t ttl);
/* Deletes the lease's keys (one revision for all, as etcd) and the lease. -ENOENT. */
int kv_ks_lease_revoke(kv_ks *ks, int64_t id);
/* Records the remaining TTL. -ENOENT (unknown lease: etcd ignores it). */
int kv_ks_lease_checkpoint(kv_ks *ks, int64_t id, int64_t remaining_ttl);
/* Calls fn for every key attached to lease id as the request sees it, in key order (key valid
 * during the call only; fn must not write). A non-zero return of fn stops the walk and is
 * returned; 0 if the lease has no keys or does not exist. */
int kv_ks_lease_keys(kv_ks *ks, int64_t id, int (*fn)(void *arg, const uint8_t *key, size_t klen),
                     void *arg);

/* ---- alarms (etcd v3alarm) ---- */
/* Stores alarm (member, type); 0 also when already active. -EINVAL unknown type (not
 * NOSPACE/CORRUPT), -EMLINK: KV_MAX_ALARMS (64) alarms stored. */
int kv_ks_alarm_activate(kv_ks *ks, uint64_t member, int type);
/* Removes alarm (member, type). -ENOENT if it was not active. */
int kv_ks_alarm_deactivate(kv_ks *ks, uint64_t member, int type);
/* Calls fn for each stored alarm in (member, type) order. */
int kv_ks_alarm_walk(kv_ks *ks, int (*fn)(void *arg, uint64_t member, int type), void *arg);
#define KV_KS_MAX_ALARMS 64

/* ---- members (mvcc/members.h) ---- */
/* etcd publish: sets name and client URLs of member id. A removed id is ignored (0, as etcd's
 * UpdateAttributes). -EINVAL: name or URLs over the limits; -ENOENT: not a member. */
int kv_ks_member_publish(kv_ks *ks, uint64_t id, const char *name, char *const *client_urls,
                         size_t n_client_urls, char *const *peer_urls, size_t n_peer_urls);
/* MemberUpdate: sets the peer URLs of member id. -EINVAL: URLs over the limits; -ENOENT: not
 * a member (or removed); -EADDRINUSE: another member has one of the URLs. */
int kv_ks_member_update(kv_ks *ks, uint64_t id, char *const *peer_urls, size_t n_peer_urls);
/* Calls fn with each member record (packed kvdpb.Member, the storage format) in id order. */
int kv_ks_member_walk(kv_ks *ks, int (*fn)(void *arg, const uint8_t *rec, size_t len), void *arg);

/* ---- corruption ---- */
/* A record failed its checksum while doing `what`: log it, refuse to serve (CORRUPT) and ask
 * for the CORRUPT alarm. Any thread. */
void kv_store_note_corrupt(kv_store *s, const char *what);
/* Writes prefix "key" (non-printable bytes as \xNN, truncated to cap) into out. */
void kv_describe_key(char *out, size_t cap, const char *prefix, const uint8_t *key, size_t len);

#endif
