/*
 * gen_corpus.c - writes the seed corpora of the fuzz harnesses (run once; the output is
 * committed under tests/fuzz/corpus/). Usage: kv_fuzz_gen_corpus <corpus dir>.
 * Inputs are small valid requests packed with protobuf-c and, for the HTTP/2 harnesses,
 * framed by the fuzz_h2c.h client encoder. Build: cmake --build <dir> --target
 * kv_fuzz_gen_corpus.
 */
#include "fuzz_h2c.h"
#include "internal.pb-c.h"
#include "rpc.pb-c.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct bytes {
    uint8_t p[65536];
    size_t n;
} bytes;

static const char *g_root;

static void add(bytes *b, const void *p, size_t n)
{
    if (b->n + n > sizeof(b->p)) {
        fprintf(stderr, "gen_corpus: input too large\n");
        exit(1);
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
}

static void add_byte(bytes *b, uint8_t v)
{
    add(b, &v, 1);
}

static void add_msg(bytes *b, const ProtobufCMessage *m)
{
    uint8_t tmp[8192];
    size_t n = protobuf_c_message_get_packed_size(m);
    if (n > sizeof(tmp))
        exit(1);
    protobuf_c_message_pack(m, tmp);
    add(b, tmp, n);
}

static void save(const char *harness, const char *name, const bytes *b)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", g_root, harness);
    mkdir(path, 0755);
    snprintf(path, sizeof(path), "%s/%s/%s", g_root, harness, name);
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(b->p, 1, b->n, f) != b->n || fclose(f) != 0) {
        fprintf(stderr, "gen_corpus: %s: %s\n", path, strerror(errno));
        exit(1);
    }
}

#define BIN(s) ((ProtobufCBinaryData){sizeof(s) - 1, (uint8_t *)(s)})

/* ---- request messages shared by the harnesses ---- */

enum { R_RANGE, R_PUT, R_DEL, R_TXN, R_COMPACT, R_GRANT, R_REVOKE, R_KA, R_TTL, R_N };

static void msg_range(bytes *b, int variant)
{
    Etcdserverpb__RangeRequest r = ETCDSERVERPB__RANGE_REQUEST__INIT;
    r.key = BIN("a");
    switch (variant) {
    case 0:
        break;
    case 1:
        r.range_end = BIN("\0");
        r.key = BIN("\0");
        break;
    case 2:
        r.range_end = BIN("foo0");
        r.key = BIN("foo");
        r.limit = 1;
        break;
    case 3:
        r.range_end = BIN("\0");
        r.sort_order = ETCDSERVERPB__RANGE_REQUEST__SORT_ORDER__DESCEND;
        r.sort_target = ETCDSERVERPB__RANGE_REQUEST__SORT_TARGET__VALUE;
        r.limit = 2;
        break;
    case 4:
        r.range_end = BIN("z");
        r.revision = 6;
        r.keys_only = 1;
        break;
    case 5:
        r.range_end = BIN("\0");
        r.count_only = 1;
        r.min_mod_revision = 2;
        r.max_create_revision = 10;
        break;
    case 6:
        r.revision = 2; /* compacted */
        break;
    default:
        r.range_end = BIN("\0");
        r.sort_order = ETCDSERVERPB__RANGE_REQUEST__SORT_ORDER__ASCEND;
        r.sort_target = ETCDSERVERPB__RANGE_REQUEST__SORT_TARGET__MOD;
        r.serializable = 1;
        r.min_create_revision = 1;
        r.max_mod_revision = 100;
        break;
    }
    add_msg(b, &r.base);
}

static void msg_put(bytes *b, int variant)
{
    Etcdserverpb__PutRequest p = ETCDSERVERPB__PUT_REQUEST__INIT;
    p.key = BIN("foo");
    p.value = BIN("bar");
    if (variant == 1)
        p.prev_kv = 1;
    if (variant == 2)
        p.lease = 1;
    if (variant == 3) {
        p.ignore_value = 1;
        p.value = BIN("");
    }
    if (variant == 4) {
        p.ignore_lease = 1;
        p.key = BIN("leased");
    }
    add_msg(b, &p.base);
}

static void msg_del(bytes *b, int variant)
{
    Etcdserverpb__DeleteRangeRequest d = ETCDSERVERPB__DELETE_RANGE_REQUEST__INIT;
    d.key = BIN("foo");
    if (variant >= 1)
        d.range_end = BIN("foo0");
    if (variant >= 2)
        d.prev_kv = 1;
    add_msg(b, &d.base);
}

static void msg_txn(bytes *b, int variant)
{
    Etcdserverpb__Compare c = ETCDSERVERPB__COMPARE__INIT;
    Etcdserverpb__Compare *cs[1] = {&c};
    c.key = BIN("a");
    c.result = (Etcdserverpb__Compare__CompareResult)(variant % 4);
    switch (variant % 5) {
    case 0:
        c.target = ETCDSERVERPB__COMPARE__COMPARE_TARGET__VERSION;
        c.target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_VERSION;
        c.version = 3;
        break;
    case 1:
        c.target = ETCDSERVERPB__COMPARE__COMPARE_TARGET__CREATE;
        c.target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_CREATE_REVISION;
        c.create_revision = 2;
        break;
    case 2:
        c.target = ETCDSERVERPB__COMPARE__COMPARE_TARGET__MOD;
        c.target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_MOD_REVISION;
        c.mod_revision = 20;
        c.range_end = BIN("\0");
        break;
    case 3:
        c.target = ETCDSERVERPB__COMPARE__COMPARE_TARGET__VALUE;
        c.target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_VALUE;
        c.value = BIN("v3");
        break;
    default:
        c.target = ETCDSERVERPB__COMPARE__COMPARE_TARGET__LEASE;
        c.target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_LEASE;
        c.lease = 1;
        c.key = BIN("leased");
        break;
    }
    Etcdserverpb__RangeRequest r = ETCDSERVERPB__RANGE_REQUEST__INIT;
    r.key = BIN("a");
    r.range_end = BIN("b");
    Etcdserverpb__PutRequest p = ETCDSERVERPB__PUT_REQUEST__INIT;
    p.key = BIN("t");
    p.value = BIN("x");
    Etcdserverpb__DeleteRangeRequest d = ETCDSERVERPB__DELETE_RANGE_REQUEST__INIT;
    d.key = BIN("k1");
    d.prev_kv = 1;
    Etcdserverpb__RequestOp o_r = ETCDSERVERPB__REQUEST_OP__INIT, o_p = o_r, o_d = o_r, o_t = o_r;
    o_r.request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_RANGE;
    o_r.request_range = &r;
    o_p.request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT;
    o_p.request_put = &p;
    o_d.request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_DELETE_RANGE;
    o_d.request_delete_range = &d;
    Etcdserverpb__TxnRequest inner = ETCDSERVERPB__TXN_REQUEST__INIT;
    Etcdserverpb__RequestOp *inner_ops[1] = {&o_p};
    inner.success = inner_ops;
    inner.n_success = 1;
    o_t.request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_TXN;
    o_t.request_txn = &inner;
    Etcdserverpb__RequestOp *succ[3] = {&o_r, &o_p, &o_d};
    Etcdserverpb__RequestOp *fail[2] = {&o_t, &o_r};
    Etcdserverpb__TxnRequest t = ETCDSERVERPB__TXN_REQUEST__INIT;
    t.compare = cs;
    t.n_compare = 1;
    t.success = succ;
    t.n_success = variant < 5 ? 3 : 1;
    t.failure = fail;
    t.n_failure = 2;
    if (variant == 6) { /* duplicate key in success: "duplicate key given in txn request" */
        succ[0] = &o_p;
        t.n_success = 2;
    }
    add_msg(b, &t.base);
}

static void msg_compact(bytes *b, int variant)
{
    Etcdserverpb__CompactionRequest c = ETCDSERVERPB__COMPACTION_REQUEST__INIT;
    c.revision = variant == 0 ? 8 : variant == 1 ? 100 : 3;
    c.physical = variant == 2;
    add_msg(b, &c.base);
}

static void msg_grant(bytes *b, int64_t id, int64_t ttl)
{
    Etcdserverpb__LeaseGrantRequest g = ETCDSERVERPB__LEASE_GRANT_REQUEST__INIT;
    g.id = id;
    g.ttl = ttl;
    add_msg(b, &g.base);
}

static void msg_revoke(bytes *b, int64_t id)
{
    Etcdserverpb__LeaseRevokeRequest r = ETCDSERVERPB__LEASE_REVOKE_REQUEST__INIT;
    r.id = id;
    add_msg(b, &r.base);
}

static void msg_keepalive(bytes *b, int64_t id)
{
    Etcdserverpb__LeaseKeepAliveRequest k = ETCDSERVERPB__LEASE_KEEP_ALIVE_REQUEST__INIT;
    k.id = id;
    add_msg(b, &k.base);
}

static void msg_ttl(bytes *b, int64_t id, int keys)
{
    Etcdserverpb__LeaseTimeToLiveRequest t = ETCDSERVERPB__LEASE_TIME_TO_LIVE_REQUEST__INIT;
    t.id = id;
    t.keys = keys;
    add_msg(b, &t.base);
}

static void msg_checkpoint(bytes *b, int64_t id, int64_t rem)
{
    Etcdserverpb__LeaseCheckpoint cp = ETCDSERVERPB__LEASE_CHECKPOINT__INIT;
    Etcdserverpb__LeaseCheckpoint *cps[1] = {&cp};
    cp.id = id;
    cp.remaining_ttl = rem;
    Etcdserverpb__LeaseCheckpointRequest r = ETCDSERVERPB__LEASE_CHECKPOINT_REQUEST__INIT;
    r.checkpoints = cps;
    r.n_checkpoints = 1;
    add_msg(b, &r.base);
}

/* ---- fuzz_grpc_frame ---- */

static void gen_frame(void)
{
    static const char *names[] = {"df_one", "df_two", "df_empty", "df_split", "df_big"};
    for (int v = 0; v < 5; v++) {
        bytes b = {.n = 0};
        add_byte(&b, 0);
        add_byte(&b, v == 4 ? 0x00 : 0x10); /* max_len */
        add_byte(&b, v == 4 ? 0x20 : 0x00);
        for (int m = 0; m < (v == 1 ? 3 : 1); m++) {
            bytes msg = {.n = 0};
            if (v != 2)
                msg_range(&msg, m);
            uint8_t pre[5] = {0, 0, 0, (uint8_t)(msg.n >> 8), (uint8_t)msg.n};
            if (v == 4)
                pre[2] = 1; /* larger than max_len */
            add(&b, pre, 5);
            add(&b, msg.p, v == 3 ? msg.n / 2 : msg.n);
        }
        save("fuzz_grpc_frame", names[v], &b);
    }
    bytes c = {.n = 0};
    add(&c, "\x01\x10\x00\x01\x00\x00\x00\x02hi", 10); /* compressed flag */
    save("fuzz_grpc_frame", "df_compressed", &c);
    static const char *timeouts[] = {"1S", "100m", "99999999H", "5u", "1n", "10M", "123456789S"};
    for (int i = 0; i < 7; i++) {
        bytes b = {.n = 0};
        add_byte(&b, 2);
        add(&b, timeouts[i], strlen(timeouts[i]));
        char name[32];
        snprintf(name, sizeof(name), "timeout_%d", i);
        save("fuzz_grpc_frame", name, &b);
    }
    static const char *msgs[] = {"etcdserver: key not found", "100%\n\x01\xff", "%41%zz%"};
    for (int i = 0; i < 3; i++) {
        bytes b = {.n = 0};
        add_byte(&b, 3);
        add(&b, msgs[i], strlen(msgs[i]));
        char name[32];
        snprintf(name, sizeof(name), "percent_%d", i);
        save("fuzz_grpc_frame", name, &b);
    }
}

/* ---- fuzz_request ---- */

static void gen_request(void)
{
    char name[64];
    for (int v = 0; v < 8; v++) {
        bytes b = {.n = 0};
        add_byte(&b, 0);
        msg_range(&b, v);
        snprintf(name, sizeof(name), "range_%d", v);
        save("fuzz_request", name, &b);
    }
    for (int v = 0; v < 5; v++) {
        bytes b = {.n = 0};
        add_byte(&b, 1);
        msg_put(&b, v);
        snprintf(name, sizeof(name), "put_%d", v);
        save("fuzz_request", name, &b);
    }
    for (int v = 0; v < 3; v++) {
        bytes b = {.n = 0};
        add_byte(&b, 2);
        msg_del(&b, v);
        snprintf(name, sizeof(name), "delete_%d", v);
        save("fuzz_request", name, &b);
    }
    for (int v = 0; v < 7; v++) {
        bytes b = {.n = 0};
        add_byte(&b, 3);
        msg_txn(&b, v);
        snprintf(name, sizeof(name), "txn_%d", v);
        save("fuzz_request", name, &b);
    }
    for (int v = 0; v < 3; v++) {
        bytes b = {.n = 0};
        add_byte(&b, 4);
        msg_compact(&b, v);
        snprintf(name, sizeof(name), "compact_%d", v);
        save("fuzz_request", name, &b);
    }
    bytes b = {.n = 0};
    add(&b, "\x05\x00", 2);
    msg_grant(&b, 7, 60);
    save("fuzz_request", "lease_grant", &b);
    b.n = 0;
    add(&b, "\x05\x01", 2);
    msg_revoke(&b, 1);
    save("fuzz_request", "lease_revoke", &b);
    b.n = 0;
    add(&b, "\x05\x02", 2);
    msg_checkpoint(&b, 1, 30);
    save("fuzz_request", "lease_checkpoint", &b);
    /* raw InternalRequest: id + put */
    b.n = 0;
    add_byte(&b, 6);
    {
        Etcdserverpb__PutRequest p = ETCDSERVERPB__PUT_REQUEST__INIT;
        p.key = BIN("raw");
        p.value = BIN("1");
        Kvdpb__InternalRequest ir = KVDPB__INTERNAL_REQUEST__INIT;
        ir.id = 9;
        ir.request_case = KVDPB__INTERNAL_REQUEST__REQUEST_PUT;
        ir.put = &p;
        add_msg(&b, &ir.base);
    }
    save("fuzz_request", "raw_internal_put", &b);
    /* nested txn: depth 3 and 60 (the nesting budget is max_txn_ops-based) */
    static const uint16_t depths[] = {3, 60};
    for (int i = 0; i < 2; i++) {
        b.n = 0;
        add_byte(&b, 7);
        add_byte(&b, (uint8_t)(depths[i] >> 8));
        add_byte(&b, (uint8_t)depths[i]);
        msg_txn(&b, 5);
        snprintf(name, sizeof(name), "nested_txn_%u", depths[i]);
        save("fuzz_request", name, &b);
    }
    /* several requests in one batch: grant, put with that lease, txn, delete, range */
    b.n = 0;
    add(&b, "\x05\x00", 2);
    msg_grant(&b, 9, 60);
    add(&b, "\xff\xffNEXT", 6);
    add_byte(&b, 1);
    {
        Etcdserverpb__PutRequest p = ETCDSERVERPB__PUT_REQUEST__INIT;
        p.key = BIN("withlease");
        p.value = BIN("v");
        p.lease = 9;
        add_msg(&b, &p.base);
    }
    add(&b, "\xff\xffNEXT", 6);
    add_byte(&b, 3);
    msg_txn(&b, 2);
    add(&b, "\xff\xffNEXT", 6);
    add_byte(&b, 4);
    msg_compact(&b, 0);
    save("fuzz_request", "batch_mixed", &b);
}

/* ---- the two HTTP/2 harnesses ---- */

typedef struct h2script {
    kv_fuzz_h2c *c;
    bytes out;
} h2script;

static void h2_begin(h2script *s)
{
    s->out.n = 0;
    if (kv_fuzz_h2c_new(&s->c) != 0)
        exit(1);
}

static void h2_flush(h2script *s, int sync)
{
    const uint8_t *p;
    size_t n;
    if (kv_fuzz_h2c_pull(s->c, &p, &n) != 0)
        exit(1);
    add(&s->out, p, n);
    if (sync)
        add(&s->out, "\xff\xffSYNC\xff\xff", 8);
}

static void h2_unary(h2script *s, const char *path, const bytes *msg, const char *timeout)
{
    int h = kv_fuzz_h2c_open(s->c, path, timeout);
    kv_fuzz_h2c_send(s->c, h, msg->p, msg->n);
    kv_fuzz_h2c_end(s->c, h);
}

static void h2_end(h2script *s, const char *name)
{
    h2_flush(s, 0);
    save("fuzz_h2_server", name, &s->out);
    kv_fuzz_h2c_free(s->c);
}

static void gen_h2(void)
{
    static const char *kv_paths[] = {"/etcdserverpb.KV/Range", "/etcdserverpb.KV/Put",
                                     "/etcdserverpb.KV/DeleteRange", "/etcdserverpb.KV/Txn",
                                     "/etcdserverpb.KV/Compact"};
    h2script s;
    bytes m;
    char name[64];
    for (int k = 0; k < 5; k++) {
        for (int v = 0; v < 3; v++) {
            m.n = 0;
            if (k == 0)
                msg_range(&m, v * 2 + 1);
            else if (k == 1)
                msg_put(&m, v);
            else if (k == 2)
                msg_del(&m, v);
            else if (k == 3)
                msg_txn(&m, v + 2);
            else
                msg_compact(&m, v);
            h2_begin(&s);
            h2_unary(&s, kv_paths[k], &m, v == 2 ? "5S" : NULL);
            if (k != 0 && v == 1) { /* write, then read it back after the apply */
                h2_flush(&s, 1);
                bytes r = {.n = 0};
                msg_range(&r, 1);
                h2_unary(&s, kv_paths[0], &r, NULL);
            }
            snprintf(name, sizeof(name), "kv_%d_%d", k, v);
            h2_end(&s, name);
        }
    }
    /* Other services. */
    static const char *paths[] = {"/etcdserverpb.Maintenance/Status",
                                  "/etcdserverpb.Maintenance/HashKV",
                                  "/etcdserverpb.Maintenance/Alarm",
                                  "/etcdserverpb.Maintenance/Defragment",
                                  "/etcdserverpb.Cluster/MemberList",
                                  "/etcdserverpb.Auth/Authenticate",
                                  "/etcdserverpb.Nope/Nope",
                                  "/etcdserverpb.KV/Nope",
                                  "noslash",
                                  "/etcdserverpb.Lease/LeaseLeases"};
    for (int i = 0; i < 10; i++) {
        m.n = 0;
        h2_begin(&s);
        h2_unary(&s, paths[i], &m, NULL);
        snprintf(name, sizeof(name), "svc_%d", i);
        h2_end(&s, name);
    }
    /* etcd's HTTP API over HTTP/2: JSON put, then range, health, and a watch. */
    static const char *const json[][3] = {
        {"POST", "/v3/kv/put", "{\"key\":\"Zm9v\",\"value\":\"YmFy\"}"},
        {"POST", "/v3/kv/range", "{\"key\":\"Zm9v\"}"},
        {"GET", "/health", ""},
        {"POST", "/v3/watch", "{\"create_request\":{\"key\":\"Zm9v\"}}"},
    };
    h2_begin(&s);
    for (int i = 0; i < 4; i++) {
        int h = kv_fuzz_h2c_open_http(s.c, json[i][0], json[i][1]);
        kv_fuzz_h2c_send_raw(s.c, h, (const uint8_t *)json[i][2], strlen(json[i][2]));
        kv_fuzz_h2c_end(s.c, h);
        h2_flush(&s, 1);
    }
    h2_end(&s, "json_gateway");
    /* Lease grant, then a keepalive stream with two renewals, then TTL with keys. */
    h2_begin(&s);
    m.n = 0;
    msg_grant(&m, 42, 30);
    h2_unary(&s, "/etcdserverpb.Lease/LeaseGrant", &m, NULL);
    h2_flush(&s, 1);
    int ka = kv_fuzz_h2c_open(s.c, "/etcdserverpb.Lease/LeaseKeepAlive", NULL);
    m.n = 0;
    msg_keepalive(&m, 42);
    kv_fuzz_h2c_send(s.c, ka, m.p, m.n);
    kv_fuzz_h2c_send(s.c, ka, m.p, m.n);
    h2_flush(&s, 1);
    m.n = 0;
    msg_ttl(&m, 42, 1);
    h2_unary(&s, "/etcdserverpb.Lease/LeaseTimeToLive", &m, NULL);
    kv_fuzz_h2c_end(s.c, ka);
    h2_end(&s, "lease_flow");
    /* Two messages on a unary call; a message split across DATA frames; a reset call. */
    h2_begin(&s);
    m.n = 0;
    msg_range(&m, 0);
    int h = kv_fuzz_h2c_open(s.c, kv_paths[0], NULL);
    kv_fuzz_h2c_send(s.c, h, m.p, m.n);
    kv_fuzz_h2c_send(s.c, h, m.p, m.n);
    kv_fuzz_h2c_end(s.c, h);
    h2_end(&s, "unary_two_msgs");
    h2_begin(&s);
    h = kv_fuzz_h2c_open(s.c, kv_paths[1], NULL);
    m.n = 0;
    msg_put(&m, 0);
    uint8_t pre[5] = {0, 0, 0, 0, (uint8_t)m.n};
    kv_fuzz_h2c_send_raw(s.c, h, pre, 5);
    kv_fuzz_h2c_send_raw(s.c, h, m.p, 3);
    h2_flush(&s, 1);
    kv_fuzz_h2c_send_raw(s.c, h, m.p + 3, m.n - 3);
    kv_fuzz_h2c_end(s.c, h);
    h2_end(&s, "split_message");
    h2_begin(&s);
    h = kv_fuzz_h2c_open(s.c, "/etcdserverpb.Lease/LeaseKeepAlive", NULL);
    m.n = 0;
    msg_keepalive(&m, 1);
    kv_fuzz_h2c_send(s.c, h, m.p, m.n);
    h2_flush(&s, 1);
    kv_fuzz_h2c_reset(s.c, h);
    h2_end(&s, "keepalive_reset");
    h2_begin(&s);
    h = kv_fuzz_h2c_open(s.c, kv_paths[0], NULL);
    uint8_t big[5] = {0, 0x7f, 0xff, 0xff, 0xff}; /* oversized prefix */
    kv_fuzz_h2c_send_raw(s.c, h, big, 5);
    kv_fuzz_h2c_end(s.c, h);
    h2_end(&s, "oversized_prefix");
    h2_begin(&s);
    h = kv_fuzz_h2c_open(s.c, kv_paths[0], NULL);
    uint8_t comp[6] = {1, 0, 0, 0, 1, 0}; /* compressed flag */
    kv_fuzz_h2c_send_raw(s.c, h, comp, 6);
    kv_fuzz_h2c_end(s.c, h);
    h2_end(&s, "compressed_flag");
}

/* ---- fuzz_lease scripts ---- */

static void rec(bytes *b, uint8_t op, const bytes *msg)
{
    add_byte(b, op);
    add_byte(b, (uint8_t)msg->n);
    add(b, msg->p, msg->n);
}

static void gen_lease(void)
{
    bytes b, m;
    char name[64];
    static const int64_t ids[] = {0, 1, 1000, -5, 0x7fffffffffffffffLL};
    static const int64_t ttls[] = {0, 1, 60, 9000000001LL, -1};
    for (int i = 0; i < 5; i++) {
        b.n = 0;
        m.n = 0;
        msg_grant(&m, ids[i], ttls[i]);
        rec(&b, 0, &m);
        rec(&b, 7, &(bytes){.n = 0});
        m.n = 0;
        msg_keepalive(&m, ids[i]);
        rec(&b, 2, &m);
        rec(&b, 2, &m);
        m.n = 0;
        msg_ttl(&m, ids[i], i & 1);
        rec(&b, 3, &m);
        rec(&b, 7, &(bytes){.n = 0});
        m.n = 0;
        msg_revoke(&m, ids[i]);
        rec(&b, 1, &m);
        rec(&b, 7, &(bytes){.n = 0});
        m.n = 0;
        msg_keepalive(&m, ids[i]);
        rec(&b, 2, &m);
        rec(&b, 5, &(bytes){.n = 0});
        snprintf(name, sizeof(name), "grant_renew_revoke_%d", i);
        save("fuzz_lease", name, &b);
    }
    /* keepalive stream reset mid-way; a second stream; Leases listing. */
    b.n = 0;
    m.n = 0;
    msg_grant(&m, 77, 10);
    rec(&b, 0, &m);
    rec(&b, 7, &(bytes){.n = 0});
    m.n = 0;
    msg_keepalive(&m, 77);
    rec(&b, 2, &m);
    rec(&b, 6, &(bytes){.n = 0});
    rec(&b, 2, &m);
    rec(&b, 7, &(bytes){.n = 0});
    m.n = 0;
    rec(&b, 4, &m);
    save("fuzz_lease", "reset_and_list", &b);
    /* unknown lease renewals and an empty keepalive message */
    b.n = 0;
    m.n = 0;
    msg_keepalive(&m, 123456);
    rec(&b, 2, &m);
    m.n = 0;
    rec(&b, 2, &m);
    rec(&b, 3, &m);
    save("fuzz_lease", "unknown_lease", &b);
    /* many renewals */
    b.n = 0;
    m.n = 0;
    msg_grant(&m, 5, 5);
    rec(&b, 0, &m);
    rec(&b, 7, &(bytes){.n = 0});
    m.n = 0;
    msg_keepalive(&m, 5);
    for (int i = 0; i < 20; i++)
        rec(&b, 2, &m);
    rec(&b, 5, &(bytes){.n = 0});
    save("fuzz_lease", "many_renewals", &b);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s <corpus dir>\n", argv[0]);
        return 2;
    }
    g_root = argv[1];
    mkdir(g_root, 0755);
    gen_frame();
    gen_request();
    gen_h2();
    gen_lease();
    return 0;
}
