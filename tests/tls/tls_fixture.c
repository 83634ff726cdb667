/* tls_fixture.c - see tls_fixture.h. */
#include "tls_fixture.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *tls_fx_kvd_bin(char *buf, size_t cap)
{
    const char *b = getenv("KV_KVD_BIN");
    if (b && *b) {
        snprintf(buf, cap, "%s", b);
        return buf;
    }
    const char *d = getenv("KV_BUILD_DIR");
    snprintf(buf, cap, "%s/server/kvd", d && *d ? d : "build");
    return buf;
}

int tls_fx_certs(tls_fx *f, const char *prefix)
{
    memset(f, 0, sizeof(*f));
    kvt_proc_init(&f->kvd, "/dev/null");
    int rc = kvt_tmpdir_create(&f->dir, prefix);
    if (rc < 0)
        return rc;
    snprintf(f->certs, sizeof(f->certs), "%s/certs", f->dir.path);
    const char *src = getenv("KV_SOURCE_DIR");
    char script[4096];
    snprintf(script, sizeof(script), "%s/tests/tls/gen_certs.sh", src && *src ? src : ".");
    const char *argv[] = {"/bin/sh", script, f->certs, NULL};
    kvt_cmd_result r;
    rc = kvt_run(argv, NULL, NULL, 0, 60000, &r);
    if (rc < 0)
        return rc;
    int ok = r.exit_code == 0 && !r.timed_out;
    if (!ok)
        fprintf(stderr, "gen_certs.sh failed: %s\n", r.err);
    kvt_cmd_result_free(&r);
    return ok ? 0 : -EIO;
}

const char *tls_fx_path(tls_fx *f, const char *name)
{
    char *b = f->paths[f->next_path++ % 8];
    snprintf(b, sizeof(f->paths[0]), "%s/%s", f->certs, name);
    return b;
}

int tls_fx_start(tls_fx *f, const char *const *extra)
{
    char bin[4096], lc[96], lp[96], lm[96], ic[128], dd[4200], log[4200];
    int rc;
    if (f->keep_ports && f->client_port) {
        /* a restart of the same member: its peer URL is part of its identity */
    } else if ((rc = kvt_port_free(&f->client_port)) < 0 ||
               (rc = kvt_port_free(&f->peer_port)) < 0 ||
               (rc = kvt_port_free(&f->metrics_port)) < 0) {
        return rc;
    }
    snprintf(f->url, sizeof(f->url), "https://127.0.0.1:%u", f->client_port);
    snprintf(lc, sizeof(lc), "--listen-client-urls=%s", f->url);
    snprintf(lp, sizeof(lp), "--listen-peer-urls=http://127.0.0.1:%u", f->peer_port);
    snprintf(lm, sizeof(lm), "--listen-metrics-urls=http://127.0.0.1:%u", f->metrics_port);
    snprintf(ic, sizeof(ic), "--initial-cluster=n1=http://127.0.0.1:%u", f->peer_port);
    snprintf(dd, sizeof(dd), "--data-dir=%s/data", f->dir.path);
    snprintf(log, sizeof(log), "%s/kvd.log", f->dir.path);
    kvt_proc_init(&f->kvd, log);
    const char *argv[40];
    int n = 0;
    argv[n++] = f->bin ? f->bin : tls_fx_kvd_bin(bin, sizeof(bin));
    argv[n++] = "--name=n1";
    argv[n++] = dd;
    argv[n++] = lc;
    argv[n++] = lp;
    argv[n++] = lm;
    argv[n++] = ic;
    if (!f->no_cert) {
        argv[n++] = "--cert-file";
        argv[n++] = tls_fx_path(f, "server.pem");
        argv[n++] = "--key-file";
        argv[n++] = tls_fx_path(f, "server-key.pem");
    }
    for (int k = 0; extra && extra[k] && n < 39; k++) /* "@name": a certificate file */
        argv[n++] = extra[k][0] == '@' ? tls_fx_path(f, extra[k] + 1) : extra[k];
    argv[n] = NULL;
    rc = kvt_proc_spawn(&f->kvd, argv);
    if (rc < 0)
        return rc;
    uint64_t deadline = kvt_now_ms() + 20000;
    while (kvt_now_ms() < deadline) {
        int status = 0;
        char *body = NULL;
        if (kvt_http_get(f->metrics_port, "/health", 1000, &status, &body) == 0) {
            free(body);
            if (status == 200)
                return 0;
        }
        if (!kvt_proc_alive(&f->kvd))
            return -ECHILD;
        kvt_sleep_ms(100);
    }
    return -ETIMEDOUT;
}

void tls_fx_destroy(tls_fx *f)
{
    if (f->kvd.pid)
        kvt_proc_kill9(&f->kvd);
    if (f->dir.path[0])
        kvt_tmpdir_destroy(&f->dir);
}

int tls_fx_ctl(tls_fx *f, kvt_cmd_result *res, const char *const *args)
{
    const char *argv[32];
    char ep[96];
    int n = 0;
    snprintf(ep, sizeof(ep), "--endpoints=%s", f->url);
    argv[n++] = "/usr/bin/etcdctl";
    argv[n++] = ep;
    argv[n++] = "--dial-timeout=3s";
    argv[n++] = "--command-timeout=5s";
    for (int k = 0; args[k] && n < 31; k++)
        argv[n++] = args[k];
    argv[n] = NULL;
    const char *env[] = {"ETCDCTL_API=3", NULL};
    return kvt_run(argv, env, NULL, 0, 30000, res);
}

double tls_fx_metric(tls_fx *f, const char *series)
{
    int status = 0;
    char *body = NULL;
    double v = -1;
    if (kvt_http_get(f->metrics_port, "/metrics", 3000, &status, &body) == 0 && status == 200) {
        if (kvt_metric_value(body, series, &v) != 0)
            v = -1;
    }
    free(body);
    return v;
}

static int log_has_now(tls_fx *f, const char *needle)
{
    FILE *fp = fopen(f->kvd.log_path, "r");
    if (!fp)
        return 0;
    char *buf = malloc(1 << 20);
    size_t n = buf ? fread(buf, 1, (1 << 20) - 1, fp) : 0;
    fclose(fp);
    if (!buf)
        return 0;
    buf[n] = 0;
    int has = strstr(buf, needle) != NULL;
    free(buf);
    return has;
}

int tls_fx_log_has(tls_fx *f, const char *needle)
{
    int has = log_has_now(f, needle);
    for (uint64_t end = kvt_now_ms() + 5000; !has && kvt_now_ms() < end;) {
        kvt_sleep_ms(20);
        has = log_has_now(f, needle);
    }
    return has;
}

int tls_fx_handshake_with(uint16_t port, const char *cipher)
{
    char connect[64];
    snprintf(connect, sizeof connect, "127.0.0.1:%u", port);
    const char *argv[] = {"/usr/bin/openssl", "s_client", "-connect", connect,
                          "-tls1_2",          "-cipher",  cipher,     NULL};
    kvt_cmd_result r;
    if (kvt_run(argv, NULL, "Q\n", 2, 20000, &r) != 0)
        return 0;
    int ok = r.exit_code == 0 && strstr(r.out, cipher) != NULL;
    kvt_cmd_result_free(&r);
    return ok;
}
