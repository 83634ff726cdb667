/*
 * sim.c - deterministic simulated cluster (see sim.h for the contract).
 */
#include "sim.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MICRO 4 /* micro-ticks per tick */

struct sim_msg {
    uint64_t at;
    uint64_t order;
    struct raft_msg m; /* entries/data point into the same allocation */
};

/* ---------- randomness ---------- */

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static uint64_t rnd(struct sim *s)
{
    uint64_t *st = s->rng;
    uint64_t r = rotl(st[1] * 5, 7) * 9, t = st[1] << 17;
    st[2] ^= st[0];
    st[3] ^= st[1];
    st[1] ^= st[2];
    st[0] ^= st[3];
    st[2] ^= t;
    st[3] = rotl(st[3], 45);
    return r;
}

static unsigned rndn(struct sim *s, unsigned n)
{
    return n ? (unsigned)(rnd(s) % n) : 0;
}

static bool pct(struct sim *s, unsigned p)
{
    return rndn(s, 1000) < p * 10;
}

/* per-mille */
static bool pm(struct sim *s, unsigned p)
{
    return rndn(s, 1000) < p;
}

static uint64_t mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t chain(uint64_t prev, const struct raft_entry *e)
{
    uint64_t h = mix(prev ^ mix(e->index * 0x9e3779b97f4a7c15ULL ^ e->term) ^ e->type);
    const uint8_t *b = e->data;
    for (size_t i = 0; i < e->len; i++)
        h = (h ^ b[i]) * 0x100000001b3ULL;
    return mix(h);
}

static int fail(struct sim *s, const char *fmt, ...)
{
    if (s->failed)
        return -1;
    s->failed = true;
    va_list ap;
    va_start(ap, fmt);
    int n = snprintf(s->err, sizeof(s->err), "t=%llu: ", (unsigned long long)(s->now / MICRO));
    vsnprintf(s->err + n, sizeof(s->err) - (size_t)n, fmt, ap);
    va_end(ap);
    return -1;
}

static void trace(struct sim *s, const char *fmt, ...)
{
    if (!s->trace)
        return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "[%6llu.%u] ", (unsigned long long)(s->now / MICRO),
            (unsigned)(s->now % MICRO));
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n);
    if (!q && n) {
        fprintf(stderr, "sim: out of memory\n");
        abort();
    }
    return q;
}

/* ---------- in-memory durable store ---------- */

static raft_index st_last(const struct sim_store *st)
{
    return st->snap.index + st->n;
}

static int st_initial_state(void *ctx, struct raft_hard_state *hs)
{
    *hs = ((struct sim_store *)ctx)->hs;
    return 0;
}

static raft_index st_first_index(void *ctx)
{
    return ((struct sim_store *)ctx)->snap.index + 1;
}

static raft_index st_last_index(void *ctx)
{
    return st_last(ctx);
}

static int st_term(void *ctx, raft_index i, raft_term *t)
{
    struct sim_store *st = ctx;
    if (i < st->snap.index)
        return RAFT_ECOMPACTED;
    if (i > st_last(st))
        return RAFT_EUNAVAILABLE;
    *t = i == st->snap.index ? st->snap.term : st->ents[i - st->snap.index - 1].term;
    return 0;
}

static int st_entries(void *ctx, raft_index lo, raft_index hi, size_t max, struct raft_entry *out,
                      size_t *n)
{
    struct sim_store *st = ctx;
    if (lo <= st->snap.index)
        return RAFT_ECOMPACTED;
    if (hi > st_last(st) + 1)
        return RAFT_EUNAVAILABLE;
    size_t bytes = 0, k = 0;
    for (raft_index i = lo; i < hi; i++) {
        const struct raft_entry *e = &st->ents[i - st->snap.index - 1];
        if (k > 0 && bytes + e->len > max)
            break;
        bytes += e->len;
        out[k++] = *e;
    }
    *n = k;
    return 0;
}

static int st_snapshot(void *ctx, struct raft_snapshot *snap)
{
    struct sim_store *st = ctx;
    memset(snap, 0, sizeof(*snap));
    snap->meta = st->snap;
    if (st->snap.index) {
        snap->data = &st->snap_hash;
        snap->len = sizeof(st->snap_hash);
    }
    return 0;
}

/* next_conf from the stored entries' types (the store is in memory: no read to save). */
static int st_next_conf(void *ctx, raft_index lo, raft_index hi, raft_index *idx)
{
    struct sim_store *st = ctx;
    *idx = 0;
    if (lo <= st->snap.index || hi > st_last(st))
        return RAFT_EUNAVAILABLE;
    for (raft_index i = lo; i <= hi; i++)
        if (st->ents[i - st->snap.index - 1].type == RAFT_ENTRY_CONF) {
            *idx = i;
            break;
        }
    return 0;
}

static void st_init(struct sim_store *st)
{
    memset(st, 0, sizeof(*st));
    st->vt.ctx = st;
    st->vt.initial_state = st_initial_state;
    st->vt.first_index = st_first_index;
    st->vt.last_index = st_last_index;
    st->vt.term = st_term;
    st->vt.entries = st_entries;
    st->vt.snapshot = st_snapshot;
}

static void st_truncate(struct sim_store *st, size_t keep)
{
    for (size_t k = keep; k < st->n; k++)
        free((void *)st->ents[k].data);
    st->n = keep;
}

static void st_free(struct sim_store *st)
{
    st_truncate(st, 0);
    free(st->ents);
    free(st->chain);
    st->ents = NULL;
    st->chain = NULL;
    st->cap = 0;
}

static uint64_t st_chain_at(const struct sim_store *st, raft_index i, bool *ok)
{
    *ok = true;
    if (i == st->snap.index)
        return st->snap_hash;
    if (i < st->snap.index || i > st_last(st)) {
        *ok = false;
        return 0;
    }
    return st->chain[i - st->snap.index - 1];
}

/* ---------- Log Matching table ---------- */

static uint64_t *lm_find(struct sim *s, raft_index idx, raft_term term, bool insert, uint64_t val)
{
    if (insert && (s->lm.n + 1) * 2 > s->lm.cap) {
        size_t oc = s->lm.cap, nc = oc ? oc * 2 : 1024;
        uint64_t *ok = s->lm.keys, *ov = s->lm.val;
        raft_index *oi = s->lm.idx;
        raft_term *ot = s->lm.term;
        s->lm.keys = calloc(nc, sizeof(uint64_t));
        s->lm.val = calloc(nc, sizeof(uint64_t));
        s->lm.idx = calloc(nc, sizeof(raft_index));
        s->lm.term = calloc(nc, sizeof(raft_term));
        if (!s->lm.keys || !s->lm.val || !s->lm.idx || !s->lm.term)
            abort();
        s->lm.cap = nc;
        s->lm.n = 0;
        for (size_t i = 0; i < oc; i++)
            if (ok[i])
                lm_find(s, oi[i], ot[i], true, ov[i]);
        free(ok);
        free(ov);
        free(oi);
        free(ot);
    }
    if (!s->lm.cap)
        return NULL;
    uint64_t key = mix(idx * 1000003ULL ^ term) | 1;
    size_t i = key & (s->lm.cap - 1);
    for (;; i = (i + 1) & (s->lm.cap - 1)) {
        if (!s->lm.keys[i]) {
            if (!insert)
                return NULL;
            s->lm.keys[i] = key;
            s->lm.idx[i] = idx;
            s->lm.term[i] = term;
            s->lm.val[i] = val;
            s->lm.n++;
            return &s->lm.val[i];
        }
        if (s->lm.keys[i] == key && s->lm.idx[i] == idx && s->lm.term[i] == term)
            return &s->lm.val[i];
    }
}

static int check_log_matching(struct sim *s, struct sim_node *n, raft_index idx, raft_term term,
                              uint64_t h)
{
    uint64_t *v = lm_find(s, idx, term, false, 0);
    if (!v) {
        lm_find(s, idx, term, true, h);
        return 0;
    }
    if (*v != h)
        return fail(s, "Log Matching: node %llu entry (%llu,%llu) has a different prefix",
                    (unsigned long long)n->id, (unsigned long long)idx, (unsigned long long)term);
    return 0;
}

static int st_append(struct sim *s, struct sim_node *n, const struct raft_entry *e, size_t cnt)
{
    struct sim_store *st = &n->st;
    raft_index first = e[0].index;
    if (first <= st->snap.index)
        return fail(s, "node %llu: append at %llu below snapshot %llu", (unsigned long long)n->id,
                    (unsigned long long)first, (unsigned long long)st->snap.index);
    if (first > st_last(st) + 1)
        return fail(s, "node %llu: append at %llu leaves a gap after %llu",
                    (unsigned long long)n->id, (unsigned long long)first,
                    (unsigned long long)st_last(st));
    st_truncate(st, first - st->snap.index - 1);
    if (st->n + cnt > st->cap) {
        size_t nc = st->cap ? st->cap * 2 : 64;
        while (nc < st->n + cnt)
            nc *= 2;
        st->ents = xrealloc(st->ents, nc * sizeof(*st->ents));
        st->chain = xrealloc(st->chain, nc * sizeof(*st->chain));
        st->cap = nc;
    }
    for (size_t i = 0; i < cnt; i++) {
        struct raft_entry x = e[i];
        if (x.index != st_last(st) + 1)
            return fail(s, "node %llu: non-contiguous append", (unsigned long long)n->id);
        void *d = NULL;
        if (x.len) {
            d = xrealloc(NULL, x.len);
            memcpy(d, x.data, x.len);
        }
        x.data = d;
        uint64_t prev = st->n ? st->chain[st->n - 1] : st->snap_hash;
        uint64_t h = chain(prev, &x);
        st->ents[st->n] = x;
        st->chain[st->n] = h;
        st->n++;
        if (check_log_matching(s, n, x.index, x.term, h))
            return -1;
    }
    return 0;
}

/* ---------- network ---------- */

static void keep(struct sim_node *n, void *p)
{
    if (n->n_keep == n->cap_keep) {
        n->cap_keep = n->cap_keep ? n->cap_keep * 2 : 64;
        n->keep = xrealloc(n->keep, n->cap_keep * sizeof(void *));
    }
    n->keep[n->n_keep++] = p;
}

static void drop_keep(struct sim_node *n)
{
    for (size_t i = 0; i < n->n_keep; i++)
        free(n->keep[i]);
    n->n_keep = 0;
}

static struct sim_msg *copy_msg(const struct raft_msg *m)
{
    size_t sz = sizeof(struct sim_msg) + m->n_entries * sizeof(struct raft_entry);
    for (size_t i = 0; i < m->n_entries; i++)
        sz += m->entries[i].len;
    if (m->type == RAFT_MSG_SNAPSHOT)
        sz += m->snapshot.len;
    struct sim_msg *c = xrealloc(NULL, sz);
    c->m = *m;
    struct raft_entry *ents = (struct raft_entry *)(c + 1);
    uint8_t *p = (uint8_t *)(ents + m->n_entries);
    for (size_t i = 0; i < m->n_entries; i++) {
        ents[i] = m->entries[i];
        if (ents[i].len) {
            memcpy(p, m->entries[i].data, ents[i].len);
            ents[i].data = p;
            p += ents[i].len;
        } else {
            ents[i].data = NULL;
        }
    }
    c->m.entries = m->n_entries ? ents : NULL;
    if (m->type == RAFT_MSG_SNAPSHOT && m->snapshot.len) {
        memcpy(p, m->snapshot.data, m->snapshot.len);
        c->m.snapshot.data = p;
    }
    return c;
}

static void enqueue(struct sim *s, struct sim_msg *c)
{
    if (s->qn == s->qcap) {
        s->qcap = s->qcap ? s->qcap * 2 : 256;
        s->q = xrealloc(s->q, s->qcap * sizeof(*s->q));
    }
    s->q[s->qn++] = c;
}

static void send(struct sim *s, const struct raft_msg *m)
{
    s->stats_msgs++;
    if (m->to == 0 || m->to > s->n_nodes || s->cut[m->from][m->to] || pct(s, s->o.drop_pct))
        return;
    int copies = pct(s, s->o.dup_pct) ? 2 : 1;
    for (int i = 0; i < copies; i++) {
        struct sim_msg *c = copy_msg(m);
        unsigned span = s->o.max_delay - s->o.min_delay + 1;
        c->at = s->now + s->o.min_delay + rndn(s, span);
        c->order = rnd(s);
        enqueue(s, c);
    }
}

/* ---------- node lifecycle ---------- */

static const char *msg_name(int t)
{
    static const char *names[] = {"?",         "APP",     "APP_RESP",     "VOTE",
                                  "VOTE_RESP", "PREVOTE", "PREVOTE_RESP", "HB",
                                  "HB_RESP",   "SNAP",    "TIMEOUT_NOW"};
    return t >= 1 && t <= 10 ? names[t] : "?";
}

static int node_boot(struct sim *s, struct sim_node *n)
{
    struct raft_config cfg;
    raft_config_default(&cfg);
    raft_id voters[SIM_MAX_NODES];
    for (unsigned i = 0; i < s->o.n_voters; i++)
        voters[i] = i + 1;
    cfg.id = n->id;
    cfg.voters = voters;
    cfg.n_voters = s->o.n_voters;
    cfg.election_ticks = s->o.election_ticks;
    cfg.heartbeat_ticks = s->o.heartbeat_ticks;
    cfg.seed = rnd(s);
    cfg.pre_vote = s->o.pre_vote;
    cfg.check_quorum = s->o.check_quorum;
    cfg.max_inflight = s->o.max_inflight;
    cfg.max_msg_bytes = s->o.max_msg_bytes;
    cfg.max_uncommitted_bytes = s->o.max_uncommitted_bytes;
    cfg.max_pending_reads = 64;
    cfg.max_apply_bytes = 256;
    cfg.storage = &n->st.vt;
    int rv = raft_init(&n->r, &cfg);
    if (rv)
        return fail(s, "node %llu: raft_init: %s (commit %llu snap %llu last %llu)",
                    (unsigned long long)n->id, raft_strerror(rv),
                    (unsigned long long)n->st.hs.commit, (unsigned long long)n->st.snap.index,
                    (unsigned long long)st_last(&n->st));
    n->sm_index = n->st.snap.index;
    n->sm_hash = n->st.snap_hash;
    n->seen_commit = raft_commit_index(&n->r);
    n->status = SIM_UP;
    n->paused = false;
    n->lead_term = 0;
    n->rep_role = RAFT_FOLLOWER; /* what a new instance has reported: nothing */
    n->rep_lead = RAFT_NONE;
    return 0;
}

int sim_start(struct sim *s, raft_id id)
{
    struct sim_node *n = &s->nodes[id];
    if (n->status != SIM_ABSENT)
        return 0;
    st_init(&n->st);
    if (id % 2) /* odd ids replay configurations through next_conf, even ids read the log */
        n->st.vt.next_conf = st_next_conf;
    trace(s, "start %llu", (unsigned long long)id);
    return node_boot(s, n);
}

void sim_crash(struct sim *s, raft_id id)
{
    struct sim_node *n = &s->nodes[id];
    if (n->status != SIM_UP)
        return;
    trace(s, "crash %llu", (unsigned long long)id);
    raft_close(&n->r);
    drop_keep(n);
    n->status = SIM_DOWN;
    n->paused = false;
}

int sim_restart(struct sim *s, raft_id id)
{
    struct sim_node *n = &s->nodes[id];
    if (n->status != SIM_DOWN)
        return 0;
    trace(s, "restart %llu", (unsigned long long)id);
    return node_boot(s, n);
}

/* ---------- invariants ---------- */

static int check_applied(struct sim *s, struct sim_node *n, raft_index idx, uint64_t h)
{
    if (idx >= s->n_applied) {
        size_t nc = s->n_applied ? s->n_applied : 1024;
        while (nc <= idx)
            nc *= 2;
        s->applied_hash = xrealloc(s->applied_hash, nc * sizeof(uint64_t));
        memset(s->applied_hash + s->n_applied, 0, (nc - s->n_applied) * sizeof(uint64_t));
        s->commit_term = xrealloc(s->commit_term, nc * sizeof(raft_term));
        memset(s->commit_term + s->n_applied, 0, (nc - s->n_applied) * sizeof(raft_term));
        s->n_applied = nc;
    }
    if (s->applied_hash[idx] == 0) {
        s->applied_hash[idx] = h | 1;
        if (idx > s->max_applied)
            s->max_applied = idx;
        return 0;
    }
    if (s->applied_hash[idx] != (h | 1))
        return fail(s, "State Machine Safety: node %llu applied a different entry at %llu",
                    (unsigned long long)n->id, (unsigned long long)idx);
    return 0;
}

static int check_leader(struct sim *s, struct sim_node *n, bool became)
{
    raft_term t = raft_current_term(&n->r);
    if (t >= s->n_leader_of) {
        size_t nc = s->n_leader_of ? s->n_leader_of : 64;
        while (nc <= t)
            nc *= 2;
        s->leader_of = xrealloc(s->leader_of, nc * sizeof(raft_id));
        memset(s->leader_of + s->n_leader_of, 0, (nc - s->n_leader_of) * sizeof(raft_id));
        s->n_leader_of = nc;
    }
    if (s->leader_of[t] && s->leader_of[t] != n->id)
        return fail(s, "Election Safety: nodes %llu and %llu both leaders of term %llu",
                    (unsigned long long)s->leader_of[t], (unsigned long long)n->id,
                    (unsigned long long)t);
    if (!s->leader_of[t]) {
        s->stats_elections++;
        trace(s, "node %llu leader of term %llu", (unsigned long long)n->id, (unsigned long long)t);
    }
    s->leader_of[t] = n->id;
    bool ok;
    if (became) {
        /* Leader Completeness: every entry committed in an earlier term is
         * in our log (checking the highest one covers the prefix). */
        raft_index g = s->max_applied;
        while (g > 0 && !(s->commit_term[g] && s->commit_term[g] < t))
            g--;
        if (g > n->st.snap.index) {
            uint64_t h = st_chain_at(&n->st, g, &ok);
            if (!ok || (h | 1) != s->applied_hash[g])
                return fail(s,
                            "Leader Completeness: new leader %llu (term %llu) lacks "
                            "committed entry %llu (commit term %llu)",
                            (unsigned long long)n->id, (unsigned long long)t, (unsigned long long)g,
                            (unsigned long long)s->commit_term[g]);
        }
    }
    /* Leader Append-Only */
    if (n->lead_term == t && n->lead_last > n->st.snap.index) {
        uint64_t h = st_chain_at(&n->st, n->lead_last, &ok);
        if (!ok || h != n->lead_chain)
            return fail(s, "Leader Append-Only: leader %llu rewrote entry %llu",
                        (unsigned long long)n->id, (unsigned long long)n->lead_last);
    }
    n->lead_term = t;
    n->lead_last = st_last(&n->st);
    n->lead_chain = st_chain_at(&n->st, n->lead_last, &ok);
    return 0;
}

static int check_read(struct sim *s, struct sim_node *n, const struct raft_read_state *rs)
{
    for (size_t i = 0; i < s->n_reads; i++) {
        if (s->reads[i].ctx != rs->ctx)
            continue;
        if (rs->index < s->reads[i].min_index)
            return fail(s,
                        "Linearizability: read %llu at node %llu got index %llu < %llu "
                        "committed before it was issued",
                        (unsigned long long)rs->ctx, (unsigned long long)n->id,
                        (unsigned long long)rs->index, (unsigned long long)s->reads[i].min_index);
        if (s->reads[i].node != n->id)
            return fail(s, "read %llu answered by the wrong node", (unsigned long long)rs->ctx);
        s->reads[i] = s->reads[--s->n_reads];
        s->stats_reads_ok++;
        return 0;
    }
    return fail(s, "read state for unknown ctx %llu (duplicate?)", (unsigned long long)rs->ctx);
}

/* ---------- ready processing ---------- */

static int process_one(struct sim *s, struct sim_node *n)
{
    struct raft_ready rd;
    int rv = raft_ready(&n->r, &rd);
    if (rv)
        return fail(s, "node %llu: raft_ready: %s", (unsigned long long)n->id, raft_strerror(rv));
    for (size_t i = 0; i < rd.n_msgs; i++)
        send(s, &rd.msgs[i]);
    if (s->midcrash_pm && pm(s, s->midcrash_pm)) {
        /* crash between sending and persisting: nothing of rd is durable */
        trace(s, "node %llu crashes mid-ready", (unsigned long long)n->id);
        sim_crash(s, n->id);
        return 0;
    }
    if (rd.has_snapshot) {
        struct sim_store *st = &n->st;
        if (rd.snapshot.len != sizeof(uint64_t))
            return fail(s, "node %llu: bad snapshot data", (unsigned long long)n->id);
        st_truncate(st, 0);
        st->snap = rd.snapshot.meta;
        memcpy(&st->snap_hash, rd.snapshot.data, sizeof(uint64_t));
        trace(s, "node %llu installs snapshot %llu", (unsigned long long)n->id,
              (unsigned long long)st->snap.index);
    }
    if (rd.n_entries && st_append(s, n, rd.entries, rd.n_entries))
        return -1;
    if (rd.hs_changed)
        n->st.hs = rd.hs;
    for (size_t i = 0; i < rd.n_msgs_after; i++)
        send(s, &rd.msgs_after[i]);
    if (rd.has_snapshot) {
        n->sm_index = rd.snapshot.meta.index;
        memcpy(&n->sm_hash, rd.snapshot.data, sizeof(uint64_t));
        if (check_applied(s, n, n->sm_index, n->sm_hash))
            return -1;
    }
    bool removed_self = false;
    for (size_t i = 0; i < rd.n_committed; i++) {
        const struct raft_entry *e = &rd.committed[i];
        if (e->index != n->sm_index + 1)
            return fail(s, "node %llu: applying %llu after %llu", (unsigned long long)n->id,
                        (unsigned long long)e->index, (unsigned long long)n->sm_index);
        n->sm_hash = chain(n->sm_hash, e);
        n->sm_index = e->index;
        s->stats_commits++;
        if (check_applied(s, n, e->index, n->sm_hash))
            return -1;
        int op;
        raft_id id;
        if (e->type == RAFT_ENTRY_CONF && raft_conf_change_decode(e, &op, &id) == 0) {
            trace(s, "node %llu applies conf op %d id %llu at %llu", (unsigned long long)n->id, op,
                  (unsigned long long)id, (unsigned long long)e->index);
            if (op == RAFT_CONF_REMOVE && id == n->id)
                removed_self = true;
        }
    }
    for (size_t i = 0; i < rd.n_reads; i++)
        if (check_read(s, n, &rd.reads[i]))
            return -1;
    if (rd.ss_changed) {
        n->rep_role = rd.ss.role;
        n->rep_lead = rd.ss.leader;
    }
    if ((rv = raft_advance(&n->r, &rd)) != 0)
        return fail(s, "node %llu: raft_advance: %s", (unsigned long long)n->id, raft_strerror(rv));
    /* a role or leader changed by raft_advance itself (a leader applying its own removal) is
     * reported by the next ready like any other change: the application acts on reports */
    if ((raft_role(&n->r) != n->rep_role || raft_leader(&n->r) != n->rep_lead) &&
        !raft_has_ready(&n->r))
        return fail(s,
                    "node %llu: role %d leader %llu, but the last report was role %d leader %llu "
                    "and no ready is pending",
                    (unsigned long long)n->id, raft_role(&n->r),
                    (unsigned long long)raft_leader(&n->r), n->rep_role,
                    (unsigned long long)n->rep_lead);
    drop_keep(n);
    if (raft_role(&n->r) == RAFT_LEADER) {
        if (check_leader(s, n, rd.ss_changed && rd.ss.role == RAFT_LEADER))
            return -1;
    } else {
        n->lead_term = 0;
    }
    if (raft_role(&n->r) == RAFT_LEADER) {
        /* record what this leader committed, and in which term */
        raft_index c = raft_commit_index(&n->r);
        raft_term t = raft_current_term(&n->r);
        for (raft_index i = n->seen_commit + 1; i <= c; i++) {
            bool ok;
            uint64_t h = st_chain_at(&n->st, i, &ok);
            if (!ok)
                continue;
            if (check_applied(s, n, i, h))
                return -1;
            if (!s->commit_term[i] || s->commit_term[i] > t)
                s->commit_term[i] = t;
        }
    }
    n->seen_commit = raft_commit_index(&n->r);
    if (raft_applied_index(&n->r) != n->sm_index)
        return fail(s, "node %llu: core applied %llu, state machine %llu",
                    (unsigned long long)n->id, (unsigned long long)raft_applied_index(&n->r),
                    (unsigned long long)n->sm_index);
    if (removed_self) {
        trace(s, "node %llu removed, shutting down", (unsigned long long)n->id);
        raft_close(&n->r);
        n->status = SIM_GONE;
        n->removed = true;
    }
    return 0;
}

int sim_process(struct sim *s, raft_id id)
{
    struct sim_node *n = &s->nodes[id];
    for (int guard = 0; n->status == SIM_UP && raft_has_ready(&n->r); guard++) {
        if (guard > 1000)
            return fail(s, "node %llu: ready loop does not converge", (unsigned long long)id);
        if (process_one(s, n))
            return -1;
    }
    return s->failed ? -1 : 0;
}

static int deliver(struct sim *s, struct sim_msg *c)
{
    struct sim_node *n = &s->nodes[c->m.to];
    if (n->status != SIM_UP || s->cut[c->m.from][c->m.to]) {
        free(c);
        return 0;
    }
    trace(s, "%llu->%llu %s t%llu i%llu lt%llu c%llu n%zu%s", (unsigned long long)c->m.from,
          (unsigned long long)c->m.to, msg_name(c->m.type), (unsigned long long)c->m.term,
          (unsigned long long)c->m.index, (unsigned long long)c->m.log_term,
          (unsigned long long)c->m.commit, c->m.n_entries, c->m.reject ? " REJECT" : "");
    int rv = raft_step(&n->r, &c->m);
    keep(n, c);
    if (rv)
        return fail(s, "node %llu: raft_step(%s): %s", (unsigned long long)n->id,
                    msg_name(c->m.type), raft_strerror(rv));
    return sim_process(s, n->id);
}

static int cmp_msg(const void *a, const void *b)
{
    const struct sim_msg *x = *(struct sim_msg *const *)a, *y = *(struct sim_msg *const *)b;
    if (x->at != y->at)
        return x->at < y->at ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order;
}

/* Deliver every message due at or before s->now. */
static int deliver_due(struct sim *s)
{
    for (;;) {
        size_t k = 0;
        struct sim_msg *due[64];
        for (size_t i = 0; i < s->qn && k < 64;) {
            struct sim_msg *c = s->q[i];
            if (c->at <= s->now && !s->nodes[c->m.to].paused) {
                due[k++] = c;
                s->q[i] = s->q[--s->qn];
            } else {
                i++;
            }
        }
        if (k == 0)
            return 0;
        qsort(due, k, sizeof(due[0]), cmp_msg);
        for (size_t i = 0; i < k; i++) {
            if (s->failed) {
                free(due[i]);
                continue;
            }
            if (deliver(s, due[i]))
                continue;
        }
        if (s->failed)
            return -1;
    }
}

int sim_tick(struct sim *s)
{
    for (int i = 0; i < MICRO; i++) {
        s->now++;
        if (deliver_due(s))
            return -1;
    }
    for (raft_id id = 1; id <= s->n_nodes; id++) {
        struct sim_node *n = &s->nodes[id];
        if (n->status != SIM_UP || n->paused)
            continue;
        int rv = raft_tick(&n->r);
        if (rv)
            return fail(s, "node %llu: raft_tick: %s", (unsigned long long)id, raft_strerror(rv));
        if (sim_process(s, id))
            return -1;
    }
    return 0;
}

int sim_settle(struct sim *s)
{
    for (int i = 0; i < 10000 && s->qn; i++) {
        s->now++;
        if (deliver_due(s))
            return -1;
        bool any = false;
        for (size_t k = 0; k < s->qn; k++)
            if (!s->nodes[s->q[k]->m.to].paused)
                any = true;
        if (!any)
            break;
    }
    return s->failed ? -1 : 0;
}

raft_id sim_leader(struct sim *s)
{
    raft_id best = 0;
    raft_term bt = 0;
    for (raft_id id = 1; id <= s->n_nodes; id++) {
        struct sim_node *n = &s->nodes[id];
        if (n->status == SIM_UP && raft_role(&n->r) == RAFT_LEADER &&
            raft_current_term(&n->r) >= bt) {
            best = id;
            bt = raft_current_term(&n->r);
        }
    }
    return best;
}

static bool is_member(const struct raft_conf *c, raft_id id)
{
    for (uint32_t i = 0; i < c->n_voters; i++)
        if (c->voters[i] == id)
            return true;
    for (uint32_t i = 0; i < c->n_learners; i++)
        if (c->learners[i] == id)
            return true;
    return false;
}

raft_id sim_wait_leader(struct sim *s, unsigned max_ticks)
{
    for (unsigned t = 0; t <= max_ticks; t++) {
        raft_id l = sim_leader(s);
        if (l) {
            const struct raft_conf *c = raft_configuration(&s->nodes[l].r);
            bool all = true;
            for (raft_id id = 1; id <= s->n_nodes; id++) {
                struct sim_node *n = &s->nodes[id];
                if (n->status == SIM_UP && !n->paused && is_member(c, id) &&
                    raft_leader(&n->r) != l)
                    all = false;
            }
            if (all)
                return l;
        }
        if (sim_tick(s))
            return 0;
    }
    return 0;
}

int sim_propose(struct sim *s, raft_id id, raft_index *index)
{
    struct sim_node *n = &s->nodes[id];
    if (n->status != SIM_UP)
        return RAFT_ENOLEADER;
    size_t len = 8 + rndn(s, 24);
    uint8_t *buf = xrealloc(NULL, len);
    uint64_t v = ++s->next_value;
    memset(buf, (int)(v & 0xff), len);
    memcpy(buf, &v, 8);
    raft_index idx = 0;
    int rv = raft_propose(&n->r, buf, len, &idx);
    if (rv) {
        free(buf);
        return rv;
    }
    keep(n, buf);
    if (index)
        *index = idx;
    if (sim_process(s, id))
        return RAFT_ECORRUPT;
    return 0;
}

int sim_read(struct sim *s, raft_id id)
{
    struct sim_node *n = &s->nodes[id];
    if (n->status != SIM_UP)
        return RAFT_ENOLEADER;
    uint64_t ctx = ++s->next_ctx;
    if (s->n_reads == s->cap_reads) {
        s->cap_reads = s->cap_reads ? s->cap_reads * 2 : 64;
        s->reads = xrealloc(s->reads, s->cap_reads * sizeof(*s->reads));
    }
    /* recorded before the call: the core may answer synchronously */
    s->reads[s->n_reads].ctx = ctx;
    s->reads[s->n_reads].node = id;
    s->reads[s->n_reads].min_index = s->max_applied;
    s->n_reads++;
    int rv = raft_read_index(&n->r, ctx);
    if (rv) {
        s->n_reads--;
        return rv;
    }
    if (sim_process(s, id))
        return RAFT_ECORRUPT;
    return 0;
}

void sim_isolate(struct sim *s, raft_id id)
{
    for (raft_id o = 1; o <= SIM_MAX_NODES; o++)
        if (o != id)
            s->cut[id][o] = s->cut[o][id] = true;
}

void sim_cut(struct sim *s, raft_id from, raft_id to)
{
    s->cut[from][to] = true;
}

void sim_heal(struct sim *s)
{
    memset(s->cut, 0, sizeof(s->cut));
}

int sim_compact(struct sim *s, raft_id id)
{
    struct sim_node *n = &s->nodes[id];
    if (n->status != SIM_UP || n->sm_index <= n->st.snap.index)
        return 0;
    struct raft_snapshot_meta meta;
    int rv = raft_compact(&n->r, n->sm_index, &meta);
    if (rv)
        return rv;
    struct sim_store *st = &n->st;
    size_t drop = meta.index - st->snap.index;
    for (size_t k = 0; k < drop; k++)
        free((void *)st->ents[k].data);
    memmove(st->ents, st->ents + drop, (st->n - drop) * sizeof(*st->ents));
    memmove(st->chain, st->chain + drop, (st->n - drop) * sizeof(*st->chain));
    st->n -= drop;
    st->snap = meta;
    st->snap_hash = n->sm_hash;
    trace(s, "node %llu compacts to %llu", (unsigned long long)id, (unsigned long long)meta.index);
    return 0;
}

bool sim_all_applied(struct sim *s, raft_index index)
{
    raft_id l = sim_leader(s);
    if (!l)
        return false;
    const struct raft_conf *c = raft_configuration(&s->nodes[l].r);
    for (raft_id id = 1; id <= s->n_nodes; id++) {
        struct sim_node *n = &s->nodes[id];
        if (n->status == SIM_UP && is_member(c, id) && n->sm_index < index)
            return false;
    }
    return true;
}

void sim_opts_default(struct sim_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->n_voters = 3;
    o->election_ticks = 10;
    o->heartbeat_ticks = 1;
    o->pre_vote = true;
    o->check_quorum = true;
    o->max_inflight = 8;
    o->max_msg_bytes = 1024;
    o->max_uncommitted_bytes = 1 << 20;
    o->min_delay = 1;
    o->max_delay = 2;
}

int sim_init(struct sim *s, uint64_t seed, const struct sim_opts *o)
{
    memset(s, 0, sizeof(*s));
    s->seed = seed;
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) {
        x += 0x9e3779b97f4a7c15ULL;
        s->rng[i] = mix(x);
    }
    s->o = *o;
    s->n_nodes = o->n_voters + o->n_spares;
    if (s->n_nodes > SIM_MAX_NODES || o->n_voters == 0)
        return -1;
    for (raft_id id = 1; id <= s->n_nodes; id++) {
        s->nodes[id].id = id;
        s->nodes[id].status = SIM_ABSENT;
    }
    for (raft_id id = 1; id <= o->n_voters; id++)
        if (sim_start(s, id))
            return -1;
    return 0;
}

void sim_free(struct sim *s)
{
    for (raft_id id = 1; id <= s->n_nodes; id++) {
        struct sim_node *n = &s->nodes[id];
        if (n->status == SIM_UP)
            raft_close(&n->r);
        if (n->status != SIM_ABSENT)
            st_free(&n->st);
        drop_keep(n);
        free(n->keep);
    }
    for (size_t i = 0; i < s->qn; i++)
        free(s->q[i]);
    free(s->q);
    free(s->leader_of);
    free(s->applied_hash);
    free(s->commit_term);
    free(s->lm.keys);
    free(s->lm.val);
    free(s->lm.idx);
    free(s->lm.term);
    free(s->reads);
}

int sim_inject(struct sim *s, const struct raft_msg *m)
{
    struct sim_node *n = &s->nodes[m->to];
    if (m->to == 0 || m->to > s->n_nodes || n->status != SIM_UP)
        return -1;
    struct sim_msg *c = copy_msg(m);
    int rv = raft_step(&n->r, &c->m);
    keep(n, c);
    if (rv)
        return rv;
    return sim_process(s, n->id);
}

size_t sim_find(struct sim *s, raft_id from, raft_id to, int type, struct raft_msg *last)
{
    size_t k = 0;
    const struct sim_msg *best = NULL;
    for (size_t i = 0; i < s->qn; i++) {
        const struct raft_msg *m = &s->q[i]->m;
        if ((from && m->from != from) || (to && m->to != to) || (type && m->type != type))
            continue;
        k++;
        best = s->q[i];
    }
    if (best && last) {
        *last = best->m;
        last->entries = NULL;
    }
    return k;
}

void sim_clear(struct sim *s)
{
    for (size_t i = 0; i < s->qn; i++)
        free(s->q[i]);
    s->qn = 0;
}

void sim_store_init(struct sim_store *st)
{
    st_init(st);
}

void sim_store_free(struct sim_store *st)
{
    st_free(st);
}

/* ---------- randomized run ---------- */

static raft_id pick_up(struct sim *s)
{
    raft_id c[SIM_MAX_NODES];
    unsigned k = 0;
    for (raft_id id = 1; id <= s->n_nodes; id++)
        if (s->nodes[id].status == SIM_UP)
            c[k++] = id;
    return k ? c[rndn(s, k)] : 0;
}

static raft_id pick_status(struct sim *s, int status)
{
    raft_id c[SIM_MAX_NODES];
    unsigned k = 0;
    for (raft_id id = 1; id <= s->n_nodes; id++)
        if (s->nodes[id].status == status)
            c[k++] = id;
    return k ? c[rndn(s, k)] : 0;
}

static void random_partition(struct sim *s)
{
    sim_heal(s);
    if (pct(s, 50)) {
        /* symmetric split into two groups */
        bool side[SIM_MAX_NODES + 1];
        for (raft_id id = 1; id <= s->n_nodes; id++)
            side[id] = pct(s, 50);
        for (raft_id a = 1; a <= s->n_nodes; a++)
            for (raft_id b = 1; b <= s->n_nodes; b++)
                if (side[a] != side[b])
                    s->cut[a][b] = true;
        trace(s, "partition (symmetric)");
    } else {
        /* asymmetric: a few one-way cuts */
        unsigned k = 1 + rndn(s, 3);
        for (unsigned i = 0; i < k; i++) {
            raft_id a = 1 + rndn(s, s->n_nodes), b = 1 + rndn(s, s->n_nodes);
            if (a != b)
                s->cut[a][b] = true;
            trace(s, "cut %llu->%llu", (unsigned long long)a, (unsigned long long)b);
        }
    }
}

static void random_membership(struct sim *s, raft_id l)
{
    struct raft *r = &s->nodes[l].r;
    const struct raft_conf *c = raft_configuration(r);
    unsigned choice = rndn(s, 3);
    int rv = 0;
    raft_id target = 0;
    int op = 0;
    if (choice == 0) {
        /* add a never-used spare as learner */
        for (raft_id id = 1; id <= s->n_nodes; id++)
            if (s->nodes[id].status == SIM_ABSENT) {
                target = id;
                break;
            }
        if (!target)
            return;
        if (sim_start(s, target))
            return;
        op = RAFT_CONF_ADD_LEARNER;
    } else if (choice == 1) {
        if (c->n_learners == 0)
            return;
        target = c->learners[rndn(s, c->n_learners)];
        /* promote once caught up, sometimes remove instead */
        if (pct(s, 20))
            op = RAFT_CONF_REMOVE;
        else if (raft_peer_match(r, target) + 5 >= raft_commit_index(r))
            op = RAFT_CONF_ADD_VOTER;
        else
            return;
    } else {
        if (c->n_voters <= 3)
            return;
        target = c->voters[rndn(s, c->n_voters)];
        op = RAFT_CONF_REMOVE;
    }
    rv = raft_change_membership(r, op, target, NULL);
    trace(s, "leader %llu conf op %d id %llu: %s", (unsigned long long)l, op,
          (unsigned long long)target, raft_strerror(rv));
    if (rv == 0)
        sim_process(s, l);
}

static void random_opts(struct sim *s, struct sim_opts *o)
{
    sim_opts_default(o);
    unsigned v = rndn(s, 10);
    o->n_voters = v < 1 ? 1 : v < 7 ? 3 : 5;
    o->n_spares = o->n_voters == 5 ? 2 : 2 + rndn(s, 2);
    o->election_ticks = 8 + rndn(s, 8);
    o->heartbeat_ticks = 1 + rndn(s, 2);
    o->pre_vote = pct(s, 75);
    o->check_quorum = pct(s, 75);
    o->max_inflight = 1 + rndn(s, 8);
    o->max_msg_bytes = pct(s, 30) ? 1 : 16 + rndn(s, 200);
    o->max_uncommitted_bytes = 256 + rndn(s, 4096);
    o->drop_pct = rndn(s, 10);
    o->dup_pct = rndn(s, 5);
    o->min_delay = 1;
    o->max_delay = 1 + rndn(s, 12);
    o->compact_every = pct(s, 70) ? 5 + rndn(s, 40) : 0;
}

int sim_run_random(uint64_t seed, char *err, size_t errlen, bool tr)
{
    struct sim *s = calloc(1, sizeof(*s));
    if (!s)
        abort();
    struct sim_opts o;
    /* options come from the seed too */
    s->seed = seed;
    uint64_t x = seed ^ 0x5eed;
    for (int i = 0; i < 4; i++) {
        x += 0x9e3779b97f4a7c15ULL;
        s->rng[i] = mix(x);
    }
    random_opts(s, &o);
    int rv = sim_init(s, seed, &o);
    s->trace = tr;
    s->midcrash_pm = 1;
    const unsigned fault_ticks = 400, live_ticks = 400;
    for (unsigned t = 0; rv == 0 && t < fault_ticks; t++) {
        /* client traffic */
        raft_id l = sim_leader(s);
        if (pct(s, 40)) {
            raft_id target = l && pct(s, 80) ? l : pick_up(s);
            if (target)
                sim_propose(s, target, NULL);
        }
        if (pct(s, 15)) {
            raft_id target = l && pct(s, 80) ? l : pick_up(s);
            if (target)
                sim_read(s, target);
        }
        /* faults (the leader may have crashed mid-ready above) */
        if (l && s->nodes[l].status != SIM_UP)
            l = 0;
        if (pm(s, 30))
            random_partition(s);
        if (pm(s, 30))
            sim_heal(s);
        if (pm(s, 20)) {
            raft_id id = pick_up(s);
            if (id)
                sim_crash(s, id);
        }
        if (pm(s, 40)) {
            raft_id id = pick_status(s, SIM_DOWN);
            if (id)
                rv = sim_restart(s, id);
        }
        if (pm(s, 15)) {
            raft_id id = pick_up(s);
            if (id)
                s->nodes[id].paused = true;
        }
        if (pm(s, 40))
            for (raft_id id = 1; id <= s->n_nodes; id++)
                s->nodes[id].paused = false;
        if (l && s->nodes[l].status != SIM_UP)
            l = 0;
        if (l && pm(s, 40))
            random_membership(s, l);
        if (l && s->nodes[l].status != SIM_UP)
            l = 0;
        if (l && pm(s, 10)) {
            raft_id to = 1 + rndn(s, s->n_nodes);
            trace(s, "transfer %llu -> %llu", (unsigned long long)l, (unsigned long long)to);
            if (raft_transfer_leader(&s->nodes[l].r, to) == 0)
                sim_process(s, l);
        }
        if (o.compact_every)
            for (raft_id id = 1; id <= s->n_nodes; id++) {
                struct sim_node *n = &s->nodes[id];
                if (n->status == SIM_UP && n->sm_index >= n->st.snap.index + o.compact_every &&
                    pct(s, 20))
                    sim_compact(s, id);
            }
        if (s->failed || sim_tick(s))
            rv = -1;
    }
    /* liveness: heal everything, then a leader must emerge and commit */
    if (rv == 0 && !s->failed) {
        trace(s, "---- heal ----");
        sim_heal(s);
        s->midcrash_pm = 0;
        s->o.drop_pct = s->o.dup_pct = 0;
        s->o.max_delay = 2;
        for (raft_id id = 1; id <= s->n_nodes; id++) {
            s->nodes[id].paused = false;
            if (s->nodes[id].status == SIM_DOWN && sim_restart(s, id))
                rv = -1;
        }
        bool done = false;
        raft_index target = 0;
        raft_id tl = 0;
        raft_term tt = 0;
        for (unsigned t = 0; rv == 0 && !done && t < live_ticks; t++) {
            raft_id l = sim_leader(s);
            /* a leader never loses its own entries within its term: re-propose
             * only when leadership moved */
            if (l && (l != tl || raft_current_term(&s->nodes[l].r) != tt || target == 0)) {
                raft_index idx;
                if (sim_propose(s, l, &idx) == 0) {
                    target = idx;
                    tl = l;
                    tt = raft_current_term(&s->nodes[l].r);
                }
            }
            if (target && sim_all_applied(s, target) && s->applied_hash[target])
                done = true;
            else if (sim_tick(s))
                rv = -1;
        }
        if (rv == 0 && !done)
            rv = fail(s, "Liveness: no commit within %u ticks after healing (leader %llu)",
                      live_ticks, (unsigned long long)sim_leader(s));
    }
    if (s->failed)
        rv = -1;
    if (rv && err)
        snprintf(err, errlen, "%s", s->err[0] ? s->err : "setup failed");
    if (tr)
        fprintf(stderr, "seed %llu: %lu msgs, %lu applies, %lu elections, %lu reads ok, t=%llu\n",
                (unsigned long long)seed, s->stats_msgs, s->stats_commits, s->stats_elections,
                s->stats_reads_ok, (unsigned long long)(s->now / MICRO));
    sim_free(s);
    free(s);
    return rv;
}
