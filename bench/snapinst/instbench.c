/*
 * instbench: fills a "leader" store with --mb MiB of values (--value-size bytes each, 1000
 * puts per batch), copies its environment as node_snap.c does (compacting copy), fills a
 * "follower" store with --old-mb MiB of other keys, then installs the copy into the follower
 * (kv_store_install_begin + kv_raftlog_install_into + commit + publish + swap) and prints the
 * time of each step and the key counts. Before the install became a file swap, it copied the
 * state in one LMDB write transaction, which fails with MDB_TXN_FULL above ~512 MiB of dirty
 * pages.
 * Usage: instbench [--mb N] [--old-mb N] [--value-size N] [--dir DIR]
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "apply/apply.h"
#include "internal.pb-c.h"
#include "mvcc/store.h"
#include "raftlog/raftlog.h"
#include "kvt_util.h"

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
}

static int fill(kv_store *s, const char *prefix, long n, long vsize)
{
    char *val = malloc((size_t)vsize);
    char key[64];
    uint64_t idx = 0;
    memset(val, 'v', (size_t)vsize);
    for (long i = 0; i < n;) {
        kv_store_batch *b;
        if (kv_store_batch_begin(s, &b))
            return -1;
        for (int k = 0; k < 1000 && i < n; k++, i++) {
            snprintf(key, sizeof key, "%s%010ld", prefix, i);
            Etcdserverpb__PutRequest p = ETCDSERVERPB__PUT_REQUEST__INIT;
            p.key.data = (uint8_t *)key;
            p.key.len = strlen(key);
            p.value.data = (uint8_t *)val;
            p.value.len = (size_t)vsize;
            Kvdpb__InternalRequest ir = KVDPB__INTERNAL_REQUEST__INIT;
            ir.request_case = KVDPB__INTERNAL_REQUEST__REQUEST_PUT;
            ir.put = &p;
            size_t len = kvdpb__internal_request__get_packed_size(&ir);
            uint8_t *buf = malloc(len);
            kvdpb__internal_request__pack(&ir, buf);
            kv_result res;
            int rc = kv_store_apply(s, b, ++idx, buf, len, NULL, &res);
            free(buf);
            free(res.resp);
            if (rc || (int)res.err) {
                fprintf(stderr, "apply: %d %s\n", rc, kv_etcd_err_msg(res.err));
                kv_store_batch_abort(s, b);
                return -1;
            }
        }
        if (kv_store_batch_commit_nometasync(s, b))
            return -1;
    }
    free(val);
    return 0;
}

static kv_store *open_store(const char *dir, int nosync)
{
    kv_store_config cfg;
    kv_store_config_default(&cfg);
    cfg.dir = dir;
    cfg.quota_bytes = (size_t)8 << 30;
    cfg.unsafe_no_fsync = nosync; /* the leader: filling only */
    kv_store *s = NULL;
    if (kv_store_open(&s, &cfg))
        return NULL;
    kv_store_set_deterministic(s, 1);
    return s;
}

int main(int argc, char **argv)
{
    long mb = 600, old_mb = 64, vsize = 4096;
    char dir[256] = "";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--mb"))
            mb = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--old-mb"))
            old_mb = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--value-size"))
            vsize = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--dir"))
            snprintf(dir, sizeof(dir), "%s", argv[i + 1]);
    }
    if (!dir[0]) {
        snprintf(dir, sizeof(dir), "/tmp/instbench-XXXXXX");
        if (!mkdtemp(dir))
            return 1;
    }
    char ldir[300], fdir[300], snap[320];
    snprintf(ldir, sizeof ldir, "%s/leader", dir);
    snprintf(fdir, sizeof fdir, "%s/follower", dir);
    snprintf(snap, sizeof snap, "%s/follower/received.snap", dir);
    kv_store *l = open_store(ldir, 1), *f = open_store(fdir, 0); /* the follower syncs */
    if (!l || !f)
        return 1;
    double t0 = now_ms();
    if (fill(l, "new/", mb * 1024 * 1024 / vsize, vsize) ||
        fill(f, "old/", old_mb * 1024 * 1024 / vsize, vsize))
        return 1;
    double t1 = now_ms();
    int fd = open(snap, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || kv_store_copy_fd(l, fd, MDB_CP_COMPACT) || fsync(fd))
        return 1;
    close(fd);
    double t2 = now_ms();
    struct stat sb;
    stat(snap, &sb);
    kv_store_status ls;
    kv_store_get_status(l, &ls);
    struct raft_snapshot_meta m = {.index = ls.applied_index, .term = 2};
    m.conf.n_voters = 1;
    m.conf.voters[0] = 1;
    struct raft_hard_state hs = {.term = 2, .vote = 1, .commit = ls.applied_index};
    kv_store_install *in = NULL;
    int rc = kv_store_install_begin(f, snap, &in);
    if (rc == 0)
        rc = kv_raftlog_install_into(kv_store_install_txn(in), &m, &hs, NULL, 0);
    if (rc) {
        kv_store_install_abort(in);
        fprintf(stderr, "install: %s\n", strerror(-rc));
        return 1;
    }
    if ((rc = kv_store_install_commit(f, in))) {
        fprintf(stderr, "commit: %s\n", strerror(-rc));
        return 1;
    }
    double t3 = now_ms();
    int old_fd = -1;
    if ((rc = kv_store_install_publish(f, snap, &old_fd))) {
        fprintf(stderr, "publish: %s\n", strerror(-rc));
        return 1;
    }
    double t4 = now_ms();
    kv_store_install_swap(f);
    double t5 = now_ms();
    if (old_fd >= 0)
        close(old_fd);
    double t6 = now_ms();
    kv_store_status fs;
    kv_store_get_status(f, &fs);
    printf("state %ld MiB (%lld bytes compacted copy), follower held %ld MiB\n", mb,
           (long long)sb.st_size, old_mb);
    printf("fill %.0f ms, leader copy %.0f ms\n", t1 - t0, t2 - t1);
    printf("install: rewrite+commit %.1f ms, rename over data.mdb %.1f ms, swap %.1f ms, "
           "old file freed %.1f ms\n",
           t3 - t2, t4 - t3, t5 - t4, t6 - t5);
    printf("follower after install: keys %llu (leader %llu), applied %llu (leader %llu)\n",
           (unsigned long long)fs.keys, (unsigned long long)ls.keys,
           (unsigned long long)fs.applied_index, (unsigned long long)ls.applied_index);
    kv_store_close(l);
    kv_store_close(f);
    if (kvt_rmtree(dir) != 0)
        return 1;
    return fs.keys == ls.keys && fs.applied_index == ls.applied_index ? 0 : 2;
}
