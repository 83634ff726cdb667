/* raftlog's index of configuration entries ("rconf", the vtable's next_conf): it follows
 * append, truncation by overwrite, compaction and install, and is rebuilt once when a data
 * dir lacks it. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "raftlog/raftlog.h"
#include "rl_env.h"

typedef struct fx {
    rl_log g;
    uint8_t bufs[128][16];
} fx;

static void fx_init(fx *f)
{
    memset(f, 0, sizeof *f);
    rl_log_init(&f->g);
}

static bool is_conf(raft_index i, const raft_index *conf, size_t n_conf)
{
    for (size_t k = 0; k < n_conf; k++)
        if (conf[k] == i)
            return true;
    return false;
}

/* Entries lo..hi-1 of term t; those listed in conf are configuration changes. */
static void mk(fx *f, struct raft_entry *out, raft_index lo, raft_index hi, raft_term t,
               const raft_index *conf, size_t n_conf)
{
    for (raft_index i = lo; i < hi; i++) {
        uint8_t *b = f->bufs[i % 128];
        struct raft_entry *e = &out[i - lo];
        *e = (struct raft_entry){.term = t, .index = i, .type = RAFT_ENTRY_NORMAL, .data = b};
        if (is_conf(i, conf, n_conf)) {
            e->type = RAFT_ENTRY_CONF;
            b[0] = RAFT_CONF_ADD_LEARNER;
            for (int k = 1; k <= 8; k++)
                b[k] = (uint8_t)(i >> (8 * (k - 1)));
            e->len = 9;
        } else {
            e->len = (size_t)snprintf((char *)b, 16, "e%llu", (unsigned long long)i);
        }
    }
}

static void append(fx *f, raft_index lo, raft_index hi, raft_term t, const raft_index *conf,
                   size_t n_conf)
{
    struct raft_entry e[128];
    MDB_txn *txn;
    cr_assert(hi - lo <= 128);
    mk(f, e, lo, hi, t, conf, n_conf);
    cr_assert_eq(mdb_txn_begin(f->g.e.env, NULL, 0, &txn), 0);
    cr_assert_eq(kv_raftlog_append(f->g.l, txn, e, hi - lo), 0);
    cr_assert_eq(mdb_txn_commit(txn), 0);
    kv_raftlog_rotate(f->g.l);
}

static raft_index next_conf(fx *f, raft_index lo, raft_index hi)
{
    raft_index idx = 12345;
    cr_assert_not_null(f->g.st->next_conf);
    cr_assert_eq(f->g.st->next_conf(f->g.st->ctx, lo, hi, &idx), 0);
    kv_raftlog_end_cycle(f->g.l);
    return idx;
}

/* Every record of "rconf" in order, into keys (returns their count). */
static size_t rconf_keys(fx *f, raft_index *keys, size_t cap)
{
    MDB_txn *txn;
    MDB_dbi dbi;
    MDB_cursor *c;
    MDB_val k, v;
    size_t n = 0;
    cr_assert_eq(mdb_txn_begin(f->g.e.env, NULL, MDB_RDONLY, &txn), 0);
    cr_assert_eq(mdb_dbi_open(txn, "rconf", 0, &dbi), 0);
    cr_assert_eq(mdb_cursor_open(txn, dbi, &c), 0);
    for (MDB_cursor_op op = MDB_FIRST; mdb_cursor_get(c, &k, &v, op) == 0; op = MDB_NEXT) {
        cr_assert_eq(k.mv_size, 8);
        cr_assert_eq(v.mv_size, 0);
        cr_assert_lt(n, cap);
        const uint8_t *p = k.mv_data;
        raft_index i = 0;
        for (int b = 0; b < 8; b++)
            i = (i << 8) | p[b];
        keys[n++] = i;
    }
    mdb_cursor_close(c);
    mdb_txn_abort(txn);
    return n;
}

static void expect_keys(fx *f, const raft_index *want, size_t n)
{
    raft_index got[64];
    size_t m = rconf_keys(f, got, 64);
    cr_assert_eq(m, n, "rconf holds %zu records, expected %zu", m, n);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(got[i], want[i], "rconf[%zu] = %llu, expected %llu", i,
                     (unsigned long long)got[i], (unsigned long long)want[i]);
}

static void set_snap(fx *f, raft_index idx, raft_term t)
{
    struct raft_snapshot_meta m = {.index = idx, .term = t};
    m.conf.n_voters = 1;
    m.conf.voters[0] = 1;
    MDB_txn *txn;
    cr_assert_eq(mdb_txn_begin(f->g.e.env, NULL, 0, &txn), 0);
    cr_assert_eq(kv_raftlog_set_snapshot(f->g.l, txn, &m), 0);
    cr_assert_eq(mdb_txn_commit(txn), 0);
    kv_raftlog_rotate(f->g.l);
}

Test(raftlog_conf, follows_append_overwrite_and_compaction)
{
    fx f;
    fx_init(&f);
    static const raft_index c1[] = {5, 12, 20, 27};
    append(&f, 1, 31, 1, c1, 4);
    expect_keys(&f, c1, 4);
    cr_assert_eq(next_conf(&f, 1, 30), 5);
    cr_assert_eq(next_conf(&f, 5, 30), 5);
    cr_assert_eq(next_conf(&f, 6, 30), 12);
    cr_assert_eq(next_conf(&f, 13, 19), 0, "none in [13, 19]");
    cr_assert_eq(next_conf(&f, 13, 20), 20);
    cr_assert_eq(next_conf(&f, 28, 30), 0);
    /* a later leader overwrites from 15: 20 and 27 are gone, 16 and 33 come */
    static const raft_index c2[] = {16, 33};
    append(&f, 15, 36, 2, c2, 2);
    static const raft_index k2[] = {5, 12, 16, 33};
    expect_keys(&f, k2, 4);
    cr_assert_eq(next_conf(&f, 13, 35), 16);
    cr_assert_eq(next_conf(&f, 17, 32), 0);
    /* an overwrite of the tail without conf entries */
    append(&f, 30, 34, 3, NULL, 0);
    static const raft_index k3[] = {5, 12, 16};
    expect_keys(&f, k3, 3);
    cr_assert_eq(next_conf(&f, 17, 33), 0);
    /* compaction keeps the entries after the snapshot (the term matches) */
    set_snap(&f, 12, 1);
    static const raft_index k4[] = {16};
    expect_keys(&f, k4, 1);
    cr_assert_eq(next_conf(&f, 13, 33), 16);
    MDB_txn *txn;
    cr_assert_eq(mdb_txn_begin(f.g.e.env, NULL, 0, &txn), 0);
    cr_assert_eq(kv_raftlog_truncate_prefix(f.g.l, txn, 13), 0);
    cr_assert_eq(mdb_txn_commit(txn), 0);
    expect_keys(&f, k4, 1);
    /* the index survives a reopen (nothing rebuilt: same records) */
    rl_log_reopen(&f.g);
    expect_keys(&f, k4, 1);
    cr_assert_eq(next_conf(&f, 13, 33), 16);
    /* a snapshot that does not match the log drops it all */
    set_snap(&f, 40, 5);
    expect_keys(&f, NULL, 0);
    static const raft_index c5[] = {41};
    append(&f, 41, 43, 5, c5, 1);
    expect_keys(&f, c5, 1);
    cr_assert_eq(next_conf(&f, 41, 42), 41);
    rl_log_fini(&f.g);
}

Test(raftlog_conf, install_resets_the_index)
{
    fx f;
    fx_init(&f);
    static const raft_index c1[] = {3, 8};
    append(&f, 1, 11, 1, c1, 2);
    kv_raftlog_close(f.g.l);
    f.g.l = NULL;
    /* a received snapshot at 20 with the leader's entries 21..24 (22 a conf change) */
    struct raft_snapshot_meta m = {.index = 20, .term = 2};
    m.conf.n_voters = 1;
    m.conf.voters[0] = 1;
    struct raft_hard_state hs = {.term = 2, .vote = 0, .commit = 20};
    struct raft_entry e[4];
    static const raft_index c2[] = {22};
    mk(&f, e, 21, 25, 2, c2, 1);
    MDB_txn *txn;
    cr_assert_eq(mdb_txn_begin(f.g.e.env, NULL, 0, &txn), 0);
    cr_assert_eq(kv_raftlog_install_into(txn, &m, &hs, e, 4), 0);
    cr_assert_eq(mdb_txn_commit(txn), 0);
    rl_env_reopen(&f.g.e);
    rl_log_open(&f.g);
    expect_keys(&f, c2, 1);
    cr_assert_eq(next_conf(&f, 21, 24), 22);
    cr_assert_eq(next_conf(&f, 23, 24), 0);
    rl_log_fini(&f.g);
}

/* Drops the marker (and the index, or leaves a stale record) as a data dir written before
 * the index (or a restored one, whose "rmeta" was dropped) would be. */
static void strip_index(fx *f, bool stale)
{
    MDB_txn *txn;
    MDB_dbi meta, conf;
    MDB_val k = {8, (void *)"rconf_v1"};
    kv_raftlog_close(f->g.l);
    f->g.l = NULL;
    cr_assert_eq(mdb_txn_begin(f->g.e.env, NULL, 0, &txn), 0);
    cr_assert_eq(mdb_dbi_open(txn, "rmeta", 0, &meta), 0);
    cr_assert_eq(mdb_del(txn, meta, &k, NULL), 0);
    cr_assert_eq(mdb_dbi_open(txn, "rconf", 0, &conf), 0);
    if (stale) {
        uint8_t kb[8] = {0, 0, 0, 0, 0, 0, 0, 7};
        MDB_val sk = {8, kb}, sv = {0, NULL};
        cr_assert_eq(mdb_put(txn, conf, &sk, &sv, 0), 0);
    } else {
        cr_assert_eq(mdb_drop(txn, conf, 1), 0);
    }
    cr_assert_eq(mdb_txn_commit(txn), 0);
    rl_env_reopen(&f->g.e);
}

Test(raftlog_conf, rebuilt_once_when_absent)
{
    fx f;
    fx_init(&f);
    static const raft_index c1[] = {2, 9, 17, 40};
    append(&f, 1, 51, 1, c1, 4);
    set_snap(&f, 5, 1);
    static const raft_index k1[] = {9, 17, 40};
    expect_keys(&f, k1, 3);
    strip_index(&f, false);
    rl_log_open(&f.g);
    expect_keys(&f, k1, 3);
    cr_assert_eq(next_conf(&f, 6, 50), 9);
    cr_assert_eq(next_conf(&f, 10, 50), 17);
    cr_assert_eq(next_conf(&f, 18, 39), 0);
    cr_assert_eq(next_conf(&f, 18, 50), 40);
    /* stale records of a dropped log go with the rebuild */
    strip_index(&f, true);
    rl_log_open(&f.g);
    expect_keys(&f, k1, 3);
    cr_assert_eq(next_conf(&f, 6, 8), 0);
    /* the marker is back: later appends keep it up to date */
    static const raft_index c2[] = {52};
    append(&f, 51, 53, 1, c2, 1);
    static const raft_index k2[] = {9, 17, 40, 52};
    expect_keys(&f, k2, 4);
    rl_log_reopen(&f.g);
    expect_keys(&f, k2, 4);
    rl_log_fini(&f.g);
}

Test(raftlog_conf, raft_init_over_the_log)
{
    fx f;
    fx_init(&f);
    /* bootstrap {1}; learner 2 at 4, learner 8 at 9 (voter 1 unchanged) */
    static const raft_index c1[] = {4, 8};
    append(&f, 1, 21, 1, c1, 2);
    struct raft_hard_state hs = {.term = 1, .vote = 1, .commit = 20};
    MDB_txn *txn;
    cr_assert_eq(mdb_txn_begin(f.g.e.env, NULL, 0, &txn), 0);
    cr_assert_eq(kv_raftlog_set_hard_state(f.g.l, txn, &hs), 0);
    cr_assert_eq(mdb_txn_commit(txn), 0);
    kv_raftlog_rotate(f.g.l);
    static const raft_id voters[] = {1};
    struct raft_config cfg;
    struct raft r;
    raft_config_default(&cfg);
    cfg.id = 1;
    cfg.voters = voters;
    cfg.n_voters = 1;
    cfg.storage = f.g.st;
    cr_assert_eq(raft_init(&r, &cfg), 0);
    kv_raftlog_end_cycle(f.g.l);
    const struct raft_conf *c = raft_configuration(&r);
    cr_assert_eq(c->n_voters, 1);
    cr_assert_eq(c->n_learners, 2);
    cr_assert_eq(c->learners[0], 4);
    cr_assert_eq(c->learners[1], 8);
    raft_close(&r);
    cr_assert_eq(kv_raftlog_error(f.g.l), 0);
    rl_log_fini(&f.g);
}
