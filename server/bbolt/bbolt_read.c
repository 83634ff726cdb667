/*
 * bbolt_read: the checked bbolt reader (bbolt.h). Every length read from the file is checked
 * against the page (or the file) that holds it before use; tree depth is bounded and a walk
 * visits each page at most once per walk on average (a page-visit budget of the file's page
 * count), so a corrupt file that loops fails with -EBADMSG instead of running for ever.
 */
#include "bbolt/bbolt.h"

#include "common/byteorder.h"
#include "common/msgf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PH 16
#define EL 16
#define MAX_TREE_DEPTH 32

struct kv_bb_reader {
    int fd;
    int64_t len;
    uint32_t psz;
    uint64_t root, pgid, txid;
    uint64_t budget; /* page reads left in the outermost walk */
    int nest;        /* kv_bb_walk calls in progress (fn may walk another bucket) */
};

static int read_at(int fd, uint8_t *p, size_t n, int64_t off)
{
    while (n > 0) {
        ssize_t r = pread(fd, p, n, off);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (r == 0)
            return -EBADMSG;
        p += r;
        n -= (size_t)r;
        off += r;
    }
    return 0;
}

/* Meta at file offset off: 0 if valid (fills the fields), -EBADMSG otherwise. */
static int read_meta(int fd, int64_t len, int64_t off, uint32_t *psz, uint64_t *root,
                     uint64_t *pgid, uint64_t *txid)
{
    uint8_t m[PH + 64];
    if (off + (int64_t)sizeof m > len || read_at(fd, m, sizeof m, off) < 0)
        return -EBADMSG;
    if ((kv_le16(m + 8) & 0x04) == 0)
        return -EBADMSG;
    const uint8_t *b = m + PH;
    if (kv_le32(b) != 0xED0CDAEDu || kv_le32(b + 4) != 2)
        return -EBADMSG;
    uint64_t sum = kv_le64(b + 56);
    if (sum != 0 && sum != kv_bb_fnv64a(b, 56))
        return -EBADMSG;
    *psz = kv_le32(b + 8);
    *root = kv_le64(b + 16);
    *pgid = kv_le64(b + 40);
    *txid = kv_le64(b + 48);
    return 0;
}

int kv_bb_reader_open(kv_bb_reader **out, int fd, int64_t len, char *msg, size_t msglen)
{
    uint32_t psz[2] = {0, 0};
    uint64_t root[2], pgid[2], txid[2];
    int ok[2];
    ok[0] = read_meta(fd, len, 0, &psz[0], &root[0], &pgid[0], &txid[0]) == 0;
    /* page 1 sits one page size further: take it from meta 0, else try the usual sizes */
    ok[1] = 0;
    static const uint32_t sizes[] = {4096, 8192, 16384, 65536, 1024, 2048, 32768};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0] && !ok[1]; i++) {
        uint32_t s = ok[0] ? psz[0] : sizes[i];
        ok[1] = read_meta(fd, len, s, &psz[1], &root[1], &pgid[1], &txid[1]) == 0 && psz[1] == s;
        if (ok[0])
            break;
    }
    int pick = -1;
    for (int i = 0; i < 2; i++) {
        if (!ok[i])
            continue;
        uint32_t s = psz[i];
        if (s < 512 || s > 65536 || (s & (s - 1)) != 0) {
            ok[i] = 0;
            continue;
        }
        if (pick < 0 || txid[i] > txid[pick])
            pick = i;
    }
    if (pick < 0) {
        kv_msgf(msg, msglen,
                "not a bbolt database: no valid meta page (bad magic, version or checksum)");
        return -EBADMSG;
    }
    uint64_t need = pgid[pick] * (uint64_t)psz[pick];
    if (len % psz[pick] != 0) { /* bbolt files are whole pages (etcd's trailer is cut before) */
        kv_msgf(msg, msglen,
                "bbolt database is truncated or has trailing bytes: %lld bytes is not a "
                "whole number of %u-byte pages",
                (long long)len, psz[pick]);
        return -EBADMSG;
    }
    if (pgid[pick] < 3 || pgid[pick] > (uint64_t)len / psz[pick]) {
        kv_msgf(msg, msglen,
                "bbolt database is truncated: its meta page counts %llu pages of %u bytes "
                "(%llu bytes), the file holds %lld bytes",
                (unsigned long long)pgid[pick], psz[pick], (unsigned long long)need,
                (long long)len);
        return -EBADMSG;
    }
    if (root[pick] < 2 || root[pick] >= pgid[pick]) {
        kv_msgf(msg, msglen, "bbolt meta page: root page %llu out of range",
                (unsigned long long)root[pick]);
        return -EBADMSG;
    }
    kv_bb_reader *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return -ENOMEM;
    r->fd = fd;
    r->len = len;
    r->psz = psz[pick];
    r->root = root[pick];
    r->pgid = pgid[pick];
    r->txid = txid[pick];
    *out = r;
    return 0;
}

void kv_bb_reader_free(kv_bb_reader *r)
{
    free(r);
}

uint32_t kv_bb_page_size(const kv_bb_reader *r)
{
    return r->psz;
}

uint64_t kv_bb_pages(const kv_bb_reader *r)
{
    return r->pgid;
}

/* Reads page id (with its overflow) into a malloc'd buffer. */
static int read_page(kv_bb_reader *r, uint64_t id, uint8_t **out, size_t *outlen, char *msg,
                     size_t msglen)
{
    if (r->budget == 0) {
        kv_msgf(msg, msglen, "bbolt database is corrupt: its tree visits more pages than it has");
        return -EBADMSG;
    }
    r->budget--;
    if (id < 2 || id >= r->pgid) {
        kv_msgf(msg, msglen, "bbolt database is corrupt: a branch points to page %llu of %llu",
                (unsigned long long)id, (unsigned long long)r->pgid);
        return -EBADMSG;
    }
    uint8_t h[PH];
    int64_t off = (int64_t)id * r->psz;
    int rc = read_at(r->fd, h, PH, off);
    if (rc)
        goto io;
    uint64_t ov = kv_le32(h + 12);
    if (kv_le64(h) != id || id + 1 + ov > r->pgid) {
        kv_msgf(msg, msglen, "bbolt database is corrupt: page %llu has a bad header",
                (unsigned long long)id);
        return -EBADMSG;
    }
    size_t n = (size_t)(1 + ov) * r->psz;
    uint8_t *p = malloc(n);
    if (p == NULL)
        return -ENOMEM;
    rc = read_at(r->fd, p, n, off);
    if (rc) {
        free(p);
        goto io;
    }
    *out = p;
    *outlen = n;
    return 0;
io:
    if (rc == -EBADMSG)
        kv_msgf(msg, msglen, "bbolt database is truncated at page %llu", (unsigned long long)id);
    else
        kv_msgf(msg, msglen, "read: %s", strerror(-rc));
    return rc;
}

static int walk_pgid(kv_bb_reader *r, uint64_t id, int depth, kv_bb_visit_fn fn, void *arg,
                     char *msg, size_t msglen);

/* Walks the elements of one page image (a file page or an inline page). */
static int walk_mem(kv_bb_reader *r, const uint8_t *p, size_t n, int depth, kv_bb_visit_fn fn,
                    void *arg, char *msg, size_t msglen)
{
    if (n < PH)
        goto bad;
    uint16_t flags = kv_le16(p + 8), count = kv_le16(p + 10);
    if ((uint64_t)PH + (uint64_t)count * EL > n)
        goto bad;
    if (flags & 0x02) {
        for (uint32_t i = 0; i < count; i++) {
            const uint8_t *e = p + PH + (size_t)i * EL;
            uint64_t start = (uint64_t)(PH + (size_t)i * EL) + kv_le32(e + 4);
            uint64_t kl = kv_le32(e + 8), vl = kv_le32(e + 12);
            if (start + kl + vl > n)
                goto bad;
            int rc = fn(arg, p + start, (size_t)kl, p + start + kl, (size_t)vl,
                        (kv_le32(e) & 0x01) != 0);
            if (rc)
                return rc;
        }
        return 0;
    }
    if (flags & 0x01) {
        if (depth >= MAX_TREE_DEPTH) {
            kv_msgf(msg, msglen, "bbolt database is corrupt: tree deeper than %d", MAX_TREE_DEPTH);
            return -EBADMSG;
        }
        for (uint32_t i = 0; i < count; i++) {
            const uint8_t *e = p + PH + (size_t)i * EL;
            uint64_t start = (uint64_t)(PH + (size_t)i * EL) + kv_le32(e);
            if (start + kv_le32(e + 4) > n)
                goto bad;
            int rc = walk_pgid(r, kv_le64(e + 8), depth + 1, fn, arg, msg, msglen);
            if (rc)
                return rc;
        }
        return 0;
    }
bad:
    kv_msgf(msg, msglen, "bbolt database is corrupt: a page (id %llu) has bad elements or flags",
            n >= 8 ? (unsigned long long)kv_le64(p) : 0ULL);
    return -EBADMSG;
}

static int walk_pgid(kv_bb_reader *r, uint64_t id, int depth, kv_bb_visit_fn fn, void *arg,
                     char *msg, size_t msglen)
{
    uint8_t *p = NULL;
    size_t n = 0;
    int rc = read_page(r, id, &p, &n, msg, msglen);
    if (rc)
        return rc;
    rc = walk_mem(r, p, n, depth, fn, arg, msg, msglen);
    free(p);
    return rc;
}

typedef struct finder {
    const char *name;
    size_t nlen;
    uint8_t *val; /* copy of the bucket value */
    size_t vlen;
    int found, not_bucket;
} finder;

static int find_fn(void *arg, const uint8_t *key, size_t klen, const uint8_t *val, size_t vlen,
                   int is_bucket)
{
    finder *f = arg;
    if (klen != f->nlen || memcmp(key, f->name, klen) != 0)
        return 0;
    if (!is_bucket || vlen < 16) {
        f->not_bucket = 1;
        return 1;
    }
    f->val = malloc(vlen);
    if (f->val == NULL)
        return -ENOMEM;
    memcpy(f->val, val, vlen);
    f->vlen = vlen;
    f->found = 1;
    return 1;
}

/* Walks the bucket whose value (header + inline page) is v. */
static int walk_bucket(kv_bb_reader *r, const uint8_t *v, size_t vlen, kv_bb_visit_fn fn, void *arg,
                       char *msg, size_t msglen)
{
    uint64_t root = kv_le64(v);
    if (root == 0)
        return walk_mem(r, v + 16, vlen - 16, 0, fn, arg, msg, msglen);
    return walk_pgid(r, root, 0, fn, arg, msg, msglen);
}

int kv_bb_walk(kv_bb_reader *r, const char *const *path, size_t n, kv_bb_visit_fn fn, void *arg,
               char *msg, size_t msglen)
{
    uint8_t hdr[16] = {0};
    uint8_t *cur = hdr;
    size_t curlen = 16;
    kv_put_le64(hdr, r->root);
    int rc = 0;
    /* one budget per outermost walk (twice the file's pages: finding a nested bucket reads its
     * parent again); a nested walk draws from it */
    if (r->nest++ == 0)
        r->budget = 2 * r->pgid + 1024;
    for (size_t i = 0; i <= n; i++) {
        if (i == n) {
            rc = walk_bucket(r, cur, curlen, fn, arg, msg, msglen);
            break;
        }
        finder f = {.name = path[i], .nlen = strlen(path[i])};
        rc = walk_bucket(r, cur, curlen, find_fn, &f, msg, msglen);
        if (cur != hdr)
            free(cur);
        cur = hdr;
        if (rc < 0) {
            free(f.val);
            break;
        }
        rc = 0;
        if (!f.found) {
            kv_msgf(msg, msglen, "bbolt database has no bucket \"%s\"", path[i]);
            rc = -ENOENT;
            break;
        }
        cur = f.val;
        curlen = f.vlen;
    }
    if (cur != hdr)
        free(cur);
    r->nest--;
    return rc;
}
