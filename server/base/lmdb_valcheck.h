/*
 * lmdb_valcheck (server/base/: helpers below every module; header-only, needs only LMDB):
 * is a value LMDB returned safe to read?
 *
 * LMDB trusts the sizes stored in its pages. On a corrupted file a node can claim a size that
 * runs past the end of the data file; reading it (e.g. to verify its checksum) then faults
 * (SIGBUS) instead of reporting corruption. Every reader of stored values calls
 * kv_mdb_val_sane() before touching the bytes: a value that does not fit is corruption
 * (-EBADMSG for the store), never an out-of-bounds read.
 *
 * Rules: size <= max (the largest value the caller ever stores). A value inside the memory
 * map must end inside the data file: fast path, at or before the last committed page
 * (mdb_env_info: no lock, no syscall); otherwise (pages a large write transaction spilled to
 * the file, or corruption) the file size is checked with fstat(2). A value outside the map
 * lives in a page the current write transaction copied to the heap (dirty page), which LMDB
 * sized from the same page: only the max bound applies.
 *
 * The map's address is not in LMDB's public API (me_mapaddr is only set for MDB_FIXEDMAP), so
 * kv_mdb_map_learn() derives it once after mdb_env_open from a page LMDB returns (page header
 * = page number), checks it against both meta pages, and hangs it on the environment
 * (mdb_env_set_userctx; the kv_mdb_map must outlive the environment). Without it (not
 * learned, page size above the OS page size, or the map size changed since: remapped) only
 * the max bound applies. Any thread; header-only so the lease table (which the store links)
 * uses it too.
 */
#ifndef KV_BASE_LMDB_VALCHECK_H
#define KV_BASE_LMDB_VALCHECK_H

#include <lmdb.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Largest stored value kvd ever writes: a 1 GiB request (--max-request-bytes upper bound)
 * plus record overhead. */
#define KV_MDB_VAL_MAX (((size_t)1 << 30) + 65536)

typedef struct kv_mdb_map {
    uintptr_t base; /* 0 = unknown */
    size_t mapsize;
    size_t psize;
} kv_mdb_map;

/* Learns where env is mapped (see above); returns 0 when learned, -1 when not (then m is
 * zeroed and the environment's user context cleared). env must be open. */
static inline int kv_mdb_map_learn(MDB_env *env, kv_mdb_map *m)
{
    memset(m, 0, sizeof(*m));
    mdb_env_set_userctx(env, NULL);
    MDB_envinfo info;
    MDB_stat st;
    long os_page = sysconf(_SC_PAGESIZE);
    if (mdb_env_info(env, &info) != 0 || mdb_env_stat(env, &st) != 0 || os_page <= 0 ||
        st.ms_psize == 0 || st.ms_psize > (unsigned)os_page)
        return -1;
    MDB_txn *txn;
    if (mdb_txn_begin(env, NULL, MDB_RDONLY, &txn) != 0)
        return -1;
    MDB_cursor *c;
    MDB_val k, v;
    int rc = -1;
    /* The main database's first record (a named database) lies in a leaf page of the map. */
    if (mdb_cursor_open(txn, 1, &c) == 0) {
        if (mdb_cursor_get(c, &k, &v, MDB_FIRST) == 0 && v.mv_data) {
            uintptr_t p = (uintptr_t)v.mv_data;
            uintptr_t page = p & ~((uintptr_t)st.ms_psize - 1);
            uint64_t pgno;
            memcpy(&pgno, (const void *)page, sizeof(pgno));
            uintptr_t base = page - (uintptr_t)pgno * st.ms_psize;
            uint32_t magic0, magic1;
            if (pgno <= info.me_last_pgno && pgno >= 2 && base % (uintptr_t)os_page == 0) {
                memcpy(&magic0, (const void *)(base + 16), 4);
                memcpy(&magic1, (const void *)(base + st.ms_psize + 16), 4);
                if (magic0 == 0xBEEFC0DEu && magic1 == 0xBEEFC0DEu) {
                    m->base = base;
                    m->mapsize = info.me_mapsize;
                    m->psize = st.ms_psize;
                    mdb_env_set_userctx(env, m);
                    rc = 0;
                }
            }
        }
        mdb_cursor_close(c);
    }
    mdb_txn_abort(txn);
    return rc;
}

static inline bool kv_mdb_val_sane(MDB_txn *txn, const MDB_val *v, size_t max)
{
    if (v->mv_size > max)
        return false;
    if (v->mv_size == 0)
        return true;
    if (v->mv_data == NULL)
        return false;
    MDB_env *env = mdb_txn_env(txn);
    const kv_mdb_map *m = mdb_env_get_userctx(env);
    MDB_envinfo info;
    if (m == NULL || m->base == 0 || mdb_env_info(env, &info) != 0 || info.me_mapsize != m->mapsize)
        return true; /* map unknown: the max bound only */
    uintptr_t p = (uintptr_t)v->mv_data;
    if (p < m->base || p - m->base >= m->mapsize)
        return true; /* heap copy of a dirty page (write txn) */
    uintptr_t off = p - m->base;
    if (off + v->mv_size <= ((uintptr_t)info.me_last_pgno + 1) * m->psize)
        return true;
    int fd;
    struct stat sb;
    if (mdb_env_get_fd(env, &fd) != 0 || fstat(fd, &sb) != 0)
        return false;
    return off <= (uintptr_t)sb.st_size && v->mv_size <= (uintptr_t)sb.st_size - off;
}

#endif
