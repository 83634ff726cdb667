/* peer_session.c - the HTTP/2 layer of a member connection: nghttp2 callbacks, the handshake,
 * the message stream (frame queue out, frame parser in) and the snapshot streams. Socket I/O
 * is in peer_conn.c. */
#include "peer/peer_internal.h"
#include "common/byteorder.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NV(k, v)                                                                                   \
    {                                                                                              \
        (uint8_t *)(k), (uint8_t *)(v), sizeof(k) - 1, strlen(v), NGHTTP2_NV_FLAG_NONE             \
    }

/* ---- streams ---- */

peer_stream *kv_peer_stream_new(peer_conn *c, int32_t id, int kind)
{
    peer_stream *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->id = id;
    s->kind = kind;
    kv_list_insert_head(&c->streams, &s->link);
    return s;
}

void kv_peer_stream_free(peer_conn *c, peer_stream *s)
{
    (void)c; /* s is on c->streams */
    kv_list_remove(&s->link);
    free(s->body);
    kv_peer_snap_in_abort(s->sin);
    free(s);
}

static void send_snap_done(kv_peer *p, uint64_t id, int status)
{
    uint8_t b[12];
    kv_put_be64(b, id);
    kv_put_be32(b + 8, (uint32_t)status);
    if (p && p->up)
        kv_peer_enqueue(p, PEER_CTL_SNAP_DONE, b, sizeof(b));
}

static void fmt_hex(char *out, size_t sz, uint64_t v)
{
    snprintf(out, sz, "%llx", (unsigned long long)v);
}

/* Submits a request carrying our identity (kvd-cluster-id, kvd-from) and one more header
 * (key: hex value). Returns the stream id or a negative nghttp2 error. */
static int32_t submit_request(peer_conn *c, const char *method, const char *path, const char *key,
                              uint64_t val, nghttp2_data_provider *prd, peer_stream *s)
{
    kv_peer_net *n = c->net;
    char v[3][24];
    fmt_hex(v[0], sizeof(v[0]), n->cfg.joining ? 0 : n->cfg.cluster_id);
    fmt_hex(v[1], sizeof(v[1]), n->cfg.self_id);
    fmt_hex(v[2], sizeof(v[2]), val);
    nghttp2_nv nva[] = {
        NV(":method", method),
        NV(":scheme", "http"),
        NV(":path", path),
        NV(":authority", "kvd"),
        NV("kvd-cluster-id", v[0]),
        NV("kvd-from", v[1]),
        {(uint8_t *)key, (uint8_t *)v[2], strlen(key), strlen(v[2]), NGHTTP2_NV_FLAG_NONE}};
    return nghttp2_submit_request(c->h2, NULL, nva, sizeof(nva) / sizeof(nva[0]), prd, s);
}

/* ---- the message stream: queue -> DATA ---- */

static ssize_t msg_read_cb(nghttp2_session *h2, int32_t stream_id, uint8_t *buf, size_t length,
                           uint32_t *data_flags, nghttp2_data_source *src, void *ud)
{
    (void)h2;
    (void)stream_id;
    (void)data_flags;
    (void)src;
    peer_conn *c = ud;
    kv_peer *p = c->peer;
    if (!p || !p->up || p->conn != c || c->closing)
        return NGHTTP2_ERR_DEFERRED;
    size_t n = kv_peer_msg_fill(p, buf, length); /* peer_prio.c: priority frames first */
    if (n == 0)
        return NGHTTP2_ERR_DEFERRED;
    return (ssize_t)n;
}

void kv_peer_conn_resume_msg(peer_conn *c)
{
    if (c->closing || !c->h2 || c->msg_stream <= 0)
        return;
    nghttp2_session_resume_data(c->h2, c->msg_stream);
    kv_peer_conn_mark_dirty(c);
}

/* ---- the message stream: DATA -> frames ---- */

static void open_snap_fetch(peer_conn *c, uint64_t id);

/* Returns 0, or -1 when the connection must be closed. */
static int msg_data(peer_conn *c, peer_stream *s, const uint8_t *d, size_t len)
{
    kv_peer_net *n = c->net;
    while (len > 0 && !c->closing && c->peer) {
        if (s->fh_got < 8) {
            size_t take = 8 - s->fh_got < len ? 8 - s->fh_got : len;
            memcpy(s->fh + s->fh_got, d, take);
            s->fh_got += take;
            d += take;
            len -= take;
            if (s->fh_got < 8)
                break;
            s->body_len = kv_be32(s->fh);
            s->type = kv_be32(s->fh + 4);
            s->body_got = 0;
            if (s->body_len > n->cfg.max_frame_bytes) {
                kv_peer_log(n,
                            "closing connection to peer %llx: frame of %zu bytes exceeds "
                            "the limit of %zu",
                            (unsigned long long)c->peer->id, s->body_len, n->cfg.max_frame_bytes);
                return -1;
            }
            if (s->body_len > 0) {
                s->body = malloc(s->body_len);
                if (!s->body) {
                    kv_peer_log(n, "closing connection to peer %llx: out of memory",
                                (unsigned long long)c->peer->id);
                    return -1;
                }
                continue;
            }
        } else {
            size_t take = s->body_len - s->body_got < len ? s->body_len - s->body_got : len;
            memcpy(s->body + s->body_got, d, take);
            s->body_got += take;
            d += take;
            len -= take;
            if (s->body_got < s->body_len)
                break;
        }
        /* a whole frame */
        uint8_t *body = s->body;
        size_t blen = s->body_len;
        s->body = NULL;
        s->fh_got = 0;
        if (s->type == PEER_CTL_SNAP_OFFER) {
            if (c->dialer && blen == 8) {
                uint64_t id = 0;
                for (int i = 0; i < 8; i++)
                    id = (id << 8) | body[i];
                open_snap_fetch(c, id);
            }
        } else {
            kv_peer_deliver(c->peer, s->type, body, blen);
        }
        free(body);
    }
    return 0;
}

/* ---- snapshot streams ---- */

static int snaps_in_progress(const peer_conn *c);

static void open_snap_fetch(peer_conn *c, uint64_t id)
{
    kv_peer_net *n = c->net;
    kv_peer *p = c->peer;
    peer_snap_in *in = NULL;
    peer_stream *s = NULL;
    if (snaps_in_progress(c) >= PEER_MAX_SNAP_IN) {
        /* the same bound as for snapshots pushed to us (on_stream_request): each fetch holds
         * a temp file, and a peer's offers cost it nothing */
        kv_peer_log(n, "ignoring a snapshot offer from peer %llx: %d already in progress",
                    (unsigned long long)(p ? p->id : 0), PEER_MAX_SNAP_IN);
        if (p)
            kv_metric_inc(p->m_snap_offers_ignored);
        return;
    }
    if (kv_peer_snap_in_open(n, &in) != 0)
        goto fail;
    in->id = id;
    s = kv_peer_stream_new(c, 0, PS_SNAP_IN);
    if (!s)
        goto fail;
    s->sin = in;
    in = NULL;
    int32_t sid = submit_request(c, "GET", PEER_PATH_SNAP, "kvd-snap-id", id, NULL, s);
    if (sid < 0)
        goto fail;
    s->id = sid;
    kv_peer_conn_mark_dirty(c);
    return;
fail:
    kv_peer_log(n, "cannot fetch snapshot %llu from peer %llx", (unsigned long long)id,
                (unsigned long long)p->id);
    if (s)
        kv_peer_stream_free(c, s);
    kv_peer_snap_in_abort(in);
    send_snap_done(p, id, -EIO);
}

/* Dialer: opens a POST stream of kind on path whose body comes from read_cb (source: the
 * stream). Returns the stream or NULL (out of memory / nghttp2 refused). */
static peer_stream *open_post(peer_conn *c, int kind, const char *path,
                              nghttp2_data_source_read_callback read_cb, peer_snap_out *so)
{
    peer_stream *s = kv_peer_stream_new(c, 0, kind);
    if (!s)
        return NULL;
    s->sout = so;
    nghttp2_data_provider prd = {.source.ptr = s, .read_callback = read_cb};
    int32_t sid = submit_request(c, "POST", path, "kvd-to", c->peer->id, &prd, s);
    if (sid < 0) {
        kv_peer_stream_free(c, s);
        return NULL;
    }
    s->id = sid;
    kv_peer_conn_mark_dirty(c);
    return s;
}

int kv_peer_conn_post_snapshot(peer_conn *c, peer_snap_out *so)
{
    nghttp2_data_provider snap;
    kv_peer_snap_data_provider(&snap, NULL);
    peer_stream *s = open_post(c, PS_SNAP_OUT, PEER_PATH_SNAP, snap.read_callback, so);
    if (!s)
        return -ENOMEM;
    so->stream_id = s->id;
    return 0;
}

static void respond(peer_conn *c, peer_stream *s, const char *status)
{
    char cid[24];
    fmt_hex(cid, sizeof(cid), c->net->cfg.cluster_id);
    nghttp2_nv nva[] = {NV(":status", status), NV("kvd-cluster-id", cid)};
    nghttp2_submit_response(c->h2, s->id, nva, 2, NULL);
    kv_peer_conn_mark_dirty(c);
}

/* ---- handshake (acceptor side) ---- */

/* Refuses the handshake on s (403 + GOAWAY, closed once written). reason: PEER_REFUSE_*. A
 * connection that has not identified a member is logged rate-limited and counted. */
static void reject_as(peer_conn *c, peer_stream *s, int reason, const char *why)
{
    if (c->pending && !c->refused) {
        char line[256];
        snprintf(line, sizeof(line), "rejected peer %llx: %s", (unsigned long long)s->h_from, why);
        kv_peer_refused(c->net, reason, c->where, line);
        c->refused = 1;
    } else if (!c->pending) {
        kv_peer_log(c->net, "rejected peer %llx: %s", (unsigned long long)s->h_from, why);
    }
    s->kind = PS_REJECTED;
    respond(c, s, "403");
    nghttp2_submit_goaway(c->h2, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_NO_ERROR, NULL, 0);
    c->close_after_write = 1;
}

static void reject(peer_conn *c, peer_stream *s, const char *why)
{
    reject_as(c, s, PEER_REFUSE_REJECTED, why);
}

/* Whether p's current connection (another than c) is alive: it received something within
 * PEER_REPLACE_SILENT_PINGS PING intervals (we PING every idle connection each interval). */
static int peer_conn_alive(const kv_peer *p, const peer_conn *c)
{
    const peer_conn *o = p->conn;
    if (!o || o == c || o->closing || !p->up)
        return 0;
    uint64_t now = uv_now(c->net->loop);
    return now - o->last_rx < (uint64_t)c->net->cfg.ping_interval_ms * PEER_REPLACE_SILENT_PINGS;
}

/* Incoming snapshots being written for this connection (each holds a temp file). */
static int snaps_in_progress(const peer_conn *c)
{
    int k = 0;
    kv_list *e;
    kv_list_foreach(e, &c->streams) {
        const peer_stream *s = kv_list_data(e, peer_stream, link);
        k += s->kind == PS_SNAP_IN && s->sin;
    }
    return k;
}

static void on_stream_request(peer_conn *c, peer_stream *s)
{
    kv_peer_net *n = c->net;
    char why[160];
    int is_stream = strcmp(s->path, PEER_PATH_STREAM) == 0 && strcmp(s->method, "POST") == 0;
    int is_snap = strcmp(s->path, PEER_PATH_SNAP) == 0;
    if (!is_stream && !is_snap) {
        s->kind = PS_REJECTED;
        respond(c, s, "404");
        return;
    }
    if ((s->h_seen & 3) != 3) {
        reject(c, s, "missing kvd-cluster-id / kvd-from headers");
        return;
    }
    if (n->cfg.joining && s->h_cluster != 0 && kv_peer_find(n, s->h_from)) {
        kv_peer_adopt_cluster(n, s->h_cluster); /* we joined it: its id is ours */
    } else if (s->h_cluster == 0 && kv_peer_find(n, s->h_from)) {
        /* a member joining (--initial-cluster-state existing) that does not know the cluster
         * id yet; it is one of ours (added by a configuration change) and learns it from our
         * answer */
    } else if (s->h_cluster != n->cfg.cluster_id) {
        snprintf(why, sizeof(why), "cluster id mismatch (theirs %llx, ours %llx)",
                 (unsigned long long)s->h_cluster, (unsigned long long)n->cfg.cluster_id);
        reject(c, s, why);
        return;
    }
    if (is_stream) {
        if (!(s->h_seen & 4) || s->h_to != n->cfg.self_id) {
            snprintf(why, sizeof(why), "member id mismatch (they dialed %llx, we are %llx)",
                     (unsigned long long)s->h_to, (unsigned long long)n->cfg.self_id);
            reject(c, s, why);
            return;
        }
        kv_peer *p = kv_peer_find(n, s->h_from);
        if (!p) {
            reject(c, s, "unknown member id");
            return;
        }
        if (p->dialer) {
            reject(c, s, "the member with the lower id dials (we do)");
            return;
        }
        if (c->peer || c->msg_stream > 0) {
            reject(c, s, "second message stream on one connection");
            return;
        }
        if (peer_conn_alive(p, c)) {
            /* Without peer TLS anyone can claim a member id: the first connection is kept
             * while it is alive; a member that really reconnected gets in once the old one
             * is closed or silent (server/peer/README.md, "Who may connect"). */
            snprintf(why, sizeof(why),
                     "member %llx is already connected (%s) and alive: keeping that connection",
                     (unsigned long long)p->id, p->conn->where);
            reject_as(c, s, PEER_REFUSE_DUPLICATE, why);
            return;
        }
        s->kind = PS_MSG;
        c->msg_stream = s->id;
        snprintf(c->where, sizeof(c->where), "peer %llx", (unsigned long long)p->id);
        char cid[24];
        fmt_hex(cid, sizeof(cid), n->cfg.cluster_id);
        nghttp2_nv nva[] = {NV(":status", "200"), NV("kvd-cluster-id", cid)};
        nghttp2_data_provider prd = {.source.ptr = s, .read_callback = msg_read_cb};
        if (nghttp2_submit_response(c->h2, s->id, nva, 2, &prd) != 0) {
            kv_peer_conn_close(c, "cannot answer the handshake");
            return;
        }
        kv_peer_conn_unpend(c);
        kv_peer_on_up(p, c);
        kv_peer_conn_mark_dirty(c);
        return;
    }
    /* snapshot streams: only on an established connection, from that peer */
    if (!c->peer || !c->peer->up || s->h_from != c->peer->id) {
        s->kind = PS_REJECTED;
        respond(c, s, "403");
        return;
    }
    if (strcmp(s->method, "POST") == 0) {
        if (snaps_in_progress(c) >= PEER_MAX_SNAP_IN) {
            kv_peer_log(n, "refusing a snapshot from peer %llx: %d already in progress",
                        (unsigned long long)c->peer->id, PEER_MAX_SNAP_IN);
            s->kind = PS_REJECTED;
            respond(c, s, "503");
            return;
        }
        if (kv_peer_snap_in_open(n, &s->sin) != 0) {
            s->kind = PS_REJECTED;
            respond(c, s, "500");
            return;
        }
        s->kind = PS_SNAP_IN;
        return;
    }
    peer_snap_out *so = c->peer->sout;
    if (strcmp(s->method, "GET") != 0 || !(s->h_seen & 8) || !so || so->id != s->h_snap_id ||
        so->stream_id != 0) {
        s->kind = PS_REJECTED;
        respond(c, s, "404");
        return;
    }
    s->kind = PS_SNAP_OUT;
    s->sout = so;
    so->stream_id = s->id;
    nghttp2_nv nva[] = {NV(":status", "200")};
    nghttp2_data_provider prd;
    kv_peer_snap_data_provider(&prd, s);
    if (nghttp2_submit_response(c->h2, s->id, nva, 1, &prd) != 0)
        kv_peer_snap_out_finish(c->peer, -EIO);
    kv_peer_conn_mark_dirty(c);
}

/* ---- responses (dialer side) ---- */

static void on_stream_response(peer_conn *c, peer_stream *s)
{
    kv_peer_net *n = c->net;
    kv_peer *p = c->peer;
    if (s->kind != PS_MSG || !p)
        return;
    if (s->status == 200) {
        if (n->cfg.joining && (s->h_seen & 1) && s->h_cluster != 0)
            kv_peer_adopt_cluster(n, s->h_cluster);
        kv_peer_on_up(p, c);
        return;
    }
    if ((s->h_seen & 1) && s->h_cluster != n->cfg.cluster_id)
        kv_peer_log(n, "rejected peer %llx: cluster id mismatch (theirs %llx, ours %llx)",
                    (unsigned long long)p->id, (unsigned long long)s->h_cluster,
                    (unsigned long long)n->cfg.cluster_id);
    else
        kv_peer_log(n, "peer %llx refused our connection (HTTP %d); see its log",
                    (unsigned long long)p->id, s->status);
    kv_peer_conn_close(c, NULL);
}

static void on_remote_end(peer_conn *c, peer_stream *s)
{
    s->remote_closed = 1;
    if (s->kind == PS_MSG) {
        kv_peer_conn_close(c, "the peer ended the message stream");
        return;
    }
    if (s->kind != PS_SNAP_IN || !s->sin)
        return;
    kv_peer *p = c->peer;
    peer_snap_in *in = s->sin;
    s->sin = NULL;
    if (!p) {
        kv_peer_snap_in_abort(in);
        return;
    }
    uint64_t id = in->id;
    if (c->dialer && s->status != 200) {
        kv_peer_snap_in_abort(in);
        send_snap_done(p, id, -EIO);
        return;
    }
    int rc = kv_peer_snap_in_finish(p, in);
    if (c->dialer)
        send_snap_done(p, id, rc);
    else
        respond(c, s, rc == 0 ? "200" : "500");
}

void kv_peer_snap_in_refuse(peer_conn *c, peer_stream *s)
{
    kv_peer_net *n = c->net;
    kv_peer *p = c->peer;
    peer_snap_in *in = s->sin;
    s->sin = NULL;
    uint64_t id = in->id;
    kv_peer_log(n,
                "refusing a snapshot from peer %llx: it exceeds --max-snapshot-bytes (%llu "
                "bytes); stream reset, partial file removed",
                (unsigned long long)(p ? p->id : 0), (unsigned long long)n->cfg.max_snapshot_bytes);
    kv_peer_snap_in_abort(in); /* unlinks the partial file */
    if (p)
        kv_metric_inc(p->m_snap_refused);
    if (!c->closing && c->h2 && s->id > 0) {
        nghttp2_submit_rst_stream(c->h2, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_REFUSED_STREAM);
        kv_peer_conn_mark_dirty(c);
    }
    if (c->dialer && p)
        send_snap_done(p, id, -EFBIG);
}

/* ---- nghttp2 callbacks ---- */

static int cb_begin_headers(nghttp2_session *h2, const nghttp2_frame *f, void *ud)
{
    peer_conn *c = ud;
    if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST || c->dialer)
        return 0;
    peer_stream *s = kv_peer_stream_new(c, f->hd.stream_id, PS_PENDING);
    if (!s)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    nghttp2_session_set_stream_user_data(h2, f->hd.stream_id, s);
    return 0;
}

static int parse_hex(const uint8_t *v, size_t len, uint64_t *out)
{
    if (len == 0 || len > 16)
        return -1;
    uint64_t x = 0;
    for (size_t i = 0; i < len; i++) {
        int d;
        if (v[i] >= '0' && v[i] <= '9')
            d = v[i] - '0';
        else if (v[i] >= 'a' && v[i] <= 'f')
            d = v[i] - 'a' + 10;
        else if (v[i] >= 'A' && v[i] <= 'F')
            d = v[i] - 'A' + 10;
        else
            return -1;
        x = (x << 4) | (uint64_t)d;
    }
    *out = x;
    return 0;
}

static int hdr_is(const uint8_t *name, size_t len, const char *lit)
{
    return strlen(lit) == len && memcmp(name, lit, len) == 0;
}

static int cb_header(nghttp2_session *h2, const nghttp2_frame *f, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags, void *ud)
{
    (void)flags;
    (void)ud;
    if (f->hd.type != NGHTTP2_HEADERS)
        return 0;
    peer_stream *s = nghttp2_session_get_stream_user_data(h2, f->hd.stream_id);
    if (!s)
        return 0;
    if (hdr_is(name, namelen, ":path")) {
        size_t l = valuelen < sizeof(s->path) - 1 ? valuelen : sizeof(s->path) - 1;
        memcpy(s->path, value, l);
        s->path[l] = 0;
    } else if (hdr_is(name, namelen, ":method")) {
        size_t l = valuelen < sizeof(s->method) - 1 ? valuelen : sizeof(s->method) - 1;
        memcpy(s->method, value, l);
        s->method[l] = 0;
    } else if (hdr_is(name, namelen, ":status")) {
        s->status =
            valuelen == 3 ? (value[0] - '0') * 100 + (value[1] - '0') * 10 + (value[2] - '0') : 0;
    } else if (hdr_is(name, namelen, "kvd-cluster-id")) {
        if (parse_hex(value, valuelen, &s->h_cluster) == 0)
            s->h_seen |= 1;
    } else if (hdr_is(name, namelen, "kvd-from")) {
        if (parse_hex(value, valuelen, &s->h_from) == 0)
            s->h_seen |= 2;
    } else if (hdr_is(name, namelen, "kvd-to")) {
        if (parse_hex(value, valuelen, &s->h_to) == 0)
            s->h_seen |= 4;
    } else if (hdr_is(name, namelen, "kvd-snap-id")) {
        if (parse_hex(value, valuelen, &s->h_snap_id) == 0)
            s->h_seen |= 8;
    }
    return 0;
}

static int cb_frame_recv(nghttp2_session *h2, const nghttp2_frame *f, void *ud)
{
    peer_conn *c = ud;
    if (c->closing)
        return 0;
    peer_stream *s;
    switch (f->hd.type) {
    case NGHTTP2_HEADERS:
        s = nghttp2_session_get_stream_user_data(h2, f->hd.stream_id);
        if (!s)
            return 0;
        if (f->headers.cat == NGHTTP2_HCAT_REQUEST)
            on_stream_request(c, s);
        else if (f->headers.cat == NGHTTP2_HCAT_RESPONSE)
            on_stream_response(c, s);
        if ((f->hd.flags & NGHTTP2_FLAG_END_STREAM) && !c->closing)
            on_remote_end(c, s);
        break;
    case NGHTTP2_DATA:
        if (!(f->hd.flags & NGHTTP2_FLAG_END_STREAM))
            return 0;
        s = nghttp2_session_get_stream_user_data(h2, f->hd.stream_id);
        if (s)
            on_remote_end(c, s);
        break;
    case NGHTTP2_GOAWAY:
        kv_peer_conn_close(c, "peer sent GOAWAY");
        break;
    case NGHTTP2_PING:
        if ((f->hd.flags & NGHTTP2_FLAG_ACK) && c->rtt_token) {
            uint64_t t = 0;
            for (int i = 0; i < 8; i++)
                t = (t << 8) | f->ping.opaque_data[i];
            if (t == c->rtt_token) {
                if (c->peer)
                    kv_metric_observe(c->peer->m_rtt, (double)(uv_hrtime() - t) / 1e9);
                c->rtt_token = 0;
            }
        }
        break;
    default:
        break;
    }
    return 0;
}

static int cb_data_chunk(nghttp2_session *h2, uint8_t flags, int32_t stream_id, const uint8_t *d,
                         size_t len, void *ud)
{
    (void)flags;
    peer_conn *c = ud;
    if (c->closing)
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    peer_stream *s = nghttp2_session_get_stream_user_data(h2, stream_id);
    if (!s)
        return 0;
    if (s->kind == PS_MSG) {
        if (msg_data(c, s, d, len) != 0) {
            kv_peer_conn_close(c, NULL);
            return NGHTTP2_ERR_CALLBACK_FAILURE;
        }
        if (c->closing)
            return NGHTTP2_ERR_CALLBACK_FAILURE;
    } else if (s->kind == PS_SNAP_IN && s->sin) {
        kv_peer_snap_in_data(c->net, s->sin, d, len);
        if (s->sin->err == -EFBIG)
            kv_peer_snap_in_refuse(c, s);
    }
    return 0;
}

static int cb_stream_close(nghttp2_session *h2, int32_t stream_id, uint32_t err, void *ud)
{
    peer_conn *c = ud;
    peer_stream *s = nghttp2_session_get_stream_user_data(h2, stream_id);
    if (!s || c->closing)
        return 0;
    nghttp2_session_set_stream_user_data(h2, stream_id, NULL);
    kv_peer *p = c->peer;
    switch (s->kind) {
    case PS_MSG:
        kv_peer_stream_free(c, s);
        if (c->msg_stream == stream_id)
            c->msg_stream = 0;
        kv_peer_conn_close(c, "the message stream closed");
        return 0;
    case PS_SNAP_OUT:
        if (s->sout && p && p->sout == s->sout) {
            if (c->dialer)
                kv_peer_snap_out_finish(p,
                                        (s->status == 200 && err == NGHTTP2_NO_ERROR) ? 0 : -EIO);
            else if (err != NGHTTP2_NO_ERROR)
                kv_peer_snap_out_finish(p, -EIO);
        }
        break;
    case PS_SNAP_IN:
        if (s->sin) { /* closed before the end of the body */
            uint64_t id = s->sin->id;
            kv_peer_snap_in_abort(s->sin);
            s->sin = NULL;
            if (c->dialer)
                send_snap_done(p, id, -EIO);
        }
        break;
    default:
        break;
    }
    kv_peer_stream_free(c, s);
    return 0;
}

int kv_peer_conn_callbacks(nghttp2_session_callbacks **out)
{
    nghttp2_session_callbacks *cbs;
    if (nghttp2_session_callbacks_new(&cbs) != 0)
        return -ENOMEM;
    nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, cb_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cbs, cb_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, cb_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, cb_data_chunk);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, cb_stream_close);
    *out = cbs;
    return 0;
}

/* ---- the dialer's message stream ---- */

int kv_peer_session_open_stream(peer_conn *c)
{
    peer_stream *s = open_post(c, PS_MSG, PEER_PATH_STREAM, msg_read_cb, NULL);
    if (!s)
        return -ENOMEM;
    c->msg_stream = s->id;
    return 0;
}
