/* apply_gate: the appliers etcd wraps around the backend one while an alarm is active
 * (etcdserver/apply.go applierV3Capped for NOSPACE, applierV3Corrupt for CORRUPT). */
#include "apply/apply_int.h"

#include <stdlib.h>

static int txn_has_put(const Etcdserverpb__TxnRequest *t, int depth)
{
    if (depth > 64)
        return 1; /* deeper than any accepted txn: treat as growing */
    for (int side = 0; side < 2; side++) {
        size_t n = side ? t->n_failure : t->n_success;
        Etcdserverpb__RequestOp **ops = side ? t->failure : t->success;
        for (size_t i = 0; i < n; i++) {
            if (ops[i]->request_case == ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT)
                return 1;
            if (ops[i]->request_case == ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_TXN &&
                txn_has_put(ops[i]->request_txn, depth + 1))
                return 1;
        }
    }
    return 0;
}

int kv_apply_is_growth(const Kvdpb__InternalRequest *ir)
{
    return ir->request_case == KVDPB__INTERNAL_REQUEST__REQUEST_PUT ||
           ir->request_case == KVDPB__INTERNAL_REQUEST__REQUEST_LEASE_GRANT ||
           (ir->request_case == KVDPB__INTERNAL_REQUEST__REQUEST_TXN && txn_has_put(ir->txn, 0));
}

int kv_apply_gate(unsigned alarms, const Kvdpb__InternalRequest *ir, kv_result *res)
{
    if (alarms & (1u << KV_ALARM_CORRUPT)) {
        switch (ir->request_case) {
        case KVDPB__INTERNAL_REQUEST__REQUEST_PUT:
        case KVDPB__INTERNAL_REQUEST__REQUEST_DELETE_RANGE:
        case KVDPB__INTERNAL_REQUEST__REQUEST_TXN:
        case KVDPB__INTERNAL_REQUEST__REQUEST_COMPACTION:
        case KVDPB__INTERNAL_REQUEST__REQUEST_LEASE_GRANT:
        case KVDPB__INTERNAL_REQUEST__REQUEST_LEASE_REVOKE:
            kv_apply_err(res, KV_ERR_CORRUPT);
            return 1;
        default:
            return 0;
        }
    }
    if ((alarms & (1u << KV_ALARM_NOSPACE)) && kv_apply_is_growth(ir)) {
        kv_apply_err(res, KV_ERR_NO_SPACE);
        return 1;
    }
    return 0;
}

/* Failpoint (tests/cluster/test_corrupt.c, under --enable-failpoints; main.c drops the variable
 * otherwise): KVD_FAILPOINT_CORRUPT_PUT=1 makes this member apply every Put with the first
 * byte of its value flipped, so its store silently diverges from the other members' (what a
 * bit flip or an apply bug does); the corruption checks must notice. Read per Put (getenv:
 * kvd never sets its environment after start). */
void kv_apply_failpoint(Kvdpb__InternalRequest *ir)
{
    if (ir->request_case != KVDPB__INTERNAL_REQUEST__REQUEST_PUT || ir->put->value.len == 0)
        return;
    const char *fp = getenv("KVD_FAILPOINT_CORRUPT_PUT");
    if (fp && fp[0] == '1')
        ir->put->value.data[0] ^= 0x01;
}
