/*
 * test_auth_leaseperm.c - lease permissions with auth enabled (etcd 3.4 apply_auth.go
 * checkLeasePuts) and the JSON gateway's Authorization header:
 *   - at apply (server/apply/apply_perm.c, on a real store): a LeaseRevoke entry carrying a
 *     user who cannot write a key attached to the lease is refused with "etcdserver:
 *     permission denied" (lease and keys kept); the lessor's own revoke (no user) is not; a
 *     Put, or a put in a nested Txn, that attaches a key to such a lease is refused too;
 *   - through kvd with real etcdctl 3.4: the same refusals, with etcdctl's output as etcd 3.4
 *     prints it (checked by hand against /usr/bin/etcd: "Error: failed to revoke lease
 *     (etcdserver: permission denied)", "Error: etcdserver: permission denied");
 *   - a lease granted by root with a key attached expires with auth enabled and its key goes;
 *   - POST /v3/kv/put with "Authorization: <token>" (curl), without it and with a bad token,
 *     answered with etcd 3.4's gateway status and error JSON (taken from etcd 3.4 by hand);
 *     a value over 4 KiB is dropped (kvd's bound, as for gRPC metadata).
 */
#include <criterion/criterion.h>
#include "kvt_skip.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvt_store.h"
#include "auth_apply_util.h"
#include "auth.pb-c.h"
#include "common/etcd_errors.h"
#include "auth_ctl_util.h"
#include "harness.h"
#include "mvcc/auth_store.h"

/* ---- at apply ---- */

static kvt_store g_t;

static void setup(void)
{
    kvt_store_open(&g_t, NULL);
}

static void teardown(void)
{
    kvt_store_close(&g_t);
}

/* A LeaseRevoke entry as proposed by a client (user, auth revision) or by the lessor
 * (user NULL: no auth fields). */
static void revoke_as(const char *user, uint64_t arev, int64_t id, kv_etcd_err want)
{
    Etcdserverpb__LeaseRevokeRequest r = ETCDSERVERPB__LEASE_REVOKE_REQUEST__INIT;
    r.id = id;
    Kvdpb__InternalRequest ir = KVDPB__INTERNAL_REQUEST__INIT;
    ir.request_case = KVDPB__INTERNAL_REQUEST__REQUEST_LEASE_REVOKE;
    ir.lease_revoke = &r;
    if (user) {
        ir.auth_user = (char *)user;
        ir.auth_revision = arev;
    }
    aau_apply(&g_t, &ir, want);
}

static void put_as(const char *user, uint64_t arev, const char *key, int64_t lease,
                   kv_etcd_err want)
{
    Etcdserverpb__PutRequest p = ETCDSERVERPB__PUT_REQUEST__INIT;
    p.key = kvt_bin(key);
    p.value = kvt_bin("v");
    p.lease = lease;
    Kvdpb__InternalRequest ir = KVDPB__INTERNAL_REQUEST__INIT;
    ir.request_case = KVDPB__INTERNAL_REQUEST__REQUEST_PUT;
    ir.put = &p;
    ir.auth_user = (char *)user;
    ir.auth_revision = arev;
    aau_apply(&g_t, &ir, want);
}

/* Txn { success: [ Txn { success or failure: [ put key lease ] } ] }, no compares: the
 * inner success branch runs; a put in the failure branch does not, but both branches are
 * checked (as at arrival, auth_gate.c). */
static void nested_txn_put_as(const char *user, uint64_t arev, const char *key, int64_t lease,
                              int in_failure, kv_etcd_err want)
{
    Etcdserverpb__PutRequest p = ETCDSERVERPB__PUT_REQUEST__INIT;
    p.key = kvt_bin(key);
    p.value = kvt_bin("v");
    p.lease = lease;
    Etcdserverpb__RequestOp op = ETCDSERVERPB__REQUEST_OP__INIT;
    op.request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT;
    op.request_put = &p;
    Etcdserverpb__RequestOp *ops[] = {&op};
    Etcdserverpb__TxnRequest inner = ETCDSERVERPB__TXN_REQUEST__INIT;
    if (in_failure) {
        inner.failure = ops;
        inner.n_failure = 1;
    } else {
        inner.success = ops;
        inner.n_success = 1;
    }
    Etcdserverpb__RequestOp iop = ETCDSERVERPB__REQUEST_OP__INIT;
    iop.request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_TXN;
    iop.request_txn = &inner;
    Etcdserverpb__RequestOp *outer_ops[] = {&iop};
    Etcdserverpb__TxnRequest outer = ETCDSERVERPB__TXN_REQUEST__INIT;
    outer.success = outer_ops;
    outer.n_success = 1;
    Kvdpb__InternalRequest ir = KVDPB__INTERNAL_REQUEST__INIT;
    ir.request_case = KVDPB__INTERNAL_REQUEST__REQUEST_TXN;
    ir.txn = &outer;
    ir.auth_user = (char *)user;
    ir.auth_revision = arev;
    aau_apply(&g_t, &ir, want);
}

static int has_key(const char *k)
{
    Mvccpb__KeyValue *kv = kvt_store_get(&g_t, k, 0);
    int r = kv != NULL;
    if (kv)
        mvccpb__key_value__free_unpacked(kv, NULL);
    return r;
}

static int lease_exists(int64_t id)
{
    kv_result r;
    Etcdserverpb__LeaseGrantResponse *g = kvt_store_grant(&g_t, id, 100, &r);
    free(r.resp);
    if (g) { /* it did not exist: granted now, undo */
        etcdserverpb__lease_grant_response__free_unpacked(g, NULL);
        revoke_as(NULL, 0, id, 0);
        return 0;
    }
    cr_assert_str_eq(KVT_STORE_MSG(r), kv_etcd_err_msg(KV_ERR_LEASE_EXIST));
    return 1;
}

enum { L_MIXED = 1, L_MINE = 2, L_EMPTY = 3 };

/* root (root role), role "ra" with WRITE on the prefix "a/", user "u" with role "ra"; lease
 * L_MIXED holds "secret" and "a/1", L_MINE holds "a/2", L_EMPTY none; auth enabled. */
static uint64_t fixture(void)
{
    aau_user_add(&g_t, "root", 0);
    aau_grant_role(&g_t, "root", "root", 0);
    aau_role_add(&g_t, "ra", 0);
    aau_role_grant(&g_t, "ra", AUTHPB__PERMISSION__TYPE__WRITE, "a/", "a0", 0);
    aau_user_add(&g_t, "u", 0);
    aau_grant_role(&g_t, "u", "ra", 0);
    kv_result r;
    for (int64_t id = L_MIXED; id <= L_EMPTY; id++) {
        Etcdserverpb__LeaseGrantResponse *g = kvt_store_grant(&g_t, id, 100, &r);
        cr_assert_not_null(g, "%s", KVT_STORE_MSG(r));
        etcdserverpb__lease_grant_response__free_unpacked(g, NULL);
        free(r.resp);
    }
    kvt_store_put(&g_t, "secret", "s", L_MIXED);
    kvt_store_put(&g_t, "a/1", "1", L_MIXED);
    kvt_store_put(&g_t, "a/2", "2", L_MINE);
    aau_enable(&g_t, 0);
    return aau_revision(&g_t);
}

Test(auth_leaseperm_apply, revoke_rechecked_at_apply, .init = setup, .fini = teardown)
{
    uint64_t rev = fixture();
    /* u passed the arrival check before "secret" was attached; at apply it is there */
    revoke_as("u", rev, L_MIXED, KV_ERR_PERMISSION_DENIED);
    cr_assert(has_key("secret") && has_key("a/1"), "a refused revoke deletes nothing");
    cr_assert(lease_exists(L_MIXED));
    revoke_as("u", rev, L_MINE, 0); /* every key writable */
    cr_assert(!has_key("a/2"));
    cr_assert(!lease_exists(L_MINE));
    revoke_as("u", rev, L_EMPTY, 0); /* no keys: nothing to check (etcd) */
    revoke_as("nobody", rev, L_MIXED, KV_ERR_PERMISSION_DENIED); /* no such user */
    cr_assert(lease_exists(L_MIXED));
    /* checked at an older auth revision: etcd isOpPermitted's answer */
    aau_role_add(&g_t, "other", 0);
    revoke_as("u", rev, L_MIXED, KV_ERR_AUTH_OLD_REVISION);
    cr_assert(lease_exists(L_MIXED));
    /* root passes whatever the revision (etcd IsAdminPermitted first) */
    revoke_as("root", rev, L_MIXED, 0);
    cr_assert(!has_key("secret") && !has_key("a/1"));
}

Test(auth_leaseperm_apply, lessor_revoke_not_refused, .init = setup, .fini = teardown)
{
    fixture();
    revoke_as(NULL, 0, L_MIXED, 0); /* expiry: no user, runs as root (etcd WithRoot) */
    cr_assert(!has_key("secret") && !has_key("a/1"));
    cr_assert(!lease_exists(L_MIXED));
}

Test(auth_leaseperm_apply, put_with_lease_checked_at_apply, .init = setup, .fini = teardown)
{
    uint64_t rev = fixture();
    put_as("u", rev, "a/x", L_MIXED, KV_ERR_PERMISSION_DENIED);
    cr_assert(!has_key("a/x"));
    put_as("u", rev, "a/x", L_MINE, 0);
    cr_assert(has_key("a/x"));
    put_as("u", rev, "a/y", L_EMPTY, 0);
    put_as("u", rev, "a/z", 0, 0);
    put_as("u", rev, "a/w", 99, KV_ERR_LEASE_NOT_FOUND); /* unknown lease: the put's error */
    nested_txn_put_as("u", rev, "a/t", L_MIXED, 0, KV_ERR_PERMISSION_DENIED);
    nested_txn_put_as("u", rev, "a/t", L_MIXED, 1, KV_ERR_PERMISSION_DENIED);
    cr_assert(!has_key("a/t"));
    nested_txn_put_as("u", rev, "a/t", L_MINE, 0, 0);
    cr_assert(has_key("a/t"));
    put_as("root", rev, "secret2", L_MIXED, 0);
}

/* ---- through kvd ---- */

static kv_it_server g_kvd;
static int g_kvd_up;

static void fini(void)
{
    if (g_kvd_up)
        kv_it_server_destroy(&g_kvd);
    g_kvd_up = 0;
}

static void start(void)
{
    static const char *const extra[] = {"--auth-hash-iterations=2000", NULL};
    cr_assert_eq(kv_it_server_init(&g_kvd, KV_IT_KVD, extra), 0);
    g_kvd_up = 1;
    int rc = kv_it_server_start(&g_kvd, 20000);
    if (rc) {
        char *log = NULL;
        kv_it_server_log(&g_kvd, &log);
        cr_log_error("kvd did not start (%d):\n%s", rc, log ? log : "");
        free(log);
    }
    cr_assert_eq(rc, 0);
}

/* etcdctl with the space-separated words of cmd; out = stdout + stderr without clientv3's
 * JSON retry warnings. Returns the exit code. */
static int ctl(char *out, size_t cap, const char *stdin_data, const char *cmd)
{
    char bin[PATH_MAX];
    cr_assert_eq(kv_it_etcdctl_bin(bin, sizeof bin), 0, "etcdctl not found: %s", bin);
    return acu_etcdctl(bin, g_kvd.endpoint, stdin_data, cmd, out, cap);
}

static void ctl_ok(char *out, size_t cap, const char *cmd)
{
    cr_assert_eq(ctl(out, cap, NULL, cmd), 0, "`etcdctl %s`: %s", cmd, out);
}

/* root, role ra (readwrite "a/" prefix), user u:pw with ra, auth enabled. */
static void setup_users(void)
{
    static char o[4096];
    ctl_ok(o, sizeof o, "user add root --new-user-password=rootpw");
    ctl_ok(o, sizeof o, "role add ra");
    ctl_ok(o, sizeof o, "role grant-permission ra readwrite a/ --prefix");
    ctl_ok(o, sizeof o, "user add u --new-user-password=pw");
    ctl_ok(o, sizeof o, "user grant-role u ra");
    ctl_ok(o, sizeof o, "auth enable");
}

static void lease_grant(const char *user, int ttl, char *id, size_t cap)
{
    char cmd[128], o[1024], fmt[32];
    snprintf(cmd, sizeof cmd, "--user %s lease grant %d", user, ttl);
    ctl_ok(o, sizeof o, cmd);
    snprintf(fmt, sizeof fmt, "lease %%%zus granted", cap - 1);
    cr_assert_eq(sscanf(o, fmt, id), 1, "%s", o);
}

Test(auth_leaseperm, etcdctl_put_txn_and_revoke, .fini = fini, .timeout = 180)
{
    start();
    setup_users();
    static char o[8192];
    char L[32], L2[32], cmd[256];
    lease_grant("root:rootpw", 100, L, sizeof L);
    snprintf(cmd, sizeof cmd, "--user root:rootpw put secret s --lease=%s", L);
    ctl_ok(o, sizeof o, cmd);
    /* attaching a key to a lease that holds a key u cannot write */
    snprintf(cmd, sizeof cmd, "--user u:pw put a/x 1 --lease=%s", L);
    cr_assert_neq(ctl(o, sizeof o, NULL, cmd), 0);
    cr_assert_str_eq(o, "Error: etcdserver: permission denied\n");
    char in[256];
    snprintf(in, sizeof in, "\nput a/z 1 --lease=%s\n\n\n", L);
    cr_assert_neq(ctl(o, sizeof o, in, "--user u:pw txn --interactive=false"), 0);
    cr_assert_str_eq(o, "Error: etcdserver: permission denied\n");
    /* its own lease: fine */
    lease_grant("u:pw", 100, L2, sizeof L2);
    snprintf(cmd, sizeof cmd, "--user u:pw put a/y 1 --lease=%s", L2);
    ctl_ok(o, sizeof o, cmd);
    cr_assert_str_eq(o, "OK\n");
    snprintf(in, sizeof in, "\nput a/w 1 --lease=%s\n\n\n", L2);
    cr_assert_eq(ctl(o, sizeof o, in, "--user u:pw txn --interactive=false"), 0, "%s", o);
    cr_assert_str_eq(o, "SUCCESS\n\nOK\n");
    /* the revoke: etcd 3.4's etcdctl output */
    snprintf(cmd, sizeof cmd, "--user u:pw lease revoke %s", L);
    cr_assert_neq(ctl(o, sizeof o, NULL, cmd), 0);
    cr_assert_str_eq(o, "Error: failed to revoke lease (etcdserver: permission denied)\n");
    ctl_ok(o, sizeof o, "--user root:rootpw get secret");
    cr_assert_str_eq(o, "secret\ns\n", "the refused revoke kept the key");
    ctl_ok(o, sizeof o, "--user root:rootpw get a/x");
    cr_assert_str_eq(o, "", "the refused put wrote nothing");
    snprintf(cmd, sizeof cmd, "--user u:pw lease revoke %s", L2);
    ctl_ok(o, sizeof o, cmd);
    ctl_ok(o, sizeof o, "--user root:rootpw get a/ --prefix --keys-only");
    cr_assert_str_eq(o, "", "a/y and a/w went with their lease: %s", o);
}

Test(auth_leaseperm, lease_expiry_with_auth_enabled, .fini = fini, .timeout = 120)
{
    start();
    setup_users();
    static char o[4096];
    char L[32], cmd[256];
    lease_grant("root:rootpw", 2, L, sizeof L);
    snprintf(cmd, sizeof cmd, "--user root:rootpw put secret s --lease=%s", L);
    ctl_ok(o, sizeof o, cmd);
    uint64_t deadline = kv_it_now_ms() + 30000;
    int gone = 0;
    while (!gone && kv_it_now_ms() < deadline) {
        ctl_ok(o, sizeof o, "--user root:rootpw get secret");
        gone = o[0] == 0;
        if (!gone)
            usleep(300 * 1000);
    }
    cr_assert(gone, "the expired lease's key is still there: %s", o);
    ctl_ok(o, sizeof o, "--user root:rootpw lease list");
    cr_assert_str_eq(o, "found 0 leases\n");
}

/* POST url with body and (if auth) "Authorization: <auth>" through curl; *status gets the
 * HTTP status, out the body. */
static void curl_post(const char *path, const char *body, const char *auth, int *status, char *out,
                      size_t cap)
{
    static const char curl[] = "/usr/bin/curl";
    if (access(curl, X_OK) != 0)
        KVT_SKIP_MISSING("no %s", curl);
    char url[256], hdr[8192];
    snprintf(url, sizeof url, "http://%s%s", g_kvd.endpoint, path);
    const char *argv[16];
    int n = 0;
    argv[n++] = curl;
    argv[n++] = "-s";
    argv[n++] = "-w";
    argv[n++] = "\n%{http_code}";
    argv[n++] = "-X";
    argv[n++] = "POST";
    argv[n++] = "-d";
    argv[n++] = body;
    if (auth) {
        snprintf(hdr, sizeof hdr, "Authorization: %s", auth);
        argv[n++] = "-H";
        argv[n++] = hdr;
    }
    argv[n++] = url;
    argv[n] = NULL;
    kv_it_cmd_result r;
    cr_assert_eq(kv_it_run(argv, NULL, NULL, 0, 20000, &r), 0);
    cr_assert_eq(r.exit_code, 0, "curl: %s", r.err ? r.err : "");
    char *nl = r.out ? strrchr(r.out, '\n') : NULL;
    cr_assert_not_null(nl, "%s", r.out ? r.out : "");
    *status = atoi(nl + 1);
    *nl = 0;
    snprintf(out, cap, "%s", r.out);
    kv_it_cmd_result_free(&r);
}

Test(auth_leaseperm, gateway_authorization_header, .fini = fini, .timeout = 120)
{
    start();
    setup_users();
    static char o[8192];
    int st;
    curl_post("/v3/auth/authenticate", "{\"name\":\"u\",\"password\":\"pw\"}", NULL, &st, o,
              sizeof o);
    cr_assert_eq(st, 200, "%s", o);
    char *t = strstr(o, "\"token\":\"");
    cr_assert_not_null(t, "%s", o);
    t += 9;
    char token[512];
    size_t tl = strcspn(t, "\"");
    cr_assert_lt(tl, sizeof token);
    memcpy(token, t, tl);
    token[tl] = 0;
    static const char put[] = "{\"key\":\"YS9x\",\"value\":\"MQ==\"}"; /* a/q = 1 */
    curl_post("/v3/kv/put", put, token, &st, o, sizeof o);
    cr_assert_eq(st, 200, "%s", o);
    cr_assert(strncmp(o, "{\"header\":{", 11) == 0, "%s", o);
    ctl_ok(o, sizeof o, "--user root:rootpw get a/q");
    cr_assert_str_eq(o, "a/q\n1\n");
    /* etcd 3.4's answers, byte for byte */
    curl_post("/v3/kv/put", put, NULL, &st, o, sizeof o);
    cr_assert_eq(st, 400, "%s", o);
    cr_assert_str_eq(o, "{\"error\":\"etcdserver: user name is empty\",\"message\":\"etcdserver: "
                        "user name is empty\",\"code\":3}");
    curl_post("/v3/kv/put", put, "bogus", &st, o, sizeof o);
    cr_assert_eq(st, 401, "%s", o);
    cr_assert_str_eq(o, "{\"error\":\"etcdserver: invalid auth token\",\"message\":\"etcdserver: "
                        "invalid auth token\",\"code\":16}");
    /* kvd keeps at most 4 KiB of it, as of gRPC metadata: a longer one is no token */
    static char big[5001];
    memset(big, 'x', sizeof big - 1);
    curl_post("/v3/kv/put", put, big, &st, o, sizeof o);
    cr_assert_eq(st, 400, "%s", o);
    cr_assert(strstr(o, "etcdserver: user name is empty"), "%s", o);
    /* the token's user is checked like a gRPC caller's */
    curl_post("/v3/kv/put", "{\"key\":\"c2VjcmV0\",\"value\":\"MQ==\"}", token, &st, o, sizeof o);
    cr_assert_eq(st, 403, "%s", o);
    cr_assert_str_eq(o, "{\"error\":\"etcdserver: permission denied\",\"message\":\"etcdserver: "
                        "permission denied\",\"code\":7}");
}
