/*
 * lease.c - typed lease calls: grant, revoke, time-to-live, leases, keepalive_once.
 * (The shared keepalive stream and its scheduler live in keepalive.c.)
 */
#include "internal.h"
#include "pbconv.h"
#include "rpc.pb-c.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Pack m, call path, return the packed response in *resp. */
static int call_msg(kvc_client *c, const char *path, const ProtobufCMessage *m, int flags,
                    uint32_t timeout_ms, uint8_t **resp, size_t *len, kvc_error *err)
{
    if (!c)
        return kvc_fail(err, KVC_INVALID_ARGUMENT, "kvclient: invalid argument");
    size_t n = protobuf_c_message_get_packed_size(m);
    uint8_t *req = malloc(n ? n : 1);
    if (!req)
        return kvc_fail(err, KVC_RESOURCE_EXHAUSTED, "kvclient: out of memory");
    protobuf_c_message_pack(m, req);
    int rc = kvc_call_unary(c, path, req, n, resp, len, timeout_ms, flags, err);
    free(req);
    return rc;
}

#define DECODE_FAIL() kvc_fail(err, KVC_INTERNAL, "kvclient: cannot decode the response")

int kvc_lease_grant(kvc_client *c, int64_t ttl_s, int64_t id, int flags, uint32_t timeout_ms,
                    kvc_lease_grant_result *out, kvc_error *err)
{
    if (out)
        memset(out, 0, sizeof *out);
    Etcdserverpb__LeaseGrantRequest r = ETCDSERVERPB__LEASE_GRANT_REQUEST__INIT;
    r.ttl = ttl_s;
    r.id = id;
    uint8_t *resp;
    size_t len;
    int rc =
        call_msg(c, "/etcdserverpb.Lease/LeaseGrant", &r.base, flags, timeout_ms, &resp, &len, err);
    if (rc != 0)
        return rc;
    Etcdserverpb__LeaseGrantResponse *g =
        etcdserverpb__lease_grant_response__unpack(NULL, len, resp);
    free(resp);
    if (!g)
        return DECODE_FAIL();
    if (out) {
        kvc_header_from(&out->header, g->header);
        out->id = g->id;
        out->ttl = g->ttl;
        snprintf(out->error, sizeof out->error, "%s", g->error ? g->error : "");
    }
    etcdserverpb__lease_grant_response__free_unpacked(g, NULL);
    return 0;
}

int kvc_lease_revoke(kvc_client *c, int64_t id, uint32_t timeout_ms, kvc_header *out,
                     kvc_error *err)
{
    if (out)
        memset(out, 0, sizeof *out);
    Etcdserverpb__LeaseRevokeRequest r = ETCDSERVERPB__LEASE_REVOKE_REQUEST__INIT;
    r.id = id;
    uint8_t *resp;
    size_t len;
    int rc = call_msg(c, "/etcdserverpb.Lease/LeaseRevoke", &r.base, KVC_IDEMPOTENT, timeout_ms,
                      &resp, &len, err);
    if (rc != 0)
        return rc;
    Etcdserverpb__LeaseRevokeResponse *v =
        etcdserverpb__lease_revoke_response__unpack(NULL, len, resp);
    free(resp);
    if (!v)
        return DECODE_FAIL();
    if (out)
        kvc_header_from(out, v->header);
    etcdserverpb__lease_revoke_response__free_unpacked(v, NULL);
    return 0;
}

void kvc_lease_ttl_result_free(kvc_lease_ttl_result *r)
{
    if (!r)
        return;
    free(r->keys);
    free(r->key_lens);
    if (r->priv_)
        etcdserverpb__lease_time_to_live_response__free_unpacked(r->priv_, NULL);
    memset(r, 0, sizeof *r);
}

int kvc_lease_time_to_live(kvc_client *c, int64_t id, int with_keys, uint32_t timeout_ms,
                           kvc_lease_ttl_result *out, kvc_error *err)
{
    if (out)
        memset(out, 0, sizeof *out);
    Etcdserverpb__LeaseTimeToLiveRequest r = ETCDSERVERPB__LEASE_TIME_TO_LIVE_REQUEST__INIT;
    r.id = id;
    r.keys = with_keys != 0;
    uint8_t *resp;
    size_t len;
    int rc = call_msg(c, "/etcdserverpb.Lease/LeaseTimeToLive", &r.base, KVC_IDEMPOTENT, timeout_ms,
                      &resp, &len, err);
    if (rc != 0)
        return rc;
    Etcdserverpb__LeaseTimeToLiveResponse *t =
        etcdserverpb__lease_time_to_live_response__unpack(NULL, len, resp);
    free(resp);
    if (!t)
        return DECODE_FAIL();
    if (!out) {
        etcdserverpb__lease_time_to_live_response__free_unpacked(t, NULL);
        return 0;
    }
    kvc_header_from(&out->header, t->header);
    out->id = t->id;
    out->ttl = t->ttl;
    out->granted_ttl = t->grantedttl;
    out->priv_ = t;
    size_t n = t->n_keys;
    out->keys = calloc(n ? n : 1, sizeof *out->keys);
    out->key_lens = calloc(n ? n : 1, sizeof *out->key_lens);
    if (!out->keys || !out->key_lens) {
        kvc_lease_ttl_result_free(out);
        return kvc_fail(err, KVC_RESOURCE_EXHAUSTED, "kvclient: out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        out->keys[i] = t->keys[i].data;
        out->key_lens[i] = t->keys[i].len;
    }
    out->n_keys = n;
    return 0;
}

void kvc_lease_leases_result_free(kvc_lease_leases_result *r)
{
    if (!r)
        return;
    free(r->ids);
    memset(r, 0, sizeof *r);
}

int kvc_lease_leases(kvc_client *c, uint32_t timeout_ms, kvc_lease_leases_result *out,
                     kvc_error *err)
{
    if (out)
        memset(out, 0, sizeof *out);
    Etcdserverpb__LeaseLeasesRequest r = ETCDSERVERPB__LEASE_LEASES_REQUEST__INIT;
    uint8_t *resp;
    size_t len;
    int rc = call_msg(c, "/etcdserverpb.Lease/LeaseLeases", &r.base, KVC_IDEMPOTENT, timeout_ms,
                      &resp, &len, err);
    if (rc != 0)
        return rc;
    Etcdserverpb__LeaseLeasesResponse *l =
        etcdserverpb__lease_leases_response__unpack(NULL, len, resp);
    free(resp);
    if (!l)
        return DECODE_FAIL();
    rc = 0;
    if (out) {
        kvc_header_from(&out->header, l->header);
        out->ids = calloc(l->n_leases ? l->n_leases : 1, sizeof *out->ids);
        if (!out->ids) {
            rc = kvc_fail(err, KVC_RESOURCE_EXHAUSTED, "kvclient: out of memory");
        } else {
            for (size_t i = 0; i < l->n_leases; i++)
                out->ids[i] = l->leases[i]->id;
            out->n_ids = l->n_leases;
        }
    }
    etcdserverpb__lease_leases_response__free_unpacked(l, NULL);
    return rc;
}

int kvc_lease_keepalive_once(kvc_client *c, int64_t id, uint32_t timeout_ms,
                             kvc_keepalive_result *out, kvc_error *err)
{
    if (out)
        memset(out, 0, sizeof *out);
    /* One request with END_STREAM on a LeaseKeepAlive stream: the server answers once and
     * ends the stream, so the unary machinery (first message + trailers) fits. */
    Etcdserverpb__LeaseKeepAliveRequest r = ETCDSERVERPB__LEASE_KEEP_ALIVE_REQUEST__INIT;
    r.id = id;
    uint8_t *resp;
    size_t len;
    int rc = call_msg(c, "/etcdserverpb.Lease/LeaseKeepAlive", &r.base, KVC_IDEMPOTENT, timeout_ms,
                      &resp, &len, err);
    if (rc != 0)
        return rc;
    Etcdserverpb__LeaseKeepAliveResponse *k =
        etcdserverpb__lease_keep_alive_response__unpack(NULL, len, resp);
    free(resp);
    if (!k)
        return DECODE_FAIL();
    if (out) {
        kvc_header_from(&out->header, k->header);
        out->id = k->id;
        out->ttl = k->ttl;
    }
    etcdserverpb__lease_keep_alive_response__free_unpacked(k, NULL);
    return 0;
}
