/*
 * test_bbolt: the bbolt writer and reader (server/bbolt/bbolt.h).
 *  - round_trip: nested buckets, an empty bucket, 30,000 keys over several branch levels and
 *    values larger than a page (overflow pages) read back in order, every page in use (file
 *    size = meta page count x page size), both metas with a valid FNV-1a checksum;
 *  - order_is_enforced: keys and bucket names out of order are refused;
 *  - damage_is_refused: a truncated file, a bad meta checksum, a damaged page header and a
 *    branch that points to itself give -EBADMSG with a message (no crash, no endless walk);
 *  - etcdctl_reads_it: etcdctl 3.4 `snapshot status` accepts a file the writer made with
 *    etcd's buckets and prints the revision, key count and hash kvctl's status computes.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bbolt/bbolt.h"
#include "mvcc/snapshot.h"

static int tmpfile_fd(char *path, size_t len)
{
    snprintf(path, len, "/tmp/test_bbolt.XXXXXX");
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    return fd;
}

static void val_of(size_t i, char *buf, size_t *len)
{
    size_t n = (i % 97 == 0) ? 9000 + i % 5000 : 1 + i % 60; /* some overflow pages */
    for (size_t k = 0; k < n; k++)
        buf[k] = (char)('a' + (i + k) % 26);
    *len = n;
}

typedef struct check {
    size_t next, n;
    int bucket_seen;
} check;

static int check_fn(void *arg, const uint8_t *k, size_t kl, const uint8_t *v, size_t vl,
                    int is_bucket)
{
    check *c = arg;
    char want[32], wv[16000];
    size_t wl;
    cr_assert(!is_bucket);
    snprintf(want, sizeof want, "key%08zu", c->next);
    cr_assert(kl == strlen(want) && memcmp(k, want, kl) == 0, "key %zu: %.*s", c->next, (int)kl,
              (const char *)k);
    val_of(c->next, wv, &wl);
    cr_assert(vl == wl && memcmp(v, wv, vl) == 0, "value of key %zu", c->next);
    c->next++;
    return 0;
}

static int count_fn(void *arg, const uint8_t *k, size_t kl, const uint8_t *v, size_t vl,
                    int is_bucket)
{
    (void)k, (void)kl, (void)v, (void)vl;
    check *c = arg;
    c->n++;
    c->bucket_seen += is_bucket;
    return 0;
}

static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static void write_sample(int fd, size_t nkeys, int64_t *size)
{
    kv_bb_writer *w;
    cr_assert_eq(kv_bb_writer_new(&w, fd), 0);
    cr_assert_eq(kv_bb_bucket_begin(w, "empty", 5), 0);
    cr_assert_eq(kv_bb_bucket_end(w), 0);
    cr_assert_eq(kv_bb_bucket_begin(w, "outer", 5), 0);
    cr_assert_eq(kv_bb_put(w, "a", 1, "1", 1), 0);
    cr_assert_eq(kv_bb_bucket_begin(w, "inner", 5), 0);
    static char v[16000];
    for (size_t i = 0; i < nkeys; i++) {
        char k[32];
        size_t vl;
        snprintf(k, sizeof k, "key%08zu", i);
        val_of(i, v, &vl);
        cr_assert_eq(kv_bb_put(w, k, strlen(k), v, vl), 0);
    }
    cr_assert_eq(kv_bb_bucket_end(w), 0);
    cr_assert_eq(kv_bb_put(w, "z", 1, "", 0), 0);
    cr_assert_eq(kv_bb_bucket_end(w), 0);
    cr_assert_eq(kv_bb_writer_finish(w, size), 0);
    kv_bb_writer_free(w);
}

Test(bbolt, round_trip)
{
    char path[64];
    int fd = tmpfile_fd(path, sizeof path);
    int64_t size = 0;
    write_sample(fd, 30000, &size);
    cr_assert_eq(lseek(fd, 0, SEEK_END), size);
    uint8_t m[2][4096];
    cr_assert_eq(pread(fd, m[0], 4096, 0), 4096);
    cr_assert_eq(pread(fd, m[1], 4096, 4096), 4096);
    for (int i = 0; i < 2; i++) {
        const uint8_t *b = m[i] + 16;
        cr_assert_eq(le64(b + 56), kv_bb_fnv64a(b, 56), "meta %d checksum", i);
        cr_assert_eq(le64(b + 40) * 4096, (uint64_t)size, "meta %d page count", i);
    }
    kv_bb_reader *r;
    char msg[256];
    cr_assert_eq(kv_bb_reader_open(&r, fd, size, msg, sizeof msg), 0, "%s", msg);
    check c = {0};
    const char *inner[] = {"outer", "inner"};
    cr_assert_eq(kv_bb_walk(r, inner, 2, check_fn, &c, msg, sizeof msg), 0, "%s", msg);
    cr_assert_eq(c.next, 30000);
    check top = {0}, outer = {0}, empty = {0};
    cr_assert_eq(kv_bb_walk(r, NULL, 0, count_fn, &top, msg, sizeof msg), 0, "%s", msg);
    cr_assert_eq(top.n, 2);
    cr_assert_eq(top.bucket_seen, 2);
    const char *o[] = {"outer"}, *e[] = {"empty"}, *none[] = {"nope"};
    cr_assert_eq(kv_bb_walk(r, o, 1, count_fn, &outer, msg, sizeof msg), 0, "%s", msg);
    cr_assert_eq(outer.n, 3);
    cr_assert_eq(outer.bucket_seen, 1);
    cr_assert_eq(kv_bb_walk(r, e, 1, count_fn, &empty, msg, sizeof msg), 0, "%s", msg);
    cr_assert_eq(empty.n, 0);
    cr_assert_eq(kv_bb_walk(r, none, 1, count_fn, &empty, msg, sizeof msg), -ENOENT);
    kv_bb_reader_free(r);
    close(fd);
    unlink(path);
}

Test(bbolt, order_is_enforced)
{
    char path[64];
    int fd = tmpfile_fd(path, sizeof path);
    kv_bb_writer *w;
    cr_assert_eq(kv_bb_writer_new(&w, fd), 0);
    cr_assert_eq(kv_bb_bucket_begin(w, "b", 1), 0);
    cr_assert_eq(kv_bb_put(w, "k2", 2, "v", 1), 0);
    cr_assert_eq(kv_bb_put(w, "k1", 2, "v", 1), -EINVAL);
    cr_assert_eq(kv_bb_put(w, "k2", 2, "v", 1), -EINVAL);
    cr_assert_eq(kv_bb_put(w, "", 0, "v", 1), -EINVAL);
    cr_assert_eq(kv_bb_put(w, "k3", 2, "v", 1), 0);
    cr_assert_eq(kv_bb_bucket_end(w), 0);
    cr_assert_eq(kv_bb_bucket_begin(w, "a", 1), -EINVAL);
    cr_assert_eq(kv_bb_writer_finish(w, &(int64_t){0}), 0);
    kv_bb_writer_free(w);
    close(fd);
    unlink(path);
}

static int walk_all(int fd, int64_t len, char *msg, size_t ml)
{
    kv_bb_reader *r;
    int rc = kv_bb_reader_open(&r, fd, len, msg, ml);
    if (rc)
        return rc;
    check c = {0};
    const char *inner[] = {"outer", "inner"};
    rc = kv_bb_walk(r, inner, 2, count_fn, &c, msg, ml);
    kv_bb_reader_free(r);
    return rc;
}

Test(bbolt, damage_is_refused)
{
    char path[64];
    int fd = tmpfile_fd(path, sizeof path);
    int64_t size = 0;
    write_sample(fd, 3000, &size);
    char msg[256] = "";
    cr_assert_eq(walk_all(fd, size, msg, sizeof msg), 0, "%s", msg);
    /* truncated: a page short, and not a whole number of pages */
    cr_assert_eq(walk_all(fd, size - 4096, msg, sizeof msg), -EBADMSG);
    cr_assert_not_null(strstr(msg, "truncated"), "%s", msg);
    cr_assert_eq(walk_all(fd, size - 100, msg, sizeof msg), -EBADMSG);
    /* both metas with a bad checksum */
    uint8_t save[2];
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(pread(fd, &save[i], 1, i * 4096 + 16 + 20), 1);
        uint8_t x = save[i] ^ 0x40;
        cr_assert_eq(pwrite(fd, &x, 1, i * 4096 + 16 + 20), 1);
    }
    msg[0] = 0;
    cr_assert_eq(walk_all(fd, size, msg, sizeof msg), -EBADMSG);
    cr_assert_not_null(strstr(msg, "meta"), "%s", msg);
    for (int i = 0; i < 2; i++)
        cr_assert_eq(pwrite(fd, &save[i], 1, i * 4096 + 16 + 20), 1);
    cr_assert_eq(walk_all(fd, size, msg, sizeof msg), 0, "%s", msg);
    /* every data page in turn: a bad element count, then a branch to itself */
    int64_t pages = size / 4096;
    int refused = 0, loops = 0;
    for (int64_t pg = 3; pg < pages; pg++) {
        uint8_t h[16];
        cr_assert_eq(pread(fd, h, 16, pg * 4096), 16);
        if (le64(h) != (uint64_t)pg)
            continue; /* an overflow page */
        uint8_t bad[2] = {0xff, 0xff};
        cr_assert_eq(pwrite(fd, bad, 2, pg * 4096 + 10), 2);
        int rc = walk_all(fd, size, msg, sizeof msg);
        cr_assert_eq(pwrite(fd, h + 10, 2, pg * 4096 + 10), 2);
        if (rc == -EBADMSG)
            refused++;
        else
            cr_assert_eq(rc, 0);
        if (h[8] == 0x01) { /* branch: first child = itself */
            uint8_t e[8];
            for (int i = 0; i < 8; i++)
                e[i] = (uint8_t)((uint64_t)pg >> (8 * i));
            uint8_t old[8];
            cr_assert_eq(pread(fd, old, 8, pg * 4096 + 16 + 8), 8);
            cr_assert_eq(pwrite(fd, e, 8, pg * 4096 + 16 + 8), 8);
            rc = walk_all(fd, size, msg, sizeof msg);
            cr_assert_eq(pwrite(fd, old, 8, pg * 4096 + 16 + 8), 8);
            if (rc == -EBADMSG)
                loops++;
        }
    }
    cr_assert_gt(refused, 10, "damaged pages refused: %d", refused);
    cr_assert_gt(loops, 0, "a branch to itself was walked");
    cr_assert_eq(walk_all(fd, size, msg, sizeof msg), 0, "%s", msg);
    close(fd);
    unlink(path);
}

static void be64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t)v;
}

/* A packed mvccpb.KeyValue{key, create_revision, mod_revision, version, value}. */
static size_t kv_pack(uint8_t *o, const char *k, int64_t rev, const char *v)
{
    size_t n = 0, kl = strlen(k), vl = strlen(v);
    o[n++] = 0x0a;
    o[n++] = (uint8_t)kl;
    memcpy(o + n, k, kl), n += kl;
    o[n++] = 0x10, o[n++] = (uint8_t)rev; /* rev < 128 */
    o[n++] = 0x18, o[n++] = (uint8_t)rev;
    o[n++] = 0x20, o[n++] = 1;
    o[n++] = 0x2a;
    o[n++] = (uint8_t)vl;
    memcpy(o + n, v, vl), n += vl;
    return n;
}

Test(bbolt, etcdctl_reads_it, .timeout = 60)
{
    char path[64];
    int fd = tmpfile_fd(path, sizeof path);
    kv_bb_writer *w;
    cr_assert_eq(kv_bb_writer_new(&w, fd), 0);
    cr_assert_eq(kv_bb_bucket_begin(w, "key", 3), 0);
    for (int64_t rev = 2; rev < 100; rev++) {
        uint8_t k[17], v[128];
        char key[16], val[16];
        be64(k, (uint64_t)rev);
        k[8] = '_';
        be64(k + 9, 0);
        snprintf(key, sizeof key, "k%03d", (int)rev);
        snprintf(val, sizeof val, "v%d", (int)rev);
        cr_assert_eq(kv_bb_put(w, k, 17, v, kv_pack(v, key, rev, val)), 0);
    }
    cr_assert_eq(kv_bb_bucket_end(w), 0);
    uint8_t ci[8];
    be64(ci, 120);
    cr_assert_eq(kv_bb_bucket_begin(w, "meta", 4), 0);
    cr_assert_eq(kv_bb_put(w, "consistent_index", 16, ci, 8), 0);
    cr_assert_eq(kv_bb_bucket_end(w), 0);
    int64_t size;
    cr_assert_eq(kv_bb_writer_finish(w, &size), 0);
    kv_bb_writer_free(w);
    close(fd);
    char cmd[256], out[1024] = "";
    snprintf(cmd, sizeof cmd, "etcdctl snapshot status -w json %s 2>&1", path);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = 0;
    int st = pclose(p);
    cr_assert_eq(st, 0, "etcdctl snapshot status: %s", out);
    kv_snapshot_status s;
    char msg[256];
    cr_assert_eq(kv_bbolt_snapshot_status(path, size, &s, msg, sizeof msg), 0, "%s", msg);
    char want[256];
    snprintf(want, sizeof want, "{\"hash\":%u,\"revision\":99,\"totalKey\":99,\"totalSize\":%lld}",
             s.hash, (long long)size);
    cr_assert(strncmp(out, want, strlen(want)) == 0, "etcdctl: %s, kvctl's: %s", out, want);
    unlink(path);
}
