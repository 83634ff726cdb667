/*
 * api: what the client port's services see of their member. This is the api layer's one
 * context: every service finds it through kv_grpc_call_app() (a kv_api *), and nothing in
 * server/api/ includes the daemon's headers (docs/ARCHITECTURE.md, "Layers").
 *
 * Ownership: the daemon (daemon/server.h) embeds one kv_api in its member state, fills it
 * before the client port opens and keeps it alive until the gRPC servers are closed. The
 * modules it points to (node, store, lessor, forwarder, reader pool, watch hub, peer
 * transport, auth) belong to the daemon, which starts and stops them; the api only uses them.
 * The counters at the end are the api's own state.
 *
 * Threads: loop thread only.
 */
#ifndef KV_API_H
#define KV_API_H

#include "internal.pb-c.h"
#include "metrics/metrics.h"
#include "mvcc/store.h"
#include "node/node.h"

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#define KV_API_MAX_URLS 8

/* The flags the services read, copied from the member's configuration at start. */
typedef struct kv_api_config {
    const char *name;                              /* --name */
    const char *data_dir;                          /* --data-dir */
    const char *initial_cluster_token;             /* --initial-cluster-token: new member ids */
    const char *advertise_client[KV_API_MAX_URLS]; /* --advertise-client-urls */
    size_t n_advertise_client;
    int strict_reconfig_check;           /* --strict-reconfig-check */
    size_t max_request_bytes;            /* --max-request-bytes */
    uint32_t max_txn_ops;                /* --max-txn-ops */
    uint32_t max_keys_per_lease;         /* --max-keys-per-lease: sent with Put and Txn entries */
    size_t max_send_buffer_bytes;        /* --max-send-buffer-bytes */
    uint32_t max_snapshots;              /* --max-snapshots */
    uint32_t max_watch_streams_per_conn; /* --max-watch-streams-per-connection */
    uint32_t max_concurrency_waiters;    /* --max-concurrency-waiters */
    const char *auto_compaction_mode;    /* --auto-compaction-mode */
    const char *auto_compaction_retention;
    uint32_t auto_compaction_interval_ms; /* --auto-compaction-interval */
    int client_cert_auth;                 /* --client-cert-auth */
    const char *auth_token;               /* --auth-token */
    uint32_t auth_token_ttl;              /* --auth-token-ttl */
    uint32_t auth_hash_iterations;        /* --auth-hash-iterations */
    uint32_t auth_max_pending_hashes;     /* --auth-max-pending-hashes */
    uint32_t auth_max_tokens;             /* --auth-max-tokens */
} kv_api_config;

/* The member list as the flags give it (MemberList before the members table is written):
 * *out is a malloc'd array of *n members, freed with kv_store_members_free. 0 or -errno. */
typedef int (*kv_api_members_fn)(void *arg, Kvdpb__Member ***out, size_t *n);

struct kv_lessor;
struct kv_lease_fwd;
struct kv_read_pool;
struct kv_watch_hub;
struct kv_peer_net;
struct kv_auth;
struct kv_metric;

typedef struct kv_api {
    uv_loop_t *loop;
    const kv_api_config *cfg;
    uint64_t member_id;
    kv_metrics *metrics;
    kv_store *store;
    kv_node *node;
    struct kv_lessor *lessor;
    struct kv_lease_fwd *lease_fwd; /* renewals through a follower (lease/lease_fwd.h) */
    struct kv_read_pool *read_pool; /* reader threads for Range/HashKV (NULL: inline) */
    struct kv_watch_hub *watch;     /* Watch service state (watch/watch_hub.h) */
    struct kv_peer_net *peers;      /* peer transport (peer/peer_net.h); NULL alone */
    struct kv_auth *auth;           /* tokens and password hash worker (api/auth_srv.h) */
    kv_api_members_fn flags_members;
    void *flags_members_arg;

    /* The api's own state. */
    uint64_t keepalive_requests;     /* renewals received over LeaseKeepAlive streams */
    struct kv_metric *m_keepalives;  /* kvd_lease_keepalive_requests_total */
    struct kv_metric *m_renew_local; /* kvd_lease_renewal_duration_seconds{path="local"} */
    /* Election and lock calls in progress (api/conc_util.h), bounded by
     * --max-concurrency-waiters. */
    uint32_t conc_waiters;
    struct kv_metric *m_conc_waiters; /* kvd_concurrency_waiters */
    struct kv_metric *m_conc_refused; /* kvd_concurrency_refused_total */
} kv_api;

/* Registers the api's own metrics (kvd_concurrency_*, kvd_lease_keepalive_requests_total,
 * the local renewal histogram) on a->metrics. Call once, after a->metrics is set. */
void kv_api_metrics_init(kv_api *a);

#endif
