/* Test fixture for the WAL: see wal_fx.h. */
#include "wal_fx.h"
#include "kvt_util.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void wfx_init(wfx *f)
{
    kvt_tmpdir d;
    memset(f, 0, sizeof *f);
    int rc = kvt_tmpdir_create(&d, "kvwal");
    cr_assert_eq(rc, 0, "kvt_tmpdir_create: %d", rc);
    cr_assert_lt(strlen(d.path), sizeof f->root, "temp dir path too long: %s", d.path);
    snprintf(f->root, sizeof f->root, "%s", d.path);
    snprintf(f->dir, sizeof f->dir, "%s/wal", f->root);
}

void wfx_fini(wfx *f)
{
    kvt_tmpdir d;
    wfx_close(f);
    snprintf(d.path, sizeof d.path, "%s", f->root);
    kvt_tmpdir_destroy(&d); /* kept with KV_TEST_KEEP_DIRS=1 */
}

int wfx_try_open(wfx *f, uint64_t seg_bytes, size_t tail_bytes)
{
    struct kv_wal_opts o = {.segment_bytes = seg_bytes, .tail_bytes = tail_bytes};
    wfx_close(f);
    return kv_wal_open(&f->w, f->dir, &o, f->err, sizeof f->err);
}

void wfx_open(wfx *f, uint64_t seg_bytes, size_t tail_bytes)
{
    int rc = wfx_try_open(f, seg_bytes, tail_bytes);
    cr_assert_eq(rc, 0, "open: %d %s", rc, f->err);
}

void wfx_close(wfx *f)
{
    kv_wal_close(f->w);
    f->w = NULL;
}

size_t wfx_len(uint64_t index, uint64_t term)
{
    return (size_t)((index * 7 + term * 13) % 150);
}

void wfx_fill(uint8_t *buf, uint64_t index, uint64_t term)
{
    size_t n = wfx_len(index, term);
    for (size_t k = 0; k < n; k++)
        buf[k] = (uint8_t)(index * 31 + term * 17 + k);
}

void wfx_append(wfx *f, uint64_t lo, uint64_t hi, uint64_t term, uint64_t conf_every)
{
    static uint8_t bufs[64][160];
    struct raft_entry e[64];
    cr_assert(hi - lo <= 64);
    for (uint64_t i = lo; i < hi; i++) {
        uint8_t *b = bufs[i - lo];
        wfx_fill(b, i, term);
        e[i - lo] = (struct raft_entry){
            .term = term,
            .index = i,
            .type = (conf_every && i % conf_every == 0) ? RAFT_ENTRY_CONF : RAFT_ENTRY_NORMAL,
            .data = b,
            .len = wfx_len(i, term)};
    }
    cr_assert_eq(kv_wal_append(f->w, e, hi - lo), 0);
    cr_assert_eq(kv_wal_sync(f->w), 0);
}

void wfx_check(wfx *f, uint64_t lo, uint64_t hi, uint64_t term)
{
    const struct raft_storage *st = kv_wal_storage(f->w);
    uint8_t want[160];
    for (uint64_t i = lo; i < hi; i++) {
        struct raft_entry e;
        size_t n = 0;
        raft_term t = 0;
        cr_assert_eq(st->term(st->ctx, i, &t), 0, "term(%llu)", (unsigned long long)i);
        cr_assert_eq(t, term, "term(%llu)", (unsigned long long)i);
        cr_assert_eq(st->entries(st->ctx, i, i + 1, 1 << 20, &e, &n), 0);
        cr_assert_eq(n, 1);
        cr_assert_eq(e.index, i);
        cr_assert_eq(e.term, term);
        wfx_fill(want, i, term);
        cr_assert_eq(e.len, wfx_len(i, term), "len of %llu", (unsigned long long)i);
        cr_assert(e.len == 0 || memcmp(e.data, want, e.len) == 0, "data of %llu",
                  (unsigned long long)i);
    }
    kv_wal_end_cycle(f->w);
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(a, b);
}

size_t wfx_segments(wfx *f, char names[][64], size_t max)
{
    DIR *d = opendir(f->dir);
    cr_assert_not_null(d);
    size_t n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        if (strlen(de->d_name) == 37 && strstr(de->d_name, ".wal") && n < max)
            snprintf(names[n++], 64, "%s", de->d_name);
    closedir(d);
    qsort(names, n, 64, cmp_name);
    return n;
}

static int open_seg(wfx *f, const char *name, int flags)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", f->dir, name);
    int fd = open(p, flags);
    cr_assert(fd >= 0, "open %s", p);
    return fd;
}

size_t wfx_records(wfx *f, const char *name, uint64_t *offs, size_t max)
{
    int fd = open_seg(f, name, O_RDONLY);
    uint64_t off = 0;
    size_t n = 0;
    for (;;) {
        uint8_t h[12];
        if (pread(fd, h, 12, (off_t)off) != 12)
            break;
        static const uint8_t zero[12];
        if (!memcmp(h, zero, 12))
            break;
        uint32_t len = (uint32_t)h[4] << 24 | (uint32_t)h[5] << 16 | (uint32_t)h[6] << 8 | h[7];
        if (n < max)
            offs[n] = off;
        n++;
        off += 12 + len;
    }
    close(fd);
    return n < max ? n : max;
}

uint64_t wfx_max_index(wfx *f, const char *name)
{
    uint64_t offs[4096], max = 0;
    size_t n = wfx_records(f, name, offs, 4096);
    int fd = open_seg(f, name, O_RDONLY);
    for (size_t k = 0; k < n; k++) {
        uint8_t b[12 + 8];
        cr_assert_eq(pread(fd, b, sizeof b, (off_t)offs[k]), (ssize_t)sizeof b);
        if (b[0] != KV_WAL_REC_ENTRY)
            continue;
        uint64_t idx = 0;
        for (int i = 0; i < 8; i++)
            idx = idx << 8 | b[12 + i];
        if (idx > max)
            max = idx;
    }
    close(fd);
    return max;
}

void wfx_zero(wfx *f, const char *name, uint64_t off, uint64_t end)
{
    static const uint8_t zero[4096];
    int fd = open_seg(f, name, O_RDWR);
    while (off < end) {
        size_t n = end - off < sizeof zero ? (size_t)(end - off) : sizeof zero;
        cr_assert_eq(pwrite(fd, zero, n, (off_t)off), (ssize_t)n);
        off += n;
    }
    close(fd);
}

uint64_t wfx_tear(wfx *f, const char *name, uint64_t off)
{
    int fd = open_seg(f, name, O_RDONLY);
    uint8_t h[12];
    cr_assert_eq(pread(fd, h, 12, (off_t)off), 12);
    close(fd);
    uint64_t end =
        off + 12 + ((uint32_t)h[4] << 24 | (uint32_t)h[5] << 16 | (uint32_t)h[6] << 8 | h[7]);
    uint64_t b = ((off + 12) / 512 + 1) * 512;
    cr_assert_lt(b, end, "record at %llu (to %llu) crosses no sector boundary",
                 (unsigned long long)off, (unsigned long long)end);
    wfx_zero(f, name, b, end);
    return b;
}

void wfx_flip(wfx *f, const char *name, uint64_t off)
{
    int fd = open_seg(f, name, O_RDWR);
    uint8_t b;
    cr_assert_eq(pread(fd, &b, 1, (off_t)off), 1);
    b ^= 0x5a;
    cr_assert_eq(pwrite(fd, &b, 1, (off_t)off), 1);
    close(fd);
}

void wfx_pwrite(wfx *f, const char *name, uint64_t off, const void *buf, size_t len)
{
    int fd = open_seg(f, name, O_RDWR);
    cr_assert_eq(pwrite(fd, buf, len, (off_t)off), (ssize_t)len);
    close(fd);
}
