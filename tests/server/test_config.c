#include "daemon/config.h"

#include <criterion/criterion.h>
#include <errno.h>
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
