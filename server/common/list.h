/*
 * list.h - THE intrusive circular doubly-linked list (libuv's uv__queue, the Linux list_head).
 * Header-only; includes nothing but <stddef.h>.
 *
 * Contract:
 * - Ownership: a list owns nothing. An element embeds a kv_list (its "link") and is allocated,
 *   freed and kept alive by its owner; the list only threads pointers through the links. Remove
 *   an element from its list before freeing it.
 * - Shape: a list is a kv_list head (never an element) plus the links of its elements, in a
 *   circle. An empty list's head, and a link on no list, point to themselves (kv_list_init).
 * - Preconditions: a head is initialised (kv_list_init) before any other call. A link is on at
 *   most one list at a time; insert only a link that is on no list (freshly initialised or
 *   removed). A link must be initialised (or inserted) before kv_list_remove is called on it.
 * - kv_list_remove leaves the link re-initialised (on no list): removing it again is harmless,
 *   and kv_list_empty(link) tells whether an initialised link is on a list (0: it is).
 * - Every operation is O(1); nothing allocates, nothing fails.
 * - Iteration: kv_list_foreach must not remove the current element; kv_list_foreach_safe may
 *   remove (or free) the current element, but no other one.
 * - Not thread-safe: the owner serialises access.
 */
#ifndef KV_COMMON_LIST_H
#define KV_COMMON_LIST_H

#include <stddef.h>

typedef struct kv_list {
    struct kv_list *next, *prev;
} kv_list;

/* The element of type `type` whose kv_list member `field` is at `ptr` (container-of). */
#define kv_list_data(ptr, type, field) ((type *)((char *)(ptr)-offsetof(type, field)))

/* Every link of the list at `head`, first to last; `pos` is a kv_list *. The body must not
 * remove `pos`. */
#define kv_list_foreach(pos, head) for ((pos) = (head)->next; (pos) != (head); (pos) = (pos)->next)

/* The same, but the body may remove (or free) `pos` (not any other element); `tmp` is a
 * kv_list * holding the next link. */
#define kv_list_foreach_safe(pos, tmp, head)                                                       \
    for ((pos) = (head)->next, (tmp) = (pos)->next; (pos) != (head);                               \
         (pos) = (tmp), (tmp) = (pos)->next)

/* An empty list head, or a link on no list. */
static inline void kv_list_init(kv_list *l)
{
    l->next = l;
    l->prev = l;
}

/* 1 if the list at head `l` has no element (for a link: it is on no list), else 0. */
static inline int kv_list_empty(const kv_list *l)
{
    return l->next == l;
}

/* Append the link `e` (on no list) at the end of the list at `head`. */
static inline void kv_list_insert_tail(kv_list *head, kv_list *e)
{
    e->next = head;
    e->prev = head->prev;
    head->prev->next = e;
    head->prev = e;
}

/* Prepend the link `e` (on no list) at the front of the list at `head`. */
static inline void kv_list_insert_head(kv_list *head, kv_list *e)
{
    e->next = head->next;
    e->prev = head;
    head->next->prev = e;
    head->next = e;
}

/* Unlink `e` from its list and re-initialise it; harmless when `e` is on no list. */
static inline void kv_list_remove(kv_list *e)
{
    e->prev->next = e->next;
    e->next->prev = e->prev;
    kv_list_init(e);
}

/* The first link of the list at `head`, NULL if it is empty. */
static inline kv_list *kv_list_head(const kv_list *head)
{
    return head->next == head ? NULL : head->next;
}

/* The link after `e` in the list at `head`, NULL if `e` is the last. */
static inline kv_list *kv_list_next(const kv_list *head, const kv_list *e)
{
    return e->next == head ? NULL : e->next;
}

/* Move every element of the list at `from` to the end of the list at `to`, in order; `from`
 * is left empty. */
static inline void kv_list_move(kv_list *from, kv_list *to)
{
    if (kv_list_empty(from))
        return;
    from->next->prev = to->prev;
    to->prev->next = from->next;
    from->prev->next = to;
    to->prev = from->prev;
    kv_list_init(from);
}

#endif /* KV_COMMON_LIST_H */
