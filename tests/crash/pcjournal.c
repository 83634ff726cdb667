/* pcjournal: replay of the powercut undo journal (contract in pcjournal.h). */
#include "pcjournal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct pc_undo {
    uint64_t page;
    const uint8_t *old; /* into the journal buffer */
    uint32_t len;
} pc_undo;

typedef struct pc_rfile {
    char *path;
    int dirty;
    uint64_t base; /* size at the last durable point */
    pc_undo *undo;
    size_t n, cap;
} pc_rfile;

typedef struct pc_replay {
    uint8_t *buf;
    size_t len;
    uint32_t page;
    pc_rfile *files;
    uint32_t n_files;
    uint64_t rng;
} pc_replay;

static void pc_err(char *err, size_t cap, const char *fmt, ...)
{
    if (!err || !cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, cap, fmt, ap);
    va_end(ap);
}

static uint64_t pc_rand(pc_replay *r)
{
    /* splitmix64 */
    uint64_t z = (r->rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int pc_read_all(const char *path, uint8_t **out, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = -errno;
        close(fd);
        return e;
    }
    size_t cap = (size_t)sb.st_size;
    uint8_t *b = malloc(cap ? cap : 1);
    if (!b) {
        close(fd);
        return -ENOMEM;
    }
    size_t got = 0;
    while (got < cap) {
        ssize_t n = read(fd, b + got, cap - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(fd);
    *out = b;
    *len = got;
    return 0;
}

static int pc_undo_add(pc_rfile *f, uint64_t page, const uint8_t *old, uint32_t len)
{
    for (size_t i = 0; i < f->n; i++)
        if (f->undo[i].page == page)
            return 0; /* the first pre-image since the durable point wins */
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 64;
        pc_undo *u = realloc(f->undo, cap * sizeof *u);
        if (!u)
            return -ENOMEM;
        f->undo = u;
        f->cap = cap;
    }
    f->undo[f->n++] = (pc_undo){page, old, len};
    return 0;
}

static void pc_undo_drop(pc_rfile *f, uint64_t first, uint64_t n)
{
    size_t w = 0;
    for (size_t i = 0; i < f->n; i++)
        if (f->undo[i].page < first || f->undo[i].page >= first + n)
            f->undo[w++] = f->undo[i];
    f->n = w;
}

/* Parses the journal into per-file live pre-images. */
static int pc_parse(pc_replay *r, kv_pc_stats *st, char *err, size_t errcap)
{
    if (r->len < 8 || memcmp(r->buf, KV_PC_MAGIC, 4) != 0) {
        pc_err(err, errcap, "journal: bad header (%zu bytes)", r->len);
        return -EBADMSG;
    }
    memcpy(&r->page, r->buf + 4, 4);
    if (r->page < 512 || r->page > (1u << 20)) {
        pc_err(err, errcap, "journal: page size %u", r->page);
        return -EBADMSG;
    }
    size_t pos = 8;
    for (;;) {
        uint32_t type, id;
        if (r->len - pos < 8)
            break; /* end, or a record torn by the kill */
        memcpy(&type, r->buf + pos, 4);
        memcpy(&id, r->buf + pos + 4, 4);
        size_t p = pos + 8, avail = r->len - p;
        uint64_t a = 0, b = 0;
        uint32_t n32 = 0;
        if (type == KV_PC_REC_ESCAPE) {
            if (avail < 4)
                break;
            memcpy(&n32, r->buf + p, 4);
            if (avail - 4 < n32)
                break;
            if (!st->escapes++)
                snprintf(st->escape, sizeof st->escape, "%.*s", (int)n32, r->buf + p + 4);
            pos = p + 4 + n32;
            st->records++;
            continue;
        }
        if (type == KV_PC_REC_FILE) {
            if (avail < 4)
                break;
            memcpy(&n32, r->buf + p, 4);
            if (avail - 4 < n32)
                break;
            if (id != r->n_files) {
                pc_err(err, errcap, "journal: file id %u out of order", id);
                return -EBADMSG;
            }
            pc_rfile *fs = realloc(r->files, (r->n_files + 1) * sizeof *fs);
            if (!fs)
                return -ENOMEM;
            r->files = fs;
            pc_rfile *f = &fs[r->n_files];
            memset(f, 0, sizeof *f);
            /* The name may end at the end of the buffer (a torn journal), so copy
             * exactly n32 bytes; strndup may look one byte past them. */
            f->path = malloc((size_t)n32 + 1);
            if (!f->path)
                return -ENOMEM;
            memcpy(f->path, r->buf + p + 4, n32);
            f->path[n32] = '\0';
            r->n_files++;
            pos = p + 4 + n32;
            st->records++;
            continue;
        }
        if (id >= r->n_files) {
            pc_err(err, errcap, "journal: record %u for unknown file %u", type, id);
            return -EBADMSG;
        }
        pc_rfile *f = &r->files[id];
        switch (type) {
        case KV_PC_REC_BASE:
            if (avail < 8)
                goto torn;
            memcpy(&a, r->buf + p, 8);
            f->base = a;
            f->dirty = 1;
            pos = p + 8;
            break;
        case KV_PC_REC_PRE: {
            if (avail < 12)
                goto torn;
            memcpy(&a, r->buf + p, 8);
            memcpy(&n32, r->buf + p + 8, 4);
            if (n32 > r->page) {
                pc_err(err, errcap, "journal: pre-image of %u bytes", n32);
                return -EBADMSG;
            }
            if (avail - 12 < n32)
                goto torn;
            int rc = pc_undo_add(f, a, r->buf + p + 12, n32);
            if (rc)
                return rc;
            pos = p + 12 + n32;
            break;
        }
        case KV_PC_REC_SYNC:
            f->n = 0;
            f->dirty = 0;
            st->syncs++;
            pos = p;
            break;
        case KV_PC_REC_DUR: {
            if (avail < 24)
                goto torn;
            uint64_t end;
            memcpy(&a, r->buf + p, 8);
            memcpy(&b, r->buf + p + 8, 8);
            memcpy(&end, r->buf + p + 16, 8);
            pc_undo_drop(f, a, b);
            st->durs++;
            if (end > f->base)
                f->base = end;
            pos = p + 24;
            break;
        }
        default:
            pc_err(err, errcap, "journal: unknown record type %u at %zu", type, pos);
            return -EBADMSG;
        }
        st->records++;
    }
torn:
    return 0;
}

static int pc_pwrite_all(int fd, const void *buf, size_t len, off_t off)
{
    const uint8_t *p = buf;
    while (len) {
        ssize_t n = pwrite(fd, p, len, off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return n < 0 ? -errno : -EIO;
        p += n;
        len -= (size_t)n;
        off += n;
    }
    return 0;
}

static int pc_apply(pc_replay *r, pc_rfile *f, kv_pc_mode mode, kv_pc_stats *st, char *err,
                    size_t errcap)
{
    if (!f->dirty && f->n == 0)
        return 0;
    int fd = open(f->path, O_RDWR | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) {
        /* The file was deleted (a WAL segment released after a log compaction). Directory
         * operations are taken as durable at once (README.md, "Limits"): its pages are gone
         * with it. */
        st->deleted++;
        return 0;
    }
    if (fd < 0) {
        pc_err(err, errcap, "open %s: %s", f->path, strerror(errno));
        return -errno;
    }
    int rc = 0;
    struct stat sb;
    uint8_t *page = calloc(1, r->page);
    if (!page || fstat(fd, &sb) != 0) {
        rc = page ? -errno : -ENOMEM;
        goto out;
    }
    uint64_t size = (uint64_t)sb.st_size;
    uint64_t final = f->base;
    if (mode == KV_PC_ROLLBACK_SUBSET && (pc_rand(r) & 1))
        final = size; /* the size reached the disk, the pages maybe not */
    st->unsynced_pages += f->n;
    /* Random order (Fisher-Yates), then each page independently kept or rolled back. */
    for (size_t i = f->n; i > 1; i--) {
        size_t j = (size_t)(pc_rand(r) % i);
        pc_undo t = f->undo[i - 1];
        f->undo[i - 1] = f->undo[j];
        f->undo[j] = t;
    }
    for (size_t i = 0; i < f->n; i++) {
        pc_undo *u = &f->undo[i];
        if (mode == KV_PC_ROLLBACK_SUBSET && (pc_rand(r) & 1))
            continue; /* the kernel had written this page back */
        uint64_t off = u->page * r->page;
        if (off >= final)
            continue; /* cut by the size anyway */
        size_t n = r->page;
        if (final - off < n)
            n = (size_t)(final - off);
        memset(page, 0, r->page);
        memcpy(page, u->old, u->len); /* bytes past the old end of file read as zeros */
        if ((rc = pc_pwrite_all(fd, page, n, (off_t)off))) {
            pc_err(err, errcap, "pwrite %s: %s", f->path, strerror(-rc));
            goto out;
        }
        st->restored_pages++;
    }
    if (final != size) {
        if (ftruncate(fd, (off_t) final) != 0) {
            rc = -errno;
            pc_err(err, errcap, "ftruncate %s: %s", f->path, strerror(errno));
            goto out;
        }
        st->truncated++;
    }
    if (fsync(fd) != 0)
        rc = -errno;
out:
    free(page);
    close(fd);
    return rc;
}

int kv_pc_replay(const char *journal, kv_pc_mode mode, uint64_t seed, kv_pc_stats *st, char *err,
                 size_t errcap)
{
    kv_pc_stats local;
    if (!st)
        st = &local;
    memset(st, 0, sizeof *st);
    pc_replay r = {.rng = seed};
    int rc = pc_read_all(journal, &r.buf, &r.len);
    if (rc) {
        pc_err(err, errcap, "read %s: %s", journal, strerror(-rc));
        return rc;
    }
    if ((rc = pc_parse(&r, st, err, errcap)))
        goto out;
    st->files = r.n_files;
    for (uint32_t i = 0; i < r.n_files && !rc; i++)
        rc = pc_apply(&r, &r.files[i], mode, st, err, errcap);
out:
    for (uint32_t i = 0; i < r.n_files; i++) {
        free(r.files[i].path);
        free(r.files[i].undo);
    }
    free(r.files);
    free(r.buf);
    return rc;
}
