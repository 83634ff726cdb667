/*
 * leaseint_util: unary lease and KV calls for the lease integration tests, over grpc_raw
 * (tests/integration/grpc_raw.h), plus /metrics reads.
 *
 * Contract:
 * - Every function takes a connected kv_it_grpc (one per thread) and is bounded by
 *   KVLI_CALL_TIMEOUT_MS.
 * - Return 0 on success; KV_IT_GRPC_STATUS when the server answered with a non-zero
 *   grpc-status (its grpc-message is copied into msg, NUL-terminated, truncated to cap);
 *   a negative errno-style code on transport or decoding failure. msg may be NULL.
 * - Nothing returned needs freeing.
 */
#ifndef KVLI_UTIL_H
#define KVLI_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "grpc_raw.h"
#include "harness.h"

#define KVLI_CALL_TIMEOUT_MS 5000u

/* LeaseGrant{ttl, id}. On 0, *out_id and *out_ttl (either may be NULL) hold the answer. */
int kvli_grant(kv_it_grpc *c, int64_t ttl, int64_t id, int64_t *out_id, int64_t *out_ttl, char *msg,
               size_t cap);

/* LeaseRevoke{id}. */
int kvli_revoke(kv_it_grpc *c, int64_t id, char *msg, size_t cap);

/* LeaseTimeToLive{id, keys}. *ttl is -1 for an unknown lease; *granted and *n_keys may be
 * NULL. */
int kvli_ttl(kv_it_grpc *c, int64_t id, int keys, int64_t *ttl, int64_t *granted, size_t *n_keys,
             char *msg, size_t cap);

/* LeaseLeases: *n leases; ids[0..min(n, ids_cap)) receive their ids (ids may be NULL). */
int kvli_leases(kv_it_grpc *c, size_t *n, int64_t *ids, size_t ids_cap, char *msg, size_t cap);

/* Put{key, value, lease}. */
int kvli_put(kv_it_grpc *c, const char *key, const char *val, int64_t lease, char *msg, size_t cap);

/* count_only Range over [key, range_end); range_end NULL = the single key, "" prefix end
 * computed from key when prefix is 1. */
int kvli_count(kv_it_grpc *c, const char *key, int prefix, int64_t *count, char *msg, size_t cap);

/* Reads one Prometheus sample from the server's /metrics. -ENOENT if absent. */
int kvli_metric(const kv_it_server *s, const char *series, double *value);

/* Opens a grpc_raw connection to s. */
int kvli_connect(const kv_it_server *s, kv_it_grpc **out);

void kvli_sleep_ms(unsigned ms);

#endif
