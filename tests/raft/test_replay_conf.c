/*
 * test_replay_conf.c - raft_init's replay of configuration entries (raft.h next_conf).
 *
 * An in-memory storage holds a hand-made log (normal entries of DATA bytes and
 * configuration changes: add voter, add learner, promote, remove), a hard state and
 * an optional snapshot; it counts what `entries` hands out.  The same log is opened
 * with and without next_conf: the configurations after raft_init must be identical,
 * and with next_conf raft_init must read the configuration entries only.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include <raft/raft.h>

#define MAXE 256
#define DATA 64

struct mstore {
    struct raft_hard_state hs;
    struct raft_snapshot_meta snap;
    struct raft_entry e[MAXE]; /* e[k].index == snap.index + 1 + k */
    uint8_t buf[MAXE][DATA];
    size_t n;
    size_t reads, bytes, conf_calls; /* entries handed out by `entries`, their bytes */
    struct raft_storage vt;
};

static int m_initial(void *ctx, struct raft_hard_state *hs)
{
    *hs = ((struct mstore *)ctx)->hs;
    return 0;
}

static raft_index m_first(void *ctx)
{
    return ((struct mstore *)ctx)->snap.index + 1;
}

static raft_index m_last(void *ctx)
{
    struct mstore *m = ctx;
    return m->snap.index + m->n;
}

static int m_term(void *ctx, raft_index i, raft_term *t)
{
    struct mstore *m = ctx;
    if (i < m->snap.index)
        return RAFT_ECOMPACTED;
    if (i > m_last(m))
        return RAFT_EUNAVAILABLE;
    *t = i == m->snap.index ? m->snap.term : m->e[i - m->snap.index - 1].term;
    return 0;
}

static int m_entries(void *ctx, raft_index lo, raft_index hi, size_t max_bytes,
                     struct raft_entry *out, size_t *n)
{
    struct mstore *m = ctx;
    size_t bytes = 0;
    *n = 0;
    if (lo <= m->snap.index)
        return RAFT_ECOMPACTED;
    if (hi > m_last(m) + 1)
        return RAFT_EUNAVAILABLE;
    for (raft_index i = lo; i < hi; i++) {
        const struct raft_entry *e = &m->e[i - m->snap.index - 1];
        if (*n > 0 && bytes + e->len > max_bytes)
            break;
        bytes += e->len;
        out[(*n)++] = *e;
    }
    m->reads += *n;
    m->bytes += bytes;
    return 0;
}

static int m_snapshot(void *ctx, struct raft_snapshot *s)
{
    memset(s, 0, sizeof *s);
    s->meta = ((struct mstore *)ctx)->snap;
    return 0;
}

/* The index of configuration entries: from the types, without counting as a read. */
static int m_next_conf(void *ctx, raft_index lo, raft_index hi, raft_index *idx)
{
    struct mstore *m = ctx;
    m->conf_calls++;
    *idx = 0;
    cr_assert_geq(lo, m_first(m));
    cr_assert_leq(hi, m_last(m));
    for (raft_index i = lo; i <= hi; i++)
        if (m->e[i - m->snap.index - 1].type == RAFT_ENTRY_CONF) {
            *idx = i;
            return 0;
        }
    return 0;
}

static void m_init(struct mstore *m)
{
    memset(m, 0, sizeof *m);
    m->vt = (struct raft_storage){.ctx = m,
                                  .initial_state = m_initial,
                                  .first_index = m_first,
                                  .last_index = m_last,
                                  .term = m_term,
                                  .entries = m_entries,
                                  .snapshot = m_snapshot};
}

/* Appends at index `at` (truncating every entry >= at: a conflicting suffix). op 0 =
 * a normal entry, else a configuration change of id. */
static void m_put(struct mstore *m, raft_index at, raft_term term, int op, raft_id id)
{
    cr_assert_gt(at, m->snap.index);
    size_t k = at - m->snap.index - 1;
    cr_assert_leq(k, m->n);
    cr_assert_lt(k, MAXE);
    m->n = k + 1;
    struct raft_entry *e = &m->e[k];
    uint8_t *b = m->buf[k];
    memset(e, 0, sizeof *e);
    e->index = at;
    e->term = term;
    e->data = b;
    if (op) {
        e->type = RAFT_ENTRY_CONF;
        b[0] = (uint8_t)op;
        for (int i = 1; i <= 8; i++)
            b[i] = (uint8_t)(id >> (8 * (i - 1)));
        e->len = 9;
    } else {
        e->type = RAFT_ENTRY_NORMAL;
        memset(b, (int)at, DATA);
        e->len = DATA;
    }
}

static void m_append(struct mstore *m, raft_term term, int op, raft_id id)
{
    m_put(m, m_last(m) + 1, term, op, id);
}

static size_t m_conf_between(const struct mstore *m, raft_index lo, raft_index hi)
{
    size_t c = 0;
    for (raft_index i = lo; i <= hi; i++)
        c += m->e[i - m->snap.index - 1].type == RAFT_ENTRY_CONF;
    return c;
}

/* raft_init over m with / without next_conf; the configuration and what was read. */
static void open_conf(struct mstore *m, bool with_index, struct raft_conf *out)
{
    static const raft_id voters[] = {1, 2, 3};
    struct raft_config cfg;
    struct raft r;
    raft_config_default(&cfg);
    cfg.id = 1;
    cfg.voters = voters;
    cfg.n_voters = 3;
    cfg.storage = &m->vt;
    m->vt.next_conf = with_index ? m_next_conf : NULL;
    m->reads = m->bytes = m->conf_calls = 0;
    cr_assert_eq(raft_init(&r, &cfg), 0);
    *out = *raft_configuration(&r);
    raft_close(&r);
}

static void assert_same(const struct raft_conf *a, const struct raft_conf *b)
{
    cr_assert_eq(a->n_voters, b->n_voters);
    cr_assert_eq(a->n_learners, b->n_learners);
    for (uint32_t i = 0; i < a->n_voters; i++)
        cr_assert_eq(a->voters[i], b->voters[i]);
    for (uint32_t i = 0; i < a->n_learners; i++)
        cr_assert_eq(a->learners[i], b->learners[i]);
}

static bool has(const raft_id *v, uint32_t n, raft_id id)
{
    for (uint32_t i = 0; i < n; i++)
        if (v[i] == id)
            return true;
    return false;
}

/* A log of many normal entries and conf changes of every kind, where a conflicting
 * suffix (holding a conf change) was overwritten by a later leader. */
static void build(struct mstore *m)
{
    m_init(m);
    for (int i = 0; i < 20; i++)
        m_append(m, 1, 0, 0);
    m_append(m, 1, RAFT_CONF_ADD_LEARNER, 4); /* 21 */
    for (int i = 0; i < 30; i++)
        m_append(m, 1, 0, 0);
    m_append(m, 1, RAFT_CONF_ADD_VOTER, 4); /* 52: promote */
    for (int i = 0; i < 30; i++)
        m_append(m, 2, 0, 0);
    m_append(m, 2, RAFT_CONF_ADD_VOTER, 5); /* 83 */
    for (int i = 0; i < 10; i++)
        m_append(m, 2, 0, 0);
    m_append(m, 2, RAFT_CONF_REMOVE, 6); /* 94: in the suffix overwritten below */
    for (int i = 0; i < 5; i++)
        m_append(m, 2, 0, 0);
    /* term 3 overwrites from 90: 94 is gone */
    m_put(m, 90, 3, 0, 0);
    for (int i = 0; i < 20; i++)
        m_append(m, 3, 0, 0);
    m_append(m, 3, RAFT_CONF_REMOVE, 2);      /* 111 */
    m_append(m, 3, RAFT_CONF_ADD_LEARNER, 7); /* 112 */
    for (int i = 0; i < 20; i++)
        m_append(m, 3, 0, 0);
    m_append(m, 3, RAFT_CONF_REMOVE, 3); /* 133: not committed */
    m_append(m, 3, 0, 0);
    m->hs.term = 3;
    m->hs.vote = 1;
    m->hs.commit = 132;
}

Test(raft_replay_conf, same_configuration_with_and_without_index)
{
    struct mstore *m = calloc(1, sizeof *m);
    cr_assert(m);
    build(m);
    cr_assert_eq(m->e[93].type, RAFT_ENTRY_NORMAL, "the conflicting conf entry is gone");
    struct raft_conf full, idx;
    open_conf(m, false, &full);
    open_conf(m, true, &idx);
    assert_same(&full, &idx);
    /* {1,2,3} + learner 4, promote 4, +5, -2, learner 7; 133 (-3) is not committed */
    cr_assert_eq(idx.n_voters, 4);
    cr_assert(has(idx.voters, idx.n_voters, 1) && has(idx.voters, idx.n_voters, 3) &&
              has(idx.voters, idx.n_voters, 4) && has(idx.voters, idx.n_voters, 5));
    cr_assert_eq(idx.n_learners, 1);
    cr_assert_eq(idx.learners[0], 7);
    /* committed up to the uncommitted removal too: both agree again */
    m->hs.commit = 134;
    open_conf(m, false, &full);
    open_conf(m, true, &idx);
    assert_same(&full, &idx);
    cr_assert(!has(idx.voters, idx.n_voters, 3));
    free(m);
}

Test(raft_replay_conf, reads_only_configuration_entries)
{
    struct mstore *m = calloc(1, sizeof *m);
    cr_assert(m);
    build(m);
    struct raft_conf c;
    open_conf(m, false, &c);
    cr_assert_eq(m->reads, 132, "without the index every committed entry is read");
    open_conf(m, true, &c);
    size_t n_conf = m_conf_between(m, 1, 132);
    cr_assert_eq(n_conf, 5);
    cr_assert_eq(m->reads, n_conf, "read %zu entries, expected the %zu conf entries", m->reads,
                 n_conf);
    cr_assert_eq(m->bytes, 9 * n_conf);
    cr_assert_geq(m->conf_calls, n_conf);
    free(m);
}

/* After a snapshot: the replay starts after its configuration, both ways agree. */
Test(raft_replay_conf, after_snapshot)
{
    struct mstore *m = calloc(1, sizeof *m);
    cr_assert(m);
    m_init(m);
    m->snap.index = 1000;
    m->snap.term = 4;
    m->snap.conf.n_voters = 3;
    m->snap.conf.voters[0] = 1;
    m->snap.conf.voters[1] = 2;
    m->snap.conf.voters[2] = 9;
    for (int i = 0; i < 40; i++)
        m_append(m, 4, 0, 0);
    m_append(m, 4, RAFT_CONF_ADD_LEARNER, 5); /* 1041 */
    for (int i = 0; i < 40; i++)
        m_append(m, 4, 0, 0);
    m_append(m, 4, RAFT_CONF_REMOVE, 9); /* 1082 */
    m_append(m, 4, 0, 0);
    m->hs.term = 4;
    m->hs.commit = 1083;
    struct raft_conf full, idx;
    open_conf(m, false, &full);
    cr_assert_eq(m->reads, 83);
    open_conf(m, true, &idx);
    cr_assert_eq(m->reads, 2);
    assert_same(&full, &idx);
    cr_assert_eq(idx.n_voters, 2);
    cr_assert(!has(idx.voters, idx.n_voters, 9));
    cr_assert_eq(idx.n_learners, 1);
    cr_assert_eq(idx.learners[0], 5);
    /* no conf entry at all after the snapshot: nothing read with the index */
    m->hs.commit = 1040;
    open_conf(m, true, &idx);
    cr_assert_eq(m->reads, 0);
    cr_assert_eq(idx.n_voters, 3);
    cr_assert_eq(idx.n_learners, 0);
    free(m);
}
