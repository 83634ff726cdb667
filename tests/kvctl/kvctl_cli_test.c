/*
 * kvctl argument handling that needs no server: flag errors, unknown commands, missing
 * arguments, bad formats. Exit statuses and stderr lines are etcdctl 3.4's.
 */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvt_proc.h"

struct res {
    int status;
    char out[8192];
    char err[8192];
};

/* Runs kvctl with argv (NULL-terminated) and an empty stdin (tests/lib kvt_run). */
static void run(struct res *r, const char *const *args)
{
    char path[4096];
    const char *b = getenv("KV_BUILD_DIR");
    snprintf(path, sizeof(path), "%s/client/kvctl", b && *b ? b : ".");
    cr_assert(access(path, X_OK) == 0, "kvctl not built at %s", path);
    const char *argv[32] = {path};
    size_t i = 0;
    for (; args[i] && i < 30; i++)
        argv[i + 1] = args[i];
    argv[i + 1] = NULL;
    /* nothing listens on port 1: any attempt to connect fails fast */
    static const char *const env[] = {"ETCDCTL_ENDPOINTS", "ETCDCTL_DIAL_TIMEOUT=1s", NULL};
    kvt_cmd_result c;
    int rc = kvt_run(argv, env, NULL, 0, 60000, &c);
    cr_assert_eq(rc, 0, "run %s: %d", path, rc);
    cr_assert_not(c.timed_out, "%s %s timed out", path, args[0]);
    r->status = c.exit_code;
    snprintf(r->out, sizeof(r->out), "%s", c.out);
    snprintf(r->err, sizeof(r->err), "%s", c.err);
    kvt_cmd_result_free(&c);
}

#define EXPECT(status_, err_, ...)                                                                 \
    do {                                                                                           \
        static const char *const a_[] = {__VA_ARGS__, NULL};                                       \
        struct res r_;                                                                             \
        run(&r_, a_);                                                                              \
        cr_expect_eq(r_.status, status_, "%s: status %d, stderr %s", a_[0], r_.status, r_.err);    \
        cr_expect_str_eq(r_.err, err_, "%s", a_[0]);                                               \
    } while (0)

Test(kvctl_cli, missing_arguments_exit_128)
{
    EXPECT(128,
           "Error: get command needs one argument as key and an optional argument as "
           "range_end\n",
           "get");
    EXPECT(128, "Error: put command needs 1 argument and input from stdin or 2 arguments\n", "put");
    EXPECT(128, "Error: put command needs 1 argument and input from stdin or 2 arguments\n", "put",
           "k");
    EXPECT(128,
           "Error: del command needs one argument as key and an optional argument as "
           "range_end\n",
           "del");
    EXPECT(128, "Error: compaction command needs 1 argument\n", "compaction");
    EXPECT(128, "Error: lease grant command needs TTL argument\n", "lease", "grant");
    EXPECT(128, "Error: lease revoke command needs 1 argument\n", "lease", "revoke");
    EXPECT(128, "Error: lease timetolive command needs lease ID as argument\n", "lease",
           "timetolive");
    EXPECT(128, "Error: lease keep-alive command needs lease ID as argument\n", "lease",
           "keep-alive");
    EXPECT(128, "Error: txn command does not accept argument\n", "txn", "x");
}

Test(kvctl_cli, bad_values)
{
    EXPECT(128, "Error: bad TTL (strconv.ParseInt: parsing \"x\": invalid syntax)\n", "lease",
           "grant", "x");
    EXPECT(128,
           "Error: bad lease ID arg (strconv.ParseInt: parsing \"zz\": invalid syntax), "
           "expecting ID in Hex\n",
           "lease", "revoke", "zz");
    EXPECT(128,
           "Error: bad lease ID (strconv.ParseInt: parsing \"zz\": invalid syntax), expecting ID "
           "in Hex\n",
           "put", "k", "v", "--lease=zz");
    EXPECT(128,
           "Error: bad lease ID (strconv.ParseInt: parsing \"10000000000000000\": value out of "
           "range), expecting ID in Hex\n",
           "put", "k", "v", "--lease", "10000000000000000");
    EXPECT(1, "Error: strconv.ParseInt: parsing \"x\": invalid syntax\n", "compaction", "x");
    EXPECT(4, "Error: unknown consistency flag \"q\"\n", "get", "k", "--consistency=q");
    EXPECT(4, "Error: bad sort order UP\n", "get", "k", "--order", "UP");
    EXPECT(4, "Error: bad sort target SIZE\n", "get", "k", "--sort-by=SIZE");
    EXPECT(128, "Error: `--prefix` and `--from-key` cannot be set at the same time, choose one\n",
           "get", "k", "--prefix", "--from-key");
    EXPECT(128,
           "Error: too many arguments, only accept one argument when `--prefix` or `--from-key` "
           "is set\n",
           "del", "a", "b", "--prefix");
    EXPECT(4, "Error: unsupported output format\n", "get", "k", "-w", "xml");
}

/* cobra reports a flag error, prints the usage on stdout, and etcdctl reports it again */
#define TWICE(m) "Error: " m "\n\nError: " m "\n"

Test(kvctl_cli, flag_errors_exit_1)
{
    EXPECT(1, TWICE("unknown flag: --bogus"), "get", "k", "--bogus");
    EXPECT(1, TWICE("flag needs an argument: --rev"), "get", "k", "--rev");
    EXPECT(1,
           TWICE("invalid argument \"abc\" for \"--limit\" flag: strconv.ParseInt: parsing "
                 "\"abc\": invalid syntax"),
           "get", "k", "--limit=abc");
    EXPECT(1, TWICE("unknown shorthand flag: '5' in -5"), "lease", "grant", "-5");
    EXPECT(1, TWICE("unknown flag: --once"), "lease", "grant", "5", "--once");
    EXPECT(1,
           TWICE("invalid argument \"x\" for \"--dial-timeout\" flag: time: invalid duration "
                 "\"x\""),
           "get", "k", "--dial-timeout", "x");
    EXPECT(1,
           "Error: unknown command \"bogus\" for \"kvctl\"\nRun 'kvctl --help' for "
           "usage.\nError: unknown command \"bogus\" for \"kvctl\"\n",
           "bogus");
}

Test(kvctl_cli, help_prints_usage_and_exits_0)
{
    static const char *const a[] = {"lease", "keep-alive", "--help", NULL};
    struct res r;
    run(&r, a);
    cr_expect_eq(r.status, 0);
    cr_expect_str_eq(r.err, "");
    static const char want[] = "NAME:\n\tlease keep-alive - Keeps leases alive (renew)\n\nUSAGE:\n"
                               "\tkvctl lease keep-alive [options] <leaseID> [flags]\n";
    cr_expect(strncmp(r.out, want, sizeof(want) - 1) == 0, "%s", r.out);
    static const char *const b[] = {"get", "--bogus", NULL};
    run(&r, b);
    cr_expect_eq(r.status, 1);
    cr_expect(strstr(r.out, "USAGE:\n\tkvctl get [options] <key> [range_end] [flags]\n"),
              "usage of get on stdout: %s", r.out);
}

Test(kvctl_cli, unreachable_endpoint)
{
    EXPECT(1, "Error: context deadline exceeded\n", "--endpoints=127.0.0.1:1",
           "--command-timeout=1s", "get", "k");
    EXPECT(1, "Failed to get the status of endpoint 127.0.0.1:1 (context deadline exceeded)\n",
           "--endpoints=127.0.0.1:1", "--command-timeout=1s", "endpoint", "status");
}

Test(kvctl_cli, no_command_prints_usage)
{
    static const char *const none[] = {NULL};
    struct res r;
    run(&r, none);
    cr_expect_eq(r.status, 0);
    cr_expect(strstr(r.out, "USAGE:") != NULL, "usage on stdout: %s", r.out);
}

/* kvctl calls itself kvctl (USAGE lines, errors, version), while the
 * texts it shares with etcdctl stay etcdctl's. */
Test(kvctl_cli, own_name_and_version)
{
    static const char *const root[] = {"--help", NULL};
    struct res r;
    run(&r, root);
    cr_expect_eq(r.status, 0);
    cr_expect(strstr(r.out, "USAGE:\n\tkvctl [flags]\n") != NULL, "root usage: %s", r.out);
    cr_expect(strstr(r.out, "help for kvctl\n") != NULL, "root usage: %s", r.out);
    cr_expect(strstr(r.out, "\tversion\t") != NULL, "version listed: %s", r.out);
    cr_expect(strstr(r.out, "\twatch\t") != NULL, "watch listed: %s", r.out);

    /* every command's help names the program kvctl, never etcdctl */
    static const char *const helps[][4] = {
        {"get", "--help"},
        {"put", "--help"},
        {"del", "--help"},
        {"txn", "--help"},
        {"compaction", "--help"},
        {"watch", "--help"},
        {"lock", "--help"},
        {"elect", "--help"},
        {"move-leader", "--help"},
        {"endpoint", "health", "--help"},
        {"endpoint", "status", "--help"},
        {"member", "list", "--help"},
        {"member", "add", "--help"},
        {"lease", "grant", "--help"},
        {"lease", "keep-alive", "--help"},
        {"snapshot", "save", "--help"},
        {"snapshot", "restore", "--help"},
        {"version", "--help"},
        {"lease"},
        {"member"},
        {"endpoint"},
        {"snapshot"},
    };
    for (size_t i = 0; i < sizeof(helps) / sizeof(helps[0]); i++) {
        run(&r, helps[i]);
        cr_expect_eq(r.status, 0, "%s: status %d", helps[i][0], r.status);
        cr_expect(strstr(r.out, "USAGE:\n\tkvctl ") != NULL, "%s %s: %s", helps[i][0],
                  helps[i][1] ? helps[i][1] : "", r.out);
        cr_expect(strstr(r.out, "etcdctl ") == NULL, "%s %s names etcdctl: %s", helps[i][0],
                  helps[i][1] ? helps[i][1] : "", r.out);
    }

    static const char *const ver[] = {"version", NULL};
    run(&r, ver);
    cr_expect_eq(r.status, 0);
    cr_expect_str_eq(r.out, "kvctl version: " KV_PROJECT_VERSION "\nAPI version: 3.4\n");
    cr_expect_str_eq(r.err, "");

    /* a flag error reports with the command's usage, under kvctl's name */
    static const char *const bad[] = {"version", "--bogus", NULL};
    run(&r, bad);
    cr_expect_eq(r.status, 1);
    cr_expect_str_eq(r.err, "Error: unknown flag: --bogus\n\nError: unknown flag: --bogus\n");
}
