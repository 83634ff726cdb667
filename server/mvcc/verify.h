/*
 * verify: startup integrity check of a data dir's LMDB environment.
 *
 * LMDB trusts its file: a corrupted page can crash it (SIGSEGV/SIGBUS) deep inside a lookup,
 * where no caller can turn the fault into an error. kvd therefore checks the file before LMDB
 * touches it, and refuses to start on a corrupt store with a clear message:
 *
 * kv_store_verify_file(dir, max_records) reads data.mdb with pread(2) (never mmap: a short
 * file cannot fault) and checks
 *   - both meta pages: page number, P_META flag, magic 0xBEEFC0DE, data version 1, page size
 *     (a power of two, 512..65536), txnid; the current meta (highest txnid) must be valid,
 *     its last page must lie inside the file and its trees' roots at or below the last page;
 *   - a bounded walk of the B-trees of the current meta (free list, main db, every named db,
 *     dup sub-databases), depth-first from the left, with an explicit stack (no recursion on
 *     file contents beyond the three fixed tree levels): each page's number matches its
 *     position, its flags are those its position requires (branch above the leaf level, leaf
 *     at it: the tree depth recorded in the meta must match), lower/upper and every node
 *     (key and inline data) fit in the page, child and overflow page numbers lie at or below
 *     the last page, overflow pages are marked as such and hold the value's size, sub-pages
 *     and sub-database records are well formed, and a tree walked completely holds as many
 *     entries as its header says (non-dupsort trees).
 *   The walk stops after max_records leaf entries per tree and 8 * max_records over the whole
 *   walk (dup sub-trees included; 0 = meta pages only), so startup
 *   stays O(1) in the data size (lesson 9). Pages beyond the bound are covered by
 *   kv_store_verify_structure below (the whole file, --startup-verify-full, on by default).
 *
 * kv_store_verify_records(s, max_records), after kv_store_open, re-reads through LMDB the
 * first max_records entries of each of kvd's databases and verifies them: meta records
 * (format, state, identity) by checksum, "rev" records by checksum and size, "kidx" dups by
 * size, lease records by checksum (lease table decode). Also mdb_env_info sanity (last page
 * inside the map and the file).
 *
 * Both return 0, or -EBADMSG with a one-line description of what is corrupt (and where) in
 * err, or another negative errno when the check itself could not run (message in err).
 * A missing data.mdb (fresh data dir) passes. Threads: any; the store must not be in use
 * concurrently by a writer during kv_store_verify_records (kvd runs both before serving).
 */
#ifndef KV_MVCC_VERIFY_H
#define KV_MVCC_VERIFY_H

#include <stddef.h>
#include <stdint.h>

#include "mvcc/store.h"

#define KV_VERIFY_DEFAULT_RECORDS 10000

/* The whole structure of <dir>/data.mdb (mvcc/lmdb_verify.h: every page the current meta
 * reaches), before LMDB opens it. Logs one line with the pages, bytes and time it took.
 * A missing or empty data.mdb passes. Returns 0, -EBADMSG (corrupt, err says where) or
 * another negative errno. Blocks for the read of the file: call before serving. */
int kv_store_verify_structure(const char *dir, char *err, size_t errlen);

int kv_store_verify_file(const char *dir, uint64_t max_records, char *err, size_t errlen);
int kv_store_verify_records(kv_store *s, uint64_t max_records, char *err, size_t errlen);

#endif
