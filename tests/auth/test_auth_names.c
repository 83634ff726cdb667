/*
 * test_auth_names.c - user and role names of any length, as etcd 3.4 accepts them, through
 * kvd with real etcdctl 3.4: names of 1,000 bytes (over LMDB's 511-byte key limit: kept under
 * a prefix + SHA-256 key, mvcc/auth_store.h) can be added, read, listed in name order among
 * short ones, granted, used to authenticate and write, and deleted; a name over kvd's bound
 * (KV_AUTH_MAX_NAME, 4,096 bytes) gets "etcdserver: request is too large", not a wrong
 * "user name is empty".
 */
#include <criterion/criterion.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kvt_proc.h"

static kv_it_server g_kvd;
static int g_up;

static void fini(void)
{
    if (g_up)
        kv_it_server_destroy(&g_kvd);
    g_up = 0;
}

/* etcdctl with the given words (NULL-terminated) and optional --user; output in out (stdout
 * then stderr). Returns the exit code. */
static int ctl(char *out, size_t cap, const char *user, const char *const *words)
{
    char bin[PATH_MAX], ep[160], ua[8300];
    cr_assert_eq(kv_it_etcdctl_bin(bin, sizeof bin), 0, "etcdctl not found: %s", bin);
    snprintf(ep, sizeof ep, "--endpoints=%s", g_kvd.endpoint);
    const char *argv[16] = {bin, ep, "--command-timeout=10s"};
    int n = 3;
    if (user) {
        snprintf(ua, sizeof ua, "--user=%s", user);
        argv[n++] = ua;
    }
    for (int i = 0; words[i] && n < 15; i++)
        argv[n++] = words[i];
    argv[n] = NULL;
    const char *env[] = {"ETCDCTL_API=3", NULL};
    kvt_cmd_result r;
    cr_assert_eq(kvt_run(argv, env, NULL, 0, 30000, &r), 0);
    snprintf(out, cap, "%s%s", r.out, r.err);
    int code = r.exit_code;
    kvt_cmd_result_free(&r);
    return code;
}

#define W(...) ((const char *const[]){__VA_ARGS__, NULL})

Test(auth_names, long_user_and_role_names, .fini = fini, .timeout = 180)
{
    static const char *const extra[] = {"--auth-hash-iterations=2000", NULL};
    cr_assert_eq(kv_it_server_init(&g_kvd, KV_IT_KVD, extra), 0);
    g_up = 1;
    cr_assert_eq(kv_it_server_start(&g_kvd, 20000), 0);

    static char lu[1001], lr[1001], lu2[701], big[5001], o[65536], cred[1100];
    memset(lu, 'm', 1000); /* sorts after "b", before "z" */
    memset(lr, 'r', 1000);
    memset(lu2, 'm', 700); /* a prefix of lu: sorts right before it */
    memset(big, 'x', 5000);
    cr_assert_eq(ctl(o, sizeof o, NULL, W("user", "add", "root", "--new-user-password=rootpw")), 0,
                 "%s", o);
    cr_assert_eq(ctl(o, sizeof o, NULL, W("user", "add", "z", "--new-user-password=pw")), 0);
    cr_assert_eq(ctl(o, sizeof o, NULL, W("user", "add", lu, "--new-user-password=pw")), 0,
                 "a 1,000-byte user name: %s", o);
    cr_assert_eq(ctl(o, sizeof o, NULL, W("user", "add", "b", "--new-user-password=pw")), 0);
    cr_assert_eq(ctl(o, sizeof o, NULL, W("user", "add", lu2, "--new-user-password=pw")), 0);
    cr_assert_neq(ctl(o, sizeof o, NULL, W("user", "add", lu, "--new-user-password=pw")), 0);
    cr_assert(strstr(o, "user name already exists"), "a second add: %s", o);

    /* listed once each, in name order */
    cr_assert_eq(ctl(o, sizeof o, NULL, W("user", "list")), 0, "%s", o);
    char *pb = strstr(o, "b\n"), *p2 = strstr(o, lu2), *p1 = strstr(p2 ? p2 + 701 : o, lu),
         *pr = strstr(o, "root\n"), *pz = strstr(o, "z\n");
    cr_assert(pb && p2 && p1 && pr && pz, "user list misses a name: %.200s", o);
    cr_assert(pb < p2 && p2 < p1 && p1 < pr && pr < pz, "user list out of order");

    cr_assert_eq(ctl(o, sizeof o, NULL, W("role", "add", lr)), 0, "a 1,000-byte role: %s", o);
    cr_assert_eq(
        ctl(o, sizeof o, NULL, W("role", "grant-permission", lr, "readwrite", "n/", "--prefix")), 0,
        "%s", o);
    cr_assert_eq(ctl(o, sizeof o, NULL, W("user", "grant-role", lu, lr)), 0, "%s", o);
    cr_assert_eq(ctl(o, sizeof o, NULL, W("user", "get", lu)), 0, "%s", o);
    cr_assert(strstr(o, lr), "user get does not show the long role: %.200s", o);
    cr_assert_eq(ctl(o, sizeof o, NULL, W("role", "list")), 0, "%s", o);
    cr_assert(strstr(o, lr), "role list misses the long role");

    /* the long user authenticates and writes where its long role allows */
    cr_assert_eq(ctl(o, sizeof o, NULL, W("auth", "enable")), 0, "%s", o);
    snprintf(cred, sizeof cred, "%s:pw", lu);
    cr_assert_eq(ctl(o, sizeof o, cred, W("put", "n/1", "v")), 0, "long user put: %s", o);
    cr_assert_neq(ctl(o, sizeof o, cred, W("put", "q/1", "v")), 0);
    cr_assert(strstr(o, "permission denied"), "%s", o);

    /* deleted like any other; a name over the bound is refused clearly */
    cr_assert_eq(ctl(o, sizeof o, "root:rootpw", W("user", "delete", lu)), 0, "%s", o);
    cr_assert_neq(ctl(o, sizeof o, "root:rootpw", W("user", "get", lu)), 0);
    cr_assert(strstr(o, "user name not found"), "%s", o);
    cr_assert_neq(ctl(o, sizeof o, "root:rootpw", W("user", "add", big, "--new-user-password=pw")),
                  0);
    cr_assert(strstr(o, "request is too large"), "a 5,000-byte name: %.300s", o);
    cr_assert_eq(ctl(o, sizeof o, "root:rootpw", W("role", "delete", lr)), 0, "%s", o);
}
