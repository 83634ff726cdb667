/*
 * cluster_lease: leases in a 3-member cluster.
 *   - a lease renewed only through a follower stays alive through 10x its TTL (renewals are
 *     forwarded to the leader in batches) and its key vanishes within TTL + 1 s once they stop
 *     (asserted with 0.5 s more for CI noise); a server-chosen id granted through the
 *     follower is named by the leader (its low 16 bits are the leader's member id), an id the
 *     client chose is kept;
 *   - 1,000 leases kept alive through all members (three libkvclient clients, one shared
 *     keepalive stream each) survive a kill -9 of the leader; a lease nobody renews still
 *     expires within TTL + election timeout of the new leader's election (+2 s margin);
 *   - expiry state lives on the leader only (kvd_lease_heap_size 0 on followers) and moves
 *     with a leader transfer; a lease's remaining TTL survives the transfer (checkpoints
 *     through the log, --lease-checkpoint-interval=1s here);
 *   - the peer connections stay one per member pair under keepalive load;
 *   - a full forward queue (--max-pending-lease-forwards) drops a keepalive renewal without
 *     ending its stream and sheds a TimeToLive with RESOURCE_EXHAUSTED.
 * Clients: libkvclient (one shared keepalive stream per client) and etcdctl 3.4.
 * Figures (renewals forwarded, batches, time to expiry) are logged to stderr.
 */
#include "cl_util.h"
#include "grpc_raw.h"
#include "kvclient.h"
#include "kvt_kvc.h"
#include "rpc.pb-c.h"

#include <criterion/criterion.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static kvt_cluster g_c;

static void fini(void)
{
    kvt_cluster_destroy(&g_c);
}

/* A libkvclient client on member i first, then (failover) the other running members. */
static kvc_client *client_on(int i)
{
    const char *eps[KVT_MAX_MEMBERS];
    size_t n = 0;
    for (int k = 0; k < g_c.n; k++) {
        int j = (i + k) % g_c.n;
        if (g_c.m[j].in_config)
            eps[n++] = g_c.m[j].endpoint;
    }
    kvc_config cfg;
    kvc_config_default(&cfg);
    cfg.endpoints = eps;
    cfg.n_endpoints = n;
    cfg.dial_timeout_ms = 3000;
    kvc_client *c = NULL;
    kvc_error err;
    int r = kvc_open(&c, &cfg, &err);
    cr_assert_eq(r, 0, "kvc_open(%s): %s", g_c.m[i].endpoint, err.message);
    return c;
}

/* A client talking to member i only. */
static kvc_client *client_only(int i)
{
    return kvt_kvc_open(g_c.m[i].endpoint);
}

static int64_t grant(kvc_client *c, int64_t ttl)
{
    kvc_lease_grant_result g;
    kvc_error err;
    int r = kvc_lease_grant(c, ttl, 0, 0, 10000, &g, &err);
    cr_assert_eq(r, 0, "grant: %d %s", r, err.message);
    return g.id;
}

/* TimeToLive through client c: remaining TTL (-1 unknown), *granted (optional). */
static int64_t ttl_of(kvc_client *c, int64_t id, int64_t *granted)
{
    kvc_lease_ttl_result t;
    kvc_error err;
    int r = kvc_lease_time_to_live(c, id, 0, 10000, &t, &err);
    cr_assert_eq(r, 0, "timetolive %" PRIx64 ": %d %s", (uint64_t)id, r, err.message);
    int64_t ttl = t.ttl;
    if (granted)
        *granted = t.granted_ttl;
    kvc_lease_ttl_result_free(&t);
    return ttl;
}

static int key_exists(kvc_client *c, const char *key)
{
    kvc_range_result res;
    kvc_error err;
    int r = kvc_get(c, key, strlen(key), NULL, 10000, &res, &err);
    cr_assert_eq(r, 0, "get %s: %d %s", key, r, err.message);
    int found = res.n_kvs > 0;
    kvc_range_result_free(&res);
    return found;
}

static double metric(int i, const char *series)
{
    return cl_metric(&g_c, i, series);
}

static double metric_sum(int i, const char *name)
{
    return cl_metric_sum(&g_c, i, name);
}

/* Polls until metric `series` of member i equals want; returns ms waited or -1. */
static int wait_metric(int i, const char *series, double want, uint32_t timeout_ms)
{
    uint64_t t0 = kvt_now_ms();
    for (;;) {
        if (metric(i, series) == want)
            return (int)(kvt_now_ms() - t0);
        if (kvt_now_ms() - t0 > timeout_ms)
            return -1;
        kvt_sleep_ms(100);
    }
}

/* SIGTERM member i (its keepalive streams may still be open) and check its log for
 * sanitizer reports (leaks show only at a clean exit; the fixture kills with SIGKILL). */
static void stop_clean(int i)
{
    cr_assert_eq(kvt_member_stop(&g_c, i, 10000), 0, "stop %s", g_c.m[i].name);
    char *log = NULL;
    cr_assert_eq(kvt_member_log(&g_c, i, 1 << 20, &log), 0);
    int bad = strstr(log, "Sanitizer") != NULL || strstr(log, "runtime error") != NULL;
    if (bad)
        fprintf(stderr, "%s log:\n%s\n", g_c.m[i].name, log);
    free(log);
    cr_assert(!bad, "sanitizer report in %s's log", g_c.m[i].name);
}

static int follower_of(int leader)
{
    for (int i = 0; i < g_c.n; i++)
        if (i != leader && kvt_member_running(&g_c, i))
            return i;
    return -1;
}

Test(cluster_lease, renewed_through_follower, .fini = fini, .timeout = 180)
{
    cr_assert_eq(cl_start(&g_c, 3, 0), 0);
    int l = kvt_cluster_wait_leader(&g_c, 10000, NULL);
    cr_assert_geq(l, 0);
    int f = follower_of(l);
    kvc_client *c = client_only(f);
    const int64_t ttl = 2;
    int64_t id = grant(c, ttl);
    /* A server-chosen id is named by the leader, whichever member the grant came through, so
     * ids follow the log (docs/ARCHITECTURE.md "Leases"): its low 16 bits are the leader's
     * member id. An id the client chose is kept. */
    cl_ep_status st[3];
    int ns = 0;
    cr_assert_eq(cl_endpoint_status(&g_c, st, 3, &ns), 0);
    cr_assert_geq(ns, 1);
    cr_assert_eq((uint64_t)id & 0xffff, st[0].leader & 0xffff,
                 "lease %" PRIx64
                 " granted through the follower: low bits not the leader's %" PRIx64,
                 (uint64_t)id, st[0].leader);
    kvc_lease_grant_result own;
    kvc_error gerr;
    cr_assert_eq(kvc_lease_grant(c, ttl, 0x123456789, 0, 10000, &own, &gerr), 0, "grant: %s",
                 gerr.message);
    cr_assert_eq(own.id, 0x123456789);
    kvc_put_opts po = {.lease = id};
    kvc_error err;
    cr_assert_eq(kvc_put(c, "/lease/a", 8, "v", 1, &po, 10000, NULL, &err), 0, "put: %s",
                 err.message);

    /* etcdctl 3.4 against the follower: one renewal on its own stream (send, half-close,
     * read), answered after the leader did. */
    char hex[32];
    snprintf(hex, sizeof(hex), "%" PRIx64, (uint64_t)id);
    kvt_cmd_result res;
    cr_assert_eq(kvt_ctl(&g_c, f, 20000, &res, "lease", "keep-alive", "--once", hex, NULL), 0);
    char want[96];
    /* etcdctl prints ids as %016x; hex (no leading zeros) is what it reads */
    char hex16[32];
    snprintf(hex16, sizeof(hex16), "%016" PRIx64, (uint64_t)id);
    snprintf(want, sizeof(want), "lease %s keepalived with TTL(%" PRId64 ")", hex16, ttl);
    cr_assert(res.exit_code == 0 && strstr(res.out, want) != NULL,
              "etcdctl lease keep-alive --once via follower: exit %d out '%s' err '%s'",
              res.exit_code, res.out, res.err ? res.err : "");
    kvt_cmd_result_free(&res);

    kvc_keepalive *ka = NULL;
    cr_assert_eq(kvc_lease_keepalive(c, id, ttl, NULL, NULL, &ka, &err), 0, "keepalive: %s",
                 err.message);
    /* 10x the TTL on renewals that all travel follower -> leader. */
    uint64_t t0 = kvt_now_ms();
    int responses = 0;
    while (kvt_now_ms() - t0 < (uint64_t)(10 * ttl * 1000)) {
        kvc_ka_event ev;
        int r = kvc_keepalive_next(ka, &ev, 200);
        if (r == 0) {
            cr_assert_eq(ev.type, KVC_KA_RESPONSE, "lease lost after %" PRIu64 " ms",
                         kvt_now_ms() - t0);
            responses++;
        }
    }
    cr_assert_eq(kvc_keepalive_lost(ka), 0);
    /* One renewal per TTL/3: ~30 in 10 TTLs; fewer than 20 would mean gaps near the TTL. */
    cr_assert_geq(responses, 20, "only %d renewals answered in %" PRId64 " s", responses, 10 * ttl);
    /* TimeToLive through the follower is answered by the leader (forwarded). */
    int64_t granted = 0;
    int64_t left = ttl_of(c, id, &granted);
    cr_assert(left >= 0 && left <= ttl && granted == ttl,
              "TimeToLive via follower: %" PRId64 " of %" PRId64, left, granted);
    cr_assert(key_exists(c, "/lease/a"), "key of the kept-alive lease vanished");
    /* With keys: the TTLs from the leader, the keys from the follower's own store. */
    kvc_lease_ttl_result tk;
    cr_assert_eq(kvc_lease_time_to_live(c, id, 1, 10000, &tk, &err), 0, "%s", err.message);
    cr_assert(tk.ttl > 0 && tk.n_keys == 1 && tk.key_lens[0] == 8 &&
                  memcmp(tk.keys[0], "/lease/a", 8) == 0,
              "TimeToLive with keys via follower: ttl %" PRId64 ", %zu keys", tk.ttl, tk.n_keys);
    kvc_lease_ttl_result_free(&tk);
    /* LeaseLeases on a follower: its replicated table. */
    kvc_lease_leases_result ll;
    cr_assert_eq(kvc_lease_leases(c, 10000, &ll, &err), 0, "%s", err.message);
    cr_assert(ll.n_ids == 1 && ll.ids[0] == id, "leases via follower: %zu", ll.n_ids);
    kvc_lease_leases_result_free(&ll);
    double fwd = metric(f, "kvd_lease_fwd_renewals_total");
    double batches = metric(f, "kvd_lease_fwd_batches_total");
    double served = metric(l, "kvd_lease_fwd_served_total");
    fprintf(stderr, "  follower %s forwarded %.0f requests in %.0f batches; leader served %.0f\n",
            g_c.m[f].name, fwd, batches, served);
    cr_assert(fwd >= 5 && batches >= 1 && served >= fwd - 1, "forwarding metrics");
    cr_assert_eq(metric(f, "kvd_lease_heap_size"), 0, "a follower keeps an expiry heap");

    /* Renewals stop: the key vanishes within TTL + 1 s (the last renewal was at most TTL/3
     * before the stop, so the leader's deadline is at most TTL after it); 0.5 s more is
     * allowed for CI noise (ASan build, shared cores). */
    kvc_keepalive_stop(ka);
    uint64_t t1 = kvt_now_ms();
    while (key_exists(c, "/lease/a") && kvt_now_ms() - t1 < 10000)
        kvt_sleep_ms(50);
    uint64_t gone = kvt_now_ms() - t1;
    fprintf(stderr,
            "  key gone %" PRIu64 " ms after the last renewal stopped (TTL %" PRId64 " s)\n", gone,
            ttl);
    cr_assert_lt(gone, (uint64_t)(ttl * 1000 + 1000 + 500), "key still there after %" PRIu64 " ms",
                 gone);
    cr_assert_eq(ttl_of(c, id, NULL), -1);
    kvc_close(c);
    stop_clean(f);
}

#define N_LEASES 1000

/* Grants ids[k] for every k = first (mod step) on client c and keeps it alive at once (one
 * thread per client, so the three clients grant in parallel; under ASan granting 1,000 takes
 * longer than the TTL). */
typedef struct grant_job {
    kvc_client *c;
    int64_t *ids;
    kvc_keepalive **ka;
    int first, step, n, failed;
    int64_t ttl;
    char msg[400];
} grant_job;

static void *grant_run(void *arg)
{
    grant_job *j = arg;
    for (int k = j->first; k < j->n; k += j->step) {
        kvc_lease_grant_result g;
        kvc_error err;
        int r = kvc_lease_grant(j->c, j->ttl, 0, 0, 10000, &g, &err);
        if (r != 0) {
            j->failed = 1;
            snprintf(j->msg, sizeof(j->msg), "grant %d: %d %s", k, r, err.message);
            return NULL;
        }
        j->ids[k] = g.id;
        r = kvc_lease_keepalive(j->c, g.id, j->ttl, NULL, NULL, &j->ka[k], &err);
        if (r != 0) {
            j->failed = 1;
            snprintf(j->msg, sizeof(j->msg), "keepalive %d: %d %s", k, r, err.message);
            return NULL;
        }
    }
    return NULL;
}

Test(cluster_lease, kill_leader_while_kept_alive, .fini = fini, .timeout = 300)
{
    cr_assert_eq(cl_start(&g_c, 3, 0), 0);
    int l = kvt_cluster_wait_leader(&g_c, 10000, NULL);
    cr_assert_geq(l, 0);
    /* The followers' clients talk to their follower only (renewals must be forwarded); the
     * leader's client fails over to the others when it is killed. Each client carries a
     * third of the leases on its one keepalive stream. */
    kvc_client *cl[3];
    for (int i = 0; i < 3; i++)
        cl[i] = i == l ? client_on(i) : client_only(i);
    const int64_t ttl = 3;
    static int64_t ids[N_LEASES];
    static kvc_keepalive *ka[N_LEASES];
    kvc_error err;
    uint64_t tg = kvt_now_ms();
    grant_job jobs[3];
    pthread_t th[3];
    for (int i = 0; i < 3; i++) {
        jobs[i] = (grant_job){
            .c = cl[i], .ids = ids, .ka = ka, .first = i, .step = 3, .n = N_LEASES, .ttl = ttl};
        cr_assert_eq(pthread_create(&th[i], NULL, grant_run, &jobs[i]), 0);
    }
    for (int i = 0; i < 3; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 3; i++)
        cr_assert(!jobs[i].failed, "%s", jobs[i].msg);
    fprintf(stderr, "  %d leases granted and kept alive in %" PRIu64 " ms\n", N_LEASES,
            kvt_now_ms() - tg);
    /* A lease nobody renews, with a key, granted through a follower. */
    kvc_client *fc = cl[(l + 1) % 3];
    int64_t lonely = grant(fc, ttl);
    kvc_put_opts po = {.lease = lonely};
    cr_assert_eq(kvc_put(fc, "/lease/lonely", 13, "v", 1, &po, 10000, NULL, &err), 0, "put: %s",
                 err.message);
    kvt_sleep_ms(1500);
    for (int i = 0; i < 3; i++)
        if (i != l)
            cr_assert_eq(metric(i, "kvd_lease_heap_size"), 0, "follower %s has a heap",
                         g_c.m[i].name);

    uint64_t t0 = kvt_now_ms();
    cr_assert_eq(kvt_member_kill9(&g_c, l), 0);
    int nl = kvt_cluster_wait_leader(&g_c, 15000, NULL);
    cr_assert_geq(nl, 0, "no new leader");
    uint64_t t_nl = kvt_now_ms();
    fprintf(stderr, "  new leader %s after %" PRIu64 " ms\n", g_c.m[nl].name, t_nl - t0);
    /* Three TTLs after the kill; meanwhile watch the unrenewed lease's key go. */
    kvc_client *chk = client_only(nl);
    uint64_t lonely_gone = 0;
    while (kvt_now_ms() - t0 < (uint64_t)(3 * ttl * 1000) ||
           (!lonely_gone && kvt_now_ms() - t0 < 20000)) {
        if (!lonely_gone && !key_exists(chk, "/lease/lonely"))
            lonely_gone = kvt_now_ms();
        kvt_sleep_ms(100);
    }

    int lost = 0, lost_by[3] = {0, 0, 0};
    for (int k = 0; k < N_LEASES; k++)
        if (kvc_keepalive_lost(ka[k])) {
            lost++;
            lost_by[k % 3]++;
        }
    if (lost)
        fprintf(stderr, "  lost per client (member m0..m2, leader was m%d, now m%d): %d %d %d\n", l,
                nl, lost_by[0], lost_by[1], lost_by[2]);
    int expired = 0;
    for (int k = 0; k < N_LEASES; k++)
        if (ttl_of(chk, ids[k], NULL) < 0)
            expired++;
    double revoked = metric(nl, "kvd_lease_revoked_total");
    double fwd = 0, resent = 0;
    for (int i = 0; i < 3; i++)
        if (i != l) {
            fwd += metric(i, "kvd_lease_fwd_renewals_total");
            resent += metric(i, "kvd_lease_fwd_resent_total");
        }
    fprintf(stderr,
            "  %d of %d leases expired, %d reported lost by clients; revocations %.0f; "
            "forwarded %.0f, batches re-sent %.0f\n",
            expired, N_LEASES, lost, revoked, fwd, resent);
    for (int i = 0; i < 3; i++) {
        kvc_stats st;
        kvc_stats_get(cl[i], &st);
        fprintf(stderr,
                "  client on m%d: renewals sent %" PRIu64 ", answered %" PRIu64
                ", reconnects %" PRIu64 "",
                i, st.renewals_sent, st.responses_received, st.reconnects);
        if (i != l)
            fprintf(stderr, "; m%d forward timeouts %.0f, shed %.0f, retried %.0f", i,
                    metric(i, "kvd_lease_fwd_timeouts_total"),
                    metric(i, "kvd_lease_fwd_shed_total"),
                    metric(i, "kvd_lease_fwd_retried_total"));
        fprintf(stderr, "\n");
    }
    fprintf(stderr,
            "  unrenewed lease's key gone %" PRIu64 " ms after the kill, %" PRIu64
            " ms after the new leader was seen (bound TTL %" PRId64 " s + election %u ms + 2 s)\n",
            lonely_gone ? lonely_gone - t0 : 0, lonely_gone ? lonely_gone - t_nl : 0, ttl,
            CL_ELECTION_MS);
    cr_assert_eq(expired, 0, "%d leases expired", expired);
    cr_assert_eq(lost, 0, "%d leases reported lost", lost);
    /* The lease nobody renewed did expire, within TTL + election timeout of the new leader
     * (its promote extends every deadline by the election timeout). Margin 2 s: the promote
     * follows the first commit of the new term, 1,001 deadlines in one second are spread at
     * 3/4 of --lease-revoke-rate (up to +0.34 s here, as etcd), the revoke is a proposal, and
     * the ASan build on 2 shared cores is slow (release measured ~3.5 s, ASan ~4.6 s). */
    cr_assert(lonely_gone != 0, "the unrenewed lease's key survived 20 s");
    cr_assert_leq(lonely_gone - t_nl, (uint64_t)(ttl * 1000 + CL_ELECTION_MS + 2000),
                  "unrenewed lease expired %" PRIu64 " ms after the new leader",
                  lonely_gone - t_nl);
    cr_assert_eq(ttl_of(chk, lonely, NULL), -1, "an unrenewed lease survived");
    cr_assert_eq(revoked, 1, "revocations on the new leader: %.0f, want 1 (the lonely lease)",
                 revoked);
    for (int k = 0; k < N_LEASES; k++)
        kvc_keepalive_stop(ka[k]);
    kvc_close(chk);
    for (int i = 0; i < 3; i++)
        kvc_close(cl[i]);
}

/* Starts a 3-member cluster with the cluster tests' timeouts and extra kvd flags. */
static void start_with(const char *const *args)
{
    kvt_cluster_opts o;
    kvt_cluster_opts_default(&o, 3);
    o.heartbeat_ms = CL_HEARTBEAT_MS;
    o.election_ms = CL_ELECTION_MS;
    o.kvd_args = args;
    cr_assert_eq(kvt_cluster_init(&g_c, &o), 0);
    cr_assert_eq(kvt_cluster_start(&g_c, 60000), 0);
}

/*
 * Heap on the leader only, moved by a transfer; remaining TTLs survive the transfer.
 * The leader checkpoints remaining TTLs through the log every --lease-checkpoint-interval
 * (1 s here; etcd 3.4's rule and 5 min default). After the transfer a lease may have gained at
 * most: the checkpoint's age (<= the interval), the round-up of LeaseCheckpoint's whole
 * seconds (< 1 s: it never loses time) and the election timeout the new leader's promote adds
 * (etcd's Promote(electionTimeout)). It must never have lost time. Without checkpoints every
 * lease would restart from its full TTL (60 s instead of ~52 s here).
 */
#define CP_INTERVAL_MS 1000

Test(cluster_lease, heap_on_leader_only, .fini = fini, .timeout = 180)
{
    static const char *const args[] = {"--lease-checkpoint-interval=1s", NULL};
    start_with(args);
    int l = kvt_cluster_wait_leader(&g_c, 10000, NULL);
    cr_assert_geq(l, 0);
    kvc_client *c = client_on(follower_of(l));
    enum { n = 50 };
    const int64_t ttl = 60;
    int64_t ids[n];
    uint64_t tg = kvt_now_ms();
    for (int k = 0; k < n; k++)
        ids[k] = grant(c, ttl);
    cr_assert_geq(wait_metric(l, "kvd_lease_heap_size", n, 10000), 0, "leader heap %.0f",
                  metric(l, "kvd_lease_heap_size"));
    for (int i = 0; i < 3; i++) {
        cr_assert_geq(wait_metric(i, "kvd_lease_active", n, 10000), 0, "%s holds %.0f leases",
                      g_c.m[i].name, metric(i, "kvd_lease_active"));
        if (i != l)
            cr_assert_eq(metric(i, "kvd_lease_heap_size"), 0, "follower %s heap %.0f",
                         g_c.m[i].name, metric(i, "kvd_lease_heap_size"));
    }
    /* Let the leases age 8 s (never renewed), then read their remaining TTL on the leader. */
    while (kvt_now_ms() - tg < 8000)
        kvt_sleep_ms(100);
    kvc_client *lc = client_only(l);
    int64_t before[n];
    for (int k = 0; k < n; k++) {
        before[k] = ttl_of(lc, ids[k], NULL);
        cr_assert(before[k] > 0 && before[k] < ttl - 5, "lease %d: %" PRId64 " s left", k,
                  before[k]);
    }
    uint64_t tb = kvt_now_ms();
    kvc_close(lc);

    int to = follower_of(l);
    char err[256] = "";
    cr_assert_eq(kvt_cluster_move_leader(&g_c, to, 10000, err, sizeof(err)), 0, "move: %s", err);
    int w = wait_metric(to, "kvd_lease_heap_size", n, 10000);
    cr_assert_geq(w, 0, "new leader %s heap %.0f", g_c.m[to].name,
                  metric(to, "kvd_lease_heap_size"));
    cr_assert_geq(wait_metric(l, "kvd_lease_heap_size", 0, 5000), 0, "old leader heap %.0f",
                  metric(l, "kvd_lease_heap_size"));
    for (int i = 0; i < 3; i++)
        if (i != to)
            cr_assert_eq(metric(i, "kvd_lease_heap_size"), 0);
    fprintf(stderr, "  heap moved to %s within %d ms of the transfer\n", g_c.m[to].name, w);

    /* Remaining TTLs on the new leader. TimeToLive truncates to whole seconds, so a reading r
     * means [r, r+1) s: expected (ms) = before*1000 - elapsed, plus/minus 1 s of truncation. */
    kvc_client *nc = client_only(to);
    int64_t max_gain = INT64_MIN, min_gain = INT64_MAX;
    for (int k = 0; k < n; k++) {
        int64_t after = ttl_of(nc, ids[k], NULL);
        int64_t elapsed = (int64_t)(kvt_now_ms() - tb);
        int64_t gain = after * 1000 - (before[k] * 1000 - elapsed);
        if (gain > max_gain)
            max_gain = gain;
        if (gain < min_gain)
            min_gain = gain;
        cr_assert_geq(gain, -1000,
                      "lease %d lost time in the transfer: %" PRId64 " s before, %" PRId64
                      " s %" PRId64 " ms later",
                      k, before[k], after, elapsed);
        cr_assert_leq(gain, CP_INTERVAL_MS + 1000 + CL_ELECTION_MS + 1000,
                      "lease %d: %" PRId64 " s left before the transfer, %" PRId64 " s %" PRId64
                      " ms later (checkpoint lost?)",
                      k, before[k], after, elapsed);
    }
    fprintf(stderr,
            "  remaining TTL after the transfer vs before minus elapsed: %+" PRId64 "..%+" PRId64
            " ms (1 s of it is TimeToLive truncation; bound %+d ms); checkpoints "
            "proposed by the old leader: %.0f\n",
            min_gain, max_gain, CP_INTERVAL_MS + 1000 + CL_ELECTION_MS + 1000,
            metric(l, "kvd_lease_checkpoints_total"));
    kvc_close(nc);
    kvc_close(c);
}

/* ESTABLISHED (state 01) or TIME_WAIT (06) IPv4 connections whose remote port is a member's
 * advertised peer port (the proxy in front of it): member-to-member connections. */
static int count_peer_conns(int state)
{
    FILE *fp = fopen("/proc/net/tcp", "r");
    cr_assert_not_null(fp);
    char line[512];
    int n = 0;
    /* each connection once: a listing read page by page can show one twice when others open
     * or close sockets meanwhile (TIME_WAIT entries have inode 0: keyed by their ports) */
    unsigned seen[1024][4];
    if (fgets(line, sizeof(line), fp) == NULL) {
        fclose(fp);
        return 0;
    }
    while (fgets(line, sizeof(line), fp)) {
        unsigned laddr, lport, raddr, rport, st;
        if (sscanf(line, " %*d: %8x:%x %8x:%x %x", &laddr, &lport, &raddr, &rport, &st) != 5)
            continue;
        if ((int)st != state)
            continue;
        unsigned key[4] = {laddr, lport, raddr, rport};
        int dup = 0;
        for (int i = 0; i < n && i < 1024 && !dup; i++)
            dup = memcmp(seen[i], key, sizeof key) == 0;
        if (dup)
            continue;
        for (int i = 0; i < g_c.n; i++)
            if (rport == g_c.m[i].proxy_port) {
                if (n < 1024)
                    memcpy(seen[n], key, sizeof key);
                n++;
            }
    }
    fclose(fp);
    return n;
}

Test(cluster_lease, one_peer_connection_per_pair, .fini = fini, .timeout = 180)
{
    cr_assert_eq(cl_start(&g_c, 3, 0), 0);
    int l = kvt_cluster_wait_leader(&g_c, 10000, NULL);
    cr_assert_geq(l, 0);
    int before = count_peer_conns(1);
    cr_assert_eq(before, 3, "peer connections at rest: %d, want 3", before);
    /* 300 leases kept alive through the two followers with the minimum TTL (renewal every
     * ~1/3 s each): ~600 forwarded renewals/s. */
    kvc_client *cl[2];
    int fi = 0;
    for (int i = 0; i < 3; i++)
        if (i != l)
            cl[fi++] = client_only(i);
    enum { N = 300 };
    static kvc_keepalive *ka[N];
    kvc_error err;
    for (int k = 0; k < N; k++) {
        int64_t id = grant(cl[k % 2], 1);
        cr_assert_eq(kvc_lease_keepalive(cl[k % 2], id, 1, NULL, NULL, &ka[k], &err), 0, "%s",
                     err.message);
    }
    uint64_t t0 = kvt_now_ms();
    int max_est = 0;
    double f0 = 0, conn0 = 0;
    for (int i = 0; i < 3; i++)
        conn0 += metric_sum(i, "kvd_peer_connects_total");
    for (int i = 0; i < 3; i++)
        if (i != l)
            f0 += metric(i, "kvd_lease_fwd_renewals_total");
    while (kvt_now_ms() - t0 < 5000) {
        int e = count_peer_conns(1);
        if (e > max_est)
            max_est = e;
        kvt_sleep_ms(250);
    }
    double fwd = 0, batches = 0;
    for (int i = 0; i < 3; i++)
        if (i != l) {
            fwd += metric(i, "kvd_lease_fwd_renewals_total");
            batches += metric(i, "kvd_lease_fwd_batches_total");
        }
    /* New connections during the load, counted by the members themselves (a TIME_WAIT count
     * in /proc/net/tcp can also hold connections of an earlier cluster whose port the kernel
     * handed out again). */
    double conns = -conn0;
    for (int i = 0; i < 3; i++)
        conns += metric_sum(i, "kvd_peer_connects_total");
    int tw = count_peer_conns(6);
    int lost = 0;
    for (int k = 0; k < N; k++)
        lost += kvc_keepalive_lost(ka[k]) ? 1 : 0;
    fprintf(stderr,
            "  peer connections: %d at rest, at most %d under load, %.0f new during it, %d in "
            "TIME_WAIT; %.0f renewals/s forwarded (%.1f per batch on average); %d lost\n",
            before, max_est, conns, tw, (fwd - f0) / 5.0, batches > 0 ? fwd / batches : 0.0, lost);
    fprintf(stderr,
            "  leader: expired %.0f, revoked %.0f; followers retried %.0f+%.0f, shed "
            "%.0f+%.0f, timeouts %.0f+%.0f\n",
            metric(l, "kvd_lease_expired_total"), metric(l, "kvd_lease_revoked_total"),
            metric((l + 1) % 3, "kvd_lease_fwd_retried_total"),
            metric((l + 2) % 3, "kvd_lease_fwd_retried_total"),
            metric((l + 1) % 3, "kvd_lease_fwd_shed_total"),
            metric((l + 2) % 3, "kvd_lease_fwd_shed_total"),
            metric((l + 1) % 3, "kvd_lease_fwd_timeouts_total"),
            metric((l + 2) % 3, "kvd_lease_fwd_timeouts_total"));
    cr_assert_eq(max_est, 3, "peer connections under keepalive load: %d", max_est);
    cr_assert_eq(conns, 0,
                 "peer connections established under keepalive load: %.0f "
                 "(%d in TIME_WAIT)",
                 conns, tw);
    cr_assert_eq(lost, 0);
    cr_assert_gt(fwd - f0, 0);
    /* A follower stops while its keepalive streams are busy forwarding. */
    stop_clean((l + 1) % 3);
    for (int k = 0; k < N; k++)
        kvc_keepalive_stop(ka[k]);
    kvc_close(cl[0]);
    kvc_close(cl[1]);
}

/* One renewal on its own LeaseKeepAlive stream (send, half-close, read): grpc status and
 * message of the answer. */
typedef struct ka_call {
    uint16_t port;
    int64_t id;
    int rc, status;
    int64_t ttl;
    char msg[160];
} ka_call;

static void *ka_call_run(void *arg)
{
    ka_call *k = arg;
    kv_it_grpc *g = NULL;
    k->rc = kv_it_grpc_open(&g, "127.0.0.1", k->port, 5000);
    if (k->rc)
        return NULL;
    Etcdserverpb__LeaseKeepAliveRequest req = ETCDSERVERPB__LEASE_KEEP_ALIVE_REQUEST__INIT;
    req.id = k->id;
    uint8_t buf[32];
    size_t len = etcdserverpb__lease_keep_alive_request__pack(&req, buf);
    uint8_t *resp = NULL;
    size_t rlen = 0;
    k->rc = kv_it_grpc_call(g, "/etcdserverpb.Lease/LeaseKeepAlive", buf, len, &resp, &rlen, 20000,
                            &k->status, k->msg, sizeof(k->msg));
    if (k->rc == 0) {
        Etcdserverpb__LeaseKeepAliveResponse *r =
            etcdserverpb__lease_keep_alive_response__unpack(NULL, rlen, resp);
        k->ttl = r ? r->ttl : -100;
        if (r)
            etcdserverpb__lease_keep_alive_response__free_unpacked(r, NULL);
    }
    free(resp);
    kv_it_grpc_close(g);
    return NULL;
}

Test(cluster_lease, forward_queue_bound, .fini = fini, .timeout = 180)
{
    static const char *const args[] = {"--max-pending-lease-forwards=4", NULL};
    start_with(args);
    int l = kvt_cluster_wait_leader(&g_c, 10000, NULL);
    cr_assert_geq(l, 0);
    int f = follower_of(l);
    kvc_client *c = client_only(f);
    /* Distinct leases: renewals of one lease coalesce into one forward (lease_fwd.h). */
    int64_t ids[5];
    for (int k = 0; k < 5; k++)
        ids[k] = grant(c, 60);
    int64_t id = ids[0];
    kvc_close(c);

    /* Cut the follower off: its forwarded renewals wait (up to 5 s + two election timeouts). */
    cr_assert_eq(kvt_member_partition(&g_c, f, 1), 0);
    ka_call held[4];
    pthread_t th[4];
    for (int k = 0; k < 4; k++) {
        memset(&held[k], 0, sizeof(held[k]));
        held[k].port = g_c.m[f].client_port;
        held[k].id = ids[k];
        cr_assert_eq(pthread_create(&th[k], NULL, ka_call_run, &held[k]), 0);
    }
    kvt_sleep_ms(250);
    /* A fifth renewal is shed: dropped without an answer, the stream is not ended with an
     * error (here the client half-closed it, so it finishes OK with no response). */
    ka_call extra = {.port = g_c.m[f].client_port, .id = ids[4]};
    ka_call_run(&extra);
    /* A TimeToLive past the bound gets RESOURCE_EXHAUSTED. */
    kv_it_grpc *tg = NULL;
    cr_assert_eq(kv_it_grpc_open(&tg, "127.0.0.1", g_c.m[f].client_port, 5000), 0);
    Etcdserverpb__LeaseTimeToLiveRequest treq = ETCDSERVERPB__LEASE_TIME_TO_LIVE_REQUEST__INIT;
    treq.id = ids[4];
    uint8_t tbuf[32], *tresp = NULL;
    size_t tlen = etcdserverpb__lease_time_to_live_request__pack(&treq, tbuf), trlen = 0;
    int tstatus = -1;
    char tmsg[160] = "";
    int trc = kv_it_grpc_call(tg, "/etcdserverpb.Lease/LeaseTimeToLive", tbuf, tlen, &tresp, &trlen,
                              8000, &tstatus, tmsg, sizeof(tmsg));
    free(tresp);
    kv_it_grpc_close(tg);
    for (int k = 0; k < 4; k++)
        pthread_join(th[k], NULL);
    fprintf(stderr,
            "  fifth renewal: rc %d status %d '%s'; TimeToLive: rc %d status %d '%s'; held ones: "
            "status %d '%s'\n",
            extra.rc, extra.status, extra.msg, trc, tstatus, tmsg, held[0].status, held[0].msg);
    cr_assert(extra.rc == -EPROTO && extra.status == 0,
              "shed renewal: want the stream finished OK without an answer, got rc %d status %d "
              "'%s'",
              extra.rc, extra.status, extra.msg);
    cr_assert_eq(trc, KV_IT_GRPC_STATUS);
    cr_assert_eq(tstatus, 8, "want RESOURCE_EXHAUSTED, got %d '%s'", tstatus, tmsg);
    cr_assert_str_eq(tmsg, "etcdserver: too many requests");
    for (int k = 0; k < 4; k++)
        cr_assert(held[k].rc == KV_IT_GRPC_STATUS && held[k].status == 14,
                  "held renewal %d: rc %d status %d '%s' (want UNAVAILABLE)", k, held[k].rc,
                  held[k].status, held[k].msg);
    cr_assert_geq(metric(f, "kvd_lease_fwd_shed_total"), 2);
    cr_assert_eq(metric(f, "kvd_lease_fwd_pending"), 0);

    /* Healed: renewals through the follower work again. */
    cr_assert_eq(kvt_member_partition(&g_c, f, 0), 0);
    uint64_t t0 = kvt_now_ms();
    ka_call ok;
    do {
        kvt_sleep_ms(200);
        ok = (ka_call){.port = g_c.m[f].client_port, .id = id};
        ka_call_run(&ok);
    } while ((ok.rc != 0 || ok.ttl != 60) && kvt_now_ms() - t0 < 15000);
    cr_assert(ok.rc == 0 && ok.ttl == 60, "renewal after healing: rc %d ttl %" PRId64 " '%s'",
              ok.rc, ok.ttl, ok.msg);
}

/* A forwarded renewal whose frame (or answer) is lost on the way is asked again, and answered
 * (server/lease/lease_fwd.c: no answer within an election timeout from a leader that is still the
 * leader, or the connection to it went down). The follower is isolated (failpoint: its peer
 * frames are dropped, the connections stay up) while one renewal goes through it, and healed
 * 300 ms later, well inside an election timeout, so the leader never changes. Before: the
 * batch counted as in flight until the forward's time bound (5 s + 2 election timeouts) and
 * was then dropped without an answer: the client never heard back. */
typedef struct heal_job {
    int member;
    unsigned after_ms;
} heal_job;

static void *heal_run(void *arg)
{
    heal_job *h = arg;
    kvt_sleep_ms(h->after_ms);
    (void)kvt_member_partition(&g_c, h->member, 0);
    return NULL;
}

/* A 3-member cluster, a client of one follower (*f, its index) and a 60 s lease granted
 * through it (*id); *l is the leader. */
static kvc_client *lease_on_a_follower(int *l, int *f, int64_t *id)
{
    cr_assert_eq(cl_start(&g_c, 3, 0), 0);
    *l = kvt_cluster_wait_leader(&g_c, 10000, NULL);
    cr_assert_geq(*l, 0);
    *f = follower_of(*l);
    kvc_client *c = client_only(*f);
    *id = grant(c, 60);
    return c;
}

Test(cluster_lease, a_lost_forward_is_asked_again, .fini = fini, .timeout = 180)
{
    int l, f;
    int64_t id;
    kvc_client *c = lease_on_a_follower(&l, &f, &id);
    double resent0 = metric(f, "kvd_lease_fwd_resent_total");
    uint64_t term0 = 0;
    kvt_status st;
    if (kvt_member_status(&g_c, l, &st, 5000) == 0)
        term0 = st.term;
    cr_assert_eq(kvt_member_partition(&g_c, f, 1), 0);
    heal_job h = {.member = f, .after_ms = 300};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, heal_run, &h), 0);
    uint64_t t0 = kvt_now_ms();
    kvc_keepalive_result r;
    kvc_error err;
    /* below the forward's time bound (7 s here): only a re-send can answer it in time */
    int rc = kvc_lease_keepalive_once(c, id, 6000, &r, &err);
    uint64_t took = kvt_now_ms() - t0;
    pthread_join(th, NULL);
    double resent = metric(f, "kvd_lease_fwd_resent_total") - resent0;
    uint64_t term1 = 0;
    if (kvt_member_status(&g_c, l, &st, 5000) == 0)
        term1 = st.term;
    fprintf(stderr,
            "  renewal through the isolated follower: rc %d ttl %" PRId64 " after %" PRIu64
            " ms; %.0f batches re-sent; term %" PRIu64 " -> %" PRIu64 "\n",
            rc, rc == 0 ? r.ttl : -1, took, resent, term0, term1);
    cr_assert_eq(rc, 0, "renewal lost: %s", err.message);
    cr_assert_eq(r.ttl, 60);
    cr_assert_geq(resent, 1, "answered without a re-send: the frame was not lost");
    kvc_close(c);
}

/* A renewal through the HTTP gateway (POST /v3/lease/keepalive) on a follower that cannot
 * reach a leader: the forward fails after its time bound (7 s here) and the answer is an
 * error, after which the forwarder must not touch the call: ending a gateway call frees it.
 * Under ASan a write into the freed call stops the member; here it must go on serving. */
Test(cluster_lease, a_failed_gateway_renewal_ends_cleanly, .fini = fini, .timeout = 180)
{
    int l, f;
    int64_t id;
    kvc_close(lease_on_a_follower(&l, &f, &id));
    cr_assert_eq(kvt_member_partition(&g_c, f, 1), 0);
    char url[96], body[64];
    snprintf(url, sizeof url, "http://%s/v3/lease/keepalive", g_c.m[f].endpoint);
    snprintf(body, sizeof body, "{\"ID\":\"%" PRId64 "\"}", id);
    const char *argv[] = {"/usr/bin/curl", "-sS", "--max-time", "30", "-X",
                          "POST",          "-d",  body,         url,  NULL};
    kvt_cmd_result r;
    uint64_t t0 = kvt_now_ms();
    cr_assert_eq(kvt_run(argv, NULL, NULL, 0, 40000, &r), 0);
    uint64_t took = kvt_now_ms() - t0;
    fprintf(stderr,
            "  gateway renewal through the isolated follower: exit %d after %" PRIu64 " ms: %s%s\n",
            r.exit_code, took, r.out, r.err);
    int answered = r.exit_code == 0 && strstr(r.out, "\"error\"") != NULL;
    kvt_cmd_result_free(&r);
    cr_assert(answered, "no error answer from the gateway");
    cr_assert_eq(kvt_member_partition(&g_c, f, 0), 0);
    cr_assert(kvt_member_running(&g_c, f), "the follower died");
    cr_assert_geq(kvt_cluster_wait_writable(&g_c, 20000), 0);
    char err[256] = "";
    cr_assert_eq(kvt_put(&g_c, f, "gw-after", "v", 10000, NULL, err, sizeof err), 0, "%s", err);
    stop_clean(f);
}
