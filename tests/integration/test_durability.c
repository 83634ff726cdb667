/*
 * it_durability:
 * - acknowledged_puts_survive_kill9: 10,000 puts from 8 threads (one connection each,
 *   libkvclient when built, else the raw gRPC client); the moment the last one is
 *   acknowledged the server gets SIGKILL; after a restart on the same data dir every
 *   acknowledged key is there with its value (full paged range + count).
 * - startup_time_does_not_scan (kvd only): restarts with 10 and with 100,000 keys, parses
 *   "startup took N ms" from kvd's log, logs both and asserts the large one is not
 *   pathologically larger (< 10x + 50 ms). Not a timing benchmark: bounds are generous.
 * - startup_does_not_read_the_raft_log (kvd only): restarts with a short and with a long
 *   retained raft log (1,500 more entries of 15 KB, nothing compacted) and asserts the
 *   restart's RSS does not grow with the log (raft_init reads only the configuration
 *   entries, through the raft log's index of them: raft.h next_conf).
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "loader.h"
#include "rpc_client.h"

#define N_PUTS 10000
#define READY_MS 60000

static kv_it_server *srv;

static void setup(void)
{
    srv = calloc(1, sizeof(*srv));
    cr_assert(srv);
    kv_it_kind kind = kv_it_kind_from_env();
    int rc = kv_it_server_init(srv, kind, NULL);
    cr_assert_eq(rc, 0, "init %s (%s): %d", kv_it_kind_name(kind), srv->bin, rc);
    rc = kv_it_server_start(srv, READY_MS);
    cr_assert_eq(rc, 0, "start %s: %d", kv_it_kind_name(kind), rc);
}

static void teardown(void)
{
    if (srv) {
        kv_it_server_destroy(srv);
        free(srv);
        srv = NULL;
    }
}

TestSuite(durability, .init = setup, .fini = teardown, .timeout = 800);

static int64_t count_prefix(const char *prefix, const char *end)
{
    kv_it_rpc *c = NULL;
    char err[256] = "";
    cr_assert_eq(kv_it_rpc_open(&c, srv->endpoint, 5000, err, sizeof(err)), 0, "%s", err);
    int64_t n = -1;
    int rc = kv_it_rpc_count(c, prefix, end, 30000, &n, err, sizeof(err));
    kv_it_rpc_close(c);
    cr_assert_eq(rc, 0, "count: %s", err);
    return n;
}

Test(durability, acknowledged_puts_survive_kill9)
{
    uint8_t *acked = calloc(N_PUTS, 1);
    cr_assert(acked);
    kv_it_load_opts o = {.endpoint = srv->endpoint,
                         .prefix = "dur/",
                         .n_keys = N_PUTS,
                         .value_size = 64,
                         .seed = 42,
                         .threads = 8,
                         .batch = 1,
                         .timeout_ms = 30000,
                         .acked = acked};
    uint32_t n_acked = 0;
    char err[256] = "";
    uint64_t t0 = kv_it_now_ms();
    int rc = kv_it_load(&o, &n_acked, err, sizeof(err));
    uint64_t t1 = kv_it_now_ms();
    /* No grace: whatever was acknowledged must already be durable. */
    cr_assert_eq(kv_it_server_kill9(srv), 0);
    cr_log_info("%s: %u puts acknowledged in %llu ms via %s, then kill -9",
                kv_it_kind_name(srv->kind), n_acked, (unsigned long long)(t1 - t0),
                kv_it_rpc_backend());
    cr_expect_eq(rc, 0, "load: %s", err);
    cr_expect_eq(n_acked, N_PUTS, "only %u of %u puts acknowledged", n_acked, N_PUTS);

    rc = kv_it_server_start(srv, READY_MS);
    cr_assert_eq(rc, 0, "restart after kill -9: %d", rc);
    uint32_t present = 0, missing = 0, wrong = 0;
    rc = kv_it_verify(&o, &present, &missing, &wrong, err, sizeof(err));
    cr_assert_eq(rc, 0, "verify: %s", err);
    cr_log_info("after restart: %u keys present, %u acknowledged missing, %u wrong values", present,
                missing, wrong);
    cr_expect_eq(missing, 0, "%u acknowledged keys lost", missing);
    cr_expect_eq(wrong, 0, "%u keys have the wrong value", wrong);
    cr_expect_eq(present, N_PUTS);
    cr_expect_eq(count_prefix("dur/", "dur0"), N_PUTS);
    free(acked);
}

static double startup_ms(void)
{
    char *log = NULL;
    cr_assert_eq(kv_it_server_log(srv, &log), 0);
    const char *p = strstr(log, "startup took ");
    double ms = -1;
    if (p)
        ms = strtod(p + strlen("startup took "), NULL);
    cr_assert(p, "no 'startup took N ms' line in kvd's log:\n%s", log);
    free(log);
    return ms;
}

Test(durability, startup_time_does_not_scan)
{
    if (srv->kind == KV_IT_ETCD) {
        teardown(); /* .fini does not run after cr_skip_test */
        cr_skip_test("kvd only: etcd does not log 'startup took N ms'");
    }
    char err[256] = "";
    kv_it_load_opts o = {.endpoint = srv->endpoint,
                         .prefix = "s/",
                         .n_keys = 10,
                         .value_size = 100,
                         .seed = 7,
                         .threads = 1,
                         .batch = 1,
                         .timeout_ms = 30000};
    cr_assert_eq(kv_it_load(&o, NULL, err, sizeof(err)), 0, "load 10: %s", err);
    /* The startup checks are bounded (--startup-verify-records per tree, 8x that over the
     * whole file walk): with a bound of 1000 both stores below are past it, so both restarts
     * do the same bounded check and only a scan would tell them apart. */
    cr_assert_lt(srv->n_extra, KV_IT_MAX_EXTRA);
    snprintf(srv->extra[srv->n_extra++], sizeof(srv->extra[0]), "--startup-verify-records=1000");
    /* A small --snapshot-count keeps the retained raft log equal in both restarts, so what is
     * compared is the keyspace (raft_init reads only the log's configuration entries:
     * startup_does_not_read_the_raft_log below checks the log's part). */
    cr_assert_lt(srv->n_extra, KV_IT_MAX_EXTRA);
    snprintf(srv->extra[srv->n_extra++], sizeof(srv->extra[0]), "--snapshot-count=100");
    kv_it_load_opts mid = o;
    mid.prefix = "a/";
    mid.n_keys = 20000;
    mid.threads = 4;
    mid.batch = 100;
    cr_assert_eq(kv_it_load(&mid, NULL, err, sizeof(err)), 0, "load 20000: %s", err);
    cr_assert_eq(kv_it_server_restart(srv, 10000, READY_MS), 0);
    double small = startup_ms();
    uint64_t small_rss = 0, large_rss = 0;
    cr_assert_eq(kv_it_proc_rss(srv->pid, &small_rss), 0);

    kv_it_load_opts big = o;
    big.prefix = "b/";
    big.n_keys = 80000;
    big.threads = 4;
    big.batch = 100;
    uint64_t t0 = kv_it_now_ms();
    cr_assert_eq(kv_it_load(&big, NULL, err, sizeof(err)), 0, "load 80000: %s", err);
    uint64_t t1 = kv_it_now_ms();
    cr_assert_eq(kv_it_server_restart(srv, 10000, READY_MS), 0);
    double large = startup_ms();
    cr_assert_eq(kv_it_proc_rss(srv->pid, &large_rss), 0);
    cr_log_info("kvd startup: %.1f ms with 20,010 keys, %.1f ms with 100,010 keys (load took "
                "%llu ms)",
                small, large, (unsigned long long)(t1 - t0));
    /* What shows a scan whatever the machine's load: the pages a restart touched. A scan of
     * the 80,000 more keys (about 20 MB of the file) would map them; the bounded checks do
     * not. The time is a coarse second check (the CI machine is shared and noisy). */
    cr_log_info("kvd RSS after restart: %.1f MB with 20,010 keys, %.1f MB with 100,010 keys",
                small_rss / 1048576.0, large_rss / 1048576.0);
    cr_expect(large_rss < small_rss + 6 * 1048576,
              "startup touched the data: RSS %.1f MB -> %.1f MB", small_rss / 1048576.0,
              large_rss / 1048576.0);
    cr_expect(large < 3 * small + 500, "startup grew with the key count: %.1f ms -> %.1f ms", small,
              large);
    cr_expect_eq(count_prefix("a/", "a0"), 20000);
    cr_expect_eq(count_prefix("b/", "b0"), 80000);
    cr_expect_eq(count_prefix("s/", "s0"), 10);
}

Test(durability, startup_does_not_read_the_raft_log)
{
    if (srv->kind == KV_IT_ETCD) {
        teardown(); /* .fini does not run after cr_skip_test */
        cr_skip_test("kvd only: the raft log is kvd's");
    }
    char err[256] = "";
    /* Nothing is compacted (the retained log is every entry). The store's startup checks
     * read up to N records per database (values of 15 KB here): with N = 10 both restarts
     * check the same few, so only a read of the raft log tells them apart. */
    cr_assert_lt(srv->n_extra + 1, KV_IT_MAX_EXTRA);
    snprintf(srv->extra[srv->n_extra++], sizeof(srv->extra[0]), "--snapshot-count=1000000");
    snprintf(srv->extra[srv->n_extra++], sizeof(srv->extra[0]), "--startup-verify-records=10");
    kv_it_load_opts o = {.endpoint = srv->endpoint,
                         .prefix = "s/",
                         .n_keys = 20,
                         .value_size = 15000,
                         .seed = 9,
                         .threads = 2,
                         .batch = 1,
                         .timeout_ms = 30000};
    cr_assert_eq(kv_it_load(&o, NULL, err, sizeof(err)), 0, "load 20: %s", err);
    cr_assert_eq(kv_it_server_restart(srv, 10000, READY_MS), 0);
    uint64_t small_rss = 0, large_rss = 0;
    cr_assert_eq(kv_it_proc_rss(srv->pid, &small_rss), 0);

    /* 1,500 entries of 15 KB (one Put each): about 22 MB more of retained log. */
    kv_it_load_opts big = o;
    big.prefix = "l/";
    big.n_keys = 1500;
    big.threads = 4;
    uint64_t t0 = kv_it_now_ms();
    cr_assert_eq(kv_it_load(&big, NULL, err, sizeof(err)), 0, "load 1500: %s", err);
    uint64_t t1 = kv_it_now_ms();
    cr_assert_eq(kv_it_server_restart(srv, 10000, READY_MS), 0);
    cr_assert_eq(kv_it_proc_rss(srv->pid, &large_rss), 0);
    cr_log_info("kvd RSS after restart: %.1f MB with a short raft log, %.1f MB with 1,500 more "
                "entries of 15 KB retained (load took %llu ms)",
                small_rss / 1048576.0, large_rss / 1048576.0, (unsigned long long)(t1 - t0));
    /* Reading the retained log at startup maps it (~22 MB more); reading only its
     * configuration entries does not. */
    cr_expect(large_rss < small_rss + 8 * 1048576,
              "startup read the retained raft log: RSS %.1f MB -> %.1f MB", small_rss / 1048576.0,
              large_rss / 1048576.0);
    cr_expect_eq(count_prefix("l/", "l0"), 1500);
    cr_expect_eq(count_prefix("s/", "s0"), 20);
}
