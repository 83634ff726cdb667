/*
 * leaseload: the "20k-lease keepalive load during each fault" stresser (ours). N leases are
 * granted once per run through libkvclient, spread over a few clients (thousands of leases
 * per connection, all renewed on that client's ONE shared LeaseKeepAlive stream), and kept
 * alive for the whole run. Every case checks that none was lost (kvclient reports a lease
 * lost when the server answers TTL 0 - expired or revoked - or when no renewal was answered
 * within its TTL).
 * Ownership: kv_fn_leaseload_start allocates; kv_fn_leaseload_free stops and frees.
 * Threads: start/free on the main thread; the keepalive callbacks run on the clients' I/O
 * threads and only touch atomics; counts are thread-safe.
 */
#ifndef KV_FN_LEASELOAD_H
#define KV_FN_LEASELOAD_H

#include "fn.h"

#include <stdint.h>

typedef struct kv_fn_leaseload kv_fn_leaseload;

/* Grants n leases of ttl_s seconds (up to per_client leases per client) and keeps each
 * alive. Fails (negative errno, err filled) if a grant or keepalive cannot be set up within
 * timeout_ms. */
int kv_fn_leaseload_start(kv_fn_leaseload **out, const kv_fn_cluster *c, int n, int64_t ttl_s,
                          int per_client, uint32_t timeout_ms, char *err, size_t errlen);
/* Leases kept alive, leases lost so far, keepalive responses so far, clients, seconds the
 * grants took. */
void kv_fn_leaseload_counts(kv_fn_leaseload *l, uint64_t *kept, uint64_t *lost, uint64_t *responses,
                            int *clients, double *grant_s);
/* Of the leases lost so far, those lost because no renewal was answered within the TTL (the
 * rest: the server answered TTL 0, the lease expired or was revoked there). */
uint64_t kv_fn_leaseload_lost_by_deadline(kv_fn_leaseload *l);
/* The id of a lost lease (0: none) for reports. */
int64_t kv_fn_leaseload_first_lost(kv_fn_leaseload *l);
void kv_fn_leaseload_free(kv_fn_leaseload *l);

#endif
