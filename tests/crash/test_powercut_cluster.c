/*
 * crash_powercut_cluster: power loss on ONE member of a 3-member kvd cluster.
 *
 * One round: member t (round % 3) is restarted under the powercut shim (libkvd_powercut.so
 * through kvt_member.env; see README.md); odd rounds make it the leader (MoveLeader), even
 * rounds keep it a follower. Four client threads put unique keys through all three members
 * (two through t), recording every acknowledged put with its revision. After a random load
 * time t gets SIGKILL; the load goes on through the other two for a while (a leader cut
 * forces an election), then stops. t's journal is replayed (rounds 0,1 mod 4: every
 * unsynced page rolled back; rounds 2,3 mod 4: a random subset, in random order, and a
 * random file size), t restarts WITHOUT the shim and must: start, catch up with the leader
 * (its revision reaches the leader's), serve through a linearizable Range every
 * acknowledged put of the round with its value and revision (no more keys than sent, the
 * count over all rounds equal to what earlier rounds found plus this one), and report the
 * same HashKV as the other two members at one revision.
 *
 * crash_powercut_cluster_wal (KV_PC_WAL=1): the same with the raft log in its own WAL
 * (--experimental-wal, small segments, --snapshot-count 300); the shim tracks the WAL's files.
 *
 * Environment: KVD_POWERCUT_CLUSTER_ROUNDS (default 6), KVD_POWERCUT_SEED (default: from
 * the clock; printed; replays the choices of member, mode, load time and page subset, not
 * the scheduling). KV_TEST_KEEP_DIRS=1 keeps the cluster's directory.
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

#include "grpc_raw.h"
#include "kvt_cluster.h"
#include "pcacks.h"
#include "pcjournal.h"
#include "pcmember.h"
#include "rpc.pb-c.h"

#define N_MEMBERS 3
#define N_WRITERS 4
#define READY_MS 60000
#define RPC_MS 5000
#define PREFIX "pcc/"

typedef struct cc_writer {
    pthread_t th;
    uint16_t port;
    int round, idx;
    atomic_int *stop;
    atomic_size_t *acked; /* acknowledged puts of every writer */
    uint64_t rng;
    kv_pc_ack *acks;
    size_t n, cap;
    size_t sent;
} cc_writer;

typedef struct cc_round {
    int target;       /* member cut */
    int want_leader;  /* the round cuts the leader */
    int was_leader;   /* t was the leader just before the cut */
    uint64_t kill_at; /* 0: timer cut; N: t SIGKILLs itself at its N-th file operation */
    int self_cut;     /* t died at its chosen operation */
    int early_cut;    /* ... before the load started (startup, leader move) */
    kv_pc_mode mode;
    size_t acked, sent, found;
    int64_t max_rev;     /* highest acknowledged revision */
    int64_t rev;         /* store revision of the Range through t */
    uint64_t prep_ms;    /* clean stop, start under the shim, leader move */
    size_t acked_after;  /* puts acknowledged by the others after the cut */
    uint64_t start_ms;   /* restart without the shim: spawn to Status */
    uint64_t catchup_ms; /* Status answered to revision == leader's */
    kv_pc_stats pc;
    char problem[768];
} cc_round;

static kvt_cluster g_c;

static void cc_fini(void)
{
    kvt_cluster_destroy(&g_c);
}

TestSuite(powercut_cluster, .fini = cc_fini);

static void cc_problem(cc_round *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void cc_problem(cc_round *out, const char *fmt, ...)
{
    if (out->problem[0])
        return; /* keep the first */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out->problem, sizeof out->problem, fmt, ap);
    va_end(ap);
}

static void cc_problem_text(void *arg, const char *text)
{
    cc_problem(arg, "%s", text);
}

/* One Put on an open connection; 0 and *rev, or an error (the connection is then closed). */
static int cc_put(kv_it_grpc **g, const char *key, const uint8_t *val, size_t vlen, int64_t *rev)
{
    Etcdserverpb__PutRequest req = ETCDSERVERPB__PUT_REQUEST__INIT;
    req.key.data = (uint8_t *)key;
    req.key.len = strlen(key);
    req.value.data = (uint8_t *)val;
    req.value.len = vlen;
    uint8_t buf[4200];
    size_t len = etcdserverpb__put_request__pack(&req, buf);
    uint8_t *resp = NULL;
    size_t rlen = 0;
    int status = -1;
    char msg[256];
    int rc = kv_it_grpc_call(*g, "/etcdserverpb.KV/Put", buf, len, &resp, &rlen, RPC_MS, &status,
                             msg, sizeof msg);
    if (rc < 0) {
        kv_it_grpc_close(*g);
        *g = NULL;
    }
    if (rc) {
        free(resp);
        return rc < 0 ? rc : -EIO;
    }
    Etcdserverpb__PutResponse *r = etcdserverpb__put_response__unpack(NULL, rlen, resp);
    free(resp);
    if (!r || !r->header) {
        if (r)
            etcdserverpb__put_response__free_unpacked(r, NULL);
        return -EPROTO;
    }
    *rev = r->header->revision;
    etcdserverpb__put_response__free_unpacked(r, NULL);
    return 0;
}

/* Puts unique keys through one member until stopped; every acknowledged put is recorded. A
 * failed put (member down, no leader) is retried with the next key after a pause. */
static void *cc_writer_main(void *arg)
{
    cc_writer *w = arg;
    kv_it_grpc *g = NULL;
    uint8_t val[4096];
    for (size_t seq = 0; !atomic_load(w->stop); seq++) {
        if (!g && kv_it_grpc_open(&g, "127.0.0.1", w->port, 1000) != 0) {
            g = NULL;
            usleep(20000);
            continue;
        }
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
        /* Mostly small values, every eighth spanning LMDB overflow pages. */
        uint64_t r = kv_pc_rng(&w->rng);
        uint32_t len =
            (r % 8 == 0) ? 1500 + (uint32_t)(r >> 8) % 2500 : 8 + (uint32_t)(r >> 8) % 200;
        for (uint32_t i = 0; i < len; i++)
            val[i] = (uint8_t)('a' + kv_pc_rng(&w->rng) % 26);
        int64_t rev = 0;
        w->sent++;
        if (cc_put(&g, a->key, val, len, &rev) != 0) {
            usleep(20000);
            continue;
        }
        a->val = malloc(len);
        if (!a->val)
            break;
        memcpy(a->val, val, len);
        a->vlen = len;
        a->rev = rev;
        w->n++;
        atomic_fetch_add(w->acked, 1);
    }
    kv_it_grpc_close(g);
    return NULL;
}

/* Linearizable Range [key, end) through member i (count_only: the count alone). */
static int cc_range(int i, const char *key, const char *end, int count_only,
                    Etcdserverpb__RangeResponse **out, char *err, size_t errcap)
{
    Etcdserverpb__RangeRequest req = ETCDSERVERPB__RANGE_REQUEST__INIT;
    req.key.data = (uint8_t *)key;
    req.key.len = strlen(key);
    req.range_end.data = (uint8_t *)end;
    req.range_end.len = strlen(end);
    req.count_only = count_only;
    uint8_t buf[256];
    size_t len = etcdserverpb__range_request__pack(&req, buf);
    kv_it_grpc *g = NULL;
    int rc = kv_it_grpc_open(&g, "127.0.0.1", g_c.m[i].client_port, RPC_MS);
    if (rc) {
        snprintf(err, errcap, "connect: %s", strerror(-rc));
        return rc;
    }
    uint8_t *resp = NULL;
    size_t rlen = 0;
    int status = -1;
    rc = kv_it_grpc_call(g, "/etcdserverpb.KV/Range", buf, len, &resp, &rlen, 30000, &status, err,
                         errcap);
    kv_it_grpc_close(g);
    if (rc) {
        free(resp);
        return rc < 0 ? rc : -EIO;
    }
    *out = etcdserverpb__range_response__unpack(NULL, rlen, resp);
    free(resp);
    if (!*out) {
        snprintf(err, errcap, "Range: undecodable response");
        return -EPROTO;
    }
    return 0;
}

static void cc_log_tail(int i, char *dst, size_t cap)
{
    char *log = NULL;
    dst[0] = '\0';
    if (kvt_member_log(&g_c, i, cap - 1, &log) == 0 && log)
        snprintf(dst, cap, "%s", log);
    free(log);
}

/* Makes member t the leader (want_leader) or not; bounded. 0 or a negative errno (-ECHILD:
 * t died meanwhile). */
static int cc_set_role(int t, int want_leader)
{
    uint64_t deadline = kvt_now_ms() + 30000;
    char err[256];
    for (;;) {
        if (!kvt_member_running(&g_c, t))
            return -ECHILD;
        int l = kvt_cluster_wait_leader(&g_c, 10000, NULL);
        if (l >= 0 && (l == t) == !!want_leader)
            return 0;
        if (kvt_now_ms() >= deadline)
            return -ETIMEDOUT;
        if (l >= 0)
            kvt_cluster_move_leader(&g_c, want_leader ? t : (t + 1) % N_MEMBERS, 5000, err,
                                    sizeof err);
        kvt_sleep_ms(200);
    }
}

/* Revision of the leader (polled until a leader answers). */
static int cc_leader_rev(int64_t *rev)
{
    int l = kvt_cluster_wait_leader(&g_c, 20000, NULL);
    if (l < 0)
        return l;
    kvt_status st;
    int rc = kvt_member_status(&g_c, l, &st, 5000);
    if (rc)
        return rc < 0 ? rc : -EIO;
    *rev = st.revision;
    return 0;
}

/* One round on member t. Returns -1 for a failure of the test machinery (fatal), else 0 with
 * out->problem empty when every check passed. */
static int cc_round_run(int round, int t, int want_leader, kv_pc_mode mode, uint64_t kill_at,
                        uint64_t seed, size_t keys_before, cc_round *out, char *fatal,
                        size_t fatal_cap)
{
    kvt_member *m = &g_c.m[t];
    char journal[PATH_MAX + 32], err[512] = "";
    snprintf(journal, sizeof journal, "%s/journal.%03d", m->dir, round);
    memset(out, 0, sizeof *out);
    out->target = t;
    out->want_leader = want_leader;
    out->mode = mode;
    out->kill_at = kill_at;
    uint64_t rng = seed;
    cc_writer w[N_WRITERS];
    memset(w, 0, sizeof w);
    atomic_int stop = 0;
    atomic_size_t acked = 0;
    int rc = 0, nthreads = 0;
    uint64_t t_prep = kvt_now_ms();

    /* 1. t restarts under the shim (a clean stop first: its state so far is on disk). */
    char e_pre[PATH_MAX + 16], e_dir[PATH_MAX + 16], e_jnl[PATH_MAX + 64], e_asan[1100];
    const char *asan = getenv("ASAN_OPTIONS");
    /* A sanitized kvd refuses a preloaded library ahead of its runtime unless told not to. */
    snprintf(e_asan, sizeof e_asan, "ASAN_OPTIONS=%s%sverify_asan_link_order=0", asan ? asan : "",
             asan && *asan ? ":" : "");
    snprintf(e_pre, sizeof e_pre, "LD_PRELOAD=%s", kv_pc_shim_path());
    snprintf(e_dir, sizeof e_dir, "POWERCUT_DIR=%s", m->data_dir);
    snprintf(e_jnl, sizeof e_jnl, "POWERCUT_JOURNAL=%s", journal);
    char e_kill[64];
    snprintf(e_kill, sizeof e_kill, "POWERCUT_KILL_AT=%" PRIu64, kill_at);
    const char *env[] = {e_pre, e_dir, e_jnl, e_kill, e_asan, NULL};
    if ((rc = kvt_member_stop(&g_c, t, 10000)) != 0) {
        snprintf(fatal, fatal_cap, "stop %s: %d", m->name, rc);
        return -1;
    }
    m->env = env;
    rc = kvt_member_start(&g_c, t);
    m->env = NULL;
    if (rc == 0)
        rc = kvt_member_wait_ready(&g_c, t, READY_MS);
    if (rc == -ECHILD && kill_at) {
        out->early_cut = 1; /* the cut fell inside t's startup */
    } else if (rc) {
        char tail[1024];
        cc_log_tail(t, tail, sizeof tail);
        cc_problem(out, "%s does not start under the shim: %d; log: %s", m->name, rc, tail);
        return 0;
    } else if ((rc = cc_set_role(t, want_leader)) == -ECHILD && kill_at) {
        out->early_cut = 1; /* ... or while it was made leader or follower */
    } else if (rc) {
        snprintf(fatal, fatal_cap, "could not make %s %s: %d", m->name,
                 want_leader ? "the leader" : "a follower", rc);
        return -1;
    }

    out->prep_ms = kvt_now_ms() - t_prep;

    /* 2. The load through every member (writers 0 and 3 through t); the cut. */
    for (int i = 0; i < N_WRITERS; i++) {
        w[i].port = g_c.m[(t + i) % N_MEMBERS].client_port;
        w[i].round = round;
        w[i].idx = i;
        w[i].stop = &stop;
        w[i].acked = &acked;
        w[i].rng = kv_pc_rng(&rng);
        cr_assert_eq(pthread_create(&w[i].th, NULL, cc_writer_main, &w[i]), 0);
        nthreads++;
    }
    uint32_t load_ms = 200 + (uint32_t)(kv_pc_rng(&rng) % 800);
    uint32_t after_ms = 500 + (uint32_t)(kv_pc_rng(&rng) % 700);
    kvt_status st;
    if (kill_at) {
        /* t cuts itself at its chosen operation; the timer only bounds the wait. */
        out->was_leader =
            !out->early_cut && kvt_member_status(&g_c, t, &st, 1000) == 0 && st.leader == st.id;
        uint64_t until = kvt_now_ms() + 3000;
        while (kvt_member_running(&g_c, t) && kvt_now_ms() < until)
            kvt_sleep_ms(5);
        out->self_cut = !kvt_member_running(&g_c, t);
    } else {
        kvt_sleep_ms(load_ms);
        out->was_leader = kvt_member_status(&g_c, t, &st, 1000) == 0 && st.leader == st.id;
    }
    kvt_member_kill9(&g_c, t); /* the power goes; puts in flight stay unacknowledged */
    /* The others go on (after an election if t led): for after_ms and until at least 50
     * more puts were acknowledged (10 s bound), so that t has something to catch up on. */
    size_t at_cut = atomic_load(&acked);
    uint64_t t_cut = kvt_now_ms();
    while (kvt_now_ms() - t_cut < after_ms ||
           (atomic_load(&acked) < at_cut + 50 && kvt_now_ms() - t_cut < 10000))
        kvt_sleep_ms(10);
    atomic_store(&stop, 1);
    for (int i = 0; i < nthreads; i++)
        pthread_join(w[i].th, NULL);
    out->acked_after = atomic_load(&acked) - at_cut;
    for (int i = 0; i < N_WRITERS; i++) {
        out->acked += w[i].n;
        out->sent += w[i].sent;
        for (size_t j = 0; j < w[i].n; j++)
            if (w[i].acks[j].rev > out->max_rev)
                out->max_rev = w[i].acks[j].rev;
    }

    /* 3. The power loss on t's data dir. */
    rc = kv_pc_replay(journal, mode, kv_pc_rng(&rng), &out->pc, err, sizeof err);
    if (rc || out->pc.escapes) {
        snprintf(fatal, fatal_cap, "replay %.400s: %.400s", journal, rc ? err : out->pc.escape);
        rc = -1;
        goto out;
    }
    unlink(journal);

    /* 4. t restarts without the shim and catches up. */
    uint64_t t0 = kvt_now_ms();
    rc = kvt_member_start(&g_c, t);
    if (rc == 0)
        rc = kvt_member_wait_ready(&g_c, t, READY_MS);
    if (rc) {
        char tail[1024];
        cc_log_tail(t, tail, sizeof tail);
        cc_problem(out, "%s does not start after the power loss (%d); log: %s", m->name, rc, tail);
        rc = 0;
        goto out;
    }
    uint64_t t1 = kvt_now_ms();
    out->start_ms = t1 - t0;
    int64_t lrev = 0;
    if ((rc = cc_leader_rev(&lrev)) != 0) {
        cc_problem(out, "no leader after %s restarted: %d", m->name, rc);
        rc = 0;
        goto out;
    }
    for (;;) {
        if (kvt_member_status(&g_c, t, &st, 2000) == 0 && st.revision >= lrev &&
            st.revision >= out->max_rev)
            break;
        if (kvt_now_ms() - t1 > 30000) {
            cc_problem(out, "%s did not catch up in 30 s: revision %" PRId64 ", leader %" PRId64,
                       m->name, st.revision, lrev);
            rc = 0;
            goto out;
        }
        kvt_sleep_ms(10);
    }
    out->catchup_ms = kvt_now_ms() - t1;

    /* 5. Every acknowledged put, read linearizably through t. */
    char key[32], end[32];
    snprintf(key, sizeof key, PREFIX "r%03d/", round);
    snprintf(end, sizeof end, PREFIX "r%03d0", round); /* '/' + 1 */
    Etcdserverpb__RangeResponse *r = NULL;
    rc = cc_range(t, key, end, 0, &r, err, sizeof err);
    if (rc) {
        cc_problem(out, "Range through %s after restart: %s", m->name, err);
        rc = 0;
        goto out;
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
    kv_pc_check(r, lists, counts, N_WRITERS, &lost, &wrong, cc_problem_text, out);
    if (lost || wrong)
        cr_log_error("round %d: %zu acknowledged puts lost, %zu changed (of %zu)", round, lost,
                     wrong, out->acked);
    if (out->found > out->sent)
        cc_problem(out, "%zu keys for %zu puts sent", out->found, out->sent);
    if (out->rev < out->max_rev)
        cc_problem(out, "revision %" PRId64 " through %s below an acknowledged one %" PRId64,
                   out->rev, m->name, out->max_rev);
    etcdserverpb__range_response__free_unpacked(r, NULL);
    Etcdserverpb__RangeResponse *cnt = NULL;
    rc = cc_range(t, PREFIX, "pcc0", 1, &cnt, err, sizeof err);
    if (rc) {
        cc_problem(out, "count through %s: %s", m->name, err);
    } else {
        if ((size_t)cnt->count != keys_before + out->found)
            cc_problem(out, "%" PRId64 " keys in all, expected %zu earlier + %zu now", cnt->count,
                       keys_before, out->found);
        etcdserverpb__range_response__free_unpacked(cnt, NULL);
    }

    /* 6. HashKV of all three at one revision. */
    uint32_t h[KVT_MAX_MEMBERS];
    int64_t hrev = 0;
    rc = kvt_cluster_hash(&g_c, t, h, &hrev, 30000);
    if (rc)
        cc_problem(out, "HashKV of the cluster (via %s): %d", m->name, rc);
    else if (h[0] != h[1] || h[1] != h[2])
        cc_problem(out, "HashKV at %" PRId64 " differs: m0 %08x m1 %08x m2 %08x (cut: %s)", hrev,
                   h[0], h[1], h[2], m->name);
    rc = 0;
out:
    for (int i = 0; i < N_WRITERS; i++) {
        for (size_t j = 0; j < w[i].n; j++)
            free(w[i].acks[j].val);
        free(w[i].acks);
    }
    return rc;
}

Test(powercut_cluster, one_member_loses_power, .timeout = 590)
{
    int rounds = kv_pc_env_int("KVD_POWERCUT_CLUSTER_ROUNDS", 6);
    uint64_t seed = kv_pc_seed();
    fprintf(stderr, "powercut_cluster: %d rounds, KVD_POWERCUT_SEED=%" PRIu64 "\n", rounds, seed);
    /* A member dying under the load must not kill this process through a write. */
    signal(SIGPIPE, SIG_IGN);
    kvt_cluster_opts o;
    kvt_cluster_opts_default(&o, N_MEMBERS);
    cr_assert_eq(o.target, KV_TEST_SERVER_KVD, "the shim test runs against kvd only");
    o.heartbeat_ms = 50;
    o.election_ms = 500;
    o.seed = seed;
#if KV_PC_WAL
    static const char *const wal_args[] = {"--experimental-wal", "--wal-segment-bytes=65536",
                                           "--snapshot-count=300", NULL};
    o.kvd_args = wal_args;
#else
    static const char *const lmdb_args[] = {"--experimental-wal=false", NULL};
    o.kvd_args = lmdb_args;
#endif
    cr_assert_eq(kvt_cluster_init(&g_c, &o), 0, "cluster init");
    int rc = kvt_cluster_start(&g_c, 60000);
    if (rc)
        kvt_cluster_dump(&g_c);
    cr_assert_eq(rc, 0, "cluster start: %d", rc);
    uint64_t t_start = kvt_now_ms();
    size_t keys = 0, acked = 0;
    uint64_t unsynced = 0, restored = 0, syncs = 0, durs = 0, dirops = 0, dirops_undone = 0;
    int leader_cuts = 0;
    char fatal[1024] = "";
    for (int i = 0; i < rounds; i++) {
        uint64_t s = seed + (uint64_t)i * 0x9e3779b97f4a7c15ull;
        int t = i % N_MEMBERS, want_leader = i % 2;
        kv_pc_mode mode = (i / 2) % 2 ? KV_PC_ROLLBACK_SUBSET : KV_PC_ROLLBACK_ALL;
        /* Rounds 3,4,5 (mod 6) cut at a chosen file operation (e.g. between a data page's
         * write and its fdatasync), the others on a timer. */
        uint64_t kill_at = (i / 3) % 2 ? 1 + kv_pc_rng(&s) % 1500 : 0;
        cc_round r;
        uint64_t r0 = kvt_now_ms();
        rc = cc_round_run(i, t, want_leader, mode, kill_at, s, keys, &r, fatal, sizeof fatal);
        char cut[64];
        if (kill_at)
            snprintf(cut, sizeof cut, "op %" PRIu64 "%s", kill_at,
                     r.early_cut  ? " before the load"
                     : r.self_cut ? ""
                                  : " (timer)");
        else
            snprintf(cut, sizeof cut, "timer");
        char line[1400];
        snprintf(line, sizeof line,
                 "round %d (%s %s, %s, cut: %s): %zu acked / %zu sent, %zu found, rev %" PRId64
                 ", %zu acked after the cut, %" PRIu64 " unsynced pages, %" PRIu64
                 " rolled back, dir ops %u (%u durable, %u undone, %u moot); prepare %" PRIu64
                 " ms, restart %" PRIu64 " ms, catch-up %" PRIu64 " ms; round %" PRIu64 " ms%s%s",
                 i, g_c.m[t].name, r.was_leader ? "leader" : "follower",
                 mode == KV_PC_ROLLBACK_ALL ? "rollback-all" : "subset", cut, r.acked, r.sent,
                 r.found, r.rev, r.acked_after, r.pc.unsynced_pages, r.pc.restored_pages,
                 r.pc.dirops, r.pc.dirops_durable, r.pc.dirops_undone, r.pc.dirops_moot, r.prep_ms,
                 r.start_ms, r.catchup_ms, kvt_now_ms() - r0, r.problem[0] ? ": " : "", r.problem);
        fprintf(stderr, "%s\n", line);
        cr_log_info("%s", line);
        cr_assert_eq(rc, 0, "round %d: %s [KVD_POWERCUT_SEED=%" PRIu64 "]", i, fatal, seed);
        if (r.problem[0]) {
            kvt_cluster_dump(&g_c);
            cr_assert_fail("round %d (%s, %s): %s [KVD_POWERCUT_SEED=%" PRIu64 ", dir %s]", i,
                           g_c.m[t].name, mode == KV_PC_ROLLBACK_ALL ? "rollback-all" : "subset",
                           r.problem, seed, g_c.root.path);
        }
        keys += r.found;
        acked += r.acked;
        unsynced += r.pc.unsynced_pages;
        restored += r.pc.restored_pages;
        syncs += r.pc.syncs;
        durs += r.pc.durs;
        dirops += r.pc.dirops;
        dirops_undone += r.pc.dirops_undone;
        leader_cuts += r.was_leader;
    }
    cr_assert(acked > 0, "no put was acknowledged in %d rounds: the load never ran", rounds);
    /* The shim saw the durability points, and the cuts took something away. */
    cr_assert(syncs > 0, "journals hold no sync: the shim saw nothing");
    cr_assert(rounds < 2 || (unsynced > 0 && restored > 0),
              "no unsynced page was ever rolled back: the cuts tested nothing");
    cr_assert(rounds < 2 || leader_cuts > 0, "no round cut the leader");
    fprintf(stderr,
            "powercut_cluster: %d rounds passed in %" PRIu64 " ms (%d cut the leader): %zu "
            "acknowledged puts checked, %" PRIu64 " unsynced pages seen, %" PRIu64
            " rolled back, %" PRIu64 " syncs, %" PRIu64 " durable writes, %" PRIu64
            " directory operations (%" PRIu64 " undone)\n",
            rounds, kvt_now_ms() - t_start, leader_cuts, acked, unsynced, restored, syncs, durs,
            dirops, dirops_undone);
}
