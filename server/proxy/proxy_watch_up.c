/*
 * proxy_watch_up.c - the upstream side of the proxy's Watch (docs/proxy.md, "Watch"):
 * upstream watchers shared by client watchers (etcd 3.4's grpcproxy watch_broadcast), upstream
 * Watch streams carrying up to --max-watchers-per-upstream-stream of them each (one stream
 * for up to 10,000 distinct upstream watchers by default), the fan-out of each upstream response to
 * every client watcher with its own watch_id, and the failover (re-created on the next member from
 * the next undelivered revision).
 *
 * Revisions. An upstream watcher knows how far it has delivered: last_rev (its Created's
 * header revision, the mod_revision of its last event, or the header revision of a progress
 * notification). A member sends all of a watcher's events of one revision in one response when
 * the watcher asked for no fragments (etcd's eventBatch never splits a revision, nor does kvd's
 * hub: mvcc/events.h), and an upstream watcher never asks for them: so the revision of a
 * response's last event is complete. A client watcher joins it when that cannot cost a gap or
 * a repeat:
 * - not yet established (its Created not received): same start_revision; the Created is
 *   the upstream's, relayed;
 * - established: start_revision 0 onto one that began at the current revision too, or one
 *   that began in the history and has shown it caught up (pw_bc.current: a progress
 *   notification, or an event at the response's header revision) (its Created is emulated
 *   with header revision last_rev: every later event follows), or
 *   start_revision > last_rev (events below it are dropped for that watcher). A
 *   start_revision <= last_rev would need history: own upstream watcher.
 * Two upstream watchers of one key that have delivered exactly as far merge (merge): the
 * receivers of the one that just got there move to the other, and it is canceled upstream.
 * Options that change the events (prev_kv, filters, progress_notify) are not part of the
 * sharing key, as in etcd's proxy: the upstream watcher asks prev_kv and progress
 * notifications always and no filter, and each receiver gets its own view (fan_out: one pack
 * per option set). A receiver that asked for fragments shares them too: the upstream watcher
 * asks none, and the proxy splits a large response for that receiver as a member would.
 * Streams: each carries at most --max-watchers-per-upstream-stream upstream watchers, or what
 * a kvd member took before it refused one more (its --max-watchers-per-stream: stream_full).
 * Failover: when the upstream stream ends, the learned limit goes back to the flag (the next
 * member may take more: cap_reset) and every upstream watcher is re-created on a new one
 * from last_rev + 1; a compacted revision comes back as etcd's compacted response and is
 * relayed to the receivers that needed it; the ones that joined ahead of it go on
 * (bc_compacted).
 *
 * Threads: loop only, except up_msg_io/up_end_io (libkvclient's I/O thread), which only post.
 */
#include "proxy/proxy_watch_int.h"
#include "common/fnv.h"

#include "common/clock.h"
#include "common/varint.h"
#include "pb/pb_fragment.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define WATCH_PATH "/etcdserverpb.Watch/Watch"
#define RETRY_MIN_MS 100
#define RETRY_MAX_MS 2000
#define PREFIX_MAX 11 /* tag + a 10-byte varint: the watch_id written before a packed body */
/* A receiver that asked for fragments gets a response of this size or more split (etcd's
 * default --max-request-bytes, where a member splits one: sendFragments) */
#define FRAGMENT_BYTES (1536u * 1024u)

/* ---- hashing ---- */

static uint64_t fnv(const uint8_t *p, size_t n)
{
    return kv_fnv1a64(p, n);
}

static uint64_t id_hash(int64_t id)
{
    uint64_t x = (uint64_t)id * 0x9E3779B97F4A7C15ULL;
    return x ^ (x >> 29);
}

/* Grows a chained table to twice its size (at least 64). next_of gives the chain field. */
static int tab_grow(pw_bc ***tab, size_t *cap, int by_id)
{
    size_t ncap = *cap ? *cap * 2 : 64;
    pw_bc **nt = calloc(ncap, sizeof *nt);
    if (!nt)
        return -ENOMEM;
    for (size_t i = 0; i < *cap; i++) {
        pw_bc *b = (*tab)[i];
        while (b) {
            pw_bc *next = by_id ? b->inext : b->knext;
            size_t j = (by_id ? id_hash(b->up_id) : b->khash) & (ncap - 1);
            if (by_id) {
                b->inext = nt[j];
            } else {
                b->knext = nt[j];
            }
            nt[j] = b;
            b = next;
        }
    }
    free(*tab);
    *tab = nt;
    *cap = ncap;
    return 0;
}

static int ktab_put(kv_proxy_watch *s, pw_bc *bc)
{
    if (s->n_k >= s->kcap && tab_grow(&s->ktab, &s->kcap, 0) < 0)
        return -ENOMEM;
    size_t j = bc->khash & (s->kcap - 1);
    bc->knext = s->ktab[j];
    s->ktab[j] = bc;
    bc->in_ktab = 1;
    s->n_k++;
    return 0;
}

static void ktab_del(kv_proxy_watch *s, pw_bc *bc)
{
    if (!bc->in_ktab)
        return;
    pw_bc **pp = &s->ktab[bc->khash & (s->kcap - 1)];
    while (*pp && *pp != bc)
        pp = &(*pp)->knext;
    if (*pp)
        *pp = bc->knext;
    bc->in_ktab = 0;
    s->n_k--;
}

static int itab_put(pw_up *u, pw_bc *bc)
{
    if (u->n_ids >= u->icap && tab_grow(&u->itab, &u->icap, 1) < 0)
        return -ENOMEM;
    size_t j = id_hash(bc->up_id) & (u->icap - 1);
    bc->inext = u->itab[j];
    u->itab[j] = bc;
    bc->has_id = 1;
    u->n_ids++;
    return 0;
}

static pw_bc *itab_get(pw_up *u, int64_t id)
{
    if (!u->icap)
        return NULL;
    for (pw_bc *b = u->itab[id_hash(id) & (u->icap - 1)]; b; b = b->inext)
        if (b->up_id == id)
            return b;
    return NULL;
}

static void itab_del(pw_up *u, pw_bc *bc)
{
    if (!bc->has_id)
        return;
    pw_bc **pp = &u->itab[id_hash(bc->up_id) & (u->icap - 1)];
    while (*pp && *pp != bc)
        pp = &(*pp)->inext;
    if (*pp)
        *pp = bc->inext;
    bc->has_id = 0;
    u->n_ids--;
}

/* ---- upstream watchers ---- */

static void up_forget(kv_proxy_watch *s, pw_up *u);

/* 1 if bc may ride u: the same auth token (or none) and the same hasleader. */
static int fits(const pw_up *u, const pw_bc *bc)
{
    const char *a = u->token, *b = bc->token;
    return u->hasleader == bc->hasleader && (a == b || (a && b && strcmp(a, b) == 0));
}

static void bc_free(pw_bc *bc)
{
    pw_up *u = bc->up;
    if (u && --u->n_bc == 0 && u->token && !u->ended)
        up_forget(u->s, u); /* a user's stream goes with its last watcher (token-less ones stay) */
    free(bc->token);
    free(bc->okey);
    free(bc->key);
    free(bc->end);
    free(bc);
}

static void gauge(kv_proxy_watch *s)
{
    kv_metric_set(s->m_bcasts, s->n_bcasts);
}

static void send_up_cancel(pw_up *u, int64_t id)
{
    Etcdserverpb__WatchCancelRequest c = ETCDSERVERPB__WATCH_CANCEL_REQUEST__INIT;
    Etcdserverpb__WatchRequest r = ETCDSERVERPB__WATCH_REQUEST__INIT;
    c.watch_id = id;
    r.request_union_case = ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_CANCEL_REQUEST;
    r.cancel_request = &c;
    uint8_t b[32];
    size_t n = etcdserverpb__watch_request__pack(&r, b);
    kvc_error e;
    /* a cancel that does not fit: the upstream watcher lives until the stream ends; its
     * responses find no receiver and are dropped */
    (void)kvc_bidi_send(u->b, b, n, &e);
}

/* Sends bc's create on u (from where it stands) and queues bc for its Created. 0, or
 * -ENOBUFS (u's send buffer is full, or half full for an established bc's), -E2BIG (the create is
 * larger than any stream's send buffer: --max-upstream-send-bytes) or -ENOMEM: not sent. */
static int bc_send_create(kv_proxy_watch *s, pw_bc *bc, pw_up *u)
{
    Etcdserverpb__WatchCreateRequest c = ETCDSERVERPB__WATCH_CREATE_REQUEST__INIT;
    Etcdserverpb__WatchRequest r = ETCDSERVERPB__WATCH_REQUEST__INIT;
    c.key.data = bc->key;
    c.key.len = bc->klen;
    c.range_end.data = bc->end;
    c.range_end.len = bc->elen;
    c.prev_kv = 1; /* every receiver's view is cut from the fullest one */
    c.progress_notify = 1;
    if (bc->established) {
        c.start_revision = bc->last_rev + 1;
    } else {
        c.start_revision = bc->start;
    }
    r.request_union_case = ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_CREATE_REQUEST;
    r.create_request = &c;
    size_t n = etcdserverpb__watch_request__get_packed_size(&r);
    uint8_t *b = malloc(n ? n : 1);
    if (!b)
        return -ENOMEM;
    etcdserverpb__watch_request__pack(&r, b);
    size_t max = s->p->cfg->max_upstream_send_bytes;
    if (max && n + 5 > max) { /* a gRPC message's 5-byte prefix: libkvclient's sendbuf */
        free(b);
        return -E2BIG;
    }
    size_t queued = bc->established ? kvc_bidi_queued(u->b) : 0;
    if (queued && max && queued + n + 5 > max / 2) {
        /* a resumed create (a failover sends them all at once) fills at most half of the
         * buffer: the rest stays for cancels and new creates, which are not retried */
        free(b);
        return -ENOBUFS;
    }
    kvc_error e;
    int rc = kvc_bidi_send(u->b, b, n, &e);
    free(b);
    if (rc == -KVC_RESOURCE_EXHAUSTED)
        return -ENOBUFS;
    /* -KVC_UNAVAILABLE: the stream ended; its end event re-creates bc on the next one */
    if (bc->established)
        kv_metric_inc(s->m_resumed);
    bc->up = u;
    u->n_bc++;
    kv_list_insert_tail(&u->creating, &bc->clink);
    return 0;
}

/* bc's create could not be sent: its client streams end (upstream send buffer). */
static void bc_refuse(pw_bc *bc)
{
    kv_list *pos;
    kv_list_foreach(pos, &bc->rcv) {
        pw_w *w = kv_list_data(pos, pw_w, blink);
        pw_cs_kill(w->cs, 0, NULL, KV_PROXY_REFUSED_UPSTREAM_SEND);
    }
}

static void place_all(kv_proxy_watch *s);
static int place(kv_proxy_watch *s, pw_bc *bc, pw_up **hint);

static void retry_cb(uv_timer_t *t)
{
    kv_proxy_watch *s = t->data;
    s->depth++;
    if (!s->p->stopping)
        place_all(s);
    s->depth--;
    pw_run_deferred(s);
}

static void retry_later(kv_proxy_watch *s)
{
    if (s->p->stopping)
        return;
    if (s->retry_ms < RETRY_MIN_MS)
        s->retry_ms = RETRY_MIN_MS;
    uv_timer_start(&s->retry, retry_cb, s->retry_ms, 0);
    s->retry_ms = s->retry_ms * 2 > RETRY_MAX_MS ? RETRY_MAX_MS : s->retry_ms * 2;
}

/* bc has no receiver left: cancel it upstream and free it (or, while its Created is awaited,
 * leave it as an orphan on its stream's creating queue). */
static void bc_drop(kv_proxy_watch *s, pw_bc *bc)
{
    ktab_del(s, bc);
    kv_list_remove(&bc->link);
    s->n_bcasts--;
    gauge(s);
    pw_up *u = bc->up;
    if (u && !u->ended) {
        if (bc->has_id) {
            send_up_cancel(u, bc->up_id);
            itab_del(u, bc);
        } else if (!kv_list_empty(&bc->clink)) {
            bc->orphan = 1;
            return;
        }
    }
    kv_list_remove(&bc->clink);
    bc_free(bc);
}

void pw_bc_detach(kv_proxy_watch *s, pw_w *w)
{
    pw_bc *bc = w->bc;
    if (!bc)
        return;
    w->bc = NULL;
    kv_list_remove(&w->blink);
    if (--bc->n_rcv == 0)
        bc_drop(s, bc);
}

/* The sharing key: hasleader, auth token, key, range_end (the options are the same for every
 * shared upstream watcher: pw_bc_attach). */
static int make_okey(pw_bc *bc)
{
    size_t tl = bc->token ? strlen(bc->token) : 0;
    size_t n = 1 + 10 + tl + 10 + bc->klen + bc->elen;
    bc->okey = malloc(n);
    if (!bc->okey)
        return -ENOMEM;
    uint8_t *p = bc->okey;
    *p++ = (uint8_t)bc->hasleader;
    p += kv_varint_put(p, tl);
    memcpy(p, bc->token ? bc->token : "", tl);
    p += tl;
    p += kv_varint_put(p, bc->klen);
    memcpy(p, bc->key, bc->klen);
    p += bc->klen;
    memcpy(p, bc->end, bc->elen);
    p += bc->elen;
    bc->oklen = (size_t)(p - bc->okey);
    bc->khash = fnv(bc->okey, bc->oklen);
    return 0;
}

/* May w (start revision start) join bc? Sets *nextrev. */
static int joinable(const pw_bc *bc, int64_t start, int64_t *nextrev)
{
    if (bc->orphan)
        return 0;
    if (!bc->established) {
        *nextrev = 0;
        return start == bc->start;
    }
    if (start == 0) { /* only onto a watcher at the current revision: one that began in the
                         history may still be catching up until it shows otherwise */
        *nextrev = bc->last_rev + 1;
        return bc->current;
    }
    if (start > bc->last_rev) {
        *nextrev = start;
        return 1;
    }
    return 0;
}

static void send_created(pw_w *w)
{
    pw_bc *bc = w->bc;
    Etcdserverpb__WatchResponse r = ETCDSERVERPB__WATCH_RESPONSE__INIT;
    Etcdserverpb__ResponseHeader h = ETCDSERVERPB__RESPONSE_HEADER__INIT;
    h.cluster_id = bc->cluster_id;
    h.member_id = bc->member_id;
    h.raft_term = bc->raft_term;
    h.revision = bc->last_rev;
    r.header = &h;
    r.watch_id = w->id;
    r.created = 1;
    w->created = 1;
    pw_cs_send_resp(w->cs, &r);
}

static void join(kv_proxy_watch *s, pw_bc *bc, pw_w *w, int64_t nextrev)
{
    w->bc = bc;
    w->nextrev = nextrev;
    kv_list_insert_tail(&bc->rcv, &w->blink);
    bc->n_rcv++;
    kv_metric_inc(s->m_coalesced);
    if (bc->established)
        send_created(w);
}

int pw_bc_attach(kv_proxy_watch *s, pw_w *w, const Etcdserverpb__WatchCreateRequest *c)
{
    pw_bc *bc = calloc(1, sizeof *bc);
    if (!bc)
        return -ENOMEM;
    kv_list_init(&bc->link);
    kv_list_init(&bc->clink);
    kv_list_init(&bc->rcv);
    for (size_t i = 0; i < c->n_filters; i++) {
        if (c->filters[i] == ETCDSERVERPB__WATCH_CREATE_REQUEST__FILTER_TYPE__NOPUT)
            w->noput = 1;
        else if (c->filters[i] == ETCDSERVERPB__WATCH_CREATE_REQUEST__FILTER_TYPE__NODELETE)
            w->nodelete = 1;
    }
    w->prev_kv = c->prev_kv;
    w->progress = c->progress_notify;
    w->fragment = c->fragment;
    bc->start = c->start_revision;
    bc->current = bc->start == 0;
    bc->klen = c->key.len;
    bc->elen = c->range_end.len;
    bc->key = malloc(bc->klen ? bc->klen : 1);
    bc->end = malloc(bc->elen ? bc->elen : 1);
    if (!bc->key || !bc->end)
        goto nomem;
    if (w->cs->token && !(bc->token = strdup(w->cs->token)))
        goto nomem;
    bc->hasleader = w->cs->hasleader;
    if (bc->klen)
        memcpy(bc->key, c->key.data, bc->klen);
    if (bc->elen)
        memcpy(bc->end, c->range_end.data, bc->elen);
    if (make_okey(bc) < 0)
        goto nomem;
    if (s->kcap) {
        for (pw_bc *o = s->ktab[bc->khash & (s->kcap - 1)]; o; o = o->knext) {
            int64_t nextrev;
            if (o->oklen == bc->oklen && memcmp(o->okey, bc->okey, bc->oklen) == 0 &&
                joinable(o, c->start_revision, &nextrev)) {
                bc_free(bc);
                join(s, o, w, nextrev);
                return 0;
            }
        }
    }
    if (ktab_put(s, bc) < 0)
        goto nomem;
    kv_list_insert_tail(&s->bcasts, &bc->link);
    s->n_bcasts++;
    gauge(s);
    w->bc = bc;
    w->nextrev = 0;
    kv_list_insert_tail(&bc->rcv, &w->blink);
    bc->n_rcv = 1;
    if (!uv_is_active((uv_handle_t *)&s->retry)) { /* else the retry places it */
        pw_up *u = NULL;
        (void)place(s, bc, &u);
    }
    return 0;
nomem:
    bc_free(bc);
    return -ENOMEM;
}

/* ---- the upstream stream ---- */

static void up_msg_io(void *arg, const uint8_t *msg, size_t len)
{
    pw_up *u = arg;
    kv_proxy_ev *ev = kv_proxy_ev_new(KV_PROXY_EV_WATCH_MSG, u, 0, msg, len);
    if (!ev) /* out of memory: end the stream (failover resumes) rather than lose an event */
        ev = kv_proxy_ev_new(KV_PROXY_EV_WATCH_END, u, KV_GRPC_RESOURCE_EXHAUSTED, "", 0);
    if (ev)
        kv_proxy_bridge_post(&u->s->p->bridge, ev);
}

static void up_end_io(void *arg, int status, const kvc_error *err)
{
    pw_up *u = arg;
    const char *m = err ? err->message : "";
    kv_proxy_ev *ev = kv_proxy_ev_new(KV_PROXY_EV_WATCH_END, u,
                                      status == 0 ? 0 : (err ? err->code : -status), m, strlen(m));
    if (ev)
        kv_proxy_bridge_post(&u->s->p->bridge, ev);
}

/* A new upstream stream for bc's kind (its auth token, or none; its hasleader), or NULL (a
 * retry is scheduled). */
static pw_up *up_open(kv_proxy_watch *s, const pw_bc *bc)
{
    const char *token = bc->token;
    pw_up *u = calloc(1, sizeof *u);
    if (!u || (token && !(u->token = strdup(token)))) {
        free(u);
        retry_later(s);
        return NULL;
    }
    u->s = s;
    u->cap = s->up_cap;
    kv_list_init(&u->creating);
    kvc_error e;
    /* a token-less stream sends no token at all (the proxy's upstream client has none) */
    kvc_call_md md = {.auth_token = token ? token : "", .require_leader = bc->hasleader};
    u->hasleader = bc->hasleader;
    if (kvc_bidi_open_md(s->p->up, WATCH_PATH, s->p->cfg->max_upstream_send_bytes, &md, up_msg_io,
                         up_end_io, u, &u->b, &e) != 0) {
        free(u->token);
        free(u);
        retry_later(s);
        return NULL;
    }
    u->opened_ms = kv_mono_ms();
    kv_list_insert_tail(&s->ups, &u->link);
    s->n_ups++;
    kv_metric_inc(s->m_up_opened);
    kv_metric_set(s->m_up_streams, s->n_ups);
    return u;
}

/* Sends bc's create on a stream with room (--max-watchers-per-upstream-stream; *hint first),
 * opening one if none has. 0, or -EAGAIN: no stream could be opened, or bc was established
 * and the stream's send buffer is full (a retry is scheduled and will place it). A failover
 * re-sends every upstream watcher at once, which may be more than --max-upstream-send-bytes:
 * the ones past it wait for the buffer to drain, and their clients keep their streams. A new
 * upstream watcher that does not fit is refused (its clients' streams end: the overload
 * answer), as is one whose create could never fit. */
static int place(kv_proxy_watch *s, pw_bc *bc, pw_up **hint)
{
    pw_up *u = *hint;
    if (!u || u->ended || u->n_bc >= u->cap || !fits(u, bc)) {
        u = NULL;
        kv_list *q;
        kv_list_foreach(q, &s->ups) {
            pw_up *c = kv_list_data(q, pw_up, link);
            if (c->n_bc < c->cap && fits(c, bc)) {
                u = c;
                break;
            }
        }
        if (!u && !(u = up_open(s, bc)))
            return -EAGAIN; /* retried later */
    }
    *hint = u;
    int rc = bc_send_create(s, bc, u);
    if (rc == -ENOBUFS && bc->established) {
        retry_later(s);
        return -EAGAIN;
    }
    if (rc < 0)
        bc_refuse(bc); /* its streams end (deferred); bc goes with its last receiver */
    return 0;
}

/* Places every upstream watcher on no stream (those of an ended stream: from their next
 * revision). */
static void place_all(kv_proxy_watch *s)
{
    pw_up *u = NULL;
    int placed = 0;
    kv_list *pos;
    kv_list_foreach(pos, &s->bcasts) {
        pw_bc *bc = kv_list_data(pos, pw_bc, link);
        if (bc->up)
            continue;
        if (place(s, bc, &u) < 0) {
            if (placed) { /* the buffer drains: come back soon, not after a long back-off */
                s->retry_ms = RETRY_MIN_MS;
                retry_later(s);
            }
            return;
        }
        placed++;
    }
}

/* u is done: no more of its events are handled. Orphans waiting on it are freed; the other
 * upstream watchers forget their id on it. */
static void up_forget(kv_proxy_watch *s, pw_up *u)
{
    u->ended = 1;
    kv_list_remove(&u->link);
    s->n_ups--;
    kv_metric_set(s->m_up_streams, s->n_ups);
    while (!kv_list_empty(&u->creating)) {
        pw_bc *bc = kv_list_data(u->creating.next, pw_bc, clink);
        kv_list_remove(&bc->clink);
        bc->up = NULL;
        if (bc->orphan)
            bc_free(bc);
    }
    kv_list *pos;
    kv_list_foreach(pos, &s->bcasts) {
        pw_bc *bc = kv_list_data(pos, pw_bc, link);
        if (bc->up == u) {
            bc->up = NULL;
            bc->has_id = 0;
            bc->inext = NULL;
        }
    }
    free(u->itab);
    u->itab = NULL;
    u->icap = u->n_ids = 0;
    kvc_bidi_free(u->b); /* synchronous: every event of u is in the bridge now */
    u->b = NULL;
    kv_proxy_ev *ev = kv_proxy_ev_new(KV_PROXY_EV_WATCH_FREE, u, 0, "", 0);
    if (ev)
        kv_proxy_bridge_post(&s->p->bridge, ev);
    /* else: u leaks (out of memory), never a use after free */
}

/* A failover: u's upstream watchers go to a new stream, which libkvclient opens on its next
 * endpoint when the connection was lost (every stream of that connection ends at once), so
 * maybe on a member with a higher --max-watchers-per-stream than the one learned. Streams
 * opened from now on carry the flag's number again; a lower limit of the new member is
 * learned again from its first refusal (stream_full). An end that moves no connection (a
 * member ended only u) costs that one refusal. The ends of a lost connection's streams all
 * reach the loop before any answer on the next connection (one bridge, in order), so a late
 * one does not undo what the new member taught. */
static void cap_reset(kv_proxy_watch *s)
{
    s->up_cap = s->p->cfg->max_watchers_per_upstream_stream;
    kv_metric_set(s->m_up_cap, s->up_cap);
}

static void up_end(kv_proxy_watch *s, pw_up *u)
{
    uint64_t lived = kv_mono_ms() - u->opened_ms;
    up_forget(s, u);
    cap_reset(s); /* before the streams for the next member are opened (here or by the retry) */
    if (kv_list_empty(&s->bcasts) || s->p->stopping)
        return;
    if (lived >= 1000) {
        s->retry_ms = RETRY_MIN_MS;
        if (!uv_is_active((uv_handle_t *)&s->retry))
            place_all(s);
    } else {
        retry_later(s);
    }
}

/* Every receiver of bc gets r with its own id (-1 for one whose Created was not sent: a
 * refused create) and ends; bc goes with the last one. */
static void bc_end_all(kv_proxy_watch *s, pw_bc *bc, Etcdserverpb__WatchResponse *r)
{
    (void)s;
    if (bc->up && !bc->up->ended)
        itab_del(bc->up, bc); /* ended upstream: no cancel to send */
    int last;
    do {
        pw_w *w = kv_list_data(bc->rcv.next, pw_w, blink);
        last = bc->n_rcv == 1;
        r->watch_id = w->created ? w->id : -1;
        pw_cs_send_resp(w->cs, r);
        pw_w_end(w);
    } while (!last);
}

/* bc's upstream watcher was canceled as compacted (r->compact_revision): the member had
 * compacted revision last_rev + 1, which the upstream watcher asked for after a failover, or
 * which it had not sent yet. A receiver that joined ahead of bc (nextrev at or above the
 * compacted revision: it asked for no event below it) is not compacted, as its own watcher on
 * the member would not be: bc goes on for those, re-created from the lowest of their
 * nextrev. The others get r and end. etcd 3.4's proxy cancels them all. */
static void bc_compacted(kv_proxy_watch *s, pw_bc *bc, Etcdserverpb__WatchResponse *r)
{
    int64_t from = 0;
    kv_list *pos, *nx;
    kv_list_foreach(pos, &bc->rcv) {
        pw_w *w = kv_list_data(pos, pw_w, blink);
        if (w->created && w->nextrev >= r->compact_revision && (!from || w->nextrev < from))
            from = w->nextrev;
    }
    pw_up *u = bc->up;
    /* A member keeps a compacted watcher's id (and, kvd, its place in the stream's
     * --max-watchers-per-stream) until the client cancels it, as etcd does. */
    if (u && !u->ended && bc->has_id)
        send_up_cancel(u, bc->up_id);
    if (!bc->established || from == 0) {
        bc_end_all(s, bc, r);
        return;
    }
    if (u && !u->ended)
        itab_del(u, bc);
    if (u)
        u->n_bc--;
    bc->up = NULL;
    bc->last_rev = from - 1;
    bc->current = 0; /* it catches up from the history again */
    bc->n_rcv++;     /* bc stays while the compacted receivers leave */
    for (pos = bc->rcv.next; pos != &bc->rcv; pos = nx) {
        nx = pos->next;
        pw_w *w = kv_list_data(pos, pw_w, blink);
        if (w->created && w->nextrev >= r->compact_revision)
            continue; /* a member compacts a watcher below the compacted revision only */
        r->watch_id = w->created ? w->id : -1;
        pw_cs_send_resp(w->cs, r);
        pw_w_end(w);
    }
    bc->n_rcv--;
    if (!uv_is_active((uv_handle_t *)&s->retry)) { /* else the retry places it */
        pw_up *hint = u && !u->ended ? u : NULL;
        (void)place(s, bc, &hint); /* -EAGAIN: a retry is scheduled and places it */
    }
    if (u && !u->ended && u->n_bc == 0 && u->token && bc->up != u)
        up_forget(s, u); /* a user's stream goes with its last watcher, as in bc_free */
}

static void save_header(pw_bc *bc, const Etcdserverpb__WatchResponse *r)
{
    if (!r->header)
        return;
    bc->cluster_id = r->header->cluster_id;
    bc->member_id = r->header->member_id;
    bc->raft_term = r->header->raft_term;
}

/* A kvd member refused bc's create on u because u holds its --max-watchers-per-stream
 * ("kvd: too many watchers on this stream (--max-watchers-per-stream N)"). If the member took
 * at least one watcher on u, u and every stream opened later (until a failover: cap_reset)
 * carry at most as many as it took (s->up_cap; the creates still queued behind bc on u are refused
 * the same way and move too), and bc is sent on another stream: 1. Otherwise 0 (the refusal is
 * relayed). bc has left u->creating. etcd 3.4's members have no such limit. */
static int stream_full(kv_proxy_watch *s, pw_up *u, pw_bc *bc, const Etcdserverpb__WatchResponse *r)
{
    static const char full[] = "kvd: too many watchers on this stream";
    if (!r->cancel_reason || strncmp(r->cancel_reason, full, sizeof full - 1) != 0)
        return 0;
    if (!u->learned) { /* the first refusal on u; the ones queued behind it just move */
        uint32_t behind = 0;
        kv_list *pos;
        kv_list_foreach(pos, &u->creating)
            behind++;
        if (u->n_bc < 1 + behind + 1)
            return 0; /* the member took none on u: no stream would do better */
        uint32_t took = u->n_bc - 1 - behind;
        u->learned = 1;
        if (took < u->cap)
            u->cap = took;
        if (took < s->up_cap) {
            s->up_cap = took;
            kv_metric_set(s->m_up_cap, took);
        }
    }
    u->n_bc--;
    bc->up = NULL;
    if (!uv_is_active((uv_handle_t *)&s->retry)) { /* else the retry places it */
        pw_up *hint = NULL;
        (void)place(s, bc, &hint); /* -EAGAIN: a retry is scheduled and places it */
    }
    return 1;
}

static void on_created(kv_proxy_watch *s, pw_up *u, Etcdserverpb__WatchResponse *r)
{
    if (kv_list_empty(&u->creating))
        return;
    pw_bc *bc = kv_list_data(u->creating.next, pw_bc, clink);
    kv_list_remove(&bc->clink);
    if (bc->orphan) {
        if (!r->canceled && r->watch_id >= 0)
            send_up_cancel(u, r->watch_id);
        bc_free(bc);
        return;
    }
    if ((r->canceled || r->watch_id < 0) && stream_full(s, u, bc, r))
        return; /* placed on another stream */
    if (r->canceled || r->watch_id < 0) {
        bc_end_all(s, bc, r);
        return;
    }
    bc->up_id = r->watch_id;
    if (itab_put(u, bc) < 0) { /* out of memory: its receivers end */
        bc_refuse(bc);
        return;
    }
    save_header(bc, r);
    if (bc->established)
        return; /* resumed: its receivers have their Created already */
    bc->established = 1;
    /* from the current revision: every event after the Created's header revision follows;
     * from a start revision: nothing is delivered yet below it (the history comes next) */
    bc->last_rev = bc->start ? bc->start - 1 : (r->header ? r->header->revision : 0);
    kv_list *pos;
    kv_list_foreach(pos, &bc->rcv) {
        pw_w *w = kv_list_data(pos, pw_w, blink);
        if (w->created)
            continue;
        w->created = 1;
        r->watch_id = w->id;
        pw_cs_send_resp(w->cs, r);
        pw_cs_unblock(w->cs, w);
    }
}

static int64_t ev_rev(const Mvccpb__Event *e)
{
    return e->kv ? e->kv->mod_revision : 0;
}

/* What receiver w sees of r's events: those at or above `nextrev` that its filters keep,
 * with prev_kv only if it asked for it (the upstream watcher always asks: docs/proxy.md,
 * "Watch"). Fills v (a copy of r whose events point into ptrs, and into copies when prev_kv
 * is dropped); ptrs and copies have room for r->n_events. Returns the events kept. */
static size_t view(const pw_w *w, const Etcdserverpb__WatchResponse *r, int64_t nextrev,
                   Etcdserverpb__WatchResponse *v, Mvccpb__Event **ptrs, Mvccpb__Event *copies)
{
    size_t k = 0;
    for (size_t i = 0; i < r->n_events; i++) {
        Mvccpb__Event *e = r->events[i];
        if (ev_rev(e) < nextrev)
            continue;
        if (e->type == MVCCPB__EVENT__EVENT_TYPE__PUT ? w->noput : w->nodelete)
            continue;
        if (!w->prev_kv && e->prev_kv) {
            copies[k] = *e;
            copies[k].prev_kv = NULL;
            e = &copies[k];
        }
        ptrs[k++] = e;
    }
    *v = *r;
    v->events = ptrs;
    v->n_events = k;
    return k;
}

/* One packed form of a response per receiver option set (prev_kv, noput, nodelete): built
 * the first time a receiver needs it, shared by every receiver with the same options. */
#define N_FORMS 8
typedef struct form {
    uint8_t *buf; /* PREFIX_MAX bytes of room, then the packed body */
    size_t body;
    int state; /* 0: not built; 1: built; 2: nothing for these receivers; -1: out of memory */
} form;

static unsigned form_of(const pw_w *w)
{
    return (unsigned)(w->prev_kv | w->noput << 1 | w->nodelete << 2);
}

static void form_build(form *f, const pw_w *w, const Etcdserverpb__WatchResponse *r)
{
    size_t n = r->n_events ? r->n_events : 1;
    Mvccpb__Event **ptrs = malloc(n * sizeof *ptrs);
    Mvccpb__Event *copies = malloc(n * sizeof *copies);
    f->state = -1;
    if (!ptrs || !copies)
        goto out;
    Etcdserverpb__WatchResponse v;
    if (view(w, r, 0, &v, ptrs, copies) == 0 && r->n_events) {
        f->state = 2; /* every event filtered out: nothing is sent (as etcd's proxy) */
        goto out;
    }
    f->body = etcdserverpb__watch_response__get_packed_size(&v);
    f->buf = malloc(PREFIX_MAX + f->body);
    if (!f->buf)
        goto out;
    etcdserverpb__watch_response__pack(&v, f->buf + PREFIX_MAX);
    f->state = 1;
out:
    free(ptrs);
    free(copies);
}

/* Sends v (w's view, watch_id set) to w: in one message, or, when w asked for fragments and
 * v packs to FRAGMENT_BYTES or more with 2 events or more, as etcd's sendFragments splits it
 * (etcd's default --max-request-bytes): as many events as fit under it (at least one) per
 * message, fragment set on all but the last. */
static void send_fragmented(pw_w *w, Etcdserverpb__WatchResponse *v)
{
    if (!w->fragment || v->n_events < 2 ||
        etcdserverpb__watch_response__get_packed_size(v) < FRAGMENT_BYTES) {
        pw_cs_send_resp(w->cs, v);
        return;
    }
    Etcdserverpb__WatchResponse part = *v;
    Mvccpb__Event **all = v->events;
    size_t n = v->n_events, idx = 0;
    part.n_events = 0;
    part.fragment = 1;
    size_t base = etcdserverpb__watch_response__get_packed_size(&part);
    while (idx < n && w->cs->call) {
        size_t k = kv_pb_fragment_events(all + idx, n - idx, base, FRAGMENT_BYTES);
        part.events = all + idx;
        part.n_events = k;
        idx += k;
        part.fragment = idx < n;
        pw_cs_send_resp(w->cs, &part);
    }
}

/* w's own view of r (events from w->nextrev when `from_next`, else all), packed for it
 * alone: a receiver that joined at a later revision, or one that asked for fragments of a
 * large response. */
static void send_view(pw_w *w, Etcdserverpb__WatchResponse *r, int from_next)
{
    Mvccpb__Event **ptrs = malloc(r->n_events * sizeof *ptrs);
    Mvccpb__Event *copies = malloc(r->n_events * sizeof *copies);
    if (!ptrs || !copies) {
        pw_cs_kill(w->cs, KV_GRPC_RESOURCE_EXHAUSTED, "etcdserver: too many requests", -1);
    } else {
        Etcdserverpb__WatchResponse v;
        if (view(w, r, from_next ? w->nextrev : 0, &v, ptrs, copies) > 0) {
            v.watch_id = w->id;
            send_fragmented(w, &v);
        }
    }
    free(ptrs);
    free(copies);
}

static void fan_out(pw_bc *bc, Etcdserverpb__WatchResponse *r)
{
    r->watch_id = 0; /* packed without it; each receiver's is written in front */
    form forms[N_FORMS] = {{0}};
    int64_t first = r->n_events ? ev_rev(r->events[0]) : 0;
    int64_t lastev = r->n_events ? ev_rev(r->events[r->n_events - 1]) : 0;
    kv_list *pos;
    kv_list_foreach(pos, &bc->rcv) {
        pw_w *w = kv_list_data(pos, pw_w, blink);
        if (!w->created || !w->cs->call)
            continue;
        if (!r->n_events && !w->progress)
            continue; /* a progress notification: only for those who asked */
        if (r->n_events && w->nextrev > first) {
            send_view(w, r, 1);
        } else {
            form *f = &forms[form_of(w)];
            if (f->state == 0)
                form_build(f, w, r);
            if (f->state == -1) { /* out of memory: the stream ends rather than miss events */
                pw_cs_kill(w->cs, KV_GRPC_RESOURCE_EXHAUSTED, "etcdserver: too many requests", -1);
            } else if (f->state == 1 && w->fragment && f->body >= FRAGMENT_BYTES) {
                send_view(w, r, 0); /* rare: its own copy, split */
            } else if (f->state == 1) {
                uint8_t *b = f->buf + PREFIX_MAX;
                uint8_t pre[PREFIX_MAX];
                pre[0] = 0x10; /* field 2 (watch_id), varint */
                size_t n = 1 + kv_varint_put(pre + 1, (uint64_t)w->id);
                memcpy(b - n, pre, n);
                pw_cs_send(w->cs, b - n, n + f->body);
            }
        }
        if (r->n_events && lastev >= w->nextrev)
            w->nextrev = 0;
    }
    for (int i = 0; i < N_FORMS; i++)
        free(forms[i].buf);
}

/* Two upstream watchers of one key, range, token and hasleader that have delivered exactly
 * as far (the same last_rev: the same prefix of one event stream) deliver the same events
 * from there on. So once bc reaches where another one stands, bc's receivers move to it (each
 * keeps its own nextrev and options) and bc is canceled upstream: etcd's proxy merges
 * broadcasts the same way (watch_broadcasts.go coalesce), there only while the one merged has
 * fewer than 5 receivers. Neither may be between streams. */
static void merge(kv_proxy_watch *s, pw_bc *bc)
{
    if (!bc->has_id || !s->kcap)
        return;
    for (pw_bc *o = s->ktab[bc->khash & (s->kcap - 1)]; o; o = o->knext) {
        if (o == bc || o->orphan || !o->has_id || o->last_rev != bc->last_rev ||
            o->oklen != bc->oklen || memcmp(o->okey, bc->okey, bc->oklen) != 0)
            continue;
        while (!kv_list_empty(&bc->rcv)) {
            pw_w *w = kv_list_data(bc->rcv.next, pw_w, blink);
            kv_list_remove(&w->blink);
            kv_list_insert_tail(&o->rcv, &w->blink);
            w->bc = o;
            o->n_rcv++;
        }
        bc->n_rcv = 0;
        o->current |= bc->current;
        kv_metric_inc(s->m_merged);
        bc_drop(s, bc);
        return;
    }
}

static void on_response(kv_proxy_watch *s, pw_up *u, Etcdserverpb__WatchResponse *r)
{
    pw_bc *bc = itab_get(u, r->watch_id);
    if (!bc)
        return; /* canceled by the proxy: its last responses are dropped */
    save_header(bc, r);
    if (r->compact_revision) {
        bc_compacted(s, bc, r);
        return;
    }
    if (r->canceled) { /* ended by the member */
        bc_end_all(s, bc, r);
        return;
    }
    /* the last event's revision is complete (see the top of this file) */
    if (r->n_events && ev_rev(r->events[r->n_events - 1]) > bc->last_rev)
        bc->last_rev = ev_rev(r->events[r->n_events - 1]);
    if (!r->n_events && !r->fragment && r->header && r->header->revision >= bc->last_rev) {
        bc->last_rev = r->header->revision; /* progress: everything up to it was sent */
        bc->current = 1;                    /* a member sends one only to a synced watcher */
    }
    /* An event at the header revision (the member's current one, for catch-up responses as
     * for live ones): every event up to it was sent, so the watcher is caught up. */
    if (r->n_events && r->header && ev_rev(r->events[r->n_events - 1]) == r->header->revision)
        bc->current = 1;
    fan_out(bc, r);
    merge(s, bc);
}

static void up_refused(kv_proxy_watch *s, pw_up *u, int code, const char *msg);

static void up_msg(kv_proxy_watch *s, pw_up *u, const uint8_t *msg, size_t len)
{
    char m[96];
    if (kv_proxy_recv_too_big(s->p, len, m, sizeof m)) {
        /* --max-recv-bytes: every client stream on u would get this message, and opening u
         * again would only meet it again: they end with grpc-go's error (etcd's proxy
         * retries for ever and its watchers hear nothing) */
        up_refused(s, u, KV_GRPC_RESOURCE_EXHAUSTED, m);
        return;
    }
    Etcdserverpb__WatchResponse *r = etcdserverpb__watch_response__unpack(NULL, len, msg);
    if (!r) { /* a message we cannot read: resume elsewhere rather than lose it */
        up_end(s, u);
        return;
    }
    kv_proxy_ns ns; /* --namespace: stripped once, before the one pack of the fan-out */
    if (kv_proxy_ns_of(s->p, &ns))
        kv_proxy_ns_watch_response(&ns, r);
    if (r->created)
        on_created(s, u, r);
    else
        on_response(s, u, r);
    etcdserverpb__watch_response__free_unpacked(r, NULL);
}

/* A member's answer to a stream's token that opening the stream again would not change: an
 * invalid or expired token, a user without permission (etcd: UNAUTHENTICATED "etcdserver:
 * invalid auth token", PERMISSION_DENIED, INVALID_ARGUMENT "etcdserver: user name is
 * empty"). */
static int auth_refusal(int code)
{
    return code == KV_GRPC_UNAUTHENTICATED || code == KV_GRPC_PERMISSION_DENIED ||
           code == KV_GRPC_INVALID_ARGUMENT;
}

/* Is the end of u an answer to its clients rather than a failure to fail over from? An auth
 * refusal of its token, or "etcdserver: no leader" on a hasleader stream (the member has
 * had no leader for 3 election timeouts: etcd ends such client streams, and so does its
 * proxy). */
static int final_end(const pw_up *u, int code, const char *msg)
{
    if (u->token && auth_refusal(code))
        return 1;
    return u->hasleader && code == KV_GRPC_UNAVAILABLE && msg &&
           strcmp(msg, "etcdserver: no leader") == 0;
}

/* u was ended by a final answer (final_end): its client streams end with the member's status
 * (their clients authenticate again, or wait for a leader, and watch again, as after the
 * member's own answer), instead of being placed on a new stream of the same kind. */
static void up_refused(kv_proxy_watch *s, pw_up *u, int code, const char *msg)
{
    kv_list *pos, *r;
    kv_list_foreach(pos, &s->bcasts) {
        pw_bc *bc = kv_list_data(pos, pw_bc, link);
        if (bc->up != u)
            continue;
        kv_list_foreach(r, &bc->rcv) {
            pw_w *w = kv_list_data(r, pw_w, blink);
            pw_cs_kill(w->cs, code, msg, -1);
        }
    }
    up_forget(s, u); /* the killed streams' watchers go in the deferred work */
}

void pw_up_on_event(kv_proxy_watch *s, kv_proxy_ev *ev)
{
    pw_up *u = ev->target;
    switch (ev->kind) {
    case KV_PROXY_EV_WATCH_MSG:
        if (!u->ended)
            up_msg(s, u, ev->buf, ev->len);
        break;
    case KV_PROXY_EV_WATCH_END:
        if (!u->ended && final_end(u, ev->code, (const char *)ev->buf))
            up_refused(s, u, ev->code, (const char *)ev->buf);
        else if (!u->ended)
            up_end(s, u);
        break;
    case KV_PROXY_EV_WATCH_FREE:
        free(u->token);
        free(u);
        break;
    }
    kv_proxy_ev_free(ev);
}

void pw_up_stop(kv_proxy_watch *s)
{
    while (!kv_list_empty(&s->ups))
        up_forget(s, kv_list_data(s->ups.next, pw_up, link));
}

void pw_up_free_all(kv_proxy_watch *s)
{
    while (!kv_list_empty(&s->bcasts)) {
        pw_bc *bc = kv_list_data(s->bcasts.next, pw_bc, link);
        kv_list_remove(&bc->link);
        kv_list_remove(&bc->clink);
        bc_free(bc);
    }
    free(s->ktab);
    s->ktab = NULL;
}
