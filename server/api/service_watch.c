/*
 * service_watch: etcdserverpb.Watch/Watch, the gRPC glue of the watch hub
 * (server/watch/watch_hub.h has the model, bounds and etcd semantics).
 *
 * The stream is opened on its first message. Requests are handled as they arrive (no
 * receive queue). The client half-closing does not end the stream (etcd keeps sending
 * events until the client cancels the call). Errors end the call:
 *   too many watch streams on the connection -> RESOURCE_EXHAUSTED
 *   a control response that cannot be queued  -> RESOURCE_EXHAUSTED
 *   malformed request                          -> INTERNAL (grpc-go's unmarshal error)
 *   a response that can never be sent (over --max-response-bytes: RESOURCE_EXHAUSTED "grpc:
 *   trying to send message larger than max"; the buffer filled between one response's
 *   fragments: RESOURCE_EXHAUSTED, the slow reader's message), on the next loop turn
 */
#include "api/services.h"
#include "api/api.h"
#include "watch/watch_hub.h"

#include <errno.h>
#include <stdio.h>

static int sink_send(void *sink, const uint8_t *msg, size_t len)
{
    return kv_grpc_call_send(sink, msg, len);
}

static size_t sink_queued(void *sink)
{
    return kv_grpc_call_send_queued(sink);
}

static void end_stream(kv_grpc_call *call, kv_watch_stream *st, kv_etcd_err e)
{
    kv_watch_stream_close(st);
    kv_grpc_call_set_data(call, NULL);
    kv_reply_etcd_err(call, e);
}

/* A send of the hub failed for good (a later loop turn): the stream ends, as etcd's does when
 * its send fails. A call the transport already ended only loses its stream here. */
static void sink_failed(void *sink, int err)
{
    kv_grpc_call *call = sink;
    kv_watch_stream *st = kv_grpc_call_data(call);
    switch (err) {
    case -EMSGSIZE: /* one response over --max-response-bytes */
        end_stream(call, st, KV_ERR_GRPC_SEND_TOO_LARGE);
        break;
    case -ENOMEM:
        end_stream(call, st, KV_ERR_TOO_MANY_REQUESTS);
        break;
    default: /* -ECONNRESET: the buffer filled between one response's fragments; -EINVAL: the
              * call was reset (its on_cancel, if still owed, then finds no stream) */
        end_stream(call, st, KV_ERR_WATCH_SLOW_READER);
        break;
    }
}

static const kv_watch_sink_ops sink_ops = {sink_send, sink_queued, sink_failed};

static void on_watch_message(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    kv_api *s = kv_grpc_call_app(call);
    kv_watch_stream *st = kv_grpc_call_data(call);
    if (st == NULL) {
        if (s->watch == NULL) {
            kv_reply_etcd_err(call, KV_ERR_STOPPED);
            return;
        }
        int rc = kv_watch_stream_open(s->watch, kv_grpc_call_conn_id(call), &sink_ops, call, &st);
        if (rc == -EMFILE) {
            char d[64];
            snprintf(d, sizeof(d), " (--max-watch-streams-per-connection %u)",
                     s->cfg->max_watch_streams_per_conn);
            kv_reply_etcd_err_detail(call, KV_ERR_TOO_MANY_WATCH_STREAMS, d);
            return;
        }
        if (rc < 0) {
            kv_reply_etcd_err(call, KV_ERR_WATCH_OPEN_NOMEM);
            return;
        }
        kv_grpc_call_set_data(call, st);
    }
    kv_watch_hub_acked(s->watch, kv_node_acked_revision(s->node)); /* read your writes */
    int rc = kv_watch_stream_request(st, msg, len);
    if (rc == -EBADMSG)
        end_stream(call, st, KV_ERR_GRPC_UNMARSHAL);
    else if (rc == -ENOBUFS || rc == -ENOMEM)
        end_stream(call, st, KV_ERR_WATCH_SLOW_READER);
    /* other errors: the stream is going away and the transport cancels it */
}

static void on_watch_half_close(kv_grpc_call *call)
{
    (void)call; /* etcd keeps a half-closed watch stream open */
}

static void on_watch_cancel(kv_grpc_call *call)
{
    kv_watch_stream_close(kv_grpc_call_data(call));
}

const kv_grpc_method kv_service_watch[] = {
    {"/etcdserverpb.Watch/Watch", 1, on_watch_message, on_watch_half_close, on_watch_cancel},
};
const size_t kv_service_watch_len = sizeof(kv_service_watch) / sizeof(kv_service_watch[0]);
