/* wal_read: the raft_storage vtable over the WAL (raft.h "stable storage"). Terms, bounds
 * and the configuration-entry index answer from memory; entry data comes from the tail
 * cache or, for older entries, from the segment file (pread, CRC checked again). Data read
 * from a file lives until kv_wal_end_cycle. Caller's thread (one at a time). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "wal/wal_int.h"

static int latch(kv_wal *w, int rc)
{
    if (rc && !w->err)
        w->err = rc;
    return rc;
}

static int st_initial_state(void *ctx, struct raft_hard_state *hs)
{
    kv_wal *w = ctx;
    *hs = w->have_hs ? w->hs : (struct raft_hard_state){0};
    return 0;
}

static raft_index st_first_index(void *ctx)
{
    kv_wal *w = ctx;
    return w->snap.index + 1;
}

static raft_index st_last_index(void *ctx)
{
    kv_wal *w = ctx;
    return w->n_ents ? kv_wal_last(w) : w->snap.index;
}

static int st_term(void *ctx, raft_index i, raft_term *term)
{
    kv_wal *w = ctx;
    if (i == w->snap.index) {
        *term = w->snap.term;
        return 0;
    }
    if (i < w->snap.index)
        return RAFT_ECOMPACTED;
    struct kv_wal_ent *e = kv_wal_ent_at(w, i);
    if (!e)
        return RAFT_EUNAVAILABLE;
    *term = e->term;
    return 0;
}

/* Reads entry i's record from its segment; *data points into a buffer freed at end_cycle. */
static int read_rec(kv_wal *w, raft_index i, const struct kv_wal_ent *e, const void **data)
{
    struct kv_wal_seg *s = kv_wal_seg_by_seq(w, e->seg);
    if (!s)
        return -EBADMSG;
    size_t sz = KV_WAL_HDR + 17 + (size_t)e->len;
    uint8_t *buf = malloc(sz);
    if (!buf)
        return -ENOMEM;
    size_t got = 0;
    while (got < sz) {
        ssize_t r = pread(s->fd, buf + got, sz - got, (off_t)(e->off + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            free(buf);
            return r < 0 ? -errno : -EBADMSG;
        }
        got += (size_t)r;
    }
    uint8_t type;
    uint32_t len;
    if (kv_wal_rec_check(buf, sz, &type, &len) != 0 || type != KV_WAL_REC_ENTRY ||
        len != 17 + e->len || kv_be64(buf + KV_WAL_HDR) != i ||
        kv_be64(buf + KV_WAL_HDR + 8) != e->term) {
        free(buf);
        return -EBADMSG;
    }
    kv_wal_discard(w, buf);
    *data = buf + KV_WAL_HDR + 17;
    return 0;
}

static int st_entries(void *ctx, raft_index lo, raft_index hi, size_t max_bytes,
                      struct raft_entry *out, size_t *n)
{
    kv_wal *w = ctx;
    size_t bytes = 0;
    *n = 0;
    if (lo >= hi)
        return 0;
    if (lo <= w->snap.index)
        return RAFT_ECOMPACTED;
    if (!w->n_ents || hi - 1 > kv_wal_last(w))
        return RAFT_EUNAVAILABLE;
    for (raft_index i = lo; i < hi; i++) {
        struct kv_wal_ent *e = kv_wal_ent_at(w, i);
        if (*n && bytes + e->len > max_bytes)
            break;
        const void *data = e->data;
        if (!e->cached && e->len) {
            int rc = read_rec(w, i, e, &data);
            if (rc)
                return latch(w, rc);
        }
        out[(*n)++] = (struct raft_entry){
            .term = e->term, .index = i, .type = e->type, .data = data, .len = e->len};
        bytes += e->len;
    }
    return 0;
}

static int st_snapshot(void *ctx, struct raft_snapshot *snap)
{
    kv_wal *w = ctx;
    memset(snap, 0, sizeof *snap);
    snap->meta = w->snap;
    return 0;
}

static int st_next_conf(void *ctx, raft_index lo, raft_index hi, raft_index *idx)
{
    kv_wal *w = ctx;
    return kv_wal_idx_conf_next(w, lo, hi, idx);
}

void kv_wal_storage_init(kv_wal *w)
{
    w->vt = (struct raft_storage){.ctx = w,
                                  .initial_state = st_initial_state,
                                  .first_index = st_first_index,
                                  .last_index = st_last_index,
                                  .term = st_term,
                                  .entries = st_entries,
                                  .snapshot = st_snapshot,
                                  .next_conf = st_next_conf};
}

const struct raft_storage *kv_wal_storage(kv_wal *w)
{
    return &w->vt;
}

void kv_wal_end_cycle(kv_wal *w)
{
    for (size_t k = 0; k < w->n_garbage; k++)
        free(w->garbage[k]);
    w->n_garbage = 0;
}
