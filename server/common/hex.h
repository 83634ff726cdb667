/*
 * hex: hexadecimal digits, as the text formats kvd reads write them (JSON's \uXXXX escapes,
 * gRPC's percent-encoding). Pure, any thread.
 */
#ifndef KV_COMMON_HEX_H
#define KV_COMMON_HEX_H

#include <stdint.h>

/* The value of hex digit c (0-9, a-f, A-F), or -1 if c is not one. */
static inline int kv_hex_digit(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Reads the 4 hex digits at p into *v. Precondition: p[0..4) is readable. Returns 0, or
 * -1 if one of them is not a hex digit (*v then undefined). */
static inline int kv_hex4(const char *p, uint32_t *v)
{
    uint32_t x = 0;
    for (int i = 0; i < 4; i++) {
        int d = kv_hex_digit((unsigned char)p[i]);
        if (d < 0)
            return -1;
        x = x << 4 | (uint32_t)d;
    }
    *v = x;
    return 0;
}

#endif
