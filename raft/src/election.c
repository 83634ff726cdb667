/*
 * election.c - leader election (§5.2), pre-vote (§9.6), check-quorum (§6.2)
 * and the role transitions.
 *
 * Contract:
 *   - "If election timeout elapses without receiving AppendEntries RPC from
 *     current leader or granting vote to candidate: convert to candidate"
 *     (Figure 2).  Timeouts are drawn uniformly from
 *     [election_ticks, 2*election_ticks) with the instance's seeded PRNG.
 *   - "Each server will vote for at most one candidate in a given term, on a
 *     first-come-first-served basis" and only for a candidate whose log is
 *     at least as up-to-date as its own (§5.2, §5.4.1).  The vote is part of
 *     the hard state and every vote response is sent only after it is
 *     persisted (rd.msgs_after).
 *   - Pre-vote: "a candidate would first ask other servers whether its log
 *     was up-to-date enough to get their vote"; a pre-vote neither bumps
 *     the term nor records a vote, on either side (§9.6).
 *   - Check-quorum: a leader that has not heard from a quorum during an
 *     election timeout steps down; a node that heard from a leader within
 *     the election timeout ignores (pre-)vote requests not caused by a
 *     leadership transfer (the "leader lease" of §4.2.3, used only to avoid
 *     disruption, never for read safety).
 *   - A new leader appends an empty entry of its term ("each leader commits a
 *     blank no-op entry into the log at the start of its term", §8).
 */
#include "internal.h"

#include <string.h>

void raft__reset_randomized_timeout(struct raft *r)
{
    unsigned e = r->cfg.election_ticks;
    r->randomized_timeout = e + (unsigned)(raft__prng_next(r->prng) % e);
}

static void reset(struct raft *r, raft_term term)
{
    if (term != r->term) {
        r->term = term;
        r->vote = RAFT_NONE;
    }
    r->lead = RAFT_NONE;
    r->election_elapsed = 0;
    r->heartbeat_elapsed = 0;
    raft__reset_randomized_timeout(r);
    r->lead_transferee = RAFT_NONE;
    memset(r->votes, 0, sizeof(r->votes));
    raft__reads_reset(r);
    r->pending_bcast = false;
    r->uncommitted_bytes = 0;
}

void raft__become_follower(struct raft *r, raft_term term, raft_id lead)
{
    reset(r, term);
    r->role = RAFT_FOLLOWER;
    r->lead = lead;
}

int raft__become_leader(struct raft *r)
{
    reset(r, r->term);
    r->role = RAFT_LEADER;
    r->lead = r->id;
    raft_index next = raft__log_last(r) + 1;
    for (unsigned i = 0; i < r->n_prs; i++) {
        bool learner = r->prs[i].learner;
        raft__pr_reset(&r->prs[i], r->prs[i].id, next, learner);
    }
    /* self match is set when the entries are persisted (raft_advance) */
    int rv = raft__append_local(r, RAFT_ENTRY_NORMAL, NULL, 0, NULL);
    if (rv)
        return rv;
    r->pending_conf_index = raft__log_last(r);
    return 0;
}

/* Returns 1 won, -1 lost, 0 undecided. */
static int tally(struct raft *r)
{
    unsigned yes = 0, no = 0;
    for (unsigned i = 0; i < r->n_prs; i++) {
        if (r->prs[i].learner)
            continue;
        if (r->votes[i] > 0)
            yes++;
        else if (r->votes[i] < 0)
            no++;
    }
    unsigned q = raft__quorum(r);
    if (yes >= q)
        return 1;
    if (no >= q)
        return -1;
    return 0;
}

static int on_won(struct raft *r, bool pre, bool transfer)
{
    if (pre)
        return raft__campaign(r, false, transfer);
    int rv = raft__become_leader(r);
    if (rv)
        return rv;
    r->pending_bcast = true;
    return 0;
}

int raft__campaign(struct raft *r, bool pre, bool transfer)
{
    if (!raft__is_voter(&r->conf, r->id))
        return 0;
    raft_term t;
    if (pre) {
        r->role = RAFT_PRECANDIDATE;
        r->lead = RAFT_NONE;
        memset(r->votes, 0, sizeof(r->votes));
        t = r->term + 1;
    } else {
        reset(r, r->term + 1);
        r->role = RAFT_CANDIDATE;
        r->vote = r->id;
        t = r->term;
    }
    int self = raft__pr_slot(r, r->id);
    if (self >= 0)
        r->votes[self] = 1;
    if (tally(r) > 0)
        return on_won(r, pre, transfer);
    raft_index li = raft__log_last(r);
    raft_term lt = raft__log_last_term(r);
    for (unsigned i = 0; i < r->n_prs; i++) {
        if (r->prs[i].learner || r->prs[i].id == r->id)
            continue;
        struct raft_msg *m =
            raft__msg(r, pre ? RAFT_MSG_PREVOTE : RAFT_MSG_VOTE, r->prs[i].id, true);
        if (!m)
            return RAFT_ENOMEM;
        m->term = t;
        m->index = li;
        m->log_term = lt;
        m->transfer = transfer;
    }
    return 0;
}

int raft__handle_vote_req(struct raft *r, const struct raft_msg *m)
{
    bool pre = m->type == RAFT_MSG_PREVOTE;
    bool can_vote = r->vote == m->from || (r->vote == RAFT_NONE && r->lead == RAFT_NONE) ||
                    (pre && m->term > r->term);
    bool grant = can_vote && raft__log_up_to_date(r, m->index, m->log_term);
    struct raft_msg *o =
        raft__msg(r, pre ? RAFT_MSG_PREVOTE_RESP : RAFT_MSG_VOTE_RESP, m->from, true);
    if (!o)
        return RAFT_ENOMEM;
    o->reject = !grant;
    o->term = grant ? m->term : r->term;
    if (grant && !pre) {
        r->election_elapsed = 0;
        r->vote = m->from;
    }
    return 0;
}

int raft__handle_vote_resp(struct raft *r, const struct raft_msg *m)
{
    bool pre = m->type == RAFT_MSG_PREVOTE_RESP;
    if ((pre && r->role != RAFT_PRECANDIDATE) || (!pre && r->role != RAFT_CANDIDATE))
        return 0;
    int s = raft__pr_slot(r, m->from);
    if (s < 0 || r->prs[s].learner)
        return 0;
    if (r->votes[s] == 0)
        r->votes[s] = m->reject ? -1 : 1;
    int t = tally(r);
    if (t > 0)
        return on_won(r, pre, false);
    if (t < 0)
        raft__become_follower(r, r->term, RAFT_NONE);
    return 0;
}

int raft__tick_election(struct raft *r)
{
    r->election_elapsed++;
    if (raft__is_voter(&r->conf, r->id) && r->election_elapsed >= r->randomized_timeout) {
        r->election_elapsed = 0;
        return raft__campaign(r, r->cfg.pre_vote, false);
    }
    return 0;
}

int raft__tick_leader(struct raft *r)
{
    r->heartbeat_elapsed++;
    r->election_elapsed++;
    if (r->election_elapsed >= r->cfg.election_ticks) {
        r->election_elapsed = 0;
        if (r->cfg.check_quorum) {
            unsigned active = 0;
            for (unsigned i = 0; i < r->n_prs; i++) {
                struct raft_progress *p = &r->prs[i];
                if (!p->learner && (p->id == r->id || p->recent_active))
                    active++;
                if (p->id != r->id)
                    p->recent_active = false;
            }
            if (active < raft__quorum(r)) {
                raft__become_follower(r, r->term, RAFT_NONE);
                return 0;
            }
        }
        r->lead_transferee = RAFT_NONE; /* transfer timed out */
    }
    for (unsigned i = 0; i < r->n_prs; i++) {
        struct raft_progress *p = &r->prs[i];
        if (p->state == RAFT_PR_SNAPSHOT && ++p->snap_ticks >= r->cfg.election_ticks)
            raft__pr_become_probe(p);
    }
    if (r->heartbeat_elapsed >= r->cfg.heartbeat_ticks) {
        r->heartbeat_elapsed = 0;
        return raft__bcast_heartbeat(r, r->read_seq);
    }
    return 0;
}
