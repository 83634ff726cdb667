/*
 * snapshot_bbolt: the store as an etcd 3.4 backend file (bbolt), for Maintenance.Snapshot
 * (mvcc/snapshot.h kv_store_snapshot_bbolt; layout in docs/snapshots.md).
 *
 * One LMDB read transaction gives every bucket, so the file is one consistent state:
 *   alarm           packed etcdserverpb.AlarmMember{MemberID, Alarm} -> ""
 *   auth            "authEnabled" -> 0/1, "authRevision" -> 8 bytes BE
 *   authRoles       name -> packed authpb.Role       authUsers  name -> packed authpb.User
 *   cluster         "clusterVersion" -> "3.4.0"
 *   key             main(8 BE) '_' sub(8 BE) ['t'] -> packed mvccpb.KeyValue (a tombstone
 *                   holds its key only, as etcd's)
 *   lease           id (8 BE) -> packed leasepb.Lease{ID, TTL, RemainingTTL}
 *   members         id in hex -> JSON {"id","peerURLs","isLearner","name","clientURLs"}
 *   members_removed id in hex -> "removed"
 *   meta            "consistent_index" -> applied index (8 BE), "finishedCompactRev" and
 *                   "scheduledCompactRev" -> main(8 BE) '_' 0(8) when the store was compacted
 * Records that a pending physical compaction will remove are left out (kv_compact_survives),
 * so etcd sees the keyspace its own finished compaction would hold.
 */
#include "bbolt/bbolt.h"
#include "common/varint.h"
#include "mvcc/auth_store.h"
#include "common/crc32c.h"
#include "mvcc/members.h"
#include "pb/pb_wire.h"
#include "mvcc/snapshot.h"
#include "mvcc/store_int.h"

#include "internal.pb-c.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int put_str(kv_bb_writer *w, const char *k, const void *v, size_t vlen)
{
    return kv_bb_put(w, k, strlen(k), v, vlen);
}

static int bytes_cmp(const void *a, const void *b, size_t al, size_t bl)
{
    int c = memcmp(a, b, al < bl ? al : bl);
    return c ? c : (al < bl ? -1 : al > bl);
}

/* ---- alarm ---- */
typedef struct small_kv {
    uint8_t k[64];
    size_t klen;
    uint8_t *v; /* malloc'd or NULL */
    size_t vlen;
} small_kv;

static int small_cmp(const void *a, const void *b)
{
    const small_kv *x = a, *y = b;
    return bytes_cmp(x->k, y->k, x->klen, y->klen);
}

static int write_alarms(kv_store *s, MDB_txn *txn, kv_bb_writer *w)
{
    small_kv a[KV_MAX_ALARMS];
    size_t n = 0;
    MDB_cursor *c;
    int rc = kv_mdb_err(mdb_cursor_open(txn, s->alarm, &c));
    if (rc)
        return rc;
    MDB_val k, v;
    int g;
    for (g = mdb_cursor_get(c, &k, &v, MDB_FIRST); g == 0 && n < KV_MAX_ALARMS;
         g = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
        if (k.mv_size != 12)
            continue;
        const uint8_t *p = k.mv_data;
        uint64_t member = kv_be64(p);
        uint32_t type = kv_be32(p + 8);
        size_t l = 0;
        if (member) {
            a[n].k[l++] = 0x08;
            l += kv_varint_put(a[n].k + l, member);
        }
        if (type) {
            a[n].k[l++] = 0x10;
            l += kv_varint_put(a[n].k + l, type);
        }
        a[n].klen = l;
        if (l)
            n++;
    }
    mdb_cursor_close(c);
    if (g != 0 && g != MDB_NOTFOUND)
        return kv_mdb_err(g);
    qsort(a, n, sizeof a[0], small_cmp);
    rc = kv_bb_bucket_begin(w, "alarm", 5);
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = kv_bb_put(w, a[i].k, a[i].klen, "", 0);
    return rc ? rc : kv_bb_bucket_end(w);
}

/* ---- auth ---- */
typedef struct auth_ctx {
    kv_bb_writer *w;
} auth_ctx;

static int auth_fn(void *arg, const uint8_t *name, size_t nlen, const uint8_t *val, size_t vlen)
{
    auth_ctx *a = arg;
    int rc = kv_bb_put(a->w, name, nlen, val, vlen);
    return rc < 0 ? rc : 0;
}

static int write_auth(kv_store *s, MDB_txn *txn, kv_bb_writer *w)
{
    kv_auth_tx tx = {.s = s, .txn = txn, .read = 1};
    int enabled = 0;
    uint64_t rev = 0;
    int rc = kv_auth_get_enabled(&tx, &enabled);
    if (rc == 0)
        rc = kv_auth_get_revision(&tx, &rev);
    if (rc)
        return rc;
    uint8_t e = enabled ? 1 : 0, r[8];
    kv_put_be64(r, rev);
    if ((rc = kv_bb_bucket_begin(w, "auth", 4)) || (rc = put_str(w, "authEnabled", &e, 1)) ||
        (rc = put_str(w, "authRevision", r, 8)) || (rc = kv_bb_bucket_end(w)))
        return rc;
    auth_ctx a = {w};
    if ((rc = kv_bb_bucket_begin(w, "authRoles", 9)) ||
        (rc = kv_auth_walk(&tx, KV_AUTH_ROLE, auth_fn, &a)) || (rc = kv_bb_bucket_end(w)))
        return rc;
    if ((rc = kv_bb_bucket_begin(w, "authUsers", 9)) ||
        (rc = kv_auth_walk(&tx, KV_AUTH_USER, auth_fn, &a)) || (rc = kv_bb_bucket_end(w)))
        return rc;
    return 0;
}

/* ---- key ---- */
static int write_keys(kv_store *s, MDB_txn *txn, kv_bb_writer *w, int64_t pending)
{
    MDB_cursor *c;
    int rc = kv_mdb_err(mdb_cursor_open(txn, s->rev, &c));
    if (rc)
        return rc;
    rc = kv_bb_bucket_begin(w, "key", 3);
    uint8_t *tomb = NULL;
    size_t tomb_cap = 0;
    MDB_val k, v;
    int g;
    for (g = mdb_cursor_get(c, &k, &v, MDB_FIRST); rc == 0 && g == 0;
         g = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
        const uint8_t *key16 = k.mv_data, *val = v.mv_data;
        if (k.mv_size != KV_REVKEY_LEN || v.mv_size < 5 ||
            !kv_mdb_val_sane(txn, &v, KV_MDB_VAL_MAX) || !kv_rec_verify(key16, val, v.mv_size)) {
            rc = -EBADMSG;
            break;
        }
        if (pending > 0) {
            int sv = kv_compact_survives(s, txn, key16, val, v.mv_size, pending);
            if (sv < 0) {
                rc = sv;
                break;
            }
            if (sv == 0)
                continue;
        }
        uint8_t ek[18];
        memcpy(ek, key16, 8);
        ek[8] = '_';
        memcpy(ek + 9, key16 + 8, 8);
        int is_tomb = (val[4] & KV_DUP_TOMBSTONE) != 0;
        const uint8_t *payload = val + 5;
        size_t plen = v.mv_size - 5;
        if (is_tomb) {
            ek[17] = 't';
            /* etcd's tombstone is KeyValue{Key: key}: field 1 only */
            kv_pb_field f;
            const uint8_t *p = payload, *end = payload + plen;
            const uint8_t *key = NULL;
            size_t klen = 0;
            while (p < end) {
                size_t used = kv_pb_read_field(p, end, &f);
                if (used == 0) {
                    rc = -EBADMSG;
                    break;
                }
                if (f.tag == 1 && f.wt == KV_PB_WT_LEN) {
                    key = f.val;
                    klen = f.vlen;
                }
                p += used;
            }
            if (rc)
                break;
            size_t need = 1 + 10 + klen;
            if (need > tomb_cap) {
                uint8_t *t = realloc(tomb, need);
                if (t == NULL) {
                    rc = -ENOMEM;
                    break;
                }
                tomb = t;
                tomb_cap = need;
            }
            size_t l = 0;
            tomb[l++] = 0x0a;
            l += kv_varint_put(tomb + l, klen);
            if (klen)
                memcpy(tomb + l, key, klen);
            l += klen;
            rc = kv_bb_put(w, ek, 18, tomb, l);
        } else {
            rc = kv_bb_put(w, ek, 17, payload, plen);
        }
    }
    free(tomb);
    mdb_cursor_close(c);
    if (rc == 0 && g != MDB_NOTFOUND)
        rc = kv_mdb_err(g);
    return rc ? rc : kv_bb_bucket_end(w);
}

/* ---- lease ---- */
static int lease_fn(void *arg, const kv_lease_rec *rec)
{
    kv_bb_writer *w = arg;
    Kvdpb__LeaseRecord m = KVDPB__LEASE_RECORD__INIT; /* the wire of leasepb.Lease */
    m.id = rec->id;
    m.ttl = rec->ttl;
    m.remaining_ttl = rec->remaining_ttl;
    uint8_t k[8], v[40];
    kv_put_be64(k, (uint64_t)rec->id);
    size_t n = kvdpb__lease_record__pack(&m, v);
    return kv_bb_put(w, k, 8, v, n);
}

/* ---- members ---- */
typedef struct jbuf {
    char *b;
    size_t len, cap;
} jbuf;

static int json_raw(jbuf *j, const char *s)
{
    size_t n = strlen(s);
    if (j->len + n + 1 > j->cap) {
        size_t nc = (j->len + n + 1) * 2;
        char *p = realloc(j->b, nc);
        if (p == NULL)
            return -ENOMEM;
        j->b = p;
        j->cap = nc;
    }
    memcpy(j->b + j->len, s, n + 1);
    j->len += n;
    return 0;
}

/* A JSON string as Go's encoding/json writes it (<, >, & escaped too). */
static int json_str(jbuf *j, const char *s)
{
    int rc = json_raw(j, "\"");
    for (const unsigned char *p = (const unsigned char *)s; rc == 0 && *p; p++) {
        char e[8];
        if (*p == '"' || *p == '\\')
            snprintf(e, sizeof e, "\\%c", *p);
        else if (*p < 0x20 || *p == '<' || *p == '>' || *p == '&')
            snprintf(e, sizeof e, "\\u%04x", *p);
        else
            snprintf(e, sizeof e, "%c", *p);
        rc = json_raw(j, e);
    }
    return rc ? rc : json_raw(j, "\"");
}

static int member_json(const Kvdpb__Member *m, char **out, size_t *outlen)
{
    jbuf j = {0};
    char num[64];
    snprintf(num, sizeof num, "{\"id\":%llu,\"peerURLs\":[", (unsigned long long)m->id);
    int rc = json_raw(&j, num);
    for (size_t i = 0; rc == 0 && i < m->n_peer_urls; i++)
        if ((rc = i ? json_raw(&j, ",") : 0) == 0)
            rc = json_str(&j, m->peer_urls[i]);
    if (rc == 0)
        rc = json_raw(&j, "]");
    if (rc == 0 && m->is_learner)
        rc = json_raw(&j, ",\"isLearner\":true");
    if (rc == 0 && m->name && m->name[0] && (rc = json_raw(&j, ",\"name\":")) == 0)
        rc = json_str(&j, m->name);
    if (rc == 0 && m->n_client_urls) {
        rc = json_raw(&j, ",\"clientURLs\":[");
        for (size_t i = 0; rc == 0 && i < m->n_client_urls; i++)
            if ((rc = i ? json_raw(&j, ",") : 0) == 0)
                rc = json_str(&j, m->client_urls[i]);
        if (rc == 0)
            rc = json_raw(&j, "]");
    }
    if (rc == 0)
        rc = json_raw(&j, "}");
    if (rc) {
        free(j.b);
        return rc;
    }
    *out = j.b;
    *outlen = j.len;
    return 0;
}

/* Both membership buckets (ids in hex, sorted as strings). */
static int write_members(kv_store *s, MDB_txn *txn, kv_bb_writer *w, int removed)
{
    small_kv a[KV_MEMBERS_MAX * 4];
    size_t n = 0;
    MDB_cursor *c;
    int rc = kv_mdb_err(mdb_cursor_open(txn, removed ? s->members_removed : s->members, &c));
    if (rc)
        return rc;
    MDB_val k, v;
    int g;
    for (g = mdb_cursor_get(c, &k, &v, MDB_FIRST); rc == 0 && g == 0 && n < sizeof a / sizeof a[0];
         g = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
        if (k.mv_size != 8 || v.mv_size < 4) {
            rc = -EBADMSG;
            break;
        }
        const uint8_t *p = v.mv_data;
        uint32_t want = kv_be32(p);
        if (kv_crc32c(kv_crc32c(0, k.mv_data, 8), p + 4, v.mv_size - 4) != want) {
            rc = -EBADMSG;
            break;
        }
        uint64_t id = kv_be64(k.mv_data);
        a[n].klen = (size_t)snprintf((char *)a[n].k, sizeof a[n].k, "%llx", (unsigned long long)id);
        a[n].v = NULL;
        a[n].vlen = 0;
        if (!removed) {
            Kvdpb__Member *m = kvdpb__member__unpack(NULL, v.mv_size - 4, p + 4);
            if (m == NULL) {
                rc = -EBADMSG;
                break;
            }
            m->id = id;
            char *js = NULL;
            rc = member_json(m, &js, &a[n].vlen);
            kvdpb__member__free_unpacked(m, NULL);
            a[n].v = (uint8_t *)js;
        }
        if (rc == 0)
            n++;
    }
    mdb_cursor_close(c);
    if (rc == 0 && g != 0 && g != MDB_NOTFOUND)
        rc = kv_mdb_err(g);
    if (rc == 0) {
        qsort(a, n, sizeof a[0], small_cmp);
        const char *name = removed ? "members_removed" : "members";
        rc = kv_bb_bucket_begin(w, name, strlen(name));
        for (size_t i = 0; rc == 0 && i < n; i++)
            rc = removed ? kv_bb_put(w, a[i].k, a[i].klen, "removed", 7)
                         : kv_bb_put(w, a[i].k, a[i].klen, a[i].v, a[i].vlen);
        if (rc == 0)
            rc = kv_bb_bucket_end(w);
    }
    for (size_t i = 0; i < n; i++)
        free(a[i].v);
    return rc;
}

static void rev_bytes(uint8_t out[17], int64_t main)
{
    kv_put_be64(out, (uint64_t)main);
    out[8] = '_';
    kv_put_be64(out + 9, 0);
}

static int write_all(kv_store *s, MDB_txn *txn, kv_bb_writer *w)
{
    kv_meta m;
    int64_t pending = 0;
    int rc = kv_meta_read(s, txn, &m);
    if (rc == 0) {
        int p = kv_compact_pending(s, txn, &pending);
        if (p < 0)
            rc = p;
        else if (p == 0)
            pending = 0;
    }
    if (rc || (rc = write_alarms(s, txn, w)) || (rc = write_auth(s, txn, w)))
        return rc;
    if ((rc = kv_bb_bucket_begin(w, "cluster", 7)) ||
        (rc = put_str(w, "clusterVersion", "3.4.0", 5)) || (rc = kv_bb_bucket_end(w)))
        return rc;
    if ((rc = write_keys(s, txn, w, pending)))
        return rc;
    if ((rc = kv_bb_bucket_begin(w, "lease", 5)) ||
        (rc = kv_lease_table_each(&s->leases, txn, lease_fn, w)) || (rc = kv_bb_bucket_end(w)))
        return rc;
    if ((rc = write_members(s, txn, w, 0)) || (rc = write_members(s, txn, w, 1)))
        return rc;
    uint8_t ci[8], cr[17];
    kv_put_be64(ci, m.applied);
    if ((rc = kv_bb_bucket_begin(w, "meta", 4)) || (rc = put_str(w, "consistent_index", ci, 8)))
        return rc;
    if (m.compact_rev > 0) {
        rev_bytes(cr, m.compact_rev);
        if ((rc = put_str(w, "finishedCompactRev", cr, 17)) ||
            (rc = put_str(w, "scheduledCompactRev", cr, 17)))
            return rc;
    }
    return kv_bb_bucket_end(w);
}

int kv_store_snapshot_bbolt(kv_store *s, int fd, int64_t *size)
{
    kv_bb_writer *w = NULL;
    int rc = kv_bb_writer_new(&w, fd);
    if (rc)
        return rc;
    MDB_txn *txn = NULL;
    pthread_rwlock_rdlock(&s->swap);
    rc = kv_mdb_err(mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn));
    if (rc == 0)
        rc = write_all(s, txn, w);
    if (txn)
        mdb_txn_abort(txn);
    pthread_rwlock_unlock(&s->swap);
    if (rc == 0)
        rc = kv_bb_writer_finish(w, size);
    kv_bb_writer_free(w);
    return rc;
}
