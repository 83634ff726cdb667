/*
 * test_auth_cluster.c - auth state is replicated state: users, roles, grants and the
 * enabled flag changed through any member apply on every member (raft proposals applied in
 * server/apply/apply_auth.c), each member enforces them with its own tokens, and a restarted
 * follower keeps them (LMDB).
 */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvt_cluster.h"

static kvt_cluster g_c;
static int g_up;

static void fini(void)
{
    if (g_up)
        kvt_cluster_destroy(&g_c);
    g_up = 0;
}

/* etcdctl against member i: exit code; out = stdout + stderr without JSON warnings. */
static int ctl(int i, const char *cmd, char *out, size_t cap)
{
    char ep[64], buf[512];
    snprintf(ep, sizeof ep, "--endpoints=%s", g_c.m[i].endpoint);
    snprintf(buf, sizeof buf, "%s", cmd);
    const char *argv[20] = {g_c.ctl, ep};
    int n = 2;
    for (char *save = NULL, *w = strtok_r(buf, " ", &save); w && n < 19;
         w = strtok_r(NULL, " ", &save))
        argv[n++] = w;
    argv[n] = NULL;
    static const char *const env[] = {"ETCDCTL_API=3", NULL};
    kvt_cmd_result r;
    cr_assert_eq(kvt_run(argv, env, NULL, 0, 30000, &r), 0);
    size_t o = 0;
    out[0] = 0;
    const char *parts[2] = {r.out, r.err};
    for (int p = 0; p < 2; p++)
        for (const char *line = parts[p]; line && *line;) {
            const char *nl = strchr(line, '\n');
            size_t len = nl ? (size_t)(nl - line + 1) : strlen(line);
            if (strncmp(line, "{\"level\"", 8) != 0 && o + len < cap) {
                memcpy(out + o, line, len);
                o += len;
                out[o] = 0;
            }
            line += len;
        }
    int code = r.timed_out ? 999 : r.exit_code;
    kvt_cmd_result_free(&r);
    return code;
}

static void check_member(int i)
{
    char o[4096];
    cr_assert_neq(ctl(i, "get /a/x", o, sizeof o), 0, "member %d", i);
    cr_assert(strstr(o, "etcdserver: user name is empty"), "member %d: %s", i, o);
    cr_assert_eq(ctl(i, "--user ann:annpw get /a/x", o, sizeof o), 0, "member %d: %s", i, o);
    cr_assert(strstr(o, "/a/x\n"), "member %d: %s", i, o);
    cr_assert_neq(ctl(i, "--user ann:annpw put /a/x 2", o, sizeof o), 0, "member %d", i);
    cr_assert(strstr(o, "etcdserver: permission denied"), "member %d: %s", i, o);
    cr_assert_eq(ctl(i, "--user root:rootpw user list", o, sizeof o), 0, "member %d: %s", i, o);
    cr_assert_str_eq(o, "ann\nroot\n", "member %d", i);
}

Test(auth_cluster, replicated_enforced_everywhere_and_durable, .fini = fini, .timeout = 300)
{
    kvt_cluster_opts o;
    kvt_cluster_opts_default(&o, 3);
    o.target = KVT_TARGET_KVD;
    o.kvd_args = (const char *const[]){"--auth-hash-iterations=2000", NULL};
    cr_assert_eq(kvt_cluster_init(&g_c, &o), 0);
    g_up = 1;
    cr_assert_eq(kvt_cluster_start(&g_c, 30000), 0, "cluster start");
    cr_assert_geq(kvt_cluster_wait_writable(&g_c, 30000), 0);
    char out[4096];
    /* each change through a different member */
    cr_assert_eq(ctl(0, "user add root --new-user-password=rootpw", out, sizeof out), 0, "%s", out);
    cr_assert_eq(ctl(1, "role add ro", out, sizeof out), 0, "%s", out);
    cr_assert_eq(ctl(2, "role grant-permission ro read /a/ --prefix", out, sizeof out), 0, "%s",
                 out);
    cr_assert_eq(ctl(0, "user add ann --new-user-password=annpw", out, sizeof out), 0, "%s", out);
    cr_assert_eq(ctl(1, "user grant-role ann ro", out, sizeof out), 0, "%s", out);
    cr_assert_eq(ctl(2, "auth enable", out, sizeof out), 0, "%s", out);
    cr_assert_eq(ctl(0, "--user root:rootpw put /a/x 1", out, sizeof out), 0, "%s", out);
    for (int i = 0; i < 3; i++)
        check_member(i);
    /* a follower restarted from its own data dir keeps users, roles and the flag */
    int leader = kvt_cluster_leader(&g_c);
    int f = leader == 0 ? 1 : 0;
    cr_assert_eq(kvt_member_restart(&g_c, f, 30000), 0, "restart member %d", f);
    /* (kvt_cluster_wait_writable puts anonymously: refused with auth on) */
    int ok = 0;
    for (int t = 0; t < 60 && !ok; t++)
        ok = ctl(f, "--user root:rootpw put /a/y 1", out, sizeof out) == 0;
    cr_assert(ok, "restarted member %d does not take writes: %s", f, out);
    check_member(f);
}
