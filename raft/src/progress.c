/*
 * progress.c - the leader's view of each peer (etcd-io/raft "Progress").
 *
 * Contract:
 *   - match: highest index known replicated on the peer; next: next index
 *     to send.  "If successful: update nextIndex and matchIndex for follower;
 *     if AppendEntries fails because of log inconsistency: decrement
 *     nextIndex and retry" (Figure 2, Rules for Servers, Leaders).
 *   - PROBE: one append in flight at a time (probe_sent) until the peer's
 *     position is known.  REPLICATE: optimistic pipelining, at most
 *     cfg.max_inflight append messages outstanding (flow control).  SNAPSHOT:
 *     nothing is sent until the snapshot is acknowledged, reported, or times
 *     out (snap_ticks >= election timeout).
 *   - Stale responses (duplicated or reordered) never move match backwards.
 */
#include "internal.h"

void raft__pr_reset(struct raft_progress *p, raft_id id, raft_index next, bool learner)
{
    p->id = id;
    p->match = 0;
    p->next = next;
    p->pending_snap = 0;
    p->state = RAFT_PR_PROBE;
    p->probe_sent = false;
    p->recent_active = true;
    p->learner = learner;
    p->snap_ticks = 0;
    p->read_ack = 0;
    p->infl_start = p->infl_count = 0;
}

void raft__pr_become_probe(struct raft_progress *p)
{
    if (p->state == RAFT_PR_SNAPSHOT) {
        raft_index n = p->pending_snap + 1;
        p->next = p->match + 1 > n ? p->match + 1 : n;
    } else {
        p->next = p->match + 1;
    }
    p->state = RAFT_PR_PROBE;
    p->probe_sent = false;
    p->pending_snap = 0;
    p->infl_start = p->infl_count = 0;
}

void raft__pr_become_replicate(struct raft_progress *p)
{
    p->state = RAFT_PR_REPLICATE;
    p->next = p->match + 1;
    p->probe_sent = false;
    p->infl_start = p->infl_count = 0;
}

void raft__pr_become_snapshot(struct raft_progress *p, raft_index snap)
{
    p->state = RAFT_PR_SNAPSHOT;
    p->pending_snap = snap;
    p->snap_ticks = 0;
    p->infl_start = p->infl_count = 0;
}

bool raft__pr_maybe_update(struct raft_progress *p, raft_index n)
{
    bool updated = false;
    if (p->match < n) {
        p->match = n;
        updated = true;
        p->probe_sent = false;
    }
    if (p->next < n + 1)
        p->next = n + 1;
    return updated;
}

bool raft__pr_maybe_decr(struct raft_progress *p, raft_index rejected, raft_index next)
{
    if (p->state == RAFT_PR_REPLICATE) {
        if (rejected <= p->match)
            return false; /* stale */
        p->next = p->match + 1;
        return true;
    }
    if (p->next == 0 || p->next - 1 != rejected)
        return false; /* stale */
    raft_index n = rejected < next + 1 ? rejected : next + 1;
    if (n < p->match + 1)
        n = p->match + 1;
    p->next = n;
    p->probe_sent = false;
    return true;
}

bool raft__pr_paused(const struct raft_progress *p, unsigned max_inflight)
{
    switch (p->state) {
    case RAFT_PR_PROBE:
        return p->probe_sent;
    case RAFT_PR_REPLICATE:
        return p->infl_count >= max_inflight;
    default:
        return true;
    }
}

void raft__pr_infl_add(struct raft_progress *p, raft_index last)
{
    if (p->infl_count >= RAFT_MAX_INFLIGHT)
        return; /* cannot happen: paused before */
    p->inflight[(p->infl_start + p->infl_count) % RAFT_MAX_INFLIGHT] = last;
    p->infl_count++;
}

void raft__pr_infl_free_to(struct raft_progress *p, raft_index idx)
{
    while (p->infl_count && p->inflight[p->infl_start] <= idx) {
        p->infl_start = (p->infl_start + 1) % RAFT_MAX_INFLIGHT;
        p->infl_count--;
    }
}

int raft__pr_slot(const struct raft *r, raft_id id)
{
    for (unsigned i = 0; i < r->n_prs; i++)
        if (r->prs[i].id == id)
            return (int)i;
    return -1;
}

struct raft_progress *raft__pr_get(struct raft *r, raft_id id)
{
    int i = raft__pr_slot(r, id);
    return i < 0 ? NULL : &r->prs[i];
}
