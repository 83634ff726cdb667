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
    char endpoint[32]; /* 127.0.0.1:<client_port> */
    kvt_proc proc;     /* proc.pid is 0 when not running; proc.stopped when SIGSTOP'd */
    kvt_proxy *proxy;  /* NULL for a 1-member cluster */
    uint64_t member_id;
    uint16_t metrics_port;  /* kvd: --listen-metrics-urls (etcd serves /metrics on client_port) */
    int existing;           /* next start: --initial-cluster-state=existing (re-added member) */
    const char *const *env; /* extra environment of the next start (NULL: none) */
} kv_fn_member;

/* --proxies N: gRPC proxies (`kvd grpc-proxy start`, or `etcd grpc-proxy start` for
 * --target etcd) in front of all members; the stressers talk to them (gproxy.c). */
#define KV_FN_MAX_PROXIES KV_FN_MAX_MEMBERS

typedef struct kv_fn_gproxy {
    char dir[PATH_MAX]; /* p<i>/ under the run directory: proxy.log */
    uint16_t port, metrics_port;
    char endpoint[32]; /* 127.0.0.1:<port> */
    kvt_proc proc;     /* proc.pid is 0 when not running */
} kv_fn_gproxy;

typedef struct kv_fn_cluster {
    kv_fn_target target;
    int n;
    char bin[PATH_MAX];
    char root[PATH_MAX]; /* run directory */
    int failpoints;      /* kvd started with --enable-failpoints */
    kv_fn_member m[KV_FN_MAX_MEMBERS];
    char start_error[512];          /* first line(s) of a member's log when it refused to start */
    uint64_t snapshot_count;        /* 0: server default; else --snapshot-count for every start */
    char ctl[PATH_MAX];             /* kvctl or etcdctl (snapshot save/restore) */
    struct kv_fn_watch_sink *watch; /* watch checker in/out (watch.c); NULL: no watchers */
    int n_proxies;                  /* 0: the stressers talk to the members */
    kv_fn_gproxy gp[KV_FN_MAX_PROXIES];
    /* --proxies: a relay (kvt_proxy) in front of each member's client port; the gRPC proxies
     * dial the members through them (the checkers do not), so a case can cut or delay the
     * links between the proxies and one member. NULL without proxies. */
    kvt_proxy *up[KV_FN_MAX_MEMBERS];
    uint16_t up_port[KV_FN_MAX_MEMBERS];
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

/* ---- gRPC proxies (gproxy.c) ---- */

/* Picks ports and creates <root>/p<i>/ for n proxies (0 <= n <= KV_FN_MAX_PROXIES); call
 * after kv_fn_cluster_init. */
int kv_fn_proxies_init(kv_fn_cluster *c, int n);
/* Starts proxy i (no-op when running): `<kvd> grpc-proxy start` or `etcd grpc-proxy start`,
 * --endpoints = every member's client URL. */
int kv_fn_proxy_start(kv_fn_cluster *c, int i);
/* Starts every proxy not running and waits (timeout_ms) until each serves a Range. */
int kv_fn_proxies_start(kv_fn_cluster *c, uint32_t timeout_ms);
/* kill -9 and reap every proxy, then stop the upstream relays (kv_fn_cluster_stop calls it). */
void kv_fn_proxies_stop(kv_fn_cluster *c);
/* The member whose upstream relay carried the most bytes over window_ms (the member the
 * proxies are using); 0 when none carried any. */
int kv_fn_proxies_busiest_upstream(kv_fn_cluster *c, uint32_t window_ms);
/* The endpoints a stresser client numbered `rot` dials, in order: the proxies when there are
 * any, else the members, rotated by rot so clients start on different ones. eps must hold
 * KV_FN_MAX_MEMBERS entries (pointers into c); returns the count. */
int kv_fn_client_endpoints(const kv_fn_cluster *c, int rot, const char **eps);

/* ---- stressers ---- */

typedef struct kv_fn_workload kv_fn_workload;

typedef struct kv_fn_workload_cfg {
    const kv_fn_cluster *cluster;
    const char *prefix;    /* keys live under <prefix>/ */
    int kv_clients;        /* register writers/readers */
    int keys;              /* registers */
    int lease_clients;     /* lease stressers (kept + abandoned leases) */
    int lease_lin_clients; /* lease-linearizability stressers (lease_lin.c's history) */
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
/* The lease-linearizability history (check.h kv_fn_ll_op), owned by w; after stop. */
struct kv_fn_ll_op;
void kv_fn_workload_lease_lin(kv_fn_workload *w, struct kv_fn_ll_op **ops, size_t *n);
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

/* ---- watch stresser and checker hook (watch.c) ---- */

#define KV_FN_MAX_WATCHERS 4

/* Set by main.c, filled by the workload when it stops (one case at a time). */
typedef struct kv_fn_watch_sink {
    int inject_drop;       /* in: --inject-bug drop-watch-event */
    int keep_all;          /* in: write <root>/<CASE>.watch even on success */
    const char *root;      /* in: run directory (NULL: no file) */
    int checked;           /* out: the watch checker ran for this case */
    kv_fn_verdict verdict; /* out */
    char report[4096];     /* out */
    char path[PATH_MAX];   /* out: the .watch file written ("" if none) */
} kv_fn_watch_sink;

typedef struct kv_fn_watchers kv_fn_watchers;

/* Opens one client per member, reads the current revision R and creates n watchers on the
 * keys starting with prefix, watcher i on member i mod members, from R + 1. */
int kv_fn_watchers_start(kv_fn_watchers **out, const kv_fn_cluster *c, const char *prefix, int n,
                         uint64_t seed);
/* Puts a fence on <prefix><fence_key> (fence_ops[] receives its attempts, at most
 * 3 x members; *final_rev its revision or 0), waits up to timeout_ms until every watcher
 * delivered it, then cancels the watchers. -ENOSPC: the log was cut. */
int kv_fn_watchers_stop(kv_fn_watchers *s, int fence_key, uint32_t timeout_ms, kv_fn_op *fence_ops,
                        size_t *n_fence_ops, int64_t *final_rev);
/* The watchers' records (owned by s). */
void kv_fn_watchers_log(kv_fn_watchers *s, kv_fn_watch_ev **evs, size_t *n);
void kv_fn_watchers_free(kv_fn_watchers *s);
/* Runs the watch checker on ops (the full KV history, fence included) and fills sink;
 * writes <root>/<case_name>.watch when the verdict is not PASS (or keep_all). */
void kv_fn_watch_finish(kv_fn_watchers *s, kv_fn_watch_sink *sink, const char *case_name,
                        const kv_fn_op *ops, size_t n_ops, int64_t final_rev, int stop_rc);
/* .watch files: a history file (op lines) plus "wev" records and the final revision. */
int kv_fn_watch_file_write(const char *path, const kv_fn_op *ops, size_t n_ops,
                           const kv_fn_watch_ev *evs, size_t n_evs, int64_t final_rev);
/* kvfunctional --check-watch FILE: prints the verdict; 0 when it passes. */
int kv_fn_watch_file_check(const char *path, int inject);

#endif
