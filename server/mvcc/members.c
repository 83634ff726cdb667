/* members: the membership table (see members.h). kvdpb.Member has the field numbers and
 * types of etcdserverpb.Member, so a stored payload unpacks as either. */
#include <errno.h>
#include <openssl/sha.h>
#include <stdlib.h>
#include <string.h>

#include "common/byteorder.h"
#include "common/crc32c.h"
#include "mvcc/members.h"
#include "mvcc/store_int.h"

/* The largest member record a member writes: a name and 2 x KV_MEMBER_MAX_URLS URLs of
 * KV_MEMBER_MAX_STR bytes with their tags, and the CRC; anything larger is not ours. */
#define MEMBER_REC_MAX (4 + (1 + 2 * KV_MEMBER_MAX_URLS) * (KV_MEMBER_MAX_STR + 8) + 64)

static uint32_t rec_crc(const uint8_t key[8], const uint8_t *payload, size_t len)
{
    return kv_crc32c(kv_crc32c(0, key, 8), payload, len);
}

/* Checks a stored record; on success payload and plen point at the packed Member. */
static int rec_check(MDB_txn *txn, const MDB_val *k, const MDB_val *v, const uint8_t **payload,
                     size_t *plen)
{
    if (k->mv_size != 8 || v->mv_size < 4 || !kv_mdb_val_sane(txn, v, MEMBER_REC_MAX))
        return -EBADMSG;
    const uint8_t *p = v->mv_data;
    if (kv_be32(p) != rec_crc(k->mv_data, p + 4, v->mv_size - 4))
        return -EBADMSG;
    if (payload) {
        *payload = p + 4;
        *plen = v->mv_size - 4;
    }
    return 0;
}

static int strs_ok(char **v, size_t n)
{
    if (n > KV_MEMBER_MAX_URLS)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!v[i] || strlen(v[i]) > KV_MEMBER_MAX_STR)
            return 0;
    return 1;
}

static int member_ok(const Kvdpb__Member *m)
{
    return (!m->name || strlen(m->name) <= KV_MEMBER_MAX_STR) &&
           strs_ok(m->peer_urls, m->n_peer_urls) && strs_ok(m->client_urls, m->n_client_urls);
}

/* Writes m under id (m->id is overridden in the stored bytes). */
static int rec_put(kv_store *s, MDB_txn *txn, uint64_t id, const Kvdpb__Member *m)
{
    Kvdpb__Member c = *m;
    c.id = id;
    size_t n = kvdpb__member__get_packed_size(&c);
    uint8_t *buf = malloc(4 + n);
    if (!buf)
        return -ENOMEM;
    kvdpb__member__pack(&c, buf + 4);
    uint8_t key[8];
    kv_put_be64(key, id);
    kv_put_be32(buf, rec_crc(key, buf + 4, n));
    MDB_val k = {8, key}, v = {4 + n, buf};
    int rc = kv_mdb_err(mdb_put(txn, s->members, &k, &v, 0));
    free(buf);
    return rc;
}

/* Finds id's record in dbi and checks it: 0 (payload in *p, *n; may be NULL), -ENOENT,
 * -EBADMSG, < 0. */
static int rec_find(MDB_txn *txn, MDB_dbi dbi, uint64_t id, const uint8_t **p, size_t *n)
{
    uint8_t key[8];
    kv_put_be64(key, id);
    MDB_val k = {8, key}, v;
    int g = mdb_get(txn, dbi, &k, &v);
    if (g == MDB_NOTFOUND)
        return -ENOENT;
    if (g)
        return kv_mdb_err(g);
    return rec_check(txn, &k, &v, p, n);
}

/* Loads member id from txn: 0 (*out malloc'd), -ENOENT, -EBADMSG, < 0. */
static int rec_get(kv_store *s, MDB_txn *txn, uint64_t id, Kvdpb__Member **out)
{
    const uint8_t *p;
    size_t n;
    int rc = rec_find(txn, s->members, id, &p, &n);
    if (rc)
        return rc;
    Kvdpb__Member *m = kvdpb__member__unpack(NULL, n, p);
    if (!m)
        return -EBADMSG;
    m->id = id;
    *out = m;
    return 0;
}

static int removed_get(kv_store *s, MDB_txn *txn, uint64_t id)
{
    int rc = rec_find(txn, s->members_removed, id, NULL, NULL);
    return rc == -ENOENT ? 0 : rc ? rc : 1;
}

static int count(MDB_txn *txn, MDB_dbi dbi, size_t *n)
{
    MDB_stat st;
    int rc = kv_mdb_err(mdb_stat(txn, dbi, &st));
    if (rc == 0)
        *n = st.ms_entries;
    return rc;
}

static int list_txn(kv_store *s, MDB_txn *txn, Kvdpb__Member ***out, size_t *n);

static MDB_txn *batch_txn(kv_store *s, kv_store_batch *b)
{
    return s && b && b->open && b == &s->batch ? b->txn : NULL;
}

int kv_store_members_bootstrap(kv_store *s, kv_store_batch *b, const Kvdpb__Member *const *m,
                               size_t n)
{
    MDB_txn *txn = batch_txn(s, b);
    if (!txn || (n && !m) || n > KV_MEMBERS_MAX)
        return -EINVAL;
    for (size_t i = 0; i < n; i++) {
        if (!m[i] || m[i]->id == 0 || !member_ok(m[i]))
            return -EINVAL;
        for (size_t j = 0; j < i; j++)
            if (m[j]->id == m[i]->id)
                return -EINVAL;
    }
    size_t have = 0, gone = 0;
    int rc;
    if ((rc = count(txn, s->members, &have)) || (rc = count(txn, s->members_removed, &gone)))
        return rc;
    if (have || gone)
        return 0;
    for (size_t i = 0; i < n; i++)
        if ((rc = rec_put(s, txn, m[i]->id, m[i])))
            return rc;
    return n ? 1 : 0;
}

int kv_store_member_put(kv_store *s, kv_store_batch *b, uint64_t id, const uint8_t *record,
                        size_t len)
{
    MDB_txn *txn = batch_txn(s, b);
    if (!txn || id == 0 || (len && !record))
        return -EINVAL;
    int rc = removed_get(s, txn, id);
    if (rc)
        return rc < 0 ? rc : -EPERM;
    Kvdpb__Member *m = kvdpb__member__unpack(NULL, len, record);
    if (!m)
        return -EINVAL;
    if (!member_ok(m)) {
        rc = -EINVAL;
        goto out;
    }
    Kvdpb__Member *old = NULL;
    rc = rec_get(s, txn, id, &old);
    if (rc == -ENOENT) {
        size_t have = 0;
        if ((rc = count(txn, s->members, &have)))
            goto out;
        if (have >= KV_MEMBERS_MAX) {
            rc = -ENOSPC;
            goto out;
        }
    } else if (rc) {
        goto out;
    } else {
        kvdpb__member__free_unpacked(old, NULL);
    }
    rc = rec_put(s, txn, id, m);
out:
    kvdpb__member__free_unpacked(m, NULL);
    return rc;
}

int kv_store_member_remove(kv_store *s, kv_store_batch *b, uint64_t id)
{
    MDB_txn *txn = batch_txn(s, b);
    if (!txn)
        return -EINVAL;
    uint8_t key[8];
    kv_put_be64(key, id);
    MDB_val k = {8, key};
    int d = mdb_del(txn, s->members, &k, NULL);
    if (d == MDB_NOTFOUND)
        return -ENOENT;
    if (d)
        return kv_mdb_err(d);
    uint8_t crc[4];
    kv_put_be32(crc, rec_crc(key, NULL, 0));
    MDB_val v = {4, crc};
    return kv_mdb_err(mdb_put(txn, s->members_removed, &k, &v, 0));
}

int kv_store_member_set_learner(kv_store *s, kv_store_batch *b, uint64_t id, int learner)
{
    MDB_txn *txn = batch_txn(s, b);
    if (!txn)
        return -EINVAL;
    Kvdpb__Member *m = NULL;
    int rc = rec_get(s, txn, id, &m);
    if (rc)
        return rc;
    m->is_learner = learner != 0;
    rc = rec_put(s, txn, id, m);
    kvdpb__member__free_unpacked(m, NULL);
    return rc;
}

/* Deletes the staged record of the oldest entry (lowest index), the same on every member. */
static int staged_evict(kv_store *s, MDB_txn *txn)
{
    MDB_cursor *c;
    MDB_val k, v;
    uint8_t oldest[8];
    uint64_t min = UINT64_MAX;
    int g = mdb_cursor_open(txn, s->members_staged, &c);
    if (g)
        return kv_mdb_err(g);
    int rc = 0;
    for (g = mdb_cursor_get(c, &k, &v, MDB_FIRST); g == 0;
         g = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
        if (k.mv_size != 8 || v.mv_size < 12 || !kv_mdb_val_sane(txn, &v, MEMBER_REC_MAX)) {
            rc = -EBADMSG;
            break;
        }
        uint64_t idx = kv_be64((const uint8_t *)v.mv_data + 4);
        if (idx < min) {
            min = idx;
            memcpy(oldest, k.mv_data, 8);
        }
    }
    mdb_cursor_close(c);
    if (rc == 0 && g != MDB_NOTFOUND)
        rc = kv_mdb_err(g);
    if (rc == 0 && min != UINT64_MAX) {
        k = (MDB_val){8, oldest};
        rc = kv_mdb_err(mdb_del(txn, s->members_staged, &k, NULL));
    }
    return rc;
}

int kv_store_member_stage(kv_store *s, kv_store_batch *b, uint64_t id, uint64_t index,
                          const uint8_t *record, size_t len)
{
    MDB_txn *txn = batch_txn(s, b);
    if (!txn || id == 0 || (len && !record) || 4 + 8 + len > MEMBER_REC_MAX)
        return -EINVAL;
    uint8_t key[8];
    kv_put_be64(key, id);
    MDB_val k = {8, key}, v;
    size_t have = 0;
    int rc = count(txn, s->members_staged, &have);
    if (rc)
        return rc;
    int g = mdb_get(txn, s->members_staged, &k, &v);
    if (g && g != MDB_NOTFOUND)
        return kv_mdb_err(g);
    if (g == MDB_NOTFOUND && have >= KV_MEMBERS_MAX_STAGED && (rc = staged_evict(s, txn)))
        return rc;
    uint8_t *buf = malloc(4 + 8 + len);
    if (!buf)
        return -ENOMEM;
    kv_put_be64(buf + 4, index);
    if (len)
        memcpy(buf + 12, record, len);
    kv_put_be32(buf, rec_crc(key, buf + 4, 8 + len));
    v = (MDB_val){4 + 8 + len, buf};
    rc = kv_mdb_err(mdb_put(txn, s->members_staged, &k, &v, 0));
    free(buf);
    return rc;
}

int kv_store_member_take_staged(kv_store *s, kv_store_batch *b, uint64_t id, uint8_t **record,
                                size_t *len)
{
    MDB_txn *txn = batch_txn(s, b);
    *record = NULL;
    *len = 0;
    if (!txn)
        return -EINVAL;
    const uint8_t *p;
    size_t n;
    int rc = rec_find(txn, s->members_staged, id, &p, &n);
    if (rc)
        return rc;
    if (n < 8)
        return -EBADMSG;
    p += 8; /* the index of the entry that staged it */
    n -= 8;
    uint8_t *copy = malloc(n ? n : 1);
    if (!copy)
        return -ENOMEM;
    memcpy(copy, p, n);
    uint8_t key[8];
    kv_put_be64(key, id);
    MDB_val k = {8, key};
    if ((rc = kv_mdb_err(mdb_del(txn, s->members_staged, &k, NULL)))) {
        free(copy);
        return rc;
    }
    *record = copy;
    *len = n;
    return 0;
}

int kv_store_member_conf_change(kv_store *s, kv_store_batch *b, int op, uint64_t id,
                                const uint8_t *record, size_t len, int *refused)
{
    *refused = 0;
    MDB_txn *txn = batch_txn(s, b);
    if (!txn || op < KV_MEMBER_OP_ADD || op > KV_MEMBER_OP_PROMOTE)
        return -EINVAL;
    int rc = removed_get(s, txn, id);
    if (rc < 0)
        return rc;
    if (rc == 1) {
        *refused = -ENOENT; /* etcd ErrIDRemoved */
        return 0;
    }
    Kvdpb__Member **v = NULL, *m = NULL;
    size_t n = 0;
    if ((rc = list_txn(s, txn, &v, &n)))
        return rc;
    const Kvdpb__Member *cur = NULL;
    size_t learners = 0;
    for (size_t i = 0; i < n; i++) {
        learners += v[i]->is_learner;
        if (v[i]->id == id)
            cur = v[i];
    }
    if (op == KV_MEMBER_OP_REMOVE || op == KV_MEMBER_OP_PROMOTE) {
        if (!cur)
            *refused = -ENOENT;
        else if (op == KV_MEMBER_OP_PROMOTE && !cur->is_learner)
            *refused = -EALREADY;
        else if (op == KV_MEMBER_OP_REMOVE)
            rc = kv_store_member_remove(s, b, id);
        else
            rc = kv_store_member_set_learner(s, b, id, 0);
        goto out;
    }
    if (cur) {
        *refused = -EEXIST;
        goto out;
    }
    if (!(m = kvdpb__member__unpack(NULL, len, record)) || !member_ok(m)) {
        *refused = -EINVAL;
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < v[i]->n_peer_urls; j++)
            for (size_t k = 0; k < m->n_peer_urls; k++)
                if (strcmp(v[i]->peer_urls[j], m->peer_urls[k]) == 0) {
                    *refused = -EADDRINUSE;
                    goto out;
                }
    if (op == KV_MEMBER_OP_ADD_LEARNER && learners + 1 > KV_MEMBERS_MAX_LEARNERS) {
        *refused = -EMLINK;
        goto out;
    }
    if (n >= KV_MEMBERS_MAX) {
        *refused = -EDQUOT;
        goto out;
    }
    m->is_learner = op == KV_MEMBER_OP_ADD_LEARNER;
    rc = rec_put(s, txn, id, m);
out:
    if (m)
        kvdpb__member__free_unpacked(m, NULL);
    kv_store_members_free(v, n);
    return rc;
}

/* ---- reads ---- */

void kv_store_members_free(Kvdpb__Member **m, size_t n)
{
    for (size_t i = 0; m && i < n; i++)
        kvdpb__member__free_unpacked(m[i], NULL);
    free(m);
}

/* Every member in txn, id order. */
static int list_txn(kv_store *s, MDB_txn *txn, Kvdpb__Member ***out, size_t *n)
{
    *out = NULL;
    *n = 0;
    MDB_cursor *c;
    int rc = kv_mdb_err(mdb_cursor_open(txn, s->members, &c));
    if (rc)
        return rc;
    Kvdpb__Member **v = NULL;
    size_t cnt = 0;
    MDB_val k, val;
    int g;
    for (g = mdb_cursor_get(c, &k, &val, MDB_FIRST); g == 0 && rc == 0;
         g = mdb_cursor_get(c, &k, &val, MDB_NEXT)) {
        const uint8_t *p;
        size_t plen;
        if ((rc = rec_check(txn, &k, &val, &p, &plen)))
            break;
        if (cnt == KV_MEMBERS_MAX) { /* put refuses more: the table is not ours */
            rc = -EBADMSG;
            break;
        }
        Kvdpb__Member **nv = realloc(v, (cnt + 1) * sizeof(*nv));
        if (!nv) {
            rc = -ENOMEM;
            break;
        }
        v = nv;
        if (!(v[cnt] = kvdpb__member__unpack(NULL, plen, p))) {
            rc = -EBADMSG;
            break;
        }
        v[cnt]->id = kv_be64(k.mv_data);
        cnt++;
    }
    mdb_cursor_close(c);
    if (rc == 0 && g != 0 && g != MDB_NOTFOUND)
        rc = kv_mdb_err(g);
    if (rc) {
        kv_store_members_free(v, cnt);
        return rc;
    }
    *out = v;
    *n = cnt;
    return 0;
}

/* Runs fn in a read transaction of the committed state. */
static int with_read_txn(kv_store *s, int (*fn)(kv_store *s, MDB_txn *txn, void *arg), void *arg)
{
    if (!s)
        return -EINVAL;
    MDB_txn *txn = NULL;
    pthread_rwlock_rdlock(&s->swap);
    int rc = kv_mdb_err(mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn));
    if (rc == 0) {
        rc = fn(s, txn, arg);
        mdb_txn_abort(txn);
    }
    pthread_rwlock_unlock(&s->swap);
    if (rc == -EBADMSG)
        kv_store_note_corrupt(s, "reading the members table");
    return rc;
}

typedef struct list_args {
    Kvdpb__Member ***out;
    size_t *n;
} list_args;

static int list_fn(kv_store *s, MDB_txn *txn, void *arg)
{
    list_args *a = arg;
    return list_txn(s, txn, a->out, a->n);
}

int kv_store_members_list(kv_store *s, Kvdpb__Member ***out, size_t *n)
{
    list_args a = {out, n};
    return with_read_txn(s, list_fn, &a);
}

typedef struct get_args {
    uint64_t id;
    Kvdpb__Member **out;
} get_args;

static int get_fn(kv_store *s, MDB_txn *txn, void *arg)
{
    get_args *a = arg;
    return rec_get(s, txn, a->id, a->out);
}

int kv_store_member_get(kv_store *s, uint64_t id, Kvdpb__Member **out)
{
    get_args a = {id, out};
    return with_read_txn(s, get_fn, &a);
}

static int removed_fn(kv_store *s, MDB_txn *txn, void *arg)
{
    return removed_get(s, txn, *(uint64_t *)arg);
}

int kv_store_member_is_removed(kv_store *s, uint64_t id)
{
    return with_read_txn(s, removed_fn, &id);
}

/* ---- apply of member_publish / member_update (store_int.h) ---- */

static char **dup_strs(char **v, size_t n)
{
    char **o = calloc(n ? n : 1, sizeof(*o));
    for (size_t i = 0; o && i < n; i++) {
        if (!(o[i] = strdup(v[i]))) {
            while (i--)
                free(o[i]);
            free(o);
            return NULL;
        }
    }
    return o;
}

static void free_strs(char **v, size_t n)
{
    for (size_t i = 0; v && i < n; i++)
        free(v[i]);
    free(v);
}

int kv_ks_member_walk(kv_ks *ks, int (*fn)(void *arg, const uint8_t *rec, size_t len), void *arg)
{
    Kvdpb__Member **v;
    size_t n;
    int rc = list_txn(ks->s, ks->w.txn, &v, &n);
    if (rc)
        return rc;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        uint8_t *buf = malloc(kvdpb__member__get_packed_size(v[i]) + 1);
        if (!buf) {
            rc = -ENOMEM;
            break;
        }
        size_t len = kvdpb__member__pack(v[i], buf);
        rc = fn(arg, buf, len);
        free(buf);
    }
    kv_store_members_free(v, n);
    return rc;
}

/* 1 if a member other than id has one of urls as a peer URL, 0 if not, < 0 on error. */
static int url_in_use(kv_store *s, MDB_txn *txn, uint64_t id, char **urls, size_t n)
{
    Kvdpb__Member **v;
    size_t cnt;
    int rc = list_txn(s, txn, &v, &cnt);
    if (rc)
        return rc;
    int used = 0;
    for (size_t i = 0; i < cnt && !used; i++) {
        if (v[i]->id == id)
            continue;
        for (size_t j = 0; j < v[i]->n_peer_urls && !used; j++)
            for (size_t k = 0; k < n && !used; k++)
                used = strcmp(v[i]->peer_urls[j], urls[k]) == 0;
    }
    kv_store_members_free(v, cnt);
    return used;
}

/* Sets the name and client URLs (publish) or the peer URLs (update) of member id. */
static int member_set(kv_ks *ks, uint64_t id, int publish, const char *name, char *const *urls,
                      size_t n_urls)
{
    kv_store *s = ks->s;
    MDB_txn *txn = ks->w.txn;
    Kvdpb__Member *m = NULL;
    int rc = rec_get(s, txn, id, &m);
    if (rc == -ENOENT) {
        int r = removed_get(s, txn, id);
        if (r < 0)
            return r;
        if (r == 1 && publish) /* etcd: "skipped updating attributes of removed member" */
            return 0;
        return -ENOENT;
    }
    if (rc)
        return rc;
    if (!publish) { /* etcd ValidateConfigurationChange (update): URLs of another member */
        int used = url_in_use(s, txn, id, (char **)urls, n_urls);
        if (used) {
            kvdpb__member__free_unpacked(m, NULL);
            return used < 0 ? used : -EADDRINUSE;
        }
    }
    char **nv = dup_strs((char **)urls, n_urls);
    char *nm = publish ? strdup(name ? name : "") : NULL;
    if (!nv || (publish && !nm)) {
        free_strs(nv, n_urls);
        free(nm);
        kvdpb__member__free_unpacked(m, NULL);
        return -ENOMEM;
    }
    if (publish) {
        if (m->name != protobuf_c_empty_string) /* unpack leaves "" as the shared default */
            free(m->name);
        m->name = nm;
        free_strs(m->client_urls, m->n_client_urls);
        m->client_urls = nv;
        m->n_client_urls = n_urls;
    } else {
        free_strs(m->peer_urls, m->n_peer_urls);
        m->peer_urls = nv;
        m->n_peer_urls = n_urls;
    }
    rc = rec_put(s, txn, id, m);
    kvdpb__member__free_unpacked(m, NULL);
    return rc;
}

int kv_ks_member_publish(kv_ks *ks, uint64_t id, const char *name, char *const *client_urls,
                         size_t n_client_urls, char *const *peer_urls, size_t n_peer_urls)
{
    if ((name && strlen(name) > KV_MEMBER_MAX_STR) || !strs_ok((char **)peer_urls, n_peer_urls) ||
        !strs_ok((char **)client_urls, n_client_urls))
        return -EINVAL;
    return member_set(ks, id, 1, name, client_urls, n_client_urls);
}

int kv_ks_member_update(kv_ks *ks, uint64_t id, char *const *peer_urls, size_t n_peer_urls)
{
    if (!strs_ok((char **)peer_urls, n_peer_urls))
        return -EINVAL;
    return member_set(ks, id, 0, NULL, peer_urls, n_peer_urls);
}

static int cmp_url(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

uint64_t kv_members_compute_id(const char *const *peer_urls, size_t n, const char *token)
{
    const char *sorted[KV_MEMBERS_MAX_URLS];
    if (n > KV_MEMBERS_MAX_URLS)
        n = KV_MEMBERS_MAX_URLS;
    memcpy(sorted, peer_urls, n * sizeof(*sorted));
    qsort(sorted, n, sizeof(*sorted), cmp_url);
    /* SHA1_Init & co. are deprecated in OpenSSL 3; hash one joined buffer instead. */
    char buf[KV_MEMBERS_MAX_URLS * 300 + 256];
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        size_t l = strlen(sorted[i]);
        if (len + l > sizeof(buf) - 256)
            break;
        memcpy(buf + len, sorted[i], l);
        len += l;
    }
    size_t tl = strnlen(token, 255);
    memcpy(buf + len, token, tl);
    len += tl;
    unsigned char md[SHA_DIGEST_LENGTH];
    SHA1((const unsigned char *)buf, len, md);
    return kv_be64(md);
}
