/*
 * test_tls_cluster.c - TLS on the peer port: a 3-member kvd cluster with
 * https peer URLs and --peer-client-cert-auth forms and replicates, with one TLS handshake
 * per peer connection; a member whose certificate comes from another CA cannot join (the
 * others log and refuse it). The peer proxies of kvt_cluster pass TLS through.
 * A member replaced on the same https peer URL (remove, wipe, etcdctl member add) learns the
 * new id `member add` drew from its peers' GET /members over peer TLS, with its client
 * certificate (server/daemon/members_join.h), and joins.
 */
#include <criterion/criterion.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvt_cluster.h"
#include "tls_fixture.h"

static tls_fx g_f;
static kvt_cluster g_c;
static int g_started;

static void fini(void)
{
    if (g_started)
        kvt_cluster_destroy(&g_c);
    tls_fx_destroy(&g_f);
}

/* Peer TLS flags for every member (paths in g_f.certs); member 2's own override. */
static char g_args[6][4400];
static const char *g_argv[5], *g_m2[3];

/* foreign_m2: member 2 presents a certificate of CA 2 (it still trusts CA 1). */
static void start(int foreign_m2)
{
    cr_assert_eq(tls_fx_certs(&g_f, "kvd-tlscl"), 0, "certificates");
    snprintf(g_args[0], sizeof(g_args[0]), "--peer-cert-file=%s", tls_fx_path(&g_f, "server.pem"));
    snprintf(g_args[1], sizeof(g_args[1]), "--peer-key-file=%s",
             tls_fx_path(&g_f, "server-key.pem"));
    snprintf(g_args[2], sizeof(g_args[2]), "--peer-trusted-ca-file=%s",
             tls_fx_path(&g_f, "ca.pem"));
    snprintf(g_args[3], sizeof(g_args[3]), "--peer-client-cert-auth");
    snprintf(g_args[4], sizeof(g_args[4]), "--peer-cert-file=%s", tls_fx_path(&g_f, "other.pem"));
    snprintf(g_args[5], sizeof(g_args[5]), "--peer-key-file=%s",
             tls_fx_path(&g_f, "other-key.pem"));
    for (int i = 0; i < 4; i++)
        g_argv[i] = g_args[i];
    g_argv[4] = NULL;
    g_m2[0] = g_args[4];
    g_m2[1] = g_args[5];
    g_m2[2] = NULL;
    kvt_cluster_opts o;
    kvt_cluster_opts_default(&o, 3);
    cr_assert_eq(o.target, KV_TEST_SERVER_KVD, "TLS cluster tests run against kvd only");
    o.heartbeat_ms = 50;
    o.election_ms = 500;
    o.kvd_args = g_argv;
    o.peer_https = 1;
    cr_assert_eq(kvt_cluster_init(&g_c, &o), 0);
    g_started = 1;
    g_c.m[2].args = foreign_m2 ? g_m2 : NULL;
    int rc = kvt_cluster_start(&g_c, 60000);
    if (rc != 0)
        kvt_cluster_dump(&g_c);
    cr_assert_eq(rc, 0, "cluster start: %d", rc);
}

/* Polls a serializable Get of key on member i for up to ms; 1 if it returned want. */
static int wait_value(int i, const char *key, const char *want, uint32_t ms)
{
    uint64_t deadline = kvt_now_ms() + ms;
    do {
        char val[128];
        int found = 0;
        if (kvt_get(&g_c, i, key, 1, 2000, val, sizeof(val), &found, NULL, NULL, 0) == 0 && found &&
            strcmp(val, want) == 0)
            return 1;
        kvt_sleep_ms(100);
    } while (kvt_now_ms() < deadline);
    return 0;
}

/* Sum of every sample of family name (any labels) in a metrics text. */
static double family_sum(const char *text, const char *name)
{
    double sum = 0;
    size_t nl = strlen(name);
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        if (strncmp(p, name, nl) == 0 && (p[nl] == '{' || p[nl] == ' ')) {
            const char *sp = strchr(p, ' ');
            if (sp)
                sum += strtod(sp + 1, NULL);
        }
    }
    return sum;
}

Test(tls_cluster, https_peers_with_client_cert_auth_replicate, .fini = fini, .timeout = 240)
{
    start(0);
    char err[256] = "";
    cr_assert_eq(kvt_put(&g_c, 0, "tls-peer-key", "v1", 5000, NULL, err, sizeof(err)), 0, "%s",
                 err);
    for (int i = 0; i < 3; i++)
        cr_assert(wait_value(i, "tls-peer-key", "v1", 10000), "member %d did not replicate", i);
    for (int i = 0; i < 3; i++) {
        char *body = NULL;
        cr_assert_eq(kvt_member_metrics(&g_c, i, &body), 0);
        double hs = family_sum(body, "kvd_tls_handshakes_total"); /* client port is h2c */
        double conns = family_sum(body, "kvd_peer_connects_total");
        double fails = family_sum(body, "kvd_tls_handshake_failures_total");
        free(body);
        cr_assert_geq(conns, 2, "member %d: %g peer connections", i, conns);
        /* one handshake per peer connection, none per message */
        cr_assert_eq(hs, conns, "member %d: %g peer handshakes for %g connections", i, hs, conns);
        /* Dials during startup reach the peer proxy before the member behind it listens and
         * are closed before their handshake: counted as incomplete, never as a connection. */
        cr_assert_leq(fails, 10, "member %d: %g failed handshakes", i, fails);
    }
}

Test(tls_cluster, member_with_certificate_of_another_ca_cannot_join, .fini = fini, .timeout = 240)
{
    start(1);
    char err[256] = "";
    cr_assert_eq(kvt_put(&g_c, 0, "tls-other-ca", "v1", 10000, NULL, err, sizeof(err)), 0, "%s",
                 err);
    cr_assert(wait_value(1, "tls-other-ca", "v1", 10000), "member 1 did not replicate");
    cr_assert(!wait_value(2, "tls-other-ca", "v1", 4000),
              "the member with a foreign certificate must not get the data");
    for (int i = 0; i < 2; i++) {
        char *body = NULL;
        cr_assert_eq(kvt_member_metrics(&g_c, i, &body), 0);
        double fails = family_sum(body, "kvd_tls_handshake_failures_total");
        free(body);
        char *log = NULL;
        cr_assert_eq(kvt_member_log(&g_c, i, 1 << 20, &log), 0);
        int logged = strstr(log, "tls (peer): TLS handshake with") != NULL;
        free(log);
        cr_assert_gt(fails, 0, "member %d counted no failed peer handshake", i);
        cr_assert(logged, "member %d logged no refused handshake", i);
    }
}

Test(tls_cluster, member_replaced_on_the_same_url_learns_its_id_over_tls, .fini = fini,
     .timeout = 300)
{
    start(0);
    int l = kvt_cluster_wait_leader(&g_c, 10000, NULL);
    cr_assert_geq(l, 0);
    int j = l == 2 ? 1 : 2; /* a follower */
    kvt_member *m = &g_c.m[j];
    kvt_status st;
    cr_assert_eq(kvt_member_status(&g_c, j, &st, 10000), 0);
    char hex[32], purl[96];
    snprintf(hex, sizeof(hex), "%" PRIx64, st.id);
    snprintf(purl, sizeof(purl), "--peer-urls=https://%s", m->peer_url + 7);
    m->in_config = 0;
    kvt_cmd_result res;
    cr_assert_eq(kvt_ctl(&g_c, -1, 20000, &res, "member", "remove", hex, NULL), 0);
    cr_assert_eq(res.exit_code, 0, "member remove: %s%s", res.out, res.err);
    kvt_cmd_result_free(&res);
    (void)kvt_proc_wait(&m->proc, 10000);
    kvt_member_kill9(&g_c, j);
    const char *rm[] = {"/bin/rm", "-rf", m->data_dir, NULL};
    cr_assert_eq(kvt_run(rm, NULL, NULL, 0, 20000, &res), 0);
    kvt_cmd_result_free(&res);
    uint64_t t0 = kvt_now_ms(), id = 0;
    for (;;) { /* the same peer URL again (retried while the cluster settles) */
        cr_assert_eq(kvt_ctl(&g_c, -1, 20000, &res, "member", "add", m->name, purl, NULL), 0);
        const char *p = res.exit_code == 0 ? strstr(res.out, "Member ") : NULL;
        int ok = p && sscanf(p, "Member %" SCNx64, &id) == 1;
        if (!ok && kvt_now_ms() - t0 > 30000)
            cr_assert_fail("member add of %s: exit %d: %s%s", purl, res.exit_code, res.out,
                           res.err);
        kvt_cmd_result_free(&res);
        if (ok)
            break;
        kvt_sleep_ms(500);
    }
    cr_assert_neq(id, st.id);
    m->join = 1;
    m->in_config = 1;
    m->id = 0;
    cr_assert_eq(kvt_member_start(&g_c, j), 0); /* no --initial-member-id */
    int rdy = kvt_member_wait_ready(&g_c, j, 60000);
    if (rdy != 0) {
        char *log = NULL;
        (void)kvt_member_log(&g_c, j, 8192, &log);
        cr_assert_fail("the replaced member did not start: %d; its log:\n%s", rdy, log ? log : "");
    }
    kvt_status js;
    cr_assert_eq(kvt_member_status(&g_c, j, &js, 10000), 0);
    cr_assert_eq(js.id, id, "joined as %" PRIx64 ", member add gave %" PRIx64, js.id, id);
    char err[256] = "";
    cr_assert_eq(kvt_put(&g_c, l, "tls-replaced", "v", 10000, NULL, err, sizeof(err)), 0, "%s",
                 err);
    cr_assert(wait_value(j, "tls-replaced", "v", 30000), "the replaced member does not serve");
}
