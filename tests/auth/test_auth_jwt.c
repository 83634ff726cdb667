/* test_auth_jwt.c - etcd's JWT tokens (server/auth/auth_jwt.h): sign and verify for every
 * algorithm family, expiry, tampering, a foreign alg, verify-only members, key mismatches,
 * option errors and names that need JSON escapes. Keys are made here (OpenSSL) and written
 * to a temp dir as PEM files, as an operator passes them. */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/pem.h>

#include "auth/auth_jwt.h"
#include "kvt_util.h"

static char g_dir[] = "/tmp/kvjwt.XXXXXX";

static void setup(void)
{
    cr_assert_not_null(mkdtemp(g_dir));
}

static void teardown(void)
{
    kvt_rmtree(g_dir);
}

/* Writes a new key of the given kind ("RSA" or "EC") as <dir>/<name>.key and .pub. */
static void make_key(const char *kind, const char *name)
{
    EVP_PKEY *k = strcmp(kind, "RSA") == 0 ? EVP_PKEY_Q_keygen(NULL, NULL, "RSA", (size_t)2048)
                                           : EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
    cr_assert_not_null(k);
    char path[256];
    snprintf(path, sizeof path, "%s/%s.key", g_dir, name);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    cr_assert_eq(PEM_write_PrivateKey(f, k, NULL, NULL, 0, NULL, NULL), 1);
    fclose(f);
    snprintf(path, sizeof path, "%s/%s.pub", g_dir, name);
    f = fopen(path, "w");
    cr_assert_not_null(f);
    cr_assert_eq(PEM_write_PUBKEY(f, k), 1);
    fclose(f);
    EVP_PKEY_free(k);
}

static kv_jwt *jwt(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static kv_jwt *jwt(const char *fmt, ...)
{
    char opts[1024], err[512] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(opts, sizeof opts, fmt, ap);
    va_end(ap);
    kv_jwt *j = NULL;
    int rc = kv_jwt_new(opts, &j, err, sizeof err);
    cr_assert_eq(rc, 0, "%s: %s", opts, err);
    return j;
}

static int jwt_err(const char *opts, char *err, size_t errlen)
{
    kv_jwt *j = NULL;
    int rc = kv_jwt_new(opts, &j, err, errlen);
    kv_jwt_free(j);
    return rc;
}

static void roundtrip(kv_jwt *signer, kv_jwt *verifier)
{
    char *tok = NULL;
    cr_assert_eq(kv_jwt_sign(signer, "alice", 42, 1000, &tok), 0);
    cr_assert_eq(strchr(strchr(tok, '.') + 1, '.') != NULL, 1, "three parts: %s", tok);
    char user[64];
    uint64_t rev = 0;
    cr_assert_eq(kv_jwt_verify(verifier, tok, 1000, user, sizeof user, &rev), 0, "%s", tok);
    cr_assert_str_eq(user, "alice");
    cr_assert_eq(rev, 42);
    free(tok);
}

Test(auth_jwt, every_algorithm_family_signs_and_verifies, .init = setup, .fini = teardown)
{
    make_key("RSA", "rsa");
    make_key("EC", "ec");
    static const char *rsa[] = {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"};
    for (size_t i = 0; i < sizeof rsa / sizeof rsa[0]; i++) {
        kv_jwt *j =
            jwt("jwt,pub-key=%s/rsa.pub,priv-key=%s/rsa.key,sign-method=%s", g_dir, g_dir, rsa[i]);
        roundtrip(j, j);
        kv_jwt_free(j);
    }
    kv_jwt *e = jwt("jwt,pub-key=%s/ec.pub,priv-key=%s/ec.key,sign-method=ES256", g_dir, g_dir);
    roundtrip(e, e);
    kv_jwt_free(e);
    kv_jwt *h = jwt("jwt,priv-key=%s/rsa.key,sign-method=HS256", g_dir); /* file = secret */
    roundtrip(h, h);
    kv_jwt_free(h);
}

Test(auth_jwt, verify_only_member_verifies_another_members_token, .init = setup, .fini = teardown)
{
    make_key("RSA", "rsa");
    kv_jwt *signer = jwt("jwt,priv-key=%s/rsa.key,sign-method=RS256,ttl=10m", g_dir);
    kv_jwt *verifier = jwt("jwt,pub-key=%s/rsa.pub,sign-method=RS256", g_dir);
    roundtrip(signer, verifier);
    char *tok = NULL;
    cr_assert_eq(kv_jwt_sign(verifier, "bob", 1, 1000, &tok), -EPERM);
    cr_assert_null(tok);
    kv_jwt_free(signer);
    kv_jwt_free(verifier);
}

Test(auth_jwt, expired_tampered_and_foreign_tokens_are_refused, .init = setup, .fini = teardown)
{
    make_key("RSA", "rsa");
    make_key("RSA", "other");
    kv_jwt *j =
        jwt("jwt,pub-key=%s/rsa.pub,priv-key=%s/rsa.key,sign-method=RS256,ttl=1s", g_dir, g_dir);
    cr_assert_eq(kv_jwt_ttl_s(j), 1);
    char *tok = NULL, user[64];
    uint64_t rev;
    cr_assert_eq(kv_jwt_sign(j, "alice", 7, 1000, &tok), 0);
    cr_assert_eq(kv_jwt_verify(j, tok, 1001, user, sizeof user, &rev), 0); /* exp = 1001 */
    cr_assert_eq(kv_jwt_verify(j, tok, 1002, user, sizeof user, &rev), -ETIMEDOUT);
    /* one character of the claims changed: the signature no longer holds */
    char *bad = strdup(tok);
    char *c = strchr(bad, '.') + 3;
    *c = *c == 'A' ? 'B' : 'A';
    cr_assert_eq(kv_jwt_verify(j, bad, 1000, user, sizeof user, &rev), -EINVAL);
    free(bad);
    /* the same claims with alg "none" and no signature */
    const char *none = "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0";
    const char *dot = strchr(tok, '.');
    const char *dot2 = strchr(dot + 1, '.');
    char forged[4096];
    snprintf(forged, sizeof forged, "%s%.*s.", none, (int)(dot2 - dot), dot);
    cr_assert_eq(kv_jwt_verify(j, forged, 1000, user, sizeof user, &rev), -EINVAL, "%s", forged);
    /* signed with another key */
    kv_jwt *o = jwt("jwt,priv-key=%s/other.key,sign-method=RS256", g_dir);
    char *otok = NULL;
    cr_assert_eq(kv_jwt_sign(o, "alice", 7, 1000, &otok), 0);
    cr_assert_eq(kv_jwt_verify(j, otok, 1000, user, sizeof user, &rev), -EINVAL);
    /* garbage */
    static const char *junk[] = {"", "a.b", "a.b.c.d", "....", "x.y.z", "simpletoken.12"};
    for (size_t i = 0; i < sizeof junk / sizeof junk[0]; i++)
        cr_assert_eq(kv_jwt_verify(j, junk[i], 1000, user, sizeof user, &rev), -EINVAL, "%s",
                     junk[i]);
    /* a user name longer than the caller's buffer */
    cr_assert_eq(kv_jwt_verify(j, tok, 1000, user, 3, &rev), -EINVAL);
    free(otok);
    free(tok);
    kv_jwt_free(o);
    kv_jwt_free(j);
}

Test(auth_jwt, names_with_json_escapes_round_trip, .init = setup, .fini = teardown)
{
    make_key("EC", "ec");
    kv_jwt *j = jwt("jwt,priv-key=%s/ec.key,sign-method=ES256", g_dir);
    static const char *names[] = {"a\"b", "back\\slash", "tab\there", "ünïcode ✓", "x"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char *tok = NULL, user[64];
        uint64_t rev = 0;
        cr_assert_eq(kv_jwt_sign(j, names[i], UINT64_C(1) << 40, 5, &tok), 0);
        cr_assert_eq(kv_jwt_verify(j, tok, 5, user, sizeof user, &rev), 0);
        cr_assert_str_eq(user, names[i]);
        cr_assert_eq(rev, UINT64_C(1) << 40);
        free(tok);
    }
    kv_jwt_free(j);
}

Test(auth_jwt, bad_options_say_what_is_wrong, .init = setup, .fini = teardown)
{
    make_key("RSA", "rsa");
    make_key("RSA", "other");
    make_key("EC", "ec");
    char err[512], o[1024];
    cr_assert_eq(jwt_err("jwt,priv-key=/nonexistent,sign-method=RS256", err, sizeof err), -EINVAL);
    cr_assert_not_null(strstr(err, "/nonexistent"), "%s", err);
    snprintf(o, sizeof o, "jwt,priv-key=%s/rsa.key", g_dir);
    cr_assert_eq(jwt_err(o, err, sizeof err), -EINVAL);
    cr_assert_not_null(strstr(err, "sign-method"), "%s", err);
    snprintf(o, sizeof o, "jwt,priv-key=%s/rsa.key,sign-method=XX999", g_dir);
    cr_assert_eq(jwt_err(o, err, sizeof err), -EINVAL);
    cr_assert_not_null(strstr(err, "XX999"), "%s", err);
    snprintf(o, sizeof o, "jwt,priv-key=%s/rsa.key,sign-method=RS256,ttl=soon", g_dir);
    cr_assert_eq(jwt_err(o, err, sizeof err), -EINVAL);
    cr_assert_not_null(strstr(err, "ttl"), "%s", err);
    snprintf(o, sizeof o, "jwt,pub-key=%s/other.pub,priv-key=%s/rsa.key,sign-method=RS256", g_dir,
             g_dir);
    cr_assert_eq(jwt_err(o, err, sizeof err), -EINVAL);
    cr_assert_not_null(strstr(err, "do not match"), "%s", err);
    snprintf(o, sizeof o, "jwt,priv-key=%s/ec.key,sign-method=RS256", g_dir);
    cr_assert_eq(jwt_err(o, err, sizeof err), -EINVAL);
    cr_assert_not_null(strstr(err, "key type"), "%s", err);
    snprintf(o, sizeof o, "jwt,priv-key=%s/rsa.pub,sign-method=RS256", g_dir);
    cr_assert_eq(jwt_err(o, err, sizeof err), -EINVAL);
    cr_assert_not_null(strstr(err, "private key"), "%s", err);
    cr_assert_eq(jwt_err("jwt,sign-method=RS256", err, sizeof err), -EINVAL);
    /* an HMAC secret that is empty or cannot be read would let anyone sign tokens */
    char empty[128];
    snprintf(empty, sizeof empty, "%s/empty.key", g_dir);
    FILE *f = fopen(empty, "w");
    cr_assert_not_null(f);
    fclose(f);
    snprintf(o, sizeof o, "jwt,priv-key=%s,sign-method=HS256", empty);
    cr_assert_eq(jwt_err(o, err, sizeof err), -EINVAL, "an empty HS256 secret was taken");
    cr_assert_not_null(strstr(err, "empty"), "%s", err);
    snprintf(o, sizeof o, "jwt,priv-key=%s,sign-method=HS256", g_dir); /* a directory */
    cr_assert_eq(jwt_err(o, err, sizeof err), -EINVAL, "a directory was read as a secret");
    /* etcd's own durations */
    snprintf(o, sizeof o, "jwt,priv-key=%s/rsa.key,sign-method=RS256,ttl=1h30m", g_dir);
    kv_jwt *j = jwt("%s", o);
    cr_assert_eq(kv_jwt_ttl_s(j), 5400);
    kv_jwt_free(j);
    snprintf(o, sizeof o, "jwt,priv-key=%s/rsa.key,sign-method=RS256", g_dir);
    j = jwt("%s", o);
    cr_assert_eq(kv_jwt_ttl_s(j), 300, "etcd's default ttl is 5m");
    kv_jwt_free(j);
}

/* ttl= is read with Go's time.ParseDuration, as etcd reads it (auth/options.go): its signs,
 * both micro signs and compound forms are taken; what Go refuses is refused, also the exponent
 * strtod read before ("1e3s" was 1000 s) and a lone number. */
Test(auth_jwt, ttl_is_read_as_go_reads_a_duration, .init = setup, .fini = teardown)
{
    char secret[256], o[1024], err[512];
    snprintf(secret, sizeof secret, "%s/hs.key", g_dir);
    FILE *f = fopen(secret, "w");
    cr_assert_not_null(f);
    fputs("a shared secret of the members", f);
    fclose(f);
    static const struct {
        const char *ttl;
        uint64_t s;
    } ok[] = {{"1h30m", 5400},  {"+1h30m", 5400},          {"1h0m0.5s", 3600},
              {"1.5h", 5400},   {"90000000\xce\xbcs", 90}, {"90000000\xc2\xb5s", 90},
              {"2m500ms", 120}, {"300000ms", 300},         {"-0s", 0},
              {"0", 0}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        kv_jwt *j = jwt("jwt,priv-key=%s,sign-method=HS256,ttl=%s", secret, ok[i].ttl);
        cr_assert_eq(kv_jwt_ttl_s(j), ok[i].s, "ttl=%s: %llu s, want %llu", ok[i].ttl,
                     (unsigned long long)kv_jwt_ttl_s(j), (unsigned long long)ok[i].s);
        kv_jwt_free(j);
    }
    static const char *const bad[] = {"1e3s", "0x10s", "90",  "1m30",
                                      "5S",   "-1m",   "1 s", "2562048h"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(o, sizeof o, "jwt,priv-key=%s,sign-method=HS256,ttl=%s", secret, bad[i]);
        cr_assert_eq(jwt_err(o, err, sizeof err), -EINVAL, "ttl=%s was taken", bad[i]);
        char want[64];
        snprintf(want, sizeof want, "ttl '%s' is not a duration", bad[i]);
        cr_assert_not_null(strstr(err, want), "%s", err);
    }
}
