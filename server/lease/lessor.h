/*
 * lessor: the in-memory half of leases.
 *
 * Contract:
 * - Every member keeps a map id -> lease (granted TTL, checkpointed remaining TTL). The map
 *   follows the ordered apply path only: the node forwards the store's observers to
 *   kv_lessor_on_granted / on_revoked / on_checkpointed, and calls kv_lessor_recover() at
 *   startup and after a snapshot install. The lessor never writes the lease table.
 * - Only the primary (the raft leader, after kv_lessor_promote()) keeps expiry state:
 *   a deadline per lease and a binary min-heap with exactly one item per lease. On any
 *   other member the heap is empty, no timer runs and keepalive/TTL queries give -EAGAIN
 *   (lesson 4). kv_lessor_demote() frees the heap and stops the timer.
 * - Expiry detection never scans: a timer is armed for the heap top. Expired leases are
 *   proposed for revocation through ops->propose_revoke (batched, token-bucket limited to
 *   revoke_rate/s with a burst of revoke_rate/2); a proposed lease is not proposed again
 *   before revoke_retry_ms; if the proposal call fails it is retried after
 *   propose_fail_retry_ms. The lease leaves the map and the heap only when its revoke is
 *   applied (on_revoked).
 * - Checkpoints (primary only): every checkpoint_interval_ms a round proposes, through
 *   ops->propose_checkpoint, the remaining TTL of each lease whose granted TTL is longer
 *   than the interval and whose remaining TTL is below its TTL (etcd's rule), batched and
 *   limited to checkpoint_rate/s. The round walks the lease slots incrementally (bounded work
 *   per tick); it is the only walk over all leases and runs once per interval.
 * - Keepalive clears a checkpoint as etcd 3.5+ does: if the lease has a checkpointed
 *   remaining TTL, kv_lessor_renew() proposes a checkpoint with remaining 0 ("none") once
 *   (it is not proposed again until a checkpoint for that lease is applied). The in-memory
 *   remaining TTL follows the applied checkpoints only.
 * - Ops callbacks may re-enter kv_lessor_on_revoked/on_checkpointed synchronously (a single
 *   member may apply inside the proposal call); the lessor tolerates that. They must not call
 *   kv_lessor_tick() or kv_lessor_free().
 * - Single-threaded: every function runs on the loop thread (or the test thread when
 *   loop == NULL). Memory per lease: see kv_lessor_metrics.mem_bytes and docs in lessor.c.
 */
#ifndef KV_LESSOR_H
#define KV_LESSOR_H

#include <lmdb.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "lease/lease_table.h"

typedef struct kv_lessor kv_lessor;

/* etcd's MaxLeaseTTL. */
#define KV_LEASE_MAX_TTL_S 9000000000LL

typedef struct kv_lease_checkpoint {
    int64_t id;
    int64_t remaining_ttl; /* seconds; 0 = clear the checkpoint */
} kv_lease_checkpoint;

typedef struct kv_lessor_ops {
    /* Time source in milliseconds, monotonic. NULL = CLOCK_MONOTONIC. */
    uint64_t (*now_ms)(void *arg);
    /* Proposes LeaseRevoke for each id (the node turns them into apply-path entries).
     * ids is valid during the call only. 0 = accepted for proposal; negative = not proposed
     * (the leases are retried later). Required. */
    int (*propose_revoke)(void *arg, const int64_t *ids, size_t n);
    /* Proposes one LeaseCheckpointRequest carrying cps. cps valid during the call only.
     * NULL disables checkpoints. */
    int (*propose_checkpoint)(void *arg, const kv_lease_checkpoint *cps, size_t n);
    /* Optional: re-checked just before each proposal; false = skip proposing (the node will
     * demote the lessor). NULL = trust promote/demote. */
    int (*is_leader)(void *arg);
} kv_lessor_ops;

typedef struct kv_lessor_config {
    int64_t min_ttl_s;              /* node: ceil(1.5 * election timeout); default 1 */
    int64_t max_ttl_s;              /* --max-lease-ttl; default KV_LEASE_MAX_TTL_S */
    uint32_t revoke_rate;           /* leases proposed for revoke per second; default 1000; at most
                                     * min(revoke_rate/2, 1000) ids per propose_revoke call */
    uint32_t checkpoint_rate;       /* checkpoints proposed per second; default 1000 */
    uint32_t checkpoint_batch;      /* max checkpoints per proposal; default 1000 */
    int64_t checkpoint_interval_ms; /* default 300000 (5 min, as etcd); <= 0 disables */
    int64_t revoke_retry_ms;        /* re-propose a not-yet-revoked lease after; default 3000 */
    int64_t propose_fail_retry_ms;  /* retry after a failed proposal call; default 500 */
    uint32_t max_leases;            /* bound checked by kv_lessor_check_grant; default 1<<24 */
    uint64_t seed;                  /* PRNG/hash seed; 0 = from the clock and address; nonzero
                                     * also starts the id counter (tests: same seed, same ids) */
    uint16_t id_member;             /* low 16 bits of the member id: the low bits of the ids
                                     * kv_lessor_new_id chooses; default 0 */
} kv_lessor_config;

typedef struct kv_lessor_metrics {
    uint64_t active_leases;     /* leases in the map */
    uint64_t heap_size;         /* items in the expiry heap (0 unless primary) */
    uint64_t keepalives_total;  /* kv_lessor_renew calls */
    uint64_t expired_total;     /* leases found expired and proposed for revoke */
    uint64_t revoked_total;     /* revokes observed (on_revoked of a known lease) */
    uint64_t checkpoints_total; /* checkpoints proposed (rounds and keepalive clears) */
    uint64_t is_primary;        /* 1 while promoted */
    uint64_t mem_bytes;         /* bytes held: lease slots + map + heap arrays */
} kv_lessor_metrics;

/* Fills defaults (see field comments). */
void kv_lessor_config_default(kv_lessor_config *cfg);

/* Creates a non-primary lessor with an empty map. cfg and ops are copied; arg is passed to
 * every op. loop == NULL: no timer, the caller drives kv_lessor_tick() (tests). Checkpoints
 * are off when ops->propose_checkpoint is NULL or checkpoint_interval_ms <= 0. Returns 0 and
 * *out (free with kv_lessor_free); -EINVAL if propose_revoke is NULL, min_ttl_s < 1,
 * max_ttl_s < min_ttl_s, revoke_rate, max_leases, revoke_retry_ms or propose_fail_retry_ms is
 * 0, or (checkpoints on) checkpoint_rate or checkpoint_batch is 0; -ENOMEM. */
int kv_lessor_create(kv_lessor **out, uv_loop_t *loop, const kv_lessor_config *cfg,
                     const kv_lessor_ops *ops, void *arg);
/* Frees the lessor. The timer handle is closed and freed in its close callback, so the loop
 * must run once more afterwards. NULL is a no-op. */
void kv_lessor_free(kv_lessor *l);

/* Replaces the map with the records of the lease table (startup, snapshot install); a stored
 * TTL below min_ttl_s is raised to it in memory, as etcd's recovery does. If the
 * lessor is primary, expiry state is rebuilt as by promote with extend 0. Errors from the
 * table (e.g. -EIO on a corrupt record) or -ENOMEM; on error the map may be partial. */
int kv_lessor_recover(kv_lessor *l, MDB_txn *txn, const kv_lease_table *table);

/* Becomes primary: if txn is not NULL the map is first reloaded from the table; then every
 * lease gets deadline = now + (checkpointed remaining TTL, else TTL) + extend_ms, expiries
 * are spread so that about 3/4 revoke_rate fall in any second when many pile up (etcd Promote), the
 * heap is built in O(n) and the timer armed. 0, or -ENOMEM / table error (then the lessor is left
 * demoted). */
int kv_lessor_promote(kv_lessor *l, int64_t extend_ms, MDB_txn *txn, const kv_lease_table *table);
/* Stops being primary: frees the heap, forgets deadlines, stops the timer. Idempotent. */
void kv_lessor_demote(kv_lessor *l);
int kv_lessor_is_primary(const kv_lessor *l);

/* Apply-path observers (call after the store committed the change). on_granted inserts or
 * replaces the lease (on the primary it also gets deadline now + (remaining or TTL) and a
 * heap item); it ignores max_leases because the grant is already committed: 0 or -ENOMEM. */
int kv_lessor_on_granted(kv_lessor *l, int64_t id, int64_t ttl_s, int64_t remaining_ttl_s);
/* Removes the lease from map and heap; unknown ids are ignored. */
void kv_lessor_on_revoked(kv_lessor *l, int64_t id);
/* Records the applied checkpoint (0 = cleared); unknown ids are ignored. */
void kv_lessor_on_checkpointed(kv_lessor *l, int64_t id, int64_t remaining_ttl_s);

/* Keepalive, primary only, O(log n): deadline = now + granted TTL. 0 and *ttl_out = granted
 * TTL; -ENOENT unknown or already expired (revoke pending; the service answers TTL 0);
 * -EAGAIN not primary (the node forwards to the leader). */
int kv_lessor_renew(kv_lessor *l, int64_t id, int64_t *ttl_out);

/* TTL query, primary only: *remaining_s = whole seconds left (truncated as etcd; 0 once
 * expired), *granted_s = granted TTL. -ENOENT unknown, -EAGAIN not primary. */
int kv_lessor_time_to_live(kv_lessor *l, int64_t id, int64_t *remaining_s, int64_t *granted_s);

/* Any member: 1 if the lease is in the map. */
int kv_lessor_exists(const kv_lessor *l, int64_t id);
/* Any member: granted TTL and checkpointed remaining of a lease. 0 or -ENOENT. */
int kv_lessor_lookup(const kv_lessor *l, int64_t id, int64_t *ttl_s, int64_t *remaining_ttl_s);
/* Primary only: the lease's absolute deadline in now_ms() time. 0, -ENOENT, -EAGAIN. */
int kv_lessor_deadline_ms(const kv_lessor *l, int64_t id, int64_t *deadline_ms);
/* Calls fn for every lease in the map (unspecified order). Non-zero from fn stops and is
 * returned. fn must not modify the lessor. */
int kv_lessor_each(const kv_lessor *l, int (*fn)(void *arg, int64_t id, int64_t ttl_s), void *arg);

/* TTL a grant request gets: ttl > max_ttl_s -> -ERANGE (the service reports "etcdserver:
 * too large lease TTL"); ttl < min_ttl_s (including <= 0) -> min_ttl_s; else ttl. */
int64_t kv_lessor_clamp_ttl(const kv_lessor *l, int64_t ttl_s);
/* A fresh server-chosen id, positive, non-zero, not in the map: a 47-bit counter in bits
 * 16-62 and id_member in bits 0-15. The counter is a hybrid clock: the larger of its last
 * value + 1 and the wall clock's ms since 2025-01-01 << 7 (seeded: seed << 7, no clock).
 * So every member's ids follow the wall clock, across restarts too, and ids granted through
 * different members at about the same time sort together: LMDB appends the `lease` and
 * `lease_keys` records of the whole cluster near one end instead of at random points (random
 * ids churned pages and left leaves 2/3 full; etcd's idutil layout, the member on top, gives
 * one append point per member that names grants). */
int64_t kv_lessor_new_id(kv_lessor *l);
/* Admission check before proposing a grant: 0, -EEXIST (id in the map), -ENOSPC (map holds
 * max_leases; the service reports "etcdserver: too many leases"), -EINVAL (id == 0). */
int kv_lessor_check_grant(const kv_lessor *l, int64_t id);

/* Runs one expiry/checkpoint step at now_ms() and re-arms the timer (if any). The timer calls
 * it; tests with loop == NULL call it themselves. No-op unless primary. */
void kv_lessor_tick(kv_lessor *l);
/* When the next tick is due (now_ms() time), INT64_MAX if none (not primary, nothing to do). */
int64_t kv_lessor_next_due_ms(const kv_lessor *l);

void kv_lessor_metrics_get(const kv_lessor *l, kv_lessor_metrics *m);
uint32_t kv_lessor_heap_size(const kv_lessor *l);
size_t kv_lessor_count(const kv_lessor *l);
/* Heap operation counters (tests prove O(log n) with them). */
void kv_lessor_heap_stats(const kv_lessor *l, uint64_t *cmps, uint64_t *swaps);

#endif
