/*
 * watch_index: the synced watchers indexed by key, so that matching a committed event costs
 * O(1 + matches) for single-key watchers and O(log n + matches) for ranges, whatever the
 * number of idle watchers (etcd 3.4 mvcc/watcher_group.go: keyWatchers map + an interval tree
 * for ranges). docs/ARCHITECTURE.md, Watch.
 *
 * - Single keys: a hash table (seeded hash, chained) of one head watcher per distinct key;
 *   the other watchers of the same key are on a list (common/list.h) whose head is the head
 *   watcher's own link.
 * - Ranges [key, end) and open-ended ranges [key, +inf) (range_end "\0"; prefixes are ranges):
 *   a treap ordered by (key, watcher address), each node augmented with the watcher of
 *   largest end in its subtree; a stabbing query prunes subtrees whose largest end is <= the
 *   event's key and stops at starts > the key.
 * The links live in the watcher (kv_widx_link): adding never allocates, except when the hash
 * table grows (on failure it keeps its size and only chains get longer); so add cannot fail.
 *
 * Threads: the loop thread only (the hub's). Keys are binary, compared as etcd does
 * (bytewise, shorter prefix first).
 */
#ifndef KV_WATCH_INDEX_H
#define KV_WATCH_INDEX_H

#include <stddef.h>
#include <stdint.h>

#include "common/list.h"

typedef struct kv_watcher kv_watcher;

/* Index links embedded in a watcher (which of the two depends on its kind). */
typedef union kv_widx_link {
    struct {
        kv_watcher *hnext; /* next head watcher in the hash bucket (heads only) */
        kv_list same;      /* head: the list of the key's other watchers; else on that list */
    } s;
    struct {
        kv_watcher *l, *r;
        kv_watcher *maxw; /* the watcher of largest end in this subtree */
    } t;
} kv_widx_link;

typedef struct kv_widx {
    kv_watcher **tab; /* hash buckets of single-key heads */
    size_t cap;       /* buckets, a power of two (>= 64) */
    size_t n_keys;    /* distinct single keys */
    size_t n_single, n_range;
    kv_watcher *root; /* treap of range watchers */
    uint64_t seed;    /* hash seed */
    uint64_t rng;     /* treap priorities (xorshift) */
    uint64_t visits;  /* buckets entries, tree nodes and watchers examined by kv_widx_match */
} kv_widx;

/* 0 or -ENOMEM (the first table of 64 buckets). */
int kv_widx_init(kv_widx *x);
/* Frees the table; the watchers are not touched. */
void kv_widx_free(kv_widx *x);
/* w (kind, key and end set; not in the index) is added. Never fails. */
void kv_widx_add(kv_widx *x, kv_watcher *w);
/* w (in the index) is removed. */
void kv_widx_remove(kv_widx *x, kv_watcher *w);
/* Calls fn for every watcher of the index that matches key (each once, in no set order). fn
 * must not change the index. */
typedef void (*kv_widx_fn)(void *arg, kv_watcher *w);
void kv_widx_match(kv_widx *x, const uint8_t *key, size_t klen, kv_widx_fn fn, void *arg);

#endif
