/*
 * proxy_naming_unit: the registration record of the grpc-proxy (server/proxy/proxy_naming.h)
 * alone. The expected bytes were produced by Go 1.19's encoding/json (etcd 3.4.23's
 * toolchain) marshalling grpc's naming.Update{Op, Addr, Metadata} with etcd's
 * meta{Name `json:"name"`} as the Metadata string: escapes, HTML-safe characters, invalid
 * UTF-8 and U+2028 included. Decoding follows json.Unmarshal's field matching and etcd's
 * skips and failures.
 */
#include "proxy/proxy_naming.h"

#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void enc_eq(const char *addr, const char *host, const char *want)
{
    char *out = NULL;
    size_t len = 0;
    cr_assert_eq(kv_proxy_naming_encode(addr, host, &out, &len), 0);
    cr_assert_str_eq(out, want);
    cr_assert_eq(len, strlen(want));
    /* and it reads back */
    char *a = NULL, *m = NULL, *n = NULL;
    cr_assert_eq(kv_proxy_naming_decode((const uint8_t *)out, len, &a, &m), 0, "%s", out);
    cr_assert_not_null(m);
    cr_assert_eq(kv_proxy_naming_meta_name(m, &n), 0, "%s", m);
    free(a);
    free(m);
    free(n);
    free(out);
}

Test(proxy_naming_unit, encode_as_go)
{
    enc_eq("http://127.0.0.1:1<&>host", "host",
           "{\"Op\":0,\"Addr\":\"http://127.0.0.1:1\\u003c\\u0026\\u003ehost\",\"Metadata\":"
           "\"{\\\"name\\\":\\\"host\\\"}\"}");
    const char *weird = "we\x01ird\"\\<&>\n\t\b\f\xff\xe2\x80\xa8\xc3\xa9\xf0\x9f\x98\x80";
    char addr[128];
    snprintf(addr, sizeof addr, "http://127.0.0.1:1<&>%s", weird);
    enc_eq(
        addr, weird,
        "{\"Op\":0,\"Addr\":\"http://127.0.0.1:1\\u003c\\u0026\\u003ewe\\u0001ird\\\"\\\\"
        "\\u003c\\u0026\\u003e\\n\\t\\u0008\\u000c\\ufffd\\u2028\xc3\xa9\xf0\x9f\x98\x80\","
        "\"Metadata\":\"{\\\"name\\\":\\\"we\\\\u0001ird\\\\\\\"\\\\\\\\\\\\u003c\\\\u0026"
        "\\\\u003e\\\\n\\\\t\\\\u0008\\\\u000c\\\\ufffd\\\\u2028\xc3\xa9\xf0\x9f\x98\x80\\\"}\"}");
}

static int dec(const char *v, char **addr, char **meta)
{
    return kv_proxy_naming_decode((const uint8_t *)v, strlen(v), addr, meta);
}

Test(proxy_naming_unit, decode_like_json_unmarshal)
{
    char *a, *m, *n;
    /* field names match case-insensitively, unknown fields and whitespace are fine */
    cr_assert_eq(dec(" { \"addr\" : \"h:1\", \"x\": [1, {\"y\": null}], \"METADATA\": "
                     "\"{\\\"Name\\\": \\\"p\\u00e9\\\"}\", \"op\": 1 } ",
                     &a, &m),
                 0);
    cr_assert_str_eq(a, "h:1");
    cr_assert_eq(kv_proxy_naming_meta_name(m, &n), 0);
    cr_assert_str_eq(n, "p\xc3\xa9");
    free(a), free(m), free(n);
    /* a surrogate pair */
    cr_assert_eq(dec("{\"Addr\":\"\\ud83d\\ude00\"}", &a, &m), 0);
    cr_assert_str_eq(a, "\xf0\x9f\x98\x80");
    cr_assert_null(m); /* no Metadata: etcd's MemberList fails on it */
    free(a);
    /* records etcd's resolver skips */
    const char *bad[] = {"",
                         "x",
                         "{",
                         "{\"Addr\":1}",
                         "{\"Op\":\"add\"}",
                         "{\"Op\":256}",
                         "{\"Op\":-1}",
                         "{\"Addr\":\"a\"} x",
                         "[]",
                         "{\"Addr\":\"a\",}",
                         NULL};
    for (int i = 0; bad[i]; i++)
        cr_assert_lt(dec(bad[i], &a, &m), 0, "%s", bad[i]);
    /* Metadata not a string: decoded, but no metadata */
    cr_assert_eq(dec("{\"Addr\":\"a\",\"Metadata\":{\"name\":\"x\"}}", &a, &m), 0);
    cr_assert_null(m);
    free(a);
    /* metadata: null and {} are an empty name; anything else fails */
    cr_assert_eq(kv_proxy_naming_meta_name("null", &n), 0);
    cr_assert_str_eq(n, "");
    free(n);
    cr_assert_eq(kv_proxy_naming_meta_name("{}", &n), 0);
    cr_assert_str_eq(n, "");
    free(n);
    cr_assert_lt(kv_proxy_naming_meta_name("<nil>", &n), 0);
    cr_assert_lt(kv_proxy_naming_meta_name("{\"name\":5}", &n), 0);
    cr_assert_lt(kv_proxy_naming_meta_name("\"x\"", &n), 0);
}
