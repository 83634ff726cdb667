/*
 * pcjournal: the undo journal written by the powercut shim (powercut.c, LD_PRELOAD) and the
 * "power loss" that replays it (pcjournal.c, linked into the crash test).
 *
 * Model (see tests/crash/README.md): the shim saves, before a write changes a page of a
 * tracked file for the first time since that file's last completed sync, the page's old
 * bytes (its PRE-IMAGE). A completed fsync/fdatasync makes every saved pre-image of that
 * file obsolete; a completed write on an O_DSYNC/O_SYNC descriptor (LMDB's meta page) or an
 * msync(MS_SYNC) makes the pre-images of the pages it covered obsolete. After the process is
 * killed, the pre-images still live describe every page whose content the disk may not have:
 *  - KV_PC_ROLLBACK_ALL: every unsynced page is restored and every unsynced growth is cut
 *    (the disk kept nothing the kernel had not been told to sync);
 *  - KV_PC_ROLLBACK_SUBSET: a random subset of the unsynced pages is restored, in random
 *    order, and the file keeps either its synced or its current size (the kernel may have
 *    written back any dirty page, and the size, before the power went).
 *
 * Journal format (host byte order; the journal is read back on the same machine):
 *   header  "PCJ1" u32 page_size
 *   record  u32 type, u32 file_id, then by type:
 *     KV_PC_REC_FILE    u32 len, path[len]       first use of a file: its id and path
 *     KV_PC_REC_BASE    u64 size                 the file becomes dirty; size it had then
 *     KV_PC_REC_PRE     u64 page, u32 len, old[len]  pre-image (len < page_size: page was
 *                                                 partly or wholly past the end of file)
 *     KV_PC_REC_SYNC    -                        every change to the file so far is durable
 *     KV_PC_REC_DUR     u64 first_page, u64 n_pages, u64 end  these pages (written up to byte
 *                                                 offset end) are durable
 *     KV_PC_REC_ESCAPE  u32 len, text[len]       a change the shim cannot undo (e.g. a
 *                                                 writable shared mapping): the run is void
 * A record torn by the kill (the journal's tail) is ignored: the write it preceded had not
 * started (the shim writes the record before the data).
 */
#ifndef KV_PC_JOURNAL_H
#define KV_PC_JOURNAL_H

#include <stddef.h>
#include <stdint.h>

#define KV_PC_MAGIC "PCJ1"

enum {
    KV_PC_REC_FILE = 1,
    KV_PC_REC_BASE = 2,
    KV_PC_REC_PRE = 3,
    KV_PC_REC_SYNC = 4,
    KV_PC_REC_DUR = 5,
    KV_PC_REC_ESCAPE = 6,
};

typedef enum { KV_PC_ROLLBACK_ALL = 0, KV_PC_ROLLBACK_SUBSET = 1 } kv_pc_mode;

typedef struct kv_pc_stats {
    uint32_t files;          /* files the journal names */
    uint64_t records;        /* complete records read */
    uint64_t syncs;          /* SYNC records */
    uint64_t durs;           /* DUR records (O_DSYNC writes, msync) */
    uint64_t unsynced_pages; /* pages with a live pre-image at the cut */
    uint64_t restored_pages; /* pages rolled back to their pre-image */
    uint32_t truncated;      /* files cut back to their synced size */
    uint32_t deleted;        /* files the journal names that no longer exist (unlinked) */
    uint32_t escapes;        /* ESCAPE records (a non-zero count voids the run) */
    char escape[256];        /* the first ESCAPE text */
} kv_pc_stats;

/* Simulates the power loss described by the journal at path `journal` on the files it names
 * (they must exist and no process may have them open for writing). seed drives the subset
 * mode's choices. Returns 0, or a negative errno (-EBADMSG for a malformed journal) with a
 * reason in err. Threads: any; touches only the files and the journal. */
int kv_pc_replay(const char *journal, kv_pc_mode mode, uint64_t seed, kv_pc_stats *st, char *err,
                 size_t errcap);

#endif
