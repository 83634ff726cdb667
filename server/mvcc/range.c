/* range: etcd 3.4 Range semantics (apply.go Range + mvcc rangeKeys) over the kidx walk.
 * limit is pushed into the walk (limit + 1 records loaded, to set `more`) unless a sort
 * order or a revision filter needs every record; count_only and `count` walk the index
 * only, without loading records (O(1) memory). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "mvcc/store_int.h"

Etcdserverpb__ResponseHeader *kv_header_new(int64_t rev)
{
    Etcdserverpb__ResponseHeader *h = malloc(sizeof *h);
    if (!h)
        return NULL;
    etcdserverpb__response_header__init(h);
    h->revision = rev;
    return h;
}

int kv_range_check(const Etcdserverpb__RangeRequest *r, kv_result *res)
{
    if (r->key.len == 0) {
        kv_res_etcd_err(res, KV_ERR_EMPTY_KEY);
        return 1;
    }
    if ((unsigned)r->sort_order > 2u || (unsigned)r->sort_target > 4u) {
        kv_res_etcd_err(res, KV_ERR_INVALID_SORT);
        return 1;
    }
    return 0;
}

int kv_range_check_rev(const Etcdserverpb__RangeRequest *r, int64_t cur, int64_t compact,
                       kv_result *res)
{
    if (r->revision > cur) {
        kv_res_etcd_err(res, KV_ERR_FUTURE_REV);
        return 1;
    }
    if (r->revision > 0 && r->revision < compact) {
        kv_res_etcd_err(res, KV_ERR_COMPACTED);
        return 1;
    }
    return 0;
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

static bool pruned(const Etcdserverpb__RangeRequest *r, const Mvccpb__KeyValue *kv)
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
static bool whole_keyspace(const Etcdserverpb__RangeRequest *r)
{
    return r->key.len == 1 && r->key.data[0] == 0 && r->range_end.len == 1 &&
           r->range_end.data[0] == 0;
}

int kv_range_exec(kv_store *s, MDB_txn *txn, int64_t cur, int64_t compact, uint64_t live_keys,
                  const Etcdserverpb__RangeRequest *r, kv_result *res,
                  Etcdserverpb__RangeResponse **out)
{
    if (kv_range_check_rev(r, cur, compact, res))
        return 1;
    int64_t rev = r->revision > 0 ? r->revision : cur;
    bool filters = r->min_mod_revision || r->max_mod_revision || r->min_create_revision ||
                   r->max_create_revision;
    int64_t limit = r->limit;
    if (r->sort_order != ETCDSERVERPB__RANGE_REQUEST__SORT_ORDER__NONE || filters)
        limit = 0;
    /* One extra record sets `more`. etcd's limit+1 wraps to a negative (= no limit) at
     * INT64_MAX; a limit that large cannot truncate anything, so it is no limit here too
     * (issue 8, D9: the increment overflowed). */
    if (limit > 0 && limit < INT64_MAX)
        limit++;
    else
        limit = 0;

    Etcdserverpb__RangeResponse *resp = malloc(sizeof *resp);
    if (!resp)
        return -ENOMEM;
    etcdserverpb__range_response__init(resp);
    size_t cap = 0;
    int64_t count = 0;
    /* Counting the whole keyspace at the current revision: the live key counter. */
    bool counted = rev == cur && whole_keyspace(r);
    if (counted && r->count_only) {
        resp->count = (int64_t)live_keys;
        goto done;
    }
    kv_iter it;
    int rc = kv_iter_open(&it, s, txn, r->key.data, r->key.len, r->range_end.data, r->range_end.len,
                          rev, false);
    if (rc) {
        free(resp);
        return rc;
    }
    while ((rc = kv_iter_next(&it)) == 1) {
        count++;
        if (r->count_only || (limit > 0 && (int64_t)resp->n_kvs >= limit)) {
            if (counted)
                break;
            continue;
        }
        if (resp->n_kvs == cap) {
            size_t nc = cap ? cap * 2 : 8;
            Mvccpb__KeyValue **na = realloc(resp->kvs, nc * sizeof *na);
            if (!na) {
                rc = -ENOMEM;
                break;
            }
            resp->kvs = na;
            cap = nc;
        }
        Mvccpb__KeyValue *kv;
        if ((rc = kv_rec_load(s, txn, &it.ent, it.key, it.klen, &kv)))
            break;
        resp->kvs[resp->n_kvs++] = kv;
    }
    kv_iter_close(&it);
    if (rc < 0)
        goto fail;

    if (filters) {
        size_t j = 0;
        for (size_t i = 0; i < resp->n_kvs; i++) {
            if (pruned(r, resp->kvs[i]))
                mvccpb__key_value__free_unpacked(resp->kvs[i], NULL);
            else
                resp->kvs[j++] = resp->kvs[i];
        }
        resp->n_kvs = j;
    }
    int order = r->sort_order;
    if (r->sort_target != ETCDSERVERPB__RANGE_REQUEST__SORT_TARGET__KEY &&
        order == ETCDSERVERPB__RANGE_REQUEST__SORT_ORDER__NONE)
        order = ETCDSERVERPB__RANGE_REQUEST__SORT_ORDER__ASCEND; /* as etcd 3.4 */
    if (order != ETCDSERVERPB__RANGE_REQUEST__SORT_ORDER__NONE && resp->n_kvs > 1) {
        int (*cmp)(const void *, const void *) = cmp_key;
        switch (r->sort_target) {
        case ETCDSERVERPB__RANGE_REQUEST__SORT_TARGET__VERSION:
            cmp = cmp_version;
            break;
        case ETCDSERVERPB__RANGE_REQUEST__SORT_TARGET__CREATE:
            cmp = cmp_create;
            break;
        case ETCDSERVERPB__RANGE_REQUEST__SORT_TARGET__MOD:
            cmp = cmp_mod;
            break;
        case ETCDSERVERPB__RANGE_REQUEST__SORT_TARGET__VALUE:
            cmp = cmp_value;
            break;
        default:
            break;
        }
        /* Ties keep ascending key order in both directions, as etcd's sort does (the walk
         * yields keys in order, and Go's sort is stable on the small inputs clients see). */
        sort_ctx sc = {cmp, order == ETCDSERVERPB__RANGE_REQUEST__SORT_ORDER__DESCEND};
        qsort_r(resp->kvs, resp->n_kvs, sizeof *resp->kvs, cmp_directed, &sc);
    }
    if (r->limit > 0 && (int64_t)resp->n_kvs > r->limit) {
        for (size_t i = (size_t)r->limit; i < resp->n_kvs; i++)
            mvccpb__key_value__free_unpacked(resp->kvs[i], NULL);
        resp->n_kvs = (size_t)r->limit;
        resp->more = 1;
    }
    if (r->keys_only)
        for (size_t i = 0; i < resp->n_kvs; i++)
            resp->kvs[i]->value.len = 0; /* data stays owned by the kv, freed with it */
    if (resp->n_kvs == 0) {
        free(resp->kvs);
        resp->kvs = NULL;
    }
    resp->count = counted ? (int64_t)live_keys : count;
done:
    if (!(resp->header = kv_header_new(cur))) {
        rc = -ENOMEM;
        goto fail;
    }
    *out = resp;
    return 0;
fail:
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    return rc;
}
