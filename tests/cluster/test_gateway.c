/*
 * cluster_gateway: `kvd gateway start` (server/gateway/l4_gateway.h), etcd's L4 gateway, in
 * front of a 3-member cluster: etcdctl works through it unchanged; an endpoint that refuses
 * connections is skipped (and logged) and the next one serves; a member killed behind it is
 * skipped too; SIGTERM ends it with exit code 0 (under ASan: no leak); --retry-delay is read as
 * etcd reads it (Go's time.ParseDuration).
 */
#include "cl_util.h"

#include <criterion/criterion.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int ctl_through(uint16_t port, const char *const *args, char *out, size_t cap)
{
    char ep[64];
    snprintf(ep, sizeof(ep), "--endpoints=127.0.0.1:%u", port);
    const char *argv[16] = {"/usr/bin/etcdctl", ep, "--dial-timeout=3s", "--command-timeout=5s"};
    int n = 4;
    for (int i = 0; args[i] && n < 15; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    const char *env[] = {"ETCDCTL_API=3", NULL};
    kvt_cmd_result r;
    if (kvt_run(argv, env, NULL, 0, 30000, &r) != 0)
        return -1;
    int code = r.exit_code;
    if (out)
        snprintf(out, cap, "%s%s", r.out, r.err);
    kvt_cmd_result_free(&r);
    return code;
}

/* 1 once the file at path holds line (the gateway's log), polled until timeout_ms; else 0. */
static int wait_log_line(const char *path, const char *line, uint32_t timeout_ms)
{
    uint64_t end = kvt_now_ms() + timeout_ms;
    for (;;) {
        char text[16384] = "";
        FILE *f = fopen(path, "r");
        if (f) {
            text[fread(text, 1, sizeof(text) - 1, f)] = '\0';
            fclose(f);
        }
        if (strstr(text, line))
            return 1;
        if (kvt_now_ms() >= end)
            return 0;
        kvt_sleep_ms(20);
    }
}

Test(cluster_gateway, etcdctl_through_the_gateway_with_failover, .timeout = 240)
{
    kvt_cluster c;
    cr_assert_eq(cl_start(&c, 3, 0), 0);
    uint16_t port = 0, dead = 0;
    cr_assert_eq(kvt_port_free(&port), 0);
    cr_assert_eq(kvt_port_free(&dead), 0); /* nothing listens there */
    char eps[256], listen[64], log[PATH_MAX + 16];
    snprintf(eps, sizeof(eps), "--endpoints=127.0.0.1:%u,%s,%s,%s", dead, c.m[0].endpoint,
             c.m[1].endpoint, c.m[2].endpoint);
    snprintf(listen, sizeof(listen), "--listen-addr=127.0.0.1:%u", port);
    snprintf(log, sizeof(log), "%s/gateway.log", c.root.path);
    kvt_proc gw;
    kvt_proc_init(&gw, log);
    const char *argv[] = {c.bin, "gateway", eps, listen, "--retry-delay=1m", "start", NULL};
    cr_assert_eq(kvt_proc_spawn(&gw, argv), 0);
    /* listening (the ready line is checked again below) */
    (void)wait_log_line(log, "ready to proxy client requests", 10000);

    char out[4096];
    int ok = 1;
    for (int i = 0; i < 8 && ok; i++) { /* round robin: every endpoint, the dead one too */
        char val[16];
        snprintf(val, sizeof(val), "v%d", i);
        ok = ctl_through(port, (const char *const[]){"put", "gw-k", val, NULL}, out, sizeof(out)) ==
             0;
    }
    int got = ctl_through(port, (const char *const[]){"get", "gw-k", "--print-value-only", NULL},
                          out, sizeof(out)) == 0 &&
              strncmp(out, "v7", 2) == 0;

    /* a member dies behind the gateway: its connections are refused, the others serve */
    cr_assert_eq(kvt_member_kill9(&c, 0), 0);
    int after_kill = 1;
    for (int i = 0; i < 6 && after_kill; i++)
        after_kill = ctl_through(port, (const char *const[]){"get", "gw-k", NULL}, NULL, 0) == 0;

    FILE *f = fopen(log, "r");
    char text[16384] = "";
    if (f) {
        text[fread(text, 1, sizeof(text) - 1, f)] = '\0';
        fclose(f);
    }
    int ready = strstr(text, "ready to proxy client requests") != NULL;
    char dead_ep[64];
    snprintf(dead_ep, sizeof(dead_ep), "endpoint 127.0.0.1:%u refused a connection", dead);
    int skipped = strstr(text, dead_ep) != NULL;

    kvt_proc_signal(&gw, SIGTERM);
    int exited = kvt_proc_wait(&gw, 10000) == 0;
    int status = gw.last_status;
    kvt_cluster_destroy(&c);
    cr_assert(ready, "no ready line: %s", text);
    cr_assert(ok, "put through the gateway failed: %s", out);
    cr_assert(got, "get through the gateway: %s", out);
    cr_assert(skipped, "the refusing endpoint was not logged: %s", text);
    cr_assert(after_kill, "a killed member behind the gateway was not skipped");
    cr_assert(exited && WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "the gateway did not exit cleanly on SIGTERM (status %d): %s", status, text);
}

Test(cluster_gateway, unsupported_flags_are_refused, .timeout = 60)
{
    kvt_cluster c;
    cr_assert_eq(kvt_cluster_init(&c, &(kvt_cluster_opts){.target = KV_TEST_SERVER_KVD, .n = 1}),
                 0);
    const char *argv[] = {c.bin, "gateway", "--no-such-flag=1", "start", NULL};
    kvt_cmd_result r;
    cr_assert_eq(kvt_run(argv, NULL, NULL, 0, 10000, &r), 0);
    int refused = r.exit_code != 0 && strstr(r.err, "--no-such-flag") != NULL;
    kvt_cmd_result_free(&r);
    kvt_cluster_destroy(&c);
    cr_assert(refused, "--no-such-flag was not refused by name");
}

/* --retry-delay is read with Go's time.ParseDuration, as etcd's DurationVar: "1m30s" skips a
 * refusing endpoint for 90000 ms (the gateway refused it before: one unit only); what Go
 * refuses is refused naming the flag, also "1e3ms" (strtod's exponent, 1 s before). */
Test(cluster_gateway, retry_delay_is_read_as_go_reads_a_duration, .timeout = 60)
{
    kvt_cluster c;
    cr_assert_eq(kvt_cluster_init(&c, &(kvt_cluster_opts){.target = KV_TEST_SERVER_KVD, .n = 1}),
                 0);
    uint16_t port = 0, dead = 0;
    cr_assert_eq(kvt_port_free(&port), 0);
    cr_assert_eq(kvt_port_free(&dead), 0); /* nothing listens there */
    char eps[64], listen[64], log[PATH_MAX + 16];
    snprintf(eps, sizeof(eps), "--endpoints=127.0.0.1:%u", dead);
    snprintf(listen, sizeof(listen), "--listen-addr=127.0.0.1:%u", port);
    snprintf(log, sizeof(log), "%s/gateway.log", c.root.path);
    static const char *const bad[] = {"--retry-delay=1e3ms", "--retry-delay=90",
                                      "--retry-delay=1m30", "--retry-delay=-1s"};
    char refused[512] = "";
    for (size_t i = 0; i < sizeof bad / sizeof bad[0] && !refused[0]; i++) {
        const char *argv[] = {c.bin, "gateway", eps, listen, bad[i], "start", NULL};
        kvt_cmd_result r;
        cr_assert_eq(kvt_run(argv, NULL, NULL, 0, 5000, &r), 0);
        char want[96];
        snprintf(want, sizeof want, "--retry-delay: invalid duration '%s'", bad[i] + 14);
        if (r.exit_code == 0 || strstr(r.err, want) == NULL)
            snprintf(refused, sizeof refused, "%s: exit %d: %s", bad[i], r.exit_code, r.err);
        kvt_cmd_result_free(&r);
    }

    kvt_proc gw;
    kvt_proc_init(&gw, log);
    const char *argv[] = {c.bin, "gateway", eps, listen, "--retry-delay=1m30s", "start", NULL};
    cr_assert_eq(kvt_proc_spawn(&gw, argv), 0);
    int ready = wait_log_line(log, "ready to proxy client requests", 10000);
    int fd = ready ? kvt_connect_loopback(port, 5000) : -1;
    char line[96];
    snprintf(line, sizeof(line), "endpoint 127.0.0.1:%u refused a connection", dead);
    int skipped = fd >= 0 && wait_log_line(log, line, 10000) &&
                  wait_log_line(log, "skipped for 90000 ms", 1000);
    if (fd >= 0)
        close(fd);
    kvt_proc_term(&gw, 10000);
    char *text = kvt_file_read(log);
    kvt_cluster_destroy(&c);
    cr_assert(!refused[0], "not refused naming --retry-delay: %s", refused);
    cr_assert(ready, "--retry-delay=1m30s: the gateway did not start: %s", text ? text : "");
    cr_assert(skipped, "no 90000 ms skip of the refusing endpoint: %s", text ? text : "");
    free(text);
}
