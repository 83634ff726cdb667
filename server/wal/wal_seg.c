/* wal_seg: the segment files of a WAL directory (wal.h "Files"): naming, listing,
 * preallocated creation, the cut of a torn tail, growth past the preallocation. Caller's
 * thread (one at a time). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "wal/wal_int.h"

int kv_wal_seg_name(char *buf, size_t cap, uint64_t seq, raft_index first)
{
    int n = snprintf(buf, cap, "%016" PRIx64 "-%016" PRIx64 ".wal", seq, (uint64_t)first);
    return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

static int parse_name(const char *name, uint64_t *seq, raft_index *first)
{
    char back[64];
    unsigned long long s, f;
    if (strlen(name) != 37 || sscanf(name, "%16llx-%16llx.wal", &s, &f) != 2)
        return -EINVAL;
    if (kv_wal_seg_name(back, sizeof back, s, f) || strcmp(back, name))
        return -EINVAL;
    *seq = s;
    *first = f;
    return 0;
}

static int cmp_seq(const void *a, const void *b)
{
    const struct kv_wal_seg *x = a, *y = b;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

int kv_wal_seg_list(int dirfd, struct kv_wal_seg **out, size_t *n)
{
    int fd = dup(dirfd);
    if (fd < 0)
        return -errno;
    DIR *d = fdopendir(fd);
    if (!d) {
        int rc = -errno;
        close(fd);
        return rc;
    }
    rewinddir(d);
    struct kv_wal_seg *v = NULL;
    size_t cnt = 0, cap = 0;
    int rc = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        struct kv_wal_seg s = {.fd = -1};
        if (parse_name(de->d_name, &s.seq, &s.first))
            continue; /* not a segment (".", "..", a temp file of a later version) */
        if (cnt == cap) {
            size_t nc = cap ? cap * 2 : 8;
            struct kv_wal_seg *nv = realloc(v, nc * sizeof *nv);
            if (!nv) {
                rc = -ENOMEM;
                break;
            }
            v = nv;
            cap = nc;
        }
        v[cnt++] = s;
    }
    closedir(d);
    if (rc) {
        free(v);
        return rc;
    }
    if (cnt)
        qsort(v, cnt, sizeof *v, cmp_seq);
    *out = v;
    *n = cnt;
    return 0;
}

int kv_wal_fsync_dir(kv_wal *w)
{
    w->fsyncs++;
    return fsync(w->dirfd) ? -errno : 0;
}

int kv_wal_seg_create(kv_wal *w, uint64_t seq, raft_index first, struct kv_wal_seg *s)
{
    char name[64];
    int rc = kv_wal_seg_name(name, sizeof name, seq, first);
    if (rc)
        return rc;
    int fd = openat(w->dirfd, name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return -errno;
    rc = posix_fallocate(fd, 0, (off_t)w->o.segment_bytes);
    if (rc) {
        rc = -rc;
        goto fail;
    }
    w->fsyncs++;
    if (fdatasync(fd)) { /* the size and the allocation, once, off the batch's flush */
        rc = -errno;
        goto fail;
    }
    if ((rc = kv_wal_fsync_dir(w)))
        goto fail;
    *s = (struct kv_wal_seg){.seq = seq, .first = first, .alloc = w->o.segment_bytes, .fd = fd};
    return 0;
fail:
    close(fd);
    unlinkat(w->dirfd, name, 0);
    return rc;
}

int kv_wal_seg_cut(kv_wal *w, struct kv_wal_seg *s, uint64_t off)
{
    uint64_t alloc = s->alloc > off ? s->alloc : off;
    if (ftruncate(s->fd, (off_t)off))
        return -errno;
    if (alloc > off) {
        int rc = posix_fallocate(s->fd, (off_t)off, (off_t)(alloc - off));
        if (rc)
            return -rc;
    }
    w->fsyncs++;
    if (fdatasync(s->fd))
        return -errno;
    s->size = off;
    s->alloc = alloc;
    return 0;
}

int kv_wal_seg_reserve(struct kv_wal_seg *s, uint64_t need, uint64_t step)
{
    if (need <= s->alloc)
        return 0;
    uint64_t to = need + step;
    int rc = posix_fallocate(s->fd, (off_t)s->alloc, (off_t)(to - s->alloc));
    if (rc)
        return -rc;
    s->alloc = to;
    return 0;
}

struct kv_wal_seg *kv_wal_seg_by_seq(kv_wal *w, uint64_t seq)
{
    if (!w->n_segs || seq < w->segs[0].seq || seq - w->segs[0].seq >= w->n_segs)
        return NULL;
    return &w->segs[seq - w->segs[0].seq];
}
