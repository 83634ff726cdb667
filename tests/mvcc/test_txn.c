/* MVCC store: Txn (compares, nesting, limits, duplicate keys) with etcd 3.4 semantics. */
#include <stdlib.h>
#include <string.h>

#include "apply/internal_req.h"
#include "kvt_store.h"

static kvt_store t;
static void setup(void)
{
    kvt_store_open(&t, NULL);
}
static void teardown(void)
{
    kvt_store_close(&t);
}
TestSuite(mvcc_txn, .init = setup, .fini = teardown);

/* Small builders; everything lives in a per-test arena freed at the end. */
#define MAXOBJ 256
static void *objs[MAXOBJ];
static size_t nobj;
static void *keep(void *p)
{
    cr_assert_lt(nobj, MAXOBJ);
    objs[nobj++] = p;
    return p;
}
static void free_objs(void)
{
    while (nobj)
        free(objs[--nobj]);
}

static Etcdserverpb__Compare *cmp_i(const char *k, int target, int result, int64_t v)
{
    Etcdserverpb__Compare *c = keep(malloc(sizeof *c));
    etcdserverpb__compare__init(c);
    c->key = kvt_bin(k);
    c->target = target;
    c->result = result;
    switch (target) {
    case ETCDSERVERPB__COMPARE__COMPARE_TARGET__VERSION:
        c->target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_VERSION;
        c->version = v;
        break;
    case ETCDSERVERPB__COMPARE__COMPARE_TARGET__CREATE:
        c->target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_CREATE_REVISION;
        c->create_revision = v;
        break;
    case ETCDSERVERPB__COMPARE__COMPARE_TARGET__MOD:
        c->target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_MOD_REVISION;
        c->mod_revision = v;
        break;
    case ETCDSERVERPB__COMPARE__COMPARE_TARGET__LEASE:
        c->target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_LEASE;
        c->lease = v;
        break;
    }
    return c;
}

static Etcdserverpb__Compare *cmp_v(const char *k, int result, const char *v)
{
    Etcdserverpb__Compare *c = keep(malloc(sizeof *c));
    etcdserverpb__compare__init(c);
    c->key = kvt_bin(k);
    c->target = ETCDSERVERPB__COMPARE__COMPARE_TARGET__VALUE;
    c->result = result;
    c->target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_VALUE;
    c->value = kvt_bin(v);
    return c;
}

static Etcdserverpb__RequestOp *op_put(const char *k, const char *v)
{
    Etcdserverpb__PutRequest *p = keep(malloc(sizeof *p));
    etcdserverpb__put_request__init(p);
    p->key = kvt_bin(k);
    p->value = kvt_bin(v);
    Etcdserverpb__RequestOp *o = keep(malloc(sizeof *o));
    etcdserverpb__request_op__init(o);
    o->request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT;
    o->request_put = p;
    return o;
}

static Etcdserverpb__RequestOp *op_del(const char *k, const char *end)
{
    Etcdserverpb__DeleteRangeRequest *d = keep(malloc(sizeof *d));
    etcdserverpb__delete_range_request__init(d);
    d->key = kvt_bin(k);
    d->range_end = kvt_bin(end);
    Etcdserverpb__RequestOp *o = keep(malloc(sizeof *o));
    etcdserverpb__request_op__init(o);
    o->request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_DELETE_RANGE;
    o->request_delete_range = d;
    return o;
}

static Etcdserverpb__RequestOp *op_range(const char *k, const char *end, int64_t rev)
{
    Etcdserverpb__RangeRequest *r = keep(malloc(sizeof *r));
    etcdserverpb__range_request__init(r);
    r->key = kvt_bin(k);
    r->range_end = kvt_bin(end);
    r->revision = rev;
    Etcdserverpb__RequestOp *o = keep(malloc(sizeof *o));
    etcdserverpb__request_op__init(o);
    o->request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_RANGE;
    o->request_range = r;
    return o;
}

static Etcdserverpb__TxnRequest *txn(Etcdserverpb__Compare **c, size_t nc,
                                     Etcdserverpb__RequestOp **s, size_t ns,
                                     Etcdserverpb__RequestOp **f, size_t nf)
{
    Etcdserverpb__TxnRequest *x = keep(malloc(sizeof *x));
    etcdserverpb__txn_request__init(x);
    x->compare = c;
    x->n_compare = nc;
    x->success = s;
    x->n_success = ns;
    x->failure = f;
    x->n_failure = nf;
    return x;
}

static Etcdserverpb__RequestOp *op_txn(Etcdserverpb__TxnRequest *x)
{
    Etcdserverpb__RequestOp *o = keep(malloc(sizeof *o));
    etcdserverpb__request_op__init(o);
    o->request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_TXN;
    o->request_txn = x;
    return o;
}

/* Runs a txn with one compare and put "then"/"else" to key "r"; returns succeeded. */
static bool eval(Etcdserverpb__Compare *c)
{
    Etcdserverpb__Compare *cs[] = {c};
    Etcdserverpb__RequestOp *s[] = {op_range("r", NULL, 0)};
    kv_result res;
    Etcdserverpb__TxnResponse *r = kvt_store_txn(&t, txn(cs, 1, s, 1, s, 1), &res);
    cr_assert_not_null(r, "%d %s", KVT_STORE_CODE(res), KVT_STORE_MSG(res));
    bool ok = r->succeeded;
    etcdserverpb__txn_response__free_unpacked(r, NULL);
    return ok;
}

enum {
    EQ = ETCDSERVERPB__COMPARE__COMPARE_RESULT__EQUAL,
    GT = ETCDSERVERPB__COMPARE__COMPARE_RESULT__GREATER,
    LT = ETCDSERVERPB__COMPARE__COMPARE_RESULT__LESS,
    NE = ETCDSERVERPB__COMPARE__COMPARE_RESULT__NOT_EQUAL,
    VER = ETCDSERVERPB__COMPARE__COMPARE_TARGET__VERSION,
    CRE = ETCDSERVERPB__COMPARE__COMPARE_TARGET__CREATE,
    MOD = ETCDSERVERPB__COMPARE__COMPARE_TARGET__MOD,
    LEA = ETCDSERVERPB__COMPARE__COMPARE_TARGET__LEASE,
};

Test(mvcc_txn, compare_targets_and_results)
{
    kv_result res;
    Etcdserverpb__LeaseGrantResponse *g = kvt_store_grant(&t, 9, 100, &res);
    etcdserverpb__lease_grant_response__free_unpacked(g, NULL);
    kvt_store_put(&t, "k", "m", 9); /* 2: create 2 mod 2 ver 1 */
    kvt_store_put(&t, "k", "m", 9); /* 3: mod 3 ver 2 */

    cr_assert(eval(cmp_v("k", EQ, "m")));
    cr_assert(!eval(cmp_v("k", EQ, "x")));
    cr_assert(eval(cmp_v("k", GT, "a")));
    cr_assert(eval(cmp_v("k", LT, "z")));
    cr_assert(eval(cmp_v("k", NE, "z")));
    cr_assert(eval(cmp_i("k", VER, EQ, 2)));
    cr_assert(eval(cmp_i("k", VER, GT, 1)));
    cr_assert(!eval(cmp_i("k", VER, LT, 2)));
    cr_assert(eval(cmp_i("k", CRE, EQ, 2)));
    cr_assert(eval(cmp_i("k", MOD, EQ, 3)));
    cr_assert(eval(cmp_i("k", MOD, NE, 2)));
    cr_assert(eval(cmp_i("k", LEA, EQ, 9)));
    cr_assert(!eval(cmp_i("k", LEA, EQ, 0)));
    /* missing key: VALUE compares always fail; others compare against zero */
    cr_assert(!eval(cmp_v("nokey", NE, "x")));
    cr_assert(eval(cmp_i("nokey", VER, EQ, 0)));
    cr_assert(eval(cmp_i("nokey", CRE, EQ, 0)));
    cr_assert(!eval(cmp_i("nokey", MOD, GT, 0)));
    free_objs();
}

Test(mvcc_txn, compare_with_range_end)
{
    kvt_store_put(&t, "p/a", "1", 0);
    kvt_store_put(&t, "p/b", "1", 0);
    kvt_store_put(&t, "p/c", "2", 0);
    Etcdserverpb__Compare *c = cmp_v("p/", EQ, "1");
    c->range_end = kvt_bin("p0");
    cr_assert(!eval(c), "all keys in range must satisfy");
    c->range_end = kvt_bin("p/c");
    cr_assert(eval(c));
    Etcdserverpb__Compare *v = cmp_i("p/", VER, EQ, 1);
    v->range_end = kvt_bin("p0");
    cr_assert(eval(v));
    free_objs();
}

Test(mvcc_txn, success_and_failure_branches_share_one_revision)
{
    kvt_store_put(&t, "k", "v", 0); /* 2 */
    Etcdserverpb__Compare *cs[] = {cmp_v("k", EQ, "v")};
    Etcdserverpb__RequestOp *s[] = {op_put("a", "1"), op_put("b", "2"), op_range("a", "c", 0)};
    Etcdserverpb__RequestOp *f[] = {op_put("fail", "1")};
    kv_result res;
    Etcdserverpb__TxnResponse *r = kvt_store_txn(&t, txn(cs, 1, s, 3, f, 1), &res);
    cr_assert_not_null(r, "%s", KVT_STORE_MSG(res));
    cr_assert(r->succeeded);
    cr_assert_eq(r->header->revision, 3);
    cr_assert_eq(r->header->cluster_id, 11);
    cr_assert_eq(r->n_responses, 3);
    cr_assert_eq(r->responses[0]->response_case, ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_PUT);
    cr_assert_eq(r->responses[0]->response_put->header->revision, 3);
    /* reads inside the txn see its earlier writes */
    Etcdserverpb__RangeResponse *rr = r->responses[2]->response_range;
    cr_assert_eq(rr->n_kvs, 2);
    kvt_store_expect_kv(rr->kvs[0], "a", "1");
    kvt_store_expect_kv(rr->kvs[1], "b", "2");
    cr_assert_eq(rr->header->revision, 3);
    etcdserverpb__txn_response__free_unpacked(r, NULL);

    Mvccpb__KeyValue *a = kvt_store_get(&t, "a", 0), *b = kvt_store_get(&t, "b", 0);
    cr_assert_eq(a->mod_revision, 3);
    cr_assert_eq(b->mod_revision, 3);
    mvccpb__key_value__free_unpacked(a, NULL);
    mvccpb__key_value__free_unpacked(b, NULL);
    cr_assert_null(kvt_store_get(&t, "fail", 0));

    /* failure branch */
    Etcdserverpb__Compare *cf[] = {cmp_v("k", EQ, "other")};
    r = kvt_store_txn(&t, txn(cf, 1, s, 3, f, 1), &res);
    cr_assert(!r->succeeded);
    cr_assert_eq(r->header->revision, 4);
    etcdserverpb__txn_response__free_unpacked(r, NULL);
    Mvccpb__KeyValue *fk = kvt_store_get(&t, "fail", 0);
    kvt_store_expect_kv(fk, "fail", "1");
    mvccpb__key_value__free_unpacked(fk, NULL);

    /* read-only txn takes no revision */
    Etcdserverpb__RequestOp *ro[] = {op_range("a", NULL, 0)};
    r = kvt_store_txn(&t, txn(NULL, 0, ro, 1, NULL, 0), &res);
    cr_assert(r->succeeded, "no compares: success");
    cr_assert_eq(r->header->revision, 4);
    etcdserverpb__txn_response__free_unpacked(r, NULL);
    cr_assert_eq(kvt_store_rev(&t), 4);
    free_objs();
}

Test(mvcc_txn, delete_inside_txn_and_sub_revisions)
{
    kvt_store_put(&t, "x", "1", 0); /* 2 */
    Etcdserverpb__RequestOp *s[] = {op_put("y", "2"), op_del("x", NULL), op_range("a", "z", 0)};
    kv_result res;
    Etcdserverpb__TxnResponse *r = kvt_store_txn(&t, txn(NULL, 0, s, 3, NULL, 0), &res);
    cr_assert_not_null(r, "%s", KVT_STORE_MSG(res));
    cr_assert_eq(r->responses[1]->response_delete_range->deleted, 1);
    Etcdserverpb__RangeResponse *rr = r->responses[2]->response_range;
    cr_assert_eq(rr->n_kvs, 1);
    kvt_store_expect_kv(rr->kvs[0], "y", "2");
    etcdserverpb__txn_response__free_unpacked(r, NULL);
    cr_assert_eq(kvt_store_rev(&t), 3);
    free_objs();
}

Test(mvcc_txn, nested_txns)
{
    kvt_store_put(&t, "k", "v", 0); /* 2 */
    /* inner compares are evaluated before any op runs (etcd compareToPath) */
    Etcdserverpb__Compare *ic[] = {cmp_i("new", VER, EQ, 0)};
    Etcdserverpb__RequestOp *is[] = {op_put("inner-then", "1")};
    Etcdserverpb__RequestOp *ie[] = {op_put("inner-else", "1")};
    Etcdserverpb__Compare *oc[] = {cmp_v("k", EQ, "v")};
    Etcdserverpb__RequestOp *os[] = {op_put("new", "1"), op_txn(txn(ic, 1, is, 1, ie, 1))};
    kv_result res;
    Etcdserverpb__TxnResponse *r = kvt_store_txn(&t, txn(oc, 1, os, 2, NULL, 0), &res);
    cr_assert_not_null(r, "%s", KVT_STORE_MSG(res));
    cr_assert(r->succeeded);
    cr_assert_eq(r->n_responses, 2);
    cr_assert_eq(r->responses[1]->response_case, ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_TXN);
    Etcdserverpb__TxnResponse *in = r->responses[1]->response_txn;
    cr_assert(in->succeeded);
    cr_assert_eq(in->n_responses, 1);
    cr_assert_eq(in->header->revision, 0, "nested txn responses carry an empty header (etcd)");
    cr_assert_eq(r->header->revision, 3);
    etcdserverpb__txn_response__free_unpacked(r, NULL);
    Mvccpb__KeyValue *kv = kvt_store_get(&t, "inner-then", 0);
    cr_assert_not_null(kv);
    cr_assert_eq(kv->mod_revision, 3);
    mvccpb__key_value__free_unpacked(kv, NULL);
    cr_assert_null(kvt_store_get(&t, "inner-else", 0));
    free_objs();
}

/* --max-txn-ops is checked where a member takes the request (kv_internal_check_txn, before
 * proposing), as in etcd 3.4; the apply does not depend on it, so members whose flags differ
 * apply the same entry the same way. */
Test(mvcc_txn, too_many_ops)
{
    Etcdserverpb__RequestOp *s[] = {op_put("a", "1"), op_put("b", "1"), op_put("c", "1"),
                                    op_put("d", "1")};
    uint8_t buf[1024];
    size_t n = etcdserverpb__txn_request__pack(txn(NULL, 0, s, 4, NULL, 0), buf);
    cr_assert_eq(kv_internal_check_txn(buf, n, 3), KV_ERR_TOO_MANY_OPS);
    cr_assert_eq(kv_internal_check_txn(buf, n, 4), KV_ERR_NONE);
    n = etcdserverpb__txn_request__pack(txn(NULL, 0, s, 3, NULL, 0), buf);
    cr_assert_eq(kv_internal_check_txn(buf, n, 3), KV_ERR_NONE);
    /* nested: the budget shrinks by the parent's op count (etcd checkTxnRequest) */
    Etcdserverpb__RequestOp *in[] = {op_put("x", "1"), op_put("y", "1")};
    Etcdserverpb__RequestOp *outer[] = {op_put("z", "1"), op_txn(txn(NULL, 0, in, 2, NULL, 0))};
    n = etcdserverpb__txn_request__pack(txn(NULL, 0, outer, 2, NULL, 0), buf);
    cr_assert_eq(kv_internal_check_txn(buf, n, 3), KV_ERR_TOO_MANY_OPS);
    /* the apply: the 4-op txn a member with --max-txn-ops=4 proposed is applied by every
     * member, whatever its own flag */
    kv_result res;
    Etcdserverpb__TxnResponse *r = kvt_store_txn(&t, txn(NULL, 0, s, 4, NULL, 0), &res);
    cr_assert_not_null(r, "the apply refused a txn its proposer accepted: %s", KVT_STORE_MSG(res));
    etcdserverpb__txn_response__free_unpacked(r, NULL);
    free_objs();
}

static void expect_dup(Etcdserverpb__TxnRequest *x)
{
    kv_result res;
    cr_assert_null(kvt_store_txn(&t, x, &res));
    cr_assert_eq(KVT_STORE_CODE(res), 3);
    cr_assert_str_eq(KVT_STORE_MSG(res), "etcdserver: duplicate key given in txn request");
}

Test(mvcc_txn, duplicate_keys)
{
    Etcdserverpb__RequestOp *pp[] = {op_put("a", "1"), op_put("a", "2")};
    expect_dup(txn(NULL, 0, pp, 2, NULL, 0));
    Etcdserverpb__RequestOp *pd[] = {op_put("b", "1"), op_del("a", "c")};
    expect_dup(txn(NULL, 0, pd, 2, NULL, 0));
    /* across nesting */
    Etcdserverpb__RequestOp *in[] = {op_put("a", "1")};
    Etcdserverpb__RequestOp *nest[] = {op_put("a", "2"), op_txn(txn(NULL, 0, in, 1, NULL, 0))};
    expect_dup(txn(NULL, 0, nest, 2, NULL, 0));
    Etcdserverpb__RequestOp *nd[] = {op_del("a", NULL), op_txn(txn(NULL, 0, in, 1, NULL, 0))};
    expect_dup(txn(NULL, 0, nd, 2, NULL, 0));
    /* allowed: same key in the then and else of one nested txn; delete + delete; distinct keys */
    Etcdserverpb__RequestOp *ok1[] = {op_txn(txn(NULL, 0, in, 1, in, 1))};
    Etcdserverpb__RequestOp *ok2[] = {op_del("a", "c"), op_del("b", NULL), op_put("c", "1")};
    kv_result res;
    Etcdserverpb__TxnResponse *r = kvt_store_txn(&t, txn(NULL, 0, ok1, 1, NULL, 0), &res);
    cr_assert_not_null(r, "%s", KVT_STORE_MSG(res));
    etcdserverpb__txn_response__free_unpacked(r, NULL);
    r = kvt_store_txn(&t, txn(NULL, 0, ok2, 3, NULL, 0), &res);
    cr_assert_not_null(r, "%s", KVT_STORE_MSG(res));
    etcdserverpb__txn_response__free_unpacked(r, NULL);
    /* the duplicate check covers both branches even if not taken */
    Etcdserverpb__RequestOp *ok3[] = {op_put("q", "1")};
    expect_dup(txn(NULL, 0, ok3, 1, pp, 2));
    free_objs();
}

Test(mvcc_txn, request_checks_along_the_path)
{
    kv_result res;
    /* empty op */
    Etcdserverpb__RequestOp empty = ETCDSERVERPB__REQUEST_OP__INIT;
    Etcdserverpb__RequestOp *e[] = {&empty};
    cr_assert_null(kvt_store_txn(&t, txn(NULL, 0, e, 1, NULL, 0), &res));
    cr_assert_str_eq(KVT_STORE_MSG(res), "etcdserver: key not found");
    /* empty compare key */
    Etcdserverpb__Compare *ec[] = {cmp_v("", EQ, "x")};
    cr_assert_null(kvt_store_txn(&t, txn(ec, 1, NULL, 0, NULL, 0), &res));
    cr_assert_str_eq(KVT_STORE_MSG(res), "etcdserver: key is not provided");
    /* lease of a put in the taken branch must exist */
    Etcdserverpb__RequestOp *lp[] = {op_put("a", "1")};
    lp[0]->request_put->lease = 77;
    cr_assert_null(kvt_store_txn(&t, txn(NULL, 0, lp, 1, NULL, 0), &res));
    cr_assert_eq(KVT_STORE_CODE(res), 5);
    /* ... but not in the branch not taken */
    Etcdserverpb__RequestOp *okp[] = {op_put("b", "1")};
    Etcdserverpb__TxnResponse *r = kvt_store_txn(&t, txn(NULL, 0, okp, 1, lp, 1), &res);
    cr_assert_not_null(r, "%s", KVT_STORE_MSG(res));
    etcdserverpb__txn_response__free_unpacked(r, NULL);
    /* future revision range inside a txn */
    Etcdserverpb__RequestOp *fr[] = {op_put("c", "1"), op_range("a", NULL, 100)};
    cr_assert_null(kvt_store_txn(&t, txn(NULL, 0, fr, 2, NULL, 0), &res));
    cr_assert_eq(KVT_STORE_CODE(res), 11);
    cr_assert_str_eq(KVT_STORE_MSG(res),
                     "etcdserver: mvcc: required revision is a future revision");
    /* nothing of the failed txns was applied */
    cr_assert_null(kvt_store_get(&t, "a", 0));
    cr_assert_null(kvt_store_get(&t, "c", 0));
    cr_assert_eq(kvt_store_rev(&t), 2);
    free_objs();
}
