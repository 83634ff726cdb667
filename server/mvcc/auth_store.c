/* auth_store: the "auth" LMDB database (see auth_store.h). */
#include "mvcc/auth_store.h"

#include <errno.h>
#include <openssl/sha.h>
#include <stdlib.h>
#include <string.h>

#include "common/crc32c.h"
#include "mvcc/store_int.h"

#define KEY_MAX (1 + 511) /* LMDB's default key limit */

/* A name that fits LMDB's key limit is the key itself: kind | name. A longer one (etcd
 * accepts user and role names of any length) is stored under the "long" kind (the kind byte
 * in lower case) | its first LONG_PREFIX bytes | SHA-256 of the whole name; its record holds
 * the name (authpb.User/Role field 1), which kv_auth_walk reads back. */
#define LONG_PREFIX 446
#define LONG_KEY (1 + LONG_PREFIX + SHA256_DIGEST_LENGTH)

static uint8_t long_kind(char kind)
{
    return (uint8_t)(kind | 0x20);
}

static int make_key(uint8_t *k, char kind, const void *name, size_t nlen, size_t *klen)
{
    if (nlen == 0 || nlen > KV_AUTH_MAX_NAME)
        return -EINVAL;
    if (1 + nlen <= KEY_MAX - 1) {
        k[0] = (uint8_t)kind;
        memcpy(k + 1, name, nlen);
        *klen = 1 + nlen;
        return 0;
    }
    if (kind == KV_AUTH_META)
        return -EINVAL;
    k[0] = long_kind(kind);
    memcpy(k + 1, name, LONG_PREFIX);
    SHA256(name, nlen, k + 1 + LONG_PREFIX);
    *klen = LONG_KEY;
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

/* The name of a record whose key is under the long kind: field 1 (bytes) of the packed
 * authpb.User / authpb.Role payload. 0 or -EBADMSG. */
static int record_name(const uint8_t *p, size_t n, const uint8_t **name, size_t *nlen)
{
    if (n < 2 || p[0] != 0x0a) /* field 1, length-delimited: written first by protobuf-c */
        return -EBADMSG;
    uint64_t len = 0;
    size_t i = 1;
    for (int shift = 0; i < n && shift < 64; shift += 7) {
        len |= (uint64_t)(p[i] & 0x7f) << shift;
        if (!(p[i++] & 0x80))
            break;
        if (i == n)
            return -EBADMSG;
    }
    if (len == 0 || len > n - i)
        return -EBADMSG;
    *name = p + i;
    *nlen = (size_t)len;
    return 0;
}

/* One range of the walk: the records whose key starts with byte `kind`. */
typedef struct walk_cur {
    MDB_cursor *c;
    uint8_t kind;
    int live, err;
    const uint8_t *name, *val;
    size_t nlen, vlen;
} walk_cur;

static void walk_step(const kv_auth_tx *tx, walk_cur *w, MDB_cursor_op op)
{
    uint8_t first = w->kind;
    MDB_val k = {1, &first}, v;
    int g = mdb_cursor_get(w->c, &k, &v, op);
    w->live = 0;
    if (g != 0) {
        if (g != MDB_NOTFOUND)
            w->err = kv_mdb_err(g);
        return;
    }
    const uint8_t *kp = k.mv_data;
    if (k.mv_size < 1 || kp[0] != w->kind)
        return;
    if (!kv_mdb_val_sane(tx->txn, &v, (size_t)64 << 20) || verify(&k, &v)) {
        w->err = -EBADMSG;
        return;
    }
    w->val = (const uint8_t *)v.mv_data + 4;
    w->vlen = v.mv_size - 4;
    if (w->kind & 0x20) { /* long names: the record holds the name */
        if (k.mv_size != LONG_KEY || record_name(w->val, w->vlen, &w->name, &w->nlen) ||
            w->nlen < KEY_MAX - 1) {
            w->err = -EBADMSG;
            return;
        }
    } else {
        w->name = kp + 1;
        w->nlen = k.mv_size - 1;
    }
    w->live = 1;
}

static int name_cmp(const uint8_t *a, size_t al, const uint8_t *b, size_t bl)
{
    int c = memcmp(a, b, al < bl ? al : bl);
    return c ? c : (al > bl) - (al < bl);
}

int kv_auth_walk(const kv_auth_tx *tx, char kind,
                 int (*fn)(void *arg, const uint8_t *name, size_t nlen, const uint8_t *val,
                           size_t vlen),
                 void *arg)
{
    /* Two ranges merged by name: names that fit a key, and the long ones (kind in lower
     * case, META has none). Long names that share their first LONG_PREFIX bytes come in
     * hash order among themselves. */
    walk_cur w[2] = {{.kind = (uint8_t)kind}, {.kind = long_kind(kind)}};
    int nw = kind == KV_AUTH_META ? 1 : 2, rc = 0;
    for (int i = 0; i < nw; i++) {
        rc = kv_mdb_err(mdb_cursor_open(tx->txn, tx->s->auth, &w[i].c));
        if (rc)
            goto out;
        walk_step(tx, &w[i], MDB_SET_RANGE);
    }
    while (rc == 0) {
        if ((rc = w[0].err) || (nw > 1 && (rc = w[1].err)))
            break;
        int pick = -1;
        if (w[0].live)
            pick = 0;
        if (nw > 1 && w[1].live &&
            (pick < 0 || name_cmp(w[1].name, w[1].nlen, w[0].name, w[0].nlen) < 0))
            pick = 1;
        if (pick < 0)
            break;
        rc = fn(arg, w[pick].name, w[pick].nlen, w[pick].val, w[pick].vlen);
        if (rc != 0)
            break;
        walk_step(tx, &w[pick], MDB_NEXT);
        /* fn may have written (a role stripped from users): the other cursor's record may
         * have moved inside a dirty page, so read it again (LMDB keeps the cursor on it) */
        if (nw > 1 && w[1 - pick].live)
            walk_step(tx, &w[1 - pick], MDB_GET_CURRENT);
    }
out:
    for (int i = 0; i < nw; i++)
        if (w[i].c)
            mdb_cursor_close(w[i].c);
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
        *rev = kv_be64(v);
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
    kv_put_be64(b, r + 1);
    if ((rc = kv_auth_put(tx, KV_AUTH_META, "revision", 8, b, 8)))
        return rc;
    if (rev)
        *rev = r + 1;
    return 0;
}
