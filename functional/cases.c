/* cases: the case table and the run of one case (cases.h). */
#include "cases.h"
#include "fncluster.h"

#include "kvclient.h"
#ifdef KV_FN_HAVE_POWERCUT
#include "pcjournal.h"
#endif

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define C(name, f, s, q)                                                                           \
    {                                                                                              \
        name, f, s, q, 0, 0                                                                        \
    }
#define CS(name, f, s)                                                                             \
    {                                                                                              \
        name, f, s, 0, 0, 1                                                                        \
    }
const kv_fn_case kv_fn_cases[] = {
    C("NO_FAIL_WITH_STRESS", KV_FN_F_NONE, KV_FN_T_NONE, 1),
    {"NO_FAIL_WITH_NO_STRESS_FOR_LIVENESS", KV_FN_F_NONE, KV_FN_T_NONE, 0, 1, 0},
    C("SIGTERM_ONE_FOLLOWER", KV_FN_F_SIGTERM, KV_FN_T_ONE_FOLLOWER, 1),
    CS("SIGTERM_ONE_FOLLOWER_UNTIL_TRIGGER_SNAPSHOT", KV_FN_F_SIGTERM, KV_FN_T_ONE_FOLLOWER),
    C("SIGTERM_LEADER", KV_FN_F_SIGTERM, KV_FN_T_LEADER, 1),
    CS("SIGTERM_LEADER_UNTIL_TRIGGER_SNAPSHOT", KV_FN_F_SIGTERM, KV_FN_T_LEADER),
    C("SIGTERM_QUORUM", KV_FN_F_SIGTERM, KV_FN_T_QUORUM, 0),
    C("SIGTERM_ALL", KV_FN_F_SIGTERM, KV_FN_T_ALL, 1),
    C("SIGQUIT_AND_REMOVE_ONE_FOLLOWER", KV_FN_F_SIGQUIT_REMOVE, KV_FN_T_ONE_FOLLOWER, 1),
    CS("SIGQUIT_AND_REMOVE_ONE_FOLLOWER_UNTIL_TRIGGER_SNAPSHOT", KV_FN_F_SIGQUIT_REMOVE,
       KV_FN_T_ONE_FOLLOWER),
    C("SIGQUIT_AND_REMOVE_LEADER", KV_FN_F_SIGQUIT_REMOVE, KV_FN_T_LEADER, 0),
    CS("SIGQUIT_AND_REMOVE_LEADER_UNTIL_TRIGGER_SNAPSHOT", KV_FN_F_SIGQUIT_REMOVE, KV_FN_T_LEADER),
    C("SIGQUIT_AND_REMOVE_QUORUM_AND_RESTORE_LEADER_SNAPSHOT_FROM_SCRATCH",
      KV_FN_F_RESTORE_SNAPSHOT, KV_FN_T_QUORUM, 1),
    C("SIGKILL_ONE_FOLLOWER", KV_FN_F_SIGKILL, KV_FN_T_ONE_FOLLOWER, 0),
    C("SIGKILL_LEADER", KV_FN_F_SIGKILL, KV_FN_T_LEADER, 1),
    C("SIGKILL_QUORUM", KV_FN_F_SIGKILL, KV_FN_T_QUORUM, 1),
    C("SIGKILL_ALL", KV_FN_F_SIGKILL, KV_FN_T_ALL, 0),
    C("SIGSTOP_ONE_FOLLOWER", KV_FN_F_SIGSTOP, KV_FN_T_ONE_FOLLOWER, 0),
    C("SIGSTOP_LEADER_LONGER_THAN_ELECTION", KV_FN_F_SIGSTOP, KV_FN_T_LEADER, 1),
    C("BLACKHOLE_PEER_PORT_TX_RX_ONE_FOLLOWER", KV_FN_F_BLACKHOLE, KV_FN_T_ONE_FOLLOWER, 1),
    CS("BLACKHOLE_PEER_PORT_TX_RX_ONE_FOLLOWER_UNTIL_TRIGGER_SNAPSHOT", KV_FN_F_BLACKHOLE,
       KV_FN_T_ONE_FOLLOWER),
    C("BLACKHOLE_PEER_PORT_TX_RX_LEADER", KV_FN_F_BLACKHOLE, KV_FN_T_LEADER, 1),
    CS("BLACKHOLE_PEER_PORT_TX_RX_LEADER_UNTIL_TRIGGER_SNAPSHOT", KV_FN_F_BLACKHOLE,
       KV_FN_T_LEADER),
    C("BLACKHOLE_PEER_PORT_TX_RX_QUORUM", KV_FN_F_BLACKHOLE, KV_FN_T_QUORUM, 0),
    C("BLACKHOLE_PEER_PORT_TX_RX_ALL", KV_FN_F_BLACKHOLE, KV_FN_T_ALL, 0),
    C("DELAY_PEER_PORT_TX_RX_ONE_FOLLOWER", KV_FN_F_DELAY, KV_FN_T_ONE_FOLLOWER, 0),
    CS("DELAY_PEER_PORT_TX_RX_ONE_FOLLOWER_UNTIL_TRIGGER_SNAPSHOT", KV_FN_F_DELAY,
       KV_FN_T_ONE_FOLLOWER),
    C("DELAY_PEER_PORT_TX_RX_LEADER", KV_FN_F_DELAY, KV_FN_T_LEADER, 1),
    CS("DELAY_PEER_PORT_TX_RX_LEADER_UNTIL_TRIGGER_SNAPSHOT", KV_FN_F_DELAY, KV_FN_T_LEADER),
    C("DELAY_PEER_PORT_TX_RX_QUORUM", KV_FN_F_DELAY, KV_FN_T_QUORUM, 0),
    C("DELAY_PEER_PORT_TX_RX_ALL", KV_FN_F_DELAY, KV_FN_T_ALL, 0),
    C("RANDOM_DELAY_PEER_PORT_TX_RX_ONE_FOLLOWER", KV_FN_F_RANDOM_DELAY, KV_FN_T_ONE_FOLLOWER, 0),
    CS("RANDOM_DELAY_PEER_PORT_TX_RX_ONE_FOLLOWER_UNTIL_TRIGGER_SNAPSHOT", KV_FN_F_RANDOM_DELAY,
       KV_FN_T_ONE_FOLLOWER),
    C("RANDOM_DELAY_PEER_PORT_TX_RX_LEADER", KV_FN_F_RANDOM_DELAY, KV_FN_T_LEADER, 0),
    CS("RANDOM_DELAY_PEER_PORT_TX_RX_LEADER_UNTIL_TRIGGER_SNAPSHOT", KV_FN_F_RANDOM_DELAY,
       KV_FN_T_LEADER),
    C("RANDOM_DELAY_PEER_PORT_TX_RX_QUORUM", KV_FN_F_RANDOM_DELAY, KV_FN_T_QUORUM, 0),
    C("RANDOM_DELAY_PEER_PORT_TX_RX_ALL", KV_FN_F_RANDOM_DELAY, KV_FN_T_ALL, 0),
    C("FAILPOINTS", KV_FN_F_FAILPOINT_STALL, KV_FN_T_LEADER, 1),
    C("LEADER_TRANSFER_UNDER_LOAD", KV_FN_F_MOVE_LEADER, KV_FN_T_LEADER, 0),
    C("POWERCUT_ONE_FOLLOWER", KV_FN_F_POWERCUT, KV_FN_T_ONE_FOLLOWER, 0),
    C("POWERCUT_LEADER", KV_FN_F_POWERCUT, KV_FN_T_LEADER, 0),
    C("FAILPOINT_SLOW_FSYNC_LEADER", KV_FN_F_FAILPOINT_SLOW_FSYNC, KV_FN_T_LEADER, 0),
    C("FAILPOINT_FSYNC_ERROR_ONE_FOLLOWER", KV_FN_F_FAILPOINT_FSYNC_EIO, KV_FN_T_ONE_FOLLOWER, 0),
    C("SIGKILL_ONE_PROXY", KV_FN_F_SIGKILL_PROXY, KV_FN_T_NONE, 0),
    C("SIGSTOP_ONE_PROXY", KV_FN_F_SIGSTOP_PROXY, KV_FN_T_NONE, 0),
    C("SIGKILL_ALL_PROXIES", KV_FN_F_SIGKILL_ALL_PROXIES, KV_FN_T_NONE, 0),
    C("BLACKHOLE_PROXY_UPSTREAM_TX_RX", KV_FN_F_BLACKHOLE_UPSTREAM, KV_FN_T_NONE, 0),
    C("DELAY_PROXY_UPSTREAM_TX_RX", KV_FN_F_DELAY_UPSTREAM, KV_FN_T_NONE, 0),
};
const size_t kv_fn_n_cases = sizeof(kv_fn_cases) / sizeof(kv_fn_cases[0]);

static void sleep_ms(uint32_t ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Milliseconds until the stressers' count of successful ops moves (-1: not within bound_ms). */
static int back_through_proxies(kv_fn_workload *w, uint32_t bound_ms)
{
    uint64_t ok0, ok, f;
    kv_fn_workload_counts(w, &ok0, &f);
    int64_t t0 = kv_fn_now_us();
    for (;;) {
        kv_fn_workload_counts(w, &ok, &f);
        int ms = (int)((kv_fn_now_us() - t0) / 1000);
        if (ok > ok0)
            return ms;
        if (ms >= (int)bound_ms)
            return -1;
        sleep_ms(20);
    }
}

static int is_network(kv_fn_fault f)
{
    return f == KV_FN_F_BLACKHOLE || f == KV_FN_F_DELAY || f == KV_FN_F_RANDOM_DELAY;
}

/* A fault on the links between the gRPC proxies and a member (fn.h up[]). */
static int is_upstream(kv_fn_fault f)
{
    return f == KV_FN_F_BLACKHOLE_UPSTREAM || f == KV_FN_F_DELAY_UPSTREAM;
}

const char *kv_fn_case_skip_reason(const kv_fn_case *k, const kv_fn_cluster *c)
{
    if (k->sel == KV_FN_T_ONE_FOLLOWER && c->n < 2)
        return "no follower in a 1-member cluster";
    if (is_network(k->fault) && c->n < 2)
        return "no peer traffic to proxy in a 1-member cluster";
    if (k->fault == KV_FN_F_MOVE_LEADER && c->n < 2)
        return "no follower to transfer leadership to in a 1-member cluster";
    if (k->fault == KV_FN_F_FAILPOINT_STALL && c->target == KV_FN_TARGET_ETCD)
        return "etcd 3.4 from Debian is built without gofail failpoints";
    if ((k->fault == KV_FN_F_FAILPOINT_SLOW_FSYNC || k->fault == KV_FN_F_FAILPOINT_FSYNC_EIO) &&
        c->target == KV_FN_TARGET_ETCD)
        return "kvd disk failpoint; etcd 3.4 from Debian is built without gofail failpoints";
    if ((k->fault == KV_FN_F_FAILPOINT_SLOW_FSYNC || k->fault == KV_FN_F_FAILPOINT_FSYNC_EIO) &&
        !c->failpoints)
        return "kvd not started with --enable-failpoints";
    if (k->fault == KV_FN_F_SIGQUIT_REMOVE && c->n < 3)
        return "removing a member needs a cluster of 3 or more";
    if (k->until_snapshot && c->n < 2)
        return "no member to fall behind a snapshot in a 1-member cluster";
    if (k->until_snapshot && !c->snapshot_count)
        return "cluster started without --snapshot-count";
    if (k->fault == KV_FN_F_POWERCUT && c->target == KV_FN_TARGET_ETCD)
        return "the power-cut shim journals LMDB files only (etcd uses bbolt + WAL)";
    if ((k->fault == KV_FN_F_SIGKILL_PROXY || k->fault == KV_FN_F_SIGSTOP_PROXY) &&
        c->n_proxies < 2)
        return "needs --proxies 2 or more (the clients fail over to another proxy)";
    if (k->fault == KV_FN_F_SIGKILL_ALL_PROXIES && c->n_proxies < 1)
        return "needs --proxies (the clients reach the cluster through them only)";
    if (is_upstream(k->fault) && c->n_proxies < 1)
        return "needs --proxies (the links from the gRPC proxies to a member)";
    if (is_upstream(k->fault) && c->n < 2)
        return "needs 2 or more members (the proxies move to another one)";
    if (k->fault == KV_FN_F_POWERCUT && c->n < 3)
        return "a member restarting from a lossy disk must catch up from a quorum (3+ members)";
    return NULL;
}

static const char *fault_name(kv_fn_fault f)
{
    switch (f) {
    case KV_FN_F_NONE:
        return "none";
    case KV_FN_F_SIGTERM:
        return "SIGTERM+restart";
    case KV_FN_F_SIGKILL:
        return "SIGKILL+restart";
    case KV_FN_F_SIGSTOP:
        return "SIGSTOP/SIGCONT";
    case KV_FN_F_BLACKHOLE:
        return "blackhole peer tx+rx";
    case KV_FN_F_DELAY:
        return "delay peer tx+rx 1000ms";
    case KV_FN_F_RANDOM_DELAY:
        return "delay peer tx+rx 600+-500ms";
    case KV_FN_F_MOVE_LEADER:
        return "MoveLeader";
    case KV_FN_F_SIGQUIT_REMOVE:
        return "SIGQUIT+wipe+MemberRemove, MemberAdd+join";
    case KV_FN_F_RESTORE_SNAPSHOT:
        return "leader snapshot, SIGQUIT+wipe quorum, restore all";
    case KV_FN_F_POWERCUT:
        return "power cut (unsynced writes lost)+restart";
    case KV_FN_F_FAILPOINT_SLOW_FSYNC:
        return "slow fsync (SIGRTMIN+1 disk failpoint)";
    case KV_FN_F_FAILPOINT_FSYNC_EIO:
        return "fsync EIO (SIGRTMIN+2 disk failpoint)+restart";
    case KV_FN_F_SIGKILL_PROXY:
        return "SIGKILL+restart of a gRPC proxy";
    case KV_FN_F_SIGSTOP_PROXY:
        return "SIGSTOP/SIGCONT of a gRPC proxy";
    case KV_FN_F_SIGKILL_ALL_PROXIES:
        return "SIGKILL+restart of every gRPC proxy";
    case KV_FN_F_BLACKHOLE_UPSTREAM:
        return "blackhole proxies->member tx+rx";
    case KV_FN_F_DELAY_UPSTREAM:
        return "delay proxies->member tx+rx 1000ms";
    default:
        return "apply stall (SIGUSR1 failpoint)";
    }
}

/* Restores every member (restart, SIGCONT, clear proxies) and waits for a writable leader. */
/* kvd's peer delay failpoint (server/peer/peer_delay.h) replaces the proxy delay: the runner
 * arms KVD_FAILPOINT_PEER_DELAY_MS (SIGRTMIN+3) and _RANDOM_DELAY_MS (SIGRTMIN+4), cases.h. */
static int delay_fp(const kv_fn_cluster *c, kv_fn_fault f)
{
    return c->target == KV_FN_TARGET_KVD && c->failpoints &&
           (f == KV_FN_F_DELAY || f == KV_FN_F_RANDOM_DELAY);
}

static int delay_signal(kv_fn_fault f)
{
    return f == KV_FN_F_DELAY ? SIGRTMIN + 3 : SIGRTMIN + 4;
}

static const char *const kv_fn_delayed_metric[] = {"kvd_peer_frames_delayed_total", NULL};
/* gRPC calls and streams a kvd proxy's server started (etcd 3.4's proxy exports no own page). */
static const char *const kv_fn_proxy_calls_metric[] = {"grpc_server_started_total", NULL};

static int heal_all(kv_fn_cluster *c)
{
    for (int i = 0; i < c->n; i++) {
        if (c->m[i].proxy)
            kvt_proxy_set(c->m[i].proxy, 0, 0, 0, 0);
        if (c->m[i].proc.pid && c->m[i].proc.stopped)
            kv_fn_member_signal(c, i, SIGCONT);
        if (!c->m[i].proc.pid)
            kv_fn_member_start(c, i);
    }
    for (int i = 0; i < c->n_proxies; i++)
        if (c->gp[i].proc.pid && c->gp[i].proc.stopped)
            kvt_proc_resume(&c->gp[i].proc);
    for (int i = 0; i < c->n; i++)
        if (c->up[i])
            kvt_proxy_set(c->up[i], 0, 0, 0, 0);
    int r = kv_fn_cluster_wait_writable(c, 20000);
    /* --proxies: a gRPC proxy that is not running is started again (the case that exited
     * it already failed, proxies_died()). */
    if (r >= 0 && c->n_proxies > 0 && kv_fn_proxies_start(c, 10000) != 0)
        return -EIO;
    return r;
}

/* --proxies: the first gRPC proxy that exited on its own (not killed by the runner), -1 if
 * none; its wait status goes to *status. */
static int proxies_died(kv_fn_cluster *c, int *status)
{
    for (int i = 0; i < c->n_proxies; i++)
        if (c->gp[i].proc.pid && !kvt_proc_alive(&c->gp[i].proc)) {
            *status = c->gp[i].proc.last_status;
            return i;
        }
    return -1;
}

/* Fills targets[] per the selector; returns the count. */
static int pick_targets(const kv_fn_case *k, kv_fn_cluster *c, uint64_t *rng, int *targets,
                        int *leader_out)
{
    int leader = kv_fn_cluster_leader(c, 1000);
    *leader_out = leader;
    int n = 0, order[KV_FN_MAX_MEMBERS];
    for (int i = 0; i < c->n; i++)
        order[i] = i;
    for (int i = c->n - 1; i > 0; i--) {
        *rng = *rng * 6364136223846793005ULL + 1442695040888963407ULL;
        int j = (int)((*rng >> 33) % (uint64_t)(i + 1)), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    switch (k->sel) {
    case KV_FN_T_NONE:
        return 0;
    case KV_FN_T_LEADER:
        if (leader < 0)
            return -1;
        targets[n++] = leader;
        return n;
    case KV_FN_T_ONE_FOLLOWER:
        for (int i = 0; i < c->n; i++)
            if (order[i] != leader) {
                targets[n++] = order[i];
                return n;
            }
        return -1;
    case KV_FN_T_QUORUM:
        for (int i = 0; i < c->n / 2 + 1; i++)
            targets[n++] = order[i];
        return n;
    case KV_FN_T_ALL:
        for (int i = 0; i < c->n; i++)
            targets[n++] = i;
        return n;
    }
    return -1;
}

static void inject_history(kv_fn_inject inj, kv_fn_op **ops, size_t *n_ops, kv_fn_lease_ev **lev,
                           size_t *n_lev, const kv_fn_lease_info *leases)
{
    if (inj == KV_FN_INJECT_STALE_READ) {
        /* A get after everything, returning a value that a later completed put overwrote. */
        int64_t end = 0;
        for (size_t i = 0; i < *n_ops; i++)
            if ((*ops)[i].ret_us != KV_FN_INF && (*ops)[i].ret_us > end)
                end = (*ops)[i].ret_us;
        for (size_t i = 0; i < *n_ops; i++) {
            const kv_fn_op *p1 = &(*ops)[i];
            if (p1->type != KV_FN_OP_PUT || p1->ret_us == KV_FN_INF)
                continue;
            for (size_t j = 0; j < *n_ops; j++) {
                const kv_fn_op *p2 = &(*ops)[j];
                if (p2->type == KV_FN_OP_PUT && p2->key == p1->key && p2->ret_us != KV_FN_INF &&
                    p2->call_us > p1->ret_us) {
                    kv_fn_op *na = realloc(*ops, (*n_ops + 1) * sizeof(**ops));
                    if (!na)
                        return;
                    *ops = na;
                    kv_fn_op g = *p1;
                    g.type = KV_FN_OP_GET;
                    g.client = 999;
                    g.mod_rev = p1->rev; /* as a stale snapshot would report it */
                    g.call_us = end + 1000;
                    g.ret_us = end + 2000;
                    (*ops)[(*n_ops)++] = g;
                    return;
                }
            }
        }
    } else if (inj == KV_FN_INJECT_LEASE_VANISH || inj == KV_FN_INJECT_LEASE_OUTLIVE) {
        int want_abandoned = inj == KV_FN_INJECT_LEASE_OUTLIVE;
        for (size_t i = 0; i < *n_lev; i++) {
            kv_fn_lease_ev e = (*lev)[i];
            if (e.type != KV_FN_LEV_RENEW || leases[e.lease].abandoned != want_abandoned)
                continue;
            kv_fn_lease_ev *na = realloc(*lev, (*n_lev + 1) * sizeof(**lev));
            if (!na)
                return;
            *lev = na;
            kv_fn_lease_ev r = {.lease = e.lease, .type = KV_FN_LEV_READ};
            if (want_abandoned) { /* present long after the TTL */
                r.present = 1;
                r.call_us = e.ret_us + leases[e.lease].ttl_us * 10;
            } else { /* missing right after an acknowledged renewal */
                r.present = 0;
                r.call_us = e.ret_us + 1000;
            }
            r.ret_us = r.call_us + 1000;
            (*lev)[(*n_lev)++] = r;
            return;
        }
    }
}

/* Lease-linearizability injections: the answer a lessor one batch behind gives (the first
 * TimeToLive listing keys misses them, as if the puts were not taken yet), or a renewal after
 * an acknowledged revoke answered from a stale map (TTL > 0). */
static void inject_ll(kv_fn_inject inj, kv_fn_ll_op *ops, size_t n)
{
    for (size_t i = 0; i < n && inj == KV_FN_INJECT_LEASE_LAG; i++)
        if (ops[i].type == KV_FN_LL_TTL && ops[i].ok && ops[i].keys) {
            ops[i].keys = 0;
            return;
        }
    for (size_t i = 0; i < n && inj == KV_FN_INJECT_LEASE_STALE_RENEW; i++) {
        if (ops[i].type != KV_FN_LL_REVOKE || !ops[i].ok || ops[i].not_found)
            continue;
        for (size_t j = 0; j < n; j++)
            if (ops[j].lease == ops[i].lease && ops[j].type == KV_FN_LL_RENEW && ops[j].ok &&
                ops[j].call_us > ops[i].ret_us) {
                ops[j].ttl = 60;
                return;
            }
    }
}

typedef struct verdicts {
    kv_fn_verdict lin, rev, lease, hash;
    char lin_rep[4096], rev_rep[2048], lease_rep[4096], hash_rep[512];
} verdicts;

static void run_checkers(const kv_fn_op *ops, size_t n_ops, const kv_fn_lease_info *leases,
                         size_t n_leases, const kv_fn_lease_ev *lev, size_t n_lev,
                         const kv_fn_window *w, size_t n_w, const kv_fn_run_opts *o, verdicts *v)
{
    v->lin = kv_fn_lin_check(ops, n_ops, o->lin_budget_ms, v->lin_rep, sizeof(v->lin_rep));
    v->rev = kv_fn_rev_check(ops, n_ops, v->rev_rep, sizeof(v->rev_rep));
    v->lease = kv_fn_lease_check(leases, n_leases, lev, n_lev, w, n_w, o->lease_slack_us,
                                 v->lease_rep, sizeof(v->lease_rep));
}

/* ---- _UNTIL_TRIGGER_SNAPSHOT: a filler that advances the raft index during the hold ---- */

#define FILL_THREADS 4

typedef struct filler {
    kvc_client *kc[FILL_THREADS];
    pthread_t th[FILL_THREADS];
    int n;
    char prefix[160];
    atomic_int stop;
    atomic_uint_fast64_t puts;
} filler;

typedef struct filler_arg {
    filler *f;
    int idx;
} filler_arg;

static void *filler_main(void *arg)
{
    filler_arg *a = arg;
    filler *f = a->f;
    char key[200], val[100];
    int kl = snprintf(key, sizeof(key), "%s/fill/%d", f->prefix, a->idx);
    memset(val, 'f', sizeof(val));
    while (!atomic_load(&f->stop)) {
        if (kvc_put(f->kc[a->idx], key, (size_t)kl, val, sizeof(val), NULL, 2000, NULL, NULL) == 0)
            atomic_fetch_add(&f->puts, 1);
        else
            sleep_ms(50);
    }
    return NULL;
}

static int filler_start(filler *f, filler_arg *args, const kv_fn_cluster *c, const char *prefix)
{
    memset(f, 0, sizeof(*f));
    snprintf(f->prefix, sizeof(f->prefix), "%s", prefix);
    for (int i = 0; i < FILL_THREADS; i++) {
        const char *eps[KV_FN_MAX_MEMBERS];
        for (int m = 0; m < c->n; m++)
            eps[m] = c->m[(i + m) % c->n].endpoint;
        kvc_config kcfg;
        kvc_config_default(&kcfg);
        kcfg.endpoints = eps;
        kcfg.n_endpoints = (size_t)c->n;
        kcfg.dial_timeout_ms = 2000;
        if (kvc_open(&f->kc[i], &kcfg, NULL) != 0)
            break;
        args[i] = (filler_arg){.f = f, .idx = i};
        if (pthread_create(&f->th[i], NULL, filler_main, &args[i]) != 0) {
            kvc_close(f->kc[i]);
            f->kc[i] = NULL;
            break;
        }
        f->n = i + 1;
    }
    return f->n > 0 ? 0 : -EIO;
}

static void filler_stop(filler *f)
{
    atomic_store(&f->stop, 1);
    for (int i = 0; i < f->n; i++) {
        pthread_join(f->th[i], NULL);
        kvc_close(f->kc[i]);
    }
    f->n = 0;
}

/* Raft index advance after which the faulted member's next entries are compacted away on
 * the leader: kvd compacts at snapshot_count + min(5000, count) entries past its last
 * snapshot and keeps min(5000, count); etcd 3.4 snapshots every count entries and keeps
 * 5000 (SnapshotCatchUpEntries). */
static uint64_t trigger_threshold(const kv_fn_cluster *c, kv_fn_fault f)
{
    uint64_t n = c->snapshot_count;
    /* A delayed member stays in the cluster and may catch up by entries: as etcd's tester,
     * hold until the index advanced by the snapshot count (etcd 3.4 under a delayed leader
     * commits a few entries a second: the compaction threshold would take minutes). */
    if (f == KV_FN_F_DELAY || f == KV_FN_F_RANDOM_DELAY)
        return n;
    if (c->target == KV_FN_TARGET_ETCD)
        return 2 * n + 5000 + 100;
    return 3 * n + (n < 5000 ? n : 5000);
}

static const char *const *snap_metric(const kv_fn_cluster *c)
{
    static const char *const kvd[] = {"kvd_snapshot_installs_total", NULL};
    static const char *const etcd[] = {"etcd_network_snapshot_receive_success", NULL};
    return c->target == KV_FN_TARGET_ETCD ? etcd : kvd;
}

/* SIGQUIT (etcd's tester: the Go runtime dumps its goroutines and exits), reaped. */
static int quit_member(kv_fn_cluster *c, int i)
{
    kvt_proc *p = &c->m[i].proc;
    if (!p->pid)
        return 0;
    if (p->stopped)
        kvt_proc_resume(p);
    kvt_proc_signal(p, SIGQUIT);
    if (kvt_proc_wait(p, 10000) != 0)
        return kvt_proc_kill9(p);
    return 0;
}

/* ---- power cut: the member runs under the tests/crash shim, then loses unsynced writes --- */

#ifndef KV_FN_HAVE_POWERCUT /* tests/crash not in this build: POWERCUT cases skip */
typedef struct kv_pc_stats {
    uint64_t unsynced_pages, restored_pages;
    uint32_t truncated, escapes;
    char escape[8];
} kv_pc_stats;
typedef enum { KV_PC_ROLLBACK_ALL, KV_PC_ROLLBACK_SUBSET } kv_pc_mode;
static int kv_pc_replay(const char *j, kv_pc_mode m, uint64_t s, kv_pc_stats *st, char *e,
                        size_t el)
{
    (void)j, (void)m, (void)s, (void)st;
    snprintf(e, el, "built without tests/crash");
    return -ENOTSUP;
}
#endif

static void pc_paths(const kv_fn_cluster *c, int i, char *journal, size_t jl, char *data, size_t dl)
{
    snprintf(journal, jl, "%s/powercut.journal", c->m[i].dir);
    snprintf(data, dl, "%s/data", c->m[i].dir);
}

/* Restarts member i (SIGTERM) under the shim; the journal starts empty. */
static int pc_start(kv_fn_cluster *c, int i, const char *lib, char env_buf[3][PATH_MAX + 64],
                    const char **env)
{
    char journal[PATH_MAX + 32], data[PATH_MAX + 16];
    pc_paths(c, i, journal, sizeof(journal), data, sizeof(data));
    kv_fn_member_signal(c, i, SIGTERM);
    unlink(journal);
    snprintf(env_buf[0], PATH_MAX + 64, "LD_PRELOAD=%s", lib);
    snprintf(env_buf[1], PATH_MAX + 64, "POWERCUT_DIR=%s", data);
    snprintf(env_buf[2], PATH_MAX + 64, "POWERCUT_JOURNAL=%s", journal);
    env[0] = env_buf[0];
    env[1] = env_buf[1];
    env[2] = env_buf[2];
    env[3] = NULL;
    c->m[i].env = env;
    int r = kv_fn_member_start(c, i);
    c->m[i].env = NULL;
    return r;
}

/* kill -9, then the power loss: the journal's unsynced pages are rolled back. */
static int pc_cut(kv_fn_cluster *c, int i, uint64_t seed, kv_pc_stats *st, char *err, size_t errlen)
{
    char journal[PATH_MAX + 32], data[PATH_MAX + 16];
    pc_paths(c, i, journal, sizeof(journal), data, sizeof(data));
    kv_fn_member_signal(c, i, SIGKILL);
    kv_pc_mode mode = seed % 2 ? KV_PC_ROLLBACK_SUBSET : KV_PC_ROLLBACK_ALL;
    int r = kv_pc_replay(journal, mode, seed, st, err, errlen);
    if (r == 0 && st->escapes) {
        snprintf(err, errlen, "power cut void: %.200s", st->escape);
        r = -EINVAL;
    }
    return r;
}

/* ---- histories of a case: one or two stresser phases merged ---- */

typedef struct hist {
    kv_fn_op *ops;
    size_t n_ops;
    kv_fn_lease_info *l;
    size_t n_l;
    kv_fn_lease_ev *ev;
    size_t n_ev;
} hist;

static void hist_free(hist *h)
{
    free(h->ops);
    free(h->l);
    free(h->ev);
    memset(h, 0, sizeof(*h));
}

/* Appends w's history; its register keys are shifted by key_off and its leases renumbered
 * after those already in h. */
static int hist_add(hist *h, kv_fn_workload *w, int key_off)
{
    const kv_fn_op *ops = NULL;
    const kv_fn_lease_info *l = NULL;
    const kv_fn_lease_ev *ev = NULL;
    size_t n_ops = 0, n_l = 0, n_ev = 0;
    if (w)
        kv_fn_workload_history(w, &ops, &n_ops, &l, &n_l, &ev, &n_ev);
    kv_fn_op *no = realloc(h->ops, (h->n_ops + n_ops + 1) * sizeof(*no));
    if (no)
        h->ops = no;
    kv_fn_lease_info *nl = realloc(h->l, (h->n_l + n_l + 1) * sizeof(*nl));
    if (nl)
        h->l = nl;
    kv_fn_lease_ev *ne = realloc(h->ev, (h->n_ev + n_ev + 1) * sizeof(*ne));
    if (ne)
        h->ev = ne;
    if (!no || !nl || !ne)
        return -ENOMEM;
    for (size_t i = 0; i < n_ops; i++) {
        h->ops[h->n_ops] = ops[i];
        h->ops[h->n_ops++].key += key_off;
    }
    for (size_t i = 0; i < n_ev; i++) {
        h->ev[h->n_ev] = ev[i];
        h->ev[h->n_ev++].lease += (int)h->n_l;
    }
    if (n_l)
        memcpy(h->l + h->n_l, l, n_l * sizeof(*l));
    h->n_l += n_l;
    return 0;
}

static int hist_push_op(hist *h, const kv_fn_op *op)
{
    kv_fn_op *no = realloc(h->ops, (h->n_ops + 2) * sizeof(*no));
    if (!no)
        return -ENOMEM;
    h->ops = no;
    h->ops[h->n_ops++] = *op;
    return 0;
}

/* A linearizable get of each register key (prefix/reg/<k>, k < keys) through any member,
 * recorded as client `client`'s ops: the snapshot-restore case reads the registers before
 * the snapshot and after the restore, so the register checker sees whether the restored
 * cluster kept the last value of each. Returns how many keys were read. */
static int read_registers(const kv_fn_cluster *c, const char *prefix, int keys, int client, hist *h)
{
    const char *eps[KV_FN_MAX_MEMBERS];
    for (int m = 0; m < c->n; m++)
        eps[m] = c->m[m].endpoint;
    kvc_config kcfg;
    kvc_config_default(&kcfg);
    kcfg.endpoints = eps;
    kcfg.n_endpoints = (size_t)c->n;
    kcfg.dial_timeout_ms = 2000;
    kvc_client *kc = NULL;
    if (kvc_open(&kc, &kcfg, NULL) != 0)
        return 0;
    int done = 0;
    for (int key = 0; key < keys; key++) {
        char kb[200];
        int kl = snprintf(kb, sizeof(kb), "%s/reg/%d", prefix, key);
        for (int attempt = 0; attempt < 5; attempt++) {
            kv_fn_op op = {.key = key, .client = client, .type = KV_FN_OP_GET};
            kvc_range_result rr = {0};
            op.call_us = kv_fn_now_us();
            int r = kvc_get(kc, kb, (size_t)kl, NULL, 2000, &rr, NULL);
            op.ret_us = kv_fn_now_us();
            if (r == 0) {
                op.rev = rr.header.revision;
                if (rr.n_kvs > 0) {
                    op.mod_rev = rr.kvs[0].mod_revision;
                    size_t l = rr.kvs[0].value_len < sizeof(op.value) - 1 ? rr.kvs[0].value_len
                                                                          : sizeof(op.value) - 1;
                    memcpy(op.value, rr.kvs[0].value, l);
                    op.value[l] = '\0';
                }
            }
            kvc_range_result_free(&rr);
            if (r == 0) {
                hist_push_op(h, &op);
                done++;
                break;
            }
            sleep_ms(200);
        }
    }
    kvc_close(kc);
    return done;
}

#define KV_FN_KEYS 8
#define KV_FN_PHASE2_KEY_OFFSET 100

static void add_fault(char *d, size_t cap, size_t *fl, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void add_fault(char *d, size_t cap, size_t *fl, const char *fmt, ...)
{
    if (*fl >= cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(d + *fl, cap - *fl, fmt, ap);
    va_end(ap);
    if (k > 0)
        *fl = *fl + (size_t)k < cap ? *fl + (size_t)k : cap - 1;
}

/* Occurrences of needle in member i's member.log (every start appends to it); -1 if it
 * cannot be read. */
static int log_count(const kv_fn_cluster *c, int i, const char *needle)
{
    char path[PATH_MAX + 16];
    snprintf(path, sizeof(path), "%s/member.log", c->m[i].dir);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof(line), f))
        if (strstr(line, needle))
            n++;
    fclose(f);
    return n;
}

/* The line kvd logs when a ready's commit fails (server/node/node_ready.c after_ready). */
#define KV_FN_EIO_LOG "persisting a raft ready failed: Input/output error; stopping this member"

kv_fn_result kv_fn_case_run(const kv_fn_case *k, kv_fn_cluster *c, const kv_fn_run_opts *o)
{
    int64_t t0 = kv_fn_now_us();
    char prefix[128];
    snprintf(prefix, sizeof(prefix), "/fn/%s", k->name);
    verdicts v;
    memset(&v, 0, sizeof(v));
    v.lin = v.rev = v.lease = v.hash = KV_FN_UNKNOWN;
    char fault_desc[512] = "";
    char err[512] = "";
    int live_ms = -1;
    uint64_t n_ok = 0, n_fail = 0;
    kv_fn_window win = {0};
    kv_fn_workload *w = NULL;
    hist h = {0};
    int key_off = 0;
    uint64_t rng = o->seed * 2654435761ULL + (uint64_t)(k - kv_fn_cases) + 1;
    char pc_env[3][PATH_MAX + 64];
    const char *pc_envp[4];
    char prefix2[160];
    size_t fl = 0;
    int killed_proxy = -1;  /* SIGKILL_ONE_PROXY's target */
    int stopped_proxy = -1; /* SIGSTOP_ONE_PROXY's target */
    int killed_all = 0;     /* SIGKILL_ALL_PROXIES */
    int up_member = -1;     /* *_PROXY_UPSTREAM_*: the member cut off */
    uint64_t up_relayed0 = 0, up_dropped0 = 0;
    int64_t pcalls0[KV_FN_MAX_PROXIES] = {0}; /* --proxies: calls served before the case */

    if (k->fault == KV_FN_F_POWERCUT && !o->powercut_lib) {
        printf("%-42s SKIP  libkvd_powercut.so not built or not found (tests/crash)\n", k->name);
        fflush(stdout);
        return KV_FN_RES_SKIP;
    }

    uint64_t ll_kept = 0, ll_lost0 = 0, ll_lost = 0, ll_resp0 = 0, ll_resp = 0, ll_dl0 = 0;
    if (o->leaseload) {
        int ncl;
        double gs;
        kv_fn_leaseload_counts(o->leaseload, &ll_kept, &ll_lost0, &ll_resp0, &ncl, &gs);
        ll_dl0 = kv_fn_leaseload_lost_by_deadline(o->leaseload);
    }
    if (heal_all(c) < 0) {
        snprintf(err, sizeof(err), "cluster not writable before the case");
        goto report;
    }
    /* --proxies: evidence that the stressers went through them (gRPC calls each served). */
    for (int i = 0; i < c->n_proxies; i++)
        pcalls0[i] = kv_fn_proxy_metric(c, i, kv_fn_proxy_calls_metric);
    kv_fn_workload_cfg wc = {.cluster = c,
                             .prefix = prefix,
                             .kv_clients = k->no_stress ? 0 : 4,
                             .keys = KV_FN_KEYS,
                             .lease_clients = k->no_stress ? 0 : 1,
                             .lease_lin_clients = k->no_stress ? 0 : 1,
                             .lease_ttl_s = 3,
                             .op_timeout_ms = 2000,
                             .seed = rng};
    if (wc.kv_clients + wc.lease_clients > 0 && kv_fn_workload_start(&w, &wc) != 0) {
        snprintf(err, sizeof(err), "cannot start the stressers");
        goto report;
    }
    int targets[KV_FN_MAX_MEMBERS], leader = -1;
    int nt = 0;
    if (k->fault == KV_FN_F_POWERCUT) {
        /* The member must run under the shim before its unsynced writes can be taken away:
         * pick it now, restart it under the shim (a clean SIGTERM restart), then load. */
        nt = pick_targets(k, c, &rng, targets, &leader);
        if (nt < 0) {
            snprintf(err, sizeof(err), "no leader/follower to target");
            goto stop;
        }
        for (int i = 0; i < nt; i++)
            if (pc_start(c, targets[i], o->powercut_lib, pc_env, pc_envp) != 0)
                snprintf(err, sizeof(err), "start of m%d under the power-cut shim failed",
                         targets[i]);
        if (err[0])
            goto stop;
        if (kv_fn_cluster_wait_writable(c, 20000) < 0) {
            snprintf(err, sizeof(err), "cluster not writable after the restart under the shim");
            goto stop;
        }
        /* The restart moved leadership away: give it back so the cut hits the leader. */
        int cur = kv_fn_cluster_leader(c, 1000);
        if (k->sel == KV_FN_T_LEADER && cur >= 0 && cur != targets[0]) {
            kv_fn_cluster_move_leader(c, cur, targets[0], 5000);
            kv_fn_cluster_wait_writable(c, 20000);
        }
    }
    sleep_ms(o->pre_ms);
    if (k->fault == KV_FN_F_POWERCUT) {
        leader = kv_fn_cluster_leader(c, 1000);
    } else {
        nt = pick_targets(k, c, &rng, targets, &leader);
    }
    if (nt < 0) {
        snprintf(err, sizeof(err), "no leader/follower to target");
        goto stop;
    }
    add_fault(fault_desc, sizeof(fault_desc), &fl, "%s", fault_name(k->fault));
    for (int i = 0; i < nt; i++)
        add_fault(fault_desc, sizeof(fault_desc), &fl, "%sm%d%s", i ? "," : " on ", targets[i],
                  targets[i] == leader ? "(L)" : "");
    uint64_t base_relayed = 0, base_dropped = 0;
    int64_t delayed_base[KV_FN_MAX_MEMBERS] = {0};
    if (delay_fp(c, k->fault))
        for (int i = 0; i < nt; i++)
            delayed_base[i] = kv_fn_member_metric(c, targets[i], kv_fn_delayed_metric);
    if (is_network(k->fault))
        for (int i = 0; i < nt; i++) {
            uint64_t b, d;
            uint32_t nc;
            kvt_proxy_stats(c->m[targets[i]].proxy, &b, &d, &nc);
            base_relayed += b;
            base_dropped += d;
        }
    /* Snapshot evidence: the faulted members' counters before the fault (a restarted
     * member starts again from 0). */
    int64_t snap_base[KV_FN_MAX_MEMBERS] = {0};
    if (k->until_snapshot)
        for (int i = 0; i < nt; i++) {
            int64_t x = kv_fn_member_metric(c, targets[i], snap_metric(c));
            snap_base[i] = x > 0 ? x : 0;
        }
    for (int i = 0; i < nt; i++)
        if (k->fault == KV_FN_F_SIGQUIT_REMOVE && !c->m[targets[i]].member_id)
            kv_fn_member_status(c, targets[i], 2000, NULL, NULL);
    char snap_path[PATH_MAX + 64] = "";
    win.start_us = kv_fn_now_us();
    if (k->fault == KV_FN_F_RESTORE_SNAPSHOT) {
        /* Phase 1 ends here: the snapshot holds every write acknowledged so far, and the
         * registers' last values are read (and re-read after the restore). */
        if (w) {
            kv_fn_workload_stop(w);
            uint64_t a, b;
            kv_fn_workload_counts(w, &a, &b);
            n_ok += a;
            n_fail += b;
            hist_add(&h, w, 0);
            kv_fn_workload_free(w);
            w = NULL;
        }
        int before = read_registers(c, prefix, KV_FN_KEYS, 900, &h);
        int src = leader >= 0 ? leader : 0;
        snprintf(snap_path, sizeof(snap_path), "%s/%s.snap", o->root, k->name);
        unlink(snap_path);
        char e2[300] = "";
        if (kv_fn_member_snapshot_save(c, src, snap_path, e2, sizeof(e2)) != 0) {
            snprintf(err, sizeof(err), "snapshot save from m%d failed: %s", src, e2);
            goto stop;
        }
        struct stat sst;
        add_fault(fault_desc, sizeof(fault_desc), &fl, "; snapshot of m%d%s %lldB, %d regs read",
                  src, src == leader ? "(L)" : "",
                  stat(snap_path, &sst) == 0 ? (long long)sst.st_size : -1LL, before);
    }
    for (int i = 0; i < nt; i++) {
        kv_fn_member *m = &c->m[targets[i]];
        switch (k->fault) {
        case KV_FN_F_SIGTERM:
            kv_fn_member_signal(c, targets[i], SIGTERM);
            break;
        case KV_FN_F_SIGKILL:
            kv_fn_member_signal(c, targets[i], SIGKILL);
            break;
        case KV_FN_F_SIGSTOP:
            kv_fn_member_signal(c, targets[i], SIGSTOP);
            break;
        case KV_FN_F_BLACKHOLE:
            kvt_proxy_set(m->proxy, 1, 1, 0, 0);
            /* kvd keeps one connection per pair, dialed by the lower id: the member's own
             * proxy only carries the pairs it accepts. Its isolation failpoint (SIGUSR2: every
             * peer frame in and out dropped) covers the pairs it dialed too. */
            if (c->target == KV_FN_TARGET_KVD && c->failpoints)
                kv_fn_member_signal(c, targets[i], SIGUSR2);
            break;
        case KV_FN_F_DELAY:
        case KV_FN_F_RANDOM_DELAY:
            /* The proxy only carries the pairs the member accepts (see BLACKHOLE): kvd's peer
             * delay failpoint holds every frame it sends and receives, on every pair, instead
             * (the proxy is not delayed as well: no pair gets the delay twice at this member). */
            if (delay_fp(c, k->fault))
                kv_fn_member_signal(c, targets[i], delay_signal(k->fault)); /* on */
            else if (k->fault == KV_FN_F_DELAY)
                kvt_proxy_set(m->proxy, 0, 0, 1000, 0);
            else
                kvt_proxy_set(m->proxy, 0, 0, 600, 500);
            break;
        case KV_FN_F_FAILPOINT_STALL:
            kv_fn_member_signal(c, targets[i], SIGUSR1); /* stall on */
            break;
        case KV_FN_F_FAILPOINT_SLOW_FSYNC: {
            /* Evidence: one put (fresh client) before and one under the fault. */
            int before = kv_fn_cluster_wait_writable(c, 5000);
            kv_fn_member_signal(c, targets[i], SIGRTMIN + 1); /* slow fsync on */
            sleep_ms(300);
            int under = kv_fn_cluster_wait_writable(c, 20000);
            add_fault(fault_desc, sizeof(fault_desc), &fl,
                      " %ums per durable commit; a put took %dms before, %dms under it",
                      KV_FN_SLOW_FSYNC_MS, before, under);
            break;
        }
        case KV_FN_F_FAILPOINT_FSYNC_EIO: {
            int logged0 = log_count(c, targets[i], KV_FN_EIO_LOG);
            kv_fn_member_signal(c, targets[i], SIGRTMIN + 2); /* next durable commit fails */
            int r = kvt_proc_wait(&m->proc, 10000);
            int st = m->proc.last_status;
            int logged = log_count(c, targets[i], KV_FN_EIO_LOG) - logged0;
            int after = r == 0 ? kv_fn_cluster_wait_writable(c, 20000) : -1;
            if (r == 0)
                add_fault(fault_desc, sizeof(fault_desc), &fl,
                          "; member exited (status %d), '%s' logged %d time(s), the others "
                          "took a write %dms later",
                          WIFEXITED(st) ? WEXITSTATUS(st) : -1, "persisting a raft ready failed",
                          logged, after);
            if (r != 0 && !err[0])
                snprintf(err, sizeof(err), "m%d still running 10 s after its fsync failed",
                         targets[i]);
            else if (logged < 1 && !err[0])
                snprintf(err, sizeof(err), "m%d stopped without logging '%s'", targets[i],
                         KV_FN_EIO_LOG);
            else if (after < 0 && !err[0])
                snprintf(err, sizeof(err), "the other members took no write after m%d stopped",
                         targets[i]);
            break;
        }
        case KV_FN_F_MOVE_LEADER: {
            int to = (targets[i] + 1 + (int)((rng >> 33) % (uint64_t)(c->n - 1))) % c->n;
            int r = kv_fn_cluster_move_leader(c, targets[i], to, 5000);
            int now_leader = kv_fn_cluster_leader(c, 1000);
            add_fault(fault_desc, sizeof(fault_desc), &fl, " to m%d: %s, leader now m%d", to,
                      r ? "refused" : "ok", now_leader);
            if (r)
                snprintf(err, sizeof(err), "MoveLeader to m%d failed (%d)", to, r);
            break;
        }
        case KV_FN_F_SIGQUIT_REMOVE: {
            uint64_t id = m->member_id;
            quit_member(c, targets[i]);
            kv_fn_member_wipe(c, targets[i]);
            char e2[300] = "";
            int r = kv_fn_cluster_member_remove(c, targets[i], 20000, e2, sizeof(e2));
            if (r)
                snprintf(err, sizeof(err), "MemberRemove of m%d (%llx) failed (%d): %s", targets[i],
                         (unsigned long long)id, r, e2);
            break;
        }
        case KV_FN_F_RESTORE_SNAPSHOT:
            quit_member(c, targets[i]);
            kv_fn_member_wipe(c, targets[i]);
            break;
        case KV_FN_F_POWERCUT: {
            kv_pc_stats st;
            memset(&st, 0, sizeof(st));
            char e2[256] = "";
            int r = pc_cut(c, targets[i], rng ^ (uint64_t)i, &st, e2, sizeof(e2));
            if (r)
                snprintf(err, sizeof(err), "power cut of m%d: %s", targets[i], e2);
            add_fault(fault_desc, sizeof(fault_desc), &fl,
                      " %s: %llu unsynced pages, %llu rolled back, %u files cut",
                      (rng ^ (uint64_t)i) % 2 ? "subset" : "all",
                      (unsigned long long)st.unsynced_pages, (unsigned long long)st.restored_pages,
                      st.truncated);
            break;
        }
        default:
            break;
        }
    }
    if (k->fault == KV_FN_F_SIGKILL_PROXY && c->n_proxies > 0) {
        killed_proxy = (int)((rng >> 33) % (uint64_t)c->n_proxies);
        kvt_proc_kill9(&c->gp[killed_proxy].proc);
        add_fault(fault_desc, sizeof(fault_desc), &fl, " p%d", killed_proxy);
    }
    if (k->fault == KV_FN_F_SIGKILL_ALL_PROXIES && c->n_proxies > 0) {
        /* every way in is gone: no client op can succeed until the proxies are back */
        for (int i = 0; i < c->n_proxies; i++)
            kvt_proc_kill9(&c->gp[i].proc);
        killed_all = 1;
        add_fault(fault_desc, sizeof(fault_desc), &fl, " p0-p%d", c->n_proxies - 1);
    }
    if (k->fault == KV_FN_F_SIGSTOP_PROXY && c->n_proxies > 0) {
        /* a hung proxy: its connections stay open and nothing answers; the clients must
         * leave it on their own (libkvclient's renewal watchdog, the watchers' silence) */
        stopped_proxy = (int)((rng >> 33) % (uint64_t)c->n_proxies);
        kvt_proc_pause(&c->gp[stopped_proxy].proc);
        add_fault(fault_desc, sizeof(fault_desc), &fl, " p%d", stopped_proxy);
    }
    if (is_upstream(k->fault) && c->n_proxies > 0) {
        /* the links of every proxy to the member they use: its relay, not the member */
        uint32_t nc;
        up_member = kv_fn_proxies_busiest_upstream(c, 500);
        kvt_proxy_stats(c->up[up_member], &up_relayed0, &up_dropped0, &nc);
        if (k->fault == KV_FN_F_BLACKHOLE_UPSTREAM)
            kvt_proxy_set(c->up[up_member], 1, 1, 0, 0);
        else
            kvt_proxy_set(c->up[up_member], 0, 0, 1000, 0);
        add_fault(fault_desc, sizeof(fault_desc), &fl, " m%d%s (%u connections)", up_member,
                  up_member == leader ? "(L)" : "", nc);
    }
    if (k->until_snapshot) {
        /* Hold until the leader's raft index advanced past what the faulted member could
         * still get as entries (a filler writes to <prefix>/fill/ to get there). */
        uint64_t thr = trigger_threshold(c, k->fault), base = kv_fn_cluster_raft_index(c, 1000),
                 now = base;
        filler f;
        filler_arg fa[FILL_THREADS];
        int64_t h0 = kv_fn_now_us();
        int64_t bound = (int64_t)(o->trigger_bound_ms ? o->trigger_bound_ms : 120000) * 1000;
        int fr = filler_start(&f, fa, c, prefix);
        while (kv_fn_now_us() - h0 < bound) {
            sleep_ms(200);
            uint64_t x = kv_fn_cluster_raft_index(c, 1000);
            if (x > now)
                now = x;
            if (now >= base + thr && kv_fn_now_us() - h0 >= (int64_t)o->hold_ms * 500)
                break;
        }
        if (fr == 0)
            filler_stop(&f);
        add_fault(fault_desc, sizeof(fault_desc), &fl,
                  " held until index +%llu (>= %llu, snapshot-count %llu) in %.1fs, %llu fill puts",
                  (unsigned long long)(now - base), (unsigned long long)thr,
                  (unsigned long long)c->snapshot_count, (kv_fn_now_us() - h0) / 1e6,
                  (unsigned long long)atomic_load(&f.puts));
        if (now < base + thr && !err[0])
            snprintf(err, sizeof(err), "snapshot trigger not reached: raft index +%llu < %llu",
                     (unsigned long long)(now - base), (unsigned long long)thr);
    } else if (up_member >= 0 && w) {
        /* The proxies must leave the cut member on their own (their renewal watchdog, 3 s,
         * and keepalive pings): the hold is at least 10 s, and through a blackhole some op
         * must succeed in its last 3 s (without the watchdog and the pings none does). */
        uint32_t hold = o->hold_ms > 10000 ? o->hold_ms : 10000;
        uint64_t ok0, ok1, f0, f1;
        sleep_ms(hold - 3000);
        kv_fn_workload_counts(w, &ok0, &f0);
        sleep_ms(3000);
        kv_fn_workload_counts(w, &ok1, &f1);
        uint64_t b, d;
        uint32_t open_end;
        kvt_proxy_stats(c->up[up_member], &b, &d, &open_end);
        add_fault(fault_desc, sizeof(fault_desc), &fl,
                  "; %u ms cut, %" PRIu64 " ops ok in its last 3 s, %u connections open at its end",
                  hold, ok1 - ok0, open_end);
        if (k->fault == KV_FN_F_BLACKHOLE_UPSTREAM && ok1 == ok0 && !err[0])
            snprintf(err, sizeof(err),
                     "no op succeeded through the proxies in the last 3 s of a %u ms cut of their "
                     "links to m%d: they did not leave it",
                     hold, up_member);
        /* kvd's proxies each leave on their own within about 6 s (renewals unanswered, or
         * calls on a silent connection and then its PING, --upstream-answer-timeout 3 s
         * each): no connection to the cut member is left open at the cut's end. etcd 3.4's
         * proxy has no such check; its connections stay. */
        if (k->fault == KV_FN_F_BLACKHOLE_UPSTREAM && c->target == KV_FN_TARGET_KVD &&
            open_end > 0 && !err[0])
            snprintf(err, sizeof(err),
                     "%u connection(s) from the proxies still open to m%d at the end of a %u ms "
                     "cut: not every proxy left it",
                     open_end, up_member, hold);
    } else {
        sleep_ms(o->hold_ms);
    }
    if (is_network(k->fault)) { /* evidence that the fault bit: bytes dropped/relayed */
        uint64_t dropped = 0, relayed = 0;
        for (int i = 0; i < nt; i++) {
            uint64_t b, d;
            uint32_t nc;
            kvt_proxy_stats(c->m[targets[i]].proxy, &b, &d, &nc);
            dropped += d;
            relayed += b;
        }
        add_fault(fault_desc, sizeof(fault_desc), &fl,
                  " proxy:%" PRIu64 "B relayed,%" PRIu64 "B dropped", relayed - base_relayed,
                  dropped - base_dropped);
    }
    if (delay_fp(c, k->fault)) { /* evidence that kvd's delay failpoint acted */
        add_fault(fault_desc, sizeof(fault_desc), &fl, " failpoint:");
        for (int i = 0; i < nt; i++) {
            int64_t x = kv_fn_member_metric(c, targets[i], kv_fn_delayed_metric);
            add_fault(fault_desc, sizeof(fault_desc), &fl, " m%d +%lld", targets[i],
                      (long long)(x < 0 || delayed_base[i] < 0 ? -1 : x - delayed_base[i]));
        }
        add_fault(fault_desc, sizeof(fault_desc), &fl, " frames delayed");
    }
    if (k->fault == KV_FN_F_RESTORE_SNAPSHOT && !err[0]) {
        /* From scratch: every member goes, every data dir is rebuilt from the snapshot. */
        for (int i = 0; i < c->n; i++) {
            quit_member(c, i);
            kv_fn_member_wipe(c, i);
        }
        for (int i = 0; i < c->n && !err[0]; i++) {
            char e2[300] = "";
            if (kv_fn_member_snapshot_restore(c, i, snap_path, e2, sizeof(e2)) != 0)
                snprintf(err, sizeof(err), "snapshot restore of m%d failed: %s", i, e2);
        }
        for (int i = 0; i < c->n && !err[0]; i++)
            if (kv_fn_member_start(c, i) != 0)
                snprintf(err, sizeof(err), "start of restored m%d failed", i);
    }
    for (int i = 0; i < nt; i++) {
        kv_fn_member *m = &c->m[targets[i]];
        switch (k->fault) {
        case KV_FN_F_SIGTERM:
        case KV_FN_F_SIGKILL:
        case KV_FN_F_POWERCUT:
        case KV_FN_F_FAILPOINT_FSYNC_EIO: /* restarted; the failpoint is not armed again */
            if (k->fault == KV_FN_F_FAILPOINT_FSYNC_EIO && m->proc.pid)
                kv_fn_member_signal(c, targets[i], SIGKILL); /* it did not stop (error above) */
            if (kv_fn_member_start(c, targets[i]) != 0)
                snprintf(err, sizeof(err), "restart of m%d failed", targets[i]);
            break;
        case KV_FN_F_SIGQUIT_REMOVE: {
            char e2[300] = "";
            int r = kv_fn_cluster_member_add(c, targets[i], 20000, e2, sizeof(e2));
            if (r) {
                snprintf(err, sizeof(err), "MemberAdd of m%d failed (%d): %s", targets[i], r, e2);
                break;
            }
            add_fault(fault_desc, sizeof(fault_desc), &fl, " new id %llx",
                      (unsigned long long)m->member_id);
            if (kv_fn_member_start(c, targets[i]) != 0)
                snprintf(err, sizeof(err), "start of re-added m%d failed", targets[i]);
            break;
        }
        case KV_FN_F_SIGSTOP:
            kv_fn_member_signal(c, targets[i], SIGCONT);
            break;
        case KV_FN_F_BLACKHOLE:
            kvt_proxy_set(m->proxy, 0, 0, 0, 0);
            if (c->target == KV_FN_TARGET_KVD && c->failpoints)
                kv_fn_member_signal(c, targets[i], SIGUSR2); /* heal */
            break;
        case KV_FN_F_DELAY:
        case KV_FN_F_RANDOM_DELAY:
            kvt_proxy_set(m->proxy, 0, 0, 0, 0);
            if (delay_fp(c, k->fault))
                kv_fn_member_signal(c, targets[i], delay_signal(k->fault)); /* off */
            break;
        case KV_FN_F_FAILPOINT_STALL:
            kv_fn_member_signal(c, targets[i], SIGUSR1); /* stall off */
            break;
        case KV_FN_F_FAILPOINT_SLOW_FSYNC:
            kv_fn_member_signal(c, targets[i], SIGRTMIN + 1); /* slow fsync off */
            break;
        default:
            break;
        }
    }
    if (stopped_proxy >= 0)
        kvt_proc_resume(&c->gp[stopped_proxy].proc);
    if (up_member >= 0) { /* evidence that the fault bit, then heal */
        uint64_t b, d;
        uint32_t nc;
        kvt_proxy_stats(c->up[up_member], &b, &d, &nc);
        kvt_proxy_set(c->up[up_member], 0, 0, 0, 0);
        add_fault(fault_desc, sizeof(fault_desc), &fl,
                  " relay:%" PRIu64 "B relayed,%" PRIu64 "B dropped", b - up_relayed0,
                  d - up_dropped0);
    }
    /* (kv_fn_proxies_start starts every proxy that is not running) */
    if ((killed_proxy >= 0 || killed_all) && kv_fn_proxies_start(c, 10000) != 0 && !err[0])
        snprintf(err, sizeof(err), "restart of the killed gRPC proxies failed (see p*/proxy.log)");
    if (killed_all && w && !err[0]) {
        /* The clients must come back through the restarted proxies on their own (libkvclient
         * redials with its backoff, at most 1 s by default): some op succeeds within 10 s. */
        int back = back_through_proxies(w, 10000);
        add_fault(fault_desc, sizeof(fault_desc), &fl,
                  "; first client op ok %d ms after the proxies were back", back);
        if (back < 0)
            snprintf(err, sizeof(err),
                     "no client op succeeded within 10000 ms of every gRPC proxy restarting");
    }
    live_ms = kv_fn_cluster_wait_writable(c, o->live_bound_ms);
    win.heal_us = kv_fn_now_us();
    if (live_ms < 0 && !err[0])
        snprintf(err, sizeof(err), "no write succeeded within %u ms after healing",
                 o->live_bound_ms);
    if (k->fault == KV_FN_F_RESTORE_SNAPSHOT && live_ms >= 0) {
        /* The restored cluster must serve the registers' last values (checked by lin/rev
         * against the reads before the snapshot), then phase 2 loads it. */
        int after = read_registers(c, prefix, KV_FN_KEYS, 901, &h);
        add_fault(fault_desc, sizeof(fault_desc), &fl, ", %d regs re-read", after);
        snprintf(prefix2, sizeof(prefix2), "%s/after", prefix);
        wc.prefix = prefix2;
        wc.seed = rng + 1;
        key_off = KV_FN_PHASE2_KEY_OFFSET;
        if (!k->no_stress && kv_fn_workload_start(&w, &wc) != 0 && !err[0])
            snprintf(err, sizeof(err), "cannot start the stressers after the restore");
    }
    sleep_ms(o->post_ms);
    if (k->until_snapshot) {
        /* Evidence that the faulted member caught up through a snapshot. */
        /* A member cut off for the whole hold must have needed one; a delayed one may not
         * (it is read once). An etcd member behind a blackholed proxy is not cut off: the
         * streams it dialed itself pass through the others' proxies and keep bringing it
         * entries (kvd's isolation failpoint cuts those too). */
        int must =
            k->fault == KV_FN_F_SIGTERM || k->fault == KV_FN_F_SIGQUIT_REMOVE ||
            (k->fault == KV_FN_F_BLACKHOLE && c->target == KV_FN_TARGET_KVD && c->failpoints);
        int64_t got[KV_FN_MAX_MEMBERS] = {0};
        int64_t deadline = kv_fn_now_us() + (must ? 15000000 : 0);
        int all = 0;
        do {
            all = 1;
            for (int i = 0; i < nt; i++) {
                int64_t x = kv_fn_member_metric(c, targets[i], snap_metric(c));
                int restarted = k->fault == KV_FN_F_SIGTERM || k->fault == KV_FN_F_SIGQUIT_REMOVE;
                got[i] = x < 0 ? x : x - (restarted ? 0 : snap_base[i]);
                if (got[i] <= 0)
                    all = 0;
            }
            if (!all && kv_fn_now_us() < deadline)
                sleep_ms(250);
        } while (!all && kv_fn_now_us() < deadline);
        add_fault(fault_desc, sizeof(fault_desc), &fl, "; snapshots received:");
        for (int i = 0; i < nt; i++)
            add_fault(fault_desc, sizeof(fault_desc), &fl, " m%d +%lld", targets[i],
                      (long long)got[i]);
        add_fault(fault_desc, sizeof(fault_desc), &fl, " (%s)", snap_metric(c)[0]);
        if (must && !all && !err[0])
            snprintf(err, sizeof(err), "a faulted member did not receive a snapshot");
    }
stop:
    if (w) {
        kv_fn_workload_stop(w);
        uint64_t a, b;
        kv_fn_workload_counts(w, &a, &b);
        n_ok += a;
        n_fail += b;
        hist_add(&h, w, key_off);
    }
    if (!err[0] || live_ms >= 0) {
        kv_fn_hash_obs obs[KV_FN_MAX_MEMBERS];
        kv_fn_cluster_hash(c, obs, 10000);
        v.hash = kv_fn_hash_check(obs, (size_t)c->n, v.hash_rep, sizeof(v.hash_rep));
    }
    if (hist_add(&h, NULL, 0) == 0) {
        inject_history(o->inject, &h.ops, &h.n_ops, &h.ev, &h.n_ev, h.l);
        kv_fn_window wins[1] = {win};
        size_t n_w = win.start_us ? 1 : 0;
        run_checkers(h.ops, h.n_ops, h.l, h.n_l, h.ev, h.n_ev, wins, n_w, o, &v);
        kv_fn_ll_op *llo = NULL;
        size_t n_llo = 0;
        if (w)
            kv_fn_workload_lease_lin(w, &llo, &n_llo);
        if (n_llo) { /* lease linearizability joins the lease verdict */
            char llrep[2048];
            inject_ll(o->inject, llo, n_llo);
            kv_fn_verdict lv = kv_fn_lease_lin_check(llo, n_llo, wins, n_w, llrep, sizeof(llrep));
            if (lv != KV_FN_PASS) {
                if (v.lease == KV_FN_PASS)
                    v.lease_rep[0] = '\0';
                v.lease = lv;
                size_t used = strlen(v.lease_rep);
                snprintf(v.lease_rep + used, sizeof(v.lease_rep) - used, "%slinearizability: %s",
                         used ? "; " : "", llrep);
            }
        }
        int failed = err[0] || v.lin != KV_FN_PASS || v.rev != KV_FN_PASS ||
                     v.lease != KV_FN_PASS || v.hash != KV_FN_PASS;
        if (failed || o->keep_all) {
            char path[PATH_MAX];
            snprintf(path, sizeof(path), "%s/%s.history", o->root, k->name);
            kv_fn_history_write(path, h.ops, h.n_ops, h.l, h.n_l, h.ev, h.n_ev, wins, n_w);
        }
    }
    hist_free(&h);
    kv_fn_workload_free(w);
    if (snap_path[0] && !o->keep_all && !err[0])
        unlink(snap_path);
report:;
    if (c->n_proxies > 0 && c->target == KV_FN_TARGET_KVD) {
        add_fault(fault_desc, sizeof(fault_desc), &fl, "%sgRPC calls via proxies:", fl ? "; " : "");
        for (int i = 0; i < c->n_proxies; i++) {
            int64_t x = kv_fn_proxy_metric(c, i, kv_fn_proxy_calls_metric);
            add_fault(
                fault_desc, sizeof(fault_desc), &fl, " p%d +%lld", i,
                (long long)(x < 0 ? x : x - (i == killed_proxy || killed_all ? 0 : pcalls0[i])));
        }
    }
    int pst = 0, dead = proxies_died(c, &pst);
    if (dead >= 0 && !err[0])
        snprintf(err, sizeof(err), "gRPC proxy p%d exited on its own (wait status %d): see %s",
                 dead, pst, c->gp[dead].proc.log_path);
    if (o->leaseload) {
        int ncl;
        double gs;
        kv_fn_leaseload_counts(o->leaseload, &ll_kept, &ll_lost, &ll_resp, &ncl, &gs);
        uint64_t dl = kv_fn_leaseload_lost_by_deadline(o->leaseload) - ll_dl0;
        add_fault(fault_desc, sizeof(fault_desc), &fl,
                  "%slease-load %llu kept, %llu renewals, %llu lost", fl ? "; " : "",
                  (unsigned long long)ll_kept, (unsigned long long)(ll_resp - ll_resp0),
                  (unsigned long long)(ll_lost - ll_lost0));
        if (ll_lost > ll_lost0) /* tells a server-side expiry from client-side starvation */
            add_fault(fault_desc, sizeof(fault_desc), &fl,
                      " (%llu answered TTL 0 by the server, %llu unanswered within the TTL)",
                      (unsigned long long)(ll_lost - ll_lost0 - dl), (unsigned long long)dl);
        if (ll_lost > ll_lost0 && !err[0])
            snprintf(err, sizeof(err),
                     "lease-load: %llu kept-alive leases lost during the case (first: %llx)",
                     (unsigned long long)(ll_lost - ll_lost0),
                     (unsigned long long)kv_fn_leaseload_first_lost(o->leaseload));
    }
    int failed = err[0] || v.lin != KV_FN_PASS || v.rev != KV_FN_PASS || v.lease != KV_FN_PASS ||
                 v.hash != KV_FN_PASS;
    char live[32];
    if (live_ms >= 0)
        snprintf(live, sizeof(live), "%dms", live_ms);
    else
        snprintf(live, sizeof(live), "FAIL");
    printf("%-42s %s  fault=[%s] ops=%" PRIu64 " (failed %" PRIu64 ")  lin=%s rev=%s "
           "lease=%s hash=%s live=%s  %.1fs\n",
           k->name, failed ? "FAIL" : "PASS", fault_desc[0] ? fault_desc : "-", n_ok, n_fail,
           kv_fn_verdict_name(v.lin), kv_fn_verdict_name(v.rev), kv_fn_verdict_name(v.lease),
           kv_fn_verdict_name(v.hash), live, (kv_fn_now_us() - t0) / 1e6);
    if (failed) {
        if (err[0])
            printf("    error: %s\n", err);
        if (v.lin != KV_FN_PASS)
            printf("    lin: %s\n", v.lin_rep);
        if (v.rev != KV_FN_PASS)
            printf("    rev: %s\n", v.rev_rep);
        if (v.lease != KV_FN_PASS)
            printf("    lease: %s\n", v.lease_rep);
        if (v.hash != KV_FN_PASS)
            printf("    hash: %s\n", v.hash_rep);
        printf("    history: %s/%s.history  member logs: %s/m*/member.log\n", o->root, k->name,
               o->root);
    }
    fflush(stdout);
    return failed ? KV_FN_RES_FAIL : KV_FN_RES_PASS;
}

int kv_fn_check_file(const char *path, const kv_fn_run_opts *o)
{
    kv_fn_op *ops;
    kv_fn_lease_info *l;
    kv_fn_lease_ev *ev;
    kv_fn_window *w;
    size_t n_ops, n_l, n_ev, n_w;
    int r = kv_fn_history_read(path, &ops, &n_ops, &l, &n_l, &ev, &n_ev, &w, &n_w);
    if (r) {
        fprintf(stderr, "kvfunctional: cannot read %s: %s\n", path, strerror(-r));
        return 2;
    }
    inject_history(o->inject, &ops, &n_ops, &ev, &n_ev, l);
    verdicts v;
    memset(&v, 0, sizeof(v));
    run_checkers(ops, n_ops, l, n_l, ev, n_ev, w, n_w, o, &v);
    printf("lin=%s: %s\nrev=%s: %s\nlease=%s: %s\n", kv_fn_verdict_name(v.lin), v.lin_rep,
           kv_fn_verdict_name(v.rev), v.rev_rep, kv_fn_verdict_name(v.lease), v.lease_rep);
    free(ops);
    free(l);
    free(ev);
    free(w);
    return v.lin == KV_FN_PASS && v.rev == KV_FN_PASS && v.lease == KV_FN_PASS ? 0 : 1;
}
