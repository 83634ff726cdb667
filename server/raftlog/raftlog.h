/*
 * raftlog: the durable raft log, hard state and snapshot meta, stored in LMDB beside the
 * state machine (the same environment as the mvcc store, kv_store_env()).
 *
 * Three named databases:
 *   "rlog"  index (8 bytes BE) -> crc32c (4 BE) | term (8 BE) | type (1) | data
 *           crc over index(8 BE) | term | type | data
 *   "rmeta" "hs"   -> crc32c (4 BE) | term (8 BE) | vote (8 BE) | commit (8 BE)
 *           "snap" -> crc32c (4 BE) | index (8 BE) | term (8 BE) | n_voters (4 BE) |
 *                     voters (8 BE each) | n_learners (4 BE) | learners (8 BE each)
 *           "rconf_v1" -> crc32c (4 BE): "rconf" indexes every stored configuration entry
 *           crc over the key name | everything after the crc
 *   "rconf" index (8 BE) -> empty: one record per stored RAFT_ENTRY_CONF entry, written and
 *           deleted in the same write txns as the entries (the vtable's next_conf answers
 *           from it, so raft_init reads only the configuration entries: O(1) startup).
 * Invariant: stored entries are contiguous and start at snap.index + 1 (when any).
 *
 * Because both live in the store's environment, one LMDB write transaction per raft ready
 * holds the new entries, the hard state, the applied requests and the applied index: one
 * commit, one sync.
 *
 * Threads: the loop thread opens the log, uses the storage vtable (its own read txns) and
 * calls rotate/end_cycle/stats/is_empty; the worker thread calls the write functions inside
 * the caller's write txn (never two write functions concurrently). Storage reads may run
 * concurrently with a write txn (LMDB MVCC; the environment is opened with MDB_NOTLS).
 *
 * Errors: 0 or negative errno. -EBADMSG: a record failed its CRC or the log invariant;
 * -EINVAL: a caller precondition was violated; -ENOMEM; LMDB failures as server/base/lmdb_err.h
 * maps them.
 */
#ifndef KV_RAFTLOG_H
#define KV_RAFTLOG_H

#include <lmdb.h>
#include <stdint.h>

#include "raft/raft.h"

typedef struct kv_raftlog kv_raftlog;

/* Opens/creates DBIs "rlog", "rmeta" and "rconf" in a write txn of its own (the environment
 * needs maxdbs room for three more databases), then checks the hard state, the snapshot meta,
 * the first and last entries and the invariant above. If "rmeta" lacks the "rconf_v1" marker
 * (a data dir written before the index, or a restored one), the same txn rebuilds "rconf"
 * from every stored entry (once; logs one line). env is borrowed and must outlive the log.
 * Loop thread, before anything else runs. Records failing their CRC -> -EBADMSG. */
int kv_raftlog_open(kv_raftlog **out, MDB_env *env);
/* Releases every read txn and the log. l may be NULL. The DBIs stay open in env. */
void kv_raftlog_close(kv_raftlog *l);
/* Before the environment is closed and reopened under the log (Defragment swaps data.mdb):
 * releases every read transaction. After: kv_raftlog_reattach binds the log to the new
 * environment (same object, so the storage vtable stays valid). Loop thread, no cycle open. */
void kv_raftlog_detach(kv_raftlog *l);
int kv_raftlog_reattach(kv_raftlog *l, MDB_env *env);
/* 1 when no hard state, no snapshot meta and no entry was ever stored (fresh member:
 * bootstrap), 0 otherwise, negative errno on storage failure. Loop thread. */
int kv_raftlog_is_empty(kv_raftlog *l);

/* The raft_storage vtable over the log (loop thread; owned by l, valid until close). It
 * reads through a read txn opened lazily at the first call of a cycle; entry data pointers
 * point into the LMDB map and stay valid until kv_raftlog_end_cycle(). snapshot(): meta
 * from "snap" (index 0 if none), data NULL, len 0 (the state itself is streamed
 * separately). next_conf(): from "rconf" (never reads entries).
 * Errors: term()/entries() return RAFT_ECOMPACTED / RAFT_EUNAVAILABLE as raft.h says, and
 * -EBADMSG (corrupt record) or another negative errno on storage failure; first_index()
 * and last_index() have no error channel. Every storage failure is also latched in
 * kv_raftlog_error(): the driver must check it after each cycle and stop the member
 * (raft may have taken a failed read for a mismatch). */
const struct raft_storage *kv_raftlog_storage(kv_raftlog *l);
/* The first storage failure seen by the vtable (0 if none). Loop thread. */
int kv_raftlog_error(const kv_raftlog *l);
/* Called by the driver right after the worker committed a ready (loop thread): later
 * storage calls see the new commit (a NEW read txn), data returned earlier stays valid
 * until kv_raftlog_end_cycle() (the old read txn is kept alive until then). */
void kv_raftlog_rotate(kv_raftlog *l);
/* Called after raft_advance() returned: releases every read txn of the cycle (the next
 * storage call opens a fresh one). */
void kv_raftlog_end_cycle(kv_raftlog *l);

/* ---- inside the caller's write txn (worker thread; never concurrently with another write
 * function; storage reads may run concurrently on the loop with their own read txn) ---- */

/* Appends e[0..n) (contiguous indexes), first deleting every stored entry >= e[0].index.
 * -EINVAL if the indexes are not contiguous, e[0].index <= snap.index or e[0].index would
 * leave a gap after the last stored entry. n == 0 is a no-op. */
int kv_raftlog_append(kv_raftlog *l, MDB_txn *txn, const struct raft_entry *e, size_t n);
int kv_raftlog_set_hard_state(kv_raftlog *l, MDB_txn *txn, const struct raft_hard_state *hs);
/* Records a snapshot's meta (after installing a received snapshot, or after raft_compact()):
 * deletes entries <= meta->index, remembers meta (index/term serve term(meta.index)). If the
 * log holds the entry meta->index with term meta->term, the entries beyond it are kept
 * (raft semantics: a snapshot older than the log), otherwise the whole log is dropped.
 * -EINVAL if m->index is below the stored snapshot's index or conf sizes exceed
 * RAFT_MAX_NODES. */
int kv_raftlog_set_snapshot(kv_raftlog *l, MDB_txn *txn, const struct raft_snapshot_meta *m);
/* Deletes entries < keep_from. keep_from may not pass snap.index + 1 (-EINVAL): entries
 * <= snap.index may go, the term of snap.index stays answerable from the meta. */
int kv_raftlog_truncate_prefix(kv_raftlog *l, MDB_txn *txn, raft_index keep_from);

/* Inside a write txn of ANOTHER environment (a received snapshot's data file that is about to
 * replace the store's: node_snap.c): drops every stored entry and the meta records, then stores
 * meta m, hard state hs and entries e[0..n) (contiguous, from m->index + 1; n may be 0). The
 * pages of the state are not touched: the txn's size is the sender's log plus e. Worker
 * thread; needs no kv_raftlog (opens "rlog"/"rmeta" in txn). */
int kv_raftlog_install_into(MDB_txn *txn, const struct raft_snapshot_meta *m,
                            const struct raft_hard_state *hs, const struct raft_entry *e, size_t n);

/* Stats for metrics/status (loop thread; own read txn): first and last index as the vtable
 * reports them, and the bytes of LMDB pages used by "rlog" (O(1), from mdb_stat). */
int kv_raftlog_stats(kv_raftlog *l, raft_index *first, raft_index *last, uint64_t *bytes);

#endif
