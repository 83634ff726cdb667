/*
 * test_auth_flood.c - logins survive a flood of wrong passwords (docs/ARCHITECTURE.md
 * "Authentication", the fair hash queue of auth/auth_fairq.h): 100 connections keep an
 * Authenticate with a wrong password for root in flight at all times (default hash cost and
 * --auth-max-pending-hashes 64); once a second a new connection logs in as root with the right
 * password. Most logins must succeed within a generous 30 s (etcd 3.4 lets 5 of 5 through).
 * Counts, no latencies: bench/auth measures the times, at the default hash cost.
 */
#include <criterion/criterion.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth_ctl_util.h"
#include "auth_flood.h"
#include "harness.h"

static kv_it_server g_kvd;
static int g_up;

static void fini(void)
{
    if (g_up)
        kv_it_server_destroy(&g_kvd);
    g_up = 0;
}

static int ctl(const char *cmd, char *out, size_t cap)
{
    char bin[PATH_MAX];
    cr_assert_eq(kv_it_etcdctl_bin(bin, sizeof bin), 0, "etcdctl not found: %s", bin);
    return acu_etcdctl(bin, g_kvd.endpoint, NULL, cmd, out, cap);
}

Test(auth_flood, legitimate_logins_survive_wrong_password_flood, .fini = fini, .timeout = 300)
{
    /* a cheaper hash than the default (100,000 rounds) so that a starved worker on a loaded
     * 2-core machine (ASan) still gets through a few checks in the login timeout; the queue
     * is as full as with the default: 100 connections for 64 places, re-sent at once */
    static const char *const extra[] = {"--auth-hash-iterations=20000", NULL};
    cr_assert_eq(kv_it_server_init(&g_kvd, KV_IT_KVD, extra), 0);
    g_up = 1;
    cr_assert_eq(kv_it_server_start(&g_kvd, 20000), 0);
    static char o[8192];
    cr_assert_eq(ctl("user add root --new-user-password=rootpw", o, sizeof o), 0, "%s", o);
    cr_assert_eq(ctl("user add alice --new-user-password=alicepw", o, sizeof o), 0, "%s", o);
    cr_assert_eq(ctl("auth enable", o, sizeof o), 0, "%s", o);
    af_opts fo = {.port = g_kvd.client_port,
                  .flood_user = "root",
                  .flood_pw = "wrong",
                  .user = "root",
                  .pw = "rootpw",
                  .n_flood = 100,
                  .n_logins = 10,
                  .warmup_ms = 3000,
                  .interval_ms = 1000,
                  .login_timeout_ms = 30000};
    af_result r;
    cr_assert_eq(af_run(&fo, &r), 0);
    fprintf(stderr,
            "auth flood (root, same user): %d of %d logins ok (%d too many requests, %d other), "
            "max %llu ms; flood: %d conns, %llu answers, %llu wrong-password checks\n",
            r.logins_ok, fo.n_logins, r.logins_refused, r.logins_other,
            (unsigned long long)r.login_max_ms, r.flood_conns, (unsigned long long)r.flood_answers,
            (unsigned long long)r.flood_failed);
    cr_assert_eq(r.flood_conns, 100);
    /* the flood saturated the hash queue: its calls were checked (wrong password) or shed */
    cr_assert_gt(r.flood_failed, 0);
    cr_assert_gt(r.flood_answers, 1000);
    cr_assert_geq(r.logins_ok, 8, "%d of 10 legitimate logins during the flood", r.logins_ok);
    /* another user's login during a flood on root */
    fo.user = "alice";
    fo.pw = "alicepw";
    fo.n_logins = 5;
    fo.warmup_ms = 500;
    cr_assert_eq(af_run(&fo, &r), 0);
    fprintf(stderr, "auth flood (alice, other user): %d of %d logins ok, max %llu ms\n",
            r.logins_ok, fo.n_logins, (unsigned long long)r.login_max_ms);
    cr_assert_geq(r.logins_ok, 4, "%d of 5 logins of another user during the flood", r.logins_ok);
    /* the server is still well: the flood's hashes are shed, not wedged */
    cr_assert_eq(ctl("--user root:rootpw user list", o, sizeof o), 0, "%s", o);
}
