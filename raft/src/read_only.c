/*
 * read_only.c - linearizable reads through ReadIndex (thesis §6.4).
 *
 * Contract:
 *   - "1. If the leader has not yet marked an entry from its current term
 *     committed, it waits until it has done so" (here: RAFT_EAGAIN, retry).
 *     "2. The leader saves its current commit index in a local variable
 *     readIndex.  3. The leader needs to make sure it hasn't been superseded
 *     ... it sends a new round of heartbeats and waits for their
 *     acknowledgments from a majority of the cluster."
 *   - Each request gets a sequence number (monotonic for the life of the
 *     instance); heartbeats carry the latest one in ctx and followers echo
 *     it.  A response acknowledges every request with seq <= ctx, so requests
 *     are released in FIFO order once a quorum (the leader included) has
 *     acknowledged them.  Only same-term responses are processed (stale terms
 *     are dropped by raft_step), so an ack proves leadership at that term.
 *   - No clock-based lease is used.  Pending requests are bounded by
 *     cfg.max_pending_reads (RAFT_EBUSY) and dropped on leadership change.
 */
#include "internal.h"

void raft__reads_reset(struct raft *r)
{
    r->reads_start = 0;
    r->reads_n = 0;
}

int raft__read_state_push(struct raft *r, uint64_t ctx, raft_index index)
{
    if (VEC_RESERVE(r, r->rs, r->rs.n + 1))
        return RAFT_ENOMEM;
    r->rs.v[r->rs.n].ctx = ctx;
    r->rs.v[r->rs.n].index = index;
    r->rs.n++;
    return 0;
}

int raft__read_ack(struct raft *r)
{
    size_t cap = r->cfg.max_pending_reads;
    while (r->reads_n) {
        struct raft_read_req *q = &r->reads[r->reads_start];
        unsigned acks = 0;
        for (unsigned i = 0; i < r->n_prs; i++) {
            const struct raft_progress *p = &r->prs[i];
            if (!p->learner && (p->id == r->id || p->read_ack >= q->seq))
                acks++;
        }
        if (acks < raft__quorum(r))
            break;
        int rv = raft__read_state_push(r, q->ctx, q->index);
        if (rv)
            return rv;
        r->reads_start = (r->reads_start + 1) % cap;
        r->reads_n--;
    }
    return 0;
}

int raft_read_index(struct raft *r, uint64_t ctx)
{
    if (r->poisoned)
        return RAFT_ENOMEM;
    if (r->role != RAFT_LEADER)
        return r->lead == RAFT_NONE ? RAFT_ENOLEADER : RAFT_ENOTLEADER;
    raft_term t = 0;
    if (raft__log_term(r, r->log.committed, &t) != 0 || t != r->term)
        return RAFT_EAGAIN;
    int rv;
#if RAFT_MUTATION == MUT_READ_NO_QUORUM
    rv = raft__read_state_push(r, ctx, r->log.committed);
    goto out;
#endif
    if (raft__quorum(r) == 1 && raft__is_voter(&r->conf, r->id)) {
        rv = raft__read_state_push(r, ctx, r->log.committed);
        goto out;
    }
    size_t cap = r->cfg.max_pending_reads;
    if (r->reads_n >= cap)
        return RAFT_EBUSY;
    struct raft_read_req *q = &r->reads[(r->reads_start + r->reads_n) % cap];
    q->ctx = ctx;
    q->index = r->log.committed;
    q->seq = ++r->read_seq;
    r->reads_n++;
    rv = raft__bcast_heartbeat(r, r->read_seq);
out:
    if (rv == RAFT_ENOMEM)
        r->poisoned = 1;
    return rv;
}
