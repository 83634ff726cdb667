/*
 * proxy_services: the services beyond KV, Lease, Watch, Cluster and Maintenance through
 * `kvd grpc-proxy start` in front of a 1-member kvd cluster, with unchanged clients:
 *   - Auth (etcdctl 3.4): users, roles and auth enable through the proxy; then each client's
 *     own token goes up with its calls (kv_proxy_call_md): root writes, a read-only user reads
 *     and is denied a write with etcd's text, a call without a user gets "user name is
 *     empty" (also for a serializable read that an authorized client made before), and a lease of
 * an authenticated user is kept alive through the folded stream;
 *   - v3lock and v3election: `etcdctl lock` and `etcdctl elect`;
 *   - Go clientv3: tests/go/concurrency_test (clientv3/concurrency Mutex, Election, STM, and
 *     the v3election / v3lock stubs including the server-streaming Election.Observe) run
 *     against the proxy's endpoint.
 */
#include "px_util.h"

#include "kvt_skip.h"

#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static kvt_cluster g_c;
static px g_x;

static void fini(void)
{
    px_stop(&g_x);
    kvt_cluster_destroy(&g_c);
}

static void setup(void)
{
    cr_assert_eq(px_cluster_start(&g_c, 1), 0, "cluster");
    cr_assert_eq(px_start(&g_x, &g_c, NULL, 0, NULL), 0, "proxy");
}

/* etcdctl through the proxy; *res is the caller's to free. */
#define CTL(res, ...) cr_assert_eq(px_ctl(&g_x, 20000, &(res), __VA_ARGS__, NULL), 0)

#define CTL_OK(...)                                                                                \
    do {                                                                                           \
        kvt_cmd_result r_;                                                                         \
        CTL(r_, __VA_ARGS__);                                                                      \
        cr_assert_eq(r_.exit_code, 0, "etcdctl failed: %s %s", r_.out, r_.err);                    \
        kvt_cmd_result_free(&r_);                                                                  \
    } while (0)

/* etcdctl fails and its stderr holds want */
#define CTL_FAILS(want, ...)                                                                       \
    do {                                                                                           \
        kvt_cmd_result r_;                                                                         \
        CTL(r_, __VA_ARGS__);                                                                      \
        cr_assert_neq(r_.exit_code, 0, "etcdctl succeeded: %s", r_.out);                           \
        cr_assert(strstr(r_.err, want), "want \"%s\", got: %s", want, r_.err);                     \
        kvt_cmd_result_free(&r_);                                                                  \
    } while (0)

Test(proxy_services, auth_through_the_proxy, .init = setup, .fini = fini, .timeout = 180)
{
    CTL_OK("user", "add", "root:rootpw");
    CTL_OK("user", "grant-role", "root", "root");
    CTL_OK("user", "add", "ro:ropw");
    CTL_OK("role", "add", "ro");
    CTL_OK("role", "grant-permission", "ro", "read", "k");
    CTL_OK("user", "grant-role", "ro", "ro");
    CTL_OK("auth", "enable");

    CTL_OK("--user=root:rootpw", "put", "k", "v1");
    kvt_cmd_result r;
    CTL(r, "--user=ro:ropw", "get", "k", "--print-value-only");
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    cr_assert_str_eq(r.out, "v1\n");
    kvt_cmd_result_free(&r);
    CTL_FAILS("etcdserver: permission denied", "--user=ro:ropw", "put", "k", "v2");
    CTL_FAILS("etcdserver: user name is empty", "put", "k", "v3");
    /* the range cache knows no permissions: root's serializable reads must not let the same
     * request without a user through (ranges with a token bypass the cache; with auth on,
     * the cache's own watch, which has no token, is refused anyway and the cache is off) */
    for (int i = 0; i < 2; i++) {
        CTL(r, "--user=root:rootpw", "get", "k", "--consistency=s", "--print-value-only");
        cr_assert(r.exit_code == 0 && strcmp(r.out, "v1\n") == 0, "%s %s", r.out, r.err);
        kvt_cmd_result_free(&r);
    }
    CTL_FAILS("etcdserver: user name is empty", "get", "k", "--consistency=s");
    CTL_FAILS("etcdserver: authentication failed, invalid user ID or password", "--user=ro:bad",
              "get", "k");
    CTL(r, "--user=root:rootpw", "user", "list");
    cr_assert(r.exit_code == 0 && strstr(r.out, "ro") && strstr(r.out, "root"), "%s %s", r.out,
              r.err);
    kvt_cmd_result_free(&r);

    /* a lease under auth: granted with root's token, kept alive through the folded stream */
    CTL(r, "--user=root:rootpw", "lease", "grant", "60");
    char id[32] = "";
    cr_assert(r.exit_code == 0 && sscanf(r.out, "lease %31s granted", id) == 1, "%s %s", r.out,
              r.err);
    kvt_cmd_result_free(&r);
    CTL(r, "--user=root:rootpw", "lease", "keep-alive", "--once", id);
    cr_assert(r.exit_code == 0 && strstr(r.out, "keepalived with TTL(60)"), "%s %s", r.out, r.err);
    kvt_cmd_result_free(&r);
    /* root's value is what the member holds (the denied writes were not applied) */
    CTL(r, "--user=root:rootpw", "get", "k", "--print-value-only");
    cr_assert_str_eq(r.out, "v1\n");
    kvt_cmd_result_free(&r);
    CTL_OK("--user=root:rootpw", "auth", "disable");
    CTL_OK("put", "k", "v4");
}

Test(proxy_services, lock_and_elect, .init = setup, .fini = fini, .timeout = 120)
{
    kvt_cmd_result r;
    /* v3lock Lock and Unlock (unary, forwarded with the client's deadline) */
    CTL(r, "lock", "l1", "/bin/echo", "held");
    cr_assert(r.exit_code == 0 && strstr(r.out, "held"), "%s %s", r.out, r.err);
    kvt_cmd_result_free(&r);
    /* v3election Campaign: `elect` wins, prints its key and proposal, then waits until it is
     * killed (at kvt_run's timeout); its session's lease keeps the key */
    cr_assert_eq(px_ctl(&g_x, 4000, &r, "elect", "e1", "p1", NULL), 0);
    cr_assert(strstr(r.out, "e1/") && strstr(r.out, "\np1\n"), "campaign: %s %s", r.out, r.err);
    kvt_cmd_result_free(&r);
    /* Election.Observe (server streaming, proxy_stream.c): the listener is told the leader */
    cr_assert_eq(px_ctl(&g_x, 4000, &r, "elect", "-l", "e1", NULL), 0);
    cr_assert(r.timed_out, "observe ended: %s %s", r.out, r.err);
    cr_assert(strstr(r.out, "e1/") && strstr(r.out, "\np1\n"), "observe: %s %s", r.out, r.err);
    kvt_cmd_result_free(&r);
    /* Election.Leader (unary) */
    cr_assert(px_metric(&g_x, "kvd_proxy_observe_streams") == 0, "the observe relay was freed");
}

#define GOPATH "/usr/share/gocode"

Test(proxy_services, go_clientv3_concurrency_through_the_proxy, .init = setup, .fini = fini,
     .timeout = 600)
{
    if (access("/usr/bin/go", X_OK) != 0)
        KVT_SKIP_MISSING("go is not installed (apt-get install golang-go)");
    if (access(GOPATH "/src/go.etcd.io/etcd/clientv3/concurrency/mutex.go", R_OK) != 0)
        KVT_SKIP_MISSING("golang-etcd-server-dev is not installed");
    const char *bdir = getenv("KV_BUILD_DIR"), *sdir = getenv("KV_SOURCE_DIR");
    cr_assert(bdir && sdir, "KV_BUILD_DIR and KV_SOURCE_DIR must be set");
    char out[1024], env_cache[1100], pkg[1024];
    snprintf(out, sizeof out, "%s/tests/proxy/concurrency_test", bdir);
    /* the Go build cache of tests/go (go_concurrency_test): built once for both */
    snprintf(env_cache, sizeof env_cache, "GOCACHE=%s/tests/go/gocache", bdir);
    snprintf(pkg, sizeof pkg, "%s/tests/go/concurrency_test/main.go", sdir);
    const char *env[] = {"GO111MODULE=off", "GOPATH=" GOPATH, env_cache, "GOFLAGS=",
                         "GOPROXY=off",     "CGO_ENABLED=0",  NULL};
    const char *build[] = {"/usr/bin/go", "build", "-o", out, pkg, NULL};
    kvt_cmd_result r;
    cr_assert_eq(kvt_run(build, env, NULL, 0, 480000, &r), 0, "spawn go build");
    cr_assert(r.exit_code == 0 && !r.timed_out, "go build failed (%d):\n%s\n%s", r.exit_code, r.out,
              r.err);
    kvt_cmd_result_free(&r);
    const char *run[] = {out, g_x.endpoint, NULL};
    cr_assert_eq(kvt_run(run, NULL, NULL, 0, 180000, &r), 0, "spawn concurrency_test");
    cr_expect(r.exit_code == 0 && !r.timed_out && strstr(r.out, "PASS\n"),
              "Go clientv3/concurrency through the proxy failed (exit %d%s):\n%s%s", r.exit_code,
              r.timed_out ? ", timed out" : "", r.out, r.err);
    kvt_cmd_result_free(&r);
}
