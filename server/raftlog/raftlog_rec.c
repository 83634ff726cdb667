/* raftlog_rec: the byte layouts of "rlog" and "rmeta" records, with their CRCs (raftlog.h). */
#include <errno.h>
#include <string.h>

#include "base/lmdb_err.h"
#include "base/snap_meta.h"
#include "common/crc32c.h"
#include "raftlog/raftlog_int.h"

#define HS_LEN (4 + 3 * 8)

int kv_raftlog_mdb_err(int rc)
{
    return kv_lmdb_err(rc); /* server/base/lmdb_err.h */
}

static uint32_t entry_crc(const uint8_t *key8, const uint8_t *rest, size_t len)
{
    return kv_crc32c(kv_crc32c(0, key8, 8), rest, len);
}

void kv_rl_entry_encode(const struct raft_entry *e, uint8_t *v)
{
    uint8_t key[8];
    kv_put_be64(key, e->index);
    kv_put_be64(v + 4, e->term);
    v[12] = e->type;
    if (e->len)
        memcpy(v + KV_RLOG_HDR, e->data, e->len);
    kv_put_be32(v, entry_crc(key, v + 4, KV_RLOG_HDR - 4 + e->len));
}

int kv_rl_entry_decode(const MDB_val *key, const MDB_val *val, struct raft_entry *e)
{
    if (key->mv_size != 8 || val->mv_size < KV_RLOG_HDR)
        return -EBADMSG;
    const uint8_t *v = val->mv_data;
    if (kv_be32(v) != entry_crc(key->mv_data, v + 4, val->mv_size - 4))
        return -EBADMSG;
    e->index = kv_be64(key->mv_data);
    e->term = kv_be64(v + 4);
    e->type = v[12];
    e->len = val->mv_size - KV_RLOG_HDR;
    e->data = e->len ? v + KV_RLOG_HDR : NULL;
    return 0;
}

static uint32_t meta_crc(const char *name, const uint8_t *rest, size_t len)
{
    return kv_crc32c(kv_crc32c(0, name, strlen(name)), rest, len);
}

static int meta_get(kv_raftlog *l, MDB_txn *txn, const char *name, MDB_val *v)
{
    MDB_val k = {strlen(name), (void *)name};
    int rc = mdb_get(txn, l->rmeta, &k, v);
    if (rc)
        return kv_raftlog_mdb_err(rc);
    if (v->mv_size < 4)
        return -EBADMSG;
    const uint8_t *p = v->mv_data;
    if (kv_be32(p) != meta_crc(name, p + 4, v->mv_size - 4))
        return -EBADMSG;
    return 0;
}

static int meta_put(kv_raftlog *l, MDB_txn *txn, const char *name, uint8_t *buf, size_t len)
{
    kv_put_be32(buf, meta_crc(name, buf + 4, len - 4));
    MDB_val k = {strlen(name), (void *)name}, v = {len, buf};
    return kv_raftlog_mdb_err(mdb_put(txn, l->rmeta, &k, &v, 0));
}

int kv_rl_hs_get(kv_raftlog *l, MDB_txn *txn, struct raft_hard_state *hs)
{
    MDB_val v;
    memset(hs, 0, sizeof *hs);
    int rc = meta_get(l, txn, "hs", &v);
    if (rc)
        return rc;
    if (v.mv_size != HS_LEN)
        return -EBADMSG;
    const uint8_t *p = v.mv_data;
    hs->term = kv_be64(p + 4);
    hs->vote = kv_be64(p + 12);
    hs->commit = kv_be64(p + 20);
    return 0;
}

int kv_rl_hs_put(kv_raftlog *l, MDB_txn *txn, const struct raft_hard_state *hs)
{
    uint8_t b[HS_LEN];
    kv_put_be64(b + 4, hs->term);
    kv_put_be64(b + 12, hs->vote);
    kv_put_be64(b + 20, hs->commit);
    return meta_put(l, txn, "hs", b, sizeof b);
}

int kv_rl_snap_get(kv_raftlog *l, MDB_txn *txn, struct raft_snapshot_meta *m)
{
    MDB_val v;
    memset(m, 0, sizeof *m);
    int rc = meta_get(l, txn, "snap", &v);
    if (rc)
        return rc;
    if (v.mv_size < 4)
        return -EBADMSG;
    return kv_snap_meta_get((const uint8_t *)v.mv_data + 4, v.mv_size - 4, m);
}

int kv_rl_snap_put(kv_raftlog *l, MDB_txn *txn, const struct raft_snapshot_meta *m)
{
    if (m->conf.n_voters > RAFT_MAX_NODES || m->conf.n_learners > RAFT_MAX_NODES)
        return -EINVAL;
    uint8_t b[4 + KV_SNAP_META_MAX];
    kv_snap_meta_put(b + 4, m);
    return meta_put(l, txn, "snap", b, 4 + kv_snap_meta_size(m));
}

static int edge_key(kv_raftlog *l, MDB_txn *txn, MDB_cursor_op op, raft_index *idx)
{
    MDB_cursor *c;
    MDB_val k, v;
    int rc = mdb_cursor_open(txn, l->rlog, &c);
    if (rc)
        return kv_raftlog_mdb_err(rc);
    rc = mdb_cursor_get(c, &k, &v, op);
    mdb_cursor_close(c);
    if (rc)
        return kv_raftlog_mdb_err(rc);
    if (k.mv_size != 8)
        return -EBADMSG;
    *idx = kv_be64(k.mv_data);
    return 0;
}

int kv_rl_last_key(kv_raftlog *l, MDB_txn *txn, raft_index *idx)
{
    return edge_key(l, txn, MDB_LAST, idx);
}

int kv_rl_first_key(kv_raftlog *l, MDB_txn *txn, raft_index *idx)
{
    return edge_key(l, txn, MDB_FIRST, idx);
}

int kv_rl_mark_get(kv_raftlog *l, MDB_txn *txn, const char *name)
{
    MDB_val v;
    int rc = meta_get(l, txn, name, &v);
    if (rc)
        return rc;
    return v.mv_size == 4 ? 0 : -EBADMSG;
}

int kv_rl_mark_put(kv_raftlog *l, MDB_txn *txn, const char *name)
{
    uint8_t b[4];
    return meta_put(l, txn, name, b, sizeof b);
}
