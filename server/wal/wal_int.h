/*
 * wal internals shared by the wal_*.c files (not a public interface). See wal.h for the
 * format and the contract. Same thread rule: one caller at a time.
 */
#ifndef KV_WAL_INT_H
#define KV_WAL_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/snap_meta.h"
#include "common/byteorder.h" /* records are big-endian */
#include "wal/wal.h"

#define KV_WAL_SEG_PENDING UINT64_MAX /* entry written in the batch not yet synced */

struct kv_wal_seg {
    uint64_t seq;
    raft_index first;     /* from the file name */
    raft_index max_index; /* highest entry index recorded in it (0: none) */
    uint64_t size;        /* end of the records (next write offset) */
    uint64_t alloc;       /* file size (preallocated) */
    int fd;               /* O_RDWR for the active (last) segment, O_RDONLY otherwise */
};

struct kv_wal_ent {
    raft_term term;
    uint64_t seg; /* seq of the segment holding the record, or KV_WAL_SEG_PENDING */
    uint64_t off; /* record offset in that segment (in the pending buffer when pending) */
    uint32_t len; /* data length */
    uint8_t type;
    void *data; /* cached copy (NULL when not cached or len == 0) */
    bool cached;
};

struct kv_wal {
    char *dir;
    int dirfd;
    struct kv_wal_opts o;

    struct kv_wal_seg *segs; /* sorted by seq, contiguous seqs; the last is active */
    size_t n_segs, cap_segs;

    struct kv_wal_ent *ents; /* entry first + k at ents[head + k], k < n_ents */
    size_t head, n_ents, cap_ents;
    raft_index first;    /* index of the first retained entry (== snap.index + 1 once open) */
    raft_index cache_lo; /* entries below are not cached */
    uint64_t cached_bytes;

    raft_index *conf; /* sorted indexes of retained RAFT_ENTRY_CONF entries */
    size_t n_conf, cap_conf;

    struct raft_snapshot_meta snap, synced_snap;
    struct raft_hard_state hs, synced_hs;
    bool have_hs, synced_have_hs;

    uint8_t *pend; /* records added since the last sync */
    size_t pend_len, pend_cap;
    raft_index pend_min, pend_max; /* entry indexes written in the batch (0: none) */

    void **garbage; /* freed at kv_wal_end_cycle */
    size_t n_garbage, cap_garbage;
    bool opening; /* during open: evicted data is freed at once */

    int err; /* latched */
    uint64_t fsyncs;
    uint64_t torn_seq, torn_off;
    struct raft_storage vt;
};

/* wal_rec.c: record framing. */
/* Writes the header for a payload already at hdr + KV_WAL_HDR (crc over both). */
void kv_wal_rec_seal(uint8_t *hdr, uint8_t type, uint32_t len);
/* Checks the record at buf[0..avail): 1 = all-zero header (end of records), 0 = valid
 * (*type, *len set), -EBADMSG = bad (short, crc, unknown type). */
int kv_wal_rec_check(const uint8_t *buf, uint64_t avail, uint8_t *type, uint32_t *len);
/* A snapshot marker's payload is base/snap_meta.h's encoding. */

/* wal_index.c: the in-memory log (shared by recovery and writes). */
raft_index kv_wal_last(const kv_wal *w);
struct kv_wal_ent *kv_wal_ent_at(kv_wal *w, raft_index i); /* NULL outside [first, last] */
/* Appends one entry after dropping every entry >= e->index. data is a malloc'd copy the
 * index takes, or NULL: not cached (open's scan; read from seg/off when asked). -EBADMSG when the
 * index would leave a gap or is <= snap.index (the caller frees data then). */
int kv_wal_idx_push(kv_wal *w, const struct raft_entry *e, void *data, uint64_t seg, uint64_t off);
int kv_wal_idx_snapshot(kv_wal *w, const struct raft_snapshot_meta *m);
/* Drops cached data of the oldest entries until the cache fits opts.tail_bytes (never a
 * pending entry). */
void kv_wal_idx_evict(kv_wal *w);
void kv_wal_discard(kv_wal *w, void *p); /* frees now (opening) or at end_cycle */
int kv_wal_idx_conf_next(const kv_wal *w, raft_index lo, raft_index hi, raft_index *idx);
void kv_wal_idx_free(kv_wal *w);

/* wal_seg.c: segment files. */
int kv_wal_seg_name(char *buf, size_t cap, uint64_t seq, raft_index first);
/* Lists the segment files of dirfd, sorted by seq (*out malloc'd, fds not opened). */
int kv_wal_seg_list(int dirfd, struct kv_wal_seg **out, size_t *n);
/* Creates segment (seq, first) preallocated to bytes, opens it O_RDWR, fsyncs the dir. */
int kv_wal_seg_create(kv_wal *w, uint64_t seq, raft_index first, struct kv_wal_seg *s);
/* Makes [off, alloc) zero again and the size alloc (ftruncate + posix_fallocate + sync). */
int kv_wal_seg_cut(kv_wal *w, struct kv_wal_seg *s, uint64_t off);
/* Grows the preallocation so that `need` bytes fit. */
int kv_wal_seg_reserve(struct kv_wal_seg *s, uint64_t need, uint64_t step);
struct kv_wal_seg *kv_wal_seg_by_seq(kv_wal *w, uint64_t seq);
int kv_wal_fsync_dir(kv_wal *w);

/* wal_read.c */
void kv_wal_storage_init(kv_wal *w);

#endif
