/*
 * cluster_discovery_srv: members bootstrap from DNS SRV records (etcd's --discovery-srv;
 * daemon/srv_boot.h, common/dns_srv.h). A DNS responder (tests/lib/kvt_dns) serves
 * _etcd-server._tcp.kvt.test -> m1..m3.kvt.test:<peer port> and their A records; each member
 * runs in a private mount namespace whose /etc/resolv.conf names it (`unshare --mount`: root
 * only), with no --initial-cluster, advertising http://mN.kvt.test:<peer port>.
 *   - the three form one cluster: etcdctl member list through any member lists n1..n3 with
 *     the SRV peer URLs, and a put through one member is read through another;
 *   - a member whose advertised URL is in no record exits 1: "cannot find local etcd member";
 *   - a domain without records exits 1 with etcd's "error querying DNS SRV records" text;
 *   - --discovery-srv with --initial-cluster is etcd's flag conflict (exit 2);
 *   - `kvd gateway start --discovery-srv` (its _etcd-client._tcp record names m2.kvt.test and
 *     n2's client port) carries etcdctl's put to the cluster; without --insecure-discovery
 *     the http:// record is dropped and it exits with etcd's "no endpoints found";
 *   - with _etcd-server-ssl._tcp records (https peers) and no --peer-trusted-ca-file, every
 *     member verifies the others' peer certificates against the domain's name, as etcd does
 *     (PeerTLSInfo.ServerName = the domain): certificates valid for kvt.test only, never for
 *     mN.kvt.test, signed by a CA the members trust as a system CA (SSL_CERT_FILE), form one
 *     cluster.
 */
#include "../tls/tls_fixture.h"
#include "kvt_dnsns.h"
#include "kvt_proc.h"
#include "kvt_skip.h"
#include "kvt_util.h"

#include <criterion/criterion.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ETCDCTL "/usr/bin/etcdctl"

static kvt_tmpdir g_dir;
static kvt_dnsns g_dns;
static kvt_proc g_m[4], g_gw;
static uint16_t g_peer[4], g_client[4];
static char g_kvd[PATH_MAX];
static tls_fx g_tls;     /* certificates (setup_ssl) */
static const char *g_ca; /* setup_ssl: SSL_CERT_FILE of every member; NULL: none */

static void fini(void)
{
    for (int i = 0; i < 4; i++)
        kvt_proc_kill9(&g_m[i]);
    kvt_proc_kill9(&g_gw);
    kvt_dnsns_stop(&g_dns);
    if (!getenv("KV_TEST_KEEP_DIRS")) {
        kvt_tmpdir_destroy(&g_dir);
        if (g_ca)
            tls_fx_destroy(&g_tls);
    }
    g_ca = NULL;
}

/* Ports for 4 members; the records: _etcd-server<svc>._tcp.kvt.test for m1..m3 only,
 * _etcd-client._tcp.kvt.test -> n2's client port, mN.kvt.test -> 127.0.0.1. */
static void start_dns(const char *svc)
{
    const char *why = kvt_dnsns_missing();
    if (why)
        KVT_SKIP_MISSING("%s", why);
    if (access(ETCDCTL, X_OK) != 0)
        KVT_SKIP_MISSING("etcdctl not installed (apt-get install etcd-client)");
    const char *bd = getenv("KV_BUILD_DIR");
    cr_assert_not_null(bd, "KV_BUILD_DIR");
    snprintf(g_kvd, sizeof g_kvd, "%.4000s/server/kvd", bd);
    cr_assert_eq(kvt_tmpdir_create(&g_dir, "kvsrv"), 0);
    for (int i = 0; i < 4; i++)
        cr_assert(kvt_port_free(&g_peer[i]) == 0 && kvt_port_free(&g_client[i]) == 0);
    char srv[3][96], a[4][64], cl[96];
    const char *records[20];
    int r = 0;
    for (int i = 0; i < 4; i++) {
        if (i < 3) {
            snprintf(srv[i], sizeof srv[i], "_etcd-server%s._tcp.kvt.test=m%d.kvt.test:%u", svc,
                     i + 1, g_peer[i]);
            records[r++] = "--srv";
            records[r++] = srv[i];
        }
        snprintf(a[i], sizeof a[i], "m%d.kvt.test=127.0.0.1", i + 1);
        records[r++] = "--a";
        records[r++] = a[i];
    }
    snprintf(cl, sizeof cl, "_etcd-client._tcp.kvt.test=m2.kvt.test:%u", g_client[1]);
    records[r++] = "--srv";
    records[r++] = cl;
    records[r] = NULL;
    cr_assert_eq(kvt_dnsns_start(&g_dns, g_dir.path, g_client[0], records), 0, "kvt_dns");
}

static void setup(void)
{
    start_dns("");
}

/* https peers: -ssl records, and gen_certs.sh's certificates (domain.pem: kvt.test only). */
static void setup_ssl(void)
{
    start_dns("-ssl");
    cr_assert_eq(tls_fx_certs(&g_tls, "kvsrvtls"), 0, "gen_certs.sh");
    g_ca = tls_fx_path(&g_tls, "ca.pem");
}

/* Runs argv (kvd's words) in the namespace as p, logging to <dir>/<log>. */
static void spawn_in_ns(kvt_proc *p, const char *log, const char *const *words)
{
    char lg[PATH_MAX + 64];
    snprintf(lg, sizeof lg, "%s/%s", g_dir.path, log);
    const char *argv[40];
    int a = 0;
    for (int k = 0; g_dns.wrap[k]; k++)
        argv[a++] = g_dns.wrap[k];
    argv[a++] = g_kvd;
    for (int k = 0; words[k] && a < 39; k++)
        argv[a++] = words[k];
    argv[a] = NULL;
    kvt_proc_init(p, lg);
    char ca[PATH_MAX + 32];
    snprintf(ca, sizeof ca, "SSL_CERT_FILE=%.4000s", g_ca ? g_ca : "");
    const char *env[] = {ca, NULL}; /* OpenSSL's system CA file, when the test made one */
    cr_assert_eq(kvt_proc_spawn_env(p, argv, g_ca ? env : NULL), 0, "%s", log);
}

/* Starts member i (0-based) as n<i+1> in the namespace, with extra flags (NULL-terminated,
 * may be NULL); its peer URLs are https:// once setup_ssl ran. */
static void start_member_with(int i, const char *domain, const char *const *extra)
{
    static char name[4][32], dir[4][PATH_MAX + 48], lc[4][80], ac[4][80], lp[4][80], ap[4][96],
        ds[4][300], lg[4][32];
    const char *scheme = g_ca ? "https" : "http";
    snprintf(name[i], sizeof name[i], "--name=n%d", i + 1);
    snprintf(dir[i], sizeof dir[i], "--data-dir=%.4000s/n%d", g_dir.path, i + 1);
    snprintf(lc[i], sizeof lc[i], "--listen-client-urls=http://127.0.0.1:%u", g_client[i]);
    snprintf(ac[i], sizeof ac[i], "--advertise-client-urls=http://127.0.0.1:%u", g_client[i]);
    snprintf(lp[i], sizeof lp[i], "--listen-peer-urls=%s://127.0.0.1:%u", scheme, g_peer[i]);
    snprintf(ap[i], sizeof ap[i], "--initial-advertise-peer-urls=%s://m%d.kvt.test:%u", scheme,
             i + 1, g_peer[i]);
    snprintf(ds[i], sizeof ds[i], "--discovery-srv=%.200s", domain);
    snprintf(lg[i], sizeof lg[i], "n%d.log", i + 1);
    const char *words[16] = {name[i], dir[i], lc[i], ac[i],
                             lp[i],   ap[i],  ds[i], "--initial-cluster-token=srv-test"};
    int w = 8;
    for (int k = 0; extra && extra[k] && w < 15; k++)
        words[w++] = extra[k];
    words[w] = NULL;
    spawn_in_ns(&g_m[i], lg[i], words);
}

static void start_member(int i, const char *domain, const char *extra)
{
    const char *const words[] = {extra, NULL};
    start_member_with(i, domain, words);
}

/* etcdctl through 127.0.0.1:port with up to 3 words (NULL ends them). */
static int ctl(uint16_t port, kvt_cmd_result *r, const char *a1, const char *a2, const char *a3)
{
    char ep[64];
    snprintf(ep, sizeof ep, "--endpoints=127.0.0.1:%u", port);
    const char *argv[] = {ETCDCTL, ep, a1, a2, a3, NULL};
    const char *env[] = {"ETCDCTL_API=3", NULL};
    return kvt_run(argv, env, NULL, 0, 15000, r);
}

/* Puts key=v through port until it succeeds, for up to 40 s (the cluster elects a leader
 * first; each etcdctl try gives up after its own 5 s). */
static void put_until_ok(uint16_t port, const char *key)
{
    kvt_cmd_result r = {0};
    int ok = 0;
    for (uint64_t end = kvt_now_ms() + 40000; !ok && kvt_now_ms() < end;) {
        kvt_cmd_result_free(&r);
        cr_assert_eq(ctl(port, &r, "put", key, "v1"), 0);
        ok = r.exit_code == 0;
        if (!ok)
            kvt_sleep_ms(200);
    }
    cr_assert(ok, "put through 127.0.0.1:%u: %s %s", port, r.out, r.err);
    kvt_cmd_result_free(&r);
}

/* Waits (up to 40 s) until etcdctl member list through n1 shows every member's name; r
 * holds it. Each member publishes its name once it reaches the leader (retried every 1 s).
 * On a timeout the members' logs go to stderr. */
static void member_list_named(kvt_cmd_result *r)
{
    int named = 0;
    for (uint64_t end = kvt_now_ms() + 40000; !named && kvt_now_ms() < end;) {
        kvt_cmd_result_free(r);
        cr_assert_eq(ctl(g_client[0], r, "member", "list", NULL), 0);
        named = strstr(r->out, "n1,") && strstr(r->out, "n2,") && strstr(r->out, "n3,");
        if (!named)
            kvt_sleep_ms(200);
    }
    if (!named)
        for (int i = 0; i < 3; i++) {
            char *log = kvt_file_read(g_m[i].log_path);
            fprintf(stderr, "=== n%d's log:\n%s\n", i + 1, log ? log : "(unreadable)");
            free(log);
        }
    cr_assert(named, "not every member published its name:\n%s", r->out);
}

static char *slurp(const char *path)
{
    char *b = kvt_file_read(path);
    cr_assert_not_null(b, "%s", path);
    return b;
}

/* Member i exits within 10 s with status want and a log line containing text. */
static void expect_exit(int i, int want, const char *text)
{
    cr_assert_eq(kvt_proc_wait(&g_m[i], 10000), 0, "member %d still runs", i + 1);
    char *log = slurp(g_m[i].log_path);
    int st = g_m[i].last_status;
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == want, "exit status %d, want %d:\n%s", st, want,
              log);
    cr_expect(strstr(log, text) != NULL, "no \"%s\" in the log:\n%s", text, log);
    free(log);
}

Test(cluster_discovery_srv, members_bootstrap_from_srv_records, .init = setup, .fini = fini,
     .timeout = 180)
{
    for (int i = 0; i < 3; i++)
        start_member(i, "kvt.test", NULL);
    put_until_ok(g_client[1], "srv/k");
    kvt_cmd_result r = {0};
    cr_assert_eq(ctl(g_client[2], &r, "get", "srv/k", "--print-value-only"), 0);
    cr_assert_str_eq(r.out, "v1\n", "get through n3: %s", r.err);
    kvt_cmd_result_free(&r);
    member_list_named(&r);
    for (int i = 0; i < 3; i++) {
        char want[96];
        snprintf(want, sizeof want, "started, n%d, http://m%d.kvt.test:%u, http://127.0.0.1:%u",
                 i + 1, i + 1, g_peer[i], g_client[i]);
        cr_expect(strstr(r.out, want) != NULL, "no \"%s\" in member list:\n%s", want, r.out);
    }
    kvt_cmd_result_free(&r);
    char *log = slurp(g_m[0].log_path);
    char want[160];
    snprintf(want, sizeof want, "got bootstrap from DNS (kvt.test): n1=http://m1.kvt.test:%u",
             g_peer[0]);
    cr_expect(strstr(log, want) != NULL, "no \"%s\" in n1's log:\n%s", want, log);
    free(log);
}

Test(cluster_discovery_srv, https_peers_are_verified_against_the_domain, .init = setup_ssl,
     .fini = fini, .timeout = 180)
{
    const char *cert = tls_fx_path(&g_tls, "domain.pem");
    const char *key = tls_fx_path(&g_tls, "domain-key.pem");
    char cf[PATH_MAX + 32], kf[PATH_MAX + 32];
    snprintf(cf, sizeof cf, "--peer-cert-file=%.4000s", cert);
    snprintf(kf, sizeof kf, "--peer-key-file=%.4000s", key);
    const char *const tls[] = {cf, kf, NULL};
    for (int i = 0; i < 3; i++)
        start_member_with(i, "kvt.test", tls);
    put_until_ok(g_client[2], "srv/tls"); /* a quorum of members verified each other */
    kvt_cmd_result r = {0};
    member_list_named(&r);
    for (int i = 0; i < 3; i++) {
        char want[96];
        snprintf(want, sizeof want, "started, n%d, https://m%d.kvt.test:%u,", i + 1, i + 1,
                 g_peer[i]);
        cr_expect(strstr(r.out, want) != NULL, "no \"%s\" in member list:\n%s", want, r.out);
    }
    kvt_cmd_result_free(&r);
}

Test(cluster_discovery_srv, a_member_not_in_the_records_is_refused, .init = setup, .fini = fini,
     .timeout = 60)
{
    start_member(3, "kvt.test", NULL);
    expect_exit(3, 1, "cannot find local etcd member \"n4\" in SRV records");
}

Test(cluster_discovery_srv, a_domain_without_records_is_refused, .init = setup, .fini = fini,
     .timeout = 60)
{
    start_member(0, "nope.test", NULL);
    char want[256];
    snprintf(want, sizeof want,
             "error querying DNS SRV records for _etcd-server-ssl lookup "
             "_etcd-server-ssl._tcp.nope.test on %s:53: no such host",
             g_dns.addr);
    expect_exit(0, 1, want);
}

Test(cluster_discovery_srv, discovery_and_initial_cluster_conflict, .init = setup, .fini = fini,
     .timeout = 60)
{
    start_member(0, "kvt.test", "--initial-cluster=n1=http://127.0.0.1:1");
    expect_exit(0, 2,
                "multiple discovery or bootstrap flags are set. Choose one of "
                "\"initial-cluster\", \"discovery\" or \"discovery-srv\"");
}

/* `kvd gateway start` with extra flags (NULL-terminated) in the namespace, on a free port. */
static uint16_t start_gateway(const char *const *extra)
{
    uint16_t port;
    cr_assert_eq(kvt_port_free(&port), 0);
    static char listen[64];
    snprintf(listen, sizeof listen, "--listen-addr=127.0.0.1:%u", port);
    const char *words[12] = {"gateway", listen, "--endpoints=127.0.0.1:1"};
    int a = 3;
    for (int k = 0; extra[k] && a < 10; k++)
        words[a++] = extra[k];
    words[a++] = "start";
    words[a] = NULL;
    spawn_in_ns(&g_gw, "gateway.log", words);
    return port;
}

Test(cluster_discovery_srv, the_gateway_finds_the_members_in_srv_records, .init = setup,
     .fini = fini, .timeout = 180)
{
    for (int i = 0; i < 3; i++)
        start_member(i, "kvt.test", NULL);
    const char *const insecure[] = {"--discovery-srv=kvt.test", "--insecure-discovery", NULL};
    uint16_t gp = start_gateway(insecure);
    put_until_ok(gp, "gw/k");
    char *log = slurp(g_gw.log_path);
    char want[128];
    snprintf(want, sizeof want, "using discovered endpoints [http://m2.kvt.test.:%u]", g_client[1]);
    cr_expect(strstr(log, want) != NULL, "no \"%s\" in the gateway's log:\n%s", want, log);
    free(log);
    kvt_proc_kill9(&g_gw);
    const char *const secure[] = {"--discovery-srv=kvt.test", NULL};
    start_gateway(secure);
    cr_assert_eq(kvt_proc_wait(&g_gw, 10000), 0, "the gateway still runs");
    log = slurp(g_gw.log_path);
    cr_expect(strstr(log, "is insecure") && strstr(log, "no endpoints found"), "%s", log);
    cr_expect(WIFEXITED(g_gw.last_status) && WEXITSTATUS(g_gw.last_status) != 0, "status %d",
              g_gw.last_status);
    free(log);
}
