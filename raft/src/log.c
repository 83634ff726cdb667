/*
 * log.c - the replicated log: stable part (read through the storage vtable)
 * plus an in-memory unstable suffix and, possibly, an unstable snapshot.
 *
 * Contract:
 *   - Entries with index < u_off are stable (read via storage); entries in
 *     u.v are not yet persisted and are all handed out in the next ready;
 *     raft_advance() marks them stable (raft__log_stable).
 *   - "If an existing entry conflicts with a new one (same index but
 *     different terms), delete the existing entry and all that follow it"
 *     (Figure 2, AppendEntries receiver rule 3) - committed entries never
 *     conflict; a message claiming otherwise is RAFT_ECORRUPT.
 *   - "Raft determines which of two logs is more up-to-date by comparing the
 *     index and term of the last entries in the logs" (§5.4.1).
 *   - Log Matching: an entry at (index, term) has the same content and
 *     preceding log everywhere; so appends are checked against (prev, term).
 */
#include "internal.h"

void raft__log_init(struct raft *r)
{
    const struct raft_storage *st = r->cfg.storage;
    r->log.u.n = 0;
    r->log.u_off = st->last_index(st->ctx) + 1;
    r->log.has_snap = false;
}

raft_index raft__log_first(const struct raft *r)
{
    if (r->log.has_snap)
        return r->log.snap.meta.index + 1;
    return r->cfg.storage->first_index(r->cfg.storage->ctx);
}

raft_index raft__log_last(const struct raft *r)
{
    if (r->log.u.n)
        return r->log.u_off + r->log.u.n - 1;
    if (r->log.has_snap)
        return r->log.snap.meta.index;
    return r->cfg.storage->last_index(r->cfg.storage->ctx);
}

int raft__log_term(const struct raft *r, raft_index i, raft_term *t)
{
    raft_index first = raft__log_first(r);
    if (i + 1 < first)
        return RAFT_ECOMPACTED;
    if (i > raft__log_last(r))
        return RAFT_EUNAVAILABLE;
    if (r->log.has_snap && i == r->log.snap.meta.index) {
        *t = r->log.snap.meta.term;
        return 0;
    }
    if (r->log.u.n && i >= r->log.u_off) {
        *t = r->log.u.v[i - r->log.u_off].term;
        return 0;
    }
    if (r->log.has_snap)
        return RAFT_ECOMPACTED;
    return r->cfg.storage->term(r->cfg.storage->ctx, i, t);
}

raft_term raft__log_last_term(const struct raft *r)
{
    raft_term t = 0;
    if (raft__log_term(r, raft__log_last(r), &t) != 0)
        return 0;
    return t;
}

bool raft__log_match_term(const struct raft *r, raft_index i, raft_term t)
{
    raft_term x;
    if (raft__log_term(r, i, &x) != 0)
        return false;
    return x == t;
}

bool raft__log_up_to_date(const struct raft *r, raft_index idx, raft_term term)
{
#if RAFT_MUTATION == MUT_NO_UPTODATE_CHECK
    (void)r, (void)idx, (void)term;
    return true;
#else
    raft_term lt = raft__log_last_term(r);
    return term > lt || (term == lt && idx >= raft__log_last(r));
#endif
}

int raft__log_append(struct raft *r, const struct raft_entry *e, size_t n)
{
    if (n == 0)
        return 0;
    raft_index first = e[0].index;
    if (first == r->log.u_off + r->log.u.n) {
        /* plain append */
    } else if (first <= r->log.u_off) {
        /* replaces (part of) the stable log: storage truncates on append */
        r->log.u_off = first;
        r->log.u.n = 0;
    } else {
        r->log.u.n = first - r->log.u_off;
    }
    if (VEC_RESERVE(r, r->log.u, r->log.u.n + n))
        return RAFT_ENOMEM;
    for (size_t i = 0; i < n; i++)
        r->log.u.v[r->log.u.n++] = e[i];
    return 0;
}

static raft_index find_conflict(const struct raft *r, const struct raft_entry *e, size_t n)
{
#if RAFT_MUTATION == MUT_NO_TRUNCATE
    raft_index last = raft__log_last(r);
    for (size_t i = 0; i < n; i++)
        if (e[i].index > last)
            return e[i].index;
    return 0;
#else
    for (size_t i = 0; i < n; i++)
        if (!raft__log_match_term(r, e[i].index, e[i].term))
            return e[i].index;
    return 0;
#endif
}

int raft__log_maybe_append(struct raft *r, raft_index prev, raft_term prev_term, raft_index commit,
                           const struct raft_entry *e, size_t n, raft_index *last_new)
{
    *last_new = 0;
    if (!raft__log_match_term(r, prev, prev_term))
        return 0;
    for (size_t i = 0; i < n; i++)
        if (e[i].index != prev + 1 + i)
            return RAFT_ECORRUPT;
    raft_index ln = prev + n;
    raft_index c = find_conflict(r, e, n);
    if (c) {
        if (c <= r->log.committed)
            return RAFT_ECORRUPT;
        int rv = raft__log_append(r, e + (c - prev - 1), n - (c - prev - 1));
        if (rv)
            return rv;
    }
    raft__log_commit_to(r, commit < ln ? commit : ln);
    *last_new = ln;
    return 0;
}

void raft__log_commit_to(struct raft *r, raft_index c)
{
    raft_index last = raft__log_last(r);
    if (c > last)
        c = last;
    if (c > r->log.committed)
        r->log.committed = c;
}

int raft__log_slice(struct raft *r, raft_index lo, raft_index hi, size_t max_bytes, size_t *n)
{
    *n = 0;
    if (lo >= hi)
        return 0;
    if (lo < raft__log_first(r))
        return RAFT_ECOMPACTED;
    if (hi > raft__log_last(r) + 1)
        return RAFT_EUNAVAILABLE;
    size_t bytes = 0;
    if (!r->log.has_snap && lo < r->log.u_off) {
        raft_index shi = hi < r->log.u_off ? hi : r->log.u_off;
        if (VEC_RESERVE(r, r->pool, r->pool.n + (shi - lo)))
            return RAFT_ENOMEM;
        size_t k = 0;
        const struct raft_storage *st = r->cfg.storage;
        int rv = st->entries(st->ctx, lo, shi, max_bytes, r->pool.v + r->pool.n, &k);
        if (rv)
            return rv;
        if (k == 0 || k > shi - lo)
            return RAFT_ECORRUPT;
        for (size_t i = 0; i < k; i++)
            bytes += r->pool.v[r->pool.n + i].len;
        r->pool.n += k;
        *n += k;
        if (k < shi - lo)
            return 0;
        lo = shi;
    }
    if (lo >= hi)
        return 0;
    if (VEC_RESERVE(r, r->pool, r->pool.n + (hi - lo)))
        return RAFT_ENOMEM;
    for (raft_index i = lo; i < hi; i++) {
        const struct raft_entry *e = &r->log.u.v[i - r->log.u_off];
        if (*n > 0 && bytes + e->len > max_bytes)
            break;
        bytes += e->len;
        r->pool.v[r->pool.n++] = *e;
        (*n)++;
    }
    return 0;
}

raft_index raft__log_find_conflict_by_term(const struct raft *r, raft_index idx, raft_term term,
                                           raft_term *found_term)
{
    raft_index last = raft__log_last(r);
    if (idx > last)
        idx = last;
    for (;; idx--) {
        raft_term t;
        if (raft__log_term(r, idx, &t) != 0) {
            *found_term = 0;
            return idx;
        }
        if (t <= term) {
            *found_term = t;
            return idx;
        }
        if (idx == 0)
            break;
    }
    *found_term = 0;
    return 0;
}

void raft__log_restore(struct raft *r, const struct raft_snapshot *s)
{
    r->log.has_snap = true;
    r->log.snap = *s;
    r->log.u_off = s->meta.index + 1;
    r->log.u.n = 0;
    r->log.committed = s->meta.index;
}

void raft__log_stable(struct raft *r)
{
    r->log.u_off += r->log.u.n;
    r->log.u.n = 0;
    r->log.has_snap = false;
}
