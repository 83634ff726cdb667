/*
 * idmap.h - an intrusive open hash map from int64 id to entry, shared by the watch scheduler
 * (server watch id -> watcher) and the keepalive scheduler (lease id -> keepalive).
 *
 * Intrusive: the entry embeds a kvc_idmap_node and KVC_IDMAP_ENTRY gets the entry back. The
 * map owns only its slot array (freed by kvc_idmap_free); it never owns, frees or references
 * the entries, and an entry must be removed before it is freed. The node's id must be set
 * before kvc_idmap_insert and must not change while the node is in the map. Ids are unique:
 * the caller checks with kvc_idmap_find before inserting.
 *
 * Thread: not synchronised; used only on the client's I/O thread.
 *
 * Internal to libkvclient: hidden visibility, never exported by the shared library.
 */
#ifndef KVC_IDMAP_H
#define KVC_IDMAP_H

#include <stddef.h>
#include <stdint.h>

#define KVC_IDMAP_API __attribute__((visibility("hidden")))

typedef struct kvc_idmap_node {
    int64_t id;
    struct kvc_idmap_node *next; /* chain; owned by the map while the node is in it */
} kvc_idmap_node;

typedef struct kvc_idmap {
    kvc_idmap_node **slots; /* cap chains (cap is 0 or a power of two) */
    size_t cap, n;          /* n: nodes in the map */
} kvc_idmap;

/* The entry of type `type` whose member `member` is the node `node`. */
#define KVC_IDMAP_ENTRY(node, type, member) ((type *)((char *)(node)-offsetof(type, member)))

/* A zeroed kvc_idmap is an empty map; this is the same. */
#define KVC_IDMAP_INIT                                                                             \
    {                                                                                              \
        NULL, 0, 0                                                                                 \
    }

/* The node with this id, or NULL. */
KVC_IDMAP_API kvc_idmap_node *kvc_idmap_find(const kvc_idmap *m, int64_t id);
/* Insert n (n->id set, not in any map). 0, or -ENOMEM (the map is unchanged). */
KVC_IDMAP_API int kvc_idmap_insert(kvc_idmap *m, kvc_idmap_node *n);
/* Remove n if it is in the map (otherwise no-op); n->next is cleared either way. The slot
 * array is kept. */
KVC_IDMAP_API void kvc_idmap_remove(kvc_idmap *m, kvc_idmap_node *n);
/* Iteration in slot order, then chain order: first node, or NULL when empty; next node after
 * n (n must be in the map), or NULL. The current node may be removed after its successor has
 * been fetched:  for (p = first(m); p; p = nx) { nx = next(m, p); ... remove(m, p); } */
KVC_IDMAP_API kvc_idmap_node *kvc_idmap_first(const kvc_idmap *m);
KVC_IDMAP_API kvc_idmap_node *kvc_idmap_next(const kvc_idmap *m, const kvc_idmap_node *n);
/* Free the slot array (not the entries) and leave an empty map. */
KVC_IDMAP_API void kvc_idmap_free(kvc_idmap *m);

#endif
