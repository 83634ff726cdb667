/* apply_lease: LeaseGrant, LeaseRevoke and LeaseCheckpoint entries (etcd 3.4 apply.go and
 * lease/lessor.go) on the keyspace's lease table (mvcc/keyspace.h). */
#include <errno.h>
#include <stdlib.h>

#include "apply/apply_int.h"

int kv_apply_lease_exists(kv_actx *a, int64_t id)
{
    int rc = kv_ks_lease_get(a->ks, id, NULL);
    if (rc == -ENOENT) {
        kv_apply_err(a->res, KV_ERR_LEASE_NOT_FOUND);
        return 1;
    }
    return rc;
}

int kv_apply_lease_grant(kv_actx *a, const Etcdserverpb__LeaseGrantRequest *g,
                         ProtobufCMessage **msg, Etcdserverpb__ResponseHeader **hdr)
{
    int rc = kv_ks_lease_grant(a->ks, g->id, g->ttl);
    switch (rc) {
    case 0:
        break;
    case -EINVAL: /* id 0 */
        kv_apply_err(a->res, KV_ERR_LEASE_NOT_FOUND);
        return 1;
    case -ERANGE:
        kv_apply_err(a->res, KV_ERR_LEASE_TTL_TOO_LARGE);
        return 1;
    case -EEXIST:
        kv_apply_err(a->res, KV_ERR_LEASE_EXIST);
        return 1;
    default:
        return rc;
    }
    if (a->quiet)
        return 0;
    Etcdserverpb__LeaseGrantResponse *resp = malloc(sizeof *resp);
    if (!resp)
        return -ENOMEM;
    etcdserverpb__lease_grant_response__init(resp);
    resp->id = g->id;
    resp->ttl = g->ttl;
    if (!(resp->header = kv_apply_header(kv_ks_rev(a->ks)))) {
        free(resp);
        return -ENOMEM;
    }
    *msg = &resp->base;
    *hdr = resp->header;
    return 0;
}

int kv_apply_lease_revoke(kv_actx *a, const Etcdserverpb__LeaseRevokeRequest *r,
                          ProtobufCMessage **msg, Etcdserverpb__ResponseHeader **hdr)
{
    int rc = kv_ks_lease_revoke(a->ks, r->id);
    if (rc == -ENOENT) {
        kv_apply_err(a->res, KV_ERR_LEASE_NOT_FOUND);
        return 1;
    }
    if (rc || a->quiet)
        return rc;
    Etcdserverpb__LeaseRevokeResponse *resp = malloc(sizeof *resp);
    if (!resp)
        return -ENOMEM;
    etcdserverpb__lease_revoke_response__init(resp);
    if (!(resp->header = kv_apply_header(kv_ks_end_rev(a->ks)))) {
        free(resp);
        return -ENOMEM;
    }
    *msg = &resp->base;
    *hdr = resp->header;
    return 0;
}

int kv_apply_lease_checkpoint(kv_actx *a, const Etcdserverpb__LeaseCheckpointRequest *r,
                              ProtobufCMessage **msg, Etcdserverpb__ResponseHeader **hdr)
{
    for (size_t i = 0; i < r->n_checkpoints; i++) {
        const Etcdserverpb__LeaseCheckpoint *cp = r->checkpoints[i];
        int rc = kv_ks_lease_checkpoint(a->ks, cp->id, cp->remaining_ttl);
        if (rc == -ENOENT)
            continue; /* as etcd: checkpoints of unknown leases are ignored */
        if (rc)
            return rc;
    }
    if (a->quiet)
        return 0;
    Etcdserverpb__LeaseCheckpointResponse *resp = malloc(sizeof *resp);
    if (!resp)
        return -ENOMEM;
    etcdserverpb__lease_checkpoint_response__init(resp);
    if (!(resp->header = kv_apply_header(kv_ks_rev(a->ks)))) {
        free(resp);
        return -ENOMEM;
    }
    *msg = &resp->base;
    *hdr = resp->header;
    return 0;
}
