/* read_pool: reader threads with a bounded FIFO; completions return through a uv_async. */
#include "node/read_pool.h"

#include "common/list.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

typedef struct job {
    kv_list link; /* queue or finished */
    kv_read_work_fn work;
    kv_read_done_fn done;
    void *arg;
} job;

struct kv_read_pool {
    uv_loop_t *loop;
    uv_async_t async; /* workers -> loop: finished jobs are on `finished` */
    pthread_t threads[KV_READ_POOL_MAX_WORKERS];
    uint32_t n_threads;
    uint32_t max_pending;

    pthread_mutex_t mu;
    pthread_cond_t cv;
    kv_list queue;    /* job.link: not started (mu) */
    kv_list finished; /* job.link: ran, done not yet called, in completion order (mu) */
    bool stop;        /* mu */

    /* loop thread only */
    bool closing;
    kv_read_pool_stats st;
    kv_metric *m_completed, *m_refused;
    kv_metrics *metrics;
};

static double gauge_pending(void *arg)
{
    return (double)((kv_read_pool *)arg)->st.pending;
}

static double gauge_workers(void *arg)
{
    return (double)((kv_read_pool *)arg)->st.workers;
}

static void *worker_main(void *arg)
{
    kv_read_pool *p = arg;
    /* Bulk work: the scheduler prefers the loop thread (keepalives, small reads) and the apply
     * worker when they compete for a core. Best effort (Linux: per-thread nice). */
    (void)setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), KV_READ_POOL_NICE);
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && kv_list_empty(&p->queue))
            pthread_cond_wait(&p->cv, &p->mu);
        if (p->stop)
            break;
        job *j = kv_list_data(kv_list_head(&p->queue), job, link);
        kv_list_remove(&j->link);
        pthread_mutex_unlock(&p->mu);
        j->work(j->arg);
        pthread_mutex_lock(&p->mu);
        kv_list_insert_tail(&p->finished, &j->link);
        uv_async_send(&p->async);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* Runs done for every finished job, in completion order. */
static void drain_finished(kv_read_pool *p)
{
    kv_list list;
    kv_list_init(&list);
    pthread_mutex_lock(&p->mu);
    kv_list_move(&p->finished, &list);
    pthread_mutex_unlock(&p->mu);
    kv_list *e;
    while ((e = kv_list_head(&list))) {
        job *j = kv_list_data(e, job, link);
        kv_list_remove(e);
        p->st.pending--;
        p->st.completed++;
        kv_metric_inc(p->m_completed);
        j->done(j->arg, 0);
        free(j);
    }
}

static void on_async(uv_async_t *h)
{
    drain_finished(h->data);
}

static void on_closed(uv_handle_t *h)
{
    kv_read_pool *p = h->data;
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p);
}

static void stop_threads(kv_read_pool *p)
{
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (uint32_t i = 0; i < p->n_threads; i++)
        pthread_join(p->threads[i], NULL);
    p->n_threads = 0;
}

int kv_read_pool_init(kv_read_pool **out, uv_loop_t *loop, uint32_t workers, uint32_t max_pending,
                      kv_metrics *metrics)
{
    if (!out || !loop)
        return -EINVAL;
    if (workers == 0)
        workers = KV_READ_POOL_DEFAULT_WORKERS;
    if (workers > KV_READ_POOL_MAX_WORKERS)
        workers = KV_READ_POOL_MAX_WORKERS;
    kv_read_pool *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return -ENOMEM;
    p->loop = loop;
    p->max_pending = max_pending ? max_pending : KV_READ_POOL_DEFAULT_MAX_PENDING;
    kv_list_init(&p->queue);
    kv_list_init(&p->finished);
    int rc = pthread_mutex_init(&p->mu, NULL);
    if (rc != 0) {
        free(p);
        return -rc;
    }
    if ((rc = pthread_cond_init(&p->cv, NULL)) != 0) {
        pthread_mutex_destroy(&p->mu);
        free(p);
        return -rc;
    }
    if ((rc = uv_async_init(loop, &p->async, on_async)) < 0) {
        pthread_cond_destroy(&p->cv);
        pthread_mutex_destroy(&p->mu);
        free(p);
        return rc;
    }
    p->async.data = p;
    for (uint32_t i = 0; i < workers; i++) {
        if ((rc = pthread_create(&p->threads[i], NULL, worker_main, p)) != 0) {
            stop_threads(p);
            uv_close((uv_handle_t *)&p->async, on_closed);
            return -rc;
        }
        p->n_threads++;
    }
    p->st.workers = workers;
    p->metrics = metrics;
    if (metrics) {
        p->m_completed = kv_metrics_counter(metrics, "kvd_read_completed_total",
                                            "Reads completed by the read worker pool.", NULL);
        p->m_refused = kv_metrics_counter(
            metrics, "kvd_read_refused_total",
            "Reads refused because the read queue was full (--max-pending-reads).", NULL);
        kv_metrics_gauge_fn(metrics, "kvd_read_pending",
                            "Reads queued or running on the read worker pool.", gauge_pending, p);
        kv_metrics_gauge_fn(metrics, "kvd_read_workers", "Read worker threads (--read-workers).",
                            gauge_workers, p);
    }
    *out = p;
    return 0;
}

int kv_read_pool_submit(kv_read_pool *p, kv_read_work_fn work, kv_read_done_fn done, void *arg)
{
    if (!p || !work || !done)
        return -EINVAL;
    if (p->closing)
        return -ESHUTDOWN;
    if (p->st.pending >= p->max_pending) {
        p->st.refused++;
        kv_metric_inc(p->m_refused);
        return -EBUSY;
    }
    job *j = malloc(sizeof(*j));
    if (j == NULL)
        return -ENOMEM;
    j->work = work;
    j->done = done;
    j->arg = arg;
    p->st.pending++;
    pthread_mutex_lock(&p->mu);
    kv_list_insert_tail(&p->queue, &j->link);
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
    return 0;
}

void kv_read_pool_close(kv_read_pool *p)
{
    if (p == NULL || p->closing)
        return;
    p->closing = true;
    stop_threads(p);
    /* Threads are gone: no lock needed any more, but keep the helpers uniform. */
    kv_list q;
    kv_list_init(&q);
    kv_list_move(&p->queue, &q);
    kv_list *e;
    while ((e = kv_list_head(&q))) {
        job *j = kv_list_data(e, job, link);
        kv_list_remove(e);
        p->st.pending--;
        j->done(j->arg, -ECANCELED);
        free(j);
    }
    drain_finished(p);
    if (p->metrics)
        kv_metrics_gauge_fn_remove(p->metrics, p);
    uv_close((uv_handle_t *)&p->async, on_closed);
}

void kv_read_pool_get_stats(const kv_read_pool *p, kv_read_pool_stats *st)
{
    *st = p->st;
}
