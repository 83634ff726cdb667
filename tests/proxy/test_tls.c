/*
 * proxy_tls: `kvd grpc-proxy start` with certificates on both sides, in front of one member
 * whose client port is https with client-certificate auth (tests/tls's fixture and
 * gen_certs.sh: CA 1 signs the server and client certificates, CA 2 is another CA):
 *   - the proxy's listener: --cert-file/--key-file/--trusted-ca-file (client certificates
 *     required); upstream: --cacert/--cert/--key (etcd 3.4's grpc-proxy flags) with a
 *     certificate without a Common Name (proxy.pem: etcd's proxy refuses one with a CN, and
 *     so does kvd's, with etcd's text);
 *   - etcdctl 3.4 with --cacert/--cert/--key through the proxy: put/get, lease grant +
 *     keep-alive --once, a watch that sees a put, lock; libkvclient over TLS through it;
 *   - failures: a plaintext client, a client of another CA and a client without a
 *     certificate fail fast against the TLS listener (the proxy keeps serving); a proxy whose
 *     --cacert is another CA fails its calls with UNAVAILABLE and logs the handshake reason;
 *   - the listener's other etcd flags: --auto-tls (self-signed, reused on restart),
 *     --listen-cipher-suites, --client-crl-file.
 * KV_TEST_SERVER=etcd runs the same against an etcd member and `etcd grpc-proxy start`
 * (the error texts and the timing of the wrong-CA calls are kvd's only).
 */
#include "../tls/tls_fixture.h"
#include "kvclient.h"
#include "kvt_cluster.h"
#include "kvt_curl.h"

#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct pxt {
    kvt_proc proc;
    uint16_t port, metrics_port;
    char url[64]; /* https://127.0.0.1:<port> */
    char log[PATH_MAX];
} pxt;

static tls_fx g_f;
static pxt g_p;

static int is_etcd(void)
{
    return kvt_target_from_env() == KV_TEST_SERVER_ETCD;
}

static const char *server_bin(char *buf, size_t cap)
{
    const char *b = getenv("KV_ETCD_BIN");
    if (!is_etcd())
        return tls_fx_kvd_bin(buf, cap);
    snprintf(buf, cap, "%s", b && *b ? b : "/usr/bin/etcd");
    return buf;
}

static void fini(void)
{
    if (g_p.proc.pid)
        kvt_proc_kill9(&g_p.proc);
    tls_fx_destroy(&g_f);
}

/* Certificates, then the member: https client port, --client-cert-auth with CA 1. */
static void start_member(void)
{
    static char bin[PATH_MAX];
    cr_assert_eq(tls_fx_certs(&g_f, "kvd-pxtls"), 0, "certificates");
    g_f.bin = server_bin(bin, sizeof bin);
    cr_assert_eq(kvt_port_free(&g_f.client_port), 0);
    cr_assert_eq(kvt_port_free(&g_f.peer_port), 0);
    cr_assert_eq(kvt_port_free(&g_f.metrics_port), 0);
    g_f.keep_ports = 1;
    char adv[96], iap[96];
    snprintf(adv, sizeof adv, "--advertise-client-urls=https://127.0.0.1:%u", g_f.client_port);
    snprintf(iap, sizeof iap, "--initial-advertise-peer-urls=http://127.0.0.1:%u", g_f.peer_port);
    cr_assert_eq(tls_fx_start(&g_f, (const char *const[]){"--trusted-ca-file", "@ca.pem",
                                                          "--client-cert-auth", adv, iap, NULL}),
                 0, "member did not start (log %s)", g_f.kvd.log_path);
}

/* Spawns the proxy in front of the member; upstream_ca and cert are the certificate file
 * names of its --cacert and --cert ("x.pem": its key is "x-key.pem"); listen: the flags of
 * its client side, NULL-terminated ("@name": a certificate file). Does not wait. */
static void spawn_proxy_listen(const char *upstream_ca, const char *cert, const char *const *listen)
{
    char key[64];
    snprintf(key, sizeof key, "%.*s-key.pem", (int)(strlen(cert) - 4), cert);
    char bin[PATH_MAX], eps[96], laddr[64], metrics[64];
    cr_assert_eq(kvt_port_free(&g_p.port), 0);
    cr_assert_eq(kvt_port_free(&g_p.metrics_port), 0);
    snprintf(g_p.url, sizeof g_p.url, "https://127.0.0.1:%u", g_p.port);
    snprintf(eps, sizeof eps, "--endpoints=%s", g_f.url);
    snprintf(laddr, sizeof laddr, "--listen-addr=127.0.0.1:%u", g_p.port);
    snprintf(metrics, sizeof metrics, "--metrics-addr=http://127.0.0.1:%u", g_p.metrics_port);
    snprintf(g_p.log, sizeof g_p.log, "%.4000s/proxy-%u.log", g_f.dir.path, g_p.port);
    const char *argv[32];
    int n = 0;
    argv[n++] = server_bin(bin, sizeof bin);
    argv[n++] = "grpc-proxy";
    argv[n++] = "start";
    argv[n++] = eps;
    argv[n++] = laddr;
    argv[n++] = metrics;
    argv[n++] = "--cacert";
    argv[n++] = tls_fx_path(&g_f, upstream_ca);
    argv[n++] = "--cert";
    argv[n++] = tls_fx_path(&g_f, cert);
    argv[n++] = "--key";
    argv[n++] = tls_fx_path(&g_f, key);
    for (int k = 0; listen[k] && n < 30; k++)
        argv[n++] = listen[k][0] == '@' ? tls_fx_path(&g_f, listen[k] + 1) : listen[k];
    if (!is_etcd() && n < 31)
        argv[n++] = "--dial-timeout=2s"; /* kvd's flag; etcd's proxy dials with 5 s */
    argv[n] = NULL;
    kvt_proc_init(&g_p.proc, g_p.log);
    cr_assert_eq(kvt_proc_spawn(&g_p.proc, argv), 0, "spawn the proxy");
}

/* The proxy with TLS on both sides: CA 1's server.pem and client certificates required. */
static void spawn_proxy_with(const char *upstream_ca, const char *cert, const char *extra)
{
    const char *listen[] = {"--cert-file",       "@server.pem", "--key-file", "@server-key.pem",
                            "--trusted-ca-file", "@ca.pem",     extra,        NULL};
    spawn_proxy_listen(upstream_ca, cert, listen);
}

static void spawn_proxy(const char *upstream_ca, const char *cert)
{
    spawn_proxy_with(upstream_ca, cert, NULL);
}

/* A libkvclient client of url; ca/cert: certificate file names (NULL: none). */
static kvc_client *client(const char *url, const char *ca, const char *cert, const char *key)
{
    const char *eps[] = {url};
    kvc_config cfg;
    kvc_config_default(&cfg);
    cfg.endpoints = eps;
    cfg.n_endpoints = 1;
    cfg.dial_timeout_ms = 1500;
    cfg.ca_file = ca ? tls_fx_path(&g_f, ca) : NULL;
    cfg.cert_file = cert ? tls_fx_path(&g_f, cert) : NULL;
    cfg.key_file = key ? tls_fx_path(&g_f, key) : NULL;
    kvc_client *c = NULL;
    kvc_error e = {0};
    cr_assert_eq(kvc_open(&c, &cfg, &e), 0, "kvc_open %s: %s", url, e.message);
    return c;
}

static kvc_client *tls_client(void)
{
    return client(g_p.url, "ca.pem", "client.pem", "client-key.pem");
}

/* Waits (10 s) until a get over TLS through the proxy succeeds. */
static void wait_proxy_serving(void)
{
    kvc_client *c = tls_client();
    kvc_error e = {0};
    uint64_t end = kvt_now_ms() + 10000;
    int rc = -1;
    while (rc != 0 && kvt_now_ms() < end && kvt_proc_alive(&g_p.proc)) {
        rc = kvc_get(c, "ready", 5, NULL, 1000, NULL, &e);
        if (rc != 0)
            kvt_sleep_ms(100);
    }
    kvc_close(c);
    cr_assert_eq(rc, 0, "the proxy does not serve over TLS: %s (log %s)", e.message, g_p.log);
}

static void setup(void)
{
    start_member();
    spawn_proxy("ca.pem", "proxy.pem");
    wait_proxy_serving();
}

/* etcdctl (ETCDCTL_API=3) against url with args (NULL-terminated, at most 30) after the
 * given ones; tls 1: --cacert/--cert/--key of CA 1. */
static void ctl_v(kvt_cmd_result *r, const char *url, int tls, uint32_t timeout_ms,
                  const char *const *args)
{
    const char *argv[40];
    char ep[96];
    const char *ctl = getenv("KV_ETCDCTL_BIN");
    int n = 0;
    snprintf(ep, sizeof ep, "--endpoints=%s", url);
    argv[n++] = ctl && *ctl ? ctl : "/usr/bin/etcdctl";
    argv[n++] = ep;
    argv[n++] = "--dial-timeout=2s";
    argv[n++] = "--command-timeout=8s";
    if (tls) {
        argv[n++] = "--cacert";
        argv[n++] = tls_fx_path(&g_f, "ca.pem");
        argv[n++] = "--cert";
        argv[n++] = tls_fx_path(&g_f, "client.pem");
        argv[n++] = "--key";
        argv[n++] = tls_fx_path(&g_f, "client-key.pem");
    }
    for (int k = 0; args[k] && n < 39; k++)
        argv[n++] = args[k];
    argv[n] = NULL;
    const char *env[] = {"ETCDCTL_API=3", NULL};
    cr_assert_eq(kvt_run(argv, env, NULL, 0, timeout_ms, r), 0, "run etcdctl");
}

/* ctl_v with the arguments given inline (NULL-terminated). */
static void ctl_at(kvt_cmd_result *r, const char *url, int tls, uint32_t timeout_ms, ...)
{
    const char *args[31];
    int n = 0;
    va_list ap;
    va_start(ap, timeout_ms);
    const char *a;
    while ((a = va_arg(ap, const char *)) != NULL && n < 30)
        args[n++] = a;
    va_end(ap);
    args[n] = NULL;
    ctl_v(r, url, tls, timeout_ms, args);
}

#define CTL_OK(r, ...)                                                                             \
    do {                                                                                           \
        ctl_at(&(r), g_p.url, 1, 15000, __VA_ARGS__, NULL);                                        \
        cr_assert_eq((r).exit_code, 0, "etcdctl failed: %s %s", (r).out, (r).err);                 \
    } while (0)

static int file_has(const char *path, const char *needle)
{
    FILE *fp = fopen(path, "r");
    if (!fp)
        return 0;
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf - 1, fp);
    fclose(fp);
    buf[n] = 0;
    return strstr(buf, needle) != NULL;
}

Test(proxy_tls, etcdctl_through_the_tls_proxy, .init = setup, .fini = fini, .timeout = 120)
{
    kvt_cmd_result r;
    CTL_OK(r, "put", "k1", "v1");
    cr_assert(strstr(r.out, "OK"), "%s", r.out);
    kvt_cmd_result_free(&r);
    CTL_OK(r, "get", "k1");
    cr_assert_str_eq(r.out, "k1\nv1\n");
    kvt_cmd_result_free(&r);

    CTL_OK(r, "lease", "grant", "60");
    char id[32] = "";
    cr_assert_eq(sscanf(r.out, "lease %31s granted with TTL(60s)", id), 1, "%s", r.out);
    kvt_cmd_result_free(&r);
    CTL_OK(r, "lease", "keep-alive", "--once", id);
    char want[96];
    snprintf(want, sizeof want, "lease %s keepalived with TTL(60)", id);
    cr_assert(strstr(r.out, want), "%s", r.out);
    kvt_cmd_result_free(&r);

    CTL_OK(r, "lock", "l1", "/bin/echo", "held");
    cr_assert(strstr(r.out, "held"), "%s", r.out);
    kvt_cmd_result_free(&r);

    /* watch: puts through the proxy until the watcher (created at some point) reports one */
    kvt_proc w;
    char wlog[PATH_MAX], ep[96];
    snprintf(wlog, sizeof wlog, "%.4000s/watch.log", g_f.dir.path);
    snprintf(ep, sizeof ep, "--endpoints=%s", g_p.url);
    kvt_proc_init(&w, wlog);
    w.no_banner = 1;
    const char *ctl = getenv("KV_ETCDCTL_BIN");
    const char *wargv[] = {ctl && *ctl ? ctl : "/usr/bin/etcdctl",
                           ep,
                           "--cacert",
                           tls_fx_path(&g_f, "ca.pem"),
                           "--cert",
                           tls_fx_path(&g_f, "client.pem"),
                           "--key",
                           tls_fx_path(&g_f, "client-key.pem"),
                           "watch",
                           "wk",
                           NULL};
    const char *wenv[] = {"ETCDCTL_API=3", NULL};
    cr_assert_eq(kvt_proc_spawn_env(&w, wargv, wenv), 0);
    int seen = 0;
    uint64_t end = kvt_now_ms() + 10000;
    while (!seen && kvt_now_ms() < end) {
        CTL_OK(r, "put", "wk", "hello");
        kvt_cmd_result_free(&r);
        kvt_sleep_ms(300);
        seen = file_has(wlog, "PUT\nwk\nhello");
    }
    kvt_proc_kill9(&w);
    cr_assert(seen, "the watch through the TLS proxy saw no put (log %s)", wlog);
    cr_assert(kvt_proc_alive(&g_p.proc));
}

Test(proxy_tls, libkvclient_through_the_tls_proxy, .init = setup, .fini = fini, .timeout = 120)
{
    kvc_client *c = tls_client();
    kvc_error e = {0};
    cr_assert_eq(kvc_put(c, "a", 1, "1", 1, NULL, 5000, NULL, &e), 0, "%s", e.message);
    kvc_range_result rr;
    cr_assert_eq(kvc_get(c, "a", 1, NULL, 5000, &rr, &e), 0, "%s", e.message);
    cr_assert_eq(rr.n_kvs, 1);
    cr_assert(rr.kvs[0].value_len == 1 && memcmp(rr.kvs[0].value, "1", 1) == 0);
    kvc_range_result_free(&rr);
    kvc_lease_grant_result g;
    cr_assert_eq(kvc_lease_grant(c, 30, 0, 0, 5000, &g, &e), 0, "%s", e.message);
    kvc_lease_ttl_result tl;
    cr_assert_eq(kvc_lease_time_to_live(c, g.id, 0, 5000, &tl, &e), 0, "%s", e.message);
    cr_assert(tl.ttl > 0 && tl.ttl <= 30, "ttl %lld", (long long)tl.ttl);
    kvc_lease_ttl_result_free(&tl);
    kvc_close(c);

    /* The proxy's certificate is not of CA 2: the client refuses it, with the reason. */
    c = client(g_p.url, "ca2.pem", "client.pem", "client-key.pem");
    uint64_t t0 = kvt_now_ms();
    int rc = kvc_get(c, "a", 1, NULL, 5000, NULL, &e);
    uint64_t took = kvt_now_ms() - t0;
    kvc_close(c);
    cr_assert_neq(rc, 0, "a proxy certificate of another CA must be refused");
    cr_assert(strstr(e.message, "certificate verify failed"), "%s", e.message);
    cr_assert_lt(took, 4000, "took %llu ms: %s", (unsigned long long)took, e.message);

    /* --trusted-ca-file: the proxy requires a client certificate. */
    c = client(g_p.url, "ca.pem", NULL, NULL);
    t0 = kvt_now_ms();
    rc = kvc_get(c, "a", 1, NULL, 5000, NULL, &e);
    took = kvt_now_ms() - t0;
    kvc_close(c);
    cr_assert_neq(rc, 0, "the proxy must refuse a client without a certificate");
    cr_assert_lt(took, 4000, "took %llu ms: %s", (unsigned long long)took, e.message);
    /* ... and one signed by another CA */
    c = client(g_p.url, "ca.pem", "other.pem", "other-key.pem");
    rc = kvc_get(c, "a", 1, NULL, 5000, NULL, &e);
    kvc_close(c);
    cr_assert_neq(rc, 0, "the proxy must refuse a client certificate of another CA");
    cr_assert(kvt_proc_alive(&g_p.proc));
}

Test(proxy_tls, plaintext_client_fails_fast, .init = setup, .fini = fini, .timeout = 120)
{
    /* h2c (the HTTP/2 preface in clear): the proxy closes the connection at once */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(g_p.port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert(fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0);
    struct timeval tv = {.tv_sec = 5};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    uint64_t t0 = kvt_now_ms();
    cr_assert_eq(write(fd, preface, sizeof preface - 1), (ssize_t)(sizeof preface - 1));
    char buf[512];
    ssize_t got;
    while ((got = read(fd, buf, sizeof buf)) > 0) /* a TLS alert at most, then the end */
        ;
    uint64_t took = kvt_now_ms() - t0;
    int rerr = got < 0 ? errno : 0;
    close(fd);
    cr_assert(got == 0 || rerr == ECONNRESET, "read: %s", strerror(rerr));
    cr_assert_lt(took, 2000, "the proxy held a plaintext connection %llu ms",
                 (unsigned long long)took);

    /* etcdctl without TLS: its client retries the refused connection until the command's
     * deadline (3 s here), then fails; it does not hang */
    char plain[64];
    snprintf(plain, sizeof plain, "http://127.0.0.1:%u", g_p.port);
    kvt_cmd_result r;
    t0 = kvt_now_ms();
    ctl_at(&r, plain, 0, 15000, "--command-timeout=3s", "get", "k1", NULL);
    took = kvt_now_ms() - t0;
    cr_assert(!r.timed_out && r.exit_code != 0, "plaintext etcdctl: %d %s %s", r.exit_code, r.out,
              r.err);
    cr_assert_lt(took, 6000, "took %llu ms: %s", (unsigned long long)took, r.err);
    kvt_cmd_result_free(&r);

    /* libkvclient without TLS: UNAVAILABLE */
    kvc_client *c = client(plain, NULL, NULL, NULL);
    kvc_error e = {0};
    t0 = kvt_now_ms();
    int rc = kvc_get(c, "k1", 2, NULL, 5000, NULL, &e);
    took = kvt_now_ms() - t0;
    kvc_close(c);
    cr_assert_eq(rc, -KVC_UNAVAILABLE, "rc %d: %s", rc, e.message);
    cr_assert_lt(took, 4000, "took %llu ms: %s", (unsigned long long)took, e.message);

    /* the proxy keeps serving TLS clients */
    cr_assert(kvt_proc_alive(&g_p.proc));
    CTL_OK(r, "put", "k1", "after");
    kvt_cmd_result_free(&r);
}

/* Waits until the proxy's port accepts TCP connections (10 s) or the proxy exits. */
static int wait_listening(void)
{
    uint64_t end = kvt_now_ms() + 10000;
    while (kvt_now_ms() < end && kvt_proc_alive(&g_p.proc)) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(g_p.port)};
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        int ok = fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
        if (fd >= 0)
            close(fd);
        if (ok)
            return 0;
        kvt_sleep_ms(50);
    }
    return -ETIMEDOUT;
}

/* The member's certificate is of CA 1, the proxy's --cacert is CA 2: the proxy starts, fails
 * every call with UNAVAILABLE and the handshake's reason (within its --dial-timeout, 2 s),
 * logs that reason and keeps running. etcd's proxy: the same log reason ("x509: certificate
 * signed by unknown authority"); its calls wait for a connection until the client's deadline. */
Test(proxy_tls, wrong_upstream_ca, .fini = fini, .timeout = 120)
{
    start_member();
    spawn_proxy("ca2.pem", "proxy.pem");
    cr_assert_eq(wait_listening(), 0, "the proxy does not listen (log %s)", g_p.log);

    kvc_client *c = tls_client();
    kvc_error e = {0};
    uint64_t t0 = kvt_now_ms();
    int rc = kvc_put(c, "k", 1, "v", 1, NULL, is_etcd() ? 3000 : 8000, NULL, &e);
    uint64_t took = kvt_now_ms() - t0;
    kvc_close(c);
    cr_assert_neq(rc, 0, "a put through a proxy that cannot reach the member succeeded");
    if (!is_etcd()) {
        cr_assert_eq(rc, -KVC_UNAVAILABLE, "rc %d: %s", rc, e.message);
        cr_assert(strstr(e.message, "certificate verify failed"), "%s", e.message);
        cr_assert_lt(took, 6000, "took %llu ms: %s", (unsigned long long)took, e.message);
    }

    kvt_cmd_result r;
    ctl_at(&r, g_p.url, 1, 15000, "--command-timeout=4s", "put", "k", "v", NULL);
    cr_assert(!r.timed_out && r.exit_code != 0, "etcdctl: %d %s %s", r.exit_code, r.out, r.err);
    if (!is_etcd())
        cr_assert(strstr(r.err, "certificate verify failed"), "%s", r.err);
    kvt_cmd_result_free(&r);

    cr_assert(kvt_proc_alive(&g_p.proc), "the proxy exited (log %s)", g_p.log);
    const char *why = is_etcd() ? "certificate signed by unknown authority"
                                : "upstream unavailable: kvclient: no connection within 2000 "
                                  "ms; last error: ";
    cr_assert(file_has(g_p.log, why), "no reason in the log %s", g_p.log);
    if (!is_etcd())
        cr_assert(file_has(g_p.log, "certificate verify failed"), "log %s", g_p.log);
}

/* --insecure-skip-tls-verify: the same wrong CA, and the proxy serves (the member's
 * certificate is not verified; the proxy's client certificate is still sent). */
Test(proxy_tls, insecure_skip_tls_verify_upstream, .fini = fini, .timeout = 60)
{
    start_member();
    spawn_proxy_with("ca2.pem", "proxy.pem", "--insecure-skip-tls-verify");
    wait_proxy_serving();
    kvt_cmd_result r;
    CTL_OK(r, "put", "k", "insecure");
    kvt_cmd_result_free(&r);
    CTL_OK(r, "get", "k", "--print-value-only");
    cr_assert_str_eq(r.out, "insecure\n");
    kvt_cmd_result_free(&r);
}

/* etcd's proxy refuses an upstream certificate with a Common Name (a member with
 * --client-cert-auth would take the CN as the user of every proxied call): it exits at
 * start with "cert has non empty Common Name (<cn>)"; kvd's does the same. */
Test(proxy_tls, upstream_cert_with_a_common_name_refused, .fini = fini, .timeout = 60)
{
    cr_assert_eq(tls_fx_certs(&g_f, "kvd-pxtls"), 0, "certificates");
    snprintf(g_f.url, sizeof g_f.url, "https://127.0.0.1:1"); /* never dialed */
    spawn_proxy("ca.pem", "client.pem");                      /* CN "root" */
    cr_assert_eq(kvt_proc_wait(&g_p.proc, 10000), 0, "the proxy did not exit");
    cr_assert(WIFEXITED(g_p.proc.last_status) && WEXITSTATUS(g_p.proc.last_status) != 0,
              "status %d", g_p.proc.last_status);
    cr_assert(file_has(g_p.log, "cert has non empty Common Name (root)"), "log %s", g_p.log);
}

/* The last cap - 1 bytes of the file at path, for a failure message. */
static const char *log_tail(const char *path, char *buf, size_t cap)
{
    char *all = kvt_file_read(path);
    snprintf(buf, cap, "%s", all ? kvt_str_tail(all, cap - 1) : "(unreadable)");
    free(all);
    return buf;
}

/* curl -f on url (--cacert ca.pem when ca; ca 2: also --http1.1); its exit code (999 on
 * timeout), output in out. */
static int curl_metrics(const char *url, int ca, char *out, size_t cap)
{
    const char *args[] = {"-f", ca == 2 ? "--http1.1" : NULL, NULL};
    kvt_curl_req q = {.url = url,
                      .max_time_s = 5,
                      .cacert = ca ? tls_fx_path(&g_f, "ca.pem") : NULL,
                      .args = args};
    int code = kvt_curl(&q, out, cap);
    cr_assert_geq(code, 0, "run curl");
    return code;
}

/* An https:// --metrics-addr serves /metrics and /health over TLS with the listener's
 * certificate (etcd 3.4's grpc-proxy); plain HTTP to that port gets no metrics. The TLS
 * listener answers /health too. */
Test(proxy_tls, https_metrics_addr_serves_tls, .fini = fini, .timeout = 120)
{
    start_member();
    char bin[PATH_MAX], eps[96], laddr[64], maddr[64], url[96];
    cr_assert_eq(kvt_port_free(&g_p.port), 0);
    cr_assert_eq(kvt_port_free(&g_p.metrics_port), 0);
    snprintf(eps, sizeof eps, "--endpoints=%s", g_f.url);
    snprintf(laddr, sizeof laddr, "--listen-addr=127.0.0.1:%u", g_p.port);
    snprintf(maddr, sizeof maddr, "--metrics-addr=https://127.0.0.1:%u", g_p.metrics_port);
    snprintf(g_p.log, sizeof g_p.log, "%.4000s/proxy-m%u.log", g_f.dir.path, g_p.port);
    const char *argv[] = {server_bin(bin, sizeof bin),
                          "grpc-proxy",
                          "start",
                          eps,
                          laddr,
                          maddr,
                          "--cacert",
                          tls_fx_path(&g_f, "ca.pem"),
                          "--cert",
                          tls_fx_path(&g_f, "proxy.pem"),
                          "--key",
                          tls_fx_path(&g_f, "proxy-key.pem"),
                          "--cert-file",
                          tls_fx_path(&g_f, "server.pem"),
                          "--key-file",
                          tls_fx_path(&g_f, "server-key.pem"),
                          NULL};
    kvt_proc_init(&g_p.proc, g_p.log);
    cr_assert_eq(kvt_proc_spawn(&g_p.proc, argv), 0, "spawn the proxy");
    static char out[1 << 16];
    snprintf(url, sizeof url, "https://127.0.0.1:%u/metrics", g_p.metrics_port);
    int code = -1;
    for (int i = 0; i < 100 && (code = curl_metrics(url, 1, out, sizeof out)) != 0 &&
                    kvt_proc_alive(&g_p.proc);
         i++)
        usleep(200 * 1000);
    char tail[1024];
    cr_assert_eq(code, 0, "https /metrics: %s (the proxy %s; log %s ends: %s)", out,
                 kvt_proc_alive(&g_p.proc) ? "runs" : "exited", g_p.log,
                 log_tail(g_p.log, tail, sizeof tail));
    cr_assert(strstr(out, "# TYPE "), "no metrics over TLS: %.300s", out);
    snprintf(url, sizeof url, "https://127.0.0.1:%u/health", g_p.metrics_port);
    cr_assert_eq(curl_metrics(url, 1, out, sizeof out), 0, "https /health: %s", out);
    cr_assert(strstr(out, "\"health\":\"true\""), "%s", out);
    snprintf(url, sizeof url, "http://127.0.0.1:%u/metrics", g_p.metrics_port);
    cr_assert_neq(curl_metrics(url, 0, out, sizeof out), 0, "plain HTTP on the TLS port");
    cr_assert(!strstr(out, "# TYPE"), "plain HTTP got metrics: %.300s", out);
    snprintf(url, sizeof url, "https://127.0.0.1:%u/metrics", g_p.metrics_port);
    cr_assert_neq(curl_metrics(url, 0, out, sizeof out), 0, "no CA, yet the certificate passed");
    cr_assert_eq(curl_metrics(url, 1, out, sizeof out), 0, "after the failures: %s", out);
    /* the listener answers /health over TLS beside gRPC, as etcd's proxy (its cmux), over
     * HTTP/1.1; kvd's also over HTTP/2 (etcd's answers that PROTOCOL_ERROR) */
    snprintf(url, sizeof url, "https://127.0.0.1:%u/health", g_p.port);
    for (int ca = kvt_target_from_env() == KV_TEST_SERVER_KVD ? 1 : 2; ca <= 2; ca++) {
        cr_assert_eq(curl_metrics(url, ca, out, sizeof out), 0, "listener /health: %s", out);
        cr_assert(strstr(out, "\"health\":\"true\""), "%s", out);
    }
}

/* Runs etcdctl through the proxy with the given TLS flags (NULL-terminated, at most 6) and
 * `put k v`, giving up after timeout_s; its exit code (-1 if it did not finish). A refusal
 * makes etcdctl retry until its timeout, hence a short one where one is expected. */
static int put_with(const char *k, const char *const *tls, int timeout_s)
{
    char ct[40];
    snprintf(ct, sizeof ct, "--command-timeout=%ds", timeout_s);
    const char *args[12] = {ct};
    int n = 1;
    for (int i = 0; i < 6 && tls[i]; i++)
        args[n++] = tls[i];
    args[n++] = "put";
    args[n++] = k;
    args[n++] = "v";
    args[n] = NULL;
    kvt_cmd_result r;
    ctl_v(&r, g_p.url, 0, (uint32_t)timeout_s * 1000 + 5000, args);
    int code = r.timed_out ? -1 : r.exit_code;
    kvt_cmd_result_free(&r);
    return code;
}

/* Polls (10 s) until put_with succeeds. */
static void wait_put_with(const char *const *tls)
{
    uint64_t end = kvt_now_ms() + 10000;
    int code = -1;
    while (kvt_now_ms() < end && kvt_proc_alive(&g_p.proc) && (code = put_with("w", tls, 3)) != 0)
        kvt_sleep_ms(200);
    cr_assert_eq(code, 0, "etcdctl through the proxy failed (log %s)", g_p.log);
}

static size_t read_file(const char *path, char *buf, size_t cap)
{
    FILE *fp = fopen(path, "r");
    cr_assert(fp, "%s: %s", path, strerror(errno));
    size_t n = fread(buf, 1, cap, fp);
    fclose(fp);
    return n;
}

/* --auto-tls (etcd's): without --cert-file the proxy serves TLS with a self-signed
 * certificate it writes to <data-dir>/fixtures/proxy (cert.pem, and key.pem mode 0600) and
 * reuses on restart; a client that verifies against a CA refuses it, one that skips
 * verification is served. */
Test(proxy_tls, auto_tls_self_signed_and_reused, .fini = fini, .timeout = 120)
{
    start_member();
    char dd[PATH_MAX], ddflag[PATH_MAX + 16], path[PATH_MAX + 32];
    snprintf(dd, sizeof dd, "%.4000s/pxdata", g_f.dir.path);
    snprintf(ddflag, sizeof ddflag, "--data-dir=%s", dd);
    const char *listen[] = {"--auto-tls", ddflag, NULL};
    const char *skip[] = {"--insecure-transport=false", "--insecure-skip-tls-verify", NULL};
    static char first[8192], again[8192];
    size_t n1 = 0;
    for (int run = 0; run < 2; run++) {
        spawn_proxy_listen("ca.pem", "proxy.pem", listen);
        wait_put_with(skip);
        const char *verify[] = {"--cacert", tls_fx_path(&g_f, "ca.pem"),
                                "--cert",   tls_fx_path(&g_f, "client.pem"),
                                "--key",    tls_fx_path(&g_f, "client-key.pem"),
                                NULL};
        cr_assert_neq(put_with("v", verify, 2), 0, "a self-signed certificate passed CA 1's check");
        struct stat st; /* the key is private (etcd writes cert.pem 0644, kvd 0600) */
        snprintf(path, sizeof path, "%s/fixtures/proxy/key.pem", dd);
        cr_assert_eq(stat(path, &st), 0, "%s: %s", path, strerror(errno));
        cr_assert_eq(st.st_mode & 0777, 0600, "%s mode %o", path, st.st_mode & 0777);
        snprintf(path, sizeof path, "%s/fixtures/proxy/cert.pem", dd);
        if (run == 0) {
            n1 = read_file(path, first, sizeof first);
            cr_assert(n1 > 100 && strstr(first, "BEGIN CERTIFICATE"), "%s", path);
        } else {
            size_t n2 = read_file(path, again, sizeof again);
            cr_assert(n2 == n1 && memcmp(first, again, n1) == 0,
                      "the certificate was made again on restart, not reused");
        }
        kvt_proc_kill9(&g_p.proc);
    }
}

/* --listen-cipher-suites (etcd's): the client side negotiates only the listed TLS 1.2
 * suites; an unknown name is refused at start with etcd's message. */
Test(proxy_tls, listen_cipher_suites_limit_tls12, .fini = fini, .timeout = 120)
{
    start_member();
    const char *listen[] = {"--cert-file",
                            "@server.pem",
                            "--key-file",
                            "@server-key.pem",
                            "--listen-cipher-suites=TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
                            NULL};
    spawn_proxy_listen("ca.pem", "proxy.pem", listen);
    const char *skip[] = {"--insecure-transport=false", "--insecure-skip-tls-verify", NULL};
    wait_put_with(skip);
    cr_assert(tls_fx_handshake_with(g_p.port, "ECDHE-ECDSA-AES128-GCM-SHA256"),
              "the listed suite failed");
    cr_assert(!tls_fx_handshake_with(g_p.port, "ECDHE-ECDSA-AES256-GCM-SHA384"),
              "a suite --listen-cipher-suites does not list was negotiated");
    kvt_proc_kill9(&g_p.proc);
    /* Control: without the flag the same suite is accepted. */
    const char *plain[] = {"--cert-file", "@server.pem", "--key-file", "@server-key.pem", NULL};
    spawn_proxy_listen("ca.pem", "proxy.pem", plain);
    wait_put_with(skip);
    cr_assert(tls_fx_handshake_with(g_p.port, "ECDHE-ECDSA-AES256-GCM-SHA384"),
              "control: the default");
    kvt_proc_kill9(&g_p.proc);
    const char *bogus[] = {"--cert-file",
                           "@server.pem",
                           "--key-file",
                           "@server-key.pem",
                           "--listen-cipher-suites=TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,"
                           "TLS_BOGUS",
                           NULL};
    spawn_proxy_listen("ca.pem", "proxy.pem", bogus);
    cr_assert_eq(kvt_proc_wait(&g_p.proc, 10000), 0, "the proxy did not exit");
    cr_assert(WIFEXITED(g_p.proc.last_status) && WEXITSTATUS(g_p.proc.last_status) != 0,
              "status %d", g_p.proc.last_status);
    cr_assert(file_has(g_p.log, "unexpected TLS cipher suite \"TLS_BOGUS\""), "log %s", g_p.log);
}

/* --client-crl-file (etcd's): with client certificates required, one the CRL lists is
 * refused and another of the same CA is served. */
Test(proxy_tls, client_crl_file_refuses_revoked_certificate, .fini = fini, .timeout = 120)
{
    start_member();
    const char *listen[] = {"--cert-file",       "@server.pem",       "--key-file",
                            "@server-key.pem",   "--trusted-ca-file", "@ca.pem",
                            "--client-crl-file", "@crl.pem",          NULL};
    spawn_proxy_listen("ca.pem", "proxy.pem", listen);
    const char *good[] = {
        "--cacert", tls_fx_path(&g_f, "ca.pem"),         "--cert", tls_fx_path(&g_f, "client.pem"),
        "--key",    tls_fx_path(&g_f, "client-key.pem"), NULL};
    wait_put_with(good);
    const char *revoked[] = {"--cacert", tls_fx_path(&g_f, "ca.pem"),
                             "--cert",   tls_fx_path(&g_f, "revoked.pem"),
                             "--key",    tls_fx_path(&g_f, "revoked-key.pem"),
                             NULL};
    cr_assert_neq(put_with("r", revoked, 2), 0, "a revoked client certificate was served");
    cr_assert_eq(put_with("g", good, 8), 0, "a certificate the CRL does not list failed");
}

/* Without TLS on the client side, --listen-cipher-suites is refused with a reason (etcd
 * 3.4's proxy dereferences a nil TLS config there and panics). */
Test(proxy_tls, listen_cipher_suites_without_tls_refused, .timeout = 30)
{
    char bin[PATH_MAX];
    const char *argv[] = {is_etcd() ? server_bin(bin, sizeof bin) : tls_fx_kvd_bin(bin, sizeof bin),
                          "grpc-proxy",
                          "start",
                          "--endpoints=127.0.0.1:1",
                          "--listen-addr=127.0.0.1:0",
                          "--listen-cipher-suites=TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
                          NULL};
    kvt_cmd_result r;
    cr_assert_eq(kvt_run(argv, NULL, NULL, 0, 10000, &r), 0);
    cr_assert(!r.timed_out && r.exit_code != 0, "exit %d", r.exit_code);
    if (!is_etcd())
        cr_assert(
            strstr(r.err, "--listen-cipher-suites needs --cert-file/--key-file or --auto-tls"),
            "%s", r.err);
    kvt_cmd_result_free(&r);
}

/* An https:// --metrics-addr without listener TLS (no --cert-file/--key-file, no --auto-tls)
 * is refused at start, in etcd's words, instead of serving plain HTTP. */
Test(proxy_tls, https_metrics_addr_without_listener_tls_refused, .fini = fini, .timeout = 120)
{
    start_member();
    char bin[PATH_MAX], eps[96], laddr[64], maddr[64], want[128];
    cr_assert_eq(kvt_port_free(&g_p.port), 0);
    cr_assert_eq(kvt_port_free(&g_p.metrics_port), 0);
    snprintf(eps, sizeof eps, "--endpoints=%s", g_f.url);
    snprintf(laddr, sizeof laddr, "--listen-addr=127.0.0.1:%u", g_p.port);
    snprintf(maddr, sizeof maddr, "--metrics-addr=https://127.0.0.1:%u", g_p.metrics_port);
    const char *argv[] = {server_bin(bin, sizeof bin),
                          "grpc-proxy",
                          "start",
                          eps,
                          laddr,
                          maddr,
                          "--cacert",
                          tls_fx_path(&g_f, "ca.pem"),
                          "--cert",
                          tls_fx_path(&g_f, "proxy.pem"),
                          "--key",
                          tls_fx_path(&g_f, "proxy-key.pem"),
                          NULL};
    kvt_cmd_result r;
    cr_assert_eq(kvt_run(argv, NULL, NULL, 0, 30000, &r), 0);
    cr_assert(!r.timed_out && r.exit_code != 0, "exit %d: %s", r.exit_code, r.err);
    snprintf(want, sizeof want,
             "cannot listen on TLS for 127.0.0.1:%u: KeyFile and CertFile are not presented",
             g_p.metrics_port);
    cr_assert(strstr(r.err, want), "%s", r.err);
    kvt_cmd_result_free(&r);
}
