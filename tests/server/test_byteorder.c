/* test_byteorder: the fixed-width and varint codecs (server/common/byteorder.h, varint.h). */
#include <criterion/criterion.h>

#include <string.h>

#include "common/byteorder.h"
#include "common/varint.h"

Test(byteorder, little_and_big_endian_round_trip_at_odd_offsets)
{
    uint8_t b[17];
    memset(b, 0xee, sizeof b);
    kv_put_le16(b + 1, 0x0102);
    cr_expect(memcmp(b + 1, "\x02\x01", 2) == 0);
    cr_expect_eq(kv_le16(b + 1), 0x0102);
    kv_put_le32(b + 1, 0x01020304u);
    cr_expect(memcmp(b + 1, "\x04\x03\x02\x01", 4) == 0);
    cr_expect_eq(kv_le32(b + 1), 0x01020304u);
    kv_put_le64(b + 1, 0x0102030405060708ull);
    cr_expect(memcmp(b + 1, "\x08\x07\x06\x05\x04\x03\x02\x01", 8) == 0);
    cr_expect_eq(kv_le64(b + 1), 0x0102030405060708ull);
    kv_put_be32(b + 1, 0xf1020304u);
    cr_expect(memcmp(b + 1, "\xf1\x02\x03\x04", 4) == 0);
    cr_expect_eq(kv_be32(b + 1), 0xf1020304u);
    kv_put_be64(b + 1, 0xf102030405060708ull);
    cr_expect(memcmp(b + 1, "\xf1\x02\x03\x04\x05\x06\x07\x08", 8) == 0);
    cr_expect_eq(kv_be64(b + 1), 0xf102030405060708ull);
    cr_expect_eq(b[0], 0xee, "writes only its width");
    cr_expect_eq(b[9], 0xee, "writes only its width");
}

Test(varint, protobuf_encoding)
{
    static const struct {
        uint64_t v;
        const char *wire;
        size_t n;
    } cases[] = {
        {0, "\x00", 1},       {1, "\x01", 1},
        {127, "\x7f", 1},     {128, "\x80\x01", 2},
        {300, "\xac\x02", 2}, {UINT64_MAX, "\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 10}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint8_t b[KV_VARINT_MAX + 1];
        memset(b, 0xee, sizeof b);
        cr_expect_eq(kv_varint_put(b, cases[i].v), cases[i].n, "%llu",
                     (unsigned long long)cases[i].v);
        cr_expect(memcmp(b, cases[i].wire, cases[i].n) == 0, "%llu",
                  (unsigned long long)cases[i].v);
        cr_expect_eq(b[cases[i].n], 0xee);
        cr_expect_eq(kv_varint_len(cases[i].v), cases[i].n, "len of %llu",
                     (unsigned long long)cases[i].v);
    }
}
