/* compact: etcd 3.4 compaction over the kidx/rev databases, in bounded batches.
 *
 * A Compact request only records the compaction point (meta "state" compacted revision) and
 * a progress record (meta "cmpct"); both are O(1) and atomic with the request. The records
 * themselves are removed by kv_store_compact_step(), which the node runs inside its write
 * batches, at most `max_keys` keys visited, `max_revs` records removed and about `max_us`
 * microseconds of work per batch (etcd's
 * scheduleCompaction does the same with batches of 1,000 revision keys), so writes interleave
 * with a long compaction and a restart resumes from the persisted cursor. The record bound is
 * what keeps a step short: a key with 100,000 superseded revisions is compacted over 100
 * steps, the cursor then stays on that key (flag CUR_PARTIAL) until its last record went.
 * Compacting a key is idempotent (the record kept is the latest <= rev, whatever is already
 * gone), so the end state does not depend on how the work was split.
 *
 * For each key, every revision <= rev is removed except the latest one when it is a live value
 * (a tombstone <= rev is removed with everything before it, as etcd's keyIndex.compact +
 * scheduleCompaction). kv_compact_survives() tells, for any record, whether the finished
 * compaction keeps it, so HashKV gives the same hash whatever the physical progress.
 *
 * "cmpct" value: crc32c(4, BE, over the rest) | target revision (8, BE) | has cursor (1) |
 * cursor key (the last key done). Absent = no physical compaction pending. has cursor: 0 none
 * (start at the first "kidx" key), 1 the cursor is a "kidx" key, 2 (format 2 only) the
 * cursor is an "lkidx" handle: the walk does every short key, then every long key; with bit
 * 0x80 (CUR_PARTIAL) the cursor key is not done yet (a step ran out of its record budget in
 * it) and the walk resumes at it instead of after it. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/crc32c.h"
#include "common/clock.h"
#include "mvcc/store_int.h"

#define CMPCT_KEY "cmpct"
#define CMPCT_HDR 13 /* rev(8) + has cursor(1) + crc(4) */

enum { CUR_NONE = 0, CUR_SHORT = 1, CUR_LONG = 2, CUR_PARTIAL = 0x80 };

typedef struct cmpct {
    int64_t rev;
    uint8_t has_cursor; /* CUR_* */
    bool partial;       /* the cursor key is not finished: resume at it */
    uint8_t cursor[512];
    size_t clen;
} cmpct;

static int cmpct_read(kv_store *s, MDB_txn *txn, cmpct *c)
{
    MDB_val k = {sizeof(CMPCT_KEY) - 1, (void *)CMPCT_KEY}, v;
    int rc = mdb_get(txn, s->meta, &k, &v);
    if (rc)
        return kv_mdb_err(rc); /* -ENOENT when absent */
    const uint8_t *p = v.mv_data;
    if (v.mv_size < CMPCT_HDR || v.mv_size - CMPCT_HDR > sizeof c->cursor)
        return -EBADMSG;
    uint32_t crc = kv_be32(p);
    if (crc != kv_crc32c(0, p + 4, v.mv_size - 4))
        return -EBADMSG;
    c->rev = (int64_t)kv_be64(p + 4);
    c->has_cursor = p[12] & (uint8_t)~CUR_PARTIAL;
    c->partial = (p[12] & CUR_PARTIAL) != 0;
    if (c->has_cursor > CUR_LONG || (c->partial && c->has_cursor == CUR_NONE))
        return -EBADMSG;
    c->clen = v.mv_size - CMPCT_HDR;
    memcpy(c->cursor, p + CMPCT_HDR, c->clen);
    return 0;
}

static int cmpct_write(kv_store *s, MDB_txn *txn, const cmpct *c)
{
    uint8_t buf[CMPCT_HDR + 512];
    kv_put_be64(buf + 4, (uint64_t)c->rev);
    buf[12] = (uint8_t)(c->has_cursor | (c->has_cursor && c->partial ? CUR_PARTIAL : 0));
    size_t clen = c->has_cursor ? c->clen : 0;
    memcpy(buf + CMPCT_HDR, c->cursor, clen);
    uint32_t crc = kv_crc32c(0, buf + 4, CMPCT_HDR - 4 + clen);
    buf[0] = (uint8_t)(crc >> 24);
    buf[1] = (uint8_t)(crc >> 16);
    buf[2] = (uint8_t)(crc >> 8);
    buf[3] = (uint8_t)crc;
    MDB_val k = {sizeof(CMPCT_KEY) - 1, (void *)CMPCT_KEY}, v = {CMPCT_HDR + clen, buf};
    return kv_mdb_err(mdb_put(txn, s->meta, &k, &v, 0));
}

static int cmpct_delete(kv_store *s, MDB_txn *txn)
{
    MDB_val k = {sizeof(CMPCT_KEY) - 1, (void *)CMPCT_KEY};
    int rc = mdb_del(txn, s->meta, &k, NULL);
    return rc == MDB_NOTFOUND ? 0 : kv_mdb_err(rc);
}

int kv_compact_schedule(kv_store *s, MDB_txn *txn, int64_t rev)
{
    cmpct c = {.rev = rev}; /* a newer compaction restarts the walk from the first key */
    return cmpct_write(s, txn, &c);
}

int kv_compact_pending(kv_store *s, MDB_txn *txn, int64_t *rev)
{
    cmpct c = {0};
    int rc = cmpct_read(s, txn, &c);
    if (rc == -ENOENT)
        return 0;
    if (rc)
        return rc;
    if (rev)
        *rev = c.rev;
    return 1;
}

static bool ent_lt(const kv_ent *a, const kv_ent *b)
{
    return a->main < b->main || (a->main == b->main && a->sub < b->sub);
}

/* What one step may still do: records (max_revs, 0 = no bound) and time (deadline on
 * CLOCK_MONOTONIC in ns, 0 = none; only checked once the step removed a record or visited a
 * key, so every step makes progress). */
typedef struct step_budget {
    uint64_t max_revs, gone; /* gone: records removed by this step */
    int64_t deadline_ns;
} step_budget;

static int64_t now_ns(void)
{
    return (int64_t)kv_mono_ns();
}

static bool out_of_budget(const step_budget *b, bool progressed)
{
    if (b->max_revs && b->gone >= b->max_revs)
        return true;
    return b->deadline_ns && progressed && now_ns() >= b->deadline_ns;
}

/* Removes the compacted revisions of one index key of db (c: a cursor on db) within the
 * step's budget b (b->gone counts the records removed). A long key whose last entry goes
 * loses its "lkey" record too. Returns 0 when the key is done, 1 when the budget ran out
 * first (call again for the rest: the key's state is then a valid partial compaction). */
static int compact_key(kv_store *s, MDB_txn *txn, MDB_dbi db, MDB_cursor *c, const uint8_t *k,
                       size_t kl, int64_t rev, step_budget *b)
{
    kv_ent keep;
    int rc = kv_index_get_raw(s, txn, db, k, kl, rev, &keep);
    if (rc == -ENOENT)
        return 0;
    if (rc)
        return rc;
    for (;;) {
        MDB_val key = {kl, (void *)k}, d;
        rc = mdb_cursor_get(c, &key, &d, MDB_SET);
        if (rc == MDB_NOTFOUND)
            return db == s->lkidx ? kv_lk_key_del(s, txn, k) : 0;
        if (rc == 0)
            rc = mdb_cursor_get(c, &key, &d, MDB_FIRST_DUP);
        if (rc)
            return kv_mdb_err(rc);
        if (d.mv_size != KV_DUP_LEN)
            return -EBADMSG;
        kv_ent e;
        kv_dup_decode(d.mv_data, &e);
        bool same = e.main == keep.main && e.sub == keep.sub;
        if (!(ent_lt(&e, &keep) || (same && keep.tomb)))
            return 0;
        if (out_of_budget(b, b->gone > 0))
            return 1;
        uint8_t rk[KV_REVKEY_LEN];
        kv_revkey(rk, e.main, e.sub);
        MDB_val rkey = {KV_REVKEY_LEN, rk};
        rc = mdb_del(txn, s->rev, &rkey, NULL);
        if (rc && rc != MDB_NOTFOUND)
            return kv_mdb_err(rc);
        if ((rc = mdb_cursor_del(c, 0)))
            return kv_mdb_err(rc);
        b->gone++;
        if (same) {
            if (db != s->lkidx)
                return 0;
            key = (MDB_val){kl, (void *)k};
            rc = mdb_cursor_get(c, &key, &d, MDB_SET);
            if (rc == MDB_NOTFOUND)
                return kv_lk_key_del(s, txn, k);
            return kv_mdb_err(rc);
        }
    }
}

int kv_compact_run(kv_store *s, MDB_txn *txn, uint32_t max_keys, uint32_t max_revs, uint32_t max_us,
                   uint64_t *keys_done, uint64_t *removed)
{
    cmpct st;
    int rc = cmpct_read(s, txn, &st);
    if (rc == -ENOENT)
        return 0;
    if (rc)
        return rc;
    MDB_cursor *c = NULL;
    uint32_t n = 0;
    step_budget bud = {.max_revs = max_revs,
                       .deadline_ns = max_us ? now_ns() + (int64_t)max_us * 1000 : 0};
    bool finished = false;
    for (;;) {
        if ((max_keys && n >= max_keys) || out_of_budget(&bud, n > 0))
            break;
        MDB_dbi db = st.has_cursor == CUR_LONG ? s->lkidx : s->kidx;
        if (!c && (rc = kv_mdb_err(mdb_cursor_open(txn, db, &c))))
            break;
        MDB_val key, d;
        if (st.has_cursor == CUR_NONE) {
            rc = mdb_cursor_get(c, &key, &d, MDB_FIRST);
        } else {
            key.mv_size = st.clen;
            key.mv_data = st.cursor;
            rc = st.clen ? mdb_cursor_get(c, &key, &d, MDB_SET_RANGE)
                         : mdb_cursor_get(c, &key, &d, MDB_FIRST);
            /* the cursor key was done, unless a step stopped inside it (CUR_PARTIAL) */
            if (rc == 0 && !st.partial && key.mv_size == st.clen &&
                memcmp(key.mv_data, st.cursor, st.clen) == 0)
                rc = mdb_cursor_get(c, &key, &d, MDB_NEXT_NODUP);
        }
        st.partial = false;
        if (rc == MDB_NOTFOUND && db == s->kidx) {
            /* short keys done: the long ones follow (from the first handle) */
            mdb_cursor_close(c);
            c = NULL;
            st.has_cursor = CUR_LONG;
            st.clen = 0;
            rc = 0; /* a budget stop at the loop's top is not MDB_NOTFOUND's error */
            continue;
        }
        if (rc == MDB_NOTFOUND) {
            rc = 0;
            finished = true;
            break;
        }
        if (rc) {
            rc = kv_mdb_err(rc);
            break;
        }
        if (key.mv_size > sizeof st.cursor || key.mv_size == 0 ||
            (db == s->lkidx && key.mv_size != KV_LK_HANDLE)) {
            rc = -EBADMSG;
            break;
        }
        memcpy(st.cursor, key.mv_data, key.mv_size);
        st.clen = key.mv_size;
        if (st.has_cursor == CUR_NONE)
            st.has_cursor = CUR_SHORT;
        rc = compact_key(s, txn, db, c, st.cursor, st.clen, st.rev, &bud);
        if (rc < 0)
            break;
        n++;
        if (rc == 1) { /* out of budget inside this key: the next step resumes at it */
            rc = 0;
            st.partial = true;
            break;
        }
    }
    if (c)
        mdb_cursor_close(c);
    if (keys_done)
        *keys_done += n;
    if (removed)
        *removed += bud.gone;
    if (rc)
        return rc;
    if (!finished && st.has_cursor == CUR_LONG && st.clen == 0) {
        /* stopped on the switch: with no long key there is nothing left (and a format-1 file
         * never gets a CUR_LONG cursor) */
        MDB_stat ls;
        if ((rc = mdb_stat(txn, s->lkidx, &ls)))
            return kv_mdb_err(rc);
        finished = ls.ms_entries == 0;
    }
    if (finished) {
        if ((rc = cmpct_delete(s, txn)))
            return rc;
        return 0;
    }
    if ((rc = cmpct_write(s, txn, &st)))
        return rc;
    return 1;
}

/* The key of a stored record: field 1 of the packed KeyValue, which protobuf-c writes first.
 * Falls back to nothing (-EBADMSG) if the layout is unexpected. */
static int rec_key(const uint8_t *val, size_t vlen, const uint8_t **key, size_t *klen)
{
    if (vlen < 5 + 2 || val[5] != 0x0a)
        return -EBADMSG;
    const uint8_t *p = val + 6, *end = val + vlen;
    uint64_t len = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (p >= end)
            return -EBADMSG;
        uint8_t b = *p++;
        len |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            break;
        if (shift == 63)
            return -EBADMSG;
    }
    if (len > (uint64_t)(end - p))
        return -EBADMSG;
    *key = p;
    *klen = (size_t)len;
    return 0;
}

int kv_compact_survives(kv_store *s, MDB_txn *txn, const uint8_t *revkey, const uint8_t *val,
                        size_t vlen, int64_t rev)
{
    int64_t main = (int64_t)kv_be64(revkey), sub = (int64_t)kv_be64(revkey + 8);
    if (main > rev)
        return 1;
    if (vlen >= 5 && (val[4] & KV_DUP_TOMBSTONE))
        return 0; /* a tombstone <= rev never survives (it is the latest or superseded) */
    const uint8_t *key;
    size_t klen;
    int rc = rec_key(val, vlen, &key, &klen);
    if (rc)
        return rc;
    kv_ent keep;
    rc = kv_index_get(s, txn, key, klen, rev, &keep);
    if (rc == -ENOENT)
        return 0;
    if (rc)
        return rc;
    return !keep.tomb && keep.main == main && keep.sub == sub;
}
