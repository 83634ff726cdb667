/*
 * proxy_config.h - the flags of `kvd grpc-proxy start` (etcd 3.4's `etcd grpc-proxy start`
 * where they exist, kvd's bounds otherwise; docs/proxy.md "Flags").
 *
 * Contract: kv_proxy_config_parse fills a caller-owned struct from argv (argv[0] is "start");
 * strings point into argv (which outlives the proxy). Flags take "--name=value" or
 * "--name value". Returns 0, 1 for --help (usage printed by the caller:
 * kv_proxy_config_usage), or -EINVAL with a one-line reason in err. etcd flags kvd does not
 * implement yet are refused by name, never silently ignored.
 */
#ifndef KV_PROXY_CONFIG_H
#define KV_PROXY_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#define KV_PROXY_MAX_ENDPOINTS 16

typedef struct kv_proxy_config {
    const char *endpoints[KV_PROXY_MAX_ENDPOINTS]; /* as given; "https://" added with TLS */
    char endpoint_buf[KV_PROXY_MAX_ENDPOINTS][280];
    size_t n_endpoints;
    char listen_host[256]; /* --listen-addr (127.0.0.1:23790) */
    int listen_port;
    char metrics_host[256]; /* --metrics-addr (none); http://host:port or host:port */
    int metrics_port;
    int has_metrics;
    int metrics_tls; /* --metrics-addr https://: TLS with the listener's context (server_tls) */
    /* upstream TLS (etcd's --cert --key --cacert; --insecure-skip-tls-verify) */
    const char *cert, *key, *cacert;
    int insecure_skip_verify;
    /* --discovery-srv DOMAIN (--discovery-srv-name NAME): the endpoints come from the SRV
     * records of _etcd-client-ssl[-NAME]._tcp.DOMAIN and _etcd-client[-NAME]._tcp.DOMAIN
     * (kv_proxy_config_discover, common/dns_srv.h) instead of --endpoints; without
     * --insecure-discovery only the https:// ones a TCP connection reaches are kept, as etcd */
    const char *discovery_srv, *discovery_srv_name;
    int insecure_discovery;
    /* client side TLS (etcd's --cert-file --key-file --trusted-ca-file: with a CA the proxy
     * requires and verifies client certificates) */
    const char *cert_file, *key_file, *trusted_ca_file;
    /* --auto-tls: without --cert-file, client side TLS with a self-signed certificate made
     * (or reused) in <data-dir>/fixtures/proxy, as etcd's proxy (net/tls_self.h) */
    int auto_tls;
    const char *data_dir;             /* --data-dir (default.proxy): only --auto-tls writes it */
    const char *listen_cipher_suites; /* --listen-cipher-suites: Go names (NULL: the policy) */
    const char *client_crl_file;      /* --client-crl-file: client certificates refused */
    uint32_t dial_timeout_ms;         /* --dial-timeout (etcd's grpc-proxy: 5s... ours: 5000 ms) */
    /* --upstream-answer-timeout (3s): renewals in flight on the upstream keepalive stream and
     * nothing at all received on it for this long: the member is taken as hung and the proxy
     * moves to the next endpoint */
    uint32_t upstream_answer_timeout_ms;
    /* --renewal-batch-delay (0; at most 1s): a batch of renewals goes up this long after its
     * first renewal arrived, instead of at the end of that loop turn: fewer, larger batches
     * (less CPU on the proxy and the members per renewal) for that much more renewal latency
     * (docs/proxy.md "The flow of a renewal") */
    uint32_t renewal_batch_delay_ms;
    /* --upstream-keepalive-time (10s; 0: off) and --upstream-keepalive-timeout (6s): HTTP/2
     * pings on the upstream connection (libkvclient's keepalive_time_ms/_timeout_ms), so a
     * hung member is left even when no renewal is in flight (watches, Observe, Snapshot) */
    uint32_t upstream_keepalive_time_ms;
    uint32_t upstream_keepalive_timeout_ms;
    /* --upstream-probe-interval (5s; 0: off): a linearizable Range of the /health key goes up
     * this often (proxy_health.c), so a member that answers pings but has stopped serving (its
     * raft stalled, cut off from its peers) answers it "request timed out" or "no leader", and
     * libkvclient moves to the next endpoint even when only watchers use the connection */
    uint32_t upstream_probe_interval_ms;
    /* --experimental-serializable-ordering (etcd's): a Range or Txn answered at a revision below
     * the highest one the proxy has seen is sent again after a move to the next endpoint, at
     * most once per endpoint, then answered etcd's ErrNoGreaterRev (proxy_unary.c) */
    int serializable_ordering;
    /* kvd's bounds (each a flag, a metric and etcd's "too many requests") */
    uint32_t max_pending_requests;  /* unary calls forwarded and unanswered (10000) */
    uint32_t max_pending_renewals;  /* keepalive requests waiting for the leader (1000000) */
    uint32_t max_stream_renewals;   /* of them, from one client stream (10000) */
    uint32_t max_watch_streams;     /* client Watch streams (10000) */
    uint32_t max_connections;       /* client connections (10000) */
    size_t max_send_buffer_bytes;   /* per client connection, bytes queued to it (16 MiB) */
    size_t max_buffered_bytes;      /* all client connections, in + out (512 MiB) */
    size_t max_upstream_send_bytes; /* per upstream stream, bytes not yet sent (4 MiB) */
    /* Maintenance.Snapshot: a client's unsent bytes above which the proxy stops reading the
     * upstream stream until they drain to half (4 MiB; docs/proxy.md, "Snapshot") */
    size_t max_snapshot_buffer_bytes;
    /* watch (docs/proxy.md, "Watch") */
    uint32_t max_watchers;                     /* client watchers of all streams (100000) */
    uint32_t max_watchers_per_upstream_stream; /* (10000: kvd's --max-watchers-per-stream) */
    /* the serializable range cache (etcd's proxy: a fixed LRU of 2048 entries); 0 disables */
    size_t max_cache_entries; /* --max-cache-entries (2048) */
    size_t max_cache_bytes;   /* --max-cache-bytes (64 MiB) */
    /* registration and MemberList (docs/proxy.md, "Registration"; etcd's flags). NULL or
     * "": unset (kvd's default: MemberList is forwarded; etcd's is 127.0.0.1:23790) */
    const char *advertise_client_url; /* --advertise-client-url */
    const char *resolver_prefix;      /* --resolver-prefix */
    int64_t resolver_ttl;             /* --resolver-ttl, seconds (0: unset) */
    uint32_t max_resolver_members;    /* --max-resolver-members (1000): proxies listed */
    /* --namespace: prefix of every key of the clients (NULL: none; proxy_ns.h) */
    const char *ns;
    /* etcd's message limits of the proxy's client (docs/proxy.md, "Message sizes"): a request
     * larger than max_send_bytes is refused before it goes up, an answer larger than
     * max_recv_bytes is not relayed; RESOURCE_EXHAUSTED with grpc-go's messages */
    size_t max_send_bytes;           /* --max-send-bytes (1572864) */
    size_t max_recv_bytes;           /* --max-recv-bytes (2147483647) */
    uint32_t max_concurrent_streams; /* --max-concurrent-streams: per client connection (1000) */
    int debug;        /* --debug: a line per forwarded call and relayed stream (kv_proxy_debug) */
    int enable_pprof; /* --enable-pprof: /debug/pprof/ on --metrics-addr (http/pprof_http.h) */
} kv_proxy_config;

void kv_proxy_config_default(kv_proxy_config *c);
int kv_proxy_config_parse(kv_proxy_config *c, int argc, char **argv, char *err, size_t cap);
/* With --discovery-srv: looks the endpoints up (blocking; before the loop starts) and replaces
 * c's endpoints with them (at most KV_PROXY_MAX_ENDPOINTS), printing what it found and dropped
 * to stderr. 0 (also without the flag), or -ENOENT with etcd's lookup error (or "no endpoint
 * left") in err. */
int kv_proxy_config_discover(kv_proxy_config *c, char *err, size_t cap);
const char *kv_proxy_config_usage(void);

#endif
