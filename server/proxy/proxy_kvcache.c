/*
 * proxy_kvcache.c - the range cache in the proxy (docs/proxy.md, "Serializable range cache"):
 * which unary calls it answers, what invalidates it, and the upstream watch that keeps it
 * honest. The cache itself is proxy_cache.c.
 *
 * - Range: the request is unpacked and packed again with serializable=true: that is the key
 *   (etcd keys by the whole marshalled request with Serializable set, so a linearizable
 *   answer also fills the cache). A serializable Range is answered from the cache when the
 *   entry is there and the watch is live; else it is forwarded and its answer stored.
 *   Linearizable ranges are always forwarded.
 * - Put, DeleteRange, Txn (compares and both branches; a nested txn clears everything),
 *   LeaseRevoke (clears everything) invalidate what they touch when they pass through, and
 *   again when their answer comes back (whatever it is). Compact sets the compacted revision
 *   on success (etcd: a later get pinned below it answers "required revision has been
 *   compacted").
 * - The watch: ONE upstream Watch stream on the whole keyspace (with --namespace, on the
 *   namespace: requests are rewritten before they reach the cache, proxy_unary.c) from the
 *   current revision.
 *   Every event invalidates its key. Nothing is served or stored unless it is live (created
 *   and not ended); when it ends, is cancelled, or a message is lost, the cache is cleared
 *   and the stream re-opened with a backoff. While live, a progress request goes up every
 *   CHECK_MS; no message within HUNG_MS of one (a hung member) drops the watch too.
 * - Auth: a request with a token bypasses the cache, and a token, AuthEnable or a Range refused
 *   for want of a user or permission drops the watch (auth_seen): opened again without a
 *   token, it is refused while auth is on, so the cache stays off.
 * - An answer is stored only if no invalidation meeting its range happened since its
 *   request was forwarded (kv_proxy_cache_seq + kv_proxy_cache_add's check), the watch
 *   generation is the same, and its header revision is not below the watch's start
 *   revision.
 *
 * Threads: the loop, except up_msg_io/up_end_io (libkvclient's I/O thread) which only post
 * bridge events. Ownership: kv_proxy_kvcache is owned by kv_proxy (freed after the bridge is
 * drained, kv_proxy_kvcache_free); one wtag per upstream watch stream, freed on the
 * KV_PROXY_EV_CACHE_FREE event the loop posts after kvc_bidi_free; one req tag per forwarded
 * call, freed by kv_proxy_kvcache_done.
 */
#include "proxy/proxy_cache.h"
#include "proxy/proxy_int.h"

#include "common/etcd_errors.h"

#include "rpc.pb-c.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WATCH_PATH "/etcdserverpb.Watch/Watch"
#define END_MSG_CAP 256
/* Liveness of the watch: a progress request every CHECK_MS; no message for HUNG_MS after one
 * was sent and the watch is dropped (the cache cleared and off until a new one is created). */
#define CHECK_MS 1000
#define HUNG_MS 3000

typedef struct wtag {
    kv_proxy_kvcache *k;
    uint64_t gen;
    kv_proxy_ev *end_ev; /* I/O thread: posted once, at the end or when a message is lost */
} wtag;

struct kv_proxy_kvcache {
    kv_proxy *p;
    kv_proxy_cache *c;
    kvc_bidi *up;
    wtag *tag;
    uint64_t gen;      /* of the current stream */
    int live;          /* created and not ended */
    int64_t watch_rev; /* header revision of the created response */
    uv_timer_t retry;
    uv_timer_t check;  /* progress requests while live */
    uint64_t asked_at; /* loop time of the unanswered progress request, 0: none */
    unsigned failures;
    int closing;
    kv_metric *m_hits, *m_misses, *m_entries, *m_bytes, *m_watch_up, *m_watch_opened;
    kv_metric *m_invalidated, *m_events, *m_hung, *m_auth_off;
};

enum { REQ_RANGE = 1, REQ_WRITE, REQ_COMPACT, REQ_CLEAR };

typedef struct req {
    int kind;
    uint64_t seq, gen;
    Etcdserverpb__RangeRequest *range;
    uint8_t *bytes; /* REQ_RANGE: the cache key; REQ_WRITE: the request */
    size_t len;
    int64_t rev; /* REQ_COMPACT */
    const char *method;
} req;

/* ---- the wire, read without unpacking ---- */

typedef struct pbf {
    uint32_t num, wt;
    uint64_t v;
    const uint8_t *d;
    size_t dl;
} pbf;

static int rd_varint(const uint8_t *m, size_t len, size_t *off, uint64_t *out)
{
    uint64_t v = 0;
    for (unsigned sh = 0; sh < 70; sh += 7) {
        if (*off >= len)
            return -EINVAL;
        uint8_t b = m[(*off)++];
        v |= (uint64_t)(b & 0x7f) << sh;
        if (!(b & 0x80)) {
            *out = v;
            return 0;
        }
    }
    return -EINVAL;
}

/* The next field of m: 1, 0 at the end, -EINVAL when malformed. */
static int pb_next(const uint8_t *m, size_t len, size_t *off, pbf *f)
{
    if (*off >= len)
        return 0;
    uint64_t key;
    if (rd_varint(m, len, off, &key) < 0 || (key >> 3) == 0 || (key >> 3) > UINT32_MAX)
        return -EINVAL;
    f->num = (uint32_t)(key >> 3);
    f->wt = (uint32_t)(key & 7);
    f->d = NULL;
    f->dl = 0;
    f->v = 0;
    switch (f->wt) {
    case 0:
        return rd_varint(m, len, off, &f->v) < 0 ? -EINVAL : 1;
    case 1:
        if (len - *off < 8)
            return -EINVAL;
        *off += 8;
        return 1;
    case 2:
        if (rd_varint(m, len, off, &f->v) < 0 || f->v > len - *off)
            return -EINVAL;
        f->d = m + *off;
        f->dl = (size_t)f->v;
        *off += f->dl;
        return 1;
    case 5:
        if (len - *off < 4)
            return -EINVAL;
        *off += 4;
        return 1;
    default:
        return -EINVAL;
    }
}

/* The last occurrences of the bytes fields kf and ef of m (key and range_end). */
static int key_end(const uint8_t *m, size_t len, uint32_t kf, uint32_t ef, pbf *k, pbf *e)
{
    size_t off = 0;
    pbf f;
    int rc;
    memset(k, 0, sizeof *k);
    memset(e, 0, sizeof *e);
    while ((rc = pb_next(m, len, &off, &f)) == 1) {
        if (f.wt == 2 && f.num == kf)
            *k = f;
        else if (f.wt == 2 && f.num == ef)
            *e = f;
    }
    return rc;
}

/* The header revision of a response (field 1, ResponseHeader.revision = 3); 0 if absent. */
static int64_t header_rev(const uint8_t *m, size_t len)
{
    size_t off = 0, o2 = 0;
    pbf f, g;
    int64_t rev = 0;
    while (pb_next(m, len, &off, &f) == 1)
        if (f.num == 1 && f.wt == 2)
            while (pb_next(f.d, f.dl, &o2, &g) == 1)
                if (g.num == 3 && g.wt == 0)
                    rev = (int64_t)g.v;
    return rev;
}

/* ---- invalidation ---- */

static void gauges(kv_proxy_kvcache *k)
{
    kv_metric_set(k->m_entries, (double)kv_proxy_cache_entries(k->c));
    kv_metric_set(k->m_bytes, (double)kv_proxy_cache_bytes(k->c));
}

static void inval(kv_proxy_kvcache *k, const pbf *key, const pbf *end)
{
    size_t n =
        kv_proxy_cache_invalidate(k->c, key->d, key->dl, end ? end->d : NULL, end ? end->dl : 0);
    kv_metric_add(k->m_invalidated, (int64_t)n);
}

static void clear(kv_proxy_kvcache *k)
{
    kv_metric_add(k->m_invalidated, (int64_t)kv_proxy_cache_entries(k->c));
    kv_proxy_cache_clear(k->c);
}

/* RequestOp: request_put(2){key 1}, request_delete_range(3){key 1, range_end 2},
 * request_txn(4): cleared as a whole (no recursion on client bytes). */
static int inval_op(kv_proxy_kvcache *k, const uint8_t *m, size_t len)
{
    size_t off = 0;
    pbf f, key, end;
    int rc;
    while ((rc = pb_next(m, len, &off, &f)) == 1) {
        if (f.wt != 2)
            continue;
        if (f.num == 2 && key_end(f.d, f.dl, 1, 0, &key, &end) == 0)
            inval(k, &key, NULL);
        else if (f.num == 3 && key_end(f.d, f.dl, 1, 2, &key, &end) == 0)
            inval(k, &key, &end);
        else if (f.num == 2 || f.num == 3 || f.num == 4)
            return -EINVAL;
    }
    return rc;
}

/* TxnRequest: compare(1){key 3, range_end 64}, success(2), failure(3) RequestOps. */
static void inval_txn(kv_proxy_kvcache *k, const uint8_t *m, size_t len)
{
    size_t off = 0;
    pbf f, key, end;
    int rc;
    while ((rc = pb_next(m, len, &off, &f)) == 1) {
        if (f.wt != 2)
            continue;
        if (f.num == 1) {
            if (key_end(f.d, f.dl, 3, 64, &key, &end) < 0)
                break;
            inval(k, &key, &end);
        } else if ((f.num == 2 || f.num == 3) && inval_op(k, f.d, f.dl) < 0) {
            rc = -EINVAL;
            break;
        }
    }
    if (rc < 0)
        clear(k);
}

static void inval_write(kv_proxy_kvcache *k, const char *method, const uint8_t *m, size_t len)
{
    pbf key, end;
    if (strcmp(method, "/etcdserverpb.KV/Put") == 0) {
        if (key_end(m, len, 1, 0, &key, &end) == 0)
            inval(k, &key, NULL);
        else
            clear(k);
    } else if (strcmp(method, "/etcdserverpb.KV/DeleteRange") == 0) {
        if (key_end(m, len, 1, 2, &key, &end) == 0)
            inval(k, &key, &end);
        else
            clear(k);
    } else {
        inval_txn(k, m, len);
    }
    gauges(k);
}

/* ---- the upstream watch ---- */

static void open_watch(kv_proxy_kvcache *k);

static void drop_watch(kv_proxy_kvcache *k);
static void schedule_open(kv_proxy_kvcache *k);

/* While live: ask the member for progress (WatchRequest{progress_request: {}}); a member that
 * answers nothing (no event, no progress) within HUNG_MS may be hung with the connection
 * open, and the events it would send are what keeps the cache correct: stop serving. */
static void check_cb(uv_timer_t *h)
{
    static const uint8_t progress[] = {0x1a, 0x00};
    kv_proxy_kvcache *k = h->data;
    if (!k->live || !k->up)
        return;
    uint64_t now = uv_now(k->p->loop);
    if (k->asked_at && now - k->asked_at >= HUNG_MS) {
        fprintf(stderr,
                "kvd grpc-proxy: the cache's upstream watch answered nothing for %u ms: "
                "cache cleared, re-opening the watch\n",
                HUNG_MS);
        kv_metric_inc(k->m_hung);
        drop_watch(k);
        schedule_open(k);
        return;
    }
    if (!k->asked_at) {
        kvc_error e;
        if (kvc_bidi_send(k->up, progress, sizeof progress, &e) == 0)
            k->asked_at = now;
    }
}

static void up_msg_io(void *arg, const uint8_t *msg, size_t len)
{
    wtag *t = arg;
    kv_proxy_ev *ev = kv_proxy_ev_new(KV_PROXY_EV_CACHE_MSG, t, 0, msg, len);
    if (!ev) { /* a lost event would leave a stale entry: end the stream instead */
        ev = t->end_ev;
        t->end_ev = NULL;
        if (!ev)
            return;
        ev->code = KV_GRPC_RESOURCE_EXHAUSTED;
    }
    kv_proxy_bridge_post(&t->k->p->bridge, ev);
}

static void up_end_io(void *arg, int status, const kvc_error *err)
{
    wtag *t = arg;
    kv_proxy_ev *ev = t->end_ev;
    t->end_ev = NULL;
    if (!ev) /* already posted for a lost message */
        return;
    ev->code = status == 0 ? 0 : (err ? err->code : -status);
    snprintf((char *)ev->buf, END_MSG_CAP, "%s", err ? err->message : "");
    ev->len = strlen((char *)ev->buf);
    kv_proxy_bridge_post(&t->k->p->bridge, ev);
}

static void wtag_free(wtag *t)
{
    if (!t)
        return;
    kv_proxy_ev_free(t->end_ev);
    free(t);
}

static void retry_cb(uv_timer_t *h)
{
    open_watch(h->data);
}

static void schedule_open(kv_proxy_kvcache *k)
{
    if (k->closing || uv_is_active((uv_handle_t *)&k->retry))
        return;
    uint64_t d = 50u << (k->failures < 5 ? k->failures : 5);
    if (d > 1000)
        d = 1000;
    k->failures++;
    uv_timer_start(&k->retry, retry_cb, d, 0);
}

/* Drop the current stream: nothing is served until a new one is created. */
static void drop_watch(kv_proxy_kvcache *k)
{
    k->live = 0;
    k->asked_at = 0;
    uv_timer_stop(&k->check);
    kv_metric_set(k->m_watch_up, 0);
    clear(k);
    gauges(k);
    if (k->up) {
        kvc_bidi_free(k->up); /* synchronous: its events are all in the bridge now */
        k->up = NULL;
        kv_proxy_ev *ev = kv_proxy_ev_new(KV_PROXY_EV_CACHE_FREE, k->tag, 0, "", 0);
        if (ev)
            kv_proxy_bridge_post(&k->p->bridge, ev);
        /* else the tag leaks (out of memory), never a use after free */
    }
    k->tag = NULL;
}

/* WatchRequest{create_request: {key "\0", range_end "\0"}}: every key, from now; with
 * --namespace only the namespace's keys (every cached range lies in it): *out malloc'd. */
static int watch_create(kv_proxy_kvcache *k, uint8_t **out, size_t *olen)
{
    static const uint8_t all[] = {0x0a, 0x06, 0x0a, 0x01, 0x00, 0x12, 0x01, 0x00};
    kv_proxy_ns ns;
    if (!kv_proxy_ns_of(k->p, &ns)) {
        *out = malloc(sizeof all);
        if (!*out)
            return -ENOMEM;
        memcpy(*out, all, sizeof all);
        *olen = sizeof all;
        return 0;
    }
    Etcdserverpb__WatchCreateRequest c = ETCDSERVERPB__WATCH_CREATE_REQUEST__INIT;
    Etcdserverpb__WatchRequest r = ETCDSERVERPB__WATCH_REQUEST__INIT;
    c.range_end.data = malloc(1);
    if (!c.range_end.data)
        return -ENOMEM;
    c.range_end.data[0] = 0;
    c.range_end.len = 1;
    int rc = kv_proxy_ns_prefix_range(&ns, &c.key, &c.range_end); /* [pfx, its end) */
    if (rc == 0) {
        r.request_union_case = ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_CREATE_REQUEST;
        r.create_request = &c;
        *olen = etcdserverpb__watch_request__get_packed_size(&r);
        *out = malloc(*olen);
        if (*out)
            etcdserverpb__watch_request__pack(&r, *out);
        else
            rc = -ENOMEM;
    }
    free(c.key.data);
    free(c.range_end.data);
    return rc;
}

static void open_watch(kv_proxy_kvcache *k)
{
    if (k->up || k->closing)
        return;
    uint8_t *create = NULL;
    size_t clen = 0;
    wtag *t = calloc(1, sizeof *t);
    char blank[END_MSG_CAP] = {0};
    if (t)
        t->end_ev = kv_proxy_ev_new(KV_PROXY_EV_CACHE_END, t, 0, blank, END_MSG_CAP - 1);
    if (!t || !t->end_ev || watch_create(k, &create, &clen) < 0) {
        wtag_free(t);
        schedule_open(k);
        return;
    }
    t->k = k;
    t->gen = ++k->gen;
    kvc_error e;
    int rc = kvc_bidi_open(k->p->up, WATCH_PATH, 0, up_msg_io, up_end_io, t, &k->up, &e);
    if (rc == 0)
        rc = kvc_bidi_send(k->up, create, clen, &e);
    free(create);
    if (rc != 0) {
        fprintf(stderr, "kvd grpc-proxy: warning: cannot open the cache's upstream watch: %s\n",
                e.message);
        if (k->up) { /* its end may already be in the bridge: free t behind it */
            kvc_bidi_free(k->up);
            k->up = NULL;
            kv_proxy_ev *ev = kv_proxy_ev_new(KV_PROXY_EV_CACHE_FREE, t, 0, "", 0);
            if (ev)
                kv_proxy_bridge_post(&k->p->bridge, ev);
        } else {
            wtag_free(t);
        }
        schedule_open(k);
        return;
    }
    k->tag = t;
    kv_metric_inc(k->m_watch_opened);
}

/* A WatchResponse: created(3), canceled(4), compact_revision(5), events(11) {kv(2) {key 1}}. */
static int on_watch_msg(kv_proxy_kvcache *k, const uint8_t *m, size_t len)
{
    size_t off = 0;
    pbf f;
    int rc, created = 0;
    while ((rc = pb_next(m, len, &off, &f)) == 1) {
        if ((f.num == 4 || f.num == 5) && f.wt == 0 && f.v)
            return -ECANCELED; /* canceled, or compacted past us */
        if (f.num == 3 && f.wt == 0 && f.v)
            created = 1;
        if (f.num == 11 && f.wt == 2) {
            size_t o2 = 0;
            pbf g, key, end;
            while ((rc = pb_next(f.d, f.dl, &o2, &g)) == 1)
                if (g.num == 2 && g.wt == 2) {
                    if (key_end(g.d, g.dl, 1, 0, &key, &end) < 0)
                        return -EINVAL;
                    inval(k, &key, NULL);
                    kv_metric_inc(k->m_events);
                }
            if (rc < 0)
                return rc;
        }
    }
    if (rc < 0)
        return rc;
    k->asked_at = 0; /* any message shows the stream flows */
    if (created) {
        clear(k);
        k->watch_rev = header_rev(m, len);
        k->live = 1;
        k->failures = 0;
        uv_timer_start(&k->check, check_cb, CHECK_MS, CHECK_MS);
        kv_metric_set(k->m_watch_up, 1);
    }
    gauges(k);
    return 0;
}

void kv_proxy_kvcache_on_event(kv_proxy *p, kv_proxy_ev *ev)
{
    kv_proxy_kvcache *k = p->kvcache;
    wtag *t = ev->target;
    if (ev->kind == KV_PROXY_EV_CACHE_FREE) {
        wtag_free(t);
    } else if (k && t == k->tag && t->gen == k->gen) {
        int rc = ev->kind == KV_PROXY_EV_CACHE_MSG ? on_watch_msg(k, ev->buf, ev->len) : -EPIPE;
        if (rc < 0) {
            if (ev->kind == KV_PROXY_EV_CACHE_END && ev->code)
                fprintf(stderr, "kvd grpc-proxy: cache watch ended: %s\n", (const char *)ev->buf);
            drop_watch(k);
            schedule_open(k);
        }
    }
    kv_proxy_ev_free(ev);
}

/* ---- calls ---- */

static void req_free(req *r)
{
    if (!r)
        return;
    if (r->range)
        etcdserverpb__range_request__free_unpacked(r->range, NULL);
    free(r->bytes);
    free(r);
}

static int answer(kv_grpc_call *call, const uint8_t *resp, size_t len)
{
    if (kv_grpc_call_send(call, resp, len) < 0)
        return kv_grpc_call_finish(call, KV_GRPC_RESOURCE_EXHAUSTED,
                                   "kvd grpc-proxy: response does not fit the client's buffers");
    return kv_grpc_call_finish(call, KV_GRPC_OK, NULL);
}

/* Store one answered range (request and response bytes) under its serializable key. */
static void store_range(kv_proxy_kvcache *k, uint64_t seq, const uint8_t *q, size_t qlen,
                        const uint8_t *resp, size_t len)
{
    Etcdserverpb__RangeRequest *rr = etcdserverpb__range_request__unpack(NULL, qlen, q);
    if (!rr)
        return;
    rr->serializable = 1;
    size_t n = etcdserverpb__range_request__get_packed_size(rr);
    uint8_t *key = malloc(n ? n : 1);
    if (key) {
        n = etcdserverpb__range_request__pack(rr, key);
        if (kv_proxy_cache_add(k->c, seq, key, n, rr->key.data, rr->key.len, rr->range_end.data,
                               rr->range_end.len, rr->revision, resp, len) < 0)
            clear(k);
        free(key);
    }
    etcdserverpb__range_request__free_unpacked(rr, NULL);
}

/* A txn's RangeResponse with the txn's own header (cluster, member, revision, term) in place
 * of its inner one, which carries only a revision: what a Range would have answered. The
 * caller frees *out. */
static int with_header(const pbf *hdr, const uint8_t *m, size_t len, uint8_t **out, size_t *olen)
{
    uint8_t *b = malloc(len + hdr->dl + 16);
    if (!b)
        return -ENOMEM;
    size_t n = 0, off = 0, start = 0;
    pbf f;
    b[n++] = 0x0a; /* field 1, length-delimited */
    for (uint64_t v = hdr->dl;; v >>= 7) {
        b[n++] = (uint8_t)(v & 0x7f) | (v >= 0x80 ? 0x80 : 0);
        if (v < 0x80)
            break;
    }
    memcpy(b + n, hdr->d, hdr->dl);
    n += hdr->dl;
    int rc;
    while ((rc = pb_next(m, len, &off, &f)) == 1) {
        if (!(f.num == 1 && f.wt == 2)) {
            memcpy(b + n, m + start, off - start);
            n += off - start;
        }
        start = off;
    }
    if (rc < 0) {
        free(b);
        return -EINVAL;
    }
    *out = b;
    *olen = n;
    return 0;
}

/* The op a RequestOp / ResponseOp holds: the last of its oneof fields 1..4 (protobuf's rule),
 * 0 if none. */
static uint32_t op_kind(const uint8_t *m, size_t len, pbf *body)
{
    size_t off = 0;
    pbf f;
    uint32_t kind = 0;
    while (pb_next(m, len, &off, &f) == 1)
        if (f.wt == 2 && f.num >= 1 && f.num <= 4) {
            kind = f.num;
            *body = f;
        }
    return kind;
}

/* etcd's txnToCache: the ranges of the branch taken are stored (the i-th RequestOp of the
 * branch answered by the i-th ResponseOp), with the txn's header (etcd stores the inner
 * response as is, whose header has only a revision). Called before the txn's writes are invalidated
 * again, so a range that read a key the txn also writes is dropped right after. */
static void txn_ranges(kv_proxy_kvcache *k, const req *r, const uint8_t *resp, size_t len)
{
    if (!k->live || r->gen != k->gen || header_rev(resp, len) < k->watch_rev)
        return;
    size_t off = 0, qo = 0, so = 0;
    pbf f, q, s, qb, sb, hdr = {0};
    int succeeded = 0, rc;
    while (pb_next(resp, len, &off, &f) == 1) {
        if (f.num == 2 && f.wt == 0)
            succeeded = f.v != 0;
        if (f.num == 1 && f.wt == 2)
            hdr = f;
    }
    if (!hdr.d)
        return;
    uint32_t branch = succeeded ? 2 : 3;
    for (;;) {
        while ((rc = pb_next(r->bytes, r->len, &qo, &q)) == 1 && !(q.num == branch && q.wt == 2))
            ;
        if (rc != 1)
            break;
        while ((rc = pb_next(resp, len, &so, &s)) == 1 && !(s.num == 3 && s.wt == 2))
            ;
        if (rc != 1)
            break;
        uint8_t *b;
        size_t blen;
        if (op_kind(q.d, q.dl, &qb) == 1 && op_kind(s.d, s.dl, &sb) == 1 &&
            with_header(&hdr, sb.d, sb.dl, &b, &blen) == 0) {
            store_range(k, r->seq, qb.d, qb.dl, b, blen);
            free(b);
        }
    }
    gauges(k);
}

static int on_range(kv_proxy_kvcache *k, kv_grpc_call *call, const uint8_t *msg, size_t len,
                    req **out)
{
    Etcdserverpb__RangeRequest *rr = etcdserverpb__range_request__unpack(NULL, len, msg);
    if (!rr) /* the member answers the decoding error */
        return 0;
    int serializable = rr->serializable;
    rr->serializable = 1;
    req *r = calloc(1, sizeof *r);
    size_t n = etcdserverpb__range_request__get_packed_size(rr);
    if (r)
        r->bytes = malloc(n ? n : 1);
    if (!r || !r->bytes) {
        free(r);
        etcdserverpb__range_request__free_unpacked(rr, NULL);
        return 0;
    }
    r->kind = REQ_RANGE;
    r->range = rr;
    r->len = etcdserverpb__range_request__pack(rr, r->bytes);
    if (serializable && k->live) {
        const uint8_t *resp;
        size_t rlen;
        int hit = kv_proxy_cache_get(k->c, r->bytes, r->len, rr->revision, &resp, &rlen);
        if (hit == KV_PROXY_CACHE_HIT) {
            kv_metric_inc(k->m_hits);
            answer(call, resp, rlen);
            req_free(r);
            return 1;
        }
        if (hit == KV_PROXY_CACHE_COMPACTED) { /* etcd's proxy: a hit, ErrCompacted */
            kv_metric_inc(k->m_hits);
            kv_grpc_call_finish(call, KV_GRPC_OUT_OF_RANGE, kv_etcd_err_msg(KV_ERR_COMPACTED));
            req_free(r);
            gauges(k);
            return 1;
        }
    }
    if (serializable)
        kv_metric_inc(k->m_misses);
    r->seq = kv_proxy_cache_seq(k->c);
    r->gen = k->gen;
    *out = r;
    return 0;
}

/* Auth is on, or may be (a request carried a token, AuthEnable passed, or a token-less
 * range was refused): the cache knows no permissions, so it is cleared and its watch dropped,
 * then opened again. That watch has no token, and a member with auth on refuses it, so the
 * cache stays off until auth is off again. */
static void auth_seen(kv_proxy_kvcache *k)
{
    if (!k->live)
        return; /* off already, or its watch is being opened */
    kv_metric_inc(k->m_auth_off);
    drop_watch(k);
    schedule_open(k);
}

int kv_proxy_kvcache_request(kv_proxy *p, kv_grpc_call *call, const char *method,
                             const uint8_t *msg, size_t len, void **tag)
{
    kv_proxy_kvcache *k = p->kvcache;
    *tag = NULL;
    if (!k)
        return 0;
    if (kv_grpc_call_header(call, "token")) {
        /* authorized by the member as itself: neither answered from the cache nor stored in
         * it (a Txn's ranges included), and nothing is cached from here on (auth_seen) */
        auth_seen(k);
        return 0;
    }
    if (strcmp(method, "/etcdserverpb.KV/Range") == 0)
        return on_range(k, call, msg, len, (req **)tag);
    int kind = 0;
    if (strcmp(method, "/etcdserverpb.KV/Put") == 0 ||
        strcmp(method, "/etcdserverpb.KV/DeleteRange") == 0 ||
        strcmp(method, "/etcdserverpb.KV/Txn") == 0)
        kind = REQ_WRITE;
    else if (strcmp(method, "/etcdserverpb.KV/Compact") == 0)
        kind = REQ_COMPACT;
    else if (strcmp(method, "/etcdserverpb.Lease/LeaseRevoke") == 0)
        kind = REQ_CLEAR;
    else if (strcmp(method, "/etcdserverpb.Auth/AuthEnable") == 0) {
        auth_seen(k); /* what token-less clients read before must not be served */
        return 0;
    }
    if (!kind)
        return 0;
    req *r = calloc(1, sizeof *r);
    if (r && kind == REQ_WRITE && !(r->bytes = malloc(len ? len : 1))) {
        free(r);
        r = NULL;
    }
    if (!r) { /* out of memory: be safe */
        clear(k);
        gauges(k);
        return 0;
    }
    r->kind = kind;
    r->method = method;
    if (kind == REQ_WRITE) {
        memcpy(r->bytes, msg, len);
        r->len = len;
        inval_write(k, method, msg, len);
        r->seq = kv_proxy_cache_seq(k->c); /* a Txn's ranges: raced from here on */
        r->gen = k->gen;
    } else if (kind == REQ_CLEAR) {
        clear(k);
        gauges(k);
    } else {
        size_t off = 0;
        pbf f;
        while (pb_next(msg, len, &off, &f) == 1)
            if (f.num == 1 && f.wt == 0)
                r->rev = (int64_t)f.v;
    }
    *tag = r;
    return 0;
}

void kv_proxy_kvcache_done(kv_proxy *p, void *tag, int code, const uint8_t *resp, size_t len)
{
    kv_proxy_kvcache *k = p->kvcache;
    req *r = tag;
    if (!r || !k) {
        req_free(r);
        return;
    }
    switch (r->kind) {
    case REQ_RANGE:
        /* refused for want of a user or a permission (auth enabled straight on a member): what
         * the cache holds was read without one */
        if (code == KV_GRPC_INVALID_ARGUMENT || code == KV_GRPC_PERMISSION_DENIED ||
            code == KV_GRPC_UNAUTHENTICATED)
            auth_seen(k);
        if (code == 0 && k->live && r->gen == k->gen && header_rev(resp, len) >= k->watch_rev) {
            Etcdserverpb__RangeRequest *rr = r->range;
            if (kv_proxy_cache_add(k->c, r->seq, r->bytes, r->len, rr->key.data, rr->key.len,
                                   rr->range_end.data, rr->range_end.len, rr->revision, resp,
                                   len) < 0)
                clear(k);
            gauges(k);
        }
        break;
    case REQ_WRITE: /* whatever the outcome: a failed write may have been applied */
        if (code == 0 && strcmp(r->method, "/etcdserverpb.KV/Txn") == 0)
            txn_ranges(k, r, resp, len);
        inval_write(k, r->method, r->bytes, r->len);
        break;
    case REQ_COMPACT:
        if (code == 0)
            kv_proxy_cache_compact(k->c, r->rev);
        break;
    case REQ_CLEAR:
        clear(k);
        gauges(k);
        break;
    }
    req_free(r);
}

int kv_proxy_kvcache_init(kv_proxy *p)
{
    const kv_proxy_config *cfg = p->cfg;
    if (cfg->max_cache_entries == 0 || cfg->max_cache_bytes == 0)
        return 0; /* disabled */
    kv_proxy_kvcache *k = calloc(1, sizeof *k);
    if (!k)
        return -ENOMEM;
    int rc = kv_proxy_cache_new(&k->c, cfg->max_cache_entries, cfg->max_cache_bytes);
    if (rc < 0) {
        free(k);
        return rc;
    }
    k->p = p;
    uv_timer_init(p->loop, &k->retry);
    k->retry.data = k;
    uv_timer_init(p->loop, &k->check);
    k->check.data = k;
    kv_metrics *m = p->metrics;
    k->m_hits = kv_metrics_counter(m, "kvd_proxy_cache_hits_total",
                                   "Serializable ranges answered from the cache.", NULL);
    k->m_misses = kv_metrics_counter(m, "kvd_proxy_cache_misses_total",
                                     "Serializable ranges not in the cache (forwarded).", NULL);
    k->m_entries = kv_metrics_gauge(m, "kvd_proxy_cache_entries",
                                    "Range responses cached (bound: --max-cache-entries).", NULL);
    k->m_bytes = kv_metrics_gauge(m, "kvd_proxy_cache_bytes",
                                  "Bytes of the cached entries (bound: --max-cache-bytes).", NULL);
    k->m_watch_up = kv_metrics_gauge(m, "kvd_proxy_cache_watch_up",
                                     "1 while the cache's upstream watch is live (the cache "
                                     "serves only then).",
                                     NULL);
    k->m_watch_opened =
        kv_metrics_counter(m, "kvd_proxy_cache_watch_opened_total",
                           "Upstream Watch streams opened to invalidate the cache.", NULL);
    k->m_invalidated = kv_metrics_counter(m, "kvd_proxy_cache_invalidated_total",
                                          "Cache entries dropped by writes, watch events and "
                                          "watch restarts.",
                                          NULL);
    k->m_hung = kv_metrics_counter(m, "kvd_proxy_cache_watch_timeouts_total",
                                   "Cache watches dropped: no answer to a progress request in "
                                   "3 s (the cache is cleared).",
                                   NULL);
    k->m_auth_off = kv_metrics_counter(m, "kvd_proxy_cache_auth_off_total",
                                       "Cache watches dropped because auth is or may be on (a "
                                       "request with a token, AuthEnable, a range refused for "
                                       "want of a user): the cache is cleared and stays off "
                                       "while members refuse its token-less watch.",
                                       NULL);
    k->m_events = kv_metrics_counter(m, "kvd_proxy_cache_watch_events_total",
                                     "Events received on the cache's upstream watch.", NULL);
    kv_metric_set(k->m_watch_up, 0);
    gauges(k);
    p->kvcache = k;
    return 0;
}

void kv_proxy_kvcache_start(kv_proxy *p)
{
    if (p->kvcache)
        open_watch(p->kvcache);
}

void kv_proxy_kvcache_stop(kv_proxy *p)
{
    kv_proxy_kvcache *k = p->kvcache;
    if (!k)
        return;
    k->closing = 1;
    uv_timer_stop(&k->retry);
    uv_close((uv_handle_t *)&k->retry, NULL);
    uv_timer_stop(&k->check);
    uv_close((uv_handle_t *)&k->check, NULL);
    drop_watch(k);
}

void kv_proxy_kvcache_free(kv_proxy *p)
{
    kv_proxy_kvcache *k = p->kvcache;
    if (!k)
        return;
    wtag_free(k->tag);
    kv_proxy_cache_free(k->c);
    free(k);
    p->kvcache = NULL;
}
