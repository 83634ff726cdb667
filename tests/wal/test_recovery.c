/* WAL recovery (server/wal/wal_open.c): a torn write at the tail of the last segment is cut
 * and the log goes on; a bad record anywhere else, a missing segment or a missing prefix is
 * refused, naming the segment file and the offset. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "wal_fx.h"

#define SEG 4096

static void check_bounds(wfx *f, uint64_t first, uint64_t last)
{
    const struct raft_storage *st = kv_wal_storage(f->w);
    cr_assert_eq(st->first_index(st->ctx), first);
    cr_assert_eq(st->last_index(st->ctx), last);
}

static void write_batches(wfx *f, uint64_t lo, uint64_t hi, uint64_t per, uint64_t term)
{
    for (uint64_t i = lo; i < hi; i += per)
        wfx_append(f, i, i + per < hi ? i + per : hi, term, 0);
}

/* A closed one-segment log of entries 1..10 (one batch each) and, with big, entry 11 holding
 * big[0..len); names[0] gets the segment's name and offs its record offsets. Returns the
 * record count. */
static size_t closed_log(wfx *f, const uint8_t *big, size_t len, char names[][64], uint64_t *offs)
{
    wfx_init(f);
    wfx_open(f, 1 << 20, 0);
    write_batches(f, 1, 11, 1, 1);
    if (big) {
        struct raft_entry e = {.term = 1, .index = 11, .data = (uint8_t *)big, .len = len};
        cr_assert_eq(kv_wal_append(f->w, &e, 1), 0);
        cr_assert_eq(kv_wal_sync(f->w), 0);
    }
    wfx_close(f);
    cr_assert_eq(wfx_segments(f, names, 8), 1);
    return wfx_records(f, names[0], offs, 64);
}

Test(wal_recovery, torn_last_record_is_cut_and_the_log_goes_on)
{
    wfx f;
    /* entry 11: a large record, its later sectors never reach the disk */
    static uint8_t big[1200];
    memset(big, 0x77, sizeof big);
    char names[8][64];
    uint64_t offs[64];
    size_t n = closed_log(&f, big, sizeof big, names, offs);
    cr_assert_geq(n, 11);
    wfx_tear(&f, names[0], offs[n - 1]);

    wfx_open(&f, 1 << 20, 0);
    struct kv_wal_stats s;
    kv_wal_stats(f.w, &s);
    cr_assert_eq(s.torn_seq, 1);
    cr_assert_eq(s.torn_off, offs[n - 1]);
    check_bounds(&f, 1, 10);
    wfx_check(&f, 1, 11, 1);
    /* a new leader's 11, shorter than the cut record, goes where it was: nothing of the
     * cut record may remain after it */
    cr_assert_lt(wfx_len(11, 7), sizeof big);
    wfx_append(&f, 11, 12, 7, 0);
    wfx_open(&f, 1 << 20, 0);
    kv_wal_stats(f.w, &s);
    cr_assert_eq(s.torn_seq, 0, "stale bytes of the cut record were left behind");
    check_bounds(&f, 1, 11);
    wfx_check(&f, 1, 11, 1);
    wfx_check(&f, 11, 12, 7);
    wfx_fini(&f);
}

/* A bad record whose every sector was written is not a torn write but corruption at rest
 * (etcd's WAL CRC incident, docs/LESSONS.md lesson 7): refused, even at the end of the last
 * segment. */
Test(wal_recovery, a_bit_flip_in_the_last_record_is_refused)
{
    wfx f;
    char names[8][64];
    uint64_t offs[64];
    size_t n = closed_log(&f, NULL, 0, names, offs);
    wfx_flip(&f, names[0], offs[n - 1] + 12 + 15); /* a byte of entry 10's term */
    cr_assert_eq(wfx_try_open(&f, 1 << 20, 0), -EBADMSG);
    char want[64];
    snprintf(want, sizeof want, "offset %llu:", (unsigned long long)offs[n - 1]);
    cr_assert_not_null(strstr(f.err, names[0]), "%s", f.err);
    cr_assert_not_null(strstr(f.err, want), "want '%s' in: %s", want, f.err);
    wfx_fini(&f);
}

/* A bit flip that grows a record's length (byte 5 or 6 of its header) stretches the record
 * over the zeros past the last one, so it looked torn and was cut with the acknowledged
 * records behind it. A torn write never grows a length: whole records inside the claimed
 * length mean damage at rest, refused naming the record's offset. */
Test(wal_recovery, a_bit_flip_that_grows_a_length_is_refused)
{
    for (int byte = 5; byte <= 6; byte++) {
        wfx f;
        char names[8][64];
        uint64_t offs[64];
        size_t n = closed_log(&f, NULL, 0, names, offs);
        cr_assert_geq(n, 5);
        uint64_t bad = offs[n - 4]; /* three whole records follow it */
        wfx_flip(&f, names[0], bad + (uint64_t)byte);
        cr_assert_eq(wfx_try_open(&f, 1 << 20, 0), -EBADMSG,
                     "header byte %d flipped: the records after it were cut as a torn tail", byte);
        char want[64];
        snprintf(want, sizeof want, "offset %llu:", (unsigned long long)bad);
        cr_assert_not_null(strstr(f.err, want), "want '%s' in: %s", want, f.err);
        wfx_fini(&f);
    }
}

/* The check above must not mistake ordinary data for records: a torn last record whose
 * payload is an array of small integers (a header-like "01 00 00 00" with a length every 8
 * bytes) is still a torn write, cut. Without the plausibility test each such candidate cost
 * its length in CRC, the budget ran out and the open refused a recoverable tail. */
Test(wal_recovery, a_torn_record_of_small_integers_is_still_cut)
{
    wfx f;
    static uint8_t big[256 * 1024];
    for (size_t i = 0; i + 8 <= sizeof big; i += 8) { /* uint32 LE 1, 256, 1, 256, ... */
        memcpy(big + i, "\x01\x00\x00\x00\x00\x01\x00\x00", 8);
    }
    char names[8][64];
    uint64_t offs[64];
    size_t n = closed_log(&f, big, sizeof big, names, offs);
    uint64_t rec = offs[n - 1];
    /* one sector in its middle never reached the disk; the ones after it did */
    uint64_t mid = ((rec + sizeof big / 2) / 512) * 512;
    wfx_zero(&f, names[0], mid, mid + 512);
    cr_assert_eq(wfx_try_open(&f, 1 << 20, 0), 0, "a torn tail was refused: %s", f.err);
    struct kv_wal_stats st;
    kv_wal_stats(f.w, &st);
    cr_assert_eq(st.torn_off, rec);
    check_bounds(&f, 1, 10);
    wfx_fini(&f);
}

Test(wal_recovery, short_record_at_the_tail_is_cut)
{
    wfx f;
    wfx_init(&f);
    wfx_open(&f, 1 << 20, 0);
    write_batches(&f, 1, 21, 4, 1);
    wfx_close(&f);
    char names[8][64];
    cr_assert_eq(wfx_segments(&f, names, 8), 1);
    uint64_t offs[64];
    size_t n = wfx_records(&f, names[0], offs, 64);
    uint8_t last_hdr[12];
    FILE *fp;
    char p[512];
    snprintf(p, sizeof p, "%s/%s", f.dir, names[0]);
    cr_assert_not_null(fp = fopen(p, "rb"));
    cr_assert_eq(fseek(fp, (long)offs[n - 1], SEEK_SET), 0);
    cr_assert_eq(fread(last_hdr, 1, 12, fp), 12);
    fclose(fp);
    uint64_t end = offs[n - 1] + 12 +
                   ((uint32_t)last_hdr[4] << 24 | (uint32_t)last_hdr[5] << 16 |
                    (uint32_t)last_hdr[6] << 8 | last_hdr[7]);
    /* a record whose header made it to the disk but whose payload did not */
    uint8_t torn[12 + 30] = {KV_WAL_REC_ENTRY, 0, 0, 0, 0, 0, 3, 0xe8, 1, 2, 3, 4};
    memset(torn + 12, 0xab, 30);
    wfx_pwrite(&f, names[0], end, torn, sizeof torn);

    wfx_open(&f, 1 << 20, 0);
    struct kv_wal_stats s;
    kv_wal_stats(f.w, &s);
    cr_assert_eq(s.torn_seq, 1);
    cr_assert_eq(s.torn_off, end);
    check_bounds(&f, 1, 20);
    wfx_check(&f, 1, 21, 1);
    wfx_append(&f, 21, 22, 1, 0);
    wfx_open(&f, 1 << 20, 0);
    kv_wal_stats(f.w, &s);
    cr_assert_eq(s.torn_seq, 0);
    wfx_check(&f, 1, 22, 1);
    wfx_fini(&f);
}

/* Bytes a power cut left past the end of the records (a later page of a batch that was
 * never synced, behind a page that was lost) must not survive under later appends. */
Test(wal_recovery, stray_bytes_past_the_end_are_zeroed)
{
    wfx f;
    wfx_init(&f);
    wfx_open(&f, 1 << 20, 0);
    write_batches(&f, 1, 21, 4, 1);
    wfx_close(&f);
    char names[8][64];
    cr_assert_eq(wfx_segments(&f, names, 8), 1);
    uint64_t offs[64];
    size_t n = wfx_records(&f, names[0], offs, 64);
    uint8_t hdr[12];
    char p[512];
    snprintf(p, sizeof p, "%s/%s", f.dir, names[0]);
    FILE *fp = fopen(p, "rb");
    cr_assert_not_null(fp);
    cr_assert_eq(fseek(fp, (long)offs[n - 1], SEEK_SET), 0);
    cr_assert_eq(fread(hdr, 1, 12, fp), 12);
    fclose(fp);
    uint64_t end =
        offs[n - 1] + 12 +
        ((uint32_t)hdr[4] << 24 | (uint32_t)hdr[5] << 16 | (uint32_t)hdr[6] << 8 | hdr[7]);
    uint8_t stray[16];
    memset(stray, 0xc3, sizeof stray);
    wfx_pwrite(&f, names[0], end + 50, stray, sizeof stray);

    wfx_open(&f, 1 << 20, 0);
    /* one record ending inside the stray bytes: 12 + 17 + 30 = 59 */
    uint8_t data[30];
    memset(data, 0x11, sizeof data);
    struct raft_entry e = {.term = 1, .index = 21, .data = data, .len = sizeof data};
    cr_assert_eq(kv_wal_append(f.w, &e, 1), 0);
    cr_assert_eq(kv_wal_sync(f.w), 0);
    wfx_open(&f, 1 << 20, 0);
    struct kv_wal_stats s;
    kv_wal_stats(f.w, &s);
    cr_assert_eq(s.torn_seq, 0, "stray bytes found after the records at %llu",
                 (unsigned long long)s.torn_off);
    check_bounds(&f, 1, 21);
    wfx_fini(&f);
}

Test(wal_recovery, corruption_before_the_tail_is_refused_with_segment_and_offset)
{
    wfx f;
    wfx_init(&f);
    wfx_open(&f, SEG, 0);
    write_batches(&f, 1, 151, 5, 1);
    wfx_close(&f);
    char names[64][64];
    size_t ns = wfx_segments(&f, names, 64);
    cr_assert_geq(ns, 3);
    for (size_t which = 0; which + 1 < ns; which += ns - 2) { /* the first, the one before last */
        uint64_t offs[256];
        size_t n = wfx_records(&f, names[which], offs, 256);
        cr_assert_geq(n, 4);
        uint64_t bad = offs[3];
        wfx_flip(&f, names[which], bad + 12 + 15); /* a byte of the entry's term */
        int rc = wfx_try_open(&f, SEG, 0);
        cr_assert_eq(rc, -EBADMSG, "opened a log corrupt in %s: %d", names[which], rc);
        cr_assert_null(f.w);
        char want[64];
        snprintf(want, sizeof want, "offset %llu:", (unsigned long long)bad);
        cr_assert_not_null(strstr(f.err, names[which]), "%s", f.err);
        cr_assert_not_null(strstr(f.err, want), "want '%s' in: %s", want, f.err);
        wfx_flip(&f, names[which], bad + 12 + 15); /* repaired: it opens again, whole */
        wfx_open(&f, SEG, 0);
        check_bounds(&f, 1, 150);
        wfx_check(&f, 1, 151, 1);
        wfx_close(&f);
    }
    wfx_fini(&f);
}

Test(wal_recovery, missing_segments_are_refused)
{
    wfx f;
    wfx_init(&f);
    wfx_open(&f, SEG, 0);
    write_batches(&f, 1, 151, 5, 1);
    wfx_close(&f);
    char names[64][64], p[512];
    size_t ns = wfx_segments(&f, names, 64);
    cr_assert_geq(ns, 3);
    /* a hole in the sequence */
    snprintf(p, sizeof p, "%s/%s", f.dir, names[1]);
    char keep[520];
    snprintf(keep, sizeof keep, "%s.keep", p);
    cr_assert_eq(rename(p, keep), 0);
    cr_assert_eq(wfx_try_open(&f, SEG, 0), -EBADMSG);
    cr_assert_not_null(strstr(f.err, "missing"), "%s", f.err);
    cr_assert_eq(rename(keep, p), 0);
    /* the first segment gone although no snapshot covers its entries */
    snprintf(p, sizeof p, "%s/%s", f.dir, names[0]);
    cr_assert_eq(unlink(p), 0);
    cr_assert_eq(wfx_try_open(&f, SEG, 0), -EBADMSG);
    cr_assert_not_null(strstr(f.err, "missing"), "%s", f.err);
    wfx_fini(&f);
}

Test(wal_recovery, torn_head_of_a_new_segment_is_rewritten_before_older_ones_go)
{
    wfx f;
    wfx_init(&f);
    wfx_open(&f, SEG, 0);
    struct raft_hard_state hs = {.term = 7, .vote = 3, .commit = 0};
    char names[64][64];
    size_t ns = 0;
    for (uint64_t i = 1;; i += 5) {
        hs.commit = i;
        cr_assert_eq(kv_wal_set_hard_state(f.w, &hs), 0);
        size_t before = wfx_segments(&f, names, 64);
        wfx_append(&f, i, i + 5, 7, 0);
        ns = wfx_segments(&f, names, 64);
        if (ns > before && ns >= 3)
            break; /* this batch started the last segment and is alone in it */
        cr_assert_lt(i, 2000);
    }
    wfx_close(&f);
    cr_assert_geq(ns, 3);
    uint64_t prev_max = wfx_max_index(&f, names[ns - 2]);
    /* the batch that started the last segment (alone in it) never reached the disk but for
     * stray later sectors: its first sector reads as zeros */
    wfx_zero(&f, names[ns - 1], 0, 512);
    wfx_open(&f, SEG, 0);
    check_bounds(&f, 1, prev_max);
    /* a snapshot covers it all; every older segment can go: the active one must then hold
     * the snapshot and the hard state by itself */
    struct raft_snapshot_meta m = {.index = prev_max, .term = 7};
    cr_assert_eq(kv_wal_set_snapshot(f.w, &m), 0);
    cr_assert_eq(kv_wal_sync(f.w), 0);
    cr_assert_eq(kv_wal_release(f.w, prev_max), (int)ns - 1);
    wfx_open(&f, SEG, 0);
    check_bounds(&f, prev_max + 1, prev_max);
    struct raft_hard_state got;
    const struct raft_storage *st = kv_wal_storage(f.w);
    cr_assert_eq(st->initial_state(st->ctx, &got), 0);
    cr_assert_eq(got.term, 7);
    cr_assert_eq(got.vote, 3);
    cr_assert_geq(got.commit, prev_max - 5);
    wfx_fini(&f);
}

/* A record header that reads as zeros in a segment that is not the last one (a block lost at
 * rest) must not end that segment quietly when bytes follow it: the entries after it would
 * vanish without an error whenever the later segments hold no entry to show the gap (here
 * the last one holds only its head and hard states). Refused, naming segment and offset. */
Test(wal_recovery, a_zero_header_before_the_last_segment_is_refused)
{
    wfx f;
    wfx_init(&f);
    wfx_open(&f, SEG, 0);
    write_batches(&f, 1, 51, 5, 1);
    struct kv_wal_stats s;
    kv_wal_stats(f.w, &s);
    uint64_t segs = s.segments;
    for (uint64_t t = 2; s.segments == segs; t++) { /* hard states until the next rotation */
        struct raft_hard_state hs = {.term = t, .vote = 1, .commit = 50};
        cr_assert_eq(kv_wal_set_hard_state(f.w, &hs), 0);
        cr_assert_eq(kv_wal_sync(f.w), 0);
        kv_wal_stats(f.w, &s);
        cr_assert_lt(t, 10000);
    }
    wfx_close(&f);
    char names[64][64];
    size_t ns = wfx_segments(&f, names, 64);
    cr_assert_geq(ns, 2);
    cr_assert_eq(wfx_max_index(&f, names[ns - 1]), 0, "the last segment holds entries");
    const char *victim = names[ns - 2];
    cr_assert_gt(wfx_max_index(&f, victim), 0);
    uint64_t offs[256];
    size_t n = wfx_records(&f, victim, offs, 256);
    uint64_t bad = 0;
    char p[512];
    snprintf(p, sizeof p, "%s/%s", f.dir, victim);
    FILE *fp = fopen(p, "rb");
    cr_assert_not_null(fp);
    for (size_t i = 1; i < n && !bad; i++) { /* the first entry after the segment's head */
        cr_assert_eq(fseek(fp, (long)offs[i], SEEK_SET), 0);
        if (fgetc(fp) == KV_WAL_REC_ENTRY)
            bad = offs[i];
    }
    fclose(fp);
    cr_assert_gt(bad, 0);
    wfx_zero(&f, victim, bad, bad + 12);
    int rc = wfx_try_open(&f, SEG, 0);
    cr_assert_eq(rc, -EBADMSG, "opened with the entries after offset %llu gone: %d",
                 (unsigned long long)bad, rc);
    char want[64];
    snprintf(want, sizeof want, "offset %llu:", (unsigned long long)bad);
    cr_assert_not_null(strstr(f.err, victim), "%s", f.err);
    cr_assert_not_null(strstr(f.err, want), "want '%s' in: %s", want, f.err);
    wfx_fini(&f);
}
