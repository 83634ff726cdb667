/*
 * base64: RFC 4648 base64, the standard alphabet ("+/", section 4) and the URL-safe one
 * ("-_", section 5), padded or not. Users: JWT tokens (auth/auth_jwt.c: URL-safe, unpadded,
 * canonical, as RFC 7515 section 2), the grpc-gateway JSON codec (http/json_pb.c and
 * json_pb_write.c: bytes fields, written standard and padded as Go's encoding/json, read in
 * either alphabet with or without padding), kvctl -w json (client/kvctl/json.c). Pure
 * functions, no allocation, any thread.
 */
#ifndef KV_COMMON_BASE64_H
#define KV_COMMON_BASE64_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum kv_b64_alphabet { KV_B64_STD, KV_B64_URL } kv_b64_alphabet;

/* The characters kv_b64_encode writes for n bytes: a multiple of 4 if pad, else without the
 * '=' characters. */
size_t kv_b64_encoded_len(size_t n, bool pad);

/* Writes kv_b64_encoded_len(n, pad) characters at out (no NUL; out holds at least that many)
 * and returns that count. in may be NULL when n is 0. */
size_t kv_b64_encode(const uint8_t *in, size_t n, kv_b64_alphabet alphabet, bool pad, char *out);

/* kv_b64_decode flags. At least one alphabet must be given; both accept either in one input. */
#define KV_B64_DEC_STD 1u       /* '+' and '/' are 62 and 63 */
#define KV_B64_DEC_URL 2u       /* '-' and '_' are 62 and 63 */
#define KV_B64_DEC_PAD 4u       /* trailing '=' characters are dropped before decoding */
#define KV_B64_DEC_CANONICAL 8u /* the unused bits of the last character must be zero */

/* The most bytes n characters decode to (what out must hold). */
size_t kv_b64_decoded_max(size_t n);

/* Decodes in[0..n) into out (capacity at least kv_b64_decoded_max(n)); *outn = bytes written.
 * Returns 0 or -EINVAL: a character outside the accepted alphabet(s) (any '=' without
 * KV_B64_DEC_PAD, or one before the trailing ones), a length of 4k+1 characters (after
 * padding is dropped), or, with KV_B64_DEC_CANONICAL, non-zero unused bits. On -EINVAL, *bad
 * (if bad is not NULL) is the offset of the offending character, or the length without
 * padding for a bad length or unused bits. On success *bad is unchanged. */
int kv_b64_decode(const char *in, size_t n, unsigned flags, uint8_t *out, size_t *outn,
                  size_t *bad);

#endif
