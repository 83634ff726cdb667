/*
 * test_etcd_errors.c - the one gRPC status enum (common/status.h) and the one etcd error table
 * (common/etcd_errors.h): every entry is filled, well-formed and unique, and the etcd rows match
 * etcd 3.4's rpctypes/error.go byte for byte (the expected strings below are typed from that
 * file, not taken from the table under test).
 */
#include "common/etcd_errors.h"
#include "common/etcd_status.h"
#include "common/status.h"
#include "grpc/grpc_wire.h"

#include <criterion/criterion.h>
#include <stdbool.h>
#include <string.h>

static bool has_prefix(const char *s, const char *p)
{
    return strncmp(s, p, strlen(p)) == 0;
}

/* Entries that are WatchResponse cancel reasons, never an RPC status: code KV_GRPC_OK. */
static bool is_cancel_reason(kv_etcd_err e)
{
    return e == KV_ERR_WATCHER_RANGE_EMPTY || e == KV_ERR_WATCHER_DUPLICATE_ID ||
           e == KV_ERR_KVD_NOMEM || e == KV_ERR_TOO_MANY_WATCHERS;
}

Test(etcd_errors, status_enum_is_grpcs)
{
    cr_assert_eq(KV_GRPC_CODE_COUNT, 17);
    cr_assert_eq(KV_GRPC_OK, 0);
    cr_assert_eq(KV_GRPC_CANCELLED, 1);
    cr_assert_eq(KV_GRPC_INVALID_ARGUMENT, 3);
    cr_assert_eq(KV_GRPC_RESOURCE_EXHAUSTED, 8);
    cr_assert_eq(KV_GRPC_FAILED_PRECONDITION, 9);
    cr_assert_eq(KV_GRPC_OUT_OF_RANGE, 11);
    cr_assert_eq(KV_GRPC_UNAVAILABLE, 14);
    cr_assert_eq(KV_GRPC_DATA_LOSS, 15);
    cr_assert_eq(KV_GRPC_UNAUTHENTICATED, 16);
    /* the transport's names agree with the enum */
    cr_assert_str_eq(kv_grpc_code_name(KV_GRPC_OK), "OK");
    cr_assert_str_eq(kv_grpc_code_name(KV_GRPC_NOT_FOUND), "NOT_FOUND");
    cr_assert_str_eq(kv_grpc_code_name(KV_GRPC_UNAVAILABLE), "UNAVAILABLE");
    cr_assert_str_eq(kv_grpc_code_name(KV_GRPC_UNAUTHENTICATED), "UNAUTHENTICATED");
}

Test(etcd_errors, every_entry_is_filled_and_well_formed)
{
    for (int i = 1; i < KV_ERR_COUNT; i++) {
        kv_etcd_err e = (kv_etcd_err)i;
        const char *m = kv_etcd_err_msg(e);
        int code = kv_etcd_err_code(e);
        cr_assert_not_null(m);
        cr_assert_str_neq(m, "kvd: unknown error", "entry %d has no row in the table", i);
        cr_assert(code >= 0 && code < KV_GRPC_CODE_COUNT, "entry %d: code %d", i, code);
        if (is_cancel_reason(e))
            cr_assert_eq(code, KV_GRPC_OK, "cancel reason %d (%s) has code %d", i, m, code);
        else
            cr_assert_neq(code, KV_GRPC_OK, "entry %d (%s) is an error with code OK", i, m);
        /* the documented prefixes (etcd_errors.h) */
        bool ok = has_prefix(m, "etcdserver: ") || has_prefix(m, "mvcc: ") ||
                  has_prefix(m, "grpc: ") || has_prefix(m, "kvd: ") || has_prefix(m, "auth: ") ||
                  has_prefix(m, "election: ") || strcmp(m, "context canceled") == 0 ||
                  strcmp(m, "unknown service") == 0 ||
                  strcmp(m, "\"leader\" field must be provided") == 0;
        cr_assert(ok, "entry %d: message \"%s\" lacks a documented prefix", i, m);
        cr_assert(strlen(m) < 120, "entry %d: message too long for kv_result.msg + detail", i);
    }
}

Test(etcd_errors, messages_are_unique)
{
    for (int i = 1; i < KV_ERR_COUNT; i++)
        for (int j = i + 1; j < KV_ERR_COUNT; j++)
            cr_assert_str_neq(kv_etcd_err_msg((kv_etcd_err)i), kv_etcd_err_msg((kv_etcd_err)j),
                              "entries %d and %d share a message", i, j);
}

Test(etcd_errors, etcd_rows_are_verbatim)
{
    static const struct {
        kv_etcd_err e;
        int code;
        const char *msg;
    } want[] = {
        {KV_ERR_EMPTY_KEY, 3, "etcdserver: key is not provided"},
        {KV_ERR_KEY_NOT_FOUND, 3, "etcdserver: key not found"},
        {KV_ERR_TOO_MANY_OPS, 3, "etcdserver: too many operations in txn request"},
        {KV_ERR_DUPLICATE_KEY, 3, "etcdserver: duplicate key given in txn request"},
        {KV_ERR_COMPACTED, 11, "etcdserver: mvcc: required revision has been compacted"},
        {KV_ERR_FUTURE_REV, 11, "etcdserver: mvcc: required revision is a future revision"},
        {KV_ERR_NO_SPACE, 8, "etcdserver: mvcc: database space exceeded"},
        {KV_ERR_LEASE_NOT_FOUND, 5, "etcdserver: requested lease not found"},
        {KV_ERR_LEASE_EXIST, 9, "etcdserver: lease already exists"},
        {KV_ERR_LEASE_TTL_TOO_LARGE, 11, "etcdserver: too large lease TTL"},
        {KV_ERR_WATCH_CANCELED, 1, "etcdserver: watch canceled"},
        {KV_ERR_MEMBER_EXIST, 9, "etcdserver: member ID already exist"},
        {KV_ERR_PEER_URL_EXIST, 9, "etcdserver: Peer URLs already exists"},
        {KV_ERR_MEMBER_NOT_FOUND, 5, "etcdserver: member not found"},
        {KV_ERR_MEMBER_NOT_LEARNER, 9, "etcdserver: can only promote a learner member"},
        {KV_ERR_LEARNER_NOT_READY, 9,
         "etcdserver: can only promote a learner member which is in sync with leader"},
        {KV_ERR_TOO_MANY_LEARNERS, 9, "etcdserver: too many learner members in cluster"},
        {KV_ERR_REQUEST_TOO_LARGE, 3, "etcdserver: request is too large"},
        {KV_ERR_TOO_MANY_REQUESTS, 8, "etcdserver: too many requests"},
        {KV_ERR_PERMISSION_DENIED, 7, "etcdserver: permission denied"},
        {KV_ERR_INVALID_AUTH_TOKEN, 16, "etcdserver: invalid auth token"},
        {KV_ERR_AUTH_FAILED, 3, "etcdserver: authentication failed, invalid user ID or password"},
        {KV_ERR_NO_LEADER, 14, "etcdserver: no leader"},
        {KV_ERR_NOT_LEADER, 9, "etcdserver: not leader"},
        {KV_ERR_LEADER_CHANGED, 14, "etcdserver: leader changed"},
        {KV_ERR_NOT_CAPABLE, 14, "etcdserver: not capable"},
        {KV_ERR_STOPPED, 14, "etcdserver: server stopped"},
        {KV_ERR_TIMEOUT, 14, "etcdserver: request timed out"},
        {KV_ERR_TIMEOUT_DUE_TO_LEADER_FAIL, 14,
         "etcdserver: request timed out, possibly due to previous leader failure"},
        {KV_ERR_TIMEOUT_DUE_TO_CONNECTION_LOST, 14,
         "etcdserver: request timed out, possibly due to connection lost"},
        {KV_ERR_UNHEALTHY, 14, "etcdserver: unhealthy cluster"},
        {KV_ERR_CORRUPT, 15, "etcdserver: corrupt cluster"},
        {KV_ERR_NOT_SUPPORTED_FOR_LEARNER, 14, "etcdserver: rpc not supported for learner"},
        {KV_ERR_BAD_LEADER_TRANSFEREE, 9, "etcdserver: bad leader transferee"},
        {KV_ERR_WATCHER_RANGE_EMPTY, 0, "mvcc: watcher range is empty"},
        {KV_ERR_GRPC_UNMARSHAL, 13, "grpc: error unmarshalling request: malformed protobuf"},
        {KV_ERR_CANCELED, 1, "context canceled"},
        {KV_ERR_ELECTION_NOT_LEADER, 2, "election: not leader"},
        {KV_ERR_ELECTION_NO_LEADER, 2, "election: no leader"},
        {KV_ERR_ELECTION_MISSING_KEY, 2, "\"leader\" field must be provided"},
        /* kvd rows whose text clients saw before errors became values (same bytes) */
        {KV_ERR_UNKNOWN_ALARM, 3, "kvd: unknown alarm type"},
        {KV_ERR_TOO_MANY_ALARMS, 8, "kvd: too many alarms"},
        {KV_ERR_TOO_MANY_MEMBERS, 8, "kvd: too many members"},
        {KV_ERR_TOO_MANY_PEER_URLS, 3, "kvd: too many peer URLs"},
        {KV_ERR_LEADER_TRANSFER_TIMEOUT, 2,
         "etcdserver: request timed out, leader transfer took too long"},
        {KV_ERR_DEFRAG_CANCELED, 14, "etcdserver: defragment failed: Operation canceled"},
        {KV_ERR_GRPC_SEND_TOO_LARGE, 8, "grpc: trying to send message larger than max"},
        {KV_ERR_GRPC_HALF_CLOSED, 13, "grpc: half-closed without a request"},
        {KV_ERR_HEALTH_UNKNOWN_SERVICE, 5, "unknown service"},
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        cr_assert_eq(kv_etcd_err_code(want[i].e), want[i].code, "%s", want[i].msg);
        cr_assert_str_eq(kv_etcd_err_msg(want[i].e), want[i].msg);
    }
}

Test(etcd_errors, out_of_range_is_unknown)
{
    const int bad[] = {0, -1, KV_ERR_COUNT, KV_ERR_COUNT + 100};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cr_assert_eq(kv_etcd_err_code((kv_etcd_err)bad[i]), KV_GRPC_UNKNOWN);
        cr_assert_str_eq(kv_etcd_err_msg((kv_etcd_err)bad[i]), "kvd: unknown error");
    }
}

Test(etcd_errors, format_appends_the_detail)
{
    char buf[KV_ETCD_ERR_TEXT_MAX];
    cr_assert_str_eq(kv_etcd_err_format(buf, sizeof buf, KV_ERR_TOO_MANY_MEMBERS, " (limit 64)"),
                     "kvd: too many members (limit 64)");
    cr_assert_str_eq(kv_etcd_err_format(buf, sizeof buf, KV_ERR_NO_LEADER, NULL),
                     "etcdserver: no leader");
    cr_assert_str_eq(kv_etcd_err_format(buf, 10, KV_ERR_NO_LEADER, ""), "etcdserve");
}

/* Peer frames carry {code, text}: the text gives the value back, detail included. */
Test(etcd_errors, parse_inverts_format)
{
    char buf[KV_ETCD_ERR_TEXT_MAX];
    for (int i = 1; i < KV_ERR_COUNT; i++) {
        const char *detail = NULL;
        kv_etcd_err_format(buf, sizeof buf, (kv_etcd_err)i, NULL);
        cr_assert_eq(kv_etcd_err_parse(buf, &detail), i, "%s", buf);
        cr_assert_str_eq(detail, "");
        kv_etcd_err_format(buf, sizeof buf, (kv_etcd_err)i, " (limit 7)");
        cr_assert_eq(kv_etcd_err_parse(buf, &detail), i, "%s", buf);
        cr_assert_str_eq(detail, " (limit 7)");
    }
    /* longest prefix: a longer row that starts with a shorter one */
    cr_assert_eq(kv_etcd_err_parse("etcdserver: too many requests: out of memory", NULL),
                 KV_ERR_TOO_MANY_REQUESTS_NOMEM);
    cr_assert_eq(kv_etcd_err_parse("etcdserver: defragment failed: No space left on device", NULL),
                 KV_ERR_DEFRAG_FAILED);
    cr_assert_eq(kv_etcd_err_parse("no such text", NULL), KV_ERR_NONE);
    cr_assert_eq(kv_etcd_err_parse(NULL, NULL), KV_ERR_NONE);
}

/* The code field of peer frames: what members before errors-as-values used as the status. */
Test(etcd_errors, peer_code_is_the_rows_status)
{
    cr_assert_eq(kv_etcd_err_peer_code(KV_ERR_NONE), 0u);
    for (int i = 1; i < KV_ERR_COUNT; i++)
        cr_assert_eq(kv_etcd_err_peer_code((kv_etcd_err)i), (uint32_t)kv_etcd_err_code(i));
    cr_assert_eq(kv_etcd_err_peer_code(KV_ERR_TOO_MANY_REQUESTS), 8u);
    cr_assert_eq(kv_etcd_err_peer_code(KV_ERR_LEADER_CHANGED), 14u);
}
