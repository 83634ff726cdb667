/*
 * powercut: an LD_PRELOAD shim that records, for the files of one directory, what a power
 * loss could undo. Built as libkvd_powercut.so; the journal format and the model are in
 * pcjournal.h, the replay in pcjournal.c, the story in README.md.
 *
 * Environment (read once, by the shim's constructor):
 *   POWERCUT_DIR      directory whose regular files are tracked (unset: the shim is inert)
 *   POWERCUT_JOURNAL  journal path (created/truncated; must not be inside POWERCUT_DIR)
 *   POWERCUT_EXCLUDE  comma-separated base names not tracked (default "lock.mdb": LMDB's
 *                     lock file is a shared-memory region it rebuilds at the first open)
 *   POWERCUT_KILL_AT  N > 0: the process SIGKILLs itself as its N-th tracked operation (write,
 *                     size change or sync of a tracked file) starts, before any of it happens:
 *                     a cut point exactly between two file operations
 *
 * Interposed: write, pwrite, pwrite64, writev, pwritev, pwritev64, pwritev2, ftruncate,
 * ftruncate64, fsync, fdatasync, sync, syncfs, msync, sync_file_range, mmap, mmap64,
 * mprotect, munmap, fallocate, copy_file_range; for the directory operations: open, open64,
 * openat, openat64, creat, creat64 (O_CREAT making a new file), mkstemp, mkostemp, mkdir,
 * mkdirat, rename, renameat, renameat2, unlink, unlinkat, rmdir, link, linkat, and fsync /
 * fdatasync of a directory; close (forgets the descriptor). Only calls that go through the
 * dynamic symbol table are seen (LMDB's are; glibc-internal ones such as stdio's or
 * posix_fallocate's are not).
 *
 * Directory operations count as tracked operations for POWERCUT_KILL_AT: an op under
 * POWERCUT_DIR (or making/removing POWERCUT_DIR itself), and an fsync of a directory in it,
 * of it or of its parent. Their record is written before the call (a FAIL record follows when
 * the call fails); an unlinked or replaced regular file is first hard-linked into the
 * graveyard <POWERCUT_JOURNAL>.graves/ (pcjournal.h).
 *
 * Exception to the house rule on globals: an interposer has no caller to hand it state, so
 * the shim keeps one static struct, guarded by one mutex held across each tracked operation
 * (record, then the real call, then its completion record). That serializes writes to the
 * tracked files, which the test accepts (LMDB has one writer anyway).
 */
#include "pcjournal.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#define PC_MAX_FILES 64
#define PC_MAX_FDS 4096
#define PC_MAX_MAPS 64
#define PC_MAX_GRAVES 1024

#define PC_EXPORT __attribute__((visibility("default")))

typedef struct pc_file {
    dev_t dev;
    ino_t ino;
    uint32_t id;
    int dirty;        /* a BASE record was written since the last sync */
    int gone;         /* its last name was unlinked/replaced: the inode may be reused */
    uint8_t *saved;   /* bitmap: page has a pre-image since the last sync */
    size_t saved_cap; /* bytes in saved */
} pc_file;

typedef struct pc_fd {
    dev_t dev;
    ino_t ino;
    int state; /* 0 unknown, 1 tracked, 2 not tracked */
    int dsync; /* opened O_DSYNC/O_SYNC */
    pc_file *file;
} pc_fd;

typedef struct pc_map {
    void *addr;
    size_t len;
    off_t off;
    pc_file *file;
} pc_map;

/* A graveyard link whose removal is not durable yet (dropped when it is). */
typedef struct pc_grave {
    int used;
    dev_t dev;
    ino_t parent[2]; /* 0: none */
    int synced[2];
    uint64_t n; /* <graves>/<n> */
} pc_grave;

/* A directory operation's record (pcjournal.h). */
typedef struct pc_op {
    uint32_t type;
    uint64_t dev, parent[2], ino, aux;
    const char *p[3];
} pc_op;

typedef struct pc_real {
    ssize_t (*write)(int, const void *, size_t);
    ssize_t (*pwrite)(int, const void *, size_t, off_t);
    ssize_t (*pwrite64)(int, const void *, size_t, off_t);
    ssize_t (*writev)(int, const struct iovec *, int);
    ssize_t (*pwritev)(int, const struct iovec *, int, off_t);
    ssize_t (*pwritev64)(int, const struct iovec *, int, off_t);
    ssize_t (*pwritev2)(int, const struct iovec *, int, off_t, int);
    int (*ftruncate)(int, off_t);
    int (*ftruncate64)(int, off_t);
    int (*fsync)(int);
    int (*fdatasync)(int);
    void (*sync)(void);
    int (*syncfs)(int);
    int (*msync)(void *, size_t, int);
    int (*sync_file_range)(int, off_t, off_t, unsigned int);
    void *(*mmap)(void *, size_t, int, int, int, off_t);
    void *(*mmap64)(void *, size_t, int, int, int, off_t);
    int (*mprotect)(void *, size_t, int);
    int (*munmap)(void *, size_t);
    int (*fallocate)(int, int, off_t, off_t);
    ssize_t (*copy_file_range)(int, off_t *, int, off_t *, size_t, unsigned int);
    int (*open)(const char *, int, ...);
    int (*open64)(const char *, int, ...);
    int (*openat)(int, const char *, int, ...);
    int (*openat64)(int, const char *, int, ...);
    int (*creat)(const char *, mode_t);
    int (*creat64)(const char *, mode_t);
    int (*mkstemp)(char *);
    int (*mkostemp)(char *, int);
    int (*mkdir)(const char *, mode_t);
    int (*mkdirat)(int, const char *, mode_t);
    int (*rename)(const char *, const char *);
    int (*renameat)(int, const char *, int, const char *);
    int (*renameat2)(int, const char *, int, const char *, unsigned int);
    int (*unlink)(const char *);
    int (*unlinkat)(int, const char *, int);
    int (*rmdir)(const char *);
    int (*link)(const char *, const char *);
    int (*linkat)(int, const char *, int, const char *, int);
    int (*close)(int);
} pc_real;

typedef struct pc_state {
    pthread_mutex_t mu;
    int inited;
    int ctor_done;
    uint64_t ops;     /* tracked operations started (writes, size changes, syncs) */
    uint64_t kill_at; /* POWERCUT_KILL_AT: SIGKILL the process as operation kill_at starts */
    int active;
    int jfd;
    size_t page;
    char dir[PATH_MAX];
    size_t dir_len;
    char dir_parent[PATH_MAX];  /* its parent: an fsync of it makes POWERCUT_DIR's entry durable */
    char graves[PATH_MAX - 64]; /* <POWERCUT_JOURNAL>.graves */
    uint64_t graves_n;
    pc_grave grave[PC_MAX_GRAVES];
    char path[4][PATH_MAX]; /* scratch for directory operations (lock held) */
    char exclude[1024];
    pc_file files[PC_MAX_FILES];
    uint32_t n_files;
    pc_fd fds[PC_MAX_FDS];
    pc_map maps[PC_MAX_MAPS];
    uint8_t *buf; /* page-sized scratch for pre-images */
    pc_real real;
} pc_state;

static pc_state g_pc = {.mu = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP, .jfd = -1};

#define REAL(name) (g_pc.real.name ? g_pc.real.name : pc_resolve_##name())

static void pc_die(const char *what)
{
    char msg[512];
    int n = snprintf(msg, sizeof msg, "powercut: fatal: %s (errno %d)\n", what, errno);
    ssize_t w = syscall(SYS_write, 2, msg, (size_t)n);
    (void)w;
    abort();
}

/* Real functions are looked up on first use, without the lock (dlsym may allocate; two
 * threads racing store the same pointer). */
#define PC_RESOLVER(name)                                                                          \
    static __typeof__(g_pc.real.name) pc_resolve_##name(void)                                      \
    {                                                                                              \
        __typeof__(g_pc.real.name) f;                                                              \
        *(void **)&f = dlsym(RTLD_NEXT, #name);                                                    \
        if (!f)                                                                                    \
            pc_die("missing real " #name);                                                         \
        g_pc.real.name = f;                                                                        \
        return f;                                                                                  \
    }
PC_RESOLVER(write)
PC_RESOLVER(pwrite)
PC_RESOLVER(pwrite64)
PC_RESOLVER(writev)
PC_RESOLVER(pwritev)
PC_RESOLVER(pwritev64)
PC_RESOLVER(pwritev2)
PC_RESOLVER(ftruncate)
PC_RESOLVER(ftruncate64)
PC_RESOLVER(fsync)
PC_RESOLVER(fdatasync)
PC_RESOLVER(sync)
PC_RESOLVER(syncfs)
PC_RESOLVER(msync)
PC_RESOLVER(sync_file_range)
PC_RESOLVER(mmap)
PC_RESOLVER(mmap64)
PC_RESOLVER(mprotect)
PC_RESOLVER(munmap)
PC_RESOLVER(fallocate)
PC_RESOLVER(copy_file_range)
PC_RESOLVER(open)
PC_RESOLVER(open64)
PC_RESOLVER(openat)
PC_RESOLVER(openat64)
PC_RESOLVER(creat)
PC_RESOLVER(creat64)
PC_RESOLVER(mkstemp)
PC_RESOLVER(mkostemp)
PC_RESOLVER(mkdir)
PC_RESOLVER(mkdirat)
PC_RESOLVER(rename)
PC_RESOLVER(renameat)
PC_RESOLVER(renameat2)
PC_RESOLVER(unlink)
PC_RESOLVER(unlinkat)
PC_RESOLVER(rmdir)
PC_RESOLVER(link)
PC_RESOLVER(linkat)
PC_RESOLVER(close)

/* Writes all of buf to the journal with the real write; dies on failure (a journal with a
 * hole would make the replay lie). */
static void pc_jwrite(const void *buf, size_t len)
{
    const uint8_t *p = buf;
    while (len) {
        ssize_t n = REAL(write)(g_pc.jfd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            pc_die("journal write");
        p += n;
        len -= (size_t)n;
    }
}

/* One record assembled in a buffer so it reaches the journal in one write when it can. */
static void pc_record(uint32_t type, uint32_t file_id, const void *a, size_t alen, const void *b,
                      size_t blen)
{
    uint8_t head[8 + 64];
    memcpy(head, &type, 4);
    memcpy(head + 4, &file_id, 4);
    if (alen > 64)
        pc_die("record head too long");
    memcpy(head + 8, a, alen);
    if (!blen) {
        pc_jwrite(head, 8 + alen);
        return;
    }
    struct iovec iov[2] = {{head, 8 + alen}, {(void *)b, blen}};
    size_t total = 8 + alen + blen;
    ssize_t n;
    do {
        n = REAL(writev)(g_pc.jfd, iov, 2);
    } while (n < 0 && errno == EINTR);
    if (n == (ssize_t)total)
        return;
    if (n < 0 || (size_t)n < 8 + alen)
        pc_die("journal writev");
    pc_jwrite((const uint8_t *)b + ((size_t)n - 8 - alen), total - (size_t)n);
}

/* Resolves (dirfd, path) as a directory operation sees it: the parent with every symlink
 * resolved (realpath), then the last component (not followed). Fills out (PATH_MAX) and the
 * parent's stat. Returns 0, or -1 when the parent cannot be resolved (the call will fail, or
 * the name is "." or ".."). */
static int pc_resolve(int dirfd, const char *path, char *out, struct stat *pst)
{
    char tmp[PATH_MAX], dpath[PATH_MAX + 80], rdir[PATH_MAX];
    size_t n = path ? strlen(path) : 0;
    if (n == 0 || n >= sizeof tmp)
        return -1;
    memcpy(tmp, path, n + 1);
    while (n > 1 && tmp[n - 1] == '/')
        tmp[--n] = '\0';
    char *slash = strrchr(tmp, '/');
    const char *base = slash ? slash + 1 : tmp, *dpart = ".";
    if (slash == tmp)
        dpart = "/";
    else if (slash) {
        *slash = '\0';
        dpart = tmp;
    }
    if (!*base || !strcmp(base, ".") || !strcmp(base, ".."))
        return -1;
    if (dpart[0] == '/' || dirfd == AT_FDCWD) {
        snprintf(dpath, sizeof dpath, "%s", dpart);
    } else {
        char link[64], dl[PATH_MAX];
        snprintf(link, sizeof link, "/proc/self/fd/%d", dirfd);
        ssize_t k = readlink(link, dl, sizeof dl - 1);
        if (k <= 0)
            return -1;
        dl[k] = '\0';
        snprintf(dpath, sizeof dpath, "%s/%s", dl, dpart);
    }
    if (!realpath(dpath, rdir) || stat(rdir, pst) != 0)
        return -1;
    int m = snprintf(out, PATH_MAX, "%s/%s", strcmp(rdir, "/") ? rdir : "", base);
    return m > 0 && m < PATH_MAX ? 0 : -1;
}

/* Whether abs is POWERCUT_DIR or a path under it. */
static int pc_under(const char *abs)
{
    return g_pc.dir_len && strncmp(abs, g_pc.dir, g_pc.dir_len) == 0 &&
           (abs[g_pc.dir_len] == '\0' || abs[g_pc.dir_len] == '/');
}

/* Empties (or makes) the graveyard; a previous run's links are stale. */
static void pc_graves_init(const char *jpath)
{
    if (snprintf(g_pc.graves, sizeof g_pc.graves, "%s%s", jpath, KV_PC_GRAVES_SUFFIX) >=
        (int)sizeof g_pc.graves)
        pc_die("POWERCUT_JOURNAL too long");
    DIR *d = opendir(g_pc.graves);
    if (d) {
        struct dirent *de;
        while ((de = readdir(d)))
            if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
                REAL(unlinkat)(dirfd(d), de->d_name, 0);
        closedir(d);
    } else if (REAL(mkdir)(g_pc.graves, 0700) != 0) {
        pc_die("cannot make the graveyard <POWERCUT_JOURNAL>.graves");
    }
}

/* Reads the environment once the shim's constructor ran: calls made earlier (a sanitizer
 * runtime's own initialisation, before the environment is reliable) pass through untracked;
 * none of them can concern POWERCUT_DIR, which only the program opens. */
static void pc_init_locked(void)
{
    if (g_pc.inited || !g_pc.ctor_done)
        return;
    g_pc.inited = 1;
    const char *dir = getenv("POWERCUT_DIR");
    const char *jpath = getenv("POWERCUT_JOURNAL");
    if (!dir || !*dir || !jpath || !*jpath)
        return;
    struct stat psb;
    if (!realpath(dir, g_pc.dir) && pc_resolve(AT_FDCWD, dir, g_pc.dir, &psb) != 0) {
        /* Neither the directory nor its parent exist yet: keep it as given. */
        snprintf(g_pc.dir, sizeof g_pc.dir, "%s", dir);
    }
    g_pc.dir_len = strlen(g_pc.dir);
    while (g_pc.dir_len > 1 && g_pc.dir[g_pc.dir_len - 1] == '/')
        g_pc.dir[--g_pc.dir_len] = '\0';
    snprintf(g_pc.dir_parent, sizeof g_pc.dir_parent, "%s", g_pc.dir);
    char *sl = strrchr(g_pc.dir_parent, '/');
    if (sl == g_pc.dir_parent)
        sl[1] = '\0';
    else if (sl)
        *sl = '\0';
    const char *ka = getenv("POWERCUT_KILL_AT");
    g_pc.kill_at = ka && *ka ? strtoull(ka, NULL, 10) : 0;
    const char *ex = getenv("POWERCUT_EXCLUDE");
    snprintf(g_pc.exclude, sizeof g_pc.exclude, ",%s,", ex ? ex : "lock.mdb");
    long ps = sysconf(_SC_PAGESIZE);
    g_pc.page = ps > 0 ? (size_t)ps : 4096;
    g_pc.buf = malloc(g_pc.page);
    if (!g_pc.buf)
        pc_die("malloc");
    g_pc.jfd = REAL(open)(jpath, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600);
    if (g_pc.jfd < 0)
        pc_die("cannot open POWERCUT_JOURNAL");
    pc_graves_init(jpath);
    uint8_t hdr[8];
    memcpy(hdr, KV_PC_MAGIC, 4);
    uint32_t page32 = (uint32_t)g_pc.page;
    memcpy(hdr + 4, &page32, 4);
    pc_jwrite(hdr, sizeof hdr);
    g_pc.active = 1;
}

static pc_file *pc_file_get(const struct stat *sb, const char *path)
{
    for (uint32_t i = 0; i < g_pc.n_files; i++)
        if (!g_pc.files[i].gone && g_pc.files[i].dev == sb->st_dev &&
            g_pc.files[i].ino == sb->st_ino)
            return &g_pc.files[i];
    if (g_pc.n_files == PC_MAX_FILES)
        pc_die("too many tracked files");
    pc_file *f = &g_pc.files[g_pc.n_files];
    memset(f, 0, sizeof *f);
    f->dev = sb->st_dev;
    f->ino = sb->st_ino;
    f->id = g_pc.n_files++;
    uint8_t head[20];
    uint64_t dev = (uint64_t)sb->st_dev, ino = (uint64_t)sb->st_ino;
    uint32_t len = (uint32_t)strlen(path);
    memcpy(head, &dev, 8);
    memcpy(head + 8, &ino, 8);
    memcpy(head + 16, &len, 4);
    pc_record(KV_PC_REC_FILE, f->id, head, sizeof head, path, len);
    return f;
}

/* The tracking entry of fd, or NULL when fd is not a tracked regular file. Lock held. */
static pc_fd *pc_fd_get(int fd)
{
    if (!g_pc.active || fd < 0 || fd == g_pc.jfd)
        return NULL;
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode))
        return NULL;
    if (fd >= PC_MAX_FDS)
        pc_die("descriptor beyond the shim's table");
    pc_fd *e = &g_pc.fds[fd];
    if (e->state && e->dev == sb.st_dev && e->ino == sb.st_ino && !(e->file && e->file->gone))
        return e->state == 1 ? e : NULL;
    /* New or reused descriptor: look at its path. */
    memset(e, 0, sizeof *e);
    e->dev = sb.st_dev;
    e->ino = sb.st_ino;
    e->state = 2;
    char link[64], path[PATH_MAX];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (n <= 0)
        return NULL;
    path[n] = '\0';
    if ((size_t)n <= g_pc.dir_len || strncmp(path, g_pc.dir, g_pc.dir_len) != 0 ||
        path[g_pc.dir_len] != '/')
        return NULL;
    static const char deleted[] = " (deleted)"; /* written after its unlink: not modelled */
    if ((size_t)n > sizeof deleted && !strcmp(path + n - (sizeof deleted - 1), deleted))
        return NULL;
    const char *base = strrchr(path, '/') + 1;
    char key[PATH_MAX + 2];
    snprintf(key, sizeof key, ",%s,", base);
    if (strstr(g_pc.exclude, key))
        return NULL;
    int fl = fcntl(fd, F_GETFL);
    e->dsync = fl >= 0 && (fl & O_DSYNC) ? 1 : 0;
    e->file = pc_file_get(&sb, path);
    e->state = 1;
    return e;
}

/* Counts a tracked operation about to start; the cut point when it is the chosen one. */
static void pc_tick(void)
{
    if (++g_pc.ops != g_pc.kill_at)
        return;
    kill(getpid(), SIGKILL);
    for (;;)
        pause();
}

static int pc_saved_test_set(pc_file *f, uint64_t page)
{
    size_t byte = (size_t)(page / 8);
    if (byte >= f->saved_cap) {
        size_t cap = f->saved_cap ? f->saved_cap : 4096;
        while (cap <= byte)
            cap *= 2;
        uint8_t *p = realloc(f->saved, cap);
        if (!p)
            pc_die("realloc");
        memset(p + f->saved_cap, 0, cap - f->saved_cap);
        f->saved = p;
        f->saved_cap = cap;
    }
    uint8_t bit = (uint8_t)(1u << (page % 8));
    int was = (f->saved[byte] & bit) != 0;
    f->saved[byte] |= bit;
    return was;
}

static void pc_saved_clear(pc_file *f, uint64_t page)
{
    size_t byte = (size_t)(page / 8);
    if (byte < f->saved_cap)
        f->saved[byte] &= (uint8_t) ~(1u << (page % 8));
}

static void pc_mark_dirty(int fd, pc_file *f)
{
    if (f->dirty)
        return;
    struct stat sb;
    if (fstat(fd, &sb) != 0)
        pc_die("fstat");
    uint64_t size = (uint64_t)sb.st_size;
    pc_record(KV_PC_REC_BASE, f->id, &size, 8, NULL, 0);
    f->dirty = 1;
}

/* Saves the pre-image of every page of [off, off+len) not saved since the last sync. */
static void pc_save_range(int fd, pc_file *f, uint64_t off, uint64_t len)
{
    if (!len)
        return;
    pc_mark_dirty(fd, f);
    uint64_t first = off / g_pc.page, last = (off + len - 1) / g_pc.page;
    for (uint64_t p = first; p <= last; p++) {
        if (pc_saved_test_set(f, p))
            continue;
        size_t got = 0;
        while (got < g_pc.page) {
            ssize_t n = pread(fd, g_pc.buf + got, g_pc.page - got, (off_t)(p * g_pc.page + got));
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0) {
                /* Write-only descriptor (LMDB's O_DSYNC meta fd): read through /proc. */
                char link[64];
                snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
                int rfd = open(link, O_RDONLY | O_CLOEXEC);
                if (rfd < 0)
                    pc_die("cannot read a pre-image");
                got = 0;
                while (got < g_pc.page) {
                    n = pread(rfd, g_pc.buf + got, g_pc.page - got, (off_t)(p * g_pc.page + got));
                    if (n < 0 && errno == EINTR)
                        continue;
                    if (n < 0)
                        pc_die("pread pre-image");
                    if (n == 0)
                        break;
                    got += (size_t)n;
                }
                close(rfd);
                break;
            }
            if (n == 0)
                break;
            got += (size_t)n;
        }
        uint8_t head[12];
        uint32_t got32 = (uint32_t)got;
        memcpy(head, &p, 8);
        memcpy(head + 8, &got32, 4);
        pc_record(KV_PC_REC_PRE, f->id, head, 12, g_pc.buf, got);
    }
}

static void pc_synced(pc_file *f)
{
    pc_record(KV_PC_REC_SYNC, f->id, NULL, 0, NULL, 0);
    f->dirty = 0;
    if (f->saved)
        memset(f->saved, 0, f->saved_cap);
}

static void pc_durable(pc_file *f, uint64_t off, uint64_t len)
{
    if (!len)
        return;
    uint64_t first = off / g_pc.page, last = (off + len - 1) / g_pc.page;
    uint8_t head[24];
    uint64_t n = last - first + 1, end = off + len;
    memcpy(head, &first, 8);
    memcpy(head + 8, &n, 8);
    memcpy(head + 16, &end, 8);
    pc_record(KV_PC_REC_DUR, f->id, head, 24, NULL, 0);
    for (uint64_t p = first; p <= last; p++)
        pc_saved_clear(f, p);
}

static void pc_escape(pc_file *f, const char *fmt, ...)
{
    char text[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (n < 0)
        n = 0;
    if ((size_t)n >= sizeof text)
        n = (int)sizeof text - 1;
    uint32_t len = (uint32_t)n;
    pc_record(KV_PC_REC_ESCAPE, f ? f->id : UINT32_MAX, &len, 4, text, len);
    char line[300];
    int m = snprintf(line, sizeof line, "powercut: ESCAPE: %s\n", text);
    ssize_t w = REAL(write)(2, line, (size_t)m);
    (void)w;
}

static uint64_t pc_iov_len(const struct iovec *iov, int cnt)
{
    uint64_t n = 0;
    for (int i = 0; i < cnt; i++)
        n += iov[i].iov_len;
    return n;
}

/* Before a write of len bytes at off (off < 0: the descriptor's position, or the end for
 * O_APPEND). Returns the tracking entry (lock still held) or NULL (lock released). */
static pc_fd *pc_before_write(int fd, int64_t off, uint64_t len, uint64_t *at)
{
    pthread_mutex_lock(&g_pc.mu);
    pc_init_locked();
    pc_fd *e = pc_fd_get(fd);
    if (!e) {
        pthread_mutex_unlock(&g_pc.mu);
        return NULL;
    }
    if (off < 0) {
        int fl = fcntl(fd, F_GETFL);
        struct stat sb;
        if (fl >= 0 && (fl & O_APPEND) && fstat(fd, &sb) == 0)
            off = sb.st_size;
        else
            off = lseek(fd, 0, SEEK_CUR);
        if (off < 0)
            pc_die("lseek");
    }
    *at = (uint64_t)off;
    pc_tick();
    pc_save_range(fd, e->file, (uint64_t)off, len);
    return e;
}

static void pc_after_write(pc_fd *e, uint64_t at, ssize_t done, int dsync_call)
{
    if ((e->dsync || dsync_call) && done > 0)
        pc_durable(e->file, at, (uint64_t)done);
    pthread_mutex_unlock(&g_pc.mu);
}

__attribute__((constructor)) static void pc_ctor(void)
{
    pthread_mutex_lock(&g_pc.mu);
    g_pc.ctor_done = 1;
    pc_init_locked();
    pthread_mutex_unlock(&g_pc.mu);
}

/* ---- writes ---- */

PC_EXPORT ssize_t write(int fd, const void *buf, size_t len)
{
    __typeof__(g_pc.real.write) real = REAL(write);
    uint64_t at;
    pc_fd *e = pc_before_write(fd, -1, len, &at);
    ssize_t n = real(fd, buf, len);
    if (e) {
        int saved = errno;
        pc_after_write(e, at, n, 0);
        errno = saved;
    }
    return n;
}

static ssize_t pc_pwrite_common(__typeof__(g_pc.real.pwrite) real, int fd, const void *buf,
                                size_t len, off_t off)
{
    uint64_t at;
    pc_fd *e = off >= 0 ? pc_before_write(fd, off, len, &at) : NULL;
    ssize_t n = real(fd, buf, len, off);
    if (e) {
        int saved = errno;
        pc_after_write(e, at, n, 0);
        errno = saved;
    }
    return n;
}

PC_EXPORT ssize_t pwrite(int fd, const void *buf, size_t len, off_t off)
{
    return pc_pwrite_common(REAL(pwrite), fd, buf, len, off);
}

PC_EXPORT ssize_t pwrite64(int fd, const void *buf, size_t len, off_t off)
{
    return pc_pwrite_common(REAL(pwrite64), fd, buf, len, off);
}

PC_EXPORT ssize_t writev(int fd, const struct iovec *iov, int cnt)
{
    __typeof__(g_pc.real.writev) real = REAL(writev);
    uint64_t at;
    pc_fd *e = pc_before_write(fd, -1, pc_iov_len(iov, cnt), &at);
    ssize_t n = real(fd, iov, cnt);
    if (e) {
        int saved = errno;
        pc_after_write(e, at, n, 0);
        errno = saved;
    }
    return n;
}

static ssize_t pc_pwritev_common(int fd, const struct iovec *iov, int cnt, off_t off, int flags,
                                 int which)
{
    __typeof__(g_pc.real.pwritev) rv = which == 0 ? REAL(pwritev) : NULL;
    __typeof__(g_pc.real.pwritev64) rv64 = which == 1 ? REAL(pwritev64) : NULL;
    __typeof__(g_pc.real.pwritev2) rv2 = which == 2 ? REAL(pwritev2) : NULL;
    uint64_t at;
    /* pwritev2 with off == -1 writes at the file position. */
    pc_fd *e = pc_before_write(fd, off >= 0 ? off : -1, pc_iov_len(iov, cnt), &at);
    ssize_t n = which == 0   ? rv(fd, iov, cnt, off)
                : which == 1 ? rv64(fd, iov, cnt, off)
                             : rv2(fd, iov, cnt, off, flags);
    if (e) {
        int saved = errno;
        pc_after_write(e, at, n, which == 2 && (flags & (RWF_DSYNC | RWF_SYNC)));
        errno = saved;
    }
    return n;
}

PC_EXPORT ssize_t pwritev(int fd, const struct iovec *iov, int cnt, off_t off)
{
    return pc_pwritev_common(fd, iov, cnt, off, 0, 0);
}

PC_EXPORT ssize_t pwritev64(int fd, const struct iovec *iov, int cnt, off_t off)
{
    return pc_pwritev_common(fd, iov, cnt, off, 0, 1);
}

PC_EXPORT ssize_t pwritev2(int fd, const struct iovec *iov, int cnt, off_t off, int flags)
{
    return pc_pwritev_common(fd, iov, cnt, off, flags, 2);
}

/* ---- size changes ---- */

static int pc_ftruncate_common(__typeof__(g_pc.real.ftruncate) real, int fd, off_t len)
{
    pthread_mutex_lock(&g_pc.mu);
    pc_init_locked();
    pc_fd *e = pc_fd_get(fd);
    if (e) {
        struct stat sb;
        pc_tick();
        if (fstat(fd, &sb) != 0)
            pc_die("fstat");
        pc_mark_dirty(fd, e->file);
        if (len >= 0 && len < sb.st_size) /* shrinking: the cut bytes are lost */
            pc_save_range(fd, e->file, (uint64_t)len, (uint64_t)(sb.st_size - len));
    }
    int rc = real(fd, len);
    int saved = errno;
    pthread_mutex_unlock(&g_pc.mu);
    errno = saved;
    return rc;
}

PC_EXPORT int ftruncate(int fd, off_t len)
{
    return pc_ftruncate_common(REAL(ftruncate), fd, len);
}

PC_EXPORT int ftruncate64(int fd, off_t len)
{
    return pc_ftruncate_common(REAL(ftruncate64), fd, len);
}

PC_EXPORT int fallocate(int fd, int mode, off_t off, off_t len)
{
    __typeof__(g_pc.real.fallocate) real = REAL(fallocate);
    pthread_mutex_lock(&g_pc.mu);
    pc_init_locked();
    pc_fd *e = pc_fd_get(fd);
    if (e && mode != 0 && len > 0)
        pc_save_range(fd, e->file, (uint64_t)off, (uint64_t)len); /* punch/zero/collapse */
    else if (e)
        pc_mark_dirty(fd, e->file);
    if (e && (mode & ~(FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE)))
        pc_escape(e->file, "fallocate mode 0x%x shifts data", mode);
    int rc = real(fd, mode, off, len);
    int saved = errno;
    pthread_mutex_unlock(&g_pc.mu);
    errno = saved;
    return rc;
}

PC_EXPORT ssize_t copy_file_range(int in, off_t *in_off, int out, off_t *out_off, size_t len,
                                  unsigned int flags)
{
    __typeof__(g_pc.real.copy_file_range) real = REAL(copy_file_range);
    uint64_t at;
    pc_fd *e = pc_before_write(out, out_off ? *out_off : -1, len, &at);
    ssize_t n = real(in, in_off, out, out_off, len, flags);
    if (e) {
        int saved = errno;
        pc_after_write(e, at, n, 0);
        errno = saved;
    }
    return n;
}

/* ---- syncs ---- */

/* Whether fd is a directory whose fsync the model cares about: POWERCUT_DIR, one under it, or
 * its parent. Fills sb and path (PATH_MAX). Lock held. */
static int pc_dir_fd(int fd, struct stat *sb, char *path)
{
    if (!g_pc.active || fd < 0 || fstat(fd, sb) != 0 || !S_ISDIR(sb->st_mode))
        return 0;
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, PATH_MAX - 1);
    if (n <= 0)
        return 0;
    path[n] = '\0';
    return pc_under(path) || !strcmp(path, g_pc.dir_parent);
}

/* A completed sync of directory (dev, ino) (ino 0: of every directory on dev; dev 0 too: of
 * all): journals it and drops the graveyard links whose removal it made durable. */
static void pc_dirsync(uint64_t dev, uint64_t ino, const char *path)
{
    uint8_t head[20];
    uint32_t len = (uint32_t)strlen(path);
    memcpy(head, &dev, 8);
    memcpy(head + 8, &ino, 8);
    memcpy(head + 16, &len, 4);
    pc_record(KV_PC_REC_DIRSYNC, UINT32_MAX, head, sizeof head, path, len);
    for (int i = 0; i < PC_MAX_GRAVES; i++) {
        pc_grave *g = &g_pc.grave[i];
        if (!g->used || (dev && (uint64_t)g->dev != dev))
            continue;
        for (int k = 0; k < 2; k++)
            if (!ino || (uint64_t)g->parent[k] == ino)
                g->synced[k] = 1;
        if ((g->synced[0] || !g->parent[0]) && (g->synced[1] || !g->parent[1])) {
            char gp[PATH_MAX + 32];
            snprintf(gp, sizeof gp, "%s/%" PRIu64, g_pc.graves, g->n);
            REAL(unlink)(gp);
            g->used = 0;
        }
    }
}

static int pc_sync_common(__typeof__(g_pc.real.fsync) real, int fd)
{
    pthread_mutex_lock(&g_pc.mu);
    pc_init_locked();
    pc_fd *e = pc_fd_get(fd);
    struct stat dsb;
    int dir = !e && pc_dir_fd(fd, &dsb, g_pc.path[3]);
    if (e || dir)
        pc_tick();
    int rc = real(fd);
    int saved = errno;
    if (e && rc == 0)
        pc_synced(e->file);
    if (dir && rc == 0)
        pc_dirsync((uint64_t)dsb.st_dev, (uint64_t)dsb.st_ino, g_pc.path[3]);
    pthread_mutex_unlock(&g_pc.mu);
    errno = saved;
    return rc;
}

PC_EXPORT int fsync(int fd)
{
    return pc_sync_common(REAL(fsync), fd);
}

PC_EXPORT int fdatasync(int fd)
{
    return pc_sync_common(REAL(fdatasync), fd);
}

PC_EXPORT void sync(void)
{
    __typeof__(g_pc.real.sync) real = REAL(sync);
    pthread_mutex_lock(&g_pc.mu);
    pc_init_locked();
    real();
    if (g_pc.active) {
        for (uint32_t i = 0; i < g_pc.n_files; i++)
            pc_synced(&g_pc.files[i]);
        pc_dirsync(0, 0, "");
    }
    pthread_mutex_unlock(&g_pc.mu);
}

PC_EXPORT int syncfs(int fd)
{
    __typeof__(g_pc.real.syncfs) real = REAL(syncfs);
    pthread_mutex_lock(&g_pc.mu);
    pc_init_locked();
    struct stat sb;
    int have = fstat(fd, &sb) == 0;
    int rc = real(fd);
    int saved = errno;
    if (rc == 0 && have && g_pc.active) {
        for (uint32_t i = 0; i < g_pc.n_files; i++)
            if (g_pc.files[i].dev == sb.st_dev)
                pc_synced(&g_pc.files[i]);
        pc_dirsync((uint64_t)sb.st_dev, 0, "");
    }
    pthread_mutex_unlock(&g_pc.mu);
    errno = saved;
    return rc;
}

/* sync_file_range starts or waits for write-back of data only: no metadata, no device cache
 * flush. It is not a durability point (man 2 sync_file_range), so nothing is marked. */
PC_EXPORT int sync_file_range(int fd, off_t off, off_t len, unsigned int flags)
{
    return REAL(sync_file_range)(fd, off, len, flags);
}

/* ---- mappings ---- */

static void *pc_mmap_common(__typeof__(g_pc.real.mmap) real, void *addr, size_t len, int prot,
                            int flags, int fd, off_t off)
{
    pthread_mutex_lock(&g_pc.mu);
    pc_init_locked();
    pc_fd *e = (flags & MAP_SHARED) ? pc_fd_get(fd) : NULL;
    if (e && (prot & PROT_WRITE))
        pc_escape(e->file, "writable shared mapping of a tracked file (MDB_WRITEMAP?)");
    void *p = real(addr, len, prot, flags, fd, off);
    int saved = errno;
    if (e && p != MAP_FAILED) {
        for (int i = 0; i < PC_MAX_MAPS; i++) {
            if (!g_pc.maps[i].file) {
                g_pc.maps[i] = (pc_map){p, len, off, e->file};
                break;
            }
        }
    }
    pthread_mutex_unlock(&g_pc.mu);
    errno = saved;
    return p;
}

PC_EXPORT void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    return pc_mmap_common(REAL(mmap), addr, len, prot, flags, fd, off);
}

PC_EXPORT void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    return pc_mmap_common(REAL(mmap64), addr, len, prot, flags, fd, off);
}

static pc_map *pc_map_find(const void *addr, size_t len)
{
    const uint8_t *a = addr;
    for (int i = 0; i < PC_MAX_MAPS; i++) {
        pc_map *m = &g_pc.maps[i];
        const uint8_t *b = m->addr;
        if (m->file && a < b + m->len && a + len > b)
            return m;
    }
    return NULL;
}

PC_EXPORT int mprotect(void *addr, size_t len, int prot)
{
    __typeof__(g_pc.real.mprotect) real = REAL(mprotect);
    pthread_mutex_lock(&g_pc.mu);
    pc_init_locked();
    pc_map *m = (prot & PROT_WRITE) && g_pc.active ? pc_map_find(addr, len) : NULL;
    if (m)
        pc_escape(m->file, "shared mapping of a tracked file made writable");
    pthread_mutex_unlock(&g_pc.mu);
    return real(addr, len, prot);
}

PC_EXPORT int munmap(void *addr, size_t len)
{
    __typeof__(g_pc.real.munmap) real = REAL(munmap);
    pthread_mutex_lock(&g_pc.mu);
    for (int i = 0; i < PC_MAX_MAPS; i++)
        if (g_pc.maps[i].file && g_pc.maps[i].addr == addr)
            g_pc.maps[i].file = NULL;
    pthread_mutex_unlock(&g_pc.mu);
    return real(addr, len);
}

/* msync(MS_SYNC) on a shared file mapping syncs that range of the file (vfs_fsync_range),
 * including data written with pwrite: the covered pages become durable. */
PC_EXPORT int msync(void *addr, size_t len, int flags)
{
    __typeof__(g_pc.real.msync) real = REAL(msync);
    pthread_mutex_lock(&g_pc.mu);
    pc_init_locked();
    int rc = real(addr, len, flags);
    int saved = errno;
    pc_map *m = rc == 0 && (flags & MS_SYNC) && g_pc.active ? pc_map_find(addr, len) : NULL;
    if (m) {
        const uint8_t *a = addr, *b = m->addr;
        const uint8_t *lo = a > b ? a : b, *hi = a + len < b + m->len ? a + len : b + m->len;
        pc_durable(m->file, (uint64_t)m->off + (uint64_t)(lo - b), (uint64_t)(hi - lo));
    }
    pthread_mutex_unlock(&g_pc.mu);
    errno = saved;
    return rc;
}

/* ---- directory operations ---- */

static void pc_op_record(const pc_op *op)
{
    uint8_t head[52];
    uint32_t len[3];
    memcpy(head, &op->dev, 8);
    memcpy(head + 8, op->parent, 16);
    memcpy(head + 24, &op->ino, 8);
    memcpy(head + 32, &op->aux, 8);
    size_t total = 0;
    for (int k = 0; k < 3; k++) {
        len[k] = op->p[k] ? (uint32_t)strlen(op->p[k]) : 0;
        total += len[k];
    }
    memcpy(head + 40, len, 12);
    char *buf = malloc(total ? total : 1);
    if (!buf)
        pc_die("malloc");
    for (int k = 0, at = 0; k < 3; at += (int)len[k], k++)
        memcpy(buf + at, op->p[k] ? op->p[k] : "", len[k]);
    pc_record(op->type, UINT32_MAX, head, sizeof head, buf, total);
    free(buf);
}

static void pc_fail_record(void)
{
    pc_record(KV_PC_REC_FAIL, UINT32_MAX, NULL, 0, NULL, 0);
}

/* Hard-links the regular file abs into the graveyard (path into gpath, PATH_MAX) before its
 * name goes; the link is dropped once the parent(s) are synced. Returns the slot (or -1 when
 * the table is full: the link then stays until the replay). */
static int pc_grave_keep(const char *abs, char *gpath, dev_t dev, ino_t p0, ino_t p1)
{
    uint64_t n = ++g_pc.graves_n;
    snprintf(gpath, PATH_MAX, "%s/%" PRIu64, g_pc.graves, n);
    if (REAL(link)(abs, gpath) != 0)
        pc_die("cannot link a removed file into the graveyard (POWERCUT_JOURNAL on another "
               "file system than POWERCUT_DIR?)");
    for (int i = 0; i < PC_MAX_GRAVES; i++) {
        pc_grave *g = &g_pc.grave[i];
        if (!g->used) {
            *g = (pc_grave){.used = 1, .dev = dev, .parent = {p0, p1}, .n = n};
            return i;
        }
    }
    return -1;
}

/* The call the graveyard link was made for failed: nothing was removed. */
static void pc_grave_drop(int slot, const char *gpath)
{
    REAL(unlink)(gpath);
    if (slot >= 0)
        g_pc.grave[slot].used = 0;
}

/* The last name of inode (dev, ino) went: a new file may get the inode, it is a new file. */
static void pc_file_gone(dev_t dev, ino_t ino)
{
    for (uint32_t i = 0; i < g_pc.n_files; i++)
        if (g_pc.files[i].dev == dev && g_pc.files[i].ino == ino)
            g_pc.files[i].gone = 1;
}

/* Before a call that may create path (at dirfd): locks, and when it creates a new entry
 * under POWERCUT_DIR, counts the operation and journals type. Returns 1 when journaled
 * (the caller writes FAIL if the call fails), 0 otherwise; the lock is held either way. */
static int pc_create_begin(uint32_t type, int dirfd, const char *path)
{
    pthread_mutex_lock(&g_pc.mu);
    pc_init_locked();
    struct stat pst, sb;
    char *abs = g_pc.path[0];
    if (!g_pc.active || pc_resolve(dirfd, path, abs, &pst) != 0 || !pc_under(abs) ||
        lstat(abs, &sb) == 0 || errno != ENOENT)
        return 0;
    pc_tick();
    pc_op op = {.type = type,
                .dev = (uint64_t)pst.st_dev,
                .parent = {(uint64_t)pst.st_ino, 0},
                .p = {abs, NULL, NULL}};
    pc_op_record(&op);
    return 1;
}

static int pc_create_end(int tracked, int rc)
{
    int saved = errno;
    if (tracked && rc < 0)
        pc_fail_record();
    pthread_mutex_unlock(&g_pc.mu);
    errno = saved;
    return rc;
}

enum { PC_OPEN, PC_OPEN64, PC_OPENAT, PC_OPENAT64, PC_CREAT, PC_CREAT64 };

static int pc_open_common(int which, int dirfd, const char *path, int flags, mode_t mode)
{
    int tracked = 0, locked = 0;
    if (flags & O_CREAT) {
        tracked = pc_create_begin(KV_PC_REC_CREATE, dirfd, path);
        locked = 1;
    }
    int fd;
    switch (which) {
    case PC_OPEN:
        fd = REAL(open)(path, flags, mode);
        break;
    case PC_OPEN64:
        fd = REAL(open64)(path, flags, mode);
        break;
    case PC_OPENAT:
        fd = REAL(openat)(dirfd, path, flags, mode);
        break;
    case PC_OPENAT64:
        fd = REAL(openat64)(dirfd, path, flags, mode);
        break;
    case PC_CREAT:
        fd = REAL(creat)(path, mode);
        break;
    default:
        fd = REAL(creat64)(path, mode);
        break;
    }
    return locked ? pc_create_end(tracked, fd) : fd;
}

#define PC_MODE_ARG(flags, mode)                                                                   \
    do {                                                                                           \
        if ((flags) & (O_CREAT | O_TMPFILE)) {                                                     \
            va_list ap;                                                                            \
            va_start(ap, flags);                                                                   \
            mode = (mode_t)va_arg(ap, int);                                                        \
            va_end(ap);                                                                            \
        }                                                                                          \
    } while (0)

PC_EXPORT int open(const char *path, int flags, ...)
{
    mode_t mode = 0;
    PC_MODE_ARG(flags, mode);
    return pc_open_common(PC_OPEN, AT_FDCWD, path, flags, mode);
}

PC_EXPORT int open64(const char *path, int flags, ...)
{
    mode_t mode = 0;
    PC_MODE_ARG(flags, mode);
    return pc_open_common(PC_OPEN64, AT_FDCWD, path, flags, mode);
}

PC_EXPORT int openat(int dirfd, const char *path, int flags, ...)
{
    mode_t mode = 0;
    PC_MODE_ARG(flags, mode);
    return pc_open_common(PC_OPENAT, dirfd, path, flags, mode);
}

PC_EXPORT int openat64(int dirfd, const char *path, int flags, ...)
{
    mode_t mode = 0;
    PC_MODE_ARG(flags, mode);
    return pc_open_common(PC_OPENAT64, dirfd, path, flags, mode);
}

PC_EXPORT int creat(const char *path, mode_t mode)
{
    return pc_open_common(PC_CREAT, AT_FDCWD, path, O_CREAT, mode);
}

PC_EXPORT int creat64(const char *path, mode_t mode)
{
    return pc_open_common(PC_CREAT64, AT_FDCWD, path, O_CREAT, mode);
}

/* mkstemp picks the name inside the call (glibc opens it internally): the record follows the
 * call, so a kill exactly between the two leaves that one temporary file in place. */
static int pc_mkstemp_common(char *tmpl, int flags, int which)
{
    pthread_mutex_lock(&g_pc.mu);
    pc_init_locked();
    struct stat pst;
    char *abs = g_pc.path[0];
    int tracked =
        g_pc.active && tmpl && pc_resolve(AT_FDCWD, tmpl, abs, &pst) == 0 && pc_under(abs);
    if (tracked)
        pc_tick();
    int fd = which ? REAL(mkostemp)(tmpl, flags) : REAL(mkstemp)(tmpl);
    int saved = errno;
    if (tracked && fd >= 0 && pc_resolve(AT_FDCWD, tmpl, abs, &pst) == 0) {
        pc_op op = {.type = KV_PC_REC_CREATE,
                    .dev = (uint64_t)pst.st_dev,
                    .parent = {(uint64_t)pst.st_ino, 0},
                    .p = {abs, NULL, NULL}};
        pc_op_record(&op);
    }
    pthread_mutex_unlock(&g_pc.mu);
    errno = saved;
    return fd;
}

PC_EXPORT int mkstemp(char *tmpl)
{
    return pc_mkstemp_common(tmpl, 0, 0);
}

PC_EXPORT int mkostemp(char *tmpl, int flags)
{
    return pc_mkstemp_common(tmpl, flags, 1);
}

PC_EXPORT int mkdir(const char *path, mode_t mode)
{
    int tracked = pc_create_begin(KV_PC_REC_MKDIR, AT_FDCWD, path);
    return pc_create_end(tracked, REAL(mkdir)(path, mode));
}

PC_EXPORT int mkdirat(int dirfd, const char *path, mode_t mode)
{
    int tracked = pc_create_begin(KV_PC_REC_MKDIR, dirfd, path);
    return pc_create_end(tracked, REAL(mkdirat)(dirfd, path, mode));
}

enum { PC_RENAME, PC_RENAMEAT, PC_RENAMEAT2 };

static int pc_rename_common(int which, int ofd, const char *old, int nfd, const char *new,
                            unsigned int flags)
{
    pthread_mutex_lock(&g_pc.mu);
    pc_init_locked();
    struct stat p0, p1, sb, tsb;
    char *a0 = g_pc.path[0], *a1 = g_pc.path[1], *gp = g_pc.path[2];
    int tracked = g_pc.active && pc_resolve(ofd, old, a0, &p0) == 0 &&
                  pc_resolve(nfd, new, a1, &p1) == 0 && (pc_under(a0) || pc_under(a1)) &&
                  lstat(a0, &sb) == 0;
    int slot = -1, replaced = 0;
    pc_op op = {.type = KV_PC_REC_RENAME};
    if (tracked) {
        pc_tick();
        if (flags & RENAME_EXCHANGE)
            pc_escape(NULL, "renameat2(RENAME_EXCHANGE) %s", a0);
        gp[0] = '\0';
        if (lstat(a1, &tsb) == 0 && !(tsb.st_dev == sb.st_dev && tsb.st_ino == sb.st_ino)) {
            if (S_ISREG(tsb.st_mode)) {
                slot = pc_grave_keep(a1, gp, p1.st_dev, p0.st_ino,
                                     p1.st_ino != p0.st_ino ? p1.st_ino : 0);
                op.aux = (uint64_t)tsb.st_ino;
                replaced = tsb.st_nlink == 1;
            } else {
                pc_escape(NULL, "rename over a non-regular file %s", a1);
            }
        }
        op.dev = (uint64_t)p0.st_dev;
        op.parent[0] = (uint64_t)p0.st_ino;
        op.parent[1] = p1.st_ino != p0.st_ino ? (uint64_t)p1.st_ino : 0;
        op.ino = (uint64_t)sb.st_ino;
        op.p[0] = a0;
        op.p[1] = a1;
        op.p[2] = gp;
        pc_op_record(&op);
    }
    int rc = which == PC_RENAME     ? REAL(rename)(old, new)
             : which == PC_RENAMEAT ? REAL(renameat)(ofd, old, nfd, new)
                                    : REAL(renameat2)(ofd, old, nfd, new, flags);
    int saved = errno;
    if (tracked && rc != 0) {
        pc_fail_record();
        if (gp[0])
            pc_grave_drop(slot, gp);
    } else if (tracked && replaced) {
        pc_file_gone(tsb.st_dev, tsb.st_ino);
    }
    pthread_mutex_unlock(&g_pc.mu);
    errno = saved;
    return rc;
}

PC_EXPORT int rename(const char *old, const char *new)
{
    return pc_rename_common(PC_RENAME, AT_FDCWD, old, AT_FDCWD, new, 0);
}

PC_EXPORT int renameat(int ofd, const char *old, int nfd, const char *new)
{
    return pc_rename_common(PC_RENAMEAT, ofd, old, nfd, new, 0);
}

PC_EXPORT int renameat2(int ofd, const char *old, int nfd, const char *new, unsigned int flags)
{
    return pc_rename_common(PC_RENAMEAT2, ofd, old, nfd, new, flags);
}

enum { PC_UNLINK, PC_UNLINKAT, PC_RMDIR };

static int pc_unlink_common(int which, int dirfd, const char *path, int flags)
{
    pthread_mutex_lock(&g_pc.mu);
    pc_init_locked();
    struct stat pst, sb;
    char *abs = g_pc.path[0], *gp = g_pc.path[2];
    int tracked = g_pc.active && pc_resolve(dirfd, path, abs, &pst) == 0 && pc_under(abs) &&
                  lstat(abs, &sb) == 0;
    int slot = -1, dir = which == PC_RMDIR || (flags & AT_REMOVEDIR);
    gp[0] = '\0';
    if (tracked) {
        pc_tick();
        pc_op op = {.dev = (uint64_t)pst.st_dev,
                    .parent = {(uint64_t)pst.st_ino, 0},
                    .ino = (uint64_t)sb.st_ino,
                    .p = {abs, NULL, gp}};
        if (dir) {
            op.type = KV_PC_REC_RMDIR;
            op.aux = (uint64_t)(sb.st_mode & 07777);
        } else {
            op.type = KV_PC_REC_UNLINK;
            if (S_ISREG(sb.st_mode))
                slot = pc_grave_keep(abs, gp, pst.st_dev, pst.st_ino, 0);
            else
                pc_escape(NULL, "unlink of a non-regular file %s", abs);
        }
        pc_op_record(&op);
    }
    int rc = which == PC_UNLINK     ? REAL(unlink)(path)
             : which == PC_UNLINKAT ? REAL(unlinkat)(dirfd, path, flags)
                                    : REAL(rmdir)(path);
    int saved = errno;
    if (tracked && rc != 0) {
        pc_fail_record();
        if (gp[0])
            pc_grave_drop(slot, gp);
    } else if (tracked && !dir && sb.st_nlink == 1) {
        pc_file_gone(sb.st_dev, sb.st_ino);
    }
    pthread_mutex_unlock(&g_pc.mu);
    errno = saved;
    return rc;
}

PC_EXPORT int unlink(const char *path)
{
    return pc_unlink_common(PC_UNLINK, AT_FDCWD, path, 0);
}

PC_EXPORT int unlinkat(int dirfd, const char *path, int flags)
{
    return pc_unlink_common(PC_UNLINKAT, dirfd, path, flags);
}

PC_EXPORT int rmdir(const char *path)
{
    return pc_unlink_common(PC_RMDIR, AT_FDCWD, path, 0);
}

static int pc_link_common(int which, int ofd, const char *old, int nfd, const char *new, int flags)
{
    pthread_mutex_lock(&g_pc.mu);
    pc_init_locked();
    struct stat p0, p1, sb;
    char *a0 = g_pc.path[0], *a1 = g_pc.path[1];
    int tracked = g_pc.active && pc_resolve(nfd, new, a1, &p1) == 0 && pc_under(a1) &&
                  pc_resolve(ofd, old, a0, &p0) == 0 &&
                  ((flags & AT_SYMLINK_FOLLOW) ? stat(a0, &sb) : lstat(a0, &sb)) == 0;
    if (tracked) {
        pc_tick();
        pc_op op = {.type = KV_PC_REC_LINK,
                    .dev = (uint64_t)p1.st_dev,
                    .parent = {(uint64_t)p1.st_ino, 0},
                    .ino = (uint64_t)sb.st_ino,
                    .p = {a0, a1, NULL}};
        pc_op_record(&op);
    }
    int rc = which ? REAL(linkat)(ofd, old, nfd, new, flags) : REAL(link)(old, new);
    int saved = errno;
    if (tracked && rc != 0)
        pc_fail_record();
    pthread_mutex_unlock(&g_pc.mu);
    errno = saved;
    return rc;
}

PC_EXPORT int link(const char *old, const char *new)
{
    return pc_link_common(0, AT_FDCWD, old, AT_FDCWD, new, 0);
}

PC_EXPORT int linkat(int ofd, const char *old, int nfd, const char *new, int flags)
{
    return pc_link_common(1, ofd, old, nfd, new, flags);
}

/* A closed descriptor's number may come back for another file, even for a new file with the
 * inode of a removed one: forget what it was. */
PC_EXPORT int close(int fd)
{
    __typeof__(g_pc.real.close) real = REAL(close);
    if (fd >= 0 && fd < PC_MAX_FDS && __atomic_load_n(&g_pc.fds[fd].state, __ATOMIC_RELAXED)) {
        pthread_mutex_lock(&g_pc.mu);
        memset(&g_pc.fds[fd], 0, sizeof g_pc.fds[fd]);
        pthread_mutex_unlock(&g_pc.mu);
    }
    return real(fd);
}
