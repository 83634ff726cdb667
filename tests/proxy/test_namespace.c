/*
 * proxy_namespace: `grpc-proxy start --namespace=/ns/` in front of a 1-member cluster, with
 * etcdctl 3.4 through the proxy and, to see where keys really are, etcdctl on the member:
 *   - put / get / get --prefix / get --from-key / del (--prev-kv) / put --prev-kv / txn
 *     through the proxy land under /ns/ on the member and come back without the prefix;
 *   - keys written on the member outside /ns/ (including "/ns" and "/nt", the neighbours of
 *     the namespace) are invisible through the proxy; keys written on the member under /ns/
 *     are seen through it stripped;
 *   - an empty key is refused with etcd's "etcdserver: key is not provided";
 *   - watch --prefix --prev-kv through the proxy: events of puts through the proxy and on
 *     the member under /ns/, stripped; a put outside the namespace never shows;
 *   - lease timetolive --keys: only the lease's keys in the namespace, stripped;
 *   - a nested txn over raw gRPC (etcdctl cannot nest): compares and ops of both levels
 *     prefixed (range_end "\0" included), the nested responses stripped;
 *   - kvd only: the range cache (serializable gets) works in the members' key space, a put
 *     on the member invalidates it through its watch, and that watch sees the namespace only.
 * Run against etcd (KV_TEST_SERVER=etcd) the same test runs etcd's own
 * `etcd grpc-proxy start --namespace` with the same etcdctl commands and expected outputs.
 */
#include "px_util.h"

#include "grpc_raw.h"
#include "rpc.pb-c.h"

#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static kvt_cluster g_c;
static px g_x;

static void fini(void)
{
    px_stop(&g_x);
    kvt_cluster_destroy(&g_c);
}

static void setup(void)
{
    static const char *const extra[] = {"--namespace=/ns/", NULL};
    cr_assert_eq(px_cluster_start(&g_c, 1), 0, "cluster");
    cr_assert_eq(px_start(&g_x, &g_c, NULL, 0, extra), 0, "proxy");
}

/* etcdctl through the proxy: must succeed; its stdout compared with want. */
#define PX(want, ...)                                                                              \
    do {                                                                                           \
        kvt_cmd_result r_;                                                                         \
        cr_assert_eq(px_ctl(&g_x, 15000, &r_, __VA_ARGS__, NULL), 0);                              \
        cr_assert_eq(r_.exit_code, 0, "etcdctl (proxy) failed: %s %s", r_.out, r_.err);            \
        cr_assert_str_eq(r_.out, want, "through the proxy: [%s]", r_.out);                         \
        kvt_cmd_result_free(&r_);                                                                  \
    } while (0)

/* etcdctl on the member: must succeed; its stdout compared with want. */
#define MB(want, ...)                                                                              \
    do {                                                                                           \
        kvt_cmd_result r_;                                                                         \
        cr_assert_eq(kvt_ctl(&g_c, 0, 15000, &r_, __VA_ARGS__, NULL), 0);                          \
        cr_assert_eq(r_.exit_code, 0, "etcdctl (member) failed: %s %s", r_.out, r_.err);           \
        cr_assert_str_eq(r_.out, want, "on the member: [%s]", r_.out);                             \
        kvt_cmd_result_free(&r_);                                                                  \
    } while (0)

static void ctl_stdin(const char *in, kvt_cmd_result *r)
{
    const char *ctl = getenv("KV_ETCDCTL_BIN");
    char ep[64];
    snprintf(ep, sizeof ep, "--endpoints=%s", g_x.endpoint);
    const char *argv[] = {ctl && *ctl ? ctl : "/usr/bin/etcdctl", ep, "txn", NULL};
    const char *env[] = {"ETCDCTL_API=3", NULL};
    cr_assert_eq(kvt_run(argv, env, in, strlen(in), 15000, r), 0);
    cr_assert_eq(r->exit_code, 0, "%s", r->err);
}

Test(proxy_namespace, kv_through_the_proxy, .init = setup, .fini = fini, .timeout = 120)
{
    PX("OK\n", "put", "k1", "v1");
    PX("OK\n", "put", "k2", "v2");
    MB("OK\n", "put", "/ns/pre", "x");  /* inside, written on the member */
    MB("OK\n", "put", "outside", "o");  /* outside */
    MB("OK\n", "put", "/ns", "z");      /* the prefix without its slash: outside */
    MB("OK\n", "put", "/nt", "y");      /* the end of the namespace: outside */
    MB("OK\n", "put", "/ns/\xff", "w"); /* the last key of the namespace */

    /* where they landed */
    MB("/ns/k1\nv1\n", "get", "/ns/k1");
    MB("", "get", "k1");
    PX("k1\nv1\n", "get", "k1");
    PX("pre\nx\n", "get", "pre");
    PX("", "get", "outside");
    /* get "" --prefix (key "\0", range_end "\0"): the namespace only, stripped */
    PX("k1\nv1\nk2\nv2\npre\nx\n\xff\nw\n", "get", "", "--prefix");
    /* --from-key (range_end "\0"): up to the namespace's end, "/nt" excluded */
    PX("k2\n\npre\n\n\xff\n\n", "get", "k2", "--from-key", "--keys-only");
    PX("k1\nv1\nk2\nv2\n", "get", "k", "--prefix");
    /* an ordinary range [k1, k3) */
    PX("k1\n\nk2\n\n", "get", "k1", "k3", "--keys-only");

    /* prev_kv and prev_kvs come back stripped */
    PX("OK\nk1\nv1\n", "put", "k1", "v1b", "--prev-kv");
    PX("1\nk2\nv2\n", "del", "k2", "--prev-kv");
    MB("", "get", "/ns/k2");
    MB("/ns/k1\nv1b\n", "get", "/ns/k1");

    /* an empty key: etcd's ErrEmptyKey (etcd's proxy answers it before the member) */
    kvt_cmd_result r;
    cr_assert_eq(px_ctl(&g_x, 15000, &r, "put", "", "v", NULL), 0);
    cr_assert_neq(r.exit_code, 0, "%s", r.out);
    cr_assert(strstr(r.err, "etcdserver: key is not provided"), "%s", r.err);
    kvt_cmd_result_free(&r);

    /* txn: compare, success branch with a put and a get, stripped answer */
    ctl_stdin("value(\"k1\") = \"v1b\"\n\nput k3 t\nget k1\n\nput k3 f\n\n", &r);
    cr_assert_str_eq(r.out, "SUCCESS\n\nOK\n\nk1\nv1b\n");
    kvt_cmd_result_free(&r);
    MB("/ns/k3\nt\n", "get", "/ns/k3");
    /* a compare on a key outside the namespace ("outside" is /ns/outside here): fails */
    ctl_stdin("value(\"outside\") = \"o\"\n\nput k4 t\n\nput k4 f\n\n", &r);
    cr_assert_str_eq(r.out, "FAILURE\n\nOK\n");
    kvt_cmd_result_free(&r);
    MB("/ns/k4\nf\n", "get", "/ns/k4");
    /* the keys from "/n" on the member (the test cluster has its own under /kvt/): everything
     * is where it should be */
    MB("/ns\n\n/ns/k1\n\n/ns/k3\n\n/ns/k4\n\n/ns/pre\n\n/ns/\xff\n\n/nt\n\noutside\n\n", "get",
       "/n", "--from-key", "--keys-only");
    PX("1\n", "del", "k4");
    MB("", "get", "/ns/k4");
    MB("outside\no\n", "get", "outside");
}

static void read_file(const char *path, char *buf, size_t cap)
{
    buf[0] = 0;
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = 0;
    fclose(f);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The "attached keys([a b ...])" of `lease timetolive --keys`, sorted, space-separated (the
 * order is the member's: etcd's comes from a map). Static buffer: one test thread. */
static const char *attached(const char *out)
{
    static char res[512];
    char tmp[512], *keys[32];
    size_t n = 0;
    res[0] = 0;
    const char *a = strstr(out, "attached keys([");
    const char *e = a ? strstr(a, "])") : NULL;
    if (!a || !e)
        return "(none)";
    a += strlen("attached keys([");
    snprintf(tmp, sizeof tmp, "%.*s", (int)(e - a), a);
    for (char *save = NULL, *t = strtok_r(tmp, " ", &save); t && n < 32;
         t = strtok_r(NULL, " ", &save))
        keys[n++] = t;
    qsort(keys, n, sizeof keys[0], cmp_str);
    for (size_t i = 0; i < n; i++)
        snprintf(res + strlen(res), sizeof res - strlen(res), "%s%s", i ? " " : "", keys[i]);
    return res;
}

Test(proxy_namespace, watch_and_lease, .init = setup, .fini = fini, .timeout = 120)
{
    /* watch --prefix w --prev-kv through the proxy */
    kvt_proc w;
    char wlog[PATH_MAX], ep[64];
    snprintf(wlog, sizeof wlog, "%.4000s/watch.log", g_c.root.path);
    kvt_proc_init(&w, wlog);
    w.no_banner = 1;
    snprintf(ep, sizeof ep, "--endpoints=%s", g_x.endpoint);
    const char *ctl = getenv("KV_ETCDCTL_BIN");
    const char *wargv[] = {
        ctl && *ctl ? ctl : "/usr/bin/etcdctl", ep, "watch", "w", "--prefix", "--prev-kv", NULL};
    const char *wenv[] = {"ETCDCTL_API=3", NULL};
    cr_assert_eq(kvt_proc_spawn_env(&w, wargv, wenv), 0);
    /* until the watcher is created: a put through the proxy shows up */
    char buf[4096];
    uint64_t end = kvt_now_ms() + 10000;
    int n = 0;
    do {
        char v[16];
        snprintf(v, sizeof v, "a%d", n++);
        PX("OK\n", "put", "w0", v);
        kvt_sleep_ms(200);
        read_file(wlog, buf, sizeof buf);
    } while (!strstr(buf, "PUT\nw0\n") && kvt_now_ms() < end);
    cr_assert(strstr(buf, "PUT\nw0\n"), "watch output: %s", buf);
    PX("OK\n", "put", "w1", "a");
    PX("OK\n", "put", "w1", "b");        /* prev_kv w1 a */
    MB("OK\n", "put", "w2", "outside");  /* not in the namespace */
    MB("OK\n", "put", "/ns/w3", "side"); /* in it, written on the member */
    PX("OK\n", "put", "w9", "last");
    end = kvt_now_ms() + 10000;
    while (!strstr(buf, "w9\nlast\n") && kvt_now_ms() < end) {
        kvt_sleep_ms(50);
        read_file(wlog, buf, sizeof buf);
    }
    kvt_proc_kill9(&w);
    cr_assert(strstr(buf, "PUT\nw1\na\nPUT\nw1\na\nw1\nb\nPUT\nw3\nside\nPUT\nw9\nlast\n"),
              "watch output: %s", buf);
    cr_assert_null(strstr(buf, "/ns/"), "a key with the prefix: %s", buf);
    cr_assert_null(strstr(buf, "outside"), "a key outside the namespace: %s", buf);

    /* lease timetolive --keys */
    kvt_cmd_result r;
    cr_assert_eq(px_ctl(&g_x, 15000, &r, "lease", "grant", "60", NULL), 0);
    char id[32] = "";
    cr_assert_eq(sscanf(r.out, "lease %31s granted with TTL(60s)", id), 1, "%s", r.out);
    kvt_cmd_result_free(&r);
    char lease[64];
    snprintf(lease, sizeof lease, "--lease=%s", id);
    PX("OK\n", "put", "lk1", "x", lease);
    MB("OK\n", "put", "lk-outside", "y", lease);
    MB("OK\n", "put", "/ns/lk2", "z", lease);
    cr_assert_eq(px_ctl(&g_x, 15000, &r, "lease", "timetolive", id, "--keys", NULL), 0);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    cr_assert_str_eq(attached(r.out), "lk1 lk2", "through the proxy: %s", r.out);
    kvt_cmd_result_free(&r);
    cr_assert_eq(kvt_ctl(&g_c, 0, 15000, &r, "lease", "timetolive", id, "--keys", NULL), 0);
    cr_assert_str_eq(attached(r.out), "/ns/lk1 /ns/lk2 lk-outside", "on the member: %s", r.out);
    kvt_cmd_result_free(&r);
    /* lease list and revoke: unchanged */
    cr_assert_eq(px_ctl(&g_x, 15000, &r, "lease", "list", NULL), 0);
    cr_assert(strstr(r.out, id), "%s", r.out);
    kvt_cmd_result_free(&r);
    cr_assert_eq(px_ctl(&g_x, 15000, &r, "lease", "revoke", id, NULL), 0);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    kvt_cmd_result_free(&r);
    MB("", "get", "/ns/lk1");
}

Test(proxy_namespace, range_cache_in_member_keys, .init = setup, .fini = fini, .timeout = 120)
{
    if (kvt_target_from_env() != KV_TEST_SERVER_KVD)
        cr_skip_test("the range cache and its metrics are kvd's");
    PX("OK\n", "put", "c", "1");
    double h0 = px_metric(&g_x, "kvd_proxy_cache_hits_total");
    PX("c\n1\n", "get", "c", "--consistency=s");
    PX("c\n1\n", "get", "c", "--consistency=s");
    PX("c\n1\n", "get", "c", "--consistency=s");
    cr_assert_geq(px_metric(&g_x, "kvd_proxy_cache_hits_total"), h0 + 1, "no hit");
    /* a put on the member under the namespace: the cache's watch drops the entry */
    MB("OK\n", "put", "/ns/c", "2");
    kvt_cmd_result r;
    uint64_t end = kvt_now_ms() + 5000;
    int seen = 0;
    while (!seen && kvt_now_ms() < end) {
        cr_assert_eq(px_ctl(&g_x, 15000, &r, "get", "c", "--consistency=s", NULL), 0);
        seen = strcmp(r.out, "c\n2\n") == 0;
        cr_assert(seen || strcmp(r.out, "c\n1\n") == 0, "%s", r.out);
        kvt_cmd_result_free(&r);
        if (!seen)
            kvt_sleep_ms(20);
    }
    cr_assert(seen, "the member's put did not invalidate the cached get");
    /* a put through the proxy invalidates at once */
    PX("OK\n", "put", "c", "3");
    PX("c\n3\n", "get", "c", "--consistency=s");
    /* a put on the member outside the namespace, same stripped key: no effect; the cache's
     * watch covers the namespace only, so its event never reaches the proxy (the put inside
     * made after it is the one event counted, events come in revision order) */
    double e0 = px_metric(&g_x, "kvd_proxy_cache_watch_events_total");
    MB("OK\n", "put", "c", "outside");
    MB("OK\n", "put", "/ns/other", "4");
    end = kvt_now_ms() + 5000;
    while (px_metric(&g_x, "kvd_proxy_cache_watch_events_total") < e0 + 1 && kvt_now_ms() < end)
        kvt_sleep_ms(20);
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_cache_watch_events_total"), e0 + 1);
    PX("c\n3\n", "get", "c", "--consistency=s");
    PX("c\n3\n", "get", "c");
}

/* A RequestOp holding m (a put, a range or a txn). */
static Etcdserverpb__RequestOp *rop(int kind, void *m)
{
    static Etcdserverpb__RequestOp ops[8];
    static int n;
    Etcdserverpb__RequestOp *o = &ops[n++ % 8];
    etcdserverpb__request_op__init(o);
    o->request_case = kind;
    if (kind == ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT)
        o->request_put = m;
    else if (kind == ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_RANGE)
        o->request_range = m;
    else
        o->request_txn = m;
    return o;
}

#define BYTES(s) ((ProtobufCBinaryData){sizeof(s) - 1, (uint8_t *)(s)})

Test(proxy_namespace, nested_txn, .init = setup, .fini = fini, .timeout = 120)
{
    MB("OK\n", "put", "/ns/nt0", "zero");
    MB("OK\n", "put", "nt9", "outside");
    /* if version("nt1") == 0 and version(every key >= "nt9") == 0 (range_end "\0": in the
     * namespace only, so "nt9" outside does not count): put nt1=a, then a nested txn: put
     * nt2=b; range ["nt0", "\0") limit 1 */
    Etcdserverpb__Compare c1 = ETCDSERVERPB__COMPARE__INIT, c2 = ETCDSERVERPB__COMPARE__INIT;
    c1.key = BYTES("nt1");
    c1.target = ETCDSERVERPB__COMPARE__COMPARE_TARGET__VERSION;
    c1.target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_VERSION;
    c1.result = ETCDSERVERPB__COMPARE__COMPARE_RESULT__EQUAL;
    c2 = c1;
    c2.key = BYTES("nt9");
    c2.range_end = BYTES("\0");
    Etcdserverpb__Compare *cmps[] = {&c1, &c2};
    Etcdserverpb__PutRequest p1 = ETCDSERVERPB__PUT_REQUEST__INIT, p2 = p1;
    p1.key = BYTES("nt1");
    p1.value = BYTES("a");
    p2.key = BYTES("nt2");
    p2.value = BYTES("b");
    Etcdserverpb__RangeRequest rr = ETCDSERVERPB__RANGE_REQUEST__INIT;
    rr.key = BYTES("nt0");
    rr.range_end = BYTES("\0");
    rr.limit = 1;
    Etcdserverpb__TxnRequest in = ETCDSERVERPB__TXN_REQUEST__INIT;
    Etcdserverpb__RequestOp *inops[] = {rop(ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT, &p2),
                                        rop(ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_RANGE, &rr)};
    in.success = inops;
    in.n_success = 2;
    Etcdserverpb__TxnRequest t = ETCDSERVERPB__TXN_REQUEST__INIT;
    Etcdserverpb__RequestOp *ops[] = {rop(ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT, &p1),
                                      rop(ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_TXN, &in)};
    t.compare = cmps;
    t.n_compare = 2;
    t.success = ops;
    t.n_success = 2;
    uint8_t req[512];
    cr_assert_leq(etcdserverpb__txn_request__get_packed_size(&t), sizeof req);
    size_t n = etcdserverpb__txn_request__pack(&t, req);

    kv_it_grpc *g = NULL;
    cr_assert_eq(kv_it_grpc_open(&g, "127.0.0.1", g_x.port, 5000), 0);
    uint8_t *resp = NULL;
    size_t rl = 0;
    int st = -1;
    char msg[256] = "";
    cr_assert_eq(
        kv_it_grpc_call(g, "/etcdserverpb.KV/Txn", req, n, &resp, &rl, 10000, &st, msg, sizeof msg),
        0);
    kv_it_grpc_close(g);
    cr_assert_eq(st, 0, "status %d %s", st, msg);
    Etcdserverpb__TxnResponse *r = etcdserverpb__txn_response__unpack(NULL, rl, resp);
    free(resp);
    cr_assert_not_null(r);
    cr_assert(r->succeeded, "the compares were not rewritten");
    cr_assert_eq(r->n_responses, 2);
    cr_assert_eq(r->responses[1]->response_case, ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_TXN);
    const Etcdserverpb__TxnResponse *ir = r->responses[1]->response_txn;
    cr_assert_eq(ir->n_responses, 2);
    const Etcdserverpb__RangeResponse *rg = ir->responses[1]->response_range;
    cr_assert_not_null(rg);
    cr_assert_eq(rg->n_kvs, 1);
    cr_assert_eq(rg->kvs[0]->key.len, 3);
    cr_assert(memcmp(rg->kvs[0]->key.data, "nt0", 3) == 0, "key %.*s", (int)rg->kvs[0]->key.len,
              (const char *)rg->kvs[0]->key.data);
    cr_assert_eq(rg->count, 3, "nt0, nt1, nt2 in the namespace: %lld", (long long)rg->count);
    etcdserverpb__txn_response__free_unpacked(r, NULL);
    MB("/ns/nt1\na\n", "get", "/ns/nt1");
    MB("/ns/nt2\nb\n", "get", "/ns/nt2");
    MB("nt9\noutside\n", "get", "nt9");
}
