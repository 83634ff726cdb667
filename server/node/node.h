/*
 * node: the ordered write path of one member.
 *
 * Writes arrive as packed kvdpb.InternalRequest records (apply/internal_req.h builds them).
 * kv_node_propose() queues one; the queue is bounded (--max-pending-proposals) and a full
 * queue fails fast with -EBUSY, which the API maps to RESOURCE_EXHAUSTED
 * "etcdserver: too many requests" (lesson 3: shed early, keep memory flat).
 *
 * Group commit: everything queued when no batch is running becomes the next batch, applied in
 * ONE LMDB write transaction with ONE commit (kv_store_batch_*), in queue order, each request
 * with the next log index. Only after the commit returns are the completion callbacks run, so
 * nothing is acknowledged before it is durable. This is the single ordered apply function raft
 * will slot in front of: with raft, the index comes from the committed entry.
 *
 * Threading: the apply and commit of a batch run on a libuv worker thread (uv_queue_work), at
 * most one batch at a time. Measured reason: an LMDB commit is two fdatasyncs (~1.5 ms each on
 * the CI disk), and on the loop they stalled every read and keepalive behind them; now the loop
 * keeps serving reads and renewals and gathers the next batch meanwhile. The worker touches only
 * the store and the batch; completions and lease observer events (recorded on the worker,
 * replayed here) run on the loop thread. Every other function is loop-thread only.
 */
#ifndef KV_NODE_H
#define KV_NODE_H

#include "apply/apply.h"
#include "metrics/metrics.h"
#include "mvcc/store.h"

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef struct kv_node kv_node;
typedef struct kv_node_req kv_node_req;

/* Called on the loop thread after the batch holding the request committed (or failed).
 * res is owned by the node and valid only during the call; the callee may take res->resp
 * (and must then set it to NULL) to avoid a copy. */
typedef void (*kv_node_done_fn)(void *arg, kv_result *res);

struct kv_peer_net;

typedef struct kv_node_config {
    uint32_t max_pending;        /* queued proposals; default 10000 */
    uint32_t max_health_waiters; /* health probes waiting (--max-health-probes); default 64 */
    uint32_t compact_batch_keys; /* keys per physical compaction step; default 1000 */
    uint32_t compact_batch_revs; /* records removed per compaction step; default 50 */
    /* raft. Zero values give a single member whose raft id is hdr->member_id. */
    const uint64_t *voters; /* bootstrap configuration (every --initial-cluster member) */
    size_t n_voters;
    uint32_t heartbeat_ms; /* --heartbeat-interval; default 100 */
    uint32_t election_ms;  /* --election-timeout; default 1000 */
    uint32_t
        max_pending_reads;   /* linearizable reads waiting (--max-pending-reads); default 10000 */
    uint64_t snapshot_count; /* applied entries between log compactions; default 10000 */
    const char *snap_dir;    /* where snapshots are prepared/received; NULL: no snapshots */
    uint64_t seed;           /* raft PRNG seed; 0: derived from the member id and the clock */
    /* Bounds of what peers can grow. 0 = default. */
    size_t max_inbox_bytes;  /* raft messages waiting to be stepped (--max-raft-inbox-bytes);
                                default 64 MiB */
    uint32_t max_inbox_msgs; /* same, in messages (--max-raft-inbox-messages); default 4096 */
    uint32_t max_forwarded;  /* proposals this member forwarded to the leader, not applied
                                yet (--max-forwarded-proposals); default 10000 */
    int enable_failpoints;   /* --enable-failpoints: disk failpoints (node/disk_failpoint.h) */
    uint64_t max_log_bytes;  /* retained raft log bytes (--max-raft-log-bytes); 0: a quarter
                                of the store's headroom (kv_store_map_size - quota) */
    /* Where the raft log lives (node_log.c, docs/raftlog.md). use_wal (--experimental-wal,
     * kvd's default): in the write-ahead log in wal_dir (server/wal/), one flush per ready; a
     * data dir whose log is still in LMDB is converted at start. 0 (--experimental-wal=false):
     * in data.mdb (server/raftlog/), and a wal_dir that exists refuses the start (its log would
     * be ignored). wal_dir NULL: no WAL (a node embedded without a data dir of its own). */
    const char *wal_dir;
    int use_wal;
    uint64_t wal_segment_bytes; /* --wal-segment-bytes; 0: 64 MiB */
    int unsafe_no_fsync;        /* --unsafe-no-fsync: the WAL writes but never flushes */
} kv_node_config;

typedef struct kv_node_stats {
    uint64_t pending;
    uint64_t proposals_total;
    uint64_t refused_total;
    uint64_t batches_total;
    uint64_t applied_index;
    uint64_t last_batch_size;
    uint64_t max_batch_size;
    uint64_t apply_retries; /* readies applied a second time (node_apply.c apply_wal) */
} kv_node_stats;

/* The raft log lives in the store's LMDB map (docs/ARCHITECTURE.md, "Alarms, quota and
 * defragment"): 0 if a proposal of len bytes fits the retained-log budget (log pages after
 * the last commit + bytes proposed since + len <= max_log_bytes), -EBUSY if not (answer
 * "etcdserver: too many requests": the log compacts early, retry; counted in
 * kvd_raft_log_refused_total). Loop thread. */
int kv_node_log_admit(kv_node *n, size_t len);
/* The state's share of the data file's pages in use: kv_store_db_size_in_use less the raft
 * log's pages at the last commit. It is what --quota-backend-bytes bounds (api/quota.c): etcd's
 * backend holds no raft log, and kvd's log is bounded by --max-raft-log-bytes instead. Loop
 * thread. */
int64_t kv_node_state_bytes_in_use(kv_node *n);

/* store and metrics (may be NULL) are borrowed and must outlive the node. hdr is copied. */
int kv_node_init(kv_node **out, uv_loop_t *loop, kv_store *store, const kv_node_config *cfg,
                 const kv_header_info *hdr, kv_metrics *metrics);

/* Fails every queued request with KV_ERR_STOPPED ("etcdserver: server stopped"), detaches the
 * node from its peer transport (kv_node_attach_peers: the caller may close that right after;
 * nothing is sent afterwards, not even by a ready still in flight), closes the handles and
 * frees the node in their close callbacks (after the in-flight ready, if any). */
void kv_node_close(kv_node *n);

/* Queues a packed InternalRequest. Takes ownership of req (malloc'd) in every case.
 * done may be NULL (fire and forget, e.g. lease revokes). On success *handle (if non-NULL)
 * lets the caller detach later. Returns 0, -EBUSY when the queue is full, -ESHUTDOWN when
 * closing. */
int kv_node_propose(kv_node *n, uint8_t *req, size_t len, kv_node_done_fn done, void *arg,
                    kv_node_req **handle);

/* The caller lost interest (its RPC was cancelled): done will not be called. The write is
 * still applied. */
void kv_node_req_detach(kv_node_req *r);

/* Calls done(arg, 0) after the next batch has committed (or immediately-next-iteration if
 * the queue is idle): a read barrier through the same path as writes. /health uses it, so a
 * stalled apply path makes /health fail (lesson 13). Same bound as proposals. */
int kv_node_barrier(kv_node *n, void (*done)(void *arg, int status), void *arg);

/* The /health barrier (lesson 13): like kv_node_barrier (done(arg, 0) once everything
 * queued before it has committed; -ECANCELED when the node closes), but client load cannot
 * shed it: it is queued outside the max_pending bound, in a reserved slot. Concurrent probes
 * coalesce: a probe arriving while a health barrier is queued and not yet running joins it, so
 * at most one health barrier waits in the queue however many probes arrive. The probes waiting
 * (queued or in a running batch) are bounded by cfg max_health_waiters: -EBUSY beyond it
 * (metric kvd_health_probes_refused_total). A stalled apply path still holds them (lesson 13).
 * Returns 0, -EBUSY, -ENOMEM or -ESHUTDOWN. */
int kv_node_health_barrier(kv_node *n, void (*done)(void *arg, int status), void *arg);

/* The lessor's observer. The node installs its own recording observer in the store (apply
 * runs on a worker) and forwards each batch's events here, on the loop thread, after the batch
 * committed and before its completions run. NULL detaches. */
void kv_node_set_lease_observer(kv_node *n, const kv_store_lease_observer *obs);

/* The peer transport (NULL: none, a single member). Borrowed; the node sends raft messages,
 * forwarded proposals and read-index requests through it. Its handler must call
 * kv_node_on_peer_message / kv_node_on_peer_snapshot. */
void kv_node_attach_peers(kv_node *n, struct kv_peer_net *peers);
void kv_node_on_peer_message(kv_node *n, uint64_t from, uint32_t type, const uint8_t *buf,
                             size_t len);
/* A snapshot file received from `from` (the transport handed over its ownership). */
void kv_node_on_peer_snapshot(kv_node *n, uint64_t from, const uint8_t *hdr, size_t hdr_len,
                              const char *path);
/* Called on the loop with primary = 1 once this member leads and has applied an entry of its
 * own term (the lessor promotes then), and with 0 when it stops leading. */
void kv_node_set_leader_hook(kv_node *n, void (*fn)(void *arg, int primary), void *arg);
/* Server-chosen lease ids in log order (apply/internal_req.h): while this member leads, fn
 * names a new lease id for each grant entry that asks for it, on the loop, just before the
 * entry is handed to raft, so ids increase in log order. NULL detaches (grants then keep the
 * id their receiving member named). */
void kv_node_set_lease_namer(kv_node *n, int64_t (*fn)(void *arg), void *arg);

/* Lease reads and renewals (lease/lease_fwd.h, etcd's waitAppliedIndex): the raft commit index as
 * this member knows it now, and the index applied here (the store committed it and the lessor
 * took its lease events). On the leader, every write acknowledged by any member before the
 * call is at or below kv_node_commit_index. The applied hook runs on the loop after each
 * commit that advanced the applied index, once the lessor took that commit's lease events.
 * NULL detaches. */
uint64_t kv_node_commit_index(const kv_node *n);
/* The same for the lessor alone (renewals, TimeToLive TTLs): the newest lease grant, revoke or
 * checkpoint entry this member proposed as leader (followers' ones included: the leader
 * proposes them), capped at the commit index. Entries of earlier terms are applied before a
 * new leader's lessor serves, so on a serving leader every lease entry acknowledged before
 * the call is at or below it, and KV writes flooding the log do not delay renewals. */
uint64_t kv_node_lease_index(const kv_node *n);
/* Leader: may its lessor answer, now, a lease request that arrived at arrived_ms
 * (kv_node_now_ms())? A leader can be replaced without knowing it: cut off from the others
 * while it still runs (a delayed or partitioned peer port), or not driving raft at all (the
 * apply-stall failpoint, a ready in flight for long). The others then elect a new leader and
 * acknowledge its grants and revokes while its lessor answers from a map those writes never
 * reach. So it answers only after a quorum acknowledged one of its own read-index rounds, in
 * its current term, that started either
 *   - after the request arrived (ReadIndex: whatever the link's latency), or
 *   - less than half an election timeout ago, while its raft is driven and not stalled (a
 *     leader lease: each of those followers heard from it after the start and, by its
 *     check-quorum lease, raft.c, votes for no one for an election timeout minus a tick).
 * Never while a leadership transfer is under way, nor with a round from within an election
 * timeout after one (a transfer's vote bypasses the followers' lease). The call asks for a
 * round when it must wait or the last is older than a quarter of an election timeout (a
 * steady flow of renewals never waits); a completed round runs the applied hook, so waiting
 * requests are answered at once. A single voter is always live. Loop thread.
 * docs/ARCHITECTURE.md "Leases". */
int kv_node_lease_live(kv_node *n, uint64_t arrived_ms);
/* The monotonic clock (ms) of kv_node_lease_live's arrival times. */
uint64_t kv_node_now_ms(void);
uint64_t kv_node_applied_index(const kv_node *n);
void kv_node_set_applied_hook(kv_node *n, void (*fn)(void *arg, uint64_t applied), void *arg);

/* Called on the loop when a configuration change applied (op KV_NODE_MEMBER_ADD,
 * _ADD_LEARNER or _REMOVE for member id): the server connects or drops the peer. */
void kv_node_set_conf_hook(kv_node *n, void (*fn)(void *arg, int op, uint64_t id), void *arg);

/* The member's publish request (its name and client URLs, members_boot.h): proposed once a
 * leader is known, retried until it applied (etcd's publish). Takes ownership of req. */
void kv_node_set_publish(kv_node *n, uint8_t *req, size_t len);

/* Other users of the peer transport (leases in a cluster): frame types >= 16 are
 * theirs. The handler runs on the loop for every such frame from a peer; buf is valid only
 * during the call. kv_node_peer_send queues a frame (peer_net.h semantics: 0, -EAGAIN queue
 * full, -ENOTCONN, -ENOENT no such peer, -ENODEV no transport). kv_node_leader: the leader's
 * member id, 0 if none known; kv_node_is_leader: this member leads. */
#define KV_NODE_PEER_TYPE_MIN 16u
int kv_node_set_peer_handler(kv_node *n, uint32_t type,
                             void (*fn)(void *arg, uint64_t from, const uint8_t *buf, size_t len),
                             void *arg);
int kv_node_peer_send(kv_node *n, uint64_t to, uint32_t type, const uint8_t *buf, size_t len);
/* The same on the peer's priority queue (kv_peer_net_send_prio): sent ahead of raft traffic,
 * bounded by --peer-max-priority-queue-bytes. For lease renewals and their answers. */
int kv_node_peer_send_prio(kv_node *n, uint64_t to, uint32_t type, const uint8_t *buf, size_t len);
uint64_t kv_node_leader(const kv_node *n);
int kv_node_is_leader(const kv_node *n);
uint64_t kv_node_self(const kv_node *n);

/* Called on the loop after this member installed a snapshot from the leader (its state was
 * replaced: the lessor reloads its map, mvcc/install.c: a file swap). NULL detaches. */
void kv_node_set_snapshot_hook(kv_node *n, void (*fn)(void *arg), void *arg);

/* Failpoint (tests only): while stalled, queued requests are not applied, so writes and
 * /health hang until the queue bound sheds them. */
void kv_node_set_stalled(kv_node *n, int stalled);
int kv_node_stalled(const kv_node *n);

const kv_header_info *kv_node_header(const kv_node *n);
/* Store revision after the last committed batch (cached: no read transaction). */
int64_t kv_node_revision(const kv_node *n);
void kv_node_set_term(kv_node *n, uint64_t term);
/* A joining member learned its cluster's id (response headers carry it). */
void kv_node_set_cluster_id(kv_node *n, uint64_t cluster_id);
void kv_node_get_stats(const kv_node *n, kv_node_stats *st);

/* ---- alarms and exclusive items ---- */

/* Queues an exclusive item: once everything queued before it has committed, work(arg) runs
 * alone on the apply worker (no batch open, none starts until it ends), then done(arg,
 * status) on the loop, before the next batch (Defragment uses it). Same queue bound as
 * proposals (-EBUSY); on close done gets -ECANCELED. */
int kv_node_exclusive(kv_node *n, int (*work)(void *arg), void (*done)(void *arg, int status),
                      void *arg);

/* Alarm mask (1u << KV_ALARM_*) as the member reports it: the store's alarms plus NOSPACE
 * while the last commit failed on a full disk. Alarms the store asks for (kv_store_take_alarms)
 * are proposed as ACTIVATE requests for this member, one at a time, from the loop. The gauge
 * kvd_alarms{type="NOSPACE"|"CORRUPT"} follows the mask. */
unsigned kv_node_alarms(const kv_node *n);
/* Batched physical compaction: while the store has one pending, a compaction-only batch of one
 * step (at most compact_batch_keys keys, compact_batch_revs removed records and
 * KV_NODE_COMPACT_STEP_US of work; kv_store_compact_step, kvd_compaction_step_removed_max)
 * follows each write batch, and runs back to back with nothing queued; a write batch never
 * carries a step; a restart resumes it. kv_node_compact_wait calls
 * fn(arg, 0) once no compaction is pending (after the batch that finished it committed),
 * fn(arg, -ECANCELED) when the node closes, or fn(arg, < 0) when a step or its batch failed
 * (the compaction stays pending and is retried with the next write batch). Returns 0 (waiting;
 * *handle, if non-NULL, lets the caller detach), 1 if nothing is pending (fn not called),
 * -ESHUTDOWN, -ENOMEM. */
typedef struct kv_node_compact_waiter kv_node_compact_waiter;
int kv_node_compact_wait(kv_node *n, void (*fn)(void *arg, int status), void *arg,
                         kv_node_compact_waiter **handle);
void kv_node_compact_wait_detach(kv_node_compact_waiter *h);
int kv_node_compact_pending(const kv_node *n);
/* (addition) Commit hook: called on the loop thread after each batch committed, after the
 * lease events and before the completions, with the store revision after the batch (only when
 * it moved). The watch hub reads the new revisions from LMDB (mvcc/events.h). NULL detaches. */
typedef void (*kv_node_commit_fn)(void *arg, int64_t revision);
void kv_node_set_commit_hook(kv_node *n, kv_node_commit_fn fn, void *arg);
/* (addition) Auth token hook: called on the loop thread, in log order, for every entry whose
 * apply result has auth_tokens set (mvcc/store.h KV_RESULT_AUTH_*: an Authenticate applied,
 * AuthDisable applied), on every member (quiet results too), once the ready's results are
 * final (after its commit, or at its early acknowledgement) and before its completions run,
 * so the proposer's answer and the token exist together. entry (the packed InternalRequest,
 * with the node's id/proposer prefix) is valid only during the call. NULL detaches. */
typedef void (*kv_node_auth_fn)(void *arg, int kind, uint64_t index, const uint8_t *entry,
                                size_t len);
void kv_node_set_auth_hook(kv_node *n, kv_node_auth_fn fn, void *arg);

/* ---- raft ---- */

/* The member's raft state as Status and /health report it. role: enum raft_role values
 * (0 follower, 1 pre-candidate, 2 candidate, 3 leader). leader 0 = none known. */
typedef struct kv_node_raft_status {
    uint64_t term, leader, commit_index, applied_index, last_index;
    int role;
    int is_learner;
} kv_node_raft_status;
void kv_node_get_raft_status(const kv_node *n, kv_node_raft_status *st);

/* Linearizable read barrier (ReadIndex): done(arg, 0) once this member has applied at least
 * the leader's commit index as of a moment after the call (a heartbeat quorum confirmed the
 * leadership). Concurrent calls share one round. On a follower the read index comes from the
 * leader over the peer transport. Errors passed to done: -EAGAIN no leader ("etcdserver: no
 * leader"), -ETIMEDOUT ("etcdserver: request timed out"), -ECANCELED (closing), -EBUSY (bound).
 * Returns 0 or -EBUSY/-ENOMEM/-ESHUTDOWN (done not called then). */
int kv_node_read_index(kv_node *n, void (*done)(void *arg, int status), void *arg);

/* Read-your-writes for serializable reads (loop thread). A write may be acknowledged before
 * the LMDB commit that applied it is visible to readers (an apply-only commit: the entry is
 * durable in a quorum's logs; node_ready.c "early acknowledgement"). Returns 1 when every
 * acknowledged write is visible (read at once; done is not called), 0 when done(arg, 0) will
 * run once it is (or done(arg, -ETIMEDOUT / -ECANCELED)), or -EBUSY/-ENOMEM/-ESHUTDOWN. */
int kv_node_read_visible(kv_node *n, void (*done)(void *arg, int status), void *arg);
/* 1 when every write this member acknowledged is visible to readers (kv_node_read_visible
 * would return 1). */
int kv_node_writes_visible(const kv_node *n);
/* A counter that moves once an applied auth management entry, or an installed snapshot, is
 * visible in LMDB (before the answers and reads it releases). A request admitted against the
 * auth state at one value and served at another is checked again (api/read_req.c). Loop. */
uint64_t kv_node_auth_generation(const kv_node *n);
/* The store revision after the last write this member acknowledged before its commit was
 * visible (0: none). What a request that takes "the current revision" without reading the
 * store (a watch created without a start revision) must count as current. Loop thread. */
int64_t kv_node_acked_revision(const kv_node *n);

/* Membership changes (Cluster service). op: */
enum {
    KV_NODE_MEMBER_ADD = 1,
    KV_NODE_MEMBER_ADD_LEARNER,
    KV_NODE_MEMBER_REMOVE,
    KV_NODE_MEMBER_PROMOTE
};
/* Proposes the change for member id. record: a packed kvdpb.Member (peer URLs, learner flag)
 * stored in the members table when the change applies (ADD/ADD_LEARNER; NULL otherwise). done
 * gets res->err KV_ERR_NONE once the configuration entry applied on this member, or etcd's
 * error as a value (e.g. KV_ERR_UNHEALTHY, KV_ERR_MEMBER_NOT_FOUND). Takes ownership of record
 * (malloc'd). Returns 0 or a negative errno. */
int kv_node_change_member(kv_node *n, int op, uint64_t id, uint8_t *record, size_t record_len,
                          kv_node_done_fn done, void *arg);

/* Leader transfer (MoveLeader): done(arg, 0) once target leads, -ETIMEDOUT after an election
 * timeout, -EPERM when this member is not the leader ("etcdserver: not leader"), -EINVAL when
 * target is not a voter. */
int kv_node_move_leader(kv_node *n, uint64_t target, void (*done)(void *arg, int status),
                        void *arg);

/* The raft log's flush took `seconds` (etcd_disk_wal_fsync_duration_seconds). Today the log
 * is flushed by the LMDB commit of the ready cycle (node_apply.c); a separate log writer calls
 * this for each of its fsyncs instead. Any thread; n may be NULL (no-op). */
void kv_node_observe_wal_fsync(kv_node *n, double seconds);

#endif
