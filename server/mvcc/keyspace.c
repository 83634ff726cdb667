/* keyspace: the store's write operations in plain C (keyspace.h): the request context (child
 * transaction + meta copy), key writes and reads, compaction and the lease table. Alarms and
 * members are in alarm.c and members.c. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "mvcc/store_int.h"

enum { EV_GRANT = 1, EV_REVOKE, EV_CHECKPOINT };

/* Quota plus half the headroom (see store.h). */
static size_t batch_growth_limit(kv_store *s)
{
    size_t q = s->cfg.quota_bytes;
    return q + (kv_store_map_size(q) - q) / 2;
}

int kv_ks_batch_info_get(kv_store *s, kv_store_batch *b, kv_ks_batch_info *out)
{
    if (!s || !b || !b->open || b != &s->batch)
        return -EINVAL;
    if (b->spoilt)
        return -EAGAIN;
    out->applied = b->meta.applied;
    out->rev = b->meta.rev;
    out->alarms = b->alarms;
    out->quiet = b->quiet;
    out->deterministic = s->deterministic;
    out->max_key = SIZE_MAX; /* any length (longkey.c): the request size bounds keys */
    out->growth_over =
        !s->deterministic && b->base_size + b->grown > (int64_t)batch_growth_limit(s);
    return 0;
}

void kv_ks_batch_mark_applied(kv_store_batch *b, uint64_t index, int counted)
{
    b->meta.applied = index;
    if (counted)
        b->applies++;
}

void kv_ks_batch_count_ops(kv_store_batch *b, unsigned ranges, unsigned puts, unsigned deletes)
{
    b->ops[0] += ranges;
    b->ops[1] += puts;
    b->ops[2] += deletes;
    if ((uint64_t)ranges + puts + deletes > 1)
        b->ops[3]++;
}

int kv_ks_begin(kv_store *s, kv_store_batch *b, kv_ks **out)
{
    if (!s || !b || !b->open || b != &s->batch)
        return -EINVAL;
    if (b->ks_open)
        return -EBUSY;
    if (b->spoilt)
        return -EAGAIN;
    kv_ks *ks = calloc(1, sizeof *ks);
    if (!ks)
        return -ENOMEM;
    MDB_txn *child = b->txn; /* shared: the request writes in the batch's transaction */
    int rc = b->shared ? 0 : mdb_txn_begin(s->env, b->txn, 0, &child);
    if (rc) {
        free(ks);
        return kv_mdb_err(rc);
    }
    ks->nested = !b->shared;
    ks->s = s;
    ks->b = b;
    ks->m = b->meta;
    ks->alarms = b->alarms;
    ks->w = (kv_wctx){s, child, &ks->m, ks->m.rev, 0, s->cfg.max_keys_per_lease};
    b->ks_open = true;
    *out = ks;
    return 0;
}

void kv_ks_set_max_keys_per_lease(kv_ks *ks, uint32_t max)
{
    ks->w.max_keys_per_lease = max;
}

static void ks_free(kv_ks *ks)
{
    ks->b->ks_open = false;
    free(ks->ev);
    free(ks);
}

static void fire_observers(kv_store *s, const kv_ks *ks)
{
    const kv_store_lease_observer *o = &s->obs;
    for (size_t i = 0; i < ks->nev; i++) {
        const kv_ks_ev *e = &ks->ev[i];
        if (e->type == EV_GRANT && o->granted)
            o->granted(o->arg, e->id, e->ttl, e->rem);
        else if (e->type == EV_REVOKE && o->revoked)
            o->revoked(o->arg, e->id);
        else if (e->type == EV_CHECKPOINT && o->checkpointed)
            o->checkpointed(o->arg, e->id, e->rem);
    }
}

int kv_ks_commit(kv_ks *ks, int64_t grown)
{
    int rc = ks->nested ? kv_mdb_err(mdb_txn_commit(ks->w.txn)) : 0;
    if (rc == 0) {
        kv_store_batch *b = ks->b;
        uint64_t applied = b->meta.applied;
        ks->m.rev = kv_wctx_end_rev(&ks->w);
        b->meta = ks->m;
        b->meta.applied = applied;
        b->alarms = ks->alarms;
        b->grown += grown;
        fire_observers(ks->s, ks);
    }
    ks_free(ks);
    return rc;
}

void kv_ks_mark_writing(kv_ks *ks)
{
    ks->writing = true;
}

void kv_ks_abort(kv_ks *ks)
{
    if (!ks)
        return;
    if (ks->nested)
        mdb_txn_abort(ks->w.txn);
    else if (ks->writing)
        ks->b->spoilt = true; /* its writes stay in the batch's transaction */
    ks_free(ks);
}

int64_t kv_ks_rev(const kv_ks *ks)
{
    return ks->m.rev;
}

int64_t kv_ks_read_rev(const kv_ks *ks)
{
    return kv_wctx_read_rev(&ks->w);
}

int64_t kv_ks_end_rev(const kv_ks *ks)
{
    return kv_wctx_end_rev(&ks->w);
}

int64_t kv_ks_compact_rev(const kv_ks *ks)
{
    return ks->m.compact_rev;
}

unsigned kv_ks_alarms(const kv_ks *ks)
{
    return ks->alarms;
}

static void kv_view(kv_ks_kv *o, const Mvccpb__KeyValue *kv)
{
    *o = (kv_ks_kv){kv->key.data,        kv->key.len,      kv->value.data, kv->value.len,
                    kv->create_revision, kv->mod_revision, kv->version,    kv->lease};
}

int kv_ks_get(kv_ks *ks, const uint8_t *key, size_t klen, kv_ks_kv **out)
{
    kv_ent e;
    *out = NULL;
    int rc = kv_index_get(ks->s, ks->w.txn, key, klen, kv_ks_read_rev(ks), &e);
    if (rc == -ENOENT || (rc == 0 && e.tomb))
        return -ENOENT;
    if (rc)
        return rc;
    Mvccpb__KeyValue *kv;
    if ((rc = kv_rec_load(ks->s, ks->w.txn, &e, key, klen, &kv)))
        return rc == -ENOENT ? -ENODATA : rc; /* the index points to no record */
    kv_ks_kv *c = malloc(sizeof *c + kv->key.len + kv->value.len + 1);
    if (!c) {
        mvccpb__key_value__free_unpacked(kv, NULL);
        return -ENOMEM;
    }
    kv_view(c, kv);
    uint8_t *p = (uint8_t *)(c + 1);
    if (kv->key.len)
        memcpy(p, kv->key.data, kv->key.len);
    if (kv->value.len)
        memcpy(p + kv->key.len, kv->value.data, kv->value.len);
    c->key = p;
    c->value = p + kv->key.len;
    mvccpb__key_value__free_unpacked(kv, NULL);
    *out = c;
    return 0;
}

int kv_ks_walk(kv_ks *ks, const uint8_t *key, size_t klen, const uint8_t *end, size_t elen,
               kv_ks_kv_fn fn, void *arg, size_t *n)
{
    kv_iter it;
    size_t cnt = 0;
    int rc = kv_iter_open(&it, ks->s, ks->w.txn, key, klen, end, elen, kv_ks_read_rev(ks), false);
    if (rc)
        return rc;
    while ((rc = kv_iter_next(&it)) == 1) {
        cnt++;
        Mvccpb__KeyValue *kv;
        if ((rc = kv_rec_load(ks->s, ks->w.txn, &it.ent, it.key, it.klen, &kv)))
            break;
        kv_ks_kv v;
        kv_view(&v, kv);
        rc = fn(arg, &v);
        mvccpb__key_value__free_unpacked(kv, NULL);
        if (rc)
            break;
    }
    kv_iter_close(&it);
    if (n)
        *n = cnt;
    return rc;
}

int kv_ks_put(kv_ks *ks, const uint8_t *key, size_t klen, const uint8_t *val, size_t vlen,
              int64_t lease)
{
    return kv_w_put(&ks->w, key, klen, val, vlen, lease);
}

int kv_ks_delete_range(kv_ks *ks, const uint8_t *key, size_t klen, const uint8_t *end, size_t elen,
                       int64_t *deleted, kv_ks_kv_fn prev, void *arg)
{
    Mvccpb__KeyValue **arr = NULL;
    size_t n = 0;
    int rc = kv_w_delete_range(&ks->w, key, klen, end, elen, deleted, prev ? &arr : NULL, &n);
    if (rc)
        return rc;
    for (size_t i = 0; i < n; i++) {
        if (rc == 0) {
            kv_ks_kv v;
            kv_view(&v, arr[i]);
            rc = prev(arg, &v);
        }
        mvccpb__key_value__free_unpacked(arr[i], NULL);
    }
    free(arr);
    return rc;
}

int kv_ks_compact(kv_ks *ks, int64_t rev)
{
    if (rev <= ks->m.compact_rev)
        return KV_STORE_ERR_COMPACTED;
    if (rev > ks->m.rev)
        return KV_STORE_ERR_FUTURE_REV;
    /* O(1): the records go in bounded batches (kv_store_compact_step). */
    int rc = kv_compact_schedule(ks->s, ks->w.txn, rev);
    if (rc)
        return rc;
    ks->m.compact_rev = rev;
    return 0;
}

/* ---- leases ---- */

static int ev_add(kv_ks *ks, int type, int64_t id, int64_t ttl, int64_t rem)
{
    if (ks->nev == ks->cap) {
        size_t nc = ks->cap ? ks->cap * 2 : 4;
        kv_ks_ev *n = realloc(ks->ev, nc * sizeof *n);
        if (!n)
            return -ENOMEM;
        ks->ev = n;
        ks->cap = nc;
    }
    ks->ev[ks->nev++] = (kv_ks_ev){type, id, ttl, rem};
    return 0;
}

int kv_ks_lease_get(kv_ks *ks, int64_t id, int64_t *ttl)
{
    kv_lease_rec rec;
    int rc = kv_lease_table_get(&ks->s->leases, ks->w.txn, id, &rec);
    if (rc == 0 && ttl)
        *ttl = rec.ttl;
    return rc;
}

int kv_ks_lease_grant(kv_ks *ks, int64_t id, int64_t ttl)
{
    if (id == 0)
        return -EINVAL;
    if (ttl > KV_MAX_LEASE_TTL)
        return -ERANGE;
    kv_lease_rec rec;
    int rc = kv_lease_table_get(&ks->s->leases, ks->w.txn, id, &rec);
    if (rc == 0)
        return -EEXIST;
    if (rc != -ENOENT)
        return rc;
    rec = (kv_lease_rec){id, ttl, 0};
    if ((rc = kv_lease_table_put(&ks->s->leases, ks->w.txn, &rec)))
        return rc;
    return ev_add(ks, EV_GRANT, id, ttl, 0);
}

typedef struct keylist {
    uint8_t **k;
    size_t *len;
    size_t n, cap;
} keylist;

static int collect_key(void *arg, const uint8_t *key, size_t klen)
{
    keylist *l = arg;
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 16;
        uint8_t **nk = realloc(l->k, nc * sizeof *nk);
        if (!nk)
            return -ENOMEM;
        l->k = nk;
        size_t *nl = realloc(l->len, nc * sizeof *nl);
        if (!nl)
            return -ENOMEM;
        l->len = nl;
        l->cap = nc;
    }
    uint8_t *c = malloc(klen ? klen : 1);
    if (!c)
        return -ENOMEM;
    memcpy(c, key, klen);
    l->k[l->n] = c;
    l->len[l->n++] = klen;
    return 0;
}

int kv_ks_lease_revoke(kv_ks *ks, int64_t id)
{
    int rc = kv_ks_lease_get(ks, id, NULL);
    if (rc)
        return rc;
    keylist l = {0};
    rc = kv_lk_lease_keys(ks->s, ks->w.txn, id, collect_key, &l); /* in key order */
    /* etcd deletes the keys (sorted) in one write txn: one revision for all of them. */
    for (size_t i = 0; i < l.n && !rc; i++) {
        int64_t deleted;
        rc = kv_w_delete_range(&ks->w, l.k[i], l.len[i], NULL, 0, &deleted, NULL, NULL);
    }
    for (size_t i = 0; i < l.n; i++)
        free(l.k[i]);
    free(l.k);
    free(l.len);
    if (rc)
        return rc;
    if ((rc = kv_lk_lease_del(ks->s, ks->w.txn, id)) ||
        (rc = kv_lease_table_del(&ks->s->leases, ks->w.txn, id)))
        return rc;
    return ev_add(ks, EV_REVOKE, id, 0, 0);
}

int kv_ks_lease_checkpoint(kv_ks *ks, int64_t id, int64_t remaining_ttl)
{
    kv_lease_rec rec;
    int rc = kv_lease_table_get(&ks->s->leases, ks->w.txn, id, &rec);
    if (rc)
        return rc;
    rec.remaining_ttl = remaining_ttl;
    if ((rc = kv_lease_table_put(&ks->s->leases, ks->w.txn, &rec)))
        return rc;
    return ev_add(ks, EV_CHECKPOINT, id, rec.ttl, remaining_ttl);
}

int kv_ks_lease_keys(kv_ks *ks, int64_t id, int (*fn)(void *arg, const uint8_t *key, size_t klen),
                     void *arg)
{
    return kv_lk_lease_keys(ks->s, ks->w.txn, id, fn, arg);
}

/* ---- Range inside a txn (range.h) ---- */

int kv_ks_range(kv_ks *ks, const kv_range_opts *o, kv_range_result *out)
{
    return kv_range_run(ks->s, ks->w.txn, kv_ks_read_rev(ks), ks->m.compact_rev, ks->m.keys, o,
                        out);
}
