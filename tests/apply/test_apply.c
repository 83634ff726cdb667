/* Unit tests of the applier (server/apply/): dispatch of each kind of log entry to the
 * keyspace operations, the response built for a local waiter, and the quiet path (an entry
 * proposed elsewhere: no response is built, the result and the state are the same).
 *
 * Each test runs two stores side by side: A applies every entry as the proposing member
 * does (a waiter: the response is packed), B applies the same bytes at the same index in a
 * quiet batch (kv_store_batch_set_quiet). Every entry must give both the same result code,
 * message and revision, B no response bytes, and in the end both stores the same keyspace
 * hash, status, leases, alarms and members. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apply/internal_req.h"
#include "kvt_store.h"
#include "common/etcd_errors.h"
#include "mvcc/members.h"

typedef struct pair {
    kvt_store a, b;
    int grants[2], revokes[2], checkpoints[2];
} pair;

typedef struct obs_arg {
    pair *p;
    int i;
} obs_arg;

static void on_grant(void *arg, int64_t id, int64_t ttl, int64_t rem)
{
    (void)id, (void)ttl, (void)rem;
    obs_arg *o = arg;
    o->p->grants[o->i]++;
}
static void on_revoke(void *arg, int64_t id)
{
    (void)id;
    obs_arg *o = arg;
    o->p->revokes[o->i]++;
}
static void on_checkpoint(void *arg, int64_t id, int64_t rem)
{
    (void)id, (void)rem;
    obs_arg *o = arg;
    o->p->checkpoints[o->i]++;
}

static obs_arg oargs[2];

static void pair_open(pair *p, const kv_store_config *cfg)
{
    memset(p, 0, sizeof *p);
    kvt_store_open(&p->a, cfg);
    kvt_store_open(&p->b, cfg);
    kv_store_set_deterministic(p->a.s, 1);
    kv_store_set_deterministic(p->b.s, 1);
    oargs[0] = (obs_arg){p, 0};
    oargs[1] = (obs_arg){p, 1};
    kv_store_lease_observer oa = {&oargs[0], on_grant, on_revoke, on_checkpoint};
    kv_store_lease_observer ob = {&oargs[1], on_grant, on_revoke, on_checkpoint};
    kv_store_set_lease_observer(p->a.s, &oa);
    kv_store_set_lease_observer(p->b.s, &ob);
}

static void pair_close(pair *p)
{
    kvt_store_close(&p->a);
    kvt_store_close(&p->b);
}

/* Applies the packed bytes at the next index to A (waiter) and B (quiet). ra gets A's result
 * (the caller frees ra->resp). */
static void apply_bytes(pair *p, const uint8_t *buf, size_t n, kv_result *ra)
{
    kv_result rb;
    for (int i = 0; i < 2; i++) {
        kvt_store *t = i ? &p->b : &p->a;
        kv_result *r = i ? &rb : ra;
        kv_store_batch *b;
        cr_assert_eq(kv_store_batch_begin(t->s, &b), 0);
        if (i)
            kv_store_batch_set_quiet(b, 1);
        kv_header_info h = {11, 22, 33};
        int rc = kv_store_apply(t->s, b, ++t->index, buf, n, &h, r);
        cr_assert_eq(rc, 0, "kv_store_apply: %d", rc);
        cr_assert_geq(kv_store_compact_step(t->s, b, 0, 0, 0, NULL, NULL), 0);
        cr_assert_eq(kv_store_batch_commit(t->s, b), 0);
    }
    cr_assert_eq(ra->err, rb.err, "errors differ: %d (%s) vs %d (%s)", ra->err, KVT_STORE_MSG(*ra),
                 rb.err, KVT_STORE_MSG(rb));
    cr_assert_str_eq(ra->detail, rb.detail);
    cr_assert_eq(ra->revision, rb.revision);
    cr_assert_eq(ra->skipped, 0);
    cr_assert_null(rb.resp, "quiet apply built a response");
    cr_assert_eq(rb.resp_len, 0);
    if (ra->err == KV_ERR_NONE)
        cr_assert_not_null(ra->resp, "the waiter got no response");
    else
        cr_assert_null(ra->resp);
}

static void apply2(pair *p, const Kvdpb__InternalRequest *ir, kv_result *ra)
{
    size_t n = kvdpb__internal_request__get_packed_size(ir);
    uint8_t *buf = malloc(n + 1);
    cr_assert_not_null(buf);
    kvdpb__internal_request__pack(ir, buf);
    apply_bytes(p, buf, n, ra);
    free(buf);
}

static void expect_err(const kv_result *r, kv_etcd_err e)
{
    cr_assert_eq(KVT_STORE_CODE(*r), kv_etcd_err_code(e), "code %d (%s)", KVT_STORE_CODE(*r),
                 KVT_STORE_MSG(*r));
    cr_assert_str_eq(KVT_STORE_MSG(*r), kv_etcd_err_msg(e));
}

static void expect_header(const Etcdserverpb__ResponseHeader *h, int64_t rev)
{
    cr_assert_not_null(h);
    cr_assert_eq(h->revision, rev, "header revision %lld, want %lld", (long long)h->revision,
                 (long long)rev);
    cr_assert_eq(h->cluster_id, 11);
    cr_assert_eq(h->member_id, 22);
    cr_assert_eq(h->raft_term, 33);
}

/* ---- state comparison ---- */

static int collect_keys(void *arg, const uint8_t *key, size_t klen)
{
    char *out = arg;
    strncat(out, (const char *)key, klen < 32 ? klen : 32);
    strcat(out, ",");
    return 0;
}

static int collect_alarm(void *arg, uint64_t member, int type)
{
    char *out = arg;
    char one[64];
    snprintf(one, sizeof one, "%llx:%d,", (unsigned long long)member, type);
    strcat(out, one);
    return 0;
}

static void members_str(kv_store *s, char *out, size_t cap)
{
    Kvdpb__Member **m;
    size_t n;
    cr_assert_eq(kv_store_members_list(s, &m, &n), 0);
    out[0] = 0;
    for (size_t i = 0; i < n; i++) {
        size_t l = strlen(out);
        snprintf(out + l, cap - l, "%llx %s p=%s c=%s;", (unsigned long long)m[i]->id, m[i]->name,
                 m[i]->n_peer_urls ? m[i]->peer_urls[0] : "",
                 m[i]->n_client_urls ? m[i]->client_urls[0] : "");
    }
    kv_store_members_free(m, n);
}

/* Both stores hold the same state. */
static void expect_same_state(pair *p, const int64_t *leases, size_t nleases)
{
    uint32_t ha, hb;
    int64_t ca, cb;
    cr_assert_eq(kv_store_hash_kv(p->a.s, 0, &ha, &ca), 0);
    cr_assert_eq(kv_store_hash_kv(p->b.s, 0, &hb, &cb), 0);
    cr_assert_eq(ha, hb, "keyspace hashes differ");
    cr_assert_eq(ca, cb);
    kv_store_status sa, sb;
    cr_assert_eq(kv_store_get_status(p->a.s, &sa), 0);
    cr_assert_eq(kv_store_get_status(p->b.s, &sb), 0);
    cr_assert_eq(sa.revision, sb.revision);
    cr_assert_eq(sa.compact_revision, sb.compact_revision);
    cr_assert_eq(sa.applied_index, sb.applied_index);
    cr_assert_eq(sa.keys, sb.keys);
    for (size_t i = 0; i < nleases; i++) {
        char ka[512] = "", kb[512] = "";
        cr_assert_eq(kv_store_lease_keys(p->a.s, leases[i], collect_keys, ka), 0);
        cr_assert_eq(kv_store_lease_keys(p->b.s, leases[i], collect_keys, kb), 0);
        cr_assert_str_eq(ka, kb);
    }
    char aa[512] = "", ab[512] = "";
    cr_assert_eq(kv_store_alarm_list(p->a.s, collect_alarm, aa), 0);
    cr_assert_eq(kv_store_alarm_list(p->b.s, collect_alarm, ab), 0);
    cr_assert_str_eq(aa, ab);
    char ma[1024], mb[1024];
    members_str(p->a.s, ma, sizeof ma);
    members_str(p->b.s, mb, sizeof mb);
    cr_assert_str_eq(ma, mb);
    cr_assert_eq(p->grants[0], p->grants[1]);
    cr_assert_eq(p->revokes[0], p->revokes[1]);
    cr_assert_eq(p->checkpoints[0], p->checkpoints[1]);
}

/* ---- request builders ---- */

static void put_ir(Kvdpb__InternalRequest *ir, Etcdserverpb__PutRequest *p, const char *k,
                   const char *v, int64_t lease)
{
    kvdpb__internal_request__init(ir);
    etcdserverpb__put_request__init(p);
    p->key = kvt_bin(k);
    p->value = kvt_bin(v);
    p->lease = lease;
    ir->request_case = KVDPB__INTERNAL_REQUEST__REQUEST_PUT;
    ir->put = p;
}

static void put2(pair *p, const char *k, const char *v, int64_t lease)
{
    Kvdpb__InternalRequest ir;
    Etcdserverpb__PutRequest pr;
    put_ir(&ir, &pr, k, v, lease);
    kv_result r;
    apply2(p, &ir, &r);
    cr_assert_eq(KVT_STORE_CODE(r), 0, "%s", KVT_STORE_MSG(r));
    free(r.resp);
}

static void grant2(pair *p, int64_t id, int64_t ttl, kv_result *r)
{
    Kvdpb__InternalRequest ir = KVDPB__INTERNAL_REQUEST__INIT;
    Etcdserverpb__LeaseGrantRequest g = ETCDSERVERPB__LEASE_GRANT_REQUEST__INIT;
    g.id = id;
    g.ttl = ttl;
    ir.request_case = KVDPB__INTERNAL_REQUEST__REQUEST_LEASE_GRANT;
    ir.lease_grant = &g;
    apply2(p, &ir, r);
}

/* ---- tests ---- */

Test(apply, put_dispatch_and_quiet)
{
    pair p;
    pair_open(&p, NULL);
    put2(&p, "a", "1", 0);
    Kvdpb__InternalRequest ir;
    Etcdserverpb__PutRequest pr;
    put_ir(&ir, &pr, "a", "2", 0);
    pr.prev_kv = 1;
    kv_result r;
    apply2(&p, &ir, &r);
    Etcdserverpb__PutResponse *resp = etcdserverpb__put_response__unpack(NULL, r.resp_len, r.resp);
    cr_assert_not_null(resp);
    expect_header(resp->header, 3);
    cr_assert_not_null(resp->prev_kv);
    kvt_store_expect_kv(resp->prev_kv, "a", "1");
    cr_assert_eq(resp->prev_kv->mod_revision, 2);
    etcdserverpb__put_response__free_unpacked(resp, NULL);
    free(r.resp);
    /* ignore_value keeps the value; on a missing key it is an error in both modes */
    put_ir(&ir, &pr, "a", "", 0);
    pr.ignore_value = 1;
    apply2(&p, &ir, &r);
    cr_assert_eq(KVT_STORE_CODE(r), 0, "%s", KVT_STORE_MSG(r));
    free(r.resp);
    put_ir(&ir, &pr, "missing", "", 0);
    pr.ignore_value = 1;
    apply2(&p, &ir, &r);
    expect_err(&r, KV_ERR_KEY_NOT_FOUND);
    /* request checks: empty key, unknown lease */
    put_ir(&ir, &pr, "", "x", 0);
    apply2(&p, &ir, &r);
    expect_err(&r, KV_ERR_EMPTY_KEY);
    put_ir(&ir, &pr, "b", "x", 99);
    apply2(&p, &ir, &r);
    expect_err(&r, KV_ERR_LEASE_NOT_FOUND);
    Mvccpb__KeyValue *kv = kvt_store_get(&p.b, "a", 0);
    cr_assert_not_null(kv);
    kvt_store_expect_kv(kv, "a", "2");
    cr_assert_eq(kv->version, 3);
    mvccpb__key_value__free_unpacked(kv, NULL);
    expect_same_state(&p, NULL, 0);
    pair_close(&p);
}

Test(apply, delete_range_dispatch_and_quiet)
{
    pair p;
    pair_open(&p, NULL);
    put2(&p, "k1", "v1", 0);
    put2(&p, "k2", "v2", 0);
    put2(&p, "z", "v3", 0);
    Kvdpb__InternalRequest ir = KVDPB__INTERNAL_REQUEST__INIT;
    Etcdserverpb__DeleteRangeRequest d = ETCDSERVERPB__DELETE_RANGE_REQUEST__INIT;
    d.key = kvt_bin("k");
    d.range_end = kvt_bin("l");
    d.prev_kv = 1;
    ir.request_case = KVDPB__INTERNAL_REQUEST__REQUEST_DELETE_RANGE;
    ir.delete_range = &d;
    kv_result r;
    apply2(&p, &ir, &r);
    Etcdserverpb__DeleteRangeResponse *resp =
        etcdserverpb__delete_range_response__unpack(NULL, r.resp_len, r.resp);
    cr_assert_not_null(resp);
    expect_header(resp->header, 5);
    cr_assert_eq(resp->deleted, 2);
    cr_assert_eq(resp->n_prev_kvs, 2);
    kvt_store_expect_kv(resp->prev_kvs[0], "k1", "v1");
    kvt_store_expect_kv(resp->prev_kvs[1], "k2", "v2");
    etcdserverpb__delete_range_response__free_unpacked(resp, NULL);
    free(r.resp);
    /* nothing to delete: no revision taken */
    apply2(&p, &ir, &r);
    cr_assert_eq(KVT_STORE_CODE(r), 0);
    cr_assert_eq(r.revision, 5);
    free(r.resp);
    d.key = kvt_bin("");
    apply2(&p, &ir, &r);
    expect_err(&r, KV_ERR_EMPTY_KEY);
    cr_assert_null(kvt_store_get(&p.b, "k1", 0));
    expect_same_state(&p, NULL, 0);
    pair_close(&p);
}

Test(apply, txn_dispatch_and_quiet)
{
    pair p;
    pair_open(&p, NULL);
    put2(&p, "a", "1", 0);
    put2(&p, "b", "2", 0);
    /* if a == "1" then { put c, range a, delete b, txn { put d } } else { put e } */
    Etcdserverpb__Compare cmp = ETCDSERVERPB__COMPARE__INIT;
    cmp.key = kvt_bin("a");
    cmp.target = ETCDSERVERPB__COMPARE__COMPARE_TARGET__VALUE;
    cmp.result = ETCDSERVERPB__COMPARE__COMPARE_RESULT__EQUAL;
    cmp.target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_VALUE;
    cmp.value = kvt_bin("1");
    Etcdserverpb__Compare *cmps[] = {&cmp};
    Etcdserverpb__PutRequest pc = ETCDSERVERPB__PUT_REQUEST__INIT, pd = pc, pe = pc;
    pc.key = kvt_bin("c"), pc.value = kvt_bin("3");
    pd.key = kvt_bin("d"), pd.value = kvt_bin("4");
    pe.key = kvt_bin("e"), pe.value = kvt_bin("5");
    Etcdserverpb__RangeRequest rg = ETCDSERVERPB__RANGE_REQUEST__INIT;
    rg.key = kvt_bin("a");
    Etcdserverpb__DeleteRangeRequest db = ETCDSERVERPB__DELETE_RANGE_REQUEST__INIT;
    db.key = kvt_bin("b");
    Etcdserverpb__RequestOp o_pd = ETCDSERVERPB__REQUEST_OP__INIT;
    o_pd.request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT;
    o_pd.request_put = &pd;
    Etcdserverpb__RequestOp *inner_ops[] = {&o_pd};
    Etcdserverpb__TxnRequest inner = ETCDSERVERPB__TXN_REQUEST__INIT;
    inner.n_success = 1;
    inner.success = inner_ops;
    Etcdserverpb__RequestOp o[5] = {ETCDSERVERPB__REQUEST_OP__INIT, ETCDSERVERPB__REQUEST_OP__INIT,
                                    ETCDSERVERPB__REQUEST_OP__INIT, ETCDSERVERPB__REQUEST_OP__INIT,
                                    ETCDSERVERPB__REQUEST_OP__INIT};
    o[0].request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT;
    o[0].request_put = &pc;
    o[1].request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_RANGE;
    o[1].request_range = &rg;
    o[2].request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_DELETE_RANGE;
    o[2].request_delete_range = &db;
    o[3].request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_TXN;
    o[3].request_txn = &inner;
    o[4].request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT;
    o[4].request_put = &pe;
    Etcdserverpb__RequestOp *succ[] = {&o[0], &o[1], &o[2], &o[3]}, *fail[] = {&o[4]};
    Etcdserverpb__TxnRequest t = ETCDSERVERPB__TXN_REQUEST__INIT;
    t.n_compare = 1;
    t.compare = cmps;
    t.n_success = 4;
    t.success = succ;
    t.n_failure = 1;
    t.failure = fail;
    Kvdpb__InternalRequest ir = KVDPB__INTERNAL_REQUEST__INIT;
    ir.request_case = KVDPB__INTERNAL_REQUEST__REQUEST_TXN;
    ir.txn = &t;
    kv_result r;
    Mvccpb__KeyValue *kv;
    apply2(&p, &ir, &r);
    Etcdserverpb__TxnResponse *resp = etcdserverpb__txn_response__unpack(NULL, r.resp_len, r.resp);
    cr_assert_not_null(resp);
    expect_header(resp->header, 4);
    cr_assert(resp->succeeded);
    cr_assert_eq(resp->n_responses, 4);
    cr_assert_eq(resp->responses[0]->response_case,
                 ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_PUT);
    cr_assert_eq(resp->responses[1]->response_case,
                 ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_RANGE);
    cr_assert_eq(resp->responses[1]->response_range->n_kvs, 1);
    kvt_store_expect_kv(resp->responses[1]->response_range->kvs[0], "a", "1");
    cr_assert_eq(resp->responses[2]->response_case,
                 ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_DELETE_RANGE);
    cr_assert_eq(resp->responses[2]->response_delete_range->deleted, 1);
    cr_assert_eq(resp->responses[3]->response_case,
                 ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_TXN);
    cr_assert(resp->responses[3]->response_txn->succeeded);
    cr_assert_eq(resp->responses[3]->response_txn->n_responses, 1);
    etcdserverpb__txn_response__free_unpacked(resp, NULL);
    free(r.resp);
    /* etcd_mvcc_*_total: two puts, then one txn of put, range, delete and put (nested) */
    for (int i = 0; i < 2; i++) {
        kv_store_ops ops;
        kv_store_get_ops(i ? p.b.s : p.a.s, &ops);
        cr_assert_eq(ops.puts, 4, "puts %llu", (unsigned long long)ops.puts);
        cr_assert_eq(ops.ranges, 1);
        cr_assert_eq(ops.deletes, 1);
        cr_assert_eq(ops.txns, 1, "a put alone is no txn; the four ops are one");
    }
    /* the compare fails: the else branch runs, in both modes */
    cmp.value = kvt_bin("nope");
    apply2(&p, &ir, &r);
    cr_assert_eq(KVT_STORE_CODE(r), 0, "%s", KVT_STORE_MSG(r));
    cr_assert_eq(r.revision, 5);
    resp = etcdserverpb__txn_response__unpack(NULL, r.resp_len, r.resp);
    cr_assert_not_null(resp);
    cr_assert_not(resp->succeeded);
    cr_assert_eq(resp->n_responses, 1);
    etcdserverpb__txn_response__free_unpacked(resp, NULL);
    free(r.resp);
    kv = kvt_store_get(&p.b, "e", 0);
    cr_assert_not_null(kv);
    mvccpb__key_value__free_unpacked(kv, NULL);
    /* a duplicate key in one txn is refused in both modes */
    o[4].request_put = &pc;
    Etcdserverpb__RequestOp *dup[] = {&o[0], &o[4]};
    t.n_compare = 0;
    t.success = dup;
    t.n_success = 2;
    t.n_failure = 0;
    apply2(&p, &ir, &r);
    expect_err(&r, KV_ERR_DUPLICATE_KEY);
    {
        kv_store_ops ops; /* the else branch's one put counted; the refused txn nothing */
        kv_store_get_ops(p.a.s, &ops);
        cr_assert_eq(ops.puts, 5);
        cr_assert_eq(ops.txns, 1);
    }
    kv = kvt_store_get(&p.b, "d", 0);
    cr_assert_not_null(kv);
    mvccpb__key_value__free_unpacked(kv, NULL);
    cr_assert_null(kvt_store_get(&p.b, "b", 0));
    expect_same_state(&p, NULL, 0);
    pair_close(&p);
}

Test(apply, compaction_dispatch_and_quiet)
{
    pair p;
    pair_open(&p, NULL);
    put2(&p, "a", "1", 0);
    put2(&p, "a", "2", 0);
    put2(&p, "a", "3", 0);
    Kvdpb__InternalRequest ir = KVDPB__INTERNAL_REQUEST__INIT;
    Etcdserverpb__CompactionRequest c = ETCDSERVERPB__COMPACTION_REQUEST__INIT;
    c.revision = 3;
    ir.request_case = KVDPB__INTERNAL_REQUEST__REQUEST_COMPACTION;
    ir.compaction = &c;
    kv_result r;
    apply2(&p, &ir, &r);
    Etcdserverpb__CompactionResponse *resp =
        etcdserverpb__compaction_response__unpack(NULL, r.resp_len, r.resp);
    cr_assert_not_null(resp);
    expect_header(resp->header, 4);
    etcdserverpb__compaction_response__free_unpacked(resp, NULL);
    free(r.resp);
    apply2(&p, &ir, &r);
    expect_err(&r, KV_ERR_COMPACTED);
    c.revision = 100;
    apply2(&p, &ir, &r);
    expect_err(&r, KV_ERR_FUTURE_REV);
    expect_same_state(&p, NULL, 0);
    pair_close(&p);
}

/* Members whose --max-keys-per-lease differ (A 1, B none) apply an entry alike: the
 * proposer's limit travels with it (InternalRequest lease_key_limit) and replaces the
 * applying member's own. apply_bytes fails on results that differ. */
Test(apply, the_proposers_lease_key_limit_decides_on_every_member)
{
    kv_store_config one, none;
    kv_store_config_default(&one);
    one.max_keys_per_lease = 1;
    kv_store_config_default(&none);
    pair p;
    pair_open(&p, &one);
    kvt_store_close(&p.b);
    kvt_store_open(&p.b, &none);
    kv_store_set_deterministic(p.b.s, 1);
    kv_store_lease_observer ob = {&oargs[1], on_grant, on_revoke, on_checkpoint};
    kv_store_set_lease_observer(p.b.s, &ob);
    kv_result r;
    grant2(&p, 7, 60, &r);
    free(r.resp);
    Kvdpb__InternalRequest ir;
    Etcdserverpb__PutRequest pr;
    put_ir(&ir, &pr, "k1", "x", 7);
    ir.lease_key_limit = KV_LEASE_KEYS_UNLIMITED; /* a proposer without a limit */
    apply2(&p, &ir, &r);
    cr_assert_eq(r.err, KV_ERR_NONE, "%s", KVT_STORE_MSG(r));
    free(r.resp);
    put_ir(&ir, &pr, "k2", "x", 7);
    ir.lease_key_limit = KV_LEASE_KEYS_UNLIMITED;
    apply2(&p, &ir, &r); /* A's own flag (1) would refuse it */
    cr_assert_eq(r.err, KV_ERR_NONE, "%s", KVT_STORE_MSG(r));
    free(r.resp);
    put_ir(&ir, &pr, "k3", "x", 7);
    ir.lease_key_limit = 2; /* a proposer with --max-keys-per-lease=2: B refuses it too */
    apply2(&p, &ir, &r);
    expect_err(&r, KV_ERR_TOO_MANY_LEASE_KEYS);
    int64_t ids[] = {7};
    expect_same_state(&p, ids, 1);
    pair_close(&p);
}

Test(apply, leases_dispatch_and_quiet)
{
    kv_store_config cfg;
    kv_store_config_default(&cfg);
    cfg.max_keys_per_lease = 2;
    pair p;
    pair_open(&p, &cfg);
    kv_result r;
    grant2(&p, 7, 60, &r);
    Etcdserverpb__LeaseGrantResponse *g =
        etcdserverpb__lease_grant_response__unpack(NULL, r.resp_len, r.resp);
    cr_assert_not_null(g);
    expect_header(g->header, 1);
    cr_assert_eq(g->id, 7);
    cr_assert_eq(g->ttl, 60);
    etcdserverpb__lease_grant_response__free_unpacked(g, NULL);
    free(r.resp);
    grant2(&p, 7, 60, &r);
    expect_err(&r, KV_ERR_LEASE_EXIST);
    grant2(&p, 0, 60, &r);
    expect_err(&r, KV_ERR_LEASE_NOT_FOUND);
    grant2(&p, 8, 9000000001LL, &r);
    expect_err(&r, KV_ERR_LEASE_TTL_TOO_LARGE);
    put2(&p, "l1", "x", 7);
    put2(&p, "l2", "x", 7);
    Kvdpb__InternalRequest ir;
    Etcdserverpb__PutRequest pr;
    put_ir(&ir, &pr, "l3", "x", 7);
    apply2(&p, &ir, &r);
    expect_err(&r, KV_ERR_TOO_MANY_LEASE_KEYS);
    int64_t ids[] = {7};
    expect_same_state(&p, ids, 1);

    Etcdserverpb__LeaseCheckpoint cp = ETCDSERVERPB__LEASE_CHECKPOINT__INIT, cp2 = cp;
    cp.id = 7;
    cp.remaining_ttl = 30;
    cp2.id = 12345; /* unknown: ignored */
    Etcdserverpb__LeaseCheckpoint *cps[] = {&cp, &cp2};
    Etcdserverpb__LeaseCheckpointRequest cr = ETCDSERVERPB__LEASE_CHECKPOINT_REQUEST__INIT;
    cr.n_checkpoints = 2;
    cr.checkpoints = cps;
    kvdpb__internal_request__init(&ir);
    ir.request_case = KVDPB__INTERNAL_REQUEST__REQUEST_LEASE_CHECKPOINT;
    ir.lease_checkpoint = &cr;
    apply2(&p, &ir, &r);
    Etcdserverpb__LeaseCheckpointResponse *c =
        etcdserverpb__lease_checkpoint_response__unpack(NULL, r.resp_len, r.resp);
    cr_assert_not_null(c);
    expect_header(c->header, 3);
    etcdserverpb__lease_checkpoint_response__free_unpacked(c, NULL);
    free(r.resp);
    cr_assert_eq(p.checkpoints[0], 1);

    Etcdserverpb__LeaseRevokeRequest rv = ETCDSERVERPB__LEASE_REVOKE_REQUEST__INIT;
    rv.id = 7;
    kvdpb__internal_request__init(&ir);
    ir.request_case = KVDPB__INTERNAL_REQUEST__REQUEST_LEASE_REVOKE;
    ir.lease_revoke = &rv;
    apply2(&p, &ir, &r);
    Etcdserverpb__LeaseRevokeResponse *v =
        etcdserverpb__lease_revoke_response__unpack(NULL, r.resp_len, r.resp);
    cr_assert_not_null(v);
    expect_header(v->header, 4); /* both keys deleted at one revision */
    etcdserverpb__lease_revoke_response__free_unpacked(v, NULL);
    free(r.resp);
    apply2(&p, &ir, &r);
    expect_err(&r, KV_ERR_LEASE_NOT_FOUND);
    cr_assert_null(kvt_store_get(&p.b, "l1", 0));
    cr_assert_eq(p.grants[0], 1);
    cr_assert_eq(p.revokes[0], 1);
    expect_same_state(&p, ids, 1);
    pair_close(&p);
}

static void alarm2(pair *p, int action, int type, kv_result *r)
{
    Kvdpb__InternalRequest ir = KVDPB__INTERNAL_REQUEST__INIT;
    Etcdserverpb__AlarmRequest ar = ETCDSERVERPB__ALARM_REQUEST__INIT;
    ar.action = action;
    ar.alarm = type;
    ar.memberid = 0x42;
    ir.request_case = KVDPB__INTERNAL_REQUEST__REQUEST_ALARM;
    ir.alarm = &ar;
    apply2(p, &ir, r);
}

static size_t alarm_count(const kv_result *r)
{
    Etcdserverpb__AlarmResponse *a =
        etcdserverpb__alarm_response__unpack(NULL, r->resp_len, r->resp);
    cr_assert_not_null(a);
    expect_header(a->header, a->header->revision);
    size_t n = a->n_alarms;
    etcdserverpb__alarm_response__free_unpacked(a, NULL);
    return n;
}

Test(apply, alarms_dispatch_and_quiet)
{
    pair p;
    pair_open(&p, NULL);
    put2(&p, "a", "1", 0);
    kv_result r;
    alarm2(&p, ETCDSERVERPB__ALARM_REQUEST__ALARM_ACTION__ACTIVATE, KV_ALARM_NOSPACE, &r);
    cr_assert_eq(alarm_count(&r), 1);
    free(r.resp);
    cr_assert_eq(kv_store_alarms(p.b.s), 1u << KV_ALARM_NOSPACE);
    alarm2(&p, ETCDSERVERPB__ALARM_REQUEST__ALARM_ACTION__ACTIVATE, 9, &r);
    cr_assert_eq(KVT_STORE_CODE(r), KV_GRPC_INVALID_ARGUMENT);
    cr_assert_str_eq(KVT_STORE_MSG(r), "kvd: unknown alarm type 9");
    alarm2(&p, ETCDSERVERPB__ALARM_REQUEST__ALARM_ACTION__GET, KV_ALARM_NONE, &r);
    cr_assert_eq(alarm_count(&r), 1);
    free(r.resp);
    /* NOSPACE: a put is refused (capped applier), a delete is not */
    Kvdpb__InternalRequest ir;
    Etcdserverpb__PutRequest pr;
    put_ir(&ir, &pr, "b", "2", 0);
    apply2(&p, &ir, &r);
    expect_err(&r, KV_ERR_NO_SPACE);
    expect_same_state(&p, NULL, 0);
    alarm2(&p, ETCDSERVERPB__ALARM_REQUEST__ALARM_ACTION__DEACTIVATE, KV_ALARM_NOSPACE, &r);
    cr_assert_eq(alarm_count(&r), 1);
    free(r.resp);
    alarm2(&p, ETCDSERVERPB__ALARM_REQUEST__ALARM_ACTION__DEACTIVATE, KV_ALARM_NOSPACE, &r);
    cr_assert_eq(alarm_count(&r), 0);
    free(r.resp);
    cr_assert_eq(kv_store_alarms(p.b.s), 0u);
    put2(&p, "b", "2", 0);
    expect_same_state(&p, NULL, 0);
    pair_close(&p);
}

static void bootstrap(kvt_store *t)
{
    Kvdpb__Member m = KVDPB__MEMBER__INIT;
    m.id = 0x10;
    char *peer[] = {"http://127.0.0.1:2380"};
    m.peer_urls = peer;
    m.n_peer_urls = 1;
    const Kvdpb__Member *ms[] = {&m};
    kv_store_batch *b;
    cr_assert_eq(kv_store_batch_begin(t->s, &b), 0);
    cr_assert_eq(kv_store_members_bootstrap(t->s, b, ms, 1), 1);
    cr_assert_eq(kv_store_batch_commit(t->s, b), 0);
}

Test(apply, members_dispatch_and_quiet)
{
    pair p;
    pair_open(&p, NULL);
    bootstrap(&p.a);
    bootstrap(&p.b);
    Kvdpb__Member pub = KVDPB__MEMBER__INIT;
    pub.id = 0x10;
    pub.name = "m1";
    char *client[] = {"http://127.0.0.1:2379"};
    pub.client_urls = client;
    pub.n_client_urls = 1;
    Kvdpb__InternalRequest ir = KVDPB__INTERNAL_REQUEST__INIT;
    ir.request_case = KVDPB__INTERNAL_REQUEST__REQUEST_MEMBER_PUBLISH;
    ir.member_publish = &pub;
    kv_result r;
    apply2(&p, &ir, &r);
    Etcdserverpb__MemberUpdateResponse *m =
        etcdserverpb__member_update_response__unpack(NULL, r.resp_len, r.resp);
    cr_assert_not_null(m);
    expect_header(m->header, 1);
    cr_assert_eq(m->n_members, 1);
    cr_assert_str_eq(m->members[0]->name, "m1");
    cr_assert_eq(m->members[0]->n_clienturls, 1);
    cr_assert_str_eq(m->members[0]->clienturls[0], "http://127.0.0.1:2379");
    etcdserverpb__member_update_response__free_unpacked(m, NULL);
    free(r.resp);
    Kvdpb__MemberUpdate up = KVDPB__MEMBER_UPDATE__INIT;
    up.id = 0x10;
    char *peer[] = {"http://127.0.0.1:2390"};
    up.peer_urls = peer;
    up.n_peer_urls = 1;
    kvdpb__internal_request__init(&ir);
    ir.request_case = KVDPB__INTERNAL_REQUEST__REQUEST_MEMBER_UPDATE;
    ir.member_update = &up;
    apply2(&p, &ir, &r);
    cr_assert_eq(KVT_STORE_CODE(r), 0, "%s", KVT_STORE_MSG(r));
    free(r.resp);
    up.id = 0x99;
    apply2(&p, &ir, &r);
    expect_err(&r, KV_ERR_MEMBER_NOT_FOUND);
    expect_same_state(&p, NULL, 0);
    char ms[256];
    members_str(p.b.s, ms, sizeof ms);
    cr_assert_str_eq(ms, "10 m1 p=http://127.0.0.1:2390 c=http://127.0.0.1:2379;");
    pair_close(&p);
}

Test(apply, undecodable_and_empty_entries)
{
    pair p;
    pair_open(&p, NULL);
    put2(&p, "a", "1", 0);
    kv_result r;
    const uint8_t junk[] = {0xff, 0xff, 0xff};
    apply_bytes(&p, junk, sizeof junk, &r);
    expect_err(&r, KV_ERR_DECODE_INTERNAL_REQ);
    cr_assert_eq(r.revision, 2);
    Kvdpb__InternalRequest ir = KVDPB__INTERNAL_REQUEST__INIT;
    apply2(&p, &ir, &r);
    expect_err(&r, KV_ERR_EMPTY_INTERNAL_REQ);
    /* both entries count as applied */
    kv_store_status st;
    cr_assert_eq(kv_store_get_status(p.b.s, &st), 0);
    cr_assert_eq(st.applied_index, 3);
    expect_same_state(&p, NULL, 0);
    pair_close(&p);
}

Test(apply, skipped_index)
{
    pair p;
    pair_open(&p, NULL);
    put2(&p, "a", "1", 0);
    Kvdpb__InternalRequest ir;
    Etcdserverpb__PutRequest pr;
    put_ir(&ir, &pr, "a", "2", 0);
    size_t n = kvdpb__internal_request__get_packed_size(&ir);
    uint8_t buf[64];
    kvdpb__internal_request__pack(&ir, buf);
    kv_store_batch *b;
    cr_assert_eq(kv_store_batch_begin(p.a.s, &b), 0);
    kv_result r;
    cr_assert_eq(kv_store_apply(p.a.s, b, 1, buf, n, NULL, &r), 0);
    cr_assert_eq(r.skipped, 1);
    cr_assert_null(r.resp);
    cr_assert_eq(r.revision, 2);
    kv_store_batch_abort(p.a.s, b);
    pair_close(&p);
}
