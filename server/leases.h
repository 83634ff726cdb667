/*
 * leases: wires the lessor to this member.
 *   - the store's apply-path observers feed the lessor's map (granted/revoked/checkpointed);
 *   - the lessor's expiry and checkpoint proposals become InternalRequests on the node's
 *     ordered apply path (with raft: proposals), fire-and-forget: a lost proposal is retried
 *     by the lessor;
 *   - a single member is the primary of its one-member cluster, so it promotes at start.
 *     With raft, promote/demote follow leadership changes (lesson 4: followers keep no heap).
 */
#ifndef KV_LEASES_H
#define KV_LEASES_H

#include "server.h"

/* Creates s->lessor, loads the lease table, and promotes (extend = election timeout).
 * Requires s->store, s->node, s->cfg, s->metrics. */
int kv_leases_start(kv_server *s);
/* The store's lease table changed under the lessor (a snapshot was installed): reload the map
 * (and the heap on the leader). */
void kv_leases_resync(kv_server *s);
/* Detaches observers and frees the lessor (its timer closes on the next loop turn). */
void kv_leases_stop(kv_server *s);

#endif
