/* auth_perm: key-range permission checks (see auth_perm.h). */
#include "auth/auth_perm.h"

#include <string.h>

/* A bound: the bytes p[0..n), followed by one 0 byte when succ (the successor of p: the
 * smallest key after p), or +infinity. */
typedef struct bound {
    const uint8_t *p;
    size_t n;
    bool succ, inf;
} bound;

static int bcmp_(const bound *a, const bound *b)
{
    if (a->inf || b->inf)
        return a->inf == b->inf ? 0 : (a->inf ? 1 : -1);
    size_t na = a->n + (a->succ ? 1 : 0), nb = b->n + (b->succ ? 1 : 0);
    for (size_t i = 0; i < na && i < nb; i++) {
        uint8_t x = i < a->n ? a->p[i] : 0, y = i < b->n ? b->p[i] : 0;
        if (x != y)
            return x < y ? -1 : 1;
    }
    return na == nb ? 0 : (na < nb ? -1 : 1);
}

static bool is_nul(const uint8_t *e, size_t n)
{
    return n == 1 && e[0] == 0;
}

static bool type_ok(int have, int want)
{
    return have == KV_PERM_READWRITE || have == want;
}

/* The interval [lo, hi) a permission grants. */
static void perm_ivl(const kv_auth_perm *p, bound *lo, bound *hi)
{
    *lo = (bound){p->key, p->klen, false, false};
    if (p->elen == 0)
        *hi = (bound){p->key, p->klen, true, false};
    else if (is_nul(p->end, p->elen))
        *hi = (bound){NULL, 0, false, true};
    else
        *hi = (bound){p->end, p->elen, false, false};
}

bool kv_auth_perm_allows(const kv_auth_perm *perms, size_t n, int want, const uint8_t *key,
                         size_t klen, const uint8_t *end, size_t elen)
{
    bound cur = {key, klen, false, false}, stop;
    if (elen == 0)
        stop = (bound){key, klen, true, false};
    else if (is_nul(end, elen))
        stop = (bound){NULL, 0, false, true};
    else
        stop = (bound){end, elen, false, false};
    if (bcmp_(&stop, &cur) <= 0) /* an empty or inverted range: check its first key */
        stop = (bound){key, klen, true, false};
    /* Sweep: extend the covered prefix [key, cur) with any interval that starts at or before
     * cur and ends after it, until it reaches stop. n is small (a user's permissions). */
    for (;;) {
        bool grew = false;
        for (size_t i = 0; i < n; i++) {
            if (!type_ok(perms[i].type, want))
                continue;
            bound lo, hi;
            perm_ivl(&perms[i], &lo, &hi);
            if (bcmp_(&lo, &cur) <= 0 && bcmp_(&hi, &cur) > 0) {
                cur = hi;
                grew = true;
                if (bcmp_(&cur, &stop) >= 0)
                    return true;
            }
        }
        if (!grew)
            return false;
    }
}
