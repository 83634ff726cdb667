/*
 * proxy_health: `/health` on the proxy's --metrics-addr answers as etcd 3.4's grpc-proxy
 * (proxy/grpcproxy/health.go: a Range of "a" through the proxy's client, 1 s deadline):
 * 200 {"health":"true"} while the member answers; 503 {"health":"false"} with the upstream's
 * error in X-Kvd-Health-Reason once the only member is stopped (SIGSTOP: the range times out)
 * and again 200 after SIGCONT.
 * With --enable-pprof the same listener serves /debug/pprof/ (docs/pprof.md; etcd's proxy
 * serves it on --listen-addr, where kvd's proxy has no HTTP): a CPU profile in pprof's
 * protobuf, one at a time, freed at once by a client that leaves; without a --metrics-addr the
 * flag is refused with the reason.
 */
#include "px_util.h"

#include <criterion/criterion.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static kvt_cluster g_c;
static px g_x;

static void fini(void)
{
    if (g_c.m[0].proc.pid)
        kill(g_c.m[0].proc.pid, SIGCONT);
    px_stop(&g_x);
    kvt_cluster_destroy(&g_c);
}

static void setup(void)
{
    cr_assert_eq(px_cluster_start(&g_c, 1), 0, "cluster");
    cr_assert_eq(px_start(&g_x, &g_c, NULL, 0, NULL), 0, "proxy");
}

static int health(char **body)
{
    int status = 0;
    cr_assert_eq(kvt_http_get(g_x.metrics_port, "/health", 8000, &status, body), 0, "GET /health");
    return status;
}

Test(proxy_health, follows_the_upstream, .init = setup, .fini = fini, .timeout = 60)
{
    char *b = NULL;
    cr_assert_eq(health(&b), 200, "body %s", b ? b : "");
    cr_assert(b && strstr(b, "{\"health\":\"true\"}"), "body %s", b ? b : "");
    free(b);
    cr_assert_eq(kill(g_c.m[0].proc.pid, SIGSTOP), 0);
    b = NULL;
    cr_assert_eq(health(&b), 503, "body %s", b ? b : "");
    cr_assert(b && strstr(b, "{\"health\":\"false\"}"), "body %s", b ? b : "");
    free(b);
    cr_assert_eq(kill(g_c.m[0].proc.pid, SIGCONT), 0);
    int st = 0;
    for (int i = 0; i < 40 && st != 200; i++) { /* the client may have moved off the connection */
        b = NULL;
        st = health(&b);
        free(b);
        if (st != 200)
            usleep(250 * 1000);
    }
    cr_assert_eq(st, 200, "not healthy again after SIGCONT");
}

static void setup_pprof(void)
{
    static const char *const extra[] = {"--enable-pprof", NULL};
    cr_assert_eq(px_cluster_start(&g_c, 1), 0, "cluster");
    cr_assert_eq(px_start(&g_x, &g_c, NULL, 0, extra), 0, "proxy");
}

/* The status of a 1 s profile from the proxy's metrics address. */
static int one_second_profile(void)
{
    char *b = NULL;
    int status = 0;
    cr_assert_eq(
        kvt_http_get(g_x.metrics_port, "/debug/pprof/profile?seconds=1", 8000, &status, &b), 0);
    free(b);
    return status;
}

Test(proxy_health, pprof_on_the_metrics_addr, .init = setup_pprof, .fini = fini, .timeout = 60)
{
    char *b = NULL;
    int status = 0;
    uint64_t t0 = kvt_now_ms();
    cr_assert_eq(
        kvt_http_get(g_x.metrics_port, "/debug/pprof/profile?seconds=1", 8000, &status, &b), 0);
    cr_assert_eq(status, 200, "body %s", b ? b : "");
    /* profile.proto: field 1 (sample_type), length-delimited, first */
    cr_assert(b && (uint8_t)b[0] == 0x0a, "a pprof protobuf");
    cr_assert_geq(kvt_now_ms() - t0, 900, "the profile ran its second");
    free(b);
    b = NULL;
    cr_assert_eq(kvt_http_get(g_x.metrics_port, "/debug/pprof/heap", 8000, &status, &b), 0);
    cr_assert_eq(status, 404);
    cr_assert_str_eq(b, "Unknown profile\n");
    free(b);
    b = NULL;
    cr_assert_eq(kvt_http_get(g_x.metrics_port, "/health", 8000, &status, &b), 0);
    cr_assert_eq(status, 200, "/health beside it");
    free(b);
    /* a client that leaves a 60 s profile frees the profiler at once */
    int fd = kvt_connect_loopback(g_x.metrics_port, 5000);
    cr_assert(fd >= 0);
    static const char req[] = "GET /debug/pprof/profile?seconds=60 HTTP/1.1\r\nHost: x\r\n\r\n";
    cr_assert_eq(kvt_send_all(fd, req, sizeof req - 1, kvt_now_ms() + 5000), 0);
    kvt_sleep_ms(300);
    cr_assert_eq(one_second_profile(), 500, "one profile at a time");
    close(fd);
    kvt_sleep_ms(300);
    cr_assert_eq(one_second_profile(), 200, "the profiler is free again");
}

Test(proxy_health, pprof_without_a_metrics_addr_is_refused, .init = setup, .fini = fini,
     .timeout = 60)
{
    uint16_t port;
    cr_assert_eq(kvt_port_free(&port), 0);
    char eps[64], listen[64];
    snprintf(eps, sizeof eps, "--endpoints=%s", g_c.m[0].endpoint);
    snprintf(listen, sizeof listen, "--listen-addr=127.0.0.1:%u", port);
    const char *argv[] = {g_c.bin, "grpc-proxy", "start", eps, listen, "--enable-pprof", NULL};
    kvt_cmd_result r;
    cr_assert_eq(kvt_run(argv, NULL, NULL, 0, 20000, &r), 0);
    cr_assert(!r.timed_out && r.exit_code != 0, "exit %d", r.exit_code);
    cr_assert(strstr(r.err, "--enable-pprof serves /debug/pprof/ on --metrics-addr"), "%s", r.err);
    kvt_cmd_result_free(&r);
}
