/*
 * proxy_config.c - flags of `kvd grpc-proxy start` (contract in proxy_config.h).
 */
#include "proxy/proxy_config.h"
#include "common/dns_srv.h"
#include "common/go_duration.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void kv_proxy_config_default(kv_proxy_config *c)
{
    memset(c, 0, sizeof *c);
    snprintf(c->listen_host, sizeof c->listen_host, "127.0.0.1");
    c->listen_port = 23790;
    c->dial_timeout_ms = 5000;
    c->upstream_answer_timeout_ms = 3000;
    c->upstream_keepalive_time_ms = 10000;   /* what etcdctl's 2s becomes in grpc-go */
    c->upstream_keepalive_timeout_ms = 6000; /* etcdctl's --keepalive-timeout */
    c->upstream_probe_interval_ms = 5000;
    c->max_pending_requests = 10000;
    c->max_pending_renewals = 1000000;
    c->max_stream_renewals = 10000;
    c->max_watch_streams = 10000;
    c->max_watchers = 100000;
    c->max_watchers_per_upstream_stream = 10000;
    c->max_connections = 10000;
    c->max_send_buffer_bytes = (size_t)16 << 20;
    c->max_buffered_bytes = (size_t)512 << 20;
    c->max_upstream_send_bytes = (size_t)4 << 20;
    c->max_snapshot_buffer_bytes = (size_t)4 << 20;
    c->max_cache_entries = 2048;
    c->max_cache_bytes = (size_t)64 << 20;
    c->max_resolver_members = 1000;
    c->data_dir = "default.proxy";
    c->max_send_bytes = 1572864;   /* etcd: defaultGRPCMaxCallSendMsgSize, 1.5 MiB */
    c->max_recv_bytes = INT32_MAX; /* etcd: math.MaxInt32 */
    c->max_concurrent_streams = 1000;
}

const char *kv_proxy_config_usage(void)
{
    return "usage: kvd grpc-proxy start [flags]\n"
           "  --endpoints=h:p,...          upstream members (127.0.0.1:2379)\n"
           "  --discovery-srv=DOMAIN       upstream members from DNS SRV records instead\n"
           "  --discovery-srv-name=NAME    their service name suffix (_etcd-client-NAME)\n"
           "  --insecure-discovery         accept http:// SRV endpoints (else https:// only)\n"
           "  --listen-addr=h:p            client address: gRPC, /health, /metrics "
           "(127.0.0.1:23790)\n"
           "  --metrics-addr=http://h:p    /metrics and /health (none); https:// with the "
           "listener's TLS\n"
           "  --cert --key --cacert        upstream TLS (client certificate, CA)\n"
           "  --insecure-skip-tls-verify   do not verify the members' certificates\n"
           "  --cert-file --key-file       client side TLS\n"
           "  --trusted-ca-file            require client certificates signed by this CA\n"
           "  --auto-tls                   client side TLS with a self-signed certificate\n"
           "  --data-dir=default.proxy     where --auto-tls keeps it (fixtures/proxy)\n"
           "  --listen-cipher-suites=a,b   TLS 1.2 cipher suites of the client side (Go names)\n"
           "  --client-crl-file            revoked client certificates (PEM/DER CRLs)\n"
           "  --dial-timeout=5s\n"
           "  --upstream-answer-timeout=3s renewals or a call unanswered and the member "
           "silent this long (a call: then a PING unanswered as long again): next endpoint\n"
           "  --renewal-batch-delay=0      renewals go up this long after the first of a batch "
           "(0: at the end of its loop turn; at most 1s)\n"
           "  --upstream-keepalive-time=10s PING the member after this long without a byte "
           "from it (0: off; at least 10s)\n"
           "  --upstream-keepalive-timeout=6s the PING unanswered this long: next endpoint\n"
           "  --experimental-serializable-ordering  a Range or Txn answered at a revision "
           "older than one already seen goes to the next endpoint\n"
           "  --upstream-probe-interval=5s a linearizable read of the member this often; "
           "answered UNAVAILABLE (stalled, no leader): next endpoint (0: off)\n"
           "  --max-pending-requests=10000 unary calls forwarded and unanswered\n"
           "  --max-pending-renewals=1000000 keepalive requests waiting for the leader\n"
           "  --max-pending-renewals-per-stream=10000 of them, from one client stream\n"
           "  --max-watch-streams=10000    client Watch streams\n"
           "  --max-watchers=100000        client watchers (all streams)\n"
           "  --max-watchers-per-upstream-stream=10000 upstream watchers on one upstream Watch "
           "stream\n"
           "  --max-connections=10000      client connections\n"
           "  --max-send-buffer-bytes=16777216 per client connection\n"
           "  --max-buffered-bytes=536870912   all client connections\n"
           "  --max-upstream-send-bytes=4194304 per upstream stream\n"
           "  --max-snapshot-buffer-bytes=4194304 snapshot bytes queued to a client before "
           "the proxy stops reading the member\n"
           "  --max-cache-entries=2048     serializable range cache entries (0: no cache)\n"
           "  --max-cache-bytes=67108864   serializable range cache bytes\n"
           "  --advertise-client-url=URL   this proxy's address for MemberList and registration\n"
           "  --resolver-prefix=P          register under P/<url>; MemberList lists P's proxies\n"
           "  --resolver-ttl=N             registration lease TTL, seconds (with a prefix)\n"
           "  --max-resolver-members=1000  registered proxies a MemberList may list\n"
           "  --namespace=pfx              prefix of every key of the clients (none)\n"
           "  --max-send-bytes=1572864     largest request message sent to the members\n"
           "  --max-recv-bytes=2147483647  largest answer message taken from the members\n"
           "  --max-concurrent-streams=1000 HTTP/2 streams per client connection\n"
           "  --debug                      log every forwarded call and relayed stream\n"
           "  --enable-pprof               /debug/pprof/ on --listen-addr: a CPU profile for "
           "go tool pprof (docs/pprof.md)\n";
}

static int parse_hostport(const char *v, char *host, size_t cap, int *port)
{
    if (strncmp(v, "http://", 7) == 0)
        v += 7;
    else if (strncmp(v, "https://", 8) == 0)
        v += 8;
    const char *colon = strrchr(v, ':');
    if (!colon || colon == v)
        return -EINVAL;
    size_t hl = (size_t)(colon - v);
    if (v[0] == '[' && hl >= 2 && v[hl - 1] == ']') {
        v++;
        hl -= 2;
    }
    if (hl + 1 > cap)
        return -EINVAL;
    char *end;
    long p = strtol(colon + 1, &end, 10);
    if (*end || p < 0 || p > 65535)
        return -EINVAL;
    memcpy(host, v, hl);
    host[hl] = 0;
    *port = (int)p;
    return 0;
}

static int parse_u64(const char *v, uint64_t max, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || end == v || *end || x == 0 || x > max || v[0] == '-')
        return -EINVAL;
    *out = x;
    return 0;
}

/* The proxy's duration flags (kvd's own: etcd 3.4's grpc-proxy has none): Go's
 * time.ParseDuration ("5s", "500ms", "1m30s", "1h"; common/go_duration.h), and, as before, a
 * lone number is seconds ("5", "1.5"). 1 ms to 1 h, in whole milliseconds ("1.5ms" is 1). */
static int parse_duration_ms(const char *v, uint32_t *out)
{
    int64_t ns = 0;
    if (kv_go_duration_parse(v, KV_NS_PER_S, &ns) < 0 || ns < KV_NS_PER_MS ||
        ns > 3600 * KV_NS_PER_S)
        return -EINVAL;
    *out = (uint32_t)(ns / KV_NS_PER_MS);
    return 0;
}

/* A duration, or zero for off ("0", "0s", "0ms": any zero duration). */
static int parse_duration_or_zero(const char *v, uint32_t *out)
{
    int64_t ns = -1;
    if (kv_go_duration_parse(v, KV_NS_PER_S, &ns) == 0 && ns == 0) {
        *out = 0;
        return 0;
    }
    return parse_duration_ms(v, out);
}

static int set_endpoints(kv_proxy_config *c, const char *v, char *err, size_t cap)
{
    c->n_endpoints = 0;
    while (*v) {
        const char *comma = strchr(v, ',');
        size_t n = comma ? (size_t)(comma - v) : strlen(v);
        if (n > 0) {
            if (c->n_endpoints == KV_PROXY_MAX_ENDPOINTS) {
                snprintf(err, cap, "--endpoints: at most %d", KV_PROXY_MAX_ENDPOINTS);
                return -EINVAL;
            }
            if (n + 1 > sizeof c->endpoint_buf[0] - 8) {
                snprintf(err, cap, "--endpoints: endpoint too long");
                return -EINVAL;
            }
            memcpy(c->endpoint_buf[c->n_endpoints], v, n);
            c->endpoint_buf[c->n_endpoints][n] = 0;
            c->n_endpoints++;
        }
        v += n + (comma ? 1 : 0);
    }
    return 0;
}

/* A Go int flag (etcd's --resolver-ttl): any sign, so that etcd's checks see it. */
static int parse_int(const char *v, int64_t *out)
{
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || x < INT32_MIN || x > INT32_MAX)
        return -EINVAL;
    *out = x;
    return 0;
}

/* etcd 3.4's checks (etcdmain/grpc_proxy.go, checkArgs), with its texts. */
static int check_resolver(kv_proxy_config *c, char *err, size_t cap)
{
    const char *pfx = c->resolver_prefix ? c->resolver_prefix : "";
    const char *adv = c->advertise_client_url ? c->advertise_client_url : "";
    if (*pfx && c->resolver_ttl < 1) {
        snprintf(err, cap, "invalid resolver-ttl %lld", (long long)c->resolver_ttl);
        return -EINVAL;
    }
    if (!*pfx && c->resolver_ttl > 0) {
        snprintf(err, cap, "invalid resolver-prefix \"%s\"", pfx);
        return -EINVAL;
    }
    if (*pfx && !*adv) { /* etcd: only when set to "" (its default is 127.0.0.1:23790) */
        snprintf(err, cap, "invalid advertise-client-url \"%s\"", adv);
        return -EINVAL;
    }
    if (!*pfx)
        c->resolver_prefix = NULL;
    if (!*adv)
        c->advertise_client_url = NULL;
    return 0;
}

/* Flags of etcd's grpc-proxy that kvd does not implement yet: refused by name. */
static const char *const not_yet[] = {"experimental-leasing-prefix", NULL};

int kv_proxy_config_parse(kv_proxy_config *c, int argc, char **argv, char *err, size_t cap)
{
    int i = 1, rc = 0;
    const char *eps = "127.0.0.1:2379";
    while (i < argc) {
        const char *a = argv[i++];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0)
            return 1;
        if (strncmp(a, "--", 2) != 0) {
            snprintf(err, cap, "unexpected argument '%s'", a);
            return -EINVAL;
        }
        a += 2;
        char name[64];
        const char *eq = strchr(a, '=');
        size_t nl = eq ? (size_t)(eq - a) : strlen(a);
        if (nl >= sizeof name) {
            snprintf(err, cap, "unknown flag '--%s'", a);
            return -EINVAL;
        }
        memcpy(name, a, nl);
        name[nl] = 0;
        for (size_t k = 0; not_yet[k]; k++)
            if (strcmp(name, not_yet[k]) == 0) {
                snprintf(err, cap, "--%s is not supported by kvd grpc-proxy yet (docs/proxy.md)",
                         name);
                return -EINVAL;
            }
        if (strcmp(name, "insecure-skip-tls-verify") == 0) {
            c->insecure_skip_verify = !eq || strcmp(eq + 1, "true") == 0;
            continue;
        }
        if (strcmp(name, "insecure-discovery") == 0) {
            c->insecure_discovery = !eq || strcmp(eq + 1, "true") == 0;
            continue;
        }
        if (strcmp(name, "auto-tls") == 0) {
            c->auto_tls = !eq || strcmp(eq + 1, "true") == 0;
            continue;
        }
        if (strcmp(name, "debug") == 0) {
            c->debug = !eq || strcmp(eq + 1, "true") == 0;
            continue;
        }
        if (strcmp(name, "enable-pprof") == 0) {
            c->enable_pprof = !eq || strcmp(eq + 1, "true") == 0;
            continue;
        }
        if (strcmp(name, "experimental-serializable-ordering") == 0) {
            c->serializable_ordering = !eq || strcmp(eq + 1, "true") == 0;
            continue;
        }
        const char *v = eq ? eq + 1 : (i < argc ? argv[i++] : NULL);
        if (!v) {
            snprintf(err, cap, "flag --%s needs a value", name);
            return -EINVAL;
        }
        uint64_t u = 0;
        if (strcmp(name, "endpoints") == 0) {
            eps = v;
        } else if (strcmp(name, "discovery-srv") == 0) {
            c->discovery_srv = v[0] ? v : NULL;
        } else if (strcmp(name, "discovery-srv-name") == 0) {
            c->discovery_srv_name = v[0] ? v : NULL;
        } else if (strcmp(name, "listen-addr") == 0) {
            rc = parse_hostport(v, c->listen_host, sizeof c->listen_host, &c->listen_port);
        } else if (strcmp(name, "metrics-addr") == 0) {
            /* etcd: https serves TLS with the listener's certificate (proxy.c start_metrics) */
            c->metrics_tls = strncmp(v, "https://", 8) == 0;
            rc = parse_hostport(v, c->metrics_host, sizeof c->metrics_host, &c->metrics_port);
            c->has_metrics = 1;
        } else if (strcmp(name, "cert") == 0) {
            c->cert = v;
        } else if (strcmp(name, "key") == 0) {
            c->key = v;
        } else if (strcmp(name, "cacert") == 0) {
            c->cacert = v;
        } else if (strcmp(name, "cert-file") == 0) {
            c->cert_file = v;
        } else if (strcmp(name, "key-file") == 0) {
            c->key_file = v;
        } else if (strcmp(name, "trusted-ca-file") == 0) {
            c->trusted_ca_file = v;
        } else if (strcmp(name, "data-dir") == 0) {
            c->data_dir = v;
        } else if (strcmp(name, "listen-cipher-suites") == 0) {
            c->listen_cipher_suites = v[0] ? v : NULL;
        } else if (strcmp(name, "client-crl-file") == 0) {
            c->client_crl_file = v[0] ? v : NULL;
        } else if (strcmp(name, "dial-timeout") == 0) {
            rc = parse_duration_ms(v, &c->dial_timeout_ms);
        } else if (strcmp(name, "upstream-answer-timeout") == 0) {
            rc = parse_duration_ms(v, &c->upstream_answer_timeout_ms);
        } else if (strcmp(name, "renewal-batch-delay") == 0) {
            rc = parse_duration_or_zero(v, &c->renewal_batch_delay_ms);
            if (rc == 0 && c->renewal_batch_delay_ms > 1000) {
                /* renewals must stay far inside a TTL (etcd's minimum is 5 s) */
                snprintf(err, cap, "--renewal-batch-delay: '%s' is over 1s", v);
                return -EINVAL;
            }
        } else if (strcmp(name, "upstream-keepalive-time") == 0) {
            rc = parse_duration_or_zero(v, &c->upstream_keepalive_time_ms);
        } else if (strcmp(name, "upstream-keepalive-timeout") == 0) {
            rc = parse_duration_ms(v, &c->upstream_keepalive_timeout_ms);
        } else if (strcmp(name, "upstream-probe-interval") == 0) {
            rc = parse_duration_or_zero(v, &c->upstream_probe_interval_ms);
        } else if (strcmp(name, "max-pending-requests") == 0) {
            rc = parse_u64(v, UINT32_MAX, &u);
            c->max_pending_requests = (uint32_t)u;
        } else if (strcmp(name, "max-pending-renewals") == 0) {
            rc = parse_u64(v, UINT32_MAX, &u);
            c->max_pending_renewals = (uint32_t)u;
        } else if (strcmp(name, "max-pending-renewals-per-stream") == 0) {
            rc = parse_u64(v, UINT32_MAX, &u);
            c->max_stream_renewals = (uint32_t)u;
        } else if (strcmp(name, "max-watch-streams") == 0) {
            rc = parse_u64(v, UINT32_MAX, &u);
            c->max_watch_streams = (uint32_t)u;
        } else if (strcmp(name, "max-watchers") == 0) {
            rc = parse_u64(v, UINT32_MAX, &u);
            c->max_watchers = (uint32_t)u;
        } else if (strcmp(name, "max-watchers-per-upstream-stream") == 0) {
            rc = parse_u64(v, UINT32_MAX, &u);
            c->max_watchers_per_upstream_stream = u ? (uint32_t)u : 1;
        } else if (strcmp(name, "max-connections") == 0) {
            rc = parse_u64(v, UINT32_MAX, &u);
            c->max_connections = (uint32_t)u;
        } else if (strcmp(name, "max-send-buffer-bytes") == 0) {
            rc = parse_u64(v, (uint64_t)1 << 40, &u);
            c->max_send_buffer_bytes = (size_t)u;
        } else if (strcmp(name, "max-buffered-bytes") == 0) {
            rc = parse_u64(v, (uint64_t)1 << 40, &u);
            c->max_buffered_bytes = (size_t)u;
        } else if (strcmp(name, "max-upstream-send-bytes") == 0) {
            rc = parse_u64(v, (uint64_t)1 << 31, &u);
            c->max_upstream_send_bytes = (size_t)u;
        } else if (strcmp(name, "max-snapshot-buffer-bytes") == 0) {
            rc = parse_u64(v, (uint64_t)1 << 40, &u);
            c->max_snapshot_buffer_bytes = (size_t)u;
        } else if (strcmp(name, "max-cache-entries") == 0) {
            rc = strcmp(v, "0") == 0 ? 0 : parse_u64(v, (uint64_t)1 << 24, &u);
            c->max_cache_entries = (size_t)u;
        } else if (strcmp(name, "namespace") == 0) {
            c->ns = v[0] ? v : NULL; /* etcd: an empty namespace is none */
        } else if (strcmp(name, "max-cache-bytes") == 0) {
            rc = parse_u64(v, (uint64_t)1 << 40, &u);
            c->max_cache_bytes = (size_t)u;
        } else if (strcmp(name, "advertise-client-url") == 0) {
            c->advertise_client_url = v;
        } else if (strcmp(name, "resolver-prefix") == 0) {
            c->resolver_prefix = v;
        } else if (strcmp(name, "resolver-ttl") == 0) {
            rc = parse_int(v, &c->resolver_ttl);
        } else if (strcmp(name, "max-resolver-members") == 0) {
            rc = parse_u64(v, UINT32_MAX, &u);
            c->max_resolver_members = (uint32_t)u;
        } else if (strcmp(name, "max-send-bytes") == 0) {
            /* etcd: 0 keeps the default */
            rc = strcmp(v, "0") == 0 ? 0 : parse_u64(v, INT32_MAX, &u);
            if (u)
                c->max_send_bytes = (size_t)u;
        } else if (strcmp(name, "max-recv-bytes") == 0) {
            rc = strcmp(v, "0") == 0 ? 0 : parse_u64(v, INT32_MAX, &u);
            if (u)
                c->max_recv_bytes = (size_t)u;
        } else if (strcmp(name, "max-concurrent-streams") == 0) {
            rc = parse_u64(v, UINT32_MAX, &u);
            c->max_concurrent_streams = (uint32_t)u;
        } else {
            snprintf(err, cap, "unknown flag '--%s'", name);
            return -EINVAL;
        }
        if (rc < 0) {
            snprintf(err, cap, "--%s: invalid value '%s'", name, v);
            return -EINVAL;
        }
    }
    if ((c->cert_file == NULL) != (c->key_file == NULL)) {
        snprintf(err, cap, "--cert-file and --key-file go together");
        return -EINVAL;
    }
    if (c->trusted_ca_file && !c->cert_file) {
        snprintf(err, cap, "--trusted-ca-file needs --cert-file and --key-file");
        return -EINVAL;
    }
    /* etcd 3.4's proxy dereferences a nil TLS config here (a panic): kvd says why instead */
    if (c->listen_cipher_suites && !c->cert_file && !c->auto_tls) {
        snprintf(err, cap, "--listen-cipher-suites needs --cert-file/--key-file or --auto-tls");
        return -EINVAL;
    }
    if (!c->data_dir[0]) {
        snprintf(err, cap, "--data-dir: empty");
        return -EINVAL;
    }
    if ((c->cert == NULL) != (c->key == NULL)) {
        snprintf(err, cap, "--cert and --key go together");
        return -EINVAL;
    }
    if ((rc = check_resolver(c, err, cap)) < 0)
        return rc;
    rc = set_endpoints(c, eps, err, cap);
    if (rc < 0)
        return rc;
    if (c->n_endpoints == 0) {
        snprintf(err, cap, "--endpoints: no endpoint");
        return -EINVAL;
    }
    /* With upstream TLS flags, an endpoint without a scheme is https (etcd's clientv3 uses TLS
     * for every endpoint once a TLS config is given). */
    int tls = c->cert || c->cacert || c->insecure_skip_verify;
    for (size_t k = 0; k < c->n_endpoints; k++) {
        char *e = c->endpoint_buf[k];
        if (tls && !strstr(e, "://")) {
            char tmp[sizeof c->endpoint_buf[0]];
            snprintf(tmp, sizeof tmp, "https://%s", e);
            memcpy(e, tmp, sizeof tmp);
        }
        c->endpoints[k] = e;
    }
    return 0;
}

int kv_proxy_config_discover(kv_proxy_config *c, char *err, size_t cap)
{
    if (!c->discovery_srv)
        return 0;
    char **eps = NULL;
    size_t n = 0;
    if (kv_srv_client_endpoints(c->discovery_srv, c->discovery_srv_name, &eps, &n, err, cap) < 0)
        return -ENOENT;
    fprintf(stderr, "kvd grpc-proxy: discovered cluster from SRV %s:", c->discovery_srv);
    for (size_t i = 0; i < n; i++)
        fprintf(stderr, " %s", eps[i]);
    fprintf(stderr, "\n");
    if (!c->insecure_discovery) { /* etcd: verifying discovered SRV endpoints */
        char why[2048];
        n = kv_srv_keep_secure(eps, n, c->dial_timeout_ms, why, sizeof why);
        if (why[0])
            fprintf(stderr, "kvd grpc-proxy: warning: failed to verify discovered endpoints: %s\n",
                    why);
    }
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        if (kept < KV_PROXY_MAX_ENDPOINTS && strlen(eps[i]) < sizeof c->endpoint_buf[0]) {
            snprintf(c->endpoint_buf[kept], sizeof c->endpoint_buf[0], "%s", eps[i]);
            c->endpoints[kept] = c->endpoint_buf[kept];
            kept++;
        }
    }
    kv_srv_endpoints_free(eps, n);
    if (kept == 0) {
        snprintf(err, cap,
                 "--discovery-srv %s: no endpoint left (etcdclient: no available "
                 "endpoints)",
                 c->discovery_srv);
        return -ENOENT;
    }
    c->n_endpoints = kept;
    return 0;
}
