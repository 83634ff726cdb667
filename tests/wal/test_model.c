/* The WAL against a model (server/wal/): thousands of random operations (appends that
 * overwrite a conflicting suffix, hard states, snapshot markers inside and beyond the log,
 * syncs, segment deletion, reopen after a sync, "power loss" reopen that drops the unsynced
 * batch, and a power cut during a batch's write) with tiny segments and a tiny tail cache;
 * after every reopen and every few steps the whole log, the snapshot, the hard state and the
 * configuration index must equal the model. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "wal_fx.h"

#define MAXE 4096

typedef struct model {
    raft_index first, last; /* entries [first, last]; first == snap.index + 1 */
    raft_term term[MAXE];   /* by index (indexes stay below MAXE) */
    struct raft_snapshot_meta snap;
    struct raft_hard_state hs;
} model;

static uint64_t rng;
static uint64_t rnd(uint64_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return n ? rng % n : 0;
}

static uint8_t etype(raft_index i, raft_term t)
{
    return (i * 5 + t) % 7 == 0 ? RAFT_ENTRY_CONF : RAFT_ENTRY_NORMAL;
}

static void compare(wfx *f, const model *m)
{
    const struct raft_storage *st = kv_wal_storage(f->w);
    cr_assert_eq(st->first_index(st->ctx), m->first);
    cr_assert_eq(st->last_index(st->ctx), m->last, "last %llu want %llu",
                 (unsigned long long)st->last_index(st->ctx), (unsigned long long)m->last);
    struct raft_snapshot sn;
    cr_assert_eq(st->snapshot(st->ctx, &sn), 0);
    cr_assert_eq(sn.meta.index, m->snap.index);
    cr_assert_eq(sn.meta.term, m->snap.term);
    cr_assert_eq(sn.meta.conf.n_voters, m->snap.conf.n_voters);
    struct raft_hard_state hs;
    cr_assert_eq(st->initial_state(st->ctx, &hs), 0);
    cr_assert(hs.term == m->hs.term && hs.vote == m->hs.vote && hs.commit == m->hs.commit);
    uint8_t want[160];
    for (raft_index i = m->first; i <= m->last; i++) {
        struct raft_entry e;
        size_t n;
        cr_assert_eq(st->entries(st->ctx, i, i + 1, 1 << 20, &e, &n), 0);
        cr_assert_eq(e.term, m->term[i], "term of %llu", (unsigned long long)i);
        cr_assert_eq(e.type, etype(i, e.term));
        cr_assert_eq(e.len, wfx_len(i, e.term));
        wfx_fill(want, i, e.term);
        cr_assert(e.len == 0 || !memcmp(e.data, want, e.len), "data of %llu",
                  (unsigned long long)i);
    }
    if (m->last >= m->first) {
        raft_index lo = m->first + rnd(m->last - m->first + 1), hi = lo + rnd(40), got, exp = 0;
        if (hi > m->last)
            hi = m->last;
        for (raft_index i = lo; i <= hi && !exp; i++)
            if (etype(i, m->term[i]) == RAFT_ENTRY_CONF)
                exp = i;
        cr_assert_eq(st->next_conf(st->ctx, lo, hi, &got), 0);
        cr_assert_eq(got, exp, "next_conf(%llu, %llu)", (unsigned long long)lo,
                     (unsigned long long)hi);
    }
    kv_wal_end_cycle(f->w);
}

static void append(wfx *f, model *m, raft_index lo, size_t cnt, raft_term t)
{
    static uint8_t bufs[16][160];
    struct raft_entry e[16];
    for (size_t k = 0; k < cnt; k++) {
        raft_index i = lo + k;
        wfx_fill(bufs[k], i, t);
        e[k] = (struct raft_entry){
            .term = t, .index = i, .type = etype(i, t), .data = bufs[k], .len = wfx_len(i, t)};
        m->term[i] = t;
    }
    cr_assert_eq(kv_wal_append(f->w, e, cnt), 0);
    m->last = lo + cnt - 1;
}

static void run(uint64_t seed, int steps)
{
    wfx f;
    wfx_init(&f);
    rng = seed;
    static model m, durable;
    memset(&m, 0, sizeof m);
    m.first = 1;
    durable = m;
    wfx_open(&f, 4096, 256);
    raft_term term = 1;
    int reopens = 0, releases = 0, cut = 0;
    for (int step = 0; step < steps && m.last + 20 < MAXE; step++) {
        uint64_t op = rnd(100);
        if (op < 45) { /* append, mostly at the end, sometimes over a conflicting suffix */
            raft_index lo = m.last + 1;
            if (rnd(6) == 0 && m.last >= m.first) {
                uint64_t back = rnd(6);
                lo = m.last + 1 - back > m.first ? m.last + 1 - back : m.first;
                term++;
            }
            append(&f, &m, lo, 1 + rnd(8), term);
        } else if (op < 60) {
            m.hs = (struct raft_hard_state){.term = term, .vote = rnd(3), .commit = m.last};
            cr_assert_eq(kv_wal_set_hard_state(f.w, &m.hs), 0);
        } else if (op < 66) { /* a snapshot marker: inside the log, or beyond it */
            struct raft_snapshot_meta s = {0};
            s.conf.n_voters = 1 + (uint32_t)rnd(3);
            for (uint32_t k = 0; k < s.conf.n_voters; k++)
                s.conf.voters[k] = k + 1;
            if (rnd(5) == 0) {
                s.index = m.last + 1 + rnd(10);
                s.term = ++term;
                m.first = s.index + 1;
                m.last = s.index;
            } else if (m.last >= m.first) {
                s.index = m.first + rnd(m.last - m.first + 1);
                s.term = m.term[s.index];
                m.first = s.index + 1;
            } else {
                continue;
            }
            m.snap = s;
            cr_assert_eq(kv_wal_set_snapshot(f.w, &s), 0);
        } else if (op < 88) {
            cr_assert_eq(kv_wal_sync(f.w), 0);
            durable = m;
        } else if (op < 94) {
            cr_assert_eq(kv_wal_sync(f.w), 0);
            durable = m;
            int d = kv_wal_release(f.w, m.snap.index + rnd(3) - 1);
            cr_assert_geq(d, 0);
            releases += d;
        } else if (op < 97) { /* clean reopen */
            cr_assert_eq(kv_wal_sync(f.w), 0);
            durable = m;
            wfx_open(&f, 4096, 256);
            reopens++;
        } else if (op < 99) { /* power loss: the unsynced batch is gone */
            wfx_open(&f, 4096, 256);
            m = durable;
            reopens++;
        } else { /* power loss during the batch's write: its first record is torn */
            char before[64][64], after[64][64];
            size_t nb = wfx_segments(&f, before, 64);
            uint64_t offs[1024];
            size_t nr = wfx_records(&f, before[nb - 1], offs, 1024);
            cr_assert_lt(nr, 1024);
            cr_assert_eq(kv_wal_sync(f.w), 0);
            size_t na = wfx_segments(&f, after, 64);
            const char *seg = after[na - 1];
            uint64_t at = 0; /* a new segment: the batch starts it */
            if (!strcmp(seg, before[nb - 1])) {
                uint64_t o2[1024];
                size_t n2 = wfx_records(&f, seg, o2, 1024);
                if (n2 == nr)
                    continue; /* nothing was pending */
                at = o2[nr];
            }
            /* the sector holding the batch's start never reached the disk (its later
             * sectors may have: stray bytes the open must clear) */
            wfx_close(&f);
            wfx_zero(&f, seg, at, (at / 512 + 1) * 512);
            wfx_open(&f, 4096, 256);
            m = durable;
            reopens++;
            cut++;
        }
        if (op >= 94 || step % 50 == 0)
            compare(&f, &m);
    }
    cr_assert_eq(kv_wal_sync(f.w), 0);
    wfx_open(&f, 4096, 256);
    compare(&f, &m);
    cr_assert_gt(reopens, 10);
    cr_assert_gt(releases, 5, "only %d segments deleted", releases);
    cr_assert_gt(cut, 0);
    wfx_fini(&f);
}

Test(wal_model, random_operations_match_the_model, .timeout = 150)
{
    for (uint64_t seed = 1; seed <= 6; seed++)
        run(0x9e3779b97f4a7c15ull * seed, 1500);
}
