/*
 * restore.c: replaces the state of the store, inside an open batch, by the state held in
 * another LMDB file (a snapshot streamed from the raft leader; issue 9, log compaction).
 *
 * A logical copy, not a file swap: every reader, the lessor and the watch hub keep the same
 * environment, and the restore commits (or not) with the batch, atomically with the raft log's
 * snapshot record. Copied: the keyspace ("rev", "kidx"), the lease table ("lease",
 * "lease_keys"), alarms, the members table, and meta "state" / "cmpct". Kept: this member's
 * "identity" and "format" records and the raft log databases.
 *
 * Bound: one LMDB transaction holds the whole copy (dirty pages up to MDB_TXN_FULL, about
 * 512 MiB of pages with the default build): a larger state fails with -ENOSPC-like
 * MDB_TXN_FULL and the member stops. Copying in several transactions with a resumable marker
 * is the known next step (docs/ARCHITECTURE.md, "Snapshots").
 */
#include "mvcc/store_int.h"

#include <errno.h>
#include <string.h>

static const char *const state_dbs[] = {"rev", "kidx", "lease", "lease_keys", "alarm", "members"};

static int copy_db(MDB_txn *src_txn, MDB_txn *dst_txn, const char *name)
{
    MDB_dbi sdbi, ddbi;
    unsigned flags = 0;
    int rc = mdb_dbi_open(src_txn, name, 0, &sdbi);
    int have_src = rc == 0;
    if (rc && rc != MDB_NOTFOUND)
        return kv_mdb_err(rc);
    if (have_src && (rc = mdb_dbi_flags(src_txn, sdbi, &flags)))
        return kv_mdb_err(rc);
    rc = mdb_dbi_open(dst_txn, name, MDB_CREATE | (flags & (MDB_DUPSORT | MDB_DUPFIXED)), &ddbi);
    if (rc)
        return kv_mdb_err(rc);
    if ((rc = mdb_drop(dst_txn, ddbi, 0)))
        return kv_mdb_err(rc);
    if (!have_src)
        return 0;
    MDB_cursor *c;
    if ((rc = mdb_cursor_open(src_txn, sdbi, &c)))
        return kv_mdb_err(rc);
    MDB_val k, v;
    unsigned put = (flags & MDB_DUPSORT) ? MDB_APPENDDUP : MDB_APPEND;
    for (rc = mdb_cursor_get(c, &k, &v, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
        int prc = mdb_put(dst_txn, ddbi, &k, &v, put);
        if (prc) {
            mdb_cursor_close(c);
            return kv_mdb_err(prc);
        }
    }
    mdb_cursor_close(c);
    return rc == MDB_NOTFOUND ? 0 : kv_mdb_err(rc);
}

static int copy_meta_key(kv_store *s, MDB_txn *src_txn, MDB_dbi smeta, MDB_txn *dst_txn,
                         const char *key)
{
    MDB_val k = {strlen(key), (void *)key}, v;
    int rc = mdb_get(src_txn, smeta, &k, &v);
    if (rc == MDB_NOTFOUND) {
        rc = mdb_del(dst_txn, s->meta, &k, NULL);
        return rc == MDB_NOTFOUND ? 0 : kv_mdb_err(rc);
    }
    if (rc)
        return kv_mdb_err(rc);
    return kv_mdb_err(mdb_put(dst_txn, s->meta, &k, &v, 0));
}

int kv_store_restore_from(kv_store *s, kv_store_batch *b, const char *path)
{
    if (!b || b != &s->batch || !b->open || !path)
        return -EINVAL;
    MDB_env *src = NULL;
    MDB_txn *rt = NULL;
    int rc = mdb_env_create(&src);
    if (rc)
        return kv_mdb_err(rc);
    if ((rc = mdb_env_set_maxdbs(src, 16)) ||
        (rc = mdb_env_open(src, path, MDB_RDONLY | MDB_NOSUBDIR | MDB_NOLOCK, 0600)) ||
        (rc = mdb_txn_begin(src, NULL, MDB_RDONLY, &rt))) {
        rc = kv_mdb_err(rc);
        goto out;
    }
    MDB_dbi smeta;
    if ((rc = mdb_dbi_open(rt, "meta", 0, &smeta))) {
        rc = rc == MDB_NOTFOUND ? -EBADMSG : kv_mdb_err(rc);
        goto out;
    }
    /* "format": crc32c(4, BE) | version (4, BE), checked by hand: the snapshot's environment
     * is not the store's (valcheck.h's map bounds do not apply to it). */
    MDB_val fk = {6, (void *)"format"}, fv;
    if ((rc = mdb_get(rt, smeta, &fk, &fv))) {
        rc = rc == MDB_NOTFOUND ? -EBADMSG : kv_mdb_err(rc);
        goto out;
    }
    const uint8_t *fp = fv.mv_data;
    if (fv.mv_size != 8) {
        rc = -EBADMSG;
        goto out;
    }
    uint32_t version = (uint32_t)fp[4] << 24 | (uint32_t)fp[5] << 16 | (uint32_t)fp[6] << 8 | fp[7];
    if (version != KV_STORE_FORMAT_VERSION) {
        rc = -EPROTONOSUPPORT;
        goto out;
    }
    for (size_t i = 0; i < sizeof(state_dbs) / sizeof(state_dbs[0]); i++)
        if ((rc = copy_db(rt, b->txn, state_dbs[i])) < 0)
            goto out;
    if ((rc = copy_meta_key(s, rt, smeta, b->txn, "state")) < 0 ||
        (rc = copy_meta_key(s, rt, smeta, b->txn, "cmpct")) < 0)
        goto out;
    rc = kv_meta_read(s, b->txn, &b->meta);
out:
    if (rt)
        mdb_txn_abort(rt);
    mdb_env_close(src);
    return rc;
}
