/*
 * kvt_cluster: a cluster of kvd or etcd member processes on 127.0.0.1 for tests, each member
 * behind a TCP proxy (kvt_proxy) for its PEER port, so a member can be partitioned.
 *
 * Target: kvt_target_from_env() reads KV_TEST_SERVER=etcd|kvd (default kvd). Binaries: kvd at
 * $KV_KVD_BIN, else $KV_BUILD_DIR/server/kvd, else build/server/kvd; etcd at $KV_ETCD_BIN,
 * else /usr/bin/etcd; etcdctl at $KV_ETCDCTL_BIN, else /usr/bin/etcdctl.
 * Both targets get etcd's flags (--name m<i> --data-dir --listen-client-urls
 * --advertise-client-urls --listen-peer-urls --initial-advertise-peer-urls <proxy>
 * --initial-cluster --initial-cluster-state --initial-cluster-token --heartbeat-interval
 * --election-timeout [--snapshot-count] --listen-metrics-urls); kvd also gets
 * --enable-failpoints, etcd gets --pre-vote=true (kvd always pre-votes).
 * Partition: kvd: SIGUSR2 toggles peer isolation (failpoint); etcd: the member's own proxy
 * drops both directions and every other proxy drops the connections it dialed
 * (X-Server-From, see kvt_proxy.h).
 *
 * Ownership: kvt_cluster is a caller-owned struct (may live on the stack); destroy it with
 * kvt_cluster_destroy(), which kills every member, stops the proxies and removes the run
 * directory (kept with KV_TEST_KEEP_DIRS=1). Threads: one thread drives a cluster; the proxies run
 * their own threads. Every call is bounded by its timeout. Functions return 0 or a negative
 * errno; gRPC calls return KVT_GRPC_ERR (1) when the server answered with an error status,
 * with its grpc-message copied to err.
 */
#ifndef KVT_CLUSTER_H
#define KVT_CLUSTER_H

#include "kvt_proc.h"
#include "kvt_proxy.h"
#include "kvt_util.h"

#include <limits.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

typedef enum { KV_TEST_SERVER_KVD = 0, KV_TEST_SERVER_ETCD = 1 } kvt_target;

#define KVT_MAX_MEMBERS 7
#define KVT_GRPC_ERR 1

kvt_target kvt_target_from_env(void);
const char *kvt_target_name(kvt_target t);

typedef struct kvt_cluster_opts {
    kvt_target target;
    int n;                       /* initial members, 1..KVT_MAX_MEMBERS */
    uint32_t heartbeat_ms;       /* --heartbeat-interval (default 50) */
    uint32_t election_ms;        /* --election-timeout (default 500) */
    uint64_t snapshot_count;     /* --snapshot-count, 0: server default */
    const char *token;           /* --initial-cluster-token (default "kvt") */
    uint64_t seed;               /* proxy jitter seed */
    const char *const *kvd_args; /* (addition) NULL-terminated extra flags for kvd members */
    int peer_https;              /* (addition) peer URLs are https:// (the TLS flags go in
                                    kvd_args); the proxies pass TLS through untouched */
} kvt_cluster_opts;

/* Defaults for n members with the target from the environment. */
void kvt_cluster_opts_default(kvt_cluster_opts *o, int n);

typedef struct kvt_member {
    int idx;
    char name[16]; /* m<idx> */
    char dir[PATH_MAX];
    char data_dir[PATH_MAX];
    uint16_t client_port, peer_port, proxy_port, metrics_port;
    char endpoint[32];   /* 127.0.0.1:<client_port> */
    char client_url[48]; /* http://127.0.0.1:<client_port> */
    char peer_url[48];   /* advertised peer URL: http://127.0.0.1:<proxy_port> */
    kvt_proc proc;
    kvt_proxy *proxy;
    uint64_t id;     /* member id, 0 until learned from Status */
    int in_config;   /* part of the cluster configuration (listed in --initial-cluster) */
    int join;        /* start with --initial-cluster-state existing */
    int partitioned; /* kvt_member_partition(on) in effect */
    /* Extra environment ("NAME=value", NULL-terminated, borrowed; NULL: none) given to every
     * kvt_member_start of this member while set (e.g. LD_PRELOAD for a crash test's shim;
     * the caller sets it around one start and clears it). */
    const char *const *env;
    /* (addition) extra kvd flags for this member only, after kvd_args (so they
     * override them); NULL-terminated, borrowed; NULL: none. */
    const char *const *args;
    /* The unary calls' connection to client_port (kvt_put, kvt_get, kvt_member_status...):
     * reused while the member lives, so a loop of calls does not pay a TCP and HTTP/2
     * handshake each (private; see conn_take in kvt_cluster.c). */
    pthread_mutex_t conn_mu;
    struct kv_it_grpc *conn;
    uint16_t conn_port;
} kvt_member;

typedef struct kvt_cluster {
    kvt_cluster_opts o;
    int n; /* slots in use (initial members plus added ones) */
    char bin[PATH_MAX];
    char ctl[PATH_MAX];
    kvt_tmpdir root;
    kvt_member m[KVT_MAX_MEMBERS];
} kvt_cluster;

typedef struct kvt_status {
    uint64_t id, leader, term, index, applied;
    int64_t revision;
    int learner;
} kvt_status;

/* Resolves the binaries, creates the run directory, picks ports, starts the proxies.
 * -ENOENT if the server binary is missing. Starts nothing. */
int kvt_cluster_init(kvt_cluster *c, const kvt_cluster_opts *o);
/* Starts every configured member, then waits (timeout_ms) for a leader, a successful Put and
 * every member answering Status. A member that exits because one of its ports was taken
 * meanwhile is moved to new ports (its peer URL, the proxy, stays) and started again;
 * -ECHILD if a member exited otherwise (its log is printed to stderr). */
int kvt_cluster_start(kvt_cluster *c, uint32_t timeout_ms);
void kvt_cluster_destroy(kvt_cluster *c);

/* Reserves a new slot for a member to be added (ports, proxy, directory) with in_config=0 and
 * join=1; *idx receives its index. The caller adds it (etcdctl member add), sets in_config
 * and starts it. */
int kvt_cluster_add_slot(kvt_cluster *c, int *idx);

int kvt_member_start(kvt_cluster *c, int i); /* spawn only */
int kvt_member_running(kvt_cluster *c, int i);
/* Waits until member i answers Maintenance.Status. */
int kvt_member_wait_ready(kvt_cluster *c, int i, uint32_t timeout_ms);
int kvt_member_kill9(kvt_cluster *c, int i);
int kvt_member_stop(kvt_cluster *c, int i, uint32_t grace_ms); /* SIGTERM, then SIGKILL */
/* kill -9 (if running), start, wait ready. */
int kvt_member_restart(kvt_cluster *c, int i, uint32_t timeout_ms);
int kvt_member_pause(kvt_cluster *c, int i);
int kvt_member_resume(kvt_cluster *c, int i);
/* Cuts (on=1) or heals (on=0) member i's peer traffic both ways. */
int kvt_member_partition(kvt_cluster *c, int i, int on);
/* Log of member i (malloc'd, caller frees); the last max_bytes at most. */
int kvt_member_log(const kvt_cluster *c, int i, size_t max_bytes, char **out);

/* Maintenance.Status of member i (learns m[i].id). */
int kvt_member_status(kvt_cluster *c, int i, kvt_status *st, uint32_t timeout_ms);
/* Index of the member with id (learning ids through Status), -1 if none. */
int kvt_cluster_index_of(kvt_cluster *c, uint64_t id);
/* One look: the member that a running member names as leader AND that itself says it is
 * the leader; -1 if none. */
int kvt_cluster_leader(kvt_cluster *c);
/* Polls until kvt_cluster_leader() >= 0; returns the leader's index, *waited_ms (optional)
 * the time taken; -ETIMEDOUT. */
int kvt_cluster_wait_leader(kvt_cluster *c, uint32_t timeout_ms, uint64_t *waited_ms);
/* Polls until a Put through some running member succeeds; returns ms waited or -ETIMEDOUT. */
int kvt_cluster_wait_writable(kvt_cluster *c, uint32_t timeout_ms);

/* KV through member i. *rev (optional) receives the response header revision. */
int kvt_put(kvt_cluster *c, int i, const char *key, const char *val, uint32_t timeout_ms,
            int64_t *rev, char *err, size_t err_cap);
/* Range of one key. *found = 0/1; val (NUL-terminated, truncated to val_cap). */
int kvt_get(kvt_cluster *c, int i, const char *key, int serializable, uint32_t timeout_ms,
            char *val, size_t val_cap, int *found, int64_t *rev, char *err, size_t err_cap);
/* KV.Compact at rev (physical=1). */
int kvt_compact(kvt_cluster *c, int i, int64_t rev, uint32_t timeout_ms, char *err, size_t err_cap);
/* Maintenance.HashKV of member i at rev. */
int kvt_member_hash(kvt_cluster *c, int i, int64_t rev, uint32_t timeout_ms, uint32_t *hash,
                    char *err, size_t err_cap);
/* HashKV of every running member at one revision (the latest, read linearizably through
 * member `via`): hashes[i] for running members (0 for others), retried until each member
 * has applied it or timeout_ms passes (-ETIMEDOUT). *rev receives the revision. */
int kvt_cluster_hash(kvt_cluster *c, int via, uint32_t *hashes, int64_t *rev, uint32_t timeout_ms);
/* Maintenance.MoveLeader sent to the current leader with member `to` as target. */
int kvt_cluster_move_leader(kvt_cluster *c, int to, uint32_t timeout_ms, char *err, size_t err_cap);

/* Runs etcdctl (ETCDCTL_API=3) with --endpoints=<member i> (i < 0: every running member
 * in the configuration)
 * and the NULL-terminated arguments. */
int kvt_ctl(kvt_cluster *c, int i, uint32_t timeout_ms, kvt_cmd_result *res, ...);

/* Prints every member's Status and the tail of each running member's log to stderr (for a
 * failing test's diagnosis). */
void kvt_cluster_dump(kvt_cluster *c);

/* GET /metrics of member i (body malloc'd, caller frees). */
int kvt_member_metrics(kvt_cluster *c, int i, char **body);

#endif
