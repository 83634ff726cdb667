/* record: encodings of the MVCC store's LMDB records and their checksums (see store.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/lmdb_err.h"
#include "common/crc32c.h"
#include "mvcc/store_int.h"
#include "base/lmdb_valcheck.h"

void kv_revkey(uint8_t out[KV_REVKEY_LEN], int64_t main, int64_t sub)
{
    kv_put_be64(out, (uint64_t)main);
    kv_put_be64(out + 8, (uint64_t)sub);
}

void kv_dup_encode(uint8_t out[KV_DUP_LEN], const kv_ent *e)
{
    kv_revkey(out, e->main, e->sub);
    out[16] = e->tomb ? KV_DUP_TOMBSTONE : 0;
}

void kv_dup_decode(const uint8_t *p, kv_ent *e)
{
    e->main = (int64_t)kv_be64(p);
    e->sub = (int64_t)kv_be64(p + 8);
    e->tomb = (p[16] & KV_DUP_TOMBSTONE) != 0;
}

int kv_mdb_err(int rc)
{
    return kv_lmdb_err(rc); /* server/base/lmdb_err.h */
}

static uint32_t rec_crc(const uint8_t *key16, uint8_t flags, const uint8_t *payload, size_t plen)
{
    uint32_t c = kv_crc32c(0, key16, KV_REVKEY_LEN);
    c = kv_crc32c(c, &flags, 1);
    return kv_crc32c(c, payload, plen);
}

int kv_rec_put(kv_store *s, MDB_txn *txn, int64_t main, int64_t sub, bool tomb,
               const Mvccpb__KeyValue *kv)
{
    uint8_t key[KV_REVKEY_LEN];
    kv_revkey(key, main, sub);
    size_t plen = mvccpb__key_value__get_packed_size(kv);
    MDB_val k = {KV_REVKEY_LEN, key}, v = {5 + plen, NULL};
    int rc = mdb_put(txn, s->rev, &k, &v, MDB_RESERVE);
    if (rc)
        return kv_mdb_err(rc);
    uint8_t *p = v.mv_data;
    uint8_t flags = tomb ? KV_DUP_TOMBSTONE : 0;
    p[4] = flags;
    mvccpb__key_value__pack(kv, p + 5);
    kv_put_be32(p, rec_crc(key, flags, p + 5, plen));
    return 0;
}

bool kv_rec_verify(const uint8_t *key16, const uint8_t *val, size_t vlen)
{
    if (vlen < 5)
        return false;
    return kv_be32(val) == rec_crc(key16, val[4], val + 5, vlen - 5);
}

int kv_rec_load(kv_store *s, MDB_txn *txn, const kv_ent *e, const uint8_t *key, size_t klen,
                Mvccpb__KeyValue **out)
{
    uint8_t rk[KV_REVKEY_LEN];
    kv_revkey(rk, e->main, e->sub);
    MDB_val k = {KV_REVKEY_LEN, rk}, v;
    int rc = mdb_get(txn, s->rev, &k, &v);
    if (rc)
        return rc == MDB_NOTFOUND ? -EBADMSG : kv_mdb_err(rc);
    /* A size that does not fit the file is corruption, not something to read. */
    if (!kv_mdb_val_sane(txn, &v, KV_MDB_VAL_MAX))
        return -EBADMSG;
    const uint8_t *p = v.mv_data;
    if (!kv_rec_verify(rk, p, v.mv_size))
        return -EBADMSG;
    if (((p[4] & KV_DUP_TOMBSTONE) != 0) != e->tomb)
        return -EBADMSG;
    Mvccpb__KeyValue *kv = mvccpb__key_value__unpack(NULL, v.mv_size - 5, p + 5);
    if (!kv)
        return -EBADMSG;
    if (kv->mod_revision != e->main ||
        (key && (kv->key.len != klen || (klen && memcmp(kv->key.data, key, klen) != 0)))) {
        mvccpb__key_value__free_unpacked(kv, NULL);
        return -EBADMSG;
    }
    *out = kv;
    return 0;
}

static int meta_get(kv_store *s, MDB_txn *txn, const char *name, uint8_t *buf, size_t len)
{
    MDB_val k = {strlen(name), (void *)name}, v;
    int rc = mdb_get(txn, s->meta, &k, &v);
    if (rc)
        return kv_mdb_err(rc);
    const uint8_t *p = v.mv_data;
    if (v.mv_size != 4 + len || !kv_mdb_val_sane(txn, &v, 4 + len) ||
        kv_be32(p) != kv_crc32c(0, p + 4, len))
        return -EBADMSG;
    memcpy(buf, p + 4, len);
    return 0;
}

static int meta_set(kv_store *s, MDB_txn *txn, const char *name, const uint8_t *buf, size_t len)
{
    uint8_t tmp[64];
    kv_put_be32(tmp, kv_crc32c(0, buf, len));
    memcpy(tmp + 4, buf, len);
    MDB_val k = {strlen(name), (void *)name}, v = {4 + len, tmp};
    return kv_mdb_err(mdb_put(txn, s->meta, &k, &v, 0));
}

int kv_meta_read(kv_store *s, MDB_txn *txn, kv_meta *m)
{
    uint8_t b[32];
    int rc = meta_get(s, txn, "state", b, sizeof b);
    if (rc)
        return rc;
    m->applied = kv_be64(b);
    m->rev = (int64_t)kv_be64(b + 8);
    m->compact_rev = (int64_t)kv_be64(b + 16);
    m->keys = kv_be64(b + 24);
    return 0;
}

int kv_meta_write(kv_store *s, MDB_txn *txn, const kv_meta *m)
{
    uint8_t b[32];
    kv_put_be64(b, m->applied);
    kv_put_be64(b + 8, (uint64_t)m->rev);
    kv_put_be64(b + 16, (uint64_t)m->compact_rev);
    kv_put_be64(b + 24, m->keys);
    return meta_set(s, txn, "state", b, sizeof b);
}

int kv_format_read(kv_store *s, MDB_txn *txn, uint32_t *version)
{
    uint8_t b[4];
    int rc = meta_get(s, txn, "format", b, sizeof b);
    if (rc)
        return rc;
    *version = kv_be32(b);
    return 0;
}

int kv_format_write(kv_store *s, MDB_txn *txn, uint32_t version)
{
    uint8_t b[4];
    kv_put_be32(b, version);
    return meta_set(s, txn, "format", b, sizeof b);
}
