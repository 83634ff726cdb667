/* auth_store: the "auth" LMDB database (see auth_store.h). */
#include "mvcc/auth_store.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "mvcc/crc32c.h"
#include "mvcc/store_int.h"

#define KEY_MAX (1 + 511) /* LMDB's default key limit */

static int make_key(uint8_t *k, char kind, const void *name, size_t nlen, size_t *klen)
{
    if (nlen == 0 || 1 + nlen > KEY_MAX)
        return -EINVAL;
    k[0] = (uint8_t)kind;
    memcpy(k + 1, name, nlen);
    *klen = 1 + nlen;
    return 0;
}

static uint32_t rec_crc(const uint8_t *k, size_t klen, const uint8_t *p, size_t plen)
{
    return kv_crc32c(kv_crc32c(0, k, klen), p, plen);
}

static int verify(const MDB_val *k, const MDB_val *v)
{
    if (v->mv_size < 4)
        return -EBADMSG;
    const uint8_t *p = v->mv_data;
    uint32_t want = ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
    return rec_crc(k->mv_data, k->mv_size, p + 4, v->mv_size - 4) == want ? 0 : -EBADMSG;
}

void kv_ks_auth_tx(struct kv_ks *ks, kv_auth_tx *out)
{
    out->s = ks->s;
    out->txn = ks->w.txn;
    out->read = 0;
}

int kv_store_auth_read_begin(struct kv_store *s, kv_auth_tx *out)
{
    MDB_txn *txn;
    pthread_rwlock_rdlock(&s->swap);
    int rc = kv_mdb_err(mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn));
    if (rc) {
        pthread_rwlock_unlock(&s->swap);
        return rc;
    }
    out->s = s;
    out->txn = txn;
    out->read = 1;
    return 0;
}

void kv_store_auth_read_end(kv_auth_tx *tx)
{
    if (!tx || !tx->read || !tx->txn)
        return;
    mdb_txn_abort(tx->txn);
    tx->txn = NULL;
    pthread_rwlock_unlock(&tx->s->swap);
}

int kv_auth_get(const kv_auth_tx *tx, char kind, const void *name, size_t nlen, uint8_t **val,
                size_t *vlen)
{
    uint8_t kb[KEY_MAX];
    size_t klen;
    int rc = make_key(kb, kind, name, nlen, &klen);
    if (rc)
        return rc;
    MDB_val k = {klen, kb}, v;
    int g = mdb_get(tx->txn, tx->s->auth, &k, &v);
    if (g == MDB_NOTFOUND)
        return -ENOENT;
    if ((rc = kv_mdb_err(g)))
        return rc;
    if (!kv_mdb_val_sane(tx->txn, &v, (size_t)64 << 20) || (rc = verify(&k, &v)))
        return -EBADMSG;
    size_t n = v.mv_size - 4;
    uint8_t *p = malloc(n ? n : 1);
    if (!p)
        return -ENOMEM;
    memcpy(p, (const uint8_t *)v.mv_data + 4, n);
    *val = p;
    *vlen = n;
    return 0;
}

int kv_auth_put(const kv_auth_tx *tx, char kind, const void *name, size_t nlen, const uint8_t *val,
                size_t vlen)
{
    if (tx->read)
        return -EPERM;
    uint8_t kb[KEY_MAX];
    size_t klen;
    int rc = make_key(kb, kind, name, nlen, &klen);
    if (rc)
        return rc;
    MDB_val k = {klen, kb}, v = {vlen + 4, NULL};
    if ((rc = kv_mdb_err(mdb_put(tx->txn, tx->s->auth, &k, &v, MDB_RESERVE))))
        return rc;
    uint8_t *p = v.mv_data;
    uint32_t c = rec_crc(kb, klen, val, vlen);
    p[0] = (uint8_t)(c >> 24);
    p[1] = (uint8_t)(c >> 16);
    p[2] = (uint8_t)(c >> 8);
    p[3] = (uint8_t)c;
    if (vlen)
        memcpy(p + 4, val, vlen);
    return 0;
}

int kv_auth_del(const kv_auth_tx *tx, char kind, const void *name, size_t nlen)
{
    if (tx->read)
        return -EPERM;
    uint8_t kb[KEY_MAX];
    size_t klen;
    int rc = make_key(kb, kind, name, nlen, &klen);
    if (rc)
        return rc;
    MDB_val k = {klen, kb};
    int d = mdb_del(tx->txn, tx->s->auth, &k, NULL);
    return d == MDB_NOTFOUND ? -ENOENT : kv_mdb_err(d);
}

int kv_auth_walk(const kv_auth_tx *tx, char kind,
                 int (*fn)(void *arg, const uint8_t *name, size_t nlen, const uint8_t *val,
                           size_t vlen),
                 void *arg)
{
    MDB_cursor *c;
    int rc = kv_mdb_err(mdb_cursor_open(tx->txn, tx->s->auth, &c));
    if (rc)
        return rc;
    uint8_t first = (uint8_t)kind;
    MDB_val k = {1, &first}, v;
    int g;
    for (g = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE); g == 0 && rc == 0;
         g = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
        const uint8_t *kp = k.mv_data;
        if (k.mv_size < 1 || kp[0] != (uint8_t)kind)
            break;
        if (!kv_mdb_val_sane(tx->txn, &v, (size_t)64 << 20) || verify(&k, &v)) {
            rc = -EBADMSG;
            break;
        }
        rc = fn(arg, kp + 1, k.mv_size - 1, (const uint8_t *)v.mv_data + 4, v.mv_size - 4);
    }
    mdb_cursor_close(c);
    if (rc == 0 && g != 0 && g != MDB_NOTFOUND)
        rc = kv_mdb_err(g);
    return rc;
}

int kv_auth_get_enabled(const kv_auth_tx *tx, int *enabled)
{
    uint8_t *v;
    size_t n;
    int rc = kv_auth_get(tx, KV_AUTH_META, "enabled", 7, &v, &n);
    *enabled = 0;
    if (rc == -ENOENT)
        return 0;
    if (rc)
        return rc;
    *enabled = n == 1 && v[0] == 1;
    free(v);
    return 0;
}

int kv_auth_set_enabled(const kv_auth_tx *tx, int enabled)
{
    uint8_t b = enabled ? 1 : 0;
    return kv_auth_put(tx, KV_AUTH_META, "enabled", 7, &b, 1);
}

int kv_auth_get_revision(const kv_auth_tx *tx, uint64_t *rev)
{
    uint8_t *v;
    size_t n;
    *rev = 0;
    int rc = kv_auth_get(tx, KV_AUTH_META, "revision", 8, &v, &n);
    if (rc == -ENOENT)
        return 0;
    if (rc)
        return rc;
    if (n == 8)
        *rev = kv_be64_get(v);
    else
        rc = -EBADMSG;
    free(v);
    return rc;
}

int kv_auth_bump_revision(const kv_auth_tx *tx, uint64_t *rev)
{
    uint64_t r;
    int rc = kv_auth_get_revision(tx, &r);
    if (rc)
        return rc;
    uint8_t b[8];
    kv_be64_put(b, r + 1);
    if ((rc = kv_auth_put(tx, KV_AUTH_META, "revision", 8, b, 8)))
        return rc;
    if (rev)
        *rev = r + 1;
    return 0;
}
