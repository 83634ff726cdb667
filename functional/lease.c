/* lease: the lease-TTL model checker (rules R1-R3 in check.h). */
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

static int ev_cmp(const void *a, const void *b)
{
    const kv_fn_lease_ev *x = a, *y = b;
    if (x->lease != y->lease)
        return x->lease < y->lease ? -1 : 1;
    if (x->call_us != y->call_us)
        return x->call_us < y->call_us ? -1 : 1;
    return 0;
}

kv_fn_verdict kv_fn_lease_check(const kv_fn_lease_info *leases, size_t n_leases,
                                const kv_fn_lease_ev *evs, size_t n_evs, const kv_fn_window *wins,
                                size_t n_wins, int64_t slack_us, char *report, size_t cap)
{
    if (report && cap)
        report[0] = '\0';
    kv_fn_lease_ev *s = malloc((n_evs ? n_evs : 1) * sizeof(*s));
    if (!s) {
        rep(report, cap, "out of memory");
        return KV_FN_UNKNOWN;
    }
    memcpy(s, evs, n_evs * sizeof(*s));
    qsort(s, n_evs, sizeof(*s), ev_cmp);
    int violations = 0;
    size_t reads = 0;
    for (size_t i = 0; i < n_evs;) {
        size_t j = i;
        while (j < n_evs && s[j].lease == s[i].lease)
            j++;
        int L = s[i].lease;
        if (L < 0 || (size_t)L >= n_leases) {
            rep(report, cap, "event for unknown lease %d; ", L);
            violations++;
            i = j;
            continue;
        }
        const kv_fn_lease_info *li = &leases[L];
        for (size_t r = i; r < j; r++) {
            const kv_fn_lease_ev *rd = &s[r];
            if (rd->type != KV_FN_LEV_READ)
                continue;
            reads++;
            /* Latest renewal acknowledged before the read started. */
            int64_t last_send = -1, last_ack = -1;
            for (size_t q = i; q < j; q++)
                if (s[q].type == KV_FN_LEV_RENEW && s[q].ret_us <= rd->call_us) {
                    if (s[q].call_us > last_send)
                        last_send = s[q].call_us;
                    if (s[q].ret_us > last_ack)
                        last_ack = s[q].ret_us;
                }
            if (!rd->present && last_send >= 0 && rd->ret_us < last_send + li->ttl_us) {
                rep(report, cap,
                    "R1 lease %d (ttl %.1fs): key missing in read [%.3f, %.3f] although a "
                    "renewal sent at %.3f was acknowledged (alive until >= %.3f); ",
                    L, li->ttl_us / 1e6, rd->call_us / 1e6, rd->ret_us / 1e6, last_send / 1e6,
                    (last_send + li->ttl_us) / 1e6);
                violations++;
            }
            if (rd->present) {
                for (size_t q = i; q < j; q++)
                    if (s[q].type == KV_FN_LEV_READ && !s[q].present && s[q].ret_us < rd->call_us) {
                        rep(report, cap,
                            "R3 lease %d: key present in read [%.3f, %.3f] after it was "
                            "observed gone in read [%.3f, %.3f]; ",
                            L, rd->call_us / 1e6, rd->ret_us / 1e6, s[q].call_us / 1e6,
                            s[q].ret_us / 1e6);
                        violations++;
                        break;
                    }
            }
            if (rd->present && li->abandoned && last_ack >= 0) {
                int in_window = 0;
                int64_t base = last_ack;
                for (size_t w = 0; w < n_wins; w++) {
                    if (rd->call_us >= wins[w].start_us && rd->call_us <= wins[w].heal_us)
                        in_window = 1;
                    if (wins[w].heal_us < rd->call_us && wins[w].heal_us > base)
                        base = wins[w].heal_us;
                }
                int64_t deadline = base + li->ttl_us + slack_us;
                if (!in_window && rd->call_us > deadline) {
                    rep(report, cap,
                        "R2 abandoned lease %d (ttl %.1fs): key still present in read [%.3f, "
                        "%.3f], %.3fs after its deadline %.3f (last renewal acked %.3f, "
                        "slack %.1fs); ",
                        L, li->ttl_us / 1e6, rd->call_us / 1e6, rd->ret_us / 1e6,
                        (rd->call_us - deadline) / 1e6, deadline / 1e6, last_ack / 1e6,
                        slack_us / 1e6);
                    violations++;
                }
            }
            if (violations > 20)
                break;
        }
        i = j;
    }
    free(s);
    if (violations) {
        rep(report, cap, "(%d violations)", violations);
        return KV_FN_FAIL;
    }
    rep(report, cap, "%zu leases, %zu reads consistent with the TTL model", n_leases, reads);
    return KV_FN_PASS;
}
