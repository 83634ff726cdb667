/*
 * lmdb_err (server/base/: helpers below every module; header-only, needs only LMDB's
 * header): the one mapping from an LMDB return code to a negative errno, for every module
 * that uses LMDB (mvcc, raftlog, lease). One meaning per code, decided here, so one apply
 * transaction that touches several modules reports one failure one way:
 *
 *   MDB_NOTFOUND                     -ENOENT
 *   MDB_MAP_FULL                     -ENOSPC       the map is full: the NOSPACE alarm's case
 *   MDB_TXN_FULL                     -E2BIG        one transaction dirtied more pages than
 *                                                  LMDB holds: the request is too big, the
 *                                                  disk is not full (never -ENOSPC/-ENOMEM)
 *   MDB_BAD_VALSIZE                  -ENAMETOOLONG a key past LMDB's limit
 *   MDB_CORRUPTED, MDB_PAGE_NOTFOUND -EBADMSG      a bad page: the data file is corrupt
 *   MDB_READERS_FULL, MDB_DBS_FULL   -EMFILE
 *   MDB_MAP_RESIZED                  -EAGAIN
 *   a system errno (ENOMEM, EIO...)  itself, negated
 *   anything else (MDB_PAGE_FULL, MDB_BAD_TXN, ...)  -EIO
 */
#ifndef KV_BASE_LMDB_ERR_H
#define KV_BASE_LMDB_ERR_H

#include <errno.h>
#include <lmdb.h>

static inline int kv_lmdb_err(int rc)
{
    switch (rc) {
    case 0:
        return 0;
    case MDB_NOTFOUND:
        return -ENOENT;
    case MDB_MAP_FULL:
        return -ENOSPC;
    case MDB_TXN_FULL:
        return -E2BIG;
    case MDB_BAD_VALSIZE:
        return -ENAMETOOLONG;
    case MDB_CORRUPTED:
    case MDB_PAGE_NOTFOUND:
        return -EBADMSG;
    case MDB_READERS_FULL:
    case MDB_DBS_FULL:
        return -EMFILE;
    case MDB_MAP_RESIZED:
        return -EAGAIN;
    default:
        return rc > 0 && rc < 4096 ? -rc : -EIO;
    }
}

#endif
