/*
 * lease_fwd_serve: the leader side of forwarded lease requests, private to lease/ (the
 * forwarder, lease_fwd.c, calls it for the frames it holds). Loop thread only.
 */
#ifndef KV_LEASE_FWD_SERVE_H
#define KV_LEASE_FWD_SERVE_H

#include "lease/lessor.h"
#include "node/node.h"

#include <stddef.h>
#include <stdint.h>

/* Leader side (lease_fwd_serve.c): answers one LeaseRenewBatch from member `from`, which
 * arrived at arrived_ms (kv_node_now_ms()), with the local lessor now (code EAGAIN while it
 * does not serve leases or is not confirmed as leader since, kv_node_lease_live, or if
 * refuse: the follower asks again a timer period later). The caller waited for the applied
 * index. Returns the number of requests answered or a negative errno. */
int kv_lease_fwd_serve(kv_node *node, kv_lessor *l, uint64_t from, const uint8_t *buf, size_t len,
                       uint64_t arrived_ms, int refuse);
/* Leader, primary lessor: moves the deadlines of the renewals in a LeaseRenewBatch that must
 * wait for its answer (the applied index, the leadership confirmation). The answer still
 * waits: only what it reports must be linearizable, and a renewal that waits must not let
 * its lease expire meanwhile (a deposed leader's heap counts for nothing; a lease revoked
 * meanwhile is gone when the revoke applies). */
void kv_lease_fwd_serve_early(kv_lessor *l, const uint8_t *buf, size_t len);

#endif
