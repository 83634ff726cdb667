/*
 * kvclient.h - libkvclient, the embeddable C client of kvd (wire-compatible with etcd v3).
 *
 * Contract
 * --------
 * - One kvc_client holds ONE HTTP/2 connection at a time (gRPC, h2c prior knowledge) and
 *   multiplexes every unary call and every stream from any number of threads over it.
 * - Each client is driven by an I/O thread running a libuv loop: its own thread by default,
 *   or a thread shared with other clients through a kvc_loop_group (kvc_config.loop_group),
 *   so that thousands of clients (each with its own connection) do not need thousands of
 *   threads. The I/O threads block SIGPIPE: a server that vanishes mid-write is an error on
 *   that connection, never a signal to the application, whose own disposition is untouched.
 * - Caller threads hand requests to the I/O thread through a bounded queue
 *   (kvc_config.max_pending outstanding calls per client). A full queue fails the call at
 *   once with KVC_RESOURCE_EXHAUSTED, "kvclient: request queue full"; nothing blocks forever.
 * - Every call takes a deadline (timeout_ms; 0 = none, then only the dial timeout bounds the
 *   wait for a connection). It is sent to the server as grpc-timeout.
 * - Failover: when the connection drops, or a call fails with UNAVAILABLE or
 *   "etcdserver: no leader", the client moves to the next endpoint after an exponential
 *   backoff with jitter. Only idempotent calls are retried (reads, keepalives, calls marked
 *   KVC_IDEMPOTENT); a put is never silently applied twice.
 * - Lease keepalives: all leases of a client share ONE LeaseKeepAlive stream. The next
 *   renewal of a lease is sent TTL/3 after the last response for it (or TTL/3 after the last
 *   send if no response came), never sooner, whatever the consumer does (except once on a
 *   new stream after a failover, for a renewal left unanswered on the lost one). A member
 *   that leaves renewals unanswered for TTL/3 with nothing else answered is given up. A slow
 * consumer's queue keeps only the newest responses and counts the dropped ones.
 *
 * Errors: every int-returning function returns 0 on success or a negative status
 * -KVC_<code>, where the code is a gRPC status code (so -KVC_UNAVAILABLE == -14).
 * Local failures are mapped onto gRPC codes too (bad argument: INVALID_ARGUMENT; out of
 * memory: RESOURCE_EXHAUSTED; full queue: RESOURCE_EXHAUSTED; no connection: UNAVAILABLE).
 * When `err` is non-NULL it is filled with the code and a message (etcd's grpc-message
 * verbatim, e.g. "etcdserver: requested lease not found", or a local "kvclient: ..." text).
 * `err` may always be NULL.
 *
 * Threads: unless stated otherwise every function taking a kvc_client is thread-safe.
 * Callbacks (async results, keepalive events) run on the client's I/O thread: they must
 * return quickly, must not call synchronous kvc_ functions on the same client or loop group
 * (that would deadlock; the library detects it and fails the call with KVC_FAILED_PRECONDITION)
 * but may call the *_async functions and kvc_keepalive_stop().
 *
 * Memory: results returned through `out` parameters are owned by the caller and released
 * with the matching *_free function; byte pointers inside a result stay valid until then.
 * Input buffers are copied before the call returns; the caller keeps ownership of them.
 */
#ifndef KVCLIENT_H
#define KVCLIENT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Public functions are exported from the shared library; everything else is hidden. */
#if defined(__GNUC__)
#define KVC_API __attribute__((visibility("default")))
#else
#define KVC_API
#endif

#define KVC_VERSION_MAJOR 0
#define KVC_VERSION_MINOR 1
#define KVC_VERSION_PATCH 0

/* gRPC status codes, used as (negated) return values and in kvc_error.code. */
enum kvc_code {
    KVC_OK = 0,
    KVC_CANCELLED = 1,
    KVC_UNKNOWN = 2,
    KVC_INVALID_ARGUMENT = 3,
    KVC_DEADLINE_EXCEEDED = 4,
    KVC_NOT_FOUND = 5,
    KVC_ALREADY_EXISTS = 6,
    KVC_PERMISSION_DENIED = 7,
    KVC_RESOURCE_EXHAUSTED = 8,
    KVC_FAILED_PRECONDITION = 9,
    KVC_ABORTED = 10,
    KVC_OUT_OF_RANGE = 11,
    KVC_UNIMPLEMENTED = 12,
    KVC_INTERNAL = 13,
    KVC_UNAVAILABLE = 14,
    KVC_DATA_LOSS = 15,
    KVC_UNAUTHENTICATED = 16,
};

typedef struct kvc_client kvc_client;
typedef struct kvc_loop_group kvc_loop_group;
typedef struct kvc_keepalive kvc_keepalive;
typedef struct kvc_txn kvc_txn;

typedef struct kvc_error {
    int code;          /* gRPC status code (0 OK, 4 DEADLINE_EXCEEDED, 14 UNAVAILABLE ...) */
    char message[256]; /* grpc-message (percent-decoded) or a local "kvclient: ..." text */
} kvc_error;

typedef struct kvc_config {
    const char *const *endpoints; /* "127.0.0.1:2379", "http://host:port", "host:port",
                                     "[::1]:2379"; copied by kvc_open */
    size_t n_endpoints;
    uint32_t dial_timeout_ms;     /* default 5000: how long a call waits for a connection */
    uint32_t max_pending;         /* outstanding calls per client (queued + in flight);
                                     default 10000 */
    uint32_t keepalive_queue_len; /* per-lease response queue length; default 16 */
    /* Extensions (set by kvc_config_default; zero means "default"). */
    kvc_loop_group *loop_group;  /* NULL: the client starts its own I/O thread. Otherwise
                                    it runs on the group's thread (must outlive the client) */
    uint32_t max_response_bytes; /* largest gRPC message accepted; default 64 MiB */
    uint32_t backoff_base_ms;    /* first reconnect delay; default 50 */
    uint32_t backoff_max_ms;     /* reconnect delay cap; default 1000 */
    uint64_t seed;               /* jitter PRNG seed; 0 = derived from time and address */
    /* TLS, used for "https://host:port" endpoints (ALPN h2, TLS 1.2/1.3; the
     * server certificate must match the endpoint's host). Strings are copied by kvc_open. */
    const char *ca_file;      /* PEM CA bundle for server certificates; NULL: system store */
    const char *cert_file;    /* client certificate (mutual TLS); NULL: none */
    const char *key_file;     /* its private key */
    int insecure_skip_verify; /* 1: do not verify the server certificate (testing only) */
    /* etcd auth token sent as the "token" metadata of every call
     * (from an Authenticate call); NULL: none. Copied by kvc_open (at most 255 bytes). */
    const char *auth_token;
    /* HTTP/2 keepalive pings (clientv3's DialKeepAliveTime / DialKeepAliveTimeout, etcdctl's
     * --keepalive-time / --keepalive-timeout), so a hung member (stopped, silent, a half-open
     * connection) is left: after keepalive_time_ms without reading anything while a call or
     * stream is open, a PING goes out; when nothing at all comes back within
     * keepalive_timeout_ms the connection is given up as if it dropped (its streams end or
     * move, the client tries its next endpoint; kvc_stats.ping_timeouts). 0 = off (the
     * default, as clientv3). Below 10000 it is raised to 10000, as grpc-go does: members
     * refuse pings closer than their --grpc-keepalive-min-time (5 s) with GOAWAY
     * too_many_pings. */
    uint32_t keepalive_time_ms;
    uint32_t keepalive_timeout_ms; /* with keepalive_time_ms; default 20000 (grpc-go) */
    /* (addition) A sooner check for a caller that forwards other clients' calls (kvd
     * grpc-proxy): once calls are in flight and nothing at all was read on the connection for
     * keepalive_call_ms since a call was sent (one cancelled meanwhile counts), a PING goes
     * out at once; when neither
     * its ack nor any other byte comes back within keepalive_call_ms more, the connection is
     * given up as above (kvc_stats.ping_timeouts). A member that is alive acks the PING even
     * while a call waits (a Lock, an election), so a slow call is never cut. At most one PING
     * per 10 s, as for keepalive_time_ms. 0 = off (the default). Independent of
     * keepalive_time_ms. */
    uint32_t keepalive_call_ms;
    /* (addition) The name every https:// endpoint's certificate must match, and the SNI sent
     * (grpc-go's ServerName; etcdctl sets it to the --discovery-srv domain when it does not
     * accept insecure discovery). NULL: each endpoint's own host. Copied by kvc_open (at most
     * 255 bytes). */
    const char *server_name;
} kvc_config;

/* Fill *cfg with defaults (no endpoints). Thread-safe, no allocation. */
KVC_API void kvc_config_default(kvc_config *cfg);

/*
 * Create a client. Validates, copies and resolves the endpoints (host names are resolved once,
 * here, with a blocking getaddrinfo; a malformed or unresolvable endpoint fails with
 * KVC_INVALID_ARGUMENT naming it), starts the I/O thread (or joins cfg->loop_group) and
 * starts connecting to the first endpoint EAGERLY in the background; kvc_open does not wait
 * for the connection. Calls made before it is up wait for it (bounded by dial_timeout_ms
 * and their own deadline); a failed connection is reported by those calls as
 * KVC_UNAVAILABLE with the reason (refused, closed by peer, "server speaks HTTP/1.1", ...).
 * On success *out owns the client; release it with kvc_close(). On failure *out is NULL.
 */
KVC_API int kvc_open(kvc_client **out, const kvc_config *cfg, kvc_error *err);

/*
 * Close the connection, fail every pending call with KVC_CANCELLED (their callbacks run
 * before kvc_close returns), stop and free any keepalive handle still running (its pointer
 * becomes invalid; no further events are delivered), stop the I/O thread if the client owns
 * it, and free the client. Must not be called from a callback (I/O thread) nor concurrently
 * with other calls on the same client. c may be NULL.
 */
KVC_API void kvc_close(kvc_client *c);

/* (addition) Leave the current connection for the next endpoint, as libkvclient does itself
 * after an answer UNAVAILABLE or "no leader": calls in flight on it are answered there, raw
 * streams on it end (their owners open them again), the watch and keepalive streams move, and
 * new calls go to the next endpoint. A lease kept alive does not wait for those calls: when
 * its next renewal is due the old connection goes at once (its idempotent calls are retried
 * on the next endpoint, the others end -KVC_UNAVAILABLE). For a caller that finds the
 * member unfit by its answers (e.g. a revision older than one already seen: kvd grpc-proxy's
 * --experimental-serializable-ordering). reason (NULL: a default) appears in the ended
 * streams' status. A no-op with one endpoint, no connection, or one already being left.
 * Thread-safe, not from a callback of another client; from a thread other than the I/O
 * thread it waits for the I/O thread to act. */
KVC_API void kvc_failover(kvc_client *c, const char *reason);

/* ---- loop groups: many clients, one I/O thread ---- */

/* Start an I/O thread that clients opened with cfg.loop_group = *out share. Each client
 * still has its own connection. Free with kvc_loop_group_free() after closing all clients
 * that use it. Thread-safe. */
KVC_API int kvc_loop_group_new(kvc_loop_group **out, kvc_error *err);
/* Stop the thread and free the group. Precondition: no client uses it any more. */
KVC_API void kvc_loop_group_free(kvc_loop_group *g);

/* ---- raw unary calls ---- */

#define KVC_IDEMPOTENT 1 /* flag: safe to retry on another endpoint / connection */

/*
 * Synchronous unary call of a gRPC method ("/etcdserverpb.KV/Range") with a packed protobuf
 * request. On 0: *resp is a malloc'd packed response the caller frees with kvc_free()
 * (*resp may be NULL when resp_len is 0). On error: returns -code and fills err.
 * Thread-safe. timeout_ms 0 = no deadline (sent as grpc-timeout when non-zero).
 * Only KVC_IDEMPOTENT calls are retried on another endpoint.
 */
KVC_API int kvc_call_unary(kvc_client *c, const char *method, const uint8_t *req, size_t req_len,
                           uint8_t **resp, size_t *resp_len, uint32_t timeout_ms, int flags,
                           kvc_error *err);

/* Async completion of a raw call: on success status 0, err NULL and resp/resp_len the
 * packed response, now owned by the callback (kvc_free it). On failure status -code,
 * err describes it and resp is NULL. Runs on the I/O thread exactly once. */
typedef void (*kvc_unary_cb)(void *arg, int status, const kvc_error *err, uint8_t *resp,
                             size_t resp_len);

/* Asynchronous form of kvc_call_unary. Returns 0 when queued (cb will run exactly once), or
 * -code without calling cb (e.g. queue full). Thread-safe; callable from callbacks. */
KVC_API int kvc_call_unary_async(kvc_client *c, const char *method, const uint8_t *req,
                                 size_t req_len, uint32_t timeout_ms, int flags, kvc_unary_cb cb,
                                 void *arg, kvc_error *err);

/* A raw call's own gRPC metadata, for a caller that relays other clients' calls (kvd
 * grpc-proxy). Copied at submission. */
typedef struct kvc_call_md {
    /* etcd's "token" metadata for this call only; NULL: the client's own
     * (kvc_config.auth_token). At most 4,095 bytes. */
    const char *auth_token;
    /* 1: send "hasleader: true" (clientv3.WithRequireLeader): a member without a leader
     * answers UNAVAILABLE "etcdserver: no leader" instead of waiting. */
    int require_leader;
} kvc_call_md;

/* kvc_call_unary_async with this call's own metadata (md may be NULL: the client's). */
KVC_API int kvc_call_unary_md_async(kvc_client *c, const char *method, const uint8_t *req,
                                    size_t req_len, uint32_t timeout_ms, int flags,
                                    const kvc_call_md *md, kvc_unary_cb cb, void *arg,
                                    kvc_error *err);

/*
 * Cancellable unary calls. kvc_call_unary_start is kvc_call_unary_md_async that also returns
 * a handle to the call in *out (required); everything else is the same (0 when queued, or
 * -code without calling cb and with *out NULL).
 *
 * kvc_call_cancel(h) cancels the call if it has not finished and releases the handle, as
 * kvc_bidi_free does for a stream: after it returns, cb is not running and will never run
 * again. A call still waiting for a connection or a retry is dropped (nothing reaches the
 * server); a call in flight is reset (RST_STREAM CANCEL, flushed at once: the server sees a
 * cancelled gRPC call, as a Go client's cancelled context; a write may or may not have been
 * applied). Returns 1 when it cancelled the call (cb never ran and never will), 0 when cb had
 * already run (the handle is only released). Works the same from cb itself (returns 0).
 *
 * Ownership: every handle is the caller's until it is given to kvc_call_cancel, EXACTLY once,
 * whether or not the call has finished (the handle stays valid after cb ran, and even after
 * kvc_close, which finishes every call: cancel then only frees the handle). h may be NULL.
 * Threads: callable from any thread, including the client's callbacks (then it does not
 * wait); from another thread it waits for the I/O thread to act (quick: it never waits for
 * the network). Must not race kvc_close on the same client.
 */
typedef struct kvc_call kvc_call;
KVC_API int kvc_call_unary_start(kvc_client *c, const char *method, const uint8_t *req,
                                 size_t req_len, uint32_t timeout_ms, int flags,
                                 const kvc_call_md *md, kvc_unary_cb cb, void *arg, kvc_call **out,
                                 kvc_error *err);
KVC_API int kvc_call_cancel(kvc_call *h);

/* Free memory returned by this library (packed responses). NULL is fine. */
KVC_API void kvc_free(void *p);

/* ---- KV ---- */

typedef struct kvc_header {
    uint64_t cluster_id;
    uint64_t member_id;
    int64_t revision;
    uint64_t raft_term;
} kvc_header;

/* One key-value record. Pointers point into the owning result. */
typedef struct kvc_kv {
    const uint8_t *key;
    size_t key_len;
    const uint8_t *value;
    size_t value_len;
    int64_t create_revision;
    int64_t mod_revision;
    int64_t version;
    int64_t lease;
} kvc_kv;

enum kvc_sort_order { KVC_SORT_NONE = 0, KVC_SORT_ASCEND = 1, KVC_SORT_DESCEND = 2 };
enum kvc_sort_target {
    KVC_SORT_KEY = 0,
    KVC_SORT_VERSION = 1,
    KVC_SORT_CREATE = 2,
    KVC_SORT_MOD = 3,
    KVC_SORT_VALUE = 4
};

/* Options of kvc_get (and of txn range ops). Zero-initialise; NULL means all defaults. */
typedef struct kvc_range_opts {
    const uint8_t *range_end; /* explicit [key, range_end); overrides prefix/from_key */
    size_t range_end_len;
    int prefix;   /* every key starting with key */
    int from_key; /* every key >= key (range_end "\0") */
    int64_t limit;
    int64_t revision; /* <= 0: newest */
    int sort_order;   /* enum kvc_sort_order */
    int sort_target;  /* enum kvc_sort_target */
    int serializable; /* serve from the local member without consensus */
    int keys_only;
    int count_only;
    int64_t min_mod_revision, max_mod_revision;
    int64_t min_create_revision, max_create_revision;
} kvc_range_opts;

typedef struct kvc_put_opts {
    int64_t lease; /* attach to lease id (0: none) */
    int prev_kv;   /* return the previous record */
    int ignore_value;
    int ignore_lease;
    int flags; /* KVC_IDEMPOTENT to allow retries (the caller asserts replays are harmless) */
} kvc_put_opts;

typedef struct kvc_delete_opts {
    const uint8_t *range_end;
    size_t range_end_len;
    int prefix;
    int from_key;
    int prev_kv;
    int flags; /* KVC_IDEMPOTENT */
} kvc_delete_opts;

typedef struct kvc_range_result {
    kvc_header header;
    kvc_kv *kvs;
    size_t n_kvs;
    int more;
    int64_t count;
    void *priv_; /* internal */
} kvc_range_result;

typedef struct kvc_put_result {
    kvc_header header;
    int has_prev_kv;
    kvc_kv prev_kv;
    void *priv_;
} kvc_put_result;

typedef struct kvc_delete_result {
    kvc_header header;
    int64_t deleted;
    kvc_kv *prev_kvs;
    size_t n_prev_kvs;
    void *priv_;
} kvc_delete_result;

/* Free the contents of a result (not the struct itself, which is usually on the stack).
 * Safe on a zeroed struct and after a failed call. Not thread-safe per result. */
KVC_API void kvc_range_result_free(kvc_range_result *r);
KVC_API void kvc_put_result_free(kvc_put_result *r);
KVC_API void kvc_delete_result_free(kvc_delete_result *r);

/* Synchronous KV calls. `out` may be NULL when the result is not wanted (and, for put and
 * delete, `opts` may be NULL). On failure *out is zeroed. Gets are idempotent (retried);
 * put/delete/txn/compact only when opts->flags / flags has KVC_IDEMPOTENT. */
KVC_API int kvc_get(kvc_client *c, const void *key, size_t key_len, const kvc_range_opts *opts,
                    uint32_t timeout_ms, kvc_range_result *out, kvc_error *err);
KVC_API int kvc_put(kvc_client *c, const void *key, size_t key_len, const void *value,
                    size_t value_len, const kvc_put_opts *opts, uint32_t timeout_ms,
                    kvc_put_result *out, kvc_error *err);
KVC_API int kvc_delete(kvc_client *c, const void *key, size_t key_len, const kvc_delete_opts *opts,
                       uint32_t timeout_ms, kvc_delete_result *out, kvc_error *err);
/* Compact the history up to revision. `out` (may be NULL) receives the header. */
KVC_API int kvc_compact(kvc_client *c, int64_t revision, int physical, int flags,
                        uint32_t timeout_ms, kvc_header *out, kvc_error *err);

/* Async KV: the callback receives status (0 or -code), err (NULL on success) and a pointer
 * to a result the callback owns (free its contents with the matching *_free; the struct
 * itself is freed by the library after the callback returns, so copy it if you keep it).
 * Returns 0 when queued (the callback will run exactly once) or -code (callback not run). */
typedef void (*kvc_range_cb)(void *arg, int status, const kvc_error *err, kvc_range_result *r);
typedef void (*kvc_put_cb)(void *arg, int status, const kvc_error *err, kvc_put_result *r);
typedef void (*kvc_delete_cb)(void *arg, int status, const kvc_error *err, kvc_delete_result *r);
KVC_API int kvc_get_async(kvc_client *c, const void *key, size_t key_len,
                          const kvc_range_opts *opts, uint32_t timeout_ms, kvc_range_cb cb,
                          void *arg, kvc_error *err);
KVC_API int kvc_put_async(kvc_client *c, const void *key, size_t key_len, const void *value,
                          size_t value_len, const kvc_put_opts *opts, uint32_t timeout_ms,
                          kvc_put_cb cb, void *arg, kvc_error *err);
KVC_API int kvc_delete_async(kvc_client *c, const void *key, size_t key_len,
                             const kvc_delete_opts *opts, uint32_t timeout_ms, kvc_delete_cb cb,
                             void *arg, kvc_error *err);

/* ---- Txn builder ---- */

enum kvc_cmp_result {
    KVC_CMP_EQUAL = 0,
    KVC_CMP_GREATER = 1,
    KVC_CMP_LESS = 2,
    KVC_CMP_NOT_EQUAL = 3
};
enum kvc_cmp_target {
    KVC_CMP_VERSION = 0,
    KVC_CMP_CREATE = 1,
    KVC_CMP_MOD = 2,
    KVC_CMP_VALUE = 3,
    KVC_CMP_LEASE = 4
};
enum kvc_txn_branch { KVC_TXN_SUCCESS = 0, KVC_TXN_FAILURE = 1 };
enum kvc_op_type { KVC_OP_RANGE = 1, KVC_OP_PUT = 2, KVC_OP_DELETE = 3, KVC_OP_TXN = 4 };

/* A txn under construction. Not thread-safe; owned by the caller; all inputs are copied.
 * Every builder function returns 0 or -KVC_INVALID_ARGUMENT / -KVC_RESOURCE_EXHAUSTED. */
KVC_API kvc_txn *kvc_txn_new(void);    /* NULL on out-of-memory */
KVC_API void kvc_txn_free(kvc_txn *t); /* NULL is fine */
/* Compare an integer field (target VERSION, CREATE, MOD or LEASE) of key with value. */
KVC_API int kvc_txn_cmp_int(kvc_txn *t, const void *key, size_t key_len, int target, int result,
                            int64_t value);
/* Compare the value of key with value. */
KVC_API int kvc_txn_cmp_value(kvc_txn *t, const void *key, size_t key_len, int result,
                              const void *value, size_t value_len);
KVC_API int kvc_txn_get(kvc_txn *t, int branch, const void *key, size_t key_len,
                        const kvc_range_opts *opts);
KVC_API int kvc_txn_put(kvc_txn *t, int branch, const void *key, size_t key_len, const void *value,
                        size_t value_len, const kvc_put_opts *opts);
KVC_API int kvc_txn_delete(kvc_txn *t, int branch, const void *key, size_t key_len,
                           const kvc_delete_opts *opts);

typedef struct kvc_op_result {
    int type; /* enum kvc_op_type; KVC_OP_TXN (nested) carries only its header */
    kvc_range_result range;
    kvc_put_result put;
    kvc_delete_result del;
} kvc_op_result;

typedef struct kvc_txn_result {
    kvc_header header;
    int succeeded;
    kvc_op_result *responses;
    size_t n_responses;
    void *priv_;
} kvc_txn_result;
KVC_API void kvc_txn_result_free(kvc_txn_result *r);

/* Send the txn (t stays owned by the caller and may be committed again). flags:
 * KVC_IDEMPOTENT allows retries. */
KVC_API int kvc_txn_commit(kvc_client *c, const kvc_txn *t, int flags, uint32_t timeout_ms,
                           kvc_txn_result *out, kvc_error *err);

/* ---- Leases ---- */

typedef struct kvc_lease_grant_result {
    kvc_header header;
    int64_t id;
    int64_t ttl;
    char error[128];
} kvc_lease_grant_result;

typedef struct kvc_lease_ttl_result {
    kvc_header header;
    int64_t id;
    int64_t ttl; /* remaining seconds; -1 = expired or not found */
    int64_t granted_ttl;
    const uint8_t **keys; /* n_keys keys (when asked for) */
    size_t *key_lens;
    size_t n_keys;
    void *priv_;
} kvc_lease_ttl_result;
KVC_API void kvc_lease_ttl_result_free(kvc_lease_ttl_result *r);

typedef struct kvc_lease_leases_result {
    kvc_header header;
    int64_t *ids;
    size_t n_ids;
} kvc_lease_leases_result;
KVC_API void kvc_lease_leases_result_free(kvc_lease_leases_result *r);

typedef struct kvc_keepalive_result {
    kvc_header header;
    int64_t id;
    int64_t ttl; /* new TTL in seconds; 0 = lease not found or expired */
} kvc_keepalive_result;

/* Grant a lease of ttl_s seconds (id 0: the server chooses). Not retried (a replay would
 * grant a second lease) unless flags has KVC_IDEMPOTENT. */
KVC_API int kvc_lease_grant(kvc_client *c, int64_t ttl_s, int64_t id, int flags,
                            uint32_t timeout_ms, kvc_lease_grant_result *out, kvc_error *err);
/* Revoke. Retried (revoking twice is harmless; the retry may report "lease not found"). */
KVC_API int kvc_lease_revoke(kvc_client *c, int64_t id, uint32_t timeout_ms, kvc_header *out,
                             kvc_error *err);
KVC_API int kvc_lease_time_to_live(kvc_client *c, int64_t id, int with_keys, uint32_t timeout_ms,
                                   kvc_lease_ttl_result *out, kvc_error *err);
KVC_API int kvc_lease_leases(kvc_client *c, uint32_t timeout_ms, kvc_lease_leases_result *out,
                             kvc_error *err);
/* One renewal on its own short stream (not the shared keepalive stream). out->ttl 0 means
 * the lease is gone. */
KVC_API int kvc_lease_keepalive_once(kvc_client *c, int64_t id, uint32_t timeout_ms,
                                     kvc_keepalive_result *out, kvc_error *err);

/* ---- Keepalive (lesson 1) ---- */

enum kvc_ka_event_type {
    KVC_KA_RESPONSE = 1, /* a renewal was acknowledged; ttl is the new TTL */
    KVC_KA_LOST = 2,     /* deadline passed without a response, or the server answered TTL 0
                            (revoked/expired). Renewals have stopped; final event. */
};

typedef struct kvc_ka_event {
    int type; /* enum kvc_ka_event_type */
    int64_t id;
    int64_t ttl;
    kvc_header header; /* of the response (zero for KVC_KA_LOST by deadline) */
} kvc_ka_event;

/* Keepalive callback: runs on the I/O thread for every response and once for KVC_KA_LOST.
 * Must be quick (it delays the loop, not the renewal schedule). */
typedef void (*kvc_keepalive_cb)(void *arg, const kvc_ka_event *ev);

/*
 * Keep lease `id` alive on the client's shared keepalive stream. ttl_s is the lease's TTL
 * as granted (0: unknown, 5 s assumed until the first response); the first renewal is sent
 * immediately, then TTL/3 after each response (or after each send when no response came).
 * cb non-NULL: events go to cb. cb NULL: events go to a bounded queue of
 * keepalive_queue_len entries read with kvc_keepalive_next(); when it is full the oldest
 * entry is dropped (latest wins) and counted (kvc_keepalive_dropped, kvc_stats).
 * *out is owned by the caller until kvc_keepalive_stop() (or kvc_close()). Keeping the same
 * lease alive twice on one client fails with KVC_ALREADY_EXISTS. Thread-safe.
 */
KVC_API int kvc_lease_keepalive(kvc_client *c, int64_t id, int64_t ttl_s, kvc_keepalive_cb cb,
                                void *arg, kvc_keepalive **out, kvc_error *err);

/* Queue mode only: wait up to timeout_ms (0: don't wait) for the next event. Returns 0 and
 * fills *ev, or -KVC_DEADLINE_EXCEEDED when none arrived, or -KVC_FAILED_PRECONDITION in
 * callback mode. After KVC_KA_LOST has been read, returns -KVC_NOT_FOUND. One consumer
 * thread per handle; must not race with kvc_keepalive_stop on the same handle. */
KVC_API int kvc_keepalive_next(kvc_keepalive *ka, kvc_ka_event *ev, uint32_t timeout_ms);
/* Responses dropped from this handle's queue because the consumer was slow. Thread-safe. */
KVC_API uint64_t kvc_keepalive_dropped(const kvc_keepalive *ka);
/* 1 once the lease was reported lost. Thread-safe. */
KVC_API int kvc_keepalive_lost(const kvc_keepalive *ka);
/* Stop renewing (does not revoke) and free the handle. After it returns the callback is not
 * running and will not run again. Callable from any thread including the callback. */
KVC_API void kvc_keepalive_stop(kvc_keepalive *ka);

/* ---- Watch ---- */

/*
 * Delivery model: CALLBACK ON THE CLIENT'S I/O THREAD, no queue inside the library.
 * Each watch response is handed to the watcher's callback synchronously while the response
 * is being read off the connection. The library keeps at most the one response being
 * delivered (plus, for a fragmented response, its fragments, bounded by
 * kvc_config.max_response_bytes in total), so a watcher can never make the library's memory
 * grow. A slow callback slows the reading of the whole connection (TCP / HTTP/2 flow control
 * then push back on the server, which moves the watcher aside as a slow watcher); it also
 * delays every other stream and keepalive of the client, so a callback that may block
 * should hand the events to its own bounded queue and decide itself what to do when it is
 * full (e.g. cancel the watcher and re-create it from the last revision it processed).
 * No event is ever dropped silently by the library: a watcher that cannot be continued
 * (history compacted, stream refused by the server, fragments too large, client closed...)
 * gets one final response with canceled = 1 and the reason.
 *
 * Multiplexing and resume: all watchers of a client share ONE Watch stream (as clientv3).
 * When the stream or the connection is lost, every watcher is re-created on a new stream
 * (after the reconnect backoff) from its next revision: the last event's mod_revision + 1
 * (or the header revision + 1 of its creation / of a periodic progress notification, which
 * the server sends only to synced watchers), so events are neither repeated nor missed. If that
 * revision was compacted meanwhile, the final response has compact_revision set.
 */

typedef struct kvc_watch kvc_watch;

enum kvc_event_type { KVC_EVENT_PUT = 0, KVC_EVENT_DELETE = 1 };

typedef struct kvc_event {
    int type;  /* enum kvc_event_type */
    kvc_kv kv; /* for DELETE: key and mod_revision only */
    int has_prev_kv;
    kvc_kv prev_kv; /* when the watcher asked for prev_kv and the key existed */
} kvc_event;

typedef struct kvc_watch_response {
    kvc_header header;
    int64_t watch_id;          /* server-assigned id on the current stream */
    int created;               /* creation ack (only delivered with opts.created_notify) */
    int progress_notify;       /* no events: everything up to header.revision was sent */
    int canceled;              /* FINAL response: no callback follows */
    int64_t compact_revision;  /* canceled because the start revision was compacted */
    int status;                /* 0, or -code when canceled for an error */
    const char *cancel_reason; /* "" or the server's / library's reason (valid in the cb) */
    const kvc_event *events;   /* n_events events in revision order (valid in the cb) */
    size_t n_events;
} kvc_watch_response;

/* Runs on the I/O thread (see the delivery model above). r and everything it points to are
 * valid only during the call. May call kvc_watch_cancel (on any watcher of the client),
 * kvc_watch_progress and the *_async functions; must not call synchronous kvc_ functions. */
typedef void (*kvc_watch_cb)(void *arg, const kvc_watch_response *r);

enum kvc_watch_filter { KVC_FILTER_NOPUT = 1, KVC_FILTER_NODELETE = 2 };

/* Options of kvc_watch_create. Zero-initialise; NULL means all defaults. */
typedef struct kvc_watch_opts {
    const uint8_t *range_end; /* explicit [key, range_end); overrides prefix/from_key */
    size_t range_end_len;
    int prefix;             /* every key starting with key */
    int from_key;           /* every key >= key */
    int64_t start_revision; /* <= 0: from the next revision */
    int prev_kv;
    int filters;         /* KVC_FILTER_* bits */
    int progress_notify; /* periodic progress notifications from the server */
    int fragment;        /* let the server split large responses (reassembled here) */
    int created_notify;  /* also deliver the creation ack (created = 1) */
} kvc_watch_opts;

/*
 * Create a watcher on the client's shared Watch stream and wait until the server
 * acknowledged it (at most timeout_ms; 0 = no limit besides the server's answer). On 0,
 * *out owns the watcher (free it with kvc_watch_cancel, also after a final canceled
 * response) and *created (may be NULL) receives the header of the ack: events with
 * mod_revision > created->revision (or >= start_revision) will be delivered to cb.
 * A compacted start_revision is not an error here: the watcher is created and its first
 * (final) response has compact_revision set, as etcd answers (it may arrive before this
 * function returns). Errors: the stream's status when the server refuses Watch (e.g.
 * -KVC_UNIMPLEMENTED), the server's cancel_reason when it refuses the watcher,
 * -KVC_DEADLINE_EXCEEDED, -KVC_INVALID_ARGUMENT.
 * Must not be called on the I/O thread (KVC_FAILED_PRECONDITION). Thread-safe.
 */
KVC_API int kvc_watch_create(kvc_client *c, const void *key, size_t key_len,
                             const kvc_watch_opts *opts, uint32_t timeout_ms, kvc_watch_cb cb,
                             void *arg, kvc_watch **out, kvc_header *created, kvc_error *err);

/* Cancel the watcher (the server is told) and free it. After it returns the callback is not
 * running and will not run again. Callable from any thread, including any watch callback
 * of the same client. w may be NULL. */
KVC_API void kvc_watch_cancel(kvc_watch *w);

/* Ask the server for a progress notification (WatchProgressRequest) on the client's Watch
 * stream: every synced watcher then receives a response with progress_notify = 1.
 * -KVC_UNAVAILABLE when the stream is not open (no watcher, or reconnecting). Thread-safe,
 * callable from callbacks. */
KVC_API int kvc_watch_progress(kvc_client *c, kvc_error *err);

/* The revision the watcher would resume from after a reconnect (0: not known yet).
 * Thread-safe. */
KVC_API int64_t kvc_watch_next_revision(const kvc_watch *w);

/* ---- Maintenance: snapshot ---- */

/*
 * Per-chunk callback of kvc_snapshot: blob/len is the next piece of the snapshot file (valid
 * only during the call), remaining the server's remaining_bytes after it (0 on the last
 * chunk, which is the file's trailing SHA-256). Runs on the client's I/O THREAD, in order,
 * while kvc_snapshot blocks its caller: it may block (e.g. write(2) to a file), which slows
 * the whole connection (HTTP/2 flow control pushes back on the server; other calls and
 * streams of the client wait too), and must not call synchronous kvc_ functions. Return 0 to
 * continue; anything else cancels the stream (kvc_snapshot then fails with
 * -KVC_CANCELLED, "kvclient: snapshot cancelled by on_chunk (returned N)").
 */
typedef int (*kvc_snapshot_chunk_cb)(void *arg, const uint8_t *blob, size_t len,
                                     uint64_t remaining);

/*
 * Maintenance.Snapshot: stream the member's store (an etcd 3.4 snapshot file: the database
 * followed by its SHA-256, as etcdctl snapshot save writes it) to on_chunk, one
 * SnapshotResponse at a time; the library never holds more than one message (at most
 * kvc_config.max_response_bytes), whatever the snapshot's size. Works over h2c and TLS
 * (https endpoints) and sends the auth token as any call.
 * timeout_ms is an OVERALL deadline for the whole download (sent as grpc-timeout; 0 = none,
 * then only the dial timeout bounds the wait for a connection): pick one that covers the
 * transfer of the whole store. The snapshot comes from the endpoint the client is connected
 * to (open the client with one endpoint to choose the member). Not retried once data has
 * arrived (a stream the server refused before starting is sent again).
 * On 0 every chunk was delivered and the last one had remaining 0; *bytes (may be NULL) is
 * the number of blob bytes delivered, also on failure (what on_chunk received). Errors: the
 * server's status and grpc-message (e.g. -KVC_RESOURCE_EXHAUSTED "etcdserver: too many
 * requests"), -KVC_DEADLINE_EXCEEDED, -KVC_UNAVAILABLE (no connection, connection lost),
 * -KVC_CANCELLED (on_chunk stopped it), -KVC_DATA_LOSS (the stream ended OK before its last
 * chunk), -KVC_INVALID_ARGUMENT. A failed download leaves a partial file to the caller.
 * Synchronous: must not be called on the I/O thread (KVC_FAILED_PRECONDITION). Thread-safe.
 */
KVC_API int kvc_snapshot(kvc_client *c, kvc_snapshot_chunk_cb on_chunk, void *arg,
                         uint32_t timeout_ms, uint64_t *bytes, kvc_error *err);

/* ---- raw bidirectional streams (addition; used by kvd grpc-proxy) ---- */

/*
 * A raw gRPC stream of any method (client, server or bidi streaming) whose messages are
 * opaque packed protobuf bytes: the library frames what kvc_bidi_send is given and hands
 * every response message to on_msg as it arrives. It shares the client's one connection with
 * every other call and stream.
 *
 * Lifetime: kvc_bidi_open queues the stream and returns at once; it is started on the
 * client's connection as soon as one is usable (the client keeps dialing its endpoints, with
 * its backoff, while a stream waits; there is no dial timeout for a waiting stream). Messages
 * sent before that are held (bounded, see max_send_bytes). The stream ends exactly once:
 * on_end runs with status 0 when the server finished it with grpc-status OK, or -code with
 * err filled: the server's status and grpc-message, -KVC_UNAVAILABLE "kvclient: connection
 * lost: ..." when the connection dropped (the client then moves to its next endpoint) or a
 * failover drained it (UNAVAILABLE or "no leader" on another call or stream), -KVC_CANCELLED
 * when the client is closed, -KVC_RESOURCE_EXHAUSTED when a response exceeds
 * max_response_bytes. The library never re-opens a stream (its state is the caller's): open
 * a new one, which goes to the client's current (or next) endpoint.
 *
 * Callbacks run on the client's I/O thread (rules of the header's "Threads" paragraph);
 * msg is valid only during on_msg; on_msg is never called after on_end.
 * Memory: the library holds at most max_send_bytes of unsent request bytes and one response
 * message (at most kvc_config.max_response_bytes) per stream; on_msg must copy what it keeps.
 */
typedef struct kvc_bidi kvc_bidi;
typedef void (*kvc_bidi_msg_cb)(void *arg, const uint8_t *msg, size_t len);
typedef void (*kvc_bidi_end_cb)(void *arg, int status, const kvc_error *err);

/* Open a stream of `method` ("/etcdserverpb.Lease/LeaseKeepAlive"). max_send_bytes bounds the
 * framed request bytes not yet taken by HTTP/2 (0: 4 MiB). on_msg and on_end are required.
 * On 0 *out is the caller's until kvc_bidi_free (also after on_end). Errors:
 * -KVC_INVALID_ARGUMENT, -KVC_RESOURCE_EXHAUSTED (memory), -KVC_CANCELLED (client closing).
 * Thread-safe; callable from callbacks. Every stream must be freed before kvc_close. */
KVC_API int kvc_bidi_open(kvc_client *c, const char *method, size_t max_send_bytes,
                          kvc_bidi_msg_cb on_msg, kvc_bidi_end_cb on_end, void *arg, kvc_bidi **out,
                          kvc_error *err);
/* kvc_bidi_open with the stream's own metadata (md may be NULL: the client's). */
KVC_API int kvc_bidi_open_md(kvc_client *c, const char *method, size_t max_send_bytes,
                             const kvc_call_md *md, kvc_bidi_msg_cb on_msg, kvc_bidi_end_cb on_end,
                             void *arg, kvc_bidi **out, kvc_error *err);
/* Queue one request message (copied, framed). Returns 0, -KVC_RESOURCE_EXHAUSTED
 * "kvclient: stream send buffer full" (nothing queued; the server or the connection is not
 * taking the bytes), or -KVC_UNAVAILABLE "kvclient: stream ended" after the end. Thread-safe;
 * callable from callbacks; never blocks on the network. */
KVC_API int kvc_bidi_send(kvc_bidi *b, const uint8_t *msg, size_t len, kvc_error *err);
/* (addition) The framed request bytes queued and not yet taken by HTTP/2: what counts against
 * max_send_bytes. For an owner that keeps part of that room for its own later messages
 * (kvd grpc-proxy: a failover's re-sent watch creates leave half for cancels and new
 * creates). Thread-safe; 0 for NULL. */
KVC_API size_t kvc_bidi_queued(kvc_bidi *b);
/* Give up the connection this stream is open on, as when it drops: every call and stream on
 * it ends (UNAVAILABLE "... member hung?"), including this one (its on_end runs), and the
 * client moves to its next endpoint. For a caller that sees a stream go unanswered (a hung
 * member: stopped, overloaded to silence, half-open TCP). A no-op when the stream is not
 * open on the client's current connection (waiting, ended, or on a connection already given
 * up), so a late call never drops a newer connection. Thread-safe; from another thread it
 * waits for the I/O thread to act. */
KVC_API void kvc_bidi_failover(kvc_bidi *b);
/* (addition) Receive flow control. paused=1: from now on the response DATA of this stream
 * is not credited back to the server (no HTTP/2 WINDOW_UPDATE for the stream; the
 * connection's window is still credited, so other calls and streams are not held up), so
 * the server stops sending once the stream's window (1 MiB) is used: at most that much more
 * arrives and is still handed to on_msg. paused=0 credits what arrived while paused and lets
 * the server go on. For an owner that relays the messages to a slower reader (kvd
 * grpc-proxy's Maintenance.Snapshot). Idempotent; a no-op on an ended stream. Thread-safe:
 * from the stream's own callbacks (the I/O thread) it acts at once and does not wait; from
 * another thread it waits for the I/O thread to act, and two such threads must not call it
 * at once on the same stream. When calls from two threads race, the last one to store its
 * request wins. */
KVC_API void kvc_bidi_set_recv_paused(kvc_bidi *b, int paused);
/* Cancel the stream (RST_STREAM CANCEL if it is open) and free it. After it returns no
 * callback of the stream runs or will run. Callable from any thread including the client's
 * callbacks (then it does not wait). b may be NULL. */
KVC_API void kvc_bidi_free(kvc_bidi *b);

/* ---- Stats ---- */

typedef struct kvc_stats {
    uint64_t renewals_sent;      /* keepalive requests written on the shared stream */
    uint64_t responses_received; /* keepalive responses received */
    uint64_t responses_dropped;  /* dropped from full per-lease queues (coalesced) */
    uint64_t reconnects;         /* connections established after the first */
    uint64_t leases_lost;
    uint64_t leases_active;
    uint64_t calls_started;
    uint64_t calls_failed;
    uint64_t calls_retried;
    uint64_t queue_full;    /* calls refused with "request queue full" */
    uint64_t connects;      /* TCP+HTTP/2 connections established in total */
    uint64_t ping_timeouts; /* connections given up: keepalive ping unanswered */
} kvc_stats;

/* Snapshot of the client's counters. Thread-safe, lock-free. */
KVC_API void kvc_stats_get(kvc_client *c, kvc_stats *out);
#define kvc_stats(c, out) kvc_stats_get((c), (out))

/* Library version string, e.g. "0.1.0". Static storage. */
KVC_API const char *kvc_version(void);

#ifdef __cplusplus
}
#endif
#endif /* KVCLIENT_H */
