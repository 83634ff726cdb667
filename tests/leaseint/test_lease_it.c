/*
 * it_lease: lease behaviour observed over the wire against real server processes
 * (the tests that need a running server). Unary calls use grpc_raw,
 * keepalive streams use ka_stream, CLI checks use etcdctl 3.4.
 *
 * Server under test: KV_TEST_SERVER=kvd (default) or etcd. Tests that check kvd-only
 * behaviour (checkpoint flag, kvd metrics, exact expiry slack of kvd's timer) are skipped
 * against etcd, with a message.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <regex.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grpc_raw.h"
#include "harness.h"
#include "ka_stream.h"
#include "leaseint_util.h"

#define START_TIMEOUT_MS 20000u
#define CTL_TIMEOUT_MS 15000u

typedef struct fx {
    kv_it_server srv;
    kv_it_grpc *g;
} fx;

static fx *f;

static void start_server(const char *const *extra)
{
    f = calloc(1, sizeof(*f));
    cr_assert(f);
    kv_it_kind kind = kv_it_kind_from_env();
    int rc = kv_it_server_init(&f->srv, kind, extra);
    cr_assert_eq(rc, 0, "init %s (%s): %d", kv_it_kind_name(kind), f->srv.bin, rc);
    rc = kv_it_server_start(&f->srv, START_TIMEOUT_MS);
    cr_assert_eq(rc, 0, "start %s: %d", kv_it_kind_name(kind), rc);
    rc = kvli_connect(&f->srv, &f->g);
    cr_assert_eq(rc, 0, "connect: %d", rc);
}

static void reconnect(void)
{
    kv_it_grpc_close(f->g);
    f->g = NULL;
    int rc = kvli_connect(&f->srv, &f->g);
    cr_assert_eq(rc, 0, "connect: %d", rc);
}

static void teardown(void)
{
    if (!f)
        return;
    kv_it_grpc_close(f->g);
    kv_it_server_destroy(&f->srv);
    free(f);
    f = NULL;
}

static int is_etcd(void)
{
    return kv_it_kind_from_env() == KV_IT_ETCD;
}

static int64_t grant(int64_t ttl)
{
    int64_t id = 0, got = 0;
    char msg[256];
    int rc = kvli_grant(f->g, ttl, 0, &id, &got, msg, sizeof(msg));
    cr_assert_eq(rc, 0, "grant ttl %" PRId64 ": %d %s", ttl, rc, msg);
    cr_assert_neq(id, 0);
    return id;
}

static void put(const char *k, int64_t lease)
{
    char msg[256];
    int rc = kvli_put(f->g, k, "v", lease, msg, sizeof(msg));
    cr_assert_eq(rc, 0, "put %s lease %" PRIx64 ": %d %s", k, lease, rc, msg);
}

static int64_t count(const char *k, int prefix)
{
    int64_t n = -1;
    char msg[256];
    int rc = kvli_count(f->g, k, prefix, &n, msg, sizeof(msg));
    cr_assert_eq(rc, 0, "count %s: %d %s", k, rc, msg);
    return n;
}

static int64_t ttl_of(int64_t id, int64_t *granted, size_t *n_keys)
{
    int64_t t = 0;
    char msg[256];
    int rc = kvli_ttl(f->g, id, n_keys != NULL, &t, granted, n_keys, msg, sizeof(msg));
    cr_assert_eq(rc, 0, "timetolive %" PRIx64 ": %d %s", id, rc, msg);
    return t;
}

static double metric(const char *series)
{
    double v = -1;
    int rc = kvli_metric(&f->srv, series, &v);
    cr_assert_eq(rc, 0, "metric %s: %d", series, rc);
    return v;
}

/* 1. A key on a 2 s lease is gone within TTL + 1 s after the last renewal, and not
 * before the TTL has run out. */
Test(lease, key_gone_within_ttl_plus_1s_after_last_renewal, .fini = teardown, .timeout = 60)
{
    start_server(NULL);
    int64_t id = grant(2);
    put("exp/key", id);
    kvli_ka *ka = NULL;
    int rc = kvli_ka_open(&ka, f->srv.client_port, 5000);
    cr_assert_eq(rc, 0, "keepalive open: %d", rc);
    uint64_t t_send = 0, t_resp = 0;
    for (int i = 0; i < 3; i++) { /* a few renewals, then stop */
        if (i)
            kvli_sleep_ms(600);
        t_send = kv_it_now_ms();
        cr_assert_eq(kvli_ka_send(ka, id, 5000), 0);
        int64_t rid = 0, rttl = 0;
        rc = kvli_ka_recv(ka, &rid, &rttl, 5000);
        t_resp = kv_it_now_ms();
        cr_assert_eq(rc, 0, "keepalive recv: %d", rc);
        cr_assert_eq(rid, id);
        cr_assert_eq(rttl, 2, "renewal TTL %" PRId64, rttl);
    }
    kvli_ka_close(ka);
    /* Poll every 20 ms until the key is gone. */
    uint64_t t_gone = 0;
    while (kv_it_now_ms() < t_resp + 6000) {
        if (count("exp/key", 0) == 0) {
            t_gone = kv_it_now_ms();
            break;
        }
        kvli_sleep_ms(20);
    }
    cr_assert_neq(t_gone, 0, "key still present 6 s after the last renewal");
    cr_log_info("key gone %" PRIu64 " ms after the last renewal was sent", t_gone - t_send);
    /* The server renewed at or after t_send, so the key must live at least 2 s from it. */
    cr_expect_geq(t_gone - t_send, 1950, "key gone too early: %" PRIu64 " ms after last renewal",
                  t_gone - t_send);
    /* TTL + 1 s after the renewal was answered, plus 300 ms of scheduling slack. */
    cr_expect_leq(t_gone - t_resp, 3300, "key gone too late: %" PRIu64 " ms after last renewal",
                  t_gone - t_resp);
    int64_t t = ttl_of(id, NULL, NULL);
    cr_expect_eq(t, -1, "expired lease still known, TTL %" PRId64, t);
    if (!is_etcd())
        cr_expect_geq(metric("kvd_lease_expired_total"), 1.0);
}

/* 2. A lease renewed every TTL/3 over one LeaseKeepAlive stream lives through 10x its TTL
 * (TTL 2 s, 20 s) and its key stays. */
Test(lease, keepalive_stream_keeps_lease_for_10x_ttl, .fini = teardown, .timeout = 90)
{
    start_server(NULL);
    int64_t id = grant(2);
    put("ka/key", id);
    kvli_ka *ka = NULL;
    int rc = kvli_ka_open(&ka, f->srv.client_port, 5000);
    cr_assert_eq(rc, 0, "keepalive open: %d", rc);
    uint64_t start = kv_it_now_ms();
    int renewals = 0;
    while (kv_it_now_ms() - start < 20000) {
        cr_assert_eq(kvli_ka_send(ka, id, 5000), 0);
        int64_t rid = 0, rttl = 0;
        rc = kvli_ka_recv(ka, &rid, &rttl, 5000);
        cr_assert_eq(rc, 0, "keepalive recv after %d renewals: %d", renewals, rc);
        cr_assert_eq(rid, id);
        cr_assert_eq(rttl, 2, "renewal %d: TTL %" PRId64 " (lease lost?)", renewals, rttl);
        renewals++;
        cr_assert_eq(count("ka/key", 0), 1, "key vanished after %d renewals", renewals);
        kvli_sleep_ms(667);
    }
    kvli_ka_close(ka);
    cr_assert_geq(renewals, 25);
    cr_assert_eq(count("ka/key", 0), 1);
    int64_t t = ttl_of(id, NULL, NULL);
    cr_assert(t >= 1 && t <= 2, "TTL after 20 s of renewals: %" PRId64, t);
}

/* 3. Revoke deletes all attached keys atomically: concurrent readers counting the prefix
 * see 200 or 0, never anything in between. */
typedef struct reader {
    pthread_t th;
    uint16_t port;
    atomic_int *stop;
    atomic_long saw_full; /* polled by the main thread */
    long reads, saw_empty, saw_other, errors;
    int64_t other_value;
} reader;

static void *reader_main(void *arg)
{
    reader *r = arg;
    kv_it_grpc *g = NULL;
    if (kv_it_grpc_open(&g, "127.0.0.1", r->port, 5000)) {
        r->errors++;
        return NULL;
    }
    while (!atomic_load(r->stop)) {
        int64_t n = -1;
        if (kvli_count(g, "atomic/", 1, &n, NULL, 0)) {
            r->errors++;
            break;
        }
        r->reads++;
        if (n == 200)
            r->saw_full++;
        else if (n == 0)
            r->saw_empty++;
        else {
            r->saw_other++;
            r->other_value = n;
        }
    }
    kv_it_grpc_close(g);
    return NULL;
}

Test(lease, revoke_deletes_attached_keys_atomically, .fini = teardown, .timeout = 120)
{
    start_server(NULL);
    int64_t id = grant(600);
    char key[64];
    for (int i = 0; i < 200; i++) {
        snprintf(key, sizeof(key), "atomic/%03d", i);
        put(key, id);
    }
    cr_assert_eq(count("atomic/", 1), 200);
    atomic_int stop = 0;
    enum { NR = 4 };
    reader rd[NR];
    memset(rd, 0, sizeof(rd));
    for (int i = 0; i < NR; i++) {
        rd[i].port = f->srv.client_port;
        rd[i].stop = &stop;
        cr_assert_eq(pthread_create(&rd[i].th, NULL, reader_main, &rd[i]), 0);
    }
    /* Let every reader see the full set a few times, then revoke. */
    uint64_t deadline = kv_it_now_ms() + 10000;
    for (;;) {
        int ready = 1;
        for (int i = 0; i < NR; i++)
            ready &= atomic_load(&rd[i].saw_full) >= 20;
        if (ready || kv_it_now_ms() > deadline)
            break;
        kvli_sleep_ms(5);
    }
    char msg[256];
    int rc = kvli_revoke(f->g, id, msg, sizeof(msg));
    kvli_sleep_ms(300);
    atomic_store(&stop, 1);
    long full = 0, empty = 0, other = 0, errors = 0, reads = 0;
    for (int i = 0; i < NR; i++) {
        pthread_join(rd[i].th, NULL);
        full += atomic_load(&rd[i].saw_full);
        empty += rd[i].saw_empty;
        other += rd[i].saw_other;
        errors += rd[i].errors;
        reads += rd[i].reads;
        if (rd[i].saw_other)
            cr_log_error("reader %d saw count %" PRId64, i, rd[i].other_value);
    }
    cr_log_info("reads %ld: 200 x%ld, 0 x%ld, other x%ld", reads, full, empty, other);
    cr_assert_eq(rc, 0, "revoke: %d %s", rc, msg);
    cr_assert_eq(errors, 0, "reader errors");
    cr_assert_eq(other, 0, "%ld reads saw a partially revoked lease", other);
    cr_assert_gt(full, 0);
    cr_assert_gt(empty, 0);
    cr_assert_eq(count("atomic/", 1), 0);
    cr_assert_eq(ttl_of(id, NULL, NULL), -1);
}

/* 4. After kill -9 and restart, a lease resumes from its checkpointed remaining TTL, not
 * from a fresh TTL. TTL 30, checkpoint every 1 s, ~4.5 s elapsed: a fresh TTL would give
 * 30 + 1 (election timeout extension); the checkpoint gives <= 27 + 1. */
Test(lease, restart_resumes_from_checkpointed_ttl, .fini = teardown, .timeout = 120)
{
    if (is_etcd())
        cr_skip_test("kvd-only: --lease-checkpoint-interval is a kvd flag");
    static const char *const args[] = {"--lease-checkpoint-interval=1s", NULL};
    start_server(args);
    int64_t id = grant(30);
    put("cp/key", id);
    kvli_sleep_ms(4500);
    int64_t granted = 0;
    int64_t before = ttl_of(id, &granted, NULL);
    cr_assert(before >= 24 && before <= 26, "TTL before kill: %" PRId64, before);
    double cps = metric("kvd_lease_checkpoints_total");
    cr_assert_geq(cps, 1.0, "no checkpoint in 4.5 s with --lease-checkpoint-interval=1s");
    cr_assert_eq(kv_it_server_kill9(&f->srv), 0);
    kv_it_grpc_close(f->g);
    f->g = NULL;
    int rc = kv_it_server_start(&f->srv, START_TIMEOUT_MS);
    cr_assert_eq(rc, 0, "restart: %d", rc);
    reconnect();
    int64_t after = ttl_of(id, &granted, NULL);
    cr_log_info("TTL before kill %" PRId64 ", after restart %" PRId64, before, after);
    cr_assert_eq(granted, 30);
    cr_assert(after >= 20, "lease lost or shortened: TTL %" PRId64, after);
    cr_assert(after <= 28,
              "TTL after restart %" PRId64 ": fresh TTL instead of the checkpoint (<= 27 + 1)",
              after);
    cr_assert_eq(count("cp/key", 0), 1);
}

/* 5. A restart does not resurrect a revoked lease (nor its keys); a live lease survives. */
Test(lease, restart_does_not_resurrect_revoked_lease, .fini = teardown, .timeout = 120)
{
    start_server(NULL);
    int64_t dead = grant(600), live = grant(600);
    put("rv/dead1", dead);
    put("rv/dead2", dead);
    put("rv/live", live);
    char msg[256];
    int rc = kvli_revoke(f->g, dead, msg, sizeof(msg));
    cr_assert_eq(rc, 0, "revoke: %d %s", rc, msg);
    cr_assert_eq(kv_it_server_kill9(&f->srv), 0);
    kv_it_grpc_close(f->g);
    f->g = NULL;
    rc = kv_it_server_start(&f->srv, START_TIMEOUT_MS);
    cr_assert_eq(rc, 0, "restart: %d", rc);
    reconnect();
    size_t n = 0;
    int64_t ids[8];
    rc = kvli_leases(f->g, &n, ids, 8, msg, sizeof(msg));
    cr_assert_eq(rc, 0, "leases: %d %s", rc, msg);
    cr_assert_eq(n, 1, "%zu leases after restart, want only the live one", n);
    cr_assert_eq(ids[0], live);
    cr_assert_eq(ttl_of(dead, NULL, NULL), -1, "revoked lease resurrected");
    cr_assert_eq(count("rv/dead", 1), 0, "keys of the revoked lease resurrected");
    cr_assert_eq(count("rv/live", 0), 1);
    cr_assert_gt(ttl_of(live, NULL, NULL), 500);
}

/* 6. etcdctl 3.4's lease commands and put --lease work, with etcdctl's output shapes. */

static char etcdctl_bin[PATH_MAX];

static void ctl_run(kv_it_cmd_result *r, const char *a0, const char *a1, const char *a2,
                    const char *a3, const char *a4)
{
    int rc = kv_it_ctl(&f->srv, etcdctl_bin, NULL, CTL_TIMEOUT_MS, r, a0, a1, a2, a3, a4, NULL);
    cr_assert_eq(rc, 0, "spawn etcdctl: %d", rc);
    cr_assert_eq(r->timed_out, 0, "etcdctl %s %s timed out", a0, a1 ? a1 : "");
}

static void expect_match(const char *text, const char *pattern)
{
    regex_t re;
    cr_assert_eq(regcomp(&re, pattern, REG_EXTENDED | REG_NEWLINE), 0, "bad regex %s", pattern);
    int m = regexec(&re, text, 0, NULL, 0);
    regfree(&re);
    cr_assert_eq(m, 0, "output\n%s\ndoes not match /%s/", text, pattern);
}

Test(lease, etcdctl_lease_commands, .fini = teardown, .timeout = 120)
{
    cr_assert_eq(kv_it_etcdctl_bin(etcdctl_bin, sizeof(etcdctl_bin)), 0, "etcdctl missing: %s",
                 etcdctl_bin);
    start_server(NULL);
    kv_it_cmd_result r;
    char pat[256];

    ctl_run(&r, "lease", "grant", "10", NULL, NULL);
    cr_assert_eq(r.exit_code, 0, "lease grant: %s", r.err);
    expect_match(r.out, "^lease [0-9a-f]+ granted with TTL\\(10s\\)\n$");
    char hex[32] = "";
    cr_assert_eq(sscanf(r.out, "lease %31[0-9a-f]", hex), 1);
    kv_it_cmd_result_free(&r);

    char lease_flag[64];
    snprintf(lease_flag, sizeof(lease_flag), "--lease=%s", hex);
    ctl_run(&r, "put", lease_flag, "ctl/key", "val", NULL);
    cr_assert_eq(r.exit_code, 0, "put --lease: %s", r.err);
    cr_assert_str_eq(r.out, "OK\n");
    kv_it_cmd_result_free(&r);

    ctl_run(&r, "lease", "keep-alive", "--once", hex, NULL);
    cr_assert_eq(r.exit_code, 0, "keep-alive --once: %s", r.err);
    snprintf(pat, sizeof(pat), "^lease %s keepalived with TTL\\(10\\)\n$", hex);
    expect_match(r.out, pat);
    kv_it_cmd_result_free(&r);

    ctl_run(&r, "lease", "timetolive", hex, NULL, NULL);
    cr_assert_eq(r.exit_code, 0, "timetolive: %s", r.err);
    snprintf(pat, sizeof(pat), "^lease %s granted with TTL\\(10s\\), remaining\\(([0-9]|10)s\\)\n$",
             hex);
    expect_match(r.out, pat);
    kv_it_cmd_result_free(&r);

    ctl_run(&r, "lease", "timetolive", "--keys", hex, NULL);
    cr_assert_eq(r.exit_code, 0, "timetolive --keys: %s", r.err);
    snprintf(pat, sizeof(pat),
             "^lease %s granted with TTL\\(10s\\), remaining\\(([0-9]|10)s\\), attached "
             "keys\\(\\[ctl/key\\]\\)\n$",
             hex);
    expect_match(r.out, pat);
    kv_it_cmd_result_free(&r);

    ctl_run(&r, "lease", "list", NULL, NULL, NULL);
    cr_assert_eq(r.exit_code, 0, "lease list: %s", r.err);
    snprintf(pat, sizeof(pat), "^found 1 leases\n%s\n$", hex);
    expect_match(r.out, pat);
    kv_it_cmd_result_free(&r);

    ctl_run(&r, "get", "ctl/key", NULL, NULL, NULL);
    cr_assert_eq(r.exit_code, 0);
    cr_assert_str_eq(r.out, "ctl/key\nval\n");
    kv_it_cmd_result_free(&r);

    ctl_run(&r, "lease", "revoke", hex, NULL, NULL);
    cr_assert_eq(r.exit_code, 0, "lease revoke: %s", r.err);
    snprintf(pat, sizeof(pat), "^lease %s revoked\n$", hex);
    expect_match(r.out, pat);
    kv_it_cmd_result_free(&r);

    ctl_run(&r, "get", "ctl/key", NULL, NULL, NULL);
    cr_assert_eq(r.exit_code, 0);
    cr_assert_str_eq(r.out, "", "key survived revoke: %s", r.out);
    kv_it_cmd_result_free(&r);

    ctl_run(&r, "lease", "timetolive", hex, NULL, NULL);
    cr_assert_eq(r.exit_code, 0, "timetolive after revoke: %s", r.err);
    snprintf(pat, sizeof(pat), "^lease %s already expired\n$", hex);
    expect_match(r.out, pat);
    kv_it_cmd_result_free(&r);

    ctl_run(&r, "lease", "list", NULL, NULL, NULL);
    cr_assert_eq(r.exit_code, 0);
    cr_assert_str_eq(r.out, "found 0 leases\n");
    kv_it_cmd_result_free(&r);

    ctl_run(&r, "put", "--lease=1234abcd", "ctl/other", "v", NULL);
    cr_assert_neq(r.exit_code, 0, "put with an unknown lease succeeded");
    cr_assert(strstr(r.err, "etcdserver: requested lease not found"), "stderr: %s", r.err);
    kv_it_cmd_result_free(&r);

    ctl_run(&r, "lease", "revoke", hex, NULL, NULL);
    cr_assert_neq(r.exit_code, 0, "second revoke succeeded");
    cr_assert(strstr(r.err, "etcdserver: requested lease not found"), "stderr: %s", r.err);
    kv_it_cmd_result_free(&r);
}

/* 7. Metrics: active leases and heap size follow grants, revokes and expiry on the
 * (single-member) leader. */
Test(lease, metrics_follow_grants_revokes_expiry, .fini = teardown, .timeout = 120)
{
    if (is_etcd())
        cr_skip_test("kvd-only: kvd_lease_* metrics");
    start_server(NULL);
    cr_assert_eq(metric("kvd_is_leader"), 1.0);
    cr_assert_eq(metric("kvd_lease_active"), 0.0);
    cr_assert_eq(metric("kvd_lease_heap_size"), 0.0);
    enum { LONG = 50, SHORT = 10, REVOKE = 20 };
    int64_t longs[LONG];
    for (int i = 0; i < LONG; i++)
        longs[i] = grant(600);
    for (int i = 0; i < SHORT; i++)
        grant(2);
    cr_assert_eq(metric("kvd_lease_active"), LONG + SHORT);
    cr_assert_eq(metric("kvd_lease_heap_size"), LONG + SHORT);
    double revoked0 = metric("kvd_lease_revoked_total");
    char msg[256];
    for (int i = 0; i < REVOKE; i++) {
        int rc = kvli_revoke(f->g, longs[i], msg, sizeof(msg));
        cr_assert_eq(rc, 0, "revoke: %d %s", rc, msg);
    }
    cr_assert_eq(metric("kvd_lease_active"), LONG + SHORT - REVOKE);
    cr_assert_eq(metric("kvd_lease_heap_size"), LONG + SHORT - REVOKE);
    cr_assert_geq(metric("kvd_lease_revoked_total") - revoked0, REVOKE);
    /* The short leases expire within 2 s + 1 s; give 5 s. */
    uint64_t deadline = kv_it_now_ms() + 5000;
    double active = -1;
    while (kv_it_now_ms() < deadline) {
        active = metric("kvd_lease_active");
        if (active == LONG - REVOKE)
            break;
        kvli_sleep_ms(100);
    }
    cr_assert_eq(active, LONG - REVOKE, "active after expiry: %g", active);
    cr_assert_eq(metric("kvd_lease_heap_size"), LONG - REVOKE);
    cr_assert_geq(metric("kvd_lease_expired_total"), SHORT);
    cr_assert_eq(metric("kvd_is_leader"), 1.0);
}

/* 8a. A duplicate lease ID is refused; a TTL below the minimum is raised to it. */
Test(lease, grant_duplicate_id_and_min_ttl, .fini = teardown, .timeout = 60)
{
    start_server(NULL);
    char msg[256];
    int64_t id = 0, ttl = 0;
    int rc = kvli_grant(f->g, 60, 0x1234, &id, &ttl, msg, sizeof(msg));
    cr_assert_eq(rc, 0, "grant with id: %d %s", rc, msg);
    cr_assert_eq(id, 0x1234);
    cr_assert_eq(ttl, 60);
    rc = kvli_grant(f->g, 60, 0x1234, &id, &ttl, msg, sizeof(msg));
    cr_assert_eq(rc, KV_IT_GRPC_STATUS, "duplicate grant: %d", rc);
    cr_assert_str_eq(msg, "etcdserver: lease already exists");

    rc = kvli_grant(f->g, 1, 0, &id, &ttl, msg, sizeof(msg));
    cr_assert_eq(rc, 0, "grant ttl 1: %d %s", rc, msg);
    cr_assert_eq(ttl, 2, "TTL 1 granted as %" PRId64 ", want the minimum 2", ttl);
    int64_t granted = 0;
    ttl_of(id, &granted, NULL);
    cr_assert_eq(granted, 2);
}

/* 8c. --max-lease-ttl bounds grants. */
Test(lease, max_lease_ttl_bounds_grants, .fini = teardown, .timeout = 60)
{
    if (is_etcd())
        cr_skip_test("kvd-only: etcd 3.4 has no --max-lease-ttl flag");
    static const char *const args[] = {"--max-lease-ttl=100", NULL};
    start_server(args);
    char msg[256];
    int64_t id = 0, ttl = 0;
    int rc = kvli_grant(f->g, 100, 0, &id, &ttl, msg, sizeof(msg));
    cr_assert_eq(rc, 0, "grant ttl = max: %d %s", rc, msg);
    cr_assert_eq(ttl, 100);
    rc = kvli_grant(f->g, 101, 0, &id, &ttl, msg, sizeof(msg));
    cr_assert_eq(rc, KV_IT_GRPC_STATUS, "grant above --max-lease-ttl: %d", rc);
    cr_assert_str_eq(msg, "etcdserver: too large lease TTL");
}

/* 8b. The minimum TTL follows --election-timeout: 3000 ms -> ceil(4.5) = 5 s. */
Test(lease, min_ttl_follows_election_timeout, .fini = teardown, .timeout = 60)
{
    static const char *const args[] = {"--election-timeout=3000", "--heartbeat-interval=300", NULL};
    start_server(args);
    char msg[256];
    int64_t id = 0, ttl = 0;
    int rc = kvli_grant(f->g, 1, 0, &id, &ttl, msg, sizeof(msg));
    cr_assert_eq(rc, 0, "grant: %d %s", rc, msg);
    cr_assert_eq(ttl, 5, "TTL 1 granted as %" PRId64 " with a 3 s election timeout", ttl);
    rc = kvli_grant(f->g, 7, 0, &id, &ttl, msg, sizeof(msg));
    cr_assert_eq(rc, 0);
    cr_assert_eq(ttl, 7);
}

/* 9. A keepalive for an unknown (or revoked) lease is answered with TTL 0, and the
 * stream keeps working for a live lease. */
Test(lease, keepalive_unknown_lease_ttl_0, .fini = teardown, .timeout = 60)
{
    start_server(NULL);
    int64_t live = grant(30), gone = grant(30);
    char msg[256];
    int rc = kvli_revoke(f->g, gone, msg, sizeof(msg));
    cr_assert_eq(rc, 0, "revoke: %d %s", rc, msg);
    kvli_ka *ka = NULL;
    rc = kvli_ka_open(&ka, f->srv.client_port, 5000);
    cr_assert_eq(rc, 0);
    const int64_t ids[] = {0x7777abcd, gone, live};
    const int64_t want[] = {0, 0, 30};
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(kvli_ka_send(ka, ids[i], 5000), 0);
        int64_t rid = -1, rttl = -1;
        rc = kvli_ka_recv(ka, &rid, &rttl, 5000);
        cr_assert_eq(rc, 0, "recv %d: %d (grpc-status %d)", i, rc, kvli_ka_grpc_status(ka));
        cr_assert_eq(rid, ids[i]);
        cr_assert_eq(rttl, want[i], "lease %" PRIx64 ": TTL %" PRId64 ", want %" PRId64, ids[i],
                     rttl, want[i]);
    }
    kvli_ka_close(ka);
}
