/*
 * cluster_corrupt: corruption checks and cluster-wide alarms
 * (docs/corruption.md).
 *
 * - alarms_are_cluster_wide: a NOSPACE alarm raised through one member (Maintenance.Alarm
 *   ACTIVATE, as etcd's quota alarmer proposes it) is listed by `etcdctl alarm list` on every
 *   member, refuses puts through every member, and `etcdctl alarm disarm` through another
 *   member clears it everywhere. Runs against etcd too (KV_TEST_SERVER=etcd).
 * - periodic_check_raises_corrupt: one follower applies every Put with a different value
 *   byte (KVD_FAILPOINT_CORRUPT_PUT); the leader's periodic check (1 s here) finds its HashKV
 *   different at the same revision and raises CORRUPT for that member through the log:
 *   `etcdctl alarm list` on every member names it, and every put and read fails with
 *   DATA_LOSS "etcdserver: corrupt cluster". kvd only.
 * - initial_check_refuses_corrupt_member: with --experimental-initial-corrupt-check, a
 *   healthy member restarts (one peer agrees with it, the diverged one does not), the diverged
 *   one refuses to start ("found data inconsistency with peers"). kvd only.
 * - initial_check_while_writes_flow: the initial check passes and the member starts while its
 *   apply batch is held open (writes flow, its apply commits are delayed). kvd only.
 */
#include "cl_util.h"
#include "grpc_raw.h"

#include <criterion/criterion.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static kvt_cluster g_c;

static void fini(void)
{
    kvt_cluster_destroy(&g_c);
}

/* `etcdctl alarm <verb>` through member i; stdout (malloc'd) or NULL. */
static char *ctl_alarm(int i, const char *verb)
{
    kvt_cmd_result res;
    memset(&res, 0, sizeof(res));
    if (kvt_ctl(&g_c, i, 20000, &res, "alarm", verb, NULL) != 0)
        return NULL;
    char *out = NULL;
    if (res.exit_code == 0 && res.out)
        out = strdup(res.out);
    else
        fprintf(stderr, "  etcdctl alarm %s via m%d: exit %d: %s\n", verb, i + 1, res.exit_code,
                res.err ? res.err : "");
    kvt_cmd_result_free(&res);
    return out;
}

static size_t varint(uint8_t *p, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        p[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    p[n++] = (uint8_t)v;
    return n;
}

/* Maintenance.Alarm{action, memberID, alarm} through member i; returns the grpc-status. */
static int alarm_rpc(int i, int action, uint64_t member, int type, char *msg, size_t cap)
{
    uint8_t req[32];
    size_t n = 0;
    req[n++] = 0x08;
    n += varint(req + n, (uint64_t)action);
    req[n++] = 0x10;
    n += varint(req + n, member);
    req[n++] = 0x18;
    n += varint(req + n, (uint64_t)type);
    kv_it_grpc *g = NULL;
    if (kv_it_grpc_open(&g, "127.0.0.1", g_c.m[i].client_port, 5000) != 0)
        return -1;
    uint8_t *resp = NULL;
    size_t rlen = 0;
    int status = -1;
    kv_it_grpc_call(g, "/etcdserverpb.Maintenance/Alarm", req, n, &resp, &rlen, 20000, &status, msg,
                    cap);
    free(resp);
    kv_it_grpc_close(g);
    return status;
}

static void start3(const char *const *kvd_args)
{
    kvt_cluster_opts o;
    kvt_cluster_opts_default(&o, 3);
    o.heartbeat_ms = CL_HEARTBEAT_MS;
    o.election_ms = CL_ELECTION_MS;
    o.kvd_args = kvd_args;
    cr_assert_eq(kvt_cluster_init(&g_c, &o), 0);
    int r = kvt_cluster_start(&g_c, 60000);
    if (r)
        kvt_cluster_dump(&g_c);
    cr_assert_eq(r, 0, "cluster start: %d", r);
    cr_assert_geq(kvt_cluster_wait_writable(&g_c, 60000), 0);
}

static uint64_t member_id(int i)
{
    kvt_status st;
    cr_assert_eq(kvt_member_status(&g_c, i, &st, 10000), 0, "status of m%d", i + 1);
    return st.id;
}

/* Polls `etcdctl alarm list` through member i until its output contains want (or, with
 * want NULL, is empty); returns 0 or -ETIMEDOUT (the last output printed). */
static int wait_alarm_list(int i, const char *want, uint32_t timeout_ms)
{
    char *out = NULL;
    for (uint64_t end = kvt_now_ms() + timeout_ms;;) {
        free(out);
        out = ctl_alarm(i, "list");
        int ok = out && (want ? strstr(out, want) != NULL : out[strspn(out, " \r\n")] == 0);
        if (ok) {
            free(out);
            return 0;
        }
        if (kvt_now_ms() >= end)
            break;
        kvt_sleep_ms(200);
    }
    fprintf(stderr, "  m%d alarm list: [%s], want [%s]\n", i + 1, out ? out : "(failed)",
            want ? want : "");
    free(out);
    return -ETIMEDOUT;
}

Test(cluster_corrupt, alarms_are_cluster_wide, .fini = fini, .timeout = 300)
{
    start3(NULL);
    uint64_t id1 = member_id(1);
    char msg[256] = "";
    /* ACTIVATE (1) NOSPACE (1) for m2, through m2 */
    int st = alarm_rpc(1, 1, id1, 1, msg, sizeof(msg));
    cr_assert_eq(st, 0, "Alarm ACTIVATE through m2: status %d %s", st, msg);
    char want[96];
    snprintf(want, sizeof(want), "memberID:%" PRIu64 " alarm:NOSPACE", id1);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(wait_alarm_list(i, want, 20000), 0, "m%d does not list the alarm", i + 1);
    char err[256];
    for (int i = 0; i < 3; i++) {
        err[0] = 0;
        cr_assert_neq(kvt_put(&g_c, i, "nospace", "v", 20000, NULL, err, sizeof(err)), 0,
                      "put through m%d succeeded under NOSPACE", i + 1);
        cr_assert(strstr(err, "database space exceeded") != NULL, "put through m%d: %s", i + 1,
                  err);
    }
    /* disarm through another member: gone everywhere */
    char *out = ctl_alarm(2, "disarm");
    cr_assert_not_null(out, "etcdctl alarm disarm through m3");
    cr_assert(strstr(out, want) != NULL, "disarm answered [%s]", out);
    free(out);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(wait_alarm_list(i, NULL, 20000), 0, "m%d still lists an alarm", i + 1);
    err[0] = 0;
    cr_assert_eq(kvt_put(&g_c, 0, "nospace", "v", 20000, NULL, err, sizeof(err)), 0,
                 "put after disarm: %s", err);
}

static const char *const g_fp_env[] = {"KVD_FAILPOINT_CORRUPT_PUT=1", NULL};
static const char *const g_fp_args[] = {"--enable-failpoints", NULL};

/* Restarts follower f with the failpoint and writes n keys through the leader; returns the
 * leader's index. The values are "value<k>"; f stores "walue<k>". */
static int diverge(int f, int n)
{
    g_c.m[f].env = g_fp_env;
    g_c.m[f].args = g_fp_args;
    int r = kvt_member_restart(&g_c, f, 60000);
    g_c.m[f].env = NULL;
    g_c.m[f].args = NULL;
    cr_assert_eq(r, 0, "restart of m%d with the failpoint: %d", f + 1, r);
    int l = -1;
    for (uint64_t end = kvt_now_ms() + 30000; l < 0 && kvt_now_ms() < end;) {
        l = kvt_cluster_leader(&g_c);
        if (l < 0)
            kvt_sleep_ms(100);
    }
    cr_assert_geq(l, 0, "no leader");
    char key[32], val[32], err[256];
    int ok = 0;
    for (int k = 0; k < n; k++) {
        snprintf(key, sizeof(key), "c%d", k);
        snprintf(val, sizeof(val), "value%d", k);
        err[0] = 0;
        /* the check may raise CORRUPT meanwhile: later puts then fail */
        if (kvt_put(&g_c, l, key, val, 20000, NULL, err, sizeof(err)) == 0)
            ok++;
        else if (ok == 0)
            cr_assert_fail("put %s through the leader m%d: %s", key, l + 1, err);
    }
    return l;
}

Test(cluster_corrupt, periodic_check_raises_corrupt, .fini = fini, .timeout = 300)
{
    kvt_cluster_opts o;
    kvt_cluster_opts_default(&o, 3);
    if (o.target != KV_TEST_SERVER_KVD)
        cr_skip_test("kvd failpoint");
    static const char *const args[] = {"--experimental-corrupt-check-time=1s", NULL};
    start3(args);
    int l = kvt_cluster_leader(&g_c);
    cr_assert_geq(l, 0);
    int f = cl_other(&g_c, l, -1);
    cr_assert_geq(f, 0);
    uint64_t fid = member_id(f);
    diverge(f, 10);
    char want[96];
    snprintf(want, sizeof(want), "memberID:%" PRIu64 " alarm:CORRUPT", fid);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(wait_alarm_list(i, want, 30000), 0, "m%d does not list CORRUPT for m%d", i + 1,
                     f + 1);
    /* only the diverged member is named */
    char *out = ctl_alarm(0, "list");
    cr_assert_not_null(out);
    int named = 0;
    for (const char *p = out; (p = strstr(p, "alarm:")) != NULL; p++)
        named++;
    cr_assert_eq(named, 1, "alarm list: [%s]", out);
    free(out);
    /* the cluster stops serving: writes and reads fail as etcd's corrupt applier */
    char err[256], val[64];
    int found;
    for (int i = 0; i < 3; i++) {
        err[0] = 0;
        cr_assert_neq(kvt_put(&g_c, i, "after", "x", 20000, NULL, err, sizeof(err)), 0,
                      "put through m%d succeeded while CORRUPT", i + 1);
        cr_assert(strstr(err, "etcdserver: corrupt cluster") != NULL, "put via m%d: %s", i + 1,
                  err);
        err[0] = 0;
        cr_assert_neq(
            kvt_get(&g_c, i, "c0", 0, 20000, val, sizeof(val), &found, NULL, err, sizeof(err)), 0,
            "get through m%d succeeded while CORRUPT", i + 1);
        cr_assert(strstr(err, "etcdserver: corrupt cluster") != NULL, "get via m%d: %s", i + 1,
                  err);
    }
    /* a clear log line on the member that checked, and the metrics */
    int logged = 0;
    int64_t mism = 0;
    for (int i = 0; i < 3; i++) {
        char *log = NULL;
        if (kvt_member_log(&g_c, i, 1u << 20, &log) == 0 && log) {
            logged |= strstr(log, "HASH MISMATCH") != NULL;
            free(log);
        }
        char *body = NULL;
        if (kvt_member_metrics(&g_c, i, &body) == 0 && body) {
            const char *p = strstr(body, "\nkvd_corrupt_mismatches_total ");
            if (p)
                mism += strtoll(p + strlen("\nkvd_corrupt_mismatches_total "), NULL, 10);
            free(body);
        }
    }
    cr_assert(logged, "no member logged the hash mismatch");
    char *flog = NULL;
    for (uint64_t end = kvt_now_ms() + 10000;;) { /* the named member says so itself */
        free(flog);
        flog = NULL;
        kvt_member_log(&g_c, f, 1u << 20, &flog);
        if ((flog && strstr(flog, "IS CORRUPT")) || kvt_now_ms() >= end)
            break;
        kvt_sleep_ms(200);
    }
    cr_assert(flog && strstr(flog, "IS CORRUPT") != NULL, "m%d did not log that it is corrupt",
              f + 1);
    free(flog);
    cr_assert_geq(mism, 1, "kvd_corrupt_mismatches_total");
}

Test(cluster_corrupt, initial_check_refuses_corrupt_member, .fini = fini, .timeout = 300)
{
    kvt_cluster_opts o;
    kvt_cluster_opts_default(&o, 3);
    if (o.target != KV_TEST_SERVER_KVD)
        cr_skip_test("kvd failpoint");
    static const char *const args[] = {"--experimental-corrupt-check-time=0", NULL};
    start3(args);
    int l = kvt_cluster_leader(&g_c);
    cr_assert_geq(l, 0);
    int f = cl_other(&g_c, l, -1);
    int h = cl_other(&g_c, l, f);
    cr_assert(f >= 0 && h >= 0);
    diverge(f, 10);
    /* f applied every put, with its own values */
    cr_assert_geq(cl_wait_value(&g_c, f, "c9", "walue9", 1, 30000), 0, "m%d did not diverge",
                  f + 1);
    cr_assert_geq(cl_wait_value(&g_c, h, "c9", "value9", 1, 30000), 0);
    static const char *const check[] = {"--experimental-initial-corrupt-check=true", NULL};
    /* a healthy member passes the check and serves */
    g_c.m[h].args = check;
    int r = kvt_member_restart(&g_c, h, 60000);
    g_c.m[h].args = NULL;
    if (r) {
        char *hl = NULL;
        if (kvt_member_log(&g_c, h, 8192, &hl) == 0 && hl)
            fprintf(stderr, "--- m%d's log ---\n%s\n", h + 1, hl);
        free(hl);
    }
    cr_assert_eq(r, 0, "healthy m%d with the initial check: %d", h + 1, r);
    char *log = NULL;
    cr_assert_eq(kvt_member_log(&g_c, h, 1u << 20, &log), 0);
    /* it compared with both peers: the leader agrees, the diverged member does not */
    cr_assert(strstr(log, "1 peer(s) differ from this member, 1 agree with it") != NULL,
              "m%d did not run the initial check", h + 1);
    free(log);
    /* the diverged one refuses to start */
    cr_assert_eq(kvt_member_stop(&g_c, f, 10000), 0);
    g_c.m[f].args = check;
    cr_assert_eq(kvt_member_start(&g_c, f), 0);
    g_c.m[f].args = NULL;
    cr_assert_eq(kvt_proc_wait(&g_c.m[f].proc, 60000), 0, "m%d kept running", f + 1);
    int ws = g_c.m[f].proc.last_status;
    log = NULL;
    cr_assert_eq(kvt_member_log(&g_c, f, 1u << 20, &log), 0);
    if (!WIFEXITED(ws) || WEXITSTATUS(ws) == 0) /* a crash: its report is in the log */
        cl_print_log_tail(&g_c, f);
    cr_assert(WIFEXITED(ws) && WEXITSTATUS(ws) != 0, "m%d exit status %d", f + 1, ws);
    cr_assert(strstr(log, "found data inconsistency with peers") != NULL,
              "m%d exited without the mismatch error", f + 1);
    cr_assert(strstr(log, "HASH MISMATCH") != NULL);
    free(log);
}

/* ---- the initial check while writes flow ---- */

typedef struct writer {
    int via;
    atomic_int stop;
    long ok, failed;
} writer;

static void *write_loop(void *arg)
{
    writer *w = arg;
    char key[32], val[32], err[160];
    for (long n = 0; !atomic_load(&w->stop); n++) {
        snprintf(key, sizeof(key), "w%ld", n % 64);
        snprintf(val, sizeof(val), "v%ld", n);
        if (kvt_put(&g_c, w->via, key, val, 5000, NULL, err, sizeof(err)) == 0)
            w->ok++;
        else
            w->failed++;
        kvt_sleep_ms(5);
    }
    return NULL;
}

/* The check runs the loop to ask the peers while the raft node already applies entries: a
 * member whose apply batch is open when the check ends must wait for it, not refuse to start
 * ("cannot check the member identity: Device or resource busy", seen once in CI). The
 * restarting member's apply-only commits sleep 1.5 s (KVD_FAILPOINT_APPLY_COMMIT_DELAY_MS)
 * while a writer keeps committing entries through the leader, so its batch is open for most
 * of its startup. */
Test(cluster_corrupt, initial_check_while_writes_flow, .fini = fini, .timeout = 300)
{
    kvt_cluster_opts o;
    kvt_cluster_opts_default(&o, 3);
    if (o.target != KV_TEST_SERVER_KVD)
        cr_skip_test("kvd flags and failpoint");
    static const char *const args[] = {"--experimental-corrupt-check-time=0", NULL};
    start3(args);
    int l = kvt_cluster_leader(&g_c);
    cr_assert_geq(l, 0);
    int h = cl_other(&g_c, l, -1);
    cr_assert_geq(h, 0);
    writer w = {.via = l};
    atomic_init(&w.stop, 0);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, write_loop, &w), 0);
    kvt_sleep_ms(300);
    static const char *const check[] = {"--experimental-initial-corrupt-check=true", NULL};
    static const char *const env[] = {"KVD_FAILPOINT_APPLY_COMMIT_DELAY_MS=1500", NULL};
    int started = 0;
    char *log = NULL;
    for (int round = 0; round < 3; round++) {
        g_c.m[h].args = check;
        g_c.m[h].env = env;
        int r = kvt_member_restart(&g_c, h, 60000);
        g_c.m[h].args = NULL;
        g_c.m[h].env = NULL;
        free(log);
        log = NULL;
        kvt_member_log(&g_c, h, 1u << 20, &log);
        cr_assert_eq(r, 0, "m%d did not restart (round %d): %d\n%s", h + 1, round, r,
                     log ? log : "");
        cr_assert(log && strstr(log, "initial corruption checking passed") != NULL,
                  "m%d: no passed initial check (round %d)\n%s", h + 1, round, log ? log : "");
        started++;
    }
    atomic_store(&w.stop, 1);
    pthread_join(th, NULL);
    fprintf(stderr, "  m%d restarted %d times with the initial check; writer: %ld ok, %ld failed\n",
            h + 1, started, w.ok, w.failed);
    cr_assert_gt(w.ok, 0);
    free(log);
}
