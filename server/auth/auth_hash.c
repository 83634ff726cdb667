/* auth_hash: PBKDF2-HMAC-SHA256 password hashes (see auth_hash.h). */
#include "auth/auth_hash.h"

#include <crypt.h>
#include <stdlib.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#define SALT 16
#define DK 32
#define PREFIX "pbkdf2-sha256$"

static void hex(const uint8_t *b, size_t n, char *out)
{
    static const char d[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = d[b[i] >> 4];
        out[2 * i + 1] = d[b[i] & 15];
    }
    out[2 * n] = 0;
}

static int unhex(const char *s, size_t n, uint8_t *out)
{
    for (size_t i = 0; i < n; i++) {
        int v = 0;
        for (int j = 0; j < 2; j++) {
            char c = s[2 * i + j];
            int x = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
            if (x < 0)
                return -1;
            v = v * 16 + x;
        }
        out[i] = (uint8_t)v;
    }
    return 0;
}

static int derive(const char *pw, size_t pwlen, const uint8_t *salt, uint32_t iter, uint8_t *dk)
{
    return PKCS5_PBKDF2_HMAC(pw, (int)pwlen, salt, SALT, (int)iter, EVP_sha256(), DK, dk) == 1
               ? 0
               : -EIO;
}

int kv_auth_hash(const char *pw, size_t pwlen, uint32_t iterations, char out[KV_AUTH_HASH_MAX])
{
    if (iterations < KV_AUTH_HASH_MIN_ITERATIONS || iterations > 100000000u || pwlen > INT32_MAX)
        return -EINVAL;
    uint8_t salt[SALT], dk[DK];
    if (RAND_bytes(salt, SALT) != 1)
        return -EIO;
    int rc = derive(pw, pwlen, salt, iterations, dk);
    if (rc)
        return rc;
    char hs[2 * SALT + 1], hd[2 * DK + 1];
    hex(salt, SALT, hs);
    hex(dk, DK, hd);
    OPENSSL_cleanse(dk, DK);
    snprintf(out, KV_AUTH_HASH_MAX, PREFIX "%u$%s$%s", iterations, hs, hd);
    return 0;
}

/* etcd's hashes (golang.org/x/crypto/bcrypt: "$2a$"; "$2b$"/"$2y$" too), as a restored etcd
 * snapshot holds them (docs/snapshots.md): libxcrypt's crypt_r. */
static int bcrypt_verify(const char *pw, size_t pwlen, const char *enc, size_t enclen)
{
    char p[128], e[128];
    /* bcrypt reads at most 72 bytes; etcd's passwords have no NUL (a NUL would cut it here) */
    if (pwlen >= sizeof p || enclen >= sizeof e || memchr(pw, 0, pwlen) != NULL)
        return 0;
    memcpy(p, pw, pwlen);
    p[pwlen] = 0;
    memcpy(e, enc, enclen);
    e[enclen] = 0;
    struct crypt_data *cd = calloc(1, sizeof(*cd));
    if (cd == NULL)
        return 0;
    const char *h = crypt_r(p, e, cd);
    int ok = h != NULL && h[0] == '$' && strlen(h) == enclen && CRYPTO_memcmp(h, e, enclen) == 0;
    OPENSSL_cleanse(cd, sizeof(*cd));
    OPENSSL_cleanse(p, sizeof p);
    free(cd);
    return ok;
}

int kv_auth_hash_verify(const char *pw, size_t pwlen, const char *enc, size_t enclen)
{
    char buf[KV_AUTH_HASH_MAX];
    if (enclen == 60 && enc[0] == '$' && enc[1] == '2' &&
        (enc[2] == 'a' || enc[2] == 'b' || enc[2] == 'y') && enc[3] == '$')
        return bcrypt_verify(pw, pwlen, enc, enclen);
    if (enclen >= sizeof buf || enclen < sizeof PREFIX || memcmp(enc, PREFIX, sizeof PREFIX - 1))
        return 0;
    memcpy(buf, enc, enclen);
    buf[enclen] = 0;
    char *p = buf + sizeof PREFIX - 1, *e;
    unsigned long iter = strtoul(p, &e, 10);
    if (e == p || *e != '$' || iter < KV_AUTH_HASH_MIN_ITERATIONS || iter > 100000000ul)
        return 0;
    p = e + 1;
    if (strlen(p) != 2 * SALT + 1 + 2 * DK || p[2 * SALT] != '$')
        return 0;
    uint8_t salt[SALT], want[DK], got[DK];
    if (unhex(p, SALT, salt) || unhex(p + 2 * SALT + 1, DK, want))
        return 0;
    if (pwlen > INT32_MAX || derive(pw, pwlen, salt, (uint32_t)iter, got))
        return 0;
    int ok = CRYPTO_memcmp(got, want, DK) == 0;
    OPENSSL_cleanse(got, DK);
    return ok;
}
