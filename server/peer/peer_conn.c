/* peer_conn.c - one member-to-member connection's socket: dial/accept, reads into the nghttp2
 * session, batched writes out of it, PING liveness, close. The HTTP/2 layer is in
 * peer_session.c. */
#include "peer/peer_internal.h"
#include "common/fnv.h"
#include "net/listen.h"
#include "net/tls.h"

#include <errno.h>
#include <stdio.h>
#include <sys/socket.h>
#include <stdlib.h>
#include <string.h>

/* ---- socket I/O ---- */

static void conn_closed_cb(uv_handle_t *h)
{
    peer_conn *c = h->data;
    kv_peer_net *n = c->net;
    if (c->h2)
        nghttp2_session_del(c->h2);
    kv_list *e;
    while ((e = kv_list_head(&c->streams)))
        kv_peer_stream_free(c, kv_list_data(e, peer_stream, link));
    free(c->wbuf);
    free(c->h1);
    kv_tls_conn_free(c->tls);
    kv_list_remove(&c->link);
    n->n_conns--;
    free(c);
    kv_peer_handle_closed(n);
}

void kv_peer_conn_unpend(peer_conn *c)
{
    if (!c->pending)
        return;
    c->pending = 0;
    c->net->n_pending--;
    kv_metric_set(c->net->m_pending, (double)c->net->n_pending);
}

void kv_peer_conn_refuse(peer_conn *c, int reason, const char *why)
{
    if (c->closing)
        return;
    if (!c->refused && !c->net->closing)
        kv_peer_refused(c->net, reason, c->where, why);
    c->refused = 1;
    kv_peer_conn_close(c, NULL);
}

void kv_peer_conn_close(peer_conn *c, const char *why)
{
    if (c->closing)
        return;
    if (c->pending) { /* an unidentified connection: counted, logged rate-limited */
        if (!c->refused && !c->net->closing)
            kv_peer_refused(c->net, PEER_REFUSE_OTHER, c->where, why);
        c->refused = 1;
        kv_peer_conn_unpend(c);
    } else if (why) {
        kv_peer_log(c->net, "closing connection with %s: %s", c->where, why);
    }
    kv_peer *p = c->peer;
    if (p)
        kv_peer_on_down(p, c);
    c->peer = NULL;
    c->closing = 1;
    uv_close((uv_handle_t *)&c->tcp, conn_closed_cb);
}

static void write_cb(uv_write_t *req, int status)
{
    peer_conn *c = req->data;
    c->writing = 0;
    c->wlen = 0;
    if (c->closing)
        return;
    if (status < 0) {
        kv_peer_conn_close(c, uv_strerror(status));
        return;
    }
    kv_peer_conn_flush(c);
}

static int wbuf_append(peer_conn *c, const uint8_t *d, size_t len)
{
    static const size_t cap = PEER_WRITE_CHUNK + 32 * 1024;
    if (!c->wbuf) {
        c->wbuf = malloc(cap);
        if (!c->wbuf)
            return -ENOMEM;
    }
    if (c->wlen + len > cap)
        return -EAGAIN;
    memcpy(c->wbuf + c->wlen, d, len);
    c->wlen += len;
    return 0;
}

void kv_peer_conn_flush(peer_conn *c)
{
    if (c->closing || (!c->h2 && !c->tls && !c->h1)) /* TLS: the handshake flows first */
        return;
    if (c->in_recv) {
        c->dirty = 1;
        return;
    }
    if (c->writing)
        return;
again:
    if (c->tls) { /* TLS: ciphertext into wbuf */
        if (kv_peer_tls_fill(c) != 0)
            return;
        goto write;
    }
    while (c->h2 && c->wlen < PEER_WRITE_CHUNK) { /* no h2: an HTTP/1.1 answer (peer_h1.c) */
        const uint8_t *d;
        ssize_t k = nghttp2_session_mem_send(c->h2, &d);
        if (k < 0) {
            kv_peer_conn_close(c, nghttp2_strerror((int)k));
            return;
        }
        if (k == 0)
            break;
        int rc = wbuf_append(c, d, (size_t)k);
        if (rc == -EAGAIN) {
            /* a single chunk bigger than our slack: grow once for it */
            uint8_t *nb = realloc(c->wbuf, c->wlen + (size_t)k);
            if (!nb) {
                kv_peer_conn_close(c, "out of memory");
                return;
            }
            c->wbuf = nb;
            memcpy(c->wbuf + c->wlen, d, (size_t)k);
            c->wlen += (size_t)k;
            break;
        } else if (rc != 0) {
            kv_peer_conn_close(c, "out of memory");
            return;
        }
    }
write:
    if (c->wlen > 0) {
        if (c->peer)
            kv_metric_add(c->peer->m_wire_sent, (int64_t)c->wlen);
        /* Straight to the socket first: a write the kernel takes whole needs no request, so
         * libuv neither queues a completion nor re-arms epoll (grpc_conn.c start_write). */
        uv_buf_t b = uv_buf_init((char *)c->wbuf, (unsigned)c->wlen);
        int n = uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
        if (n < 0 && n != UV_EAGAIN) {
            kv_peer_conn_close(c, uv_strerror(n));
            return;
        }
        if (n > 0 && (size_t)n == c->wlen) {
            c->wlen = 0;
            goto again; /* more may wait in nghttp2 (or TLS) past the chunk */
        }
        if (n > 0) {
            memmove(c->wbuf, c->wbuf + n, c->wlen - (size_t)n);
            c->wlen -= (size_t)n;
        }
        b = uv_buf_init((char *)c->wbuf, (unsigned)c->wlen);
        c->write_req.data = c;
        int rc = uv_write(&c->write_req, (uv_stream_t *)&c->tcp, &b, 1, write_cb);
        if (rc != 0) {
            kv_peer_conn_close(c, uv_strerror(rc));
            return;
        }
        c->writing = 1;
        return;
    }
    if (!c->h2) { /* TLS handshake, or an HTTP/1.1 answer (peer_h1.c) fully written */
        if (c->h1 && c->close_after_write && !(c->tls && kv_tls_conn_out_pending(c->tls)))
            kv_peer_conn_close(c, NULL);
        return;
    }
    if (!nghttp2_session_want_read(c->h2) && !nghttp2_session_want_write(c->h2))
        kv_peer_conn_close(c, c->close_after_write ? NULL : "HTTP/2 session finished");
    else if (c->close_after_write)
        kv_peer_conn_close(c, NULL);
}

/* One read buffer per net: read_cb consumes it synchronously (single loop thread). */
static void alloc_cb(uv_handle_t *h, size_t sz, uv_buf_t *b)
{
    (void)sz;
    peer_conn *c = h->data;
    kv_peer_net *n = c->net;
    if (n->rbuf_busy) { /* cannot happen with one loop thread; be safe */
        b->base = NULL;
        b->len = 0;
        return;
    }
    n->rbuf_busy = 1;
    b->base = (char *)n->rbuf;
    b->len = sizeof(n->rbuf);
}

static void read_cb(uv_stream_t *st, ssize_t nread, const uv_buf_t *b)
{
    peer_conn *c = st->data;
    if (b->base)
        c->net->rbuf_busy = 0;
    if (nread == 0 || c->closing)
        return;
    if (nread < 0) {
        kv_peer_conn_close(c, nread == UV_EOF ? "connection closed by the peer"
                                              : uv_strerror((int)nread));
        return;
    }
    c->last_rx = uv_now(c->net->loop);
    c->missed_pings = 0;
    if (c->peer)
        kv_metric_add(c->peer->m_wire_recv, (int64_t)nread);
    /* an accepted h2c connection gets its session with its first bytes: a stranger that
     * sends nothing costs no HTTP/2 state and no write (server/peer/README.md) */
    const uint8_t *in = (const uint8_t *)b->base;
    int h1 = !c->tls && kv_peer_h1_wants(c, in, (size_t)nread); /* etcd's GET /members */
    if (!c->tls && !h1 && !c->h2 && kv_peer_conn_session_new(c) != 0) {
        kv_peer_conn_close(c, "cannot start the HTTP/2 session");
        return;
    }
    c->in_recv = 1;
    ssize_t rv = c->tls ? kv_peer_tls_recv(c, in, (size_t)nread)
                 : h1   ? kv_peer_h1_recv(c, in, (size_t)nread)
                        : nghttp2_session_mem_recv(c->h2, in, (size_t)nread);
    c->in_recv = 0;
    if (c->closing)
        return;
    if (rv < 0) {
        kv_peer_conn_close(c, nghttp2_strerror((int)rv));
        return;
    }
    c->dirty = 0;
    kv_peer_conn_flush(c);
}

int kv_peer_conn_write_raw(peer_conn *c, const uint8_t *p, size_t len)
{
    if (c->tls)
        return kv_tls_conn_write(c->tls, p, len) == 0 ? 0 : -ENOMEM;
    return wbuf_append(c, p, len);
}

int kv_peer_conn_session_new(peer_conn *c)
{
    kv_peer_net *n = c->net;
    if (c->h2)
        return 0;
    int rc = c->dialer ? nghttp2_session_client_new2(&c->h2, n->cbs, c, n->opt)
                       : nghttp2_session_server_new2(&c->h2, n->cbs, c, n->opt);
    if (rc != 0)
        return -ENOMEM;
    nghttp2_settings_entry iv[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 16},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, PEER_STREAM_WINDOW},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, 16 * 1024},
        {NGHTTP2_SETTINGS_ENABLE_PUSH, 0}, /* client only */
    };
    if (nghttp2_submit_settings(c->h2, NGHTTP2_FLAG_NONE, iv, c->dialer ? 4 : 3) != 0)
        return -ENOMEM;
    nghttp2_session_set_local_window_size(c->h2, NGHTTP2_FLAG_NONE, 0, PEER_CONN_WINDOW);
    return 0;
}

static int session_start(peer_conn *c)
{
    if (kv_peer_conn_session_new(c) != 0)
        return -ENOMEM;
    return uv_read_start((uv_stream_t *)&c->tcp, alloc_cb, read_cb);
}

/* Reads what c's socket holds right now (non-blocking) and processes it as read_cb does, so
 * a member whose handshake has already arrived is identified before anything else happens
 * (before the next accept can evict it). */
static void conn_pump(peer_conn *c)
{
    kv_peer_net *n = c->net;
    uv_os_fd_t fd;
    if (c->closing || n->rbuf_busy || uv_fileno((uv_handle_t *)&c->tcp, &fd) != 0)
        return;
    ssize_t k = recv(fd, n->rbuf, sizeof(n->rbuf), MSG_DONTWAIT);
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return;
    uv_buf_t b = uv_buf_init((char *)n->rbuf, sizeof(n->rbuf));
    n->rbuf_busy = 1;
    read_cb((uv_stream_t *)&c->tcp, k < 0 ? uv_translate_sys_error(errno) : (k == 0 ? UV_EOF : k),
            &b);
}

typedef struct {
    uint64_t src, seq;
    peer_conn *c;
} pending_ref;

static int pending_ref_cmp(const void *a, const void *b)
{
    const pending_ref *x = a, *y = b;
    if (x->src != y->src)
        return x->src < y->src ? -1 : 1;
    if (x->seq != y->seq)
        return x->seq < y->seq ? -1 : 1;
    return 0;
}

/* The pending connection to close for room: the oldest one (other than keep) of the source
 * address holding the most pending connections (ties: the group whose oldest is oldest). One
 * address flooding the port thus only ever evicts its own connections, never a member's
 * dial from another address. NULL: nothing to close. */
static peer_conn *pending_victim(kv_peer_net *n, peer_conn *keep)
{
    size_t cap = n->n_pending + 1, k = 0;
    pending_ref *r = malloc(cap * sizeof(*r));
    peer_conn *best = NULL;
    kv_list *e;
    if (!r) {                           /* no memory for fairness: plain oldest-first */
        kv_list_foreach(e, &n->conns) { /* newest first: the last one wins */
            peer_conn *c = kv_list_data(e, peer_conn, link);
            if (c != keep && c->pending && !c->closing)
                best = c;
        }
        return best;
    }
    kv_list_foreach(e, &n->conns) {
        if (k == cap)
            break;
        peer_conn *c = kv_list_data(e, peer_conn, link);
        if (c->pending && !c->closing)
            r[k++] = (pending_ref){c->src, c->seq, c};
    }
    qsort(r, k, sizeof(*r), pending_ref_cmp);
    size_t best_n = 0;
    uint64_t best_seq = 0;
    for (size_t i = 0; i < k;) {
        size_t j = i;
        peer_conn *oldest = NULL;
        for (; j < k && r[j].src == r[i].src; j++)
            if (!oldest && r[j].c != keep)
                oldest = r[j].c;
        size_t cnt = j - i;
        if (oldest && (!best || cnt > best_n || (cnt == best_n && oldest->seq < best_seq))) {
            best = oldest;
            best_n = cnt;
            best_seq = oldest->seq;
        }
        i = j;
    }
    free(r);
    return best;
}

/* Makes room for the new pending connection `keep`: closes pending connections chosen by
 * pending_victim (each first read once: one whose handshake arrived is identified instead)
 * until at most cfg.max_pending_conns are pending. */
static void evict_pending(kv_peer_net *n, peer_conn *keep)
{
    while (n->n_pending > n->cfg.max_pending_conns) {
        peer_conn *old = pending_victim(n, keep);
        if (!old)
            return;
        conn_pump(old);
        if (old->pending && !old->closing) {
            char why[192];
            snprintf(why, sizeof(why),
                     "too many unidentified peer connections (--peer-max-pending-connections "
                     "%u): closing the oldest from the address holding the most",
                     n->cfg.max_pending_conns);
            kv_peer_conn_refuse(old, PEER_REFUSE_PENDING_FULL, why);
        }
    }
}

static peer_conn *conn_new(kv_peer_net *n)
{
    peer_conn *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->net = n;
    kv_list_init(&c->streams);
    uv_tcp_init(n->loop, &c->tcp);
    c->tcp.data = c;
    uv_tcp_nodelay(&c->tcp, 1);
    c->last_rx = c->created = uv_now(n->loop);
    kv_list_insert_head(&n->conns, &c->link);
    n->n_conns++;
    n->n_handles++;
    return c;
}

static void on_connect(uv_connect_t *req, int status)
{
    peer_conn *c = req->data;
    kv_peer_net *n = c->net;
    if (c->closing)
        return;
    if (status < 0) {
        kv_peer_dial_failed(c->peer, uv_strerror(status));
        kv_peer_conn_close(c, NULL);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    c->connected = 1;
    c->last_rx = uv_now(n->loop);
    if (c->peer && c->peer->tls && kv_peer_tls_attach(c, n->cfg.tls_client, c->peer->host) != 0) {
        kv_peer_conn_close(c, "cannot start TLS");
        return;
    }
    if (session_start(c) != 0 || !c->peer) {
        kv_peer_conn_close(c, "cannot start the HTTP/2 session");
        return;
    }
    int rc = kv_peer_session_open_stream(c);
    if (rc != 0) {
        kv_peer_conn_close(c, "cannot open the message stream");
        return;
    }
    kv_peer_conn_flush(c);
}

int kv_peer_conn_dial(kv_peer_net *n, kv_peer *p)
{
    /* never refused for room: one dial per peer (p->conn), at most KV_PEER_MAX_PEERS */
    peer_conn *c = conn_new(n);
    if (!c)
        return UV_ENOMEM;
    c->dialer = 1;
    c->peer = p;
    p->conn = c;
    snprintf(c->where, sizeof(c->where), "peer %llx", (unsigned long long)p->id);
    c->connect_req.data = c;
    int rc =
        uv_tcp_connect(&c->connect_req, &c->tcp, (const struct sockaddr *)&p->addr, on_connect);
    if (rc != 0) {
        p->conn = NULL;
        c->peer = NULL;
        c->closing = 1;
        uv_close((uv_handle_t *)&c->tcp, conn_closed_cb);
        return rc;
    }
    return 0;
}

/* FNV-1a of the printed source address: equal addresses, equal keys. */
static uint64_t src_hash(const char *ip)
{
    return kv_fnv1a64(ip, strlen(ip));
}

int kv_peer_conn_accept(kv_peer_net *n, uv_stream_t *server)
{
    peer_conn *c = conn_new(n);
    if (!c)
        return UV_ENOMEM;
    int rc = uv_accept(server, (uv_stream_t *)&c->tcp);
    if (rc != 0) {
        kv_peer_conn_close(c, NULL);
        return rc;
    }
    char ip[46]; /* INET6_ADDRSTRLEN */
    int port;
    snprintf(c->where, sizeof(c->where), "an unidentified peer");
    if (kv_net_peer_addr(&c->tcp, ip, sizeof(ip), &port) == 0) {
        snprintf(c->where, sizeof(c->where), "%s:%d", ip, port);
        c->src = src_hash(ip);
    }
    c->pending = 1; /* until it identifies a known member (peer_session.c) */
    c->seq = ++n->accept_seq;
    n->n_pending++;
    kv_metric_set(n->m_pending, (double)n->n_pending);
    c->connected = 1;
    size_t li = (size_t)((uv_tcp_t *)server - n->listeners);
    /* No HTTP/2 session yet: h2c gets it with the first bytes (read_cb), TLS once the TLS
     * handshake (and, with --peer-client-cert-auth, the client certificate) is verified
     * (peer_tls.c) */
    if (li < 8 && n->listener_tls[li] && kv_peer_tls_attach(c, n->cfg.tls_server, NULL) != 0) {
        kv_peer_conn_close(c, "cannot start TLS");
        return 0;
    }
    rc = uv_read_start((uv_stream_t *)&c->tcp, alloc_cb, read_cb);
    if (rc != 0) {
        kv_peer_conn_close(c, uv_strerror(rc));
        return 0;
    }
    kv_peer_conn_flush(c);
    conn_pump(c); /* a member's handshake is usually here already */
    if (!c->closing && c->pending)
        evict_pending(n, c);
    return 0;
}

void kv_peer_conn_ping_tick(peer_conn *c, uint64_t now)
{
    kv_peer_net *n = c->net;
    if (c->closing)
        return;
    if (c->pending && now - c->created > (uint64_t)n->cfg.handshake_timeout_ms) {
        char why[128];
        snprintf(why, sizeof(why), "no handshake within --peer-handshake-timeout (%u ms)",
                 n->cfg.handshake_timeout_ms);
        kv_peer_conn_refuse(c, PEER_REFUSE_TIMEOUT, why);
        return;
    }
    if (!c->dialer && !c->peer &&
        now - c->created > (uint64_t)n->cfg.ping_interval_ms * PEER_MAX_MISSED_PINGS) {
        kv_peer_conn_close(c, "no handshake in time");
        return;
    }
    int idle = now - c->last_rx >= n->cfg.ping_interval_ms;
    if (idle && ++c->missed_pings > PEER_MAX_MISSED_PINGS) {
        kv_peer_conn_close(c,
                           c->connected ? "the peer stopped answering PINGs" : "connect timed out");
        return;
    }
    if (!c->connected || !c->h2)
        return;
    int sent = 0;
    if (c->peer && !c->rtt_token) {
        /* etcd's round-trip prober (etcd_network_peer_round_trip_time_seconds): one PING per
         * interval whether the connection is busy or idle; the ACK carries the token back
         * (peer_session.c). It doubles as the idle connection's liveness PING. */
        uint64_t t = uv_hrtime();
        uint8_t opaque[8];
        for (int i = 0; i < 8; i++)
            opaque[i] = (uint8_t)(t >> (56 - 8 * i));
        if (nghttp2_submit_ping(c->h2, NGHTTP2_FLAG_NONE, opaque) == 0) {
            c->rtt_token = t;
            sent = 1;
        }
    }
    if (idle && !sent) {
        nghttp2_submit_ping(c->h2, NGHTTP2_FLAG_NONE, NULL);
        sent = 1;
    }
    if (sent)
        kv_peer_conn_flush(c);
}
