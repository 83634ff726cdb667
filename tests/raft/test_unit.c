/*
 * test_unit.c - unit tests for the raft core, one rule or feature each,
 * mirroring the Raft paper (Figure 2, §5.2-§5.4, §6, §9.6) and the thesis
 * (leadership transfer §3.10, single-server membership §4.1, ReadIndex §6.4).
 * Each test drives a small deterministic cluster from sim.c, injecting
 * hand-made messages where a rule needs a precise situation.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"

static struct sim *mk_opts(const struct sim_opts *o)
{
    struct sim *s = calloc(1, sizeof(*s));
    cr_assert(s);
    cr_assert_eq(sim_init(s, 42, o), 0, "%s", s->err);
    return s;
}

static struct sim *mk(unsigned voters, bool prevote, bool cq)
{
    struct sim_opts o;
    sim_opts_default(&o);
    o.n_voters = voters;
    o.n_spares = 2;
    o.pre_vote = prevote;
    o.check_quorum = cq;
    return mk_opts(&o);
}

static void done(struct sim *s)
{
    cr_assert(!s->failed, "invariant: %s", s->err);
    sim_free(s);
    free(s);
}

static struct raft *R(struct sim *s, raft_id id)
{
    return &s->nodes[id].r;
}

static void ticks(struct sim *s, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        cr_assert_eq(sim_tick(s), 0, "%s", s->err);
}

static raft_id leader(struct sim *s)
{
    raft_id l = sim_wait_leader(s, 200);
    cr_assert_neq(l, 0, "no leader elected: %s", s->err);
    return l;
}

static raft_id other(raft_id l, raft_id not_this, unsigned n)
{
    for (raft_id id = 1; id <= n; id++)
        if (id != l && id != not_this)
            return id;
    return 0;
}

static void inject(struct sim *s, struct raft_msg m)
{
    cr_assert_eq(sim_inject(s, &m), 0, "inject: %s", s->err);
}

static raft_term store_term(struct sim *s, raft_id id, raft_index i)
{
    raft_term t = 0;
    struct sim_store *st = &s->nodes[id].st;
    cr_assert_eq(st->vt.term(st->vt.ctx, i, &t), 0);
    return t;
}

static raft_index store_last(struct sim *s, raft_id id)
{
    struct sim_store *st = &s->nodes[id].st;
    return st->vt.last_index(st->vt.ctx);
}

static void commit_some(struct sim *s, raft_id l, unsigned n)
{
    raft_index idx = 0;
    for (unsigned i = 0; i < n; i++)
        cr_assert_eq(sim_propose(s, l, &idx), 0);
    for (int t = 0; t < 50 && s->nodes[l].sm_index < idx; t++)
        ticks(s, 1);
    cr_assert_geq(s->nodes[l].sm_index, idx, "entries not applied by the leader");
}

/* ---- elections (§5.2) ---- */

Test(raft_election, one_leader_elected)
{
    struct sim *s = mk(3, true, true);
    raft_id l = leader(s);
    unsigned leaders = 0;
    for (raft_id id = 1; id <= 3; id++)
        leaders += raft_role(R(s, id)) == RAFT_LEADER;
    cr_assert_eq(leaders, 1);
    cr_assert_geq(raft_current_term(R(s, l)), 1);
    done(s);
}

Test(raft_election, single_node_commits_and_reads)
{
    struct sim *s = mk(1, true, true);
    raft_id l = leader(s);
    cr_assert_eq(l, 1);
    commit_some(s, l, 5);
    cr_assert_eq(sim_read(s, l), 0);
    cr_assert_eq(s->stats_reads_ok, 1, "single voter answers reads at once");
    done(s);
}

/* Figure 2, RequestVote receiver: votedFor is null or candidateId. */
Test(raft_election, votes_once_per_term_and_persists_vote)
{
    struct sim *s = mk(3, false, false);
    struct raft_msg v = {.type = RAFT_MSG_VOTE, .from = 2, .to = 1, .term = 1};
    inject(s, v);
    struct raft_msg out;
    cr_assert_eq(sim_find(s, 1, 2, RAFT_MSG_VOTE_RESP, &out), 1);
    cr_assert(!out.reject);
    cr_assert_eq(s->nodes[1].st.hs.vote, 2, "vote persisted before the response");
    v.from = 3;
    inject(s, v);
    cr_assert_eq(sim_find(s, 1, 3, RAFT_MSG_VOTE_RESP, &out), 1);
    cr_assert(out.reject, "second candidate of the same term must be refused");
    /* a restart keeps the vote (only synced state survives) */
    sim_crash(s, 1);
    cr_assert_eq(sim_restart(s, 1), 0);
    sim_clear(s);
    inject(s, v);
    cr_assert_eq(sim_find(s, 1, 3, RAFT_MSG_VOTE_RESP, &out), 1);
    cr_assert(out.reject, "vote forgotten across restart");
    done(s);
}

/* §5.4.1: vote only for candidates at least as up-to-date. */
Test(raft_election, rejects_out_of_date_candidates)
{
    struct sim *s = mk(3, false, false);
    raft_id l = leader(s);
    commit_some(s, l, 3);
    raft_id f = other(l, 0, 3), c = other(l, f, 3);
    raft_index last = store_last(s, f);
    raft_term lt = store_term(s, f, last);
    raft_term t = raft_current_term(R(s, f));
    struct raft_msg out;
    /* lower last term, longer log */
    struct raft_msg v = {.type = RAFT_MSG_VOTE,
                         .from = c,
                         .to = f,
                         .term = t + 1,
                         .index = last + 10,
                         .log_term = lt - 1};
    inject(s, v);
    cr_assert_eq(sim_find(s, f, c, RAFT_MSG_VOTE_RESP, &out), 1);
    cr_assert(out.reject);
    /* same last term, shorter log */
    sim_clear(s);
    v.term = t + 2;
    v.index = last - 1;
    v.log_term = lt;
    inject(s, v);
    cr_assert_eq(sim_find(s, f, c, RAFT_MSG_VOTE_RESP, &out), 1);
    cr_assert(out.reject);
    /* equal logs: granted */
    sim_clear(s);
    v.term = t + 3;
    v.index = last;
    inject(s, v);
    cr_assert_eq(sim_find(s, f, c, RAFT_MSG_VOTE_RESP, &out), 1);
    cr_assert(!out.reject);
    done(s);
}

/* Figure 2, all servers: T > currentTerm -> follower; stale terms ignored. */
Test(raft_election, higher_term_steps_down_stale_term_ignored)
{
    struct sim *s = mk(3, true, true);
    raft_id l = leader(s);
    raft_id f = other(l, 0, 3);
    raft_term t = raft_current_term(R(s, l));
    sim_clear(s);
    struct raft_msg hb = {.type = RAFT_MSG_HEARTBEAT, .from = f, .to = l, .term = t - 1};
    inject(s, hb);
    cr_assert_eq(raft_role(R(s, l)), RAFT_LEADER, "stale message must not depose");
    struct raft_msg out;
    cr_assert_eq(sim_find(s, l, f, RAFT_MSG_APPEND_RESP, &out), 1);
    cr_assert_eq(out.term, t, "stale sender is told the current term");
    struct raft_msg r = {.type = RAFT_MSG_HEARTBEAT_RESP, .from = f, .to = l, .term = t + 1};
    inject(s, r);
    cr_assert_eq(raft_role(R(s, l)), RAFT_FOLLOWER);
    cr_assert_eq(raft_current_term(R(s, l)), t + 1);
    done(s);
}

/* §9.6: a partitioned node does not inflate terms and cannot disrupt. */
Test(raft_election, prevote_prevents_disruption)
{
    struct sim *s = mk(3, true, true);
    raft_id l = leader(s);
    raft_term t = raft_current_term(R(s, l));
    raft_id f = other(l, 0, 3);
    sim_isolate(s, f);
    ticks(s, 100);
    cr_assert_eq(raft_current_term(R(s, f)), t, "pre-vote must not bump the term");
    sim_heal(s);
    ticks(s, 30);
    cr_assert_eq(sim_leader(s), l);
    cr_assert_eq(raft_current_term(R(s, l)), t);
    done(s);
}

Test(raft_election, without_prevote_isolated_node_bumps_term)
{
    struct sim *s = mk(3, false, false);
    raft_id l = leader(s);
    raft_term t = raft_current_term(R(s, l));
    raft_id f = other(l, 0, 3);
    sim_isolate(s, f);
    ticks(s, 100);
    cr_assert_gt(raft_current_term(R(s, f)), t);
    done(s);
}

/* §6.2 check-quorum: an isolated leader steps down. */
Test(raft_election, check_quorum_steps_down)
{
    struct sim *s = mk(3, true, true);
    raft_id l = leader(s);
    sim_isolate(s, l);
    ticks(s, 25);
    cr_assert_neq(raft_role(R(s, l)), RAFT_LEADER);
    done(s);
}

Test(raft_election, without_check_quorum_isolated_leader_stays)
{
    struct sim *s = mk(3, true, false);
    raft_id l = leader(s);
    sim_isolate(s, l);
    ticks(s, 25);
    cr_assert_eq(raft_role(R(s, l)), RAFT_LEADER);
    done(s);
}

/* ---- replication (§5.3) and commitment (§5.4.2) ---- */

Test(raft_replication, entries_replicate_and_apply)
{
    struct sim *s = mk(5, true, true);
    raft_id l = leader(s);
    commit_some(s, l, 20);
    ticks(s, 3);
    for (raft_id id = 1; id <= 5; id++)
        cr_assert_eq(raft_commit_index(R(s, id)), raft_commit_index(R(s, l)));
    done(s);
}

/* §5.4.2 / Figure 8: never commit a previous-term entry by counting. */
Test(raft_replication, commits_only_current_term_by_counting)
{
    struct sim *s = mk(3, false, false);
    raft_id a = leader(s);
    commit_some(s, a, 2);
    raft_id b = other(a, 0, 3), c = other(a, b, 3);
    /* X reaches b only and is not known committed */
    sim_cut(s, a, c);
    sim_cut(s, b, a);
    sim_cut(s, c, a);
    raft_index k;
    cr_assert_eq(sim_propose(s, a, &k), 0);
    ticks(s, 2);
    cr_assert_eq(store_last(s, b), k);
    cr_assert_lt(raft_commit_index(R(s, a)), k);
    sim_crash(s, a);
    sim_heal(s);
    sim_isolate(s, b);
    sim_isolate(s, c);
    for (int i = 0; i < 40 && raft_role(R(s, b)) != RAFT_CANDIDATE; i++)
        ticks(s, 1);
    cr_assert_eq(raft_role(R(s, b)), RAFT_CANDIDATE);
    raft_term t = raft_current_term(R(s, b));
    struct raft_msg v = {.type = RAFT_MSG_VOTE_RESP, .from = c, .to = b, .term = t};
    inject(s, v);
    cr_assert_eq(raft_role(R(s, b)), RAFT_LEADER);
    cr_assert_eq(store_last(s, b), k + 1, "new leader appended its no-op");
    struct raft_msg ack = {.type = RAFT_MSG_APPEND_RESP, .from = c, .to = b, .term = t, .index = k};
    inject(s, ack);
    cr_assert_lt(raft_commit_index(R(s, b)), k, "previous-term entry committed by counting");
    ack.index = k + 1;
    inject(s, ack);
    cr_assert_eq(raft_commit_index(R(s, b)), k + 1);
    done(s);
}

/* Figure 2, AppendEntries receiver rule 3: delete the conflicting suffix. */
Test(raft_replication, follower_truncates_conflicting_suffix)
{
    struct sim *s = mk(3, false, false);
    static const char a[] = "a", b[] = "b", c[] = "c", z[] = "z";
    struct raft_entry e1[3] = {{2, 1, 0, a, 1}, {2, 2, 0, b, 1}, {2, 3, 0, c, 1}};
    struct raft_msg m = {.type = RAFT_MSG_APPEND,
                         .from = 1,
                         .to = 3,
                         .term = 2,
                         .entries = e1,
                         .n_entries = 3,
                         .commit = 1};
    inject(s, m);
    cr_assert_eq(store_last(s, 3), 3);
    struct raft_entry e2[1] = {{3, 2, 0, z, 1}};
    struct raft_msg m2 = {.type = RAFT_MSG_APPEND,
                          .from = 2,
                          .to = 3,
                          .term = 3,
                          .index = 1,
                          .log_term = 2,
                          .entries = e2,
                          .n_entries = 1,
                          .commit = 1};
    inject(s, m2);
    cr_assert_eq(store_last(s, 3), 2, "conflicting suffix not removed");
    cr_assert_eq(store_term(s, 3, 2), 3);
    struct raft_msg out;
    cr_assert_eq(sim_find(s, 3, 2, RAFT_MSG_APPEND_RESP, &out), 1);
    cr_assert(!out.reject);
    cr_assert_eq(out.index, 2);
    done(s);
}

/* Fast back-off: the rejection carries the follower's best guess. */
Test(raft_replication, reject_hint)
{
    struct sim *s = mk(3, false, false);
    static const char a[] = "a", b[] = "b";
    struct raft_entry e[2] = {{2, 1, 0, a, 1}, {3, 2, 0, b, 1}};
    struct raft_msg m = {
        .type = RAFT_MSG_APPEND, .from = 1, .to = 3, .term = 3, .entries = e, .n_entries = 2};
    inject(s, m);
    sim_clear(s);
    struct raft_msg p = {
        .type = RAFT_MSG_APPEND, .from = 1, .to = 3, .term = 3, .index = 10, .log_term = 3};
    inject(s, p);
    struct raft_msg out;
    cr_assert_eq(sim_find(s, 3, 1, RAFT_MSG_APPEND_RESP, &out), 1);
    cr_assert(out.reject);
    cr_assert_eq(out.index, 10);
    cr_assert_eq(out.reject_hint, 2);
    cr_assert_eq(out.hint_term, 3);
    sim_clear(s);
    p.log_term = 2; /* follower's term-3 entry cannot match: skip it */
    inject(s, p);
    cr_assert_eq(sim_find(s, 3, 1, RAFT_MSG_APPEND_RESP, &out), 1);
    cr_assert(out.reject);
    cr_assert_eq(out.reject_hint, 1);
    cr_assert_eq(out.hint_term, 2);
    done(s);
}

/* An append response that acknowledges entries the leader never had is dropped: believed,
 * it set the follower's match past the leader's log, and the next broadcast failed to read
 * that entry (RAFT_EUNAVAILABLE from raft_ready, which stops a member). */
Test(raft_replication, an_ack_past_the_last_entry_is_ignored)
{
    struct sim *s = mk(3, true, true);
    raft_id l = leader(s);
    commit_some(s, l, 2);
    raft_id f = other(l, 0, 3);
    raft_index last = raft_last_index(R(s, l));
    struct raft_msg m = {.type = RAFT_MSG_APPEND_RESP,
                         .from = f,
                         .to = l,
                         .term = raft_current_term(R(s, l)),
                         .index = last + 5};
    inject(s, m);
    commit_some(s, l, 2); /* the next broadcasts read the log: they must not fail */
    cr_assert_eq(raft_role(R(s, l)), RAFT_LEADER);
    done(s);
}

/* A snapshot whose configuration could not be ours (more members than RAFT_MAX_NODES, an id
 * 0, an id twice) is refused before it touches the log or the progress table. */
Test(raft_snapshot, a_snapshot_with_an_impossible_configuration_is_refused)
{
    struct sim *s = mk(3, true, true);
    raft_id l = leader(s);
    commit_some(s, l, 2);
    raft_id f = other(l, 0, 3);
    raft_index commit = raft_commit_index(R(s, f));
    struct raft_msg m = {
        .type = RAFT_MSG_SNAPSHOT, .from = l, .to = f, .term = raft_current_term(R(s, l))};
    m.snapshot.meta.index = commit + 100;
    m.snapshot.meta.term = m.term;
    uint64_t h = 0;
    m.snapshot.data = &h;
    m.snapshot.len = sizeof h;
    struct raft_conf *c = &m.snapshot.meta.conf;
    for (raft_id id = 1; id <= 9; id++) /* 9 voters and 8 learners: 17 > RAFT_MAX_NODES */
        c->voters[c->n_voters++] = id;
    for (raft_id id = 10; id <= 17; id++)
        c->learners[c->n_learners++] = id;
    cr_assert_eq(raft_step(R(s, f), &m), RAFT_ECORRUPT);
    c->n_learners = 0;
    c->voters[1] = c->voters[0]; /* an id twice */
    cr_assert_eq(raft_step(R(s, f), &m), RAFT_ECORRUPT);
    c->voters[1] = 0;
    cr_assert_eq(raft_step(R(s, f), &m), RAFT_ECORRUPT);
    c->voters[1] = 2;
    m.snapshot.meta.index = UINT64_MAX;
    cr_assert_eq(raft_step(R(s, f), &m), RAFT_ECORRUPT);
    cr_assert_eq(raft_commit_index(R(s, f)), commit, "the follower's log moved");
    cr_assert_eq(raft_configuration(R(s, f))->n_voters, 3);
    done(s);
}

/* raft_pending_snapshot names the snapshot a step accepted until a ready hands it out, and
 * a snapshot the follower ignores (not past its commit) leaves it unchanged: the member keeps
 * the file of the accepted message only (server/node/node_ready.c, step_inbox). */
Test(raft_snapshot, the_pending_snapshot_is_the_one_accepted)
{
    struct sim *s = mk(3, true, true);
    raft_id l = leader(s);
    commit_some(s, l, 2);
    raft_id f = other(l, 0, 3);
    raft_term t = 99;
    cr_assert_eq(raft_pending_snapshot(R(s, f), &t), 0);
    cr_assert_eq(t, 0);
    raft_index commit = raft_commit_index(R(s, f));
    struct raft_msg m = {
        .type = RAFT_MSG_SNAPSHOT, .from = l, .to = f, .term = raft_current_term(R(s, l))};
    uint64_t h = 0;
    m.snapshot.data = &h;
    m.snapshot.len = sizeof h;
    m.snapshot.meta.conf = *raft_configuration(R(s, l));
    m.snapshot.meta.index = commit + 10;
    m.snapshot.meta.term = m.term;
    cr_assert_eq(raft_step(R(s, f), &m), 0);
    cr_assert_eq(raft_pending_snapshot(R(s, f), &t), commit + 10);
    cr_assert_eq(t, m.term);
    m.snapshot.meta.index = commit + 5; /* below the commit the first one set: ignored */
    cr_assert_eq(raft_step(R(s, f), &m), 0);
    cr_assert_eq(raft_pending_snapshot(R(s, f), &t), commit + 10);
    sim_crash(s, f); /* the ready was never handed out: nothing to check on f */
    done(s);
}

/* A follower far behind on a divergent branch catches up quickly. */
Test(raft_replication, lagging_follower_catches_up)
{
    struct sim *s = mk(3, true, true);
    raft_id l = leader(s);
    raft_id f = other(l, 0, 3);
    sim_isolate(s, f);
    commit_some(s, l, 60);
    sim_heal(s);
    ticks(s, 20);
    cr_assert_eq(raft_applied_index(R(s, f)), raft_applied_index(R(s, l)));
    done(s);
}

/* Flow control: max in-flight appends and max bytes per append. */
Test(raft_replication, flow_control)
{
    struct sim_opts o;
    sim_opts_default(&o);
    o.max_inflight = 2;
    o.max_msg_bytes = 64;
    struct sim *s = mk_opts(&o);
    raft_id l = leader(s);
    commit_some(s, l, 1);
    raft_id f = other(l, 0, 3);
    sim_cut(s, f, l);
    sim_clear(s);
    static const char buf[20] = "twenty bytes payload";
    for (int i = 0; i < 12; i++)
        cr_assert_eq(raft_propose(R(s, l), buf, sizeof(buf), NULL), 0);
    cr_assert_eq(sim_process(s, l), 0);
    struct raft_msg out;
    cr_assert_eq(sim_find(s, l, f, RAFT_MSG_APPEND, &out), 2, "max_inflight exceeded");
    cr_assert_eq(out.n_entries, 3, "64-byte messages carry three 20-byte entries");
    done(s);
}

/* Heartbeats carry min(match, commit). */
Test(raft_replication, heartbeat_commit_bounded_by_match)
{
    struct sim *s = mk(3, true, true);
    raft_id l = leader(s);
    raft_id f = other(l, 0, 3);
    sim_cut(s, l, f);
    commit_some(s, l, 5);
    sim_heal(s);
    sim_cut(s, f, l);
    sim_clear(s);
    ticks(s, 1);
    struct raft_msg out;
    cr_assert_geq(sim_find(s, l, f, RAFT_MSG_HEARTBEAT, &out), 1);
    cr_assert_leq(out.commit, raft_peer_match(R(s, l), f));
    cr_assert_lt(out.commit, raft_commit_index(R(s, l)));
    done(s);
}

/* ---- proposals ---- */

Test(raft_propose, errors_off_leader)
{
    struct sim *s = mk(3, true, true);
    cr_assert_eq(raft_propose(R(s, 1), "x", 1, NULL), RAFT_ENOLEADER);
    cr_assert_eq(raft_read_index(R(s, 1), 1), RAFT_ENOLEADER);
    raft_id l = leader(s);
    raft_id f = other(l, 0, 3);
    cr_assert_eq(raft_propose(R(s, f), "x", 1, NULL), RAFT_ENOTLEADER);
    cr_assert_eq(raft_leader(R(s, f)), l, "follower names the leader to forward to");
    cr_assert_eq(raft_read_index(R(s, f), 1), RAFT_ENOTLEADER);
    done(s);
}

Test(raft_propose, uncommitted_bytes_bounded)
{
    struct sim_opts o;
    sim_opts_default(&o);
    o.max_uncommitted_bytes = 100;
    struct sim *s = mk_opts(&o);
    raft_id l = leader(s);
    commit_some(s, l, 1);
    sim_isolate(s, l);
    static const char buf[20] = "0123456789abcdefghi";
    int ok = 0, rv;
    while ((rv = raft_propose(R(s, l), buf, sizeof(buf), NULL)) == 0)
        ok++;
    cr_assert_eq(rv, RAFT_EBUSY);
    cr_assert_eq(ok, 5);
    cr_assert_eq(sim_process(s, l), 0);
    sim_heal(s);
    ticks(s, 5);
    cr_assert_eq(raft_propose(R(s, l), buf, sizeof(buf), NULL), 0, "bound released on commit");
    cr_assert_eq(sim_process(s, l), 0);
    done(s);
}

/* ---- ReadIndex (thesis §6.4) ---- */

Test(raft_read, needs_heartbeat_quorum)
{
    struct sim *s = mk(3, true, true);
    raft_id l = leader(s);
    commit_some(s, l, 2);
    sim_isolate(s, l);
    cr_assert_eq(sim_read(s, l), 0);
    ticks(s, 3);
    cr_assert_eq(s->stats_reads_ok, 0, "read served without a quorum");
    sim_heal(s);
    ticks(s, 3);
    cr_assert_eq(s->stats_reads_ok, 1);
    done(s);
}

Test(raft_read, new_leader_must_commit_first)
{
    struct sim *s = mk(3, false, false);
    sim_isolate(s, 1);
    for (int i = 0; i < 40 && raft_role(R(s, 1)) != RAFT_CANDIDATE; i++)
        ticks(s, 1);
    struct raft_msg v = {
        .type = RAFT_MSG_VOTE_RESP, .from = 2, .to = 1, .term = raft_current_term(R(s, 1))};
    inject(s, v);
    cr_assert_eq(raft_role(R(s, 1)), RAFT_LEADER);
    cr_assert_eq(raft_read_index(R(s, 1), 7), RAFT_EAGAIN);
    cr_assert_neq(raft_change_membership(R(s, 1), RAFT_CONF_ADD_LEARNER, 4, NULL), 0,
                  "config change before the leader committed in its term");
    done(s);
}

Test(raft_read, pending_reads_bounded_and_dropped_on_step_down)
{
    struct sim *s = mk(3, true, true);
    raft_id l = leader(s);
    commit_some(s, l, 1);
    sim_isolate(s, l);
    int ok = 0, rv;
    while ((rv = raft_read_index(R(s, l), 1000 + ok)) == 0)
        ok++;
    cr_assert_eq(rv, RAFT_EBUSY);
    cr_assert_eq(ok, 64); /* sim configures max_pending_reads = 64 */
    cr_assert_eq(sim_process(s, l), 0);
    ticks(s, 30);
    cr_assert_neq(raft_role(R(s, l)), RAFT_LEADER);
    sim_heal(s);
    ticks(s, 30);
    cr_assert_eq(s->stats_reads_ok, 0, "reads of a deposed leader must not complete");
    done(s);
}

/* ---- snapshots (§7) ---- */

Test(raft_snapshot, lagging_follower_gets_snapshot)
{
    struct sim *s = mk(3, true, true);
    raft_id l = leader(s);
    raft_id f = other(l, 0, 3);
    sim_isolate(s, f);
    commit_some(s, l, 30);
    cr_assert_eq(sim_compact(s, l), 0);
    raft_index si = s->nodes[l].st.snap.index;
    cr_assert_geq(si, 30);
    sim_heal(s);
    ticks(s, 20);
    cr_assert_geq(s->nodes[f].st.snap.index, si, "follower did not install the snapshot");
    cr_assert_eq(s->nodes[f].sm_index, s->nodes[l].sm_index);
    cr_assert_eq(s->nodes[f].sm_hash, s->nodes[l].sm_hash);
    /* restart keeps only the synced snapshot + log and catches up again */
    sim_crash(s, f);
    cr_assert_eq(sim_restart(s, f), 0);
    commit_some(s, l, 3);
    cr_assert_eq(s->nodes[f].sm_hash, s->nodes[l].sm_hash);
    done(s);
}

Test(raft_snapshot, compact_validates_index)
{
    struct sim *s = mk(1, true, true);
    raft_id l = leader(s);
    commit_some(s, l, 3);
    struct raft_snapshot_meta meta;
    cr_assert_eq(raft_compact(R(s, l), raft_applied_index(R(s, l)) + 1, &meta), RAFT_EINVAL);
    cr_assert_eq(raft_compact(R(s, l), raft_applied_index(R(s, l)), &meta), 0);
    cr_assert_eq(meta.index, raft_applied_index(R(s, l)));
    cr_assert_eq(meta.conf.n_voters, 1);
    done(s);
}

/* ---- leadership transfer (thesis §3.10) ---- */

Test(raft_transfer, transfers_leadership)
{
    struct sim *s = mk(3, true, true);
    raft_id l = leader(s);
    commit_some(s, l, 3);
    raft_id t = other(l, 0, 3);
    raft_term term = raft_current_term(R(s, l));
    cr_assert_eq(raft_transfer_leader(R(s, l), t), 0);
    cr_assert_eq(sim_process(s, l), 0);
    ticks(s, 5);
    cr_assert_eq(sim_leader(s), t);
    cr_assert_gt(raft_current_term(R(s, t)), term);
    done(s);
}

Test(raft_transfer, blocks_proposals_then_times_out)
{
    struct sim *s = mk(3, true, true);
    raft_id l = leader(s);
    commit_some(s, l, 1);
    raft_id t = other(l, 0, 3);
    sim_cut(s, l, t);
    commit_some(s, l, 1); /* t now lags */
    cr_assert_eq(raft_transferee(R(s, l)), RAFT_NONE);
    cr_assert_eq(raft_transfer_leader(R(s, l), t), 0);
    cr_assert_eq(sim_process(s, l), 0);
    cr_assert_eq(raft_transferee(R(s, l)), t, "the leader reports the transfer under way");
    cr_assert_eq(raft_transferee(R(s, t)), RAFT_NONE, "only a leader has a transferee");
    cr_assert_eq(raft_propose(R(s, l), "x", 1, NULL), RAFT_ETRANSFER);
    cr_assert_eq(raft_transfer_leader(R(s, l), 99), RAFT_EINVAL);
    ticks(s, 25);
    cr_assert_eq(sim_leader(s), l);
    cr_assert_eq(raft_transferee(R(s, l)), RAFT_NONE, "cleared when the transfer timed out");
    cr_assert_eq(raft_propose(R(s, l), "x", 1, NULL), 0, "transfer must time out");
    cr_assert_eq(sim_process(s, l), 0);
    done(s);
}

/* A peer whose message could not be sent stops receiving pipelined appends (probe: at most
 * one append per heartbeat) until it answers again; a follower may report harmlessly. */
Test(raft_progress, report_unreachable_stops_pipelining)
{
    struct sim *s = mk(3, true, true);
    raft_id l = leader(s);
    commit_some(s, l, 2);
    raft_id f = other(l, 0, 3);
    struct raft *r = R(s, l);
    int slot = -1;
    for (unsigned i = 0; i < r->n_prs; i++)
        if (r->prs[i].id == f)
            slot = (int)i;
    cr_assert_geq(slot, 0);
    cr_assert_eq(r->prs[slot].state, RAFT_PR_REPLICATE);
    cr_assert_eq(raft_report_unreachable(r, f), 0);
    cr_assert_eq(r->prs[slot].state, RAFT_PR_PROBE);
    cr_assert_eq(raft_report_unreachable(R(s, f), l), RAFT_ENOTLEADER);
    commit_some(s, l, 2); /* it answers: replication resumes and commits */
    cr_assert_eq(r->prs[slot].state, RAFT_PR_REPLICATE);
    done(s);
}

/* ---- membership (thesis §4.1) ---- */

Test(raft_membership, learner_catches_up_without_voting_then_promoted)
{
    struct sim *s = mk(3, true, true);
    raft_id l = leader(s);
    commit_some(s, l, 5);
    cr_assert_eq(sim_start(s, 4), 0);
    cr_assert_eq(raft_change_membership(R(s, l), RAFT_CONF_ADD_LEARNER, 4, NULL), 0);
    cr_assert_eq(sim_process(s, l), 0);
    cr_assert_eq(raft_change_membership(R(s, l), RAFT_CONF_ADD_LEARNER, 5, NULL), RAFT_ECONFPENDING,
                 "one change at a time");
    ticks(s, 10);
    cr_assert_eq(raft_configuration(R(s, l))->n_learners, 1);
    cr_assert_eq(s->nodes[4].sm_index, s->nodes[l].sm_index, "learner caught up");
    /* learners never campaign */
    raft_term t4 = raft_current_term(R(s, 4));
    sim_isolate(s, 4);
    ticks(s, 60);
    cr_assert_eq(raft_current_term(R(s, 4)), t4);
    cr_assert_eq(raft_role(R(s, 4)), RAFT_FOLLOWER);
    sim_heal(s);
    l = leader(s);
    /* leader + learner are not a quorum */
    for (raft_id id = 1; id <= 3; id++)
        if (id != l)
            sim_isolate(s, id);
    raft_index c0 = raft_commit_index(R(s, l));
    raft_index idx;
    cr_assert_eq(sim_propose(s, l, &idx), 0);
    ticks(s, 5);
    cr_assert_eq(raft_commit_index(R(s, l)), c0, "learner counted in quorum");
    sim_heal(s);
    l = leader(s);
    commit_some(s, l, 1);
    cr_assert_eq(raft_change_membership(R(s, l), RAFT_CONF_ADD_VOTER, 4, NULL), 0);
    cr_assert_eq(sim_process(s, l), 0);
    ticks(s, 10);
    cr_assert_eq(raft_configuration(R(s, l))->n_voters, 4);
    cr_assert_eq(raft_configuration(R(s, l))->n_learners, 0);
    done(s);
}

Test(raft_membership, removed_leader_steps_down)
{
    struct sim *s = mk(3, true, true);
    raft_id l = leader(s);
    commit_some(s, l, 2);
    cr_assert_eq(raft_change_membership(R(s, l), RAFT_CONF_REMOVE, l, NULL), 0);
    cr_assert_eq(sim_process(s, l), 0);
    ticks(s, 5);
    cr_assert_eq(s->nodes[l].status, SIM_GONE, "removed node applied its removal");
    raft_id nl = leader(s);
    cr_assert_neq(nl, l);
    cr_assert_eq(raft_configuration(R(s, nl))->n_voters, 2);
    commit_some(s, nl, 2);
    done(s);
}

Test(raft_membership, invalid_changes)
{
    struct sim *s = mk(3, true, true);
    raft_id l = leader(s);
    commit_some(s, l, 1);
    cr_assert_eq(raft_change_membership(R(s, l), RAFT_CONF_ADD_VOTER, l, NULL), RAFT_EINVAL);
    cr_assert_eq(raft_change_membership(R(s, l), RAFT_CONF_REMOVE, 6, NULL), RAFT_EINVAL);
    cr_assert_eq(raft_change_membership(R(s, l), 77, 4, NULL), RAFT_EINVAL);
    cr_assert_eq(raft_change_membership(R(s, other(l, 0, 3)), RAFT_CONF_ADD_LEARNER, 4, NULL),
                 RAFT_ENOTLEADER);
    done(s);
}

/* ---- API hygiene ---- */

Test(raft_api, strerror_names_every_code)
{
    for (int e = RAFT_ECORRUPT; e <= RAFT_EINVAL; e++)
        cr_assert_str_neq(raft_strerror(e), "unknown error", "code %d", e);
    cr_assert_str_eq(raft_strerror(-1), "unknown error");
    cr_assert_str_eq(raft_strerror(0), "ok");
}

Test(raft_api, init_validates_config)
{
    struct sim_store st;
    sim_store_init(&st);
    struct raft r;
    struct raft_config cfg;
    raft_config_default(&cfg);
    raft_id voters[] = {1, 2, 2};
    cfg.voters = voters;
    cfg.n_voters = 2;
    cfg.storage = &st.vt;
    cfg.id = 0;
    cr_assert_eq(raft_init(&r, &cfg), RAFT_EINVAL);
    cfg.id = 1;
    cfg.election_ticks = 1;
    cr_assert_eq(raft_init(&r, &cfg), RAFT_EINVAL);
    cfg.election_ticks = 10;
    cfg.n_voters = 3;
    cr_assert_eq(raft_init(&r, &cfg), RAFT_EINVAL, "duplicate voter");
    cfg.n_voters = 2;
    cfg.max_inflight = RAFT_MAX_INFLIGHT + 1;
    cr_assert_eq(raft_init(&r, &cfg), RAFT_EINVAL);
    cfg.max_inflight = 4;
    cr_assert_eq(raft_init(&r, &cfg), 0);
    struct raft_msg bad = {.type = RAFT_MSG_APPEND, .from = 2, .to = 3, .term = 1};
    cr_assert_eq(raft_step(&r, &bad), RAFT_EINVAL, "message for another node");
    raft_close(&r);
    sim_store_free(&st);
}

struct count_alloc {
    long calls, fail_after;
};

static void *counting_realloc(void *ctx, void *p, size_t n)
{
    struct count_alloc *a = ctx;
    if (n == 0) {
        free(p);
        return NULL;
    }
    if (a->fail_after >= 0 && a->calls >= a->fail_after)
        return NULL;
    a->calls++;
    return realloc(p, n);
}

static int run_single(struct count_alloc *ca, int proposals)
{
    struct sim_store st;
    sim_store_init(&st);
    struct raft r;
    struct raft_config cfg;
    raft_config_default(&cfg);
    raft_id voters[] = {1};
    cfg.id = 1;
    cfg.voters = voters;
    cfg.n_voters = 1;
    cfg.storage = &st.vt;
    struct raft_alloc al = {ca, counting_realloc};
    cfg.alloc = &al;
    int rv = raft_init(&r, &cfg);
    if (rv) {
        sim_store_free(&st);
        return rv;
    }
    for (int i = 0; i < 40 && rv == 0 && raft_role(&r) != RAFT_LEADER; i++) {
        rv = raft_tick(&r);
        while (rv == 0 && raft_has_ready(&r)) {
            struct raft_ready rd;
            if ((rv = raft_ready(&r, &rd)) == 0)
                rv = raft_advance(&r, &rd);
        }
    }
    for (int i = 0; rv == 0 && i < proposals; i++) {
        rv = raft_propose(&r, "p", 1, NULL);
        while (rv == 0 && raft_has_ready(&r)) {
            struct raft_ready rd;
            if ((rv = raft_ready(&r, &rd)) == 0)
                rv = raft_advance(&r, &rd);
        }
    }
    if (rv == RAFT_ENOMEM)
        cr_assert_eq(raft_propose(&r, "p", 1, NULL), RAFT_ENOMEM, "instance stays poisoned");
    raft_close(&r);
    sim_store_free(&st);
    return rv;
}

Test(raft_api, allocator_hook_and_enomem_poisoning)
{
    struct count_alloc ca = {0, -1};
    cr_assert_eq(run_single(&ca, 1000), 0);
    cr_assert_lt(ca.calls, 30, "steady state must reuse buffers (%ld allocations)", ca.calls);
    for (long k = 0; k < ca.calls; k++) {
        struct count_alloc f = {0, k};
        cr_assert_eq(run_single(&f, 100), RAFT_ENOMEM, "failing allocation %ld", k);
    }
}

Test(raft_api, deterministic_given_seed)
{
    struct sim *a = mk(5, true, true), *b = mk(5, true, true);
    for (int i = 0; i < 200; i++) {
        ticks(a, 1);
        ticks(b, 1);
        raft_id la = sim_leader(a), lb = sim_leader(b);
        cr_assert_eq(la, lb);
        if (la && i % 3 == 0) {
            cr_assert_eq(sim_propose(a, la, NULL), sim_propose(b, lb, NULL));
        }
    }
    for (raft_id id = 1; id <= 5; id++) {
        cr_assert_eq(raft_current_term(R(a, id)), raft_current_term(R(b, id)));
        cr_assert_eq(a->nodes[id].sm_hash, b->nodes[id].sm_hash);
    }
    done(a);
    done(b);
}
