/*
 * test_client_badinput.c - bad endpoints and misbehaving servers give clear errors and leak
 * nothing (fd and thread counts return to the baseline; ASan/LSan in the sanitizer build).
 */
#include "testutil.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

TestSuite(client_badinput, .init = kvt_warmup, .timeout = 60);

static void expect_open_fails(const char *ep, const char *needle)
{
    const char *eps[] = {ep};
    kvc_config cfg;
    kvc_config_default(&cfg);
    cfg.endpoints = eps;
    cfg.n_endpoints = 1;
    kvc_client *c = (kvc_client *)1;
    kvc_error e;
    memset(&e, 0, sizeof e);
    int rc = kvc_open(&c, &cfg, &e);
    cr_assert_eq(rc, -KVC_INVALID_ARGUMENT, "'%s' accepted", ep);
    cr_assert_eq(e.code, KVC_INVALID_ARGUMENT);
    cr_assert_null(c);
    cr_assert(strstr(e.message, needle) != NULL, "'%s': message '%s' lacks '%s'", ep, e.message,
              needle);
}

Test(client_badinput, bad_endpoint_strings)
{
    int fds = kvt_count_fds(), threads = kvt_count_threads();
    expect_open_fails("", "empty endpoint");
    expect_open_fails("127.0.0.1", "expected host:port");
    expect_open_fails("127.0.0.1:", "bad port");
    expect_open_fails("127.0.0.1:99999", "port out of range");
    expect_open_fails("127.0.0.1:12ab", "bad port");
    expect_open_fails(":2379", "missing host");
    expect_open_fails("ftp://127.0.0.1:2379", "only http:// and https://");
    expect_open_fails("unix:///tmp/sock", "only http://");
    expect_open_fails("[::1", "expected [ipv6]:port");
    expect_open_fails("no-such-host.invalid:2379", "cannot resolve");
    expect_open_fails("bad host:2379", "invalid host");

    kvc_config cfg;
    kvc_config_default(&cfg);
    kvc_client *c;
    kvc_error e;
    cr_assert_eq(kvc_open(&c, &cfg, &e), -KVC_INVALID_ARGUMENT);
    cr_assert_str_eq(e.message, "kvclient: no endpoints configured");
    cr_assert_eq(kvt_count_fds(), fds);
    cr_assert_eq(kvt_threads_settle(threads, 2000), threads);

    /* Good forms are accepted. */
    const char *good[] = {"http://127.0.0.1:1", "localhost:1", "[::1]:1", "127.0.0.1:1/"};
    cfg.endpoints = good;
    cfg.n_endpoints = 4;
    cr_assert_eq(kvc_open(&c, &cfg, &e), 0, "%s", e.message);
    kvc_close(c);
    cr_assert_eq(kvt_count_fds(), fds);
    cr_assert_eq(kvt_threads_settle(threads, 2000), threads);
    cr_assert_eq(kvt_leaks(), 0, "LeakSanitizer found leaks");
}

/* Run one call against a fake server; return the error. */
static int call_fake(int mode, kvc_error *e, int *accepted)
{
    int port;
    struct kvt_fake *f = kvt_fake_start(mode, &port);
    char ep[32];
    snprintf(ep, sizeof ep, "127.0.0.1:%d", port);
    const char *eps[] = {ep};
    kvc_config cfg;
    kvc_config_default(&cfg);
    cfg.endpoints = eps;
    cfg.n_endpoints = 1;
    cfg.dial_timeout_ms = 1500;
    kvc_client *c;
    cr_assert_eq(kvc_open(&c, &cfg, e), 0);
    uint8_t *resp = NULL;
    size_t len = 0;
    uint64_t t0 = kvt_now_ms();
    int rc =
        kvc_call_unary(c, "/etcdserverpb.KV/Range", NULL, 0, &resp, &len, 5000, KVC_IDEMPOTENT, e);
    uint64_t dt = kvt_now_ms() - t0;
    cr_assert_null(resp);
    cr_assert_lt(dt, 3000, "the dial timeout bounds the wait (took %llu ms)",
                 (unsigned long long)dt);
    kvc_close(c);
    *accepted = kvt_fake_accepted(f);
    kvt_fake_stop(f);
    return rc;
}

Test(client_badinput, server_accepts_and_closes)
{
    int fds = kvt_count_fds(), threads = kvt_count_threads();
    kvc_error e;
    int accepted;
    int rc = call_fake(KVT_FAKE_CLOSE, &e, &accepted);
    cr_assert_eq(rc, -KVC_UNAVAILABLE, "rc %d: %s", rc, e.message);
    cr_assert(strstr(e.message, "before the HTTP/2 handshake"), "message: %s", e.message);
    cr_assert_geq(accepted, 2, "it keeps retrying with backoff within the dial timeout");
    cr_assert_lt(accepted, 40, "backoff bounds the reconnect rate (%d connects)", accepted);
    cr_assert_eq(kvt_count_fds(), fds);
    cr_assert_eq(kvt_threads_settle(threads, 2000), threads);
    cr_assert_eq(kvt_leaks(), 0, "LeakSanitizer found leaks");
}

Test(client_badinput, server_speaks_http1)
{
    int fds = kvt_count_fds(), threads = kvt_count_threads();
    kvc_error e;
    int accepted;
    int rc = call_fake(KVT_FAKE_HTTP1, &e, &accepted);
    cr_assert_eq(rc, -KVC_UNAVAILABLE, "rc %d: %s", rc, e.message);
    cr_assert(strstr(e.message, "server speaks HTTP/1.x, not HTTP/2"), "message: %s", e.message);
    cr_assert(strstr(e.message, "HTTP/1.1 400 Bad Request"), "message: %s", e.message);
    cr_assert_eq(kvt_count_fds(), fds);
    cr_assert_eq(kvt_threads_settle(threads, 2000), threads);
    cr_assert_eq(kvt_leaks(), 0, "LeakSanitizer found leaks");
}

Test(client_badinput, nothing_listening)
{
    int fds = kvt_count_fds();
    int port = kvt_free_port();
    char ep[32];
    snprintf(ep, sizeof ep, "127.0.0.1:%d", port);
    kvc_client *c = kvt_client(ep);
    kvc_error e;
    int rc = kvc_put(c, "k", 1, "v", 1, NULL, 1000, NULL, &e);
    cr_assert_eq(rc, -KVC_DEADLINE_EXCEEDED, "rc %d: %s", rc, e.message);
    cr_assert(strstr(e.message, "connection refused"), "message: %s", e.message);
    kvc_close(c);
    cr_assert_eq(kvt_count_fds(), fds);
    cr_assert_eq(kvt_leaks(), 0, "LeakSanitizer found leaks");
}

Test(client_badinput, silent_server_hits_deadline)
{
    int port;
    struct kvt_fake *f = kvt_fake_start(KVT_FAKE_SILENT, &port);
    char ep[32];
    snprintf(ep, sizeof ep, "127.0.0.1:%d", port);
    kvc_client *c = kvt_client(ep);
    kvc_error e;
    uint64_t t0 = kvt_now_ms();
    int rc = kvc_put(c, "k", 1, "v", 1, NULL, 500, NULL, &e);
    uint64_t dt = kvt_now_ms() - t0;
    cr_assert_eq(rc, -KVC_DEADLINE_EXCEEDED, "rc %d: %s", rc, e.message);
    cr_assert_geq(dt, 450);
    cr_assert_lt(dt, 1500);
    kvc_close(c);
    kvt_fake_stop(f);
}

/* 1 if thread tid of this process has SIGPIPE blocked (/proc/self/task/<tid>/status SigBlk). */
static int thread_blocks_sigpipe(const char *tid)
{
    char path[300], line[256];
    snprintf(path, sizeof path, "/proc/self/task/%s/status", tid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    int r = -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "SigBlk:", 7) == 0) {
            unsigned long long m = strtoull(line + 7, NULL, 16);
            r = (m >> (SIGPIPE - 1)) & 1;
        }
    fclose(f);
    return r;
}

/* A server that vanishes while the client writes (kill -9 mid-request, a reset connection)
 * must give an error on that connection, never SIGPIPE: its default action kills the whole
 * agent, and libuv does not suppress it. libkvclient's I/O threads start with SIGPIPE blocked
 * whatever the application's disposition (here the default). Without that, cluster_lease's
 * leader kill crashed its test process about once in 15 runs. */
Test(client_badinput, io_thread_blocks_sigpipe)
{
    signal(SIGPIPE, SIG_DFL);
    char before[256][NAME_MAX + 1];
    int nb = 0;
    DIR *d = opendir("/proc/self/task");
    cr_assert_not_null(d);
    struct dirent *de;
    while ((de = readdir(d)) && nb < 256)
        if (de->d_name[0] != '.')
            snprintf(before[nb++], sizeof before[0], "%s", de->d_name);
    closedir(d);
    kvc_client *c = kvt_client("127.0.0.1:1");
    int found = 0;
    d = opendir("/proc/self/task");
    cr_assert_not_null(d);
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        int old = 0;
        for (int i = 0; i < nb; i++)
            old |= strcmp(before[i], de->d_name) == 0;
        if (old)
            continue;
        found++;
        cr_expect_eq(thread_blocks_sigpipe(de->d_name), 1,
                     "libkvclient thread %s does not block SIGPIPE", de->d_name);
    }
    closedir(d);
    cr_assert_geq(found, 1, "no I/O thread appeared");
    sigset_t cur;
    pthread_sigmask(SIG_BLOCK, NULL, &cur);
    cr_assert(!sigismember(&cur, SIGPIPE), "the application's own thread mask is left alone");
    kvc_close(c);
}
