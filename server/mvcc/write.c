/* write: key-level MVCC writes (put, delete) inside a write context (see store_int.h). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mvcc/store_int.h"

/* Adds an index entry: "kidx" for a short key, "lkidx" (and "lkey") for a long one. */
static int put_dup(kv_wctx *w, const uint8_t *key, size_t klen, const kv_ent *e)
{
    uint8_t dup[KV_DUP_LEN];
    kv_dup_encode(dup, e);
    MDB_val k = {klen, (void *)key}, d = {KV_DUP_LEN, dup};
    if (klen <= KV_SHORT_KEY_MAX)
        return kv_mdb_err(mdb_put(w->txn, w->s->kidx, &k, &d, 0));
    uint8_t h[KV_LK_HANDLE];
    kv_lk_handle(h, key, klen);
    int rc = kv_lk_key_put(w->s, w->txn, h, key, klen);
    if (rc)
        return rc;
    k = (MDB_val){sizeof h, h};
    return kv_mdb_err(mdb_put(w->txn, w->s->lkidx, &k, &d, 0));
}

int kv_w_put(kv_wctx *w, const uint8_t *key, size_t klen, const uint8_t *val, size_t vlen,
             int64_t lease)
{
    kv_store *s = w->s;
    int64_t rev = w->begin_rev + 1;
    int64_t create = rev, ver = 1, oldlease = 0;
    bool isnew = true;
    kv_ent e;
    int rc = kv_index_get(s, w->txn, key, klen, INT64_MAX, &e);
    if (rc == 0 && !e.tomb) {
        Mvccpb__KeyValue *old;
        rc = kv_rec_load(s, w->txn, &e, key, klen, &old);
        if (rc)
            return rc;
        create = old->create_revision;
        ver = old->version + 1;
        oldlease = old->lease;
        isnew = false;
        mvccpb__key_value__free_unpacked(old, NULL);
    } else if (rc && rc != -ENOENT) {
        return rc;
    }
    if (oldlease != lease) {
        if (lease != 0 && w->max_keys_per_lease) {
            size_t n = 0;
            rc = kv_lk_lease_count(s, w->txn, lease, &n);
            if (rc)
                return rc;
            if (n >= w->max_keys_per_lease)
                return -EDQUOT;
        }
        if (oldlease && (rc = kv_lk_lease_detach(s, w->txn, oldlease, key, klen)))
            return rc;
        if (lease && (rc = kv_lk_lease_attach(s, w->txn, lease, key, klen)))
            return rc;
    }
    Mvccpb__KeyValue kv = MVCCPB__KEY_VALUE__INIT;
    kv.key.data = (uint8_t *)key;
    kv.key.len = klen;
    kv.create_revision = create;
    kv.mod_revision = rev;
    kv.version = ver;
    kv.value.data = (uint8_t *)val;
    kv.value.len = vlen;
    kv.lease = lease;
    if ((rc = kv_rec_put(s, w->txn, rev, w->sub, false, &kv)))
        return rc;
    kv_ent ne = {rev, w->sub, false};
    if ((rc = put_dup(w, key, klen, &ne)))
        return rc;
    if (isnew)
        w->m->keys++;
    w->sub++;
    return 0;
}

int kv_w_delete_range(kv_wctx *w, const uint8_t *key, size_t klen, const uint8_t *end, size_t elen,
                      int64_t *deleted, Mvccpb__KeyValue ***prev, size_t *n_prev)
{
    kv_store *s = w->s;
    int64_t rev = w->begin_rev + 1;
    kv_iter it;
    Mvccpb__KeyValue **arr = NULL;
    size_t n = 0, cap = 0;
    int rc = kv_iter_open(&it, s, w->txn, key, klen, end, elen, INT64_MAX, true);
    if (rc)
        return rc;
    *deleted = 0;
    while ((rc = kv_iter_next(&it)) == 1) {
        /* it.key is the iterator's own copy (or the caller's key): it stays valid while we
         * write, until the next step. */
        const uint8_t *k = it.key;
        size_t kl = it.klen;
        Mvccpb__KeyValue *old;
        if ((rc = kv_rec_load(s, w->txn, &it.ent, k, kl, &old)))
            break;
        Mvccpb__KeyValue tomb = MVCCPB__KEY_VALUE__INIT;
        tomb.key.data = (uint8_t *)k;
        tomb.key.len = kl;
        tomb.mod_revision = rev;
        kv_ent ne = {rev, w->sub, true};
        if ((rc = kv_rec_put(s, w->txn, rev, w->sub, true, &tomb)) ||
            (rc = put_dup(w, k, kl, &ne)) ||
            (old->lease && (rc = kv_lk_lease_detach(s, w->txn, old->lease, k, kl)))) {
            mvccpb__key_value__free_unpacked(old, NULL);
            break;
        }
        w->m->keys--;
        w->sub++;
        (*deleted)++;
        if (!prev) {
            mvccpb__key_value__free_unpacked(old, NULL);
            continue;
        }
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 8;
            Mvccpb__KeyValue **na = realloc(arr, nc * sizeof *na);
            if (!na) {
                mvccpb__key_value__free_unpacked(old, NULL);
                rc = -ENOMEM;
                break;
            }
            arr = na;
            cap = nc;
        }
        arr[n++] = old;
    }
    kv_iter_close(&it);
    if (rc < 0) {
        for (size_t i = 0; i < n; i++)
            mvccpb__key_value__free_unpacked(arr[i], NULL);
        free(arr);
        return rc;
    }
    if (prev) {
        *prev = arr;
        *n_prev = n;
    }
    return 0;
}
