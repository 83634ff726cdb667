/*
 * proxy_ns.c - the key rewriting of --namespace (contract in proxy_ns.h).
 */
#include "proxy/proxy_ns.h"

#include "pb/pb_scan.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define M_RANGE "/etcdserverpb.KV/Range"
#define M_PUT "/etcdserverpb.KV/Put"
#define M_DEL "/etcdserverpb.KV/DeleteRange"
#define M_TXN "/etcdserverpb.KV/Txn"
#define M_TTL "/etcdserverpb.Lease/LeaseTimeToLive"

/* ---- keys ---- */

/* pfx + tail (tail may be empty) in a new buffer. */
static uint8_t *cat(const kv_proxy_ns *ns, const uint8_t *tail, size_t tlen)
{
    uint8_t *b = malloc(ns->len + tlen);
    if (!b)
        return NULL;
    memcpy(b, ns->pfx, ns->len);
    if (tlen)
        memcpy(b + ns->len, tail, tlen);
    return b;
}

int kv_proxy_ns_prefix_range(const kv_proxy_ns *ns, ProtobufCBinaryData *key,
                             ProtobufCBinaryData *end)
{
    uint8_t *k = cat(ns, key->data, key->len);
    if (!k)
        return -ENOMEM;
    uint8_t *e = NULL;
    size_t elen = 0;
    if (end && end->len == 1 && end->data[0] == 0) {
        /* the edge of the keyspace: the end of the namespace */
        e = cat(ns, NULL, 0);
        elen = ns->len;
        int ok = 0;
        for (size_t i = elen; e && i-- > 0;)
            if (++e[i] != 0) {
                ok = 1;
                break;
            }
        if (e && !ok) { /* 0xff..ff => 0x00 */
            e[0] = 0;
            elen = 1;
        }
    } else if (end && end->len >= 1) {
        e = cat(ns, end->data, end->len);
        elen = ns->len + end->len;
    }
    if (end && end->len >= 1 && !e) {
        free(k);
        return -ENOMEM;
    }
    free(key->data);
    key->data = k;
    key->len = ns->len + key->len;
    if (e) {
        free(end->data);
        end->data = e;
        end->len = elen;
    }
    return 0;
}

int kv_proxy_ns_strip(const kv_proxy_ns *ns, ProtobufCBinaryData *key)
{
    if (key->len < ns->len || memcmp(key->data, ns->pfx, ns->len) != 0)
        return -ERANGE;
    key->len -= ns->len;
    if (key->len)
        memmove(key->data, key->data + ns->len, key->len);
    return 0;
}

static void strip_kv(const kv_proxy_ns *ns, Mvccpb__KeyValue *kv)
{
    if (kv)
        (void)kv_proxy_ns_strip(ns, &kv->key);
}

/* ---- txn ---- */

static int prefix_op(const kv_proxy_ns *ns, Etcdserverpb__RequestOp *op)
{
    switch (op->request_case) {
    case ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_RANGE:
        return kv_proxy_ns_prefix_range(ns, &op->request_range->key, &op->request_range->range_end);
    case ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT:
        return kv_proxy_ns_prefix_range(ns, &op->request_put->key, NULL);
    case ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_DELETE_RANGE:
        return kv_proxy_ns_prefix_range(ns, &op->request_delete_range->key,
                                        &op->request_delete_range->range_end);
    case ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_TXN:
        return kv_proxy_ns_prefix_txn(ns, op->request_txn);
    default:
        return 0;
    }
}

int kv_proxy_ns_prefix_txn(const kv_proxy_ns *ns, Etcdserverpb__TxnRequest *t)
{
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < t->n_compare; i++)
        rc = kv_proxy_ns_prefix_range(ns, &t->compare[i]->key, &t->compare[i]->range_end);
    for (size_t i = 0; rc == 0 && i < t->n_success; i++)
        rc = prefix_op(ns, t->success[i]);
    for (size_t i = 0; rc == 0 && i < t->n_failure; i++)
        rc = prefix_op(ns, t->failure[i]);
    return rc;
}

static void strip_range(const kv_proxy_ns *ns, Etcdserverpb__RangeResponse *r)
{
    for (size_t i = 0; i < r->n_kvs; i++)
        strip_kv(ns, r->kvs[i]);
}

static void strip_del(const kv_proxy_ns *ns, Etcdserverpb__DeleteRangeResponse *r)
{
    for (size_t i = 0; i < r->n_prev_kvs; i++)
        strip_kv(ns, r->prev_kvs[i]);
}

void kv_proxy_ns_strip_txn(const kv_proxy_ns *ns, Etcdserverpb__TxnResponse *r)
{
    for (size_t i = 0; i < r->n_responses; i++) {
        Etcdserverpb__ResponseOp *op = r->responses[i];
        switch (op->response_case) {
        case ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_RANGE:
            strip_range(ns, op->response_range);
            break;
        case ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_PUT:
            strip_kv(ns, op->response_put->prev_kv);
            break;
        case ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_DELETE_RANGE:
            strip_del(ns, op->response_delete_range);
            break;
        case ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_TXN:
            kv_proxy_ns_strip_txn(ns, op->response_txn);
            break;
        default:
            break;
        }
    }
}

/* etcd's leasePrefix.TimeToLive: keys outside the namespace are dropped, the others
 * stripped. */
static void strip_ttl(const kv_proxy_ns *ns, Etcdserverpb__LeaseTimeToLiveResponse *r)
{
    size_t k = 0;
    for (size_t i = 0; i < r->n_keys; i++) {
        if (kv_proxy_ns_strip(ns, &r->keys[i]) == 0)
            r->keys[k++] = r->keys[i];
        else
            free(r->keys[i].data);
    }
    r->n_keys = k;
}

/* ---- packed messages ---- */

static int pack_out(const ProtobufCMessage *m, uint8_t **out, size_t *olen)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    uint8_t *b = malloc(n ? n : 1);
    if (!b)
        return -ENOMEM;
    *olen = protobuf_c_message_pack(m, b);
    *out = b;
    return 0;
}

int kv_proxy_ns_request(const kv_proxy_ns *ns, const char *method, const uint8_t *msg, size_t len,
                        uint8_t **out, size_t *olen)
{
    const ProtobufCMessageDescriptor *d;
    *out = NULL;
    *olen = 0;
    if (strcmp(method, M_RANGE) == 0)
        d = &etcdserverpb__range_request__descriptor;
    else if (strcmp(method, M_PUT) == 0)
        d = &etcdserverpb__put_request__descriptor;
    else if (strcmp(method, M_DEL) == 0)
        d = &etcdserverpb__delete_range_request__descriptor;
    else if (strcmp(method, M_TXN) == 0)
        d = &etcdserverpb__txn_request__descriptor;
    else
        return 0;
    if (d == &etcdserverpb__txn_request__descriptor) {
        /* bounded before protobuf-c (and the rewriting) recurse on client bytes */
        kv_txn_limits lim;
        kv_txn_limits_init(&lim, UINT32_MAX / 4);
        int s = kv_pb_scan_txn(msg, len, &lim, NULL);
        if (s == KV_PB_SCAN_TOO_MANY_OPS)
            return -E2BIG;
        if (s != KV_PB_SCAN_OK)
            return -EBADMSG;
    }
    ProtobufCMessage *m = protobuf_c_message_unpack(d, NULL, len, msg);
    if (!m)
        return -EBADMSG;
    int rc;
    if (d == &etcdserverpb__range_request__descriptor) {
        Etcdserverpb__RangeRequest *r = (Etcdserverpb__RangeRequest *)m;
        rc = r->key.len ? kv_proxy_ns_prefix_range(ns, &r->key, &r->range_end) : -ENODATA;
    } else if (d == &etcdserverpb__put_request__descriptor) {
        Etcdserverpb__PutRequest *r = (Etcdserverpb__PutRequest *)m;
        rc = r->key.len ? kv_proxy_ns_prefix_range(ns, &r->key, NULL) : -ENODATA;
    } else if (d == &etcdserverpb__delete_range_request__descriptor) {
        Etcdserverpb__DeleteRangeRequest *r = (Etcdserverpb__DeleteRangeRequest *)m;
        rc = r->key.len ? kv_proxy_ns_prefix_range(ns, &r->key, &r->range_end) : -ENODATA;
    } else {
        rc = kv_proxy_ns_prefix_txn(ns, (Etcdserverpb__TxnRequest *)m);
    }
    if (rc == 0)
        rc = pack_out(m, out, olen);
    protobuf_c_message_free_unpacked(m, NULL);
    return rc;
}

int kv_proxy_ns_response(const kv_proxy_ns *ns, const char *method, const uint8_t *resp, size_t len,
                         uint8_t **out, size_t *olen)
{
    const ProtobufCMessageDescriptor *d;
    *out = NULL;
    *olen = 0;
    if (strcmp(method, M_RANGE) == 0)
        d = &etcdserverpb__range_response__descriptor;
    else if (strcmp(method, M_PUT) == 0)
        d = &etcdserverpb__put_response__descriptor;
    else if (strcmp(method, M_DEL) == 0)
        d = &etcdserverpb__delete_range_response__descriptor;
    else if (strcmp(method, M_TXN) == 0)
        d = &etcdserverpb__txn_response__descriptor;
    else if (strcmp(method, M_TTL) == 0)
        d = &etcdserverpb__lease_time_to_live_response__descriptor;
    else
        return 0;
    ProtobufCMessage *m = protobuf_c_message_unpack(d, NULL, len, resp);
    if (!m)
        return -EBADMSG;
    if (d == &etcdserverpb__range_response__descriptor)
        strip_range(ns, (Etcdserverpb__RangeResponse *)m);
    else if (d == &etcdserverpb__put_response__descriptor)
        strip_kv(ns, ((Etcdserverpb__PutResponse *)m)->prev_kv);
    else if (d == &etcdserverpb__delete_range_response__descriptor)
        strip_del(ns, (Etcdserverpb__DeleteRangeResponse *)m);
    else if (d == &etcdserverpb__txn_response__descriptor)
        kv_proxy_ns_strip_txn(ns, (Etcdserverpb__TxnResponse *)m);
    else
        strip_ttl(ns, (Etcdserverpb__LeaseTimeToLiveResponse *)m);
    int rc = pack_out(m, out, olen);
    protobuf_c_message_free_unpacked(m, NULL);
    return rc;
}

/* ---- watch ---- */

int kv_proxy_ns_watch_create(const kv_proxy_ns *ns, Etcdserverpb__WatchCreateRequest *c)
{
    return kv_proxy_ns_prefix_range(ns, &c->key, &c->range_end);
}

void kv_proxy_ns_watch_response(const kv_proxy_ns *ns, Etcdserverpb__WatchResponse *r)
{
    for (size_t i = 0; i < r->n_events; i++) {
        strip_kv(ns, r->events[i]->kv);
        strip_kv(ns, r->events[i]->prev_kv);
    }
}
