/* identity_meta: the member's identity persisted in the store (see store.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/crc32c.h"
#include "mvcc/store_int.h"
#include "base/lmdb_valcheck.h"

#define ID_KEY "identity"
#define ID_FIXED (4 + 8 + 8 + 1)

/* 0, -ENOENT (no record), -EBADMSG (corrupt), other negative on storage error. */
static int id_read(kv_store *s, MDB_txn *txn, kv_store_identity *out)
{
    MDB_val k = {strlen(ID_KEY), (void *)ID_KEY}, v;
    int rc = mdb_get(txn, s->meta, &k, &v);
    if (rc)
        return kv_mdb_err(rc);
    if (!kv_mdb_val_sane(txn, &v, ID_FIXED + sizeof(out->name)) || v.mv_size < ID_FIXED)
        return -EBADMSG;
    const uint8_t *p = v.mv_data;
    size_t nlen = p[20];
    if (v.mv_size != ID_FIXED + nlen || nlen >= sizeof(out->name) ||
        kv_be32(p) != kv_crc32c(0, p + 4, v.mv_size - 4))
        return -EBADMSG;
    memset(out, 0, sizeof(*out));
    out->member_id = kv_be64(p + 4);
    out->cluster_id = kv_be64(p + 12);
    memcpy(out->name, p + 21, nlen);
    return 0;
}

static int id_write(kv_store *s, MDB_txn *txn, const kv_store_identity *id)
{
    uint8_t buf[ID_FIXED + sizeof(id->name)];
    size_t nlen = strnlen(id->name, sizeof(id->name) - 1);
    kv_put_be64(buf + 4, id->member_id);
    kv_put_be64(buf + 12, id->cluster_id);
    buf[20] = (uint8_t)nlen;
    memcpy(buf + 21, id->name, nlen);
    kv_put_be32(buf, kv_crc32c(0, buf + 4, ID_FIXED - 4 + nlen));
    MDB_val k = {strlen(ID_KEY), (void *)ID_KEY}, v = {ID_FIXED + nlen, buf};
    return kv_mdb_err(mdb_put(txn, s->meta, &k, &v, 0));
}

int kv_store_identity_check(kv_store *s, const kv_store_identity *want, kv_store_identity *have,
                            int store_if_missing)
{
    if (!s || !want || !have)
        return -EINVAL;
    if (s->batch.open)
        return -EBUSY;
    MDB_txn *txn;
    int rc = kv_mdb_err(mdb_txn_begin(s->env, NULL, 0, &txn));
    if (rc)
        return rc;
    rc = id_read(s, txn, have);
    if (rc == -ENOENT) {
        /* First start of this data dir (or one written before identities were stored). */
        *have = *want;
        if (!store_if_missing) {
            mdb_txn_abort(txn);
            return 1;
        }
        rc = id_write(s, txn, want);
        if (rc == 0) {
            rc = kv_mdb_err(mdb_txn_commit(txn));
            return rc == 0 ? 1 : rc;
        }
    } else if (rc == 0 &&
               (have->member_id != want->member_id || have->cluster_id != want->cluster_id)) {
        rc = -EEXIST;
    }
    mdb_txn_abort(txn);
    return rc;
}
