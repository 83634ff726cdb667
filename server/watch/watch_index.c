/* watch_index: synced watchers by key: hash map of single keys, treap of ranges (see
 * watch_index.h). */
#include "watch/watch_int.h"
#include "common/mix64.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <uv.h>

#define TAB_MIN 64

static int keycmp(const uint8_t *a, size_t al, const uint8_t *b, size_t bl)
{
    size_t n = al < bl ? al : bl;
    int c = n ? memcmp(a, b, n) : 0;
    if (c)
        return c;
    return al < bl ? -1 : al > bl ? 1 : 0;
}

/* Seeded FNV-1a, finalised: the seed keeps a client from choosing keys of one bucket. */
static uint64_t key_hash(const kv_widx *x, const uint8_t *k, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull ^ x->seed;
    for (size_t i = 0; i < n; i++) {
        h ^= k[i];
        h *= 0x100000001b3ull;
    }
    return kv_mix64(h ^ n);
}

int kv_widx_init(kv_widx *x)
{
    memset(x, 0, sizeof(*x));
    x->tab = calloc(TAB_MIN, sizeof(*x->tab));
    if (x->tab == NULL)
        return -ENOMEM;
    x->cap = TAB_MIN;
    uint64_t r[2];
    if (getrandom(r, sizeof(r), GRND_NONBLOCK) != (ssize_t)sizeof(r)) {
        r[0] = uv_hrtime() ^ (uint64_t)(uintptr_t)x;
        r[1] = kv_mix64(r[0] + 0x9e3779b97f4a7c15ull);
    }
    x->seed = r[0];
    x->rng = r[1] | 1;
    return 0;
}

void kv_widx_free(kv_widx *x)
{
    free(x->tab);
    x->tab = NULL;
}

/* ---- single keys ---- */

static void rehash(kv_widx *x, size_t cap)
{
    kv_watcher **t = calloc(cap, sizeof(*t));
    if (t == NULL)
        return; /* keep the old table: longer chains, still correct */
    for (size_t i = 0; i < x->cap; i++) {
        for (kv_watcher *w = x->tab[i], *nx; w; w = nx) {
            nx = w->ix.s.hnext;
            size_t b = (size_t)w->ixv & (cap - 1);
            w->ix.s.hnext = t[b];
            t[b] = w;
        }
    }
    free(x->tab);
    x->tab = t;
    x->cap = cap;
}

static void single_add(kv_widx *x, kv_watcher *w)
{
    if (x->n_keys >= x->cap)
        rehash(x, x->cap * 2);
    w->ixv = key_hash(x, w->key, w->klen);
    w->ix.s.hnext = NULL;
    kv_list_init(&w->ix.s.same);
    size_t b = (size_t)w->ixv & (x->cap - 1);
    for (kv_watcher *hd = x->tab[b]; hd; hd = hd->ix.s.hnext) {
        if (hd->ixv == w->ixv && hd->klen == w->klen && memcmp(hd->key, w->key, w->klen) == 0) {
            /* same key: first on the head's list (second watcher of the key) */
            kv_list_insert_head(&hd->ix.s.same, &w->ix.s.same);
            x->n_single++;
            return;
        }
    }
    w->ix.s.hnext = x->tab[b];
    x->tab[b] = w;
    x->n_keys++;
    x->n_single++;
}

static void single_remove(kv_widx *x, kv_watcher *w)
{
    x->n_single--;
    kv_watcher **pp = &x->tab[(size_t)w->ixv & (x->cap - 1)];
    while (*pp && *pp != w)
        pp = &(*pp)->ix.s.hnext;
    if (!*pp) { /* not a head: on its head's list */
        kv_list_remove(&w->ix.s.same);
        return;
    }
    kv_list *nl = kv_list_head(&w->ix.s.same);
    kv_list_remove(&w->ix.s.same); /* nl's link now heads the rest of the list */
    if (nl) {                      /* the next watcher of the key becomes the head */
        kv_watcher *n = kv_list_data(nl, kv_watcher, ix.s.same);
        n->ix.s.hnext = w->ix.s.hnext;
        *pp = n;
    } else {
        *pp = w->ix.s.hnext;
        x->n_keys--;
    }
    w->ix.s.hnext = NULL;
    if (x->cap > TAB_MIN && x->n_keys < x->cap / 8)
        rehash(x, x->cap / 2);
}

static void single_match(kv_widx *x, const uint8_t *key, size_t klen, kv_widx_fn fn, void *arg)
{
    if (x->n_keys == 0)
        return;
    uint64_t hv = key_hash(x, key, klen);
    for (kv_watcher *hd = x->tab[(size_t)hv & (x->cap - 1)]; hd; hd = hd->ix.s.hnext) {
        x->visits++;
        if (hd->ixv != hv || hd->klen != klen || memcmp(hd->key, key, klen) != 0)
            continue;
        x->visits++;
        fn(arg, hd);
        kv_list *e;
        kv_list_foreach(e, &hd->ix.s.same) {
            x->visits++;
            fn(arg, kv_list_data(e, kv_watcher, ix.s.same));
        }
        return;
    }
}

/* ---- ranges: treap ordered by (key, address), augmented with the largest end ---- */

static int node_cmp(const kv_watcher *a, const kv_watcher *b)
{
    int c = keycmp(a->key, a->klen, b->key, b->klen);
    if (c)
        return c;
    uintptr_t pa = (uintptr_t)a, pb = (uintptr_t)b;
    return pa < pb ? -1 : pa > pb;
}

/* Compares ends; R_FROM is +infinity. */
static int end_cmp(const kv_watcher *a, const kv_watcher *b)
{
    if (a->kind == R_FROM)
        return b->kind == R_FROM ? 0 : 1;
    if (b->kind == R_FROM)
        return -1;
    return keycmp(a->end, a->elen, b->end, b->elen);
}

/* end(w) > key: the range does not end at or before key. */
static bool end_after(const kv_watcher *w, const uint8_t *key, size_t klen)
{
    return w->kind == R_FROM || keycmp(w->end, w->elen, key, klen) > 0;
}

static void pull(kv_watcher *n)
{
    kv_watcher *m = n;
    if (n->ix.t.l && end_cmp(n->ix.t.l->ix.t.maxw, m) > 0)
        m = n->ix.t.l->ix.t.maxw;
    if (n->ix.t.r && end_cmp(n->ix.t.r->ix.t.maxw, m) > 0)
        m = n->ix.t.r->ix.t.maxw;
    n->ix.t.maxw = m;
}

/* Splits t into nodes < w (*l) and > w (*r). */
static void split(kv_watcher *t, const kv_watcher *w, kv_watcher **l, kv_watcher **r)
{
    if (t == NULL) {
        *l = *r = NULL;
        return;
    }
    if (node_cmp(t, w) < 0) {
        split(t->ix.t.r, w, &t->ix.t.r, r);
        *l = t;
    } else {
        split(t->ix.t.l, w, l, &t->ix.t.l);
        *r = t;
    }
    pull(t);
}

/* Every node of a is before every node of b. */
static kv_watcher *merge(kv_watcher *a, kv_watcher *b)
{
    if (a == NULL)
        return b;
    if (b == NULL)
        return a;
    if (a->ixv > b->ixv) {
        a->ix.t.r = merge(a->ix.t.r, b);
        pull(a);
        return a;
    }
    b->ix.t.l = merge(a, b->ix.t.l);
    pull(b);
    return b;
}

static kv_watcher *tree_insert(kv_watcher *t, kv_watcher *w)
{
    if (t == NULL)
        return w;
    if (w->ixv > t->ixv) {
        split(t, w, &w->ix.t.l, &w->ix.t.r);
        pull(w);
        return w;
    }
    if (node_cmp(w, t) < 0)
        t->ix.t.l = tree_insert(t->ix.t.l, w);
    else
        t->ix.t.r = tree_insert(t->ix.t.r, w);
    pull(t);
    return t;
}

static kv_watcher *tree_remove(kv_watcher *t, kv_watcher *w)
{
    if (t == NULL)
        return NULL; /* not in the tree: a caller bug, nothing to undo */
    if (t == w)
        return merge(t->ix.t.l, t->ix.t.r);
    if (node_cmp(w, t) < 0)
        t->ix.t.l = tree_remove(t->ix.t.l, w);
    else
        t->ix.t.r = tree_remove(t->ix.t.r, w);
    pull(t);
    return t;
}

/* Every range of the subtree n that contains key. */
static void stab(kv_widx *x, kv_watcher *n, const uint8_t *key, size_t klen, kv_widx_fn fn,
                 void *arg)
{
    while (n) {
        x->visits++;
        if (!end_after(n->ix.t.maxw, key, klen))
            return; /* every range here ends at or before key */
        stab(x, n->ix.t.l, key, klen, fn, arg);
        if (keycmp(n->key, n->klen, key, klen) > 0)
            return; /* n and its right subtree start after key */
        if (end_after(n, key, klen))
            fn(arg, n);
        n = n->ix.t.r;
    }
}

static uint64_t next_prio(kv_widx *x)
{
    x->rng ^= x->rng << 13;
    x->rng ^= x->rng >> 7;
    x->rng ^= x->rng << 17;
    return x->rng;
}

/* ---- API ---- */

void kv_widx_add(kv_widx *x, kv_watcher *w)
{
    if (w->kind == R_SINGLE) {
        single_add(x, w);
        return;
    }
    w->ix.t.l = w->ix.t.r = NULL;
    w->ix.t.maxw = w;
    w->ixv = next_prio(x);
    x->root = tree_insert(x->root, w);
    x->n_range++;
}

void kv_widx_remove(kv_widx *x, kv_watcher *w)
{
    if (w->kind == R_SINGLE) {
        single_remove(x, w);
        return;
    }
    x->root = tree_remove(x->root, w);
    w->ix.t.l = w->ix.t.r = w->ix.t.maxw = NULL;
    x->n_range--;
}

void kv_widx_match(kv_widx *x, const uint8_t *key, size_t klen, kv_widx_fn fn, void *arg)
{
    single_match(x, key, klen, fn, arg);
    stab(x, x->root, key, klen, fn, arg);
}
