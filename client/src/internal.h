/*
 * internal.h - private structures of libkvclient, shared by the files in client/src.
 *
 * Threading contract: everything below marked "loop" is touched only on the I/O thread of
 * the client's loop group. Fields marked "any" are atomics or protected by the named mutex.
 * Objects crossing threads (calls, keepalive handles) are reference counted.
 */
#ifndef KVC_INTERNAL_H
#define KVC_INTERNAL_H

#include "kvclient.h"
#include "common/list.h"
#include "idmap.h"
#include "sendbuf.h"

#include <nghttp2/nghttp2.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <time.h>
#include <uv.h>

#define KVC_DEFAULT_DIAL_TIMEOUT_MS 5000u
#define KVC_DEFAULT_MAX_PENDING 10000u
#define KVC_DEFAULT_KA_QUEUE_LEN 16u
#define KVC_DEFAULT_MAX_RESPONSE (64u * 1024u * 1024u)
#define KVC_DEFAULT_BACKOFF_BASE_MS 50u
#define KVC_DEFAULT_BACKOFF_MAX_MS 1000u
#define KVC_DEFAULT_KEEPALIVE_TIMEOUT_MS 20000u /* grpc-go's keepalive Timeout default */
#define KVC_DEFAULT_LEASE_TTL_MS 5000u
#define KVC_WRITE_HIGH_WATER (4u * 1024u * 1024u) /* bytes queued in libuv before we pause */
#define KVC_KA_SENDBUF_MAX (1u * 1024u * 1024u)   /* renewals waiting for the stream */
#define KVC_READBUF_SIZE (64u * 1024u)
#define KVC_WATCH_SENDBUF_MAX (4u * 1024u * 1024u) /* watch requests waiting for the stream */
#define KVC_MAX_ATTEMPTS_NO_DEADLINE 8

/* ---- loop group: one I/O thread, a command queue ---- */

enum kvc_cmd_type {
    CMD_OPEN,
    CMD_CALL,
    CMD_KA_ADD,
    CMD_KA_STOP,
    CMD_CLOSE,
    CMD_WATCH_ADD,
    CMD_WATCH_CANCEL,
    CMD_WATCH_PROGRESS,
    CMD_BIDI_OPEN,
    CMD_BIDI_KICK,
    CMD_BIDI_FREE,
    CMD_BIDI_FAILOVER,
    CMD_BIDI_RECV,
    CMD_CALL_CANCEL,
    CMD_FAILOVER
};

struct kvc_cmd {
    kv_list link; /* kvc_loop_group.cmds (mu) */
    int type;
    kvc_client *c;
    void *p;
    struct kvc_waiter *w; /* signalled after processing (may be NULL) */
};

/* A one-shot completion flag a caller thread waits on. Lives on the caller's stack. */
struct kvc_waiter {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
    int status;
    kvc_error err;
};
void kvc_waiter_init(struct kvc_waiter *w);
void kvc_waiter_wait(struct kvc_waiter *w);
void kvc_waiter_signal(struct kvc_waiter *w, int status, const kvc_error *err);
void kvc_waiter_destroy(struct kvc_waiter *w);
/* pthread_cond_init with CLOCK_MONOTONIC, for timed waits on kvc_deadline_after(). */
void kvc_cond_init_monotonic(pthread_cond_t *cv);
/* *ts = now + ms on CLOCK_MONOTONIC (an absolute pthread_cond_timedwait deadline). */
void kvc_deadline_after(struct timespec *ts, uint64_t ms);
/* A synchronous call's wait, with mu held: until *done, or (timeout_ms > 0) until the call's
 * deadline plus a 2 s grace has passed, when it sets *abandoned and returns. The I/O thread
 * enforces the deadline itself; the grace only guards against a stuck loop so that a caller
 * never waits forever. timeout_ms 0: no deadline. */
void kvc_wait_done(pthread_mutex_t *mu, pthread_cond_t *cv, const int *done, int *abandoned,
                   uint32_t timeout_ms);

struct kvc_loop_group {
    uv_loop_t loop;
    uv_async_t async;
    uv_thread_t thread;
    uv_thread_t tid; /* id of the I/O thread, for "am I on the loop" checks */
    pthread_mutex_t mu;
    kv_list cmds;                      /* kvc_cmd.link, FIFO (mu) */
    int stop;                          /* mu */
    uint8_t readbuf[KVC_READBUF_SIZE]; /* loop: shared by all connections of the group */
    uint8_t *scratch;                  /* loop: write coalescing buffer */
    size_t scratch_cap;
};

/* Post a command to the I/O thread (never blocks on the loop). */
/* From a thread other than g's I/O thread: fill cmd (type, c, p), post it to c's loop and
 * block until its handler has signalled; returns that status and, when nonzero, copies the
 * error to *err (err may be NULL). cmd is the caller's and must not be queued already. */
int kvc_loop_run_cmd(kvc_client *c, struct kvc_cmd *cmd, int type, void *p, kvc_error *err);
void kvc_loop_post(kvc_loop_group *g, struct kvc_cmd *cmd);
int kvc_loop_on_thread(const kvc_loop_group *g);

/* ---- gRPC helpers (grpc.c) ---- */

struct kvc_rbuf {
    uint8_t *p;
    size_t len, cap;
};
int kvc_rbuf_append(struct kvc_rbuf *b, const uint8_t *d, size_t n);
void kvc_rbuf_consume(struct kvc_rbuf *b, size_t n);
void kvc_rbuf_free(struct kvc_rbuf *b);

void kvc_set_err(kvc_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int kvc_fail(kvc_error *err, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void kvc_percent_decode(char *dst, size_t dstsz, const uint8_t *src, size_t n);
int kvc_http_to_grpc(int http_status);
int kvc_h2_error_to_grpc(uint32_t h2err);
uint64_t kvc_now_ms(void);

/* Common per-stream receive state (first member of calls and the keepalive stream). */
enum { STREAM_CALL = 1, STREAM_KA = 2, STREAM_WATCH = 3, STREAM_BIDI = 4 };
struct kvc_h2stream {
    int kind;
    int32_t id;
    int http_status;
    int grpc_status; /* -1 until seen */
    char grpc_message[256];
    struct kvc_rbuf rb;
    int nmsgs;
    int wire; /* request HEADERS frame went out */
    int bad;  /* framing/size error seen: code stored in grpc_status-like field below */
    int bad_code;
    char bad_msg[160];
};
/* Parse complete gRPC messages out of s->rb; calls on_msg for each; returns 0, or -1 when
 * the stream must be reset (s->bad set). */
int kvc_grpc_parse(struct kvc_h2stream *s, uint32_t max_msg,
                   void (*on_msg)(void *ctx, const uint8_t *m, size_t n), void *ctx);
/* Record a response header; returns 0. */
/* Reset the per-call response state before s is submitted again (shared streams). */
void kvc_grpc_stream_reset(struct kvc_h2stream *s);
void kvc_grpc_on_header(struct kvc_h2stream *s, const uint8_t *name, size_t namelen,
                        const uint8_t *value, size_t valuelen);
/* Final status of a stream closed with h2 error code h2err: returns the gRPC code and fills
 * msg. */
int kvc_grpc_final_status(const struct kvc_h2stream *s, uint32_t h2err, int got_msg, char *msg,
                          size_t msgsz);
/* 1 if the server refused the stream before processing it (RST_STREAM REFUSED_STREAM, no
 * grpc-status, RFC 7540 8.1.4): retried on the same connection (grpc-go's transparent retry);
 * it says nothing about the member's health, so it triggers no failover. */
int kvc_grpc_refused(const struct kvc_h2stream *s, uint32_t h2err);

/* ---- endpoints (endpoint.c) ---- */

struct kvc_endpoint {
    char text[256];      /* as configured, for messages */
    int tls;             /* https:// */
    char host[256];      /* host name or IP literal the server certificate must match */
    char authority[272]; /* host:port */
    struct sockaddr_storage addr;
};
int kvc_endpoint_parse(struct kvc_endpoint *ep, const char *s, kvc_error *err);

/* ---- TLS (conn_tls.c) ---- */
/* kvc_open: creates c->tls when an endpoint is https. 0 or a kvc_fail code. */
int kvc_tls_open(kvc_client *c, const kvc_config *cfg, kvc_error *err);
struct kvc_conn;
/* TCP connected to an https endpoint: cn->tls created, ClientHello queued. 0 or -errno. */
int kvc_tls_conn_start(struct kvc_conn *cn);
/* Ciphertext read: plaintext into nghttp2. 0, or -1 with the reason in why. */
int kvc_tls_conn_recv(struct kvc_conn *cn, const uint8_t *in, size_t len, char *why, size_t cap);

/* ---- calls (call.c) ---- */

/* Per-message callback of a server-streaming call (kvc_call_stream_async). Runs on the I/O
 * thread for each response message, in order; m is valid only during the call. Returns 0, or
 * -code with *err filled: the stream is then reset and the call fails with that code. */
typedef int (*kvc_stream_msg_cb)(void *arg, const uint8_t *m, size_t n, kvc_error *err);

enum kvc_call_state { CALL_QUEUED, CALL_WAITING, CALL_INFLIGHT, CALL_RETRY_WAIT, CALL_DONE };

/* A raw call's or stream's own gRPC metadata (kvc_call_md, copied): owned by its call. */
struct kvc_md {
    char *token;   /* NULL: the client's token (kvc_config.auth_token) */
    int hasleader; /* send "hasleader: true" */
};
/* Copy a caller's kvc_call_md (NULL: nothing to copy). 0 or -ENOMEM. */
int kvc_md_copy(struct kvc_md *dst, const kvc_call_md *src);
void kvc_md_free(struct kvc_md *md);

struct kvc_call {
    struct kvc_h2stream s; /* must be first */
    struct kvc_cmd cmd;
    kvc_client *c;
    char *path;
    uint8_t *req; /* framed: 5-byte prefix + message */
    size_t req_len, req_off;
    uint64_t deadline;      /* ms, 0 = none */
    uint64_t dial_deadline; /* ms: fail when still without a connection */
    int flags;
    int attempts;
    int state;        /* loop */
    int sent_any;     /* loop: request headers handed to the connection */
    kv_list link;     /* loop: the waiting, in-flight or retrying list */
    uv_timer_t timer; /* loop: deadline / retry timer; the call is freed in its close cb */
    uint64_t retry_at;
    uint8_t *resp;
    size_t resp_len;
    kvc_unary_cb cb;
    void *arg;
    kvc_stream_msg_cb on_msg; /* server-streaming call: every response message; NULL: unary */
    struct kvc_md md;
    /* kvc_call_unary_start / kvc_call_cancel: the call is reference counted (the loop's until
     * its timer is closed, the caller's handle until kvc_call_cancel) and freed at zero. */
    atomic_int refs;
    atomic_int completed; /* loop writes, any reads: 1 once finished (after its callback) */
    int cancelled;        /* loop: cancelled before its CMD_CALL ran */
    struct kvc_cmd ccmd;  /* CMD_CALL_CANCEL */
};

struct kvc_call_list {
    kv_list list; /* kvc_call.link, oldest first */
    size_t n;
};
void kvc_call_list_push(struct kvc_call_list *l, struct kvc_call *call);
void kvc_call_list_remove(struct kvc_call_list *l, struct kvc_call *call);
struct kvc_call *kvc_call_list_first(const struct kvc_call_list *l); /* NULL: empty */

/* Loop side of calls. */
void kvc_call_start(struct kvc_call *call); /* CMD_CALL arrived */
void kvc_calls_on_ready(kvc_client *c);     /* connection became usable */
void kvc_calls_on_conn_lost(kvc_client *c, const char *reason);
void kvc_calls_fail_all(kvc_client *c, int code, const char *msg);
void kvc_call_on_stream_close(struct kvc_call *call, uint32_t h2err);
void kvc_call_on_data(struct kvc_call *call, const uint8_t *d, size_t n);
/* CMD_CALL_CANCEL / kvc_call_cancel on the I/O thread: 1 if the call was dropped (its
 * callback will never run), 0 if it had already finished. */
int kvc_call_cancel_loop(struct kvc_call *call);
/* A server-streaming call: as kvc_call_unary_async, but every response message goes to
 * on_msg (memory: one message at a time, at most max_response_bytes) and done gets no
 * response (resp NULL). Never retried once a message was delivered: only a stream the server
 * refused or that never reached the wire is sent again. done runs exactly once. */
int kvc_call_stream_async(kvc_client *c, const char *method, const uint8_t *req, size_t req_len,
                          uint32_t timeout_ms, kvc_stream_msg_cb on_msg, kvc_unary_cb done,
                          void *arg, kvc_error *err);

/* ---- connection (conn.c) ---- */

enum kvc_conn_state { CS_IDLE, CS_CONNECTING, CS_READY, CS_BACKOFF, CS_CLOSED };

struct kvc_conn {
    kvc_client *c;
    uv_tcp_t tcp;
    uv_connect_t creq;
    nghttp2_session *h2;
    size_t write_pending;
    int dead;     /* torn down; waiting for close callbacks */
    int ready;    /* server SETTINGS received */
    int draining; /* GOAWAY received or failover requested: no new streams */
    int in_recv;  /* inside nghttp2_session_mem_recv */
    int got_bytes;
    char fail_reason[200];
    struct kv_tls_conn *tls; /* https endpoint: TLS between the socket and nghttp2 */
};

/* Ensure a connection exists or is being made (loop). */
void kvc_conn_demand(kvc_client *c);
/* Give up the current connection with reason (failover); loop. */
void kvc_conn_fail(kvc_client *c, const char *reason);
/* Stop using the current connection for new streams and switch once it is idle. */
void kvc_conn_drain(kvc_client *c, const char *reason);
/* Flush pending HTTP/2 output (loop). */
void kvc_conn_flush(kvc_client *c);
int kvc_conn_usable(const kvc_client *c);
/* Submit a request stream; returns stream id > 0 or a negative nghttp2 error. */
/* md: per-call metadata (NULL: the client's own token, no hasleader). */
int32_t kvc_conn_submit(kvc_client *c, const char *path, uint64_t deadline, const struct kvc_md *md,
                        nghttp2_data_source_read_callback rd, void *stream_user_data);
void kvc_conn_reset_stream(kvc_client *c, int32_t id, uint32_t h2err);
void kvc_conn_close_handles(kvc_client *c); /* kvc_close */
uint32_t kvc_backoff_ms(kvc_client *c, unsigned attempt);

/* ---- keepalive (keepalive.c) ---- */

struct kvc_keepalive {
    kvc_client *c;
    kvc_idmap_node hn; /* hn.id: the lease id; hn.next: loop, map chain */
    int64_t ttl_ms;
    uint64_t next_send; /* loop */
    uint64_t deadline;  /* loop */
    size_t heap_idx;    /* loop */
    int in_heap;        /* loop */
    int want_send;      /* loop: a renewal is due but the stream is down */
    uint64_t sent_at;   /* loop: when the unanswered renewal was written; 0 = none unanswered */
    int registered;     /* loop: in the map */
    kv_list alink;      /* loop: kvc_ka_sched.all while not stopped */
    kvc_keepalive_cb cb;
    void *arg;
    atomic_int refs;
    atomic_int lost;
    atomic_uint_least64_t dropped;
    pthread_mutex_t mu; /* queue */
    pthread_cond_t cv;
    kvc_ka_event *q;
    uint32_t qcap, qhead, qcount;
    int lost_read;
    struct kvc_cmd cmd;
};

struct kvc_ka_sched {
    struct kvc_keepalive **heap; /* min-heap on kvc_ka_key() */
    size_t n, cap;
    kvc_idmap map; /* lease id -> lease (registered ones) */
    size_t want_send;
    kv_list all;            /* kvc_keepalive.alink: every handle not yet stopped */
    uv_timer_t timer;       /* armed for the heap top */
    uv_timer_t retry_timer; /* reopen the stream after it failed */
    struct kvc_h2stream s;  /* the shared LeaseKeepAlive stream */
    int stream_open;
    unsigned stream_failures;
    struct kvc_sendbuf out; /* to the stream */
    uint64_t last_rx;       /* loop: last response on the stream (any lease) */
};

int kvc_ka_init(kvc_client *c); /* loop: handles */
int kvc_ka_add(kvc_client *c, struct kvc_keepalive *ka, kvc_error *err);
void kvc_ka_stop_loop(kvc_client *c, struct kvc_keepalive *ka);
void kvc_ka_on_ready(kvc_client *c);
void kvc_ka_on_conn_lost(kvc_client *c);
void kvc_ka_on_stream_close(kvc_client *c, uint32_t h2err);
void kvc_ka_on_data(kvc_client *c, const uint8_t *d, size_t n);
void kvc_ka_close_all(kvc_client *c); /* kvc_close */
void kvc_ka_unref(struct kvc_keepalive *ka);

/* ---- watch (watch.c) ---- */

enum kvc_watch_state { W_QUEUED, W_CREATING, W_ACTIVE, W_DONE };

struct kvc_watch {
    kvc_client *c;
    uint8_t *key, *end; /* owned copies */
    size_t key_len, end_len;
    kvc_watch_opts opts; /* range_end pointer cleared */
    kvc_watch_cb cb;
    void *arg;
    kvc_idmap_node hn;             /* loop: hn.id, the server watch id on the current
                                    * stream; hn.next, the id map chain */
    atomic_int_least64_t next_rev; /* loop writes, any reads: resume revision */
    int state;                     /* loop: enum kvc_watch_state */
    int user_cancelled;            /* loop */
    int created_once;              /* loop: the first ack was seen */
    kv_list qlink;                 /* loop: kvc_watch_sched.q, the create queue */
    kv_list alink;                 /* loop: kvc_watch_sched.all while not freed by the user */
    void **frags;                  /* loop: unpacked fragments of one response */
    size_t n_frags, frag_cap, frag_bytes;
    atomic_int refs;
    /* creation handshake with the creating thread */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int ack_done, ack_status;
    kvc_error ack_err;
    kvc_header ack_hdr;
    struct kvc_cmd cmd;  /* CMD_WATCH_ADD */
    struct kvc_cmd ccmd; /* CMD_WATCH_CANCEL */
};

struct kvc_watch_sched {
    struct kvc_h2stream s; /* the shared Watch stream */
    int stream_open;
    unsigned failures;
    uv_timer_t retry_timer;
    struct kvc_sendbuf out;     /* to the stream */
    kv_list all;                /* kvc_watch.alink: every live watcher */
    size_t n_live;              /* watchers not W_DONE: demand for the stream */
    kv_list q;                  /* kvc_watch.qlink: waiting to be (re)created, FIFO */
    struct kvc_watch *creating; /* create request sent, ack pending */
    kvc_idmap map;              /* server id -> watcher (W_ACTIVE) */
};

int kvc_watch_init(kvc_client *c); /* loop: handles */
void kvc_watch_add_loop(kvc_client *c, struct kvc_watch *w);
void kvc_watch_cancel_loop(kvc_client *c, struct kvc_watch *w);
int kvc_watch_progress_loop(kvc_client *c, kvc_error *err);
void kvc_watch_on_ready(kvc_client *c);
void kvc_watch_on_conn_lost(kvc_client *c);
void kvc_watch_on_stream_close(kvc_client *c, uint32_t h2err);
void kvc_watch_on_data(kvc_client *c, const uint8_t *d, size_t n);
void kvc_watch_close_all(kvc_client *c);  /* kvc_close */
void kvc_watch_free_sched(kvc_client *c); /* kvc_close, after the loop is done */

/* ---- raw bidi streams (bidi.c) ---- */

enum kvc_bidi_state { BIDI_NEW, BIDI_WAITING, BIDI_OPEN, BIDI_DONE };

struct kvc_bidi {
    struct kvc_h2stream s; /* must be first (kind STREAM_BIDI) */
    kvc_client *c;
    char *path;
    kvc_bidi_msg_cb on_msg;
    kvc_bidi_end_cb on_end;
    void *arg;
    size_t max_send;
    pthread_mutex_t mu;           /* out, kick_posted, ended */
    struct kvc_sendbuf out;       /* mu: framed requests not yet taken by nghttp2 */
    int kick_posted;              /* mu: kick_cmd is queued */
    int ended;                    /* mu: ended or freed: no more sends */
    int state;                    /* loop: enum kvc_bidi_state */
    struct kvc_bidi *prev, *next; /* loop: c->bidi.waiting or c->bidi.open, by state */
    atomic_int refs; /* caller, loop (until DONE), queued open, queued kick, delivery */
    struct kvc_cmd open_cmd, kick_cmd, free_cmd, fail_cmd, recv_cmd;
    struct kvc_md md;
    atomic_int want_paused; /* kvc_bidi_set_recv_paused's last request */
    int recv_paused;        /* loop: stream window not credited for received DATA */
    size_t recv_held;       /* loop: DATA bytes received while paused, not yet credited */
};

struct kvc_bidi_list {
    struct kvc_bidi *waiting, *open; /* loop: by state */
    size_t n_waiting, n_open;        /* loop */
};

void kvc_bidi_open_loop(kvc_client *c, struct kvc_bidi *b);
void kvc_bidi_kick_loop(kvc_client *c, struct kvc_bidi *b);
void kvc_bidi_free_loop(kvc_client *c, struct kvc_bidi *b);
void kvc_bidi_failover_loop(kvc_client *c, struct kvc_bidi *b);
void kvc_bidi_recv_loop(kvc_client *c, struct kvc_bidi *b);
void kvc_bidi_on_ready(kvc_client *c);
/* The connection is gone (kvc_conn_fail) or draining: every open stream ends UNAVAILABLE. */
void kvc_bidi_on_conn_lost(kvc_client *c, const char *reason);
void kvc_bidi_on_data(struct kvc_bidi *b, const uint8_t *d, size_t n);
void kvc_bidi_on_stream_close(struct kvc_bidi *b, uint32_t h2err);
void kvc_bidi_close_all(kvc_client *c); /* kvc_close: every stream ends CANCELLED */
void kvc_bidi_unref(struct kvc_bidi *b);

/* ---- client ---- */

struct kvc_client {
    kvc_loop_group *lg;
    int own_lg;
    kvc_config cfg;
    struct kvc_endpoint *eps;
    size_t n_eps;
    struct kv_tls_ctx *tls;        /* client TLS context when an endpoint is https (owned) */
    size_t ep_idx;                 /* loop */
    int state;                     /* loop: enum kvc_conn_state */
    struct kvc_conn *conn;         /* loop */
    uv_timer_t conn_timer;         /* loop: dial timeout and reconnect backoff */
    uv_timer_t ping_timer;         /* loop: keepalive pings (ping.c) */
    uint64_t ping_sent_at;         /* loop: uv_now of the unanswered PING, 0 = none */
    uint64_t last_ping_at;         /* loop: uv_now of the last PING sent, 0 = none yet */
    uint32_t ping_timeout;         /* loop: the unanswered PING's timeout (ms) */
    int ping_for_call;             /* loop: it was sent for a silent call (keepalive_call_ms) */
    uint64_t last_read_at;         /* loop: uv_now of the connection's last read */
    uint64_t unanswered_since;     /* loop: the first call sent after that read (ping.c) */
    unsigned backoff_attempt;      /* loop */
    char last_err[240];            /* loop */
    uint64_t rng;                  /* loop */
    struct kvc_call_list waiting;  /* loop: calls waiting for a usable connection */
    struct kvc_call_list inflight; /* loop: calls with a stream */
    struct kvc_call_list retrying; /* loop: calls waiting for their retry backoff */
    uint64_t ready_at;             /* loop: when the connection became ready */
    struct kvc_ka_sched ka;        /* loop */
    struct kvc_watch_sched wt;     /* loop */
    struct kvc_bidi_list bidi;     /* loop: raw streams (bidi.c) */
    int open_handles;              /* loop */
    int closing;                   /* loop */
    struct kvc_waiter *close_waiter;
    struct kvc_cmd open_cmd, close_cmd;
    atomic_uint pending; /* any: outstanding calls */
    struct {
        atomic_uint_least64_t renewals_sent, responses_received, responses_dropped, reconnects,
            leases_lost, leases_active, calls_started, calls_failed, calls_retried, queue_full,
            connects, ping_timeouts;
    } st;
    char auth_token[256];  /* kvc_config.auth_token ("" = none), sent as "token" */
    char server_name[256]; /* kvc_config.server_name ("" = each endpoint's host) */
};

/* ---- keepalive pings (ping.c) ---- */

#define KVC_MIN_KEEPALIVE_TIME_MS 10000u /* grpc-go's; members refuse pings under 5 s */

void kvc_ping_init(kvc_client *c);     /* loop_open: the timer handle */
void kvc_ping_on_ready(kvc_client *c); /* a connection became ready: arm (keepalive on) */
void kvc_ping_on_read(kvc_client *c);
/* A call went in flight on the current connection (keepalive_call_ms). */
void kvc_ping_on_call_sent(kvc_client *c); /* the connection read bytes */
void kvc_ping_stop(kvc_client *c);         /* the connection is gone */
void kvc_ping_close(kvc_client *c);        /* kvc_close: close the timer handle */

void kvc_client_handle_closed(kvc_client *c); /* a client handle's close cb ran */
void kvc_dispatch(struct kvc_cmd *cmd);       /* loop: run one command */
void kvc_handle_closed_cb(uv_handle_t *h);    /* close cb for handles whose data is the client */
#define KVC_STAT_INC(c, f) atomic_fetch_add_explicit(&(c)->st.f, 1, memory_order_relaxed)

#endif
