/*
 * proxy_lease.c - LeaseKeepAlive folding (docs/proxy.md, "The flow of a renewal").
 *
 * Every client LeaseKeepAlive stream of the proxy feeds ONE upstream LeaseKeepAlive stream
 * (a kvc_bidi on the proxy's upstream connection). A client request for lease L registers
 * the stream as a waiter of L. At the end of the loop turn (a uv_check handle), or with
 * --renewal-batch-delay that long after the batch's first request (a timer), every lease
 * with new waiters goes up once, in one batch, whatever the number of clients that asked.
 * The leader's LeaseKeepAliveResponse for L is relayed byte for byte to each stream that
 * waited on that renewal; the proxy never answers from its own idea of a TTL and keeps no
 * expiry state: a lease is known here only while someone waits for its answer.
 *
 * A request that arrives while L's renewal is already in flight waits for the next one
 * (`later`), so each answer a client gets is for a renewal sent after its request.
 * When the upstream stream ends (member died, failover, drain), renewals in flight are
 * re-sent once on a new stream (libkvclient has moved to the next endpoint); the waiters of
 * a renewal lost twice are dropped unanswered (their clients send again on their own
 * schedule). Client streams are never ended by an upstream failure.
 * A hung member (stopped, silent, half-open TCP) ends nothing by itself: when renewals have
 * been in flight for --upstream-answer-timeout with nothing at all received on the stream,
 * the proxy gives up that connection (kvc_bidi_failover): libkvclient moves to the next
 * endpoint and the stream's end re-sends the renewals as above (kvd_proxy_upstream_hung_total).
 *
 * Ownership: ka_client (one per client stream) is reference counted: the call's reference
 * until the call is finished or cancelled, one per waiting slot. lease_ent is freed as soon
 * as nothing waits on it and nothing is in flight. Loop thread only, except the two
 * libkvclient callbacks at the bottom (I/O thread), which only post to the bridge.
 * Bounds: --max-pending-renewals waiting slots over all leases (kvd_proxy_pending_renewals),
 * --max-pending-renewals-per-stream of them for one client stream, so that one client cannot
 * take every slot (the stream past it is ended, as for the total).
 */
#include "common/mix64.h"
#include "proxy/proxy_int.h"
#include "proxy/proxy_pb.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KA_PATH "/etcdserverpb.Lease/LeaseKeepAlive"
#define END_MSG_CAP 256

typedef struct ka_client {
    kv_proxy_lease *L;
    kv_grpc_call *call; /* NULL once finished or cancelled */
    uint32_t refs;      /* the call's + one per waiting slot */
    uint32_t pending;   /* requests of this stream not answered yet */
    int half_closed;
} ka_client;

typedef struct waitlist {
    ka_client **v;
    uint32_t n, cap;
} waitlist;

typedef struct lease_ent {
    int64_t id;
    struct lease_ent *hnext; /* hash chain */
    struct lease_ent *qnext; /* batch of this loop turn */
    waitlist sent;           /* answered by the renewal in flight */
    waitlist later;          /* asked after it went up: answered by the next one */
    uint8_t inflight, queued, resent;
} lease_ent;

/* One per upstream stream: immutable once opened, read by the I/O thread callbacks. */
typedef struct up_tag {
    kv_proxy_lease *L;
    uint64_t gen;
    kv_proxy_ev *end_ev; /* preallocated: the end of a stream is never lost to OOM */
} up_tag;

struct kv_proxy_lease {
    kv_proxy *p;
    lease_ent **buckets;
    size_t nb, n_ent;
    lease_ent *batch_head, *batch_tail;
    uv_check_t check;
    uv_timer_t retry;
    uv_timer_t hung;  /* --upstream-answer-timeout watchdog, runs while renewals are in flight */
    uv_timer_t delay; /* --renewal-batch-delay (0: the batch goes up at the end of the turn) */
    uint64_t quiet_since; /* loop ms: last message received, or the send that ended a lull */
    size_t inflight_n;    /* leases with a renewal in flight on the current stream */
    int flush_armed, closing;
    unsigned failures;
    kvc_bidi *up;
    up_tag *tag;
    uint64_t gen;
    uint64_t waiters;
    uint32_t client_streams;
    kv_metric *m_up_streams, *m_up_opened, *m_client_streams, *m_requests, *m_answers, *m_sent,
        *m_batches, *m_resent, *m_dropped, *m_pending, *m_unmatched, *m_hung;
};

/* ---- map ---- */

static size_t bucket_of(const kv_proxy_lease *L, int64_t id)
{
    return (size_t)(kv_mix64((uint64_t)id) & (L->nb - 1));
}

static lease_ent *ent_find(kv_proxy_lease *L, int64_t id)
{
    for (lease_ent *e = L->buckets[bucket_of(L, id)]; e; e = e->hnext)
        if (e->id == id)
            return e;
    return NULL;
}

static int grow(kv_proxy_lease *L)
{
    size_t nb = L->nb * 2;
    lease_ent **b = calloc(nb, sizeof *b);
    if (!b)
        return -ENOMEM;
    lease_ent **old = L->buckets;
    size_t onb = L->nb;
    L->buckets = b;
    L->nb = nb;
    for (size_t i = 0; i < onb; i++)
        for (lease_ent *e = old[i], *n; e; e = n) {
            n = e->hnext;
            size_t k = bucket_of(L, e->id);
            e->hnext = b[k];
            b[k] = e;
        }
    free(old);
    return 0;
}

static lease_ent *ent_get(kv_proxy_lease *L, int64_t id)
{
    lease_ent *e = ent_find(L, id);
    if (e)
        return e;
    if (L->n_ent >= L->nb)
        (void)grow(L); /* a failed grow only lengthens chains */
    e = calloc(1, sizeof *e);
    if (!e)
        return NULL;
    e->id = id;
    size_t k = bucket_of(L, id);
    e->hnext = L->buckets[k];
    L->buckets[k] = e;
    L->n_ent++;
    return e;
}

static void ent_maybe_free(kv_proxy_lease *L, lease_ent *e)
{
    if (e->inflight || e->queued || e->sent.n || e->later.n)
        return;
    lease_ent **pp = &L->buckets[bucket_of(L, e->id)];
    while (*pp != e)
        pp = &(*pp)->hnext;
    *pp = e->hnext;
    L->n_ent--;
    free(e->sent.v);
    free(e->later.v);
    free(e);
}

static int wl_push(waitlist *w, ka_client *kc)
{
    if (w->n == w->cap) {
        uint32_t cap = w->cap ? w->cap * 2 : 2;
        ka_client **v = realloc(w->v, cap * sizeof *v);
        if (!v)
            return -ENOMEM;
        w->v = v;
        w->cap = cap;
    }
    w->v[w->n++] = kc;
    return 0;
}

static void wl_swap(waitlist *a, waitlist *b)
{
    waitlist t = *a;
    *a = *b;
    *b = t;
}

/* ---- client streams ---- */

static void kc_unref(ka_client *kc)
{
    if (--kc->refs == 0)
        free(kc);
}

/* The client's call is over (finished here or cancelled by the transport): drops the
 * call's reference. The caller holds another one (a waiting slot's), so kc stays. */
static void kc_end_held(ka_client *kc)
{
    kv_proxy_lease *L = kc->L;
    kc->call = NULL;
    L->client_streams--;
    kv_metric_set(L->m_client_streams, L->client_streams);
    kc->refs--;
}

/* As kc_end_held, when the call's reference may be the last one. */
static void kc_end(ka_client *kc)
{
    kc->refs++;
    kc_end_held(kc);
    kc_unref(kc);
}

/* Finish the client's stream; the caller holds a reference besides the call's. */
static void kc_finish_held(ka_client *kc, int code, const char *msg)
{
    kv_grpc_call *call = kc->call;
    if (!call)
        return;
    kv_grpc_call_set_data(call, NULL);
    kv_grpc_call_finish(call, code, msg);
    kc_end_held(kc);
}

static void kc_finish(ka_client *kc, int code, const char *msg)
{
    kc->refs++;
    kc_finish_held(kc, code, msg);
    kc_unref(kc);
}

/* One waiting slot of kc is over: answered with msg (NULL: dropped unanswered). */
static void kc_slot_done(ka_client *kc, const uint8_t *msg, size_t len)
{
    kv_proxy_lease *L = kc->L;
    L->waiters--;
    kc->pending--;
    if (kc->call && msg) {
        if (kv_grpc_call_send(kc->call, msg, len) < 0) { /* the client does not read */
            kv_grpc_call_set_data(kc->call, NULL);
            kv_proxy_refuse(L->p, kc->call, KV_PROXY_REFUSED_CLIENT_SEND);
            kc_end_held(kc);
        } else {
            kv_metric_inc(L->m_answers);
        }
    }
    if (kc->call && kc->half_closed && kc->pending == 0)
        kc_finish_held(kc, KV_GRPC_OK, NULL);
    kc_unref(kc);
}

/* ---- the upstream stream ---- */

static void flush(kv_proxy_lease *L);
static void open_up(kv_proxy_lease *L);

static void check_cb(uv_check_t *h)
{
    flush(h->data);
}

static void retry_cb(uv_timer_t *t)
{
    kv_proxy_lease *L = t->data;
    if (!L->up)
        open_up(L);
    flush(L);
}

/* The watchdog: renewals in flight and the stream silent for --upstream-answer-timeout. */
static void hung_cb(uv_timer_t *t)
{
    kv_proxy_lease *L = t->data;
    uint32_t lim = L->p->cfg->upstream_answer_timeout_ms;
    if (L->closing || !L->up || L->inflight_n == 0 || uv_now(L->p->loop) - L->quiet_since < lim)
        return;
    fprintf(stderr,
            "kvd grpc-proxy: upstream keepalive stream: %zu renewals unanswered and nothing "
            "received for %u ms: giving the member up (hung?)\n",
            L->inflight_n, lim);
    kv_metric_inc(L->m_hung);
    L->quiet_since = uv_now(L->p->loop); /* once per timeout, whatever libkvclient does */
    kvc_bidi_failover(L->up);            /* the stream's end event follows: renewals re-sent once */
}

static void delay_cb(uv_timer_t *t)
{
    flush(t->data);
}

static void arm_flush(kv_proxy_lease *L)
{
    if (!L->flush_armed && !L->closing) {
        L->flush_armed = 1;
        uint32_t ms = L->p->cfg->renewal_batch_delay_ms;
        if (ms)
            uv_timer_start(&L->delay, delay_cb, ms, 0);
        else
            uv_check_start(&L->check, check_cb);
    }
}

static void queue_ent(kv_proxy_lease *L, lease_ent *e)
{
    if (e->queued)
        return;
    e->queued = 1;
    e->qnext = NULL;
    if (L->batch_tail)
        L->batch_tail->qnext = e;
    else
        L->batch_head = e;
    L->batch_tail = e;
    arm_flush(L);
}

static void up_msg_io(void *arg, const uint8_t *msg, size_t len)
{
    up_tag *t = arg;
    kv_proxy_ev *ev = kv_proxy_ev_new(KV_PROXY_EV_LEASE_MSG, t, 0, msg, len);
    if (ev) /* else lost: the waiting clients send again on their own schedule */
        kv_proxy_bridge_post(&t->L->p->bridge, ev);
}

static void up_end_io(void *arg, int status, const kvc_error *err)
{
    up_tag *t = arg;
    kv_proxy_ev *ev = t->end_ev;
    t->end_ev = NULL;
    ev->code = status == 0 ? 0 : (err ? err->code : -status);
    snprintf((char *)ev->buf, END_MSG_CAP, "%s", err ? err->message : "");
    ev->len = strlen((char *)ev->buf);
    kv_proxy_bridge_post(&t->L->p->bridge, ev);
}

static void tag_free(up_tag *t)
{
    if (!t)
        return;
    kv_proxy_ev_free(t->end_ev);
    free(t);
}

static void schedule_open(kv_proxy_lease *L)
{
    if (L->closing || uv_is_active((uv_handle_t *)&L->retry))
        return;
    uint64_t d = L->failures == 0 ? 0 : 50u << (L->failures < 5 ? L->failures : 5);
    if (d > 1000)
        d = 1000;
    L->failures++;
    uv_timer_start(&L->retry, retry_cb, d, 0);
}

static void open_up(kv_proxy_lease *L)
{
    kv_proxy *p = L->p;
    if (L->up || L->closing)
        return;
    up_tag *t = calloc(1, sizeof *t);
    char blank[END_MSG_CAP] = {0};
    if (t)
        t->end_ev = kv_proxy_ev_new(KV_PROXY_EV_LEASE_END, t, 0, blank, END_MSG_CAP - 1);
    if (!t || !t->end_ev) {
        tag_free(t);
        schedule_open(L);
        return;
    }
    t->L = L;
    t->gen = ++L->gen;
    kvc_error e;
    int rc = kvc_bidi_open(p->up, KA_PATH, p->cfg->max_upstream_send_bytes, up_msg_io, up_end_io, t,
                           &L->up, &e);
    if (rc != 0) {
        fprintf(stderr, "kvd grpc-proxy: warning: cannot open the upstream keepalive stream: %s\n",
                e.message);
        tag_free(t);
        L->up = NULL;
        schedule_open(L);
        return;
    }
    L->tag = t;
    kv_metric_set(L->m_up_streams, 1);
    kv_metric_inc(L->m_up_opened);
}

/* End of the loop turn: every lease with new waiters goes up once. */
static void flush(kv_proxy_lease *L)
{
    if (L->flush_armed) {
        L->flush_armed = 0;
        uv_check_stop(&L->check);
        uv_timer_stop(&L->delay);
    }
    if (!L->batch_head || L->closing)
        return;
    if (!L->up) {
        schedule_open(L);
        return;
    }
    uint64_t n = 0;
    while (L->batch_head) {
        lease_ent *e = L->batch_head;
        uint8_t buf[16];
        size_t len = kv_proxy_pb_keepalive_req(buf, e->id);
        kvc_error err;
        int rc = kvc_bidi_send(L->up, buf, len, &err);
        if (rc == -KVC_RESOURCE_EXHAUSTED) { /* upstream not taking bytes: try again soon */
            kv_metric_inc(L->p->m_refused[KV_PROXY_REFUSED_UPSTREAM_SEND]);
            if (!uv_is_active((uv_handle_t *)&L->retry))
                uv_timer_start(&L->retry, retry_cb, 10, 0);
            break;
        }
        if (rc != 0) /* ended: its end event re-queues the renewals in flight */
            break;
        L->batch_head = e->qnext;
        if (!L->batch_head)
            L->batch_tail = NULL;
        e->qnext = NULL;
        e->queued = 0;
        e->inflight = 1;
        if (L->inflight_n++ == 0)
            L->quiet_since = uv_now(L->p->loop);
        n++;
    }
    if (n) {
        kv_metric_add(L->m_sent, (int64_t)n);
        kv_metric_inc(L->m_batches);
    }
}

static void on_up_msg(kv_proxy_lease *L, kv_proxy_ev *ev)
{
    int64_t id;
    lease_ent *e;
    L->failures = 0;
    L->quiet_since = uv_now(L->p->loop);
    if (kv_proxy_pb_varint_field(ev->buf, ev->len, 2, &id) < 0 || !(e = ent_find(L, id)) ||
        !e->inflight) {
        kv_metric_inc(L->m_unmatched);
        return;
    }
    e->inflight = 0;
    e->resent = 0;
    L->inflight_n--;
    waitlist w = e->sent;
    memset(&e->sent, 0, sizeof e->sent);
    if (e->later.n) { /* they asked after this renewal went up: one more for them */
        wl_swap(&e->sent, &e->later);
        queue_ent(L, e);
    }
    for (uint32_t i = 0; i < w.n; i++)
        kc_slot_done(w.v[i], ev->buf, ev->len);
    free(w.v);
    kv_metric_set(L->m_pending, (double)L->waiters);
    ent_maybe_free(L, e);
}

static void on_up_end(kv_proxy_lease *L, kv_proxy_ev *ev)
{
    if (!L->closing)
        fprintf(stderr,
                "kvd grpc-proxy: upstream keepalive stream ended (code %d: %s); "
                "re-opening, renewals in flight are re-sent once\n",
                ev->code, (const char *)ev->buf);
    kvc_bidi_free(L->up); /* already over: only releases the handle */
    L->up = NULL;
    L->inflight_n = 0;
    kv_metric_set(L->m_up_streams, 0);
    if (L->closing)
        return;
    for (size_t b = 0; b < L->nb; b++) {
        for (lease_ent *e = L->buckets[b], *next; e; e = next) {
            next = e->hnext;
            if (!e->inflight)
                continue;
            e->inflight = 0;
            if (!e->resent) {
                e->resent = 1;
                kv_metric_inc(L->m_resent);
                queue_ent(L, e);
                continue;
            }
            waitlist w = e->sent; /* lost twice: the clients will ask again */
            memset(&e->sent, 0, sizeof e->sent);
            e->resent = 0;
            if (e->later.n) {
                wl_swap(&e->sent, &e->later);
                queue_ent(L, e);
            }
            kv_metric_add(L->m_dropped, w.n);
            for (uint32_t i = 0; i < w.n; i++)
                kc_slot_done(w.v[i], NULL, 0);
            free(w.v);
            ent_maybe_free(L, e);
        }
    }
    kv_metric_set(L->m_pending, (double)L->waiters);
    if (L->batch_head)
        schedule_open(L);
}

void kv_proxy_lease_on_event(kv_proxy *p, kv_proxy_ev *ev)
{
    kv_proxy_lease *L = p->lease;
    up_tag *t = ev->target;
    int current = t == L->tag;
    if (ev->kind == KV_PROXY_EV_LEASE_MSG) {
        if (current && !L->closing)
            on_up_msg(L, ev);
        kv_proxy_ev_free(ev);
        return;
    }
    /* LEASE_END: the last event of its stream (ev is the tag's own end event) */
    if (current) {
        L->tag = NULL;
        on_up_end(L, ev);
    }
    kv_proxy_ev_free(ev);
    free(t);
}

/* ---- the client side ---- */

void kv_proxy_lease_on_message(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    kv_proxy *p = kv_grpc_call_app(call);
    kv_proxy_lease *L = p->lease;
    ka_client *kc = kv_grpc_call_data(call);
    if (!kc) {
        kc = calloc(1, sizeof *kc);
        if (!kc) {
            kv_grpc_call_finish(call, KV_GRPC_RESOURCE_EXHAUSTED, "etcdserver: too many requests");
            return;
        }
        kc->L = L;
        kc->call = call;
        kc->refs = 1;
        kv_grpc_call_set_data(call, kc);
        L->client_streams++;
        kv_metric_set(L->m_client_streams, L->client_streams);
    }
    int64_t id;
    if (kv_proxy_pb_varint_field(msg, len, 1, &id) < 0) {
        kc_finish(kc, KV_GRPC_INTERNAL,
                  "grpc: error unmarshalling request: proto: LeaseKeepAliveRequest: bad bytes");
        return;
    }
    kv_metric_inc(L->m_requests);
    if (kc->pending >= p->cfg->max_stream_renewals) { /* one stream may not take every slot */
        kv_grpc_call_set_data(call, NULL);
        kv_proxy_refuse(p, call, KV_PROXY_REFUSED_STREAM_RENEWALS);
        kc_end(kc);
        return;
    }
    lease_ent *e = NULL;
    if (L->waiters >= p->cfg->max_pending_renewals || !(e = ent_get(L, id))) {
        kv_grpc_call_set_data(call, NULL);
        kv_proxy_refuse(p, call, KV_PROXY_REFUSED_PENDING_RENEWALS);
        kc_end(kc);
        return;
    }
    waitlist *w = e->inflight ? &e->later : &e->sent;
    if (wl_push(w, kc) != 0) {
        ent_maybe_free(L, e);
        kv_grpc_call_set_data(call, NULL);
        kv_proxy_refuse(p, call, KV_PROXY_REFUSED_PENDING_RENEWALS);
        kc_end(kc);
        return;
    }
    kc->refs++;
    kc->pending++;
    L->waiters++;
    kv_metric_set(L->m_pending, (double)L->waiters);
    if (!e->inflight)
        queue_ent(L, e);
}

void kv_proxy_lease_on_half_close(kv_grpc_call *call)
{
    kv_proxy *p = kv_grpc_call_app(call);
    ka_client *kc = kv_grpc_call_data(call);
    if (!kc) { /* no request at all */
        (void)p;
        kv_grpc_call_finish(call, KV_GRPC_OK, NULL);
        return;
    }
    kc->half_closed = 1;
    if (kc->pending == 0)
        kc_finish(kc, KV_GRPC_OK, NULL);
}

void kv_proxy_lease_on_cancel(kv_grpc_call *call)
{
    ka_client *kc = kv_grpc_call_data(call);
    if (kc)
        kc_end(kc);
}

/* ---- lifecycle ---- */

int kv_proxy_lease_new(kv_proxy *p, kv_proxy_lease **out)
{
    kv_proxy_lease *L = calloc(1, sizeof *L);
    if (!L)
        return -ENOMEM;
    L->p = p;
    L->nb = 64;
    L->buckets = calloc(L->nb, sizeof *L->buckets);
    if (!L->buckets) {
        free(L);
        return -ENOMEM;
    }
    uv_check_init(p->loop, &L->check);
    uv_timer_init(p->loop, &L->retry);
    uv_timer_init(p->loop, &L->hung);
    uv_timer_init(p->loop, &L->delay);
    L->delay.data = L;
    L->check.data = L;
    L->retry.data = L;
    L->hung.data = L;
    uint64_t tick =
        p->cfg->upstream_answer_timeout_ms / 4 ? p->cfg->upstream_answer_timeout_ms / 4 : 1;
    uv_timer_start(&L->hung, hung_cb, tick, tick);
    uv_unref((uv_handle_t *)&L->hung);
    kv_metrics *m = p->metrics;
    L->m_up_streams =
        kv_metrics_gauge(m, "kvd_proxy_upstream_keepalive_streams",
                         "Upstream LeaseKeepAlive streams open (one per proxy).", NULL);
    L->m_up_opened = kv_metrics_counter(m, "kvd_proxy_upstream_keepalive_streams_opened_total",
                                        "Upstream LeaseKeepAlive streams opened.", NULL);
    L->m_client_streams = kv_metrics_gauge(m, "kvd_proxy_keepalive_client_streams",
                                           "Client LeaseKeepAlive streams open.", NULL);
    L->m_requests = kv_metrics_counter(m, "kvd_proxy_keepalive_requests_total",
                                       "LeaseKeepAliveRequests received from clients.", NULL);
    L->m_answers = kv_metrics_counter(m, "kvd_proxy_keepalive_responses_total",
                                      "Leader's LeaseKeepAliveResponses relayed to clients.", NULL);
    L->m_sent = kv_metrics_counter(m, "kvd_proxy_renewals_sent_total",
                                   "Renewals sent on the upstream keepalive stream.", NULL);
    L->m_batches = kv_metrics_counter(m, "kvd_proxy_renewal_batches_total",
                                      "Loop turns that sent renewals upstream.", NULL);
    L->m_resent = kv_metrics_counter(m, "kvd_proxy_renewals_resent_total",
                                     "Renewals in flight re-sent after the upstream stream "
                                     "ended.",
                                     NULL);
    L->m_dropped = kv_metrics_counter(m, "kvd_proxy_renewal_waiters_dropped_total",
                                      "Client requests left unanswered: their renewal was "
                                      "lost on two upstream streams.",
                                      NULL);
    L->m_pending = kv_metrics_gauge(m, "kvd_proxy_pending_renewals",
                                    "Client keepalive requests waiting for the leader's answer "
                                    "(bound: --max-pending-renewals).",
                                    NULL);
    L->m_unmatched = kv_metrics_counter(m, "kvd_proxy_keepalive_unmatched_total",
                                        "Upstream keepalive answers no client waited for.", NULL);
    L->m_hung = kv_metrics_counter(m, "kvd_proxy_upstream_hung_total",
                                   "Upstream connections given up: renewals unanswered and "
                                   "nothing received for --upstream-answer-timeout.",
                                   NULL);
    kv_metric_set(L->m_up_streams, 0);
    *out = L;
    return 0;
}

void kv_proxy_lease_stop(kv_proxy_lease *L)
{
    L->closing = 1;
    uv_check_stop(&L->check);
    uv_timer_stop(&L->retry);
    uv_timer_stop(&L->hung);
    uv_timer_stop(&L->delay);
    uv_close((uv_handle_t *)&L->delay, NULL);
    uv_close((uv_handle_t *)&L->check, NULL);
    uv_close((uv_handle_t *)&L->retry, NULL);
    uv_close((uv_handle_t *)&L->hung, NULL);
    if (L->up) {
        kvc_bidi_free(L->up); /* synchronous: no callback of it runs after this */
        L->up = NULL;
    }
}

void kv_proxy_lease_free(kv_proxy_lease *L)
{
    if (!L)
        return;
    tag_free(L->tag); /* its end event was never posted */
    for (size_t b = 0; b < L->nb; b++)
        for (lease_ent *e = L->buckets[b], *n; e; e = n) {
            n = e->hnext;
            for (uint32_t i = 0; i < e->sent.n; i++)
                kc_unref(e->sent.v[i]);
            for (uint32_t i = 0; i < e->later.n; i++)
                kc_unref(e->later.v[i]);
            free(e->sent.v);
            free(e->later.v);
            free(e);
        }
    free(L->buckets);
    free(L);
}
