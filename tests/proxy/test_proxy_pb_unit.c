/*
 * proxy_pb_unit: the protobuf fields the proxy reads without unpacking (server/proxy/proxy_pb.c)
 * against protobuf-c's own packing: a keepalive message's lease id, the header revision of KV
 * answers (--experimental-serializable-ordering), and malformed bytes refused, never read past.
 */
#include "proxy/proxy_pb.h"

#include "rpc.pb-c.h"

#include <criterion/criterion.h>

#include <errno.h>
#include <string.h>

static size_t pack_range_resp(uint8_t *buf, int64_t rev, int with_kv)
{
    Etcdserverpb__RangeResponse r = ETCDSERVERPB__RANGE_RESPONSE__INIT;
    Etcdserverpb__ResponseHeader h = ETCDSERVERPB__RESPONSE_HEADER__INIT;
    Mvccpb__KeyValue kv = MVCCPB__KEY_VALUE__INIT, *kvs[1] = {&kv};
    h.cluster_id = 7;
    h.member_id = 9;
    h.revision = rev;
    h.raft_term = 3;
    r.header = &h;
    if (with_kv) {
        kv.key.data = (uint8_t *)"k";
        kv.key.len = 1;
        kv.mod_revision = rev - 1; /* a revision field outside the header: not the answer */
        r.kvs = kvs;
        r.n_kvs = 1;
        r.count = 1;
    }
    return etcdserverpb__range_response__pack(&r, buf);
}

Test(proxy_pb_unit, header_revision_of_kv_answers)
{
    uint8_t buf[256];
    int64_t rev = -1;
    size_t n = pack_range_resp(buf, 123456789012LL, 1);
    cr_assert_eq(kv_proxy_pb_header_revision(buf, n, &rev), 0);
    cr_assert_eq(rev, 123456789012LL);

    Etcdserverpb__TxnResponse t = ETCDSERVERPB__TXN_RESPONSE__INIT;
    Etcdserverpb__ResponseHeader h = ETCDSERVERPB__RESPONSE_HEADER__INIT;
    h.revision = 42;
    t.header = &h;
    t.succeeded = 1;
    n = etcdserverpb__txn_response__pack(&t, buf);
    cr_assert_eq(kv_proxy_pb_header_revision(buf, n, &rev), 0);
    cr_assert_eq(rev, 42);

    /* no header (proto3: absent), an empty message: revision 0 */
    Etcdserverpb__PutResponse p = ETCDSERVERPB__PUT_RESPONSE__INIT;
    n = etcdserverpb__put_response__pack(&p, buf);
    cr_assert_eq(kv_proxy_pb_header_revision(buf, n, &rev), 0);
    cr_assert_eq(rev, 0);
    cr_assert_eq(kv_proxy_pb_header_revision(buf, 0, &rev), 0);
    cr_assert_eq(rev, 0);
}

Test(proxy_pb_unit, malformed_answers_are_refused)
{
    uint8_t buf[256];
    int64_t rev;
    size_t n = pack_range_resp(buf, 1000, 1);
    for (size_t cut = 1; cut < n; cut++) { /* every truncation: refused or a complete prefix */
        int rc = kv_proxy_pb_header_revision(buf, cut, &rev);
        cr_assert(rc == 0 || rc == -EINVAL, "cut %zu: %d", cut, rc);
        cr_assert(rc != 0 || rev == 0 || rev == 1000, "cut %zu: revision %lld", cut,
                  (long long)rev);
    }
    const uint8_t header_as_varint[] = {0x08, 0x05}; /* field 1 with wire type 0 */
    cr_assert_eq(kv_proxy_pb_header_revision(header_as_varint, 2, &rev), -EINVAL);
    const uint8_t long_length[] = {0x0a, 0x7f, 0x18, 0x01}; /* header longer than the bytes */
    cr_assert_eq(kv_proxy_pb_header_revision(long_length, 4, &rev), -EINVAL);
    const uint8_t bad_wire[] = {0x0f}; /* wire type 7 */
    cr_assert_eq(kv_proxy_pb_header_revision(bad_wire, 1, &rev), -EINVAL);
    const uint8_t field0[] = {0x00, 0x01};
    cr_assert_eq(kv_proxy_pb_header_revision(field0, 2, &rev), -EINVAL);
}

Test(proxy_pb_unit, keepalive_lease_ids)
{
    uint8_t buf[16];
    int64_t id;
    size_t n = kv_proxy_pb_keepalive_req(buf, 0x7fffffffffffffffLL);
    Etcdserverpb__LeaseKeepAliveRequest *q =
        etcdserverpb__lease_keep_alive_request__unpack(NULL, n, buf);
    cr_assert_not_null(q);
    cr_assert_eq(q->id, 0x7fffffffffffffffLL);
    etcdserverpb__lease_keep_alive_request__free_unpacked(q, NULL);
    cr_assert_eq(kv_proxy_pb_varint_field(buf, n, 1, &id), 0);
    cr_assert_eq(id, 0x7fffffffffffffffLL);

    Etcdserverpb__LeaseKeepAliveResponse r = ETCDSERVERPB__LEASE_KEEP_ALIVE_RESPONSE__INIT;
    Etcdserverpb__ResponseHeader h = ETCDSERVERPB__RESPONSE_HEADER__INIT;
    uint8_t rb[64];
    h.revision = 5;
    r.header = &h;
    r.id = 77;
    r.ttl = 30;
    size_t rn = etcdserverpb__lease_keep_alive_response__pack(&r, rb);
    cr_assert_eq(kv_proxy_pb_varint_field(rb, rn, 2, &id), 0);
    cr_assert_eq(id, 77);
    cr_assert_eq(kv_proxy_pb_varint_field(rb, rn, 1, &id), -EINVAL, "field 1 is the header");
}
