/*
 * disk_failpoint.h: kvd's disk failpoints (testing only). Off unless kvd runs with
 * --enable-failpoints AND one of these is in its environment:
 *
 *   KVD_FAILPOINT_FSYNC_DELAY_MS=N  (N > 0)  SIGRTMIN+1 toggles a slow fsync: while on, every
 *       durable commit of a raft ready (log entries, hard state, snapshot: the WAL's flush,
 *       or with --experimental-wal=false the synced LMDB commit) takes N ms more before the
 *       node sees it (off at start).
 *   KVD_FAILPOINT_FSYNC_EIO=1                SIGRTMIN+2 arms a failing fsync: the next durable
 *       flush of a raft ready is reported failed with EIO, as if fdatasync had returned it;
 *       the node then stops the member (node_ready.c after_ready: "persisting a raft ready
 *       failed: Input/output error; stopping this member").
 *
 * Each toggle and each injection logs a "kvd: failpoint: ..." line on stderr.
 * Threads: open/close and the signal callbacks run on the loop thread; kv_disk_fp_commit runs
 * on the libuv worker that committed the ready. The flags are atomics.
 */
#ifndef KV_DISK_FAILPOINT_H
#define KV_DISK_FAILPOINT_H

#include <uv.h>

typedef struct kv_disk_fp kv_disk_fp;

/* Reads the environment. *out = NULL (and 0) when neither variable is set (the common case);
 * otherwise installs the signal handles on loop. Returns 0 or a negative errno. */
int kv_disk_fp_open(kv_disk_fp **out, uv_loop_t *loop);

/* Closes the signal handles; the state is freed in their close callbacks. NULL is a no-op.
 * Precondition: no worker is inside kv_disk_fp_commit. */
void kv_disk_fp_close(kv_disk_fp *fp);

/* Worker thread, right after a ready's commit succeeded. durable: the commit was synced.
 * Sleeps while the slow fsync is on; returns -EIO once when the failing fsync is armed;
 * else 0. fp may be NULL. */
int kv_disk_fp_commit(kv_disk_fp *fp, int durable);

#endif
