/*
 * proxy_discovery: `kvd grpc-proxy start --discovery-srv DOMAIN` takes its upstream members
 * from DNS SRV records, as etcd's (server/common/dns_srv.h, proxy_config.c
 * kv_proxy_config_discover). A DNS responder (tests/lib/kvt_dns) serves the records on
 * 127.53.x.y:53, and the proxy runs in a private mount namespace whose /etc/resolv.conf names
 * it (`unshare --mount`: root only). --endpoints points nowhere, so a proxy that ignored the
 * records could not serve.
 */
#include "px_util.h"
#include "kvt_dnsns.h"
#include "kvt_skip.h"

#include <criterion/criterion.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static kvt_cluster g_c;
static px g_x;
static kvt_dnsns g_dns;

static void fini(void)
{
    px_stop(&g_x);
    kvt_dnsns_stop(&g_dns);
    kvt_cluster_destroy(&g_c);
}

/* A 1-member cluster and the records: _etcd-client._tcp.kvt.test -> m1.kvt.test:<member>
 * (and an https one for --discovery-srv-name=y), m1.kvt.test -> 127.0.0.1. */
static void setup(void)
{
    const char *why = kvt_dnsns_missing();
    if (why)
        KVT_SKIP_MISSING("%s", why);
    cr_assert_eq(px_cluster_start(&g_c, 1), 0, "cluster");
    uint16_t p = g_c.m[0].client_port;
    char srv[128], srv_y[128];
    snprintf(srv, sizeof srv, "_etcd-client._tcp.kvt.test=m1.kvt.test:%u", p);
    snprintf(srv_y, sizeof srv_y, "_etcd-client-ssl-y._tcp.kvt.test=m1.kvt.test:%u", p);
    const char *records[] = {"--srv", srv, "--srv", srv_y, "--a", "m1.kvt.test=127.0.0.1", NULL};
    cr_assert_eq(kvt_dnsns_start(&g_dns, g_c.root.path, p, records), 0, "kvt_dns");
    g_x.wrap = g_dns.wrap;
}

static char *slurp(const char *path)
{
    char *b = kvt_file_read(path);
    cr_assert_not_null(b, "%s", path);
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
    char want[256];
    snprintf(want, sizeof want,
             "dns lookup errors: lookup _etcd-client-ssl._tcp.nope.test on %s:53: no such host "
             "and lookup _etcd-client._tcp.nope.test on %s:53: no such host",
             g_dns.addr, g_dns.addr);
    const char *const extra[] = {"--discovery-srv=nope.test", "--insecure-discovery", NULL};
    expect_refused(extra, want);
}
