/*
 * check_watch: the watch checker (rules W1-W4 and S1 in check.h). Pure function over a
 * recorded KV history and the watchers' logs; no I/O, no threads, O((n + e) log n).
 */
#include "check.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_REPORTS 8

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

/* A write the watchers must (acked) or may (unknown outcome) report. */
typedef struct wr {
    int key;
    int del; /* 1: delete event expected */
    int acked;
    int64_t rev; /* acked only */
    const kv_fn_op *op;
} wr;

/* (rev, key) of an expected or seen event. */
typedef struct rk {
    int64_t rev;
    int key;
    int del;
    const char *value;
} rk;

static int rk_cmp(const void *a, const void *b)
{
    const rk *x = a, *y = b;
    if (x->rev != y->rev)
        return x->rev < y->rev ? -1 : 1;
    return x->key < y->key ? -1 : x->key > y->key;
}

static int wr_rev_cmp(const void *a, const void *b)
{
    const wr *x = a, *y = b;
    if (x->rev != y->rev)
        return x->rev < y->rev ? -1 : 1;
    return x->key < y->key ? -1 : x->key > y->key;
}

static int is_write(const kv_fn_op *o)
{
    return o->type == KV_FN_OP_PUT || o->type == KV_FN_OP_CAS_OK || o->type == KV_FN_OP_DEL;
}

static const char *op_name(const kv_fn_op *o)
{
    switch (o->type) {
    case KV_FN_OP_PUT:
        return "put";
    case KV_FN_OP_CAS_OK:
        return "cas";
    case KV_FN_OP_DEL:
        return "delete";
    default:
        return "op";
    }
}

/* The acked write at (rev, key), or any acked write at rev when key < 0. */
static const wr *find_acked(const wr *acked, size_t n, int64_t rev, int key)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (acked[mid].rev < rev)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (size_t i = lo; i < n && acked[i].rev == rev; i++)
        if (key < 0 || acked[i].key == key)
            return &acked[i];
    return NULL;
}

/* An unknown-outcome write that may explain an event (key, del, value). */
static const wr *find_unknown(const wr *unk, size_t n, int key, int del, const char *value)
{
    for (size_t i = 0; i < n; i++)
        if (unk[i].key == key && unk[i].del == del && (del || !strcmp(unk[i].op->value, value)))
            return &unk[i];
    return NULL;
}

static int excused(const int64_t *ex, size_t n_ex, int64_t rev)
{
    for (size_t i = 0; i < n_ex; i += 2)
        if (rev >= ex[i] && rev < ex[i + 1])
            return 1;
    return 0;
}

kv_fn_verdict kv_fn_watch_check(const kv_fn_op *ops, size_t n_ops, const kv_fn_watch_ev *evs,
                                size_t n_evs, int64_t final_rev, char *report, size_t cap)
{
    if (report && cap)
        report[0] = '\0';
    kv_fn_verdict v = KV_FN_PASS;
    int bad = 0;
    size_t n_acked = 0, n_unk = 0, n_all = 0, n_sget = 0, n_ev = 0, n_restart = 0;
    int n_watchers = 0;
    wr *acked = calloc(n_ops + 1, sizeof(*acked));
    wr *unk = calloc(n_ops + 1, sizeof(*unk));
    rk *all = calloc(n_ops + n_evs + 1, sizeof(*all)); /* every write/event that happened */
    rk *seen = calloc(n_evs + 1, sizeof(*seen));
    int64_t *ex = calloc(2 * n_evs + 2, sizeof(*ex));
    if (!acked || !unk || !all || !seen || !ex) {
        rep(report, cap, "out of memory");
        v = KV_FN_UNKNOWN;
        goto cleanup;
    }
    for (size_t i = 0; i < n_ops; i++) {
        const kv_fn_op *o = &ops[i];
        if (!is_write(o))
            continue;
        wr w = {.key = o->key, .del = o->type == KV_FN_OP_DEL, .op = o};
        if (o->ret_us == KV_FN_INF) {
            unk[n_unk++] = w;
            continue;
        }
        if (o->rev <= 0 || (w.del && o->mod_rev <= 0))
            continue; /* no revision recorded, or a delete of a missing key (no event) */
        w.acked = 1;
        w.rev = o->rev;
        acked[n_acked++] = w;
        all[n_all++] = (rk){.rev = w.rev, .key = w.key, .del = w.del, .value = o->value};
    }
    qsort(acked, n_acked, sizeof(*acked), wr_rev_cmp);
    for (size_t i = 0; i < n_evs; i++)
        if (evs[i].watcher + 1 > n_watchers)
            n_watchers = evs[i].watcher + 1;

    /* W2 (once per event, over every watcher) and the union of valid events. */
    for (size_t i = 0; i < n_evs; i++) {
        const kv_fn_watch_ev *e = &evs[i];
        if (e->type != KV_FN_WEV_PUT && e->type != KV_FN_WEV_DELETE) {
            if (e->type == KV_FN_WEV_START)
                n_restart++;
            continue;
        }
        n_ev++;
        int del = e->type == KV_FN_WEV_DELETE;
        const wr *a = find_acked(acked, n_acked, e->rev, e->key);
        const char *what = del ? "delete" : "put";
        if (a) {
            if (a->del != del || (!del && strcmp(a->op->value, e->value) != 0)) {
                if (bad++ < MAX_REPORTS)
                    rep(report, cap,
                        "W2 watcher %d (m%d) got %s(k%d)=%s at revision %" PRId64
                        " but that revision is %s(k%d)=%s [%.6f, %.6f]; ",
                        e->watcher, e->member, what, e->key, del ? "-" : e->value, e->rev,
                        op_name(a->op), a->key, a->del ? "-" : a->op->value, a->op->call_us / 1e6,
                        a->op->ret_us / 1e6);
            }
            continue;
        }
        const wr *other = find_acked(acked, n_acked, e->rev, -1);
        const wr *u = find_unknown(unk, n_unk, e->key, del, e->value);
        if (!u || other) {
            if (bad++ < MAX_REPORTS) {
                if (other)
                    rep(report, cap,
                        "W2 watcher %d (m%d) got %s(k%d)=%s at revision %" PRId64
                        " but that revision is %s(k%d)=%s; ",
                        e->watcher, e->member, what, e->key, del ? "-" : e->value, e->rev,
                        op_name(other->op), other->key, other->del ? "-" : other->op->value);
                else
                    rep(report, cap,
                        "W2 watcher %d (m%d) got %s(k%d)=%s at revision %" PRId64
                        " that no write of that key (and value) got; ",
                        e->watcher, e->member, what, e->key, del ? "-" : e->value, e->rev);
            }
            continue;
        }
        all[n_all++] = (rk){.rev = e->rev, .key = e->key, .del = del, .value = u->op->value};
    }
    qsort(all, n_all, sizeof(*all), rk_cmp);
    { /* dedupe the union */
        size_t k = 0;
        for (size_t i = 0; i < n_all; i++)
            if (k == 0 || rk_cmp(&all[k - 1], &all[i]) != 0)
                all[k++] = all[i];
        n_all = k;
    }

    for (int wi = 0; wi < n_watchers; wi++) {
        size_t n_seen = 0, n_ex = 0;
        int64_t start = -1, confirmed = 0, prev_rev = 0, last_member = -1;
        int prev_key = -1;
        for (size_t i = 0; i < n_evs; i++) {
            const kv_fn_watch_ev *e = &evs[i];
            if (e->watcher != wi)
                continue;
            last_member = e->member;
            switch (e->type) {
            case KV_FN_WEV_START:
                if (start < 0)
                    start = e->rev;
                break;
            case KV_FN_WEV_COMPACTED: {
                int64_t from = prev_rev > confirmed ? prev_rev : confirmed;
                ex[n_ex++] = from + 1;
                ex[n_ex++] = e->rev;
                break;
            }
            case KV_FN_WEV_PROGRESS:
                if (e->rev > confirmed)
                    confirmed = e->rev;
                break;
            case KV_FN_WEV_PUT:
            case KV_FN_WEV_DELETE:
                /* W1 */
                if (prev_rev && (e->rev < prev_rev || (e->rev == prev_rev && e->key <= prev_key))) {
                    if (bad++ < MAX_REPORTS)
                        rep(report, cap,
                            "W1 watcher %d (m%d) got %s(k%d) at revision %" PRId64
                            " after revision %" PRId64 " (k%d): %s; ",
                            wi, e->member, e->type == KV_FN_WEV_DELETE ? "delete" : "put", e->key,
                            e->rev, prev_rev, prev_key,
                            e->rev == prev_rev && e->key == prev_key ? "duplicate"
                                                                     : "out of order");
                }
                if (e->rev > prev_rev || (e->rev == prev_rev && e->key > prev_key)) {
                    prev_rev = e->rev;
                    prev_key = e->key;
                }
                if (e->rev > confirmed)
                    confirmed = e->rev;
                seen[n_seen++] = (rk){.rev = e->rev, .key = e->key};
                break;
            default:
                break;
            }
        }
        if (start < 0) {
            if (bad++ < MAX_REPORTS)
                rep(report, cap, "watcher %d has no start record; ", wi);
            continue;
        }
        qsort(seen, n_seen, sizeof(*seen), rk_cmp);
        for (size_t i = 1; i < n_seen; i++) /* W1: duplicates that were not adjacent */
            if (rk_cmp(&seen[i - 1], &seen[i]) == 0 && bad++ < MAX_REPORTS)
                rep(report, cap, "W1 watcher %d got revision %" PRId64 " (k%d) twice: duplicate; ",
                    wi, seen[i].rev, seen[i].key);
        /* W3 */
        for (size_t i = 0; i < n_all; i++) {
            const rk *x = &all[i];
            if (x->rev < start || x->rev > confirmed || excused(ex, n_ex, x->rev))
                continue;
            if (bsearch(x, seen, n_seen, sizeof(*seen), rk_cmp))
                continue;
            if (bad++ < MAX_REPORTS) {
                const wr *a = find_acked(acked, n_acked, x->rev, x->key);
                if (a)
                    rep(report, cap,
                        "W3 watcher %d (last on m%" PRId64 ", covers [%" PRId64 ", %" PRId64
                        "]) missed %s(k%d)=%s at revision %" PRId64
                        " (acknowledged [%.6f, %.6f]); ",
                        wi, last_member, start, confirmed, op_name(a->op), x->key,
                        x->del ? "-" : x->value, x->rev, a->op->call_us / 1e6, a->op->ret_us / 1e6);
                else
                    rep(report, cap,
                        "W3 watcher %d (covers [%" PRId64 ", %" PRId64 "]) missed %s(k%d)=%s "
                        "at revision %" PRId64 " that another watcher received; ",
                        wi, start, confirmed, x->del ? "delete" : "put", x->key,
                        x->del ? "-" : x->value, x->rev);
            }
        }
        /* W4 */
        if (final_rev > 0 && confirmed < final_rev && bad++ < MAX_REPORTS)
            rep(report, cap,
                "W4 watcher %d (last on m%" PRId64 ") confirmed revisions only up to %" PRId64
                " of %" PRId64 "; ",
                wi, last_member, confirmed, final_rev);
    }

    /* S1 */
    for (size_t i = 0; i < n_ops; i++) {
        const kv_fn_op *g = &ops[i];
        if (g->type != KV_FN_OP_SGET || !g->value[0])
            continue;
        n_sget++;
        const kv_fn_op *w = NULL;
        for (size_t j = 0; j < n_acked && !w; j++)
            if (acked[j].key == g->key && !acked[j].del && !strcmp(acked[j].op->value, g->value))
                w = acked[j].op;
        if (!w) {
            if (!find_unknown(unk, n_unk, g->key, 0, g->value) && bad++ < MAX_REPORTS)
                rep(report, cap, "S1 serializable get(k%d)->%s [%.6f, %.6f]: no write wrote it; ",
                    g->key, g->value, g->call_us / 1e6, g->ret_us / 1e6);
            continue;
        }
        if ((g->mod_rev != w->rev || g->rev < g->mod_rev) && bad++ < MAX_REPORTS)
            rep(report, cap,
                "S1 serializable get(k%d)->%s [%.6f, %.6f] returned mod_revision %" PRId64
                " at header revision %" PRId64 " but that %s has revision %" PRId64 "; ",
                g->key, g->value, g->call_us / 1e6, g->ret_us / 1e6, g->mod_rev, g->rev, op_name(w),
                w->rev);
    }

    if (bad) {
        v = KV_FN_FAIL;
        if (bad > MAX_REPORTS)
            rep(report, cap, "(%d violations, first %d shown)", bad, MAX_REPORTS);
    } else {
        rep(report, cap,
            "%d watchers, %zu events, %zu (re)starts, %zu acknowledged writes, %zu serializable "
            "reads: every event once, in order, no gap",
            n_watchers, n_ev, n_restart, n_acked, n_sget);
    }
cleanup:
    free(acked);
    free(unk);
    free(all);
    free(seen);
    free(ex);
    return v;
}
