/* walbench: what one durable write costs on this disk, in the same run (docs/raftlog.md,
 * "The WAL module"):
 *   floor  pwrite of 4 KiB into a preallocated file + fdatasync (the physical limit)
 *   wal    kv_wal: a ready of N entries of 256 B + the hard state, kv_wal_sync
 *   lmdb   a durable LMDB commit of one 256-byte put (today's persist: data pages, then
 *          the meta page)
 *   open   kv_wal_open of a full tail (105,000 entries of 256 B: --snapshot-count + catch-up)
 * Usage: walbench [--dir D] [--iters N]. D must be on the disk under test (not tmpfs);
 * default: a fresh directory under the current one, removed at the end. */
#include <errno.h>
#include <fcntl.h>
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "floor.h"
#include "wal/wal.h"
#include "kvt_util.h"

static void report(const char *name, double *v, int n, double floor_p50, double per_op)
{
    qsort(v, (size_t)n, sizeof *v, kv_bench_cmp_double);
    double p50 = v[n / 2], p99 = v[(n * 99) / 100];
    char fl[32] = "(not counted)";
    if (per_op >= 0)
        snprintf(fl, sizeof fl, "%.2f", per_op);
    printf("%-34s p50 %8.0f us  p99 %8.0f us  p50/floor %5.2f  flushes/op %s\n", name, p50, p99,
           floor_p50 > 0 ? p50 / floor_p50 : 1.0, fl);
}

static double bench_floor(const char *dir, int iters, double *v)
{
    if (kv_bench_fsync_floor(dir, iters, v) != 0)
        exit(1);
    return v[iters / 2];
}

static void bench_wal(const char *dir, int iters, int per_ready, double *v, double floor_p50)
{
    char p[4096], err[512];
    snprintf(p, sizeof p, "%s/wal%d", dir, per_ready);
    kv_wal *w;
    if (kv_wal_open(&w, p, NULL, err, sizeof err)) {
        fprintf(stderr, "walbench: %s\n", err);
        exit(1);
    }
    struct kv_wal_stats s0, s1;
    kv_wal_stats(w, &s0);
    static uint8_t data[256];
    struct raft_entry e[64];
    raft_index next = 1;
    for (int i = 0; i < iters; i++) {
        for (int k = 0; k < per_ready; k++)
            e[k] = (struct raft_entry){
                .term = 1, .index = next + (raft_index)k, .data = data, .len = sizeof data};
        struct raft_hard_state hs = {.term = 1, .vote = 1, .commit = next};
        double t = kv_bench_now_us();
        if (kv_wal_append(w, e, (size_t)per_ready) || kv_wal_set_hard_state(w, &hs) ||
            kv_wal_sync(w)) {
            fprintf(stderr, "walbench: wal write failed\n");
            exit(1);
        }
        v[i] = kv_bench_now_us() - t;
        next += (raft_index)per_ready;
        kv_wal_end_cycle(w);
    }
    kv_wal_stats(w, &s1);
    kv_wal_close(w);
    char name[64];
    snprintf(name, sizeof name, "wal: ready of %d x 256 B + hs", per_ready);
    report(name, v, iters, floor_p50, (double)(s1.fsyncs - s0.fsyncs) / iters);
    if (kvt_rmtree(p) != 0)
        fprintf(stderr, "walbench: could not remove %s\n", p);
}

static void bench_lmdb(const char *dir, int iters, double *v, double floor_p50)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/lmdb", dir);
    mkdir(p, 0700);
    MDB_env *env;
    MDB_dbi dbi;
    MDB_txn *txn;
    if (mdb_env_create(&env) || mdb_env_set_mapsize(env, 1u << 30) ||
        mdb_env_open(env, p, 0, 0600)) {
        fprintf(stderr, "walbench: lmdb open\n");
        exit(1);
    }
    mdb_txn_begin(env, NULL, 0, &txn);
    mdb_dbi_open(txn, NULL, 0, &dbi);
    mdb_txn_commit(txn);
    static uint8_t val[256];
    for (int i = 0; i < iters; i++) {
        char key[32];
        snprintf(key, sizeof key, "k%08d", i % 1000);
        MDB_val k = {strlen(key), key}, d = {sizeof val, val};
        double t = kv_bench_now_us();
        if (mdb_txn_begin(env, NULL, 0, &txn) || mdb_put(txn, dbi, &k, &d, 0) ||
            mdb_txn_commit(txn)) {
            fprintf(stderr, "walbench: lmdb commit failed\n");
            exit(1);
        }
        v[i] = kv_bench_now_us() - t;
    }
    mdb_env_close(env);
    report("lmdb: durable commit of 1 put", v, iters, floor_p50, -1);
    if (kvt_rmtree(p) != 0)
        fprintf(stderr, "walbench: could not remove %s\n", p);
}

/* Startup with a full tail: --snapshot-count (100,000) + the catch-up 5,000 entries of 256 B
 * written in readies of 64, then kv_wal_open timed (it reads and checks every record). */
static void bench_open(const char *dir, int entries)
{
    char p[4096], err[512];
    snprintf(p, sizeof p, "%s/walopen", dir);
    kv_wal *w;
    if (kv_wal_open(&w, p, NULL, err, sizeof err)) {
        fprintf(stderr, "walbench: %s\n", err);
        exit(1);
    }
    static uint8_t data[256];
    struct raft_entry e[64];
    for (int i = 0; i < entries; i += 64) {
        int n = entries - i < 64 ? entries - i : 64;
        for (int k = 0; k < n; k++)
            e[k] = (struct raft_entry){
                .term = 1, .index = (raft_index)(i + k + 1), .data = data, .len = sizeof data};
        if (kv_wal_append(w, e, (size_t)n) || kv_wal_sync(w)) {
            fprintf(stderr, "walbench: wal write failed\n");
            exit(1);
        }
    }
    kv_wal_close(w);
    double t = kv_bench_now_us();
    if (kv_wal_open(&w, p, NULL, err, sizeof err)) {
        fprintf(stderr, "walbench: %s\n", err);
        exit(1);
    }
    double dt = kv_bench_now_us() - t;
    struct kv_wal_stats s;
    kv_wal_stats(w, &s);
    kv_wal_close(w);
    printf("%-34s %8.0f ms  (%llu entries, %llu segments)\n", "open: recover a full tail", dt / 1e3,
           (unsigned long long)(s.last - s.first + 1), (unsigned long long)s.segments);
    if (kvt_rmtree(p) != 0)
        fprintf(stderr, "walbench: could not remove %s\n", p);
}

int main(int argc, char **argv)
{
    const char *dir = NULL;
    int iters = 300;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--dir") && i + 1 < argc)
            dir = argv[++i];
        else if (!strcmp(argv[i], "--iters") && i + 1 < argc)
            iters = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: walbench [--dir D] [--iters N]\n");
            return 2;
        }
    }
    if (iters < 10)
        iters = 10;
    char tmpl[] = "walbench.XXXXXX";
    int own = !dir;
    if (own && !(dir = mkdtemp(tmpl))) {
        perror("mkdtemp");
        return 1;
    }
    double *v = malloc(sizeof *v * (size_t)iters);
    if (!v)
        return 1;
    double floor_p50 = bench_floor(dir, iters, v);
    report("floor: 4 KiB pwrite + fdatasync", v, iters, floor_p50, -1);
    bench_wal(dir, iters, 1, v, floor_p50);
    bench_wal(dir, iters, 64, v, floor_p50);
    bench_lmdb(dir, iters, v, floor_p50);
    bench_open(dir, 105000);
    free(v);
    if (own)
        rmdir(dir);
    return 0;
}
