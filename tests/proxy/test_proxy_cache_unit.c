/*
 * proxy_cache_unit: the grpc-proxy's range cache module alone (server/proxy/proxy_cache.h):
 * hits and misses, the LRU under both bounds, point / range / unbounded invalidation, pinned
 * revisions, compaction, the check that keeps raced answers out, clear; and the two flags (and
 * how kv_proxy_config_parse reads the duration flags).
 */
#include "proxy/proxy_cache.h"
#include "proxy/proxy_config.h"

#include <criterion/criterion.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define S(x) (const uint8_t *)(x), strlen(x)

static kv_proxy_cache *c;

static void fini(void)
{
    kv_proxy_cache_free(c);
    c = NULL;
}

/* Add the range [key, end) answered by resp, keyed by "req:<key>:<end>:<rev>"; end "INF" is
 * the range_end "\0" (every key >= key). */
static int add(const char *key, const char *end, int64_t rev, const char *resp)
{
    char req[128];
    snprintf(req, sizeof req, "req:%s:%s:%lld", key, end, (long long)rev);
    int inf = strcmp(end, "INF") == 0;
    return kv_proxy_cache_add(c, kv_proxy_cache_seq(c), S(req), S(key),
                              (const uint8_t *)(inf ? "\0" : end), inf ? 1 : strlen(end), rev,
                              S(resp));
}

/* 1 if the request of add(key, end, rev) is a hit answering resp; 0 on a miss. */
static int has(const char *key, const char *end, int64_t rev, const char *resp)
{
    char req[128];
    snprintf(req, sizeof req, "req:%s:%s:%lld", key, end, (long long)rev);
    const uint8_t *r;
    size_t n;
    int rc = kv_proxy_cache_get(c, S(req), rev, &r, &n);
    if (rc != KV_PROXY_CACHE_HIT)
        return 0;
    cr_assert_eq(n, strlen(resp));
    cr_assert_eq(memcmp(r, resp, n), 0);
    return 1;
}

Test(proxy_cache_unit, hit_miss_replace, .fini = fini)
{
    cr_assert_eq(kv_proxy_cache_new(&c, 0, 100), -EINVAL);
    cr_assert_eq(kv_proxy_cache_new(&c, 8, 1 << 20), 0);
    cr_assert_eq(has("a", "", 0, "x"), 0);
    cr_assert_eq(add("a", "", 0, "A1"), 1);
    cr_assert(has("a", "", 0, "A1"));
    cr_assert_eq(add("a", "", 0, "A2"), 1);
    cr_assert(has("a", "", 0, "A2"));
    cr_assert_eq(kv_proxy_cache_entries(c), 1);
    cr_assert_gt(kv_proxy_cache_bytes(c), 0);
}

Test(proxy_cache_unit, lru_entries_bound, .fini = fini)
{
    cr_assert_eq(kv_proxy_cache_new(&c, 3, 1 << 20), 0);
    add("a", "", 0, "A");
    add("b", "", 0, "B");
    add("c", "", 0, "C");
    cr_assert(has("a", "", 0, "A")); /* a is now the most recent: b is the oldest */
    add("d", "", 0, "D");
    cr_assert_eq(kv_proxy_cache_entries(c), 3);
    cr_assert_not(has("b", "", 0, "B"));
    cr_assert(has("a", "", 0, "A"));
    cr_assert(has("c", "", 0, "C"));
    cr_assert(has("d", "", 0, "D"));
    for (int i = 0; i < 1000; i++) {
        char k[16];
        snprintf(k, sizeof k, "k%d", i);
        add(k, "", 0, "v");
        cr_assert_leq(kv_proxy_cache_entries(c), 3);
    }
}

Test(proxy_cache_unit, lru_bytes_bound, .fini = fini)
{
    char big[1000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    cr_assert_eq(kv_proxy_cache_new(&c, 1000, 5000), 0);
    for (int i = 0; i < 100; i++) {
        char k[16];
        snprintf(k, sizeof k, "k%d", i);
        cr_assert_eq(add(k, "", 0, big), 1);
        cr_assert_leq(kv_proxy_cache_bytes(c), 5000);
    }
    cr_assert_geq(kv_proxy_cache_entries(c), 3);
    cr_assert(has("k99", "", 0, big));
    cr_assert_not(has("k0", "", 0, big));
    char huge[6000];
    memset(huge, 'y', sizeof huge - 1);
    huge[sizeof huge - 1] = 0;
    cr_assert_eq(add("h", "", 0, huge), 0, "an entry larger than the bound is not stored");
    cr_assert(has("k99", "", 0, big), "and evicts nothing");
}

Test(proxy_cache_unit, point_and_range_invalidation, .fini = fini)
{
    cr_assert_eq(kv_proxy_cache_new(&c, 64, 1 << 20), 0);
    add("a", "", 0, "A");
    add("b", "", 0, "B");
    add("p/", "p0", 0, "P");      /* prefix p/ */
    add("m", "INF", 0, "FROM_M"); /* every key >= m (range_end "\0") */
    add("b", "", 5, "B@5");       /* pinned: never invalidated */
    cr_assert_eq(kv_proxy_cache_invalidate(c, S("b"), NULL, 0), 1);
    cr_assert_not(has("b", "", 0, "B"));
    cr_assert(has("b", "", 5, "B@5"));
    cr_assert(has("a", "", 0, "A"));
    /* a key inside the prefix (and after m) */
    cr_assert_eq(kv_proxy_cache_invalidate(c, S("p/x"), NULL, 0), 2);
    cr_assert_not(has("p/", "p0", 0, "P"));
    cr_assert_not(has("m", "INF", 0, "FROM_M"));
    cr_assert_eq(kv_proxy_cache_invalidate(c, S("l"), NULL, 0), 0, "l is before m");
    add("m", "INF", 0, "FROM_M");
    /* p0 is outside [p/, p0) but inside [m, inf) */
    add("p/", "p0", 0, "P");
    cr_assert_eq(kv_proxy_cache_invalidate(c, S("p0"), NULL, 0), 1);
    cr_assert(has("p/", "p0", 0, "P"));
    cr_assert_not(has("m", "INF", 0, "FROM_M"));
    /* a range invalidation [0, b) hits a and nothing at or after b */
    add("b", "", 0, "B");
    cr_assert_eq(kv_proxy_cache_invalidate(c, S("0"), S("b")), 1);
    cr_assert_not(has("a", "", 0, "A"));
    cr_assert(has("b", "", 0, "B"));
    /* an unbounded range from "\0" hits everything but pinned entries */
    add("m", "INF", 0, "FROM_M");
    kv_proxy_cache_invalidate(c, (const uint8_t *)"\0", 1, (const uint8_t *)"\0", 1);
    cr_assert_eq(kv_proxy_cache_entries(c), 1);
    cr_assert(has("b", "", 5, "B@5"));
}

/* add() with the sequence read before the "upstream call" */
static int add_at(uint64_t seq, const char *req, const char *key, const char *end, int64_t rev)
{
    return kv_proxy_cache_add(c, seq, S(req), S(key), (const uint8_t *)end, strlen(end), rev,
                              S("resp"));
}

Test(proxy_cache_unit, raced_answers_kept_out, .fini = fini)
{
    cr_assert_eq(kv_proxy_cache_new(&c, 64, 1 << 20), 0);
    /* an invalidation of another key while the range was up: stored */
    uint64_t s = kv_proxy_cache_seq(c);
    kv_proxy_cache_invalidate(c, S("unrelated"), NULL, 0);
    cr_assert_eq(add_at(s, "r1", "a", "", 0), 1);
    /* of the same key: not stored */
    s = kv_proxy_cache_seq(c);
    kv_proxy_cache_invalidate(c, S("a"), NULL, 0);
    cr_assert_eq(add_at(s, "r2", "a", "", 0), 0);
    /* of a key inside the range read: not stored; outside it: stored */
    s = kv_proxy_cache_seq(c);
    kv_proxy_cache_invalidate(c, S("p/x"), NULL, 0);
    cr_assert_eq(add_at(s, "r3", "p/", "p0", 0), 0);
    cr_assert_eq(add_at(s, "r4", "q/", "q0", 0), 1);
    /* a range invalidation meeting the key: not stored */
    s = kv_proxy_cache_seq(c);
    kv_proxy_cache_invalidate(c, S("a"), S("c"));
    cr_assert_eq(add_at(s, "r5", "b", "", 0), 0);
    cr_assert_eq(add_at(s, "r6", "c", "", 0), 1);
    /* a key longer than the remembered size counts as everything */
    char longk[100];
    memset(longk, 'z', sizeof longk - 1);
    longk[sizeof longk - 1] = 0;
    s = kv_proxy_cache_seq(c);
    kv_proxy_cache_invalidate(c, S(longk), NULL, 0);
    cr_assert_eq(add_at(s, "r7", "a", "", 0), 0);
    /* a clear: not stored; but a pinned answer is (it cannot change) */
    s = kv_proxy_cache_seq(c);
    kv_proxy_cache_clear(c);
    cr_assert_eq(kv_proxy_cache_entries(c), 0);
    cr_assert_eq(kv_proxy_cache_bytes(c), 0);
    cr_assert_eq(add_at(s, "r8", "a", "", 0), 0);
    cr_assert_eq(add_at(s, "r9", "a", "", 7), 1);
    /* more invalidations than remembered, none of them on the key: not stored (unknown) */
    s = kv_proxy_cache_seq(c);
    for (int i = 0; i < 300; i++)
        kv_proxy_cache_invalidate(c, S("other"), NULL, 0);
    cr_assert_eq(add_at(s, "r10", "a", "", 0), 0);
    s = kv_proxy_cache_seq(c);
    for (int i = 0; i < 200; i++)
        kv_proxy_cache_invalidate(c, S("other"), NULL, 0);
    cr_assert_eq(add_at(s, "r11", "a", "", 0), 1);
}

Test(proxy_cache_unit, compaction, .fini = fini)
{
    cr_assert_eq(kv_proxy_cache_new(&c, 8, 1 << 20), 0);
    add("a", "", 5, "A@5");
    add("a", "", 10, "A@10");
    add("a", "", 0, "A");
    kv_proxy_cache_compact(c, 8);
    kv_proxy_cache_compact(c, 7); /* never goes back */
    const uint8_t *r;
    size_t n;
    cr_assert_eq(kv_proxy_cache_get(c, S("req:a::5"), 5, &r, &n), KV_PROXY_CACHE_COMPACTED);
    cr_assert_eq(kv_proxy_cache_get(c, S("req:a::7"), 7, &r, &n), KV_PROXY_CACHE_COMPACTED);
    cr_assert_eq(kv_proxy_cache_entries(c), 2, "the compacted entry is dropped");
    cr_assert(has("a", "", 10, "A@10"));
    cr_assert(has("a", "", 0, "A"));
    cr_assert_eq(add("a", "", 6, "A@6"), 0, "below the compaction: not stored");
    cr_assert_eq(add("a", "", 8, "A@8"), 1);
}

Test(proxy_cache_unit, flags)
{
    kv_proxy_config cfg;
    char err[256];
    kv_proxy_config_default(&cfg);
    cr_assert_eq(cfg.max_cache_entries, 2048, "etcd's cache.DefaultMaxEntries");
    cr_assert_eq(cfg.max_cache_bytes, (size_t)64 << 20);
    char *a1[] = {"start", "--max-cache-entries=0", "--max-cache-bytes", "1000", NULL};
    cr_assert_eq(kv_proxy_config_parse(&cfg, 4, a1, err, sizeof err), 0, "%s", err);
    cr_assert_eq(cfg.max_cache_entries, 0);
    cr_assert_eq(cfg.max_cache_bytes, 1000);
    kv_proxy_config_default(&cfg);
    char *a2[] = {"start", "--max-cache-bytes=0", NULL};
    cr_assert_eq(kv_proxy_config_parse(&cfg, 2, a2, err, sizeof err), -EINVAL);
    char *a3[] = {"start", "--max-cache-entries=-1", NULL};
    cr_assert_eq(kv_proxy_config_parse(&cfg, 2, a3, err, sizeof err), -EINVAL);
}

/* The duration flags (kvd's own) take Go's durations (common/go_duration.h): compound forms and
 * every Go unit; a lone number is still seconds, "0" still turns the optional ones off (and so
 * does any zero: "0s"); 1 ms to 1 h. */
Test(proxy_cache_unit, duration_flags_take_go_durations)
{
    kv_proxy_config cfg;
    char err[256];
    kv_proxy_config_default(&cfg);
    char *a1[] = {"start",
                  "--dial-timeout=1m30s",
                  "--upstream-answer-timeout=1h",
                  "--upstream-keepalive-timeout=2s500ms",
                  "--renewal-batch-delay=250ms",
                  "--upstream-keepalive-time=0s",
                  "--upstream-probe-interval=1m0s",
                  NULL};
    cr_assert_eq(kv_proxy_config_parse(&cfg, 7, a1, err, sizeof err), 0, "%s", err);
    cr_assert_eq(cfg.dial_timeout_ms, 90000);
    cr_assert_eq(cfg.upstream_answer_timeout_ms, 3600000);
    cr_assert_eq(cfg.upstream_keepalive_timeout_ms, 2500);
    cr_assert_eq(cfg.renewal_batch_delay_ms, 250);
    cr_assert_eq(cfg.upstream_keepalive_time_ms, 0);
    cr_assert_eq(cfg.upstream_probe_interval_ms, 60000);
    /* as before: a lone number is seconds, "0" is off */
    kv_proxy_config_default(&cfg);
    char *a2[] = {"start", "--dial-timeout=1.5",          "--upstream-answer-timeout",
                  "5",     "--upstream-probe-interval=0", "--upstream-keepalive-time=2m",
                  NULL};
    cr_assert_eq(kv_proxy_config_parse(&cfg, 6, a2, err, sizeof err), 0, "%s", err);
    cr_assert_eq(cfg.dial_timeout_ms, 1500);
    cr_assert_eq(cfg.upstream_answer_timeout_ms, 5000);
    cr_assert_eq(cfg.upstream_probe_interval_ms, 0);
    cr_assert_eq(cfg.upstream_keepalive_time_ms, 120000);
    static const char *const bad[] = {"1m30", "1e3", "0", "0.5ms", "1h0m1s", "-1s", "5S", " 5s"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char flag[64], want[96];
        snprintf(flag, sizeof flag, "--dial-timeout=%s", bad[i]);
        char *a3[] = {"start", flag, NULL};
        kv_proxy_config_default(&cfg);
        cr_assert_eq(kv_proxy_config_parse(&cfg, 2, a3, err, sizeof err), -EINVAL, "%s taken",
                     flag);
        snprintf(want, sizeof want, "--dial-timeout: invalid value '%s'", bad[i]);
        cr_assert_str_eq(err, want);
    }
}
