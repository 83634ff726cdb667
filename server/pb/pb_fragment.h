/*
 * pb_fragment: etcd's rule for cutting a large WatchResponse into fragments (etcd 3.4
 * api/v3rpc/watch.go sendFragments), shared by the member's watch hub (watch/watch_hub.c)
 * and the grpc-proxy's fan-out (proxy/proxy_watch_up.c), so both split at the same events.
 * Pure function; any thread.
 */
#ifndef KV_PB_FRAGMENT_H
#define KV_PB_FRAGMENT_H

#include "kv.pb-c.h"

#include <stddef.h>

/* How many of evs[0..n) (n >= 1) the next fragment carries, when the response's other fields
 * pack to `base` bytes: as many as keep the message under `limit` bytes, at least one. */
size_t kv_pb_fragment_events(Mvccpb__Event *const *evs, size_t n, size_t base, size_t limit);

#endif
