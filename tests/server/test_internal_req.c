#include "apply/internal_req.h"
#include "internal.pb-c.h"

#include <criterion/criterion.h>
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
