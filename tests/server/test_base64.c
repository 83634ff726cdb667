/* test_base64: RFC 4648 base64 (server/common/base64.h), both alphabets, padded or not. */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/base64.h"

/* RFC 4648 section 10. */
static const struct {
    const char *in, *out;
} rfc[] = {{"", ""},
           {"f", "Zg=="},
           {"fo", "Zm8="},
           {"foo", "Zm9v"},
           {"foob", "Zm9vYg=="},
           {"fooba", "Zm9vYmE="},
           {"foobar", "Zm9vYmFy"}};

static void expect_decode(const char *in, unsigned flags, const void *want, size_t wantlen)
{
    uint8_t out[64];
    size_t n = 999, bad = 777;
    cr_assert_leq(kv_b64_decoded_max(strlen(in)), sizeof out);
    cr_assert_eq(kv_b64_decode(in, strlen(in), flags, out, &n, &bad), 0, "decode \"%s\"", in);
    cr_expect_eq(n, wantlen, "decode \"%s\": %zu bytes", in, n);
    cr_expect(memcmp(out, want, wantlen) == 0, "decode \"%s\"", in);
    cr_expect_eq(bad, 777, "bad is left alone on success");
}

static void expect_reject(const char *in, unsigned flags, size_t want_bad)
{
    uint8_t out[64];
    size_t n = 999, bad = 777;
    cr_expect_eq(kv_b64_decode(in, strlen(in), flags, out, &n, &bad), -EINVAL, "\"%s\"", in);
    cr_expect_eq(bad, want_bad, "\"%s\": bad at %zu", in, bad);
    cr_expect_eq(n, 999, "\"%s\": no length on failure", in);
    cr_expect_eq(kv_b64_decode(in, strlen(in), flags, out, &n, NULL), -EINVAL, "bad may be NULL");
}

Test(base64, rfc4648_vectors_encode_padded_and_unpadded)
{
    for (size_t i = 0; i < sizeof rfc / sizeof rfc[0]; i++) {
        const char *in = rfc[i].in;
        size_t n = strlen(in), plen = strlen(rfc[i].out), ulen = strcspn(rfc[i].out, "=");
        char out[16];
        memset(out, '#', sizeof out);
        cr_expect_eq(kv_b64_encoded_len(n, true), plen);
        cr_expect_eq(kv_b64_encode((const uint8_t *)in, n, KV_B64_STD, true, out), plen);
        cr_expect(memcmp(out, rfc[i].out, plen) == 0, "std padded \"%s\"", in);
        cr_expect_eq(out[plen], '#', "writes nothing past its length");
        cr_expect_eq(kv_b64_encoded_len(n, false), ulen);
        cr_expect_eq(kv_b64_encode((const uint8_t *)in, n, KV_B64_URL, false, out), ulen);
        cr_expect(memcmp(out, rfc[i].out, ulen) == 0, "url unpadded \"%s\"", in);
    }
}

Test(base64, rfc4648_vectors_decode_padded_and_unpadded)
{
    for (size_t i = 0; i < sizeof rfc / sizeof rfc[0]; i++) {
        const char *in = rfc[i].in;
        char unpadded[16];
        snprintf(unpadded, sizeof unpadded, "%.*s", (int)strcspn(rfc[i].out, "="), rfc[i].out);
        expect_decode(rfc[i].out, KV_B64_DEC_STD | KV_B64_DEC_PAD, in, strlen(in));
        expect_decode(unpadded, KV_B64_DEC_STD | KV_B64_DEC_PAD, in, strlen(in));
        expect_decode(unpadded, KV_B64_DEC_URL | KV_B64_DEC_CANONICAL, in, strlen(in));
    }
}

Test(base64, the_two_alphabets)
{
    static const uint8_t b[] = {0xfb, 0xff, 0xbf, 0xfb, 0xff};
    char out[16];
    size_t n = kv_b64_encode(b, sizeof b, KV_B64_STD, true, out);
    cr_assert_eq(n, 8);
    cr_expect(memcmp(out, "+/+/+/8=", 8) == 0, "%.8s", out);
    n = kv_b64_encode(b, sizeof b, KV_B64_URL, false, out);
    cr_assert_eq(n, 7);
    cr_expect(memcmp(out, "-_-_-_8", 7) == 0, "%.7s", out);

    expect_decode("+/+/+/8=", KV_B64_DEC_STD | KV_B64_DEC_PAD, b, sizeof b);
    expect_decode("-_-_-_8", KV_B64_DEC_URL, b, sizeof b);
    /* both alphabets at once (the JSON gateway accepts either) */
    expect_decode("+_-/+_8=", KV_B64_DEC_STD | KV_B64_DEC_URL | KV_B64_DEC_PAD, b, sizeof b);
    /* one alphabet refuses the other's characters, at their offset */
    expect_reject("-_-_-_8", KV_B64_DEC_STD, 0);
    expect_reject("AA+/", KV_B64_DEC_URL, 2);
    expect_reject("AAA_", KV_B64_DEC_STD | KV_B64_DEC_PAD, 3);
}

Test(base64, invalid_input_rejected)
{
    const unsigned any = KV_B64_DEC_STD | KV_B64_DEC_URL | KV_B64_DEC_PAD;
    expect_reject("Zm9v!A", any, 4); /* outside the alphabet */
    expect_reject("Zm 9vY", any, 2); /* white space is not skipped */
    expect_reject("Z", any, 1);      /* 4k+1 characters cannot be base64 */
    expect_reject("Zm9vY", any, 5);
    expect_reject("Zm9vY===", any, 5);        /* ... nor after the padding goes */
    expect_reject("Zg==Zg==", any, 2);        /* padding only at the end */
    expect_reject("Zg==", KV_B64_DEC_URL, 2); /* no padding without KV_B64_DEC_PAD */
    /* non-zero unused bits: refused when canonical (JWT), ignored otherwise (JSON) */
    expect_reject("Zh", KV_B64_DEC_URL | KV_B64_DEC_CANONICAL, 2);
    expect_reject("Zm9=", KV_B64_DEC_STD | KV_B64_DEC_PAD | KV_B64_DEC_CANONICAL, 3);
    expect_decode("Zh", KV_B64_DEC_URL, "f", 1);
    expect_decode("Zm9=", KV_B64_DEC_STD | KV_B64_DEC_PAD, "fo", 2);
}

Test(base64, decoded_max_bounds_the_output)
{
    cr_expect_eq(kv_b64_decoded_max(0), 0);
    cr_expect_eq(kv_b64_decoded_max(2), 1);
    cr_expect_eq(kv_b64_decoded_max(3), 2);
    cr_expect_eq(kv_b64_decoded_max(4), 3);
    cr_expect_eq(kv_b64_decoded_max(8), 6);
    /* every length of input encodes and decodes back within that bound */
    uint8_t in[40], out[48]; /* padded: the bound counts the padding too */
    char txt[64];
    for (size_t i = 0; i < sizeof in; i++)
        in[i] = (uint8_t)(i * 37 + 11);
    for (size_t n = 0; n <= sizeof in; n++) {
        for (int pad = 0; pad < 2; pad++) {
            size_t l = kv_b64_encode(in, n, pad ? KV_B64_STD : KV_B64_URL, pad, txt);
            cr_assert_leq(kv_b64_decoded_max(l), sizeof out);
            size_t got = 0;
            cr_assert_eq(kv_b64_decode(txt, l,
                                       (pad ? KV_B64_DEC_STD | KV_B64_DEC_PAD : KV_B64_DEC_URL) |
                                           KV_B64_DEC_CANONICAL,
                                       out, &got, NULL),
                         0, "n=%zu pad=%d", n, pad);
            cr_expect_eq(got, n);
            cr_expect_leq(got, kv_b64_decoded_max(l));
            cr_expect(n == 0 || memcmp(in, out, n) == 0, "n=%zu pad=%d", n, pad);
        }
    }
}
