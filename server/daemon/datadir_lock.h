/*
 * datadir_lock: one kvd process per data directory.
 *
 * kv_datadir_lock() takes an exclusive flock(2) on <dir>/kvd.lock (created if missing) and
 * writes the caller's pid into it. The lock is held as long as the returned descriptor is
 * open: for the process lifetime in kvd (the kernel drops it when the process dies, also on
 * kill -9, so a stale file never blocks a restart). A second process fails at once (etcd
 * waits; kvd refuses so an operator mistake is visible immediately) with -EWOULDBLOCK and a
 * message naming the holder's pid.
 *
 * Threads: any; no state outside the descriptor.
 */
#ifndef KV_DATADIR_LOCK_H
#define KV_DATADIR_LOCK_H

#include <stddef.h>

#define KV_DATADIR_LOCK_FILE "kvd.lock"

/* dir must exist. On success *fd is the lock descriptor (owned by the caller; close it or
 * kv_datadir_unlock to release). On failure err (errlen bytes) gets a one-line message:
 * -EWOULDBLOCK = held by another process, other negative errno = cannot open/lock. */
int kv_datadir_lock(const char *dir, int *fd, char *err, size_t errlen);
/* Releases the lock (closes fd); fd < 0 is a no-op. The file is left in place. */
void kv_datadir_unlock(int fd);

/* Makes the data dir's directory entries durable (fsync of the directories, POSIX's rule: a
 * new, renamed or removed name survives a power loss only once its parent directory is
 * synced): which = KV_DATADIR_SYNC_PARENT syncs the directory holding dir's own entry (a
 * data dir kvd just made), KV_DATADIR_SYNC_SELF syncs dir (the files LMDB and kvd created in
 * it: data.mdb, kvd.lock). 0 or a negative errno with a message in err. Threads: any. */
#define KV_DATADIR_SYNC_PARENT 1
#define KV_DATADIR_SYNC_SELF 2
int kv_datadir_sync(const char *dir, int which, char *err, size_t errlen);

#endif
