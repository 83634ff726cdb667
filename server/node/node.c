/*
 * node.c: the node's public API (node.h): the request queue and its bounds, barriers,
 * exclusive items, compaction waiters, alarms, metrics, init and close. The raft driver that
 * takes requests from the queue is node_ready.c; the peer side is node_peer.c (node_int.h).
 */
#include "common/varint.h"
#include "common/clock.h"
#include "node/node_int.h"

#include "internal.pb-c.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void kv_node__maybe_publish(kv_node *n);

uint64_t kv_node__now_ms(void)
{
    return kv_mono_ms();
}

static double gauge_pending(void *arg)
{
    return (double)((kv_node *)arg)->pending;
}

static double gauge_health_waiting(void *arg)
{
    return (double)((kv_node *)arg)->health_waiting;
}

static double gauge_cpending(void *arg)
{
    return (double)((kv_node *)arg)->compact_pending;
}

static double gauge_cstep_max(void *arg)
{
    return (double)((kv_node *)arg)->cstep_max;
}

static double gauge_applied(void *arg)
{
    return (double)((kv_node *)arg)->st.applied_index;
}

static double gauge_waiting(void *arg)
{
    return (double)((kv_node *)arg)->waiting;
}

static double gauge_term(void *arg)
{
    kv_node *n = arg;
    return n->raft_ok ? (double)raft_current_term(&n->raft) : 0.0;
}

static double gauge_commit(void *arg)
{
    kv_node *n = arg;
    return n->raft_ok ? (double)raft_commit_index(&n->raft) : 0.0;
}

static double gauge_inbox_bytes(void *arg)
{
    return (double)((kv_node *)arg)->inbox_bytes;
}

static double gauge_inbox_msgs(void *arg)
{
    return (double)((kv_node *)arg)->inbox_n;
}

static double gauge_inbox_peak_bytes(void *arg)
{
    return (double)((kv_node *)arg)->inbox_peak_bytes;
}

static double gauge_inbox_peak_msgs(void *arg)
{
    return (double)((kv_node *)arg)->inbox_peak_n;
}

static double gauge_reads_waiting(void *arg)
{
    return (double)((kv_node *)arg)->reads_waiting;
}

static double gauge_rreads(void *arg)
{
    return (double)((kv_node *)arg)->rreads_n;
}

static double gauge_fwd_waiting(void *arg)
{
    return (double)((kv_node *)arg)->fwd_waiting;
}

static double gauge_has_leader(void *arg)
{
    return ((kv_node *)arg)->leader != 0 ? 1.0 : 0.0;
}

static double gauge_is_leader(void *arg)
{
    return ((kv_node *)arg)->role == RAFT_LEADER ? 1.0 : 0.0;
}

/* etcd: proposals started and not yet applied (or failed) */
static double gauge_etcd_pending(void *arg)
{
    kv_node *n = arg;
    return (double)n->pending + (double)n->waiting;
}

static double counter_slow_applies(void *arg)
{
    return (double)atomic_load(&((kv_node *)arg)->slow_applies);
}

static double counter_apply_retries(void *arg)
{
    return (double)atomic_load(&((kv_node *)arg)->apply_retries);
}

void kv_node_observe_wal_fsync(kv_node *n, double seconds)
{
    if (n)
        kv_metric_observe(n->m_wal_fsync, seconds);
}

/* etcd 3.4's names, types and meanings (etcdserver/metrics.go, wal/metrics.go,
 * mvcc/backend/metrics.go); docs/metrics.md says what each counts in kvd. */
static void register_etcd_metrics(kv_node *n, kv_metrics *metrics)
{
    kv_metrics_gauge_fn(metrics, "etcd_server_has_leader",
                        "Whether or not a leader exists. 1 is existence, 0 is not.",
                        gauge_has_leader, n);
    kv_metrics_gauge_fn(metrics, "etcd_server_is_leader",
                        "Whether or not this member is a leader. 1 if is, 0 otherwise.",
                        gauge_is_leader, n);
    n->m_etcd_leader_changes = kv_metrics_counter(metrics, "etcd_server_leader_changes_seen_total",
                                                  "The number of leader changes seen.", NULL);
    /* etcd sets these two as gauges despite their names */
    kv_metrics_gauge_fn(metrics, "etcd_server_proposals_committed_total",
                        "The total number of consensus proposals committed.", gauge_commit, n);
    kv_metrics_gauge_fn(metrics, "etcd_server_proposals_applied_total",
                        "The total number of consensus proposals applied.", gauge_applied, n);
    kv_metrics_gauge_fn(metrics, "etcd_server_proposals_pending",
                        "The current number of pending proposals to commit.", gauge_etcd_pending,
                        n);
    n->m_proposals_failed = kv_metrics_counter(metrics, "etcd_server_proposals_failed_total",
                                               "The total number of failed proposals seen.", NULL);
    n->m_slow_read_indexes = kv_metrics_counter(
        metrics, "etcd_server_slow_read_indexes_total",
        "The total number of pending read indexes not in sync with leader's or timed out read "
        "index requests.",
        NULL);
    n->m_heartbeat_failures = kv_metrics_counter(
        metrics, "etcd_server_heartbeat_send_failures_total",
        "The total number of leader heartbeat send failures (likely overloaded from slow disk).",
        NULL);
    n->m_early_hb_acks = kv_metrics_counter(
        metrics, "kvd_raft_heartbeats_answered_early_total",
        "Leader heartbeats this follower answered while its own ready was being persisted "
        "(node_peer.c early_heartbeat_ack).",
        NULL);
    kv_metrics_counter_fn(metrics, "etcd_server_slow_apply_total",
                          "The total number of slow apply requests (likely overloaded from slow "
                          "disk).",
                          counter_slow_applies, n);
    kv_metrics_counter_fn(metrics, "kvd_apply_retries_total",
                          "Readies applied a second time, with a child transaction per request, "
                          "after a request failed in the shared first pass (node_apply.c).",
                          counter_apply_retries, n);
    double b[14];
    kv_metrics_exp_buckets(b, 0.001, 2, 14); /* etcd: ExponentialBuckets(0.001, 2, 14) */
    n->m_wal_fsync =
        kv_metrics_histogram(metrics, "etcd_disk_wal_fsync_duration_seconds",
                             "The latency distributions of fsync called by WAL.", NULL, b, 14);
    n->m_backend_commit =
        kv_metrics_histogram(metrics, "etcd_disk_backend_commit_duration_seconds",
                             "The latency distributions of commit called by backend.", NULL, b, 14);
}

/* Completes a barrier (plain or health) with status. */
static void finish_barrier(kv_node_req *r, int status)
{
    if (r->barrier_done)
        r->barrier_done(r->arg, status);
    r->barrier_done = NULL;
    while (r->waiters) {
        health_waiter *hw = r->waiters;
        r->waiters = hw->next;
        r->health->health_waiting--;
        hw->done(hw->arg, status);
        free(hw);
    }
}

/* r is done: its memory may still be referenced by raft until the next raft_advance (raft.h,
 * "Ownership"), so it goes to the grave, emptied after the advance. */
static void bury(kv_node *n, kv_node_req *r)
{
    kv_list_insert_head(&n->grave, &r->link);
}

void kv_node__fail_err(kv_node *n, kv_node_req *r, kv_etcd_err e)
{
    kv_node__fail_req(n, r, e, NULL);
}

/* A barrier failed with e: -ETIMEDOUT when e says "no answer in time, try again" (etcd's
 * unavailable errors: no or a changed leader, a timeout, a stopping or overloaded member),
 * -ECANCELED otherwise. */
static int barrier_status(kv_etcd_err e)
{
    switch (e) {
    case KV_ERR_NO_LEADER:
    case KV_ERR_LEADER_CHANGED:
    case KV_ERR_NOT_CAPABLE:
    case KV_ERR_STOPPED:
    case KV_ERR_TIMEOUT:
    case KV_ERR_TIMEOUT_DUE_TO_LEADER_FAIL:
    case KV_ERR_TIMEOUT_DUE_TO_CONNECTION_LOST:
    case KV_ERR_TIMEOUT_WAIT_APPLIED_INDEX:
    case KV_ERR_UNHEALTHY:
    case KV_ERR_NOT_SUPPORTED_FOR_LEARNER:
    case KV_ERR_APPLY_SCHEDULE:
    case KV_ERR_SNAPSHOT_CLOSED:
        return -ETIMEDOUT;
    default:
        return -ECANCELED;
    }
}

void kv_node__fail_req(kv_node *n, kv_node_req *r, kv_etcd_err e, const char *detail)
{
    switch (r->kind) {
    case REQ_EXCL:
        if (r->excl_done)
            r->excl_done(r->arg, -ECANCELED);
        break;
    case REQ_BARRIER:
    case REQ_HEALTH:
        finish_barrier(r, barrier_status(e));
        break;
    case REQ_MOVE_LEADER:
        if (r->barrier_done)
            r->barrier_done(r->arg, -ETIMEDOUT);
        break;
    case REQ_FORWARDED: /* its waiter is on the follower that forwarded it */
        kv_node__forward_refused(n, r, e);
        break;
    default:
        kv_metric_inc(n->m_proposals_failed);
        if (r->done) {
            kv_result res;
            memset(&res, 0, sizeof(res));
            res.err = e;
            snprintf(res.detail, sizeof(res.detail), "%s", detail ? detail : "");
            r->done(r->arg, &res);
        }
    }
    r->done = NULL;
    bury(n, r);
}

void kv_node__finish_req(kv_node *n, kv_node_req *r, kv_result *res)
{
    switch (r->kind) {
    case REQ_BARRIER:
    case REQ_HEALTH:
        finish_barrier(r, 0);
        break;
    case REQ_MOVE_LEADER:
        if (r->barrier_done)
            r->barrier_done(r->arg, 0);
        break;
    case REQ_FORWARDED:
    case REQ_EXCL:
        break;
    case REQ_CONF:
        if (kv_node__conf_phase2(n, r, res))
            return; /* kept: waits for its configuration entry */
        break;
    default:
        if (r->done)
            r->done(r->arg, res);
    }
    r->done = NULL;
    bury(n, r);
}

static void on_idle(uv_idle_t *h)
{
    (void)h; /* only keeps uv_run from blocking in poll while the node has work */
}

void kv_node__kick(kv_node *n)
{
    if (!n->closing && !n->stalled)
        uv_idle_start(&n->idle, on_idle);
}

void kv_node__maybe_free(kv_node *n)
{
    if (n->closing && n->handles_open == 0 && n->inflight == NULL && n->committing == NULL &&
        !n->excl_busy && !n->snap_copying) {
        kv_node__raft_stop(n);
        kv_node_req *r;
        while ((r = kv_node__first(&n->grave))) {
            kv_list_remove(&r->link);
            free(r->data);
            free(r);
        }
        free(n);
    }
}

/* ---- alarms ---- */

unsigned kv_node_alarms(const kv_node *n)
{
    return kv_store_alarms(n->store) | (n->disk_full ? 1u << KV_ALARM_NOSPACE : 0u);
}

void kv_node__update_alarm_metrics(kv_node *n)
{
    unsigned a = kv_node_alarms(n);
    for (int t = 1; t < 3; t++)
        kv_metric_set(n->m_alarm[t], (a & (1u << t)) ? 1.0 : 0.0);
}

static void on_alarm_proposed(void *arg, kv_result *res)
{
    kv_node *n = arg;
    if (res->err != KV_ERR_NONE)
        fprintf(stderr, "kvd: error: raising an alarm failed: %s%s\n", kv_etcd_err_msg(res->err),
                res->detail);
    n->alarm_pending = 0;
    kv_node__update_alarm_metrics(n);
}

/* Proposes ACTIVATE <type> for this member through the log, as etcd's quotaAlarmer and
 * checkHashKV do (at most one proposal in flight). */
static void raise_alarm(kv_node *n, int type)
{
    if (n->alarm_pending || n->closing)
        return;
    Etcdserverpb__AlarmRequest ar = ETCDSERVERPB__ALARM_REQUEST__INIT;
    ar.action = ETCDSERVERPB__ALARM_REQUEST__ALARM_ACTION__ACTIVATE;
    ar.memberid = n->hdr.member_id;
    ar.alarm = (Etcdserverpb__AlarmType)type;
    Kvdpb__InternalRequest ir = KVDPB__INTERNAL_REQUEST__INIT;
    ir.request_case = KVDPB__INTERNAL_REQUEST__REQUEST_ALARM;
    ir.alarm = &ar;
    size_t len = kvdpb__internal_request__get_packed_size(&ir);
    uint8_t *buf = malloc(len ? len : 1);
    if (buf == NULL) {
        kv_store_request_alarm(n->store, type); /* retried at the next loop iteration */
        return;
    }
    kvdpb__internal_request__pack(&ir, buf);
    kv_node_req *h = NULL;
    if (kv_node_propose(n, buf, len, on_alarm_proposed, n, &h) == 0)
        h->essential = 1;
    else {
        kv_store_request_alarm(n->store, type);
        return;
    }
    n->alarm_pending = 1u << type;
}

void kv_node__raise_requested_alarms(kv_node *n)
{
    if (n->alarm_pending)
        return;
    unsigned want = kv_store_take_alarms(n->store);
    for (int t = 1; t < 32 && want; t++) {
        if (!(want & (1u << t)))
            continue;
        want &= ~(1u << t);
        if (n->alarm_pending) { /* one at a time: give the rest back */
            kv_store_request_alarm(n->store, t);
            continue;
        }
        raise_alarm(n, t);
    }
}

/* ---- handles ---- */

static void on_check(uv_check_t *h)
{
    kv_node *n = h->data;
    if (n->closing)
        return;
    kv_node__raise_requested_alarms(n);
    kv_node__drive(n);
}

static void on_tick(uv_timer_t *h)
{
    kv_node *n = h->data;
    n->ticks_due++;
    uint64_t now = kv_node__now_ms();
    /* Requests never proposed (no leader) and proposals never applied fail at their deadline;
     * both queues are in arrival order, so only their heads need a look. */
    kv_node_req *r;
    while ((r = kv_node__first(&n->queue)) && r->kind != REQ_EXCL && r->deadline_ms <= now) {
        kv_list_remove(&r->link);
        if (r == n->health_q)
            n->health_q = NULL;
        else
            n->pending--;
        kv_node__fail_err(n, r, n->leader ? KV_ERR_TIMEOUT : KV_ERR_NO_LEADER);
    }
    while ((r = kv_node__first(&n->wait)) && r->deadline_ms <= now) {
        kv_list_remove(&r->link);
        kv_node__unwait(n, r);
        kv_node__fail_err(n, r, KV_ERR_TIMEOUT);
    }
    kv_node__reads_expire(n, now);
    kv_node__maybe_publish(n);
    kv_node__kick(n);
}

static void on_handle_closed(uv_handle_t *h)
{
    kv_node *n = h->data;
    n->handles_open--;
    kv_node__maybe_free(n);
}

static void register_metrics(kv_node *n, kv_metrics *metrics)
{
    n->metrics = metrics;
    if (!metrics)
        return;
    register_etcd_metrics(n, metrics);
    n->m_batches = kv_metrics_counter(metrics, "kvd_apply_batches_total",
                                      "Raft readies persisted/applied in one LMDB commit.", NULL);
    n->m_proposals =
        kv_metrics_counter(metrics, "kvd_proposals_total", "Write requests queued.", NULL);
    n->m_refused = kv_metrics_counter(
        metrics, "kvd_proposals_refused_total",
        "Write requests refused because the queue was full (--max-pending-proposals).", NULL);
    n->m_log_bytes = kv_metrics_gauge(
        metrics, "kvd_raft_log_bytes",
        "Bytes of the retained raft log (against --max-raft-log-bytes): in the data file, or "
        "the WAL segments' records (--experimental-wal).",
        NULL);
    n->m_log_refused = kv_metrics_counter(
        metrics, "kvd_raft_log_refused_total",
        "Writes refused because the retained raft log was at --max-raft-log-bytes.", NULL);
    n->m_log_early = kv_metrics_counter(
        metrics, "kvd_raft_log_compactions_by_bytes_total",
        "Raft log compactions started because the log passed a quarter of --max-raft-log-bytes.",
        NULL);
    n->m_batch_size_max = kv_metrics_gauge(metrics, "kvd_apply_batch_size_max",
                                           "Most entries applied in one commit so far.", NULL);
    n->m_fsyncs = kv_metrics_counter(metrics, "kvd_fsyncs_total",
                                     "fdatasync calls issued by the raft log and the state, by "
                                     "file: db (LMDB: two per synced commit), wal (the raft "
                                     "log's WAL, --experimental-wal).",
                                     "file=\"db\"");
    n->m_fsyncs_wal = kv_metrics_counter(metrics, "kvd_fsyncs_total",
                                         "fdatasync calls issued by the raft log and the state, "
                                         "by file: db (LMDB: two per synced commit), wal (the "
                                         "raft log's WAL, --experimental-wal).",
                                         "file=\"wal\"");
    n->m_early_advances = kv_metrics_counter(
        metrics, "kvd_raft_early_advances_total",
        "Readies (--experimental-wal) after which raft went on before their LMDB commit "
        "returned: the next ready's WAL flush overlapped that commit.",
        NULL);
    n->m_early_acks = kv_metrics_counter(
        metrics, "kvd_early_acks_total",
        "Apply-only commits whose writes were acknowledged before the commit's flush (their "
        "entries were durable in a quorum's logs).",
        NULL);
    n->m_entries = kv_metrics_counter(metrics, "kvd_raft_applied_entries_total",
                                      "Committed raft entries applied.", NULL);
    n->m_forwarded = kv_metrics_counter(metrics, "kvd_proposals_forwarded_total",
                                        "Proposals forwarded to the leader.", NULL);
    n->m_leader_changes = kv_metrics_counter(metrics, "kvd_leader_changes_seen_total",
                                             "Leader changes seen by this member.", NULL);
    n->m_reads = kv_metrics_counter(metrics, "kvd_read_index_total",
                                    "Linearizable read barriers completed.", NULL);
    n->m_inbox_dropped =
        kv_metrics_counter(metrics, "kvd_raft_inbox_dropped_total",
                           "Raft messages dropped because the inbox bound was reached.", NULL);
    kv_metrics_gauge_fn(metrics, "kvd_proposals_pending", "Write requests queued, not proposed.",
                        gauge_pending, n);
    /* Bounds of what peers can grow. */
    n->m_inbox_dropped_msgs = kv_metrics_counter(
        metrics, "kvd_raft_inbox_dropped_by_bound_total",
        "Raft messages dropped, by the inbox bound that was reached.", "bound=\"messages\"");
    n->m_inbox_dropped_bytes = kv_metrics_counter(
        metrics, "kvd_raft_inbox_dropped_by_bound_total",
        "Raft messages dropped, by the inbox bound that was reached.", "bound=\"bytes\"");
    kv_metrics_gauge_fn(metrics, "kvd_raft_inbox_bytes",
                        "Wire bytes of the raft messages waiting to be stepped "
                        "(--max-raft-inbox-bytes).",
                        gauge_inbox_bytes, n);
    kv_metrics_gauge_fn(metrics, "kvd_raft_inbox_messages",
                        "Raft messages waiting to be stepped (--max-raft-inbox-messages).",
                        gauge_inbox_msgs, n);
    kv_metrics_gauge_fn(metrics, "kvd_raft_inbox_bytes_peak",
                        "Most wire bytes the raft inbox held so far.", gauge_inbox_peak_bytes, n);
    kv_metrics_gauge_fn(metrics, "kvd_raft_inbox_messages_peak",
                        "Most messages the raft inbox held so far.", gauge_inbox_peak_msgs, n);
    kv_metrics_gauge_fn(metrics, "kvd_read_index_waiting",
                        "Linearizable reads waiting for a read index or its apply "
                        "(--max-pending-read-index).",
                        gauge_reads_waiting, n);
    kv_metrics_gauge_fn(
        metrics, "kvd_read_index_remote_pending",
        "Leader: followers' read-index requests pending (--max-pending-read-index).", gauge_rreads,
        n);
    n->m_reads_refused = kv_metrics_counter(
        metrics, "kvd_read_index_refused_total",
        "Read-index requests refused: too many requests (--max-pending-read-index).",
        "from=\"client\"");
    n->m_rreads_refused = kv_metrics_counter(
        metrics, "kvd_read_index_refused_total",
        "Read-index requests refused: too many requests (--max-pending-read-index).",
        "from=\"peer\"");
    kv_metrics_gauge_fn(metrics, "kvd_proposals_forwarded_waiting",
                        "Proposals forwarded to the leader, not applied yet "
                        "(--max-forwarded-proposals).",
                        gauge_fwd_waiting, n);
    kv_metrics_gauge_fn(metrics, "kvd_proposals_waiting",
                        "Proposals of this member waiting to be applied.", gauge_waiting, n);
    kv_metrics_gauge_fn(metrics, "kvd_applied_index", "Last applied log index.", gauge_applied, n);
    kv_metrics_gauge_fn(metrics, "kvd_raft_term", "Current raft term.", gauge_term, n);
    kv_metrics_gauge_fn(metrics, "kvd_raft_commit_index", "Raft commit index.", gauge_commit, n);
    kv_metrics_gauge_fn(metrics, "kvd_has_leader", "1 if a leader is known.", gauge_has_leader, n);
    n->m_health_barriers = kv_metrics_counter(metrics, "kvd_health_barriers_total",
                                              "Health barriers queued through the log (reserved, "
                                              "outside --max-pending-proposals).",
                                              NULL);
    n->m_health_coalesced =
        kv_metrics_counter(metrics, "kvd_health_probes_coalesced_total",
                           "Health probes that joined an already queued health barrier.", NULL);
    n->m_health_refused =
        kv_metrics_counter(metrics, "kvd_health_probes_refused_total",
                           "Health probes refused because --max-health-probes were waiting.", NULL);
    kv_metrics_gauge_fn(metrics, "kvd_health_probes_waiting",
                        "Health probes waiting on the apply path.", gauge_health_waiting, n);
    for (int t = 1; t < 3; t++) {
        char labels[32];
        snprintf(labels, sizeof(labels), "type=\"%s\"", kv_alarm_name(t));
        n->m_alarm[t] = kv_metrics_gauge(
            metrics, "kvd_alarms", "Active alarms by type (1 = raised on any member).", labels);
    }
    n->m_ckeys = kv_metrics_counter(metrics, "kvd_compaction_keys_total",
                                    "Keys visited by batched physical compaction.", NULL);
    n->m_cremoved = kv_metrics_counter(metrics, "kvd_compaction_removed_total",
                                       "Revisions removed by physical compaction.", NULL);
    n->m_cbatches = kv_metrics_counter(metrics, "kvd_compaction_batches_total",
                                       "Commits that carried a compaction step.", NULL);
    kv_metrics_gauge_fn(metrics, "kvd_compaction_pending",
                        "1 while a physical compaction is in progress.", gauge_cpending, n);
    kv_metrics_gauge_fn(metrics, "kvd_compaction_step_removed_max",
                        "Most revisions removed by one compaction step (one write transaction).",
                        gauge_cstep_max, n);
}

int kv_node_init(kv_node **out, uv_loop_t *loop, kv_store *store, const kv_node_config *cfg,
                 const kv_header_info *hdr, kv_metrics *metrics)
{
    kv_node *n = calloc(1, sizeof(*n));
    if (n == NULL)
        return -ENOMEM;
    kv_list_init(&n->queue);
    kv_list_init(&n->wait);
    kv_list_init(&n->grave);
    kv_list_init(&n->conf_waiters);
    kv_list_init(&n->reads_new);
    kv_list_init(&n->reads_round);
    kv_list_init(&n->reads_apply);
    kv_list_init(&n->rreads);
    n->loop = loop;
    n->store = store;
    n->hdr = *hdr;
    n->max_pending = cfg && cfg->max_pending ? cfg->max_pending : 10000;
    n->max_health_waiters = cfg && cfg->max_health_waiters ? cfg->max_health_waiters : 64;
    n->compact_batch_keys = cfg && cfg->compact_batch_keys ? cfg->compact_batch_keys : 1000;
    n->compact_batch_revs = cfg && cfg->compact_batch_revs ? cfg->compact_batch_revs : 50;
    kv_store_status ss;
    int rc = kv_store_get_status(store, &ss);
    if (rc < 0)
        goto fail;
    n->revision = ss.revision;
    n->st.applied_index = ss.applied_index;
    rc = kv_store_compact_pending(store, NULL);
    if (rc < 0)
        goto fail;
    n->compact_pending = rc; /* resume a compaction interrupted by a restart */
    /* Request ids: increasing for the life of the process and not reused by the next one (a
     * result is routed to its waiter by id, kv_node__drive). */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    n->next_id = ((uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u) << 16;
    register_metrics(n, metrics);
    rc = kv_node__raft_start(n, cfg);
    if (rc < 0)
        goto fail_metrics;

    uv_check_init(loop, &n->check);
    uv_idle_init(loop, &n->idle);
    uv_timer_init(loop, &n->tick);
    n->check.data = n->idle.data = n->tick.data = n;
    n->handles_open = 3;
    if (uv_async_init(loop, &n->early_async, kv_node__on_early) == 0) {
        n->early_async.data = n;
        n->early_open = 1;
        n->handles_open++;
    }
    uv_check_start(&n->check, on_check);
    uv_timer_start(&n->tick, on_tick, n->heartbeat_ms, n->heartbeat_ms);
    kv_node__elect_single(n);
    kv_node__kick(n); /* the first check drives raft */
    kv_node__update_alarm_metrics(n);
    *out = n;
    return 0;
fail_metrics:
    if (metrics)
        kv_metrics_gauge_fn_remove(metrics, n);
fail:
    free(n);
    return rc;
}

static void fire_compact_waiters(kv_node *n, int status)
{
    compact_waiter *c = n->cwait;
    n->cwait = NULL;
    while (c) {
        compact_waiter *next = c->next;
        if (c->fn)
            c->fn(c->arg, status);
        free(c);
        c = next;
    }
}

void kv_node__fire_compact_waiters(kv_node *n, int status);
void kv_node__fire_compact_waiters(kv_node *n, int status)
{
    fire_compact_waiters(n, status);
}

void kv_node_close(kv_node *n)
{
    if (n == NULL || n->closing)
        return;
    n->closing = 1;
    /* The caller closes the peer transport next, and it is freed in its close callbacks; an
     * apply worker still in flight finishes later, and its after_ready must not send the
     * messages that waited for its commit there (test: cluster_disk_failpoint
     * a_member_stopped_inside_a_slow_commit_exits_cleanly). */
    n->peers = NULL;
    kv_node_req *r;
    while ((r = kv_node__first(&n->queue))) {
        kv_list_remove(&r->link);
        kv_node__fail_err(n, r, KV_ERR_STOPPED);
    }
    n->pending = 0;
    n->health_q = NULL;
    kv_node__fail_all_waiting(n, KV_ERR_STOPPED);
    while ((r = kv_node__first(&n->conf_waiters))) {
        kv_list_remove(&r->link);
        kv_node__fail_err(n, r, KV_ERR_STOPPED);
    }
    if (n->transfer_req) {
        kv_node__fail_err(n, n->transfer_req, KV_ERR_STOPPED);
        n->transfer_req = NULL;
    }
    kv_node__reads_fail_all(n, -ECANCELED);
    fire_compact_waiters(n, -ECANCELED);
    free(n->publish);
    n->publish = NULL;
    if (n->metrics)
        kv_metrics_gauge_fn_remove(n->metrics, n);
    uv_close((uv_handle_t *)&n->check, on_handle_closed);
    uv_close((uv_handle_t *)&n->idle, on_handle_closed);
    uv_close((uv_handle_t *)&n->tick, on_handle_closed);
    if (n->inflight == NULL && n->committing == NULL)
        kv_node__close_early(n); /* else after_ready closes it: the worker may still signal */
}

int kv_node_writes_visible(const kv_node *n)
{
    return n->acked_index <= n->st.applied_index;
}

uint64_t kv_node_auth_generation(const kv_node *n)
{
    return n->auth_gen;
}

int64_t kv_node_acked_revision(const kv_node *n)
{
    return n->acked_rev;
}

int kv_node_read_visible(kv_node *n, void (*done)(void *arg, int status), void *arg)
{
    if (n->closing)
        return -ESHUTDOWN;
    if (kv_node_writes_visible(n))
        return 1;
    if (n->reads_waiting >= n->max_reads) {
        kv_metric_inc(n->m_reads_refused);
        return -EBUSY;
    }
    read_waiter *w = calloc(1, sizeof(*w));
    if (w == NULL)
        return -ENOMEM;
    w->done = done;
    w->arg = arg;
    w->index = n->acked_index; /* kv_node__reads_applied completes it after that commit */
    w->deadline_ms = kv_node__now_ms() + n->request_timeout_ms;
    kv_list_insert_head(&n->reads_apply, &w->link);
    n->reads_waiting++;
    return 0;
}

void kv_node__close_early(kv_node *n)
{
    if (!n->early_open)
        return;
    n->early_open = 0;
    uv_close((uv_handle_t *)&n->early_async, on_handle_closed);
}

/* reserved: a health barrier, which neither counts against nor is refused by max_pending. */
int kv_node__enqueue(kv_node *n, kv_node_req *r, int reserved)
{
    if (n->closing)
        return -ESHUTDOWN;
    if (!reserved && n->pending >= n->max_pending) {
        n->st.refused_total++;
        kv_metric_inc(n->m_refused);
        return -EBUSY;
    }
    r->deadline_ms = kv_node__now_ms() + n->request_timeout_ms;
    kv_list_insert_tail(&n->queue, &r->link);
    if (!reserved)
        n->pending++;
    kv_node__kick(n);
    return 0;
}

/* Returns the entry data for body: the InternalRequest fields id (1) and proposer (2) first,
 * then body (protobuf concatenation merges messages), so the applier reads who waits for the
 * result from the first bytes. Takes ownership of body. */
static uint8_t *make_entry(kv_node *n, uint8_t *body, size_t blen, uint64_t id, size_t *len)
{
    uint8_t *p = malloc(blen + 22);
    if (p == NULL) {
        free(body);
        return NULL;
    }
    size_t o = 0;
    p[o++] = 0x08;
    o += kv_varint_put(p + o, id);
    p[o++] = 0x10;
    o += kv_varint_put(p + o, n->self);
    if (blen)
        memcpy(p + o, body, blen);
    free(body);
    *len = o + blen;
    return p;
}

static kv_node_req *new_req(kv_node *n, int kind, uint8_t *body, size_t blen)
{
    kv_node_req *r = calloc(1, sizeof(*r));
    if (r == NULL) {
        free(body);
        return NULL;
    }
    kv_list_init(&r->link);
    r->kind = kind;
    if (kind != REQ_EXCL && kind != REQ_MOVE_LEADER) {
        r->id = n->next_id++;
        r->data = make_entry(n, body, blen, r->id, &r->len);
        if (r->data == NULL) {
            free(r);
            return NULL;
        }
    } else {
        free(body);
    }
    return r;
}

int kv_node_propose(kv_node *n, uint8_t *req, size_t len, kv_node_done_fn done, void *arg,
                    kv_node_req **handle)
{
    if (n->closing) {
        free(req);
        return -ESHUTDOWN;
    }
    kv_node_req *r = new_req(n, REQ_WRITE, req, len);
    if (r == NULL)
        return -ENOMEM;
    r->done = done;
    r->arg = arg;
    int rc = kv_node__enqueue(n, r, 0);
    if (rc < 0) {
        free(r->data);
        free(r);
        return rc;
    }
    n->st.proposals_total++;
    kv_metric_inc(n->m_proposals);
    if (handle)
        *handle = r;
    return 0;
}

/* A follower's proposal arriving at the leader: proposed like ours, nobody waits here. */
int kv_node__propose_forwarded(kv_node *n, const uint8_t *data, size_t len);
int kv_node__propose_forwarded(kv_node *n, const uint8_t *data, size_t len)
{
    kv_node_req *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return -ENOMEM;
    kv_list_init(&r->link);
    r->kind = REQ_FORWARDED;
    r->data = malloc(len ? len : 1);
    if (r->data == NULL) {
        free(r);
        return -ENOMEM;
    }
    memcpy(r->data, data, len);
    r->len = len;
    int rc = kv_node__enqueue(n, r, 0);
    if (rc < 0) {
        free(r->data);
        free(r);
    }
    return rc;
}

void kv_node_req_detach(kv_node_req *r)
{
    if (r) {
        r->done = NULL;
        r->arg = NULL;
    }
}

int kv_node_exclusive(kv_node *n, int (*work)(void *arg), void (*done)(void *arg, int status),
                      void *arg)
{
    kv_node_req *r = new_req(n, REQ_EXCL, NULL, 0);
    if (r == NULL)
        return -ENOMEM;
    r->excl_work = work;
    r->excl_done = done;
    r->arg = arg;
    int rc = kv_node__enqueue(n, r, 0);
    if (rc < 0)
        free(r);
    return rc;
}

int kv_node_barrier(kv_node *n, void (*done)(void *arg, int status), void *arg)
{
    if (n->closing)
        return -ESHUTDOWN;
    kv_node_req *r = new_req(n, REQ_BARRIER, NULL, 0);
    if (r == NULL)
        return -ENOMEM;
    r->barrier_done = done;
    r->arg = arg;
    int rc = kv_node__enqueue(n, r, 0);
    if (rc < 0) {
        free(r->data);
        free(r);
    }
    return rc;
}

int kv_node_health_barrier(kv_node *n, void (*done)(void *arg, int status), void *arg)
{
    if (n->closing)
        return -ESHUTDOWN;
    if (n->health_waiting >= n->max_health_waiters) {
        kv_metric_inc(n->m_health_refused);
        return -EBUSY;
    }
    health_waiter *hw = calloc(1, sizeof(*hw));
    if (hw == NULL)
        return -ENOMEM;
    hw->done = done;
    hw->arg = arg;
    if (n->health_q) { /* a barrier is queued and not yet proposed: it answers for us too */
        hw->next = n->health_q->waiters;
        n->health_q->waiters = hw;
        n->health_waiting++;
        kv_metric_inc(n->m_health_coalesced);
        return 0;
    }
    kv_node_req *r = new_req(n, REQ_HEALTH, NULL, 0);
    if (r == NULL) {
        free(hw);
        return -ENOMEM;
    }
    r->health = n;
    r->waiters = hw;
    int rc = kv_node__enqueue(n, r, 1);
    if (rc < 0) {
        free(hw);
        free(r->data);
        free(r);
        return rc;
    }
    n->health_q = r;
    n->health_waiting++;
    kv_metric_inc(n->m_health_barriers);
    return 0;
}

int kv_node_change_member(kv_node *n, int op, uint64_t id, uint8_t *record, size_t record_len,
                          kv_node_done_fn done, void *arg)
{
    if (n->closing) {
        free(record);
        return -ESHUTDOWN;
    }
    if (id == 0 || op < KV_NODE_MEMBER_ADD || op > KV_NODE_MEMBER_PROMOTE) {
        free(record);
        return -EINVAL;
    }
    /* The record (peer URLs) travels as a normal entry first; the configuration entry follows
     * once it applied (node_ready.c). */
    /* The change travels as a normal entry (any member can propose it; a follower forwards it
     * like a write): InternalRequest field 20 (member_add: the kvdpb.Member record) for an add,
     * field 21 (member_change: op and id) otherwise. The leader turns it into the raft
     * configuration change when it applies (node_conf.c). */
    uint8_t *body = malloc((record ? record_len : 0) + 32);
    size_t blen = 0;
    if (body == NULL) {
        free(record);
        return -ENOMEM;
    }
    if (op == KV_NODE_MEMBER_ADD || op == KV_NODE_MEMBER_ADD_LEARNER) {
        if (record == NULL || record_len == 0) {
            free(body);
            free(record);
            return -EINVAL;
        }
        body[blen++] = 0xA2;
        body[blen++] = 0x01;
        blen += kv_varint_put(body + blen, record_len);
        memcpy(body + blen, record, record_len);
        blen += record_len;
    } else {
        uint8_t inner[24];
        size_t il = 0;
        inner[il++] = 0x08;
        il += kv_varint_put(inner + il, (uint64_t)op);
        inner[il++] = 0x10;
        il += kv_varint_put(inner + il, id);
        body[blen++] = 0xAA;
        body[blen++] = 0x01;
        blen += kv_varint_put(body + blen, il);
        memcpy(body + blen, inner, il);
        blen += il;
    }
    free(record);
    kv_node_req *r = new_req(n, REQ_CONF, body, blen);
    if (r == NULL)
        return -ENOMEM;
    r->conf_op = op;
    r->conf_id = id;
    r->done = done;
    r->arg = arg;
    int rc = kv_node__enqueue(n, r, 0);
    if (rc < 0) {
        free(r->data);
        free(r);
    }
    return rc;
}

int kv_node_move_leader(kv_node *n, uint64_t target, void (*done)(void *arg, int status), void *arg)
{
    if (n->closing)
        return -ESHUTDOWN;
    if (n->role != RAFT_LEADER)
        return -EPERM;
    kv_node_req *r = new_req(n, REQ_MOVE_LEADER, NULL, 0);
    if (r == NULL)
        return -ENOMEM;
    r->conf_id = target;
    r->barrier_done = done;
    r->arg = arg;
    int rc = kv_node__enqueue(n, r, 0);
    if (rc < 0)
        free(r);
    return rc;
}

const kv_header_info *kv_node_header(const kv_node *n)
{
    return &n->hdr;
}

void kv_node_set_stalled(kv_node *n, int stalled)
{
    n->stalled = stalled;
    if (stalled)
        uv_idle_stop(&n->idle);
    else
        kv_node__kick(n);
}

int kv_node_stalled(const kv_node *n)
{
    return n->stalled;
}

void kv_node_set_lease_observer(kv_node *n, const kv_store_lease_observer *obs)
{
    if (obs)
        n->target = *obs;
    else
        memset(&n->target, 0, sizeof(n->target));
}

void kv_node_set_applied_hook(kv_node *n, void (*fn)(void *arg, uint64_t applied), void *arg)
{
    n->applied_fn = fn;
    n->applied_arg = arg;
}

uint64_t kv_node_commit_index(const kv_node *n)
{
    return n->raft_ok ? raft_commit_index(&n->raft) : n->st.applied_index;
}

uint64_t kv_node_lease_index(const kv_node *n)
{
    uint64_t c = kv_node_commit_index(n);
    return n->lease_index < c ? n->lease_index : c;
}

uint64_t kv_node_now_ms(void)
{
    return kv_node__now_ms();
}

int kv_node_lease_live(kv_node *n, uint64_t arrived_ms)
{
    if (!n->raft_ok)
        return 1;
    const struct raft_conf *c = raft_configuration(&n->raft);
    if (c->n_voters <= 1)
        return 1;
    if (n->role != RAFT_LEADER || raft_transferee(&n->raft) != RAFT_NONE)
        return 0;
    uint64_t now = kv_node__now_ms();
    int valid = n->confirm_term == raft_current_term(&n->raft) &&
                (n->transfer_ms == 0 || n->confirm_ms > n->transfer_ms + n->election_ms);
    uint64_t age = now - n->confirm_ms;
    /* time: no other leader before the confirmed start + an election timeout; half of it
     * leaves room for clock rates and a tick; only while raft is driven */
    int by_time =
        valid && age < n->election_ms / 2 && !n->stalled && now - n->fed_ms < n->election_ms / 2;
    /* ReadIndex: a quorum acknowledged this leader after the request arrived (any link) */
    int by_round = valid && n->confirm_ms > arrived_ms;
    /* A round is wanted unless one that started after the arrival is under way (given up
     * after an election timeout: raft repeats heartbeats, not lost rounds), or the lease by
     * time holds and its last round is younger than a quarter of an election timeout (ahead
     * of the end: a steady flow of renewals never waits for a round). */
    uint64_t since_start = now - n->confirm_last_ms;
    int ours = n->confirm_last_term == raft_current_term(&n->raft);
    int covering = ours && n->confirm_last_ms > arrived_ms && since_start < n->election_ms;
    int fresh = ours && since_start < n->election_ms / 4;
    if (!by_round && !covering && !(by_time && fresh) && !n->confirm_wanted) {
        n->confirm_wanted = 1;
        kv_node__kick(n);
    }
    return by_time || by_round;
}

uint64_t kv_node_applied_index(const kv_node *n)
{
    return n->st.applied_index;
}

void kv_node_set_leader_hook(kv_node *n, void (*fn)(void *arg, int primary), void *arg)
{
    n->leader_fn = fn;
    n->leader_arg = arg;
    if (fn && n->primary)
        fn(arg, 1);
}

void kv_node_set_lease_namer(kv_node *n, int64_t (*fn)(void *arg), void *arg)
{
    n->lease_id_fn = fn;
    n->lease_id_arg = arg;
}

int64_t kv_node_revision(const kv_node *n)
{
    return n->revision;
}

void kv_node_set_term(kv_node *n, uint64_t term)
{
    n->hdr.raft_term = term;
}

void kv_node_set_cluster_id(kv_node *n, uint64_t cluster_id)
{
    n->hdr.cluster_id = cluster_id;
}

void kv_node_get_stats(const kv_node *n, kv_node_stats *st)
{
    *st = n->st;
    st->pending = n->pending;
    st->apply_retries = atomic_load(&n->apply_retries);
}

void kv_node_get_raft_status(const kv_node *n, kv_node_raft_status *st)
{
    memset(st, 0, sizeof(*st));
    if (!n->raft_ok)
        return;
    st->term = raft_current_term(&n->raft);
    st->leader = n->leader;
    st->commit_index = raft_commit_index(&n->raft);
    st->applied_index = n->st.applied_index;
    st->last_index = raft_last_index(&n->raft);
    st->role = n->role;
    const struct raft_conf *c = raft_configuration(&n->raft);
    for (uint32_t i = 0; i < c->n_learners; i++)
        if (c->learners[i] == n->self)
            st->is_learner = 1;
}

int kv_node_compact_wait(kv_node *n, void (*fn)(void *arg, int status), void *arg,
                         kv_node_compact_waiter **handle)
{
    if (n->closing)
        return -ESHUTDOWN;
    /* a Compact answered before its commit returned (early acknowledgement): whether it left
     * a physical compaction pending is known when that commit returns (compaction_progress) */
    if (!n->compact_pending && kv_node_writes_visible(n))
        return 1;
    compact_waiter *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return -ENOMEM;
    c->fn = fn;
    c->arg = arg;
    c->next = n->cwait;
    n->cwait = c;
    if (handle)
        *handle = (kv_node_compact_waiter *)c;
    kv_node__kick(n);
    return 0;
}

void kv_node_compact_wait_detach(kv_node_compact_waiter *h)
{
    compact_waiter *c = (compact_waiter *)h;
    if (c) {
        c->fn = NULL;
        c->arg = NULL;
    }
}

int kv_node_compact_pending(const kv_node *n)
{
    return n->compact_pending;
}

void kv_node_set_commit_hook(kv_node *n, kv_node_commit_fn fn, void *arg)
{
    n->commit_fn = fn;
    n->commit_arg = arg;
}

void kv_node_attach_peers(kv_node *n, struct kv_peer_net *peers)
{
    n->peers = peers;
}

static void on_published(void *arg, kv_result *res)
{
    kv_node *n = arg;
    n->publish_inflight = 0;
    if (res->err == KV_ERR_NONE) {
        free(n->publish);
        n->publish = NULL;
        /* etcd's two start-up lines, word for word where tools wait for them (etcd's own
         * e2e harness waits for both substrings: tests/e2e-etcd/README.md). */
        fprintf(stderr, "kvd: published local member to cluster through raft\n");
        fprintf(stderr, "kvd: enabled capabilities for version 3.4\n");
    } else {
        n->publish_next_ms = kv_node__now_ms() + 1000; /* retried */
    }
}

void kv_node_set_publish(kv_node *n, uint8_t *req, size_t len)
{
    free(n->publish);
    n->publish = req;
    n->publish_len = len;
}

/* Proposes the publish request once a leader is known (called each tick). */
void kv_node__maybe_publish(kv_node *n)
{
    if (!n->publish || n->publish_inflight || !n->leader || n->closing ||
        kv_node__now_ms() < n->publish_next_ms)
        return;
    uint8_t *copy = malloc(n->publish_len ? n->publish_len : 1);
    if (copy == NULL)
        return;
    memcpy(copy, n->publish, n->publish_len);
    kv_node_req *h = NULL;
    if (kv_node_propose(n, copy, n->publish_len, on_published, n, &h) == 0) {
        h->essential = 1;
        n->publish_inflight = 1;
    }
}
