/* peer_net.c - the peer transport's top level: peers, queues, dialing, timers, metrics. */
#include "peer/peer_internal.h"
#include "peer/peer_delay.h"

#include <errno.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/byteorder.h"
#include "net/listen.h"
#include "net/tls.h"

void kv_peer_net_config_default(kv_peer_net_config *c)
{
    memset(c, 0, sizeof(*c));
    c->max_queue_bytes = 16u << 20;
    c->max_prio_queue_bytes = 4u << 20;
    c->max_frame_bytes = 64u << 20;
    c->dial_backoff_min_ms = 100;
    c->dial_backoff_max_ms = 5000;
    c->ping_interval_ms = 1000;
    c->max_pending_conns = 16;
    c->handshake_timeout_ms = 1000;
}

void kv_peer_log(const kv_peer_net *n, const char *fmt, ...)
{
    va_list ap;
    char msg[512];
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "kvd: peer transport (member %llx): %s\n", (unsigned long long)n->cfg.self_id,
            msg);
}

/* ---- refused unidentified connections: counted, logged rate-limited ---- */

static const char *const refuse_label[PEER_REFUSE_N] = {"pending_full", "handshake_timeout",
                                                        "rejected", "member_connected", "other"};

static void refused_summary(kv_peer_net *n, uint64_t now)
{
    uint64_t *k = n->rl_counts;
    kv_peer_log(
        n,
        "refused %llu more unidentified peer connections in the last %llu ms (%llu: "
        "--peer-max-pending-connections %u reached, %llu: no handshake within "
        "--peer-handshake-timeout, %llu: handshake rejected, %llu: claimed a member "
        "that is connected, %llu: other); see kvd_peer_connections_refused_total",
        (unsigned long long)n->rl_suppressed, (unsigned long long)(now - n->rl_start),
        (unsigned long long)k[PEER_REFUSE_PENDING_FULL], n->cfg.max_pending_conns,
        (unsigned long long)k[PEER_REFUSE_TIMEOUT], (unsigned long long)k[PEER_REFUSE_REJECTED],
        (unsigned long long)k[PEER_REFUSE_DUPLICATE], (unsigned long long)k[PEER_REFUSE_OTHER]);
    n->rl_suppressed = 0;
    memset(n->rl_counts, 0, sizeof(n->rl_counts));
}

void kv_peer_refused_tick(kv_peer_net *n)
{
    uint64_t now = uv_now(n->loop);
    if (!n->rl_active || now - n->rl_start < PEER_REFUSE_LOG_INTERVAL_MS)
        return;
    if (n->rl_suppressed == 0) {
        n->rl_active = 0; /* a quiet interval: the next refusal is logged in full again */
        return;
    }
    refused_summary(n, now);
    n->rl_start = now;
}

void kv_peer_refused(kv_peer_net *n, int reason, const char *where, const char *why)
{
    if (reason < 0 || reason >= PEER_REFUSE_N)
        reason = PEER_REFUSE_OTHER;
    kv_metric_inc(n->m_refused[reason]);
    kv_peer_refused_tick(n);
    if (n->rl_active) {
        n->rl_suppressed++;
        n->rl_counts[reason]++;
        return;
    }
    n->rl_active = 1;
    n->rl_start = uv_now(n->loop);
    kv_peer_log(n,
                "%s (unidentified peer connection from %s, closed; further refusals are "
                "summarised every %d s)",
                why ? why : "closed", where, PEER_REFUSE_LOG_INTERVAL_MS / 1000);
}

static void net_metrics_init(kv_peer_net *n)
{
    if (!n->metrics)
        return;
    n->m_pending = kv_metrics_gauge(n->metrics, "kvd_peer_pending_connections",
                                    "Accepted peer connections that have not identified a known "
                                    "member yet (bounded by --peer-max-pending-connections).",
                                    NULL);
    for (int i = 0; i < PEER_REFUSE_N; i++) {
        char l[48];
        snprintf(l, sizeof(l), "reason=\"%s\"", refuse_label[i]);
        n->m_refused[i] = kv_metrics_counter(
            n->metrics, "kvd_peer_connections_refused_total",
            "Accepted peer connections closed before they identified a known member, by reason.",
            l);
    }
    kv_metric_set(n->m_pending, 0);
}

/* splitmix64: the jitter PRNG (state in the net, seeded from cfg.seed). */
static uint64_t rng_next(kv_peer_net *n)
{
    uint64_t z = (n->rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

kv_peer *kv_peer_find(kv_peer_net *n, uint64_t id)
{
    for (size_t i = 0; i < n->n_peers; i++)
        if (n->peers[i]->id == id)
            return n->peers[i];
    return NULL;
}

void kv_peer_adopt_cluster(kv_peer_net *n, uint64_t cluster_id)
{
    if (!n->cfg.joining)
        return;
    n->cfg.joining = 0;
    n->cfg.cluster_id = cluster_id;
    kv_peer_log(n, "joined cluster %llx", (unsigned long long)cluster_id);
    if (n->h.on_cluster_id)
        n->h.on_cluster_id(n->h.arg, cluster_id);
}

static void maybe_free_net(kv_peer_net *n)
{
    if (!n->closing || n->n_handles > 0)
        return;
    nghttp2_session_callbacks_del(n->cbs);
    nghttp2_option_del(n->opt);
    kv_tls_ctx_unref(n->cfg.tls_server);
    kv_tls_ctx_unref(n->cfg.tls_client);
    free(n->snap_dir);
    free(n);
}

void kv_peer_handle_closed(kv_peer_net *n)
{
    n->n_handles--;
    maybe_free_net(n);
}

static void simple_handle_closed(uv_handle_t *h)
{
    kv_peer_handle_closed(h->data);
}

/* ---- url parsing ---- */

/* Parses http://host:port into host (no brackets) and port. */
static int parse_url(const char *url, char *host, size_t host_sz, int *port)
{
    const char *p = url;
    if (strncmp(p, "https://", 8) == 0) /* TLS: the caller checks the scheme */
        p += 8;
    else if (strncmp(p, "http://", 7) == 0)
        p += 7;
    else
        return -EINVAL;
    const char *hs, *he, *colon;
    if (*p == '[') {
        hs = p + 1;
        he = strchr(hs, ']');
        if (!he || he[1] != ':')
            return -EINVAL;
        colon = he + 1;
    } else {
        hs = p;
        colon = strrchr(p, ':');
        if (!colon)
            return -EINVAL;
        he = colon;
    }
    size_t hl = (size_t)(he - hs);
    if (hl == 0 || hl >= host_sz)
        return -EINVAL;
    memcpy(host, hs, hl);
    host[hl] = 0;
    char *end;
    long v = strtol(colon + 1, &end, 10);
    if (end == colon + 1 || (*end && strcmp(end, "/") != 0) || v < 0 || v > 65535)
        return -EINVAL;
    *port = (int)v;
    return 0;
}

/* ---- queue ---- */

static void queue_drop_all(kv_peer *p)
{
    kv_list *e;
    int64_t n = 0;
    while ((e = kv_list_head(&p->q))) {
        peer_qframe *f = kv_list_data(e, peer_qframe, link);
        kv_list_remove(e);
        uint32_t type = kv_be32(f->data + 4);
        if (type < KV_PEER_TYPE_RESERVED)
            n++;
        free(f);
    }
    p->queued_bytes = 0;
    n += (int64_t)kv_peer_prio_drop_all(p);
    kv_metric_add(p->m_dropped, n);
    kv_metric_set(p->m_queued, 0);
}

peer_qframe *kv_peer_frame_new(uint32_t type, const uint8_t *buf, size_t len)
{
    peer_qframe *f = malloc(sizeof(*f) + 8 + len);
    if (!f)
        return NULL;
    kv_list_init(&f->link);
    f->len = 8 + len;
    f->off = 0;
    uint8_t *d = f->data;
    kv_put_be32(d, (uint32_t)len);
    kv_put_be32(d + 4, type);
    if (len)
        memcpy(d + 8, buf, len);
    return f;
}

int kv_peer_enqueue(kv_peer *p, uint32_t type, const uint8_t *buf, size_t len)
{
    peer_qframe *f = kv_peer_frame_new(type, buf, len);
    if (!f)
        return -ENOMEM;
    kv_list_insert_tail(&p->q, &f->link);
    p->queued_bytes += f->len;
    kv_metric_set(p->m_queued, (double)p->queued_bytes);
    if (p->conn)
        kv_peer_conn_resume_msg(p->conn);
    return 0;
}

int kv_peer_send_check(kv_peer_net *n, uint64_t to, uint32_t type, const uint8_t *buf, size_t len,
                       size_t limit, kv_peer **out)
{
    if (!n || n->closing)
        return -ENOTCONN;
    kv_peer *p = kv_peer_find(n, to);
    if (!p)
        return -ENOENT;
    if (type >= KV_PEER_TYPE_RESERVED || (len && !buf))
        return -EINVAL;
    if (len > n->cfg.max_frame_bytes || len + 8 > limit)
        return -EMSGSIZE;
    *out = p;
    return 0;
}

int kv_peer_send_gate(kv_peer *p)
{
    if (p->net->isolated) {
        kv_metric_inc(p->m_dropped);
        return 1;
    }
    if (!p->up) {
        kv_metric_inc(p->m_dropped);
        return -ENOTCONN;
    }
    return 0;
}

int kv_peer_net_send(kv_peer_net *n, uint64_t to, uint32_t type, const uint8_t *buf, size_t len)
{
    kv_peer *p = NULL;
    int rc = kv_peer_send_check(n, to, type, buf, len, n ? n->cfg.max_queue_bytes : 0, &p);
    if (rc < 0)
        return rc;
    if (kv_peer_delay_tx(p, type, buf, len, &rc)) /* failpoint (peer_delay.h) */
        return rc;
    return kv_peer_send_now(p, type, buf, len);
}

int kv_peer_send_now(kv_peer *p, uint32_t type, const uint8_t *buf, size_t len)
{
    kv_peer_net *n = p->net;
    int gate = kv_peer_send_gate(p);
    if (gate != 0)
        return gate > 0 ? 0 : gate;
    if (p->queued_bytes + 8 + len > n->cfg.max_queue_bytes) {
        kv_metric_inc(p->m_dropped);
        return -EAGAIN;
    }
    int rc = kv_peer_enqueue(p, type, buf, len);
    if (rc != 0)
        kv_metric_inc(p->m_dropped);
    else
        kv_metric_inc(p->m_sent);
    return rc;
}

void kv_peer_deliver(kv_peer *p, uint32_t type, const uint8_t *buf, size_t len)
{
    if (type >= KV_PEER_TYPE_RESERVED) {
        if (type == PEER_CTL_SNAP_DONE && len == 12 && p->sout) {
            uint64_t id = kv_be64(buf);
            int32_t st = (int32_t)kv_be32(buf + 8);
            if (id == p->sout->id)
                kv_peer_snap_out_finish(p, st > 0 ? -EIO : st);
        }
        /* PEER_CTL_SNAP_OFFER is handled by the connection (it opens a stream). */
        return;
    }
    if (kv_peer_delay_rx(p, type, buf, len)) /* failpoint (peer_delay.h) */
        return;
    kv_peer_deliver_now(p, type, buf, len);
}

void kv_peer_deliver_now(kv_peer *p, uint32_t type, const uint8_t *buf, size_t len)
{
    kv_peer_net *n = p->net;
    if (n->isolated) {
        kv_metric_inc(p->m_dropped);
        return;
    }
    kv_metric_inc(p->m_recv);
    if (n->h.on_message)
        n->h.on_message(n->h.arg, p->id, type, buf, len);
}

/* ---- connection state ---- */

void kv_peer_on_up(kv_peer *p, peer_conn *c)
{
    kv_peer_net *n = p->net;
    if (p->conn && p->conn != c) {
        peer_conn *old = p->conn;
        kv_peer_on_down(p, old);
        kv_peer_conn_close(old, "replaced by a new connection");
    }
    p->conn = c;
    c->peer = p;
    p->up = 1;
    p->backoff_ms = n->cfg.dial_backoff_min_ms;
    p->dial_failures = 0;
    kv_metric_set(p->m_connected, 1);
    kv_metric_inc(p->m_connects);
    kv_peer_log(n, "connected to peer %llx (%s)", (unsigned long long)p->id,
                c->dialer ? "dialed" : "accepted");
    if (n->h.on_peer_state)
        n->h.on_peer_state(n->h.arg, p->id, 1);
}

void kv_peer_on_down(kv_peer *p, peer_conn *c)
{
    kv_peer_net *n = p->net;
    if (p->conn != c)
        return;
    int was_up = p->up;
    p->up = 0;
    if (p->sout) /* while p->conn is still c: detaches the stream */
        kv_peer_snap_out_finish(p, n->closing ? -ECANCELED : -ECONNRESET);
    p->conn = NULL;
    c->peer = NULL;
    queue_drop_all(p);
    kv_metric_set(p->m_connected, 0);
    if (was_up && n->h.on_peer_state)
        n->h.on_peer_state(n->h.arg, p->id, 0);
    if (p->dialer && !p->removed && !n->closing)
        kv_peer_schedule_dial(p);
}

/* ---- dialing ---- */

void kv_peer_dial_failed(kv_peer *p, const char *why)
{
    if (!p)
        return;
    /* the first failure and then every 20th: a member that is down for long does not flood */
    if (p->dial_failures++ % 20 == 0)
        kv_peer_log(p->net, "dialing peer %llx (%s) failed: %s (%llu attempts so far)",
                    (unsigned long long)p->id, p->url, why, (unsigned long long)p->dial_failures);
}

void kv_peer_dial_timer_cb(uv_timer_t *t)
{
    kv_peer *p = t->data;
    if (p->conn || p->resolving || p->removed || p->net->closing)
        return;
    (void)kv_peer_resolve_and_dial(p); /* failures are logged and rescheduled there */
}

void kv_peer_schedule_dial(kv_peer *p)
{
    kv_peer_net *n = p->net;
    uint32_t b = p->backoff_ms ? p->backoff_ms : n->cfg.dial_backoff_min_ms;
    /* full range jitter in [b/2, b] */
    uint64_t delay = b / 2 + (b > 1 ? rng_next(n) % (b / 2 + 1) : 0);
    uint64_t nb = (uint64_t)b * 2;
    p->backoff_ms = nb > n->cfg.dial_backoff_max_ms ? n->cfg.dial_backoff_max_ms : (uint32_t)nb;
    uv_timer_start(&p->dial_timer, kv_peer_dial_timer_cb, delay, 0);
}

/* ---- peers ---- */

static kv_metric *peer_metric(kv_peer_net *n, int counter, const char *name, const char *help,
                              const char *labels)
{
    if (!n->metrics)
        return NULL;
    return counter ? kv_metrics_counter(n->metrics, name, help, labels)
                   : kv_metrics_gauge(n->metrics, name, help, labels);
}

static void peer_metrics_init(kv_peer_net *n, kv_peer *p)
{
    char l[64];
    snprintf(l, sizeof(l), "peer=\"%llx\"", (unsigned long long)p->id);
    p->m_connected = peer_metric(n, 0, "kvd_peer_connected",
                                 "1 while the connection to the peer is established.", l);
    p->m_connects = peer_metric(n, 1, "kvd_peer_connects_total",
                                "Connections to the peer established (dialed or accepted).", l);
    p->m_sent = peer_metric(n, 1, "kvd_peer_frames_sent_total", "Frames queued to the peer.", l);
    p->m_recv =
        peer_metric(n, 1, "kvd_peer_frames_received_total", "Frames received from the peer.", l);
    p->m_dropped = peer_metric(n, 1, "kvd_peer_frames_dropped_total",
                               "Frames to or from the peer dropped (queue full, not connected, "
                               "isolated, connection lost).",
                               l);
    p->m_queued = peer_metric(n, 0, "kvd_peer_queued_bytes",
                              "Bytes queued for the peer (bounded by --peer-max-queue-bytes).", l);
    p->m_snap_sent = peer_metric(n, 1, "kvd_peer_snapshots_sent_total",
                                 "Snapshots sent to the peer and acknowledged.", l);
    p->m_snap_recv = peer_metric(n, 1, "kvd_peer_snapshots_received_total",
                                 "Snapshots received from the peer.", l);
    kv_peer_snap_metrics_init(n, p, l);
    kv_peer_prio_metrics_init(n, p, l);
    p->m_resolves = peer_metric(n, 1, "kvd_peer_resolves_total",
                                "Host name resolutions of the peer's URL (one per dial).", l);
    p->m_resolve_failures = peer_metric(n, 1, "kvd_peer_resolve_failures_total",
                                        "Resolutions of the peer's host name that failed.", l);
    /* etcd's names and labels (rafthttp/metrics.go): the id as types.ID.String() */
    char to[64], from[64];
    snprintf(to, sizeof(to), "To=\"%llx\"", (unsigned long long)p->id);
    snprintf(from, sizeof(from), "From=\"%llx\"", (unsigned long long)p->id);
    p->m_wire_sent = peer_metric(n, 1, "etcd_network_peer_sent_bytes_total",
                                 "The total number of bytes sent to peers.", to);
    p->m_wire_recv = peer_metric(n, 1, "etcd_network_peer_received_bytes_total",
                                 "The total number of bytes received from peers.", from);
    double rtt_buckets[16];
    kv_metrics_exp_buckets(rtt_buckets, 0.0001, 2,
                           16); /* rafthttp: ExponentialBuckets(0.0001, 2, 16) */
    p->m_rtt =
        n->metrics
            ? kv_metrics_histogram(n->metrics, "etcd_network_peer_round_trip_time_seconds",
                                   "Round-Trip-Time histogram between peers", to, rtt_buckets, 16)
            : NULL;
}

int kv_peer_net_add_peer(kv_peer_net *n, uint64_t id, const char *url)
{
    if (!n || n->closing || !url || id == n->cfg.self_id || id == 0)
        return -EINVAL;
    if (kv_peer_find(n, id))
        return -EEXIST;
    if (n->n_peers >= KV_PEER_MAX_PEERS)
        return -ENOSPC;
    if (strlen(url) >= sizeof(((kv_peer *)0)->url))
        return -EINVAL;
    char host[256];
    int port;
    if (parse_url(url, host, sizeof(host), &port) != 0 || port == 0)
        return -EINVAL; /* the host is resolved at each dial (peer_dns.c) */
    int tls = strncmp(url, "https://", 8) == 0;
    if (tls && !n->cfg.tls_client) {
        kv_peer_log(n, "peer %llx url '%s' is https but no peer TLS is configured",
                    (unsigned long long)id, url);
        return -EINVAL;
    }
    kv_peer *p = calloc(1, sizeof(*p));
    if (!p)
        return -ENOMEM;
    kv_list_init(&p->q);
    kv_list_init(&p->pq);
    snprintf(p->host, sizeof(p->host), "%s", host);
    p->port = port;
    p->net = n;
    p->id = id;
    snprintf(p->url, sizeof(p->url), "%s", url);
    p->dialer = n->cfg.self_id < id;
    p->tls = tls;
    p->backoff_ms = n->cfg.dial_backoff_min_ms;
    peer_metrics_init(n, p);
    kv_metric_set(p->m_connected, 0);
    kv_metric_set(p->m_queued, 0);
    uv_timer_init(n->loop, &p->dial_timer);
    p->dial_timer.data = p;
    n->n_handles++;
    n->peers[n->n_peers++] = p;
    if (p->dialer)
        uv_timer_start(&p->dial_timer, kv_peer_dial_timer_cb, 0, 0);
    return 0;
}

static void peer_timer_closed(uv_handle_t *h)
{
    kv_peer *p = h->data;
    kv_peer_net *n = p->net;
    free(p);
    kv_peer_handle_closed(n);
}

static void peer_destroy(kv_peer *p)
{
    p->removed = 1;
    kv_peer_resolve_cancel(p);
    if (p->conn) {
        peer_conn *c = p->conn;
        kv_peer_on_down(p, c);
        kv_peer_conn_close(c, p->net->closing ? NULL : "peer removed");
    }
    queue_drop_all(p);
    if (p->sout)
        kv_peer_snap_out_finish(p, p->net->closing ? -ECANCELED : -ECONNRESET);
    kv_metric_set(p->m_connected, 0);
    uv_close((uv_handle_t *)&p->dial_timer, peer_timer_closed);
}

int kv_peer_net_remove_peer(kv_peer_net *n, uint64_t id)
{
    if (!n || n->closing)
        return -ENOENT;
    for (size_t i = 0; i < n->n_peers; i++) {
        kv_peer *p = n->peers[i];
        if (p->id != id)
            continue;
        memmove(&n->peers[i], &n->peers[i + 1], (n->n_peers - i - 1) * sizeof(n->peers[0]));
        n->n_peers--;
        /* connections of this peer not yet adopted (pending) finish their handshake and are
         * refused as unknown. */
        peer_destroy(p);
        return 0;
    }
    return -ENOENT;
}

int kv_peer_net_is_up(const kv_peer_net *n, uint64_t id)
{
    if (!n)
        return 0;
    for (size_t i = 0; i < n->n_peers; i++)
        if (n->peers[i]->id == id)
            return n->peers[i]->up;
    return 0;
}

void kv_peer_net_set_isolated(kv_peer_net *n, int isolated)
{
    if (n)
        n->isolated = isolated ? 1 : 0;
}

/* acceptor -> dialer: offer it; the dialer fetches it with a GET stream. */
static int offer_snapshot(kv_peer *p, peer_snap_out *so)
{
    uint8_t b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(so->id >> (56 - 8 * i));
    return kv_peer_enqueue(p, PEER_CTL_SNAP_OFFER, b, 8);
}

int kv_peer_net_send_snapshot(kv_peer_net *n, uint64_t to, const uint8_t *hdr, size_t hdr_len,
                              const char *path, void (*done)(void *arg, int status), void *arg)
{
    if (!n || n->closing)
        return -ENOTCONN;
    kv_peer *p = kv_peer_find(n, to);
    if (!p)
        return -ENOENT;
    if (!path || !done || (hdr_len && !hdr))
        return -EINVAL;
    if (hdr_len > n->cfg.max_frame_bytes || hdr_len > UINT32_MAX)
        return -EMSGSIZE;
    if (!p->up || n->isolated)
        return -ENOTCONN;
    if (p->sout)
        return -EBUSY;
    peer_snap_out *so;
    int rc = kv_peer_snap_out_open(p, hdr, hdr_len, path, done, arg, &so);
    if (rc != 0)
        return rc;
    so->id = ++n->snap_seq;
    p->sout = so;
    rc = p->dialer ? kv_peer_conn_post_snapshot(p->conn, so) : offer_snapshot(p, so);
    if (rc != 0) {
        p->sout = NULL;
        kv_peer_snap_out_free(so);
        return rc;
    }
    return 0;
}

/* ---- timers, flushing, listeners ---- */

static void ping_timer_cb(uv_timer_t *t)
{
    kv_peer_net *n = t->data;
    uint64_t now = uv_now(n->loop);
    kv_list *e, *next;
    kv_list_foreach_safe(e, next, &n->conns)
        kv_peer_conn_ping_tick(kv_list_data(e, peer_conn, link), now);
    kv_peer_refused_tick(n);
}

static void flush_prep_cb(uv_prepare_t *h)
{
    kv_peer_net *n = h->data;
    uv_prepare_stop(h);
    kv_list *e, *next;
    kv_list_foreach_safe(e, next, &n->conns) {
        peer_conn *c = kv_list_data(e, peer_conn, link);
        if (c->dirty) {
            c->dirty = 0;
            kv_peer_conn_flush(c);
        }
    }
}

void kv_peer_conn_mark_dirty(peer_conn *c)
{
    c->dirty = 1;
    uv_prepare_start(&c->net->flush_prep, flush_prep_cb);
}

static void on_accept(uv_stream_t *server, int status)
{
    kv_peer_net *n = server->data;
    if (status < 0 || n->closing)
        return;
    if (!kv_accept_gate_admit(&n->accept_gate, server))
        return; /* this iteration's accepts are spent: resumed after the other I/O */
    int rc = kv_peer_conn_accept(n, server);
    if (rc != 0)
        kv_peer_log(n, "accepting a peer connection failed: %s", uv_strerror(rc));
}

int kv_peer_net_listen_port(const kv_peer_net *n, size_t i)
{
    if (!n || i >= n->n_listeners)
        return -EINVAL;
    return kv_net_bound_port((uv_tcp_t *)&n->listeners[i]);
}

static int mkdir_p(const char *dir)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof(tmp), "%s", dir) >= (int)sizeof(tmp))
        return -ENAMETOOLONG;
    for (char *s = tmp + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = 0;
        if (mkdir(tmp, 0700) != 0 && errno != EEXIST)
            return -errno;
        *s = '/';
    }
    if (mkdir(tmp, 0700) != 0 && errno != EEXIST)
        return -errno;
    return 0;
}

int kv_peer_net_start(kv_peer_net **out, uv_loop_t *loop, const kv_peer_net_config *cfg,
                      const kv_peer_handler *h, kv_metrics *metrics)
{
    int rc;
    if (!out || !loop || !cfg || !h || !cfg->snap_dir || cfg->self_id == 0 || cfg->n_listen > 8 ||
        cfg->n_peers > KV_PEER_MAX_PEERS || cfg->max_queue_bytes < 16 ||
        cfg->max_frame_bytes == 0 || cfg->max_frame_bytes > UINT32_MAX ||
        cfg->ping_interval_ms == 0 || cfg->dial_backoff_min_ms == 0 ||
        cfg->dial_backoff_max_ms < cfg->dial_backoff_min_ms)
        return -EINVAL;
    kv_peer_net *n = calloc(1, sizeof(*n));
    if (!n)
        return -ENOMEM;
    kv_list_init(&n->conns);
    n->loop = loop;
    n->cfg = *cfg;
    if (n->cfg.max_prio_queue_bytes < 16) /* a config filled by hand: the default */
        n->cfg.max_prio_queue_bytes = 4u << 20;
    if (n->cfg.max_pending_conns == 0)
        n->cfg.max_pending_conns = 16;
    if (n->cfg.handshake_timeout_ms == 0)
        n->cfg.handshake_timeout_ms = 1000;
    n->cfg.n_peers = 0;
    n->h = *h;
    n->metrics = metrics;
    net_metrics_init(n);
    n->rng = cfg->seed ^ cfg->self_id;
    n->snap_dir = strdup(cfg->snap_dir);
    n->cfg.snap_dir = n->snap_dir;
    if (!n->snap_dir) {
        free(n);
        return -ENOMEM;
    }
    if (n->cfg.tls_server)
        kv_tls_ctx_ref(n->cfg.tls_server);
    if (n->cfg.tls_client)
        kv_tls_ctx_ref(n->cfg.tls_client);
    rc = mkdir_p(n->snap_dir);
    if (rc != 0)
        goto fail_early;
    rc = kv_peer_conn_callbacks(&n->cbs);
    if (rc != 0)
        goto fail_early;
    if (nghttp2_option_new(&n->opt) != 0) {
        nghttp2_session_callbacks_del(n->cbs);
        rc = -ENOMEM;
        goto fail_early;
    }
    /* we speak plain HTTP/2 between members: skip nghttp2's HTTP messaging checks that would
     * reject our long-lived bodies; the handshake headers are validated by hand. */
    nghttp2_option_set_no_closed_streams(n->opt, 1);
    nghttp2_option_set_peer_max_concurrent_streams(n->opt, 16);
    uv_timer_init(loop, &n->ping_timer);
    n->ping_timer.data = n;
    n->n_handles++;
    uv_prepare_init(loop, &n->flush_prep);
    n->flush_prep.data = n;
    n->n_handles++;
    kv_accept_gate_init(&n->accept_gate, loop, 0, on_accept, n);
    n->n_handles++;
    for (size_t i = 0; i < cfg->n_listen; i++) {
        char host[256];
        int port;
        rc = cfg->listen_urls[i] ? parse_url(cfg->listen_urls[i], host, sizeof(host), &port)
                                 : -EINVAL;
        if (rc == 0 && strncmp(cfg->listen_urls[i], "https://", 8) == 0) {
            n->listener_tls[i] = 1;
            if (!cfg->tls_server) {
                kv_peer_log(n, "cannot listen on %s: no peer certificate", cfg->listen_urls[i]);
                rc = -EINVAL;
            }
        }
        if (rc != 0)
            goto fail;
        uv_tcp_init(loop, &n->listeners[i]);
        n->listeners[i].data = n;
        n->n_handles++;
        n->n_listeners++;
        rc = kv_net_listen(&n->listeners[i], host, port, 128, on_accept);
        if (rc != 0) {
            kv_peer_log(n, "cannot listen on %s: %s", cfg->listen_urls[i], uv_strerror(rc));
            goto fail;
        }
    }
    for (size_t i = 0; i < cfg->n_peers; i++) {
        rc = kv_peer_net_add_peer(n, cfg->peers[i].id, cfg->peers[i].url);
        if (rc != 0) {
            kv_peer_log(n, "bad peer %llx url '%s'", (unsigned long long)cfg->peers[i].id,
                        cfg->peers[i].url);
            goto fail;
        }
    }
    uv_timer_start(&n->ping_timer, ping_timer_cb, cfg->ping_interval_ms, cfg->ping_interval_ms);
    *out = n;
    return 0;
fail:
    kv_peer_net_close(n);
    return rc;
fail_early:
    kv_tls_ctx_unref(n->cfg.tls_server);
    kv_tls_ctx_unref(n->cfg.tls_client);
    free(n->snap_dir);
    free(n);
    return rc;
}

void kv_peer_net_close(kv_peer_net *n)
{
    if (!n || n->closing)
        return;
    n->closing = 1;
    n->n_handles++; /* hold the net while closing */
    while (n->n_peers > 0) {
        kv_peer *p = n->peers[--n->n_peers];
        peer_destroy(p);
    }
    kv_list *e, *next;
    kv_list_foreach_safe(e, next, &n->conns)
        kv_peer_conn_close(kv_list_data(e, peer_conn, link), NULL);
    for (size_t i = 0; i < n->n_listeners; i++)
        uv_close((uv_handle_t *)&n->listeners[i], simple_handle_closed);
    uv_close((uv_handle_t *)&n->ping_timer, simple_handle_closed);
    uv_close((uv_handle_t *)&n->flush_prep, simple_handle_closed);
    kv_accept_gate_close(&n->accept_gate, simple_handle_closed);
    kv_peer_delay_close(n);
    kv_peer_handle_closed(n);
}
