/* cases: the case table and the run of one case (cases.h). */
#include "cases.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define C(name, f, s, q)                                                                           \
    {                                                                                              \
        name, f, s, q, 0                                                                           \
    }
const kv_fn_case kv_fn_cases[] = {
    C("NO_FAIL_WITH_STRESS", KV_FN_F_NONE, KV_FN_T_NONE, 1),
    {"NO_FAIL_WITH_NO_STRESS_FOR_LIVENESS", KV_FN_F_NONE, KV_FN_T_NONE, 0, 1},
    C("SIGTERM_ONE_FOLLOWER", KV_FN_F_SIGTERM, KV_FN_T_ONE_FOLLOWER, 1),
    C("SIGTERM_LEADER", KV_FN_F_SIGTERM, KV_FN_T_LEADER, 1),
    C("SIGTERM_QUORUM", KV_FN_F_SIGTERM, KV_FN_T_QUORUM, 0),
    C("SIGTERM_ALL", KV_FN_F_SIGTERM, KV_FN_T_ALL, 1),
    C("SIGKILL_ONE_FOLLOWER", KV_FN_F_SIGKILL, KV_FN_T_ONE_FOLLOWER, 0),
    C("SIGKILL_LEADER", KV_FN_F_SIGKILL, KV_FN_T_LEADER, 1),
    C("SIGKILL_QUORUM", KV_FN_F_SIGKILL, KV_FN_T_QUORUM, 1),
    C("SIGKILL_ALL", KV_FN_F_SIGKILL, KV_FN_T_ALL, 0),
    C("SIGSTOP_ONE_FOLLOWER", KV_FN_F_SIGSTOP, KV_FN_T_ONE_FOLLOWER, 0),
    C("SIGSTOP_LEADER_LONGER_THAN_ELECTION", KV_FN_F_SIGSTOP, KV_FN_T_LEADER, 1),
    C("BLACKHOLE_PEER_PORT_TX_RX_ONE_FOLLOWER", KV_FN_F_BLACKHOLE, KV_FN_T_ONE_FOLLOWER, 1),
    C("BLACKHOLE_PEER_PORT_TX_RX_LEADER", KV_FN_F_BLACKHOLE, KV_FN_T_LEADER, 1),
    C("BLACKHOLE_PEER_PORT_TX_RX_QUORUM", KV_FN_F_BLACKHOLE, KV_FN_T_QUORUM, 0),
    C("BLACKHOLE_PEER_PORT_TX_RX_ALL", KV_FN_F_BLACKHOLE, KV_FN_T_ALL, 0),
    C("DELAY_PEER_PORT_TX_RX_ONE_FOLLOWER", KV_FN_F_DELAY, KV_FN_T_ONE_FOLLOWER, 0),
    C("DELAY_PEER_PORT_TX_RX_LEADER", KV_FN_F_DELAY, KV_FN_T_LEADER, 1),
    C("DELAY_PEER_PORT_TX_RX_QUORUM", KV_FN_F_DELAY, KV_FN_T_QUORUM, 0),
    C("DELAY_PEER_PORT_TX_RX_ALL", KV_FN_F_DELAY, KV_FN_T_ALL, 0),
    C("RANDOM_DELAY_PEER_PORT_TX_RX_ONE_FOLLOWER", KV_FN_F_RANDOM_DELAY, KV_FN_T_ONE_FOLLOWER, 0),
    C("RANDOM_DELAY_PEER_PORT_TX_RX_LEADER", KV_FN_F_RANDOM_DELAY, KV_FN_T_LEADER, 0),
    C("RANDOM_DELAY_PEER_PORT_TX_RX_QUORUM", KV_FN_F_RANDOM_DELAY, KV_FN_T_QUORUM, 0),
    C("RANDOM_DELAY_PEER_PORT_TX_RX_ALL", KV_FN_F_RANDOM_DELAY, KV_FN_T_ALL, 0),
    C("FAILPOINTS", KV_FN_F_FAILPOINT_STALL, KV_FN_T_LEADER, 1),
    C("LEADER_TRANSFER_UNDER_LOAD", KV_FN_F_MOVE_LEADER, KV_FN_T_LEADER, 0),
};
const size_t kv_fn_n_cases = sizeof(kv_fn_cases) / sizeof(kv_fn_cases[0]);

static void sleep_ms(uint32_t ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int is_network(kv_fn_fault f)
{
    return f == KV_FN_F_BLACKHOLE || f == KV_FN_F_DELAY || f == KV_FN_F_RANDOM_DELAY;
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
    default:
        return "apply stall (SIGUSR1 failpoint)";
    }
}

/* Restores every member (restart, SIGCONT, clear proxies) and waits for a writable leader. */
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
    return kv_fn_cluster_wait_writable(c, 20000);
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

kv_fn_result kv_fn_case_run(const kv_fn_case *k, kv_fn_cluster *c, const kv_fn_run_opts *o)
{
    int64_t t0 = kv_fn_now_us();
    char prefix[128];
    snprintf(prefix, sizeof(prefix), "/fn/%s", k->name);
    verdicts v;
    memset(&v, 0, sizeof(v));
    v.lin = v.rev = v.lease = v.hash = KV_FN_UNKNOWN;
    char fault_desc[256] = "";
    char err[256] = "";
    int live_ms = -1;
    uint64_t n_ok = 0, n_fail = 0;
    kv_fn_window win = {0};
    kv_fn_workload *w = NULL;
    uint64_t rng = o->seed * 2654435761ULL + (uint64_t)(k - kv_fn_cases) + 1;

    if (heal_all(c) < 0) {
        snprintf(err, sizeof(err), "cluster not writable before the case");
        goto report;
    }
    kv_fn_workload_cfg wc = {.cluster = c,
                             .prefix = prefix,
                             .kv_clients = k->no_stress ? 0 : 4,
                             .keys = 8,
                             .lease_clients = k->no_stress ? 0 : 1,
                             .lease_ttl_s = 3,
                             .op_timeout_ms = 2000,
                             .seed = rng};
    if (wc.kv_clients + wc.lease_clients > 0 && kv_fn_workload_start(&w, &wc) != 0) {
        snprintf(err, sizeof(err), "cannot start the stressers");
        goto report;
    }
    sleep_ms(o->pre_ms);
    int targets[KV_FN_MAX_MEMBERS], leader = -1;
    int nt = pick_targets(k, c, &rng, targets, &leader);
    if (nt < 0) {
        snprintf(err, sizeof(err), "no leader/follower to target");
        goto stop;
    }
    size_t fl = (size_t)snprintf(fault_desc, sizeof(fault_desc), "%s", fault_name(k->fault));
    for (int i = 0; i < nt; i++)
        fl += (size_t)snprintf(fault_desc + fl, sizeof(fault_desc) - fl, "%sm%d%s",
                               i ? "," : " on ", targets[i], targets[i] == leader ? "(L)" : "");
    uint64_t base_relayed = 0, base_dropped = 0;
    if (is_network(k->fault))
        for (int i = 0; i < nt; i++) {
            uint64_t b, d;
            uint32_t nc;
            kvt_proxy_stats(c->m[targets[i]].proxy, &b, &d, &nc);
            base_relayed += b;
            base_dropped += d;
        }
    win.start_us = kv_fn_now_us();
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
            kvt_proxy_set(m->proxy, 0, 0, 1000, 0);
            break;
        case KV_FN_F_RANDOM_DELAY:
            kvt_proxy_set(m->proxy, 0, 0, 600, 500);
            break;
        case KV_FN_F_FAILPOINT_STALL:
            kv_fn_member_signal(c, targets[i], SIGUSR1); /* stall on */
            break;
        case KV_FN_F_MOVE_LEADER: {
            int to = (targets[i] + 1 + (int)((rng >> 33) % (uint64_t)(c->n - 1))) % c->n;
            int r = kv_fn_cluster_move_leader(c, targets[i], to, 5000);
            int now_leader = kv_fn_cluster_leader(c, 1000);
            fl += (size_t)snprintf(fault_desc + fl, sizeof(fault_desc) - fl,
                                   " to m%d: %s, leader now m%d", to, r ? "refused" : "ok",
                                   now_leader);
            if (r)
                snprintf(err, sizeof(err), "MoveLeader to m%d failed (%d)", to, r);
            break;
        }
        default:
            break;
        }
    }
    sleep_ms(o->hold_ms);
    if (is_network(k->fault)) { /* evidence that the fault bit: bytes dropped/relayed */
        uint64_t dropped = 0, relayed = 0;
        for (int i = 0; i < nt; i++) {
            uint64_t b, d;
            uint32_t nc;
            kvt_proxy_stats(c->m[targets[i]].proxy, &b, &d, &nc);
            dropped += d;
            relayed += b;
        }
        fl += (size_t)snprintf(fault_desc + fl, sizeof(fault_desc) - fl,
                               " proxy:%" PRIu64 "B relayed,%" PRIu64 "B dropped",
                               relayed - base_relayed, dropped - base_dropped);
    }
    for (int i = 0; i < nt; i++) {
        kv_fn_member *m = &c->m[targets[i]];
        switch (k->fault) {
        case KV_FN_F_SIGTERM:
        case KV_FN_F_SIGKILL:
            if (kv_fn_member_start(c, targets[i]) != 0)
                snprintf(err, sizeof(err), "restart of m%d failed", targets[i]);
            break;
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
            break;
        case KV_FN_F_FAILPOINT_STALL:
            kv_fn_member_signal(c, targets[i], SIGUSR1); /* stall off */
            break;
        default:
            break;
        }
    }
    live_ms = kv_fn_cluster_wait_writable(c, o->live_bound_ms);
    win.heal_us = kv_fn_now_us();
    if (live_ms < 0)
        snprintf(err, sizeof(err), "no write succeeded within %u ms after healing",
                 o->live_bound_ms);
    sleep_ms(o->post_ms);
stop:
    if (w) {
        kv_fn_workload_stop(w);
        kv_fn_workload_counts(w, &n_ok, &n_fail);
    }
    if (!err[0] || live_ms >= 0) {
        kv_fn_hash_obs obs[KV_FN_MAX_MEMBERS];
        kv_fn_cluster_hash(c, obs, 10000);
        v.hash = kv_fn_hash_check(obs, (size_t)c->n, v.hash_rep, sizeof(v.hash_rep));
    }
    {
        const kv_fn_op *cops = NULL;
        const kv_fn_lease_info *cl = NULL;
        const kv_fn_lease_ev *cev = NULL;
        size_t n_ops = 0, n_l = 0, n_ev = 0;
        if (w)
            kv_fn_workload_history(w, &cops, &n_ops, &cl, &n_l, &cev, &n_ev);
        kv_fn_op *ops = malloc((n_ops + 1) * sizeof(*ops));
        kv_fn_lease_ev *ev = malloc((n_ev + 1) * sizeof(*ev));
        if (ops && ev) {
            if (n_ops)
                memcpy(ops, cops, n_ops * sizeof(*ops));
            if (n_ev)
                memcpy(ev, cev, n_ev * sizeof(*ev));
            inject_history(o->inject, &ops, &n_ops, &ev, &n_ev, cl);
            kv_fn_window wins[1] = {win};
            size_t n_w = win.start_us ? 1 : 0;
            run_checkers(ops, n_ops, cl, n_l, ev, n_ev, wins, n_w, o, &v);
            int failed = err[0] || v.lin != KV_FN_PASS || v.rev != KV_FN_PASS ||
                         v.lease != KV_FN_PASS || v.hash != KV_FN_PASS;
            if (failed || o->keep_all) {
                char path[PATH_MAX];
                snprintf(path, sizeof(path), "%s/%s.history", o->root, k->name);
                kv_fn_history_write(path, ops, n_ops, cl, n_l, ev, n_ev, wins, n_w);
            }
        }
        free(ops);
        free(ev);
    }
    kv_fn_workload_free(w);
report:;
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
