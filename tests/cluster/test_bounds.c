/*
 * cluster_bounds: the bounds of what peers and clients can grow in a cluster
 * (docs/ARCHITECTURE.md, Bounds), on real 3-member kvd clusters:
 *  - the raft inbox (--max-raft-inbox-messages, --max-raft-inbox-bytes): a follower whose apply
 *    path is stalled (failpoint) drops what does not fit, counts and logs it, and still
 *    catches up once it resumes;
 *  - linearizable reads waiting for a read index (--max-pending-read-index): the next one is
 *    refused with RESOURCE_EXHAUSTED "etcdserver: too many requests";
 *  - proposals a follower forwarded to the leader and not applied yet
 *    (--max-forwarded-proposals): the rest stays queued, bounded by --max-pending-proposals;
 *  - peer URLs with a host name (localhost), resolved at each dial.
 * kvd only (the flags are kvd's).
 */
#include "cl_util.h"

#include <criterion/criterion.h>

#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static kvt_cluster g_c; /* the fixture of the running test (fini destroys it) */

static void fini(void)
{
    kvt_cluster_destroy(&g_c);
}

/* Election timeout of these tests: long enough that a member stalled for a second (failpoint)
 * keeps its leader and its role. */
#define BT_ELECTION_MS 3000u

static void start(const char *const *args)
{
    kvt_cluster_opts o;
    kvt_cluster_opts_default(&o, 3);
    o.heartbeat_ms = CL_HEARTBEAT_MS;
    o.election_ms = BT_ELECTION_MS;
    o.kvd_args = args;
    cr_assert_eq(kvt_cluster_init(&g_c, &o), 0);
    int r = kvt_cluster_start(&g_c, 60000);
    if (r)
        kvt_cluster_dump(&g_c);
    cr_assert_eq(r, 0, "cluster start: %d", r);
}

static double metric(int i, const char *series)
{
    return cl_metric(&g_c, i, series);
}

/* SIGUSR1 toggles the member's apply-path stall (--enable-failpoints). */
static void toggle_stall(int i)
{
    cr_assert_gt(g_c.m[i].proc.pid, 0);
    cr_assert_eq(kill(g_c.m[i].proc.pid, SIGUSR1), 0);
    kvt_sleep_ms(100); /* the signal is handled on the member's loop */
}

static int count_lines(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)) != NULL; p++)
        n++;
    return n;
}

/* Value number k: "v%05d" padded with 'x' to vlen bytes (vlen >= 6). */
static void make_val(char *val, size_t vlen, int k)
{
    snprintf(val, vlen + 1, "v%05d", k);
    memset(val + 6, 'x', vlen - 6);
    val[vlen] = '\0';
}

/* A follower stalls; the leader keeps writing (values of vlen bytes); the follower's inbox
 * overflows; it resumes and must serve the last write. */
static void inbox_overflow(const char *bound, size_t vlen, int writes)
{
    int l = kvt_cluster_wait_leader(&g_c, 10000, NULL);
    cr_assert_geq(l, 0);
    int f = cl_other(&g_c, l, -1);
    char err[256];
    cr_assert_eq(kvt_put(&g_c, l, "/inbox/before", "b", 5000, NULL, err, sizeof(err)), 0, "%s",
                 err);
    cr_assert_geq(cl_wait_value(&g_c, f, "/inbox/before", "b", 1, 10000), 0);
    toggle_stall(f);
    char *val = malloc(vlen + 1);
    cr_assert_not_null(val);
    char key[32];
    for (int k = 0; k < writes; k++) {
        make_val(val, vlen, k);
        snprintf(key, sizeof(key), "/inbox/k%d", k % 50);
        int r = kvt_put(&g_c, l, key, val, 5000, NULL, err, sizeof(err));
        cr_assert_eq(r, 0, "put %d through the leader while a follower is stalled: %s", k, err);
    }
    char series[128];
    snprintf(series, sizeof(series), "kvd_raft_inbox_dropped_by_bound_total{bound=\"%s\"}", bound);
    double dropped = metric(f, series);
    double total = metric(f, "kvd_raft_inbox_dropped_total");
    fprintf(stderr, "  %s: %.0f raft messages dropped (%.0f by the %s bound) while stalled\n",
            g_c.m[f].name, total, dropped, bound);
    cr_assert_gt(dropped, 0, "the follower's inbox never overflowed its %s bound", bound);
    toggle_stall(f);
    uint64_t t0 = kvt_now_ms();
    make_val(val, vlen, writes - 1);
    snprintf(key, sizeof(key), "/inbox/k%d", (writes - 1) % 50);
    /* serializable: the follower's own state; kvt_get returns a prefix of the value */
    int w = -1;
    for (uint64_t end = kvt_now_ms() + 30000; kvt_now_ms() < end; kvt_sleep_ms(50)) {
        char got[64];
        int found = 0;
        if (kvt_get(&g_c, f, key, 1, 2000, got, sizeof(got), &found, NULL, err, sizeof(err)) == 0 &&
            found && strlen(got) > 0 && strncmp(got, val, strlen(got)) == 0) {
            w = (int)(kvt_now_ms() - t0);
            break;
        }
    }
    if (w < 0)
        kvt_cluster_dump(&g_c);
    cr_assert_geq(w, 0, "%s did not catch up after its inbox overflowed", g_c.m[f].name);
    fprintf(stderr, "  caught up %d ms after resuming\n", w);
    free(val);
    /* the drops were logged, rate-limited (one line per 10 s at most) */
    char *log = NULL;
    cr_assert_eq(kvt_member_log(&g_c, f, 1 << 20, &log), 0);
    int lines = count_lines(log, "raft inbox full");
    free(log);
    cr_assert_geq(lines, 1, "no log line for the dropped raft messages");
    cr_assert_leq(lines, 4, "%d log lines for the drops: not rate-limited", lines);
    cl_assert_hash_equal(&g_c, l);
}

Test(cluster_bounds, follower_inbox_overflows_by_messages_and_catches_up, .fini = fini,
     .timeout = 240)
{
    static const char *const args[] = {"--max-raft-inbox-messages=3", NULL};
    start(args);
    inbox_overflow("messages", 16, 60);
    int f = -1;
    for (int i = 0; i < g_c.n; i++)
        if (metric(i, "kvd_raft_inbox_dropped_total") > 0)
            f = i;
    cr_assert_geq(f, 0);
    double peak = metric(f, "kvd_raft_inbox_messages_peak");
    cr_assert_leq(peak, 3, "the inbox held %.0f messages, bound 3", peak);
}

Test(cluster_bounds, follower_inbox_overflows_by_bytes_and_catches_up, .fini = fini, .timeout = 240)
{
    /* 64 KiB: about 15 appends of one 4 KiB put each; the message bound stays far away */
    static const char *const args[] = {"--max-raft-inbox-bytes=65536", NULL};
    start(args);
    inbox_overflow("bytes", 4096, 60);
}

typedef struct call_arg {
    int member, put;
    char key[32];
    int rc;
    char err[256];
} call_arg;

static atomic_int g_calls_done; /* calls answered so far */

static void *call_thread(void *p)
{
    call_arg *a = p;
    if (a->put)
        a->rc = kvt_put(&g_c, a->member, a->key, "v", 8000, NULL, a->err, sizeof(a->err));
    else {
        char got[16];
        int found;
        a->rc = kvt_get(&g_c, a->member, a->key, 0, 8000, got, sizeof(got), &found, NULL, a->err,
                        sizeof(a->err));
    }
    atomic_fetch_add(&g_calls_done, 1);
    return NULL;
}

/* Runs n calls at once; returns how many failed with exactly "etcdserver: too many requests";
 * every other call must succeed. */
static int run_calls(call_arg *a, int n, int stalled, int want_refused, void (*while_blocked)(void))
{
    pthread_t t[16];
    cr_assert_leq(n, 16);
    atomic_store(&g_calls_done, 0);
    for (int i = 0; i < n; i++)
        cr_assert_eq(pthread_create(&t[i], NULL, call_thread, &a[i]), 0);
    /* the refused calls are answered at once, the others wait for the stalled member; keep the
     * stall well below the election timeout */
    for (uint64_t end = kvt_now_ms() + 1500;
         atomic_load(&g_calls_done) < want_refused && kvt_now_ms() < end;)
        kvt_sleep_ms(20);
    kvt_sleep_ms(100);
    while_blocked();
    toggle_stall(stalled); /* resume */
    int refused = 0;
    for (int i = 0; i < n; i++) {
        pthread_join(t[i], NULL);
        fprintf(stderr, "  call %d: %d %s\n", i, a[i].rc, a[i].err);
        if (a[i].rc == KVT_GRPC_ERR && strcmp(a[i].err, "etcdserver: too many requests") == 0)
            refused++;
        else
            cr_assert_eq(a[i].rc, 0, "call %d: %d %s", i, a[i].rc, a[i].err);
    }
    return refused;
}

static int g_member;

/* The refused calls can be answered before the last admitted call has even reached the member
 * (a slow thread under load): poll the gauges for a while instead of reading them once. */
static void wait_gauge(const char *a, double want_a)
{
    double va = -1;
    for (uint64_t end = kvt_now_ms() + 1000; kvt_now_ms() < end; kvt_sleep_ms(20)) {
        va = metric(g_member, a);
        if (va == want_a)
            break;
    }
    fprintf(stderr, "  while stalled: %s %.0f\n", a, va);
    cr_assert_eq(va, want_a, "%s = %.0f, want %.0f", a, va, want_a);
}

static void check_reads_waiting(void)
{
    wait_gauge("kvd_read_index_waiting", 2);
    cr_assert_eq(metric(g_member, "kvd_read_index_refused_total{from=\"client\"}"), 4);
}

Test(cluster_bounds, read_index_waiters_bounded, .fini = fini, .timeout = 180)
{
    static const char *const args[] = {"--max-pending-read-index=2", NULL};
    start(args);
    int l = kvt_cluster_wait_leader(&g_c, 10000, NULL);
    cr_assert_geq(l, 0);
    char err[256];
    cr_assert_eq(kvt_put(&g_c, l, "/ri/k", "v", 5000, NULL, err, sizeof(err)), 0, "%s", err);
    /* a stalled leader admits linearizable reads but runs no read round */
    toggle_stall(l);
    call_arg a[6];
    memset(a, 0, sizeof(a));
    for (int i = 0; i < 6; i++) {
        a[i].member = l;
        snprintf(a[i].key, sizeof(a[i].key), "/ri/k");
    }
    g_member = l;
    int refused = run_calls(a, 6, l, 4, check_reads_waiting);
    cr_assert_eq(refused, 4, "%d reads refused with too many requests, want 4", refused);
}

static int g_queued;

static void check_forwarded(void)
{
    /* the forwarded bound is reached; the rest of the admitted writes stay queued. How many
     * were admitted depends on timing: writes that arrive in the same loop turn, before the
     * node forwards the queue's head, see it full (4) and are refused. */
    double fw = -1, q = -1;
    for (uint64_t end = kvt_now_ms() + 1000; kvt_now_ms() < end; kvt_sleep_ms(20)) {
        fw = metric(g_member, "kvd_proposals_forwarded_waiting");
        q = metric(g_member, "kvd_proposals_pending");
        if (fw == 2 && q + fw + atomic_load(&g_calls_done) == 10)
            break;
    }
    fprintf(stderr, "  while the leader is stalled: %.0f forwarded waiting, %.0f queued\n", fw, q);
    cr_assert_eq(fw, 2);
    cr_assert(q >= 1 && q <= 4, "%.0f writes queued, want 1..4 (--max-pending-proposals=4)", q);
    g_queued = (int)q;
}

Test(cluster_bounds, forwarded_proposals_bounded, .fini = fini, .timeout = 180)
{
    /* every member gets the same flags: the leader's queue (4) has room for the 2 forwarded */
    static const char *const args[] = {"--max-forwarded-proposals=2", "--max-pending-proposals=4",
                                       NULL};
    start(args);
    int l = kvt_cluster_wait_leader(&g_c, 10000, NULL);
    cr_assert_geq(l, 0);
    int f = cl_other(&g_c, l, -1);
    /* the stalled leader takes the forwarded proposals into its queue but proposes nothing,
     * so they stay unapplied on the follower */
    toggle_stall(l);
    call_arg a[10];
    memset(a, 0, sizeof(a));
    for (int i = 0; i < 10; i++) {
        a[i].member = f;
        a[i].put = 1;
        snprintf(a[i].key, sizeof(a[i].key), "/fwd/k%d", i);
    }
    g_member = f;
    int refused = run_calls(a, 10, l, 4, check_forwarded);
    cr_assert_eq(refused, 10 - 2 - g_queued, "%d puts refused with too many requests, want %d",
                 refused, 10 - 2 - g_queued);
    for (int i = 0; i < 10; i++)
        if (a[i].rc == 0)
            cr_assert_geq(cl_wait_value(&g_c, f, a[i].key, "v", 0, 10000), 0);
    cr_assert_eq(metric(f, "kvd_proposals_forwarded_waiting"), 0);
}

/* Peer URLs with a host name: every member reaches the others through "localhost" (resolved
 * at each dial, off the loop: server/peer/peer_dns.c). */
Test(cluster_bounds, peer_urls_with_host_name, .fini = fini, .timeout = 180)
{
    kvt_cluster_opts o;
    kvt_cluster_opts_default(&o, 3);
    o.heartbeat_ms = CL_HEARTBEAT_MS;
    o.election_ms = CL_ELECTION_MS;
    cr_assert_eq(kvt_cluster_init(&g_c, &o), 0);
    for (int i = 0; i < 3; i++)
        snprintf(g_c.m[i].peer_url, sizeof(g_c.m[i].peer_url), "http://localhost:%u",
                 g_c.m[i].proxy_port);
    int r = kvt_cluster_start(&g_c, 60000);
    if (r)
        kvt_cluster_dump(&g_c);
    cr_assert_eq(r, 0, "cluster start with localhost peer URLs: %d", r);
    int l = kvt_cluster_wait_leader(&g_c, 10000, NULL);
    cr_assert_geq(l, 0);
    char err[256];
    for (int i = 0; i < 3; i++) {
        char key[16];
        snprintf(key, sizeof(key), "/dns/%d", i);
        cr_assert_eq(kvt_put(&g_c, i, key, "v", 5000, NULL, err, sizeof(err)), 0,
                     "put via %s (leader %s): %s", g_c.m[i].name, g_c.m[l].name, err);
        for (int j = 0; j < 3; j++)
            cr_assert_geq(cl_wait_value(&g_c, j, key, "v", 0, 10000), 0);
    }
    /* a restarted member is dialed again by name */
    int f = cl_other(&g_c, l, -1);
    cr_assert_eq(kvt_member_restart(&g_c, f, 30000), 0);
    cr_assert_eq(kvt_put(&g_c, l, "/dns/after", "w", 5000, NULL, err, sizeof(err)), 0, "%s", err);
    cr_assert_geq(cl_wait_value(&g_c, f, "/dns/after", "w", 1, 20000), 0);
    /* the name was resolved at each dial: the lower id of (f, l) dials the other; a dialer that
     * kept running resolved again to redial the restarted member */
    kvt_status sf, sl;
    cr_assert_eq(kvt_member_status(&g_c, f, &sf, 5000), 0);
    cr_assert_eq(kvt_member_status(&g_c, l, &sl, 5000), 0);
    int dialer = sf.id < sl.id ? f : l;
    uint64_t peer = sf.id < sl.id ? sl.id : sf.id;
    char series[96];
    snprintf(series, sizeof(series), "kvd_peer_resolves_total{peer=\"%" PRIx64 "\"}", peer);
    double resolves = metric(dialer, series);
    fprintf(stderr, "  %s resolved the name of its peer %" PRIx64 " %.0f times\n",
            g_c.m[dialer].name, peer, resolves);
    cr_assert_geq(resolves, dialer == f ? 1 : 2);
}
