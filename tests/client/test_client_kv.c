/*
 * test_client_kv.c - libkvclient unary calls against a real server: raw calls, etcd error
 * codes and messages, typed KV with etcd's options, txn, compact, async forms, lease calls.
 */
#include "testutil.h"
#include "rpc.pb-c.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <string.h>

static struct kvt_server srv;
static kvc_client *cli;

static void setup(void)
{
    cr_assert_eq(kvt_server_start(&srv), 0, "server start");
    cli = kvt_client(srv.endpoint);
}

static void teardown(void)
{
    kvc_close(cli);
    cli = NULL;
    kvt_server_stop(&srv);
}

TestSuite(client_kv, .init = setup, .fini = teardown);

Test(client_kv, raw_put_then_range)
{
    Etcdserverpb__PutRequest p = ETCDSERVERPB__PUT_REQUEST__INIT;
    p.key.data = (uint8_t *)"raw";
    p.key.len = 3;
    p.value.data = (uint8_t *)"value";
    p.value.len = 5;
    uint8_t buf[64];
    size_t n = etcdserverpb__put_request__pack(&p, buf);
    uint8_t *resp = NULL;
    size_t len = 0;
    kvc_error e;
    int rc = kvc_call_unary(cli, "/etcdserverpb.KV/Put", buf, n, &resp, &len, 3000, 0, &e);
    cr_assert_eq(rc, 0, "put: %s", e.message);
    Etcdserverpb__PutResponse *pr = etcdserverpb__put_response__unpack(NULL, len, resp);
    cr_assert_not_null(pr);
    cr_assert_not_null(pr->header);
    int64_t rev = pr->header->revision;
    cr_assert_gt(rev, 0);
    etcdserverpb__put_response__free_unpacked(pr, NULL);
    kvc_free(resp);

    Etcdserverpb__RangeRequest r = ETCDSERVERPB__RANGE_REQUEST__INIT;
    r.key = p.key;
    n = etcdserverpb__range_request__pack(&r, buf);
    rc = kvc_call_unary(cli, "/etcdserverpb.KV/Range", buf, n, &resp, &len, 3000, KVC_IDEMPOTENT,
                        &e);
    cr_assert_eq(rc, 0, "range: %s", e.message);
    Etcdserverpb__RangeResponse *rr = etcdserverpb__range_response__unpack(NULL, len, resp);
    cr_assert_eq(rr->n_kvs, 1);
    cr_assert_eq(rr->kvs[0]->value.len, 5);
    cr_assert_eq(memcmp(rr->kvs[0]->value.data, "value", 5), 0);
    cr_assert_eq(rr->kvs[0]->mod_revision, rev);
    etcdserverpb__range_response__free_unpacked(rr, NULL);
    kvc_free(resp);
}

Test(client_kv, errors_carry_grpc_code_and_message)
{
    kvc_error e;
    kvc_header h;
    int rc = kvc_lease_revoke(cli, 0x1234567, 3000, &h, &e);
    cr_assert_eq(rc, -KVC_NOT_FOUND);
    cr_assert_eq(e.code, KVC_NOT_FOUND);
    cr_assert_str_eq(e.message, "etcdserver: requested lease not found");

    uint8_t *resp = (uint8_t *)1;
    size_t len = 7;
    rc = kvc_call_unary(cli, "/etcdserverpb.KV/NoSuchMethod", NULL, 0, &resp, &len, 3000, 0, &e);
    cr_assert_eq(rc, -KVC_UNIMPLEMENTED, "rc %d: %s", rc, e.message);
    cr_assert_null(resp);
    cr_assert_eq(len, 0);

    rc = kvc_call_unary(cli, "no-slash", NULL, 0, &resp, &len, 3000, 0, &e);
    cr_assert_eq(rc, -KVC_INVALID_ARGUMENT);

    /* An empty key is refused by etcd with InvalidArgument "etcdserver: key is not provided". */
    rc = kvc_put(cli, "", 0, "v", 1, NULL, 3000, NULL, &e);
    cr_assert_eq(rc, -KVC_INVALID_ARGUMENT, "rc %d: %s", rc, e.message);
    cr_assert_str_eq(e.message, "etcdserver: key is not provided");
}

static void put_ok(const char *k, const char *v)
{
    kvc_error e;
    int rc = kvc_put(cli, k, strlen(k), v, strlen(v), NULL, 3000, NULL, &e);
    cr_assert_eq(rc, 0, "put %s: %s", k, e.message);
}

Test(client_kv, typed_get_put_delete_with_options)
{
    kvc_error e;
    put_ok("app/a", "1");
    put_ok("app/b", "22");
    put_ok("app/c", "333");
    put_ok("apq", "x");

    kvc_put_opts po = {.prev_kv = 1};
    kvc_put_result pr;
    cr_assert_eq(kvc_put(cli, "app/a", 5, "one", 3, &po, 3000, &pr, &e), 0, "%s", e.message);
    cr_assert(pr.has_prev_kv);
    cr_assert_eq(pr.prev_kv.value_len, 1);
    cr_assert_eq(pr.prev_kv.value[0], '1');
    cr_assert_neq(pr.header.member_id, 0);
    int64_t rev_after_a = pr.header.revision;
    kvc_put_result_free(&pr);

    kvc_range_result r;
    kvc_range_opts ro = {.prefix = 1};
    cr_assert_eq(kvc_get(cli, "app/", 4, &ro, 3000, &r, &e), 0, "%s", e.message);
    cr_assert_eq(r.n_kvs, 3);
    cr_assert_eq(r.count, 3);
    cr_assert_eq(memcmp(r.kvs[0].key, "app/a", 5), 0);
    cr_assert_eq(memcmp(r.kvs[0].value, "one", 3), 0);
    cr_assert_eq(r.kvs[0].version, 2);
    kvc_range_result_free(&r);

    kvc_range_opts lim = {
        .prefix = 1, .limit = 2, .sort_order = KVC_SORT_DESCEND, .sort_target = KVC_SORT_KEY};
    cr_assert_eq(kvc_get(cli, "app/", 4, &lim, 3000, &r, &e), 0, "%s", e.message);
    cr_assert_eq(r.n_kvs, 2);
    cr_assert(r.more);
    cr_assert_eq(r.count, 3);
    cr_assert_eq(memcmp(r.kvs[0].key, "app/c", 5), 0);
    kvc_range_result_free(&r);

    kvc_range_opts cnt = {.prefix = 1, .count_only = 1};
    cr_assert_eq(kvc_get(cli, "ap", 2, &cnt, 3000, &r, &e), 0, "%s", e.message);
    cr_assert_eq(r.n_kvs, 0);
    cr_assert_eq(r.count, 4);
    kvc_range_result_free(&r);

    kvc_range_opts ko = {.prefix = 1, .keys_only = 1, .serializable = 1};
    cr_assert_eq(kvc_get(cli, "app/", 4, &ko, 3000, &r, &e), 0, "%s", e.message);
    cr_assert_eq(r.n_kvs, 3);
    cr_assert_eq(r.kvs[1].value_len, 0);
    kvc_range_result_free(&r);

    kvc_range_opts fk = {.from_key = 1};
    cr_assert_eq(kvc_get(cli, "app/b", 5, &fk, 3000, &r, &e), 0, "%s", e.message);
    cr_assert_eq(r.n_kvs, 3); /* app/b app/c apq */
    kvc_range_result_free(&r);

    kvc_range_opts re = {.range_end = (const uint8_t *)"app/c", .range_end_len = 5};
    cr_assert_eq(kvc_get(cli, "app/a", 5, &re, 3000, &r, &e), 0, "%s", e.message);
    cr_assert_eq(r.n_kvs, 2);
    kvc_range_result_free(&r);

    /* Old revision: app/a was "1" before rev_after_a. */
    kvc_range_opts old = {.revision = rev_after_a - 1};
    cr_assert_eq(kvc_get(cli, "app/a", 5, &old, 3000, &r, &e), 0, "%s", e.message);
    cr_assert_eq(r.n_kvs, 1);
    cr_assert_eq(r.kvs[0].value[0], '1');
    kvc_range_result_free(&r);

    kvc_delete_opts dopt = {.prefix = 1, .prev_kv = 1};
    kvc_delete_result d;
    cr_assert_eq(kvc_delete(cli, "app/", 4, &dopt, 3000, &d, &e), 0, "%s", e.message);
    cr_assert_eq(d.deleted, 3);
    cr_assert_eq(d.n_prev_kvs, 3);
    cr_assert_gt(d.header.revision, rev_after_a);
    kvc_delete_result_free(&d);

    cr_assert_eq(kvc_get(cli, "app/a", 5, NULL, 3000, &r, &e), 0);
    cr_assert_eq(r.n_kvs, 0);
    kvc_range_result_free(&r);
}

Test(client_kv, txn_branches)
{
    kvc_error e;
    put_ok("t/k", "v1");
    kvc_txn *t = kvc_txn_new();
    cr_assert_not_null(t);
    cr_assert_eq(kvc_txn_cmp_value(t, "t/k", 3, KVC_CMP_EQUAL, "v1", 2), 0);
    cr_assert_eq(kvc_txn_put(t, KVC_TXN_SUCCESS, "t/k", 3, "v2", 2, NULL), 0);
    cr_assert_eq(kvc_txn_get(t, KVC_TXN_SUCCESS, "t/k", 3, NULL), 0);
    cr_assert_eq(kvc_txn_delete(t, KVC_TXN_FAILURE, "t/k", 3, NULL), 0);
    cr_assert_eq(kvc_txn_cmp_int(t, "t/k", 3, KVC_CMP_VALUE, KVC_CMP_EQUAL, 1),
                 -KVC_INVALID_ARGUMENT);

    kvc_txn_result tr;
    cr_assert_eq(kvc_txn_commit(cli, t, 0, 3000, &tr, &e), 0, "%s", e.message);
    cr_assert(tr.succeeded);
    cr_assert_eq(tr.n_responses, 2);
    cr_assert_eq(tr.responses[0].type, KVC_OP_PUT);
    cr_assert_eq(tr.responses[1].type, KVC_OP_RANGE);
    cr_assert_eq(tr.responses[1].range.n_kvs, 1);
    cr_assert_eq(memcmp(tr.responses[1].range.kvs[0].value, "v2", 2), 0);
    kvc_txn_result_free(&tr);

    /* Same txn again: the value is now v2, so the failure branch (delete) runs. */
    cr_assert_eq(kvc_txn_commit(cli, t, 0, 3000, &tr, &e), 0, "%s", e.message);
    cr_assert_not(tr.succeeded);
    cr_assert_eq(tr.n_responses, 1);
    cr_assert_eq(tr.responses[0].type, KVC_OP_DELETE);
    cr_assert_eq(tr.responses[0].del.deleted, 1);
    kvc_txn_result_free(&tr);
    kvc_txn_free(t);

    t = kvc_txn_new();
    cr_assert_eq(kvc_txn_cmp_int(t, "t/k", 3, KVC_CMP_VERSION, KVC_CMP_EQUAL, 0), 0);
    cr_assert_eq(kvc_txn_put(t, KVC_TXN_SUCCESS, "t/k", 3, "created", 7, NULL), 0);
    cr_assert_eq(kvc_txn_commit(cli, t, 0, 3000, &tr, &e), 0, "%s", e.message);
    cr_assert(tr.succeeded);
    kvc_txn_result_free(&tr);
    kvc_txn_free(t);
}

Test(client_kv, compact_then_old_revision_is_out_of_range)
{
    kvc_error e;
    put_ok("c/k", "1");
    kvc_put_result pr;
    cr_assert_eq(kvc_put(cli, "c/k", 3, "2", 1, NULL, 3000, &pr, &e), 0);
    int64_t rev = pr.header.revision;
    kvc_put_result_free(&pr);
    kvc_header h;
    cr_assert_eq(kvc_compact(cli, rev, 1, 0, 5000, &h, &e), 0, "%s", e.message);
    kvc_range_opts old = {.revision = rev - 1};
    kvc_range_result r;
    int rc = kvc_get(cli, "c/k", 3, &old, 3000, &r, &e);
    cr_assert_eq(rc, -KVC_OUT_OF_RANGE, "rc %d: %s", rc, e.message);
    cr_assert_str_eq(e.message, "etcdserver: mvcc: required revision has been compacted");
    cr_assert_eq(r.n_kvs, 0);
    kvc_range_result_free(&r);
}

struct async_wait {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
    int status;
    int64_t revision;
    size_t n_kvs;
    char value[16];
    int on_io_thread_sync_rc;
};

static void wait_done(struct async_wait *w)
{
    pthread_mutex_lock(&w->mu);
    while (!w->done)
        pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
}

static void put_cb(void *arg, int status, const kvc_error *err, kvc_put_result *r)
{
    (void)err;
    struct async_wait *w = arg;
    /* A synchronous call from the I/O thread must be refused, not deadlock. */
    w->on_io_thread_sync_rc = kvc_get(cli, "x", 1, NULL, 1000, NULL, NULL);
    pthread_mutex_lock(&w->mu);
    w->status = status;
    if (r) {
        w->revision = r->header.revision;
        kvc_put_result_free(r);
    }
    w->done = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static void get_cb(void *arg, int status, const kvc_error *err, kvc_range_result *r)
{
    (void)err;
    struct async_wait *w = arg;
    pthread_mutex_lock(&w->mu);
    w->status = status;
    if (r) {
        w->n_kvs = r->n_kvs;
        if (r->n_kvs && r->kvs[0].value_len < sizeof w->value)
            memcpy(w->value, r->kvs[0].value, r->kvs[0].value_len);
        kvc_range_result_free(r);
    }
    w->done = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

Test(client_kv, async_put_and_get)
{
    struct async_wait w1 = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    struct async_wait w2 = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    kvc_error e;
    cr_assert_eq(kvc_put_async(cli, "as/k", 4, "hello", 5, NULL, 3000, put_cb, &w1, &e), 0);
    wait_done(&w1);
    cr_assert_eq(w1.status, 0);
    cr_assert_gt(w1.revision, 0);
    cr_assert_eq(w1.on_io_thread_sync_rc, -KVC_FAILED_PRECONDITION);
    cr_assert_eq(kvc_get_async(cli, "as/k", 4, NULL, 3000, get_cb, &w2, &e), 0);
    wait_done(&w2);
    cr_assert_eq(w2.status, 0);
    cr_assert_eq(w2.n_kvs, 1);
    cr_assert_str_eq(w2.value, "hello");
}

Test(client_kv, lease_unary_calls)
{
    kvc_error e;
    kvc_lease_grant_result g;
    cr_assert_eq(kvc_lease_grant(cli, 30, 0, 0, 3000, &g, &e), 0, "%s", e.message);
    cr_assert_neq(g.id, 0);
    cr_assert_eq(g.ttl, 30);

    kvc_put_opts po = {.lease = g.id};
    cr_assert_eq(kvc_put(cli, "l/k", 3, "v", 1, &po, 3000, NULL, &e), 0, "%s", e.message);

    kvc_lease_ttl_result t;
    cr_assert_eq(kvc_lease_time_to_live(cli, g.id, 1, 3000, &t, &e), 0, "%s", e.message);
    cr_assert_eq(t.granted_ttl, 30);
    cr_assert_gt(t.ttl, 0);
    cr_assert_eq(t.n_keys, 1);
    cr_assert_eq(t.key_lens[0], 3);
    cr_assert_eq(memcmp(t.keys[0], "l/k", 3), 0);
    kvc_lease_ttl_result_free(&t);

    kvc_lease_leases_result ls;
    cr_assert_eq(kvc_lease_leases(cli, 3000, &ls, &e), 0, "%s", e.message);
    int found = 0;
    for (size_t i = 0; i < ls.n_ids; i++)
        found |= ls.ids[i] == g.id;
    cr_assert(found);
    kvc_lease_leases_result_free(&ls);

    kvc_keepalive_result k;
    cr_assert_eq(kvc_lease_keepalive_once(cli, g.id, 3000, &k, &e), 0, "%s", e.message);
    cr_assert_eq(k.id, g.id);
    cr_assert_eq(k.ttl, 30);

    cr_assert_eq(kvc_lease_revoke(cli, g.id, 3000, NULL, &e), 0, "%s", e.message);
    cr_assert_eq(kvc_lease_time_to_live(cli, g.id, 0, 3000, &t, &e), 0, "%s", e.message);
    cr_assert_eq(t.ttl, -1);
    kvc_lease_ttl_result_free(&t);
    kvc_range_result r;
    cr_assert_eq(kvc_get(cli, "l/k", 3, NULL, 3000, &r, &e), 0);
    cr_assert_eq(r.n_kvs, 0, "revoking the lease deletes its key");
    kvc_range_result_free(&r);

    /* keepalive_once on a revoked lease: etcd answers NotFound on the stream. */
    int rc = kvc_lease_keepalive_once(cli, g.id, 3000, &k, &e);
    cr_assert(rc == -KVC_NOT_FOUND || (rc == 0 && k.ttl == 0), "rc %d ttl %lld: %s", rc,
              (long long)k.ttl, e.message);
}

Test(client_kv, oversized_response_is_refused_and_the_connection_survives)
{
    const char *eps[] = {srv.endpoint};
    kvc_config cfg;
    kvc_config_default(&cfg);
    cfg.endpoints = eps;
    cfg.n_endpoints = 1;
    cfg.max_response_bytes = 1000;
    kvc_client *c;
    cr_assert_eq(kvc_open(&c, &cfg, NULL), 0);
    static char big[4000];
    memset(big, 'x', sizeof big);
    kvc_error e;
    cr_assert_eq(kvc_put(c, "big", 3, big, sizeof big, NULL, 3000, NULL, &e), 0, "%s", e.message);
    kvc_range_result r;
    int rc = kvc_get(c, "big", 3, NULL, 3000, &r, &e);
    cr_assert_eq(rc, -KVC_RESOURCE_EXHAUSTED, "rc %d: %s", rc, e.message);
    cr_assert(strstr(e.message, "exceeds the limit of 1000"), "%s", e.message);
    /* Only that stream was reset: the same connection keeps serving. */
    kvc_range_opts ko = {.keys_only = 1};
    cr_assert_eq(kvc_get(c, "big", 3, &ko, 3000, &r, &e), 0, "%s", e.message);
    cr_assert_eq(r.n_kvs, 1);
    kvc_range_result_free(&r);
    kvc_stats s;
    kvc_stats(c, &s);
    cr_assert_eq(s.connects, 1);
    kvc_close(c);
}
