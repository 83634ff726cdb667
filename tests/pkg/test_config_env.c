/*
 * kvd flags from the environment, as etcd: --foo-bar from KVD_FOO_BAR
 * or ETCD_FOO_BAR (KVD_ wins), the command line over both (server/daemon/config.h
 * kv_config_parse_env). Each test sets and clears its own variables (criterion runs the
 * tests of this binary one at a time: --jobs 1).
 */
#include "daemon/config.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

static const char *const vars[] = {
    "KVD_NAME",
    "ETCD_NAME",
    "KVD_DATA_DIR",
    "ETCD_DATA_DIR",
    "KVD_MAX_TXN_OPS",
    "ETCD_MAX_TXN_OPS",
    "KVD_ENABLE_FAILPOINTS",
    "ETCD_INITIAL_CLUSTER",
    "KVD_LISTEN_CLIENT_URLS",
    "ETCD_LISTEN_CLIENT_URLS",
    "KVD_LEASE_CHECKPOINT_INTERVAL",
    "KVD_ELECTION_TIMEOUT",
};

static void clear(void)
{
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
        unsetenv(vars[i]);
}

static int parse(kv_config *c, char *err, size_t errlen, int argc, char **argv)
{
    kv_config_default(c);
    return kv_config_parse_env(c, argc, argv, err, errlen);
}

TestSuite(config_env, .init = clear, .fini = clear);

Test(config_env, kvd_variables_set_flags)
{
    kv_config c;
    char err[512] = "";
    setenv("KVD_NAME", "n1", 1);
    setenv("KVD_DATA_DIR", "/var/lib/kvd/n1", 1);
    setenv("KVD_MAX_TXN_OPS", "512", 1);
    setenv("KVD_ENABLE_FAILPOINTS", "true", 1);
    setenv("KVD_LISTEN_CLIENT_URLS", "http://127.0.0.1:12379,http://127.0.0.1:22379", 1);
    setenv("KVD_LEASE_CHECKPOINT_INTERVAL", "2s", 1);
    char *argv[] = {"kvd"};
    cr_assert_eq(parse(&c, err, sizeof(err), 1, argv), 0, "%s", err);
    cr_expect_str_eq(c.name, "n1");
    cr_expect_str_eq(c.data_dir, "/var/lib/kvd/n1");
    cr_expect_eq(c.max_txn_ops, 512);
    cr_expect_eq(c.enable_failpoints, 1);
    cr_expect_eq(c.n_listen_client, 2);
    cr_expect_eq(c.listen_client[1].port, 22379);
    cr_expect_eq(c.lease_checkpoint_interval_ms, 2000);
    /* derived defaults follow the environment's values */
    cr_expect_str_eq(c.initial_cluster[0].name, "n1");
}

Test(config_env, etcd_variables_for_migration_kvd_wins)
{
    kv_config c;
    char err[512] = "";
    setenv("ETCD_NAME", "from-etcd", 1);
    setenv("ETCD_DATA_DIR", "/var/lib/etcd/default", 1);
    setenv("ETCD_MAX_TXN_OPS", "64", 1);
    setenv("KVD_MAX_TXN_OPS", "32", 1);
    setenv("ETCD_INITIAL_CLUSTER", "from-etcd=http://127.0.0.1:2380,b=http://127.0.0.1:3380", 1);
    char *argv[] = {"kvd"};
    cr_assert_eq(parse(&c, err, sizeof(err), 1, argv), 0, "%s", err);
    cr_expect_str_eq(c.name, "from-etcd");
    cr_expect_str_eq(c.data_dir, "/var/lib/etcd/default");
    cr_expect_eq(c.max_txn_ops, 32, "KVD_ wins over ETCD_");
    cr_expect_eq(c.n_initial_cluster, 2);
}

Test(config_env, command_line_wins)
{
    kv_config c;
    char err[512] = "";
    setenv("KVD_NAME", "env-name", 1);
    setenv("KVD_MAX_TXN_OPS", "512", 1);
    setenv("ETCD_LISTEN_CLIENT_URLS", "http://127.0.0.1:1", 1);
    char *argv[] = {"kvd", "--name", "flag-name", "--max-txn-ops=7",
                    "--listen-client-urls=http://127.0.0.1:2"};
    cr_assert_eq(parse(&c, err, sizeof(err), 5, argv), 0, "%s", err);
    cr_expect_str_eq(c.name, "flag-name");
    cr_expect_eq(c.max_txn_ops, 7);
    cr_expect_eq(c.n_listen_client, 1);
    cr_expect_eq(c.listen_client[0].port, 2);
    cr_expect_str_eq(c.data_dir, "flag-name.kvd");
}

Test(config_env, bad_value_names_the_variable)
{
    kv_config c;
    char err[512] = "";
    setenv("KVD_MAX_TXN_OPS", "lots", 1);
    char *argv[] = {"kvd"};
    cr_assert_lt(parse(&c, err, sizeof(err), 1, argv), 0);
    cr_expect(strstr(err, "KVD_MAX_TXN_OPS") != NULL, "%s", err);
    cr_expect(strstr(err, "lots") != NULL, "%s", err);
    /* the same bad value, overridden on the command line, is not an error */
    char *argv2[] = {"kvd", "--max-txn-ops", "9"};
    cr_assert_eq(parse(&c, err, sizeof(err), 3, argv2), 0, "%s", err);
    cr_expect_eq(c.max_txn_ops, 9);
    /* a bad value on the command line is reported as the flag's */
    setenv("KVD_ELECTION_TIMEOUT", "2000", 1);
    char *argv3[] = {"kvd", "--max-txn-ops", "x"};
    cr_assert_lt(parse(&c, err, sizeof(err), 3, argv3), 0);
    cr_expect(strncmp(err, "--max-txn-ops", 13) == 0, "%s", err);
}

Test(config_env, help_still_detected)
{
    kv_config c;
    char err[512] = "";
    setenv("KVD_NAME", "n1", 1);
    char *argv[] = {"kvd", "--version"};
    cr_assert_eq(parse(&c, err, sizeof(err), 2, argv), 1);
}
