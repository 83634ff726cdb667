/*
 * cluster_election: the v3election and v3lock services in a 3-member cluster (kvd, or etcd
 * with KV_TEST_SERVER=etcd): a Campaign through one follower leads; a Campaign through another
 * member waits until the leader resigns through a third member, then leads; Leader answers
 * the new leader on every member right after (linearizable reads on followers); a Lock
 * through one member waits for the Unlock through another.
 */
#include "cl_util.h"
#include "grpc_raw.h"
#include "v3election.pb-c.h"
#include "v3lock.pb-c.h"

#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CALL_MS 10000

static ProtobufCBinaryData bin(const char *s)
{
    ProtobufCBinaryData b = {strlen(s), (uint8_t *)s};
    return b;
}

static ProtobufCMessage *unary(kv_it_grpc *g, const char *path, const ProtobufCMessage *m,
                               const ProtobufCMessageDescriptor *d)
{
    uint8_t buf[512], *r = NULL;
    size_t n = protobuf_c_message_get_packed_size(m), rlen = 0;
    cr_assert(n <= sizeof(buf));
    protobuf_c_message_pack(m, buf);
    int status = -1;
    char msg[256] = "";
    int rc = kv_it_grpc_call(g, path, buf, n, &r, &rlen, CALL_MS, &status, msg, sizeof(msg));
    cr_assert_eq(rc, 0, "%s: rc %d status %d %s", path, rc, status, msg);
    ProtobufCMessage *out = protobuf_c_message_unpack(d, NULL, rlen, r);
    free(r);
    cr_assert_not_null(out);
    return out;
}

static kv_it_grpc_stream *start(kv_it_grpc *g, const char *path, const ProtobufCMessage *m)
{
    uint8_t buf[512];
    size_t n = protobuf_c_message_get_packed_size(m);
    protobuf_c_message_pack(m, buf);
    kv_it_grpc_stream *st = kv_it_grpc_stream_start(g, path, NULL);
    cr_assert_not_null(st);
    cr_assert_eq(kv_it_grpc_send_msg(st, buf, n, 1), 0);
    return st;
}

static ProtobufCMessage *finish(kv_it_grpc *g, kv_it_grpc_stream *st,
                                const ProtobufCMessageDescriptor *d)
{
    cr_assert_eq(kv_it_grpc_wait(g, st, CALL_MS), 1, "the waiting call was not answered");
    cr_assert_eq(st->grpc_status, 0, "status %d: %s", st->grpc_status, st->grpc_message);
    const uint8_t *m;
    size_t len;
    cr_assert_eq(kv_it_grpc_stream_msgs(st, 0, &m, &len), 1);
    ProtobufCMessage *r = protobuf_c_message_unpack(d, NULL, len, m);
    cr_assert_not_null(r);
    return r;
}

Test(cluster_election, campaign_resign_and_lock_across_members, .timeout = 300)
{
    kvt_cluster c;
    cr_assert_eq(cl_start(&c, 3, 0), 0);
    int leader = kvt_cluster_leader(&c);
    cr_assert_geq(leader, 0);
    int f1 = (leader + 1) % 3, f2 = (leader + 2) % 3;
    kv_it_grpc *g[3];
    for (int i = 0; i < 3; i++)
        cr_assert_eq(kv_it_grpc_open(&g[i], "127.0.0.1", c.m[i].client_port, CALL_MS), 0);
    int64_t l1 = cl_lease_grant(g[f1], 60), l2 = cl_lease_grant(g[f2], 60);

    V3electionpb__CampaignRequest q = V3ELECTIONPB__CAMPAIGN_REQUEST__INIT;
    q.name = bin("ce");
    q.lease = l1;
    q.value = bin("one");
    V3electionpb__CampaignResponse *c1 =
        (V3electionpb__CampaignResponse *)unary(g[f1], "/v3electionpb.Election/Campaign", &q.base,
                                                &v3electionpb__campaign_response__descriptor);
    cr_assert_eq(c1->leader->lease, l1);
    q.lease = l2;
    q.value = bin("two");
    kv_it_grpc_stream *st = start(g[f2], "/v3electionpb.Election/Campaign", &q.base);
    cr_assert_eq(kv_it_grpc_wait(g[f2], st, 1000), 0, "the second campaign did not wait");
    V3electionpb__ResignRequest rq = V3ELECTIONPB__RESIGN_REQUEST__INIT;
    rq.leader = c1->leader;
    protobuf_c_message_free_unpacked(unary(g[leader], "/v3electionpb.Election/Resign", &rq.base,
                                           &v3electionpb__resign_response__descriptor),
                                     NULL);
    V3electionpb__CampaignResponse *c2 = (V3electionpb__CampaignResponse *)finish(
        g[f2], st, &v3electionpb__campaign_response__descriptor);
    cr_assert_eq(c2->leader->lease, l2);
    for (int i = 0; i < 3; i++) { /* linearizable on every member */
        V3electionpb__LeaderRequest lq = V3ELECTIONPB__LEADER_REQUEST__INIT;
        lq.name = bin("ce");
        V3electionpb__LeaderResponse *lr =
            (V3electionpb__LeaderResponse *)unary(g[i], "/v3electionpb.Election/Leader", &lq.base,
                                                  &v3electionpb__leader_response__descriptor);
        cr_assert_eq(lr->kv->lease, l2, "member %d", i);
        cr_assert_eq(lr->kv->value.len, 3);
        cr_assert_eq(memcmp(lr->kv->value.data, "two", 3), 0);
        protobuf_c_message_free_unpacked(&lr->base, NULL);
    }

    V3lockpb__LockRequest lk = V3LOCKPB__LOCK_REQUEST__INIT;
    lk.name = bin("cl");
    lk.lease = l1;
    V3lockpb__LockResponse *a = (V3lockpb__LockResponse *)unary(
        g[f1], "/v3lockpb.Lock/Lock", &lk.base, &v3lockpb__lock_response__descriptor);
    lk.lease = l2;
    st = start(g[leader], "/v3lockpb.Lock/Lock", &lk.base);
    cr_assert_eq(kv_it_grpc_wait(g[leader], st, 1000), 0, "the second lock did not wait");
    V3lockpb__UnlockRequest u = V3LOCKPB__UNLOCK_REQUEST__INIT;
    u.key = a->key;
    protobuf_c_message_free_unpacked(
        unary(g[f2], "/v3lockpb.Lock/Unlock", &u.base, &v3lockpb__unlock_response__descriptor),
        NULL);
    V3lockpb__LockResponse *b =
        (V3lockpb__LockResponse *)finish(g[leader], st, &v3lockpb__lock_response__descriptor);
    char want[64];
    snprintf(want, sizeof(want), "cl/%llx", (unsigned long long)l2);
    cr_assert_eq(b->key.len, strlen(want));
    cr_assert_eq(memcmp(b->key.data, want, b->key.len), 0);

    protobuf_c_message_free_unpacked(&a->base, NULL);
    protobuf_c_message_free_unpacked(&b->base, NULL);
    protobuf_c_message_free_unpacked(&c1->base, NULL);
    protobuf_c_message_free_unpacked(&c2->base, NULL);
    for (int i = 0; i < 3; i++)
        kv_it_grpc_close(g[i]);
    kvt_cluster_destroy(&c);
}
