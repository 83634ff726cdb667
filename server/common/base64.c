/* base64: RFC 4648 encoding and decoding (see base64.h). */
#include "common/base64.h"

#include <errno.h>

static const char ALPHABET[2][65] = {
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/",
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_",
};

size_t kv_b64_encoded_len(size_t n, bool pad)
{
    if (pad)
        return (n + 2) / 3 * 4;
    return n / 3 * 4 + (n % 3 ? n % 3 + 1 : 0);
}

size_t kv_b64_encode(const uint8_t *in, size_t n, kv_b64_alphabet alphabet, bool pad, char *out)
{
    const char *a = ALPHABET[alphabet == KV_B64_URL];
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16;
        if (i + 1 < n)
            v |= (uint32_t)in[i + 1] << 8;
        if (i + 2 < n)
            v |= in[i + 2];
        out[o++] = a[v >> 18 & 63];
        out[o++] = a[v >> 12 & 63];
        if (i + 1 < n)
            out[o++] = a[v >> 6 & 63];
        else if (pad)
            out[o++] = '=';
        if (i + 2 < n)
            out[o++] = a[v & 63];
        else if (pad)
            out[o++] = '=';
    }
    return o;
}

static int b64_val(unsigned char c, unsigned flags)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if ((flags & KV_B64_DEC_STD) && c == '+')
        return 62;
    if ((flags & KV_B64_DEC_STD) && c == '/')
        return 63;
    if ((flags & KV_B64_DEC_URL) && c == '-')
        return 62;
    if ((flags & KV_B64_DEC_URL) && c == '_')
        return 63;
    return -1;
}

size_t kv_b64_decoded_max(size_t n)
{
    return n / 4 * 3 + n % 4 * 3 / 4;
}

int kv_b64_decode(const char *in, size_t n, unsigned flags, uint8_t *out, size_t *outn, size_t *bad)
{
    if (flags & KV_B64_DEC_PAD)
        while (n && in[n - 1] == '=')
            n--;
    if (n % 4 == 1)
        goto bad_len;
    size_t o = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < n; i++) {
        int v = b64_val((unsigned char)in[i], flags);
        if (v < 0) {
            if (bad)
                *bad = i;
            return -EINVAL;
        }
        acc = acc << 6 | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (uint8_t)(acc >> bits & 0xff);
        }
    }
    if ((flags & KV_B64_DEC_CANONICAL) && bits && (acc & ((1u << bits) - 1)))
        goto bad_len;
    *outn = o;
    return 0;
bad_len:
    if (bad)
        *bad = n;
    return -EINVAL;
}
