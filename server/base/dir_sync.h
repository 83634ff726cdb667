/*
 * dir_sync (server/base/: helpers below every module; header-only, needs only libc): the
 * one way kvd makes a directory entry durable. A file created, renamed or removed is not
 * on the disk after a power loss until the directory that names it has been fsynced; the
 * WAL (segments, the imported log) and the daemon (the data dir itself) use these.
 *
 *   kv_dir_fsync(path)           fsync the directory at path
 *   kv_dir_parent(path, out, n)  the directory that holds path, into out: trailing
 *                                slashes ignored, "/" for "/x", "." for a bare name;
 *                                -ENAMETOOLONG if it does not fit in n bytes
 *   kv_dir_fsync_parent(path)    fsync that directory
 *
 * All return 0 or a negative errno and keep no state.
 */
#ifndef KV_BASE_DIR_SYNC_H
#define KV_BASE_DIR_SYNC_H

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <string.h>
#include <unistd.h>

static inline int kv_dir_fsync(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int rc = fsync(fd) < 0 ? -errno : 0;
    close(fd);
    return rc;
}

static inline int kv_dir_parent(const char *path, char *out, size_t n)
{
    size_t len = strlen(path);
    while (len > 1 && path[len - 1] == '/')
        len--;
    size_t cut = len;
    while (cut > 0 && path[cut - 1] != '/')
        cut--;
    const char *src = path;
    if (cut == 0) {
        src = ".";
        len = 1;
    } else {
        len = cut - 1;
        while (len > 1 && path[len - 1] == '/')
            len--;
        if (len == 0)
            len = 1; /* the root */
    }
    if (len + 1 > n)
        return -ENAMETOOLONG;
    memcpy(out, src, len);
    out[len] = 0;
    return 0;
}

static inline int kv_dir_fsync_parent(const char *path)
{
    char parent[4096];
    int rc = kv_dir_parent(path, parent, sizeof parent);
    return rc < 0 ? rc : kv_dir_fsync(parent);
}

#endif
