/* test_peer_dns.c - peer host names are resolved at each dial, off the loop thread
 * (server/peer/peer_dns.c). A fake getaddrinfo, defined here, interposes libc's for one test
 * name (peer.kvd-test): it answers the address the test sets, after an optional delay. Every
 * other name goes to the real resolver. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <netdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "fixture.h"

#define TEST_NAME "peer.kvd-test"

static pthread_mutex_t dns_mu = PTHREAD_MUTEX_INITIALIZER;
static char dns_ip[64] = "127.0.0.1";
static int dns_delay_ms;
static atomic_int dns_calls;

static void dns_set(const char *ip, int delay_ms)
{
    pthread_mutex_lock(&dns_mu);
    snprintf(dns_ip, sizeof(dns_ip), "%s", ip);
    dns_delay_ms = delay_ms;
    pthread_mutex_unlock(&dns_mu);
}

typedef int (*gai_fn)(const char *, const char *, const struct addrinfo *, struct addrinfo **);

int getaddrinfo(const char *node, const char *service, const struct addrinfo *hints,
                struct addrinfo **res)
{
    gai_fn real = (gai_fn)dlsym(RTLD_NEXT, "getaddrinfo");
    if (!real)
        return EAI_FAIL;
    if (node == NULL || strcmp(node, TEST_NAME) != 0)
        return real(node, service, hints, res);
    char ip[64];
    pthread_mutex_lock(&dns_mu);
    snprintf(ip, sizeof(ip), "%s", dns_ip);
    int delay = dns_delay_ms;
    pthread_mutex_unlock(&dns_mu);
    atomic_fetch_add(&dns_calls, 1);
    if (delay > 0)
        usleep((useconds_t)delay * 1000u);
    struct addrinfo h;
    memset(&h, 0, sizeof(h));
    h.ai_flags = AI_NUMERICHOST;
    h.ai_family = AF_UNSPEC;
    h.ai_socktype = SOCK_STREAM;
    return real(ip, service, &h, res);
}

typedef struct pair_arg {
    fx *f;
    int a, b;
} pair_arg;

static int both_up(void *arg)
{
    pair_arg *p = arg;
    return kv_peer_net_is_up(p->f->n[p->a].net, p->f->n[p->b].id) &&
           kv_peer_net_is_up(p->f->n[p->b].net, p->f->n[p->a].id);
}

static int down_seen(void *arg)
{
    pair_arg *p = arg;
    return !kv_peer_net_is_up(p->f->n[p->a].net, p->f->n[p->b].id);
}

static void add_by_name(fx *f, int i, int j)
{
    char url[96];
    snprintf(url, sizeof(url), "http://" TEST_NAME ":%d", f->n[j].port);
    cr_assert_eq(kv_peer_net_add_peer(f->n[i].net, f->n[j].id, url), 0);
}

static void add_by_ip(fx *f, int i, int j)
{
    char url[96];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", f->n[j].port);
    cr_assert_eq(kv_peer_net_add_peer(f->n[i].net, f->n[j].id, url), 0);
}

/* The peer's name moves from 127.0.0.1 to 127.0.0.2 (same port) while it restarts: the dialer
 * must resolve again and reconnect to the new address. Resolving once at start (the old code)
 * keeps dialing the old address forever. */
Test(peer_dns, peer_that_moved_is_redialed_at_its_new_address)
{
    fx f;
    fx_init(&f);
    dns_set("127.0.0.1", 0);
    for (int i = 0; i < 2; i++) {
        fx_config(&f, i, 0xc1);
        fx_start(&f, i);
    }
    add_by_name(&f, 0, 1); /* member 0 (id 1) dials member 1 (id 2) by name */
    add_by_ip(&f, 1, 0);
    pair_arg p = {&f, 0, 1};
    cr_assert(fx_run_until(&f, both_up, &p, 10000), "first connection by name");
    cr_assert_gt(atomic_load(&dns_calls), 0);

    fx_stop(&f, 1);
    cr_assert(fx_run_until(&f, down_seen, &p, 5000));
    fx_run_for(&f, 200); /* a few failed dials at the old address */
    dns_set("127.0.0.2", 0);
    f.n[1].listen_host = "127.0.0.2"; /* same port (fx keeps it), new address */
    fx_start(&f, 1);
    add_by_ip(&f, 1, 0);
    cr_assert(fx_run_until(&f, both_up, &p, 10000),
              "the dialer did not reconnect to the peer's new address");
    cr_assert_geq(fx_metric(&f, 0, "kvd_peer_resolves_total", f.n[1].id), 2);
    fx_fini(&f);
}

static uint64_t now_ms(void)
{
    return uv_hrtime() / 1000000u;
}

typedef struct ticker {
    uint64_t last, max_gap;
    int ticks;
} ticker;

static void on_tick(uv_timer_t *t)
{
    ticker *k = t->data;
    uint64_t now = now_ms();
    if (k->last && now - k->last > k->max_gap)
        k->max_gap = now - k->last;
    k->last = now;
    k->ticks++;
}

static void tick_closed(uv_handle_t *h)
{
    (void)h;
}

/* A resolver that takes 1.5 s: adding the peer returns at once and the loop keeps running
 * (a 10 ms timer never waits long) while the name is resolved; then the peers connect. */
Test(peer_dns, slow_resolver_never_blocks_the_loop)
{
    fx f;
    fx_init(&f);
    dns_set("127.0.0.1", 1500);
    for (int i = 0; i < 2; i++) {
        fx_config(&f, i, 0xc1);
        fx_start(&f, i);
    }
    ticker k = {0};
    uv_timer_t t;
    uv_timer_init(&f.loop, &t);
    t.data = &k;
    uv_timer_start(&t, on_tick, 10, 10);
    uint64_t t0 = now_ms();
    add_by_name(&f, 0, 1);
    uint64_t took = now_ms() - t0;
    add_by_ip(&f, 1, 0);
    pair_arg p = {&f, 0, 1};
    k.last = now_ms();
    cr_assert(fx_run_until(&f, both_up, &p, 15000), "peers did not connect");
    uint64_t up_after = now_ms() - t0;
    uv_timer_stop(&t);
    uv_close((uv_handle_t *)&t, tick_closed);
    cr_assert_lt(took, 500, "kv_peer_net_add_peer blocked %llu ms on the resolver",
                 (unsigned long long)took);
    cr_assert_geq(up_after, 1400, "connected before the resolver answered (%llu ms)",
                  (unsigned long long)up_after);
    /* generous margin for a loaded machine; a blocked loop would show a ~1500 ms gap */
    cr_assert_lt(k.max_gap, 1000, "the loop stalled %llu ms while resolving",
                 (unsigned long long)k.max_gap);
    cr_assert_gt(k.ticks, 20);
    fx_fini(&f);
}

/* An unresolvable name does not fail kv_peer_net_add_peer (it is retried at each dial) and is
 * counted; a removed peer whose resolution is in flight is detached safely (ASan: no use after
 * free; fx_fini asserts no handle leaks). */
Test(peer_dns, failed_and_cancelled_resolutions)
{
    fx f;
    fx_init(&f);
    dns_set("not-an-ip", 0); /* AI_NUMERICHOST fails: EAI_NONAME */
    for (int i = 0; i < 2; i++) {
        fx_config(&f, i, 0xc1);
        fx_start(&f, i);
    }
    add_by_name(&f, 0, 1);
    fx_run_for(&f, 300);
    cr_assert_geq(fx_metric(&f, 0, "kvd_peer_resolve_failures_total", f.n[1].id), 1);
    cr_assert_eq(kv_peer_net_is_up(f.n[0].net, f.n[1].id), 0);
    dns_set("127.0.0.1", 300);
    fx_run_for(&f, 300); /* a resolution is now likely in flight */
    cr_assert_eq(kv_peer_net_remove_peer(f.n[0].net, f.n[1].id), 0);
    fx_run_for(&f, 500);
    fx_fini(&f);
}
