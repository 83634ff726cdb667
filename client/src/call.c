/*
 * call.c - unary gRPC calls: submission from any thread through the bounded queue, the
 * loop-side state machine (waiting -> in flight -> done, with retries for idempotent calls),
 * deadlines, and the synchronous wrapper.
 *
 * A call is owned by the I/O thread once posted; it is freed in its timer's close callback
 * after its completion callback ran exactly once, or after kvc_call_cancel dropped it (no
 * callback). A call started with a handle (kvc_call_unary_start) holds a second reference,
 * the caller's, given back by kvc_call_cancel; the struct is freed at zero.
 */
#include "internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void kvc_call_list_push(struct kvc_call_list *l, struct kvc_call *call)
{
    kv_list_insert_tail(&l->list, &call->link);
    l->n++;
}

void kvc_call_list_remove(struct kvc_call_list *l, struct kvc_call *call)
{
    kv_list_remove(&call->link);
    l->n--;
}

struct kvc_call *kvc_call_list_first(const struct kvc_call_list *l)
{
    kv_list *e = kv_list_head(&l->list);
    return e ? kv_list_data(e, struct kvc_call, link) : NULL;
}

static struct kvc_call_list *list_of(kvc_client *c, struct kvc_call *call)
{
    switch (call->state) {
    case CALL_WAITING:
        return &c->waiting;
    case CALL_INFLIGHT:
        return &c->inflight;
    case CALL_RETRY_WAIT:
        return &c->retrying;
    default:
        return NULL;
    }
}

static void call_unref(struct kvc_call *call)
{
    if (atomic_fetch_sub(&call->refs, 1) != 1)
        return;
    kvc_md_free(&call->md);
    free(call->path);
    free(call->req);
    free(call->resp);
    kvc_rbuf_free(&call->s.rb);
    free(call);
}

static void call_free_cb(uv_handle_t *h)
{
    call_unref(h->data); /* the loop's reference */
}

static void call_detach(struct kvc_call *call, int reset)
{
    kvc_client *c = call->c;
    struct kvc_call_list *l = list_of(c, call);
    if (l)
        kvc_call_list_remove(l, call);
    if (call->state == CALL_INFLIGHT && reset && call->s.id > 0)
        kvc_conn_reset_stream(c, call->s.id, NGHTTP2_CANCEL);
    call->s.id = 0;
}

/* Complete the call: exactly one callback, then free via the timer's close callback. */
static void call_finish(struct kvc_call *call, int code, const char *msg, int reset)
{
    kvc_client *c = call->c;
    call_detach(call, reset);
    call->state = CALL_DONE;
    uv_timer_stop(&call->timer);
    atomic_fetch_sub(&c->pending, 1);
    if (code != 0) {
        KVC_STAT_INC(c, calls_failed);
        kvc_error e;
        kvc_set_err(&e, code, "%s", msg ? msg : "");
        call->cb(call->arg, -code, &e, NULL, 0);
    } else {
        uint8_t *resp = call->resp;
        size_t n = call->resp_len;
        call->resp = NULL;
        call->cb(call->arg, 0, NULL, resp, n);
    }
    atomic_store(&call->completed, 1); /* after the callback: kvc_call_cancel need not wait */
    uv_close((uv_handle_t *)&call->timer, call_free_cb);
}

/* kvc_call_cancel: end the call without its callback (RST_STREAM CANCEL when in flight). */
static void call_drop(struct kvc_call *call)
{
    kvc_client *c = call->c;
    call_detach(call, 1);
    call->state = CALL_DONE;
    uv_timer_stop(&call->timer);
    atomic_fetch_sub(&c->pending, 1);
    atomic_store(&call->completed, 1);
    uv_close((uv_handle_t *)&call->timer, call_free_cb);
    kvc_conn_flush(c);
}

int kvc_call_cancel_loop(struct kvc_call *call)
{
    if (call->state == CALL_DONE)
        return 0;
    if (call->state == CALL_QUEUED) { /* its CMD_CALL is still queued: kvc_call_start drops it */
        call->cancelled = 1;
        return 1;
    }
    call_drop(call);
    return 1;
}

static void call_timer_cb(uv_timer_t *t);

static void arm_timer(struct kvc_call *call)
{
    uint64_t at = 0;
    if (call->state == CALL_WAITING)
        at = call->dial_deadline;
    else if (call->state == CALL_INFLIGHT)
        at = call->deadline;
    else if (call->state == CALL_RETRY_WAIT)
        at = call->retry_at;
    if (!at) {
        uv_timer_stop(&call->timer);
        return;
    }
    uint64_t now = kvc_now_ms();
    uv_timer_start(&call->timer, call_timer_cb, at > now ? at - now : 0, 0);
}

static ssize_t call_read(nghttp2_session *session, int32_t stream_id, uint8_t *buf, size_t length,
                         uint32_t *data_flags, nghttp2_data_source *source, void *user_data)
{
    (void)session;
    (void)stream_id;
    (void)user_data;
    struct kvc_call *call = source->ptr;
    size_t left = call->req_len - call->req_off;
    size_t n = left < length ? left : length;
    memcpy(buf, call->req + call->req_off, n);
    call->req_off += n;
    if (call->req_off == call->req_len)
        *data_flags |= NGHTTP2_DATA_FLAG_EOF;
    return (ssize_t)n;
}

static void call_send(struct kvc_call *call)
{
    kvc_client *c = call->c;
    memset(&call->s.http_status, 0, sizeof call->s.http_status);
    call->s.grpc_status = -1;
    call->s.grpc_message[0] = '\0';
    call->s.rb.len = 0;
    call->s.nmsgs = 0;
    call->s.wire = 0;
    call->s.bad = 0;
    call->req_off = 0;
    free(call->resp);
    call->resp = NULL;
    call->resp_len = 0;
    int32_t id = kvc_conn_submit(c, call->path, call->deadline, &call->md, call_read, &call->s);
    if (id < 0) {
        char msg[120];
        snprintf(msg, sizeof msg, "kvclient: cannot submit request: %s", nghttp2_strerror(id));
        call_finish(call, KVC_INTERNAL, msg, 0);
        return;
    }
    call->s.id = id;
    call->state = CALL_INFLIGHT;
    kvc_call_list_push(&c->inflight, call);
    kvc_ping_on_call_sent(c); /* after the push: the call counts as in flight */
    arm_timer(call);
}

static void call_dispatch(struct kvc_call *call)
{
    kvc_client *c = call->c;
    uint64_t now = kvc_now_ms();
    if (call->deadline && now >= call->deadline) {
        call_finish(call, KVC_DEADLINE_EXCEEDED, "kvclient: deadline exceeded", 0);
        return;
    }
    if (kvc_conn_usable(c)) {
        call_send(call);
        kvc_conn_flush(c);
        return;
    }
    call->dial_deadline = now + c->cfg.dial_timeout_ms;
    if (call->deadline && call->deadline < call->dial_deadline)
        call->dial_deadline = call->deadline;
    call->state = CALL_WAITING;
    kvc_call_list_push(&c->waiting, call);
    arm_timer(call);
    kvc_conn_demand(c);
}

static void call_timer_cb(uv_timer_t *t)
{
    struct kvc_call *call = t->data;
    kvc_client *c = call->c;
    uint64_t now = kvc_now_ms();
    char msg[256];
    switch (call->state) {
    case CALL_WAITING:
        if (call->deadline && now >= call->deadline) {
            snprintf(msg, sizeof msg, "kvclient: deadline exceeded waiting for a connection%s%s",
                     c->last_err[0] ? "; last error: " : "", c->last_err);
            call_finish(call, KVC_DEADLINE_EXCEEDED, msg, 0);
        } else if (now >= call->dial_deadline) {
            snprintf(msg, sizeof msg, "kvclient: no connection within %u ms%s%s",
                     c->cfg.dial_timeout_ms, c->last_err[0] ? "; last error: " : "", c->last_err);
            call_finish(call, KVC_UNAVAILABLE, msg, 0);
        } else {
            arm_timer(call);
        }
        break;
    case CALL_INFLIGHT:
        if (call->deadline && now >= call->deadline) {
            call_finish(call, KVC_DEADLINE_EXCEEDED, "kvclient: deadline exceeded", 1);
            kvc_conn_flush(c);
        } else {
            arm_timer(call);
        }
        break;
    case CALL_RETRY_WAIT:
        kvc_call_list_remove(&c->retrying, call);
        call->state = CALL_QUEUED;
        call_dispatch(call);
        break;
    default:
        break;
    }
}

void kvc_call_start(struct kvc_call *call)
{
    kvc_client *c = call->c;
    uv_timer_init(&c->lg->loop, &call->timer);
    call->timer.data = call;
    if (call->cancelled) {
        call_drop(call);
        return;
    }
    if (c->closing) {
        call_finish(call, KVC_CANCELLED, "kvclient: client closed", 0);
        return;
    }
    call_dispatch(call);
}

static int may_retry(struct kvc_call *call, int safe)
{
    if (!(call->flags & KVC_IDEMPOTENT) && !safe)
        return 0;
    if (call->on_msg && call->s.nmsgs > 0) /* a stream's messages were handed over already */
        return 0;
    if (call->c->closing)
        return 0;
    if (call->deadline)
        return kvc_now_ms() < call->deadline;
    return call->attempts < KVC_MAX_ATTEMPTS_NO_DEADLINE;
}

static void schedule_retry(struct kvc_call *call)
{
    kvc_client *c = call->c;
    call_detach(call, 0);
    KVC_STAT_INC(c, calls_retried);
    call->retry_at = kvc_now_ms() + kvc_backoff_ms(c, (unsigned)call->attempts);
    call->attempts++;
    call->state = CALL_RETRY_WAIT;
    kvc_call_list_push(&c->retrying, call);
    arm_timer(call);
}

void kvc_calls_on_ready(kvc_client *c)
{
    struct kvc_call *call;
    while ((call = kvc_call_list_first(&c->waiting)) && kvc_conn_usable(c)) {
        kvc_call_list_remove(&c->waiting, call);
        call->state = CALL_QUEUED;
        call_send(call);
    }
}

void kvc_calls_on_conn_lost(kvc_client *c, const char *reason)
{
    struct kvc_call *call;
    while ((call = kvc_call_list_first(&c->inflight))) {
        /* A request whose HEADERS never reached the wire cannot have been applied. */
        if (may_retry(call, !call->s.wire)) {
            schedule_retry(call);
        } else {
            char msg[256];
            snprintf(msg, sizeof msg,
                     "kvclient: connection lost with the call in flight (it may or may not "
                     "have been applied): %s",
                     reason);
            call_finish(call, KVC_UNAVAILABLE, msg, 0);
        }
    }
}

void kvc_calls_fail_all(kvc_client *c, int code, const char *msg)
{
    struct kvc_call_list *lists[] = {&c->inflight, &c->waiting, &c->retrying};
    struct kvc_call *call;
    for (size_t i = 0; i < 3; i++)
        while ((call = kvc_call_list_first(lists[i])))
            call_finish(call, code, msg, 1);
}

static void on_msg(void *ctx, const uint8_t *m, size_t n)
{
    struct kvc_call *call = ctx;
    if (call->on_msg) { /* server streaming: hand each message over, keep none */
        kvc_error e = {0};
        int rc = call->on_msg(call->arg, m, n, &e);
        if (rc != 0) {
            call->s.bad = 1;
            call->s.bad_code = rc < 0 ? -rc : KVC_CANCELLED;
            snprintf(call->s.bad_msg, sizeof call->s.bad_msg, "%s", e.message);
        }
        return;
    }
    if (call->s.nmsgs != 1 || call->resp)
        return; /* unary: the first message is the response */
    call->resp = malloc(n ? n : 1);
    if (!call->resp) {
        call->s.bad = 1;
        call->s.bad_code = KVC_RESOURCE_EXHAUSTED;
        snprintf(call->s.bad_msg, sizeof call->s.bad_msg, "kvclient: out of memory");
        return;
    }
    memcpy(call->resp, m, n);
    call->resp_len = n;
}

void kvc_call_on_data(struct kvc_call *call, const uint8_t *d, size_t n)
{
    kvc_client *c = call->c;
    if (call->s.bad)
        return;
    if (kvc_rbuf_append(&call->s.rb, d, n) != 0) {
        call->s.bad = 1;
        call->s.bad_code = KVC_RESOURCE_EXHAUSTED;
        snprintf(call->s.bad_msg, sizeof call->s.bad_msg, "kvclient: out of memory");
    } else {
        kvc_grpc_parse(&call->s, c->cfg.max_response_bytes, on_msg, call);
    }
    if (call->s.bad && c->conn && c->conn->h2)
        nghttp2_submit_rst_stream(c->conn->h2, NGHTTP2_FLAG_NONE, call->s.id, NGHTTP2_CANCEL);
}

void kvc_call_on_stream_close(struct kvc_call *call, uint32_t h2err)
{
    kvc_client *c = call->c;
    char msg[256];
    int code = kvc_grpc_final_status(&call->s, h2err, call->s.nmsgs > 0, msg, sizeof msg);
    if (code == 0) {
        call_finish(call, 0, NULL, 0);
        return;
    }
    int unavailable = code == KVC_UNAVAILABLE || strstr(msg, "no leader") != NULL;
    int safe = kvc_grpc_refused(&call->s, h2err);
    if (unavailable && !safe)
        kvc_conn_drain(c, msg);
    if (unavailable && may_retry(call, safe))
        schedule_retry(call);
    else
        call_finish(call, code, msg, 0);
}

/* ---- submission (any thread) ---- */

/* Queue a call of method (unary when on_msg is NULL, server streaming otherwise). */
static int call_submit(kvc_client *c, const char *method, const uint8_t *req, size_t req_len,
                       uint32_t timeout_ms, int flags, const kvc_call_md *md,
                       kvc_stream_msg_cb on_msg, kvc_unary_cb cb, void *arg, kvc_call **out,
                       kvc_error *err)
{
    if (out)
        *out = NULL;
    if (!c || !method || method[0] != '/' || (!req && req_len) || !cb)
        return kvc_fail(err, KVC_INVALID_ARGUMENT, "kvclient: invalid argument");
    if (req_len > 0x7fffffffu)
        return kvc_fail(err, KVC_INVALID_ARGUMENT, "kvclient: request too large");
    /* From a callback during kvc_close: the client is going away. (Other threads must not
     * race kvc_close: documented precondition.) */
    if (kvc_loop_on_thread(c->lg) && c->closing)
        return kvc_fail(err, KVC_CANCELLED, "kvclient: client closed");
    unsigned prev = atomic_fetch_add(&c->pending, 1);
    if (prev >= c->cfg.max_pending) {
        atomic_fetch_sub(&c->pending, 1);
        KVC_STAT_INC(c, queue_full);
        return kvc_fail(err, KVC_RESOURCE_EXHAUSTED, "kvclient: request queue full (%u pending)",
                        c->cfg.max_pending);
    }
    struct kvc_call *call = calloc(1, sizeof *call);
    if (!call)
        goto oom;
    kv_list_init(&call->link);
    call->path = strdup(method);
    call->req = malloc(5 + req_len);
    if (!call->path || !call->req || kvc_md_copy(&call->md, md) < 0)
        goto oom;
    call->req[0] = 0;
    call->req[1] = (uint8_t)(req_len >> 24);
    call->req[2] = (uint8_t)(req_len >> 16);
    call->req[3] = (uint8_t)(req_len >> 8);
    call->req[4] = (uint8_t)req_len;
    if (req_len)
        memcpy(call->req + 5, req, req_len);
    call->req_len = 5 + req_len;
    call->s.kind = STREAM_CALL;
    call->s.grpc_status = -1;
    call->c = c;
    call->flags = flags;
    call->cb = cb;
    call->arg = arg;
    call->on_msg = on_msg;
    call->deadline = timeout_ms ? kvc_now_ms() + timeout_ms : 0;
    call->state = CALL_QUEUED;
    call->cmd.type = CMD_CALL;
    call->cmd.c = c;
    call->cmd.p = call;
    atomic_init(&call->refs, out ? 2 : 1); /* the loop's, and the caller's handle */
    atomic_init(&call->completed, 0);
    if (out)
        *out = call;
    KVC_STAT_INC(c, calls_started);
    kvc_loop_post(c->lg, &call->cmd);
    return 0;
oom:
    if (call) {
        kvc_md_free(&call->md);
        free(call->path);
        free(call->req);
        free(call);
    }
    atomic_fetch_sub(&c->pending, 1);
    return kvc_fail(err, KVC_RESOURCE_EXHAUSTED, "kvclient: out of memory");
}

int kvc_call_unary_async(kvc_client *c, const char *method, const uint8_t *req, size_t req_len,
                         uint32_t timeout_ms, int flags, kvc_unary_cb cb, void *arg, kvc_error *err)
{
    return call_submit(c, method, req, req_len, timeout_ms, flags, NULL, NULL, cb, arg, NULL, err);
}

int kvc_call_unary_md_async(kvc_client *c, const char *method, const uint8_t *req, size_t req_len,
                            uint32_t timeout_ms, int flags, const kvc_call_md *md, kvc_unary_cb cb,
                            void *arg, kvc_error *err)
{
    return call_submit(c, method, req, req_len, timeout_ms, flags, md, NULL, cb, arg, NULL, err);
}

int kvc_call_unary_start(kvc_client *c, const char *method, const uint8_t *req, size_t req_len,
                         uint32_t timeout_ms, int flags, const kvc_call_md *md, kvc_unary_cb cb,
                         void *arg, kvc_call **out, kvc_error *err)
{
    if (!out)
        return kvc_fail(err, KVC_INVALID_ARGUMENT, "kvclient: invalid argument");
    return call_submit(c, method, req, req_len, timeout_ms, flags, md, NULL, cb, arg, out, err);
}

int kvc_call_cancel(kvc_call *call)
{
    if (!call)
        return 0;
    int dropped = 0;
    /* completed is set after the callback returned: nothing of the client is touched then
     * (the handle may outlive kvc_close). */
    if (!atomic_load(&call->completed)) {
        kvc_client *c = call->c;
        if (kvc_loop_on_thread(c->lg))
            dropped = kvc_call_cancel_loop(call);
        else
            dropped = kvc_loop_run_cmd(c, &call->ccmd, CMD_CALL_CANCEL, call, NULL);
    }
    call_unref(call); /* the caller's reference */
    return dropped;
}

int kvc_md_copy(struct kvc_md *dst, const kvc_call_md *src)
{
    memset(dst, 0, sizeof *dst);
    if (!src)
        return 0;
    dst->hasleader = src->require_leader != 0;
    if (src->auth_token && !(dst->token = strndup(src->auth_token, 4095)))
        return -ENOMEM;
    return 0;
}

void kvc_md_free(struct kvc_md *md)
{
    free(md->token);
    md->token = NULL;
}

int kvc_call_stream_async(kvc_client *c, const char *method, const uint8_t *req, size_t req_len,
                          uint32_t timeout_ms, kvc_stream_msg_cb on_msg, kvc_unary_cb done,
                          void *arg, kvc_error *err)
{
    if (!on_msg)
        return kvc_fail(err, KVC_INVALID_ARGUMENT, "kvclient: invalid argument");
    /* flags 0: retried only when the server provably did not start it (no message seen) */
    return call_submit(c, method, req, req_len, timeout_ms, 0, NULL, on_msg, done, arg, NULL, err);
}

struct sync_ctx {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_int refs;
    int done;
    int abandoned;
    int status;
    kvc_error err;
    uint8_t *resp;
    size_t resp_len;
};

static void sync_unref(struct sync_ctx *s)
{
    if (atomic_fetch_sub(&s->refs, 1) == 1) {
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->cv);
        free(s->resp);
        free(s);
    }
}

static void sync_cb(void *arg, int status, const kvc_error *err, uint8_t *resp, size_t resp_len)
{
    struct sync_ctx *s = arg;
    pthread_mutex_lock(&s->mu);
    s->status = status;
    if (err)
        s->err = *err;
    s->resp = resp;
    s->resp_len = resp_len;
    s->done = 1;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    sync_unref(s);
}

int kvc_call_unary(kvc_client *c, const char *method, const uint8_t *req, size_t req_len,
                   uint8_t **resp, size_t *resp_len, uint32_t timeout_ms, int flags, kvc_error *err)
{
    if (resp)
        *resp = NULL;
    if (resp_len)
        *resp_len = 0;
    if (!c || !resp || !resp_len)
        return kvc_fail(err, KVC_INVALID_ARGUMENT, "kvclient: invalid argument");
    if (kvc_loop_on_thread(c->lg))
        return kvc_fail(err, KVC_FAILED_PRECONDITION,
                        "kvclient: synchronous call from the I/O thread (use the async form)");
    struct sync_ctx *s = calloc(1, sizeof *s);
    if (!s)
        return kvc_fail(err, KVC_RESOURCE_EXHAUSTED, "kvclient: out of memory");
    pthread_mutex_init(&s->mu, NULL);
    kvc_cond_init_monotonic(&s->cv);
    atomic_init(&s->refs, 2);
    int rc = kvc_call_unary_async(c, method, req, req_len, timeout_ms, flags, sync_cb, s, err);
    if (rc != 0) {
        atomic_store(&s->refs, 1);
        sync_unref(s);
        return rc;
    }
    pthread_mutex_lock(&s->mu);
    kvc_wait_done(&s->mu, &s->cv, &s->done, &s->abandoned, timeout_ms);
    if (s->done) {
        rc = s->status;
        if (rc == 0) {
            *resp = s->resp;
            *resp_len = s->resp_len;
            s->resp = NULL;
        } else if (err) {
            *err = s->err;
        }
    } else {
        rc = kvc_fail(err, KVC_DEADLINE_EXCEEDED, "kvclient: deadline exceeded (I/O stalled)");
    }
    pthread_mutex_unlock(&s->mu);
    sync_unref(s);
    return rc;
}

void kvc_free(void *p)
{
    free(p);
}
