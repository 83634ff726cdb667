/* index: walks and point lookups over the "kidx" database (see store.h, store_int.h). */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "mvcc/store_int.h"

static int keycmp(const uint8_t *a, size_t al, const uint8_t *b, size_t bl)
{
    size_t n = al < bl ? al : bl;
    int c = n ? memcmp(a, b, n) : 0;
    if (c)
        return c;
    return al < bl ? -1 : al > bl ? 1 : 0;
}

/* With c positioned on key k (any dup), finds the latest entry <= at_rev.
 * 0 found, -ENOENT none, < 0 error. probe may be c itself (c is then repositioned). */
static int probe_at(MDB_cursor *c, MDB_cursor *probe, MDB_val *k, int64_t at_rev, kv_ent *out)
{
    MDB_val d;
    int rc = mdb_cursor_get(c, k, &d, MDB_LAST_DUP);
    if (rc)
        return kv_mdb_err(rc);
    if (d.mv_size != KV_DUP_LEN)
        return -EBADMSG;
    kv_dup_decode(d.mv_data, out);
    if (out->main <= at_rev)
        return 0;
    uint8_t seek[KV_DUP_LEN];
    kv_ent e = {at_rev + 1, 0, false};
    kv_dup_encode(seek, &e);
    seek[16] = 0;
    MDB_val kk = *k, sd = {KV_DUP_LEN, seek};
    rc = mdb_cursor_get(probe, &kk, &sd, MDB_GET_BOTH_RANGE);
    if (rc)
        return rc == MDB_NOTFOUND ? -EBADMSG : kv_mdb_err(rc); /* last dup > at_rev exists */
    rc = mdb_cursor_get(probe, &kk, &sd, MDB_PREV_DUP);
    if (rc)
        return kv_mdb_err(rc); /* MDB_NOTFOUND -> -ENOENT: no revision <= at_rev */
    if (sd.mv_size != KV_DUP_LEN)
        return -EBADMSG;
    kv_dup_decode(sd.mv_data, out);
    return 0;
}

int kv_index_get(kv_store *s, MDB_txn *txn, const uint8_t *key, size_t klen, int64_t at_rev,
                 kv_ent *out)
{
    if (klen == 0 || klen > s->maxkey)
        return -ENOENT;
    MDB_cursor *c;
    int rc = mdb_cursor_open(txn, s->kidx, &c);
    if (rc)
        return kv_mdb_err(rc);
    MDB_val k = {klen, (void *)key}, d;
    rc = mdb_cursor_get(c, &k, &d, MDB_SET);
    if (rc)
        rc = kv_mdb_err(rc);
    else
        rc = probe_at(c, c, &k, at_rev, out);
    mdb_cursor_close(c);
    return rc;
}

int kv_iter_open(kv_iter *it, kv_store *s, MDB_txn *txn, const uint8_t *start, size_t slen,
                 const uint8_t *end, size_t elen, int64_t at_rev, bool reseek)
{
    memset(it, 0, sizeof *it);
    it->s = s;
    it->txn = txn;
    it->start = start;
    it->slen = slen;
    it->end = end;
    it->elen = elen;
    it->single = end == NULL || elen == 0;
    it->unbounded = elen == 1 && end[0] == 0;
    it->at_rev = at_rev;
    it->reseek = reseek;
    int rc = mdb_cursor_open(txn, s->kidx, &it->c);
    if (rc)
        return kv_mdb_err(rc);
    rc = mdb_cursor_open(txn, s->kidx, &it->probe);
    if (rc) {
        mdb_cursor_close(it->c);
        it->c = NULL;
        return kv_mdb_err(rc);
    }
    return 0;
}

void kv_iter_close(kv_iter *it)
{
    if (it->probe)
        mdb_cursor_close(it->probe);
    if (it->c)
        mdb_cursor_close(it->c);
    it->probe = it->c = NULL;
}

/* Positions on the first key >= k (> k when exclusive). */
static int seek(kv_iter *it, const uint8_t *k, size_t kl, bool exclusive, MDB_val *key)
{
    MDB_val d;
    int rc;
    if (kl == 0) {
        rc = mdb_cursor_get(it->c, key, &d, MDB_FIRST);
    } else {
        key->mv_size = kl < it->s->maxkey ? kl : it->s->maxkey;
        key->mv_data = (void *)k;
        rc = mdb_cursor_get(it->c, key, &d, MDB_SET_RANGE);
    }
    while (rc == 0) {
        int c = keycmp(key->mv_data, key->mv_size, k, kl);
        if (c > 0 || (c == 0 && !exclusive))
            break;
        rc = mdb_cursor_get(it->c, key, &d, MDB_NEXT_NODUP);
    }
    return rc;
}

int kv_iter_next(kv_iter *it)
{
    MDB_val key, d;
    int rc;
    for (;;) {
        if (it->done)
            return 0;
        if (!it->started) {
            it->started = true;
            if (it->single) {
                if (it->slen == 0 || it->slen > it->s->maxkey) {
                    it->done = true;
                    return 0;
                }
                key.mv_size = it->slen;
                key.mv_data = (void *)it->start;
                rc = mdb_cursor_get(it->c, &key, &d, MDB_SET);
            } else {
                rc = seek(it, it->start, it->slen, false, &key);
            }
        } else if (it->single) {
            it->done = true;
            return 0;
        } else if (it->reseek) {
            rc = seek(it, it->last, it->last_len, true, &key);
        } else {
            rc = mdb_cursor_get(it->c, &key, &d, MDB_NEXT_NODUP);
        }
        if (rc == MDB_NOTFOUND) {
            it->done = true;
            return 0;
        }
        if (rc)
            return kv_mdb_err(rc);
        if (!it->single && !it->unbounded &&
            keycmp(key.mv_data, key.mv_size, it->end, it->elen) >= 0) {
            it->done = true;
            return 0;
        }
        if (key.mv_size > sizeof it->last)
            return -EBADMSG;
        if (it->reseek) {
            memcpy(it->last, key.mv_data, key.mv_size);
            it->last_len = key.mv_size;
        }
        rc = probe_at(it->c, it->probe, &key, it->at_rev, &it->ent);
        if (rc == -ENOENT)
            continue;
        if (rc)
            return rc;
        if (it->ent.tomb && !it->all)
            continue;
        it->key = key.mv_data;
        it->klen = key.mv_size;
        return 1;
    }
}
