/*
 * The real raft core over kv_raftlog: a 3-member in-process cluster whose messages go through
 * the codec (msg_codec) and whose every ready is one LMDB write txn (append + hard state),
 * then rotate -> advance -> end_cycle, as the driver in server/node does it. Members are
 * restarted from their LMDB environments and must recover term, vote, commit and log.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "raftlog/msg_codec.h"
#include "raftlog/raftlog.h"
#include "rl_env.h"

#define N 3

struct wire {
    raft_id to;
    uint8_t *buf;
    size_t len;
};

struct node {
    raft_id id;
    bool up;
    unsigned incarnation;
    rl_env e;
    kv_raftlog *l;
    struct raft r;
    /* decoded messages and proposal buffers: valid until the next raft_advance */
    kv_raft_msg_owned *msgs;
    size_t n_msgs, cap_msgs;
    void **bufs;
    size_t n_bufs, cap_bufs;
    /* state machine: applied index, count and chain hash of the proposals applied */
    raft_index sm_index;
    size_t sm_count;
    uint64_t sm_hash;
};

struct cluster {
    struct node n[N + 1];
    struct wire *q;
    size_t nq, capq;
    size_t proposed;
};

static void *grow(void *p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return p;
    size_t c = *cap ? *cap * 2 : 16;
    while (c < need)
        c *= 2;
    p = realloc(p, c * elem);
    cr_assert_not_null(p);
    *cap = c;
    return p;
}

static void send_all(struct cluster *c, const struct raft_msg *m, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        c->q = grow(c->q, &c->capq, c->nq + 1, sizeof *c->q);
        struct wire *w = &c->q[c->nq++];
        w->to = m[i].to;
        cr_assert_eq(kv_raft_msg_encode(&m[i], &w->buf, &w->len), 0);
    }
}

static void release_keeps(struct node *n)
{
    for (size_t i = 0; i < n->n_msgs; i++)
        kv_raft_msg_free(&n->msgs[i]);
    n->n_msgs = 0;
    for (size_t i = 0; i < n->n_bufs; i++)
        free(n->bufs[i]);
    n->n_bufs = 0;
}

static uint64_t chain(uint64_t h, const void *p, size_t len)
{
    const uint8_t *b = p;
    h ^= 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < len; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static void handle_ready(struct cluster *c, struct node *n)
{
    while (raft_has_ready(&n->r)) {
        struct raft_ready rd;
        cr_assert_eq(raft_ready(&n->r, &rd), 0);
        send_all(c, rd.msgs, rd.n_msgs);
        MDB_txn *txn;
        cr_assert_eq(mdb_txn_begin(n->e.env, NULL, 0, &txn), 0);
        if (rd.has_snapshot)
            cr_assert_eq(kv_raftlog_set_snapshot(n->l, txn, &rd.snapshot.meta), 0);
        cr_assert_eq(kv_raftlog_append(n->l, txn, rd.entries, rd.n_entries), 0);
        if (rd.hs_changed)
            cr_assert_eq(kv_raftlog_set_hard_state(n->l, txn, &rd.hs), 0);
        cr_assert_eq(mdb_txn_commit(txn), 0);
        kv_raftlog_rotate(n->l);
        send_all(c, rd.msgs_after, rd.n_msgs_after);
        for (size_t i = 0; i < rd.n_committed; i++) {
            const struct raft_entry *e = &rd.committed[i];
            cr_assert_eq(e->index, n->sm_index + 1, "node %llu applies %llu after %llu",
                         (unsigned long long)n->id, (unsigned long long)e->index,
                         (unsigned long long)n->sm_index);
            n->sm_index = e->index;
            if (e->type == RAFT_ENTRY_NORMAL && e->len) {
                n->sm_hash = chain(n->sm_hash, e->data, e->len);
                n->sm_count++;
            }
        }
        cr_assert_eq(raft_advance(&n->r, &rd), 0);
        kv_raftlog_end_cycle(n->l);
        release_keeps(n);
        cr_assert_eq(kv_raftlog_error(n->l), 0);
    }
}

static void node_start(struct node *n)
{
    struct raft_config cfg;
    static const raft_id voters[N] = {1, 2, 3};
    cr_assert_eq(kv_raftlog_open(&n->l, n->e.env), 0);
    raft_config_default(&cfg);
    cfg.id = n->id;
    cfg.voters = voters;
    cfg.n_voters = N;
    cfg.election_ticks = 10;
    cfg.heartbeat_ticks = 1;
    cfg.seed = n->id * 7919 + n->incarnation++;
    cfg.storage = kv_raftlog_storage(n->l);
    cfg.applied = 0; /* the test's state machine is volatile: replay everything */
    cr_assert_eq(raft_init(&n->r, &cfg), 0);
    kv_raftlog_end_cycle(n->l);
    n->sm_index = 0;
    n->sm_count = 0;
    n->sm_hash = 0;
    n->up = true;
}

/* Crash: everything not in LMDB is lost. */
static void node_stop(struct node *n)
{
    raft_close(&n->r);
    release_keeps(n);
    kv_raftlog_close(n->l);
    n->l = NULL;
    n->up = false;
}

static void cluster_init(struct cluster *c)
{
    memset(c, 0, sizeof *c);
    for (raft_id i = 1; i <= N; i++) {
        c->n[i].id = i;
        rl_env_init(&c->n[i].e);
        cr_assert_eq(kv_raftlog_open(&c->n[i].l, c->n[i].e.env), 0);
        cr_assert_eq(kv_raftlog_is_empty(c->n[i].l), 1);
        kv_raftlog_close(c->n[i].l);
        node_start(&c->n[i]);
    }
}

static void cluster_fini(struct cluster *c)
{
    for (raft_id i = 1; i <= N; i++) {
        if (c->n[i].up)
            node_stop(&c->n[i]);
        free(c->n[i].msgs);
        free(c->n[i].bufs);
        rl_env_fini(&c->n[i].e);
    }
    for (size_t i = 0; i < c->nq; i++)
        free(c->q[i].buf);
    free(c->q);
}

/* One round: tick every member, deliver what is on the wire, handle readies. */
static void round_(struct cluster *c, bool tick)
{
    for (raft_id i = 1; i <= N; i++)
        if (c->n[i].up) {
            if (tick)
                cr_assert_eq(raft_tick(&c->n[i].r), 0);
            handle_ready(c, &c->n[i]);
        }
    size_t nq = c->nq;
    struct wire *q = c->q;
    c->q = NULL;
    c->nq = c->capq = 0;
    for (size_t k = 0; k < nq; k++) {
        struct node *n = &c->n[q[k].to];
        cr_assert(q[k].to >= 1 && q[k].to <= N);
        if (n->up) {
            n->msgs = grow(n->msgs, &n->cap_msgs, n->n_msgs + 1, sizeof *n->msgs);
            kv_raft_msg_owned *om = &n->msgs[n->n_msgs++];
            cr_assert_eq(kv_raft_msg_decode(q[k].buf, q[k].len, 4096, om), 0);
            cr_assert_eq(raft_step(&n->r, &om->msg), 0);
        }
        free(q[k].buf);
    }
    free(q);
    for (raft_id i = 1; i <= N; i++)
        if (c->n[i].up)
            handle_ready(c, &c->n[i]);
}

static struct node *leader(struct cluster *c)
{
    for (raft_id i = 1; i <= N; i++)
        if (c->n[i].up && raft_role(&c->n[i].r) == RAFT_LEADER)
            return &c->n[i];
    return NULL;
}

static struct node *elect(struct cluster *c)
{
    for (int r = 0; r < 2000; r++) {
        struct node *l = leader(c);
        if (l) {
            bool all = true;
            for (raft_id i = 1; i <= N; i++)
                if (c->n[i].up && raft_leader(&c->n[i].r) != l->id)
                    all = false;
            if (all)
                return l;
        }
        round_(c, true);
    }
    cr_assert_fail("no leader elected");
    return NULL;
}

/* Proposes `count` more entries (batches of 50 per round) and runs until every member that
 * is up applied all of them. */
static void propose(struct cluster *c, size_t count)
{
    size_t target = c->proposed + count;
    for (int r = 0; r < 20000; r++) {
        struct node *l = elect(c);
        for (int k = 0; k < 50 && c->proposed < target; k++) {
            char *b = malloc(32);
            cr_assert_not_null(b);
            int len = snprintf(b, 32, "put-%zu", c->proposed);
            int rc = raft_propose(&l->r, b, (size_t)len, NULL);
            if (rc) {
                free(b);
                break;
            }
            l->bufs = grow(l->bufs, &l->cap_bufs, l->n_bufs + 1, sizeof *l->bufs);
            l->bufs[l->n_bufs++] = b;
            c->proposed++;
        }
        round_(c, (r % 4) == 0);
        bool done = c->proposed == target;
        for (raft_id i = 1; i <= N; i++)
            if (c->n[i].up && c->n[i].sm_count < target)
                done = false;
        if (done)
            return;
    }
    cr_assert_fail("proposals did not commit");
}

static void assert_same_state(struct cluster *c)
{
    for (raft_id i = 2; i <= N; i++) {
        cr_assert_eq(c->n[i].sm_count, c->n[1].sm_count);
        cr_assert_eq(c->n[i].sm_hash, c->n[1].sm_hash, "state of %llu differs",
                     (unsigned long long)i);
    }
}

struct saved {
    struct raft_hard_state hs;
    raft_index last;
    raft_term last_term;
};

/* Stops n after checking that what is stored is what raft holds. */
static struct saved stop_checked(struct node *n)
{
    struct saved s;
    const struct raft_storage *st = kv_raftlog_storage(n->l);
    cr_assert_eq(st->initial_state(st->ctx, &s.hs), 0);
    cr_assert_eq(s.hs.term, raft_current_term(&n->r));
    cr_assert_eq(s.hs.vote, n->r.vote); /* white box: no accessor for the vote */
    cr_assert_eq(s.hs.commit, raft_commit_index(&n->r));
    s.last = raft_last_index(&n->r);
    cr_assert_eq(st->last_index(st->ctx), s.last);
    cr_assert_eq(st->term(st->ctx, s.last, &s.last_term), 0);
    kv_raftlog_end_cycle(n->l);
    node_stop(n);
    return s;
}

static void check_recovered(struct node *n, const struct saved *s)
{
    struct raft_hard_state hs;
    const struct raft_storage *st = kv_raftlog_storage(n->l);
    raft_term t;
    cr_assert_eq(kv_raftlog_is_empty(n->l), 0);
    cr_assert_eq(st->initial_state(st->ctx, &hs), 0);
    cr_assert(hs.term == s->hs.term && hs.vote == s->hs.vote && hs.commit == s->hs.commit);
    cr_assert_eq(raft_current_term(&n->r), s->hs.term);
    cr_assert_eq(n->r.vote, s->hs.vote);
    cr_assert_eq(raft_commit_index(&n->r), s->hs.commit);
    cr_assert_eq(raft_last_index(&n->r), s->last);
    cr_assert_eq(st->term(st->ctx, s->last, &t), 0);
    cr_assert_eq(t, s->last_term);
    kv_raftlog_end_cycle(n->l);
}

Test(raftlog_cluster, elect_propose_restart_recover, .timeout = 240)
{
    struct cluster c;
    cluster_init(&c);
    struct node *l = elect(&c);
    propose(&c, 1000);
    assert_same_state(&c);
    cr_assert_geq(raft_commit_index(&l->r), 1000);

    /* crash a follower; the others go on; it restarts from LMDB and catches up */
    struct node *f = &c.n[l->id % N + 1];
    struct saved s = stop_checked(f);
    cr_assert_geq(s.hs.commit, 1000);
    propose(&c, 200);
    rl_env_reopen(&f->e);
    node_start(f);
    check_recovered(f, &s);
    propose(&c, 10);
    assert_same_state(&c);
    cr_assert_eq(c.n[1].sm_count, 1210);

    /* crash every member at once (the leader included), restart all from LMDB */
    struct saved all[N + 1];
    for (raft_id i = 1; i <= N; i++)
        all[i] = stop_checked(&c.n[i]);
    for (size_t k = 0; k < c.nq; k++) /* what was on the wire is lost */
        free(c.q[k].buf);
    c.nq = 0;
    for (raft_id i = 1; i <= N; i++) {
        rl_env_reopen(&c.n[i].e);
        node_start(&c.n[i]);
        check_recovered(&c.n[i], &all[i]);
    }
    l = elect(&c);
    cr_assert_gt(raft_current_term(&l->r), all[l->id].hs.term);
    propose(&c, 100);
    assert_same_state(&c);
    cr_assert_eq(c.n[1].sm_count, 1310);
    cluster_fini(&c);
}
