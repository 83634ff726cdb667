/*
 * range_pb: the Range read of the store as etcdserverpb messages. This is what remains of
 * gRPC in server/mvcc/ after the applier split (issue 9): Range is served by the read path
 * (kv_store_range: read_pool and service_kv) and by the Range ops inside a Txn (the applier,
 * kv_ks_range_pb); moving its response building out of the store is still to do.
 * Threads and return values: as store.h (kv_store_range) and keyspace.h.
 */
#ifndef KV_MVCC_RANGE_PB_H
#define KV_MVCC_RANGE_PB_H

#include "mvcc/store.h"
#include "rpc.pb-c.h"

struct kv_ks;

/* Static checks of a range request (empty key, sort options). 1 = error set in res. */
int kv_range_check(const Etcdserverpb__RangeRequest *r, kv_result *res);
/* A (validated) Range op of a txn, at the request's read revision (keyspace.h). On success
 * *out is malloc'd (header with the revision only; free with
 * protobuf_c_message_free_unpacked). 0, 1 = request error (res set), < 0 error. */
int kv_ks_range_pb(struct kv_ks *ks, const Etcdserverpb__RangeRequest *r, kv_result *res,
                   Etcdserverpb__RangeResponse **out);

#endif
