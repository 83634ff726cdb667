/*
 * install.c: replacing the store by a snapshot received from the raft leader, as a
 * file swap, never as a copy: the received file is a complete LMDB data file (a compacted copy
 * of the leader's environment). Its per-member records are rewritten in ONE small write
 * transaction of that file (this member's "identity"; the caller rewrites the raft log there),
 * it is synced and renamed over <dir>/data.mdb (the commit point: rename(2) is atomic, a crash
 * leaves the old or the new complete file), and the environment is reopened on it (the swap,
 * as Defragment's). No transaction of the store's environment grows with the state's size,
 * so no state size runs into MDB_TXN_FULL. See store.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mvcc/lmdb_verify.h"
#include "mvcc/store_int.h"
#include "base/lmdb_valcheck.h"

struct kv_store_install {
    MDB_env *env;
    MDB_txn *txn;
    char path[PATH_MAX];
};

/* Room above the file for the install txn: the raft records and the pages LMDB copies on
 * write (the txn is small; the map is virtual address space, nothing is allocated). */
#define INSTALL_MAP_HEADROOM ((size_t)256 << 20)

static int fsync_path(const char *p, int flags)
{
    int fd = open(p, flags | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int rc = fsync(fd) < 0 ? -errno : 0;
    close(fd);
    return rc;
}

static int data_paths(kv_store *s, char dir[PATH_MAX], char file[PATH_MAX])
{
    const char *d = NULL;
    if (mdb_env_get_path(s->env, &d) || !d)
        return -EINVAL;
    if ((size_t)snprintf(dir, PATH_MAX, "%s", d) >= PATH_MAX ||
        (size_t)snprintf(file, PATH_MAX, "%s/data.mdb", d) >= PATH_MAX)
        return -ENAMETOOLONG;
    return 0;
}

/* This member's raw "identity" record (CRC included; absent: *len 0). */
static int own_identity(kv_store *s, uint8_t *buf, size_t cap, size_t *len)
{
    MDB_txn *rt = NULL;
    *len = 0;
    pthread_rwlock_rdlock(&s->swap);
    int rc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, &rt);
    if (rc == 0) {
        MDB_val k = {8, (void *)"identity"}, v;
        rc = mdb_get(rt, s->meta, &k, &v);
        if (rc == 0 && (v.mv_size > cap || !kv_mdb_val_sane(rt, &v, v.mv_size)))
            rc = EBADMSG;
        else if (rc == 0) {
            memcpy(buf, v.mv_data, v.mv_size);
            *len = v.mv_size;
        } else if (rc == MDB_NOTFOUND) {
            rc = 0;
        }
        mdb_txn_abort(rt);
    }
    pthread_rwlock_unlock(&s->swap);
    return rc == EBADMSG ? -EBADMSG : kv_mdb_err(rc);
}

void kv_store_install_abort(kv_store_install *in)
{
    if (!in)
        return;
    if (in->txn)
        mdb_txn_abort(in->txn);
    if (in->env)
        mdb_env_close(in->env);
    free(in);
}

int kv_store_install_begin(kv_store *s, const char *path, kv_store_install **out)
{
    if (!s || !path || !out || s->batch.open)
        return !s || !path || !out ? -EINVAL : -EBUSY;
    *out = NULL;
    uint8_t ident[512];
    size_t ident_len = 0;
    int rc = own_identity(s, ident, sizeof ident, &ident_len);
    if (rc < 0)
        return rc;
    struct stat sb;
    if (stat(path, &sb) != 0)
        return -errno;
    /* The received file is checked before LMDB maps it: a corrupt page would crash this
     * member now or later while serving it (docs/corruption.md). */
    char verr[512];
    if ((rc = kv_lmdb_verify_path(path, 0, NULL, verr, sizeof verr)) < 0) {
        fprintf(stderr, "kvd: error: refusing the received snapshot: %s\n", verr);
        return rc;
    }
    kv_store_install *in = calloc(1, sizeof *in);
    if (!in)
        return -ENOMEM;
    if ((size_t)snprintf(in->path, sizeof in->path, "%s", path) >= sizeof in->path) {
        free(in);
        return -ENAMETOOLONG;
    }
    size_t map = kv_store_map_size(s->cfg.quota_bytes);
    if ((size_t)sb.st_size > map)
        map = (size_t)sb.st_size;
    map += INSTALL_MAP_HEADROOM;
    /* MDB_NOLOCK: the file is private to this thread until it is renamed. */
    if ((rc = mdb_env_create(&in->env)) || (rc = mdb_env_set_maxdbs(in->env, 32)) ||
        (rc = mdb_env_set_mapsize(in->env, map)) ||
        (rc = mdb_env_open(in->env, path,
                           MDB_NOSUBDIR | MDB_NOLOCK | (s->cfg.unsafe_no_fsync ? MDB_NOSYNC : 0),
                           0600)) ||
        (rc = mdb_txn_begin(in->env, NULL, 0, &in->txn))) {
        rc = rc == EINVAL || rc == MDB_INVALID || rc == MDB_VERSION_MISMATCH ? -EBADMSG
                                                                             : kv_mdb_err(rc);
        goto fail;
    }
    MDB_dbi meta;
    if ((rc = mdb_dbi_open(in->txn, "meta", 0, &meta))) {
        rc = rc == MDB_NOTFOUND ? -EBADMSG : kv_mdb_err(rc);
        goto fail;
    }
    /* "format": crc32c(4, BE) | version (4, BE), checked by hand: the received file is not
     * the store's environment (base/lmdb_valcheck.h's map bounds do not apply to it). */
    MDB_val fk = {6, (void *)"format"}, fv;
    if ((rc = mdb_get(in->txn, meta, &fk, &fv))) {
        rc = rc == MDB_NOTFOUND ? -EBADMSG : kv_mdb_err(rc);
        goto fail;
    }
    const uint8_t *fp = fv.mv_data;
    if (fv.mv_size != 8) {
        rc = -EBADMSG;
        goto fail;
    }
    uint32_t version = kv_be32(fp + 4);
    if (version < KV_STORE_FORMAT_BASE || version > KV_STORE_FORMAT_VERSION) {
        rc = -EPROTONOSUPPORT;
        goto fail;
    }
    MDB_val sk = {5, (void *)"state"}, sv;
    if ((rc = mdb_get(in->txn, meta, &sk, &sv))) {
        rc = rc == MDB_NOTFOUND ? -EBADMSG : kv_mdb_err(rc);
        goto fail;
    }
    MDB_val ik = {8, (void *)"identity"}, iv = {ident_len, ident};
    rc = ident_len ? mdb_put(in->txn, meta, &ik, &iv, 0) : mdb_del(in->txn, meta, &ik, NULL);
    if (rc && rc != MDB_NOTFOUND) {
        rc = kv_mdb_err(rc);
        goto fail;
    }
    *out = in;
    return 0;
fail:
    kv_store_install_abort(in);
    return rc;
}

MDB_txn *kv_store_install_txn(kv_store_install *in)
{
    return in ? in->txn : NULL;
}

int kv_store_install_commit(kv_store *s, kv_store_install *in)
{
    if (!s || !in || !in->txn) {
        kv_store_install_abort(in);
        return -EINVAL;
    }
    int rc = kv_mdb_err(mdb_txn_commit(in->txn)); /* syncs data pages, then the meta page */
    in->txn = NULL;
    mdb_env_close(in->env);
    in->env = NULL;
    if (rc == 0 && !s->cfg.unsafe_no_fsync)
        rc = fsync_path(in->path, O_RDONLY);
    free(in);
    return rc == -ENOSPC || rc == -EDQUOT ? -ENOSPC : rc;
}

int kv_store_install_publish(kv_store *s, const char *path, int *old_fd)
{
    char dir[PATH_MAX], file[PATH_MAX];
    *old_fd = -1;
    int rc = data_paths(s, dir, file);
    if (rc)
        return rc;
    /* Keep the old inode referenced: freeing a large file's blocks takes long and must not
     * happen inside the swap (the caller closes it off the loop). */
    *old_fd = open(file, O_RDONLY | O_CLOEXEC);
    if (rename(path, file) < 0) {
        rc = -errno;
        if (*old_fd >= 0)
            close(*old_fd);
        *old_fd = -1;
        return rc;
    }
    if (!s->cfg.unsafe_no_fsync && (rc = fsync_path(dir, O_RDONLY | O_DIRECTORY)))
        fprintf(stderr, "kvd: error: snapshot install: fsync of %s: %s\n", dir, strerror(-rc));
    return 0;
}

int kv_store_install_swap(kv_store *s)
{
    char dir[PATH_MAX], file[PATH_MAX];
    int rc = data_paths(s, dir, file);
    if (rc)
        return rc;
    pthread_rwlock_wrlock(&s->swap);
    kv_meta m;
    kv_store_env_reopen(s, dir, file, "installing a snapshot", &m);
    s->committed = m;
    s->maxkey = (size_t)mdb_env_get_maxkeysize(s->env);
    if (s->maxkey > 511)
        s->maxkey = 511;
    pthread_rwlock_unlock(&s->swap);
    return 0;
}

int kv_store_snapshot_check(const char *path)
{
    MDB_env *env = NULL;
    MDB_txn *rt = NULL;
    int rc = mdb_env_create(&env);
    if (rc)
        return kv_mdb_err(rc);
    if ((rc = mdb_env_set_maxdbs(env, 32)) ||
        (rc = mdb_env_open(env, path, MDB_RDONLY | MDB_NOSUBDIR | MDB_NOLOCK, 0600)) ||
        (rc = mdb_txn_begin(env, NULL, MDB_RDONLY, &rt))) {
        rc = rc == EINVAL || rc == MDB_INVALID || rc == MDB_VERSION_MISMATCH ? -EBADMSG
                                                                             : kv_mdb_err(rc);
        goto out;
    }
    MDB_dbi meta;
    MDB_val fk = {6, (void *)"format"}, fv, sk = {5, (void *)"state"}, sv;
    if ((rc = mdb_dbi_open(rt, "meta", 0, &meta)) || (rc = mdb_get(rt, meta, &fk, &fv)) ||
        (rc = mdb_get(rt, meta, &sk, &sv))) {
        rc = rc == MDB_NOTFOUND ? -EBADMSG : kv_mdb_err(rc);
        goto out;
    }
    const uint8_t *fp = fv.mv_data;
    if (fv.mv_size != 8)
        rc = -EBADMSG;
    else if (kv_be32(fp + 4) < KV_STORE_FORMAT_BASE || kv_be32(fp + 4) > KV_STORE_FORMAT_VERSION)
        rc = -EPROTONOSUPPORT;
out:
    if (rt)
        mdb_txn_abort(rt);
    mdb_env_close(env);
    return rc;
}

int kv_store_copy_fd(kv_store *s, int fd, unsigned flags)
{
    pthread_rwlock_rdlock(&s->swap);
    int rc = mdb_env_copyfd2(s->env, fd, flags);
    pthread_rwlock_unlock(&s->swap);
    return rc ? (rc == ENOSPC || rc == EDQUOT ? -ENOSPC : kv_mdb_err(rc)) : 0;
}
