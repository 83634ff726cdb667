/*
 * heap_trim: hands the free pages of the process's heap back to the kernel after writes
 * (glibc's malloc_trim(0)). After a burst of writes the heap is full of free chunks between
 * live ones (entries, peer buffers, protobuf scratch); malloc keeps those pages resident and
 * only trims the top of each arena. Measured on a 3-member cluster with 100,000 leases: one
 * malloc_trim released 9.7 MB of the leader's 30 MB of anonymous memory
 * (bench/lease/README.md, "Free heap pages").
 *
 * Every interval_ms a timer on the loop reads activity(arg) (the applied index); if it moved
 * since the last trim, one malloc_trim(0) runs on libuv's thread pool (it walks every arena
 * and locks each while it trims it; it never runs on the loop). At most one is in flight.
 * Metric: kvd_malloc_trim_duration_seconds (histogram). Not thread-safe: loop thread only.
 */
#ifndef KV_DAEMON_HEAP_TRIM_H
#define KV_DAEMON_HEAP_TRIM_H

#include <stdint.h>
#include <uv.h>

#include "metrics/metrics.h"

typedef struct kv_heap_trim kv_heap_trim;

/* A counter that moves when there may be memory to give back (the applied index). */
typedef uint64_t (*kv_heap_trim_activity_fn)(void *arg);

/* Starts the timer. interval_ms 0: *out = NULL and nothing runs (--malloc-trim-interval=0).
 * activity/arg are borrowed until kv_heap_trim_stop; m may be NULL. 0 or -ENOMEM. */
int kv_heap_trim_start(kv_heap_trim **out, uv_loop_t *loop, uint32_t interval_ms,
                       kv_heap_trim_activity_fn activity, void *arg, kv_metrics *m);

/* Stops it (t may be NULL): no more calls to activity. Its memory is released by the loop
 * once the timer is closed and a trim in flight has ended. */
void kv_heap_trim_stop(kv_heap_trim *t);

/* Trims run so far (the ones whose work finished). */
uint64_t kv_heap_trim_count(const kv_heap_trim *t);

#endif
