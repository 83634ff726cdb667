/*
 * store: the MVCC key-value store on LMDB and the ordered apply function.
 *
 * Contract
 * - LMDB is the index (lessons 8, 9): there is no in-memory copy of the keyspace. Opening
 *   reads two meta records, whatever the data size. count_only and limit are answered inside
 *   the LMDB cursor walk in O(1) memory (only the returned key-values are materialised).
 *   `count` still visits every key of the range in the index (O(keys) time, as etcd), except
 *   over the whole keyspace (key "\0", range_end "\0") at the current revision, which comes
 *   from the live-key counter in O(1).
 * - Semantics follow etcd 3.4 (server/mvcc, etcdserver/apply.go, api/v3rpc/key.go): a fresh
 *   store is at revision 1; each write request that changes something takes one main
 *   revision, the ops of a txn share it with increasing sub revisions; a DeleteRange or txn
 *   that changes nothing does not take a revision. Errors carry etcd's gRPC code and message.
 *   etcd 3.4 details kept on purpose: header revision of a Range is the current revision,
 *   also for historical reads; with a sort order or a revision filter the limit is applied
 *   after fetching, sorting and filtering; sort_target != KEY with order NONE sorts
 *   ascending; txn compares (also nested ones) and request checks run against the state
 *   before the txn; nested txn responses carry an empty header; Compact keeps the latest
 *   revision <= rev of each live key and removes keys deleted at or before rev.
 * - Compaction, as etcd's: the Compact request is O(1) and atomic with its batch (it records
 *   the compacted revision and a progress record, meta "cmpct", see compact.c); reads at
 *   revisions below it fail at once. The records are removed by kv_store_compact_step() in
 *   bounded batches of keys, which the write path runs inside its batches, so writes
 *   interleave with a long compaction; progress is persisted and resumes after a restart.
 *   HashKV skips records a finished compaction would remove, so its result does not depend
 *   on the physical progress.
 * - The applied index is stored in the same LMDB write transaction as the state it
 *   describes (lesson 5). One write transaction and one fsync per batch (group commit).
 *   Each request is applied in an LMDB child transaction, so a request that fails (including
 *   MDB_MAP_FULL) leaves no trace while the batch goes on.
 * - Every record carries a CRC-32C (crc32c.h) verified on read; a record that fails its
 *   check is reported (-EBADMSG / DATA_LOSS), never returned. The on-disk format has a
 *   version; an unknown version is refused at open (lesson 7).
 *
 * Storage layout (named LMDB databases in one environment, files inside cfg.dir):
 *   "meta"  "format" -> crc32c(4, BE) | format version (4, BE)            (currently 1)
 *           "state"  -> crc32c(4, BE) | applied index (8) | revision (8) | compacted
 *                       revision (8) | live key count (8)                   (all BE)
 *   "rev"   main(8 BE) | sub(8 BE) -> crc32c(4, BE) | flags(1) | packed mvccpb.KeyValue
 *           flags bit 0 = tombstone (the KeyValue then holds key and mod_revision only).
 *           The CRC covers the 16-byte revision key, the flags and the payload.
 *   "kidx"  user key -> MDB_DUPSORT|MDB_DUPFIXED dups of main(8 BE) | sub(8 BE) | flags(1),
 *           one per revision of the key still stored. "Latest revision <= R" is
 *           MDB_LAST_DUP or MDB_GET_BOTH_RANGE + MDB_PREV_DUP; range walks MDB_NEXT_NODUP.
 *           An index entry is checked against the record it points to (key and revision
 *           must match), so a corrupted index cannot return a wrong key.
 *   "lease", "lease_keys": the lease table (lease/lease_table.h), same transactions.
 *
 * Limits: keys are limited to the LMDB maximum key size (511 bytes with the default LMDB
 * build): a longer key in a write gives INVALID_ARGUMENT "etcdserver: key is too long (kvd
 * limit: 511 bytes)"; reads and compares with longer keys simply match nothing. The map
 * size is cfg.quota_bytes; MDB_MAP_FULL fails the request with RESOURCE_EXHAUSTED
 * "etcdserver: mvcc: database space exceeded" (the NOSPACE alarm is raised by the caller).
 * A single request that dirties more pages than one LMDB transaction can hold
 * (MDB_TXN_FULL, ~512 MiB of pages) fails with RESOURCE_EXHAUSTED "kvd: mvcc: request
 * changes too many pages for one transaction". Both depend on the member's file layout:
 * members with different quotas could diverge, which the hash check (lesson 5) detects.
 * max_keys_per_lease: a put that would attach one key more gives FAILED_PRECONDITION
 * "etcdserver: too many keys attached to lease" (kvd-specific, etcd has no such limit).
 *
 * Threads: the write path (batch_begin/apply/commit/abort, compact_step,
 * set_lease_observer) runs on one thread (the apply thread). kv_store_range,
 * kv_store_get_status, kv_store_hash_kv(_request) and kv_store_compact_pending use their own
 * read transactions (MDB_NOTLS) and may run on any thread concurrently with it: they read
 * only fields fixed at open (env, dbi handles, maxkey), never the cached committed state.
 *
 * Return values: 0 or a negative errno (-ENOMEM, -EINVAL, -EIO, ...), or the module codes:
 *   -EBADMSG          a stored record failed its checksum or consistency check (corruption)
 *   -EPROTONOSUPPORT  the data directory has an on-disk format this build does not know
 *   -EBUSY            a batch is already open
 *   KV_STORE_ERR_COMPACTED, KV_STORE_ERR_FUTURE_REV (kv_store_hash_kv only)
 * Storage (LMDB) errors map to -EIO except MDB_MAP_FULL (-ENOSPC) where not a request error.
 */
#ifndef KV_MVCC_STORE_H
#define KV_MVCC_STORE_H

#include <lmdb.h>
#include <stddef.h>
#include <stdint.h>

#include "lease/lease_table.h"

#define KV_STORE_FORMAT_VERSION 1u
#define KV_STORE_ERR_COMPACTED (-10001)
#define KV_STORE_ERR_FUTURE_REV (-10002)

/* gRPC status codes used in kv_result.code (etcd's rpctypes). */
enum {
    KV_CODE_OK = 0,
    KV_CODE_INVALID_ARGUMENT = 3,
    KV_CODE_NOT_FOUND = 5,
    KV_CODE_RESOURCE_EXHAUSTED = 8,
    KV_CODE_FAILED_PRECONDITION = 9,
    KV_CODE_OUT_OF_RANGE = 11,
    KV_CODE_UNIMPLEMENTED = 12,
    KV_CODE_INTERNAL = 13,
    KV_CODE_DATA_LOSS = 15,
};

typedef struct kv_store kv_store;
typedef struct kv_store_batch kv_store_batch;

typedef struct kv_store_config {
    const char *dir;             /* data dir; created if missing (one level); LMDB files inside */
    size_t quota_bytes;          /* LMDB map size; default 2 GiB (--quota-backend-bytes) */
    uint32_t max_txn_ops;        /* default 128 (--max-txn-ops) */
    uint32_t max_keys_per_lease; /* 0 = unlimited */
} kv_store_config;

/* Fills the defaults above (dir = NULL: the caller sets it). */
void kv_store_config_default(kv_store_config *c);

typedef struct kv_header_info {
    uint64_t cluster_id, member_id, raft_term;
} kv_header_info;

typedef struct kv_result {
    int code;         /* gRPC status code; 0 = OK */
    char msg[160];    /* etcd's error message when code != 0 */
    uint8_t *resp;    /* packed etcdserverpb response (malloc'd, caller frees) when code == 0 */
    size_t resp_len;  /* (resp may be NULL when resp_len == 0 or skipped) */
    int64_t revision; /* store revision after the request */
    int skipped;      /* 1 when apply skipped an already-applied index */
} kv_result;

/* Opens or creates the store in cfg->dir. O(1) in the data size: reads the meta records
 * only. On success *out is owned by the caller (kv_store_close). cfg->dir is not retained.
 * LMDB's default reader table (126 concurrent read transactions) applies. */
int kv_store_open(kv_store **out, const kv_store_config *cfg);
/* Closes the store; an open batch is aborted. s may be NULL. */
void kv_store_close(kv_store *s);
/* The environment (owned by the store), for modules that keep their own databases. */
MDB_env *kv_store_env(kv_store *s);
/* The lease table inside this store (owned by the store; valid until kv_store_close). */
const kv_lease_table *kv_store_leases(kv_store *s);

/* Write path: one LMDB write txn and one sync per batch (group commit). At most one batch
 * is open at a time (-EBUSY otherwise). *out is owned by the store; it is released by
 * kv_store_batch_commit (whatever its result) or kv_store_batch_abort. */
int kv_store_batch_begin(kv_store *s, kv_store_batch **out);
/* Applies one packed kvdpb.InternalRequest at raft/log index `index` (strictly increasing).
 * index <= applied index (stored or earlier in this batch) -> skipped (res->skipped = 1,
 * code 0, no resp). Request-level errors return 0 with res->code/res->msg set (nothing of
 * the request is kept; the batch goes on and the index counts as applied). Returns < 0 only
 * on storage failure or corruption; the caller must then abort the batch. h may be NULL
 * (zero header). res is fully overwritten; on code 0 the caller frees res->resp.
 * Alarm requests are not handled here (code UNIMPLEMENTED): the caller applies them. */
int kv_store_apply(kv_store *s, kv_store_batch *b, uint64_t index, const uint8_t *req, size_t len,
                   const kv_header_info *h, kv_result *res);
/* Stores the applied index (the last index applied) in the same txn and commits (fsync).
 * b is released whatever the result; on failure nothing of the batch is kept. */
int kv_store_batch_commit(kv_store *s, kv_store_batch *b);
/* Drops everything applied in the batch and releases b. */
void kv_store_batch_abort(kv_store *s, kv_store_batch *b);

/* Reads (own read txn, sees the last committed batch): packed etcdserverpb.RangeRequest ->
 * packed RangeResponse in res (code 0), or res->code set and 0 returned for request errors.
 * Returns < 0 (and res->code DATA_LOSS for -EBADMSG) on storage failure or corruption. */
int kv_store_range(kv_store *s, const uint8_t *req, size_t len, const kv_header_info *h,
                   kv_result *res);

typedef struct kv_store_status {
    int64_t revision, compact_revision; /* compact_revision -1 = never compacted (as etcd) */
    uint64_t applied_index;
    int64_t db_size, db_size_in_use; /* bytes: mapped pages in use by the file; minus free pages */
    uint64_t keys;                   /* live keys, O(1) from a counter */
} kv_store_status;
/* Committed state (own read txn). db_size_in_use walks LMDB's free-page list. */
int kv_store_get_status(kv_store *s, kv_store_status *st);

/* Lease hooks: observers the lessor registers, called from apply (inside the batch, after
 * the request's changes are in the batch; if the batch is later aborted the caller must
 * resynchronise the lessor from the lease table). The struct is copied; NULL clears it.
 * granted: remaining_ttl is 0 (no checkpoint yet); ttl is the TTL as proposed (clamping to a
 * minimum TTL is the proposer's job). Failed requests call nothing. */
typedef struct kv_store_lease_observer {
    void *arg;
    void (*granted)(void *arg, int64_t id, int64_t ttl, int64_t remaining_ttl);
    void (*revoked)(void *arg, int64_t id);
    void (*checkpointed)(void *arg, int64_t id, int64_t remaining_ttl);
} kv_store_lease_observer;
void kv_store_set_lease_observer(kv_store *s, const kv_store_lease_observer *obs);

/* CRC-32C (Castagnoli) of all MVCC records with main revision <= rev (0 = current), in
 * revision order: for each record, its 16-byte revision key followed by its stored value
 * (checksum, flags, packed KeyValue). Compaction removes records deterministically, so
 * members at the same revision and compaction point agree (lesson 5). *compact_rev gets the
 * compacted revision (-1 = none). KV_STORE_ERR_COMPACTED if 0 < rev <= compacted (as etcd 3.4),
 * KV_STORE_ERR_FUTURE_REV if rev > current, -EBADMSG if a record fails its checksum. */
int kv_store_hash_kv(kv_store *s, int64_t rev, uint32_t *hash, int64_t *compact_rev);

/* ---- additions ---- */

/* Operation counters (tests, metrics). Read on the apply thread. */
typedef struct kv_store_counters {
    uint64_t commits;         /* batch commits (each one LMDB commit = one fsync) */
    uint64_t applies;         /* requests applied (not skipped) */
    uint64_t open_meta_reads; /* LMDB records read by kv_store_open (constant: 2) */
} kv_store_counters;
void kv_store_get_counters(kv_store *s, kv_store_counters *out);

/* Largest key length accepted by writes (LMDB's max key size). */
size_t kv_store_max_key_size(kv_store *s);

/* Batched physical compaction (apply thread, inside an open batch): removes the compacted
 * revisions of up to max_keys keys (0 = all) in a child transaction, so a failure leaves the
 * batch intact (the error is returned; the step is retried with the next batch). Returns 1
 * if more remains, 0 if no compaction is pending any more, < 0 on error. keys/removed (may
 * be NULL) are incremented by the keys visited and records removed. */
int kv_store_compact_step(kv_store *s, kv_store_batch *b, uint32_t max_keys, uint64_t *keys,
                          uint64_t *removed);
/* Committed state (own read txn, any thread): 1 if a physical compaction is pending (its
 * revision in *rev, may be NULL), 0 if not, < 0 on error. */
int kv_store_compact_pending(kv_store *s, int64_t *rev);

/* HashKV as a request (own read txn, any thread; the signature of kv_store_range): packed
 * etcdserverpb.HashKVRequest -> packed HashKVResponse (header revision = current revision),
 * etcd's errors for compacted and future revisions; < 0 on storage failure/corruption. */
int kv_store_hash_kv_request(kv_store *s, const uint8_t *req, size_t len, const kv_header_info *h,
                             kv_result *res);

#endif
