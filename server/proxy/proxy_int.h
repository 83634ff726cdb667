/*
 * proxy_int.h - the state of `kvd grpc-proxy` shared by the files of server/proxy/ (not used
 * outside it). Design: docs/proxy.md.
 *
 * Threads: everything here belongs to the proxy's loop thread (kv_proxy.loop), except what
 * libkvclient's callbacks do on its I/O thread: they only build a kv_proxy_ev and post it
 * through the bridge (proxy_bridge.h), never touch any other field.
 * Ownership: kv_proxy owns the gRPC server, the HTTP metrics server, the metrics registry,
 * the upstream kvc_client, the bridge, the lease folder and the watch state; it is freed by
 * kv_proxy_stop() (proxy.c).
 */
#ifndef KV_PROXY_INT_H
#define KV_PROXY_INT_H

#include "grpc/grpc_server.h"
#include "http/client_http.h"
#include "http/http_server.h"
#include "metrics/metrics.h"
#include "proxy/proxy_bridge.h"
#include "proxy/proxy_config.h"
#include "proxy/proxy_ns.h"

#include "kvclient.h"

#include <stdint.h>
#include <string.h>
#include <uv.h>

typedef struct kv_proxy_lease kv_proxy_lease;     /* proxy_lease.c */
typedef struct kv_proxy_watch kv_proxy_watch;     /* proxy_watch_int.h */
typedef struct kv_proxy_kvcache kv_proxy_kvcache; /* proxy_kvcache.c */
typedef struct kv_proxy_reg kv_proxy_reg;         /* proxy_register.c */
typedef struct kv_proxy_cluster kv_proxy_cluster; /* proxy_cluster.c */

/* Why a request was refused by a bound: the label of kvd_proxy_refused_total. */
typedef enum {
    KV_PROXY_REFUSED_PENDING_REQUESTS, /* --max-pending-requests */
    KV_PROXY_REFUSED_PENDING_RENEWALS, /* --max-pending-renewals */
    KV_PROXY_REFUSED_STREAM_RENEWALS,  /* --max-pending-renewals-per-stream */
    KV_PROXY_REFUSED_WATCH_STREAMS,    /* --max-watch-streams */
    KV_PROXY_REFUSED_CLIENT_SEND,      /* a client's send buffer (--max-send-buffer-bytes) */
    KV_PROXY_REFUSED_UPSTREAM_SEND,    /* an upstream stream's send buffer */
    KV_PROXY_REFUSED_WATCHERS,         /* --max-watchers */
    KV_PROXY_REFUSED_RESOLVER_MEMBERS, /* --max-resolver-members */
    KV_PROXY_REFUSED_COUNT
} kv_proxy_refused;

typedef struct kv_proxy {
    uv_loop_t *loop;
    const kv_proxy_config *cfg; /* borrowed from the caller of kv_proxy_start */
    kv_metrics *metrics;
    kv_grpc_server *grpc;
    kv_http_server *http;
    kv_client_http *chttp;         /* HTTP beside gRPC on --listen-addr (http/client_http.h) */
    kv_pprof_http *pprof;          /* --enable-pprof: /debug/pprof/ (http/pprof_http.h) */
    struct kv_tls_ctx *server_tls; /* client side TLS (NULL: h2c) */
    kvc_client *up;                /* the upstream connection: one per proxy */
    kv_proxy_bridge bridge;
    kv_proxy_lease *lease;
    kv_proxy_kvcache *kvcache; /* NULL: --max-cache-entries=0 */
    kv_proxy_reg *reg;         /* NULL: no --resolver-prefix */
    kv_proxy_cluster *cluster; /* MemberList with --advertise-client-url */
    /* unary forwarding (proxy_unary.c) */
    uint32_t unary_pending;
    kv_metric *m_unary_forwarded, *m_unary_pending;
    /* --experimental-serializable-ordering: the highest header revision of an OK KV answer or
     * probe read (proxy_unary.c ordered) */
    int64_t ord_rev;
    kv_metric *m_ord_violations;
    kv_proxy_watch *watch; /* watch coalescing (proxy_watch.c, proxy_watch_up.c) */
    /* server-streaming relays (proxy_stream.c) */
    uint32_t observe_streams;
    kv_metric *m_observe_streams;
    kv_metric *m_snapshot_paused; /* kvd_proxy_snapshot_upstream_paused_total */
    kv_metric *m_refused[KV_PROXY_REFUSED_COUNT];
    kv_metric *m_too_large[2]; /* kvd_proxy_message_too_large_total: send, recv */
    /* the upstream probe (proxy_health.c, --upstream-probe-interval) */
    uv_timer_t probe;
    int probe_on, probe_inflight, probe_failing;
    kv_metric *m_probes, *m_probe_failures;
    uint64_t upstream_warned_ms; /* uv_now of the last "upstream unavailable" line (proxy.c) */
    int upstream_warned;         /* 1: that line was written at least once */
    int stopping;
} kv_proxy;

/* etcd's answer to every bound: RESOURCE_EXHAUSTED "etcdserver: too many requests". Counts
 * the reason. Finishes call (0 or the transport's error). */
int kv_proxy_refuse(kv_proxy *p, kv_grpc_call *call, kv_proxy_refused why);

/* The largest message a client may send the proxy: grpc-go's server default, as etcd's
 * proxy (larger ones: RESOURCE_EXHAUSTED "grpc: received message larger than max"). */
#define KV_PROXY_MAX_CLIENT_MESSAGE ((size_t)4 << 20)

/* --max-send-bytes: a message of len bytes that would go up is refused as etcd's proxy
 * refuses it (RESOURCE_EXHAUSTED "trying to send message larger than max (N vs. M)"): call is
 * finished and 1 returned; 0 if it fits. */
int kv_proxy_send_too_big(kv_proxy *p, kv_grpc_call *call, size_t len);
/* --max-recv-bytes: 1 and grpc-go's message in m if an answer of len bytes is over it. */
int kv_proxy_recv_too_big(kv_proxy *p, size_t len, char *m, size_t cap);
/* --debug: one line on stderr ("kvd grpc-proxy: debug: ..."); nothing without the flag. */
void kv_proxy_debug(const kv_proxy *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Unary forwarding (proxy_unary.c): the on_message of every forwarded unary method. */
void kv_proxy_unary_on_message(kv_grpc_call *call, const uint8_t *msg, size_t len);
void kv_proxy_unary_on_cancel(kv_grpc_call *call);
/* Bridge events of kind KV_PROXY_EV_UNARY. */
void kv_proxy_unary_on_event(kv_proxy *p, kv_proxy_ev *ev);
int kv_proxy_unary_init(kv_proxy *p);

/* Lease keepalive folding (proxy_lease.c). */
int kv_proxy_lease_new(kv_proxy *p, kv_proxy_lease **out);
/* Frees the upstream stream (synchronously, through libkvclient) and the handles; the lease
 * state itself is freed by kv_proxy_lease_free once the bridge is drained. */
void kv_proxy_lease_stop(kv_proxy_lease *l);
void kv_proxy_lease_free(kv_proxy_lease *l);
void kv_proxy_lease_on_message(kv_grpc_call *call, const uint8_t *msg, size_t len);
void kv_proxy_lease_on_half_close(kv_grpc_call *call);
void kv_proxy_lease_on_cancel(kv_grpc_call *call);
void kv_proxy_lease_on_event(kv_proxy *p, kv_proxy_ev *ev);

/* Watch coalescing (proxy_watch.c, proxy_watch_up.c). init allocates p->watch; stop (before
 * kvc_close) frees the upstream stream and closes the retry timer; free (after the bridge is
 * drained and the loop ran its close callbacks) frees the rest. */
int kv_proxy_watch_init(kv_proxy *p);
void kv_proxy_watch_stop(kv_proxy *p);
void kv_proxy_watch_free(kv_proxy *p);
void kv_proxy_watch_on_message(kv_grpc_call *call, const uint8_t *msg, size_t len);
void kv_proxy_watch_on_half_close(kv_grpc_call *call);
void kv_proxy_watch_on_cancel(kv_grpc_call *call);
void kv_proxy_watch_on_event(kv_proxy *p, kv_proxy_ev *ev);

/* Range cache (proxy_kvcache.c; the LRU is proxy_cache.h). init: metrics and the cache
 * (nothing if disabled); start: opens the upstream watch; stop: frees it (synchronously) and
 * the timer; free: after the bridge is drained. */
int kv_proxy_kvcache_init(kv_proxy *p);
void kv_proxy_kvcache_start(kv_proxy *p);
void kv_proxy_kvcache_stop(kv_proxy *p);
void kv_proxy_kvcache_free(kv_proxy *p);
/* Before forwarding a unary call: 1 when the call was answered from the cache (finished),
 * else 0 with *tag (may be NULL) to hand to kv_proxy_kvcache_done with the call's outcome
 * (code 0 and the response bytes, or the status), exactly once, answered or not. */
int kv_proxy_kvcache_request(kv_proxy *p, kv_grpc_call *call, const char *method,
                             const uint8_t *msg, size_t len, void **tag);
void kv_proxy_kvcache_done(kv_proxy *p, void *tag, int code, const uint8_t *resp, size_t len);
/* Bridge events KV_PROXY_EV_CACHE_*. */
void kv_proxy_kvcache_on_event(kv_proxy *p, kv_proxy_ev *ev);

/* The client call's own metadata to send upstream: its "token" (etcd auth) and "hasleader"
 * (WithRequireLeader). md points into the call's headers: valid while the call is. */
void kv_proxy_call_md(kv_grpc_call *call, kvc_call_md *md);

/* Server-streaming relays (proxy_stream.c): Election.Observe. */
void kv_proxy_stream_on_message(kv_grpc_call *call, const uint8_t *msg, size_t len);
void kv_proxy_stream_on_half_close(kv_grpc_call *call);
void kv_proxy_stream_on_cancel(kv_grpc_call *call);
void kv_proxy_stream_on_event(kv_proxy *p, kv_proxy_ev *ev);
int kv_proxy_stream_init(kv_proxy *p);

/* Registration under --resolver-prefix (proxy_register.c). init: state and metrics (nothing
 * without a prefix); start: the first lease grant (the upstream client is open); stop
 * (before kvc_close): stops the keepalive and revokes the lease (the key goes at once);
 * free: after the bridge is drained. Events KV_PROXY_EV_REG_*. */
int kv_proxy_register_init(kv_proxy *p);
void kv_proxy_register_start(kv_proxy *p);
void kv_proxy_register_stop(kv_proxy *p);
void kv_proxy_register_free(kv_proxy *p);
void kv_proxy_register_on_event(kv_proxy *p, kv_proxy_ev *ev);

/* Cluster.MemberList (proxy_cluster.c): etcd's clusterProxy with --advertise-client-url,
 * forwarded (proxy_unary.c) without. init: hostname and metrics; free: after the bridge is
 * drained. Events KV_PROXY_EV_CLUSTER. */
int kv_proxy_cluster_init(kv_proxy *p);
void kv_proxy_cluster_free(kv_proxy *p);
void kv_proxy_cluster_on_message(kv_grpc_call *call, const uint8_t *msg, size_t len);
void kv_proxy_cluster_on_cancel(kv_grpc_call *call);
void kv_proxy_cluster_on_event(kv_proxy *p, kv_proxy_ev *ev);

/* proxy_health.c: /health on --metrics-addr (kv_http's hook; app is the kv_proxy). */
void kv_proxy_health_check(void *app, kv_http_health_done_fn done, void *ctx);
void kv_proxy_health_on_event(kv_proxy *p, kv_proxy_ev *ev);
/* The upstream probe (proxy_health.c): start registers its metrics and, unless
 * --upstream-probe-interval=0, starts its timer (0 or a negative errno); stop closes the timer
 * (before the loop's last run); events KV_PROXY_EV_PROBE. */
int kv_proxy_probe_start(kv_proxy *p);
void kv_proxy_probe_stop(kv_proxy *p);
void kv_proxy_probe_on_event(kv_proxy *p, kv_proxy_ev *ev);
/* The proxy's --namespace: 1 with *ns set, or 0 without one (nothing is rewritten). */
static inline int kv_proxy_ns_of(const kv_proxy *p, kv_proxy_ns *ns)
{
    if (!p->cfg->ns)
        return 0;
    ns->pfx = (const uint8_t *)p->cfg->ns;
    ns->len = strlen(p->cfg->ns);
    return 1;
}

/* The client's deadline as a libkvclient timeout: ms left (at least 1), or 0 without one. */
uint32_t kv_proxy_call_timeout(kv_proxy *p, kv_grpc_call *call);

#endif
