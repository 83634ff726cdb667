/*
 * proxy_watch_md: a client's metadata on its watches through `kvd grpc-proxy start`. A
 * client stream joins upstream watchers and streams of the same "token" and "hasleader"
 * only, and those upstream streams carry them.
 * Auth (the member checks each watch as its user):
 *   - a user with read permission on a/ watches a/ --prefix through the proxy and sees a put
 *     made by root; the same user's watch of a key outside its permission, and a watch
 *     without a user, are canceled with "etcdserver: permission denied", the answer the
 *     member gives directly (checked in the same run);
 *   - a user's upstream stream closes with its last watcher (no stream per old token left
 *     behind), while token-less streams stay;
 *   - failover: the proxy's upstream member (of 3) is killed; the user's watch is resumed on
 *     the next member with the same simple token (tokens are replicated through the log, as
 *     etcd 3.4's) and sees the next put; its client stream is never ended (the proxy's
 *     Watch streams started stay 1: etcdctl did not watch again).
 * etcd 3.4's proxy shares token-less upstream streams for every client, so with auth on its
 * members refuse every watcher through it: that test is kvd's only.
 * hasleader (etcdctl watch asks it, clientv3.WithRequireLeader): the proxy's only member
 * loses its leader (the two others killed): the watch through the proxy ends with
 * "etcdserver: no leader" within a few election timeouts, as a watch on that member does
 * (checked in the same run). etcd 3.4.23's proxy keeps it open: kvd only.
 */
#include "px_util.h"

#include <criterion/criterion.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static kvt_cluster g_c;
static px g_x;
static kvt_proc g_w[3];

static void fini(void)
{
    for (int i = 0; i < 3; i++)
        kvt_proc_kill9(&g_w[i]);
    px_stop(&g_x);
    kvt_cluster_destroy(&g_c);
}

static void setup(void)
{
    memset(g_w, 0, sizeof g_w);
    cr_assert_eq(px_cluster_start(&g_c, 1), 0, "cluster");
    cr_assert_eq(px_start(&g_x, &g_c, NULL, 0, NULL), 0, "proxy");
}

static void setup3_all(void)
{
    memset(g_w, 0, sizeof g_w);
    cr_assert_eq(px_cluster_start(&g_c, 3), 0, "cluster");
    const int order[] = {0, 1, 2};
    cr_assert_eq(px_start(&g_x, &g_c, order, 3, NULL), 0, "proxy");
}

static void setup3(void)
{
    memset(g_w, 0, sizeof g_w);
    cr_assert_eq(px_cluster_start(&g_c, 3), 0, "cluster");
    const int only0[] = {0};
    cr_assert_eq(px_start(&g_x, &g_c, only0, 1, NULL), 0, "proxy");
}

#define CTL_OK(...)                                                                                \
    do {                                                                                           \
        kvt_cmd_result r_;                                                                         \
        cr_assert_eq(px_ctl(&g_x, 20000, &r_, __VA_ARGS__, NULL), 0);                              \
        cr_assert_eq(r_.exit_code, 0, "etcdctl failed: %s %s", r_.out, r_.err);                    \
        kvt_cmd_result_free(&r_);                                                                  \
    } while (0)

/* Starts `etcdctl watch` at endpoint as user ("" for none) with args, output to a log of
 * its own (slot i). */
static void spawn_watch(int i, const char *endpoint, const char *user, const char *a1,
                        const char *a2)
{
    static char logs[3][PATH_MAX], ep[3][128], u[3][64];
    snprintf(logs[i], sizeof logs[i], "%.4000s/watch%d.log", g_c.root.path, i);
    snprintf(ep[i], sizeof ep[i], "--endpoints=%s", endpoint);
    snprintf(u[i], sizeof u[i], "--user=%s", user);
    kvt_proc_init(&g_w[i], logs[i]);
    g_w[i].no_banner = 1;
    const char *argv[8];
    int n = 0;
    argv[n++] = "/usr/bin/etcdctl";
    argv[n++] = ep[i];
    if (*user)
        argv[n++] = u[i];
    argv[n++] = "watch";
    argv[n++] = a1;
    if (a2)
        argv[n++] = a2;
    argv[n] = NULL;
    const char *env[] = {"ETCDCTL_API=3", NULL};
    cr_assert_eq(kvt_proc_spawn_env(&g_w[i], argv, env), 0);
}

/* Waits (10 s) until watch i's log holds want; returns the log's text (static). Reads it at
 * least once. */
static const char *wait_log(int i, const char *want)
{
    static char buf[4096];
    uint64_t end = kvt_now_ms() + 10000;
    for (;;) {
        buf[0] = 0;
        FILE *f = fopen(g_w[i].log_path, "r");
        if (f) {
            size_t n = fread(buf, 1, sizeof buf - 1, f);
            buf[n] = 0;
            fclose(f);
        }
        if (strstr(buf, want) || kvt_now_ms() >= end)
            return buf;
        kvt_sleep_ms(50);
    }
}

/* A watch of key as user ("": none) is canceled with "permission denied" through the proxy
 * and, in the same run, on the member directly. */
static void expect_denied(const char *user, const char *key)
{
    const char *denied = "watch was canceled (etcdserver: permission denied)";
    for (int i = 1; i <= 2; i++) {
        spawn_watch(i, i == 1 ? g_x.endpoint : g_c.m[0].endpoint, user, key, NULL);
        const char *out = wait_log(i, denied);
        cr_assert(strstr(out, denied), "watch of %s as '%s' %s: %s", key, user,
                  i == 1 ? "through the proxy" : "on the member", out);
        kvt_proc_kill9(&g_w[i]);
    }
}

/* Client Watch streams the proxy's gRPC server has started. */
static double proxy_watch_streams_started(void)
{
    char *body = NULL;
    int st = 0;
    cr_assert_eq(kvt_http_get(g_x.metrics_port, "/metrics", 5000, &st, &body), 0);
    cr_assert_eq(st, 200);
    double v = px_metric_sum_text(body, "grpc_server_started_total", "grpc_method=\"Watch\"");
    free(body);
    return v;
}

/* Users root and bob (read on a/ --prefix), auth enabled, through the proxy. */
static void auth_with_bob(void)
{
    CTL_OK("user", "add", "root:rootpw");
    CTL_OK("user", "grant-role", "root", "root");
    CTL_OK("user", "add", "bob:pw");
    CTL_OK("role", "add", "r");
    CTL_OK("role", "grant-permission", "r", "read", "a/", "--prefix=true");
    CTL_OK("user", "grant-role", "bob", "r");
    CTL_OK("auth", "enable");
}

static double upstream_streams(void)
{
    return px_metric(&g_x, "kvd_proxy_watch_upstream_streams");
}

static void wait_metric(const char *series, double want)
{
    uint64_t end = kvt_now_ms() + 10000;
    while (px_metric(&g_x, series) != want && kvt_now_ms() < end)
        kvt_sleep_ms(50);
    cr_assert_eq(px_metric(&g_x, series), want, "%s", series);
}

Test(proxy_watch_md, watches_are_checked_as_their_user, .init = setup, .fini = fini, .timeout = 120)
{
    if (kvt_target_from_env() != KV_TEST_SERVER_KVD)
        cr_skip_test("etcd 3.4's proxy refuses every watcher with auth on (token-less streams)");
    auth_with_bob();

    /* allowed: bob watches a/ and sees root's put */
    spawn_watch(0, g_x.endpoint, "bob:pw", "a/", "--prefix");
    wait_metric("kvd_proxy_watchers", 1);
    double base = upstream_streams();
    cr_assert_geq(base, 1, "bob's watcher has no upstream stream");
    /* the watcher's Created has come back once the upstream watcher is counted */
    wait_metric("kvd_proxy_watch_upstream_watchers", 1);
    CTL_OK("--user=root:rootpw", "put", "a/1", "v1");
    const char *out = wait_log(0, "v1");
    cr_assert(strstr(out, "PUT\na/1\nv1"), "bob's watch through the proxy: %s", out);

    /* refused: a key outside bob's permission, and no user; as the member answers directly */
    expect_denied("bob:pw", "z");
    expect_denied("", "a/1");

    /* bob's stream goes with his last watcher */
    double with_bob = upstream_streams();
    kvt_proc_kill9(&g_w[0]);
    wait_metric("kvd_proxy_watchers", 0);
    wait_metric("kvd_proxy_watch_upstream_streams", with_bob - 1);
    CTL_OK("--user=root:rootpw", "auth", "disable");
}

Test(proxy_watch_md, hasleader_watch_ends_without_a_leader, .init = setup3, .fini = fini,
     .timeout = 120)
{
    if (kvt_target_from_env() != KV_TEST_SERVER_KVD)
        cr_skip_test("etcd 3.4.23's proxy keeps such a watch open (seen: still open after 40 s)");
    spawn_watch(0, g_x.endpoint, "", "k", NULL);      /* etcdctl watch: WithRequireLeader */
    spawn_watch(1, g_c.m[0].endpoint, "", "k", NULL); /* the same on the member directly */
    /* puts until the watch shows one (it is created when it does; no kvd metric: this test
     * also runs against etcd's proxy) */
    const char *out = "";
    uint64_t ready = kvt_now_ms() + 15000;
    while (!strstr(out, "PUT\nk\nv1") && kvt_now_ms() < ready) {
        kvt_cmd_result r;
        cr_assert_eq(px_ctl(&g_x, 20000, &r, "put", "k", "v1", NULL), 0);
        kvt_cmd_result_free(&r);
        kvt_sleep_ms(200);
        out = wait_log(0, "");
    }
    cr_assert(strstr(out, "PUT\nk\nv1"), "the watch before the cut: %s", out);
    uint64_t t0 = kvt_now_ms();
    cr_assert_eq(kvt_member_kill9(&g_c, 1), 0);
    cr_assert_eq(kvt_member_kill9(&g_c, 2), 0);
    uint64_t end = t0 + 30000;
    while (kvt_proc_alive(&g_w[0]) && kvt_now_ms() < end)
        kvt_sleep_ms(100);
    out = wait_log(0, "no leader");
    cr_assert(strstr(out, "etcdserver: no leader"), "through the proxy, after %llu ms: %s",
              (unsigned long long)(kvt_now_ms() - t0), out);
    out = wait_log(1, "no leader");
    cr_assert(strstr(out, "etcdserver: no leader"), "on the member: %s", out);
}

Test(proxy_watch_md, a_users_watch_survives_the_upstream_members_death, .init = setup3_all,
     .fini = fini, .timeout = 120)
{
    if (kvt_target_from_env() != KV_TEST_SERVER_KVD)
        cr_skip_test("etcd 3.4's proxy refuses every watcher with auth on (token-less streams)");
    auth_with_bob();
    spawn_watch(0, g_x.endpoint, "bob:pw", "a/", "--prefix");
    wait_metric("kvd_proxy_watch_upstream_watchers", 1);
    CTL_OK("--user=root:rootpw", "put", "a/1", "v1");
    const char *out = wait_log(0, "v1");
    cr_assert(strstr(out, "PUT\na/1\nv1"), "bob's watch before the kill: %s", out);
    double started = proxy_watch_streams_started();
    cr_assert_eq(started, 1, "%g client Watch streams", started);

    cr_assert_eq(kvt_member_kill9(&g_c, 0), 0); /* the proxy's upstream member */
    /* root's put through the proxy: retried while the proxy moves to the next member */
    uint64_t end = kvt_now_ms() + 30000;
    int put = 0;
    while (!put && kvt_now_ms() < end) {
        kvt_cmd_result r;
        cr_assert_eq(px_ctl(&g_x, 20000, &r, "--user=root:rootpw", "put", "a/2", "v2", NULL), 0);
        put = r.exit_code == 0;
        kvt_cmd_result_free(&r);
        if (!put)
            kvt_sleep_ms(200);
    }
    cr_assert(put, "no put through the proxy after the kill");
    out = wait_log(0, "v2");
    cr_assert(strstr(out, "PUT\na/2\nv2"), "bob's watch after the kill: %s", out);
    cr_assert(!strstr(out, "canceled") && !strstr(out, "invalid auth token"), "%s", out);
    cr_assert(kvt_proc_alive(&g_w[0]), "bob's etcdctl watch exited: %s", out);
    cr_assert_geq(px_metric(&g_x, "kvd_proxy_watch_resumed_total"), 1, "not resumed");
    cr_assert_eq(proxy_watch_streams_started(), started, "the client watched again");
}
