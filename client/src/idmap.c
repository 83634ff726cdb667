/*
 * idmap.c - the intrusive id -> entry hash map (contract in idmap.h). Chained, power-of-two
 * slot count, Fibonacci hashing, doubled when n would exceed cap.
 */
#include "idmap.h"

#include <errno.h>
#include <stdlib.h>

static size_t slot_of(const kvc_idmap *m, int64_t id)
{
    return (size_t)(((uint64_t)id * 0x9E3779B97F4A7C15ULL) >> 20) & (m->cap - 1);
}

kvc_idmap_node *kvc_idmap_find(const kvc_idmap *m, int64_t id)
{
    if (!m->cap)
        return NULL;
    for (kvc_idmap_node *n = m->slots[slot_of(m, id)]; n; n = n->next)
        if (n->id == id)
            return n;
    return NULL;
}

int kvc_idmap_insert(kvc_idmap *m, kvc_idmap_node *n)
{
    if (m->n + 1 > m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 16;
        kvc_idmap_node **slots = calloc(cap, sizeof *slots);
        if (!slots)
            return -ENOMEM;
        kvc_idmap_node **old = m->slots;
        size_t oldcap = m->cap;
        m->slots = slots;
        m->cap = cap;
        for (size_t i = 0; i < oldcap; i++) {
            kvc_idmap_node *e = old[i];
            while (e) {
                kvc_idmap_node *nx = e->next;
                size_t k = slot_of(m, e->id);
                e->next = slots[k];
                slots[k] = e;
                e = nx;
            }
        }
        free(old);
    }
    size_t k = slot_of(m, n->id);
    n->next = m->slots[k];
    m->slots[k] = n;
    m->n++;
    return 0;
}

void kvc_idmap_remove(kvc_idmap *m, kvc_idmap_node *n)
{
    if (!m->cap)
        return;
    kvc_idmap_node **pp = &m->slots[slot_of(m, n->id)];
    while (*pp && *pp != n)
        pp = &(*pp)->next;
    if (*pp) {
        *pp = n->next;
        m->n--;
    }
    n->next = NULL;
}

static kvc_idmap_node *first_from(const kvc_idmap *m, size_t slot)
{
    for (size_t i = slot; i < m->cap; i++)
        if (m->slots[i])
            return m->slots[i];
    return NULL;
}

kvc_idmap_node *kvc_idmap_first(const kvc_idmap *m)
{
    return first_from(m, 0);
}

kvc_idmap_node *kvc_idmap_next(const kvc_idmap *m, const kvc_idmap_node *n)
{
    if (n->next)
        return n->next;
    return first_from(m, slot_of(m, n->id) + 1);
}

void kvc_idmap_free(kvc_idmap *m)
{
    free(m->slots);
    m->slots = NULL;
    m->cap = m->n = 0;
}
