/*
 * --config-file: etcd 3.4's YAML configuration file (server/daemon/config_file.h). etcd's sample
 * file (etcd.conf.yml.sample's keys, with its nulls, quotes, comments and the two transport
 * sections) configures kvd; the file is then the whole configuration (other flags and
 * variables ignored, as etcd); sequences in both YAML forms become comma lists; bad files,
 * and YAML constructs the reader does not take (anchors, aliases, tags, block scalars), are
 * refused with the file, the line or the flag named. Criterion runs these tests one at a
 * time (they set environment variables).
 */
#include "daemon/config.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char path[64];

static void write_file(const char *text)
{
    strcpy(path, "/tmp/kvd-cfgfile-XXXXXX");
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    size_t n = strlen(text);
    cr_assert_eq(write(fd, text, n), (ssize_t)n);
    close(fd);
}

static void fini(void)
{
    if (path[0])
        unlink(path);
    path[0] = '\0';
    unsetenv("ETCD_CONFIG_FILE");
    unsetenv("KVD_CONFIG_FILE");
    unsetenv("KVD_NAME");
}

static int parse_with(kv_config *c, char *err, size_t errlen, int argc, char **argv)
{
    kv_config_default(c);
    err[0] = '\0';
    return kv_config_parse_env(c, argc, argv, err, errlen);
}

static int parse_file(kv_config *c, char *err, size_t errlen)
{
    char *argv[] = {"kvd", "--config-file", path};
    return parse_with(c, err, errlen, 3, argv);
}

TestSuite(config_file, .fini = fini);

/* The keys and layout of etcd 3.4's etcd.conf.yml.sample, values changed. */
static const char SAMPLE[] =
    "# This is the configuration file for the etcd server.\n"
    "\n"
    "# Human-readable name for this member.\n"
    "name: 'n1'\n"
    "data-dir: /var/lib/etcd/n1   # a comment after a value\n"
    "wal-dir:\n"
    "snapshot-count: 10000\n"
    "heartbeat-interval: 50\n"
    "election-timeout: 500\n"
    "quota-backend-bytes: 0\n"
    "listen-peer-urls: http://127.0.0.1:12380\n"
    "listen-client-urls: http://127.0.0.1:12379,http://127.0.0.1:22379\n"
    "max-snapshots: 5\n"
    "max-wals: 5\n"
    "cors:\n"
    "initial-advertise-peer-urls: http://127.0.0.1:12380\n"
    "advertise-client-urls: http://127.0.0.1:12379\n"
    "discovery:\n"
    "discovery-fallback: 'proxy'\n"
    "initial-cluster: n1=http://127.0.0.1:12380,n2=http://127.0.0.1:12381\n"
    "initial-cluster-token: \"tok-1\"\n"
    "initial-cluster-state: 'new'\n"
    "strict-reconfig-check: False\n"
    "enable-v2: true\n"
    "proxy: 'off'\n"
    "client-transport-security:\n"
    "  # Path to the client server TLS cert file.\n"
    "  cert-file: /etc/kvd/server.crt\n"
    "  key-file: /etc/kvd/server.key\n"
    "  client-cert-auth: true\n"
    "  trusted-ca-file: /etc/kvd/ca.crt\n"
    "  auto-tls: false\n"
    "peer-transport-security:\n"
    "    cert-file:\n"
    "    key-file: ~\n"
    "    client-cert-auth: false\n"
    "    trusted-ca-file:\n"
    "    auto-tls: true\n"
    "    crl-file: /etc/kvd/peer.crl\n"
    "debug: false\n"
    "logger: zap\n"
    "log-outputs: [stderr]\n"
    "force-new-cluster: false\n"
    "auto-compaction-mode: periodic\n"
    "auto-compaction-retention: \"1\"\n";

Test(config_file, etcds_sample_configures_kvd)
{
    write_file(SAMPLE);
    kv_config c;
    char err[1024];
    cr_assert_eq(parse_file(&c, err, sizeof err), 0, "%s", err);
    cr_expect_str_eq(c.name, "n1");
    cr_expect_str_eq(c.data_dir, "/var/lib/etcd/n1");
    cr_expect_eq(c.snapshot_count, 10000);
    cr_expect_eq(c.heartbeat_interval_ms, 50);
    cr_expect_eq(c.election_timeout_ms, 500);
    cr_expect_eq(c.n_listen_client, 2);
    cr_expect_eq(c.listen_client[1].port, 22379);
    cr_expect_eq(c.listen_peer[0].port, 12380);
    cr_expect_eq(c.n_initial_cluster, 2);
    cr_expect_str_eq(c.initial_cluster[1].name, "n2");
    cr_expect_str_eq(c.initial_cluster_token, "tok-1");
    cr_expect_eq(c.strict_reconfig_check, 0);
    cr_expect_str_eq(c.cert_file, "/etc/kvd/server.crt");
    cr_expect_str_eq(c.key_file, "/etc/kvd/server.key");
    cr_expect_eq(c.client_cert_auth, 1);
    cr_expect_str_eq(c.trusted_ca_file, "/etc/kvd/ca.crt");
    cr_expect_eq(c.auto_tls, 0);
    cr_expect_str_eq(c.peer_cert_file, "", "a null value keeps the default");
    cr_expect_eq(c.peer_auto_tls, 1);
    cr_expect_str_eq(c.peer_crl_file, "/etc/kvd/peer.crl");
    cr_expect_str_eq(c.log_outputs, "stderr");
    cr_expect_str_eq(c.auto_compaction_mode, "periodic");
    cr_expect_str_eq(c.auto_compaction_retention, "1");
}

Test(config_file, the_file_is_the_whole_configuration)
{
    write_file("name: from-file\n");
    kv_config c;
    char err[1024];
    setenv("KVD_NAME", "from-env", 1);
    char *argv[] = {"kvd", "--name=from-flag", "--config-file", path, "--max-txn-ops", "7"};
    cr_assert_eq(parse_with(&c, err, sizeof err, 6, argv), 0, "%s", err);
    cr_expect_str_eq(c.name, "from-file");
    cr_expect_eq(c.max_txn_ops, 128, "the flag beside --config-file is ignored");
    /* the file's path from the environment, etcd's variable included */
    unsetenv("KVD_NAME");
    setenv("ETCD_CONFIG_FILE", path, 1);
    char *bare[] = {"kvd"};
    cr_assert_eq(parse_with(&c, err, sizeof err, 1, bare), 0, "%s", err);
    cr_expect_str_eq(c.name, "from-file");
    /* --help still answers help */
    char *help[] = {"kvd", "--config-file", path, "--help"};
    cr_expect_eq(parse_with(&c, err, sizeof err, 4, help), 1);
}

Test(config_file, sequences_in_both_forms)
{
    write_file("---\n"
               "listen-client-urls:\n"
               "  - http://127.0.0.1:31001\n"
               "  - 'http://127.0.0.1:31002'\n"
               "listen-peer-urls: [ http://127.0.0.1:31003 , \"http://127.0.0.1:31004\" ]\n"
               "x-not-a-setting:\n"
               "  - http://ignored.example\n"
               "name: 'it''s'\n");
    kv_config c;
    char err[1024];
    cr_assert_eq(parse_file(&c, err, sizeof err), 0, "%s", err);
    cr_expect_eq(c.n_listen_client, 2);
    cr_expect_eq(c.listen_client[1].port, 31002);
    cr_expect_eq(c.n_listen_peer, 2);
    cr_expect_eq(c.listen_peer[1].port, 31004);
    cr_expect_str_eq(c.name, "it's");
}

Test(config_file, bad_files_are_refused_with_a_clear_error)
{
    kv_config c;
    char err[1024];
    static const struct {
        const char *text, *want;
    } cases[] = {
        {"name: n1\n\theartbeat-interval: 50\n", "line 2: a tab in the indentation"},
        {"name: n1\n  data-dir: /x\n", "line 2: unexpected indentation"},
        {"name 'n1'\n", "line 1: want 'key: value'"},
        {"name: 'n1\n", "line 1: unterminated single-quoted string"},
        {"name: \"n1\" extra\n", "line 1: text after a quoted value"},
        {"  - x\n", "line 1: a sequence item without a key above it"},
        {"log-outputs: [stderr\n", "line 1: a flow sequence must end with ']'"},
        {"heartbeat-interval: often\n", "--heartbeat-interval"},
        {"client-transport-security:\n  client-cert-auth: maybe\n", "--client-cert-auth"},
        {"name: |\n  n1\n", "line 1: '|' starts a YAML construct"},
        {"name: &a n1\n", "line 1: '&' starts a YAML construct"},
        {"name: *a\n", "line 1: '*' starts a YAML construct"},
        {"log-outputs: [!!str stderr]\n", "line 1: '!' starts a YAML construct"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_file(cases[i].text);
        cr_expect_lt(parse_file(&c, err, sizeof err), 0, "case %zu accepted", i);
        cr_expect(strstr(err, "config file ") == err && strstr(err, path),
                  "case %zu names no file: %s", i, err);
        cr_expect(strstr(err, cases[i].want), "case %zu: want '%s' in: %s", i, cases[i].want, err);
        unlink(path);
    }
    path[0] = '\0';
    char *argv[] = {"kvd", "--config-file", "/nonexistent/etcd.conf.yml"};
    cr_expect_eq(parse_with(&c, err, sizeof err, 3, argv), -ENOENT);
    cr_expect(strstr(err, "/nonexistent/etcd.conf.yml"), "%s", err);
}

/* etcd decodes its file through JSON into Go's time.Duration: a plain number for a duration
 * key is nanoseconds. heartbeat-interval and election-timeout are plain milliseconds there
 * too, and a value with a unit is taken as on the command line. */
Test(config_file, a_plain_number_for_a_duration_is_nanoseconds)
{
    write_file("grpc-keepalive-min-time: 5000000000\n"
               "grpc-keepalive-interval: 7200000000000\n"
               "grpc-keepalive-timeout: '20s'\n"
               "experimental-corrupt-check-time: 1500000\n"
               "experimental-watch-progress-notify-interval: 600000000000\n"
               "experimental-warning-apply-duration: 100000000\n"
               "backend-batch-interval: 0\n"
               "heartbeat-interval: 100\n"
               "election-timeout: 1000\n"
               "lease-checkpoint-interval: 300000\n");
    kv_config c;
    char err[1024];
    cr_assert_eq(parse_file(&c, err, sizeof err), 0, "%s", err);
    cr_expect_eq(c.grpc_keepalive_min_time_ms, 5000);
    cr_expect_eq(c.grpc_keepalive_interval_ms, 7200000);
    cr_expect_eq(c.grpc_keepalive_timeout_ms, 20000);
    cr_expect_eq(c.corrupt_check_time_ms, 1, "1.5 ms: whole milliseconds, as '1.5ms'");
    cr_expect_eq(c.watch_progress_interval_ms, 600000);
    cr_expect_eq(c.heartbeat_interval_ms, 100);
    cr_expect_eq(c.election_timeout_ms, 1000);
    /* kvd's own duration keys are no etcd field: milliseconds, as on the command line */
    cr_expect_eq(c.lease_checkpoint_interval_ms, 300000);
    unlink(path);
    /* still checked: a duration past the flag's range, or not a number */
    write_file("grpc-keepalive-min-time: 99999999999999999999\n");
    cr_expect_lt(parse_file(&c, err, sizeof err), 0);
    cr_expect(strstr(err, "--grpc-keepalive-min-time: invalid duration"), "%s", err);
    unlink(path);
    write_file("experimental-warning-apply-duration: soon\n");
    cr_expect_lt(parse_file(&c, err, sizeof err), 0);
    cr_expect(strstr(err, "--experimental-warning-apply-duration: invalid duration"), "%s", err);
    unlink(path);
    /* a YAML integer with a sign is a number of nanoseconds too: +5000000 is 5 ms, not the
     * lone number of milliseconds the flag would read (83 minutes) */
    write_file("grpc-keepalive-min-time: +5000000\n");
    cr_assert_eq(parse_file(&c, err, sizeof err), 0, "%s", err);
    cr_expect_eq(c.grpc_keepalive_min_time_ms, 5);
    unlink(path);
    write_file("experimental-warning-apply-duration: -5000000\n"
               "backend-batch-interval: -500\n");
    cr_expect_eq(parse_file(&c, err, sizeof err), 0, "%s", err); /* no effect: any duration */
    unlink(path);
    write_file("grpc-keepalive-min-time: -500\n");
    cr_expect_lt(parse_file(&c, err, sizeof err), 0);
    cr_expect(strstr(err, "(must not be negative)"), "%s", err);
    unlink(path);
    write_file("grpc-keepalive-min-time: -5000000\n");
    cr_expect_lt(parse_file(&c, err, sizeof err), 0);
    cr_expect(strstr(err, "--grpc-keepalive-min-time: invalid duration '-5ms' (must not be "
                          "negative)"),
              "%s", err);
    unlink(path);
    /* under kvd's 1 ms it would read as 0, which turns keepalive pings off: refused */
    write_file("grpc-keepalive-interval: 60000\n");
    cr_expect_lt(parse_file(&c, err, sizeof err), 0);
    cr_expect(strstr(err, "line 1: 'grpc-keepalive-interval: 60000': a plain number is "
                          "nanoseconds here"),
              "%s", err);
}

/* etcd 3.4's keys kvd has no setting for are read (not "not a kvd setting; ignored"): a value
 * kvd cannot honour stops the start as the flag does, the gateway switch takes effect. */
Test(config_file, etcd34_keys_are_read)
{
    kv_config c;
    char err[1024];
    write_file("enable-grpc-gateway: false\n"
               "pre-vote: true\n"
               "max-wals: 5\n"
               "metrics: extensive\n"
               "debug: yes\n" /* YAML 1.1's spelling, as etcd's decoder reads it */
               "initial-election-tick-advance: off\n"
               "cors: ''\n" /* etcd: empty is the default */
               "log-output: [stdout]\n");
    cr_assert_eq(parse_file(&c, err, sizeof err), 0, "%s", err);
    cr_expect_eq(c.enable_grpc_gateway, 0);
    cr_expect_str_eq(c.log_level, "debug");
    cr_expect_str_eq(c.log_outputs, "stderr", "--log-output: no effect, as in etcd 3.4");
    unlink(path);
    static const struct {
        const char *text, *want;
    } refused[] = {
        {"wal-dir: /var/lib/etcd/wal\n", "--wal-dir: '/var/lib/etcd/wal' refused"},
        {"force-new-cluster: true\n", "--force-new-cluster: 'true' refused"},
        {"proxy: 'on'\n", "--proxy: 'on' refused"},
        {"discovery: https://discovery.etcd.io/x\n", "--discovery: 'https://discovery.etcd.io/x' "
                                                     "refused"},
        {"bcrypt-cost: lots\n", "--bcrypt-cost: invalid value 'lots'"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        write_file(refused[i].text);
        cr_expect_lt(parse_file(&c, err, sizeof err), 0, "case %zu accepted", i);
        cr_expect(strstr(err, refused[i].want), "case %zu: want '%s' in: %s", i, refused[i].want,
                  err);
        unlink(path);
    }
    path[0] = '\0';
}

/* The file's values reach the flags' parsers: etcd's numbers (0x, 0o, 0b, a leading 0, '_')
 * and Go's durations ("1m30s", "1500us") read as on the command line; an empty cors is the
 * default there (etcd: an empty "cors" key is not applied), unlike --cors=. */
Test(config_file, etcd34_numbers_and_durations_are_read_as_go_does)
{
    write_file("election-timeout: 0x3e8\n"
               "heartbeat-interval: 0o144\n"
               "snapshot-count: 0b101\n"
               "max-txn-ops: 010\n"
               "quota-backend-bytes: 0x_4000_0000\n"
               "grpc-keepalive-interval: 1m30s\n"
               "experimental-corrupt-check-time: 1h2m3.5s\n"
               "experimental-warning-apply-duration: 500us\n"
               "cors: ''\n");
    kv_config c;
    char err[1024];
    cr_assert_eq(parse_file(&c, err, sizeof err), 0, "%s", err);
    cr_expect_eq(c.election_timeout_ms, 1000);
    cr_expect_eq(c.heartbeat_interval_ms, 100);
    cr_expect_eq(c.snapshot_count, 5);
    cr_expect_eq(c.max_txn_ops, 8);
    cr_expect_eq(c.quota_backend_bytes, 1ULL << 30);
    cr_expect_eq(c.grpc_keepalive_interval_ms, 90000);
    cr_expect_eq(c.corrupt_check_time_ms, 3723500);
    unlink(path);
    write_file("grpc-keepalive-timeout: -1s\n");
    cr_expect_lt(parse_file(&c, err, sizeof err), 0);
    cr_expect(strstr(err, "--grpc-keepalive-timeout: invalid duration '-1s' (must not be "
                          "negative)"),
              "%s", err);
    unlink(path);
    write_file("snapshot-count: 1__0\n");
    cr_expect_lt(parse_file(&c, err, sizeof err), 0);
    cr_expect(strstr(err, "--snapshot-count: invalid value '1__0'"), "%s", err);
}
