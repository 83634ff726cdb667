/*
 * service_election: v3electionpb.Election, etcd 3.4's election service
 * (etcdserver/api/v3election/election.go over clientv3/concurrency/election.go), served on
 * the client port and through the JSON gateway (/v3/election/...). docs/ARCHITECTURE.md
 * "Election and lock" has the model; the key-value steps go through conc_client.h.
 *
 *   Campaign  conc_acquire.h (waits until the caller leads)
 *   Proclaim  If(CreateRevision(leader.key) == leader.rev) Then(Put leader.key value
 *             lease=leader.lease); failed: UNKNOWN "election: not leader"
 *   Resign    If(CreateRevision(leader.key) == leader.rev) Then(Delete leader.key); OK even
 *             if the compare failed (as etcd)
 *   Leader    the prefix's first-created key (a linearizable Range); none: UNKNOWN
 *             "election: no leader"
 *   Observe   conc_observe.c
 * Proclaim/Resign without leader: UNKNOWN "\"leader\" field must be provided" (etcd's
 * ErrMissingLeaderKey, a plain Go error). Malformed requests: INTERNAL (grpc-go's unmarshal
 * error). Under auth: Campaign needs READ on the prefix and WRITE on the key; Proclaim and
 * Resign READ and WRITE on leader.key; Leader and Observe READ on the prefix.
 * Difference: Proclaim with leader.lease 0 puts the key without a lease (etcd grants an
 * unused 60 s lease for its session and attaches the key to it).
 */
#include "api/conc_acquire.h"
#include "api/conc_observe.h"
#include "api/conc_unary.h"
#include "api/conc_util.h"
#include "api/quota.h"
#include "api/services.h"
#include "auth/auth_perm.h"
#include "pb/pb_strip.h"
#include "api/api.h"

#include "v3election.pb-c.h"

#include <stdlib.h>
#include <string.h>

static void reply_malformed(kv_grpc_call *call)
{
    kv_reply_etcd_err(call, KV_ERR_GRPC_UNMARSHAL);
}

static void on_campaign(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    V3electionpb__CampaignRequest *r = (V3electionpb__CampaignRequest *)kv_pb_unpack(
        &v3electionpb__campaign_request__descriptor, msg, len);
    if (r == NULL) {
        reply_malformed(call);
        return;
    }
    kv_conc_acquire(call, KV_CONC_CAMPAIGN, r->name.data, r->name.len, r->value.data, r->value.len,
                    r->lease, len);
    v3electionpb__campaign_request__free_unpacked(r, NULL);
}

static void answer_header_txn(kv_grpc_call *call, const kv_result *res, int must_succeed,
                              int proclaim)
{
    Etcdserverpb__TxnResponse *t =
        etcdserverpb__txn_response__unpack(NULL, res->resp_len, res->resp);
    if (t == NULL) {
        kv_reply_step_err(call, KV_ERR_STORAGE, NULL);
        return;
    }
    if (must_succeed && !t->succeeded) {
        kv_reply_etcd_err(call, KV_ERR_ELECTION_NOT_LEADER);
    } else if (proclaim) {
        V3electionpb__ProclaimResponse r = V3ELECTIONPB__PROCLAIM_RESPONSE__INIT;
        r.header = t->header;
        kv_reply_message(call, &r.base);
    } else {
        V3electionpb__ResignResponse r = V3ELECTIONPB__RESIGN_RESPONSE__INIT;
        r.header = t->header;
        kv_reply_message(call, &r.base);
    }
    etcdserverpb__txn_response__free_unpacked(t, NULL);
}

static void answer_proclaim(kv_grpc_call *call, const kv_result *res)
{
    answer_header_txn(call, res, 1, 1);
}

static void answer_resign(kv_grpc_call *call, const kv_result *res)
{
    answer_header_txn(call, res, 0, 0);
}

/* Proclaim (value != NULL) or Resign: a txn guarded by the leader key's creation revision. */
static void leader_txn(kv_grpc_call *call, const V3electionpb__LeaderKey *lk,
                       const ProtobufCBinaryData *value)
{
    kv_conc_perm perms[] = {
        {KV_PERM_READ, lk->key.data, lk->key.len, NULL, 0},
        {KV_PERM_WRITE, lk->key.data, lk->key.len, NULL, 0},
    };
    kv_conc_ident id;
    if (kv_conc_authorize(call, perms, 2, &id))
        return;
    Etcdserverpb__Compare cmp = ETCDSERVERPB__COMPARE__INIT;
    cmp.result = ETCDSERVERPB__COMPARE__COMPARE_RESULT__EQUAL;
    cmp.target = ETCDSERVERPB__COMPARE__COMPARE_TARGET__CREATE;
    cmp.key = lk->key;
    cmp.target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_CREATE_REVISION;
    cmp.create_revision = lk->rev;
    Etcdserverpb__Compare *cmps[] = {&cmp};
    Etcdserverpb__PutRequest put = ETCDSERVERPB__PUT_REQUEST__INIT;
    Etcdserverpb__DeleteRangeRequest del = ETCDSERVERPB__DELETE_RANGE_REQUEST__INIT;
    Etcdserverpb__RequestOp op = ETCDSERVERPB__REQUEST_OP__INIT;
    if (value) {
        put.key = lk->key;
        put.value = *value;
        put.lease = lk->lease;
        op.request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT;
        op.request_put = &put;
    } else {
        del.key = lk->key;
        op.request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_DELETE_RANGE;
        op.request_delete_range = &del;
    }
    Etcdserverpb__RequestOp *ops[] = {&op};
    Etcdserverpb__TxnRequest t = ETCDSERVERPB__TXN_REQUEST__INIT;
    t.n_compare = 1;
    t.compare = cmps;
    t.n_success = 1;
    t.success = ops;
    kv_conc_unary(call, &id, KV_IREQ_TXN, &t.base, value ? answer_proclaim : answer_resign);
}

static void on_proclaim(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    kv_api *s = kv_grpc_call_app(call);
    V3electionpb__ProclaimRequest *r = (V3electionpb__ProclaimRequest *)kv_pb_unpack(
        &v3electionpb__proclaim_request__descriptor, msg, len);
    if (r == NULL) {
        reply_malformed(call);
        return;
    }
    if (r->leader == NULL)
        kv_reply_etcd_err(call, KV_ERR_ELECTION_MISSING_KEY);
    else if (!kv_quota_admit(s, call, KV_IREQ_TXN, len))
        leader_txn(call, r->leader, &r->value);
    v3electionpb__proclaim_request__free_unpacked(r, NULL);
}

static void on_resign(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    V3electionpb__ResignRequest *r = (V3electionpb__ResignRequest *)kv_pb_unpack(
        &v3electionpb__resign_request__descriptor, msg, len);
    if (r == NULL) {
        reply_malformed(call);
        return;
    }
    if (r->leader == NULL)
        kv_reply_etcd_err(call, KV_ERR_ELECTION_MISSING_KEY);
    else if (!kv_quota_admit(kv_grpc_call_app(call), call, KV_IREQ_TXN, len)) /* log budget */
        leader_txn(call, r->leader, NULL);
    v3electionpb__resign_request__free_unpacked(r, NULL);
}

static void answer_leader(kv_grpc_call *call, const kv_result *res)
{
    Etcdserverpb__RangeResponse *rr =
        etcdserverpb__range_response__unpack(NULL, res->resp_len, res->resp);
    if (rr == NULL) {
        kv_reply_step_err(call, KV_ERR_STORAGE, NULL);
        return;
    }
    if (rr->n_kvs == 0) {
        kv_reply_etcd_err(call, KV_ERR_ELECTION_NO_LEADER);
    } else {
        V3electionpb__LeaderResponse r = V3ELECTIONPB__LEADER_RESPONSE__INIT;
        r.header = rr->header;
        r.kv = rr->kvs[0];
        kv_reply_message(call, &r.base);
    }
    etcdserverpb__range_response__free_unpacked(rr, NULL);
}

static void on_leader(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    V3electionpb__LeaderRequest *r = (V3electionpb__LeaderRequest *)kv_pb_unpack(
        &v3electionpb__leader_request__descriptor, msg, len);
    uint8_t *pfx = NULL, *end = NULL;
    if (r == NULL) {
        reply_malformed(call);
        return;
    }
    if (kv_conc_prefix(r->name.data, r->name.len, &pfx, &end) < 0) {
        kv_reply_etcd_err(call, KV_ERR_REQUEST_NOMEM);
        goto out;
    }
    size_t plen = r->name.len + 1;
    kv_conc_perm perm = {KV_PERM_READ, pfx, plen, end, plen};
    kv_conc_ident id;
    if (kv_conc_authorize(call, &perm, 1, &id))
        goto out;
    /* clientv3.WithFirstCreate: the prefix by creation revision ascending, limit 1 */
    Etcdserverpb__RangeRequest rr = ETCDSERVERPB__RANGE_REQUEST__INIT;
    rr.key.data = pfx;
    rr.key.len = plen;
    rr.range_end.data = end;
    rr.range_end.len = plen;
    rr.limit = 1;
    rr.sort_order = ETCDSERVERPB__RANGE_REQUEST__SORT_ORDER__ASCEND;
    rr.sort_target = ETCDSERVERPB__RANGE_REQUEST__SORT_TARGET__CREATE;
    kv_conc_unary(call, &id, 0, &rr.base, answer_leader);
out:
    free(pfx);
    free(end);
    v3electionpb__leader_request__free_unpacked(r, NULL);
}

const kv_grpc_method kv_service_election[] = {
    {"/v3electionpb.Election/Campaign", 0, on_campaign, NULL, kv_conc_acquire_cancel},
    {"/v3electionpb.Election/Proclaim", 0, on_proclaim, NULL, kv_conc_unary_cancel},
    {"/v3electionpb.Election/Leader", 0, on_leader, NULL, kv_conc_unary_cancel},
    {"/v3electionpb.Election/Observe", 1, kv_conc_observe_message, kv_conc_observe_half_close,
     kv_conc_observe_cancel},
    {"/v3electionpb.Election/Resign", 0, on_resign, NULL, kv_conc_unary_cancel},
};
const size_t kv_service_election_len = sizeof(kv_service_election) / sizeof(kv_service_election[0]);
