/*
 * auth_hash: slow salted password hashes (PBKDF2-HMAC-SHA256, OpenSSL), in the text form
 *   "pbkdf2-sha256$<iterations>$<salt, 32 hex>$<hash, 64 hex>"
 * stored as authpb.User.password. Costly on purpose (tens of ms at the default iteration
 * count): call from the auth hash workers (server/api/auth_srv.h), never from the loop.
 * kv_auth_hash_verify also verifies etcd's bcrypt hashes ("$2a$"/"$2b$"/"$2y$", 60 bytes) with
 * libxcrypt's crypt_r, for users restored from an etcd snapshot.
 * Thread-safe (no shared state).
 */
#ifndef KV_AUTH_HASH_H
#define KV_AUTH_HASH_H

#include <stddef.h>
#include <stdint.h>

#define KV_AUTH_HASH_DEFAULT_ITERATIONS 100000
#define KV_AUTH_HASH_MIN_ITERATIONS 1000
#define KV_AUTH_HASH_MAX 160 /* longest encoded hash, with its NUL */

/* Hashes pw (pwlen bytes) with a fresh random salt. out gets the NUL-terminated encoding.
 * 0, -EINVAL (iterations out of range), -EIO (OpenSSL failure). */
int kv_auth_hash(const char *pw, size_t pwlen, uint32_t iterations, char out[KV_AUTH_HASH_MAX]);
/* 1 if pw matches the encoded hash (constant-time compare), 0 if not or if the encoding is
 * not one of ours. */
int kv_auth_hash_verify(const char *pw, size_t pwlen, const char *encoded, size_t enclen);

#endif
