/*
 * server: one kvd member's state, owned by main() and passed to every service as the gRPC
 * app pointer. Everything in it is used from the loop thread only.
 */
#ifndef KV_SERVER_H
#define KV_SERVER_H

#include "daemon/config.h"
#include "daemon/identity.h"
#include "metrics/metrics.h"
#include "mvcc/store.h"
#include "node/node.h"

#include <uv.h>

struct kv_lessor;
struct kv_read_pool;
struct kv_watch_hub;
struct kv_peer_net;
struct kv_lease_fwd;

typedef struct kv_server {
    uv_loop_t *loop;
    const kv_config *cfg;
    kv_identity id;
    kv_metrics *metrics;
    kv_store *store;
    kv_node *node;
    struct kv_lessor *lessor;
    uint64_t keepalive_requests;     /* renewals received over LeaseKeepAlive streams */
    struct kv_metric *m_keepalives;  /* kvd_lease_keepalive_requests_total */
    struct kv_metric *m_renew_local; /* kvd_lease_renewal_duration_seconds{path="local"} */
    struct kv_read_pool *read_pool;  /* reader threads for Range/HashKV (NULL: inline) */
    struct kv_watch_hub *watch;      /* Watch service state (server/watch/watch_hub.h) */
    struct kv_peer_net *peers;       /* peer transport (server/peer/peer_net.h); NULL alone */
    int joining; /* --initial-cluster-state existing, fresh data dir: cluster id not known yet */
    struct kv_lease_fwd *lease_fwd; /* follower renewals forwarded to the leader (lease_fwd.h) */
    struct kv_corrupt *corrupt;     /* HashKV comparisons (corrupt/corrupt_check.h) */
    struct kv_auth *auth;           /* tokens and password hash worker (api/auth_srv.h) */
    struct kv_etcd_metrics *etcd_metrics; /* member-level etcd series (etcd_metrics.h) */
    /* Election and lock calls in progress (api/conc_util.h), bounded by
     * --max-concurrency-waiters. */
    uint32_t conc_waiters;
    struct kv_metric *m_conc_waiters; /* kvd_concurrency_waiters */
    struct kv_metric *m_conc_refused; /* kvd_concurrency_refused_total */
} kv_server;

/* Starts the member's core on s->loop: the node (raft and the ordered write path), the peer
 * transport (when the cluster has other members), the lessor, the reader pool and the watch hub,
 * configured from s->cfg. Preconditions: s->loop, s->cfg, s->id, s->metrics and an open s->store
 * are set; the rest is zero. On error everything it started is stopped again (kv_server_stop_core)
 * and a negative errno is returned. */
int kv_server_start_core(kv_server *s);
/* Stops what kv_server_start_core started (any part of it; idempotent), in reverse order:
 * queued writes fail, reader threads are joined, handles close on the loop (run the loop
 * afterwards to free them). Every client stream of the watch hub must be gone first (close
 * the gRPC servers before). The store stays open: the caller closes it after the loop ran. */
void kv_server_stop_core(kv_server *s);

#endif
