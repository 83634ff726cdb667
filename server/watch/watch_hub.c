/* watch_hub: synced/unsynced groups, slice delivery from LMDB, catch-up (see watch_hub.h). */
#include "watch/watch_int.h"

#include "common/varint.h"
#include "mvcc/events.h"
#include "pb/pb_fragment.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SYNC_BATCH_WATCHERS 512      /* etcd maxWatchersPerSync */
#define SYNC_TURN_NS 4000000ull      /* catch-up work per timer turn: 4 ms */
#define NOTIFY_TURN_NS 20000000ull   /* live delivery per commit: 20 ms and ... */
#define NOTIFY_TURN_BYTES (8u << 20) /* ... 8 MiB of responses; the rest catches up */
#define TURN_BYTES                                                                                 \
    (256u << 10)            /* response bytes queued per turn: the transport writes them           \
                              in the same loop turn, so this bounds that too */
#define SYNC_POLL_MIN_MS 1  /* waiting for streams to drain: 1 ms, doubling ... */
#define SYNC_POLL_MAX_MS 64 /* ... up to 64 ms while no stream has room */

void kv_watch_config_default(kv_watch_config *c)
{
    c->max_watchers_per_stream = 10000;
    c->max_streams_per_conn = 1000;
    c->stream_send_buffer_bytes = 1u << 20;
    c->max_response_bytes = 1536 * 1024;
    c->slice_bytes = 256 * 1024;
    c->slice_revs = 1000;
    c->progress_interval_ms = 600000;
    c->fp_drop_event_at = 0; /* failpoint off (watch_failpoint.c) */
}

/* ---- lists ---- */

void kv_wlist_push(wlist *l, kv_watcher *w)
{
    kv_list_insert_tail(&l->list, &w->glink);
    l->n++;
}

void kv_wlist_remove(wlist *l, kv_watcher *w)
{
    kv_list_remove(&w->glink);
    l->n--;
}

static int keycmp(const uint8_t *a, size_t al, const uint8_t *b, size_t bl)
{
    size_t n = al < bl ? al : bl;
    int c = n ? memcmp(a, b, n) : 0;
    if (c)
        return c;
    return al < bl ? -1 : al > bl ? 1 : 0;
}

bool kv_watch_match(const kv_watcher *w, const uint8_t *key, size_t klen)
{
    switch (w->kind) {
    case R_SINGLE:
        return klen == w->klen && memcmp(key, w->key, klen) == 0;
    case R_FROM:
        return keycmp(key, klen, w->key, w->klen) >= 0;
    default:
        return keycmp(key, klen, w->key, w->klen) >= 0 && keycmp(key, klen, w->end, w->elen) < 0;
    }
}

/* ---- sending ---- */

static void fill_header(const kv_watch_hub *h, Etcdserverpb__ResponseHeader *hd, int64_t rev)
{
    hd->cluster_id = h->hdr->cluster_id;
    hd->member_id = h->hdr->member_id;
    hd->raft_term = h->hdr->raft_term;
    hd->revision = rev;
}

static int pack_send(kv_watch_stream *st, const Etcdserverpb__WatchResponse *r)
{
    uint8_t small[512];
    size_t len = etcdserverpb__watch_response__get_packed_size(r);
    uint8_t *buf = len <= sizeof(small) ? small : malloc(len);
    if (buf == NULL)
        return -ENOMEM;
    etcdserverpb__watch_response__pack(r, buf);
    int rc = st->ops->send(st->sink, buf, len);
    if (buf != small)
        free(buf);
    return rc;
}

static void on_sync_idle(uv_idle_t *i);

/* A send on st failed for good: nothing more is delivered, and the owner hears of it on the
 * next loop turn (ops->failed; never from here: this runs inside a send or a delivery). */
static void set_broken(kv_watch_stream *st, int err)
{
    kv_watch_hub *h = st->hub;
    if (st->broken)
        return;
    st->broken = true;
    if (!st->ops->failed || h->closing)
        return;
    st->fail_due = true;
    st->fail_err = err;
    kv_list_insert_tail(&h->failed, &st->flink);
    uv_idle_start(&h->sync_idle, on_sync_idle); /* no-op when active */
}

void kv_watch_stream_unfail(kv_watch_stream *st)
{
    if (st->fail_due) {
        st->fail_due = false;
        kv_list_remove(&st->flink);
    }
}

/* Tells the owners of the streams whose send failed (each may close its stream). */
static void notify_failed(kv_watch_hub *h)
{
    kv_list *e;
    while ((e = kv_list_head(&h->failed))) {
        kv_watch_stream *st = kv_list_data(e, kv_watch_stream, flink);
        kv_watch_stream_unfail(st);
        st->ops->failed(st->sink, st->fail_err);
    }
}

int kv_watch_send_ctrl(kv_watch_stream *st, Etcdserverpb__WatchResponse *r, int64_t hdr_rev)
{
    if (st->broken)
        return -ECONNRESET;
    if (st->ops->queued(st->sink) > 2 * st->hub->cfg.stream_send_buffer_bytes)
        return -ENOBUFS;
    Etcdserverpb__ResponseHeader hd = ETCDSERVERPB__RESPONSE_HEADER__INIT;
    fill_header(st->hub, &hd, hdr_rev);
    r->header = &hd;
    int rc = pack_send(st, r);
    r->header = NULL;
    if (rc < 0 && rc != -ENOBUFS)
        set_broken(st, rc);
    return rc;
}

/* A response may be queued while the stream's unsent bytes are at most half its bound (or it
 * fits): a stream holds at most bound/2 + one response (one slice, or one batch revision). The
 * catch-up uses the same test to pick watchers, so a picked watcher can always take its slice. */
static bool has_room(const kv_watch_stream *st, size_t len)
{
    size_t q = st->ops->queued(st->sink), lim = st->hub->cfg.stream_send_buffer_bytes;
    return q <= lim / 2 || q + len <= lim;
}

/* The event's field-11 bytes, packed on first use. NULL on out-of-memory. */
static const uint8_t *slice_wire(slice_ev *e, bool prev, size_t *len)
{
    uint8_t **wp = prev ? &e->wirep : &e->wire;
    size_t *lp = prev ? &e->wirep_len : &e->wire_len;
    if (*wp == NULL) {
        const Mvccpb__Event *ev = prev ? &e->evp : &e->ev;
        size_t l = mvccpb__event__get_packed_size(ev);
        uint8_t *b = malloc(1 + 10 + l);
        if (b == NULL)
            return NULL;
        b[0] = (11 << 3) | 2;
        uint8_t *p = b + 1 + kv_varint_put(b + 1, l);
        mvccpb__event__pack(ev, p);
        *wp = b;
        *lp = (size_t)(p - b) + l;
    }
    *len = *lp;
    return *wp;
}

/* Builds the response from the events' pre-packed bytes (same bytes protobuf-c would produce:
 * header, watch_id, events) and sends it. 0, 1 no room, < 0 error. */
static int send_prepacked(kv_watch_hub *h, kv_watcher *w, slice_ev **es, Mvccpb__Event **evs,
                          size_t n, const uint8_t *hdr, size_t hlen, size_t total)
{
    if (total > h->cap_obuf) {
        size_t cap = h->cap_obuf ? h->cap_obuf : 4096;
        while (cap < total)
            cap *= 2;
        uint8_t *b = realloc(h->obuf, cap);
        if (b == NULL)
            return -ENOMEM;
        h->obuf = b;
        h->cap_obuf = cap;
    }
    uint8_t *p = h->obuf;
    *p++ = (1 << 3) | 2;
    p += kv_varint_put(p, hlen);
    memcpy(p, hdr, hlen);
    p += hlen;
    if (w->id != 0) {
        *p++ = 2 << 3;
        p += kv_varint_put(p, (uint64_t)w->id);
    }
    for (size_t i = 0; i < n; i++) {
        size_t l = 0;
        const uint8_t *b = slice_wire(es[i], evs[i] == &es[i]->evp, &l);
        if (b == NULL) /* packed while the total was computed; out of memory otherwise */
            return -ENOMEM;
        memcpy(p, b, l);
        p += l;
    }
    return w->st->ops->send(w->st->sink, h->obuf, (size_t)(p - h->obuf));
}

/* rev became visible now (kv_watch_hub_notify). */
static void lag_note(kv_watch_hub *h, int64_t rev)
{
    size_t i = (h->lag_head + h->lag_n) % KV_WATCH_LAG_NOTES;
    if (h->lag_n == KV_WATCH_LAG_NOTES)
        h->lag_head = (h->lag_head + 1) % KV_WATCH_LAG_NOTES;
    else
        h->lag_n++;
    h->lag_notes[i].rev = rev;
    h->lag_notes[i].t_ns = uv_hrtime();
}

/* The delivery lag of a response to w whose oldest event has revision rev: since rev became
 * visible here (the first note at or after it; the oldest note when rev predates them all),
 * or since w was added if that is later (a watcher asking for history is not late). */
static void lag_observe(kv_watch_hub *h, const kv_watcher *w, int64_t rev)
{
    if (!h->m_lag || h->lag_n == 0)
        return;
    size_t lo = 0, hi = h->lag_n; /* first note with rev >= rev */
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (h->lag_notes[(h->lag_head + mid) % KV_WATCH_LAG_NOTES].rev < rev)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == h->lag_n)
        return; /* not visible yet: cannot be */
    uint64_t t = h->lag_notes[(h->lag_head + lo) % KV_WATCH_LAG_NOTES].t_ns;
    if (w->added_ns > t)
        t = w->added_ns;
    uint64_t now = uv_hrtime();
    kv_metric_observe(h->m_lag, now > t ? (double)(now - t) / 1e9 : 0.0);
}

/* Sends evs[0..n) (events of slice entries es[0..n)) to w. 0 sent, 1 no room (nothing sent),
 * < 0 stream broken. */
static int send_events(kv_watch_hub *h, kv_watcher *w, slice_ev **es, Mvccpb__Event **evs, size_t n)
{
    kv_watch_stream *st = w->st;
    Etcdserverpb__WatchResponse r = ETCDSERVERPB__WATCH_RESPONSE__INIT;
    Etcdserverpb__ResponseHeader hd = ETCDSERVERPB__RESPONSE_HEADER__INIT;
    fill_header(h, &hd, h->cur_rev);
    r.header = &hd;
    r.watch_id = w->id;
    r.events = evs;
    r.n_events = n;
    uint8_t hdr[64];
    size_t hlen = etcdserverpb__response_header__pack(&hd, hdr);
    size_t total =
        1 + kv_varint_len(hlen) + hlen + (w->id ? 1 + kv_varint_len((uint64_t)w->id) : 0);
    for (size_t i = 0; i < n; i++) {
        size_t l;
        if (slice_wire(es[i], evs[i] == &es[i]->evp, &l) == NULL)
            return 1; /* out of memory: retried by the catch-up */
        total += l;
    }
    if (!has_room(st, total))
        return 1;
    int rc;
    if (!w->fragment || total < h->cfg.max_response_bytes || n < 2) {
        rc = send_prepacked(h, w, es, evs, n, hdr, hlen, total);
    } else {
        /* etcd sendFragments: as many events as fit (at least one), fragment=true on all but
         * the last message. */
        r.fragment = 1;
        r.n_events = 0;
        size_t base = etcdserverpb__watch_response__get_packed_size(&r);
        size_t idx = 0;
        rc = 0;
        while (idx < n && rc == 0) {
            size_t k = kv_pb_fragment_events(evs + idx, n - idx, base, h->cfg.max_response_bytes);
            r.events = evs + idx;
            r.n_events = k;
            idx += k;
            r.fragment = idx < n;
            rc = pack_send(st, &r);
            if (rc == -ENOBUFS && idx > k) {
                /* the connection filled up between fragments: resending would duplicate
                 * the fragments already queued, so this stream gets nothing more */
                rc = -ECONNRESET;
            }
        }
    }
    if (rc == -ENOBUFS)
        return 1;
    if (rc < 0) {
        set_broken(st, rc);
        return rc;
    }
    h->st.events_sent += n;
    h->turn_bytes += total;
    if (n > 0)
        lag_observe(h, w, es[0]->main);
    kv_metric_add(h->m_events, (int64_t)n);
    if (n > 0)
        w->progress_due = false;
    return 0;
}

/* A synced watcher was offered every revision below h->synced_next (only matched watchers'
 * next_rev is advanced by live delivery): catch-up resumes there. */
static void to_unsynced(kv_watch_hub *h, kv_watcher *w)
{
    if (w->state == W_SYNCED) {
        if (w->next_rev < h->synced_next)
            w->next_rev = h->synced_next;
        kv_widx_remove(&h->idx, w);
        kv_wlist_remove(&h->synced, w);
        w->state = W_UNSYNCED;
        kv_wlist_push(&h->unsynced, w);
    }
}

static void to_synced(kv_watch_hub *h, kv_watcher *w)
{
    if (w->state == W_UNSYNCED) {
        kv_wlist_remove(&h->unsynced, w);
        w->state = W_SYNCED;
        kv_wlist_push(&h->synced, w);
        kv_widx_add(&h->idx, w);
    }
}

void kv_watch_hub_detach(kv_watch_hub *h, kv_watcher *w)
{
    if (w->state == W_SYNCED) {
        kv_widx_remove(&h->idx, w);
        kv_wlist_remove(&h->synced, w);
    } else if (w->state == W_UNSYNCED)
        kv_wlist_remove(&h->unsynced, w);
    w->state = W_DEAD;
}

static void on_sync_timer(uv_timer_t *t);

/* Schedules catch-up: delay 0 = next loop turn (an idle handle: a 0 ms libuv timer re-armed
 * from its own callback would run again in the same timer phase and starve I/O), otherwise a
 * timer unless a wake-up is already pending. */
static void arm_sync(kv_watch_hub *h, uint64_t delay_ms)
{
    if (h->closing || h->unsynced.n == 0)
        return;
    if (delay_ms == 0) {
        if (h->sync_armed) {
            uv_timer_stop(&h->sync_timer);
            h->sync_armed = false;
        }
        uv_idle_start(&h->sync_idle, on_sync_idle); /* no-op when active */
        return;
    }
    if (h->sync_armed || uv_is_active((uv_handle_t *)&h->sync_idle))
        return; /* an earlier wake-up is pending */
    h->sync_armed = true;
    uv_timer_start(&h->sync_timer, on_sync_timer, delay_ms, 0);
}

/* Compacted: etcd sends WatchResponse{CompactRevision} (header revision 0, canceled) and
 * drops the watcher from its group; its id stays taken until the client cancels it.
 * Returns 1 when sent (watcher dead), 0 when the stream has no room yet. */
static int send_compacted(kv_watch_hub *h, kv_watcher *w, int64_t compact_rev)
{
    Etcdserverpb__WatchResponse r = ETCDSERVERPB__WATCH_RESPONSE__INIT;
    r.watch_id = w->id;
    r.compact_revision = compact_rev;
    r.canceled = 1;
    if (!has_room(w->st, 64))
        return 0;
    int rc = kv_watch_send_ctrl(w->st, &r, 0);
    if (rc == -ENOBUFS)
        return 0;
    kv_watch_hub_detach(h, w);
    h->st.compacted_total++;
    return 1;
}

/* ---- slices ---- */

static void slice_clear(kv_watch_hub *h)
{
    for (size_t i = 0; i < h->n_ev; i++) {
        slice_ev *e = &h->ev[i];
        if (e->evp.prev_kv)
            mvccpb__key_value__free_unpacked(e->evp.prev_kv, NULL);
        free(e->wire);
        free(e->wirep);
        mvccpb__key_value__free_unpacked(e->kv, NULL);
    }
    h->n_ev = 0;
}

static int slice_add(void *arg, const kv_store_event *ev)
{
    kv_watch_hub *h = arg;
    if (h->n_ev == h->cap_ev) {
        size_t cap = h->cap_ev ? h->cap_ev * 2 : 256;
        slice_ev *n = realloc(h->ev, cap * sizeof(*n));
        if (n == NULL)
            return -ENOMEM;
        h->ev = n;
        h->cap_ev = cap;
    }
    Mvccpb__KeyValue *kv = mvccpb__key_value__unpack(NULL, ev->kv_len, ev->kv);
    if (kv == NULL)
        return -EBADMSG;
    if (ev->tomb)
        kv->mod_revision = ev->main; /* etcd patches the deleting revision in */
    slice_ev *e = &h->ev[h->n_ev++];
    memset(e, 0, sizeof(*e));
    e->kv = kv;
    e->main = ev->main;
    mvccpb__event__init(&e->ev);
    e->ev.type = ev->tomb ? MVCCPB__EVENT__EVENT_TYPE__DELETE : MVCCPB__EVENT__EVENT_TYPE__PUT;
    e->ev.kv = kv;
    e->evp = e->ev;
    return 0;
}

static int ensure_out(kv_watch_hub *h, size_t n)
{
    if (n <= h->cap_out)
        return 0;
    Mvccpb__Event **o = realloc(h->out, n * sizeof(*o));
    if (o == NULL)
        return -ENOMEM;
    h->out = o;
    slice_ev **os = realloc(h->outs, n * sizeof(*os));
    if (os == NULL)
        return -ENOMEM;
    h->outs = os;
    h->cap_out = n;
    return 0;
}

/* Delivers the slice [from, last] (already read into h->ev) to the watchers in set whose
 * next_rev lies in it (a watcher with next_rev < from missed an earlier slice: skipped).
 * lo/hi (live delivery; NULL: every event) bound the events of h->ev that can match set[i]:
 * lo[i]..hi[i]. Victims move to unsynced. Returns the number of watchers that advanced. */
static size_t deliver(kv_watch_hub *h, kv_store_reader *rd, kv_watcher **set, size_t n,
                      int64_t from, int64_t last, const uint32_t *lo, const uint32_t *hi)
{
    if (ensure_out(h, h->n_ev) < 0) {
        fprintf(stderr, "kvd: warning: watch: out of memory delivering events; retrying later\n");
        for (size_t i = 0; i < n; i++)
            if (set[i]->state == W_SYNCED && set[i]->next_rev <= last)
                to_unsynced(h, set[i]);
        return 0;
    }
    size_t advanced = 0;
    for (size_t i = 0; i < n; i++) {
        kv_watcher *w = set[i];
        if (w->state == W_DEAD || w->st->broken || w->next_rev > last || w->next_rev < from)
            continue;
        if (h->deadline_ns && (uv_hrtime() > h->deadline_ns || h->turn_bytes > h->turn_bytes_max))
            h->over_budget = true;
        if (h->over_budget) {
            /* Out of time for this loop turn: the rest is caught up from LMDB later, so a
             * burst of deliveries never holds the loop (writes, keepalives) for long. */
            to_unsynced(h, w);
            continue;
        }
        size_t k = 0, j0 = lo ? lo[i] : 0, j1 = hi ? (size_t)hi[i] + 1 : h->n_ev;
        for (size_t j = j0; j < j1; j++) {
            slice_ev *e = &h->ev[j];
            if (e->main < w->next_rev || !kv_watch_match(w, e->kv->key.data, e->kv->key.len))
                continue;
            bool del = e->ev.type == MVCCPB__EVENT__EVENT_TYPE__DELETE;
            if ((del && w->nodelete) || (!del && w->noput))
                continue;
            if (w->prev_kv) {
                if (!e->prev_loaded) {
                    e->prev_loaded = true;
                    Mvccpb__KeyValue *p = NULL;
                    if (kv_store_kv_at(h->store, rd, e->kv->key.data, e->kv->key.len,
                                       e->kv->mod_revision - 1, &p) == 0)
                        e->evp.prev_kv = p;
                }
                h->outs[k] = e;
                h->out[k++] = &e->evp;
            } else {
                h->outs[k] = e;
                h->out[k++] = &e->ev;
            }
        }
        if (h->cfg.fp_drop_event_at)
            k = kv_watch_fp_filter(h, k);
        int rc = k ? send_events(h, w, h->outs, h->out, k) : 0;
        if (rc == 1) {
            if (w->state == W_SYNCED) {
                h->st.slow_total++;
                kv_metric_inc(h->m_slow);
                to_unsynced(h, w);
            }
            continue;
        }
        if (rc == 0) {
            w->next_rev = last + 1;
            advanced++;
        }
    }
    return advanced;
}

/* Catch-up: reads one slice of [from, to] (at most slice_bytes) and delivers it to set.
 * The slice stays in memory (bounded by slice_bytes), so watchers that had no room for it are
 * served from it next turn without reading LMDB again. History below the committed revision
 * never changes (compaction only removes records; "compacted" is decided from the store's
 * compact revision). Returns 0 or a negative error. */
static int run_slice(kv_watch_hub *h, kv_store_reader *rd, kv_watcher **set, size_t n, int64_t from,
                     int64_t to, size_t *advanced)
{
    *advanced = 0;
    int64_t last;
    if (h->cache_valid && h->cache_from == from &&
        (h->cache_last < h->cache_to || h->cache_to == to)) {
        last = h->cache_last;
    } else {
        slice_clear(h);
        h->cache_valid = false;
        int rc = kv_store_events(h->store, rd, from, to, h->cfg.slice_bytes, slice_add, h, &last);
        if (rc < 0) {
            slice_clear(h);
            return rc;
        }
        h->st.slices++;
        h->cache_valid = true;
        h->cache_from = from;
        h->cache_to = to;
        h->cache_last = last;
    }
    *advanced = deliver(h, rd, set, n, from, last, NULL, NULL);
    return 0;
}

static int ensure_set(kv_watch_hub *h, size_t n)
{
    if (n <= h->cap_set)
        return 0;
    size_t cap = h->cap_set ? h->cap_set : 64;
    while (cap < n)
        cap *= 2;
    kv_watcher **s = realloc(h->set, cap * sizeof(*s));
    if (s == NULL)
        return -ENOMEM;
    h->set = s;
    uint32_t *lo = realloc(h->set_lo, cap * sizeof(*lo));
    if (lo == NULL)
        return -ENOMEM;
    h->set_lo = lo;
    uint32_t *hi = realloc(h->set_hi, cap * sizeof(*hi));
    if (hi == NULL)
        return -ENOMEM;
    h->set_hi = hi;
    h->cap_set = cap;
    return 0;
}

static void report_read_error(int rc)
{
    fprintf(stderr, "kvd: error: watch: reading events: %s\n", strerror(-rc));
}

/* Moves the synced watchers that were offered less than revision lim - 1 (next_rev, or
 * h->synced_next when larger, below lim) to unsynced. A scan of the synced group: only after a
 * read error, out of memory, or a compaction in the batch being delivered. */
static void unsync_below(kv_watch_hub *h, int64_t lim)
{
    kv_list *e, *nx;
    kv_list_foreach_safe(e, nx, &h->synced.list) {
        kv_watcher *w = kv_list_data(e, kv_watcher, glink);
        int64_t r = w->next_rev > h->synced_next ? w->next_rev : h->synced_next;
        if (r < lim)
            to_unsynced(h, w);
    }
}

typedef struct match_ctx {
    kv_watch_hub *h;
    uint32_t ev; /* index in h->ev of the event being matched */
    size_t n;    /* watchers in h->set */
    bool oom;
} match_ctx;

static void on_match(void *arg, kv_watcher *w)
{
    match_ctx *m = arg;
    kv_watch_hub *h = m->h;
    if (w->in_set) {
        h->set_hi[w->set_ix] = m->ev;
        return;
    }
    if (m->n == h->cap_set && ensure_set(h, m->n + 1) < 0) {
        m->oom = true;
        return;
    }
    w->in_set = true;
    w->set_ix = (uint32_t)m->n;
    h->set[m->n] = w;
    h->set_lo[m->n] = h->set_hi[m->n] = m->ev;
    m->n++;
}

/* Live delivery of [from, to] to the synced watchers, in slices of at most slice_bytes: each
 * event's key is looked up in the index (watch_index.h), so synced watchers that match
 * nothing are not examined; they stay synced and are offered the slice implicitly
 * (h->synced_next). Returns 0 or a negative error (h->synced_next is then the first revision
 * not offered). */
static int live_range(kv_watch_hub *h, kv_store_reader *rd, int64_t from, int64_t to)
{
    slice_clear(h); /* live delivery does not use the catch-up's cached slice */
    h->cache_valid = false;
    while (from <= to && h->synced.n > 0) {
        h->synced_next = from;
        int64_t last;
        int rc = kv_store_events(h->store, rd, from, to, h->cfg.slice_bytes, slice_add, h, &last);
        if (rc < 0) {
            slice_clear(h);
            return rc;
        }
        h->st.slices++;
        match_ctx m = {h, 0, 0, false};
        for (size_t j = 0; j < h->n_ev && !m.oom; j++) {
            m.ev = (uint32_t)j;
            kv_widx_match(&h->idx, h->ev[j].kv->key.data, h->ev[j].kv->key.len, on_match, &m);
        }
        for (size_t i = 0; i < m.n; i++) {
            kv_watcher *w = h->set[i];
            w->in_set = false;
            if (w->next_rev < from)
                w->next_rev = from; /* offered everything before from */
        }
        if (m.oom) {
            fprintf(stderr, "kvd: warning: watch: out of memory matching events; retrying later\n");
            unsync_below(h, last + 1); /* the catch-up delivers the slice */
        } else {
            deliver(h, rd, h->set, m.n, from, last, h->set_lo, h->set_hi);
        }
        slice_clear(h);
        from = last + 1;
    }
    return 0;
}

void kv_watch_hub_acked(kv_watch_hub *h, int64_t rev)
{
    if (rev > h->acked_rev)
        h->acked_rev = rev;
}

void kv_watch_hub_notify(kv_watch_hub *h, int64_t rev)
{
    if (rev <= h->cur_rev)
        return;
    lag_note(h, rev);
    int64_t old = h->cur_rev;
    h->cur_rev = rev;
    h->synced_next = old + 1;
    if (h->synced.n == 0) {
        h->synced_next = rev + 1;
        return;
    }
    kv_store_reader rd;
    h->deadline_ns = uv_hrtime() + NOTIFY_TURN_NS;
    h->turn_bytes_max = NOTIFY_TURN_BYTES;
    h->over_budget = false;
    h->turn_bytes = 0;
    int rc = kv_store_reader_begin(h->store, &rd);
    if (rc == 0) {
        /* compaction in the same batch: those behind it are answered by catch-up */
        if (rd.compact_rev > old + 1)
            unsync_below(h, rd.compact_rev);
        rc = live_range(h, &rd, old + 1, rev);
        kv_store_reader_end(&rd);
    }
    if (rc < 0) {
        report_read_error(rc);
        unsync_below(h, rev + 1);
    }
    h->synced_next = rev + 1;
    h->deadline_ns = 0;
    h->over_budget = false;
    if (h->unsynced.n)
        arm_sync(h, SYNC_POLL_MIN_MS); /* no-op when a wake-up is already pending */
}

/* One catch-up slice. Returns 1 if it ran, 0 if no unsynced watcher could progress. */
static int sync_slice(kv_watch_hub *h)
{
    if (h->unsynced.n == 0)
        return 0;
    if (ensure_set(h, SYNC_BATCH_WATCHERS) < 0)
        return 0;
    kv_store_reader rd;
    int rc = kv_store_reader_begin(h->store, &rd);
    if (rc < 0) {
        report_read_error(rc);
        return 0;
    }
    /* Pick up to 512 watchers whose stream has room; move them to the tail (fairness). */
    size_t n = 0, scanned = 0, total = h->unsynced.n;
    int64_t from = INT64_MAX;
    int progressed = 0;
    /* etcd 3.4's compacted revision is -1 until the first compaction: a start below it (a
     * negative start_revision) is answered compacted, never read (a slice from -5000 would
     * end below revision 1, and no watcher of the batch would advance) */
    int64_t compacted = rd.compact_rev > 0 ? rd.compact_rev : -1;
    kv_list *e = kv_list_head(&h->unsynced.list);
    while (e && scanned < total && n < SYNC_BATCH_WATCHERS) {
        kv_watcher *w = kv_list_data(e, kv_watcher, glink);
        kv_list *nx = kv_list_next(&h->unsynced.list, e);
        scanned++;
        if (!w->st->broken && has_room(w->st, h->cfg.slice_bytes)) {
            if (w->next_rev < compacted) {
                progressed |= send_compacted(h, w, compacted);
            } else if (w->next_rev > h->cur_rev) {
                to_synced(h, w);
                progressed = 1;
            } else {
                kv_wlist_remove(&h->unsynced, w);
                kv_wlist_push(&h->unsynced, w);
                h->set[n++] = w;
                if (w->next_rev < from)
                    from = w->next_rev;
            }
        }
        e = nx;
    }
    if (n > 0) {
        int64_t to = from + h->cfg.slice_revs - 1;
        if (to > h->cur_rev)
            to = h->cur_rev;
        size_t adv = 0;
        rc = run_slice(h, &rd, h->set, n, from, to, &adv);
        if (rc < 0)
            report_read_error(rc);
        else if (adv > 0)
            progressed = 1;
        for (size_t i = 0; i < n; i++)
            if (h->set[i]->state == W_UNSYNCED && h->set[i]->next_rev > h->cur_rev)
                to_synced(h, h->set[i]);
    }
    kv_store_reader_end(&rd);
    return progressed;
}

int kv_watch_hub_sync_now(kv_watch_hub *h, int max_slices)
{
    int ran = 0;
    while (ran < max_slices && sync_slice(h))
        ran++;
    return ran;
}

/* One catch-up turn: slices until the turn's time or byte budget is spent or no watcher can
 * progress; then the next turn is scheduled (right away, or with back-off while no stream has
 * room). */
static void sync_turn_run(kv_watch_hub *h);

static void sync_turn(kv_watch_hub *h)
{
    sync_turn_run(h);
    if (!kv_list_empty(&h->failed) && !h->closing) /* a send failed in this turn */
        uv_idle_start(&h->sync_idle, on_sync_idle);
}

static void sync_turn_run(kv_watch_hub *h)
{
    uint64_t start = uv_hrtime();
    h->deadline_ns = start + SYNC_TURN_NS;
    h->turn_bytes_max = TURN_BYTES;
    h->over_budget = false;
    h->turn_bytes = 0;
    int ran = 0;
    while (!h->over_budget && uv_hrtime() < h->deadline_ns && h->turn_bytes <= TURN_BYTES &&
           sync_slice(h))
        ran++;
    bool more = h->over_budget ||
                (ran > 0 && (uv_hrtime() >= h->deadline_ns || h->turn_bytes > TURN_BYTES));
    h->deadline_ns = 0;
    h->over_budget = false;
    if (!more)
        uv_idle_stop(&h->sync_idle);
    if (h->unsynced.n == 0) {
        uv_idle_stop(&h->sync_idle);
        slice_clear(h); /* release the cached slice */
        h->cache_valid = false;
        return;
    }
    if (more) {
        h->poll_ms = SYNC_POLL_MIN_MS;
        arm_sync(h, 0);
    } else if (ran > 0) {
        h->poll_ms = SYNC_POLL_MIN_MS;
        arm_sync(h, SYNC_POLL_MIN_MS);
    } else {
        h->poll_ms = h->poll_ms ? h->poll_ms * 2 : SYNC_POLL_MIN_MS;
        if (h->poll_ms > SYNC_POLL_MAX_MS)
            h->poll_ms = SYNC_POLL_MAX_MS;
        arm_sync(h, h->poll_ms);
    }
}

static void on_sync_timer(uv_timer_t *t)
{
    kv_watch_hub *h = t->data;
    h->sync_armed = false;
    sync_turn(h);
}

static void on_sync_idle(uv_idle_t *i)
{
    kv_watch_hub *h = i->data;
    notify_failed(h);
    sync_turn(h); /* stops the idle when no watcher is unsynced */
}

void kv_watch_hub_add(kv_watch_hub *h, kv_watcher *w)
{
    w->added_ns = uv_hrtime();
    if (w->next_rev > h->cur_rev) {
        w->state = W_SYNCED;
        kv_wlist_push(&h->synced, w);
        kv_widx_add(&h->idx, w);
    } else {
        w->state = W_UNSYNCED;
        kv_wlist_push(&h->unsynced, w);
        arm_sync(h, 0);
    }
}

/* ---- progress ---- */

void kv_watch_hub_progress_tick(kv_watch_hub *h)
{
    kv_list *se, *we;
    kv_list_foreach(se, &h->streams) {
        kv_watch_stream *st = kv_list_data(se, kv_watch_stream, link);
        kv_list_foreach(we, &st->watchers) {
            kv_watcher *w = kv_list_data(we, kv_watcher, slink);
            if (!w->progress)
                continue;
            if (w->progress_due && w->state == W_SYNCED && has_room(st, 64)) {
                Etcdserverpb__WatchResponse r = ETCDSERVERPB__WATCH_RESPONSE__INIT;
                r.watch_id = w->id;
                kv_watch_send_ctrl(st, &r, h->cur_rev);
            }
            w->progress_due = true;
        }
    }
}

static void on_progress_timer(uv_timer_t *t)
{
    kv_watch_hub_progress_tick(t->data);
}

/* ---- lifecycle ---- */

static double g_streams(void *arg)
{
    return (double)((kv_watch_hub *)arg)->n_streams;
}
static double g_watchers(void *arg)
{
    return (double)((kv_watch_hub *)arg)->n_watchers;
}
static double g_visits(void *arg)
{
    return (double)((kv_watch_hub *)arg)->idx.visits;
}
static double g_unsynced(void *arg)
{
    return (double)((kv_watch_hub *)arg)->unsynced.n;
}

int kv_watch_hub_init(kv_watch_hub **out, uv_loop_t *loop, kv_store *store,
                      const kv_watch_config *cfg, const kv_header_info *hdr, int64_t rev,
                      kv_metrics *metrics)
{
    kv_watch_hub *h = calloc(1, sizeof(*h));
    if (h == NULL)
        return -ENOMEM;
    kv_list_init(&h->streams);
    kv_list_init(&h->failed);
    kv_list_init(&h->synced.list);
    kv_list_init(&h->unsynced.list);
    if (kv_widx_init(&h->idx) < 0) {
        free(h);
        return -ENOMEM;
    }
    kv_watch_config_default(&h->cfg);
    if (cfg) {
        kv_watch_config d = h->cfg;
        h->cfg = *cfg;
        if (!h->cfg.max_watchers_per_stream)
            h->cfg.max_watchers_per_stream = d.max_watchers_per_stream;
        if (!h->cfg.max_streams_per_conn)
            h->cfg.max_streams_per_conn = d.max_streams_per_conn;
        if (!h->cfg.stream_send_buffer_bytes)
            h->cfg.stream_send_buffer_bytes = d.stream_send_buffer_bytes;
        if (!h->cfg.max_response_bytes)
            h->cfg.max_response_bytes = d.max_response_bytes;
        if (!h->cfg.slice_bytes)
            h->cfg.slice_bytes = d.slice_bytes;
        if (h->cfg.slice_revs < 1)
            h->cfg.slice_revs = d.slice_revs;
        if (!h->cfg.progress_interval_ms)
            h->cfg.progress_interval_ms = d.progress_interval_ms;
    }
    h->loop = loop;
    h->store = store;
    h->hdr = hdr;
    h->cur_rev = rev;
    h->synced_next = rev + 1;
    uv_timer_init(loop, &h->sync_timer);
    uv_timer_init(loop, &h->progress_timer);
    uv_idle_init(loop, &h->sync_idle);
    h->sync_idle.data = h;
    h->sync_timer.data = h->progress_timer.data = h;
    h->handles_open = 3;
    uv_timer_start(&h->progress_timer, on_progress_timer, h->cfg.progress_interval_ms,
                   h->cfg.progress_interval_ms);
    uv_unref((uv_handle_t *)&h->progress_timer);
    h->metrics = metrics;
    if (metrics) {
        kv_metrics_gauge_fn(metrics, "kvd_watch_streams", "Open Watch streams.", g_streams, h);
        kv_metrics_gauge_fn(metrics, "kvd_watchers", "Watchers on all Watch streams.", g_watchers,
                            h);
        kv_metrics_gauge_fn(metrics, "kvd_watch_unsynced",
                            "Watchers behind the committed revision, caught up from LMDB.",
                            g_unsynced, h);
        h->m_events = kv_metrics_counter(metrics, "kvd_watch_events_sent_total",
                                         "Watch events sent to clients.", NULL);
        double b[17];
        kv_metrics_exp_buckets(b, 0.0001, 2, 17); /* 100 us .. 6.6 s */
        h->m_lag = kv_metrics_histogram(
            metrics, "kvd_watch_event_delivery_lag_seconds",
            "Watch responses: from the revision of their oldest event becoming visible on this "
            "member (or the watcher's creation, if later) to the response being queued.",
            NULL, b, 17);
        h->m_slow = kv_metrics_counter(
            metrics, "kvd_watch_slow_total",
            "Watchers moved to unsynced because their stream's send buffer was full "
            "(--watch-send-buffer-bytes).",
            NULL);
        kv_metrics_counter_fn(metrics, "kvd_watch_match_visits_total",
                              "Watchers or watcher-index nodes examined to match committed events "
                              "to synced watchers (grows with matches, not with idle watchers).",
                              g_visits, h);
    }
    *out = h;
    return 0;
}

static void on_closed(uv_handle_t *hd)
{
    kv_watch_hub *h = hd->data;
    if (--h->handles_open == 0) {
        free(h->ev);
        free(h->set);
        free(h->set_lo);
        free(h->set_hi);
        kv_widx_free(&h->idx);
        free(h->out);
        free(h->outs);
        free(h->obuf);
        free(h);
    }
}

void kv_watch_hub_close(kv_watch_hub *h)
{
    if (h == NULL || h->closing)
        return;
    h->closing = true;
    kv_list *e;
    while ((e = kv_list_head(&h->streams)))
        kv_watch_stream_close(kv_list_data(e, kv_watch_stream, link));
    slice_clear(h);
    h->cache_valid = false;
    if (h->metrics)
        kv_metrics_gauge_fn_remove(h->metrics, h);
    uv_close((uv_handle_t *)&h->sync_timer, on_closed);
    uv_close((uv_handle_t *)&h->sync_idle, on_closed);
    uv_close((uv_handle_t *)&h->progress_timer, on_closed);
}

void kv_watch_hub_get_stats(const kv_watch_hub *h, kv_watch_stats *st)
{
    *st = h->st;
    st->streams = h->n_streams;
    st->watchers = h->n_watchers;
    st->unsynced = h->unsynced.n;
    st->match_visits = h->idx.visits;
}
