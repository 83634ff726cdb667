/* Long compactions on real kvd processes (docs/ARCHITECTURE.md "Compaction"): a Compact of
 * hundreds of thousands of revisions never runs as one write transaction.
 *
 * - long_compaction_runs_in_bounded_steps: one member, 200,000 revisions over 100 keys
 *   (2,000 per key; 60,000 under ASan), Compact while a writer puts: the compaction takes
 *   many steps (kvd_compaction_batches_total) and no step removes more than the default
 *   batch limit (kvd_compaction_step_removed_max <= 50); exactly the superseded revisions
 *   go; a read below the compaction point fails as soon as the Compact is answered; the
 *   writer's puts all succeed. Counts, not latencies (bench/compact measures those).
 * - kill9_mid_compaction_resumes_and_hashes_agree: three members with
 *   --experimental-compaction-batch-limit 20, a follower is killed (-9) while its
 *   compaction is half done, restarted: it resumes from the persisted cursor and finishes
 *   (it removes revisions after the restart, nothing is pending anywhere), and HashKV is
 *   equal on every member; every acknowledged write is there.
 */
#include <criterion/criterion.h>

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cl_util.h"
#include "grpc_raw.h"
#include "rpc.pb-c.h"

#if defined(__SANITIZE_ADDRESS__)
#define IT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define IT_ASAN 1
#endif
#endif
#ifndef IT_ASAN
#define IT_ASAN 0
#endif

#define NKEYS 100
#define TXN_PUTS 100
#define BATCH_LIMIT 50 /* kvd's default --experimental-compaction-batch-limit */

static kvt_cluster g_c;

static void fini(void)
{
    kvt_cluster_destroy(&g_c);
}

TestSuite(compact_it, .fini = fini);

static kv_it_grpc *conn(int i)
{
    kv_it_grpc *g = NULL;
    cr_assert_eq(kv_it_grpc_open(&g, "127.0.0.1", g_c.m[i].client_port, 10000), 0);
    return g;
}

/* One unary call; 0 and the grpc status in *st (msg: its message). */
static int call(kv_it_grpc *g, const char *path, const uint8_t *req, size_t len, uint8_t **resp,
                size_t *rlen, int *st, char *msg, size_t cap)
{
    *resp = NULL;
    *rlen = 0;
    return kv_it_grpc_call(g, path, req, len, resp, rlen, 120000, st, msg, cap);
}

/* n revisions through member i: Txns of TXN_PUTS puts on distinct keys of NKEYS. Returns
 * the last revision. */
static int64_t fill(int i, int n)
{
    kv_it_grpc *g = conn(i);
    char keys[TXN_PUTS][16], val[32];
    Etcdserverpb__PutRequest puts[TXN_PUTS];
    Etcdserverpb__RequestOp ops[TXN_PUTS], *opp[TXN_PUTS];
    int64_t rev = 0;
    for (int done = 0; done < n;) {
        int k = 0;
        for (; k < TXN_PUTS && done < n; k++, done++) {
            snprintf(keys[k], sizeof keys[k], "c/%03d", done % NKEYS);
            snprintf(val, sizeof val, "v%d", done / NKEYS);
            etcdserverpb__put_request__init(&puts[k]);
            puts[k].key.data = (uint8_t *)keys[k];
            puts[k].key.len = strlen(keys[k]);
            puts[k].value.data = (uint8_t *)val;
            puts[k].value.len = strlen(val);
            etcdserverpb__request_op__init(&ops[k]);
            ops[k].request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT;
            ops[k].request_put = &puts[k];
            opp[k] = &ops[k];
        }
        Etcdserverpb__TxnRequest t = ETCDSERVERPB__TXN_REQUEST__INIT;
        t.n_success = (size_t)k;
        t.success = opp;
        size_t len = etcdserverpb__txn_request__get_packed_size(&t);
        uint8_t *buf = malloc(len), *resp;
        etcdserverpb__txn_request__pack(&t, buf);
        size_t rlen;
        int st = -1;
        char msg[256];
        int rc = call(g, "/etcdserverpb.KV/Txn", buf, len, &resp, &rlen, &st, msg, sizeof msg);
        free(buf);
        cr_assert(rc == 0 && st == 0, "fill txn: rc %d status %d %s", rc, st, msg);
        Etcdserverpb__TxnResponse *r = etcdserverpb__txn_response__unpack(NULL, rlen, resp);
        cr_assert_not_null(r);
        rev = r->header->revision;
        etcdserverpb__txn_response__free_unpacked(r, NULL);
        free(resp);
    }
    kv_it_grpc_close(g);
    return rev;
}

/* Compact (not physical: answered once applied, as `etcdctl compact`) through member i. */
static void compact(int i, int64_t rev)
{
    kv_it_grpc *g = conn(i);
    Etcdserverpb__CompactionRequest q = ETCDSERVERPB__COMPACTION_REQUEST__INIT;
    q.revision = rev;
    uint8_t buf[32], *resp;
    size_t len = etcdserverpb__compaction_request__pack(&q, buf), rlen;
    int st = -1;
    char msg[256];
    int rc = call(g, "/etcdserverpb.KV/Compact", buf, len, &resp, &rlen, &st, msg, sizeof msg);
    free(resp);
    kv_it_grpc_close(g);
    cr_assert(rc == 0 && st == 0, "compact at %" PRId64 ": rc %d status %d %s", rev, rc, st, msg);
}

/* A serializable Range of key at rev through member i: its grpc status (msg: message). */
static int range_at(int i, const char *key, int64_t rev, char *msg, size_t cap)
{
    kv_it_grpc *g = conn(i);
    Etcdserverpb__RangeRequest q = ETCDSERVERPB__RANGE_REQUEST__INIT;
    q.key.data = (uint8_t *)key;
    q.key.len = strlen(key);
    q.revision = rev;
    q.serializable = 1;
    uint8_t buf[64], *resp;
    size_t len = etcdserverpb__range_request__pack(&q, buf), rlen;
    int st = -1;
    int rc = call(g, "/etcdserverpb.KV/Range", buf, len, &resp, &rlen, &st, msg, cap);
    free(resp);
    kv_it_grpc_close(g);
    cr_assert(rc == 0 || rc == KV_IT_GRPC_STATUS, "range: %d", rc);
    return st;
}

/* ---- a writer that puts in a loop through member i until stopped ---- */

typedef struct writer {
    int member;
    atomic_int stop;
    int ok, failed;
    char err[256];
    pthread_t th;
} writer;

static void *writer_main(void *arg)
{
    writer *w = arg;
    kv_it_grpc *g = NULL;
    if (kv_it_grpc_open(&g, "127.0.0.1", g_c.m[w->member].client_port, 10000)) {
        w->failed++;
        return NULL;
    }
    for (int i = 0; !atomic_load(&w->stop); i++) {
        char key[32];
        snprintf(key, sizeof key, "w/%04d", i % 1000);
        Etcdserverpb__PutRequest p = ETCDSERVERPB__PUT_REQUEST__INIT;
        p.key.data = (uint8_t *)key;
        p.key.len = strlen(key);
        p.value.data = (uint8_t *)"x";
        p.value.len = 1;
        uint8_t buf[64], *resp = NULL;
        size_t len = etcdserverpb__put_request__pack(&p, buf), rlen = 0;
        int st = -1;
        int rc = kv_it_grpc_call(g, "/etcdserverpb.KV/Put", buf, len, &resp, &rlen, 60000, &st,
                                 w->err, sizeof w->err);
        free(resp);
        if (rc == 0 && st == 0) {
            w->ok++;
        } else {
            w->failed++;
            break;
        }
    }
    kv_it_grpc_close(g);
    return NULL;
}

static double metric(int i, const char *name)
{
    return cl_metric(&g_c, i, name);
}

/* Polls until no member has a physical compaction pending; returns the ms waited. */
static uint64_t wait_compacted(uint32_t timeout_ms)
{
    uint64_t t0 = kvt_now_ms();
    for (;;) {
        int pending = 0;
        for (int i = 0; i < g_c.n; i++)
            if (kvt_member_running(&g_c, i) && metric(i, "kvd_compaction_pending") != 0)
                pending = 1;
        if (!pending)
            return kvt_now_ms() - t0;
        cr_assert_lt(kvt_now_ms() - t0, timeout_ms, "compaction still pending");
        kvt_sleep_ms(100);
    }
}

Test(compact_it, long_compaction_runs_in_bounded_steps, .timeout = 900)
{
    int r = cl_start(&g_c, 1, 0);
    if (r)
        kvt_cluster_dump(&g_c);
    cr_assert_eq(r, 0, "cluster start: %d", r);
    int n = IT_ASAN ? 60000 : 200000;
    uint64_t t0 = kvt_now_ms();
    int64_t rev = fill(0, n);
    fprintf(stderr, "filled %d revisions over %d keys in %" PRIu64 " ms, revision %" PRId64 "\n", n,
            NKEYS, kvt_now_ms() - t0, rev);
    double b0 = metric(0, "kvd_compaction_batches_total");
    double r0 = metric(0, "kvd_compaction_removed_total");

    writer w = {.member = 0};
    pthread_create(&w.th, NULL, writer_main, &w);
    kvt_sleep_ms(200);
    t0 = kvt_now_ms();
    compact(0, rev);
    uint64_t answered = kvt_now_ms() - t0;
    char msg[256];
    int st = range_at(0, "c/001", rev - 1, msg, sizeof msg);
    cr_assert_eq(st, 11, "a read below the compaction point fails at once (%d %s)", st, msg);
    cr_assert_str_eq(msg, "etcdserver: mvcc: required revision has been compacted");
    uint64_t took = wait_compacted(600000);
    atomic_store(&w.stop, 1);
    pthread_join(w.th, NULL);

    double steps = metric(0, "kvd_compaction_batches_total") - b0;
    double removed = metric(0, "kvd_compaction_removed_total") - r0;
    double step_max = metric(0, "kvd_compaction_step_removed_max");
    fprintf(stderr,
            "Compact answered in %" PRIu64 " ms; physical compaction %" PRIu64
            " ms later: %.0f steps, %.0f revisions removed, at most %.0f per step; writer: "
            "%d puts, %d failed\n",
            answered, took, steps, removed, step_max, w.ok, w.failed);
    cr_assert_eq(w.failed, 0, "the writer's puts succeed during the compaction: %s", w.err);
    cr_assert_gt(w.ok, 0);
    cr_assert_eq(removed, (double)(n - NKEYS), "every superseded revision goes, nothing else");
    cr_assert_geq(steps, (double)((n - NKEYS) / BATCH_LIMIT),
                  "the compaction ran in many steps (%.0f)", steps);
    cr_assert(step_max > 0 && step_max <= BATCH_LIMIT,
              "no step removes more than %d revisions (largest: %.0f)", BATCH_LIMIT, step_max);
    cr_assert_eq(range_at(0, "c/001", rev, msg, sizeof msg), 0, "%s", msg);
}

Test(compact_it, kill9_mid_compaction_resumes_and_hashes_agree, .timeout = 900)
{
    static const char *const args[] = {"--experimental-compaction-batch-limit", "20", NULL};
    kvt_cluster_opts o;
    kvt_cluster_opts_default(&o, 3);
    o.heartbeat_ms = CL_HEARTBEAT_MS;
    o.election_ms = CL_ELECTION_MS;
    o.kvd_args = args;
    cr_assert_eq(kvt_cluster_init(&g_c, &o), 0);
    int r = kvt_cluster_start(&g_c, 60000);
    if (r)
        kvt_cluster_dump(&g_c);
    cr_assert_eq(r, 0, "cluster start: %d", r);
    int leader = kvt_cluster_wait_leader(&g_c, 30000, NULL);
    cr_assert_geq(leader, 0);
    int f = (leader + 1) % 3;
    int n = IT_ASAN ? 30000 : 60000;
    int64_t rev = fill(leader, n);
    fprintf(stderr, "filled %d revisions, revision %" PRId64 "; follower %s is the victim\n", n,
            rev, g_c.m[f].name);

    writer w = {.member = leader};
    pthread_create(&w.th, NULL, writer_main, &w);
    compact(leader, rev);
    /* kill the follower once it has applied the Compact, removed some revisions and has
     * more to go */
    double removed = 0, pending = 0;
    uint64_t t0 = kvt_now_ms();
    while (kvt_now_ms() - t0 < 120000) {
        pending = metric(f, "kvd_compaction_pending");
        if (pending == 1)
            break;
        kvt_sleep_ms(5);
    }
    cr_assert_eq(pending, 1, "the follower applied the Compact");
    while (kvt_now_ms() - t0 < 120000) {
        pending = metric(f, "kvd_compaction_pending");
        removed = metric(f, "kvd_compaction_removed_total");
        if (removed > 0 || pending == 0)
            break;
        kvt_sleep_ms(5);
    }
    cr_assert_eq(pending, 1, "the follower's compaction is under way (%.0f removed)", removed);
    cr_assert_gt(removed, 0);
    cr_assert_eq(kvt_member_kill9(&g_c, f), 0);
    fprintf(stderr, "killed %s after %.0f of %d revisions removed\n", g_c.m[f].name, removed,
            n - NKEYS);
    cr_assert_lt(removed, n - NKEYS, "killed in the middle of the compaction");
    kvt_sleep_ms(500);
    cr_assert_eq(kvt_member_restart(&g_c, f, 60000), 0);
    wait_compacted(600000);
    double after = metric(f, "kvd_compaction_removed_total");
    fprintf(stderr, "%s removed %.0f revisions after its restart\n", g_c.m[f].name, after);
    cr_assert_gt(after, 0, "the restarted member resumed its compaction");
    cr_assert_leq(after, n - NKEYS);
    atomic_store(&w.stop, 1);
    pthread_join(w.th, NULL);
    cr_assert_eq(w.failed, 0, "writer: %s", w.err);

    cl_assert_hash_equal(&g_c, leader);
    char msg[256];
    for (int i = 0; i < 3; i++) {
        int st = range_at(i, "c/007", rev - 1, msg, sizeof msg);
        cr_assert_eq(st, 11, "%s: a compacted revision (%d %s)", g_c.m[i].name, st, msg);
        cr_assert_eq(metric(i, "kvd_compaction_pending"), 0);
    }
    char v[32], want[32];
    int found = 0;
    snprintf(want, sizeof want, "v%d", (n - 1) / NKEYS);
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(
            kvt_get(&g_c, i, "c/099", 1, 10000, v, sizeof v, &found, NULL, msg, sizeof msg), 0);
        cr_assert(found && strcmp(v, want) == 0, "%s: c/099 = %s", g_c.m[i].name, v);
    }
}
