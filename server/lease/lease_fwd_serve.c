/*
 * lease_fwd_serve: the leader side of forwarded lease requests (see lease_fwd.h). One
 * LeaseRenewBatch in, one LeaseRenewResp out, answered from the lessor's memory: a renewal
 * costs one heap sift and never goes through the log. The caller (lease_fwd.c on_req) holds
 * the frame until this member applied its commit index as of the frame's arrival, so the
 * answer reflects every write acknowledged before (docs/ARCHITECTURE.md "Leases").
 */
#include "lease/lease_fwd_serve.h"

#include "common/etcd_errors.h"
#include "lease/lessor.h"
#include "peer/peer_frames.h"
#include "raft.pb-c.h"

#include <errno.h>
#include <stdlib.h>

static void send_resp(kv_node *node, uint64_t to, Kvdraftpb__LeaseRenewResp *r)
{
    size_t len = kvdraftpb__lease_renew_resp__get_packed_size(r);
    uint8_t *buf = malloc(len ? len : 1);
    if (buf == NULL)
        return; /* the follower times the batch out */
    kvdraftpb__lease_renew_resp__pack(r, buf);
    /* The priority queue: the answer overtakes the appends queued for the follower. If it
     * is full (or the connection is down) the answer is dropped: the renewals were applied
     * here already, and the follower drops them silently at its time bound (open keepalive
     * streams stay open; lease_fwd.h), so nothing to retry. */
    (void)kv_node_peer_send_prio(node, to, KV_LEASE_FWD_RESP, buf, len);
    free(buf);
}

int kv_lease_fwd_serve(kv_node *node, kv_lessor *l, uint64_t from, const uint8_t *buf, size_t len,
                       uint64_t arrived_ms, int refuse)
{
    Kvdraftpb__LeaseRenewBatch *m = kvdraftpb__lease_renew_batch__unpack(NULL, len, buf);
    if (m == NULL)
        return -EBADMSG;
    Kvdraftpb__LeaseRenewResp r = KVDRAFTPB__LEASE_RENEW_RESP__INIT;
    r.seq = m->seq;
    int64_t *ttls = NULL, *rem = NULL, *granted = NULL;
    int rc = 0;
    /* a leader without a fresh quorum confirmation may have been deposed without knowing it
     * (node.h kv_node_lease_live; the call starts one): the follower asks again a timer
     * period later */
    if (refuse || !kv_node_is_leader(node) || !kv_lessor_is_primary(l) ||
        !kv_node_lease_live(node, arrived_ms)) {
        r.code = EAGAIN;
        r.msg = (char *)kv_etcd_err_msg(KV_ERR_NO_LEADER); /* informative: code decides */
        goto send;
    }
    ttls = malloc((m->n_ids ? m->n_ids : 1) * sizeof(*ttls));
    rem = malloc((m->n_ttl_ids ? m->n_ttl_ids : 1) * sizeof(*rem));
    granted = malloc((m->n_ttl_ids ? m->n_ttl_ids : 1) * sizeof(*granted));
    if (ttls == NULL || rem == NULL || granted == NULL) {
        rc = -ENOMEM;
        goto out; /* no answer: the follower times the batch out */
    }
    for (size_t i = 0; i < m->n_ids; i++) {
        int64_t ttl = 0;
        if (kv_lessor_renew(l, m->ids[i], &ttl) < 0)
            ttl = 0; /* unknown or expired: TTL 0, as etcd */
        ttls[i] = ttl;
    }
    for (size_t i = 0; i < m->n_ttl_ids; i++) {
        int64_t x = 0, g = 0;
        if (kv_lessor_time_to_live(l, m->ttl_ids[i], &x, &g) < 0)
            x = -1, g = 0; /* not found: TTL -1, as etcd */
        rem[i] = x;
        granted[i] = g;
    }
    r.ids = m->ids;
    r.n_ids = m->n_ids;
    r.ttls = ttls;
    r.n_ttls = m->n_ids;
    r.ttl_remaining = rem;
    r.n_ttl_remaining = m->n_ttl_ids;
    r.ttl_granted = granted;
    r.n_ttl_granted = m->n_ttl_ids;
    rc = (int)(m->n_ids + m->n_ttl_ids);
send:
    send_resp(node, from, &r);
out:
    free(ttls);
    free(rem);
    free(granted);
    kvdraftpb__lease_renew_batch__free_unpacked(m, NULL);
    return rc;
}

void kv_lease_fwd_serve_early(kv_lessor *l, const uint8_t *buf, size_t len)
{
    if (!kv_lessor_is_primary(l))
        return;
    Kvdraftpb__LeaseRenewBatch *m = kvdraftpb__lease_renew_batch__unpack(NULL, len, buf);
    if (m == NULL)
        return; /* answered EBADMSG when served */
    for (size_t i = 0; i < m->n_ids; i++) {
        int64_t ttl = 0;
        (void)kv_lessor_renew(l, m->ids[i], &ttl);
    }
    kvdraftpb__lease_renew_batch__free_unpacked(m, NULL);
}
