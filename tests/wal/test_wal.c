/* The WAL's write and read paths (server/wal/): what a reopened log holds, overwrite of a
 * conflicting suffix, the hard state, rotation and deletion of segments, one fdatasync per
 * batch, the storage vtable's bounds, the configuration-entry index and the snapshot marker's
 * codec. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/snap_meta.h"
#include "wal_fx.h"

#define SEG 4096 /* small segments: rotation every ~40 entries */

static void check_bounds(wfx *f, uint64_t first, uint64_t last)
{
    const struct raft_storage *st = kv_wal_storage(f->w);
    cr_assert_eq(st->first_index(st->ctx), first);
    cr_assert_eq(st->last_index(st->ctx), last);
}

Test(wal, reopen_reads_the_same_entries)
{
    wfx f;
    wfx_init(&f);
    wfx_open(&f, SEG, 512); /* a tiny tail: most reads come from the segment files */
    for (uint64_t i = 1; i <= 300; i += 10)
        wfx_append(&f, i, i + 10, 3, 37);
    struct kv_wal_stats s;
    kv_wal_stats(f.w, &s);
    cr_assert_gt(s.segments, 3, "segments %llu", (unsigned long long)s.segments);
    cr_assert_leq(s.cached_bytes, 512 + 10 * 160);
    check_bounds(&f, 1, 300);
    wfx_check(&f, 1, 301, 3);
    for (int round = 0; round < 2; round++) {
        wfx_open(&f, SEG, round ? 1 << 20 : 512);
        check_bounds(&f, 1, 300);
        wfx_check(&f, 1, 301, 3);
        const struct raft_storage *st = kv_wal_storage(f.w);
        raft_index idx;
        cr_assert_eq(st->next_conf(st->ctx, 1, 300, &idx), 0);
        cr_assert_eq(idx, 37);
        cr_assert_eq(st->next_conf(st->ctx, 38, 300, &idx), 0);
        cr_assert_eq(idx, 74);
        cr_assert_eq(st->next_conf(st->ctx, 297, 300, &idx), 0);
        cr_assert_eq(idx, 0);
        /* a batch read stops at max_bytes but returns at least one entry */
        struct raft_entry e[300];
        size_t n = 0;
        cr_assert_eq(st->entries(st->ctx, 1, 301, 1, e, &n), 0);
        cr_assert_eq(n, 1);
        cr_assert_eq(st->entries(st->ctx, 1, 301, SIZE_MAX, e, &n), 0);
        cr_assert_eq(n, 300);
        kv_wal_end_cycle(f.w);
    }
    wfx_fini(&f);
}

Test(wal, storage_bounds_are_raft_errors)
{
    wfx f;
    wfx_init(&f);
    wfx_open(&f, SEG, 0);
    cr_assert_eq(kv_wal_is_empty(f.w), 1);
    wfx_append(&f, 1, 21, 2, 0);
    cr_assert_eq(kv_wal_is_empty(f.w), 0);
    struct raft_snapshot_meta m = {.index = 10, .term = 2};
    m.conf.n_voters = 1;
    m.conf.voters[0] = 7;
    cr_assert_eq(kv_wal_set_snapshot(f.w, &m), 0);
    cr_assert_eq(kv_wal_sync(f.w), 0);
    const struct raft_storage *st = kv_wal_storage(f.w);
    raft_term t;
    struct raft_entry e[4];
    size_t n;
    cr_assert_eq(st->term(st->ctx, 9, &t), RAFT_ECOMPACTED);
    cr_assert_eq(st->term(st->ctx, 10, &t), 0);
    cr_assert_eq(t, 2);
    cr_assert_eq(st->term(st->ctx, 21, &t), RAFT_EUNAVAILABLE);
    cr_assert_eq(st->entries(st->ctx, 10, 12, SIZE_MAX, e, &n), RAFT_ECOMPACTED);
    cr_assert_eq(st->entries(st->ctx, 19, 22, SIZE_MAX, e, &n), RAFT_EUNAVAILABLE);
    /* preconditions of the writer */
    struct raft_entry bad = {.term = 2, .index = 23};
    cr_assert_eq(kv_wal_append(f.w, &bad, 1), -EINVAL); /* a gap after 20 */
    bad.index = 10;
    cr_assert_eq(kv_wal_append(f.w, &bad, 1), -EINVAL); /* inside the snapshot */
    m.index = 5;
    cr_assert_eq(kv_wal_set_snapshot(f.w, &m), -EINVAL); /* older than the current one */
    wfx_open(&f, SEG, 0);
    check_bounds(&f, 11, 20);
    st = kv_wal_storage(f.w);
    struct raft_snapshot sn;
    cr_assert_eq(st->snapshot(st->ctx, &sn), 0);
    cr_assert_eq(sn.meta.index, 10);
    cr_assert_eq(sn.meta.conf.n_voters, 1);
    cr_assert_eq(sn.meta.conf.voters[0], 7);
    wfx_check(&f, 11, 21, 2);
    wfx_fini(&f);
}

Test(wal, a_conflicting_suffix_is_replaced_and_stays_replaced)
{
    wfx f;
    wfx_init(&f);
    wfx_open(&f, SEG, 0);
    for (uint64_t i = 1; i <= 60; i += 20)
        wfx_append(&f, i, i + 20, 1, 0);
    wfx_append(&f, 45, 48, 2, 0); /* a new leader overwrites 45.. (across a rotation) */
    check_bounds(&f, 1, 47);
    for (int round = 0; round < 2; round++) {
        wfx_check(&f, 1, 45, 1);
        wfx_check(&f, 45, 48, 2);
        check_bounds(&f, 1, 47);
        wfx_open(&f, SEG, 0);
    }
    wfx_append(&f, 48, 50, 2, 0); /* and the log goes on after a reopen */
    wfx_open(&f, SEG, 0);
    check_bounds(&f, 1, 49);
    wfx_check(&f, 45, 50, 2);
    wfx_fini(&f);
}

Test(wal, hard_state_last_wins)
{
    wfx f;
    wfx_init(&f);
    wfx_open(&f, SEG, 0);
    struct raft_hard_state hs = {0};
    for (uint64_t i = 1; i <= 200; i += 10) {
        hs = (struct raft_hard_state){.term = i, .vote = i % 3 + 1, .commit = i - 1};
        cr_assert_eq(kv_wal_set_hard_state(f.w, &hs), 0);
        wfx_append(&f, i, i + 10, 1, 0); /* hs and entries in one batch, then rotations */
    }
    /* two in one batch: the later one */
    struct raft_hard_state a = {.term = 500, .vote = 2, .commit = 150};
    struct raft_hard_state b = {.term = 501, .vote = 3, .commit = 190};
    cr_assert_eq(kv_wal_set_hard_state(f.w, &a), 0);
    cr_assert_eq(kv_wal_set_hard_state(f.w, &b), 0);
    cr_assert_eq(kv_wal_sync(f.w), 0);
    for (int round = 0; round < 2; round++) {
        wfx_open(&f, SEG, 0);
        struct raft_hard_state got;
        const struct raft_storage *st = kv_wal_storage(f.w);
        cr_assert_eq(st->initial_state(st->ctx, &got), 0);
        cr_assert_eq(got.term, 501);
        cr_assert_eq(got.vote, 3);
        cr_assert_eq(got.commit, 190);
    }
    /* an unsynced hard state is not on disk */
    struct raft_hard_state c = {.term = 900, .vote = 1, .commit = 195};
    cr_assert_eq(kv_wal_set_hard_state(f.w, &c), 0);
    wfx_open(&f, SEG, 0);
    struct raft_hard_state got;
    const struct raft_storage *st = kv_wal_storage(f.w);
    cr_assert_eq(st->initial_state(st->ctx, &got), 0);
    cr_assert_eq(got.term, 501);
    wfx_fini(&f);
}

Test(wal, one_fdatasync_per_batch)
{
    wfx f;
    wfx_init(&f);
    wfx_open(&f, 64 << 20, 0);
    struct kv_wal_stats s0, s1;
    kv_wal_stats(f.w, &s0);
    cr_assert_eq(kv_wal_sync(f.w), 0); /* nothing pending: no I/O */
    kv_wal_stats(f.w, &s1);
    cr_assert_eq(s1.fsyncs, s0.fsyncs);
    for (int k = 0; k < 5; k++) {
        struct raft_hard_state hs = {.term = 1, .vote = 1, .commit = (raft_index)k * 50};
        cr_assert_eq(kv_wal_set_hard_state(f.w, &hs), 0);
        wfx_append(&f, 1 + (uint64_t)k * 50, 51 + (uint64_t)k * 50, 1, 0);
        kv_wal_stats(f.w, &s1);
        cr_assert_eq(s1.fsyncs, s0.fsyncs + 1, "batch %d: %llu fsyncs", k,
                     (unsigned long long)(s1.fsyncs - s0.fsyncs));
        s0 = s1;
    }
    wfx_fini(&f);
}

/* --unsafe-no-fsync: the records are written (a reopen after a clean close reads them) but
 * never flushed. */
Test(wal, no_sync_writes_without_flushing)
{
    wfx f;
    wfx_init(&f);
    struct kv_wal_opts o = {.segment_bytes = 64 << 20, .no_sync = 1};
    cr_assert_eq(kv_wal_open(&f.w, f.dir, &o, f.err, sizeof f.err), 0, "%s", f.err);
    struct kv_wal_stats s0, s1;
    kv_wal_stats(f.w, &s0);
    wfx_append(&f, 1, 51, 1, 0);
    kv_wal_stats(f.w, &s1);
    cr_assert_eq(s1.fsyncs, s0.fsyncs, "%llu flushes with no_sync",
                 (unsigned long long)(s1.fsyncs - s0.fsyncs));
    cr_assert_gt(s1.bytes, 50 * KV_WAL_HDR, "records written: %llu bytes",
                 (unsigned long long)s1.bytes);
    wfx_open(&f, 64 << 20, 0);
    wfx_check(&f, 1, 51, 1);
    wfx_fini(&f);
}

static size_t count_segments(wfx *f)
{
    char names[256][64];
    return wfx_segments(f, names, 256);
}

Test(wal, rotation_and_release)
{
    wfx f;
    wfx_init(&f);
    wfx_open(&f, SEG, 0);
    struct raft_hard_state hs = {.term = 4, .vote = 2, .commit = 0};
    for (uint64_t i = 1; i <= 400; i += 10) {
        hs.commit = i + 9;
        cr_assert_eq(kv_wal_set_hard_state(f.w, &hs), 0);
        wfx_append(&f, i, i + 10, 4, 0);
    }
    size_t all = count_segments(&f);
    cr_assert_geq(all, 8, "%zu segments", all);
    /* no snapshot yet: nothing may go, whatever the applied index */
    cr_assert_eq(kv_wal_release(f.w, 400), 0);
    cr_assert_eq(count_segments(&f), all);

    struct raft_snapshot_meta m = {.index = 300, .term = 4};
    m.conf.n_voters = 1;
    m.conf.voters[0] = 1;
    cr_assert_eq(kv_wal_set_snapshot(f.w, &m), 0);
    cr_assert_eq(kv_wal_sync(f.w), 0);
    /* bound = min(snapshot 300, applied 250): exactly the leading segments whose entries
     * are all <= 250 go, never the active one */
    char names[256][64];
    size_t n = wfx_segments(&f, names, 256);
    size_t want = 0;
    while (want + 1 < n && wfx_max_index(&f, names[want]) <= 250)
        want++;
    cr_assert_gt(want, 0);
    cr_assert_lt(want, n - 1);
    int del = kv_wal_release(f.w, 250);
    cr_assert_eq(del, (int)want);
    char left[256][64];
    cr_assert_eq(wfx_segments(&f, left, 256), n - want);
    cr_assert_str_eq(left[0], names[want]);
    check_bounds(&f, 301, 400);
    wfx_check(&f, 301, 401, 4);

    wfx_open(&f, SEG, 0);
    check_bounds(&f, 301, 400);
    wfx_check(&f, 301, 401, 4);
    const struct raft_storage *st = kv_wal_storage(f.w);
    raft_term t;
    cr_assert_eq(st->term(st->ctx, 300, &t), 0);
    cr_assert_eq(t, 4);

    /* everything below the snapshot can go, but never the active segment; its head keeps
     * the snapshot and the hard state */
    m.index = 400;
    cr_assert_eq(kv_wal_set_snapshot(f.w, &m), 0);
    cr_assert_eq(kv_wal_sync(f.w), 0);
    wfx_append(&f, 401, 402, 5, 0); /* rotates if the active segment is full */
    cr_assert_geq(kv_wal_release(f.w, 400), 1);
    cr_assert_eq(count_segments(&f), 1);
    wfx_open(&f, SEG, 0);
    check_bounds(&f, 401, 401);
    wfx_check(&f, 401, 402, 5);
    struct raft_hard_state got;
    st = kv_wal_storage(f.w);
    cr_assert_eq(st->initial_state(st->ctx, &got), 0);
    cr_assert_eq(got.term, 4);
    cr_assert_eq(got.commit, 400);
    struct raft_snapshot sn;
    cr_assert_eq(st->snapshot(st->ctx, &sn), 0);
    cr_assert_eq(sn.meta.index, 400);
    cr_assert_eq(sn.meta.conf.voters[0], 1);
    wfx_fini(&f);
}

Test(wal, a_snapshot_beyond_the_log_drops_it)
{
    wfx f;
    wfx_init(&f);
    wfx_open(&f, SEG, 0);
    wfx_append(&f, 1, 11, 1, 0);
    /* a received snapshot at 1000 (term 3): the log does not hold it, all of it goes */
    struct raft_snapshot_meta m = {.index = 1000, .term = 3};
    cr_assert_eq(kv_wal_set_snapshot(f.w, &m), 0);
    cr_assert_eq(kv_wal_sync(f.w), 0);
    check_bounds(&f, 1001, 1000);
    wfx_append(&f, 1001, 1005, 3, 0);
    wfx_open(&f, SEG, 0);
    check_bounds(&f, 1001, 1004);
    wfx_check(&f, 1001, 1005, 3);
    wfx_fini(&f);
}

/* The snapshot marker's payload (base/snap_meta.h, also the LMDB log's "snap" record): a round
 * trip keeps every field; any length but the exact one, and a count above RAFT_MAX_NODES,
 * is refused with a zeroed meta, never read past the buffer. */
Test(wal, snapshot_meta_codec_refuses_every_bad_length)
{
    struct raft_snapshot_meta m = {.index = 0x0102030405060708ull, .term = 9};
    m.conf.n_voters = 3;
    m.conf.n_learners = 2;
    for (uint32_t i = 0; i < 3; i++)
        m.conf.voters[i] = 100 + i;
    for (uint32_t i = 0; i < 2; i++)
        m.conf.learners[i] = 200 + i;
    uint8_t b[KV_SNAP_META_MAX + 8];
    size_t n = kv_snap_meta_size(&m);
    cr_assert_eq(n, 24 + 5 * 8);
    kv_snap_meta_put(b, &m);
    struct raft_snapshot_meta got;
    cr_assert_eq(kv_snap_meta_get(b, n, &got), 0);
    cr_assert_eq(got.index, m.index);
    cr_assert_eq(got.term, m.term);
    cr_assert_eq(got.conf.n_voters, 3);
    cr_assert_eq(got.conf.n_learners, 2);
    cr_assert_eq(got.conf.voters[2], 102);
    cr_assert_eq(got.conf.learners[1], 201);
    for (size_t len = 0; len <= n + 8; len++) {
        if (len == n)
            continue;
        /* a heap copy of exactly len bytes: ASan catches a read past it */
        uint8_t *c = malloc(len ? len : 1);
        memcpy(c, b, len < n ? len : n);
        if (len > n)
            memset(c + n, 0, len - n);
        got.index = 1;
        cr_assert_eq(kv_snap_meta_get(c, len, &got), -EBADMSG, "length %zu of %zu accepted", len,
                     n);
        cr_assert_eq(got.index, 0);
        free(c);
    }
    kv_put_be32(b + 16, RAFT_MAX_NODES + 1);
    cr_assert_eq(kv_snap_meta_get(b, sizeof b, &got), -EBADMSG);
}
