/* auth_tokens: simple tokens with a TTL (see auth_tokens.h). */
#include "auth/auth_tokens.h"
#include "common/fnv.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/rand.h>

typedef struct tok {
    struct tok *next;
    uint64_t expires, pwtag;
    char *user;
    char token[KV_AUTH_TOKEN_MAX];
} tok;

struct kv_auth_tokens {
    tok **b;
    size_t nb, n, max;
    uint64_t ttl, seq;
};

uint64_t kv_auth_pwtag(const uint8_t *p, size_t n)
{
    /* FNV-1a from a non-standard basis: the tag travels in raft entries (apply_authn.c), so
     * the basis is part of the log's format and must not change */
    return kv_fnv1a64_add(1469598103934665603ULL, p, n);
}

static size_t slot(const kv_auth_tokens *t, const char *s)
{
    return (size_t)(kv_auth_pwtag((const uint8_t *)s, strlen(s)) & (t->nb - 1));
}

int kv_auth_tokens_init(kv_auth_tokens **out, size_t max, uint64_t ttl_ms)
{
    if (ttl_ms == 0)
        return -EINVAL;
    kv_auth_tokens *t = calloc(1, sizeof *t);
    if (!t)
        return -ENOMEM;
    t->max = max ? max : KV_AUTH_TOKENS_DEFAULT_MAX;
    t->ttl = ttl_ms;
    t->nb = 64;
    while (t->nb < t->max / 2 && t->nb < ((size_t)1 << 20))
        t->nb <<= 1;
    if (!(t->b = calloc(t->nb, sizeof *t->b))) {
        free(t);
        return -ENOMEM;
    }
    *out = t;
    return 0;
}

static void unlink_free(kv_auth_tokens *t, tok **pp)
{
    tok *x = *pp;
    *pp = x->next;
    free(x->user);
    free(x);
    t->n--;
}

void kv_auth_tokens_clear(kv_auth_tokens *t)
{
    for (size_t i = 0; i < t->nb; i++)
        while (t->b[i])
            unlink_free(t, &t->b[i]);
}

void kv_auth_tokens_free(kv_auth_tokens *t)
{
    if (!t)
        return;
    kv_auth_tokens_clear(t);
    free(t->b);
    free(t);
}

int kv_auth_tokens_gen(char out[KV_AUTH_TOKEN_PREFIX_LEN + 1])
{
    uint8_t r[KV_AUTH_TOKEN_PREFIX_LEN];
    if (RAND_bytes(r, sizeof r) != 1)
        return -EIO;
    static const char letters[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    for (int i = 0; i < KV_AUTH_TOKEN_PREFIX_LEN; i++)
        out[i] = letters[r[i] % 52];
    out[KV_AUTH_TOKEN_PREFIX_LEN] = 0;
    return 0;
}

int kv_auth_tokens_full(kv_auth_tokens *t, uint64_t now_ms)
{
    return t->n >= t->max && kv_auth_tokens_sweep(t, now_ms) == 0;
}

static tok **find(kv_auth_tokens *t, const char *token);

int kv_auth_tokens_put(kv_auth_tokens *t, const char *token, const char *user, uint64_t pwtag,
                       uint64_t now_ms)
{
    if (strlen(token) >= KV_AUTH_TOKEN_MAX)
        return -EINVAL;
    tok **pp = find(t, token);
    if (pp) { /* the same entry applied again (replay): refresh it */
        char *u = strdup(user);
        if (!u)
            return -ENOMEM;
        free((*pp)->user);
        (*pp)->user = u;
        (*pp)->pwtag = pwtag;
        (*pp)->expires = now_ms + t->ttl;
        return 0;
    }
    if (kv_auth_tokens_full(t, now_ms))
        return -EBUSY;
    tok *x = calloc(1, sizeof *x);
    if (!x || !(x->user = strdup(user))) {
        free(x);
        return -ENOMEM;
    }
    memcpy(x->token, token, strlen(token) + 1);
    x->expires = now_ms + t->ttl;
    x->pwtag = pwtag;
    size_t s = slot(t, x->token);
    x->next = t->b[s];
    t->b[s] = x;
    t->n++;
    return 0;
}

int kv_auth_tokens_assign(kv_auth_tokens *t, const char *user, uint64_t pwtag, uint64_t now_ms,
                          char out[KV_AUTH_TOKEN_MAX])
{
    if (kv_auth_tokens_full(t, now_ms))
        return -EBUSY;
    char pre[KV_AUTH_TOKEN_PREFIX_LEN + 1];
    int rc = kv_auth_tokens_gen(pre);
    if (rc)
        return rc;
    char token[KV_AUTH_TOKEN_MAX];
    snprintf(token, sizeof token, "%s.%llu", pre, (unsigned long long)++t->seq);
    rc = kv_auth_tokens_put(t, token, user, pwtag, now_ms);
    if (rc == 0)
        memcpy(out, token, sizeof token);
    return rc;
}

static tok **find(kv_auth_tokens *t, const char *token)
{
    for (tok **pp = &t->b[slot(t, token)]; *pp; pp = &(*pp)->next)
        if (strcmp((*pp)->token, token) == 0)
            return pp;
    return NULL;
}

const char *kv_auth_tokens_lookup(kv_auth_tokens *t, const char *token, uint64_t now_ms,
                                  uint64_t *pwtag)
{
    if (strlen(token) >= KV_AUTH_TOKEN_MAX)
        return NULL;
    tok **pp = find(t, token);
    if (!pp)
        return NULL;
    if ((*pp)->expires <= now_ms) {
        unlink_free(t, pp);
        return NULL;
    }
    (*pp)->expires = now_ms + t->ttl;
    if (pwtag)
        *pwtag = (*pp)->pwtag;
    return (*pp)->user;
}

void kv_auth_tokens_drop(kv_auth_tokens *t, const char *token)
{
    tok **pp = strlen(token) < KV_AUTH_TOKEN_MAX ? find(t, token) : NULL;
    if (pp)
        unlink_free(t, pp);
}

size_t kv_auth_tokens_sweep(kv_auth_tokens *t, uint64_t now_ms)
{
    size_t gone = 0;
    for (size_t i = 0; i < t->nb; i++)
        for (tok **pp = &t->b[i]; *pp;) {
            if ((*pp)->expires <= now_ms) {
                unlink_free(t, pp);
                gone++;
            } else {
                pp = &(*pp)->next;
            }
        }
    return gone;
}

size_t kv_auth_tokens_count(const kv_auth_tokens *t)
{
    return t->n;
}
