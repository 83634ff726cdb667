/*
 * etcd_status.h - the gRPC half of the error table (common/etcd_errors.h): the status code of
 * each kv_etcd_err. Only the api edge includes this header: api/services.c kv_api_status_of
 * is the one place where an error value becomes a gRPC status (etcd's togRPCError). The
 * applier, the node, the MVCC store, the lessor and the watch hub pass kv_etcd_err values.
 */
#ifndef KV_COMMON_ETCD_STATUS_H
#define KV_COMMON_ETCD_STATUS_H

#include "common/etcd_errors.h"
#include "common/status.h"

/* The gRPC status code of e's row; KV_GRPC_UNKNOWN if e is not a kv_etcd_err (KV_ERR_NONE
 * included: success is not a row). Pure, any thread. */
kv_grpc_code kv_etcd_err_code(kv_etcd_err e);

#endif
