/*
 * raft.c - instance lifecycle, input dispatch (tick/step/propose/transfer)
 * and accessors.
 *
 * Contract:
 *   - "If RPC request or response contains term T > currentTerm: set
 *     currentTerm = T, convert to follower" (Figure 2); requests with a
 *     stale term are ignored, except that a stale leader is told the new
 *     term (so check-quorum/pre-vote cannot leave it stranded).
 *   - (Pre-)vote requests are ignored while the node believes a leader is
 *     alive (check-quorum lease), unless caused by leadership transfer.
 *   - Proposals are accepted only by the leader; they are bounded by
 *     cfg.max_uncommitted_bytes and refused during a leadership transfer.
 *   - All allocation goes through cfg.alloc; RAFT_ENOMEM poisons.
 */
#include "internal.h"

#include <limits.h>

#include <stdlib.h>
#include <string.h>

static void *libc_realloc(void *ctx, void *p, size_t n)
{
    (void)ctx;
    if (n == 0) {
        free(p);
        return NULL;
    }
    return realloc(p, n);
}

static const struct raft_alloc libc_alloc = {NULL, libc_realloc};

void *raft__realloc(struct raft *r, void *p, size_t n)
{
    const struct raft_alloc *a = r->cfg.alloc ? r->cfg.alloc : &libc_alloc;
    return a->realloc(a->ctx, p, n);
}

int raft__grow(struct raft *r, void **v, size_t *cap, size_t want, size_t sz)
{
    if (want <= *cap)
        return 0;
    size_t nc = *cap ? *cap * 2 : 16;
    while (nc < want)
        nc *= 2;
    void *p = raft__realloc(r, *v, nc * sz);
    if (!p) {
        r->poisoned = 1;
        return RAFT_ENOMEM;
    }
    *v = p;
    *cap = nc;
    return 0;
}

void raft_config_default(struct raft_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->election_ticks = 10;
    cfg->heartbeat_ticks = 1;
    cfg->pre_vote = true;
    cfg->check_quorum = true;
    cfg->max_inflight = 64;
    cfg->max_msg_bytes = 1 << 20;
    cfg->max_uncommitted_bytes = 64u << 20;
    cfg->max_pending_reads = 1024;
    cfg->max_apply_bytes = 64u << 20;
}

static int validate(const struct raft_config *c)
{
    const struct raft_storage *st = c->storage;
    if (c->id == RAFT_NONE || !st || !st->initial_state || !st->first_index || !st->last_index ||
        !st->term || !st->entries || !st->snapshot)
        return RAFT_EINVAL;
    if (c->heartbeat_ticks < 1 || c->election_ticks <= c->heartbeat_ticks)
        return RAFT_EINVAL;
    if (c->max_inflight < 1 || c->max_inflight > RAFT_MAX_INFLIGHT)
        return RAFT_EINVAL;
    if (c->max_msg_bytes < 1 || c->max_pending_reads < 1)
        return RAFT_EINVAL;
    if (c->n_voters + c->n_learners > RAFT_MAX_NODES)
        return RAFT_EINVAL;
    if ((c->n_voters && !c->voters) || (c->n_learners && !c->learners))
        return RAFT_EINVAL;
    for (size_t i = 0; i < c->n_voters + c->n_learners; i++) {
        raft_id a = i < c->n_voters ? c->voters[i] : c->learners[i - c->n_voters];
        if (a == RAFT_NONE)
            return RAFT_EINVAL;
        for (size_t j = 0; j < i; j++) {
            raft_id b = j < c->n_voters ? c->voters[j] : c->learners[j - c->n_voters];
            if (a == b)
                return RAFT_EINVAL;
        }
    }
    return 0;
}

/* Apply configuration entries in (conf_index, committed] from the log. With the
 * storage's next_conf, only the configuration entries are read (O(their number));
 * without it, every entry of the range is read. */
static int replay_conf(struct raft *r)
{
    const struct raft_storage *st = r->cfg.storage;
    raft_index i = r->conf_index + 1;
    if (i < raft__log_first(r))
        i = raft__log_first(r);
    while (st->next_conf && i <= r->log.committed) {
        raft_index idx = 0;
        size_t n;
        int rv = st->next_conf(st->ctx, i, r->log.committed, &idx);
        if (rv)
            return rv;
        if (idx == 0)
            return 0;
        if (idx < i || idx > r->log.committed)
            return RAFT_ECORRUPT;
        r->pool.n = 0;
        if ((rv = raft__log_slice(r, idx, idx + 1, 1, &n)) != 0)
            return rv;
        if (n != 1 || r->pool.v[0].type != RAFT_ENTRY_CONF) {
            r->pool.n = 0;
            return RAFT_ECORRUPT;
        }
        rv = raft__conf_apply_entry(r, &r->pool.v[0]);
        r->pool.n = 0;
        if (rv)
            return rv;
        i = idx + 1;
    }
    while (i <= r->log.committed) {
        size_t n;
        r->pool.n = 0;
        int rv = raft__log_slice(r, i, r->log.committed + 1, 1 << 20, &n);
        if (rv)
            return rv;
        for (size_t k = 0; k < n; k++)
            if (r->pool.v[k].type == RAFT_ENTRY_CONF &&
                (rv = raft__conf_apply_entry(r, &r->pool.v[k])) != 0)
                return rv;
        i += n;
    }
    r->pool.n = 0;
    return 0;
}

int raft_init(struct raft *r, const struct raft_config *cfg)
{
    int rv = validate(cfg);
    if (rv)
        return rv;
    memset(r, 0, sizeof(*r));
    r->cfg = *cfg;
    r->cfg.voters = r->cfg.learners = NULL;
    r->cfg.n_voters = r->cfg.n_learners = 0;
    r->id = cfg->id;
    raft__prng_seed(r->prng, cfg->seed);
    r->reads = raft__realloc(r, NULL, cfg->max_pending_reads * sizeof(*r->reads));
    if (!r->reads)
        return RAFT_ENOMEM;
    const struct raft_storage *st = cfg->storage;
    struct raft_hard_state hs;
    memset(&hs, 0, sizeof(hs));
    if ((rv = st->initial_state(st->ctx, &hs)) != 0)
        goto err;
    struct raft_snapshot snap;
    memset(&snap, 0, sizeof(snap));
    rv = st->snapshot(st->ctx, &snap);
    if (rv && rv != RAFT_EUNAVAILABLE)
        goto err;
    raft__log_init(r);
    if (rv == 0 && snap.meta.index > 0) {
        if (!raft__conf_valid(&snap.meta.conf)) {
            rv = RAFT_ECORRUPT;
            goto err;
        }
        r->conf = snap.meta.conf;
        r->conf_index = snap.meta.index;
        r->log.applied = snap.meta.index;
    } else {
        for (size_t i = 0; i < cfg->n_voters; i++)
            r->conf.voters[r->conf.n_voters++] = cfg->voters[i];
        for (size_t i = 0; i < cfg->n_learners; i++)
            r->conf.learners[r->conf.n_learners++] = cfg->learners[i];
    }
    raft_index last = raft__log_last(r);
    if (hs.commit > last) {
        rv = RAFT_ECORRUPT;
        goto err;
    }
    /* the commit index need not be synced: never below the snapshot */
    if (hs.commit + 1 < raft__log_first(r))
        hs.commit = raft__log_first(r) - 1;
    r->term = hs.term;
    r->vote = hs.vote;
    r->log.committed = hs.commit;
    if (cfg->applied > r->log.applied)
        r->log.applied = cfg->applied < hs.commit ? cfg->applied : hs.commit;
    raft__conf_reset_progress(r);
    if ((rv = replay_conf(r)) != 0)
        goto err;
    raft__become_follower(r, r->term, RAFT_NONE);
    r->prev_hs = hs;
    r->prev_ss.leader = RAFT_NONE;
    r->prev_ss.role = RAFT_FOLLOWER;
    return 0;
err:
    raft_close(r);
    return rv;
}

void raft_close(struct raft *r)
{
    raft__realloc(r, r->reads, 0);
    raft__realloc(r, r->log.u.v, 0);
    raft__realloc(r, r->msgs.v, 0);
    raft__realloc(r, r->msgs_after.v, 0);
    raft__realloc(r, r->pool.v, 0);
    raft__realloc(r, r->rs.v, 0);
    r->reads = NULL;
    r->log.u.v = r->pool.v = NULL;
    r->msgs.v = r->msgs_after.v = NULL;
    r->rs.v = NULL;
    r->log.u.cap = r->msgs.cap = r->msgs_after.cap = r->pool.cap = r->rs.cap = 0;
}

static int done(struct raft *r, int rv)
{
    if (rv == RAFT_ENOMEM)
        r->poisoned = 1;
    return rv < 0 ? rv : 0;
}

int raft_tick(struct raft *r)
{
    if (r->poisoned)
        return RAFT_ENOMEM;
    if (r->role == RAFT_LEADER)
        return done(r, raft__tick_leader(r));
    return done(r, raft__tick_election(r));
}

static bool from_leader(int type)
{
    return type == RAFT_MSG_APPEND || type == RAFT_MSG_HEARTBEAT || type == RAFT_MSG_SNAPSHOT;
}

static int step_stale(struct raft *r, const struct raft_msg *m)
{
    struct raft_msg *o = NULL;
    if ((r->cfg.check_quorum || r->cfg.pre_vote) &&
        (m->type == RAFT_MSG_APPEND || m->type == RAFT_MSG_HEARTBEAT)) {
        o = raft__msg(r, RAFT_MSG_APPEND_RESP, m->from, true);
        if (!o)
            return RAFT_ENOMEM;
    } else if (m->type == RAFT_MSG_PREVOTE) {
        o = raft__msg(r, RAFT_MSG_PREVOTE_RESP, m->from, true);
        if (!o)
            return RAFT_ENOMEM;
        o->reject = true;
    }
    return 0;
}

static int step(struct raft *r, const struct raft_msg *m)
{
    int t = m->type;
    if (m->term > r->term) {
        if (t == RAFT_MSG_VOTE || t == RAFT_MSG_PREVOTE) {
            bool in_lease = r->cfg.check_quorum && r->lead != RAFT_NONE &&
                            r->election_elapsed < r->cfg.election_ticks;
            if (!m->transfer && in_lease)
                return 0;
        }
        if (t == RAFT_MSG_PREVOTE || (t == RAFT_MSG_PREVOTE_RESP && !m->reject)) {
            /* pre-vote never changes the term */
        } else {
            raft__become_follower(r, m->term, from_leader(t) ? m->from : RAFT_NONE);
        }
    } else if (m->term < r->term) {
        return step_stale(r, m);
    }
    if (t == RAFT_MSG_VOTE || t == RAFT_MSG_PREVOTE)
        return raft__handle_vote_req(r, m);
    switch (r->role) {
    case RAFT_LEADER:
        if (t == RAFT_MSG_APPEND_RESP)
            return raft__handle_append_resp(r, m);
        if (t == RAFT_MSG_HEARTBEAT_RESP)
            return raft__handle_heartbeat_resp(r, m);
        return 0;
    case RAFT_CANDIDATE:
    case RAFT_PRECANDIDATE:
        if (t == RAFT_MSG_VOTE_RESP || t == RAFT_MSG_PREVOTE_RESP)
            return raft__handle_vote_resp(r, m);
        if (!from_leader(t))
            return 0;
        raft__become_follower(r, m->term, m->from);
        break;
    default:
        break;
    }
    /* follower */
    switch (t) {
    case RAFT_MSG_APPEND:
        r->election_elapsed = 0;
        r->lead = m->from;
        return raft__handle_append(r, m);
    case RAFT_MSG_HEARTBEAT:
        r->election_elapsed = 0;
        r->lead = m->from;
        return raft__handle_heartbeat(r, m);
    case RAFT_MSG_SNAPSHOT:
        r->election_elapsed = 0;
        r->lead = m->from;
        return raft__handle_snapshot(r, m);
    case RAFT_MSG_TIMEOUT_NOW:
        return raft__campaign(r, false, true);
    default:
        return 0;
    }
}

int raft_step(struct raft *r, const struct raft_msg *m)
{
    if (r->poisoned)
        return RAFT_ENOMEM;
    if (m->to != r->id || m->from == RAFT_NONE || m->from == r->id)
        return RAFT_EINVAL;
    if (m->type < RAFT_MSG_APPEND || m->type > RAFT_MSG_TIMEOUT_NOW)
        return RAFT_EINVAL;
    return done(r, step(r, m));
}

static int leader_check(const struct raft *r)
{
    if (r->poisoned)
        return RAFT_ENOMEM;
    if (r->role != RAFT_LEADER)
        return r->lead == RAFT_NONE ? RAFT_ENOLEADER : RAFT_ENOTLEADER;
    return 0;
}

int raft_propose(struct raft *r, const void *data, size_t len, raft_index *index)
{
    int rv = leader_check(r);
    if (rv)
        return rv;
    if (r->lead_transferee != RAFT_NONE)
        return RAFT_ETRANSFER;
    size_t max = r->cfg.max_uncommitted_bytes;
    if (max && r->uncommitted_bytes > 0 && r->uncommitted_bytes + len > max)
        return RAFT_EBUSY;
    return done(r, raft__append_local(r, RAFT_ENTRY_NORMAL, data, len, index));
}

int raft_transfer_leader(struct raft *r, raft_id to)
{
    int rv = leader_check(r);
    if (rv)
        return rv;
    if (to == r->id)
        return 0;
    if (!raft__is_voter(&r->conf, to))
        return RAFT_EINVAL;
    if (r->lead_transferee == to)
        return 0;
    r->lead_transferee = to;
    r->election_elapsed = 0;
    struct raft_progress *p = raft__pr_get(r, to);
    if (p->match == raft__log_last(r)) {
        if (!raft__msg(r, RAFT_MSG_TIMEOUT_NOW, to, false))
            return done(r, RAFT_ENOMEM);
        return 0;
    }
    return done(r, raft__send_append(r, p, true));
}

int raft_report_snapshot(struct raft *r, raft_id id, bool failed)
{
    int rv = leader_check(r);
    if (rv)
        return rv;
    struct raft_progress *p = raft__pr_get(r, id);
    if (!p || p->state != RAFT_PR_SNAPSHOT)
        return 0;
    if (failed)
        p->pending_snap = 0;
    raft__pr_become_probe(p);
    return 0;
}

int raft_report_unreachable(struct raft *r, raft_id id)
{
    int rv = leader_check(r);
    if (rv)
        return rv;
    struct raft_progress *p = raft__pr_get(r, id);
    if (p && p->state == RAFT_PR_REPLICATE)
        raft__pr_become_probe(p); /* stop pipelining; probe again on the next heartbeat */
    return 0;
}

int raft_compact(struct raft *r, raft_index index, struct raft_snapshot_meta *meta)
{
    if (r->poisoned)
        return RAFT_ENOMEM;
    if (index > r->log.applied || index < r->conf_index || index == 0)
        return RAFT_EINVAL;
    raft_term t;
    int rv = raft__log_term(r, index, &t);
    if (rv)
        return rv;
    meta->index = index;
    meta->term = t;
    meta->conf = r->conf;
    return 0;
}

raft_id raft_leader(const struct raft *r)
{
    return r->lead;
}

unsigned raft_ticks_to_election(const struct raft *r)
{
    if (r->role == RAFT_LEADER)
        return UINT_MAX;
    if (r->election_elapsed + 1 >= r->randomized_timeout)
        return 0;
    return r->randomized_timeout - r->election_elapsed - 1;
}

raft_id raft_transferee(const struct raft *r)
{
    return r->role == RAFT_LEADER ? r->lead_transferee : RAFT_NONE;
}

int raft_role(const struct raft *r)
{
    return r->role;
}

raft_term raft_current_term(const struct raft *r)
{
    return r->term;
}

raft_index raft_commit_index(const struct raft *r)
{
    return r->log.committed;
}

raft_index raft_applied_index(const struct raft *r)
{
    return r->log.applied;
}

raft_index raft_last_index(const struct raft *r)
{
    return raft__log_last(r);
}

raft_index raft_pending_snapshot(const struct raft *r, raft_term *term)
{
    if (!r->log.has_snap) {
        *term = 0;
        return 0;
    }
    *term = r->log.snap.meta.term;
    return r->log.snap.meta.index;
}

const struct raft_conf *raft_configuration(const struct raft *r)
{
    return &r->conf;
}

raft_index raft_peer_match(const struct raft *r, raft_id id)
{
    int i = raft__pr_slot(r, id);
    if (r->role != RAFT_LEADER || i < 0)
        return 0;
    return r->prs[i].match;
}
