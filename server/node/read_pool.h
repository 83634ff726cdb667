/*
 * read_pool: a small fixed pool of reader threads, so reads whose cost grows with the data
 * (sorted or unlimited Ranges, counts, HashKV) never hold the event loop (docs/LESSONS.md,
 * lesson 10).
 *
 * Contract
 * - kv_read_pool_submit() (loop thread) queues a job: work(arg) runs on one of the pool's
 *   own pthreads (not libuv's threadpool, so reads never compete with the apply worker's
 *   uv_queue_work slot), then done(arg, status) runs on the loop thread. status is 0 after
 *   work ran, or -ECANCELED when the pool closed before the job started (work not run).
 * - The queue is bounded: at most max_pending jobs submitted and not yet completed (queued
 *   + running + finished awaiting done). Beyond it submit returns -EBUSY at once and the
 *   caller answers RESOURCE_EXHAUSTED "etcdserver: too many requests" (lesson 3).
 * - Jobs start in submission order (FIFO); with more than one worker they may complete out of
 *   order. work must only touch thread-safe state (the store's read functions open their own
 *   MDB_NOTLS read transactions, see mvcc/store.h) and the job's own memory.
 * - Cancellation is the caller's business: done always runs exactly once per accepted job
 *   (unless the pool is freed with jobs outstanding, which close prevents), so the caller
 *   keeps its request object alive until then and detaches it from the RPC on cancel.
 * - Linearizability: a job opens its read transaction on the worker after submission, so it
 *   sees every batch committed before submit (on a single member, every acknowledged write).
 *
 * Metrics (when given a registry): kvd_read_pending (gauge), kvd_read_workers (gauge),
 * kvd_read_completed_total, kvd_read_refused_total (counters).
 *
 * Reader threads run niced (KV_READ_POOL_NICE): when cores are scarce, the loop thread (and the
 * apply worker) win, so heavy reads slow down rather than keepalives.
 *
 * Threads: every function is loop-thread only. Return values: 0 or a negative errno.
 */
#ifndef KV_READ_POOL_H
#define KV_READ_POOL_H

#include "metrics/metrics.h"

#include <stdint.h>
#include <uv.h>

#define KV_READ_POOL_DEFAULT_WORKERS 2
#define KV_READ_POOL_DEFAULT_MAX_PENDING 256
#define KV_READ_POOL_MAX_WORKERS 64
/* Reader threads run at this nice value (relative to the process), so that on a busy machine a
 * core goes to the loop thread first: heavy reads get slower, keepalives do not. */
#define KV_READ_POOL_NICE 10

typedef struct kv_read_pool kv_read_pool;

typedef void (*kv_read_work_fn)(void *arg);
typedef void (*kv_read_done_fn)(void *arg, int status);

typedef struct kv_read_pool_stats {
    uint64_t pending;   /* submitted, done not yet run */
    uint64_t completed; /* done run with status 0 */
    uint64_t refused;   /* submits refused with -EBUSY */
    uint32_t workers;
} kv_read_pool_stats;

/* Starts `workers` threads (0 = default, at most KV_READ_POOL_MAX_WORKERS) with a bound of
 * max_pending jobs (0 = default). metrics may be NULL (else borrowed, must outlive the pool).
 * *out is released by kv_read_pool_close(). */
int kv_read_pool_init(kv_read_pool **out, uv_loop_t *loop, uint32_t workers, uint32_t max_pending,
                      kv_metrics *metrics);

/* Queues a job. Returns 0 (done will run), -EBUSY (queue full), -ESHUTDOWN (closing) or
 * -EINVAL. On error neither work nor done is called. */
int kv_read_pool_submit(kv_read_pool *p, kv_read_work_fn work, kv_read_done_fn done, void *arg);

/* Stops the pool: jobs not yet started complete with -ECANCELED (synchronously, from this
 * call), running jobs finish (the call joins the threads, so it waits for the longest running
 * read), then their done runs with status 0, also from this call. The pool's handle is freed
 * in its close callback. p may be NULL. Must not be called from inside a done callback. */
void kv_read_pool_close(kv_read_pool *p);

void kv_read_pool_get_stats(const kv_read_pool *p, kv_read_pool_stats *st);

#endif
