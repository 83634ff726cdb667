/*
 * grpc_internal.h - private structures shared by grpc_server.c (listener, timers, loop
 * integration), grpc_conn.c (socket I/O and nghttp2 session) and grpc_call.c (per-RPC state
 * and the kv_grpc_call_* API). Not part of the public API.
 *
 * Ownership: the server owns its connections (list `conns`), a connection owns its calls
 * (list `calls` while the stream is open, `zombies` once nghttp2 closed it). Calls are freed
 * by kv_grpc_conn_flush() (never inside nghttp2 or app callbacks) or in the connection's close
 * callback; connections only in their uv_close callback.
 */
#ifndef KV_GRPC_INTERNAL_H
#define KV_GRPC_INTERNAL_H

#include <nghttp2/nghttp2.h>
#include <uv.h>

#include "common/list.h"
#include "grpc/grpc_http1.h"
#include "grpc/grpc_io.h"
#include "grpc/grpc_server.h"
#include "grpc/grpc_wire.h"
#include "net/accept_gate.h"

#define KV_GRPC_READ_BUF 65536 /* one per server, shared by its connections (see alloc_cb) */
#define KV_GRPC_OUT_HIGH_WATER (256 * 1024) /* stop pulling from nghttp2 past this */
#define KV_GRPC_STREAM_WINDOW (1024 * 1024)
#define KV_GRPC_CONN_WINDOW (4 * 1024 * 1024)
#define KV_GRPC_MAX_PATH 1024
#define KV_GRPC_MAX_META_VALUE 4096
#define KV_GRPC_N_META 3            /* see kv_grpc_call_header() */
#define KV_GRPC_HOUSEKEEP_MS 250    /* period of the timeout / stall / cap scan */
#define KV_GRPC_STALL_GRACE_MS 1000 /* output without progress this long may be shed at the cap */
#define KV_GRPC_CLOSE_GRACE_MS 2000 /* a GOAWAY that cannot be written within this is dropped */
#define KV_GRPC_MAX_PING_STRIKES 2  /* grpc-go maxPingStrikes */
#define KV_GRPC_PING_NOSTREAM_MS (2ULL * 3600 * 1000) /* grpc-go defaultPingTimeout */

struct kv_grpc_call {
    kv_grpc_conn *conn;
    int32_t stream_id;
    const kv_grpc_method *method; /* NULL until routed / when rejected */
    int priority;                 /* method listed in cfg.priority_methods (route()) */
    char *path;                   /* :path copy (<= KV_GRPC_MAX_PATH) */
    char *content_type;           /* first 128 bytes, for error messages */
    char *bad_timeout;            /* malformed grpc-timeout value, if any */
    char *meta[KV_GRPC_N_META];   /* captured metadata values (kv_grpc_call_header) */
    unsigned saw_post : 1, saw_method : 1, path_too_long : 1;
    unsigned started : 1;       /* request headers complete and routed */
    unsigned app_owned : 1;     /* the app has seen this call */
    unsigned app_done : 1;      /* app finished it or got on_cancel */
    unsigned finished : 1;      /* final status queued */
    unsigned headers_sent : 1;  /* response HEADERS submitted */
    unsigned trailers_sent : 1; /* trailers submitted (non trailers-only) */
    unsigned remote_closed : 1; /* END_STREAM received */
    unsigned half_close_done : 1;
    unsigned stream_closed : 1;
    unsigned paused : 1;
    unsigned in_resume : 1;
    unsigned counted : 1;    /* requests_total incremented */
    unsigned reset : 1;      /* the transport reset the stream (RST_STREAM); outq dropped */
    unsigned cancel_due : 1; /* on_cancel owed, run from srv->cancel_due (never inside a send) */
    uint64_t deadline;
    uint64_t t_start_ns; /* uv_hrtime() when started (grpc_metrics.c); 0: not yet */
    int status;
    char *status_msg; /* percent-encoded */
    kv_grpc_deframer df;
    uint8_t *unary_msg;
    size_t unary_len;
    unsigned n_msgs;
    kv_grpc_buf in_pending; /* raw DATA held while paused, not yet consumed */
    size_t in_acct;         /* bytes accounted in conn->in_bytes */
    kv_grpc_buf outq;       /* framed response bytes not yet pulled by nghttp2 */
    uint64_t out_progress;  /* uv_now() when outq last became non-empty or was pulled from */
    size_t app_held;        /* unary request bytes handed to the app and not yet answered */
    void *data;
    kv_list link;    /* conn->calls or conn->zombies */
    kv_list dl_link; /* srv->deadlines while in_dl */
    int in_dl;
    kv_list resume_link; /* conn->resume while in_resume */
    kv_list cancel_link; /* srv->cancel_due while cancel_due */
    /* (client port HTTP/1, grpc_http1.h) a local call: responses go to the sink */
    const struct kv_grpc_local_sink *local;
    void *local_arg;
    /* (client port, grpc_h2raw.c) a stream that is not gRPC, served by the HTTP/1 handler */
    struct kv_grpc_raw *raw;
    char raw_method[16]; /* :method, kept until the stream is known to be raw */
};

struct kv_grpc_conn {
    kv_grpc_server *srv;
    uint64_t id;
    uv_tcp_t tcp;
    uv_write_t wreq;
    nghttp2_session *h2;
    const kv_grpc_io_ops *io_ops;
    void *io;
    kv_grpc_buf out;  /* wire bytes waiting for the next write */
    kv_grpc_buf wbuf; /* wire bytes of the write in flight */
    int writing;
    size_t out_app_bytes; /* sum of calls' outq sizes */
    size_t in_bytes;      /* sum of calls' in_acct */
    kv_list calls;        /* kv_grpc_call.link, newest first */
    kv_list zombies;      /* kv_grpc_call.link, newest first */
    kv_list resume;       /* kv_grpc_call.resume_link, newest first */
    size_t n_calls;
    unsigned closing : 1, close_after_write : 1, dirty : 1, ping_outstanding : 1, read_stopped : 1;
    unsigned got_request : 1;   /* a request's headers completed on this connection */
    unsigned gated : 1;         /* outbound over max_send_buffer_bytes: no request delivery */
    unsigned saturated : 1;     /* input budget reached: no new unary request admitted until held
                                   input drops under half the budget */
    unsigned reset_strikes : 1; /* we sent HEADERS/DATA since the last PING (grpc-go) */
    unsigned in_hs : 1, in_idle : 1; /* member of srv->hs / srv->idle_conns */
    unsigned ping_strikes;
    uint64_t accepted_at;    /* uv_now() at accept */
    uint64_t idle_since;     /* uv_now() when the last call ended */
    uint64_t wire_progress;  /* uv_now() when a write was started from idle or completed */
    uint64_t ping_sent_at;   /* uv_now() of our outstanding keepalive PING */
    uint64_t last_ping_recv; /* uv_now() of the peer's last PING, 0 = none */
    uint64_t close_at;       /* nonzero: close by then even if the GOAWAY is not written */
    uint64_t last_delivery;  /* uv_now() when a request message last reached the app */
    size_t owed;             /* DATA bytes received, not yet credited to the connection window */
    size_t acct;             /* bytes this connection counts in srv->buffered */
    kv_list fifo_link;       /* srv->hs or srv->idle_conns (oldest first) */
    kv_list link;            /* srv->conns */
    kv_list dirty_link;      /* srv->dirty */
    kv_list hk_link;         /* srv->watched (empty link: on no list) */
    /* (client port HTTP/1, grpc_http1.h) protocol detection and the HTTP/1 handler's state */
    void *http1;     /* non-NULL: an HTTP/1.x connection (no nghttp2 traffic) */
    uint8_t pre[24]; /* first bytes while they still match the HTTP/2 preface */
    uint8_t npre;
    unsigned detected : 1;
    /* non-NULL: not a socket but the pseudo connection of one HTTP/2 stream that is not
     * gRPC (grpc_h2raw.c); kv_grpc_http1_* calls on it go to that stream */
    kv_grpc_call *raw_call;
};

/* A FIFO of connections (kv_grpc_conn.fifo_link, oldest first). */
typedef struct kv_grpc_conn_list {
    kv_list list;
    size_t n;
} kv_grpc_conn_list;

struct kv_grpc_server {
    uv_loop_t *loop;
    kv_grpc_config cfg;
    const kv_grpc_method *methods;
    size_t n_methods;
    void *app;
    kv_metrics *metrics;
    uv_tcp_t listener;
    kv_accept_gate accept_gate; /* at most KV_ACCEPT_BURST accepts per loop iteration */
    int listening;
    uv_idle_t idle;
    uv_timer_t deadline_timer;
    uv_timer_t ping_timer;
    uv_timer_t housekeep_timer;
    uint8_t *rbuf;        /* KV_GRPC_READ_BUF bytes shared by every connection's reads */
    size_t buffered;      /* sum of connections' acct (in + out bytes) */
    size_t app_held;      /* sum of calls' app_held: requests the app is still answering */
    int app_full;         /* app_held reached max_pending_request_bytes: unary delivery waits */
    size_t n_closing;     /* connections closed but not yet freed */
    kv_grpc_conn_list hs; /* connections that never completed a request header block */
    kv_grpc_conn_list idle_conns; /* connections with requests before and no call now */
    int open_handles;             /* server-level handles not yet closed */
    size_t n_rejecting;           /* over-limit sockets being closed */
    kv_list conns;                /* kv_grpc_conn.link, newest first */
    size_t n_conns;
    uint64_t next_conn_id;
    kv_list dirty;      /* kv_grpc_conn.dirty_link, newest first */
    kv_list watched;    /* kv_grpc_conn.hk_link: what the housekeeping scan looks at */
    kv_list deadlines;  /* kv_grpc_call.dl_link, newest first */
    kv_list cancel_due; /* kv_grpc_call.cancel_link, oldest first: on_cancel still owed */
    int closing;
    void (*close_cb)(void *);
    void *close_arg;
    nghttp2_session_callbacks *cbs;
    nghttp2_option *opt;
    kv_metric *m_conn_open, *m_conn_total, *m_streams_open;
    kv_metric *m_ref_oversized, *m_ref_streams, *m_ref_conn, *m_ref_sendbuf, *m_ref_recvbuf;
    kv_metric *m_ref_resp_size, *m_ref_cap_send, *m_ref_cap_recv;
    kv_metric *m_close_handshake, *m_close_idle, *m_close_evicted, *m_close_pings,
        *m_close_ping_timeout, *m_close_stalled;
    kv_metric *m_reset_stalled, *m_reset_cap, *m_reset_undeliverable;
    kv_metric *m_gated_total, *m_window_withheld, *m_watched;
    struct kv_grpc_mm *mm; /* n_methods + 1 (unknown) per-method series (grpc_metrics.c) */
    kv_metric *m_grpc_sent, *m_grpc_recv;
    const struct kv_grpc_http1_ops *http1_ops; /* grpc_http1.h; NULL: HTTP/2 only */
    void *http1_arg;
};

/* grpc_server.c */
void kv_grpc_srv_mark_dirty(kv_grpc_conn *c);
/* Runs the server's idle pass on the next loop turn (owed on_cancels, dirty connections);
 * a no-op once the server closes (closing connections run what they owe). */
void kv_grpc_srv_wake(kv_grpc_server *s);
void kv_grpc_srv_unmark_dirty(kv_grpc_conn *c);
/* Puts a connection on the housekeeping scan's list. Call it wherever one of the states the
 * scan times out becomes true: close_at set, a keepalive PING outstanding, a write in flight
 * (writing), answer bytes queued (out_app_bytes), window withheld (owed), saturated. The scan
 * takes a connection off once none holds, so it visits the connections with work pending,
 * not every open one (an idle agent's connection costs nothing between its requests). */
void kv_grpc_srv_watch(kv_grpc_conn *c);
void kv_grpc_srv_unwatch(kv_grpc_conn *c); /* off the list (no-op if not on it) */
void kv_grpc_srv_deadline_add(kv_grpc_call *call);
void kv_grpc_srv_deadline_remove(kv_grpc_call *call);
void kv_grpc_srv_conn_freed(kv_grpc_server *s);
void kv_grpc_srv_count_request(kv_grpc_server *s, kv_grpc_call *call, int status);
/* grpc_metrics.c (etcd's gRPC series; docs/metrics.md) */
int kv_grpc_metrics_init(kv_grpc_server *s);
void kv_grpc_metrics_free(kv_grpc_server *s);
/* The call was routed (or refused): counts grpc_server_started_total once, starts its clock. */
void kv_grpc_metrics_started(kv_grpc_call *call);
/* The call's final status: grpc_server_handled_total and grpc_server_handling_seconds. */
void kv_grpc_metrics_handled(kv_grpc_call *call, int status);
void kv_grpc_metrics_bytes(kv_grpc_server *s, size_t sent, size_t received);
void kv_grpc_list_push(kv_grpc_conn_list *l, kv_grpc_conn *c);
void kv_grpc_list_remove(kv_grpc_conn_list *l, kv_grpc_conn *c);
/* Process-wide cap: resets stalled outbound streams (largest first) until need more bytes
 * fit under max_buffered_bytes; skip is never chosen. Returns 1 if they fit. */
int kv_grpc_srv_make_room(kv_grpc_server *s, size_t need, kv_grpc_call *skip);
/* Over the cap because of inbound bytes: fails the largest partially received calls. */
void kv_grpc_srv_shed_inbound(kv_grpc_server *s);

/* grpc_conn.c */
/* Allocates a connection and inits its TCP handle (then always released via uv_close). */
int kv_grpc_conn_start(kv_grpc_server *s, kv_grpc_conn **out);
/* After uv_accept: creates the nghttp2 session, sends SETTINGS, starts reading. */
int kv_grpc_conn_begin(kv_grpc_conn *c);
/* Fills m with the allocator of the connections' nghttp2 sessions (grpc_h2mem.c: large
 * buffers on pages of their own, resident only once written) and returns it. */
nghttp2_mem *kv_grpc_h2_mem(nghttp2_mem *m);
void kv_grpc_conn_flush(kv_grpc_conn *c);
void kv_grpc_conn_close(kv_grpc_conn *c);
/* Best-effort GOAWAY (written now if the socket takes it), then close. */
void kv_grpc_conn_goaway_close(kv_grpc_conn *c, uint32_t error_code, const char *debug);
/* Recomputes c's buffered bytes into srv->buffered, the output gate and the window credit. */
void kv_grpc_conn_sync(kv_grpc_conn *c);
/* Credits n received bytes to the connection window (now, or once buffers drain). */
void kv_grpc_conn_credit(kv_grpc_conn *c, size_t n);
/* Sheds partial requests furthest from completion: until the withheld window can be credited
 * (until_unsaturated 0: the peer's window is used up), or (1: saturated and nothing delivered
 * lately, from housekeeping; unary requests only) until admission reopens. */
void kv_grpc_conn_relieve(kv_grpc_conn *c, int until_unsaturated);
int kv_grpc_session_callbacks(nghttp2_session_callbacks **out);

/* grpc_tls.c */
/* After accept on a TLS listener (cfg.tls): switches c's I/O to TLS. Returns 0 or -ENOMEM. */
int kv_grpc_tls_attach(kv_grpc_conn *c);
/* grpc_local.c (grpc_http1.h) */
/* First plaintext bytes of a connection: detects HTTP/2 vs HTTP/1 and routes them. */
int kv_grpc_http1_detect(kv_grpc_conn *c, const uint8_t *in, size_t len);
int kv_grpc_local_send(kv_grpc_call *call, const uint8_t *msg, size_t len);
int kv_grpc_local_finish(kv_grpc_call *call, int status, const char *msg);

/* grpc_h2raw.c (grpc_http1.h "HTTP/2 streams that are not gRPC") */
typedef struct kv_grpc_raw kv_grpc_raw;
/* The request headers are complete and not gRPC: opens the handler for this stream. 0 or
 * -ENOMEM. */
int kv_grpc_raw_start(kv_grpc_call *call);
void kv_grpc_raw_set_method(kv_grpc_call *call, const uint8_t *v, size_t n);
void kv_grpc_raw_on_data(kv_grpc_call *call, const uint8_t *data, size_t len);
/* END_STREAM: the whole request goes to the handler. */
void kv_grpc_raw_on_remote_close(kv_grpc_call *call);
/* The stream or its connection is gone: the handler's state is closed (idempotent). */
void kv_grpc_raw_release(kv_grpc_call *call);
void kv_grpc_raw_free(kv_grpc_call *call);
/* Request body bytes held (counted in the connection's input). */
size_t kv_grpc_raw_held(const kv_grpc_call *call);
/* The handler's output on the pseudo connection (kv_grpc_http1_write / _end). */
int kv_grpc_raw_write(kv_grpc_call *call, const void *data, size_t len);
void kv_grpc_raw_end(kv_grpc_call *call);

/* grpc_call.c */
/* nghttp2's data provider callback for a call's outq. */
ssize_t kv_grpc_call_data_source_read(nghttp2_session *session, int32_t stream_id, uint8_t *buf,
                                      size_t length, uint32_t *data_flags,
                                      nghttp2_data_source *source, void *user_data);
kv_grpc_call *kv_grpc_call_new(kv_grpc_conn *c, int32_t stream_id);
void kv_grpc_call_free(kv_grpc_call *call);
int kv_grpc_call_on_header(kv_grpc_call *call, const uint8_t *name, size_t nlen,
                           const uint8_t *value, size_t vlen);
void kv_grpc_call_on_headers_done(kv_grpc_call *call);
void kv_grpc_call_on_data(kv_grpc_call *call, const uint8_t *data, size_t len);
void kv_grpc_call_on_remote_close(kv_grpc_call *call);
void kv_grpc_call_on_stream_close(kv_grpc_call *call);
void kv_grpc_call_on_conn_close(kv_grpc_call *call);
void kv_grpc_call_process_pending(kv_grpc_call *call);
/* Transport-initiated end: on_cancel (if the app owns the call) then the status. */
void kv_grpc_call_fail(kv_grpc_call *call, int status, const char *msg);
ssize_t kv_grpc_call_read_data(kv_grpc_call *call, uint8_t *buf, size_t length,
                               uint32_t *data_flags);
void kv_grpc_call_account(kv_grpc_call *call);
/* Transport-initiated RST_STREAM (error_code): on_cancel if the app owns the call, outq and
 * held input dropped. metric (may be NULL) is incremented. */
void kv_grpc_call_reset(kv_grpc_call *call, uint32_t error_code, kv_metric *metric);
/* As kv_grpc_call_reset, but the app's on_cancel runs later, from the server's idle pass (or
 * when the stream or the connection closes, whichever comes first), never from here: this is
 * the reset another call's send makes (kv_grpc_srv_make_room), and the app that is sending
 * may be walking objects the victim's on_cancel frees (a watch hub's watcher set). Until
 * then the victim's sends fail (-EINVAL), as after any reset. */
void kv_grpc_call_reset_deferred(kv_grpc_call *call, uint32_t error_code, kv_metric *metric);
/* Runs the on_cancel a deferred reset owes (a no-op when none is owed). */
void kv_grpc_call_run_due_cancel(kv_grpc_call *call);
/* Bytes of partially received messages (deframer + unary body not yet delivered + a raw
 * stream's body until END_STREAM). */
size_t kv_grpc_call_partial_bytes(const kv_grpc_call *call);
/* Streams on c that hold input only because c is gated: queue them for delivery. */
void kv_grpc_conn_ungate(kv_grpc_conn *c);
/* Sets call->app_held (and the server's sum); reopens unary delivery when the app drains. */
void kv_grpc_call_set_app_held(kv_grpc_call *call, size_t n);

#endif
