#include "daemon/heap_trim.h"

#include "common/clock.h"

#include <errno.h>
#include <malloc.h>
#include <stdlib.h>

struct kv_heap_trim {
    uv_loop_t *loop;
    uv_timer_t timer;
    uv_work_t work;
    kv_heap_trim_activity_fn activity;
    void *arg;
    kv_metric *m_duration; /* may be NULL */
    uint64_t last_activity;
    uint64_t trims;
    double work_s;    /* the last trim's duration, written by the worker */
    int busy;         /* a trim is in flight */
    int timer_closed; /* the stop closed the timer and its callback ran */
    int stopping;
};

static void maybe_free(kv_heap_trim *t)
{
    if (t->stopping && t->timer_closed && !t->busy)
        free(t);
}

static void trim_work(uv_work_t *w)
{
    kv_heap_trim *t = w->data;
    uint64_t t0 = kv_mono_ns();
    malloc_trim(0);
    t->work_s = (double)(kv_mono_ns() - t0) / 1e9;
}

static void trim_done(uv_work_t *w, int status)
{
    kv_heap_trim *t = w->data;
    t->busy = 0;
    if (status == 0) {
        t->trims++;
        kv_metric_observe(t->m_duration, t->work_s);
    }
    maybe_free(t);
}

static void on_tick(uv_timer_t *h)
{
    kv_heap_trim *t = h->data;
    if (t->busy)
        return;
    uint64_t a = t->activity(t->arg);
    if (a == t->last_activity)
        return;
    t->last_activity = a;
    if (uv_queue_work(t->loop, &t->work, trim_work, trim_done) == 0)
        t->busy = 1;
}

int kv_heap_trim_start(kv_heap_trim **out, uv_loop_t *loop, uint32_t interval_ms,
                       kv_heap_trim_activity_fn activity, void *arg, kv_metrics *m)
{
    *out = NULL;
    if (interval_ms == 0)
        return 0;
    kv_heap_trim *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return -ENOMEM;
    t->loop = loop;
    t->activity = activity;
    t->arg = arg;
    t->last_activity = activity(arg);
    t->work.data = t;
    if (m) {
        double b[12];
        kv_metrics_exp_buckets(b, 0.0001, 2, 12); /* 100 us .. 205 ms */
        t->m_duration = kv_metrics_histogram(
            m, "kvd_malloc_trim_duration_seconds",
            "One malloc_trim(0) on the thread pool (free heap pages given back after writes).",
            NULL, b, 12);
    }
    uv_timer_init(loop, &t->timer);
    t->timer.data = t;
    uv_timer_start(&t->timer, on_tick, interval_ms, interval_ms);
    *out = t;
    return 0;
}

static void on_timer_closed(uv_handle_t *h)
{
    kv_heap_trim *t = h->data;
    t->timer_closed = 1;
    maybe_free(t);
}

void kv_heap_trim_stop(kv_heap_trim *t)
{
    if (t == NULL || t->stopping)
        return;
    t->stopping = 1;
    uv_timer_stop(&t->timer);
    uv_close((uv_handle_t *)&t->timer, on_timer_closed);
}

uint64_t kv_heap_trim_count(const kv_heap_trim *t)
{
    return t ? t->trims : 0;
}
