/*
 * lin: linearizability of single-key registers (see check.h). Wing-Gong search as improved
 * by Lowe (memoised (linearized-set, state) pairs), the algorithm Porcupine uses, run per
 * key. Ops are entries of a doubly-linked list of call/return events ordered by time; the
 * search linearizes a call when the register model accepts it and the resulting
 * configuration was not seen before, and backtracks when it meets a return whose call is
 * not linearized yet.
 */
#include "check.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *kv_fn_verdict_name(kv_fn_verdict v)
{
    switch (v) {
    case KV_FN_PASS:
        return "ok";
    case KV_FN_FAIL:
        return "FAIL";
    default:
        return "unknown";
    }
}

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

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

typedef struct ev {
    int64_t t;
    int op;      /* index into the key's op array */
    int is_call; /* 1 call, 0 return */
    int match;   /* call: index of its return event */
} ev;

static int ev_cmp(const void *a, const void *b)
{
    const ev *x = a, *y = b;
    if (x->t != y->t)
        return x->t < y->t ? -1 : 1;
    if (x->is_call != y->is_call)
        return y->is_call - x->is_call; /* calls first: equal times are concurrent */
    return x->op - y->op;
}

typedef struct centry {
    uint64_t h;
    int state;
    uint64_t *bits;
    struct centry *next;
} centry;

typedef struct cache {
    centry **tab;
    size_t n_buckets, count, words;
} cache;

static void cache_free(cache *c)
{
    for (size_t i = 0; i < c->n_buckets; i++) {
        centry *e = c->tab[i];
        while (e) {
            centry *n = e->next;
            free(e->bits);
            free(e);
            e = n;
        }
    }
    free(c->tab);
}

/* Returns 1 if inserted, 0 if present, -ENOMEM. */
static int cache_add(cache *c, uint64_t h, int state, const uint64_t *bits)
{
    size_t b = h % c->n_buckets;
    for (centry *e = c->tab[b]; e; e = e->next)
        if (e->h == h && e->state == state && memcmp(e->bits, bits, c->words * 8) == 0)
            return 0;
    if (c->count >= c->n_buckets * 2) {
        size_t nb = c->n_buckets * 4;
        centry **nt = calloc(nb, sizeof(*nt));
        if (!nt)
            return -ENOMEM;
        for (size_t i = 0; i < c->n_buckets; i++) {
            centry *e = c->tab[i];
            while (e) {
                centry *n = e->next;
                e->next = nt[e->h % nb];
                nt[e->h % nb] = e;
                e = n;
            }
        }
        free(c->tab);
        c->tab = nt;
        c->n_buckets = nb;
        b = h % nb;
    }
    centry *e = malloc(sizeof(*e));
    uint64_t *cp = malloc(c->words * 8);
    if (!e || !cp) {
        free(e);
        free(cp);
        return -ENOMEM;
    }
    memcpy(cp, bits, c->words * 8);
    e->h = h;
    e->state = state;
    e->bits = cp;
    e->next = c->tab[b];
    c->tab[b] = e;
    c->count++;
    return 1;
}

static uint64_t splitmix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static void fmt_op(char *buf, size_t cap, const kv_fn_op *o)
{
    char ret[32];
    if (o->ret_us == KV_FN_INF)
        snprintf(ret, sizeof(ret), "unknown");
    else
        snprintf(ret, sizeof(ret), "%.6f", o->ret_us / 1e6);
    static const char *const names[] = {"put", "get", "cas", "cas-failed", "delete", "sget"};
    const char *nm = o->type >= 0 && o->type <= KV_FN_OP_SGET ? names[o->type] : "op";
    if (o->type == KV_FN_OP_CAS_OK || o->type == KV_FN_OP_CAS_FAIL)
        snprintf(buf, cap, "c%d %s(k%d if mod_rev=%" PRId64 ")=%s [%.6f, %s]", o->client, nm,
                 o->key, o->mod_rev, o->value, o->call_us / 1e6, ret);
    else
        snprintf(buf, cap, "c%d %s(k%d)%s%s [%.6f, %s]", o->client, nm, o->key,
                 o->type == KV_FN_OP_GET || o->type == KV_FN_OP_SGET ? "->" : "=",
                 o->value[0] ? o->value : "<absent>", o->call_us / 1e6, ret);
}

/* Caps the memoisation cache (entries); beyond it the verdict is UNKNOWN. */
#define LIN_MAX_CACHE 4000000u

/* Checks one key's ops. */
static kv_fn_verdict check_key(const kv_fn_op *ops, size_t n, int64_t deadline_ms, char *report,
                               size_t cap)
{
    kv_fn_verdict v = KV_FN_UNKNOWN;
    int *expect = calloc(n ? n : 1, sizeof(int)); /* get: required state; put: new state */
    int *cmpst = calloc(n ? n : 1, sizeof(int));  /* CAS: state its compare requires */
    ev *evs = calloc(2 * n + 1, sizeof(ev));
    int *nxt = calloc(2 * n + 2, sizeof(int)), *prv = calloc(2 * n + 2, sizeof(int));
    size_t words = (n + 63) / 64 + 1;
    uint64_t *bits = calloc(words, 8);
    uint64_t *zob = calloc(n ? n : 1, 8);
    struct frame {
        int e;
        int state;
    } *stack = calloc(n + 1, sizeof(*stack));
    cache c = {.n_buckets = 1024, .words = words};
    c.tab = calloc(c.n_buckets, sizeof(*c.tab));
    if (!expect || !cmpst || !evs || !nxt || !prv || !bits || !zob || !stack || !c.tab) {
        rep(report, cap, "out of memory; ");
        goto cleanup;
    }
    /* Intern values: state s>0 means "the value written by put op s-1". */
    for (size_t i = 0; i < n; i++) {
        zob[i] = splitmix(i * 7919 + 13);
        if (ops[i].type == KV_FN_OP_PUT || ops[i].type == KV_FN_OP_CAS_OK) {
            expect[i] = (int)i + 1;
            if (ops[i].type == KV_FN_OP_PUT)
                continue;
        }
        if (ops[i].type == KV_FN_OP_DEL) {
            expect[i] = 0;
            continue;
        }
        if (ops[i].type == KV_FN_OP_CAS_OK || ops[i].type == KV_FN_OP_CAS_FAIL) {
            /* The compared mod_revision names a value: the one a get returned with it, or
             * the write that got that revision. -1: none (the compare cannot hold). */
            const char *cv = NULL;
            for (size_t j = 0; j < n && !cv; j++)
                if (ops[j].type == KV_FN_OP_GET && ops[j].value[0] &&
                    ops[j].mod_rev == ops[i].mod_rev)
                    cv = ops[j].value;
            cmpst[i] = -1;
            for (size_t j = 0; j < n; j++)
                if ((ops[j].type == KV_FN_OP_PUT || ops[j].type == KV_FN_OP_CAS_OK) &&
                    (cv ? strcmp(ops[j].value, cv) == 0
                        : (ops[j].rev == ops[i].mod_rev && ops[j].ret_us != KV_FN_INF))) {
                    cmpst[i] = (int)j + 1;
                    break;
                }
            continue;
        }
        if (!ops[i].value[0]) {
            expect[i] = 0;
            continue;
        }
        expect[i] = -1;
        for (size_t j = 0; j < n; j++)
            if ((ops[j].type == KV_FN_OP_PUT || ops[j].type == KV_FN_OP_CAS_OK) &&
                strcmp(ops[j].value, ops[i].value) == 0) {
                expect[i] = (int)j + 1;
                break;
            }
        if (expect[i] < 0) {
            char b[160];
            fmt_op(b, sizeof(b), &ops[i]);
            rep(report, cap, "read a value no put wrote: %s; ", b);
            v = KV_FN_FAIL;
            goto cleanup;
        }
        if (ops[expect[i] - 1].call_us > ops[i].ret_us) {
            char b[160], b2[160];
            fmt_op(b, sizeof(b), &ops[i]);
            fmt_op(b2, sizeof(b2), &ops[expect[i] - 1]);
            rep(report, cap, "read from the future: %s, but the put %s started later; ", b, b2);
            v = KV_FN_FAIL;
            goto cleanup;
        }
    }
    for (size_t i = 0; i < n; i++) {
        evs[2 * i] = (ev){.t = ops[i].call_us, .op = (int)i, .is_call = 1};
        evs[2 * i + 1] = (ev){.t = ops[i].ret_us, .op = (int)i, .is_call = 0};
    }
    qsort(evs, 2 * n, sizeof(ev), ev_cmp);
    {
        int *ret_at = calloc(n ? n : 1, sizeof(int));
        if (!ret_at) {
            rep(report, cap, "out of memory; ");
            goto cleanup;
        }
        for (size_t i = 0; i < 2 * n; i++)
            if (!evs[i].is_call)
                ret_at[evs[i].op] = (int)i;
        for (size_t i = 0; i < 2 * n; i++)
            if (evs[i].is_call)
                evs[i].match = ret_at[evs[i].op];
        free(ret_at);
    }
    /* List nodes 1..2n are events 0..2n-1; node 0 is the head sentinel. */
    int H = 0;
    for (size_t i = 0; i <= 2 * n; i++) {
        nxt[i] = i + 1 <= 2 * n ? (int)i + 1 : -1;
        prv[i] = (int)i - 1;
    }
    int state = 0, depth = 0, best = -1, best_op = -1, best_state = 0;
    uint64_t zh = 0;
    int e = nxt[H];
    uint64_t iter = 0;
    while (nxt[H] != -1) {
        if ((++iter & 4095) == 0 && mono_ms() > deadline_ms) {
            rep(report, cap, "search budget exhausted after %d of %zu ops; ", depth, n);
            goto cleanup;
        }
        if (e == -1) { /* cannot happen: a return always precedes the end */
            break;
        }
        const ev *E = &evs[e - 1];
        if (E->is_call) {
            int op = E->op, ok, ns;
            if (ops[op].type == KV_FN_OP_PUT || ops[op].type == KV_FN_OP_DEL) {
                ok = 1;
                ns = expect[op];
            } else if (ops[op].type == KV_FN_OP_CAS_OK) {
                /* unknown outcome: applied if its compare held, else a no-op */
                ok = ops[op].ret_us == KV_FN_INF || cmpst[op] == state;
                ns = cmpst[op] == state ? expect[op] : state;
            } else if (ops[op].type == KV_FN_OP_CAS_FAIL) {
                ok = cmpst[op] != state;
                ns = state;
            } else {
                ok = expect[op] == state;
                ns = state;
            }
            if (ok) {
                bits[op / 64] |= 1ULL << (op % 64);
                uint64_t h2 = (zh ^ zob[op]) * 31 + (uint64_t)ns;
                int r = cache_add(&c, h2, ns, bits);
                if (r < 0 || c.count > LIN_MAX_CACHE) {
                    rep(report, cap, "memoisation cache limit reached; ");
                    goto cleanup;
                }
                if (r == 1) {
                    stack[depth++] = (struct frame){.e = e, .state = state};
                    state = ns;
                    zh ^= zob[op];
                    /* lift call and its return */
                    int m = E->match + 1;
                    nxt[prv[e]] = nxt[e];
                    if (nxt[e] != -1)
                        prv[nxt[e]] = prv[e];
                    nxt[prv[m]] = nxt[m];
                    if (nxt[m] != -1)
                        prv[nxt[m]] = prv[m];
                    e = nxt[H];
                    continue;
                }
                bits[op / 64] &= ~(1ULL << (op % 64));
            }
            e = nxt[e];
        } else {
            if (depth > best) {
                best = depth;
                best_op = E->op;
                best_state = state;
            }
            if (depth == 0) {
                v = KV_FN_FAIL;
                break;
            }
            struct frame f = stack[--depth];
            int ce = f.e, op = evs[ce - 1].op, m = evs[ce - 1].match + 1;
            /* unlift in reverse order */
            if (nxt[m] != -1)
                prv[nxt[m]] = m;
            nxt[prv[m]] = m;
            if (nxt[ce] != -1)
                prv[nxt[ce]] = ce;
            nxt[prv[ce]] = ce;
            bits[op / 64] &= ~(1ULL << (op % 64));
            zh ^= zob[op];
            state = f.state;
            e = nxt[ce];
        }
    }
    if (v != KV_FN_FAIL) {
        v = KV_FN_PASS;
        goto cleanup;
    }
    {
        char b[160];
        fmt_op(b, sizeof(b), &ops[best_op]);
        rep(report, cap,
            "not linearizable: %s cannot be placed (best partial order linearized %d of %zu ops, "
            "register then held %s); concurrent window:",
            b, best, n, best_state ? ops[best_state - 1].value : "<absent>");
        int shown = 0;
        for (size_t i = 0; i < n && shown < 8; i++) {
            const kv_fn_op *o = &ops[i];
            if ((int)i == best_op)
                continue;
            if (o->call_us <= ops[best_op].ret_us &&
                (o->ret_us >= ops[best_op].call_us - 1000000)) {
                fmt_op(b, sizeof(b), o);
                rep(report, cap, " %s;", b);
                shown++;
            }
        }
        rep(report, cap, " ");
    }
cleanup:
    cache_free(&c);
    free(expect);
    free(cmpst);
    free(evs);
    free(nxt);
    free(prv);
    free(bits);
    free(zob);
    free(stack);
    return v;
}

static int op_key_cmp(const void *a, const void *b)
{
    const kv_fn_op *x = a, *y = b;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    if (x->call_us != y->call_us)
        return x->call_us < y->call_us ? -1 : 1;
    return 0;
}

kv_fn_verdict kv_fn_lin_check(const kv_fn_op *ops, size_t n, uint32_t budget_ms, char *report,
                              size_t cap)
{
    if (report && cap)
        report[0] = '\0';
    kv_fn_op *s = malloc((n ? n : 1) * sizeof(*s));
    if (!s) {
        rep(report, cap, "out of memory");
        return KV_FN_UNKNOWN;
    }
    size_t ns = 0;
    for (size_t i = 0; i < n; i++) /* serializable reads may be stale: not checked here */
        if (ops[i].type != KV_FN_OP_SGET)
            s[ns++] = ops[i];
    n = ns;
    qsort(s, n, sizeof(*s), op_key_cmp);
    int64_t deadline = mono_ms() + budget_ms;
    kv_fn_verdict worst = KV_FN_PASS;
    size_t keys = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && s[j].key == s[i].key)
            j++;
        keys++;
        kv_fn_verdict v = check_key(s + i, j - i, deadline, report, cap);
        if (v == KV_FN_FAIL)
            worst = KV_FN_FAIL;
        else if (v == KV_FN_UNKNOWN && worst == KV_FN_PASS)
            worst = KV_FN_UNKNOWN;
        i = j;
    }
    if (worst == KV_FN_PASS)
        rep(report, cap, "%zu ops on %zu keys linearizable", n, keys);
    free(s);
    return worst;
}
