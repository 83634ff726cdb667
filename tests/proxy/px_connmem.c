/* px_connmem: see px_connmem.h. */
#include "px_connmem.h"

#include "grpc_raw.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PX_CONNMEM_BATCH 100
#define PX_CONNMEM_WAIT_MS 10000

static size_t ka_req(uint8_t *b, int64_t id)
{
    size_t n = 0;
    uint64_t v = (uint64_t)id;
    b[n++] = 0x08; /* LeaseKeepAliveRequest.ID, varint */
    do {
        b[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    return n;
}

/* Reads the answer of stream i: a LeaseKeepAliveResponse carrying lease (field 2) and a
 * TTL > 0 (field 3); the header (field 1) is skipped. */
static int ka_answer(px_connmem *m, int i, int64_t lease, char *err, size_t cap)
{
    uint8_t *msg = NULL;
    size_t len = 0;
    int r = kv_it_grpc_stream_recv(m->st[i], &msg, &len, PX_CONNMEM_WAIT_MS);
    if (r) {
        snprintf(err, cap, "connection %d: no keepalive answer (%d, grpc-status %d)", i, r,
                 m->st[i]->grpc_status);
        return r < 0 ? r : -EPROTO;
    }
    int64_t id = 0, ttl = 0;
    size_t p = 0;
    while (p < len) {
        uint8_t key = msg[p++];
        if ((key & 7) == 2) { /* length-delimited: the header */
            uint64_t l = 0;
            for (int sh = 0; p < len && sh < 64; sh += 7) {
                l |= (uint64_t)(msg[p] & 0x7f) << sh;
                if (!(msg[p++] & 0x80))
                    break;
            }
            p += l;
            continue;
        }
        uint64_t v = 0;
        for (int sh = 0; p < len && sh < 64; sh += 7) {
            v |= (uint64_t)(msg[p] & 0x7f) << sh;
            if (!(msg[p++] & 0x80))
                break;
        }
        if (key == 0x10)
            id = (int64_t)v;
        else if (key == 0x18)
            ttl = (int64_t)v;
    }
    free(msg);
    if (id != lease || ttl <= 0) {
        snprintf(err, cap, "connection %d: keepalive answer id %lld ttl %lld", i, (long long)id,
                 (long long)ttl);
        return -EPROTO;
    }
    return 0;
}

static int send_renewal(px_connmem *m, int i, int64_t lease, char *err, size_t cap)
{
    uint8_t req[16];
    size_t n = ka_req(req, lease);
    int r = kv_it_grpc_send_msg(m->st[i], req, n, 0);
    if (!r)
        r = kv_it_grpc_flush(m->conn[i], PX_CONNMEM_WAIT_MS);
    if (r)
        snprintf(err, cap, "connection %d: send renewal: %d", i, r);
    return r;
}

int px_connmem_open(px_connmem *m, uint16_t port, void *ssl_ctx, int64_t lease, int n, char *err,
                    size_t cap)
{
    /* kv_it_grpc_open's windows */
    kv_it_grpc_opts o = {.set_window = 1, .window = 1u << 24, .conn_window = 1u << 26};
    o.ssl_ctx = ssl_ctx;
    memset(m, 0, sizeof(*m));
    m->conn = calloc((size_t)n, sizeof(*m->conn));
    m->st = calloc((size_t)n, sizeof(*m->st));
    if (!m->conn || !m->st) {
        snprintf(err, cap, "out of memory");
        return -ENOMEM;
    }
    for (int b = 0; b < n; b += PX_CONNMEM_BATCH) {
        int e = b + PX_CONNMEM_BATCH < n ? b + PX_CONNMEM_BATCH : n;
        for (int i = b; i < e; i++) {
            int r = kv_it_grpc_open_opts(&m->conn[i], "127.0.0.1", port, PX_CONNMEM_WAIT_MS, &o);
            if (r) {
                snprintf(err, cap, "connection %d: open: %d", i, r);
                return r;
            }
            m->n = i + 1;
            m->st[i] =
                kv_it_grpc_stream_start(m->conn[i], "/etcdserverpb.Lease/LeaseKeepAlive", NULL);
            if (!m->st[i]) {
                snprintf(err, cap, "connection %d: stream refused", i);
                return -ENOMEM;
            }
            r = send_renewal(m, i, lease, err, cap);
            if (r)
                return r;
        }
        for (int i = b; i < e; i++) {
            int r = ka_answer(m, i, lease, err, cap);
            if (r)
                return r;
        }
    }
    return 0;
}

int px_connmem_renew(px_connmem *m, int64_t lease, char *err, size_t cap)
{
    for (int b = 0; b < m->n; b += PX_CONNMEM_BATCH) {
        int e = b + PX_CONNMEM_BATCH < m->n ? b + PX_CONNMEM_BATCH : m->n;
        for (int i = b; i < e; i++) {
            int r = send_renewal(m, i, lease, err, cap);
            if (r)
                return r;
        }
        for (int i = b; i < e; i++) {
            int r = ka_answer(m, i, lease, err, cap);
            if (r)
                return r;
        }
    }
    return 0;
}

void px_connmem_close(px_connmem *m)
{
    for (int i = 0; i < m->n; i++)
        kv_it_grpc_close(m->conn[i]);
    free(m->conn);
    free(m->st);
    memset(m, 0, sizeof(*m));
}
