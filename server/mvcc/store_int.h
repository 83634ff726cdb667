/*
 * store_int: private structures and helpers shared by the files of the MVCC store.
 * Not for use outside server/mvcc/. Layout and contracts are described in store.h.
 */
#ifndef KV_MVCC_STORE_INT_H
#define KV_MVCC_STORE_INT_H

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "common/byteorder.h"
#include "kv.pb-c.h"
#include "mvcc/keyspace.h"
#include "mvcc/range.h"
#include "mvcc/store.h"
#include "base/lmdb_valcheck.h"

#define KV_REVKEY_LEN 16
#define KV_DUP_LEN 17
#define KV_DUP_TOMBSTONE 0x01u
#define KV_MAX_LEASE_TTL 9000000000LL /* etcd's MaxLeaseTTL */

typedef struct kv_meta {
    uint64_t applied;
    int64_t rev;
    int64_t compact_rev; /* -1 = never compacted */
    uint64_t keys;
} kv_meta;

struct kv_store_batch {
    MDB_txn *txn;
    kv_meta meta;
    bool open;
    unsigned alarms;   /* alarm mask as of this batch (alarm.c) */
    int64_t base_size; /* committed backend size when the batch began */
    int64_t grown;     /* estimated bytes added by the batch's growing requests */
    bool quiet;        /* kv_store_batch_set_quiet: apply without building responses */
    bool ks_open;      /* a request's kv_ks is open (keyspace.c) */
    bool shared;       /* kv_store_batch_set_shared: requests write in txn itself */
    bool spoilt;       /* shared: a request failed after it may have written (-EAGAIN) */
    uint64_t applies;  /* counted applies, added to kv_store.counters at the commit */
    uint64_t ops[4];   /* ranges, puts, deletes, txns of its requests: kv_store_ops at the
                        * commit (an aborted batch counts nothing) */
};

struct kv_store {
    MDB_env *env;
    MDB_dbi meta, rev, kidx;
    kv_lease_table leases;
    kv_store_config cfg;
    size_t maxkey;
    kv_meta committed;
    kv_store_lease_observer obs;
    kv_store_batch batch;
    kv_store_counters counters;
    _Atomic uint64_t ops_ranges, ops_puts, ops_deletes, ops_txns; /* kv_store_count_ops */
    kv_mdb_map map; /* where env is mapped (base/lmdb_valcheck.h); env's user context points here */
    /* alarms and defragment (alarm.c, store.c) */
    MDB_dbi alarm;
    _Atomic unsigned alarms;   /* committed alarm mask (1u << KV_ALARM_*) */
    _Atomic unsigned sticky;   /* corruption seen by this process (refuse until disarmed) */
    _Atomic unsigned to_raise; /* alarms detected, not yet proposed (kv_store_take_alarms) */
    pthread_rwlock_t swap;     /* readers of the env vs the defragment swap */
    /* The one write batch: held from kv_store_batch_begin to its commit or abort, by the
     * thread that began it. A second writer (the next raft ready's worker while the one
     * before still commits, node_ready.c pipelining) waits for it here. */
    pthread_mutex_t batch_mu;
    /* kv_store_db_size_in_use's cache: the value for the committed txn id size_txnid */
    pthread_mutex_t size_mu;
    uint64_t size_txnid;
    int64_t size_in_use;
    bool deterministic; /* kv_store_set_deterministic: no file-size dependent results */
    /* membership (members.c) */
    MDB_dbi members, members_removed, members_staged;
    /* keys longer than KV_SHORT_KEY_MAX (longkey.c, format 2) */
    MDB_dbi lkidx, lkey, lease_lkeys;
    MDB_dbi auth; /* users, roles, auth flag and revision (auth_store.c) */
};

/* Pages on LMDB's free list as txn sees it (the free DB, dbi 0: each record is a list of page
 * numbers, its count first). 0 or a negative errno. */
int kv_store__free_pages(MDB_txn *txn, int64_t *out);

/* One index entry (kidx dup). */
typedef struct kv_ent {
    int64_t main, sub;
    bool tomb;
} kv_ent;

/* ---- record.c: encodings ---- */
void kv_revkey(uint8_t out[KV_REVKEY_LEN], int64_t main, int64_t sub);
void kv_dup_encode(uint8_t out[KV_DUP_LEN], const kv_ent *e);
void kv_dup_decode(const uint8_t *p, kv_ent *e);
/* Maps an LMDB return code to a negative errno. */
int kv_mdb_err(int rc);
/* Writes the rev record for (main, sub). */
int kv_rec_put(kv_store *s, MDB_txn *txn, int64_t main, int64_t sub, bool tomb,
               const Mvccpb__KeyValue *kv);
/* Loads and verifies the record for e; checks that it is for key (when key != NULL).
 * *out is malloc'd (free with mvccpb__key_value__free_unpacked(*out, NULL)).
 * -EBADMSG on checksum/consistency failure; -ENOENT if the record is missing (also
 * reported as corruption by callers that followed an index entry). */
int kv_rec_load(kv_store *s, MDB_txn *txn, const kv_ent *e, const uint8_t *key, size_t klen,
                Mvccpb__KeyValue **out);
/* Verifies one stored record value (crc over key16|flags|payload). */
bool kv_rec_verify(const uint8_t *key16, const uint8_t *val, size_t vlen);
int kv_meta_read(kv_store *s, MDB_txn *txn, kv_meta *m);
int kv_meta_write(kv_store *s, MDB_txn *txn, const kv_meta *m);
int kv_format_read(kv_store *s, MDB_txn *txn, uint32_t *version);
int kv_format_write(kv_store *s, MDB_txn *txn, uint32_t version);

/* ---- longkey.c: keys longer than LMDB's key limit (store.h "Long keys") ---- */
#define KV_SHORT_KEY_MAX 511             /* longest key kept in "kidx" (LMDB's default key limit) */
#define KV_LK_PREFIX 448                 /* key bytes at the head of a long key's handle */
#define KV_LK_HANDLE (KV_LK_PREFIX + 32) /* prefix | SHA-256 of the whole key */

/* memcmp order, a shorter prefix first (etcd's byte order). */
int kv_keycmp(const uint8_t *a, size_t al, const uint8_t *b, size_t bl);
/* The handle of a key longer than KV_SHORT_KEY_MAX. */
void kv_lk_handle(uint8_t out[KV_LK_HANDLE], const uint8_t *key, size_t klen);
/* "lkey": handle -> full key. put: no-op if present; the first one moves the format to 2.
 * get: *key points into LMDB memory (valid until the next write in txn); -EBADMSG if absent
 * or failing its check. */
int kv_lk_key_put(kv_store *s, MDB_txn *txn, const uint8_t *handle, const uint8_t *key,
                  size_t klen);
int kv_lk_key_get(kv_store *s, MDB_txn *txn, const uint8_t *handle, const uint8_t **key,
                  size_t *klen);
int kv_lk_key_del(kv_store *s, MDB_txn *txn, const uint8_t *handle);
/* Stores format 2 unless already there. */
int kv_lk_upgrade_format(kv_store *s, MDB_txn *txn);
/* Lease attachments of keys of any length (short ones in the lease table, long ones in
 * "lease_lkeys"); keys: every attached key in key order; del: the long attachments of id. */
int kv_lk_lease_attach(kv_store *s, MDB_txn *txn, int64_t id, const uint8_t *key, size_t klen);
int kv_lk_lease_detach(kv_store *s, MDB_txn *txn, int64_t id, const uint8_t *key, size_t klen);
int kv_lk_lease_count(kv_store *s, MDB_txn *txn, int64_t id, size_t *out);
int kv_lk_lease_keys(kv_store *s, MDB_txn *txn, int64_t id,
                     int (*fn)(void *arg, const uint8_t *key, size_t klen), void *arg);
int kv_lk_lease_del(kv_store *s, MDB_txn *txn, int64_t id);
/* A list of keys (with their handle for index buckets): copies when copy is set (writes may
 * happen while the list lives), else pointers into LMDB memory (valid while txn does not
 * write: a read transaction, or a walk with no write between its steps). */
typedef struct kv_lk_item {
    const uint8_t *key;
    size_t klen;
    bool owned;
    uint8_t handle[KV_LK_HANDLE];
} kv_lk_item;
int kv_lk_items_push(kv_lk_item **arr, size_t *n, size_t *cap, const uint8_t *key, size_t klen,
                     const uint8_t *handle, bool copy);
void kv_lk_items_sort(kv_lk_item *arr, size_t n);
void kv_lk_items_free(kv_lk_item *arr, size_t n);

/* ---- index.c: key iteration over "kidx" and "lkidx" ----
 * Two sorted streams merged in key order: the short keys (a "kidx" cursor) and the long keys
 * (one "lkidx" bucket at a time, the keys sharing a KV_LK_PREFIX-byte prefix, sorted in
 * memory when the walk reaches that prefix). With reseek the current key is a copy owned by
 * the iterator (valid until the next step), so writes between steps are safe; without, a long
 * key points into LMDB memory (valid until the next step or write), and a bucket costs its
 * key count, not its key bytes. */
typedef struct kv_iter {
    kv_store *s;
    MDB_txn *txn;
    MDB_cursor *c, *probe, *lc, *lprobe;
    const uint8_t *start;
    size_t slen;
    const uint8_t *end; /* NULL/len 0: single key; "\0": no upper bound */
    size_t elen;
    bool single, unbounded;
    bool reseek;    /* writes happen between steps: re-seek from a copy of the last key */
    bool all;       /* also yield keys whose revision at at_rev is a tombstone */
    int64_t at_rev; /* INT64_MAX = latest */
    bool started, done;
    /* short stream: head copy */
    bool s_started, s_done, s_have;
    uint8_t s_key[KV_SHORT_KEY_MAX + 1];
    size_t s_klen;
    kv_ent s_ent;
    /* long stream: the current bucket, sorted, and the head at b[bi] */
    bool l_started, l_done, l_have;
    kv_lk_item *b;
    size_t bn, bcap, bi;
    uint8_t bprefix[KV_LK_PREFIX];
    kv_ent l_ent;
    /* current item (key valid until the next step) */
    const uint8_t *key;
    size_t klen;
    kv_ent ent;
} kv_iter;

/* Range [start, end) as in etcd: end empty = just start; end "\0" = every key >= start. */
int kv_iter_open(kv_iter *it, kv_store *s, MDB_txn *txn, const uint8_t *start, size_t slen,
                 const uint8_t *end, size_t elen, int64_t at_rev, bool reseek);
/* 1 = an item is current, 0 = done, < 0 error. */
int kv_iter_next(kv_iter *it);
void kv_iter_close(kv_iter *it);
/* Latest index entry of key at revision <= at_rev: 0, -ENOENT if none, < 0 on error. */
int kv_index_get(kv_store *s, MDB_txn *txn, const uint8_t *key, size_t klen, int64_t at_rev,
                 kv_ent *out);
/* kv_index_get on an index key of db ("kidx": the key; "lkidx": its handle). */
int kv_index_get_raw(kv_store *s, MDB_txn *txn, MDB_dbi db, const uint8_t *ikey, size_t iklen,
                     int64_t at_rev, kv_ent *out);

/* ---- write.c: key-level writes in a write context ---- */
typedef struct kv_wctx {
    kv_store *s;
    MDB_txn *txn;
    kv_meta *m;
    int64_t begin_rev;
    int64_t sub;                 /* changes so far at main revision begin_rev + 1 */
    uint32_t max_keys_per_lease; /* 0 = unlimited; the entry's, else cfg's (kv_ks_begin) */
} kv_wctx;

/* One request's context (keyspace.h): the write context on its child transaction, its copy
 * of the batch meta and alarm mask, and the lease events for the observer. */
typedef struct kv_ks_ev {
    int type; /* 1 grant, 2 revoke, 3 checkpoint */
    int64_t id, ttl, rem;
} kv_ks_ev;
struct kv_ks {
    kv_store *s;
    kv_store_batch *b;
    kv_wctx w;
    kv_meta m;
    unsigned alarms;
    kv_ks_ev *ev;
    size_t nev, cap;
    bool nested;  /* w.txn is the request's own child transaction (not a shared batch) */
    bool writing; /* kv_ks_mark_writing: an abort in a shared batch spoils it */
};

/* Revision reads in this context see (etcd storeTxnWrite.Range). */
static inline int64_t kv_wctx_read_rev(const kv_wctx *w)
{
    return w->begin_rev + (w->sub > 0 ? 1 : 0);
}
/* Revision of the request after it ends. */
static inline int64_t kv_wctx_end_rev(const kv_wctx *w)
{
    return kv_wctx_read_rev(w);
}
/* Put key. Return 0, -EDQUOT (max_keys_per_lease), < 0 storage error. */
int kv_w_put(kv_wctx *w, const uint8_t *key, size_t klen, const uint8_t *val, size_t vlen,
             int64_t lease);
/* Deletes every live key in [key, end); *deleted gets the count; prev (optional) gets the
 * deleted key-values (malloc'd array of unpacked KeyValues). Return as kv_w_put. */
int kv_w_delete_range(kv_wctx *w, const uint8_t *key, size_t klen, const uint8_t *end, size_t elen,
                      int64_t *deleted, Mvccpb__KeyValue ***prev, size_t *n_prev);

/* ---- range.c ---- */
/* Executes a range at read revision cur with compaction point compact (range.h results).
 * live_keys: the live key count at cur; a count over the whole keyspace at cur is answered
 * from it in O(1), and the walk then stops as soon as the returned keys are loaded. */
int kv_range_run(kv_store *s, MDB_txn *txn, int64_t cur, int64_t compact, uint64_t live_keys,
                 const kv_range_opts *r, kv_range_result *out);

/* ---- compact.c: batched compaction (see compact.c) ---- */
/* Records that revisions <= rev are to be removed physically (restarting any earlier walk). */
int kv_compact_schedule(kv_store *s, MDB_txn *txn, int64_t rev);
/* 1 (and *rev, may be NULL) if a physical compaction is pending in txn, 0 if not, < 0 error. */
int kv_compact_pending(kv_store *s, MDB_txn *txn, int64_t *rev);
/* Compacts from the persisted cursor, visiting at most max_keys keys, removing at most
 * max_revs records and stopping after about max_us microseconds once it made progress (0 =
 * no bound), and saves the new cursor (or deletes the progress record
 * when done). Adds to *keys_done / *removed. 1 = more remains, 0 = nothing pending any more,
 * < 0 error. */
int kv_compact_run(kv_store *s, MDB_txn *txn, uint32_t max_keys, uint32_t max_revs, uint32_t max_us,
                   uint64_t *keys_done, uint64_t *removed);
/* Whether the record (16-byte revkey, stored value) survives a finished compaction at rev:
 * 1 yes, 0 no, < 0 error. */
int kv_compact_survives(kv_store *s, MDB_txn *txn, const uint8_t *revkey, const uint8_t *val,
                        size_t vlen, int64_t rev);

/* ---- store.c / defrag.c ---- */
/* Creates s->env for dir with the map size of s->cfg.quota_bytes (s->env NULL on failure). */
int kv_store_env_open(kv_store *s, const char *dir);
/* Opens every named database of the store in txn. */
int kv_store_open_dbs(kv_store *s, MDB_txn *txn);
/* The swap of defragment and snapshot install (defrag.c, install.c). Precondition: the caller
 * holds s->swap for writing and a complete, durable file was renamed to <dir>/data.mdb.
 * Closes the environment, opens it on that file (databases, meta into *m, alarms), and
 * resets what belonged to the old mapping (kv_store_db_size_in_use's count, the record size
 * check's map). A failure aborts the process with a message naming `what` and file: the
 * renamed file is the state now, and a restart opens it. */
void kv_store_env_reopen(kv_store *s, const char *dir, const char *file, const char *what,
                         kv_meta *m);
/* kv_store_note_corrupt, kv_describe_key: keyspace.h. */

/* ---- alarm.c ---- */
#define KV_MAX_ALARMS KV_KS_MAX_ALARMS
/* Mask (1u << type) of the alarms stored in txn. */
int kv_alarm_load(kv_store *s, MDB_txn *txn, unsigned *mask);
/* Request validation (txn_check) and the alarm gates moved to the applier (server/apply/). */

#endif
