/*
 * proxy_discovery: `kvd grpc-proxy start --discovery-srv DOMAIN` takes its upstream members
 * from DNS SRV records, as etcd's (server/common/dns_srv.h, proxy_config.c
 * kv_proxy_config_discover). A DNS responder (tests/lib/kvt_dns) serves the records on
 * 127.53.x.y:53, and the proxy runs in a private mount namespace whose /etc/resolv.conf names
 * it (`unshare --mount`: root only). --endpoints points nowhere, so a proxy that ignored the
 * records could not serve.
 */
#include "px_util.h"
#include "kvt_skip.h"

#include <criterion/criterion.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static kvt_cluster g_c;
static px g_x;
static kvt_proc g_dns;
static char g_rc[PATH_MAX];

static void fini(void)
{
    px_stop(&g_x);
    kvt_proc_kill9(&g_dns);
    kvt_cluster_destroy(&g_c);
}

/* The wrapper that runs the proxy with g_rc as its /etc/resolv.conf. */
static const char *g_wrap[] = {"/usr/bin/unshare",
                               "--mount",
                               "sh",
                               "-c",
                               "mount --bind \"$0\" /etc/resolv.conf && exec \"$@\"",
                               g_rc,
                               NULL};

/* A 1-member cluster and the responder: _etcd-client._tcp.kvt.test -> m1.kvt.test:<member>,
 * m1.kvt.test -> 127.0.0.1. */
static void setup(void)
{
    if (geteuid() != 0)
        KVT_SKIP_MISSING("needs root (a private mount namespace for /etc/resolv.conf)");
    if (access("/usr/bin/unshare", X_OK) != 0)
        KVT_SKIP_MISSING("unshare not installed (util-linux)");
    cr_assert_eq(px_cluster_start(&g_c, 1), 0, "cluster");
    uint16_t p = g_c.m[0].client_port;
    char addr[32], srv[128], srv_y[128], bin[PATH_MAX], log[PATH_MAX];
    snprintf(addr, sizeof addr, "127.53.%u.%u", (p >> 8) & 255, p & 255);
    snprintf(srv, sizeof srv, "_etcd-client._tcp.kvt.test=m1.kvt.test:%u", p);
    snprintf(srv_y, sizeof srv_y, "_etcd-client-ssl-y._tcp.kvt.test=m1.kvt.test:%u", p);
    snprintf(g_rc, sizeof g_rc, "%.4000s/resolv.conf", g_c.root.path);
    snprintf(log, sizeof log, "%.4000s/dns.log", g_c.root.path);
    const char *bd = getenv("KV_BUILD_DIR");
    cr_assert_not_null(bd, "KV_BUILD_DIR");
    snprintf(bin, sizeof bin, "%.4000s/tests/lib/kvt_dns", bd);
    const char *argv[] = {
        bin,     "--addr", addr,  "--resolv-conf",         g_rc, "--life", "280", "--srv", srv,
        "--srv", srv_y,    "--a", "m1.kvt.test=127.0.0.1", NULL};
    kvt_proc_init(&g_dns, log);
    cr_assert_eq(kvt_proc_spawn(&g_dns, argv), 0, "kvt_dns");
    struct stat st;
    for (int i = 0; i < 100 && stat(g_rc, &st) != 0; i++)
        kvt_sleep_ms(50);
    cr_assert_eq(stat(g_rc, &st), 0, "kvt_dns wrote no resolv.conf (see %s)", log);
    g_x.wrap = g_wrap;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "%s", path);
    char *b = calloc(1, 1 << 16);
    cr_assert_not_null(b);
    size_t n = fread(b, 1, (1 << 16) - 1, f);
    b[n] = 0;
    fclose(f);
    return b;
}

/* The proxy exits at once with the status and a line containing want in its log. */
static void expect_refused(const char *const *extra, const char *want)
{
    int rc = px_start(&g_x, &g_c, NULL, 0, extra);
    cr_assert_neq(rc, 0, "the proxy started");
    cr_assert_eq(kvt_proc_wait(&g_x.proc, 10000), 0);
    char *log = slurp(g_x.log);
    cr_expect(WIFEXITED(g_x.proc.last_status) && WEXITSTATUS(g_x.proc.last_status) == 1,
              "exit status %d", g_x.proc.last_status);
    cr_expect(strstr(log, want) != NULL, "no \"%s\" in the proxy's log:\n%s", want, log);
    free(log);
}

Test(proxy_discovery, the_members_come_from_srv_records, .init = setup, .fini = fini,
     .timeout = 120)
{
    const char *const extra[] = {"--endpoints=127.0.0.1:1", "--discovery-srv=kvt.test",
                                 "--insecure-discovery", NULL};
    cr_assert_eq(px_start(&g_x, &g_c, NULL, 0, extra), 0, "proxy (log %s)", g_x.log);
    kvt_cmd_result r;
    cr_assert_eq(px_ctl(&g_x, 15000, &r, "put", "srv/k", "v1", NULL), 0);
    cr_assert_eq(r.exit_code, 0, "put through the proxy: %s %s", r.out, r.err);
    kvt_cmd_result_free(&r);
    cr_assert_eq(px_ctl(&g_x, 15000, &r, "get", "srv/k", "--print-value-only", NULL), 0);
    cr_assert_str_eq(r.out, "v1\n", "%s", r.err);
    kvt_cmd_result_free(&r);
    char *log = slurp(g_x.log);
    char want[128];
    snprintf(want, sizeof want, "discovered cluster from SRV kvt.test: http://m1.kvt.test.:%u",
             g_c.m[0].client_port);
    cr_expect(strstr(log, want) != NULL, "no \"%s\" in the log:\n%s", want, log);
    free(log);
}

/* Without --insecure-discovery only https:// records a TCP connection reaches are kept, as
 * etcd's ValidateSecureEndpoints: the http:// record is "insecure", and the https:// one of
 * --discovery-srv-name y is kept (its member speaks plain h2c, so the proxy's TLS handshake
 * then fails: this test asks only that the proxy took it and started). */
Test(proxy_discovery, insecure_records_are_dropped_unless_allowed, .init = setup, .fini = fini,
     .timeout = 120)
{
    char want[160];
    snprintf(want, sizeof want, "\"http://m1.kvt.test.:%u\" is insecure", g_c.m[0].client_port);
    const char *const plain[] = {"--discovery-srv=kvt.test", NULL};
    expect_refused(plain, want);
    char *log = slurp(g_x.log);
    cr_expect(strstr(log, "no endpoint left") != NULL, "%s", log);
    free(log);
    const char *const named[] = {"--discovery-srv=kvt.test", "--discovery-srv-name=y",
                                 "--insecure-skip-tls-verify", NULL};
    /* px_start's Status through an h2c member over TLS fails (after 10 s): the proxy runs */
    cr_assert_eq(px_start(&g_x, &g_c, NULL, 0, named), -ETIMEDOUT, "log %s", g_x.log);
    cr_assert(kvt_proc_alive(&g_x.proc), "the proxy exited (log %s)", g_x.log);
    log = slurp(g_x.log);
    snprintf(want, sizeof want, "discovered cluster from SRV kvt.test: https://m1.kvt.test.:%u",
             g_c.m[0].client_port);
    cr_expect(strstr(log, want) != NULL, "no \"%s\" in the log:\n%s", want, log);
    cr_expect(strstr(log, "failed to verify") == NULL, "%s", log);
    free(log);
}

/* No records at all: etcd's "dns lookup errors: ... and ..." naming both names, exit 1. */
Test(proxy_discovery, a_domain_without_records_is_refused, .init = setup, .fini = fini,
     .timeout = 120)
{
    uint16_t p = g_c.m[0].client_port;
    char want[256];
    snprintf(want, sizeof want,
             "dns lookup errors: lookup _etcd-client-ssl._tcp.nope.test on 127.53.%u.%u:53: no "
             "such host and lookup _etcd-client._tcp.nope.test on 127.53.%u.%u:53: no such host",
             (p >> 8) & 255, p & 255, (p >> 8) & 255, p & 255);
    const char *const extra[] = {"--discovery-srv=nope.test", "--insecure-discovery", NULL};
    expect_refused(extra, want);
}
