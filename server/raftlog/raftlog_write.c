/* raftlog_write: the write side, inside the caller's write txn (worker thread; raftlog.h). */
#include <errno.h>

#include "raftlog/raftlog_int.h"

/* Deletes every key of dbi with index >= from (from_top) or <= to (!from_top). */
static int del_keys(MDB_txn *txn, MDB_dbi dbi, bool from_top, raft_index bound)
{
    MDB_cursor *c;
    MDB_val k, v;
    int rc = mdb_cursor_open(txn, dbi, &c);
    if (rc)
        return kv_raftlog_mdb_err(rc);
    for (;;) {
        rc = mdb_cursor_get(c, &k, &v, from_top ? MDB_LAST : MDB_FIRST);
        if (rc == MDB_NOTFOUND) {
            rc = 0;
            break;
        }
        if (rc) {
            rc = kv_raftlog_mdb_err(rc);
            break;
        }
        if (k.mv_size != 8) {
            rc = -EBADMSG;
            break;
        }
        raft_index i = kv_be64(k.mv_data);
        if (from_top ? i < bound : i > bound)
            break;
        if ((rc = mdb_cursor_del(c, 0))) {
            rc = kv_raftlog_mdb_err(rc);
            break;
        }
    }
    mdb_cursor_close(c);
    return rc;
}

/* Deletes entries as del_keys says, and their records in the configuration index. */
static int del_range(kv_raftlog *l, MDB_txn *txn, bool from_top, raft_index bound)
{
    int rc = del_keys(txn, l->rlog, from_top, bound);
    return rc ? rc : del_keys(txn, l->rconf, from_top, bound);
}

int kv_raftlog_append(kv_raftlog *l, MDB_txn *txn, const struct raft_entry *e, size_t n)
{
    struct raft_snapshot_meta m;
    raft_index last;
    int rc;
    if (n == 0)
        return 0;
    for (size_t i = 1; i < n; i++)
        if (e[i].index != e[0].index + i)
            return -EINVAL;
    if ((rc = kv_rl_snap_get(l, txn, &m)) && rc != -ENOENT)
        return rc;
    if (e[0].index <= m.index)
        return -EINVAL;
    rc = kv_rl_last_key(l, txn, &last);
    if (rc == -ENOENT)
        last = m.index;
    else if (rc)
        return rc;
    if (e[0].index > last + 1)
        return -EINVAL;
    if (e[0].index <= last && (rc = del_range(l, txn, true, e[0].index)))
        return rc;
    for (size_t i = 0; i < n; i++) {
        uint8_t kb[8];
        kv_put_be64(kb, e[i].index);
        MDB_val k = {8, kb}, v = {KV_RLOG_HDR + e[i].len, NULL};
        if ((rc = mdb_put(txn, l->rlog, &k, &v, MDB_APPEND | MDB_RESERVE)))
            return kv_raftlog_mdb_err(rc);
        kv_rl_entry_encode(&e[i], v.mv_data);
        if (e[i].type == RAFT_ENTRY_CONF && (rc = kv_rl_conf_add(l, txn, e[i].index)))
            return rc;
    }
    return 0;
}

int kv_raftlog_set_hard_state(kv_raftlog *l, MDB_txn *txn, const struct raft_hard_state *hs)
{
    return kv_rl_hs_put(l, txn, hs);
}

int kv_raftlog_set_snapshot(kv_raftlog *l, MDB_txn *txn, const struct raft_snapshot_meta *m)
{
    struct raft_snapshot_meta old;
    int rc;
    bool keep = false;
    if (m->conf.n_voters > RAFT_MAX_NODES || m->conf.n_learners > RAFT_MAX_NODES)
        return -EINVAL;
    if ((rc = kv_rl_snap_get(l, txn, &old)) && rc != -ENOENT)
        return rc;
    if (m->index < old.index)
        return -EINVAL;
    if (m->index == old.index) {
        keep = m->term == old.term;
    } else {
        uint8_t kb[8];
        kv_put_be64(kb, m->index);
        MDB_val k = {8, kb}, v;
        struct raft_entry e;
        rc = mdb_get(txn, l->rlog, &k, &v);
        if (rc == 0) {
            if ((rc = kv_rl_entry_decode(&k, &v, &e)))
                return rc;
            keep = e.term == m->term;
        } else if (rc != MDB_NOTFOUND) {
            return kv_raftlog_mdb_err(rc);
        }
    }
    if (keep)
        rc = del_range(l, txn, false, m->index);
    else
        rc = del_range(l, txn, true, 0);
    if (rc)
        return rc;
    return kv_rl_snap_put(l, txn, m);
}

int kv_raftlog_truncate_prefix(kv_raftlog *l, MDB_txn *txn, raft_index keep_from)
{
    struct raft_snapshot_meta m;
    int rc;
    if ((rc = kv_rl_snap_get(l, txn, &m)) && rc != -ENOENT)
        return rc;
    if (keep_from > m.index + 1)
        return -EINVAL;
    if (keep_from == 0)
        return 0;
    return del_range(l, txn, false, keep_from - 1);
}
