/*
 * proxy_health: `/health` on the proxy's --metrics-addr answers as etcd 3.4's grpc-proxy
 * (proxy/grpcproxy/health.go: a Range of "a" through the proxy's client, 1 s deadline):
 * 200 {"health":"true"} while the member answers; 503 {"health":"false"} with the upstream's
 * error in X-Kvd-Health-Reason once the only member is stopped (SIGSTOP: the range times out)
 * and again 200 after SIGCONT.
 */
#include "px_util.h"

#include <criterion/criterion.h>

#include <signal.h>
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
