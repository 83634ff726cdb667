/*
 * readbench: Range latency on one connection, one client, for the read paths
 * (single-key Range answered inline; key ranges, sorts and HashKV on the reader threads).
 * Starts kvd through the integration harness (KV_KVD_BIN or KV_BUILD_DIR picks the binary),
 * loads --keys keys (Txns of 128 puts), then times each request kind sequentially and prints
 * p50/p99/max in ms. Not a test: run by hand, compare builds in one session.
 *   build/bench/read/readbench [--keys N] [--calls N]
 */
#include "grpc_raw.h"
#include "harness.h"
#include "rpc.pb-c.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static int call(kv_it_grpc *c, const char *path, const ProtobufCMessage *m)
{
    uint8_t buf[256], *resp = NULL;
    size_t len = protobuf_c_message_pack(m, buf), rlen = 0;
    int st;
    char msg[128];
    int rc = kv_it_grpc_call(c, path, buf, len, &resp, &rlen, 60000, &st, msg, sizeof msg);
    free(resp);
    return rc;
}

static void load(kv_it_grpc *c, size_t n)
{
    char keys[128][32], vals[128][32];
    Etcdserverpb__PutRequest puts[128];
    Etcdserverpb__RequestOp ops[128], *opp[128];
    for (size_t i = 0; i < n;) {
        size_t k = 0;
        for (; k < 128 && i < n; k++, i++) {
            snprintf(keys[k], sizeof keys[k], "k%07zu", i);
            snprintf(vals[k], sizeof vals[k], "v%08x", (unsigned)(i * 2654435761u));
            etcdserverpb__put_request__init(&puts[k]);
            puts[k].key.data = (uint8_t *)keys[k];
            puts[k].key.len = strlen(keys[k]);
            puts[k].value.data = (uint8_t *)vals[k];
            puts[k].value.len = strlen(vals[k]);
            etcdserverpb__request_op__init(&ops[k]);
            ops[k].request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT;
            ops[k].request_put = &puts[k];
            opp[k] = &ops[k];
        }
        Etcdserverpb__TxnRequest t = ETCDSERVERPB__TXN_REQUEST__INIT;
        t.n_success = k;
        t.success = opp;
        size_t len = etcdserverpb__txn_request__get_packed_size(&t);
        uint8_t *buf = malloc(len), *resp = NULL;
        etcdserverpb__txn_request__pack(&t, buf);
        size_t rlen;
        int st;
        kv_it_grpc_call(c, "/etcdserverpb.KV/Txn", buf, len, &resp, &rlen, 60000, &st, NULL, 0);
        free(buf);
        free(resp);
    }
}

static void measure(kv_it_grpc *c, const char *name, const char *path, const ProtobufCMessage *m,
                    int calls)
{
    uint64_t *lat = calloc((size_t)calls, sizeof *lat);
    int errors = 0;
    for (int i = 0; i < calls; i++) {
        uint64_t t0 = now_us();
        if (call(c, path, m) != 0)
            errors++;
        lat[i] = now_us() - t0;
    }
    qsort(lat, (size_t)calls, sizeof *lat, cmp_u64);
    printf("%-28s calls %6d  p50 %9.3f ms  p99 %9.3f ms  max %9.3f ms  errors %d\n", name, calls,
           lat[calls / 2] / 1000.0, lat[(calls * 99) / 100] / 1000.0, lat[calls - 1] / 1000.0,
           errors);
    free(lat);
}

int main(int argc, char **argv)
{
    size_t keys = 100000;
    int calls = 3000;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--keys") == 0)
            keys = (size_t)atol(argv[i + 1]);
        else if (strcmp(argv[i], "--calls") == 0)
            calls = atoi(argv[i + 1]);
    }
    kv_it_server s;
    if (kv_it_server_init(&s, KV_IT_KVD, NULL) || kv_it_server_start(&s, 20000)) {
        fprintf(stderr, "readbench: cannot start kvd\n");
        return 1;
    }
    kv_it_grpc *c = NULL;
    if (kv_it_grpc_open(&c, "127.0.0.1", s.client_port, 5000)) {
        kv_it_server_destroy(&s);
        return 1;
    }
    load(c, keys);
    printf("kvd %s, %zu keys\n", s.bin, keys);
    Etcdserverpb__RangeRequest r = ETCDSERVERPB__RANGE_REQUEST__INIT;
    r.key.data = (uint8_t *)"k0000042";
    r.key.len = 8;
    measure(c, "range single key", "/etcdserverpb.KV/Range", &r.base, calls);
    r.range_end.data = (uint8_t *)"k0000052";
    r.range_end.len = 8;
    measure(c, "range 10 keys", "/etcdserverpb.KV/Range", &r.base, calls);
    uint8_t zero = 0;
    Etcdserverpb__RangeRequest h = ETCDSERVERPB__RANGE_REQUEST__INIT;
    h.key.data = &zero;
    h.key.len = 1;
    h.range_end.data = &zero;
    h.range_end.len = 1;
    h.limit = 1;
    h.sort_target = ETCDSERVERPB__RANGE_REQUEST__SORT_TARGET__VALUE;
    h.sort_order = ETCDSERVERPB__RANGE_REQUEST__SORT_ORDER__DESCEND;
    measure(c, "range all, sort value, lim 1", "/etcdserverpb.KV/Range", &h.base, 10);
    Etcdserverpb__HashKVRequest hk = ETCDSERVERPB__HASH_KVREQUEST__INIT;
    measure(c, "hashkv", "/etcdserverpb.Maintenance/HashKV", &hk.base, 10);
    kv_it_grpc_close(c);
    kv_it_server_destroy(&s);
    return 0;
}
