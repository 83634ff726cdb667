/*
 * bbolt_write: the bulk-loading bbolt writer (bbolt.h).
 *
 * Each open bucket has one "level" per tree level: level 0 collects leaf elements, level i
 * branch elements pointing at the pages of level i - 1. A level whose elements would pass
 * the page size writes its page (pages get consecutive ids from 3 on: 0 and 1 are the metas,
 * 2 the empty freelist) and hands (first key, page id) to the level above. Closing a bucket
 * writes what its levels hold bottom-up until one page is left: the bucket's root.
 */
#include "bbolt/bbolt.h"
#include "common/fnv.h"

#include "common/byteorder.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PH 16 /* page header */
#define EL 16 /* leaf or branch element */
#define META_LEN 64
#define F_BRANCH 0x01
#define F_LEAF 0x02
#define F_META 0x04
#define F_FREELIST 0x10
#define F_BUCKET 0x01
#define MAX_LEVELS 16

typedef struct level {
    /* elements: u32 flags | u32 klen | u64 vlen-or-pgid | key | value, packed */
    uint8_t *buf;
    size_t len, cap;
    uint32_t count;
    size_t bytes;   /* page bytes the elements take: EL + key + value each */
    uint64_t pages; /* pages this level wrote */
} level;

typedef struct bucket {
    level lv[MAX_LEVELS];
    uint8_t *last; /* last key put (for order checks) */
    size_t last_len, last_cap;
    int have_last;
    uint8_t *name; /* in the parent */
    size_t name_len;
} bucket;

struct kv_bb_writer {
    int fd;
    uint32_t psz;
    uint64_t next_pgid;
    uint8_t *wbuf;
    size_t wlen;
    int64_t woff; /* file offset of wbuf[0] */
    bucket stack[KV_BB_MAX_DEPTH + 1];
    int depth; /* open buckets; stack[0] = root */
    uint64_t root_pgid;
    uint8_t *page; /* assembly buffer for one page (grows for overflow) */
    size_t page_cap;
    int failed;
};

uint64_t kv_bb_fnv64a(const void *p, size_t n)
{
    return kv_fnv1a64(p, n); /* bbolt's meta checksum: FNV-1a 64 */
}

static int grow(uint8_t **buf, size_t *cap, size_t need)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap : 4096;
    while (n < need)
        n *= 2;
    uint8_t *p = realloc(*buf, n);
    if (p == NULL)
        return -ENOMEM;
    *buf = p;
    *cap = n;
    return 0;
}

static int write_all(int fd, const uint8_t *p, size_t n, int64_t off)
{
    while (n > 0) {
        ssize_t r = pwrite(fd, p, n, off);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (r == 0)
            return -EIO;
        p += r;
        n -= (size_t)r;
        off += r;
    }
    return 0;
}

static int wflush(kv_bb_writer *w)
{
    int rc = write_all(w->fd, w->wbuf, w->wlen, w->woff);
    w->woff += (int64_t)w->wlen;
    w->wlen = 0;
    return rc;
}

/* Appends npages pages from p (already the right size) at the end of the file. */
static int emit(kv_bb_writer *w, const uint8_t *p, size_t n)
{
    if (w->wlen + n > KV_BB_WBUF) {
        int rc = wflush(w);
        if (rc)
            return rc;
    }
    if (n > KV_BB_WBUF) /* one element larger than the buffer: straight to the file */
    {
        int rc = write_all(w->fd, p, n, w->woff);
        w->woff += (int64_t)n;
        return rc;
    }
    memcpy(w->wbuf + w->wlen, p, n);
    w->wlen += n;
    return 0;
}

int kv_bb_writer_new(kv_bb_writer **out, int fd)
{
    kv_bb_writer *w = calloc(1, sizeof(*w));
    if (w == NULL)
        return -ENOMEM;
    w->fd = fd;
    w->psz = KV_BB_PAGE_SIZE;
    w->next_pgid = 3;
    w->woff = 3 * (int64_t)w->psz;
    w->wbuf = malloc(KV_BB_WBUF);
    if (w->wbuf == NULL) {
        free(w);
        return -ENOMEM;
    }
    w->depth = 1; /* the root bucket */
    *out = w;
    return 0;
}

static void bucket_free(bucket *b)
{
    for (int i = 0; i < MAX_LEVELS; i++)
        free(b->lv[i].buf);
    free(b->last);
    free(b->name);
    memset(b, 0, sizeof(*b));
}

void kv_bb_writer_free(kv_bb_writer *w)
{
    if (w == NULL)
        return;
    for (int i = 0; i <= KV_BB_MAX_DEPTH; i++)
        bucket_free(&w->stack[i]);
    free(w->wbuf);
    free(w->page);
    free(w);
}

static int keycmp(const uint8_t *a, size_t al, const uint8_t *b, size_t bl)
{
    int c = memcmp(a, b, al < bl ? al : bl);
    if (c)
        return c;
    return al < bl ? -1 : al > bl ? 1 : 0;
}

static int check_order(bucket *b, const void *key, size_t klen)
{
    if (klen == 0 || klen > KV_BB_MAX_KEY)
        return -EINVAL;
    if (b->have_last && keycmp(b->last, b->last_len, key, klen) >= 0)
        return -EINVAL;
    if (grow(&b->last, &b->last_cap, klen) < 0)
        return -ENOMEM;
    memcpy(b->last, key, klen);
    b->last_len = klen;
    b->have_last = 1;
    return 0;
}

static int level_add(kv_bb_writer *w, bucket *b, int li, uint32_t flags, const uint8_t *key,
                     size_t klen, const uint8_t *val, size_t vlen, uint64_t pgid);

/* Writes level li's elements as one page (with overflow pages when one element is larger
 * than a page) and hands it to level li + 1. */
static int level_flush(kv_bb_writer *w, bucket *b, int li)
{
    level *l = &b->lv[li];
    size_t size = PH + l->bytes;
    size_t npages = (size + w->psz - 1) / w->psz;
    if (npages == 0)
        npages = 1;
    size_t total = npages * w->psz;
    if (grow(&w->page, &w->page_cap, total) < 0)
        return -ENOMEM;
    uint8_t *p = w->page;
    memset(p, 0, total);
    uint64_t id = w->next_pgid;
    kv_put_le64(p, id);
    kv_put_le16(p + 8, li == 0 ? F_LEAF : F_BRANCH);
    kv_put_le16(p + 10, (uint16_t)l->count);
    kv_put_le32(p + 12, (uint32_t)(npages - 1));
    size_t data = PH + (size_t)l->count * EL;
    const uint8_t *e = l->buf;
    const uint8_t *first_key = NULL;
    size_t first_len = 0;
    for (uint32_t i = 0; i < l->count; i++) {
        uint32_t fl = kv_le32(e);
        uint32_t kl = kv_le32(e + 4);
        uint64_t v = kv_le64(e + 8);
        const uint8_t *k = e + 16;
        uint8_t *el = p + PH + (size_t)i * EL;
        uint32_t pos = (uint32_t)(data - (PH + (size_t)i * EL));
        if (i == 0) {
            first_key = k;
            first_len = kl;
        }
        if (li == 0) {
            kv_put_le32(el, fl);
            kv_put_le32(el + 4, pos);
            kv_put_le32(el + 8, kl);
            kv_put_le32(el + 12, (uint32_t)v);
            memcpy(p + data, k, kl);
            memcpy(p + data + kl, k + kl, (size_t)v);
            data += kl + (size_t)v;
            e += 16 + kl + (size_t)v;
        } else {
            kv_put_le32(el, pos);
            kv_put_le32(el + 4, kl);
            kv_put_le64(el + 8, v);
            memcpy(p + data, k, kl);
            data += kl;
            e += 16 + kl;
        }
    }
    w->next_pgid += npages;
    l->pages++;
    /* the first key goes up; copy it before the level's buffer is reused */
    uint8_t stackkey[256];
    uint8_t *fk = stackkey;
    if (first_len > sizeof stackkey && (fk = malloc(first_len)) == NULL)
        return -ENOMEM;
    if (first_len)
        memcpy(fk, first_key, first_len);
    l->len = 0;
    l->count = 0;
    l->bytes = 0;
    int rc = emit(w, p, total);
    if (rc == 0) {
        if (li + 1 >= MAX_LEVELS)
            rc = -E2BIG;
        else
            rc = level_add(w, b, li + 1, 0, fk, first_len, NULL, 0, id);
    }
    if (fk != stackkey)
        free(fk);
    return rc;
}

static int level_add(kv_bb_writer *w, bucket *b, int li, uint32_t flags, const uint8_t *key,
                     size_t klen, const uint8_t *val, size_t vlen, uint64_t pgid)
{
    level *l = &b->lv[li];
    size_t add = EL + klen + (li == 0 ? vlen : 0);
    if (l->count > 0 && (PH + l->bytes + add > w->psz || l->count == 0xFFFF)) {
        int rc = level_flush(w, b, li);
        if (rc)
            return rc;
    }
    size_t rec = 16 + klen + (li == 0 ? vlen : 0);
    if (grow(&l->buf, &l->cap, l->len + rec) < 0)
        return -ENOMEM;
    uint8_t *e = l->buf + l->len;
    kv_put_le32(e, flags);
    kv_put_le32(e + 4, (uint32_t)klen);
    kv_put_le64(e + 8, li == 0 ? (uint64_t)vlen : pgid);
    if (klen)
        memcpy(e + 16, key, klen);
    if (li == 0 && vlen)
        memcpy(e + 16 + klen, val, vlen);
    l->len += rec;
    l->count++;
    l->bytes += add;
    return 0;
}

int kv_bb_put(kv_bb_writer *w, const void *key, size_t klen, const void *val, size_t vlen)
{
    if (w->failed)
        return w->failed;
    if (vlen > KV_BB_MAX_VALUE)
        return -EINVAL;
    bucket *b = &w->stack[w->depth - 1];
    int rc = check_order(b, key, klen);
    if (rc == 0)
        rc = level_add(w, b, 0, 0, key, klen, val, vlen, 0);
    if (rc && rc != -EINVAL)
        w->failed = rc;
    return rc;
}

int kv_bb_bucket_begin(kv_bb_writer *w, const void *name, size_t nlen)
{
    if (w->failed)
        return w->failed;
    if (w->depth > KV_BB_MAX_DEPTH)
        return -EINVAL;
    bucket *parent = &w->stack[w->depth - 1];
    int rc = check_order(parent, name, nlen);
    if (rc)
        return rc;
    bucket *b = &w->stack[w->depth];
    bucket_free(b);
    b->name = malloc(nlen);
    if (b->name == NULL)
        return w->failed = -ENOMEM;
    memcpy(b->name, name, nlen);
    b->name_len = nlen;
    w->depth++;
    return 0;
}

/* Writes every level of b bottom-up; *root gets the root page. */
static int bucket_close(kv_bb_writer *w, bucket *b, uint64_t *root)
{
    int rc;
    /* the leaf level: written unless it is empty after full pages */
    if (b->lv[0].count > 0 || b->lv[0].pages == 0) {
        if ((rc = level_flush(w, b, 0)))
            return rc;
    }
    for (int li = 1; li < MAX_LEVELS; li++) {
        level *l = &b->lv[li];
        if (l->pages == 0 && l->count == 1) {
            *root = kv_le64(l->buf + 8);
            return 0;
        }
        if (l->count > 0 && (rc = level_flush(w, b, li)))
            return rc;
    }
    return -E2BIG;
}

int kv_bb_bucket_end(kv_bb_writer *w)
{
    if (w->failed)
        return w->failed;
    if (w->depth <= 1)
        return -EINVAL;
    bucket *b = &w->stack[w->depth - 1];
    uint64_t root = 0;
    int rc = bucket_close(w, b, &root);
    if (rc == 0) {
        uint8_t hdr[16];
        kv_put_le64(hdr, root);
        kv_put_le64(hdr + 8, 0);
        w->depth--;
        rc = level_add(w, &w->stack[w->depth - 1], 0, F_BUCKET, b->name, b->name_len, hdr,
                       sizeof hdr, 0);
    }
    bucket_free(b);
    if (rc)
        w->failed = rc;
    return rc;
}

static void meta_page(kv_bb_writer *w, uint8_t *p, uint64_t id, uint64_t txid)
{
    memset(p, 0, w->psz);
    kv_put_le64(p, id);
    kv_put_le16(p + 8, F_META);
    uint8_t *m = p + PH;
    kv_put_le32(m, 0xED0CDAEDu);
    kv_put_le32(m + 4, 2);
    kv_put_le32(m + 8, w->psz);
    kv_put_le32(m + 12, 0);
    kv_put_le64(m + 16, w->root_pgid);
    kv_put_le64(m + 24, 0);
    kv_put_le64(m + 32, 2); /* freelist */
    kv_put_le64(m + 40, w->next_pgid);
    kv_put_le64(m + 48, txid);
    kv_put_le64(m + 56, kv_bb_fnv64a(m, 56));
}

int kv_bb_writer_finish(kv_bb_writer *w, int64_t *size)
{
    if (w->failed)
        return w->failed;
    if (w->depth != 1)
        return -EINVAL;
    int rc = bucket_close(w, &w->stack[0], &w->root_pgid);
    if (rc == 0)
        rc = wflush(w);
    if (rc == 0 && grow(&w->page, &w->page_cap, 3 * (size_t)w->psz) < 0)
        rc = -ENOMEM;
    if (rc == 0) {
        uint8_t *p = w->page;
        meta_page(w, p, 0, 0);
        meta_page(w, p + w->psz, 1, 1);
        uint8_t *f = p + 2 * (size_t)w->psz;
        memset(f, 0, w->psz);
        kv_put_le64(f, 2);
        kv_put_le16(f + 8, F_FREELIST);
        rc = write_all(w->fd, p, 3 * (size_t)w->psz, 0);
    }
    if (rc == 0)
        *size = (int64_t)w->next_pgid * w->psz;
    if (rc)
        w->failed = rc;
    return rc;
}
