/*
 * node_apply.c: the worker's side of a raft ready (node_int.h). One LMDB write transaction per
 * ready: the new log entries and the hard state (server/raftlog/), every entry to apply
 * (kv_store_apply, or a no-op / configuration / member-record entry), a pending log
 * compaction; then one commit (a work item without a ready carries one physical compaction
 * step instead), with LMDB's meta-page sync only when raft
 * needs the commit durable (durable_needed). Runs on a libuv worker thread and touches only the
 * store, the raft log's write functions and the ready_work (a MemberAdd's record waits for its
 * configuration entry in the store, mvcc/members.h). Lease observer events are recorded here
 * and replayed on the loop.
 *
 * Entry prefix: every entry this node proposes starts with the InternalRequest fields id (1)
 * and proposer (2) (node.c make_entry), so the worker can tell who waits for the result.
 */
#include "node/node_int.h"

#include "common/varint.h"
#include "internal.pb-c.h"
#include "mvcc/members.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- entry prefix ---- */

static int read_varint(const uint8_t *p, size_t len, size_t *o, uint64_t *v)
{
    size_t k = kv_varint_get(p + *o, p + len, v);
    *o += k;
    return k ? 0 : -1;
}

void kv_node__entry_origin(const uint8_t *p, size_t len, uint64_t *id, uint64_t *proposer)
{
    size_t o = 0;
    *id = *proposer = 0;
    for (int i = 0; i < 2 && o < len; i++) {
        uint64_t v;
        if (p[o] == 0x08) {
            o++;
            if (read_varint(p, len, &o, &v) < 0)
                return;
            *id = v;
        } else if (p[o] == 0x10) {
            o++;
            if (read_varint(p, len, &o, &v) < 0)
                return;
            *proposer = v;
        } else {
            return;
        }
    }
}

/* ---- worker ---- */

static void record_event(void *arg, int type, int64_t id, int64_t ttl, int64_t remaining)
{
    ready_work *w = ((kv_node *)arg)->inflight;
    if (w->nev == w->cap_ev) {
        size_t cap = w->cap_ev ? w->cap_ev * 2 : 16;
        obs_event *ev = realloc(w->ev, cap * sizeof(*ev));
        if (ev == NULL) {
            w->ev_oom = 1;
            return;
        }
        w->ev = ev;
        w->cap_ev = cap;
    }
    w->ev[w->nev++] = (obs_event){type, id, ttl, remaining};
}

static void rec_granted(void *arg, int64_t id, int64_t ttl, int64_t remaining)
{
    record_event(arg, 0, id, ttl, remaining);
}

static void rec_revoked(void *arg, int64_t id)
{
    record_event(arg, 1, id, 0, 0);
}

static void rec_checkpointed(void *arg, int64_t id, int64_t remaining)
{
    record_event(arg, 2, id, 0, remaining);
}

/* ---- membership records (worker thread) ---- */

/* The InternalRequest field 20 (member_add) right after the id/proposer prefix. */
static const uint8_t *member_record(const struct raft_entry *e, size_t *len)
{
    const uint8_t *p = e->data;
    size_t o = 0;
    uint64_t v;
    for (int i = 0; i < 2 && o < e->len && (p[o] == 0x08 || p[o] == 0x10); i++) {
        o++;
        if (read_varint(p, e->len, &o, &v) < 0)
            return NULL;
    }
    if (o + 2 > e->len || p[o] != 0xA2 || p[o + 1] != 0x01)
        return NULL;
    o += 2;
    if (read_varint(p, e->len, &o, &v) < 0 || v > e->len - o)
        return NULL;
    *len = (size_t)v;
    return p + o;
}

/* The InternalRequest field 21 (member_change: op, id) after the prefix: 0 and op/id. */
static int member_op(const struct raft_entry *e, int *op, uint64_t *id)
{
    const uint8_t *p = e->data;
    size_t o = 0;
    uint64_t v;
    for (int i = 0; i < 2 && o < e->len && (p[o] == 0x08 || p[o] == 0x10); i++) {
        o++;
        if (read_varint(p, e->len, &o, &v) < 0)
            return -1;
    }
    if (o + 2 > e->len || p[o] != 0xAA || p[o + 1] != 0x01)
        return -1;
    o += 2;
    uint64_t l;
    if (read_varint(p, e->len, &o, &l) < 0 || l > e->len - o)
        return -1;
    size_t end = o + (size_t)l;
    *op = 0;
    *id = 0;
    while (o < end) {
        uint8_t tag = p[o++];
        if (read_varint(p, end, &o, &v) < 0)
            return -1;
        if (tag == 0x08)
            *op = (int)v;
        else if (tag == 0x10)
            *id = v;
    }
    return *op >= KV_NODE_MEMBER_ADD && *op <= KV_NODE_MEMBER_PROMOTE && *id ? 0 : -1;
}

static int is_member_record(const struct raft_entry *e)
{
    size_t len;
    int op;
    uint64_t id;
    return member_record(e, &len) != NULL || member_op(e, &op, &id) == 0;
}

/* Remembers the record until the configuration entry that adds its member applies (on every
 * member: both entries are in the log). Bounded: the oldest is dropped. */
static void note_change(ready_work *w, const struct raft_entry *e, int op, uint64_t id)
{
    if (w->n_changes == KV_NODE_MAX_RECORDS)
        return;
    uint64_t req_id, proposer;
    kv_node__entry_origin(e->data, e->len, &req_id, &proposer);
    w->changes[w->n_changes].op = op;
    w->changes[w->n_changes].id = id;
    w->changes[w->n_changes].proposer = proposer;
    w->changes[w->n_changes].req_id = req_id;
    w->n_changes++;
}

/* A membership change entry applied (fresh): note it for the leader, and stage an add's
 * record in the batch (mvcc/members.h kv_store_member_stage) until its configuration entry. */
static int keep_record(kv_node *n, ready_work *w, kv_store_batch *b, const struct raft_entry *e)
{
    size_t len;
    int op;
    uint64_t mid;
    if (member_op(e, &op, &mid) == 0) {
        note_change(w, e, op, mid);
        return 0;
    }
    const uint8_t *rec = member_record(e, &len);
    Kvdpb__Member *m = rec ? kvdpb__member__unpack(NULL, len, rec) : NULL;
    if (m == NULL)
        return 0;
    uint64_t id = m->id;
    note_change(w, e, m->is_learner ? KV_NODE_MEMBER_ADD_LEARNER : KV_NODE_MEMBER_ADD, id);
    kvdpb__member__free_unpacked(m, NULL);
    int rc = kv_store_member_stage(n->store, b, id, e->index, rec, len);
    if (rc == 0)
        w->member_staged = 1;
    return rc == -EINVAL ? 0 : rc; /* over the limits: its configuration entry is refused */
}

/* Test hook (tests/cluster/test_membership.c): KVD_FAILPOINT_MEMBER_STAGED=kill kills the
 * process with SIGKILL right after the commit of a batch that staged a MemberAdd's record, so
 * that the member restarts between the record and its configuration entry. Read only at such
 * a commit (worker thread; nobody calls setenv). */
static void member_staged_failpoint(void)
{
    const char *fp = getenv("KVD_FAILPOINT_MEMBER_STAGED");
    if (fp && strcmp(fp, "kill") == 0) {
        fprintf(stderr, "kvd: warning: failpoint: killed after staging a member record\n");
        raise(SIGKILL);
    }
}

/* A configuration entry: the members table follows raft's configuration (members.h). */
static int apply_conf(kv_node *n, ready_work *w, kv_store_batch *b, const struct raft_entry *e,
                      kv_result *res)
{
    (void)w;
    int op;
    raft_id id;
    int fresh = e->index > kv_store_batch_applied(b);
    int rc = kv_store_apply_noop(n->store, b, e->index);
    if (rc < 0 || !fresh || raft_conf_change_decode(e, &op, &id) != 0)
        return rc;
    size_t len = 0;
    uint8_t *rec = NULL;
    if (op != RAFT_CONF_REMOVE && (rc = kv_store_member_take_staged(n->store, b, id, &rec, &len)) &&
        rc != -ENOENT)
        return rc;
    int mop = op == RAFT_CONF_REMOVE        ? KV_NODE_MEMBER_REMOVE
              : op == RAFT_CONF_ADD_LEARNER ? KV_NODE_MEMBER_ADD_LEARNER
              : rec                         ? KV_NODE_MEMBER_ADD
                                            : KV_NODE_MEMBER_PROMOTE;
    rc = kv_store_member_change(n->store, b, mop, id, rec, len, res);
    free(rec);
    if (rc == 0 && res->err != KV_ERR_NONE)
        fprintf(stderr, "kvd: error: members table refused configuration change at %llu: %s%s\n",
                (unsigned long long)e->index, kv_etcd_err_msg(res->err), res->detail);
    return rc;
}

/* Entry i of what the worker applies: the committed entries, then (single voter) the new
 * ones. */
const struct raft_entry *kv_node__apply_entry(const ready_work *w, size_t i)
{
    return i < w->rd.n_committed ? &w->rd.committed[i] : &w->rd.entries[i - w->rd.n_committed];
}

size_t kv_node__apply_count(const ready_work *w)
{
    return w->rd.n_committed + (w->spec ? w->rd.n_entries : 0);
}

/* Applies the entries of the ready inside the batch b. A single voter also applies the entries
 * it persists in this same transaction: they are committed exactly when they are durable, and
 * the transaction makes both happen at once, so a write costs one commit (one sync on
 * the critical path). Raft hands them out again as committed later; the store skips them. */
static int apply_entries(kv_node *n, ready_work *w, kv_store_batch *b)
{
    size_t cnt = kv_node__apply_count(w);
    for (size_t i = 0; i < cnt; i++) {
        const struct raft_entry *e = kv_node__apply_entry(w, i);
        int rc;
        if (e->type == RAFT_ENTRY_CONF) {
            w->no_early = 1;
            rc = apply_conf(n, w, b, e, &w->results[i]);
            if (rc == 0 && e->index > w->applied) {
                w->applied = e->index;
                w->fresh[i] = 1;
            }
        } else if (e->len == 0 || is_member_record(e)) {
            /* a leader's empty entry, or a member record (kept until its configuration entry) */
            if (e->len)
                w->no_early = 1; /* its waiter may go on to a configuration change */
            if (e->len && e->index > kv_store_batch_applied(b) &&
                (rc = keep_record(n, w, b, e)) < 0)
                return rc;
            uint64_t id, proposer;
            kv_node__entry_origin(e->data, e->len, &id, &proposer);
            rc = kv_store_apply_noop(n->store, b, e->index);
            if (rc == 0 && e->index > w->applied) {
                w->applied = e->index;
                w->fresh[i] = 1;
                if (e->len && proposer == n->self)
                    w->ids[i] = id;
            }
        } else {
            uint64_t id, proposer;
            kv_node__entry_origin(e->data, e->len, &id, &proposer);
            kv_store_batch_set_quiet(b, proposer != n->self); /* responses for our waiters only */
            uint64_t t0 = uv_hrtime();
            rc = kv_store_apply(n->store, b, e->index, e->data, e->len, &n->hdr, &w->results[i]);
            if (uv_hrtime() - t0 > KV_NODE_SLOW_APPLY_NS) /* etcd_server_slow_apply_total */
                atomic_fetch_add(&n->slow_applies, 1);
            if (rc == 0 && w->results[i].barrier)
                w->no_early = 1; /* auth, alarms, compaction: admission reads it */
            if (rc == 0 && !w->results[i].skipped) {
                if (proposer == n->self)
                    w->ids[i] = id;
                if (e->index > w->applied)
                    w->applied = e->index;
                if (w->results[i].revision > w->revision)
                    w->revision = w->results[i].revision;
            }
        }
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* What apply_entries changes in w before the batch commits, to drop a first pass. */
typedef struct apply_mark {
    uint64_t applied;
    int64_t revision;
    int no_early;
    size_t nev;
    int ev_oom;
} apply_mark;

/* Drops what a spoilt first pass left in w (results, ids, fresh entries, lease events). */
static void apply_undo(ready_work *w, const apply_mark *m)
{
    size_t cnt = kv_node__apply_count(w);
    for (size_t i = 0; i < cnt; i++) {
        free(w->results[i].resp);
        memset(&w->results[i], 0, sizeof w->results[i]);
        w->ids[i] = 0;
        w->fresh[i] = 0;
    }
    w->applied = m->applied;
    w->revision = m->revision;
    w->no_early = m->no_early;
    w->nev = m->nev;
    w->ev_oom = m->ev_oom;
}

/* WAL mode: applies the ready's entries in the batch's own transaction (shared: no LMDB child
 * transaction per request, store.h kv_store_batch_set_shared). A request that failed after it
 * may have written spoils the batch (-EAGAIN): it is aborted, what the pass left in w is
 * dropped, and the same entries are applied again in a new batch with a child per request,
 * where the request fails alone. A ready with a configuration or member-record entry takes
 * that second way at once: what those change outside the batch is not undone. *bp is NULL
 * if the second batch could not begin. */
static int apply_wal(kv_node *n, ready_work *w, kv_store_batch **bp)
{
    size_t cnt = kv_node__apply_count(w);
    int shared = 1;
    for (size_t i = 0; i < cnt && shared; i++) {
        const struct raft_entry *e = kv_node__apply_entry(w, i);
        shared = e->type != RAFT_ENTRY_CONF && !is_member_record(e);
    }
    if (shared) {
        apply_mark m = {w->applied, w->revision, w->no_early, w->nev, w->ev_oom};
        kv_store_batch_set_shared(*bp, 1);
        int rc = apply_entries(n, w, *bp);
        if (rc != -EAGAIN)
            return rc;
        kv_store_batch_abort(n->store, *bp);
        *bp = NULL;
        apply_undo(w, &m);
        atomic_fetch_add(&n->apply_retries, 1);
        if ((rc = kv_store_batch_begin(n->store, bp)))
            return rc;
    }
    return apply_entries(n, w, *bp);
}

/* Does this commit carry something raft needs durable before it goes on (log entries, a new
 * term or vote, a snapshot, a log compaction)? A single voter's entries are applied in the
 * same commit, so they need it too. */
static int durable_needed(const ready_work *w)
{
    if (w->has_compact)
        return 1;
    if (!w->has_ready)
        return 0;
    const struct raft_ready *rd = &w->rd;
    return rd->n_entries || rd->has_snapshot ||
           (rd->hs_changed && (rd->hs.term != w->node->persisted_hs.term ||
                               rd->hs.vote != w->node->persisted_hs.vote));
}

/* May the loop acknowledge this commit's writes before it is flushed (node_ready.c
 * kv_node__on_early)? Only an apply-only commit (nothing raft needs durable: every entry it
 * applies is committed, i.e. durable in a quorum's logs; a single voter's own new entries are
 * not, they become durable by this very commit), with waiters, and nothing the loop must see
 * before a client may act on the answer: no configuration or member-record entry, no lease
 * event (a client may renew a granted lease at once), no auth, alarm or compaction change
 * (kv_result.barrier: the next request's admission reads it: a changed password must refuse
 * the old token at once, a disarmed NOSPACE must admit the next put, a Watch from before an
 * acknowledged Compact must be told it is compacted). */
static int early_ok(const ready_work *w)
{
    if (!w->has_ready || w->no_early || w->nev || w->ev_oom || w->n_changes)
        return 0;
    /* WAL mode: the ready's own entries (a single voter's too) are durable already
     * (kv_node__wal_persist ran first); the LMDB commit carries only derived state. */
    if (!w->node->wal && (w->spec || durable_needed(w)))
        return 0;
    size_t cnt = kv_node__apply_count(w);
    for (size_t i = 0; i < cnt; i++)
        if (w->ids[i])
            return 1;
    return 0;
}

/* WAL mode: may raft go on before this ready's LMDB commit (node_ready.c kv_node__on_early)?
 * Its log part is durable; nothing the loop must see at the commit (a configuration or member
 * record, a lease event), no snapshot and no log compaction (that commit is synced and the
 * WAL's marker follows it on this thread). */
static int early_advance_ok(const ready_work *w)
{
    return w->node->wal && w->has_ready && !w->no_early && !w->nev && !w->ev_oom && !w->n_changes &&
           !w->has_compact && !w->rd.has_snapshot && !w->cstep_ran;
}

void kv_node__work_ready(uv_work_t *req)
{
    ready_work *w = req->data;
    kv_node *n = w->node;
    kv_store_batch *b = NULL;
    int rc = 0;
    if (n->wal && w->has_ready && w->rd.has_snapshot) {
        /* a ready advanced early may still be committing to data.mdb: that commit goes
         * first (LMDB's writer lock), then the snapshot's checks and install */
        kv_store_batch *bar = NULL;
        if (kv_store_batch_begin(n->store, &bar) == 0)
            kv_store_batch_abort(n->store, bar);
    }
    if (w->has_ready && w->rd.has_snapshot && w->snap_path) {
        /* the received file replaces data.mdb, with this whole ready in it (node_snap.c) */
        w->rc = kv_node__install_file(n, w);
        return;
    }
    if (n->wal && w->has_ready) {
        /* the log part: one WAL flush; the apply below commits to LMDB off the log's path */
        if ((rc = kv_node__wal_persist(n, w)) < 0 ||
            (kv_node__apply_count(w) == 0 && !w->has_compact)) {
            w->rc = rc;
            return;
        }
    }
    rc = kv_store_batch_begin(n->store, &b);
    if (rc == 0 && w->has_ready && n->wal) {
        rc = apply_wal(n, w, &b);
    } else if (rc == 0 && w->has_ready) {
        MDB_txn *txn = kv_store_batch_txn(b);
        if (w->rd.has_snapshot)
            rc = kv_node__install_snapshot(n, b, &w->rd.snapshot.meta, w->snap_path);
        if (rc == 0 && w->rd.n_entries)
            rc = kv_raftlog_append(n->log, txn, w->rd.entries, w->rd.n_entries);
        if (rc == 0 && w->spec && w->rd.n_entries) {
            /* single voter: these entries are committed by this very commit; recording it
             * keeps a restart from handing them out again */
            w->rd.hs_changed = true;
            raft_index last = w->rd.entries[w->rd.n_entries - 1].index;
            if (w->rd.hs.commit < last)
                w->rd.hs.commit = last;
        }
        if (rc == 0 && w->rd.hs_changed)
            rc = kv_raftlog_set_hard_state(n->log, txn, &w->rd.hs);
        if (rc == 0)
            rc = apply_entries(n, w, b);
    }
    if (rc == 0 && w->has_compact)
        rc = kv_node__persist_compaction(n, kv_store_batch_txn(b), &w->compact);
    /* Compaction steps run in compaction-only batches, alternating with the write batches
     * (kv_node__drive), never inside a write batch: a put's commit never carries the pages
     * a step dirties (docs/ARCHITECTURE.md "Compaction"). */
    if (b != NULL && rc == 0 && !w->has_ready && (w->cstep_ran = 1))
        w->cstep_rc =
            kv_store_compact_step(n->store, b, n->compact_batch_keys, n->compact_batch_revs,
                                  KV_NODE_COMPACT_STEP_US, &w->ckeys, &w->cremoved);
    if (b != NULL && rc == 0 && n->early_open && (early_ok(w) || early_advance_ok(w))) {
        /* results and ids are final: the loop may answer now (and, WAL mode, let raft go on:
         * the next ready's WAL flush overlaps this commit); this thread only commits */
        if (early_ok(w)) /* before early_adv: the loop reads them in the other order */
            atomic_store_explicit(&w->early, 1, memory_order_release);
        if (early_advance_ok(w))
            atomic_store_explicit(&w->early_adv, 1, memory_order_release);
        uv_async_send(&n->early_async);
    }
    /* (WAL mode: every LMDB commit is off the log's path, so each one may be delayed) */
    if (b != NULL && rc == 0 && w->fp_delay_ms && (n->wal || !durable_needed(w))) {
        struct timespec ts = {w->fp_delay_ms / 1000u, (long)(w->fp_delay_ms % 1000u) * 1000000L};
        nanosleep(&ts, NULL);
    }
    uint64_t t_commit = uv_hrtime();
    if (b != NULL && n->wal) {
        /* WAL mode: the log is durable already. A log compaction's commit is synced (the WAL
         * may then drop what it held for the state: kv_node__wal_compacted); every other one
         * is MDB_NOMETASYNC: LMDB's integrity holds after a power loss, a lost commit is
         * replayed from the WAL. */
        if (rc == 0 && w->has_compact) {
            rc = kv_store_batch_commit(n->store, b);
            w->durable = 1;
            w->flushes = kv_store_commit_flushes(n->store, 0);
            if (rc == 0)
                rc = kv_node__wal_compacted(n, &w->compact);
        } else if (rc == 0) {
            rc = kv_store_batch_commit_nometasync(n->store, b);
            w->flushes = kv_store_commit_flushes(n->store, 1);
        } else {
            kv_store_batch_abort(n->store, b);
        }
        if (rc == 0)
            kv_metric_observe(n->m_backend_commit, (double)(uv_hrtime() - t_commit) / 1e9);
    } else if (b != NULL) {
        if (rc == 0 && !durable_needed(w)) {
            /* Only applies (and compaction): derivable from the log, already durable. LMDB's
             * integrity still holds after a power loss; a lost commit is replayed. */
            rc = kv_store_batch_commit_nometasync(n->store, b);
            w->flushes = kv_store_commit_flushes(n->store, 1);
        } else if (rc == 0) {
            rc = kv_store_batch_commit(n->store, b);
            w->durable = 1;
            w->flushes = kv_store_commit_flushes(n->store, 0);
        } else {
            kv_store_batch_abort(n->store, b);
        }
        if (rc == 0) {
            /* etcd's backend commit is every bbolt commit; its WAL fsync is the log's flush,
             * here the commit that makes raft's entries or hard state durable */
            double sec = (double)(uv_hrtime() - t_commit) / 1e9;
            kv_metric_observe(n->m_backend_commit, sec);
            if (w->durable && w->flushes) /* the log's flush (none under MDB_NOSYNC) */
                kv_node_observe_wal_fsync(n, sec);
        }
    }
    if (rc == 0 && w->has_ready && !w->cstep_ran)
        w->cpending = kv_store_compact_pending(n->store, NULL) > 0; /* a Compact applied? */
    if (rc == 0 && w->member_staged)
        member_staged_failpoint();
    w->rc = rc;
}

void kv_node__record_lease_events(kv_node *n, int on)
{
    kv_store_lease_observer rec = {
        .arg = n, .granted = rec_granted, .revoked = rec_revoked, .checkpointed = rec_checkpointed};
    kv_store_set_lease_observer(n->store, on ? &rec : NULL);
}
