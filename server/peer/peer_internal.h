/*
 * peer_internal.h - shared state of the peer transport (server/peer/); not a public API.
 *
 * Ownership: kv_peer_net owns its peers (array of pointers), connections (list) and handles.
 * A peer owns its send queue, its dial timer and at most one outgoing snapshot. A connection
 * owns its socket, nghttp2 session and streams; conn->peer is set once the handshake is done
 * (or at dial time for the dialer) and cleared when the peer is removed. Everything is freed
 * from libuv close callbacks; net->n_handles counts open handles so the net is freed last.
 * Loop thread only.
 */
#ifndef KV_PEER_INTERNAL_H
#define KV_PEER_INTERNAL_H

#include <nghttp2/nghttp2.h>
#include <sys/socket.h>

#include "common/list.h"
#include "net/accept_gate.h"
#include "peer/peer_net.h"

#define PEER_CTL_SNAP_OFFER (KV_PEER_TYPE_RESERVED + 1) /* payload: u64 snapshot id */
#define PEER_CTL_SNAP_DONE (KV_PEER_TYPE_RESERVED + 2)  /* payload: u64 id, i32 status */
#define PEER_MAX_MISSED_PINGS 5
#define PEER_MAX_SNAP_IN 2 /* snapshots received at once per connection */
#define PEER_WRITE_CHUNK (64 * 1024)
#define PEER_STREAM_WINDOW (1 << 20)
#define PEER_CONN_WINDOW (4 << 20)
#define PEER_PATH_STREAM "/kvd/peer/stream"
#define PEER_PATH_SNAP "/kvd/peer/snapshot"
/* Refused / closed unidentified connections are logged once, then summarised at most once per
 * this interval (a flood of strangers must not flood the log). */
#define PEER_REFUSE_LOG_INTERVAL_MS 10000
/* A connection claiming a member id whose connection received something within this many
 * PING intervals is refused: the first connection is kept (server/peer/README.md). */
#define PEER_REPLACE_SILENT_PINGS 3

/* Why an accepted connection was closed before it identified a member (metric label). */
enum {
    PEER_REFUSE_PENDING_FULL, /* evicted: --peer-max-pending-connections reached */
    PEER_REFUSE_TIMEOUT,      /* no handshake within --peer-handshake-timeout */
    PEER_REFUSE_REJECTED,     /* handshake refused (cluster / member id mismatch, unknown) */
    PEER_REFUSE_DUPLICATE,    /* claims a member whose connection is alive */
    PEER_REFUSE_OTHER,        /* closed by the peer, garbage, TLS failure */
    PEER_REFUSE_N
};

typedef struct peer_conn peer_conn;
typedef struct peer_stream peer_stream;
typedef struct peer_resolve peer_resolve; /* peer_dns.c */

/* One queued frame: 8-byte header + payload in data[]. */
typedef struct peer_qframe {
    kv_list link; /* kv_peer.q or kv_peer.pq */
    size_t len, off;
    uint8_t data[];
} peer_qframe;

/* An outgoing snapshot (one per peer). Body = 4-byte BE hdr_len, hdr, file. */
typedef struct peer_snap_out {
    struct kv_peer *peer;
    uint64_t id;
    int fd;
    uint8_t *prefix;
    size_t prefix_len, prefix_off;
    uint64_t file_size, file_off;
    int32_t stream_id; /* 0 until a stream carries it */
    int http_status;   /* dialer-sender: the response's :status */
    void (*done)(void *arg, int status);
    void *arg;
} peer_snap_out;

/* An incoming snapshot being written to snap_dir. */
typedef struct peer_snap_in {
    int fd;
    char tmp[4096];
    uint8_t lenb[4];
    size_t len_got;
    uint8_t *hdr;
    size_t hdr_len, hdr_got;
    uint64_t id;         /* acceptor-sender snapshots: the offer id (0 otherwise) */
    int err;             /* first write error; -EFBIG: past cfg.max_snapshot_bytes */
    uint64_t file_bytes; /* written to the file so far */
} peer_snap_in;

enum { PS_PENDING, PS_MSG, PS_SNAP_OUT, PS_SNAP_IN, PS_REJECTED };

/* Per-stream state (nghttp2 stream user data). Owned by the connection's list. */
struct peer_stream {
    kv_list link; /* peer_conn.streams */
    int kind;
    int32_t id;
    /* request / response headers */
    char path[32], method[8];
    uint64_t h_cluster, h_from, h_to, h_snap_id;
    int h_seen; /* bitmask: 1 cluster, 2 from, 4 to, 8 snap id */
    int status;
    int remote_closed;
    /* frame parser (PS_MSG) */
    uint8_t fh[8];
    size_t fh_got;
    uint8_t *body;
    size_t body_len, body_got;
    uint32_t type;
    /* snapshots */
    peer_snap_out *sout; /* borrowed from the peer */
    peer_snap_in *sin;   /* owned */
};

typedef struct kv_peer {
    kv_peer_net *net;
    uint64_t id;
    char url[256];
    /* host (name or IP literal, from url) is resolved before each dial (peer_dns.c) into
     * addr, the address of the current / last dial; resolving: a resolution in flight;
     * addr_rr rotates through a name's addresses, one per dial. */
    char host[256];
    int port;
    struct sockaddr_storage addr;
    peer_resolve *resolving;
    uint64_t addr_rr;
    int dialer;      /* 1 when self_id < id */
    int tls;         /* https:// URL: dialed with net->cfg.tls_client */
    peer_conn *conn; /* the established (or, for the dialer, in-progress) connection */
    int up;
    kv_list q; /* peer_qframe.link, FIFO */
    size_t queued_bytes;
    uv_timer_t dial_timer;
    uint32_t backoff_ms;
    uint64_t dial_failures; /* since the last successful connection */
    peer_snap_out *sout;
    int removed;
    char label[40];
    kv_metric *m_connected, *m_connects, *m_sent, *m_recv, *m_dropped, *m_queued, *m_snap_sent,
        *m_snap_recv, *m_resolves, *m_resolve_failures;
    kv_metric *m_snap_refused, *m_snap_offers_ignored;
    /* etcd's series (docs/metrics.md "Peers"): bytes on the wire to / from the peer, PING RTT */
    kv_metric *m_wire_sent, *m_wire_recv,
        *m_rtt; /* peer_snap.c: snapshots past cfg.max_snapshot_bytes */
    /* peer_prio.c: the priority send queue, taken first at every frame boundary */
    kv_list pq; /* peer_qframe.link, FIFO */
    size_t pq_bytes;
    kv_metric *m_pq_queued, *m_pq_served, *m_pq_dropped;
} kv_peer;

struct peer_conn {
    kv_peer_net *net;
    kv_list link; /* net->conns */
    uv_tcp_t tcp;
    uv_connect_t connect_req;
    uv_write_t write_req;
    nghttp2_session *h2;
    kv_peer *peer;
    int dialer;
    int connected; /* TCP up */
    int closing;
    int writing;
    int in_recv;
    int dirty;
    int close_after_write;
    int32_t msg_stream;
    kv_list streams; /* peer_stream.link, newest first */
    uint8_t *wbuf;
    size_t wlen;
    uint64_t last_rx, created;
    int missed_pings;
    uint64_t rtt_token; /* uv_hrtime() carried by the round-trip PING in flight; 0: none */
    char where[64];     /* for logs: "peer 2" or "127.0.0.1:1234" */
    uint64_t src;       /* accepted: hash of the source address (not the port); eviction fairness */
    uint64_t seq;       /* accepted: order of arrival (net->accept_seq), oldest first */
    int pending;        /* accepted, no known member identified yet (counted in net->n_pending) */
    int refused;        /* already counted in kvd_peer_connections_refused_total */
    struct kv_tls_conn *tls; /* NULL: h2c; else TLS between the socket and nghttp2 */
    char *h1;                /* accepted HTTP/1.1 request being read (peer_h1.c), or NULL */
    size_t h1_len;
};

struct kv_peer_net {
    uv_loop_t *loop;
    kv_peer_net_config cfg;
    char *snap_dir;
    kv_peer_handler h;
    kv_metrics *metrics;
    kv_peer *peers[KV_PEER_MAX_PEERS];
    size_t n_peers;
    uv_tcp_t listeners[8];
    size_t n_listeners;
    uv_timer_t ping_timer;
    uv_prepare_t flush_prep;
    kv_accept_gate accept_gate; /* at most KV_ACCEPT_BURST accepts per loop iteration */
    kv_list conns;              /* peer_conn.link, newest first */
    size_t n_conns;
    int n_handles;
    int closing;
    int isolated;
    int n_resolving; /* host name resolutions in flight (at most 1, peer_dns.c) */
    uint64_t rng;
    uint64_t snap_seq;
    nghttp2_session_callbacks *cbs;
    nghttp2_option *opt;
    int rbuf_busy;
    uint8_t rbuf[64 * 1024];
    int listener_tls[8];         /* listener i has an https URL */
    struct kv_peer_delay *delay; /* delay failpoint (peer_delay.c), NULL until first set */
    /* unidentified accepted connections (bounded by cfg.max_pending_conns) */
    size_t n_pending;
    uint64_t accept_seq;
    kv_metric *m_pending, *m_refused[PEER_REFUSE_N];
    /* refusal log rate limit: one full line, then one summary per interval */
    int rl_active;
    uint64_t rl_start, rl_suppressed, rl_counts[PEER_REFUSE_N];
};

/* peer_net.c */
kv_peer *kv_peer_find(kv_peer_net *n, uint64_t id);
/* A joining member learned the cluster id from a peer (cfg.joining): adopt it, tell the
 * handler, stop joining. */
void kv_peer_adopt_cluster(kv_peer_net *n, uint64_t cluster_id);
void kv_peer_handle_closed(kv_peer_net *n);
/* Logs a failed dial of p (rate-limited). p may be NULL. */
void kv_peer_dial_failed(kv_peer *p, const char *why);
/* Schedules p's next dial after its backoff (jittered) and doubles the backoff. */
void kv_peer_schedule_dial(kv_peer *p);
/* The dial timer's callback: resolves p's host, then dials. */
void kv_peer_dial_timer_cb(uv_timer_t *t);
/* The connection of peer finished its handshake: becomes peer->conn, up. */
void kv_peer_on_up(kv_peer *p, peer_conn *c);
/* peer's connection c is going away (called once, before close). */
void kv_peer_on_down(kv_peer *p, peer_conn *c);
void kv_peer_deliver(kv_peer *p, uint32_t type, const uint8_t *buf, size_t len);
/* Queues a frame ignoring the bound (control frames). Returns 0 or -ENOMEM. */
int kv_peer_enqueue(kv_peer *p, uint32_t type, const uint8_t *buf, size_t len);
/* A wire frame (8-byte header: length, type; then buf), malloc'd, next NULL; or NULL. */
peer_qframe *kv_peer_frame_new(uint32_t type, const uint8_t *buf, size_t len);
/* The checks every send makes before queueing to peer `to` with a queue bound of `limit`
 * bytes: 0 and *out, or -ENOTCONN (net closing), -ENOENT (unknown peer), -EINVAL (reserved
 * type, NULL buf), -EMSGSIZE (past --max-frame-bytes or the bound). */
int kv_peer_send_check(kv_peer_net *n, uint64_t to, uint32_t type, const uint8_t *buf, size_t len,
                       size_t limit, kv_peer **out);
/* Whether p can take a frame now: 0 yes; 1 the member is isolated (failpoint: the frame is
 * dropped and the send reports success); -ENOTCONN not connected. Counts the drops. */
int kv_peer_send_gate(kv_peer *p);
void kv_peer_log(const kv_peer_net *n, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A pending (unidentified) connection from `where` is refused or closed for reason
 * (PEER_REFUSE_*): counts kvd_peer_connections_refused_total{reason} and logs `why`, rate
 * limited (the first line in full, then a summary per PEER_REFUSE_LOG_INTERVAL_MS). */
void kv_peer_refused(kv_peer_net *n, int reason, const char *where, const char *why);
/* Emits the refusal summary when its interval is over (ping timer). */
void kv_peer_refused_tick(kv_peer_net *n);

/* peer_session.c */
int kv_peer_conn_callbacks(nghttp2_session_callbacks **out);
peer_stream *kv_peer_stream_new(peer_conn *c, int32_t id, int kind);
/* Unlinks and frees s (aborting an incoming snapshot). */
void kv_peer_stream_free(peer_conn *c, peer_stream *s);
/* Dialer: opens POST /kvd/peer/stream with the handshake headers. Returns 0 or -ENOMEM. */
int kv_peer_session_open_stream(peer_conn *c);
/* Resumes the message stream's data provider after frames were queued. */
void kv_peer_conn_resume_msg(peer_conn *c);
/* Dialer: POSTs so on its own stream. Returns 0 or -ENOMEM. */
int kv_peer_conn_post_snapshot(peer_conn *c, peer_snap_out *so);

/* peer_prio.c */
/* Frees every frame of p's priority queue; returns how many there were. */
size_t kv_peer_prio_drop_all(kv_peer *p);
/* Fills buf (up to length bytes) for p's message stream: a partly written ordinary frame
 * first, then priority frames, then ordinary ones. Returns the bytes written (0: nothing). */
size_t kv_peer_msg_fill(kv_peer *p, uint8_t *buf, size_t length);
void kv_peer_prio_metrics_init(kv_peer_net *n, kv_peer *p, const char *labels);

/* peer_dns.c */
/* Resolves p->host (an IP literal at once, a name with uv_getaddrinfo off the loop, one
 * resolution per net at a time), sets p->addr, then kv_peer_conn_dial. Failures are logged
 * (kv_peer_dial_failed) and the next dial scheduled. Returns 0 or a uv error. */
int kv_peer_resolve_and_dial(kv_peer *p);
/* p is being removed: detaches it from its resolution in flight (if any). */
void kv_peer_resolve_cancel(kv_peer *p);

/* peer_conn.c */
/* Starts a connection: dialer (p != NULL) connects to p->addr; else accepts on server. */
int kv_peer_conn_dial(kv_peer_net *n, kv_peer *p);
int kv_peer_conn_accept(kv_peer_net *n, uv_stream_t *server);
void kv_peer_conn_close(peer_conn *c, const char *why);
/* Marks c as having output to flush (done from the net's prepare handle). */
void kv_peer_conn_mark_dirty(peer_conn *c);
void kv_peer_conn_flush(peer_conn *c);
void kv_peer_conn_ping_tick(peer_conn *c, uint64_t now);
/* c (accepted) identified a known member: it no longer counts as pending. */
void kv_peer_conn_unpend(peer_conn *c);
/* Closes the pending connection c for reason (PEER_REFUSE_*), logged rate-limited. */
void kv_peer_conn_refuse(peer_conn *c, int reason, const char *why);
/* Creates c's nghttp2 session (server or client by c->dialer) and queues our SETTINGS.
 * TLS listeners call it only once the TLS handshake is done (peer_tls.c). 0 or -ENOMEM. */
int kv_peer_conn_session_new(peer_conn *c);

/* Queues raw plaintext bytes on c (encrypted first under TLS); flushed like nghttp2's output.
 * For the HTTP/1.1 answers of peer_h1.c. 0, -ENOMEM or -EAGAIN (no room). */
int kv_peer_conn_write_raw(peer_conn *c, const uint8_t *p, size_t len);

/* peer_h1.c: etcd's GET /members over HTTP/1.1 on the peer port */
/* 1 if the plaintext p (the first bytes of accepted connection c, or any later ones once it
 * is an HTTP/1.1 connection) goes to kv_peer_h1_recv instead of nghttp2. */
int kv_peer_h1_wants(const peer_conn *c, const uint8_t *p, size_t n);
/* Reads request bytes; answers once the header is complete. 0, or -1 after closing c. */
int kv_peer_h1_recv(peer_conn *c, const uint8_t *p, size_t len);

/* peer_tls.c */
/* Puts TLS (context ctx; verify_host: the dialed URL's host, NULL when accepting) under c.
 * Dialer: also queues the ClientHello. Returns 0 or a negative errno. */
int kv_peer_tls_attach(peer_conn *c, struct kv_tls_ctx *ctx, const char *verify_host);
/* Ciphertext read from c's socket: plaintext into nghttp2. Returns 0, or -1 after closing c
 * (TLS failure, logged with the reason, or an nghttp2 error). */
int kv_peer_tls_recv(peer_conn *c, const uint8_t *in, size_t len);
/* Fills c->wbuf with ciphertext: handshake output first, then (once established) nghttp2's
 * frames encrypted, up to about PEER_WRITE_CHUNK. Returns 0, or -1 after closing c. */
int kv_peer_tls_fill(peer_conn *c);

/* peer_snap.c */
int kv_peer_snap_out_open(kv_peer *p, const uint8_t *hdr, size_t hdr_len, const char *path,
                          void (*done)(void *, int), void *arg, peer_snap_out **out);
/* Completes and frees p->sout with status (calls done). */
void kv_peer_snap_out_finish(kv_peer *p, int status);
/* Frees so without calling done (so never reached a stream). NULL is a no-op. */
void kv_peer_snap_out_free(peer_snap_out *so);
/* Fills the data provider for a PS_SNAP_OUT stream. */
void kv_peer_snap_data_provider(nghttp2_data_provider *prd, peer_stream *s);
int kv_peer_snap_in_open(kv_peer_net *n, peer_snap_in **out);
/* Consumes body bytes of an incoming snapshot. */
void kv_peer_snap_in_data(kv_peer_net *n, peer_snap_in *in, const uint8_t *d, size_t len);
/* fsync + rename + on_snapshot; frees in. Returns 0 or negative errno. */
int kv_peer_snap_in_finish(kv_peer *p, peer_snap_in *in);
/* Aborts (unlinks the temp file) and frees in. NULL is a no-op. */
void kv_peer_snap_in_abort(peer_snap_in *in);
/* The peer's snapshot metrics (peer_snap.c; labels: the peer's label set). */
void kv_peer_snap_metrics_init(kv_peer_net *n, kv_peer *p, const char *labels);
/* (peer_session.c) Data arrived on snapshot stream s and in->err is -EFBIG: logs, counts,
 * removes the file and resets the stream (the sender sees a failure). s->sin is freed and
 * cleared. */
void kv_peer_snap_in_refuse(peer_conn *c, peer_stream *s);

#endif
