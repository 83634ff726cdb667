/*
 * raft.h - a pure, deterministic Raft consensus core.
 *
 * Contract
 * --------
 * The core is a state machine driven by four inputs: raft_tick() (logical
 * time), raft_step() (a message from a peer), and the local requests
 * raft_propose(), raft_read_index(), raft_transfer_leader() and
 * raft_change_membership().  It performs no I/O, reads no clock, starts no
 * thread and touches no global state: given the same configuration (including
 * the PRNG seed) and the same sequence of inputs it produces the same outputs.
 *
 * Outputs are collected in a struct raft_ready (the Ready/Advance design of
 * etcd-io/raft):
 *
 *     while (raft_has_ready(r)) {
 *         struct raft_ready rd;
 *         raft_ready(r, &rd);
 *         1. send (or copy) rd.msgs            -- may go before persistence
 *         2. persist rd.snapshot, rd.entries (truncating any stored entry with
 *            index >= rd.entries[0].index first), then rd.hs; fsync if
 *            rd.must_sync
 *         3. send rd.msgs_after                 -- only after step 2 is durable
 *         4. apply rd.snapshot then rd.committed to the state machine,
 *            publish rd.reads
 *         5. raft_advance(r, &rd);
 *     }
 *
 * Between raft_ready() and raft_advance() no other raft_* function that
 * mutates the instance may be called.
 *
 * Proposals: the core does NOT forward proposals.  On a follower
 * raft_propose() fails with RAFT_ENOTLEADER (raft_leader() names the leader
 * the application should forward to) or RAFT_ENOLEADER when no leader is
 * known.  The same holds for raft_read_index().
 *
 * Snapshots: the data is opaque.  The application takes a snapshot of its
 * state machine at index i (raft_compact() hands it the metadata to store
 * with it) and may then discard stored log entries up to i.  When a follower
 * needs entries that are no longer stored, the leader asks the storage vtable
 * for the latest snapshot (metadata + data pointer) and sends a
 * RAFT_MSG_SNAPSHOT carrying both; the follower reports it in rd.snapshot.
 *
 * Membership: single-server changes (Raft thesis §4.1) carried in
 * RAFT_ENTRY_CONF entries.  A change takes effect on a node when the entry
 * is committed and handed out in rd.committed (at raft_advance()).  Only one
 * change may be pending, and the leader must have committed an entry of its
 * own term first (the fix for the single-server change bug, raft-dev 2015).
 * Every node, including ones added later, must be initialised with the same
 * bootstrap configuration (raft_config.voters/learners): it is the
 * configuration "at index 0" that log replay starts from.
 *
 * Ownership and lifetimes
 * -----------------------
 *  - Everything reachable from a struct raft_ready (arrays, entries, data
 *    pointers, messages) is owned by the core or by the sources below and is
 *    valid until raft_advance() returns.  The application copies what it
 *    needs to keep.
 *  - Entry data is referenced, never copied, by the core:
 *      * data passed to raft_propose() must stay valid until the next
 *        raft_advance() returns (by then the entry has been persisted and is
 *        read back through the storage vtable);
 *      * a message passed to raft_step() (its entries, their data and the
 *        snapshot data) must stay valid until the next raft_advance() returns;
 *      * data returned by the storage vtable must stay valid until the next
 *        raft_advance() returns, except entries the application itself
 *        truncates in step 2 (those are only referenced by rd.msgs, which step
 *        1 has already sent or copied).
 *  - The core allocates only through raft_config.alloc (default: libc).  It
 *    reuses its arrays across ready cycles, so the steady state performs no
 *    allocation per proposal or per message.
 *  - After any function returns RAFT_ENOMEM the instance is poisoned: every
 *    later call returns RAFT_ENOMEM; only raft_close() is allowed.
 */
#ifndef RAFT_RAFT_H
#define RAFT_RAFT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef uint64_t raft_id; /* 0 (RAFT_NONE) is never a valid node id */
typedef uint64_t raft_term;
typedef uint64_t raft_index;

#define RAFT_NONE 0
/* Compile-time bounds (voters + learners; in-flight appends per peer). */
#define RAFT_MAX_NODES 16
#define RAFT_MAX_INFLIGHT 256

/* Error codes: 0 on success, one of these (negative) otherwise. */
enum {
    RAFT_EINVAL = -1000,       /* bad argument or configuration */
    RAFT_ENOMEM = -1001,       /* allocation failed; instance poisoned */
    RAFT_ENOLEADER = -1002,    /* no leader known: retry later */
    RAFT_ENOTLEADER = -1003,   /* this node is not the leader: forward */
    RAFT_EBUSY = -1004,        /* a bound was hit (uncommitted bytes, reads) */
    RAFT_ECONFPENDING = -1005, /* a configuration change is still pending */
    RAFT_EAGAIN = -1006,       /* leader has not committed in its term yet */
    RAFT_ECOMPACTED = -1007,   /* storage: index compacted away */
    RAFT_EUNAVAILABLE = -1008, /* storage: index not (yet) available */
    RAFT_ETRANSFER = -1009,    /* leadership transfer in progress */
    RAFT_ECORRUPT = -1010,     /* invariant violated by input (bad message) */
};

/* Returns a static, human-readable string for a RAFT_E* code (or "ok"). */
const char *raft_strerror(int err);

enum raft_entry_type { RAFT_ENTRY_NORMAL = 0, RAFT_ENTRY_CONF = 1 };

struct raft_entry {
    raft_term term;
    raft_index index;
    uint8_t type;     /* enum raft_entry_type */
    const void *data; /* referenced, see "Ownership" above */
    size_t len;
};

/* A configuration: the voters and the learners (disjoint sets). */
struct raft_conf {
    uint32_t n_voters, n_learners;
    raft_id voters[RAFT_MAX_NODES];
    raft_id learners[RAFT_MAX_NODES];
};

struct raft_snapshot_meta {
    raft_index index;      /* last entry covered by the snapshot */
    raft_term term;        /* its term */
    struct raft_conf conf; /* configuration as of index */
};

struct raft_snapshot {
    struct raft_snapshot_meta meta;
    const void *data; /* opaque to the core, see "Ownership" */
    size_t len;
};

struct raft_hard_state {
    raft_term term;
    raft_id vote;
    raft_index commit;
};

enum raft_role { RAFT_FOLLOWER, RAFT_PRECANDIDATE, RAFT_CANDIDATE, RAFT_LEADER };

struct raft_soft_state {
    raft_id leader;
    uint8_t role; /* enum raft_role */
};

enum raft_msg_type {
    RAFT_MSG_APPEND = 1,     /* index/log_term = prev entry; entries; commit */
    RAFT_MSG_APPEND_RESP,    /* index = last matching index, or rejected prev
                                index with reject_hint/hint_term */
    RAFT_MSG_VOTE,           /* index/log_term = candidate's last entry */
    RAFT_MSG_VOTE_RESP,      /* reject */
    RAFT_MSG_PREVOTE,        /* term = the term the candidate would use */
    RAFT_MSG_PREVOTE_RESP,   /* reject */
    RAFT_MSG_HEARTBEAT,      /* commit = min(match, commit); ctx = read seq */
    RAFT_MSG_HEARTBEAT_RESP, /* ctx echoed */
    RAFT_MSG_SNAPSHOT,       /* snapshot */
    RAFT_MSG_TIMEOUT_NOW,    /* leadership transfer: campaign now */
};

/*
 * A message.  Plain data; encoding for the wire is the transport's job.
 * Only the fields documented for a type are meaningful.
 */
struct raft_msg {
    uint8_t type; /* enum raft_msg_type */
    bool reject;
    bool transfer; /* VOTE/PREVOTE: caused by leadership transfer */
    raft_id from, to;
    raft_term term;
    raft_term log_term;
    raft_index index;
    raft_index commit;
    raft_index reject_hint;
    raft_term hint_term;
    uint64_t ctx;
    const struct raft_entry *entries;
    size_t n_entries;
    struct raft_snapshot snapshot;
    size_t ent_off_; /* private to the core */
};

/* A confirmed linearizable read: once the state machine has applied
 * `index`, the read identified by ctx may be served. */
struct raft_read_state {
    uint64_t ctx;
    raft_index index;
};

/*
 * Read-only view of the stable storage, implemented by the application (in
 * tests: an in-memory store).  All functions are called synchronously from
 * within raft_* calls and must not call back into the core.
 *   initial_state: hard state persisted so far (zeroes when empty).
 *   first_index:   index of the first stored entry (snapshot.index + 1).
 *   last_index:    index of the last stored entry (snapshot.index if none).
 *   term:          term of entry i for i in [first_index-1, last_index];
 *                  RAFT_ECOMPACTED below, RAFT_EUNAVAILABLE above.
 *   entries:       copies entries [lo, hi) into out (room for hi-lo), stopping
 *                  once their total data size would exceed max_bytes (at least
 *                  one entry is always returned); *n receives the count.  Same
 *                  errors as term.  Data pointers: see "Ownership".
 *   snapshot:      latest snapshot (meta.index 0 when none); RAFT_EUNAVAILABLE
 *                  if temporarily unavailable.
 *   next_conf:     OPTIONAL (NULL = unknown).  *idx receives the index of the
 *                  first stored RAFT_ENTRY_CONF entry in [lo, hi], or 0 if
 *                  there is none; the storage must answer from an index of its
 *                  configuration entries, without reading the other entries.
 *                  Called by raft_init() only, with first_index <= lo <= hi <=
 *                  last_index; returns 0 or a negative error (as term).  When
 *                  NULL, raft_init() reads every committed entry after the
 *                  snapshot to find the configuration entries.
 */
struct raft_storage {
    void *ctx;
    int (*initial_state)(void *ctx, struct raft_hard_state *hs);
    raft_index (*first_index)(void *ctx);
    raft_index (*last_index)(void *ctx);
    int (*term)(void *ctx, raft_index i, raft_term *term);
    int (*entries)(void *ctx, raft_index lo, raft_index hi, size_t max_bytes,
                   struct raft_entry *out, size_t *n);
    int (*snapshot)(void *ctx, struct raft_snapshot *snap);
    int (*next_conf)(void *ctx, raft_index lo, raft_index hi, raft_index *idx); /* optional */
};

/* Allocator hook: realloc(ctx, NULL, n) allocates, realloc(ctx, p, 0) frees. */
struct raft_alloc {
    void *ctx;
    void *(*realloc)(void *ctx, void *p, size_t n);
};

struct raft_config {
    raft_id id;
    /* Bootstrap configuration (configuration at index 0); overridden by the
     * storage snapshot's conf when one exists. */
    const raft_id *voters;
    size_t n_voters;
    const raft_id *learners;
    size_t n_learners;
    unsigned election_ticks;            /* base election timeout; > heartbeat_ticks */
    unsigned heartbeat_ticks;           /* >= 1 */
    uint64_t seed;                      /* PRNG seed (randomized timeouts) */
    bool pre_vote;                      /* §9.6 pre-vote */
    bool check_quorum;                  /* leader steps down without a quorum */
    unsigned max_inflight;              /* append msgs in flight per peer, 1..256 */
    size_t max_msg_bytes;               /* entry bytes per append message (>= 1 entry) */
    size_t max_uncommitted_bytes;       /* propose -> RAFT_EBUSY past it; 0 = inf */
    size_t max_pending_reads;           /* read_index -> RAFT_EBUSY past it; >= 1 */
    size_t max_apply_bytes;             /* committed bytes per ready; 0 = inf */
    raft_index applied;                 /* index already applied by the application */
    const struct raft_storage *storage; /* must outlive the instance */
    const struct raft_alloc *alloc;     /* NULL: libc; must outlive it */
};

/* Fills cfg with defaults (10/1 ticks, pre-vote and check-quorum on,
 * 64 in flight, 1 MiB messages, 64 MiB uncommitted, 1024 reads). */
void raft_config_default(struct raft_config *cfg);

struct raft_progress {
    raft_id id;
    raft_index match, next, pending_snap;
    uint8_t state; /* RAFT_PR_* */
    bool probe_sent, recent_active, learner;
    unsigned snap_ticks;
    uint64_t read_ack;
    unsigned infl_start, infl_count;
    raft_index inflight[RAFT_MAX_INFLIGHT];
};
enum { RAFT_PR_PROBE, RAFT_PR_REPLICATE, RAFT_PR_SNAPSHOT };

struct raft_read_req {
    uint64_t ctx;
    raft_index index;
    uint64_t seq;
};

/* Internal growable array of T. */
#define RAFT_VEC(T)                                                                                \
    struct {                                                                                       \
        T *v;                                                                                      \
        size_t n, cap;                                                                             \
    }

/*
 * The instance.  Allocated by the caller (e.g. on the stack or embedded);
 * every field is private: use the accessors below.
 */
struct raft {
    raft_id id;
    raft_term term;
    raft_id vote;
    raft_id lead;
    uint8_t role;
    struct raft_config cfg;
    uint64_t prng[4];
    int poisoned;

    /* log (log.c) */
    struct {
        RAFT_VEC(struct raft_entry) u; /* unstable entries, u.v[0] = u_off */
        raft_index u_off;
        bool has_snap;
        struct raft_snapshot snap; /* unstable snapshot */
        raft_index committed, applied;
    } log;

    /* configuration and progress (membership.c, progress.c) */
    struct raft_conf conf;
    raft_index conf_index; /* index of the entry that produced conf */
    raft_index pending_conf_index;
    uint8_t conf_buf[16]; /* data of the conf entry proposed this cycle */
    bool conf_buf_used;
    unsigned n_prs;
    struct raft_progress prs[RAFT_MAX_NODES];
    int8_t votes[RAFT_MAX_NODES]; /* parallel to prs: 0 none, 1 yes, -1 no */

    /* timers (election.c) */
    unsigned election_elapsed, heartbeat_elapsed, randomized_timeout;
    raft_id lead_transferee;
    size_t uncommitted_bytes;
    bool pending_bcast;

    /* reads (read_only.c) */
    struct raft_read_req *reads; /* ring of max_pending_reads */
    size_t reads_start, reads_n;
    uint64_t read_seq;

    /* ready (ready.c) */
    RAFT_VEC(struct raft_msg) msgs;
    RAFT_VEC(struct raft_msg) msgs_after;
    RAFT_VEC(struct raft_entry) pool;
    RAFT_VEC(struct raft_read_state) rs;
    struct raft_hard_state prev_hs, ready_hs;
    struct raft_soft_state prev_ss;
    raft_index ready_applied; /* last committed index handed out */
    bool ready_snap;
};

struct raft_ready {
    struct raft_hard_state hs; /* persist when hs_changed */
    bool hs_changed;
    struct raft_soft_state ss;
    bool ss_changed;
    const struct raft_entry *entries; /* to append to stable storage */
    size_t n_entries;
    bool has_snapshot;
    struct raft_snapshot snapshot;      /* to persist and apply first */
    const struct raft_entry *committed; /* to apply, in order */
    size_t n_committed;
    const struct raft_msg *msgs; /* may be sent before persisting */
    size_t n_msgs;
    const struct raft_msg *msgs_after; /* send only after persisting */
    size_t n_msgs_after;
    const struct raft_read_state *reads;
    size_t n_reads;
    bool must_sync; /* entries, term or vote changed: fsync before msgs_after */
};

/* Initialise r from cfg and the storage's persisted state.  cfg is copied
 * (its arrays are not retained).  Returns 0, RAFT_EINVAL or RAFT_ENOMEM. */
int raft_init(struct raft *r, const struct raft_config *cfg);
/* Frees what raft_init() and later calls allocated.  r may be reused. */
void raft_close(struct raft *r);

/* Advance logical time by one tick. */
int raft_tick(struct raft *r);
/* Process a message addressed to this node (m->to must be r's id).
 * Returns 0 (stale/irrelevant messages are dropped silently), RAFT_EINVAL,
 * RAFT_ECORRUPT or RAFT_ENOMEM.  See "Ownership" for m's lifetime. */
int raft_step(struct raft *r, const struct raft_msg *m);

/* Append a normal entry (leader only).  *index (may be NULL) receives its
 * index; it is acknowledged once an entry with that index and this term is
 * applied.  Errors: RAFT_ENOTLEADER, RAFT_ENOLEADER, RAFT_ETRANSFER, RAFT_EBUSY
 * (uncommitted bound).  data must live until the next raft_advance(). */
int raft_propose(struct raft *r, const void *data, size_t len, raft_index *index);

/* Request a linearizable read (leader only).  The read state {ctx, index}
 * appears in rd.reads once a quorum confirmed this node still leads (via a
 * heartbeat round).  Errors: RAFT_ENOTLEADER, RAFT_ENOLEADER, RAFT_EAGAIN
 * (no entry of the current term committed yet), RAFT_EBUSY.  Pending reads
 * are dropped if the node loses leadership: the application retries. */
int raft_read_index(struct raft *r, uint64_t ctx);

/* Transfer leadership to voter `to` (§3.10): catch it up, then send
 * TIMEOUT_NOW.  Aborted after an election timeout.  Errors: RAFT_ENOTLEADER,
 * RAFT_ENOLEADER, RAFT_EINVAL (not a voter). */
int raft_transfer_leader(struct raft *r, raft_id to);

enum raft_conf_op { RAFT_CONF_ADD_VOTER = 1, RAFT_CONF_ADD_LEARNER, RAFT_CONF_REMOVE };
/* Propose a single-server configuration change (leader only).  ADD_VOTER of a
 * learner promotes it.  Errors: RAFT_ENOTLEADER, RAFT_ENOLEADER,
 * RAFT_ECONFPENDING, RAFT_EAGAIN, RAFT_EINVAL, RAFT_EBUSY. */
int raft_change_membership(struct raft *r, int op, raft_id id, raft_index *index);
/* Decode a RAFT_ENTRY_CONF entry.  Returns 0 or RAFT_ECORRUPT. */
int raft_conf_change_decode(const struct raft_entry *e, int *op, raft_id *id);

/* Report that sending a snapshot to `id` failed (or finished): the leader
 * stops waiting and probes the follower again. */
int raft_report_snapshot(struct raft *r, raft_id id, bool failed);

/* Report that a message to `id` could not be sent (its transport queue was full or the
 * connection is down): a peer the leader was pipelining appends to goes back to probing, so
 * the leader stops streaming into a void (etcd-io/raft's ReportUnreachable). Leader only;
 * harmless otherwise (RAFT_ENOTLEADER / RAFT_ENOLEADER). */
int raft_report_unreachable(struct raft *r, raft_id id);

/* The application is saving a snapshot covering [1, index].  Requires
 * index <= applied index and index >= the index of the last applied
 * configuration change.  Fills meta, which the application stores with the
 * snapshot data.  The application may then drop stored entries <= index
 * (keeping the term of the last dropped one). */
int raft_compact(struct raft *r, raft_index index, struct raft_snapshot_meta *meta);

bool raft_has_ready(struct raft *r);
/* Fill rd with pending work (see the loop at the top).  Returns 0 or
 * RAFT_ENOMEM / a storage error. */
int raft_ready(struct raft *r, struct raft_ready *rd);
/* Acknowledge that rd was fully processed. */
int raft_advance(struct raft *r, const struct raft_ready *rd);

/* Accessors. */
raft_id raft_leader(const struct raft *r);
int raft_role(const struct raft *r);
raft_term raft_current_term(const struct raft *r);
raft_index raft_commit_index(const struct raft *r);
raft_index raft_applied_index(const struct raft *r);
raft_index raft_last_index(const struct raft *r);
const struct raft_conf *raft_configuration(const struct raft *r);
/* The snapshot a raft_step() accepted that no raft_ready() has handed out yet: its index
 * (and its term in *term), or 0 when there is none. The application keeps the data of the
 * RAFT_MSG_SNAPSHOT it just stepped only if that message's index and term are these. */
raft_index raft_pending_snapshot(const struct raft *r, raft_term *term);
/* Leader only: the member a leadership transfer is under way to, or RAFT_NONE. While it is
 * set, followers may vote for that member inside their check-quorum lease (the vote carries
 * `transfer`), so a heartbeat quorum no longer proves that this leader is the only one. */
raft_id raft_transferee(const struct raft *r);
/* Not a leader: ticks that raft_tick() can take before it starts an election (0: the next
 * one does). A leader: UINT_MAX. */
unsigned raft_ticks_to_election(const struct raft *r);
/* Leader only: match index of peer id, or 0. */
raft_index raft_peer_match(const struct raft *r, raft_id id);
const char *raft_role_name(int role);

#endif /* RAFT_RAFT_H */
