/*
 * auth_jwt: etcd's JWT auth tokens (etcd 3.4 auth/jwt.go, auth/options.go), selected with
 * `--auth-token jwt,pub-key=<file>,priv-key=<file>,sign-method=<alg>[,ttl=<duration>]`.
 *
 * A token is "<base64url header>.<base64url claims>.<base64url signature>" with the claims
 * {"exp":<unix s>,"revision":<auth revision>,"username":<name>} and the header
 * {"alg":<alg>,"typ":"JWT"}, as golang-jwt writes them, so a token signed by an etcd member
 * with the same key verifies here and the other way round. Tokens are stateless: every member
 * configured with the same key verifies any member's token; nothing is held per token (no
 * table, no bound to keep), and a token dies at its "exp" (default ttl 5m).
 *
 * Algorithms: RS256/384/512 (PKCS#1 v1.5), PS256/384/512 (RSA-PSS, salt = hash length),
 * ES256/384/512 (ECDSA, signature r||s), HS256/384/512 (HMAC, the priv-key file's bytes are
 * the secret). pub-key may be a PEM public key or a PEM certificate; with only pub-key the
 * member verifies but cannot sign (Authenticate answers an error, etcd's ErrVerifyOnly).
 *
 * Costs, measured on the loop thread of the 2-core CI machine with etcd's 2048-bit test key:
 * signing (once per Authenticate, after its bcrypt check ran on the hash worker) about 1 ms;
 * verifying (once per authenticated request or stream) about 30 us.
 *
 * Threads: a kv_jwt is immutable after kv_jwt_new; sign and verify may run on any thread.
 */
#ifndef KV_AUTH_JWT_H
#define KV_AUTH_JWT_H

#include <stddef.h>
#include <stdint.h>

typedef struct kv_jwt kv_jwt;

/* Parses the --auth-token value (which starts with "jwt"), reads the key files and checks
 * that a given key pair matches. 0 and *out (owned by the caller, kv_jwt_free), or
 * -EINVAL with a message in err naming the option or file at fault. */
int kv_jwt_new(const char *opts, kv_jwt **out, char *err, size_t errlen);
void kv_jwt_free(kv_jwt *j);

/* The token's lifetime in seconds (ttl option; 300 by default). */
uint64_t kv_jwt_ttl_s(const kv_jwt *j);

/* Signs a token for user with the given auth revision, expiring at now_s + ttl. *out is
 * malloc'ed, NUL-terminated, owned by the caller. 0, -EPERM (verify only: no private key),
 * -ENOMEM, -EIO (the signature failed). */
int kv_jwt_sign(const kv_jwt *j, const char *user, uint64_t revision, uint64_t now_s, char **out);

/* Verifies token: the header's alg is the configured one, the signature holds, the claims
 * parse and now_s <= exp. On success copies the user (NUL-terminated, at most usercap - 1
 * bytes) and the revision. 0; -EINVAL (malformed, wrong alg or signature, user too long);
 * -ETIMEDOUT (expired). Both mean etcd's "invalid auth token". */
int kv_jwt_verify(const kv_jwt *j, const char *token, uint64_t now_s, char *user, size_t usercap,
                  uint64_t *revision);

#endif
