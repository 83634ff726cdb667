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

#include "grpc/grpc_io.h"
#include "grpc/grpc_server.h"
#include "grpc/grpc_wire.h"

#define KV_GRPC_READ_BUF 65536
#define KV_GRPC_OUT_HIGH_WATER (256 * 1024) /* stop pulling from nghttp2 past this */
#define KV_GRPC_STREAM_WINDOW (1024 * 1024)
#define KV_GRPC_CONN_WINDOW (4 * 1024 * 1024)
#define KV_GRPC_MAX_PATH 1024
#define KV_GRPC_MAX_META_VALUE 4096
#define KV_GRPC_N_META 3 /* see kv_grpc_call_header() */

struct kv_grpc_call {
    kv_grpc_conn *conn;
    int32_t stream_id;
    const kv_grpc_method *method; /* NULL until routed / when rejected */
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
    unsigned counted : 1; /* requests_total incremented */
    uint64_t deadline;
    int status;
    char *status_msg; /* percent-encoded */
    kv_grpc_deframer df;
    uint8_t *unary_msg;
    size_t unary_len;
    unsigned n_msgs;
    kv_grpc_buf in_pending; /* raw DATA held while paused, not yet consumed */
    size_t in_acct;         /* bytes accounted in conn->in_bytes */
    kv_grpc_buf outq;       /* framed response bytes not yet pulled by nghttp2 */
    void *data;
    kv_grpc_call *next, *prev; /* conn->calls or conn->zombies */
    kv_grpc_call *dl_next, *dl_prev;
    int in_dl;
    kv_grpc_call *resume_next;
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
    kv_grpc_call *calls;
    kv_grpc_call *zombies;
    kv_grpc_call *resume_head;
    size_t n_calls;
    unsigned closing : 1, close_after_write : 1, dirty : 1, ping_outstanding : 1, read_stopped : 1;
    kv_grpc_conn *next, *prev;             /* srv->conns */
    kv_grpc_conn *dirty_next, *dirty_prev; /* srv->dirty */
    uint8_t rbuf[KV_GRPC_READ_BUF];
};

struct kv_grpc_server {
    uv_loop_t *loop;
    kv_grpc_config cfg;
    const kv_grpc_method *methods;
    size_t n_methods;
    void *app;
    kv_metrics *metrics;
    uv_tcp_t listener;
    int listening;
    uv_idle_t idle;
    uv_timer_t deadline_timer;
    uv_timer_t ping_timer;
    int open_handles;   /* server-level handles not yet closed */
    size_t n_rejecting; /* over-limit sockets being closed */
    kv_grpc_conn *conns;
    size_t n_conns;
    uint64_t next_conn_id;
    kv_grpc_conn *dirty;
    kv_grpc_call *dl_head;
    int closing;
    void (*close_cb)(void *);
    void *close_arg;
    nghttp2_session_callbacks *cbs;
    nghttp2_option *opt;
    kv_metric *m_conn_open, *m_conn_total, *m_streams_open;
    kv_metric *m_ref_oversized, *m_ref_streams, *m_ref_conn, *m_ref_sendbuf, *m_ref_recvbuf;
};

/* grpc_server.c */
void kv_grpc_srv_mark_dirty(kv_grpc_conn *c);
void kv_grpc_srv_unmark_dirty(kv_grpc_conn *c);
void kv_grpc_srv_deadline_add(kv_grpc_call *call);
void kv_grpc_srv_deadline_remove(kv_grpc_call *call);
void kv_grpc_srv_conn_freed(kv_grpc_server *s);
void kv_grpc_srv_count_request(kv_grpc_server *s, const kv_grpc_method *m, int status);

/* grpc_conn.c */
/* Allocates a connection and inits its TCP handle (then always released via uv_close). */
int kv_grpc_conn_start(kv_grpc_server *s, kv_grpc_conn **out);
/* After uv_accept: creates the nghttp2 session, sends SETTINGS, starts reading. */
int kv_grpc_conn_begin(kv_grpc_conn *c);
void kv_grpc_conn_flush(kv_grpc_conn *c);
void kv_grpc_conn_close(kv_grpc_conn *c);
int kv_grpc_session_callbacks(nghttp2_session_callbacks **out);

/* grpc_call.c */
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

#endif
