#include "node/node.h"

#include "internal.pb-c.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One /health probe waiting on a shared health barrier. */
typedef struct health_waiter {
    struct health_waiter *next;
    void (*done)(void *arg, int status);
    void *arg;
} health_waiter;

struct kv_node_req {
    kv_node_req *next;
    uint8_t *data; /* packed InternalRequest; NULL for a barrier */
    size_t len;
    kv_node_done_fn done;
    void (*barrier_done)(void *arg, int status);
    void *arg;
    kv_node *health; /* set on a health barrier: its waiters are health_waiters */
    health_waiter *waiters;
    int (*excl_work)(void *arg);              /* exclusive item: runs alone on the worker */
    void (*excl_done)(void *arg, int status); /* then this, on the loop */
};

/* An exclusive item in flight (e.g. defragment): no batch runs meanwhile. */
typedef struct excl_work {
    uv_work_t req;
    kv_node *node;
    kv_node_req *r;
    int rc;
} excl_work;

/* Lease observer events of one batch, recorded on the worker thread and replayed on the loop
 * thread after the commit, so the lessor is only ever touched by the loop. */
typedef struct obs_event {
    int type; /* 0 granted, 1 revoked, 2 checkpointed */
    int64_t id, ttl, remaining;
} obs_event;

/* One batch in flight: applied and committed on a libuv worker thread. */
typedef struct batch_work {
    uv_work_t req;
    kv_node *node;
    kv_node_req *head; /* the batch's requests, in order */
    uint64_t count;    /* requests + barriers */
    size_t nreq;       /* requests (results[] entries) */
    kv_result *results;
    uint64_t first_index;
    int64_t revision; /* max revision seen */
    int rc;
    obs_event *ev;
    size_t nev, cap_ev;
    int ev_oom;
    int cstep_rc;             /* kv_store_compact_step: 1 more, 0 none pending, < 0 error */
    uint64_t ckeys, cremoved; /* keys visited / records removed by the step */
} batch_work;

/* A Compact with physical=true waiting for the physical compaction to finish. */
typedef struct compact_waiter {
    struct compact_waiter *next;
    void (*fn)(void *arg, int status); /* NULL once detached */
    void *arg;
} compact_waiter;

struct kv_node {
    uv_loop_t *loop;
    kv_store *store;
    kv_header_info hdr;
    uint32_t max_pending;
    uint64_t next_index; /* index the next applied request gets */
    int64_t revision;    /* store revision after the last committed batch */

    kv_node_req *head, *tail; /* FIFO of queued requests */
    uint64_t pending;
    batch_work *inflight;           /* at most one batch at a time: apply order is log order */
    kv_store_lease_observer target; /* the real observer (lessor), loop thread */

    uv_check_t check; /* starts a batch right after the loop's I/O phase */
    uv_idle_t idle;   /* keeps poll from blocking while requests wait and no batch runs */
    int handles_open;
    int closing;
    int stalled;            /* failpoint */
    int excl_busy;          /* an exclusive item is running */
    int disk_full;          /* the last commit failed with ENOSPC (in-memory NOSPACE) */
    unsigned alarm_pending; /* ACTIVATE proposals in flight, by type bit */
    kv_metric *m_alarm[3];  /* kvd_alarms{type=...} */

    /* Health barriers (kv_node_health_barrier): outside max_pending, coalesced. */
    uint32_t max_health_waiters;
    uint64_t health_waiting; /* probes waiting (queued or in a running batch) */
    kv_node_req *health_q;   /* the health barrier in the queue not yet taken by a batch */
    kv_metric *m_health_barriers, *m_health_coalesced, *m_health_refused;

    /* Batched physical compaction (mvcc/store.h): one step of at most compact_batch_keys keys
     * runs inside every batch while one is pending; with no writes queued, compaction-only
     * batches keep it going. */
    int compact_pending;
    int compact_error; /* last step failed: retry only with write batches (no spinning) */
    uint32_t compact_batch_keys;
    compact_waiter *cwait;
    kv_metric *m_ckeys, *m_cremoved, *m_cbatches;

    kv_node_stats st;
    kv_metric *m_batches, *m_proposals, *m_refused, *m_batch_size_max;
    kv_metrics *metrics;
    kv_node_commit_fn commit_fn; /* watch hub */
    void *commit_arg;
};

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

static double gauge_applied(void *arg)
{
    return (double)((kv_node *)arg)->st.applied_index;
}

/* Completes a barrier (plain or health) with status. */
static void finish_barrier(kv_node_req *r, int status)
{
    if (r->barrier_done)
        r->barrier_done(r->arg, status);
    while (r->waiters) {
        health_waiter *hw = r->waiters;
        r->waiters = hw->next;
        r->health->health_waiting--;
        hw->done(hw->arg, status);
        free(hw);
    }
}

static void fail_req(kv_node_req *r, int code, const char *msg)
{
    if (r->excl_work) {
        if (r->excl_done)
            r->excl_done(r->arg, -ECANCELED);
    } else if (r->data == NULL) {
        finish_barrier(r, -ECANCELED);
    } else if (r->barrier_done) {
        r->barrier_done(r->arg, -ECANCELED);
    } else if (r->done) {
        kv_result res;
        memset(&res, 0, sizeof(res));
        res.code = code;
        snprintf(res.msg, sizeof(res.msg), "%s", msg);
        r->done(r->arg, &res);
    }
    free(r->data);
    free(r);
}

/* ---- worker thread ---- */

static void record_event(void *arg, int type, int64_t id, int64_t ttl, int64_t remaining)
{
    batch_work *w = ((kv_node *)arg)->inflight;
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

/* Applies the batch in one write transaction and commits it: one sync. Touches only the store
 * and this batch_work; the store's read path is safe to use concurrently (LMDB MVCC). */
static void work_apply(uv_work_t *req)
{
    batch_work *w = req->data;
    kv_node *n = w->node;
    kv_store_batch *b = NULL;
    int rc = kv_store_batch_begin(n->store, &b);
    uint64_t index = w->first_index;
    size_t i = 0;
    for (kv_node_req *r = w->head; rc == 0 && r; r = r->next) {
        if (r->data == NULL)
            continue;
        rc = kv_store_apply(n->store, b, index, r->data, r->len, &n->hdr, &w->results[i]);
        if (rc < 0)
            break;
        if (!w->results[i].skipped && w->results[i].revision > w->revision)
            w->revision = w->results[i].revision;
        index++;
        i++;
    }
    if (b != NULL && rc == 0)
        w->cstep_rc = kv_store_compact_step(n->store, b, w->node->compact_batch_keys, &w->ckeys,
                                            &w->cremoved);
    if (b != NULL) {
        if (rc == 0)
            rc = kv_store_batch_commit(n->store, b);
        else
            kv_store_batch_abort(n->store, b);
    }
    w->rc = rc;
}

/* ---- loop thread ---- */

static void start_batch(kv_node *n);
static void start_work(kv_node *n, kv_node_req *batch, uint64_t count, size_t nreq);

static void replay_events(kv_node *n, const batch_work *w)
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
        fprintf(stderr, "kvd: out of memory recording lease events; lessor may lag until the "
                        "next promote\n");
}

static void fire_waiters(kv_node *n, int status)
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

/* After a committed batch: account its compaction step; wake physical Compacts when done. */
static void compaction_progress(kv_node *n, const batch_work *w)
{
    kv_metric_add(n->m_ckeys, (int64_t)w->ckeys);
    kv_metric_add(n->m_cremoved, (int64_t)w->cremoved);
    if (w->ckeys)
        kv_metric_inc(n->m_cbatches);
    if (w->cstep_rc < 0) {
        if (!n->compact_error)
            fprintf(stderr, "kvd: compaction step failed: %s; retrying with the next writes\n",
                    strerror(-w->cstep_rc));
        n->compact_error = 1;
        n->compact_pending = 1;
        fire_waiters(n, w->cstep_rc); /* physical Compacts are told; the step is retried */
        return;
    }
    n->compact_error = 0;
    n->compact_pending = w->cstep_rc == 1;
    if (!n->compact_pending)
        fire_waiters(n, 0);
}

static void free_work(batch_work *w)
{
    for (size_t k = 0; k < w->nreq; k++)
        free(w->results[k].resp);
    free(w->results);
    free(w->ev);
    free(w);
}

static void maybe_free(kv_node *n)
{
    if (n->closing && n->handles_open == 0 && n->inflight == NULL && !n->excl_busy)
        free(n);
}

unsigned kv_node_alarms(const kv_node *n)
{
    return kv_store_alarms(n->store) | (n->disk_full ? 1u << KV_ALARM_NOSPACE : 0u);
}

static void update_alarm_metrics(kv_node *n)
{
    unsigned a = kv_node_alarms(n);
    for (int t = 1; t < 3; t++)
        kv_metric_set(n->m_alarm[t], (a & (1u << t)) ? 1.0 : 0.0);
}

static void on_alarm_proposed(void *arg, kv_result *res)
{
    kv_node *n = arg;
    /* res->revision is unused; the type is recovered from the pending set (one per type). */
    if (res->code != 0)
        fprintf(stderr, "kvd: raising an alarm failed: %s\n", res->msg);
    n->alarm_pending = 0;
    update_alarm_metrics(n);
}

/* Proposes ACTIVATE <type> for this member through the ordered path, as etcd's
 * quotaAlarmer/checkHashKV do (at most one proposal in flight). */
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
    if (kv_node_propose(n, buf, len, on_alarm_proposed, n, NULL) < 0) {
        kv_store_request_alarm(n->store, type);
        return;
    }
    n->alarm_pending = 1u << type;
}

static void raise_requested_alarms(kv_node *n)
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

static void after_apply(uv_work_t *req, int status)
{
    batch_work *w = req->data;
    kv_node *n = w->node;
    kv_node_req *batch = w->head;
    int rc = status < 0 ? status : w->rc;

    if (rc == -ENOSPC) {
        /* Disk full (D12): nothing of this batch is durable. Fail it with etcd's no-space
         * error, report NOSPACE at once (health, quota check) and persist the alarm as soon as
         * a commit fits again; deletes and compaction still run (they may free room). */
        fprintf(stderr,
                "kvd: apply batch failed: disk full (%s); %llu requests failed; NOSPACE "
                "raised\n",
                strerror(-rc), (unsigned long long)w->count);
        if (!n->disk_full && !(kv_store_alarms(n->store) & (1u << KV_ALARM_NOSPACE)))
            kv_store_request_alarm(n->store, KV_ALARM_NOSPACE);
        n->disk_full = 1;
        kv_store_status ss;
        if (kv_store_get_status(n->store, &ss) == 0) {
            n->next_index = ss.applied_index + 1;
            n->revision = ss.revision;
        }
        while (batch) {
            kv_node_req *next = batch->next;
            fail_req(batch, 8, "etcdserver: mvcc: database space exceeded");
            batch = next;
        }
    } else if (rc < 0) {
        /* Storage failure: nothing of this batch is durable; no one is told otherwise. */
        fprintf(stderr, "kvd: apply batch failed: %s; %llu requests failed\n", strerror(-rc),
                (unsigned long long)w->count);
        kv_store_status ss;
        if (kv_store_get_status(n->store, &ss) == 0) {
            n->next_index = ss.applied_index + 1;
            n->revision = ss.revision;
        }
        while (batch) {
            kv_node_req *next = batch->next;
            fail_req(batch, 14, "etcdserver: request failed: storage error");
            batch = next;
        }
        if (n->compact_pending) {
            n->compact_error = 1; /* no compaction-only batches until a write succeeds */
            fire_waiters(n, rc);
        }
    } else {
        int64_t rev_before = n->revision;
        n->next_index = w->first_index + w->nreq;
        if (w->revision > n->revision)
            n->revision = w->revision;
        n->st.batches_total++;
        n->st.applied_index = n->next_index - 1;
        n->st.last_batch_size = w->count;
        if (w->count > n->st.max_batch_size)
            n->st.max_batch_size = w->count;
        kv_metric_inc(n->m_batches);
        kv_metric_set(n->m_batch_size_max, (double)n->st.max_batch_size);
        if (n->disk_full) { /* a commit fitted again: the persisted alarm takes over */
            n->disk_full = 0;
            if (!(kv_store_alarms(n->store) & (1u << KV_ALARM_NOSPACE)))
                kv_store_request_alarm(n->store, KV_ALARM_NOSPACE);
        }
        replay_events(n, w);
        compaction_progress(n, w);
        if (n->commit_fn && n->revision > rev_before)
            n->commit_fn(n->commit_arg, n->revision);

        /* Durable: now acknowledge, in order. */
        size_t i = 0;
        while (batch) {
            kv_node_req *next = batch->next;
            if (batch->data == NULL) {
                finish_barrier(batch, 0);
            } else {
                if (batch->done)
                    batch->done(batch->arg, &w->results[i]);
                i++;
            }
            free(batch->data);
            free(batch);
            batch = next;
        }
    }
    n->inflight = NULL;
    free_work(w);
    if (n->closing) {
        maybe_free(n);
        return;
    }
    update_alarm_metrics(n);
    raise_requested_alarms(n);
    start_batch(n); /* what queued meanwhile forms the next batch */
}

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
    if (e->r->excl_done)
        e->r->excl_done(e->r->arg, status < 0 ? status : e->rc);
    free(e->r);
    free(e);
    if (n->closing) {
        maybe_free(n);
        return;
    }
    start_batch(n);
}

/* Runs the exclusive item at the head of the queue alone (no batch is in flight). */
static void start_exclusive(kv_node *n)
{
    kv_node_req *r = n->head;
    n->head = r->next;
    if (n->head == NULL)
        n->tail = NULL;
    n->pending--;
    r->next = NULL;
    excl_work *e = calloc(1, sizeof(*e));
    if (e == NULL) {
        fail_req(r, 8, "out of memory");
        return;
    }
    e->req.data = e;
    e->node = n;
    e->r = r;
    n->excl_busy = 1;
    if (uv_queue_work(n->loop, &e->req, excl_run, excl_after) < 0) {
        n->excl_busy = 0;
        free(e);
        fail_req(r, 14, "cannot schedule");
    }
}

/* Takes everything queued as the next batch. Barrier-only batches complete at once (nothing to
 * write, and no batch is in flight, so every earlier write is already durable). */
static void start_batch(kv_node *n)
{
    if (n->inflight || n->excl_busy || n->stalled)
        return;
    if (n->head == NULL) {
        uv_idle_stop(&n->idle);
        if (n->compact_pending && !n->compact_error && !n->closing)
            start_work(n, NULL, 0, 0);
        return;
    }
    uv_idle_stop(&n->idle);
    if (n->head->excl_work) {
        start_exclusive(n);
        return;
    }
    /* The batch: everything queued up to the next exclusive item (which runs after it). */
    kv_node_req *batch = n->head, *last = n->head;
    uint64_t count = 1;
    uint64_t reserved = batch == n->health_q;
    while (last->next && !last->next->excl_work) {
        last = last->next;
        count++;
        reserved += last == n->health_q;
    }
    n->head = last->next;
    if (n->head == NULL)
        n->tail = NULL;
    last->next = NULL;
    n->pending -= count - reserved; /* the health barrier is outside max_pending */
    if (reserved)
        n->health_q = NULL; /* later probes need a later barrier */

    size_t nreq = 0;
    for (kv_node_req *r = batch; r; r = r->next)
        nreq += r->data != NULL;
    if (nreq == 0 && !n->compact_pending) {
        while (batch) {
            kv_node_req *next = batch->next;
            finish_barrier(batch, 0);
            free(batch);
            batch = next;
        }
        return;
    }
    start_work(n, batch, count, nreq);
}

/* Hands batch (nreq requests, count entries, may be empty: a compaction-only batch) to the
 * apply worker. */
static void start_work(kv_node *n, kv_node_req *batch, uint64_t count, size_t nreq)
{
    batch_work *w = calloc(1, sizeof(*w));
    kv_result *results = calloc(nreq ? nreq : 1, sizeof(*results));
    if (w == NULL || results == NULL) {
        free(w);
        free(results);
        while (batch) {
            kv_node_req *next = batch->next;
            fail_req(batch, 8, "etcdserver: too many requests: out of memory");
            batch = next;
        }
        return;
    }
    w->req.data = w;
    w->node = n;
    w->head = batch;
    w->count = count;
    w->nreq = nreq;
    w->results = results;
    w->first_index = n->next_index;
    w->revision = n->revision;
    n->inflight = w;
    int rc = uv_queue_work(n->loop, &w->req, work_apply, after_apply);
    if (rc < 0) {
        n->inflight = NULL;
        w->head = NULL;
        free_work(w);
        while (batch) {
            kv_node_req *next = batch->next;
            fail_req(batch, 14, "etcdserver: request failed: cannot schedule apply");
            batch = next;
        }
    }
}

static void on_check(uv_check_t *h)
{
    kv_node *n = h->data;
    raise_requested_alarms(n);
    start_batch(n);
}

static void on_idle(uv_idle_t *h)
{
    (void)h; /* only exists so that uv_run does not block in poll while work is queued */
}

int kv_node_init(kv_node **out, uv_loop_t *loop, kv_store *store, const kv_node_config *cfg,
                 const kv_header_info *hdr, kv_metrics *metrics)
{
    kv_node *n = calloc(1, sizeof(*n));
    if (n == NULL)
        return -ENOMEM;
    n->loop = loop;
    n->store = store;
    n->hdr = *hdr;
    n->max_pending = cfg && cfg->max_pending ? cfg->max_pending : 10000;
    n->max_health_waiters = cfg && cfg->max_health_waiters ? cfg->max_health_waiters : 64;
    kv_store_status ss;
    int rc = kv_store_get_status(store, &ss);
    if (rc < 0) {
        free(n);
        return rc;
    }
    n->next_index = ss.applied_index + 1;
    n->revision = ss.revision;
    n->st.applied_index = ss.applied_index;
    n->compact_batch_keys = cfg && cfg->compact_batch_keys ? cfg->compact_batch_keys : 1000;
    rc = kv_store_compact_pending(store, NULL);
    if (rc < 0) {
        free(n);
        return rc;
    }
    n->compact_pending = rc; /* resume a compaction interrupted by a restart */

    kv_store_lease_observer rec = {
        .arg = n, .granted = rec_granted, .revoked = rec_revoked, .checkpointed = rec_checkpointed};
    kv_store_set_lease_observer(store, &rec);

    uv_check_init(loop, &n->check);
    uv_idle_init(loop, &n->idle);
    n->check.data = n->idle.data = n;
    n->handles_open = 2;
    uv_check_start(&n->check, on_check);
    if (n->compact_pending)
        uv_idle_start(&n->idle, on_idle); /* the first check starts the compaction batches */

    n->metrics = metrics;
    if (metrics) {
        n->m_batches = kv_metrics_counter(metrics, "kvd_apply_batches_total",
                                          "Write batches committed (one sync each).", NULL);
        n->m_proposals = kv_metrics_counter(metrics, "kvd_proposals_total",
                                            "Write requests queued for apply.", NULL);
        n->m_refused = kv_metrics_counter(
            metrics, "kvd_proposals_refused_total",
            "Write requests refused because the queue was full (--max-pending-proposals).", NULL);
        n->m_batch_size_max = kv_metrics_gauge(metrics, "kvd_apply_batch_size_max",
                                               "Largest write batch committed so far.", NULL);
        kv_metrics_gauge_fn(metrics, "kvd_proposals_pending",
                            "Write requests queued for the next batch.", gauge_pending, n);
        kv_metrics_gauge_fn(metrics, "kvd_applied_index", "Last applied log index.", gauge_applied,
                            n);
        n->m_health_barriers =
            kv_metrics_counter(metrics, "kvd_health_barriers_total",
                               "Health barriers queued through the apply path (reserved, outside "
                               "--max-pending-proposals).",
                               NULL);
        n->m_health_coalesced =
            kv_metrics_counter(metrics, "kvd_health_probes_coalesced_total",
                               "Health probes that joined an already queued health barrier.", NULL);
        n->m_health_refused = kv_metrics_counter(
            metrics, "kvd_health_probes_refused_total",
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
                                           "Write batches that carried a compaction step.", NULL);
        kv_metrics_gauge_fn(metrics, "kvd_compaction_pending",
                            "1 while a physical compaction is in progress.", gauge_cpending, n);
    }
    update_alarm_metrics(n);
    *out = n;
    return 0;
}

static void on_handle_closed(uv_handle_t *h)
{
    kv_node *n = h->data;
    n->handles_open--;
    maybe_free(n);
}

void kv_node_close(kv_node *n)
{
    if (n == NULL || n->closing)
        return;
    n->closing = 1;
    while (n->head) {
        kv_node_req *r = n->head;
        n->head = r->next;
        fail_req(r, 14, "etcdserver: server stopped");
    }
    n->tail = NULL;
    n->pending = 0;
    n->health_q = NULL;
    fire_waiters(n, -ECANCELED);
    if (n->metrics)
        kv_metrics_gauge_fn_remove(n->metrics, n);
    uv_close((uv_handle_t *)&n->check, on_handle_closed);
    uv_close((uv_handle_t *)&n->idle, on_handle_closed);
}

/* reserved: a health barrier, which neither counts against nor is refused by max_pending. */
static int enqueue(kv_node *n, kv_node_req *r, int reserved)
{
    if (n->closing)
        return -ESHUTDOWN;
    if (!reserved && n->pending >= n->max_pending) {
        n->st.refused_total++;
        kv_metric_inc(n->m_refused);
        return -EBUSY;
    }
    int was_empty = n->head == NULL;
    if (n->tail)
        n->tail->next = r;
    else
        n->head = r;
    n->tail = r;
    if (!reserved)
        n->pending++;
    /* While a batch is in flight its completion wakes the loop; spinning would only burn CPU. */
    if (was_empty && !n->stalled && n->inflight == NULL && !n->excl_busy)
        uv_idle_start(&n->idle, on_idle);
    return 0;
}

int kv_node_propose(kv_node *n, uint8_t *req, size_t len, kv_node_done_fn done, void *arg,
                    kv_node_req **handle)
{
    kv_node_req *r = calloc(1, sizeof(*r));
    if (r == NULL) {
        free(req);
        return -ENOMEM;
    }
    r->data = req;
    r->len = len;
    r->done = done;
    r->arg = arg;
    int rc = enqueue(n, r, 0);
    if (rc < 0) {
        free(req);
        free(r);
        return rc;
    }
    n->st.proposals_total++;
    kv_metric_inc(n->m_proposals);
    if (handle)
        *handle = r;
    return 0;
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
    kv_node_req *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return -ENOMEM;
    r->excl_work = work;
    r->excl_done = done;
    r->arg = arg;
    int rc = enqueue(n, r, 0);
    if (rc < 0)
        free(r);
    return rc;
}

int kv_node_barrier(kv_node *n, void (*done)(void *arg, int status), void *arg)
{
    kv_node_req *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return -ENOMEM;
    r->barrier_done = done;
    r->arg = arg;
    int rc = enqueue(n, r, 0);
    if (rc < 0)
        free(r);
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
    if (n->health_q) { /* a barrier is queued and not yet running: it answers for us too */
        hw->next = n->health_q->waiters;
        n->health_q->waiters = hw;
        n->health_waiting++;
        kv_metric_inc(n->m_health_coalesced);
        return 0;
    }
    kv_node_req *r = calloc(1, sizeof(*r));
    if (r == NULL) {
        free(hw);
        return -ENOMEM;
    }
    r->health = n;
    r->waiters = hw;
    int rc = enqueue(n, r, 1);
    if (rc < 0) {
        free(hw);
        free(r);
        return rc;
    }
    n->health_q = r;
    n->health_waiting++;
    kv_metric_inc(n->m_health_barriers);
    return 0;
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
    else if (n->head && n->inflight == NULL && !n->excl_busy)
        uv_idle_start(&n->idle, on_idle);
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

int64_t kv_node_revision(const kv_node *n)
{
    return n->revision;
}

void kv_node_set_term(kv_node *n, uint64_t term)
{
    n->hdr.raft_term = term;
}

void kv_node_get_stats(const kv_node *n, kv_node_stats *st)
{
    *st = n->st;
    st->pending = n->pending;
}

int kv_node_compact_wait(kv_node *n, void (*fn)(void *arg, int status), void *arg,
                         kv_node_compact_waiter **handle)
{
    if (n->closing)
        return -ESHUTDOWN;
    if (!n->compact_pending)
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
    if (n->inflight == NULL && n->head == NULL)
        uv_idle_start(&n->idle, on_idle);
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

/* ---- raft (issue 9): placeholders until the raft driver lands ---- */

void kv_node_get_raft_status(const kv_node *n, kv_node_raft_status *st)
{
    memset(st, 0, sizeof(*st));
    st->term = n->hdr.raft_term;
    st->leader = n->hdr.member_id;
    st->commit_index = st->applied_index = st->last_index = n->st.applied_index;
    st->role = 3;
}

int kv_node_read_index(kv_node *n, void (*done)(void *arg, int status), void *arg)
{
    return kv_node_barrier(n, done, arg);
}

int kv_node_change_member(kv_node *n, int op, uint64_t id, uint8_t *record, size_t record_len,
                          kv_node_done_fn done, void *arg)
{
    (void)n, (void)op, (void)id, (void)record_len, (void)done, (void)arg;
    free(record);
    return -ENOTSUP;
}

int kv_node_move_leader(kv_node *n, uint64_t target, void (*done)(void *arg, int status),
                        void *arg)
{
    (void)n, (void)target, (void)done, (void)arg;
    return -ENOTSUP;
}
