/*
 * wal: the raft log, hard state and snapshot markers in append-only segment files of their
 * own (docs/raftlog.md, "The WAL module"), so that one fdatasync makes a whole raft ready
 * durable. The server's log with --experimental-wal (server/node/node_log.c); without it the
 * node uses server/raftlog/ (LMDB).
 *
 * Files: <dir>/<seq:016x>-<first:016x>.wal. seq counts from 1 without gaps; first is the
 * lowest entry index the segment may hold. Each segment is preallocated (posix_fallocate) to
 * opts.segment_bytes so that fdatasync flushes data, not the file size. The active segment
 * is the last; a new one is started at the first sync after the active one reached
 * segment_bytes, and it begins with the snapshot marker and the hard state in force, so the
 * segments before it can be deleted without losing them.
 *
 * Record: type (1) | 0 0 0 | len (4 BE) | crc32c (4 BE) | payload (len bytes); the crc
 * covers the first 8 header bytes and the payload. An all-zero header ends a segment (the
 * preallocated rest reads as zeros).
 *   KV_WAL_REC_ENTRY     index (8 BE) | term (8 BE) | entry type (1) | data
 *   KV_WAL_REC_HARDSTATE term (8 BE) | vote (8 BE) | commit (8 BE)        (last one wins)
 *   KV_WAL_REC_SNAPSHOT  index (8 BE) | term (8 BE) | n_voters (4 BE) | voters (8 BE each) |
 *                        n_learners (4 BE) | learners (8 BE each)
 * An entry record with index i replaces every entry >= i (raft's overwrite of a conflicting
 * suffix); a snapshot marker drops the entries <= its index (all of them when the log does
 * not hold its index with its term). Invariant: entries are contiguous from snap.index + 1.
 *
 * Recovery (kv_wal_open): every record is checked. A bad record (CRC, short, unknown type)
 * in the LAST segment with a sector that reads as unwritten zeros is a torn write of a batch
 * that was never synced, so never acknowledged: the segment is cut there (the rest
 * re-zeroed) and the log goes on. A bad record with every sector written (a bit flip), a
 * bad record in any other segment, a record breaking the invariant, or a missing segment is
 * corruption: open fails with -EBADMSG and err names the segment file and the offset
 * (docs/LESSONS.md, lesson 7: a corrupt log is reported, never loaded).
 *
 * Memory: the index of retained entries (term, segment, offset, cached data: 48 B each) and of
 * configuration entries; entry data of the newest entries appended since open, up to
 * opts.tail_bytes (plus the batch being written); older entries, and every entry open found,
 * are read from the segment files (pread, CRC checked): open reads the segments (mapped and
 * unmapped one at a time) but keeps no entry data, so a restart's memory does not grow with
 * the retained log.
 * The retained entries are bounded by the caller's deletion (kv_wal_release) below
 * min(snapshot index, durable applied index).
 *
 * Threads: none of its own. Every call, vtable included, from one thread at a time (the
 * caller serializes). Errors: 0 or negative errno; -EBADMSG corrupt record, -EINVAL a
 * caller precondition. A failed write or fdatasync is latched (kv_wal_error): the log then
 * refuses every later write (a failed fsync is never retried: the page cache state is
 * unknown).
 */
#ifndef KV_WAL_H
#define KV_WAL_H

#include <stddef.h>
#include <stdint.h>

#include "raft/raft.h"

typedef struct kv_wal kv_wal;

enum { KV_WAL_REC_ENTRY = 1, KV_WAL_REC_HARDSTATE = 2, KV_WAL_REC_SNAPSHOT = 3 };
#define KV_WAL_HDR 12u

#define KV_WAL_DEFAULT_SEGMENT_BYTES (64ull << 20) /* etcd's */

struct kv_wal_opts {
    uint64_t segment_bytes; /* rotate once the active segment reached it; 0: the default */
    size_t tail_bytes;      /* entry data cached in memory, newest first; 0: 8 MiB */
    int no_sync;            /* 1: kv_wal_sync writes but never flushes (--unsafe-no-fsync, the
                               power-cut tests' control); every other rule holds */
};

/* Opens (creating dir and a first segment when there is none) and recovers the log as the
 * header says. o may be NULL (defaults). On failure *out is NULL and err (errlen bytes, may
 * be NULL) says why; -EBADMSG names the segment file and offset of the corrupt record. */
int kv_wal_open(kv_wal **out, const char *dir, const struct kv_wal_opts *o, char *err,
                size_t errlen);
/* Closes the files and frees everything; w may be NULL. Unsynced records are lost. */
void kv_wal_close(kv_wal *w);
/* 1 when no hard state, no snapshot and no entry was ever stored (a fresh member). */
int kv_wal_is_empty(const kv_wal *w);

/* ---- writes: in memory at once (the vtable sees them), on disk at kv_wal_sync ---- */

/* Appends e[0..n) (contiguous indexes), replacing every entry >= e[0].index. -EINVAL if the
 * indexes are not contiguous, e[0].index <= snap.index or it leaves a gap after the last
 * entry. The data is copied. n == 0 is a no-op. */
int kv_wal_append(kv_wal *w, const struct raft_entry *e, size_t n);
int kv_wal_set_hard_state(kv_wal *w, const struct raft_hard_state *hs);
/* Records a snapshot's meta: drops entries <= m->index (all when the log lacks m->index with
 * m->term). -EINVAL if m->index is below the current snapshot's or a conf is oversized. */
int kv_wal_set_snapshot(kv_wal *w, const struct raft_snapshot_meta *m);
/* Writes every record added since the last sync and makes them durable with ONE fdatasync
 * (plus, when it starts a new segment, one fsync of the directory). Nothing pending: no I/O. */
int kv_wal_sync(kv_wal *w);
/* Deletes the segments (never the active one) whose entries are all <= min(the synced
 * snapshot index, applied). applied must be durable in the state machine. Returns the number
 * of segments deleted or a negative errno. */
int kv_wal_release(kv_wal *w, raft_index applied);

/* Builds a WAL in dir (which must not exist: -EEXIST) holding what src holds: its snapshot
 * meta, hard state and entries (read in chunks through the vtable; data need only stay
 * valid during each entries() call). Written under "<dir>.tmp" (a leftover one is removed),
 * synced, renamed to dir, the parent synced: a crash leaves no WAL or the whole one. The
 * caller ends src's read cycle afterwards. err as kv_wal_open. */
int kv_wal_import(const char *dir, const struct raft_storage *src, const struct kv_wal_opts *o,
                  char *err, size_t errlen);

/* ---- reads ---- */

/* The raft_storage vtable (owned by w). Entry data pointers stay valid until
 * kv_wal_end_cycle(). Storage failures (a segment record failing its CRC on read) are
 * latched in kv_wal_error(). next_conf answers from the configuration-entry index. */
const struct raft_storage *kv_wal_storage(kv_wal *w);
/* Frees the data returned by the vtable since the last call. */
void kv_wal_end_cycle(kv_wal *w);
int kv_wal_error(const kv_wal *w);

struct kv_wal_stats {
    raft_index first, last; /* as the vtable reports them */
    uint64_t segments;      /* segment files */
    uint64_t bytes;         /* records in every segment (their sizes, not the preallocation) */
    uint64_t first_seq;     /* seq of the oldest segment */
    uint64_t fsyncs;        /* fdatasync/fsync calls since open */
    uint64_t cached_bytes;  /* entry data held in memory */
    uint64_t torn_seq;      /* open cut a torn tail in this segment (0: none) */
    uint64_t torn_off;      /* ... at this offset */
};
void kv_wal_stats(const kv_wal *w, struct kv_wal_stats *s);

#endif
