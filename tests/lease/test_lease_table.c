/* lease_table: records, attachments, checksum verification, persistence. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lease/lease_table.h"

typedef struct fx {
    char dir[64];
    MDB_env *env;
    kv_lease_table t;
} fx;

static void fx_open(fx *f)
{
    cr_assert_eq(mdb_env_create(&f->env), 0);
    cr_assert_eq(mdb_env_set_maxdbs(f->env, 4), 0);
    cr_assert_eq(mdb_env_set_mapsize(f->env, 64u << 20), 0);
    cr_assert_eq(mdb_env_open(f->env, f->dir, MDB_NOSYNC, 0644), 0);
    MDB_txn *txn;
    cr_assert_eq(mdb_txn_begin(f->env, NULL, 0, &txn), 0);
    cr_assert_eq(kv_lease_table_open(&f->t, txn), 0);
    cr_assert_eq(mdb_txn_commit(txn), 0);
}

static void fx_init(fx *f)
{
    snprintf(f->dir, sizeof(f->dir), "/tmp/kv-lease-table-XXXXXX");
    cr_assert_not_null(mkdtemp(f->dir));
    fx_open(f);
}

static void fx_fini(fx *f)
{
    char p[128];
    mdb_env_close(f->env);
    snprintf(p, sizeof(p), "%s/data.mdb", f->dir);
    unlink(p);
    snprintf(p, sizeof(p), "%s/lock.mdb", f->dir);
    unlink(p);
    rmdir(f->dir);
}

static MDB_txn *wtxn(fx *f)
{
    MDB_txn *txn;
    cr_assert_eq(mdb_txn_begin(f->env, NULL, 0, &txn), 0);
    return txn;
}

Test(lease_table, put_get_del)
{
    fx f;
    fx_init(&f);
    MDB_txn *txn = wtxn(&f);
    kv_lease_rec r = {.id = 42, .ttl = 60, .remaining_ttl = 0}, out;
    cr_assert_eq(kv_lease_table_get(&f.t, txn, 42, &out), -ENOENT);
    cr_assert_eq(kv_lease_table_put(&f.t, txn, &r), 0);
    cr_assert_eq(kv_lease_table_get(&f.t, txn, 42, &out), 0);
    cr_assert_eq(out.id, 42);
    cr_assert_eq(out.ttl, 60);
    cr_assert_eq(out.remaining_ttl, 0);
    /* replace with a checkpoint */
    r.remaining_ttl = 17;
    cr_assert_eq(kv_lease_table_put(&f.t, txn, &r), 0);
    cr_assert_eq(kv_lease_table_get(&f.t, txn, 42, &out), 0);
    cr_assert_eq(out.remaining_ttl, 17);
    /* extreme values survive */
    kv_lease_rec big = {.id = INT64_MAX, .ttl = 9000000000LL, .remaining_ttl = 8999999999LL};
    cr_assert_eq(kv_lease_table_put(&f.t, txn, &big), 0);
    cr_assert_eq(kv_lease_table_get(&f.t, txn, INT64_MAX, &out), 0);
    cr_assert_eq(out.ttl, 9000000000LL);
    cr_assert_eq(out.remaining_ttl, 8999999999LL);
    cr_assert_eq(kv_lease_table_del(&f.t, txn, 42), 0);
    cr_assert_eq(kv_lease_table_get(&f.t, txn, 42, &out), -ENOENT);
    cr_assert_eq(kv_lease_table_del(&f.t, txn, 42), -ENOENT);
    cr_assert_eq(mdb_txn_commit(txn), 0);
    fx_fini(&f);
}

typedef struct keys_acc {
    int n;
    char k[8][16];
    int stop_after;
} keys_acc;

static int keys_cb(void *arg, const uint8_t *key, size_t klen)
{
    keys_acc *a = arg;
    cr_assert_lt(klen, sizeof(a->k[0]));
    memcpy(a->k[a->n], key, klen);
    a->k[a->n][klen] = 0;
    a->n++;
    return a->stop_after && a->n == a->stop_after ? 99 : 0;
}

static int attach(fx *f, MDB_txn *txn, int64_t id, const char *k)
{
    return kv_lease_table_attach(&f->t, txn, id, (const uint8_t *)k, strlen(k));
}

Test(lease_table, attach_detach_keys)
{
    fx f;
    fx_init(&f);
    MDB_txn *txn = wtxn(&f);
    kv_lease_rec r = {.id = 7, .ttl = 10};
    cr_assert_eq(kv_lease_table_put(&f.t, txn, &r), 0);
    r.id = 8;
    cr_assert_eq(kv_lease_table_put(&f.t, txn, &r), 0);
    size_t n = 99;
    cr_assert_eq(kv_lease_table_key_count(&f.t, txn, 7, &n), 0);
    cr_assert_eq(n, 0);
    cr_assert_eq(attach(&f, txn, 7, "c"), 0);
    cr_assert_eq(attach(&f, txn, 7, "a"), 0);
    cr_assert_eq(attach(&f, txn, 7, "b"), 0);
    cr_assert_eq(attach(&f, txn, 7, "a"), 0); /* no-op */
    cr_assert_eq(attach(&f, txn, 8, "zz"), 0);
    cr_assert_eq(kv_lease_table_key_count(&f.t, txn, 7, &n), 0);
    cr_assert_eq(n, 3);
    keys_acc a = {0};
    cr_assert_eq(kv_lease_table_keys(&f.t, txn, 7, keys_cb, &a), 0);
    cr_assert_eq(a.n, 3);
    cr_assert_str_eq(a.k[0], "a");
    cr_assert_str_eq(a.k[1], "b");
    cr_assert_str_eq(a.k[2], "c");
    /* early stop returns fn's value */
    keys_acc s = {.stop_after = 2};
    cr_assert_eq(kv_lease_table_keys(&f.t, txn, 7, keys_cb, &s), 99);
    cr_assert_eq(s.n, 2);
    /* detach, and detach of an unattached key is a no-op */
    cr_assert_eq(kv_lease_table_detach(&f.t, txn, 7, (const uint8_t *)"b", 1), 0);
    cr_assert_eq(kv_lease_table_detach(&f.t, txn, 7, (const uint8_t *)"b", 1), 0);
    cr_assert_eq(kv_lease_table_detach(&f.t, txn, 9, (const uint8_t *)"b", 1), 0);
    cr_assert_eq(kv_lease_table_key_count(&f.t, txn, 7, &n), 0);
    cr_assert_eq(n, 2);
    /* too long a key */
    uint8_t big[600];
    memset(big, 'x', sizeof(big));
    cr_assert_eq(kv_lease_table_attach(&f.t, txn, 7, big, sizeof(big)), -ENAMETOOLONG);
    cr_assert_eq(kv_lease_table_attach(&f.t, txn, 7, big, 511), 0);
    cr_assert_eq(kv_lease_table_key_count(&f.t, txn, 7, &n), 0);
    cr_assert_eq(n, 3);
    /* del drops all attachments of 7 and leaves 8's alone */
    cr_assert_eq(kv_lease_table_del(&f.t, txn, 7), 0);
    cr_assert_eq(kv_lease_table_key_count(&f.t, txn, 7, &n), 0);
    cr_assert_eq(n, 0);
    keys_acc z = {0};
    cr_assert_eq(kv_lease_table_keys(&f.t, txn, 7, keys_cb, &z), 0);
    cr_assert_eq(z.n, 0);
    cr_assert_eq(kv_lease_table_key_count(&f.t, txn, 8, &n), 0);
    cr_assert_eq(n, 1);
    cr_assert_eq(mdb_txn_commit(txn), 0);
    fx_fini(&f);
}

typedef struct each_acc {
    int n;
    int64_t ids[16];
    int stop_after;
} each_acc;

static int each_cb(void *arg, const kv_lease_rec *rec)
{
    each_acc *a = arg;
    a->ids[a->n++] = rec->id;
    cr_assert_eq(rec->ttl, rec->id * 2);
    return a->stop_after && a->n == a->stop_after ? 7 : 0;
}

Test(lease_table, each_in_id_order)
{
    fx f;
    fx_init(&f);
    MDB_txn *txn = wtxn(&f);
    int64_t ids[] = {300, 5, 1, 70000, 256};
    for (size_t i = 0; i < 5; i++) {
        kv_lease_rec r = {.id = ids[i], .ttl = ids[i] * 2};
        cr_assert_eq(kv_lease_table_put(&f.t, txn, &r), 0);
    }
    each_acc a = {0};
    cr_assert_eq(kv_lease_table_each(&f.t, txn, each_cb, &a), 0);
    cr_assert_eq(a.n, 5);
    int64_t want[] = {1, 5, 256, 300, 70000};
    for (int i = 0; i < 5; i++)
        cr_assert_eq(a.ids[i], want[i]);
    each_acc s = {.stop_after = 2};
    cr_assert_eq(kv_lease_table_each(&f.t, txn, each_cb, &s), 7);
    cr_assert_eq(s.n, 2);
    mdb_txn_abort(txn);
    fx_fini(&f);
}

static int count_cb(void *arg, const kv_lease_rec *rec)
{
    (void)rec;
    (*(int *)arg)++;
    return 0;
}

/* Flips one byte of the stored value of lease id (behind the table's back). */
static void corrupt(fx *f, MDB_txn *txn, int64_t id, size_t at)
{
    uint8_t kb[8];
    for (int i = 0; i < 8; i++)
        kb[i] = (uint8_t)((uint64_t)id >> (56 - 8 * i));
    MDB_val k = {.mv_size = 8, .mv_data = kb}, v;
    cr_assert_eq(mdb_get(txn, f->t.leases, &k, &v), 0);
    uint8_t buf[64];
    cr_assert_leq(v.mv_size, sizeof(buf));
    cr_assert_gt(v.mv_size, at);
    memcpy(buf, v.mv_data, v.mv_size);
    buf[at] ^= 0x01;
    MDB_val nv = {.mv_size = v.mv_size, .mv_data = buf};
    cr_assert_eq(mdb_put(txn, f->t.leases, &k, &nv, 0), 0);
}

Test(lease_table, checksum_corruption_detected)
{
    fx f;
    fx_init(&f);
    MDB_txn *txn = wtxn(&f);
    for (int64_t id = 1; id <= 3; id++) {
        kv_lease_rec r = {.id = id, .ttl = 30, .remaining_ttl = 12};
        cr_assert_eq(kv_lease_table_put(&f.t, txn, &r), 0);
    }
    kv_lease_rec out;
    /* the stored value starts with the format version */
    uint8_t kb[8] = {0, 0, 0, 0, 0, 0, 0, 2};
    MDB_val k = {.mv_size = 8, .mv_data = kb}, v;
    cr_assert_eq(mdb_get(txn, f.t.leases, &k, &v), 0);
    cr_assert_eq(((const uint8_t *)v.mv_data)[0], 1);
    /* a flipped bit in the payload (ttl varint) */
    corrupt(&f, txn, 2, 4);
    cr_assert_eq(kv_lease_table_get(&f.t, txn, 2, &out), -EIO);
    cr_assert_eq(kv_lease_table_get(&f.t, txn, 1, &out), 0);
    cr_assert_eq(kv_lease_table_get(&f.t, txn, 3, &out), 0);
    /* the walk reports it rather than loading it */
    int n = 0;
    cr_assert_eq(kv_lease_table_each(&f.t, txn, count_cb, &n), -EIO);
    cr_assert_eq(n, 1);
    /* a flipped bit in the checksum itself */
    corrupt(&f, txn, 3, v.mv_size - 1);
    cr_assert_eq(kv_lease_table_get(&f.t, txn, 3, &out), -EIO);
    /* a record copied under another id (valid CRC, wrong id) */
    uint8_t kb1[8] = {0, 0, 0, 0, 0, 0, 0, 1};
    MDB_val k1 = {.mv_size = 8, .mv_data = kb1}, v1;
    cr_assert_eq(mdb_get(txn, f.t.leases, &k1, &v1), 0);
    uint8_t copy[64];
    memcpy(copy, v1.mv_data, v1.mv_size);
    MDB_val cv = {.mv_size = v1.mv_size, .mv_data = copy};
    uint8_t kb9[8] = {0, 0, 0, 0, 0, 0, 0, 9};
    MDB_val k9 = {.mv_size = 8, .mv_data = kb9};
    cr_assert_eq(mdb_put(txn, f.t.leases, &k9, &cv, 0), 0);
    cr_assert_eq(kv_lease_table_get(&f.t, txn, 9, &out), -EIO);
    /* a truncated value */
    MDB_val tv = {.mv_size = 3, .mv_data = copy};
    cr_assert_eq(mdb_put(txn, f.t.leases, &k9, &tv, 0), 0);
    cr_assert_eq(kv_lease_table_get(&f.t, txn, 9, &out), -EIO);
    mdb_txn_abort(txn);
    fx_fini(&f);
}

Test(lease_table, persists_across_reopen)
{
    fx f;
    fx_init(&f);
    MDB_txn *txn = wtxn(&f);
    kv_lease_rec r = {.id = 123456789012345LL, .ttl = 600, .remaining_ttl = 250};
    cr_assert_eq(kv_lease_table_put(&f.t, txn, &r), 0);
    cr_assert_eq(attach(&f, txn, r.id, "k1"), 0);
    cr_assert_eq(attach(&f, txn, r.id, "k2"), 0);
    cr_assert_eq(mdb_txn_commit(txn), 0);
    mdb_env_close(f.env);
    memset(&f.t, 0xff, sizeof(f.t));
    fx_open(&f);
    MDB_txn *rtxn;
    cr_assert_eq(mdb_txn_begin(f.env, NULL, MDB_RDONLY, &rtxn), 0);
    kv_lease_rec out;
    cr_assert_eq(kv_lease_table_get(&f.t, rtxn, r.id, &out), 0);
    cr_assert_eq(out.ttl, 600);
    cr_assert_eq(out.remaining_ttl, 250);
    size_t n;
    cr_assert_eq(kv_lease_table_key_count(&f.t, rtxn, r.id, &n), 0);
    cr_assert_eq(n, 2);
    mdb_txn_abort(rtxn);
    /* an aborted write leaves nothing behind */
    txn = wtxn(&f);
    kv_lease_rec r2 = {.id = 5, .ttl = 5};
    cr_assert_eq(kv_lease_table_put(&f.t, txn, &r2), 0);
    mdb_txn_abort(txn);
    cr_assert_eq(mdb_txn_begin(f.env, NULL, MDB_RDONLY, &rtxn), 0);
    cr_assert_eq(kv_lease_table_get(&f.t, rtxn, 5, &out), -ENOENT);
    mdb_txn_abort(rtxn);
    fx_fini(&f);
}
