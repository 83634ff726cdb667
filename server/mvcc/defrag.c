/* defrag: alarm state shared with the node and the API, the backend size for the quota, and
 * defragmentation (compacting copy + atomic swap of data.mdb). See store.h. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "mvcc/store_int.h"
#include "common/clock.h"

unsigned kv_store_alarms(kv_store *s)
{
    return atomic_load(&s->alarms) | atomic_load(&s->sticky);
}

unsigned kv_store_take_alarms(kv_store *s)
{
    return atomic_exchange(&s->to_raise, 0u);
}

void kv_store_request_alarm(kv_store *s, int type)
{
    if (type > 0 && type < 32)
        atomic_fetch_or(&s->to_raise, 1u << type);
}

void kv_describe_key(char *out, size_t cap, const char *prefix, const uint8_t *key, size_t len)
{
    size_t o = (size_t)snprintf(out, cap, "%s \"", prefix);
    for (size_t i = 0; i < len && o + 6 < cap; i++) {
        uint8_t c = key[i];
        if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\')
            out[o++] = (char)c;
        else
            o += (size_t)snprintf(out + o, cap - o, "\\x%02x", c);
    }
    if (o + 2 < cap) {
        out[o++] = '"';
        out[o] = 0;
    } else {
        out[cap - 1] = 0;
    }
}

void kv_store_note_corrupt(kv_store *s, const char *what)
{
    unsigned bit = 1u << KV_ALARM_CORRUPT;
    if (!(atomic_fetch_or(&s->sticky, bit) & bit)) {
        const char *dir = NULL;
        pthread_rwlock_rdlock(&s->swap);
        mdb_env_get_path(s->env, &dir);
        fprintf(stderr,
                "kvd: CORRUPT: a stored record of %s/data.mdb failed its checksum during %s; "
                "this member now refuses reads and writes with DATA_LOSS and raises the "
                "CORRUPT alarm (disarm it after repairing or replacing the data)\n",
                dir ? dir : "?", what);
        pthread_rwlock_unlock(&s->swap);
    }
    atomic_fetch_or(&s->to_raise, bit);
}

int64_t kv_store_db_size(kv_store *s)
{
    MDB_envinfo info;
    MDB_stat st;
    pthread_rwlock_rdlock(&s->swap);
    int rc = mdb_env_info(s->env, &info) || mdb_env_stat(s->env, &st);
    pthread_rwlock_unlock(&s->swap);
    if (rc)
        return 0;
    return ((int64_t)info.me_last_pgno + 1) * (int64_t)st.ms_psize;
}

int kv_store__free_pages(MDB_txn *txn, int64_t *out)
{
    MDB_cursor *c;
    int rc = kv_mdb_err(mdb_cursor_open(txn, 0, &c));
    if (rc)
        return rc;
    int64_t n = 0;
    MDB_val k, v;
    int r = mdb_cursor_get(c, &k, &v, MDB_FIRST);
    for (; r == 0; r = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
        if (v.mv_size >= sizeof(size_t)) {
            size_t cnt;
            memcpy(&cnt, v.mv_data, sizeof cnt);
            n += (int64_t)cnt;
        }
    }
    mdb_cursor_close(c);
    if (r != MDB_NOTFOUND)
        return kv_mdb_err(r);
    *out = n;
    return 0;
}

int64_t kv_store_db_size_in_use(kv_store *s)
{
    MDB_envinfo info;
    MDB_stat st;
    MDB_txn *txn = NULL;
    int64_t in_use = -1, freep = 0;
    pthread_rwlock_rdlock(&s->swap);
    pthread_mutex_lock(&s->size_mu);
    if (mdb_env_info(s->env, &info) || mdb_env_stat(s->env, &st))
        goto out;
    if (s->size_txnid == (uint64_t)info.me_last_txnid && s->size_txnid) {
        in_use = s->size_in_use; /* nothing committed since: the same pages */
        goto out;
    }
    if (mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn))
        goto out;
    /* the read txn's own view: its snapshot's last page and free list */
    if (mdb_env_info(s->env, &info) || kv_store__free_pages(txn, &freep))
        goto out;
    in_use = ((int64_t)info.me_last_pgno + 1 - freep) * (int64_t)st.ms_psize;
    s->size_txnid = (uint64_t)mdb_txn_id(txn);
    s->size_in_use = in_use;
out:
    if (txn)
        mdb_txn_abort(txn);
    pthread_mutex_unlock(&s->size_mu);
    pthread_rwlock_unlock(&s->swap);
    return in_use >= 0 ? in_use : kv_store_db_size(s);
}

size_t kv_store_quota(kv_store *s)
{
    return s->cfg.quota_bytes;
}

static uint64_t now_us(void)
{
    return kv_mono_us();
}

static int paths(kv_store *s, char dir[PATH_MAX], char tmpdir[PATH_MAX], char tmpfile[PATH_MAX],
                 char file[PATH_MAX])
{
    const char *d = NULL;
    if (mdb_env_get_path(s->env, &d) || !d)
        return -EINVAL;
    if ((size_t)snprintf(dir, PATH_MAX, "%s", d) >= PATH_MAX ||
        (size_t)snprintf(tmpdir, PATH_MAX, "%s/defrag.tmp", d) >= PATH_MAX ||
        (size_t)snprintf(tmpfile, PATH_MAX, "%s/defrag.tmp/data.mdb", d) >= PATH_MAX ||
        (size_t)snprintf(file, PATH_MAX, "%s/data.mdb", d) >= PATH_MAX)
        return -ENAMETOOLONG;
    return 0;
}

static int fsync_path(const char *p, int flags)
{
    int fd = open(p, flags | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int rc = fsync(fd) < 0 ? -errno : 0;
    close(fd);
    return rc;
}

void kv_store_defrag_release(kv_store_defrag_stats *st)
{
    if (st->old_fd > 0)
        close(st->old_fd);
    st->old_fd = -1;
}

int64_t kv_store_defrag_cleanup(const char *dir)
{
    char tmpdir[PATH_MAX], f[PATH_MAX];
    if ((size_t)snprintf(tmpdir, PATH_MAX, "%s/defrag.tmp", dir) >= PATH_MAX)
        return -ENAMETOOLONG;
    DIR *d = opendir(tmpdir);
    if (!d)
        return errno == ENOENT ? 0 : -errno;
    int64_t freed = 0;
    int rc = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        struct stat sb;
        if ((size_t)snprintf(f, PATH_MAX, "%s/%s", tmpdir, e->d_name) >= PATH_MAX) {
            rc = -ENAMETOOLONG;
            continue;
        }
        if (lstat(f, &sb) == 0 && S_ISREG(sb.st_mode))
            freed += (int64_t)sb.st_size;
        if (unlink(f) < 0 && errno != ENOENT)
            rc = -errno;
    }
    closedir(d);
    if (rmdir(tmpdir) < 0 && errno != ENOENT && rc == 0)
        rc = -errno;
    return rc < 0 ? rc : freed;
}

int kv_store_defrag_copy(kv_store *s, kv_store_defrag_stats *st)
{
    char dir[PATH_MAX], tmpdir[PATH_MAX], tmpfile[PATH_MAX], file[PATH_MAX];
    memset(st, 0, sizeof *st);
    st->old_fd = -1;
    if (s->batch.open)
        return -EBUSY;
    int rc = paths(s, dir, tmpdir, tmpfile, file);
    if (rc)
        return rc;
    struct stat sb;
    if (stat(file, &sb) == 0)
        st->file_before = (int64_t)sb.st_size;
    uint64_t t0 = now_us();
    if (mkdir(tmpdir, 0700) < 0 && errno != EEXIST)
        return -errno;
    if (unlink(tmpfile) < 0 && errno != ENOENT)
        return -errno;
    rc = mdb_env_copy2(s->env, tmpdir, MDB_CP_COMPACT);
    if (rc) {
        rc = rc == ENOSPC || rc == EDQUOT ? -ENOSPC : kv_mdb_err(rc);
        goto fail;
    }
    if ((rc = fsync_path(tmpfile, O_RDONLY)))
        goto fail;
    if (stat(tmpfile, &sb) == 0)
        st->file_after = (int64_t)sb.st_size;
    /* Keep the old inode referenced: freeing a large unlinked file takes long (280 ms for
     * 650 MB on ext4), and it must not happen inside the swap. kv_store_defrag_release. */
    st->old_fd = open(file, O_RDONLY | O_CLOEXEC);
    /* rename(2) is atomic: a crash leaves either the old or the new (complete, synced) file.
     * The open environment keeps using the old inode, with the same content (no write runs
     * until the swap), so readers go on meanwhile. */
    if (rename(tmpfile, file) < 0) {
        rc = -errno;
        kv_store_defrag_release(st);
        goto fail;
    }
    if ((rc = fsync_path(dir, O_RDONLY | O_DIRECTORY)))
        fprintf(stderr, "kvd: error: defragment: fsync of %s: %s\n", dir, strerror(-rc));
    rmdir(tmpdir);
    st->copy_us = now_us() - t0;
    return 0;
fail:
    unlink(tmpfile);
    rmdir(tmpdir);
    return rc;
}

int kv_store_defrag_swap(kv_store *s, kv_store_defrag_stats *st)
{
    char dir[PATH_MAX], tmpdir[PATH_MAX], tmpfile[PATH_MAX], file[PATH_MAX];
    int rc = paths(s, dir, tmpdir, tmpfile, file);
    if (rc)
        return rc;
    uint64_t t0 = now_us();
    pthread_rwlock_wrlock(&s->swap);
    kv_meta m;
    kv_store_env_reopen(s, dir, file, "defragment", &m);
    if (m.applied != s->committed.applied || m.rev != s->committed.rev) {
        fprintf(stderr, "kvd: fatal: defragmented copy of %s is at index %llu, expected %llu\n",
                file, (unsigned long long)m.applied, (unsigned long long)s->committed.applied);
        abort();
    }
    pthread_rwlock_unlock(&s->swap);
    st->swap_us = now_us() - t0;
    return 0;
}
