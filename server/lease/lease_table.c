/*
 * lease_table.c: LMDB persistence of lease records and their attached keys.
 *
 * On-disk value of a "lease" record (format version 1):
 *   [1 byte version = 1][packed kvdpb.LeaseRecord][4 bytes CRC-32C, little-endian]
 * The CRC covers the version byte and the packed record. A record whose CRC, version or
 * embedded id does not match is reported (one log line on stderr) and read as -EIO; it is
 * never loaded.
 */
#include "base/lmdb_err.h"
#include "common/crc32c.h"
#include "lease/lease_table.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "internal.pb-c.h"
#include "base/lmdb_valcheck.h"

#define REC_VERSION 1
/* A LeaseRecord is at most 3 tagged varints: 3 * (1 + 10) bytes. */
#define REC_PB_MAX 33
#define REC_MAX (1 + REC_PB_MAX + 4)

/* ---- helpers ---- */

static void id_key(int64_t id, uint8_t out[8])
{
    uint64_t u = (uint64_t)id;
    for (int i = 7; i >= 0; i--) {
        out[i] = (uint8_t)(u & 0xff);
        u >>= 8;
    }
}

/* Bump allocator over a caller-provided arena so unpacking allocates nothing. */
typedef struct arena {
    uint8_t buf[256];
    size_t used;
} arena;

static void *arena_alloc(void *data, size_t size)
{
    arena *a = data;
    size_t off = (a->used + 15) & ~(size_t)15;
    if (off + size > sizeof(a->buf))
        return NULL;
    a->used = off + size;
    return a->buf + off;
}

static void arena_free(void *data, void *ptr)
{
    (void)data;
    (void)ptr;
}

static size_t encode_rec(const kv_lease_rec *rec, uint8_t out[REC_MAX])
{
    Kvdpb__LeaseRecord m = KVDPB__LEASE_RECORD__INIT;
    m.id = rec->id;
    m.ttl = rec->ttl;
    m.remaining_ttl = rec->remaining_ttl;
    out[0] = REC_VERSION;
    size_t n = 1 + kvdpb__lease_record__pack(&m, out + 1);
    uint32_t c = kv_crc32c(0, out, n);
    out[n] = (uint8_t)c;
    out[n + 1] = (uint8_t)(c >> 8);
    out[n + 2] = (uint8_t)(c >> 16);
    out[n + 3] = (uint8_t)(c >> 24);
    return n + 4;
}

static int decode_rec(MDB_txn *txn, int64_t key_id, const MDB_val *v, kv_lease_rec *out)
{
    const uint8_t *p = v->mv_data;
    size_t n = v->mv_size;
    /* The size is checked before a byte is read: it may be corrupt. */
    if (n < 5 || n > REC_MAX || !kv_mdb_val_sane(txn, v, REC_MAX)) {
        fprintf(stderr, "kvd: error: lease_table: lease %lld: record has bad size %zu (corrupt)\n",
                (long long)key_id, n);
        return -EIO;
    }
    uint32_t stored = (uint32_t)p[n - 4] | (uint32_t)p[n - 3] << 8 | (uint32_t)p[n - 2] << 16 |
                      (uint32_t)p[n - 1] << 24;
    uint32_t calc = kv_crc32c(0, p, n - 4);
    if (stored != calc) {
        fprintf(
            stderr,
            "kvd: error: lease_table: lease %lld: checksum mismatch (stored %08x, computed %08x); "
            "record not loaded\n",
            (long long)key_id, stored, calc);
        return -EIO;
    }
    if (p[0] != REC_VERSION) {
        fprintf(stderr, "kvd: error: lease_table: lease %lld: unknown record version %u\n",
                (long long)key_id, p[0]);
        return -EIO;
    }
    arena a = {.used = 0};
    ProtobufCAllocator alloc = {.alloc = arena_alloc, .free = arena_free, .allocator_data = &a};
    Kvdpb__LeaseRecord *m = kvdpb__lease_record__unpack(&alloc, n - 5, p + 1);
    if (!m) {
        fprintf(stderr, "kvd: error: lease_table: lease %lld: record does not decode\n",
                (long long)key_id);
        return -EIO;
    }
    if (m->id != key_id) {
        fprintf(stderr, "kvd: error: lease_table: lease %lld: record holds id %lld (corrupt)\n",
                (long long)key_id, (long long)m->id);
        return -EIO;
    }
    out->id = m->id;
    out->ttl = m->ttl;
    out->remaining_ttl = m->remaining_ttl;
    return 0;
}

static int64_t key_to_id(const MDB_val *k)
{
    if (k->mv_size != 8)
        return 0;
    const uint8_t *p = k->mv_data;
    uint64_t u = 0;
    for (int i = 0; i < 8; i++)
        u = (u << 8) | p[i];
    return (int64_t)u;
}

/* ---- API ---- */

int kv_lease_table_open(kv_lease_table *t, MDB_txn *txn)
{
    int rc = mdb_dbi_open(txn, "lease", MDB_CREATE, &t->leases);
    if (rc)
        return kv_lmdb_err(rc);
    rc = mdb_dbi_open(txn, "lease_keys", MDB_CREATE | MDB_DUPSORT, &t->keys);
    return kv_lmdb_err(rc);
}

int kv_lease_table_get(const kv_lease_table *t, MDB_txn *txn, int64_t id, kv_lease_rec *out)
{
    uint8_t kb[8];
    id_key(id, kb);
    MDB_val k = {.mv_size = 8, .mv_data = kb}, v;
    int rc = mdb_get(txn, t->leases, &k, &v);
    if (rc)
        return kv_lmdb_err(rc);
    return decode_rec(txn, id, &v, out);
}

int kv_lease_table_put(const kv_lease_table *t, MDB_txn *txn, const kv_lease_rec *rec)
{
    if (!rec)
        return -EINVAL;
    uint8_t kb[8], vb[REC_MAX];
    id_key(rec->id, kb);
    MDB_val k = {.mv_size = 8, .mv_data = kb};
    MDB_val v = {.mv_size = encode_rec(rec, vb), .mv_data = vb};
    return kv_lmdb_err(mdb_put(txn, t->leases, &k, &v, 0));
}

int kv_lease_table_del(const kv_lease_table *t, MDB_txn *txn, int64_t id)
{
    uint8_t kb[8];
    id_key(id, kb);
    MDB_val k = {.mv_size = 8, .mv_data = kb};
    int rc = mdb_del(txn, t->leases, &k, NULL);
    if (rc)
        return kv_lmdb_err(rc);
    rc = mdb_del(txn, t->keys, &k, NULL);
    if (rc == MDB_NOTFOUND)
        rc = 0;
    return kv_lmdb_err(rc);
}

static int check_key(MDB_txn *txn, const uint8_t *key, size_t klen)
{
    if (!key || klen == 0)
        return -EINVAL;
    if (klen > (size_t)mdb_env_get_maxkeysize(mdb_txn_env(txn)))
        return -ENAMETOOLONG;
    return 0;
}

int kv_lease_table_attach(const kv_lease_table *t, MDB_txn *txn, int64_t id, const uint8_t *key,
                          size_t klen)
{
    int rc = check_key(txn, key, klen);
    if (rc)
        return rc;
    uint8_t kb[8];
    id_key(id, kb);
    MDB_val k = {.mv_size = 8, .mv_data = kb};
    MDB_val v = {.mv_size = klen, .mv_data = (void *)key};
    rc = mdb_put(txn, t->keys, &k, &v, MDB_NODUPDATA);
    if (rc == MDB_KEYEXIST)
        rc = 0;
    return kv_lmdb_err(rc);
}

int kv_lease_table_detach(const kv_lease_table *t, MDB_txn *txn, int64_t id, const uint8_t *key,
                          size_t klen)
{
    int rc = check_key(txn, key, klen);
    if (rc)
        return rc;
    uint8_t kb[8];
    id_key(id, kb);
    MDB_val k = {.mv_size = 8, .mv_data = kb};
    MDB_val v = {.mv_size = klen, .mv_data = (void *)key};
    rc = mdb_del(txn, t->keys, &k, &v);
    if (rc == MDB_NOTFOUND)
        rc = 0;
    return kv_lmdb_err(rc);
}

int kv_lease_table_key_count(const kv_lease_table *t, MDB_txn *txn, int64_t id, size_t *out)
{
    uint8_t kb[8];
    id_key(id, kb);
    MDB_val k = {.mv_size = 8, .mv_data = kb}, v;
    MDB_cursor *c;
    *out = 0;
    int rc = mdb_cursor_open(txn, t->keys, &c);
    if (rc)
        return kv_lmdb_err(rc);
    rc = mdb_cursor_get(c, &k, &v, MDB_SET);
    if (rc == 0) {
        size_t cnt = 0;
        rc = mdb_cursor_count(c, &cnt);
        if (rc == 0)
            *out = (size_t)cnt;
    } else if (rc == MDB_NOTFOUND) {
        rc = 0;
    }
    mdb_cursor_close(c);
    return kv_lmdb_err(rc);
}

int kv_lease_table_keys(const kv_lease_table *t, MDB_txn *txn, int64_t id,
                        int (*fn)(void *arg, const uint8_t *key, size_t klen), void *arg)
{
    uint8_t kb[8];
    id_key(id, kb);
    MDB_val k = {.mv_size = 8, .mv_data = kb}, v;
    MDB_cursor *c;
    int rc = mdb_cursor_open(txn, t->keys, &c);
    if (rc)
        return kv_lmdb_err(rc);
    rc = mdb_cursor_get(c, &k, &v, MDB_SET_KEY);
    while (rc == 0) {
        if (v.mv_size == 0 || v.mv_size > 511 || !kv_mdb_val_sane(txn, &v, 511)) {
            fprintf(stderr,
                    "kvd: error: lease_table: lease %lld: attached key has bad size %zu "
                    "(corrupt)\n",
                    (long long)id, v.mv_size);
            mdb_cursor_close(c);
            return -EIO;
        }
        int r = fn(arg, v.mv_data, v.mv_size);
        if (r) {
            mdb_cursor_close(c);
            return r;
        }
        rc = mdb_cursor_get(c, &k, &v, MDB_NEXT_DUP);
    }
    mdb_cursor_close(c);
    return rc == MDB_NOTFOUND ? 0 : kv_lmdb_err(rc);
}

int kv_lease_table_each(const kv_lease_table *t, MDB_txn *txn,
                        int (*fn)(void *arg, const kv_lease_rec *rec), void *arg)
{
    MDB_val k, v;
    MDB_cursor *c;
    int rc = mdb_cursor_open(txn, t->leases, &c);
    if (rc)
        return kv_lmdb_err(rc);
    rc = mdb_cursor_get(c, &k, &v, MDB_FIRST);
    while (rc == 0) {
        kv_lease_rec rec;
        int r = k.mv_size == 8 ? decode_rec(txn, key_to_id(&k), &v, &rec) : -EIO;
        if (r == 0)
            r = fn(arg, &rec);
        if (r) {
            mdb_cursor_close(c);
            return r;
        }
        rc = mdb_cursor_get(c, &k, &v, MDB_NEXT);
    }
    mdb_cursor_close(c);
    return rc == MDB_NOTFOUND ? 0 : kv_lmdb_err(rc);
}
