/*
 * test_auth_ctl.c - etcd v3 authentication driven by real etcdctl 3.4
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
#include "auth_ctl_util.h"
#include "harness.h"
#include "rpc.pb-c.h"
#include "v3lock.pb-c.h"

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
static int ctl_with(const char *bin, const kv_it_server *s, char *out, size_t cap,
                    const char *stdin_data, const char *cmd);

static int ctl(const kv_it_server *s, char *out, size_t cap, const char *stdin_data,
               const char *cmd)
{
    char bin[PATH_MAX];
    cr_assert_eq(kv_it_etcdctl_bin(bin, sizeof bin), 0, "etcdctl not found: %s", bin);
    return ctl_with(bin, s, out, cap, stdin_data, cmd);
}

static int ctl_with(const char *bin, const kv_it_server *s, char *out, size_t cap,
                    const char *stdin_data, const char *cmd)
{
    return acu_etcdctl(bin, s->endpoint, stdin_data, cmd, out, cap);
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
    /* deliberate differences from etcd 3.4 (README "Authentication"): Compact needs root */
    static const struct {
        const char *cmd, *kvd_out;
    } differs[] = {
        {"--user alice:alicepw compaction 1", "Error: etcdserver: permission denied\n"},
    };
    for (size_t i = 0; i < sizeof session / sizeof session[0]; i++) {
        int ca = ctl(&g_kvd, a, sizeof a, NULL, session[i]);
        const char *want = NULL;
        for (size_t d = 0; d < sizeof differs / sizeof differs[0]; d++)
            if (strcmp(differs[d].cmd, session[i]) == 0)
                want = differs[d].kvd_out;
        if (want) {
            cr_expect_neq(ca, 0, "`etcdctl %s` succeeded on kvd", session[i]);
            cr_expect_str_eq(a, want, "`etcdctl %s` on kvd", session[i]);
            if (have_etcd) /* etcd runs it too, to keep the two sessions in step */
                ctl(&g_etcd, b, sizeof b, NULL, session[i]);
            continue;
        }
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
    /* Txn: a compare outside the grant is a read there */
    cr_assert_neq(ctl(&g_kvd, o, sizeof o, "value(\"/bar\") = \"x\"\n\nget /foo/x\n\n\n",
                      "--user ann:annpw txn --interactive=false"),
                  0);
    cr_assert(strstr(o, "permission denied"), "txn compare outside the prefix: %s", o);
    cr_assert_eq(ctl(&g_kvd, o, sizeof o, "value(\"/foo/x\") = \"1\"\n\nget /foo/x\n\n\n",
                     "--user ann:annpw txn --interactive=false"),
                 0, "%s", o);
    cr_assert(strstr(o, "SUCCESS"), "%s", o);
    /* LeaseGrant needs no permission; LeaseRevoke needs WRITE on the lease's keys */
    cr_assert_eq(ctl(&g_kvd, o, sizeof o, NULL, "--user ann:annpw lease grant 100"), 0, "%s", o);
    char id[32] = "";
    cr_assert_eq(sscanf(o, "lease %31s granted", id), 1, "%s", o);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "--user root:rootpw put /foo/l v --lease=%s", id);
    cr_assert_eq(ctl(&g_kvd, o, sizeof o, NULL, cmd), 0, "%s", o);
    snprintf(cmd, sizeof cmd, "--user ann:annpw lease revoke %s", id);
    cr_assert_neq(ctl(&g_kvd, o, sizeof o, NULL, cmd), 0);
    cr_assert(strstr(o, "permission denied"), "revoke of a lease with /foo/l: %s", o);
    snprintf(cmd, sizeof cmd, "--user root:rootpw lease revoke %s", id);
    cr_assert_eq(ctl(&g_kvd, o, sizeof o, NULL, cmd), 0, "%s", o);
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

/* A kvd started with flags (NULL-terminated), user root (password rootpw) added and auth
 * enabled; out is etcdctl's output buffer of the caller. */
static void start_with_auth(const char *const *flags, char *out, size_t cap)
{
    start(&g_kvd, &g_kvd_up, KV_IT_KVD, flags);
    ctl(&g_kvd, out, cap, NULL, "user add root --new-user-password=rootpw");
    cr_assert_eq(ctl(&g_kvd, out, cap, NULL, "auth enable"), 0, "%s", out);
}

/* A new connection to g_kvd and root's token on it. */
static kv_it_grpc *open_as_root(char *tok, size_t cap)
{
    kv_it_grpc *c = NULL;
    char msg[512];
    cr_assert_eq(kv_it_grpc_open(&c, "127.0.0.1", g_kvd.client_port, 5000), 0);
    cr_assert_eq(authenticate(c, "root", "rootpw", tok, cap, msg, sizeof msg), 0, "%s", msg);
    return c;
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
    static char o[8192];
    start_with_auth(
        (const char *const[]){"--auth-hash-iterations=2000", "--auth-token-ttl=3", NULL}, o,
        sizeof o);
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

/* ---- load: Authenticate flood vs lease keepalives, scaled ---- */

#define N_LEASES 1000
#define N_AUTH 1000
#define N_AUTH_CONNS 4

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void pump_all(kv_it_grpc **cs, int n, uint32_t wait_ms)
{
    for (int i = 0; i < n; i++)
        cr_assert_eq(kv_it_grpc_pump(cs[i], i == 0 ? wait_ms : 0), 0, "connection %d lost", i);
}

Test(auth_ctl, authenticate_flood_does_not_stall_keepalives, .fini = fini, .timeout = 300)
{
    /* default hash cost (PBKDF2-SHA256, 100,000 rounds) and queue bound (64) */
    static char o[8192];
    start_with_auth((const char *const[]){"--auth-token-ttl=300", NULL}, o, sizeof o);
    kv_it_grpc *cs[1 + N_AUTH_CONNS];
    for (int i = 0; i < 1 + N_AUTH_CONNS; i++)
        cr_assert_eq(kv_it_grpc_open(&cs[i], "127.0.0.1", g_kvd.client_port, 5000), 0);
    char tok[128], msg[512];
    cr_assert_eq(authenticate(cs[0], "root", "rootpw", tok, sizeof tok, msg, sizeof msg), 0, "%s",
                 msg);
    const char *md[] = {"token", tok, NULL};
    kv_it_grpc_req with_tok = {.metadata = md};
    /* N_LEASES leases of 4 s, granted in flights of 100 streams */
    for (int base = 0; base < N_LEASES; base += 100) {
        kv_it_grpc_stream *st[100];
        for (int i = 0; i < 100; i++) {
            Etcdserverpb__LeaseGrantRequest g = ETCDSERVERPB__LEASE_GRANT_REQUEST__INIT;
            g.id = 1000 + base + i;
            g.ttl = 4;
            uint8_t b[64];
            size_t n = etcdserverpb__lease_grant_request__pack(&g, b);
            st[i] = kv_it_grpc_stream_start(cs[0], "/etcdserverpb.Lease/LeaseGrant", &with_tok);
            cr_assert_not_null(st[i]);
            cr_assert_eq(kv_it_grpc_send_msg(st[i], b, n, 1), 0);
        }
        for (int i = 0; i < 100; i++) {
            cr_assert_eq(kv_it_grpc_wait(cs[0], st[i], 20000), 1);
            cr_assert_eq(st[i]->grpc_status, 0, "grant: %s", st[i]->grpc_message);
            kv_it_grpc_stream_free(st[i]);
        }
    }
    kv_it_grpc_stream *ka =
        kv_it_grpc_stream_start(cs[0], "/etcdserverpb.Lease/LeaseKeepAlive", &with_tok);
    cr_assert_not_null(ka);
    /* the flood: N_AUTH Authenticate calls at once over N_AUTH_CONNS connections */
    Etcdserverpb__AuthenticateRequest ar = ETCDSERVERPB__AUTHENTICATE_REQUEST__INIT;
    ar.name = "root";
    ar.password = "rootpw";
    uint8_t ab[64];
    size_t alen = etcdserverpb__authenticate_request__pack(&ar, ab);
    static kv_it_grpc_stream *as[N_AUTH];
    for (int i = 0; i < N_AUTH; i++) {
        as[i] = kv_it_grpc_stream_start(cs[1 + i % N_AUTH_CONNS], "/etcdserverpb.Auth/Authenticate",
                                        NULL);
        cr_assert_not_null(as[i]);
        as[i]->discard = 1;
        cr_assert_eq(kv_it_grpc_send_msg(as[i], ab, alen, 1), 0);
    }
    /* keepalive rounds every 500 ms (TTL 4 s) for 6 s: every renewal's latency */
    static uint64_t lat[N_LEASES * 16];
    size_t nlat = 0, expired = 0;
    uint64_t t0 = kv_it_now_ms();
    for (int round = 0; kv_it_now_ms() < t0 + 6000; round++) {
        uint64_t sent = kv_it_now_ms();
        for (int i = 0; i < N_LEASES; i++) {
            Etcdserverpb__LeaseKeepAliveRequest k = ETCDSERVERPB__LEASE_KEEP_ALIVE_REQUEST__INIT;
            k.id = 1000 + i;
            uint8_t b[32];
            size_t n = etcdserverpb__lease_keep_alive_request__pack(&k, b);
            cr_assert_eq(kv_it_grpc_send_msg(ka, b, n, 0), 0);
        }
        size_t got = 0;
        while (got < N_LEASES && kv_it_now_ms() < sent + 4000) {
            pump_all(cs, 1 + N_AUTH_CONNS, 1);
            uint8_t *m;
            size_t mlen;
            while (kv_it_grpc_stream_next(ka, &m, &mlen) == 1) {
                Etcdserverpb__LeaseKeepAliveResponse *r =
                    etcdserverpb__lease_keep_alive_response__unpack(NULL, mlen, m);
                cr_assert_not_null(r);
                if (r->ttl <= 0)
                    expired++;
                etcdserverpb__lease_keep_alive_response__free_unpacked(r, NULL);
                free(m);
                if (nlat < sizeof lat / sizeof lat[0])
                    lat[nlat++] = kv_it_now_ms() - sent;
                got++;
            }
        }
        cr_assert_eq(got, N_LEASES, "round %d: %zu of %d renewals answered", round, got, N_LEASES);
        while (kv_it_now_ms() < sent + 500)
            pump_all(cs, 1 + N_AUTH_CONNS, 5);
    }
    /* let the admitted hashes finish */
    uint64_t t1 = kv_it_now_ms();
    int ok = 0, shed = 0, other = 0, open = 1, first_other = -1;
    while (open && kv_it_now_ms() < t1 + 120000) {
        pump_all(cs, 1 + N_AUTH_CONNS, 10);
        open = 0;
        for (int i = 0; i < N_AUTH; i++)
            open |= !as[i]->closed;
    }
    for (int i = 0; i < N_AUTH; i++) {
        if (as[i]->grpc_status == 0)
            ok++;
        else if (as[i]->grpc_status == 8 &&
                 strcmp(as[i]->grpc_message, "etcdserver: too many requests") == 0)
            shed++;
        else if (other++ == 0)
            first_other = i;
    }
    qsort(lat, nlat, sizeof lat[0], cmp_u64);
    uint64_t p50 = lat[nlat / 2], p99 = lat[nlat * 99 / 100], max = lat[nlat - 1];
    cr_log_info("Authenticate x%d: %d ok, %d shed (too many requests), %d other; keepalive "
                "renewals %zu: p50 %llu ms, p99 %llu ms, max %llu ms",
                N_AUTH, ok, shed, other, nlat, (unsigned long long)p50, (unsigned long long)p99,
                (unsigned long long)max);
    fprintf(stderr,
            "auth flood: Authenticate x%d: %d ok, %d shed, %d other; keepalive renewals %zu: "
            "p50 %llu ms, p99 %llu ms, max %llu ms\n",
            N_AUTH, ok, shed, other, nlat, (unsigned long long)p50, (unsigned long long)p99,
            (unsigned long long)max);
    cr_assert_eq(expired, 0, "%zu renewals found their lease expired", expired);
    cr_assert_eq(other, 0,
                 "every Authenticate succeeds or is shed (the first other: closed %d, status %d "
                 "\"%s\")",
                 first_other >= 0 ? as[first_other]->closed : 0,
                 first_other >= 0 ? as[first_other]->grpc_status : 0,
                 first_other >= 0 ? as[first_other]->grpc_message : "");
    cr_assert_gt(ok, 0);
    cr_assert_gt(shed, 0, "the hash queue bound sheds the excess");
    cr_assert_lt(p99, 100, "keepalive p99 %llu ms during the flood (bound: 100 ms)",
                 (unsigned long long)p99);
    int hs = 0;
    char *body = NULL;
    cr_assert_eq(kv_it_http_get(g_kvd.metrics_port, "/metrics", 5000, &hs, &body), 0);
    double refused = -1;
    cr_assert_eq(kv_it_metric_value(body, "kvd_auth_hash_refused_total", &refused), 0);
    free(body);
    cr_assert_eq((int)refused, shed, "kvd_auth_hash_refused_total %g vs %d shed", refused, shed);
    for (int i = 0; i < 1 + N_AUTH_CONNS; i++)
        kv_it_grpc_close(cs[i]);
}

/* kvctl's user / role / auth commands print what etcdctl prints (simple output), each
 * against its own fresh kvd. */
static const char *const kvctl_session[] = {
    "user list",
    "auth enable",
    "user add root --new-user-password=rootpw",
    "user add root --new-user-password=x",
    "role add ro",
    "role add ro",
    "role grant-permission ro read /foo/ --prefix",
    "role grant-permission ro readwrite /rw/k",
    "role grant-permission ro write /w/a /w/z",
    "role grant-permission ro read /o --from-key",
    "role grant-permission ro bogus /x",
    "user add alice --new-user-password=alicepw",
    "user grant-role alice ro",
    "user grant-role alice nosuch",
    "role get ro",
    "user get alice",
    "role list",
    "user list",
    "auth enable",
    "user list",
    "--user root:rootpw put /foo/a 1",
    "--user alice:alicepw get /foo/a",
    "--user alice:alicepw put /foo/b 2",
    "--user alice:wrong get /foo/a",
    "--user alice:alicepw user list",
    "--user alice:alicepw role get ro",
    "--user root:rootpw role revoke-permission ro /rw/k",
    "--user root:rootpw role revoke-permission ro /w/a /w/z",
    "--user root:rootpw role revoke-permission ro /rw/k",
    "--user root:rootpw user revoke-role alice ro",
    "--user root:rootpw user get alice",
    "--user root:rootpw role delete ro",
    "--user root:rootpw user delete alice",
    "--user root:rootpw user delete root",
    "--user root:rootpw auth disable",
    "user list",
};

Test(auth_ctl, kvctl_matches_etcdctl, .fini = fini, .timeout = 300)
{
    char kvctl[PATH_MAX], etcdctl[PATH_MAX];
    cr_assert_eq(kv_it_kvctl_bin(kvctl, sizeof kvctl), 0, "kvctl not found: %s", kvctl);
    cr_assert_eq(kv_it_etcdctl_bin(etcdctl, sizeof etcdctl), 0);
    const char *const extra[] = {"--auth-hash-iterations=2000", NULL};
    start(&g_kvd, &g_kvd_up, KV_IT_KVD, extra);
    start(&g_etcd, &g_etcd_up, KV_IT_KVD, extra); /* a second kvd, driven by etcdctl */
    static char a[16384], b[16384];
    for (size_t i = 0; i < sizeof kvctl_session / sizeof kvctl_session[0]; i++) {
        int ca = ctl_with(kvctl, &g_kvd, a, sizeof a, NULL, kvctl_session[i]);
        int cb = ctl_with(etcdctl, &g_etcd, b, sizeof b, NULL, kvctl_session[i]);
        cr_expect_eq(ca, cb, "`%s`: exit %d (kvctl) vs %d (etcdctl)", kvctl_session[i], ca, cb);
        cr_expect_str_eq(a, b, "`%s`:\n--- kvctl:\n%s--- etcdctl:\n%s", kvctl_session[i], a, b);
    }
}

/* The next complete WatchResponse on st within 5 s (NULL: none, or the stream ended). */
static Etcdserverpb__WatchResponse *next_watch_resp(kv_it_grpc *c, kv_it_grpc_stream *st)
{
    uint64_t end = kv_it_now_ms() + 5000;
    for (;;) {
        uint8_t *m = NULL;
        size_t ml = 0;
        if (kv_it_grpc_stream_next(st, &m, &ml) == 1) {
            Etcdserverpb__WatchResponse *r = etcdserverpb__watch_response__unpack(NULL, ml, m);
            free(m);
            return r;
        }
        if (st->closed || kv_it_now_ms() >= end)
            return NULL;
        kv_it_grpc_pump(c, 50);
    }
}

static void send_watch_req(kv_it_grpc_stream *st, Etcdserverpb__WatchRequest *r)
{
    uint8_t buf[256];
    size_t n = etcdserverpb__watch_request__pack(r, buf);
    cr_assert_eq(kv_it_grpc_send_msg(st, buf, n, 0), 0);
}

/* etcd checks a watch stream's token only when a watcher is created (isWatchPermitted): once
 * the token expires, a cancel on the stream is still answered and the stream stays open, and
 * a create is answered created and canceled with "permission denied". The stream used to end
 * UNAUTHENTICATED at the first message after the expiry, taking every watcher with it. */
Test(auth_ctl, an_expired_token_ends_no_watch_stream, .fini = fini, .timeout = 120)
{
    static char o[8192];
    start_with_auth(
        (const char *const[]){"--auth-hash-iterations=2000", "--auth-token-ttl=2", NULL}, o,
        sizeof o);
    char tok[128];
    kv_it_grpc *c = open_as_root(tok, sizeof tok);
    const char *md[] = {"token", tok, NULL};
    kv_it_grpc_req req = {.metadata = md};
    kv_it_grpc_stream *st = kv_it_grpc_stream_start(c, "/etcdserverpb.Watch/Watch", &req);
    cr_assert_not_null(st);
    Etcdserverpb__WatchCreateRequest cr = ETCDSERVERPB__WATCH_CREATE_REQUEST__INIT;
    cr.key.data = (uint8_t *)"k";
    cr.key.len = 1;
    Etcdserverpb__WatchRequest w = ETCDSERVERPB__WATCH_REQUEST__INIT;
    w.request_union_case = ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_CREATE_REQUEST;
    w.create_request = &cr;
    send_watch_req(st, &w);
    Etcdserverpb__WatchResponse *r = next_watch_resp(c, st);
    cr_assert(r && r->created && !r->canceled, "no Created with a valid token");
    int64_t id = r->watch_id;
    etcdserverpb__watch_response__free_unpacked(r, NULL);

    uint64_t t0 = kv_it_now_ms();
    while (kv_it_now_ms() < t0 + 3500) /* the 2 s token expires unused */
        kv_it_grpc_pump(c, 100);
    Etcdserverpb__WatchCancelRequest cc = ETCDSERVERPB__WATCH_CANCEL_REQUEST__INIT;
    cc.watch_id = id;
    Etcdserverpb__WatchRequest wc = ETCDSERVERPB__WATCH_REQUEST__INIT;
    wc.request_union_case = ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_CANCEL_REQUEST;
    wc.cancel_request = &cc;
    send_watch_req(st, &wc);
    r = next_watch_resp(c, st);
    cr_assert(r, "the stream ended at a cancel after the token expired: %d %s", st->grpc_status,
              st->grpc_message);
    cr_assert(r->canceled && r->watch_id == id, "canceled %d id %lld", r->canceled,
              (long long)r->watch_id);
    etcdserverpb__watch_response__free_unpacked(r, NULL);
    send_watch_req(st, &w);
    r = next_watch_resp(c, st);
    cr_assert(r, "the stream ended at a create after the token expired");
    cr_assert(r->created && r->canceled, "created %d canceled %d", r->created, r->canceled);
    cr_assert_str_eq(r->cancel_reason, "etcdserver: permission denied");
    etcdserverpb__watch_response__free_unpacked(r, NULL);
    cr_assert(!st->closed, "the stream ended");
    kv_it_grpc_close(c);
}

/* A v3lock Lock of name on lease with token, on its own stream (not waited for). */
static kv_it_grpc_stream *lock_start(kv_it_grpc *c, const char *tok, const char *name,
                                     int64_t lease)
{
    const char *md[] = {"token", tok, NULL};
    kv_it_grpc_req req = {.metadata = md};
    kv_it_grpc_stream *st = kv_it_grpc_stream_start(c, "/v3lockpb.Lock/Lock", &req);
    cr_assert_not_null(st);
    V3lockpb__LockRequest r = V3LOCKPB__LOCK_REQUEST__INIT;
    r.name.data = (uint8_t *)name;
    r.name.len = strlen(name);
    r.lease = lease;
    uint8_t buf[128];
    size_t n = v3lockpb__lock_request__pack(&r, buf);
    cr_assert_eq(kv_it_grpc_send_msg(st, buf, n, 1), 0);
    return st;
}

/* The lease id of "lease <hex> granted with TTL(60s)". */
static int64_t grant_as_root(char *o, size_t cap)
{
    cr_assert_eq(ctl(&g_kvd, o, cap, NULL, "--user root:rootpw lease grant 60"), 0, "%s", o);
    unsigned long long id = 0;
    cr_assert_eq(sscanf(o, "lease %llx granted", &id), 1, "%s", o);
    return (int64_t)id;
}

/* Keys under lk/ (etcdctl get --prefix --keys-only, as root). */
static int lock_keys(char *o, size_t cap)
{
    cr_assert_eq(ctl(&g_kvd, o, cap, NULL, "--user root:rootpw get lk/ --prefix --keys-only"), 0,
                 "%s", o);
    int n = 0;
    for (const char *p = o; (p = strstr(p, "lk/")) != NULL; p += 3)
        n++;
    return n;
}

/* A Lock waiting behind a holder whose client goes away is undone by the member (its key is
 * deleted). The undo used to carry the auth revision the Lock was checked at: an auth change
 * while it waited (here a user added) made the apply refuse it, and the waiter's key stayed,
 * to become the lock's owner later and block every other locker until its lease ended. */
Test(auth_ctl, a_waiting_lock_is_undone_after_an_auth_change, .fini = fini, .timeout = 120)
{
    static char o[8192];
    start_with_auth((const char *const[]){"--auth-hash-iterations=2000", NULL}, o, sizeof o);
    int64_t l1 = grant_as_root(o, sizeof o), l2 = grant_as_root(o, sizeof o);
    char tok[128];
    kv_it_grpc *h = open_as_root(tok, sizeof tok), *w = NULL;
    cr_assert_eq(kv_it_grpc_open(&w, "127.0.0.1", g_kvd.client_port, 5000), 0);
    kv_it_grpc_stream *held = lock_start(h, tok, "lk", l1);
    cr_assert_eq(kv_it_grpc_wait(h, held, 10000), 1, "the holder did not get the lock");
    cr_assert_eq(held->grpc_status, 0, "%s", held->grpc_message);
    kv_it_grpc_stream *waiter = lock_start(w, tok, "lk", l2);
    kv_it_grpc_wait(w, waiter, 1000);
    cr_assert(!waiter->closed, "the second Lock did not wait");
    cr_assert_eq(lock_keys(o, sizeof o), 2, "holder and waiter keys: %s", o);
    cr_assert_eq(ctl(&g_kvd, o, sizeof o, NULL, "--user root:rootpw user add u2:pw2"), 0, "%s", o);
    kv_it_grpc_close(w); /* the waiter's client goes away: the member undoes its key */
    uint64_t end = kv_it_now_ms() + 5000;
    int n = 2;
    while ((n = lock_keys(o, sizeof o)) != 1 && kv_it_now_ms() < end)
        kv_it_grpc_pump(h, 100);
    cr_assert_eq(n, 1, "the waiter's key stayed after an auth change: %s", o);
    kv_it_grpc_close(h);
}

/* A unary KV call with no token: the grpc-status; msg gets grpc-message. */
static int call_anonymous(const kv_it_server *s, const char *method, const ProtobufCMessage *m,
                          char *msg, size_t cap)
{
    kv_it_grpc *c = NULL;
    cr_assert_eq(kv_it_grpc_open(&c, "127.0.0.1", s->client_port, 5000), 0);
    uint8_t buf[512], *resp = NULL;
    size_t n = protobuf_c_message_pack(m, buf), rlen = 0;
    int status = 0;
    msg[0] = 0;
    int rc = kv_it_grpc_call(c, method, buf, n, &resp, &rlen, 10000, &status, msg, cap);
    free(resp);
    kv_it_grpc_close(c);
    return rc == 0 ? 0 : status;
}

/* etcd validates a KV request before it authorizes it (api/v3rpc/key.go runs before the
 * server's auth checks): with auth enabled, an anonymous Put, Range, DeleteRange or Txn whose
 * key is empty gets INVALID_ARGUMENT "etcdserver: key is not provided", and a Txn that puts
 * one key twice "etcdserver: duplicate key given in txn request", not "user name is empty";
 * with a token that is no token, not "invalid auth token".
 * Checked against etcd too when it is installed. */
static void invalid_requests_before_auth(kv_it_server *s, int *up, kv_it_kind kind)
{
    static char o[4096];
    static const char *const fast_hash[] = {"--auth-hash-iterations=2000", NULL};
    start(s, up, kind, kind == KV_IT_KVD ? fast_hash : NULL); /* a kvd flag */
    ctl(s, o, sizeof o, NULL, "user add root --new-user-password=rootpw");
    cr_assert_eq(ctl(s, o, sizeof o, NULL, "auth enable"), 0, "%s", o);
    const char *who = kv_it_kind_name(kind);
    char msg[512];
    Etcdserverpb__PutRequest put = ETCDSERVERPB__PUT_REQUEST__INIT;
    cr_assert_eq(call_anonymous(s, "/etcdserverpb.KV/Put", &put.base, msg, sizeof msg), 3,
                 "%s: Put of an empty key: %s", who, msg);
    cr_assert_str_eq(msg, "etcdserver: key is not provided", "%s", who);
    Etcdserverpb__RangeRequest range = ETCDSERVERPB__RANGE_REQUEST__INIT;
    cr_assert_eq(call_anonymous(s, "/etcdserverpb.KV/Range", &range.base, msg, sizeof msg), 3,
                 "%s: Range of an empty key: %s", who, msg);
    cr_assert_str_eq(msg, "etcdserver: key is not provided", "%s", who);
    Etcdserverpb__DeleteRangeRequest del = ETCDSERVERPB__DELETE_RANGE_REQUEST__INIT;
    cr_assert_eq(call_anonymous(s, "/etcdserverpb.KV/DeleteRange", &del.base, msg, sizeof msg), 3,
                 "%s: DeleteRange of an empty key: %s", who, msg);
    cr_assert_str_eq(msg, "etcdserver: key is not provided", "%s", who);
    Etcdserverpb__PutRequest p1 = ETCDSERVERPB__PUT_REQUEST__INIT;
    p1.key.data = (uint8_t *)"k";
    p1.key.len = 1;
    Etcdserverpb__RequestOp op = ETCDSERVERPB__REQUEST_OP__INIT;
    op.request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT;
    op.request_put = &p1;
    Etcdserverpb__RequestOp *ops[2] = {&op, &op};
    Etcdserverpb__TxnRequest txn = ETCDSERVERPB__TXN_REQUEST__INIT;
    txn.success = ops;
    txn.n_success = 2;
    cr_assert_eq(call_anonymous(s, "/etcdserverpb.KV/Txn", &txn.base, msg, sizeof msg), 3,
                 "%s: Txn putting k twice: %s", who, msg);
    cr_assert_str_eq(msg, "etcdserver: duplicate key given in txn request", "%s", who);
    /* before the token too: a Range of an empty key with a token that is no token */
    kv_it_grpc *c = NULL;
    cr_assert_eq(kv_it_grpc_open(&c, "127.0.0.1", s->client_port, 5000), 0);
    cr_assert_eq(range_with_token(c, "no-such-token", "", msg, sizeof msg), 3,
                 "%s: Range of an empty key with a bad token: %s", who, msg);
    cr_assert_str_eq(msg, "etcdserver: key is not provided", "%s", who);
    kv_it_grpc_close(c);
    /* a valid request is then authorized: anonymous is refused */
    put.key = p1.key;
    cr_assert_neq(call_anonymous(s, "/etcdserverpb.KV/Put", &put.base, msg, sizeof msg), 0);
    cr_assert_str_eq(msg, "etcdserver: user name is empty", "%s", who);
}

Test(auth_ctl, an_invalid_request_gets_its_own_error_before_authorization, .fini = fini,
     .timeout = 120)
{
    invalid_requests_before_auth(&g_kvd, &g_kvd_up, KV_IT_KVD);
    char bin[PATH_MAX];
    if (kv_it_server_bin(KV_IT_ETCD, bin, sizeof bin) == 0)
        invalid_requests_before_auth(&g_etcd, &g_etcd_up, KV_IT_ETCD);
    else
        cr_log_warn("no etcd at %s: kvd's answers are checked against etcd's messages only", bin);
}
