/* pb_scan: the non-recursive TxnRequest pre-scan, and pb_strip (unknown fields
 * dropped before unpacking). Depth and op-count limits
 * (cross-checked against the recursive etcd check on requests small enough to unpack),
 * malformed framing as protobuf-c 1.4 sees it, 100,000-deep nesting on a 256 KiB stack, and
 * the store's apply path refusing deep nesting from raw InternalRequest bytes. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apply/apply_int.h" /* kv_txn_check (was mvcc/txn_check.c) */
#include "kvt_store.h"
#include "pb/pb_scan.h"
#include "pb/pb_strip.h"
#include "mvcc/store_int.h"
#include "txn_wire.h"

static kv_txn_limits deflim(void)
{
    kv_txn_limits l;
    kv_txn_limits_init(&l, 128);
    return l;
}

static int scan(const uint8_t *b, size_t n, kv_pb_scan_stats *st)
{
    kv_txn_limits l = deflim();
    return kv_pb_scan_txn(b, n, &l, st);
}

/* etcd's own verdict (kv_txn_check, recursive) on bytes protobuf-c can unpack: 1 = too many
 * ops, 0 = ok, -1 = other error. */
static int etcd_verdict(const uint8_t *b, size_t n, uint32_t max_ops)
{
    Etcdserverpb__TxnRequest *t = etcdserverpb__txn_request__unpack(NULL, n, b);
    cr_assert_not_null(t, "protobuf-c refused the test's bytes");
    kv_result res = {0};
    int rc = kv_txn_check(t, max_ops, 511, &res);
    etcdserverpb__txn_request__free_unpacked(t, NULL);
    if (rc == 0)
        return 0;
    return strcmp(KVT_STORE_MSG(res), "etcdserver: too many operations in txn request") == 0 ? 1
                                                                                             : -1;
}

static uint8_t *nested(size_t depth, const uint8_t *extra, size_t el, const uint8_t *inner,
                       size_t il, size_t *n)
{
    uint8_t *b;
    cr_assert_eq(kv_tw_nested_txn(depth, extra, el, inner, il, &b, n), 0);
    return b;
}

/* A put op as a success field. */
static size_t success_put(uint8_t *buf, const char *k)
{
    uint8_t op[64];
    size_t ol = kv_tw_put_op(op, k, "v"), n = 0;
    kv_tw_field(buf, &n, 2, op, ol);
    return n;
}

Test(pb_scan, flat_txn_from_protobuf_c)
{
    Etcdserverpb__Compare c = ETCDSERVERPB__COMPARE__INIT, *cs[] = {&c};
    c.key = (ProtobufCBinaryData){1, (uint8_t *)"a"};
    c.target = ETCDSERVERPB__COMPARE__COMPARE_TARGET__VERSION;
    c.target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_VERSION;
    c.version = 3;
    Etcdserverpb__PutRequest p = ETCDSERVERPB__PUT_REQUEST__INIT;
    p.key = (ProtobufCBinaryData){1, (uint8_t *)"k"};
    Etcdserverpb__RequestOp o = ETCDSERVERPB__REQUEST_OP__INIT, *ops[] = {&o, &o};
    o.request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT;
    o.request_put = &p;
    Etcdserverpb__TxnRequest t = ETCDSERVERPB__TXN_REQUEST__INIT;
    t.compare = cs;
    t.n_compare = 1;
    t.success = ops;
    t.n_success = 2;
    t.failure = ops;
    t.n_failure = 1;
    uint8_t buf[256];
    size_t n = etcdserverpb__txn_request__pack(&t, buf);
    kv_pb_scan_stats st;
    cr_assert_eq(scan(buf, n, &st), KV_PB_SCAN_OK);
    cr_assert_eq(st.depth, 1);
    cr_assert_eq(st.total, 4);
    cr_assert_eq(scan(NULL, 0, NULL), KV_PB_SCAN_OK, "the empty TxnRequest is valid");
}

Test(pb_scan, depth_limit_follows_etcd_budget)
{
    /* Each level costs one op: with --max-txn-ops 128 etcd accepts 129 levels, not 130. */
    for (size_t d = 127; d <= 131; d++) {
        size_t n;
        uint8_t *b = nested(d, NULL, 0, NULL, 0, &n);
        kv_pb_scan_stats st;
        int want = d <= 129 ? KV_PB_SCAN_OK : KV_PB_SCAN_TOO_MANY_OPS;
        cr_assert_eq(scan(b, n, &st), want, "depth %zu", d);
        cr_assert_eq(etcd_verdict(b, n, 128), want ? 1 : 0, "recursive check, depth %zu", d);
        /* level 129 holds the nested op its budget (0) cannot pay for: the scan stops there */
        cr_assert_eq(st.depth, d <= 129 ? d : 129);
        free(b);
    }
    /* A smaller budget: --max-txn-ops 3 allows 4 levels. */
    size_t n;
    uint8_t *b = nested(5, NULL, 0, NULL, 0, &n);
    kv_txn_limits l;
    kv_txn_limits_init(&l, 3);
    cr_assert_eq(kv_pb_scan_txn(b, n, &l, NULL), KV_PB_SCAN_TOO_MANY_OPS);
    cr_assert_eq(kv_pb_scan_txn(b + 0, n, &(kv_txn_limits){4, 256, 100}, NULL), KV_PB_SCAN_OK);
    cr_assert_eq(etcd_verdict(b, n, 3), 1);
    cr_assert_eq(etcd_verdict(b, n, 4), 0);
    free(b);
}

Test(pb_scan, hard_depth_cap_when_budget_is_large)
{
    /* --max-txn-ops can be 2^20: the budget no longer bounds depth, the hard cap does. */
    kv_txn_limits l;
    kv_txn_limits_init(&l, 1u << 20);
    for (size_t d = KV_TXN_MAX_DEPTH - 1; d <= KV_TXN_MAX_DEPTH + 2; d++) {
        size_t n;
        uint8_t *b = nested(d, NULL, 0, NULL, 0, &n);
        kv_pb_scan_stats st;
        int rc = kv_pb_scan_txn(b, n, &l, &st);
        cr_assert_eq(rc, d <= KV_TXN_MAX_DEPTH ? KV_PB_SCAN_OK : KV_PB_SCAN_TOO_MANY_OPS,
                     "depth %zu", d);
        cr_assert_leq(st.depth, KV_TXN_MAX_DEPTH + 1, "stops one level past the cap");
        free(b);
    }
    /* A configured depth above the hard cap is clamped; 0 means 1. */
    size_t n;
    uint8_t *b = nested(KV_TXN_MAX_DEPTH + 1, NULL, 0, NULL, 0, &n);
    cr_assert_eq(kv_pb_scan_txn(b, n, &(kv_txn_limits){1u << 20, 100000, 1u << 30}, NULL),
                 KV_PB_SCAN_TOO_MANY_OPS);
    cr_assert_eq(kv_pb_scan_txn(b, n, &(kv_txn_limits){1u << 20, 0, 1u << 30}, NULL),
                 KV_PB_SCAN_TOO_MANY_OPS);
    free(b);
}

Test(pb_scan, ops_budget_counted_across_levels)
{
    /* Top level: 99 puts + the nested txn = 100 ops, leaving 28 for the nested level. */
    uint8_t extra[99 * 16];
    size_t el = 0;
    char k[16];
    for (int i = 0; i < 99; i++) {
        snprintf(k, sizeof k, "t%02d", i);
        el += success_put(extra + el, k);
    }
    for (int inner_ops = 27; inner_ops <= 29; inner_ops++) {
        uint8_t inner[32 * 16];
        size_t il = 0;
        for (int i = 0; i < inner_ops; i++) {
            snprintf(k, sizeof k, "i%02d", i);
            il += success_put(inner + il, k);
        }
        size_t n;
        uint8_t *b = nested(2, extra, el, inner, il, &n);
        kv_pb_scan_stats st;
        int want = inner_ops <= 28 ? KV_PB_SCAN_OK : KV_PB_SCAN_TOO_MANY_OPS;
        cr_assert_eq(scan(b, n, &st), want, "inner ops %d", inner_ops);
        cr_assert_eq(etcd_verdict(b, n, 128), want ? 1 : 0);
        if (want == KV_PB_SCAN_OK)
            cr_assert_eq(st.total, 100 + (uint64_t)inner_ops);
        free(b);
    }
    /* Compares count as ops too (opc = max of the three lists). */
    uint8_t cmps[129 * 8];
    size_t cl = 0;
    for (int i = 0; i < 129; i++) {
        uint8_t c[4] = {0x1a, 0x01, 'a'}; /* Compare{key (3): "a"} */
        kv_tw_field(cmps, &cl, 1, c, 3);
    }
    cr_assert_eq(scan(cmps, cl, NULL), KV_PB_SCAN_TOO_MANY_OPS);
    cr_assert_eq(etcd_verdict(cmps, cl, 128), 1);
    cr_assert_eq(scan(cmps, cl - 5, NULL), KV_PB_SCAN_OK); /* 128 compares */
}

/* A txn whose success holds `fan` nested txns, each a copy of child (or `fan` puts when
 * child is NULL). */
static uint8_t *fan_txn(size_t fan, const uint8_t *child, size_t cl, size_t *n)
{
    uint8_t put[32];
    size_t pl = kv_tw_put_op(put, "k", "v");
    size_t cap = fan * (cl + pl + 24) + 16;
    uint8_t *b = malloc(cap), *op = malloc(cl + 16);
    cr_assert(b && op);
    size_t len = 0, ol = 0;
    if (child)
        kv_tw_field(op, &ol, 4, child, cl); /* RequestOp.request_txn */
    for (size_t i = 0; i < fan; i++)
        kv_tw_field(b, &len, 2, child ? op : put, child ? ol : pl);
    free(op);
    *n = len;
    return b;
}

Test(pb_scan, total_ops_cap_across_nesting)
{
    /* 16 x 16 x 16: every level within etcd's budget (128-16-16 = 96 >= 16), but 4,368
     * compares + ops in all: over KV_TXN_MAX_TOTAL_OPS (4,096). */
    size_t n3, n2, n1;
    uint8_t *l3 = fan_txn(16, NULL, 0, &n3);
    uint8_t *l2 = fan_txn(16, l3, n3, &n2);
    uint8_t *l1 = fan_txn(16, l2, n2, &n1);
    kv_pb_scan_stats st;
    cr_assert_eq(scan(l1, n1, &st), KV_PB_SCAN_TOO_MANY_OPS);
    cr_assert_eq(st.total, KV_TXN_MAX_TOTAL_OPS + 1, "stopped at the op over the cap");
    cr_assert_eq(st.depth, 3);
    cr_assert_eq(etcd_verdict(l1, n1, 128), -1, "etcd's budget allows it (duplicate keys)");
    free(l1);
    /* 15 x 15 x 16 = 3,840: fine. */
    free(l3);
    l3 = fan_txn(16, NULL, 0, &n3);
    free(l2);
    l2 = fan_txn(15, l3, n3, &n2);
    l1 = fan_txn(15, l2, n2, &n1);
    cr_assert_eq(scan(l1, n1, &st), KV_PB_SCAN_OK, "total %llu", (unsigned long long)st.total);
    /* A lower configured cap. */
    cr_assert_eq(kv_pb_scan_txn(l1, n1, &(kv_txn_limits){128, 256, 1000}, NULL),
                 KV_PB_SCAN_TOO_MANY_OPS);
    /* The cap follows a large --max-txn-ops for flat txns: 3 x 5,000. */
    kv_txn_limits big;
    kv_txn_limits_init(&big, 5000);
    cr_assert_eq(big.max_total, 15000);
    free(l1);
    free(l2);
    free(l3);
    l1 = fan_txn(5000, NULL, 0, &n1);
    cr_assert_eq(kv_pb_scan_txn(l1, n1, &big, NULL), KV_PB_SCAN_OK);
    cr_assert_eq(scan(l1, n1, NULL), KV_PB_SCAN_TOO_MANY_OPS, "5,000 ops > budget 128");
    free(l1);
}

Test(pb_scan, repeated_oneof_occurrences_are_all_counted)
{
    /* RequestOp with request_txn twice: protobuf-c unpacks both and keeps the last. */
    uint8_t inner[64];
    size_t il = success_put(inner, "a");
    uint8_t op[160];
    size_t ol = 0;
    kv_tw_field(op, &ol, 4, inner, il);
    kv_tw_field(op, &ol, 4, inner, il);
    uint8_t t[200];
    size_t tl = 0;
    kv_tw_field(t, &tl, 2, op, ol);
    kv_pb_scan_stats st;
    cr_assert_eq(scan(t, tl, &st), KV_PB_SCAN_OK);
    cr_assert_eq(st.total, 3);
    Etcdserverpb__TxnRequest *u = etcdserverpb__txn_request__unpack(NULL, tl, t);
    cr_assert_not_null(u);
    cr_assert_eq(u->success[0]->request_txn->n_success, 1, "protobuf-c kept the last one");
    etcdserverpb__txn_request__free_unpacked(u, NULL);
}

Test(pb_scan, malformed_framing)
{
    static const struct {
        const char *what;
        uint8_t b[16];
        size_t n;
    } cases[] = {
        {"truncated tag varint", {0x92}, 1},
        {"tag longer than 5 bytes", {0x92, 0x80, 0x80, 0x80, 0x80, 0x00}, 6},
        {"tag 0", {0x02, 0x00}, 2},
        {"truncated length varint", {0x12, 0x80}, 2},
        {"length prefix longer than 5 bytes", {0x12, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00}, 7},
        {"length beyond the buffer", {0x12, 0x05, 0x00}, 3},
        {"length over INT_MAX", {0x12, 0xff, 0xff, 0xff, 0xff, 0x0f}, 6},
        {"length 2^31 exactly", {0x12, 0x80, 0x80, 0x80, 0x80, 0x08}, 6},
        {"truncated varint value", {0x78, 0xff, 0xff}, 3},
        {"varint of 11 bytes",
         {0x78, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01},
         12},
        {"truncated fixed64", {0x79, 1, 2, 3, 4, 5, 6, 7}, 8},
        {"truncated fixed32", {0x7d, 1, 2, 3}, 4},
        {"start group", {0x7b, 0x7c}, 2},
        {"end group", {0x7c}, 1},
        {"wire type 6", {0x7e, 0x00}, 2},
        {"wire type 7", {0x7f, 0x00}, 2},
        {"success as varint", {0x10, 0x01}, 2},
        {"compare as fixed32", {0x0d, 0, 0, 0, 0}, 5},
        {"request_txn as fixed64", {0x12, 0x09, 0x21, 0, 0, 0, 0, 0, 0, 0, 0}, 11},
        {"request_put as varint", {0x12, 0x02, 0x10, 0x01}, 4},
        {"truncated field inside RequestOp", {0x12, 0x02, 0x22, 0x05}, 4},
        {"bad field inside nested txn", {0x12, 0x03, 0x22, 0x01, 0x10}, 5},
    };
    kv_txn_limits big = {1u << 20, KV_TXN_MAX_DEPTH, 1u << 30};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cr_expect_eq(kv_pb_scan_txn(cases[i].b, cases[i].n, &big, NULL), KV_PB_SCAN_MALFORMED, "%s",
                     cases[i].what);
        Etcdserverpb__TxnRequest *u =
            etcdserverpb__txn_request__unpack(NULL, cases[i].n, cases[i].b);
        cr_expect_null(u, "protobuf-c refuses it too: %s", cases[i].what);
        if (u)
            etcdserverpb__txn_request__free_unpacked(u, NULL);
    }
}

Test(pb_scan, stops_at_the_first_violation)
{
    /* Malformed bytes before the violation are reported as malformed; after it the scan has
     * stopped (a documented difference: etcd unmarshals everything first). */
    uint8_t bad[] = {0x12, 0x05};
    size_t n;
    uint8_t *b = nested(129, NULL, 0, bad, sizeof bad, &n);
    cr_assert_eq(scan(b, n, NULL), KV_PB_SCAN_MALFORMED, "level 129 is still within budget");
    free(b);
    b = nested(131, NULL, 0, bad, sizeof bad, &n);
    kv_pb_scan_stats st;
    cr_assert_eq(scan(b, n, &st), KV_PB_SCAN_TOO_MANY_OPS);
    cr_assert_eq(st.depth, 129, "stopped at the level over budget");
    free(b);
    /* A flat txn of 300,000 ops: refused after max_total + 1 ops, not scanned to the end. */
    size_t cap = 300000 * 8; /* 7 bytes per op */
    uint8_t *f = malloc(cap);
    size_t fl = 0;
    uint8_t op[8];
    size_t ol = 0;
    uint8_t put[] = {0x0a, 0x01, 'k'};
    kv_tw_field(op, &ol, 2, put, sizeof put);
    for (int i = 0; i < 300000; i++)
        kv_tw_field(f, &fl, 2, op, ol);
    kv_txn_limits big = {1u << 20, KV_TXN_MAX_DEPTH, 4096};
    cr_assert_eq(kv_pb_scan_txn(f, fl, &big, &st), KV_PB_SCAN_TOO_MANY_OPS);
    cr_assert_eq(st.total, 4097);
    cr_assert_eq(scan(f, fl, &st), KV_PB_SCAN_TOO_MANY_OPS);
    cr_assert_eq(st.total, 128, "stopped at the 129th op, over the budget of 128");
    free(f);
}

Test(pb_scan, unknown_fields_and_overlong_tags)
{
    /* Unknown fields of every wire type in TxnRequest and RequestOp are skipped. */
    uint8_t unk[] = {0x78, 0x96, 0x01,                           /* 15: varint */
                     0x79, 1,    2,    3,    4,    5,   6, 7, 8, /* 15: fixed64 */
                     0x7d, 1,    2,    3,    4,                  /* 15: fixed32 */
                     0x7a, 0x02, 0xff, 0xff,                     /* 15: bytes */
                     0xfa, 0xff, 0xff, 0xff, 0x0f, 0x00}; /* field 2^29-1: bytes, 5-byte tag */
    uint8_t op[64];
    size_t ol = 0;
    memcpy(op, unk, sizeof unk);
    ol = sizeof unk;
    uint8_t t[128];
    size_t tl = 0;
    memcpy(t, unk, sizeof unk);
    tl = sizeof unk;
    kv_tw_field(t, &tl, 2, op, ol);
    cr_assert_eq(scan(t, tl, NULL), KV_PB_SCAN_OK);
    Etcdserverpb__TxnRequest *u = etcdserverpb__txn_request__unpack(NULL, tl, t);
    cr_assert_not_null(u);
    etcdserverpb__txn_request__free_unpacked(u, NULL);

    /* An overlong (non-minimal) tag still names request_txn for protobuf-c, so the scan must
     * follow it: 131 levels through 3-byte tags are over the budget. */
    /* Built inside out with 3-byte request_txn tags; both sides must agree. */
    size_t cap = 131 * 16 + 16;
    uint8_t *a = malloc(cap), *bb = malloc(cap);
    size_t an = 0;
    for (int lvl = 131; lvl > 1; lvl--) {
        /* a holds level lvl's TxnRequest; wrap it: RequestOp{0xa2 0x80 0x00 len a} */
        size_t bn = 0;
        bb[bn++] = 0xa2;
        bb[bn++] = 0x80;
        bb[bn++] = 0x00;
        bn += kv_varint_put(bb + bn, an);
        memcpy(bb + bn, a, an);
        bn += an;
        size_t tn = 0;
        uint8_t *tmp = malloc(bn + 16);
        kv_tw_field(tmp, &tn, 2, bb, bn);
        memcpy(a, tmp, tn);
        an = tn;
        free(tmp);
    }
    kv_pb_scan_stats st;
    cr_assert_eq(scan(a, an, &st), KV_PB_SCAN_TOO_MANY_OPS);
    cr_assert_eq(st.depth, 129, "stopped where the budget ran out");
    cr_assert_eq(etcd_verdict(a, an, 128), 1, "protobuf-c sees the nesting too");
    free(a);
    free(bb);
}

typedef struct deep_arg {
    const uint8_t *b;
    size_t n;
    int rc;
    kv_pb_scan_stats st;
} deep_arg;

static void *scan_thread(void *p)
{
    deep_arg *a = p;
    kv_txn_limits l;
    kv_txn_limits_init(&l, 1u << 20); /* budget no bound: only the hard cap stops it */
    a->rc = kv_pb_scan_txn(a->b, a->n, &l, &a->st);
    return NULL;
}

/* Runs the scan on a thread with a 256 KiB stack: a scan that recursed per level would
 * overflow it long before 100,000 levels. */
static void scan_small_stack(deep_arg *a)
{
    pthread_attr_t attr;
    pthread_t th;
    cr_assert_eq(pthread_attr_init(&attr), 0);
    cr_assert_eq(pthread_attr_setstacksize(&attr, 256 * 1024), 0);
    cr_assert_eq(pthread_create(&th, &attr, scan_thread, a), 0);
    cr_assert_eq(pthread_join(th, NULL), 0);
    pthread_attr_destroy(&attr);
}

Test(pb_scan, deep_nesting_5000_and_100000_without_recursion)
{
    static const size_t depths[] = {5000, 100000};
    for (size_t i = 0; i < 2; i++) {
        size_t n;
        uint8_t *b = nested(depths[i], NULL, 0, NULL, 0, &n);
        deep_arg a = {b, n, -1, {0, 0}};
        scan_small_stack(&a);
        cr_assert_eq(a.rc, KV_PB_SCAN_TOO_MANY_OPS, "depth %zu", depths[i]);
        cr_assert_eq(a.st.depth, KV_TXN_MAX_DEPTH + 1, "stopped at the cap");
        cr_assert_eq(scan(b, n, NULL), KV_PB_SCAN_TOO_MANY_OPS);
        free(b);
    }
}

Test(pb_scan, internal_request_wrapping)
{
    kv_txn_limits l = deflim();
    size_t n;
    uint8_t *t = nested(130, NULL, 0, NULL, 0, &n);
    uint8_t *ir = malloc(n + 32);
    size_t il = 0;
    ir[il++] = 0x08; /* id = 7 */
    ir[il++] = 0x07;
    kv_tw_field(ir, &il, 5, t, n);
    cr_assert_eq(kv_pb_scan_internal(ir, il, &l, NULL), KV_PB_SCAN_TOO_MANY_OPS);
    /* 129 levels are fine; in two occurrences (protobuf-c unpacks both) the totals add up. */
    free(t);
    t = nested(129, NULL, 0, NULL, 0, &n);
    il = 2;
    kv_tw_field(ir, &il, 5, t, n);
    kv_pb_scan_stats st;
    cr_assert_eq(kv_pb_scan_internal(ir, il, &l, &st), KV_PB_SCAN_OK);
    cr_assert_eq(st.total, 128);
    uint8_t *two = malloc(2 * il);
    memcpy(two, ir, il);
    memcpy(two + il, ir + 2, il - 2);
    cr_assert_eq(kv_pb_scan_internal(two, 2 * il - 2, &l, &st), KV_PB_SCAN_OK);
    cr_assert_eq(st.total, 256);
    cr_assert_eq(kv_pb_scan_internal(two, 2 * il - 2, &(kv_txn_limits){128, 256, 200}, NULL),
                 KV_PB_SCAN_TOO_MANY_OPS);
    /* Other requests pass; broken framing and wrong wire types do not. */
    uint8_t put[] = {0x1a, 0x03, 0x0a, 0x01, 'k'};
    cr_assert_eq(kv_pb_scan_internal(put, sizeof put, &l, NULL), KV_PB_SCAN_OK);
    uint8_t badid[] = {0x0a, 0x00};
    cr_assert_eq(kv_pb_scan_internal(badid, sizeof badid, &l, NULL), KV_PB_SCAN_MALFORMED);
    uint8_t badtxn[] = {0x28, 0x01};
    cr_assert_eq(kv_pb_scan_internal(badtxn, sizeof badtxn, &l, NULL), KV_PB_SCAN_MALFORMED);
    uint8_t cut[] = {0x2a, 0x09, 0x12};
    cr_assert_eq(kv_pb_scan_internal(cut, sizeof cut, &l, NULL), KV_PB_SCAN_MALFORMED);
    cr_assert_eq(kv_pb_scan_internal(NULL, 0, &l, NULL), KV_PB_SCAN_OK);
    free(two);
    free(ir);
    free(t);
}

/* Random single-byte mutations of a valid nested txn: whenever protobuf-c accepts the bytes,
 * the scan must not call them malformed, and the unpacked tree is never deeper than the depth
 * the scan saw. */
static size_t tree_depth(const Etcdserverpb__TxnRequest *t)
{
    size_t d = 1;
    while (t) {
        const Etcdserverpb__TxnRequest *next = NULL;
        for (size_t i = 0; i < t->n_success && !next; i++)
            if (t->success[i]->request_case == ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_TXN)
                next = t->success[i]->request_txn;
        if (next)
            d++;
        t = next;
    }
    return d;
}

Test(pb_scan, mutations_agree_with_protobuf_c)
{
    uint8_t extra[64];
    size_t el = success_put(extra, "key");
    uint8_t inner[32];
    size_t il = success_put(inner, "in");
    size_t n;
    uint8_t *orig = nested(20, extra, el, inner, il, &n);
    uint8_t *b = malloc(n);
    unsigned seed = 12345;
    kv_txn_limits big = {1u << 20, KV_TXN_MAX_DEPTH, 1u << 30};
    int accepted = 0;
    for (int iter = 0; iter < 20000; iter++) {
        memcpy(b, orig, n);
        int muts = 1 + (int)(rand_r(&seed) % 3);
        for (int m = 0; m < muts; m++)
            b[rand_r(&seed) % n] = (uint8_t)rand_r(&seed);
        size_t len = rand_r(&seed) % 8 ? n : rand_r(&seed) % n;
        kv_pb_scan_stats st;
        int rc = kv_pb_scan_txn(b, len, &big, &st);
        Etcdserverpb__TxnRequest *u = etcdserverpb__txn_request__unpack(NULL, len, b);
        if (u) {
            accepted++;
            cr_assert_neq(rc, KV_PB_SCAN_MALFORMED, "iteration %d: protobuf-c accepted", iter);
            cr_assert_leq(tree_depth(u), st.depth, "iteration %d: %zu > %u (len %zu)", iter,
                          tree_depth(u), st.depth, len);
            etcdserverpb__txn_request__free_unpacked(u, NULL);
        }
    }
    cr_assert_gt(accepted, 1000, "the mutations must also produce valid messages");
    free(b);
    free(orig);
}

/* The store refuses deep nesting in raw InternalRequest bytes itself (a path that did not
 * pre-scan: replay, raft), before protobuf-c could recurse. Before the fix, 100,000 levels
 * overflowed the stack here. Its bound is KV_TXN_MAX_DEPTH, never a member's --max-txn-ops
 * (which the proposer checks), so that every member applies an entry alike. */
Test(pb_scan, store_apply_refuses_deep_nesting)
{
    kvt_store t;
    kvt_store_open(&t, NULL);
    static const size_t depths[] = {KV_TXN_MAX_DEPTH + 44, 5000, 100000};
    for (size_t i = 0; i < 3; i++) {
        size_t n;
        uint8_t *x = nested(depths[i], NULL, 0, NULL, 0, &n);
        uint8_t *ir = malloc(n + 16);
        size_t il = 0;
        kv_tw_field(ir, &il, 5, x, n);
        kv_store_batch *b;
        cr_assert_eq(kv_store_batch_begin(t.s, &b), 0);
        kv_result res;
        cr_assert_eq(kv_store_apply(t.s, b, ++t.index, ir, il, NULL, &res), 0);
        cr_assert_eq(kv_store_batch_commit(t.s, b), 0);
        cr_assert_eq(KVT_STORE_CODE(res), KV_GRPC_INVALID_ARGUMENT, "depth %zu", depths[i]);
        cr_assert_str_eq(KVT_STORE_MSG(res), "etcdserver: too many operations in txn request");
        free(res.resp);
        free(ir);
        free(x);
    }
    cr_assert_eq(kvt_store_put(&t, "after", "v", 0), 2, "the store keeps applying");
    kvt_store_close(&t);
}

/* ---- pb_strip: unknown fields dropped before protobuf-c unpacks (client input audit) ---- */

/* A RangeRequest: key "k", limit 7, and `unknown` two-byte unknown fields (15: varint 0)
 * spread between them. *out malloc'd. */
static uint8_t *range_with_unknown(size_t unknown, size_t *n)
{
    uint8_t *b = malloc(2 * unknown + 16);
    cr_assert(b);
    size_t len = 0;
    for (size_t i = 0; i < unknown / 2; i++) {
        b[len++] = 0x78;
        b[len++] = 0x00;
    }
    b[len++] = 0x0a; /* key */
    b[len++] = 0x01;
    b[len++] = 'k';
    for (size_t i = unknown / 2; i < unknown; i++) {
        b[len++] = 0x78;
        b[len++] = 0x00;
    }
    b[len++] = 0x18; /* limit */
    b[len++] = 0x07;
    *n = len;
    return b;
}

Test(pb_strip, many_unknown_fields_are_dropped)
{
    const ProtobufCMessageDescriptor *d = &etcdserverpb__range_request__descriptor;
    size_t n;
    uint8_t *b = range_with_unknown(100000, &n);
    cr_assert_eq(kv_pb_count_unknown(d, b, n), 100000);
    uint8_t *out = malloc(n);
    size_t sn = kv_pb_strip_unknown(d, b, n, out);
    uint8_t want[] = {0x0a, 0x01, 'k', 0x18, 0x07};
    cr_assert_eq(sn, sizeof want);
    cr_assert_arr_eq(out, want, sizeof want);
    free(out);
    Etcdserverpb__RangeRequest *r = (Etcdserverpb__RangeRequest *)kv_pb_unpack(d, b, n);
    cr_assert_not_null(r);
    cr_assert(r->key.len == 1 && r->key.data[0] == 'k' && r->limit == 7);
    cr_assert_eq(r->base.n_unknown_fields, 0, "dropped, as etcd ignores them");
    etcdserverpb__range_request__free_unpacked(r, NULL);
    free(b);
}

Test(pb_strip, few_unknown_fields_and_small_messages_go_to_protobuf_c_as_they_are)
{
    const ProtobufCMessageDescriptor *d = &etcdserverpb__range_request__descriptor;
    size_t n;
    uint8_t *b = range_with_unknown(KV_PB_UNKNOWN_KEEP, &n);
    Etcdserverpb__RangeRequest *r = (Etcdserverpb__RangeRequest *)kv_pb_unpack(d, b, n);
    cr_assert(r && r->limit == 7);
    cr_assert_eq(r->base.n_unknown_fields, KV_PB_UNKNOWN_KEEP);
    etcdserverpb__range_request__free_unpacked(r, NULL);
    free(b);
    /* a padded key makes it long enough to be filtered; 16 unknown fields are still kept */
    uint8_t big[2048];
    size_t bl = 0;
    for (int i = 0; i < KV_PB_UNKNOWN_KEEP; i++) {
        big[bl++] = 0x78;
        big[bl++] = 0x01;
    }
    big[bl++] = 0x0a;
    big[bl++] = 0x80 | (1500 & 0x7f);
    big[bl++] = 1500 >> 7;
    memset(big + bl, 'x', 1500);
    bl += 1500;
    cr_assert_geq(bl, KV_PB_STRIP_MIN_LEN);
    r = (Etcdserverpb__RangeRequest *)kv_pb_unpack(d, big, bl);
    cr_assert(r && r->key.len == 1500);
    cr_assert_eq(r->base.n_unknown_fields, KV_PB_UNKNOWN_KEEP);
    etcdserverpb__range_request__free_unpacked(r, NULL);
}

Test(pb_strip, malformed_bytes_stay_malformed)
{
    const ProtobufCMessageDescriptor *d = &etcdserverpb__range_request__descriptor;
    size_t n;
    uint8_t *b = range_with_unknown(2000, &n);
    b[n - 1] = 0x80; /* limit's varint now runs off the end */
    cr_assert_eq(kv_pb_count_unknown(d, b, n), -1);
    cr_assert_null(kv_pb_unpack(d, b, n));
    /* a known field with the wrong wire type is kept, so protobuf-c still refuses it */
    b[n - 2] = 0x1a; /* limit as length-delimited */
    b[n - 1] = 0x00;
    cr_assert_eq(kv_pb_count_unknown(d, b, n), 2000);
    cr_assert_null(kv_pb_unpack(d, b, n));
    cr_assert_null(protobuf_c_message_unpack(d, NULL, n, b));
    free(b);
}
