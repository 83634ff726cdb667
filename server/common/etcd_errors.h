/*
 * etcd_errors.h - THE table of the errors kvd reports to clients: each kv_etcd_err names one
 * {gRPC status code, exact message} pair. The etcd entries are copied verbatim from etcd 3.4's
 * etcdserver/api/v3rpc/rpctypes/error.go (clients such as etcdctl and clientv3 match the
 * message text byte for byte, so never reword one); the kvd entries cover failures etcd has no
 * error for and keep etcd's "etcdserver: " prefix.
 *
 * Every message starts with "etcdserver: " except these documented groups:
 *   - "mvcc: ..."     watch cancel reasons of etcd's mvcc package (KV_ERR_WATCHER_*); they
 *                     travel in WatchResponse.cancel_reason, never as an RPC status, so their
 *                     code is KV_GRPC_OK;
 *   - "grpc: ..." and "context canceled"   grpc-go's own wording for the same condition;
 *   - "auth: ..."     errors of etcd's auth package that etcd's togRPCError does not map, so
 *                     they reach clients as codes.Unknown with the auth package's text;
 *   - "kvd: ..."      kvd-only conditions that have no etcd wording;
 *   - "election: ..." and "\"leader\" field must be provided"   errors of etcd's
 *                     concurrency package and v3election server, which reach clients as
 *                     codes.Unknown with their own text (api/service_election.c).
 * Messages are unique across the table. Where a call site adds detail (a limit, strerror())
 * it formats "<message><detail>" with kv_etcd_err_msg() as the prefix (the entry says so).
 *
 * Layering: server/common/ depends on nothing but common/status.h, so the MVCC store, the
 * lessor glue, the watch hub and the services all use this one table. Pure data: thread-safe,
 * static storage, no initialisation.
 */
#ifndef KV_COMMON_ETCD_ERRORS_H
#define KV_COMMON_ETCD_ERRORS_H

#include "common/status.h"

typedef enum kv_etcd_err {
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
    KV_ERR_TXN_TOO_MANY_PAGES,     /* RESOURCE_EXHAUSTED: one LMDB transaction cannot hold it */
    KV_ERR_EMPTY_INTERNAL_REQ,     /* INVALID_ARGUMENT "kvd: empty internal request" */
    KV_ERR_DECODE_INTERNAL_REQ,    /* INTERNAL "kvd: cannot decode internal request" */
    KV_ERR_DECODE_RANGE,           /* INVALID_ARGUMENT "kvd: cannot decode RangeRequest" */
    KV_ERR_TOO_MANY_WATCH_STREAMS, /* RESOURCE_EXHAUSTED; callers append " (--max-watch-...)" */
    KV_ERR_TOO_MANY_WATCHERS,      /* watch cancel reason (code OK); callers append the flag */
    KV_ERR_WATCH_SLOW_READER,      /* RESOURCE_EXHAUSTED: watch responses not read */
    /* --- v3election (etcd's concurrency package: code Unknown) --- */
    KV_ERR_ELECTION_NOT_LEADER,  /* UNKNOWN "election: not leader" */
    KV_ERR_ELECTION_NO_LEADER,   /* UNKNOWN "election: no leader" */
    KV_ERR_ELECTION_MISSING_KEY, /* UNKNOWN "\"leader\" field must be provided" */
    KV_ERR_COUNT                 /* not an error: one past the last entry */
} kv_etcd_err;

/* The gRPC status code of e (a kv_grpc_code value, int like kv_result.code and the grpc API);
 * KV_GRPC_UNKNOWN if e is not a kv_etcd_err. */
int kv_etcd_err_code(kv_etcd_err e);

/* The exact message of e (static storage, never NULL); "kvd: unknown error" if e is not a
 * kv_etcd_err. */
const char *kv_etcd_err_msg(kv_etcd_err e);

#endif
