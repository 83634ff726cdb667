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

#include "lease/lessor.h"
#include "metrics/metrics.h"
#include "mvcc/store.h"
#include "node/node.h"

#include <stdint.h>
#include <uv.h>

typedef struct kv_leases kv_leases;

typedef struct kv_leases_deps {
    uv_loop_t *loop;
    kv_store *store;     /* open; the lease table is read at start and after snapshots */
    kv_node *node;       /* proposals, the apply-path observers, the leader hook */
    kv_metrics *metrics; /* optional */
} kv_leases_deps;

typedef struct kv_leases_config {
    uint32_t election_ms;            /* --election-timeout: minimum TTL, promotion extension */
    int64_t max_ttl_s;               /* --max-lease-ttl */
    uint32_t revoke_rate;            /* --lease-revoke-rate */
    uint32_t checkpoint_rate;        /* --lease-checkpoint-rate */
    uint32_t checkpoint_interval_ms; /* --lease-checkpoint-interval (0: no checkpoints) */
    int lead_at_start; /* a new single member: it leads its one-member cluster from the start */
} kv_leases_config;

/* Creates the lessor, loads the lease table, hooks the node and, with lead_at_start, promotes
 * (extend = election timeout). d's members must outlive it. 0 or a negative errno (nothing
 * is left behind). */
int kv_leases_start(kv_leases **out, const kv_leases_deps *d, const kv_leases_config *c);
/* The lessor (the api's LeaseGrant/Revoke/KeepAlive/TimeToLive read it). NULL s: NULL. */
kv_lessor *kv_leases_lessor(const kv_leases *s);
/* The store's lease table changed under the lessor (a snapshot was installed): reload the map
 * (and the heap on the leader). */
void kv_leases_resync(kv_leases *s);
/* Detaches the node's hooks and frees the lessor (its timer closes on the next loop turn).
 * NULL: no-op. */
void kv_leases_stop(kv_leases *s);

#endif
