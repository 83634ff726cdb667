/* lmdb_verify: bounds-checked verifier of the LMDB 0.9 file format (see lmdb_verify.h).
 *
 * Layout read here (LMDB 0.9, 64-bit little-endian builds, as Debian's liblmdb0):
 *   page header (16): pgno (8) | pad (2; key size on LEAF2 pages) | flags (2) |
 *                     lower (2) | upper (2)   (overflow pages: page count (4) instead)
 *   page body: lower-16 bytes of 2-byte node offsets, then free space, then nodes at upper..
 *   node (8 + key + data): lo (2) | hi (2) | flags (2) | ksize (2) | key | data; leaf data
 *                     size = lo | hi<<16; branch child = lo | hi<<16 | flags<<32
 *   LEAF2 page: lower-16 bytes of (unused) offsets; keys of pad bytes each from byte 16
 *   meta page body: magic (4) | version (4) | address (8) | mapsize (8) | free db (48) |
 *                     main db (48) | last page (8) | txnid (8)
 *   db record (48): pad (4; page size in a meta's free db, key size of a DUPFIXED sub-db) |
 *                     flags (2) | depth (2) | branch, leaf, overflow pages (8 each) |
 *                     entries (8) | root (8)
 * Written from the format, not from LMDB's code: every offset is checked before it is used.
 */
#include "common/byteorder.h"
#include "mvcc/lmdb_verify.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PAGEHDRSZ 16u
#define NODESZ 8u
#define DBSZ 48u
#define META_MAGIC 0xBEEFC0DEu
#define META_VERSION 1u
#define NUM_METAS 2u
#define P_BRANCH 0x01u
#define P_LEAF 0x02u
#define P_OVERFLOW 0x04u
#define P_META 0x08u
#define P_DIRTY 0x10u
#define P_LEAF2 0x20u
#define P_SUBP 0x40u
#define P_KEEP 0x8000u
#define F_BIGDATA 0x01u
#define F_SUBDATA 0x02u
#define F_DUPDATA 0x04u
#define DB_REVERSEKEY 0x02u
#define DB_DUPSORT 0x04u
#define DB_INTEGERKEY 0x08u
#define DB_DUPFIXED 0x10u
#define DB_INTEGERDUP 0x20u
#define DB_REVERSEDUP 0x40u
#define DB_FLAGS 0x7eu
#define P_INVALID UINT64_MAX
#define MAX_DEPTH 32u

enum { CMP_MEMN, CMP_MEMNR, CMP_INT };
enum { T_FREE, T_MAIN, T_NAMED, T_DUPS };

typedef struct dbrec {
    uint32_t pad;
    uint16_t flags, depth;
    uint64_t entries, root;
} dbrec;

typedef struct vctx {
    int fd;             /* pread source, or -1 */
    const uint8_t *mem; /* memory source */
    uint64_t len;       /* bytes of the source that hold the data file */
    const char *name;
    uint32_t psize;
    uint64_t last_pg;
    uint8_t *seen; /* one bit per page 0..last_pg */
    /* page buffers, one per page being walked (a stack: walk_page takes one, gives it back);
     * kept for the whole run, so the walk allocates a handful of pages, not one per page
     * (a sanitizer build keeps freed blocks: per-page malloc grew its RSS with the file) */
    uint8_t **bufs;
    size_t nbufs, bufs_used;
    kv_lmdb_verify_stats st;
    char *err;
    size_t errlen;
} vctx;

typedef struct tree {
    const char *what;
    int kind;
    int cmp;          /* key order */
    int dupcmp;       /* order of duplicates (T_NAMED with DUPSORT) */
    uint16_t flags;   /* the tree record's flags */
    uint16_t depth;   /* levels */
    uint32_t leaf2ks; /* T_DUPS of a DUPFIXED db: the fixed size */
    uint64_t entries; /* counted while walking */
} tree;

typedef struct bound {
    const uint8_t *k;
    size_t len;
    bool set;
} bound;

int kv_lmdb_vcorrupt(char *err, size_t errlen, const char *name, const char *fmt, va_list ap)
{
    if (errlen == 0)
        return -EBADMSG;
    int o = snprintf(err, errlen, "%s is corrupt: ", name);
    if (o < 0 || (size_t)o >= errlen)
        return -EBADMSG;
    vsnprintf(err + o, errlen - (size_t)o, fmt, ap);
    return -EBADMSG;
}

static int corrupt(vctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int corrupt(vctx *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = kv_lmdb_vcorrupt(c->err, c->errlen, c->name, fmt, ap);
    va_end(ap);
    return rc;
}

static int fail(vctx *c, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(vctx *c, int rc, const char *fmt, ...)
{
    if (c->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err, c->errlen, fmt, ap);
        va_end(ap);
    }
    return rc;
}

static void db_parse(const uint8_t *p, dbrec *d)
{
    d->pad = kv_le32(p);
    d->flags = kv_le16(p + 4);
    d->depth = kv_le16(p + 6);
    d->entries = kv_le64(p + 32);
    d->root = kv_le64(p + 40);
}

/* Reads len bytes at off; -EBADMSG if they are not all inside the data. */
static int src_read(vctx *c, uint64_t off, void *dst, size_t len, const char *what)
{
    if (off > c->len || len > c->len - off)
        return corrupt(c, "%s: bytes %llu..%llu are past the end of the data (%llu bytes)", what,
                       (unsigned long long)off, (unsigned long long)(off + len),
                       (unsigned long long)c->len);
    c->st.bytes_read += len;
    if (c->mem) {
        memcpy(dst, c->mem + off, len);
        return 0;
    }
    size_t got = 0;
    while (got < len) {
        ssize_t n = pread(c->fd, (uint8_t *)dst + got, len - got, (off_t)(off + got));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            int e = errno;
            return fail(c, -e, "cannot read %s: %s", c->name, strerror(e));
        }
        if (n == 0)
            return corrupt(c, "%s: the file ends at %llu bytes", what,
                           (unsigned long long)(off + got));
        got += (size_t)n;
    }
    return 0;
}

/* Marks pages [pg, pg + n) as reached; each page may be reached once. */
static int mark(vctx *c, uint64_t pg, uint64_t n, const char *what)
{
    if (pg < NUM_METAS || pg > c->last_pg || n > c->last_pg - pg + 1)
        return corrupt(c, "%s: page %llu (+%llu) is outside 2..%llu", what, (unsigned long long)pg,
                       (unsigned long long)n, (unsigned long long)c->last_pg);
    for (uint64_t i = pg; i < pg + n; i++) {
        uint8_t bit = (uint8_t)(1u << (i & 7));
        if (c->seen[i >> 3] & bit)
            return corrupt(c, "%s: page %llu is reached twice", what, (unsigned long long)i);
        c->seen[i >> 3] |= bit;
    }
    c->st.pages += n;
    return 0;
}

static int read_page(vctx *c, uint64_t pgno, uint8_t *buf, const char *what)
{
    int rc = mark(c, pgno, 1, what);
    if (rc == 0)
        rc = src_read(c, pgno * c->psize, buf, c->psize, what);
    if (rc == 0 && kv_le64(buf) != pgno)
        rc = corrupt(c, "%s: page %llu carries page number %llu", what, (unsigned long long)pgno,
                     (unsigned long long)kv_le64(buf));
    return rc;
}

static int key_cmp(int kind, const uint8_t *a, size_t al, const uint8_t *b, size_t bl)
{
    if (kind == CMP_INT) {
        if (al != bl)
            return al < bl ? -1 : 1;
        uint64_t x = al == 4 ? kv_le32(a) : kv_le64(a), y = bl == 4 ? kv_le32(b) : kv_le64(b);
        return x < y ? -1 : x > y;
    }
    size_t n = al < bl ? al : bl;
    if (kind == CMP_MEMNR) {
        for (size_t i = 1; i <= n; i++)
            if (a[al - i] != b[bl - i])
                return a[al - i] < b[bl - i] ? -1 : 1;
    } else if (n) {
        int d = memcmp(a, b, n);
        if (d)
            return d;
    }
    return al < bl ? -1 : al > bl;
}

static int cmp_of(uint16_t flags, bool dup)
{
    if (dup)
        return flags & DB_INTEGERDUP ? CMP_INT : flags & DB_REVERSEDUP ? CMP_MEMNR : CMP_MEMN;
    return flags & DB_INTEGERKEY ? CMP_INT : flags & DB_REVERSEKEY ? CMP_MEMNR : CMP_MEMN;
}

/* Key i of the page: pointer and size (bounds checked by check_page). */
static const uint8_t *node_key(const uint8_t *pg, size_t i, bool leaf2, size_t *len)
{
    if (leaf2) {
        *len = kv_le16(pg + 8);
        return pg + PAGEHDRSZ + i * *len;
    }
    const uint8_t *nd = pg + kv_le16(pg + PAGEHDRSZ + 2 * i);
    *len = kv_le16(nd + 6);
    return nd + NODESZ;
}

/* Bounds of a page (or sub-page) of `size` bytes, every node's offset and key, the key order
 * (from index `first`; branch key 0 is not a key) and the parent's range [lo, hi). */
static int check_page(vctx *c, const tree *t, int cmp, const uint8_t *pg, size_t size,
                      uint64_t pgno, bool leaf2, size_t first, const bound *lo, const bound *hi,
                      size_t *nkeys)
{
    uint16_t lower = kv_le16(pg + 12), upper = kv_le16(pg + 14);
    if (lower < PAGEHDRSZ || lower > upper || upper > size || ((lower - PAGEHDRSZ) & 1u))
        return corrupt(c, "%s: page %llu has bad bounds (lower %u, upper %u, size %zu)", t->what,
                       (unsigned long long)pgno, lower, upper, size);
    size_t n = (lower - PAGEHDRSZ) / 2u;
    if (leaf2) {
        size_t ks = kv_le16(pg + 8);
        if (ks == 0 || n * ks > size - PAGEHDRSZ || (t->leaf2ks && ks != t->leaf2ks))
            return corrupt(c, "%s: page %llu: %zu fixed keys of %zu bytes do not fit", t->what,
                           (unsigned long long)pgno, n, ks);
    } else {
        for (size_t i = 0; i < n; i++) {
            size_t off = kv_le16(pg + PAGEHDRSZ + 2 * i);
            if (off < upper || (off & 1u) || off > size - NODESZ ||
                kv_le16(pg + off + 6) > size - off - NODESZ)
                return corrupt(c, "%s: page %llu: node %zu at bad offset %zu or key too long",
                               t->what, (unsigned long long)pgno, i, off);
        }
    }
    for (size_t i = first; i < n; i++) {
        size_t kl, pl;
        const uint8_t *k = node_key(pg, i, leaf2, &kl);
        if (i > first) {
            const uint8_t *p = node_key(pg, i - 1, leaf2, &pl);
            if (key_cmp(cmp, p, pl, k, kl) >= 0)
                return corrupt(c, "%s: page %llu: keys %zu and %zu are out of order", t->what,
                               (unsigned long long)pgno, i - 1, i);
        }
        if ((lo && lo->set && key_cmp(cmp, k, kl, lo->k, lo->len) < 0) ||
            (hi && hi->set && key_cmp(cmp, k, kl, hi->k, hi->len) >= 0))
            return corrupt(c, "%s: page %llu: key %zu lies outside its parent's range", t->what,
                           (unsigned long long)pgno, i);
    }
    *nkeys = n;
    return 0;
}

static int walk_tree(vctx *c, tree *t, const dbrec *db, int level);

static int check_overflow(vctx *c, const tree *t, uint64_t opg, uint64_t dsize)
{
    uint8_t hdr[PAGEHDRSZ];
    if (opg < NUM_METAS || opg > c->last_pg)
        return corrupt(c, "%s: overflow page %llu is outside 2..%llu", t->what,
                       (unsigned long long)opg, (unsigned long long)c->last_pg);
    int rc = src_read(c, opg * c->psize, hdr, sizeof hdr, t->what);
    if (rc)
        return rc;
    uint16_t flags = kv_le16(hdr + 10);
    uint64_t pages = kv_le32(hdr + 12);
    uint64_t need = (PAGEHDRSZ - 1 + dsize) / c->psize + 1;
    if (kv_le64(hdr) != opg || (flags & ~(P_DIRTY | P_KEEP)) != P_OVERFLOW || pages < need)
        return corrupt(c,
                       "%s: overflow page %llu (number %llu, flags %#x, %llu pages) cannot hold "
                       "%llu bytes",
                       t->what, (unsigned long long)opg, (unsigned long long)kv_le64(hdr), flags,
                       (unsigned long long)pages, (unsigned long long)dsize);
    return mark(c, opg, pages, t->what);
}

static int sub_db(vctx *c, const tree *parent, const uint8_t *key, size_t klen, const uint8_t *data,
                  uint64_t *entries)
{
    dbrec d;
    db_parse(data, &d);
    char what[160];
    tree sub = {.what = what};
    if (parent->kind == T_MAIN) {
        snprintf(what, sizeof what, "database \"%.*s\"", (int)(klen < 64 ? klen : 64),
                 (const char *)key);
        if (d.flags & ~DB_FLAGS)
            return corrupt(c, "%s: bad flags %#x", what, d.flags);
        sub.kind = T_NAMED;
        sub.cmp = cmp_of(d.flags, false);
        sub.dupcmp = cmp_of(d.flags, true);
    } else {
        snprintf(what, sizeof what, "%s (duplicates)", parent->what);
        sub.kind = T_DUPS;
        sub.cmp = parent->dupcmp;
        if (parent->flags & DB_DUPFIXED)
            sub.leaf2ks = d.pad;
    }
    sub.flags = d.flags;
    int rc = walk_tree(c, &sub, &d, 0);
    if (rc == 0 && sub.kind == T_DUPS && d.entries == 0)
        rc = corrupt(c, "%s: empty duplicate sub-database", what);
    *entries = d.entries;
    return rc;
}

/* The leaf nodes of one page: their data, overflow runs, sub-pages and sub-databases. */
static int check_leaf(vctx *c, tree *t, const uint8_t *pg, uint64_t pgno, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        size_t off = kv_le16(pg + PAGEHDRSZ + 2 * i);
        const uint8_t *nd = pg + off;
        uint16_t nf = kv_le16(nd + 4);
        size_t ks = kv_le16(nd + 6);
        uint64_t ds = (uint64_t)kv_le16(nd) | (uint64_t)kv_le16(nd + 2) << 16;
        size_t room = c->psize - off - NODESZ - ks;
        const uint8_t *data = nd + NODESZ + ks;
        bool dupsort = t->kind == T_NAMED && (t->flags & DB_DUPSORT);
        if (nf & ~(F_BIGDATA | F_SUBDATA | F_DUPDATA))
            return corrupt(c, "%s: page %llu: node %zu has flags %#x", t->what,
                           (unsigned long long)pgno, i, nf);
        if (t->kind == T_FREE && ks != 8)
            return corrupt(c, "%s: page %llu: node %zu: key of %zu bytes", t->what,
                           (unsigned long long)pgno, i, ks);
        if (t->kind == T_DUPS) {
            if (nf || ds)
                return corrupt(c, "%s: page %llu: node %zu: duplicate with data", t->what,
                               (unsigned long long)pgno, i);
            t->entries++;
            continue;
        }
        if (nf & F_BIGDATA) {
            if (nf != F_BIGDATA || dupsort || room < 8)
                return corrupt(c, "%s: page %llu: node %zu: bad big-data node", t->what,
                               (unsigned long long)pgno, i);
            int rc = check_overflow(c, t, kv_le64(data), ds);
            if (rc)
                return rc;
            t->entries++;
            continue;
        }
        if (ds > room)
            return corrupt(c, "%s: page %llu: node %zu: %llu bytes of data run past the page",
                           t->what, (unsigned long long)pgno, i, (unsigned long long)ds);
        if (nf == 0) {
            if (t->kind == T_FREE && (ds < 8 || kv_le64(data) > ds / 8 - 1))
                return corrupt(c, "%s: page %llu: node %zu: bad page list", t->what,
                               (unsigned long long)pgno, i);
            if (t->kind == T_FREE)
                for (uint64_t j = 1; j <= kv_le64(data); j++) {
                    uint64_t fp = kv_le64(data + 8 * j);
                    if (fp < NUM_METAS || fp > c->last_pg)
                        return corrupt(c, "%s: page %llu: free page %llu is outside the file",
                                       t->what, (unsigned long long)pgno, (unsigned long long)fp);
                }
            t->entries++;
            continue;
        }
        if (nf == F_SUBDATA && t->kind == T_MAIN) {
            uint64_t e;
            if (ds != DBSZ)
                return corrupt(c, "%s: page %llu: node %zu: database record of %llu bytes", t->what,
                               (unsigned long long)pgno, i, (unsigned long long)ds);
            int rc = sub_db(c, t, nd + NODESZ, ks, data, &e);
            if (rc)
                return rc;
            t->entries++;
            continue;
        }
        if (!dupsort || !(nf & F_DUPDATA))
            return corrupt(c, "%s: page %llu: node %zu: flags %#x do not belong here", t->what,
                           (unsigned long long)pgno, i, nf);
        if (nf & F_SUBDATA) { /* a sub-database of duplicates */
            uint64_t e;
            if (ds != DBSZ)
                return corrupt(c, "%s: page %llu: node %zu: sub-database record of %llu bytes",
                               t->what, (unsigned long long)pgno, i, (unsigned long long)ds);
            int rc = sub_db(c, t, nd + NODESZ, ks, data, &e);
            if (rc)
                return rc;
            t->entries += e;
            continue;
        }
        /* a sub-page of duplicates, inline in the node */
        if (ds < PAGEHDRSZ)
            return corrupt(c, "%s: page %llu: node %zu: sub-page of %llu bytes", t->what,
                           (unsigned long long)pgno, i, (unsigned long long)ds);
        uint16_t sf = kv_le16(data + 10);
        bool fixed = (t->flags & DB_DUPFIXED) != 0;
        if ((sf & ~(P_DIRTY | P_KEEP)) != (P_LEAF | P_SUBP | (fixed ? P_LEAF2 : 0)))
            return corrupt(c, "%s: page %llu: node %zu: sub-page flags %#x", t->what,
                           (unsigned long long)pgno, i, sf);
        tree dt = {.what = t->what, .kind = T_DUPS, .cmp = t->dupcmp};
        size_t nd_keys;
        int rc =
            check_page(c, &dt, t->dupcmp, data, (size_t)ds, pgno, fixed, 0, NULL, NULL, &nd_keys);
        if (rc)
            return rc;
        if (nd_keys == 0)
            return corrupt(c, "%s: page %llu: node %zu: empty sub-page", t->what,
                           (unsigned long long)pgno, i);
        if (!fixed)
            for (size_t j = 0; j < nd_keys; j++) {
                const uint8_t *sn = data + kv_le16(data + PAGEHDRSZ + 2 * j);
                if (kv_le16(sn + 4) || kv_le16(sn) || kv_le16(sn + 2))
                    return corrupt(c, "%s: page %llu: node %zu: duplicate %zu with data", t->what,
                                   (unsigned long long)pgno, i, j);
            }
        t->entries += nd_keys;
    }
    return 0;
}

static uint8_t *page_buf_take(vctx *c)
{
    if (c->bufs_used == c->nbufs) {
        uint8_t **nb = realloc(c->bufs, (c->nbufs + 1) * sizeof(*nb));
        if (!nb)
            return NULL;
        c->bufs = nb;
        if (!(c->bufs[c->nbufs] = malloc(c->psize)))
            return NULL;
        c->nbufs++;
    }
    return c->bufs[c->bufs_used++];
}

static void page_bufs_free(vctx *c)
{
    for (size_t i = 0; i < c->nbufs; i++)
        free(c->bufs[i]);
    free(c->bufs);
    c->bufs = NULL;
    c->nbufs = c->bufs_used = 0;
}

/* One page at level `lvl` (0 = root) of tree t, and its subtree; keys within [lo, hi). */
static int walk_page(vctx *c, tree *t, uint64_t pgno, unsigned lvl, const bound *lo,
                     const bound *hi)
{
    uint8_t *pg = page_buf_take(c);
    if (!pg)
        return fail(c, -ENOMEM, "out of memory verifying %s", c->name);
    int rc = read_page(c, pgno, pg, t->what);
    if (rc)
        goto out;
    uint16_t flags = kv_le16(pg + 10) & (uint16_t) ~(P_DIRTY | P_KEEP);
    bool want_leaf = lvl + 1 == t->depth;
    bool leaf2 = flags == (P_LEAF | P_LEAF2);
    bool ok = want_leaf ? flags == P_LEAF || (leaf2 && t->kind == T_DUPS && t->leaf2ks != 0)
                        : flags == P_BRANCH;
    if (!ok) {
        rc = corrupt(c, "%s: page %llu has flags %#x at level %u of %u", t->what,
                     (unsigned long long)pgno, kv_le16(pg + 10), lvl + 1, t->depth);
        goto out;
    }
    size_t n;
    rc = check_page(c, t, t->cmp, pg, c->psize, pgno, leaf2, want_leaf ? 0 : 1, lo, hi, &n);
    if (rc)
        goto out;
    if (want_leaf) {
        if (n == 0 && !(lvl == 0 && t->kind != T_DUPS)) {
            rc = corrupt(c, "%s: leaf page %llu is empty", t->what, (unsigned long long)pgno);
            goto out;
        }
        if (leaf2)
            t->entries += n;
        else
            rc = check_leaf(c, t, pg, pgno, n);
        goto out;
    }
    if (n == 0) {
        rc = corrupt(c, "%s: branch page %llu has %zu children", t->what, (unsigned long long)pgno,
                     n);
        goto out;
    }
    for (size_t i = 0; i < n && rc == 0; i++) {
        const uint8_t *nd = pg + kv_le16(pg + PAGEHDRSZ + 2 * i);
        uint64_t child = (uint64_t)kv_le16(nd) | (uint64_t)kv_le16(nd + 2) << 16 |
                         (uint64_t)kv_le16(nd + 4) << 32;
        bound clo = i == 0 ? (lo ? *lo : (bound){0}) : (bound){nd + NODESZ, kv_le16(nd + 6), true};
        bound chi = hi ? *hi : (bound){0};
        if (i + 1 < n) {
            const uint8_t *nx = pg + kv_le16(pg + PAGEHDRSZ + 2 * (i + 1));
            chi = (bound){nx + NODESZ, kv_le16(nx + 6), true};
        }
        rc = walk_page(c, t, child, lvl + 1, &clo, &chi);
    }
out:
    c->bufs_used--; /* pg goes back to the stack */
    return rc;
}

static int walk_tree(vctx *c, tree *t, const dbrec *db, int level)
{
    (void)level;
    if (db->root == P_INVALID) {
        if (db->entries != 0 || db->depth != 0)
            return corrupt(c, "%s: empty tree with %llu entries, depth %u", t->what,
                           (unsigned long long)db->entries, db->depth);
        return 0;
    }
    if (db->depth == 0 || db->depth > MAX_DEPTH)
        return corrupt(c, "%s: bad tree header (root %llu, depth %u)", t->what,
                       (unsigned long long)db->root, db->depth);
    t->depth = db->depth;
    t->entries = 0;
    int rc = walk_page(c, t, db->root, 0, NULL, NULL);
    if (rc == 0 && t->entries != db->entries)
        rc = corrupt(c, "%s: tree holds %llu entries, its record says %llu", t->what,
                     (unsigned long long)t->entries, (unsigned long long)db->entries);
    c->st.entries += t->kind == T_DUPS ? 0 : t->entries;
    return rc;
}

typedef struct meta {
    bool ok;
    char why[96];
    uint32_t psize;
    uint64_t last_pg, txnid;
    dbrec free_db, main_db;
} meta;

static void meta_parse(const uint8_t *p, uint64_t pgno, meta *m)
{
    memset(m, 0, sizeof(*m));
    const uint8_t *mm = p + PAGEHDRSZ;
    uint32_t magic = kv_le32(mm), version = kv_le32(mm + 4);
    db_parse(mm + 24, &m->free_db);
    db_parse(mm + 24 + DBSZ, &m->main_db);
    m->psize = m->free_db.pad;
    m->last_pg = kv_le64(mm + 24 + 2 * DBSZ);
    m->txnid = kv_le64(mm + 32 + 2 * DBSZ);
    if (kv_le64(p) != pgno || !(kv_le16(p + 10) & P_META))
        snprintf(m->why, sizeof(m->why), "not a meta page (page number %llu, flags %#x)",
                 (unsigned long long)kv_le64(p), kv_le16(p + 10));
    else if (magic != META_MAGIC)
        snprintf(m->why, sizeof(m->why), "bad magic %#x", magic);
    else if (version != META_VERSION)
        snprintf(m->why, sizeof(m->why), "unknown data version %u", version);
    else if (m->psize < 512 || m->psize > 65536 || (m->psize & (m->psize - 1)))
        snprintf(m->why, sizeof(m->why), "bad page size %u", m->psize);
    else if (m->last_pg < NUM_METAS - 1)
        snprintf(m->why, sizeof(m->why), "bad last page %llu", (unsigned long long)m->last_pg);
    else
        m->ok = true;
}

#define META_BYTES (PAGEHDRSZ + 24 + 2 * DBSZ + 16)

static int verify(vctx *c)
{
    uint8_t buf[META_BYTES];
    meta m[2];
    int rc;
    if (c->len < META_BYTES)
        return corrupt(c, "%llu bytes are too short for an LMDB file", (unsigned long long)c->len);
    if ((rc = src_read(c, 0, buf, sizeof buf, "meta page 0")))
        return rc;
    meta_parse(buf, 0, &m[0]);
    if (!m[0].ok)
        return corrupt(c, "meta page 0: %s", m[0].why);
    if (c->len < (uint64_t)m[0].psize + META_BYTES)
        return corrupt(c, "%llu bytes are too short for two meta pages",
                       (unsigned long long)c->len);
    if ((rc = src_read(c, m[0].psize, buf, sizeof buf, "meta page 1")))
        return rc;
    meta_parse(buf, 1, &m[1]);
    if (!m[1].ok)
        return corrupt(c, "meta page 1: %s", m[1].why);
    if (m[0].psize != m[1].psize)
        return corrupt(c, "the meta pages disagree on the page size (%u, %u)", m[0].psize,
                       m[1].psize);
    const meta *cur = m[1].txnid > m[0].txnid ? &m[1] : &m[0];
    /* LMDB writes the meta of txn N to page N & 1, and a read transaction takes its meta
     * from that page too (mdb_txn_renew0: me_metas[txnid & 1]), while a writer takes the
     * meta with the higher txnid. A current meta on the wrong page (a damaged txnid) sends
     * readers to the other, older meta, whose trees this walk does not read. */
    size_t cur_pg = cur == &m[1] ? 1u : 0u;
    if ((cur->txnid & 1u) != cur_pg)
        return corrupt(c, "meta page %zu holds txn %llu, which belongs on meta page %u", cur_pg,
                       (unsigned long long)cur->txnid, (unsigned)(cur->txnid & 1u));
    c->psize = cur->psize;
    c->last_pg = cur->last_pg;
    c->st.psize = c->psize;
    c->st.txnid = cur->txnid;
    c->st.last_pg = c->last_pg;
    uint64_t pages = c->len / c->psize;
    if (c->last_pg >= pages)
        return corrupt(c, "last page %llu (txn %llu) is beyond the end of the data (%llu pages)",
                       (unsigned long long)c->last_pg, (unsigned long long)cur->txnid,
                       (unsigned long long)pages);
    c->seen = calloc(c->last_pg / 8 + 1, 1);
    if (!c->seen)
        return fail(c, -ENOMEM, "out of memory verifying %s", c->name);
    tree ft = {.what = "free-page list", .kind = T_FREE, .cmp = CMP_INT, .flags = 0};
    tree mt = {.what = "main database", .kind = T_MAIN, .cmp = CMP_MEMN, .flags = 0};
    if (cur->main_db.flags & ~DB_FLAGS)
        return corrupt(c, "main database: bad flags %#x", cur->main_db.flags);
    mt.cmp = cmp_of(cur->main_db.flags, false);
    if ((rc = walk_tree(c, &ft, &cur->free_db, 0)) || (rc = walk_tree(c, &mt, &cur->main_db, 0)))
        return rc;
    return 0;
}

static int run(vctx *c, kv_lmdb_verify_stats *st)
{
    if (c->errlen)
        c->err[0] = 0;
    int rc = verify(c);
    free(c->seen);
    c->seen = NULL;
    page_bufs_free(c);
    if (st)
        *st = c->st;
    return rc;
}

int kv_lmdb_verify_fd(int fd, uint64_t len, const char *name, kv_lmdb_verify_stats *st, char *err,
                      size_t errlen)
{
    vctx c = {
        .fd = fd, .len = len, .name = name ? name : "LMDB file", .err = err, .errlen = errlen};
    if (len == 0) {
        struct stat sb;
        if (fstat(fd, &sb) != 0) {
            int e = errno;
            return fail(&c, -e, "cannot stat %s: %s", c.name, strerror(e));
        }
        c.len = (uint64_t)sb.st_size;
    }
    /* The walk reads pages in tree order, not file order: ask the kernel to read the file
     * ahead sequentially (a cold start reads it at disk speed instead of page by page). */
    (void)posix_fadvise(fd, 0, (off_t)c.len, POSIX_FADV_WILLNEED);
    return run(&c, st);
}

int kv_lmdb_verify_path(const char *path, uint64_t len, kv_lmdb_verify_stats *st, char *err,
                        size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        if (errlen)
            snprintf(err, errlen, "cannot open %s: %s", path, strerror(e));
        return -e;
    }
    int rc = kv_lmdb_verify_fd(fd, len, path, st, err, errlen);
    close(fd);
    return rc;
}

int kv_lmdb_verify_mem(const uint8_t *buf, size_t len, const char *name, kv_lmdb_verify_stats *st,
                       char *err, size_t errlen)
{
    vctx c = {.fd = -1,
              .mem = buf,
              .len = len,
              .name = name ? name : "LMDB image",
              .err = err,
              .errlen = errlen};
    return run(&c, st);
}
