/*
 * Unit tests of kvctl's Go-compatible formatters. Expected strings are what Go (json.Marshal,
 * humanize.Bytes, time.Duration.String, tablewriter as vendored by etcdctl 3.4) prints.
 */
#include <criterion/criterion.h>

#include <stdlib.h>
#include <string.h>

#include "common/base64.h"
#include "out.h"
#include "rpc.pb-c.h"
#include "table.h"

static char *json_str(const char *s, size_t n)
{
    struct kvctl_buf b = {0};
    kvctl_json_string(&b, (const uint8_t *)s, n);
    cr_assert(kvctl_buf_ok(&b));
    return b.p;
}

Test(kvctl_format, json_string_escapes_like_go)
{
    const char in[] = "<a&b>\"\\\n\t\r\x01\x7f\xe2\x80\xa8\xc3\xa9";
    char *s = json_str(in, sizeof(in) - 1);
    cr_expect_str_eq(s, "\"\\u003ca\\u0026b\\u003e\\\"\\\\\\n\\t\\r\\u0001\x7f\\u2028\xc3\xa9\"");
    free(s);
    /* invalid UTF-8 becomes U+FFFD, one per bad byte */
    s = json_str("a\xff\xc3", 3);
    cr_expect_str_eq(s, "\"a\\ufffd\\ufffd\"");
    free(s);
}

Test(kvctl_format, base64)
{
    static const struct {
        const char *in, *out;
    } cases[] = {{"", "\"\""},        {"f", "\"Zg==\""},        {"fo", "\"Zm8=\""},
                 {"foo", "\"Zm9v\""}, {"foob", "\"Zm9vYg==\""}, {"health", "\"aGVhbHRo\""}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct kvctl_buf b = {0};
        kvctl_json_bytes(&b, (const uint8_t *)cases[i].in, strlen(cases[i].in));
        cr_expect_str_eq(kvctl_buf_str(&b), cases[i].out, "base64(%s)", cases[i].in);
        kvctl_buf_free(&b);
    }
    /* values longer than one 3 KiB chunk: one padded string that decodes to the input */
    for (size_t n = 3071; n <= 7001; n += 1965) {
        uint8_t *in = malloc(n), *back = malloc(n + 3);
        cr_assert(in && back);
        for (size_t i = 0; i < n; i++)
            in[i] = (uint8_t)(i * 131 + 7);
        struct kvctl_buf b = {0};
        kvctl_json_bytes(&b, in, n);
        const char *q = kvctl_buf_str(&b);
        size_t ql = strlen(q), got = 0;
        cr_assert_eq(ql, kv_b64_encoded_len(n, true) + 2, "%zu bytes", n);
        cr_assert_eq(strchr(q, '=') ? (size_t)(strchr(q, '=') - q) >= ql - 3 : 1, 1,
                     "padding only at the end");
        cr_assert_eq(
            kv_b64_decode(q + 1, ql - 2, KV_B64_DEC_STD | KV_B64_DEC_PAD, back, &got, NULL), 0);
        cr_assert_eq(got, n);
        cr_assert(memcmp(in, back, n) == 0, "%zu bytes round trip", n);
        kvctl_buf_free(&b);
        free(in);
        free(back);
    }
}

Test(kvctl_format, message_omits_empty_fields_and_keeps_proto_names)
{
    Etcdserverpb__ResponseHeader h;
    etcdserverpb__response_header__init(&h);
    h.revision = 20;
    Mvccpb__KeyValue kv;
    mvccpb__key_value__init(&kv);
    kv.key.data = (uint8_t *)"k1";
    kv.key.len = 2;
    kv.create_revision = 19;
    kv.mod_revision = 19;
    kv.version = 1;
    Mvccpb__KeyValue *kvs[] = {&kv};
    Etcdserverpb__RangeResponse rr;
    etcdserverpb__range_response__init(&rr);
    rr.header = &h;
    rr.kvs = kvs;
    rr.n_kvs = 1;
    rr.count = 1;
    Etcdserverpb__ResponseOp op;
    etcdserverpb__response_op__init(&op);
    op.response_case = ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_RANGE;
    op.response_range = &rr;
    Etcdserverpb__ResponseOp *ops[] = {&op};
    Etcdserverpb__TxnResponse t;
    etcdserverpb__txn_response__init(&t);
    t.succeeded = 1;
    t.responses = ops;
    t.n_responses = 1;
    struct kvctl_buf b = {0};
    kvctl_json_message(&b, &t.base);
    cr_expect_str_eq(kvctl_buf_str(&b),
                     "{\"succeeded\":true,\"responses\":[{\"Response\":{\"ResponseRange\":{"
                     "\"header\":{\"revision\":20},\"kvs\":[{\"key\":\"azE=\",\"create_revision\":"
                     "19,\"mod_revision\":19,\"version\":1}],\"count\":1}}}]}");
    kvctl_buf_free(&b);

    /* uint64 beyond int64 and camelCase proto names (StatusResponse) */
    Etcdserverpb__StatusResponse st;
    etcdserverpb__status_response__init(&st);
    st.leader = 18446744073709551615ull;
    st.dbsize = 20480;
    st.version = "3.4.23";
    kvctl_json_message(&b, &st.base);
    cr_expect_str_eq(kvctl_buf_str(&b),
                     "{\"version\":\"3.4.23\",\"dbSize\":20480,\"leader\":18446744073709551615}");
    kvctl_buf_free(&b);
}

Test(kvctl_format, humanize_bytes)
{
    static const struct {
        uint64_t n;
        const char *s;
    } cases[] = {{0, "0 B"},         {9, "9 B"},
                 {10, "10 B"},       {999, "999 B"},
                 {1000, "1.0 kB"},   {16384, "16 kB"},
                 {20480, "20 kB"},   {1500000, "1.5 MB"},
                 {9950000, "10 MB"}, {2147483648ull, "2.1 GB"}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char buf[32];
        kvctl_humanize_bytes(buf, sizeof(buf), cases[i].n);
        cr_expect_str_eq(buf, cases[i].s, "humanize(%llu)", (unsigned long long)cases[i].n);
    }
}

Test(kvctl_format, go_duration)
{
    static const struct {
        int64_t ns;
        const char *s;
    } cases[] = {{0, "0s"},
                 {999, "999ns"},
                 {1000, "1\xc2\xb5s"},
                 {850000, "850\xc2\xb5s"},
                 {1200000, "1.2ms"},
                 {3187973, "3.187973ms"},
                 {5000416377, "5.000416377s"},
                 {90000000000, "1m30s"},
                 {3600000000000, "1h0m0s"},
                 {-1500000, "-1.5ms"}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char buf[64];
        kvctl_go_duration(buf, sizeof(buf), cases[i].ns);
        cr_expect_str_eq(buf, cases[i].s, "duration(%lld)", (long long)cases[i].ns);
    }
}

static char *render(const char *const *hdr, size_t nc, const char *const *rows, size_t nr)
{
    struct kvctl_table t;
    cr_assert(kvctl_table_init(&t, hdr, nc) == 0);
    for (size_t r = 0; r < nr; r++)
        cr_assert(kvctl_table_add(&t, rows + r * nc) == 0);
    struct kvctl_buf b = {0};
    kvctl_table_render(&t, &b);
    kvctl_table_free(&t);
    cr_assert(kvctl_buf_ok(&b));
    return b.p;
}

Test(kvctl_format, table_layout_matches_etcdctl)
{
    /* etcdctl 3.4 `endpoint health -w table` */
    static const char *const hdr[] = {"endpoint", "health", "took", "error"};
    static const char *const rows[] = {"127.0.0.1:23790", "true", "2.309315ms", ""};
    char *s = render(hdr, 4, rows, 1);
    cr_expect_str_eq(s, "+-----------------+--------+------------+-------+\n"
                        "|    ENDPOINT     | HEALTH |    TOOK    | ERROR |\n"
                        "+-----------------+--------+------------+-------+\n"
                        "| 127.0.0.1:23790 |   true | 2.309315ms |       |\n"
                        "+-----------------+--------+------------+-------+\n");
    free(s);
    /* no rows: header and two rules */
    s = render(hdr, 4, NULL, 0);
    cr_expect_str_eq(s, "+----------+--------+------+-------+\n"
                        "| ENDPOINT | HEALTH | TOOK | ERROR |\n"
                        "+----------+--------+------+-------+\n"
                        "+----------+--------+------+-------+\n");
    free(s);
}

Test(kvctl_format, table_wraps_long_cells_at_spaces)
{
    static const char *const hdr[] = {"a", "error"};
    static const char *const rows[] = {"x", "one two three four five six seven eight nine"};
    char *s = render(hdr, 2, rows, 1);
    /* 44 characters wrapped to the 30-column limit by minimum raggedness; the filler of a
     * shorter cell is two spaces wide, which shifts a 1-column cell (as tablewriter does) */
    cr_expect_str_eq(s,
                     "+---+--------------------------------+\n"
                     "| A |             ERROR              |\n"
                     "+---+--------------------------------+\n"
                     "| x |    one two three four five six |\n"
                     "|    |               seven eight nine |\n"
                     "+---+--------------------------------+\n",
                     "got:\n%s", s);
    free(s);
}
