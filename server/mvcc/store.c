/* store: opening, batches (group commit), reads, status and hashing (see store.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include "common/crc32c.h"
#include "mvcc/store_int.h"
#include "base/lmdb_valcheck.h"

void kv_store_config_default(kv_store_config *c)
{
    memset(c, 0, sizeof *c);
    c->quota_bytes = (size_t)2 << 30;
    c->max_keys_per_lease = 0;
}

size_t kv_store_map_size(size_t quota)
{
    size_t head = quota / 4;
    if (head < ((size_t)16 << 20))
        head = (size_t)16 << 20;
    if (head > ((size_t)1 << 30))
        head = (size_t)1 << 30;
    return quota + head;
}

int kv_store_open_dbs(kv_store *s, MDB_txn *txn)
{
    int rc;
    if ((rc = mdb_dbi_open(txn, "meta", MDB_CREATE, &s->meta)) ||
        (rc = mdb_dbi_open(txn, "rev", MDB_CREATE, &s->rev)) ||
        (rc = mdb_dbi_open(txn, "kidx", MDB_CREATE | MDB_DUPSORT | MDB_DUPFIXED, &s->kidx)) ||
        (rc = mdb_dbi_open(txn, "alarm", MDB_CREATE, &s->alarm)) ||
        (rc = mdb_dbi_open(txn, "members", MDB_CREATE, &s->members)) ||
        (rc = mdb_dbi_open(txn, "members_removed", MDB_CREATE, &s->members_removed)) ||
        (rc = mdb_dbi_open(txn, "members_staged", MDB_CREATE, &s->members_staged)) ||
        (rc = mdb_dbi_open(txn, "lkidx", MDB_CREATE | MDB_DUPSORT | MDB_DUPFIXED, &s->lkidx)) ||
        (rc = mdb_dbi_open(txn, "lkey", MDB_CREATE, &s->lkey)) ||
        (rc = mdb_dbi_open(txn, "lease_lkeys", MDB_CREATE, &s->lease_lkeys)) ||
        (rc = mdb_dbi_open(txn, "auth", MDB_CREATE, &s->auth)))
        return kv_mdb_err(rc);
    return kv_lease_table_open(&s->leases, txn);
}

/* LMDB aborts after this returns. Reached only if a page changed after the startup verify
 * (docs/corruption.md, "The data file"): say what it means before the abort. */
static void env_assert(MDB_env *env, const char *msg)
{
    const char *dir = NULL;
    mdb_env_get_path(env, &dir);
    fprintf(stderr,
            "kvd: fatal: LMDB found %s/data.mdb inconsistent (%s): the data file is corrupt; "
            "replace this member or restore its data (docs/corruption.md)\n",
            dir ? dir : "?", msg ? msg : "?");
}

int kv_store_env_open(kv_store *s, const char *dir)
{
    /* A data file already larger than the quota (e.g. restarted with a smaller quota) still
     * gets the headroom above its size, so that deletes and compaction fit. */
    size_t map = kv_store_map_size(s->cfg.quota_bytes);
    char path[4096];
    struct stat sb;
    if ((size_t)snprintf(path, sizeof path, "%s/data.mdb", dir) < sizeof path &&
        stat(path, &sb) == 0 && (size_t)sb.st_size > s->cfg.quota_bytes)
        map = kv_store_map_size((size_t)sb.st_size);
    int rc = mdb_env_create(&s->env);
    if (rc)
        return kv_mdb_err(rc);
    mdb_env_set_assert(s->env, env_assert);
    if ((rc = mdb_env_set_maxdbs(s->env, 32)) || (rc = mdb_env_set_mapsize(s->env, map)) ||
        (rc = mdb_env_open(s->env, dir, MDB_NOTLS | (s->cfg.unsafe_no_fsync ? MDB_NOSYNC : 0),
                           0644))) {
        mdb_env_close(s->env);
        s->env = NULL;
        return kv_mdb_err(rc);
    }
    return 0;
}

void kv_store_env_reopen(kv_store *s, const char *dir, const char *file, const char *what,
                         kv_meta *m)
{
    mdb_env_close(s->env);
    s->env = NULL;
    MDB_txn *txn = NULL;
    unsigned alarms = 0;
    int rc;
    if ((rc = kv_store_env_open(s, dir)) ||
        (rc = kv_mdb_err(mdb_txn_begin(s->env, NULL, 0, &txn))) ||
        (rc = kv_store_open_dbs(s, txn)) || (rc = kv_meta_read(s, txn, m)) ||
        (rc = kv_alarm_load(s, txn, &alarms)) || (rc = kv_mdb_err(mdb_txn_commit(txn)))) {
        fprintf(stderr, "kvd: fatal: cannot reopen %s after %s: %s; restart kvd\n", file, what,
                strerror(rc < 0 ? -rc : rc));
        abort();
    }
    s->size_txnid = 0;                 /* a new environment: kv_store_db_size_in_use recounts */
    kv_mdb_map_learn(s->env, &s->map); /* the new mapping, for record size checks */
    atomic_store(&s->alarms, alarms);
}

int kv_store_open(kv_store **out, const kv_store_config *cfg)
{
    if (!out || !cfg || !cfg->dir)
        return -EINVAL;
    if (mkdir(cfg->dir, 0755) != 0 && errno != EEXIST)
        return -errno;
    kv_store *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    s->cfg = *cfg;
    s->cfg.dir = NULL; /* not kept: the environment knows its path */
    if (!s->cfg.quota_bytes)
        s->cfg.quota_bytes = (size_t)2 << 30;
    MDB_txn *txn = NULL;
    /* Writer-preferring: readers on other threads must not starve the defragment swap. */
    pthread_rwlockattr_t ra;
    pthread_rwlockattr_init(&ra);
#ifdef __GLIBC__
    pthread_rwlockattr_setkind_np(&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
#endif
    int rc = pthread_rwlock_init(&s->swap, &ra);
    pthread_rwlockattr_destroy(&ra);
    if (rc) {
        free(s);
        return -rc;
    }
    if ((rc = pthread_mutex_init(&s->size_mu, NULL))) {
        pthread_rwlock_destroy(&s->swap);
        free(s);
        return -rc;
    }
    pthread_mutexattr_t ma; /* error-checking: a second begin on the owner's thread is -EBUSY */
    pthread_mutexattr_init(&ma);
    pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ERRORCHECK);
    rc = pthread_mutex_init(&s->batch_mu, &ma);
    pthread_mutexattr_destroy(&ma);
    if (rc) {
        pthread_mutex_destroy(&s->size_mu);
        pthread_rwlock_destroy(&s->swap);
        free(s);
        return -rc;
    }
    if ((rc = kv_store_env_open(s, cfg->dir)))
        goto fail;
    if ((rc = mdb_txn_begin(s->env, NULL, 0, &txn))) {
        rc = kv_mdb_err(rc);
        goto fail;
    }
    s->maxkey = (size_t)mdb_env_get_maxkeysize(s->env);
    if (s->maxkey > 511)
        s->maxkey = 511; /* kv_iter keeps keys in 512-byte buffers */
    if ((rc = kv_store_open_dbs(s, txn)))
        goto fail;
    uint32_t version;
    rc = kv_format_read(s, txn, &version);
    s->counters.open_meta_reads++;
    if (rc == -ENOENT) {
        MDB_stat st;
        if ((rc = mdb_stat(txn, s->rev, &st))) {
            rc = kv_mdb_err(rc);
            goto fail;
        }
        if (st.ms_entries != 0) {
            rc = -EBADMSG; /* data without a format record */
            goto fail;
        }
        s->committed = (kv_meta){0, 1, -1, 0};
        if ((rc = kv_format_write(s, txn, KV_STORE_FORMAT_BASE)) ||
            (rc = kv_meta_write(s, txn, &s->committed)))
            goto fail;
    } else if (rc) {
        goto fail;
    } else if (version < KV_STORE_FORMAT_BASE || version > KV_STORE_FORMAT_VERSION) {
        rc = -EPROTONOSUPPORT;
        goto fail;
    } else {
        rc = kv_meta_read(s, txn, &s->committed);
        s->counters.open_meta_reads++;
        if (rc)
            goto fail;
    }
    unsigned alarms;
    if ((rc = kv_alarm_load(s, txn, &alarms)))
        goto fail;
    atomic_store(&s->alarms, alarms);
    rc = mdb_txn_commit(txn);
    txn = NULL;
    if (rc) {
        rc = kv_mdb_err(rc);
        goto fail;
    }
    kv_mdb_map_learn(s->env, &s->map); /* record size checks (base/lmdb_valcheck.h); best effort */
    *out = s;
    return 0;
fail:
    if (txn)
        mdb_txn_abort(txn);
    if (s->env)
        mdb_env_close(s->env);
    pthread_mutex_destroy(&s->batch_mu);
    pthread_mutex_destroy(&s->size_mu);
    pthread_rwlock_destroy(&s->swap);
    free(s);
    return rc;
}

void kv_store_close(kv_store *s)
{
    if (!s)
        return;
    if (s->batch.open)
        kv_store_batch_abort(s, &s->batch);
    if (s->env)
        mdb_env_close(s->env);
    pthread_mutex_destroy(&s->batch_mu);
    pthread_mutex_destroy(&s->size_mu);
    pthread_rwlock_destroy(&s->swap);
    free(s);
}

MDB_env *kv_store_env(kv_store *s)
{
    return s->env;
}

const kv_lease_table *kv_store_leases(kv_store *s)
{
    return &s->leases;
}

int kv_store_lease_keys(kv_store *s, int64_t id,
                        int (*fn)(void *arg, const uint8_t *key, size_t klen), void *arg)
{
    MDB_txn *txn;
    pthread_rwlock_rdlock(&s->swap);
    int rc = kv_mdb_err(mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn));
    if (rc == 0) {
        rc = kv_lk_lease_keys(s, txn, id, fn, arg);
        mdb_txn_abort(txn);
    }
    pthread_rwlock_unlock(&s->swap);
    return rc;
}

size_t kv_store_max_key_size(kv_store *s)
{
    (void)s;
    return SIZE_MAX; /* keys of any length (longkey.c); the request size limit bounds them */
}

void kv_store_get_counters(kv_store *s, kv_store_counters *out)
{
    *out = s->counters;
}

void kv_store_count_ops(kv_store *s, unsigned ranges, unsigned puts, unsigned deletes)
{
    atomic_fetch_add_explicit(&s->ops_ranges, ranges, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->ops_puts, puts, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->ops_deletes, deletes, memory_order_relaxed);
    if ((uint64_t)ranges + puts + deletes > 1)
        atomic_fetch_add_explicit(&s->ops_txns, 1, memory_order_relaxed);
}

/* The committed batch's counts (apply thread; the ops are read by the metrics). */
static void count_batch(kv_store *s, const kv_store_batch *b)
{
    s->counters.applies += b->applies;
    atomic_fetch_add_explicit(&s->ops_ranges, b->ops[0], memory_order_relaxed);
    atomic_fetch_add_explicit(&s->ops_puts, b->ops[1], memory_order_relaxed);
    atomic_fetch_add_explicit(&s->ops_deletes, b->ops[2], memory_order_relaxed);
    atomic_fetch_add_explicit(&s->ops_txns, b->ops[3], memory_order_relaxed);
}

void kv_store_get_ops(kv_store *s, kv_store_ops *out)
{
    out->ranges = atomic_load_explicit(&s->ops_ranges, memory_order_relaxed);
    out->puts = atomic_load_explicit(&s->ops_puts, memory_order_relaxed);
    out->deletes = atomic_load_explicit(&s->ops_deletes, memory_order_relaxed);
    out->txns = atomic_load_explicit(&s->ops_txns, memory_order_relaxed);
}

void kv_store_set_lease_observer(kv_store *s, const kv_store_lease_observer *obs)
{
    if (obs)
        s->obs = *obs;
    else
        memset(&s->obs, 0, sizeof s->obs);
}

int kv_store_batch_begin(kv_store *s, kv_store_batch **out)
{
    /* waits for a batch another thread still commits; this thread's own open batch (a caller
     * bug) is EDEADLK from the error-checking mutex */
    int lrc = pthread_mutex_lock(&s->batch_mu);
    if (lrc)
        return lrc == EDEADLK ? -EBUSY : -lrc;
    if (s->batch.open) {
        pthread_mutex_unlock(&s->batch_mu);
        return -EBUSY;
    }
    int rc = mdb_txn_begin(s->env, NULL, 0, &s->batch.txn);
    if (rc) {
        pthread_mutex_unlock(&s->batch_mu);
        return kv_mdb_err(rc);
    }
    s->batch.meta = s->committed;
    s->batch.alarms = atomic_load(&s->alarms);
    s->batch.base_size = kv_store_db_size(s);
    s->batch.grown = 0;
    s->batch.quiet = false;
    s->batch.shared = false;
    s->batch.spoilt = false;
    s->batch.applies = 0;
    memset(s->batch.ops, 0, sizeof s->batch.ops);
    s->batch.open = true;
    *out = &s->batch;
    return 0;
}

/* Less than 1 MiB available to kvd on the data dir's file system. */
static bool disk_nearly_full(kv_store *s)
{
    const char *dir = NULL;
    struct statvfs v;
    if (mdb_env_get_path(s->env, &dir) || !dir || statvfs(dir, &v) != 0)
        return false;
    return (uint64_t)v.f_bavail * v.f_frsize < ((uint64_t)1 << 20);
}

int kv_store_disk_free_below(kv_store *s, uint64_t bytes)
{
    const char *dir = NULL;
    struct statvfs v;
    if (mdb_env_get_path(s->env, &dir) || !dir || statvfs(dir, &v) != 0)
        return 0;
    return (uint64_t)v.f_bavail * v.f_frsize < bytes;
}

static int batch_commit(kv_store *s, kv_store_batch *b)
{
    int rc = b->spoilt ? -EAGAIN : kv_meta_write(s, b->txn, &b->meta);
    if (rc) {
        mdb_txn_abort(b->txn);
    } else {
        int mrc = mdb_txn_commit(b->txn);
        /* A full disk (write(2) failing with ENOSPC/EDQUOT) is told apart from other
         * failures: the node raises NOSPACE for it. LMDB reports a short
         * write as EIO: with (almost) no space left on the file system, that is a full disk
         * too. */
        rc = (mrc == ENOSPC || mrc == EDQUOT || (mrc == EIO && disk_nearly_full(s)))
                 ? -ENOSPC
                 : kv_mdb_err(mrc);
        if (!rc) {
            s->committed = b->meta;
            s->counters.commits++;
            count_batch(s, b);
            unsigned old = atomic_exchange(&s->alarms, b->alarms);
            if ((old & (1u << KV_ALARM_CORRUPT)) && !(b->alarms & (1u << KV_ALARM_CORRUPT)))
                atomic_store(&s->sticky, 0u); /* CORRUPT disarmed */
        }
    }
    b->txn = NULL;
    b->open = false;
    return rc;
}

int kv_store_batch_commit(kv_store *s, kv_store_batch *b)
{
    if (!b || b != &s->batch || !b->open)
        return -EINVAL;
    int rc = batch_commit(s, b);
    pthread_mutex_unlock(&s->batch_mu);
    return rc;
}

MDB_txn *kv_store_batch_txn(kv_store_batch *b)
{
    return b && b->open ? b->txn : NULL;
}

void kv_store_set_deterministic(kv_store *s, int on)
{
    s->deterministic = on != 0;
}

void kv_store_batch_set_quiet(kv_store_batch *b, int quiet)
{
    if (b)
        b->quiet = quiet != 0;
}

void kv_store_batch_set_shared(kv_store_batch *b, int shared)
{
    if (b)
        b->shared = shared != 0;
}

uint64_t kv_store_batch_applied(const kv_store_batch *b)
{
    return b ? b->meta.applied : 0;
}

int kv_store_apply_noop(kv_store *s, kv_store_batch *b, uint64_t index)
{
    if (!b || b != &s->batch || !b->open)
        return -EINVAL;
    if (b->spoilt)
        return -EAGAIN;
    if (index > b->meta.applied)
        b->meta.applied = index;
    return 0;
}

int kv_store_batch_commit_nometasync(kv_store *s, kv_store_batch *b)
{
    if (s->cfg.unsafe_no_fsync)
        return kv_store_batch_commit(s, b);
    if (!b || b != &s->batch || !b->open)
        return -EINVAL;
    mdb_env_set_flags(s->env, MDB_NOMETASYNC, 1);
    int rc = batch_commit(s, b);
    mdb_env_set_flags(s->env, MDB_NOMETASYNC, 0);
    pthread_mutex_unlock(&s->batch_mu); /* the next writer sees the env's flags reset */
    return rc;
}

int kv_store_commit_flushes(const kv_store *s, int nometasync)
{
    if (s->cfg.unsafe_no_fsync)
        return 0;
    return nometasync ? 1 : 2;
}

void kv_store_batch_abort(kv_store *s, kv_store_batch *b)
{
    if (!b || b != &s->batch || !b->open)
        return;
    mdb_txn_abort(b->txn);
    b->txn = NULL;
    b->open = false;
    pthread_mutex_unlock(&s->batch_mu);
}

int kv_store_range_read(kv_store *s, const kv_range_opts *o, kv_range_result *out)
{
    memset(out, 0, sizeof *out);
    MDB_txn *txn;
    pthread_rwlock_rdlock(&s->swap);
    int rc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn);
    if (rc) {
        pthread_rwlock_unlock(&s->swap);
        return kv_mdb_err(rc);
    }
    kv_meta m;
    rc = kv_meta_read(s, txn, &m);
    if (!rc)
        rc = kv_range_run(s, txn, m.rev, m.compact_rev, m.keys, o, out);
    mdb_txn_abort(txn);
    pthread_rwlock_unlock(&s->swap);
    return rc;
}

int kv_store_get_status(kv_store *s, kv_store_status *st)
{
    memset(st, 0, sizeof *st);
    MDB_txn *txn;
    pthread_rwlock_rdlock(&s->swap);
    int rc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn);
    if (rc) {
        pthread_rwlock_unlock(&s->swap);
        return kv_mdb_err(rc);
    }
    kv_meta m;
    if ((rc = kv_meta_read(s, txn, &m)))
        goto out;
    st->revision = m.rev;
    st->compact_revision = m.compact_rev;
    st->applied_index = m.applied;
    st->keys = m.keys;
    MDB_envinfo info;
    MDB_stat est;
    if ((rc = kv_mdb_err(mdb_env_info(s->env, &info))) ||
        (rc = kv_mdb_err(mdb_env_stat(s->env, &est))))
        goto out;
    int64_t pages = (int64_t)info.me_last_pgno + 1;
    int64_t freep = 0;
    if ((rc = kv_store__free_pages(txn, &freep)))
        goto out;
    st->db_size = pages * (int64_t)est.ms_psize;
    st->db_size_in_use = (pages - freep) * (int64_t)est.ms_psize;
out:
    mdb_txn_abort(txn);
    pthread_rwlock_unlock(&s->swap);
    return rc;
}

/* HashKV in one read txn; *cur gets the current revision. Records a pending physical
 * compaction would remove are skipped, so the hash does not depend on its progress. */
static int hash_kv(kv_store *s, int64_t rev, uint32_t *hash, int64_t *compact_rev, int64_t *cur)
{
    MDB_txn *txn;
    pthread_rwlock_rdlock(&s->swap);
    int rc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn);
    if (rc) {
        pthread_rwlock_unlock(&s->swap);
        return kv_mdb_err(rc);
    }
    kv_meta m;
    MDB_cursor *c = NULL;
    int64_t pending_rev = 0;
    if ((rc = kv_meta_read(s, txn, &m)))
        goto out;
    *cur = m.rev;
    if (rev > 0 && rev <= m.compact_rev) { /* etcd 3.4 HashByRev */
        rc = KV_STORE_ERR_COMPACTED;
        goto out;
    }
    if (rev > m.rev) {
        rc = KV_STORE_ERR_FUTURE_REV;
        goto out;
    }
    if (rev == 0) /* etcd: only 0 means current; a negative rev hashes no revision */
        rev = m.rev;
    if ((rc = kv_compact_pending(s, txn, &pending_rev)) < 0)
        goto out;
    if ((rc = kv_mdb_err(mdb_cursor_open(txn, s->rev, &c))))
        goto out;
    uint32_t h = 0;
    MDB_val k, v;
    int r2 = mdb_cursor_get(c, &k, &v, MDB_FIRST);
    for (; r2 == 0; r2 = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
        if (k.mv_size != KV_REVKEY_LEN || !kv_mdb_val_sane(txn, &v, KV_MDB_VAL_MAX) ||
            !kv_rec_verify(k.mv_data, v.mv_data, v.mv_size)) {
            rc = -EBADMSG;
            goto out;
        }
        if ((int64_t)kv_be64(k.mv_data) > rev)
            break;
        if (pending_rev > 0 && (int64_t)kv_be64(k.mv_data) <= pending_rev) {
            rc = kv_compact_survives(s, txn, k.mv_data, v.mv_data, v.mv_size, pending_rev);
            if (rc < 0)
                goto out;
            if (rc == 0)
                continue;
        }
        h = kv_crc32c(h, k.mv_data, k.mv_size);
        h = kv_crc32c(h, v.mv_data, v.mv_size);
    }
    if (r2 != 0 && r2 != MDB_NOTFOUND) {
        rc = kv_mdb_err(r2);
        goto out;
    }
    *hash = h;
    *compact_rev = m.compact_rev;
    rc = 0;
out:
    if (c)
        mdb_cursor_close(c);
    mdb_txn_abort(txn);
    pthread_rwlock_unlock(&s->swap);
    if (rc == -EBADMSG)
        kv_store_note_corrupt(s, "hash");
    return rc;
}

int kv_store_hash_kv(kv_store *s, int64_t rev, uint32_t *hash, int64_t *compact_rev)
{
    int64_t cur;
    return hash_kv(s, rev, hash, compact_rev, &cur);
}

int kv_store_hash_kv_cur(kv_store *s, int64_t rev, uint32_t *hash, int64_t *compact_rev,
                         int64_t *cur)
{
    return hash_kv(s, rev, hash, compact_rev, cur);
}

int kv_store_compact_step(kv_store *s, kv_store_batch *b, uint32_t max_keys, uint32_t max_revs,
                          uint32_t max_us, uint64_t *keys, uint64_t *removed)
{
    if (!s || !b || !b->open || b != &s->batch)
        return -EINVAL;
    if (b->spoilt)
        return -EAGAIN;
    MDB_txn *child;
    int rc = mdb_txn_begin(s->env, b->txn, 0, &child);
    if (rc)
        return kv_mdb_err(rc);
    uint64_t k = 0, r = 0;
    rc = kv_compact_run(s, child, max_keys, max_revs, max_us, &k, &r);
    if (rc < 0) {
        mdb_txn_abort(child);
        return rc;
    }
    int rc2 = kv_mdb_err(mdb_txn_commit(child));
    if (rc2)
        return rc2;
    if (keys)
        *keys += k;
    if (removed)
        *removed += r;
    return rc;
}

int kv_store_compact_pending(kv_store *s, int64_t *rev)
{
    MDB_txn *txn;
    int rc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn);
    if (rc)
        return kv_mdb_err(rc);
    rc = kv_compact_pending(s, txn, rev);
    mdb_txn_abort(txn);
    return rc;
}
