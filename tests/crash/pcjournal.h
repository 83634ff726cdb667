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
 * Directory operations under the tracked directory (and the creation or removal of that
 * directory itself) are journaled too. One is DURABLE once an fsync/fdatasync of its parent
 * directory (of both parents, for a rename between two directories) completes after it, or a
 * sync()/syncfs() does (POSIX's rule; a file's own fsync is NOT taken to commit its directory
 * entry, which ext4's journal happens to do: the model is the conservative one). At replay:
 *  - KV_PC_ROLLBACK_ALL undoes every non-durable directory operation, newest first;
 *  - KV_PC_ROLLBACK_SUBSET keeps a random prefix (in journal order: a metadata-journaling file
 *    system commits its metadata in order) of the non-durable ones and undoes the rest, newest
 *    first.
 * The page replay runs first, on each file where it is at the cut (after its renames; in the
 * graveyard if it was unlinked), then the directory replay: pre-images of a file whose
 * creation is undone go with the file, a file whose unlink is undone comes back with its
 * pages rolled back as usual.
 *
 * Undo of each directory operation: CREATE removes the file, MKDIR removes the directory and
 * everything under it, RENAME moves the object back (and puts back the file it replaced, from
 * the graveyard), UNLINK links the file back from the graveyard, RMDIR makes the (empty)
 * directory again, LINK removes the new name. An undo whose object or parent is no longer the
 * one the operation saw (a later operation that is kept replaced it, e.g. a durable rmdir of
 * the parent) is moot and skipped (kv_pc_stats.dirops_moot): on a real disk the later, kept
 * operation implies the earlier one.
 *
 * The graveyard: before it unlinks a regular file (or renames over one) under the tracked
 * directory, the shim hard-links it as <journal>.graves/<n> (the journal must be on the same
 * file system), so that replay can restore it; the link is removed once the removal is
 * durable. kv_pc_replay removes the graveyard when it is done.
 *
 * Journal format (host byte order; the journal is read back on the same machine):
 *   header  "PCJ2" u32 page_size
 *   record  u32 type, u32 file_id, then by type:
 *     KV_PC_REC_FILE    u64 dev, u64 ino, u32 len, path[len]   first use of a file: its id,
 *                                                 inode and path
 *     KV_PC_REC_BASE    u64 size                 the file becomes dirty; size it had then
 *     KV_PC_REC_PRE     u64 page, u32 len, old[len]  pre-image (len < page_size: page was
 *                                                 partly or wholly past the end of file)
 *     KV_PC_REC_SYNC    -                        every change to the file so far is durable
 *     KV_PC_REC_DUR     u64 first_page, u64 n_pages, u64 end  these pages (written up to byte
 *                                                 offset end) are durable
 *     KV_PC_REC_ESCAPE  u32 len, text[len]       a change the shim cannot undo (e.g. a
 *                                                 writable shared mapping): the run is void
 *   directory operations (file_id UINT32_MAX), all with the same body:
 *     u64 dev, u64 parent[2], u64 ino, u64 aux, u32 len[3], path0[len0] path1[len1] path2[len2]
 *     parent[k]: inode of the directory holding path k's entry (parent[1] 0: same as
 *     parent[0] or unused); ino: the object's inode before the operation (0: none yet); paths
 *     absolute, as resolved by the shim (symlinks of the parent resolved):
 *     KV_PC_REC_CREATE  path0 a new regular file (open/openat/creat with O_CREAT)
 *     KV_PC_REC_MKDIR   path0 a new directory; aux unused
 *     KV_PC_REC_RENAME  path0 -> path1; ino the moved object; aux the inode of the file path1
 *                       named before (0: none), path2 its graveyard link
 *     KV_PC_REC_UNLINK  path0 (a regular file, inode ino); path2 its graveyard link
 *     KV_PC_REC_RMDIR   path0 (an empty directory); aux its mode
 *     KV_PC_REC_LINK    path1 a new name for path0 (inode ino); parent[0] is path1's parent
 *   KV_PC_REC_DIRSYNC   u64 dev, u64 ino, u32 len, path[len]   an fsync/fdatasync of directory
 *                       ino completed (ino 0: sync()/syncfs(), every directory)
 *   KV_PC_REC_FAIL      -                        the directory operation just before failed
 *                                                 (it changed nothing)
 * A record torn by the kill (the journal's tail) is ignored: the write it preceded had not
 * started (the shim writes the record before the data). A directory operation's record is
 * also written before the call; when it is the last record (the kill came during the call)
 * the replay's undo finds out whether it happened (the undo checks the object's inode).
 */
#ifndef KV_PC_JOURNAL_H
#define KV_PC_JOURNAL_H

#include <stddef.h>
#include <stdint.h>

#define KV_PC_MAGIC "PCJ2"

/* Where the shim keeps unlinked files: the journal path with this suffix. */
#define KV_PC_GRAVES_SUFFIX ".graves"

enum {
    KV_PC_REC_FILE = 1,
    KV_PC_REC_BASE = 2,
    KV_PC_REC_PRE = 3,
    KV_PC_REC_SYNC = 4,
    KV_PC_REC_DUR = 5,
    KV_PC_REC_ESCAPE = 6,
    KV_PC_REC_CREATE = 7,
    KV_PC_REC_MKDIR = 8,
    KV_PC_REC_RENAME = 9,
    KV_PC_REC_UNLINK = 10,
    KV_PC_REC_RMDIR = 11,
    KV_PC_REC_LINK = 12,
    KV_PC_REC_DIRSYNC = 13,
    KV_PC_REC_FAIL = 14,
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
    uint32_t deleted;        /* files gone at the cut, their removal durable (no graveyard) */
    uint32_t dirops;         /* directory operations journaled (failed ones not counted) */
    uint32_t dirops_durable; /* of them, made durable by a later fsync of their parent(s) */
    uint32_t dirops_undone;  /* non-durable ones the replay undid */
    uint32_t dirops_moot;    /* undos skipped: the object or its parent was replaced since */
    uint32_t escapes;        /* ESCAPE records (a non-zero count voids the run) */
    char escape[256];        /* the first ESCAPE text */
} kv_pc_stats;

/* Simulates the power loss described by the journal at path `journal` on the files and
 * directories it names (no process may have them open for writing): pages first, then the
 * directory operations. seed drives the subset mode's choices. Returns 0, or a negative errno
 * (-EBADMSG for a malformed journal) with a reason in err. Threads: any; touches only what the
 * journal names, and removes the graveyard (<journal>.graves). */
int kv_pc_replay(const char *journal, kv_pc_mode mode, uint64_t seed, kv_pc_stats *st, char *err,
                 size_t errcap);

#endif
