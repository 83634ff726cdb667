/*
 * it_ctl: etcdctl (ETCDCTL_API=3) against the server under test gives the same output as
 * against a real etcd doing the same sequence of operations; kvctl gives the same output
 * as etcdctl. Every etcdctl command kvd supports is covered (put, get with its flags, del,
 * txn from stdin, compaction, endpoint status/health, member list) in simple, json and
 * table formats, including error paths (compacted / future revision, empty key).
 *
 * Server under test: KV_TEST_SERVER=kvd (default) or etcd. The reference is always etcd
 * (/usr/bin/etcd); without it the comparison test is skipped.
 */
#include <criterion/criterion.h>
#include "kvt_skip.h"
#include <criterion/logging.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "normalize.h"

#define CMD_TIMEOUT_MS 20000
#define READY_TIMEOUT_MS 20000
#define MAX_ARGS 16

typedef struct step {
    const char *stdin_data;
    const char *argv[MAX_ARGS];
} step;

/* The sequence of operations; revisions are deterministic (etcd starts at revision 1). */
static const step script[] = {
    {NULL, {"put", "foo", "bar", NULL}},
    {NULL, {"put", "foo2", "bar2", NULL}},
    {NULL, {"put", "fop", "x", NULL}},
    {NULL, {"put", "zoo", "z", NULL}},
    {NULL, {"put", "a/1", "v1", NULL}},
    {NULL, {"put", "a/2", "v2", NULL}},
    {NULL, {"put", "foo", "bar3", NULL}},
    {NULL, {"put", "foo", "bar4", "--prev-kv", NULL}},
    {NULL, {"put", "foo2", "bar5", "-w", "json", NULL}},
    {NULL, {"get", "foo", NULL}},
    {NULL, {"get", "foo", "-w", "json", NULL}},
    {NULL, {"get", "foo", "-w", "table", NULL}},
    {NULL, {"get", "missing", NULL}},
    {NULL, {"get", "missing", "-w", "json", NULL}},
    {NULL, {"get", "fo", "--prefix", NULL}},
    {NULL, {"get", "fo", "--prefix", "-w", "json", NULL}},
    {NULL, {"get", "foo", "--from-key", NULL}},
    {NULL, {"get", "a", "zz", NULL}},
    {NULL, {"get", "", "--prefix", "--limit", "2", NULL}},
    {NULL, {"get", "", "--prefix", "--limit", "2", "-w", "json", NULL}},
    {NULL, {"get", "foo", "--rev", "2", NULL}},
    {NULL, {"get", "foo", "--rev", "8", "-w", "json", NULL}},
    {NULL, {"get", "", "--prefix", "--keys-only", NULL}},
    {NULL, {"get", "", "--prefix", "--keys-only", "-w", "json", NULL}},
    {NULL, {"get", "", "--prefix", "--sort-by=MODIFY", "--order=DESCEND", NULL}},
    {NULL, {"get", "", "--prefix", "--sort-by=VALUE", "--order=ASCEND", NULL}},
    {NULL, {"get", "", "--prefix", "--sort-by=VERSION", "--order=DESCEND", NULL}},
    {NULL, {"get", "", "--prefix", "--sort-by=CREATE", "--order=DESCEND", NULL}},
    {NULL, {"get", "", "--prefix", "--sort-by=KEY", "--order=DESCEND", "--limit", "3", NULL}},
    {NULL, {"get", "", "--prefix", "--print-value-only", NULL}},
    {NULL, {"get", "a/", "--prefix", "--print-value-only", "--order=DESCEND", NULL}},
    {NULL, {"get", "", "--prefix", "-w", "table", NULL}},
    {NULL, {"del", "zoo", "--prev-kv", NULL}},
    {NULL, {"del", "a/", "--prefix", NULL}},
    {NULL, {"del", "nonexistent", NULL}},
    {NULL, {"del", "fo", "--prefix", "--prev-kv", "-w", "json", NULL}},
    {NULL, {"put", "foo", "again", NULL}},
    {"value(\"foo\") = \"again\"\n\nput foo yes\nget foo\n\nput foo no\n\n", {"txn", NULL}},
    {"value(\"foo\") = \"again\"\n\nput foo yes\nget foo\n\nput foo no\n\n", {"txn", NULL}},
    {"mod(\"foo\") > \"0\"\nversion(\"foo\") = \"3\"\n\nput t1 a\nput t2 b\n\ndel foo\n\n",
     {"txn", "-w", "json", NULL}},
    {"create(\"nokey\") = \"0\"\n\nput created yes\n\n\n", {"txn", NULL}},
    {NULL, {"get", "", "--prefix", NULL}},
    {NULL, {"compaction", "5", NULL}},
    {NULL, {"get", "foo", "--rev", "3", NULL}},
    {NULL, {"get", "foo", "--rev", "5", NULL}},
    {NULL, {"get", "foo", "--rev", "1000", NULL}},
    {NULL, {"put", "", "x", NULL}},
    {NULL, {"endpoint", "status", NULL}},
    {NULL, {"endpoint", "status", "-w", "json", NULL}},
    {NULL, {"endpoint", "status", "-w", "table", NULL}},
    {NULL, {"endpoint", "health", NULL}},
    {NULL, {"endpoint", "health", "-w", "json", NULL}},
    {NULL, {"member", "list", NULL}},
    {NULL, {"member", "list", "-w", "json", NULL}},
    {NULL, {"member", "list", "-w", "table", NULL}},
};
#define N_STEPS (sizeof(script) / sizeof(script[0]))

static char *describe(const step *st)
{
    char buf[512];
    size_t o = 0;
    buf[0] = 0;
    for (int i = 0; st->argv[i] && o < sizeof(buf) - 1; i++)
        o += (size_t)snprintf(buf + o, sizeof(buf) - o, "%s'%s'", i ? " " : "", st->argv[i]);
    return strdup(buf);
}

/* Runs one step; returns "exit=N\n<normalized stdout><Error: lines>" (malloc'd). */
static char *run_step(const kv_it_server *s, const char *ctl, const step *st)
{
    const char *argv[MAX_ARGS + 4];
    char ep[96];
    int n = 0;
    snprintf(ep, sizeof(ep), "--endpoints=%s", s->endpoint);
    argv[n++] = ctl;
    argv[n++] = ep;
    for (int i = 0; st->argv[i]; i++)
        argv[n++] = st->argv[i];
    argv[n] = NULL;
    static const char *const env[] = {"ETCDCTL_API=3", NULL};
    kv_it_cmd_result r;
    int rc = kv_it_run(argv, env, st->stdin_data, st->stdin_data ? strlen(st->stdin_data) : 0,
                       CMD_TIMEOUT_MS, &r);
    cr_assert_eq(rc, 0, "cannot run %s", ctl);
    char *norm = kv_it_normalize(r.out);
    char *errs = kv_it_stderr_lines(r.err);
    cr_assert(norm && errs);
    size_t cap = strlen(norm) + strlen(errs) + 64;
    char *res = malloc(cap);
    cr_assert(res);
    snprintf(res, cap, "exit=%d%s\n%s-- stderr:\n%s", r.exit_code, r.timed_out ? " TIMEOUT" : "",
             norm, errs);
    free(norm);
    free(errs);
    kv_it_cmd_result_free(&r);
    return res;
}

/* Runs the script with ctl_a against a and ctl_b against b; expects equal outputs. */
static void compare_runs(kv_it_server *a, const char *ctl_a, const char *label_a, kv_it_server *b,
                         const char *ctl_b, const char *label_b)
{
    int mismatches = 0;
    for (size_t i = 0; i < N_STEPS; i++) {
        char *ra = run_step(a, ctl_a, &script[i]);
        char *rb = run_step(b, ctl_b, &script[i]);
        char *d = describe(&script[i]);
        if (strcmp(ra, rb) != 0)
            mismatches++;
        else if (getenv("KV_IT_VERBOSE"))
            cr_log_info("step %zu: %s\n%s", i, d, ra);
        cr_expect_str_eq(ra, rb, "step %zu: %s\n--- %s:\n%s--- %s:\n%s", i, d, label_a, ra, label_b,
                         rb);
        free(d);
        free(ra);
        free(rb);
    }
    cr_log_info("%d of %zu steps differ (%s vs %s)", mismatches, N_STEPS, label_a, label_b);
}

typedef struct pair {
    kv_it_server a, b;
} pair;

static void start_or_die(kv_it_server *s, kv_it_kind kind)
{
    int rc = kv_it_server_init(s, kind, NULL);
    cr_assert_eq(rc, 0, "init %s server (binary %s): %d", kv_it_kind_name(kind), s->bin, rc);
    rc = kv_it_server_start(s, READY_TIMEOUT_MS);
    if (rc) {
        char *log = NULL;
        kv_it_server_log(s, &log);
        cr_log_error("%s server log:\n%s", kv_it_kind_name(kind), log ? log : "");
        free(log);
        kv_it_server_destroy(s);
    }
    cr_assert_eq(rc, 0, "start %s: %d", kv_it_kind_name(kind), rc);
}

static pair *fixture;

static void teardown(void)
{
    if (fixture) {
        kv_it_server_destroy(&fixture->a);
        kv_it_server_destroy(&fixture->b);
        free(fixture);
        fixture = NULL;
    }
}

Test(ctl, etcdctl_same_output_as_against_etcd, .fini = teardown, .timeout = 600)
{
    char etcd[PATH_MAX], etcdctl[PATH_MAX];
    if (kv_it_server_bin(KV_IT_ETCD, etcd, sizeof(etcd)) != 0)
        KVT_SKIP_MISSING("no reference etcd at %s", etcd);
    cr_assert_eq(kv_it_etcdctl_bin(etcdctl, sizeof(etcdctl)), 0, "etcdctl missing: %s", etcdctl);
    kv_it_kind kind = kv_it_kind_from_env();
    fixture = calloc(1, sizeof(*fixture));
    cr_assert(fixture);
    start_or_die(&fixture->a, KV_IT_ETCD);
    start_or_die(&fixture->b, kind);
    compare_runs(&fixture->a, etcdctl, "etcdctl vs etcd", &fixture->b, etcdctl,
                 kind == KV_IT_ETCD ? "etcdctl vs etcd (subject)" : "etcdctl vs kvd");
}

Test(ctl, kvctl_same_output_as_etcdctl, .fini = teardown, .timeout = 600)
{
    char etcdctl[PATH_MAX], kvctl[PATH_MAX];
    if (kv_it_kvctl_bin(kvctl, sizeof(kvctl)) != 0)
        KVT_SKIP_MISSING("kvctl not built (%s)", kvctl);
    cr_assert_eq(kv_it_etcdctl_bin(etcdctl, sizeof(etcdctl)), 0, "etcdctl missing: %s", etcdctl);
    kv_it_kind kind = kv_it_kind_from_env();
    fixture = calloc(1, sizeof(*fixture));
    cr_assert(fixture);
    start_or_die(&fixture->a, kind);
    start_or_die(&fixture->b, kind);
    compare_runs(&fixture->a, etcdctl, "etcdctl", &fixture->b, kvctl, "kvctl");
}

/* etcdctl 3.4 has no --count-only (it came in 3.5); kvctl has it. Check kvctl's answer
 * against the count etcdctl reports in json. */
Test(ctl, kvctl_count_only, .fini = teardown, .timeout = 300)
{
    char etcdctl[PATH_MAX], kvctl[PATH_MAX];
    if (kv_it_kvctl_bin(kvctl, sizeof(kvctl)) != 0)
        KVT_SKIP_MISSING("kvctl not built (%s)", kvctl);
    cr_assert_eq(kv_it_etcdctl_bin(etcdctl, sizeof(etcdctl)), 0);
    fixture = calloc(1, sizeof(*fixture));
    cr_assert(fixture);
    start_or_die(&fixture->a, kv_it_kind_from_env());
    kv_it_cmd_result r;
    const char *keys[] = {"c/1", "c/2", "c/3", "d"};
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(
            kv_it_ctl(&fixture->a, etcdctl, NULL, CMD_TIMEOUT_MS, &r, "put", keys[i], "v", NULL),
            0);
        cr_assert_eq(r.exit_code, 0, "put: %s", r.err);
        kv_it_cmd_result_free(&r);
    }
    cr_assert_eq(kv_it_ctl(&fixture->a, kvctl, NULL, CMD_TIMEOUT_MS, &r, "get", "c/", "--prefix",
                           "--count-only", "-w", "json", NULL),
                 0);
    cr_expect_eq(r.exit_code, 0, "kvctl get --count-only: %s", r.err);
    cr_expect(strstr(r.out, "\"count\":3") != NULL, "no count 3 in: %s", r.out);
    cr_expect(strstr(r.out, "\"kvs\"") == NULL, "count-only returned kvs: %s", r.out);
    kv_it_cmd_result_free(&r);
}
