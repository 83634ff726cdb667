/*
 * test_auth_tls.c - with --client-cert-auth, the verified client certificate's CN is the user
 * name when a request carries no token (etcd 3.4 AuthInfoFromTLS): the test client
 * certificate has CN "root", so etcdctl with that certificate and no --user acts as root
 * once auth is enabled. Certificates are made at test time (tests/tls/gen_certs.sh).
 */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvt_curl.h"
#include "tls_fixture.h"

static tls_fx g_f;

static void fini(void)
{
    tls_fx_destroy(&g_f);
}

/* etcdctl with the CA and the client certificate (CN root), words of cmd as arguments. */
static int ctl(const char *cmd, char *out, size_t cap)
{
    char cacert[4300], c1[4300], c2[4300], buf[512];
    snprintf(cacert, sizeof cacert, "--cacert=%s", tls_fx_path(&g_f, "ca.pem"));
    snprintf(c1, sizeof c1, "--cert=%s", tls_fx_path(&g_f, "client.pem"));
    snprintf(c2, sizeof c2, "--key=%s", tls_fx_path(&g_f, "client-key.pem"));
    snprintf(buf, sizeof buf, "%s", cmd);
    const char *args[16] = {cacert, c1, c2};
    int n = 3;
    for (char *save = NULL, *w = strtok_r(buf, " ", &save); w && n < 15;
         w = strtok_r(NULL, " ", &save))
        args[n++] = w;
    args[n] = NULL;
    kvt_cmd_result r;
    cr_assert_eq(tls_fx_ctl(&g_f, &r, args), 0);
    int code = r.timed_out ? 999 : r.exit_code;
    snprintf(out, cap, "%s%s", r.out, r.err);
    kvt_cmd_result_free(&r);
    return code;
}

Test(auth_tls, client_certificate_cn_is_the_user, .fini = fini, .timeout = 120)
{
    cr_assert_eq(tls_fx_certs(&g_f, "kvd-authtls"), 0, "certificates");
    int rc = tls_fx_start(&g_f, (const char *const[]){"--trusted-ca-file", "@ca.pem",
                                                      "--client-cert-auth",
                                                      "--auth-hash-iterations", "2000", NULL});
    cr_assert_eq(rc, 0, "kvd did not start");
    char out[8192];
    cr_assert_eq(ctl("user add root --new-user-password=rootpw", out, sizeof out), 0, "%s", out);
    cr_assert_eq(ctl("user add bob --new-user-password=bobpw", out, sizeof out), 0, "%s", out);
    cr_assert_eq(ctl("auth enable", out, sizeof out), 0, "%s", out);
    /* no --user: the certificate's CN (root) is the caller */
    cr_assert_eq(ctl("put k v", out, sizeof out), 0, "CN root may write: %s", out);
    cr_assert_eq(ctl("get k", out, sizeof out), 0, "%s", out);
    cr_assert(strstr(out, "k\nv") != NULL, "%s", out);
    cr_assert_eq(ctl("user list", out, sizeof out), 0, "CN root is admin: %s", out);
    cr_assert(strstr(out, "bob\nroot\n") != NULL, "%s", out);
    /* a token wins over the certificate: bob has no role */
    cr_assert_neq(ctl("--user bob:bobpw get k", out, sizeof out), 0);
    cr_assert(strstr(out, "etcdserver: permission denied"), "%s", out);
    /* the JSON gateway, over HTTP/1.1 and over HTTP/2 (whose stream is handed to the same
     * handler on a stand-in connection): the certificate's CN is the caller on both */
    static const char *const protos[] = {"--http1.1", "--http2"};
    for (int i = 0; i < 2; i++) {
        char url[160];
        snprintf(url, sizeof url, "%s/v3/kv/range", g_f.url);
        const char *args[] = {protos[i], "-X", "POST", "-d", "{\"key\":\"aw==\"}", NULL};
        kvt_curl_req q = {.url = url,
                          .max_time_s = 10,
                          .cacert = tls_fx_path(&g_f, "ca.pem"),
                          .cert = tls_fx_path(&g_f, "client.pem"),
                          .key = tls_fx_path(&g_f, "client-key.pem"),
                          .args = args};
        int code = kvt_curl(&q, out, sizeof out);
        cr_assert_geq(code, 0);
        int ok = code == 0 && strstr(out, "\"kvs\"") != NULL;
        fprintf(stderr, "  gateway %s with CN root: %s\n", protos[i], out);
        cr_assert(ok, "the gateway %s did not take the certificate's CN as the caller", protos[i]);
    }
}
