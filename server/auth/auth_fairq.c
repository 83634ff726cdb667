/* auth_fairq: fair queue of password hash jobs (see auth_fairq.h). */
#include "auth/auth_fairq.h"

#include <errno.h>
#include <stdlib.h>

typedef struct entry {
    void *job;
    uint64_t conn;
    uint32_t cls, round;
    uint64_t seq;
} entry;

typedef struct source {
    uint64_t conn; /* 0 = free slot (connection ids start at 1) */
    uint32_t fails;
} source;

struct kv_auth_fairq {
    entry *e;
    size_t n, max;
    source *src;
    size_t nsrc, max_src;
    uint64_t seq;
};

int kv_auth_fairq_new(kv_auth_fairq **out, uint32_t max_queued, uint32_t max_sources)
{
    *out = NULL;
    if (!max_queued || !max_sources)
        return -EINVAL;
    kv_auth_fairq *q = calloc(1, sizeof *q);
    if (!q || !(q->e = calloc(max_queued, sizeof *q->e)) ||
        !(q->src = calloc(max_sources, sizeof *q->src))) {
        kv_auth_fairq_free(q);
        return -ENOMEM;
    }
    q->max = max_queued;
    q->max_src = max_sources;
    *out = q;
    return 0;
}

void kv_auth_fairq_free(kv_auth_fairq *q)
{
    if (!q)
        return;
    free(q->e);
    free(q->src);
    free(q);
}

static source *find(const kv_auth_fairq *q, uint64_t conn)
{
    for (size_t i = 0; i < q->nsrc; i++)
        if (q->src[i].conn == conn)
            return &q->src[i];
    return NULL;
}

uint32_t kv_auth_fairq_charges(const kv_auth_fairq *q, uint64_t conn)
{
    const source *s = find(q, conn);
    return s ? s->fails : 0;
}

size_t kv_auth_fairq_sources(const kv_auth_fairq *q)
{
    return q->nsrc;
}

void kv_auth_fairq_charge(kv_auth_fairq *q, uint64_t conn)
{
    source *s = find(q, conn);
    if (!s && q->nsrc < q->max_src) {
        s = &q->src[q->nsrc++];
        *s = (source){conn, 0};
    } else if (!s) { /* full: the entry with the fewest failures makes room */
        s = &q->src[0];
        for (size_t i = 1; i < q->nsrc; i++)
            if (q->src[i].fails < s->fails)
                s = &q->src[i];
        *s = (source){conn, 0};
    }
    if (s->fails < UINT32_MAX)
        s->fails++;
}

void kv_auth_fairq_clear(kv_auth_fairq *q, uint64_t conn)
{
    source *s = find(q, conn);
    if (s)
        *s = q->src[--q->nsrc];
}

/* <0: a ranks before b (is served first). */
static int rank_cmp(const entry *a, const entry *b)
{
    if (a->cls != b->cls)
        return a->cls < b->cls ? -1 : 1;
    if (a->round != b->round)
        return a->round < b->round ? -1 : 1;
    return a->seq > b->seq ? -1 : a->seq < b->seq; /* newest first, see auth_fairq.h */
}

static size_t worst(const kv_auth_fairq *q)
{
    size_t w = 0;
    for (size_t i = 1; i < q->n; i++)
        if (rank_cmp(&q->e[i], &q->e[w]) > 0)
            w = i;
    return w;
}

int kv_auth_fairq_push(kv_auth_fairq *q, uint64_t conn, void *job, void **evicted)
{
    *evicted = NULL;
    if (!job)
        return -EINVAL;
    uint32_t f = kv_auth_fairq_charges(q, conn), round = 0;
    for (size_t i = 0; i < q->n; i++)
        round += q->e[i].conn == conn;
    entry ne = {job, conn, f < KV_AUTH_FAIRQ_MAX_CLASS ? f : KV_AUTH_FAIRQ_MAX_CLASS, round,
                q->seq + 1};
    size_t at = q->n;
    if (q->n == q->max) {
        size_t w = worst(q);
        if (rank_cmp(&ne, &q->e[w]) >= 0)
            return -EBUSY;
        *evicted = q->e[w].job;
        at = w;
    } else {
        q->n++;
    }
    q->seq++;
    q->e[at] = ne;
    return 0;
}

void *kv_auth_fairq_pop(kv_auth_fairq *q)
{
    if (!q->n)
        return NULL;
    size_t b = 0;
    for (size_t i = 1; i < q->n; i++)
        if (rank_cmp(&q->e[i], &q->e[b]) < 0)
            b = i;
    void *job = q->e[b].job;
    q->e[b] = q->e[--q->n];
    return job;
}

int kv_auth_fairq_remove(kv_auth_fairq *q, void *job)
{
    for (size_t i = 0; i < q->n; i++)
        if (q->e[i].job == job) {
            q->e[i] = q->e[--q->n];
            return 0;
        }
    return -ENOENT;
}

size_t kv_auth_fairq_len(const kv_auth_fairq *q)
{
    return q->n;
}
