/* auth_jwt: etcd's JWT auth tokens (see auth_jwt.h). */
#include "auth/auth_jwt.h"

#include "common/base64.h"
#include "common/go_duration.h"
#include "common/hex.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>
#include <openssl/x509.h>

#define JWT_MAX_TOKEN 8192 /* a token longer than this is refused unparsed */
#define JWT_MAX_SECRET (64 * 1024)

typedef enum { ALG_RS, ALG_PS, ALG_ES, ALG_HS } alg_family;

struct kv_jwt {
    char alg[8]; /* "RS256" ... */
    alg_family fam;
    const EVP_MD *md;
    EVP_PKEY *priv;        /* NULL: verify only (RS/PS/ES) */
    EVP_PKEY *pub;         /* verification key (the private key's public half if no pub-key) */
    unsigned char *secret; /* HS: the priv-key file's bytes */
    size_t secret_len;
    uint64_t ttl_s;
};

/* ---- base64url without padding (RFC 7515 section 2): common/base64.h ---- */

static size_t b64_len(size_t n)
{
    return kv_b64_encoded_len(n, false);
}

/* Writes b64_len(n) characters (no NUL) at out. */
static void b64_enc(const unsigned char *in, size_t n, char *out)
{
    kv_b64_encode(in, n, KV_B64_URL, false, out);
}

/* Decodes n characters into out (capacity at least n * 3 / 4 + 1); *outn = bytes written.
 * 0 or -EINVAL (a character outside the alphabet, padding, or an impossible length). */
static int b64_dec(const char *in, size_t n, unsigned char *out, size_t *outn)
{
    return kv_b64_decode(in, n, KV_B64_DEC_URL | KV_B64_DEC_CANONICAL, out, outn, NULL);
}

/* ---- options ---- */

/* The ttl option: Go's time.ParseDuration, as etcd's (auth/options.go): "1s", "5m", "1h30m",
 * "1.5h", "300ms" ("0" is 0; a lone number otherwise is refused). Negative is refused (etcd
 * would sign tokens already expired). Whole seconds, rounded down; 0 or -EINVAL. */
static int parse_duration(const char *s, uint64_t *out_s)
{
    int64_t ns = 0;
    if (kv_go_duration_parse(s, 0, &ns) < 0 || ns < 0)
        return -EINVAL;
    *out_s = (uint64_t)(ns / KV_NS_PER_S);
    return 0;
}

static int read_file(const char *path, unsigned char **out, size_t *len, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "--auth-token: cannot read %s: %s", path, strerror(errno));
        return -EINVAL;
    }
    unsigned char *b = malloc(JWT_MAX_SECRET + 1);
    size_t n = b ? fread(b, 1, JWT_MAX_SECRET + 1, f) : 0;
    int bad = b && ferror(f); /* a directory, an I/O error: never a shortened secret */
    fclose(f);
    if (!b || n > JWT_MAX_SECRET || bad) {
        free(b);
        snprintf(err, errlen, "--auth-token: %s: %s", path,
                 bad ? "read error"
                 : b ? "larger than 64 KiB"
                     : "out of memory");
        return -EINVAL;
    }
    *out = b;
    *len = n;
    return 0;
}

/* A PEM private key (PKCS#1 or PKCS#8, RSA or EC). */
static EVP_PKEY *load_priv(const unsigned char *pem, size_t n)
{
    BIO *b = BIO_new_mem_buf(pem, (int)n);
    EVP_PKEY *k = b ? PEM_read_bio_PrivateKey(b, NULL, NULL, NULL) : NULL;
    BIO_free(b);
    return k;
}

/* A PEM public key ("PUBLIC KEY") or certificate, as golang-jwt's ParseRSAPublicKeyFromPEM
 * and ParseECPublicKeyFromPEM accept. */
static EVP_PKEY *load_pub(const unsigned char *pem, size_t n)
{
    BIO *b = BIO_new_mem_buf(pem, (int)n);
    EVP_PKEY *k = b ? PEM_read_bio_PUBKEY(b, NULL, NULL, NULL) : NULL;
    BIO_free(b);
    if (k)
        return k;
    b = BIO_new_mem_buf(pem, (int)n);
    X509 *x = b ? PEM_read_bio_X509(b, NULL, NULL, NULL) : NULL;
    BIO_free(b);
    if (x) {
        k = X509_get_pubkey(x);
        X509_free(x);
    }
    return k;
}

static int set_alg(kv_jwt *j, const char *m)
{
    static const struct {
        const char *name;
        alg_family fam;
        int bits;
    } algs[] = {{"RS256", ALG_RS, 256}, {"RS384", ALG_RS, 384}, {"RS512", ALG_RS, 512},
                {"PS256", ALG_PS, 256}, {"PS384", ALG_PS, 384}, {"PS512", ALG_PS, 512},
                {"ES256", ALG_ES, 256}, {"ES384", ALG_ES, 384}, {"ES512", ALG_ES, 512},
                {"HS256", ALG_HS, 256}, {"HS384", ALG_HS, 384}, {"HS512", ALG_HS, 512}};
    for (size_t i = 0; i < sizeof algs / sizeof algs[0]; i++)
        if (strcmp(m, algs[i].name) == 0) {
            snprintf(j->alg, sizeof j->alg, "%s", m);
            j->fam = algs[i].fam;
            j->md = algs[i].bits == 256 ? EVP_sha256()
                                        : (algs[i].bits == 384 ? EVP_sha384() : EVP_sha512());
            return 0;
        }
    return -EINVAL;
}

static int key_type_ok(const kv_jwt *j, const EVP_PKEY *k)
{
    int id = EVP_PKEY_get_base_id(k);
    return j->fam == ALG_ES ? id == EVP_PKEY_EC : (id == EVP_PKEY_RSA || id == EVP_PKEY_RSA_PSS);
}

int kv_jwt_new(const char *opts, kv_jwt **out, char *err, size_t errlen)
{
    int rc = -EINVAL;
    char *dup = strdup(opts ? opts : "");
    kv_jwt *j = calloc(1, sizeof *j);
    char *pub_path = NULL, *priv_path = NULL, *method = NULL, *ttl = NULL;
    unsigned char *pub_pem = NULL, *priv_pem = NULL;
    size_t pub_n = 0, priv_n = 0;
    *out = NULL;
    if (!dup || !j) {
        snprintf(err, errlen, "--auth-token: out of memory");
        rc = -ENOMEM;
        goto out;
    }
    char *save = NULL, *tok = strtok_r(dup, ",", &save);
    if (!tok || strcmp(tok, "jwt") != 0) {
        snprintf(err, errlen, "--auth-token %s: not a jwt token option", opts);
        goto out;
    }
    while ((tok = strtok_r(NULL, ",", &save)) != NULL) {
        char *eq = strchr(tok, '=');
        if (!eq) {
            snprintf(err, errlen, "--auth-token: option '%s' is not key=value", tok);
            goto out;
        }
        *eq = 0;
        if (strcmp(tok, "pub-key") == 0)
            pub_path = eq + 1;
        else if (strcmp(tok, "priv-key") == 0)
            priv_path = eq + 1;
        else if (strcmp(tok, "sign-method") == 0)
            method = eq + 1;
        else if (strcmp(tok, "ttl") == 0)
            ttl = eq + 1;
        /* unknown options: etcd logs them and goes on; so does kvd (ignored) */
    }
    if (!method || set_alg(j, method) != 0) {
        snprintf(err, errlen,
                 "--auth-token: sign-method %s%s%s: want one of RS256/384/512, PS256/384/512, "
                 "ES256/384/512, HS256/384/512 (etcd: invalid auth method)",
                 method ? "'" : "", method ? method : "missing", method ? "'" : "");
        goto out;
    }
    j->ttl_s = 300; /* etcd DefaultTTL: 5 minutes */
    if (ttl && *ttl && parse_duration(ttl, &j->ttl_s) != 0) {
        snprintf(err, errlen, "--auth-token: ttl '%s' is not a duration (e.g. 5m, 30s)", ttl);
        goto out;
    }
    if (pub_path && *pub_path && (rc = read_file(pub_path, &pub_pem, &pub_n, err, errlen)))
        goto out;
    if (priv_path && *priv_path && (rc = read_file(priv_path, &priv_pem, &priv_n, err, errlen)))
        goto out;
    rc = -EINVAL;
    if (j->fam == ALG_HS) {
        if (!priv_pem) {
            snprintf(err, errlen, "--auth-token: %s needs priv-key (the shared secret)", j->alg);
            goto out;
        }
        if (priv_n == 0) { /* an empty HMAC key: anyone could sign tokens for any user */
            snprintf(err, errlen, "--auth-token: priv-key %s is empty", priv_path);
            goto out;
        }
        j->secret = priv_pem;
        j->secret_len = priv_n;
        priv_pem = NULL;
    } else {
        if (!pub_pem && !priv_pem) {
            snprintf(err, errlen, "--auth-token: %s needs priv-key and/or pub-key", j->alg);
            goto out;
        }
        if (priv_pem && !(j->priv = load_priv(priv_pem, priv_n))) {
            snprintf(err, errlen, "--auth-token: priv-key %s is not a PEM private key", priv_path);
            goto out;
        }
        if (pub_pem && !(j->pub = load_pub(pub_pem, pub_n))) {
            snprintf(err, errlen, "--auth-token: pub-key %s is not a PEM public key or certificate",
                     pub_path);
            goto out;
        }
        if ((j->priv && !key_type_ok(j, j->priv)) || (j->pub && !key_type_ok(j, j->pub))) {
            snprintf(err, errlen, "--auth-token: the key type does not fit sign-method %s", j->alg);
            goto out;
        }
        if (j->priv && j->pub && EVP_PKEY_eq(j->priv, j->pub) != 1) {
            snprintf(err, errlen, "--auth-token: pub-key %s and priv-key %s do not match", pub_path,
                     priv_path);
            goto out;
        }
        if (!j->pub) {
            j->pub = j->priv;
            EVP_PKEY_up_ref(j->pub);
        }
    }
    *out = j;
    j = NULL;
    rc = 0;
out:
    if (priv_pem)
        OPENSSL_cleanse(priv_pem, priv_n);
    free(priv_pem);
    free(pub_pem);
    free(dup);
    kv_jwt_free(j);
    return rc;
}

void kv_jwt_free(kv_jwt *j)
{
    if (!j)
        return;
    EVP_PKEY_free(j->priv);
    EVP_PKEY_free(j->pub);
    if (j->secret)
        OPENSSL_cleanse(j->secret, j->secret_len);
    free(j->secret);
    free(j);
}

uint64_t kv_jwt_ttl_s(const kv_jwt *j)
{
    return j->ttl_s;
}

/* ---- signatures ---- */

static int ec_size(EVP_PKEY *k)
{
    return (EVP_PKEY_get_bits(k) + 7) / 8;
}

static int digest_ctx(const kv_jwt *j, EVP_MD_CTX *mc, EVP_PKEY *k, int sign)
{
    EVP_PKEY_CTX *pc = NULL;
    int ok = sign ? EVP_DigestSignInit(mc, &pc, j->md, NULL, k)
                  : EVP_DigestVerifyInit(mc, &pc, j->md, NULL, k);
    if (ok != 1)
        return -EIO;
    if (j->fam == ALG_PS && (EVP_PKEY_CTX_set_rsa_padding(pc, RSA_PKCS1_PSS_PADDING) != 1 ||
                             EVP_PKEY_CTX_set_rsa_pss_saltlen(
                                 pc, sign ? RSA_PSS_SALTLEN_DIGEST : RSA_PSS_SALTLEN_AUTO) != 1))
        return -EIO;
    return 0;
}

/* The signature of msg: *sig malloc'ed. */
static int sign_bytes(const kv_jwt *j, const char *msg, size_t n, unsigned char **sig,
                      size_t *siglen)
{
    *sig = NULL;
    if (j->fam == ALG_HS) {
        unsigned char *s = malloc(EVP_MAX_MD_SIZE);
        unsigned int l = 0;
        if (!s)
            return -ENOMEM;
        if (!HMAC(j->md, j->secret, (int)j->secret_len, (const unsigned char *)msg, n, s, &l)) {
            free(s);
            return -EIO;
        }
        *sig = s;
        *siglen = l;
        return 0;
    }
    if (!j->priv)
        return -EPERM;
    int rc = -EIO;
    unsigned char *der = NULL, *raw = NULL;
    size_t dl = 0;
    ECDSA_SIG *es = NULL;
    EVP_MD_CTX *mc = EVP_MD_CTX_new();
    if (!mc)
        return -ENOMEM;
    if (digest_ctx(j, mc, j->priv, 1) != 0 ||
        EVP_DigestSign(mc, NULL, &dl, (const unsigned char *)msg, n) != 1)
        goto out;
    if (!(der = malloc(dl))) {
        rc = -ENOMEM;
        goto out;
    }
    if (EVP_DigestSign(mc, der, &dl, (const unsigned char *)msg, n) != 1)
        goto out;
    if (j->fam != ALG_ES) {
        *sig = der;
        *siglen = dl;
        der = NULL;
        rc = 0;
        goto out;
    }
    /* JWS ECDSA: r and s, each left-padded to the curve's size (RFC 7518 section 3.4) */
    const unsigned char *p = der;
    int sz = ec_size(j->priv);
    if (!(es = d2i_ECDSA_SIG(NULL, &p, (long)dl)) || !(raw = calloc(2, (size_t)sz)))
        goto out;
    const BIGNUM *r = NULL, *s = NULL;
    ECDSA_SIG_get0(es, &r, &s);
    if (BN_bn2binpad(r, raw, sz) != sz || BN_bn2binpad(s, raw + sz, sz) != sz)
        goto out;
    *sig = raw;
    *siglen = 2 * (size_t)sz;
    raw = NULL;
    rc = 0;
out:
    ECDSA_SIG_free(es);
    free(raw);
    free(der);
    EVP_MD_CTX_free(mc);
    return rc;
}

static int verify_bytes(const kv_jwt *j, const char *msg, size_t n, const unsigned char *sig,
                        size_t sign)
{
    if (j->fam == ALG_HS) {
        unsigned char s[EVP_MAX_MD_SIZE];
        unsigned int l = 0;
        if (!HMAC(j->md, j->secret, (int)j->secret_len, (const unsigned char *)msg, n, s, &l))
            return -EIO;
        return l == sign && CRYPTO_memcmp(s, sig, l) == 0 ? 0 : -EINVAL;
    }
    int rc = -EINVAL;
    unsigned char *der = NULL;
    ECDSA_SIG *es = NULL;
    BIGNUM *r = NULL, *s = NULL;
    EVP_MD_CTX *mc = EVP_MD_CTX_new();
    if (!mc)
        return -ENOMEM;
    if (j->fam == ALG_ES) {
        int sz = ec_size(j->pub);
        if (sign != 2 * (size_t)sz)
            goto out;
        r = BN_bin2bn(sig, sz, NULL);
        s = BN_bin2bn(sig + sz, sz, NULL);
        if (!r || !s || !(es = ECDSA_SIG_new()) || ECDSA_SIG_set0(es, r, s) != 1)
            goto out;
        r = s = NULL; /* owned by es */
        int dl = i2d_ECDSA_SIG(es, &der);
        if (dl <= 0)
            goto out;
        sig = der;
        sign = (size_t)dl;
    }
    if (digest_ctx(j, mc, j->pub, 0) != 0)
        goto out;
    rc = EVP_DigestVerify(mc, sig, sign, (const unsigned char *)msg, n) == 1 ? 0 : -EINVAL;
out:
    BN_free(r);
    BN_free(s);
    ECDSA_SIG_free(es);
    OPENSSL_free(der);
    EVP_MD_CTX_free(mc);
    return rc;
}

/* ---- JSON: the flat objects of a JWT's header and claims ---- */

typedef struct jval {
    int type; /* 's' string, 'n' number, 'o' other scalar */
    char *str;
    double num;
    uint64_t u; /* the number when it is a plain non-negative integer */
    bool is_u;
} jval;

static const char *ws(const char *p, const char *e)
{
    while (p < e && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

static int put_utf8(char *o, size_t *k, uint32_t c)
{
    if (c < 0x80) {
        o[(*k)++] = (char)c;
    } else if (c < 0x800) {
        o[(*k)++] = (char)(0xc0 | c >> 6);
        o[(*k)++] = (char)(0x80 | (c & 0x3f));
    } else if (c < 0x10000) {
        o[(*k)++] = (char)(0xe0 | c >> 12);
        o[(*k)++] = (char)(0x80 | (c >> 6 & 0x3f));
        o[(*k)++] = (char)(0x80 | (c & 0x3f));
    } else {
        o[(*k)++] = (char)(0xf0 | c >> 18);
        o[(*k)++] = (char)(0x80 | (c >> 12 & 0x3f));
        o[(*k)++] = (char)(0x80 | (c >> 6 & 0x3f));
        o[(*k)++] = (char)(0x80 | (c & 0x3f));
    }
    return 0;
}

static int hex4(const char *p, const char *e, uint32_t *v)
{
    return e - p < 4 || kv_hex4(p, v) < 0 ? -EINVAL : 0;
}

/* A JSON string at *pp (at the opening quote): *out malloc'ed, NUL-terminated; a NUL inside
 * is refused. */
static int jstring(const char **pp, const char *e, char **out)
{
    const char *p = *pp + 1;
    char *o = malloc((size_t)(e - p) + 1); /* never longer than its source */
    size_t k = 0;
    if (!o)
        return -ENOMEM;
    while (p < e && *p != '"') {
        unsigned char c = (unsigned char)*p++;
        if (c < 0x20)
            goto bad;
        if (c != '\\') {
            o[k++] = (char)c;
            continue;
        }
        if (p >= e)
            goto bad;
        char x = *p++;
        const char *m = strchr("\"\\/bfnrt", x);
        if (x && m) {
            o[k++] = "\"\\/\b\f\n\r\t"[m - "\"\\/bfnrt"];
            continue;
        }
        uint32_t cp, lo;
        if (x != 'u' || hex4(p, e, &cp))
            goto bad;
        p += 4;
        if (cp >= 0xd800 && cp < 0xdc00) { /* a surrogate pair */
            if (e - p < 6 || p[0] != '\\' || p[1] != 'u' || hex4(p + 2, e, &lo) || lo < 0xdc00 ||
                lo > 0xdfff)
                goto bad;
            p += 6;
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
        } else if (cp >= 0xdc00 && cp < 0xe000) {
            goto bad;
        }
        if (cp == 0)
            goto bad;
        put_utf8(o, &k, cp); /* 6 or 12 source bytes give at most 4 */
    }
    if (p >= e)
        goto bad;
    o[k] = 0;
    *out = o;
    *pp = p + 1;
    return 0;
bad:
    free(o);
    return -EINVAL;
}

/* Parses a flat JSON object and calls want(key) for each member: values of the keys it asks
 * for (non-NULL slot) are stored there. Nested objects and arrays are refused (neither
 * golang-jwt's header nor etcd's claims have them). */
static int jobject(const char *p, size_t n, const char *const *keys, jval *vals, size_t nk)
{
    const char *e = p + n;
    int rc = -EINVAL;
    char *key = NULL;
    p = ws(p, e);
    if (p >= e || *p++ != '{')
        return -EINVAL;
    p = ws(p, e);
    if (p < e && *p == '}')
        return ws(p + 1, e) == e ? 0 : -EINVAL;
    for (;;) {
        p = ws(p, e);
        if (p >= e || *p != '"' || (rc = jstring(&p, e, &key)) != 0)
            return rc ? rc : -EINVAL;
        rc = -EINVAL;
        p = ws(p, e);
        if (p >= e || *p++ != ':')
            goto out;
        p = ws(p, e);
        jval v = {0};
        if (p < e && *p == '"') {
            if ((rc = jstring(&p, e, &v.str)) != 0)
                goto out;
            rc = -EINVAL;
            v.type = 's';
        } else if (p < e && (*p == '-' || (*p >= '0' && *p <= '9'))) {
            char num[64];
            size_t l = 0;
            while (p + l < e && l < sizeof num - 1 && strchr("+-.eE0123456789", p[l]))
                l++;
            memcpy(num, p, l);
            num[l] = 0;
            char *end;
            v.num = strtod(num, &end);
            if (end != num + l || !isfinite(v.num))
                goto out;
            if (num[0] != '-' && strspn(num, "0123456789") == l) {
                errno = 0;
                v.u = strtoull(num, NULL, 10);
                v.is_u = errno == 0;
            }
            v.type = 'n';
            p += l;
        } else if (e - p >= 4 && (memcmp(p, "true", 4) == 0 || memcmp(p, "null", 4) == 0)) {
            v.type = 'o';
            p += 4;
        } else if (e - p >= 5 && memcmp(p, "false", 5) == 0) {
            v.type = 'o';
            p += 5;
        } else {
            goto out;
        }
        size_t i = 0;
        while (i < nk && strcmp(keys[i], key) != 0)
            i++;
        if (i < nk && vals[i].type == 0) {
            vals[i] = v;
        } else {
            free(v.str); /* an unknown member, or a repeated one (the first wins) */
        }
        free(key);
        key = NULL;
        p = ws(p, e);
        if (p < e && *p == ',') {
            p++;
            continue;
        }
        if (p < e && *p == '}') {
            rc = ws(p + 1, e) == e ? 0 : -EINVAL;
            goto out;
        }
        goto out;
    }
out:
    free(key);
    return rc;
}

static size_t json_escape(const char *s, char *o)
{
    size_t k = 0;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            if (o) {
                o[k] = '\\';
                o[k + 1] = (char)c;
            }
            k += 2;
        } else if (c < 0x20) {
            if (o)
                snprintf(o + k, 7, "\\u%04x", c);
            k += 6;
        } else {
            if (o)
                o[k] = (char)c;
            k++;
        }
    }
    return k;
}

/* ---- tokens ---- */

int kv_jwt_sign(const kv_jwt *j, const char *user, uint64_t revision, uint64_t now_s, char **out)
{
    *out = NULL;
    if (j->fam != ALG_HS && !j->priv)
        return -EPERM;
    char header[64];
    int hl = snprintf(header, sizeof header, "{\"alg\":\"%s\",\"typ\":\"JWT\"}", j->alg);
    size_t ul = json_escape(user, NULL);
    size_t cap = ul + 96;
    char *claims = malloc(cap);
    if (!claims)
        return -ENOMEM;
    int k = snprintf(claims, cap, "{\"exp\":%" PRIu64 ",\"revision\":%" PRIu64 ",\"username\":\"",
                     now_s + j->ttl_s, revision);
    json_escape(user, claims + k);
    k += (int)ul;
    claims[k++] = '"';
    claims[k++] = '}';
    size_t tl = b64_len((size_t)hl) + 1 + b64_len((size_t)k);
    char *tok = malloc(tl + 1 + b64_len(1024) + 1);
    if (!tok) {
        free(claims);
        return -ENOMEM;
    }
    b64_enc((const unsigned char *)header, (size_t)hl, tok);
    size_t o = b64_len((size_t)hl);
    tok[o++] = '.';
    b64_enc((const unsigned char *)claims, (size_t)k, tok + o);
    o += b64_len((size_t)k);
    free(claims);
    unsigned char *sig = NULL;
    size_t sl = 0;
    int rc = sign_bytes(j, tok, o, &sig, &sl);
    if (rc == 0 && sl > 1024)
        rc = -EIO;
    if (rc) {
        free(sig);
        free(tok);
        return rc;
    }
    tok[o++] = '.';
    b64_enc(sig, sl, tok + o);
    o += b64_len(sl);
    tok[o] = 0;
    free(sig);
    *out = tok;
    return 0;
}

int kv_jwt_verify(const kv_jwt *j, const char *token, uint64_t now_s, char *user, size_t usercap,
                  uint64_t *revision)
{
    size_t n = strnlen(token, JWT_MAX_TOKEN + 1);
    if (n > JWT_MAX_TOKEN)
        return -EINVAL;
    const char *d1 = memchr(token, '.', n);
    const char *d2 = d1 ? memchr(d1 + 1, '.', n - (size_t)(d1 + 1 - token)) : NULL;
    if (!d1 || !d2 || memchr(d2 + 1, '.', n - (size_t)(d2 + 1 - token)))
        return -EINVAL;
    int rc = -EINVAL;
    unsigned char *buf = malloc(n);
    if (!buf)
        return -ENOMEM;
    size_t hl, cl, sl;
    const char *hk[] = {"alg"};
    jval hv[1] = {{0}};
    const char *ck[] = {"username", "revision", "exp"};
    jval cv[3] = {{0}};
    /* the header: its alg must be ours (golang-jwt refuses a token of another method) */
    if (b64_dec(token, (size_t)(d1 - token), buf, &hl) || jobject((char *)buf, hl, hk, hv, 1) ||
        hv[0].type != 's' || strcmp(hv[0].str, j->alg) != 0)
        goto out;
    if (b64_dec(d2 + 1, n - (size_t)(d2 + 1 - token), buf, &sl) ||
        verify_bytes(j, token, (size_t)(d2 - token), buf, sl) != 0)
        goto out;
    if (b64_dec(d1 + 1, (size_t)(d2 - d1 - 1), buf, &cl) || jobject((char *)buf, cl, ck, cv, 3))
        goto out;
    if (cv[0].type != 's' || cv[1].type != 'n' || cv[1].num < 0 ||
        (cv[2].type && cv[2].type != 'n'))
        goto out;
    if (cv[2].type == 'n' && (double)now_s > cv[2].num) {
        rc = -ETIMEDOUT;
        goto out;
    }
    if (strlen(cv[0].str) >= usercap)
        goto out;
    snprintf(user, usercap, "%s", cv[0].str);
    *revision = cv[1].is_u ? cv[1].u : (uint64_t)cv[1].num;
    rc = 0;
out:
    free(hv[0].str);
    for (int i = 0; i < 3; i++)
        free(cv[i].str);
    free(buf);
    return rc;
}
