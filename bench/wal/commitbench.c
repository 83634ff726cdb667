/*
 * commitbench: what the state machine's LMDB commit costs per put as a function of how many
 * puts one commit carries (docs/ARCHITECTURE.md, "Flushes on the critical path"). With the
 * WAL, a put's answer waits for one WAL flush; the apply of the next ready waits for the
 * previous ready's LMDB commit (one writer), whose flush grows with the pages it dirtied.
 * This measures that cost on kvd's own store (kv_store_apply + the MDB_NOMETASYNC commit a
 * ready uses), store-level, no server:
 *   preload --keys keys of --value-size bytes (the put benchmark's keyspace: 10,000 x 256 B);
 *   for each batch size N: --rounds commits of N puts to random keys; per put, the median
 *   apply time and commit time (write + fdatasync of the dirtied pages) and the bytes the
 *   commit wrote (/proc/self/io wchar), in 4 KiB pages per put, and the write calls it made
 *   (syscw): LMDB writes each run of adjacent dirty pages with one call, so calls close to
 *   the pages mean the pages are scattered over the file (bench/README.md, "Where a commit's
 *   pages land").
 * Usage: commitbench [--keys N] [--value-size N] [--rounds N] [--sizes N,N,..]
 *                    [--pin-commits N] [--dir DIR]
 * (DIR on the disk under test, not tmpfs; default: a fresh directory under /var/tmp, removed
 * at the end). --pin-commits N (0, the default: none) holds a read transaction open over the
 * measured commits and renews it every N commits: LMDB cannot reuse a page freed after the oldest
 * reader began, so while it is held every page a commit writes is new, at the end of the file, and
 * adjacent. Not a test: it prints figures.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include <lmdb.h>

#include "apply/apply.h"
#include "floor.h"
#include "internal.pb-c.h"
#include "mvcc/store.h"
#include "kvt_util.h"

#define MAX_ROUNDS 5000
#define MAX_SIZES 8

typedef struct opts {
    long keys, vsize, rounds, pin_commits;
    long sizes[MAX_SIZES];
    size_t nsizes;
    char dir[256];
} opts;

static uint64_t next_rand(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

/* One put of key/<k> (value byte r) at index idx in batch b. 0 or -1. */
static int put(kv_store *s, kv_store_batch *b, uint64_t idx, long k, uint8_t *val, long vsize,
               uint8_t r)
{
    char key[32];
    snprintf(key, sizeof(key), "bench/%08ld", k);
    val[0] = r;
    Etcdserverpb__PutRequest p = ETCDSERVERPB__PUT_REQUEST__INIT;
    p.key.data = (uint8_t *)key;
    p.key.len = strlen(key);
    p.value.data = val;
    p.value.len = (size_t)vsize;
    Kvdpb__InternalRequest ir = KVDPB__INTERNAL_REQUEST__INIT;
    ir.request_case = KVDPB__INTERNAL_REQUEST__REQUEST_PUT;
    ir.put = &p;
    uint8_t buf[4096 + 64];
    size_t n = kvdpb__internal_request__get_packed_size(&ir);
    if (n > sizeof(buf))
        return -1;
    n = kvdpb__internal_request__pack(&ir, buf);
    kv_result res;
    int rc = kv_store_apply(s, b, idx, buf, n, NULL, &res);
    free(res.resp);
    if (rc == 0 && res.err != KV_ERR_NONE) {
        fprintf(stderr, "commitbench: apply: %s\n", kv_etcd_err_msg(res.err));
        rc = -1;
    }
    return rc;
}

/* What this process passed to write calls so far (/proc/self/io): bytes (wchar) and calls
 * (syscw); a commit's writes are LMDB's pwrite/writev of the pages it dirtied. -1 in both if
 * unreadable. */
static void written(long long *bytes, long long *calls)
{
    *bytes = *calls = -1;
    FILE *f = fopen("/proc/self/io", "r");
    if (!f)
        return;
    char line[128];
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "wchar: %lld", bytes) != 1)
            (void)sscanf(line, "syscw: %lld", calls);
    fclose(f);
}

static const char *path_of(const char *dir, const char *name, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%s", dir, name);
    return buf;
}

/* "1,10,50" into o->sizes. 0 or -1. */
static int parse_sizes(const char *v, opts *o)
{
    o->nsizes = 0;
    for (const char *p = v; *p;) {
        char *end;
        long n = strtol(p, &end, 10);
        if (end == p || n < 1 || n > 100000 || o->nsizes == MAX_SIZES || (*end && *end != ','))
            return -1;
        o->sizes[o->nsizes++] = n;
        p = *end ? end + 1 : end;
    }
    return o->nsizes ? 0 : -1;
}

static int parse(int argc, char **argv, opts *o)
{
    *o = (opts){.keys = 10000, .vsize = 256, .rounds = 30};
    static const long def[] = {1, 10, 50, 200, 1000, 5000};
    for (; o->nsizes < sizeof(def) / sizeof(def[0]); o->nsizes++)
        o->sizes[o->nsizes] = def[o->nsizes];
    for (int i = 1; i < argc; i += 2) {
        if (i + 1 >= argc)
            return -1;
        if (!strcmp(argv[i], "--keys"))
            o->keys = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--value-size"))
            o->vsize = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--rounds"))
            o->rounds = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--pin-commits"))
            o->pin_commits = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--sizes")) {
            if (parse_sizes(argv[i + 1], o))
                return -1;
        } else if (!strcmp(argv[i], "--dir"))
            snprintf(o->dir, sizeof(o->dir), "%s", argv[i + 1]);
        else
            return -1;
    }
    if (o->keys < 1 || o->vsize < 1 || o->vsize > 4096 || o->rounds < 3 || o->rounds > MAX_ROUNDS ||
        o->pin_commits < 0)
        return -1;
    return 0;
}

int main(int argc, char **argv)
{
    opts o;
    if (parse(argc, argv, &o)) {
        fprintf(stderr, "usage: commitbench [--keys N] [--value-size N (<= 4096)] "
                        "[--rounds N (3..5000)] [--sizes N,N,..] [--pin-commits N] "
                        "[--dir DIR]\n");
        return 2;
    }
    int own_dir = !o.dir[0];
    if (own_dir) {
        snprintf(o.dir, sizeof(o.dir), "/var/tmp/commitbench-XXXXXX");
        if (!mkdtemp(o.dir)) {
            perror("commitbench: mkdtemp");
            return 1;
        }
    }
    int rc = 1;
    double floor_v[200], *ap = NULL;
    char fpath[300];
    MDB_txn *pin = NULL;
    kv_store *s = NULL;
    uint8_t *val = calloc(1, (size_t)o.vsize);
    kv_store_config cfg;
    kv_store_config_default(&cfg);
    cfg.dir = o.dir;
    if (!val || kv_store_open(&s, &cfg)) {
        fprintf(stderr, "commitbench: cannot open a store in %s\n", o.dir);
        goto out;
    }
    memset(val, 'v', (size_t)o.vsize);
    uint64_t idx = 1;
    for (long k = 0; k < o.keys;) { /* preload, 1,000 puts per commit */
        kv_store_batch *b;
        if (kv_store_batch_begin(s, &b))
            goto out;
        for (long j = 0; j < 1000 && k < o.keys; j++, k++)
            if (put(s, b, idx++, k, val, o.vsize, 0)) {
                kv_store_batch_abort(s, b);
                goto out;
            }
        if (kv_store_batch_commit(s, b))
            goto out;
    }
    if (kv_bench_fsync_floor(o.dir, 200, floor_v))
        goto out;
    qsort(floor_v, 200, sizeof(double), kv_bench_cmp_double);
    printf("commitbench: %ld keys x %ld B, %ld commits per size, medians; fdatasync floor "
           "p50 %.3f ms (4 KiB, preallocated file)\n",
           o.keys, o.vsize, o.rounds, floor_v[100] / 1000.0);
    printf("%10s %14s %14s %16s %18s %16s %16s\n", "puts/commit", "apply us/put", "commit ms",
           "commit us/put", "pages written/put", "writes/commit", "max puts/s (*)");
    if (!(ap = calloc(4 * (size_t)o.rounds, sizeof(double))))
        goto out;
    double *cm = ap + o.rounds, *pg = cm + o.rounds, *wc = pg + o.rounds;
    if (o.pin_commits && mdb_txn_begin(kv_store_env(s), NULL, MDB_RDONLY, &pin))
        goto out;
    uint64_t x = 0x9E3779B97F4A7C15ULL;
    long commits = 0;
    for (size_t si = 0; si < o.nsizes; si++) {
        long n = o.sizes[si];
        for (long r = 0; r < o.rounds; r++) {
            kv_store_batch *b;
            if (kv_store_batch_begin(s, &b))
                goto out;
            double t0 = kv_bench_now_us();
            for (long j = 0; j < n; j++)
                if (put(s, b, idx++, (long)(next_rand(&x) % (uint64_t)o.keys), val, o.vsize,
                        (uint8_t)r)) {
                    kv_store_batch_abort(s, b);
                    goto out;
                }
            long long w0, c0, w1, c1;
            written(&w0, &c0);
            double t1 = kv_bench_now_us();
            if (kv_store_batch_commit_nometasync(s, b))
                goto out;
            double t2 = kv_bench_now_us();
            written(&w1, &c1);
            ap[r] = (t1 - t0) / (double)n;
            cm[r] = t2 - t1;
            pg[r] = w0 < 0 || w1 < 0 ? -1 : (double)(w1 - w0) / 4096.0 / (double)n;
            wc[r] = c0 < 0 || c1 < 0 ? -1 : (double)(c1 - c0);
            if (pin && ++commits % o.pin_commits == 0) { /* pages freed before now: reusable */
                mdb_txn_reset(pin);
                if (mdb_txn_renew(pin))
                    goto out;
            }
        }
        qsort(ap, (size_t)o.rounds, sizeof(double), kv_bench_cmp_double);
        qsort(cm, (size_t)o.rounds, sizeof(double), kv_bench_cmp_double);
        qsort(pg, (size_t)o.rounds, sizeof(double), kv_bench_cmp_double);
        qsort(wc, (size_t)o.rounds, sizeof(double), kv_bench_cmp_double);
        double a = ap[o.rounds / 2], c = cm[o.rounds / 2];
        printf("%10ld %14.2f %14.3f %16.2f %18.2f %16.0f %16.0f\n", n, a, c / 1000.0, c / (double)n,
               pg[o.rounds / 2], wc[o.rounds / 2], 1e6 / (a + c / (double)n));
    }
    struct stat st;
    if (stat(path_of(o.dir, "data.mdb", fpath, sizeof fpath), &st) == 0)
        printf("data.mdb at the end: %.1f MB\n", (double)st.st_size / 1e6);
    printf("(*) one writer applying and committing back to back: 1 / (apply + commit per "
           "put); the WAL flush and the network come on top\n");
    rc = 0;
out:
    if (pin)
        mdb_txn_abort(pin);
    if (s)
        kv_store_close(s);
    free(ap);
    free(val);
    if (own_dir)
        kvt_rmtree(o.dir);
    return rc;
}
