/*
 * grpc_h2mem: the allocator of the server's nghttp2 sessions (grpc_internal.h).
 *
 * Every nghttp2 session allocates a 16 KiB outbound frame buffer up front
 * (NGHTTP2_FRAMEBUF_CHUNKLEN) and writes only the frames it sends into it: an agent's
 * connection, which sends small frames, touches its first page. From the heap that buffer
 * often lands on pages that earlier allocations touched (a TLS handshake's record buffers,
 * a closed connection's state), and then all of it is resident. Allocations of at least
 * KV_GRPC_H2_MMAP_MIN bytes therefore get pages of their own (mmap), which stay out of the
 * resident set until written; smaller ones come from malloc. Each allocation carries a
 * 16-byte header (its size, and where it came from) so that free and realloc know.
 * Measured: docs in server/grpc/README.md, "Memory per connection".
 */
#include "grpc/grpc_internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define KV_GRPC_H2_MMAP_MIN 8192

typedef struct h2hdr {
    size_t size;   /* bytes asked for */
    size_t mapped; /* 1: mmap'd (header + size bytes), 0: malloc'd */
} h2hdr;

static void *h2_malloc(size_t n, void *ud)
{
    (void)ud;
    if (n > SIZE_MAX - sizeof(h2hdr))
        return NULL;
    h2hdr *h = NULL;
    if (n >= KV_GRPC_H2_MMAP_MIN) {
        void *p = mmap(NULL, n + sizeof(h2hdr), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                       -1, 0);
        if (p != MAP_FAILED) {
            h = p;
            h->mapped = 1;
        }
    }
    if (!h) { /* small, or no mapping left (vm.max_map_count): the heap */
        h = malloc(n + sizeof(h2hdr));
        if (!h)
            return NULL;
        h->mapped = 0;
    }
    h->size = n;
    return h + 1;
}

static void h2_free(void *p, void *ud)
{
    (void)ud;
    if (!p)
        return;
    h2hdr *h = (h2hdr *)p - 1;
    if (h->mapped)
        munmap(h, h->size + sizeof(h2hdr));
    else
        free(h);
}

static void *h2_calloc(size_t nmemb, size_t size, void *ud)
{
    if (size && nmemb > SIZE_MAX / size)
        return NULL;
    void *p = h2_malloc(nmemb * size, ud);
    if (p && !((h2hdr *)p - 1)->mapped) /* mmap'd pages are zero already */
        memset(p, 0, nmemb * size);
    return p;
}

static void *h2_realloc(void *p, size_t n, void *ud)
{
    if (!p)
        return h2_malloc(n, ud);
    h2hdr *h = (h2hdr *)p - 1;
    if (!h->mapped && n < KV_GRPC_H2_MMAP_MIN) { /* stays on the heap */
        if (n > SIZE_MAX - sizeof(h2hdr))
            return NULL;
        h2hdr *nh = realloc(h, n + sizeof(h2hdr));
        if (!nh)
            return NULL;
        nh->size = n;
        return nh + 1;
    }
    void *q = h2_malloc(n, ud);
    if (!q)
        return NULL;
    memcpy(q, p, h->size < n ? h->size : n);
    h2_free(p, ud);
    return q;
}

nghttp2_mem *kv_grpc_h2_mem(nghttp2_mem *m)
{
    m->mem_user_data = NULL;
    m->malloc = h2_malloc;
    m->free = h2_free;
    m->calloc = h2_calloc;
    m->realloc = h2_realloc;
    return m;
}
