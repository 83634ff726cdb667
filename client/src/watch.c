/*
 * watch.c - the shared Watch stream: many watchers multiplexed on one bidi stream per client
 * (as clientv3), creation one at a time (the server's created acks come in request order,
 * so the ack is matched to the watcher at the head of the queue, whatever watch ids the
 * server picks), delivery to callbacks on the I/O thread, resume after a lost stream from
 * each watcher's next revision.
 *
 * Ownership: a watcher has up to two references: the user's (dropped by kvc_watch_cancel or
 * kvc_close) and the scheduler's, held while it is in the create queue, being created, or
 * active in the id map (state != W_DONE). Everything below runs on the I/O thread except
 * the public functions at the end.
 */
#include "internal.h"
#include "pbconv.h"
#include "rpc.pb-c.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WATCH_PATH "/etcdserverpb.Watch/Watch"
#define ERR_COMPACTED "etcdserver: mvcc: required revision has been compacted"
#define ERR_FUTURE_REV "etcdserver: mvcc: required revision is a future revision"

/* ---- references ---- */

static void w_unref(struct kvc_watch *w)
{
    if (atomic_fetch_sub(&w->refs, 1) != 1)
        return;
    for (size_t i = 0; i < w->n_frags; i++)
        etcdserverpb__watch_response__free_unpacked(w->frags[i], NULL);
    free(w->frags);
    free(w->key);
    free(w->end);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w);
}

static void drop_frags(struct kvc_watch *w)
{
    for (size_t i = 0; i < w->n_frags; i++)
        etcdserverpb__watch_response__free_unpacked(w->frags[i], NULL);
    w->n_frags = 0;
    w->frag_bytes = 0;
}

/* Wake the thread blocked in kvc_watch_create (first ack or failure). */
static void ack(struct kvc_watch *w, int status, const char *msg, const kvc_header *h)
{
    pthread_mutex_lock(&w->mu);
    if (!w->ack_done) {
        w->ack_done = 1;
        w->ack_status = status;
        if (status)
            kvc_set_err(&w->ack_err, -status, "%s", msg ? msg : "");
        if (h)
            w->ack_hdr = *h;
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
}

/* ---- id map ---- */

static struct kvc_watch *map_entry(kvc_idmap_node *n)
{
    return n ? KVC_IDMAP_ENTRY(n, struct kvc_watch, hn) : NULL;
}

/* ---- create queue ---- */

static void q_push(struct kvc_watch_sched *s, struct kvc_watch *w)
{
    kv_list_insert_tail(&s->q, &w->qlink);
}

/* The first queued watcher, NULL if none. */
static struct kvc_watch *q_first(const struct kvc_watch_sched *s)
{
    kv_list *e = kv_list_head(&s->q);
    return e ? kv_list_data(e, struct kvc_watch, qlink) : NULL;
}

static struct kvc_watch *q_pop(struct kvc_watch_sched *s)
{
    struct kvc_watch *w = q_first(s);
    if (w)
        kv_list_remove(&w->qlink);
    return w;
}

/* Harmless if w is not queued. */
static void q_remove(struct kvc_watch_sched *s, struct kvc_watch *w)
{
    (void)s;
    kv_list_remove(&w->qlink);
}

/* Take w out of every scheduler structure and drop the scheduler's reference. */
static void w_done(kvc_client *c, struct kvc_watch *w)
{
    struct kvc_watch_sched *s = &c->wt;
    switch (w->state) {
    case W_QUEUED:
        q_remove(s, w);
        break;
    case W_CREATING:
        if (s->creating == w)
            s->creating = NULL;
        break;
    case W_ACTIVE:
        kvc_idmap_remove(&s->map, &w->hn);
        break;
    default:
        return;
    }
    w->state = W_DONE;
    drop_frags(w);
    w_unref(w);
}

/* ---- sending ---- */

static int stream_ready(const kvc_client *c)
{
    return c->wt.stream_open && kvc_conn_usable(c);
}

static ssize_t wt_read(nghttp2_session *session, int32_t stream_id, uint8_t *buf, size_t length,
                       uint32_t *data_flags, nghttp2_data_source *source, void *user_data)
{
    (void)session;
    (void)stream_id;
    (void)data_flags;
    (void)source;
    kvc_client *c = ((struct kvc_conn *)user_data)->c;
    struct kvc_watch_sched *s = &c->wt;
    return kvc_sendbuf_read(&s->out, buf, length);
}

static void kick(kvc_client *c)
{
    struct kvc_watch_sched *s = &c->wt;
    if (s->out.len > s->out.off && stream_ready(c) && s->out.deferred) {
        s->out.deferred = 0;
        nghttp2_session_resume_data(c->conn->h2, s->s.id);
    }
}

/* Append one framed WatchRequest to the send buffer (bounded). 0 or -1. */
static int append_req(kvc_client *c, const Etcdserverpb__WatchRequest *req)
{
    struct kvc_watch_sched *s = &c->wt;
    size_t n = etcdserverpb__watch_request__get_packed_size(req);
    uint8_t *d = kvc_sendbuf_frame(&s->out, n, KVC_WATCH_SENDBUF_MAX);
    if (!d)
        return -1;
    etcdserverpb__watch_request__pack(req, d);
    kick(c);
    return 0;
}

static void send_cancel(kvc_client *c, int64_t id)
{
    if (!stream_ready(c))
        return;
    Etcdserverpb__WatchCancelRequest cr = ETCDSERVERPB__WATCH_CANCEL_REQUEST__INIT;
    cr.watch_id = id;
    Etcdserverpb__WatchRequest req = ETCDSERVERPB__WATCH_REQUEST__INIT;
    req.request_union_case = ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_CANCEL_REQUEST;
    req.cancel_request = &cr;
    /* A full buffer only means the server keeps sending events for an id that is no longer
     * in the map; they are ignored. */
    (void)append_req(c, &req);
}

static void fail_watch(kvc_client *c, struct kvc_watch *w, int code, const char *msg);

/* Send the create request of the next queued watcher (one ack outstanding at a time). */
static void send_next_create(kvc_client *c)
{
    struct kvc_watch_sched *s = &c->wt;
    while (stream_ready(c) && !s->creating && !kv_list_empty(&s->q)) {
        struct kvc_watch *w = q_pop(s);
        Etcdserverpb__WatchCreateRequest cr = ETCDSERVERPB__WATCH_CREATE_REQUEST__INIT;
        Etcdserverpb__WatchCreateRequest__FilterType f[2];
        cr.key.data = w->key;
        cr.key.len = w->key_len;
        cr.range_end.data = w->end;
        cr.range_end.len = w->end_len;
        cr.start_revision = atomic_load(&w->next_rev);
        cr.progress_notify = w->opts.progress_notify != 0;
        cr.prev_kv = w->opts.prev_kv != 0;
        cr.fragment = w->opts.fragment != 0;
        if (w->opts.filters & KVC_FILTER_NOPUT)
            f[cr.n_filters++] = ETCDSERVERPB__WATCH_CREATE_REQUEST__FILTER_TYPE__NOPUT;
        if (w->opts.filters & KVC_FILTER_NODELETE)
            f[cr.n_filters++] = ETCDSERVERPB__WATCH_CREATE_REQUEST__FILTER_TYPE__NODELETE;
        cr.filters = f;
        Etcdserverpb__WatchRequest req = ETCDSERVERPB__WATCH_REQUEST__INIT;
        req.request_union_case = ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_CREATE_REQUEST;
        req.create_request = &cr;
        w->state = W_CREATING; /* off the queue now */
        if (append_req(c, &req) != 0) {
            s->creating = w;
            fail_watch(c, w, KVC_RESOURCE_EXHAUSTED,
                       "kvclient: watch send buffer full (create request too large)");
            continue;
        }
        s->creating = w;
    }
}

/* ---- delivery ---- */

static void deliver(struct kvc_watch *w, const kvc_watch_response *r)
{
    if (w->user_cancelled || !w->cb)
        return;
    atomic_fetch_add(&w->refs, 1);
    w->cb(w->arg, r);
    w_unref(w);
}

/* Final failure of one watcher: the creating thread gets the error if it is still waiting
 * for the first ack; otherwise the callback gets a final canceled response. */
static void fail_watch(kvc_client *c, struct kvc_watch *w, int code, const char *msg)
{
    int created = w->created_once;
    atomic_fetch_add(&w->refs, 1);
    w_done(c, w);
    if (!created) {
        ack(w, -code, msg, NULL);
    } else {
        kvc_watch_response r;
        memset(&r, 0, sizeof r);
        r.watch_id = w->hn.id;
        r.canceled = 1;
        r.status = -code;
        r.cancel_reason = msg;
        deliver(w, &r);
    }
    w_unref(w);
}

static void set_next_rev(struct kvc_watch *w, int64_t rev)
{
    if (rev > atomic_load(&w->next_rev))
        atomic_store(&w->next_rev, rev);
}

/* The created ack of the watcher at the head (s->creating). */
static void on_created(kvc_client *c, Etcdserverpb__WatchResponse *r)
{
    struct kvc_watch_sched *s = &c->wt;
    struct kvc_watch *w = s->creating;
    s->creating = NULL;
    if (!w) { /* not ours: tell the server we do not want it */
        if (!r->canceled)
            send_cancel(c, r->watch_id);
        return;
    }
    w->state = W_QUEUED; /* transient: not in any structure */
    if (w->user_cancelled) {
        if (!r->canceled)
            send_cancel(c, r->watch_id);
        w->state = W_DONE;
        w_unref(w);
        return;
    }
    kvc_header h;
    kvc_header_from(&h, r->header);
    w->hn.id = r->watch_id;
    if (r->canceled && r->compact_revision == 0) {
        char msg[300];
        snprintf(msg, sizeof msg, "%s", r->cancel_reason[0] ? r->cancel_reason : ERR_FUTURE_REV);
        w->state = W_CREATING; /* for w_done */
        s->creating = w;
        fail_watch(c, w, r->cancel_reason[0] ? KVC_FAILED_PRECONDITION : KVC_OUT_OF_RANGE, msg);
        return;
    }
    int first = !w->created_once;
    w->created_once = 1;
    if (atomic_load(&w->next_rev) == 0)
        atomic_store(&w->next_rev, h.revision + 1);
    if (r->canceled) { /* compacted (some servers say so in the ack itself) */
        atomic_fetch_add(&w->refs, 1);
        w->state = W_DONE;
        w_unref(w); /* the scheduler's reference */
        if (first)
            ack(w, 0, NULL, &h);
        kvc_watch_response out;
        memset(&out, 0, sizeof out);
        out.header = h;
        out.watch_id = r->watch_id;
        out.canceled = 1;
        out.compact_revision = r->compact_revision;
        out.status = -KVC_OUT_OF_RANGE;
        out.cancel_reason = r->cancel_reason[0] ? r->cancel_reason : ERR_COMPACTED;
        deliver(w, &out);
        w_unref(w);
        return;
    }
    if (kvc_idmap_insert(&s->map, &w->hn) != 0) {
        send_cancel(c, r->watch_id);
        w->state = W_CREATING;
        s->creating = w;
        fail_watch(c, w, KVC_RESOURCE_EXHAUSTED, "kvclient: out of memory");
        return;
    }
    w->state = W_ACTIVE;
    if (first)
        ack(w, 0, NULL, &h);
    if (w->opts.created_notify && first) {
        kvc_watch_response out;
        memset(&out, 0, sizeof out);
        out.header = h;
        out.watch_id = r->watch_id;
        out.created = 1;
        out.cancel_reason = "";
        deliver(w, &out);
    }
}

/* Reply to a WatchProgressRequest (watch_id -1): delivered to every active watcher. */
static void broadcast_progress(kvc_client *c, const Etcdserverpb__WatchResponse *r)
{
    struct kvc_watch_sched *s = &c->wt;
    if (s->map.n == 0)
        return;
    struct kvc_watch **v = malloc(s->map.n * sizeof *v);
    if (!v)
        return;
    size_t n = 0;
    for (kvc_idmap_node *e = kvc_idmap_first(&s->map); e; e = kvc_idmap_next(&s->map, e)) {
        struct kvc_watch *w = map_entry(e);
        atomic_fetch_add(&w->refs, 1);
        v[n++] = w;
    }
    kvc_watch_response out;
    memset(&out, 0, sizeof out);
    kvc_header_from(&out.header, r->header);
    out.progress_notify = 1;
    out.cancel_reason = "";
    for (size_t i = 0; i < n; i++) {
        if (v[i]->state == W_ACTIVE) {
            /* next_rev is not moved: etcd 3.4 answers a WatchProgressRequest at once, even
             * while some watchers are still catching up (unsynced), so this revision does
             * not prove that every earlier event of this watcher was delivered. */
            out.watch_id = v[i]->hn.id;
            deliver(v[i], &out);
        }
        w_unref(v[i]);
    }
    free(v);
}

/* Events / progress / cancellation for an active watcher; r is owned (freed or kept as a
 * fragment). */
static void on_watch_msg(kvc_client *c, struct kvc_watch *w, Etcdserverpb__WatchResponse *r,
                         size_t wire_len)
{
    if (r->fragment) {
        if (w->frag_bytes + wire_len > c->cfg.max_response_bytes) {
            etcdserverpb__watch_response__free_unpacked(r, NULL);
            send_cancel(c, w->hn.id);
            char msg[160];
            snprintf(msg, sizeof msg,
                     "kvclient: fragmented watch response exceeds max_response_bytes (%u)",
                     c->cfg.max_response_bytes);
            fail_watch(c, w, KVC_RESOURCE_EXHAUSTED, msg);
            return;
        }
        if (w->n_frags == w->frag_cap) {
            size_t cap = w->frag_cap ? w->frag_cap * 2 : 4;
            void **p = realloc(w->frags, cap * sizeof *p);
            if (!p) {
                etcdserverpb__watch_response__free_unpacked(r, NULL);
                send_cancel(c, w->hn.id);
                fail_watch(c, w, KVC_RESOURCE_EXHAUSTED, "kvclient: out of memory");
                return;
            }
            w->frags = p;
            w->frag_cap = cap;
        }
        w->frags[w->n_frags++] = r;
        w->frag_bytes += wire_len;
        return;
    }
    size_t nev = r->n_events;
    for (size_t i = 0; i < w->n_frags; i++)
        nev += ((Etcdserverpb__WatchResponse *)w->frags[i])->n_events;
    kvc_event *ev = nev ? calloc(nev, sizeof *ev) : NULL;
    if (nev && !ev) {
        etcdserverpb__watch_response__free_unpacked(r, NULL);
        send_cancel(c, w->hn.id);
        fail_watch(c, w, KVC_RESOURCE_EXHAUSTED, "kvclient: out of memory");
        return;
    }
    size_t k = 0;
    for (size_t f = 0; f <= w->n_frags; f++) {
        const Etcdserverpb__WatchResponse *m =
            f < w->n_frags ? (const Etcdserverpb__WatchResponse *)w->frags[f] : r;
        for (size_t i = 0; i < m->n_events; i++) {
            const Mvccpb__Event *e = m->events[i];
            ev[k].type =
                e->type == MVCCPB__EVENT__EVENT_TYPE__DELETE ? KVC_EVENT_DELETE : KVC_EVENT_PUT;
            kvc_kv_from(&ev[k].kv, e->kv);
            if (e->prev_kv) {
                ev[k].has_prev_kv = 1;
                kvc_kv_from(&ev[k].prev_kv, e->prev_kv);
            }
            k++;
        }
    }
    kvc_watch_response out;
    memset(&out, 0, sizeof out);
    kvc_header_from(&out.header, r->header);
    out.watch_id = r->watch_id;
    out.events = ev;
    out.n_events = nev;
    out.cancel_reason = r->cancel_reason;
    if (nev > 0)
        set_next_rev(w, ev[nev - 1].kv.mod_revision + 1);
    /* The events point into the fragments: take them over until after delivery. */
    void **frags = w->frags;
    size_t n_frags = w->n_frags;
    w->frags = NULL;
    w->n_frags = w->frag_cap = 0;
    w->frag_bytes = 0;
    atomic_fetch_add(&w->refs, 1);
    if (r->canceled || r->compact_revision != 0) {
        out.canceled = 1;
        out.compact_revision = r->compact_revision;
        if (r->compact_revision) {
            out.status = -KVC_OUT_OF_RANGE;
            if (!r->cancel_reason[0])
                out.cancel_reason = ERR_COMPACTED;
        } else if (r->cancel_reason[0]) {
            out.status = -KVC_FAILED_PRECONDITION;
        } else {
            out.status = -KVC_OUT_OF_RANGE;
            out.cancel_reason = ERR_FUTURE_REV;
        }
        w_done(c, w);
    } else if (nev == 0 && out.header.revision != 0) {
        out.progress_notify = 1;
        set_next_rev(w, out.header.revision + 1);
    }
    deliver(w, &out);
    for (size_t i = 0; i < n_frags; i++)
        etcdserverpb__watch_response__free_unpacked(frags[i], NULL);
    free(frags);
    free(ev);
    etcdserverpb__watch_response__free_unpacked(r, NULL);
    w_unref(w);
}

static void on_msg(void *ctx, const uint8_t *m, size_t n)
{
    kvc_client *c = ctx;
    struct kvc_watch_sched *s = &c->wt;
    Etcdserverpb__WatchResponse *r = etcdserverpb__watch_response__unpack(NULL, n, m);
    if (!r)
        return;
    s->failures = 0;
    if (r->created) {
        on_created(c, r);
        etcdserverpb__watch_response__free_unpacked(r, NULL);
        send_next_create(c);
        return;
    }
    if (r->watch_id == -1 && r->n_events == 0 && !r->canceled && r->compact_revision == 0) {
        broadcast_progress(c, r);
        etcdserverpb__watch_response__free_unpacked(r, NULL);
        return;
    }
    struct kvc_watch *w = map_entry(kvc_idmap_find(&s->map, r->watch_id));
    if (!w) {
        etcdserverpb__watch_response__free_unpacked(r, NULL);
        return;
    }
    on_watch_msg(c, w, r, n);
}

/* ---- the stream ---- */

static void retry_cb(uv_timer_t *t);

static int has_work(const struct kvc_watch_sched *s)
{
    return !kv_list_empty(&s->q) || s->creating || s->map.n;
}

static void stream_open(kvc_client *c)
{
    struct kvc_watch_sched *s = &c->wt;
    if (s->stream_open || !kvc_conn_usable(c) || c->closing || !has_work(s))
        return;
    if (uv_is_active((uv_handle_t *)&s->retry_timer))
        return;
    kvc_grpc_stream_reset(&s->s);
    kvc_sendbuf_clear(&s->out);
    s->out.deferred = 0;
    int32_t id = kvc_conn_submit(c, WATCH_PATH, 0, NULL, wt_read, &s->s);
    if (id < 0) {
        uv_timer_start(&s->retry_timer, retry_cb, kvc_backoff_ms(c, s->failures++), 0);
        return;
    }
    s->s.id = id;
    s->stream_open = 1;
    send_next_create(c);
}

static void retry_cb(uv_timer_t *t)
{
    kvc_client *c = t->data;
    stream_open(c);
    kvc_conn_flush(c);
}

/* The stream is gone: every watcher goes back to the create queue, in its order (the one
 * being created first, then the active ones, then those still queued). Fragments of an
 * incomplete response are dropped: next_rev did not move, so they are sent again. */
static void requeue_all(kvc_client *c)
{
    struct kvc_watch_sched *s = &c->wt;
    kv_list old;
    kv_list_init(&old);
    kv_list_move(&s->q, &old);
    if (s->creating) {
        struct kvc_watch *w = s->creating;
        s->creating = NULL;
        if (w->user_cancelled) {
            w->state = W_DONE;
            w_unref(w);
        } else {
            w->state = W_QUEUED;
            q_push(s, w);
        }
    }
    for (kvc_idmap_node *e = kvc_idmap_first(&s->map), *nx; e; e = nx) {
        struct kvc_watch *w = map_entry(e);
        nx = kvc_idmap_next(&s->map, e);
        kvc_idmap_remove(&s->map, e);
        drop_frags(w);
        w->state = W_QUEUED;
        q_push(s, w);
    }
    kv_list_move(&old, &s->q);
}

static void fail_all(kvc_client *c, int code, const char *msg)
{
    struct kvc_watch_sched *s = &c->wt;
    struct kvc_watch *w;
    while ((w = q_first(s)))
        fail_watch(c, w, code, msg);
}

void kvc_watch_on_ready(kvc_client *c)
{
    uv_timer_stop(&c->wt.retry_timer);
    stream_open(c);
}

void kvc_watch_on_conn_lost(kvc_client *c)
{
    struct kvc_watch_sched *s = &c->wt;
    s->stream_open = 0;
    s->s.id = 0;
    kvc_sendbuf_clear(&s->out);
    s->out.deferred = 0;
    kvc_rbuf_free(&s->s.rb);
    requeue_all(c);
}

/* Codes after which re-opening the stream would only fail again. */
static int final_code(int code)
{
    switch (code) {
    case KVC_UNIMPLEMENTED:
    case KVC_INVALID_ARGUMENT:
    case KVC_PERMISSION_DENIED:
    case KVC_UNAUTHENTICATED:
    case KVC_FAILED_PRECONDITION:
    case KVC_RESOURCE_EXHAUSTED:
    case KVC_OUT_OF_RANGE:
    case KVC_NOT_FOUND:
    case KVC_ALREADY_EXISTS:
    case KVC_DATA_LOSS:
        return 1;
    default:
        return 0;
    }
}

void kvc_watch_on_stream_close(kvc_client *c, uint32_t h2err)
{
    struct kvc_watch_sched *s = &c->wt;
    char msg[256];
    int code = kvc_grpc_final_status(&s->s, h2err, 1, msg, sizeof msg);
    s->stream_open = 0;
    s->s.id = 0;
    kvc_sendbuf_clear(&s->out);
    kvc_rbuf_free(&s->s.rb);
    requeue_all(c);
    if (final_code(code)) {
        char full[300];
        snprintf(full, sizeof full, "%s", msg[0] ? msg : "kvclient: Watch stream refused");
        snprintf(c->last_err, sizeof c->last_err, "watch stream ended: %s (code %d)", msg, code);
        fail_all(c, code, full);
        return;
    }
    snprintf(c->last_err, sizeof c->last_err, "watch stream ended: %s (code %d)", msg, code);
    if ((code == KVC_UNAVAILABLE || strstr(msg, "no leader")) && !kvc_grpc_refused(&s->s, h2err))
        kvc_conn_drain(c, msg);
    if (!c->closing && kvc_conn_usable(c) && has_work(s))
        uv_timer_start(&s->retry_timer, retry_cb, kvc_backoff_ms(c, s->failures++), 0);
}

void kvc_watch_on_data(kvc_client *c, const uint8_t *d, size_t n)
{
    struct kvc_watch_sched *s = &c->wt;
    if (s->s.bad)
        return;
    if (kvc_rbuf_append(&s->s.rb, d, n) != 0 ||
        kvc_grpc_parse(&s->s, c->cfg.max_response_bytes, on_msg, c) != 0) {
        if (!s->s.bad) {
            s->s.bad = 1;
            s->s.bad_code = KVC_RESOURCE_EXHAUSTED;
            snprintf(s->s.bad_msg, sizeof s->s.bad_msg, "kvclient: out of memory");
        }
        kvc_conn_reset_stream(c, s->s.id, NGHTTP2_CANCEL);
        kvc_watch_on_stream_close(c, NGHTTP2_CANCEL);
    }
}

/* ---- loop side of the API ---- */

int kvc_watch_init(kvc_client *c)
{
    struct kvc_watch_sched *s = &c->wt;
    uv_timer_init(&c->lg->loop, &s->retry_timer);
    s->retry_timer.data = c;
    c->open_handles++;
    s->s.kind = STREAM_WATCH;
    s->s.grpc_status = -1;
    return 0;
}

void kvc_watch_add_loop(kvc_client *c, struct kvc_watch *w)
{
    struct kvc_watch_sched *s = &c->wt;
    if (c->closing) {
        ack(w, -KVC_CANCELLED, "kvclient: client closed", NULL);
        return;
    }
    kv_list_insert_head(&s->all, &w->alink);
    atomic_fetch_add(&w->refs, 1); /* the scheduler's */
    w->state = W_QUEUED;
    q_push(s, w);
    kvc_conn_demand(c);
    stream_open(c);
    send_next_create(c);
    kvc_conn_flush(c);
}

/* Harmless if w is not on c->wt.all (any more). */
static void all_remove(kvc_client *c, struct kvc_watch *w)
{
    (void)c;
    kv_list_remove(&w->alink);
}

void kvc_watch_cancel_loop(kvc_client *c, struct kvc_watch *w)
{
    all_remove(c, w);
    if (w->user_cancelled)
        return;
    w->user_cancelled = 1;
    switch (w->state) {
    case W_ACTIVE:
        send_cancel(c, w->hn.id);
        w_done(c, w);
        break;
    case W_QUEUED:
        w_done(c, w);
        break;
    default: /* W_CREATING: its ack still has to be matched; on_created drops it */
        break;
    }
    kvc_conn_flush(c);
}

int kvc_watch_progress_loop(kvc_client *c, kvc_error *err)
{
    if (!stream_ready(c))
        return kvc_fail(err, KVC_UNAVAILABLE, "kvclient: no watch stream open");
    Etcdserverpb__WatchProgressRequest pr = ETCDSERVERPB__WATCH_PROGRESS_REQUEST__INIT;
    Etcdserverpb__WatchRequest req = ETCDSERVERPB__WATCH_REQUEST__INIT;
    req.request_union_case = ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_PROGRESS_REQUEST;
    req.progress_request = &pr;
    if (append_req(c, &req) != 0)
        return kvc_fail(err, KVC_RESOURCE_EXHAUSTED, "kvclient: watch send buffer full");
    kvc_conn_flush(c);
    return 0;
}

void kvc_watch_close_all(kvc_client *c)
{
    struct kvc_watch_sched *s = &c->wt;
    if (s->creating) {
        struct kvc_watch *w = s->creating;
        ack(w, -KVC_CANCELLED, "kvclient: client closed", NULL);
        w_done(c, w);
    }
    struct kvc_watch *w;
    while ((w = q_first(s))) {
        ack(w, -KVC_CANCELLED, "kvclient: client closed", NULL);
        w_done(c, w);
    }
    for (kvc_idmap_node *e = kvc_idmap_first(&s->map), *nx; e; e = nx) {
        nx = kvc_idmap_next(&s->map, e);
        w_done(c, map_entry(e)); /* removes e; may free its watcher */
    }
    kv_list *e;
    while ((e = kv_list_head(&s->all))) {
        w = kv_list_data(e, struct kvc_watch, alink);
        all_remove(c, w);
        w->user_cancelled = 1;
        w_unref(w); /* the user's handle: kvc_close frees it */
    }
    uv_timer_stop(&s->retry_timer);
    uv_close((uv_handle_t *)&s->retry_timer, kvc_handle_closed_cb);
}

void kvc_watch_free_sched(kvc_client *c)
{
    kvc_idmap_free(&c->wt.map);
    kvc_sendbuf_free(&c->wt.out);
    kvc_rbuf_free(&c->wt.s.rb);
}

/* ---- public API ---- */

static int dup_bytes(uint8_t **dst, const void *src, size_t n)
{
    *dst = malloc(n ? n : 1);
    if (!*dst)
        return -1;
    if (n)
        memcpy(*dst, src, n);
    return 0;
}

/* clientv3's WithPrefix / WithFromKey, including their empty-key rules. */
static int make_range(struct kvc_watch *w, const void *key, size_t key_len, const kvc_watch_opts *o)
{
    static const uint8_t zero = 0;
    if (o->range_end && o->range_end_len) {
        if (dup_bytes(&w->key, key, key_len) || dup_bytes(&w->end, o->range_end, o->range_end_len))
            return -1;
        w->key_len = key_len;
        w->end_len = o->range_end_len;
        return 0;
    }
    if ((o->prefix || o->from_key) && key_len == 0) {
        if (dup_bytes(&w->key, &zero, 1) || dup_bytes(&w->end, &zero, 1))
            return -1;
        w->key_len = w->end_len = 1;
        return 0;
    }
    if (dup_bytes(&w->key, key, key_len))
        return -1;
    w->key_len = key_len;
    if (o->from_key) {
        if (dup_bytes(&w->end, &zero, 1))
            return -1;
        w->end_len = 1;
        return 0;
    }
    if (o->prefix) {
        if (dup_bytes(&w->end, key, key_len))
            return -1;
        size_t n = key_len;
        while (n > 0 && w->end[n - 1] == 0xff)
            n--;
        if (n == 0) { /* all 0xff: every key from key on */
            w->end[0] = 0;
            w->end_len = 1;
        } else {
            w->end[n - 1]++;
            w->end_len = n;
        }
    }
    return 0;
}

int kvc_watch_create(kvc_client *c, const void *key, size_t key_len, const kvc_watch_opts *opts,
                     uint32_t timeout_ms, kvc_watch_cb cb, void *arg, kvc_watch **out,
                     kvc_header *created, kvc_error *err)
{
    if (out)
        *out = NULL;
    if (!c || !out || !cb || (key_len && !key))
        return kvc_fail(err, KVC_INVALID_ARGUMENT, "kvclient: invalid argument");
    if (kvc_loop_on_thread(c->lg))
        return kvc_fail(err, KVC_FAILED_PRECONDITION,
                        "kvclient: kvc_watch_create called on the I/O thread (from a callback)");
    kvc_watch_opts o;
    memset(&o, 0, sizeof o);
    if (opts)
        o = *opts;
    struct kvc_watch *w = calloc(1, sizeof *w);
    if (!w)
        return kvc_fail(err, KVC_RESOURCE_EXHAUSTED, "kvclient: out of memory");
    kv_list_init(&w->qlink);
    kv_list_init(&w->alink);
    w->c = c;
    w->cb = cb;
    w->arg = arg;
    w->state = W_DONE; /* no scheduler reference until kvc_watch_add_loop */
    atomic_init(&w->refs, 1);
    atomic_init(&w->next_rev, o.start_revision > 0 ? o.start_revision : 0);
    pthread_mutex_init(&w->mu, NULL);
    kvc_cond_init_monotonic(&w->cv);
    if (make_range(w, key, key_len, &o) != 0) {
        w_unref(w);
        return kvc_fail(err, KVC_RESOURCE_EXHAUSTED, "kvclient: out of memory");
    }
    o.range_end = NULL;
    o.range_end_len = 0;
    w->opts = o;
    w->cmd.type = CMD_WATCH_ADD;
    w->cmd.c = c;
    w->cmd.p = w;
    w->cmd.w = NULL;
    kvc_loop_post(c->lg, &w->cmd);

    struct timespec ts;
    kvc_deadline_after(&ts, timeout_ms);
    int rc;
    pthread_mutex_lock(&w->mu);
    while (!w->ack_done) {
        if (timeout_ms == 0)
            pthread_cond_wait(&w->cv, &w->mu);
        else if (pthread_cond_timedwait(&w->cv, &w->mu, &ts) == ETIMEDOUT)
            break;
    }
    if (!w->ack_done) {
        rc = -KVC_DEADLINE_EXCEEDED;
        w->ack_done = 1; /* a late ack must not overwrite the result */
        pthread_mutex_unlock(&w->mu);
        kvc_watch_cancel(w);
        return kvc_fail(err, KVC_DEADLINE_EXCEEDED,
                        "kvclient: watch not acknowledged within %u ms%s%s", timeout_ms,
                        c->last_err[0] ? "; last error: " : "", c->last_err);
    }
    rc = w->ack_status;
    if (rc != 0 && err)
        *err = w->ack_err;
    if (rc == 0 && created)
        *created = w->ack_hdr;
    pthread_mutex_unlock(&w->mu);
    if (rc != 0) {
        kvc_watch_cancel(w);
        return rc;
    }
    *out = w;
    return 0;
}

void kvc_watch_cancel(kvc_watch *w)
{
    if (!w)
        return;
    kvc_client *c = w->c;
    if (kvc_loop_on_thread(c->lg)) {
        kvc_watch_cancel_loop(c, w);
    } else {
        (void)kvc_loop_run_cmd(c, &w->ccmd, CMD_WATCH_CANCEL, w, NULL);
    }
    w_unref(w);
}

int kvc_watch_progress(kvc_client *c, kvc_error *err)
{
    if (!c)
        return kvc_fail(err, KVC_INVALID_ARGUMENT, "kvclient: invalid argument");
    if (kvc_loop_on_thread(c->lg))
        return kvc_watch_progress_loop(c, err);
    struct kvc_cmd cmd;
    memset(&cmd, 0, sizeof cmd);
    return kvc_loop_run_cmd(c, &cmd, CMD_WATCH_PROGRESS, NULL, err);
}

int64_t kvc_watch_next_revision(const kvc_watch *w)
{
    return w ? atomic_load(&((kvc_watch *)w)->next_rev) : 0;
}
