/*
 * test_tls_auto.c - etcd's --auto-tls and --peer-auto-tls (server/daemon/tls_auto.h): a member with
 * an https client port and no certificate of its own serves TLS with a generated self-signed
 * certificate, kept in the data dir and reused after a restart; three members with https peer
 * URLs and --peer-auto-tls form a cluster over TLS; an https URL with neither a certificate
 * nor the auto flag is refused with a message that names the flags.
 */
#include <criterion/criterion.h>

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

/* Reads a whole small file into buf; its length, or -1. */
static long slurp(const char *path, char *buf, size_t cap)
{
    FILE *fp = fopen(path, "rb");
    if (fp == NULL)
        return -1;
    size_t n = fread(buf, 1, cap - 1, fp);
    fclose(fp);
    buf[n] = '\0';
    return (long)n;
}

/* etcdctl put+get over TLS without verifying the certificate (etcd's e2e flags for auto TLS);
 * 1 if the value came back. */
static int put_get(const char *key, const char *val)
{
    kvt_cmd_result r;
    const char *put[] = {
        "--insecure-transport=false", "--insecure-skip-tls-verify", "put", key, val, NULL};
    if (tls_fx_ctl(&g_f, &r, put) != 0)
        return 0;
    int ok = r.exit_code == 0;
    kvt_cmd_result_free(&r);
    const char *get[] = {"--insecure-transport=false",
                         "--insecure-skip-tls-verify",
                         "get",
                         key,
                         "--print-value-only",
                         NULL};
    if (!ok || tls_fx_ctl(&g_f, &r, get) != 0)
        return 0;
    ok = r.exit_code == 0 && strncmp(r.out, val, strlen(val)) == 0;
    kvt_cmd_result_free(&r);
    return ok;
}

Test(tls_auto, client_port_self_signed_and_reused, .fini = fini, .timeout = 180)
{
    cr_assert_eq(tls_fx_certs(&g_f, "kvd-tlsauto"), 0);
    g_f.no_cert = 1;
    const char *extra[] = {"--auto-tls", "--self-signed-cert-validity=2", NULL};
    cr_assert_eq(tls_fx_start(&g_f, extra), 0, "kvd with --auto-tls did not become healthy");
    cr_assert(put_get("auto-k", "v1"), "put/get over the self-signed client port");

    /* It is TLS with a certificate no CA vouches for: verification fails. */
    kvt_cmd_result r;
    const char *strict[] = {"--insecure-transport=false", "get", "auto-k", NULL};
    cr_assert_eq(tls_fx_ctl(&g_f, &r, strict), 0);
    cr_assert_neq(r.exit_code, 0, "a verifying client accepted a self-signed certificate");
    kvt_cmd_result_free(&r);

    char path[4300], before[8192], after[8192];
    snprintf(path, sizeof(path), "%s/data/fixtures/client/cert.pem", g_f.dir.path);
    cr_assert_gt(slurp(path, before, sizeof(before)), 0, "no %s", path);
    cr_assert(strstr(before, "BEGIN CERTIFICATE") != NULL);

    /* A restart reuses the pair (etcd's SelfCert): same certificate, still serving. */
    kvt_proc_term(&g_f.kvd, 5000);
    g_f.keep_ports = 1;
    cr_assert_eq(tls_fx_start(&g_f, extra), 0, "restart with --auto-tls");
    cr_assert_gt(slurp(path, after, sizeof(after)), 0);
    cr_assert_str_eq(before, after, "the self-signed certificate changed across a restart");
    cr_assert(put_get("auto-k2", "v2"), "put/get after the restart");
}

Test(tls_auto, https_url_without_certificate_is_refused, .fini = fini, .timeout = 60)
{
    cr_assert_eq(tls_fx_certs(&g_f, "kvd-tlsauto"), 0);
    g_f.no_cert = 1;
    cr_assert_neq(tls_fx_start(&g_f, NULL), 0, "kvd served https with no certificate");
    cr_assert(tls_fx_log_has(&g_f, "needs --cert-file and --key-file, or --auto-tls"),
              "the refusal does not name the flags");
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

Test(tls_auto, peer_auto_tls_cluster_replicates, .timeout = 240)
{
    const char *args[] = {"--peer-auto-tls", NULL};
    kvt_cluster c;
    kvt_cluster_opts o;
    kvt_cluster_opts_default(&o, 3);
    cr_assert_eq(o.target, KV_TEST_SERVER_KVD, "kvd only");
    o.kvd_args = args;
    o.peer_https = 1;
    cr_assert_eq(kvt_cluster_init(&c, &o), 0);
    int rc = kvt_cluster_start(&c, 60000);
    if (rc != 0)
        kvt_cluster_dump(&c);
    cr_assert_eq(rc, 0, "cluster with --peer-auto-tls did not start: %d", rc);
    char err[256] = "";
    cr_assert_eq(kvt_put(&c, 0, "peer-auto", "v", 5000, NULL, err, sizeof(err)), 0, "%s", err);
    int seen = 0;
    for (int tries = 0; tries < 100 && seen < 3; tries++) {
        seen = 0;
        for (int i = 0; i < 3; i++) {
            char val[32];
            int found = 0;
            if (kvt_get(&c, i, "peer-auto", 1, 2000, val, sizeof(val), &found, NULL, NULL, 0) ==
                    0 &&
                found && strcmp(val, "v") == 0)
                seen++;
        }
        if (seen < 3)
            kvt_sleep_ms(100);
    }
    double hs = 0;
    for (int i = 0; i < 3; i++) {
        char *body = NULL;
        if (kvt_member_metrics(&c, i, &body) == 0) {
            hs += family_sum(body, "kvd_tls_handshakes_total");
            free(body);
        }
    }
    kvt_cluster_destroy(&c);
    cr_assert_eq(seen, 3, "only %d of 3 members replicated over auto-TLS peers", seen);
    cr_assert_geq(hs, 6, "%g peer TLS handshakes: the peers did not speak TLS", hs);
}
