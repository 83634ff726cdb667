/*
 * test_tls_etcdflags.c - etcd 3.4's remaining TLS flags on kvd (server/net/tls.h):
 *   --client-crl-file: a client certificate the CRL lists is refused, another is served;
 *   --cipher-suites: TLS 1.2 negotiates only the suites named (Go names), an unknown name is
 *     refused at start with etcd's message;
 *   --peer-cert-allowed-cn / --peer-cert-allowed-hostname: a member whose rule the others'
 *     certificates do not meet cannot join; a rule they meet forms the cluster; both at once
 *     are refused with etcd's message.
 * Certificates come from gen_certs.sh at test time (revoked.pem and crl.pem included).
 */
#include <criterion/criterion.h>

#include <sys/wait.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvt_cluster.h"
#include "tls_fixture.h"

static tls_fx g_f;

static void fini(void)
{
    tls_fx_destroy(&g_f);
}

/* etcdctl get over mutual TLS with the client certificate name.pem; its exit code. */
static int ctl_with_cert(const char *name)
{
    char cert[4300], key[4300], ca[4300], k[64];
    snprintf(cert, sizeof(cert), "--cert=%s", tls_fx_path(&g_f, name));
    snprintf(k, sizeof(k), "%s", name);
    char *dot = strrchr(k, '.');
    if (dot)
        *dot = '\0';
    char keyname[80];
    snprintf(keyname, sizeof(keyname), "%s-key.pem", k);
    snprintf(key, sizeof(key), "--key=%s", tls_fx_path(&g_f, keyname));
    snprintf(ca, sizeof(ca), "--cacert=%s", tls_fx_path(&g_f, "ca.pem"));
    const char *args[] = {ca, cert, key, "put", "crl-k", "v", NULL};
    kvt_cmd_result r;
    if (tls_fx_ctl(&g_f, &r, args) != 0)
        return -1;
    int code = r.exit_code;
    kvt_cmd_result_free(&r);
    return code;
}

Test(tls_etcdflags, client_crl_file_refuses_revoked_certificate, .fini = fini, .timeout = 120)
{
    cr_assert_eq(tls_fx_certs(&g_f, "kvd-tlsflags"), 0);
    const char *extra[] = {"--trusted-ca-file", "@ca.pem",  "--client-cert-auth",
                           "--client-crl-file", "@crl.pem", NULL};
    cr_assert_eq(tls_fx_start(&g_f, extra), 0, "kvd with --client-crl-file did not start");
    cr_assert_eq(ctl_with_cert("client.pem"), 0, "a certificate the CRL does not list failed");
    cr_assert_neq(ctl_with_cert("revoked.pem"), 0, "a revoked client certificate was served");
    cr_assert(tls_fx_log_has(&g_f, "certificate revoked"), "the refusal was not logged");
}

Test(tls_etcdflags, cipher_suites_limit_tls12, .fini = fini, .timeout = 120)
{
    cr_assert_eq(tls_fx_certs(&g_f, "kvd-tlsflags"), 0);
    const char *extra[] = {"--cipher-suites=TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", NULL};
    cr_assert_eq(tls_fx_start(&g_f, extra), 0, "kvd with --cipher-suites did not start");
    cr_assert(tls_fx_handshake_with(g_f.client_port, "ECDHE-ECDSA-AES128-GCM-SHA256"),
              "the listed suite failed");
    cr_assert(!tls_fx_handshake_with(g_f.client_port, "ECDHE-ECDSA-AES256-GCM-SHA384"),
              "a suite --cipher-suites does not list was negotiated");
    /* Control: without the flag the same suite is accepted. */
    tls_fx_destroy(&g_f);
    memset(&g_f, 0, sizeof(g_f));
    cr_assert_eq(tls_fx_certs(&g_f, "kvd-tlsflags"), 0);
    cr_assert_eq(tls_fx_start(&g_f, NULL), 0);
    cr_assert(tls_fx_handshake_with(g_f.client_port, "ECDHE-ECDSA-AES256-GCM-SHA384"),
              "control: the default policy");
}

Test(tls_etcdflags, unknown_cipher_suite_refused_at_start, .fini = fini, .timeout = 60)
{
    cr_assert_eq(tls_fx_certs(&g_f, "kvd-tlsflags"), 0);
    const char *extra[] = {"--cipher-suites=TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_BOGUS", NULL};
    cr_assert_neq(tls_fx_start(&g_f, extra), 0, "kvd started with an unknown cipher suite");
    cr_assert(tls_fx_log_has(&g_f, "unexpected TLS cipher suite \"TLS_BOGUS\""),
              "etcd's message is missing");
}

/* A certificate that cannot be loaded stops kvd with a message, not with a crash: the TLS
 * context's failure path freed its caller's state, and the caller freed it again. */
Test(tls_etcdflags, an_unreadable_certificate_is_refused_without_a_crash, .fini = fini,
     .timeout = 60)
{
    cr_assert_eq(tls_fx_certs(&g_f, "kvd-tlsflags"), 0);
    g_f.no_cert = 1;
    const char *extra[] = {"--cert-file=/nonexistent/server.pem",
                           "--key-file=/nonexistent/server-key.pem", NULL};
    cr_assert_neq(tls_fx_start(&g_f, extra), 0, "kvd started without its certificate");
    kvt_proc_wait(&g_f.kvd, 5000);
    int st = g_f.kvd.last_status;
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) != 0, "kvd did not exit with an error (status %#x)",
              st);
    cr_assert(tls_fx_log_has(&g_f, "/nonexistent/server.pem"), "no message names the file");
}

/* A 3-member cluster with peer mutual TLS plus extra flags for every member (all) and for
 * member 2 only (m2). Returns kvt_cluster_start's result; c stays initialised. */
static int start_cluster(kvt_cluster *c, const char *all, const char *m2)
{
    static char a[5][4400];
    static const char *argv[6], *argv2[7];
    snprintf(a[0], sizeof(a[0]), "--peer-cert-file=%s", tls_fx_path(&g_f, "server.pem"));
    snprintf(a[1], sizeof(a[1]), "--peer-key-file=%s", tls_fx_path(&g_f, "server-key.pem"));
    snprintf(a[2], sizeof(a[2]), "--peer-trusted-ca-file=%s", tls_fx_path(&g_f, "ca.pem"));
    snprintf(a[3], sizeof(a[3]), "--peer-client-cert-auth");
    int n = 0;
    for (int i = 0; i < 4; i++)
        argv[n++] = a[i];
    if (all)
        argv[n++] = all;
    argv[n] = NULL;
    for (int i = 0; i <= n; i++)
        argv2[i] = argv[i];
    if (m2) {
        argv2[n] = m2;
        argv2[n + 1] = NULL;
    }
    kvt_cluster_opts o;
    kvt_cluster_opts_default(&o, 3);
    o.kvd_args = argv;
    o.peer_https = 1;
    cr_assert_eq(kvt_cluster_init(c, &o), 0);
    c->m[2].args = m2 ? argv2 : NULL;
    return kvt_cluster_start(c, 60000);
}

static int has_value(kvt_cluster *c, int i, const char *key, uint32_t ms)
{
    uint64_t deadline = kvt_now_ms() + ms;
    do {
        char val[32];
        int found = 0;
        if (kvt_get(c, i, key, 1, 2000, val, sizeof(val), &found, NULL, NULL, 0) == 0 && found)
            return 1;
        kvt_sleep_ms(100);
    } while (kvt_now_ms() < deadline);
    return 0;
}

Test(tls_etcdflags, peer_cert_allowed_cn_and_hostname, .fini = fini, .timeout = 300)
{
    cr_assert_eq(tls_fx_certs(&g_f, "kvd-tlsflags"), 0);
    kvt_cluster c;
    char err[256] = "";
    /* Rules every member's certificate meets (CN "kvd member", SAN 127.0.0.1). */
    int rc = start_cluster(&c, "--peer-cert-allowed-hostname=127.0.0.1", NULL);
    if (rc != 0)
        kvt_cluster_dump(&c);
    cr_assert_eq(rc, 0, "cluster with a hostname rule its certificates meet: %d", rc);
    cr_assert_eq(kvt_put(&c, 0, "cn-k", "v", 10000, NULL, err, sizeof(err)), 0, "%s", err);
    int all = has_value(&c, 1, "cn-k", 10000) && has_value(&c, 2, "cn-k", 10000);
    kvt_cluster_destroy(&c);
    cr_assert(all, "a member with a met hostname rule did not replicate");

    /* Member 2 wants a CN nobody has: it refuses the others, they form a quorum without it. */
    rc = start_cluster(&c, "--peer-cert-allowed-cn=kvd member", "--peer-cert-allowed-cn=nobody");
    (void)rc; /* member 2 never becomes healthy: the start may report it */
    int ok = kvt_put(&c, 0, "cn-k2", "v", 15000, NULL, err, sizeof(err)) == 0 &&
             has_value(&c, 1, "cn-k2", 10000);
    int leaked = has_value(&c, 2, "cn-k2", 4000);
    /* Member 2 refuses the others' certificates with a bad_certificate alert, which they log
     * in Go's words, as etcd does (etcd's TestEtcdPeerCNAuth waits for this line). */
    int go_words = 0;
    for (int i = 0; i < 2 && !go_words; i++) {
        char *l = NULL;
        go_words = kvt_member_log(&c, i, 1 << 20, &l) == 0 && l &&
                   strstr(l, "remote error: tls: bad certificate") != NULL;
        free(l);
    }
    char *log = NULL;
    /* etcd's words (its TestEtcdPeerNameAuth waits for them) */
    int logged = kvt_member_log(&c, 2, 1 << 20, &log) == 0 && log &&
                 strstr(log, "client certificate authentication failed") != NULL;
    free(log);
    kvt_cluster_destroy(&c);
    cr_assert(ok, "members 0 and 1 (CN rule met) did not form a quorum: %s", err);
    cr_assert(!leaked, "member 2 accepted peers whose CN its rule refuses");
    cr_assert(logged, "member 2 logged no refused peer handshake");
    cr_assert(go_words, "no member logged \"remote error: tls: bad certificate\"");
}

Test(tls_etcdflags, allowed_cn_and_hostname_are_exclusive, .fini = fini, .timeout = 60)
{
    cr_assert_eq(tls_fx_certs(&g_f, "kvd-tlsflags"), 0);
    const char *extra[] = {"--peer-cert-allowed-cn=a", "--peer-cert-allowed-hostname=b", NULL};
    cr_assert_neq(tls_fx_start(&g_f, extra), 0);
    cr_assert(tls_fx_log_has(&g_f, "AllowedCN and AllowedHostname are mutually exclusive"));
}
