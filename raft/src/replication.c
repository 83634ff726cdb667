/*
 * replication.c - log replication (§5.3), commitment (§5.4.2), heartbeats
 * and snapshot transfer (§7).
 *
 * Contract:
 *   - Leader: appends are pipelined per peer subject to progress.c flow
 *     control; each message carries at most cfg.max_msg_bytes of entry data
 *     (but always at least one entry).  Appends, heartbeats, snapshots and
 *     TIMEOUT_NOW go to rd.msgs (may be sent before the leader's own write
 *     is durable, thesis §10.2.1); the leader counts itself in a quorum only
 *     for entries it has persisted (raft_advance).
 *   - "If there exists an N such that N > commitIndex, a majority of
 *     matchIndex[i] >= N, and log[N].term == currentTerm: set commitIndex = N"
 *     (Figure 2) - "Raft never commits log entries from previous terms by
 *     counting replicas" (§5.4.2).
 *   - Heartbeats carry commit = min(match, commitIndex) so a follower never
 *     commits an index it may not hold, and ctx = the latest read sequence.
 *   - Follower: "Reply false if log doesn't contain an entry at prevLogIndex
 *     whose term matches prevLogTerm" - with a hint (the last index <= the
 *     rejected one whose term is <= prevLogTerm, and its term) so the leader
 *     skips whole terms instead of one entry per round trip.  All follower
 *     responses go to rd.msgs_after (sent only once the log is durable).
 *   - A snapshot older than commitIndex is ignored; one whose last entry is
 *     already in the log just advances commitIndex; otherwise the log is
 *     replaced and rd.snapshot reports it.
 */
#include "internal.h"

#include <string.h>

struct raft_msg *raft__msg(struct raft *r, int type, raft_id to, bool after)
{
    if (after) {
        if (VEC_RESERVE(r, r->msgs_after, r->msgs_after.n + 1))
            return NULL;
    } else if (VEC_RESERVE(r, r->msgs, r->msgs.n + 1)) {
        return NULL;
    }
    struct raft_msg *m = after ? &r->msgs_after.v[r->msgs_after.n++] : &r->msgs.v[r->msgs.n++];
    memset(m, 0, sizeof(*m));
    m->type = (uint8_t)type;
    m->from = r->id;
    m->to = to;
    m->term = r->term;
    return m;
}

static int send_snapshot(struct raft *r, struct raft_progress *p)
{
    const struct raft_storage *st = r->cfg.storage;
    struct raft_snapshot s;
    memset(&s, 0, sizeof(s));
    int rv = st->snapshot(st->ctx, &s);
    if (rv == RAFT_EUNAVAILABLE || (rv == 0 && s.meta.index == 0))
        return 0;
    if (rv)
        return rv;
    struct raft_msg *m = raft__msg(r, RAFT_MSG_SNAPSHOT, p->id, false);
    if (!m)
        return RAFT_ENOMEM;
    m->snapshot = s;
    raft__pr_become_snapshot(p, s.meta.index);
    return 1;
}

/* Returns 1 if a message was sent, 0 if not, < 0 on error. */
int raft__send_append(struct raft *r, struct raft_progress *p, bool allow_empty)
{
    if (raft__pr_paused(p, r->cfg.max_inflight))
        return 0;
    raft_index prev = p->next - 1;
    raft_term pt = 0;
    size_t off = r->pool.n, n = 0;
    int rv = raft__log_term(r, prev, &pt);
    if (rv == 0)
        rv = raft__log_slice(r, p->next, raft__log_last(r) + 1, r->cfg.max_msg_bytes, &n);
    if (rv == RAFT_ECOMPACTED) {
        r->pool.n = off;
        return send_snapshot(r, p);
    }
    if (rv)
        return rv;
    if (n == 0 && !allow_empty)
        return 0;
    struct raft_msg *m = raft__msg(r, RAFT_MSG_APPEND, p->id, false);
    if (!m)
        return RAFT_ENOMEM;
    m->index = prev;
    m->log_term = pt;
    m->commit = r->log.committed;
    m->ent_off_ = off;
    m->n_entries = n;
    if (n > 0 && p->state == RAFT_PR_REPLICATE) {
        raft_index last = r->pool.v[off + n - 1].index;
        p->next = last + 1;
        raft__pr_infl_add(p, last);
    } else if (p->state == RAFT_PR_PROBE) {
        p->probe_sent = true;
    }
    return 1;
}

int raft__bcast_append(struct raft *r)
{
    for (unsigned i = 0; i < r->n_prs; i++) {
        struct raft_progress *p = &r->prs[i];
        if (p->id == r->id)
            continue;
        int rv = raft__send_append(r, p, true);
        while (rv == 1 && p->state == RAFT_PR_REPLICATE)
            rv = raft__send_append(r, p, false);
        if (rv < 0)
            return rv;
    }
    return 0;
}

int raft__bcast_heartbeat(struct raft *r, uint64_t ctx)
{
    for (unsigned i = 0; i < r->n_prs; i++) {
        struct raft_progress *p = &r->prs[i];
        if (p->id == r->id)
            continue;
        struct raft_msg *m = raft__msg(r, RAFT_MSG_HEARTBEAT, p->id, false);
        if (!m)
            return RAFT_ENOMEM;
        m->commit = p->match < r->log.committed ? p->match : r->log.committed;
        m->ctx = ctx;
    }
    return 0;
}

bool raft__maybe_commit(struct raft *r)
{
    raft_index m[RAFT_MAX_NODES];
    unsigned n = 0;
    for (unsigned i = 0; i < r->n_prs; i++)
        if (!r->prs[i].learner)
            m[n++] = r->prs[i].match;
    if (n == 0)
        return false;
    /* insertion sort, descending */
    for (unsigned i = 1; i < n; i++)
        for (unsigned j = i; j > 0 && m[j - 1] < m[j]; j--) {
            raft_index t = m[j];
            m[j] = m[j - 1];
            m[j - 1] = t;
        }
    raft_index mci = m[raft__quorum(r) - 1];
    if (mci <= r->log.committed)
        return false;
#if RAFT_MUTATION != MUT_COMMIT_OLD_TERM
    raft_term t;
    if (raft__log_term(r, mci, &t) != 0 || t != r->term)
        return false;
#endif
    raft__log_commit_to(r, mci);
    return true;
}

static int send_timeout_now(struct raft *r, raft_id to)
{
    struct raft_msg *m = raft__msg(r, RAFT_MSG_TIMEOUT_NOW, to, false);
    return m ? 0 : RAFT_ENOMEM;
}

int raft__handle_append(struct raft *r, const struct raft_msg *m)
{
    struct raft_msg *o;
    if (m->index < r->log.committed) {
        o = raft__msg(r, RAFT_MSG_APPEND_RESP, m->from, true);
        if (!o)
            return RAFT_ENOMEM;
        o->index = r->log.committed;
        return 0;
    }
    if (raft__log_match_term(r, m->index, m->log_term)) {
        raft_index ln;
        int rv = raft__log_maybe_append(r, m->index, m->log_term, m->commit, m->entries,
                                        m->n_entries, &ln);
        if (rv)
            return rv;
        o = raft__msg(r, RAFT_MSG_APPEND_RESP, m->from, true);
        if (!o)
            return RAFT_ENOMEM;
        o->index = ln;
        return 0;
    }
    raft_index last = raft__log_last(r);
    raft_index hint = m->index < last ? m->index : last;
    raft_term ht;
    hint = raft__log_find_conflict_by_term(r, hint, m->log_term, &ht);
    o = raft__msg(r, RAFT_MSG_APPEND_RESP, m->from, true);
    if (!o)
        return RAFT_ENOMEM;
    o->reject = true;
    o->index = m->index;
    o->reject_hint = hint;
    o->hint_term = ht;
    return 0;
}

int raft__handle_heartbeat(struct raft *r, const struct raft_msg *m)
{
    raft__log_commit_to(r, m->commit);
    /* Not held for the persist (rd.msgs, as etcd-io/raft): the answer claims nothing about
     * this node's log, only that it follows the sender in this term, and the leader's
     * ReadIndex confirmation must not wait for a follower's fsync of unrelated entries. */
    struct raft_msg *o = raft__msg(r, RAFT_MSG_HEARTBEAT_RESP, m->from, false);
    if (!o)
        return RAFT_ENOMEM;
    o->ctx = m->ctx;
    return 0;
}

int raft__handle_snapshot(struct raft *r, const struct raft_msg *m)
{
    const struct raft_snapshot *s = &m->snapshot;
    raft_index idx;
    if (s->meta.index <= r->log.committed) {
        idx = r->log.committed;
    } else if (raft__log_match_term(r, s->meta.index, s->meta.term)) {
        raft__log_commit_to(r, s->meta.index);
        idx = r->log.committed;
    } else {
        if (!raft__conf_valid(&s->meta.conf) || s->meta.index == UINT64_MAX)
            return RAFT_ECORRUPT; /* no leader sends it: refused before it touches the log */
        raft__log_restore(r, s);
        raft__conf_set(r, &s->meta.conf, s->meta.index);
        idx = s->meta.index;
    }
    struct raft_msg *o = raft__msg(r, RAFT_MSG_APPEND_RESP, m->from, true);
    if (!o)
        return RAFT_ENOMEM;
    o->index = idx;
    return 0;
}

int raft__handle_append_resp(struct raft *r, const struct raft_msg *m)
{
    struct raft_progress *p = raft__pr_get(r, m->from);
    if (!p || p->id == r->id)
        return 0;
    p->recent_active = true;
    int rv;
    if (m->reject) {
        raft_index next = m->reject_hint;
        if (m->hint_term > 0) {
            raft_term ft;
            next = raft__log_find_conflict_by_term(r, m->reject_hint, m->hint_term, &ft);
        }
        if (raft__pr_maybe_decr(p, m->index, next)) {
            if (p->state == RAFT_PR_REPLICATE)
                raft__pr_become_probe(p);
            rv = raft__send_append(r, p, true);
            if (rv < 0)
                return rv;
        }
        return 0;
    }
    if (m->index > raft__log_last(r))
        return 0; /* acknowledges entries this leader never sent: no follower says that */
    bool was_paused = raft__pr_paused(p, r->cfg.max_inflight);
    if (!raft__pr_maybe_update(p, m->index))
        return 0;
    if (p->state == RAFT_PR_PROBE) {
        raft__pr_become_replicate(p);
    } else if (p->state == RAFT_PR_SNAPSHOT && p->match >= p->pending_snap) {
        raft__pr_become_probe(p);
        raft__pr_become_replicate(p);
    } else if (p->state == RAFT_PR_REPLICATE) {
        raft__pr_infl_free_to(p, m->index);
    }
    if (raft__maybe_commit(r)) {
        rv = raft__bcast_append(r);
        if (rv)
            return rv;
    } else {
        rv = raft__send_append(r, p, was_paused);
        while (rv == 1 && p->state == RAFT_PR_REPLICATE)
            rv = raft__send_append(r, p, false);
        if (rv < 0)
            return rv;
    }
    if (r->lead_transferee == p->id && p->match == raft__log_last(r))
        return send_timeout_now(r, p->id);
    return 0;
}

int raft__handle_heartbeat_resp(struct raft *r, const struct raft_msg *m)
{
    struct raft_progress *p = raft__pr_get(r, m->from);
    if (!p || p->id == r->id)
        return 0;
    p->recent_active = true;
    p->probe_sent = false;
    if (p->state == RAFT_PR_REPLICATE && p->infl_count >= r->cfg.max_inflight) {
        /* free one slot so a lost append cannot stall the pipeline */
        p->infl_start = (p->infl_start + 1) % RAFT_MAX_INFLIGHT;
        p->infl_count--;
    }
    if (p->match < raft__log_last(r)) {
        int rv = raft__send_append(r, p, true);
        if (rv < 0)
            return rv;
    }
    if (m->ctx > p->read_ack)
        p->read_ack = m->ctx;
    return raft__read_ack(r);
}

int raft__append_local(struct raft *r, int type, const void *data, size_t len, raft_index *index)
{
    struct raft_entry e = {
        .term = r->term,
        .index = raft__log_last(r) + 1,
        .type = (uint8_t)type,
        .data = data,
        .len = len,
    };
    int rv = raft__log_append(r, &e, 1);
    if (rv)
        return rv;
    r->uncommitted_bytes += len;
    r->pending_bcast = true;
    if (index)
        *index = e.index;
    return 0;
}
