/*
 * node_ready.c: the raft driver (raft.h's loop, on the libuv loop thread).
 *
 *   drive():  1. feed raft: step the peer messages that arrived, tick, propose the queued
 *                requests (leader) or forward them (follower), start read rounds;
 *             2. take the ready; send rd.msgs at once (they may precede persistence);
 *             3. if it has anything to persist or apply, hand it to ONE worker job: one LMDB
 *                write transaction holds the new log entries, the hard state, every committed
 *                request's effects and the applied index; one commit. Otherwise go on inline;
 *             4. after the commit (loop): send rd.msgs_after, acknowledge the requests whose
 *                entries applied (by request id), publish read states, raft_advance(), free
 *                what raft no longer references, and drive again.
 *
 * While a ready is in flight raft is not touched (raft.h forbids it between ready and advance):
 * peer messages wait in the inbox (bounded; raft tolerates the loss of what is dropped),
 * ticks are counted, requests stay queued.
 *
 * Routing results: each entry starts with the InternalRequest fields id and proposer
 * (node.c make_entry). When an entry proposed by this member applies, the waiter with that id
 * is completed; the waiters are in id order and the log keeps each proposer's order (entries
 * of an earlier leader that survive precede those of a later one), so every waiter older than
 * an applied id was lost (leader change) and fails with "etcdserver: leader changed".
 */
#include "node/node_int.h"

#include "common/etcd_errors.h"

#include "apply/internal_req.h"
#include "node/disk_failpoint.h"

#include "peer/peer_net.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void kv_node__fire_compact_waiters(kv_node *n, int status);
void kv_node__maybe_publish(kv_node *n);
static int single_voter(const kv_node *n);

/* ---- loop ---- */

static void replay_events(kv_node *n, const ready_work *w)
{
    const kv_store_lease_observer *o = &n->target;
    for (size_t i = 0; i < w->nev; i++) {
        const obs_event *e = &w->ev[i];
        if (e->type == 0 && o->granted)
            o->granted(o->arg, e->id, e->ttl, e->remaining);
        else if (e->type == 1 && o->revoked)
            o->revoked(o->arg, e->id);
        else if (e->type == 2 && o->checkpointed)
            o->checkpointed(o->arg, e->id, e->remaining);
    }
    if (w->ev_oom)
        fprintf(stderr,
                "kvd: warning: out of memory recording lease events; lessor may lag until the "
                "next promote\n");
}

/* Is entry data (InternalRequest: the id and proposer fields, then the request) a lease
 * grant, revoke or checkpoint (fields 7-9, proto/internal.proto)? Walks the top-level fields
 * only; a malformed entry is "no" (the applier rejects it). */
static int lease_entry(const uint8_t *p, size_t len)
{
    size_t o = 0;
    while (o < len) {
        uint64_t tag = 0;
        for (unsigned sh = 0; o < len && sh < 64; sh += 7) {
            tag |= (uint64_t)(p[o] & 0x7f) << sh;
            if (!(p[o++] & 0x80))
                break;
        }
        uint64_t field = tag >> 3, skip = 0;
        switch (tag & 7) {
        case 0:
            while (o < len && (p[o++] & 0x80))
                ;
            break;
        case 1:
            skip = 8;
            break;
        case 5:
            skip = 4;
            break;
        case 2:
            for (unsigned sh = 0; o < len && sh < 64; sh += 7) {
                skip |= (uint64_t)(p[o] & 0x7f) << sh;
                if (!(p[o++] & 0x80))
                    break;
            }
            break;
        default:
            return 0;
        }
        if (field >= 7 && field <= 9)
            return 1;
        if (skip > len - o)
            return 0;
        o += (size_t)skip;
    }
    return 0;
}

static void compaction_progress(kv_node *n, const ready_work *w)
{
    if (!w->cstep_ran) { /* a write batch: the next batch is a compaction step, if pending */
        if (w->cpending)
            n->compact_pending = 1;
        n->compact_error = 0; /* a failed step is retried after each write batch */
        n->cstep_due = n->compact_pending && w->has_ready;
        return;
    }
    n->cstep_due = 0;
    kv_metric_add(n->m_ckeys, (int64_t)w->ckeys);
    kv_metric_add(n->m_cremoved, (int64_t)w->cremoved);
    if (w->ckeys)
        kv_metric_inc(n->m_cbatches);
    if (w->cremoved > n->cstep_max)
        n->cstep_max = w->cremoved;
    if (w->cstep_rc < 0) {
        if (!n->compact_error)
            fprintf(stderr,
                    "kvd: warning: compaction step failed: %s; retrying with the next writes\n",
                    strerror(-w->cstep_rc));
        n->compact_error = 1;
        n->compact_pending = 1;
        kv_node__fire_compact_waiters(n, w->cstep_rc);
        return;
    }
    n->compact_error = 0;
    n->compact_pending = w->cstep_rc == 1;
    if (!n->compact_pending)
        kv_node__fire_compact_waiters(n, 0);
}

/* After a commit returned: waiters queued while an early-acknowledged Compact was still
 * committing (kv_node_compact_wait) go now if it left nothing pending. */
static void compact_waiters_visible(kv_node *n)
{
    if (n->cwait && !n->compact_pending && kv_node_writes_visible(n))
        kv_node__fire_compact_waiters(n, 0);
}

static void free_work(ready_work *w)
{
    if (w->results) {
        size_t cnt = w->has_ready ? kv_node__apply_count(w) : 0;
        for (size_t k = 0; k < cnt; k++)
            free(w->results[k].resp);
    }
    free(w->results);
    free(w->ids);
    free(w->fresh);
    free(w->ev);
    if (w->old_fd >= 0)
        close(w->old_fd);
    free(w);
}

/* The waiter for our entry `id` applied with res: older waiters were lost. */
static void complete_id(kv_node *n, uint64_t id, kv_result *res)
{
    kv_node_req *r;
    while ((r = kv_node__first(&n->wait)) && r->id <= id) {
        kv_list_remove(&r->link);
        kv_node__unwait(n, r);
        if (r->id == id)
            kv_node__finish_req(n, r, res);
        else
            kv_node__fail_err(n, r, KV_ERR_LEADER_CHANGED);
    }
}

void kv_node__fail_all_waiting(kv_node *n, kv_etcd_err e)
{
    kv_node_req *r;
    while ((r = kv_node__first(&n->wait))) {
        kv_list_remove(&r->link);
        kv_node__fail_err(n, r, e);
    }
    n->waiting = 0;
    n->fwd_waiting = 0;
}

void kv_node__unwait(kv_node *n, kv_node_req *r)
{
    n->waiting--;
    if (r->forwarded) {
        r->forwarded = 0;
        n->fwd_waiting--;
    }
}

static void add_waiting(kv_node *n, kv_node_req *r)
{
    kv_list_insert_tail(&n->wait, &r->link);
    n->waiting++;
}

static void empty_grave(kv_node *n)
{
    kv_node_req *r;
    while ((r = kv_node__first(&n->grave))) {
        kv_list_remove(&r->link);
        free(r->data);
        free(r);
    }
    for (size_t i = 0; i < n->stepped_n; i++)
        kv_raft_msg_free(&n->stepped[i]);
    n->stepped_n = 0;
    if (n->snap_pending) {
        unlink(n->snap_pending); /* installed (copied into the store) or refused by raft */
        free(n->snap_pending);
        n->snap_pending = NULL;
    }
}

static void set_primary(kv_node *n, int primary)
{
    if (n->primary == primary)
        return;
    n->primary = primary;
    if (n->leader_fn)
        n->leader_fn(n->leader_arg, primary);
}

static void on_soft_state(kv_node *n, const struct raft_ready *rd)
{
    if (!rd->ss_changed)
        return;
    if (rd->ss.leader != n->leader) {
        kv_metric_inc(n->m_leader_changes);
        if (rd->ss.leader) /* etcd counts a new leader, not its loss */
            kv_metric_inc(n->m_etcd_leader_changes);
        fprintf(stderr, "kvd: raft: leader is now %016llx (term %llu)\n",
                (unsigned long long)rd->ss.leader, (unsigned long long)raft_current_term(&n->raft));
    }
    n->leader = rd->ss.leader;
    if (n->leader)
        n->publish_next_ms = 0; /* publish at once (node.c on the next tick is too late for
                                   clients that list members right after start) */
    int was_leader = n->role == RAFT_LEADER;
    n->role = rd->ss.role;
    if (n->role == RAFT_LEADER && !was_leader) {
        n->lead_start = raft_last_index(&n->raft); /* our term's first (empty) entry */
        n->lead_since_ms = kv_node__now_ms();
    }
    if (n->role != RAFT_LEADER) {
        n->lead_start = 0;
        set_primary(n, 0);
    }
}

/* After the apply: a leader that applied an entry of its own term may expire leases. */
static void check_primary(kv_node *n)
{
    if (n->role == RAFT_LEADER && n->lead_start && n->st.applied_index >= n->lead_start &&
        (!n->fp_primary_delay_ms || kv_node__now_ms() >= n->lead_since_ms + n->fp_primary_delay_ms))
        set_primary(n, 1);
}

static void advance(kv_node *n, struct raft_ready *rd)
{
    int rc = raft_advance(&n->raft, rd);
    kv_node__log_end_cycle(n);
    empty_grave(n);
    if (rc != 0) {
        fprintf(stderr, "kvd: fatal: raft: advance failed: %s; stopping this member\n",
                raft_strerror(rc));
        abort();
    }
    n->hdr.raft_term = raft_current_term(&n->raft);
    const struct raft_conf *c = raft_configuration(&n->raft);
    if (c->n_voters + c->n_learners > 1) /* a member joined: results must match everywhere */
        kv_store_set_deterministic(n->store, 1);
}

/* The auth hook (node.h kv_node_set_auth_hook) for this ready's entries, once. */
static void fire_auth(kv_node *n, ready_work *w)
{
    if (w->auth_fired || !w->has_ready)
        return;
    w->auth_fired = 1;
    size_t cnt = kv_node__apply_count(w);
    if (w->rd.has_snapshot) /* a whole new state, auth included */
        n->auth_gen++;
    for (size_t i = 0; i < cnt; i++) /* (never early: visible now, node_apply.c early_ok) */
        if (w->results[i].barrier == KV_RESULT_BARRIER_AUTH)
            n->auth_gen++;
    for (size_t i = 0; i < cnt && n->auth_fn; i++)
        if (w->results[i].auth_tokens && w->results[i].err == KV_ERR_NONE) {
            const struct raft_entry *e = kv_node__apply_entry(w, i);
            n->auth_fn(n->auth_arg, w->results[i].auth_tokens, e->index, e->data, e->len);
        }
}

void kv_node_set_auth_hook(kv_node *n, kv_node_auth_fn fn, void *arg)
{
    n->auth_fn = fn;
    n->auth_arg = arg;
}

/* WAL mode, pipelining (ready_work.early_adv): the ready's log part is durable and its
 * results are final; only its LMDB commit remains. Raft goes on now: the raft part of
 * after_ready runs here (read states, raft_advance), the ready moves to n->committing and the
 * loop may take the next ready, whose WAL flush then overlaps this commit (its apply waits for
 * the commit on the store's writer lock). The rest (applied index, revision, watchers,
 * metrics) runs when the commit returns (finish_ready). One ready at most is committing. */
static void advance_early(kv_node *n, ready_work *w)
{
    if (w->advanced || n->committing || n->closing)
        return;
    if (!w->after_sent) { /* before raft frees them */
        w->after_sent = 1;
        kv_node__send_msgs(n, w->rd.msgs_after, w->rd.n_msgs_after);
    }
    fire_auth(n, w);
    if (w->rd.hs_changed)
        n->persisted_hs = w->rd.hs;
    kv_node__reads_ready(n, w->rd.reads, w->rd.n_reads);
    struct raft_ready rd = w->rd; /* raft_advance may write to it; the worker still reads w */
    advance(n, &rd);
    w->advanced = 1;
    n->inflight = NULL;
    n->committing = w;
    kv_metric_inc(n->m_early_advances);
    kv_node__kick(n);
}

/* Early acknowledgement (the worker's signal; loop thread). The in-flight ready applies only
 * committed entries, and its results are final: each of them is durable in the logs of a
 * quorum (raft commits nothing else), so the answer need not wait for this commit's flush
 * (one sync on the critical path). If this member loses the commit (crash,
 * power loss, or the commit fails and the member stops) it replays the entries from its own
 * durable log at restart (the log is kept back to the durable applied index: log compaction
 * is itself a synced commit, node_snap.c), and the other members apply them anyway. Reads
 * cannot see the answered writes before the commit: linearizable reads wait for the applied
 * index (set in after_ready), serializable ones for acked_index (kv_node_read_visible). */
void kv_node__on_early(uv_async_t *h)
{
    kv_node *n = h->data;
    ready_work *w = n->inflight;
    if (w == NULL)
        return;
    if (w->has_ready && !w->after_sent &&
        atomic_load_explicit(&w->persisted, memory_order_acquire)) {
        /* WAL mode: the ready's entries and hard state are durable (node_log.c); raft's
         * messages that waited for it go now, not after the apply's LMDB commit */
        w->after_sent = 1;
        kv_node__send_msgs(n, w->rd.msgs_after, w->rd.n_msgs_after);
    }
    /* early_adv first: the worker stores `early` before `early_adv` (node_apply.c), so a ready
     * seen advanceable here is seen answerable too, and is never advanced unanswered */
    int adv = atomic_load_explicit(&w->early_adv, memory_order_acquire);
    if (!w->acked && atomic_load_explicit(&w->early, memory_order_acquire)) {
        w->acked = 1;
        if (w->applied > n->acked_index)
            n->acked_index = w->applied;
        size_t all = kv_node__apply_count(w);
        for (size_t i = 0; i < all; i++)
            if (w->results[i].revision > n->acked_rev)
                n->acked_rev = w->results[i].revision;
        kv_metric_inc(n->m_early_acks);
        fire_auth(n, w);
        size_t cnt = kv_node__apply_count(w);
        for (size_t i = 0; i < cnt; i++)
            if (w->ids[i])
                complete_id(n, w->ids[i], &w->results[i]);
    }
    if (adv)
        advance_early(n, w);
}

static void finish_ready(kv_node *n, ready_work *w, int status);

/* The worker returned (loop). Readies finish in the order they were taken: one that returned
 * while the ready advanced before it still commits waits for that one (finish_ready). */
static void after_ready(uv_work_t *req, int status)
{
    ready_work *w = req->data;
    kv_node *n = w->node;
    if (n->committing && w != n->committing) {
        w->completed = 1;
        w->status = status;
        return;
    }
    finish_ready(n, w, status);
}

static void finish_ready(kv_node *n, ready_work *w, int status)
{
    int rc = status < 0 ? status : w->rc;
    int early_done = w->advanced; /* its raft part ran in advance_early */
    if (w == n->committing)
        n->committing = NULL;
    else
        n->inflight = NULL;
    if (rc < 0) {
        /* The log, hard state or apply did not reach the disk. Raft's contract cannot be kept
         * (messages acknowledging these entries may already be expected): this member stops
         * rather than diverge (a failure at apply is fatal for the member). */
        fprintf(stderr, "kvd: fatal: persisting a raft ready failed: %s; stopping this member\n",
                strerror(-rc));
        exit(2);
    }
    if (w->install)
        kv_node__install_swap(n, w); /* before anything reads the store or the log */
    kv_metric_add(n->m_fsyncs, w->flushes);
    kv_metric_add(n->m_fsyncs_wal, w->wal_synced);
    if (w->has_ready && w->rd.hs_changed && !early_done)
        n->persisted_hs = w->rd.hs;
    if (w->has_ready && w->rd.has_snapshot) {
        kv_store_status ss;
        if (kv_store_get_status(n->store, &ss) == 0) {
            w->revision = ss.revision;
            n->st.applied_index = ss.applied_index;
        }
        n->compact_pending = kv_store_compact_pending(n->store, NULL) > 0;
        n->snap_index = w->rd.snapshot.meta.index;
        fprintf(stderr, "kvd: installed a snapshot at index %llu (applied %llu)\n",
                (unsigned long long)w->rd.snapshot.meta.index,
                (unsigned long long)n->st.applied_index);
        if (n->snap_fn)
            n->snap_fn(n->snap_arg);
    }
    if (w->has_compact)
        n->snap_index = w->compact.index;
    kv_raftlog_rotate(n->log);
    n->log_mark = w->log_mark;
    if (n->inflight == NULL) /* not while the next ready's worker writes the WAL */
        kv_node__log_measure(n);
    if (w->has_ready && !w->after_sent)
        kv_node__send_msgs(n, w->rd.msgs_after, w->rd.n_msgs_after);

    int64_t rev_before = n->revision;
    if (w->revision > n->revision)
        n->revision = w->revision;
    n->st.batches_total++;
    kv_metric_inc(n->m_batches);
    if (w->has_ready && w->applied > n->st.applied_index) {
        uint64_t cnt = w->applied - n->st.applied_index;
        n->st.applied_index = w->applied;
        n->st.last_batch_size = cnt;
        if (cnt > n->st.max_batch_size)
            n->st.max_batch_size = cnt;
        kv_metric_set(n->m_batch_size_max, (double)n->st.max_batch_size);
        kv_metric_add(n->m_entries, (int64_t)cnt);
    }
    replay_events(n, w);
    if (n->applied_fn && w->has_ready)
        n->applied_fn(n->applied_arg, n->st.applied_index);
    compaction_progress(n, w);
    compact_waiters_visible(n);
    if (n->commit_fn && n->revision > rev_before)
        n->commit_fn(n->commit_arg, n->revision);

    fire_auth(n, w); /* tokens before the answers that carry them (unless on_early did) */
    /* Durable: now acknowledge, in order (unless on_early did already). */
    if (w->has_ready && !early_done) {
        size_t cnt = kv_node__apply_count(w);
        for (size_t i = 0; i < cnt; i++) {
            const struct raft_entry *e = kv_node__apply_entry(w, i);
            if (w->ids[i]) {
                if (!w->acked)
                    complete_id(n, w->ids[i], &w->results[i]);
            } else if (e->type == RAFT_ENTRY_CONF && w->fresh[i])
                kv_node__conf_applied(n, e, &w->results[i]);
        }
        for (size_t i = 0; i < w->n_changes; i++)
            kv_node__conf_change_applied(n, w->changes[i].op, w->changes[i].id,
                                         w->changes[i].proposer, w->changes[i].req_id);
        kv_node__reads_ready(n, w->rd.reads, w->rd.n_reads);
        advance(n, &w->rd);
    }
    free_work(w);
    /* the next ready returned while this one committed: finish it now, in order */
    ready_work *next = n->inflight && n->inflight->completed ? n->inflight : NULL;
    if (n->closing) {
        if (next) {
            finish_ready(n, next, next->status);
            return;
        }
        if (n->inflight == NULL && n->committing == NULL)
            kv_node__close_early(n); /* no worker can signal it any more */
        kv_node__maybe_free(n);
        return;
    }
    check_primary(n);
    kv_node__conf_check(n);
    kv_node__reads_applied(n);
    kv_node__update_alarm_metrics(n);
    kv_node__raise_requested_alarms(n);
    if (next) {
        finish_ready(n, next, next->status);
        return;
    }
    kv_node__kick(n);
}

/* A ready needs the disk when it carries entries, a snapshot, a new term or vote, or
 * committed entries not applied yet. A commit index alone is not persisted (raft_init: it
 * need not be; it is rebuilt from the quorum, and the store skips what it applied). */
static int needs_worker(const kv_node *n, const struct raft_ready *rd)
{
    if (rd->n_entries || rd->has_snapshot)
        return 1;
    if (rd->hs_changed &&
        (rd->hs.term != n->persisted_hs.term || rd->hs.vote != n->persisted_hs.vote))
        return 1;
    raft_index applied = n->st.applied_index;
    if (n->committing && n->committing->applied > applied)
        applied = n->committing->applied; /* applied, its commit still running */
    return rd->n_committed && rd->committed[rd->n_committed - 1].index > applied;
}

static int single_voter(const kv_node *n)
{
    const struct raft_conf *c = raft_configuration(&n->raft);
    return c->n_voters == 1 && c->n_learners == 0 && c->voters[0] == n->self;
}

/* The worker's job for ready rd (NULL: a compaction-only commit), with a pending log
 * compaction and snapshot file folded in. NULL on allocation failure. */
static ready_work *new_work(kv_node *n, const struct raft_ready *rd)
{
    ready_work *w = calloc(1, sizeof(*w));
    if (w == NULL)
        return NULL;
    w->req.data = w;
    w->node = n;
    w->old_fd = -1;
    w->revision = n->revision;
    if (rd) {
        w->has_ready = 1;
        w->rd = *rd;
        w->spec = single_voter(n);
        w->applied = n->st.applied_index;
        size_t k = kv_node__apply_count(w) ? kv_node__apply_count(w) : 1;
        w->results = calloc(k, sizeof(*w->results));
        w->ids = calloc(k, sizeof(*w->ids));
        w->fresh = calloc(k, 1);
        if (w->results == NULL || w->ids == NULL || w->fresh == NULL) {
            free_work(w);
            return NULL;
        }
        w->snap_path = n->snap_pending;
        w->fp_delay_ms =
            n->role != RAFT_LEADER ? n->fp_apply_delay_ms : n->fp_leader_apply_delay_ms;
    }
    w->log_mark = n->log_proposed;
    if (n->compact_log) {
        w->has_compact = 1;
        w->compact = n->compact_meta;
        n->compact_log = 0;
    }
    return w;
}

/* The worker's job plus the disk failpoints (tests only): a slow or failing fsync of a
 * durable commit (disk_failpoint.h). */
static void work_ready(uv_work_t *req)
{
    ready_work *w = req->data;
    kv_node__work_ready(req);
    if (w->rc == 0 && !w->node->wal) /* with the WAL: its flush (node_log.c wal_sync) */
        w->rc = kv_disk_fp_commit(w->node->disk_fp, w->durable);
}

static int start_work(kv_node *n, const struct raft_ready *rd)
{
    ready_work *w = new_work(n, rd);
    if (w == NULL)
        return -ENOMEM;
    n->inflight = w;
    int rc = uv_queue_work(n->loop, &w->req, work_ready, after_ready);
    if (rc < 0) {
        n->inflight = NULL;
        free_work(w);
        return rc;
    }
    return 0;
}

/* The same as start_work + the worker + after_ready, on the calling thread (start-up). */
static int start_work_sync(kv_node *n, const struct raft_ready *rd)
{
    ready_work *w = new_work(n, rd);
    if (w == NULL)
        return -ENOMEM;
    n->inflight = w;
    kv_node__work_ready(&w->req);
    finish_ready(n, w, 0);
    return 0;
}

/* ---- exclusive items ---- */

typedef struct excl_work {
    uv_work_t req;
    kv_node *node;
    kv_node_req *r;
    int rc;
} excl_work;

static void excl_run(uv_work_t *req)
{
    excl_work *e = req->data;
    e->rc = e->r->excl_work(e->r->arg);
}

static void excl_after(uv_work_t *req, int status)
{
    excl_work *e = req->data;
    kv_node *n = e->node;
    n->excl_busy = 0;
    if (e->r->excl_done) /* Defragment swaps the environment here */
        e->r->excl_done(e->r->arg, status < 0 ? status : e->rc);
    int rrc = kv_raftlog_reattach(n->log, kv_store_env(n->store));
    if (rrc != 0) {
        fprintf(stderr,
                "kvd: fatal: reopening the raft log after %s failed: %s; stopping this member\n",
                "an exclusive operation", strerror(-rrc));
        exit(2);
    }
    free(e->r);
    free(e);
    if (n->closing) {
        kv_node__maybe_free(n);
        return;
    }
    kv_node__kick(n);
}

/* The exclusive item at the head runs once everything before it applied. */
static void start_exclusive(kv_node *n)
{
    kv_node_req *r = kv_node__first(&n->queue);
    kv_list_remove(&r->link);
    n->pending--;
    excl_work *e = calloc(1, sizeof(*e));
    if (e == NULL) {
        kv_node__fail_err(n, r, KV_ERR_TOO_MANY_REQUESTS_NOMEM);
        return;
    }
    e->req.data = e;
    e->node = n;
    e->r = r;
    n->excl_busy = 1;
    kv_raftlog_detach(n->log); /* the item may reopen the environment (Defragment) */
    if (uv_queue_work(n->loop, &e->req, excl_run, excl_after) < 0) {
        n->excl_busy = 0;
        free(e);
        kv_node__fail_err(n, r, KV_ERR_APPLY_SCHEDULE);
    }
}

/* ---- feeding raft ---- */

/* Steps the messages received since the last feed, each after the ticks that were due before
 * it arrived (a ready in flight holds both): a follower's check-quorum lease then runs from
 * the step of its leader's heartbeat, which is what that heartbeat's acknowledgement tells the
 * leader (kv_node_lease_live). Ticks applied in one burst after the messages would end the
 * lease the moment it started. */
static void step_inbox(kv_node *n)
{
    unsigned ticked = 0;
    for (size_t i = 0; i < n->inbox_n; i++) {
        kv_raft_msg_owned *m = &n->inbox[i];
        for (; ticked < n->inbox_tick[i] && ticked < n->ticks_due; ticked++)
            raft_tick(&n->raft);
        char *snap = n->inbox_snap[i];
        n->inbox_snap[i] = NULL;
        int rc = raft_step(&n->raft, &m->msg);
        if (rc == RAFT_ENOMEM) {
            fprintf(stderr, "kvd: fatal: raft: out of memory; stopping this member\n");
            abort();
        }
        if (snap) {
            /* the file goes with the snapshot raft took, never with one it ignored (older
             * than its commit, a stale term): a later one replaces an earlier one only if
             * raft took it, so the installed file always matches the ready's meta */
            raft_term t;
            raft_index pi = raft_pending_snapshot(&n->raft, &t);
            if (pi != 0 && pi == m->msg.snapshot.meta.index && t == m->msg.snapshot.meta.term) {
                if (n->snap_pending) {
                    unlink(n->snap_pending);
                    free(n->snap_pending);
                }
                n->snap_pending = snap;
            } else {
                unlink(snap);
                free(snap);
            }
        }
        if (n->stepped_n == n->stepped_cap) {
            size_t cap = n->stepped_cap ? n->stepped_cap * 2 : 64;
            kv_raft_msg_owned *s = realloc(n->stepped, cap * sizeof(*s));
            if (s == NULL) {
                fprintf(stderr, "kvd: fatal: out of memory; stopping this member\n");
                abort();
            }
            n->stepped = s;
            n->stepped_cap = cap;
        }
        n->stepped[n->stepped_n++] = *m;
    }
    n->ticks_due -= ticked;
    n->inbox_n = 0;
    n->inbox_bytes = 0;
}

static kv_etcd_err propose_error(int rc)
{
    switch (rc) {
    case RAFT_EBUSY:
        return KV_ERR_TOO_MANY_REQUESTS;
    case RAFT_ENOLEADER:
        return KV_ERR_NO_LEADER;
    default:
        return KV_ERR_LEADER_CHANGED;
    }
}

/* The disk: with less than KV_DISK_RESERVE free on the data dir's file system
 * the leader refuses writes with etcd's no-space error and raises NOSPACE, before a commit can
 * fail (raft cannot take back an entry it handed out; a failed persist stops the member). */
#define KV_DISK_RESERVE (2u << 20)

static int disk_low(kv_node *n)
{
    uint64_t now = kv_node__now_ms();
    if (now - n->disk_checked_ms < 10)
        return n->disk_low;
    n->disk_checked_ms = now;
    int low = kv_store_disk_free_below(n->store, KV_DISK_RESERVE);
    if (low && !n->disk_low) {
        fprintf(stderr,
                "kvd: warning: less than %u MiB free on the data dir's file system: writes are "
                "refused (NOSPACE%s)\n",
                KV_DISK_RESERVE >> 20,
                n->role == RAFT_LEADER ? "" : ", raised through the leader for the whole cluster");
        if (!(kv_store_alarms(n->store) & (1u << KV_ALARM_NOSPACE)))
            kv_store_request_alarm(n->store, KV_ALARM_NOSPACE);
    }
    n->disk_low = low;
    n->disk_full = low;
    return low;
}

/* Takes queued requests: the leader proposes them, a follower forwards them. */
/* Bytes proposed per ready: bounds one commit's dirty pages (log + state, both in the LMDB
 * transaction's memory until it commits) whatever the queue holds. */
#define KV_READY_MAX_BYTES (4u << 20)
/* Entries up to this size are not refused by the leader's raft log check (take_requests). */
#define KV_LOG_SMALL_ENTRY 4096u

/* On the leader, before r goes to raft: a grant that asks for it gets the leader's lease id
 * (kv_node_set_lease_namer, apply/internal_req.h), so ids follow the log. If that fails (no
 * memory), the grant keeps the valid id its receiving member named. */
static void name_lease(kv_node *n, kv_node_req *r)
{
    if (n->lease_id_fn != NULL && (r->kind == REQ_WRITE || r->kind == REQ_FORWARDED) &&
        kv_internal_lease_id_by_leader(r->data, r->len))
        (void)kv_internal_name_lease(&r->data, &r->len, n->lease_id_fn(n->lease_id_arg));
}

static void take_requests(kv_node *n)
{
    size_t budget = KV_READY_MAX_BYTES;
    kv_node_req *r;
    while ((r = kv_node__first(&n->queue)) && budget > 0) {
        if ((r->kind == REQ_WRITE || r->kind == REQ_FORWARDED) && !r->essential &&
            n->role == RAFT_LEADER && disk_low(n)) {
            kv_list_remove(&r->link);
            n->pending--;
            kv_node__fail_err(n, r, KV_ERR_NO_SPACE);
            continue;
        }
        /* The raft log shares the data file: past --max-raft-log-bytes no large entry is
         * added (a follower's forwarded one included) until the log compacted. Small ones
         * (alarm disarm, Compact, lease revokes: what recovery needs) pass here; the client's
         * were admitted by api/quota.c, alarms excepted. */
        if ((r->kind == REQ_WRITE || r->kind == REQ_FORWARDED) && !r->essential &&
            r->len > KV_LOG_SMALL_ENTRY && kv_node_log_admit(n, r->len) != 0) {
            kv_list_remove(&r->link);
            n->pending--;
            kv_node__fail_err(n, r, KV_ERR_TOO_MANY_REQUESTS);
            continue;
        }
        if (r->kind == REQ_EXCL) {
            if (kv_list_empty(&n->wait) && n->inflight == NULL && n->committing == NULL &&
                !raft_has_ready(&n->raft))
                start_exclusive(n);
            return;
        }
        if (r->kind == REQ_BARRIER && kv_list_empty(&n->wait) && n->inflight == NULL &&
            n->committing == NULL && (n->role == RAFT_LEADER || single_voter(n))) {
            /* Everything queued before it is applied already: nothing to wait for. */
            kv_list_remove(&r->link);
            n->pending--;
            kv_node__finish_req(n, r, NULL);
            continue;
        }
        if (r->kind == REQ_MOVE_LEADER) {
            /* no longer the leader (a transfer ahead of it ended): refused as at the call,
             * never left at the head, where it held every write behind it until it expired */
            int rc = n->role == RAFT_LEADER ? raft_transfer_leader(&n->raft, r->conf_id)
                                            : RAFT_ENOTLEADER;
            kv_list_remove(&r->link);
            n->pending--;
            if (rc != 0) {
                if (r->barrier_done)
                    r->barrier_done(r->arg, rc == RAFT_EINVAL ? -EINVAL : -EPERM);
                r->barrier_done = NULL;
                kv_node__fail_err(n, r, KV_ERR_NONE);
            } else {
                kv_node__conf_track_transfer(n, r);
            }
            continue;
        }
        if (n->role == RAFT_LEADER) {
            name_lease(n, r);
            raft_index idx = 0;
            int rc = raft_propose(&n->raft, r->data, r->len, &idx);
            if (rc == RAFT_ETRANSFER)
                return; /* wait for the transfer to end */
            kv_list_remove(&r->link);
            if (r == n->health_q)
                n->health_q = NULL;
            else
                n->pending--;
            if (rc != 0) {
                kv_node__fail_err(n, r, propose_error(rc));
                continue;
            }
            r->proposed = 1;
            if (lease_entry(r->data, r->len) && idx > n->lease_index)
                n->lease_index = idx; /* lease reads wait for it (kv_node_lease_index) */
            n->log_proposed += r->len;
            budget = r->len >= budget ? 0 : budget - r->len;
            if (r->kind == REQ_FORWARDED)
                kv_node__finish_req(n, r, NULL); /* to the grave: raft reads it until advance */
            else
                add_waiting(n, r);
        } else if (n->leader && n->peers) {
            if (r->kind == REQ_FORWARDED) { /* we are not the leader any more */
                kv_list_remove(&r->link);
                n->pending--;
                kv_node__fail_err(n, r, KV_ERR_NONE);
                continue;
            }
            if (n->fwd_waiting >= n->max_forwarded)
                return; /* --max-forwarded-proposals: the rest stays queued (bounded by
                           --max-pending-proposals: "too many requests" beyond) */
            kv_list_remove(&r->link);
            if (r == n->health_q)
                n->health_q = NULL;
            else
                n->pending--;
            if (kv_node__forward(n, r) != 0) {
                /* not connected / queue full: stays queued, retried next turn until its
                 * deadline */
                kv_list_insert_head(&n->queue, &r->link);
                if (r->kind == REQ_HEALTH)
                    n->health_q = r;
                else
                    n->pending++;
                return;
            }
            r->proposed = 1;
            n->log_proposed += r->len;
            add_waiting(n, r);
            r->forwarded = 1;
            n->fwd_waiting++;
        } else {
            return; /* no leader yet: wait (the deadline fails them) */
        }
    }
}

/* While a ready is in flight (raft untouchable): a follower forwards the plain writes at the
 * head of its queue to the leader at once instead of after the commit (often the flush of an
 * early-acknowledged apply: the client's next write would otherwise wait for it). Forwarding
 * touches no raft state; the order of the queue, of the forwards and of the wait list is the
 * one take_requests keeps. */
static void forward_ahead(kv_node *n)
{
    if (n->role == RAFT_LEADER || !n->leader || !n->peers)
        return;
    kv_node_req *r;
    while ((r = kv_node__first(&n->queue)) && r->kind == REQ_WRITE && r != n->health_q &&
           n->fwd_waiting < n->max_forwarded) {
        kv_list_remove(&r->link);
        n->pending--;
        if (kv_node__forward(n, r) != 0) { /* stays queued: take_requests retries it */
            kv_list_insert_head(&n->queue, &r->link);
            n->pending++;
            return;
        }
        r->proposed = 1;
        add_waiting(n, r);
        r->forwarded = 1;
        n->fwd_waiting++;
    }
}

static void feed(kv_node *n)
{
    step_inbox(n);
    kv_node__snap_reports(n);
    for (size_t i = 0; i < n->n_unreachable; i++) /* the transport dropped: stop pipelining */
        raft_report_unreachable(&n->raft, n->unreachable[i]);
    n->n_unreachable = 0;
    while (n->ticks_due) {
        n->ticks_due--;
        raft_tick(&n->raft);
    }
    n->fed_ms = kv_node__now_ms(); /* raft saw everything that arrived: kv_node_lease_live */
    if (raft_transferee(&n->raft) != RAFT_NONE)
        n->transfer_ms = n->fed_ms;
    kv_node__maybe_publish(n);
    /* Every member watches its own disk, a follower too: one whose file system runs low
     * raises NOSPACE through the leader (the alarm is an entry; the leader then refuses
     * growing writes cluster-wide) instead of failing a persist later and stopping. */
    if (n->role != RAFT_LEADER && !single_voter(n))
        (void)disk_low(n);
    take_requests(n);
    kv_node__conf_drive(n);
    kv_node__reads_drive(n);
    kv_node__maybe_compact_log(n);
}

void kv_node__drive(kv_node *n)
{
    if (!n->raft_ok || n->closing)
        return;
    if (n->inflight || n->excl_busy || n->stalled) {
        if (n->inflight && !n->excl_busy && !n->stalled)
            forward_ahead(n);
        uv_idle_stop(&n->idle); /* the worker's completion wakes the loop: no spinning */
        return;
    }
    for (int cycles = 0; cycles < 16; cycles++) {
        feed(n);
        if (n->excl_busy)
            return;
        if (n->cstep_due && n->compact_pending && !n->compact_error) {
            /* one compaction step between two write batches: it yields to writes but is not
             * starved by them */
            n->cstep_due = 0;
            if (start_work(n, NULL) == 0) {
                uv_idle_stop(&n->idle);
                return;
            }
        }
        if (!raft_has_ready(&n->raft)) {
            if ((n->compact_pending && !n->compact_error && kv_list_empty(&n->queue)) ||
                n->compact_log) {
                if (start_work(n, NULL) == 0) {
                    uv_idle_stop(&n->idle);
                    return;
                }
            }
            if (kv_list_empty(&n->queue) && n->inbox_n == 0)
                uv_idle_stop(&n->idle);
            return;
        }
        struct raft_ready rd;
        int rc = raft_ready(&n->raft, &rd);
        if (rc != 0) {
            int serr = kv_node__log_error(n);
            fprintf(stderr, "kvd: fatal: raft: ready failed: %s%s%s; stopping this member\n",
                    raft_strerror(rc), serr ? ": raft log storage: " : "",
                    serr ? strerror(-serr) : "");
            exit(2);
        }
        on_soft_state(n, &rd);
        kv_node__send_msgs(n, rd.msgs, rd.n_msgs);
        if (needs_worker(n, &rd)) {
            if (start_work(n, &rd) < 0) {
                fprintf(stderr,
                        "kvd: fatal: cannot schedule the apply worker; stopping this member\n");
                abort();
            }
            uv_idle_stop(&n->idle);
            return;
        }
        kv_node__send_msgs(n, rd.msgs_after, rd.n_msgs_after);
        kv_node__reads_ready(n, rd.reads, rd.n_reads);
        advance(n, &rd);
        check_primary(n);
        kv_node__conf_check(n);
        kv_node__reads_applied(n);
    }
    kv_node__kick(n); /* more next turn: let I/O in */
}

/* A single voter elects itself at once, synchronously (start-up only): it waits for no one,
 * and clients connecting right after start find a leader, not an election timeout. */
void kv_node__elect_single(kv_node *n)
{
    const struct raft_conf *c = raft_configuration(&n->raft);
    if (c->n_voters != 1 || c->voters[0] != n->self)
        return;
    for (unsigned i = 0; i < 4 * n->raft.cfg.election_ticks && !n->primary; i++) {
        raft_tick(&n->raft);
        while (raft_has_ready(&n->raft) && !n->closing) {
            struct raft_ready rd;
            if (raft_ready(&n->raft, &rd) != 0)
                return;
            on_soft_state(n, &rd);
            if (start_work_sync(n, &rd) != 0)
                return;
        }
    }
}

/* ---- start / stop ---- */

/* Start-up check of the log entries not applied yet (the ones this member will apply or send):
 * each record's checksum, so a corrupted log refuses to start with a clear line instead of
 * failing in the middle of a ready. Bounded by the unapplied tail. */
static int verify_tail(kv_node *n)
{
    const struct raft_storage *st = kv_node__log_storage(n);
    raft_index first = st->first_index(st->ctx), last = st->last_index(st->ctx);
    struct raft_hard_state hs;
    if (st->initial_state(st->ctx, &hs) != 0)
        hs.commit = 0;
    /* raft hands out again everything above min(applied, persisted commit) */
    raft_index from = n->st.applied_index < hs.commit ? n->st.applied_index : hs.commit;
    raft_index i = from + 1 > first ? from + 1 : first;
    struct raft_entry buf[64];
    int rc = 0;
    while (i <= last && rc == 0) {
        size_t cnt = 0;
        raft_index hi = last + 1 - i > 64 ? i + 64 : last + 1;
        rc = st->entries(st->ctx, i, hi, SIZE_MAX, buf, &cnt);
        if (rc == 0 && cnt == 0)
            rc = -EBADMSG;
        i += cnt;
    }
    if (rc == 0)
        rc = kv_node__log_error(n);
    kv_node__log_end_cycle(n);
    if (rc != 0) {
        fprintf(stderr, "kvd: refusing to start: the raft log is corrupt near index %llu (%s)\n",
                (unsigned long long)i, rc < -999 ? raft_strerror(rc) : strerror(-rc));
        return -EBADMSG;
    }
    return 0;
}

int kv_node__raft_start(kv_node *n, const kv_node_config *cfg)
{
    n->heartbeat_ms = cfg && cfg->heartbeat_ms ? cfg->heartbeat_ms : 100;
    n->election_ms = cfg && cfg->election_ms ? cfg->election_ms : 1000;
    if (n->election_ms < 2 * n->heartbeat_ms)
        n->election_ms = 2 * n->heartbeat_ms;
    n->request_timeout_ms = 5000u + 2u * n->election_ms; /* etcd: 5 s + 2 x election timeout */
    n->max_reads = cfg && cfg->max_pending_reads ? cfg->max_pending_reads : 10000;
    n->max_forwarded = cfg && cfg->max_forwarded ? cfg->max_forwarded : 10000;
    n->snapshot_count = cfg && cfg->snapshot_count ? cfg->snapshot_count : 10000;
    /* Test hook (tests/cluster/test_early_ack.c): a follower sleeps this long before each
     * apply-only commit, so a test can tell an early acknowledgement from a late one. */
    const char *fp = getenv("KVD_FAILPOINT_APPLY_COMMIT_DELAY_MS");
    n->fp_apply_delay_ms = fp ? (uint32_t)strtoul(fp, NULL, 10) : 0;
    /* The same on the leader (a single member too): its early answers then come a fixed time
     * before their commit (tests/client/test_client_snapshot.c: read your writes). */
    fp = getenv("KVD_FAILPOINT_LEADER_APPLY_COMMIT_DELAY_MS");
    n->fp_leader_apply_delay_ms = fp ? (uint32_t)strtoul(fp, NULL, 10) : 0;
    /* Test hook (tests/cluster/test_lease_newleader.c): widens the window in which a new
     * leader leads but its lessor does not serve yet. */
    fp = getenv("KVD_FAILPOINT_PRIMARY_DELAY_MS");
    n->fp_primary_delay_ms = fp ? (uint32_t)strtoul(fp, NULL, 10) : 0;
    n->self = n->hdr.member_id ? n->hdr.member_id : 1;
    uint64_t self_only[1] = {n->self};
    const uint64_t *voters = cfg && cfg->n_voters ? cfg->voters : self_only;
    size_t n_voters = cfg && cfg->n_voters ? cfg->n_voters : 1;
    if (n_voters > RAFT_MAX_NODES)
        return -EINVAL;
    if (cfg && cfg->snap_dir) {
        n->snap_dir = strdup(cfg->snap_dir);
        if (n->snap_dir == NULL)
            return -ENOMEM;
    }
    kv_node__snap_init(n);
    int rc = kv_node__log_open(n, cfg, voters, n_voters);
    if (rc < 0)
        goto fail;
    rc = verify_tail(n);
    if (rc < 0)
        goto fail;
    struct raft_config rcfg;
    raft_config_default(&rcfg);
    rcfg.id = n->self;
    rcfg.voters = voters;
    rcfg.n_voters = n_voters;
    rcfg.heartbeat_ticks = 1;
    rcfg.election_ticks = n->election_ms / n->heartbeat_ms;
    rcfg.seed = cfg && cfg->seed ? cfg->seed : (n->self ^ n->next_id);
    rcfg.applied = n->st.applied_index;
    rcfg.storage = kv_node__log_storage(n);
    /* raft holds one read-index request per round; rounds are bounded by the read waiters and
     * followers' requests (--max-pending-read-index each), so this never refuses a round that
     * the node admitted (a refusal would only be retried next turn). */
    rcfg.max_pending_reads = (size_t)n->max_reads + 1;
    rc = raft_init(&n->raft, &rcfg);
    kv_node__log_end_cycle(n);
    if (rc != 0 && kv_node__log_error(n)) {
        fprintf(stderr, "kvd: refusing to start: the raft log is corrupt (%s)\n",
                strerror(-kv_node__log_error(n)));
        rc = -EBADMSG;
        goto fail;
    }
    if (rc != 0) {
        fprintf(stderr, "kvd: fatal: raft: cannot start: %s\n", raft_strerror(rc));
        rc = rc == RAFT_ENOMEM ? -ENOMEM : -EINVAL;
        goto fail;
    }
    n->raft_ok = 1;
    if (n_voters > 1) /* replicated: every member must reach the same bytes */
        kv_store_set_deterministic(n->store, 1);
    rcfg.storage->initial_state(rcfg.storage->ctx, &n->persisted_hs);
    kv_node__log_end_cycle(n);
    /* The inbox grows on demand up to its bounds (node_peer.c on_raft). */
    n->inbox_cap = cfg && cfg->max_inbox_msgs ? cfg->max_inbox_msgs : 4096;
    n->max_inbox_bytes = cfg && cfg->max_inbox_bytes ? cfg->max_inbox_bytes : (64u << 20);
    if (cfg && cfg->enable_failpoints && kv_disk_fp_open(&n->disk_fp, n->loop) < 0)
        fprintf(stderr, "kvd: failpoint: cannot arm the disk failpoints\n");
    kv_node__record_lease_events(n, 1);
    /* The retained log's budget (kv_node_log_admit): by default a quarter of the headroom
     * the LMDB map keeps above the quota, so that the state (quota + half the headroom at
     * most, store.h) and the log both fit and alarms can always be written. */
    n->max_log_bytes = kv_node__log_budget(n, cfg);
    kv_node__log_measure(n); /* a restarted member over a quarter of it compacts at once */
    if (n->max_log_bytes && n->log_bytes > n->max_log_bytes)
        fprintf(stderr,
                "kvd: warning: the raft log holds %llu bytes, over --max-raft-log-bytes %llu: "
                "writes are refused until it compacted\n",
                (unsigned long long)n->log_bytes, (unsigned long long)n->max_log_bytes);
    return 0;
fail:
    free(n->inbox);
    free(n->inbox_snap);
    free(n->inbox_tick);
    n->inbox = NULL;
    n->inbox_snap = NULL;
    n->inbox_tick = NULL;
    kv_node__log_close(n);
    free(n->snap_dir);
    n->snap_dir = NULL;
    return rc;
}

void kv_node__raft_stop(kv_node *n)
{
    kv_disk_fp_close(n->disk_fp); /* no worker in flight (kv_node__maybe_free) */
    n->disk_fp = NULL;
    if (n->raft_ok) {
        raft_close(&n->raft);
        n->raft_ok = 0;
    }
    for (size_t i = 0; i < n->inbox_n; i++) {
        kv_raft_msg_free(&n->inbox[i]);
        if (n->inbox_snap[i]) {
            unlink(n->inbox_snap[i]);
            free(n->inbox_snap[i]);
        }
    }
    n->inbox_n = 0;
    n->inbox_bytes = 0;
    for (size_t i = 0; i < n->stepped_n; i++)
        kv_raft_msg_free(&n->stepped[i]);
    free(n->stepped);
    free(n->inbox);
    free(n->inbox_snap);
    free(n->inbox_tick);
    free(n->snap_pending);
    free(n->snap_dir);
    n->stepped = NULL;
    n->inbox = NULL;
    n->inbox_snap = NULL;
    n->snap_pending = NULL;
    n->snap_dir = NULL;
    kv_node__record_lease_events(n, 0);
    kv_node__log_close(n);
}
