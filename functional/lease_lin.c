/* lease_lin: the lease-linearizability checker (rules G1-G3, T1, K1, K2 in check.h). Per
 * lease, O(ops^2) over that lease's few operations. */
#include "check.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void rep(char *report, size_t cap, const char *fmt, ...)
{
    if (!report || cap == 0)
        return;
    size_t len = strnlen(report, cap);
    if (len + 1 >= cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(report + len, cap - len, fmt, ap);
    va_end(ap);
}

static int op_cmp(const void *a, const void *b)
{
    const kv_fn_ll_op *x = a, *y = b;
    if (x->lease != y->lease)
        return x->lease < y->lease ? -1 : 1;
    if (x->call_us != y->call_us)
        return x->call_us < y->call_us ? -1 : 1;
    return 0;
}

static const char *where(const kv_fn_ll_op *o, char *buf, size_t cap)
{
    if (o->member < 0)
        snprintf(buf, cap, "balanced");
    else
        snprintf(buf, cap, "m%d", o->member);
    return buf;
}

static int in_windows(int64_t a, int64_t b, const kv_fn_window *w, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (a <= w[i].heal_us && b >= w[i].start_us)
            return 1;
    return 0;
}

/* The facts of one lease's history that the rules compare against. */
typedef struct facts {
    int64_t grant_ack;   /* KV_FN_INF: not acknowledged */
    int64_t revoke_call; /* first revoke invoked (any outcome), KV_FN_INF none */
    int64_t revoke_ack;  /* first successful revoke acknowledged, KV_FN_INF none */
    int64_t put_ack[32]; /* per key */
    int64_t detach_call[32];
    int64_t detach_ack[32];
} facts;

static void gather(const kv_fn_ll_op *s, size_t n, facts *f)
{
    f->grant_ack = f->revoke_call = f->revoke_ack = KV_FN_INF;
    for (int k = 0; k < 32; k++)
        f->put_ack[k] = f->detach_call[k] = f->detach_ack[k] = KV_FN_INF;
    for (size_t i = 0; i < n; i++) {
        const kv_fn_ll_op *o = &s[i];
        int k = o->key & 31;
        switch (o->type) {
        case KV_FN_LL_GRANT:
            if (o->ok && o->ret_us < f->grant_ack)
                f->grant_ack = o->ret_us;
            break;
        case KV_FN_LL_REVOKE:
            if (o->call_us < f->revoke_call)
                f->revoke_call = o->call_us;
            if (o->ok && !o->not_found && o->ret_us < f->revoke_ack)
                f->revoke_ack = o->ret_us;
            break;
        case KV_FN_LL_PUT:
            if (o->ok && o->ret_us < f->put_ack[k])
                f->put_ack[k] = o->ret_us;
            break;
        case KV_FN_LL_DETACH:
            if (o->call_us < f->detach_call[k])
                f->detach_call[k] = o->call_us;
            if (o->ok && o->ret_us < f->detach_ack[k])
                f->detach_ack[k] = o->ret_us;
            break;
        default:
            break;
        }
    }
}

/* Another revoke of the lease (not `self`) invoked before t. */
static int other_revoke_before(const kv_fn_ll_op *s, size_t n, const kv_fn_ll_op *self, int64_t t)
{
    for (size_t i = 0; i < n; i++)
        if (&s[i] != self && s[i].type == KV_FN_LL_REVOKE && s[i].call_us < t)
            return 1;
    return 0;
}

static int check_lease(const kv_fn_ll_op *s, size_t n, const kv_fn_window *wins, size_t n_wins,
                       char *report, size_t cap)
{
    facts f;
    gather(s, n, &f);
    int v = 0;
    char wb[16];
    for (size_t i = 0; i < n; i++) {
        const kv_fn_ll_op *o = &s[i];
        if (!o->ok)
            continue;
        int after_grant = o->call_us > f.grant_ack;
        int revoke_pending = f.revoke_call < o->ret_us; /* a revoke may have applied */
        if (o->type == KV_FN_LL_REVOKE && o->not_found && after_grant &&
            !other_revoke_before(s, n, o, o->ret_us) &&
            !in_windows(o->call_us, o->ret_us, wins, n_wins)) {
            rep(report, cap,
                "G1 lease %d: revoke%s through %s [%.3f, %.3f] answered \"lease not found\" "
                "although its grant was acknowledged at %.3f; ",
                o->lease,
                o->restarted ? " (granted before the fault, through a member restarted by it)" : "",
                where(o, wb, sizeof(wb)), o->call_us / 1e6, o->ret_us / 1e6, f.grant_ack / 1e6);
            v++;
        }
        if (o->type == KV_FN_LL_RENEW && o->ttl > 0 && o->call_us > f.revoke_ack) {
            rep(report, cap,
                "G2 lease %d: renewal through %s [%.3f, %.3f] answered TTL %lld after its "
                "revoke was acknowledged at %.3f; ",
                o->lease, where(o, wb, sizeof(wb)), o->call_us / 1e6, o->ret_us / 1e6,
                (long long)o->ttl, f.revoke_ack / 1e6);
            v++;
        }
        if (o->type == KV_FN_LL_RENEW && o->ttl <= 0 && after_grant && !revoke_pending) {
            rep(report, cap,
                "G3 lease %d: renewal through %s [%.3f, %.3f] answered TTL 0 (lease not found) "
                "although its grant was acknowledged at %.3f and no revoke was invoked; ",
                o->lease, where(o, wb, sizeof(wb)), o->call_us / 1e6, o->ret_us / 1e6,
                f.grant_ack / 1e6);
            v++;
        }
        if (o->type != KV_FN_LL_TTL)
            continue;
        if (o->ttl < 0 && after_grant && !revoke_pending) {
            rep(report, cap,
                "T1 lease %d: TimeToLive through %s [%.3f, %.3f] answered -1 (unknown) although "
                "its grant was acknowledged at %.3f and no revoke was invoked; ",
                o->lease, where(o, wb, sizeof(wb)), o->call_us / 1e6, o->ret_us / 1e6,
                f.grant_ack / 1e6);
            v++;
        }
        if (o->ttl >= 0 && o->call_us > f.revoke_ack) {
            rep(report, cap,
                "T1 lease %d: TimeToLive through %s [%.3f, %.3f] answered TTL %lld after its "
                "revoke was acknowledged at %.3f; ",
                o->lease, where(o, wb, sizeof(wb)), o->call_us / 1e6, o->ret_us / 1e6,
                (long long)o->ttl, f.revoke_ack / 1e6);
            v++;
        }
        if (o->ttl < 0)
            continue; /* unknown lease: no keys to judge */
        for (int k = 0; k < 32; k++) {
            int listed = (o->keys >> k) & 1u;
            if (!listed && o->call_us > f.put_ack[k] && f.detach_call[k] >= o->ret_us &&
                !revoke_pending) {
                rep(report, cap,
                    "K1 lease %d: TimeToLive(keys) through %s [%.3f, %.3f] misses key %d "
                    "although its put with the lease was acknowledged at %.3f; ",
                    o->lease, where(o, wb, sizeof(wb)), o->call_us / 1e6, o->ret_us / 1e6, k,
                    f.put_ack[k] / 1e6);
                v++;
            }
            if (listed && o->call_us > f.detach_ack[k]) {
                rep(report, cap,
                    "K1 lease %d: TimeToLive(keys) through %s [%.3f, %.3f] lists key %d "
                    "although its delete / overwrite was acknowledged at %.3f; ",
                    o->lease, where(o, wb, sizeof(wb)), o->call_us / 1e6, o->ret_us / 1e6, k,
                    f.detach_ack[k] / 1e6);
                v++;
            }
        }
        /* K2 against every earlier TimeToLive that returned before this one was invoked. */
        for (size_t j = 0; j < n; j++) {
            const kv_fn_ll_op *a = &s[j];
            if (a->type != KV_FN_LL_TTL || !a->ok || a->ttl < 0 || a->ret_us >= o->call_us)
                continue;
            for (int k = 0; k < 32; k++) {
                int la = (a->keys >> k) & 1u, lb = (o->keys >> k) & 1u;
                if (la && !lb && f.detach_call[k] >= o->ret_us && !revoke_pending) {
                    rep(report, cap,
                        "K2 lease %d: TimeToLive(keys) through %s [%.3f, %.3f] misses key %d "
                        "that an earlier one [%.3f, %.3f] listed; ",
                        o->lease, where(o, wb, sizeof(wb)), o->call_us / 1e6, o->ret_us / 1e6, k,
                        a->call_us / 1e6, a->ret_us / 1e6);
                    v++;
                }
                if (!la && lb && a->call_us > f.put_ack[k] && f.detach_call[k] < a->ret_us) {
                    rep(report, cap,
                        "K2 lease %d: TimeToLive(keys) through %s [%.3f, %.3f] lists key %d "
                        "that an earlier one [%.3f, %.3f] showed detached; ",
                        o->lease, where(o, wb, sizeof(wb)), o->call_us / 1e6, o->ret_us / 1e6, k,
                        a->call_us / 1e6, a->ret_us / 1e6);
                    v++;
                }
            }
            int renewed = 0;
            for (size_t q = 0; q < n; q++)
                if (s[q].type == KV_FN_LL_RENEW && s[q].call_us < o->ret_us &&
                    (s[q].ret_us > a->call_us || !s[q].ok))
                    renewed = 1;
            if (!renewed && o->ttl > a->ttl + 1 &&
                !in_windows(a->call_us, o->ret_us, wins, n_wins)) {
                rep(report, cap,
                    "K2 lease %d: TimeToLive through %s [%.3f, %.3f] answered TTL %lld, more "
                    "than an earlier one [%.3f, %.3f] (%lld) with no renewal between; ",
                    o->lease, where(o, wb, sizeof(wb)), o->call_us / 1e6, o->ret_us / 1e6,
                    (long long)o->ttl, a->call_us / 1e6, a->ret_us / 1e6, (long long)a->ttl);
                v++;
            }
        }
    }
    return v;
}

kv_fn_verdict kv_fn_lease_lin_check(const kv_fn_ll_op *ops, size_t n, const kv_fn_window *wins,
                                    size_t n_wins, char *report, size_t cap)
{
    if (report && cap)
        report[0] = '\0';
    kv_fn_ll_op *s = malloc((n ? n : 1) * sizeof(*s));
    if (!s) {
        rep(report, cap, "out of memory");
        return KV_FN_UNKNOWN;
    }
    memcpy(s, ops, n * sizeof(*s));
    qsort(s, n, sizeof(*s), op_cmp);
    int violations = 0;
    size_t leases = 0;
    for (size_t i = 0; i < n && violations <= 20;) {
        size_t j = i;
        while (j < n && s[j].lease == s[i].lease)
            j++;
        leases++;
        violations += check_lease(s + i, j - i, wins, n_wins, report, cap);
        i = j;
    }
    free(s);
    if (violations) {
        rep(report, cap, "(%d lease linearizability violations)", violations);
        return KV_FN_FAIL;
    }
    rep(report, cap, "%zu leases, %zu lease ops linearizable", leases, n);
    return KV_FN_PASS;
}
