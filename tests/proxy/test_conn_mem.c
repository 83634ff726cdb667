/*
 * proxy_conn_mem: the memory an agent connection costs the gRPC server (server/grpc), on a
 * kvd member's client port and on `kvd grpc-proxy start` in front of it. 1,000 h2c
 * connections (tests/proxy/px_connmem.h), each with one LeaseKeepAlive stream that renewed a
 * lease once, are opened after 50 warm-up connections; the server's VmRSS growth divided by
 * 1,000 must stay at or under the bound (server/grpc/README.md "Memory per connection": 27.6
 * KiB before buffers were made lazy, 15.6 after; the proxy's connections have no HPACK dynamic
 * tables, 14.9). The proxy's bound is the grpc-proxy issue's target, 16 KiB; the member's, 17
 * KiB, guards against regressions (measured 15.6-16.1: it keeps 4 KiB HPACK tables, which
 * fill per connection). The same 1,000 agents over TLS on the proxy (--auto-tls): at most 35
 * KiB each (measured 31.6: OpenSSL's per-connection state, ~12.7 KB of heap, comes on top;
 * 37.8 before the sessions' frame buffers got pages of their own). Figures are logged to
 * stderr. Every renewal must be answered for the lease (both builds). Under a sanitizer the
 * allocator's redzones and quarantine, not the server, decide RSS: the figure is logged and the
 * bound is not applied. kvd only (KV_TEST_SERVER=etcd skips: etcd is not under test here).
 */
#include "px_connmem.h"
#include "px_util.h"

#include "kvclient.h"

#include <criterion/criterion.h>
#include <openssl/ssl.h>

#include <stdio.h>
#include <stdlib.h>

#define PX_CONN_MEM_N 1000
#define PX_CONN_MEM_WARM 50
#define PX_CONN_MEM_PROXY_KIB 16.0
#define PX_CONN_MEM_MEMBER_KIB 17.0
/* TLS agents (--auto-tls): 31.6 KiB measured with the sessions' frame buffers on pages of
 * their own (server/grpc/grpc_h2mem.c), 37.8 before; the 16 KiB is for h2c agents */
#define PX_CONN_MEM_PROXY_TLS_KIB 35.0

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

static void check(const char *what, double per, double bound)
{
    if (PX_SANITIZED) {
        fprintf(stderr, "proxy_conn_mem: %s: sanitizer build, %.0f KiB bound not applied\n", what,
                bound);
        return;
    }
    cr_assert_leq(per, bound, "%s: %.2f KiB per connection > %.0f", what, per, bound);
}

static void kvd_only(void)
{
    if (kvt_target_from_env() != KV_TEST_SERVER_KVD)
        cr_skip_test("kvd's gRPC server only");
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

/* KiB of VmRSS of pid per connection opened to port (TLS with ssl_ctx, else h2c). */
static double per_conn_kib(const char *what, pid_t pid, uint16_t port, void *ssl_ctx, int64_t lease)
{
    char err[256];
    cr_assert_eq(px_connmem_open(&g_warm, port, ssl_ctx, lease, PX_CONN_MEM_WARM, err, sizeof err),
                 0, "%s", err);
    kvt_sleep_ms(500);
    long before = kvt_proc_rss_kib(pid);
    cr_assert_gt(before, 0);
    cr_assert_eq(px_connmem_open(&g_m, port, ssl_ctx, lease, PX_CONN_MEM_N, err, sizeof err), 0,
                 "%s", err);
    cr_assert_eq(px_connmem_renew(&g_m, lease, err, sizeof err), 0, "%s", err);
    kvt_sleep_ms(500);
    long after = kvt_proc_rss_kib(pid);
    double per = (double)(after - before) / PX_CONN_MEM_N;
    fprintf(stderr, "proxy_conn_mem: %s: VmRSS %ld -> %ld KiB for %d connections: %.2f KiB each\n",
            what, before, after, PX_CONN_MEM_N, per);
    return per;
}

Test(proxy_conn_mem, member_rss_per_agent_connection, .fini = fini, .timeout = 240)
{
    kvd_only();
    cr_assert_eq(px_cluster_start(&g_c, 1), 0, "cluster");
    int64_t lease = grant(g_c.m[0].endpoint);
    check("member", per_conn_kib("member", g_c.m[0].proc.pid, g_c.m[0].client_port, NULL, lease),
          PX_CONN_MEM_MEMBER_KIB);
}

Test(proxy_conn_mem, proxy_rss_per_agent_connection, .fini = fini, .timeout = 240)
{
    kvd_only();
    cr_assert_eq(px_cluster_start(&g_c, 1), 0, "cluster");
    cr_assert_eq(px_start(&g_x, &g_c, NULL, 0, NULL), 0, "proxy");
    int64_t lease = grant(g_x.endpoint);
    check("proxy", per_conn_kib("proxy", g_x.proc.pid, g_x.port, NULL, lease),
          PX_CONN_MEM_PROXY_KIB);
}

Test(proxy_conn_mem, proxy_rss_per_tls_agent_connection, .fini = fini, .timeout = 240)
{
    kvd_only();
    static const char *const tls[] = {"--auto-tls", NULL}; /* a self-signed pair */
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    cr_assert(ctx);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL); /* --auto-tls: nothing to verify against */
    static const unsigned char h2[] = {2, 'h', '2'};
    cr_assert_eq(SSL_CTX_set_alpn_protos(ctx, h2, sizeof h2), 0);
    cr_assert_eq(px_cluster_start(&g_c, 1), 0, "cluster");
    g_x.probe_ssl_ctx = ctx;
    cr_assert_eq(px_start(&g_x, &g_c, NULL, 0, tls), 0, "proxy");
    int64_t lease = grant(g_c.m[0].endpoint); /* the member's lease, renewed through the proxy */
    check("proxy, TLS", per_conn_kib("proxy, TLS", g_x.proc.pid, g_x.port, ctx, lease),
          PX_CONN_MEM_PROXY_TLS_KIB);
    px_connmem_close(&g_m); /* before the context they hold a reference to */
    px_connmem_close(&g_warm);
    SSL_CTX_free(ctx);
}
