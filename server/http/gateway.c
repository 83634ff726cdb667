/* gateway.c - etcd 3.4's grpc-gateway routes and status mapping (see gateway.h). */
#include "http/gateway.h"

#include "rpc.pb-c.h"
#include "v3election.pb-c.h"
#include "v3lock.pb-c.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

typedef struct route_def {
    const char *http; /* after the version prefix */
    const ProtobufCServiceDescriptor *svc;
    const char *method;
    int streaming;
} route_def;

static const route_def routes[] = {
    {"kv/range", &etcdserverpb__kv__descriptor, "Range", 0},
    {"kv/put", &etcdserverpb__kv__descriptor, "Put", 0},
    {"kv/deleterange", &etcdserverpb__kv__descriptor, "DeleteRange", 0},
    {"kv/txn", &etcdserverpb__kv__descriptor, "Txn", 0},
    {"kv/compaction", &etcdserverpb__kv__descriptor, "Compact", 0},
    {"watch", &etcdserverpb__watch__descriptor, "Watch", 1},
    {"lease/grant", &etcdserverpb__lease__descriptor, "LeaseGrant", 0},
    {"lease/revoke", &etcdserverpb__lease__descriptor, "LeaseRevoke", 0},
    {"kv/lease/revoke", &etcdserverpb__lease__descriptor, "LeaseRevoke", 0},
    {"lease/keepalive", &etcdserverpb__lease__descriptor, "LeaseKeepAlive", 1},
    {"lease/timetolive", &etcdserverpb__lease__descriptor, "LeaseTimeToLive", 0},
    {"kv/lease/timetolive", &etcdserverpb__lease__descriptor, "LeaseTimeToLive", 0},
    {"lease/leases", &etcdserverpb__lease__descriptor, "LeaseLeases", 0},
    {"kv/lease/leases", &etcdserverpb__lease__descriptor, "LeaseLeases", 0},
    {"cluster/member/add", &etcdserverpb__cluster__descriptor, "MemberAdd", 0},
    {"cluster/member/remove", &etcdserverpb__cluster__descriptor, "MemberRemove", 0},
    {"cluster/member/update", &etcdserverpb__cluster__descriptor, "MemberUpdate", 0},
    {"cluster/member/list", &etcdserverpb__cluster__descriptor, "MemberList", 0},
    {"cluster/member/promote", &etcdserverpb__cluster__descriptor, "MemberPromote", 0},
    {"maintenance/alarm", &etcdserverpb__maintenance__descriptor, "Alarm", 0},
    {"maintenance/status", &etcdserverpb__maintenance__descriptor, "Status", 0},
    {"maintenance/defragment", &etcdserverpb__maintenance__descriptor, "Defragment", 0},
    /* etcd 3.4 annotates Hash and HashKV with the same path; Hash is registered first */
    {"maintenance/hash", &etcdserverpb__maintenance__descriptor, "Hash", 0},
    {"maintenance/snapshot", &etcdserverpb__maintenance__descriptor, "Snapshot", 1},
    {"maintenance/transfer-leadership", &etcdserverpb__maintenance__descriptor, "MoveLeader", 0},
    {"auth/enable", &etcdserverpb__auth__descriptor, "AuthEnable", 0},
    {"auth/disable", &etcdserverpb__auth__descriptor, "AuthDisable", 0},
    {"auth/authenticate", &etcdserverpb__auth__descriptor, "Authenticate", 0},
    {"auth/user/add", &etcdserverpb__auth__descriptor, "UserAdd", 0},
    {"auth/user/get", &etcdserverpb__auth__descriptor, "UserGet", 0},
    {"auth/user/list", &etcdserverpb__auth__descriptor, "UserList", 0},
    {"auth/user/delete", &etcdserverpb__auth__descriptor, "UserDelete", 0},
    {"auth/user/changepw", &etcdserverpb__auth__descriptor, "UserChangePassword", 0},
    {"auth/user/grant", &etcdserverpb__auth__descriptor, "UserGrantRole", 0},
    {"auth/user/revoke", &etcdserverpb__auth__descriptor, "UserRevokeRole", 0},
    {"auth/role/add", &etcdserverpb__auth__descriptor, "RoleAdd", 0},
    {"auth/role/get", &etcdserverpb__auth__descriptor, "RoleGet", 0},
    {"auth/role/list", &etcdserverpb__auth__descriptor, "RoleList", 0},
    {"auth/role/delete", &etcdserverpb__auth__descriptor, "RoleDelete", 0},
    {"auth/role/grant", &etcdserverpb__auth__descriptor, "RoleGrantPermission", 0},
    {"auth/role/revoke", &etcdserverpb__auth__descriptor, "RoleRevokePermission", 0},
    /* v3electionpb and v3lockpb (etcdserver/api/v3election, v3lock gw) */
    {"election/campaign", &v3electionpb__election__descriptor, "Campaign", 0},
    {"election/proclaim", &v3electionpb__election__descriptor, "Proclaim", 0},
    {"election/leader", &v3electionpb__election__descriptor, "Leader", 0},
    {"election/observe", &v3electionpb__election__descriptor, "Observe", 1},
    {"election/resign", &v3electionpb__election__descriptor, "Resign", 0},
    {"lock/lock", &v3lockpb__lock__descriptor, "Lock", 0},
    {"lock/unlock", &v3lockpb__lock__descriptor, "Unlock", 0},
};

int kv_gw_lookup(const char *path, kv_gw_route *r)
{
    static const char *const prefixes[] = {"/v3/", "/v3beta/", "/v3alpha/"};
    const char *rest = NULL;
    for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]) && !rest; i++)
        if (strncmp(path, prefixes[i], strlen(prefixes[i])) == 0)
            rest = path + strlen(prefixes[i]);
    if (!rest)
        return -ENOENT;
    for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
        if (strcmp(rest, routes[i].http) != 0)
            continue;
        const ProtobufCMethodDescriptor *m =
            protobuf_c_service_descriptor_get_method_by_name(routes[i].svc, routes[i].method);
        if (!m)
            return -ENOENT;
        snprintf(r->grpc_path, sizeof(r->grpc_path), "/%s/%s", routes[i].svc->name, m->name);
        r->in = m->input;
        r->out = m->output;
        r->streaming = routes[i].streaming;
        return 0;
    }
    return -ENOENT;
}

int kv_gw_http_status(int code)
{
    static const int map[] = {
        200, /* OK */
        408, /* CANCELLED */
        500, /* UNKNOWN */
        400, /* INVALID_ARGUMENT */
        504, /* DEADLINE_EXCEEDED */
        404, /* NOT_FOUND */
        409, /* ALREADY_EXISTS */
        403, /* PERMISSION_DENIED */
        429, /* RESOURCE_EXHAUSTED */
        412, /* FAILED_PRECONDITION (grpc-gateway v1.9, etcd 3.4's) */
        409, /* ABORTED */
        400, /* OUT_OF_RANGE */
        501, /* UNIMPLEMENTED */
        500, /* INTERNAL */
        503, /* UNAVAILABLE */
        500, /* DATA_LOSS */
        401, /* UNAUTHENTICATED */
    };
    if (code < 0 || (size_t)code >= sizeof(map) / sizeof(map[0]))
        return 500;
    return map[code];
}

const char *kv_gw_status_text(int st)
{
    switch (st) {
    case 200:
        return "OK";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 408:
        return "Request Timeout";
    case 409:
        return "Conflict";
    case 411:
        return "Length Required";
    case 412:
        return "Precondition Failed";
    case 413:
        return "Request Entity Too Large";
    case 429:
        return "Too Many Requests";
    case 431:
        return "Request Header Fields Too Large";
    case 501:
        return "Not Implemented";
    case 503:
        return "Service Unavailable";
    case 504:
        return "Gateway Timeout";
    case 505:
        return "HTTP Version Not Supported";
    default:
        return "Internal Server Error";
    }
}
