/*
 * watch_hub: the etcd v3 Watch service's state (etcd 3.4 mvcc/watchable_store.go,
 * api/v3rpc/watch.go), independent of the transport.
 *
 * Model
 * - A stream (one gRPC Watch call) carries many watchers. A watcher is a key range, filters,
 *   options and next_rev: the first revision it has not been sent yet.
 * - The committed revisions in LMDB are the event log (mvcc/events.h). Nothing is recorded
 *   on the apply thread: after a batch commits, kv_watch_hub_notify(rev) reads the new
 *   revisions back in bounded slices and delivers them to the synced watchers, found by each
 *   event's key in an index (watch_index.h): idle watchers cost a write nothing.
 * - synced: next_rev > the hub's revision; gets events as batches commit.
 *   unsynced: behind (start_revision in the past, or its stream's send buffer was full: a
 *   "victim", or live delivery ran out of its per-commit budget of 20 ms / 8 MiB). Catch-up
 *   runs in loop turns (an idle handle, or a back-off timer while no stream has room) of at
 *   most 4 ms / 256 KiB of responses: slices of at most slice_revs revisions / slice_bytes
 *   bytes for up to 512 watchers whose streams have room; the last slice stays cached so
 *   watchers served in later turns do not re-read LMDB. A watcher whose next_rev is below
 *   the store's compact revision gets etcd's compacted response (compact_revision set,
 *   canceled, header revision 0) when its stream has room. So memory per stream is bounded
 *   by its send buffer, whatever the write rate; a watcher is never silently skipped.
 * - Responses: one per watcher per slice (events of one revision always together; a slice
 *   never splits a revision), built from events packed once per slice. Header revision:
 *   the committed revision (etcd). With
 *   fragment the response is cut into messages of at most max_response_bytes (etcd
 *   sendFragments); without it slices keep responses near slice_bytes.
 *
 * Bounds (each with a flag in config.c, a metric and an error):
 *   watchers per stream       created response canceled, cancel_reason names the flag
 *   watch streams per conn    the stream ends RESOURCE_EXHAUSTED (service_watch.c)
 *   stream send buffer bytes  events: the watcher becomes unsynced (kvd_watch_slow_total);
 *                             control responses past twice the bound end the stream with
 *                             RESOURCE_EXHAUSTED "kvd: watch responses not read".
 *
 * Threads: everything runs on the loop thread. The transport is reached through a sink
 * (send + queued bytes), so tests drive the hub without gRPC.
 */
#ifndef KV_WATCH_HUB_H
#define KV_WATCH_HUB_H

#include "metrics/metrics.h"
#include "mvcc/store.h"

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef struct kv_watch_hub kv_watch_hub;
typedef struct kv_watch_stream kv_watch_stream;

typedef struct kv_watch_config {
    uint32_t max_watchers_per_stream; /* --max-watchers-per-stream, default 10000 */
    uint32_t max_streams_per_conn;    /* --max-watch-streams-per-connection, default 1000 */
    size_t stream_send_buffer_bytes;  /* --watch-send-buffer-bytes, default 1 MiB */
    size_t max_response_bytes;        /* fragment size (--max-request-bytes), default 1.5 MiB */
    size_t slice_bytes;               /* catch-up slice payload, default 256 KiB */
    int64_t slice_revs;               /* catch-up slice revisions, default 1000 */
    uint32_t progress_interval_ms;    /* progress_notify period, default 600000 (etcd) */
    uint64_t fp_drop_event_at;        /* failpoint (testing): drop the Nth event sent; 0 off */
} kv_watch_config;

void kv_watch_config_default(kv_watch_config *c);
/* KVD_FAILPOINT_WATCH_DROP_EVENT=N (only read under --enable-failpoints): N, or 0. */
uint64_t kv_watch_fp_env(void);

/* The transport seen by a stream. send copies msg; returns 0, -ENOBUFS (connection buffer
 * full) or another negative error (stream gone). queued: response bytes of this stream not
 * yet taken by the transport (its send buffer). failed (may be NULL): a send failed for good
 * (err: its error, e.g. -EMSGSIZE, or -ECONNRESET when the buffer filled between the
 * fragments of one response), so the stream can deliver nothing more; the owner ends its
 * call (etcd ends a watch stream whose send fails) and closes the stream, which it may do
 * from inside failed. Called on a later loop turn (the hub's idle), never from inside a send
 * or a delivery, once per stream. */
typedef struct kv_watch_sink_ops {
    int (*send)(void *sink, const uint8_t *msg, size_t len);
    size_t (*queued)(void *sink);
    void (*failed)(void *sink, int err);
} kv_watch_sink_ops;

typedef struct kv_watch_stats {
    uint64_t streams, watchers, unsynced;
    uint64_t events_sent, slow_total, compacted_total, slices;
    uint64_t match_visits; /* watchers (or index nodes) examined to match committed events to
                              synced watchers (kvd_watch_match_visits_total) */
} kv_watch_stats;

/* store, hdr (read at every send, so term changes show) and metrics (may be NULL) are
 * borrowed and must outlive the hub. rev: the store's committed revision now. cfg NULL =
 * defaults. */
int kv_watch_hub_init(kv_watch_hub **out, uv_loop_t *loop, kv_store *store,
                      const kv_watch_config *cfg, const kv_header_info *hdr, int64_t rev,
                      kv_metrics *metrics);
/* Every stream must be closed first. Frees in the timers' close callbacks. */
void kv_watch_hub_close(kv_watch_hub *h);
/* A batch committed; the store is now at revision rev (loop thread, after the commit). */
void kv_watch_hub_notify(kv_watch_hub *h, int64_t rev);
/* Writes up to revision rev were acknowledged to clients, and their commit may not have
 * notified yet (node.h kv_node_acked_revision). A watch created without a start revision
 * starts after it, not after the notified revision, so it never replays a write its client
 * saw acknowledged before creating it; notify then delivers only what follows. */
void kv_watch_hub_acked(kv_watch_hub *h, int64_t rev);
void kv_watch_hub_get_stats(const kv_watch_hub *h, kv_watch_stats *st);
/* Runs catch-up slices until no unsynced watcher can progress or max_slices ran (tests).
 * Returns the slices run. */
int kv_watch_hub_sync_now(kv_watch_hub *h, int max_slices);
/* Sends due progress notifications now (tests; the timer calls it every interval). */
void kv_watch_hub_progress_tick(kv_watch_hub *h);

/* Opens a stream for connection conn_id. -EMFILE when the connection has
 * max_streams_per_conn watch streams already. */
int kv_watch_stream_open(kv_watch_hub *h, uint64_t conn_id, const kv_watch_sink_ops *ops,
                         void *sink, kv_watch_stream **out);
/* Removes the stream and its watchers (the call ended). st may be NULL. */
void kv_watch_stream_close(kv_watch_stream *st);
/* Handles one packed etcdserverpb.WatchRequest. Returns 0; -EBADMSG for a malformed
 * message; -ENOBUFS when a control response cannot be queued (the stream must end with
 * RESOURCE_EXHAUSTED); another negative error when the stream is gone. */
int kv_watch_stream_request(kv_watch_stream *st, const uint8_t *msg, size_t len);
/* Watchers on the stream. */
size_t kv_watch_stream_watchers(const kv_watch_stream *st);

#endif
