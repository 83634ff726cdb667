/* conc_watch: a server-owned watcher on the watch hub (see conc_watch.h). */
#include "api/conc_watch.h"

#include "api/api.h"
#include "watch/watch_hub.h"

#include <errno.h>
#include <stdlib.h>
#include <uv.h>

struct kv_conc_watch {
    uv_timer_t kick; /* runs on_done outside the hub */
    kv_watch_stream *st;
    const kv_conc_watch_ops *ops;
    void *arg;
    int done;     /* on_done scheduled or run */
    int canceled; /* a canceled response arrived */
    int closed;
};

static void on_kick(uv_timer_t *t)
{
    kv_conc_watch *w = t->data;
    if (!w->closed)
        w->ops->on_done(w->arg);
}

static void schedule_done(kv_conc_watch *w)
{
    if (w->done)
        return;
    w->done = 1;
    uv_timer_start(&w->kick, on_kick, 0, 0);
}

static int sink_send(void *sink, const uint8_t *msg, size_t len)
{
    kv_conc_watch *w = sink;
    if (w->closed || w->done)
        return 0; /* finished: the rest is not needed */
    Etcdserverpb__WatchResponse *wr = etcdserverpb__watch_response__unpack(NULL, len, msg);
    if (wr == NULL)
        return -ENOMEM;
    int rc = 0;
    if (wr->canceled) {
        w->canceled = 1;
        schedule_done(w);
    } else {
        rc = w->ops->on_resp(w->arg, wr);
        if (rc == 1) {
            schedule_done(w);
            rc = 0;
        }
    }
    etcdserverpb__watch_response__free_unpacked(wr, NULL);
    return rc;
}

static size_t sink_queued(void *sink)
{
    kv_conc_watch *w = sink;
    return w->ops->queued && !w->closed ? w->ops->queued(w->arg) : 0;
}

/* A send failed for good (on_resp's error, out of memory): the watch can see nothing more,
 * so it ends as a canceled one does. */
static void sink_failed(void *sink, int err)
{
    kv_conc_watch *w = sink;
    (void)err;
    if (w->closed || w->done)
        return;
    w->canceled = 1;
    schedule_done(w);
}

static const kv_watch_sink_ops sink_ops = {sink_send, sink_queued, sink_failed};

static void free_cb(uv_handle_t *h)
{
    free(h->data);
}

int kv_conc_watch_open(kv_api *s, uint64_t conn_id, const uint8_t *key, size_t klen,
                       const uint8_t *end, size_t elen, int64_t start_rev,
                       const kv_conc_watch_ops *ops, void *arg, kv_conc_watch **out)
{
    if (s->watch == NULL)
        return -ESHUTDOWN;
    kv_conc_watch *w = calloc(1, sizeof(*w));
    if (w == NULL)
        return -ENOMEM;
    w->ops = ops;
    w->arg = arg;
    int rc = kv_watch_stream_open(s->watch, conn_id, &sink_ops, w, &w->st);
    if (rc < 0) {
        free(w);
        return rc;
    }
    uv_timer_init(s->loop, &w->kick);
    w->kick.data = w;
    Etcdserverpb__WatchCreateRequest cr = ETCDSERVERPB__WATCH_CREATE_REQUEST__INIT;
    cr.key.data = (uint8_t *)key;
    cr.key.len = klen;
    cr.range_end.data = (uint8_t *)end;
    cr.range_end.len = end ? elen : 0;
    cr.start_revision = start_rev;
    Etcdserverpb__WatchRequest req = ETCDSERVERPB__WATCH_REQUEST__INIT;
    req.request_union_case = ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_CREATE_REQUEST;
    req.create_request = &cr;
    size_t len = etcdserverpb__watch_request__get_packed_size(&req);
    uint8_t *buf = malloc(len ? len : 1);
    rc = buf ? 0 : -ENOMEM;
    if (buf) {
        etcdserverpb__watch_request__pack(&req, buf);
        rc = kv_watch_stream_request(w->st, buf, len);
        free(buf);
    }
    if (rc < 0) {
        kv_conc_watch_close(w);
        return rc == -EBADMSG ? -EINVAL : -ENOMEM;
    }
    *out = w;
    return 0;
}

int kv_conc_watch_canceled(const kv_conc_watch *w)
{
    return w->canceled;
}

void kv_conc_watch_close(kv_conc_watch *w)
{
    if (w == NULL || w->closed)
        return;
    w->closed = 1;
    kv_watch_stream_close(w->st);
    w->st = NULL;
    uv_timer_stop(&w->kick);
    uv_close((uv_handle_t *)&w->kick, free_cb);
}
