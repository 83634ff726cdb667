/*
 * peer_h1.c - HTTP/1.1 on the peer port: etcd's GET /members (etcd 3.4
 * etcdserver/api/etcdhttp/peer.go), which a member joining an existing cluster asks its peers
 * for to learn its own id (server/daemon/members_join.h, docs/ARCHITECTURE.md "Membership").
 *
 * An accepted connection whose first plaintext byte is not the start of the HTTP/2 preface
 * ("PRI * HTTP/2.0") is read as one HTTP/1.1 request of at most PEER_H1_MAX_REQUEST bytes.
 * GET /members is answered 200 with the member list as etcd's JSON and the header
 * X-Etcd-Cluster-ID (hex), anything else 404 / 405 (503 while this member itself is still
 * joining), then the connection is closed once the answer is written. The connection stays
 * pending (an unidentified stranger) until then: it takes a pending slot and the handshake
 * deadline like any other, so the endpoint adds no new way to hold the port. Over TLS the
 * request is only read once the TLS handshake (and --peer-client-cert-auth) is done.
 * Loop thread only.
 */
#include "peer/peer_internal.h"
#include "net/tls.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PEER_H1_MAX_REQUEST 4096

int kv_peer_h1_wants(const peer_conn *c, const uint8_t *p, size_t n)
{
    if (c->h1)
        return 1;
    /* the HTTP/2 preface starts "PRI "; HTTP/1.1 methods (POST, PUT too) do not */
    return !c->dialer && !c->h2 && n > 0 && !(p[0] == 'P' && (n < 2 || p[1] == 'R'));
}

static void answer(peer_conn *c, int status, const char *reason, const char *type, const char *body,
                   size_t body_len)
{
    char head[512];
    int hl = snprintf(head, sizeof(head),
                      "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                      "X-Etcd-Cluster-ID: %llx\r\nConnection: close\r\n\r\n",
                      status, reason, type, body_len, (unsigned long long)c->net->cfg.cluster_id);
    /* served, not refused: the close below is not counted as a refusal (errors are) */
    if (status == 200)
        c->refused = 1;
    c->close_after_write = 1;
    if (kv_peer_conn_write_raw(c, (const uint8_t *)head, (size_t)hl) != 0 ||
        (body_len && kv_peer_conn_write_raw(c, (const uint8_t *)body, body_len) != 0)) {
        kv_peer_conn_close(c, NULL);
        return;
    }
    kv_peer_conn_mark_dirty(c);
}

static void serve(peer_conn *c, const char *req)
{
    kv_peer_net *n = c->net;
    const char *sp = strchr(req, ' ');
    if (!sp) {
        answer(c, 400, "Bad Request", "text/plain", "bad request\n", 12);
        return;
    }
    size_t ml = (size_t)(sp - req);
    const char *path = sp + 1;
    size_t pl = strcspn(path, " ?\r\n");
    if (pl != 8 || memcmp(path, "/members", 8) != 0) {
        answer(c, 404, "Not Found", "text/plain", "404 page not found\n", 19);
        return;
    }
    if (ml != 3 || memcmp(req, "GET", 3) != 0) {
        answer(c, 405, "Method Not Allowed", "text/plain", "Method Not Allowed\n", 19);
        return;
    }
    if (n->cfg.joining || !n->h.members_json) {
        answer(c, 503, "Service Unavailable", "text/plain", "member is joining\n", 18);
        return;
    }
    char *json = NULL;
    size_t len = 0;
    if (n->h.members_json(n->h.arg, &json, &len) != 0) {
        answer(c, 500, "Internal Server Error", "text/plain", "cannot list members\n", 20);
        return;
    }
    answer(c, 200, "OK", "application/json", json, len);
    free(json);
}

int kv_peer_h1_recv(peer_conn *c, const uint8_t *p, size_t len)
{
    if (c->close_after_write)
        return 0; /* answered: the rest is ignored */
    if (!c->h1) {
        c->h1 = calloc(1, PEER_H1_MAX_REQUEST + 1);
        if (!c->h1) {
            kv_peer_conn_close(c, "out of memory");
            return -1;
        }
    }
    if (len > PEER_H1_MAX_REQUEST - c->h1_len) {
        kv_peer_conn_refuse(c, PEER_REFUSE_OTHER, "HTTP/1.1 request too large");
        return -1;
    }
    memcpy(c->h1 + c->h1_len, p, len);
    c->h1_len += len;
    c->h1[c->h1_len] = 0;
    if (memchr(c->h1, 0, c->h1_len)) {
        kv_peer_conn_refuse(c, PEER_REFUSE_OTHER, "NUL in an HTTP/1.1 request");
        return -1;
    }
    if (strstr(c->h1, "\r\n\r\n") || strstr(c->h1, "\n\n"))
        serve(c, c->h1);
    return c->closing ? -1 : 0;
}
