/*
 * test_auth_cluster.c - auth state is replicated state: users, roles, grants and the
 * enabled flag changed through any member apply on every member (raft proposals applied in
 * server/apply/apply_auth.c), each member enforces them, and a restarted follower keeps them
 * (LMDB). Tokens are replicated through the log (etcd 3.4 Authenticate): a token from any
 * member works on every member (raw gRPC, and etcdctl with every member as endpoint), and stops
 * working on every member after a password change or AuthDisable + AuthEnable.
 * UserGet/UserList/RoleGet/RoleList wait for the ReadIndex barrier: a follower sees a user the
 * leader just added.
 */
#include <criterion/criterion.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "auth_ctl_util.h"
#include "grpc_raw.h"
#include "kvt_cluster.h"
#include "kvt_util.h"
#include "rpc.pb-c.h"

#include <openssl/evp.h>
#include <openssl/pem.h>

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
    const char *argv[20] = {g_c.ctl, ep};
    acu_argv(cmd, buf, sizeof buf, argv, 2, 20);
    static const char *const env[] = {"ETCDCTL_API=3", NULL};
    kvt_cmd_result r;
    cr_assert_eq(kvt_run(argv, env, NULL, 0, 30000, &r), 0);
    acu_output(r.out, r.err, out, cap);
    int code = r.timed_out ? 999 : r.exit_code;
    kvt_cmd_result_free(&r);
    return code;
}

/* A writable 3-member kvd cluster in g_c (cheap password hashes), with one more flag
 * (static storage, or NULL). */
static void start_cluster_with(const char *extra)
{
    kvt_cluster_opts o;
    kvt_cluster_opts_default(&o, 3);
    o.target = KV_TEST_SERVER_KVD;
    /* static: the cluster keeps the pointer for restarts */
    static const char *args[] = {"--auth-hash-iterations=2000", NULL, NULL};
    args[1] = extra;
    o.kvd_args = args;
    cr_assert_eq(kvt_cluster_init(&g_c, &o), 0);
    g_up = 1;
    cr_assert_eq(kvt_cluster_start(&g_c, 30000), 0, "cluster start");
    cr_assert_geq(kvt_cluster_wait_writable(&g_c, 30000), 0);
}

static void start_cluster(void)
{
    start_cluster_with(NULL);
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
    start_cluster();
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

/* ---- tokens replicated through the log (etcd 3.4 Authenticate), linearizable auth reads ---- */

static kv_it_grpc *g_conn[3];

static void fini_conns(void)
{
    for (int i = 0; i < 3; i++) {
        kv_it_grpc_close(g_conn[i]);
        g_conn[i] = NULL;
    }
    fini();
}

static kv_it_grpc *conn(int i)
{
    if (!g_conn[i])
        cr_assert_eq(kv_it_grpc_open(&g_conn[i], "127.0.0.1", g_c.m[i].client_port, 5000), 0,
                     "connect member %d", i);
    return g_conn[i];
}

/* One unary call to member i with an optional token: grpc-status (0 OK); msg the message;
 * *resp (malloc'd, may be NULL) the response message. */
static int call_tok(int i, const char *method, const ProtobufCMessage *req, const char *token,
                    uint8_t **resp, size_t *rlen, char *msg, size_t cap)
{
    const char *md[] = {"token", token, NULL};
    kv_it_grpc_req rq = {.metadata = token ? md : NULL};
    kv_it_grpc *c = conn(i);
    kv_it_grpc_stream *st = kv_it_grpc_stream_start(c, method, &rq);
    cr_assert_not_null(st);
    size_t n = protobuf_c_message_get_packed_size(req);
    uint8_t *buf = malloc(n ? n : 1);
    cr_assert_not_null(buf);
    protobuf_c_message_pack(req, buf);
    cr_assert_eq(kv_it_grpc_send_msg(st, buf, n, 1), 0);
    free(buf);
    cr_assert_eq(kv_it_grpc_wait(c, st, 30000), 1, "member %d: no answer to %s", i, method);
    int status = st->grpc_status;
    snprintf(msg, cap, "%s", st->grpc_message);
    uint8_t *m = NULL;
    size_t ml = 0;
    if (kv_it_grpc_stream_next(st, &m, &ml) != 1)
        m = NULL;
    if (resp) {
        *resp = m;
        *rlen = ml;
    } else {
        free(m);
    }
    kv_it_grpc_stream_free(st);
    return status;
}

/* Authenticate on member i: the token (status 0) or the grpc-status. */
static int auth_on(int i, const char *user, const char *pw, char *tok, size_t cap)
{
    Etcdserverpb__AuthenticateRequest r = ETCDSERVERPB__AUTHENTICATE_REQUEST__INIT;
    r.name = (char *)user;
    r.password = (char *)pw;
    uint8_t *resp = NULL;
    size_t rl = 0;
    char msg[256];
    int st =
        call_tok(i, "/etcdserverpb.Auth/Authenticate", &r.base, NULL, &resp, &rl, msg, sizeof msg);
    if (st == 0) {
        Etcdserverpb__AuthenticateResponse *ar =
            etcdserverpb__authenticate_response__unpack(NULL, rl, resp);
        cr_assert_not_null(ar);
        cr_assert_not_null(ar->header);
        cr_assert_gt(ar->header->revision, 0, "the header carries the store revision");
        snprintf(tok, cap, "%s", ar->token);
        etcdserverpb__authenticate_response__free_unpacked(ar, NULL);
    }
    free(resp);
    return st;
}

static int put_tok(int i, const char *token, const char *key, char *msg, size_t cap)
{
    Etcdserverpb__PutRequest r = ETCDSERVERPB__PUT_REQUEST__INIT;
    r.key.data = (uint8_t *)key;
    r.key.len = strlen(key);
    r.value.data = (uint8_t *)"v";
    r.value.len = 1;
    return call_tok(i, "/etcdserverpb.KV/Put", &r.base, token, NULL, NULL, msg, cap);
}

static int range_as(int i, const char *token, const char *key, int serializable, char *msg,
                    size_t cap)
{
    Etcdserverpb__RangeRequest r = ETCDSERVERPB__RANGE_REQUEST__INIT;
    r.key.data = (uint8_t *)key;
    r.key.len = strlen(key);
    r.serializable = serializable;
    return call_tok(i, "/etcdserverpb.KV/Range", &r.base, token, NULL, NULL, msg, cap);
}

static int range_tok(int i, const char *token, const char *key, char *msg, size_t cap)
{
    return range_as(i, token, key, 0, msg, cap);
}

/* Polls (up to 10 s: member i may not have applied the entry yet) until op's status is
 * `want`; returns the last status. */
static int poll_status(int want, int (*op)(int, const char *, const char *, char *, size_t), int i,
                       const char *token, const char *key, char *msg, size_t cap)
{
    int st = -1;
    for (int t = 0; t < 100; t++) {
        st = op(i, token, key, msg, cap);
        if (st == want)
            break;
        struct timespec ts = {0, 100 * 1000000L};
        nanosleep(&ts, NULL);
    }
    return st;
}

static void start_auth_cluster_with(const char *extra)
{
    start_cluster_with(extra);
    char out[4096];
    cr_assert_eq(ctl(0, "user add root --new-user-password=rootpw", out, sizeof out), 0, "%s", out);
    cr_assert_eq(ctl(0, "role add rw", out, sizeof out), 0, "%s", out);
    cr_assert_eq(ctl(0, "role grant-permission rw readwrite /t/ --prefix", out, sizeof out), 0,
                 "%s", out);
    cr_assert_eq(ctl(0, "user add ann --new-user-password=annpw", out, sizeof out), 0, "%s", out);
    cr_assert_eq(ctl(0, "user grant-role ann rw", out, sizeof out), 0, "%s", out);
    cr_assert_eq(ctl(0, "auth enable", out, sizeof out), 0, "%s", out);
}

static void start_auth_cluster(void)
{
    start_auth_cluster_with(NULL);
}

/* The token works for a Put and a Range on every member (each within 10 s of the answer: a
 * member serves it once it applied the Authenticate entry). */
static void token_works_everywhere(const char *tok, const char *what)
{
    char msg[256];
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(poll_status(0, put_tok, i, tok, "/t/k", msg, sizeof msg), 0,
                     "%s: Put on member %d: %s", what, i, msg);
        cr_assert_eq(range_tok(i, tok, "/t/k", msg, sizeof msg), 0, "%s: Range on member %d: %s",
                     what, i, msg);
    }
}

/* At once on every member (linearizable: the change was acknowledged before). */
static void token_refused_everywhere(const char *tok, const char *what)
{
    char msg[256];
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(range_tok(i, tok, "/t/k", msg, sizeof msg), 16,
                     "%s: member %d still takes the token: %s", what, i, msg);
        cr_assert_str_eq(msg, "etcdserver: invalid auth token", "%s: member %d", what, i);
    }
}

Test(auth_cluster, tokens_valid_on_every_member, .fini = fini_conns, .timeout = 300)
{
    start_auth_cluster();
    int l = kvt_cluster_wait_leader(&g_c, 30000, NULL);
    cr_assert_geq(l, 0);
    int f1 = (l + 1) % 3, f2 = (l + 2) % 3;
    char tok_f[128], tok_l[128], msg[256];
    /* a token from a follower: valid on that follower at once (the answer waits for the
     * entry to apply there), then on the leader and the other follower */
    cr_assert_eq(auth_on(f1, "ann", "annpw", tok_f, sizeof tok_f), 0);
    cr_assert_eq(put_tok(f1, tok_f, "/t/k", msg, sizeof msg), 0, "own member: %s", msg);
    token_works_everywhere(tok_f, "token from a follower");
    /* a token from the leader */
    cr_assert_eq(auth_on(l, "ann", "annpw", tok_l, sizeof tok_l), 0);
    cr_assert_str_neq(tok_l, tok_f);
    token_works_everywhere(tok_l, "token from the leader");
    /* permissions still apply with a replicated token */
    cr_assert_eq(put_tok(f2, tok_f, "/other", msg, sizeof msg), 7, "%s", msg);
    cr_assert_str_eq(msg, "etcdserver: permission denied");
    /* a wrong password is refused, and no token appears anywhere */
    char bad[128];
    cr_assert_eq(auth_on(f2, "ann", "wrong", bad, sizeof bad), 3);

    /* a password change invalidates the user's tokens on every member */
    char out[4096];
    char root_tok[128];
    cr_assert_eq(auth_on(f2, "root", "rootpw", root_tok, sizeof root_tok), 0);
    Etcdserverpb__AuthUserChangePasswordRequest cp =
        ETCDSERVERPB__AUTH_USER_CHANGE_PASSWORD_REQUEST__INIT;
    cp.name = "ann";
    cp.password = "annpw2";
    cr_assert_eq(call_tok(f2, "/etcdserverpb.Auth/UserChangePassword", &cp.base, root_tok, NULL,
                          NULL, msg, sizeof msg),
                 0, "%s", msg);
    token_refused_everywhere(tok_f, "after UserChangePassword (follower's token)");
    token_refused_everywhere(tok_l, "after UserChangePassword (leader's token)");
    cr_assert_eq(auth_on(f2, "ann", "annpw", bad, sizeof bad), 3, "old password");

    /* AuthDisable + AuthEnable drops every token on every member, also on members no request
     * reached in between */
    char tok2[128];
    cr_assert_eq(auth_on(f2, "ann", "annpw2", tok2, sizeof tok2), 0);
    token_works_everywhere(tok2, "token from the other follower");
    cr_assert_eq(ctl(l, "--user root:rootpw auth disable", out, sizeof out), 0, "%s", out);
    cr_assert_eq(ctl(l, "--user root:rootpw auth enable", out, sizeof out), 0, "%s", out);
    token_refused_everywhere(tok2, "after AuthDisable + AuthEnable");

    /* etcdctl with every member as endpoint (its balancer spreads the requests, its token
     * comes from one of them) */
    char eps[256];
    snprintf(eps, sizeof eps, "--endpoints=%s,%s,%s", g_c.m[0].endpoint, g_c.m[1].endpoint,
             g_c.m[2].endpoint);
    for (int k = 0; k < 6; k++) {
        char val[32];
        snprintf(val, sizeof val, "v%d", k);
        const char *put[] = {g_c.ctl, eps, "--user", "root:rootpw", "put", "/t/ctl", val, NULL};
        const char *get[] = {g_c.ctl, eps, "--user", "root:rootpw", "get", "/t/ctl", NULL};
        static const char *const env[] = {"ETCDCTL_API=3", NULL};
        kvt_cmd_result r;
        cr_assert_eq(kvt_run(put, env, NULL, 0, 30000, &r), 0);
        cr_assert_eq(r.exit_code, 0, "etcdctl put %d: %s", k, r.err ? r.err : "");
        kvt_cmd_result_free(&r);
        cr_assert_eq(kvt_run(get, env, NULL, 0, 30000, &r), 0);
        cr_assert_eq(r.exit_code, 0, "etcdctl get %d: %s", k, r.err ? r.err : "");
        cr_assert(r.out && strstr(r.out, val), "etcdctl get %d: %s", k, r.out ? r.out : "");
        kvt_cmd_result_free(&r);
    }
}

/* UserGet/UserList/RoleGet/RoleList wait for the ReadIndex barrier (etcd 3.4 sends them
 * through raft): a follower sees a user the leader added just before. */
static int user_get(int i, const char *token, const char *name, char *msg, size_t cap)
{
    Etcdserverpb__AuthUserGetRequest r = ETCDSERVERPB__AUTH_USER_GET_REQUEST__INIT;
    r.name = (char *)name;
    return call_tok(i, "/etcdserverpb.Auth/UserGet", &r.base, token, NULL, NULL, msg, cap);
}

static int user_list(int i, const char *token, char *names, size_t cap)
{
    Etcdserverpb__AuthUserListRequest r = ETCDSERVERPB__AUTH_USER_LIST_REQUEST__INIT;
    uint8_t *resp = NULL;
    size_t rl = 0;
    char msg[256];
    int st =
        call_tok(i, "/etcdserverpb.Auth/UserList", &r.base, token, &resp, &rl, msg, sizeof msg);
    names[0] = 0;
    if (st == 0) {
        Etcdserverpb__AuthUserListResponse *u =
            etcdserverpb__auth_user_list_response__unpack(NULL, rl, resp);
        cr_assert_not_null(u);
        for (size_t k = 0; k < u->n_users; k++)
            snprintf(names + strlen(names), cap - strlen(names), "%s,", u->users[k]);
        etcdserverpb__auth_user_list_response__free_unpacked(u, NULL);
    } else {
        snprintf(names, cap, "%s", msg);
    }
    free(resp);
    return st;
}

Test(auth_cluster, reads_after_barrier, .fini = fini_conns, .timeout = 300)
{
    start_cluster();
    int l = kvt_cluster_wait_leader(&g_c, 30000, NULL);
    cr_assert_geq(l, 0);
    int f = (l + 1) % 3;
    char msg[256], names[512];
    /* auth disabled: anyone may read; every UserAdd through the leader is seen at once by a
     * read on the follower */
    for (int k = 0; k < 5; k++) {
        char name[16];
        snprintf(name, sizeof name, "u%d", k);
        Etcdserverpb__AuthUserAddRequest r = ETCDSERVERPB__AUTH_USER_ADD_REQUEST__INIT;
        r.name = name;
        r.password = "pw";
        cr_assert_eq(
            call_tok(l, "/etcdserverpb.Auth/UserAdd", &r.base, NULL, NULL, NULL, msg, sizeof msg),
            0, "%s", msg);
        cr_assert_eq(user_get(f, NULL, name, msg, sizeof msg), 0, "follower: %s: %s", name, msg);
    }
    cr_assert_eq(user_list(f, NULL, names, sizeof names), 0, "%s", names);
    cr_assert_str_eq(names, "u0,u1,u2,u3,u4,");
    cr_assert_eq(user_get(f, NULL, "nobody", msg, sizeof msg), 9);
    cr_assert_str_eq(msg, "etcdserver: user name not found");
    /* auth enabled: admin or self */
    char out[4096];
    cr_assert_eq(ctl(l, "user add root --new-user-password=rootpw", out, sizeof out), 0, "%s", out);
    cr_assert_eq(ctl(l, "auth enable", out, sizeof out), 0, "%s", out);
    cr_assert_eq(user_list(f, NULL, names, sizeof names), 3, "anonymous");
    cr_assert_str_eq(names, "etcdserver: user name is empty");
    char root_tok[128], u0_tok[128];
    cr_assert_eq(auth_on(f, "root", "rootpw", root_tok, sizeof root_tok), 0);
    cr_assert_eq(auth_on(f, "u0", "pw", u0_tok, sizeof u0_tok), 0);
    cr_assert_eq(user_list(f, root_tok, names, sizeof names), 0, "%s", names);
    cr_assert_str_eq(names, "root,u0,u1,u2,u3,u4,");
    cr_assert_eq(user_get(f, u0_tok, "u0", msg, sizeof msg), 0, "self: %s", msg);
    cr_assert_eq(user_get(f, u0_tok, "u1", msg, sizeof msg), 7, "other: %s", msg);
    cr_assert_str_eq(msg, "etcdserver: permission denied");
    cr_assert_eq(user_list(f, u0_tok, names, sizeof names), 7);
    /* a user added through the leader with root's token (valid there too) is seen at once */
    Etcdserverpb__AuthUserAddRequest r = ETCDSERVERPB__AUTH_USER_ADD_REQUEST__INIT;
    r.name = "late";
    r.password = "pw";
    cr_assert_eq(poll_status(0, range_tok, l, root_tok, "x", msg, sizeof msg), 0, "%s", msg);
    cr_assert_eq(
        call_tok(l, "/etcdserverpb.Auth/UserAdd", &r.base, root_tok, NULL, NULL, msg, sizeof msg),
        0, "%s", msg);
    cr_assert_eq(user_get(f, root_tok, "late", msg, sizeof msg), 0, "%s", msg);
    Etcdserverpb__AuthRoleListRequest rl = ETCDSERVERPB__AUTH_ROLE_LIST_REQUEST__INIT;
    cr_assert_eq(
        call_tok(f, "/etcdserverpb.Auth/RoleList", &rl.base, root_tok, NULL, NULL, msg, sizeof msg),
        0, "%s", msg);
    Etcdserverpb__AuthRoleGetRequest rg = ETCDSERVERPB__AUTH_ROLE_GET_REQUEST__INIT;
    rg.role = "root";
    cr_assert_eq(
        call_tok(f, "/etcdserverpb.Auth/RoleGet", &rg.base, root_tok, NULL, NULL, msg, sizeof msg),
        0, "%s", msg);
}

/* ---- an acknowledged auth change is seen by the next request on any member ---- */

static const char *const g_stall_env[] = {"KVD_FAILPOINT_APPLY_COMMIT_DELAY_MS=600", NULL};

static int call_change_password(int i, const char *root_tok, const char *user, const char *pw,
                                char *msg, size_t cap)
{
    Etcdserverpb__AuthUserChangePasswordRequest cp =
        ETCDSERVERPB__AUTH_USER_CHANGE_PASSWORD_REQUEST__INIT;
    cp.name = (char *)user;
    cp.password = (char *)pw;
    return call_tok(i, "/etcdserverpb.Auth/UserChangePassword", &cp.base, root_tok, NULL, NULL, msg,
                    cap);
}

/* etcd checks a linearizable Range after its ReadIndex barrier (doSerialize). A follower
 * that stalls 600 ms before each apply commit (failpoint) gets a Range with ann's token right
 * after the leader answered a password change, and then one after a permission revoke: the
 * follower has not applied either change when the request arrives, so its arrival check
 * passes; the check after the barrier must refuse it. Without that second check both Ranges
 * are served. The same member's own answer to an auth change waits for its commit: the next
 * request there sees it (a Put: "invalid auth token", not a later "auth store is old"). */
Test(auth_cluster, auth_change_seen_at_once_through_a_stalled_follower, .fini = fini_conns,
     .timeout = 300)
{
    start_auth_cluster();
    int l = kvt_cluster_wait_leader(&g_c, 30000, NULL);
    cr_assert_geq(l, 0);
    int f = (l + 1) % 3;
    g_c.m[f].env = g_stall_env;
    int r = kvt_member_restart(&g_c, f, 60000);
    g_c.m[f].env = NULL;
    cr_assert_eq(r, 0, "restart of m%d with the failpoint: %d", f, r);
    l = kvt_cluster_wait_leader(&g_c, 30000, NULL);
    cr_assert(l >= 0 && l != f, "the stalled member must stay a follower (leader %d)", l);
    char tok[128], tok2[128], root_tok[128], msg[256];
    cr_assert_eq(auth_on(l, "root", "rootpw", root_tok, sizeof root_tok), 0);
    cr_assert_eq(auth_on(l, "ann", "annpw", tok, sizeof tok), 0);
    cr_assert_eq(poll_status(0, range_tok, f, tok, "/t/k", msg, sizeof msg), 0, "%s", msg);
    cr_assert_eq(poll_status(0, range_tok, f, root_tok, "/t/k", msg, sizeof msg), 0, "%s", msg);
    /* a password change through the leader, then at once the old token on the follower */
    cr_assert_eq(call_change_password(l, root_tok, "ann", "annpw2", msg, sizeof msg), 0, "%s", msg);
    cr_assert_eq(range_tok(f, tok, "/t/k", msg, sizeof msg), 16,
                 "the follower served a token the acknowledged password change revoked: %s", msg);
    cr_assert_str_eq(msg, "etcdserver: invalid auth token");
    cr_assert_eq(put_tok(l, tok, "/t/k", msg, sizeof msg), 16, "leader: %s", msg);
    cr_assert_str_eq(msg, "etcdserver: invalid auth token");
    /* a permission revoke through the leader, then at once a read it forbids */
    cr_assert_eq(auth_on(l, "ann", "annpw2", tok2, sizeof tok2), 0);
    cr_assert_eq(poll_status(0, range_tok, f, tok2, "/t/k", msg, sizeof msg), 0, "%s", msg);
    Etcdserverpb__AuthRoleRevokePermissionRequest rv =
        ETCDSERVERPB__AUTH_ROLE_REVOKE_PERMISSION_REQUEST__INIT;
    rv.role = "rw";
    rv.key.data = (uint8_t *)"/t/";
    rv.key.len = 3;
    rv.range_end.data = (uint8_t *)"/t0";
    rv.range_end.len = 3;
    cr_assert_eq(call_tok(l, "/etcdserverpb.Auth/RoleRevokePermission", &rv.base, root_tok, NULL,
                          NULL, msg, sizeof msg),
                 0, "%s", msg);
    cr_assert_eq(range_tok(f, tok2, "/t/k", msg, sizeof msg), 7,
                 "the follower served a read the acknowledged revoke forbids: %s", msg);
    cr_assert_str_eq(msg, "etcdserver: permission denied");
    /* the same through the stalled follower itself: its answer waits for its own commit */
    char tok3[128];
    cr_assert_eq(auth_on(f, "ann", "annpw2", tok3, sizeof tok3), 0);
    cr_assert_eq(call_change_password(f, root_tok, "ann", "annpw3", msg, sizeof msg), 0, "%s", msg);
    cr_assert_eq(put_tok(f, tok3, "/x", msg, sizeof msg), 16, "follower: %s", msg);
    cr_assert_str_eq(msg, "etcdserver: invalid auth token");
}

/* etcd answers an auth refusal of a linearizable Range only after the ReadIndex barrier
 * (v3_server.go Range: linearizableReadNotify, then doSerialize's check, which is also where
 * the token is resolved). So a token-less (or bad-token) linearizable read through a member
 * that does not serve is answered as anyone's read there, "request timed out", and a
 * token-less reader learns that the member is useless: the grpc-proxy's upstream probe is one
 * (docs/proxy.md). A follower's raft is stalled (SIGUSR1, --enable-failpoints) after a put:
 * serializable Ranges without a token or with an invalid one are refused at once, the
 * linearizable ones time out; resumed, the linearizable ones are refused again. Before the
 * change, kvd refused them at arrival through the stalled member ("user name is empty",
 * "invalid auth token"). */
Test(auth_cluster, refused_linearizable_read_is_answered_after_the_barrier, .fini = fini_conns,
     .timeout = 300)
{
    if (kvt_target_from_env() != KV_TEST_SERVER_KVD) /* SIGUSR1 would end an etcd member */
        cr_skip_test("kvd's --enable-failpoints");
    start_auth_cluster();
    int l = kvt_cluster_wait_leader(&g_c, 30000, NULL);
    cr_assert_geq(l, 0);
    int f = (l + 1) % 3;
    char tok[128], msg[256];
    cr_assert_eq(auth_on(l, "ann", "annpw", tok, sizeof tok), 0);
    cr_assert_eq(range_tok(f, NULL, "/t/k", msg, sizeof msg), 3, "%s", msg);
    cr_assert_str_eq(msg, "etcdserver: user name is empty");
    cr_assert_eq(kill(g_c.m[f].proc.pid, SIGUSR1), 0, "stall m%d", f);
    kvt_sleep_ms(200); /* the member's loop takes the signal */
    cr_assert_eq(put_tok(l, tok, "/t/k", msg, sizeof msg), 0, "put on the leader: %s", msg);
    cr_assert_eq(range_as(f, NULL, "/t/k", 1, msg, sizeof msg), 3, "%s", msg);
    cr_assert_str_eq(msg, "etcdserver: user name is empty");
    /* an invalid token too: refused at once when serializable, after the barrier if not */
    cr_assert_eq(range_as(f, "bogus.token", "/t/k", 1, msg, sizeof msg), 16, "%s", msg);
    cr_assert_str_eq(msg, "etcdserver: invalid auth token");
    for (int bad = 0; bad < 2; bad++) {
        uint64_t t0 = kvt_now_ms();
        int st = range_tok(f, bad ? "bogus.token" : NULL, "/t/k", msg, sizeof msg);
        uint64_t waited = kvt_now_ms() - t0;
        cr_assert_eq(st, 14, "a linearizable Range (%s) through the stalled member: %d %s",
                     bad ? "invalid token" : "no token", st, msg);
        cr_assert_str_eq(msg, "etcdserver: request timed out");
        cr_assert_geq(waited, 1000, "answered after %llu ms: not after the barrier's wait",
                      (unsigned long long)waited);
    }
    kill(g_c.m[f].proc.pid, SIGUSR1); /* resume */
    cr_assert_eq(poll_status(3, range_tok, f, NULL, "/t/k", msg, sizeof msg), 3, "%s", msg);
    cr_assert_str_eq(msg, "etcdserver: user name is empty");
    cr_assert_eq(range_tok(f, "bogus.token", "/t/k", msg, sizeof msg), 16, "%s", msg);
    cr_assert_str_eq(msg, "etcdserver: invalid auth token");
    cr_assert_eq(range_tok(f, tok, "/t/k", msg, sizeof msg), 0, "ann after the resume: %s", msg);
}

/* ---- JWT tokens (--auth-token jwt,..., server/auth/auth_jwt.h) ---- */

static char g_jwt_dir[] = "/tmp/kvjwtc.XXXXXX";

static void fini_jwt(void)
{
    fini_conns();
    kvt_rmtree(g_jwt_dir);
}

/* An RSA key pair as <g_jwt_dir>/key.pem and pub.pem. */
static void make_rsa_key(void)
{
    cr_assert_not_null(mkdtemp(g_jwt_dir));
    EVP_PKEY *k = EVP_PKEY_Q_keygen(NULL, NULL, "RSA", (size_t)2048);
    cr_assert_not_null(k);
    char path[256];
    snprintf(path, sizeof path, "%s/key.pem", g_jwt_dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    cr_assert_eq(PEM_write_PrivateKey(f, k, NULL, NULL, 0, NULL, NULL), 1);
    fclose(f);
    snprintf(path, sizeof path, "%s/pub.pem", g_jwt_dir);
    f = fopen(path, "w");
    cr_assert_not_null(f);
    cr_assert_eq(PEM_write_PUBKEY(f, k), 1);
    fclose(f);
    EVP_PKEY_free(k);
}

/* A JWT from one member is valid on every member at once (stateless: no table, no wait for
 * an apply), carries the auth revision (a write with a token older than an auth change is
 * "revision of auth store is old", as etcd's isOpPermitted; a new login fixes it), dies at
 * its ttl on every member ("invalid auth token", which clientv3 answers by logging in again)
 * and a token changed by one character is refused. etcdctl over all three members works. */
Test(auth_cluster, jwt_tokens_valid_everywhere_until_they_expire, .fini = fini_jwt, .timeout = 300)
{
    make_rsa_key();
    static char opt[1024];
    const int ttl_s = 8;
    snprintf(opt, sizeof opt,
             "--auth-token=jwt,pub-key=%s/pub.pem,priv-key=%s/key.pem,sign-method=RS256,ttl=%ds",
             g_jwt_dir, g_jwt_dir, ttl_s);
    start_auth_cluster_with(opt);
    int l = kvt_cluster_wait_leader(&g_c, 30000, NULL);
    cr_assert_geq(l, 0);
    int f1 = (l + 1) % 3;
    char tok[2048], tok2[2048], msg[256], out[4096];
    uint64_t t0 = kvt_now_ms();
    cr_assert_eq(auth_on(f1, "ann", "annpw", tok, sizeof tok), 0);
    const char *d1 = strchr(tok, '.');
    cr_assert(d1 && strchr(d1 + 1, '.') && strncmp(tok, "eyJ", 3) == 0, "not a JWT: %s", tok);
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(put_tok(i, tok, "/t/k", msg, sizeof msg), 0, "Put on member %d: %s", i, msg);
        cr_assert_eq(range_tok(i, tok, "/t/k", msg, sizeof msg), 0, "Range on %d: %s", i, msg);
    }
    cr_assert_eq(put_tok(l, tok, "/other", msg, sizeof msg), 7, "%s", msg);
    cr_assert_str_eq(msg, "etcdserver: permission denied");
    /* one character changed */
    char bad[2048];
    snprintf(bad, sizeof bad, "%s", tok);
    bad[strlen(bad) - 5] = bad[strlen(bad) - 5] == 'A' ? 'B' : 'A';
    cr_assert_eq(range_tok(l, bad, "/t/k", msg, sizeof msg), 16, "%s", msg);
    cr_assert_str_eq(msg, "etcdserver: invalid auth token");
    /* an auth change ages the token for writes; a new login answers it */
    cr_assert_eq(
        ctl(l, "--user root:rootpw user add bob --new-user-password=bobpw", out, sizeof out), 0,
        "%s", out);
    cr_assert_eq(put_tok(f1, tok, "/t/k", msg, sizeof msg), 3, "%s", msg);
    cr_assert_str_eq(msg, "etcdserver: revision of auth store is old");
    cr_assert_eq(auth_on(l, "ann", "annpw", tok2, sizeof tok2), 0);
    cr_assert_eq(put_tok(f1, tok2, "/t/k", msg, sizeof msg), 0, "%s", msg);
    /* etcdctl with every member as endpoint */
    char eps[256];
    snprintf(eps, sizeof eps, "--endpoints=%s,%s,%s", g_c.m[0].endpoint, g_c.m[1].endpoint,
             g_c.m[2].endpoint);
    const char *put[] = {g_c.ctl, eps, "--user", "root:rootpw", "put", "/t/ctl", "v", NULL};
    static const char *const env[] = {"ETCDCTL_API=3", NULL};
    kvt_cmd_result r;
    cr_assert_eq(kvt_run(put, env, NULL, 0, 30000, &r), 0);
    cr_assert_eq(r.exit_code, 0, "etcdctl put: %s", r.err ? r.err : "");
    kvt_cmd_result_free(&r);
    /* the first token expires everywhere */
    uint64_t dead = t0 + (uint64_t)ttl_s * 1000 + 2000;
    uint64_t now = kvt_now_ms();
    if (now < dead)
        kvt_sleep_ms((int)(dead - now));
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(range_tok(i, tok, "/t/k", msg, sizeof msg), 16, "member %d: %s", i, msg);
        cr_assert_str_eq(msg, "etcdserver: invalid auth token", "member %d", i);
    }
}

/* A key file that cannot be read stops kvd at start with a message naming it. */
Test(auth_cluster, jwt_bad_key_file_refused_at_start, .timeout = 60)
{
    kvt_cluster c;
    kvt_cluster_opts o;
    kvt_cluster_opts_default(&o, 1);
    o.target = KV_TEST_SERVER_KVD;
    cr_assert_eq(kvt_cluster_init(&c, &o), 0);
    const char *argv[] = {c.bin, "--data-dir=/tmp/kvjwt-never-created",
                          "--auth-token=jwt,priv-key=/nonexistent/key.pem,sign-method=RS256", NULL};
    kvt_cmd_result r;
    cr_assert_eq(kvt_run(argv, NULL, NULL, 0, 30000, &r), 0);
    cr_assert_neq(r.exit_code, 0);
    cr_assert(r.err && strstr(r.err, "cannot read /nonexistent/key.pem"), "%s", r.err ? r.err : "");
    kvt_cmd_result_free(&r);
    kvt_cluster_destroy(&c);
}
