/* raftlog: opening, the read side (raft_storage vtable over per-cycle read txns), stats. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "raftlog/raftlog_int.h"

/* Checks the meta records and both ends of the log against the invariant (raftlog.h). */
static int check_log(kv_raftlog *l, MDB_txn *txn)
{
    struct raft_hard_state hs;
    struct raft_snapshot_meta m;
    raft_index first, last;
    int rc = kv_rl_hs_get(l, txn, &hs);
    if (rc && rc != -ENOENT)
        return rc;
    rc = kv_rl_snap_get(l, txn, &m);
    if (rc && rc != -ENOENT)
        return rc;
    rc = kv_rl_first_key(l, txn, &first);
    if (rc == -ENOENT)
        return 0;
    if (rc || (rc = kv_rl_last_key(l, txn, &last)))
        return rc;
    if (first != m.index + 1 || last < first)
        return -EBADMSG;
    raft_index ends[2] = {first, last};
    for (int i = 0; i < 2; i++) {
        uint8_t kb[8];
        kv_put_be64(kb, ends[i]);
        MDB_val k = {8, kb}, v;
        struct raft_entry e;
        if ((rc = kv_raftlog_mdb_err(mdb_get(txn, l->rlog, &k, &v))) ||
            (rc = kv_rl_entry_decode(&k, &v, &e)))
            return rc == -ENOENT ? -EBADMSG : rc;
    }
    return 0;
}

static const struct raft_storage vtable;

int kv_raftlog_open(kv_raftlog **out, MDB_env *env)
{
    MDB_txn *txn = NULL;
    long n_conf = -1, n_scanned = -1;
    int rc;
    *out = NULL;
    kv_raftlog *l = calloc(1, sizeof *l);
    if (!l)
        return -ENOMEM;
    l->env = env;
    l->vt = vtable;
    l->vt.ctx = l;
    if ((rc = kv_raftlog_mdb_err(mdb_txn_begin(env, NULL, 0, &txn))))
        goto fail;
    if ((rc = kv_raftlog_mdb_err(mdb_dbi_open(txn, "rlog", MDB_CREATE, &l->rlog))) ||
        (rc = kv_raftlog_mdb_err(mdb_dbi_open(txn, "rmeta", MDB_CREATE, &l->rmeta))) ||
        (rc = kv_rl_conf_dbi(l, txn)) || (rc = check_log(l, txn)) ||
        (rc = kv_rl_conf_upgrade(l, txn, &n_conf, &n_scanned)))
        goto fail;
    rc = kv_raftlog_mdb_err(mdb_txn_commit(txn));
    txn = NULL;
    if (rc)
        goto fail;
    if (n_scanned > 0) /* not for a fresh (empty) log */
        fprintf(stderr, "kvd: raft log: indexed %ld configuration entries (one-time upgrade)\n",
                n_conf);
    *out = l;
    return 0;
fail:
    if (txn)
        mdb_txn_abort(txn);
    free(l);
    return rc;
}

void kv_raftlog_detach(kv_raftlog *l)
{
    kv_raftlog_end_cycle(l);
    for (size_t i = 0; i < l->n_spare; i++)
        mdb_txn_abort(l->spare[i]);
    l->n_spare = 0;
}

int kv_raftlog_reattach(kv_raftlog *l, MDB_env *env)
{
    MDB_txn *txn = NULL;
    kv_raftlog_detach(l);
    l->env = env;
    int rc = kv_raftlog_mdb_err(mdb_txn_begin(env, NULL, 0, &txn));
    if (rc)
        return rc;
    if ((rc = kv_raftlog_mdb_err(mdb_dbi_open(txn, "rlog", MDB_CREATE, &l->rlog))) ||
        (rc = kv_raftlog_mdb_err(mdb_dbi_open(txn, "rmeta", MDB_CREATE, &l->rmeta))) ||
        (rc = kv_rl_conf_dbi(l, txn))) {
        mdb_txn_abort(txn);
        return rc;
    }
    return kv_raftlog_mdb_err(mdb_txn_commit(txn));
}

void kv_raftlog_close(kv_raftlog *l)
{
    if (!l)
        return;
    kv_raftlog_end_cycle(l);
    for (size_t i = 0; i < l->n_spare; i++)
        mdb_txn_abort(l->spare[i]);
    free(l->retired);
    free(l);
}

const struct raft_storage *kv_raftlog_storage(kv_raftlog *l)
{
    return &l->vt;
}

int kv_raftlog_error(const kv_raftlog *l)
{
    return l->err;
}

static void release(kv_raftlog *l, MDB_txn *t)
{
    if (l->n_spare < KV_RAFTLOG_SPARE) {
        mdb_txn_reset(t);
        l->spare[l->n_spare++] = t;
    } else {
        mdb_txn_abort(t);
    }
}

void kv_raftlog_rotate(kv_raftlog *l)
{
    if (!l->cur)
        return;
    if (l->n_retired == l->cap_retired) {
        size_t cap = l->cap_retired ? 2 * l->cap_retired : 4;
        MDB_txn **v = realloc(l->retired, cap * sizeof *v);
        if (!v) {
            /* Cannot keep it: keep reading through it (stale but valid) rather than free
             * data raft still references; the next end_cycle releases it. */
            if (!l->err)
                l->err = -ENOMEM;
            return;
        }
        l->retired = v;
        l->cap_retired = cap;
    }
    l->retired[l->n_retired++] = l->cur;
    l->cur = NULL;
}

void kv_raftlog_end_cycle(kv_raftlog *l)
{
    for (size_t i = 0; i < l->n_retired; i++)
        release(l, l->retired[i]);
    l->n_retired = 0;
    if (l->cur)
        release(l, l->cur);
    l->cur = NULL;
}

static int latch(kv_raftlog *l, int rc)
{
    if (rc && rc != RAFT_ECOMPACTED && rc != RAFT_EUNAVAILABLE && !l->err)
        l->err = rc;
    return rc;
}

/* The read txn of the current cycle (opened or renewed lazily). */
static int rtxn(kv_raftlog *l, MDB_txn **out)
{
    int rc = 0;
    if (!l->cur) {
        if (l->n_spare) {
            MDB_txn *t = l->spare[--l->n_spare];
            if ((rc = mdb_txn_renew(t))) {
                mdb_txn_abort(t);
                return latch(l, kv_raftlog_mdb_err(rc));
            }
            l->cur = t;
        } else if ((rc = mdb_txn_begin(l->env, NULL, MDB_RDONLY, &l->cur))) {
            l->cur = NULL;
            return latch(l, kv_raftlog_mdb_err(rc));
        }
    }
    *out = l->cur;
    return 0;
}

/* Snapshot meta through the cycle's read txn (zeroes when none). */
static int cur_snap(kv_raftlog *l, MDB_txn **txn, struct raft_snapshot_meta *m)
{
    int rc = rtxn(l, txn);
    if (rc) {
        memset(m, 0, sizeof *m);
        return rc;
    }
    rc = kv_rl_snap_get(l, *txn, m);
    return rc == -ENOENT ? 0 : latch(l, rc);
}

static int st_initial_state(void *ctx, struct raft_hard_state *hs)
{
    kv_raftlog *l = ctx;
    MDB_txn *txn = NULL;
    memset(hs, 0, sizeof *hs);
    int rc = rtxn(l, &txn);
    if (rc)
        return rc;
    rc = kv_rl_hs_get(l, txn, hs);
    return rc == -ENOENT ? 0 : latch(l, rc);
}

static raft_index st_first_index(void *ctx)
{
    kv_raftlog *l = ctx;
    MDB_txn *txn = NULL;
    struct raft_snapshot_meta m;
    cur_snap(l, &txn, &m);
    return m.index + 1;
}

static raft_index st_last_index(void *ctx)
{
    kv_raftlog *l = ctx;
    MDB_txn *txn = NULL;
    struct raft_snapshot_meta m;
    raft_index last;
    if (cur_snap(l, &txn, &m))
        return m.index;
    int rc = kv_rl_last_key(l, txn, &last);
    if (rc) {
        if (rc != -ENOENT)
            latch(l, rc);
        return m.index;
    }
    return last;
}

static int st_term(void *ctx, raft_index i, raft_term *term)
{
    kv_raftlog *l = ctx;
    MDB_txn *txn = NULL;
    struct raft_snapshot_meta m;
    int rc = cur_snap(l, &txn, &m);
    if (rc)
        return rc;
    if (i == m.index) {
        *term = m.term;
        return 0;
    }
    if (i < m.index)
        return RAFT_ECOMPACTED;
    uint8_t kb[8];
    kv_put_be64(kb, i);
    MDB_val k = {8, kb}, v;
    struct raft_entry e;
    rc = mdb_get(txn, l->rlog, &k, &v);
    if (rc == MDB_NOTFOUND) {
        raft_index last;
        rc = kv_rl_last_key(l, txn, &last);
        if (rc == -ENOENT || (rc == 0 && i > last))
            return RAFT_EUNAVAILABLE;
        return latch(l, rc ? rc : -EBADMSG); /* a hole in the log */
    }
    if (rc)
        return latch(l, kv_raftlog_mdb_err(rc));
    if ((rc = kv_rl_entry_decode(&k, &v, &e)))
        return latch(l, rc);
    *term = e.term;
    return 0;
}

static int st_entries(void *ctx, raft_index lo, raft_index hi, size_t max_bytes,
                      struct raft_entry *out, size_t *n)
{
    kv_raftlog *l = ctx;
    MDB_txn *txn = NULL;
    MDB_cursor *c = NULL;
    struct raft_snapshot_meta m;
    raft_index last;
    size_t bytes = 0;
    *n = 0;
    int rc = cur_snap(l, &txn, &m);
    if (rc)
        return rc;
    if (lo >= hi)
        return 0;
    if (lo <= m.index)
        return RAFT_ECOMPACTED;
    rc = kv_rl_last_key(l, txn, &last);
    if (rc == -ENOENT || (rc == 0 && hi - 1 > last))
        return RAFT_EUNAVAILABLE;
    if (rc)
        return latch(l, rc);
    if ((rc = mdb_cursor_open(txn, l->rlog, &c)))
        return latch(l, kv_raftlog_mdb_err(rc));
    uint8_t kb[8];
    kv_put_be64(kb, lo);
    MDB_val k = {8, kb}, v;
    MDB_cursor_op op = MDB_SET_KEY;
    for (raft_index i = lo; i < hi; i++, op = MDB_NEXT) {
        struct raft_entry e;
        rc = mdb_cursor_get(c, &k, &v, op);
        if (rc) {
            rc = rc == MDB_NOTFOUND ? -EBADMSG : kv_raftlog_mdb_err(rc); /* a hole */
            goto out;
        }
        if ((rc = kv_rl_entry_decode(&k, &v, &e)))
            goto out;
        if (e.index != i) {
            rc = -EBADMSG;
            goto out;
        }
        if (*n > 0 && bytes + e.len > max_bytes)
            break;
        bytes += e.len;
        out[(*n)++] = e;
    }
    rc = 0;
out:
    mdb_cursor_close(c);
    if (rc)
        *n = 0;
    return latch(l, rc);
}

static int st_snapshot(void *ctx, struct raft_snapshot *snap)
{
    kv_raftlog *l = ctx;
    MDB_txn *txn = NULL;
    memset(snap, 0, sizeof *snap);
    return cur_snap(l, &txn, &snap->meta);
}

static int st_next_conf(void *ctx, raft_index lo, raft_index hi, raft_index *idx)
{
    kv_raftlog *l = ctx;
    MDB_txn *txn = NULL;
    *idx = 0;
    int rc = rtxn(l, &txn);
    if (rc)
        return rc;
    return latch(l, kv_rl_conf_next(l, txn, lo, hi, idx));
}

static const struct raft_storage vtable = {
    .initial_state = st_initial_state,
    .first_index = st_first_index,
    .last_index = st_last_index,
    .term = st_term,
    .entries = st_entries,
    .snapshot = st_snapshot,
    .next_conf = st_next_conf,
};

int kv_raftlog_is_empty(kv_raftlog *l)
{
    MDB_txn *txn = NULL;
    struct raft_hard_state hs;
    struct raft_snapshot_meta m;
    raft_index first;
    int rc = kv_raftlog_mdb_err(mdb_txn_begin(l->env, NULL, MDB_RDONLY, &txn));
    if (rc)
        return rc;
    int hrc = kv_rl_hs_get(l, txn, &hs);
    int src = kv_rl_snap_get(l, txn, &m);
    int frc = kv_rl_first_key(l, txn, &first);
    mdb_txn_abort(txn);
    if (hrc == -ENOENT && src == -ENOENT && frc == -ENOENT)
        return 1;
    if (hrc && hrc != -ENOENT)
        return hrc;
    if (src && src != -ENOENT)
        return src;
    if (frc && frc != -ENOENT)
        return frc;
    return 0;
}

int kv_raftlog_stats(kv_raftlog *l, raft_index *first, raft_index *last, uint64_t *bytes)
{
    MDB_txn *txn = NULL;
    MDB_stat st;
    struct raft_snapshot_meta m;
    int rc = kv_raftlog_mdb_err(mdb_txn_begin(l->env, NULL, MDB_RDONLY, &txn));
    if (rc)
        return rc;
    rc = kv_rl_snap_get(l, txn, &m);
    if (rc && rc != -ENOENT)
        goto out;
    *first = m.index + 1;
    rc = kv_rl_last_key(l, txn, last);
    if (rc == -ENOENT)
        *last = m.index;
    else if (rc)
        goto out;
    if ((rc = kv_raftlog_mdb_err(mdb_stat(txn, l->rlog, &st))))
        goto out;
    *bytes = (uint64_t)st.ms_psize * (st.ms_branch_pages + st.ms_leaf_pages + st.ms_overflow_pages);
    rc = 0;
out:
    mdb_txn_abort(txn);
    return rc;
}
