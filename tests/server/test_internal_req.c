#include "apply/internal_req.h"
#include "internal.pb-c.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

Test(internal_req, wraps_raw_request_bytes)
{
    Etcdserverpb__PutRequest put = ETCDSERVERPB__PUT_REQUEST__INIT;
    put.key.data = (uint8_t *)"k";
    put.key.len = 1;
    uint8_t big[300];
    memset(big, 'v', sizeof(big));
    put.value.data = big; /* > 127 bytes: multi-byte length varint */
    put.value.len = sizeof(big);
    put.lease = 42;
    uint8_t buf[512];
    size_t len = etcdserverpb__put_request__pack(&put, buf);

    uint8_t *out;
    size_t out_len;
    cr_assert_eq(kv_internal_wrap(KV_IREQ_PUT, 300, buf, len, &out, &out_len), 0);
    Kvdpb__InternalRequest *r = kvdpb__internal_request__unpack(NULL, out_len, out);
    cr_assert_not_null(r);
    cr_assert_eq(r->id, 300);
    cr_assert_eq(r->request_case, KVDPB__INTERNAL_REQUEST__REQUEST_PUT);
    cr_assert_eq(r->put->lease, 42);
    cr_assert_eq(r->put->value.len, sizeof(big));
    kvdpb__internal_request__free_unpacked(r, NULL);
    free(out);
}

Test(internal_req, empty_message_and_bad_field)
{
    uint8_t *out;
    size_t out_len;
    cr_assert_eq(kv_internal_wrap(KV_IREQ_COMPACTION, 0, NULL, 0, &out, &out_len), 0);
    Kvdpb__InternalRequest *r = kvdpb__internal_request__unpack(NULL, out_len, out);
    cr_assert_not_null(r);
    cr_assert_eq(r->request_case, KVDPB__INTERNAL_REQUEST__REQUEST_COMPACTION);
    kvdpb__internal_request__free_unpacked(r, NULL);
    free(out);
    cr_assert_lt(kv_internal_wrap((enum kv_ireq_field)99, 0, NULL, 0, &out, &out_len), 0);
}

/* A packed grant {ttl, id} as service_lease.c proposes it, wrapped with auth fields. */
static void grant_entry(int64_t ttl, int64_t id, uint8_t **out, size_t *out_len)
{
    Etcdserverpb__LeaseGrantRequest g = ETCDSERVERPB__LEASE_GRANT_REQUEST__INIT;
    g.ttl = ttl;
    g.id = id;
    uint8_t buf[32];
    size_t len = etcdserverpb__lease_grant_request__pack(&g, buf);
    kv_ireq_origin o = {.user = "u", .auth_revision = 3};
    cr_assert_eq(kv_internal_wrap_client(KV_IREQ_LEASE_GRANT, 9, buf, len, &o, out, out_len), 0);
}

/* Decodes e: the grant's id and TTL, the routing id and auth fields kept, the mark cleared. */
static void check_named(const uint8_t *e, size_t len, int64_t id, int64_t ttl)
{
    cr_assert_eq(kv_internal_lease_id_by_leader(e, len), 0, "named once only");
    Kvdpb__InternalRequest *r = kvdpb__internal_request__unpack(NULL, len, e);
    cr_assert_not_null(r);
    cr_assert_eq(r->request_case, KVDPB__INTERNAL_REQUEST__REQUEST_LEASE_GRANT);
    cr_assert_eq(r->lease_grant->id, id, "id %" PRId64 ", want %" PRId64, r->lease_grant->id, id);
    cr_assert_eq(r->lease_grant->ttl, ttl);
    cr_assert_eq(r->id, 9);
    cr_assert_str_eq(r->auth_user, "u");
    cr_assert_eq(r->auth_revision, 3);
    cr_assert(!r->lease_id_by_leader);
    kvdpb__internal_request__free_unpacked(r, NULL);
}

/* The leader's id replaces the receiving member's: in place when its varint fits (padded when
 * shorter), appended otherwise. Without the leader, the member's own id is applied. */
Test(internal_req, leader_names_a_server_chosen_lease_id)
{
    /* A 9-byte varint, like every server-chosen id. */
    const int64_t member_id = (int64_t)0x2a0b1c2d3e4f0007;
    const struct {
        int64_t member, leader, ttl;
        int in_place;
    } cases[] = {
        {member_id, member_id + (1 << 16), 30, 1}, /* same length */
        {member_id, 777, 30, 1},                   /* shorter: padded */
        {5, -1, INT64_MAX, 0},                     /* longer (10 bytes): appended */
        {5, 6, 0, 1},                              /* TTL 0 (absent on the wire) */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        uint8_t *e;
        size_t len;
        grant_entry(cases[i].ttl, cases[i].member, &e, &len);
        cr_assert_eq(kv_internal_lease_id_by_leader(e, len), 0, "not asked for");
        cr_assert_eq(kv_internal_name_lease(&e, &len, cases[i].leader), -EINVAL, "not marked");
        cr_assert_eq(kv_internal_mark_lease_id_by_leader(&e, &len), 0);
        cr_assert_eq(kv_internal_lease_id_by_leader(e, len), 1);
        Kvdpb__InternalRequest *r = kvdpb__internal_request__unpack(NULL, len, e);
        cr_assert_not_null(r);
        cr_assert_eq(r->lease_grant->id, cases[i].member, "no leader renamed it: the member's id");
        cr_assert(r->lease_id_by_leader);
        kvdpb__internal_request__free_unpacked(r, NULL);

        size_t before = len;
        cr_assert_eq(kv_internal_name_lease(&e, &len, cases[i].leader), 0);
        cr_assert_eq(len == before, cases[i].in_place, "case %zu: %zu -> %zu bytes", i, before,
                     len);
        check_named(e, len, cases[i].leader, cases[i].ttl);
        cr_assert_eq(kv_internal_name_lease(&e, &len, 1), -EINVAL, "named already");
        free(e);
    }
}

Test(internal_req, naming_a_lease_needs_a_marked_grant)
{
    uint8_t *out;
    size_t out_len;
    cr_assert_eq(kv_internal_wrap(KV_IREQ_COMPACTION, 0, NULL, 0, &out, &out_len), 0);
    cr_assert_eq(kv_internal_mark_lease_id_by_leader(&out, &out_len), 0);
    size_t before = out_len;
    cr_assert_eq(kv_internal_name_lease(&out, &out_len, 1), -EINVAL);
    cr_assert_eq(out_len, before);
    free(out);
    uint8_t junk[] = {0xff, 0xff, 0xff};
    uint8_t *j = junk;
    size_t jlen = sizeof(junk);
    cr_assert_eq(kv_internal_name_lease(&j, &jlen, 1), -EINVAL);
    cr_assert_eq(kv_internal_lease_id_by_leader(junk, sizeof(junk)), 0);
}

/* What the member that takes a client's request adds to it (kv_ireq_origin): the caller and
 * auth revision when auth is on, the lease-id mark when asked, and its --max-keys-per-lease
 * on Put and Txn only (0 travels as KV_LEASE_KEYS_UNLIMITED, absent means an older kvd). */
Test(internal_req, a_clients_request_carries_its_origin)
{
    Etcdserverpb__PutRequest put = ETCDSERVERPB__PUT_REQUEST__INIT;
    put.key.data = (uint8_t *)"k";
    put.key.len = 1;
    uint8_t buf[64];
    size_t len = etcdserverpb__put_request__pack(&put, buf);
    uint8_t *out;
    size_t out_len;
    kv_ireq_origin o = {.user = "alice", .auth_revision = 7, .max_keys_per_lease = 3};
    cr_assert_eq(kv_internal_wrap_client(KV_IREQ_PUT, 0, buf, len, &o, &out, &out_len), 0);
    Kvdpb__InternalRequest *r = kvdpb__internal_request__unpack(NULL, out_len, out);
    cr_assert_not_null(r);
    cr_assert_eq(r->request_case, KVDPB__INTERNAL_REQUEST__REQUEST_PUT);
    cr_assert_str_eq(r->auth_user, "alice");
    cr_assert_eq(r->auth_revision, 7);
    cr_assert_eq(r->lease_key_limit, 3);
    cr_assert_eq(r->lease_id_by_leader, 0);
    kvdpb__internal_request__free_unpacked(r, NULL);
    free(out);

    kv_ireq_origin none = {0};
    cr_assert_eq(kv_internal_wrap_client(KV_IREQ_TXN, 0, NULL, 0, &none, &out, &out_len), 0);
    r = kvdpb__internal_request__unpack(NULL, out_len, out);
    cr_assert_not_null(r);
    cr_assert_eq(r->auth_revision, 0);
    cr_assert_eq(r->lease_key_limit, KV_LEASE_KEYS_UNLIMITED);
    kvdpb__internal_request__free_unpacked(r, NULL);
    free(out);

    Etcdserverpb__LeaseGrantRequest g = ETCDSERVERPB__LEASE_GRANT_REQUEST__INIT;
    g.ttl = 10;
    len = etcdserverpb__lease_grant_request__pack(&g, buf);
    kv_ireq_origin grant = {.max_keys_per_lease = 3, .lease_id_by_leader = 1};
    cr_assert_eq(kv_internal_wrap_client(KV_IREQ_LEASE_GRANT, 0, buf, len, &grant, &out, &out_len),
                 0);
    r = kvdpb__internal_request__unpack(NULL, out_len, out);
    cr_assert_not_null(r);
    cr_assert_eq(r->lease_id_by_leader, 1);
    cr_assert_eq(r->lease_key_limit, 0, "a grant carries no lease key limit");
    cr_assert_eq(kv_internal_lease_id_by_leader(out, out_len), 1);
    kvdpb__internal_request__free_unpacked(r, NULL);
    free(out);
}
