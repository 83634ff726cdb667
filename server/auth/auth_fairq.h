/*
 * auth_fairq: the fair queue of password hash jobs (docs/ARCHITECTURE.md "Authentication").
 * The hash worker serves one job at a time; which job goes next is decided here, so that a
 * flood of wrong passwords cannot take the worker from a legitimate login:
 *   - every job carries its connection (the gRPC connection id) and a rank
 *     (class, round, arrival): class = the connection's charges, i.e. its password checks
 *     asked for (queued, refused or failed) since its last successful one (capped at
 *     KV_AUTH_FAIRQ_MAX_CLASS), round = the connection's jobs already queued when it arrived
 *     (round robin between connections), arrival = submission order, the NEWEST first: under
 *     overload the oldest waiters are the likeliest to have been given up by their clients
 *     (etcdctl waits 5 s), and a flood's first calls, queued before their connections were
 *     charged, must not stand before a login that arrives later (adaptive LIFO);
 *   - the lowest rank is served first: a login on a new connection (as etcdctl makes), or on
 *     one whose last check succeeded, goes before every connection that keeps asking without
 *     ever succeeding (a flood of wrong passwords, whether its calls were refused or
 *     checked), and a connection that pipelines many jobs gets one turn per round;
 *   - the queue is bounded (max_queued); when it is full, a job whose rank is lower than the
 *     highest queued rank (the worst class, then the oldest) takes that job's place (the
 *     evicted job is answered "too many requests" by the caller), otherwise it is refused.
 *     A flood therefore never holds a place that a better-ranked job needs.
 * Charges are remembered per connection in a table of max_sources entries (a fixed array: a
 * full table replaces its entry with the fewest charges); a successful check forgets the
 * connection. Limitation: a flood that opens a new connection for every attempt ranks with
 * new connections; it then shares the worker with them instead of holding it.
 * Pure data structure: no locks, no server state; single thread (the loop). Jobs are opaque
 * pointers owned by the caller.
 */
#ifndef KV_AUTH_FAIRQ_H
#define KV_AUTH_FAIRQ_H

#include <stddef.h>
#include <stdint.h>

#define KV_AUTH_FAIRQ_MAX_CLASS 15
#define KV_AUTH_FAIRQ_DEFAULT_SOURCES 4096 /* connections with failures remembered */

typedef struct kv_auth_fairq kv_auth_fairq;

/* max_queued >= 1, max_sources >= 1. 0, -EINVAL or -ENOMEM. */
int kv_auth_fairq_new(kv_auth_fairq **out, uint32_t max_queued, uint32_t max_sources);
void kv_auth_fairq_free(kv_auth_fairq *q); /* q may be NULL; queued jobs are not touched */

/* Queues job for connection conn. 0: queued, and *evicted is the job that lost its place
 * (NULL if none; the caller answers and frees it). -EBUSY: the queue is full of jobs ranked
 * no worse (job not queued). -EINVAL for a NULL job. */
int kv_auth_fairq_push(kv_auth_fairq *q, uint64_t conn, void *job, void **evicted);
/* The best-ranked job, removed from the queue; NULL if empty. */
void *kv_auth_fairq_pop(kv_auth_fairq *q);
/* Removes job (a cancelled call). 0, or -ENOENT if it is not queued. */
int kv_auth_fairq_remove(kv_auth_fairq *q, void *job);
size_t kv_auth_fairq_len(const kv_auth_fairq *q);

/* conn asked for a password check (call after push, whether it was queued or refused) /
 * one of its checks succeeded (forgets conn). */
void kv_auth_fairq_charge(kv_auth_fairq *q, uint64_t conn);
void kv_auth_fairq_clear(kv_auth_fairq *q, uint64_t conn);
/* Charges remembered for conn (0 if none). */
uint32_t kv_auth_fairq_charges(const kv_auth_fairq *q, uint64_t conn);
/* Connections with charges remembered. */
size_t kv_auth_fairq_sources(const kv_auth_fairq *q);

#endif
