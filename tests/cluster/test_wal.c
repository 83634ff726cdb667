/*
 * cluster_wal: the raft log in its own write-ahead log (kvd's default, --experimental-wal;
 * server/node/node_log.c, docs/raftlog.md). kvd only. Every other cluster suite runs on the WAL
 * too (and cluster_basic_lmdblog, cluster_snapshot_lmdblog on the log in data.mdb); these
 * tests cover what only the WAL has:
 *
 *  - a_data_dir_without_wal_is_converted_and_then_needs_the_flag: a member written with
 *    --experimental-wal=false restarts without it: its log moves to <data-dir>/wal (log line),
 *    every acknowledged put is there; started again with =false it refuses, naming the flag.
 *  - one_wal_flush_per_write: 200 sequential puts through a follower of 3 members: every
 *    member's kvd_fsyncs_total{file="wal"} grows by about one per put, never two, and
 *    {file="db"} grows too.
 *  - unsafe_no_fsync_counts_no_flushes: a single member with --unsafe-no-fsync, the log in its
 *    WAL and then in data.mdb: 50 puts leave kvd_fsyncs_total at 0 for both files and observe
 *    no WAL fsync duration (it flushes nothing; the data.mdb series used to count every LMDB
 *    commit as a flush, and with the log in data.mdb every commit was timed as a WAL fsync).
 *  - segments_rotate_and_go_after_compaction: small segments and --snapshot-count 100:
 *    3,000 puts rotate through many segments; the directory keeps a handful; a byte flipped
 *    in the oldest kept segment's first record then refuses the start, naming the file.
 *  - an_install_cut_after_the_rename_is_finished_at_start: a lagging follower killed
 *    (KVD_FAILPOINT_SNAPSHOT_INSTALL=after-publish) after the received snapshot replaced
 *    data.mdb but before the WAL recorded it; the next start finishes the install (log
 *    line), catches up, and every member's HashKV is equal.
 *  - a_small_log_budget_never_wedges_writes: a 16 MiB quota gives the log a 4 MiB budget; 120
 *    puts of 100 KB all succeed, each within 5 s (a put shed with "too many requests" while
 *    the compaction by bytes catches up is retried; segments are capped at an eighth of the
 *    budget: the active one, never released, could otherwise hold the log over it and
 *    refuse every write for ever).
 *  - a_converted_log_over_its_budget_shrinks_and_takes_writes: a data dir whose log in
 *    data.mdb (written with a 256 MiB --max-raft-log-bytes) holds 20 MB is converted under a
 *    4 MiB budget: acknowledged puts survive, 40 more puts of 100 KB succeed, segments are
 *    released and the log ends under the budget.
 *  - sequential_puts_through_a_follower_never_stall: 3,000 back-to-back puts through a follower
 *    with --snapshot-count 200, so that the pipelined readies (each WAL flush overlapping the
 *    commit before it) meet log compactions; none may stall (the first version advanced a ready
 *    whose answers the loop had not seen yet, and lost them: "request timed out").
 */
#include "cl_util.h"

#include <criterion/criterion.h>

#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static kvt_cluster g_c;
static cl_acks g_acks;

static void fini(void)
{
    kvt_cluster_destroy(&g_c);
}

static void skip_unless_kvd(void)
{
    if (kvt_target_from_env() != KV_TEST_SERVER_KVD)
        cr_skip_test("kvd's --experimental-wal");
}

static int start_with(int n, uint64_t snapshot_count, const char *const *args)
{
    kvt_cluster_opts o;
    kvt_cluster_opts_default(&o, n);
    o.heartbeat_ms = CL_HEARTBEAT_MS;
    o.election_ms = CL_ELECTION_MS;
    o.snapshot_count = snapshot_count;
    o.kvd_args = args;
    int r = kvt_cluster_init(&g_c, &o);
    if (r == 0)
        r = kvt_cluster_start(&g_c, 60000);
    if (r)
        kvt_cluster_dump(&g_c);
    return r;
}

static void put_n(int via, const char *prefix, int n)
{
    char err[256];
    for (int k = 0; k < n; k++) {
        char key[32], val[32];
        snprintf(key, sizeof(key), "%s%d", prefix, k);
        snprintf(val, sizeof(val), "v%d", k);
        int r = cl_put_ack(&g_c, &g_acks, via, key, val, 5000, err, sizeof(err));
        cr_assert_eq(r, 0, "put %s: %d %s", key, r, err);
    }
}

/* Segment files in member i's WAL directory: count, and the highest sequence number. */
static int wal_segments(int i, uint64_t *max_seq, char *oldest, size_t oldest_cap)
{
    char dir[PATH_MAX + 8];
    snprintf(dir, sizeof(dir), "%s/wal", g_c.m[i].data_dir);
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    uint64_t lo = UINT64_MAX;
    *max_seq = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 4, ".wal") != 0)
            continue;
        uint64_t seq = strtoull(e->d_name, NULL, 16);
        n++;
        if (seq > *max_seq)
            *max_seq = seq;
        if (seq < lo && oldest) {
            lo = seq;
            snprintf(oldest, oldest_cap, "%s", e->d_name);
        }
    }
    closedir(d);
    return n;
}

Test(cluster_wal, a_data_dir_without_wal_is_converted_and_then_needs_the_flag, .fini = fini,
     .timeout = 300)
{
    skip_unless_kvd();
    static const char *const lmdb[] = {"--experimental-wal=false", NULL};
    cr_assert_eq(start_with(1, 0, lmdb), 0);
    put_n(0, "/conv/a", 100);
    cr_assert_eq(kvt_member_stop(&g_c, 0, 10000), 0);

    g_c.o.kvd_args = NULL; /* the default: the WAL */
    cr_assert_eq(kvt_member_restart(&g_c, 0, 30000), 0, "restart with the WAL (the default)");
    cr_assert(cl_log_has(&g_c, 0, "the raft log moved from data.mdb to"), "no conversion line");
    cr_assert(cl_log_has(&g_c, 0, "raft log entries"), "data.mdb's entries were not dropped");
    cr_assert_eq(cl_verify_acks(&g_c, &g_acks, 0), 0, "acknowledged puts lost by the conversion");
    put_n(0, "/conv/b", 100);
    cr_assert_eq(kvt_member_kill9(&g_c, 0), 0);

    g_c.m[0].args = lmdb;
    cr_assert_eq(kvt_member_start(&g_c, 0), 0);
    cr_assert_geq(cl_wait_exit(&g_c, 0, 30000), 0,
                  "kvd started with --experimental-wal=false on a WAL data dir");
    cr_assert(cl_log_has(&g_c, 0, "start kvd without --experimental-wal=false"),
              "the refusal does not name the flag");

    g_c.m[0].args = NULL;
    cr_assert_eq(kvt_member_restart(&g_c, 0, 30000), 0);
    cr_assert_eq(cl_verify_acks(&g_c, &g_acks, 0), 0, "acknowledged puts lost after kill -9");
    fprintf(stderr, "  %d acknowledged puts survived the conversion and a kill -9\n", g_acks.n);
}

Test(cluster_wal, one_wal_flush_per_write, .fini = fini, .timeout = 300)
{
    skip_unless_kvd();
    cr_assert_eq(start_with(3, 0, NULL), 0); /* the default: the WAL */
    int l = kvt_cluster_wait_leader(&g_c, 10000, NULL);
    cr_assert_geq(l, 0);
    int f = cl_other(&g_c, l, -1);
    put_n(f, "/warm/", 20);
    double w0[3], d0[3];
    for (int i = 0; i < 3; i++) {
        w0[i] = cl_metric(&g_c, i, "kvd_fsyncs_total{file=\"wal\"}");
        d0[i] = cl_metric(&g_c, i, "kvd_fsyncs_total{file=\"db\"}");
    }
    const int puts = 200;
    put_n(f, "/flush/", puts);
    kvt_sleep_ms(300); /* the last entry's commit index reaches the followers */
    for (int i = 0; i < 3; i++) {
        double w = cl_metric(&g_c, i, "kvd_fsyncs_total{file=\"wal\"}") - w0[i];
        double d = cl_metric(&g_c, i, "kvd_fsyncs_total{file=\"db\"}") - d0[i];
        fprintf(stderr, "  %s (%s): %.0f WAL fsyncs, %.0f data.mdb fsyncs for %d puts\n",
                g_c.m[i].name, i == l ? "leader" : "follower", w, d, puts);
        cr_assert_geq(w, puts * 0.9, "%s: %.0f WAL flushes for %d puts: entries not in the WAL?",
                      g_c.m[i].name, w, puts);
        cr_assert_leq(w, puts * 1.1 + 5, "%s: %.0f WAL flushes for %d puts", g_c.m[i].name, w,
                      puts);
        cr_assert_gt(d, 0, "%s: no data.mdb flush counted for %d puts", g_c.m[i].name, puts);
    }
    cl_assert_hash_equal(&g_c, l);
}

Test(cluster_wal, unsafe_no_fsync_counts_no_flushes, .fini = fini, .timeout = 120)
{
    skip_unless_kvd();
    /* the log in its WAL, then in data.mdb (where LMDB's commit stood for the log's flush) */
    static const char *const wal[] = {"--unsafe-no-fsync", NULL};
    static const char *const lmdb[] = {"--unsafe-no-fsync", "--experimental-wal=false", NULL};
    static const char *const *const runs[] = {wal, lmdb};
    for (int k = 0; k < 2; k++) {
        cr_assert_eq(start_with(1, 0, runs[k]), 0);
        put_n(0, "/nosync/", 50);
        double w = cl_metric(&g_c, 0, "kvd_fsyncs_total{file=\"wal\"}");
        double d = cl_metric(&g_c, 0, "kvd_fsyncs_total{file=\"db\"}");
        double h = cl_metric(&g_c, 0, "etcd_disk_wal_fsync_duration_seconds_count");
        fprintf(stderr,
                "  --unsafe-no-fsync, log in %s: %.0f WAL and %.0f data.mdb fsyncs counted, %.0f "
                "WAL fsync durations observed for 50 puts\n",
                k ? "data.mdb" : "its WAL", w, d, h);
        cr_assert_eq(w, 0, "%.0f WAL flushes counted with --unsafe-no-fsync", w);
        cr_assert_eq(d, 0, "%.0f data.mdb flushes counted with --unsafe-no-fsync", d);
        cr_assert_eq(h, 0, "%.0f WAL fsync durations observed with --unsafe-no-fsync", h);
        kvt_cluster_destroy(&g_c);
    }
}

Test(cluster_wal, segments_rotate_and_go_after_compaction, .fini = fini, .timeout = 300)
{
    skip_unless_kvd();
    static const char *const wal[] = {"--wal-segment-bytes=65536", NULL};
    cr_assert_eq(start_with(1, 100, wal), 0);
    char err[256];
    char val[201];
    memset(val, 'x', 200);
    val[200] = 0;
    for (int k = 0; k < 3000; k++) {
        char key[32];
        snprintf(key, sizeof(key), "/seg/%d", k % 100);
        cr_assert_eq(kvt_put(&g_c, 0, key, val, 5000, NULL, err, sizeof(err)), 0, "%s", err);
    }
    double bytes = cl_metric(&g_c, 0, "kvd_raft_log_bytes");
    cr_assert_eq(kvt_member_stop(&g_c, 0, 10000), 0); /* no release while the files are read */
    uint64_t max_seq = 0;
    char oldest[64] = "";
    int n = wal_segments(0, &max_seq, oldest, sizeof(oldest));
    fprintf(stderr, "  3000 puts of 200 B: %d segments kept, %" PRIu64 " created, oldest %s\n", n,
            max_seq, oldest);
    cr_assert_geq(max_seq, 8, "the WAL did not rotate (%" PRIu64 " segments)", max_seq);
    cr_assert_leq(n, 5, "%d segments kept: compaction does not release the WAL", n);
    cr_assert_leq(bytes, 5 * 65536.0 + 65536, "kvd_raft_log_bytes %.0f", bytes);

    /* a flipped byte in the first sector of the oldest kept segment (its snapshot marker and
     * hard state, then entries: every sector of that record written, so not a torn tail):
     * refused with the file and the offset */
    {
        char path[PATH_MAX + 80];
        snprintf(path, sizeof(path), "%s/wal/%s", g_c.m[0].data_dir, oldest);
        int fd = open(path, O_RDWR);
        cr_assert_geq(fd, 0);
        unsigned char b;
        cr_assert_eq(pread(fd, &b, 1, 100), 1);
        b ^= 0x55;
        cr_assert_eq(pwrite(fd, &b, 1, 100), 1);
        close(fd);
        cr_assert_eq(kvt_member_start(&g_c, 0), 0);
        cr_assert_geq(cl_wait_exit(&g_c, 0, 30000), 0, "kvd started on a corrupt WAL");
        cr_assert(cl_log_has(&g_c, 0, "refusing to start: the raft log"), "no refusal line");
        cr_assert(cl_log_has(&g_c, 0, oldest), "the refusal does not name segment %s", oldest);
        char *log = NULL;
        if (kvt_member_log(&g_c, 0, 1u << 22, &log) == 0) {
            const char *p = strstr(log, "refusing to start");
            const char *e = p ? strchr(p, '\n') : NULL;
            if (p)
                fprintf(stderr, "  %.*s\n", e ? (int)(e - p) : 200, p);
            free(log);
        }
    }
}

Test(cluster_wal, an_install_cut_after_the_rename_is_finished_at_start, .fini = fini,
     .timeout = 400)
{
    skip_unless_kvd();
    cr_assert_eq(start_with(3, 100, NULL), 0);
    int l = kvt_cluster_wait_leader(&g_c, 10000, NULL);
    cr_assert_geq(l, 0);
    int f = cl_other(&g_c, l, -1);
    char err[256];
    cr_assert_eq(kvt_put(&g_c, l, "/inst/first", "1", 5000, NULL, err, sizeof(err)), 0, "%s", err);
    cr_assert_geq(cl_wait_value(&g_c, f, "/inst/first", "1", 1, 10000), 0);
    cr_assert_eq(kvt_member_stop(&g_c, f, 10000), 0);
    int64_t rev = 0;
    for (int k = 0; k < 600; k++) {
        char key[32], val[32];
        snprintf(key, sizeof(key), "/inst/k%d", k % 200);
        snprintf(val, sizeof(val), "v%d", k);
        cr_assert_eq(kvt_put(&g_c, l, key, val, 5000, &rev, err, sizeof(err)), 0, "%s", err);
    }
    cr_assert_eq(kvt_compact(&g_c, l, rev, 10000, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(kvt_put(&g_c, l, "/inst/last", "x", 5000, NULL, err, sizeof(err)), 0, "%s", err);

    static const char *const env[] = {"KVD_FAILPOINT_SNAPSHOT_INSTALL=after-publish", NULL};
    g_c.m[f].env = env;
    cr_assert_eq(kvt_member_start(&g_c, f), 0);
    int waited = cl_wait_exit(&g_c, f, 90000);
    g_c.m[f].env = NULL;
    cr_assert_geq(waited, 0, "%s was not killed in its install", g_c.m[f].name);
    cr_assert(cl_log_has(&g_c, f, "failpoint: killed after-publish the snapshot install"));

    cr_assert_eq(kvt_member_restart(&g_c, f, 30000), 0, "%s does not restart", g_c.m[f].name);
    cr_assert(cl_log_has(&g_c, f, "finished the snapshot install a restart interrupted"),
              "the start did not finish the install");
    cr_assert_geq(cl_wait_value(&g_c, f, "/inst/last", "x", 1, 60000), 0);
    cr_assert_eq(kvt_put(&g_c, l, "/inst/after", "y", 5000, NULL, err, sizeof(err)), 0, "%s", err);
    cr_assert_geq(cl_wait_value(&g_c, f, "/inst/after", "y", 1, 20000), 0);
    cl_assert_hash_equal(&g_c, l);
}

/* Pipelining (docs/raftlog.md "Wiring it in"): back-to-back puts through a follower, each
 * acknowledged before the next is sent, so every ready's WAL flush meets the LMDB commit of the
 * ready before it; --snapshot-count 200 puts log compactions (synced commits, WAL markers,
 * segment releases) among them. None may stall; every member ends with the same HashKV. */
Test(cluster_wal, sequential_puts_through_a_follower_never_stall, .fini = fini, .timeout = 300)
{
    skip_unless_kvd();
    cr_assert_eq(start_with(3, 200, NULL), 0); /* log compactions under the load too */
    int l = kvt_cluster_wait_leader(&g_c, 10000, NULL);
    cr_assert_geq(l, 0);
    int f = cl_other(&g_c, l, -1);
    char err[256];
    uint64_t t0 = kvt_now_ms();
    const int puts = 3000;
    for (int k = 0; k < puts; k++) {
        char key[32];
        snprintf(key, sizeof(key), "/seq/%d", k % 300);
        int r = kvt_put(&g_c, f, key, "value-value-value-value", 3000, NULL, err, sizeof(err));
        if (r != 0) {
            for (int i = 0; i < 3; i++) {
                kvt_status st = {0};
                int sr = kvt_member_status(&g_c, i, &st, 2000);
                fprintf(stderr,
                        "  %s%s: early advances %.0f, wal fsyncs %.0f; status %d: raft index "
                        "%" PRIu64 " applied %" PRIu64 " revision %" PRId64 "\n",
                        g_c.m[i].name, i == l ? " (leader)" : "",
                        cl_metric(&g_c, i, "kvd_raft_early_advances_total"),
                        cl_metric(&g_c, i, "kvd_fsyncs_total{file=\"wal\"}"), sr, st.index,
                        st.applied, st.revision);
            }
            cr_assert_fail("put %d through %s stalled: %d %s", k, g_c.m[f].name, r, err);
        }
    }
    double adv = cl_metric(&g_c, f, "kvd_raft_early_advances_total");
    fprintf(stderr, "  %d puts through %s in %" PRIu64 " ms; its early advances: %.0f\n", puts,
            g_c.m[f].name, kvt_now_ms() - t0, adv);
    cr_assert_gt(adv, 0, "no ready was advanced before its commit: pipelining not exercised");
    cl_assert_hash_equal(&g_c, l);
}

/* The log's budget and the active segment: with a 16 MiB quota the budget (--max-raft-log-bytes,
 * a quarter of the map's headroom) is 4 MiB, smaller than a 64 MiB segment. The active segment
 * is never released, so before segments were capped at an eighth of the budget (node_log.c
 * segment_bytes) its records alone passed the budget after about 40 puts of 100 KB and every
 * later write was refused "etcdserver: too many requests", for ever. */
Test(cluster_wal, a_small_log_budget_never_wedges_writes, .fini = fini, .timeout = 300)
{
    skip_unless_kvd();
    static const char *const small[] = {"--quota-backend-bytes=16777216", NULL};
    cr_assert_eq(start_with(1, 0, small), 0);
    static char val[100001];
    memset(val, 'x', sizeof(val) - 1);
    char err[256];
    int shed = 0;
    for (int k = 0; k < 120; k++) {
        char key[32];
        snprintf(key, sizeof(key), "/budget/%d", k % 5);
        /* A put that finds the log over its budget before the compaction by bytes has released
         * a segment is shed ("too many requests", the overload answer); the wedge this test
         * guards against refused every later put for ever. So each put must succeed within
         * 5 s, and a refusal is retried after 50 ms. */
        uint64_t until = kvt_now_ms() + 5000;
        int rc;
        while ((rc = kvt_put(&g_c, 0, key, val, 5000, NULL, err, sizeof(err))) != 0 &&
               strstr(err, "too many requests") && kvt_now_ms() < until) {
            shed++;
            kvt_sleep_ms(50);
        }
        cr_assert_eq(rc, 0, "put %d of 100 KB: %s for 5 s (log %.0f bytes, %.0f refused)", k, err,
                     cl_metric(&g_c, 0, "kvd_raft_log_bytes"),
                     cl_metric(&g_c, 0, "kvd_raft_log_refused_total"));
    }
    double bytes = cl_metric(&g_c, 0, "kvd_raft_log_bytes");
    double by_bytes = cl_metric(&g_c, 0, "kvd_raft_log_compactions_by_bytes_total");
    fprintf(stderr,
            "  120 puts of 100 KB, 16 MiB quota: log %.0f bytes, %.0f compactions by bytes, "
            "%d puts shed and retried\n",
            bytes, by_bytes, shed);
    cr_assert_lt(bytes, 4.0 * 1048576, "the log (%.0f bytes) is over its 4 MiB budget", bytes);
}

/* Upgrading a data dir whose log in data.mdb is far over the budget: possible only where
 * --max-raft-log-bytes was raised before the upgrade and lowered (or left to its default) after.
 * The import writes the whole log into capped segments; the first ready's compaction by bytes
 * must then release them, so writes go on and the log ends under its budget. */
Test(cluster_wal, a_converted_log_over_its_budget_shrinks_and_takes_writes, .fini = fini,
     .timeout = 300)
{
    skip_unless_kvd();
    static const char *const big[] = {"--experimental-wal=false", "--max-raft-log-bytes=268435456",
                                      NULL};
    cr_assert_eq(start_with(1, 1000000, big), 0);
    static char val[100001];
    memset(val, 'y', sizeof(val) - 1);
    char err[256];
    for (int k = 0; k < 200; k++) {
        char key[32];
        snprintf(key, sizeof(key), "/over/%d", k);
        cr_assert_eq(kvt_put(&g_c, 0, key, val, 5000, NULL, err, sizeof(err)), 0,
                     "put %d of 100 KB before the upgrade: %s", k, err);
    }
    put_n(0, "/over/small", 50); /* acknowledged, verified after each restart */
    double before = cl_metric(&g_c, 0, "kvd_raft_log_bytes");
    cr_assert_gt(before, 16.0 * 1048576, "the old log holds %.0f bytes, not over 16 MiB", before);
    cr_assert_eq(kvt_member_stop(&g_c, 0, 10000), 0);

    static const char *const small[] = {"--max-raft-log-bytes=4194304", NULL};
    g_c.o.kvd_args = small; /* the WAL (the default), a 4 MiB budget: 512 KiB segments */
    cr_assert_eq(kvt_member_restart(&g_c, 0, 30000), 0, "restart on the WAL, 4 MiB budget");
    cr_assert(cl_log_has(&g_c, 0, "the raft log moved from data.mdb to"), "no conversion line");
    cr_assert_eq(cl_verify_acks(&g_c, &g_acks, 0), 0, "acknowledged puts lost by the conversion");
    uint64_t max_seq = 0;
    int at_start = wal_segments(0, &max_seq, NULL, 0);
    for (int k = 0; k < 40; k++) {
        char key[32];
        snprintf(key, sizeof(key), "/after/%d", k % 5);
        cr_assert_eq(kvt_put(&g_c, 0, key, val, 5000, NULL, err, sizeof(err)), 0,
                     "put %d of 100 KB after the upgrade: %s (log %.0f bytes, %.0f refused)", k,
                     err, cl_metric(&g_c, 0, "kvd_raft_log_bytes"),
                     cl_metric(&g_c, 0, "kvd_raft_log_refused_total"));
    }
    put_n(0, "/after/small", 50);
    double after = cl_metric(&g_c, 0, "kvd_raft_log_bytes");
    /* A segment goes once LMDB's applied index past it is durable (the periodic sync off
     * the write path), so poll: a few seconds at most. */
    int segs = wal_segments(0, &max_seq, NULL, 0);
    for (uint64_t end = kvt_now_ms() + 10000; segs > 3 && kvt_now_ms() < end;) {
        kvt_sleep_ms(100);
        segs = wal_segments(0, &max_seq, NULL, 0);
    }
    fprintf(stderr,
            "  old log %.0f bytes over a 4 MiB budget: %d segments once serving, %d of %llu "
            "written and %.0f log bytes after 40 more puts\n",
            before, at_start, segs, (unsigned long long)max_seq, after);
    cr_assert_lt(after, 4.0 * 1048576, "the log (%.0f bytes) is over its 4 MiB budget", after);
    /* The import wrote the 20 MB into capped segments (seq 1, 2, ...); the compaction at the
     * first ready released all but the newest. */
    cr_assert_geq(max_seq, 8, "the import wrote %llu segments, not capped ones",
                  (unsigned long long)max_seq);
    cr_assert_leq(segs, 3, "%d segments left: the import's segments were not released", segs);

    cr_assert_eq(kvt_member_kill9(&g_c, 0), 0);
    cr_assert_eq(kvt_member_restart(&g_c, 0, 30000), 0);
    cr_assert_eq(cl_verify_acks(&g_c, &g_acks, 0), 0, "acknowledged puts lost after kill -9");
}
