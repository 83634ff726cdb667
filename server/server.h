/*
 * server: one kvd member's state, owned by main() and passed to every service as the gRPC
 * app pointer. Everything in it is used from the loop thread only.
 */
#ifndef KV_SERVER_H
#define KV_SERVER_H

#include "config.h"
#include "identity.h"
#include "metrics/metrics.h"
#include "mvcc/store.h"
#include "node/node.h"

#include <uv.h>

struct kv_lessor;
struct kv_read_pool;
struct kv_watch_hub;

typedef struct kv_server {
    uv_loop_t *loop;
    const kv_config *cfg;
    kv_identity id;
    kv_metrics *metrics;
    kv_store *store;
    kv_node *node;
    struct kv_lessor *lessor;
    uint64_t keepalive_requests;    /* renewals received over LeaseKeepAlive streams */
    struct kv_metric *m_keepalives; /* kvd_lease_keepalive_requests_total */
    struct kv_read_pool *read_pool; /* reader threads for Range/HashKV (NULL: inline) */
    struct kv_watch_hub *watch;     /* Watch service state (server/watch/watch_hub.h) */
} kv_server;

#endif
