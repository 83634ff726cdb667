/*
 * request_check: etcd's static validation of a KV request as it arrives (api/v3rpc/key.go:
 * checkRangeRequest, checkPutRequest, checkDeleteRequest, checkTxnRequest + checkIntervals),
 * made before anything else looks at the request, authorization included: a Put with an empty
 * key gets "etcdserver: key is not provided" from etcd whatever the caller may do, never
 * "permission denied", and no invalid request costs a log entry. The applier makes the same
 * checks again (apply_check.c), for entries an older member proposed unchecked.
 *
 * Pure functions, any thread.
 */
#ifndef KV_APPLY_REQUEST_CHECK_H
#define KV_APPLY_REQUEST_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "common/etcd_errors.h"

enum kv_request_kind { KV_REQ_RANGE, KV_REQ_PUT, KV_REQ_DELETE_RANGE, KV_REQ_TXN };

/* Checks the packed request msg (len bytes) of kind. max_txn_ops: --max-txn-ops. Returns
 * KV_ERR_NONE when it is valid; its etcd error when not; KV_ERR_GRPC_UNMARSHAL when it does
 * not decode (the method answers that itself); KV_ERR_REQUEST_NOMEM out of memory. */
kv_etcd_err kv_request_check(enum kv_request_kind kind, const uint8_t *msg, size_t len,
                             uint32_t max_txn_ops);

#endif
