/*
 * workload: the stressers of a case (fn.h). KV clients put unique values to and read
 * (linearizable) a few register keys through libkvclient, each client preferring a different
 * member (all members listed, so the client fails over). Lease clients grant leases with one
 * key each: "kept" leases are renewed every TTL/3 with a single keepalive round trip whose
 * send and acknowledgement times are recorded, "abandoned" leases are never renewed; both
 * kinds of keys are read back to feed the lease model. Lease-linearizability clients
 * (ll_main) run short lease lifecycles through clients pinned to one member and a balanced
 * one: grant, puts with the lease, TimeToLive(keys), KeepAliveOnce, a delete or overwrite,
 * revoke, each read or renewal at once after the write it must reflect (lease_lin.c); and
 * one lease per member granted before the fault and revoked through that member after it.
 * Every operation records its invocation and completion time; a put that failed has an
 * unknown outcome (KV_FN_INF completion). After a failure a client pauses 100 ms so that an
 * outage does not flood the history with unknown ops.
 */
#include "check.h"
#include "fn.h"

#include "kvclient.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct vec {
    void *a;
    size_t n, cap, sz;
} vec;

static int vec_push(vec *v, const void *x)
{
    if (v->n == v->cap) {
        size_t nc = v->cap ? v->cap * 2 : 256;
        void *na = realloc(v->a, nc * v->sz);
        if (!na)
            return -ENOMEM;
        v->a = na;
        v->cap = nc;
    }
    memcpy((char *)v->a + v->n * v->sz, x, v->sz);
    v->n++;
    return 0;
}

typedef struct worker {
    struct kv_fn_workload *w;
    int id;
    int is_lease;
    int is_ll; /* lease-linearizability client: kc is balanced, pin[m] talk to member m only */
    pthread_t th;
    kvc_client *kc;
    kvc_client *pin[KV_FN_MAX_MEMBERS];
    int n_pin;
    vec ll; /* kv_fn_ll_op (lease indices local) */
    int n_ll_leases;
    uint64_t rng;
    vec ops;    /* kv_fn_op */
    vec leases; /* kv_fn_lease_info (lease workers; indices local) */
    vec lev;    /* kv_fn_lease_ev */
    uint64_t attempts;
    int64_t cas_mod[64]; /* per register: mod_revision of the last value this client read */
} worker;

struct kv_fn_workload {
    kv_fn_workload_cfg cfg;
    atomic_int stop;
    atomic_uint_fast64_t n_ok, n_failed;
    worker *workers;
    int n_workers;
    /* merged at stop */
    vec ops, leases, lev, ll;
    kv_fn_watchers *watch; /* watchers on <prefix>/reg/ (watch.c), NULL if none */
};

static uint64_t rnd(worker *k)
{
    k->rng = k->rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return k->rng >> 33;
}

static void sleep_ms(uint32_t ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void count(worker *k, int ok)
{
    if (ok)
        atomic_fetch_add(&k->w->n_ok, 1);
    else
        atomic_fetch_add(&k->w->n_failed, 1);
}

static void *kv_main(void *arg)
{
    worker *k = arg;
    const kv_fn_workload_cfg *cfg = &k->w->cfg;
    uint64_t seq = 0;
    while (!atomic_load(&k->w->stop)) {
        int key = (int)(rnd(k) % (uint64_t)cfg->keys);
        char kb[128];
        int kl = snprintf(kb, sizeof(kb), "%s/reg/%d", cfg->prefix, key);
        kv_fn_op op = {.key = key, .client = k->id};
        int ok;
        /* Mix: 35% put, 40% linearizable get, 10% serializable get, 10% Txn CAS on the
         * mod_revision this client last read (a get when it read none), 5% delete. */
        uint64_t dice = rnd(k) % 20;
        if (dice == 14 || dice == 15) {
            op.type = KV_FN_OP_SGET;
            kvc_range_result rr = {0};
            kvc_range_opts ro = {.serializable = 1};
            op.call_us = kv_fn_now_us();
            int r = kvc_get(k->kc, kb, (size_t)kl, &ro, cfg->op_timeout_ms, &rr, NULL);
            op.ret_us = kv_fn_now_us();
            ok = r == 0;
            if (ok) {
                op.rev = rr.header.revision;
                if (rr.n_kvs > 0) {
                    op.mod_rev = rr.kvs[0].mod_revision;
                    size_t l = rr.kvs[0].value_len < sizeof(op.value) - 1 ? rr.kvs[0].value_len
                                                                          : sizeof(op.value) - 1;
                    memcpy(op.value, rr.kvs[0].value, l);
                    op.value[l] = '\0';
                }
                vec_push(&k->ops, &op);
            }
            kvc_range_result_free(&rr);
        } else if ((dice == 16 || dice == 17) && key < 64 && k->cas_mod[key] > 0) {
            snprintf(op.value, sizeof(op.value), "c%d-%llu", k->id, (unsigned long long)++seq);
            op.mod_rev = k->cas_mod[key];
            kvc_txn *t = kvc_txn_new();
            kvc_txn_result tr = {0};
            int r = -ENOMEM;
            op.call_us = kv_fn_now_us();
            if (t &&
                kvc_txn_cmp_int(t, kb, (size_t)kl, KVC_CMP_MOD, KVC_CMP_EQUAL, op.mod_rev) == 0 &&
                kvc_txn_put(t, KVC_TXN_SUCCESS, kb, (size_t)kl, op.value, strlen(op.value), NULL) ==
                    0)
                r = kvc_txn_commit(k->kc, t, 0, cfg->op_timeout_ms, &tr, NULL);
            op.ret_us = r == 0 ? kv_fn_now_us() : KV_FN_INF;
            ok = r == 0;
            op.type = r == 0 && !tr.succeeded ? KV_FN_OP_CAS_FAIL : KV_FN_OP_CAS_OK;
            if (ok)
                op.rev = tr.header.revision;
            kvc_txn_result_free(&tr);
            kvc_txn_free(t);
            if (t)
                vec_push(&k->ops, &op);
            k->cas_mod[key] = 0;
        } else if (dice == 18) {
            op.type = KV_FN_OP_DEL;
            kvc_delete_result dr = {0};
            op.call_us = kv_fn_now_us();
            int r = kvc_delete(k->kc, kb, (size_t)kl, NULL, cfg->op_timeout_ms, &dr, NULL);
            op.ret_us = r == 0 ? kv_fn_now_us() : KV_FN_INF;
            ok = r == 0;
            if (ok) {
                op.rev = dr.header.revision;
                op.mod_rev = dr.deleted; /* 0: nothing deleted, no revision (check.h) */
            }
            kvc_delete_result_free(&dr);
            vec_push(&k->ops, &op);
        } else if (dice < 7) {
            op.type = KV_FN_OP_PUT;
            snprintf(op.value, sizeof(op.value), "c%d-%llu", k->id, (unsigned long long)++seq);
            kvc_put_result pr = {0};
            op.call_us = kv_fn_now_us();
            int r = kvc_put(k->kc, kb, (size_t)kl, op.value, strlen(op.value), NULL,
                            cfg->op_timeout_ms, &pr, NULL);
            op.ret_us = r == 0 ? kv_fn_now_us() : KV_FN_INF;
            ok = r == 0;
            if (ok)
                op.rev = pr.header.revision;
            kvc_put_result_free(&pr);
            vec_push(&k->ops, &op);
        } else {
            op.type = KV_FN_OP_GET;
            kvc_range_result rr = {0};
            op.call_us = kv_fn_now_us();
            int r = kvc_get(k->kc, kb, (size_t)kl, NULL, cfg->op_timeout_ms, &rr, NULL);
            op.ret_us = kv_fn_now_us();
            ok = r == 0;
            if (ok) {
                op.rev = rr.header.revision;
                if (rr.n_kvs > 0) {
                    op.mod_rev = rr.kvs[0].mod_revision;
                    size_t l = rr.kvs[0].value_len < sizeof(op.value) - 1 ? rr.kvs[0].value_len
                                                                          : sizeof(op.value) - 1;
                    memcpy(op.value, rr.kvs[0].value, l);
                    op.value[l] = '\0';
                }
                if (key < 64)
                    k->cas_mod[key] = op.mod_rev;
                vec_push(&k->ops, &op);
            }
            kvc_range_result_free(&rr);
        }
        count(k, ok);
        if (!ok)
            sleep_ms(100);
    }
    return NULL;
}

typedef struct lease_slot {
    int idx; /* local lease index */
    int64_t id;
    int64_t ttl_us;
    int abandoned;
    int64_t next_renew_us, next_read_us;
    int gone_seen; /* abandoned: observed gone; read once more then retire */
    int active;
    char key[128];
} lease_slot;

#define LEASE_KEPT 3
#define LEASE_ABANDONED 4

static int lease_new(worker *k, lease_slot *s, int abandoned)
{
    const kv_fn_workload_cfg *cfg = &k->w->cfg;
    kvc_lease_grant_result g = {0};
    int64_t c0 = kv_fn_now_us();
    int r = kvc_lease_grant(k->kc, cfg->lease_ttl_s, 0, 0, cfg->op_timeout_ms, &g, NULL);
    int64_t c1 = kv_fn_now_us();
    count(k, r == 0);
    if (r != 0 || g.ttl <= 0)
        return -EIO;
    /* A fresh key per attempt: a put with an unknown outcome never aliases a later one. */
    int kl = snprintf(s->key, sizeof(s->key), "%s/lease/%d-%llu", cfg->prefix, k->id,
                      (unsigned long long)(++k->attempts));
    kvc_put_opts po = {.lease = g.id};
    r = kvc_put(k->kc, s->key, (size_t)kl, "v", 1, &po, cfg->op_timeout_ms, NULL, NULL);
    count(k, r == 0);
    if (r != 0) {
        kvc_lease_revoke(k->kc, g.id, cfg->op_timeout_ms, NULL, NULL);
        return -EIO;
    }
    kv_fn_lease_info li = {.ttl_us = g.ttl * 1000000, .abandoned = abandoned};
    s->idx = (int)k->leases.n;
    vec_push(&k->leases, &li);
    kv_fn_lease_ev e = {.lease = s->idx, .type = KV_FN_LEV_RENEW, .call_us = c0, .ret_us = c1};
    vec_push(&k->lev, &e);
    s->id = g.id;
    s->ttl_us = li.ttl_us;
    s->abandoned = abandoned;
    s->next_renew_us = c0 + li.ttl_us / 3;
    s->next_read_us = c1 + 100000;
    s->gone_seen = 0;
    s->active = 1;
    return 0;
}

static void *lease_main(void *arg)
{
    worker *k = arg;
    const kv_fn_workload_cfg *cfg = &k->w->cfg;
    lease_slot slots[LEASE_KEPT + LEASE_ABANDONED];
    memset(slots, 0, sizeof(slots));
    int64_t next_abandon = 0;
    while (!atomic_load(&k->w->stop)) {
        int64_t now = kv_fn_now_us();
        for (int i = 0; i < LEASE_KEPT + LEASE_ABANDONED && !atomic_load(&k->w->stop); i++) {
            lease_slot *s = &slots[i];
            int abandoned = i >= LEASE_KEPT;
            if (!s->active) {
                if (abandoned && now < next_abandon)
                    continue;
                if (lease_new(k, s, abandoned) != 0) {
                    sleep_ms(100);
                    continue;
                }
                if (abandoned)
                    next_abandon = now + 700000;
                continue;
            }
            now = kv_fn_now_us();
            if (!abandoned && now >= s->next_renew_us) {
                kvc_keepalive_result kr = {0};
                int64_t c0 = kv_fn_now_us();
                int r = kvc_lease_keepalive_once(k->kc, s->id, cfg->op_timeout_ms, &kr, NULL);
                int64_t c1 = kv_fn_now_us();
                count(k, r == 0);
                if (r == 0 && kr.ttl > 0) {
                    kv_fn_lease_ev e = {
                        .lease = s->idx, .type = KV_FN_LEV_RENEW, .call_us = c0, .ret_us = c1};
                    vec_push(&k->lev, &e);
                    s->next_renew_us = c0 + s->ttl_us / 3;
                } else if (r == 0) {
                    s->active = 0; /* lease gone (expired during an outage): replace it */
                } else {
                    s->next_renew_us = kv_fn_now_us() + 100000;
                }
            }
            if (s->active && now >= s->next_read_us) {
                kvc_range_result rr = {0};
                int64_t c0 = kv_fn_now_us();
                int r = kvc_get(k->kc, s->key, strlen(s->key), NULL, cfg->op_timeout_ms, &rr, NULL);
                int64_t c1 = kv_fn_now_us();
                count(k, r == 0);
                if (r == 0) {
                    kv_fn_lease_ev e = {.lease = s->idx,
                                        .type = KV_FN_LEV_READ,
                                        .present = rr.n_kvs > 0,
                                        .call_us = c0,
                                        .ret_us = c1};
                    vec_push(&k->lev, &e);
                    if (abandoned && !e.present) {
                        if (s->gone_seen)
                            s->active = 0;
                        s->gone_seen = 1;
                    }
                }
                kvc_range_result_free(&rr);
                s->next_read_us = kv_fn_now_us() + 150000 + (int64_t)(rnd(k) % 150000);
            }
        }
        sleep_ms(20);
    }
    return NULL;
}

/* ---- lease linearizability (lease_lin.c) ---- */

/* Outlives every case, so nothing expires and each answer is decided: an _UNTIL_TRIGGER_SNAPSHOT
 * case holds its fault up to trigger_bound_ms (120 s by default, cases.c), and the load phases
 * before and after the fault come on top; 60 s let a lease granted before a long hold expire
 * and a later revoke answer "lease not found" (a false G1). */
#define LL_TTL_S 600

typedef struct ll_lease {
    int idx;
    int64_t id;
    char key[2][160];
} ll_lease;

static kv_fn_ll_op *ll_rec(worker *k, const ll_lease *l, int type, int member)
{
    kv_fn_ll_op o = {.lease = l->idx, .type = type, .member = member};
    vec_push(&k->ll, &o);
    return (kv_fn_ll_op *)k->ll.a + (k->ll.n - 1);
}

/* The client of member m (-1: balanced). */
static kvc_client *ll_client(worker *k, int m)
{
    return m < 0 ? k->kc : k->pin[m];
}

static int ll_done(worker *k, kv_fn_ll_op *o, int r, int64_t c0)
{
    o->call_us = c0;
    o->ret_us = kv_fn_now_us();
    o->ok = r == 0;
    count(k, o->ok);
    if (!o->ok)
        sleep_ms(100);
    return r;
}

static int ll_grant(worker *k, ll_lease *l, int m)
{
    const kv_fn_workload_cfg *cfg = &k->w->cfg;
    kvc_lease_grant_result g = {0};
    int64_t c0 = kv_fn_now_us();
    int r = kvc_lease_grant(ll_client(k, m), LL_TTL_S, 0, 0, cfg->op_timeout_ms, &g, NULL);
    if (r != 0 || g.ttl <= 0) {
        count(k, 0);
        sleep_ms(100);
        return -EIO; /* an unknown grant has no id to follow */
    }
    l->idx = k->n_ll_leases++;
    l->id = g.id;
    for (int i = 0; i < 2; i++)
        snprintf(l->key[i], sizeof(l->key[i]), "%s/ll/%d-%d-%d", cfg->prefix, k->id, l->idx, i);
    kv_fn_ll_op *o = ll_rec(k, l, KV_FN_LL_GRANT, m);
    ll_done(k, o, 0, c0);
    return 0;
}

static void ll_put(worker *k, const ll_lease *l, int m, int key, int with_lease)
{
    const kv_fn_workload_cfg *cfg = &k->w->cfg;
    kv_fn_ll_op *o = ll_rec(k, l, with_lease ? KV_FN_LL_PUT : KV_FN_LL_DETACH, m);
    size_t o_idx = k->ll.n - 1;
    o->key = key;
    kvc_put_opts po = {.lease = with_lease ? l->id : 0};
    int64_t c0 = kv_fn_now_us();
    int r = kvc_put(ll_client(k, m), l->key[key], strlen(l->key[key]), "v", 1, &po,
                    cfg->op_timeout_ms, NULL, NULL);
    ll_done(k, (kv_fn_ll_op *)k->ll.a + o_idx, r, c0);
}

static void ll_delete(worker *k, const ll_lease *l, int m, int key)
{
    const kv_fn_workload_cfg *cfg = &k->w->cfg;
    kv_fn_ll_op *o = ll_rec(k, l, KV_FN_LL_DETACH, m);
    size_t o_idx = k->ll.n - 1;
    o->key = key;
    int64_t c0 = kv_fn_now_us();
    int r = kvc_delete(ll_client(k, m), l->key[key], strlen(l->key[key]), NULL, cfg->op_timeout_ms,
                       NULL, NULL);
    ll_done(k, (kv_fn_ll_op *)k->ll.a + o_idx, r, c0);
}

static void ll_ttl(worker *k, const ll_lease *l, int m)
{
    const kv_fn_workload_cfg *cfg = &k->w->cfg;
    kvc_lease_ttl_result t = {0};
    int64_t c0 = kv_fn_now_us();
    int r = kvc_lease_time_to_live(ll_client(k, m), l->id, 1, cfg->op_timeout_ms, &t, NULL);
    kv_fn_ll_op *o = ll_rec(k, l, KV_FN_LL_TTL, m);
    if (r == 0) {
        o->ttl = t.ttl;
        for (size_t i = 0; i < t.n_keys; i++)
            for (int j = 0; j < 2; j++)
                if (t.key_lens[i] == strlen(l->key[j]) &&
                    memcmp(t.keys[i], l->key[j], t.key_lens[i]) == 0)
                    o->keys |= 1u << j;
        kvc_lease_ttl_result_free(&t);
    }
    ll_done(k, o, r, c0);
}

static void ll_renew(worker *k, const ll_lease *l, int m)
{
    const kv_fn_workload_cfg *cfg = &k->w->cfg;
    kvc_keepalive_result kr = {0};
    int64_t c0 = kv_fn_now_us();
    int r = kvc_lease_keepalive_once(ll_client(k, m), l->id, cfg->op_timeout_ms, &kr, NULL);
    kv_fn_ll_op *o = ll_rec(k, l, KV_FN_LL_RENEW, m);
    o->ttl = kr.ttl;
    ll_done(k, o, r, c0);
}

/* 0 revoked (or answered not found: recorded), else failed. */
static int ll_revoke(worker *k, const ll_lease *l, int m, int after_fault)
{
    const kv_fn_workload_cfg *cfg = &k->w->cfg;
    kvc_error err = {0};
    int64_t c0 = kv_fn_now_us();
    int r = kvc_lease_revoke(ll_client(k, m), l->id, cfg->op_timeout_ms, NULL, &err);
    kv_fn_ll_op *o = ll_rec(k, l, KV_FN_LL_REVOKE, m);
    o->restarted = after_fault;
    if (r != 0 && strstr(err.message, "requested lease not found") != NULL) {
        o->not_found = 1;
        r = 0;
    }
    return ll_done(k, o, r, c0);
}

static void *ll_main(void *arg)
{
    worker *k = arg;
    const kv_fn_workload_cfg *cfg = &k->w->cfg;
    /* One lease per member granted now (before the fault, through the balanced client),
     * revoked through that member when the stressers stop (after the fault). */
    ll_lease early[KV_FN_MAX_MEMBERS];
    int have_early[KV_FN_MAX_MEMBERS] = {0};
    for (int m = 0; m < k->n_pin; m++)
        have_early[m] = ll_grant(k, &early[m], -1) == 0;
    while (!atomic_load(&k->w->stop)) {
        int mode = (int)(rnd(k) % 3); /* balanced, same member, other member */
        int m = (int)(rnd(k) % (uint64_t)k->n_pin);
        int wm = mode == 0 ? -1 : m;
        int rm = mode == 0 ? -1 : mode == 1 ? m : (m + 1) % k->n_pin;
        ll_lease l;
        if (ll_grant(k, &l, wm) != 0)
            continue;
        ll_put(k, &l, wm, 0, 1);
        ll_ttl(k, &l, rm);
        ll_renew(k, &l, rm);
        ll_put(k, &l, wm, 1, 1);
        ll_ttl(k, &l, rm);
        if (rnd(k) % 2)
            ll_delete(k, &l, wm, 0);
        else
            ll_put(k, &l, wm, 0, 0);
        ll_ttl(k, &l, rm);
        for (int i = 0; i < 3 && ll_revoke(k, &l, rm, 0) != 0; i++)
            ;
        ll_renew(k, &l, rm);
        ll_ttl(k, &l, rm);
        (void)cfg;
    }
    for (int m = 0; m < k->n_pin; m++)
        if (have_early[m])
            for (int i = 0; i < 5 && ll_revoke(k, &early[m], m, 1) != 0; i++)
                ;
    return NULL;
}

int kv_fn_workload_start(kv_fn_workload **out, const kv_fn_workload_cfg *cfg)
{
    kv_fn_workload *w = calloc(1, sizeof(*w));
    if (!w)
        return -ENOMEM;
    w->cfg = *cfg;
    w->ops.sz = sizeof(kv_fn_op);
    w->leases.sz = sizeof(kv_fn_lease_info);
    w->lev.sz = sizeof(kv_fn_lease_ev);
    w->ll.sz = sizeof(kv_fn_ll_op);
    int n = cfg->kv_clients + cfg->lease_clients + cfg->lease_lin_clients;
    w->workers = calloc((size_t)n, sizeof(worker));
    if (!w->workers) {
        free(w);
        return -ENOMEM;
    }
    const kv_fn_cluster *c = cfg->cluster;
    int r = 0;
    if (cfg->kv_clients > 0 && c->watch) { /* watchers first: they start before any put */
        char wp[160];
        snprintf(wp, sizeof(wp), "%s/reg/", cfg->prefix);
        c->watch->checked = 0;
        if (kv_fn_watchers_start(&w->watch, c, wp, 2, cfg->seed) != 0) {
            w->watch = NULL;
            c->watch->checked = 1;
            c->watch->verdict = KV_FN_UNKNOWN;
            snprintf(c->watch->report, sizeof(c->watch->report), "cannot start the watchers");
        }
    }
    for (int i = 0; i < n; i++) {
        worker *k = &w->workers[i];
        k->w = w;
        k->id = i;
        k->is_lease = i >= cfg->kv_clients && i < cfg->kv_clients + cfg->lease_clients;
        k->is_ll = i >= cfg->kv_clients + cfg->lease_clients;
        k->ll.sz = sizeof(kv_fn_ll_op);
        k->rng = cfg->seed * 1000003ULL + (uint64_t)i * 7919 + 1;
        k->ops.sz = sizeof(kv_fn_op);
        k->leases.sz = sizeof(kv_fn_lease_info);
        k->lev.sz = sizeof(kv_fn_lease_ev);
        const char *eps[KV_FN_MAX_MEMBERS];
        int n_eps = kv_fn_client_endpoints(c, i, eps); /* the proxies under --proxies */
        kvc_config kcfg;
        kvc_config_default(&kcfg);
        kcfg.endpoints = eps;
        kcfg.n_endpoints = (size_t)n_eps;
        kcfg.dial_timeout_ms = cfg->op_timeout_ms;
        kcfg.seed = k->rng;
        r = kvc_open(&k->kc, &kcfg, NULL);
        if (r)
            break;
        w->n_workers = i + 1;
        for (int m = 0; k->is_ll && m < c->n && r == 0; m++) {
            const char *one[1] = {c->m[m].endpoint};
            kcfg.endpoints = one;
            kcfg.n_endpoints = 1;
            r = kvc_open(&k->pin[m], &kcfg, NULL);
            if (r == 0)
                k->n_pin = m + 1;
        }
        if (r)
            break;
        void *(*fn)(void *) = k->is_ll ? ll_main : k->is_lease ? lease_main : kv_main;
        if (pthread_create(&k->th, NULL, fn, k) != 0) {
            kvc_close(k->kc);
            k->kc = NULL;
            w->n_workers = i;
            r = -EAGAIN;
            break;
        }
    }
    if (r) {
        kv_fn_workload_stop(w);
        kv_fn_workload_free(w);
        return r;
    }
    *out = w;
    return 0;
}

void kv_fn_workload_stop(kv_fn_workload *w)
{
    atomic_store(&w->stop, 1);
    for (int i = 0; i < w->n_workers; i++) {
        worker *k = &w->workers[i];
        if (!k->kc)
            continue;
        pthread_join(k->th, NULL);
        kvc_close(k->kc);
        k->kc = NULL;
        for (int m = 0; m < k->n_pin; m++) {
            kvc_close(k->pin[m]);
            k->pin[m] = NULL;
        }
        int lbase = 0;
        for (int j = 0; j < i; j++)
            lbase += w->workers[j].n_ll_leases;
        for (size_t j = 0; j < k->ll.n; j++) {
            kv_fn_ll_op o = ((kv_fn_ll_op *)k->ll.a)[j];
            o.lease += lbase;
            vec_push(&w->ll, &o);
        }
        for (size_t j = 0; j < k->ops.n; j++)
            vec_push(&w->ops, (kv_fn_op *)k->ops.a + j);
        int base = (int)w->leases.n;
        for (size_t j = 0; j < k->leases.n; j++)
            vec_push(&w->leases, (kv_fn_lease_info *)k->leases.a + j);
        for (size_t j = 0; j < k->lev.n; j++) {
            kv_fn_lease_ev e = ((kv_fn_lease_ev *)k->lev.a)[j];
            e.lease += base;
            vec_push(&w->lev, &e);
        }
    }
    if (w->watch) { /* fence, drain, check (watch.c); the fence ops join the history */
        kv_fn_op fence[3 * KV_FN_MAX_MEMBERS];
        memset(fence, 0, sizeof(fence));
        size_t n_fence = 0;
        int64_t final_rev = 0;
        int r = kv_fn_watchers_stop(w->watch, w->cfg.keys, 10000, fence, &n_fence, &final_rev);
        for (size_t j = 0; j < n_fence; j++)
            vec_push(&w->ops, &fence[j]);
        const char *name = strrchr(w->cfg.prefix, '/');
        kv_fn_watch_finish(w->watch, w->cfg.cluster->watch, name ? name + 1 : w->cfg.prefix,
                           w->ops.a, w->ops.n, final_rev, r);
        kv_fn_watchers_free(w->watch);
        w->watch = NULL;
    }
}

void kv_fn_workload_history(kv_fn_workload *w, const kv_fn_op **ops, size_t *n_ops,
                            const kv_fn_lease_info **leases, size_t *n_leases,
                            const kv_fn_lease_ev **lev, size_t *n_lev)
{
    *ops = w->ops.a;
    *n_ops = w->ops.n;
    *leases = w->leases.a;
    *n_leases = w->leases.n;
    *lev = w->lev.a;
    *n_lev = w->lev.n;
}

void kv_fn_workload_lease_lin(kv_fn_workload *w, struct kv_fn_ll_op **ops, size_t *n)
{
    *ops = w->ll.a;
    *n = w->ll.n;
}

void kv_fn_workload_counts(kv_fn_workload *w, uint64_t *ok, uint64_t *failed)
{
    *ok = atomic_load(&w->n_ok);
    *failed = atomic_load(&w->n_failed);
}

void kv_fn_workload_free(kv_fn_workload *w)
{
    if (!w)
        return;
    for (int i = 0; i < w->n_workers; i++) {
        free(w->workers[i].ops.a);
        free(w->workers[i].leases.a);
        free(w->workers[i].lev.a);
        free(w->workers[i].ll.a);
        for (int m = 0; m < w->workers[i].n_pin; m++)
            kvc_close(w->workers[i].pin[m]);
    }
    kv_fn_watchers_free(w->watch);
    free(w->workers);
    free(w->ops.a);
    free(w->leases.a);
    free(w->lev.a);
    free(w->ll.a);
    free(w);
}
