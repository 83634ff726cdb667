/* leaseload: many leases kept alive on shared keepalive streams (leaseload.h). */
#include "leaseload.h"

#include "kvclient.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LL_GRANT_THREADS_PER_CLIENT 2

typedef struct ll_client {
    kvc_client *kc;
    int64_t *ids;       /* granted lease ids */
    kvc_keepalive **ka; /* one handle per lease */
    int n;              /* leases wanted on this client */
    atomic_int granted; /* next slot to grant (shared by the grant threads) */
    atomic_int failed;  /* a grant failed: stop */
} ll_client;

struct kv_fn_leaseload {
    ll_client *cl;
    int n_cl;
    int64_t ttl_s;
    uint32_t timeout_ms;
    atomic_uint_fast64_t lost, responses;
    atomic_uint_fast64_t lost_deadline; /* of lost: no renewal answered within the TTL */
    atomic_int_fast64_t first_lost;
    double grant_s;
};

static void ka_cb(void *arg, const kvc_ka_event *ev)
{
    kv_fn_leaseload *l = arg;
    if (ev->type == KVC_KA_RESPONSE) {
        atomic_fetch_add(&l->responses, 1);
    } else if (ev->type == KVC_KA_LOST) {
        atomic_fetch_add(&l->lost, 1);
        /* kvclient.h: a loss by deadline carries no response header; a server's TTL 0 does */
        if (ev->header.revision == 0 && ev->header.member_id == 0)
            atomic_fetch_add(&l->lost_deadline, 1);
        int_fast64_t zero = 0;
        atomic_compare_exchange_strong(&l->first_lost, &zero, ev->id);
    }
}

typedef struct grant_arg {
    kv_fn_leaseload *l;
    ll_client *c;
} grant_arg;

static void *grant_main(void *arg)
{
    grant_arg *a = arg;
    for (;;) {
        int i = atomic_fetch_add(&a->c->granted, 1);
        if (i >= a->c->n || atomic_load(&a->c->failed))
            break;
        kvc_lease_grant_result g = {0};
        int r = -EIO;
        for (int attempt = 0; attempt < 5 && r; attempt++)
            r = kvc_lease_grant(a->c->kc, a->l->ttl_s, 0, 0, a->l->timeout_ms, &g, NULL);
        if (r || g.ttl <= 0) {
            atomic_store(&a->c->failed, 1);
            break;
        }
        a->c->ids[i] = g.id;
    }
    return NULL;
}

int kv_fn_leaseload_start(kv_fn_leaseload **out, const kv_fn_cluster *c, int n, int64_t ttl_s,
                          int per_client, uint32_t timeout_ms, char *err, size_t errlen)
{
    *out = NULL;
    if (n <= 0 || per_client <= 0)
        return -EINVAL;
    kv_fn_leaseload *l = calloc(1, sizeof(*l));
    if (!l)
        return -ENOMEM;
    l->ttl_s = ttl_s;
    l->timeout_ms = timeout_ms;
    l->n_cl = (n + per_client - 1) / per_client;
    l->cl = calloc((size_t)l->n_cl, sizeof(*l->cl));
    int r = l->cl ? 0 : -ENOMEM;
    int64_t t0 = kv_fn_now_us();
    for (int i = 0; i < l->n_cl && !r; i++) {
        ll_client *k = &l->cl[i];
        k->n = i == l->n_cl - 1 ? n - per_client * i : per_client;
        k->ids = calloc((size_t)k->n, sizeof(*k->ids));
        k->ka = calloc((size_t)k->n, sizeof(*k->ka));
        if (!k->ids || !k->ka) {
            r = -ENOMEM;
            break;
        }
        const char *eps[KV_FN_MAX_MEMBERS];
        int n_eps = kv_fn_client_endpoints(c, i, eps); /* the proxies under --proxies */
        kvc_config kcfg;
        kvc_config_default(&kcfg);
        kcfg.endpoints = eps;
        kcfg.n_endpoints = (size_t)n_eps;
        kcfg.dial_timeout_ms = 2000;
        kcfg.seed = (uint64_t)i * 7919 + 17;
        r = kvc_open(&k->kc, &kcfg, NULL);
        if (r)
            snprintf(err, errlen, "lease-load: kvc_open failed (%d)", r);
    }
    /* Grants: a few threads per client, all clients at once. */
    int nth = r ? 0 : l->n_cl * LL_GRANT_THREADS_PER_CLIENT;
    pthread_t *th = nth ? calloc((size_t)nth, sizeof(*th)) : NULL;
    grant_arg *ga = nth ? calloc((size_t)nth, sizeof(*ga)) : NULL;
    int started = 0;
    if (nth && (!th || !ga))
        r = -ENOMEM;
    for (int t = 0; t < nth && !r; t++) {
        ga[t] = (grant_arg){.l = l, .c = &l->cl[t / LL_GRANT_THREADS_PER_CLIENT]};
        if (pthread_create(&th[t], NULL, grant_main, &ga[t]) != 0) {
            r = -EAGAIN;
            break;
        }
        started++;
    }
    for (int t = 0; t < started; t++)
        pthread_join(th[t], NULL);
    free(th);
    free(ga);
    for (int i = 0; i < l->n_cl && !r; i++)
        if (atomic_load(&l->cl[i].failed)) {
            snprintf(err, errlen, "lease-load: a LeaseGrant failed 5 times");
            r = -EIO;
        }
    l->grant_s = (kv_fn_now_us() - t0) / 1e6;
    for (int i = 0; i < l->n_cl && !r; i++) {
        ll_client *k = &l->cl[i];
        for (int j = 0; j < k->n && !r; j++) {
            kvc_error e;
            memset(&e, 0, sizeof(e));
            r = kvc_lease_keepalive(k->kc, k->ids[j], ttl_s, ka_cb, l, &k->ka[j], &e);
            if (r)
                snprintf(err, errlen, "lease-load: keepalive of lease %lld: %s",
                         (long long)k->ids[j], e.message);
        }
    }
    if (r) {
        kv_fn_leaseload_free(l);
        return r;
    }
    *out = l;
    return 0;
}

void kv_fn_leaseload_counts(kv_fn_leaseload *l, uint64_t *kept, uint64_t *lost, uint64_t *responses,
                            int *clients, double *grant_s)
{
    uint64_t n = 0;
    for (int i = 0; i < l->n_cl; i++)
        n += (uint64_t)l->cl[i].n;
    *kept = n;
    *lost = atomic_load(&l->lost);
    *responses = atomic_load(&l->responses);
    *clients = l->n_cl;
    *grant_s = l->grant_s;
}

uint64_t kv_fn_leaseload_lost_by_deadline(kv_fn_leaseload *l)
{
    return atomic_load(&l->lost_deadline);
}

int64_t kv_fn_leaseload_first_lost(kv_fn_leaseload *l)
{
    return atomic_load(&l->first_lost);
}

void kv_fn_leaseload_free(kv_fn_leaseload *l)
{
    if (!l)
        return;
    for (int i = 0; i < l->n_cl; i++) {
        ll_client *k = &l->cl[i];
        if (k->kc)
            kvc_close(k->kc); /* stops and frees every keepalive handle of the client */
        free(k->ids);
        free(k->ka);
    }
    free(l->cl);
    free(l);
}
