/*
 * proxy_cache: the serializable range cache of `kvd grpc-proxy` (docs/proxy.md,
 * "Serializable range cache"), through a proxy in front of a 1-member kvd cluster:
 *   - a serializable get is a miss then a hit (kvd_proxy_cache_hits_total / _misses_total);
 *   - a put through the proxy invalidates it (the next get sees the new value); a Txn drops
 *     the keys of its compares and of both branches at once;
 *   - a put and a delete straight on the member invalidate it too, through the proxy's
 *     upstream watch, within a bounded wait (and the old value never comes back);
 *   - a prefix range is invalidated by a put of a key inside it, on the member;
 *   - linearizable gets are never answered from the cache;
 *   - Compact through the proxy: a get pinned below it answers "required revision has been
 *     compacted";
 *   - the bounds: kvd_proxy_cache_entries never above --max-cache-entries and
 *     kvd_proxy_cache_bytes never above --max-cache-bytes under a flood of distinct keys;
 *   - etcdctl --consistency=s get through the proxy, a hit the second time;
 *   - kill -9 and restart of the member: the cache is cleared, a new watch serves again;
 *   - SIGSTOP of the member: the watch's progress check drops the watch and clears the cache;
 *   - --max-cache-entries=0: no cache;
 *   - auth enabled on the member: a request with a token fills nothing and turns the cache
 *     off (a token-less get is refused by the member, not answered from the cache) until
 *     auth is off again.
 */
#include "px_util.h"

#include "kvclient.h"

#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static kvt_cluster g_c;
static px g_x;

static void fini(void)
{
    px_stop(&g_x);
    kvt_cluster_destroy(&g_c);
}

static void start(const char *const *extra)
{
    cr_assert_eq(px_cluster_start(&g_c, 1), 0, "cluster");
    cr_assert_eq(px_start(&g_x, &g_c, NULL, 0, extra), 0, "proxy");
    uint64_t end = kvt_now_ms() + 10000;
    while (px_metric(&g_x, "kvd_proxy_cache_watch_up") != 1 && kvt_now_ms() < end)
        kvt_sleep_ms(20);
    if (px_metric(&g_x, "kvd_proxy_cache_watch_up") != 1) { /* diagnosis: the proxy's log */
        FILE *f = fopen(g_x.log, "r");
        char line[512];
        while (f && fgets(line, sizeof line, f))
            fputs(line, stderr);
        if (f)
            fclose(f);
        cr_assert_fail("the cache's watch is not live");
    }
}

static void setup(void)
{
    start(NULL);
}

static double hits(void)
{
    return px_metric(&g_x, "kvd_proxy_cache_hits_total");
}

static double misses(void)
{
    return px_metric(&g_x, "kvd_proxy_cache_misses_total");
}

/* A put, and its event seen on the proxy's cache watch (3 s): an answer forwarded while the
 * event is on its way is (rightly) not stored, so a test that wants a hit waits for it. */
static void put(kvc_client *c, const char *k, const char *v)
{
    double ev = px_metric(&g_x, "kvd_proxy_cache_watch_events_total");
    kvc_error e;
    cr_assert_eq(kvc_put(c, k, strlen(k), v, strlen(v), NULL, 5000, NULL, &e), 0, "put: %s",
                 e.message);
    uint64_t end = kvt_now_ms() + 3000;
    while (px_metric(&g_x, "kvd_proxy_cache_watch_events_total") <= ev && kvt_now_ms() < end)
        kvt_sleep_ms(2);
    cr_assert_gt(px_metric(&g_x, "kvd_proxy_cache_watch_events_total"), ev,
                 "the put's event never reached the proxy's watch");
}

/* A put on the member, not waited for on the proxy. */
static void put_raw(kvc_client *c, const char *k, const char *v)
{
    kvc_error e;
    cr_assert_eq(kvc_put(c, k, strlen(k), v, strlen(v), NULL, 5000, NULL, &e), 0, "put: %s",
                 e.message);
}

/* The value of k (a serializable get unless lin), "" when absent; count of the range. */
static void get(kvc_client *c, const char *k, int lin, int prefix, char *out, size_t cap,
                int64_t *count)
{
    kvc_range_opts o = {.serializable = !lin, .prefix = prefix};
    kvc_range_result r;
    kvc_error e;
    cr_assert_eq(kvc_get(c, k, strlen(k), &o, 5000, &r, &e), 0, "get %s: %s", k, e.message);
    out[0] = 0;
    if (r.n_kvs)
        snprintf(out, cap, "%.*s", (int)r.kvs[0].value_len, (const char *)r.kvs[0].value);
    if (count)
        *count = r.count;
    kvc_range_result_free(&r);
}

/* Serializable gets through the proxy until k reads want (3 s). */
static void wait_value(kvc_client *c, const char *k, const char *want)
{
    char v[64];
    uint64_t end = kvt_now_ms() + 3000;
    do {
        get(c, k, 0, 0, v, sizeof v, NULL);
        if (strcmp(v, want) == 0)
            return;
        kvt_sleep_ms(5);
    } while (kvt_now_ms() < end);
    cr_assert_fail("%s still reads '%s' through the proxy, want '%s'", k, v, want);
}

Test(proxy_cache, hit_and_invalidations, .init = setup, .fini = fini, .timeout = 180)
{
    kvc_client *pc = px_client(g_x.endpoint);
    kvc_client *mc = px_client(g_c.m[0].endpoint);
    char v[64];
    put(pc, "k", "v1");
    double h0 = hits(), m0 = misses();
    get(pc, "k", 0, 0, v, sizeof v, NULL);
    cr_assert_str_eq(v, "v1");
    cr_assert_eq(misses(), m0 + 1, "first serializable get: a miss");
    cr_assert_eq(hits(), h0, "first serializable get: not a hit");
    get(pc, "k", 0, 0, v, sizeof v, NULL);
    cr_assert_str_eq(v, "v1");
    cr_assert_eq(hits(), h0 + 1, "second serializable get: a hit");
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_cache_entries"), 1);
    cr_assert(px_metric(&g_x, "kvd_proxy_cache_bytes") > 0);

    /* a put through the proxy: the very next get sees it */
    put(pc, "k", "v2");
    get(pc, "k", 0, 0, v, sizeof v, NULL);
    cr_assert_str_eq(v, "v2", "a put through the proxy invalidates");
    double h = hits();
    get(pc, "k", 0, 0, v, sizeof v, NULL);
    cr_assert_str_eq(v, "v2");
    cr_assert_eq(hits(), h + 1, "v2 is cached");

    /* linearizable gets are never hits */
    double h1 = hits();
    for (int i = 0; i < 5; i++) {
        get(pc, "k", 1, 0, v, sizeof v, NULL);
        cr_assert_str_eq(v, "v2");
    }
    cr_assert_eq(hits(), h1, "a linearizable get was answered from the cache");

    /* a put straight on the member: the watch invalidates; the old value never returns */
    double inv0 = px_metric(&g_x, "kvd_proxy_cache_invalidated_total");
    put_raw(mc, "k", "v3");
    wait_value(pc, "k", "v3");
    for (int i = 0; i < 20; i++) {
        get(pc, "k", 0, 0, v, sizeof v, NULL);
        cr_assert_str_eq(v, "v3", "the old value came back from the cache");
    }
    cr_assert(px_metric(&g_x, "kvd_proxy_cache_invalidated_total") > inv0);
    double h2 = hits();
    get(pc, "k", 0, 0, v, sizeof v, NULL);
    cr_assert_eq(hits(), h2 + 1, "cached again after the invalidation");

    /* a delete on the member */
    kvc_error e;
    cr_assert_eq(kvc_delete(mc, "k", 1, NULL, 5000, NULL, &e), 0);
    wait_value(pc, "k", "");

    /* a prefix range, invalidated by a key put inside it on the member */
    int64_t n;
    put(pc, "p/a", "1");
    get(pc, "p/", 0, 1, v, sizeof v, &n);
    cr_assert_eq(n, 1);
    double h3 = hits();
    get(pc, "p/", 0, 1, v, sizeof v, &n);
    cr_assert_eq(n, 1);
    cr_assert_eq(hits(), h3 + 1, "the prefix get is a hit");
    put_raw(mc, "p/b", "2");
    uint64_t end = kvt_now_ms() + 3000;
    do {
        get(pc, "p/", 0, 1, v, sizeof v, &n);
    } while (n != 2 && kvt_now_ms() < end && (kvt_sleep_ms(5), 1));
    cr_assert_eq(n, 2, "the prefix range was not invalidated by a put on the member");

    /* a figure, not a bound: 1,000 gets of one key, cached vs linearizable (forwarded) */
    uint64_t t0 = kvt_now_ms();
    double h4 = hits();
    for (int i = 0; i < 1000; i++)
        get(pc, "p/a", 0, 0, v, sizeof v, NULL);
    uint64_t t1 = kvt_now_ms();
    for (int i = 0; i < 1000; i++)
        get(pc, "p/a", 1, 0, v, sizeof v, NULL);
    uint64_t t2 = kvt_now_ms();
    cr_assert_geq(hits(), h4 + 999);
    fprintf(stderr,
            "proxy_cache: 1000 sequential gets: serializable (cache) %llu ms, "
            "linearizable (forwarded) %llu ms\n",
            (unsigned long long)(t1 - t0), (unsigned long long)(t2 - t1));

    kvc_close(pc);
    kvc_close(mc);
}

Test(proxy_cache, compact_through_the_proxy, .init = setup, .fini = fini, .timeout = 180)
{
    kvc_client *pc = px_client(g_x.endpoint);
    kvc_put_result pr;
    kvc_error e;
    cr_assert_eq(kvc_put(pc, "c", 1, "1", 1, NULL, 5000, &pr, &e), 0);
    int64_t r1 = pr.header.revision;
    kvc_put_result_free(&pr);
    put(pc, "c", "2");
    put(pc, "c", "3");
    kvc_range_opts o = {.serializable = 1, .revision = r1};
    kvc_range_result r;
    cr_assert_eq(kvc_get(pc, "c", 1, &o, 5000, &r, &e), 0);
    cr_assert_eq(r.n_kvs, 1);
    cr_assert_eq(r.kvs[0].value[0], '1');
    kvc_range_result_free(&r);
    cr_assert_eq(kvc_get(pc, "c", 1, &o, 5000, &r, &e), 0, "pinned read, cached");
    kvc_range_result_free(&r);
    cr_assert_eq(kvc_compact(pc, r1 + 2, 0, 0, 5000, NULL, &e), 0, "compact: %s", e.message);
    int rc = kvc_get(pc, "c", 1, &o, 5000, &r, &e);
    cr_assert_neq(rc, 0, "a read pinned below the compaction was answered");
    cr_assert(strstr(e.message, "compacted"), "%s", e.message);
    kvc_close(pc);
}

Test(proxy_cache, bounds_hold_under_a_flood, .fini = fini, .timeout = 240)
{
    static const char *const extra[] = {"--max-cache-entries=50", "--max-cache-bytes=30000", NULL};
    start(extra);
    kvc_client *pc = px_client(g_x.endpoint);
    char big[1001];
    memset(big, 'x', 1000);
    big[1000] = 0;
    char k[32], v[64];
    for (int i = 0; i < 40; i++) {
        snprintf(k, sizeof k, "big/%d", i);
        put(pc, k, big);
    }
    double max_e = 0, max_b = 0;
    /* 400 distinct small keys (absent: small answers), then 40 big ones */
    for (int i = 0; i < 440; i++) {
        if (i < 400)
            snprintf(k, sizeof k, "flood/%d", i);
        else
            snprintf(k, sizeof k, "big/%d", i - 400);
        get(pc, k, 0, 0, v, sizeof v, NULL);
        if (i % 20 == 19) {
            double ne = px_metric(&g_x, "kvd_proxy_cache_entries");
            double nb = px_metric(&g_x, "kvd_proxy_cache_bytes");
            max_e = ne > max_e ? ne : max_e;
            max_b = nb > max_b ? nb : max_b;
        }
    }
    cr_assert_leq(max_e, 50, "entries above --max-cache-entries: %.0f", max_e);
    cr_assert_leq(max_b, 30000, "bytes above --max-cache-bytes: %.0f", max_b);
    cr_assert_geq(max_e, 40, "the cache was never filled (%.0f): the bound is not exercised",
                  max_e);
    cr_assert_geq(max_b, 20000, "the byte bound was never approached (%.0f)", max_b);
    /* the most recent entries are the ones kept: the last big key is a hit */
    double h = hits();
    get(pc, "big/39", 0, 0, v, sizeof v, NULL);
    cr_assert_eq(hits(), h + 1, "the most recently used entry was evicted");
    h = hits();
    get(pc, "flood/0", 0, 0, v, sizeof v, NULL);
    cr_assert_eq(hits(), h, "the least recently used entry was kept");
    kvc_close(pc);
}

Test(proxy_cache, etcdctl_serializable_get, .init = setup, .fini = fini, .timeout = 180)
{
    kvt_cmd_result r;
    cr_assert_eq(px_ctl(&g_x, 15000, &r, "put", "ek", "ev", NULL), 0);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    kvt_cmd_result_free(&r);
    uint64_t end = kvt_now_ms() + 3000; /* its event on the cache's watch (see put()) */
    while (px_metric(&g_x, "kvd_proxy_cache_watch_events_total") < 1 && kvt_now_ms() < end)
        kvt_sleep_ms(2);
    double h = hits();
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(px_ctl(&g_x, 15000, &r, "get", "ek", "--consistency=s", NULL), 0);
        cr_assert_eq(r.exit_code, 0, "%s", r.err);
        cr_assert_str_eq(r.out, "ek\nev\n");
        kvt_cmd_result_free(&r);
    }
    cr_assert_eq(hits(), h + 1, "the second etcdctl --consistency=s get is a hit");
    cr_assert_eq(kvt_ctl(&g_c, 0, 15000, &r, "put", "ek", "ev2", NULL), 0);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    kvt_cmd_result_free(&r);
    end = kvt_now_ms() + 3000;
    int ok = 0;
    while (!ok && kvt_now_ms() < end) {
        cr_assert_eq(px_ctl(&g_x, 15000, &r, "get", "ek", "--consistency=s", NULL), 0);
        ok = strcmp(r.out, "ek\nev2\n") == 0;
        kvt_cmd_result_free(&r);
    }
    cr_assert(ok, "etcdctl still reads the old value through the proxy");
}

/* kill -9 of the member and a restart: the cache's watch ends, the cache is cleared and
 * serves nothing until a new watch is created; a write made on the member after its restart
 * is then seen through the proxy. */
Test(proxy_cache, watch_end_clears_the_cache, .init = setup, .fini = fini, .timeout = 180)
{
    kvc_client *pc = px_client(g_x.endpoint);
    char v[64];
    put(pc, "w", "1");
    get(pc, "w", 0, 0, v, sizeof v, NULL);
    cr_assert_gt(px_metric(&g_x, "kvd_proxy_cache_entries"), 0);
    double opened = px_metric(&g_x, "kvd_proxy_cache_watch_opened_total");
    cr_assert_eq(kvt_member_kill9(&g_c, 0), 0);
    uint64_t end = kvt_now_ms() + 5000;
    while (px_metric(&g_x, "kvd_proxy_cache_watch_up") != 0 && kvt_now_ms() < end)
        kvt_sleep_ms(10);
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_cache_watch_up"), 0, "the watch is still up");
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_cache_entries"), 0, "the cache was not cleared");
    cr_assert_eq(kvt_member_restart(&g_c, 0, 30000), 0);
    end = kvt_now_ms() + 15000;
    while (px_metric(&g_x, "kvd_proxy_cache_watch_up") != 1 && kvt_now_ms() < end)
        kvt_sleep_ms(20);
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_cache_watch_up"), 1, "no new watch");
    cr_assert_gt(px_metric(&g_x, "kvd_proxy_cache_watch_opened_total"), opened);
    kvc_client *mc = px_client(g_c.m[0].endpoint);
    get(pc, "w", 0, 0, v, sizeof v, NULL);
    cr_assert_str_eq(v, "1");
    put_raw(mc, "w", "2");
    wait_value(pc, "w", "2");
    kvc_close(mc);
    kvc_close(pc);
}

/* --max-cache-entries=0: no cache, no watch; serializable gets are forwarded. */
Test(proxy_cache, disabled, .fini = fini, .timeout = 120)
{
    static const char *const extra[] = {"--max-cache-entries=0", NULL};
    cr_assert_eq(px_cluster_start(&g_c, 1), 0, "cluster");
    cr_assert_eq(px_start(&g_x, &g_c, NULL, 0, extra), 0, "proxy");
    kvc_client *pc = px_client(g_x.endpoint);
    char v[64];
    put_raw(pc, "d", "1");
    double fwd = px_metric(&g_x, "kvd_proxy_unary_forwarded_total");
    get(pc, "d", 0, 0, v, sizeof v, NULL);
    get(pc, "d", 0, 0, v, sizeof v, NULL);
    cr_assert_str_eq(v, "1");
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_unary_forwarded_total"), fwd + 2);
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_cache_hits_total"), -1, "cache metrics exported");
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_cache_watch_opened_total"), -1);
    kvc_close(pc);
}

/* SIGSTOP of the member (connection open, nothing answered): within the progress check
 * (1 s + 3 s) the cache's watch is dropped and the cache cleared; after SIGCONT a new watch
 * serves again. */
Test(proxy_cache, hung_member_clears_the_cache, .init = setup, .fini = fini, .timeout = 180)
{
    kvc_client *pc = px_client(g_x.endpoint);
    char v[64];
    put(pc, "h", "1");
    get(pc, "h", 0, 0, v, sizeof v, NULL);
    get(pc, "h", 0, 0, v, sizeof v, NULL);
    cr_assert_gt(px_metric(&g_x, "kvd_proxy_cache_entries"), 0);
    kvt_sleep_ms(2500); /* idle: progress requests answered, the watch stays */
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_cache_watch_up"), 1, "an idle watch was dropped");
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_cache_watch_timeouts_total"), 0);
    uint64_t t0 = kvt_now_ms();
    cr_assert_eq(kvt_member_pause(&g_c, 0), 0);
    uint64_t end = t0 + 8000;
    while (px_metric(&g_x, "kvd_proxy_cache_watch_up") != 0 && kvt_now_ms() < end)
        kvt_sleep_ms(20);
    uint64_t took = kvt_now_ms() - t0;
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_cache_watch_up"), 0, "the watch of a hung member");
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_cache_entries"), 0, "the cache was not cleared");
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_cache_watch_timeouts_total"), 1);
    fprintf(stderr, "proxy_cache: hung member detected in %llu ms\n", (unsigned long long)took);
    cr_assert_eq(kvt_member_resume(&g_c, 0), 0);
    end = kvt_now_ms() + 15000;
    while (px_metric(&g_x, "kvd_proxy_cache_watch_up") != 1 && kvt_now_ms() < end)
        kvt_sleep_ms(20);
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_cache_watch_up"), 1, "no new watch after SIGCONT");
    get(pc, "h", 0, 0, v, sizeof v, NULL);
    cr_assert_str_eq(v, "1");
    kvc_close(pc);
}

/* A Txn through the proxy drops the entries of its compares and of both branches' writes at
 * once (t2 and t3 are not written, so the watch would not drop them). */
Test(proxy_cache, txn_through_the_proxy, .init = setup, .fini = fini, .timeout = 120)
{
    kvc_client *pc = px_client(g_x.endpoint);
    char v[64];
    put(pc, "t1", "a");
    put(pc, "t2", "b");
    put(pc, "t3", "c");
    put(pc, "u", "d");
    const char *keys[] = {"t1", "t2", "t3", "u"};
    for (int i = 0; i < 4; i++)
        get(pc, keys[i], 0, 0, v, sizeof v, NULL);
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_cache_entries"), 4);
    kvc_txn *t = kvc_txn_new();
    cr_assert_not_null(t);
    cr_assert_eq(kvc_txn_cmp_value(t, "t3", 2, KVC_CMP_EQUAL, "c", 1), 0);
    cr_assert_eq(kvc_txn_put(t, KVC_TXN_SUCCESS, "t1", 2, "A", 1, NULL), 0);
    cr_assert_eq(kvc_txn_delete(t, KVC_TXN_FAILURE, "t2", 2, NULL), 0);
    kvc_txn_result r;
    kvc_error e;
    cr_assert_eq(kvc_txn_commit(pc, t, 0, 5000, &r, &e), 0, "txn: %s", e.message);
    cr_assert(r.succeeded);
    kvc_txn_result_free(&r);
    kvc_txn_free(t);
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_cache_entries"), 1, "only u is left");
    get(pc, "t1", 0, 0, v, sizeof v, NULL);
    cr_assert_str_eq(v, "A");
    double h = hits();
    get(pc, "u", 0, 0, v, sizeof v, NULL);
    cr_assert_eq(hits(), h + 1, "u was dropped by a txn that does not touch it");
    kvc_close(pc);
}

/* etcd's txnToCache: a range inside a Txn through the proxy fills the cache (the branch
 * taken only); a range of a key the txn also writes or compares is not kept. */
Test(proxy_cache, txn_ranges_fill_the_cache, .init = setup, .fini = fini, .timeout = 120)
{
    kvc_client *pc = px_client(g_x.endpoint);
    char v[64];
    put(pc, "tr", "1");
    put(pc, "tg", "g");
    put(pc, "tw", "1");
    kvc_txn *t = kvc_txn_new();
    cr_assert_not_null(t);
    cr_assert_eq(kvc_txn_cmp_value(t, "tr", 2, KVC_CMP_EQUAL, "1", 1), 0);
    cr_assert_eq(kvc_txn_get(t, KVC_TXN_SUCCESS, "tr", 2, NULL), 0);
    cr_assert_eq(kvc_txn_get(t, KVC_TXN_SUCCESS, "tg", 2, NULL), 0);
    cr_assert_eq(kvc_txn_put(t, KVC_TXN_SUCCESS, "tw", 2, "2", 1, NULL), 0);
    cr_assert_eq(kvc_txn_get(t, KVC_TXN_SUCCESS, "tw", 2, NULL), 0);
    cr_assert_eq(kvc_txn_get(t, KVC_TXN_FAILURE, "tf", 2, NULL), 0);
    kvc_txn_result r;
    kvc_error e;
    cr_assert_eq(kvc_txn_commit(pc, t, 0, 5000, &r, &e), 0, "txn: %s", e.message);
    cr_assert(r.succeeded);
    kvc_header th = r.header;
    kvc_txn_result_free(&r);
    kvc_txn_free(t);
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_cache_entries"), 1, "tg only");
    double h = hits();
    kvc_range_opts o = {.serializable = 1};
    kvc_range_result rr;
    cr_assert_eq(kvc_get(pc, "tg", 2, &o, 5000, &rr, &e), 0, "%s", e.message);
    cr_assert_eq(hits(), h + 1, "the txn's range of tg was not cached");
    cr_assert_eq(rr.n_kvs, 1);
    cr_assert_eq(rr.kvs[0].value[0], 'g');
    /* the answer carries the txn's whole header, as a Range's would */
    cr_assert_eq(rr.header.cluster_id, th.cluster_id);
    cr_assert_eq(rr.header.member_id, th.member_id);
    cr_assert_eq(rr.header.raft_term, th.raft_term);
    cr_assert_eq(rr.header.revision, th.revision);
    cr_assert_neq(rr.header.cluster_id, 0);
    kvc_range_result_free(&rr);
    h = hits();
    get(pc, "tw", 0, 0, v, sizeof v, NULL);
    cr_assert_str_eq(v, "2");
    get(pc, "tr", 0, 0, v, sizeof v, NULL);
    get(pc, "tf", 0, 0, v, sizeof v, NULL);
    cr_assert_eq(hits(), h, "tw (written), tr (compared) or tf (other branch) was a hit");
    kvc_close(pc);
}

/* etcdctl through the proxy (argv after --endpoints; stdin may be NULL): its exit code, the
 * output and errors in out. */
static int ctl_in(const char *in, char *out, size_t cap, const char *const *args)
{
    const char *argv[16] = {"/usr/bin/etcdctl"};
    char ep[64];
    snprintf(ep, sizeof ep, "--endpoints=%s", g_x.endpoint);
    int n = 1;
    argv[n++] = ep;
    for (int i = 0; args[i] && n < 15; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    static const char *const env[] = {"ETCDCTL_API=3", NULL};
    kvt_cmd_result r;
    cr_assert_eq(kvt_run(argv, env, in, in ? strlen(in) : 0, 20000, &r), 0);
    int code = r.exit_code;
    snprintf(out, cap, "%s%s", r.out, r.err);
    kvt_cmd_result_free(&r);
    return code;
}

/* The cache knows no permissions. Auth enabled straight on the member, while the cache's
 * watch (created before, without a token) stays live: a Txn with root's token through the
 * proxy must not fill the cache with what it reads, and a token-less serializable get must be
 * refused by the member, not answered from the cache; the cache stays off while auth is on,
 * and serves again once it is off. */
Test(proxy_cache, a_token_turns_the_cache_off, .init = setup, .fini = fini, .timeout = 180)
{
    kvc_client *pc = px_client(g_x.endpoint);
    put(pc, "secret/x", "s3cret");
    kvt_cmd_result r;
    static const char *const on_member[][4] = {
        {"user", "add", "root:rootpw", NULL},
        {"user", "grant-role", "root", "root"},
        {"auth", "enable", NULL, NULL},
    };
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(kvt_ctl(&g_c, 0, 20000, &r, on_member[i][0], on_member[i][1], on_member[i][2],
                             on_member[i][3], NULL),
                     0);
        cr_assert_eq(r.exit_code, 0, "%s %s", r.out, r.err);
        kvt_cmd_result_free(&r);
    }
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_cache_watch_up"), 1, "the watch outlived auth enable");
    char out[4096];
    int rc = ctl_in("\nget secret/x\n\n\n", out, sizeof out,
                    (const char *const[]){"--user=root:rootpw", "txn", NULL});
    cr_assert(rc == 0 && strstr(out, "s3cret"), "root's txn: %d %s", rc, out);
    rc = ctl_in(NULL, out, sizeof out,
                (const char *const[]){"get", "secret/x", "--consistency=s", NULL});
    cr_assert(rc != 0 && strstr(out, "etcdserver: user name is empty"),
              "a token-less get was answered: %d %s", rc, out);
    cr_assert_geq(px_metric(&g_x, "kvd_proxy_cache_auth_off_total"), 1);
    kvt_sleep_ms(1500); /* the watch is opened again, and refused */
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_cache_watch_up"), 0, "the cache is on under auth");

    rc = ctl_in(NULL, out, sizeof out,
                (const char *const[]){"--user=root:rootpw", "auth", "disable", NULL});
    cr_assert_eq(rc, 0, "%s", out);
    uint64_t end = kvt_now_ms() + 10000;
    while (px_metric(&g_x, "kvd_proxy_cache_watch_up") != 1 && kvt_now_ms() < end)
        kvt_sleep_ms(50);
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_cache_watch_up"), 1, "the cache stayed off");
    char v[64];
    get(pc, "secret/x", 0, 0, v, sizeof v, NULL);
    double h = hits();
    get(pc, "secret/x", 0, 0, v, sizeof v, NULL);
    cr_assert_str_eq(v, "s3cret");
    cr_assert_eq(hits(), h + 1, "no hit once auth is off");
    kvc_close(pc);
}
