/* pcjournal: replay of the powercut undo journal (contract in pcjournal.h). */
#include "pcjournal.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
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
    char *path; /* where the file is at the cut (after renames; a graveyard link; NULL: gone) */
    int dirty;
    uint64_t base; /* size at the last durable point */
    pc_undo *undo;
    size_t n, cap;
} pc_rfile;

/* A directory operation (pcjournal.h). */
typedef struct pc_dop {
    uint32_t type;
    uint64_t dev, parent[2], ino, aux;
    char *p[3];    /* "" when absent */
    int synced[2]; /* parent k fsynced after the operation */
    int failed;    /* FAIL followed, or it was in flight and did not happen */
} pc_dop;

typedef struct pc_replay {
    pc_dop *ops;
    size_t n_ops, cap_ops;
    int op_open; /* the last op's path effects are not applied yet (a FAIL may follow) */
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

static char *pc_strndup(const uint8_t *b, size_t n)
{
    char *s = malloc(n + 1);
    if (s) {
        memcpy(s, b, n);
        s[n] = '\0';
    }
    return s;
}

/* Parses a directory operation's body. -EAGAIN: torn. */
static int pc_dop_parse(pc_replay *r, uint32_t type, const uint8_t *b, size_t avail, size_t *used)
{
    uint32_t len[3];
    if (avail < 52)
        return -EAGAIN;
    memcpy(len, b + 40, 12);
    size_t total = (size_t)len[0] + len[1] + len[2];
    if (avail - 52 < total)
        return -EAGAIN;
    if (r->n_ops == r->cap_ops) {
        size_t cap = r->cap_ops ? r->cap_ops * 2 : 64;
        pc_dop *v = realloc(r->ops, cap * sizeof *v);
        if (!v)
            return -ENOMEM;
        r->ops = v;
        r->cap_ops = cap;
    }
    pc_dop *op = &r->ops[r->n_ops];
    memset(op, 0, sizeof *op);
    op->type = type;
    memcpy(&op->dev, b, 8);
    memcpy(op->parent, b + 8, 16);
    memcpy(&op->ino, b + 24, 8);
    memcpy(&op->aux, b + 32, 8);
    const uint8_t *at = b + 52;
    for (int k = 0; k < 3; k++) {
        if (!(op->p[k] = pc_strndup(at, len[k]))) {
            for (int j = 0; j < k; j++)
                free(op->p[j]);
            return -ENOMEM;
        }
        at += len[k];
    }
    r->n_ops++;
    r->op_open = 1;
    *used = 52 + total;
    return 0;
}

/* Replaces *path by with + (*path past its first n bytes); NULL with: the file is gone. */
static void pc_path_set(char **path, const char *with, size_t n)
{
    char *np = NULL;
    if (with && *with) {
        size_t a = strlen(with), b = strlen(*path + n);
        np = malloc(a + b + 1);
        if (np) {
            memcpy(np, with, a);
            memcpy(np + a, *path + n, b + 1);
        }
    }
    free(*path);
    *path = np;
}

/* The last op completed (no FAIL followed): where the files it moved or removed are now. */
static void pc_op_close(pc_replay *r)
{
    if (!r->op_open)
        return;
    r->op_open = 0;
    pc_dop *op = &r->ops[r->n_ops - 1];
    if (op->failed)
        return;
    size_t n0 = strlen(op->p[0]);
    for (uint32_t i = 0; i < r->n_files; i++) {
        char **path = &r->files[i].path;
        if (!*path)
            continue;
        if (op->type == KV_PC_REC_UNLINK && !strcmp(*path, op->p[0])) {
            pc_path_set(path, op->p[2], strlen(*path)); /* into the graveyard */
        } else if (op->type == KV_PC_REC_RENAME) {
            if (!strcmp(*path, op->p[1]))
                pc_path_set(path, op->p[2], strlen(*path)); /* replaced: graveyard */
            else if (!strncmp(*path, op->p[0], n0) && ((*path)[n0] == '/' || !(*path)[n0]))
                pc_path_set(path, op->p[1], n0); /* moved, or its directory was */
        }
    }
}

/* A directory sync: every earlier op whose parent it is has that parent synced. */
static void pc_dirsync(pc_replay *r, uint64_t dev, uint64_t ino)
{
    for (size_t i = 0; i < r->n_ops; i++) {
        pc_dop *op = &r->ops[i];
        for (int k = 0; k < 2; k++)
            if (op->parent[k] &&
                (ino ? (dev == op->dev && ino == op->parent[k]) : (!dev || dev == op->dev)))
                op->synced[k] = 1;
    }
}

static int pc_dop_durable(const pc_dop *op)
{
    return (!op->parent[0] || op->synced[0]) && (!op->parent[1] || op->synced[1]);
}

static int pc_ino_at(const char *path, uint64_t ino)
{
    struct stat sb;
    return lstat(path, &sb) == 0 && (uint64_t)sb.st_ino == ino;
}

/* The op was in flight when the process died (its record is the journal's last): did it
 * happen? Judged from what is there now (nothing ran after it). */
static int pc_dop_happened(const pc_dop *op)
{
    struct stat sb;
    switch (op->type) {
    case KV_PC_REC_CREATE:
    case KV_PC_REC_MKDIR:
        return lstat(op->p[0], &sb) == 0; /* it did not exist before */
    case KV_PC_REC_RENAME:
    case KV_PC_REC_UNLINK:
    case KV_PC_REC_RMDIR:
        return !pc_ino_at(op->p[0], op->ino);
    case KV_PC_REC_LINK:
        return pc_ino_at(op->p[1], op->ino);
    default:
        return 1;
    }
}

/* Parses the journal into per-file live pre-images and the directory operations. */
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
        if (type != KV_PC_REC_FAIL)
            pc_op_close(r); /* the open op completed: anything after it ran after it */
        if (type == KV_PC_REC_FAIL) {
            if (r->n_ops && r->op_open)
                r->ops[r->n_ops - 1].failed = 1;
            r->op_open = 0;
            pos = p;
            st->records++;
            continue;
        }
        if (type >= KV_PC_REC_CREATE && type <= KV_PC_REC_LINK) {
            size_t used = 0;
            int rc = pc_dop_parse(r, type, r->buf + p, avail, &used);
            if (rc == -EAGAIN)
                break; /* torn */
            if (rc)
                return rc;
            pos = p + used;
            st->records++;
            continue;
        }
        if (type == KV_PC_REC_DIRSYNC) {
            if (avail < 20)
                break;
            memcpy(&a, r->buf + p, 8);
            memcpy(&b, r->buf + p + 8, 8);
            memcpy(&n32, r->buf + p + 16, 4);
            if (avail - 20 < n32)
                break;
            pc_dirsync(r, a, b);
            pos = p + 20 + n32;
            st->records++;
            continue;
        }
        if (type == KV_PC_REC_FILE) {
            if (avail < 20)
                break;
            memcpy(&n32, r->buf + p + 16, 4);
            if (avail - 20 < n32)
                break;
            p += 16; /* dev, ino: the replay follows the file by its path */
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
    if (r->op_open && r->n_ops && !pc_dop_happened(&r->ops[r->n_ops - 1]))
        r->ops[r->n_ops - 1].failed = 1;
    pc_op_close(r);
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
    int fd = f->path ? open(f->path, O_RDWR | O_CLOEXEC) : -1;
    if (!f->path || (fd < 0 && errno == ENOENT)) {
        /* The file is gone for good (a WAL segment released after a log compaction, its
         * removal durable, so the shim dropped its graveyard link): its pages went with it. */
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

/* Whether the directory holding path's entry is still inode ino (the op's parent). */
static int pc_parent_is(const char *path, uint64_t ino)
{
    char *d = strdup(path);
    if (!d)
        return 0;
    char *slash = strrchr(d, '/');
    if (slash == d)
        slash[1] = '\0';
    else if (slash)
        *slash = '\0';
    int same = pc_ino_at(d, ino);
    free(d);
    return same;
}

static int pc_rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)ftw;
    return (flag == FTW_DP ? rmdir(path) : unlink(path)) ? -1 : 0;
}

/* Undoes one directory operation. Returns 1 when done, 0 when moot (its object or parent
 * was replaced by a later operation that stays), or a negative errno. */
static int pc_dop_undo(const pc_dop *op)
{
    struct stat sb;
    const char *p0 = op->p[0], *p1 = op->p[1], *g = op->p[2];
    uint64_t par1 = op->parent[1] ? op->parent[1] : op->parent[0];
    switch (op->type) {
    case KV_PC_REC_CREATE:
        if (!pc_parent_is(p0, op->parent[0]) || lstat(p0, &sb) != 0 || S_ISDIR(sb.st_mode))
            return 0;
        return unlink(p0) ? -errno : 1;
    case KV_PC_REC_MKDIR:
        if (!pc_parent_is(p0, op->parent[0]) || lstat(p0, &sb) != 0 || !S_ISDIR(sb.st_mode))
            return 0;
        return nftw(p0, pc_rm_one, 16, FTW_DEPTH | FTW_PHYS) ? -errno : 1;
    case KV_PC_REC_RENAME:
        if (!pc_ino_at(p1, op->ino) || !pc_parent_is(p0, op->parent[0]) ||
            !pc_parent_is(p1, par1) || lstat(p0, &sb) == 0)
            return 0;
        if (rename(p1, p0))
            return -errno;
        if (g[0] && link(g, p1))
            return -errno; /* the file it replaced comes back */
        return 1;
    case KV_PC_REC_UNLINK:
        if (!pc_parent_is(p0, op->parent[0]) || lstat(p0, &sb) == 0)
            return 0;
        if (!g[0])
            return -ENOENT; /* no copy kept (the shim raised an ESCAPE) */
        return link(g, p0) ? -errno : 1;
    case KV_PC_REC_RMDIR:
        if (!pc_parent_is(p0, op->parent[0]) || lstat(p0, &sb) == 0)
            return 0;
        return mkdir(p0, (mode_t)op->aux) ? -errno : 1;
    case KV_PC_REC_LINK:
        if (!pc_parent_is(p1, op->parent[0]) || !pc_ino_at(p1, op->ino))
            return 0;
        return unlink(p1) ? -errno : 1;
    default:
        return -EINVAL;
    }
}

static const char *pc_dop_name(uint32_t type)
{
    static const char *const names[] = {"create", "mkdir", "rename", "unlink", "rmdir", "link"};
    return type >= KV_PC_REC_CREATE && type <= KV_PC_REC_LINK ? names[type - KV_PC_REC_CREATE]
                                                              : "?";
}

/* The directory half of the power loss (after the pages): undoes the non-durable operations
 * (all of them, or all but a random prefix in journal order), newest first. */
static int pc_dirs_apply(pc_replay *r, kv_pc_mode mode, kv_pc_stats *st, char *err, size_t errcap)
{
    size_t *nd = malloc((r->n_ops + 1) * sizeof *nd), n = 0;
    if (!nd)
        return -ENOMEM;
    for (size_t i = 0; i < r->n_ops; i++) {
        if (r->ops[i].failed)
            continue;
        st->dirops++;
        if (pc_dop_durable(&r->ops[i]))
            st->dirops_durable++;
        else
            nd[n++] = i;
    }
    size_t keep = mode == KV_PC_ROLLBACK_SUBSET ? (size_t)(pc_rand(r) % (n + 1)) : 0;
    int rc = 0;
    for (size_t k = n; k-- > keep;) {
        const pc_dop *op = &r->ops[nd[k]];
        int u = pc_dop_undo(op);
        if (u < 0) {
            rc = u;
            pc_err(err, errcap, "undoing %s %s%s%s: %s", pc_dop_name(op->type), op->p[0],
                   op->p[1][0] ? " -> " : "", op->p[1], strerror(-u));
            break;
        }
        if (u)
            st->dirops_undone++;
        else
            st->dirops_moot++;
    }
    free(nd);
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
    if (!rc)
        rc = pc_dirs_apply(&r, mode, st, err, errcap);
    if (!rc) {
        char graves[4200];
        snprintf(graves, sizeof graves, "%s%s", journal, KV_PC_GRAVES_SUFFIX);
        if (nftw(graves, pc_rm_one, 16, FTW_DEPTH | FTW_PHYS) && errno != ENOENT) {
            rc = -errno;
            pc_err(err, errcap, "removing %s: %s", graves, strerror(errno));
        }
    }
out:
    for (uint32_t i = 0; i < r.n_files; i++) {
        free(r.files[i].path);
        free(r.files[i].undo);
    }
    for (size_t i = 0; i < r.n_ops; i++)
        for (int k = 0; k < 3; k++)
            free(r.ops[i].p[k]);
    free(r.ops);
    free(r.files);
    free(r.buf);
    return rc;
}
