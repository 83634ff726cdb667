/*
 * store: the MVCC key-value store on LMDB. The ordered apply function and the request-level
 * reads that run on it (kv_store_apply, kv_store_range, kv_store_hash_kv_request) are the
 * applier's: apply/apply.h.
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
 *   that changes nothing does not take a revision. Request errors are etcd's errors as values
 *   (common/etcd_errors.h, in apply/apply.h kv_result.err); the store names no gRPC status.
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
 *   check is reported (-EBADMSG; a request gets KV_ERR_RECORD_CHECKSUM), never returned. The
 * on-disk format has a version; an unknown version is refused at open (lesson 7).
 *
 * Storage layout (named LMDB databases in one environment, files inside cfg.dir):
 *   "meta"  "format" -> crc32c(4, BE) | format version (4, BE)                     (1 or 2)
 *           1: every key is at most 511 bytes (no "lkidx"/"lkey"/"lease_lkeys" records).
 *           2: the data dir holds (or held) a longer key. A store is created at 1 and moves
 *           to 2 in the write that stores its first long key (so every member of a cluster
 *           changes at the same log entry and their files keep the same bytes); this build
 *           opens both, builds that know only format 1 refuse a format-2 data dir or snapshot.
 *           "state"  -> crc32c(4, BE) | applied index (8) | revision (8) | compacted
 *                       revision (8) | live key count (8)                   (all BE)
 *           "identity" -> member and cluster ids, name (kv_store_identity_check below)
 *   "rev"   main(8 BE) | sub(8 BE) -> crc32c(4, BE) | flags(1) | packed mvccpb.KeyValue
 *           flags bit 0 = tombstone (the KeyValue then holds key and mod_revision only).
 *           The CRC covers the 16-byte revision key, the flags and the payload.
 *   "kidx"  user key -> MDB_DUPSORT|MDB_DUPFIXED dups of main(8 BE) | sub(8 BE) | flags(1),
 *           one per revision of the key still stored. "Latest revision <= R" is
 *           MDB_LAST_DUP or MDB_GET_BOTH_RANGE + MDB_PREV_DUP; range walks MDB_NEXT_NODUP.
 *           An index entry is checked against the record it points to (key and revision
 *           must match), so a corrupted index cannot return a wrong key.
 *   "lease", "lease_keys": the lease table (lease/lease_table.h), same transactions.
 * Long keys (format 2, longkey.c): "kidx" holds keys of at most 511 bytes (KV_SHORT_KEY_MAX)
 * exactly as in format 1. A longer key K has the handle H = K[0..448) | SHA-256(K) (480
 * bytes) and:
 *   "lkidx" H -> the same dups as "kidx" (main | sub | flags), one per stored revision.
 *   "lkey"  H -> crc32c(4, BE, over H | K) | K. Removed when compaction removes the last dup.
 *   "lease_lkeys" lease id(8 BE) | SHA-256(K) -> crc32c(4, BE, over the 40-byte key | K) | K:
 *           the lease attachment of a long key ("lease_keys" keeps the short ones).
 * Walks merge "kidx" and "lkidx" in key order (memcmp, shorter first); the long keys sharing
 * a 448-byte prefix (one bucket) are read and sorted when a walk reaches that prefix, so a
 * walk's memory grows with the largest bucket it touches. The "rev" records are unchanged:
 * HashKV is the same function of the logical keyspace whatever the key lengths.
 *   "alarm" member id(8 BE) | alarm type(4 BE) -> crc32c of the 12-byte key (4, BE).
 *           One record per active alarm (etcd's alarm bucket); at most 64 (KV_MAX_ALARMS).
 *   "members", "members_removed", "members_staged": the membership table and the member add
 *           records waiting for their configuration entry (mvcc/members.h), same transactions.
 *
 * Limits: keys of any length (as etcd, the request size limit bounds them). The quota
 * (cfg.quota_bytes) is checked by the API before proposing (api/quota.h, as etcd's
 * quota.go); the LMDB map size is quota + headroom (kv_store_map_size: a quarter of the quota,
 * at least 16 MiB, at most 1 GiB; if data.mdb is already larger than the quota, the same rule
 * applied to its size) so that deletes, compaction, lease revokes, alarms and defragment
 * still fit once the quota is reached. Within one batch (requests admitted before the
 * alarm), a growing request that would take the store past the quota plus half the headroom
 * (estimated: committed size + 2 x the batch's growing request bytes) is refused with the
 * no-space error below and raises NOSPACE (kvd-specific: etcd's bbolt has no hard limit).
 * MDB_MAP_FULL (past the headroom) fails the request with KV_ERR_NO_SPACE ("etcdserver: mvcc:
 * database space exceeded") and asks for the NOSPACE alarm (kv_store_take_alarms). A single request
 * that dirties more pages than one LMDB transaction can hold (MDB_TXN_FULL, ~512 MiB of pages)
 * fails with KV_ERR_TXN_TOO_MANY_PAGES ("kvd: mvcc: request changes too many pages for one
 * transaction"). Both depend on the member's file layout: members with different quotas could
 * diverge, which the hash check (lesson 5) detects. max_keys_per_lease: a put that would attach one
 * key more gives KV_ERR_TOO_MANY_LEASE_KEYS ("etcdserver: too many keys attached to lease",
 * kvd-specific, etcd has no such limit); it is only the default of a request's limit
 * (kv_ks_begin): the applier replaces it with the proposer's, which travels in the entry
 * (apply/internal_req.h KV_IREQ_LEASE_KEY_LIMIT), so members whose flags differ agree.
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

#define KV_STORE_FORMAT_VERSION 2u /* newest on-disk format this build reads and writes */
#define KV_STORE_FORMAT_BASE 1u    /* oldest one it reads; a new store starts there */
#define KV_STORE_ERR_COMPACTED (-10001)
#define KV_STORE_ERR_FUTURE_REV (-10002)

typedef struct kv_store kv_store;
typedef struct kv_store_batch kv_store_batch;

typedef struct kv_store_config {
    const char *dir;             /* data dir; created if missing (one level); LMDB files inside */
    size_t quota_bytes;          /* LMDB map size; default 2 GiB (--quota-backend-bytes) */
    uint32_t max_keys_per_lease; /* 0 = unlimited */
    int unsafe_no_fsync;         /* 1: LMDB MDB_NOSYNC, commits not durable (--unsafe-no-fsync) */
} kv_store_config;

/* Fills the defaults above (dir = NULL: the caller sets it). */
void kv_store_config_default(kv_store_config *c);

typedef struct kv_header_info {
    uint64_t cluster_id, member_id, raft_term;
} kv_header_info;

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
 * is open at a time: a begin on another thread waits until the open batch is committed or
 * aborted (the node's pipelined readies, node_ready.c), a second begin on the thread that holds
 * it is -EBUSY. The batch belongs to the thread that began it: that thread commits or aborts
 * it. *out is owned by the store; it is released by kv_store_batch_commit (whatever its
 * result) or kv_store_batch_abort. */
int kv_store_batch_begin(kv_store *s, kv_store_batch **out);
/* Stores the applied index (the last index applied) in the same txn and commits (fsync).
 * b is released whatever the result; on failure nothing of the batch is kept. */
int kv_store_batch_commit(kv_store *s, kv_store_batch *b);
/* The batch's LMDB write transaction, for modules that keep their own databases in the same
 * environment and commit with the batch (the raft log: server/raftlog/raftlog.h). Valid until
 * the batch commits or aborts; apply thread only. */
MDB_txn *kv_store_batch_txn(kv_store_batch *b);
/* Marks log index `index` applied without a request (a leader's empty entry, a configuration
 * change): the applied index moves, nothing else. index <= applied -> no-op. */
int kv_store_apply_noop(kv_store *s, kv_store_batch *b, uint64_t index);
/* The applied index as of the batch (stored, or moved by the batch so far). */
uint64_t kv_store_batch_applied(const kv_store_batch *b);
/* Installing a snapshot from the raft leader (mvcc/install.c): the received LMDB data file
 * (a copy of the leader's environment: keyspace, leases, alarms, members, meta state) becomes
 * this store's data.mdb. No transaction of the store grows with the state (no MDB_TXN_FULL
 * whatever its size). Steps, as Defragment (no batch may be open and none may start until the
 * swap):
 *  - kv_store_install_begin (worker): opens the file at path, checks its format, writes this
 *    member's "identity" record into it and leaves ONE write txn of that file open
 *    (kv_store_install_txn) for the caller's per-member records (the raft log:
 *    kv_raftlog_install_into). -EBADMSG: not a store file; -EPROTONOSUPPORT: other format.
 *  - kv_store_install_commit (worker): commits that txn (synced), fsyncs the file; frees in
 *    whatever the result. kv_store_install_abort drops it instead (in may be NULL).
 *  - kv_store_install_publish (worker): renames the file over <dir>/data.mdb (atomic: the
 *    commit point of the install; directory fsync'd). *old_fd keeps the old file's blocks
 *    until the caller closes it (off the loop: freeing them is slow). From here on
 *    kv_store_install_swap MUST run before any read of the new state or any write.
 *  - kv_store_install_swap (loop, as kv_store_defrag_swap): reopens the environment on the
 *    new file. A failed reopen is fatal (a restart opens the new file).
 * A crash before publish leaves the old state (the received file is garbage in snap/), after
 * it the new one: nothing to finish at restart. */
typedef struct kv_store_install kv_store_install;
int kv_store_install_begin(kv_store *s, const char *path, kv_store_install **out);
MDB_txn *kv_store_install_txn(kv_store_install *in);
int kv_store_install_commit(kv_store *s, kv_store_install *in);
void kv_store_install_abort(kv_store_install *in);
int kv_store_install_publish(kv_store *s, const char *path, int *old_fd);
int kv_store_install_swap(kv_store *s);
/* Cheap check of a received snapshot file before raft sees it (O(1): the meta pages and two
 * records): 0 if it is a kvd data file of this format, -EBADMSG (not one), -EPROTONOSUPPORT
 * (another format) or another negative errno. Any thread. */
int kv_store_snapshot_check(const char *path);
/* mdb_env_copyfd2(env, fd, flags) under the store's swap lock (so an install or defragment
 * swap waits for it). Any thread. */
int kv_store_copy_fd(kv_store *s, int fd, unsigned flags);
/* 1 when less than `bytes` are available to kvd on the data dir's file system (statvfs). */
int kv_store_disk_free_below(kv_store *s, uint64_t bytes);
/* kv_store_batch_commit without syncing LMDB's meta page (MDB_NOMETASYNC for this commit):
 * one fdatasync instead of two. Integrity holds after a power loss (LMDB's guarantee), but the
 * commit itself may be undone by one: use it only for what is derivable from durable data
 * (the raft driver: applying entries already durable in the log). */
int kv_store_batch_commit_nometasync(kv_store *s, kv_store_batch *b);
/* How many flushes one commit issues on this store (the fsync metric counts them): 0 when it
 * was opened with unsafe_no_fsync (MDB_NOSYNC: no commit flushes), else 1 for
 * kv_store_batch_commit_nometasync (the data pages) and 2 for kv_store_batch_commit (the data
 * pages, then the meta page). Any thread. */
int kv_store_commit_flushes(const kv_store *s, int nometasync);
/* Quiet apply: the following kv_store_apply calls of this batch leave res->resp NULL (the
 * result code, message and revision are still set). The raft driver applies other members'
 * entries quietly: nobody here waits for their responses. Reset at batch_begin. */
void kv_store_batch_set_quiet(kv_store_batch *b, int quiet);
/* Shared-transaction apply (the raft driver in WAL mode; reset at batch_begin): the following
 * kv_store_apply calls write straight into the batch's transaction instead of an LMDB child
 * transaction per request. A child costs LMDB two allocations of 3 MiB (its dirty list and
 * free-page list): about 1 us with glibc's malloc, 3 ms under ASan, where that was most of a
 * busy member's CPU. Without a child, a request that fails after it may have written cannot
 * be undone alone: kv_store_apply returns -EAGAIN and the batch is spoilt (every later apply,
 * compaction step and commit of it: -EAGAIN). The caller aborts it and applies the same
 * entries again in a new batch without this mode, where the request fails alone. A request
 * refused before it writes (an alarm, the quota, auth) fails alone in both modes. */
void kv_store_batch_set_shared(kv_store_batch *b, int shared);
/* In a replicated cluster the apply must give the same result on every member, whatever its
 * file layout: with deterministic set, the batch growth guard (the headroom check above) does
 * not refuse requests, and MDB_MAP_FULL / MDB_TXN_FULL during an apply are storage failures
 * (kv_store_apply returns < 0: the member stops) instead of request errors. The quota is
 * checked before proposing (api/quota.c). Set once, before the first batch. */
void kv_store_set_deterministic(kv_store *s, int on);
/* Drops everything applied in the batch and releases b. */
void kv_store_batch_abort(kv_store *s, kv_store_batch *b);

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

/* Calls fn for every key attached to lease id, in key order, from its own read transaction
 * (any thread; waits for a Defragment swap like kv_store_range). key is valid only during
 * the call; a non-zero return of fn stops the walk and is returned. 0 if the lease has no
 * keys (or does not exist), < 0 on storage failure. */
int kv_store_lease_keys(kv_store *s, int64_t id,
                        int (*fn)(void *arg, const uint8_t *key, size_t klen), void *arg);

/* CRC-32C (Castagnoli) of all MVCC records with main revision <= rev (0 = current), in
 * revision order: for each record, its 16-byte revision key followed by its stored value
 * (checksum, flags, packed KeyValue). Compaction removes records deterministically, so
 * members at the same revision and compaction point agree (lesson 5). *compact_rev gets the
 * compacted revision (-1 = none). rev 0 = current; a negative rev hashes no revision (etcd
 * 3.4 HashByRev). KV_STORE_ERR_COMPACTED if 0 < rev <= compacted (as etcd 3.4),
 * KV_STORE_ERR_FUTURE_REV if rev > current, -EBADMSG if a record fails its checksum. */
int kv_store_hash_kv(kv_store *s, int64_t rev, uint32_t *hash, int64_t *compact_rev);
/* kv_store_hash_kv that also gives the current revision (*cur) of the hashed state. */
int kv_store_hash_kv_cur(kv_store *s, int64_t rev, uint32_t *hash, int64_t *compact_rev,
                         int64_t *cur);

/* ---- additions ---- */

/* Operation counters (tests, metrics). Read on the apply thread. */
typedef struct kv_store_counters {
    uint64_t commits;         /* batch commits (each one LMDB commit = one fsync) */
    uint64_t applies;         /* requests applied (not skipped) */
    uint64_t open_meta_reads; /* LMDB records read by kv_store_open (constant: 2) */
} kv_store_counters;
void kv_store_get_counters(kv_store *s, kv_store_counters *out);

/* etcd's mvcc operation counters (etcd_mvcc_{range,put,delete,txn}_total, etcd 3.4
 * mvcc/metrics_txn.go): Range, Put and DeleteRange operations, each counted once however
 * many keys it touches, and txns of more than one operation. Writes count when their entry
 * is applied (on every member, requests refused by their checks excluded); ranges count on
 * the member that served them (a Range op of an applied txn on every member). Any thread. */
typedef struct kv_store_ops {
    uint64_t ranges, puts, deletes, txns;
} kv_store_ops;
/* Adds one transaction's operations (a txn when their sum is over one). */
void kv_store_count_ops(kv_store *s, unsigned ranges, unsigned puts, unsigned deletes);
void kv_store_get_ops(kv_store *s, kv_store_ops *out);

/* Largest key length accepted by writes: SIZE_MAX (any; long keys: see "Long keys"). */
size_t kv_store_max_key_size(kv_store *s);

/* Identity: the member and cluster ids (and member name) the data dir was
 * created for, stored at the first start in "meta":
 *   "identity" -> crc32c(4, BE) | member id (8, BE) | cluster id (8, BE) | name length (1) |
 *                 name (< 64 bytes). The CRC covers everything after it.
 * Compares with *want: returns 0 when the stored ids equal want's (the name is informative
 * only), 1 when there was no record (then *want is stored and committed if store_if_missing;
 * kvd stores it only once it is serving, so a first start that fails, e.g. on a port already
 * in use, does not pin ids computed from flags that are about to change), -EEXIST when
 * the ids differ (the flags contradict the data: the caller refuses to start), -EBADMSG when
 * the record is corrupt. *have gets the stored identity (0, 1, -EEXIST). Apply thread, no
 * batch open (-EBUSY otherwise); kvd calls it once at startup. */
typedef struct kv_store_identity {
    uint64_t member_id, cluster_id;
    char name[64];
} kv_store_identity;
int kv_store_identity_check(kv_store *s, const kv_store_identity *want, kv_store_identity *have,
                            int store_if_missing);

/* ---- alarms, quota and defragment (alarm.c, store.c) ---- */

/* etcdserverpb.AlarmType values. */
enum { KV_ALARM_NONE = 0, KV_ALARM_NOSPACE = 1, KV_ALARM_CORRUPT = 2 };
const char *kv_alarm_name(int type);
/* Mask (1u << KV_ALARM_*) of the alarms active on any member (committed), plus CORRUPT once
 * this process saw a corrupt record (until a DEACTIVATE CORRUPT commits). Any thread. */
unsigned kv_store_alarms(kv_store *s);
/* Alarms the store detected (MDB_MAP_FULL: NOSPACE; a bad checksum: CORRUPT) since the last
 * call, to be proposed as ACTIVATE requests by the caller. Clears them. Any thread. */
unsigned kv_store_take_alarms(kv_store *s);
/* Calls fn for each committed alarm (member id, type), in (member, type) order; a non-zero
 * return of fn stops the walk and is returned. Own read txn, any thread. */
int kv_store_alarm_list(kv_store *s, int (*fn)(void *arg, uint64_t member, int type), void *arg);
/* Asks for an alarm from outside the store (e.g. the node on a disk-full commit). */
void kv_store_request_alarm(kv_store *s, int type);
/* Backend size as etcd's backend.Size(): (last page + 1) * page size of the committed data
 * file. O(1), any thread. */
int64_t kv_store_db_size(kv_store *s);
/* The part of it in use: (last page + 1 - pages on LMDB's free list) * page size, as
 * etcd_mvcc_db_total_size_in_use_in_bytes. Cached per committed transaction (a call after no
 * new commit costs no scan; otherwise one read txn that walks the free list's records). Falls
 * back to kv_store_db_size on an LMDB error. Any thread. */
int64_t kv_store_db_size_in_use(kv_store *s);
size_t kv_store_quota(kv_store *s);
/* LMDB map size for a quota: quota + headroom (see above). */
size_t kv_store_map_size(size_t quota);

/* Defragment: a compacting copy of the environment (mdb_env_copy2 MDB_CP_COMPACT) into
 * <dir>/defrag.tmp/data.mdb, fsync'd, renamed over data.mdb (atomic; directory fsync'd), then
 * the environment is reopened on the new file. Two steps so that the copy runs off the loop:
 *  - kv_store_defrag_copy: no batch may be open and none may start until the swap (the node
 *    runs it as an exclusive item); reads may run concurrently (they read the old inode).
 *    After it returned 0, kv_store_defrag_swap MUST run before any write (writes to the old
 *    inode would be lost).
 *  - kv_store_defrag_swap: on the thread that owns every direct user of kv_store_env() (the
 *    loop): no read transaction may be open on that thread. Readers on other threads that go
 *    through kv_store_range/get_status/hash_kv wait on a rwlock for the swap.
 * A failed copy leaves the store untouched. A failed reopen after the rename is fatal (the
 * new file is complete and durable: a restart opens it). */
typedef struct kv_store_defrag_stats {
    int64_t file_before, file_after; /* data.mdb sizes in bytes (stat) */
    uint64_t copy_us, swap_us;       /* copy (writes paused) and swap (all access paused) */
    int old_fd;                      /* keeps the old file alive until _release */
} kv_store_defrag_stats;
int kv_store_defrag_copy(kv_store *s, kv_store_defrag_stats *st);
int kv_store_defrag_swap(kv_store *s, kv_store_defrag_stats *st);
/* Startup, before kv_store_open and under the data dir lock (no defragment can be running):
 * removes what a defragment interrupted by a crash left, <dir>/defrag.tmp and the files in it
 * (a partial compacted copy, as large as the data). Returns the number of bytes freed (0 when
 * there was nothing) or a negative errno. */
int64_t kv_store_defrag_cleanup(const char *dir);
/* Drops the last reference to the old file (freeing its blocks can take hundreds of ms for a
 * large file: call it off the loop). Any thread, after the swap; idempotent. */
void kv_store_defrag_release(kv_store_defrag_stats *st);

/* Batched physical compaction (apply thread, inside an open batch): removes the compacted
 * revisions of at most max_keys keys and at most max_revs records, for about max_us
 * microseconds at most once a record went (0 = no bound; a key with more compacted records
 * than a step may remove is finished by the next steps) in a child
 * transaction, so a failure leaves the batch intact (the error is returned; the step is
 * retried with the next batch). The end state does not depend on the bounds. Returns 1 if
 * more remains, 0 if no compaction is pending any more, < 0 on error. keys/removed (may be
 * NULL) are incremented by the keys visited and records removed. */
int kv_store_compact_step(kv_store *s, kv_store_batch *b, uint32_t max_keys, uint32_t max_revs,
                          uint32_t max_us, uint64_t *keys, uint64_t *removed);
/* Committed state (own read txn, any thread): 1 if a physical compaction is pending (its
 * revision in *rev, may be NULL), 0 if not, < 0 on error. */
int kv_store_compact_pending(kv_store *s, int64_t *rev);

#endif
