/* lbconn: see lbconn.h. */
#include "lbconn.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grpc_raw.h"
#include "rpc.pb-c.h"

#define LB_CONNECT_TIMEOUT_MS 5000u

/* A unary call in flight: its stream (owned by the connection's kv_it_grpc) and callback. */
typedef struct lb_call {
    struct lb_call *next;
    kv_it_grpc_stream *st;
    lb_unary_cb cb;
    void *arg;
} lb_call;

struct lb_conn {
    uv_poll_t poll; /* on kv_it_grpc_fd(g); first member: the handle's memory is c's */
    int polling;    /* poll initialised (then closed through uv_close) */
    int events;     /* the UV_ events it watches */
    kv_it_grpc *g;
    lb_conn_event_cb on_event;
    void *arg;
    lb_call *calls; /* in flight; freed at close if never finished */
    size_t inflight;
    int failed, closing;
    /* keepalive stream */
    kv_it_grpc_stream *ka; /* NULL when none (never opened, or ended and noted) */
    int ka_eof;            /* lb_conn_ka_end was called on it */
    int ka_status;         /* grpc-status of the last keepalive stream, -1 if none */
    char ka_message[128];
    uint64_t ka_resets; /* keepalive streams ended by the server or the transport */
    lb_ka_cb ka_cb;
    void *ka_arg;
};

static void fail(lb_conn *c, int err)
{
    if (c->failed)
        return;
    c->failed = err ? err : -EIO;
    if (c->polling && !c->closing)
        uv_poll_stop(&c->poll); /* a dead socket would stay readable */
    if (c->on_event)
        c->on_event(c, c->arg, c->failed);
}

static void ka_msg(void *arg, const uint8_t *msg, size_t len)
{
    lb_conn *c = arg;
    Etcdserverpb__LeaseKeepAliveResponse *r =
        etcdserverpb__lease_keep_alive_response__unpack(NULL, len, msg);
    if (!r)
        return;
    if (c->ka_cb)
        c->ka_cb(c, c->ka_arg, r->id, r->ttl);
    etcdserverpb__lease_keep_alive_response__free_unpacked(r, NULL);
}

/* Delivers the keepalive responses received; once the stream has ended, notes how (a reset
 * unless lb_conn_ka_end ended it) and frees it. */
static void ka_reap(lb_conn *c)
{
    kv_it_grpc_stream *st = c->ka;
    if (!st)
        return;
    if (kv_it_grpc_stream_take(st, ka_msg, c) < 0) {
        fail(c, -EPROTO);
        return;
    }
    if (!st->closed)
        return;
    c->ka_status = st->grpc_status;
    snprintf(c->ka_message, sizeof(c->ka_message), "%.127s", st->grpc_message);
    if (!c->ka_eof)
        c->ka_resets++;
    c->ka = NULL;
    kv_it_grpc_stream_free(st);
}

/* Runs the callback of a finished call and frees it. */
static void complete(lb_conn *c, lb_call *call)
{
    kv_it_grpc_stream *st = call->st;
    int status = st->grpc_status;
    const uint8_t *msg = NULL;
    size_t len = 0;
    if (status == 0 && kv_it_grpc_stream_msgs(st, 0, &msg, &len) < 1)
        status = -1; /* OK without a complete response */
    c->inflight--;
    call->cb(c, call->arg, status, status ? st->grpc_message : "", msg, msg ? len : 0);
    kv_it_grpc_stream_free(st);
    free(call);
}

/* After a read: keepalive responses, then the finished unary calls (their callbacks may start
 * new ones, which go on c->calls meanwhile). */
static void process(lb_conn *c)
{
    ka_reap(c);
    lb_call *list = c->calls, *keep = NULL;
    c->calls = NULL;
    while (list) {
        lb_call *call = list;
        list = call->next;
        if (call->st->closed) {
            complete(c, call);
        } else {
            call->next = keep;
            keep = call;
        }
    }
    while (keep) {
        lb_call *n = keep->next;
        keep->next = c->calls;
        c->calls = keep;
        keep = n;
    }
}

static void on_poll(uv_poll_t *h, int status, int events)
{
    lb_conn *c = h->data;
    if (c->failed || c->closing)
        return;
    int rc =
        status < 0 ? status : kv_it_grpc_io(c->g, (events & (UV_READABLE | UV_DISCONNECT)) != 0);
    process(c); /* what arrived before a failure is delivered */
    if (rc) {
        fail(c, rc);
        return;
    }
    lb_conn_flush(c);
}

void lb_conn_flush(lb_conn *c)
{
    if (c->failed || c->closing)
        return;
    int rc = kv_it_grpc_io(c->g, 0);
    if (rc) {
        fail(c, rc);
        return;
    }
    int ev = UV_READABLE | (kv_it_grpc_want_write(c->g) ? UV_WRITABLE : 0);
    if (ev != c->events) {
        if ((rc = uv_poll_start(&c->poll, ev, on_poll)) < 0) {
            fail(c, rc);
            return;
        }
        c->events = ev;
    }
}

int lb_conn_open(uv_loop_t *loop, uint16_t port, lb_conn_event_cb on_event, void *arg,
                 lb_conn **out)
{
    const kv_it_grpc_opts o = {.set_window = 1, .window = 1u << 20, .conn_window = 1u << 24};
    int rc;
    lb_conn *c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    c->ka_status = -1;
    if ((rc = kv_it_grpc_open_opts(&c->g, "127.0.0.1", port, LB_CONNECT_TIMEOUT_MS, &o)))
        goto fail;
    if ((rc = uv_poll_init(loop, &c->poll, kv_it_grpc_fd(c->g))) < 0)
        goto fail;
    c->polling = 1;
    c->poll.data = c;
    c->events = UV_READABLE;
    if ((rc = uv_poll_start(&c->poll, c->events, on_poll)) < 0) {
        lb_conn_close(c); /* freed by the loop */
        return rc;
    }
    c->on_event = on_event;
    c->arg = arg;
    *out = c;
    return 0;
fail:
    kv_it_grpc_close(c->g);
    free(c);
    return rc;
}

int lb_conn_unary(lb_conn *c, const char *method, const uint8_t *req, size_t len, lb_unary_cb cb,
                  void *arg)
{
    int rc;
    if (c->failed)
        return c->failed;
    lb_call *call = calloc(1, sizeof(*call));
    if (!call)
        return -ENOMEM;
    call->st = kv_it_grpc_stream_start(c->g, method, NULL);
    if (!call->st) {
        free(call);
        return -EPROTO;
    }
    if ((rc = kv_it_grpc_send_msg(call->st, req, len, 1))) {
        kv_it_grpc_stream_free(call->st);
        free(call);
        return rc;
    }
    call->cb = cb;
    call->arg = arg;
    call->next = c->calls;
    c->calls = call;
    c->inflight++;
    return 0;
}

int lb_conn_ka_open(lb_conn *c, lb_ka_cb cb, void *arg)
{
    if (c->failed)
        return c->failed;
    ka_reap(c);
    if (c->ka)
        return -EBUSY;
    c->ka_cb = cb;
    c->ka_arg = arg;
    c->ka_eof = 0;
    c->ka_status = -1;
    c->ka_message[0] = 0;
    c->ka = kv_it_grpc_stream_start(c->g, "/etcdserverpb.Lease/LeaseKeepAlive", NULL);
    return c->ka ? 0 : -EPROTO;
}

int lb_conn_ka_send(lb_conn *c, int64_t id)
{
    if (c->failed)
        return c->failed;
    if (!lb_conn_ka_open_p(c))
        return -ENOTCONN;
    Etcdserverpb__LeaseKeepAliveRequest r = ETCDSERVERPB__LEASE_KEEP_ALIVE_REQUEST__INIT;
    uint8_t buf[16]; /* field 1, a varint: at most 11 bytes */
    r.id = id;
    size_t len = etcdserverpb__lease_keep_alive_request__pack(&r, buf);
    return kv_it_grpc_send_msg(c->ka, buf, len, 0);
}

void lb_conn_ka_end(lb_conn *c)
{
    if (!lb_conn_ka_open_p(c))
        return;
    c->ka_eof = 1;
    kv_it_grpc_send_raw(c->ka, NULL, 0, 1);
}

int lb_conn_ka_open_p(const lb_conn *c)
{
    return c->ka && !c->ka->closed;
}

uint64_t lb_conn_ka_resets(lb_conn *c, int *status, const char **message)
{
    if (!c->failed)
        ka_reap(c);
    if (status)
        *status = c->ka_status;
    if (message)
        *message = c->ka_message;
    return c->ka_resets;
}

size_t lb_conn_inflight(const lb_conn *c)
{
    return c->inflight;
}

int lb_conn_failed(const lb_conn *c)
{
    return c->failed;
}

static void on_closed(uv_handle_t *h)
{
    lb_conn *c = h->data;
    while (c->calls) { /* unfinished calls: dropped without their callbacks */
        lb_call *call = c->calls;
        c->calls = call->next;
        free(call); /* its stream goes with the connection */
    }
    kv_it_grpc_close(c->g); /* closes the socket: the poll handle is closed by now */
    free(c);
}

void lb_conn_close(lb_conn *c)
{
    if (!c || c->closing)
        return;
    c->closing = 1;
    c->on_event = NULL;
    uv_close((uv_handle_t *)&c->poll, on_closed);
}
