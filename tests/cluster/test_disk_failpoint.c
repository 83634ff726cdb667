/*
 * cluster_disk_failpoint: kvd's disk failpoints (server/node/disk_failpoint.h; kvt_cluster
 * starts kvd with --enable-failpoints, the tests add the environment variable).
 *
 *  - slow fsync: with KVD_FAILPOINT_FSYNC_DELAY_MS=SLOW_MS, SIGRTMIN+1 to the leader makes
 *    every durable commit of its readies SLOW_MS slower: puts through it take at least about
 *    SLOW_MS each (a lower bound: load only adds to it), and nothing acknowledged is lost
 *    (every key read back, HashKV equal on every member).
 *  - failing fsync: with KVD_FAILPOINT_FSYNC_EIO=1, SIGRTMIN+2 to a follower makes its next
 *    durable commit fail with EIO: the follower exits with status 2 and logs kvd's line
 *    "persisting a raft ready failed: Input/output error; stopping this member"; the others
 *    keep serving writes; restarted without the failpoint it catches up (reads the last
 *    write, equal HashKV).
 * Without the failpoints kvd installs no handler for these signals and their default action
 * kills the member, so both tests fail. kvd only.
 */
#include "cl_util.h"

#include <criterion/criterion.h>

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#define SLOW_MS 200u
#define N_PUTS 15

static kvt_cluster g_c;

static void fini(void)
{
    kvt_cluster_destroy(&g_c);
}

/* Starts 3 members, each with env; fails the test with the logs if it cannot. */
static void start_cluster(const char *const *env)
{
    kvt_cluster_opts o;
    kvt_cluster_opts_default(&o, 3);
    if (o.target != KV_TEST_SERVER_KVD)
        cr_skip_test("kvd failpoints");
    /* a slowed leader sends nothing while a commit is in flight: keep elections well away */
    o.heartbeat_ms = 100;
    o.election_ms = 2000;
    cr_assert_eq(kvt_cluster_init(&g_c, &o), 0);
    for (int i = 0; i < g_c.n; i++)
        g_c.m[i].env = env;
    int r = kvt_cluster_start(&g_c, 60000);
    if (r)
        kvt_cluster_dump(&g_c);
    cr_assert_eq(r, 0, "cluster start: %d", r);
    cr_assert_geq(kvt_cluster_wait_writable(&g_c, 60000), 0);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* N_PUTS puts through member i (recorded in acks); returns the median latency in ms. */
static uint64_t timed_puts(cl_acks *acks, int i, const char *tag)
{
    uint64_t ms[N_PUTS];
    char err[256];
    for (int k = 0; k < N_PUTS; k++) {
        char key[32], val[32];
        snprintf(key, sizeof(key), "%s-%d", tag, k);
        snprintf(val, sizeof(val), "v%d", k);
        uint64_t t0 = kvt_now_ms();
        err[0] = 0;
        int r = cl_put_ack(&g_c, acks, i, key, val, 20000, err, sizeof(err));
        cr_assert_eq(r, 0, "put %s through m%d: %s", key, i + 1, err);
        ms[k] = kvt_now_ms() - t0;
    }
    qsort(ms, N_PUTS, sizeof(ms[0]), cmp_u64);
    fprintf(stderr, "  %s: %d puts through m%d, median %" PRIu64 " ms, max %" PRIu64 " ms\n", tag,
            N_PUTS, i + 1, ms[N_PUTS / 2], ms[N_PUTS - 1]);
    return ms[N_PUTS / 2];
}

static cl_acks g_acks;

static const char *const g_slow_env[] = {"KVD_FAILPOINT_FSYNC_DELAY_MS=200", NULL};

Test(cluster_disk_failpoint, slow_fsync_slows_puts_and_loses_nothing, .fini = fini, .timeout = 300)
{
    start_cluster(g_slow_env);
    int l = kvt_cluster_leader(&g_c);
    cr_assert_geq(l, 0);
    memset(&g_acks, 0, sizeof(g_acks));
    uint64_t before = timed_puts(&g_acks, l, "before");
    cr_assert_eq(kvt_proc_signal(&g_c.m[l].proc, SIGRTMIN + 1), 0);
    kvt_sleep_ms(300);
    cr_assert(kvt_member_running(&g_c, l), "the leader died of the slow-fsync signal");
    uint64_t under = timed_puts(&g_acks, l, "slow");
    int f = cl_other(&g_c, l, -1);
    cr_assert_geq(f, 0);
    uint64_t via_f = timed_puts(&g_acks, f, "slow-via-follower");
    /* Each put needs at least one durable commit of the leader's log (its entry). */
    cr_assert_geq(under, SLOW_MS - 50,
                  "puts through the slowed leader took %" PRIu64 " ms (median), before %" PRIu64
                  " ms",
                  under, before);
    cr_assert_geq(via_f, SLOW_MS - 50, "puts through a follower took %" PRIu64 " ms", via_f);
    cr_assert_eq(kvt_cluster_leader(&g_c), l, "leadership moved during the slow fsync");
    cr_assert_eq(kvt_proc_signal(&g_c.m[l].proc, SIGRTMIN + 1), 0); /* off */
    kvt_sleep_ms(300);
    timed_puts(&g_acks, l, "after");
    cr_assert(kvt_member_running(&g_c, l));
    char *log = NULL;
    cr_assert_eq(kvt_member_log(&g_c, l, 1 << 20, &log), 0);
    cr_assert(strstr(log, "kvd: failpoint: slow fsync on") != NULL, "no toggle logged");
    cr_assert(strstr(log, "kvd: failpoint: slow fsync off") != NULL, "no toggle logged");
    free(log);
    /* nothing acknowledged is lost, on any member */
    for (int i = 0; i < g_c.n; i++)
        cr_assert_eq(cl_verify_acks(&g_c, &g_acks, i), 0, "acknowledged writes lost (m%d)", i + 1);
    cl_assert_hash_equal(&g_c, l);
}

static const char *const g_eio_env[] = {"KVD_FAILPOINT_FSYNC_EIO=1", NULL};

#define EIO_LINE                                                                                   \
    "kvd: fatal: persisting a raft ready failed: Input/output error; stopping this member"

Test(cluster_disk_failpoint, fsync_error_stops_a_follower_and_it_catches_up, .fini = fini,
     .timeout = 300)
{
    start_cluster(g_eio_env);
    int l = kvt_cluster_leader(&g_c);
    cr_assert_geq(l, 0);
    int f = cl_other(&g_c, l, -1);
    cr_assert_geq(f, 0);
    memset(&g_acks, 0, sizeof(g_acks));
    char err[256];
    cr_assert_eq(cl_put_ack(&g_c, &g_acks, l, "eio-first", "v", 20000, err, sizeof(err)), 0, "%s",
                 err);
    cr_assert_eq(kvt_proc_signal(&g_c.m[f].proc, SIGRTMIN + 2), 0);
    kvt_sleep_ms(200);
    /* writes give the follower durable commits; its first one fails */
    int k = 0;
    for (; k < 200 && kvt_member_running(&g_c, f); k++) {
        char key[32];
        snprintf(key, sizeof(key), "eio-%d", k);
        err[0] = 0;
        cr_assert_eq(cl_put_ack(&g_c, &g_acks, l, key, "w", 20000, err, sizeof(err)), 0,
                     "put %s while the follower fails: %s", key, err);
        kvt_sleep_ms(20);
    }
    cr_assert_eq(kvt_proc_wait(&g_c.m[f].proc, 20000), 0, "m%d still runs after %d puts", f + 1, k);
    int st = g_c.m[f].proc.last_status;
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 2,
              "m%d did not exit with status 2 (wait status 0x%x)", f + 1, st);
    char *log = NULL;
    cr_assert_eq(kvt_member_log(&g_c, f, 1 << 20, &log), 0);
    int logged = strstr(log, EIO_LINE) != NULL;
    free(log);
    cr_assert(logged, "m%d stopped without logging '%s'", f + 1, EIO_LINE);
    fprintf(stderr, "  m%d stopped (status 2) after %d puts, line logged\n", f + 1, k);
    /* the other two carry on */
    for (int j = 0; j < 50; j++) {
        char key[32];
        snprintf(key, sizeof(key), "after-%d", j);
        err[0] = 0;
        int via = j % 2 ? l : cl_other(&g_c, f, l);
        cr_assert_eq(cl_put_ack(&g_c, &g_acks, via, key, "x", 20000, err, sizeof(err)), 0,
                     "put %s with m%d down: %s", key, f + 1, err);
    }
    /* restarted without the failpoint, it catches up */
    g_c.m[f].env = NULL;
    cr_assert_eq(kvt_member_restart(&g_c, f, 60000), 0);
    cr_assert_geq(cl_wait_value(&g_c, f, "after-49", "x", 1, 60000), 0,
                  "restarted m%d did not catch up", f + 1);
    cr_assert_eq(cl_verify_acks(&g_c, &g_acks, f), 0, "acknowledged writes missing on m%d", f + 1);
    cl_assert_hash_equal(&g_c, l);
}

/* A member told to stop while its apply worker sits in a durable commit: the loop closes the
 * peer transport at once, and the worker finishes seconds later. Its messages that wait for
 * that commit (the append responses) must then go nowhere; they went to the freed transport
 * before kv_node_close() cut the node off it (a use after free: ASan reports it, a release
 * build could die of SIGABRT or SIGSEGV instead of exiting 0). */
static const char *const g_stall_env[] = {"KVD_FAILPOINT_FSYNC_DELAY_MS=2500", NULL};

Test(cluster_disk_failpoint, a_member_stopped_inside_a_slow_commit_exits_cleanly, .fini = fini,
     .timeout = 300)
{
    start_cluster(g_stall_env);
    int l = kvt_cluster_leader(&g_c);
    cr_assert_geq(l, 0);
    int f = cl_other(&g_c, l, -1);
    cr_assert_geq(f, 0);
    cr_assert_eq(kvt_proc_signal(&g_c.m[f].proc, SIGRTMIN + 1), 0); /* f: slow commits */
    kvt_sleep_ms(300);
    char err[256] = "";
    /* the leader and the third member commit it; f's worker takes 2.5 s over its share */
    cr_assert_eq(kvt_put(&g_c, l, "stall", "v", 20000, NULL, err, sizeof(err)), 0, "put: %s", err);
    kvt_sleep_ms(500);
    uint64_t t0 = kvt_now_ms();
    cr_assert_eq(kvt_proc_signal(&g_c.m[f].proc, SIGTERM), 0);
    cr_assert_eq(kvt_proc_wait(&g_c.m[f].proc, 30000), 0, "m%d did not stop", f + 1);
    uint64_t took = kvt_now_ms() - t0;
    int ws = g_c.m[f].proc.last_status;
    char *log = NULL;
    cr_assert_eq(kvt_member_log(&g_c, f, 1 << 20, &log), 0);
    if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0)
        cl_print_log_tail(&g_c, f);
    int toggled = strstr(log, "kvd: failpoint: slow fsync on") != NULL;
    int stopped = strstr(log, "kvd: stopped") != NULL;
    free(log);
    cr_assert(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "m%d: wait status %#x after SIGTERM", f + 1,
              ws);
    cr_assert(toggled, "no toggle logged");
    cr_assert(stopped, "no clean stop logged");
    fprintf(stderr, "  m%d stopped %" PRIu64 " ms after SIGTERM, inside a slow commit\n", f + 1,
            took);
    /* the other two still serve, and f catches up when it comes back */
    cr_assert_eq(kvt_put(&g_c, l, "after", "v", 20000, NULL, err, sizeof(err)), 0, "put: %s", err);
}
