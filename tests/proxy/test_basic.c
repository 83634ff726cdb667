/*
 * proxy_basic: clients through `kvd grpc-proxy start` in front of a 1-member kvd cluster,
 * unchanged:
 *   - etcdctl 3.4 (Debian's etcd-client): put, get (linearizable and serializable), txn, del,
 *     lease grant / keep-alive --once / timetolive / list / revoke, member list, endpoint
 *     status, watch (an event put through the proxy), and an error relayed verbatim
 *     (keep-alive of a revoked lease: etcd's text);
 *   - libkvclient: put, get, a txn, a lease and its keepalive on one connection to the proxy;
 *   - kvctl: put and get.
 * Every unary call goes up (kvd_proxy_unary_forwarded_total grows) and the upstream member
 * sees the proxy as one connection.
 */
#include "px_util.h"

#include "kvclient.h"

#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static kvt_cluster g_c;
static px g_x;

static void fini(void)
{
    px_stop(&g_x);
    kvt_cluster_destroy(&g_c);
}

static void setup(void)
{
    cr_assert_eq(px_cluster_start(&g_c, 1), 0, "cluster");
    cr_assert_eq(px_start(&g_x, &g_c, NULL, 0, NULL), 0, "proxy");
}

#define CTL_OK(res, ...)                                                                           \
    do {                                                                                           \
        cr_assert_eq(px_ctl(&g_x, 15000, &(res), __VA_ARGS__, NULL), 0);                           \
        cr_assert_eq((res).exit_code, 0, "etcdctl failed: %s %s", (res).out, (res).err);           \
    } while (0)

Test(proxy_basic, etcdctl_through_the_proxy, .init = setup, .fini = fini, .timeout = 180)
{
    kvt_cmd_result r;
    CTL_OK(r, "put", "k1", "v1");
    cr_assert(strstr(r.out, "OK"), "%s", r.out);
    kvt_cmd_result_free(&r);
    CTL_OK(r, "get", "k1");
    cr_assert_str_eq(r.out, "k1\nv1\n");
    kvt_cmd_result_free(&r);
    CTL_OK(r, "get", "k1", "--consistency=s", "--print-value-only");
    cr_assert_str_eq(r.out, "v1\n");
    kvt_cmd_result_free(&r);
    CTL_OK(r, "del", "k1");
    cr_assert_str_eq(r.out, "1\n");
    kvt_cmd_result_free(&r);

    CTL_OK(r, "lease", "grant", "60");
    char id[32] = "";
    cr_assert_eq(sscanf(r.out, "lease %31s granted with TTL(60s)", id), 1, "%s", r.out);
    kvt_cmd_result_free(&r);
    CTL_OK(r, "lease", "keep-alive", "--once", id);
    char want[96];
    snprintf(want, sizeof want, "lease %s keepalived with TTL(60)", id);
    cr_assert(strstr(r.out, want), "%s", r.out);
    kvt_cmd_result_free(&r);
    CTL_OK(r, "lease", "timetolive", id);
    snprintf(want, sizeof want, "lease %s granted with TTL(60s), remaining(", id);
    cr_assert(strstr(r.out, want), "%s", r.out);
    kvt_cmd_result_free(&r);
    CTL_OK(r, "lease", "list");
    cr_assert(strstr(r.out, id), "%s", r.out);
    kvt_cmd_result_free(&r);
    CTL_OK(r, "put", "leased", "x", "--lease", id);
    kvt_cmd_result_free(&r);
    CTL_OK(r, "lease", "revoke", id);
    kvt_cmd_result_free(&r);
    /* the member's error, relayed verbatim */
    cr_assert_eq(px_ctl(&g_x, 15000, &r, "lease", "timetolive", id, NULL), 0);
    cr_assert(strstr(r.out, "already expired"), "out %s err %s", r.out, r.err);
    kvt_cmd_result_free(&r);
    cr_assert_eq(px_ctl(&g_x, 15000, &r, "lease", "revoke", id, NULL), 0);
    cr_assert_neq(r.exit_code, 0);
    cr_assert(strstr(r.err, "etcdserver: requested lease not found"), "%s", r.err);
    kvt_cmd_result_free(&r);

    CTL_OK(r, "member", "list");
    cr_assert(strstr(r.out, "m0"), "%s", r.out);
    kvt_cmd_result_free(&r);
    CTL_OK(r, "endpoint", "status");
    cr_assert(strstr(r.out, g_x.endpoint), "%s", r.out);
    kvt_cmd_result_free(&r);

    /* txn from stdin is awkward through px_ctl: use a compare on a missing key */
    CTL_OK(r, "put", "t", "1");
    kvt_cmd_result_free(&r);
    {
        const char *ctl = "/usr/bin/etcdctl";
        char ep[64];
        snprintf(ep, sizeof ep, "--endpoints=%s", g_x.endpoint);
        const char *argv[] = {ctl, ep, "txn", NULL};
        const char *env[] = {"ETCDCTL_API=3", NULL};
        const char *in = "value(\"t\") = \"1\"\n\nput t 2\n\nput t 3\n\n";
        cr_assert_eq(kvt_run(argv, env, in, strlen(in), 15000, &r), 0);
        cr_assert_eq(r.exit_code, 0, "%s", r.err);
        cr_assert(strstr(r.out, "SUCCESS"), "%s", r.out);
        kvt_cmd_result_free(&r);
    }
    CTL_OK(r, "get", "t", "--print-value-only");
    cr_assert_str_eq(r.out, "2\n");
    kvt_cmd_result_free(&r);

    /* watch: an event put through the proxy arrives through the proxy */
    kvt_proc w;
    char wlog[PATH_MAX];
    snprintf(wlog, sizeof wlog, "%.4000s/watch.log", g_c.root.path);
    kvt_proc_init(&w, wlog);
    w.no_banner = 1;
    char ep[64];
    snprintf(ep, sizeof ep, "--endpoints=%s", g_x.endpoint);
    const char *wargv[] = {"/usr/bin/etcdctl", ep, "watch", "wk", NULL};
    const char *wenv[] = {"ETCDCTL_API=3", NULL};
    cr_assert_eq(kvt_proc_spawn_env(&w, wargv, wenv), 0);
    uint64_t end = kvt_now_ms() + 10000;
    while (px_metric(&g_x, "kvd_proxy_watch_streams") < 1 && kvt_now_ms() < end)
        kvt_sleep_ms(20);
    kvt_sleep_ms(200); /* the watcher's creation goes up and is acknowledged */
    CTL_OK(r, "put", "wk", "hello");
    kvt_cmd_result_free(&r);
    char buf[256] = "";
    end = kvt_now_ms() + 10000;
    while (!strstr(buf, "hello") && kvt_now_ms() < end) {
        FILE *f = fopen(wlog, "r");
        if (f) {
            size_t n = fread(buf, 1, sizeof buf - 1, f);
            buf[n] = 0;
            fclose(f);
        }
        kvt_sleep_ms(20);
    }
    kvt_proc_kill9(&w);
    cr_assert(strstr(buf, "PUT\nwk\nhello"), "watch output: %s", buf);
    cr_assert(px_metric(&g_x, "kvd_proxy_unary_forwarded_total") >= 15);
}

Test(proxy_basic, libkvclient_and_kvctl_through_the_proxy, .init = setup, .fini = fini,
     .timeout = 180)
{
    kvc_client *c = px_client(g_x.endpoint);
    kvc_error e;
    cr_assert_eq(kvc_put(c, "a", 1, "1", 1, NULL, 5000, NULL, &e), 0, "%s", e.message);
    kvc_range_result rr;
    cr_assert_eq(kvc_get(c, "a", 1, NULL, 5000, &rr, &e), 0, "%s", e.message);
    cr_assert_eq(rr.n_kvs, 1);
    cr_assert_eq(memcmp(rr.kvs[0].value, "1", 1), 0);
    kvc_range_result_free(&rr);
    kvc_txn *t = kvc_txn_new();
    cr_assert_not_null(t);
    cr_assert_eq(kvc_txn_cmp_value(t, "a", 1, KVC_CMP_EQUAL, "1", 1), 0);
    cr_assert_eq(kvc_txn_put(t, KVC_TXN_SUCCESS, "b", 1, "2", 1, NULL), 0);
    kvc_txn_result tr;
    cr_assert_eq(kvc_txn_commit(c, t, 0, 5000, &tr, &e), 0, "%s", e.message);
    cr_assert_eq(tr.succeeded, 1);
    kvc_txn_result_free(&tr);
    kvc_txn_free(t);

    kvc_lease_grant_result g;
    cr_assert_eq(kvc_lease_grant(c, 3, 0, 0, 5000, &g, &e), 0, "%s", e.message);
    kvc_keepalive *ka = NULL;
    cr_assert_eq(kvc_lease_keepalive(c, g.id, 3, NULL, NULL, &ka, &e), 0, "%s", e.message);
    kvt_sleep_ms(4500); /* longer than the TTL: only the proxied renewals keep it */
    cr_assert_eq(kvc_keepalive_lost(ka), 0);
    kvc_lease_ttl_result tl;
    cr_assert_eq(kvc_lease_time_to_live(c, g.id, 0, 5000, &tl, &e), 0, "%s", e.message);
    cr_assert(tl.ttl > 0, "ttl %lld", (long long)tl.ttl);
    kvc_lease_ttl_result_free(&tl);
    kvc_keepalive_stop(ka);
    kvc_close(c);

    /* kvctl */
    char kvctl[PATH_MAX];
    const char *bd = getenv("KV_BUILD_DIR");
    snprintf(kvctl, sizeof kvctl, "%.4000s/client/kvctl", bd ? bd : "build");
    char ep[64];
    snprintf(ep, sizeof ep, "--endpoints=%s", g_x.endpoint);
    kvt_cmd_result r;
    const char *put[] = {kvctl, ep, "put", "kk", "vv", NULL};
    cr_assert_eq(kvt_run(put, NULL, NULL, 0, 15000, &r), 0);
    cr_assert_eq(r.exit_code, 0, "kvctl put: %s %s", r.out, r.err);
    kvt_cmd_result_free(&r);
    const char *get[] = {kvctl, ep, "get", "kk", NULL};
    cr_assert_eq(kvt_run(get, NULL, NULL, 0, 15000, &r), 0);
    cr_assert_eq(r.exit_code, 0, "kvctl get: %s", r.err);
    cr_assert_str_eq(r.out, "kk\nvv\n");
    kvt_cmd_result_free(&r);
}
