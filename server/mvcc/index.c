/* index: walks and point lookups over the "kidx" and "lkidx" databases (see store.h,
 * store_int.h). Keys of at most KV_SHORT_KEY_MAX bytes are "kidx" keys; longer ones are
 * "lkidx" handles (longkey.c). A walk merges both in key order. */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "mvcc/store_int.h"

#define keycmp kv_keycmp

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

int kv_index_get_raw(kv_store *s, MDB_txn *txn, MDB_dbi db, const uint8_t *ikey, size_t iklen,
                     int64_t at_rev, kv_ent *out)
{
    (void)s;
    MDB_cursor *c;
    int rc = mdb_cursor_open(txn, db, &c);
    if (rc)
        return kv_mdb_err(rc);
    MDB_val k = {iklen, (void *)ikey}, d;
    rc = mdb_cursor_get(c, &k, &d, MDB_SET);
    if (rc)
        rc = kv_mdb_err(rc);
    else
        rc = probe_at(c, c, &k, at_rev, out);
    mdb_cursor_close(c);
    return rc;
}

int kv_index_get(kv_store *s, MDB_txn *txn, const uint8_t *key, size_t klen, int64_t at_rev,
                 kv_ent *out)
{
    if (klen == 0)
        return -ENOENT;
    if (klen <= KV_SHORT_KEY_MAX)
        return kv_index_get_raw(s, txn, s->kidx, key, klen, at_rev, out);
    uint8_t h[KV_LK_HANDLE];
    kv_lk_handle(h, key, klen);
    return kv_index_get_raw(s, txn, s->lkidx, h, sizeof h, at_rev, out);
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
    if (it->single)
        return 0; /* a point lookup (kv_index_get) uses its own cursor */
    MDB_cursor **cs[4] = {&it->c, &it->probe, &it->lc, &it->lprobe};
    for (int i = 0; i < 4; i++) {
        int rc = mdb_cursor_open(txn, i < 2 ? s->kidx : s->lkidx, cs[i]);
        if (rc) {
            kv_iter_close(it);
            return kv_mdb_err(rc);
        }
    }
    return 0;
}

void kv_iter_close(kv_iter *it)
{
    MDB_cursor **cs[4] = {&it->c, &it->probe, &it->lc, &it->lprobe};
    for (int i = 0; i < 4; i++) {
        if (*cs[i])
            mdb_cursor_close(*cs[i]);
        *cs[i] = NULL;
    }
    kv_lk_items_free(it->b, it->bn);
    it->b = NULL;
    it->bn = it->bcap = it->bi = 0;
}

/* Positions on the first short key >= k (> k when exclusive). */
static int seek(kv_iter *it, const uint8_t *k, size_t kl, bool exclusive, MDB_val *key)
{
    MDB_val d;
    int rc;
    if (kl == 0) {
        rc = mdb_cursor_get(it->c, key, &d, MDB_FIRST);
    } else {
        key->mv_size = kl < KV_SHORT_KEY_MAX ? kl : KV_SHORT_KEY_MAX;
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

/* Fills the short stream's head (s_have) or ends it (s_done). */
static int short_fetch(kv_iter *it)
{
    MDB_val key, d;
    int rc;
    for (;;) {
        if (!it->s_started) {
            it->s_started = true;
            rc = seek(it, it->start, it->slen, false, &key);
        } else if (it->reseek) {
            rc = seek(it, it->s_key, it->s_klen, true, &key);
        } else {
            rc = mdb_cursor_get(it->c, &key, &d, MDB_NEXT_NODUP);
        }
        if (rc == MDB_NOTFOUND) {
            it->s_done = true;
            return 0;
        }
        if (rc)
            return kv_mdb_err(rc);
        if (!it->unbounded && keycmp(key.mv_data, key.mv_size, it->end, it->elen) >= 0) {
            it->s_done = true;
            return 0;
        }
        if (key.mv_size == 0 || key.mv_size > KV_SHORT_KEY_MAX)
            return -EBADMSG;
        memcpy(it->s_key, key.mv_data, key.mv_size);
        it->s_klen = key.mv_size;
        rc = probe_at(it->c, it->probe, &key, it->at_rev, &it->s_ent);
        if (rc == -ENOENT)
            continue;
        if (rc)
            return rc;
        if (it->s_ent.tomb && !it->all)
            continue;
        it->s_have = true;
        return 0;
    }
}

/* Loads the next bucket of long keys in [start, end) (none left: l_done). */
static int bucket_load(kv_iter *it)
{
    MDB_val key, d;
    int rc;
    kv_lk_items_free(it->b, it->bn);
    it->b = NULL;
    it->bn = it->bcap = it->bi = 0;
    uint8_t after[KV_LK_HANDLE + 1];
    if (!it->l_started) {
        it->l_started = true;
        size_t n = it->slen < KV_LK_PREFIX ? it->slen : KV_LK_PREFIX;
        key.mv_size = n;
        key.mv_data = (void *)it->start;
        rc = mdb_cursor_get(it->lc, &key, &d, n ? MDB_SET_RANGE : MDB_FIRST);
    } else {
        /* past every handle with the current prefix: prefix | 0xff x 33 is longer than any of
         * them and not smaller */
        memcpy(after, it->bprefix, KV_LK_PREFIX);
        memset(after + KV_LK_PREFIX, 0xff, sizeof after - KV_LK_PREFIX);
        key.mv_size = sizeof after;
        key.mv_data = after;
        rc = mdb_cursor_get(it->lc, &key, &d, MDB_SET_RANGE);
    }
    if (rc == MDB_NOTFOUND) {
        it->l_done = true;
        return 0;
    }
    if (rc)
        return kv_mdb_err(rc);
    if (key.mv_size != KV_LK_HANDLE)
        return -EBADMSG;
    memcpy(it->bprefix, key.mv_data, KV_LK_PREFIX);
    if (!it->unbounded) {
        size_t n = it->elen < KV_LK_PREFIX ? it->elen : KV_LK_PREFIX;
        int c = keycmp(it->bprefix, KV_LK_PREFIX, it->end, n);
        if (c > 0 || (c == 0 && it->elen <= KV_LK_PREFIX)) {
            it->l_done = true; /* every key of this bucket and after is >= end */
            return 0;
        }
    }
    while (rc == 0) {
        if (key.mv_size != KV_LK_HANDLE)
            return -EBADMSG;
        if (memcmp(key.mv_data, it->bprefix, KV_LK_PREFIX) != 0)
            break;
        const uint8_t *k;
        size_t kl;
        uint8_t h[KV_LK_HANDLE];
        memcpy(h, key.mv_data, KV_LK_HANDLE);
        if ((rc = kv_lk_key_get(it->s, it->txn, h, &k, &kl)))
            return rc;
        if (keycmp(k, kl, it->start, it->slen) >= 0 &&
            (it->unbounded || keycmp(k, kl, it->end, it->elen) < 0) &&
            (rc = kv_lk_items_push(&it->b, &it->bn, &it->bcap, k, kl, h, it->reseek)))
            return rc;
        /* reposition: kv_lk_key_get used another database, the cursor is still valid */
        rc = mdb_cursor_get(it->lc, &key, &d, MDB_NEXT_NODUP);
    }
    if (rc && rc != MDB_NOTFOUND)
        return kv_mdb_err(rc);
    kv_lk_items_sort(it->b, it->bn);
    return 0;
}

/* Fills the long stream's head (l_have, at b[bi]) or ends it (l_done). */
static int long_fetch(kv_iter *it)
{
    int rc;
    for (;;) {
        while (it->bi < it->bn) {
            const kv_lk_item *x = &it->b[it->bi];
            MDB_val k = {KV_LK_HANDLE, (void *)x->handle}, d;
            rc = mdb_cursor_get(it->lc, &k, &d, MDB_SET);
            if (rc == 0)
                rc = probe_at(it->lc, it->lprobe, &k, it->at_rev, &it->l_ent);
            else
                rc = kv_mdb_err(rc);
            if (rc == -ENOENT || (rc == 0 && it->l_ent.tomb && !it->all)) {
                it->bi++;
                continue;
            }
            if (rc)
                return rc;
            it->l_have = true;
            return 0;
        }
        if (it->l_done)
            return 0;
        if ((rc = bucket_load(it)))
            return rc;
    }
}

int kv_iter_next(kv_iter *it)
{
    int rc;
    if (it->done)
        return 0;
    if (it->single) {
        if (it->started) {
            it->done = true;
            return 0;
        }
        it->started = true;
        for (;;) {
            rc = kv_index_get(it->s, it->txn, it->start, it->slen, it->at_rev, &it->ent);
            if (rc == -ENOENT || (rc == 0 && it->ent.tomb && !it->all)) {
                it->done = true;
                return 0;
            }
            if (rc)
                return rc;
            it->key = it->start;
            it->klen = it->slen;
            return 1;
        }
    }
    it->started = true;
    if (!it->s_have && !it->s_done && (rc = short_fetch(it)))
        return rc;
    if (!it->l_have && !(it->l_done && it->bi >= it->bn) && (rc = long_fetch(it)))
        return rc;
    if (!it->s_have && !it->l_have) {
        it->done = true;
        return 0;
    }
    if (it->s_have &&
        (!it->l_have || keycmp(it->s_key, it->s_klen, it->b[it->bi].key, it->b[it->bi].klen) < 0)) {
        it->s_have = false;
        it->key = it->s_key;
        it->klen = it->s_klen;
        it->ent = it->s_ent;
    } else {
        it->l_have = false;
        it->key = it->b[it->bi].key;
        it->klen = it->b[it->bi].klen;
        it->ent = it->l_ent;
        it->bi++;
    }
    return 1;
}
