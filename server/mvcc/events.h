/*
 * events: the committed revisions of the store read back as a watch event log.
 *
 * Every write keeps its record in the "rev" database in revision order (store.h), so the
 * committed revisions ARE the event log: live delivery and a watcher's catch-up read the same
 * records, in bounded slices, after the batch that wrote them committed. Nothing is copied
 * on the apply thread and no event is held in memory between slices.
 *
 * Event shape (etcd 3.4 mvcc/watchable_store.go): a live record is a PUT with the stored
 * KeyValue; a tombstone is a DELETE whose KeyValue holds key and mod_revision (the deleting
 * revision) only. Records of one main revision (one Txn) are yielded together, sub revision
 * order.
 *
 * Threads: a reader is an LMDB read transaction (MDB_NOTLS) that may be used on any one
 * thread at a time, concurrently with the apply thread's writes; it sees the last committed
 * batch at the time it began.
 *
 * Compaction: callers decide "compacted" from reader.compact_rev (read in the same
 * transaction as the records), never from missing records: a revision <= compact_rev may
 * have lost some of its records. Records of revisions <= compact_rev are yielded only when
 * the finished compaction keeps them (kv_compact_survives), so a watcher starting at
 * compact_rev sees the same events whatever the physical compaction's progress.
 */
#ifndef KV_MVCC_EVENTS_H
#define KV_MVCC_EVENTS_H

#include "kv.pb-c.h"
#include "mvcc/store.h"

#include <stddef.h>
#include <stdint.h>

typedef struct kv_store_reader {
    MDB_txn *txn;
    int64_t rev;         /* committed revision seen by this reader */
    int64_t compact_rev; /* -1 = never compacted */
} kv_store_reader;

/* Begins a read transaction. 0 or a negative errno. */
int kv_store_reader_begin(kv_store *s, kv_store_reader *r);
/* Ends it (r->txn NULL is allowed). */
void kv_store_reader_end(kv_store_reader *r);

typedef struct kv_store_event {
    int64_t main, sub;
    int tomb;          /* 1 = DELETE */
    const uint8_t *kv; /* packed mvccpb.KeyValue, valid only during the callback */
    size_t kv_len;
} kv_store_event;

/* Returns 0 to go on, < 0 to stop the walk with that error. */
typedef int (*kv_store_event_fn)(void *arg, const kv_store_event *ev);

/* Calls fn for every record of revisions [from, to] in order. Stops after a complete
 * revision once the payload bytes yielded reach max_bytes (0 = no byte limit): a revision is
 * never split. *last gets the last revision fully visited (to when the walk reached it,
 * from - 1 if nothing was visited). Every record's checksum is verified (-EBADMSG). */
int kv_store_events(kv_store *s, const kv_store_reader *r, int64_t from, int64_t to,
                    size_t max_bytes, kv_store_event_fn fn, void *arg, int64_t *last);

/* The key's value at revision rev (etcd: Range(key, rev) for prev_kv). 0 and *out (free with
 * mvccpb__key_value__free_unpacked) when it existed; -ENOENT when it did not, or rev is
 * compacted (rev < compact_rev) or < 1; < 0 on storage errors. */
int kv_store_kv_at(kv_store *s, const kv_store_reader *r, const uint8_t *key, size_t klen,
                   int64_t rev, Mvccpb__KeyValue **out);

#endif
