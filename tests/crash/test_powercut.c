/*
 * crash_powercut / crash_powercut_unsafe: power loss at many cut points during a write load.
 *
 * One round: the member (a kvd process) runs with the powercut shim (libkvd_powercut.so,
 * LD_PRELOAD) under a load of puts from several client threads, every acknowledged put
 * recorded with its revision; at a random moment it gets SIGKILL; the shim's undo journal is
 * replayed to lose power (even rounds: every unsynced page rolled back; odd rounds: a random
 * subset, in random order, and a random file size); the member restarts without the shim and
 * must open, hold every acknowledged put with its value and revision, hold no more keys than
 * were sent, and report a HashKV that the next start (with the shim, before its load) still
 * reports. The driver only needs a kv_it_server: the cluster test will cut one member of
 * three the same way.
 *
 * - crash_powercut (KV_PC_UNSAFE=0): every round must pass.
 * - crash_powercut_unsafe (KV_PC_UNSAFE=1): kvd runs with --unsafe-no-fsync (MDB_NOSYNC);
 *   the same checks must DETECT a loss or corruption in a rollback-all round and in a
 *   subset round (fresh data dir each round). This proves the test can fail.
 *
 * - crash_powercut_wal / crash_powercut_unsafe_wal (KV_PC_WAL=1): the same two with the raft
 *   log in its own WAL (--experimental-wal, small segments and a small --snapshot-count, so
 *   that rotation, log compaction and segment deletion happen under the cuts): the shim
 *   tracks the WAL's files like data.mdb, so a cut drops unsynced writes of both.
 *
 * Environment: KVD_POWERCUT_ROUNDS (default 20), KVD_POWERCUT_SEED (default: from the clock;
 * printed, pass it back to replay a failure's choices; the load's timing is not replayable).
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "kvt_util.h"
#include "pcacks.h"
#include "pcjournal.h"
#include "pcmember.h"
#include "rpc.pb-c.h"
#include "rpc_client.h"

#ifndef KV_PC_WAL
#define KV_PC_WAL 0
#endif
#ifndef KV_PC_UNSAFE
#define KV_PC_UNSAFE 0
#endif

#define READY_MS 60000
#define RPC_MS 5000
#define N_WRITERS 4
#define PREFIX "pc/"

typedef struct pc_writer {
    pthread_t th;
    const char *endpoint;
    int round, idx;
    atomic_int *stop;
    uint64_t rng;
    kv_pc_ack *acks;
    size_t n, cap;
    size_t sent; /* puts sent (acknowledged or not) */
} pc_writer;

/* What one round observed. */
typedef struct pc_round {
    size_t acked;
    size_t sent;
    size_t found;       /* keys of this round present after the cut */
    int64_t max_rev;    /* highest acknowledged revision */
    int64_t rev;        /* store revision after restart */
    uint32_t hash;      /* HashKV at rev */
    kv_pc_stats pc;     /* replay statistics */
    int cut_in_startup; /* the operation cut fell before the member was ready */
    int self_cut;       /* the member died at its chosen operation (not by the timer) */
    char problem[512];  /* empty: the round passed */
} pc_round;

static void *pc_writer_main(void *arg)
{
    pc_writer *w = arg;
    char err[256] = "";
    kv_it_rpc *c = NULL;
    if (kv_it_rpc_open(&c, w->endpoint, RPC_MS, err, sizeof err) != 0)
        return NULL;
    uint8_t val[4096];
    for (size_t seq = 0; !atomic_load(w->stop); seq++) {
        if (w->n == w->cap) {
            size_t cap = w->cap ? w->cap * 2 : 256;
            kv_pc_ack *a = realloc(w->acks, cap * sizeof *a);
            if (!a)
                break;
            w->acks = a;
            w->cap = cap;
        }
        kv_pc_ack *a = &w->acks[w->n];
        snprintf(a->key, sizeof a->key, PREFIX "r%03d/t%d/%06zu", w->round, w->idx, seq);
        /* Mostly small values, some spanning LMDB overflow pages. */
        uint64_t r = kv_pc_rng(&w->rng);
        uint32_t len =
            (r % 8 == 0) ? 1500 + (uint32_t)(r >> 8) % 2500 : 8 + (uint32_t)(r >> 8) % 200;
        for (uint32_t i = 0; i < len; i++)
            val[i] = (uint8_t)('a' + kv_pc_rng(&w->rng) % 26);
        int64_t rev = 0;
        w->sent++;
        int rc = kv_it_rpc_put(c, a->key, strlen(a->key), val, len, RPC_MS, &rev, err, sizeof err);
        if (rc != 0)
            break; /* the member is gone (or refusing): stop */
        a->val = malloc(len);
        if (!a->val)
            break;
        memcpy(a->val, val, len);
        a->vlen = len;
        a->rev = rev;
        w->n++;
    }
    kv_it_rpc_close(c);
    return NULL;
}

static int pc_call(const kv_it_server *m, const char *method, const uint8_t *req, size_t len,
                   uint8_t **resp, size_t *resp_len, char *err, size_t errcap)
{
    kv_it_rpc *c = NULL;
    int rc = kv_it_rpc_open(&c, m->endpoint, RPC_MS, err, errcap);
    if (rc)
        return rc;
    rc = kv_it_rpc_call(c, method, req, len, resp, resp_len, 30000, err, errcap);
    kv_it_rpc_close(c);
    return rc;
}

static int pc_hash_kv(const kv_it_server *m, int64_t rev, uint32_t *hash, int64_t *at, char *err,
                      size_t errcap)
{
    Etcdserverpb__HashKVRequest req = ETCDSERVERPB__HASH_KVREQUEST__INIT;
    req.revision = rev;
    uint8_t buf[32];
    size_t len = etcdserverpb__hash_kvrequest__pack(&req, buf);
    uint8_t *resp = NULL;
    size_t rlen = 0;
    int rc = pc_call(m, "/etcdserverpb.Maintenance/HashKV", buf, len, &resp, &rlen, err, errcap);
    if (rc)
        return rc;
    Etcdserverpb__HashKVResponse *r = etcdserverpb__hash_kvresponse__unpack(NULL, rlen, resp);
    kv_it_rpc_free(resp);
    if (!r) {
        snprintf(err, errcap, "HashKV: undecodable response");
        return -EPROTO;
    }
    *hash = r->hash;
    *at = r->header ? r->header->revision : 0;
    etcdserverpb__hash_kvresponse__free_unpacked(r, NULL);
    return 0;
}

static int pc_range(const kv_it_server *m, const char *key, const char *end, int count_only,
                    Etcdserverpb__RangeResponse **out, char *err, size_t errcap)
{
    Etcdserverpb__RangeRequest req = ETCDSERVERPB__RANGE_REQUEST__INIT;
    req.key.data = (uint8_t *)key;
    req.key.len = strlen(key);
    req.range_end.data = (uint8_t *)end;
    req.range_end.len = strlen(end);
    req.count_only = count_only;
    size_t len = etcdserverpb__range_request__get_packed_size(&req);
    uint8_t *buf = malloc(len);
    if (!buf)
        return -ENOMEM;
    etcdserverpb__range_request__pack(&req, buf);
    uint8_t *resp = NULL;
    size_t rlen = 0;
    int rc = pc_call(m, "/etcdserverpb.KV/Range", buf, len, &resp, &rlen, err, errcap);
    free(buf);
    if (rc)
        return rc;
    *out = etcdserverpb__range_response__unpack(NULL, rlen, resp);
    kv_it_rpc_free(resp);
    if (!*out) {
        snprintf(err, errcap, "Range: undecodable response");
        return -EPROTO;
    }
    return 0;
}

static int pc_i64_cmp(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static void pc_problem(pc_round *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void pc_problem(pc_round *out, const char *fmt, ...)
{
    if (out->problem[0])
        return; /* keep the first */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out->problem, sizeof out->problem, fmt, ap);
    va_end(ap);
}

static void pc_problem_text(void *arg, const char *text)
{
    pc_problem(arg, "%s", text);
}

static void pc_log_tail(const kv_it_server *m, char *dst, size_t cap)
{
    char *log = NULL;
    dst[0] = '\0';
    if (kv_it_server_log(m, &log) == 0 && log)
        snprintf(dst, cap, "%s", kvt_str_tail(log, cap - 1));
    free(log);
}

/*
 * One cut on member m (running or not; it is stopped on return). kill_at 0: the cut is
 * SIGKILL after a random load time; kill_at N: the member kills itself as its N-th file
 * operation starts (the shim's POWERCUT_KILL_AT; timer as a fallback), which may fall in its
 * startup. prev_rev/prev_hash: the HashKV the previous round recorded (prev_rev 0: none). Fills
 * out; out->problem is empty when every check passed. Returns -1 only for a failure of the test
 * machinery itself (shim start, replay), 0 otherwise.
 */
static int pc_round_run(kv_it_server *m, int round, kv_pc_mode mode, uint64_t seed,
                        uint64_t kill_at, int64_t prev_rev, uint32_t prev_hash, size_t keys_before,
                        pc_round *out, char *fatal, size_t fatal_cap)
{
    char journal[1200], err[512] = "";
    snprintf(journal, sizeof journal, "%s/journal.%03d", m->dir, round);
    memset(out, 0, sizeof *out);
    uint64_t rng = seed;
    int rc = kv_pc_member_start(m, journal, kill_at, READY_MS);
    atomic_int stop = 0;
    pc_writer w[N_WRITERS];
    memset(w, 0, sizeof w);
    if (rc == -ECHILD && kill_at) {
        out->cut_in_startup = out->self_cut = 1; /* a cut point inside kvd's startup */
        kv_it_server_kill9(m);
        goto replay;
    }
    if (rc) {
        char tail[1024];
        pc_log_tail(m, tail, sizeof tail);
        if (prev_rev == 0 && round == 0) {
            snprintf(fatal, fatal_cap, "start with the shim: %d; log: %.700s", rc, tail);
            return -1;
        }
        pc_problem(out, "restart (with shim) failed: %d; log: %s", rc, tail);
        return 0;
    }
    if (prev_rev > 0) {
        /* The second start on the state the previous round checked: same hash. */
        uint32_t h = 0;
        int64_t at = 0;
        rc = pc_hash_kv(m, prev_rev, &h, &at, err, sizeof err);
        if (rc)
            pc_problem(out, "HashKV(%" PRId64 ") after the second restart: %s", prev_rev, err);
        else if (h != prev_hash || at != prev_rev)
            pc_problem(out,
                       "HashKV changed across a clean restart: rev %" PRId64 " hash %08x, now "
                       "rev %" PRId64 " hash %08x",
                       prev_rev, prev_hash, at, h);
    }
    for (int i = 0; i < N_WRITERS; i++) {
        w[i].endpoint = m->endpoint;
        w[i].round = round;
        w[i].idx = i;
        w[i].stop = &stop;
        w[i].rng = kv_pc_rng(&rng);
        cr_assert_eq(pthread_create(&w[i].th, NULL, pc_writer_main, &w[i]), 0);
    }
    uint32_t load_ms = 100 + (uint32_t)(kv_pc_rng(&rng) % 700);
    if (kill_at) {
        /* The member cuts itself at its chosen operation; the timer only bounds the wait. */
        uint64_t until = kv_it_now_ms() + 3000;
        while (kv_it_server_alive(m) && kv_it_now_ms() < until)
            usleep(5000);
        out->self_cut = !kv_it_server_alive(m);
    } else {
        usleep(load_ms * 1000u);
    }
    kv_it_server_kill9(m); /* the power goes; puts in flight stay unacknowledged */
    atomic_store(&stop, 1);
    for (int i = 0; i < N_WRITERS; i++)
        pthread_join(w[i].th, NULL);
    for (int i = 0; i < N_WRITERS; i++) {
        out->acked += w[i].n;
        out->sent += w[i].sent;
        for (size_t j = 0; j < w[i].n; j++)
            if (w[i].acks[j].rev > out->max_rev)
                out->max_rev = w[i].acks[j].rev;
    }

replay:
    rc = kv_pc_replay(journal, mode, kv_pc_rng(&rng), &out->pc, err, sizeof err);
    if (rc) {
        snprintf(fatal, fatal_cap, "replay %.500s: %.400s", journal, err);
        rc = -1;
        goto out;
    }
    if (out->pc.escapes) {
        snprintf(fatal, fatal_cap, "a write escaped the shim: %.250s", out->pc.escape);
        rc = -1;
        goto out;
    }
    unlink(journal);

    rc = kv_it_server_start(m, READY_MS);
    if (rc) {
        char tail[1024];
        pc_log_tail(m, tail, sizeof tail);
        pc_problem(out, "member does not start after the power loss (%d); log: %s", rc, tail);
        rc = 0;
        goto out;
    }
    char key[32], end[32];
    snprintf(key, sizeof key, PREFIX "r%03d/", round);
    snprintf(end, sizeof end, PREFIX "r%03d0", round); /* '/' + 1 */
    Etcdserverpb__RangeResponse *r = NULL;
    rc = pc_range(m, key, end, 0, &r, err, sizeof err);
    if (rc) {
        pc_problem(out, "Range after restart: %s", err);
        rc = 0;
        goto stop;
    }
    kv_pc_sort(r);
    out->found = r->n_kvs;
    out->rev = r->header ? r->header->revision : 0;
    kv_pc_ack *lists[N_WRITERS];
    size_t counts[N_WRITERS];
    for (int i = 0; i < N_WRITERS; i++) {
        lists[i] = w[i].acks;
        counts[i] = w[i].n;
    }
    size_t lost, wrong;
    kv_pc_check(r, lists, counts, N_WRITERS, &lost, &wrong, pc_problem_text, out);
    if (lost || wrong)
        cr_log_info("round %d: %zu acknowledged puts lost, %zu changed (of %zu)", round, lost,
                    wrong, out->acked);
    if (out->found > out->sent)
        pc_problem(out, "%zu keys for %zu puts sent", out->found, out->sent);
    if (out->rev < out->max_rev)
        pc_problem(out, "store revision %" PRId64 " below an acknowledged one %" PRId64, out->rev,
                   out->max_rev);
    /* Revisions: one put, one revision, all distinct, none above the store's. */
    int64_t *revs = calloc(r->n_kvs + 1, sizeof *revs);
    cr_assert(revs);
    for (size_t i = 0; i < r->n_kvs; i++) {
        revs[i] = r->kvs[i]->mod_revision;
        if (revs[i] > out->rev || revs[i] <= 0)
            pc_problem(out, "key with revision %" PRId64 " in a store at %" PRId64, revs[i],
                       out->rev);
    }
    qsort(revs, r->n_kvs, sizeof *revs, pc_i64_cmp);
    for (size_t i = 1; i < r->n_kvs; i++)
        if (revs[i] == revs[i - 1])
            pc_problem(out, "two keys at revision %" PRId64, revs[i]);
    free(revs);
    etcdserverpb__range_response__free_unpacked(r, NULL);
    /* Earlier rounds' keys are all still there, no more, no less. */
    Etcdserverpb__RangeResponse *cnt = NULL;
    rc = pc_range(m, PREFIX, "pc0", 1, &cnt, err, sizeof err);
    if (rc) {
        pc_problem(out, "count after restart: %s", err);
    } else {
        if ((size_t)cnt->count != keys_before + out->found)
            pc_problem(out, "%" PRId64 " keys in all, expected %zu earlier + %zu now", cnt->count,
                       keys_before, out->found);
        etcdserverpb__range_response__free_unpacked(cnt, NULL);
    }
    int64_t at = 0;
    rc = pc_hash_kv(m, 0, &out->hash, &at, err, sizeof err);
    if (rc)
        pc_problem(out, "HashKV after restart: %s", err);
    else if (at != out->rev)
        pc_problem(out, "HashKV at %" PRId64 ", Range at %" PRId64, at, out->rev);
    rc = 0;
stop:
    kv_it_server_stop(m, 10000);
out:
    for (int i = 0; i < N_WRITERS; i++) {
        for (size_t j = 0; j < w[i].n; j++)
            free(w[i].acks[j].val);
        free(w[i].acks);
    }
    return rc;
}

static const char *pc_mode_name(kv_pc_mode m)
{
    return m == KV_PC_ROLLBACK_ALL ? "rollback-all" : "subset";
}

#if KV_PC_WAL
#define PC_WAL_ARGS "--experimental-wal", "--wal-segment-bytes=65536", "--snapshot-count=300",
#else
#define PC_WAL_ARGS "--experimental-wal=false",
#endif

/* The member under test; the suite's fini destroys it even when an assertion failed. */
static kv_it_server *member;

static kv_it_server *pc_member_new(const char *const *extra)
{
    /* libkvclient writes with libuv (plain write/writev, no MSG_NOSIGNAL): a member dying
     * under the load would otherwise kill this process with SIGPIPE. */
    signal(SIGPIPE, SIG_IGN);
    kv_it_server *m = calloc(1, sizeof *m);
    cr_assert(m);
    member = m;
    cr_assert_eq(kv_it_server_init(m, KV_IT_KVD, extra), 0, "init kvd (%s)", m->bin);
    return m;
}

static void pc_member_free(void)
{
    if (member) {
        kv_it_server_destroy(member);
        free(member);
        member = NULL;
    }
}

TestSuite(powercut, .fini = pc_member_free);

#if !KV_PC_UNSAFE

Test(powercut, acknowledged_puts_survive_power_loss, .timeout = 590)
{
    int rounds = kv_pc_env_int("KVD_POWERCUT_ROUNDS", 20);
    uint64_t seed = kv_pc_seed();
    cr_log_info("powercut: %d rounds, KVD_POWERCUT_SEED=%" PRIu64, rounds, seed);
    fprintf(stderr, "powercut: %d rounds, KVD_POWERCUT_SEED=%" PRIu64 "\n", rounds, seed);
    const char *const base_args[] = {PC_WAL_ARGS NULL};
    kv_it_server *m = pc_member_new(base_args);
    int64_t prev_rev = 0;
    uint32_t prev_hash = 0;
    size_t keys = 0, acked = 0;
    uint64_t unsynced = 0, restored = 0, syncs = 0, durs = 0, dirops = 0, dirops_undone = 0;
    int self_cuts = 0;
    char fatal[1024] = "";
    int failed = 0;
    for (int i = 0; i < rounds && !failed; i++) {
        uint64_t s = seed + (uint64_t)i * 0x9e3779b97f4a7c15ull;
        kv_pc_mode mode = (i % 2) ? KV_PC_ROLLBACK_SUBSET : KV_PC_ROLLBACK_ALL;
        /* Rounds 2,3 of every 4 cut at a chosen file operation, the others on a timer. */
        uint64_t kill_at = (i / 2) % 2 ? 1 + kv_pc_rng(&s) % 600 : 0;
        pc_round r;
        int rc = pc_round_run(m, i, mode, s, kill_at, prev_rev, prev_hash, keys, &r, fatal,
                              sizeof fatal);
        char cut[64];
        if (kill_at)
            snprintf(cut, sizeof cut, "op %" PRIu64 "%s", kill_at,
                     r.cut_in_startup ? " in startup"
                     : r.self_cut     ? ""
                                      : " (timer)");
        else
            snprintf(cut, sizeof cut, "timer");
        cr_log_info("round %d (%s, cut: %s): %zu acked / %zu sent, %zu found, rev %" PRId64
                    ", %" PRIu64 " unsynced pages, %" PRIu64
                    " restored, dir ops %u (%u durable, %u undone, %u moot)%s%s",
                    i, pc_mode_name(mode), cut, r.acked, r.sent, r.found, r.rev,
                    r.pc.unsynced_pages, r.pc.restored_pages, r.pc.dirops, r.pc.dirops_durable,
                    r.pc.dirops_undone, r.pc.dirops_moot, r.problem[0] ? ": " : "", r.problem);
        self_cuts += kill_at && r.self_cut;
        cr_assert_eq(rc, 0, "round %d: %s (seed %" PRIu64 ")", i, fatal, seed);
        if (r.problem[0]) {
            failed = 1;
            cr_log_error("round %d (%s, KVD_POWERCUT_SEED=%" PRIu64 "): %s (dir %s)", i,
                         pc_mode_name(mode), seed, r.problem, m->dir);
            cr_assert_fail("round %d (%s): %s [KVD_POWERCUT_SEED=%" PRIu64 "]", i,
                           pc_mode_name(mode), r.problem, seed);
        }
        keys += r.found;
        acked += r.acked;
        unsynced += r.pc.unsynced_pages;
        restored += r.pc.restored_pages;
        syncs += r.pc.syncs;
        durs += r.pc.durs;
        dirops += r.pc.dirops;
        dirops_undone += r.pc.dirops_undone;
        prev_rev = r.rev;
        prev_hash = r.hash;
    }
    /* The last state survives one more clean restart. */
    cr_assert_eq(kv_it_server_start(m, READY_MS), 0);
    uint32_t h = 0;
    int64_t at = 0;
    char err[256] = "";
    cr_assert_eq(pc_hash_kv(m, prev_rev, &h, &at, err, sizeof err), 0, "%s", err);
    cr_assert_eq(h, prev_hash, "HashKV changed across the final restart");
    /* And a real etcdctl sees the same number of keys. */
    char ctl[4096];
    cr_assert_eq(kv_it_etcdctl_bin(ctl, sizeof ctl), 0, "etcdctl not found at %s", ctl);
    kv_it_cmd_result res;
    cr_assert_eq(
        kv_it_ctl(m, ctl, NULL, 60000, &res, "get", PREFIX, "--prefix", "--keys-only", NULL), 0);
    cr_assert(res.exit_code == 0 && res.out, "etcdctl get: %s", res.err ? res.err : "");
    size_t n = 0;
    for (const char *l = res.out; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        n += strncmp(l, PREFIX, strlen(PREFIX)) == 0;
    kv_it_cmd_result_free(&res);
    cr_assert_eq(n, keys, "etcdctl counts %zu keys, the rounds found %zu", n, keys);
    cr_assert(acked > 0, "no put was acknowledged in %d rounds: the load never ran", rounds);
    /* The shim saw LMDB's fdatasync and its O_DSYNC meta writes, or it saw nothing. */
    cr_assert(syncs > 0 && durs > 0, "journals hold %" PRIu64 " syncs, %" PRIu64 " durable writes",
              syncs, durs);
    cr_assert(unsynced > 0 && restored > 0,
              "no unsynced page was ever rolled back: the cuts tested nothing");
    cr_log_info("powercut: %d rounds passed (%d cut at a file operation): %zu acknowledged puts "
                "checked, %" PRIu64 " unsynced pages seen, %" PRIu64 " rolled back, %" PRIu64
                " directory operations (%" PRIu64 " undone)",
                rounds, self_cuts, acked, unsynced, restored, dirops, dirops_undone);
    pc_member_free();
}

#else

/* Puts n keys pc/base/N on m without the shim, then stops it cleanly (its writes are in the
 * page cache, which the model treats as the disk: no power was lost). Returns n. */
static size_t pc_populate(kv_it_server *m, size_t n)
{
    cr_assert_eq(kv_it_server_start(m, READY_MS), 0, "start kvd");
    kv_it_rpc *c = NULL;
    char err[256] = "", key[32];
    cr_assert_eq(kv_it_rpc_open(&c, m->endpoint, RPC_MS, err, sizeof err), 0, "%s", err);
    for (size_t i = 0; i < n; i++) {
        snprintf(key, sizeof key, PREFIX "base/%06zu", i);
        int rc =
            kv_it_rpc_put(c, key, strlen(key), key, strlen(key), RPC_MS, NULL, err, sizeof err);
        cr_assert_eq(rc, 0, "populate: %s", err);
    }
    kv_it_rpc_close(c);
    cr_assert_eq(kv_it_server_stop(m, 10000), 0);
    return n;
}

/* The negative control: without fsync the same checks must catch the loss. */
Test(powercut, unsafe_no_fsync_loses_acknowledged_puts, .timeout = 590)
{
    int rounds = kv_pc_env_int("KVD_POWERCUT_ROUNDS", 20);
    uint64_t seed = kv_pc_seed();
    cr_log_info("powercut (--unsafe-no-fsync): up to %d rounds, KVD_POWERCUT_SEED=%" PRIu64, rounds,
                seed);
    fprintf(stderr, "powercut unsafe: KVD_POWERCUT_SEED=%" PRIu64 "\n", seed);
    const char *const extra[] = {PC_WAL_ARGS "--unsafe-no-fsync", NULL};
    int detected[2] = {0, 0}, ran[2] = {0, 0};
    char fatal[1024] = "";
    for (int i = 0; i < rounds && !(detected[0] && detected[1]); i++) {
        kv_pc_mode mode = (i % 2) ? KV_PC_ROLLBACK_SUBSET : KV_PC_ROLLBACK_ALL;
        if (detected[mode])
            continue;
        kv_it_server *m = pc_member_new(extra);
        /* A file that exists and was written back before the cut: the subset model then
         * works on an existing file, not only on one that did not exist at the last sync. */
        size_t base = pc_populate(m, 300);
        pc_round r;
        uint64_t s = seed + (uint64_t)i * 0x9e3779b97f4a7c15ull;
        int rc = pc_round_run(m, i, mode, s, 0, 0, 0, base, &r, fatal, sizeof fatal);
        cr_assert_eq(rc, 0, "round %d: %s", i, fatal);
        ran[mode]++;
        cr_log_info("round %d (%s): %zu acked, %zu found, %" PRIu64 " unsynced pages, %" PRIu64
                    " restored, dir ops %u (%u undone): %s",
                    i, pc_mode_name(mode), r.acked, r.found, r.pc.unsynced_pages,
                    r.pc.restored_pages, r.pc.dirops, r.pc.dirops_undone,
                    r.problem[0] ? r.problem : "NOT detected");
        if (r.problem[0] && r.acked > 0)
            detected[mode] = 1;
        pc_member_free();
    }
    cr_assert(detected[KV_PC_ROLLBACK_ALL],
              "rollback-all: no loss detected in %d rounds with --unsafe-no-fsync (seed %" PRIu64
              ")",
              ran[0], seed);
    cr_assert(detected[KV_PC_ROLLBACK_SUBSET],
              "subset: no loss detected in %d rounds with --unsafe-no-fsync (seed %" PRIu64 ")",
              ran[1], seed);
}

#endif
