/*
 * proxy_cache.c - the grpc-proxy's range cache, an LRU over hash tables (contract in
 * proxy_cache.h).
 */
#include "proxy/proxy_cache.h"
#include "common/fnv.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

enum { KIND_PINNED = 0, KIND_POINT = 1, KIND_RANGE = 2 };

typedef struct ent {
    struct ent *hnext;         /* request-bytes hash chain */
    struct ent *lprev, *lnext; /* LRU list, most recent first */
    struct ent *iprev, *inext; /* point-key bucket chain, or the list of range entries */
    uint64_t h, kh;            /* hashes of the request bytes and of the key */
    int kind;
    int64_t rev;
    size_t rlen, klen, elen, len, size;
    uint8_t *req, *key, *end, *resp; /* into data[] */
    uint8_t data[];
} ent;

/* The last RING invalidations (by sequence number), for kv_proxy_cache_add's race check. A
 * key or end longer than RING_KEY is recorded as "everything". */
#define RING 256
#define RING_KEY 64
typedef struct inv {
    uint64_t seq;
    int all;
    uint8_t kl, el;
    uint8_t k[RING_KEY], e[RING_KEY];
} inv;

struct kv_proxy_cache {
    inv ring[RING];
    size_t max_entries, max_bytes;
    size_t nb;    /* buckets of both tables, a power of two */
    ent **by_req; /* request bytes -> entry */
    ent **by_key; /* point entries by key */
    ent *ranges;  /* range entries */
    ent *lru, *lru_tail;
    size_t entries, bytes;
    uint64_t seq;
    int64_t compacted; /* -1: none */
};

static uint64_t hash(const uint8_t *p, size_t n)
{
    return kv_fnv1a64(p, n);
}

int kv_proxy_cache_new(kv_proxy_cache **out, size_t max_entries, size_t max_bytes)
{
    *out = NULL;
    if (max_entries == 0 || max_bytes == 0 || max_entries > ((size_t)1 << 28))
        return -EINVAL;
    kv_proxy_cache *c = calloc(1, sizeof *c);
    if (!c)
        return -ENOMEM;
    c->max_entries = max_entries;
    c->max_bytes = max_bytes;
    c->nb = 16;
    while (c->nb < max_entries)
        c->nb <<= 1;
    c->by_req = calloc(c->nb, sizeof *c->by_req);
    c->by_key = calloc(c->nb, sizeof *c->by_key);
    if (!c->by_req || !c->by_key) {
        kv_proxy_cache_free(c);
        return -ENOMEM;
    }
    c->compacted = -1;
    *out = c;
    return 0;
}

static void lru_unlink(kv_proxy_cache *c, ent *e)
{
    if (e->lprev)
        e->lprev->lnext = e->lnext;
    else
        c->lru = e->lnext;
    if (e->lnext)
        e->lnext->lprev = e->lprev;
    else
        c->lru_tail = e->lprev;
    e->lprev = e->lnext = NULL;
}

static void lru_push(kv_proxy_cache *c, ent *e)
{
    e->lprev = NULL;
    e->lnext = c->lru;
    if (c->lru)
        c->lru->lprev = e;
    else
        c->lru_tail = e;
    c->lru = e;
}

static ent **index_head(kv_proxy_cache *c, ent *e)
{
    return e->kind == KIND_POINT ? &c->by_key[e->kh & (c->nb - 1)] : &c->ranges;
}

static void remove_ent(kv_proxy_cache *c, ent *e)
{
    ent **pp = &c->by_req[e->h & (c->nb - 1)];
    while (*pp != e)
        pp = &(*pp)->hnext;
    *pp = e->hnext;
    lru_unlink(c, e);
    if (e->kind != KIND_PINNED) {
        if (e->iprev)
            e->iprev->inext = e->inext;
        else
            *index_head(c, e) = e->inext;
        if (e->inext)
            e->inext->iprev = e->iprev;
    }
    c->entries--;
    c->bytes -= e->size;
    free(e);
}

void kv_proxy_cache_free(kv_proxy_cache *c)
{
    if (!c)
        return;
    for (ent *e = c->lru, *n; e; e = n) {
        n = e->lnext;
        free(e);
    }
    free(c->by_req);
    free(c->by_key);
    free(c);
}

static ent *find(kv_proxy_cache *c, const uint8_t *req, size_t rlen, uint64_t h)
{
    for (ent *e = c->by_req[h & (c->nb - 1)]; e; e = e->hnext)
        if (e->h == h && e->rlen == rlen && memcmp(e->req, req, rlen) == 0)
            return e;
    return NULL;
}

int kv_proxy_cache_get(kv_proxy_cache *c, const uint8_t *req, size_t rlen, int64_t revision,
                       const uint8_t **resp, size_t *len)
{
    ent *e = find(c, req, rlen, hash(req, rlen));
    if (revision > 0 && revision < c->compacted) { /* etcd's Get: ErrCompacted */
        if (e)
            remove_ent(c, e);
        return KV_PROXY_CACHE_COMPACTED;
    }
    if (!e)
        return KV_PROXY_CACHE_MISS;
    lru_unlink(c, e);
    lru_push(c, e);
    *resp = e->resp;
    *len = e->len;
    return KV_PROXY_CACHE_HIT;
}

static int raced(const kv_proxy_cache *c, uint64_t seq, const uint8_t *key, size_t klen,
                 const uint8_t *end, size_t elen);

int kv_proxy_cache_add(kv_proxy_cache *c, uint64_t seq, const uint8_t *req, size_t rlen,
                       const uint8_t *key, size_t klen, const uint8_t *end, size_t elen,
                       int64_t revision, const uint8_t *resp, size_t len)
{
    if (revision > 0 && revision < c->compacted)
        return 0;
    /* a pinned answer cannot change: invalidations do not concern it */
    if (revision <= 0 && raced(c, seq, key, klen, end, elen))
        return 0;
    size_t size = sizeof(ent) + rlen + klen + elen + len;
    if (size > c->max_bytes || size < len)
        return 0;
    uint64_t h = hash(req, rlen);
    ent *old = find(c, req, rlen, h);
    if (old)
        remove_ent(c, old);
    while (c->lru_tail && (c->entries >= c->max_entries || c->bytes + size > c->max_bytes))
        remove_ent(c, c->lru_tail);
    ent *e = malloc(size);
    if (!e)
        return -ENOMEM;
    memset(e, 0, sizeof *e);
    e->h = h;
    e->rev = revision;
    e->size = size;
    e->req = e->data;
    e->key = e->req + rlen;
    e->end = e->key + klen;
    e->resp = e->end + elen;
    e->rlen = rlen;
    e->klen = klen;
    e->elen = elen;
    e->len = len;
    if (rlen)
        memcpy(e->req, req, rlen);
    if (klen)
        memcpy(e->key, key, klen);
    if (elen)
        memcpy(e->end, end, elen);
    if (len)
        memcpy(e->resp, resp, len);
    /* etcd: a request pinned at a revision is never invalidated, its answer cannot change
     * (revision <= 0 reads the newest) */
    e->kind = revision > 0 ? KIND_PINNED : elen == 0 ? KIND_POINT : KIND_RANGE;
    e->kh = e->kind == KIND_POINT ? hash(key, klen) : 0;
    ent **bucket = &c->by_req[h & (c->nb - 1)];
    e->hnext = *bucket;
    *bucket = e;
    lru_push(c, e);
    if (e->kind != KIND_PINNED) {
        ent **head = index_head(c, e);
        e->inext = *head;
        if (*head)
            (*head)->iprev = e;
        *head = e;
    }
    c->entries++;
    c->bytes += size;
    return 1;
}

/* Byte-string order, as etcd's keys. */
static int cmp(const uint8_t *a, size_t al, const uint8_t *b, size_t bl)
{
    int r = memcmp(a, b, al < bl ? al : bl);
    if (r)
        return r;
    return al < bl ? -1 : al > bl;
}

/* [a, ae) with ae "\0" meaning no upper bound; a point when ael == 0. */
typedef struct ivl {
    const uint8_t *a, *e;
    size_t al, el;
} ivl;

static int unbounded(const ivl *i)
{
    return i->el == 1 && i->e[0] == 0;
}

/* x < end of i (i a range) */
static int below_end(const uint8_t *x, size_t xl, const ivl *i)
{
    return unbounded(i) || cmp(x, xl, i->e, i->el) < 0;
}

static int overlaps(const ivl *x, const ivl *y)
{
    if (x->el == 0 && y->el == 0)
        return cmp(x->a, x->al, y->a, y->al) == 0;
    if (x->el == 0)
        return cmp(x->a, x->al, y->a, y->al) >= 0 && below_end(x->a, x->al, y);
    if (y->el == 0)
        return cmp(y->a, y->al, x->a, x->al) >= 0 && below_end(y->a, y->al, x);
    return below_end(x->a, x->al, y) && below_end(y->a, y->al, x);
}

static void record(kv_proxy_cache *c, const uint8_t *key, size_t klen, const uint8_t *end,
                   size_t elen, int all)
{
    inv *r = &c->ring[++c->seq % RING];
    r->seq = c->seq;
    r->all = all || klen > RING_KEY || elen > RING_KEY;
    if (r->all)
        return;
    r->kl = (uint8_t)klen;
    r->el = (uint8_t)elen;
    if (klen)
        memcpy(r->k, key, klen);
    if (elen)
        memcpy(r->e, end, elen);
}

/* Did an invalidation after seq meet [key, end)? Unknown (too old) counts as yes. */
static int raced(const kv_proxy_cache *c, uint64_t seq, const uint8_t *key, size_t klen,
                 const uint8_t *end, size_t elen)
{
    if (seq > c->seq || c->seq - seq >= RING)
        return c->seq != seq;
    ivl x = {key, end, klen, elen};
    for (uint64_t s = seq + 1; s <= c->seq; s++) {
        const inv *r = &c->ring[s % RING];
        if (r->seq != s || r->all)
            return 1;
        ivl w = {r->k, r->e, r->kl, r->el};
        if (overlaps(&x, &w))
            return 1;
    }
    return 0;
}

size_t kv_proxy_cache_invalidate(kv_proxy_cache *c, const uint8_t *key, size_t klen,
                                 const uint8_t *end, size_t elen)
{
    record(c, key, klen, end, elen, 0);
    ivl w = {key, end, klen, elen};
    size_t n = 0;
    if (elen == 0) {
        uint64_t kh = hash(key, klen);
        for (ent *e = c->by_key[kh & (c->nb - 1)], *nx; e; e = nx) {
            nx = e->inext;
            if (e->kh == kh && e->klen == klen && memcmp(e->key, key, klen) == 0) {
                remove_ent(c, e);
                n++;
            }
        }
        for (ent *e = c->ranges, *nx; e; e = nx) {
            nx = e->inext;
            ivl x = {e->key, e->end, e->klen, e->elen};
            if (overlaps(&x, &w)) {
                remove_ent(c, e);
                n++;
            }
        }
        return n;
    }
    for (ent *e = c->lru, *nx; e; e = nx) {
        nx = e->lnext;
        if (e->kind == KIND_PINNED)
            continue;
        ivl x = {e->key, e->end, e->klen, e->elen};
        if (overlaps(&x, &w)) {
            remove_ent(c, e);
            n++;
        }
    }
    return n;
}

void kv_proxy_cache_compact(kv_proxy_cache *c, int64_t revision)
{
    if (revision > c->compacted)
        c->compacted = revision;
}

void kv_proxy_cache_clear(kv_proxy_cache *c)
{
    record(c, NULL, 0, NULL, 0, 1);
    while (c->lru)
        remove_ent(c, c->lru);
}

uint64_t kv_proxy_cache_seq(const kv_proxy_cache *c)
{
    return c->seq;
}

size_t kv_proxy_cache_entries(const kv_proxy_cache *c)
{
    return c->entries;
}

size_t kv_proxy_cache_bytes(const kv_proxy_cache *c)
{
    return c->bytes;
}
