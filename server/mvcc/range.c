/* range: etcd 3.4 Range semantics (apply.go Range + mvcc rangeKeys) over the kidx walk, in
 * plain C (range.h).
 * limit is pushed into the walk (limit + 1 records loaded, to set `more`) unless a sort
 * order or a revision filter needs every record; count_only and `count` walk the index
 * only, without loading records (O(1) memory). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "mvcc/store_int.h"

void kv_range_result_free(kv_range_result *r)
{
    for (size_t i = 0; i < r->n; i++)
        mvccpb__key_value__free_unpacked(r->kvs[i], NULL);
    free(r->kvs);
    r->kvs = NULL;
    r->n = 0;
}

static int bytes_cmp(const ProtobufCBinaryData *a, const ProtobufCBinaryData *b)
{
    size_t n = a->len < b->len ? a->len : b->len;
    int c = n ? memcmp(a->data, b->data, n) : 0;
    if (c)
        return c;
    return a->len < b->len ? -1 : a->len > b->len ? 1 : 0;
}

static int i64_cmp(int64_t a, int64_t b)
{
    return a < b ? -1 : a > b ? 1 : 0;
}

/* Comparators of the sort target alone; cmp_directed breaks ties by key. */
static int cmp_key(const void *a, const void *b)
{
    const Mvccpb__KeyValue *x = *(Mvccpb__KeyValue *const *)a, *y = *(Mvccpb__KeyValue *const *)b;
    return bytes_cmp(&x->key, &y->key);
}
static int cmp_version(const void *a, const void *b)
{
    const Mvccpb__KeyValue *x = *(Mvccpb__KeyValue *const *)a, *y = *(Mvccpb__KeyValue *const *)b;
    return i64_cmp(x->version, y->version);
}
static int cmp_create(const void *a, const void *b)
{
    const Mvccpb__KeyValue *x = *(Mvccpb__KeyValue *const *)a, *y = *(Mvccpb__KeyValue *const *)b;
    return i64_cmp(x->create_revision, y->create_revision);
}
static int cmp_mod(const void *a, const void *b)
{
    const Mvccpb__KeyValue *x = *(Mvccpb__KeyValue *const *)a, *y = *(Mvccpb__KeyValue *const *)b;
    return i64_cmp(x->mod_revision, y->mod_revision);
}
static int cmp_value(const void *a, const void *b)
{
    const Mvccpb__KeyValue *x = *(Mvccpb__KeyValue *const *)a, *y = *(Mvccpb__KeyValue *const *)b;
    return bytes_cmp(&x->value, &y->value);
}

static bool pruned(const kv_range_opts *r, const Mvccpb__KeyValue *kv)
{
    return (r->max_mod_revision && kv->mod_revision > r->max_mod_revision) ||
           (r->min_mod_revision && kv->mod_revision < r->min_mod_revision) ||
           (r->max_create_revision && kv->create_revision > r->max_create_revision) ||
           (r->min_create_revision && kv->create_revision < r->min_create_revision);
}

typedef struct sort_ctx {
    int (*cmp)(const void *, const void *);
    int descend;
} sort_ctx;

/* Target order (reversed when descending), then ascending key: a total order. */
static int cmp_directed(const void *a, const void *b, void *arg)
{
    const sort_ctx *sc = arg;
    int c = sc->cmp(a, b);
    if (c != 0)
        return sc->descend ? -c : c;
    return sc->cmp == cmp_key ? 0 : cmp_key(a, b);
}

/* [key, end) covers every possible key: key "\0" (the smallest non-empty key), end "\0". */
static bool whole_keyspace(const kv_range_opts *r)
{
    return r->key_len == 1 && r->key[0] == 0 && r->end_len == 1 && r->end[0] == 0;
}

int kv_range_run(kv_store *s, MDB_txn *txn, int64_t cur, int64_t compact, uint64_t live_keys,
                 const kv_range_opts *r, kv_range_result *out)
{
    memset(out, 0, sizeof *out);
    out->revision = cur;
    if (r->revision > cur)
        return KV_STORE_ERR_FUTURE_REV;
    if (r->revision > 0 && r->revision < compact)
        return KV_STORE_ERR_COMPACTED;
    int64_t rev = r->revision > 0 ? r->revision : cur;
    bool filters = r->min_mod_revision || r->max_mod_revision || r->min_create_revision ||
                   r->max_create_revision;
    int64_t limit = r->limit;
    if (r->sort_order != KV_RANGE_SORT_NONE || filters)
        limit = 0;
    /* One extra record sets `more`. etcd's limit+1 wraps to a negative (= no limit) at
     * INT64_MAX; a limit that large cannot truncate anything, so it is no limit here too
     * (the increment overflowed). */
    if (limit > 0 && limit < INT64_MAX)
        limit++;
    else
        limit = 0;

    size_t cap = 0;
    int64_t count = 0;
    /* Counting the whole keyspace at the current revision: the live key counter. */
    bool counted = rev == cur && whole_keyspace(r);
    if (counted && r->count_only) {
        out->count = (int64_t)live_keys;
        return 0;
    }
    kv_iter it;
    int rc = kv_iter_open(&it, s, txn, r->key, r->key_len, r->end, r->end_len, rev, false);
    if (rc)
        return rc;
    while ((rc = kv_iter_next(&it)) == 1) {
        count++;
        if (r->count_only || (limit > 0 && (int64_t)out->n >= limit)) {
            if (counted)
                break;
            continue;
        }
        if (out->n == cap) {
            size_t nc = cap ? cap * 2 : 8;
            Mvccpb__KeyValue **na = realloc(out->kvs, nc * sizeof *na);
            if (!na) {
                rc = -ENOMEM;
                break;
            }
            out->kvs = na;
            cap = nc;
        }
        Mvccpb__KeyValue *kv;
        if ((rc = kv_rec_load(s, txn, &it.ent, it.key, it.klen, &kv)))
            break;
        out->kvs[out->n++] = kv;
    }
    kv_iter_close(&it);
    if (rc < 0) {
        kv_range_result_free(out);
        return rc;
    }

    if (filters) {
        size_t j = 0;
        for (size_t i = 0; i < out->n; i++) {
            if (pruned(r, out->kvs[i]))
                mvccpb__key_value__free_unpacked(out->kvs[i], NULL);
            else
                out->kvs[j++] = out->kvs[i];
        }
        out->n = j;
    }
    int order = r->sort_order;
    if (r->sort_target != KV_RANGE_TARGET_KEY && order == KV_RANGE_SORT_NONE)
        order = KV_RANGE_SORT_ASCEND; /* as etcd 3.4 */
    if (order != KV_RANGE_SORT_NONE && out->n > 1) {
        int (*cmp)(const void *, const void *) = cmp_key;
        switch (r->sort_target) {
        case KV_RANGE_TARGET_VERSION:
            cmp = cmp_version;
            break;
        case KV_RANGE_TARGET_CREATE:
            cmp = cmp_create;
            break;
        case KV_RANGE_TARGET_MOD:
            cmp = cmp_mod;
            break;
        case KV_RANGE_TARGET_VALUE:
            cmp = cmp_value;
            break;
        default:
            break;
        }
        /* Ties keep ascending key order in both directions, as etcd's sort does (the walk
         * yields keys in order, and Go's sort is stable on the small inputs clients see). */
        sort_ctx sc = {cmp, order == KV_RANGE_SORT_DESCEND};
        qsort_r(out->kvs, out->n, sizeof *out->kvs, cmp_directed, &sc);
    }
    if (r->limit > 0 && (int64_t)out->n > r->limit) {
        for (size_t i = (size_t)r->limit; i < out->n; i++)
            mvccpb__key_value__free_unpacked(out->kvs[i], NULL);
        out->n = (size_t)r->limit;
        out->more = 1;
    }
    if (r->keys_only)
        for (size_t i = 0; i < out->n; i++)
            out->kvs[i]->value.len = 0; /* data stays owned by the kv, freed with it */
    if (out->n == 0) {
        free(out->kvs);
        out->kvs = NULL;
    }
    out->count = counted ? (int64_t)live_keys : count;
    return 0;
}
