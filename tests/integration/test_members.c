/*
 * it_members: the Cluster service (MemberList/Add/Remove/Update/Promote), Maintenance.Status and
 * MoveLeader on a single kvd member, through real etcdctl 3.4 and kvctl (whose output must be
 * byte-identical to etcdctl's for the same server). See docs/ARCHITECTURE.md, "Membership (Cluster
 * service, Status, MoveLeader)".
 *
 * Membership changes other than MemberUpdate go through raft configuration changes
 * (kv_node_change_member). The asserts that need the raft node are gated on KVT_CLUSTER=1 (the
 * lead sets it once node.c drives raft); without it the test checks that the placeholder node
 * refuses the change and that nothing of it was applied.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grpc_raw.h"
#include "harness.h"
#include "rpc.pb-c.h"

#define CMD_TIMEOUT_MS 20000
#define READY_TIMEOUT_MS 20000

static kv_it_server srv;
static char etcdctl[4096], kvctl[4096];

static void setup(void)
{
    cr_assert_eq(kv_it_etcdctl_bin(etcdctl, sizeof(etcdctl)), 0, "etcdctl not found");
    cr_assert_eq(kv_it_kvctl_bin(kvctl, sizeof(kvctl)), 0, "kvctl not found");
    cr_assert_eq(kv_it_server_init(&srv, kv_it_kind_from_env(), NULL), 0);
    cr_assert_eq(kv_it_server_start(&srv, READY_TIMEOUT_MS), 0, "server did not start");
}

static void teardown(void)
{
    kv_it_server_destroy(&srv);
}

TestSuite(it_members, .init = setup, .fini = teardown, .timeout = 300);

static int cluster_mode(void)
{
    const char *e = getenv("KVT_CLUSTER"); /* the raft node applies changes: default on */
    return !(e && strcmp(e, "0") == 0);
}

/* Runs bin against srv with the NULL-terminated arguments; "exit=N\n<stdout>--\n<stderr>"
 * (malloc'd). */
static char *run(const char *bin, ...)
{
    const char *argv[24];
    char ep[96];
    int n = 0;
    snprintf(ep, sizeof(ep), "--endpoints=%s", srv.endpoint);
    argv[n++] = bin;
    argv[n++] = ep;
    va_list ap;
    va_start(ap, bin);
    const char *a;
    while ((a = va_arg(ap, const char *)) != NULL && n < 23)
        argv[n++] = a;
    va_end(ap);
    argv[n] = NULL;
    static const char *const env[] = {"ETCDCTL_API=3", NULL};
    kv_it_cmd_result r;
    cr_assert_eq(kv_it_run(argv, env, NULL, 0, CMD_TIMEOUT_MS, &r), 0, "cannot run %s", bin);
    /* etcdctl logs retries of failed RPCs as JSON lines on stderr: keep the Error lines. */
    size_t cap = r.out_len + r.err_len + 64;
    char *res = malloc(cap);
    cr_assert(res);
    int o = snprintf(res, cap, "exit=%d\n%s--\n", r.exit_code, r.out);
    for (char *line = strtok(r.err, "\n"); line; line = strtok(NULL, "\n"))
        if (strncmp(line, "{\"level\"", 8) != 0)
            o += snprintf(res + o, cap - (size_t)o, "%s\n", line);
    kv_it_cmd_result_free(&r);
    return res;
}

/* Runs the same command with etcdctl and kvctl; asserts equal output; returns etcdctl's. */
#define BOTH(...)                                                                                  \
    ({                                                                                             \
        char *e_ = run(etcdctl, __VA_ARGS__, NULL);                                                \
        char *k_ = run(kvctl, __VA_ARGS__, NULL);                                                  \
        cr_expect_str_eq(k_, e_, "kvctl and etcdctl differ:\n--- kvctl:\n%s\n--- etcdctl:\n%s",    \
                         k_, e_);                                                                  \
        free(k_);                                                                                  \
        e_;                                                                                        \
    })

static uint64_t json_u64(const char *s, const char *key)
{
    char k[64];
    snprintf(k, sizeof(k), "\"%s\":", key);
    const char *p = strstr(s, k);
    cr_assert_not_null(p, "no %s in %s", key, s);
    return strtoull(p + strlen(k), NULL, 10);
}

typedef struct ids {
    uint64_t member, cluster;
} ids;

static ids my_ids(void)
{
    char *out = BOTH("member", "list", "-w", "json");
    ids r = {json_u64(out, "member_id"), json_u64(out, "cluster_id")};
    free(out);
    return r;
}

static size_t count(const char *s, const char *what)
{
    size_t n = 0;
    for (const char *p = strstr(s, what); p; p = strstr(p + 1, what))
        n++;
    return n;
}

Test(it_members, member_list_shows_this_member_in_every_format)
{
    char *out = BOTH("member", "list", "-w", "json");
    char want[512];
    snprintf(want, sizeof(want),
             "\"name\":\"kvit\",\"peerURLs\":[\"http://127.0.0.1:%u\"],\"clientURLs\":[\"http://"
             "127.0.0.1:%u\"]}]}",
             srv.peer_port, srv.client_port);
    cr_expect(strstr(out, want), "%s\nwants %s", out, want);
    cr_expect(strstr(out, "\"raft_term\":"), "%s", out);
    cr_expect(!strstr(out, "\"revision\""), "etcd's MemberList header has no revision: %s", out);
    cr_expect_eq(count(out, "\"ID\":"), 1);
    free(out);
    ids id = my_ids();
    out = BOTH("member", "list");
    snprintf(want, sizeof(want),
             "exit=0\n%" PRIx64 ", started, kvit, http://127.0.0.1:%u, http://127.0.0.1:%u, "
             "false\n--\n",
             id.member, srv.peer_port, srv.client_port);
    cr_expect_str_eq(out, want);
    free(out);
    free(BOTH("member", "list", "-w", "table"));
}

Test(it_members, member_update_changes_peer_urls_durably)
{
    ids id = my_ids();
    char hex[32], urls[128], want[256];
    snprintf(hex, sizeof(hex), "%" PRIx64, id.member);
    snprintf(urls, sizeof(urls), "--peer-urls=http://127.0.0.1:%u,http://127.0.0.2:%u",
             srv.peer_port, srv.peer_port);
    char *out = run(etcdctl, "member", "update", hex, urls, NULL);
    snprintf(want, sizeof(want),
             "exit=0\nMember %16" PRIx64 " updated in cluster %16" PRIx64 "\n--\n", id.member,
             id.cluster);
    cr_expect_str_eq(out, want);
    free(out);
    out = run(kvctl, "member", "update", hex, urls, NULL);
    cr_expect_str_eq(out, want);
    free(out);
    out = BOTH("member", "update", hex, urls, "-w", "json");
    cr_expect(strstr(out, "\"peerURLs\":[\"http://127.0.0.1:"), "%s", out);
    cr_expect(strstr(out, ",\"http://127.0.0.2:"), "%s", out);
    free(out);

    cr_assert_eq(kv_it_server_restart(&srv, 5000, READY_TIMEOUT_MS), 0);
    out = BOTH("member", "list", "-w", "json");
    cr_expect(strstr(out, ",\"http://127.0.0.2:"), "update lost on restart: %s", out);
    free(out);

    /* Unknown member; invalid URLs are refused by the client (clientv3's types.NewURLs). */
    out = BOTH("member", "update", "1234", urls);
    cr_expect_str_eq(out, "exit=1\n--\nError: etcdserver: member not found\n");
    free(out);
    out = BOTH("member", "update", hex, "--peer-urls=http://a:1/path");
    cr_expect_str_eq(out, "exit=1\n--\nError: URL must not contain a path: http://a:1/path\n");
    free(out);
}

Test(it_members, member_add_of_a_member_that_never_starts)
{
    ids id = my_ids();
    char urls[128], own[128];
    snprintf(urls, sizeof(urls), "--peer-urls=http://127.0.0.1:%u", srv.peer_port + 1000);
    snprintf(own, sizeof(own), "--peer-urls=http://127.0.0.1:%u", srv.peer_port);
    /* Checked before anything is proposed: a peer URL in use, a bad URL. */
    char *out = BOTH("member", "add", "dup", own);
    cr_expect_str_eq(out, "exit=1\n--\nError: etcdserver: Peer URLs already exists\n");
    free(out);
    out = BOTH("member", "add", "bad", "--peer-urls=ftp://x:1");
    cr_expect_str_eq(
        out, "exit=1\n--\nError: URL scheme must be http, https, unix, or unixs: ftp://x:1\n");
    free(out);

    out = run(etcdctl, "member", "add", "newbie", "--learner", urls, NULL);
    if (!cluster_mode()) {
        /* Placeholder node: the change is refused and nothing of it is applied. */
        cr_expect(strncmp(out, "exit=1\n", 7) == 0, "%s", out);
        free(out);
        out = BOTH("member", "list");
        cr_expect_eq(count(out, "\n") - 2, 1, "%s", out);
        free(out);
        return;
    }
    /* ---- KVT_CLUSTER=1: the raft node applies configuration changes ---- */
    cr_expect(strncmp(out, "exit=0\nMember ", 14) == 0, "%s", out);
    char want[512];
    snprintf(want, sizeof(want), " added to cluster %16" PRIx64 "\n\nETCD_NAME=\"newbie\"\n",
             id.cluster);
    cr_expect(strstr(out, want), "%s", out);
    snprintf(want, sizeof(want), "ETCD_INITIAL_ADVERTISE_PEER_URLS=\"http://127.0.0.1:%u\"\n",
             srv.peer_port + 1000);
    cr_expect(strstr(out, want), "%s", out);
    cr_expect(strstr(out, "ETCD_INITIAL_CLUSTER_STATE=\"existing\"\n"), "%s", out);
    free(out);
    out = BOTH("member", "list");
    snprintf(want, sizeof(want), ", unstarted, , http://127.0.0.1:%u, , true\n",
             srv.peer_port + 1000);
    cr_expect(strstr(out, want), "%s", out);
    cr_expect_eq(count(out, "\n") - 2, 2, "%s", out);
    free(out);
    /* At most one learner (etcd 3.4); a learner that never started cannot be promoted. */
    char urls2[128];
    snprintf(urls2, sizeof(urls2), "--peer-urls=http://127.0.0.1:%u", srv.peer_port + 1001);
    out = BOTH("member", "add", "second", "--learner", urls2);
    cr_expect_str_eq(out, "exit=1\n--\nError: etcdserver: too many learner members in cluster\n");
    free(out);
    out = BOTH("member", "list", "-w", "json");
    const char *p = strstr(out, "\"isLearner\":true");
    cr_assert_not_null(p, "%s", out);
    const char *q = p;
    while (q > out && strncmp(q, "{\"ID\":", 6) != 0)
        q--;
    char learner[32];
    snprintf(learner, sizeof(learner), "%" PRIx64, (uint64_t)strtoull(q + 6, NULL, 10));
    free(out);
    out = run(etcdctl, "member", "promote", learner, NULL);
    cr_expect(strstr(out, "Error: etcdserver: can only promote a learner member which is in sync "
                          "with leader"),
              "%s", out);
    free(out);
    /* Remove it: the list is back to this member; the id is never reused. */
    out = run(kvctl, "member", "remove", learner, NULL);
    snprintf(want, sizeof(want), "exit=0\nMember %16s removed from cluster %16" PRIx64 "\n--\n",
             learner, id.cluster);
    cr_expect_str_eq(out, want);
    free(out);
    out = BOTH("member", "remove", learner);
    cr_expect_str_eq(out, "exit=1\n--\nError: etcdserver: member not found\n");
    free(out);
    /* A voter that never starts: added (the cluster then has no quorum, as etcd's would), and
     * still listed by MemberList, which needs no quorum. */
    out = run(etcdctl, "member", "add", "voter", urls2, NULL);
    cr_expect(strncmp(out, "exit=0\nMember ", 14) == 0, "%s", out);
    free(out);
    out = BOTH("member", "list");
    snprintf(want, sizeof(want), ", unstarted, , http://127.0.0.1:%u, , false\n",
             srv.peer_port + 1001);
    cr_expect(strstr(out, want), "%s", out);
    free(out);
}

Test(it_members, remove_and_promote_errors)
{
    ids id = my_ids();
    char hex[32];
    snprintf(hex, sizeof(hex), "%" PRIx64, id.member);
    char *out = BOTH("member", "promote", hex);
    cr_expect_str_eq(out, "exit=1\n--\nError: etcdserver: can only promote a learner member\n");
    free(out);
    out = BOTH("member", "promote", "1234");
    cr_expect_str_eq(out, "exit=1\n--\nError: etcdserver: member not found\n");
    free(out);
    out = BOTH("member", "remove", "1234");
    cr_expect_str_eq(out, "exit=1\n--\nError: etcdserver: member not found\n");
    free(out);
    /* Removing the only voter would leave no started quorum (--strict-reconfig-check). */
    out = BOTH("member", "remove", hex);
    cr_expect_str_eq(out, "exit=1\n--\nError: etcdserver: re-configuration failed due to not "
                          "enough started members\n");
    free(out);
    out = BOTH("member", "remove", "zz");
    cr_expect_str_eq(out, "exit=128\n--\nError: bad member ID arg (strconv.ParseUint: parsing "
                          "\"zz\": invalid syntax), expecting ID in Hex\n");
    free(out);
}

Test(it_members, status_reports_raft_state_and_move_leader_to_self)
{
    free(BOTH("put", "k", "v"));
    ids id = my_ids();
    char *out = BOTH("endpoint", "status", "-w", "json");
    cr_expect_eq(json_u64(out, "leader"), id.member, "%s", out);
    uint64_t idx = json_u64(out, "raftIndex"), applied = json_u64(out, "raftAppliedIndex");
    cr_expect_geq(idx, 1, "%s", out);
    cr_expect_eq(idx, applied, "%s", out);
    cr_expect_geq(json_u64(out, "raftTerm"), 1, "%s", out);
    cr_expect(!strstr(out, "\"errors\""), "%s", out);
    free(out);

    char hex[32], want[256];
    snprintf(hex, sizeof(hex), "%" PRIx64, id.member);
    out = BOTH("move-leader", hex);
    snprintf(want, sizeof(want), "exit=0\nLeadership transferred from %s to %s\n--\n", hex, hex);
    cr_expect_str_eq(out, want);
    free(out);
    out = BOTH("move-leader", hex, "-w", "json");
    cr_expect_str_eq(out, "exit=0\n{}\n--\n");
    free(out);
    out = BOTH("move-leader", "1234");
    cr_expect_str_eq(out, "exit=1\n--\nError: etcdserver: bad leader transferee\n");
    free(out);
    out = BOTH("move-leader", "zz");
    cr_expect_str_eq(out,
                     "exit=128\n--\nError: strconv.ParseUint: parsing \"zz\": invalid syntax\n");
    free(out);
}

/* Raw gRPC (etcdctl checks URLs before sending): the server refuses bad peer URLs itself. */
static void raw_call(const char *method, const ProtobufCMessage *req, int *status, char *msg,
                     size_t cap)
{
    kv_it_grpc *g;
    cr_assert_eq(kv_it_grpc_open(&g, "127.0.0.1", srv.client_port, 5000), 0);
    uint8_t buf[1024];
    size_t len = protobuf_c_message_pack(req, buf);
    uint8_t *resp = NULL;
    size_t rlen = 0;
    int rc = kv_it_grpc_call(g, method, buf, len, &resp, &rlen, 5000, status, msg, cap);
    cr_assert(rc == 0 || rc == KV_IT_GRPC_STATUS, "transport error %d", rc);
    free(resp);
    kv_it_grpc_close(g);
}

Test(it_members, server_refuses_bad_peer_urls)
{
    ids id = my_ids();
    char *bad[] = {"foo"}, *path[] = {"http://127.0.0.1:1/x"};
    char msg[256];
    int status;
    Etcdserverpb__MemberAddRequest add = ETCDSERVERPB__MEMBER_ADD_REQUEST__INIT;
    add.peerurls = bad;
    add.n_peerurls = 1;
    raw_call("/etcdserverpb.Cluster/MemberAdd", &add.base, &status, msg, sizeof(msg));
    cr_expect_eq(status, 3);
    cr_expect_str_eq(msg, "etcdserver: given member URLs are invalid");
    add.n_peerurls = 0; /* "no valid URLs given" */
    raw_call("/etcdserverpb.Cluster/MemberAdd", &add.base, &status, msg, sizeof(msg));
    cr_expect_eq(status, 3);
    cr_expect_str_eq(msg, "etcdserver: given member URLs are invalid");
    if (kv_it_kind_from_env() == KV_IT_ETCD)
        return; /* etcd 3.4 stores whatever MemberUpdate sends (clientv3 checks) */
    Etcdserverpb__MemberUpdateRequest up = ETCDSERVERPB__MEMBER_UPDATE_REQUEST__INIT;
    up.id = id.member;
    up.peerurls = path;
    up.n_peerurls = 1;
    raw_call("/etcdserverpb.Cluster/MemberUpdate", &up.base, &status, msg, sizeof(msg));
    cr_expect_eq(status, 3);
    cr_expect_str_eq(msg, "etcdserver: given member URLs are invalid");
    char *out = BOTH("member", "list", "-w", "json");
    cr_expect(!strstr(out, "/x\""), "%s", out);
    free(out);
}
