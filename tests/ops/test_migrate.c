/*
 * ops_migrate: snapshots move between etcd 3.4 and kvd both ways (README "Moving from etcd, and
 * back"; docs in server/mvcc/snapshot_bbolt.c and snapshot_import.c).
 *  - etcd_to_kvd: a real etcd (/usr/bin/etcd) gets keys with several revisions, a lease with
 *    two keys, deletes, a compaction, a user with a role and a permission, auth enabled;
 *    `etcdctl snapshot save`, `kvctl snapshot restore`, kvd started on the restored dir:
 *    `etcdctl get "" --prefix -w json` prints the same kvs and revision through both, the lease
 *    keeps its TTL and keys, a read below the compaction fails as compacted, and the etcd
 *    user logs in to kvd with the password set in etcd (etcd's bcrypt hash).
 *  - kvd_to_etcd: the same writes to kvd; `etcdctl snapshot save` from kvd, `etcdctl snapshot
 *    status` reads it, `etcdctl snapshot restore`, etcd started on it: the same kvs, revision,
 *    lease and compaction point.
 *  - etcdctl_restore_dir_is_adopted: kvd started on the dir `etcdctl snapshot restore` wrote
 *    (etcd's layout) imports its db once (server/daemon/etcd_datadir.h): the same kvs, revision and
 *    lease; member/ stays; a restart keeps later writes and imports nothing again.
 *  - a_live_etcd_data_dir_is_refused: a stopped etcd member's own dir (writes in its WAL) is
 *    refused with what to do, and etcd still starts on it with its write.
 *  - make_mirror_both_ways: `etcdctl make-mirror` from etcd to kvd while puts and deletes go on
 *    in etcd, then from kvd to etcd while puts and deletes go on in kvd: each time the
 *    destination ends with the source's keys and values (make-mirror carries values, not
 *    revisions).
 */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

static char kvctl_bin[4096], etcdctl_bin[4096];

#define AUTH "--user=root:rootpw"

/* etcdctl against s (auth: the root user); fails the test when it fails. */
static void must(const kv_it_server *s, const char *a1, const char *a2, const char *a3,
                 const char *a4, const char *a5)
{
    kv_it_cmd_result r;
    memset(&r, 0, sizeof r);
    cr_assert_eq(kv_it_ctl(s, etcdctl_bin, NULL, 30000, &r, a1, a2, a3, a4, a5, NULL), 0);
    cr_assert_eq(r.exit_code, 0, "etcdctl %s %s %s %s: %s", a1, a2 ? a2 : "", a3 ? a3 : "",
                 a4 ? a4 : "", r.err);
    kv_it_cmd_result_free(&r);
}

/* The writes both directions start from; *lease gets the lease id (hex). */
static void populate(const kv_it_server *s, char lease[32], int with_auth)
{
    char k[32], v[32];
    for (int round = 0; round < 2; round++)
        for (int i = 0; i < 40; i++) {
            snprintf(k, sizeof k, "key%03d", i);
            snprintf(v, sizeof v, "value-%d-%d", round, i);
            if (round == 0 || i % 3 == 0)
                must(s, "put", k, v, NULL, NULL);
        }
    kv_it_cmd_result r;
    memset(&r, 0, sizeof r);
    cr_assert_eq(kv_it_ctl(s, etcdctl_bin, NULL, 30000, &r, "lease", "grant", "900", NULL), 0);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    cr_assert_eq(sscanf(r.out, "lease %31s granted", lease), 1, "%s", r.out);
    kv_it_cmd_result_free(&r);
    char la[64];
    snprintf(la, sizeof la, "--lease=%s", lease);
    must(s, "put", "leased/a", "1", la, NULL);
    must(s, "put", "leased/b", "2", la, NULL);
    must(s, "del", "key005", NULL, NULL, NULL);
    must(s, "del", "key010", "key013", NULL, NULL);
    must(s, "compact", "50", NULL, NULL, NULL);
    must(s, "put", "key007", "after-compaction", NULL, NULL);
    if (with_auth) {
        must(s, "user", "add", "root:rootpw", NULL, NULL);
        must(s, "user", "add", "alice:secret", NULL, NULL);
        must(s, "role", "add", "reader", NULL, NULL);
        must(s, "role", "grant-permission", "reader", "read", "key001");
        must(s, "user", "grant-role", "alice", "reader", NULL);
        must(s, "auth", "enable", NULL, NULL, NULL);
    }
}

/* `get "" --prefix -w json` through s: the kvs array and the header revision. */
static void get_all(const kv_it_server *s, int with_auth, char **kvs, long long *rev)
{
    kv_it_cmd_result r;
    memset(&r, 0, sizeof r);
    if (with_auth)
        cr_assert_eq(kv_it_ctl(s, etcdctl_bin, NULL, 30000, &r, AUTH, "get", "", "--prefix", "-w",
                               "json", NULL),
                     0);
    else
        cr_assert_eq(
            kv_it_ctl(s, etcdctl_bin, NULL, 30000, &r, "get", "", "--prefix", "-w", "json", NULL),
            0);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    const char *a = strstr(r.out, "\"kvs\":["), *b = strstr(r.out, "],\"count\"");
    const char *rv = strstr(r.out, "\"revision\":");
    cr_assert(a && b && rv && b > a, "%s", r.out);
    *rev = atoll(rv + 11);
    *kvs = strndup(a, (size_t)(b - a + 1));
    kv_it_cmd_result_free(&r);
}

static void restore_args(const kv_it_server *s, char *ic, char *ap, size_t n)
{
    snprintf(ic, n, "--initial-cluster=kvit=http://127.0.0.1:%u", s->peer_port);
    snprintf(ap, n, "--initial-advertise-peer-urls=http://127.0.0.1:%u", s->peer_port);
}

static void check_lease(const kv_it_server *s, const char *lease, int with_auth)
{
    kv_it_cmd_result r;
    memset(&r, 0, sizeof r);
    cr_assert_eq(kv_it_ctl(s, etcdctl_bin, NULL, 30000, &r, with_auth ? AUTH : "--dial-timeout=5s",
                           "lease", "timetolive", "--keys", lease, NULL),
                 0);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    cr_assert_not_null(strstr(r.out, "granted with TTL(900s)"), "%s", r.out);
    /* etcd lists a lease's keys in its map's order (Go: random), kvd in key order */
    cr_assert(strstr(r.out, "attached keys([leased/a leased/b])") ||
                  strstr(r.out, "attached keys([leased/b leased/a])"),
              "%s", r.out);
    kv_it_cmd_result_free(&r);
    memset(&r, 0, sizeof r);
    cr_assert_eq(kv_it_ctl(s, etcdctl_bin, NULL, 30000, &r, with_auth ? AUTH : "--dial-timeout=5s",
                           "get", "key001", "--rev=20", NULL),
                 0);
    cr_assert_neq(r.exit_code, 0, "a read below the compaction: %s", r.out);
    cr_assert_not_null(strstr(r.err, "compacted"), "%s", r.err);
    kv_it_cmd_result_free(&r);
}

Test(ops_migrate, etcd_to_kvd, .timeout = 240)
{
    cr_assert_eq(kv_it_kvctl_bin(kvctl_bin, sizeof kvctl_bin), 0, "%s", kvctl_bin);
    cr_assert_eq(kv_it_etcdctl_bin(etcdctl_bin, sizeof etcdctl_bin), 0, "%s", etcdctl_bin);
    kv_it_server e, k;
    cr_assert_eq(kv_it_server_init(&e, KV_IT_ETCD, NULL), 0);
    cr_assert_eq(kv_it_server_start(&e, 30000), 0, "etcd did not start");
    char lease[32];
    populate(&e, lease, 1);
    char snap[1200];
    snprintf(snap, sizeof snap, "%s/etcd.db", e.dir);
    must(&e, AUTH, "snapshot", "save", snap, NULL);
    cr_assert_eq(kv_it_server_init(&k, KV_IT_KVD, NULL), 0);
    rmdir(k.data_dir);
    char ic[256], ap[256], dd[4200];
    restore_args(&k, ic, ap, sizeof ic);
    snprintf(dd, sizeof dd, "--data-dir=%s", k.data_dir);
    const char *argv[] = {kvctl_bin, "snapshot", "restore", snap, "--name=kvit", ic, ap, dd, NULL};
    kv_it_cmd_result r;
    memset(&r, 0, sizeof r);
    cr_assert_eq(kv_it_run(argv, NULL, NULL, 0, 60000, &r), 0);
    cr_assert_eq(r.exit_code, 0, "kvctl snapshot restore: %s", r.err);
    kv_it_cmd_result_free(&r);
    cr_assert_eq(kv_it_server_start(&k, 30000), 0, "kvd did not start on the restored dir");
    char *ea, *ka;
    long long erev, krev;
    get_all(&e, 1, &ea, &erev);
    get_all(&k, 1, &ka, &krev);
    cr_assert_str_eq(ka, ea, "kvd and etcd differ");
    cr_assert_eq(krev, erev);
    cr_assert_gt(strlen(ea), 1000, "%s", ea);
    check_lease(&k, lease, 1);
    /* etcd's user logs in to kvd with its etcd password (bcrypt), and only with it */
    memset(&r, 0, sizeof r);
    cr_assert_eq(
        kv_it_ctl(&k, etcdctl_bin, NULL, 30000, &r, "--user=alice:secret", "get", "key001", NULL),
        0);
    cr_assert_eq(r.exit_code, 0, "alice: %s", r.err);
    cr_assert_not_null(strstr(r.out, "value-0-1"), "%s", r.out);
    kv_it_cmd_result_free(&r);
    memset(&r, 0, sizeof r);
    cr_assert_eq(
        kv_it_ctl(&k, etcdctl_bin, NULL, 30000, &r, "--user=alice:wrong", "get", "key001", NULL),
        0);
    cr_assert_neq(r.exit_code, 0, "a wrong password was accepted");
    cr_assert_not_null(strstr(r.err, "authentication failed"), "%s", r.err);
    kv_it_cmd_result_free(&r);
    memset(&r, 0, sizeof r);
    cr_assert_eq(
        kv_it_ctl(&k, etcdctl_bin, NULL, 30000, &r, "--user=alice:secret", "get", "key002", NULL),
        0);
    cr_assert_neq(r.exit_code, 0, "alice read outside her role");
    cr_assert_not_null(strstr(r.err, "permission denied"), "%s", r.err);
    kv_it_cmd_result_free(&r);
    free(ea);
    free(ka);
    kv_it_server_destroy(&e);
    kv_it_server_destroy(&k);
}

Test(ops_migrate, kvd_to_etcd, .timeout = 240)
{
    cr_assert_eq(kv_it_kvctl_bin(kvctl_bin, sizeof kvctl_bin), 0, "%s", kvctl_bin);
    cr_assert_eq(kv_it_etcdctl_bin(etcdctl_bin, sizeof etcdctl_bin), 0, "%s", etcdctl_bin);
    kv_it_server k, e;
    cr_assert_eq(kv_it_server_init(&k, KV_IT_KVD, NULL), 0);
    cr_assert_eq(kv_it_server_start(&k, 30000), 0, "kvd did not start");
    char lease[32];
    populate(&k, lease, 0);
    char snap[1200];
    snprintf(snap, sizeof snap, "%s/kvd.db", k.dir);
    must(&k, "snapshot", "save", snap, NULL, NULL);
    kv_it_cmd_result r;
    memset(&r, 0, sizeof r);
    const char *st[] = {etcdctl_bin, "snapshot", "status", "-w", "json", snap, NULL};
    cr_assert_eq(kv_it_run(st, NULL, NULL, 0, 30000, &r), 0);
    cr_assert_eq(r.exit_code, 0, "etcdctl snapshot status: %s", r.err);
    kv_it_cmd_result_free(&r);
    cr_assert_eq(kv_it_server_init(&e, KV_IT_ETCD, NULL), 0);
    rmdir(e.data_dir);
    char ic[256], ap[256], dd[4200];
    restore_args(&e, ic, ap, sizeof ic);
    snprintf(dd, sizeof dd, "--data-dir=%s", e.data_dir);
    const char *argv[] = {etcdctl_bin, "snapshot", "restore", snap, "--name=kvit",
                          ic,          ap,         dd,        NULL};
    memset(&r, 0, sizeof r);
    cr_assert_eq(kv_it_run(argv, NULL, NULL, 0, 60000, &r), 0);
    cr_assert_eq(r.exit_code, 0, "etcdctl snapshot restore: %s", r.err);
    kv_it_cmd_result_free(&r);
    cr_assert_eq(kv_it_server_start(&e, 30000), 0, "etcd did not start on the restored dir");
    char *ka, *ea;
    long long krev, erev;
    get_all(&k, 0, &ka, &krev);
    get_all(&e, 0, &ea, &erev);
    cr_assert_str_eq(ea, ka, "etcd and kvd differ");
    cr_assert_eq(erev, krev);
    cr_assert_gt(strlen(ka), 1000, "%s", ka);
    check_lease(&e, lease, 0);
    free(ea);
    free(ka);
    kv_it_server_destroy(&e);
    kv_it_server_destroy(&k);
}

/* `get "" --prefix` (keys and values) through s; malloc'd. */
static char *keys_values(const kv_it_server *s)
{
    kv_it_cmd_result r;
    memset(&r, 0, sizeof r);
    cr_assert_eq(kv_it_ctl(s, etcdctl_bin, NULL, 30000, &r, "get", "", "--prefix", NULL), 0);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    char *out = strdup(r.out ? r.out : "");
    kv_it_cmd_result_free(&r);
    return out;
}

/* Mirrors from src to dst with etcdctl make-mirror while prefix gets puts and deletes in src;
 * then waits (30 s at most) for dst to print the same keys and values as src. */
static void mirror(const kv_it_server *src, const kv_it_server *dst, const char *prefix)
{
    char ep[96], dep[96], log[1200];
    snprintf(ep, sizeof ep, "--endpoints=127.0.0.1:%u", src->client_port);
    snprintf(dep, sizeof dep, "127.0.0.1:%u", dst->client_port);
    snprintf(log, sizeof log, "%s/make-mirror.log", src->dir);
    kvt_proc p;
    kvt_proc_init(&p, log);
    const char *argv[] = {etcdctl_bin, ep, "make-mirror", dep, NULL};
    cr_assert_eq(kvt_proc_spawn(&p, argv), 0);
    char k[64], v[64];
    for (int i = 0; i < 60; i++) {
        snprintf(k, sizeof k, "%s%03d", prefix, i);
        snprintf(v, sizeof v, "v%d", i);
        must(src, "put", k, v, NULL, NULL);
        if (i % 7 == 3) {
            snprintf(k, sizeof k, "%s%03d", prefix, i - 2);
            must(src, "del", k, NULL, NULL, NULL);
        }
    }
    char *want = keys_values(src), *got = NULL;
    for (int t = 0; t < 60; t++) {
        free(got);
        got = keys_values(dst);
        if (strcmp(got, want) == 0)
            break;
        usleep(500 * 1000);
    }
    cr_assert(kvt_proc_alive(&p), "make-mirror exited (see %s)", log);
    kvt_proc_term(&p, 3000);
    cr_assert_str_eq(got, want, "the mirror differs from its source (log %s)", log);
    cr_assert_gt(strlen(want), 500, "%s", want);
    free(want);
    free(got);
}

Test(ops_migrate, make_mirror_both_ways, .timeout = 240)
{
    cr_assert_eq(kv_it_etcdctl_bin(etcdctl_bin, sizeof etcdctl_bin), 0, "%s", etcdctl_bin);
    kv_it_server e, k;
    cr_assert_eq(kv_it_server_init(&e, KV_IT_ETCD, NULL), 0);
    cr_assert_eq(kv_it_server_start(&e, 30000), 0, "etcd did not start");
    cr_assert_eq(kv_it_server_init(&k, KV_IT_KVD, NULL), 0);
    cr_assert_eq(kv_it_server_start(&k, 30000), 0, "kvd did not start");
    for (int i = 0; i < 20; i++) { /* before the mirror starts: its initial sync */
        char key[32];
        snprintf(key, sizeof key, "old/%02d", i);
        must(&e, "put", key, "x", NULL, NULL);
    }
    mirror(&e, &k, "from-etcd/");
    mirror(&k, &e, "from-kvd/");
    kv_it_server_destroy(&e);
    kv_it_server_destroy(&k);
}

/* etcd's restore procedure with kvd as the binary: `etcdctl snapshot restore` writes etcd's
 * layout (member/snap/db, member/wal), and kvd started on that dir imports the db once
 * (server/daemon/etcd_datadir.h): the same kvs, revision and lease as the etcd the snapshot came
 * from; member/ is left for etcd; a restart keeps what was written since. */
Test(ops_migrate, etcdctl_restore_dir_is_adopted, .timeout = 240)
{
    cr_assert_eq(kv_it_etcdctl_bin(etcdctl_bin, sizeof etcdctl_bin), 0, "%s", etcdctl_bin);
    kv_it_server e, k;
    cr_assert_eq(kv_it_server_init(&e, KV_IT_ETCD, NULL), 0);
    cr_assert_eq(kv_it_server_start(&e, 30000), 0, "etcd did not start");
    char lease[32];
    populate(&e, lease, 0);
    char snap[1200];
    snprintf(snap, sizeof snap, "%s/etcd.db", e.dir);
    must(&e, "snapshot", "save", snap, NULL, NULL);
    cr_assert_eq(kv_it_server_init(&k, KV_IT_KVD, NULL), 0);
    rmdir(k.data_dir);
    char ic[256], ap[256], dd[4200];
    restore_args(&k, ic, ap, sizeof ic);
    snprintf(dd, sizeof dd, "--data-dir=%s", k.data_dir);
    const char *argv[] = {etcdctl_bin, "snapshot", "restore", snap, "--name=kvit",
                          ic,          ap,         dd,        NULL};
    kv_it_cmd_result r;
    memset(&r, 0, sizeof r);
    cr_assert_eq(kv_it_run(argv, NULL, NULL, 0, 60000, &r), 0);
    cr_assert_eq(r.exit_code, 0, "etcdctl snapshot restore: %s", r.err);
    kv_it_cmd_result_free(&r);
    cr_assert_eq(kv_it_server_start(&k, 30000), 0, "kvd did not start on etcdctl's dir");
    char *log = NULL;
    cr_assert_eq(kv_it_server_log(&k, &log), 0);
    cr_assert_not_null(strstr(log, "kvd: adopted the data dir etcdctl snapshot restore wrote"),
                       "%s", log);
    free(log);
    char *ea, *ka;
    long long erev, krev;
    get_all(&e, 0, &ea, &erev);
    get_all(&k, 0, &ka, &krev);
    cr_assert_str_eq(ka, ea, "kvd and etcd differ");
    cr_assert_eq(krev, erev);
    check_lease(&k, lease, 0);
    char db[4300];
    snprintf(db, sizeof db, "%s/member/snap/db", k.data_dir);
    cr_assert_eq(access(db, F_OK), 0, "member/snap/db was removed");
    /* a write after the import survives a restart, which imports nothing again */
    must(&k, "put", "after-import", "kept", NULL, NULL);
    cr_assert_eq(kv_it_server_restart(&k, 10000, 30000), 0);
    log = NULL;
    cr_assert_eq(kv_it_server_log(&k, &log), 0);
    cr_assert_null(strstr(log, "adopted the data dir"), "imported again: %s", log);
    free(log);
    memset(&r, 0, sizeof r);
    cr_assert_eq(kv_it_ctl(&k, etcdctl_bin, NULL, 30000, &r, "get", "after-import", NULL), 0);
    cr_assert_not_null(strstr(r.out, "kept"), "%s %s", r.out, r.err);
    kv_it_cmd_result_free(&r);
    free(ea);
    free(ka);
    kv_it_server_destroy(&e);
    kv_it_server_destroy(&k);
}

/* A live etcd member's dir holds writes in its WAL that kvd does not read: kvd refuses it and
 * says what to do, and leaves etcd's files as they were (etcd still starts on them). */
Test(ops_migrate, a_live_etcd_data_dir_is_refused, .timeout = 240)
{
    cr_assert_eq(kv_it_etcdctl_bin(etcdctl_bin, sizeof etcdctl_bin), 0, "%s", etcdctl_bin);
    kv_it_server e, k;
    cr_assert_eq(kv_it_server_init(&e, KV_IT_ETCD, NULL), 0);
    cr_assert_eq(kv_it_server_start(&e, 30000), 0, "etcd did not start");
    must(&e, "put", "live", "in-the-wal", NULL, NULL);
    cr_assert_eq(kv_it_server_stop(&e, 10000), 0);
    cr_assert_eq(kv_it_server_init(&k, KV_IT_KVD, NULL), 0);
    rmdir(k.data_dir);
    cr_assert_eq(rename(e.data_dir, k.data_dir), 0, "%s -> %s", e.data_dir, k.data_dir);
    cr_assert_neq(kv_it_server_start(&k, 20000), 0, "kvd started on a live etcd member's dir");
    char *log = NULL;
    cr_assert_eq(kv_it_server_log(&k, &log), 0);
    cr_assert_not_null(strstr(log, "kvd: refusing to start: "), "%s", log);
    cr_assert_not_null(strstr(log, "holds a live etcd member: its WAL has"), "%s", log);
    cr_assert_not_null(strstr(log, "etcdctl snapshot save"), "%s", log);
    free(log);
    char mdb[4300];
    snprintf(mdb, sizeof mdb, "%s/data.mdb", k.data_dir);
    cr_assert_neq(access(mdb, F_OK), 0, "kvd wrote its data file into etcd's dir");
    /* etcd's files are intact: etcd starts on them and has the write */
    cr_assert_eq(rename(k.data_dir, e.data_dir), 0);
    cr_assert_eq(kv_it_server_start(&e, 30000), 0, "etcd no longer starts on its dir");
    kv_it_cmd_result r;
    memset(&r, 0, sizeof r);
    cr_assert_eq(kv_it_ctl(&e, etcdctl_bin, NULL, 30000, &r, "get", "live", NULL), 0);
    cr_assert_not_null(strstr(r.out, "in-the-wal"), "%s %s", r.out, r.err);
    kv_it_cmd_result_free(&r);
    kv_it_server_destroy(&e);
    kv_it_server_destroy(&k);
}
