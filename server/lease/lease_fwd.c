/*
 * lease_fwd: the follower side of forwarded renewals and TimeToLive queries (see
 * lease_fwd.h). Batches live in one list ordered by sequence number; the newest may still be
 * open (accumulating this loop turn's requests). The uv_idle handle closes and sends it at the
 * next loop turn; a repeating timer re-sends unsent batches, follows leader changes and
 * enforces the time bound.
 */
#include "lease/lease_fwd.h"

#include "lease/lease_fwd_serve.h"
#include "common/list.h"
#include "common/mix64.h"
#include "lease/lessor.h"
#include "peer/peer_frames.h"
#include "raft.pb-c.h"

#include <errno.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define BATCH_MAX_ITEMS 8192u /* one peer frame stays well under 200 KB */
#define RETRY_MAX 20u         /* timer periods an unknown-lease answer is retried */

typedef struct fwd_owner {
    void *call;   /* NULL once the call went away or was ended */
    kv_list link; /* in f->streams or f->ttls */
    uint32_t pending;
    unsigned half_closed : 1;
    unsigned stream : 1; /* keepalive stream: registered as the call's data */
} fwd_owner;

/* One caller waiting for a coalesced renewal: the keepalive stream (owner) and its callback. */
typedef struct fwd_waiter {
    struct fwd_waiter *next;
    fwd_owner *o;
    uint64_t t0_ns; /* receipt (kvd_lease_renewal_duration_seconds) */
    kv_lease_fwd_renew_fn done;
    uint32_t n; /* the stream's renewals of the lease it stands for (each gets an answer) */
} fwd_waiter;

/* The one pending forward of lease id's renewal (coalescing, lease_fwd.h): every renewal of id
 * that arrives while it is queued or in flight joins it as a waiter. In the id index until it
 * completes. */
typedef struct fwd_renew {
    struct fwd_renew *hnext; /* index chain */
    int64_t id;
    fwd_waiter *waiters;
} fwd_renew;

typedef struct fwd_item {
    fwd_owner *o; /* TimeToLive only */
    fwd_renew *r; /* renewal only */
    int64_t id;
    unsigned ttl : 1;
    unsigned want_keys : 1;
    unsigned retries : 5; /* "unknown lease" answers asked again (RETRY_MAX) */
    kv_lease_fwd_ttl_fn ttl_done;
} fwd_item;

typedef struct fwd_batch {
    struct fwd_batch *next;
    uint64_t seq;
    uint64_t leader;     /* member it was sent to (self: waiting here), 0 while unsent */
    uint64_t wait_index; /* leader == self: answered once this index is applied here */
    uint64_t deadline;   /* uv_now() ms */
    uint64_t not_before; /* retry batch: not sent before this uv_now() ms */
    uint64_t sent_at;    /* uv_now() ms of the last send to another member */
    uint64_t arrived_ms; /* kv_node_now_ms() when its newest item was added */
    int resent;
    size_t n, cap, n_ttl;
    fwd_item *items;
} fwd_batch;

/* A follower's LeaseRenewBatch held by the leader until it applied `index`, its commit index
 * when the frame arrived (one wait per frame). */
typedef struct held_frame {
    struct held_frame *next;
    uint64_t from, index;
    uint64_t arrived_ms; /* kv_node_now_ms() */
    size_t len;
    uint8_t buf[];
} held_frame;

struct kv_lease_fwd {
    kv_lease_fwd_deps d; /* copied at start; d.calls is static */
    uv_idle_t idle;
    uv_timer_t timer;
    int idle_on, timer_on, handles_open;
    fwd_batch *head, *tail;
    fwd_batch *open;  /* accepting this loop turn's requests, or NULL */
    fwd_batch *retry; /* accepting retries of "unknown lease" answers, or NULL */
    size_t pending, max_pending;
    size_t waiters, max_waiters; /* renewal waiters (coalesced ones included) */
    fwd_renew **index;           /* id -> pending renewal; nbuckets a power of two or 0 */
    size_t nbuckets, nrenew;
    uint64_t seed;
    uint64_t next_seq, timeout_ms;
    uint64_t resend_ms;    /* an answer lost on the way (connection reset, full queue): ask again */
    kv_list streams, ttls; /* owners (fwd_owner.link) */
    held_frame *held, *held_tail; /* leader: frames waiting for the applied index */
    size_t n_held;                /* bounded by max_pending */
    kv_metric *m_fwd, *m_batches, *m_shed, *m_resent, *m_timeouts, *m_served, *m_retried;
    kv_metric *m_coalesced, *m_held_refused;
    kv_metric *m_renew_latency, *m_batch_size; /* histograms (docs/metrics.md "Leases") */
};

/* ---- the id index of pending renewals (chained, grows at load 1) ---- */

static size_t bucket_of(const kv_lease_fwd *f, int64_t id)
{
    /* Ids are client-chosen: the hash is keyed with a per-forwarder seed. */
    return (size_t)(kv_mix64((uint64_t)id ^ f->seed) & (f->nbuckets - 1));
}

static fwd_renew *index_find(const kv_lease_fwd *f, int64_t id)
{
    if (f->nbuckets == 0)
        return NULL;
    for (fwd_renew *r = f->index[bucket_of(f, id)]; r; r = r->hnext)
        if (r->id == id)
            return r;
    return NULL;
}

static int index_add(kv_lease_fwd *f, fwd_renew *r)
{
    if (f->nrenew + 1 > f->nbuckets) {
        size_t nb = f->nbuckets ? f->nbuckets * 2 : 64;
        fwd_renew **idx = calloc(nb, sizeof(*idx));
        if (idx == NULL)
            return -ENOMEM;
        fwd_renew **old = f->index;
        size_t onb = f->nbuckets;
        f->index = idx;
        f->nbuckets = nb;
        for (size_t i = 0; i < onb; i++) {
            fwd_renew *x = old[i], *next;
            for (; x; x = next) {
                next = x->hnext;
                size_t b = bucket_of(f, x->id);
                x->hnext = idx[b];
                idx[b] = x;
            }
        }
        free(old);
    }
    size_t b = bucket_of(f, r->id);
    r->hnext = f->index[b];
    f->index[b] = r;
    f->nrenew++;
    return 0;
}

static void index_remove(kv_lease_fwd *f, fwd_renew *r)
{
    if (f->nbuckets == 0)
        return;
    for (fwd_renew **pp = &f->index[bucket_of(f, r->id)]; *pp; pp = &(*pp)->hnext)
        if (*pp == r) {
            *pp = r->hnext;
            f->nrenew--;
            break;
        }
    if (f->nrenew == 0) { /* idle: release the index */
        free(f->index);
        f->index = NULL;
        f->nbuckets = 0;
    }
}

/* ---- owners ---- */

static fwd_owner *owner_new(kv_lease_fwd *f, void *call, int stream)
{
    fwd_owner *o = calloc(1, sizeof(*o));
    if (o == NULL)
        return NULL;
    o->call = call;
    o->stream = stream ? 1u : 0u;
    kv_list_insert_head(o->stream ? &f->streams : &f->ttls, &o->link);
    return o;
}

static void owner_free(kv_lease_fwd *f, fwd_owner *o)
{
    (void)f;
    kv_list_remove(&o->link);
    free(o);
}

/* The call is gone (or ended by us): forget it; free once nothing refers to the owner. */
static void owner_detach(kv_lease_fwd *f, fwd_owner *o)
{
    if (o->call && o->stream)
        f->d.calls->set_owner(o->call, NULL);
    o->call = NULL;
    if (o->pending == 0)
        owner_free(f, o);
}

/* ---- completing requests ---- */

/* One request of owner o is complete: ends a half-closed stream after its last answer and
 * frees the owner once nothing refers to it. */
static void owner_put(kv_lease_fwd *f, fwd_owner *o)
{
    o->pending--;
    if (o->pending > 0)
        return;
    if (o->call && o->half_closed) {
        f->d.calls->set_owner(o->call, NULL);
        f->d.calls->finish_ok(o->call);
        o->call = NULL;
    }
    if (o->call == NULL)
        owner_free(f, o);
}

/* Answers one waiter of a renewal. A renewal that could not be answered in time (-ETIMEDOUT)
 * or that a bound refused (-EBUSY) on an open stream is dropped without an answer: an error
 * would end the stream and every other lease renewed on it; the client renews again on its
 * TTL/3 schedule. */
static void waiter_done(kv_lease_fwd *f, fwd_waiter *w, int64_t id, int status, int64_t ttl)
{
    fwd_owner *o = w->o;
    f->waiters--;
    if (o->call && (status == -ETIMEDOUT || status == -EBUSY) && !o->half_closed) {
        /* dropped (see above) */
    } else if (o->call) {
        /* done may end the call, and ending an HTTP gateway call frees it (the sink's
         * finish): the link is cut first and made again only while the stream stays open. */
        void *call = o->call;
        f->d.calls->set_owner(call, NULL);
        o->call = NULL;
        uint32_t i = 0;
        while (i < w->n && w->done(call, id, status, ttl) == 0 && ++i < w->n)
            ; /* one answer per renewal, as etcd's LeaseKeepAlive; stops if the call ended */
        if (i == w->n) {
            o->call = call;
            f->d.calls->set_owner(call, o);
            /* answered: one observation per renewal, timed from the waiter's first */
            for (uint32_t k = 0; status >= 0 && k < w->n; k++)
                kv_metric_observe(f->m_renew_latency, (double)(uv_hrtime() - w->t0_ns) / 1e9);
        }
    }
    owner_put(f, o);
}

static void item_done(kv_lease_fwd *f, fwd_item *it, int status, int64_t a, int64_t b)
{
    f->pending--;
    if (!it->ttl) {
        /* Out of the index first: a renewal arriving from here on starts a new forward. */
        fwd_renew *r = it->r;
        index_remove(f, r);
        fwd_waiter *w = r->waiters, *next;
        free(r);
        for (; w; w = next) {
            next = w->next;
            waiter_done(f, w, it->id, status, a);
            free(w);
        }
        return;
    }
    fwd_owner *o = it->o;
    if (o->call) {
        void *call = o->call;
        o->call = NULL; /* the unary call is answered or handed on by the callback */
        it->ttl_done(call, it->id, it->want_keys, status, a, b);
    }
    owner_put(f, o);
}

static void batch_unlink(kv_lease_fwd *f, fwd_batch *b)
{
    fwd_batch **pp = &f->head, *prev = NULL;
    while (*pp && *pp != b) {
        prev = *pp;
        pp = &(*pp)->next;
    }
    if (*pp == NULL)
        return;
    *pp = b->next;
    if (f->tail == b)
        f->tail = prev;
    if (f->open == b)
        f->open = NULL;
    if (f->retry == b)
        f->retry = NULL;
}

static int enqueue(kv_lease_fwd *f, const fwd_item *it, int retry);

/* The leader did not know lease it->id although this member's table has it: the leader may
 * not have applied the grant yet (a follower can apply an entry first), or this member has
 * not applied the revoke yet. Asks again a timer period later, while the table holds the
 * lease, at most RETRY_MAX times (a renewal keeps its waiters and stays in the index). 1 if
 * re-queued. */
static int retry_unknown(kv_lease_fwd *f, fwd_item *it)
{
    if (it->retries >= RETRY_MAX || !kv_lessor_exists(f->d.lessor, it->id))
        return 0;
    fwd_item copy = *it;
    copy.retries++;
    if (enqueue(f, &copy, 1) < 0)
        return 0;
    kv_metric_inc(f->m_retried);
    f->pending--; /* enqueue counted it again */
    return 1;
}

/* Completes every item of b with status (answers from `ans` if status is 0: index-aligned
 * renew TTLs and TimeToLive pairs) and frees b. */
static void batch_finish(kv_lease_fwd *f, fwd_batch *b, int status, const int64_t *ttls,
                         const int64_t *rem, const int64_t *granted)
{
    batch_unlink(f, b);
    size_t r = 0, t = 0;
    for (size_t i = 0; i < b->n; i++) {
        fwd_item *it = &b->items[i];
        if (status < 0)
            item_done(f, it, status, 0, 0);
        else if (it->ttl) {
            if (rem[t] >= 0 || !retry_unknown(f, it))
                item_done(f, it, 0, rem[t], granted[t]);
            t++;
        } else {
            if (ttls[r] > 0 || !retry_unknown(f, it))
                item_done(f, it, 0, ttls[r], 0);
            r++;
        }
    }
    free(b->items);
    free(b);
}

/* This member leads, serves leases and applied the batch's wait index: answer b from the
 * local lessor. */
static int batch_serve_local(kv_lease_fwd *f, fwd_batch *b)
{
    kv_lessor *l = f->d.lessor;
    if (!kv_lessor_is_primary(l) || !kv_node_lease_live(f->d.node, b->arrived_ms))
        return -EAGAIN;
    batch_unlink(f, b);
    for (size_t i = 0; i < b->n; i++) {
        fwd_item *it = &b->items[i];
        int64_t x = 0, y = 0;
        int rc;
        if (it->ttl) {
            rc = kv_lessor_time_to_live(l, it->id, &x, &y);
            if (rc == -ENOENT)
                x = -1, y = 0, rc = 0;
        } else {
            rc = kv_lessor_renew(l, it->id, &x);
            if (rc == -ENOENT)
                x = 0, rc = 0;
        }
        item_done(f, it, rc, x, y);
    }
    free(b->items);
    free(b);
    return 0;
}

/* ---- sending ---- */

static int batch_send(kv_lease_fwd *f, fwd_batch *b, uint64_t leader)
{
    size_t nr = b->n - b->n_ttl;
    int64_t *ids = malloc((nr ? nr : 1) * sizeof(*ids));
    int64_t *tids = malloc((b->n_ttl ? b->n_ttl : 1) * sizeof(*tids));
    uint8_t *buf = NULL;
    int rc = -ENOMEM;
    if (ids == NULL || tids == NULL)
        goto out;
    size_t r = 0, t = 0;
    for (size_t i = 0; i < b->n; i++) {
        if (b->items[i].ttl)
            tids[t++] = b->items[i].id;
        else
            ids[r++] = b->items[i].id;
    }
    Kvdraftpb__LeaseRenewBatch m = KVDRAFTPB__LEASE_RENEW_BATCH__INIT;
    m.seq = b->seq;
    m.ids = ids;
    m.n_ids = nr;
    m.ttl_ids = tids;
    m.n_ttl_ids = b->n_ttl;
    size_t len = kvdraftpb__lease_renew_batch__get_packed_size(&m);
    buf = malloc(len ? len : 1);
    if (buf == NULL)
        goto out;
    kvdraftpb__lease_renew_batch__pack(&m, buf);
    /* The priority queue: ahead of forwarded proposals and raft traffic. */
    rc = kv_node_peer_send_prio(f->d.node, leader, KV_LEASE_FWD_REQ, buf, len);
    if (rc == 0) {
        b->leader = leader;
        b->sent_at = uv_now(f->d.loop);
        kv_metric_inc(f->m_batches);
        kv_metric_add(f->m_fwd, (int64_t)b->n);
        if (nr)
            kv_metric_observe(f->m_batch_size, (double)nr);
    }
out:
    free(ids);
    free(tids);
    free(buf);
    return rc;
}

static void timer_ensure(kv_lease_fwd *f);

/* Sends (or serves locally, or fails) batch b according to the current leader. */
static void batch_dispatch(kv_lease_fwd *f, fwd_batch *b)
{
    kv_node *n = f->d.node;
    uint64_t leader = kv_node_leader(n);
    b->wait_index = 0;
    if (leader == 0)
        return; /* the timer retries until the bound */
    if (leader == kv_node_self(n)) {
        if (!kv_lessor_is_primary(f->d.lessor) || !kv_node_lease_live(n, b->arrived_ms))
            return; /* not serving yet, or not confirmed as leader since (node.h): the
                     * confirmation (on_applied) or the timer retries */
        /* etcd's waitAppliedIndex, once for the whole batch: answered when this member
         * applied its commit index as of now (on_applied), so the lessor has taken every
         * grant and revoke acknowledged before these requests arrived; renewals and TTLs
         * need only the lease entries (kv_node_lease_index), a TimeToLive with keys every
         * write (its keys come from the store). */
        int keys = 0;
        for (size_t i = 0; i < b->n && !keys; i++)
            keys = b->items[i].ttl && b->items[i].want_keys;
        uint64_t commit = keys ? kv_node_commit_index(n) : kv_node_lease_index(n);
        if (kv_node_applied_index(n) >= commit) {
            (void)batch_serve_local(f, b);
            return;
        }
        b->leader = leader;
        b->wait_index = commit;
        return;
    }
    /* Errors (the peer's priority queue is full, no connection yet, ...): the batch stays
     * unsent and the timer retries it until its time bound; then its renewals are dropped
     * without an answer (item_done), never ending a stream. */
    (void)batch_send(f, b, leader);
}

static void on_idle(uv_idle_t *h)
{
    kv_lease_fwd *f = h->data;
    uv_idle_stop(&f->idle);
    f->idle_on = 0;
    f->open = NULL;
    uint64_t now = uv_now(f->d.loop);
    fwd_batch *b = f->head;
    while (b) {
        fwd_batch *next = b->next;
        if (b->leader == 0 && b != f->retry && b->not_before <= now)
            batch_dispatch(f, b);
        b = next;
    }
    timer_ensure(f);
}

static void on_timer(uv_timer_t *h)
{
    kv_lease_fwd *f = h->data;
    kv_node *n = f->d.node;
    uint64_t now = uv_now(f->d.loop);
    uint64_t leader = kv_node_leader(n);
    fwd_batch *b = f->head;
    while (b) {
        fwd_batch *next = b->next;
        if (b == f->open || b->not_before > now) {
            b = next;
            continue;
        }
        if (b == f->retry)
            f->retry = NULL; /* closed: later retries start a new batch */
        if (now >= b->deadline) {
            /* Still no leader: "no leader" (a client may fail over); else a timeout. */
            kv_metric_add(f->m_timeouts, (int64_t)b->n);
            batch_finish(f, b, leader == 0 ? -EAGAIN : -ETIMEDOUT, NULL, NULL, NULL);
        } else if (b->leader == 0) {
            batch_dispatch(f, b);
        } else if (b->leader == leader && leader != kv_node_self(n) &&
                   now >= b->sent_at + f->resend_ms) {
            /* No answer for an election timeout from a leader that is still the leader: the
             * request or its answer was lost (a full priority queue drops frames). Ask again;
             * renewals and reads are idempotent and a late first answer also completes it. */
            b->leader = 0;
            kv_metric_inc(f->m_resent);
            batch_dispatch(f, b);
        } else if (leader != 0 && leader != b->leader) {
            /* Leader changed with the batch in flight: re-send once to the new leader. */
            if (b->resent) {
                batch_finish(f, b, -ETIMEDOUT, NULL, NULL, NULL);
            } else {
                b->resent = 1;
                b->leader = 0;
                b->deadline = now + f->timeout_ms;
                kv_metric_inc(f->m_resent);
                batch_dispatch(f, b);
            }
        }
        b = next;
    }
    if (f->head == NULL) {
        uv_timer_stop(&f->timer);
        f->timer_on = 0;
    }
}

static void timer_ensure(kv_lease_fwd *f)
{
    if (f->timer_on || f->head == NULL)
        return;
    uint64_t period = f->d.heartbeat_ms;
    if (period < 10)
        period = 10;
    if (period > 100)
        period = 100;
    uv_timer_start(&f->timer, on_timer, period, period);
    f->timer_on = 1;
}

/* ---- peer frames ---- */

static void on_resp(void *arg, uint64_t from, const uint8_t *buf, size_t len)
{
    kv_lease_fwd *f = arg;
    (void)from;
    Kvdraftpb__LeaseRenewResp *m = kvdraftpb__lease_renew_resp__unpack(NULL, len, buf);
    if (m == NULL)
        return;
    fwd_batch *b = f->head;
    while (b && b->seq != m->seq)
        b = b->next;
    if (b == NULL || b->leader == 0)
        goto out; /* late answer to a batch already answered, re-sent or failed */
    size_t nr = b->n - b->n_ttl;
    if (m->code != 0 || m->n_ttls != nr || m->n_ttl_remaining != b->n_ttl ||
        m->n_ttl_granted != b->n_ttl) {
        b->leader = 0; /* the leader does not serve leases yet: the timer retries */
        goto out;
    }
    batch_finish(f, b, 0, m->ttls, m->ttl_remaining, m->ttl_granted);
out:
    kvdraftpb__lease_renew_resp__free_unpacked(m, NULL);
}

static void serve_frame(kv_lease_fwd *f, uint64_t from, const uint8_t *buf, size_t len,
                        uint64_t arrived_ms, int refuse)
{
    int n = kv_lease_fwd_serve(f->d.node, f->d.lessor, from, buf, len, arrived_ms, refuse);
    if (n > 0)
        kv_metric_add(f->m_served, n);
}

/* Leader: a follower's batch. Answered at once if this member applied its commit index and
 * is confirmed as leader (node.h kv_node_lease_live), else held until both hold (on_applied):
 * a follower may have acknowledged a grant or revoke that the leader's lessor has not taken
 * yet, or that a leader elected without this one knowing has. Past max_pending held frames
 * the frame is refused (code EAGAIN): the follower asks again a timer period later. */
static void on_req(void *arg, uint64_t from, const uint8_t *buf, size_t len)
{
    kv_lease_fwd *f = arg;
    kv_node *n = f->d.node;
    /* the lease entries suffice: a follower reads a TimeToLive's keys itself, after a
     * ReadIndex barrier (service_lease.c) */
    uint64_t commit = kv_node_lease_index(n);
    uint64_t now = kv_node_now_ms();
    if (!kv_node_is_leader(n) || !kv_lessor_is_primary(f->d.lessor) ||
        (kv_node_applied_index(n) >= commit && kv_node_lease_live(n, now))) {
        serve_frame(f, from, buf, len, now, 0);
        return;
    }
    held_frame *h = NULL;
    if (f->n_held < f->max_pending)
        h = malloc(sizeof(*h) + (len ? len : 1));
    if (h != NULL)
        kv_lease_fwd_serve_early(f->d.lessor, buf, len);
    if (h == NULL) {
        kv_metric_inc(f->m_held_refused);
        serve_frame(f, from, buf, len, now, 1);
        return;
    }
    h->next = NULL;
    h->from = from;
    h->index = commit;
    h->arrived_ms = now;
    h->len = len;
    memcpy(h->buf, buf, len);
    if (f->held_tail)
        f->held_tail->next = h;
    else
        f->held = h;
    f->held_tail = h;
    f->n_held++;
}

/* The node applied up to `applied` (and the lessor took those entries): answers the held
 * frames and the local batches waiting for an index at or below it. Commit indexes only grow,
 * so the held frames are in index order. */
static void on_applied(void *arg, uint64_t applied)
{
    kv_lease_fwd *f = arg;
    kv_node *n = f->d.node;
    while (f->held && f->held->index <= applied) {
        held_frame *h = f->held;
        if (kv_node_is_leader(n) && kv_lessor_is_primary(f->d.lessor) &&
            !kv_node_lease_live(n, h->arrived_ms))
            break; /* held for the confirmation (it runs this hook) */
        f->held = h->next;
        if (f->held == NULL)
            f->held_tail = NULL;
        f->n_held--;
        serve_frame(f, h->from, h->buf, h->len, h->arrived_ms, 0);
        free(h);
    }
    uint64_t self = kv_node_self(n);
    fwd_batch *b = f->head;
    while (b) {
        fwd_batch *next = b->next;
        if (b->wait_index && b->leader == self && b->wait_index <= applied) {
            b->wait_index = 0;
            if (batch_serve_local(f, b) < 0)
                b->leader = 0; /* no longer serving: the timer retries */
        } else if (b->leader == 0 && b != f->open && b != f->retry &&
                   b->not_before <= uv_now(f->d.loop) && kv_node_leader(n) == self) {
            batch_dispatch(f, b); /* waited for the leadership confirmation (node.h) */
        }
        b = next;
    }
}

int kv_lease_fwd_current(const kv_lease_fwd *f, const kv_lessor *l, int keys)
{
    if (!kv_lessor_is_primary(l))
        return 0;
    if (f == NULL)
        return 1;
    kv_node *n = f->d.node;
    if (!kv_node_lease_live(n, kv_node_now_ms()))
        return 0; /* possibly deposed without knowing it: wait (node.h kv_node_lease_live) */
    return kv_node_applied_index(n) >= (keys ? kv_node_commit_index(n) : kv_node_lease_index(n));
}

static void on_frame_ignored(void *arg, uint64_t from, const uint8_t *buf, size_t len)
{
    (void)arg;
    (void)from;
    (void)buf;
    (void)len;
}

/* ---- queueing ---- */

/* Adds it to the open batch (retry: to the retry batch, sent a timer period later) and counts
 * it in f->pending; owners and waiters are the caller's. */
static int enqueue(kv_lease_fwd *f, const fwd_item *it, int retry)
{
    fwd_batch **slot = retry ? &f->retry : &f->open;
    fwd_batch *b = *slot;
    if (b == NULL || b->n == BATCH_MAX_ITEMS) {
        b = calloc(1, sizeof(*b));
        if (b == NULL)
            return -ENOMEM;
        b->seq = ++f->next_seq;
        b->deadline = uv_now(f->d.loop) + f->timeout_ms;
        if (retry)
            b->not_before = uv_now(f->d.loop) + 1;
        if (f->tail)
            f->tail->next = b;
        else
            f->head = b;
        f->tail = b;
        *slot = b;
    }
    if (b->n == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 16;
        fwd_item *items = realloc(b->items, cap * sizeof(*items));
        if (items == NULL)
            return -ENOMEM;
        b->items = items;
        b->cap = cap;
    }
    b->items[b->n] = *it;
    b->n++;
    b->arrived_ms = kv_node_now_ms();
    if (it->ttl)
        b->n_ttl++;
    f->pending++;
    if (retry)
        timer_ensure(f);
    else if (!f->idle_on) {
        uv_idle_start(&f->idle, on_idle);
        f->idle_on = 1;
    }
    return 0;
}

static int shed(kv_lease_fwd *f)
{
    kv_metric_inc(f->m_shed);
    return -EBUSY;
}

/* Adds a waiter (o, done) to renewal r. */
static int waiter_add(kv_lease_fwd *f, fwd_renew *r, fwd_owner *o, kv_lease_fwd_renew_fn done)
{
    fwd_waiter *w = malloc(sizeof(*w));
    if (w == NULL)
        return -ENOMEM;
    w->o = o;
    w->done = done;
    w->n = 1;
    w->t0_ns = uv_hrtime();
    w->next = r->waiters;
    r->waiters = w;
    o->pending++;
    f->waiters++;
    return 0;
}

/* Queues (or joins) the renewal of id for stream owner o. */
static int renew_owner(kv_lease_fwd *f, fwd_owner *o, int64_t id, kv_lease_fwd_renew_fn done)
{
    fwd_renew *r = index_find(f, id);
    if (r != NULL) {
        /* Coalesced: one forward per lease id, whatever the number of renewals. A stream
         * that waits on it already counts one more renewal in its waiter, which costs no
         * waiter slot (a stream renewing one lease in a loop cannot take the bound) and is
         * answered with the others: etcd answers every LeaseKeepAliveRequest. */
        for (fwd_waiter *w = r->waiters; w; w = w->next)
            if (w->o == o) {
                if (w->n < UINT32_MAX)
                    w->n++;
                kv_metric_inc(f->m_coalesced);
                return 0;
            }
        if (f->waiters >= f->max_waiters)
            return shed(f);
        int rc = waiter_add(f, r, o, done);
        if (rc == 0)
            kv_metric_inc(f->m_coalesced);
        return rc;
    }
    if (f->pending >= f->max_pending || f->waiters >= f->max_waiters)
        return shed(f);
    r = calloc(1, sizeof(*r));
    if (r == NULL)
        return -ENOMEM;
    r->id = id;
    int rc = index_add(f, r);
    if (rc < 0)
        goto fail;
    fwd_item it = {.r = r, .id = id};
    rc = enqueue(f, &it, 0);
    if (rc < 0) {
        index_remove(f, r);
        goto fail;
    }
    /* queued: without a waiter (ENOMEM) the answer goes to nobody */
    return waiter_add(f, r, o, done);
fail:
    free(r);
    return rc;
}

int kv_lease_fwd_renew(kv_lease_fwd *f, void *call, int64_t id, kv_lease_fwd_renew_fn done)
{
    if (f == NULL || f->handles_open == 0)
        return -EAGAIN;
    fwd_owner *o = f->d.calls->get_owner(call);
    int fresh = 0;
    if (o == NULL) {
        o = owner_new(f, call, 1);
        if (o == NULL)
            return -ENOMEM;
        f->d.calls->set_owner(call, o);
        fresh = 1;
    }
    int rc = renew_owner(f, o, id, done);
    if (rc < 0 && fresh && o->pending == 0)
        owner_detach(f, o);
    return rc;
}

int kv_lease_fwd_ttl(kv_lease_fwd *f, void *call, int64_t id, int want_keys,
                     kv_lease_fwd_ttl_fn done)
{
    if (f == NULL || f->handles_open == 0)
        return -EAGAIN;
    if (f->pending >= f->max_pending)
        return shed(f);
    fwd_owner *o = owner_new(f, call, 0);
    if (o == NULL)
        return -ENOMEM;
    fwd_item it = {.o = o, .id = id, .ttl = 1, .want_keys = want_keys ? 1u : 0u, .ttl_done = done};
    int rc = enqueue(f, &it, 0);
    if (rc < 0) {
        owner_detach(f, o);
        return rc;
    }
    o->pending++;
    return 0;
}

int kv_lease_fwd_call_gone(kv_lease_fwd *f, void *call)
{
    if (f == NULL)
        return 0;
    fwd_owner *o = f->d.calls->get_owner(call);
    if (o == NULL)
        return 0;
    owner_detach(f, o);
    return 1;
}

int kv_lease_fwd_ttl_gone(kv_lease_fwd *f, void *call)
{
    if (f == NULL)
        return 0;
    kv_list *e;
    kv_list_foreach(e, &f->ttls) {
        fwd_owner *o = kv_list_data(e, fwd_owner, link);
        if (o->call == call) {
            owner_detach(f, o);
            return 1;
        }
    }
    return 0;
}

int kv_lease_fwd_half_close(kv_lease_fwd *f, void *call)
{
    if (f == NULL)
        return 0;
    fwd_owner *o = f->d.calls->get_owner(call);
    if (o == NULL)
        return 0;
    if (o->pending == 0) {
        owner_detach(f, o);
        return 0;
    }
    o->half_closed = 1;
    return 1;
}

size_t kv_lease_fwd_pending(const kv_lease_fwd *f)
{
    return f ? f->pending : 0;
}

/* ---- lifecycle ---- */

static double gauge_pending(void *arg)
{
    return (double)kv_lease_fwd_pending(arg);
}

static double gauge_held(void *arg)
{
    return (double)((const kv_lease_fwd *)arg)->n_held;
}

kv_metric *kv_lease_renewal_histogram(kv_metrics *m, const char *path)
{
    double b[17];
    kv_metrics_exp_buckets(b, 0.0001, 2, 17); /* 100 us .. 6.6 s */
    char l[48];
    snprintf(l, sizeof(l), "path=\"%s\"", path);
    return kv_metrics_histogram(m, "kvd_lease_renewal_duration_seconds",
                                "LeaseKeepAlive renewals from receipt to answer on this member, by "
                                "path (local lessor or forwarded to the leader).",
                                l, b, 17);
}

static void register_metrics(kv_lease_fwd *f)
{
    kv_metrics *m = f->d.metrics;
    if (m == NULL)
        return;
    f->m_renew_latency = kv_lease_renewal_histogram(m, "forwarded");
    double bs[14];
    kv_metrics_exp_buckets(bs, 1, 2, 14); /* 1 .. 8192 (BATCH_MAX_ITEMS) */
    f->m_batch_size = kv_metrics_histogram(
        m, "kvd_lease_fwd_batch_renewals",
        "Renewals per peer frame a follower forwards to the leader (LeaseRenewBatch).", NULL, bs,
        14);
    f->m_fwd = kv_metrics_counter(m, "kvd_lease_fwd_renewals_total",
                                  "Renewals and TimeToLive queries forwarded to the leader.", NULL);
    f->m_batches = kv_metrics_counter(m, "kvd_lease_fwd_batches_total",
                                      "Peer frames carrying forwarded lease requests.", NULL);
    f->m_shed = kv_metrics_counter(
        m, "kvd_lease_fwd_shed_total",
        "Lease requests refused (a keepalive stream's renewal dropped without an answer): "
        "--max-pending-lease-forwards reached.",
        NULL);
    f->m_coalesced = kv_metrics_counter(
        m, "kvd_lease_fwd_coalesced_total",
        "Renewals that joined the pending forward of the same lease instead of a new one.", NULL);
    f->m_resent = kv_metrics_counter(
        m, "kvd_lease_fwd_resent_total",
        "Forwarded batches re-sent: a leader change, a lost peer connection, or no answer "
        "within an election timeout.",
        NULL);
    f->m_timeouts = kv_metrics_counter(m, "kvd_lease_fwd_timeouts_total",
                                       "Forwarded lease requests that timed out.", NULL);
    f->m_served = kv_metrics_counter(m, "kvd_lease_fwd_served_total",
                                     "Forwarded lease requests answered as leader.", NULL);
    f->m_retried = kv_metrics_counter(
        m, "kvd_lease_fwd_retried_total",
        "Forwarded requests asked again: the leader had not applied the lease's grant yet.", NULL);
    kv_metrics_gauge_fn(m, "kvd_lease_fwd_pending",
                        "Lease requests queued or in flight to the leader.", gauge_pending, f);
    kv_metrics_gauge_fn(m, "kvd_lease_fwd_held",
                        "Leader: followers' lease batches waiting for the applied index.",
                        gauge_held, f);
    f->m_held_refused = kv_metrics_counter(
        m, "kvd_lease_fwd_held_refused_total",
        "Leader: followers' lease batches refused (asked again): --max-pending-lease-forwards "
        "batches already wait for the applied index.",
        NULL);
}

int kv_lease_fwd_start(kv_lease_fwd **out, const kv_lease_fwd_deps *d)
{
    *out = NULL;
    kv_lease_fwd *f = calloc(1, sizeof(*f));
    if (f == NULL)
        return -ENOMEM;
    f->d = *d;
    kv_list_init(&f->streams);
    kv_list_init(&f->ttls);
    f->max_pending = d->max_pending ? d->max_pending : 65536;
    /* Waiters: one per distinct lease plus as many renewals joined from other streams. */
    f->max_waiters = 2 * f->max_pending;
    f->seed = (uint64_t)uv_hrtime() * 0x9e3779b97f4a7c15ull ^ (uint64_t)(uintptr_t)f;
    uint64_t election_ms = d->election_ms ? d->election_ms : 1000;
    /* etcd's request timeout (ReqTimeout: 5 s + 2 election timeouts), its bound on a
     * forwarded LeaseRenew: it covers an election (one to two election timeouts) and a slow
     * link. A shorter bound drops every renewal whose round trip exceeds it, so a client on a
     * follower gets no answer for a whole TTL although the leader renewed (and then gives
     * the lease up). */
    f->timeout_ms = 5000ull + 2ull * election_ms;
    /* One election timeout: within a lease's minimum TTL (1.5 election timeouts, as etcd's
     * minLeaseTTL), so a lost answer is asked again before the lease could lapse. */
    f->resend_ms = election_ms;
    uv_idle_init(d->loop, &f->idle);
    uv_timer_init(d->loop, &f->timer);
    f->idle.data = f;
    f->timer.data = f;
    f->handles_open = 2;
    register_metrics(f);
    kv_node_set_peer_handler(d->node, KV_LEASE_FWD_REQ, on_req, f);
    kv_node_set_peer_handler(d->node, KV_LEASE_FWD_RESP, on_resp, f);
    kv_node_set_applied_hook(d->node, on_applied, f);
    *out = f;
    return 0;
}

void kv_lease_fwd_peer_down(kv_lease_fwd *f, uint64_t id)
{
    if (f == NULL || id == kv_node_self(f->d.node))
        return;
    /* Frames queued to or from that member were dropped with its connection: what was in
     * flight there is asked again (to it once it is back, or to a new leader). */
    for (fwd_batch *b = f->head; b; b = b->next)
        if (b->leader == id) {
            b->leader = 0;
            kv_metric_inc(f->m_resent);
        }
    timer_ensure(f);
}

static void on_handle_closed(uv_handle_t *h)
{
    kv_lease_fwd *f = h->data;
    if (--f->handles_open == 0) {
        free(f->index); /* NULL unless a renewal outlived its batch (never, by construction) */
        free(f);
    }
}

void kv_lease_fwd_stop(kv_lease_fwd *f)
{
    if (f == NULL)
        return;
    kv_node_set_peer_handler(f->d.node, KV_LEASE_FWD_REQ, on_frame_ignored, NULL);
    kv_node_set_peer_handler(f->d.node, KV_LEASE_FWD_RESP, on_frame_ignored, NULL);
    kv_node_set_applied_hook(f->d.node, NULL, NULL);
    while (f->held) { /* unanswered: the followers time them out */
        held_frame *h = f->held;
        f->held = h->next;
        free(h);
    }
    f->held_tail = NULL;
    f->n_held = 0;
    while (f->head)
        batch_finish(f, f->head, -ECANCELED, NULL, NULL, NULL);
    while (!kv_list_empty(&f->streams))
        owner_detach(f, kv_list_data(kv_list_head(&f->streams), fwd_owner, link));
    while (!kv_list_empty(&f->ttls))
        owner_detach(f, kv_list_data(kv_list_head(&f->ttls), fwd_owner, link));
    if (f->d.metrics)
        kv_metrics_gauge_fn_remove(f->d.metrics, f);
    uv_close((uv_handle_t *)&f->idle, on_handle_closed);
    uv_close((uv_handle_t *)&f->timer, on_handle_closed);
}
