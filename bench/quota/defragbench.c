/*
 * defragbench: fills a store with --keys keys of --value-size bytes, overwrites every key
 * --rounds times, compacts at the current revision, then defragments (kv_store_defrag_copy +
 * kv_store_defrag_swap, as the Defragment RPC does) and prints the data file size before and
 * after, the copy time (writes wait for it) and the swap time (every request waits for it).
 * Usage: defragbench [--keys N] [--value-size N] [--rounds N] [--dir DIR]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "apply/apply.h"
#include "internal.pb-c.h"
#include "mvcc/store.h"
#include "kvt_util.h"

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
}

static int apply(kv_store *s, kv_store_batch *b, uint64_t idx, Kvdpb__InternalRequest *ir)
{
    uint8_t *buf = malloc(kvdpb__internal_request__get_packed_size(ir) + 1);
    size_t n = kvdpb__internal_request__pack(ir, buf);
    kv_result res;
    int rc = kv_store_apply(s, b, idx, buf, n, NULL, &res);
    free(buf);
    free(res.resp);
    if (rc == 0 && (int)res.err != 0) {
        fprintf(stderr, "apply: %s\n", kv_etcd_err_msg(res.err));
        rc = -1;
    }
    return rc;
}

int main(int argc, char **argv)
{
    long keys = 100000, vsize = 1024, rounds = 2;
    char dir[256] = "";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--keys"))
            keys = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--value-size"))
            vsize = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--rounds"))
            rounds = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--dir"))
            snprintf(dir, sizeof(dir), "%s", argv[i + 1]);
    }
    if (!dir[0]) {
        snprintf(dir, sizeof(dir), "/tmp/defragbench-XXXXXX");
        if (!mkdtemp(dir))
            return 1;
    }
    kv_store_config cfg;
    kv_store_config_default(&cfg);
    cfg.dir = dir;
    kv_store *s;
    if (kv_store_open(&s, &cfg)) {
        fprintf(stderr, "open %s failed\n", dir);
        return 1;
    }
    uint8_t *val = malloc((size_t)vsize);
    memset(val, 'v', (size_t)vsize);
    char key[32];
    uint64_t idx = 1;
    double t0 = now_ms();
    for (long r = 0; r <= rounds; r++) {
        for (long k = 0; k < keys;) {
            kv_store_batch *b;
            if (kv_store_batch_begin(s, &b))
                return 1;
            for (long j = 0; j < 1000 && k < keys; j++, k++) {
                snprintf(key, sizeof(key), "key/%08ld", k);
                val[0] = (uint8_t)r;
                Etcdserverpb__PutRequest p = ETCDSERVERPB__PUT_REQUEST__INIT;
                p.key.data = (uint8_t *)key;
                p.key.len = strlen(key);
                p.value.data = val;
                p.value.len = (size_t)vsize;
                Kvdpb__InternalRequest ir = KVDPB__INTERNAL_REQUEST__INIT;
                ir.request_case = KVDPB__INTERNAL_REQUEST__REQUEST_PUT;
                ir.put = &p;
                if (apply(s, b, idx++, &ir))
                    return 1;
            }
            if (kv_store_batch_commit(s, b))
                return 1;
        }
    }
    double t1 = now_ms();
    kv_store_status st;
    kv_store_get_status(s, &st);
    kv_store_batch *b;
    kv_store_batch_begin(s, &b);
    Etcdserverpb__CompactionRequest c = ETCDSERVERPB__COMPACTION_REQUEST__INIT;
    c.revision = st.revision;
    Kvdpb__InternalRequest ir = KVDPB__INTERNAL_REQUEST__INIT;
    ir.request_case = KVDPB__INTERNAL_REQUEST__REQUEST_COMPACTION;
    ir.compaction = &c;
    if (apply(s, b, idx++, &ir) || kv_store_batch_commit(s, b))
        return 1;
    double t2 = now_ms();
    kv_store_get_status(s, &st);
    printf("loaded %ld keys x %ld B x %ld writes each in %.0f ms; compaction %.0f ms\n", keys,
           vsize, rounds + 1, t1 - t0, t2 - t1);
    printf("before defrag: db_size %lld B, in use %lld B\n", (long long)st.db_size,
           (long long)st.db_size_in_use);
    kv_store_defrag_stats ds;
    double t3 = now_ms();
    int rc = kv_store_defrag_copy(s, &ds);
    if (rc == 0)
        rc = kv_store_defrag_swap(s, &ds);
    double t4 = now_ms();
    kv_store_defrag_release(&ds);
    double t5 = now_ms();
    if (rc) {
        fprintf(stderr, "defrag failed: %d\n", rc);
        return 1;
    }
    kv_store_get_status(s, &st);
    printf("defrag: data.mdb %lld -> %lld B (%.1f%%); copy %.1f ms (writes wait), swap %.2f ms "
           "(every request waits), total %.1f ms\n",
           (long long)ds.file_before, (long long)ds.file_after,
           100.0 * (double)ds.file_after / (double)ds.file_before, (double)ds.copy_us / 1000.0,
           (double)ds.swap_us / 1000.0, t4 - t3);
    printf("old file released (off the loop in kvd) in %.1f ms\n", t5 - t4);
    printf("after defrag: revision %lld, keys %llu, db_size %lld B\n", (long long)st.revision,
           (unsigned long long)st.keys, (long long)st.db_size);
    kv_store_close(s);
    free(val);
    return kvt_rmtree(dir) == 0 ? 0 : 1;
}
