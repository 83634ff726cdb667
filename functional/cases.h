/* cases: the fault cases of the functional suite and how one is run (see README.md). */
#ifndef KV_FN_CASES_H
#define KV_FN_CASES_H

#include "fn.h"
#include "leaseload.h"

typedef enum {
    KV_FN_F_NONE,
    KV_FN_F_SIGTERM,
    KV_FN_F_SIGKILL,
    KV_FN_F_SIGSTOP,
    KV_FN_F_BLACKHOLE,
    KV_FN_F_DELAY,
    KV_FN_F_RANDOM_DELAY,
    KV_FN_F_FAILPOINT_STALL,
    KV_FN_F_MOVE_LEADER,
    KV_FN_F_SIGQUIT_REMOVE,       /* SIGQUIT, wipe, MemberRemove; MemberAdd + join existing */
    KV_FN_F_RESTORE_SNAPSHOT,     /* leader snapshot, SIGQUIT a quorum, restore all from it */
    KV_FN_F_POWERCUT,             /* SIGKILL + drop unsynced writes (tests/crash shim), restart */
    KV_FN_F_FAILPOINT_SLOW_FSYNC, /* kvd disk failpoint: slow fsync on (SIGRTMIN+1), then off */
    KV_FN_F_FAILPOINT_FSYNC_EIO,  /* kvd disk failpoint: next fsync fails (SIGRTMIN+2): the member
                                   * stops; restarted after the hold */
    KV_FN_F_SIGKILL_PROXY,        /* --proxies: kill -9 one gRPC proxy, restart it after the hold */
    KV_FN_F_SIGSTOP_PROXY,        /* --proxies: SIGSTOP one gRPC proxy, SIGCONT after the hold */
    KV_FN_F_SIGKILL_ALL_PROXIES,  /* --proxies: kill -9 every gRPC proxy at once, restart them
                                   * after the hold; the clients come back through them */
    KV_FN_F_BLACKHOLE_UPSTREAM,   /* --proxies: blackhole the links from every gRPC proxy to the
                                   * member they use (its upstream relay, fn.h) */
    KV_FN_F_DELAY_UPSTREAM,       /* --proxies: the same links delayed 1 s each way */
} kv_fn_fault;

typedef enum {
    KV_FN_T_NONE,
    KV_FN_T_ONE_FOLLOWER,
    KV_FN_T_LEADER,
    KV_FN_T_QUORUM,
    KV_FN_T_ALL
} kv_fn_sel;

typedef struct kv_fn_case {
    const char *name;
    kv_fn_fault fault;
    kv_fn_sel sel;
    int quick;          /* part of the quick profile */
    int no_stress;      /* NO_FAIL_WITH_NO_STRESS_FOR_LIVENESS */
    int until_snapshot; /* _UNTIL_TRIGGER_SNAPSHOT: hold until the raft index advanced enough
                         * that the faulted member must catch up by a snapshot */
} kv_fn_case;

/* kvd's disk failpoints (server/node/disk_failpoint.h): the runner starts kvd with
 * KVD_FAILPOINT_FSYNC_DELAY_MS=KV_FN_SLOW_FSYNC_MS and KVD_FAILPOINT_FSYNC_EIO=1 (both off until
 * signalled). */
#define KV_FN_SLOW_FSYNC_MS 200
/* kvd's peer delay failpoint (server/peer/peer_delay.h), D[,J] ms: the runner starts kvd with
 * KVD_FAILPOINT_PEER_DELAY_MS / _RANDOM_DELAY_MS set to these (off until signalled). */
#define KV_FN_PEER_DELAY "1000"
#define KV_FN_PEER_RANDOM_DELAY "600,500"

/* --snapshot-count the runner passes when a selected case is _UNTIL_TRIGGER_SNAPSHOT. */
#define KV_FN_SNAPSHOT_COUNT 200

extern const kv_fn_case kv_fn_cases[];
extern const size_t kv_fn_n_cases;

typedef enum {
    KV_FN_INJECT_NONE,
    KV_FN_INJECT_STALE_READ,
    KV_FN_INJECT_LEASE_VANISH,
    KV_FN_INJECT_LEASE_OUTLIVE,
    KV_FN_INJECT_LEASE_LAG,         /* a TimeToLive(keys) answered by a lessor one batch behind */
    KV_FN_INJECT_LEASE_STALE_RENEW, /* a renewal after a revoke answered from a stale map */
} kv_fn_inject;

typedef struct kv_fn_run_opts {
    uint64_t seed;
    uint32_t pre_ms, hold_ms, post_ms, live_bound_ms, lin_budget_ms;
    int64_t lease_slack_us;
    kv_fn_inject inject;
    int keep_all;
    const char *root;
    uint32_t trigger_bound_ms;  /* _UNTIL_TRIGGER_SNAPSHOT: longest hold (0: 120 s) */
    int lease_load;             /* leases kept alive during each case (0: none) */
    const char *powercut_lib;   /* libkvd_powercut.so (NULL: POWERCUT cases skip) */
    kv_fn_leaseload *leaseload; /* --lease-load: kept alive across the run (NULL: none) */
} kv_fn_run_opts;

typedef enum { KV_FN_RES_PASS, KV_FN_RES_FAIL, KV_FN_RES_SKIP } kv_fn_result;

/* Reason a case cannot run on this cluster (NULL: it can). */
const char *kv_fn_case_skip_reason(const kv_fn_case *k, const kv_fn_cluster *c);

/* Runs one case on a running cluster; prints its line to stdout. */
kv_fn_result kv_fn_case_run(const kv_fn_case *k, kv_fn_cluster *c, const kv_fn_run_opts *o);

/* Runs the checkers on a history file and prints the verdicts; 0 if all pass. */
int kv_fn_check_file(const char *path, const kv_fn_run_opts *o);

#endif
