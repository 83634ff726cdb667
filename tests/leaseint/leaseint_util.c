/* leaseint_util: see leaseint_util.h. */
#include "leaseint_util.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rpc.pb-c.h"

void kvli_sleep_ms(unsigned ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

int kvli_connect(const kv_it_server *s, kv_it_grpc **out)
{
    return kv_it_grpc_open(out, "127.0.0.1", s->client_port, KVLI_CALL_TIMEOUT_MS);
}

/* Packs req, calls method, unpacks the answer with resp_desc into *resp (caller frees with
 * protobuf_c_message_free_unpacked). */
static int call(kv_it_grpc *c, const char *method, const ProtobufCMessage *req,
                const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **resp, char *msg,
                size_t cap)
{
    size_t len = protobuf_c_message_get_packed_size(req);
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf)
        return -ENOMEM;
    protobuf_c_message_pack(req, buf);
    uint8_t *out = NULL;
    size_t out_len = 0;
    int status = -1;
    char m[256] = "";
    int rc = kv_it_grpc_call(c, method, buf, len, &out, &out_len, KVLI_CALL_TIMEOUT_MS, &status, m,
                             sizeof(m));
    free(buf);
    if (msg && cap)
        strncpy(msg, m, cap - 1), msg[cap - 1] = 0;
    if (rc)
        return rc;
    *resp = protobuf_c_message_unpack(resp_desc, NULL, out_len, out);
    free(out);
    return *resp ? 0 : -EPROTO;
}

int kvli_grant(kv_it_grpc *c, int64_t ttl, int64_t id, int64_t *out_id, int64_t *out_ttl, char *msg,
               size_t cap)
{
    Etcdserverpb__LeaseGrantRequest r = ETCDSERVERPB__LEASE_GRANT_REQUEST__INIT;
    r.ttl = ttl;
    r.id = id;
    ProtobufCMessage *m = NULL;
    int rc = call(c, "/etcdserverpb.Lease/LeaseGrant", &r.base,
                  &etcdserverpb__lease_grant_response__descriptor, &m, msg, cap);
    if (rc)
        return rc;
    Etcdserverpb__LeaseGrantResponse *g = (Etcdserverpb__LeaseGrantResponse *)m;
    if (out_id)
        *out_id = g->id;
    if (out_ttl)
        *out_ttl = g->ttl;
    protobuf_c_message_free_unpacked(m, NULL);
    return 0;
}

int kvli_revoke(kv_it_grpc *c, int64_t id, char *msg, size_t cap)
{
    Etcdserverpb__LeaseRevokeRequest r = ETCDSERVERPB__LEASE_REVOKE_REQUEST__INIT;
    r.id = id;
    ProtobufCMessage *m = NULL;
    int rc = call(c, "/etcdserverpb.Lease/LeaseRevoke", &r.base,
                  &etcdserverpb__lease_revoke_response__descriptor, &m, msg, cap);
    if (rc == 0)
        protobuf_c_message_free_unpacked(m, NULL);
    return rc;
}

int kvli_ttl(kv_it_grpc *c, int64_t id, int keys, int64_t *ttl, int64_t *granted, size_t *n_keys,
             char *msg, size_t cap)
{
    Etcdserverpb__LeaseTimeToLiveRequest r = ETCDSERVERPB__LEASE_TIME_TO_LIVE_REQUEST__INIT;
    r.id = id;
    r.keys = keys ? 1 : 0;
    ProtobufCMessage *m = NULL;
    int rc = call(c, "/etcdserverpb.Lease/LeaseTimeToLive", &r.base,
                  &etcdserverpb__lease_time_to_live_response__descriptor, &m, msg, cap);
    if (rc)
        return rc;
    Etcdserverpb__LeaseTimeToLiveResponse *t = (Etcdserverpb__LeaseTimeToLiveResponse *)m;
    *ttl = t->ttl;
    if (granted)
        *granted = t->grantedttl;
    if (n_keys)
        *n_keys = t->n_keys;
    protobuf_c_message_free_unpacked(m, NULL);
    return 0;
}

int kvli_leases(kv_it_grpc *c, size_t *n, int64_t *ids, size_t ids_cap, char *msg, size_t cap)
{
    Etcdserverpb__LeaseLeasesRequest r = ETCDSERVERPB__LEASE_LEASES_REQUEST__INIT;
    ProtobufCMessage *m = NULL;
    int rc = call(c, "/etcdserverpb.Lease/LeaseLeases", &r.base,
                  &etcdserverpb__lease_leases_response__descriptor, &m, msg, cap);
    if (rc)
        return rc;
    Etcdserverpb__LeaseLeasesResponse *l = (Etcdserverpb__LeaseLeasesResponse *)m;
    *n = l->n_leases;
    for (size_t i = 0; ids && i < l->n_leases && i < ids_cap; i++)
        ids[i] = l->leases[i]->id;
    protobuf_c_message_free_unpacked(m, NULL);
    return 0;
}

int kvli_put(kv_it_grpc *c, const char *key, const char *val, int64_t lease, char *msg, size_t cap)
{
    Etcdserverpb__PutRequest r = ETCDSERVERPB__PUT_REQUEST__INIT;
    r.key.data = (uint8_t *)key;
    r.key.len = strlen(key);
    r.value.data = (uint8_t *)val;
    r.value.len = strlen(val);
    r.lease = lease;
    ProtobufCMessage *m = NULL;
    int rc = call(c, "/etcdserverpb.KV/Put", &r.base, &etcdserverpb__put_response__descriptor, &m,
                  msg, cap);
    if (rc == 0)
        protobuf_c_message_free_unpacked(m, NULL);
    return rc;
}

int kvli_count(kv_it_grpc *c, const char *key, int prefix, int64_t *count, char *msg, size_t cap)
{
    Etcdserverpb__RangeRequest r = ETCDSERVERPB__RANGE_REQUEST__INIT;
    size_t klen = strlen(key);
    uint8_t end[256];
    r.key.data = (uint8_t *)key;
    r.key.len = klen;
    if (prefix) {
        if (klen == 0 || klen > sizeof(end))
            return -EINVAL;
        memcpy(end, key, klen);
        end[klen - 1]++; /* test prefixes never end in 0xff */
        r.range_end.data = end;
        r.range_end.len = klen;
    }
    r.count_only = 1;
    ProtobufCMessage *m = NULL;
    int rc = call(c, "/etcdserverpb.KV/Range", &r.base, &etcdserverpb__range_response__descriptor,
                  &m, msg, cap);
    if (rc)
        return rc;
    *count = ((Etcdserverpb__RangeResponse *)m)->count;
    protobuf_c_message_free_unpacked(m, NULL);
    return 0;
}

int kvli_metric(const kv_it_server *s, const char *series, double *value)
{
    int status = 0;
    char *body = NULL;
    int rc = kv_it_http_get(s->metrics_port, "/metrics", 3000, &status, &body);
    if (rc == 0)
        rc = status == 200 ? kv_it_metric_value(body, series, value) : -EIO;
    free(body);
    return rc;
}
