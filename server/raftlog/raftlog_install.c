/* raftlog_install.c: the raft records of a data file that is about to replace the member's
 * (a snapshot received from the leader, node_snap.c). See raftlog.h. */
#include <errno.h>
#include <string.h>

#include "raftlog/raftlog_int.h"

int kv_raftlog_install_into(MDB_txn *txn, const struct raft_snapshot_meta *m,
                            const struct raft_hard_state *hs, const struct raft_entry *e, size_t n)
{
    if (!txn || !m || !hs || (n && !e))
        return -EINVAL;
    if (m->conf.n_voters > RAFT_MAX_NODES || m->conf.n_learners > RAFT_MAX_NODES)
        return -EINVAL;
    struct kv_raftlog l;
    memset(&l, 0, sizeof l);
    l.env = mdb_txn_env(txn);
    int rc;
    if ((rc = kv_raftlog_mdb_err(mdb_dbi_open(txn, "rlog", MDB_CREATE, &l.rlog))) ||
        (rc = kv_raftlog_mdb_err(mdb_dbi_open(txn, "rmeta", MDB_CREATE, &l.rmeta))) ||
        (rc = kv_rl_conf_dbi(&l, txn)))
        return rc;
    /* The sender's log: freed page by page (O(its pages), bounded by its compaction), the
     * state's pages are not touched. */
    if ((rc = kv_raftlog_mdb_err(mdb_drop(txn, l.rlog, 0))) ||
        (rc = kv_raftlog_mdb_err(mdb_drop(txn, l.rmeta, 0))) ||
        (rc = kv_raftlog_mdb_err(mdb_drop(txn, l.rconf, 0))) || (rc = kv_rl_snap_put(&l, txn, m)) ||
        (rc = kv_rl_hs_put(&l, txn, hs)) || (rc = kv_rl_mark_put(&l, txn, KV_RL_CONF_MARK)))
        return rc;
    return kv_raftlog_append(&l, txn, e, n);
}
