/*
 * peer_net.h - the member-to-member transport: typed byte frames and streamed snapshot files
 * over one long-lived HTTP/2 (h2c, prior knowledge) connection per peer pair.
 *
 * Wire protocol (server/peer/README.md):
 * - The member with the LOWER id dials; the other only accepts. The dialer opens
 *   POST /kvd/peer/stream with headers kvd-cluster-id, kvd-from, kvd-to (lower-case hex). Its
 *   request body carries dialer->acceptor frames; the 200 response body acceptor->dialer frames.
 *   The acceptor answers 403 (and logs "rejected peer <id>: ...") to another cluster, another
 *   member id, an unknown member or a member that should not dial.
 * - Frame = 4-byte big-endian payload length + 4-byte big-endian type + payload. Types
 *   >= KV_PEER_TYPE_RESERVED are the transport's own control frames.
 * - Snapshots: dialer->acceptor is a POST /kvd/peer/snapshot whose body is a 4-byte BE header
 *   length, the header, then the file; the acceptor answers 200 once it has fsynced, renamed and
 *   handed the file to on_snapshot. acceptor->dialer: the acceptor sends an offer control frame,
 *   the dialer fetches GET /kvd/peer/snapshot (header kvd-snap-id), same body, and answers with a
 *   done control frame.
 *
 * Threads: everything runs on the loop thread passed to kv_peer_net_start. No function here is
 * thread-safe. Callbacks run on the loop thread; they may call kv_peer_net_send / _send_snapshot
 * / _is_up / _set_isolated (and add/remove peers) but not kv_peer_net_close.
 * The process must ignore SIGPIPE: writes go out with write(2), and one to a peer that reset
 * the connection would otherwise kill it (kvd's main() ignores it).
 * Bounds: per-peer send queue (max_queue_bytes), frame size (max_frame_bytes, also the receive
 * buffer bound), HTTP/2 flow-control windows (1 MiB per stream, 4 MiB per connection).
 * Connections: our own dials (one per peer) and accepted connections that identified a known
 * member (one per peer) are never refused for room; accepted connections that have not
 * identified themselves yet are at most max_pending_conns (to make room for a new one, the
 * oldest of the source address holding the most is closed: one flooding address evicts only
 * its own) and are closed after handshake_timeout_ms (server/peer/README.md).
 */
#ifndef KV_PEER_NET_H
#define KV_PEER_NET_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "metrics/metrics.h"

#define KV_PEER_TYPE_RESERVED 0xFFFF0000u
#define KV_PEER_MAX_PEERS 16

typedef struct kv_peer_net kv_peer_net;

typedef struct kv_peer_handler {
    void *arg;
    /* A frame from peer `from`. buf is valid only during the call. Loop thread. */
    void (*on_message)(void *arg, uint64_t from, uint32_t type, const uint8_t *buf, size_t len);
    /* A snapshot fully received and fsynced at `path` (inside cfg.snap_dir). The callee owns
     * the file from now on (renames or unlinks it). hdr: the bytes the sender attached. */
    void (*on_snapshot)(void *arg, uint64_t from, const uint8_t *hdr, size_t hdr_len,
                        const char *path);
    /* Connection to peer id went up (1) or down (0). May be NULL. */
    void (*on_peer_state)(void *arg, uint64_t id, int up);
    /* Joining members only (cfg.joining): the cluster id learned from the first peer that
     * accepted us. May be NULL. */
    void (*on_cluster_id)(void *arg, uint64_t cluster_id);
    /* etcd's GET /members on the peer port (peer_h1.c): the member list as etcd's JSON, in a
     * malloc'd *json of *len bytes the net frees. 0 or a negative errno (answered 500). NULL:
     * the endpoint answers 503. Loop thread. */
    int (*members_json)(void *arg, char **json, size_t *len);
} kv_peer_handler;

typedef struct kv_peer_addr {
    uint64_t id;
    char url[256];
} kv_peer_addr; /* http://host:port or https://host:port */

typedef struct kv_peer_net_config {
    uint64_t self_id, cluster_id;
    const char *listen_urls[8];
    size_t n_listen; /* --listen-peer-urls (http://h:p) */
    kv_peer_addr peers[KV_PEER_MAX_PEERS];
    size_t n_peers;         /* other members (self excluded) */
    const char *snap_dir;   /* received snapshots are written here (created if missing) */
    size_t max_queue_bytes; /* per peer send queue; default 16 MiB (--peer-max-queue-bytes) */
    size_t max_frame_bytes; /* largest frame accepted/sent; default 64 MiB */
    uint32_t dial_backoff_min_ms, dial_backoff_max_ms; /* default 100, 5000; jittered */
    uint32_t ping_interval_ms; /* HTTP/2 PING when idle; default 1000; dead after 5 missed */
    uint64_t seed;             /* PRNG seed for jitter (no global RNG) */
    int joining; /* --initial-cluster-state existing on a fresh member: the cluster id is not
                    known yet; it is taken from the first known peer that answers (handler
                    on_cluster_id) and our handshakes carry 0 until then */
    uint64_t max_snapshot_bytes; /* largest snapshot body accepted (--max-snapshot-bytes); 0:
                                    unbounded. Past it: stream reset, file removed, counted */
    size_t max_prio_queue_bytes; /* per peer priority queue (kv_peer_net_send_prio); default
                                    4 MiB (--peer-max-priority-queue-bytes) */
    /* TLS (net/tls.h): https listen URLs accept with tls_server, https peer URLs are
     * dialed with tls_client (the server certificate must match the URL's host). Each may be
     * NULL (then such URLs are refused, -EINVAL). The net takes its own references. */
    struct kv_tls_ctx *tls_server, *tls_client;
    /* Accepted connections not yet identified as a known member (--peer-max-pending-
     * connections, default 16): past it the oldest is closed (counted, log rate-limited).
     * 0: the default. */
    uint32_t max_pending_conns;
    /* An accepted connection that has not identified itself as a known member by then is
     * closed (--peer-handshake-timeout, default 1000 ms; 0: the default). */
    uint32_t handshake_timeout_ms;
} kv_peer_net_config;

/* Fills c with the defaults above (no listeners, no peers, snap_dir NULL). */
void kv_peer_net_config_default(kv_peer_net_config *c);

/* Binds the listeners and starts dialing. h is copied; metrics may be NULL (borrowed; must
 * outlive the net). Peer URLs are only parsed here; their host names are resolved before each
 * dial, off the loop (peer_dns.c: uv_getaddrinfo; an unresolvable name is a dial failure).
 * Listener host names are resolved here (blocking, startup only).
 * Returns 0, -EINVAL (bad url/config), -ENOMEM or a libuv error; on error the handles already
 * opened are closing: run the loop to free them. Loop thread only. */
int kv_peer_net_start(kv_peer_net **out, uv_loop_t *loop, const kv_peer_net_config *cfg,
                      const kv_peer_handler *h, kv_metrics *metrics);
/* Closes everything; frees in close callbacks (run the loop afterwards). Pending snapshot
 * sends complete with done(arg, -ECANCELED) from inside this call. NULL is a no-op. */
void kv_peer_net_close(kv_peer_net *p);
/* Queues a copy of buf for peer `to`. 0 queued; -EAGAIN queue full (frame dropped, counted);
 * -ENOTCONN no connection up (dropped, counted); -EMSGSIZE (len > max_frame_bytes, or the
 * frame could never fit the queue); -ENOENT unknown peer; -EINVAL reserved type. Never
 * blocks, never grows past max_queue_bytes. Frames to one peer arrive in order. While
 * isolated, returns 0 and drops the frame (counted). */
int kv_peer_net_send(kv_peer_net *p, uint64_t to, uint32_t type, const uint8_t *buf, size_t len);
/* Like kv_peer_net_send, on the peer's priority queue (peer_prio.c): taken ahead of frames
 * queued with kv_peer_net_send at the next frame boundary, bounded by max_prio_queue_bytes
 * (-EAGAIN past it) and never counted against max_queue_bytes. For small latency-critical
 * frames (lease renewals). Priority frames arrive in order among themselves but may overtake
 * ordinary frames. */
int kv_peer_net_send_prio(kv_peer_net *p, uint64_t to, uint32_t type, const uint8_t *buf,
                          size_t len);
/* Streams the file at path to peer `to` on its own HTTP/2 stream (flow-controlled, read in
 * chunks, never the whole file in memory). done(arg, 0) once the receiver has fsynced it and
 * handed it to on_snapshot; done(arg, <0) on failure (peer down, I/O error). At most one
 * snapshot per peer at a time (-EBUSY). The file is not deleted by the transport. Returns 0
 * (done will be called exactly once), -ENOENT, -ENOTCONN (also while isolated), -EBUSY,
 * -EMSGSIZE (hdr_len > max_frame_bytes) or an open(2) error; done is not called on error. */
int kv_peer_net_send_snapshot(kv_peer_net *p, uint64_t to, const uint8_t *hdr, size_t hdr_len,
                              const char *path, void (*done)(void *arg, int status), void *arg);
/* Membership changes. add: -EEXIST, -EINVAL (self, bad url), -ENOSPC (KV_PEER_MAX_PEERS).
 * remove: -ENOENT; closes the connection and fails its snapshot send. */
int kv_peer_net_add_peer(kv_peer_net *p, uint64_t id, const char *url);
int kv_peer_net_remove_peer(kv_peer_net *p, uint64_t id);
/* 1 when the connection to id is established (handshake done), else 0. */
int kv_peer_net_is_up(const kv_peer_net *p, uint64_t id);
/* Failpoint for partition tests: while isolated, every frame sent or received is dropped
 * (connections stay up; PINGs still flow). */
void kv_peer_net_set_isolated(kv_peer_net *p, int isolated);
/* The TCP port listener i is bound to (for tests binding port 0), or a negative error. */
int kv_peer_net_listen_port(const kv_peer_net *p, size_t i);

#endif
