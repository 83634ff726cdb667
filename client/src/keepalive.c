/*
 * keepalive.c - the lease keepalive scheduler (lesson 1).
 *
 * All leases of a client share ONE LeaseKeepAlive bidi stream. Each lease sits in a min-heap
 * keyed by its next event: the next renewal (TTL/3 after the last response, or after the
 * last send when no response came) or, when a renewal cannot be sent, its deadline. One
 * uv_timer is armed for the heap top, so each event costs O(log n). The schedule never
 * depends on the consumer: responses are delivered to a callback or to a bounded per-lease
 * queue that drops its oldest entry when full (counted). A lease whose deadline passes
 * without a response, or that the server answers with TTL 0, is reported lost once and
 * leaves the scheduler.
 */
#include "internal.h"
#include "pbconv.h"
#include "rpc.pb-c.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define KA_PATH "/etcdserverpb.Lease/LeaseKeepAlive"

/* ---- heap ---- */

static uint64_t ka_key(const struct kvc_keepalive *k)
{
    if (k->want_send || k->next_send > k->deadline)
        return k->deadline;
    return k->next_send;
}

static void heap_swap(struct kvc_ka_sched *s, size_t a, size_t b)
{
    struct kvc_keepalive *t = s->heap[a];
    s->heap[a] = s->heap[b];
    s->heap[b] = t;
    s->heap[a]->heap_idx = a;
    s->heap[b]->heap_idx = b;
}

static void heap_up(struct kvc_ka_sched *s, size_t i)
{
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (ka_key(s->heap[p]) <= ka_key(s->heap[i]))
            break;
        heap_swap(s, p, i);
        i = p;
    }
}

static void heap_down(struct kvc_ka_sched *s, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < s->n && ka_key(s->heap[l]) < ka_key(s->heap[m]))
            m = l;
        if (r < s->n && ka_key(s->heap[r]) < ka_key(s->heap[m]))
            m = r;
        if (m == i)
            break;
        heap_swap(s, i, m);
        i = m;
    }
}

static int heap_push(struct kvc_ka_sched *s, struct kvc_keepalive *k)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 8;
        struct kvc_keepalive **h = realloc(s->heap, cap * sizeof *h);
        if (!h)
            return -1;
        s->heap = h;
        s->cap = cap;
    }
    k->heap_idx = s->n;
    s->heap[s->n++] = k;
    k->in_heap = 1;
    heap_up(s, k->heap_idx);
    return 0;
}

static void heap_fix(struct kvc_ka_sched *s, struct kvc_keepalive *k)
{
    heap_up(s, k->heap_idx);
    heap_down(s, k->heap_idx);
}

static void heap_remove(struct kvc_ka_sched *s, struct kvc_keepalive *k)
{
    if (!k->in_heap)
        return;
    size_t i = k->heap_idx;
    k->in_heap = 0;
    s->n--;
    if (i != s->n) {
        s->heap[i] = s->heap[s->n];
        s->heap[i]->heap_idx = i;
        heap_fix(s, s->heap[i]);
    }
}

/* ---- id map ---- */

static struct kvc_keepalive *map_find(const struct kvc_ka_sched *s, int64_t id)
{
    kvc_idmap_node *n = kvc_idmap_find(&s->map, id);
    return n ? KVC_IDMAP_ENTRY(n, struct kvc_keepalive, hn) : NULL;
}

/* ---- handles ---- */

void kvc_ka_unref(struct kvc_keepalive *ka)
{
    if (atomic_fetch_sub(&ka->refs, 1) == 1) {
        pthread_mutex_destroy(&ka->mu);
        pthread_cond_destroy(&ka->cv);
        free(ka->q);
        free(ka);
    }
}

/* Harmless if k is not on c->ka.all (any more). */
static void all_remove(kvc_client *c, struct kvc_keepalive *k)
{
    (void)c;
    kv_list_remove(&k->alink);
}

/* Take the lease out of the scheduler (loop). Does not drop any reference. */
static void unregister(kvc_client *c, struct kvc_keepalive *k)
{
    if (!k->registered)
        return;
    heap_remove(&c->ka, k);
    kvc_idmap_remove(&c->ka.map, &k->hn);
    if (k->want_send) {
        k->want_send = 0;
        c->ka.want_send--;
    }
    k->registered = 0;
    atomic_fetch_sub_explicit(&c->st.leases_active, 1, memory_order_relaxed);
}

static void deliver(kvc_client *c, struct kvc_keepalive *k, const kvc_ka_event *ev)
{
    if (k->cb) {
        k->cb(k->arg, ev);
        return;
    }
    pthread_mutex_lock(&k->mu);
    if (k->qcount == k->qcap) {
        /* Slow consumer: keep the newest, count the dropped. Never affects the schedule. */
        k->qhead = (k->qhead + 1) % k->qcap;
        k->qcount--;
        atomic_fetch_add_explicit(&k->dropped, 1, memory_order_relaxed);
        KVC_STAT_INC(c, responses_dropped);
    }
    k->q[(k->qhead + k->qcount) % k->qcap] = *ev;
    k->qcount++;
    pthread_cond_signal(&k->cv);
    pthread_mutex_unlock(&k->mu);
}

static void lost(kvc_client *c, struct kvc_keepalive *k, const kvc_header *h, int64_t ttl)
{
    unregister(c, k);
    atomic_store(&k->lost, 1);
    KVC_STAT_INC(c, leases_lost);
    kvc_ka_event ev;
    memset(&ev, 0, sizeof ev);
    ev.type = KVC_KA_LOST;
    ev.id = k->hn.id;
    ev.ttl = ttl;
    if (h)
        ev.header = *h;
    deliver(c, k, &ev);
    kvc_ka_unref(k); /* the scheduler's reference; the caller's handle stays valid */
}

/* ---- stream ---- */

static int stream_ready(const kvc_client *c)
{
    return c->ka.stream_open && kvc_conn_usable(c);
}

static ssize_t ka_read(nghttp2_session *session, int32_t stream_id, uint8_t *buf, size_t length,
                       uint32_t *data_flags, nghttp2_data_source *source, void *user_data)
{
    (void)session;
    (void)stream_id;
    (void)data_flags;
    (void)source;
    kvc_client *c = ((struct kvc_conn *)user_data)->c; /* session user data */
    struct kvc_ka_sched *s = &c->ka;
    return kvc_sendbuf_read(&s->out, buf, length);
}

/* Append one framed LeaseKeepAliveRequest{ID}; hand-encoded (field 1, varint). */
static int append_renewal(struct kvc_ka_sched *s, int64_t id)
{
    uint8_t msg[16];
    size_t n = 0;
    uint64_t v = (uint64_t)id;
    msg[n++] = 0x08;
    do {
        uint8_t b = v & 0x7f;
        v >>= 7;
        msg[n++] = v ? (uint8_t)(b | 0x80) : b;
    } while (v);
    uint8_t *d = kvc_sendbuf_frame(&s->out, n, KVC_KA_SENDBUF_MAX);
    if (!d)
        return -1;
    memcpy(d, msg, n);
    return 0;
}

static void set_want(kvc_client *c, struct kvc_keepalive *k, int want)
{
    if (k->want_send == want)
        return;
    k->want_send = want;
    if (want)
        c->ka.want_send++;
    else
        c->ka.want_send--;
}

/* Send a renewal for k now, or remember that one is due. Caller fixes the heap. */
static void send_renewal(kvc_client *c, struct kvc_keepalive *k, uint64_t now)
{
    if (!stream_ready(c) || append_renewal(&c->ka, k->hn.id) != 0) {
        set_want(c, k, 1);
        return;
    }
    set_want(c, k, 0);
    KVC_STAT_INC(c, renewals_sent);
    k->sent_at = now;
    k->next_send = now + (uint64_t)k->ttl_ms / 3;
}

static void stream_kick(kvc_client *c)
{
    struct kvc_ka_sched *s = &c->ka;
    if (s->out.len > s->out.off && stream_ready(c) && s->out.deferred) {
        s->out.deferred = 0;
        nghttp2_session_resume_data(c->conn->h2, s->s.id);
    }
}

static void timer_cb(uv_timer_t *t);

static void rearm(kvc_client *c)
{
    struct kvc_ka_sched *s = &c->ka;
    if (c->closing)
        return;
    if (s->n == 0) {
        uv_timer_stop(&s->timer);
        return;
    }
    uint64_t now = kvc_now_ms(), at = ka_key(s->heap[0]);
    uv_timer_start(&s->timer, timer_cb, at > now ? at - now : 0, 0);
}

static void stream_open(kvc_client *c);

/* A hung member (stopped, overloaded to silence, half-open TCP): a renewal is due again while
 * the previous one, written at least KA_HUNG_MIN_MS ago, is unanswered and nothing at all
 * came back on the stream since. With other endpoints to try, the connection is given up
 * (kvc_conn_fail: next endpoint) and the unanswered renewals are re-sent on the new stream,
 * so the lease keeps most of its TTL. */
#define KA_HUNG_MIN_MS 1000u

static int stream_hung(const kvc_client *c, const struct kvc_keepalive *k, uint64_t now)
{
    const struct kvc_ka_sched *s = &c->ka;
    return c->n_eps > 1 && stream_ready(c) && k->sent_at && s->last_rx < k->sent_at &&
           now - k->sent_at >= KA_HUNG_MIN_MS;
}

/* Process every lease whose event is due. */
static void run_due(kvc_client *c)
{
    struct kvc_ka_sched *s = &c->ka;
    uint64_t now = kvc_now_ms();
    while (s->n > 0 && ka_key(s->heap[0]) <= now) {
        struct kvc_keepalive *k = s->heap[0];
        if (now >= k->deadline) {
            lost(c, k, NULL, 0);
            continue;
        }
        if (stream_hung(c, k, now)) {
            char why[160];
            snprintf(why, sizeof why,
                     "keepalive stream: no answer for %" PRIu64 " ms (member hung?)",
                     now - k->sent_at);
            /* stream down: the renewal waits for the next one. The failure runs the callbacks
             * of the calls and streams it ends, which may stop (and free) k: look again. */
            kvc_conn_fail(c, why);
            continue;
        }
        send_renewal(c, k, now);
        heap_fix(s, k);
    }
    if (s->want_send) {
        /* A renewal is due and the connection is being left (kvc_conn_drain): it cannot
         * carry the keepalive stream, and its calls in flight (a Lock, a Campaign, a call
         * without a deadline) could hold it for longer than the lease lives. A renewal
         * outranks them: the connection goes now, its idempotent calls are retried on the
         * next endpoint and the others end UNAVAILABLE. */
        if (c->conn && c->conn->draining && !c->conn->dead)
            kvc_conn_fail(c, c->conn->fail_reason[0] ? c->conn->fail_reason : "connection drained");
        kvc_conn_demand(c);
        stream_open(c);
    }
    stream_kick(c);
    rearm(c);
}

static void timer_cb(uv_timer_t *t)
{
    kvc_client *c = t->data;
    run_due(c);
    kvc_conn_flush(c);
}

static void retry_cb(uv_timer_t *t)
{
    kvc_client *c = t->data;
    stream_open(c);
    kvc_conn_flush(c);
}

/* Open the shared stream when there are leases and a usable connection; then renew every
 * lease that is due or was waiting for the stream. */
static void stream_open(kvc_client *c)
{
    struct kvc_ka_sched *s = &c->ka;
    if (s->stream_open || !kvc_conn_usable(c) || s->map.n == 0 || c->closing)
        return;
    if (uv_is_active((uv_handle_t *)&s->retry_timer))
        return;
    kvc_grpc_stream_reset(&s->s);
    kvc_sendbuf_clear(&s->out);
    s->out.deferred = 0;
    int32_t id = kvc_conn_submit(c, KA_PATH, 0, NULL, ka_read, &s->s);
    if (id < 0) {
        uv_timer_start(&s->retry_timer, retry_cb, kvc_backoff_ms(c, s->stream_failures++), 0);
        return;
    }
    s->s.id = id;
    s->stream_open = 1;
    /* A new stream: renew the leases that are due or were waiting for the stream. The others
     * keep their schedule (TTL/3 after their last response or send), so a flapping stream
     * cannot multiply the renewal rate. */
    uint64_t now = kvc_now_ms();
    /* Renewals written on a stream that died unanswered are re-sent too (once per stream):
     * after a failover the lease is renewed at once, not a TTL/3 later. */
    for (size_t i = 0; i < s->n; i++) {
        struct kvc_keepalive *k = s->heap[i];
        if ((k->want_send || k->sent_at || k->next_send <= now) && now < k->deadline)
            send_renewal(c, k, now);
    }
    /* Keys changed for many entries: rebuild the heap bottom-up, O(n). */
    for (size_t i = s->n / 2; i-- > 0;)
        heap_down(s, i);
    stream_kick(c);
    rearm(c);
}

void kvc_ka_on_ready(kvc_client *c)
{
    uv_timer_stop(&c->ka.retry_timer);
    stream_open(c);
}

void kvc_ka_on_conn_lost(kvc_client *c)
{
    struct kvc_ka_sched *s = &c->ka;
    s->stream_open = 0;
    s->s.id = 0;
    kvc_sendbuf_clear(&s->out);
    s->out.deferred = 0;
    kvc_rbuf_free(&s->s.rb);
}

void kvc_ka_on_stream_close(kvc_client *c, uint32_t h2err)
{
    struct kvc_ka_sched *s = &c->ka;
    char msg[256];
    int code = kvc_grpc_final_status(&s->s, h2err, 1, msg, sizeof msg);
    s->stream_open = 0;
    s->s.id = 0;
    kvc_sendbuf_clear(&s->out);
    kvc_rbuf_free(&s->s.rb);
    snprintf(c->last_err, sizeof c->last_err, "keepalive stream ended: %s (code %d)", msg, code);
    if ((code == KVC_UNAVAILABLE || strstr(msg, "no leader")) && !kvc_grpc_refused(&s->s, h2err))
        kvc_conn_drain(c, msg);
    if (!c->closing && kvc_conn_usable(c))
        uv_timer_start(&s->retry_timer, retry_cb, kvc_backoff_ms(c, s->stream_failures++), 0);
}

static void on_ka_msg(void *ctx, const uint8_t *m, size_t n)
{
    kvc_client *c = ctx;
    Etcdserverpb__LeaseKeepAliveResponse *r =
        etcdserverpb__lease_keep_alive_response__unpack(NULL, n, m);
    if (!r)
        return;
    KVC_STAT_INC(c, responses_received);
    c->ka.stream_failures = 0;
    c->ka.last_rx = kvc_now_ms();
    struct kvc_keepalive *k = map_find(&c->ka, r->id);
    if (k) {
        k->sent_at = 0;
        kvc_header h;
        kvc_header_from(&h, r->header);
        if (r->ttl <= 0) {
            lost(c, k, &h, r->ttl);
        } else {
            uint64_t now = kvc_now_ms();
            k->ttl_ms = r->ttl * 1000;
            k->deadline = now + (uint64_t)k->ttl_ms;
            k->next_send = now + (uint64_t)k->ttl_ms / 3;
            heap_fix(&c->ka, k);
            kvc_ka_event ev;
            memset(&ev, 0, sizeof ev);
            ev.type = KVC_KA_RESPONSE;
            ev.id = r->id;
            ev.ttl = r->ttl;
            ev.header = h;
            deliver(c, k, &ev); /* last: the callback may stop k */
        }
    }
    etcdserverpb__lease_keep_alive_response__free_unpacked(r, NULL);
}

void kvc_ka_on_data(kvc_client *c, const uint8_t *d, size_t n)
{
    struct kvc_ka_sched *s = &c->ka;
    if (s->s.bad)
        return;
    if (kvc_rbuf_append(&s->s.rb, d, n) != 0 ||
        kvc_grpc_parse(&s->s, c->cfg.max_response_bytes, on_ka_msg, c) != 0) {
        kvc_conn_reset_stream(c, s->s.id, NGHTTP2_CANCEL);
        kvc_ka_on_stream_close(c, NGHTTP2_CANCEL);
    }
    rearm(c);
}

/* ---- loop side of the API ---- */

int kvc_ka_init(kvc_client *c)
{
    struct kvc_ka_sched *s = &c->ka;
    uv_timer_init(&c->lg->loop, &s->timer);
    uv_timer_init(&c->lg->loop, &s->retry_timer);
    s->timer.data = c;
    s->retry_timer.data = c;
    c->open_handles += 2;
    s->s.kind = STREAM_KA;
    s->s.grpc_status = -1;
    return 0;
}

int kvc_ka_add(kvc_client *c, struct kvc_keepalive *k, kvc_error *err)
{
    struct kvc_ka_sched *s = &c->ka;
    if (c->closing)
        return kvc_fail(err, KVC_CANCELLED, "kvclient: client closed");
    if (map_find(s, k->hn.id))
        return kvc_fail(err, KVC_ALREADY_EXISTS,
                        "kvclient: lease %lld is already kept alive by this client",
                        (long long)k->hn.id);
    if (kvc_idmap_insert(&s->map, &k->hn) != 0)
        return kvc_fail(err, KVC_RESOURCE_EXHAUSTED, "kvclient: out of memory");
    uint64_t now = kvc_now_ms();
    k->next_send = now; /* first renewal right away */
    k->deadline = now + (uint64_t)k->ttl_ms;
    if (heap_push(s, k) != 0) {
        kvc_idmap_remove(&s->map, &k->hn);
        return kvc_fail(err, KVC_RESOURCE_EXHAUSTED, "kvclient: out of memory");
    }
    k->registered = 1;
    kv_list_insert_head(&s->all, &k->alink);
    atomic_fetch_add(&k->refs, 1); /* the scheduler's reference */
    atomic_fetch_add_explicit(&c->st.leases_active, 1, memory_order_relaxed);
    kvc_conn_demand(c);
    stream_open(c);
    run_due(c);
    return 0;
}

void kvc_ka_stop_loop(kvc_client *c, struct kvc_keepalive *k)
{
    all_remove(c, k);
    if (k->registered) {
        unregister(c, k);
        kvc_ka_unref(k);
        rearm(c);
    }
}

void kvc_ka_close_all(kvc_client *c)
{
    struct kvc_ka_sched *s = &c->ka;
    kv_list *e;
    while ((e = kv_list_head(&s->all))) {
        struct kvc_keepalive *k = kv_list_data(e, struct kvc_keepalive, alink);
        all_remove(c, k);
        if (k->registered) {
            unregister(c, k);
            kvc_ka_unref(k);
        }
        kvc_ka_unref(k); /* the caller's handle: kvc_close frees it */
    }
    uv_timer_stop(&s->timer);
    uv_timer_stop(&s->retry_timer);
    uv_close((uv_handle_t *)&s->timer, kvc_handle_closed_cb);
    uv_close((uv_handle_t *)&s->retry_timer, kvc_handle_closed_cb);
}

/* ---- public API ---- */

int kvc_lease_keepalive(kvc_client *c, int64_t id, int64_t ttl_s, kvc_keepalive_cb cb, void *arg,
                        kvc_keepalive **out, kvc_error *err)
{
    if (out)
        *out = NULL;
    if (!c || !out || id == 0 || ttl_s < 0)
        return kvc_fail(err, KVC_INVALID_ARGUMENT, "kvclient: invalid argument");
    struct kvc_keepalive *k = calloc(1, sizeof *k);
    if (!k)
        return kvc_fail(err, KVC_RESOURCE_EXHAUSTED, "kvclient: out of memory");
    kv_list_init(&k->alink);
    k->c = c;
    k->hn.id = id;
    k->ttl_ms = ttl_s > 0 ? ttl_s * 1000 : KVC_DEFAULT_LEASE_TTL_MS;
    k->cb = cb;
    k->arg = arg;
    atomic_init(&k->refs, 1);
    pthread_mutex_init(&k->mu, NULL);
    kvc_cond_init_monotonic(&k->cv);
    if (!cb) {
        k->qcap = c->cfg.keepalive_queue_len;
        k->q = calloc(k->qcap, sizeof *k->q);
        if (!k->q) {
            kvc_ka_unref(k);
            return kvc_fail(err, KVC_RESOURCE_EXHAUSTED, "kvclient: out of memory");
        }
    }
    int rc;
    if (kvc_loop_on_thread(c->lg)) {
        rc = kvc_ka_add(c, k, err);
        kvc_conn_flush(c);
    } else {
        rc = kvc_loop_run_cmd(c, &k->cmd, CMD_KA_ADD, k, err);
    }
    if (rc != 0) {
        kvc_ka_unref(k);
        return rc;
    }
    *out = k;
    return 0;
}

int kvc_keepalive_next(kvc_keepalive *k, kvc_ka_event *ev, uint32_t timeout_ms)
{
    if (!k || !ev)
        return -KVC_INVALID_ARGUMENT;
    if (k->cb)
        return -KVC_FAILED_PRECONDITION;
    struct timespec ts;
    kvc_deadline_after(&ts, timeout_ms);
    int rc = 0;
    pthread_mutex_lock(&k->mu);
    while (k->qcount == 0) {
        if (k->lost_read) {
            rc = -KVC_NOT_FOUND;
            break;
        }
        if (timeout_ms == 0 || pthread_cond_timedwait(&k->cv, &k->mu, &ts) == ETIMEDOUT) {
            if (k->qcount == 0)
                rc = -KVC_DEADLINE_EXCEEDED;
            break;
        }
    }
    if (rc == 0 && k->qcount > 0) {
        *ev = k->q[k->qhead];
        k->qhead = (k->qhead + 1) % k->qcap;
        k->qcount--;
        if (ev->type == KVC_KA_LOST)
            k->lost_read = 1;
    }
    pthread_mutex_unlock(&k->mu);
    return rc;
}

uint64_t kvc_keepalive_dropped(const kvc_keepalive *k)
{
    return k ? atomic_load_explicit(&((kvc_keepalive *)k)->dropped, memory_order_relaxed) : 0;
}

int kvc_keepalive_lost(const kvc_keepalive *k)
{
    return k ? atomic_load(&((kvc_keepalive *)k)->lost) : 0;
}

void kvc_keepalive_stop(kvc_keepalive *k)
{
    if (!k)
        return;
    kvc_client *c = k->c;
    if (kvc_loop_on_thread(c->lg)) {
        kvc_ka_stop_loop(c, k);
    } else {
        (void)kvc_loop_run_cmd(c, &k->cmd, CMD_KA_STOP, k, NULL);
    }
    kvc_ka_unref(k);
}
