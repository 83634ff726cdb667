/*
 * test_auth_ctl.c - etcd v3 authentication (issue 13 section 2) driven by real etcdctl 3.4
 * (ETCDCTL_API=3) and a raw gRPC client:
 *   - one etcdctl session (users, roles, prefix grants, auth enable, --user, denied writes
 *     and reads outside the prefix, root protections, auth disable) run against kvd AND a
 *     real etcd 3.4 (/usr/bin/etcd), every command's output compared line by line;
 *   - users, roles and the enabled flag survive a restart;
 *   - simple tokens expire after --auth-token-ttl without use, are renewed by use, and die
 *     with a password change;
 *   - the password hash queue is bounded: a flood of Authenticate calls gets "etcdserver: too
 *     many requests" for the excess while lease keepalives stay fast.
 * Each test starts its own servers (tests/integration/harness.h).
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grpc_raw.h"
#include "harness.h"
#include "rpc.pb-c.h"

#define MAXARGS 24

static kv_it_server g_kvd, g_etcd;
static int g_kvd_up, g_etcd_up;

static void fini(void)
{
    if (g_kvd_up)
        kv_it_server_destroy(&g_kvd);
    if (g_etcd_up)
        kv_it_server_destroy(&g_etcd);
    g_kvd_up = g_etcd_up = 0;
}

static void start(kv_it_server *s, int *up, kv_it_kind kind, const char *const *extra)
{
    cr_assert_eq(kv_it_server_init(s, kind, extra), 0, "init %s", kv_it_kind_name(kind));
    *up = 1;
    int rc = kv_it_server_start(s, 20000);
    if (rc) {
        char *log = NULL;
        kv_it_server_log(s, &log);
        cr_log_error("%s did not start (%d):\n%s", kv_it_kind_name(kind), rc, log ? log : "");
        free(log);
    }
    cr_assert_eq(rc, 0);
}

/* etcdctl against s with the whitespace-separated words of cmd ("{}" in a word is not
 * special); output = stdout + stderr without clientv3's JSON retry warnings. Returns the
 * exit code. */
static int ctl(const kv_it_server *s, char *out, size_t cap, const char *stdin_data,
               const char *cmd)
{
    char bin[PATH_MAX], ep[96], buf[1024];
    cr_assert_eq(kv_it_etcdctl_bin(bin, sizeof bin), 0, "etcdctl not found: %s", bin);
    snprintf(ep, sizeof ep, "--endpoints=%s", s->endpoint);
    snprintf(buf, sizeof buf, "%s", cmd);
    const char *argv[MAXARGS];
    int n = 0;
    argv[n++] = bin;
    argv[n++] = ep;
    for (char *save = NULL, *w = strtok_r(buf, " ", &save); w && n < MAXARGS - 1;
         w = strtok_r(NULL, " ", &save))
        argv[n++] = w;
    argv[n] = NULL;
    static const char *const env[] = {"ETCDCTL_API=3", NULL};
    kv_it_cmd_result r;
    cr_assert_eq(kv_it_run(argv, env, stdin_data, stdin_data ? strlen(stdin_data) : 0, 30000, &r),
                 0);
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
    kv_it_cmd_result_free(&r);
    return code;
}

/* ---- the etcdctl session, compared with etcd ---- */

static const char *const session[] = {
    "user list",
    "auth enable",
    "user add root --new-user-password=rootpw",
    "user add root --new-user-password=x",
    "user add --new-user-password=x",
    "role add ro",
    "role add ro",
    "role grant-permission ro read /foo/ --prefix",
    "role grant-permission ro readwrite /rw/k",
    "role grant-permission nosuch read a",
    "user add alice --new-user-password=alicepw",
    "user grant-role alice ro",
    "user grant-role alice nosuch",
    "user grant-role bob ro",
    "role get ro",
    "user get alice",
    "role list",
    "user list",
    "auth enable",
    "put k v",
    "get k",
    "--user root:rootpw put /foo/a 1",
    "--user root:rootpw get /foo/a",
    "--user alice:alicepw get /foo/a",
    "--user alice:alicepw get /foo/ --prefix",
    "--user alice:alicepw get /foo/ --from-key",
    "--user alice:alicepw put /foo/b 2",
    "--user alice:alicepw put /rw/k 3",
    "--user alice:alicepw get /other",
    "--user alice:alicepw del /foo/a",
    "--user alice:alicepw del /rw/k",
    "--user alice:wrong get /foo/a",
    "--user nobody:pw get /foo/a",
    "--user alice:alicepw user list",
    "--user alice:alicepw role get ro",
    "--user alice:alicepw auth disable",
    "--user alice:alicepw compaction 1",
    "--user root:rootpw user delete root",
    "--user root:rootpw user revoke-role root root",
    "--user root:rootpw role delete root",
    "--user root:rootpw role get root",
    "--user root:rootpw user get root",
    "--user root:rootpw role revoke-permission ro /rw/k",
    "--user root:rootpw role revoke-permission ro /rw/k",
    "--user root:rootpw user revoke-role alice nosuch",
    "--user alice:alicepw put /rw/k 4",
    "--user root:rootpw role delete ro",
    "--user root:rootpw user get alice",
    "--user alice:alicepw get /foo/a",
    "--user root:rootpw user delete alice",
    "--user root:rootpw user get alice",
    "--user root:rootpw user delete alice",
    "--user root:rootpw auth disable",
    "get /foo/a",
    "user list",
    "role list",
};

Test(auth_ctl, etcdctl_session_matches_etcd, .fini = fini, .timeout = 300)
{
    start(&g_kvd, &g_kvd_up, KV_IT_KVD, (const char *const[]){"--auth-hash-iterations=2000", NULL});
    char bin[PATH_MAX];
    int have_etcd = kv_it_server_bin(KV_IT_ETCD, bin, sizeof bin) == 0;
    if (have_etcd)
        start(&g_etcd, &g_etcd_up, KV_IT_ETCD, NULL);
    else
        cr_log_warn("no etcd at %s: kvd's answers are checked against the expected ones only", bin);
    static char a[16384], b[16384];
    for (size_t i = 0; i < sizeof session / sizeof session[0]; i++) {
        int ca = ctl(&g_kvd, a, sizeof a, NULL, session[i]);
        if (have_etcd) {
            int cb = ctl(&g_etcd, b, sizeof b, NULL, session[i]);
            cr_expect_eq(ca, cb, "`etcdctl %s`: exit %d (kvd) vs %d (etcd)", session[i], ca, cb);
            cr_expect_str_eq(a, b, "`etcdctl %s`:\n--- kvd:\n%s--- etcd:\n%s", session[i], a, b);
        }
    }
    /* the key facts, also without etcd */
    ctl(&g_kvd, a, sizeof a, NULL, "user list");
    cr_assert_str_eq(a, "root\n");
}

Test(auth_ctl, expected_answers, .fini = fini, .timeout = 120)
{
    start(&g_kvd, &g_kvd_up, KV_IT_KVD, (const char *const[]){"--auth-hash-iterations=2000", NULL});
    static char o[8192];
    cr_assert_eq(ctl(&g_kvd, o, sizeof o, NULL, "user list"), 0, "%s", o);
    cr_assert_str_eq(o, "", "auth disabled, no users: an empty list");
    cr_assert_neq(ctl(&g_kvd, o, sizeof o, NULL, "auth enable"), 0);
    cr_assert(strstr(o, "Error: etcdserver: root user does not exist"), "%s", o);
    ctl(&g_kvd, o, sizeof o, NULL, "user add root --new-user-password=rootpw");
    ctl(&g_kvd, o, sizeof o, NULL, "role add ro");
    ctl(&g_kvd, o, sizeof o, NULL, "role grant-permission ro read /foo/ --prefix");
    ctl(&g_kvd, o, sizeof o, NULL, "user add ann --new-user-password=annpw");
    ctl(&g_kvd, o, sizeof o, NULL, "user grant-role ann ro");
    cr_assert_eq(ctl(&g_kvd, o, sizeof o, NULL, "auth enable"), 0, "%s", o);
    cr_assert_str_eq(o, "Authentication Enabled\n");
    cr_assert_neq(ctl(&g_kvd, o, sizeof o, NULL, "put k v"), 0);
    cr_assert(strstr(o, "etcdserver: user name is empty"), "%s", o);
    cr_assert_eq(ctl(&g_kvd, o, sizeof o, NULL, "--user root:rootpw put /foo/x 1"), 0, "%s", o);
    cr_assert_eq(ctl(&g_kvd, o, sizeof o, NULL, "--user ann:annpw get /foo/x"), 0, "%s", o);
    cr_assert_str_eq(o, "/foo/x\n1\n");
    cr_assert_neq(ctl(&g_kvd, o, sizeof o, NULL, "--user ann:annpw put /foo/x 2"), 0);
    cr_assert(strstr(o, "Error: etcdserver: permission denied"), "write on a read grant: %s", o);
    cr_assert_neq(ctl(&g_kvd, o, sizeof o, NULL, "--user ann:annpw get /bar"), 0);
    cr_assert(strstr(o, "Error: etcdserver: permission denied"), "outside the prefix: %s", o);
    cr_assert_neq(ctl(&g_kvd, o, sizeof o, NULL, "--user ann:annpw watch /bar"), 0);
    cr_assert(strstr(o, "etcdserver: permission denied"), "watch outside the prefix: %s", o);
    cr_assert_neq(ctl(&g_kvd, o, sizeof o, NULL, "--user ann:annpw defrag"), 0);
    cr_assert(strstr(o, "permission denied"), "admin call: %s", o);
    cr_assert_eq(ctl(&g_kvd, o, sizeof o, NULL, "--user root:rootpw auth disable"), 0, "%s", o);
    cr_assert_eq(ctl(&g_kvd, o, sizeof o, NULL, "put k v"), 0, "%s", o);
}

Test(auth_ctl, restart_keeps_users_roles_and_auth, .fini = fini, .timeout = 180)
{
    start(&g_kvd, &g_kvd_up, KV_IT_KVD, (const char *const[]){"--auth-hash-iterations=2000", NULL});
    static char o[8192];
    ctl(&g_kvd, o, sizeof o, NULL, "user add root --new-user-password=rootpw");
    ctl(&g_kvd, o, sizeof o, NULL, "role add ro");
    ctl(&g_kvd, o, sizeof o, NULL, "role grant-permission ro read /foo/ --prefix");
    ctl(&g_kvd, o, sizeof o, NULL, "user add ann --new-user-password=annpw");
    ctl(&g_kvd, o, sizeof o, NULL, "user grant-role ann ro");
    cr_assert_eq(ctl(&g_kvd, o, sizeof o, NULL, "auth enable"), 0, "%s", o);
    cr_assert_eq(ctl(&g_kvd, o, sizeof o, NULL, "--user root:rootpw put /foo/x 1"), 0, "%s", o);
    cr_assert_eq(kv_it_server_restart(&g_kvd, 5000, 20000), 0, "restart");
    cr_assert_neq(ctl(&g_kvd, o, sizeof o, NULL, "get /foo/x"), 0, "auth still enabled");
    cr_assert(strstr(o, "user name is empty"), "%s", o);
    cr_assert_eq(ctl(&g_kvd, o, sizeof o, NULL, "--user ann:annpw get /foo/x"), 0, "%s", o);
    cr_assert_str_eq(o, "/foo/x\n1\n");
    cr_assert_neq(ctl(&g_kvd, o, sizeof o, NULL, "--user ann:annpw put /foo/x 2"), 0);
    cr_assert(strstr(o, "permission denied"), "%s", o);
    cr_assert_eq(ctl(&g_kvd, o, sizeof o, NULL, "--user root:rootpw user list"), 0, "%s", o);
    cr_assert_str_eq(o, "ann\nroot\n");
    cr_assert_eq(ctl(&g_kvd, o, sizeof o, NULL, "--user root:rootpw role get ro"), 0, "%s", o);
    cr_assert(strstr(o, "[/foo/, /foo0) (prefix /foo/)"), "%s", o);
}

/* ---- raw gRPC: tokens ---- */

static int authenticate(kv_it_grpc *c, const char *user, const char *pw, char *token, size_t cap,
                        char *msg, size_t msgcap)
{
    Etcdserverpb__AuthenticateRequest r = ETCDSERVERPB__AUTHENTICATE_REQUEST__INIT;
    r.name = (char *)user;
    r.password = (char *)pw;
    uint8_t buf[256], *resp = NULL;
    size_t n = etcdserverpb__authenticate_request__pack(&r, buf), rlen = 0;
    int status = -1;
    int rc = kv_it_grpc_call(c, "/etcdserverpb.Auth/Authenticate", buf, n, &resp, &rlen, 30000,
                             &status, msg, msgcap);
    if (rc == 0) {
        Etcdserverpb__AuthenticateResponse *ar =
            etcdserverpb__authenticate_response__unpack(NULL, rlen, resp);
        cr_assert_not_null(ar);
        snprintf(token, cap, "%s", ar->token);
        etcdserverpb__authenticate_response__free_unpacked(ar, NULL);
    }
    free(resp);
    return rc == 0 ? 0 : status;
}

/* Range of key with the token header: the grpc-status (0 = OK); msg gets grpc-message. */
static int range_with_token(kv_it_grpc *c, const char *token, const char *key, char *msg,
                            size_t cap)
{
    const char *md[] = {"token", token, NULL};
    kv_it_grpc_req req = {.metadata = md};
    kv_it_grpc_stream *st = kv_it_grpc_stream_start(c, "/etcdserverpb.KV/Range", &req);
    cr_assert_not_null(st);
    Etcdserverpb__RangeRequest r = ETCDSERVERPB__RANGE_REQUEST__INIT;
    r.key.data = (uint8_t *)key;
    r.key.len = strlen(key);
    uint8_t buf[256];
    size_t n = etcdserverpb__range_request__pack(&r, buf);
    cr_assert_eq(kv_it_grpc_send_msg(st, buf, n, 1), 0);
    cr_assert_eq(kv_it_grpc_wait(c, st, 10000), 1, "no answer");
    int status = st->grpc_status;
    snprintf(msg, cap, "%s", st->grpc_message);
    kv_it_grpc_stream_free(st);
    return status;
}

Test(auth_ctl, token_ttl_renewal_expiry_and_password_change, .fini = fini, .timeout = 120)
{
    start(&g_kvd, &g_kvd_up, KV_IT_KVD,
          (const char *const[]){"--auth-hash-iterations=2000", "--auth-token-ttl=3", NULL});
    static char o[8192];
    ctl(&g_kvd, o, sizeof o, NULL, "user add root --new-user-password=rootpw");
    cr_assert_eq(ctl(&g_kvd, o, sizeof o, NULL, "auth enable"), 0, "%s", o);
    kv_it_grpc *c = NULL;
    cr_assert_eq(kv_it_grpc_open(&c, "127.0.0.1", g_kvd.client_port, 5000), 0);
    char tok[128], msg[512];
    cr_assert_eq(authenticate(c, "root", "nope", tok, sizeof tok, msg, sizeof msg), 3);
    cr_assert_str_eq(msg, "etcdserver: authentication failed, invalid user ID or password");
    cr_assert_eq(authenticate(c, "root", "rootpw", tok, sizeof tok, msg, sizeof msg), 0, "%s", msg);
    cr_assert_eq(range_with_token(c, "bogus.1", "k", msg, sizeof msg), 16);
    cr_assert_str_eq(msg, "etcdserver: invalid auth token");
    /* used every 1.5 s, the 3 s token outlives its first expiry */
    uint64_t t0 = kv_it_now_ms();
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(range_with_token(c, tok, "k", msg, sizeof msg), 0, "use %d: %s", i, msg);
        kv_it_grpc_pump(c, 1500);
        while (kv_it_now_ms() < t0 + 1500u * (unsigned)(i + 1))
            kv_it_grpc_pump(c, 100);
    }
    cr_assert_geq(kv_it_now_ms() - t0, 4500, "renewed past the 3 s TTL");
    cr_assert_eq(range_with_token(c, tok, "k", msg, sizeof msg), 0, "%s", msg);
    /* unused for 4.5 s (> 3 s): expired */
    uint64_t t1 = kv_it_now_ms();
    while (kv_it_now_ms() < t1 + 4500)
        kv_it_grpc_pump(c, 100);
    cr_assert_eq(range_with_token(c, tok, "k", msg, sizeof msg), 16, "expired token: %s", msg);
    cr_assert_str_eq(msg, "etcdserver: invalid auth token");
    /* a password change invalidates the user's tokens */
    cr_assert_eq(authenticate(c, "root", "rootpw", tok, sizeof tok, msg, sizeof msg), 0, "%s", msg);
    cr_assert_eq(range_with_token(c, tok, "k", msg, sizeof msg), 0, "%s", msg);
    cr_assert_eq(ctl(&g_kvd, o, sizeof o, "newpw\n",
                     "--user root:rootpw user passwd root --interactive=false"),
                 0, "%s", o);
    cr_assert_eq(range_with_token(c, tok, "k", msg, sizeof msg), 16, "old token: %s", msg);
    cr_assert_eq(ctl(&g_kvd, o, sizeof o, NULL, "--user root:newpw get k"), 0, "%s", o);
    kv_it_grpc_close(c);
}
