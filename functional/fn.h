/*
 * fn: internals of the kvfunctional runner (cluster of processes, peer proxies, stressers).
 * Not a library API: every struct is owned by main.c's run state and passed explicitly.
 * Threads: a proxy runs its own thread (fault settings are guarded by its mutex); the
 * stressers run their own threads and append to their own history buffers; everything else
 * runs on the main thread.
 */
#ifndef KV_FN_H
#define KV_FN_H

#include "check.h"
#include "kvt_proc.h"
#include "kvt_proxy.h"

#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>

int64_t kv_fn_now_us(void);

/* ---- proxy: kvt_proxy (tests/lib/kvt_proxy.h), one in front of each member's peer port ---- */

/* ---- cluster ---- */

typedef enum { KV_FN_TARGET_KVD = 0, KV_FN_TARGET_ETCD = 1 } kv_fn_target;

#define KV_FN_MAX_MEMBERS 5

typedef struct kv_fn_member {
    int idx;
    char name[16];
    char dir[PATH_MAX]; /* member directory: data/ and member.log */
    uint16_t client_port, peer_port, proxy_port;
    char endpoint[32];  /* 127.0.0.1:<client_port> */
    kvt_proc proc;    /* proc.pid is 0 when not running; proc.stopped when SIGSTOP'd */
    kvt_proxy *proxy; /* NULL for a 1-member cluster */
    uint64_t member_id;
    uint16_t metrics_port; /* kvd: --listen-metrics-urls (etcd serves /metrics on client_port) */
    int existing;          /* next start: --initial-cluster-state=existing (re-added member) */
    const char *const *env; /* extra environment of the next start (NULL: none) */
} kv_fn_member;

typedef struct kv_fn_cluster {
    kv_fn_target target;
    int n;
    char bin[PATH_MAX];
    char root[PATH_MAX]; /* run directory */
    int failpoints;      /* kvd started with --enable-failpoints */
    kv_fn_member m[KV_FN_MAX_MEMBERS];
    char start_error[512]; /* first line(s) of a member's log when it refused to start */
    uint64_t snapshot_count; /* 0: server default; else --snapshot-count for every start */
    char ctl[PATH_MAX];      /* kvctl or etcdctl (snapshot save/restore) */
} kv_fn_cluster;

/* Resolves the binary, picks ports, creates <root>/m<i>/. */
int kv_fn_cluster_init(kv_fn_cluster *c, kv_fn_target t, int n, const char *root, uint64_t seed);
/* Starts every member and waits (timeout_ms) until each answers Status and a leader is
 * known. -ENOTSUP with c->start_error filled when a member exits at once. */
int kv_fn_cluster_start(kv_fn_cluster *c, uint32_t timeout_ms);
int kv_fn_member_start(kv_fn_cluster *c, int i);
/* Signals: SIGKILL/SIGTERM reap the process (SIGTERM waits up to 10 s then SIGKILL). */
int kv_fn_member_signal(kv_fn_cluster *c, int i, int sig);
void kv_fn_cluster_stop(kv_fn_cluster *c);
/* Index of the current leader (by Maintenance.Status of the running members), -1 if none. */
int kv_fn_cluster_leader(kv_fn_cluster *c, uint32_t timeout_ms);
/* Waits until a Put through any member succeeds; returns ms waited or negative. */
int kv_fn_cluster_wait_writable(kv_fn_cluster *c, uint32_t timeout_ms);
/* Maintenance.MoveLeader sent to member `from` (the leader) with member `to` as target. */
int kv_fn_cluster_move_leader(kv_fn_cluster *c, int from, int to, uint32_t timeout_ms);
/* HashKV of every member at one revision. */
int kv_fn_cluster_hash(kv_fn_cluster *c, kv_fn_hash_obs *obs, uint32_t timeout_ms);

/* Member changes, snapshots, metrics: cluster.c, declared in fncluster.h. */

/* ---- stressers ---- */

typedef struct kv_fn_workload kv_fn_workload;

typedef struct kv_fn_workload_cfg {
    const kv_fn_cluster *cluster;
    const char *prefix; /* keys live under <prefix>/ */
    int kv_clients;     /* register writers/readers */
    int keys;           /* registers */
    int lease_clients;  /* lease stressers (kept + abandoned leases) */
    int64_t lease_ttl_s;
    uint32_t op_timeout_ms;
    uint64_t seed;
} kv_fn_workload_cfg;

int kv_fn_workload_start(kv_fn_workload **out, const kv_fn_workload_cfg *cfg);
/* Stops the threads and collects the histories (owned by the workload until free). */
void kv_fn_workload_stop(kv_fn_workload *w);
void kv_fn_workload_history(kv_fn_workload *w, const kv_fn_op **ops, size_t *n_ops,
                            const kv_fn_lease_info **leases, size_t *n_leases,
                            const kv_fn_lease_ev **lev, size_t *n_lev);
/* ops that succeeded / failed so far (thread-safe). */
void kv_fn_workload_counts(kv_fn_workload *w, uint64_t *ok, uint64_t *failed);
void kv_fn_workload_free(kv_fn_workload *w);

/* History files: one record per line, text; read back by --check-history. */
int kv_fn_history_write(const char *path, const kv_fn_op *ops, size_t n_ops,
                        const kv_fn_lease_info *leases, size_t n_leases, const kv_fn_lease_ev *lev,
                        size_t n_lev, const kv_fn_window *w, size_t n_w);
int kv_fn_history_read(const char *path, kv_fn_op **ops, size_t *n_ops, kv_fn_lease_info **leases,
                       size_t *n_leases, kv_fn_lease_ev **lev, size_t *n_lev, kv_fn_window **w,
                       size_t *n_w);

#endif
