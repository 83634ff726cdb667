/* raftlog_conf: the index of the log's configuration entries, "rconf" (key = index 8 BE,
 * empty value), maintained in the log's write txns, so that raft_init reads only the
 * configuration entries of the retained log (raft.h next_conf; raftlog.h). */
#include <errno.h>
#include <stdio.h>

#include "raftlog/raftlog_int.h"

int kv_rl_conf_dbi(kv_raftlog *l, MDB_txn *txn)
{
    return kv_raftlog_mdb_err(mdb_dbi_open(txn, "rconf", MDB_CREATE, &l->rconf));
}

int kv_rl_conf_add(kv_raftlog *l, MDB_txn *txn, raft_index i)
{
    uint8_t kb[8];
    kv_put_be64(kb, i);
    MDB_val k = {8, kb}, v = {0, NULL};
    return kv_raftlog_mdb_err(mdb_put(txn, l->rconf, &k, &v, 0));
}

int kv_rl_conf_upgrade(kv_raftlog *l, MDB_txn *txn, long *n, long *scanned)
{
    MDB_cursor *c = NULL;
    MDB_val k, v;
    *n = *scanned = -1;
    int rc = kv_rl_mark_get(l, txn, KV_RL_CONF_MARK);
    if (rc != -ENOENT)
        return rc;
    *n = *scanned = 0;
    /* Stale records (e.g. a restored data dir whose "rmeta" was dropped) go first. */
    if ((rc = kv_raftlog_mdb_err(mdb_drop(txn, l->rconf, 0))) ||
        (rc = kv_raftlog_mdb_err(mdb_cursor_open(txn, l->rlog, &c))))
        return rc;
    for (MDB_cursor_op op = MDB_FIRST;; op = MDB_NEXT) {
        struct raft_entry e;
        rc = mdb_cursor_get(c, &k, &v, op);
        if (rc == MDB_NOTFOUND)
            break;
        if (rc) {
            rc = kv_raftlog_mdb_err(rc);
            goto out;
        }
        if ((rc = kv_rl_entry_decode(&k, &v, &e)))
            goto out;
        (*scanned)++;
        if (e.type == RAFT_ENTRY_CONF) {
            if ((rc = kv_rl_conf_add(l, txn, e.index)))
                goto out;
            (*n)++;
        }
    }
    rc = kv_rl_mark_put(l, txn, KV_RL_CONF_MARK);
out:
    mdb_cursor_close(c);
    return rc;
}

int kv_rl_conf_next(kv_raftlog *l, MDB_txn *txn, raft_index lo, raft_index hi, raft_index *idx)
{
    MDB_cursor *c;
    uint8_t kb[8];
    kv_put_be64(kb, lo);
    MDB_val k = {8, kb}, v;
    *idx = 0;
    int rc = mdb_cursor_open(txn, l->rconf, &c);
    if (rc)
        return kv_raftlog_mdb_err(rc);
    rc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE);
    mdb_cursor_close(c);
    if (rc == MDB_NOTFOUND)
        return 0;
    if (rc)
        return kv_raftlog_mdb_err(rc);
    if (k.mv_size != 8)
        return -EBADMSG;
    raft_index i = kv_be64(k.mv_data);
    if (i <= hi)
        *idx = i;
    return 0;
}
