/* raftlog storage contract: the raft_storage vtable and the write functions over LMDB. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "raftlog/raftlog.h"
#include "rl_env.h"

typedef struct fx {
    rl_log g;
    char bufs[64][16];
} fx;

static void fx_init(fx *f)
{
    memset(f, 0, sizeof *f);
    rl_log_init(&f->g);
}

/* Entries lo..hi-1 with term t and data "e<index>t<term>". */
static void mk(fx *f, struct raft_entry *out, raft_index lo, raft_index hi, raft_term t)
{
    for (raft_index i = lo; i < hi; i++) {
        char *b = f->bufs[i % 64];
        snprintf(b, sizeof f->bufs[0], "e%llut%llu", (unsigned long long)i, (unsigned long long)t);
        out[i - lo] = (struct raft_entry){
            .term = t, .index = i, .type = RAFT_ENTRY_NORMAL, .data = b, .len = strlen(b)};
    }
}

/* Runs one write txn: append lo..hi-1 at term t. Returns the append's status. */
static int append(fx *f, raft_index lo, raft_index hi, raft_term t)
{
    struct raft_entry e[64];
    MDB_txn *txn;
    cr_assert(hi - lo <= 64);
    mk(f, e, lo, hi, t);
    cr_assert_eq(mdb_txn_begin(f->g.e.env, NULL, 0, &txn), 0);
    int rc = kv_raftlog_append(f->g.l, txn, e, hi - lo);
    if (rc == 0)
        cr_assert_eq(mdb_txn_commit(txn), 0);
    else
        mdb_txn_abort(txn);
    kv_raftlog_rotate(f->g.l);
    return rc;
}

static int set_snap(fx *f, raft_index idx, raft_term t)
{
    struct raft_snapshot_meta m = {.index = idx, .term = t};
    m.conf.n_voters = 3;
    m.conf.voters[0] = 1, m.conf.voters[1] = 2, m.conf.voters[2] = 3;
    m.conf.n_learners = 1;
    m.conf.learners[0] = 9;
    MDB_txn *txn;
    cr_assert_eq(mdb_txn_begin(f->g.e.env, NULL, 0, &txn), 0);
    int rc = kv_raftlog_set_snapshot(f->g.l, txn, &m);
    if (rc == 0)
        cr_assert_eq(mdb_txn_commit(txn), 0);
    else
        mdb_txn_abort(txn);
    kv_raftlog_rotate(f->g.l);
    return rc;
}

static raft_term term_of(fx *f, raft_index i)
{
    raft_term t = 12345;
    int rc = f->g.st->term(f->g.st->ctx, i, &t);
    cr_assert_eq(rc, 0, "term(%llu) -> %d", (unsigned long long)i, rc);
    return t;
}

static int term_rc(fx *f, raft_index i)
{
    raft_term t;
    return f->g.st->term(f->g.st->ctx, i, &t);
}

static void check_entry(const struct raft_entry *e, raft_index i, raft_term t)
{
    char want[48];
    snprintf(want, sizeof want, "e%llut%llu", (unsigned long long)i, (unsigned long long)t);
    cr_assert_eq(e->index, i);
    cr_assert_eq(e->term, t);
    cr_assert_eq(e->type, RAFT_ENTRY_NORMAL);
    cr_assert_eq(e->len, strlen(want));
    cr_assert_arr_eq(e->data, want, e->len);
}

Test(raftlog, fresh_log_is_empty)
{
    fx f;
    fx_init(&f);
    struct raft_hard_state hs = {1, 1, 1};
    struct raft_snapshot snap;
    cr_assert_eq(kv_raftlog_is_empty(f.g.l), 1);
    cr_assert_eq(f.g.st->initial_state(f.g.st->ctx, &hs), 0);
    cr_assert(hs.term == 0 && hs.vote == 0 && hs.commit == 0);
    cr_assert_eq(f.g.st->first_index(f.g.st->ctx), 1);
    cr_assert_eq(f.g.st->last_index(f.g.st->ctx), 0);
    cr_assert_eq(term_of(&f, 0), 0);
    cr_assert_eq(term_rc(&f, 1), RAFT_EUNAVAILABLE);
    cr_assert_eq(f.g.st->snapshot(f.g.st->ctx, &snap), 0);
    cr_assert(snap.meta.index == 0 && snap.data == NULL && snap.len == 0);
    struct raft_entry out[2];
    size_t n = 9;
    cr_assert_eq(f.g.st->entries(f.g.st->ctx, 1, 2, 100, out, &n), RAFT_EUNAVAILABLE);
    kv_raftlog_end_cycle(f.g.l);
    cr_assert_eq(kv_raftlog_error(f.g.l), 0);
    rl_log_fini(&f.g);
}

Test(raftlog, append_term_entries)
{
    fx f;
    fx_init(&f);
    cr_assert_eq(append(&f, 1, 6, 1), 0);
    cr_assert_eq(append(&f, 6, 11, 2), 0);
    cr_assert_eq(kv_raftlog_is_empty(f.g.l), 0);
    cr_assert_eq(f.g.st->first_index(f.g.st->ctx), 1);
    cr_assert_eq(f.g.st->last_index(f.g.st->ctx), 10);
    for (raft_index i = 1; i <= 10; i++)
        cr_assert_eq(term_of(&f, i), i <= 5 ? 1 : 2);
    cr_assert_eq(term_of(&f, 0), 0);
    cr_assert_eq(term_rc(&f, 11), RAFT_EUNAVAILABLE);

    struct raft_entry out[16];
    size_t n;
    cr_assert_eq(f.g.st->entries(f.g.st->ctx, 1, 11, (size_t)-1, out, &n), 0);
    cr_assert_eq(n, 10);
    for (size_t i = 0; i < n; i++)
        check_entry(&out[i], i + 1, i < 5 ? 1 : 2);
    /* max_bytes: "e1t1" and "e2t1" are 4 bytes each */
    cr_assert_eq(f.g.st->entries(f.g.st->ctx, 1, 11, 8, out, &n), 0);
    cr_assert_eq(n, 2);
    cr_assert_eq(f.g.st->entries(f.g.st->ctx, 1, 11, 9, out, &n), 0);
    cr_assert_eq(n, 2);
    /* at least one entry even when it alone is larger */
    cr_assert_eq(f.g.st->entries(f.g.st->ctx, 3, 11, 0, out, &n), 0);
    cr_assert_eq(n, 1);
    check_entry(&out[0], 3, 1);
    cr_assert_eq(f.g.st->entries(f.g.st->ctx, 5, 5, 100, out, &n), 0);
    cr_assert_eq(n, 0);
    cr_assert_eq(f.g.st->entries(f.g.st->ctx, 9, 12, 100, out, &n), RAFT_EUNAVAILABLE);
    cr_assert_eq(f.g.st->entries(f.g.st->ctx, 0, 3, 100, out, &n), RAFT_ECOMPACTED);
    kv_raftlog_end_cycle(f.g.l);

    /* gaps and non-contiguous batches are refused */
    cr_assert_eq(append(&f, 12, 13, 2), -EINVAL);
    struct raft_entry bad[2];
    mk(&f, bad, 11, 13, 2);
    bad[1].index = 13;
    MDB_txn *txn;
    cr_assert_eq(mdb_txn_begin(f.g.e.env, NULL, 0, &txn), 0);
    cr_assert_eq(kv_raftlog_append(f.g.l, txn, bad, 2), -EINVAL);
    cr_assert_eq(kv_raftlog_append(f.g.l, txn, bad, 0), 0);
    mdb_txn_abort(txn);
    cr_assert_eq(f.g.st->last_index(f.g.st->ctx), 10);
    kv_raftlog_end_cycle(f.g.l);
    cr_assert_eq(kv_raftlog_error(f.g.l), 0);
    rl_log_fini(&f.g);
}

Test(raftlog, append_truncates_conflicting_suffix)
{
    fx f;
    fx_init(&f);
    cr_assert_eq(append(&f, 1, 11, 1), 0);
    cr_assert_eq(append(&f, 7, 9, 3), 0); /* replaces 7..10 by 7..8 */
    cr_assert_eq(f.g.st->last_index(f.g.st->ctx), 8);
    cr_assert_eq(term_of(&f, 6), 1);
    cr_assert_eq(term_of(&f, 7), 3);
    cr_assert_eq(term_of(&f, 8), 3);
    cr_assert_eq(term_rc(&f, 9), RAFT_EUNAVAILABLE);
    struct raft_entry out[16];
    size_t n;
    cr_assert_eq(f.g.st->entries(f.g.st->ctx, 5, 9, 1000, out, &n), 0);
    cr_assert_eq(n, 4);
    check_entry(&out[1], 6, 1);
    check_entry(&out[2], 7, 3);
    kv_raftlog_end_cycle(f.g.l);
    /* replace from the very first entry */
    cr_assert_eq(append(&f, 1, 3, 4), 0);
    cr_assert_eq(f.g.st->last_index(f.g.st->ctx), 2);
    cr_assert_eq(term_of(&f, 1), 4);
    kv_raftlog_end_cycle(f.g.l);
    rl_log_fini(&f.g);
}

Test(raftlog, hard_state_and_snapshot_survive_reopen)
{
    fx f;
    fx_init(&f);
    cr_assert_eq(append(&f, 1, 21, 2), 0);
    struct raft_hard_state hs = {.term = 7, .vote = 3, .commit = 15}, got;
    MDB_txn *txn;
    cr_assert_eq(mdb_txn_begin(f.g.e.env, NULL, 0, &txn), 0);
    cr_assert_eq(kv_raftlog_set_hard_state(f.g.l, txn, &hs), 0);
    cr_assert_eq(mdb_txn_commit(txn), 0);
    kv_raftlog_rotate(f.g.l);
    /* a snapshot older than the log: entries past it are kept */
    cr_assert_eq(set_snap(&f, 10, 2), 0);
    kv_raftlog_end_cycle(f.g.l);

    rl_log_reopen(&f.g);
    cr_assert_eq(kv_raftlog_is_empty(f.g.l), 0);
    cr_assert_eq(f.g.st->initial_state(f.g.st->ctx, &got), 0);
    cr_assert(got.term == 7 && got.vote == 3 && got.commit == 15);
    cr_assert_eq(f.g.st->first_index(f.g.st->ctx), 11);
    cr_assert_eq(f.g.st->last_index(f.g.st->ctx), 20);
    cr_assert_eq(term_of(&f, 10), 2);
    cr_assert_eq(term_rc(&f, 9), RAFT_ECOMPACTED);
    struct raft_entry out[16];
    size_t n;
    cr_assert_eq(f.g.st->entries(f.g.st->ctx, 10, 12, 100, out, &n), RAFT_ECOMPACTED);
    cr_assert_eq(f.g.st->entries(f.g.st->ctx, 11, 21, 1000, out, &n), 0);
    cr_assert_eq(n, 10);
    check_entry(&out[9], 20, 2);
    struct raft_snapshot s;
    cr_assert_eq(f.g.st->snapshot(f.g.st->ctx, &s), 0);
    cr_assert(s.meta.index == 10 && s.meta.term == 2 && s.data == NULL && s.len == 0);
    cr_assert(s.meta.conf.n_voters == 3 && s.meta.conf.voters[2] == 3);
    cr_assert(s.meta.conf.n_learners == 1 && s.meta.conf.learners[0] == 9);
    kv_raftlog_end_cycle(f.g.l);

    /* entries at or below the snapshot cannot be appended; a stale snapshot is refused */
    cr_assert_eq(append(&f, 10, 11, 2), -EINVAL);
    cr_assert_eq(set_snap(&f, 9, 2), -EINVAL);
    /* prefix truncation may not pass snap.index + 1 */
    cr_assert_eq(mdb_txn_begin(f.g.e.env, NULL, 0, &txn), 0);
    cr_assert_eq(kv_raftlog_truncate_prefix(f.g.l, txn, 12), -EINVAL);
    cr_assert_eq(kv_raftlog_truncate_prefix(f.g.l, txn, 11), 0);
    cr_assert_eq(mdb_txn_commit(txn), 0);
    kv_raftlog_rotate(f.g.l);
    cr_assert_eq(f.g.st->first_index(f.g.st->ctx), 11);
    cr_assert_eq(term_of(&f, 11), 2);

    /* a snapshot that does not match the log drops it */
    cr_assert_eq(set_snap(&f, 15, 5), 0);
    cr_assert_eq(f.g.st->first_index(f.g.st->ctx), 16);
    cr_assert_eq(f.g.st->last_index(f.g.st->ctx), 15);
    cr_assert_eq(term_of(&f, 15), 5);
    cr_assert_eq(term_rc(&f, 16), RAFT_EUNAVAILABLE);
    cr_assert_eq(term_rc(&f, 14), RAFT_ECOMPACTED);
    kv_raftlog_end_cycle(f.g.l);
    /* a snapshot beyond the log drops it too; appends resume after it */
    cr_assert_eq(set_snap(&f, 40, 6), 0);
    cr_assert_eq(append(&f, 41, 43, 6), 0);
    kv_raftlog_end_cycle(f.g.l);
    rl_log_reopen(&f.g);
    cr_assert_eq(f.g.st->first_index(f.g.st->ctx), 41);
    cr_assert_eq(f.g.st->last_index(f.g.st->ctx), 42);
    cr_assert_eq(term_of(&f, 40), 6);
    cr_assert_eq(term_of(&f, 42), 6);
    raft_index first, last;
    uint64_t bytes;
    cr_assert_eq(kv_raftlog_stats(f.g.l, &first, &last, &bytes), 0);
    cr_assert(first == 41 && last == 42 && bytes > 0);
    kv_raftlog_end_cycle(f.g.l);
    cr_assert_eq(kv_raftlog_error(f.g.l), 0);
    rl_log_fini(&f.g);
}

Test(raftlog, returned_data_stays_valid_until_end_cycle)
{
    fx f;
    fx_init(&f);
    cr_assert_eq(append(&f, 1, 4, 1), 0);
    struct raft_entry out[4];
    size_t n;
    cr_assert_eq(f.g.st->entries(f.g.st->ctx, 2, 4, 1000, out, &n), 0);
    cr_assert_eq(n, 2);
    /* the worker replaces 2..3 and commits; the loop rotates */
    cr_assert_eq(append(&f, 2, 4, 2), 0);
    cr_assert_eq(term_of(&f, 2), 2); /* the new commit is visible */
    struct raft_entry now[4];
    cr_assert_eq(f.g.st->entries(f.g.st->ctx, 2, 4, 1000, now, &n), 0);
    check_entry(&now[0], 2, 2);
    /* ... and the old data is still readable (old read txn kept alive) */
    check_entry(&out[0], 2, 1);
    check_entry(&out[1], 3, 1);
    /* more cycles than spare read txns */
    for (raft_term t = 3; t < 12; t++) {
        cr_assert_eq(append(&f, 3, 4, t), 0);
        cr_assert_eq(term_of(&f, 3), t);
    }
    check_entry(&out[1], 3, 1);
    kv_raftlog_end_cycle(f.g.l);
    cr_assert_eq(term_of(&f, 3), 11);
    kv_raftlog_end_cycle(f.g.l);
    rl_log_fini(&f.g);
}

/* Flips one byte of a stored value (dbi by name, key given). */
static void flip(fx *f, const char *db, const void *key, size_t klen, size_t at)
{
    MDB_txn *txn;
    MDB_dbi dbi;
    MDB_val k = {klen, (void *)key}, v;
    uint8_t buf[256];
    cr_assert_eq(mdb_txn_begin(f->g.e.env, NULL, 0, &txn), 0);
    cr_assert_eq(mdb_dbi_open(txn, db, 0, &dbi), 0);
    cr_assert_eq(mdb_get(txn, dbi, &k, &v), 0);
    cr_assert(v.mv_size <= sizeof buf && at < v.mv_size);
    memcpy(buf, v.mv_data, v.mv_size);
    buf[at] ^= 0x10;
    v.mv_data = buf;
    cr_assert_eq(mdb_put(txn, dbi, &k, &v, 0), 0);
    cr_assert_eq(mdb_txn_commit(txn), 0);
}

Test(raftlog, flipped_byte_is_ebadmsg)
{
    fx f;
    fx_init(&f);
    cr_assert_eq(append(&f, 1, 6, 1), 0);
    kv_raftlog_end_cycle(f.g.l);
    uint8_t k3[8] = {0, 0, 0, 0, 0, 0, 0, 3};
    flip(&f, "rlog", k3, 8, 14); /* a data byte of entry 3 */
    kv_raftlog_rotate(f.g.l);
    cr_assert_eq(term_of(&f, 2), 1);
    cr_assert_eq(term_rc(&f, 3), -EBADMSG);
    cr_assert_eq(kv_raftlog_error(f.g.l), -EBADMSG);
    struct raft_entry out[8];
    size_t n;
    cr_assert_eq(f.g.st->entries(f.g.st->ctx, 1, 6, 1000, out, &n), -EBADMSG);
    cr_assert_eq(n, 0);
    kv_raftlog_end_cycle(f.g.l);
    /* the middle of the log is checked when read; the ends are checked at open */
    rl_log_reopen(&f.g);
    uint8_t k5[8] = {0, 0, 0, 0, 0, 0, 0, 5};
    flip(&f, "rlog", k5, 8, 6); /* a term byte of the last entry */
    kv_raftlog_close(f.g.l);
    f.g.l = NULL;
    rl_env_reopen(&f.g.e);
    cr_assert_eq(kv_raftlog_open(&f.g.l, f.g.e.env), -EBADMSG);
    cr_assert_null(f.g.l);
    rl_env_fini(&f.g.e);
}

Test(raftlog, flipped_meta_is_ebadmsg)
{
    fx f;
    fx_init(&f);
    struct raft_hard_state hs = {.term = 2, .vote = 1, .commit = 0};
    MDB_txn *txn;
    cr_assert_eq(mdb_txn_begin(f.g.e.env, NULL, 0, &txn), 0);
    cr_assert_eq(kv_raftlog_set_hard_state(f.g.l, txn, &hs), 0);
    cr_assert_eq(mdb_txn_commit(txn), 0);
    cr_assert_eq(set_snap(&f, 4, 1), 0);
    kv_raftlog_end_cycle(f.g.l);
    flip(&f, "rmeta", "hs", 2, 12); /* the vote */
    kv_raftlog_rotate(f.g.l);
    cr_assert_eq(f.g.st->initial_state(f.g.st->ctx, &hs), -EBADMSG);
    cr_assert_eq(kv_raftlog_is_empty(f.g.l), -EBADMSG);
    kv_raftlog_close(f.g.l);
    rl_env_reopen(&f.g.e);
    cr_assert_eq(kv_raftlog_open(&f.g.l, f.g.e.env), -EBADMSG);
    flip(&f, "rmeta", "hs", 2, 12); /* repaired */
    cr_assert_eq(kv_raftlog_open(&f.g.l, f.g.e.env), 0);
    kv_raftlog_close(f.g.l);
    flip(&f, "rmeta", "snap", 4, 30); /* a voter id */
    cr_assert_eq(kv_raftlog_open(&f.g.l, f.g.e.env), -EBADMSG);
    rl_env_fini(&f.g.e);
}
