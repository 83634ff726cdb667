/* apply: the ordered apply function (etcd 3.4 etcdserver/apply.go semantics) for
 * kvdpb.InternalRequest: Put, DeleteRange, Txn, Compaction and the lease requests. Each
 * request runs in an LMDB child transaction of the batch (see store.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.pb-c.h"
#include "mvcc/pb_scan.h"
#include "mvcc/store_int.h"

enum { EV_GRANT = 1, EV_REVOKE, EV_CHECKPOINT };
typedef struct obs_ev {
    int type;
    int64_t id, ttl, rem;
} obs_ev;

typedef struct actx {
    kv_wctx w;
    obs_ev *ev;
    size_t nev, cap;
    unsigned alarms; /* alarm mask of the batch, changed by alarm requests */
} actx;

static int ev_add(actx *a, int type, int64_t id, int64_t ttl, int64_t rem)
{
    if (a->nev == a->cap) {
        size_t nc = a->cap ? a->cap * 2 : 4;
        obs_ev *n = realloc(a->ev, nc * sizeof *n);
        if (!n)
            return -ENOMEM;
        a->ev = n;
        a->cap = nc;
    }
    a->ev[a->nev++] = (obs_ev){type, id, ttl, rem};
    return 0;
}

static int lease_exists(kv_wctx *w, int64_t id)
{
    kv_lease_rec rec;
    int rc = kv_lease_table_get(&w->s->leases, w->txn, id, &rec);
    if (rc == -ENOENT) {
        kv_res_etcd_err(w->res, KV_ERR_LEASE_NOT_FOUND);
        return 1;
    }
    return rc;
}

/* Live key-value of key at the context's read revision, or NULL. */
static int get_live(kv_wctx *w, const ProtobufCBinaryData *key, Mvccpb__KeyValue **out)
{
    kv_ent e;
    *out = NULL;
    int rc = kv_index_get(w->s, w->txn, key->data, key->len, kv_wctx_read_rev(w), &e);
    if (rc == -ENOENT || (rc == 0 && e.tomb))
        return 0;
    if (rc)
        return rc;
    return kv_rec_load(w->s, w->txn, &e, key->data, key->len, out);
}

static int do_put(kv_wctx *w, const Etcdserverpb__PutRequest *p, bool in_txn,
                  Etcdserverpb__PutResponse **out)
{
    int rc;
    if (!in_txn) {
        if ((rc = kv_put_check(p, w->s->maxkey, w->res)))
            return rc;
        if (p->lease != 0 && (rc = lease_exists(w, p->lease)))
            return rc;
    }
    Mvccpb__KeyValue *prev = NULL;
    if (p->ignore_value || p->ignore_lease || p->prev_kv) {
        if ((rc = get_live(w, &p->key, &prev)))
            return rc;
    }
    if ((p->ignore_value || p->ignore_lease) && !prev) {
        kv_res_etcd_err(w->res, KV_ERR_KEY_NOT_FOUND);
        return 1;
    }
    const ProtobufCBinaryData *val = p->ignore_value ? &prev->value : &p->value;
    int64_t lease = p->ignore_lease ? prev->lease : p->lease;
    Etcdserverpb__PutResponse *resp = malloc(sizeof *resp);
    if (!resp) {
        rc = -ENOMEM;
        goto fail;
    }
    etcdserverpb__put_response__init(resp);
    if ((rc = kv_w_put(w, p->key.data, p->key.len, val->data, val->len, lease)))
        goto fail;
    if (!(resp->header = kv_header_new(w->begin_rev + 1))) {
        rc = -ENOMEM;
        goto fail;
    }
    if (p->prev_kv) {
        resp->prev_kv = prev;
        prev = NULL;
    }
    if (prev)
        mvccpb__key_value__free_unpacked(prev, NULL);
    *out = resp;
    return 0;
fail:
    if (prev)
        mvccpb__key_value__free_unpacked(prev, NULL);
    if (resp)
        protobuf_c_message_free_unpacked(&resp->base, NULL);
    return rc;
}

static int do_delete(kv_wctx *w, const Etcdserverpb__DeleteRangeRequest *d, bool in_txn,
                     Etcdserverpb__DeleteRangeResponse **out)
{
    if (!in_txn && d->key.len == 0) {
        kv_res_etcd_err(w->res, KV_ERR_EMPTY_KEY);
        return 1;
    }
    Etcdserverpb__DeleteRangeResponse *resp = malloc(sizeof *resp);
    if (!resp)
        return -ENOMEM;
    etcdserverpb__delete_range_response__init(resp);
    int rc =
        kv_w_delete_range(w, d->key.data, d->key.len, d->range_end.data, d->range_end.len,
                          &resp->deleted, d->prev_kv ? &resp->prev_kvs : NULL, &resp->n_prev_kvs);
    if (rc == 0 && !(resp->header = kv_header_new(kv_wctx_end_rev(w))))
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

static bool compare_kv(const Etcdserverpb__Compare *c, const Mvccpb__KeyValue *kv)
{
    int result = 0;
    switch (c->target) {
    case ETCDSERVERPB__COMPARE__COMPARE_TARGET__VALUE: {
        ProtobufCBinaryData v = {0, NULL};
        if (c->target_union_case == ETCDSERVERPB__COMPARE__TARGET_UNION_VALUE)
            v = c->value;
        size_t n = kv->value.len < v.len ? kv->value.len : v.len;
        result = n ? memcmp(kv->value.data, v.data, n) : 0;
        if (!result)
            result = kv->value.len < v.len ? -1 : kv->value.len > v.len ? 1 : 0;
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

/* etcd applyCompare: every key in the range must satisfy it; no key: VALUE fails, other
 * targets compare against the zero KeyValue. Walks the index, O(1) memory. */
static int apply_compare(kv_wctx *w, const Etcdserverpb__Compare *c, bool *ok)
{
    kv_iter it;
    int rc = kv_iter_open(&it, w->s, w->txn, c->key.data, c->key.len, c->range_end.data,
                          c->range_end.len, kv_wctx_read_rev(w), false);
    if (rc)
        return rc;
    bool any = false;
    *ok = true;
    while ((rc = kv_iter_next(&it)) == 1) {
        any = true;
        Mvccpb__KeyValue *kv;
        if ((rc = kv_rec_load(w->s, w->txn, &it.ent, it.key, it.klen, &kv)))
            break;
        bool r = compare_kv(c, kv);
        mvccpb__key_value__free_unpacked(kv, NULL);
        if (!r) {
            *ok = false;
            break;
        }
    }
    kv_iter_close(&it);
    if (rc < 0)
        return rc;
    if (!any) {
        Mvccpb__KeyValue zero = MVCCPB__KEY_VALUE__INIT;
        *ok = c->target != ETCDSERVERPB__COMPARE__COMPARE_TARGET__VALUE && compare_kv(c, &zero);
    }
    return 0;
}

typedef struct path {
    bool *v;
    size_t n, cap;
} path;

/* etcd compareToPath: DFS order, all compares evaluated before any op runs. */
static int compare_to_path(kv_wctx *w, const Etcdserverpb__TxnRequest *t, path *p)
{
    bool ok = true;
    int rc;
    for (size_t i = 0; i < t->n_compare && ok; i++)
        if ((rc = apply_compare(w, t->compare[i], &ok)))
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
            (rc = compare_to_path(w, ops[i]->request_txn, p)))
            return rc;
    return 0;
}

/* etcd checkRequests with checkRequestPut (puts) or checkRequestRange (!puts), along the
 * path, against the state before the txn. */
static int check_requests(kv_wctx *w, const Etcdserverpb__TxnRequest *t, const path *p, size_t *pos,
                          bool puts)
{
    bool ok = p->v[(*pos)++];
    size_t n = ok ? t->n_success : t->n_failure;
    Etcdserverpb__RequestOp **ops = ok ? t->success : t->failure;
    int rc;
    for (size_t i = 0; i < n; i++) {
        const Etcdserverpb__RequestOp *op = ops[i];
        if (op->request_case == ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_TXN) {
            if ((rc = check_requests(w, op->request_txn, p, pos, puts)))
                return rc;
        } else if (puts && op->request_case == ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT) {
            const Etcdserverpb__PutRequest *pr = op->request_put;
            if (pr->ignore_value || pr->ignore_lease) {
                Mvccpb__KeyValue *kv;
                if ((rc = get_live(w, &pr->key, &kv)))
                    return rc;
                if (!kv) {
                    kv_res_etcd_err(w->res, KV_ERR_KEY_NOT_FOUND);
                    return 1;
                }
                mvccpb__key_value__free_unpacked(kv, NULL);
            }
            if (pr->lease != 0 && (rc = lease_exists(w, pr->lease)))
                return rc;
        } else if (!puts && op->request_case == ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_RANGE) {
            int64_t rev = op->request_range->revision;
            if (rev == 0)
                continue;
            if (rev > kv_wctx_read_rev(w)) {
                kv_res_etcd_err(w->res, KV_ERR_FUTURE_REV);
                return 1;
            }
            if (rev < w->m->compact_rev) {
                kv_res_etcd_err(w->res, KV_ERR_COMPACTED);
                return 1;
            }
        }
    }
    return 0;
}

static int exec_txn(kv_wctx *w, const Etcdserverpb__TxnRequest *t, const path *p, size_t *pos,
                    Etcdserverpb__TxnResponse *resp)
{
    bool ok = p->v[(*pos)++];
    size_t n = ok ? t->n_success : t->n_failure;
    Etcdserverpb__RequestOp **ops = ok ? t->success : t->failure;
    resp->succeeded = ok;
    if (n && !(resp->responses = calloc(n, sizeof *resp->responses)))
        return -ENOMEM;
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        Etcdserverpb__ResponseOp *ro = malloc(sizeof *ro);
        if (!ro)
            return -ENOMEM;
        etcdserverpb__response_op__init(ro);
        resp->responses[resp->n_responses++] = ro;
        const Etcdserverpb__RequestOp *op = ops[i];
        switch (op->request_case) {
        case ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_RANGE:
            rc = kv_range_exec(w->s, w->txn, kv_wctx_read_rev(w), w->m->compact_rev, w->m->keys,
                               op->request_range, w->res, &ro->response_range);
            if (!rc)
                ro->response_case = ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_RANGE;
            break;
        case ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT:
            rc = do_put(w, op->request_put, true, &ro->response_put);
            if (!rc)
                ro->response_case = ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_PUT;
            break;
        case ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_DELETE_RANGE:
            rc = do_delete(w, op->request_delete_range, true, &ro->response_delete_range);
            if (!rc)
                ro->response_case = ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_DELETE_RANGE;
            break;
        case ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_TXN: {
            Etcdserverpb__TxnResponse *sub = malloc(sizeof *sub);
            if (!sub)
                return -ENOMEM;
            etcdserverpb__txn_response__init(sub);
            ro->response_txn = sub;
            ro->response_case = ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_TXN;
            /* etcd gives nested txn responses an empty header */
            if (!(sub->header = kv_header_new(0)))
                return -ENOMEM;
            rc = exec_txn(w, op->request_txn, p, pos, sub);
            break;
        }
        default:
            kv_res_etcd_err(w->res, KV_ERR_KEY_NOT_FOUND);
            rc = 1;
            break;
        }
    }
    return rc;
}

static int do_txn(kv_wctx *w, const Etcdserverpb__TxnRequest *t, Etcdserverpb__TxnResponse **out)
{
    int rc = kv_txn_check(t, w->s->cfg.max_txn_ops, w->s->maxkey, w->res);
    if (rc)
        return rc;
    path p = {0};
    size_t pos = 0;
    Etcdserverpb__TxnResponse *resp = NULL;
    if ((rc = compare_to_path(w, t, &p)))
        goto out;
    if ((rc = check_requests(w, t, &p, &pos, true)))
        goto out;
    pos = 0;
    if ((rc = check_requests(w, t, &p, &pos, false)))
        goto out;
    if (!(resp = malloc(sizeof *resp))) {
        rc = -ENOMEM;
        goto out;
    }
    etcdserverpb__txn_response__init(resp);
    pos = 0;
    if ((rc = exec_txn(w, t, &p, &pos, resp)))
        goto out;
    if (!(resp->header = kv_header_new(kv_wctx_end_rev(w)))) {
        rc = -ENOMEM;
        goto out;
    }
    *out = resp;
    resp = NULL;
out:
    if (resp)
        protobuf_c_message_free_unpacked(&resp->base, NULL);
    free(p.v);
    return rc;
}

/* ---- compaction ---- */

static int do_compact(kv_wctx *w, const Etcdserverpb__CompactionRequest *c,
                      Etcdserverpb__CompactionResponse **out)
{
    if (c->revision <= w->m->compact_rev) {
        kv_res_etcd_err(w->res, KV_ERR_COMPACTED);
        return 1;
    }
    if (c->revision > w->m->rev) {
        kv_res_etcd_err(w->res, KV_ERR_FUTURE_REV);
        return 1;
    }
    /* O(1): the records go in bounded batches (kv_store_compact_step). */
    int rc = kv_compact_schedule(w->s, w->txn, c->revision);
    if (rc)
        return rc;
    w->m->compact_rev = c->revision;
    Etcdserverpb__CompactionResponse *resp = malloc(sizeof *resp);
    if (!resp)
        return -ENOMEM;
    etcdserverpb__compaction_response__init(resp);
    if (!(resp->header = kv_header_new(w->m->rev))) {
        free(resp);
        return -ENOMEM;
    }
    *out = resp;
    return 0;
}

/* ---- leases ---- */

static int do_lease_grant(actx *a, const Etcdserverpb__LeaseGrantRequest *g,
                          Etcdserverpb__LeaseGrantResponse **out)
{
    kv_wctx *w = &a->w;
    if (g->id == 0) {
        kv_res_etcd_err(w->res, KV_ERR_LEASE_NOT_FOUND);
        return 1;
    }
    if (g->ttl > KV_MAX_LEASE_TTL) {
        kv_res_etcd_err(w->res, KV_ERR_LEASE_TTL_TOO_LARGE);
        return 1;
    }
    kv_lease_rec rec;
    int rc = kv_lease_table_get(&w->s->leases, w->txn, g->id, &rec);
    if (rc == 0) {
        kv_res_etcd_err(w->res, KV_ERR_LEASE_EXIST);
        return 1;
    }
    if (rc != -ENOENT)
        return rc;
    rec = (kv_lease_rec){g->id, g->ttl, 0};
    if ((rc = kv_lease_table_put(&w->s->leases, w->txn, &rec)))
        return rc;
    if ((rc = ev_add(a, EV_GRANT, g->id, g->ttl, 0)))
        return rc;
    Etcdserverpb__LeaseGrantResponse *resp = malloc(sizeof *resp);
    if (!resp)
        return -ENOMEM;
    etcdserverpb__lease_grant_response__init(resp);
    resp->id = g->id;
    resp->ttl = g->ttl;
    if (!(resp->header = kv_header_new(w->m->rev))) {
        free(resp);
        return -ENOMEM;
    }
    *out = resp;
    return 0;
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

static int do_lease_revoke(actx *a, const Etcdserverpb__LeaseRevokeRequest *r,
                           Etcdserverpb__LeaseRevokeResponse **out)
{
    kv_wctx *w = &a->w;
    int rc = lease_exists(w, r->id);
    if (rc)
        return rc;
    keylist l = {0};
    rc = kv_lease_table_keys(&w->s->leases, w->txn, r->id, collect_key, &l);
    /* etcd deletes the keys (sorted) in one write txn: one revision for all of them. */
    for (size_t i = 0; i < l.n && !rc; i++) {
        int64_t deleted;
        rc = kv_w_delete_range(w, l.k[i], l.len[i], NULL, 0, &deleted, NULL, NULL);
    }
    for (size_t i = 0; i < l.n; i++)
        free(l.k[i]);
    free(l.k);
    free(l.len);
    if (rc)
        return rc;
    if ((rc = kv_lease_table_del(&w->s->leases, w->txn, r->id)))
        return rc;
    if ((rc = ev_add(a, EV_REVOKE, r->id, 0, 0)))
        return rc;
    Etcdserverpb__LeaseRevokeResponse *resp = malloc(sizeof *resp);
    if (!resp)
        return -ENOMEM;
    etcdserverpb__lease_revoke_response__init(resp);
    if (!(resp->header = kv_header_new(kv_wctx_end_rev(w)))) {
        free(resp);
        return -ENOMEM;
    }
    *out = resp;
    return 0;
}

static int do_lease_checkpoint(actx *a, const Etcdserverpb__LeaseCheckpointRequest *r,
                               Etcdserverpb__LeaseCheckpointResponse **out)
{
    kv_wctx *w = &a->w;
    int rc;
    for (size_t i = 0; i < r->n_checkpoints; i++) {
        const Etcdserverpb__LeaseCheckpoint *cp = r->checkpoints[i];
        kv_lease_rec rec;
        rc = kv_lease_table_get(&w->s->leases, w->txn, cp->id, &rec);
        if (rc == -ENOENT)
            continue; /* as etcd: checkpoints of unknown leases are ignored */
        if (rc)
            return rc;
        rec.remaining_ttl = cp->remaining_ttl;
        if ((rc = kv_lease_table_put(&w->s->leases, w->txn, &rec)) ||
            (rc = ev_add(a, EV_CHECKPOINT, cp->id, rec.ttl, cp->remaining_ttl)))
            return rc;
    }
    Etcdserverpb__LeaseCheckpointResponse *resp = malloc(sizeof *resp);
    if (!resp)
        return -ENOMEM;
    etcdserverpb__lease_checkpoint_response__init(resp);
    if (!(resp->header = kv_header_new(w->m->rev))) {
        free(resp);
        return -ENOMEM;
    }
    *out = resp;
    return 0;
}

/* ---- dispatch ---- */

static int dispatch(actx *a, const Kvdpb__InternalRequest *ir, ProtobufCMessage **msg,
                    Etcdserverpb__ResponseHeader **hdr)
{
    kv_wctx *w = &a->w;
    int rc;
    switch (ir->request_case) {
    case KVDPB__INTERNAL_REQUEST__REQUEST_PUT: {
        Etcdserverpb__PutResponse *r = NULL;
        if ((rc = do_put(w, ir->put, false, &r)))
            return rc;
        *msg = &r->base;
        *hdr = r->header;
        return 0;
    }
    case KVDPB__INTERNAL_REQUEST__REQUEST_DELETE_RANGE: {
        Etcdserverpb__DeleteRangeResponse *r = NULL;
        if ((rc = do_delete(w, ir->delete_range, false, &r)))
            return rc;
        *msg = &r->base;
        *hdr = r->header;
        return 0;
    }
    case KVDPB__INTERNAL_REQUEST__REQUEST_TXN: {
        Etcdserverpb__TxnResponse *r = NULL;
        if ((rc = do_txn(w, ir->txn, &r)))
            return rc;
        *msg = &r->base;
        *hdr = r->header;
        return 0;
    }
    case KVDPB__INTERNAL_REQUEST__REQUEST_COMPACTION: {
        Etcdserverpb__CompactionResponse *r = NULL;
        if ((rc = do_compact(w, ir->compaction, &r)))
            return rc;
        *msg = &r->base;
        *hdr = r->header;
        return 0;
    }
    case KVDPB__INTERNAL_REQUEST__REQUEST_LEASE_GRANT: {
        Etcdserverpb__LeaseGrantResponse *r = NULL;
        if ((rc = do_lease_grant(a, ir->lease_grant, &r)))
            return rc;
        *msg = &r->base;
        *hdr = r->header;
        return 0;
    }
    case KVDPB__INTERNAL_REQUEST__REQUEST_LEASE_REVOKE: {
        Etcdserverpb__LeaseRevokeResponse *r = NULL;
        if ((rc = do_lease_revoke(a, ir->lease_revoke, &r)))
            return rc;
        *msg = &r->base;
        *hdr = r->header;
        return 0;
    }
    case KVDPB__INTERNAL_REQUEST__REQUEST_LEASE_CHECKPOINT: {
        Etcdserverpb__LeaseCheckpointResponse *r = NULL;
        if ((rc = do_lease_checkpoint(a, ir->lease_checkpoint, &r)))
            return rc;
        *msg = &r->base;
        *hdr = r->header;
        return 0;
    }
    case KVDPB__INTERNAL_REQUEST__REQUEST_ALARM: {
        Etcdserverpb__AlarmResponse *r = NULL;
        if ((rc = kv_alarm_apply(w->s, w->txn, &a->alarms, w->m->rev, ir->alarm, w->res, &r)))
            return rc;
        *msg = &r->base;
        *hdr = r->header;
        return 0;
    }
    case KVDPB__INTERNAL_REQUEST__REQUEST_MEMBER_PUBLISH:
    case KVDPB__INTERNAL_REQUEST__REQUEST_MEMBER_UPDATE: {
        Etcdserverpb__MemberUpdateResponse *r = NULL;
        if ((rc = kv_members_apply(w->s, w->txn, w->m->rev, ir, w->res, &r)))
            return rc;
        *msg = &r->base;
        *hdr = r->header;
        return 0;
    }
    default:
        kv_res_etcd_err(w->res, KV_ERR_EMPTY_INTERNAL_REQ);
        return 1;
    }
}

static void fire_observers(kv_store *s, const actx *a)
{
    const kv_store_lease_observer *o = &s->obs;
    for (size_t i = 0; i < a->nev; i++) {
        const obs_ev *e = &a->ev[i];
        if (e->type == EV_GRANT && o->granted)
            o->granted(o->arg, e->id, e->ttl, e->rem);
        else if (e->type == EV_REVOKE && o->revoked)
            o->revoked(o->arg, e->id);
        else if (e->type == EV_CHECKPOINT && o->checkpointed)
            o->checkpointed(o->arg, e->id, e->rem);
    }
}

/* Quota plus half the headroom (see store.h). */
static size_t batch_growth_limit(kv_store *s)
{
    size_t q = s->cfg.quota_bytes;
    return q + (kv_store_map_size(q) - q) / 2;
}

int kv_store_apply(kv_store *s, kv_store_batch *b, uint64_t index, const uint8_t *req, size_t len,
                   const kv_header_info *h, kv_result *res)
{
    memset(res, 0, sizeof *res);
    if (!s || !b || !b->open || b != &s->batch)
        return -EINVAL;
    if (index <= b->meta.applied) {
        res->skipped = 1;
        res->revision = b->meta.rev;
        return 0;
    }
    /* Bound txn nesting before the recursive unpack (issue 8, D1): requests also arrive here
     * from paths that did not pre-scan them (replay, later raft). */
    kv_txn_limits lim;
    kv_txn_limits_init(&lim, s->cfg.max_txn_ops);
    int scan = kv_pb_scan_internal(req, len, &lim, NULL);
    if (scan == KV_PB_SCAN_TOO_MANY_OPS) {
        kv_res_etcd_err(res, KV_ERR_TOO_MANY_OPS);
        b->meta.applied = index;
        res->revision = b->meta.rev;
        return 0;
    }
    Kvdpb__InternalRequest *ir =
        scan == KV_PB_SCAN_OK ? kvdpb__internal_request__unpack(NULL, len, req) : NULL;
    if (!ir) {
        kv_res_etcd_err(res, KV_ERR_DECODE_INTERNAL_REQ);
        b->meta.applied = index;
        res->revision = b->meta.rev;
        return 0;
    }
    MDB_txn *child;
    int rc = mdb_txn_begin(s->env, b->txn, 0, &child);
    if (rc) {
        kvdpb__internal_request__free_unpacked(ir, NULL);
        return kv_mdb_err(rc);
    }
    kv_meta m = b->meta;
    actx a = {.w = {s, child, &m, m.rev, 0, res}, .alarms = b->alarms};
    ProtobufCMessage *msg = NULL;
    Etcdserverpb__ResponseHeader *hdr = NULL;
    rc = kv_alarm_gate(b->alarms, ir, res);
    int grow = rc == 0 && kv_alarm_is_growth(ir);
    if (grow && !s->deterministic && b->base_size + b->grown > (int64_t)batch_growth_limit(s)) {
        /* One batch of requests admitted under the quota must not eat the headroom that
         * deletes and compaction need: refuse growth past half of it (kvd-specific). */
        kv_res_etcd_err(res, KV_ERR_NO_SPACE);
        kv_store_request_alarm(s, KV_ALARM_NOSPACE);
        rc = 1;
    }
    if (rc == 0)
        rc = dispatch(&a, ir, &msg, &hdr);
    if (rc == 0) {
        if (h) {
            hdr->cluster_id = h->cluster_id;
            hdr->member_id = h->member_id;
            hdr->raft_term = h->raft_term;
        }
        if (b->quiet) { /* nobody waits for this response on this member */
            rc = kv_mdb_err(mdb_txn_commit(child));
            child = NULL;
        } else {
            size_t n = protobuf_c_message_get_packed_size(msg);
            res->resp = malloc(n ? n : 1);
            if (!res->resp) {
                rc = -ENOMEM;
            } else {
                res->resp_len = protobuf_c_message_pack(msg, res->resp);
                rc = kv_mdb_err(mdb_txn_commit(child));
                child = NULL;
            }
        }
    }
    if (msg)
        protobuf_c_message_free_unpacked(msg, NULL);
    char what[128] = "apply";
    if (rc == -EBADMSG) {
        const ProtobufCBinaryData *k = NULL;
        if (ir->request_case == KVDPB__INTERNAL_REQUEST__REQUEST_PUT)
            k = &ir->put->key;
        else if (ir->request_case == KVDPB__INTERNAL_REQUEST__REQUEST_DELETE_RANGE)
            k = &ir->delete_range->key;
        if (k)
            kv_describe_key(what, sizeof what, "a write to key", k->data, k->len);
        else
            snprintf(what, sizeof what, "a write (request kind %d)", (int)ir->request_case);
    }
    kvdpb__internal_request__free_unpacked(ir, NULL);
    if (child)
        mdb_txn_abort(child);
    if (s->deterministic && (rc == -ENOSPC || rc == -E2BIG)) {
        /* a per-member limit must not become a per-member result: fail the batch */
        fprintf(stderr, "kvd: apply at index %llu: %s; this member cannot apply the log\n",
                (unsigned long long)index,
                rc == -ENOSPC ? "the LMDB map is full" : "too many pages for one transaction");
        free(a.ev);
        return rc;
    }
    if (rc == -ENOSPC) {
        kv_res_etcd_err(res, KV_ERR_NO_SPACE);
        kv_store_request_alarm(s, KV_ALARM_NOSPACE); /* past the headroom: raise NOSPACE */
        rc = 1;
    } else if (rc == -EBADMSG) {
        /* Corruption fails this request only; the member stops serving (CORRUPT). */
        kv_res_etcd_err(res, KV_ERR_RECORD_CHECKSUM);
        kv_store_note_corrupt(s, what);
        rc = 1;
    } else if (rc == -E2BIG) {
        kv_res_etcd_err(res, KV_ERR_TXN_TOO_MANY_PAGES);
        rc = 1;
    }
    if (rc < 0 || rc == 1) {
        free(res->resp);
        res->resp = NULL;
        res->resp_len = 0;
    }
    if (rc < 0) {
        free(a.ev);
        return rc;
    }
    if (rc == 0) {
        m.rev = kv_wctx_end_rev(&a.w);
        b->meta = m;
        b->alarms = a.alarms;
        if (grow) /* pages of the rev record, the index entry and copied branches */
            b->grown += 2 * (int64_t)len + 256;
        fire_observers(s, &a);
    }
    free(a.ev);
    b->meta.applied = index;
    res->revision = b->meta.rev;
    s->counters.applies++;
    return 0;
}
