#include "daemon/config.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int parse(kv_config *c, char *err, size_t errlen, int argc, char **argv)
{
    kv_config_default(c);
    return kv_config_parse(c, argc, argv, err, errlen);
}

Test(config, defaults_follow_etcd)
{
    kv_config c;
    char err[256] = "";
    char *argv[] = {"kvd"};
    cr_assert_eq(parse(&c, err, sizeof(err), 1, argv), 0, "%s", err);
    cr_assert_str_eq(c.name, "default");
    cr_assert_str_eq(c.data_dir, "default.kvd");
    cr_assert_eq(c.n_listen_client, 1);
    cr_assert_str_eq(c.listen_client[0].host, "localhost");
    cr_assert_eq(c.listen_client[0].port, 2379);
    cr_assert_eq(c.n_initial_cluster, 1);
    cr_assert_str_eq(c.initial_cluster[0].url.text, "http://localhost:2380");
    cr_assert_eq(c.max_request_bytes, 1572864);
    cr_assert_eq(c.max_txn_ops, 128);
}

Test(config, flags_with_and_without_equals)
{
    kv_config c;
    char err[256] = "";
    char *argv[] = {"kvd",
                    "--name",
                    "n1",
                    "--data-dir=/tmp/x",
                    "--listen-client-urls",
                    "http://127.0.0.1:1,http://127.0.0.1:2",
                    "--max-request-bytes=2048",
                    "--lease-checkpoint-interval",
                    "2s",
                    "--enable-failpoints"};
    cr_assert_eq(parse(&c, err, sizeof(err), 10, argv), 0, "%s", err);
    cr_assert_str_eq(c.name, "n1");
    cr_assert_str_eq(c.data_dir, "/tmp/x");
    cr_assert_eq(c.n_listen_client, 2);
    cr_assert_eq(c.listen_client[1].port, 2);
    cr_assert_eq(c.max_request_bytes, 2048);
    cr_assert_eq(c.lease_checkpoint_interval_ms, 2000);
    cr_assert_eq(c.enable_failpoints, 1);
    cr_assert_str_eq(c.initial_cluster[0].name, "n1");
}

Test(config, bad_input_gives_clear_errors)
{
    kv_config c;
    char err[256];
    char *unknown[] = {"kvd", "--no-such-flag", "1"};
    cr_assert_lt(parse(&c, err, sizeof(err), 3, unknown), 0);
    cr_assert(strstr(err, "unknown flag") != NULL, "%s", err);

    char *missing[] = {"kvd", "--name"};
    cr_assert_lt(parse(&c, err, sizeof(err), 2, missing), 0);
    cr_assert(strstr(err, "needs a value") != NULL, "%s", err);

    char *badnum[] = {"kvd", "--max-txn-ops", "-3"};
    cr_assert_lt(parse(&c, err, sizeof(err), 3, badnum), 0);
    cr_assert(strstr(err, "--max-txn-ops") != NULL, "%s", err);

    char *tls[] = {"kvd", "--listen-client-urls", "https://127.0.0.1:2379"};
    cr_assert_eq(parse(&c, err, sizeof(err), 3, tls), -EINVAL); /* https needs a cert */
    cr_assert(strstr(err, "--cert-file") != NULL, "%s", err);

    char *badurl[] = {"kvd", "--listen-client-urls", "http://127.0.0.1"};
    cr_assert_lt(parse(&c, err, sizeof(err), 3, badurl), 0);

    char *notme[] = {"kvd", "--name", "n9", "--peers", "n1=http://127.0.0.1:2380"};
    cr_assert_lt(parse(&c, err, sizeof(err), 5, notme), 0);
    cr_assert(strstr(err, "n9") != NULL, "%s", err);
}

Test(config, multi_member_cluster_flags)
{
    kv_config c;
    char err[256];
    char *argv[] = {"kvd",
                    "--name",
                    "n1",
                    "--peers",
                    "n1=http://127.0.0.1:2380,n2=http://127.0.0.1:2381",
                    "--snapshot-count",
                    "500",
                    "--peer-max-queue-bytes",
                    "2097152"};
    cr_assert_eq(parse(&c, err, sizeof(err), 9, argv), 0, "%s", err);
    cr_assert_eq(c.n_initial_cluster, 2);
    cr_assert_eq(c.snapshot_count, 500);
    cr_assert_eq(c.peer_max_queue_bytes, 2097152);
}

/* An IPv6 literal keeps its brackets in the normalised URL that members publish and compare
 * (MemberList, the join's own-URL check): "http://fd00::3:2380" is no URL a client can dial. */
Test(config, an_ipv6_url_keeps_its_brackets)
{
    kv_url u;
    char err[256];
    cr_assert_eq(kv_url_parse(&u, "http://[fd00::3]:2380", err, sizeof err), 0, "%s", err);
    cr_assert_str_eq(u.host, "fd00::3");
    cr_assert_eq(u.port, 2380);
    cr_assert_str_eq(u.text, "http://[fd00::3]:2380");
    cr_assert_eq(kv_url_parse(&u, "https://[::1]:2379", err, sizeof err), 0, "%s", err);
    cr_assert_str_eq(u.text, "https://[::1]:2379");
    cr_assert_eq(kv_url_parse(&u, "http://127.0.0.1:2379", err, sizeof err), 0, "%s", err);
    cr_assert_str_eq(u.text, "http://127.0.0.1:2379");
}

/* A duration that is not a number is refused, whatever strtod makes of it: "nan" passed every
 * range check and turned the corruption checker off. */
Test(config, a_duration_that_is_not_a_number_is_refused)
{
    kv_config c;
    char err[256];
    static const char *bad[] = {"nan", "NaN", "inf", "s", "nanms", "-1s"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *argv[] = {"kvd", "--grpc-keepalive-timeout", (char *)bad[i]};
        cr_assert_eq(parse(&c, err, sizeof(err), 3, argv), -EINVAL, "'%s' was taken", bad[i]);
        cr_assert(strstr(err, "invalid duration"), "%s", err);
    }
    char *ok[] = {"kvd", "--grpc-keepalive-timeout", "1.5s"};
    cr_assert_eq(parse(&c, err, sizeof(err), 3, ok), 0, "%s", err);
}

/* A request the client port accepts must fit one raft message to a peer: a peer queue (or
 * the 64 MiB frame) smaller than --max-request-bytes plus its encoding is refused at start,
 * where the append carrying such a request would otherwise be refused on every retry and
 * replication would stop behind it, without a word. */
Test(config, max_request_bytes_must_fit_a_peer_message)
{
    kv_config c;
    char err[256];
    char *small_queue[] = {"kvd", "--peer-max-queue-bytes", "1048576"};
    cr_assert_eq(parse(&c, err, sizeof(err), 3, small_queue), -EINVAL);
    cr_assert(strstr(err, "--max-request-bytes 1572864 does not fit a raft message to a peer"),
              "%s", err);
    char *big_request[] = {"kvd", "--max-request-bytes", "104857600", "--peer-max-queue-bytes",
                           "209715200"};
    cr_assert_eq(parse(&c, err, sizeof(err), 5, big_request), -EINVAL);
    cr_assert(strstr(err, "64 MiB"), "%s", err);
    char *fits[] = {"kvd", "--max-request-bytes", "1048576", "--peer-max-queue-bytes", "1114112"};
    cr_assert_eq(parse(&c, err, sizeof(err), 5, fits), 0, "%s", err);
}

Test(config, help_and_version)
{
    kv_config c;
    char err[64];
    char *argv[] = {"kvd", "--version"};
    cr_assert_eq(parse(&c, err, sizeof(err), 2, argv), 1);
    cr_assert(strstr(kv_config_usage(), "--max-request-bytes") != NULL);
}

Test(config, unsafe_no_fsync_is_off_unless_given)
{
    kv_config c;
    char err[256] = "";
    char *none[] = {"kvd"};
    cr_assert_eq(parse(&c, err, sizeof(err), 1, none), 0, "%s", err);
    cr_assert_eq(c.unsafe_no_fsync, 0);
    char *on[] = {"kvd", "--unsafe-no-fsync"};
    cr_assert_eq(parse(&c, err, sizeof(err), 2, on), 0, "%s", err);
    cr_assert_eq(c.unsafe_no_fsync, 1);
    char *off[] = {"kvd", "--unsafe-no-fsync=false"};
    cr_assert_eq(parse(&c, err, sizeof(err), 2, off), 0, "%s", err);
    cr_assert_eq(c.unsafe_no_fsync, 0);
    cr_assert(strstr(kv_config_usage(), "--unsafe-no-fsync"));
}

Test(config, max_snapshot_bytes_defaults_to_automatic_and_parses)
{
    kv_config c;
    char err[256] = "";
    char *none[] = {"kvd"};
    cr_assert_eq(parse(&c, err, sizeof(err), 1, none), 0, "%s", err);
    cr_assert_eq(c.max_snapshot_bytes, 0); /* 2 x the map size of the quota (server.c) */
    char *set[] = {"kvd", "--max-snapshot-bytes=1048576"};
    cr_assert_eq(parse(&c, err, sizeof(err), 2, set), 0, "%s", err);
    cr_assert_eq(c.max_snapshot_bytes, 1048576);
    char *bad[] = {"kvd", "--max-snapshot-bytes", "lots"};
    cr_assert_lt(parse(&c, err, sizeof(err), 3, bad), 0);
    cr_assert(strstr(err, "max-snapshot-bytes"), "%s", err);
    cr_assert(strstr(kv_config_usage(), "--max-snapshot-bytes"));
}

Test(config, peer_priority_queue_flag)
{
    kv_config c;
    char err[256];
    kv_config_default(&c);
    cr_assert_eq(c.peer_max_prio_queue_bytes, 4u << 20);
    char *argv[] = {"kvd", "--peer-max-priority-queue-bytes", "131072"};
    cr_assert_eq(parse(&c, err, sizeof(err), 3, argv), 0, "%s", err);
    cr_assert_eq(c.peer_max_prio_queue_bytes, 131072);
    char *small[] = {"kvd", "--peer-max-priority-queue-bytes", "1024"};
    cr_assert_lt(parse(&c, err, sizeof(err), 3, small), 0);
    cr_assert(strstr(kv_config_usage(), "--peer-max-priority-queue-bytes"));
}

/* etcd 3.4's flags that kvd has no setting of its own for, each at etcd's default: an etcd
 * command line that spells them out starts kvd (they used to be "unknown flag"). */
Test(config, etcd34_flags_at_their_defaults_parse)
{
    kv_config c;
    char err[1024] = "";
    char *argv[] = {"kvd",
                    "--backend-batch-interval=0",
                    "--backend-batch-limit=0",
                    "--bcrypt-cost=10",
                    "--client-cert-allowed-hostname=",
                    "--debug=false",
                    "--discovery=",
                    "--discovery-fallback=proxy",
                    "--discovery-proxy=",
                    "--enable-grpc-gateway=true",
                    "--experimental-backend-bbolt-freelist-type=",
                    "--experimental-enable-lease-checkpoint=false",
                    "--experimental-enable-lease-checkpoint-persist=false",
                    "--experimental-enable-v2v3=",
                    "--experimental-peer-skip-client-san-verification=false",
                    "--experimental-warning-apply-duration=100ms",
                    "--experimental-watch-progress-notify-interval=0",
                    "--force-new-cluster=false",
                    "--initial-election-tick-advance=true",
                    "--log-output=default",
                    "--log-package-levels=",
                    "--max-wals=5",
                    "--metrics=basic",
                    "--pre-vote=false",
                    "--proxy=off",
                    "--proxy-dial-timeout=1000",
                    "--proxy-failure-wait=5000",
                    "--proxy-read-timeout=0",
                    "--proxy-refresh-interval=30000",
                    "--proxy-write-timeout=5000",
                    "--cors=*",
                    "--host-whitelist=*",
                    "--wal-dir",
                    ""};
    int argc = (int)(sizeof argv / sizeof argv[0]);
    cr_assert_eq(parse(&c, err, sizeof(err), argc, argv), 0, "%s", err);
    cr_expect_eq(c.enable_grpc_gateway, 1);
    cr_expect_str_eq(c.log_level, "info");
    cr_expect_str_eq(c.log_outputs, "stderr", "--log-output has no effect, as in etcd 3.4");
    cr_expect_eq(c.watch_progress_interval_ms, 0, "0: the watch hub's 10m, as etcd");
    /* the other spellings etcd's flag package takes: a bare boolean, the help's defaults */
    char *more[] = {"kvd",
                    "--pre-vote",
                    "--initial-election-tick-advance",
                    "--debug=false",
                    "--experimental-backend-bbolt-freelist-type=array",
                    "--metrics",
                    "extensive",
                    "--backend-batch-limit=-1",
                    "--bcrypt-cost=40", /* etcd 3.4: out of bcrypt's range, 10 is used */
                    "--metrics=fancy"}; /* etcd 3.4: anything but extensive is basic */
    cr_assert_eq(parse(&c, err, sizeof(err), 10, more), 0, "%s", err);
}

/* The etcd 3.4 names that take effect: each sets what kvd's own flag sets. */
Test(config, etcd34_aliases_set_their_targets)
{
    kv_config c;
    char err[1024] = "";
    char *watch[] = {"kvd", "--experimental-watch-progress-notify-interval", "3s"};
    cr_assert_eq(parse(&c, err, sizeof(err), 3, watch), 0, "%s", err);
    cr_expect_eq(c.watch_progress_interval_ms, 3000);

    /* etcd 3.4 only warns about --log-output and logs to --log-outputs (setupLogging) */
    char *out[] = {"kvd", "--log-output=stdout"};
    cr_assert_eq(parse(&c, err, sizeof(err), 2, out), 0, "%s", err);
    cr_expect_str_eq(c.log_outputs, "stderr");

    char *debug[] = {"kvd", "--debug"};
    cr_assert_eq(parse(&c, err, sizeof(err), 2, debug), 0, "%s", err);
    cr_expect_str_eq(c.log_level, "debug");
    cr_expect_eq(c.enable_pprof, 1, "etcd 3.4's --debug serves /debug/pprof/ too");
    /* Go's strconv.ParseBool spellings, as etcd's flags take them */
    char *debug1[] = {"kvd", "--debug=1", "--enable-grpc-gateway=F"};
    cr_assert_eq(parse(&c, err, sizeof(err), 3, debug1), 0, "%s", err);
    cr_expect_str_eq(c.log_level, "debug");
    cr_expect_eq(c.enable_grpc_gateway, 0);
    /* etcd 3.4 (capnslog): --debug wins over --log-level */
    char *debug_warn[] = {"kvd", "--debug=true", "--log-level=warn"};
    cr_assert_eq(parse(&c, err, sizeof(err), 3, debug_warn), 0, "%s", err);
    cr_expect_str_eq(c.log_level, "debug");
    char *no_debug[] = {"kvd", "--debug=false", "--log-level=warn"};
    cr_assert_eq(parse(&c, err, sizeof(err), 3, no_debug), 0, "%s", err);
    cr_expect_str_eq(c.log_level, "warn");

    char *gw[] = {"kvd", "--enable-grpc-gateway=false"};
    cr_assert_eq(parse(&c, err, sizeof(err), 2, gw), 0, "%s", err);
    cr_expect_eq(c.enable_grpc_gateway, 0);
}

/* A value kvd cannot honour stops the start with the reason, not "unknown flag". */
Test(config, etcd34_values_kvd_cannot_honour_are_refused_with_the_reason)
{
    kv_config c;
    char err[1024];
    static const struct {
        const char *arg, *want;
    } cases[] = {
        {"--force-new-cluster", "--force-new-cluster: 'true' refused: kvd cannot rewrite the "
                                "membership of an existing data dir"},
        {"--force-new-cluster=true", "snapshot restore"},
        {"--discovery=https://discovery.etcd.io/3e86b59982e49066c5d813af1c2e2579cbf573de",
         "--discovery: 'https://discovery.etcd.io/3e86b59982e49066c5d813af1c2e2579cbf573de' "
         "refused: etcd's v2 discovery service is not supported"},
        {"--discovery-proxy=http://10.0.0.1:3128", "--discovery-proxy: 'http://10.0.0.1:3128' "
                                                   "refused: only used by --discovery"},
        {"--proxy=on", "--proxy: 'on' refused: etcd's v2 proxy is not supported; run kvd "
                       "grpc-proxy start"},
        {"--proxy=readonly", "etcd's v2 proxy is not supported"},
        {"--experimental-enable-v2v3=/v2/", "--experimental-enable-v2v3: '/v2/' refused: the v2 "
                                            "API is not served"},
        {"--client-cert-allowed-hostname=client.example.com",
         "--client-cert-allowed-hostname: 'client.example.com' refused: not supported"},
        {"--cors=https://ui.example.com", "--cors: 'https://ui.example.com' refused: kvd answers "
                                          "HTTP requests from every origin"},
        {"--host-whitelist=kvd.example.com", "--host-whitelist: 'kvd.example.com' refused"},
        {"--wal-dir=/var/lib/etcd/wal", "--wal-dir: '/var/lib/etcd/wal' refused: a separate WAL "
                                        "directory is not supported: kvd keeps its raft "
                                        "write-ahead log inside --data-dir, in <data-dir>/wal"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *argv[] = {"kvd", (char *)cases[i].arg};
        cr_expect_lt(parse(&c, err, sizeof(err), 2, argv), 0, "%s was accepted", cases[i].arg);
        cr_expect(strstr(err, cases[i].want), "%s: want '%s' in: %s", cases[i].arg, cases[i].want,
                  err);
    }
}

/* A value that is no value of the etcd flag's type is refused as etcd refuses it, naming the
 * flag. */
Test(config, etcd34_flags_refuse_a_bad_value)
{
    kv_config c;
    char err[1024];
    static const struct {
        const char *arg, *want;
    } cases[] = {
        {"--bcrypt-cost=abc", "--bcrypt-cost: invalid value 'abc'"},
        {"--discovery-fallback=later", "--discovery-fallback: want exit or proxy"},
        {"--proxy=maybe", "--proxy: want off, readonly or on, got 'maybe'"},
        {"--backend-batch-interval=soon", "--backend-batch-interval: invalid duration 'soon'"},
        {"--experimental-warning-apply-duration=soon", "--experimental-warning-apply-duration: "
                                                       "invalid duration"},
        {"--experimental-watch-progress-notify-interval=often",
         "--experimental-watch-progress-notify-interval: invalid duration"},
        {"--backend-batch-limit=1.5", "--backend-batch-limit: invalid value '1.5'"},
        {"--max-wals=-1", "--max-wals: invalid value '-1'"},
        {"--proxy-dial-timeout=1s", "--proxy-dial-timeout: invalid value '1s'"},
        {"--pre-vote=maybe", "--pre-vote: want true or false"},
        {"--experimental-enable-lease-checkpoint=yes", "--experimental-enable-lease-checkpoint: "
                                                       "want true or false"},
        {"--force-new-cluster=no", "--force-new-cluster: want true or false"},
        {"--enable-grpc-gateway=off", "--enable-grpc-gateway: want true or false"},
        {"--debug=2", "--debug: want true or false"},
        {"--bcrypt-cost=-1", "--bcrypt-cost: invalid value '-1'"},
        {"--max-wals=", "--max-wals: invalid value ''"}, /* etcd's ParseUint refuses it too */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *argv[] = {"kvd", (char *)cases[i].arg};
        cr_expect_eq(parse(&c, err, sizeof(err), 2, argv), -EINVAL, "%s was accepted",
                     cases[i].arg);
        cr_expect(strstr(err, cases[i].want), "%s: want '%s' in: %s", cases[i].arg, cases[i].want,
                  err);
    }
}

/* The environment reaches them as every flag (ETCD_*, KVD_*), and a refusal names the
 * variable. */
Test(config, etcd34_flags_from_the_environment)
{
    kv_config c;
    char err[1024] = "";
    char *argv[] = {"kvd"};
    setenv("ETCD_EXPERIMENTAL_WATCH_PROGRESS_NOTIFY_INTERVAL", "2s", 1);
    setenv("ETCD_MAX_WALS", "5", 1);
    setenv("KVD_ENABLE_GRPC_GATEWAY", "false", 1);
    kv_config_default(&c);
    cr_assert_eq(kv_config_parse_env(&c, 1, argv, err, sizeof err), 0, "%s", err);
    cr_expect_eq(c.watch_progress_interval_ms, 2000);
    cr_expect_eq(c.enable_grpc_gateway, 0);
    setenv("ETCD_WAL_DIR", "/var/lib/etcd/wal", 1);
    kv_config_default(&c);
    cr_expect_lt(kv_config_parse_env(&c, 1, argv, err, sizeof err), 0);
    cr_expect(strstr(err, "environment variable ETCD_WAL_DIR: --wal-dir: '/var/lib/etcd/wal' "
                          "refused"),
              "%s", err);
    unsetenv("ETCD_EXPERIMENTAL_WATCH_PROGRESS_NOTIFY_INTERVAL");
    unsetenv("ETCD_MAX_WALS");
    unsetenv("KVD_ENABLE_GRPC_GATEWAY");
    unsetenv("ETCD_WAL_DIR");
}

/* etcd's duration flags are Go's time.ParseDuration: numbers with fractions and units in a
 * sequence, a sign, µs in both spellings. kvd's duration flags read the same, keeping their
 * plain number of milliseconds; a value kvd's millisecond settings cannot hold (negative,
 * under 1 ms, past 32 bits) is refused naming the flag, while etcd's flags with no kvd setting
 * take whatever etcd takes. */
Test(config, etcd34_durations_are_read_as_go_does)
{
    kv_config c;
    char err[1024] = "";
    char *argv[] = {"kvd",
                    "--grpc-keepalive-timeout=1m30s",
                    "--grpc-keepalive-interval=1h2m3.5s",
                    "--lease-checkpoint-interval=1.5h",
                    "--grpc-keepalive-min-time=+300ms",
                    "--experimental-corrupt-check-time=1500us",
                    "--malloc-trim-interval=2000\xc2\xb5s", /* U+00B5 MICRO SIGN */
                    "--send-stall-timeout=3000\xce\xbcs",   /* U+03BC GREEK SMALL LETTER MU */
                    "--peer-handshake-timeout=4000000ns",
                    "--metrics-request-timeout=.5s",
                    "--grpc-handshake-timeout=1500", /* kvd's extra: milliseconds */
                    "--grpc-max-connection-idle=-0",
                    "--auto-compaction-interval=2.5", /* whole milliseconds, as before */
                    "--backend-batch-interval=-1s",   /* etcd takes it; no effect in kvd */
                    "--experimental-warning-apply-duration=500us",
                    "--experimental-watch-progress-notify-interval=0"};
    int argc = (int)(sizeof argv / sizeof argv[0]);
    cr_assert_eq(parse(&c, err, sizeof(err), argc, argv), 0, "%s", err);
    cr_expect_eq(c.grpc_keepalive_timeout_ms, 90000);
    cr_expect_eq(c.grpc_keepalive_interval_ms, 3723500);
    cr_expect_eq(c.lease_checkpoint_interval_ms, 5400000);
    cr_expect_eq(c.grpc_keepalive_min_time_ms, 300);
    cr_expect_eq(c.corrupt_check_time_ms, 1);
    cr_expect_eq(c.malloc_trim_interval_ms, 2);
    cr_expect_eq(c.send_stall_timeout_ms, 3);
    cr_expect_eq(c.peer_handshake_timeout_ms, 4);
    cr_expect_eq(c.metrics_request_timeout_ms, 500);
    cr_expect_eq(c.grpc_handshake_timeout_ms, 1500);
    cr_expect_eq(c.grpc_max_connection_idle_ms, 0);
    cr_expect_eq(c.auto_compaction_interval_ms, 2);
    cr_expect_eq(c.watch_progress_interval_ms, 0);

    static const struct {
        const char *arg, *want;
    } bad[] = {
        {"--grpc-keepalive-timeout=-1s", "--grpc-keepalive-timeout: invalid duration '-1s' "
                                         "(must not be negative)"},
        {"--experimental-corrupt-check-time=500us", "--experimental-corrupt-check-time: invalid "
                                                    "duration '500us' (under 1ms"},
        {"--lease-checkpoint-interval=0.5", "--lease-checkpoint-interval: invalid duration "
                                            "'0.5' (under 1ms"},
        {"--send-stall-timeout=1112h", "--send-stall-timeout: invalid duration '1112h' (at most "
                                       "4000000000ms)"},
        {"--grpc-keepalive-timeout=1m30", "--grpc-keepalive-timeout: invalid duration '1m30'"},
        {"--grpc-keepalive-timeout=1e3ms", "invalid duration '1e3ms'"},
        {"--grpc-keepalive-timeout=0x10", "invalid duration '0x10'"},
        {"--grpc-keepalive-timeout=5S", "invalid duration '5S'"},
        {"--grpc-keepalive-timeout= 5s", "invalid duration ' 5s'"},
        {"--grpc-keepalive-timeout=.s", "invalid duration '.s'"},
        {"--grpc-keepalive-timeout=", "invalid duration ''"},
        {"--backend-batch-interval=2562048h", /* past int64 nanoseconds, as Go */
         "--backend-batch-interval: invalid duration '2562048h'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *one[] = {"kvd", (char *)bad[i].arg};
        cr_expect_eq(parse(&c, err, sizeof(err), 2, one), -EINVAL, "%s was accepted", bad[i].arg);
        cr_expect(strstr(err, bad[i].want), "%s: want '%s' in: %s", bad[i].arg, bad[i].want, err);
    }

    /* the environment reaches the same parser */
    char *none[] = {"kvd"};
    setenv("ETCD_GRPC_KEEPALIVE_INTERVAL", "1m30s", 1);
    kv_config_default(&c);
    cr_expect_eq(kv_config_parse_env(&c, 1, none, err, sizeof err), 0, "%s", err);
    cr_expect_eq(c.grpc_keepalive_interval_ms, 90000);
    unsetenv("ETCD_GRPC_KEEPALIVE_INTERVAL");
}

/* etcd's int and uint flags are Go's strconv.ParseInt/ParseUint in base 0: 0x, 0o, 0b and a
 * leading 0 (octal), '_' between digits or after the prefix. kvd's own flags stay decimal. */
Test(config, etcd34_integers_are_read_as_go_does)
{
    kv_config c;
    char err[1024] = "";
    char *argv[] = {"kvd",
                    "--election-timeout=0x3e8",
                    "--heartbeat-interval=0o144",
                    "--snapshot-count=0b101",
                    "--max-txn-ops=010", /* octal, as Go: 8 */
                    "--max-request-bytes=1_048_576",
                    "--quota-backend-bytes=+0x_4000_0000", /* an int64 flag in etcd: a sign */
                    "--max-concurrent-streams=0X1F",
                    "--experimental-compaction-batch-limit=0_10",
                    "--auth-token-ttl=0B11",
                    "--max-wals=0xff",
                    "--backend-batch-limit=-0x10",
                    "--bcrypt-cost=0o12",
                    "--max-connections=010"}; /* kvd's own flag: decimal */
    int argc = (int)(sizeof argv / sizeof argv[0]);
    cr_assert_eq(parse(&c, err, sizeof(err), argc, argv), 0, "%s", err);
    cr_expect_eq(c.election_timeout_ms, 1000);
    cr_expect_eq(c.heartbeat_interval_ms, 100);
    cr_expect_eq(c.snapshot_count, 5);
    cr_expect_eq(c.max_txn_ops, 8);
    cr_expect_eq(c.max_request_bytes, 1048576);
    cr_expect_eq(c.quota_backend_bytes, 1ULL << 30);
    cr_expect_eq(c.max_concurrent_streams, 31);
    cr_expect_eq(c.compaction_batch_limit, 8);
    cr_expect_eq(c.auth_token_ttl, 3);
    cr_expect_eq(c.max_connections, 10);

    static const char *const bad[] = {"",   "1e3", "0x",     "0b",  "0x_",  "1__0",
                                      "_1", "1_",  "0x3e8_", "08",  "0b2",  "+5",
                                      " 5", "5 ",  "-5",     "1.5", "0x1g", "18446744073709551616"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char arg[64], want[96];
        snprintf(arg, sizeof arg, "--snapshot-count=%s", bad[i]);
        snprintf(want, sizeof want, "--snapshot-count: invalid value '%s' (want 1..1099511627776)",
                 bad[i]);
        char *one[] = {"kvd", arg};
        cr_expect_eq(parse(&c, err, sizeof(err), 2, one), -EINVAL, "%s was accepted", arg);
        cr_expect_str_eq(err, want);
    }
    char *minus[] = {"kvd", "--quota-backend-bytes=-0x10"}; /* Go's number, out of kvd's range */
    cr_expect_eq(parse(&c, err, sizeof(err), 2, minus), -EINVAL);
    cr_expect(strstr(err, "--quota-backend-bytes: invalid value '-0x10' (want 0.."), "%s", err);
    char *hex_kvd[] = {"kvd", "--max-connections=0x10"}; /* kvd's own flag: decimal only */
    cr_expect_eq(parse(&c, err, sizeof(err), 2, hex_kvd), -EINVAL);
    cr_expect(strstr(err, "--max-connections: invalid value '0x10'"), "%s", err);
    char *int_bad[] = {"kvd", "--backend-batch-limit=0x"};
    cr_expect_eq(parse(&c, err, sizeof(err), 2, int_bad), -EINVAL);
    cr_expect(strstr(err, "--backend-batch-limit: invalid value '0x' (want an integer)"), "%s",
              err);

    /* the environment reaches the same parser */
    char *none[] = {"kvd"};
    setenv("ETCD_ELECTION_TIMEOUT", "0x3e8", 1);
    setenv("ETCD_SNAPSHOT_COUNT", "0b101", 1);
    kv_config_default(&c);
    cr_expect_eq(kv_config_parse_env(&c, 1, none, err, sizeof err), 0, "%s", err);
    cr_expect_eq(c.election_timeout_ms, 1000);
    cr_expect_eq(c.snapshot_count, 5);
    unsetenv("ETCD_ELECTION_TIMEOUT");
    unsetenv("ETCD_SNAPSHOT_COUNT");
}

/* etcd 3.4's --cors is a list of URLs, and "" is none ("URL scheme must be http, https, unix,
 * or unixs"): refused, naming the flag, where kvd used to read it as '*'. --host-whitelist is
 * a list of strings, where etcd takes "": still accepted. An empty ETCD_CORS is no setting. */
Test(config, empty_cors_is_refused)
{
    kv_config c;
    char err[1024] = "";
    char *eq[] = {"kvd", "--cors="};
    cr_expect_eq(parse(&c, err, sizeof(err), 2, eq), -EINVAL);
    cr_expect(strstr(err, "--cors: '' refused: etcd 3.4 refuses an empty value too (URL scheme "
                          "must be http, https, unix, or unixs); leave the flag out, or give '*'"),
              "%s", err);
    char *sep[] = {"kvd", "--cors", ""};
    cr_expect_eq(parse(&c, err, sizeof(err), 3, sep), -EINVAL);
    cr_expect(strstr(err, "--cors: '' refused"), "%s", err);

    char *hosts[] = {"kvd", "--host-whitelist=", "--cors=*"};
    cr_expect_eq(parse(&c, err, sizeof(err), 3, hosts), 0, "%s", err);

    char *none[] = {"kvd"};
    setenv("ETCD_CORS", "", 1);
    kv_config_default(&c);
    cr_expect_eq(kv_config_parse_env(&c, 1, none, err, sizeof err), 0, "%s", err);
    unsetenv("ETCD_CORS");
}
