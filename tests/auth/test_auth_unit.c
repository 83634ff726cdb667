/*
 * test_auth_unit.c - unit tests of the auth building blocks (server/auth/): etcd 3.4's
 * key-range permission semantics (auth/range_perm_cache.go: points, intervals, "\0" open
 * ends, the union of several grants covering a range), simple tokens (TTL renewed on use,
 * expiry, bound, per-user invalidation tag), PBKDF2 password hashes.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <string.h>

#include "auth/auth_fairq.h"
#include "auth/auth_hash.h"
#include "auth/auth_perm.h"
#include "auth/auth_tokens.h"

#define NUL "\0", 1

static kv_auth_perm P(int type, const char *key, const char *end, size_t elen)
{
    return (kv_auth_perm){type, (const uint8_t *)key, strlen(key), (const uint8_t *)end, elen};
}

static bool may(const kv_auth_perm *p, size_t n, int want, const char *key, const char *end,
                size_t elen)
{
    return kv_auth_perm_allows(p, n, want, (const uint8_t *)key, strlen(key), (const uint8_t *)end,
                               elen);
}

Test(auth_perm, single_key_grant)
{
    kv_auth_perm p[] = {P(KV_PERM_READ, "a", NULL, 0)};
    cr_assert(may(p, 1, KV_PERM_READ, "a", NULL, 0));
    cr_assert(!may(p, 1, KV_PERM_READ, "a0", NULL, 0), "a point grant is one key");
    cr_assert(!may(p, 1, KV_PERM_READ, "", NULL, 0));
    cr_assert(!may(p, 1, KV_PERM_WRITE, "a", NULL, 0), "READ does not grant WRITE");
    /* a range [a, a\0) is exactly the key: granted; [a, b) is not */
    cr_assert(may(p, 1, KV_PERM_READ, "a", "a\0", 2));
    cr_assert(!may(p, 1, KV_PERM_READ, "a", "b", 1));
}

Test(auth_perm, prefix_grant)
{
    /* etcdctl role grant-permission r read /foo/ --prefix  ->  [/foo/, /foo0) */
    kv_auth_perm p[] = {P(KV_PERM_READ, "/foo/", "/foo0", 5)};
    cr_assert(may(p, 1, KV_PERM_READ, "/foo/", NULL, 0));
    cr_assert(may(p, 1, KV_PERM_READ, "/foo/x", NULL, 0));
    cr_assert(!may(p, 1, KV_PERM_READ, "/foo0", NULL, 0), "range_end is exclusive");
    cr_assert(!may(p, 1, KV_PERM_READ, "/foo", NULL, 0));
    cr_assert(!may(p, 1, KV_PERM_READ, "/bar", NULL, 0));
    cr_assert(may(p, 1, KV_PERM_READ, "/foo/", "/foo0", 5), "get --prefix /foo/");
    cr_assert(may(p, 1, KV_PERM_READ, "/foo/a", "/foo/b", 6));
    cr_assert(!may(p, 1, KV_PERM_READ, "/foo/", "/foo1", 5), "past the grant");
    cr_assert(!may(p, 1, KV_PERM_READ, "/fo", "/foo0", 5), "before the grant");
    cr_assert(!may(p, 1, KV_PERM_READ, "/foo/", NUL), "--from-key is not covered");
    cr_assert(!may(p, 1, KV_PERM_WRITE, "/foo/x", NULL, 0));
}

Test(auth_perm, open_ended_grant)
{
    /* range_end "\0": every key >= key */
    kv_auth_perm p[] = {P(KV_PERM_WRITE, "m", "\0", 1)};
    cr_assert(may(p, 1, KV_PERM_WRITE, "m", NULL, 0));
    cr_assert(may(p, 1, KV_PERM_WRITE, "zzzz", NULL, 0));
    cr_assert(!may(p, 1, KV_PERM_WRITE, "l", NULL, 0));
    cr_assert(may(p, 1, KV_PERM_WRITE, "n", NUL), "[n, end) inside [m, end)");
    cr_assert(may(p, 1, KV_PERM_WRITE, "m", "q", 1));
    cr_assert(!may(p, 1, KV_PERM_WRITE, "a", NUL));
    /* the whole keyspace: key "" (start) with "\0" */
    kv_auth_perm all[] = {P(KV_PERM_READ, "", "\0", 1)};
    cr_assert(may(all, 1, KV_PERM_READ, "", NUL), "get \"\" --from-key");
    cr_assert(may(all, 1, KV_PERM_READ, "anything", NULL, 0));
}

Test(auth_perm, union_of_grants_covers_a_range)
{
    /* [a, c) + [c, e) covers [a, e) (etcd IntervalTree.Contains over the union) */
    kv_auth_perm p[] = {P(KV_PERM_READ, "c", "e", 1), P(KV_PERM_READ, "a", "c", 1)};
    cr_assert(may(p, 2, KV_PERM_READ, "a", "e", 1));
    cr_assert(may(p, 2, KV_PERM_READ, "b", "d", 1));
    cr_assert(!may(p, 2, KV_PERM_READ, "a", "f", 1));
    /* a hole: [a, b) + [c, e) does not cover [a, e) */
    kv_auth_perm h[] = {P(KV_PERM_READ, "a", "b", 1), P(KV_PERM_READ, "c", "e", 1)};
    cr_assert(!may(h, 2, KV_PERM_READ, "a", "e", 1));
    cr_assert(may(h, 2, KV_PERM_READ, "c", "d", 1));
    /* a point grant fills a one-key hole: [a, b) + "b" + [b\0, c) covers [a, c) */
    kv_auth_perm pt[] = {P(KV_PERM_READ, "a", "b", 1), P(KV_PERM_READ, "b", NULL, 0),
                         P(KV_PERM_READ, "b\0", "c", 1)};
    pt[2].klen = 2;
    cr_assert(may(pt, 3, KV_PERM_READ, "a", "c", 1));
}

Test(auth_perm, readwrite_counts_for_both)
{
    kv_auth_perm p[] = {P(KV_PERM_READWRITE, "k", NULL, 0)};
    cr_assert(may(p, 1, KV_PERM_READ, "k", NULL, 0));
    cr_assert(may(p, 1, KV_PERM_WRITE, "k", NULL, 0));
    /* READ and WRITE grants do not combine into coverage of the other type */
    kv_auth_perm q[] = {P(KV_PERM_READ, "a", "b", 1), P(KV_PERM_WRITE, "b", "c", 1)};
    cr_assert(!may(q, 2, KV_PERM_READ, "a", "c", 1));
    cr_assert(!may(q, 2, KV_PERM_WRITE, "a", "c", 1));
    cr_assert(!may(NULL, 0, KV_PERM_READ, "a", NULL, 0), "no grant, no access");
}

Test(auth_tokens, ttl_renewed_on_use_and_expiry)
{
    kv_auth_tokens *t;
    cr_assert_eq(kv_auth_tokens_init(&t, 10, 1000), 0);
    char tok[KV_AUTH_TOKEN_MAX], tok2[KV_AUTH_TOKEN_MAX];
    cr_assert_eq(kv_auth_tokens_assign(t, "alice", 7, 0, tok), 0);
    cr_assert_eq(kv_auth_tokens_assign(t, "alice", 7, 0, tok2), 0);
    cr_assert_str_neq(tok, tok2, "tokens are unique");
    cr_assert(strchr(tok, '.') != NULL && strchr(tok, '.') - tok == 16, "etcd's prefix.index");
    uint64_t tag = 0;
    cr_assert_str_eq(kv_auth_tokens_lookup(t, tok, 900, &tag), "alice");
    cr_assert_eq(tag, 7);
    /* used at 900: valid until 1900 */
    cr_assert_not_null(kv_auth_tokens_lookup(t, tok, 1800, NULL));
    cr_assert_null(kv_auth_tokens_lookup(t, tok2, 1000, NULL), "tok2 unused: expired at 1000");
    cr_assert_null(kv_auth_tokens_lookup(t, tok, 2800, NULL), "expired");
    cr_assert_eq(kv_auth_tokens_count(t), 0);
    cr_assert_null(kv_auth_tokens_lookup(t, "nonsense", 0, NULL));
    kv_auth_tokens_free(t);
}

Test(auth_tokens, bounded)
{
    kv_auth_tokens *t;
    cr_assert_eq(kv_auth_tokens_init(&t, 3, 1000), 0);
    char tok[KV_AUTH_TOKEN_MAX];
    for (int i = 0; i < 3; i++)
        cr_assert_eq(kv_auth_tokens_assign(t, "u", 0, 0, tok), 0);
    cr_assert_eq(kv_auth_tokens_assign(t, "u", 0, 10, tok), -EBUSY, "table full");
    /* expired ones make room */
    cr_assert_eq(kv_auth_tokens_assign(t, "u", 0, 1000, tok), 0);
    cr_assert_eq(kv_auth_tokens_count(t), 1);
    kv_auth_tokens_drop(t, tok);
    cr_assert_eq(kv_auth_tokens_count(t), 0);
    kv_auth_tokens_assign(t, "u", 0, 0, tok);
    kv_auth_tokens_clear(t);
    cr_assert_eq(kv_auth_tokens_count(t), 0);
    kv_auth_tokens_free(t);
}

Test(auth_hash, pbkdf2_roundtrip)
{
    char h1[KV_AUTH_HASH_MAX], h2[KV_AUTH_HASH_MAX];
    cr_assert_eq(kv_auth_hash("secret", 6, 1000, h1), 0);
    cr_assert_eq(kv_auth_hash("secret", 6, 1000, h2), 0);
    cr_assert_str_neq(h1, h2, "salted: two hashes of one password differ");
    cr_assert(strncmp(h1, "pbkdf2-sha256$1000$", 19) == 0, "%s", h1);
    cr_assert_eq(kv_auth_hash_verify("secret", 6, h1, strlen(h1)), 1);
    cr_assert_eq(kv_auth_hash_verify("secret", 6, h2, strlen(h2)), 1);
    cr_assert_eq(kv_auth_hash_verify("secreT", 6, h1, strlen(h1)), 0);
    cr_assert_eq(kv_auth_hash_verify("", 0, h1, strlen(h1)), 0);
    cr_assert_eq(kv_auth_hash_verify("secret", 6, "secret", 6), 0, "not a hash");
    h1[strlen(h1) - 1] ^= 1;
    cr_assert_eq(kv_auth_hash_verify("secret", 6, h1, strlen(h1)), 0, "altered hash");
    cr_assert_eq(kv_auth_hash("x", 1, 10, h1), -EINVAL, "too few iterations");
}

/* etcd 3.4 stores bcrypt hashes (golang.org/x/crypto/bcrypt, cost 10); a user restored from an
 * etcd snapshot logs in with them. This hash of "secret" is one etcd 3.4.23 wrote. */
Test(auth_hash, etcd_bcrypt_verifies)
{
    const char *h = "$2a$10$TB0/RuInsqbcO7Ody.OrV.V1Tss8IeiURBvTCtfrpB2dcj7vdwudO";
    cr_assert_eq(kv_auth_hash_verify("secret", 6, h, strlen(h)), 1);
    cr_assert_eq(kv_auth_hash_verify("secreT", 6, h, strlen(h)), 0);
    cr_assert_eq(kv_auth_hash_verify("", 0, h, strlen(h)), 0);
    cr_assert_eq(kv_auth_hash_verify("secret\0x", 8, h, strlen(h)), 0, "a NUL in the password");
    char b[64];
    memcpy(b, h, 61);
    b[2] = 'b'; /* the same hash as "$2b$" */
    cr_assert_eq(kv_auth_hash_verify("secret", 6, b, strlen(b)), 1);
    b[59] ^= 1;
    cr_assert_eq(kv_auth_hash_verify("secret", 6, b, strlen(b)), 0, "altered hash");
    cr_assert_eq(kv_auth_hash_verify("secret", 6, h, strlen(h) - 1), 0, "cut hash");
}

/* ---- auth_fairq: the fair hash queue ---- */

static int J[100]; /* job identities */

Test(auth_fairq, flood_cannot_hold_a_new_connections_place)
{
    kv_auth_fairq *q;
    cr_assert_eq(kv_auth_fairq_new(&q, 4, 16), 0);
    void *ev;
    /* four flood connections, each already charged (their earlier attempts) */
    for (uint64_t c = 1; c <= 4; c++) {
        kv_auth_fairq_charge(q, c);
        cr_assert_eq(kv_auth_fairq_push(q, c, &J[c], &ev), 0);
        cr_assert_null(ev);
    }
    /* full: a connection charged more is refused */
    kv_auth_fairq_charge(q, 5);
    kv_auth_fairq_charge(q, 5);
    cr_assert_eq(kv_auth_fairq_push(q, 5, &J[5], &ev), -EBUSY);
    /* one charged as much takes the oldest's place (newest first under overload) */
    kv_auth_fairq_charge(q, 6);
    cr_assert_eq(kv_auth_fairq_push(q, 6, &J[6], &ev), 0);
    cr_assert_eq(ev, &J[1]);
    /* a new connection takes the place of the oldest worst-ranked job and is served first */
    cr_assert_eq(kv_auth_fairq_push(q, 9, &J[9], &ev), 0);
    cr_assert_eq(ev, &J[2]);
    cr_assert_eq(kv_auth_fairq_pop(q), &J[9]);
    cr_assert_eq(kv_auth_fairq_pop(q), &J[6]);
    cr_assert_eq(kv_auth_fairq_len(q), 2);
    kv_auth_fairq_free(q);
}

Test(auth_fairq, ranks_by_charges_then_round_then_newest)
{
    kv_auth_fairq *q;
    cr_assert_eq(kv_auth_fairq_new(&q, 16, 16), 0);
    void *ev;
    kv_auth_fairq_charge(q, 1);
    kv_auth_fairq_charge(q, 1);
    cr_assert_eq(kv_auth_fairq_charges(q, 1), 2);
    cr_assert_eq(kv_auth_fairq_push(q, 1, &J[1], &ev), 0); /* class 2 */
    cr_assert_eq(kv_auth_fairq_push(q, 2, &J[2], &ev), 0); /* class 0, round 0 */
    cr_assert_eq(kv_auth_fairq_push(q, 2, &J[3], &ev), 0); /* class 0, round 1 */
    cr_assert_eq(kv_auth_fairq_push(q, 3, &J[4], &ev), 0); /* class 0, round 0, newer */
    cr_assert_eq(kv_auth_fairq_pop(q), &J[4]);
    cr_assert_eq(kv_auth_fairq_pop(q), &J[2]);
    cr_assert_eq(kv_auth_fairq_pop(q), &J[3]);
    cr_assert_eq(kv_auth_fairq_pop(q), &J[1]);
    cr_assert_null(kv_auth_fairq_pop(q));
    /* a success forgets the connection's charges */
    kv_auth_fairq_clear(q, 1);
    cr_assert_eq(kv_auth_fairq_charges(q, 1), 0);
    cr_assert_eq(kv_auth_fairq_sources(q), 0);
    kv_auth_fairq_free(q);
}

Test(auth_fairq, remove_and_bounded_source_table)
{
    kv_auth_fairq *q;
    cr_assert_eq(kv_auth_fairq_new(&q, 2, 3), 0);
    void *ev;
    cr_assert_eq(kv_auth_fairq_push(q, 1, &J[1], &ev), 0);
    cr_assert_eq(kv_auth_fairq_remove(q, &J[1]), 0);
    cr_assert_eq(kv_auth_fairq_remove(q, &J[1]), -ENOENT);
    cr_assert_eq(kv_auth_fairq_len(q), 0);
    for (int i = 0; i < 5; i++)
        kv_auth_fairq_charge(q, 10);
    kv_auth_fairq_charge(q, 11);
    kv_auth_fairq_charge(q, 12);
    kv_auth_fairq_charge(q, 13); /* full: replaces one with the fewest charges */
    cr_assert_eq(kv_auth_fairq_sources(q), 3);
    cr_assert_eq(kv_auth_fairq_charges(q, 10), 5, "the heaviest is kept");
    cr_assert_eq(kv_auth_fairq_charges(q, 13), 1);
    cr_assert_eq(kv_auth_fairq_push(q, 1, NULL, &ev), -EINVAL);
    kv_auth_fairq_free(q);
}
