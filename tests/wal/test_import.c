/* kv_wal_import (server/wal/wal_import.c): a data dir's raft log in LMDB (server/raftlog/)
 * becomes a WAL holding the same snapshot meta, hard state, entries and configuration
 * entries; a leftover <dir>.tmp of an interrupted conversion is replaced; an existing WAL is
 * never overwritten. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../raftlog/rl_env.h"
#include "wal_fx.h"

static void lmdb_append(rl_log *g, raft_index lo, raft_index hi, raft_term t)
{
    static uint8_t bufs[64][160];
    struct raft_entry e[64];
    cr_assert(hi - lo <= 64);
    for (raft_index i = lo; i < hi; i++) {
        wfx_fill(bufs[i - lo], i, t);
        e[i - lo] = (struct raft_entry){.term = t,
                                        .index = i,
                                        .type = i % 9 == 0 ? RAFT_ENTRY_CONF : RAFT_ENTRY_NORMAL,
                                        .data = bufs[i - lo],
                                        .len = wfx_len(i, t)};
    }
    MDB_txn *txn;
    cr_assert_eq(mdb_txn_begin(g->e.env, NULL, 0, &txn), 0);
    cr_assert_eq(kv_raftlog_append(g->l, txn, e, hi - lo), 0);
    cr_assert_eq(mdb_txn_commit(txn), 0);
    kv_raftlog_rotate(g->l);
}

static void same_log(const struct raft_storage *a, const struct raft_storage *b)
{
    cr_assert_eq(a->first_index(a->ctx), b->first_index(b->ctx));
    cr_assert_eq(a->last_index(a->ctx), b->last_index(b->ctx));
    struct raft_snapshot sa, sb;
    cr_assert_eq(a->snapshot(a->ctx, &sa), 0);
    cr_assert_eq(b->snapshot(b->ctx, &sb), 0);
    cr_assert_eq(sa.meta.index, sb.meta.index);
    cr_assert_eq(sa.meta.term, sb.meta.term);
    cr_assert_eq(sa.meta.conf.n_voters, sb.meta.conf.n_voters);
    for (uint32_t k = 0; k < sa.meta.conf.n_voters; k++)
        cr_assert_eq(sa.meta.conf.voters[k], sb.meta.conf.voters[k]);
    struct raft_hard_state ha, hb;
    cr_assert_eq(a->initial_state(a->ctx, &ha), 0);
    cr_assert_eq(b->initial_state(b->ctx, &hb), 0);
    cr_assert(ha.term == hb.term && ha.vote == hb.vote && ha.commit == hb.commit);
    for (raft_index i = a->first_index(a->ctx); i <= a->last_index(a->ctx); i++) {
        struct raft_entry ea, eb;
        size_t na, nb;
        cr_assert_eq(a->entries(a->ctx, i, i + 1, 1 << 20, &ea, &na), 0);
        cr_assert_eq(b->entries(b->ctx, i, i + 1, 1 << 20, &eb, &nb), 0);
        cr_assert(na == 1 && nb == 1);
        cr_assert(ea.term == eb.term && ea.type == eb.type && ea.len == eb.len, "entry %llu",
                  (unsigned long long)i);
        cr_assert(ea.len == 0 || !memcmp(ea.data, eb.data, ea.len), "data of %llu",
                  (unsigned long long)i);
    }
    raft_index lo = a->first_index(a->ctx), hi = a->last_index(a->ctx);
    for (raft_index i = lo; i <= hi; i += 5) {
        raft_index ia, ib;
        cr_assert_eq(a->next_conf(a->ctx, i, hi, &ia), 0);
        cr_assert_eq(b->next_conf(b->ctx, i, hi, &ib), 0);
        cr_assert_eq(ia, ib, "next_conf(%llu)", (unsigned long long)i);
    }
}

Test(wal_import, the_lmdb_log_becomes_the_same_wal)
{
    rl_log g;
    rl_log_init(&g);
    for (raft_index i = 1; i <= 2000; i += 50)
        lmdb_append(&g, i, i + 50, 1);
    lmdb_append(&g, 1990, 2010, 2); /* an overwritten suffix */
    struct raft_snapshot_meta m = {.index = 700, .term = 1};
    m.conf.n_voters = 3;
    for (int k = 0; k < 3; k++)
        m.conf.voters[k] = 10 + (raft_id)k;
    struct raft_hard_state hs = {.term = 2, .vote = 11, .commit = 2005};
    MDB_txn *txn;
    cr_assert_eq(mdb_txn_begin(g.e.env, NULL, 0, &txn), 0);
    cr_assert_eq(kv_raftlog_set_snapshot(g.l, txn, &m), 0);
    cr_assert_eq(kv_raftlog_set_hard_state(g.l, txn, &hs), 0);
    cr_assert_eq(mdb_txn_commit(txn), 0);
    kv_raftlog_rotate(g.l);

    wfx f;
    wfx_init(&f);
    /* a conversion a crash interrupted left a partial <dir>.tmp */
    char tmp[400];
    snprintf(tmp, sizeof tmp, "%s.tmp", f.dir);
    cr_assert_eq(mkdir(tmp, 0700), 0);
    char junk[480];
    snprintf(junk, sizeof junk, "%s/0000000000000001-0000000000000001.wal", tmp);
    FILE *fp = fopen(junk, "w");
    cr_assert_not_null(fp);
    fputs("partial", fp);
    fclose(fp);

    struct kv_wal_opts o = {.segment_bytes = 64 << 10, .tail_bytes = 4096};
    cr_assert_eq(kv_wal_import(f.dir, g.st, &o, f.err, sizeof f.err), 0, "%s", f.err);
    kv_raftlog_end_cycle(g.l);
    struct stat st;
    cr_assert_neq(stat(tmp, &st), 0, "the temporary directory is gone");
    wfx_open(&f, 64 << 10, 4096);
    same_log(g.st, kv_wal_storage(f.w));
    kv_raftlog_end_cycle(g.l);
    kv_wal_end_cycle(f.w);
    struct kv_wal_stats s;
    kv_wal_stats(f.w, &s);
    cr_assert_gt(s.segments, 1);

    /* never over an existing WAL */
    wfx_close(&f);
    cr_assert_eq(kv_wal_import(f.dir, g.st, &o, f.err, sizeof f.err), -EEXIST);
    kv_raftlog_end_cycle(g.l);
    wfx_fini(&f);
    kv_raftlog_close(g.l);
    rl_env_fini(&g.e);
}

Test(wal_import, an_empty_log_gives_an_empty_wal)
{
    rl_log g;
    rl_log_init(&g);
    wfx f;
    wfx_init(&f);
    cr_assert_eq(kv_wal_import(f.dir, g.st, NULL, f.err, sizeof f.err), 0, "%s", f.err);
    kv_raftlog_end_cycle(g.l);
    wfx_open(&f, 0, 0);
    cr_assert_eq(kv_wal_is_empty(f.w), 1);
    same_log(g.st, kv_wal_storage(f.w));
    kv_raftlog_end_cycle(g.l);
    wfx_fini(&f);
    kv_raftlog_close(g.l);
    rl_env_fini(&g.e);
}
