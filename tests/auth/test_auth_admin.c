/*
 * test_auth_admin.c - with auth enabled, through kvd with real etcdctl 3.4 and raw gRPC:
 *   - LeaseTimeToLive with keys (etcd 3.4.26 checkLeaseTimeToLive, CVE-2023-32082): the caller
 *     needs READ on every key attached to the lease, else "etcdserver: permission denied";
 *     an anonymous caller gets "etcdserver: user name is empty"; without keys it is open;
 *   - Alarm ACTIVATE / DEACTIVATE and Compact need the root role (stricter than etcd 3.4.23,
 *     README "Authentication"); Alarm GET stays open to any caller.
 */
#include <criterion/criterion.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth_ctl_util.h"
#include "grpc_raw.h"
#include "harness.h"
#include "rpc.pb-c.h"

static kv_it_server g_kvd;
static int g_up;

static void fini(void)
{
    if (g_up)
        kv_it_server_destroy(&g_kvd);
    g_up = 0;
}

static void start(void)
{
    static const char *const extra[] = {"--auth-hash-iterations=2000", NULL};
    cr_assert_eq(kv_it_server_init(&g_kvd, KV_IT_KVD, extra), 0);
    g_up = 1;
    cr_assert_eq(kv_it_server_start(&g_kvd, 20000), 0);
}

static int ctl(char *out, size_t cap, const char *cmd)
{
    char bin[PATH_MAX];
    cr_assert_eq(kv_it_etcdctl_bin(bin, sizeof bin), 0, "etcdctl not found: %s", bin);
    return acu_etcdctl(bin, g_kvd.endpoint, NULL, cmd, out, cap);
}

static void ctl_ok(char *out, size_t cap, const char *cmd)
{
    cr_assert_eq(ctl(out, cap, cmd), 0, "`etcdctl %s`: %s", cmd, out);
}

/* root; role ra (readwrite "a/" prefix); user u:pw with ra; auth enabled. */
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

static void lease_grant(const char *user, char *id, size_t cap)
{
    char cmd[128], o[1024], fmt[32];
    snprintf(cmd, sizeof cmd, "--user %s lease grant 100", user);
    ctl_ok(o, sizeof o, cmd);
    snprintf(fmt, sizeof fmt, "lease %%%zus granted", cap - 1);
    cr_assert_eq(sscanf(o, fmt, id), 1, "%s", o);
}

Test(auth_admin, lease_timetolive_keys_need_read, .fini = fini, .timeout = 180)
{
    start();
    setup_users();
    static char o[8192];
    char L[32], L2[32], cmd[256];
    lease_grant("root:rootpw", L, sizeof L);
    snprintf(cmd, sizeof cmd, "--user root:rootpw put secret/k s --lease=%s", L);
    ctl_ok(o, sizeof o, cmd);
    snprintf(cmd, sizeof cmd, "--user root:rootpw put a/x 1 --lease=%s", L);
    ctl_ok(o, sizeof o, cmd);
    /* u may read a/x but not secret/k: the key list is refused */
    snprintf(cmd, sizeof cmd, "--user u:pw lease timetolive %s --keys", L);
    cr_assert_neq(ctl(o, sizeof o, cmd), 0, "%s", o);
    cr_assert(strstr(o, "etcdserver: permission denied"), "%s", o);
    cr_assert_null(strstr(o, "secret"), "%s", o);
    /* anonymous */
    snprintf(cmd, sizeof cmd, "lease timetolive %s --keys", L);
    cr_assert_neq(ctl(o, sizeof o, cmd), 0, "%s", o);
    cr_assert(strstr(o, "etcdserver: user name is empty"), "%s", o);
    /* without keys: open, as etcd */
    snprintf(cmd, sizeof cmd, "--user u:pw lease timetolive %s", L);
    ctl_ok(o, sizeof o, cmd);
    cr_assert(strstr(o, "remaining"), "%s", o);
    /* root sees both keys */
    snprintf(cmd, sizeof cmd, "--user root:rootpw lease timetolive %s --keys", L);
    ctl_ok(o, sizeof o, cmd);
    cr_assert(strstr(o, "secret/k") && strstr(o, "a/x"), "%s", o);
    /* u's own lease over keys it can read: listed */
    lease_grant("u:pw", L2, sizeof L2);
    snprintf(cmd, sizeof cmd, "--user u:pw put a/y 1 --lease=%s", L2);
    ctl_ok(o, sizeof o, cmd);
    snprintf(cmd, sizeof cmd, "--user u:pw lease timetolive %s --keys", L2);
    ctl_ok(o, sizeof o, cmd);
    cr_assert(strstr(o, "a/y"), "%s", o);
    /* once the unreadable key is gone, u may list L's keys */
    ctl_ok(o, sizeof o, "--user root:rootpw del secret/k");
    snprintf(cmd, sizeof cmd, "--user u:pw lease timetolive %s --keys", L);
    ctl_ok(o, sizeof o, cmd);
    cr_assert(strstr(o, "a/x"), "%s", o);
}

static void token_of(kv_it_grpc *c, const char *user, const char *pw, char *tok, size_t cap)
{
    Etcdserverpb__AuthenticateRequest r = ETCDSERVERPB__AUTHENTICATE_REQUEST__INIT;
    r.name = (char *)user;
    r.password = (char *)pw;
    uint8_t buf[256], *resp = NULL;
    size_t n = etcdserverpb__authenticate_request__pack(&r, buf), rlen = 0;
    int status = -1;
    char msg[256];
    cr_assert_eq(kv_it_grpc_call(c, "/etcdserverpb.Auth/Authenticate", buf, n, &resp, &rlen, 30000,
                                 &status, msg, sizeof msg),
                 0, "%s", msg);
    Etcdserverpb__AuthenticateResponse *ar =
        etcdserverpb__authenticate_response__unpack(NULL, rlen, resp);
    cr_assert_not_null(ar);
    snprintf(tok, cap, "%s", ar->token);
    etcdserverpb__authenticate_response__free_unpacked(ar, NULL);
    free(resp);
}

/* A unary call with the token: its grpc-status; msg gets grpc-message. */
static int call_with(kv_it_grpc *c, const char *tok, const char *path, const uint8_t *req, size_t n,
                     char *msg, size_t cap)
{
    const char *md[] = {"token", tok, NULL};
    kv_it_grpc_req rq = {.metadata = md};
    kv_it_grpc_stream *st = kv_it_grpc_stream_start(c, path, &rq);
    cr_assert_not_null(st);
    cr_assert_eq(kv_it_grpc_send_msg(st, req, n, 1), 0);
    cr_assert_eq(kv_it_grpc_wait(c, st, 20000), 1, "no answer to %s", path);
    int status = st->grpc_status;
    snprintf(msg, cap, "%s", st->grpc_message);
    kv_it_grpc_stream_free(st);
    return status;
}

static int alarm_as(kv_it_grpc *c, const char *tok, int action, char *msg, size_t cap)
{
    Etcdserverpb__AlarmRequest r = ETCDSERVERPB__ALARM_REQUEST__INIT;
    r.action = (Etcdserverpb__AlarmRequest__AlarmAction)action;
    r.alarm = ETCDSERVERPB__ALARM_TYPE__NOSPACE;
    r.memberid = 0;
    uint8_t buf[64];
    size_t n = etcdserverpb__alarm_request__pack(&r, buf);
    return call_with(c, tok, "/etcdserverpb.Maintenance/Alarm", buf, n, msg, cap);
}

Test(auth_admin, alarm_and_compact_need_root, .fini = fini, .timeout = 180)
{
    start();
    setup_users();
    static char o[8192];
    ctl_ok(o, sizeof o, "--user root:rootpw put a/k 1");
    ctl_ok(o, sizeof o, "--user root:rootpw put a/k 2");
    /* etcdctl: u may list alarms, not compact */
    ctl_ok(o, sizeof o, "--user u:pw alarm list");
    cr_assert_neq(ctl(o, sizeof o, "--user u:pw compaction 2"), 0, "%s", o);
    cr_assert(strstr(o, "etcdserver: permission denied"), "%s", o);
    cr_assert_neq(ctl(o, sizeof o, "compaction 2"), 0, "%s", o);
    cr_assert(strstr(o, "etcdserver: user name is empty"), "%s", o);
    /* raw: u cannot raise an alarm; root can, and can clear it */
    kv_it_grpc *c;
    cr_assert_eq(kv_it_grpc_open(&c, "127.0.0.1", g_kvd.client_port, 5000), 0);
    char ut[128], rt[128], msg[512];
    token_of(c, "u", "pw", ut, sizeof ut);
    token_of(c, "root", "rootpw", rt, sizeof rt);
    cr_assert_eq(
        alarm_as(c, ut, ETCDSERVERPB__ALARM_REQUEST__ALARM_ACTION__ACTIVATE, msg, sizeof msg), 7,
        "u raised an alarm: %s", msg);
    cr_assert_str_eq(msg, "etcdserver: permission denied");
    ctl_ok(o, sizeof o, "--user root:rootpw alarm list");
    cr_assert_str_eq(o, "", "no alarm was raised: %s", o);
    cr_assert_eq(
        alarm_as(c, rt, ETCDSERVERPB__ALARM_REQUEST__ALARM_ACTION__ACTIVATE, msg, sizeof msg), 0,
        "%s", msg);
    ctl_ok(o, sizeof o, "--user u:pw alarm list");
    cr_assert(strstr(o, "NOSPACE"), "u may list alarms: %s", o);
    cr_assert_eq(
        alarm_as(c, ut, ETCDSERVERPB__ALARM_REQUEST__ALARM_ACTION__DEACTIVATE, msg, sizeof msg), 7,
        "u cleared an alarm: %s", msg);
    cr_assert_eq(alarm_as(c, ut, ETCDSERVERPB__ALARM_REQUEST__ALARM_ACTION__GET, msg, sizeof msg),
                 0, "%s", msg);
    /* etcdctl alarm disarm (GET, then DEACTIVATE of each alarm listed) */
    cr_assert_neq(ctl(o, sizeof o, "--user u:pw alarm disarm"), 0, "%s", o);
    cr_assert(strstr(o, "etcdserver: permission denied"), "%s", o);
    ctl_ok(o, sizeof o, "--user root:rootpw alarm disarm");
    ctl_ok(o, sizeof o, "--user root:rootpw alarm list");
    cr_assert_str_eq(o, "", "%s", o);
    ctl_ok(o, sizeof o, "--user root:rootpw compaction 2");
    kv_it_grpc_close(c);
}
