/*
 * sim.h - deterministic simulated cluster for the raft core.
 *
 * Contract:
 *   - N nodes (ids 1..SIM_MAX_NODES), each a struct raft over an in-memory
 *     durable store (struct sim_store) that holds exactly what the node
 *     persisted from its readies: a crash keeps the store, drops the rest.
 *   - A network with per-message drop, duplication, random delay (hence
 *     reordering), symmetric and one-way link cuts; paused nodes keep their
 *     inbound messages queued.
 *   - All randomness comes from one seed (xoshiro in struct sim).
 *   - After every delivered message / tick the invariants are checked:
 *     Election Safety, Leader Append-Only, Log Matching, Leader Completeness,
 *     State Machine Safety and ReadIndex linearizability.  The first
 *     violation is recorded in sim->err and the run stops.
 *   - Memory: the sim owns every message copy; copies stay alive until the
 *     recipient's next raft_advance() (the core's lifetime rule).
 */
#ifndef RAFT_SIM_H
#define RAFT_SIM_H

#include <raft/raft.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SIM_MAX_NODES 7

struct sim_store {
    struct raft_hard_state hs;
    struct raft_snapshot_meta snap; /* index 0: none */
    uint64_t snap_hash;             /* snapshot data: chain hash at snap.index */
    struct raft_entry *ents;        /* ents[k].index == snap.index + 1 + k */
    uint64_t *chain;                /* chain hash of the log prefix ending at k */
    size_t n, cap;
    struct raft_storage vt;
};

enum { SIM_ABSENT, SIM_UP, SIM_DOWN, SIM_GONE };

struct sim_node {
    raft_id id;
    int status;
    bool paused;
    struct raft r;
    struct sim_store st;
    raft_index sm_index; /* state machine: applied index and chain hash */
    uint64_t sm_hash;
    void **keep; /* message copies / proposal buffers freed after advance */
    size_t n_keep, cap_keep;
    raft_term lead_term; /* Leader Append-Only bookkeeping */
    raft_index lead_last;
    uint64_t lead_chain;
    bool removed; /* applied its own removal */
    int rep_role; /* the role and leader the last ready with ss_changed reported */
    raft_id rep_lead;
    raft_index seen_commit;
};

struct sim_opts {
    unsigned n_voters; /* bootstrap voters: ids 1..n_voters */
    unsigned n_spares; /* extra ids that may be added later */
    unsigned election_ticks, heartbeat_ticks;
    bool pre_vote, check_quorum;
    unsigned max_inflight;
    size_t max_msg_bytes, max_uncommitted_bytes;
    unsigned drop_pct, dup_pct;    /* per message, percent */
    unsigned min_delay, max_delay; /* in micro-ticks (4 per tick) */
    unsigned compact_every;        /* compact when this many entries applied; 0 = never */
};

struct sim_msg;

struct sim {
    uint64_t seed;
    uint64_t rng[4];
    struct sim_opts o;
    unsigned n_nodes; /* ids 1..n_nodes are usable */
    struct sim_node nodes[SIM_MAX_NODES + 1];
    bool cut[SIM_MAX_NODES + 1][SIM_MAX_NODES + 1]; /* cut[a][b]: a->b dropped */
    uint64_t now;                                   /* micro-ticks */
    struct sim_msg **q;
    size_t qn, qcap;
    /* invariants */
    raft_id *leader_of; /* by term */
    size_t n_leader_of;
    uint64_t *applied_hash; /* by index, 0 = unknown (committed prefix hash) */
    raft_term *commit_term; /* by index: lowest term of a leader that committed it */
    size_t n_applied;
    raft_index max_applied;
    struct {
        uint64_t *keys; /* (index << 20) ^ term mixed; 0 empty */
        raft_index *idx;
        raft_term *term;
        uint64_t *val;
        size_t cap, n;
    } lm; /* Log Matching: (index, term) -> chain hash */
    struct sim_read {
        uint64_t ctx;
        raft_id node;
        raft_index min_index;
    } * reads;
    size_t n_reads, cap_reads;
    uint64_t next_ctx, next_value;
    unsigned long stats_msgs, stats_reads_ok, stats_commits, stats_elections;
    unsigned midcrash_pm; /* per-mille chance to crash after sending rd.msgs
                             but before persisting (random runs only) */
    bool trace;
    char err[256];
    bool failed;
};

/* Default options for a small healthy cluster. */
void sim_opts_default(struct sim_opts *o);
/* Create a cluster; bootstrap voters are started.  Returns 0 or -1. */
int sim_init(struct sim *s, uint64_t seed, const struct sim_opts *o);
void sim_free(struct sim *s);

/* One tick: deliver due messages (4 micro-ticks) and tick every up,
 * unpaused node.  Returns 0, or -1 when an invariant failed (s->err). */
int sim_tick(struct sim *s);
/* Deliver messages until the network is empty (no ticks). */
int sim_settle(struct sim *s);
/* Process a node's pending readies (after direct raft_* calls). */
int sim_process(struct sim *s, raft_id id);
/* Run ticks until a leader known by all up members exists; returns its id
 * or 0 after max_ticks. */
raft_id sim_wait_leader(struct sim *s, unsigned max_ticks);
/* The node that believes it leads with the highest term, or 0. */
raft_id sim_leader(struct sim *s);
/* Propose a fresh write at node id; *index gets its index.  Returns the
 * raft_propose() result. */
int sim_propose(struct sim *s, raft_id id, raft_index *index);
/* Issue a tracked ReadIndex at node id. */
int sim_read(struct sim *s, raft_id id);
void sim_isolate(struct sim *s, raft_id id);
void sim_cut(struct sim *s, raft_id from, raft_id to);
void sim_heal(struct sim *s);
void sim_crash(struct sim *s, raft_id id);
int sim_restart(struct sim *s, raft_id id);
/* Start a spare node (empty store, bootstrap configuration). */
int sim_start(struct sim *s, raft_id id);
/* Compact node id's log at its applied index. */
int sim_compact(struct sim *s, raft_id id);
/* All up nodes in the leader's configuration applied through index? */
bool sim_all_applied(struct sim *s, raft_index index);

/* An empty in-memory store (st->vt is its storage vtable). */
void sim_store_init(struct sim_store *st);
void sim_store_free(struct sim_store *st);

/* Step a copy of m into node m->to and process its readies. */
int sim_inject(struct sim *s, const struct raft_msg *m);
/* Count queued messages matching from/to/type (0 = any); copy the last
 * match's header (entries not included) into *last when non-NULL. */
size_t sim_find(struct sim *s, raft_id from, raft_id to, int type, struct raft_msg *last);
/* Drop every queued message. */
void sim_clear(struct sim *s);

/* Randomized run with faults then a liveness phase.  Returns 0 or -1 with
 * s->err describing the failure. */
int sim_run_random(uint64_t seed, char *err, size_t errlen, bool trace);

#endif
