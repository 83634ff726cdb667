/*
 * membership.c - single-server membership changes and learners.
 *
 * Contract:
 *   - "Cluster membership changes are restricted to adding or removing a
 *     single server at a time" (thesis §4.1); each is a RAFT_ENTRY_CONF
 *     entry whose 9-byte payload (op, id little-endian) is encoded here.
 *   - A change takes effect when committed and applied (raft_advance), on
 *     every node independently; the leader refuses a new change while one is
 *     pending (pending_conf_index > applied) and until it has committed an
 *     entry of its own term.
 *   - Learners receive the log but do not vote and are not counted in any
 *     quorum; ADD_VOTER of a learner promotes it.  Demotion is not supported.
 *   - A node removed from the configuration stops campaigning; a removed
 *     leader steps down.
 */
#include "internal.h"

#include <string.h>

static bool in_list(const raft_id *l, uint32_t n, raft_id id)
{
    for (uint32_t i = 0; i < n; i++)
        if (l[i] == id)
            return true;
    return false;
}

static void list_remove(raft_id *l, uint32_t *n, raft_id id)
{
    for (uint32_t i = 0; i < *n; i++)
        if (l[i] == id) {
            l[i] = l[--*n];
            return;
        }
}

bool raft__is_voter(const struct raft_conf *c, raft_id id)
{
    return in_list(c->voters, c->n_voters, id);
}

bool raft__is_learner(const struct raft_conf *c, raft_id id)
{
    return in_list(c->learners, c->n_learners, id);
}

bool raft__conf_valid(const struct raft_conf *c)
{
    if (c->n_voters > RAFT_MAX_NODES || c->n_learners > RAFT_MAX_NODES ||
        c->n_voters + c->n_learners > RAFT_MAX_NODES)
        return false;
    for (uint32_t i = 0; i < c->n_voters + c->n_learners; i++) {
        raft_id a = i < c->n_voters ? c->voters[i] : c->learners[i - c->n_voters];
        if (a == RAFT_NONE)
            return false;
        for (uint32_t j = 0; j < i; j++)
            if ((j < c->n_voters ? c->voters[j] : c->learners[j - c->n_voters]) == a)
                return false;
    }
    return true;
}

unsigned raft__quorum(const struct raft *r)
{
    return r->conf.n_voters / 2 + 1;
}

void raft__conf_reset_progress(struct raft *r)
{
    struct raft_progress old[RAFT_MAX_NODES];
    unsigned n_old = r->n_prs;
    memcpy(old, r->prs, sizeof(old[0]) * n_old);
    raft_index next = raft__log_last(r) + 1;
    r->n_prs = 0;
    for (int pass = 0; pass < 2; pass++) {
        const raft_id *l = pass == 0 ? r->conf.voters : r->conf.learners;
        uint32_t n = pass == 0 ? r->conf.n_voters : r->conf.n_learners;
        for (uint32_t i = 0; i < n; i++) {
            struct raft_progress *p = &r->prs[r->n_prs++];
            unsigned j;
            for (j = 0; j < n_old; j++)
                if (old[j].id == l[i])
                    break;
            if (j < n_old)
                *p = old[j];
            else
                raft__pr_reset(p, l[i], next, pass == 1);
            p->learner = pass == 1;
        }
    }
    memset(r->votes, 0, sizeof(r->votes));
}

void raft__conf_set(struct raft *r, const struct raft_conf *c, raft_index at)
{
    r->conf = *c;
    r->conf_index = at;
    raft__conf_reset_progress(r);
}

int raft_conf_change_decode(const struct raft_entry *e, int *op, raft_id *id)
{
    if (e->type != RAFT_ENTRY_CONF || e->len != 9)
        return RAFT_ECORRUPT;
    const uint8_t *b = e->data;
    raft_id v = 0;
    for (int i = 8; i >= 1; i--)
        v = (v << 8) | b[i];
    if (b[0] < RAFT_CONF_ADD_VOTER || b[0] > RAFT_CONF_REMOVE || v == RAFT_NONE)
        return RAFT_ECORRUPT;
    *op = b[0];
    *id = v;
    return 0;
}

int raft__conf_apply_entry(struct raft *r, const struct raft_entry *e)
{
    int op;
    raft_id id;
    if (e->index <= r->conf_index)
        return 0; /* already applied (replay after restart) */
    if (raft_conf_change_decode(e, &op, &id))
        return RAFT_ECORRUPT;
    struct raft_conf *c = &r->conf;
    uint32_t total = c->n_voters + c->n_learners;
    switch (op) {
    case RAFT_CONF_ADD_VOTER:
        if (raft__is_voter(c, id))
            break;
        if (raft__is_learner(c, id))
            list_remove(c->learners, &c->n_learners, id);
        else if (total >= RAFT_MAX_NODES)
            break;
        c->voters[c->n_voters++] = id;
        break;
    case RAFT_CONF_ADD_LEARNER:
        if (raft__is_voter(c, id) || raft__is_learner(c, id) || total >= RAFT_MAX_NODES)
            break;
        c->learners[c->n_learners++] = id;
        break;
    case RAFT_CONF_REMOVE:
        list_remove(c->voters, &c->n_voters, id);
        list_remove(c->learners, &c->n_learners, id);
        break;
    }
    r->conf_index = e->index;
    raft__conf_reset_progress(r);
    if (r->role == RAFT_LEADER) {
        if (!raft__is_voter(c, r->id)) {
            raft__become_follower(r, r->term, RAFT_NONE);
            return 0;
        }
        if (r->lead_transferee != RAFT_NONE && !raft__is_voter(c, r->lead_transferee))
            r->lead_transferee = RAFT_NONE;
        if (raft__maybe_commit(r))
            r->pending_bcast = true;
    }
    return 0;
}

int raft_change_membership(struct raft *r, int op, raft_id id, raft_index *index)
{
    if (r->poisoned)
        return RAFT_ENOMEM;
    if (r->role != RAFT_LEADER)
        return r->lead == RAFT_NONE ? RAFT_ENOLEADER : RAFT_ENOTLEADER;
    if (r->lead_transferee != RAFT_NONE)
        return RAFT_ETRANSFER;
    if (id == RAFT_NONE)
        return RAFT_EINVAL;
#if RAFT_MUTATION != MUT_NO_CONF_WAIT
    if (r->pending_conf_index > r->log.applied)
        return RAFT_ECONFPENDING;
    raft_term ct = 0;
    if (raft__log_term(r, r->log.committed, &ct) != 0 || ct != r->term)
        return RAFT_EAGAIN;
#endif
    if (r->conf_buf_used)
        return RAFT_EBUSY;
    const struct raft_conf *c = &r->conf;
    uint32_t total = c->n_voters + c->n_learners;
    switch (op) {
    case RAFT_CONF_ADD_VOTER:
        if (raft__is_voter(c, id))
            return RAFT_EINVAL;
        if (!raft__is_learner(c, id) && total >= RAFT_MAX_NODES)
            return RAFT_EBUSY;
        break;
    case RAFT_CONF_ADD_LEARNER:
        if (raft__is_voter(c, id) || raft__is_learner(c, id))
            return RAFT_EINVAL;
        if (total >= RAFT_MAX_NODES)
            return RAFT_EBUSY;
        break;
    case RAFT_CONF_REMOVE:
        if (!raft__is_voter(c, id) && !raft__is_learner(c, id))
            return RAFT_EINVAL;
        if (raft__is_voter(c, id) && c->n_voters == 1)
            return RAFT_EINVAL;
        break;
    default:
        return RAFT_EINVAL;
    }
    uint8_t *b = r->conf_buf;
    b[0] = (uint8_t)op;
    for (int i = 1; i <= 8; i++)
        b[i] = (uint8_t)(id >> (8 * (i - 1)));
    raft_index idx;
    int rv = raft__append_local(r, RAFT_ENTRY_CONF, b, 9, &idx);
    if (rv)
        return rv;
    r->conf_buf_used = true;
    r->pending_conf_index = idx;
    if (index)
        *index = idx;
    return 0;
}
