/*
 * snapshot_import: `kvctl snapshot status|restore` of an etcd 3.4 snapshot (a bbolt file,
 * docs/snapshots.md): the status etcdctl prints, and a kvd data dir with the same keyspace
 * (every stored revision with its create/mod revision and version, the current and the
 * compacted revision), the leases with their TTLs and keys, the users and roles (etcd's
 * bcrypt hashes verify through auth/auth_hash.h) and the consistent index as the applied
 * index. Alarms and membership are not carried (the restored member bootstraps them from its
 * flags, as etcd's restore). The file is read through bbolt/bbolt.h: a corrupt or truncated
 * file gives -EBADMSG and a message, and restore removes the data dir it started.
 * Memory: bounded by the reader's pages and one record; LMDB transactions commit every
 * IMPORT_BATCH records.
 */
#include "bbolt/bbolt.h"
#include "common/msgf.h"
#include "mvcc/auth_store.h"
#include "common/crc32c.h"
#include "mvcc/snapshot.h"
#include "mvcc/store_int.h"

#include "internal.pb-c.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define IMPORT_BATCH 20000

int kv_snapshot_is_bbolt(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    static const uint8_t magic[4] = {0xED, 0xDA, 0x0C, 0xED};
    uint8_t b[4];
    int yes = 0;
    static const off_t at[] = {16, 4096 + 16, 8192 + 16, 16384 + 16, 65536 + 16};
    for (size_t i = 0; !yes && i < sizeof at / sizeof at[0]; i++)
        yes = pread(fd, b, 4, at[i]) == 4 && memcmp(b, magic, 4) == 0;
    close(fd);
    return yes;
}

/* ---- status ---- */
typedef struct status_ctx {
    kv_bb_reader *r;
    uint32_t crc;
    uint64_t keys;
    int64_t rev;
    int is_key;
    char *msg;
    size_t msglen;
} status_ctx;

static int status_kv(void *arg, const uint8_t *k, size_t kl, const uint8_t *v, size_t vl, int b)
{
    status_ctx *c = arg;
    (void)b;
    c->crc = kv_crc32c(c->crc, k, kl);
    c->crc = kv_crc32c(c->crc, v, vl);
    if (c->is_key && kl >= 8)
        c->rev = (int64_t)kv_be64(k);
    c->keys++;
    return 0;
}

static int status_bucket(void *arg, const uint8_t *k, size_t kl, const uint8_t *v, size_t vl,
                         int is_bucket)
{
    status_ctx *c = arg;
    (void)v;
    (void)vl;
    if (!is_bucket || kl >= 256) {
        kv_msgf(c->msg, c->msglen, "not an etcd snapshot: a top-level key is not a bucket");
        return -EBADMSG;
    }
    char name[256];
    memcpy(name, k, kl);
    name[kl] = '\0';
    c->crc = kv_crc32c(c->crc, k, kl);
    c->is_key = strcmp(name, "key") == 0;
    const char *path[1] = {name};
    /* the walk of the root goes on after this nested walk: the reader keeps no cursor */
    return kv_bb_walk(c->r, path, 1, status_kv, c, c->msg, c->msglen);
}

int kv_bbolt_snapshot_status(const char *path, int64_t len, kv_snapshot_status *st, char *msg,
                             size_t msglen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        kv_msgf(msg, msglen, "open %s: %s", path, strerror(e));
        return -e;
    }
    kv_bb_reader *r = NULL;
    char m[400] = "";
    int rc = kv_bb_reader_open(&r, fd, len, m, sizeof m);
    status_ctx c = {.r = r, .msg = m, .msglen = sizeof m};
    if (rc == 0)
        rc = kv_bb_walk(r, NULL, 0, status_bucket, &c, m, sizeof m);
    if (rc == 0) {
        st->hash = c.crc;
        st->revision = c.rev;
        st->total_keys = c.keys;
        st->total_size = (int64_t)(kv_bb_pages(r) * kv_bb_page_size(r));
    } else {
        kv_msgf(msg, msglen, "%s: %s", path, m[0] ? m : strerror(-rc));
    }
    kv_bb_reader_free(r);
    close(fd);
    return rc;
}

/* ---- restore ---- */
typedef struct imp {
    kv_store *s;
    MDB_txn *txn;
    size_t in_txn;
    int64_t max_rev;
    int64_t finished, scheduled;
    uint64_t consistent;
    int has_auth_rev;
    char *msg;
    size_t msglen;
} imp;

static int imp_step(imp *im)
{
    if (++im->in_txn < IMPORT_BATCH)
        return 0;
    im->in_txn = 0;
    int rc = mdb_txn_commit(im->txn);
    im->txn = NULL;
    if (rc)
        return kv_mdb_err(rc);
    return kv_mdb_err(mdb_txn_begin(im->s->env, NULL, 0, &im->txn));
}

static int bad(imp *im, const char *what)
{
    kv_msgf(im->msg, im->msglen, "not a valid etcd snapshot: %s", what);
    return -EBADMSG;
}

static int imp_key(void *arg, const uint8_t *k, size_t kl, const uint8_t *v, size_t vl, int b)
{
    imp *im = arg;
    if (b || (kl != 17 && kl != 18) || k[8] != '_' || (kl == 18 && k[17] != 't'))
        return bad(im, "a \"key\" bucket record has a malformed revision");
    int64_t main = (int64_t)kv_be64(k), sub = (int64_t)kv_be64(k + 9);
    int tomb = kl == 18;
    if (main < 1 || sub < 0)
        return bad(im, "a revision is out of range");
    Mvccpb__KeyValue *kv = mvccpb__key_value__unpack(NULL, vl, v);
    if (kv == NULL || kv->key.len == 0) {
        if (kv)
            mvccpb__key_value__free_unpacked(kv, NULL);
        return bad(im, "a \"key\" bucket value is not a mvccpb.KeyValue");
    }
    if (tomb) { /* etcd's tombstone holds the key only; kvd's its mod revision too */
        Mvccpb__KeyValue t = MVCCPB__KEY_VALUE__INIT;
        t.key = kv->key;
        t.mod_revision = main;
        int rc = kv_rec_put(im->s, im->txn, main, sub, true, &t);
        if (rc == 0) {
            kv_ent e = {main, sub, true};
            uint8_t dup[KV_DUP_LEN];
            kv_dup_encode(dup, &e);
            MDB_val dv = {KV_DUP_LEN, dup};
            if (t.key.len <= KV_SHORT_KEY_MAX) {
                MDB_val kk = {t.key.len, t.key.data};
                rc = kv_mdb_err(mdb_put(im->txn, im->s->kidx, &kk, &dv, 0));
            } else {
                uint8_t h[KV_LK_HANDLE];
                kv_lk_handle(h, t.key.data, t.key.len);
                MDB_val kk = {KV_LK_HANDLE, h};
                rc = kv_lk_key_put(im->s, im->txn, h, t.key.data, t.key.len);
                if (rc == 0)
                    rc = kv_mdb_err(mdb_put(im->txn, im->s->lkidx, &kk, &dv, 0));
            }
        }
        mvccpb__key_value__free_unpacked(kv, NULL); /* t.key points into it */
        if (main > im->max_rev)
            im->max_rev = main;
        return rc ? rc : imp_step(im);
    }
    if (kv->mod_revision != main) {
        mvccpb__key_value__free_unpacked(kv, NULL);
        return bad(im, "a record's mod_revision differs from its revision");
    }
    int rc = kv_rec_put(im->s, im->txn, main, sub, false, kv);
    if (rc == 0) {
        kv_ent e = {main, sub, false};
        uint8_t dup[KV_DUP_LEN];
        kv_dup_encode(dup, &e);
        MDB_val dv = {KV_DUP_LEN, dup};
        if (kv->key.len <= KV_SHORT_KEY_MAX) {
            MDB_val kk = {kv->key.len, kv->key.data};
            rc = kv_mdb_err(mdb_put(im->txn, im->s->kidx, &kk, &dv, 0));
        } else {
            uint8_t h[KV_LK_HANDLE];
            kv_lk_handle(h, kv->key.data, kv->key.len);
            MDB_val kk = {KV_LK_HANDLE, h};
            rc = kv_lk_key_put(im->s, im->txn, h, kv->key.data, kv->key.len);
            if (rc == 0)
                rc = kv_mdb_err(mdb_put(im->txn, im->s->lkidx, &kk, &dv, 0));
        }
    }
    mvccpb__key_value__free_unpacked(kv, NULL);
    if (main > im->max_rev)
        im->max_rev = main;
    return rc ? rc : imp_step(im);
}

static int imp_meta(void *arg, const uint8_t *k, size_t kl, const uint8_t *v, size_t vl, int b)
{
    imp *im = arg;
    if (b)
        return 0;
    if (kl == 16 && memcmp(k, "consistent_index", 16) == 0) {
        if (vl != 8)
            return bad(im, "meta consistent_index is not 8 bytes");
        im->consistent = kv_be64(v);
    } else if (kl == 18 && memcmp(k, "finishedCompactRev", 18) == 0) {
        if (vl < 8)
            return bad(im, "meta finishedCompactRev is short");
        im->finished = (int64_t)kv_be64(v);
    } else if (kl == 19 && memcmp(k, "scheduledCompactRev", 19) == 0) {
        if (vl < 8)
            return bad(im, "meta scheduledCompactRev is short");
        im->scheduled = (int64_t)kv_be64(v);
    }
    return 0;
}

static int imp_lease(void *arg, const uint8_t *k, size_t kl, const uint8_t *v, size_t vl, int b)
{
    imp *im = arg;
    if (b || kl != 8)
        return bad(im, "a \"lease\" bucket key is not 8 bytes");
    Kvdpb__LeaseRecord *l = kvdpb__lease_record__unpack(NULL, vl, v); /* leasepb.Lease's wire */
    if (l == NULL)
        return bad(im, "a \"lease\" bucket value is not a leasepb.Lease");
    kv_lease_rec rec = {.id = l->id, .ttl = l->ttl, .remaining_ttl = l->remaining_ttl};
    kvdpb__lease_record__free_unpacked(l, NULL);
    if (rec.id != (int64_t)kv_be64(k) || rec.id == 0)
        return bad(im, "a lease record's ID differs from its key");
    int rc = kv_lease_table_put(&im->s->leases, im->txn, &rec);
    return rc ? rc : imp_step(im);
}

typedef struct auth_imp {
    imp *im;
    char kind;
} auth_imp;

static int imp_auth_rec(void *arg, const uint8_t *k, size_t kl, const uint8_t *v, size_t vl, int b)
{
    auth_imp *a = arg;
    if (b)
        return bad(a->im, "a nested bucket in an auth bucket");
    kv_auth_tx tx = {.s = a->im->s, .txn = a->im->txn, .read = 0};
    int rc = kv_auth_put(&tx, a->kind, k, kl, v, vl);
    return rc ? rc : imp_step(a->im);
}

static int imp_auth(void *arg, const uint8_t *k, size_t kl, const uint8_t *v, size_t vl, int b)
{
    imp *im = arg;
    if (b)
        return 0;
    kv_auth_tx tx = {.s = im->s, .txn = im->txn, .read = 0};
    if (kl == 11 && memcmp(k, "authEnabled", 11) == 0 && vl == 1)
        return kv_auth_set_enabled(&tx, v[0] == 1);
    if (kl == 12 && memcmp(k, "authRevision", 12) == 0 && vl == 8)
        return kv_auth_put(&tx, KV_AUTH_META, "revision", 8, v, 8);
    return 0;
}

typedef struct attach_ctx {
    imp *im;
    uint64_t live;
} attach_ctx;

/* Live keys: count them and attach the leased ones (etcd's restore does the same). */
static int attach_leases(imp *im, uint64_t *live)
{
    kv_iter it;
    int rc = kv_iter_open(&it, im->s, im->txn, (const uint8_t *)"\0", 1, (const uint8_t *)"\0", 1,
                          INT64_MAX, false);
    if (rc)
        return rc;
    *live = 0;
    while ((rc = kv_iter_next(&it)) == 1) {
        (*live)++;
        Mvccpb__KeyValue *kv = NULL;
        rc = kv_rec_load(im->s, im->txn, &it.ent, it.key, it.klen, &kv);
        if (rc)
            break;
        if (kv->lease != 0) {
            kv_lease_rec l;
            int g = kv_lease_table_get(&im->s->leases, im->txn, kv->lease, &l);
            if (g == 0)
                rc = kv_lk_lease_attach(im->s, im->txn, kv->lease, it.key, it.klen);
            else if (g != -ENOENT) /* a key of a missing lease stays unattached, as etcd's */
                rc = g;
        }
        mvccpb__key_value__free_unpacked(kv, NULL);
        if (rc)
            break;
    }
    kv_iter_close(&it);
    return rc < 0 ? rc : 0;
}

static void remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        char p[4200];
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(dir);
}

static int restore_into(kv_bb_reader *r, kv_store *s, imp *im)
{
    static const char *const k_key[] = {"key"}, *const k_meta[] = {"meta"},
                             *const k_lease[] = {"lease"}, *const k_auth[] = {"auth"},
                             *const k_users[] = {"authUsers"}, *const k_roles[] = {"authRoles"};
    int rc = kv_mdb_err(mdb_txn_begin(s->env, NULL, 0, &im->txn));
    if (rc)
        return rc;
    rc = kv_bb_walk(r, k_meta, 1, imp_meta, im, im->msg, im->msglen);
    if (rc == -ENOENT)
        return rc;
    if (rc == 0)
        rc = kv_bb_walk(r, k_key, 1, imp_key, im, im->msg, im->msglen);
    if (rc == 0) {
        rc = kv_bb_walk(r, k_lease, 1, imp_lease, im, im->msg, im->msglen);
        if (rc == -ENOENT)
            rc = 0;
    }
    if (rc == 0) {
        rc = kv_bb_walk(r, k_auth, 1, imp_auth, im, im->msg, im->msglen);
        if (rc == -ENOENT)
            rc = 0;
    }
    auth_imp au = {im, KV_AUTH_USER}, ar = {im, KV_AUTH_ROLE};
    if (rc == 0) {
        rc = kv_bb_walk(r, k_users, 1, imp_auth_rec, &au, im->msg, im->msglen);
        if (rc == -ENOENT)
            rc = 0;
    }
    if (rc == 0) {
        rc = kv_bb_walk(r, k_roles, 1, imp_auth_rec, &ar, im->msg, im->msglen);
        if (rc == -ENOENT)
            rc = 0;
    }
    uint64_t live = 0;
    if (rc == 0)
        rc = attach_leases(im, &live);
    if (rc == 0) {
        kv_meta m = {
            .applied = im->consistent, .rev = im->max_rev, .compact_rev = -1, .keys = live};
        int64_t cmp = im->finished > 0 ? im->finished : -1;
        if (im->scheduled > cmp) { /* etcd finishes an interrupted compaction on restore */
            cmp = im->scheduled;
            rc = kv_compact_schedule(s, im->txn, cmp);
        }
        m.compact_rev = cmp;
        if (m.rev < cmp)
            m.rev = cmp;
        if (m.rev < 1)
            m.rev = 1;
        if (rc == 0)
            rc = kv_meta_write(s, im->txn, &m);
    }
    if (rc == 0) {
        rc = kv_mdb_err(mdb_txn_commit(im->txn));
        im->txn = NULL;
    }
    return rc;
}

int kv_bbolt_restore_dir(const char *snap, int64_t len, const char *dir, char *msg, size_t msglen)
{
    /* check the whole file before a data dir exists */
    kv_snapshot_status st;
    int rc = kv_bbolt_snapshot_status(snap, len, &st, msg, msglen);
    if (rc)
        return rc;
    if ((rc = kv_snapshot_mkdir(dir, msg, msglen)) != 0)
        return rc;
    int fd = open(snap, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        rc = -errno;
        kv_msgf(msg, msglen, "open %s: %s", snap, strerror(errno));
        remove_dir(dir);
        return rc;
    }
    kv_bb_reader *r = NULL;
    kv_store *s = NULL;
    char m[400] = "";
    imp im = {.msg = m, .msglen = sizeof m, .finished = -1, .scheduled = -1};
    kv_store_config cfg;
    kv_store_config_default(&cfg);
    cfg.dir = dir;
    /* The map must hold what the snapshot holds, whatever quota the member will run with (it
     * raises NOSPACE then if the data is over it): LMDB's file is about twice bbolt's for the
     * same keyspace (docs/ARCHITECTURE.md), so 3x the snapshot, never below the default. With
     * the default 2 GiB quota, etcd snapshots above about 1.2 GiB failed to import. */
    if ((uint64_t)len * 3 > (uint64_t)cfg.quota_bytes)
        cfg.quota_bytes = (size_t)len * 3;
    rc = kv_bb_reader_open(&r, fd, len, m, sizeof m);
    if (rc == 0 && (rc = kv_store_open(&s, &cfg)) < 0)
        kv_msgf(m, sizeof m, "cannot create the store in %s: %s", dir, strerror(-rc));
    if (rc == 0) {
        im.s = s;
        rc = restore_into(r, s, &im);
        if (im.txn)
            mdb_txn_abort(im.txn);
        if (rc == -ENOENT) /* the reader named the missing bucket */
            rc = -EBADMSG;
    }
    if (s) {
        if (rc == 0 && mdb_env_sync(s->env, 1) != 0)
            rc = -EIO;
        kv_store_close(s);
    }
    kv_bb_reader_free(r);
    close(fd);
    if (rc) {
        kv_msgf(msg, msglen, "%s: %s", snap, m[0] ? m : strerror(-rc));
        remove_dir(dir);
    }
    return rc;
}
