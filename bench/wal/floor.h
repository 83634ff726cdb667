/*
 * floor.h - the disk's physical floor for a durable write: a 4 KiB pwrite into a preallocated
 * file followed by fdatasync (preallocated, so the flush writes data and no file metadata).
 * Shared by walbench and clusterbench, so that a benchmark compares against the floor of the
 * disk it ran on, in the same run. Not a test.
 */
#ifndef KV_BENCH_FLOOR_H
#define KV_BENCH_FLOOR_H

/* Runs `iters` (>= 1) write+fdatasync pairs into a 64 MiB file preallocated in `dir` (which
 * must be on the disk under test, not tmpfs), then removes the file. v (iters doubles, owned
 * by the caller) receives the latencies in microseconds, sorted ascending. Returns 0, or a
 * negative errno (the file could not be made, written or flushed; the reason is printed). */
int kv_bench_fsync_floor(const char *dir, int iters, double *v);

/* CLOCK_MONOTONIC in microseconds. */
double kv_bench_now_us(void);
/* qsort comparator of doubles, ascending. */
int kv_bench_cmp_double(const void *a, const void *b);

#endif
