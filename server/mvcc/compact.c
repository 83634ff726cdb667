/* compact: etcd 3.4 compaction over the kidx/rev databases. For each key, every revision
 * <= rev is removed except the latest one when it is a live value (a tombstone <= rev is
 * removed with everything before it, as etcd's keyIndex.compact + scheduleCompaction).
 * Visits every key of the index once (O(keys) time, O(1) memory), inside the caller's
 * write transaction. */
#include <errno.h>
#include <string.h>

#include "mvcc/store_int.h"

static bool ent_lt(const kv_ent *a, const kv_ent *b)
{
    return a->main < b->main || (a->main == b->main && a->sub < b->sub);
}

static int compact_key(kv_store *s, MDB_txn *txn, MDB_cursor *c, const uint8_t *k, size_t kl,
                       int64_t rev)
{
    kv_ent keep;
    int rc = kv_index_get(s, txn, k, kl, rev, &keep);
    if (rc == -ENOENT)
        return 0;
    if (rc)
        return rc;
    for (;;) {
        MDB_val key = {kl, (void *)k}, d;
        rc = mdb_cursor_get(c, &key, &d, MDB_SET);
        if (rc == MDB_NOTFOUND)
            return 0;
        if (rc == 0)
            rc = mdb_cursor_get(c, &key, &d, MDB_FIRST_DUP);
        if (rc)
            return kv_mdb_err(rc);
        if (d.mv_size != KV_DUP_LEN)
            return -EBADMSG;
        kv_ent e;
        kv_dup_decode(d.mv_data, &e);
        bool same = e.main == keep.main && e.sub == keep.sub;
        if (!(ent_lt(&e, &keep) || (same && keep.tomb)))
            return 0;
        uint8_t rk[KV_REVKEY_LEN];
        kv_revkey(rk, e.main, e.sub);
        MDB_val rkey = {KV_REVKEY_LEN, rk};
        rc = mdb_del(txn, s->rev, &rkey, NULL);
        if (rc && rc != MDB_NOTFOUND)
            return kv_mdb_err(rc);
        if ((rc = mdb_cursor_del(c, 0)))
            return kv_mdb_err(rc);
        if (same)
            return 0;
    }
}

int kv_compact_exec(kv_store *s, MDB_txn *txn, int64_t rev)
{
    MDB_cursor *c;
    uint8_t kbuf[512];
    size_t kl = 0;
    bool first = true;
    int rc = mdb_cursor_open(txn, s->kidx, &c);
    if (rc)
        return kv_mdb_err(rc);
    for (;;) {
        MDB_val key, d;
        if (first) {
            rc = mdb_cursor_get(c, &key, &d, MDB_FIRST);
            first = false;
        } else {
            key.mv_size = kl;
            key.mv_data = kbuf;
            rc = mdb_cursor_get(c, &key, &d, MDB_SET_RANGE);
            if (rc == 0 && key.mv_size == kl && memcmp(key.mv_data, kbuf, kl) == 0)
                rc = mdb_cursor_get(c, &key, &d, MDB_NEXT_NODUP);
        }
        if (rc == MDB_NOTFOUND) {
            rc = 0;
            break;
        }
        if (rc) {
            rc = kv_mdb_err(rc);
            break;
        }
        if (key.mv_size > sizeof kbuf) {
            rc = -EBADMSG;
            break;
        }
        memcpy(kbuf, key.mv_data, key.mv_size);
        kl = key.mv_size;
        if ((rc = compact_key(s, txn, c, kbuf, kl, rev)))
            break;
    }
    mdb_cursor_close(c);
    return rc;
}
