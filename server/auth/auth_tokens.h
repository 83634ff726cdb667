/*
 * auth_tokens: etcd's simple tokens (auth/simple_token.go): "<16 random letters>.<n>", held
 * in this member's memory with a TTL that every successful use renews (--auth-token-ttl,
 * default 300 s; renewals are per member, as etcd's). Bounded: at most `max` live tokens
 * (--auth-max-tokens); past it an Authenticate is refused ("etcdserver: too many requests")
 * rather than growing the table.
 * Each token records the user and a tag of the user's password record when it was issued;
 * a token whose user was deleted or whose password changed is invalid (etcd invalidateUser).
 *
 * Tokens are replicated through the raft log as etcd 3.4 does: the member that checked the
 * password draws the random prefix (kv_auth_tokens_gen) and proposes it; every member, when
 * it applies the entry, inserts "<prefix>.<log index>" (kv_auth_tokens_put; api/auth_srv.h
 * kv_auth_on_applied). The table is memory only: tokens are lost on restart (as etcd's), and
 * a member that installs a snapshot knows only the tokens of the entries it applies after it.
 *
 * Pure data structure: no clock (callers pass now in ms), no I/O. Loop thread only.
 */
#ifndef KV_AUTH_TOKENS_H
#define KV_AUTH_TOKENS_H

#include <stddef.h>
#include <stdint.h>

#define KV_AUTH_TOKEN_MAX 64 /* buffer size for a token, NUL included */
#define KV_AUTH_TOKENS_DEFAULT_MAX 100000
#define KV_AUTH_TOKEN_PREFIX_LEN 16 /* random letters (etcd defaultSimpleTokenLength) */

typedef struct kv_auth_tokens kv_auth_tokens;

/* max: live token bound (0 = default); ttl_ms > 0. */
int kv_auth_tokens_init(kv_auth_tokens **out, size_t max, uint64_t ttl_ms);
void kv_auth_tokens_free(kv_auth_tokens *t);

/* A new local token for user (copied), valid until now + ttl: gen + put with a local
 * sequence number. 0, -EBUSY (table full), -ENOMEM, -EIO (no randomness). */
int kv_auth_tokens_assign(kv_auth_tokens *t, const char *user, uint64_t pwtag, uint64_t now_ms,
                          char out[KV_AUTH_TOKEN_MAX]);
/* The random prefix of a new token (etcd GenTokenPrefix): 16 letters, NUL-terminated. 0 or
 * -EIO (no randomness). Any thread. */
int kv_auth_tokens_gen(char out[KV_AUTH_TOKEN_PREFIX_LEN + 1]);
/* Inserts token (copied, as given) for user (copied), valid until now + ttl; an existing
 * token of that text is refreshed instead. 0, -EBUSY (table full), -EINVAL (too long),
 * -ENOMEM. */
int kv_auth_tokens_put(kv_auth_tokens *t, const char *token, const char *user, uint64_t pwtag,
                       uint64_t now_ms);
/* 1 if the table is full even after removing expired tokens (a put would be -EBUSY). */
int kv_auth_tokens_full(kv_auth_tokens *t, uint64_t now_ms);
/* The user of a live token (valid until the next call that changes the table) and its
 * password tag; renews its expiry. NULL if unknown or expired (an expired one is removed). */
const char *kv_auth_tokens_lookup(kv_auth_tokens *t, const char *token, uint64_t now_ms,
                                  uint64_t *pwtag);
/* Removes one token (no-op if absent). */
void kv_auth_tokens_drop(kv_auth_tokens *t, const char *token);
/* Removes every token (AuthDisable). */
void kv_auth_tokens_clear(kv_auth_tokens *t);
/* Removes expired tokens; returns how many. */
size_t kv_auth_tokens_sweep(kv_auth_tokens *t, uint64_t now_ms);
size_t kv_auth_tokens_count(const kv_auth_tokens *t);

/* FNV-1a 64 of a stored password record: the tag above. */
uint64_t kv_auth_pwtag(const uint8_t *p, size_t n);

#endif
