/* rev: the revision model of the KV store (rules V1-V4 in check.h), O(n log n). */
#include "check.h"

#include <inttypes.h>
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

static int by_rev(const void *a, const void *b)
{
    const kv_fn_op *x = *(const kv_fn_op *const *)a, *y = *(const kv_fn_op *const *)b;
    return x->rev < y->rev ? -1 : x->rev > y->rev;
}

static int by_ret(const void *a, const void *b)
{
    const kv_fn_op *x = *(const kv_fn_op *const *)a, *y = *(const kv_fn_op *const *)b;
    return x->ret_us < y->ret_us ? -1 : x->ret_us > y->ret_us;
}

static int by_value(const void *a, const void *b)
{
    const kv_fn_op *x = *(const kv_fn_op *const *)a, *y = *(const kv_fn_op *const *)b;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return strcmp(x->value, y->value);
}

kv_fn_verdict kv_fn_rev_check(const kv_fn_op *ops, size_t n, char *report, size_t cap)
{
    if (report && cap)
        report[0] = '\0';
    const kv_fn_op **puts = malloc((n + 1) * sizeof(*puts));
    int64_t *prefix_max = malloc((n + 1) * sizeof(*prefix_max));
    if (!puts || !prefix_max) {
        free(puts);
        free(prefix_max);
        rep(report, cap, "out of memory");
        return KV_FN_UNKNOWN;
    }
    size_t np = 0, ngets = 0;
    int bad = 0;
    for (size_t i = 0; i < n; i++)
        if (ops[i].type == KV_FN_OP_PUT && ops[i].ret_us != KV_FN_INF && ops[i].rev > 0)
            puts[np++] = &ops[i];
    /* V1 */
    qsort(puts, np, sizeof(*puts), by_rev);
    for (size_t i = 1; i < np && bad < 10; i++)
        if (puts[i]->rev == puts[i - 1]->rev) {
            rep(report, cap, "V1 puts %s and %s both got revision %" PRId64 "; ",
                puts[i - 1]->value, puts[i]->value, puts[i]->rev);
            bad++;
        }
    /* V2 and V4: puts by completion time with the running max revision. */
    qsort(puts, np, sizeof(*puts), by_ret);
    for (size_t i = 0; i < np; i++)
        prefix_max[i] = i ? (prefix_max[i - 1] > puts[i]->rev ? prefix_max[i - 1] : puts[i]->rev)
                          : puts[i]->rev;
    for (size_t i = 0; i < n && bad < 10; i++) {
        const kv_fn_op *o = &ops[i];
        if (o->rev <= 0 || (o->type == KV_FN_OP_PUT && o->ret_us == KV_FN_INF))
            continue;
        /* last put acknowledged strictly before o was invoked */
        size_t lo = 0, hi = np;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (puts[mid]->ret_us < o->call_us)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo == 0)
            continue;
        int64_t need = prefix_max[lo - 1];
        if (o->type == KV_FN_OP_PUT && o->rev <= need) {
            rep(report, cap,
                "V2 put(k%d)=%s [%.6f, %.6f] got revision %" PRId64 " but a put acknowledged "
                "before it was invoked has revision %" PRId64 "; ",
                o->key, o->value, o->call_us / 1e6, o->ret_us / 1e6, o->rev, need);
            bad++;
        } else if (o->type == KV_FN_OP_GET && o->rev < need) {
            rep(report, cap,
                "V4 stale read: get(k%d) [%.6f, %.6f] saw revision %" PRId64
                " but revision %" PRId64 " was acknowledged before it was invoked; ",
                o->key, o->call_us / 1e6, o->ret_us / 1e6, o->rev, need);
            bad++;
        }
    }
    /* V3: by (key, value) lookup of the put that wrote the value read. */
    qsort(puts, np, sizeof(*puts), by_value);
    for (size_t i = 0; i < n && bad < 10; i++) {
        const kv_fn_op *g = &ops[i];
        if (g->type != KV_FN_OP_GET || !g->value[0] || g->rev <= 0)
            continue;
        ngets++;
        const kv_fn_op *key = g, **hit = bsearch(&key, puts, np, sizeof(*puts), by_value);
        if (!hit)
            continue;
        if (g->mod_rev != (*hit)->rev || g->rev < g->mod_rev) {
            rep(report, cap,
                "V3 get(k%d)->%s [%.6f, %.6f] returned mod_revision %" PRId64 " at header "
                "revision %" PRId64 ", but that put has revision %" PRId64 "; ",
                g->key, g->value, g->call_us / 1e6, g->ret_us / 1e6, g->mod_rev, g->rev,
                (*hit)->rev);
            bad++;
        }
    }
    free(puts);
    free(prefix_max);
    if (bad)
        return KV_FN_FAIL;
    rep(report, cap, "%zu acknowledged puts, %zu reads consistent with the revision model", np,
        ngets);
    return KV_FN_PASS;
}
