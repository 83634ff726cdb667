/*
 * cluster: starts an N-member etcd or kvd cluster on loopback for the cluster benchmark,
 * every member with etcd's flags (--name --data-dir --listen-client-urls
 * --advertise-client-urls --listen-peer-urls --initial-advertise-peer-urls
 * --listen-metrics-urls --initial-cluster --initial-cluster-state new
 * --initial-cluster-token), free ports, and fresh data dirs under one mkdtemp directory.
 * Observes it: Prometheus metrics summed over members, RSS per member, and the TCP
 * connections established to the members' peer ports (`ss -tn`).
 * Peer URLs are http:// unless kv_bc_cluster_start_tls() is given a certificate directory
 * (peer TLS): then https:// with etcd's --peer-cert-file, --peer-key-file,
 * --peer-trusted-ca-file and --peer-client-cert-auth (client and metrics URLs stay http).
 *
 * Members are started with tests/lib's launcher (kvt_proc: log file, own process group,
 * PR_SET_PDEATHSIG(SIGKILL), bounded waits); the directory is a kvt_tmpdir. Not kvt_cluster:
 * that fixture puts a TCP proxy in front of every member's peer port (for partitions), which
 * would add a hop and proxy threads to the figures measured here (CPU, latency, peer
 * connections counted on the members' peer ports) and it starts members with the tests'
 * short heartbeat/election timeouts and kvd failpoints; the benches run plain members.
 *
 * Contract:
 * - Single-threaded: a kv_bc_cluster is used by one thread at a time (the peer-connection
 *   sampler in clusterbench.c locks around kv_bc_peer_sample).
 * - Every operation is bounded in time; children get PR_SET_PDEATHSIG(SIGKILL).
 * - Functions return 0 or a negative errno-style code.
 * - kv_bc_cluster_destroy() stops the members and removes the directory (unless
 *   KV_TEST_KEEP_DIRS is set); it is safe on a cluster whose start failed.
 */
#ifndef KV_BENCH_CLUSTER_H
#define KV_BENCH_CLUSTER_H

#include "harness.h"
#include "kvt_proc.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define KV_BC_MAX_MEMBERS 5
#define KV_BC_MAX_EXTRA 16
#define KV_BC_MAX_CONNS 4096 /* distinct peer connections remembered per cluster */

typedef struct kv_bc_member {
    char name[16];
    uint16_t client_port, peer_port, metrics_port;
    char endpoint[64]; /* "127.0.0.1:<client_port>" */
    char data_dir[1100];
    char log_path[1100];
    kvt_proc proc; /* the member process; proc.pid 0 when not running */
} kv_bc_member;

typedef struct kv_bc_cluster {
    kv_it_kind kind;
    char bin[PATH_MAX];
    char dir[1024]; /* the run directory (a kvt_tmpdir: $TMPDIR/kvbc-<kind>.XXXXXX) */
    /* Peer TLS: directory of tests/tls/gen_certs.sh's output (ca.pem, server.pem,
     * server-key.pem; owned by the caller, not removed here); "" = plain http peers. */
    char peer_cert_dir[1024];
    int n;
    kv_bc_member m[KV_BC_MAX_MEMBERS];
    const char *endpoints[KV_BC_MAX_MEMBERS]; /* m[i].endpoint, for kv_bench_params */
    pid_t pids[KV_BC_MAX_MEMBERS];
    /* Peer connections seen by kv_bc_peer_sample: (server port << 16 | client port). */
    uint32_t conns[KV_BC_MAX_CONNS];
    int n_conns;          /* distinct connections seen */
    int conns_overflow;   /* more than KV_BC_MAX_CONNS distinct connections */
    int max_established;  /* largest count in one sample */
    int last_established; /* count in the last sample */
    int samples;          /* successful samples */
} kv_bc_cluster;

/* Starts n (1..KV_BC_MAX_MEMBERS) members of kind (extra: NULL or more flags for every
 * member, split on blanks, at most KV_BC_MAX_EXTRA words) and waits until every member answers a
 * linearizable Range (so the cluster has a leader), for at most timeout_ms. On failure the
 * members are killed and why[] holds a one-line reason (with the first log lines of a
 * member that exited); the caller still calls kv_bc_cluster_destroy. */
int kv_bc_cluster_start(kv_bc_cluster *c, kv_it_kind kind, int n, const char *extra,
                        uint32_t timeout_ms, char *why, size_t why_cap);

/* kv_bc_cluster_start with https:// peer URLs when peer_cert_dir is not NULL: every member
 * gets --peer-cert-file=<dir>/server.pem --peer-key-file=<dir>/server-key.pem
 * --peer-trusted-ca-file=<dir>/ca.pem --peer-client-cert-auth (the layout of
 * tests/tls/gen_certs.sh, whose server certificate is also a client certificate for
 * 127.0.0.1). The caller makes the certificates and removes them after
 * kv_bc_cluster_destroy. NULL: the same as kv_bc_cluster_start. */
int kv_bc_cluster_start_tls(kv_bc_cluster *c, kv_it_kind kind, int n, const char *extra,
                            const char *peer_cert_dir, uint32_t timeout_ms, char *why,
                            size_t why_cap);

/* Index of the member that is the leader by its own Status (leader == its member id), or
 * -ENOENT when no member says so (for instance during an election). */
int kv_bc_leader(const kv_bc_cluster *c);

/* Stops every member (SIGTERM, then SIGKILL after 5 s) and removes the directory (kept with
 * KV_TEST_KEEP_DIRS=1). */
void kv_bc_cluster_destroy(kv_bc_cluster *c);

/* 1 if the server at 127.0.0.1:port answers a linearizable Range within ~1.5 s (a member, or
 * a grpc-proxy in front of one), with its gRPC status in *status; else 0. */
int kv_bc_answers_range(uint16_t port, int *status);

/* Number of members still running. */
int kv_bc_cluster_alive(kv_bc_cluster *c);

/* Sum over members of every sample of metric `name` (kv_it_metric_sum). -ENOENT if no
 * member exports it, other negative codes if a member's /metrics could not be fetched. */
int kv_bc_metric_sum(const kv_bc_cluster *c, const char *name, double *sum);

/* Counts the TCP connections ESTABLISHED to the members' peer ports (`ss -tnH state
 * established`), updating max_established / last_established and the set of distinct
 * connections. Returns the count, or a negative code if ss could not be run. */
int kv_bc_peer_sample(kv_bc_cluster *c);

#endif
