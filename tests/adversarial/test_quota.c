/*
 * adv_quota: hardening of the quota / alarm / defragment area (docs/ARCHITECTURE.md, "Alarms,
 * quota and defragment"; docs/LESSONS.md, lessons 5 and 12).
 * - d3_full_quota_recovers_like_etcd: with a 4 MiB quota, puts fill the backend; every
 *   refused put gets RESOURCE_EXHAUSTED "etcdserver: mvcc: database space exceeded" (never
 *   UNAVAILABLE "storage error"); etcdctl alarm list shows NOSPACE; get and del work; /health
 *   is false; a restart with the same quota keeps the alarm and deletes still work;
 *   compaction + defrag + alarm disarm recover without raising the quota.
 * - d3_quota_counts_the_state_not_the_log: a 13-page quota (53,248 bytes, etcd's e2e
 *   TestCtlV3Alarm): the empty data file is already larger (LMDB's free pages, the raft log
 *   in the same file), yet a small put is accepted, because the quota bounds what the state
 *   holds; 4 KiB puts then raise NOSPACE; compaction + defrag + disarm let a put in again.
 * - d12_disk_full_raises_nospace: the data dir on an 8 MiB tmpfs (root only; skipped with a
 *   message otherwise) and a quota larger than the disk: when the disk fills, writes get
 *   the no-space error, /health is false and NOSPACE is raised; after kill -9 and restart
 *   every acknowledged put is there.
 * - d10_corrupt_record_raises_corrupt: a value byte flipped in data.mdb: reading it gives
 *   DATA_LOSS, the CORRUPT alarm is raised, and the member stops serving (DATA_LOSS
 *   "etcdserver: corrupt cluster" for other keys and for writes), /health false.
 * kvd only for the metric checks; the etcdctl flow is etcd 3.4's (compared by hand).
 */
#include <criterion/criterion.h>
#include "kvt_skip.h"
#include <criterion/logging.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "grpc_raw.h"
#include "kvt_grpc.h"
#include "harness.h"
#include "rpc.pb-c.h"

#define READY_MS 60000
#define NOSPACE_MSG "etcdserver: mvcc: database space exceeded"

static kv_it_server *srv;
static char ctl_bin[PATH_MAX];
static int mounted;

static void start_with(const char *const *extra)
{
    srv = calloc(1, sizeof(*srv));
    cr_assert(srv);
    kv_it_kind kind = kv_it_kind_from_env();
    int rc = kv_it_server_init(srv, kind, extra);
    cr_assert_eq(rc, 0, "init %s (%s): %d", kv_it_kind_name(kind), srv->bin, rc);
    cr_assert_eq(kv_it_etcdctl_bin(ctl_bin, sizeof(ctl_bin)), 0, "etcdctl: %s", ctl_bin);
}

static void teardown(void)
{
    if (srv) {
        kv_it_server_stop(srv, 5000);
        if (mounted)
            umount2(srv->data_dir, MNT_DETACH);
        mounted = 0;
        kv_it_server_destroy(srv);
        free(srv);
        srv = NULL;
    }
}

TestSuite(adv_quota, .fini = teardown, .timeout = 500);

static kv_it_grpc *conn(void)
{
    kv_it_grpc *c = NULL;
    cr_assert_eq(kv_it_grpc_open(&c, "127.0.0.1", srv->client_port, 5000), 0);
    return c;
}

/* One unary call; returns the grpc status (0 = OK), msg gets the message. */
static int call(kv_it_grpc *c, const char *method, const ProtobufCMessage *m, char *msg, size_t cap)
{
    int st = kvt_grpc_unary_msg(c, method, m, 30000, msg, cap);
    cr_assert(st >= 0, "%s: transport error %d", method, st);
    return st;
}

static int put(kv_it_grpc *c, const char *k, const uint8_t *v, size_t vlen, char *msg, size_t cap)
{
    Etcdserverpb__PutRequest p = ETCDSERVERPB__PUT_REQUEST__INIT;
    p.key.data = (uint8_t *)k;
    p.key.len = strlen(k);
    p.value.data = (uint8_t *)v;
    p.value.len = vlen;
    return call(c, "/etcdserverpb.KV/Put", &p.base, msg, cap);
}

static int get(kv_it_grpc *c, const char *k, char *msg, size_t cap)
{
    Etcdserverpb__RangeRequest r = ETCDSERVERPB__RANGE_REQUEST__INIT;
    r.key.data = (uint8_t *)k;
    r.key.len = strlen(k);
    return call(c, "/etcdserverpb.KV/Range", &r.base, msg, cap);
}

/* Runs etcdctl; returns its exit code; out/err (malloc'd) when non-NULL. */
static int ctl(char **out, char **err, const char *a1, const char *a2, const char *a3,
               const char *a4)
{
    kv_it_cmd_result r;
    int rc = kv_it_ctl(srv, ctl_bin, NULL, 60000, &r, a1, a2, a3, a4, NULL);
    cr_assert_eq(rc, 0, "etcdctl %s: %d", a1, rc);
    cr_assert(!r.timed_out, "etcdctl %s timed out", a1);
    int code = r.exit_code;
    if (out)
        *out = strdup(r.out ? r.out : "");
    if (err)
        *err = strdup(r.err ? r.err : "");
    kv_it_cmd_result_free(&r);
    return code;
}

static int health(char **body)
{
    int status = 0;
    char *b = NULL;
    int rc = kv_it_http_get(srv->metrics_port, "/health", 10000, &status, &b);
    cr_assert_eq(rc, 0, "/health: %d", rc);
    if (body)
        *body = b;
    else
        free(b);
    return status;
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

static void expect_health(int healthy)
{
    char *body = NULL;
    health(&body);
    const char *want = healthy ? "\"health\":\"true\"" : "\"health\":\"false\"";
    cr_assert(strstr(body, want), "/health: want %s, got %s", want, body);
    free(body);
}

/* Polls `etcdctl alarm list` until its output contains want (or not), up to 10 s. */
static void wait_alarm_list(const char *want, int present)
{
    char *out = NULL;
    for (int i = 0; i < 100; i++) {
        free(out);
        cr_assert_eq(ctl(&out, NULL, "alarm", "list", NULL, NULL), 0);
        if ((strstr(out, want) != NULL) == present)
            break;
        usleep(100000);
    }
    cr_assert((strstr(out, want) != NULL) == present, "alarm list: %s (want %s %s)", out,
              present ? "" : "no", want);
    free(out);
}

static int64_t revision(void)
{
    char *out = NULL;
    cr_assert_eq(ctl(&out, NULL, "endpoint", "status", "-w", "json"), 0);
    const char *p = strstr(out, "\"revision\":");
    cr_assert_not_null(p, "%s", out);
    int64_t rev = strtoll(p + 11, NULL, 10);
    free(out);
    return rev;
}

static int64_t db_size(void)
{
    char *out = NULL;
    cr_assert_eq(ctl(&out, NULL, "endpoint", "status", "-w", "json"), 0);
    const char *p = strstr(out, "\"dbSize\":");
    cr_assert_not_null(p, "%s", out);
    int64_t v = strtoll(p + 9, NULL, 10);
    free(out);
    return v;
}

Test(adv_quota, d3_full_quota_recovers_like_etcd)
{
    const char *extra[] = {"--quota-backend-bytes=4194304", NULL};
    start_with(extra);
    cr_assert_eq(kv_it_server_start(srv, READY_MS), 0);
    kv_it_grpc *c = conn();
    uint8_t val[2000];
    memset(val, 'v', sizeof(val));
    char key[32], msg[256];
    int i, st = 0;
    for (i = 0; i < 20000; i++) {
        snprintf(key, sizeof(key), "q/%03d", i % 300);
        val[0] = (uint8_t)i;
        st = put(c, key, val, sizeof(val), msg, sizeof(msg));
        if (st != 0)
            break;
    }
    cr_log_info("quota: %d puts of 2000 bytes accepted before the quota", i);
    cr_assert_eq(st, 8, "first refused put: status %d \"%s\" (want RESOURCE_EXHAUSTED)", st, msg);
    cr_assert_str_eq(msg, NOSPACE_MSG);
    /* the store does not wedge: every further put gets the same answer */
    for (int j = 0; j < 100; j++) {
        snprintf(key, sizeof(key), "more/%03d", j);
        st = put(c, key, val, sizeof(val), msg, sizeof(msg));
        cr_assert_eq(st, 8, "put after quota: %d \"%s\"", st, msg);
        cr_assert_str_eq(msg, NOSPACE_MSG);
    }
    kv_it_grpc_close(c);

    wait_alarm_list("alarm:NOSPACE", 1);
    char *out = NULL, *err = NULL;
    cr_assert_neq(ctl(NULL, &err, "put", "x", "y", NULL), 0);
    cr_assert(strstr(err, NOSPACE_MSG), "etcdctl put: %s", err);
    free(err);
    cr_assert_eq(ctl(&out, NULL, "get", "q/001", NULL, NULL), 0);
    cr_assert(strstr(out, "q/001"), "get: %s", out);
    free(out);
    cr_assert_eq(ctl(&out, NULL, "del", "q/001", NULL, NULL), 0);
    cr_assert_str_eq(out, "1\n");
    free(out);
    expect_health(0);
    if (srv->kind == KV_IT_KVD)
        cr_assert_eq(metric("kvd_alarms{type=\"NOSPACE\"}"), 1.0);

    /* a restart with the same quota keeps the alarm, and deletes still work */
    cr_assert_eq(kv_it_server_restart(srv, 5000, READY_MS), 0);
    wait_alarm_list("alarm:NOSPACE", 1);
    cr_assert_eq(ctl(&out, NULL, "del", "q/", "--prefix", NULL), 0);
    cr_assert_str_eq(out, "299\n");
    free(out);
    cr_assert_neq(ctl(NULL, &err, "put", "x", "y", NULL), 0);
    cr_assert(strstr(err, NOSPACE_MSG), "etcdctl put after restart: %s", err);
    free(err);

    /* recovery without raising the quota: compaction, defragment, disarm */
    char revs[32];
    int64_t before = db_size();
    snprintf(revs, sizeof(revs), "%lld", (long long)revision());
    cr_assert_eq(ctl(&out, NULL, "compaction", revs, NULL, NULL), 0, "compaction");
    free(out);
    cr_assert_eq(ctl(&out, &err, "defrag", NULL, NULL, NULL), 0, "defrag: %s", err);
    cr_assert(strstr(out, "Finished defragmenting"), "defrag: %s", out);
    free(out);
    free(err);
    int64_t after = db_size();
    cr_log_info("defrag: db size %lld -> %lld bytes", (long long)before, (long long)after);
    cr_assert(after < before / 2, "defrag did not shrink: %lld -> %lld", (long long)before,
              (long long)after);
    cr_assert_eq(ctl(&out, NULL, "alarm", "disarm", NULL, NULL), 0);
    cr_assert(strstr(out, "alarm:NOSPACE"), "disarm prints the disarmed alarm: %s", out);
    free(out);
    wait_alarm_list("alarm:NOSPACE", 0);
    cr_assert_eq(ctl(&out, &err, "put", "x", "y", NULL), 0, "put after recovery: %s", err);
    cr_assert_str_eq(out, "OK\n");
    free(out);
    free(err);
    expect_health(1);
    if (srv->kind == KV_IT_KVD)
        cr_assert_eq(metric("kvd_alarms{type=\"NOSPACE\"}"), 0.0);
}

Test(adv_quota, d3_quota_counts_the_state_not_the_log)
{
    const char *extra[] = {"--quota-backend-bytes=53248", NULL};
    start_with(extra);
    cr_assert_eq(kv_it_server_start(srv, READY_MS), 0);
    int64_t empty = db_size();
    cr_log_info("quota 53248 bytes; the data file holds %lld bytes before the first put",
                (long long)empty);
    kv_it_grpc *c = conn();
    uint8_t small[64], big[4096];
    memset(small, 'a', sizeof(small));
    memset(big, 'b', sizeof(big));
    char msg[256];
    int st = put(c, "1st_test", small, sizeof(small), msg, sizeof(msg));
    cr_assert_eq(st, 0, "a small put under a 13-page quota: status %d \"%s\"", st, msg);
    int i;
    for (i = 0; i < 1000; i++)
        if ((st = put(c, "2nd_test", big, sizeof(big), msg, sizeof(msg))) != 0)
            break;
    cr_log_info("quota: %d puts of 4 KiB accepted, then the alarm; file %lld bytes", i,
                (long long)db_size());
    cr_assert_eq(st, 8, "4 KiB puts never refused (%d): status %d \"%s\"", i, st, msg);
    cr_assert_str_eq(msg, NOSPACE_MSG);
    if (srv->kind == KV_IT_KVD) /* etcd's bbolt size lags its writes: 43 fit there */
        cr_assert_lt(i, 13, "%d puts of 4 KiB fit in 13 pages: the quota bounds nothing", i);
    kv_it_grpc_close(c);
    wait_alarm_list("alarm:NOSPACE", 1);
    expect_health(0);

    char revs[32], *out = NULL, *err = NULL;
    snprintf(revs, sizeof(revs), "%lld", (long long)revision());
    cr_assert_eq(ctl(&out, NULL, "compaction", revs, "--physical", NULL), 0, "compaction");
    free(out);
    cr_assert_eq(ctl(&out, &err, "defrag", NULL, NULL, NULL), 0, "defrag: %s", err);
    free(out);
    free(err);
    cr_assert_eq(ctl(&out, NULL, "alarm", "disarm", NULL, NULL), 0);
    free(out);
    wait_alarm_list("alarm:NOSPACE", 0);
    cr_assert_eq(ctl(&out, &err, "put", "4th_test", "aaaa", NULL), 0, "put after recovery: %s",
                 err);
    cr_assert_str_eq(out, "OK\n");
    free(out);
    free(err);
    expect_health(1);
}

Test(adv_quota, d12_disk_full_raises_nospace)
{
    /* kvd's WAL preallocates its segments (64 MiB by default, as etcd's): 1 MiB ones fit the
     * 8 MiB disk, so the state file is what fills it */
    const char *extra_kvd[] = {"--quota-backend-bytes=268435456", "--wal-segment-bytes=1048576",
                               NULL};
    const char *extra_etcd[] = {"--quota-backend-bytes=268435456", NULL};
    start_with(kv_it_kind_from_env() == KV_IT_KVD ? extra_kvd : extra_etcd);
    mkdir(srv->data_dir, 0700);
    if (mount("tmpfs", srv->data_dir, "tmpfs", 0, "size=8m") != 0) {
        cr_log_warn("skipped: cannot mount an 8 MiB tmpfs on %s (%s); needs root and "
                    "CAP_SYS_ADMIN",
                    srv->data_dir, strerror(errno));
        KVT_SKIP_MISSING("cannot mount a small tmpfs (not root or no CAP_SYS_ADMIN)");
    }
    mounted = 1;
    cr_assert_eq(kv_it_server_start(srv, READY_MS), 0);
    kv_it_grpc *c = conn();
    uint8_t val[4000];
    memset(val, 'd', sizeof(val));
    char key[32], msg[256];
    int acked = 0, st = 0;
    for (int i = 0; i < 20000; i++) {
        snprintf(key, sizeof(key), "d/%05d", i);
        st = put(c, key, val, sizeof(val), msg, sizeof(msg));
        if (st != 0)
            break;
        acked++;
    }
    cr_log_info("disk full after %d acknowledged puts: status %d \"%s\"", acked, st, msg);
    cr_assert_eq(st, 8, "write on a full disk: status %d \"%s\" (want RESOURCE_EXHAUSTED)", st,
                 msg);
    cr_assert_str_eq(msg, NOSPACE_MSG);
    st = put(c, "d/again", val, sizeof(val), msg, sizeof(msg));
    cr_assert_eq(st, 8, "%d %s", st, msg);
    kv_it_grpc_close(c);
    expect_health(0);
    if (srv->kind == KV_IT_KVD)
        cr_assert_eq(metric("kvd_alarms{type=\"NOSPACE\"}"), 1.0);

    /* acknowledged writes are never lost */
    cr_assert_eq(kv_it_server_kill9(srv), 0);
    cr_assert_eq(kv_it_server_start(srv, READY_MS), 0);
    c = conn();
    Etcdserverpb__RangeRequest q = ETCDSERVERPB__RANGE_REQUEST__INIT;
    q.key.data = (uint8_t *)"d/";
    q.key.len = 2;
    q.range_end.data = (uint8_t *)"d0";
    q.range_end.len = 2;
    q.count_only = 1;
    uint8_t buf[64], *resp = NULL;
    size_t n = etcdserverpb__range_request__pack(&q, buf), rlen = 0;
    int status = -1;
    cr_assert_eq(kv_it_grpc_call(c, "/etcdserverpb.KV/Range", buf, n, &resp, &rlen, 30000, &status,
                                 msg, sizeof(msg)),
                 0, "count after restart: %d %s", status, msg);
    Etcdserverpb__RangeResponse *rr = etcdserverpb__range_response__unpack(NULL, rlen, resp);
    cr_assert_not_null(rr);
    cr_assert_eq(rr->count, acked, "after kill -9 and restart: %lld keys, %d acknowledged",
                 (long long)rr->count, acked);
    etcdserverpb__range_response__free_unpacked(rr, NULL);
    free(resp);
    kv_it_grpc_close(c);
}

/* Flips one byte of every occurrence of marker in path (stale copies in free pages too). */
static void flip_marker(const char *path, const char *marker)
{
    FILE *f = fopen(path, "r+b");
    cr_assert_not_null(f, "%s: %s", path, strerror(errno));
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n);
    cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    size_t ml = strlen(marker);
    int found = 0;
    /* Only the stored KeyValue (value = field 5, tag 0x2a, one length byte): the raft log also
     * holds the Put that wrote it, and a corrupted log is refused at start (adv_startup). */
    for (long i = 2; i + (long)ml <= n; i++)
        if (memcmp(buf + i, marker, ml) == 0 && (uint8_t)buf[i - 2] == 0x2a) {
            fseek(f, i + (long)ml / 2, SEEK_SET);
            fputc('#', f);
            found++;
        }
    cr_assert(found > 0, "marker not found in %s", path);
    fclose(f);
    free(buf);
}

Test(adv_quota, d10_corrupt_record_raises_corrupt)
{
    /* The startup check (--startup-verify-records) would refuse this store before it serves;
     * switch it off so that the runtime path (a record failing its checksum on read) is the
     * one exercised here. adv_startup covers the startup refusal. */
    const char *extra[] = {"--startup-verify-records=0", NULL};
    start_with(extra);
    if (srv->kind != KV_IT_KVD)
        cr_skip_test("corrupts kvd's data.mdb");
    cr_assert_eq(kv_it_server_start(srv, READY_MS), 0);
    char *out = NULL;
    cr_assert_eq(ctl(&out, NULL, "put", "c/1", "MARKER-0123456789-MARKER", NULL), 0);
    free(out);
    cr_assert_eq(ctl(&out, NULL, "put", "c/2", "fine", NULL), 0);
    free(out);
    cr_assert_eq(kv_it_server_stop(srv, 5000), 0);
    char path[PATH_MAX + 16];
    snprintf(path, sizeof(path), "%s/data.mdb", srv->data_dir);
    flip_marker(path, "MARKER-0123456789-MARKER");
    cr_assert_eq(kv_it_server_start(srv, READY_MS), 0);

    kv_it_grpc *c = conn();
    char msg[256];
    int st = get(c, "c/1", msg, sizeof(msg));
    cr_assert_eq(st, 15, "read of a corrupt record: status %d \"%s\" (want DATA_LOSS)", st, msg);
    wait_alarm_list("alarm:CORRUPT", 1);
    st = get(c, "c/2", msg, sizeof(msg));
    cr_assert_eq(st, 15, "read after CORRUPT: %d \"%s\"", st, msg);
    cr_assert_str_eq(msg, "etcdserver: corrupt cluster");
    st = put(c, "c/3", (const uint8_t *)"x", 1, msg, sizeof(msg));
    cr_assert_eq(st, 15, "write after CORRUPT: %d \"%s\"", st, msg);
    cr_assert_str_eq(msg, "etcdserver: corrupt cluster");
    kv_it_grpc_close(c);
    expect_health(0);
    cr_assert_eq(metric("kvd_alarms{type=\"CORRUPT\"}"), 1.0);
    char *log = NULL;
    cr_assert_eq(kv_it_server_log(srv, &log), 0);
    cr_assert(strstr(log, "CORRUPT"), "the log names the corruption: %s", log);
    free(log);
}
