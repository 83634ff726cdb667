/*
 * service_lock: v3lockpb.Lock, etcd 3.4's lock service (etcdserver/api/v3lock/lock.go over
 * clientv3/concurrency/mutex.go), served on the client port and through the JSON gateway
 * (/v3/lock/...). docs/ARCHITECTURE.md "Election and lock".
 *
 *   Lock    conc_acquire.h (waits until the caller's key is the prefix's first-created one);
 *           answers the key, held until Unlock or the lease ends
 *   Unlock  Delete key (a plain DeleteRange: unlocking a key not held is not an error)
 * Malformed requests: INTERNAL (grpc-go's unmarshal error). Under auth: Lock needs READ on
 * the prefix "<name>/" and WRITE on the key; Unlock WRITE on the key.
 */
#include "api/conc_acquire.h"
#include "api/conc_unary.h"
#include "api/conc_util.h"
#include "api/quota.h"
#include "api/services.h"
#include "auth/auth_perm.h"
#include "pb/pb_strip.h"
#include "api/api.h"

#include "v3lock.pb-c.h"

#include <stdlib.h>

static void on_lock(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    V3lockpb__LockRequest *r =
        (V3lockpb__LockRequest *)kv_pb_unpack(&v3lockpb__lock_request__descriptor, msg, len);
    if (r == NULL) {
        kv_reply_etcd_err(call, KV_ERR_GRPC_UNMARSHAL);
        return;
    }
    kv_conc_acquire(call, KV_CONC_LOCK, r->name.data, r->name.len, NULL, 0, r->lease, len);
    v3lockpb__lock_request__free_unpacked(r, NULL);
}

static void answer_unlock(kv_grpc_call *call, const kv_result *res)
{
    Etcdserverpb__DeleteRangeResponse *d =
        etcdserverpb__delete_range_response__unpack(NULL, res->resp_len, res->resp);
    if (d == NULL) {
        kv_reply_step_err(call, KV_ERR_STORAGE, NULL);
        return;
    }
    V3lockpb__UnlockResponse r = V3LOCKPB__UNLOCK_RESPONSE__INIT;
    r.header = d->header;
    kv_reply_message(call, &r.base);
    etcdserverpb__delete_range_response__free_unpacked(d, NULL);
}

static void on_unlock(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    V3lockpb__UnlockRequest *r =
        (V3lockpb__UnlockRequest *)kv_pb_unpack(&v3lockpb__unlock_request__descriptor, msg, len);
    if (r == NULL) {
        kv_reply_etcd_err(call, KV_ERR_GRPC_UNMARSHAL);
        return;
    }
    kv_conc_perm perm = {KV_PERM_WRITE, r->key.data, r->key.len, NULL, 0};
    kv_conc_ident id;
    if (!kv_quota_admit(kv_grpc_call_app(call), call, KV_IREQ_DELETE_RANGE, len) &&
        !kv_conc_authorize(call, &perm, 1, &id)) {
        Etcdserverpb__DeleteRangeRequest d = ETCDSERVERPB__DELETE_RANGE_REQUEST__INIT;
        d.key = r->key;
        kv_conc_unary(call, &id, KV_IREQ_DELETE_RANGE, &d.base, answer_unlock);
    }
    v3lockpb__unlock_request__free_unpacked(r, NULL);
}

const kv_grpc_method kv_service_lock[] = {
    {"/v3lockpb.Lock/Lock", 0, on_lock, NULL, kv_conc_acquire_cancel},
    {"/v3lockpb.Lock/Unlock", 0, on_unlock, NULL, kv_conc_unary_cancel},
};
const size_t kv_service_lock_len = sizeof(kv_service_lock) / sizeof(kv_service_lock[0]);
