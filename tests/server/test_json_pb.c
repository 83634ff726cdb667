/* test_json_pb: the grpc-gateway JSON <-> protobuf mapping (server/http/json_pb.h). */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/json_pb.h"
#include "rpc.pb-c.h"

static char *to_json(const ProtobufCMessage *m)
{
    kv_jbuf b = {0};
    kv_pb_to_json(m, &b);
    cr_assert(!b.oom);
    return b.p;
}

Test(json_pb, put_request_round_trip_base64_and_int64_strings)
{
    const char in[] = "{\"key\":\"Zm9v\",\"value\":\"AP8=\",\"lease\":\"7587890000000000001\","
                      "\"prevKv\":true,\"unknown\":{\"a\":[1,2,{\"b\":null}]}}";
    ProtobufCMessage *m = NULL;
    char err[128];
    cr_assert_eq(
        kv_json_to_pb(&etcdserverpb__put_request__descriptor, in, strlen(in), &m, err, sizeof(err)),
        0, "%s", err);
    Etcdserverpb__PutRequest *p = (Etcdserverpb__PutRequest *)m;
    cr_assert_eq(p->key.len, 3);
    cr_assert(memcmp(p->key.data, "foo", 3) == 0);
    cr_assert_eq(p->value.len, 2);
    cr_assert(p->value.data[0] == 0 && p->value.data[1] == 0xff);
    cr_assert_eq(p->lease, 7587890000000000001LL);
    cr_assert(p->prev_kv);
    char *out = to_json(m);
    cr_assert_str_eq(out, "{\"key\":\"Zm9v\",\"value\":\"AP8=\",\"lease\":\"7587890000000000001\","
                          "\"prev_kv\":true}");
    free(out);
    protobuf_c_message_free_unpacked(m, NULL);
}

Test(json_pb, txn_oneof_repeated_enum_and_duplicates_do_not_leak)
{
    /* request_range then request_put for the same oneof: the last wins, the first is freed */
    const char in[] =
        "{\"compare\":[{\"key\":\"Zm9v\",\"result\":\"GREATER\",\"target\":2,\"version\":\"3\"}],"
        "\"success\":[{\"request_range\":{\"key\":\"YQ==\"},\"request_put\":{\"key\":\"Yg==\"}}],"
        "\"failure\":[],\"compare\":[{\"key\":\"YmFy\",\"value\":\"eA==\",\"target\":\"VALUE\"}]}";
    ProtobufCMessage *m = NULL;
    char err[128];
    cr_assert_eq(
        kv_json_to_pb(&etcdserverpb__txn_request__descriptor, in, strlen(in), &m, err, sizeof(err)),
        0, "%s", err);
    Etcdserverpb__TxnRequest *t = (Etcdserverpb__TxnRequest *)m;
    cr_assert_eq(t->n_compare, 1);
    cr_assert_eq(t->compare[0]->target, ETCDSERVERPB__COMPARE__COMPARE_TARGET__VALUE);
    cr_assert_eq(t->n_success, 1);
    cr_assert_eq(t->success[0]->request_case, ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT);
    char *out = to_json(m);
    cr_assert_str_eq(out,
                     "{\"compare\":[{\"target\":\"VALUE\",\"key\":\"YmFy\",\"value\":\"eA==\"}],"
                     "\"success\":[{\"request_put\":{\"key\":\"Yg==\"}}]}");
    free(out);
    protobuf_c_message_free_unpacked(m, NULL);
}

Test(json_pb, malformed_input_is_refused_without_leaks)
{
    static const char *bad[] = {
        "{\"key\":",
        "{\"key\":\"Zm9v\"",
        "{\"key\":\"@@\"}",
        "{\"lease\":\"x\"}",
        "{\"lease\":1e400}",
        "{\"prev_kv\":1}",
        "[1]",
        "{\"key\":\"Zm9v\"} x",
        "{\"key\":\"\\",
        "{\"key\":\"\\u12\"}",
        "{\"success\":[{\"request_put\":{\"key\":\"YQ==\"},]}",
        "{\"compare\":[{\"result\":\"NOPE\"}]}",
        "{\"success\":[null]}", /* a NULL element: packing the request would follow it */
        "{\"compare\":[{\"key\":\"YQ==\"}, null]}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        const ProtobufCMessageDescriptor *d = strstr(bad[i], "compare") || strstr(bad[i], "success")
                                                  ? &etcdserverpb__txn_request__descriptor
                                                  : &etcdserverpb__put_request__descriptor;
        ProtobufCMessage *m = NULL;
        char err[128];
        int rc = kv_json_to_pb(d, bad[i], strlen(bad[i]), &m, err, sizeof(err));
        cr_assert_eq(rc, -22, "accepted: %s", bad[i]);
        cr_assert_null(m);
        cr_assert(err[0], "no message for %s", bad[i]);
    }
}

Test(json_pb, nesting_is_bounded)
{
    size_t depth = 10000;
    char *in = malloc(depth * 2 + 32);
    size_t n = (size_t)sprintf(in, "{\"unknown\":");
    for (size_t i = 0; i < depth; i++)
        in[n++] = '[';
    for (size_t i = 0; i < depth; i++)
        in[n++] = ']';
    in[n++] = '}';
    ProtobufCMessage *m = NULL;
    char err[128];
    cr_assert_eq(kv_json_to_pb(&etcdserverpb__put_request__descriptor, in, n, &m, err, sizeof(err)),
                 -22);
    cr_assert_str_eq(err, "JSON nested too deeply");
    free(in);
}

Test(json_pb, empty_body_is_the_empty_request_and_strings_are_escaped)
{
    ProtobufCMessage *m = NULL;
    cr_assert_eq(kv_json_to_pb(&etcdserverpb__member_list_request__descriptor, " ", 1, &m, NULL, 0),
                 0);
    char *out = to_json(m);
    cr_assert_str_eq(out, "{}");
    free(out);
    protobuf_c_message_free_unpacked(m, NULL);
    const char in[] = "{\"name\":\"a\\\"<\\u00e9\\ud83d\\ude00\\n\",\"peerURLs\":[\"x\",\"y\"]}";
    cr_assert_eq(
        kv_json_to_pb(&etcdserverpb__member_add_request__descriptor, in, strlen(in), &m, NULL, 0),
        0);
    out = to_json(m);
    cr_assert_str_eq(out, "{\"peerURLs\":[\"x\",\"y\"]}");
    free(out);
    protobuf_c_message_free_unpacked(m, NULL);
    Etcdserverpb__Member mem = ETCDSERVERPB__MEMBER__INIT;
    mem.name = "a\"<\xc3\xa9\n";
    out = to_json(&mem.base);
    cr_assert_str_eq(out, "{\"name\":\"a\\\"\\u003c\xc3\xa9\\n\"}");
    free(out);
}
