/* Unit tests: gRPC deframer, grpc-timeout parsing, grpc-message percent-encoding. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grpc/grpc_wire.h"

typedef struct got {
    int n;
    char msgs[8][256];
    size_t lens[8];
    int stop_after;
} got;

static int collect(void *arg, const uint8_t *msg, size_t len)
{
    got *g = arg;
    if (g->n < 8) {
        memcpy(g->msgs[g->n], msg, len < 256 ? len : 256);
        g->lens[g->n] = len;
    }
    g->n++;
    return g->stop_after && g->n >= g->stop_after;
}

static size_t frame(uint8_t *out, uint8_t flag, const char *body, uint32_t len)
{
    out[0] = flag;
    out[1] = (uint8_t)(len >> 24);
    out[2] = (uint8_t)(len >> 16);
    out[3] = (uint8_t)(len >> 8);
    out[4] = (uint8_t)len;
    if (body)
        memcpy(out + 5, body, len);
    return 5 + (body ? len : 0);
}

Test(deframer, split_byte_by_byte)
{
    kv_grpc_deframer d;
    kv_grpc_deframer_init(&d, 1024);
    uint8_t buf[64];
    size_t n = frame(buf, 0, "hello", 5);
    got g = {0};
    for (size_t i = 0; i < n; i++) {
        size_t used;
        cr_assert_eq(kv_grpc_deframer_feed(&d, buf + i, 1, &used, collect, &g), 0);
        cr_assert_eq(used, 1);
        if (i + 1 < n) {
            cr_assert_eq(g.n, 0);
            cr_assert(kv_grpc_deframer_partial(&d));
        }
    }
    cr_assert_eq(g.n, 1);
    cr_assert_eq(g.lens[0], 5);
    cr_assert_eq(memcmp(g.msgs[0], "hello", 5), 0);
    cr_assert_not(kv_grpc_deframer_partial(&d));
    kv_grpc_deframer_free(&d);
}

Test(deframer, merged_messages_and_empty_message)
{
    kv_grpc_deframer d;
    kv_grpc_deframer_init(&d, 1024);
    uint8_t buf[128];
    size_t n = frame(buf, 0, "one", 3);
    n += frame(buf + n, 0, "two!", 4);
    n += frame(buf + n, 0, "", 0); /* zero-length message at the very end */
    got g = {0};
    size_t used;
    cr_assert_eq(kv_grpc_deframer_feed(&d, buf, n, &used, collect, &g), 0);
    cr_assert_eq(used, n);
    cr_assert_eq(g.n, 3);
    cr_assert_eq(memcmp(g.msgs[0], "one", 3), 0);
    cr_assert_eq(memcmp(g.msgs[1], "two!", 4), 0);
    cr_assert_eq(g.lens[2], 0);
    kv_grpc_deframer_free(&d);
}

Test(deframer, split_across_chunks_in_the_middle)
{
    kv_grpc_deframer d;
    kv_grpc_deframer_init(&d, 1024);
    uint8_t buf[128];
    size_t n = frame(buf, 0, "abcdef", 6);
    n += frame(buf + n, 0, "ghij", 4);
    got g = {0};
    /* first chunk: whole first message + 7 bytes of the second (prefix + 2 body bytes) */
    cr_assert_eq(kv_grpc_deframer_feed(&d, buf, 11 + 7, NULL, collect, &g), 0);
    cr_assert_eq(g.n, 1);
    cr_assert_eq(kv_grpc_deframer_feed(&d, buf + 18, n - 18, NULL, collect, &g), 0);
    cr_assert_eq(g.n, 2);
    cr_assert_eq(memcmp(g.msgs[1], "ghij", 4), 0);
    kv_grpc_deframer_free(&d);
}

Test(deframer, compressed_flag_rejected)
{
    kv_grpc_deframer d;
    kv_grpc_deframer_init(&d, 1024);
    uint8_t buf[64];
    size_t n = frame(buf, 1, "zz", 2);
    got g = {0};
    cr_assert_eq(kv_grpc_deframer_feed(&d, buf, n, NULL, collect, &g), KV_GRPC_DF_COMPRESSED);
    cr_assert_eq(g.n, 0);
    kv_grpc_deframer_free(&d);
    kv_grpc_deframer_init(&d, 1024);
    n = frame(buf, 7, "zz", 2);
    cr_assert_eq(kv_grpc_deframer_feed(&d, buf, n, NULL, collect, &g), KV_GRPC_DF_BAD_FLAG);
    cr_assert_eq(d.flag, 7);
    kv_grpc_deframer_free(&d);
}

Test(deframer, oversized_prefix_rejected_before_body)
{
    kv_grpc_deframer d;
    kv_grpc_deframer_init(&d, 1024);
    uint8_t buf[8];
    frame(buf, 0, NULL, 1u << 30);
    got g = {0};
    size_t used = 0;
    /* only the 5-byte prefix: the error must come now, nothing buffered */
    cr_assert_eq(kv_grpc_deframer_feed(&d, buf, 5, &used, collect, &g), KV_GRPC_DF_TOO_LARGE);
    cr_assert_eq(used, 5);
    cr_assert_eq(d.msg_len, 1u << 30);
    cr_assert_eq(kv_grpc_deframer_buffered(&d), 0);
    cr_assert_eq(g.n, 0);
    kv_grpc_deframer_free(&d);
}

Test(deframer, exactly_max_is_accepted)
{
    kv_grpc_deframer d;
    kv_grpc_deframer_init(&d, 16);
    uint8_t buf[64];
    size_t n = frame(buf, 0, "0123456789abcdef", 16);
    got g = {0};
    cr_assert_eq(kv_grpc_deframer_feed(&d, buf, n, NULL, collect, &g), 0);
    cr_assert_eq(g.n, 1);
    n = frame(buf, 0, "0123456789abcdefg", 17);
    cr_assert_eq(kv_grpc_deframer_feed(&d, buf, n, NULL, collect, &g), KV_GRPC_DF_TOO_LARGE);
    kv_grpc_deframer_free(&d);
}

Test(deframer, stop_reports_consumed)
{
    kv_grpc_deframer d;
    kv_grpc_deframer_init(&d, 1024);
    uint8_t buf[128];
    size_t n1 = frame(buf, 0, "first", 5);
    size_t n = n1 + frame(buf + n1, 0, "second", 6);
    got g = {.stop_after = 1};
    size_t used;
    cr_assert_eq(kv_grpc_deframer_feed(&d, buf, n, &used, collect, &g), KV_GRPC_DF_STOPPED);
    cr_assert_eq(used, n1);
    g.stop_after = 0;
    cr_assert_eq(kv_grpc_deframer_feed(&d, buf + used, n - used, &used, collect, &g), 0);
    cr_assert_eq(g.n, 2);
    cr_assert_eq(memcmp(g.msgs[1], "second", 6), 0);
    kv_grpc_deframer_free(&d);
}

Test(deframer, buffer_grows_with_received_bytes_only)
{
    kv_grpc_deframer d;
    kv_grpc_deframer_init(&d, 1 << 20);
    size_t len = 100000;
    uint8_t *buf = malloc(len + 5);
    frame(buf, 0, NULL, (uint32_t)len);
    for (size_t i = 0; i < len; i++)
        buf[5 + i] = (uint8_t)(i * 7);
    got g = {0};
    cr_assert_eq(kv_grpc_deframer_feed(&d, buf, 5 + 1000, NULL, collect, &g), 0);
    cr_assert_leq(kv_grpc_deframer_buffered(&d), 8192, "prefix must not pre-allocate the body");
    for (size_t off = 1005; off < len + 5; off += 1000) {
        size_t n = len + 5 - off < 1000 ? len + 5 - off : 1000;
        cr_assert_eq(kv_grpc_deframer_feed(&d, buf + off, n, NULL, collect, &g), 0);
        cr_assert_leq(kv_grpc_deframer_buffered(&d), len);
    }
    cr_assert_eq(g.n, 1);
    cr_assert_eq(g.lens[0], len);
    cr_assert_eq(memcmp(g.msgs[0], buf + 5, 256), 0);
    free(buf);
    kv_grpc_deframer_free(&d);
}

static uint64_t tmo(const char *s, int *rv)
{
    uint64_t ms = 12345;
    *rv = kv_grpc_parse_timeout(s, strlen(s), &ms);
    return ms;
}

Test(timeout, units)
{
    int rv;
    cr_assert_eq(tmo("2H", &rv), 7200000);
    cr_assert_eq(rv, 0);
    cr_assert_eq(tmo("3M", &rv), 180000);
    cr_assert_eq(tmo("1S", &rv), 1000);
    cr_assert_eq(tmo("100m", &rv), 100);
    cr_assert_eq(tmo("1500u", &rv), 2, "micros round up");
    cr_assert_eq(tmo("1n", &rv), 1, "nanos round up");
    cr_assert_eq(tmo("0m", &rv), 0);
    cr_assert_eq(tmo("99999999S", &rv), 99999999000ULL);
    cr_assert_eq(rv, 0);
}

Test(timeout, malformed)
{
    int rv;
    const char *bad[] = {"", "S", "12", "1x", "123456789S", "-1S", "1.5S", " 1S", "1s"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        tmo(bad[i], &rv);
        cr_assert_eq(rv, -EINVAL, "'%s' must be rejected", bad[i]);
    }
}

Test(percent, encode_and_decode)
{
    char *e = kv_grpc_percent_encode("bad arg: \xc3\xbc 100%\n");
    cr_assert_str_eq(e, "bad arg: %C3%BC 100%25%0A");
    char out[64];
    kv_grpc_percent_decode(e, strlen(e), out);
    cr_assert_str_eq(out, "bad arg: \xc3\xbc 100%\n");
    free(e);
    e = kv_grpc_percent_encode(NULL);
    cr_assert_str_eq(e, "");
    free(e);
    e = kv_grpc_percent_encode("plain ~ text");
    cr_assert_str_eq(e, "plain ~ text");
    free(e);
    /* malformed escapes pass through verbatim */
    kv_grpc_percent_decode("a%zzb%4", 7, out);
    cr_assert_str_eq(out, "a%zzb%4");
}

Test(codes, names)
{
    cr_assert_str_eq(kv_grpc_code_name(0), "OK");
    cr_assert_str_eq(kv_grpc_code_name(8), "RESOURCE_EXHAUSTED");
    cr_assert_str_eq(kv_grpc_code_name(12), "UNIMPLEMENTED");
    cr_assert_str_eq(kv_grpc_code_name(16), "UNAUTHENTICATED");
    cr_assert_str_eq(kv_grpc_code_name(99), "UNKNOWN");
}
