/*
 * watch_stream: one Watch stream's protocol (etcd 3.4 api/v3rpc/watch.go recvLoop and
 * mvcc/watcher.go watchStream): create (key normalisation, watch_id chosen by the client or
 * from 0 upward, duplicate and empty-range errors), cancel, progress.
 */
#include "watch/watch_int.h"

#include "common/etcd_errors.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int kv_watch_stream_open(kv_watch_hub *h, uint64_t conn_id, const kv_watch_sink_ops *ops,
                         void *sink, kv_watch_stream **out)
{
    size_t same = 0;
    kv_list *e;
    kv_list_foreach(e, &h->streams)
        same += kv_list_data(e, kv_watch_stream, link)->conn_id == conn_id;
    if (same >= h->cfg.max_streams_per_conn)
        return -EMFILE;
    kv_watch_stream *st = calloc(1, sizeof(*st));
    if (st == NULL)
        return -ENOMEM;
    st->hub = h;
    st->ops = ops;
    st->sink = sink;
    st->conn_id = conn_id;
    st->max_id = -1;
    kv_list_init(&st->watchers);
    kv_list_insert_head(&h->streams, &st->link);
    h->n_streams++;
    *out = st;
    return 0;
}

static void watcher_free(kv_watcher *w)
{
    free(w->key);
    free(w->end);
    free(w);
}

static void watcher_remove(kv_watch_stream *st, kv_watcher *w)
{
    kv_watch_hub_detach(st->hub, w);
    kv_list_remove(&w->slink);
    st->n_watchers--;
    st->hub->n_watchers--;
    watcher_free(w);
}

void kv_watch_stream_close(kv_watch_stream *st)
{
    if (st == NULL)
        return;
    kv_watch_hub *h = st->hub;
    kv_list *e;
    while ((e = kv_list_head(&st->watchers)))
        watcher_remove(st, kv_list_data(e, kv_watcher, slink));
    kv_watch_stream_unfail(st);
    kv_list_remove(&st->link);
    h->n_streams--;
    free(st);
}

size_t kv_watch_stream_watchers(const kv_watch_stream *st)
{
    return st->n_watchers;
}

static kv_watcher *find(kv_watch_stream *st, int64_t id)
{
    kv_list *e;
    kv_list_foreach(e, &st->watchers) {
        kv_watcher *w = kv_list_data(e, kv_watcher, slink);
        if (w->id == id)
            return w;
    }
    return NULL;
}

static int keycmp(const uint8_t *a, size_t al, const uint8_t *b, size_t bl)
{
    size_t n = al < bl ? al : bl;
    int c = n ? memcmp(a, b, n) : 0;
    if (c)
        return c;
    return al < bl ? -1 : al > bl ? 1 : 0;
}

static uint8_t *dup_bytes(const uint8_t *p, size_t n)
{
    uint8_t *d = malloc(n ? n : 1);
    if (d && n)
        memcpy(d, p, n);
    return d;
}

static int created_reply(kv_watch_stream *st, int64_t id, int64_t rev, const char *err)
{
    Etcdserverpb__WatchResponse r = ETCDSERVERPB__WATCH_RESPONSE__INIT;
    r.watch_id = id;
    r.created = 1;
    if (err) {
        r.canceled = 1;
        r.cancel_reason = (char *)err;
    }
    return kv_watch_send_ctrl(st, &r, rev);
}

static int on_create(kv_watch_stream *st, const Etcdserverpb__WatchCreateRequest *c)
{
    kv_watch_hub *h = st->hub;
    static const uint8_t zero = 0;
    const uint8_t *key = c->key.data;
    size_t klen = c->key.len;
    if (klen == 0) { /* "\0" is the smallest key */
        key = &zero;
        klen = 1;
    }
    int kind = R_RANGE;
    if (c->range_end.len == 0)
        kind = R_SINGLE;
    else if (c->range_end.len == 1 && c->range_end.data[0] == 0)
        kind = R_FROM;
    /* "now": the last revision notified, or a later one already acknowledged to a client */
    int64_t wsrev = h->acked_rev > h->cur_rev ? h->acked_rev : h->cur_rev;
    int64_t rev = c->start_revision ? c->start_revision : wsrev + 1;

    /* mvcc watchStream.Watch */
    if (kind == R_RANGE && keycmp(key, klen, c->range_end.data, c->range_end.len) >= 0)
        return created_reply(st, -1, wsrev, kv_etcd_err_msg(KV_ERR_WATCHER_RANGE_EMPTY));
    if (st->n_watchers >= h->cfg.max_watchers_per_stream) {
        char msg[160];
        snprintf(msg, sizeof(msg), "%s (--max-watchers-per-stream %u)",
                 kv_etcd_err_msg(KV_ERR_TOO_MANY_WATCHERS), h->cfg.max_watchers_per_stream);
        return created_reply(st, -1, wsrev, msg);
    }
    int64_t id = c->watch_id;
    if (id == 0) { /* AutoWatchID */
        if (st->next_id <= st->max_id)
            while (find(st, st->next_id))
                st->next_id++;
        id = st->next_id++;
    } else if (find(st, id)) {
        return created_reply(st, -1, wsrev, kv_etcd_err_msg(KV_ERR_WATCHER_DUPLICATE_ID));
    }
    kv_watcher *w = calloc(1, sizeof(*w));
    if (w == NULL)
        return created_reply(st, -1, wsrev, kv_etcd_err_msg(KV_ERR_KVD_NOMEM));
    w->st = st;
    kv_list_init(&w->glink);
    kv_list_init(&w->slink);
    w->id = id;
    w->kind = kind;
    w->key = dup_bytes(key, klen);
    w->klen = klen;
    if (kind == R_RANGE) {
        w->end = dup_bytes(c->range_end.data, c->range_end.len);
        w->elen = c->range_end.len;
    }
    if (w->key == NULL || (kind == R_RANGE && w->end == NULL)) {
        watcher_free(w);
        return created_reply(st, -1, wsrev, kv_etcd_err_msg(KV_ERR_KVD_NOMEM));
    }
    for (size_t i = 0; i < c->n_filters; i++) {
        if (c->filters[i] == ETCDSERVERPB__WATCH_CREATE_REQUEST__FILTER_TYPE__NOPUT)
            w->noput = true;
        else if (c->filters[i] == ETCDSERVERPB__WATCH_CREATE_REQUEST__FILTER_TYPE__NODELETE)
            w->nodelete = true;
    }
    w->prev_kv = c->prev_kv;
    w->progress = c->progress_notify;
    w->progress_due = true;
    w->fragment = c->fragment;
    w->next_rev = rev;
    if (id > st->max_id)
        st->max_id = id;

    /* The created response goes out before any event of the watcher. */
    int rc = created_reply(st, id, wsrev, NULL);
    if (rc < 0) {
        watcher_free(w);
        return rc;
    }
    kv_list_insert_head(&st->watchers, &w->slink);
    st->n_watchers++;
    h->n_watchers++;
    kv_watch_hub_add(h, w);
    return 0;
}

int kv_watch_stream_request(kv_watch_stream *st, const uint8_t *msg, size_t len)
{
    Etcdserverpb__WatchRequest *req = etcdserverpb__watch_request__unpack(NULL, len, msg);
    if (req == NULL)
        return -EBADMSG;
    int rc = 0;
    switch (req->request_union_case) {
    case ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_CREATE_REQUEST:
        if (req->create_request)
            rc = on_create(st, req->create_request);
        break;
    case ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_CANCEL_REQUEST:
        if (req->cancel_request) {
            int64_t id = req->cancel_request->watch_id;
            kv_watcher *w = find(st, id);
            if (w) { /* unknown ids: no answer (etcd) */
                watcher_remove(st, w);
                Etcdserverpb__WatchResponse r = ETCDSERVERPB__WATCH_RESPONSE__INIT;
                r.watch_id = id;
                r.canceled = 1;
                rc = kv_watch_send_ctrl(st, &r, st->hub->cur_rev);
            }
        }
        break;
    case ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_PROGRESS_REQUEST:
        if (req->progress_request) {
            Etcdserverpb__WatchResponse r = ETCDSERVERPB__WATCH_RESPONSE__INIT;
            r.watch_id = -1; /* not associated with a watcher (etcd 3.4) */
            rc = kv_watch_send_ctrl(st, &r, st->hub->cur_rev);
        }
        break;
    default:
        break; /* etcd ignores unknown requests */
    }
    etcdserverpb__watch_request__free_unpacked(req, NULL);
    return rc;
}
