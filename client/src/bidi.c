/*
 * bidi.c - raw gRPC streams (kvc_bidi_*, contract in kvclient.h): opaque request messages
 * framed into a per-stream send buffer, every response message handed to the owner's
 * callback, one end event. Used by kvd grpc-proxy to relay LeaseKeepAlive and Watch streams
 * without decoding them here.
 *
 * Threads: the send buffer is shared with caller threads under b->mu (kvc_bidi_send appends,
 * the nghttp2 data source drains it on the I/O thread); everything else is loop-only. A
 * send that finds the stream deferred posts one kick command (at most one queued at a time),
 * which resumes the stream's data on the I/O thread. Memory: b is reference counted (the
 * caller's handle, the loop's until the stream is DONE, the queued open command's, one per
 * queued kick, one while a response is being delivered) and freed at
 * zero, so a queued command never touches freed memory.
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BIDI_DEFAULT_MAX_SEND (4u * 1024u * 1024u)

void kvc_bidi_unref(struct kvc_bidi *b)
{
    if (atomic_fetch_sub(&b->refs, 1) == 1) {
        pthread_mutex_destroy(&b->mu);
        kvc_sendbuf_free(&b->out);
        kvc_rbuf_free(&b->s.rb);
        kvc_md_free(&b->md);
        free(b->path);
        free(b);
    }
}

/* ---- lists (loop) ---- */

static struct kvc_bidi **list_of(kvc_client *c, const struct kvc_bidi *b)
{
    if (b->state == BIDI_WAITING)
        return &c->bidi.waiting;
    if (b->state == BIDI_OPEN)
        return &c->bidi.open;
    return NULL;
}

static void list_push(kvc_client *c, struct kvc_bidi *b, int state)
{
    b->state = state;
    struct kvc_bidi **h = list_of(c, b);
    b->prev = NULL;
    b->next = *h;
    if (*h)
        (*h)->prev = b;
    *h = b;
    if (state == BIDI_WAITING)
        c->bidi.n_waiting++;
    else
        c->bidi.n_open++;
}

static void list_remove(kvc_client *c, struct kvc_bidi *b)
{
    struct kvc_bidi **h = list_of(c, b);
    if (!h)
        return;
    if (b->prev)
        b->prev->next = b->next;
    else
        *h = b->next;
    if (b->next)
        b->next->prev = b->prev;
    b->prev = b->next = NULL;
    if (b->state == BIDI_WAITING)
        c->bidi.n_waiting--;
    else
        c->bidi.n_open--;
}

/* ---- the stream ---- */

/* End the stream once: out of the lists, sends refused, on_end, the loop's reference
 * dropped. code 0 = OK. Does not reset the HTTP/2 stream (callers do when it is open). */
static void bidi_end(struct kvc_bidi *b, int code, const char *msg)
{
    kvc_client *c = b->c;
    if (b->state == BIDI_DONE)
        return;
    list_remove(c, b);
    b->state = BIDI_DONE;
    b->s.id = 0;
    pthread_mutex_lock(&b->mu);
    b->ended = 1;
    kvc_sendbuf_clear(&b->out);
    pthread_mutex_unlock(&b->mu);
    if (code == 0) {
        b->on_end(b->arg, 0, NULL);
    } else {
        kvc_error e;
        kvc_set_err(&e, code, "%s", msg ? msg : "");
        b->on_end(b->arg, -code, &e);
    }
    kvc_bidi_unref(b); /* the loop's reference */
}

static ssize_t bidi_read(nghttp2_session *session, int32_t stream_id, uint8_t *buf, size_t length,
                         uint32_t *data_flags, nghttp2_data_source *source, void *user_data)
{
    (void)session;
    (void)stream_id;
    (void)data_flags;
    (void)user_data;
    struct kvc_bidi *b = source->ptr;
    pthread_mutex_lock(&b->mu);
    ssize_t n = kvc_sendbuf_read(&b->out, buf, length);
    pthread_mutex_unlock(&b->mu);
    return n;
}

static void bidi_submit(struct kvc_bidi *b)
{
    kvc_client *c = b->c;
    kvc_grpc_stream_reset(&b->s);
    pthread_mutex_lock(&b->mu);
    b->out.deferred = 0;
    pthread_mutex_unlock(&b->mu);
    int32_t id = kvc_conn_submit(c, b->path, 0, &b->md, bidi_read, &b->s);
    if (id < 0) {
        char msg[120];
        snprintf(msg, sizeof msg, "kvclient: cannot submit stream: %s", nghttp2_strerror(id));
        bidi_end(b, KVC_INTERNAL, msg);
        return;
    }
    b->s.id = id;
    list_push(c, b, BIDI_OPEN);
}

void kvc_bidi_open_loop(kvc_client *c, struct kvc_bidi *b)
{
    if (b->state == BIDI_DONE) { /* freed before its open command ran */
    } else if (c->closing) {
        bidi_end(b, KVC_CANCELLED, "kvclient: client closed");
    } else if (kvc_conn_usable(c)) {
        bidi_submit(b);
        kvc_conn_flush(c);
    } else {
        list_push(c, b, BIDI_WAITING);
        kvc_conn_demand(c);
    }
    kvc_bidi_unref(b); /* the open command's reference */
}

void kvc_bidi_kick_loop(kvc_client *c, struct kvc_bidi *b)
{
    pthread_mutex_lock(&b->mu);
    b->kick_posted = 0;
    int resume = b->out.deferred && b->out.len > b->out.off;
    if (resume && b->state == BIDI_OPEN)
        b->out.deferred = 0;
    pthread_mutex_unlock(&b->mu);
    if (resume && b->state == BIDI_OPEN && c->conn && c->conn->h2) {
        nghttp2_session_resume_data(c->conn->h2, b->s.id);
        kvc_conn_flush(c);
    }
    kvc_bidi_unref(b); /* the kick's reference */
}

void kvc_bidi_free_loop(kvc_client *c, struct kvc_bidi *b)
{
    if (b->state == BIDI_DONE)
        return;
    if (b->state == BIDI_OPEN && b->s.id > 0) {
        kvc_conn_reset_stream(c, b->s.id, NGHTTP2_CANCEL);
        kvc_conn_flush(c);
    }
    list_remove(c, b);
    b->state = BIDI_DONE; /* no on_end: the owner gave the stream up */
    pthread_mutex_lock(&b->mu);
    b->ended = 1;
    pthread_mutex_unlock(&b->mu);
    kvc_bidi_unref(b); /* the loop's reference */
}

void kvc_bidi_failover_loop(kvc_client *c, struct kvc_bidi *b)
{
    if (b->state == BIDI_OPEN) /* on the current connection: give that one up */
        kvc_conn_fail(c, "a stream went unanswered (member hung?): trying the next endpoint");
}

void kvc_bidi_recv_loop(kvc_client *c, struct kvc_bidi *b)
{
    b->recv_paused = atomic_load(&b->want_paused);
    if (b->recv_paused || !b->recv_held)
        return;
    size_t n = b->recv_held;
    b->recv_held = 0;
    if (b->state == BIDI_OPEN && c->conn && c->conn->h2) {
        nghttp2_session_consume_stream(c->conn->h2, b->s.id, n); /* may send WINDOW_UPDATE */
        kvc_conn_flush(c);
    }
}

void kvc_bidi_on_ready(kvc_client *c)
{
    while (c->bidi.waiting && kvc_conn_usable(c)) {
        struct kvc_bidi *b = c->bidi.waiting;
        list_remove(c, b);
        b->state = BIDI_NEW;
        bidi_submit(b);
    }
}

void kvc_bidi_on_conn_lost(kvc_client *c, const char *reason)
{
    char msg[256];
    snprintf(msg, sizeof msg, "kvclient: connection lost: %s", reason ? reason : "");
    while (c->bidi.open) {
        struct kvc_bidi *b = c->bidi.open;
        kvc_conn_reset_stream(c, b->s.id, NGHTTP2_CANCEL); /* no-op on a dead connection */
        bidi_end(b, KVC_UNAVAILABLE, msg);
    }
}

static void on_bidi_msg(void *ctx, const uint8_t *m, size_t n)
{
    struct kvc_bidi *b = ctx;
    if (b->state == BIDI_OPEN)
        b->on_msg(b->arg, m, n);
}

void kvc_bidi_on_data(struct kvc_bidi *b, const uint8_t *d, size_t n)
{
    kvc_client *c = b->c;
    if (b->s.bad || b->state != BIDI_OPEN)
        return;
    atomic_fetch_add(&b->refs, 1); /* on_msg may free the stream (kvc_bidi_free) */
    if (kvc_rbuf_append(&b->s.rb, d, n) != 0) {
        b->s.bad = 1;
        b->s.bad_code = KVC_RESOURCE_EXHAUSTED;
        snprintf(b->s.bad_msg, sizeof b->s.bad_msg, "kvclient: out of memory");
    } else {
        kvc_grpc_parse(&b->s, c->cfg.max_response_bytes, on_bidi_msg, b);
    }
    if (b->s.bad && b->state == BIDI_OPEN) {
        char msg[sizeof b->s.bad_msg];
        snprintf(msg, sizeof msg, "%s", b->s.bad_msg);
        kvc_conn_reset_stream(c, b->s.id, NGHTTP2_CANCEL);
        bidi_end(b, b->s.bad_code, msg);
    }
    kvc_bidi_unref(b);
}

void kvc_bidi_on_stream_close(struct kvc_bidi *b, uint32_t h2err)
{
    kvc_client *c = b->c;
    char msg[256];
    int code = kvc_grpc_final_status(&b->s, h2err, 1, msg, sizeof msg);
    int unavailable = code == KVC_UNAVAILABLE || strstr(msg, "no leader") != NULL;
    int refused = kvc_grpc_refused(&b->s, h2err);
    b->s.id = 0;
    bidi_end(b, code, msg);
    if (unavailable && !refused)
        kvc_conn_drain(c, msg);
}

void kvc_bidi_close_all(kvc_client *c)
{
    while (c->bidi.open) {
        struct kvc_bidi *b = c->bidi.open;
        kvc_conn_reset_stream(c, b->s.id, NGHTTP2_CANCEL);
        bidi_end(b, KVC_CANCELLED, "kvclient: client closed");
    }
    while (c->bidi.waiting)
        bidi_end(c->bidi.waiting, KVC_CANCELLED, "kvclient: client closed");
}

/* ---- public API ---- */

int kvc_bidi_open(kvc_client *c, const char *method, size_t max_send_bytes, kvc_bidi_msg_cb on_msg,
                  kvc_bidi_end_cb on_end, void *arg, kvc_bidi **out, kvc_error *err)
{
    return kvc_bidi_open_md(c, method, max_send_bytes, NULL, on_msg, on_end, arg, out, err);
}

int kvc_bidi_open_md(kvc_client *c, const char *method, size_t max_send_bytes,
                     const kvc_call_md *md, kvc_bidi_msg_cb on_msg, kvc_bidi_end_cb on_end,
                     void *arg, kvc_bidi **out, kvc_error *err)
{
    if (out)
        *out = NULL;
    if (!c || !method || method[0] != '/' || !on_msg || !on_end || !out)
        return kvc_fail(err, KVC_INVALID_ARGUMENT, "kvclient: invalid argument");
    if (kvc_loop_on_thread(c->lg) && c->closing)
        return kvc_fail(err, KVC_CANCELLED, "kvclient: client closed");
    struct kvc_bidi *b = calloc(1, sizeof *b);
    if (!b)
        return kvc_fail(err, KVC_RESOURCE_EXHAUSTED, "kvclient: out of memory");
    b->path = strdup(method);
    if (!b->path || kvc_md_copy(&b->md, md) < 0) {
        kvc_md_free(&b->md);
        free(b->path);
        free(b);
        return kvc_fail(err, KVC_RESOURCE_EXHAUSTED, "kvclient: out of memory");
    }
    b->s.kind = STREAM_BIDI;
    b->s.grpc_status = -1;
    b->c = c;
    b->on_msg = on_msg;
    b->on_end = on_end;
    b->arg = arg;
    b->max_send = max_send_bytes ? max_send_bytes : BIDI_DEFAULT_MAX_SEND;
    b->state = BIDI_NEW;
    pthread_mutex_init(&b->mu, NULL);
    atomic_init(&b->refs, 3); /* the caller's, the loop's, the open command's */
    b->open_cmd.type = CMD_BIDI_OPEN;
    b->open_cmd.c = c;
    b->open_cmd.p = b;
    b->kick_cmd.type = CMD_BIDI_KICK;
    b->kick_cmd.c = c;
    b->kick_cmd.p = b;
    /* Always through the queue, also on the I/O thread: an open from inside a callback
     * that runs while the connection is being torn down must not start a new one there. */
    kvc_loop_post(c->lg, &b->open_cmd);
    *out = b;
    return 0;
}

int kvc_bidi_send(kvc_bidi *b, const uint8_t *msg, size_t len, kvc_error *err)
{
    if (!b || (!msg && len) || len > 0x7fffffffu)
        return kvc_fail(err, KVC_INVALID_ARGUMENT, "kvclient: invalid argument");
    pthread_mutex_lock(&b->mu);
    if (b->ended) {
        pthread_mutex_unlock(&b->mu);
        return kvc_fail(err, KVC_UNAVAILABLE, "kvclient: stream ended");
    }
    uint8_t *d = kvc_sendbuf_frame(&b->out, len, b->max_send);
    if (!d) {
        pthread_mutex_unlock(&b->mu);
        return kvc_fail(err, KVC_RESOURCE_EXHAUSTED,
                        "kvclient: stream send buffer full (%zu bytes)", b->max_send);
    }
    if (len)
        memcpy(d, msg, len);
    int post = b->out.deferred && !b->kick_posted;
    if (post) {
        b->kick_posted = 1;
        atomic_fetch_add(&b->refs, 1); /* the kick's reference */
    }
    pthread_mutex_unlock(&b->mu);
    if (post)
        kvc_loop_post(b->c->lg, &b->kick_cmd);
    return 0;
}

size_t kvc_bidi_queued(kvc_bidi *b)
{
    if (!b)
        return 0;
    pthread_mutex_lock(&b->mu);
    size_t n = b->out.len - b->out.off;
    pthread_mutex_unlock(&b->mu);
    return n;
}

void kvc_bidi_free(kvc_bidi *b)
{
    if (!b)
        return;
    kvc_client *c = b->c;
    if (kvc_loop_on_thread(c->lg)) {
        kvc_bidi_free_loop(c, b);
    } else {
        (void)kvc_loop_run_cmd(c, &b->free_cmd, CMD_BIDI_FREE, b, NULL);
    }
    kvc_bidi_unref(b); /* the caller's reference */
}

void kvc_bidi_set_recv_paused(kvc_bidi *b, int paused)
{
    if (!b)
        return;
    kvc_client *c = b->c;
    atomic_store(&b->want_paused, paused ? 1 : 0);
    if (kvc_loop_on_thread(c->lg))
        kvc_bidi_recv_loop(c, b);
    else
        (void)kvc_loop_run_cmd(c, &b->recv_cmd, CMD_BIDI_RECV, b, NULL);
}

void kvc_bidi_failover(kvc_bidi *b)
{
    if (!b)
        return;
    kvc_client *c = b->c;
    if (kvc_loop_on_thread(c->lg))
        kvc_bidi_failover_loop(c, b);
    else
        (void)kvc_loop_run_cmd(c, &b->fail_cmd, CMD_BIDI_FAILOVER, b, NULL);
}
