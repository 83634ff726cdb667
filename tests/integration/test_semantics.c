/*
 * it_semantics: MVCC revision semantics, txn and compaction, observed over the wire
 * (raw gRPC, so every field is checked exactly) against a real server process
 * (KV_TEST_SERVER=kvd|etcd). The expected values are etcd's documented semantics; the
 * same assertions pass against etcd 3.4.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grpc_raw.h"
#include "harness.h"
#include "rpc.pb-c.h"

#define CALL_TIMEOUT_MS 10000

typedef struct fx {
    kv_it_server srv;
    kv_it_grpc *g;
} fx;

static fx *f;

static void setup(void)
{
    f = calloc(1, sizeof(*f));
    cr_assert(f);
    kv_it_kind kind = kv_it_kind_from_env();
    int rc = kv_it_server_init(&f->srv, kind, NULL);
    cr_assert_eq(rc, 0, "init %s (%s): %d", kv_it_kind_name(kind), f->srv.bin, rc);
    rc = kv_it_server_start(&f->srv, 20000);
    cr_assert_eq(rc, 0, "start %s: %d", kv_it_kind_name(kind), rc);
    rc = kv_it_grpc_open(&f->g, "127.0.0.1", f->srv.client_port, 5000);
    cr_assert_eq(rc, 0, "connect: %d", rc);
}

static void teardown(void)
{
    if (!f)
        return;
    kv_it_grpc_close(f->g);
    kv_it_server_destroy(&f->srv);
    free(f);
    f = NULL;
}

/* One call; returns the grpc status (0 = OK) and the unpacked response via unpack. */
static int call(const char *method, const ProtobufCMessage *req, uint8_t **resp, size_t *resp_len,
                char *msg, size_t msg_cap)
{
    size_t len = protobuf_c_message_get_packed_size(req);
    uint8_t *buf = malloc(len + 1);
    cr_assert(buf);
    protobuf_c_message_pack(req, buf);
    int status = -1;
    int rc = kv_it_grpc_call(f->g, method, buf, len, resp, resp_len, CALL_TIMEOUT_MS, &status, msg,
                             msg_cap);
    free(buf);
    cr_assert(rc == 0 || rc == KV_IT_GRPC_STATUS, "%s: transport error %d", method, rc);
    return status;
}

static ProtobufCBinaryData bin(const char *s)
{
    return (ProtobufCBinaryData){.len = strlen(s), .data = (uint8_t *)s};
}

static int64_t put(const char *k, const char *v)
{
    Etcdserverpb__PutRequest req = ETCDSERVERPB__PUT_REQUEST__INIT;
    req.key = bin(k);
    req.value = bin(v);
    uint8_t *resp;
    size_t rl;
    char msg[256];
    int st = call("/etcdserverpb.KV/Put", &req.base, &resp, &rl, msg, sizeof(msg));
    cr_assert_eq(st, 0, "put %s: %d %s", k, st, msg);
    Etcdserverpb__PutResponse *r = etcdserverpb__put_response__unpack(NULL, rl, resp);
    free(resp);
    cr_assert(r && r->header);
    int64_t rev = r->header->revision;
    etcdserverpb__put_response__free_unpacked(r, NULL);
    return rev;
}

/* Range of one key (at rev, 0 = newest). Returns the response (caller frees) or NULL and
 * the grpc status/message on error. */
static Etcdserverpb__RangeResponse *range(const char *k, const char *end, int64_t rev, int *st,
                                          char *msg, size_t cap)
{
    Etcdserverpb__RangeRequest req = ETCDSERVERPB__RANGE_REQUEST__INIT;
    req.key = bin(k);
    if (end)
        req.range_end = bin(end);
    req.revision = rev;
    uint8_t *resp;
    size_t rl;
    *st = call("/etcdserverpb.KV/Range", &req.base, &resp, &rl, msg, cap);
    if (*st != 0)
        return NULL;
    Etcdserverpb__RangeResponse *r = etcdserverpb__range_response__unpack(NULL, rl, resp);
    free(resp);
    cr_assert(r && r->header);
    return r;
}

static Etcdserverpb__RangeResponse *get_ok(const char *k, int64_t rev)
{
    int st;
    char msg[256];
    Etcdserverpb__RangeResponse *r = range(k, NULL, rev, &st, msg, sizeof(msg));
    cr_assert_eq(st, 0, "get %s@%lld: %d %s", k, (long long)rev, st, msg);
    return r;
}

static void expect_kv(const char *k, int64_t rev, const char *val, int64_t create, int64_t mod,
                      int64_t version)
{
    Etcdserverpb__RangeResponse *r = get_ok(k, rev);
    cr_assert_eq(r->n_kvs, 1, "%s@%lld: %zu kvs", k, (long long)rev, r->n_kvs);
    Mvccpb__KeyValue *kv = r->kvs[0];
    cr_expect_eq(kv->value.len, strlen(val));
    cr_expect(kv->value.len == strlen(val) && memcmp(kv->value.data, val, kv->value.len) == 0,
              "%s@%lld value", k, (long long)rev);
    cr_expect_eq(kv->create_revision, create, "%s@%lld create %lld want %lld", k, (long long)rev,
                 (long long)kv->create_revision, (long long)create);
    cr_expect_eq(kv->mod_revision, mod, "%s@%lld mod %lld want %lld", k, (long long)rev,
                 (long long)kv->mod_revision, (long long)mod);
    cr_expect_eq(kv->version, version, "%s@%lld version %lld want %lld", k, (long long)rev,
                 (long long)kv->version, (long long)version);
    cr_expect_eq(r->count, 1);
    etcdserverpb__range_response__free_unpacked(r, NULL);
}

static void expect_absent(const char *k, int64_t rev)
{
    Etcdserverpb__RangeResponse *r = get_ok(k, rev);
    cr_expect_eq(r->n_kvs, 0, "%s@%lld present", k, (long long)rev);
    cr_expect_eq(r->count, 0);
    etcdserverpb__range_response__free_unpacked(r, NULL);
}

static int64_t del(const char *k, const char *end, int64_t *deleted)
{
    Etcdserverpb__DeleteRangeRequest req = ETCDSERVERPB__DELETE_RANGE_REQUEST__INIT;
    req.key = bin(k);
    if (end)
        req.range_end = bin(end);
    uint8_t *resp;
    size_t rl;
    char msg[256];
    int st = call("/etcdserverpb.KV/DeleteRange", &req.base, &resp, &rl, msg, sizeof(msg));
    cr_assert_eq(st, 0, "del %s: %d %s", k, st, msg);
    Etcdserverpb__DeleteRangeResponse *r =
        etcdserverpb__delete_range_response__unpack(NULL, rl, resp);
    free(resp);
    cr_assert(r && r->header);
    *deleted = r->deleted;
    int64_t rev = r->header->revision;
    etcdserverpb__delete_range_response__free_unpacked(r, NULL);
    return rev;
}

static int64_t header_rev(void)
{
    Etcdserverpb__RangeResponse *r = get_ok("any", 0);
    int64_t rev = r->header->revision;
    etcdserverpb__range_response__free_unpacked(r, NULL);
    return rev;
}

TestSuite(semantics, .init = setup, .fini = teardown, .timeout = 120);

Test(semantics, revisions_put_put_del_put)
{
    cr_expect_eq(header_rev(), 1, "a fresh store is at revision 1");
    cr_expect_eq(put("k", "v1"), 2);
    expect_kv("k", 0, "v1", 2, 2, 1);
    cr_expect_eq(put("k", "v2"), 3);
    expect_kv("k", 0, "v2", 2, 3, 2);
    int64_t deleted = -1;
    cr_expect_eq(del("k", NULL, &deleted), 4);
    cr_expect_eq(deleted, 1);
    expect_absent("k", 0);
    cr_expect_eq(put("k", "v3"), 5);
    expect_kv("k", 0, "v3", 5, 5, 1);
    /* history */
    expect_kv("k", 2, "v1", 2, 2, 1);
    expect_kv("k", 3, "v2", 2, 3, 2);
    expect_absent("k", 4);
    expect_absent("k", 1);
    /* deleting nothing does not create a revision */
    cr_expect_eq(del("nothing", NULL, &deleted), 5);
    cr_expect_eq(deleted, 0);
    cr_expect_eq(header_rev(), 5);
    /* range over several keys: count, more, limit */
    put("p/a", "1");
    put("p/b", "2");
    put("p/c", "3");
    Etcdserverpb__RangeRequest req = ETCDSERVERPB__RANGE_REQUEST__INIT;
    req.key = bin("p/");
    req.range_end = bin("p0");
    req.limit = 2;
    uint8_t *resp;
    size_t rl;
    char msg[256];
    cr_assert_eq(call("/etcdserverpb.KV/Range", &req.base, &resp, &rl, msg, sizeof(msg)), 0);
    Etcdserverpb__RangeResponse *r = etcdserverpb__range_response__unpack(NULL, rl, resp);
    free(resp);
    cr_assert(r);
    cr_expect_eq(r->n_kvs, 2);
    cr_expect_eq(r->count, 3);
    cr_expect(r->more);
    etcdserverpb__range_response__free_unpacked(r, NULL);
    /* delete range with a range_end: one revision for all */
    cr_expect_eq(del("p/", "p0", &deleted), 9);
    cr_expect_eq(deleted, 3);
}

static Etcdserverpb__RequestOp *op_put(Etcdserverpb__RequestOp *op, Etcdserverpb__PutRequest *p,
                                       const char *k, const char *v)
{
    etcdserverpb__request_op__init(op);
    etcdserverpb__put_request__init(p);
    p->key = bin(k);
    p->value = bin(v);
    op->request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT;
    op->request_put = p;
    return op;
}

static Etcdserverpb__RequestOp *op_get(Etcdserverpb__RequestOp *op, Etcdserverpb__RangeRequest *g,
                                       const char *k)
{
    etcdserverpb__request_op__init(op);
    etcdserverpb__range_request__init(g);
    g->key = bin(k);
    op->request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_RANGE;
    op->request_range = g;
    return op;
}

static Etcdserverpb__TxnResponse *txn(Etcdserverpb__TxnRequest *req, int *st, char *msg, size_t cap)
{
    uint8_t *resp;
    size_t rl;
    *st = call("/etcdserverpb.KV/Txn", &req->base, &resp, &rl, msg, cap);
    if (*st != 0)
        return NULL;
    Etcdserverpb__TxnResponse *r = etcdserverpb__txn_response__unpack(NULL, rl, resp);
    free(resp);
    cr_assert(r && r->header);
    return r;
}

Test(semantics, txn_success_and_failure_paths)
{
    put("t", "one"); /* rev 2 */
    Etcdserverpb__Compare cmp = ETCDSERVERPB__COMPARE__INIT;
    Etcdserverpb__Compare *cmps[1] = {&cmp};
    cmp.key = bin("t");
    cmp.target = ETCDSERVERPB__COMPARE__COMPARE_TARGET__VALUE;
    cmp.result = ETCDSERVERPB__COMPARE__COMPARE_RESULT__EQUAL;
    cmp.target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_VALUE;
    cmp.value = bin("one");
    Etcdserverpb__RequestOp s1, s2, s3, f1;
    Etcdserverpb__PutRequest p1, p2, pf;
    Etcdserverpb__RangeRequest g3;
    Etcdserverpb__RequestOp *succ[3] = {op_put(&s1, &p1, "t", "two"), op_put(&s2, &p2, "u", "x"),
                                        op_get(&s3, &g3, "t")};
    Etcdserverpb__RequestOp *fail[1] = {op_put(&f1, &pf, "t", "failed")};
    Etcdserverpb__TxnRequest req = ETCDSERVERPB__TXN_REQUEST__INIT;
    req.n_compare = 1;
    req.compare = cmps;
    req.n_success = 3;
    req.success = succ;
    req.n_failure = 1;
    req.failure = fail;
    int st;
    char msg[256];

    /* success path: both puts share one revision, the get sees them */
    Etcdserverpb__TxnResponse *r = txn(&req, &st, msg, sizeof(msg));
    cr_assert_eq(st, 0, "txn: %d %s", st, msg);
    cr_expect(r->succeeded);
    cr_expect_eq(r->header->revision, 3);
    cr_assert_eq(r->n_responses, 3);
    cr_expect_eq(r->responses[0]->response_case, ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_PUT);
    cr_assert_eq(r->responses[2]->response_case,
                 ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_RANGE);
    Etcdserverpb__RangeResponse *rr = r->responses[2]->response_range;
    cr_assert_eq(rr->n_kvs, 1);
    cr_expect(rr->kvs[0]->value.len == 3 && memcmp(rr->kvs[0]->value.data, "two", 3) == 0);
    etcdserverpb__txn_response__free_unpacked(r, NULL);
    expect_kv("t", 0, "two", 2, 3, 2);
    expect_kv("u", 0, "x", 3, 3, 1);

    /* failure path: the compare no longer holds */
    r = txn(&req, &st, msg, sizeof(msg));
    cr_assert_eq(st, 0, "txn: %d %s", st, msg);
    cr_expect(!r->succeeded);
    cr_expect_eq(r->header->revision, 4);
    cr_expect_eq(r->n_responses, 1);
    etcdserverpb__txn_response__free_unpacked(r, NULL);
    expect_kv("t", 0, "failed", 2, 4, 3);
    expect_kv("u", 0, "x", 3, 3, 1);

    /* compare on version / mod / create */
    cmp.target = ETCDSERVERPB__COMPARE__COMPARE_TARGET__VERSION;
    cmp.target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_VERSION;
    cmp.version = 3;
    r = txn(&req, &st, msg, sizeof(msg));
    cr_assert_eq(st, 0, "txn: %d %s", st, msg);
    cr_expect(r->succeeded, "version(t) == 3");
    etcdserverpb__txn_response__free_unpacked(r, NULL);
    cmp.target = ETCDSERVERPB__COMPARE__COMPARE_TARGET__MOD;
    cmp.target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_MOD_REVISION;
    cmp.result = ETCDSERVERPB__COMPARE__COMPARE_RESULT__GREATER;
    cmp.mod_revision = 100;
    r = txn(&req, &st, msg, sizeof(msg));
    cr_assert_eq(st, 0, "txn: %d %s", st, msg);
    cr_expect(!r->succeeded, "mod(t) > 100 is false");
    etcdserverpb__txn_response__free_unpacked(r, NULL);
    cmp.target = ETCDSERVERPB__COMPARE__COMPARE_TARGET__CREATE;
    cmp.target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_CREATE_REVISION;
    cmp.result = ETCDSERVERPB__COMPARE__COMPARE_RESULT__EQUAL;
    cmp.create_revision = 0;
    cmp.key = bin("never-created");
    r = txn(&req, &st, msg, sizeof(msg));
    cr_assert_eq(st, 0, "txn: %d %s", st, msg);
    cr_expect(r->succeeded, "create(never-created) == 0");
    etcdserverpb__txn_response__free_unpacked(r, NULL);

    /* a read-only txn does not create a revision */
    int64_t before = header_rev();
    Etcdserverpb__RequestOp *ro[1] = {&s3};
    Etcdserverpb__TxnRequest rq = ETCDSERVERPB__TXN_REQUEST__INIT;
    rq.n_success = 1;
    rq.success = ro;
    r = txn(&rq, &st, msg, sizeof(msg));
    cr_assert_eq(st, 0, "txn: %d %s", st, msg);
    cr_expect_eq(r->header->revision, before);
    etcdserverpb__txn_response__free_unpacked(r, NULL);
    cr_expect_eq(header_rev(), before);

    /* duplicate key among puts */
    Etcdserverpb__RequestOp d1, d2;
    Etcdserverpb__PutRequest dp1, dp2;
    Etcdserverpb__RequestOp *dup[2] = {op_put(&d1, &dp1, "dup", "1"),
                                       op_put(&d2, &dp2, "dup", "2")};
    Etcdserverpb__TxnRequest dq = ETCDSERVERPB__TXN_REQUEST__INIT;
    dq.n_success = 2;
    dq.success = dup;
    r = txn(&dq, &st, msg, sizeof(msg));
    cr_expect_eq(st, 3, "duplicate key: grpc-status %d (want 3 InvalidArgument)", st);
    cr_expect_str_eq(msg, "etcdserver: duplicate key given in txn request");
    if (r)
        etcdserverpb__txn_response__free_unpacked(r, NULL);

    /* too many operations (default limit 128) */
    enum { N = 129 };
    Etcdserverpb__RequestOp *many[N];
    Etcdserverpb__RequestOp mops[N];
    Etcdserverpb__PutRequest mputs[N];
    char keys[N][16];
    for (int i = 0; i < N; i++) {
        snprintf(keys[i], sizeof(keys[i]), "m%03d", i);
        many[i] = op_put(&mops[i], &mputs[i], keys[i], "v");
    }
    Etcdserverpb__TxnRequest mq = ETCDSERVERPB__TXN_REQUEST__INIT;
    mq.n_success = N;
    mq.success = many;
    r = txn(&mq, &st, msg, sizeof(msg));
    cr_expect_eq(st, 3, "too many ops: grpc-status %d (want 3 InvalidArgument)", st);
    cr_expect_str_eq(msg, "etcdserver: too many operations in txn request");
    if (r)
        etcdserverpb__txn_response__free_unpacked(r, NULL);
    /* nothing of the rejected txns was applied */
    expect_absent("dup", 0);
    expect_absent("m000", 0);
}

static int compact(int64_t rev, char *msg, size_t cap)
{
    Etcdserverpb__CompactionRequest req = ETCDSERVERPB__COMPACTION_REQUEST__INIT;
    req.revision = rev;
    req.physical = 1;
    uint8_t *resp = NULL;
    size_t rl;
    int st = call("/etcdserverpb.KV/Compact", &req.base, &resp, &rl, msg, cap);
    free(resp);
    return st;
}

Test(semantics, compaction)
{
    for (int i = 0; i < 5; i++) {
        char v[8];
        snprintf(v, sizeof(v), "v%d", i);
        put("c", v); /* revs 2..6 */
    }
    char msg[256];
    int st = compact(4, msg, sizeof(msg));
    cr_assert_eq(st, 0, "compact 4: %d %s", st, msg);
    Etcdserverpb__RangeResponse *r = range("c", NULL, 3, &st, msg, sizeof(msg));
    cr_expect_eq(st, 11, "get@3 after compact(4): grpc-status %d (want 11 OutOfRange)", st);
    cr_expect_str_eq(msg, "etcdserver: mvcc: required revision has been compacted");
    if (r)
        etcdserverpb__range_response__free_unpacked(r, NULL);
    /* the compacted revision itself and later ones are still readable */
    expect_kv("c", 4, "v2", 2, 4, 3);
    expect_kv("c", 0, "v4", 2, 6, 5);
    /* future revision */
    r = range("c", NULL, 100, &st, msg, sizeof(msg));
    cr_expect_eq(st, 11, "get@100: grpc-status %d (want 11 OutOfRange)", st);
    cr_expect_str_eq(msg, "etcdserver: mvcc: required revision is a future revision");
    if (r)
        etcdserverpb__range_response__free_unpacked(r, NULL);
    /* compacting again at or below the compacted revision fails */
    st = compact(3, msg, sizeof(msg));
    cr_expect_eq(st, 11, "compact 3 after 4: %d", st);
    cr_expect_str_eq(msg, "etcdserver: mvcc: required revision has been compacted");
    st = compact(1000, msg, sizeof(msg));
    cr_expect_eq(st, 11, "compact future: %d", st);
    cr_expect_str_eq(msg, "etcdserver: mvcc: required revision is a future revision");

    /* etcdctl shows the same error and exits non-zero */
    char etcdctl[PATH_MAX];
    cr_assert_eq(kv_it_etcdctl_bin(etcdctl, sizeof(etcdctl)), 0);
    kv_it_cmd_result res;
    cr_assert_eq(kv_it_ctl(&f->srv, etcdctl, NULL, 20000, &res, "get", "c", "--rev", "2", NULL), 0);
    cr_expect_neq(res.exit_code, 0);
    cr_expect(strstr(res.err, "Error: etcdserver: mvcc: required revision has been compacted"),
              "etcdctl stderr: %s", res.err);
    kv_it_cmd_result_free(&res);
}

/* /health and /metrics answer plain HTTP on --listen-metrics-urls (etcd does the same). */
Test(semantics, health_and_metrics_endpoints)
{
    int status = 0;
    char *body = NULL;
    cr_assert_eq(kv_it_http_get(f->srv.metrics_port, "/health", 5000, &status, &body), 0);
    cr_expect_eq(status, 200, "/health: HTTP %d %s", status, body);
    cr_expect(strstr(body, "true") != NULL, "/health body: %s", body);
    free(body);
    put("m", "1");
    cr_assert_eq(kv_it_http_get(f->srv.metrics_port, "/metrics", 5000, &status, &body), 0);
    cr_expect_eq(status, 200);
    cr_expect(strstr(body, "# TYPE ") != NULL, "/metrics is not Prometheus text");
    if (f->srv.kind == KV_IT_KVD) {
        double v = 0;
        cr_expect_eq(kv_it_metric_sum(body, "kvd_grpc_connections_open", NULL, &v, NULL), 0,
                     "no kvd_grpc_connections_open");
        cr_expect_geq(v, 1, "kvd_grpc_connections_open %.0f with a connection open", v);
        cr_expect_eq(kv_it_metric_sum(body, "kvd_grpc_requests_total", NULL, &v, NULL), 0,
                     "no kvd_grpc_requests_total series");
        cr_expect_geq(v, 1, "kvd_grpc_requests_total sums to %.0f after a put", v);
    }
    free(body);
}
