/*
 * proxy.c - the proxy's parts put together: the method table served to clients, the
 * upstream client, the bridge's event dispatch, the metrics server, start and stop
 * (docs/proxy.md). Loop thread only.
 */
#include "proxy/proxy_run.h"

#include "common/etcd_errors.h"
#include "metrics/process_metrics.h"
#include "net/tls.h"
#include "net/tls_self.h"

#include <openssl/pem.h>
#include <openssl/x509.h>

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define U(path)                                                                                    \
    {                                                                                              \
        path, 0, kv_proxy_unary_on_message, NULL, kv_proxy_unary_on_cancel                         \
    }

#define S(path)                                                                                    \
    {                                                                                              \
        path, 1, kv_proxy_stream_on_message, kv_proxy_stream_on_half_close,                        \
            kv_proxy_stream_on_cancel                                                              \
    }

/* Unary methods forwarded as raw bytes, the two folded or relayed streams, Observe and
 * Maintenance.Snapshot (relayed with flow control, proxy_stream.c). */
static const kv_grpc_method methods[] = {
    U("/etcdserverpb.KV/Range"),
    U("/etcdserverpb.KV/Put"),
    U("/etcdserverpb.KV/DeleteRange"),
    U("/etcdserverpb.KV/Txn"),
    U("/etcdserverpb.KV/Compact"),
    U("/etcdserverpb.Lease/LeaseGrant"),
    U("/etcdserverpb.Lease/LeaseRevoke"),
    U("/etcdserverpb.Lease/LeaseTimeToLive"),
    U("/etcdserverpb.Lease/LeaseLeases"),
    {"/etcdserverpb.Lease/LeaseKeepAlive", 1, kv_proxy_lease_on_message,
     kv_proxy_lease_on_half_close, kv_proxy_lease_on_cancel},
    {"/etcdserverpb.Watch/Watch", 1, kv_proxy_watch_on_message, kv_proxy_watch_on_half_close,
     kv_proxy_watch_on_cancel},
    {"/etcdserverpb.Cluster/MemberList", 0, kv_proxy_cluster_on_message, NULL,
     kv_proxy_cluster_on_cancel},
    U("/etcdserverpb.Cluster/MemberAdd"),
    U("/etcdserverpb.Cluster/MemberRemove"),
    U("/etcdserverpb.Cluster/MemberUpdate"),
    U("/etcdserverpb.Cluster/MemberPromote"),
    U("/etcdserverpb.Maintenance/Status"),
    U("/etcdserverpb.Maintenance/Alarm"),
    U("/etcdserverpb.Maintenance/Hash"),
    U("/etcdserverpb.Maintenance/HashKV"),
    U("/etcdserverpb.Maintenance/Defragment"),
    U("/etcdserverpb.Maintenance/MoveLeader"),
    U("/etcdserverpb.Auth/AuthEnable"),
    U("/etcdserverpb.Auth/AuthDisable"),
    U("/etcdserverpb.Auth/Authenticate"),
    U("/etcdserverpb.Auth/UserAdd"),
    U("/etcdserverpb.Auth/UserGet"),
    U("/etcdserverpb.Auth/UserList"),
    U("/etcdserverpb.Auth/UserDelete"),
    U("/etcdserverpb.Auth/UserChangePassword"),
    U("/etcdserverpb.Auth/UserGrantRole"),
    U("/etcdserverpb.Auth/UserRevokeRole"),
    U("/etcdserverpb.Auth/RoleAdd"),
    U("/etcdserverpb.Auth/RoleGet"),
    U("/etcdserverpb.Auth/RoleList"),
    U("/etcdserverpb.Auth/RoleDelete"),
    U("/etcdserverpb.Auth/RoleGrantPermission"),
    U("/etcdserverpb.Auth/RoleRevokePermission"),
    U("/v3electionpb.Election/Campaign"),
    U("/v3electionpb.Election/Proclaim"),
    U("/v3electionpb.Election/Leader"),
    U("/v3electionpb.Election/Resign"),
    S("/v3electionpb.Election/Observe"),
    S("/etcdserverpb.Maintenance/Snapshot"),
    U("/v3lockpb.Lock/Lock"),
    U("/v3lockpb.Lock/Unlock"),
    U("/grpc.health.v1.Health/Check"),
};

/* Renewals and lease reads ahead of bulk requests (grpc_server.h priority_methods). */
static const char *const priority[] = {"/etcdserverpb.Lease/LeaseKeepAlive",
                                       "/etcdserverpb.Lease/LeaseTimeToLive", NULL};

static const char *const refused_label[KV_PROXY_REFUSED_COUNT] = {
    "reason=\"pending_requests\"",   "reason=\"pending_renewals\"",
    "reason=\"stream_renewals\"",    "reason=\"watch_streams\"",
    "reason=\"client_send_buffer\"", "reason=\"upstream_send_buffer\"",
    "reason=\"watchers\"",           "reason=\"resolver_members\""};

int kv_proxy_refuse(kv_proxy *p, kv_grpc_call *call, kv_proxy_refused why)
{
    kv_metric_inc(p->m_refused[why]);
    return kv_grpc_call_finish(call, KV_GRPC_RESOURCE_EXHAUSTED,
                               kv_etcd_err_msg(KV_ERR_TOO_MANY_REQUESTS));
}

int kv_proxy_send_too_big(kv_proxy *p, kv_grpc_call *call, size_t len)
{
    if (len <= p->cfg->max_send_bytes)
        return 0;
    char m[96]; /* grpc-go's client, without its "grpc: " prefix, as etcd's proxy answers */
    snprintf(m, sizeof m, "trying to send message larger than max (%zu vs. %zu)", len,
             p->cfg->max_send_bytes);
    kv_metric_inc(p->m_too_large[0]);
    kv_grpc_call_finish(call, KV_GRPC_RESOURCE_EXHAUSTED, m);
    return 1;
}

int kv_proxy_recv_too_big(kv_proxy *p, size_t len, char *m, size_t cap)
{
    if (len <= p->cfg->max_recv_bytes)
        return 0;
    snprintf(m, cap, "grpc: received message larger than max (%zu vs. %zu)", len,
             p->cfg->max_recv_bytes);
    kv_metric_inc(p->m_too_large[1]);
    return 1;
}

void kv_proxy_debug(const kv_proxy *p, const char *fmt, ...)
{
    if (!p->cfg->debug)
        return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "kvd grpc-proxy: debug: %s\n", line);
}

/* An upstream call or stream that ended without a member's answer (libkvclient's own
 * UNAVAILABLE "kvclient: ...": no connection, e.g. a TLS handshake the member refused or
 * whose certificate did not verify) is logged with its reason, at most once per 5 s: the
 * clients get the error, the operator the cause. */
static void log_upstream_failure(kv_proxy *p, const kv_proxy_ev *ev)
{
    if (ev->code != KVC_UNAVAILABLE || !ev->buf ||
        strncmp((const char *)ev->buf, "kvclient:", 9) != 0)
        return;
    uint64_t now = uv_now(p->loop);
    if (p->upstream_warned && now - p->upstream_warned_ms < 5000)
        return;
    p->upstream_warned = 1;
    p->upstream_warned_ms = now;
    fprintf(stderr, "kvd grpc-proxy: warning: upstream unavailable: %s\n", (const char *)ev->buf);
}

static void on_event(void *app, kv_proxy_ev *ev)
{
    kv_proxy *p = app;
    log_upstream_failure(p, ev);
    switch (ev->kind) {
    case KV_PROXY_EV_UNARY:
        kv_proxy_unary_on_event(p, ev);
        break;
    case KV_PROXY_EV_LEASE_MSG:
    case KV_PROXY_EV_LEASE_END:
        kv_proxy_lease_on_event(p, ev);
        break;
    case KV_PROXY_EV_CACHE_MSG:
    case KV_PROXY_EV_CACHE_END:
    case KV_PROXY_EV_CACHE_FREE:
        kv_proxy_kvcache_on_event(p, ev);
        break;
    case KV_PROXY_EV_STREAM_MSG:
    case KV_PROXY_EV_STREAM_END:
    case KV_PROXY_EV_STREAM_FREE:
        kv_proxy_stream_on_event(p, ev);
        break;
    case KV_PROXY_EV_REG_CALL:
    case KV_PROXY_EV_REG_LOST:
        kv_proxy_register_on_event(p, ev);
        break;
    case KV_PROXY_EV_CLUSTER:
        kv_proxy_cluster_on_event(p, ev);
        break;
    case KV_PROXY_EV_HEALTH:
        kv_proxy_health_on_event(p, ev);
        break;
    case KV_PROXY_EV_PROBE:
        kv_proxy_probe_on_event(p, ev);
        break;
    default:
        kv_proxy_watch_on_event(p, ev);
        break;
    }
}

static double bridge_queued(void *arg)
{
    return (double)kv_proxy_bridge_queued(&((kv_proxy *)arg)->bridge);
}

/* The upstream client's counters (libkvclient's kvc_stats; zeros once it is closed). */
static double upstream_connects(void *arg)
{
    kvc_stats s;
    kvc_stats_get(((kv_proxy *)arg)->up, &s);
    return (double)s.connects;
}

static double upstream_ping_timeouts(void *arg)
{
    kvc_stats s;
    kvc_stats_get(((kv_proxy *)arg)->up, &s);
    return (double)s.ping_timeouts;
}

/* etcd 3.4's proxy (its upstream TLSInfo has EmptyCN): the --cert certificate must have no
 * Common Name. A member with --client-cert-auth takes a certificate's CN as the user of
 * every call on the connection, and the proxy's connection carries all its clients' calls.
 * etcd's text: "cert has non empty Common Name (<cn>)". */
static int check_empty_cn(const char *path, char *err, size_t cap)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        int rc = -errno;
        snprintf(err, cap, "--cert %s: %s", path, strerror(-rc));
        return rc;
    }
    X509 *x = PEM_read_X509(f, NULL, NULL, NULL);
    fclose(f);
    if (!x) {
        snprintf(err, cap, "--cert %s: no PEM certificate", path);
        return -EINVAL;
    }
    char cn[256] = "";
    int n = X509_NAME_get_text_by_NID(X509_get_subject_name(x), NID_commonName, cn, sizeof cn);
    X509_free(x);
    if (n > 0) {
        snprintf(err, cap, "cert has non empty Common Name (%s)", cn);
        return -EINVAL;
    }
    return 0;
}

static int open_upstream(kv_proxy *p, char *err, size_t cap)
{
    const kv_proxy_config *cfg = p->cfg;
    if (cfg->cert) {
        int rc = check_empty_cn(cfg->cert, err, cap);
        if (rc < 0)
            return rc;
    }
    kvc_config kc;
    kvc_config_default(&kc);
    kc.endpoints = cfg->endpoints;
    kc.n_endpoints = cfg->n_endpoints;
    kc.dial_timeout_ms = cfg->dial_timeout_ms;
    /* kvd's own bound (--max-pending-requests) is checked first; libkvclient's queue only
     * needs room for it */
    kc.max_pending = cfg->max_pending_requests + 16;
    kc.ca_file = cfg->cacert;
    kc.cert_file = cfg->cert;
    kc.key_file = cfg->key;
    kc.insecure_skip_verify = cfg->insecure_skip_verify;
    kc.keepalive_time_ms = cfg->upstream_keepalive_time_ms;
    kc.keepalive_timeout_ms = cfg->upstream_keepalive_timeout_ms;
    /* a forwarded call unanswered on a silent connection: PING at once, leave if unanswered
     * (a hung member, or the network to it cut, with no renewal in flight) */
    kc.keepalive_call_ms = cfg->upstream_answer_timeout_ms;
    kvc_error e;
    int rc = kvc_open(&p->up, &kc, &e);
    if (rc != 0) {
        snprintf(err, cap, "upstream: %s", e.message);
        return -EINVAL;
    }
    return 0;
}

/* --auto-tls without --cert-file: etcd's proxy makes (or reuses) a self-signed pair in
 * <data-dir>/fixtures/proxy for the --listen-addr host, valid one year; *cert and *key are
 * then paths in bufs of cap bytes. */
static int auto_tls_files(const kv_proxy_config *cfg, char *cert, char *key, size_t cap, char *err,
                          size_t errcap)
{
    char dir[1024];
    if (snprintf(dir, sizeof dir, "%s/fixtures/proxy", cfg->data_dir) >= (int)sizeof dir ||
        snprintf(cert, cap, "%s/cert.pem", dir) >= (int)cap ||
        snprintf(key, cap, "%s/key.pem", dir) >= (int)cap) {
        snprintf(err, errcap, "--data-dir too long for --auto-tls");
        return -ENAMETOOLONG;
    }
    const char *hosts[] = {cfg->listen_host};
    return kv_tls_self_cert(dir, hosts, 1, 1, err, errcap);
}

static int server_tls(kv_proxy *p, char *err, size_t cap)
{
    const kv_proxy_config *cfg = p->cfg;
    char cert[1100], key[1100], ciphers[2048];
    const char *cert_file = cfg->cert_file, *key_file = cfg->key_file;
    int rc;
    if (cfg->auto_tls && cert_file) {
        fprintf(stderr, "kvd grpc-proxy: warning: ignoring --auto-tls since certs given\n");
    } else if (cfg->auto_tls) {
        if ((rc = auto_tls_files(cfg, cert, key, sizeof cert, err, cap)) < 0)
            return rc;
        cert_file = cert;
        key_file = key;
    }
    if (!cert_file)
        return 0;
    if (cfg->listen_cipher_suites &&
        (rc = kv_tls_cipher_list(cfg->listen_cipher_suites, ciphers, sizeof ciphers, err, cap)) < 0)
        return rc;
    kv_tls_options o = {.cert_file = cert_file,
                        .key_file = key_file,
                        .ca_file = cfg->trusted_ca_file,
                        .server = 1,
                        .verify_peer = cfg->trusted_ca_file != NULL,
                        .crl_file = cfg->client_crl_file,
                        .ciphers = cfg->listen_cipher_suites ? ciphers : NULL,
                        .label = "client"};
    return kv_tls_ctx_new(&p->server_tls, &o, err, cap);
}

static int start_grpc(kv_proxy *p, char *err, size_t cap)
{
    const kv_proxy_config *cfg = p->cfg;
    int rc = server_tls(p, err, cap);
    if (rc < 0)
        return rc;
    kv_grpc_config gc;
    kv_grpc_config_default(&gc);
    gc.max_connections = cfg->max_connections;
    gc.max_concurrent_streams = cfg->max_concurrent_streams;
    /* etcd's proxy serves with grpc-go's default receive limit, 4 MiB; what may go up is
     * --max-send-bytes (kv_proxy_send_too_big) */
    gc.max_request_bytes = KV_PROXY_MAX_CLIENT_MESSAGE;
    gc.max_send_buffer_bytes = cfg->max_send_buffer_bytes;
    gc.max_buffered_bytes = cfg->max_buffered_bytes;
    gc.priority_methods = priority;
    /* Agents hold long-lived streams and send few header blocks: memory per connection is
     * what bounds a proxy (docs/proxy.md "Memory per agent connection"). */
    gc.no_hpack_dynamic_table = 1;
    gc.tls = p->server_tls;
    rc = kv_grpc_server_init(&p->grpc, p->loop, &gc, methods, sizeof methods / sizeof methods[0], p,
                             p->metrics);
    if (rc < 0) {
        snprintf(err, cap, "gRPC server: %s", strerror(-rc));
        return rc;
    }
    /* beside gRPC, --listen-addr answers HTTP as etcd's proxy does (its cmux): /health,
     * /metrics and, with --enable-pprof, /debug/pprof/ */
    kv_client_http_config hc = {
        .metrics = p->metrics,
        .health = kv_proxy_health_check,
        .app = p,
        .pprof = p->pprof,
        .grpc_proxy = 1,
    };
    if ((rc = kv_client_http_new(&p->chttp, &hc, p->loop)) < 0) {
        snprintf(err, cap, "out of memory");
        return rc;
    }
    kv_client_http_attach(p->chttp, p->grpc);
    rc = kv_grpc_server_listen(p->grpc, cfg->listen_host, cfg->listen_port);
    if (rc < 0) {
        snprintf(err, cap, "--listen-addr %s:%d: %s", cfg->listen_host, cfg->listen_port,
                 uv_strerror(rc));
        return rc;
    }
    return 0;
}

static int start_metrics(kv_proxy *p, char *err, size_t cap)
{
    const kv_proxy_config *cfg = p->cfg;
    if (!cfg->has_metrics)
        return 0;
    kv_http_config hc;
    kv_http_config_default(&hc);
    hc.pprof = p->pprof; /* etcd serves it on --listen-addr only; here on both */
    if (cfg->metrics_tls) {
        if (!p->server_tls) { /* etcd's transport.NewListener without TLS info */
            snprintf(err, cap,
                     "cannot listen on TLS for %s:%d: KeyFile and CertFile are not "
                     "presented (--metrics-addr https:// uses the listener's TLS: give "
                     "--cert-file and --key-file, or --auto-tls)",
                     cfg->metrics_host, cfg->metrics_port);
            return -EINVAL;
        }
        hc.tls = p->server_tls;
    }
    int rc = kv_http_server_init(&p->http, p->loop, &hc, p->metrics, kv_proxy_health_check, p);
    if (rc == 0)
        rc = kv_http_server_listen(p->http, cfg->metrics_host, cfg->metrics_port);
    if (rc < 0) {
        snprintf(err, cap, "--metrics-addr %s:%d: %s", cfg->metrics_host, cfg->metrics_port,
                 rc < -1000 ? uv_strerror(rc) : strerror(-rc));
        return rc;
    }
    return 0;
}

int kv_proxy_start(kv_proxy *p, uv_loop_t *loop, const kv_proxy_config *cfg, char *err, size_t cap)
{
    memset(p, 0, sizeof *p);
    p->loop = loop;
    p->cfg = cfg;
    int rc = kv_metrics_new(&p->metrics, 0);
    if (rc < 0) {
        snprintf(err, cap, "out of memory");
        return rc;
    }
    (void)kv_process_metrics_register(p->metrics);
    for (int i = 0; i < KV_PROXY_REFUSED_COUNT; i++)
        p->m_refused[i] = kv_metrics_counter(p->metrics, "kvd_proxy_refused_total",
                                             "Requests refused by a bound with RESOURCE_EXHAUSTED "
                                             "\"etcdserver: too many requests\".",
                                             refused_label[i]);
    static const char too_large[] =
        "Messages refused by a size limit: requests over --max-send-bytes (direction=send), "
        "answers over --max-recv-bytes (direction=recv).";
    p->m_too_large[0] = kv_metrics_counter(p->metrics, "kvd_proxy_message_too_large_total",
                                           too_large, "direction=\"send\"");
    p->m_too_large[1] = kv_metrics_counter(p->metrics, "kvd_proxy_message_too_large_total",
                                           too_large, "direction=\"recv\"");
    (void)kv_metrics_gauge_fn(p->metrics, "kvd_proxy_bridge_queued",
                              "Upstream events waiting for the proxy loop.", bridge_queued, p);
    (void)kv_metrics_counter_fn(p->metrics, "kvd_proxy_upstream_connects_total",
                                "Connections made to a member by the proxy's upstream client "
                                "(each failover to the next endpoint adds one).",
                                upstream_connects, p);
    (void)kv_metrics_counter_fn(p->metrics, "kvd_proxy_upstream_ping_timeouts_total",
                                "Upstream connections given up because a keepalive PING had no "
                                "answer within --upstream-keepalive-timeout (a hung member).",
                                upstream_ping_timeouts, p);
    rc = kv_proxy_bridge_init(&p->bridge, loop, on_event, p);
    if (rc < 0) {
        snprintf(err, cap, "uv_async_init: %s", uv_strerror(rc));
        return rc;
    }
    if ((rc = kv_proxy_unary_init(p)) < 0 || (rc = kv_proxy_watch_init(p)) < 0 ||
        (rc = kv_proxy_stream_init(p)) < 0 || (rc = kv_proxy_lease_new(p, &p->lease)) < 0 ||
        (rc = kv_proxy_kvcache_init(p)) < 0 || (rc = kv_proxy_register_init(p)) < 0 ||
        (rc = kv_proxy_cluster_init(p)) < 0) {
        snprintf(err, cap, "out of memory");
        return rc;
    }
    if ((rc = open_upstream(p, err, cap)) < 0)
        return rc;
    if ((rc = kv_proxy_probe_start(p)) < 0) {
        snprintf(err, cap, "uv_timer_init: %s", uv_strerror(rc));
        return rc;
    }
    kv_proxy_kvcache_start(p);
    if (cfg->enable_pprof) {
        if ((rc = kv_pprof_http_new(&p->pprof, p->loop)) != 0) {
            snprintf(err, cap, "out of memory");
            return rc;
        }
        fprintf(stderr, "kvd grpc-proxy: pprof is enabled under /debug/pprof on %s:%d%s\n",
                cfg->listen_host, cfg->listen_port,
                cfg->has_metrics ? " and on --metrics-addr" : "");
    }
    if ((rc = start_grpc(p, err, cap)) < 0)
        return rc;
    if ((rc = start_metrics(p, err, cap)) < 0)
        return rc;
    kv_proxy_register_start(p); /* once the advertised address is served */
    return 0;
}

int kv_proxy_port(kv_proxy *p)
{
    return p->grpc ? kv_grpc_server_port(p->grpc) : -EINVAL;
}

void kv_proxy_stop(kv_proxy *p)
{
    p->stopping = 1;
    if (p->grpc) /* on_cancel for every live client call: relays release their streams */
        kv_grpc_server_close(p->grpc, NULL, NULL);
    p->grpc = NULL;
    if (p->http)
        kv_http_server_close(p->http, NULL, NULL);
    p->http = NULL;
    kv_client_http_free(p->chttp); /* after its connections (closed above) */
    p->chttp = NULL;
    kv_pprof_http_free(p->pprof); /* after the connections that held its requests */
    p->pprof = NULL;
    if (p->lease)
        kv_proxy_lease_stop(p->lease);
    kv_proxy_watch_stop(p);
    kv_proxy_probe_stop(p);
    kv_proxy_kvcache_stop(p);
    kv_proxy_register_stop(p);
    kvc_close(p->up); /* pending unary calls complete (CANCELLED) into the bridge */
    p->up = NULL;
    if (p->bridge.handle)
        kv_proxy_bridge_close(&p->bridge); /* handles every event left */
    uv_run(p->loop, UV_RUN_DEFAULT);       /* close callbacks */
    kv_proxy_lease_free(p->lease);
    p->lease = NULL;
    kv_proxy_watch_free(p);
    kv_proxy_kvcache_free(p);
    kv_proxy_register_free(p);
    kv_proxy_cluster_free(p);
    if (p->metrics)
        kv_metrics_gauge_fn_remove(p->metrics, p);
    kv_metrics_free(p->metrics);
    p->metrics = NULL;
    kv_tls_ctx_unref(p->server_tls);
    p->server_tls = NULL;
}
