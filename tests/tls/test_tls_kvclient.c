/*
 * test_tls_kvclient.c - libkvclient and kvctl over TLS: https endpoints with a
 * CA, mutual TLS with a client certificate, a wrong CA fails with the handshake reason, and
 * kvctl's --cacert --cert --key --insecure-skip-tls-verify.
 */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvclient.h"
#include "tls_fixture.h"

static tls_fx g_f;

static void fini(void)
{
    tls_fx_destroy(&g_f);
}

static void start_mtls(void)
{
    cr_assert_eq(tls_fx_certs(&g_f, "kvd-tlskvc"), 0, "certificates");
    cr_assert_eq(tls_fx_start(&g_f, (const char *const[]){"--trusted-ca-file", "@ca.pem",
                                                          "--client-cert-auth", NULL}),
                 0, "kvd did not start");
}

/* Opens a client on f->url; ca may be NULL; cert 1: the client certificate; server_name:
 * kvc_config.server_name (NULL: the endpoint's host). */
static kvc_client *open_client_named(const char *ca, int cert, int insecure,
                                     const char *server_name)
{
    const char *eps[] = {g_f.url};
    kvc_config cfg;
    kvc_config_default(&cfg);
    cfg.endpoints = eps;
    cfg.n_endpoints = 1;
    cfg.dial_timeout_ms = 3000;
    cfg.ca_file = ca ? tls_fx_path(&g_f, ca) : NULL;
    cfg.cert_file = cert ? tls_fx_path(&g_f, "client.pem") : NULL;
    cfg.key_file = cert ? tls_fx_path(&g_f, "client-key.pem") : NULL;
    cfg.insecure_skip_verify = insecure;
    cfg.server_name = server_name;
    kvc_client *c = NULL;
    kvc_error err = {0};
    cr_assert_eq(kvc_open(&c, &cfg, &err), 0, "kvc_open: %s", err.message);
    return c;
}

static kvc_client *open_client(const char *ca, int cert, int insecure)
{
    return open_client_named(ca, cert, insecure, NULL);
}

Test(tls_kvclient, libkvclient_mutual_tls_put_get, .fini = fini, .timeout = 120)
{
    start_mtls();
    kvc_client *c = open_client("ca.pem", 1, 0);
    kvc_error err = {0};
    cr_assert_eq(kvc_put(c, "k", 1, "v-tls", 5, NULL, 5000, NULL, &err), 0, "%s", err.message);
    kvc_range_result r;
    cr_assert_eq(kvc_get(c, "k", 1, NULL, 5000, &r, &err), 0, "%s", err.message);
    cr_assert_eq(r.n_kvs, 1);
    cr_assert(r.kvs[0].value_len == 5 && memcmp(r.kvs[0].value, "v-tls", 5) == 0);
    kvc_range_result_free(&r);
    kvc_close(c);
}

Test(tls_kvclient, libkvclient_wrong_ca_or_no_cert_fails, .fini = fini, .timeout = 120)
{
    start_mtls();
    kvc_client *c = open_client("ca2.pem", 1, 0);
    kvc_error err = {0};
    int rc = kvc_get(c, "k", 1, NULL, 3000, NULL, &err);
    kvc_close(c);
    cr_assert_neq(rc, 0, "a server certificate of another CA must be refused");
    cr_assert(strstr(err.message, "certificate verify failed") != NULL, "%s", err.message);

    c = open_client("ca.pem", 0, 0); /* no client certificate: the server refuses */
    rc = kvc_get(c, "k", 1, NULL, 3000, NULL, &err);
    kvc_close(c);
    cr_assert_neq(rc, 0, "mutual TLS must refuse a client without a certificate");

    c = open_client(NULL, 1, 1); /* insecure-skip-verify with a client certificate */
    rc = kvc_put(c, "k2", 2, "v", 1, NULL, 5000, NULL, &err);
    kvc_close(c);
    cr_assert_eq(rc, 0, "insecure-skip-verify: %s", err.message);
}

/* kvc_config.server_name: the name the member's certificate must match instead of the
 * endpoint's host (127.0.0.1 here; the certificate's SANs are 127.0.0.1, ::1 and localhost). */
Test(tls_kvclient, libkvclient_server_name_is_the_name_verified, .fini = fini, .timeout = 120)
{
    start_mtls();
    static const struct {
        const char *name;
        int ok;
    } cases[] = {{"localhost", 1}, {"kvt-not-in-the-cert.test", 0}};
    for (size_t i = 0; i < 2; i++) {
        kvc_client *c = open_client_named("ca.pem", 1, 0, cases[i].name);
        kvc_error err = {0};
        int rc = kvc_put(c, "sn", 2, "v", 1, NULL, 3000, NULL, &err);
        kvc_close(c);
        if (cases[i].ok)
            cr_expect_eq(rc, 0, "server_name %s: %s", cases[i].name, err.message);
        else
            cr_expect(rc != 0 && strstr(err.message, "certificate verify failed"),
                      "server_name %s: rc %d, %s", cases[i].name, rc, err.message);
    }
}

/* kvctl --endpoints=<endpoint> args...; "@name" args are certificate paths. Returns the exit
 * status (999: timed out); out gets stdout then stderr. */
static int kvctl_at(const char *endpoint, const char *const *args, char *out, size_t cap)
{
    char bin[4096];
    const char *d = getenv("KV_BUILD_DIR");
    snprintf(bin, sizeof(bin), "%s/client/kvctl", d && *d ? d : "build");
    const char *argv[24];
    char ep[160];
    int n = 0;
    snprintf(ep, sizeof(ep), "--endpoints=%s", endpoint);
    argv[n++] = bin;
    argv[n++] = ep;
    argv[n++] = "--dial-timeout=2s";
    for (int k = 0; args[k] && n < 23; k++)
        argv[n++] = args[k][0] == '@' ? tls_fx_path(&g_f, args[k] + 1) : args[k];
    argv[n] = NULL;
    kvt_cmd_result r;
    cr_assert_eq(kvt_run(argv, NULL, NULL, 0, 30000, &r), 0);
    int code = r.timed_out ? 999 : r.exit_code;
    snprintf(out, cap, "%s%s", r.out, r.err);
    kvt_cmd_result_free(&r);
    return code;
}

static int kvctl(const char *const *args, char *out, size_t cap)
{
    char ep[64];
    snprintf(ep, sizeof(ep), "127.0.0.1:%u", g_f.client_port);
    return kvctl_at(ep, args, out, cap);
}

Test(tls_kvclient, kvctl_tls_flags, .fini = fini, .timeout = 120)
{
    start_mtls();
    char out[4096];
    cr_assert_eq(kvctl((const char *const[]){"--cacert", "@ca.pem", "--cert", "@client.pem",
                                             "--key", "@client-key.pem", "put", "kk", "vv", NULL},
                       out, sizeof(out)),
                 0, "%s", out);
    cr_assert_eq(kvctl((const char *const[]){"--cacert", "@ca.pem", "--cert", "@client.pem",
                                             "--key", "@client-key.pem", "get", "kk", NULL},
                       out, sizeof(out)),
                 0, "%s", out);
    cr_assert(strstr(out, "kk\nvv") != NULL, "%s", out);
    cr_assert_neq(kvctl((const char *const[]){"--cacert", "@ca2.pem", "--cert", "@client.pem",
                                              "--key", "@client-key.pem", "get", "kk", NULL},
                        out, sizeof(out)),
                  0, "wrong CA must fail: %s", out);
    cr_assert_neq(
        kvctl((const char *const[]){"--cacert", "@ca.pem", "get", "kk", NULL}, out, sizeof(out)), 0,
        "no client certificate must fail: %s", out);
    cr_assert_eq(kvctl((const char *const[]){"--insecure-skip-tls-verify", "--cert", "@client.pem",
                                             "--key", "@client-key.pem", "get", "kk", NULL},
                       out, sizeof(out)),
                 0, "%s", out);
}

/* kvctl snapshot save over TLS: an https:// endpoint with mutual TLS (libkvclient's
 * kvc_snapshot; kvctl's former private h2c downloader could not do TLS and failed here with
 * "dial https://...: No route to host"), then status reads the file with the keys. */
Test(tls_kvclient, kvctl_snapshot_save_over_tls, .fini = fini, .timeout = 120)
{
    start_mtls();
    char out[8192];
    for (int i = 0; i < 20; i++) {
        char key[32];
        snprintf(key, sizeof(key), "snapkey%02d", i);
        cr_assert_eq(kvctl((const char *const[]){"--cacert", "@ca.pem", "--cert", "@client.pem",
                                                 "--key", "@client-key.pem", "put", key, "v", NULL},
                           out, sizeof(out)),
                     0, "%s", out);
    }
    char file[4200], part[4300];
    snprintf(file, sizeof(file), "%s/tls-snap.db", g_f.dir.path);
    snprintf(part, sizeof(part), "%s.part", file);
    cr_assert_eq(
        kvctl_at(g_f.url,
                 (const char *const[]){"--cacert", "@ca.pem", "--cert", "@client.pem", "--key",
                                       "@client-key.pem", "snapshot", "save", file, NULL},
                 out, sizeof(out)),
        0, "kvctl snapshot save over TLS: %s", out);
    char want[4300];
    snprintf(want, sizeof(want), "Snapshot saved at %s\n", file);
    cr_assert(strstr(out, want) != NULL, "%s", out);
    cr_assert(strstr(out, "\"msg\":\"fetched snapshot\"") != NULL, "%s", out);
    cr_assert_eq(access(part, F_OK), -1, "the .part file was left behind");
    cr_assert_eq(kvctl_at(g_f.url,
                          (const char *const[]){"-w", "json", "snapshot", "status", file, NULL},
                          out, sizeof(out)),
                 0, "snapshot status: %s", out);
    /* 20 keys (kvd's bbolt snapshot counts the key records: one per revision) */
    const char *tk = strstr(out, "\"totalKey\":");
    cr_assert_not_null(tk, "%s", out);
    cr_assert_geq(atoi(tk + 11), 20, "%s", out);

    /* A wrong CA fails the download with the handshake reason and leaves no file. */
    char other[4300];
    snprintf(other, sizeof(other), "%s/tls-snap-2.db", g_f.dir.path);
    cr_assert_neq(
        kvctl_at(g_f.url,
                 (const char *const[]){"--cacert", "@ca2.pem", "--cert", "@client.pem", "--key",
                                       "@client-key.pem", "snapshot", "save", other, NULL},
                 out, sizeof(out)),
        0, "wrong CA must fail: %s", out);
    cr_assert(strstr(out, "certificate verify failed") != NULL, "%s", out);
    cr_assert_eq(access(other, F_OK), -1);
}
