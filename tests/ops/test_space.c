/*
 * ops_space: disk space a member must never lose to its own bookkeeping, against real kvd
 * processes.
 *  - defrag_tmp_removed_at_start: a defragment killed during its copy leaves
 *    <data>/defrag.tmp/data.mdb (a partial copy as large as the data); the next start
 *    removes it and logs it, and the data is intact.
 *  The raft log is in its own WAL by default, bounded by the same --max-raft-log-bytes budget;
 *  log_filled_member_recovers needs the log in the store's LMDB map (--experimental-wal=false),
 *  the only place where it can fill the map.
 *  - delete_ranges_cannot_fill_the_raft_log: the raft log lives in the store's LMDB map. With
 *    a 16 MiB quota, 60 DeleteRanges of 1.4 MB keys that do not exist (they grow only the
 *    log) are answered, OK or refused with an error, and the member never stops; restarted
 *    in the middle it is not wedged; compaction + defragment + alarm disarm (if an alarm is
 *    up) bring puts back.
 *  - log_filled_member_recovers: a member whose log filled its map (the log budget raised out
 *    of reach with --max-raft-log-bytes, as before the budget existed) stops; restarted with
 *    the default budget it compacts its log at once, and compaction + defragment + disarm
 *    bring puts back (it is not wedged).
 *  - log_budget_refuses_with_too_many_requests: an entry larger than --max-raft-log-bytes is
 *    refused with RESOURCE_EXHAUSTED "etcdserver: too many requests" and counted; small
 *    writes go on.
 *  - alarm_change_seen_by_the_next_request: with every commit held 500 ms after its apply, an
 *    acknowledged NOSPACE alarm refuses the next put and an acknowledged disarm admits it.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "grpc_raw.h"
#include "kvt_grpc.h"
#include "harness.h"
#include "rpc.pb-c.h"

#define READY_MS 60000

static kv_it_server *srv;
static char ctl_bin[PATH_MAX];

static void start_with(const char *const *extra)
{
    srv = calloc(1, sizeof(*srv));
    cr_assert(srv);
    int rc = kv_it_server_init(srv, KV_IT_KVD, extra);
    cr_assert_eq(rc, 0, "init kvd (%s): %d", srv->bin, rc);
    cr_assert_eq(kv_it_etcdctl_bin(ctl_bin, sizeof(ctl_bin)), 0, "etcdctl: %s", ctl_bin);
    cr_assert_eq(kv_it_server_start(srv, READY_MS), 0, "kvd did not start");
}

static void teardown(void)
{
    if (srv) {
        kv_it_server_stop(srv, 5000);
        kv_it_server_destroy(srv);
        free(srv);
        srv = NULL;
    }
}

TestSuite(ops_space, .fini = teardown, .timeout = 600);

static kv_it_grpc *conn(void)
{
    kv_it_grpc *c = NULL;
    cr_assert_eq(kv_it_grpc_open(&c, "127.0.0.1", srv->client_port, 5000), 0);
    return c;
}

/* One unary call; returns the grpc status (0 = OK), msg gets the message. Transport errors
 * (the member went away) return -1. */
static int call(kv_it_grpc *c, const char *method, const ProtobufCMessage *m, char *msg, size_t cap)
{
    int st = kvt_grpc_unary_msg(c, method, m, 30000, msg, cap);
    if (st < 0) {
        snprintf(msg, cap, "transport error %d", st);
        return -1;
    }
    return st;
}

static int put(kv_it_grpc *c, const char *k, const char *v, char *msg, size_t cap)
{
    Etcdserverpb__PutRequest p = ETCDSERVERPB__PUT_REQUEST__INIT;
    p.key.data = (uint8_t *)k;
    p.key.len = strlen(k);
    p.value.data = (uint8_t *)v;
    p.value.len = strlen(v);
    return call(c, "/etcdserverpb.KV/Put", &p.base, msg, cap);
}

/* Value of key k through a serializable-or-not Range: 1 and val if found, 0 if not. */
static int get(kv_it_grpc *c, const char *k, char *val, size_t cap)
{
    Etcdserverpb__RangeRequest r = ETCDSERVERPB__RANGE_REQUEST__INIT;
    r.key.data = (uint8_t *)k;
    r.key.len = strlen(k);
    size_t n = etcdserverpb__range_request__get_packed_size(&r);
    uint8_t buf[256], *resp = NULL;
    cr_assert(n <= sizeof(buf));
    etcdserverpb__range_request__pack(&r, buf);
    size_t rlen = 0;
    int status = -1;
    char msg[256];
    int rc = kv_it_grpc_call(c, "/etcdserverpb.KV/Range", buf, n, &resp, &rlen, 30000, &status, msg,
                             sizeof(msg));
    cr_assert_eq(rc, 0, "Range %s: %d %d %s", k, rc, status, msg);
    Etcdserverpb__RangeResponse *rr = etcdserverpb__range_response__unpack(NULL, rlen, resp);
    free(resp);
    cr_assert(rr);
    int found = rr->n_kvs == 1;
    if (found)
        snprintf(val, cap, "%.*s", (int)rr->kvs[0]->value.len,
                 (const char *)rr->kvs[0]->value.data);
    etcdserverpb__range_response__free_unpacked(rr, NULL);
    return found;
}

Test(ops_space, defrag_tmp_removed_at_start)
{
    start_with(NULL);
    kv_it_grpc *c = conn();
    char msg[256], val[64];
    cr_assert_eq(put(c, "/space/k", "kept", msg, sizeof(msg)), 0, "%s", msg);
    kv_it_grpc_close(c);
    cr_assert_eq(kv_it_server_kill9(srv), 0);

    /* What a defragment killed mid-copy leaves: defrag.tmp/data.mdb, 8 MiB here. */
    char tmpdir[PATH_MAX + 16], tmpfile[PATH_MAX + 32];
    snprintf(tmpdir, sizeof(tmpdir), "%s/defrag.tmp", srv->data_dir);
    snprintf(tmpfile, sizeof(tmpfile), "%s/data.mdb", tmpdir);
    cr_assert(mkdir(tmpdir, 0700) == 0 || errno == EEXIST, "mkdir %s: %s", tmpdir, strerror(errno));
    int fd = open(tmpfile, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    cr_assert_geq(fd, 0);
    static char chunk[1 << 16];
    memset(chunk, 0x5a, sizeof(chunk));
    for (int i = 0; i < 128; i++)
        cr_assert_eq(write(fd, chunk, sizeof(chunk)), (ssize_t)sizeof(chunk));
    close(fd);

    cr_assert_eq(kv_it_server_start(srv, READY_MS), 0, "kvd did not restart");
    struct stat sb;
    int left = stat(tmpdir, &sb) == 0;
    char *log = NULL;
    cr_assert_eq(kv_it_server_log(srv, &log), 0);
    cr_assert_not(left, "%s is still there after the restart; log:\n%s", tmpdir, log);
    cr_assert_not_null(strstr(log, "defrag.tmp (8388608 bytes)"), "the removal is not logged:\n%s",
                       log);
    free(log);
    c = conn();
    cr_assert_eq(get(c, "/space/k", val, sizeof(val)), 1);
    cr_assert_str_eq(val, "kept");
    cr_assert_eq(put(c, "/space/k2", "after", msg, sizeof(msg)), 0, "%s", msg);
    kv_it_grpc_close(c);
}

static int delete_range(kv_it_grpc *c, const uint8_t *k, size_t klen, char *msg, size_t cap)
{
    Etcdserverpb__DeleteRangeRequest d = ETCDSERVERPB__DELETE_RANGE_REQUEST__INIT;
    d.key.data = (uint8_t *)k;
    d.key.len = klen;
    return call(c, "/etcdserverpb.KV/DeleteRange", &d.base, msg, cap);
}

/* Runs etcdctl; returns its exit code; *out (malloc'd) when out is not NULL. */
static int ctl(char **out, const char *a1, const char *a2, const char *a3)
{
    kv_it_cmd_result r;
    int rc = kv_it_ctl(srv, ctl_bin, NULL, 60000, &r, a1, a2, a3, NULL);
    cr_assert_eq(rc, 0, "etcdctl %s: %d", a1, rc);
    cr_assert(!r.timed_out, "etcdctl %s timed out", a1);
    int code = r.exit_code;
    if (code != 0)
        cr_log_info("etcdctl %s %s: exit %d: %s%s", a1, a2 ? a2 : "", code, r.out, r.err);
    if (out)
        *out = strdup(r.out ? r.out : "");
    kv_it_cmd_result_free(&r);
    return code;
}

static int64_t revision(void)
{
    char *out = NULL;
    cr_assert_eq(ctl(&out, "endpoint", "status", "-w=json"), 0);
    const char *p = strstr(out, "\"revision\":");
    cr_assert_not_null(p, "%s", out);
    int64_t rev = strtoll(p + 11, NULL, 10);
    free(out);
    return rev;
}

/* Compaction at the current revision, defragment, disarm of every alarm: etcd's documented
 * recovery from NOSPACE. Each step must succeed. */
static void recover(void)
{
    char rev[32];
    snprintf(rev, sizeof(rev), "%lld", (long long)revision());
    cr_assert_eq(ctl(NULL, "compaction", rev, NULL) == 0 || ctl(NULL, "compaction", rev, NULL) == 0,
                 1, "compaction failed");
    cr_assert_eq(ctl(NULL, "defrag", NULL, NULL), 0, "defrag failed");
    cr_assert_eq(ctl(NULL, "alarm", "disarm", NULL), 0, "alarm disarm failed");
}

/* A put succeeds, after the recovery steps if the member refuses it at first. */
static void put_recovers(kv_it_grpc **c, const char *key)
{
    char msg[256];
    int st = put(*c, key, "v", msg, sizeof(msg));
    if (st != 0) {
        cr_log_info("put %s: status %d \"%s\": compaction + defrag + disarm", key, st, msg);
        recover();
        kv_it_grpc_close(*c);
        *c = conn();
        st = put(*c, key, "v", msg, sizeof(msg));
    }
    cr_assert_eq(st, 0, "put %s after recovery: %d \"%s\"", key, st, msg);
}

Test(ops_space, delete_ranges_cannot_fill_the_raft_log)
{
    const char *extra[] = {"--quota-backend-bytes=16777216", NULL};
    start_with(extra);
    kv_it_grpc *c = conn();
    size_t klen = 1400 * 1000;
    uint8_t *key = malloc(klen);
    cr_assert(key);
    char msg[256];
    int ok = 0, refused = 0;
    for (int i = 0; i < 60; i++) {
        memset(key, 'a' + i % 26, klen);
        key[0] = '/';
        int st = delete_range(c, key, klen, msg, sizeof(msg));
        if (st == 0)
            ok++;
        else if (st > 0)
            refused++;
        int alive = kv_it_server_alive(srv);
        if (st < 0 || !alive) {
            char *log = NULL;
            (void)kv_it_server_log(srv, &log);
            size_t ll = log ? strlen(log) : 0;
            cr_assert_fail("the member stopped at DeleteRange %d (%d OK, %d refused before): "
                           "%s; log tail:\n%s",
                           i + 1, ok, refused, msg, log && ll > 3000 ? log + ll - 3000 : log);
        }
        if (st > 0)
            cr_log_info("DeleteRange %d refused: %d \"%s\"", i + 1, st, msg);
        if (i == 29) {
            /* Restarted in the middle, the member is not wedged. */
            kv_it_grpc_close(c);
            cr_assert_eq(kv_it_server_restart(srv, 10000, READY_MS), 0, "restart failed");
            c = conn();
            put_recovers(&c, "/space/mid");
        }
    }
    cr_log_info("60 DeleteRanges of 1.4 MB: %d OK, %d refused", ok, refused);
    fprintf(stderr, "  60 DeleteRanges of 1.4 MB: %d OK, %d refused\n", ok, refused);
    cr_assert_gt(ok, 0, "no DeleteRange was admitted: the test proves nothing");
    put_recovers(&c, "/space/end");
    /* And after a restart too. */
    kv_it_grpc_close(c);
    cr_assert_eq(kv_it_server_restart(srv, 10000, READY_MS), 0, "restart failed");
    c = conn();
    put_recovers(&c, "/space/restarted");
    kv_it_grpc_close(c);
    free(key);
}

Test(ops_space, log_filled_member_recovers)
{
    const char *extra[] = {"--experimental-wal=false", "--quota-backend-bytes=16777216",
                           "--max-raft-log-bytes=1099511627776", NULL};
    start_with(extra);
    kv_it_grpc *c = conn();
    size_t klen = 1400 * 1000;
    uint8_t *key = malloc(klen);
    cr_assert(key);
    char msg[256];
    int i = 0;
    for (; i < 60 && kv_it_server_alive(srv); i++) {
        memset(key, 'a' + i % 26, klen);
        key[0] = '/';
        if (delete_range(c, key, klen, msg, sizeof(msg)) < 0)
            break;
    }
    free(key);
    kv_it_grpc_close(c);
    cr_assert_eq(kv_it_server_wait_ready(srv, 2000) == -ECHILD || !kv_it_server_alive(srv), 1,
                 "the member did not stop after %d DeleteRanges without a log budget: the test "
                 "proves nothing",
                 i);
    cr_log_info("without a log budget the member stopped after %d DeleteRanges", i);
    (void)kv_it_server_kill9(srv);
    /* Restart with the default budget (drop the --max-raft-log-bytes flag). */
    srv->n_extra = 2;
    cr_assert_eq(kv_it_server_start(srv, READY_MS), 0, "restart failed");
    c = conn();
    put_recovers(&c, "/space/recovered");
    kv_it_grpc_close(c);
    char *log = NULL;
    cr_assert_eq(kv_it_server_log(srv, &log), 0);
    cr_assert_not_null(strstr(log, "over --max-raft-log-bytes"), "%s", log);
    free(log);
}

static double metric(const char *series)
{
    int status = 0;
    char *b = NULL;
    cr_assert_eq(kv_it_http_get(srv->metrics_port, "/metrics", 10000, &status, &b), 0);
    double v = -1;
    int rc = kv_it_metric_value(b, series, &v);
    free(b);
    cr_assert_eq(rc, 0, "metric %s missing", series);
    return v;
}

Test(ops_space, log_budget_refuses_with_too_many_requests)
{
    const char *extra[] = {"--max-raft-log-bytes=1048576", NULL};
    start_with(extra);
    kv_it_grpc *c = conn();
    size_t klen = 1400 * 1000;
    uint8_t *key = malloc(klen);
    cr_assert(key);
    memset(key, 'k', klen);
    char msg[256];
    int st = delete_range(c, key, klen, msg, sizeof(msg));
    free(key);
    cr_assert_eq(st, 8, "DeleteRange over the log budget: %d \"%s\"", st, msg);
    cr_assert_str_eq(msg, "etcdserver: too many requests");
    cr_assert_geq(metric("kvd_raft_log_refused_total"), 1);
    for (int i = 0; i < 50; i++) {
        char k[32];
        snprintf(k, sizeof(k), "/space/small/%d", i);
        cr_assert_eq(put(c, k, "v", msg, sizeof(msg)), 0, "%s", msg);
    }
    kv_it_grpc_close(c);
}

static int alarm_req(kv_it_grpc *c, Etcdserverpb__AlarmRequest__AlarmAction action, char *msg,
                     size_t cap)
{
    Etcdserverpb__AlarmRequest a = ETCDSERVERPB__ALARM_REQUEST__INIT;
    a.action = action;
    a.alarm = ETCDSERVERPB__ALARM_TYPE__NOSPACE;
    return call(c, "/etcdserverpb.Maintenance/Alarm", &a.base, msg, cap);
}

/* An acknowledged alarm change is what the next request is admitted against. The member's
 * commits are held 500 ms after their apply (failpoint), so an answer sent before its commit
 * would come that long before LMDB shows the change: an acknowledged NOSPACE disarm must
 * admit the very next put (a write is checked against the committed alarms when it arrives,
 * api/quota.c), and an acknowledged NOSPACE alarm must refuse it. */
Test(ops_space, alarm_change_seen_by_the_next_request)
{
    setenv("KVD_FAILPOINT_LEADER_APPLY_COMMIT_DELAY_MS", "500", 1);
    start_with(NULL);
    unsetenv("KVD_FAILPOINT_LEADER_APPLY_COMMIT_DELAY_MS");
    kv_it_grpc *c = conn();
    char msg[256];
    cr_assert_eq(put(c, "/space/a", "v", msg, sizeof(msg)), 0, "%s", msg);
    for (int round = 0; round < 3; round++) {
        cr_assert_eq(
            alarm_req(c, ETCDSERVERPB__ALARM_REQUEST__ALARM_ACTION__ACTIVATE, msg, sizeof(msg)), 0,
            "activate: %s", msg);
        cr_assert_eq(put(c, "/space/a", "v", msg, sizeof(msg)), 8, "round %d: %s", round, msg);
        cr_assert_str_eq(msg, "etcdserver: mvcc: database space exceeded");
        cr_assert_eq(
            alarm_req(c, ETCDSERVERPB__ALARM_REQUEST__ALARM_ACTION__DEACTIVATE, msg, sizeof(msg)),
            0, "deactivate: %s", msg);
        cr_assert_eq(put(c, "/space/a", "v", msg, sizeof(msg)), 0,
                     "round %d: the put right after an acknowledged disarm was refused: %s", round,
                     msg);
    }
    kv_it_grpc_close(c);
}
