/*
 * peer_dns.c - a peer's address, resolved at each dial, never on the loop thread.
 *
 * A peer URL's host is resolved again before every dial (not once at start), so a member whose
 * peer moved to another address (DNS) reconnects to the new one. An IP literal is converted at
 * once; a host name goes through uv_getaddrinfo, which runs getaddrinfo on libuv's threadpool:
 * a slow resolver delays only that dial, never the loop. The threadpool is shared with the
 * node's apply worker (uv_queue_work), so at most ONE resolution per transport is in flight:
 * a peer that finds another resolution running retries after dial_backoff_min_ms (not counted
 * as a failure). When a name has several addresses, successive dials rotate through them.
 *
 * Lifetime: the resolution's request is its own allocation (peer_resolve). It holds the net
 * (n_handles) until its callback ran; a peer removed meanwhile is detached from it (peer set to
 * NULL, uv_cancel tried), so the callback never touches a freed peer. Loop thread only.
 */
#include "peer/peer_internal.h"

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct peer_resolve {
    uv_getaddrinfo_t req;
    kv_peer_net *net;
    kv_peer *peer; /* NULL once the peer was removed */
};

static int dial_now(kv_peer *p)
{
    int rc = kv_peer_conn_dial(p->net, p);
    if (rc != 0) {
        kv_peer_dial_failed(p, uv_strerror(rc));
        kv_peer_schedule_dial(p);
    }
    return rc;
}

/* Copies the (rr % count)-th TCP address of res into p->addr. */
static int pick_addr(kv_peer *p, const struct addrinfo *res)
{
    size_t count = 0;
    for (const struct addrinfo *a = res; a; a = a->ai_next)
        if ((a->ai_family == AF_INET || a->ai_family == AF_INET6) &&
            a->ai_addrlen <= sizeof(p->addr))
            count++;
    if (count == 0)
        return -EADDRNOTAVAIL;
    size_t k = p->addr_rr++ % count;
    for (const struct addrinfo *a = res; a; a = a->ai_next) {
        if ((a->ai_family != AF_INET && a->ai_family != AF_INET6) ||
            a->ai_addrlen > sizeof(p->addr))
            continue;
        if (k-- == 0) {
            memset(&p->addr, 0, sizeof(p->addr));
            memcpy(&p->addr, a->ai_addr, a->ai_addrlen);
            return 0;
        }
    }
    return -EADDRNOTAVAIL;
}

static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
    peer_resolve *r = req->data;
    kv_peer_net *n = r->net;
    kv_peer *p = r->peer;
    n->n_resolving--;
    if (p) {
        p->resolving = NULL;
        kv_metric_inc(p->m_resolves);
    }
    if (p && !p->removed && !n->closing && !p->conn) {
        int rc = status == 0 ? pick_addr(p, res) : status;
        if (rc != 0) {
            char why[320];
            snprintf(why, sizeof(why), "cannot resolve '%s': %s", p->host,
                     rc == -EADDRNOTAVAIL ? "no IPv4/IPv6 address" : uv_strerror(rc));
            kv_metric_inc(p->m_resolve_failures);
            kv_peer_dial_failed(p, why);
            kv_peer_schedule_dial(p);
        } else {
            (void)dial_now(p);
        }
    }
    uv_freeaddrinfo(res);
    free(r);
    kv_peer_handle_closed(n);
}

int kv_peer_resolve_and_dial(kv_peer *p)
{
    kv_peer_net *n = p->net;
    if (p->resolving)
        return 0;
    struct sockaddr_in a4;
    struct sockaddr_in6 a6;
    if (uv_ip4_addr(p->host, p->port, &a4) == 0) {
        memset(&p->addr, 0, sizeof(p->addr));
        memcpy(&p->addr, &a4, sizeof(a4));
        return dial_now(p);
    }
    if (uv_ip6_addr(p->host, p->port, &a6) == 0) {
        memset(&p->addr, 0, sizeof(p->addr));
        memcpy(&p->addr, &a6, sizeof(a6));
        return dial_now(p);
    }
    if (n->n_resolving > 0) { /* one at a time: leave the threadpool to the apply worker */
        uv_timer_start(&p->dial_timer, kv_peer_dial_timer_cb, n->cfg.dial_backoff_min_ms, 0);
        return 0;
    }
    peer_resolve *r = calloc(1, sizeof(*r));
    if (!r) {
        kv_peer_dial_failed(p, "out of memory");
        kv_peer_schedule_dial(p);
        return UV_ENOMEM;
    }
    r->net = n;
    r->peer = p;
    r->req.data = r;
    char port[8];
    snprintf(port, sizeof(port), "%d", p->port);
    struct addrinfo hints;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int rc = uv_getaddrinfo(n->loop, &r->req, on_resolved, p->host, port, &hints);
    if (rc != 0) {
        free(r);
        kv_peer_dial_failed(p, uv_strerror(rc));
        kv_peer_schedule_dial(p);
        return rc;
    }
    p->resolving = r;
    n->n_resolving++;
    n->n_handles++; /* the net outlives the request */
    return 0;
}

void kv_peer_resolve_cancel(kv_peer *p)
{
    peer_resolve *r = p->resolving;
    if (!r)
        return;
    p->resolving = NULL;
    r->peer = NULL;
    (void)uv_cancel((uv_req_t *)&r->req); /* running already: its callback comes later */
}
