/*
 * etcd_errors.h - THE table of the errors kvd reports to clients: each kv_etcd_err names one
 * {gRPC status code, exact message} pair. The etcd entries are copied verbatim from etcd 3.4's
 * etcdserver/api/v3rpc/rpctypes/error.go (clients such as etcdctl and clientv3 match the
 * message text byte for byte, so never reword one); the kvd entries cover failures etcd has no
 * error for and keep etcd's "etcdserver: " prefix (or "kvd: ", below).
 *
 * Every message starts with "etcdserver: " except these documented groups:
 *   - "mvcc: ..."     watch cancel reasons of etcd's mvcc package (KV_ERR_WATCHER_*); they
 *                     travel in WatchResponse.cancel_reason, never as an RPC status, so their
 *                     code is KV_GRPC_OK;
 *   - "grpc: ...", "context canceled" and "unknown service"   grpc-go's own wording for the
 *                     same condition (the last one: its health server's);
 *   - "auth: ..."     errors of etcd's auth package that etcd's togRPCError does not map, so
 *                     they reach clients as codes.Unknown with the auth package's text;
 *   - "kvd: ..."      kvd-only conditions that have no etcd wording;
 *   - "election: ..." and "\"leader\" field must be provided"   errors of etcd's
 *                     concurrency package and v3election server, which reach clients as
 *                     codes.Unknown with their own text (api/service_election.c).
 * Messages are unique across the table. Where a call site adds detail (a limit, strerror())
 * the client gets "<message><detail>" (kv_etcd_err_format; kv_result.detail, the api's
 * kv_reply_etcd_err_detail; the entry says so), and kv_etcd_err_parse gives the value back.
 *
 * Errors are values below the gRPC edge (as etcd's, which keeps Go errors in the server and
 * translates them once, in v3rpc's togRPCError): the applier, the node, the MVCC store, the
 * lessor glue and the watch hub pass kv_etcd_err values (apply/apply.h kv_result.err) and
 * never name a gRPC status. The gRPC half of each row is read through common/etcd_status.h,
 * which only the api edge includes (api/services.h kv_api_status_of: the one mapping).
 *
 * Layering: server/common/ depends on nothing, and this header includes only libc headers:
 * every layer may use the values and the messages. Pure data: thread-safe, static storage, no
 * initialisation.
 */
#ifndef KV_COMMON_ETCD_ERRORS_H
#define KV_COMMON_ETCD_ERRORS_H

#include <stddef.h>
#include <stdint.h>

typedef enum kv_etcd_err {
    KV_ERR_NONE = 0, /* not an error: success (kv_result.err of an applied request) */
    /* --- etcd 3.4 rpctypes: KV --- */
    KV_ERR_EMPTY_KEY = 1,  /* INVALID_ARGUMENT  "etcdserver: key is not provided" */
    KV_ERR_KEY_NOT_FOUND,  /* INVALID_ARGUMENT  "etcdserver: key not found" */
    KV_ERR_VALUE_PROVIDED, /* INVALID_ARGUMENT */
    KV_ERR_LEASE_PROVIDED, /* INVALID_ARGUMENT */
    KV_ERR_TOO_MANY_OPS,   /* INVALID_ARGUMENT  "etcdserver: too many operations in txn request" */
    KV_ERR_DUPLICATE_KEY,  /* INVALID_ARGUMENT */
    KV_ERR_COMPACTED,  /* OUT_OF_RANGE      "etcdserver: mvcc: required revision has been ..." */
    KV_ERR_FUTURE_REV, /* OUT_OF_RANGE */
    KV_ERR_NO_SPACE,   /* RESOURCE_EXHAUSTED "etcdserver: mvcc: database space exceeded" */
    /* --- lease --- */
    KV_ERR_LEASE_NOT_FOUND,     /* NOT_FOUND */
    KV_ERR_LEASE_EXIST,         /* FAILED_PRECONDITION */
    KV_ERR_LEASE_TTL_TOO_LARGE, /* OUT_OF_RANGE */
    /* --- watch --- */
    KV_ERR_WATCH_CANCELED, /* CANCELLED */
    /* --- membership --- */
    KV_ERR_MEMBER_EXIST,              /* FAILED_PRECONDITION */
    KV_ERR_PEER_URL_EXIST,            /* FAILED_PRECONDITION */
    KV_ERR_MEMBER_NOT_ENOUGH_STARTED, /* FAILED_PRECONDITION */
    KV_ERR_MEMBER_BAD_URLS,           /* INVALID_ARGUMENT */
    KV_ERR_MEMBER_NOT_FOUND,          /* NOT_FOUND */
    KV_ERR_MEMBER_NOT_LEARNER,        /* FAILED_PRECONDITION */
    KV_ERR_LEARNER_NOT_READY,         /* FAILED_PRECONDITION */
    KV_ERR_TOO_MANY_LEARNERS,         /* FAILED_PRECONDITION */
    /* --- request limits --- */
    KV_ERR_REQUEST_TOO_LARGE, /* INVALID_ARGUMENT */
    KV_ERR_TOO_MANY_REQUESTS, /* RESOURCE_EXHAUSTED "etcdserver: too many requests" */
    /* --- auth --- */
    KV_ERR_ROOT_USER_NOT_EXIST,
    KV_ERR_ROOT_ROLE_NOT_EXIST,
    KV_ERR_USER_ALREADY_EXIST,
    KV_ERR_USER_EMPTY,
    KV_ERR_USER_NOT_FOUND,
    KV_ERR_ROLE_ALREADY_EXIST,
    KV_ERR_ROLE_NOT_FOUND,
    KV_ERR_ROLE_EMPTY,
    KV_ERR_AUTH_FAILED,
    KV_ERR_PERMISSION_DENIED,
    KV_ERR_ROLE_NOT_GRANTED,
    KV_ERR_PERMISSION_NOT_GRANTED,
    KV_ERR_AUTH_NOT_ENABLED,
    KV_ERR_INVALID_AUTH_TOKEN,
    KV_ERR_INVALID_AUTH_MGMT,
    KV_ERR_AUTH_OLD_REVISION,
    KV_ERR_JWT_VERIFY_ONLY, /* UNKNOWN "auth: token signing attempted with verify-only key" */
    /* --- cluster / server state --- */
    KV_ERR_NO_LEADER,                      /* UNAVAILABLE "etcdserver: no leader" */
    KV_ERR_NOT_LEADER,                     /* FAILED_PRECONDITION "etcdserver: not leader" */
    KV_ERR_LEADER_CHANGED,                 /* UNAVAILABLE */
    KV_ERR_NOT_CAPABLE,                    /* UNAVAILABLE */
    KV_ERR_STOPPED,                        /* UNAVAILABLE "etcdserver: server stopped" */
    KV_ERR_TIMEOUT,                        /* UNAVAILABLE "etcdserver: request timed out" */
    KV_ERR_TIMEOUT_DUE_TO_LEADER_FAIL,     /* UNAVAILABLE */
    KV_ERR_TIMEOUT_DUE_TO_CONNECTION_LOST, /* UNAVAILABLE */
    KV_ERR_TIMEOUT_WAIT_APPLIED_INDEX,     /* UNAVAILABLE */
    KV_ERR_UNHEALTHY,                      /* UNAVAILABLE */
    KV_ERR_CORRUPT,                        /* DATA_LOSS "etcdserver: corrupt cluster" */
    KV_ERR_NOT_SUPPORTED_FOR_LEARNER,      /* UNAVAILABLE */
    KV_ERR_BAD_LEADER_TRANSFEREE,          /* FAILED_PRECONDITION */
    /* --- etcd mvcc watch cancel reasons (code KV_GRPC_OK: not an RPC status) --- */
    KV_ERR_WATCHER_RANGE_EMPTY,  /* "mvcc: watcher range is empty" */
    KV_ERR_WATCHER_DUPLICATE_ID, /* "mvcc: duplicate watch ID provided on the WatchStream" */
    /* --- grpc-go wording --- */
    KV_ERR_GRPC_UNMARSHAL, /* INTERNAL "grpc: error unmarshalling request: malformed protobuf" */
    KV_ERR_CANCELED,       /* CANCELLED "context canceled" */
    KV_ERR_GRPC_SEND_TOO_LARGE,    /* RESOURCE_EXHAUSTED "grpc: trying to send message larger than
                                      max"; callers append " (<len> vs. <max>)" */
    KV_ERR_GRPC_HALF_CLOSED,       /* INTERNAL "grpc: half-closed without a request" */
    KV_ERR_HEALTH_UNKNOWN_SERVICE, /* NOT_FOUND "unknown service" (grpc-go's health server) */
    /* --- kvd-specific (no etcd equivalent) --- */
    KV_ERR_KEY_TOO_LONG,            /* INVALID_ARGUMENT; callers append " (kvd limit: N bytes)" */
    KV_ERR_INVALID_SORT,            /* INVALID_ARGUMENT "etcdserver: invalid sort option" */
    KV_ERR_INVALID_LEASE_ID,        /* INVALID_ARGUMENT "etcdserver: invalid lease ID" */
    KV_ERR_TOO_MANY_LEASES,         /* RESOURCE_EXHAUSTED (--max-leases) */
    KV_ERR_TOO_MANY_LEASE_KEYS,     /* FAILED_PRECONDITION (--max-keys-per-lease) */
    KV_ERR_KEEPALIVE_BACKLOG,       /* RESOURCE_EXHAUSTED: keepalive responses not read */
    KV_ERR_TOO_MANY_REQUESTS_NOMEM, /* RESOURCE_EXHAUSTED: cannot queue, out of memory */
    KV_ERR_STORAGE,                 /* INTERNAL "etcdserver: request failed: storage error" */
    KV_ERR_REQUEST_NOMEM,           /* INTERNAL "etcdserver: request failed: out of memory" */
    KV_ERR_REQUEST_INTERNAL,        /* INTERNAL "etcdserver: request failed: internal error" */
    KV_ERR_APPLY_SCHEDULE,   /* UNAVAILABLE "etcdserver: request failed: cannot schedule apply" */
    KV_ERR_NOMEM,            /* INTERNAL "etcdserver: out of memory" */
    KV_ERR_SNAPSHOT_FAILED,  /* INTERNAL "etcdserver: snapshot failed"; callers append ": why" */
    KV_ERR_SNAPSHOT_CLOSED,  /* UNAVAILABLE "etcdserver: snapshot stream closed" */
    KV_ERR_DEFRAG_FAILED,    /* INTERNAL "etcdserver: defragment failed"; callers append ": why" */
    KV_ERR_KVD_NOMEM,        /* watch cancel reason (code OK) "kvd: out of memory" */
    KV_ERR_WATCH_OPEN_NOMEM, /* RESOURCE_EXHAUSTED "kvd: out of memory opening a watch stream" */
    KV_ERR_RECORD_CHECKSUM,  /* DATA_LOSS "kvd: mvcc: stored record failed its checksum" */
    KV_ERR_TXN_TOO_MANY_PAGES,      /* RESOURCE_EXHAUSTED: one LMDB transaction cannot hold it */
    KV_ERR_EMPTY_INTERNAL_REQ,      /* INVALID_ARGUMENT "kvd: empty internal request" */
    KV_ERR_DECODE_INTERNAL_REQ,     /* INTERNAL "kvd: cannot decode internal request" */
    KV_ERR_DECODE_RANGE,            /* INVALID_ARGUMENT "kvd: cannot decode RangeRequest" */
    KV_ERR_TOO_MANY_WATCH_STREAMS,  /* RESOURCE_EXHAUSTED; callers append " (--max-watch-...)" */
    KV_ERR_TOO_MANY_WATCHERS,       /* watch cancel reason (code OK); callers append the flag */
    KV_ERR_WATCH_SLOW_READER,       /* RESOURCE_EXHAUSTED: watch responses not read */
    KV_ERR_UNKNOWN_ALARM,           /* INVALID_ARGUMENT "kvd: unknown alarm type"; + " <type>" */
    KV_ERR_TOO_MANY_ALARMS,         /* RESOURCE_EXHAUSTED "kvd: too many alarms"; + " (limit N)" */
    KV_ERR_TOO_MANY_MEMBERS,        /* RESOURCE_EXHAUSTED "kvd: too many members"; + " (limit N)" */
    KV_ERR_TOO_MANY_PEER_URLS,      /* INVALID_ARGUMENT "kvd: too many peer URLs"; + " (limit N)" */
    KV_ERR_LEADER_TRANSFER_TIMEOUT, /* UNKNOWN "etcdserver: request timed out, leader transfer
                                       took too long" (etcd's MoveLeader: a plain error) */
    KV_ERR_DEFRAG_CANCELED,    /* UNAVAILABLE "etcdserver: defragment failed: Operation canceled"
                                  (the member stops; KV_ERR_DEFRAG_FAILED's text for ECANCELED) */
    KV_ERR_MEMBERSHIP_NO_NODE, /* UNIMPLEMENTED: membership change without a raft node */
    KV_ERR_TRANSFER_NO_NODE,   /* UNIMPLEMENTED: leader transfer without a raft node */
    /* --- v3election (etcd's concurrency package: code Unknown) --- */
    KV_ERR_ELECTION_NOT_LEADER,  /* UNKNOWN "election: not leader" */
    KV_ERR_ELECTION_NO_LEADER,   /* UNKNOWN "election: no leader" */
    KV_ERR_ELECTION_MISSING_KEY, /* UNKNOWN "\"leader\" field must be provided" */
    KV_ERR_COUNT                 /* not an error: one past the last entry */
} kv_etcd_err;

/* Longest message of the table plus a call site's detail, NUL included: the size of a buffer
 * kv_etcd_err_format never truncates (details are short: a limit, a number, strerror()). */
#define KV_ETCD_ERR_TEXT_MAX 256

/* The exact message of e (static storage, never NULL); "kvd: unknown error" if e is not a
 * kv_etcd_err (KV_ERR_NONE included). */
const char *kv_etcd_err_msg(kv_etcd_err e);

/* The text a client gets for e: its message followed by detail (NULL or "" for none) in buf
 * (n bytes, truncated to fit, always NUL-terminated when n > 0). Returns buf. */
char *kv_etcd_err_format(char *buf, size_t n, kv_etcd_err e, const char *detail);

/* The entry whose message is the longest prefix of text ("<message><detail>", as
 * kv_etcd_err_format writes it); *detail (may be NULL) gets the rest of text. KV_ERR_NONE if
 * no message of the table starts text (or text is NULL). Messages are unique, so the
 * longest-prefix rule recovers exactly the entry a text was made from. */
kv_etcd_err kv_etcd_err_parse(const char *text, const char **detail);

/* Peer frames (proto/raft.proto ForwardResp, ReadIndexResp) carry an error as {code, msg}:
 * msg is kv_etcd_err_format's text, which receivers turn back into the value with
 * kv_etcd_err_parse; code is the entry's gRPC status number (0 for KV_ERR_NONE), which
 * members built before errors became values used as the client's status. Senders keep
 * filling it so those members still answer clients correctly during a rolling upgrade;
 * receivers of this version read only msg (and code == 0 as success). */
uint32_t kv_etcd_err_peer_code(kv_etcd_err e);

#endif
