/* alarm: the alarm table (etcd 3.4 etcdserver/api/v3alarm) in the "alarm" LMDB database
 * (keyspace.h: kv_ks_alarm_*; the apply-time gates are in server/apply/apply_gate.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/crc32c.h"
#include "mvcc/store_int.h"

#define ALARM_KEY_LEN 12

static void alarm_key(uint8_t k[ALARM_KEY_LEN], uint64_t member, uint32_t type)
{
    kv_put_be64(k, member);
    k[8] = (uint8_t)(type >> 24);
    k[9] = (uint8_t)(type >> 16);
    k[10] = (uint8_t)(type >> 8);
    k[11] = (uint8_t)type;
}

static uint32_t key_type(const uint8_t *k)
{
    return ((uint32_t)k[8] << 24) | ((uint32_t)k[9] << 16) | ((uint32_t)k[10] << 8) | k[11];
}

static bool rec_ok(const MDB_val *k, const MDB_val *v)
{
    if (k->mv_size != ALARM_KEY_LEN || v->mv_size != 4)
        return false;
    uint32_t c = kv_crc32c(0, k->mv_data, ALARM_KEY_LEN);
    const uint8_t *p = v->mv_data;
    return (((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]) == c;
}

const char *kv_alarm_name(int type)
{
    switch (type) {
    case KV_ALARM_NOSPACE:
        return "NOSPACE";
    case KV_ALARM_CORRUPT:
        return "CORRUPT";
    default:
        return "NONE";
    }
}

/* Calls fn for every stored alarm (in key order: member, then type). */
static int walk(kv_store *s, MDB_txn *txn, int (*fn)(void *arg, uint64_t m, uint32_t t), void *arg)
{
    MDB_cursor *c;
    int rc = kv_mdb_err(mdb_cursor_open(txn, s->alarm, &c));
    if (rc)
        return rc;
    MDB_val k, v;
    int r2;
    for (r2 = mdb_cursor_get(c, &k, &v, MDB_FIRST); r2 == 0 && rc == 0;
         r2 = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
        if (!rec_ok(&k, &v)) {
            rc = -EBADMSG;
            break;
        }
        rc = fn(arg, kv_be64(k.mv_data), key_type(k.mv_data));
    }
    mdb_cursor_close(c);
    if (rc == 0 && r2 != 0 && r2 != MDB_NOTFOUND)
        rc = kv_mdb_err(r2);
    return rc;
}

static int mask_fn(void *arg, uint64_t m, uint32_t t)
{
    (void)m;
    if (t < 32)
        *(unsigned *)arg |= 1u << t;
    return 0;
}

int kv_alarm_load(kv_store *s, MDB_txn *txn, unsigned *mask)
{
    *mask = 0;
    return walk(s, txn, mask_fn, mask);
}

int kv_ks_alarm_activate(kv_ks *ks, uint64_t member, int type)
{
    kv_store *s = ks->s;
    MDB_txn *txn = ks->w.txn;
    if (type != KV_ALARM_NOSPACE && type != KV_ALARM_CORRUPT)
        return -EINVAL;
    uint8_t k[ALARM_KEY_LEN];
    alarm_key(k, member, (uint32_t)type);
    MDB_val key = {ALARM_KEY_LEN, k}, val;
    int g = mdb_get(txn, s->alarm, &key, &val);
    if (g == 0) /* already active: etcd answers with the existing alarm */
        return 0;
    if (g != MDB_NOTFOUND)
        return kv_mdb_err(g);
    MDB_stat st;
    int rc = kv_mdb_err(mdb_stat(txn, s->alarm, &st));
    if (rc)
        return rc;
    if (st.ms_entries >= KV_MAX_ALARMS)
        return -EMLINK;
    uint32_t c = kv_crc32c(0, k, ALARM_KEY_LEN);
    uint8_t v[4] = {(uint8_t)(c >> 24), (uint8_t)(c >> 16), (uint8_t)(c >> 8), (uint8_t)c};
    val = (MDB_val){4, v};
    if ((rc = kv_mdb_err(mdb_put(txn, s->alarm, &key, &val, 0))))
        return rc;
    if (!(ks->alarms & (1u << type)))
        fprintf(stderr, "kvd: warning: alarm raised: %s (member %016llx)\n", kv_alarm_name(type),
                (unsigned long long)member);
    ks->alarms |= 1u << type;
    return 0;
}

int kv_ks_alarm_deactivate(kv_ks *ks, uint64_t member, int type)
{
    kv_store *s = ks->s;
    MDB_txn *txn = ks->w.txn;
    uint8_t k[ALARM_KEY_LEN];
    alarm_key(k, member, (uint32_t)type);
    MDB_val key = {ALARM_KEY_LEN, k};
    int d = mdb_del(txn, s->alarm, &key, NULL);
    if (d == MDB_NOTFOUND)
        return -ENOENT;
    int rc = kv_mdb_err(d);
    if (rc)
        return rc;
    unsigned m = 0;
    if ((rc = kv_alarm_load(s, txn, &m)))
        return rc;
    if (type >= 0 && type < 32 && (ks->alarms & (1u << type)) && !(m & (1u << type)))
        fprintf(stderr, "kvd: alarm cleared: %s (member %016llx)\n", kv_alarm_name(type),
                (unsigned long long)member);
    ks->alarms = m;
    return 0;
}

typedef struct cb_ctx {
    int (*fn)(void *arg, uint64_t member, int type);
    void *arg;
} cb_ctx;

static int cb_fn(void *arg, uint64_t m, uint32_t t)
{
    cb_ctx *c = arg;
    return c->fn(c->arg, m, (int)t);
}

int kv_ks_alarm_walk(kv_ks *ks, int (*fn)(void *arg, uint64_t member, int type), void *arg)
{
    cb_ctx c = {fn, arg};
    return walk(ks->s, ks->w.txn, cb_fn, &c);
}

int kv_store_alarm_list(kv_store *s, int (*fn)(void *arg, uint64_t member, int type), void *arg)
{
    MDB_txn *txn;
    pthread_rwlock_rdlock(&s->swap);
    int rc = kv_mdb_err(mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn));
    if (rc == 0) {
        cb_ctx c = {fn, arg};
        rc = walk(s, txn, cb_fn, &c);
        mdb_txn_abort(txn);
    }
    pthread_rwlock_unlock(&s->swap);
    return rc;
}
