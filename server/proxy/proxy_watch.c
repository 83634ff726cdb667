/*
 * proxy_watch.c - the client side of the proxy's Watch: client streams, their watchers (own
 * watch ids), creates and cancels, the bounds, the slow client (docs/proxy.md, "Watch").
 * The upstream side (shared upstream watchers, fan-out, failover) is proxy_watch_up.c.
 *
 * Creates of one client stream are answered in order: while a watcher waits for the
 * upstream's Created, the stream's next requests are held (counted in --max-watchers).
 * A slow client cannot hold up the others: a send that would pass --max-send-buffer-bytes
 * ends only its stream with RESOURCE_EXHAUSTED "etcdserver: too many requests"
 * (kvd_proxy_refused_total{reason="client_send_buffer"}).
 *
 * Ownership and threads: everything here is the loop's (proxy_watch_int.h). A client stream is
 * freed as deferred work (s->dead) once no fan-out iterates over its watchers.
 */
#include "proxy/proxy_watch_int.h"

#include "common/etcd_errors.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* libkvclient sends at most this much of a "token" (kvc_call_md); etcd's tokens are far
 * shorter (simple: 16 random letters + "." + an index; JWT: a few hundred bytes) */
#define MAX_TOKEN_LEN 4095

typedef struct pw_msg {
    kv_list link;
    size_t len;
    uint8_t data[];
} pw_msg;

static void set_gauges(kv_proxy_watch *s)
{
    kv_metric_set(s->m_streams, s->n_streams);
    kv_metric_set(s->m_watchers, s->n_watchers + s->n_held);
}

void pw_cs_kill(pw_cs *cs, int code, const char *msg, int why)
{
    kv_proxy_watch *s = cs->s;
    if (cs->call) {
        kv_grpc_call *call = cs->call;
        cs->call = NULL;
        kv_grpc_call_set_data(call, NULL);
        if (why >= 0)
            kv_proxy_refuse(s->p, call, (kv_proxy_refused)why);
        else
            kv_grpc_call_finish(call, code, msg);
    }
    if (!cs->dead) {
        cs->dead = 1;
        kv_list_remove(&cs->dlink);
        kv_list_insert_tail(&s->dead, &cs->dlink);
    }
}

static void cs_free(pw_cs *cs)
{
    kv_proxy_watch *s = cs->s;
    kv_list *pos, *tmp;
    kv_list_foreach_safe(pos, tmp, &cs->watchers) {
        pw_w *w = kv_list_data(pos, pw_w, slink);
        kv_list_remove(&w->slink);
        pw_bc_detach(s, w);
        s->n_watchers--;
        free(w);
    }
    kv_list_foreach_safe(pos, tmp, &cs->held) {
        kv_list_remove(pos);
        s->n_held--;
        free(kv_list_data(pos, pw_msg, link));
    }
    kv_list_remove(&cs->dlink);
    s->n_streams--;
    set_gauges(s);
    free(cs->token);
    free(cs);
}

void pw_cs_send(pw_cs *cs, const uint8_t *msg, size_t len)
{
    if (!cs->call || cs->dead)
        return;
    if (kv_grpc_call_send(cs->call, msg, len) < 0)
        pw_cs_kill(cs, 0, NULL, KV_PROXY_REFUSED_CLIENT_SEND);
}

void pw_cs_send_resp(pw_cs *cs, const Etcdserverpb__WatchResponse *r)
{
    uint8_t small[256];
    size_t n = etcdserverpb__watch_response__get_packed_size(r);
    uint8_t *b = n <= sizeof small ? small : malloc(n);
    if (!b) {
        pw_cs_kill(cs, KV_GRPC_RESOURCE_EXHAUSTED, kv_etcd_err_msg(KV_ERR_TOO_MANY_REQUESTS), -1);
        return;
    }
    etcdserverpb__watch_response__pack(r, b);
    pw_cs_send(cs, b, n);
    if (b != small)
        free(b);
}

void pw_cs_unblock(pw_cs *cs, pw_w *w)
{
    if (cs->blocked != w)
        return;
    cs->blocked = NULL;
    if (!kv_list_empty(&cs->held) && !cs->dead) {
        kv_list_remove(&cs->dlink);
        kv_list_insert_tail(&cs->s->ready, &cs->dlink);
    }
}

void pw_w_end(pw_w *w)
{
    pw_cs *cs = w->cs;
    kv_list_remove(&w->slink);
    pw_bc_detach(cs->s, w);
    cs->s->n_watchers--;
    set_gauges(cs->s);
    pw_cs_unblock(cs, w);
    free(w);
}

static pw_w *find_w(pw_cs *cs, int64_t id)
{
    kv_list *pos;
    kv_list_foreach(pos, &cs->watchers) {
        pw_w *w = kv_list_data(pos, pw_w, slink);
        if (w->id == id)
            return w;
    }
    return NULL;
}

/* etcd's answer to a create it refuses: Created, Canceled, watch_id -1, the reason. */
static void refuse_create(pw_cs *cs, const char *reason)
{
    Etcdserverpb__WatchResponse r = ETCDSERVERPB__WATCH_RESPONSE__INIT;
    Etcdserverpb__ResponseHeader h = ETCDSERVERPB__RESPONSE_HEADER__INIT;
    r.header = &h;
    r.watch_id = -1;
    r.created = 1;
    r.canceled = 1;
    r.cancel_reason = (char *)reason;
    pw_cs_send_resp(cs, &r);
}

/* The size of c's create as it goes up (proxy_watch_up.c: the key and range, prev_kv and
 * progress_notify on, a start revision of at most 10 varint bytes). */
static size_t upstream_create_size(const Etcdserverpb__WatchCreateRequest *c)
{
    Etcdserverpb__WatchCreateRequest u = ETCDSERVERPB__WATCH_CREATE_REQUEST__INIT;
    Etcdserverpb__WatchRequest r = ETCDSERVERPB__WATCH_REQUEST__INIT;
    u.key = c->key;
    u.range_end = c->range_end;
    u.prev_kv = 1;
    u.progress_notify = 1;
    u.start_revision = -1; /* the longest varint */
    r.request_union_case = ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_CREATE_REQUEST;
    r.create_request = &u;
    return etcdserverpb__watch_request__get_packed_size(&r);
}

static void on_create(pw_cs *cs, const Etcdserverpb__WatchCreateRequest *c)
{
    kv_proxy_watch *s = cs->s;
    if (s->n_watchers + s->n_held >= s->p->cfg->max_watchers) {
        pw_cs_kill(cs, 0, NULL, KV_PROXY_REFUSED_WATCHERS);
        return;
    }
    /* --max-send-bytes, as for a unary request: a create a member would refuse must not go
     * up, where the member would end the shared stream (and the proxy re-create it, with
     * every other watcher on it, for ever) */
    size_t up = upstream_create_size(c);
    if (up > s->p->cfg->max_send_bytes) {
        char m[96];
        snprintf(m, sizeof m, "trying to send message larger than max (%zu vs. %zu)", up,
                 s->p->cfg->max_send_bytes);
        kv_metric_inc(s->p->m_too_large[0]);
        refuse_create(cs, m);
        return;
    }
    int64_t id = c->watch_id;
    if (id != 0 && find_w(cs, id)) {
        refuse_create(cs, kv_etcd_err_msg(KV_ERR_WATCHER_DUPLICATE_ID));
        return;
    }
    if (id == 0) { /* etcd's AutoWatchID: the next id not in use */
        if (cs->next_id <= cs->max_id)
            while (find_w(cs, cs->next_id))
                cs->next_id++;
        id = cs->next_id++;
    }
    pw_w *w = calloc(1, sizeof *w);
    if (!w) {
        pw_cs_kill(cs, KV_GRPC_RESOURCE_EXHAUSTED, kv_etcd_err_msg(KV_ERR_TOO_MANY_REQUESTS), -1);
        return;
    }
    if (id > cs->max_id)
        cs->max_id = id;
    w->cs = cs;
    w->id = id;
    kv_list_init(&w->blink);
    kv_list_insert_tail(&cs->watchers, &w->slink);
    s->n_watchers++;
    set_gauges(s);
    if (pw_bc_attach(s, w, c) < 0) {
        kv_list_remove(&w->slink);
        s->n_watchers--;
        free(w);
        pw_cs_kill(cs, KV_GRPC_RESOURCE_EXHAUSTED, kv_etcd_err_msg(KV_ERR_TOO_MANY_REQUESTS), -1);
        return;
    }
    if (!w->created)
        cs->blocked = w;
}

static void on_cancel_req(pw_cs *cs, int64_t id)
{
    pw_w *w = find_w(cs, id);
    if (!w) /* etcd answers only the cancel of a watcher it has */
        return;
    Etcdserverpb__WatchResponse r = ETCDSERVERPB__WATCH_RESPONSE__INIT;
    Etcdserverpb__ResponseHeader h = ETCDSERVERPB__RESPONSE_HEADER__INIT;
    h.cluster_id = w->bc->cluster_id;
    h.member_id = w->bc->member_id;
    h.raft_term = w->bc->raft_term;
    h.revision = w->bc->last_rev;
    r.header = &h;
    r.watch_id = id;
    r.canceled = 1;
    pw_w_end(w);
    pw_cs_send_resp(cs, &r);
}

/* etcd's answer to a WatchProgressRequest: one response, watch_id -1, whose header revision
 * every watcher of the stream has been sent all events up to. The proxy answers from what it
 * delivered: the lowest such revision over the stream's watchers (the member's current
 * revision may be higher). A stream without watchers gets no answer. */
static void on_progress_req(pw_cs *cs)
{
    int64_t rev = INT64_MAX;
    const pw_bc *any = NULL;
    kv_list *pos;
    kv_list_foreach(pos, &cs->watchers) {
        pw_w *w = kv_list_data(pos, pw_w, slink);
        const pw_bc *bc = w->bc;
        if (!w->created || !bc || !bc->established)
            return; /* not every watcher synced: etcd sends nothing either */
        if (bc->last_rev < rev)
            rev = bc->last_rev;
        any = bc;
    }
    if (!any)
        return;
    Etcdserverpb__WatchResponse r = ETCDSERVERPB__WATCH_RESPONSE__INIT;
    Etcdserverpb__ResponseHeader h = ETCDSERVERPB__RESPONSE_HEADER__INIT;
    h.cluster_id = any->cluster_id;
    h.member_id = any->member_id;
    h.raft_term = any->raft_term;
    h.revision = rev;
    r.header = &h;
    r.watch_id = -1;
    pw_cs_send_resp(cs, &r);
}

/* One request of cs, in order. */
static void handle(pw_cs *cs, const uint8_t *msg, size_t len)
{
    Etcdserverpb__WatchRequest *req = etcdserverpb__watch_request__unpack(NULL, len, msg);
    if (!req) {
        pw_cs_kill(cs, KV_GRPC_INVALID_ARGUMENT, "grpc: failed to unmarshal the received message",
                   -1);
        return;
    }
    switch (req->request_union_case) {
    case ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_CREATE_REQUEST: {
        kv_proxy_ns ns; /* --namespace: upstream watchers are shared in the members' keys */
        if (kv_proxy_ns_of(cs->s->p, &ns) &&
            kv_proxy_ns_watch_create(&ns, req->create_request) < 0) {
            pw_cs_kill(cs, KV_GRPC_RESOURCE_EXHAUSTED, kv_etcd_err_msg(KV_ERR_TOO_MANY_REQUESTS),
                       -1);
            break;
        }
        on_create(cs, req->create_request);
        break;
    }
    case ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_CANCEL_REQUEST:
        on_cancel_req(cs, req->cancel_request->watch_id);
        break;
    case ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_PROGRESS_REQUEST:
        on_progress_req(cs);
        break;
    default:
        break;
    }
    etcdserverpb__watch_request__free_unpacked(req, NULL);
}

static int hold(pw_cs *cs, const uint8_t *msg, size_t len)
{
    kv_proxy_watch *s = cs->s;
    if (s->n_watchers + s->n_held >= s->p->cfg->max_watchers) {
        pw_cs_kill(cs, 0, NULL, KV_PROXY_REFUSED_WATCHERS);
        return -ENOBUFS;
    }
    pw_msg *m = malloc(sizeof *m + len);
    if (!m) {
        pw_cs_kill(cs, KV_GRPC_RESOURCE_EXHAUSTED, kv_etcd_err_msg(KV_ERR_TOO_MANY_REQUESTS), -1);
        return -ENOMEM;
    }
    m->len = len;
    memcpy(m->data, msg, len);
    kv_list_insert_tail(&cs->held, &m->link);
    s->n_held++;
    set_gauges(s);
    return 0;
}

/* The deferred work of an entry point: streams unblocked run their held requests, ended
 * streams are freed. */
void pw_run_deferred(kv_proxy_watch *s)
{
    if (s->depth > 0)
        return;
    s->depth++;
    for (;;) {
        if (!kv_list_empty(&s->ready)) {
            pw_cs *cs = kv_list_data(s->ready.next, pw_cs, dlink);
            kv_list_remove(&cs->dlink);
            while (!cs->dead && !cs->blocked && !kv_list_empty(&cs->held)) {
                pw_msg *m = kv_list_data(cs->held.next, pw_msg, link);
                kv_list_remove(&m->link);
                s->n_held--;
                handle(cs, m->data, m->len);
                free(m);
            }
            if (cs->paused && !cs->dead && kv_list_empty(&cs->held) && cs->call) {
                cs->paused = 0;
                kv_grpc_call_resume_recv(cs->call); /* delivered from the loop, later */
            }
            set_gauges(s);
            continue;
        }
        if (!kv_list_empty(&s->dead)) {
            cs_free(kv_list_data(s->dead.next, pw_cs, dlink));
            continue;
        }
        break;
    }
    s->depth--;
}

void kv_proxy_watch_on_message(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    kv_proxy *p = kv_grpc_call_app(call);
    kv_proxy_watch *s = p->watch;
    pw_cs *cs = kv_grpc_call_data(call);
    if (!cs) {
        if (s->n_streams >= p->cfg->max_watch_streams) {
            kv_proxy_refuse(p, call, KV_PROXY_REFUSED_WATCH_STREAMS);
            return;
        }
        /* etcd auth: the upstream stream this client's watchers ride carries its token */
        const char *tok = kv_grpc_call_header(call, "token");
        if (tok && strlen(tok) > MAX_TOKEN_LEN) {
            kv_grpc_call_finish(call, KV_GRPC_UNAUTHENTICATED,
                                kv_etcd_err_msg(KV_ERR_INVALID_AUTH_TOKEN));
            return;
        }
        cs = calloc(1, sizeof *cs);
        if (cs && tok && *tok && !(cs->token = strdup(tok))) {
            free(cs);
            cs = NULL;
        }
        if (!cs) {
            kv_grpc_call_finish(call, KV_GRPC_RESOURCE_EXHAUSTED,
                                kv_etcd_err_msg(KV_ERR_TOO_MANY_REQUESTS));
            return;
        }
        const char *hl = kv_grpc_call_header(call, "hasleader");
        cs->hasleader = hl && strcmp(hl, "true") == 0;
        cs->s = s;
        cs->call = call;
        kv_list_init(&cs->watchers);
        kv_list_init(&cs->held);
        kv_list_init(&cs->dlink);
        kv_grpc_call_set_data(call, cs);
        s->n_streams++;
        set_gauges(s);
    }
    s->depth++;
    if (cs->blocked || !kv_list_empty(&cs->held)) {
        /* Held behind a create still waiting for its Created: one message is copied, and
         * the stream's input pauses, so a client cannot pile up copies (of up to 4 MiB each)
         * while its stream is blocked; the transport holds the rest under its bounds. */
        if (hold(cs, msg, len) == 0 && !cs->paused && cs->call) {
            cs->paused = 1;
            kv_grpc_call_pause_recv(cs->call);
        }
    } else {
        handle(cs, msg, len);
    }
    s->depth--;
    pw_run_deferred(s);
}

void kv_proxy_watch_on_half_close(kv_grpc_call *call)
{
    pw_cs *cs = kv_grpc_call_data(call);
    if (!cs) {
        kv_grpc_call_finish(call, KV_GRPC_OK, NULL);
        return;
    }
    pw_cs_kill(cs, KV_GRPC_OK, NULL, -1);
    pw_run_deferred(cs->s);
}

void kv_proxy_watch_on_cancel(kv_grpc_call *call)
{
    pw_cs *cs = kv_grpc_call_data(call);
    if (!cs)
        return;
    kv_proxy_watch *s = cs->s;
    cs->call = NULL;
    pw_cs_kill(cs, 0, NULL, -1);
    pw_run_deferred(s);
}

void kv_proxy_watch_on_event(kv_proxy *p, kv_proxy_ev *ev)
{
    kv_proxy_watch *s = p->watch;
    s->depth++;
    pw_up_on_event(s, ev);
    s->depth--;
    pw_run_deferred(s);
}

static void retry_closed(uv_handle_t *h)
{
    (void)h;
}

int kv_proxy_watch_init(kv_proxy *p)
{
    kv_proxy_watch *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    s->p = p;
    kv_list_init(&s->bcasts);
    kv_list_init(&s->ups);
    kv_list_init(&s->dead);
    kv_list_init(&s->ready);
    int rc = uv_timer_init(p->loop, &s->retry);
    if (rc < 0) {
        free(s);
        return rc;
    }
    s->retry.data = s;
    p->watch = s;
    kv_metrics *m = p->metrics;
    s->m_streams = kv_metrics_gauge(m, "kvd_proxy_watch_streams",
                                    "Client Watch streams (bound: --max-watch-streams).", NULL);
    s->m_watchers = kv_metrics_gauge(m, "kvd_proxy_watchers",
                                     "Client watchers, and their requests held behind a create "
                                     "(bound: --max-watchers).",
                                     NULL);
    s->m_bcasts = kv_metrics_gauge(m, "kvd_proxy_watch_upstream_watchers",
                                   "Upstream watchers, each shared by the client watchers of its "
                                   "key, range and options.",
                                   NULL);
    s->m_coalesced = kv_metrics_counter(m, "kvd_proxy_watch_coalesced_total",
                                        "Client watchers that joined an existing upstream "
                                        "watcher.",
                                        NULL);
    s->m_merged = kv_metrics_counter(m, "kvd_proxy_watch_merged_total",
                                     "Upstream watchers merged into another of their key and "
                                     "range that had delivered exactly as far (its receivers "
                                     "moved, it was canceled).",
                                     NULL);
    s->m_up_opened = kv_metrics_counter(m, "kvd_proxy_watch_upstream_streams_opened_total",
                                        "Upstream Watch streams opened.", NULL);
    s->m_up_streams = kv_metrics_gauge(m, "kvd_proxy_watch_upstream_streams",
                                       "Upstream Watch streams open.", NULL);
    s->m_resumed = kv_metrics_counter(m, "kvd_proxy_watch_resumed_total",
                                      "Upstream watchers re-created on a new upstream stream "
                                      "from their next revision (failover).",
                                      NULL);
    s->up_cap = p->cfg->max_watchers_per_upstream_stream;
    s->m_up_cap = kv_metrics_gauge(m, "kvd_proxy_watch_upstream_stream_cap",
                                   "Upstream watchers per new upstream Watch stream: "
                                   "--max-watchers-per-upstream-stream, or the members' "
                                   "--max-watchers-per-stream once one refused a create past it "
                                   "(back to the flag at each failover).",
                                   NULL);
    kv_metric_set(s->m_up_cap, s->up_cap);
    return 0;
}

void kv_proxy_watch_stop(kv_proxy *p)
{
    kv_proxy_watch *s = p->watch;
    if (!s)
        return;
    pw_up_stop(s);
    uv_timer_stop(&s->retry);
    uv_close((uv_handle_t *)&s->retry, retry_closed);
}

void kv_proxy_watch_free(kv_proxy *p)
{
    kv_proxy_watch *s = p->watch;
    if (!s)
        return;
    while (!kv_list_empty(&s->dead))
        cs_free(kv_list_data(s->dead.next, pw_cs, dlink));
    pw_up_free_all(s);
    free(s);
    p->watch = NULL;
}
