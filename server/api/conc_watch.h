/*
 * conc_watch: a watcher of the watch hub (watch/watch_hub.h) owned by the server itself, for
 * the election and lock services: Campaign and Lock wait for a key's DELETE (etcd 3.4
 * clientv3/concurrency key.go waitDelete), Observe follows the leader key (election.go
 * observe). One hub stream with one watcher per conc_watch, counted against the calling
 * connection's --max-watch-streams-per-connection like a client's Watch stream.
 *
 * on_resp runs inside the hub (while it sends), once per WatchResponse, in revision order,
 * beginning with the created response: it may only inspect the response and send on its own
 * gRPC call; it must not open or close watchers. It returns 0 to go on, 1 to have on_done
 * run from a later loop turn (where the owner may close the watch), or a negative errno to
 * refuse the response (-ENOBUFS: the hub sends it again later, watch_hub.h "victim"). A
 * canceled response (start revision compacted, the hub refused the watcher), or a response
 * refused for good (another negative errno: the hub delivers nothing more), is answered
 * with on_done too, with *canceled set (kv_conc_watch_canceled).
 * queued (may be NULL): bytes the owner still has to deliver (its call's send buffer), so
 * the hub holds events back from a slow Observe reader instead of buffering them.
 * Loop thread only.
 */
#ifndef KV_API_CONC_WATCH_H
#define KV_API_CONC_WATCH_H

#include "rpc.pb-c.h"

#include <stddef.h>
#include <stdint.h>

struct kv_api;
typedef struct kv_conc_watch kv_conc_watch;

typedef struct kv_conc_watch_ops {
    int (*on_resp)(void *arg, const Etcdserverpb__WatchResponse *wr);
    void (*on_done)(void *arg);
    size_t (*queued)(void *arg);
} kv_conc_watch_ops;

/* Watches [key, end) (end NULL/elen 0: the one key) from start_rev. ops must outlive the
 * watch; arg is the owner's. Returns 0 with *out (free with kv_conc_watch_close), -EMFILE
 * (the connection's watch stream bound), -ENOMEM, -ESHUTDOWN (no watch hub). */
int kv_conc_watch_open(struct kv_api *s, uint64_t conn_id, const uint8_t *key, size_t klen,
                       const uint8_t *end, size_t elen, int64_t start_rev,
                       const kv_conc_watch_ops *ops, void *arg, kv_conc_watch **out);
/* 1 once a canceled response arrived (the watch ended without the event). */
int kv_conc_watch_canceled(const kv_conc_watch *w);
/* Removes the watcher; on_resp/on_done are not called anymore. w may be NULL. The memory is
 * freed from the timer's close callback. */
void kv_conc_watch_close(kv_conc_watch *w);

#endif
