/* The read worker pool (node/read_pool.h): work off the loop, bounded queue, completion on the
 * loop, cancellation of queued jobs at close, shutdown with running jobs, metrics. */
#include "metrics/metrics.h"
#include "node/read_pool.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

typedef struct gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int open;
    atomic_int entered;
} gate;

static void gate_init(gate *g)
{
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    g->open = 0;
    atomic_store(&g->entered, 0);
}

static void gate_open(gate *g)
{
    pthread_mutex_lock(&g->mu);
    g->open = 1;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

typedef struct job_arg {
    gate *g; /* NULL: do not block */
    pthread_t ran_on;
    atomic_int ran;
    int done_status;
    int done_calls;
    int *order; /* completion order log */
    int *n_order;
    int id;
} job_arg;

static void work(void *p)
{
    job_arg *a = p;
    a->ran_on = pthread_self();
    if (a->g) {
        atomic_fetch_add(&a->g->entered, 1);
        pthread_mutex_lock(&a->g->mu);
        while (!a->g->open)
            pthread_cond_wait(&a->g->cv, &a->g->mu);
        pthread_mutex_unlock(&a->g->mu);
    }
    atomic_store(&a->ran, 1);
}

static void done(void *p, int status)
{
    job_arg *a = p;
    a->done_status = status;
    a->done_calls++;
    if (a->order)
        a->order[(*a->n_order)++] = a->id;
}

static void *open_later(void *p)
{
    usleep(200 * 1000);
    gate_open(p);
    return NULL;
}

static void run_until(uv_loop_t *loop, int *flag, int want)
{
    for (int i = 0; i < 5000 && *flag < want; i++) {
        uv_run(loop, UV_RUN_NOWAIT);
        usleep(1000);
    }
}

Test(read_pool, work_runs_off_the_loop_and_completes_on_it)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    kv_read_pool *p;
    cr_assert_eq(kv_read_pool_init(&p, &loop, 2, 8, NULL), 0);
    job_arg a = {0};
    cr_assert_eq(kv_read_pool_submit(p, work, done, &a), 0);
    run_until(&loop, &a.done_calls, 1);
    cr_assert_eq(a.done_calls, 1);
    cr_assert_eq(a.done_status, 0);
    cr_assert(atomic_load(&a.ran));
    cr_assert_not(pthread_equal(a.ran_on, pthread_self()), "work ran on the loop thread");
    kv_read_pool_stats st;
    kv_read_pool_get_stats(p, &st);
    cr_assert_eq(st.pending, 0);
    cr_assert_eq(st.completed, 1);
    kv_read_pool_close(p);
    uv_run(&loop, UV_RUN_DEFAULT);
    cr_assert_eq(uv_loop_close(&loop), 0);
}

Test(read_pool, queue_is_bounded_and_refusal_is_counted)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    kv_metrics *m;
    cr_assert_eq(kv_metrics_new(&m, 0), 0);
    kv_read_pool *p;
    cr_assert_eq(kv_read_pool_init(&p, &loop, 1, 3, m), 0);
    gate g;
    gate_init(&g);
    job_arg a[4];
    memset(a, 0, sizeof a);
    for (int i = 0; i < 3; i++) {
        a[i].g = &g;
        cr_assert_eq(kv_read_pool_submit(p, work, done, &a[i]), 0);
    }
    cr_assert_eq(kv_read_pool_submit(p, work, done, &a[3]), -EBUSY, "4th job beyond the bound");
    char *text;
    size_t len;
    cr_assert_eq(kv_metrics_render(m, &text, &len), 0);
    cr_assert_not_null(strstr(text, "kvd_read_pending 3"), "%s", text);
    cr_assert_not_null(strstr(text, "kvd_read_refused_total 1"), "%s", text);
    free(text);
    gate_open(&g);
    int total = 0;
    for (int i = 0; i < 5000 && total < 3; i++) {
        uv_run(&loop, UV_RUN_NOWAIT);
        usleep(1000);
        total = a[0].done_calls + a[1].done_calls + a[2].done_calls;
    }
    cr_assert_eq(total, 3);
    cr_assert_eq(a[3].done_calls, 0, "a refused job never completes");
    /* room again */
    a[3].g = NULL;
    cr_assert_eq(kv_read_pool_submit(p, work, done, &a[3]), 0);
    run_until(&loop, &a[3].done_calls, 1);
    cr_assert_eq(a[3].done_calls, 1);
    kv_read_pool_close(p);
    uv_run(&loop, UV_RUN_DEFAULT);
    cr_assert_eq(uv_loop_close(&loop), 0);
    kv_metrics_free(m);
}

Test(read_pool, close_cancels_queued_jobs_and_finishes_running_ones)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    kv_read_pool *p;
    cr_assert_eq(kv_read_pool_init(&p, &loop, 1, 16, NULL), 0);
    gate g;
    gate_init(&g);
    int order[8], n_order = 0;
    job_arg a[3];
    memset(a, 0, sizeof a);
    for (int i = 0; i < 3; i++) {
        a[i].id = i;
        a[i].order = order;
        a[i].n_order = &n_order;
    }
    a[0].g = &g;
    for (int i = 0; i < 3; i++)
        cr_assert_eq(kv_read_pool_submit(p, work, done, &a[i]), 0);
    for (int i = 0; i < 5000 && atomic_load(&g.entered) == 0; i++)
        usleep(1000);
    cr_assert_eq(atomic_load(&g.entered), 1, "the first job is running");
    /* The running job finishes only after close began (close must join it); the queued ones
     * must then be cancelled, not run. */
    pthread_t opener;
    pthread_create(&opener, NULL, open_later, &g);
    kv_read_pool_close(p);
    pthread_join(opener, NULL);
    cr_assert_eq(a[0].done_calls, 1);
    cr_assert_eq(a[0].done_status, 0, "a running job completes normally");
    cr_assert(atomic_load(&a[0].ran));
    for (int i = 1; i < 3; i++) {
        cr_assert_eq(a[i].done_calls, 1, "job %d: done runs exactly once", i);
        cr_assert_eq(a[i].done_status, -ECANCELED, "job %d was queued: cancelled", i);
        cr_assert_not(atomic_load(&a[i].ran), "job %d: cancelled work never runs", i);
    }
    job_arg late = {0};
    cr_assert_eq(kv_read_pool_submit(p, work, done, &late), -ESHUTDOWN);
    uv_run(&loop, UV_RUN_DEFAULT);
    cr_assert_eq(uv_loop_close(&loop), 0);
}
