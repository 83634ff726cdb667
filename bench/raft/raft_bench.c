/*
 * raft_bench.c - throughput of the raft core alone: a 3-node cluster in one
 * thread, in-memory stores, messages handed directly from one node's ready
 * to the others' raft_step().  Prints proposals committed per second and the
 * core's allocations per proposal (counted through raft_config.alloc).
 *
 *   raft_bench [proposals=5000000] [batch=1024] [payload=16]
 *
 * Contract: no I/O besides the final report; the payload is one shared
 * constant buffer so entry data is referenced, never copied (the core's
 * lifetime rule is trivially met).  Stores are compacted through
 * raft_compact() to keep memory bounded.
 */
#include <raft/raft.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NODES 3

struct store {
    struct raft_hard_state hs;
    struct raft_snapshot_meta snap;
    struct raft_entry *ents; /* ents[k].index == snap.index + 1 + k */
    size_t n, cap;
    struct raft_storage vt;
};

struct counter {
    unsigned long calls;
};

static void *count_realloc(void *ctx, void *p, size_t n)
{
    struct counter *c = ctx;
    if (n == 0) {
        free(p);
        return NULL;
    }
    c->calls++;
    return realloc(p, n);
}

static int s_initial(void *ctx, struct raft_hard_state *hs)
{
    *hs = ((struct store *)ctx)->hs;
    return 0;
}
static raft_index s_first(void *ctx)
{
    return ((struct store *)ctx)->snap.index + 1;
}
static raft_index s_last(void *ctx)
{
    struct store *s = ctx;
    return s->snap.index + s->n;
}
static int s_term(void *ctx, raft_index i, raft_term *t)
{
    struct store *s = ctx;
    if (i < s->snap.index)
        return RAFT_ECOMPACTED;
    if (i > s->snap.index + s->n)
        return RAFT_EUNAVAILABLE;
    *t = i == s->snap.index ? s->snap.term : s->ents[i - s->snap.index - 1].term;
    return 0;
}
static int s_entries(void *ctx, raft_index lo, raft_index hi, size_t max, struct raft_entry *out,
                     size_t *n)
{
    struct store *s = ctx;
    if (lo <= s->snap.index)
        return RAFT_ECOMPACTED;
    size_t k = 0, bytes = 0;
    for (raft_index i = lo; i < hi; i++) {
        const struct raft_entry *e = &s->ents[i - s->snap.index - 1];
        if (k && bytes + e->len > max)
            break;
        bytes += e->len;
        out[k++] = *e;
    }
    *n = k;
    return 0;
}
static int s_snapshot(void *ctx, struct raft_snapshot *snap)
{
    memset(snap, 0, sizeof(*snap));
    snap->meta = ((struct store *)ctx)->snap;
    return 0;
}

static void s_append(struct store *s, const struct raft_entry *e, size_t n)
{
    s->n = e[0].index - s->snap.index - 1; /* truncate */
    if (s->n + n > s->cap) {
        while (s->n + n > s->cap)
            s->cap = s->cap ? s->cap * 2 : 1 << 16;
        s->ents = realloc(s->ents, s->cap * sizeof(*s->ents));
        if (!s->ents)
            abort();
    }
    memcpy(s->ents + s->n, e, n * sizeof(*e));
    s->n += n;
}

struct node {
    struct raft r;
    struct store st;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *what, int rv)
{
    fprintf(stderr, "raft_bench: %s: %s\n", what, raft_strerror(rv));
    exit(1);
}

/* Process every ready until the cluster is quiet; returns entries applied
 * by node `count_id` (the leader). */
static unsigned long drain(struct node *nodes, unsigned long *msgs, raft_id count_id)
{
    unsigned long applied = 0;
    for (bool any = true; any;) {
        any = false;
        for (int i = 0; i < NODES; i++) {
            struct node *n = &nodes[i];
            if (!raft_has_ready(&n->r))
                continue;
            any = true;
            struct raft_ready rd;
            int rv = raft_ready(&n->r, &rd);
            if (rv)
                die("ready", rv);
            if (rd.n_entries)
                s_append(&n->st, rd.entries, rd.n_entries);
            if (rd.hs_changed)
                n->st.hs = rd.hs;
            for (size_t k = 0; k < rd.n_msgs + rd.n_msgs_after; k++) {
                const struct raft_msg *m =
                    k < rd.n_msgs ? &rd.msgs[k] : &rd.msgs_after[k - rd.n_msgs];
                if ((rv = raft_step(&nodes[m->to - 1].r, m)) != 0)
                    die("step", rv);
                (*msgs)++;
            }
            if ((raft_id)(i + 1) == count_id)
                applied += rd.n_committed;
            if ((rv = raft_advance(&n->r, &rd)) != 0)
                die("advance", rv);
        }
    }
    return applied;
}

static void compact(struct node *n)
{
    struct raft_snapshot_meta meta;
    raft_index a = raft_applied_index(&n->r);
    if (a <= n->st.snap.index + (1u << 20) || raft_compact(&n->r, a, &meta) != 0)
        return;
    size_t drop = meta.index - n->st.snap.index;
    memmove(n->st.ents, n->st.ents + drop, (n->st.n - drop) * sizeof(*n->st.ents));
    n->st.n -= drop;
    n->st.snap = meta;
}

int main(int argc, char **argv)
{
    unsigned long total = argc > 1 ? strtoul(argv[1], NULL, 10) : 5000000;
    unsigned long batch = argc > 2 ? strtoul(argv[2], NULL, 10) : 1024;
    size_t payload = argc > 3 ? strtoul(argv[3], NULL, 10) : 16;
    char *data = calloc(1, payload ? payload : 1);
    struct node *nodes = calloc(NODES, sizeof(*nodes));
    struct counter ctr = {0};
    struct raft_alloc al = {&ctr, count_realloc};
    raft_id voters[NODES] = {1, 2, 3};
    if (!data || !nodes)
        return 1;
    for (int i = 0; i < NODES; i++) {
        struct store *st = &nodes[i].st;
        st->vt = (struct raft_storage){st,     s_initial, s_first,    s_last,
                                       s_term, s_entries, s_snapshot, NULL};
        struct raft_config cfg;
        raft_config_default(&cfg);
        cfg.id = (raft_id)i + 1;
        cfg.voters = voters;
        cfg.n_voters = NODES;
        cfg.seed = 1000 + (uint64_t)i;
        cfg.max_inflight = 256;
        cfg.max_msg_bytes = 4u << 20;
        cfg.max_uncommitted_bytes = 0;
        cfg.max_apply_bytes = 0;
        cfg.storage = &st->vt;
        cfg.alloc = &al;
        int rv = raft_init(&nodes[i].r, &cfg);
        if (rv)
            die("init", rv);
    }
    unsigned long msgs = 0;
    /* elect node 1 */
    for (int t = 0; t < 100 && raft_role(&nodes[0].r) != RAFT_LEADER; t++) {
        raft_tick(&nodes[0].r);
        drain(nodes, &msgs, 0);
    }
    if (raft_role(&nodes[0].r) != RAFT_LEADER) {
        fprintf(stderr, "raft_bench: no leader\n");
        return 1;
    }
    /* warm up buffers, then measure */
    for (int w = 0; w < 3; w++) {
        for (unsigned long i = 0; i < batch; i++)
            raft_propose(&nodes[0].r, data, payload, NULL);
        drain(nodes, &msgs, 1);
    }
    unsigned long allocs0 = ctr.calls, msgs0 = msgs, committed = 0, proposed = 0;
    double t0 = now_s();
    while (committed < total) {
        for (unsigned long i = 0; i < batch && proposed < total; i++, proposed++) {
            int rv = raft_propose(&nodes[0].r, data, payload, NULL);
            if (rv)
                die("propose", rv);
        }
        committed += drain(nodes, &msgs, 1);
        if ((proposed / batch) % 512 == 0)
            for (int i = 0; i < NODES; i++)
                compact(&nodes[i]);
    }
    double dt = now_s() - t0;
    printf("raft_bench: %d nodes, %lu proposals of %zu bytes, batch %lu\n", NODES, committed,
           payload, batch);
    printf("  %.0f proposals committed/s (%.3f s)\n", (double)committed / dt, dt);
    printf("  %.6f core allocations per proposal (%lu total)\n",
           (double)(ctr.calls - allocs0) / (double)committed, ctr.calls - allocs0);
    printf("  %.4f messages per proposal\n", (double)(msgs - msgs0) / (double)committed);
    for (int i = 0; i < NODES; i++) {
        raft_close(&nodes[i].r);
        free(nodes[i].st.ents);
    }
    free(nodes);
    free(data);
    return 0;
}
