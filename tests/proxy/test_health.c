/*
 * proxy_health: `/health` on the proxy's --metrics-addr answers as etcd 3.4's grpc-proxy
 * (proxy/grpcproxy/health.go: a Range of "a" through the proxy's client, 1 s deadline):
 * 200 {"health":"true"} while the member answers; 503 {"health":"false"} with the upstream's
 * error in X-Kvd-Health-Reason once the only member is stopped (SIGSTOP: the range times out)
 * and again 200 after SIGCONT. --listen-addr answers the same /health beside gRPC.
 * --listen-addr serves what etcd 3.4's proxy serves there over HTTP (its cmux): /health,
 * /metrics and with --enable-pprof /debug/pprof/; /version, the JSON gateway and any other
 * path get Go's 404, a POST or OPTIONS of /health 405; gRPC keeps working on the same port.
 * With --enable-pprof both listeners serve /debug/pprof/ (docs/pprof.md): a CPU profile in
 * pprof's protobuf, one at a time, freed at once by a client that leaves; without a
 * --metrics-addr the listener alone serves it.
 */
#include "px_util.h"

#include <criterion/criterion.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
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

static int is_kvd(void)
{
    return kvt_target_from_env() == KV_TEST_SERVER_KVD;
}

static int health_on(uint16_t port, char **body)
{
    int status = 0;
    cr_assert_eq(kvt_http_get(port, "/health", 8000, &status, body), 0, "GET /health");
    return status;
}

static int health(char **body)
{
    return health_on(g_x.metrics_port, body);
}

/* The HTTP status curl gets for `method` of path on the port; its body in out, after the
 * response head when head is set. */
static int curl_status(uint16_t port, const char *method, const char *path, int head, char *out,
                       size_t cap)
{
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%u%s", port, path);
    const char *argv[] = {"/usr/bin/curl",
                          head ? "-si" : "-s",
                          "--max-time",
                          "5",
                          "-X",
                          method,
                          "-w",
                          "\n%{http_code}",
                          url,
                          NULL};
    kvt_cmd_result r;
    cr_assert_eq(kvt_run(argv, NULL, NULL, 0, 15000, &r), 0, "run curl");
    cr_assert_eq(r.exit_code, 0, "curl %s %s: %s", method, url, r.err);
    char *nl = strrchr(r.out, '\n');
    cr_assert(nl, "curl output %s", r.out);
    int code = atoi(nl + 1);
    *nl = '\0';
    snprintf(out, cap, "%s", r.out);
    kvt_cmd_result_free(&r);
    return code;
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
    b = NULL;
    cr_assert_eq(health_on(g_x.port, &b), 503, "--listen-addr: body %s", b ? b : "");
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

Test(proxy_health, listen_addr_answers_http_beside_grpc, .init = setup, .fini = fini, .timeout = 60)
{
    char out[4096];
    cr_assert_eq(curl_status(g_x.port, "GET", "/health", 0, out, sizeof out), 200, "%s", out);
    cr_assert(strstr(out, "{\"health\":\"true\"}"), "%s", out);
    char *b = NULL;
    int status = 0;
    cr_assert_eq(kvt_http_get(g_x.port, "/metrics", 8000, &status, &b), 0);
    cr_assert_eq(status, 200);
    /* etcd 3.4's proxy fetches its member's /metrics there; kvd's proxy serves its own */
    if (is_kvd())
        cr_assert(strstr(b, "\nkvd_proxy_upstream_keepalive_streams "), "%.300s", b);
    free(b);
    static const char *const absent[][2] = {
        {"GET", "/version"}, {"POST", "/v3/kv/range"}, {"GET", "/debug/pprof/"},
        {"GET", "/"},        {"OPTIONS", "/nope"},     {"GET", "/healthz"},
    };
    for (size_t i = 0; i < sizeof absent / sizeof absent[0]; i++) {
        int code = curl_status(g_x.port, absent[i][0], absent[i][1], 0, out, sizeof out);
        cr_assert_eq(code, 404, "%s %s: %d %s", absent[i][0], absent[i][1], code, out);
        cr_assert_str_eq(out, "404 page not found\n");
    }
    /* no CORS headers: etcd's proxy has no CORS handler (its members' client port has) */
    cr_assert_eq(curl_status(g_x.port, "GET", "/health", 1, out, sizeof out), 200);
    cr_assert(!strcasestr(out, "Access-Control-"), "%s", out);
    cr_assert(strstr(out, "{\"health\":\"true\"}"), "%s", out);
    cr_assert_eq(curl_status(g_x.port, "POST", "/health", 0, out, sizeof out), 405);
    cr_assert_eq(curl_status(g_x.port, "OPTIONS", "/health", 0, out, sizeof out), 405);
    /* gRPC on the same port, after the HTTP connections */
    kvt_cmd_result r;
    cr_assert_eq(px_ctl(&g_x, 20000, &r, "put", "k", "v", NULL), 0);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    kvt_cmd_result_free(&r);
    cr_assert_eq(px_ctl(&g_x, 20000, &r, "get", "k", "--print-value-only", NULL), 0);
    cr_assert_str_eq(r.out, "v\n");
    kvt_cmd_result_free(&r);
}

static void setup_pprof(void)
{
    static const char *const extra[] = {"--enable-pprof", NULL};
    cr_assert_eq(px_cluster_start(&g_c, 1), 0, "cluster");
    cr_assert_eq(px_start(&g_x, &g_c, NULL, 0, extra), 0, "proxy");
}

/* The status of a 1 s profile from the proxy's port. */
static int one_second_profile(uint16_t port)
{
    char *b = NULL;
    int status = 0;
    cr_assert_eq(kvt_http_get(port, "/debug/pprof/profile?seconds=1", 8000, &status, &b), 0);
    free(b);
    return status;
}

/* A profile on the port: 1 s, in pprof's protobuf; "Unknown profile" for heap; /health
 * beside it; one profile per process (the other listener too); a client that leaves a 60 s
 * profile frees the profiler at once. other: the proxy's other HTTP port, or 0. */
static void profile_on(uint16_t port, uint16_t other)
{
    char *b = NULL;
    int status = 0;
    uint64_t t0 = kvt_now_ms();
    cr_assert_eq(kvt_http_get(port, "/debug/pprof/profile?seconds=1", 8000, &status, &b), 0);
    cr_assert_eq(status, 200, "body %s", b ? b : "");
    /* profile.proto: field 1 (sample_type), length-delimited, first; Go gzips it */
    cr_assert(b && ((uint8_t)b[0] == 0x0a || (!is_kvd() && (uint8_t)b[0] == 0x1f)),
              "a pprof protobuf");
    cr_assert_geq(kvt_now_ms() - t0, 900, "the profile ran its second");
    free(b);
    b = NULL;
    cr_assert_eq(kvt_http_get(port, "/debug/pprof/heap", 8000, &status, &b), 0);
    if (is_kvd()) { /* Go has a heap profile */
        cr_assert_eq(status, 404);
        cr_assert_str_eq(b, "Unknown profile\n");
    }
    free(b);
    b = NULL;
    cr_assert_eq(health_on(port, &b), 200, "/health beside it");
    free(b);
    int fd = kvt_connect_loopback(port, 5000);
    cr_assert(fd >= 0);
    static const char req[] = "GET /debug/pprof/profile?seconds=60 HTTP/1.1\r\nHost: x\r\n\r\n";
    cr_assert_eq(kvt_send_all(fd, req, sizeof req - 1, kvt_now_ms() + 5000), 0);
    kvt_sleep_ms(300);
    cr_assert_eq(one_second_profile(port), 500, "one profile at a time");
    if (other)
        cr_assert_eq(one_second_profile(other), 500, "one profile per process");
    close(fd);
    kvt_sleep_ms(300);
    cr_assert_eq(one_second_profile(port), 200, "the profiler is free again");
}

Test(proxy_health, pprof_on_both_listeners, .init = setup_pprof, .fini = fini, .timeout = 60)
{
    profile_on(g_x.port, is_kvd() ? g_x.metrics_port : 0);
    if (is_kvd()) /* etcd 3.4's proxy serves pprof on --listen-addr only */
        profile_on(g_x.metrics_port, g_x.port);
}

static void setup_pprof_no_metrics_addr(void)
{
    static const char *const extra[] = {"--enable-pprof", NULL};
    cr_assert_eq(px_cluster_start(&g_c, 1), 0, "cluster");
    g_x.no_metrics_addr = 1;
    cr_assert_eq(px_start(&g_x, &g_c, NULL, 0, extra), 0, "proxy");
}

Test(proxy_health, pprof_without_a_metrics_addr_on_the_listener,
     .init = setup_pprof_no_metrics_addr, .fini = fini, .timeout = 60)
{
    profile_on(g_x.port, 0);
    if (!is_kvd())
        return;
    char want[96];
    snprintf(want, sizeof want, "pprof is enabled under /debug/pprof on 127.0.0.1:%u\n", g_x.port);
    char *log = kvt_file_read(g_x.log);
    cr_assert(log && strstr(log, want), "log lacks '%s': %s", want, log ? log : "");
    free(log);
}

/* SIGTERM while the listener holds HTTP work: a 60 s profile running, a request head half
 * sent, a keep-alive connection idle after an answer. The proxy closes them and exits 0; in
 * the sanitizer build a leak or a use after free in that teardown (the HTTP handler is freed
 * after the gRPC server that holds its connections, pprof after both) fails the exit. */
Test(proxy_health, sigterm_with_http_work_on_the_listener_exits_cleanly, .init = setup_pprof,
     .fini = fini, .timeout = 60)
{
    if (!is_kvd())
        cr_skip_test("the teardown under test is kvd's proxy's");
    static const char prof[] = "GET /debug/pprof/profile?seconds=60 HTTP/1.1\r\nHost: x\r\n\r\n";
    static const char half[] = "GET /health HTTP/1.1\r\nHost: x\r\n";
    static const char idle[] = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
    const char *reqs[] = {prof, half, idle};
    size_t lens[] = {sizeof prof - 1, sizeof half - 1, sizeof idle - 1};
    int fds[3];
    for (int i = 0; i < 3; i++) {
        fds[i] = kvt_connect_loopback(g_x.port, 5000);
        cr_assert(fds[i] >= 0);
        cr_assert_eq(kvt_send_all(fds[i], reqs[i], lens[i], kvt_now_ms() + 5000), 0);
    }
    kvt_sleep_ms(300);
    cr_assert_eq(one_second_profile(g_x.port), 500, "the 60 s profile runs");
    cr_assert_eq(kvt_proc_signal(&g_x.proc, SIGTERM), 0);
    cr_assert_eq(kvt_proc_wait(&g_x.proc, 20000), 0, "the proxy did not exit (log %s)", g_x.log);
    int st = g_x.proc.last_status;
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %#x (log %s)", st, g_x.log);
    for (int i = 0; i < 3; i++)
        close(fds[i]);
}
