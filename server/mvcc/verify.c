/* verify: startup integrity check of the LMDB environment (see verify.h).
 *
 * The on-disk layout read here is LMDB 0.9's (mdb.c), 64-bit little-endian builds:
 *   page header (16): pgno (8) | pad (2; key size on LEAF2 pages) | flags (2) |
 *                     lower (2) | upper (2)   (overflow pages: page count (4) instead)
 *   node (8 + key + data): lo (2) | hi (2) | flags (2) | ksize (2); leaf data size = lo|hi<<16,
 *                     branch child = lo | hi<<16 | flags<<32
 *   meta page (after the header): magic (4) | version (4) | address (8) | mapsize (8) |
 *                     free db (48) | main db (48) | last page (8) | txnid (8)
 *   db record (48): pad (4; page size in the free db of a meta) | flags (2) | depth (2) |
 *                     branch, leaf, overflow pages (8 each) | entries (8) | root (8)
 */
#include "mvcc/verify.h"
#include "common/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/byteorder.h"
#include "mvcc/lmdb_verify.h"
#include "mvcc/store_int.h"
#include "base/lmdb_valcheck.h"

#define PAGEHDRSZ 16u
#define NODESZ 8u
#define DBSZ 48u
#define META_MAGIC 0xBEEFC0DEu
#define META_VERSION 1u
#define P_BRANCH 0x01u
#define P_LEAF 0x02u
#define P_OVERFLOW 0x04u
#define P_META 0x08u
#define P_LEAF2 0x20u
#define P_SUBP 0x40u
#define F_BIGDATA 0x01u
#define F_SUBDATA 0x02u
#define F_DUPDATA 0x04u
#define DB_DUPSORT 0x04u
#define P_INVALID UINT64_MAX
#define MAX_DEPTH 32

typedef struct vctx {
    int fd;
    const char *path;
    uint32_t psize;
    uint64_t last_pg;
    uint64_t max_records; /* leaf entries per tree */
    uint64_t max_total;   /* leaf entries over the whole walk (dup sub-trees included) */
    uint64_t total;
    char *err;
    size_t errlen;
} vctx;

typedef struct dbrec {
    uint16_t flags, depth;
    uint64_t entries, root;
} dbrec;

static int corrupt(vctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int corrupt(vctx *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = kv_lmdb_vcorrupt(c->err, c->errlen, c->path, fmt, ap);
    va_end(ap);
    return rc;
}

static void db_parse(const uint8_t *p, dbrec *d)
{
    d->flags = kv_le16(p + 4);
    d->depth = kv_le16(p + 6);
    d->entries = kv_le64(p + 32);
    d->root = kv_le64(p + 40);
}

static int read_page(vctx *c, uint64_t pgno, uint8_t *buf, const char *what)
{
    if (pgno > c->last_pg)
        return corrupt(c, "%s: page %llu beyond the last page %llu", what, (unsigned long long)pgno,
                       (unsigned long long)c->last_pg);
    ssize_t n = pread(c->fd, buf, c->psize, (off_t)(pgno * c->psize));
    if (n < 0) {
        int e = errno;
        snprintf(c->err, c->errlen, "cannot read %s: %s", c->path, strerror(e));
        return -e;
    }
    if ((size_t)n != c->psize)
        return corrupt(c, "%s: page %llu is past the end of the file", what,
                       (unsigned long long)pgno);
    if (kv_le64(buf) != pgno)
        return corrupt(c, "%s: page %llu carries page number %llu", what, (unsigned long long)pgno,
                       (unsigned long long)kv_le64(buf));
    return 0;
}

static int check_overflow(vctx *c, uint64_t opg, uint64_t dsize, uint8_t *buf, const char *what)
{
    int rc = read_page(c, opg, buf, what);
    if (rc)
        return rc;
    uint16_t flags = kv_le16(buf + 10);
    uint64_t pages = kv_le32(buf + 12);
    if (!(flags & P_OVERFLOW) || pages == 0 || opg + pages - 1 > c->last_pg ||
        pages * c->psize < PAGEHDRSZ + dsize)
        return corrupt(c, "%s: overflow page %llu (flags %#x, %llu pages) cannot hold %llu bytes",
                       what, (unsigned long long)opg, flags, (unsigned long long)pages,
                       (unsigned long long)dsize);
    return 0;
}

static int walk_tree(vctx *c, const dbrec *db, int level, const char *what);

/* Checks the nodes of one page (or sub-page) of `size` bytes. Leaf entries are counted in
 * *entries. Branch children go to kids (count in *nkids, at most cap). */
static int check_nodes(vctx *c, const uint8_t *pg, size_t size, bool sub, int level,
                       const char *what, uint64_t pgno, uint64_t *entries, uint8_t *obuf)
{
    uint16_t flags = kv_le16(pg + 10), lower = kv_le16(pg + 12), upper = kv_le16(pg + 14);
    bool leaf2 = (flags & P_LEAF2) != 0, leaf = (flags & (P_LEAF | P_LEAF2)) != 0;
    if (lower < PAGEHDRSZ || lower > upper || upper > size || ((lower - PAGEHDRSZ) & 1u))
        return corrupt(c, "%s: page %llu has bad bounds (lower %u, upper %u)", what,
                       (unsigned long long)pgno, lower, upper);
    size_t n = (lower - PAGEHDRSZ) / 2u;
    if (leaf2) {
        size_t ks = kv_le16(pg + 8);
        if (ks == 0 || PAGEHDRSZ + n * ks > size)
            return corrupt(c, "%s: page %llu: %zu fixed keys of %zu bytes do not fit", what,
                           (unsigned long long)pgno, n, ks);
        *entries += n;
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        size_t off = kv_le16(pg + PAGEHDRSZ + 2 * i);
        if (off < upper || off + NODESZ > size)
            return corrupt(c, "%s: page %llu: node %zu at bad offset %zu", what,
                           (unsigned long long)pgno, i, off);
        const uint8_t *nd = pg + off;
        size_t ks = kv_le16(nd + 6);
        uint16_t nf = kv_le16(nd + 4);
        if (off + NODESZ + ks > size)
            return corrupt(c, "%s: page %llu: node %zu key of %zu bytes runs past the page", what,
                           (unsigned long long)pgno, i, ks);
        if (!leaf)
            continue; /* children are checked by the caller */
        (*entries)++;
        uint64_t ds = (uint64_t)kv_le16(nd) | (uint64_t)kv_le16(nd + 2) << 16;
        size_t room = size - off - NODESZ - ks;
        const uint8_t *data = nd + NODESZ + ks;
        if (nf & F_BIGDATA) {
            if (room < 8 || sub || (nf & (F_SUBDATA | F_DUPDATA)))
                return corrupt(c, "%s: page %llu: node %zu: bad big-data node", what,
                               (unsigned long long)pgno, i);
            int rc = check_overflow(c, kv_le64(data), ds, obuf, what);
            if (rc)
                return rc;
            continue;
        }
        if (ds > room)
            return corrupt(c, "%s: page %llu: node %zu value of %llu bytes runs past the page",
                           what, (unsigned long long)pgno, i, (unsigned long long)ds);
        if (nf & F_SUBDATA) {
            if (ds != DBSZ || sub || level >= 2)
                return corrupt(c, "%s: page %llu: node %zu: bad sub-database record", what,
                               (unsigned long long)pgno, i);
            dbrec d;
            db_parse(data, &d);
            char name[96];
            if (level == 0)
                snprintf(name, sizeof(name), "database \"%.*s\"", (int)(ks < 40 ? ks : 40),
                         (const char *)(nd + NODESZ));
            else
                snprintf(name, sizeof(name), "%s (duplicates)", what);
            int rc = walk_tree(c, &d, level + 1, name);
            if (rc)
                return rc;
        } else if (nf & F_DUPDATA) {
            if (sub || ds < PAGEHDRSZ)
                return corrupt(c, "%s: page %llu: node %zu: bad duplicate sub-page", what,
                               (unsigned long long)pgno, i);
            uint16_t sf = kv_le16(data + 10);
            if (!(sf & P_SUBP) || !(sf & (P_LEAF | P_LEAF2)))
                return corrupt(c, "%s: page %llu: node %zu: sub-page flags %#x", what,
                               (unsigned long long)pgno, i, sf);
            uint64_t sub_entries = 0;
            int rc = check_nodes(c, data, ds, true, level, what, pgno, &sub_entries, obuf);
            if (rc)
                return rc;
        }
    }
    return 0;
}

typedef struct frame {
    uint64_t pgno;
    size_t next; /* next child index (branch pages) */
    uint8_t *buf;
} frame;

/* Depth-first walk of one tree, stopping after c->max_records leaf entries. level: 0 main or
 * free db, 1 named db, 2 dup sub-db. */
static int walk_tree(vctx *c, const dbrec *db, int level, const char *what)
{
    if (db->root == P_INVALID) {
        if (db->entries != 0 || db->depth != 0)
            return corrupt(c, "%s: empty tree with %llu entries, depth %u", what,
                           (unsigned long long)db->entries, db->depth);
        return 0;
    }
    if (db->depth == 0 || db->depth > MAX_DEPTH || db->root > c->last_pg)
        return corrupt(c, "%s: bad tree header (root %llu, depth %u)", what,
                       (unsigned long long)db->root, db->depth);
    frame st[MAX_DEPTH];
    memset(st, 0, sizeof(st));
    uint8_t *obuf = malloc(c->psize);
    int rc = obuf ? 0 : -ENOMEM;
    uint64_t entries = 0;
    int top = 0;
    bool complete = true;
    if (rc == 0) {
        st[0].pgno = db->root;
        st[0].buf = malloc(c->psize);
        if (!st[0].buf)
            rc = -ENOMEM;
        else
            rc = read_page(c, db->root, st[0].buf, what);
    }
    /* Invariant: st[0..top] are read pages on the path from the root. */
    bool fresh = true;
    while (rc == 0 && top >= 0) {
        frame *f = &st[top];
        uint16_t flags = kv_le16(f->buf + 10);
        bool want_leaf = top == db->depth - 1;
        bool is_leaf = (flags & (P_LEAF | P_LEAF2)) != 0, is_branch = (flags & P_BRANCH) != 0;
        if (fresh) {
            fresh = false;
            if (is_leaf == is_branch || is_leaf != want_leaf || (flags & (P_OVERFLOW | P_META))) {
                rc = corrupt(c, "%s: page %llu has flags %#x at level %d of %u", what,
                             (unsigned long long)f->pgno, flags, top + 1, db->depth);
                break;
            }
            uint64_t before = entries;
            rc = check_nodes(c, f->buf, c->psize, false, level, what, f->pgno, &entries, obuf);
            if (rc)
                break;
            c->total += entries - before;
            if (is_branch && kv_le16(f->buf + 12) == PAGEHDRSZ) {
                rc = corrupt(c, "%s: branch page %llu is empty", what, (unsigned long long)f->pgno);
                break;
            }
        }
        if (entries >= c->max_records || c->total >= c->max_total) {
            complete = false; /* the bound is reached: the rest of the tree is not checked */
            break;
        }
        if (is_leaf) {
            top--;
            continue;
        }
        size_t n = (kv_le16(f->buf + 12) - PAGEHDRSZ) / 2u;
        if (f->next >= n) {
            top--;
            continue;
        }
        const uint8_t *nd = f->buf + kv_le16(f->buf + PAGEHDRSZ + 2 * f->next);
        f->next++;
        uint64_t child = (uint64_t)kv_le16(nd) | (uint64_t)kv_le16(nd + 2) << 16 |
                         (uint64_t)kv_le16(nd + 4) << 32;
        frame *k = &st[top + 1];
        if (!k->buf && !(k->buf = malloc(c->psize))) {
            rc = -ENOMEM;
            break;
        }
        k->pgno = child;
        k->next = 0;
        rc = read_page(c, child, k->buf, what);
        top++;
        fresh = true;
    }
    if (rc == 0 && complete && !(db->flags & DB_DUPSORT) && entries != db->entries)
        rc = corrupt(c, "%s: tree holds %llu entries, its header says %llu", what,
                     (unsigned long long)entries, (unsigned long long)db->entries);
    if (rc == -ENOMEM)
        snprintf(c->err, c->errlen, "out of memory verifying %s", c->path);
    for (int i = 0; i < MAX_DEPTH; i++)
        free(st[i].buf);
    free(obuf);
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
    m->psize = kv_le32(mm + 24); /* free db's pad */
    db_parse(mm + 24, &m->free_db);
    db_parse(mm + 24 + DBSZ, &m->main_db);
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
    else if (m->last_pg < 1)
        snprintf(m->why, sizeof(m->why), "bad last page %llu", (unsigned long long)m->last_pg);
    else
        m->ok = true;
}

int kv_store_verify_file(const char *dir, uint64_t max_records, char *err, size_t errlen)
{
    char path[4096];
    if (snprintf(path, sizeof(path), "%s/data.mdb", dir) >= (int)sizeof(path)) {
        snprintf(err, errlen, "data dir path too long");
        return -ENAMETOOLONG;
    }
    vctx c = {.fd = -1, .path = path, .max_records = max_records, .err = err, .errlen = errlen};
    c.fd = open(path, O_RDONLY | O_CLOEXEC);
    if (c.fd < 0) {
        int e = errno;
        if (e == ENOENT)
            return 0; /* fresh data dir */
        snprintf(err, errlen, "cannot open %s: %s", path, strerror(e));
        return -e;
    }
    int rc;
    struct stat sb;
    uint8_t first[PAGEHDRSZ + 2 * DBSZ + 64];
    uint8_t *pg = NULL;
    if (fstat(c.fd, &sb) != 0) {
        rc = -errno;
        snprintf(err, errlen, "cannot stat %s: %s", path, strerror(-rc));
        goto out;
    }
    if (sb.st_size == 0) {
        rc = 0; /* created but never initialised: LMDB initialises it */
        goto out;
    }
    if (pread(c.fd, first, sizeof(first), 0) != (ssize_t)sizeof(first)) {
        rc = corrupt(&c, "file too short for a meta page (%lld bytes)", (long long)sb.st_size);
        goto out;
    }
    meta m[2];
    meta_parse(first, 0, &m[0]);
    uint32_t psize = m[0].ok ? m[0].psize : 4096; /* LMDB reads meta 1 at the same offset */
    pg = malloc(65536);
    if (!pg) {
        rc = -ENOMEM;
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    if ((uint64_t)sb.st_size < 2ull * psize ||
        pread(c.fd, pg, psize, (off_t)psize) != (ssize_t)psize) {
        rc = corrupt(&c, "file too short for two meta pages (%lld bytes)", (long long)sb.st_size);
        goto out;
    }
    meta_parse(pg, 1, &m[1]);
    for (int i = 0; i < 2; i++)
        if (!m[i].ok) {
            rc = corrupt(&c, "meta page %d: %s", i, m[i].why);
            goto out;
        }
    if (m[0].psize != m[1].psize) {
        rc = corrupt(&c, "meta pages disagree on the page size (%u, %u)", m[0].psize, m[1].psize);
        goto out;
    }
    const meta *cur = m[1].txnid > m[0].txnid ? &m[1] : &m[0];
    c.psize = cur->psize;
    c.last_pg = cur->last_pg;
    uint64_t file_pages = (uint64_t)sb.st_size / c.psize;
    if (c.last_pg >= file_pages) {
        rc = corrupt(&c, "last page %llu (txn %llu) is beyond the end of the file (%llu pages)",
                     (unsigned long long)c.last_pg, (unsigned long long)cur->txnid,
                     (unsigned long long)file_pages);
        goto out;
    }
    c.max_total = max_records > UINT64_MAX / 8 ? UINT64_MAX : max_records * 8;
    if (max_records == 0) {
        rc = 0;
        goto out;
    }
    if ((rc = walk_tree(&c, &cur->free_db, 0, "free-page list")) ||
        (rc = walk_tree(&c, &cur->main_db, 0, "main database")))
        goto out;
    rc = 0;
out:
    free(pg);
    close(c.fd);
    return rc;
}

int kv_store_verify_structure(const char *dir, char *err, size_t errlen)
{
    char path[4096];
    if (snprintf(path, sizeof(path), "%s/data.mdb", dir) >= (int)sizeof(path)) {
        snprintf(err, errlen, "data dir path too long");
        return -ENAMETOOLONG;
    }
    struct stat sb;
    if (stat(path, &sb) != 0) {
        if (errno == ENOENT)
            return 0; /* fresh data dir */
        int e = errno;
        snprintf(err, errlen, "cannot stat %s: %s", path, strerror(e));
        return -e;
    }
    if (sb.st_size == 0)
        return 0; /* created but never initialised: LMDB initialises it */
    uint64_t t0 = kv_mono_ns();
    kv_lmdb_verify_stats st;
    int rc = kv_lmdb_verify_path(path, 0, &st, err, errlen);
    double ms = (double)(kv_mono_ns() - t0) / 1e6;
    if (rc == 0)
        fprintf(stderr,
                "kvd: data file %s verified: %llu pages reached of %llu, %llu entries, %.1f MB "
                "read in %.0f ms\n",
                path, (unsigned long long)st.pages, (unsigned long long)st.last_pg + 1,
                (unsigned long long)st.entries, (double)st.bytes_read / 1e6, ms);
    return rc;
}

static int rec_fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int rec_fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -EBADMSG;
}

int kv_store_verify_records(kv_store *s, uint64_t max_records, char *err, size_t errlen)
{
    MDB_envinfo info;
    MDB_stat est;
    int rc = mdb_env_info(s->env, &info);
    if (rc == 0)
        rc = mdb_env_stat(s->env, &est);
    if (rc) {
        snprintf(err, errlen, "cannot read the LMDB environment info: %s", mdb_strerror(rc));
        return kv_mdb_err(rc);
    }
    int fd;
    struct stat sb;
    if (mdb_env_get_fd(s->env, &fd) == 0 && fstat(fd, &sb) == 0 &&
        ((uint64_t)info.me_last_pgno + 1) * est.ms_psize > (uint64_t)sb.st_size)
        return rec_fail(err, errlen, "data.mdb is corrupt: last page %zu is beyond the file end",
                        info.me_last_pgno);
    if (((uint64_t)info.me_last_pgno + 1) * est.ms_psize > info.me_mapsize)
        return rec_fail(err, errlen, "data.mdb is corrupt: last page %zu is beyond the map size",
                        info.me_last_pgno);
    MDB_txn *txn;
    if ((rc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn))) {
        snprintf(err, errlen, "cannot begin a read transaction: %s", mdb_strerror(rc));
        return kv_mdb_err(rc);
    }
    MDB_cursor *cur = NULL;
    MDB_val k, v;
    uint64_t n;
    int r2;
    /* meta: format and state were verified by kv_store_open, identity is verified by
     * kv_store_identity_check. */
    /* rev: checksums and sizes. */
    if ((rc = mdb_cursor_open(txn, s->rev, &cur)))
        goto lmdb_fail;
    n = 0;
    for (r2 = mdb_cursor_get(cur, &k, &v, MDB_FIRST); r2 == 0 && n < max_records;
         r2 = mdb_cursor_get(cur, &k, &v, MDB_NEXT), n++) {
        if (k.mv_size != KV_REVKEY_LEN || !kv_mdb_val_sane(txn, &v, KV_MDB_VAL_MAX) ||
            !kv_rec_verify(k.mv_data, v.mv_data, v.mv_size)) {
            rc = rec_fail(err, errlen,
                          "data.mdb is corrupt: revision record %llu (key size %zu, value size "
                          "%zu) fails its checksum",
                          (unsigned long long)n, k.mv_size, v.mv_size);
            goto out;
        }
    }
    if (r2 != 0 && r2 != MDB_NOTFOUND) {
        rc = r2;
        goto lmdb_fail;
    }
    mdb_cursor_close(cur);
    cur = NULL;
    /* kidx: every dup is a fixed-size index entry. */
    if ((rc = mdb_cursor_open(txn, s->kidx, &cur)))
        goto lmdb_fail;
    n = 0;
    for (r2 = mdb_cursor_get(cur, &k, &v, MDB_FIRST); r2 == 0 && n < max_records;
         r2 = mdb_cursor_get(cur, &k, &v, MDB_NEXT), n++) {
        if (k.mv_size == 0 || k.mv_size > 511 || v.mv_size != KV_DUP_LEN) {
            rc = rec_fail(err, errlen,
                          "data.mdb is corrupt: index entry %llu (key size %zu, entry size %zu)",
                          (unsigned long long)n, k.mv_size, v.mv_size);
            goto out;
        }
    }
    if (r2 != 0 && r2 != MDB_NOTFOUND) {
        rc = r2;
        goto lmdb_fail;
    }
    mdb_cursor_close(cur);
    cur = NULL;
    /* lkidx (long keys): handle-sized keys, fixed-size entries, each with its checked key. */
    if ((rc = mdb_cursor_open(txn, s->lkidx, &cur)))
        goto lmdb_fail;
    n = 0;
    for (r2 = mdb_cursor_get(cur, &k, &v, MDB_FIRST); r2 == 0 && n < max_records;
         r2 = mdb_cursor_get(cur, &k, &v, MDB_NEXT_NODUP), n++) {
        const uint8_t *lk;
        size_t lkl;
        if (k.mv_size != KV_LK_HANDLE || v.mv_size != KV_DUP_LEN ||
            kv_lk_key_get(s, txn, k.mv_data, &lk, &lkl) != 0) {
            rc = rec_fail(err, errlen,
                          "data.mdb is corrupt: long key index entry %llu (key size %zu, entry "
                          "size %zu) or its key record",
                          (unsigned long long)n, k.mv_size, v.mv_size);
            goto out;
        }
    }
    if (r2 != 0 && r2 != MDB_NOTFOUND) {
        rc = r2;
        goto lmdb_fail;
    }
    mdb_cursor_close(cur);
    cur = NULL;
    /* lease: checksums (the lease table decodes and verifies each record). */
    if ((rc = mdb_cursor_open(txn, s->leases.leases, &cur)))
        goto lmdb_fail;
    n = 0;
    for (r2 = mdb_cursor_get(cur, &k, &v, MDB_FIRST); r2 == 0 && n < max_records;
         r2 = mdb_cursor_get(cur, &k, &v, MDB_NEXT), n++) {
        kv_lease_rec lr;
        int64_t lid = 0;
        if (k.mv_size == 8)
            lid = (int64_t)kv_be64(k.mv_data);
        if (k.mv_size != 8 || kv_lease_table_get(&s->leases, txn, lid, &lr) != 0) {
            rc = rec_fail(err, errlen, "data.mdb is corrupt: lease record %llu does not verify",
                          (unsigned long long)n);
            goto out;
        }
    }
    if (r2 != 0 && r2 != MDB_NOTFOUND) {
        rc = r2;
        goto lmdb_fail;
    }
    rc = 0;
    goto out;
lmdb_fail:
    snprintf(err, errlen, "data.mdb: LMDB error while verifying: %s", mdb_strerror(rc));
    rc = kv_mdb_err(rc);
out:
    if (cur)
        mdb_cursor_close(cur);
    mdb_txn_abort(txn);
    return rc;
}
