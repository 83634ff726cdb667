/*
 * proxy_resolver: --resolver-prefix, --resolver-ttl and --advertise-client-url of
 * `kvd grpc-proxy start` (docs/proxy.md, "Registration"), seen with etcdctl 3.4:
 *   - two proxies with --resolver-prefix=/px register /px/<their URL> on a lease of
 *     --resolver-ttl (2 s), value etcd's naming.Update JSON with the host name;
 *   - `etcdctl member list` through either proxy lists both proxies (name, client URL);
 *   - SIGKILL of one: its key is still there at once, gone after the TTL; member list
 *     through the other then lists one; the survivor's key outlives several TTLs;
 *   - a lease revoked on the member: the proxy registers again on a new lease; a clean
 *     stop (SIGTERM) revokes it, so the key goes at once (kvd only);
 *   - the member stopped (SIGSTOP) for twice the TTL: registered again on a new lease;
 *   - --advertise-client-url alone: member list is the proxy itself;
 *   - etcd's flag checks and texts; --max-resolver-members (kvd only);
 *   - with --namespace, the record and MemberList's read are under <namespace><prefix>/.
 * KV_TEST_SERVER=etcd runs the same checks against `etcd grpc-proxy start` (px_start starts
 * the target's own proxy), which is how kvd's record and answers were compared to etcd's.
 */
#include "px_util.h"

#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static kvt_cluster g_c;
static px g_x[2];

static void fini(void)
{
    px_stop(&g_x[0]);
    px_stop(&g_x[1]);
    kvt_cluster_destroy(&g_c);
}

static void setup(void)
{
    memset(g_x, 0, sizeof g_x);
    cr_assert_eq(px_cluster_start(&g_c, 1), 0, "cluster");
}

/* Starts proxy i with --advertise-client-url=http://127.0.0.1:<its port> and the flags. */
static void start_proxy(int i, const char *const *flags)
{
    static char adv[2][64];
    const char *extra[12];
    int n = 0;
    cr_assert_eq(kvt_port_free(&g_x[i].port), 0);
    snprintf(adv[i], sizeof adv[i], "--advertise-client-url=http://127.0.0.1:%u", g_x[i].port);
    extra[n++] = adv[i];
    for (int k = 0; flags && flags[k] && n < 11; k++)
        extra[n++] = flags[k];
    extra[n] = NULL;
    cr_assert_eq(px_start_on(&g_x[i], &g_c, NULL, 0, extra), 0, "proxy %d (log %s)", i, g_x[i].log);
}

static void url_of(int i, char *b, size_t cap)
{
    snprintf(b, cap, "http://127.0.0.1:%u", g_x[i].port);
}

/* etcdctl on the member; fails the test unless it exits 0. Caller frees r. */
#define CTL_M(r, ...)                                                                              \
    do {                                                                                           \
        cr_assert_eq(kvt_ctl(&g_c, 0, 15000, &(r), __VA_ARGS__, NULL), 0);                         \
        cr_assert_eq((r).exit_code, 0, "etcdctl: %s %s", (r).out, (r).err);                        \
    } while (0)

static int count_lines(const char *s)
{
    int n = 0;
    for (const char *p = s; p && *p;) {
        const char *e = strchr(p, '\n');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        n += l > 0;
        p = e ? e + 1 : NULL;
    }
    return n;
}

/* Keys under /px/ on the member. */
static int px_keys(void)
{
    kvt_cmd_result r;
    CTL_M(r, "get", "/px/", "--prefix", "--keys-only");
    int n = count_lines(r.out);
    kvt_cmd_result_free(&r);
    return n;
}

/* The lease of key on the member (0: none), -1 if the key is absent. */
static long long key_lease(const char *key)
{
    kvt_cmd_result r;
    CTL_M(r, "get", key, "-w", "json");
    const char *l = strstr(r.out, "\"lease\":");
    long long id = strstr(r.out, "\"kvs\"") ? (l ? atoll(l + 8) : 0) : -1;
    kvt_cmd_result_free(&r);
    return id;
}

static int wait_keys(int n, uint32_t ms)
{
    uint64_t end = kvt_now_ms() + ms;
    do {
        if (px_keys() == n)
            return 0;
        kvt_sleep_ms(100);
    } while (kvt_now_ms() < end);
    return -1;
}

/* `etcdctl member list` through proxy i. */
static char *member_list(int i)
{
    kvt_cmd_result r;
    cr_assert_eq(px_ctl(&g_x[i], 15000, &r, "member", "list", NULL), 0);
    cr_assert_eq(r.exit_code, 0, "member list: %s %s", r.out, r.err);
    char *out = strdup(r.out);
    kvt_cmd_result_free(&r);
    return out;
}

static void host(char *b, size_t cap)
{
    cr_assert_eq(gethostname(b, cap - 1), 0);
    b[cap - 1] = 0;
}

static const char *const reg_flags[] = {"--resolver-prefix=/px", "--resolver-ttl=2", NULL};

Test(proxy_resolver, register_list_and_expire, .init = setup, .fini = fini, .timeout = 120)
{
    char h[256], u0[64], u1[64], key[96], want[512], line[512];
    host(h, sizeof h);
    start_proxy(0, reg_flags);
    start_proxy(1, reg_flags);
    url_of(0, u0, sizeof u0);
    url_of(1, u1, sizeof u1);
    cr_assert_eq(wait_keys(2, 10000), 0, "two registrations expected, have %d", px_keys());

    /* the record: etcd's naming.Update JSON, on a lease of --resolver-ttl */
    for (int i = 0; i < 2; i++) {
        const char *u = i ? u1 : u0;
        snprintf(key, sizeof key, "/px/%s", u);
        kvt_cmd_result r;
        CTL_M(r, "get", key, "--print-value-only");
        snprintf(want, sizeof want,
                 "{\"Op\":0,\"Addr\":\"%s\",\"Metadata\":\"{\\\"name\\\":\\\"%s\\\"}\"}\n", u, h);
        cr_assert_str_eq(r.out, want);
        kvt_cmd_result_free(&r);
        long long lease = key_lease(key);
        cr_assert_gt(lease, 0, "%s has no lease", key);
        char hex[32];
        snprintf(hex, sizeof hex, "%llx", lease);
        CTL_M(r, "lease", "timetolive", hex);
        snprintf(want, sizeof want, "lease %016llx granted with TTL(2s)", lease);
        cr_assert(strstr(r.out, want), "%s", r.out);
        kvt_cmd_result_free(&r);
    }

    /* member list through either proxy: both proxies */
    for (int i = 0; i < 2; i++) {
        char *out = member_list(i);
        cr_assert_eq(count_lines(out), 2, "%s", out);
        for (int k = 0; k < 2; k++) {
            snprintf(line, sizeof line, "0, started, %s, , %s, false", h, k ? u1 : u0);
            cr_assert(strstr(out, line), "want '%s' in:\n%s", line, out);
        }
        cr_assert(!strstr(out, g_c.m[0].endpoint), "a member listed:\n%s", out);
        free(out);
    }

    /* SIGKILL of proxy 1: its key stays until its lease expires (TTL 2 s) */
    uint64_t t0 = kvt_now_ms();
    px_stop(&g_x[1]);
    snprintf(key, sizeof key, "/px/%s", u1);
    cr_assert_gt(key_lease(key), 0, "the key went before its TTL");
    while (key_lease(key) != -1 && kvt_now_ms() - t0 < 10000)
        kvt_sleep_ms(100);
    uint64_t gone = kvt_now_ms() - t0;
    cr_assert_eq(key_lease(key), -1, "the key of the killed proxy is still there after %llu ms",
                 (unsigned long long)gone);
    cr_assert_geq(gone, 1000, "gone after %llu ms: sooner than the lease's TTL",
                  (unsigned long long)gone);
    /* the survivor lists itself alone (kvd reads the registry at each MemberList). etcd
     * 3.4.23's proxy keeps listing the dead one (etcd-io/etcd#17887, fixed for 3.4 by
     * #17896): its count is not checked. */
    char *out = member_list(0);
    if (kvt_target_from_env() == KV_TEST_SERVER_KVD)
        cr_assert_eq(count_lines(out), 1, "%s", out);
    snprintf(line, sizeof line, "0, started, %s, , %s, false", h, u0);
    cr_assert(strstr(out, line), "want '%s' in:\n%s", line, out);
    free(out);
    /* the survivor is kept alive: still registered after 3 more TTLs */
    kvt_sleep_ms(6000);
    snprintf(key, sizeof key, "/px/%s", u0);
    cr_assert_gt(key_lease(key), 0, "the live proxy's key expired");
}

Test(proxy_resolver, lost_lease_registers_again, .init = setup, .fini = fini, .timeout = 120)
{
    char u0[64], key[96], hex[32];
    static const char *const ttl9[] = {"--resolver-prefix=/px", "--resolver-ttl=9", NULL};
    start_proxy(0, ttl9);
    url_of(0, u0, sizeof u0);
    snprintf(key, sizeof key, "/px/%s", u0);
    cr_assert_eq(wait_keys(1, 10000), 0);
    long long l1 = key_lease(key);
    cr_assert_gt(l1, 0);
    snprintf(hex, sizeof hex, "%llx", l1);
    kvt_cmd_result r;
    CTL_M(r, "lease", "revoke", hex);
    kvt_cmd_result_free(&r);
    long long l2 = -1; /* the loss shows at the next renewal: within TTL/3 (3 s) */
    uint64_t end = kvt_now_ms() + 8000;
    while (kvt_now_ms() < end) {
        l2 = key_lease(key);
        if (l2 > 0 && l2 != l1)
            break;
        kvt_sleep_ms(100);
    }
    cr_assert(l2 > 0 && l2 != l1, "not registered again (lease %lld, was %lld)", l2, l1);
    if (kvt_target_from_env() != KV_TEST_SERVER_KVD)
        return; /* etcd's proxy exits on SIGTERM without closing its session */
    /* a clean stop revokes the lease: the key goes at once, not 6 to 9 s later */
    cr_assert_eq(kvt_proc_term(&g_x[0].proc, 5000), 0);
    cr_assert_eq(key_lease(key), -1, "still registered after a clean stop");
}

Test(proxy_resolver, advertise_alone_and_flags, .init = setup, .fini = fini, .timeout = 120)
{
    char h[256], u0[64], line[512];
    host(h, sizeof h);
    start_proxy(0, NULL);
    url_of(0, u0, sizeof u0);
    char *out = member_list(0);
    snprintf(line, sizeof line, "0, started, %s, , %s, false\n", h, u0);
    cr_assert_str_eq(out, line);
    free(out);
    cr_assert_eq(px_keys(), 0, "registered without --resolver-prefix");

    /* etcd's checks, etcd's texts */
    static const struct {
        const char *a, *b, *c, *want;
    } bad[] = {
        {"--resolver-prefix=/px", NULL, NULL, "invalid resolver-ttl 0"},
        {"--resolver-prefix=/px", "--resolver-ttl=-3", NULL, "invalid resolver-ttl -3"},
        {"--resolver-ttl=5", NULL, NULL, "invalid resolver-prefix \"\""},
        {"--resolver-prefix=/px", "--resolver-ttl=5",
         "--advertise-client-url=", "invalid advertise-client-url \"\""},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *argv[] = {g_c.bin,  "grpc-proxy", "start",  "--endpoints=127.0.0.1:1",
                              bad[i].a, bad[i].b,     bad[i].c, NULL};
        kvt_cmd_result r;
        cr_assert_eq(kvt_run(argv, NULL, NULL, 0, 10000, &r), 0);
        cr_assert_neq(r.exit_code, 0, "%s accepted", bad[i].a);
        cr_assert(strstr(r.err, bad[i].want), "want '%s' in: %s", bad[i].want, r.err);
        kvt_cmd_result_free(&r);
    }
}

Test(proxy_resolver, max_resolver_members, .init = setup, .fini = fini, .timeout = 120)
{
    if (kvt_target_from_env() != KV_TEST_SERVER_KVD)
        return; /* a kvd bound: etcd's proxy has no such flag */
    static const char *const one[] = {"--resolver-prefix=/px", "--resolver-ttl=2",
                                      "--max-resolver-members=1", NULL};
    start_proxy(0, one);
    start_proxy(1, one);
    cr_assert_eq(wait_keys(2, 10000), 0);
    kvt_cmd_result r;
    cr_assert_eq(px_ctl(&g_x[0], 15000, &r, "member", "list", NULL), 0);
    cr_assert_neq(r.exit_code, 0, "listed: %s", r.out);
    cr_assert(strstr(r.err, "etcdserver: too many requests"), "%s", r.err);
    kvt_cmd_result_free(&r);
    cr_assert_eq(px_metric(&g_x[0], "kvd_proxy_refused_total{reason=\"resolver_members\"}"), 1);
    /* one gone: listed again */
    px_stop(&g_x[1]);
    cr_assert_eq(wait_keys(1, 10000), 0);
    char *out = member_list(0);
    cr_assert_eq(count_lines(out), 1, "%s", out);
    free(out);
    cr_assert_eq(px_metric(&g_x[0], "kvd_proxy_resolver_members"), 1);
}

Test(proxy_resolver, cluster_away_registers_again, .init = setup, .fini = fini, .timeout = 120)
{
    char u0[64], key[96];
    start_proxy(0, reg_flags);
    url_of(0, u0, sizeof u0);
    snprintf(key, sizeof key, "/px/%s", u0);
    cr_assert_eq(wait_keys(1, 10000), 0);
    long long l1 = key_lease(key);
    cr_assert_gt(l1, 0);
    /* the member away for twice the TTL: the lease is lost, then registered again */
    cr_assert_eq(kvt_member_pause(&g_c, 0), 0);
    kvt_sleep_ms(4000);
    cr_assert_eq(kvt_member_resume(&g_c, 0), 0);
    long long l2 = -1;
    uint64_t end = kvt_now_ms() + 15000;
    while (kvt_now_ms() < end) {
        l2 = key_lease(key);
        if (l2 > 0 && l2 != l1)
            break;
        kvt_sleep_ms(200);
    }
    cr_assert(l2 > 0 && l2 != l1, "not registered again (lease %lld, was %lld)", l2, l1);
    /* and kept: still there two TTLs later */
    kvt_sleep_ms(4000);
    cr_assert_eq(key_lease(key), l2);
}

/* --namespace with --resolver-prefix: etcd 3.4's proxy registers through its namespaced
 * client, so the record is <namespace><prefix>/<url> on the members, and MemberList reads
 * the same place: a proxy of another namespace is not listed. */
Test(proxy_resolver, namespace_prefixes_the_registry, .init = setup, .fini = fini, .timeout = 120)
{
    char h[256], u0[64], u1[64], key[128], line[512];
    host(h, sizeof h);
    const char *const a[] = {"--namespace=nsA/", "--resolver-prefix=/px", "--resolver-ttl=2", NULL};
    const char *const b[] = {"--namespace=nsB/", "--resolver-prefix=/px", "--resolver-ttl=2", NULL};
    start_proxy(0, a);
    start_proxy(1, b);
    url_of(0, u0, sizeof u0);
    url_of(1, u1, sizeof u1);
    snprintf(key, sizeof key, "nsA//px/%s", u0);
    uint64_t end = kvt_now_ms() + 10000;
    while (key_lease(key) <= 0 && kvt_now_ms() < end)
        kvt_sleep_ms(100);
    cr_assert_gt(key_lease(key), 0, "no registration at %s", key);
    snprintf(key, sizeof key, "nsB//px/%s", u1);
    while (key_lease(key) <= 0 && kvt_now_ms() < end)
        kvt_sleep_ms(100);
    cr_assert_gt(key_lease(key), 0, "no registration at %s", key);
    cr_assert_eq(px_keys(), 0, "a registration without the namespace");
    for (int i = 0; i < 2; i++) {
        char *out = member_list(i);
        cr_assert_eq(count_lines(out), 1, "%s", out);
        snprintf(line, sizeof line, "0, started, %s, , %s, false", h, i ? u1 : u0);
        cr_assert(strstr(out, line), "want '%s' in:\n%s", line, out);
        free(out);
    }
}
