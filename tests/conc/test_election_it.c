/*
 * it_election: the v3election and v3lock services (server/api/service_election.c,
 * service_lock.c) of a real kvd process, over gRPC (tests/lib/grpc_raw.h).
 *
 * - Campaign on a free election answers at once; Leader then shows the key and value.
 * - A second Campaign (another lease) waits until the leader resigns, or until the leader's
 *   lease is revoked, and then answers with its own key.
 * - Proclaim changes the value; with a stale revision it fails "election: not leader".
 * - Proclaim/Resign without leader, Leader of an empty election: etcd's exact errors.
 * - Observe sees the leader and then a Proclaim.
 * - Lock excludes: a second Lock waits until Unlock.
 * - A waiting Campaign that is cancelled leaves no key behind.
 * - Under auth: the caller needs permission on the election's keys.
 * - The JSON gateway routes (/v3/, /v3beta/; kvd: /v3alpha/ too): etcd's bodies and error
 *   format.
 * - Malformed requests to every method get INTERNAL (or UNKNOWN), never a crash.
 * The `election` suite runs against etcd too (KV_TEST_SERVER=etcd, tests/integration/harness.h).
 * - --max-concurrency-waiters: the next Campaign/Lock past it is RESOURCE_EXHAUSTED
 *   "etcdserver: too many requests", counted in kvd_concurrency_refused_total.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "grpc_raw.h"
#include "harness.h"
#include "kvt_skip.h"
#include "kvt_util.h"
#include "rpc.pb-c.h"
#include "v3election.pb-c.h"
#include "v3lock.pb-c.h"

#define READY_MS 20000
#define CALL_MS 5000
#define BLOCK_MS 700 /* a waiting call must still wait after this */

static kv_it_server srv;
static kv_it_grpc *c1, *c2;

static void start_with(const char *const *extra)
{
    cr_assert_eq(kv_it_server_init(&srv, extra ? KV_IT_KVD : kv_it_kind_from_env(), extra), 0);
    int rc = kv_it_server_start(&srv, READY_MS);
    if (rc != 0) {
        char *log = NULL;
        kv_it_server_log(&srv, &log);
        cr_log_error("server log:\n%s", log ? log : "");
        free(log);
    }
    cr_assert_eq(rc, 0, "kvd did not start");
    cr_assert_eq(kv_it_grpc_open(&c1, "127.0.0.1", srv.client_port, CALL_MS), 0);
    cr_assert_eq(kv_it_grpc_open(&c2, "127.0.0.1", srv.client_port, CALL_MS), 0);
}

static void setup(void)
{
    start_with(NULL);
}

static void teardown(void)
{
    kv_it_grpc_close(c1);
    kv_it_grpc_close(c2);
    c1 = c2 = NULL;
    kv_it_server_destroy(&srv);
}

/* A unary call of m; returns the grpc-status; *resp (if given) is unpacked with out. */
static int call(kv_it_grpc *c, const char *method, const ProtobufCMessage *m,
                const ProtobufCMessageDescriptor *out, ProtobufCMessage **resp, char *msg,
                size_t cap)
{
    size_t len = protobuf_c_message_get_packed_size(m);
    uint8_t *buf = malloc(len ? len : 1);
    cr_assert(buf);
    protobuf_c_message_pack(m, buf);
    uint8_t *r = NULL;
    size_t rlen = 0;
    int status = -1;
    char tmp[512];
    int rc = kv_it_grpc_call(c, method, buf, len, &r, &rlen, CALL_MS, &status, msg ? msg : tmp,
                             msg ? cap : sizeof(tmp));
    free(buf);
    cr_assert(rc == 0 || rc == KV_IT_GRPC_STATUS, "%s: transport error %d", method, rc);
    if (resp) {
        *resp = NULL;
        if (status == 0) {
            *resp = protobuf_c_message_unpack(out, NULL, rlen, r);
            cr_assert(*resp, "%s: undecodable response", method);
        }
    }
    free(r);
    return status;
}

static int64_t grant(int64_t ttl)
{
    Etcdserverpb__LeaseGrantRequest g = ETCDSERVERPB__LEASE_GRANT_REQUEST__INIT;
    g.ttl = ttl;
    ProtobufCMessage *r;
    cr_assert_eq(call(c1, "/etcdserverpb.Lease/LeaseGrant", &g.base,
                      &etcdserverpb__lease_grant_response__descriptor, &r, NULL, 0),
                 0);
    int64_t id = ((Etcdserverpb__LeaseGrantResponse *)r)->id;
    protobuf_c_message_free_unpacked(r, NULL);
    cr_assert_neq(id, 0);
    return id;
}

static void lease_revoke(int64_t id)
{
    Etcdserverpb__LeaseRevokeRequest q = ETCDSERVERPB__LEASE_REVOKE_REQUEST__INIT;
    q.id = id;
    cr_assert_eq(call(c1, "/etcdserverpb.Lease/LeaseRevoke", &q.base,
                      &etcdserverpb__lease_revoke_response__descriptor, NULL, NULL, 0),
                 0);
}

static ProtobufCBinaryData bin(const char *s)
{
    ProtobufCBinaryData b = {strlen(s), (uint8_t *)s};
    return b;
}

static V3electionpb__CampaignResponse *campaign(const char *name, int64_t lease, const char *val)
{
    V3electionpb__CampaignRequest q = V3ELECTIONPB__CAMPAIGN_REQUEST__INIT;
    q.name = bin(name);
    q.lease = lease;
    q.value = bin(val);
    ProtobufCMessage *r;
    char msg[256] = "";
    int st = call(c1, "/v3electionpb.Election/Campaign", &q.base,
                  &v3electionpb__campaign_response__descriptor, &r, msg, sizeof(msg));
    cr_assert_eq(st, 0, "campaign: %d %s", st, msg);
    V3electionpb__CampaignResponse *cr = (V3electionpb__CampaignResponse *)r;
    cr_assert(cr->leader && cr->header);
    return cr;
}

/* A call left open on c2 (a waiting Campaign or Lock). */
static kv_it_grpc_stream *start_call(const char *method, const ProtobufCMessage *m)
{
    size_t len = protobuf_c_message_get_packed_size(m);
    uint8_t buf[512];
    cr_assert(len <= sizeof(buf));
    protobuf_c_message_pack(m, buf);
    kv_it_grpc_stream *st = kv_it_grpc_stream_start(c2, method, NULL);
    cr_assert(st);
    cr_assert_eq(kv_it_grpc_send_msg(st, buf, len, 1), 0);
    return st;
}

static kv_it_grpc_stream *start_campaign(const char *name, int64_t lease, const char *val)
{
    V3electionpb__CampaignRequest q = V3ELECTIONPB__CAMPAIGN_REQUEST__INIT;
    q.name = bin(name);
    q.lease = lease;
    q.value = bin(val);
    return start_call("/v3electionpb.Election/Campaign", &q.base);
}

static void assert_waiting(kv_it_grpc_stream *st)
{
    cr_assert_eq(kv_it_grpc_wait(c2, st, BLOCK_MS), 0, "answered at once (status %d: %s)",
                 st->grpc_status, st->grpc_message);
    cr_assert_eq(st->grpc_status, -1);
}

/* Waits for the open call's answer and unpacks it with d. */
static ProtobufCMessage *finish_call(kv_it_grpc_stream *st, const ProtobufCMessageDescriptor *d)
{
    cr_assert_eq(kv_it_grpc_wait(c2, st, CALL_MS), 1, "the waiting call was not answered");
    cr_assert_eq(st->grpc_status, 0, "status %d: %s", st->grpc_status, st->grpc_message);
    const uint8_t *m;
    size_t len;
    cr_assert_eq(kv_it_grpc_stream_msgs(st, 0, &m, &len), 1);
    ProtobufCMessage *r = protobuf_c_message_unpack(d, NULL, len, m);
    cr_assert(r);
    return r;
}

static V3electionpb__LeaderKey *dup_key(const V3electionpb__LeaderKey *k)
{
    /* round trip through the wire: an owned copy */
    uint8_t buf[512];
    size_t len = v3electionpb__leader_key__pack(k, buf);
    return v3electionpb__leader_key__unpack(NULL, len, buf);
}

static V3electionpb__LeaderResponse *leader(const char *name, int *status, char *msg, size_t cap)
{
    V3electionpb__LeaderRequest q = V3ELECTIONPB__LEADER_REQUEST__INIT;
    q.name = bin(name);
    ProtobufCMessage *r;
    *status = call(c1, "/v3electionpb.Election/Leader", &q.base,
                   &v3electionpb__leader_response__descriptor, &r, msg, cap);
    return (V3electionpb__LeaderResponse *)r;
}

static int key_is(const ProtobufCBinaryData *b, const ProtobufCBinaryData *k)
{
    return b->len == k->len && memcmp(b->data, k->data, b->len) == 0;
}

static int resign(const V3electionpb__LeaderKey *k)
{
    V3electionpb__ResignRequest q = V3ELECTIONPB__RESIGN_REQUEST__INIT;
    q.leader = (V3electionpb__LeaderKey *)k;
    return call(c1, "/v3electionpb.Election/Resign", &q.base,
                &v3electionpb__resign_response__descriptor, NULL, NULL, 0);
}

/* Keys under prefix (a Range count). */
static int64_t count_prefix(const char *pfx)
{
    char end[128];
    snprintf(end, sizeof(end), "%s", pfx);
    end[strlen(end) - 1]++;
    Etcdserverpb__RangeRequest q = ETCDSERVERPB__RANGE_REQUEST__INIT;
    q.key = bin(pfx);
    q.range_end = bin(end);
    q.count_only = 1;
    ProtobufCMessage *r;
    cr_assert_eq(call(c1, "/etcdserverpb.KV/Range", &q.base,
                      &etcdserverpb__range_response__descriptor, &r, NULL, 0),
                 0);
    int64_t n = ((Etcdserverpb__RangeResponse *)r)->count;
    protobuf_c_message_free_unpacked(r, NULL);
    return n;
}

TestSuite(election, .init = setup, .fini = teardown, .timeout = 120);

Test(election, campaign_free_name_returns_at_once)
{
    uint64_t t0 = kvt_now_ms();
    V3electionpb__CampaignResponse *cr = campaign("e1", 0, "v1");
    cr_assert_lt(kvt_now_ms() - t0, 3000);
    V3electionpb__LeaderKey *k = cr->leader;
    cr_assert_neq(k->lease, 0, "a lease is granted for lease 0");
    char want[64];
    snprintf(want, sizeof(want), "e1/%llx", (unsigned long long)k->lease);
    cr_assert_eq(k->key.len, strlen(want));
    cr_assert_eq(memcmp(k->key.data, want, k->key.len), 0);
    cr_assert(key_is(&k->name, &(ProtobufCBinaryData){2, (uint8_t *)"e1"}));
    cr_assert_eq(k->rev, cr->header->revision, "the key was created by the campaign's txn");
    int st;
    V3electionpb__LeaderResponse *l = leader("e1", &st, NULL, 0);
    cr_assert_eq(st, 0);
    cr_assert(key_is(&l->kv->key, &k->key));
    cr_assert(key_is(&l->kv->value, &(ProtobufCBinaryData){2, (uint8_t *)"v1"}));
    cr_assert_eq(l->kv->lease, k->lease);
    protobuf_c_message_free_unpacked(&l->base, NULL);
    protobuf_c_message_free_unpacked(&cr->base, NULL);
}

static void second_waits(int by_revoke)
{
    int64_t l1 = grant(60), l2 = grant(60);
    V3electionpb__CampaignResponse *cr = campaign("e2", l1, "first");
    kv_it_grpc_stream *st = start_campaign("e2", l2, "second");
    assert_waiting(st);
    if (by_revoke)
        lease_revoke(l1);
    else
        cr_assert_eq(resign(cr->leader), 0);
    V3electionpb__CampaignResponse *r2 = (V3electionpb__CampaignResponse *)finish_call(
        st, &v3electionpb__campaign_response__descriptor);
    cr_assert(r2->leader);
    cr_assert_eq(r2->leader->lease, l2);
    cr_assert_gt(r2->leader->rev, cr->leader->rev);
    int status;
    V3electionpb__LeaderResponse *l = leader("e2", &status, NULL, 0);
    cr_assert_eq(status, 0);
    cr_assert(key_is(&l->kv->key, &r2->leader->key));
    cr_assert(key_is(&l->kv->value, &(ProtobufCBinaryData){6, (uint8_t *)"second"}));
    protobuf_c_message_free_unpacked(&l->base, NULL);
    protobuf_c_message_free_unpacked(&r2->base, NULL);
    protobuf_c_message_free_unpacked(&cr->base, NULL);
}

Test(election, second_campaign_waits_for_resign)
{
    second_waits(0);
}

Test(election, second_campaign_waits_for_lease_revoke)
{
    second_waits(1);
}

Test(election, proclaim_changes_value)
{
    V3electionpb__CampaignResponse *cr = campaign("e3", 0, "old");
    V3electionpb__ProclaimRequest q = V3ELECTIONPB__PROCLAIM_REQUEST__INIT;
    q.leader = cr->leader;
    q.value = bin("new");
    ProtobufCMessage *r;
    cr_assert_eq(call(c1, "/v3electionpb.Election/Proclaim", &q.base,
                      &v3electionpb__proclaim_response__descriptor, &r, NULL, 0),
                 0);
    cr_assert_gt(((V3electionpb__ProclaimResponse *)r)->header->revision, cr->header->revision);
    protobuf_c_message_free_unpacked(r, NULL);
    int st;
    V3electionpb__LeaderResponse *l = leader("e3", &st, NULL, 0);
    cr_assert_eq(st, 0);
    cr_assert(key_is(&l->kv->value, &(ProtobufCBinaryData){3, (uint8_t *)"new"}));
    protobuf_c_message_free_unpacked(&l->base, NULL);
    /* a stale revision is not the leader */
    V3electionpb__LeaderKey *stale = dup_key(cr->leader);
    stale->rev += 100;
    q.leader = stale;
    char msg[256] = "";
    cr_assert_eq(call(c1, "/v3electionpb.Election/Proclaim", &q.base,
                      &v3electionpb__proclaim_response__descriptor, NULL, msg, sizeof(msg)),
                 2);
    cr_assert_str_eq(msg, "election: not leader");
    v3electionpb__leader_key__free_unpacked(stale, NULL);
    protobuf_c_message_free_unpacked(&cr->base, NULL);
}

Test(election, missing_leader_and_no_leader_errors)
{
    char msg[256] = "";
    V3electionpb__ProclaimRequest p = V3ELECTIONPB__PROCLAIM_REQUEST__INIT;
    p.value = bin("x");
    cr_assert_eq(call(c1, "/v3electionpb.Election/Proclaim", &p.base,
                      &v3electionpb__proclaim_response__descriptor, NULL, msg, sizeof(msg)),
                 2);
    cr_assert_str_eq(msg, "\"leader\" field must be provided");
    msg[0] = 0;
    V3electionpb__ResignRequest q = V3ELECTIONPB__RESIGN_REQUEST__INIT;
    cr_assert_eq(call(c1, "/v3electionpb.Election/Resign", &q.base,
                      &v3electionpb__resign_response__descriptor, NULL, msg, sizeof(msg)),
                 2);
    cr_assert_str_eq(msg, "\"leader\" field must be provided");
    msg[0] = 0;
    int st;
    V3electionpb__LeaderResponse *l = leader("empty", &st, msg, sizeof(msg));
    cr_assert_null(l);
    cr_assert_eq(st, 2);
    cr_assert_str_eq(msg, "election: no leader");
    /* a step's error: etcd answers the inner client's error with UNKNOWN */
    V3electionpb__CampaignRequest c = V3ELECTIONPB__CAMPAIGN_REQUEST__INIT;
    c.name = bin("e0");
    c.lease = 5; /* not granted */
    cr_assert_eq(call(c1, "/v3electionpb.Election/Campaign", &c.base,
                      &v3electionpb__campaign_response__descriptor, NULL, msg, sizeof(msg)),
                 2, "%s", msg);
    cr_assert_str_eq(msg, "etcdserver: requested lease not found");
    V3lockpb__UnlockRequest u = V3LOCKPB__UNLOCK_REQUEST__INIT;
    cr_assert_eq(call(c1, "/v3lockpb.Lock/Unlock", &u.base, &v3lockpb__unlock_response__descriptor,
                      NULL, msg, sizeof(msg)),
                 2, "%s", msg);
    cr_assert_str_eq(msg, "etcdserver: key is not provided");
    /* malformed protobuf: grpc-go's unmarshal error, and the server lives on */
    uint8_t bad[] = {0x0a, 0x7f, 0x01};
    uint8_t *r = NULL;
    size_t rlen = 0;
    int status = -1;
    kv_it_grpc_call(c1, "/v3electionpb.Election/Campaign", bad, sizeof(bad), &r, &rlen, CALL_MS,
                    &status, msg, sizeof(msg));
    free(r);
    cr_assert_eq(status, 13, "status %d: %s", status, msg);
    cr_assert_eq(kv_it_server_alive(&srv), 1);
}

Test(election, observe_sees_proclaim)
{
    V3electionpb__CampaignResponse *cr = campaign("e4", 0, "one");
    V3electionpb__LeaderRequest q = V3ELECTIONPB__LEADER_REQUEST__INIT;
    q.name = bin("e4");
    kv_it_grpc_stream *st = start_call("/v3electionpb.Election/Observe", &q.base);
    uint8_t *m;
    size_t len;
    cr_assert_eq(kv_it_grpc_stream_recv(st, &m, &len, CALL_MS), 0);
    V3electionpb__LeaderResponse *r = v3electionpb__leader_response__unpack(NULL, len, m);
    free(m);
    cr_assert(r && r->kv);
    cr_assert(key_is(&r->kv->value, &(ProtobufCBinaryData){3, (uint8_t *)"one"}));
    v3electionpb__leader_response__free_unpacked(r, NULL);
    V3electionpb__ProclaimRequest p = V3ELECTIONPB__PROCLAIM_REQUEST__INIT;
    p.leader = cr->leader;
    p.value = bin("two");
    cr_assert_eq(call(c1, "/v3electionpb.Election/Proclaim", &p.base,
                      &v3electionpb__proclaim_response__descriptor, NULL, NULL, 0),
                 0);
    cr_assert_eq(kv_it_grpc_stream_recv(st, &m, &len, CALL_MS), 0);
    r = v3electionpb__leader_response__unpack(NULL, len, m);
    free(m);
    cr_assert(r && r->kv);
    cr_assert(key_is(&r->kv->value, &(ProtobufCBinaryData){3, (uint8_t *)"two"}));
    cr_assert(key_is(&r->kv->key, &cr->leader->key));
    cr_assert_eq(r->header->revision, r->kv->mod_revision);
    v3electionpb__leader_response__free_unpacked(r, NULL);
    kv_it_grpc_stream_cancel(st);
    protobuf_c_message_free_unpacked(&cr->base, NULL);
}

Test(election, lock_excludes_until_unlock)
{
    int64_t la = grant(60), lb = grant(60);
    V3lockpb__LockRequest q = V3LOCKPB__LOCK_REQUEST__INIT;
    q.name = bin("mtx");
    q.lease = la;
    ProtobufCMessage *r;
    cr_assert_eq(
        call(c1, "/v3lockpb.Lock/Lock", &q.base, &v3lockpb__lock_response__descriptor, &r, NULL, 0),
        0);
    V3lockpb__LockResponse *a = (V3lockpb__LockResponse *)r;
    q.lease = lb;
    kv_it_grpc_stream *st = start_call("/v3lockpb.Lock/Lock", &q.base);
    assert_waiting(st);
    V3lockpb__UnlockRequest u = V3LOCKPB__UNLOCK_REQUEST__INIT;
    u.key = a->key;
    cr_assert_eq(call(c1, "/v3lockpb.Lock/Unlock", &u.base, &v3lockpb__unlock_response__descriptor,
                      NULL, NULL, 0),
                 0);
    V3lockpb__LockResponse *b =
        (V3lockpb__LockResponse *)finish_call(st, &v3lockpb__lock_response__descriptor);
    char want[64];
    snprintf(want, sizeof(want), "mtx/%llx", (unsigned long long)lb);
    cr_assert(key_is(&b->key, &(ProtobufCBinaryData){strlen(want), (uint8_t *)want}));
    cr_assert_eq(count_prefix("mtx/"), 1, "only the holder's key remains");
    protobuf_c_message_free_unpacked(&b->base, NULL);
    protobuf_c_message_free_unpacked(&a->base, NULL);
}

Test(election, cancelled_campaign_leaves_no_key)
{
    V3electionpb__CampaignResponse *cr = campaign("e5", 0, "leader");
    int64_t l2 = grant(60);
    kv_it_grpc_stream *st = start_campaign("e5", l2, "waiter");
    assert_waiting(st);
    cr_assert_eq(count_prefix("e5/"), 2, "the waiter's key exists while it waits");
    kv_it_grpc_stream_cancel(st);
    kv_it_grpc_flush(c2, CALL_MS);
    int64_t n = 2;
    for (int i = 0; i < 50 && n != 1; i++) {
        kvt_sleep_ms(50);
        n = count_prefix("e5/");
    }
    cr_assert_eq(n, 1, "the cancelled campaign's key was not deleted");
    int status;
    V3electionpb__LeaderResponse *l = leader("e5", &status, NULL, 0);
    cr_assert_eq(status, 0);
    cr_assert(key_is(&l->kv->key, &cr->leader->key));
    protobuf_c_message_free_unpacked(&l->base, NULL);
    protobuf_c_message_free_unpacked(&cr->base, NULL);
}

Test(election, malformed_requests_get_errors_not_crashes)
{
    static const char *const methods[] = {
        "/v3electionpb.Election/Campaign",
        "/v3electionpb.Election/Proclaim",
        "/v3electionpb.Election/Leader",
        "/v3electionpb.Election/Resign",
        "/v3lockpb.Lock/Lock",
        "/v3lockpb.Lock/Unlock",
    };
    static const uint8_t bad[][8] = {
        {0x0a, 0x7f, 0x01},                   /* length past the end */
        {0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f}, /* length 2^32 - 1 */
        {0x12, 0x05},                         /* a LeaderKey cut short */
        {0x0f},                               /* wire type 7 */
        {0x10, 0x80, 0x80, 0x80, 0x80, 0x80}, /* a varint that never ends */
    };
    static const size_t bad_len[] = {3, 6, 2, 1, 6};
    for (size_t m = 0; m < sizeof(methods) / sizeof(methods[0]); m++)
        for (size_t b = 0; b < sizeof(bad) / sizeof(bad[0]); b++) {
            uint8_t *r = NULL;
            size_t rlen = 0;
            int status = -1;
            char msg[256] = "";
            int rc = kv_it_grpc_call(c1, methods[m], bad[b], bad_len[b], &r, &rlen, CALL_MS,
                                     &status, msg, sizeof(msg));
            free(r);
            cr_assert(rc == KV_IT_GRPC_STATUS || rc == 0, "%s: rc %d", methods[m], rc);
            cr_assert(status == 13 || status == 2, "%s input %zu: status %d %s", methods[m], b,
                      status, msg);
        }
    /* Observe: a malformed request ends the stream; one without a request too */
    kv_it_grpc_stream *st = kv_it_grpc_stream_start(c2, "/v3electionpb.Election/Observe", NULL);
    cr_assert_not_null(st);
    cr_assert_eq(kv_it_grpc_send_msg(st, bad[0], bad_len[0], 1), 0);
    cr_assert_eq(kv_it_grpc_wait(c2, st, CALL_MS), 1);
    cr_assert_eq(st->grpc_status, 13);
    st = kv_it_grpc_stream_start(c2, "/v3electionpb.Election/Observe", NULL);
    cr_assert_not_null(st);
    cr_assert_eq(kv_it_grpc_send_raw(st, NULL, 0, 1), 0);
    cr_assert_eq(kv_it_grpc_wait(c2, st, CALL_MS), 1, "Observe without a request never ended");
    cr_assert_eq(kv_it_server_alive(&srv), 1);
    V3electionpb__CampaignResponse *cr = campaign("alive", 0, "yes");
    protobuf_c_message_free_unpacked(&cr->base, NULL);
}

/* curl -s -m max_s -X POST -d body http://<server>path: the body (malloc'd). */
static char *curl_post(const char *path, const char *body, const char *max_s)
{
    static const char curl[] = "/usr/bin/curl";
    if (access(curl, X_OK) != 0)
        KVT_SKIP_MISSING("no %s", curl);
    char url[256];
    snprintf(url, sizeof(url), "http://%s%s", srv.endpoint, path);
    const char *argv[] = {curl, "-s", "-m", max_s, "-X", "POST", "-d", body, url, NULL};
    kv_it_cmd_result r;
    cr_assert_eq(kv_it_run(argv, NULL, NULL, 0, 30000, &r), 0);
    char *out = strdup(r.out ? r.out : "");
    kv_it_cmd_result_free(&r);
    return out;
}

Test(election, json_gateway_routes)
{
    /* name "gw" = Z3c=, value "v1" = djE=, "v2" = djI= */
    char *o = curl_post("/v3/election/campaign", "{\"name\":\"Z3c=\",\"value\":\"djE=\"}", "5");
    cr_assert(strstr(o, "\"leader\":{\"name\":\"Z3c=\",\"key\":\"Z3cv"), "%s", o);
    cr_assert(strstr(o, "\"rev\":\""), "rev as a JSON string: %s", o);
    cr_assert(strstr(o, "\"lease\":\""), "lease as a JSON string: %s", o);
    free(o);
    o = curl_post("/v3beta/election/proclaim", "{\"value\":\"djI=\"}", "5");
    cr_assert_str_eq(o, "{\"error\":\"\\\"leader\\\" field must be provided\",\"message\":"
                        "\"\\\"leader\\\" field must be provided\",\"code\":2}");
    free(o);
    o = curl_post("/v3beta/election/resign", "{}", "5");
    cr_assert(strstr(o, "field must be provided\",\"code\":2}"), "%s", o);
    free(o);
    if (kv_it_kind_from_env() == KV_IT_KVD) { /* kvd answers /v3alpha/ for every route */
        o = curl_post("/v3alpha/election/resign", "{}", "5");
        cr_assert(strstr(o, "field must be provided\",\"code\":2}"), "%s", o);
        free(o);
    }
    o = curl_post("/v3/election/leader", "{\"name\":\"bm9uZQ==\"}", "5");
    cr_assert(strstr(o, "\"message\":\"election: no leader\",\"code\":2"), "%s", o);
    free(o);
    /* Observe streams one {"result":...} line per leader change; curl stops it after 1 s */
    o = curl_post("/v3/election/observe", "{\"name\":\"Z3c=\"}", "1");
    cr_assert(strncmp(o, "{\"result\":{\"header\":", 20) == 0, "%s", o);
    cr_assert(strstr(o, "\"value\":\"djE=\""), "%s", o);
    free(o);
    o = curl_post("/v3/lock/lock", "{\"name\":\"Z3ds\"}", "5"); /* "gwl" */
    cr_assert(strstr(o, "\"key\":\"Z3dsL"), "%s", o);           /* "gwl/" */
    free(o);
    o = curl_post("/v3/lock/unlock", "{}", "5");
    cr_assert(strstr(o, "\"message\":\"etcdserver: key is not provided\",\"code\":2"), "%s", o);
    free(o);
}

/* Its own suite: a server with its own flags. */
TestSuite(election_bound, .fini = teardown, .timeout = 120);

Test(election_bound, waiter_bound_answers_resource_exhausted)
{
    const char *extra[] = {"--max-concurrency-waiters=1", NULL};
    start_with(extra);
    V3electionpb__CampaignResponse *cr = campaign("e6", 0, "leader");  /* ends: place back */
    kv_it_grpc_stream *st = start_campaign("e6", grant(60), "waiter"); /* holds the place */
    assert_waiting(st);
    V3lockpb__LockRequest q = V3LOCKPB__LOCK_REQUEST__INIT;
    q.name = bin("other");
    char msg[256] = "";
    cr_assert_eq(call(c1, "/v3lockpb.Lock/Lock", &q.base, &v3lockpb__lock_response__descriptor,
                      NULL, msg, sizeof(msg)),
                 8);
    cr_assert_str_eq(msg, "etcdserver: too many requests");
    int status;
    char *body = NULL;
    cr_assert_eq(kv_it_http_get(srv.metrics_port, "/metrics", CALL_MS, &status, &body), 0);
    double v = 0, w = 0;
    cr_assert_eq(kv_it_metric_value(body, "kvd_concurrency_refused_total", &v), 0);
    cr_assert_eq(kv_it_metric_value(body, "kvd_concurrency_waiters", &w), 0);
    free(body);
    cr_assert_eq(v, 1);
    cr_assert_eq(w, 1);
    /* the place comes back when the waiter is answered */
    cr_assert_eq(resign(cr->leader), 0);
    protobuf_c_message_free_unpacked(finish_call(st, &v3electionpb__campaign_response__descriptor),
                                     NULL);
    cr_assert_eq(call(c1, "/v3lockpb.Lock/Lock", &q.base, &v3lockpb__lock_response__descriptor,
                      NULL, msg, sizeof(msg)),
                 0, "%s", msg);
    protobuf_c_message_free_unpacked(&cr->base, NULL);
}

/* ---- under auth ---- */

static void ctl_ok(const char *a1, const char *a2, const char *a3, const char *a4, const char *a5,
                   const char *a6)
{
    char bin[PATH_MAX];
    cr_assert_eq(kv_it_etcdctl_bin(bin, sizeof(bin)), 0);
    kv_it_cmd_result r;
    cr_assert_eq(kv_it_ctl(&srv, bin, NULL, 30000, &r, a1, a2, a3, a4, a5, a6, NULL), 0);
    cr_assert_eq(r.exit_code, 0, "etcdctl %s %s: %s%s", a1, a2 ? a2 : "", r.out, r.err);
    kv_it_cmd_result_free(&r);
}

/* A unary call carrying the token (NULL: none): its grpc-status; *resp unpacked with d. */
static int call_tok(const char *tok, const char *path, const ProtobufCMessage *m,
                    const ProtobufCMessageDescriptor *d, ProtobufCMessage **resp, char *msg,
                    size_t cap)
{
    uint8_t buf[512];
    size_t n = protobuf_c_message_get_packed_size(m);
    cr_assert(n <= sizeof(buf));
    protobuf_c_message_pack(m, buf);
    const char *md[] = {"token", tok, NULL};
    kv_it_grpc_req rq = {.metadata = tok ? md : NULL};
    kv_it_grpc_stream *st = kv_it_grpc_stream_start(c1, path, &rq);
    cr_assert_not_null(st);
    cr_assert_eq(kv_it_grpc_send_msg(st, buf, n, 1), 0);
    cr_assert_eq(kv_it_grpc_wait(c1, st, CALL_MS), 1, "no answer to %s", path);
    int status = st->grpc_status;
    size_t ml = strnlen(st->grpc_message, sizeof(st->grpc_message));
    if (ml >= cap)
        ml = cap - 1;
    memcpy(msg, st->grpc_message, ml);
    msg[ml] = 0;
    if (resp) {
        *resp = NULL;
        const uint8_t *p;
        size_t len;
        if (status == 0 && kv_it_grpc_stream_msgs(st, 0, &p, &len) == 1)
            *resp = protobuf_c_message_unpack(d, NULL, len, p);
    }
    kv_it_grpc_stream_free(st);
    return status;
}

Test(election, campaign_lock_under_auth)
{
    ctl_ok("user", "add", "root:rootpw", NULL, NULL, NULL);
    ctl_ok("role", "add", "root", NULL, NULL, NULL);
    ctl_ok("user", "grant-role", "root", "root", NULL, NULL);
    ctl_ok("user", "add", "alice:pw", NULL, NULL, NULL);
    ctl_ok("role", "add", "ra", NULL, NULL, NULL);
    ctl_ok("role", "grant-permission", "--prefix=true", "ra", "readwrite", "a/");
    ctl_ok("user", "grant-role", "alice", "ra", NULL, NULL);
    ctl_ok("auth", "enable", NULL, NULL, NULL, NULL);
    Etcdserverpb__AuthenticateRequest ar = ETCDSERVERPB__AUTHENTICATE_REQUEST__INIT;
    ar.name = "alice";
    ar.password = "pw";
    ProtobufCMessage *r;
    cr_assert_eq(call(c1, "/etcdserverpb.Auth/Authenticate", &ar.base,
                      &etcdserverpb__authenticate_response__descriptor, &r, NULL, 0),
                 0);
    char tok[512];
    snprintf(tok, sizeof(tok), "%s", ((Etcdserverpb__AuthenticateResponse *)r)->token);
    protobuf_c_message_free_unpacked(r, NULL);

    char msg[256];
    V3electionpb__CampaignRequest q = V3ELECTIONPB__CAMPAIGN_REQUEST__INIT;
    q.name = bin("a");
    q.value = bin("v");
    cr_assert_eq(call_tok(tok, "/v3electionpb.Election/Campaign", &q.base,
                          &v3electionpb__campaign_response__descriptor, &r, msg, sizeof(msg)),
                 0, "%s", msg);
    cr_assert_not_null(r);
    V3electionpb__CampaignResponse *cr = (V3electionpb__CampaignResponse *)r;
    cr_assert(cr->leader && cr->leader->key.len > 2 && cr->leader->key.data[0] == 'a');
    V3electionpb__LeaderRequest lq = V3ELECTIONPB__LEADER_REQUEST__INIT;
    lq.name = bin("a");
    cr_assert_eq(call_tok(tok, "/v3electionpb.Election/Leader", &lq.base,
                          &v3electionpb__leader_response__descriptor, NULL, msg, sizeof(msg)),
                 0, "%s", msg);
    V3electionpb__ResignRequest rq = V3ELECTIONPB__RESIGN_REQUEST__INIT;
    rq.leader = cr->leader;
    cr_assert_eq(call_tok(tok, "/v3electionpb.Election/Resign", &rq.base,
                          &v3electionpb__resign_response__descriptor, NULL, msg, sizeof(msg)),
                 0, "%s", msg);
    protobuf_c_message_free_unpacked(&cr->base, NULL);
    /* another election: outside alice's permission */
    q.name = bin("b");
    cr_assert_eq(call_tok(tok, "/v3electionpb.Election/Campaign", &q.base,
                          &v3electionpb__campaign_response__descriptor, NULL, msg, sizeof(msg)),
                 2, "%s", msg); /* etcd: UNKNOWN, the inner client's error */
    cr_assert_str_eq(msg, "etcdserver: permission denied");
    /* no token at all */
    q.name = bin("a");
    cr_assert_eq(call_tok(NULL, "/v3electionpb.Election/Campaign", &q.base,
                          &v3electionpb__campaign_response__descriptor, NULL, msg, sizeof(msg)),
                 2, "%s", msg);
    cr_assert_str_eq(msg, "etcdserver: user name is empty");
    /* Lock and Unlock with the token */
    V3lockpb__LockRequest lk = V3LOCKPB__LOCK_REQUEST__INIT;
    lk.name = bin("a");
    cr_assert_eq(call_tok(tok, "/v3lockpb.Lock/Lock", &lk.base,
                          &v3lockpb__lock_response__descriptor, &r, msg, sizeof(msg)),
                 0, "%s", msg);
    cr_assert_not_null(r);
    V3lockpb__UnlockRequest u = V3LOCKPB__UNLOCK_REQUEST__INIT;
    u.key = ((V3lockpb__LockResponse *)r)->key;
    cr_assert_eq(call_tok(tok, "/v3lockpb.Lock/Unlock", &u.base,
                          &v3lockpb__unlock_response__descriptor, NULL, msg, sizeof(msg)),
                 0, "%s", msg);
    protobuf_c_message_free_unpacked(r, NULL);
    lk.name = bin("b");
    cr_assert_eq(call_tok(tok, "/v3lockpb.Lock/Lock", &lk.base,
                          &v3lockpb__lock_response__descriptor, NULL, msg, sizeof(msg)),
                 2, "%s", msg);
    cr_assert_str_eq(msg, "etcdserver: permission denied");
}
