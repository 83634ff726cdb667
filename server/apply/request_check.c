/* request_check.c: etcd's arrival-time request validation (request_check.h) on the checks of
 * apply_check.c / apply_range.c. */
#include "apply/request_check.h"

#include "apply/apply_int.h"
#include "apply/internal_req.h"
#include "rpc.pb-c.h"

#include <errno.h>
#include <stdint.h>

/* 1 (error in res), 0 valid, < 0 out of memory; -EBADMSG undecodable. */
static int check(enum kv_request_kind kind, const uint8_t *msg, size_t len, uint32_t max_ops,
                 kv_result *res)
{
    int rc = -EBADMSG;
    switch (kind) {
    case KV_REQ_RANGE: {
        Etcdserverpb__RangeRequest *r = etcdserverpb__range_request__unpack(NULL, len, msg);
        if (r)
            rc = kv_range_check(r, res);
        etcdserverpb__range_request__free_unpacked(r, NULL);
        break;
    }
    case KV_REQ_PUT: {
        Etcdserverpb__PutRequest *r = etcdserverpb__put_request__unpack(NULL, len, msg);
        if (r)
            rc = kv_put_check(r, SIZE_MAX, res); /* any key length (mvcc/longkey.c) */
        etcdserverpb__put_request__free_unpacked(r, NULL);
        break;
    }
    case KV_REQ_DELETE_RANGE: {
        Etcdserverpb__DeleteRangeRequest *r =
            etcdserverpb__delete_range_request__unpack(NULL, len, msg);
        if (r) {
            rc = r->key.len == 0;
            if (rc)
                kv_apply_err(res, KV_ERR_EMPTY_KEY);
        }
        etcdserverpb__delete_range_request__free_unpacked(r, NULL);
        break;
    }
    case KV_REQ_TXN: {
        /* bound the nesting before the recursive unpack (pb/pb_scan.h) */
        kv_etcd_err e = kv_internal_check_txn(msg, len, max_ops);
        if (e != KV_ERR_NONE) {
            if (e == KV_ERR_GRPC_UNMARSHAL)
                return -EBADMSG;
            kv_apply_err(res, e);
            return 1;
        }
        Etcdserverpb__TxnRequest *r = etcdserverpb__txn_request__unpack(NULL, len, msg);
        if (r)
            rc = kv_txn_check(r, max_ops, SIZE_MAX, res);
        etcdserverpb__txn_request__free_unpacked(r, NULL);
        break;
    }
    }
    return rc;
}

kv_etcd_err kv_request_check(enum kv_request_kind kind, const uint8_t *msg, size_t len,
                             uint32_t max_txn_ops)
{
    kv_result res = {0};
    int rc = check(kind, msg, len, max_txn_ops, &res);
    if (rc == 1)
        return res.err;
    if (rc == -EBADMSG)
        return KV_ERR_GRPC_UNMARSHAL;
    return rc < 0 ? KV_ERR_REQUEST_NOMEM : KV_ERR_NONE;
}
