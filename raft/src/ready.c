/*
 * ready.c - the Ready/Advance handshake (etcd-io/raft design).
 *
 * Contract:
 *   - raft_ready() hands out everything produced since the last
 *     raft_advance(): all unstable entries (always all of them), the
 *     unstable snapshot, the hard state, committed-but-unapplied entries
 *     (up to cfg.max_apply_bytes, at least one), messages (two lists: before
 *     and after persistence), read states and soft state.
 *   - The arrays are owned by the instance and reused across cycles (no
 *     steady-state allocation); they stay valid until raft_advance().
 *   - raft_advance() marks the handed-out entries/snapshot stable, moves the
 *     applied index, applies committed configuration changes, and lets the
 *     leader count its own (now durable) log towards the quorum.
 *   - Committed entries are only handed out when no snapshot is pending, and
 *     always after rd.entries/rd.snapshot of the same ready are persisted
 *     (the application's step order), so nothing is applied before it is
 *     durable locally.
 */
#include "internal.h"

#include <stdint.h>
#include <string.h>

static struct raft_hard_state cur_hs(const struct raft *r)
{
    struct raft_hard_state hs = {r->term, r->vote, r->log.committed};
    return hs;
}

static bool hs_eq(const struct raft_hard_state *a, const struct raft_hard_state *b)
{
    return a->term == b->term && a->vote == b->vote && a->commit == b->commit;
}

bool raft_has_ready(struct raft *r)
{
    if (r->poisoned)
        return false;
    if (r->role == RAFT_LEADER && r->pending_bcast)
        return true;
    if (r->log.u.n || r->log.has_snap || r->msgs.n || r->msgs_after.n || r->rs.n)
        return true;
    struct raft_hard_state hs = cur_hs(r);
    if (!hs_eq(&hs, &r->prev_hs))
        return true;
    if (r->prev_ss.leader != r->lead || r->prev_ss.role != r->role)
        return true;
    return !r->log.has_snap && r->log.committed > r->log.applied;
}

static void fix_entries(struct raft *r, struct raft_msg *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        v[i].entries = v[i].n_entries ? r->pool.v + v[i].ent_off_ : NULL;
}

int raft_ready(struct raft *r, struct raft_ready *rd)
{
    int rv = 0;
    if (r->poisoned)
        return RAFT_ENOMEM;
    memset(rd, 0, sizeof(*rd));
    if (r->pending_bcast) {
        r->pending_bcast = false;
        if (r->role == RAFT_LEADER && (rv = raft__bcast_append(r)) != 0)
            goto err;
    }
    rd->hs = cur_hs(r);
    r->ready_hs = rd->hs;
#if RAFT_MUTATION == MUT_SKIP_VOTE_PERSIST
    rd->hs.vote = rd->hs.term == r->prev_hs.term ? r->prev_hs.vote : RAFT_NONE;
#endif
    rd->hs_changed = !hs_eq(&rd->hs, &r->prev_hs);
    rd->ss.leader = r->lead;
    rd->ss.role = r->role;
    rd->ss_changed = r->prev_ss.leader != r->lead || r->prev_ss.role != r->role;
    rd->entries = r->log.u.n ? r->log.u.v : NULL;
    rd->n_entries = r->log.u.n;
    rd->has_snapshot = r->log.has_snap;
    if (rd->has_snapshot)
        rd->snapshot = r->log.snap;
    r->ready_applied = 0;
    if (!r->log.has_snap && r->log.committed > r->log.applied) {
        size_t off = r->pool.n, n = 0;
        size_t max = r->cfg.max_apply_bytes ? r->cfg.max_apply_bytes : SIZE_MAX;
        rv = raft__log_slice(r, r->log.applied + 1, r->log.committed + 1, max, &n);
        if (rv)
            goto err;
        rd->committed = r->pool.v + off;
        rd->n_committed = n;
        r->ready_applied = rd->committed[n - 1].index;
    }
    fix_entries(r, r->msgs.v, r->msgs.n);
    fix_entries(r, r->msgs_after.v, r->msgs_after.n);
    if (rd->n_committed)
        rd->committed = r->pool.v + (rd->committed - r->pool.v);
    rd->msgs = r->msgs.v;
    rd->n_msgs = r->msgs.n;
    rd->msgs_after = r->msgs_after.v;
    rd->n_msgs_after = r->msgs_after.n;
    rd->reads = r->rs.v;
    rd->n_reads = r->rs.n;
    rd->must_sync = rd->n_entries || rd->has_snapshot || rd->hs.term != r->prev_hs.term ||
                    rd->hs.vote != r->prev_hs.vote;
    return 0;
err:
    if (rv == RAFT_ENOMEM)
        r->poisoned = 1;
    return rv;
}

int raft_advance(struct raft *r, const struct raft_ready *rd)
{
    int rv = 0;
    if (r->poisoned)
        return RAFT_ENOMEM;
    if (rd->has_snapshot && rd->snapshot.meta.index > r->log.applied)
        r->log.applied = rd->snapshot.meta.index;
    raft__log_stable(r);
    for (size_t i = 0; i < rd->n_committed; i++) {
        const struct raft_entry *e = &rd->committed[i];
        if (e->type == RAFT_ENTRY_CONF && (rv = raft__conf_apply_entry(r, e)) != 0)
            goto err;
        if (r->role == RAFT_LEADER)
            r->uncommitted_bytes -= e->len < r->uncommitted_bytes ? e->len : r->uncommitted_bytes;
    }
    if (rd->n_committed && r->ready_applied > r->log.applied)
        r->log.applied = r->ready_applied;
    r->prev_hs = r->ready_hs; /* advance may move commit: report it next time */
    /* what this ready reported, not the state now: applying a conf entry above may have
     * made a removed leader a follower, which the next ready must report */
    r->prev_ss.leader = rd->ss.leader;
    r->prev_ss.role = rd->ss.role;
    r->msgs.n = r->msgs_after.n = r->pool.n = r->rs.n = 0;
    r->conf_buf_used = false;
    if (r->role == RAFT_LEADER) {
        struct raft_progress *self = raft__pr_get(r, r->id);
        if (self)
            raft__pr_maybe_update(self, raft__log_last(r));
        if (raft__maybe_commit(r))
            r->pending_bcast = true;
    }
    return 0;
err:
    if (rv == RAFT_ENOMEM)
        r->poisoned = 1;
    return rv;
}
