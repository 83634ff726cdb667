/*
 * proxy_conn_mem: the memory an agent connection costs the gRPC server (server/grpc), on a
 * kvd member's client port and on `kvd grpc-proxy start` in front of it. 1,000 h2c
 * connections (tests/proxy/px_connmem.h), each with one LeaseKeepAlive stream that renewed a
 * lease once, are opened after 50 warm-up connections; the server's VmRSS growth divided by
 * 1,000 must stay at or under PX_CONN_MEM_BOUND_KIB (server/grpc/README.md "Memory per
 * connection": 28-29 KiB before buffers were made lazy). Figures are logged to stderr.
 */
#include "px_connmem.h"
#include "px_util.h"

#include "kvclient.h"

#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>

#define PX_CONN_MEM_N 1000
#define PX_CONN_MEM_WARM 50
#define PX_CONN_MEM_BOUND_KIB 16.0

static kvt_cluster g_c;
static px g_x;
static px_connmem g_warm, g_m;

static void fini(void)
{
    px_connmem_close(&g_m);
    px_connmem_close(&g_warm);
    px_stop(&g_x);
    kvt_cluster_destroy(&g_c);
}

static int64_t grant(const char *endpoint)
{
    struct kvc_client *cl = px_client(endpoint);
    kvc_lease_grant_result g;
    kvc_error e;
    cr_assert_eq(kvc_lease_grant(cl, 600, 0, 0, 5000, &g, &e), 0, "%s", e.message);
    kvc_close(cl);
    return g.id;
}

/* KiB of VmRSS of pid per connection opened to port. */
static double per_conn_kib(const char *what, pid_t pid, uint16_t port, int64_t lease)
{
    char err[256];
    cr_assert_eq(px_connmem_open(&g_warm, port, lease, PX_CONN_MEM_WARM, err, sizeof err), 0, "%s",
                 err);
    kvt_sleep_ms(500);
    long before = px_rss_kib(pid);
    cr_assert_gt(before, 0);
    cr_assert_eq(px_connmem_open(&g_m, port, lease, PX_CONN_MEM_N, err, sizeof err), 0, "%s", err);
    cr_assert_eq(px_connmem_renew(&g_m, lease, err, sizeof err), 0, "%s", err);
    kvt_sleep_ms(500);
    long after = px_rss_kib(pid);
    double per = (double)(after - before) / PX_CONN_MEM_N;
    fprintf(stderr, "proxy_conn_mem: %s: VmRSS %ld -> %ld KiB for %d connections: %.2f KiB each\n",
            what, before, after, PX_CONN_MEM_N, per);
    return per;
}

Test(proxy_conn_mem, member_rss_per_agent_connection, .fini = fini, .timeout = 240)
{
    cr_assert_eq(px_cluster_start(&g_c, 1), 0, "cluster");
    int64_t lease = grant(g_c.m[0].endpoint);
    double per = per_conn_kib("member", g_c.m[0].proc.pid, g_c.m[0].client_port, lease);
    cr_assert_leq(per, PX_CONN_MEM_BOUND_KIB, "member: %.2f KiB per connection > %.0f", per,
                  PX_CONN_MEM_BOUND_KIB);
}

Test(proxy_conn_mem, proxy_rss_per_agent_connection, .fini = fini, .timeout = 240)
{
    cr_assert_eq(px_cluster_start(&g_c, 1), 0, "cluster");
    cr_assert_eq(px_start(&g_x, &g_c, NULL, 0, NULL), 0, "proxy");
    int64_t lease = grant(g_x.endpoint);
    double per = per_conn_kib("proxy", g_x.proc.pid, g_x.port, lease);
    cr_assert_leq(per, PX_CONN_MEM_BOUND_KIB, "proxy: %.2f KiB per connection > %.0f", per,
                  PX_CONN_MEM_BOUND_KIB);
}
