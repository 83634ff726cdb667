/*
 * mvcc_install: installing a raft snapshot (server/mvcc/install.c + raftlog_install.c) is a
 * file swap whose only write transaction is over the received file's per-member records, so
 * it works for a state that a single-transaction copy cannot hold (a copy in one
 * LMDB txn failed with MDB_TXN_FULL above ~512 MiB of dirty pages; here the same limit is
 * made small with a small LMDB map: the follower's map cannot hold its old state and the new
 * one at once, as a one-transaction copy needs).
 */
#include "kvt_store.h"

#include "raftlog/raftlog.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static kvt_store leader, follower;

static void fini(void)
{
    kvt_store_close(&leader);
    kvt_store_close(&follower);
}

/* n puts of vlen-byte values under prefix (each its own batch). */
static void fill(kvt_store *t, const char *prefix, int n, size_t vlen)
{
    char *v = malloc(vlen + 1);
    cr_assert_not_null(v);
    memset(v, 'x', vlen);
    v[vlen] = 0;
    char k[64];
    for (int i = 0; i < n; i++) {
        snprintf(k, sizeof k, "%s%05d", prefix, i);
        v[0] = (char)('a' + i % 26);
        kvt_store_put(t, k, v, 0);
    }
    free(v);
}

/* The leader's environment copied into a file, as node_snap.c sends it. */
static void copy_env(kvt_store *t, const char *path)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    cr_assert_geq(fd, 0);
    cr_assert_eq(kv_store_copy_fd(t->s, fd, MDB_CP_COMPACT), 0);
    close(fd);
}

static kv_store_config small_cfg(size_t quota)
{
    kv_store_config c;
    kv_store_config_default(&c);
    c.quota_bytes = quota;
    c.unsafe_no_fsync = 1; /* speed: durability is not what this test checks */
    return c;
}

Test(mvcc_install, snapshot_larger_than_a_one_txn_copy_fits_is_installed, .fini = fini,
     .timeout = 120)
{
    /* follower: map = 8 MiB quota + 16 MiB headroom = 24 MiB, holding ~7 MiB of old keys */
    kv_store_config fc = small_cfg((size_t)8 << 20);
    kvt_store_open(&follower, &fc);
    kv_store_identity me = {.member_id = 0x1111, .cluster_id = 0x99}, have;
    snprintf(me.name, sizeof me.name, "follower");
    cr_assert_eq(kv_store_identity_check(follower.s, &me, &have, 1), 1);
    fill(&follower, "old/", 440, 16 << 10);
    /* leader: ~19 MiB of other keys (old + new > 24 MiB: no single txn of the follower's
     * environment can replace one by the other) */
    kv_store_config lc = small_cfg((size_t)64 << 20);
    kvt_store_open(&leader, &lc);
    kv_store_identity other = {.member_id = 0x2222, .cluster_id = 0x99};
    snprintf(other.name, sizeof other.name, "leader");
    cr_assert_eq(kv_store_identity_check(leader.s, &other, &have, 1), 1);
    fill(&leader, "new/", 1200, 16 << 10);
    kv_store_status ls;
    cr_assert_eq(kv_store_get_status(leader.s, &ls), 0);

    char path[512];
    snprintf(path, sizeof path, "%s/received.snap", follower.dir);
    copy_env(&leader, path);
    struct stat sb;
    cr_assert_eq(stat(path, &sb), 0);
    fprintf(stderr, "  snapshot file %lld bytes, follower map %zu bytes\n", (long long)sb.st_size,
            kv_store_map_size(fc.quota_bytes));
    cr_assert_gt((size_t)sb.st_size + ((size_t)7 << 20), kv_store_map_size(fc.quota_bytes));

    cr_assert_eq(kv_store_snapshot_check(path), 0);
    struct raft_snapshot_meta m = {.index = ls.applied_index, .term = 3};
    m.conf.n_voters = 3;
    m.conf.voters[0] = 0x1111, m.conf.voters[1] = 0x2222, m.conf.voters[2] = 0x3333;
    struct raft_hard_state hs = {.term = 4, .vote = 0x2222, .commit = ls.applied_index + 1};
    struct raft_entry e = {.index = ls.applied_index + 1,
                           .term = 4,
                           .type = RAFT_ENTRY_NORMAL,
                           .data = NULL,
                           .len = 0};
    kv_store_install *in = NULL;
    cr_assert_eq(kv_store_install_begin(follower.s, path, &in), 0);
    cr_assert_eq(kv_raftlog_install_into(kv_store_install_txn(in), &m, &hs, &e, 1), 0);
    cr_assert_eq(kv_store_install_commit(follower.s, in), 0);
    int old_fd = -1;
    cr_assert_eq(kv_store_install_publish(follower.s, path, &old_fd), 0);
    cr_assert_eq(access(path, F_OK), -1, "the received file was renamed over data.mdb");
    cr_assert_eq(kv_store_install_swap(follower.s), 0);
    if (old_fd >= 0)
        close(old_fd);

    /* the leader's state, this member's identity */
    kv_store_status fs;
    cr_assert_eq(kv_store_get_status(follower.s, &fs), 0);
    cr_assert_eq(fs.applied_index, ls.applied_index);
    cr_assert_eq(fs.revision, ls.revision);
    cr_assert_eq(fs.keys, 1200);
    Mvccpb__KeyValue *kv = kvt_store_get(&follower, "old/00001", 0);
    cr_assert_null(kv, "the old state is gone");
    kv = kvt_store_get(&follower, "new/01199", 0);
    cr_assert_not_null(kv);
    mvccpb__key_value__free_unpacked(kv, NULL);
    cr_assert_eq(kv_store_identity_check(follower.s, &me, &have, 0), 0, "identity kept");
    cr_assert_eq(have.member_id, 0x1111);
    uint32_t h1, h2;
    int64_t c1, c2;
    cr_assert_eq(kv_store_hash_kv(follower.s, 0, &h1, &c1), 0);
    cr_assert_eq(kv_store_hash_kv(leader.s, 0, &h2, &c2), 0);
    cr_assert_eq(h1, h2, "HashKV differs after install");

    /* the raft records are this member's: snapshot meta, hard state, the entry */
    kv_raftlog *rl = NULL;
    cr_assert_eq(kv_raftlog_open(&rl, kv_store_env(follower.s)), 0);
    const struct raft_storage *st = kv_raftlog_storage(rl);
    struct raft_hard_state got;
    cr_assert_eq(st->initial_state(st->ctx, &got), 0);
    cr_assert_eq(got.term, 4);
    cr_assert_eq(got.vote, 0x2222);
    cr_assert_eq(st->first_index(st->ctx), m.index + 1);
    cr_assert_eq(st->last_index(st->ctx), m.index + 1);
    struct raft_snapshot sn;
    cr_assert_eq(st->snapshot(st->ctx, &sn), 0);
    cr_assert_eq(sn.meta.index, m.index);
    cr_assert_eq(sn.meta.conf.n_voters, 3);
    kv_raftlog_end_cycle(rl);
    kv_raftlog_close(rl);

    /* the store goes on: a write after the install, and a reopen */
    follower.index = fs.applied_index;         /* kvt_store applies at the next index */
    kv_store_set_deterministic(follower.s, 1); /* a cluster member: no file-size guard */
    kvt_store_put(&follower, "after", "1", 0);
    kvt_store_reopen(&follower);
    kv = kvt_store_get(&follower, "after", 0);
    cr_assert_not_null(kv);
    mvccpb__key_value__free_unpacked(kv, NULL);
}

Test(mvcc_install, a_file_that_is_not_a_store_is_refused_and_nothing_changes, .fini = fini)
{
    kv_store_config fc = small_cfg((size_t)8 << 20);
    kvt_store_open(&follower, &fc);
    kvt_store_put(&follower, "keep", "1", 0);
    kvt_store_open(&leader, &fc);
    char path[512];
    snprintf(path, sizeof path, "%s/garbage.snap", follower.dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    for (int i = 0; i < 4096; i++)
        fputs("not an lmdb file\n", f);
    fclose(f);
    cr_assert_eq(kv_store_snapshot_check(path), -EBADMSG);
    kv_store_install *in = NULL;
    int rc = kv_store_install_begin(follower.s, path, &in);
    cr_assert_lt(rc, 0);
    cr_assert_null(in);
    Mvccpb__KeyValue *kv = kvt_store_get(&follower, "keep", 0);
    cr_assert_not_null(kv);
    mvccpb__key_value__free_unpacked(kv, NULL);
}
