/* Live tests: the HTTP/1.1 /metrics and /health server. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "test_support.h"

Test(http, metrics_endpoint)
{
    harness h;
    harness_start(&h, NULL, NULL);
    char *r = http_get(h.http_port, "/metrics");
    cr_assert_not_null(r);
    cr_assert(strncmp(r, "HTTP/1.1 200 OK\r\n", 17) == 0, "%s", r);
    cr_assert(strstr(r, "Content-Type: text/plain; version=0.0.4\r\n"));
    cr_assert(strstr(r, "# TYPE kvd_grpc_connections_open gauge\nkvd_grpc_connections_open 0\n"),
              "%s", r);
    char want[128];
    snprintf(want, sizeof(want), "kvd_grpc_conn_buffered_bytes_max{listener=\"127.0.0.1:%d\"} 0\n",
             h.grpc_port);
    cr_assert(strstr(r, want), "%s", r);
    free(r);
    harness_stop(&h);
    cr_assert_eq(h.loop_close_rv, 0);
    free(h.metrics_text);
}

Test(http, health_ok_and_failing)
{
    harness h;
    harness_start(&h, NULL, NULL);
    char *r = http_get(h.http_port, "/health");
    cr_assert(strncmp(r, "HTTP/1.1 200 OK\r\n", 17) == 0, "%s", r);
    cr_assert(strstr(r, "\r\n\r\n{\"health\":\"true\"}"), "%s", r);
    free(r);
    atomic_store(&h.health_mode, HEALTH_FAIL);
    r = http_get(h.http_port, "/health");
    cr_assert(strncmp(r, "HTTP/1.1 503 Service Unavailable\r\n", 34) == 0, "%s", r);
    /* etcd 3.4's body; the reason in a header */
    cr_assert(strstr(r, "\r\n\r\n{\"health\":\"false\"}"), "%s", r);
    cr_assert(strstr(r, "\r\nX-Kvd-Health-Reason: raft: no \"leader\"\r\n"), "%s", r);
    free(r);
    harness_stop(&h);
    cr_assert_eq(h.loop_close_rv, 0);
    free(h.metrics_text);
}

Test(http, health_slow_hook_times_out)
{
    harness h;
    kv_http_config hc;
    kv_http_config_default(&hc);
    hc.health_timeout_ms = 200;
    harness_start(&h, NULL, &hc);
    atomic_store(&h.health_mode, HEALTH_SLOW);
    char *r = http_get(h.http_port, "/health");
    cr_assert(strncmp(r, "HTTP/1.1 503", 12) == 0, "%s", r);
    cr_assert(strstr(r, "\r\n\r\n{\"health\":\"false\"}"), "%s", r);
    cr_assert(strstr(r, "\r\nX-Kvd-Health-Reason: timeout\r\n"), "%s", r);
    free(r);
    /* the hook answers at stop, after the connection and server are gone (ASan checks) */
    harness_stop(&h);
    cr_assert_eq(h.loop_close_rv, 0);
    free(h.metrics_text);
}

Test(http, not_found_and_limits)
{
    harness h;
    harness_start(&h, NULL, NULL);
    char *r = http_get(h.http_port, "/nope");
    cr_assert(strncmp(r, "HTTP/1.1 404", 12) == 0, "%s", r);
    free(r);
    int fd = tcp_connect(h.http_port);
    char junk[9000];
    memset(junk, 'a', sizeof(junk));
    memcpy(junk, "GET /metrics HTTP/1.1\r\nX: ", 26);
    send(fd, junk, sizeof(junk), MSG_NOSIGNAL);
    char buf[512] = {0};
    ssize_t n = recv(fd, buf, sizeof(buf) - 1, 0);
    cr_assert_gt(n, 0);
    cr_assert(strncmp(buf, "HTTP/1.1 431", 12) == 0, "%s", buf);
    close(fd);
    fd = tcp_connect(h.http_port);
    send(fd, "POST /metrics HTTP/1.1\r\n\r\n", 26, MSG_NOSIGNAL);
    memset(buf, 0, sizeof(buf));
    n = recv(fd, buf, sizeof(buf) - 1, 0);
    cr_assert(strncmp(buf, "HTTP/1.1 405", 12) == 0, "%s", buf);
    close(fd);
    harness_stop(&h);
    cr_assert_eq(h.loop_close_rv, 0);
    free(h.metrics_text);
}
