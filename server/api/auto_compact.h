/*
 * auto_compact: etcd 3.4's auto-compactor (etcdserver/api/v3compactor), proposing
 * CompactionRequests through the ordered write path (kv_node_propose, as a client's Compact).
 * Physical removal is then done by the node in bounded batches (node.h, compact_batch_keys).
 *
 * --auto-compaction-mode periodic, --auto-compaction-retention P (a duration "1h", "30m", or a
 * number of hours; 0 = off): every P/10 (at most 6 min) the current revision is sampled into a
 * ring of P/(P/10)+1 samples; once P has passed since the last success (afterwards every
 * min(P, 1h)), the oldest sample (the revision of about P ago) is compacted (etcd's Periodic).
 * --auto-compaction-mode revision, --auto-compaction-retention N: every
 * --auto-compaction-interval (default 5 min, etcd's fixed revInterval; kvd-specific flag so that
 * tests need not wait) compact at current revision - N, when positive and not already done.
 * A compaction refused because the revision is already compacted counts as done (as etcd).
 *
 * Log: "kvd: auto-compaction: starting at revision R (retention: ...)" and "finished";
 * metrics kvd_auto_compactions_total{result="ok"|"error"} and gauge
 * kvd_auto_compaction_revision (last revision proposed).
 * Threads: loop thread only. Return values: 0 or a negative errno.
 */
#ifndef KV_API_AUTO_COMPACT_H
#define KV_API_AUTO_COMPACT_H

#include "api/api.h"

#include <stddef.h>

typedef struct kv_auto_compact kv_auto_compact;

/* Validates the flags (err gets etcd-like text on -EINVAL). *out = NULL when retention is 0
 * (off). Otherwise starts a timer on s->loop; s must outlive it (stop before the node closes). */
int kv_auto_compact_start(kv_auto_compact **out, kv_api *s, char *err, size_t errlen);
/* Stops the timer and frees (in the close callback). a may be NULL. A compaction in flight is
 * detached (its result is ignored). */
void kv_auto_compact_stop(kv_auto_compact *a);

#endif
