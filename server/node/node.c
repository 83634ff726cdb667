#include "node/node.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct kv_node_req {
    kv_node_req *next;
    uint8_t *data; /* packed InternalRequest; NULL for a barrier */
    size_t len;
    kv_node_done_fn done;
    void (*barrier_done)(void *arg, int status);
    void *arg;
};

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
} batch_work;

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
    int stalled; /* failpoint */

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

static double gauge_applied(void *arg)
{
    return (double)((kv_node *)arg)->st.applied_index;
}

static void fail_req(kv_node_req *r, int code, const char *msg)
{
    if (r->barrier_done) {
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
    if (n->closing && n->handles_open == 0 && n->inflight == NULL)
        free(n);
}

static void after_apply(uv_work_t *req, int status)
{
    batch_work *w = req->data;
    kv_node *n = w->node;
    kv_node_req *batch = w->head;
    int rc = status < 0 ? status : w->rc;

    if (rc < 0) {
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
        replay_events(n, w);
        if (n->commit_fn && n->revision > rev_before)
            n->commit_fn(n->commit_arg, n->revision);

        /* Durable: now acknowledge, in order. */
        size_t i = 0;
        while (batch) {
            kv_node_req *next = batch->next;
            if (batch->data == NULL) {
                if (batch->barrier_done)
                    batch->barrier_done(batch->arg, 0);
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
    start_batch(n); /* what queued meanwhile forms the next batch */
}

/* Takes everything queued as the next batch. Barrier-only batches complete at once (nothing to
 * write, and no batch is in flight, so every earlier write is already durable). */
static void start_batch(kv_node *n)
{
    if (n->inflight || n->stalled || n->head == NULL)
        return;
    kv_node_req *batch = n->head;
    uint64_t count = n->pending;
    n->head = n->tail = NULL;
    n->pending = 0;
    uv_idle_stop(&n->idle);

    size_t nreq = 0;
    for (kv_node_req *r = batch; r; r = r->next)
        nreq += r->data != NULL;
    if (nreq == 0) {
        while (batch) {
            kv_node_req *next = batch->next;
            if (batch->barrier_done)
                batch->barrier_done(batch->arg, 0);
            free(batch);
            batch = next;
        }
        return;
    }
    batch_work *w = calloc(1, sizeof(*w));
    kv_result *results = calloc(nreq, sizeof(*results));
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
    start_batch(h->data);
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
    kv_store_status ss;
    int rc = kv_store_get_status(store, &ss);
    if (rc < 0) {
        free(n);
        return rc;
    }
    n->next_index = ss.applied_index + 1;
    n->revision = ss.revision;
    n->st.applied_index = ss.applied_index;

    kv_store_lease_observer rec = {
        .arg = n, .granted = rec_granted, .revoked = rec_revoked, .checkpointed = rec_checkpointed};
    kv_store_set_lease_observer(store, &rec);

    uv_check_init(loop, &n->check);
    uv_idle_init(loop, &n->idle);
    n->check.data = n->idle.data = n;
    n->handles_open = 2;
    uv_check_start(&n->check, on_check);

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
    }
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
    if (n->metrics)
        kv_metrics_gauge_fn_remove(n->metrics, n);
    uv_close((uv_handle_t *)&n->check, on_handle_closed);
    uv_close((uv_handle_t *)&n->idle, on_handle_closed);
}

static int enqueue(kv_node *n, kv_node_req *r)
{
    if (n->closing)
        return -ESHUTDOWN;
    if (n->pending >= n->max_pending) {
        n->st.refused_total++;
        kv_metric_inc(n->m_refused);
        return -EBUSY;
    }
    if (n->tail)
        n->tail->next = r;
    else
        n->head = r;
    n->tail = r;
    /* While a batch is in flight its completion wakes the loop; spinning would only burn CPU. */
    if (n->pending++ == 0 && !n->stalled && n->inflight == NULL)
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
    int rc = enqueue(n, r);
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

int kv_node_barrier(kv_node *n, void (*done)(void *arg, int status), void *arg)
{
    kv_node_req *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return -ENOMEM;
    r->barrier_done = done;
    r->arg = arg;
    int rc = enqueue(n, r);
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
    else if (n->head && n->inflight == NULL)
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

void kv_node_set_commit_hook(kv_node *n, kv_node_commit_fn fn, void *arg)
{
    n->commit_fn = fn;
    n->commit_arg = arg;
}
