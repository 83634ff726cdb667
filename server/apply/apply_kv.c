/* apply_kv: Put, DeleteRange, Txn and Compaction entries (etcd 3.4 etcdserver/apply.go) on the
 * keyspace operations (mvcc/keyspace.h); the responses are built only for a local waiter. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "apply/apply_int.h"

/* A malloc'd mvccpb.KeyValue copy of kv (free with protobuf_c_message_free_unpacked). */
static Mvccpb__KeyValue *kv_to_pb(const kv_ks_kv *kv)
{
    Mvccpb__KeyValue *o = malloc(sizeof *o);
    if (!o)
        return NULL;
    mvccpb__key_value__init(o);
    if (kv->key_len && !(o->key.data = malloc(kv->key_len)))
        goto fail;
    if (kv->key_len)
        memcpy(o->key.data, kv->key, kv->key_len);
    o->key.len = kv->key_len;
    if (kv->value_len && !(o->value.data = malloc(kv->value_len)))
        goto fail;
    if (kv->value_len)
        memcpy(o->value.data, kv->value, kv->value_len);
    o->value.len = kv->value_len;
    o->create_revision = kv->create_revision;
    o->mod_revision = kv->mod_revision;
    o->version = kv->version;
    o->lease = kv->lease;
    return o;
fail:
    protobuf_c_message_free_unpacked(&o->base, NULL);
    return NULL;
}

/* Put; in_txn: the request checks ran for the whole txn. out NULL: quiet. */
static int do_put(kv_actx *a, const Etcdserverpb__PutRequest *p, bool in_txn,
                  Etcdserverpb__PutResponse **out)
{
    int rc;
    if (!in_txn) {
        if ((rc = kv_put_check(p, a->max_key, a->res)))
            return rc;
        if (p->lease != 0 && (rc = kv_apply_lease_exists(a, p->lease)))
            return rc;
    }
    kv_ks_kv *prev = NULL;
    Etcdserverpb__PutResponse *resp = NULL;
    /* quiet: prev_kv is not needed (the put itself still reads the old record) */
    if (p->ignore_value || p->ignore_lease || (p->prev_kv && out)) {
        rc = kv_ks_get(a->ks, p->key.data, p->key.len, &prev);
        if (rc && rc != -ENOENT)
            return rc;
    }
    if ((p->ignore_value || p->ignore_lease) && !prev) {
        kv_apply_err(a->res, KV_ERR_KEY_NOT_FOUND);
        return 1;
    }
    const uint8_t *val = p->ignore_value ? prev->value : p->value.data;
    size_t vlen = p->ignore_value ? prev->value_len : p->value.len;
    int64_t lease = p->ignore_lease ? prev->lease : p->lease;
    rc = kv_ks_put(a->ks, p->key.data, p->key.len, val, vlen, lease);
    if (rc == 0)
        a->puts++;
    if (rc == -EDQUOT) {
        kv_apply_err(a->res, KV_ERR_TOO_MANY_LEASE_KEYS);
        rc = 1;
    }
    if (rc || !out)
        goto done;
    if (!(resp = malloc(sizeof *resp))) {
        rc = -ENOMEM;
        goto done;
    }
    etcdserverpb__put_response__init(resp);
    if (!(resp->header = kv_apply_header(kv_ks_rev(a->ks) + 1)) ||
        (p->prev_kv && prev && !(resp->prev_kv = kv_to_pb(prev)))) {
        rc = -ENOMEM;
        goto done;
    }
    *out = resp;
    resp = NULL;
done:
    free(prev);
    if (resp)
        protobuf_c_message_free_unpacked(&resp->base, NULL);
    return rc;
}

static int collect_prev(void *arg, const kv_ks_kv *kv)
{
    Etcdserverpb__DeleteRangeResponse *r = arg;
    Mvccpb__KeyValue **n = realloc(r->prev_kvs, (r->n_prev_kvs + 1) * sizeof *n);
    if (!n)
        return -ENOMEM;
    r->prev_kvs = n;
    if (!(n[r->n_prev_kvs] = kv_to_pb(kv)))
        return -ENOMEM;
    r->n_prev_kvs++;
    return 0;
}

static int do_delete(kv_actx *a, const Etcdserverpb__DeleteRangeRequest *d, bool in_txn,
                     Etcdserverpb__DeleteRangeResponse **out)
{
    if (!in_txn && d->key.len == 0) {
        kv_apply_err(a->res, KV_ERR_EMPTY_KEY);
        return 1;
    }
    Etcdserverpb__DeleteRangeResponse *resp = NULL;
    if (out) {
        if (!(resp = malloc(sizeof *resp)))
            return -ENOMEM;
        etcdserverpb__delete_range_response__init(resp);
    }
    int64_t deleted = 0;
    int rc = kv_ks_delete_range(a->ks, d->key.data, d->key.len, d->range_end.data, d->range_end.len,
                                &deleted, resp && d->prev_kv ? collect_prev : NULL, resp);
    if (rc == 0)
        a->deletes++;
    if (!resp)
        return rc;
    resp->deleted = deleted;
    if (rc == 0 && !(resp->header = kv_apply_header(kv_ks_end_rev(a->ks))))
        rc = -ENOMEM;
    if (rc) {
        protobuf_c_message_free_unpacked(&resp->base, NULL);
        return rc;
    }
    *out = resp;
    return 0;
}

/* ---- txn ---- */

static int i64cmp(int64_t a, int64_t b)
{
    return a < b ? -1 : a > b ? 1 : 0;
}

static bool compare_kv(const Etcdserverpb__Compare *c, const kv_ks_kv *kv)
{
    int result = 0;
    switch (c->target) {
    case ETCDSERVERPB__COMPARE__COMPARE_TARGET__VALUE: {
        ProtobufCBinaryData v = {0, NULL};
        if (c->target_union_case == ETCDSERVERPB__COMPARE__TARGET_UNION_VALUE)
            v = c->value;
        size_t n = kv->value_len < v.len ? kv->value_len : v.len;
        result = n ? memcmp(kv->value, v.data, n) : 0;
        if (!result)
            result = kv->value_len < v.len ? -1 : kv->value_len > v.len ? 1 : 0;
        break;
    }
    case ETCDSERVERPB__COMPARE__COMPARE_TARGET__CREATE:
        result = i64cmp(kv->create_revision,
                        c->target_union_case == ETCDSERVERPB__COMPARE__TARGET_UNION_CREATE_REVISION
                            ? c->create_revision
                            : 0);
        break;
    case ETCDSERVERPB__COMPARE__COMPARE_TARGET__MOD:
        result = i64cmp(kv->mod_revision,
                        c->target_union_case == ETCDSERVERPB__COMPARE__TARGET_UNION_MOD_REVISION
                            ? c->mod_revision
                            : 0);
        break;
    case ETCDSERVERPB__COMPARE__COMPARE_TARGET__VERSION:
        result = i64cmp(
            kv->version,
            c->target_union_case == ETCDSERVERPB__COMPARE__TARGET_UNION_VERSION ? c->version : 0);
        break;
    case ETCDSERVERPB__COMPARE__COMPARE_TARGET__LEASE:
        result = i64cmp(kv->lease, c->target_union_case == ETCDSERVERPB__COMPARE__TARGET_UNION_LEASE
                                       ? c->lease
                                       : 0);
        break;
    default:
        break;
    }
    switch (c->result) {
    case ETCDSERVERPB__COMPARE__COMPARE_RESULT__EQUAL:
        return result == 0;
    case ETCDSERVERPB__COMPARE__COMPARE_RESULT__NOT_EQUAL:
        return result != 0;
    case ETCDSERVERPB__COMPARE__COMPARE_RESULT__GREATER:
        return result > 0;
    case ETCDSERVERPB__COMPARE__COMPARE_RESULT__LESS:
        return result < 0;
    default:
        return true;
    }
}

typedef struct cmp_ctx {
    const Etcdserverpb__Compare *c;
    bool ok;
} cmp_ctx;

static int compare_fn(void *arg, const kv_ks_kv *kv)
{
    cmp_ctx *x = arg;
    if (compare_kv(x->c, kv))
        return 0;
    x->ok = false;
    return 1; /* stop */
}

/* etcd applyCompare: every key in the range must satisfy it; no key: VALUE fails, other
 * targets compare against the zero KeyValue. Walks the index, O(1) memory. */
static int apply_compare(kv_actx *a, const Etcdserverpb__Compare *c, bool *ok)
{
    cmp_ctx x = {c, true};
    size_t n = 0;
    int rc = kv_ks_walk(a->ks, c->key.data, c->key.len, c->range_end.data, c->range_end.len,
                        compare_fn, &x, &n);
    if (rc < 0)
        return rc;
    *ok = x.ok;
    if (n == 0) {
        kv_ks_kv zero = {0};
        *ok = c->target != ETCDSERVERPB__COMPARE__COMPARE_TARGET__VALUE && compare_kv(c, &zero);
    }
    return 0;
}

typedef struct path {
    bool *v;
    size_t n, cap;
} path;

/* etcd compareToPath: DFS order, all compares evaluated before any op runs. */
static int compare_to_path(kv_actx *a, const Etcdserverpb__TxnRequest *t, path *p)
{
    bool ok = true;
    int rc;
    for (size_t i = 0; i < t->n_compare && ok; i++)
        if ((rc = apply_compare(a, t->compare[i], &ok)))
            return rc;
    if (p->n == p->cap) {
        size_t nc = p->cap ? p->cap * 2 : 8;
        bool *n = realloc(p->v, nc * sizeof *n);
        if (!n)
            return -ENOMEM;
        p->v = n;
        p->cap = nc;
    }
    p->v[p->n++] = ok;
    size_t n = ok ? t->n_success : t->n_failure;
    Etcdserverpb__RequestOp **ops = ok ? t->success : t->failure;
    for (size_t i = 0; i < n; i++)
        if (ops[i]->request_case == ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_TXN &&
            (rc = compare_to_path(a, ops[i]->request_txn, p)))
            return rc;
    return 0;
}

/* etcd checkRequests with checkRequestPut (puts) or checkRequestRange (!puts), along the
 * path, against the state before the txn. */
static int check_requests(kv_actx *a, const Etcdserverpb__TxnRequest *t, const path *p, size_t *pos,
                          bool puts)
{
    bool ok = p->v[(*pos)++];
    size_t n = ok ? t->n_success : t->n_failure;
    Etcdserverpb__RequestOp **ops = ok ? t->success : t->failure;
    int rc;
    for (size_t i = 0; i < n; i++) {
        const Etcdserverpb__RequestOp *op = ops[i];
        if (op->request_case == ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_TXN) {
            if ((rc = check_requests(a, op->request_txn, p, pos, puts)))
                return rc;
        } else if (puts && op->request_case == ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT) {
            const Etcdserverpb__PutRequest *pr = op->request_put;
            if (pr->ignore_value || pr->ignore_lease) {
                kv_ks_kv *kv;
                rc = kv_ks_get(a->ks, pr->key.data, pr->key.len, &kv);
                if (rc == -ENOENT) {
                    kv_apply_err(a->res, KV_ERR_KEY_NOT_FOUND);
                    return 1;
                }
                if (rc)
                    return rc;
                free(kv);
            }
            if (pr->lease != 0 && (rc = kv_apply_lease_exists(a, pr->lease)))
                return rc;
        } else if (!puts && op->request_case == ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_RANGE) {
            int64_t rev = op->request_range->revision;
            if (rev == 0)
                continue;
            if (rev > kv_ks_read_rev(a->ks)) {
                kv_apply_err(a->res, KV_ERR_FUTURE_REV);
                return 1;
            }
            if (rev < kv_ks_compact_rev(a->ks)) {
                kv_apply_err(a->res, KV_ERR_COMPACTED);
                return 1;
            }
        }
    }
    return 0;
}

/* Runs the ops along the path; resp NULL: quiet (no response is built, the ops are the
 * same: a Range op still runs, so that a corrupt record fails the txn on every member). */
static int exec_txn(kv_actx *a, const Etcdserverpb__TxnRequest *t, const path *p, size_t *pos,
                    Etcdserverpb__TxnResponse *resp)
{
    bool ok = p->v[(*pos)++];
    size_t n = ok ? t->n_success : t->n_failure;
    Etcdserverpb__RequestOp **ops = ok ? t->success : t->failure;
    if (resp) {
        resp->succeeded = ok;
        if (n && !(resp->responses = calloc(n, sizeof *resp->responses)))
            return -ENOMEM;
    }
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        Etcdserverpb__ResponseOp *ro = NULL;
        if (resp) {
            if (!(ro = malloc(sizeof *ro)))
                return -ENOMEM;
            etcdserverpb__response_op__init(ro);
            resp->responses[resp->n_responses++] = ro;
        }
        const Etcdserverpb__RequestOp *op = ops[i];
        switch (op->request_case) {
        case ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_RANGE:
            rc = kv_apply_range_op(a, op->request_range, ro ? &ro->response_range : NULL);
            if (!rc && ro)
                ro->response_case = ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_RANGE;
            break;
        case ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT:
            rc = do_put(a, op->request_put, true, ro ? &ro->response_put : NULL);
            if (!rc && ro)
                ro->response_case = ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_PUT;
            break;
        case ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_DELETE_RANGE:
            rc = do_delete(a, op->request_delete_range, true,
                           ro ? &ro->response_delete_range : NULL);
            if (!rc && ro)
                ro->response_case = ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_DELETE_RANGE;
            break;
        case ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_TXN: {
            Etcdserverpb__TxnResponse *sub = NULL;
            if (ro) {
                if (!(sub = malloc(sizeof *sub)))
                    return -ENOMEM;
                etcdserverpb__txn_response__init(sub);
                ro->response_txn = sub;
                ro->response_case = ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_TXN;
                /* etcd gives nested txn responses an empty header */
                if (!(sub->header = kv_apply_header(0)))
                    return -ENOMEM;
            }
            rc = exec_txn(a, op->request_txn, p, pos, sub);
            break;
        }
        default:
            kv_apply_err(a->res, KV_ERR_KEY_NOT_FOUND);
            rc = 1;
            break;
        }
    }
    return rc;
}

int kv_apply_txn(kv_actx *a, const Etcdserverpb__TxnRequest *t, ProtobufCMessage **msg,
                 Etcdserverpb__ResponseHeader **hdr)
{
    int rc = kv_txn_check(t, a->max_txn_ops, a->max_key, a->res);
    if (rc)
        return rc;
    path p = {0};
    size_t pos = 0;
    Etcdserverpb__TxnResponse *resp = NULL;
    if ((rc = compare_to_path(a, t, &p)))
        goto out;
    if ((rc = check_requests(a, t, &p, &pos, true)))
        goto out;
    pos = 0;
    if ((rc = check_requests(a, t, &p, &pos, false)))
        goto out;
    if (!a->quiet) {
        if (!(resp = malloc(sizeof *resp))) {
            rc = -ENOMEM;
            goto out;
        }
        etcdserverpb__txn_response__init(resp);
    }
    pos = 0;
    if ((rc = exec_txn(a, t, &p, &pos, resp)))
        goto out;
    if (resp) {
        if (!(resp->header = kv_apply_header(kv_ks_end_rev(a->ks)))) {
            rc = -ENOMEM;
            goto out;
        }
        *msg = &resp->base;
        *hdr = resp->header;
        resp = NULL;
    }
out:
    if (resp)
        protobuf_c_message_free_unpacked(&resp->base, NULL);
    free(p.v);
    return rc;
}

int kv_apply_put(kv_actx *a, const Etcdserverpb__PutRequest *p, ProtobufCMessage **msg,
                 Etcdserverpb__ResponseHeader **hdr)
{
    Etcdserverpb__PutResponse *r = NULL;
    int rc = do_put(a, p, false, a->quiet ? NULL : &r);
    if (rc == 0 && r) {
        *msg = &r->base;
        *hdr = r->header;
    }
    return rc;
}

int kv_apply_delete(kv_actx *a, const Etcdserverpb__DeleteRangeRequest *d, ProtobufCMessage **msg,
                    Etcdserverpb__ResponseHeader **hdr)
{
    Etcdserverpb__DeleteRangeResponse *r = NULL;
    int rc = do_delete(a, d, false, a->quiet ? NULL : &r);
    if (rc == 0 && r) {
        *msg = &r->base;
        *hdr = r->header;
    }
    return rc;
}

int kv_apply_compact(kv_actx *a, const Etcdserverpb__CompactionRequest *c, ProtobufCMessage **msg,
                     Etcdserverpb__ResponseHeader **hdr)
{
    a->res->barrier = KV_RESULT_BARRIER_COMPACT; /* a Watch is created against it (apply.h) */
    int rc = kv_ks_compact(a->ks, c->revision);
    if (rc == KV_STORE_ERR_COMPACTED) {
        kv_apply_err(a->res, KV_ERR_COMPACTED);
        return 1;
    }
    if (rc == KV_STORE_ERR_FUTURE_REV) {
        kv_apply_err(a->res, KV_ERR_FUTURE_REV);
        return 1;
    }
    if (rc || a->quiet)
        return rc;
    Etcdserverpb__CompactionResponse *resp = malloc(sizeof *resp);
    if (!resp)
        return -ENOMEM;
    etcdserverpb__compaction_response__init(resp);
    if (!(resp->header = kv_apply_header(kv_ks_rev(a->ks)))) {
        free(resp);
        return -ENOMEM;
    }
    *msg = &resp->base;
    *hdr = resp->header;
    return 0;
}
