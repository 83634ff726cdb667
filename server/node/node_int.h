/*
 * node_int.h: the node's private state, shared by its files (not a public header).
 *
 *   node.c        public API: the request queue, barriers, exclusive items, compaction waiters,
 *                 metrics, init and close.
 *   node_ready.c  the raft driver: feeds raft (messages, ticks, proposals, reads), takes each
 *                 ready, hands it to the worker, then sends, acknowledges and advances
 *                 (raft.h's loop).
 *   node_apply.c  the worker: one ready -> ONE LMDB transaction (log, hard state, applies).
 *   node_conf.c   membership changes and leader transfer.
 *   node_snap.c   the log's lower end: seeding, compaction, snapshots sent and installed.
 *   node_peer.c   what crosses the peer transport: raft messages, proposals forwarded to the
 *                 leader, read-index requests and answers, snapshots.
 *
 * Everything here is loop-thread state except what a ready_work hands to the worker (the
 * store's write path and the ready_work itself).
 */
#ifndef KV_NODE_INT_H
#define KV_NODE_INT_H

#include "common/etcd_errors.h"
#include "common/list.h"
#include "node/node.h"
#include "raft/raft.h"
#include "raftlog/msg_codec.h"
#include "raftlog/raftlog.h"
#include "wal/wal.h"

#include <stdatomic.h>
#include <stdbool.h>

struct kv_peer_net;

#define KV_NODE_MAX_RECORDS 8
/* Work one physical compaction step may do before it stops (docs/ARCHITECTURE.md
 * "Compaction"): with the batch limit, what a put can wait behind. Removing scattered
 * revisions dirties about one page each, so the records alone do not bound a step's time. */
#define KV_NODE_COMPACT_STEP_US 5000u
/* etcd warnApplyDuration: an entry whose apply takes longer counts in
 * etcd_server_slow_apply_total */
#define KV_NODE_SLOW_APPLY_NS (100ull * 1000 * 1000)

/* Frame types on the peer transport: server/peer/peer_frames.h. */
#include "peer/peer_frames.h"

/* One /health probe waiting on a shared health barrier (a stack: pushed, then all answered). */
typedef struct health_waiter {
    struct health_waiter *next;
    void (*done)(void *arg, int status);
    void *arg;
} health_waiter;

enum req_kind {
    REQ_WRITE = 0,   /* a client's write: done(arg, result) */
    REQ_BARRIER,     /* barrier_done(arg, status) once applied */
    REQ_HEALTH,      /* coalesced health barrier: waiters */
    REQ_EXCL,        /* exclusive item: runs alone on the worker */
    REQ_FORWARDED,   /* a follower's proposal on the leader: nobody waits here */
    REQ_CONF,        /* a membership change: raft_change_membership, done when applied */
    REQ_MOVE_LEADER, /* leader transfer */
};

struct kv_node_req {
    kv_list link; /* on one of kv_node's queue, wait, conf_waiters, grave (or on none) */
    int kind;
    uint8_t *data; /* packed InternalRequest with id/proposer prefixed; NULL for EXCL */
    size_t len;
    uint64_t id;          /* InternalRequest.id (0 for EXCL) */
    uint64_t deadline_ms; /* fail past it (request timeout) */
    int proposed;         /* handed to raft or forwarded to the leader */
    kv_node_done_fn done;
    void (*barrier_done)(void *arg, int status);
    void *arg;
    kv_node *health; /* REQ_HEALTH: its waiters are health_waiters */
    health_waiter *waiters;
    int (*excl_work)(void *arg);
    void (*excl_done)(void *arg, int status);
    int conf_op; /* REQ_CONF: KV_NODE_MEMBER_*; REQ_MOVE_LEADER: target in conf_id */
    uint64_t conf_id;
    raft_index conf_index; /* index of the configuration entry once proposed */
    int essential;         /* an alarm: proposed even when the disk is nearly full */
    int forwarded;         /* in the wait list as forwarded to the leader (fwd_waiting) */
};

/* The request whose link is e; NULL for NULL. */
static inline kv_node_req *kv_node__req(kv_list *e)
{
    return e ? kv_list_data(e, kv_node_req, link) : NULL;
}

/* The first request of the list at l, NULL if it is empty. */
static inline kv_node_req *kv_node__first(const kv_list *l)
{
    return kv_node__req(kv_list_head(l));
}

/* Lease observer events of one ready, recorded on the worker and replayed on the loop. */
typedef struct obs_event {
    int type; /* 0 granted, 1 revoked, 2 checkpointed */
    int64_t id, ttl, remaining;
} obs_event;

/* One ready (or a compaction-only step) in flight on the worker. */
typedef struct ready_work {
    uv_work_t req;
    kv_node *node;
    int has_ready;
    struct raft_ready rd;
    kv_result *results; /* per committed entry */
    uint64_t *ids;      /* per applied entry: InternalRequest.id if proposed by us, else 0 */
    uint8_t *fresh;     /* per applied entry: a no-op/conf entry applied now (not skipped) */
    struct {
        int op;
        uint64_t id, proposer, req_id;
    } changes[KV_NODE_MAX_RECORDS]; /* membership change entries applied by this commit */
    size_t n_changes;
    int spec;         /* single voter: rd.entries are applied in this commit too */
    uint64_t applied; /* highest index applied by this commit */
    int64_t revision;
    int rc;
    obs_event *ev;
    size_t nev, cap_ev;
    int ev_oom;
    int cstep_rc;
    int cstep_ran; /* this commit carried a compaction step (compaction-only batches) */
    int cpending;  /* write batches: a physical compaction is pending after the commit */
    uint64_t ckeys, cremoved;
    const char *snap_path; /* snapshot file to install (rd.has_snapshot) */
    int has_compact;       /* persist compact (log compaction) in this commit */
    uint64_t log_mark;     /* n->log_proposed when this work was made */
    struct raft_snapshot_meta compact;
    int flushes; /* flushes this ready's LMDB commit issued (metric; kv_store_commit_flushes) */
    int durable; /* that commit was synced, meta page included (the disk failpoint's commit) */
    int install; /* the snapshot file became data.mdb: the loop swaps the environment */
    int old_fd;  /* the replaced data file, closed off the loop after the swap (or -1) */
    /* Early acknowledgement (node_apply.c early_ok): the worker sets `early` once results/ids
     * are final and only the commit of an apply-only transaction remains (its entries are
     * durable in a quorum's logs already), then wakes the loop (kv_node.early_async), which
     * completes the waiters at once (`acked`) instead of after the commit's flush. */
    atomic_int early;
    int no_early;      /* worker: a configuration / member-record entry: acknowledge after commit */
    int member_staged; /* worker: a MemberAdd's record was staged (test failpoint only) */
    int acked;         /* loop: waiters completed early */
    uint32_t fp_delay_ms; /* test failpoint: sleep before an apply-only commit (follower) */
    int auth_fired;       /* loop: the auth hook ran for this ready's entries */
    /* WAL mode (node_log.c): the worker sets `persisted` once the ready's entries and hard
     * state are durable in the WAL (before the LMDB apply commit) and wakes the loop, which
     * sends rd.msgs_after at once (`after_sent`): the append acknowledgements wait for one
     * flush, not for the apply's. */
    atomic_int persisted;
    int after_sent;
    int wal_synced; /* fdatasyncs of the WAL in this ready (metric) */
    /* WAL mode, pipelining (node_ready.c kv_node__on_early): once the apply's results are
     * final and only the LMDB commit remains, the worker sets `early_adv` (nothing in the
     * ready needs the commit before raft goes on: no configuration, lease event, snapshot or
     * log compaction). The loop then advances raft at once (`advanced`) and moves the ready
     * to kv_node.committing, so the next ready's WAL flush overlaps this commit; the next
     * apply waits for it on LMDB's writer lock. `completed`/`status`: the worker returned
     * while the ready before it had not been finished yet (completions are handled in
     * order). */
    atomic_int early_adv;
    int advanced;
    int completed;
    int status;
} ready_work;

/* Snapshot sends to one peer (node_snap.c): one in flight, failures back off. */
typedef struct snap_peer {
    raft_id id;
    int inflight;       /* a copy or stream for this peer is running */
    int report_pending; /* raft_report_snapshot due on the next feed */
    int report_failed;
    uint32_t failures; /* consecutive failed sends */
    uint64_t next_ms;  /* no new send before (backoff) */
} snap_peer;

/* A linearizable read waiting for its read index, then for apply. */
typedef struct read_waiter {
    kv_list link; /* kv_node's reads_new, reads_round or reads_apply */
    void (*done)(void *arg, int status);
    void *arg;
    uint64_t ctx;         /* read round it belongs to (0: not yet requested) */
    raft_index index;     /* read index once known */
    uint64_t deadline_ms; /* -ETIMEDOUT past it */
} read_waiter;

/* A read index asked by a follower, pending in raft on the leader. */
typedef struct remote_read {
    kv_list link; /* kv_node.rreads */
    uint64_t from, their_ctx, our_ctx;
    uint64_t deadline_ms;
} remote_read;

/* A Physical Compact waiting for the physical compaction to finish (a stack: pushed, then all
 * fired). */
typedef struct compact_waiter {
    struct compact_waiter *next;
    void (*fn)(void *arg, int status);
    void *arg;
} compact_waiter;

struct kv_node {
    uv_loop_t *loop;
    kv_store *store;
    kv_header_info hdr;
    uint32_t max_pending;
    int64_t revision; /* store revision after the last committed ready */

    /* ---- requests ---- */
    kv_list queue; /* kv_node_req.link: queued, not yet proposed (FIFO) */
    uint64_t pending;
    kv_list wait; /* kv_node_req.link: proposed by this member, by increasing id */
    uint64_t waiting;
    kv_list grave; /* kv_node_req.link: completed; freed after the next raft_advance (raft.h
                      ownership) */
    uint64_t next_id;
    kv_store_lease_observer target;

    /* ---- raft ---- */
    struct raft raft;
    int raft_ok;
    struct raft_hard_state persisted_hs;
    ready_work *committing; /* WAL mode: a ready advanced early whose LMDB commit is still
                               running (at most one; ready_work.early_adv) */
    kv_raftlog *log;        /* LMDB log: the raft log unless `wal` (then only its snapshot meta) */
    kv_wal *wal;            /* --experimental-wal: the raft log (node_log.c); NULL otherwise */
    struct kv_peer_net *peers;
    uint64_t self;
    uint32_t heartbeat_ms, election_ms;
    uint64_t request_timeout_ms;
    unsigned ticks_due;
    uint64_t leader;
    int role;
    raft_index lead_start; /* leader: index of the first entry of our term (0: not leader) */
    int primary;           /* leader that has applied an entry of its own term */
    void (*leader_fn)(void *arg, int primary);
    void *leader_arg;
    int64_t (*lease_id_fn)(void *arg); /* kv_node_set_lease_namer */
    void *lease_id_arg;
    void (*applied_fn)(void *arg, uint64_t applied); /* leases: applied index advanced */
    void *applied_arg;
    uint64_t lease_index;     /* leader: newest lease grant/revoke/checkpoint entry it proposed */
    kv_raft_msg_owned *inbox; /* raft messages received while a ready is in flight */
    size_t inbox_n, inbox_cap;
    char **inbox_snap;    /* parallel to inbox: snapshot file of a SNAPSHOT message, or NULL */
    unsigned *inbox_tick; /* parallel to inbox: ticks_due when it arrived (step_inbox order) */
    kv_raft_msg_owned *stepped; /* stepped this cycle: freed after raft_advance */
    size_t stepped_n, stepped_cap;
    char *snap_pending; /* snapshot file of the message stepped this cycle */
    uint64_t inbox_dropped;
    /* Inbox bounds (node_peer.c on_raft): inbox_cap messages (--max-raft-inbox-messages),
     * max_inbox_bytes wire bytes (--max-raft-inbox-bytes); inbox_alloc slots are allocated
     * (grown up to inbox_cap); inbox_bytes held now; peaks for the metrics; the drop log is
     * rate-limited (inbox_logged_*). fwd_waiting: forwarded proposals in the wait list
     * (bounded by max_forwarded, --max-forwarded-proposals). */
    size_t inbox_alloc;
    size_t inbox_bytes;
    size_t max_inbox_bytes;
    size_t inbox_peak_bytes, inbox_peak_n;
    uint64_t inbox_logged_ms, inbox_logged_drops;
    uint64_t fwd_waiting, max_forwarded;
    raft_id unreachable[16]; /* peers whose message the transport dropped this cycle */
    size_t n_unreachable;
    char *snap_dir;          /* snapshots prepared / received here (NULL: none) */
    uint64_t snapshot_count; /* applied entries between log compactions */
    raft_index snap_index;   /* index of the last log compaction (snapshot meta) */
    int compact_log;         /* a raft_compact() meta waits for the next commit */
    /* The retained log's bytes against --max-raft-log-bytes (kv_node_log_admit). */
    uint64_t max_log_bytes;   /* budget; a quarter of it compacts the log early */
    uint64_t log_bytes;       /* the retained log: "rlog" pages after the last commit
                                 (kv_raftlog_stats), or the WAL's records (kv_wal_stats) */
    uint64_t log_db_bytes;    /* the log's pages inside data.mdb (quota: state = used - it) */
    uint64_t log_proposed;    /* bytes proposed or forwarded by this member, ever */
    uint64_t log_mark;        /* log_proposed when the last committed ready was made */
    uint64_t log_compactions; /* early compactions (by bytes) */
    kv_metric *m_log_bytes, *m_log_refused, *m_log_early;
    struct raft_snapshot_meta compact_meta;
    kv_list conf_waiters; /* kv_node_req.link: our membership changes waiting for their
                             configuration entry */
    struct conf_todo {
        int op;
        uint64_t id, proposer, req_id;
    } conf_todo[KV_NODE_MAX_RECORDS]; /* leader: changes applied, configuration to propose */
    size_t n_conf_todo;
    raft_index conf_pending_index; /* leader: configuration entry proposed, not applied */
    uint8_t *publish;              /* publish request until it applied */
    size_t publish_len;
    int publish_inflight;
    uint64_t publish_next_ms;
    kv_node_req *transfer_req; /* MoveLeader waiting for the target to lead */
    struct {
        uint32_t type;
        void (*fn)(void *arg, uint64_t from, const uint8_t *buf, size_t len);
        void *arg;
    } peer_handlers[8]; /* frame types >= KV_NODE_PEER_TYPE_MIN (node.h) */
    size_t n_peer_handlers;
    void (*snap_fn)(void *arg); /* server: a snapshot was installed */
    void *snap_arg;
    void (*conf_fn)(void *arg, int op, uint64_t id); /* server: peers / members table */
    void *conf_arg;
    int snap_sending; /* a snapshot is being prepared or streamed */
    int snap_copying; /* its copy runs on a libuv worker: the node is not freed before it ends */
    uint64_t snap_sends;

    /* ---- reads (ReadIndex) ---- */
    kv_list reads_new;            /* read_waiter.link: not yet assigned to a round */
    kv_list reads_round;          /* in the current round (ctx = round_ctx) */
    kv_list reads_apply;          /* read index known, waiting for apply */
    uint64_t round_ctx, next_ctx; /* round in flight (0: none) */
    uint64_t round_started_ms;
    /* Leadership confirmation (kv_node_lease_live): every read-index round this member starts
     * through its own raft as leader is remembered in `confirm` (ctx, start, term; the last
     * KV_NODE_CONFIRM_RING). When raft releases one, a quorum heard from this leader after its
     * start, so no other leader can be elected before about an election timeout after it
     * (followers' check-quorum lease): confirm_ms/confirm_term record the latest such start.
     * Kept apart from the reads' round, which is given up after an election timeout: on a slow
     * link the release can come later and still confirm. confirm_wanted asks
     * kv_node__reads_drive for a round even with no read waiting. transfer_ms: when a
     * leadership transfer was last seen under way (a transfer's vote bypasses the followers'
     * lease, so confirmations from around it prove nothing). */
    struct {
        uint64_t ctx, started_ms, term;
    } confirm[16];
    unsigned confirm_next;
    uint64_t confirm_ms, confirm_term;           /* latest confirmed start */
    uint64_t confirm_last_ms, confirm_last_term; /* latest start (confirmed or not) */
    int confirm_wanted;
    uint64_t transfer_ms;
    uint64_t reads_waiting, max_reads;
    kv_list rreads; /* remote_read.link: followers' read index requests pending in raft */
    uint64_t rreads_n;

    /* ---- worker ---- */
    ready_work *inflight;
    uv_async_t early_async; /* the worker: an in-flight ready's results are final */
    int early_open;         /* early_async not closed yet */
    raft_index acked_index; /* highest index acknowledged before its commit was visible */
    uint64_t auth_gen;      /* kv_node_auth_generation (node_ready.c fire_auth) */
    int64_t acked_rev;      /* the store revision after it (kv_node_acked_revision) */
    kv_metric *m_early_acks;
    kv_metric *m_early_advances;       /* WAL mode: readies whose commit overlapped the next */
    uint32_t fp_apply_delay_ms;        /* KVD_FAILPOINT_APPLY_COMMIT_DELAY_MS (tests only) */
    uint32_t fp_leader_apply_delay_ms; /* KVD_FAILPOINT_LEADER_APPLY_COMMIT_DELAY_MS (tests) */
    /* KVD_FAILPOINT_PRIMARY_DELAY_MS (tests only): a new leader becomes primary (its lessor
     * serves) no sooner than this long after it became leader (lead_since_ms, loop clock). */
    uint32_t fp_primary_delay_ms;
    uint64_t lead_since_ms;
    struct kv_disk_fp *disk_fp; /* slow / failing fsync (disk_failpoint.h); NULL: off */
    uv_check_t check;
    uv_idle_t idle;
    uv_timer_t tick;
    int handles_open;
    int closing;
    int stalled;
    uint64_t fed_ms; /* kv_node__now_ms() of the last feed (kv_node_lease_live) */
    int excl_busy;
    int disk_full;
    int disk_low;
    uint64_t disk_checked_ms;
    unsigned alarm_pending;
    kv_metric *m_alarm[3];

    uint32_t max_health_waiters;
    uint64_t health_waiting;
    kv_node_req *health_q;
    kv_metric *m_health_barriers, *m_health_coalesced, *m_health_refused;

    int compact_pending;
    int compact_error;
    uint32_t compact_batch_keys, compact_batch_revs;
    uint64_t cstep_max; /* most records one compaction step removed (loop) */
    int cstep_due;      /* a write batch committed: a compaction-only batch goes next */
    compact_waiter *cwait;
    kv_metric *m_ckeys, *m_cremoved, *m_cbatches;

    kv_node_stats st;
    kv_metric *m_batches, *m_proposals, *m_refused, *m_batch_size_max;
    kv_metric *m_fsyncs_wal; /* kvd_fsyncs_total{file="wal"} (m_fsyncs: file="db") */
    kv_metric *m_fsyncs, *m_entries, *m_forwarded, *m_leader_changes, *m_reads;
    /* etcd's series (docs/metrics.md "Server", "Disk"); the histograms are observed on the
     * worker thread (kv_metric_observe is thread-safe) */
    kv_metric *m_etcd_leader_changes, *m_proposals_failed, *m_slow_read_indexes;
    kv_metric *m_heartbeat_failures, *m_wal_fsync, *m_backend_commit;
    kv_metric *m_early_hb_acks;         /* kvd_raft_heartbeats_answered_early_total */
    atomic_uint_fast64_t slow_applies;  /* worker: entries whose apply took > 100 ms */
    atomic_uint_fast64_t apply_retries; /* worker: readies applied again (node_apply.c) */
    kv_metric *m_inbox_dropped;
    kv_metric *m_inbox_dropped_bytes, *m_inbox_dropped_msgs;
    kv_metric *m_reads_refused, *m_rreads_refused;
    kv_metrics *metrics;
    kv_node_commit_fn commit_fn;
    void *commit_arg;
    kv_node_auth_fn auth_fn; /* kv_node_set_auth_hook */
    void *auth_arg;

    /* ---- snapshot sends (node_snap.c) ---- */
    snap_peer snap_peers[RAFT_MAX_NODES];
    kv_metric *m_snap_send_failed, *m_snap_send_deferred, *m_snap_installs;
};

/* node.c */
uint64_t kv_node__now_ms(void);
void kv_node__close_early(kv_node *n);
/* Fails r with the error value e (common/etcd_errors.h) and detail (NULL or "": none)
 * appended to e's message; KV_ERR_NONE ends r without an error (requests nobody waits on for
 * a result: forwarded proposals, leader transfers). The node passes errors as values; the
 * api edge makes them gRPC statuses. */
void kv_node__fail_req(kv_node *n, kv_node_req *r, kv_etcd_err e, const char *detail);
/* kv_node__fail_req without a detail. */
void kv_node__fail_err(kv_node *n, kv_node_req *r, kv_etcd_err e);
void kv_node__finish_req(kv_node *n, kv_node_req *r, kv_result *res);
void kv_node__kick(kv_node *n);
void kv_node__maybe_free(kv_node *n);
void kv_node__raise_requested_alarms(kv_node *n);
void kv_node__update_alarm_metrics(kv_node *n);
int kv_node__enqueue(kv_node *n, kv_node_req *r, int reserved);

/* node_ready.c */
void kv_node__on_early(uv_async_t *h);
int kv_node__raft_start(kv_node *n, const kv_node_config *cfg);
void kv_node__raft_stop(kv_node *n);
void kv_node__drive(kv_node *n);
void kv_node__elect_single(kv_node *n);
void kv_node__fail_all_waiting(kv_node *n, kv_etcd_err e);
/* r left the wait list: n->waiting (and n->fwd_waiting if it was forwarded) drop by one. */
void kv_node__unwait(kv_node *n, kv_node_req *r);

/* node_apply.c (worker thread, except record_lease_events: start and stop) */
void kv_node__work_ready(uv_work_t *req);
size_t kv_node__apply_count(const ready_work *w);
const struct raft_entry *kv_node__apply_entry(const ready_work *w, size_t i);
void kv_node__record_lease_events(kv_node *n, int on);

/* node_log.c: which raft log the member uses (LMDB or the WAL) and the WAL's share of a
 * ready. Loop thread unless marked. */
/* The retained log's budget (--max-raft-log-bytes, kv_node_log_admit): by default a quarter of
 * the headroom the LMDB map keeps above the quota. n->store must be open. */
uint64_t kv_node__log_budget(const kv_node *n, const kv_node_config *cfg);
/* Opens the LMDB log and, with cfg->use_wal, the WAL (converting a log still in LMDB, and
 * finishing a snapshot install a crash interrupted); without it, refuses a wal_dir that
 * exists. Seeds the log of a data dir that has state but no log. 0 or negative errno (the
 * reason is printed). */
int kv_node__log_open(kv_node *n, const kv_node_config *cfg, const uint64_t *voters,
                      size_t n_voters);
void kv_node__log_close(kv_node *n);
const struct raft_storage *kv_node__log_storage(kv_node *n);
int kv_node__log_error(kv_node *n);
/* After raft_advance(): data returned by the storage since the last call may go. */
void kv_node__log_end_cycle(kv_node *n);
/* Worker, WAL mode: the ready's snapshot meta (one without a file), entries and hard state
 * to the WAL, ONE kv_wal_sync; then w->persisted and a wake-up of the loop. */
int kv_node__wal_persist(kv_node *n, ready_work *w);
/* Worker, WAL mode, after a received snapshot file replaced data.mdb: the WAL takes the
 * snapshot marker, hard state and the ready's entries, one sync. */
int kv_node__wal_install(kv_node *n, const struct raft_snapshot_meta *m,
                         const struct raft_hard_state *hs, const struct raft_entry *e, size_t cnt);
/* Worker, WAL mode, after the synced LMDB commit that carried a log compaction at m (so the
 * state up to m->index is durable): the snapshot marker, one sync, and the segments wholly
 * below it are deleted. */
int kv_node__wal_compacted(kv_node *n, const struct raft_snapshot_meta *m);

/* node_conf.c */
int kv_node__conf_phase2(kv_node *n, kv_node_req *r, kv_result *res);
void kv_node__conf_change_applied(kv_node *n, int op, uint64_t id, uint64_t proposer,
                                  uint64_t req_id);
void kv_node__conf_drive(kv_node *n);
int kv_node__conf_fail_waiter(kv_node *n, uint64_t req_id, kv_etcd_err e, const char *detail);
void kv_node__conf_applied(kv_node *n, const struct raft_entry *e, kv_result *res);
void kv_node__conf_track_transfer(kv_node *n, kv_node_req *r);
void kv_node__conf_check(kv_node *n);

/* node_snap.c */
/* The log of a data dir with state but no log starts with a snapshot at the applied index
 * (term 1, the bootstrap voters) and a hard state committing it: *m and *hs for either log. */
void kv_node__seed_meta(const kv_node *n, const uint64_t *voters, size_t n_voters,
                        struct raft_snapshot_meta *m, struct raft_hard_state *hs);
int kv_node__seed_log(kv_node *n, const uint64_t *voters, size_t n_voters);
void kv_node__maybe_compact_log(kv_node *n);
/* Measures the retained raft log (n->log_bytes, kvd_raft_log_bytes). Loop thread. */
void kv_node__log_measure(kv_node *n);
void kv_node__compact_for_join(kv_node *n);
void kv_node__send_snapshot(kv_node *n, const struct raft_msg *m);
/* worker thread, inside the ready's batch */
/* Worker: the ready carries a snapshot with its file: the whole ready goes into that file,
 * which replaces data.mdb (w->install set). 0 or negative errno. */
int kv_node__install_file(kv_node *n, ready_work *w);
/* Loop, right after such a ready's worker returned: reopens the store and the raft log on the
 * new file (fatal on failure). */
void kv_node__install_swap(kv_node *n, ready_work *w);
/* Loop: reports due to raft (feed), metrics and start-up cleanup of snap_dir. */
void kv_node__snap_reports(kv_node *n);
void kv_node__snap_init(kv_node *n);
int kv_node__install_snapshot(kv_node *n, kv_store_batch *b, const struct raft_snapshot_meta *m,
                              const char *path);
int kv_node__persist_compaction(kv_node *n, MDB_txn *txn, const struct raft_snapshot_meta *m);

/* node_peer.c */
void kv_node__send_msgs(kv_node *n, const struct raft_msg *m, size_t count);
int kv_node__forward(kv_node *n, kv_node_req *r);
/* The leader refused a follower's proposal after it had queued it (disk low, log budget,
 * raft refused it, no longer leader, its deadline): tell the proposer (named in the entry's
 * first bytes, make_entry) now, with e (KV_ERR_NONE: "leader changed"), instead of leaving
 * its waiter to its own deadline. */
void kv_node__forward_refused(kv_node *n, const kv_node_req *r, kv_etcd_err e);

/* node_apply.c: id and proposer from the first fields of an entry (make_entry; 0 when
 * absent). */
void kv_node__entry_origin(const uint8_t *p, size_t len, uint64_t *id, uint64_t *proposer);
void kv_node__reads_drive(kv_node *n);
void kv_node__reads_ready(kv_node *n, const struct raft_read_state *rs, size_t count);
void kv_node__reads_applied(kv_node *n);
void kv_node__reads_expire(kv_node *n, uint64_t now);
void kv_node__reads_fail_all(kv_node *n, int status);

#endif
