/*
 * server: one kvd member's state, owned by main() (or the in-process fuzz harness). It embeds
 * the api's context (api/api.h), which every service receives as the gRPC app pointer, and
 * holds what only the daemon needs. Everything in it is used from the loop thread only.
 */
#ifndef KV_SERVER_H
#define KV_SERVER_H

#include "api/api.h"
#include "daemon/config.h"
#include "daemon/identity.h"

struct kv_leases;
struct kv_corrupt;
struct kv_etcd_metrics;

typedef struct kv_server {
    /* What the client port's services see (api/api.h); the gRPC app pointer is &s->api.
     * api.loop, api.metrics and api.store are set by the caller; the rest by start_core. */
    kv_api api;
    kv_api_config api_cfg; /* api.cfg points here; its strings point into *cfg */
    const kv_config *cfg;
    kv_identity id;
    int joining; /* --initial-cluster-state existing, fresh data dir: cluster id not known yet */
    struct kv_leases *leases;             /* the lessor's wiring (lease/leases.h) */
    struct kv_corrupt *corrupt;           /* HashKV comparisons (corrupt/corrupt_check.h) */
    struct kv_heap_trim *heap_trim;       /* free heap pages back after writes (heap_trim.h) */
    struct kv_etcd_metrics *etcd_metrics; /* member-level etcd series (etcd_metrics.h) */
} kv_server;

/* Starts the member's core on s->loop: the node (raft and the ordered write path), the peer
 * transport (when the cluster has other members), the lessor, the reader pool and the watch hub,
 * configured from s->cfg. Preconditions: s->api.loop, s->cfg, s->id, s->api.metrics and an open
 * s->api.store are set; the rest is zero. On error everything it started is stopped again
 * (kv_server_stop_core) and a negative errno is returned. */
int kv_server_start_core(kv_server *s);
/* Stops what kv_server_start_core started (any part of it; idempotent), in reverse order:
 * queued writes fail, reader threads are joined, handles close on the loop (run the loop
 * afterwards to free them). Every client stream of the watch hub must be gone first (close
 * the gRPC servers before). The store stays open: the caller closes it after the loop ran. */
void kv_server_stop_core(kv_server *s);

#endif
