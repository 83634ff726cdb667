/*
 * config: kvd's command-line flags.
 *
 * Flag names are etcd's where the meaning is the same (--name, --data-dir,
 * --listen-client-urls, --initial-cluster, ...); --peers is kvd's short form of
 * --initial-cluster. Every bound a remote party can push against has a flag here.
 *
 * kv_config_parse() never exits or prints: it returns 0, 1 (help/version requested:
 * the caller prints kv_config_usage()), or a negative code with a message in err.
 */
#ifndef KV_CONFIG_H
#define KV_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#define KV_MAX_URLS 8
#define KV_MAX_MEMBERS 9

typedef struct kv_url {
    char host[256]; /* numeric or name; "localhost" is resolved to 127.0.0.1 */
    int port;
    char text[300]; /* the URL as given, normalised (scheme://host:port) */
    int tls;        /* https:// */
} kv_url;

typedef struct kv_peer {
    char name[64];
    kv_url url;
} kv_peer;

typedef struct kv_config {
    char name[64];
    char data_dir[512];
    kv_url listen_client[KV_MAX_URLS];
    size_t n_listen_client;
    kv_url advertise_client[KV_MAX_URLS];
    size_t n_advertise_client;
    kv_url listen_peer[KV_MAX_URLS];
    size_t n_listen_peer;
    kv_url advertise_peer[KV_MAX_URLS];
    size_t n_advertise_peer;
    kv_url listen_metrics[KV_MAX_URLS];
    size_t n_listen_metrics;
    kv_peer initial_cluster[KV_MAX_MEMBERS];
    size_t n_initial_cluster;
    char initial_cluster_token[128];
    char initial_cluster_state[16]; /* "new" or "existing" */
    int strict_reconfig_check;      /* --strict-reconfig-check: refuse member changes that
                                       would leave fewer started members than a quorum (true) */
    /* --discovery-srv DOMAIN (--discovery-srv-name NAME): the initial cluster comes from DNS
     * SRV records (kv_srv_boot, daemon/srv_boot.h) instead of --initial-cluster; "" = off */
    char discovery_srv[256];
    char discovery_srv_name[64];
    /* Not a flag: set by kv_srv_boot to the --discovery-srv domain when the records gave
     * https:// peers and there is no --peer-trusted-ca-file; the name every member's peer
     * certificate is then verified against (etcd: PeerTLSInfo.ServerName = DNSCluster). */
    char peer_server_name[256];
    char initial_member_id[24]; /* --initial-member-id: hex id `member add` gave (existing
                                   only; "" = derived from the peer URLs and token) */

    /* Raft timing (ms), as etcd. */
    uint32_t heartbeat_interval_ms;
    uint32_t election_timeout_ms;
    uint64_t snapshot_count;     /* --snapshot-count: entries between log compactions (100000) */
    size_t peer_max_queue_bytes; /* --peer-max-queue-bytes: send queue per peer (16 MiB) */

    /* Limits. */
    size_t max_request_bytes;        /* --max-request-bytes, default 1.5 MiB */
    uint32_t max_txn_ops;            /* --max-txn-ops, default 128 */
    uint64_t quota_backend_bytes;    /* --quota-backend-bytes, default 2 GiB */
    uint32_t max_concurrent_streams; /* --max-concurrent-streams, default 1000 */
    uint32_t max_connections;        /* --max-connections, default 10000 */
    size_t max_send_buffer_bytes;    /* --max-send-buffer-bytes, default 16 MiB per connection */
    uint32_t max_pending_proposals;  /* --max-pending-proposals, default 10000 */
    uint32_t read_workers;           /* --read-workers, reader threads, default 2 */
    uint32_t max_pending_reads;      /* --max-pending-reads, default 256 */

    /* Leases. */
    int64_t max_lease_ttl_s;     /* --max-lease-ttl, default 9000000000 (etcd's MaxLeaseTTL) */
    uint32_t max_keys_per_lease; /* --max-keys-per-lease, 0 = unlimited */
    uint32_t lease_revoke_rate;  /* --lease-revoke-rate, leases/s, default 1000 */
    uint32_t lease_checkpoint_interval_ms; /* --lease-checkpoint-interval, default 300000 */
    uint32_t lease_checkpoint_rate;        /* --lease-checkpoint-rate, default 1000 */
    uint32_t max_pending_lease_forwards;   /* --max-pending-lease-forwards, default 65536 */

    int enable_pprof; /* --enable-pprof: /debug/pprof/ on the client URLs (http/pprof_http.h) */

    /* Testing. */
    int enable_failpoints; /* --enable-failpoints: SIGUSR1 toggles an apply-path stall,
                              SIGUSR2 isolates the member from its peers */

    /* Startup checks and /health. */
    uint64_t startup_verify_records; /* --startup-verify-records, default 10000 per db */
    /* --startup-verify-full, default true: the whole data file's structure is checked
     * before LMDB opens it (docs/corruption.md) */
    int startup_verify_full;
    uint32_t max_health_probes;          /* --max-health-probes, default 64 */
    uint32_t compaction_batch_limit;     /* --experimental-compaction-batch-limit, 50 */
    uint32_t metrics_max_connections;    /* --metrics-max-connections, default 256 */
    uint32_t metrics_request_timeout_ms; /* --metrics-request-timeout, default 5s */
    /* gRPC transport under load and abuse (see server/grpc/README.md). */
    size_t max_response_bytes;          /* --max-response-bytes, default 256 MiB */
    size_t max_buffered_bytes;          /* --max-buffered-bytes, default 512 MiB (process) */
    size_t max_recv_buffer_bytes;       /* --max-recv-buffer-bytes, default 16 MiB per connection */
    uint32_t grpc_handshake_timeout_ms; /* --grpc-handshake-timeout, default 10s */
    uint32_t grpc_max_connection_idle_ms; /* --grpc-max-connection-idle, default 0 (never) */
    uint32_t grpc_keepalive_min_time_ms;  /* --grpc-keepalive-min-time, default 5s (etcd) */
    uint32_t grpc_keepalive_interval_ms;  /* --grpc-keepalive-interval, default 2h (etcd) */
    uint32_t grpc_keepalive_timeout_ms;   /* --grpc-keepalive-timeout, default 20s (etcd) */
    uint32_t send_stall_timeout_ms;       /* --send-stall-timeout, default 30s */
    size_t max_pending_request_bytes;     /* --max-pending-request-bytes, default 64 MiB */
    /* Watch (server/watch/watch_hub.h). */
    uint32_t max_watchers_per_stream;    /* --max-watchers-per-stream, default 10000 */
    uint32_t max_watch_streams_per_conn; /* --max-watch-streams-per-connection, default 1000 */
    /* Election and lock (api/conc_util.h). */
    uint32_t max_concurrency_waiters;    /* --max-concurrency-waiters, default 10000 */
    size_t watch_send_buffer_bytes;      /* --watch-send-buffer-bytes, default 1 MiB */
    uint32_t watch_progress_interval_ms; /* --watch-progress-notify-interval, default 10m */

    /* Auto-compaction (api/auto_compact.h). */
    char auto_compaction_mode[16];        /* --auto-compaction-mode periodic|revision */
    char auto_compaction_retention[32];   /* --auto-compaction-retention, "0" = off (default) */
    uint32_t auto_compaction_interval_ms; /* --auto-compaction-interval (kvd): revision mode's
                                             check period, default 5m as etcd's */
    uint32_t max_snapshots; /* --max-snapshots: Maintenance.Snapshot streams at once, default 2 */
    int unsafe_no_fsync;    /* --unsafe-no-fsync (etcd 3.5): LMDB MDB_NOSYNC; testing only */
    int experimental_wal;   /* --experimental-wal: the raft log in <data-dir>/wal */
    uint64_t wal_segment_bytes;  /* --wal-segment-bytes (0: 64 MiB) */
    uint64_t max_snapshot_bytes; /* --max-snapshot-bytes: largest raft snapshot received from a
                                    peer; 0 (default) = 2 x the LMDB map size of the quota */
    /* Cluster bounds of what peers can grow (docs/ARCHITECTURE.md, Bounds). */
    size_t max_raft_inbox_bytes;      /* --max-raft-inbox-bytes, default 64 MiB */
    uint32_t max_raft_inbox_messages; /* --max-raft-inbox-messages, default 4096 */
    uint32_t max_pending_read_index;  /* --max-pending-read-index, default 10000 */
    uint32_t max_forwarded_proposals; /* --max-forwarded-proposals, default 10000 */
    uint64_t max_raft_log_bytes;      /* --max-raft-log-bytes: retained raft log (0: a quarter
                                         of the quota's headroom in the LMDB map) */
    size_t peer_max_prio_queue_bytes; /* --peer-max-priority-queue-bytes: lease renewal frames
                                         per peer, sent ahead of raft traffic (4 MiB) */
    /* Strangers on the peer port (server/peer/README.md, "Who may connect"). */
    uint32_t peer_max_pending_conns;    /* --peer-max-pending-connections (16) */
    uint32_t peer_handshake_timeout_ms; /* --peer-handshake-timeout (1s) */
    /* TLS (server/net/tls.h), etcd's flags; "" = unset. */
    char cert_file[512];                /* --cert-file: client port certificate (PEM) */
    char key_file[512];                 /* --key-file */
    char trusted_ca_file[512];          /* --trusted-ca-file: CA of client certificates */
    int client_cert_auth;               /* --client-cert-auth: require a verified client cert */
    char peer_cert_file[512];           /* --peer-cert-file: peer port (server and client) cert */
    char peer_key_file[512];            /* --peer-key-file */
    char peer_trusted_ca_file[512];     /* --peer-trusted-ca-file: CA of the other members */
    int peer_client_cert_auth;          /* --peer-client-cert-auth: require a verified peer cert */
    int auto_tls;                       /* --auto-tls: self-signed client port cert (tls_auto.h) */
    int peer_auto_tls;                  /* --peer-auto-tls: self-signed peer cert (tls_auto.h) */
    uint32_t self_signed_cert_validity; /* --self-signed-cert-validity: years (1) */
    char client_crl_file[512];          /* --client-crl-file: revoked client certificates */
    char peer_crl_file[512];            /* --peer-crl-file: revoked peer certificates */
    char peer_cert_allowed_cn[256];     /* --peer-cert-allowed-cn: required peer certificate CN */
    char peer_cert_allowed_hostname[256]; /* --peer-cert-allowed-hostname */
    char cipher_suites[2048];             /* --cipher-suites: Go names, client and peer ports */
    int peer_auto_verify_off; /* set by kv_tls_auto_prepare: peers' self-signed certificates
                                 are not verified (etcd's peer auto TLS); not a flag */
    /* Corruption checks (docs/corruption.md). */
    int initial_corrupt_check;        /* --experimental-initial-corrupt-check (default false) */
    uint32_t corrupt_check_time_ms;   /* --experimental-corrupt-check-time (default 60 s; 0 off) */
    uint32_t malloc_trim_interval_ms; /* --malloc-trim-interval (default 1 s; 0 off;
                                         daemon/heap_trim.h) */
    /* Logging (log/log.h), etcd's --log-level and --log-outputs. */
    char log_level[16];    /* --log-level debug|info|warn|error (default info) */
    char log_format[16];   /* --log-format text|json (default text; json: etcd's zap lines) */
    char log_outputs[512]; /* --log-outputs stderr|stdout|FILE (default stderr) */
    /* etcd 3.4's deprecated --debug=true (default false): log_level "debug", whatever
     * --log-level says (etcd 3.4's default capnslog logger), and enable_pprof, as etcd 3.4's
     * Debug serves /debug/pprof/. Applied by kv_config_parse(). */
    int debug;
    /* --enable-grpc-gateway (true): false = the client URLs answer /v3/... with 404
     * (http/client_http.h no_gateway). */
    int enable_grpc_gateway;
    /* Auth (server/api/auth_srv.h). */
    char auth_token[1024];            /* --auth-token: "simple" (etcd's default) or "jwt,..." */
    uint32_t auth_token_ttl;          /* --auth-token-ttl: seconds a simple token lives (300) */
    uint32_t auth_hash_iterations;    /* --auth-hash-iterations: PBKDF2-SHA256 rounds (100000) */
    uint32_t auth_max_pending_hashes; /* --auth-max-pending-hashes: password hashes queued or
                                         running; beyond: "too many requests" (64) */
    uint32_t auth_max_tokens;         /* --auth-max-tokens: live simple tokens (100000) */
} kv_config;

void kv_config_default(kv_config *cfg);

/* Parses argv (argv[0] skipped). err (size errlen) receives a one-line message on error. */
int kv_config_parse(kv_config *cfg, int argc, char **argv, char *err, size_t errlen);
/* Replaces cfg's initial cluster with list ("name=url,name=url,..."): --initial-cluster's
 * parser. 0 or -EINVAL / -E2BIG with the reason in err. */
int kv_config_set_cluster(kv_config *cfg, const char *list, char *err, size_t errlen);

/* Parses "http://host:port", "https://host:port" (tls = 1) or "host:port". */
int kv_url_parse(kv_url *u, const char *text, char *err, size_t errlen);

const char *kv_config_usage(void);

/* 0 if --name is no kvd flag; KV_CONFIG_FILE_DURATION (config_file.h) if its value is a
 * duration; else KV_CONFIG_FILE_FLAG (1). */
int kv_config_flag_known(const char *name);

/* kv_config_parse() with the environment, as etcd: every flag --foo-bar
 * may also be set by KVD_FOO_BAR, or ETCD_FOO_BAR (migration from etcd; KVD_ wins). The
 * command line wins over the environment. Same returns as kv_config_parse(); a bad value
 * from the environment is reported with the variable's name. Not thread-safe (getenv).
 * With --config-file PATH (or KVD_CONFIG_FILE / ETCD_CONFIG_FILE), etcd's YAML file
 * (config_file.h) is the whole configuration: the other flags and variables are ignored, as
 * etcd 3.4 does (a warning says so when there were others). */
int kv_config_parse_env(kv_config *cfg, int argc, char **argv, char *err, size_t errlen);

#endif
