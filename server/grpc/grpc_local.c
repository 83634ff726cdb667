/* grpc_local.c - protocol detection on client connections and local (in-process) calls for
 * the HTTP/1 handler (grpc_http1.h). Loop thread only. */
#include "grpc/grpc_http1.h"
#include "grpc/grpc_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static const uint8_t h2_preface[24] = {'P',  'R',  'I', ' ', '*',  ' ',  'H',  'T',
                                       'T',  'P',  '/', '2', '.',  '0',  '\r', '\n',
                                       '\r', '\n', 'S', 'M', '\r', '\n', '\r', '\n'};

void kv_grpc_server_set_http1(kv_grpc_server *s, const kv_grpc_http1_ops *ops, void *arg)
{
    s->http1_ops = ops;
    s->http1_arg = arg;
}

int kv_grpc_http1_detect(kv_grpc_conn *c, const uint8_t *in, size_t len)
{
    kv_grpc_server *s = c->srv;
    if (c->http1)
        return s->http1_ops->recv(c->http1, in, len);
    size_t take = sizeof(h2_preface) - c->npre;
    if (take > len)
        take = len;
    memcpy(c->pre + c->npre, in, take);
    size_t have = c->npre + take;
    if (memcmp(c->pre, h2_preface, have) == 0) {
        c->npre = (uint8_t)have;
        if (have < sizeof(h2_preface))
            return 0; /* still a prefix of the preface: wait for more */
        c->detected = 1;
        int rv = kv_grpc_conn_recv_plain(c, c->pre, have);
        if (rv == 0 && len > take && !c->closing)
            rv = kv_grpc_conn_recv_plain(c, in + take, len - take);
        return rv;
    }
    c->detected = 1;
    if (!s->http1_ops) { /* HTTP/2 only: nghttp2 refuses the bad magic as before */
        int rv = kv_grpc_conn_recv_plain(c, c->pre, c->npre);
        return rv == 0 ? kv_grpc_conn_recv_plain(c, in, len) : rv;
    }
    c->http1 = s->http1_ops->open(s->http1_arg, c);
    if (!c->http1)
        return -ENOMEM;
    int rv = 0;
    if (c->npre)
        rv = s->http1_ops->recv(c->http1, c->pre, c->npre);
    if (rv == 0 && c->http1 && !c->closing)
        rv = s->http1_ops->recv(c->http1, in, len);
    return rv;
}

int kv_grpc_http1_write(kv_grpc_conn *c, const void *data, size_t len)
{
    if (c->raw_call)
        return c->closing ? -ECONNRESET : kv_grpc_raw_write(c->raw_call, data, len);
    if (c->closing)
        return -ECONNRESET;
    int rv = c->io_ops->send(c->io, c, data, len, &c->out);
    if (rv != 0)
        return rv < 0 ? rv : -ENOMEM;
    kv_grpc_srv_mark_dirty(c);
    return 0;
}

size_t kv_grpc_http1_pending(kv_grpc_conn *c)
{
    if (c->raw_call)
        return c->closing ? 0 : kv_grpc_buf_size(&c->raw_call->outq);
    return kv_grpc_buf_size(&c->out) + kv_grpc_buf_size(&c->wbuf);
}

int kv_grpc_http1_paused(kv_grpc_conn *c)
{
    /* the gRPC gate's flag and thresholds (kv_grpc_conn_sync, which also runs for HTTP/1
     * connections at each flush): whichever sees the output over the bound first counts the
     * pause, once; checked here between two answers, where no flush ran yet */
    size_t out = kv_grpc_http1_pending(c), max = c->srv->cfg.max_send_buffer_bytes;
    if (!c->gated && out > max) {
        c->gated = 1;
        kv_metric_inc(c->srv->m_gated_total);
    } else if (c->gated && out <= max / 2) {
        c->gated = 0;
    }
    return c->gated;
}

void kv_grpc_http1_end(kv_grpc_conn *c)
{
    if (c->closing)
        return;
    if (c->raw_call) {
        kv_grpc_raw_end(c->raw_call);
        return;
    }
    c->close_after_write = 1;
    c->close_at = uv_now(c->srv->loop) + c->srv->cfg.send_stall_timeout_ms;
    kv_grpc_srv_watch(c);
    kv_grpc_srv_mark_dirty(c);
}

void kv_grpc_http1_waiting(kv_grpc_conn *c, int waiting)
{
    kv_grpc_server *s = c->srv;
    if (c->closing || c->raw_call) /* a stream's: the HTTP/2 connection has its own timeouts */
        return;
    if (waiting && !c->in_hs) {
        c->accepted_at = uv_now(s->loop);
        kv_grpc_list_push(&s->hs, c);
    } else if (!waiting && c->in_hs) {
        kv_grpc_list_remove(&s->hs, c);
    }
}

int kv_grpc_http1_hold(kv_grpc_conn *c, size_t bytes)
{
    kv_grpc_server *s = c->srv;
    if (c->closing)
        return 0;
    if (c->raw_call) /* the stream's body is counted on its connection; this copy is bounded by
                        the handler's max_header_bytes + max_body_bytes */
        return s->buffered + bytes > s->cfg.max_buffered_bytes ? -ENOBUFS : 0;
    /* An HTTP/1 connection has no calls: in_bytes is its handler's input buffer. */
    if (bytes > c->in_bytes && s->buffered + (bytes - c->in_bytes) > s->cfg.max_buffered_bytes) {
        kv_metric_inc(s->m_ref_cap_recv);
        return -ENOBUFS;
    }
    c->in_bytes = bytes;
    kv_grpc_conn_sync(c);
    return 0;
}

void *kv_grpc_http1_app(kv_grpc_conn *c)
{
    return c->srv->app;
}

kv_grpc_server *kv_grpc_http1_server(kv_grpc_conn *c)
{
    return c->srv;
}

/* ---- local calls ---- */

int kv_grpc_local_new(kv_grpc_conn *c, const char *path, const kv_grpc_local_sink *sink, void *arg,
                      kv_grpc_call **out)
{
    kv_grpc_server *s = c->srv;
    const kv_grpc_method *m = NULL;
    for (size_t i = 0; i < s->n_methods && !m; i++)
        if (strcmp(s->methods[i].path, path) == 0)
            m = &s->methods[i];
    if (!m)
        return -ENOENT;
    kv_grpc_call *call = calloc(1, sizeof(*call));
    if (!call)
        return -ENOMEM;
    call->conn = c;
    kv_list_init(&call->link);
    kv_list_init(&call->dl_link);
    kv_list_init(&call->resume_link);
    call->method = m;
    call->started = 1;
    call->local = sink;
    call->local_arg = arg;
    kv_grpc_metrics_started(call);
    *out = call;
    return 0;
}

int kv_grpc_local_set_authorization(kv_grpc_call *call, const char *value, size_t len)
{
    static const char name[] = "authorization";
    call->started = 0; /* kv_grpc_call_on_header keeps request headers only */
    int rc = kv_grpc_call_on_header(call, (const uint8_t *)name, sizeof name - 1,
                                    (const uint8_t *)value, len);
    call->started = 1;
    return rc;
}

/* The server's admit hook (grpc_server.h) before a local call's first delivery, as for a
 * call on an HTTP/2 stream (grpc_call.c): a learner refuses the gateway's calls it refuses
 * over gRPC. 1 if the hook ended the call; the sink's finish may have freed it then. */
static int local_not_admitted(kv_grpc_call *call)
{
    int (*admit)(kv_grpc_call *) = call->conn->srv->cfg.admit;
    if (call->n_msgs > 0 || !admit || admit(call) == 0)
        return 0;
    return 1;
}

void kv_grpc_local_deliver(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    if (call->app_done)
        return;
    if (local_not_admitted(call))
        return;
    call->app_owned = 1;
    call->n_msgs++;
    call->method->on_message(call, msg, len);
}

void kv_grpc_local_half_close(kv_grpc_call *call)
{
    if (call->app_done || call->half_close_done)
        return;
    if (local_not_admitted(call))
        return;
    call->half_close_done = 1;
    call->remote_closed = 1;
    if (call->method->on_half_close)
        call->method->on_half_close(call);
}

int kv_grpc_local_streaming(kv_grpc_call *call)
{
    return call->method->streaming;
}

int kv_grpc_local_send(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    if (call->app_done || call->finished)
        return -EINVAL;
    if (call->conn->closing)
        return -ECONNRESET;
    if (len > call->conn->srv->cfg.max_response_bytes) {
        kv_metric_inc(call->conn->srv->m_ref_resp_size);
        return -EMSGSIZE;
    }
    /* As kv_grpc_call_send: a streaming call whose reader does not read is told so (the
     * handler backs off or ends the stream) rather than queueing without end. */
    size_t queued = call->local->queued ? call->local->queued(call->local_arg) : 0;
    if (call->method->streaming && queued &&
        queued + len > call->conn->srv->cfg.max_send_buffer_bytes) {
        kv_metric_inc(call->conn->srv->m_ref_sendbuf);
        return -ENOBUFS;
    }
    return call->local->send(call->local_arg, msg, len);
}

int kv_grpc_local_finish(kv_grpc_call *call, int status, const char *msg)
{
    if (call->app_done)
        return -EINVAL;
    call->app_done = 1;
    call->app_owned = 1;
    call->finished = 1;
    if (!call->counted) {
        call->counted = 1;
        kv_grpc_srv_count_request(call->conn->srv, call, status < 0 ? KV_GRPC_INTERNAL : status);
    }
    /* Last: the sink may free the call. */
    call->local->finish(call->local_arg, status, msg);
    return 0;
}

void kv_grpc_local_free(kv_grpc_call *call)
{
    if (!call)
        return;
    if (call->app_owned && !call->app_done) {
        call->app_done = 1;
        call->finished = 1;
        if (!call->counted) {
            call->counted = 1;
            kv_grpc_srv_count_request(call->conn->srv, call, KV_GRPC_CANCELLED);
        }
        if (call->method->on_cancel)
            call->method->on_cancel(call);
    }
    for (int i = 0; i < KV_GRPC_N_META; i++)
        free(call->meta[i]);
    free(call);
}
