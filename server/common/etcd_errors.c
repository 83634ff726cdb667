/*
 * etcd_errors.c - the {code, message} table behind etcd_errors.h. The etcd rows are verbatim
 * from etcd 3.4 etcdserver/api/v3rpc/rpctypes/error.go (and mvcc/watcher.go for the watch
 * cancel reasons); see the header for the kvd rows and the prefix exceptions.
 */
#include "common/etcd_errors.h"
#include "common/etcd_status.h"

#include <stdio.h>
#include <string.h>

typedef struct kv_etcd_err_entry {
    kv_grpc_code code;
    const char *msg;
} kv_etcd_err_entry;

static const kv_etcd_err_entry table[KV_ERR_COUNT] = {
    /* KV */
    [KV_ERR_EMPTY_KEY] = {KV_GRPC_INVALID_ARGUMENT, "etcdserver: key is not provided"},
    [KV_ERR_KEY_NOT_FOUND] = {KV_GRPC_INVALID_ARGUMENT, "etcdserver: key not found"},
    [KV_ERR_VALUE_PROVIDED] = {KV_GRPC_INVALID_ARGUMENT, "etcdserver: value is provided"},
    [KV_ERR_LEASE_PROVIDED] = {KV_GRPC_INVALID_ARGUMENT, "etcdserver: lease is provided"},
    [KV_ERR_TOO_MANY_OPS] = {KV_GRPC_INVALID_ARGUMENT,
                             "etcdserver: too many operations in txn request"},
    [KV_ERR_DUPLICATE_KEY] = {KV_GRPC_INVALID_ARGUMENT,
                              "etcdserver: duplicate key given in txn request"},
    [KV_ERR_COMPACTED] = {KV_GRPC_OUT_OF_RANGE,
                          "etcdserver: mvcc: required revision has been compacted"},
    [KV_ERR_FUTURE_REV] = {KV_GRPC_OUT_OF_RANGE,
                           "etcdserver: mvcc: required revision is a future revision"},
    [KV_ERR_NO_SPACE] = {KV_GRPC_RESOURCE_EXHAUSTED, "etcdserver: mvcc: database space exceeded"},
    /* lease */
    [KV_ERR_LEASE_NOT_FOUND] = {KV_GRPC_NOT_FOUND, "etcdserver: requested lease not found"},
    [KV_ERR_LEASE_EXIST] = {KV_GRPC_FAILED_PRECONDITION, "etcdserver: lease already exists"},
    [KV_ERR_LEASE_TTL_TOO_LARGE] = {KV_GRPC_OUT_OF_RANGE, "etcdserver: too large lease TTL"},
    /* watch */
    [KV_ERR_WATCH_CANCELED] = {KV_GRPC_CANCELLED, "etcdserver: watch canceled"},
    /* membership */
    [KV_ERR_MEMBER_EXIST] = {KV_GRPC_FAILED_PRECONDITION, "etcdserver: member ID already exist"},
    [KV_ERR_PEER_URL_EXIST] = {KV_GRPC_FAILED_PRECONDITION, "etcdserver: Peer URLs already exists"},
    [KV_ERR_MEMBER_NOT_ENOUGH_STARTED] =
        {KV_GRPC_FAILED_PRECONDITION,
         "etcdserver: re-configuration failed due to not enough started members"},
    [KV_ERR_MEMBER_BAD_URLS] = {KV_GRPC_INVALID_ARGUMENT,
                                "etcdserver: given member URLs are invalid"},
    [KV_ERR_MEMBER_NOT_FOUND] = {KV_GRPC_NOT_FOUND, "etcdserver: member not found"},
    [KV_ERR_MEMBER_NOT_LEARNER] = {KV_GRPC_FAILED_PRECONDITION,
                                   "etcdserver: can only promote a learner member"},
    [KV_ERR_LEARNER_NOT_READY] =
        {KV_GRPC_FAILED_PRECONDITION,
         "etcdserver: can only promote a learner member which is in sync with leader"},
    [KV_ERR_TOO_MANY_LEARNERS] = {KV_GRPC_FAILED_PRECONDITION,
                                  "etcdserver: too many learner members in cluster"},
    /* request limits */
    [KV_ERR_REQUEST_TOO_LARGE] = {KV_GRPC_INVALID_ARGUMENT, "etcdserver: request is too large"},
    [KV_ERR_TOO_MANY_REQUESTS] = {KV_GRPC_RESOURCE_EXHAUSTED, "etcdserver: too many requests"},
    /* auth */
    [KV_ERR_ROOT_USER_NOT_EXIST] = {KV_GRPC_FAILED_PRECONDITION,
                                    "etcdserver: root user does not exist"},
    [KV_ERR_ROOT_ROLE_NOT_EXIST] = {KV_GRPC_FAILED_PRECONDITION,
                                    "etcdserver: root user does not have root role"},
    [KV_ERR_USER_ALREADY_EXIST] = {KV_GRPC_FAILED_PRECONDITION,
                                   "etcdserver: user name already exists"},
    [KV_ERR_USER_EMPTY] = {KV_GRPC_INVALID_ARGUMENT, "etcdserver: user name is empty"},
    [KV_ERR_USER_NOT_FOUND] = {KV_GRPC_FAILED_PRECONDITION, "etcdserver: user name not found"},
    [KV_ERR_ROLE_ALREADY_EXIST] = {KV_GRPC_FAILED_PRECONDITION,
                                   "etcdserver: role name already exists"},
    [KV_ERR_ROLE_NOT_FOUND] = {KV_GRPC_FAILED_PRECONDITION, "etcdserver: role name not found"},
    [KV_ERR_ROLE_EMPTY] = {KV_GRPC_INVALID_ARGUMENT, "etcdserver: role name is empty"},
    [KV_ERR_AUTH_FAILED] = {KV_GRPC_INVALID_ARGUMENT,
                            "etcdserver: authentication failed, invalid user ID or password"},
    [KV_ERR_PERMISSION_DENIED] = {KV_GRPC_PERMISSION_DENIED, "etcdserver: permission denied"},
    [KV_ERR_ROLE_NOT_GRANTED] = {KV_GRPC_FAILED_PRECONDITION,
                                 "etcdserver: role is not granted to the user"},
    [KV_ERR_PERMISSION_NOT_GRANTED] = {KV_GRPC_FAILED_PRECONDITION,
                                       "etcdserver: permission is not granted to the role"},
    [KV_ERR_AUTH_NOT_ENABLED] = {KV_GRPC_FAILED_PRECONDITION,
                                 "etcdserver: authentication is not enabled"},
    [KV_ERR_INVALID_AUTH_TOKEN] = {KV_GRPC_UNAUTHENTICATED, "etcdserver: invalid auth token"},
    [KV_ERR_INVALID_AUTH_MGMT] = {KV_GRPC_INVALID_ARGUMENT, "etcdserver: invalid auth management"},
    [KV_ERR_AUTH_OLD_REVISION] = {KV_GRPC_INVALID_ARGUMENT,
                                  "etcdserver: revision of auth store is old"},
    /* etcd's togRPCError has no entry for auth.ErrVerifyOnly: codes.Unknown, its text */
    [KV_ERR_JWT_VERIFY_ONLY] = {KV_GRPC_UNKNOWN,
                                "auth: token signing attempted with verify-only key"},
    /* cluster / server state */
    [KV_ERR_NO_LEADER] = {KV_GRPC_UNAVAILABLE, "etcdserver: no leader"},
    [KV_ERR_NOT_LEADER] = {KV_GRPC_FAILED_PRECONDITION, "etcdserver: not leader"},
    [KV_ERR_LEADER_CHANGED] = {KV_GRPC_UNAVAILABLE, "etcdserver: leader changed"},
    [KV_ERR_NOT_CAPABLE] = {KV_GRPC_UNAVAILABLE, "etcdserver: not capable"},
    [KV_ERR_STOPPED] = {KV_GRPC_UNAVAILABLE, "etcdserver: server stopped"},
    [KV_ERR_TIMEOUT] = {KV_GRPC_UNAVAILABLE, "etcdserver: request timed out"},
    [KV_ERR_TIMEOUT_DUE_TO_LEADER_FAIL] =
        {KV_GRPC_UNAVAILABLE,
         "etcdserver: request timed out, possibly due to previous leader failure"},
    [KV_ERR_TIMEOUT_DUE_TO_CONNECTION_LOST] =
        {KV_GRPC_UNAVAILABLE, "etcdserver: request timed out, possibly due to connection lost"},
    [KV_ERR_TIMEOUT_WAIT_APPLIED_INDEX] =
        {KV_GRPC_UNAVAILABLE,
         "etcdserver: request timed out, waiting for the applied index took too long"},
    [KV_ERR_UNHEALTHY] = {KV_GRPC_UNAVAILABLE, "etcdserver: unhealthy cluster"},
    [KV_ERR_CORRUPT] = {KV_GRPC_DATA_LOSS, "etcdserver: corrupt cluster"},
    [KV_ERR_NOT_SUPPORTED_FOR_LEARNER] = {KV_GRPC_UNAVAILABLE,
                                          "etcdserver: rpc not supported for learner"},
    [KV_ERR_BAD_LEADER_TRANSFEREE] = {KV_GRPC_FAILED_PRECONDITION,
                                      "etcdserver: bad leader transferee"},
    /* etcd mvcc watch cancel reasons: WatchResponse.cancel_reason, not an RPC status */
    [KV_ERR_WATCHER_RANGE_EMPTY] = {KV_GRPC_OK, "mvcc: watcher range is empty"},
    [KV_ERR_WATCHER_DUPLICATE_ID] = {KV_GRPC_OK,
                                     "mvcc: duplicate watch ID provided on the WatchStream"},
    /* grpc-go wording */
    [KV_ERR_GRPC_UNMARSHAL] = {KV_GRPC_INTERNAL,
                               "grpc: error unmarshalling request: malformed protobuf"},
    [KV_ERR_CANCELED] = {KV_GRPC_CANCELLED, "context canceled"},
    [KV_ERR_GRPC_SEND_TOO_LARGE] = {KV_GRPC_RESOURCE_EXHAUSTED,
                                    "grpc: trying to send message larger than max"},
    [KV_ERR_GRPC_HALF_CLOSED] = {KV_GRPC_INTERNAL, "grpc: half-closed without a request"},
    [KV_ERR_HEALTH_UNKNOWN_SERVICE] = {KV_GRPC_NOT_FOUND, "unknown service"},
    /* kvd-specific */
    [KV_ERR_KEY_TOO_LONG] = {KV_GRPC_INVALID_ARGUMENT, "etcdserver: key is too long"},
    [KV_ERR_INVALID_SORT] = {KV_GRPC_INVALID_ARGUMENT, "etcdserver: invalid sort option"},
    [KV_ERR_INVALID_LEASE_ID] = {KV_GRPC_INVALID_ARGUMENT, "etcdserver: invalid lease ID"},
    [KV_ERR_TOO_MANY_LEASES] = {KV_GRPC_RESOURCE_EXHAUSTED, "etcdserver: too many leases"},
    [KV_ERR_TOO_MANY_LEASE_KEYS] = {KV_GRPC_FAILED_PRECONDITION,
                                    "etcdserver: too many keys attached to lease"},
    [KV_ERR_KEEPALIVE_BACKLOG] = {KV_GRPC_RESOURCE_EXHAUSTED,
                                  "etcdserver: too many requests: keepalive responses not read"},
    [KV_ERR_TOO_MANY_REQUESTS_NOMEM] = {KV_GRPC_RESOURCE_EXHAUSTED,
                                        "etcdserver: too many requests: out of memory"},
    [KV_ERR_STORAGE] = {KV_GRPC_INTERNAL, "etcdserver: request failed: storage error"},
    [KV_ERR_REQUEST_NOMEM] = {KV_GRPC_INTERNAL, "etcdserver: request failed: out of memory"},
    [KV_ERR_REQUEST_INTERNAL] = {KV_GRPC_INTERNAL, "etcdserver: request failed: internal error"},
    [KV_ERR_APPLY_SCHEDULE] = {KV_GRPC_UNAVAILABLE,
                               "etcdserver: request failed: cannot schedule apply"},
    [KV_ERR_NOMEM] = {KV_GRPC_INTERNAL, "etcdserver: out of memory"},
    [KV_ERR_SNAPSHOT_FAILED] = {KV_GRPC_INTERNAL, "etcdserver: snapshot failed"},
    [KV_ERR_SNAPSHOT_CLOSED] = {KV_GRPC_UNAVAILABLE, "etcdserver: snapshot stream closed"},
    [KV_ERR_DEFRAG_FAILED] = {KV_GRPC_INTERNAL, "etcdserver: defragment failed"},
    [KV_ERR_KVD_NOMEM] = {KV_GRPC_OK, "kvd: out of memory"},
    [KV_ERR_WATCH_OPEN_NOMEM] = {KV_GRPC_RESOURCE_EXHAUSTED,
                                 "kvd: out of memory opening a watch stream"},
    [KV_ERR_RECORD_CHECKSUM] = {KV_GRPC_DATA_LOSS, "kvd: mvcc: stored record failed its checksum"},
    [KV_ERR_TXN_TOO_MANY_PAGES] = {KV_GRPC_RESOURCE_EXHAUSTED,
                                   "kvd: mvcc: request changes too many pages for one transaction"},
    [KV_ERR_EMPTY_INTERNAL_REQ] = {KV_GRPC_INVALID_ARGUMENT, "kvd: empty internal request"},
    [KV_ERR_DECODE_INTERNAL_REQ] = {KV_GRPC_INTERNAL, "kvd: cannot decode internal request"},
    [KV_ERR_DECODE_RANGE] = {KV_GRPC_INVALID_ARGUMENT, "kvd: cannot decode RangeRequest"},
    [KV_ERR_TOO_MANY_WATCH_STREAMS] = {KV_GRPC_RESOURCE_EXHAUSTED,
                                       "kvd: too many watch streams on this connection"},
    [KV_ERR_TOO_MANY_WATCHERS] = {KV_GRPC_OK, "kvd: too many watchers on this stream"},
    [KV_ERR_WATCH_SLOW_READER] = {KV_GRPC_RESOURCE_EXHAUSTED,
                                  "kvd: watch responses not read (--watch-send-buffer-bytes)"},
    [KV_ERR_UNKNOWN_ALARM] = {KV_GRPC_INVALID_ARGUMENT, "kvd: unknown alarm type"},
    [KV_ERR_TOO_MANY_ALARMS] = {KV_GRPC_RESOURCE_EXHAUSTED, "kvd: too many alarms"},
    [KV_ERR_TOO_MANY_MEMBERS] = {KV_GRPC_RESOURCE_EXHAUSTED, "kvd: too many members"},
    [KV_ERR_TOO_MANY_PEER_URLS] = {KV_GRPC_INVALID_ARGUMENT, "kvd: too many peer URLs"},
    /* etcd's MoveLeader returns a plain error here (not an rpctypes one): codes.Unknown */
    [KV_ERR_LEADER_TRANSFER_TIMEOUT] = {KV_GRPC_UNKNOWN,
                                        "etcdserver: request timed out, leader transfer took too "
                                        "long"},
    [KV_ERR_DEFRAG_CANCELED] = {KV_GRPC_UNAVAILABLE,
                                "etcdserver: defragment failed: Operation canceled"},
    [KV_ERR_MEMBERSHIP_NO_NODE] = {KV_GRPC_UNIMPLEMENTED,
                                   "kvd: membership changes need the raft node (not wired in yet)"},
    [KV_ERR_TRANSFER_NO_NODE] = {KV_GRPC_UNIMPLEMENTED,
                                 "kvd: leader transfer needs the raft node (not wired in yet)"},
    [KV_ERR_ELECTION_NOT_LEADER] = {KV_GRPC_UNKNOWN, "election: not leader"},
    [KV_ERR_ELECTION_NO_LEADER] = {KV_GRPC_UNKNOWN, "election: no leader"},
    [KV_ERR_ELECTION_MISSING_KEY] = {KV_GRPC_UNKNOWN, "\"leader\" field must be provided"},
};

static const kv_etcd_err_entry *entry(kv_etcd_err e)
{
    if ((int)e <= 0 || (int)e >= KV_ERR_COUNT || table[e].msg == NULL)
        return NULL;
    return &table[e];
}

kv_grpc_code kv_etcd_err_code(kv_etcd_err e)
{
    const kv_etcd_err_entry *t = entry(e);
    return t ? t->code : KV_GRPC_UNKNOWN;
}

uint32_t kv_etcd_err_peer_code(kv_etcd_err e)
{
    return e == KV_ERR_NONE ? 0u : (uint32_t)kv_etcd_err_code(e);
}

const char *kv_etcd_err_msg(kv_etcd_err e)
{
    const kv_etcd_err_entry *t = entry(e);
    return t ? t->msg : "kvd: unknown error";
}

char *kv_etcd_err_format(char *buf, size_t n, kv_etcd_err e, const char *detail)
{
    if (n > 0)
        snprintf(buf, n, "%s%s", kv_etcd_err_msg(e), detail ? detail : "");
    return buf;
}

kv_etcd_err kv_etcd_err_parse(const char *text, const char **detail)
{
    kv_etcd_err best = KV_ERR_NONE;
    size_t best_len = 0;
    if (text != NULL)
        for (int i = 1; i < KV_ERR_COUNT; i++) {
            const char *m = table[i].msg;
            size_t len = m ? strlen(m) : 0;
            if (len > best_len && strncmp(text, m, len) == 0) {
                best = (kv_etcd_err)i;
                best_len = len;
            }
        }
    if (detail)
        *detail = text ? text + best_len : NULL;
    return best;
}
