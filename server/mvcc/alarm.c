/* alarm: the alarm table (etcd 3.4 etcdserver/api/v3alarm) in the "alarm" LMDB database and
 * the apply-time gates of the NOSPACE (capped) and CORRUPT appliers. See store.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mvcc/crc32c.h"
#include "internal.pb-c.h"
#include "mvcc/store_int.h"

#define ALARM_KEY_LEN 12

static void alarm_key(uint8_t k[ALARM_KEY_LEN], uint64_t member, uint32_t type)
{
    kv_be64_put(k, member);
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
        rc = fn(arg, kv_be64_get(k.mv_data), key_type(k.mv_data));
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

typedef struct list_ctx {
    uint32_t type; /* 0 = all */
    Etcdserverpb__AlarmResponse *resp;
    int err;
} list_ctx;

static int add_member(Etcdserverpb__AlarmResponse *r, uint64_t m, uint32_t t)
{
    Etcdserverpb__AlarmMember **a = realloc(r->alarms, (r->n_alarms + 1) * sizeof *a);
    if (!a)
        return -ENOMEM;
    r->alarms = a;
    Etcdserverpb__AlarmMember *am = malloc(sizeof *am);
    if (!am)
        return -ENOMEM;
    etcdserverpb__alarm_member__init(am);
    am->memberid = m;
    am->alarm = (Etcdserverpb__AlarmType)t;
    r->alarms[r->n_alarms++] = am;
    return 0;
}

static int list_fn(void *arg, uint64_t m, uint32_t t)
{
    list_ctx *l = arg;
    if (l->type != 0 && l->type != t)
        return 0;
    return add_member(l->resp, m, t);
}

int kv_alarm_apply(kv_store *s, MDB_txn *txn, unsigned *mask, int64_t rev,
                   const Etcdserverpb__AlarmRequest *ar, kv_result *res,
                   Etcdserverpb__AlarmResponse **out)
{
    Etcdserverpb__AlarmResponse *resp = malloc(sizeof *resp);
    if (!resp)
        return -ENOMEM;
    etcdserverpb__alarm_response__init(resp);
    int rc = 0;
    uint32_t type = (uint32_t)ar->alarm;
    uint8_t k[ALARM_KEY_LEN];
    alarm_key(k, ar->memberid, type);
    MDB_val key = {ALARM_KEY_LEN, k}, val;
    switch (ar->action) {
    case ETCDSERVERPB__ALARM_REQUEST__ALARM_ACTION__GET: {
        list_ctx l = {type, resp, 0};
        rc = walk(s, txn, list_fn, &l);
        break;
    }
    case ETCDSERVERPB__ALARM_REQUEST__ALARM_ACTION__ACTIVATE: {
        if (type == KV_ALARM_NONE)
            break; /* as etcd: nothing to activate */
        if (type != KV_ALARM_NOSPACE && type != KV_ALARM_CORRUPT) {
            kv_res_err(res, KV_GRPC_INVALID_ARGUMENT, "kvd: unknown alarm type %u", type);
            rc = 1;
            break;
        }
        int g = mdb_get(txn, s->alarm, &key, &val);
        if (g == 0) { /* already active: etcd answers with the existing alarm */
            rc = add_member(resp, ar->memberid, type);
            break;
        }
        if (g != MDB_NOTFOUND) {
            rc = kv_mdb_err(g);
            break;
        }
        MDB_stat st;
        if ((rc = kv_mdb_err(mdb_stat(txn, s->alarm, &st))))
            break;
        if (st.ms_entries >= KV_MAX_ALARMS) {
            kv_res_err(res, KV_GRPC_RESOURCE_EXHAUSTED, "kvd: too many alarms (limit %d)",
                       KV_MAX_ALARMS);
            rc = 1;
            break;
        }
        uint32_t c = kv_crc32c(0, k, ALARM_KEY_LEN);
        uint8_t v[4] = {(uint8_t)(c >> 24), (uint8_t)(c >> 16), (uint8_t)(c >> 8), (uint8_t)c};
        val = (MDB_val){4, v};
        if ((rc = kv_mdb_err(mdb_put(txn, s->alarm, &key, &val, 0))))
            break;
        if (!(*mask & (1u << type)))
            fprintf(stderr, "kvd: alarm raised: %s (member %016llx)\n", kv_alarm_name((int)type),
                    (unsigned long long)ar->memberid);
        *mask |= 1u << type;
        rc = add_member(resp, ar->memberid, type);
        break;
    }
    case ETCDSERVERPB__ALARM_REQUEST__ALARM_ACTION__DEACTIVATE: {
        int d = mdb_del(txn, s->alarm, &key, NULL);
        if (d == MDB_NOTFOUND)
            break; /* as etcd: nothing to answer */
        if ((rc = kv_mdb_err(d)))
            break;
        unsigned m = 0;
        if ((rc = kv_alarm_load(s, txn, &m)))
            break;
        if ((*mask & (1u << type)) && !(m & (1u << type)))
            fprintf(stderr, "kvd: alarm cleared: %s (member %016llx)\n", kv_alarm_name((int)type),
                    (unsigned long long)ar->memberid);
        *mask = m;
        rc = add_member(resp, ar->memberid, type);
        break;
    }
    default:
        break; /* etcd answers nothing for an unknown action */
    }
    if (rc == 0 && !(resp->header = kv_header_new(rev)))
        rc = -ENOMEM;
    if (rc) {
        protobuf_c_message_free_unpacked(&resp->base, NULL);
        return rc;
    }
    *out = resp;
    return 0;
}

static int txn_has_put(const Etcdserverpb__TxnRequest *t, int depth)
{
    if (depth > 64)
        return 1; /* deeper than any accepted txn: treat as growing */
    for (int side = 0; side < 2; side++) {
        size_t n = side ? t->n_failure : t->n_success;
        Etcdserverpb__RequestOp **ops = side ? t->failure : t->success;
        for (size_t i = 0; i < n; i++) {
            if (ops[i]->request_case == ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT)
                return 1;
            if (ops[i]->request_case == ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_TXN &&
                txn_has_put(ops[i]->request_txn, depth + 1))
                return 1;
        }
    }
    return 0;
}

int kv_alarm_is_growth(const Kvdpb__InternalRequest *ir)
{
    return ir->request_case == KVDPB__INTERNAL_REQUEST__REQUEST_PUT ||
           ir->request_case == KVDPB__INTERNAL_REQUEST__REQUEST_LEASE_GRANT ||
           (ir->request_case == KVDPB__INTERNAL_REQUEST__REQUEST_TXN && txn_has_put(ir->txn, 0));
}

int kv_alarm_gate(unsigned mask, const Kvdpb__InternalRequest *ir, kv_result *res)
{
    if (mask & (1u << KV_ALARM_CORRUPT)) {
        switch (ir->request_case) {
        case KVDPB__INTERNAL_REQUEST__REQUEST_PUT:
        case KVDPB__INTERNAL_REQUEST__REQUEST_DELETE_RANGE:
        case KVDPB__INTERNAL_REQUEST__REQUEST_TXN:
        case KVDPB__INTERNAL_REQUEST__REQUEST_COMPACTION:
        case KVDPB__INTERNAL_REQUEST__REQUEST_LEASE_GRANT:
        case KVDPB__INTERNAL_REQUEST__REQUEST_LEASE_REVOKE:
            kv_res_etcd_err(res, KV_ERR_CORRUPT);
            return 1;
        default:
            return 0;
        }
    }
    if (mask & (1u << KV_ALARM_NOSPACE)) {
        if (kv_alarm_is_growth(ir)) {
            kv_res_etcd_err(res, KV_ERR_NO_SPACE);
            return 1;
        }
    }
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
