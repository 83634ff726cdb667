/*
 * loop.c - loop groups: one I/O thread running a libuv loop, fed by a mutex-protected
 * command list and a uv_async_t. Commands are processed in FIFO order on the I/O thread.
 */
#include "internal.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

void kvc_waiter_init(struct kvc_waiter *w)
{
    memset(w, 0, sizeof *w);
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
}

void kvc_cond_init_monotonic(pthread_cond_t *cv)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &ca);
    pthread_condattr_destroy(&ca);
}

void kvc_deadline_after(struct timespec *ts, uint64_t ms)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += (time_t)(ms / 1000);
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

void kvc_wait_done(pthread_mutex_t *mu, pthread_cond_t *cv, const int *done, int *abandoned,
                   uint32_t timeout_ms)
{
    struct timespec ts;
    kvc_deadline_after(&ts, (uint64_t)timeout_ms + 2000u);
    while (!*done) {
        if (timeout_ms == 0) {
            pthread_cond_wait(cv, mu);
        } else if (pthread_cond_timedwait(cv, mu, &ts) == ETIMEDOUT && !*done) {
            *abandoned = 1;
            return;
        }
    }
}

void kvc_waiter_wait(struct kvc_waiter *w)
{
    pthread_mutex_lock(&w->mu);
    while (!w->done)
        pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
}

void kvc_waiter_signal(struct kvc_waiter *w, int status, const kvc_error *err)
{
    pthread_mutex_lock(&w->mu);
    w->status = status;
    if (err)
        w->err = *err;
    w->done = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

void kvc_waiter_destroy(struct kvc_waiter *w)
{
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
}

int kvc_loop_run_cmd(kvc_client *c, struct kvc_cmd *cmd, int type, void *p, kvc_error *err)
{
    struct kvc_waiter w;
    kvc_waiter_init(&w);
    cmd->type = type;
    cmd->c = c;
    cmd->p = p;
    cmd->w = &w;
    kvc_loop_post(c->lg, cmd);
    kvc_waiter_wait(&w);
    int rc = w.status;
    if (rc && err)
        *err = w.err;
    kvc_waiter_destroy(&w);
    return rc;
}

int kvc_loop_on_thread(const kvc_loop_group *g)
{
    uv_thread_t self = uv_thread_self();
    return uv_thread_equal(&self, &g->tid);
}

void kvc_loop_post(kvc_loop_group *g, struct kvc_cmd *cmd)
{
    pthread_mutex_lock(&g->mu);
    kv_list_insert_tail(&g->cmds, &cmd->link);
    pthread_mutex_unlock(&g->mu);
    uv_async_send(&g->async);
}

static void on_async(uv_async_t *a)
{
    kvc_loop_group *g = a->data;
    kv_list batch;
    kv_list_init(&batch);
    pthread_mutex_lock(&g->mu);
    kv_list_move(&g->cmds, &batch);
    int stop = g->stop;
    pthread_mutex_unlock(&g->mu);
    kv_list *e;
    while ((e = kv_list_head(&batch))) {
        kv_list_remove(e); /* before dispatch: it may free the command */
        kvc_dispatch(kv_list_data(e, struct kvc_cmd, link));
    }
    if (stop)
        uv_close((uv_handle_t *)&g->async, NULL);
}

static void thread_main(void *arg)
{
    kvc_loop_group *g = arg;
    uv_run(&g->loop, UV_RUN_DEFAULT);
}

int kvc_loop_group_new(kvc_loop_group **out, kvc_error *err)
{
    if (!out)
        return kvc_fail(err, KVC_INVALID_ARGUMENT, "kvclient: invalid argument");
    *out = NULL;
    kvc_loop_group *g = calloc(1, sizeof *g);
    if (!g)
        return kvc_fail(err, KVC_RESOURCE_EXHAUSTED, "kvclient: out of memory");
    kv_list_init(&g->cmds);
    int rc = uv_loop_init(&g->loop);
    if (rc < 0) {
        free(g);
        return kvc_fail(err, KVC_INTERNAL, "kvclient: uv_loop_init: %s", uv_strerror(rc));
    }
    pthread_mutex_init(&g->mu, NULL);
    uv_async_init(&g->loop, &g->async, on_async);
    g->async.data = g;
    /* The I/O thread starts with SIGPIPE blocked (it inherits this thread's mask): a server
     * that vanishes while we write gives EPIPE on that connection, never a signal that would
     * kill the application (a write to a reset socket raises SIGPIPE in the writing thread,
     * and libuv does not suppress it). The application's own disposition is left alone. */
    sigset_t pipe_set, old_set;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, &old_set);
    rc = uv_thread_create(&g->thread, thread_main, g);
    pthread_sigmask(SIG_SETMASK, &old_set, NULL);
    if (rc < 0) {
        uv_close((uv_handle_t *)&g->async, NULL);
        uv_run(&g->loop, UV_RUN_DEFAULT);
        uv_loop_close(&g->loop);
        pthread_mutex_destroy(&g->mu);
        free(g);
        return kvc_fail(err, KVC_INTERNAL, "kvclient: cannot start I/O thread: %s",
                        uv_strerror(rc));
    }
    g->tid = g->thread;
    *out = g;
    return 0;
}

void kvc_loop_group_free(kvc_loop_group *g)
{
    if (!g)
        return;
    pthread_mutex_lock(&g->mu);
    g->stop = 1;
    pthread_mutex_unlock(&g->mu);
    uv_async_send(&g->async);
    uv_thread_join(&g->thread);
    uv_loop_close(&g->loop);
    pthread_mutex_destroy(&g->mu);
    free(g->scratch);
    free(g);
}
