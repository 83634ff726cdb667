/* longkey: keys longer than LMDB's key limit (store format 2, see store.h "Long keys").
 *
 * A key of at most KV_SHORT_KEY_MAX (511) bytes is stored as before: its own "kidx" entry and
 * plain "lease_keys" dups. A longer key is known by its handle, the first KV_LK_PREFIX (448)
 * bytes of the key followed by its SHA-256 (32 bytes):
 *   "lkidx"       handle -> MDB_DUPSORT|MDB_DUPFIXED index entries, exactly as "kidx"
 *   "lkey"        handle -> crc32c(4, BE, over handle | key) | full key
 *   "lease_lkeys" lease id (8, BE) | SHA-256 of the key (32) -> crc32c(4, BE, over the
 *                 40-byte record key | key) | full key
 * Handles sort by prefix first, so every long key with a smaller 448-byte prefix sorts before
 * every one with a larger prefix; the keys sharing one prefix (a bucket) are sorted by full key
 * when a walk reaches that prefix (index.c). The revision records ("rev") are unchanged: they
 * hold the full key as for short keys, so HashKV does not see the difference.
 * Called on the thread that owns txn; nothing is cached. */
#include <errno.h>
#include <openssl/sha.h>
#include <stdlib.h>
#include <string.h>

#include "common/crc32c.h"
#include "mvcc/store_int.h"

void kv_lk_handle(uint8_t out[KV_LK_HANDLE], const uint8_t *key, size_t klen)
{
    memcpy(out, key, KV_LK_PREFIX);
    SHA256(key, klen, out + KV_LK_PREFIX);
}

/* Writes rkey -> crc | key into dbi (MDB_RESERVE: the key is copied once). */
static int put_named(MDB_txn *txn, MDB_dbi dbi, const uint8_t *rkey, size_t rklen,
                     const uint8_t *key, size_t klen, unsigned flags)
{
    MDB_val k = {rklen, (void *)rkey}, v = {4 + klen, NULL};
    int rc = mdb_put(txn, dbi, &k, &v, flags | MDB_RESERVE);
    if (rc == MDB_KEYEXIST && (flags & MDB_NOOVERWRITE))
        return 0;
    if (rc)
        return kv_mdb_err(rc);
    uint8_t *p = v.mv_data;
    memcpy(p + 4, key, klen);
    kv_put_be32(p, kv_crc32c(kv_crc32c(0, rkey, rklen), key, klen));
    return 0;
}

/* Checks a crc | key value stored under rkey; *key points into LMDB memory. */
static int check_named(MDB_txn *txn, const uint8_t *rkey, size_t rklen, const MDB_val *v,
                       const uint8_t **key, size_t *klen)
{
    if (v->mv_size < 4 + KV_SHORT_KEY_MAX + 1 || !kv_mdb_val_sane(txn, v, SIZE_MAX / 2))
        return -EBADMSG;
    const uint8_t *p = v->mv_data;
    size_t n = v->mv_size - 4;
    if (kv_be32(p) != kv_crc32c(kv_crc32c(0, rkey, rklen), p + 4, n))
        return -EBADMSG;
    *key = p + 4;
    *klen = n;
    return 0;
}

int kv_lk_upgrade_format(kv_store *s, MDB_txn *txn)
{
    uint32_t v;
    int rc = kv_format_read(s, txn, &v);
    if (rc)
        return rc == -ENOENT ? -EBADMSG : rc;
    if (v >= KV_STORE_FORMAT_VERSION)
        return 0;
    return kv_format_write(s, txn, KV_STORE_FORMAT_VERSION);
}

int kv_lk_key_put(kv_store *s, MDB_txn *txn, const uint8_t *handle, const uint8_t *key, size_t klen)
{
    if (klen <= KV_SHORT_KEY_MAX)
        return -EINVAL;
    MDB_val k = {KV_LK_HANDLE, (void *)handle}, v;
    int rc = mdb_get(txn, s->lkey, &k, &v);
    if (rc == 0)
        return 0;
    if (rc != MDB_NOTFOUND)
        return kv_mdb_err(rc);
    /* The first long key of a data dir makes it format 2 (older builds refuse it). */
    if ((rc = kv_lk_upgrade_format(s, txn)))
        return rc;
    return put_named(txn, s->lkey, handle, KV_LK_HANDLE, key, klen, 0);
}

int kv_lk_key_get(kv_store *s, MDB_txn *txn, const uint8_t *handle, const uint8_t **key,
                  size_t *klen)
{
    MDB_val k = {KV_LK_HANDLE, (void *)handle}, v;
    int rc = mdb_get(txn, s->lkey, &k, &v);
    if (rc == MDB_NOTFOUND)
        return -EBADMSG; /* an index entry without its key */
    if (rc)
        return kv_mdb_err(rc);
    if ((rc = check_named(txn, handle, KV_LK_HANDLE, &v, key, klen)))
        return rc;
    if (memcmp(*key, handle, KV_LK_PREFIX) != 0)
        return -EBADMSG;
    return 0;
}

int kv_lk_key_del(kv_store *s, MDB_txn *txn, const uint8_t *handle)
{
    MDB_val k = {KV_LK_HANDLE, (void *)handle};
    int rc = mdb_del(txn, s->lkey, &k, NULL);
    return rc == MDB_NOTFOUND ? 0 : kv_mdb_err(rc);
}

/* ---- lease attachments ---- */

#define LL_KEY (8 + SHA256_DIGEST_LENGTH)

static void ll_key(uint8_t out[LL_KEY], int64_t id, const uint8_t *key, size_t klen)
{
    kv_put_be64(out, (uint64_t)id);
    SHA256(key, klen, out + 8);
}

int kv_lk_lease_attach(kv_store *s, MDB_txn *txn, int64_t id, const uint8_t *key, size_t klen)
{
    if (klen <= KV_SHORT_KEY_MAX)
        return kv_lease_table_attach(&s->leases, txn, id, key, klen);
    uint8_t rk[LL_KEY];
    ll_key(rk, id, key, klen);
    return put_named(txn, s->lease_lkeys, rk, LL_KEY, key, klen, MDB_NOOVERWRITE);
}

int kv_lk_lease_detach(kv_store *s, MDB_txn *txn, int64_t id, const uint8_t *key, size_t klen)
{
    if (klen <= KV_SHORT_KEY_MAX)
        return kv_lease_table_detach(&s->leases, txn, id, key, klen);
    uint8_t rk[LL_KEY];
    ll_key(rk, id, key, klen);
    MDB_val k = {LL_KEY, rk};
    int rc = mdb_del(txn, s->lease_lkeys, &k, NULL);
    return rc == MDB_NOTFOUND ? 0 : kv_mdb_err(rc);
}

/* Calls fn(arg, record key, value) for each long attachment of id, in hash order. */
static int ll_walk(kv_store *s, MDB_txn *txn, int64_t id,
                   int (*fn)(void *arg, MDB_cursor *c, const MDB_val *k, const MDB_val *v),
                   void *arg)
{
    uint8_t lo[8];
    kv_put_be64(lo, (uint64_t)id);
    MDB_cursor *c;
    int rc = mdb_cursor_open(txn, s->lease_lkeys, &c);
    if (rc)
        return kv_mdb_err(rc);
    MDB_val k = {8, lo}, v;
    /* g: LMDB's codes (negative, MDB_NOTFOUND at the end); rc: ours (0 or -errno) */
    int g = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE);
    while (g == 0) {
        if (k.mv_size != LL_KEY) {
            rc = -EBADMSG;
            break;
        }
        if (memcmp(k.mv_data, lo, 8) != 0)
            break;
        if ((rc = fn(arg, c, &k, &v)))
            break;
        g = mdb_cursor_get(c, &k, &v, MDB_NEXT);
    }
    mdb_cursor_close(c);
    if (rc == 0 && g != 0 && g != MDB_NOTFOUND)
        rc = kv_mdb_err(g);
    return rc;
}

static int count_one(void *arg, MDB_cursor *c, const MDB_val *k, const MDB_val *v)
{
    (void)c, (void)k, (void)v;
    (*(size_t *)arg)++;
    return 0;
}

int kv_lk_lease_count(kv_store *s, MDB_txn *txn, int64_t id, size_t *out)
{
    size_t n = 0, l = 0;
    int rc = kv_lease_table_key_count(&s->leases, txn, id, &n);
    if (rc == 0)
        rc = ll_walk(s, txn, id, count_one, &l);
    *out = n + l;
    return rc;
}

static int del_one(void *arg, MDB_cursor *c, const MDB_val *k, const MDB_val *v)
{
    (void)arg, (void)k, (void)v;
    return kv_mdb_err(mdb_cursor_del(c, 0));
}

int kv_lk_lease_del(kv_store *s, MDB_txn *txn, int64_t id)
{
    return ll_walk(s, txn, id, del_one, NULL);
}

typedef struct lkeys {
    MDB_txn *txn;
    kv_lk_item *it;
    size_t n, cap;
    size_t next; /* merge position */
    int (*fn)(void *arg, const uint8_t *key, size_t klen);
    void *arg;
} lkeys;

static int collect_one(void *arg, MDB_cursor *c, const MDB_val *k, const MDB_val *v)
{
    (void)c;
    lkeys *l = arg;
    const uint8_t *key;
    size_t klen;
    int rc = check_named(l->txn, k->mv_data, k->mv_size, v, &key, &klen);
    if (rc)
        return rc;
    return kv_lk_items_push(&l->it, &l->n, &l->cap, key, klen, NULL, false);
}

/* Emits the long keys that sort before key (all of them when key is NULL). */
static int flush_before(lkeys *l, const uint8_t *key, size_t klen)
{
    while (l->next < l->n) {
        const kv_lk_item *x = &l->it[l->next];
        if (key && kv_keycmp(x->key, x->klen, key, klen) > 0)
            break;
        l->next++;
        int rc = l->fn(l->arg, x->key, x->klen);
        if (rc)
            return rc;
    }
    return 0;
}

static int merge_short(void *arg, const uint8_t *key, size_t klen)
{
    lkeys *l = arg;
    int rc = flush_before(l, key, klen);
    return rc ? rc : l->fn(l->arg, key, klen);
}

int kv_lk_lease_keys(kv_store *s, MDB_txn *txn, int64_t id,
                     int (*fn)(void *arg, const uint8_t *key, size_t klen), void *arg)
{
    lkeys l = {.txn = txn, .fn = fn, .arg = arg};
    int rc = ll_walk(s, txn, id, collect_one, &l);
    if (rc == 0) {
        kv_lk_items_sort(l.it, l.n);
        rc = kv_lease_table_keys(&s->leases, txn, id, merge_short, &l);
    }
    if (rc == 0)
        rc = flush_before(&l, NULL, 0);
    kv_lk_items_free(l.it, l.n);
    return rc;
}

/* ---- sorted key lists ---- */

int kv_keycmp(const uint8_t *a, size_t al, const uint8_t *b, size_t bl)
{
    size_t n = al < bl ? al : bl;
    int c = n ? memcmp(a, b, n) : 0;
    if (c)
        return c;
    return al < bl ? -1 : al > bl ? 1 : 0;
}

int kv_lk_items_push(kv_lk_item **arr, size_t *n, size_t *cap, const uint8_t *key, size_t klen,
                     const uint8_t *handle, bool copy)
{
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 8;
        kv_lk_item *na = realloc(*arr, nc * sizeof *na);
        if (!na)
            return -ENOMEM;
        *arr = na;
        *cap = nc;
    }
    kv_lk_item *x = &(*arr)[*n];
    x->key = key;
    x->klen = klen;
    x->owned = copy;
    if (copy) {
        uint8_t *c = malloc(klen ? klen : 1);
        if (!c)
            return -ENOMEM;
        memcpy(c, key, klen);
        x->key = c;
    }
    if (handle)
        memcpy(x->handle, handle, KV_LK_HANDLE);
    (*n)++;
    return 0;
}

static int item_cmp(const void *a, const void *b)
{
    const kv_lk_item *x = a, *y = b;
    return kv_keycmp(x->key, x->klen, y->key, y->klen);
}

void kv_lk_items_sort(kv_lk_item *arr, size_t n)
{
    if (n > 1)
        qsort(arr, n, sizeof *arr, item_cmp);
}

void kv_lk_items_free(kv_lk_item *arr, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (arr[i].owned)
            free((void *)arr[i].key);
    free(arr);
}
