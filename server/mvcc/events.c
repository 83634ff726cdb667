#include "mvcc/events.h"

#include "mvcc/store_int.h"

#include <errno.h>
#include <string.h>

int kv_store_reader_begin(kv_store *s, kv_store_reader *r)
{
    memset(r, 0, sizeof(*r));
    int rc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, &r->txn);
    if (rc) {
        r->txn = NULL;
        return kv_mdb_err(rc);
    }
    kv_meta m;
    rc = kv_meta_read(s, r->txn, &m);
    if (rc < 0) {
        mdb_txn_abort(r->txn);
        r->txn = NULL;
        return rc;
    }
    r->rev = m.rev;
    r->compact_rev = m.compact_rev;
    return 0;
}

void kv_store_reader_end(kv_store_reader *r)
{
    if (r->txn)
        mdb_txn_abort(r->txn);
    r->txn = NULL;
}

int kv_store_events(kv_store *s, const kv_store_reader *r, int64_t from, int64_t to,
                    size_t max_bytes, kv_store_event_fn fn, void *arg, int64_t *last)
{
    *last = from - 1;
    if (from < 1)
        from = 1;
    if (to < from)
        return 0;
    MDB_cursor *c;
    int rc = mdb_cursor_open(r->txn, s->rev, &c);
    if (rc)
        return kv_mdb_err(rc);
    uint8_t start[KV_REVKEY_LEN];
    kv_revkey(start, from, 0);
    MDB_val k = {KV_REVKEY_LEN, start}, v;
    size_t bytes = 0;
    int64_t cur = -1; /* main revision being yielded */
    rc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE);
    for (;;) {
        if (rc == MDB_NOTFOUND) {
            *last = to;
            rc = 0;
            break;
        }
        if (rc) {
            rc = kv_mdb_err(rc);
            break;
        }
        if (k.mv_size != KV_REVKEY_LEN) {
            rc = -EBADMSG;
            break;
        }
        const uint8_t *kp = k.mv_data;
        int64_t main = (int64_t)kv_be64(kp), sub = (int64_t)kv_be64(kp + 8);
        if (main > to) {
            *last = to;
            break;
        }
        if (main != cur) {
            if (cur >= 0) {
                *last = cur; /* cur complete */
                if (max_bytes && bytes >= max_bytes) {
                    *last = main - 1; /* revisions between had no record */
                    break;
                }
            }
            cur = main;
        }
        const uint8_t *p = v.mv_data;
        if (!kv_mdb_val_sane(r->txn, &v, KV_MDB_VAL_MAX) || !kv_rec_verify(kp, p, v.mv_size)) {
            rc = -EBADMSG;
            break;
        }
        if (main <= r->compact_rev) {
            /* Only the compaction revision itself can be asked (a watcher below it is refused
             * as compacted): yield what the finished compaction keeps, so the answer does not
             * depend on how far the physical removal got (a tombstone at compact_rev is gone). */
            rc = kv_compact_survives(s, r->txn, kp, p, v.mv_size, r->compact_rev);
            if (rc < 0)
                break;
            if (rc == 0) {
                rc = mdb_cursor_get(c, &k, &v, MDB_NEXT);
                continue;
            }
        }
        kv_store_event ev = {main, sub, (p[4] & KV_DUP_TOMBSTONE) != 0, p + 5, v.mv_size - 5};
        bytes += v.mv_size;
        rc = fn(arg, &ev);
        if (rc < 0)
            break;
        rc = mdb_cursor_get(c, &k, &v, MDB_NEXT);
    }
    mdb_cursor_close(c);
    return rc;
}

int kv_store_kv_at(kv_store *s, const kv_store_reader *r, const uint8_t *key, size_t klen,
                   int64_t rev, Mvccpb__KeyValue **out)
{
    *out = NULL;
    if (rev < 1 || rev < r->compact_rev)
        return -ENOENT;
    kv_ent e;
    int rc = kv_index_get(s, r->txn, key, klen, rev, &e);
    if (rc < 0)
        return rc;
    if (e.tomb)
        return -ENOENT;
    return kv_rec_load(s, r->txn, &e, key, klen, out);
}
