/* wal_index: the in-memory view of the log (wal.h "Memory"): the position and term of every
 * retained entry, the configuration-entry index, the data cache of the newest entries and
 * the snapshot meta. Recovery and the write path both go through it, so a reopened log is
 * built by the same rules that built it. Caller's thread (one at a time). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "wal/wal_int.h"

raft_index kv_wal_last(const kv_wal *w)
{
    return w->first + w->n_ents - 1;
}

struct kv_wal_ent *kv_wal_ent_at(kv_wal *w, raft_index i)
{
    if (i < w->first || i > kv_wal_last(w) || w->n_ents == 0)
        return NULL;
    return &w->ents[w->head + (i - w->first)];
}

void kv_wal_discard(kv_wal *w, void *p)
{
    if (!p)
        return;
    if (w->opening) { /* nothing was returned to a reader yet */
        free(p);
        return;
    }
    if (w->n_garbage == w->cap_garbage) {
        size_t cap = w->cap_garbage ? w->cap_garbage * 2 : 64;
        void **g = realloc(w->garbage, cap * sizeof *g);
        if (!g) {
            /* p may still be referenced by data returned this cycle: leak it rather than
             * free it early, and stop the log. */
            if (!w->err)
                w->err = -ENOMEM;
            return;
        }
        w->garbage = g;
        w->cap_garbage = cap;
    }
    w->garbage[w->n_garbage++] = p;
}

static void drop_data(kv_wal *w, struct kv_wal_ent *e)
{
    if (e->cached)
        w->cached_bytes -= e->len;
    kv_wal_discard(w, e->data);
    e->data = NULL;
    e->cached = false;
}

/* Drops the entries >= i (i in [first, last + 1]). */
static void drop_suffix(kv_wal *w, raft_index i)
{
    for (raft_index k = i; k <= kv_wal_last(w) && w->n_ents; k++)
        drop_data(w, kv_wal_ent_at(w, k));
    w->n_ents = i - w->first;
    while (w->n_conf && w->conf[w->n_conf - 1] >= i)
        w->n_conf--;
    if (w->cache_lo > i)
        w->cache_lo = i;
}

/* Drops the entries <= i (i in [first - 1, last]). */
static void drop_prefix(kv_wal *w, raft_index i)
{
    size_t k = (size_t)(i + 1 - w->first);
    for (raft_index j = w->first; j <= i; j++)
        drop_data(w, kv_wal_ent_at(w, j));
    w->head += k;
    w->n_ents -= k;
    w->first = i + 1;
    if (w->cache_lo < w->first)
        w->cache_lo = w->first;
    size_t c = 0;
    while (c < w->n_conf && w->conf[c] <= i)
        c++;
    if (c) {
        memmove(w->conf, w->conf + c, (w->n_conf - c) * sizeof *w->conf);
        w->n_conf -= c;
    }
    if (w->head > w->n_ents && w->ents) { /* compact: amortized O(1) per entry */
        memmove(w->ents, w->ents + w->head, w->n_ents * sizeof *w->ents);
        w->head = 0;
    }
}

int kv_wal_idx_push(kv_wal *w, const struct raft_entry *e, void *data, uint64_t seg, uint64_t off)
{
    if (w->opening && e->index > w->snap.index && (w->n_ents == 0 || e->index < w->first)) {
        /* Recovery: the first retained segment may start anywhere after the snapshot (older
         * segments deleted), and a later record may overwrite back below its first entry
         * (those below were deleted with their segment, a later snapshot marker covers
         * them). The log restarts at e; wal_open checks it is anchored at the end. */
        drop_suffix(w, w->first);
        w->head = 0;
        w->first = w->cache_lo = e->index;
    }
    if (e->index <= w->snap.index || e->index < w->first || e->index > kv_wal_last(w) + 1)
        return -EBADMSG;
    if (e->len > UINT32_MAX)
        return -EINVAL;
    drop_suffix(w, e->index);
    bool cached = data != NULL || e->len == 0; /* NULL data: read from its segment when asked */
    if (w->head + w->n_ents == w->cap_ents) {
        size_t cap = w->cap_ents ? w->cap_ents * 2 : 256;
        struct kv_wal_ent *v = realloc(w->ents, cap * sizeof *v);
        if (!v)
            return -ENOMEM;
        w->ents = v;
        w->cap_ents = cap;
    }
    if (e->type == RAFT_ENTRY_CONF) {
        if (w->n_conf == w->cap_conf) {
            size_t cap = w->cap_conf ? w->cap_conf * 2 : 16;
            raft_index *v = realloc(w->conf, cap * sizeof *v);
            if (!v)
                return -ENOMEM;
            w->conf = v;
            w->cap_conf = cap;
        }
        w->conf[w->n_conf++] = e->index;
    }
    w->ents[w->head + w->n_ents++] = (struct kv_wal_ent){.term = e->term,
                                                         .seg = seg,
                                                         .off = off,
                                                         .len = (uint32_t)e->len,
                                                         .type = e->type,
                                                         .data = data,
                                                         .cached = cached};
    if (cached)
        w->cached_bytes += e->len;
    return 0;
}

int kv_wal_idx_snapshot(kv_wal *w, const struct raft_snapshot_meta *m)
{
    if (m->index < w->snap.index)
        return -EBADMSG;
    if (m->index + 1 <= w->first) {
        /* The log starts right after it (the same snapshot again, e.g. a segment's head),
         * or, in recovery, the first retained segment starts later (older segments deleted;
         * a later marker must close the gap: wal_open checks). Nothing to drop. */
        w->snap = *m;
        return 0;
    }
    struct kv_wal_ent *e = kv_wal_ent_at(w, m->index);
    if (e && e->term == m->term) {
        drop_prefix(w, m->index);
    } else {
        drop_suffix(w, w->first);
        w->head = 0;
        w->first = m->index + 1;
        w->cache_lo = w->first;
    }
    w->snap = *m;
    return 0;
}

void kv_wal_idx_evict(kv_wal *w)
{
    while (w->cached_bytes > w->o.tail_bytes && w->cache_lo <= kv_wal_last(w) && w->n_ents) {
        struct kv_wal_ent *e = kv_wal_ent_at(w, w->cache_lo);
        if (e->seg == KV_WAL_SEG_PENDING)
            break;
        drop_data(w, e);
        w->cache_lo++;
    }
}

int kv_wal_idx_conf_next(const kv_wal *w, raft_index lo, raft_index hi, raft_index *idx)
{
    size_t a = 0, b = w->n_conf;
    while (a < b) { /* first conf index >= lo */
        size_t m = a + (b - a) / 2;
        if (w->conf[m] < lo)
            a = m + 1;
        else
            b = m;
    }
    *idx = (a < w->n_conf && w->conf[a] <= hi) ? w->conf[a] : 0;
    return 0;
}

void kv_wal_idx_free(kv_wal *w)
{
    for (size_t k = 0; k < w->n_ents; k++)
        free(w->ents[w->head + k].data);
    free(w->ents);
    free(w->conf);
    for (size_t k = 0; k < w->n_garbage; k++)
        free(w->garbage[k]);
    free(w->garbage);
    w->ents = NULL;
    w->conf = NULL;
    w->garbage = NULL;
    w->n_ents = w->n_conf = w->n_garbage = 0;
}
