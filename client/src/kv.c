/*
 * kv.c - typed KV API over kvc_call_unary: request building (etcd's options), response
 * decoding into plain C results, the txn builder, sync and async forms.
 *
 * Results point into the unpacked protobuf message kept in result->priv_; the *_free
 * functions release both.
 */
#include "internal.h"
#include "pbconv.h"
#include "rpc.pb-c.h"

#include <stdlib.h>
#include <string.h>

#define PATH_RANGE "/etcdserverpb.KV/Range"
#define PATH_PUT "/etcdserverpb.KV/Put"
#define PATH_DELETE "/etcdserverpb.KV/DeleteRange"
#define PATH_TXN "/etcdserverpb.KV/Txn"
#define PATH_COMPACT "/etcdserverpb.KV/Compact"

/* ---- helpers ---- */

static int dup_bytes(ProtobufCBinaryData *d, const void *p, size_t n)
{
    d->len = n;
    d->data = malloc(n ? n : 1);
    if (!d->data)
        return -1;
    if (n)
        memcpy(d->data, p, n);
    return 0;
}

/* etcd's range_end rules: explicit end wins; prefix -> key with its last byte < 0xff
 * incremented (all 0xff or empty: "\0", every key); from_key -> "\0". */
static int set_range_end(ProtobufCBinaryData *key, ProtobufCBinaryData *end, const uint8_t *rend,
                         size_t rend_len, int prefix, int from_key)
{
    if (rend)
        return dup_bytes(end, rend, rend_len);
    if (prefix) {
        if (key->len == 0) {
            free(key->data);
            if (dup_bytes(key, "\0", 1) != 0)
                return -1;
            return dup_bytes(end, "\0", 1);
        }
        size_t n = key->len;
        while (n > 0 && key->data[n - 1] == 0xff)
            n--;
        if (n == 0)
            return dup_bytes(end, "\0", 1);
        if (dup_bytes(end, key->data, n) != 0)
            return -1;
        end->data[n - 1]++;
        return 0;
    }
    if (from_key) {
        if (key->len == 0) {
            free(key->data);
            if (dup_bytes(key, "\0", 1) != 0)
                return -1;
        }
        return dup_bytes(end, "\0", 1);
    }
    return 0;
}

static void range_req_free(Etcdserverpb__RangeRequest *r)
{
    if (!r)
        return;
    free(r->key.data);
    free(r->range_end.data);
    free(r);
}

static Etcdserverpb__RangeRequest *range_req_new(const void *key, size_t key_len,
                                                 const kvc_range_opts *o)
{
    Etcdserverpb__RangeRequest *r = malloc(sizeof *r);
    if (!r)
        return NULL;
    etcdserverpb__range_request__init(r);
    if (dup_bytes(&r->key, key, key_len) != 0)
        goto fail;
    if (o) {
        if (set_range_end(&r->key, &r->range_end, o->range_end, o->range_end_len, o->prefix,
                          o->from_key) != 0)
            goto fail;
        r->limit = o->limit;
        r->revision = o->revision;
        r->sort_order = (Etcdserverpb__RangeRequest__SortOrder)o->sort_order;
        r->sort_target = (Etcdserverpb__RangeRequest__SortTarget)o->sort_target;
        r->serializable = o->serializable != 0;
        r->keys_only = o->keys_only != 0;
        r->count_only = o->count_only != 0;
        r->min_mod_revision = o->min_mod_revision;
        r->max_mod_revision = o->max_mod_revision;
        r->min_create_revision = o->min_create_revision;
        r->max_create_revision = o->max_create_revision;
    }
    return r;
fail:
    range_req_free(r);
    return NULL;
}

static void put_req_free(Etcdserverpb__PutRequest *r)
{
    if (!r)
        return;
    free(r->key.data);
    free(r->value.data);
    free(r);
}

static Etcdserverpb__PutRequest *put_req_new(const void *key, size_t key_len, const void *value,
                                             size_t value_len, const kvc_put_opts *o)
{
    Etcdserverpb__PutRequest *r = malloc(sizeof *r);
    if (!r)
        return NULL;
    etcdserverpb__put_request__init(r);
    if (dup_bytes(&r->key, key, key_len) != 0 || dup_bytes(&r->value, value, value_len) != 0) {
        put_req_free(r);
        return NULL;
    }
    if (o) {
        r->lease = o->lease;
        r->prev_kv = o->prev_kv != 0;
        r->ignore_value = o->ignore_value != 0;
        r->ignore_lease = o->ignore_lease != 0;
    }
    return r;
}

static void del_req_free(Etcdserverpb__DeleteRangeRequest *r)
{
    if (!r)
        return;
    free(r->key.data);
    free(r->range_end.data);
    free(r);
}

static Etcdserverpb__DeleteRangeRequest *del_req_new(const void *key, size_t key_len,
                                                     const kvc_delete_opts *o)
{
    Etcdserverpb__DeleteRangeRequest *r = malloc(sizeof *r);
    if (!r)
        return NULL;
    etcdserverpb__delete_range_request__init(r);
    if (dup_bytes(&r->key, key, key_len) != 0)
        goto fail;
    if (o) {
        if (set_range_end(&r->key, &r->range_end, o->range_end, o->range_end_len, o->prefix,
                          o->from_key) != 0)
            goto fail;
        r->prev_kv = o->prev_kv != 0;
    }
    return r;
fail:
    del_req_free(r);
    return NULL;
}

static uint8_t *pack_msg(const ProtobufCMessage *m, size_t *len)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf)
        return NULL;
    *len = protobuf_c_message_pack(m, buf);
    return buf;
}

static kvc_kv *kvs_from(Mvccpb__KeyValue **kvs, size_t n)
{
    kvc_kv *a = calloc(n ? n : 1, sizeof *a);
    if (!a)
        return NULL;
    for (size_t i = 0; i < n; i++)
        kvc_kv_from(&a[i], kvs[i]);
    return a;
}

/* ---- decoding (the unpacked message is owned by the result when own != 0) ---- */

static int range_fill(kvc_range_result *out, Etcdserverpb__RangeResponse *r, int own)
{
    memset(out, 0, sizeof *out);
    kvc_header_from(&out->header, r->header);
    out->kvs = kvs_from(r->kvs, r->n_kvs);
    if (!out->kvs)
        return -1;
    out->n_kvs = r->n_kvs;
    out->more = r->more;
    out->count = r->count;
    out->priv_ = own ? r : NULL;
    return 0;
}

static int put_fill(kvc_put_result *out, Etcdserverpb__PutResponse *r, int own)
{
    memset(out, 0, sizeof *out);
    kvc_header_from(&out->header, r->header);
    if (r->prev_kv) {
        out->has_prev_kv = 1;
        kvc_kv_from(&out->prev_kv, r->prev_kv);
    }
    out->priv_ = own ? r : NULL;
    return 0;
}

static int del_fill(kvc_delete_result *out, Etcdserverpb__DeleteRangeResponse *r, int own)
{
    memset(out, 0, sizeof *out);
    kvc_header_from(&out->header, r->header);
    out->deleted = r->deleted;
    out->prev_kvs = kvs_from(r->prev_kvs, r->n_prev_kvs);
    if (!out->prev_kvs)
        return -1;
    out->n_prev_kvs = r->n_prev_kvs;
    out->priv_ = own ? r : NULL;
    return 0;
}

void kvc_range_result_free(kvc_range_result *r)
{
    if (!r)
        return;
    free(r->kvs);
    if (r->priv_)
        etcdserverpb__range_response__free_unpacked(r->priv_, NULL);
    memset(r, 0, sizeof *r);
}

void kvc_put_result_free(kvc_put_result *r)
{
    if (!r)
        return;
    if (r->priv_)
        etcdserverpb__put_response__free_unpacked(r->priv_, NULL);
    memset(r, 0, sizeof *r);
}

void kvc_delete_result_free(kvc_delete_result *r)
{
    if (!r)
        return;
    free(r->prev_kvs);
    if (r->priv_)
        etcdserverpb__delete_range_response__free_unpacked(r->priv_, NULL);
    memset(r, 0, sizeof *r);
}

void kvc_txn_result_free(kvc_txn_result *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->n_responses; i++) {
        kvc_range_result_free(&r->responses[i].range);
        kvc_put_result_free(&r->responses[i].put);
        kvc_delete_result_free(&r->responses[i].del);
    }
    free(r->responses);
    if (r->priv_)
        etcdserverpb__txn_response__free_unpacked(r->priv_, NULL);
    memset(r, 0, sizeof *r);
}

static int txn_fill(kvc_txn_result *out, Etcdserverpb__TxnResponse *r)
{
    memset(out, 0, sizeof *out);
    kvc_header_from(&out->header, r->header);
    out->succeeded = r->succeeded;
    out->priv_ = r;
    out->responses = calloc(r->n_responses ? r->n_responses : 1, sizeof *out->responses);
    if (!out->responses)
        return -1;
    out->n_responses = r->n_responses;
    for (size_t i = 0; i < r->n_responses; i++) {
        Etcdserverpb__ResponseOp *op = r->responses[i];
        kvc_op_result *o = &out->responses[i];
        int rc = 0;
        switch (op->response_case) {
        case ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_RANGE:
            o->type = KVC_OP_RANGE;
            rc = range_fill(&o->range, op->response_range, 0);
            break;
        case ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_PUT:
            o->type = KVC_OP_PUT;
            rc = put_fill(&o->put, op->response_put, 0);
            break;
        case ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_DELETE_RANGE:
            o->type = KVC_OP_DELETE;
            rc = del_fill(&o->del, op->response_delete_range, 0);
            break;
        case ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_TXN:
            o->type = KVC_OP_TXN;
            break;
        default:
            break;
        }
        if (rc != 0)
            return -1;
    }
    return 0;
}

enum { K_RANGE, K_PUT, K_DELETE, K_TXN };

/* Decode resp (consumed) into out according to kind. Returns 0 or -KVC_INTERNAL. */
static int decode(int kind, uint8_t *resp, size_t len, void *out, kvc_error *err)
{
    int rc = 0;
    switch (kind) {
    case K_RANGE: {
        Etcdserverpb__RangeResponse *r = etcdserverpb__range_response__unpack(NULL, len, resp);
        if (!r)
            goto bad;
        if (range_fill(out, r, 1) != 0) {
            etcdserverpb__range_response__free_unpacked(r, NULL);
            goto oom;
        }
        break;
    }
    case K_PUT: {
        Etcdserverpb__PutResponse *r = etcdserverpb__put_response__unpack(NULL, len, resp);
        if (!r)
            goto bad;
        put_fill(out, r, 1);
        break;
    }
    case K_DELETE: {
        Etcdserverpb__DeleteRangeResponse *r =
            etcdserverpb__delete_range_response__unpack(NULL, len, resp);
        if (!r)
            goto bad;
        if (del_fill(out, r, 1) != 0) {
            etcdserverpb__delete_range_response__free_unpacked(r, NULL);
            goto oom;
        }
        break;
    }
    case K_TXN: {
        Etcdserverpb__TxnResponse *r = etcdserverpb__txn_response__unpack(NULL, len, resp);
        if (!r)
            goto bad;
        if (txn_fill(out, r) != 0) {
            kvc_txn_result_free(out);
            goto oom;
        }
        break;
    }
    }
    free(resp);
    return rc;
bad:
    free(resp);
    return kvc_fail(err, KVC_INTERNAL, "kvclient: cannot decode the response");
oom:
    free(resp);
    return kvc_fail(err, KVC_RESOURCE_EXHAUSTED, "kvclient: out of memory");
}

static size_t result_size(int kind)
{
    switch (kind) {
    case K_RANGE:
        return sizeof(kvc_range_result);
    case K_PUT:
        return sizeof(kvc_put_result);
    case K_DELETE:
        return sizeof(kvc_delete_result);
    default:
        return sizeof(kvc_txn_result);
    }
}

/* Sync: send a packed request (consumed) and decode into out (may be NULL). */
static int sync_call(kvc_client *c, const char *path, uint8_t *req, size_t req_len, int flags,
                     uint32_t timeout_ms, int kind, void *out, kvc_error *err)
{
    if (out)
        memset(out, 0, result_size(kind));
    if (!req)
        return kvc_fail(err, KVC_RESOURCE_EXHAUSTED, "kvclient: out of memory");
    uint8_t *resp;
    size_t len;
    int rc = kvc_call_unary(c, path, req, req_len, &resp, &len, timeout_ms, flags, err);
    free(req);
    if (rc != 0)
        return rc;
    if (!out) {
        free(resp);
        return 0;
    }
    return decode(kind, resp, len, out, err);
}

struct async_ctx {
    int kind;
    void *cb;
    void *arg;
};

static void async_done(void *arg, int status, const kvc_error *err, uint8_t *resp, size_t len)
{
    struct async_ctx *a = arg;
    union {
        kvc_range_result range;
        kvc_put_result put;
        kvc_delete_result del;
    } res;
    memset(&res, 0, sizeof res);
    kvc_error derr;
    if (status == 0) {
        status = decode(a->kind, resp, len, &res, &derr);
        if (status != 0)
            err = &derr;
    }
    switch (a->kind) {
    case K_RANGE:
        ((kvc_range_cb)a->cb)(a->arg, status, err, status ? NULL : &res.range);
        break;
    case K_PUT:
        ((kvc_put_cb)a->cb)(a->arg, status, err, status ? NULL : &res.put);
        break;
    case K_DELETE:
        ((kvc_delete_cb)a->cb)(a->arg, status, err, status ? NULL : &res.del);
        break;
    }
    free(a);
}

static int async_call(kvc_client *c, const char *path, uint8_t *req, size_t req_len, int flags,
                      uint32_t timeout_ms, int kind, void *cb, void *arg, kvc_error *err)
{
    if (!req)
        return kvc_fail(err, KVC_RESOURCE_EXHAUSTED, "kvclient: out of memory");
    if (!cb) {
        free(req);
        return kvc_fail(err, KVC_INVALID_ARGUMENT, "kvclient: callback required");
    }
    struct async_ctx *a = malloc(sizeof *a);
    if (!a) {
        free(req);
        return kvc_fail(err, KVC_RESOURCE_EXHAUSTED, "kvclient: out of memory");
    }
    a->kind = kind;
    a->cb = cb;
    a->arg = arg;
    int rc = kvc_call_unary_async(c, path, req, req_len, timeout_ms, flags, async_done, a, err);
    free(req);
    if (rc != 0)
        free(a);
    return rc;
}

/* ---- request packing ---- */

static uint8_t *pack_range(const void *key, size_t key_len, const kvc_range_opts *o, size_t *len)
{
    Etcdserverpb__RangeRequest *r = range_req_new(key, key_len, o);
    if (!r)
        return NULL;
    uint8_t *b = pack_msg(&r->base, len);
    range_req_free(r);
    return b;
}

static uint8_t *pack_put(const void *key, size_t key_len, const void *value, size_t value_len,
                         const kvc_put_opts *o, size_t *len)
{
    Etcdserverpb__PutRequest *r = put_req_new(key, key_len, value, value_len, o);
    if (!r)
        return NULL;
    uint8_t *b = pack_msg(&r->base, len);
    put_req_free(r);
    return b;
}

static uint8_t *pack_del(const void *key, size_t key_len, const kvc_delete_opts *o, size_t *len)
{
    Etcdserverpb__DeleteRangeRequest *r = del_req_new(key, key_len, o);
    if (!r)
        return NULL;
    uint8_t *b = pack_msg(&r->base, len);
    del_req_free(r);
    return b;
}

#define CHECK_KEY(c, key, key_len)                                                                 \
    do {                                                                                           \
        if (!(c) || (!(key) && (key_len)))                                                         \
            return kvc_fail(err, KVC_INVALID_ARGUMENT, "kvclient: invalid argument");              \
    } while (0)

int kvc_get(kvc_client *c, const void *key, size_t key_len, const kvc_range_opts *opts,
            uint32_t timeout_ms, kvc_range_result *out, kvc_error *err)
{
    if (out)
        memset(out, 0, sizeof *out);
    CHECK_KEY(c, key, key_len);
    size_t n = 0;
    uint8_t *req = pack_range(key, key_len, opts, &n);
    return sync_call(c, PATH_RANGE, req, n, KVC_IDEMPOTENT, timeout_ms, K_RANGE, out, err);
}

int kvc_put(kvc_client *c, const void *key, size_t key_len, const void *value, size_t value_len,
            const kvc_put_opts *opts, uint32_t timeout_ms, kvc_put_result *out, kvc_error *err)
{
    if (out)
        memset(out, 0, sizeof *out);
    CHECK_KEY(c, key, key_len);
    if (!value && value_len)
        return kvc_fail(err, KVC_INVALID_ARGUMENT, "kvclient: invalid argument");
    size_t n = 0;
    uint8_t *req = pack_put(key, key_len, value, value_len, opts, &n);
    return sync_call(c, PATH_PUT, req, n, opts ? opts->flags : 0, timeout_ms, K_PUT, out, err);
}

int kvc_delete(kvc_client *c, const void *key, size_t key_len, const kvc_delete_opts *opts,
               uint32_t timeout_ms, kvc_delete_result *out, kvc_error *err)
{
    if (out)
        memset(out, 0, sizeof *out);
    CHECK_KEY(c, key, key_len);
    size_t n = 0;
    uint8_t *req = pack_del(key, key_len, opts, &n);
    return sync_call(c, PATH_DELETE, req, n, opts ? opts->flags : 0, timeout_ms, K_DELETE, out,
                     err);
}

int kvc_compact(kvc_client *c, int64_t revision, int physical, int flags, uint32_t timeout_ms,
                kvc_header *out, kvc_error *err)
{
    if (out)
        memset(out, 0, sizeof *out);
    if (!c)
        return kvc_fail(err, KVC_INVALID_ARGUMENT, "kvclient: invalid argument");
    Etcdserverpb__CompactionRequest r = ETCDSERVERPB__COMPACTION_REQUEST__INIT;
    r.revision = revision;
    r.physical = physical != 0;
    size_t n = 0;
    uint8_t *req = pack_msg(&r.base, &n);
    if (!req)
        return kvc_fail(err, KVC_RESOURCE_EXHAUSTED, "kvclient: out of memory");
    uint8_t *resp;
    size_t len;
    int rc = kvc_call_unary(c, PATH_COMPACT, req, n, &resp, &len, timeout_ms, flags, err);
    free(req);
    if (rc != 0)
        return rc;
    Etcdserverpb__CompactionResponse *cr =
        etcdserverpb__compaction_response__unpack(NULL, len, resp);
    free(resp);
    if (!cr)
        return kvc_fail(err, KVC_INTERNAL, "kvclient: cannot decode the response");
    if (out)
        kvc_header_from(out, cr->header);
    etcdserverpb__compaction_response__free_unpacked(cr, NULL);
    return 0;
}

int kvc_get_async(kvc_client *c, const void *key, size_t key_len, const kvc_range_opts *opts,
                  uint32_t timeout_ms, kvc_range_cb cb, void *arg, kvc_error *err)
{
    CHECK_KEY(c, key, key_len);
    size_t n = 0;
    uint8_t *req = pack_range(key, key_len, opts, &n);
    return async_call(c, PATH_RANGE, req, n, KVC_IDEMPOTENT, timeout_ms, K_RANGE, (void *)cb, arg,
                      err);
}

int kvc_put_async(kvc_client *c, const void *key, size_t key_len, const void *value,
                  size_t value_len, const kvc_put_opts *opts, uint32_t timeout_ms, kvc_put_cb cb,
                  void *arg, kvc_error *err)
{
    CHECK_KEY(c, key, key_len);
    if (!value && value_len)
        return kvc_fail(err, KVC_INVALID_ARGUMENT, "kvclient: invalid argument");
    size_t n = 0;
    uint8_t *req = pack_put(key, key_len, value, value_len, opts, &n);
    return async_call(c, PATH_PUT, req, n, opts ? opts->flags : 0, timeout_ms, K_PUT, (void *)cb,
                      arg, err);
}

int kvc_delete_async(kvc_client *c, const void *key, size_t key_len, const kvc_delete_opts *opts,
                     uint32_t timeout_ms, kvc_delete_cb cb, void *arg, kvc_error *err)
{
    CHECK_KEY(c, key, key_len);
    size_t n = 0;
    uint8_t *req = pack_del(key, key_len, opts, &n);
    return async_call(c, PATH_DELETE, req, n, opts ? opts->flags : 0, timeout_ms, K_DELETE,
                      (void *)cb, arg, err);
}

/* ---- txn builder ---- */

struct kvc_txn {
    Etcdserverpb__Compare **cmp;
    size_t ncmp, capcmp;
    Etcdserverpb__RequestOp **ops[2];
    size_t nops[2], capops[2];
};

kvc_txn *kvc_txn_new(void)
{
    return calloc(1, sizeof(kvc_txn));
}

static void op_free(Etcdserverpb__RequestOp *op)
{
    switch (op->request_case) {
    case ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_RANGE:
        range_req_free(op->request_range);
        break;
    case ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT:
        put_req_free(op->request_put);
        break;
    case ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_DELETE_RANGE:
        del_req_free(op->request_delete_range);
        break;
    default:
        break;
    }
    free(op);
}

static void cmp_free(Etcdserverpb__Compare *cm)
{
    free(cm->key.data);
    free(cm->range_end.data);
    if (cm->target_union_case == ETCDSERVERPB__COMPARE__TARGET_UNION_VALUE)
        free(cm->value.data);
    free(cm);
}

void kvc_txn_free(kvc_txn *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->ncmp; i++)
        cmp_free(t->cmp[i]);
    free(t->cmp);
    for (int b = 0; b < 2; b++) {
        for (size_t i = 0; i < t->nops[b]; i++)
            op_free(t->ops[b][i]);
        free(t->ops[b]);
    }
    free(t);
}

static int grow(void ***arr, size_t *cap, size_t n)
{
    if (n < *cap)
        return 0;
    size_t nc = *cap ? *cap * 2 : 4;
    void **p = realloc(*arr, nc * sizeof *p);
    if (!p)
        return -1;
    *arr = p;
    *cap = nc;
    return 0;
}

static int add_cmp(kvc_txn *t, Etcdserverpb__Compare *cm)
{
    if (grow((void ***)&t->cmp, &t->capcmp, t->ncmp) != 0) {
        cmp_free(cm);
        return -KVC_RESOURCE_EXHAUSTED;
    }
    t->cmp[t->ncmp++] = cm;
    return 0;
}

static Etcdserverpb__Compare *cmp_new(const void *key, size_t key_len, int result, int target)
{
    Etcdserverpb__Compare *cm = malloc(sizeof *cm);
    if (!cm)
        return NULL;
    etcdserverpb__compare__init(cm);
    if (dup_bytes(&cm->key, key, key_len) != 0) {
        free(cm);
        return NULL;
    }
    cm->result = (Etcdserverpb__Compare__CompareResult)result;
    cm->target = (Etcdserverpb__Compare__CompareTarget)target;
    return cm;
}

int kvc_txn_cmp_int(kvc_txn *t, const void *key, size_t key_len, int target, int result,
                    int64_t value)
{
    if (!t || (!key && key_len) || result < 0 || result > KVC_CMP_NOT_EQUAL ||
        target == KVC_CMP_VALUE || target < 0 || target > KVC_CMP_LEASE)
        return -KVC_INVALID_ARGUMENT;
    Etcdserverpb__Compare *cm = cmp_new(key, key_len, result, target);
    if (!cm)
        return -KVC_RESOURCE_EXHAUSTED;
    switch (target) {
    case KVC_CMP_VERSION:
        cm->target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_VERSION;
        cm->version = value;
        break;
    case KVC_CMP_CREATE:
        cm->target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_CREATE_REVISION;
        cm->create_revision = value;
        break;
    case KVC_CMP_MOD:
        cm->target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_MOD_REVISION;
        cm->mod_revision = value;
        break;
    default:
        cm->target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_LEASE;
        cm->lease = value;
        break;
    }
    return add_cmp(t, cm);
}

int kvc_txn_cmp_value(kvc_txn *t, const void *key, size_t key_len, int result, const void *value,
                      size_t value_len)
{
    if (!t || (!key && key_len) || (!value && value_len) || result < 0 ||
        result > KVC_CMP_NOT_EQUAL)
        return -KVC_INVALID_ARGUMENT;
    Etcdserverpb__Compare *cm = cmp_new(key, key_len, result, KVC_CMP_VALUE);
    if (!cm)
        return -KVC_RESOURCE_EXHAUSTED;
    cm->target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_VALUE;
    if (dup_bytes(&cm->value, value, value_len) != 0) {
        cmp_free(cm);
        return -KVC_RESOURCE_EXHAUSTED;
    }
    return add_cmp(t, cm);
}

static int add_op(kvc_txn *t, int branch, Etcdserverpb__RequestOp *op)
{
    if (grow((void ***)&t->ops[branch], &t->capops[branch], t->nops[branch]) != 0) {
        op_free(op);
        return -KVC_RESOURCE_EXHAUSTED;
    }
    t->ops[branch][t->nops[branch]++] = op;
    return 0;
}

static Etcdserverpb__RequestOp *op_new(void)
{
    Etcdserverpb__RequestOp *op = malloc(sizeof *op);
    if (op)
        etcdserverpb__request_op__init(op);
    return op;
}

#define CHECK_OP(t, branch, key, key_len)                                                          \
    do {                                                                                           \
        if (!(t) || (branch) < 0 || (branch) > 1 || (!(key) && (key_len)))                         \
            return -KVC_INVALID_ARGUMENT;                                                          \
    } while (0)

int kvc_txn_get(kvc_txn *t, int branch, const void *key, size_t key_len, const kvc_range_opts *opts)
{
    CHECK_OP(t, branch, key, key_len);
    Etcdserverpb__RequestOp *op = op_new();
    if (!op)
        return -KVC_RESOURCE_EXHAUSTED;
    op->request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_RANGE;
    op->request_range = range_req_new(key, key_len, opts);
    if (!op->request_range) {
        free(op);
        return -KVC_RESOURCE_EXHAUSTED;
    }
    return add_op(t, branch, op);
}

int kvc_txn_put(kvc_txn *t, int branch, const void *key, size_t key_len, const void *value,
                size_t value_len, const kvc_put_opts *opts)
{
    CHECK_OP(t, branch, key, key_len);
    if (!value && value_len)
        return -KVC_INVALID_ARGUMENT;
    Etcdserverpb__RequestOp *op = op_new();
    if (!op)
        return -KVC_RESOURCE_EXHAUSTED;
    op->request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT;
    op->request_put = put_req_new(key, key_len, value, value_len, opts);
    if (!op->request_put) {
        free(op);
        return -KVC_RESOURCE_EXHAUSTED;
    }
    return add_op(t, branch, op);
}

int kvc_txn_delete(kvc_txn *t, int branch, const void *key, size_t key_len,
                   const kvc_delete_opts *opts)
{
    CHECK_OP(t, branch, key, key_len);
    Etcdserverpb__RequestOp *op = op_new();
    if (!op)
        return -KVC_RESOURCE_EXHAUSTED;
    op->request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_DELETE_RANGE;
    op->request_delete_range = del_req_new(key, key_len, opts);
    if (!op->request_delete_range) {
        free(op);
        return -KVC_RESOURCE_EXHAUSTED;
    }
    return add_op(t, branch, op);
}

int kvc_txn_commit(kvc_client *c, const kvc_txn *t, int flags, uint32_t timeout_ms,
                   kvc_txn_result *out, kvc_error *err)
{
    if (out)
        memset(out, 0, sizeof *out);
    if (!c || !t)
        return kvc_fail(err, KVC_INVALID_ARGUMENT, "kvclient: invalid argument");
    Etcdserverpb__TxnRequest r = ETCDSERVERPB__TXN_REQUEST__INIT;
    r.n_compare = t->ncmp;
    r.compare = t->cmp;
    r.n_success = t->nops[0];
    r.success = t->ops[0];
    r.n_failure = t->nops[1];
    r.failure = t->ops[1];
    size_t n = 0;
    uint8_t *req = pack_msg(&r.base, &n);
    return sync_call(c, PATH_TXN, req, n, flags, timeout_ms, K_TXN, out, err);
}
