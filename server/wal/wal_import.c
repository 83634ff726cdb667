/* wal_import: builds a WAL from another raft storage, e.g. the LMDB raft log of a data dir
 * written before the WAL (docs/raftlog.md, "Wiring it in": the conversion at startup). The
 * new log is written under <dir>.tmp, synced, then renamed to <dir> and the parent synced, so
 * a crash leaves either no WAL (the source still holds everything: convert again) or the
 * whole one. Caller's thread; the source is only read. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/dir_sync.h"
#include "wal/wal_int.h"

#define IMPORT_CHUNK 1024              /* entries per source read and per sync */
#define IMPORT_BYTES ((size_t)4 << 20) /* entry bytes per source read */

static int rm_tree(const char *dir)
{
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return errno == ENOENT ? 0 : -errno;
    struct kv_wal_seg *v = NULL;
    size_t n = 0;
    int rc = kv_wal_seg_list(dfd, &v, &n);
    for (size_t k = 0; rc == 0 && k < n; k++) {
        char name[64];
        kv_wal_seg_name(name, sizeof name, v[k].seq, v[k].first);
        if (unlinkat(dfd, name, 0) && errno != ENOENT)
            rc = -errno;
    }
    free(v);
    close(dfd);
    if (rc == 0 && rmdir(dir))
        rc = -errno; /* anything but segments in it: left for a human */
    return rc;
}

static int copy_log(kv_wal *w, const struct raft_storage *src)
{
    struct raft_snapshot sn;
    struct raft_hard_state hs;
    int rc = src->snapshot(src->ctx, &sn);
    if (rc == 0)
        rc = src->initial_state(src->ctx, &hs);
    if (rc)
        return rc;
    if (sn.meta.index && (rc = kv_wal_set_snapshot(w, &sn.meta)))
        return rc;
    if ((hs.term || hs.vote || hs.commit) && (rc = kv_wal_set_hard_state(w, &hs)))
        return rc;
    raft_index lo = src->first_index(src->ctx), last = src->last_index(src->ctx);
    if (lo != sn.meta.index + 1)
        return -EBADMSG;
    struct raft_entry *e = malloc(IMPORT_CHUNK * sizeof *e);
    if (!e)
        return -ENOMEM;
    while (rc == 0 && lo <= last) {
        raft_index hi = last + 1 - lo > IMPORT_CHUNK ? lo + IMPORT_CHUNK : last + 1;
        size_t n = 0;
        rc = src->entries(src->ctx, lo, hi, IMPORT_BYTES, e, &n);
        if (rc == 0 && n == 0)
            rc = -EBADMSG;
        if (rc == 0)
            rc = kv_wal_append(w, e, n);
        if (rc == 0)
            rc = kv_wal_sync(w); /* bounds the batch buffer */
        lo += n;
    }
    free(e);
    return rc ? rc : kv_wal_sync(w);
}

int kv_wal_import(const char *dir, const struct raft_storage *src, const struct kv_wal_opts *o,
                  char *err, size_t errlen)
{
    struct stat st;
    char tmp[4096];
    if (err && errlen)
        err[0] = 0;
    if (stat(dir, &st) == 0) {
        if (err)
            snprintf(err, errlen, "wal: import: %s exists", dir);
        return -EEXIST;
    }
    if (snprintf(tmp, sizeof tmp, "%s.tmp", dir) >= (int)sizeof tmp)
        return -ENAMETOOLONG;
    int rc = rm_tree(tmp); /* a conversion a crash interrupted */
    if (rc) {
        if (err)
            snprintf(err, errlen, "wal: import: removing %s: %s", tmp, strerror(-rc));
        return rc;
    }
    kv_wal *w = NULL;
    if ((rc = kv_wal_open(&w, tmp, o, err, errlen)))
        return rc;
    rc = copy_log(w, src);
    kv_wal_close(w);
    if (rc) {
        if (err)
            snprintf(err, errlen, "wal: import into %s: %s", tmp, strerror(-rc));
        return rc;
    }
    if (rename(tmp, dir)) {
        rc = -errno;
        if (err)
            snprintf(err, errlen, "wal: import: rename %s: %s", tmp, strerror(errno));
        return rc;
    }
    rc = kv_dir_fsync_parent(dir);
    if (rc && err)
        snprintf(err, errlen, "wal: import: syncing the parent of %s: %s", dir, strerror(-rc));
    return rc;
}
