/*
 * service_health: the standard gRPC health service, grpc.health.v1.Health/Check (as etcd
 * registers it): the whole server ("" service) is SERVING while the member knows a leader and
 * NOT_SERVING without one; any other service name is NOT_FOUND "unknown service" (grpc-go's
 * health server). The messages are tiny and hand-coded (grpc/health/v1/health.proto):
 *   HealthCheckRequest  { string service = 1; }
 *   HealthCheckResponse { ServingStatus status = 1; }  UNKNOWN 0, SERVING 1, NOT_SERVING 2
 */
#include "api/services.h"
#include "api/api.h"

#include "common/varint.h"

#include <stdint.h>
#include <string.h>

enum { HEALTH_SERVING = 1, HEALTH_NOT_SERVING = 2 };

static int read_varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    size_t k = kv_varint_get(*p, end, v);
    *p += k;
    return k ? 0 : -1;
}

/* The request's service name (*name, *nlen point into msg). Returns 0 or -1 (malformed). */
static int parse_request(const uint8_t *msg, size_t len, const uint8_t **name, size_t *nlen)
{
    const uint8_t *p = msg, *end = msg + len;
    *name = NULL;
    *nlen = 0;
    while (p < end) {
        uint64_t key, v;
        if (read_varint(&p, end, &key) != 0)
            return -1;
        switch (key & 7) {
        case 0:
            if (read_varint(&p, end, &v) != 0)
                return -1;
            break;
        case 1:
            if (end - p < 8)
                return -1;
            p += 8;
            break;
        case 5:
            if (end - p < 4)
                return -1;
            p += 4;
            break;
        case 2:
            if (read_varint(&p, end, &v) != 0 || v > (uint64_t)(end - p))
                return -1;
            if ((key >> 3) == 1) {
                *name = p;
                *nlen = (size_t)v;
            }
            p += v;
            break;
        default:
            return -1;
        }
    }
    return 0;
}

static void on_check(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    kv_api *s = kv_grpc_call_app(call);
    const uint8_t *name;
    size_t nlen;
    if (parse_request(msg, len, &name, &nlen) != 0) {
        kv_reply_etcd_err(call, KV_ERR_GRPC_UNMARSHAL);
        return;
    }
    if (nlen != 0) {
        kv_reply_etcd_err(call, KV_ERR_HEALTH_UNKNOWN_SERVICE);
        return;
    }
    kv_node_raft_status rs;
    kv_node_get_raft_status(s->node, &rs);
    uint8_t resp[2] = {0x08, rs.leader ? HEALTH_SERVING : HEALTH_NOT_SERVING};
    if (kv_grpc_call_send(call, resp, sizeof(resp)) < 0) {
        kv_reply_etcd_err(call, KV_ERR_TOO_MANY_REQUESTS);
        return;
    }
    kv_grpc_call_finish(call, KV_GRPC_OK, NULL);
}

const kv_grpc_method kv_service_health[] = {
    {"/grpc.health.v1.Health/Check", 0, on_check, NULL, NULL},
};
const size_t kv_service_health_len = sizeof(kv_service_health) / sizeof(kv_service_health[0]);
