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

struct kv_node {
    uv_loop_t *loop;
    kv_store *store;
    kv_header_info hdr;
    uint32_t max_pending;
    uint64_t next_index; /* index the next applied request gets */
    int64_t revision;    /* store revision after the last committed batch */

    kv_node_req *head, *tail; /* FIFO of queued requests */
    uint64_t pending;

    uv_check_t check; /* applies the batch right after the loop's I/O phase */
    uv_idle_t idle;   /* keeps poll from blocking while requests are queued */
    int handles_open;
    int closing;
    int stalled; /* failpoint */

    kv_node_stats st;
    kv_metric *m_batches, *m_proposals, *m_refused, *m_batch_size_max;
    kv_metrics *metrics;
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

/* Apply everything queued as one batch: one write transaction, one sync. */
static void apply_batch(kv_node *n)
{
    kv_node_req *batch = n->head;
    uint64_t count = n->pending;
    n->head = n->tail = NULL;
    n->pending = 0;
    uv_idle_stop(&n->idle);
    if (batch == NULL)
        return;

    kv_store_batch *b = NULL;
    size_t nreq = 0;
    for (kv_node_req *r = batch; r; r = r->next)
        nreq += r->data != NULL;
    /* A batch of barriers only touches no storage. */
    int rc = nreq ? kv_store_batch_begin(n->store, &b) : 0;
    kv_result *results = nreq ? calloc(nreq, sizeof(*results)) : NULL;
    if (nreq && results == NULL)
        rc = -ENOMEM;

    size_t i = 0;
    for (kv_node_req *r = batch; rc == 0 && r; r = r->next) {
        if (r->data == NULL)
            continue;
        rc = kv_store_apply(n->store, b, n->next_index, r->data, r->len, &n->hdr, &results[i]);
        if (rc < 0)
            break;
        n->next_index++;
        if (!results[i].skipped && results[i].revision > n->revision)
            n->revision = results[i].revision;
        i++;
    }
    if (b != NULL) {
        if (rc == 0)
            rc = kv_store_batch_commit(n->store, b);
        else
            kv_store_batch_abort(n->store, b);
    }
    if (rc < 0) {
        /* Storage failure: nothing of this batch is durable; no one is told otherwise. */
        fprintf(stderr, "kvd: apply batch failed: %s; %llu requests failed\n", strerror(-rc),
                (unsigned long long)count);
        for (size_t k = 0; k < nreq; k++)
            free(results[k].resp);
        free(results);
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
        return;
    }

    n->st.batches_total++;
    n->st.applied_index = n->next_index - 1;
    n->st.last_batch_size = count;
    if (count > n->st.max_batch_size)
        n->st.max_batch_size = count;
    kv_metric_inc(n->m_batches);
    kv_metric_set(n->m_batch_size_max, (double)n->st.max_batch_size);

    /* Durable: now acknowledge, in order. */
    i = 0;
    while (batch) {
        kv_node_req *next = batch->next;
        if (batch->data == NULL) {
            if (batch->barrier_done)
                batch->barrier_done(batch->arg, 0);
        } else {
            if (batch->done)
                batch->done(batch->arg, &results[i]);
            free(results[i].resp);
            i++;
        }
        free(batch->data);
        free(batch);
        batch = next;
    }
    free(results);
}

static void on_check(uv_check_t *h)
{
    kv_node *n = h->data;
    if (n->head && !n->stalled)
        apply_batch(n);
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
        kv_metrics_gauge_fn(metrics, "kvd_applied_index", "Last applied log index.",
                            gauge_applied, n);
    }
    *out = n;
    return 0;
}

static void on_handle_closed(uv_handle_t *h)
{
    kv_node *n = h->data;
    if (--n->handles_open == 0)
        free(n);
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
    if (n->pending++ == 0 && !n->stalled)
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
    else if (n->head)
        uv_idle_start(&n->idle, on_idle);
}

int kv_node_stalled(const kv_node *n)
{
    return n->stalled;
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
