/*
 * valcheck: is a value LMDB returned safe to read? (issue 8, D10)
 *
 * LMDB trusts the sizes stored in its pages. On a corrupted file a node can claim a size that
 * runs past the end of the data file; reading it (e.g. to verify its checksum) then faults
 * (SIGBUS) instead of reporting corruption. Every reader of stored values calls
 * kv_mdb_val_sane() before touching the bytes: a value that does not fit is corruption
 * (-EBADMSG for the store), never an out-of-bounds read.
 *
 * Rules: size <= max; a value inside the memory map must end at or before the last page LMDB
 * has committed (me_last_pgno; the file holds every page up to it). A value outside the map
 * lives in a page the current write transaction copied to the heap (dirty page): LMDB sized
 * that copy from the same page, so only the max bound applies.
 *
 * Cost: one mdb_env_info() (reads the current meta page, no lock, no syscall) and one
 * mdb_env_get_maxkeysize-free comparison. Any thread. Header-only so the lease table (which
 * the store links) can use it too.
 */
#ifndef KV_MVCC_VALCHECK_H
#define KV_MVCC_VALCHECK_H

#include <lmdb.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Largest stored value kvd ever writes: a 1 GiB request (--max-request-bytes upper bound)
 * plus record overhead. */
#define KV_MDB_VAL_MAX (((size_t)1 << 30) + 65536)

static inline bool kv_mdb_val_sane(MDB_txn *txn, const MDB_val *v, size_t max)
{
    if (v->mv_size > max)
        return false;
    if (v->mv_size == 0)
        return true;
    if (v->mv_data == NULL)
        return false;
    MDB_env *env = mdb_txn_env(txn);
    MDB_envinfo info;
    MDB_stat st;
    if (mdb_env_info(env, &info) != 0 || mdb_env_stat(env, &st) != 0)
        return false;
    uintptr_t base = (uintptr_t)info.me_mapaddr, p = (uintptr_t)v->mv_data;
    uintptr_t map_end = base + info.me_mapsize;
    if (p < base || p >= map_end)
        return true; /* heap copy of a dirty page (write txn) */
    uintptr_t file_end = base + ((uintptr_t)info.me_last_pgno + 1) * st.ms_psize;
    return p < file_end && v->mv_size <= file_end - p;
}

#endif
