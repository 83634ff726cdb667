/*
 * snapshot: store copies, the whole-store hash and the offline snapshot helpers (snapshot.h).
 */
#include "mvcc/snapshot.h"

#include "common/msgf.h"

#include "common/crc32c.h"
#include "mvcc/lmdb_verify.h"
#include "mvcc/store_int.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const hash_dbs[] = {"meta",  "rev",   "kidx", "lease",      "lease_keys",
                                       "alarm", "lkidx", "lkey", "lease_lkeys"};
#define N_HASH_DBS (sizeof(hash_dbs) / sizeof(hash_dbs[0]))

static int skip_meta(const MDB_val *k)
{
    static const char *const skip[] = {"identity", "state", "cmpct"};
    for (size_t i = 0; i < 3; i++)
        if (k->mv_size == strlen(skip[i]) && memcmp(k->mv_data, skip[i], k->mv_size) == 0)
            return 1;
    return 0;
}

/* Hashes the databases dbis[] (N_HASH_DBS, in hash_dbs order; a dbi of 0 = absent). */
static int hash_txn(MDB_txn *txn, const MDB_dbi *dbis, uint32_t *hash, uint64_t *records)
{
    uint32_t crc = 0;
    uint64_t n = 0;
    for (size_t i = 0; i < N_HASH_DBS; i++) {
        crc = kv_crc32c(crc, hash_dbs[i], strlen(hash_dbs[i]));
        if (dbis[i] == 0)
            continue;
        MDB_cursor *c;
        int rc = mdb_cursor_open(txn, dbis[i], &c);
        if (rc)
            return kv_mdb_err(rc);
        MDB_val k, v;
        for (rc = mdb_cursor_get(c, &k, &v, MDB_FIRST); rc == 0;
             rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
            n++;
            if (i == 0 && skip_meta(&k))
                continue;
            crc = kv_crc32c(crc, k.mv_data, k.mv_size);
            crc = kv_crc32c(crc, v.mv_data, v.mv_size);
        }
        mdb_cursor_close(c);
        if (rc != MDB_NOTFOUND)
            return kv_mdb_err(rc);
    }
    *hash = crc;
    if (records)
        *records = n;
    return 0;
}

/* Revision from meta "state": crc(4) | applied(8) | revision(8) | compacted(8) | keys(8). */
static int state_revision(MDB_txn *txn, MDB_dbi meta, int64_t *rev)
{
    MDB_val k = {5, (void *)"state"}, v;
    int rc = mdb_get(txn, meta, &k, &v);
    if (rc == MDB_NOTFOUND) {
        *rev = 1;
        return 0;
    }
    if (rc)
        return kv_mdb_err(rc);
    if (v.mv_size < 20)
        return -EBADMSG;
    const uint8_t *p = v.mv_data;
    uint32_t want = kv_be32(p);
    if (kv_crc32c(0, p + 4, v.mv_size - 4) != want)
        return -EBADMSG;
    *rev = (int64_t)kv_be64(p + 12);
    return 0;
}

int kv_store_hash_all(kv_store *s, uint32_t *hash, int64_t *revision)
{
    MDB_dbi dbis[N_HASH_DBS] = {s->meta,  s->rev,   s->kidx, s->leases.leases, s->leases.keys,
                                s->alarm, s->lkidx, s->lkey, s->lease_lkeys};
    MDB_txn *txn;
    pthread_rwlock_rdlock(&s->swap);
    int rc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn);
    if (rc) {
        pthread_rwlock_unlock(&s->swap);
        return kv_mdb_err(rc);
    }
    rc = hash_txn(txn, dbis, hash, NULL);
    if (rc == 0)
        rc = state_revision(txn, s->meta, revision);
    mdb_txn_abort(txn);
    pthread_rwlock_unlock(&s->swap);
    return rc;
}

int kv_snapshot_file_verify(const char *path, int64_t *data_len, char *msg, size_t msglen)
{
    int rc = 0;
    uint8_t *buf = NULL;
    EVP_MD_CTX *md = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        rc = -errno;
        kv_msgf(msg, msglen, "open %s: %s", path, strerror(errno));
        return rc;
    }
    struct stat st;
    if (fstat(fd, &st) < 0) {
        rc = -errno;
        kv_msgf(msg, msglen, "stat %s: %s", path, strerror(errno));
        goto out;
    }
    if (st.st_size % 512 != KV_SNAPSHOT_SHA_LEN) {
        rc = -ENODATA;
        kv_msgf(msg, msglen, "snapshot file %s has no SHA-256 trailer", path);
        goto out;
    }
    int64_t len = st.st_size - KV_SNAPSHOT_SHA_LEN;
    buf = malloc(1 << 20);
    md = EVP_MD_CTX_new();
    if (buf == NULL || md == NULL || EVP_DigestInit_ex(md, EVP_sha256(), NULL) != 1) {
        rc = -ENOMEM;
        kv_msgf(msg, msglen, "out of memory");
        goto out;
    }
    for (int64_t off = 0; off < len;) {
        size_t want = (size_t)(len - off < (1 << 20) ? len - off : (1 << 20));
        ssize_t r = pread(fd, buf, want, off);
        if (r <= 0) {
            rc = r < 0 ? -errno : -EIO;
            kv_msgf(msg, msglen, "read %s: %s", path, strerror(-rc));
            goto out;
        }
        EVP_DigestUpdate(md, buf, (size_t)r);
        off += r;
    }
    uint8_t sum[EVP_MAX_MD_SIZE], want_sum[KV_SNAPSHOT_SHA_LEN];
    unsigned sl = 0;
    EVP_DigestFinal_ex(md, sum, &sl);
    if (pread(fd, want_sum, KV_SNAPSHOT_SHA_LEN, len) != KV_SNAPSHOT_SHA_LEN) {
        rc = -EIO;
        kv_msgf(msg, msglen, "read %s: short read", path);
        goto out;
    }
    if (sl != KV_SNAPSHOT_SHA_LEN || memcmp(sum, want_sum, KV_SNAPSHOT_SHA_LEN) != 0) {
        rc = -EBADMSG;
        /* etcd's restore: "expected sha256 %v, got %v" */
        kv_msgf(msg, msglen,
                "snapshot %s is corrupt: SHA-256 mismatch (the data does not match "
                "the checksum at its end)",
                path);
        goto out;
    }
    *data_len = len;
out:
    EVP_MD_CTX_free(md);
    free(buf);
    close(fd);
    return rc;
}

static int env_open_file(const char *path, unsigned flags, MDB_env **out)
{
    MDB_env *env = NULL;
    int rc = mdb_env_create(&env);
    if (rc)
        return kv_mdb_err(rc);
    if ((rc = mdb_env_set_maxdbs(env, 32)) ||
        (rc = mdb_env_open(env, path, flags | MDB_NOSUBDIR | MDB_NOLOCK, 0600))) {
        mdb_env_close(env);
        return rc > 0 ? -rc : -EBADMSG;
    }
    *out = env;
    return 0;
}

static int open_dbis(MDB_txn *txn, MDB_dbi *dbis)
{
    for (size_t i = 0; i < N_HASH_DBS; i++) {
        int rc = mdb_dbi_open(txn, hash_dbs[i], 0, &dbis[i]);
        if (rc == MDB_NOTFOUND) {
            if (i == 0)
                return -EBADMSG; /* no "meta": not a kvd store */
            dbis[i] = 0;
        } else if (rc) {
            return kv_mdb_err(rc);
        }
    }
    return 0;
}

/* The LMDB structure of the first len bytes of a snapshot file (mvcc/lmdb_verify.h). */
static int snapshot_structure(const char *path, uint64_t len, char *msg, size_t msglen)
{
    char err[512];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        kv_msgf(msg, msglen, "open %s: %s", path, strerror(e));
        return -e;
    }
    if (len == 0)
        len = 1; /* 0 means "the whole file" to the verifier; an empty data part is corrupt */
    int rc = kv_lmdb_verify_fd(fd, len, "its LMDB data", NULL, err, sizeof err);
    close(fd);
    if (rc == -EBADMSG)
        kv_msgf(msg, msglen, "%s is not a kvd snapshot: %s", path, err);
    else if (rc)
        kv_msgf(msg, msglen, "%s: %s", path, err);
    return rc;
}

int kv_snapshot_file_status(const char *path, kv_snapshot_status *st, char *msg, size_t msglen)
{
    memset(st, 0, sizeof(*st));
    struct stat fs;
    if (stat(path, &fs) < 0) {
        int e = errno;
        /* Go's wording (etcdctl: "stat x: no such file or directory") */
        kv_msgf(msg, msglen, "stat %s: %s", path, strerror(e));
        char *colon = msg ? strrchr(msg, ':') : NULL;
        if (colon && colon[1] == ' ' && colon[2] >= 'A' && colon[2] <= 'Z')
            colon[2] = (char)(colon[2] - 'A' + 'a');
        return -e;
    }
    st->has_sha = fs.st_size % 512 == KV_SNAPSHOT_SHA_LEN;
    if (kv_snapshot_is_bbolt(path)) /* an etcd 3.4 snapshot (Maintenance.Snapshot's format) */
        return kv_bbolt_snapshot_status(path, fs.st_size - (st->has_sha ? KV_SNAPSHOT_SHA_LEN : 0),
                                        st, msg, msglen);
    /* LMDB faults on a truncated or corrupt file: check its structure first
     * (docs/corruption.md). */
    uint64_t data_len = (uint64_t)fs.st_size - (st->has_sha ? KV_SNAPSHOT_SHA_LEN : 0);
    int rc = snapshot_structure(path, data_len, msg, msglen);
    if (rc)
        return rc;
    MDB_env *env = NULL;
    rc = env_open_file(path, MDB_RDONLY, &env);
    if (rc) {
        kv_msgf(msg, msglen, "%s is not a kvd snapshot (LMDB open failed)", path);
        return rc;
    }
    MDB_txn *txn = NULL;
    MDB_dbi dbis[N_HASH_DBS];
    rc = mdb_txn_begin(env, NULL, MDB_RDONLY, &txn);
    if (rc) {
        rc = kv_mdb_err(rc);
        goto out;
    }
    if ((rc = open_dbis(txn, dbis)) == 0 &&
        (rc = hash_txn(txn, dbis, &st->hash, &st->total_keys)) == 0 &&
        (rc = state_revision(txn, dbis[0], &st->revision)) == 0) {
        MDB_envinfo info;
        MDB_stat ms;
        mdb_env_info(env, &info);
        mdb_env_stat(env, &ms);
        st->total_size = (int64_t)(info.me_last_pgno + 1) * ms.ms_psize;
    }
out:
    if (rc)
        kv_msgf(msg, msglen, "%s is not a readable kvd snapshot: %s", path, strerror(-rc));
    if (txn)
        mdb_txn_abort(txn);
    mdb_env_close(env);
    return rc;
}

static int copy_prefix(const char *src, int64_t len, const char *dst, char *msg, size_t msglen)
{
    int rc = 0;
    int in = open(src, O_RDONLY | O_CLOEXEC);
    int out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    uint8_t *buf = malloc(1 << 20);
    if (in < 0 || out < 0 || buf == NULL) {
        rc = buf == NULL ? -ENOMEM : -errno;
        kv_msgf(msg, msglen, "open %s: %s", in < 0 ? src : dst, strerror(-rc));
        goto out;
    }
    for (int64_t off = 0; off < len;) {
        size_t want = (size_t)(len - off < (1 << 20) ? len - off : (1 << 20));
        ssize_t r = read(in, buf, want);
        if (r <= 0) {
            rc = r < 0 ? -errno : -EIO;
            kv_msgf(msg, msglen, "read %s: %s", src, strerror(-rc));
            goto out;
        }
        for (ssize_t w = 0; w < r;) {
            ssize_t x = write(out, buf + w, (size_t)(r - w));
            if (x < 0) {
                rc = -errno;
                kv_msgf(msg, msglen, "write %s: %s", dst, strerror(errno));
                goto out;
            }
            w += x;
        }
        off += r;
    }
    if (fsync(out) < 0) {
        rc = -errno;
        kv_msgf(msg, msglen, "fsync %s: %s", dst, strerror(errno));
    }
out:
    free(buf);
    if (in >= 0)
        close(in);
    if (out >= 0)
        close(out);
    return rc;
}

int kv_snapshot_mkdir(const char *dir, char *msg, size_t msglen)
{
    if (mkdir(dir, 0700) < 0) {
        int e = errno;
        if (e == EEXIST)
            kv_msgf(msg, msglen, "data-dir \"%s\" exists", dir);
        else
            kv_msgf(msg, msglen, "mkdir %s: %s", dir, strerror(e));
        return -e;
    }
    return 0;
}

int kv_snapshot_restore_dir(const char *snap, int64_t data_len, const char *dir, char *msg,
                            size_t msglen)
{
    char path[4096];
    if (kv_snapshot_is_bbolt(snap)) /* an etcd 3.4 snapshot (Maintenance.Snapshot's format) */
        return kv_bbolt_restore_dir(snap, data_len, dir, msg, msglen);
    /* A corrupt snapshot with a recomputed SHA-256 must not become a data dir. */
    int vrc = snapshot_structure(snap, data_len > 0 ? (uint64_t)data_len : 0, msg, msglen);
    if (vrc)
        return vrc;
    if ((vrc = kv_snapshot_mkdir(dir, msg, msglen)) != 0)
        return vrc;
    if ((size_t)snprintf(path, sizeof path, "%s/data.mdb", dir) >= sizeof path) {
        kv_msgf(msg, msglen, "data dir path too long");
        return -ENAMETOOLONG;
    }
    int rc = copy_prefix(snap, data_len, path, msg, msglen);
    if (rc)
        goto cleanup;
    MDB_env *env = NULL;
    rc = env_open_file(path, 0, &env);
    if (rc) {
        kv_msgf(msg, msglen, "%s is not a kvd snapshot (LMDB open failed)", snap);
        goto cleanup;
    }
    MDB_txn *txn;
    MDB_dbi dbis[N_HASH_DBS];
    rc = mdb_txn_begin(env, NULL, 0, &txn);
    if (rc) {
        rc = kv_mdb_err(rc);
        goto fail;
    }
    rc = open_dbis(txn, dbis);
    if (rc == 0) {
        MDB_val k = {8, (void *)"identity"};
        int r = mdb_del(txn, dbis[0], &k, NULL);
        if (r && r != MDB_NOTFOUND)
            rc = kv_mdb_err(r);
    }
    if (rc == 0 && dbis[5] != 0) {
        int r = mdb_drop(txn, dbis[5], 0); /* alarms belonged to the old members */
        if (r)
            rc = kv_mdb_err(r);
    }
    /* So does the membership: kvd bootstraps it again from its flags (etcd's restore writes
     * a new membership from --initial-cluster). And the old cluster's raft log and hard state
     * (votes, configuration entries of other members): the restored member starts a new log
     * at its applied index (etcd's restore writes a new WAL; server/node/node_snap.c). */
    static const char *const membership[] = {"members", "members_removed", "members_staged", "rlog",
                                             "rmeta"};
    for (size_t i = 0; rc == 0 && i < sizeof membership / sizeof membership[0]; i++) {
        MDB_dbi d;
        int r = mdb_dbi_open(txn, membership[i], 0, &d);
        if (r == 0)
            r = mdb_drop(txn, d, 0);
        if (r && r != MDB_NOTFOUND)
            rc = kv_mdb_err(r);
    }
    if (rc) {
        mdb_txn_abort(txn);
        goto fail;
    }
    rc = mdb_txn_commit(txn);
    if (rc) {
        rc = kv_mdb_err(rc);
        goto fail;
    }
    mdb_env_close(env);
    return 0;
fail:
    mdb_env_close(env);
    kv_msgf(msg, msglen, "restoring %s into %s: %s", snap, dir, strerror(-rc));
cleanup: /* leave no half-restored data dir behind */
    unlink(path);
    rmdir(dir);
    return rc;
}
