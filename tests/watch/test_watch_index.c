/*
 * Unit tests of the watcher index (server/watch/watch_index.c): single keys (hash map), ranges,
 * open-ended ranges and prefixes (augmented treap), removal, and random binary data checked
 * against a brute-force scan with kv_watch_match. Also the cost: nodes examined per lookup
 * (kv_widx.visits) grow with the matches and the tree depth, not with the idle watchers.
 */
#include <criterion/criterion.h>

#include "watch/watch_index.h"
#include "watch/watch_int.h"

#include <stdlib.h>
#include <string.h>

typedef struct hits {
    kv_watcher *base; /* watchers are elements of one array */
    size_t n;
    int *count; /* per watcher */
    size_t total;
} hits;

static void on_hit(void *arg, kv_watcher *w)
{
    hits *h = arg;
    size_t i = (size_t)(w - h->base);
    cr_assert_lt(i, h->n);
    h->count[i]++;
    h->total++;
}

static void set_w(kv_watcher *w, int kind, const void *k, size_t kl, const void *e, size_t el)
{
    memset(w, 0, sizeof(*w));
    w->kind = kind;
    w->key = malloc(kl ? kl : 1);
    memcpy(w->key, k, kl);
    w->klen = kl;
    if (kind == R_RANGE) {
        w->end = malloc(el ? el : 1);
        memcpy(w->end, e, el);
        w->elen = el;
    }
}

static void free_w(kv_watcher *w)
{
    free(w->key);
    free(w->end);
}

/* Looks key up; returns the number of matches and checks each watcher at most once. */
static size_t lookup(kv_widx *x, kv_watcher *ws, size_t n, int *count, const char *key)
{
    memset(count, 0, n * sizeof(int));
    hits h = {ws, n, count, 0};
    kv_widx_match(x, (const uint8_t *)key, strlen(key), on_hit, &h);
    for (size_t i = 0; i < n; i++)
        cr_assert_leq(count[i], 1, "watcher %zu reported %d times", i, count[i]);
    return h.total;
}

Test(watch_index, single_keys_and_removal)
{
    kv_widx x;
    cr_assert_eq(kv_widx_init(&x), 0);
    enum { N = 5000 };
    kv_watcher *ws = calloc(N, sizeof(*ws));
    int *count = calloc(N, sizeof(int));
    char k[32];
    for (int i = 0; i < N; i++) { /* 1000 keys, 5 watchers each */
        snprintf(k, sizeof(k), "key/%d", i % 1000);
        set_w(&ws[i], R_SINGLE, k, strlen(k), NULL, 0);
        kv_widx_add(&x, &ws[i]);
    }
    cr_assert_eq(x.n_keys, 1000);
    cr_assert_eq(x.n_single, N);
    cr_assert_eq(lookup(&x, ws, N, count, "key/7"), 5);
    for (int j = 0; j < 5; j++)
        cr_assert_eq(count[7 + 1000 * j], 1);
    cr_assert_eq(lookup(&x, ws, N, count, "key/"), 0);
    cr_assert_eq(lookup(&x, ws, N, count, "key/70"), 5);
    cr_assert_eq(lookup(&x, ws, N, count, "key/7\x01"), 0);
    /* remove the head, a middle and the last watcher of key/7 */
    kv_widx_remove(&x, &ws[7]);
    kv_widx_remove(&x, &ws[2007]);
    kv_widx_remove(&x, &ws[4007]);
    cr_assert_eq(lookup(&x, ws, N, count, "key/7"), 2);
    cr_assert_eq(count[1007] + count[3007], 2);
    kv_widx_remove(&x, &ws[1007]);
    kv_widx_remove(&x, &ws[3007]);
    cr_assert_eq(lookup(&x, ws, N, count, "key/7"), 0);
    cr_assert_eq(x.n_keys, 999);
    /* a lookup examines one bucket chain and the matches, not the 5,000 watchers */
    uint64_t v0 = x.visits;
    for (int i = 0; i < 1000; i++) {
        snprintf(k, sizeof(k), "none/%d", i);
        cr_assert_eq(lookup(&x, ws, N, count, k), 0);
    }
    cr_assert_leq(x.visits - v0, 1000 * 8, "%llu visits for 1000 missing keys",
                  (unsigned long long)(x.visits - v0));
    /* remove everything: the table shrinks back, lookups find nothing */
    for (int i = 0; i < N; i++)
        if (i % 1000 != 7)
            kv_widx_remove(&x, &ws[i]);
    cr_assert_eq(x.n_keys, 0);
    cr_assert_eq(x.n_single, 0);
    cr_assert_eq(lookup(&x, ws, N, count, "key/8"), 0);
    for (int i = 0; i < N; i++)
        free_w(&ws[i]);
    free(ws);
    free(count);
    kv_widx_free(&x);
}

Test(watch_index, ranges_open_ended_and_prefixes)
{
    kv_widx x;
    cr_assert_eq(kv_widx_init(&x), 0);
    kv_watcher ws[6];
    int count[6];
    set_w(&ws[0], R_RANGE, "b", 1, "d", 1);             /* [b, d) */
    set_w(&ws[1], R_FROM, "c", 1, NULL, 0);             /* >= c (range_end "\0") */
    set_w(&ws[2], R_RANGE, "ab", 2, "ac", 2);           /* prefix ab */
    set_w(&ws[3], R_FROM, "\0", 1, NULL, 0);            /* every key */
    set_w(&ws[4], R_SINGLE, "c", 1, NULL, 0);           /* single c */
    set_w(&ws[5], R_RANGE, "c\xff", 2, "c\xff\xff", 3); /* binary */
    for (int i = 0; i < 6; i++)
        kv_widx_add(&x, &ws[i]);
    cr_assert_eq(x.n_range, 5);
    cr_assert_eq(lookup(&x, ws, 6, count, "a"), 1);
    cr_assert_eq(count[3], 1);
    cr_assert_eq(lookup(&x, ws, 6, count, "ab"), 2);
    cr_assert_eq(lookup(&x, ws, 6, count, "abzzz"), 2);
    cr_assert_eq(count[2] + count[3], 2);
    cr_assert_eq(lookup(&x, ws, 6, count, "ac"), 1);
    cr_assert_eq(lookup(&x, ws, 6, count, "b"), 2);
    cr_assert_eq(lookup(&x, ws, 6, count, "c"), 4); /* [b,d), >= c, all, single c */
    cr_assert_eq(count[0] + count[1] + count[3] + count[4], 4);
    cr_assert_eq(lookup(&x, ws, 6, count, "c\xff"), 4); /* [b,d), >= c, all, c\xff.. */
    cr_assert_eq(count[5], 1);
    cr_assert_eq(lookup(&x, ws, 6, count, "c\xff\xff"), 3);
    cr_assert_eq(lookup(&x, ws, 6, count, "d"), 2);
    cr_assert_eq(lookup(&x, ws, 6, count, "\xff\xff\xff\xff"), 2);
    kv_widx_remove(&x, &ws[3]);
    kv_widx_remove(&x, &ws[1]);
    cr_assert_eq(lookup(&x, ws, 6, count, "a"), 0);
    cr_assert_eq(lookup(&x, ws, 6, count, "zz"), 0);
    cr_assert_eq(lookup(&x, ws, 6, count, "c"), 2);
    for (int i = 0; i < 6; i++)
        if (i != 1 && i != 3)
            kv_widx_remove(&x, &ws[i]);
    cr_assert_null(x.root);
    for (int i = 0; i < 6; i++)
        free_w(&ws[i]);
    kv_widx_free(&x);
}

/* Many overlapping ranges: every match is found once; a point covered by no range costs a few
 * tree paths, a point covered by m ranges about m paths. */
Test(watch_index, many_overlapping_ranges_cost_follows_matches)
{
    kv_widx x;
    cr_assert_eq(kv_widx_init(&x), 0);
    enum { N = 20000 };
    kv_watcher *ws = calloc(N, sizeof(*ws));
    int *count = calloc(N, sizeof(int));
    char k[32], e[32];
    for (int i = 0; i < N; i++) {
        if (i < N / 2) { /* disjoint prefixes p/00000/ .. */
            snprintf(k, sizeof(k), "p/%05d/", i);
            snprintf(e, sizeof(e), "p/%05d0", i);
        } else { /* nested ranges [q/<i>, r/<N-i>): all overlap */
            snprintf(k, sizeof(k), "q/%05d", i);
            snprintf(e, sizeof(e), "r/%05d", N - i);
        }
        set_w(&ws[i], R_RANGE, k, strlen(k), e, strlen(e));
        kv_widx_add(&x, &ws[i]);
    }
    uint64_t v0 = x.visits;
    cr_assert_eq(lookup(&x, ws, N, count, "p/04242/x"), 1);
    cr_assert_eq(count[4242], 1);
    cr_assert_eq(lookup(&x, ws, N, count, "a"), 0);
    cr_assert_eq(lookup(&x, ws, N, count, "p/04242"), 0);
    uint64_t few = x.visits - v0;
    cr_assert_leq(few, 3 * 200, "%llu visits for 3 lookups with 1 match", (unsigned long long)few);
    /* "q/15000x" is inside [q/i, r/..) for i <= 15000: 5,001 matches */
    v0 = x.visits;
    cr_assert_eq(lookup(&x, ws, N, count, "q/15000x"), 5001);
    for (int i = N / 2; i < N; i++)
        cr_assert_eq(count[i], i <= 15000, "range %d", i);
    uint64_t many = x.visits - v0;
    cr_assert_leq(many, 5001 * 8, "%llu visits for 5001 matches", (unsigned long long)many);
    cr_assert_eq(lookup(&x, ws, N, count, "r/0"), N / 2); /* all nested ones end after r/0 */
    for (int i = 0; i < N; i++)
        kv_widx_remove(&x, &ws[i]);
    cr_assert_null(x.root);
    for (int i = 0; i < N; i++)
        free_w(&ws[i]);
    free(ws);
    free(count);
    kv_widx_free(&x);
}

/* ---- random binary keys against a brute-force scan ---- */

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static size_t rkey(uint64_t *s, uint8_t *out, size_t min)
{
    static const uint8_t alpha[] = {0x00, 0x01, 'a', 'b', 0x7f, 0x80, 0xfe, 0xff};
    size_t n = min + (size_t)(rnd(s) % 4);
    for (size_t i = 0; i < n; i++)
        out[i] = alpha[rnd(s) % sizeof(alpha)];
    return n;
}

Test(watch_index, random_binary_keys_match_brute_force)
{
    kv_widx x;
    cr_assert_eq(kv_widx_init(&x), 0);
    enum { N = 3000, ROUNDS = 20, QUERIES = 400 };
    kv_watcher *ws = calloc(N, sizeof(*ws));
    bool *in = calloc(N, sizeof(bool));
    int *count = calloc(N, sizeof(int));
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    for (int round = 0; round < ROUNDS; round++) {
        /* add or remove a random third */
        for (int t = 0; t < N / 3; t++) {
            size_t i = (size_t)(rnd(&seed) % N);
            if (in[i]) {
                kv_widx_remove(&x, &ws[i]);
                free_w(&ws[i]);
                in[i] = false;
                continue;
            }
            uint8_t k[8], e[8];
            size_t kl = rkey(&seed, k, 1), el;
            int kind = (int)(rnd(&seed) % 4);
            if (kind == 3) { /* prefix of k: end = k with its last non-0xff byte + 1 */
                el = kl;
                memcpy(e, k, kl);
                while (el > 0 && e[el - 1] == 0xff)
                    el--;
                if (el == 0) {
                    kind = R_FROM; /* prefix of 0xff..: every key >= k */
                } else {
                    e[el - 1]++;
                    kind = R_RANGE;
                }
            } else if (kind == R_RANGE) {
                do
                    el = rkey(&seed, e, 1);
                while (memcmp(e, k, el < kl ? el : kl) < 0 ||
                       (memcmp(e, k, el < kl ? el : kl) == 0 && el <= kl));
            } else {
                el = 0;
            }
            set_w(&ws[i], kind, k, kl, e, el);
            kv_widx_add(&x, &ws[i]);
            in[i] = true;
        }
        size_t live = 0;
        for (size_t i = 0; i < N; i++)
            live += in[i];
        cr_assert_eq(x.n_single + x.n_range, live);
        for (int q = 0; q < QUERIES; q++) {
            uint8_t key[8];
            size_t kl = rkey(&seed, key, 1);
            memset(count, 0, N * sizeof(int));
            hits h = {ws, N, count, 0};
            kv_widx_match(&x, key, kl, on_hit, &h);
            for (size_t i = 0; i < N; i++) {
                int want = in[i] && kv_watch_match(&ws[i], key, kl);
                cr_assert_eq(count[i], want, "round %d query %d watcher %zu kind %d", round, q, i,
                             ws[i].kind);
            }
        }
    }
    for (size_t i = 0; i < N; i++)
        if (in[i]) {
            kv_widx_remove(&x, &ws[i]);
            free_w(&ws[i]);
        }
    cr_assert_null(x.root);
    cr_assert_eq(x.n_keys, 0);
    free(ws);
    free(in);
    free(count);
    kv_widx_free(&x);
}
