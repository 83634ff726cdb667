/* datadir_lock: exclusive flock on <data dir>/kvd.lock (see datadir_lock.h). */
#include "daemon/datadir_lock.h"

#include "base/dir_sync.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

/* Best effort: the pid the holder wrote, 0 if unreadable. */
static long read_holder_pid(int fd)
{
    char buf[32];
    ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
    if (n <= 0)
        return 0;
    buf[n] = 0;
    char *end;
    long pid = strtol(buf, &end, 10);
    return pid > 0 ? pid : 0;
}

int kv_datadir_lock(const char *dir, int *fd_out, char *err, size_t errlen)
{
    char path[4096];
    int rc;
    *fd_out = -1;
    if (snprintf(path, sizeof(path), "%s/%s", dir, KV_DATADIR_LOCK_FILE) >= (int)sizeof(path)) {
        snprintf(err, errlen, "data dir path too long: %s", dir);
        return -ENAMETOOLONG;
    }
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        rc = -errno;
        snprintf(err, errlen, "cannot open lock file %s: %s", path, strerror(-rc));
        return rc;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        rc = -errno;
        if (rc == -EWOULDBLOCK) {
            long pid = read_holder_pid(fd);
            if (pid > 0)
                snprintf(err, errlen,
                         "data dir %s is in use by another kvd process (pid %ld holds %s); "
                         "refusing to start",
                         dir, pid, path);
            else
                snprintf(err, errlen,
                         "data dir %s is in use by another kvd process (it holds %s); refusing "
                         "to start",
                         dir, path);
        } else {
            snprintf(err, errlen, "cannot lock %s: %s", path, strerror(-rc));
        }
        close(fd);
        return rc;
    }
    char pid[32];
    int n = snprintf(pid, sizeof(pid), "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)n, 0) != n) {
        rc = errno ? -errno : -EIO;
        snprintf(err, errlen, "cannot write lock file %s: %s", path, strerror(-rc));
        close(fd);
        return rc;
    }
    *fd_out = fd;
    return 0;
}

void kv_datadir_unlock(int fd)
{
    if (fd >= 0)
        close(fd);
}

int kv_datadir_sync(const char *dir, int which, char *err, size_t errlen)
{
    char parent[4096];
    int rc = kv_dir_parent(dir, parent, sizeof parent);
    if (rc < 0) {
        snprintf(err, errlen, "data dir path too long: %s", dir);
        return rc;
    }
    if ((which & KV_DATADIR_SYNC_SELF) && (rc = kv_dir_fsync(dir)) < 0) {
        snprintf(err, errlen, "cannot sync data dir %s: %s", dir, strerror(-rc));
        return rc;
    }
    if ((which & KV_DATADIR_SYNC_PARENT) && (rc = kv_dir_fsync(parent)) < 0) {
        snprintf(err, errlen, "cannot sync %s, the parent of data dir %s: %s", parent, dir,
                 strerror(-rc));
        return rc;
    }
    return 0;
}
