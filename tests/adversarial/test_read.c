/*
 * Adversarial tests, area "read": one client's heavy reads must not stall the
 * loop, so another client's kept-alive lease never expires; a big compaction must not stall
 * writes.
 *
 * - heavy_reads_keep_leases_alive: N keys (KV_ADV_READ_KEYS, default 200k; 100k under ASan)
 *   loaded through Txns of 128 puts; an attacker sends bursts of heavy reads (Range sorted
 *   by value limit 1, keys_only Range of everything, count_only over a prefix, HashKV)
 *   pipelined in ONE TCP write on one connection, back to back, while another client renews
 *   a TTL-2 s lease every 300 ms over a LeaseKeepAlive stream. Before the fix a burst held
 *   the loop for seconds: the expiry timer ran before the queued renewal was read and the
 *   lease died. Asserted: every renewal answers TTL > 0, the leased key survives, keepalive
 *   latency p99 < 100 ms (release; 300 ms under ASan).
 * - compaction_does_not_stall_puts: every key overwritten twice (2N superseded revisions),
 *   then Compact(physical) while a writer puts in a loop: the largest put latency during the
 *   compaction stays below 400 ms (1 s under ASan); before the fix one apply transaction
 *   held every put for the whole compaction. Compact physical answers only once the
 *   physical compaction finished (kvd_compaction_pending 0) and HashKV at the same revision
 *   is refused for the compacted revision.
 * - reads_cancelled_on_their_workers_are_dropped: bursts whose connection closes at once
 *   (calls cancelled while their reads run); kvd_read_pending returns to 0, kvd keeps serving,
 *   and a shutdown with reads in flight exits cleanly (no leak/UAF under ASan).
 * - full_read_queue_sheds_with_resource_exhausted: --max-pending-reads 4: the excess of a
 *   burst gets RESOURCE_EXHAUSTED, counted in kvd_read_refused_total.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "grpc_raw.h"
#include "harness.h"
#include "ka_stream.h"
#include "leaseint_util.h"
#include "rpc.pb-c.h"

#if defined(__SANITIZE_ADDRESS__)
#define ADV_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ADV_ASAN 1
#endif
#endif
#ifndef ADV_ASAN
#define ADV_ASAN 0
#endif

#define TXN_PUTS 128
#define LOAD_THREADS 4

static size_t n_keys(void)
{
    const char *e = getenv("KV_ADV_READ_KEYS");
    if (e && atol(e) > 0)
        return (size_t)atol(e);
    return ADV_ASAN ? 100000 : 200000;
}

/* ---- loading ---- */

typedef struct load_arg {
    const kv_it_server *s;
    size_t from, to;
    unsigned round;
    int rc;
} load_arg;

static void *load_main(void *p)
{
    load_arg *a = p;
    kv_it_grpc *c = NULL;
    a->rc = kvli_connect(a->s, &c);
    if (a->rc)
        return NULL;
    char keys[TXN_PUTS][32], vals[TXN_PUTS][32];
    Etcdserverpb__PutRequest puts[TXN_PUTS];
    Etcdserverpb__RequestOp ops[TXN_PUTS], *opp[TXN_PUTS];
    for (size_t i = a->from; i < a->to && a->rc == 0;) {
        size_t n = 0;
        for (; n < TXN_PUTS && i < a->to; n++, i++) {
            snprintf(keys[n], sizeof keys[n], "k%07zu", i);
            /* values in a scrambled order, so sorting by value is real work */
            snprintf(vals[n], sizeof vals[n], "v%08x-%u", (unsigned)(i * 2654435761u), a->round);
            etcdserverpb__put_request__init(&puts[n]);
            puts[n].key.data = (uint8_t *)keys[n];
            puts[n].key.len = strlen(keys[n]);
            puts[n].value.data = (uint8_t *)vals[n];
            puts[n].value.len = strlen(vals[n]);
            etcdserverpb__request_op__init(&ops[n]);
            ops[n].request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT;
            ops[n].request_put = &puts[n];
            opp[n] = &ops[n];
        }
        Etcdserverpb__TxnRequest t = ETCDSERVERPB__TXN_REQUEST__INIT;
        t.n_success = n;
        t.success = opp;
        size_t len = etcdserverpb__txn_request__get_packed_size(&t);
        uint8_t *buf = malloc(len);
        etcdserverpb__txn_request__pack(&t, buf);
        uint8_t *resp = NULL;
        size_t rlen = 0;
        int st = -1;
        char msg[128];
        a->rc = kv_it_grpc_call(c, "/etcdserverpb.KV/Txn", buf, len, &resp, &rlen, 30000, &st, msg,
                                sizeof msg);
        free(buf);
        free(resp);
    }
    kv_it_grpc_close(c);
    return NULL;
}

static void load(const kv_it_server *s, size_t n, unsigned round)
{
    pthread_t th[LOAD_THREADS];
    load_arg a[LOAD_THREADS];
    for (int t = 0; t < LOAD_THREADS; t++) {
        a[t] = (load_arg){s, n * t / LOAD_THREADS, n * (t + 1) / LOAD_THREADS, round, 0};
        pthread_create(&th[t], NULL, load_main, &a[t]);
    }
    for (int t = 0; t < LOAD_THREADS; t++) {
        pthread_join(th[t], NULL);
        cr_assert_eq(a[t].rc, 0, "load thread %d: %d", t, a[t].rc);
    }
}

/* ---- pipelining: all requests of a burst leave in one write (tests/lib grpc_raw) ---- */

typedef struct pipe_req {
    const char *path;
    uint8_t *body; /* framed */
    size_t len;
    kv_it_grpc_stream *st; /* owned by the connection */
} pipe_req;

static uint8_t *frame(const ProtobufCMessage *m, size_t *out)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    uint8_t *b = malloc(n + 5);
    b[0] = 0;
    b[1] = (uint8_t)(n >> 24);
    b[2] = (uint8_t)(n >> 16);
    b[3] = (uint8_t)(n >> 8);
    b[4] = (uint8_t)n;
    protobuf_c_message_pack(m, b + 5);
    *out = n + 5;
    return b;
}

/* One burst: the heavy requests, submitted together, written in one send(), then every
 * response is read (and dropped). Returns the number answered OK, or < 0. */
#define BURST_GROUPS 6 /* 6 x 6 heavy requests: seconds of loop time before the fix */
static int burst_ex(uint16_t port, size_t *refused, int close_early)
{
    pipe_req reqs[6 * BURST_GROUPS];
    memset(reqs, 0, sizeof reqs);
    size_t n = 0;
    Etcdserverpb__RangeRequest r;
    uint8_t zero = 0;
    for (int g = 0; g < BURST_GROUPS; g++) {
        /* sorted by value, limit 1, whole keyspace (x2) */
        for (int k = 0; k < 2; k++) {
            etcdserverpb__range_request__init(&r);
            r.key.data = &zero;
            r.key.len = 1;
            r.range_end.data = &zero;
            r.range_end.len = 1;
            r.limit = 1;
            r.sort_order = ETCDSERVERPB__RANGE_REQUEST__SORT_ORDER__DESCEND;
            r.sort_target = ETCDSERVERPB__RANGE_REQUEST__SORT_TARGET__VALUE;
            reqs[n].path = "/etcdserverpb.KV/Range";
            reqs[n].body = frame(&r.base, &reqs[n].len);
            n++;
        }
        /* keys_only of everything */
        etcdserverpb__range_request__init(&r);
        r.key.data = &zero;
        r.key.len = 1;
        r.range_end.data = &zero;
        r.range_end.len = 1;
        r.keys_only = 1;
        reqs[n].path = "/etcdserverpb.KV/Range";
        reqs[n].body = frame(&r.base, &reqs[n].len);
        n++;
        /* count_only over the "k" prefix (walks the index) (x2) */
        for (int k = 0; k < 2; k++) {
            etcdserverpb__range_request__init(&r);
            r.key.data = (uint8_t *)"k";
            r.key.len = 1;
            r.range_end.data = (uint8_t *)"l";
            r.range_end.len = 1;
            r.count_only = 1;
            reqs[n].path = "/etcdserverpb.KV/Range";
            reqs[n].body = frame(&r.base, &reqs[n].len);
            n++;
        }
        Etcdserverpb__HashKVRequest h = ETCDSERVERPB__HASH_KVREQUEST__INIT;
        reqs[n].path = "/etcdserverpb.Maintenance/HashKV";
        reqs[n].body = frame(&h.base, &reqs[n].len);
        n++;
    }
    /* Big windows; responses are counted, not kept. */
    kv_it_grpc_opts o = {.set_window = 1, .window = 1u << 30, .conn_window = 1u << 30};
    kv_it_grpc *c = NULL;
    int rc = kv_it_grpc_open_opts(&c, "127.0.0.1", port, 5000, &o);
    if (rc)
        goto out;
    kv_it_grpc_req rq = {.authority = "127.0.0.1"};
    for (size_t i = 0; i < n; i++) {
        reqs[i].st = kv_it_grpc_stream_start(c, reqs[i].path, &rq);
        if (!reqs[i].st || kv_it_grpc_send_raw(reqs[i].st, reqs[i].body, reqs[i].len, 1)) {
            rc = -EPROTO;
            goto out;
        }
        reqs[i].st->discard = 1;
    }
    /* every frame queued so far leaves in one send() */
    if ((rc = kv_it_grpc_flush(c, 5000)))
        goto out;
    if (close_early) { /* the client goes away while its reads run: every call is cancelled */
        rc = 0;
        goto out;
    }
    uint64_t deadline = kv_it_now_ms() + 120000;
    size_t closed = 0;
    while (kv_it_now_ms() < deadline) {
        closed = 0;
        for (size_t i = 0; i < n; i++)
            closed += reqs[i].st->closed != 0;
        if (closed == n || (rc = kv_it_grpc_pump(c, 1000)))
            break;
    }
    if (closed == n) {
        rc = 0;
        for (size_t i = 0; i < n; i++) {
            if (reqs[i].st->grpc_status == 0)
                rc++;
            else if (reqs[i].st->grpc_status == 8 && refused)
                (*refused)++;
        }
    } else if (rc >= 0) {
        rc = -ETIMEDOUT;
    }
out:
    kv_it_grpc_close(c);
    for (size_t i = 0; i < n; i++)
        free(reqs[i].body);
    return rc;
}

static int burst(uint16_t port, size_t *refused)
{
    return burst_ex(port, refused, 0);
}

typedef struct attack {
    uint16_t port;
    atomic_int stop, done;
    int bursts, ok, errors;
    size_t refused;
} attack;

static void *attack_main(void *p)
{
    attack *a = p;
    while (!atomic_load(&a->stop)) {
        int rc = burst(a->port, &a->refused);
        if (rc < 0)
            a->errors++;
        else
            a->ok += rc;
        a->bursts++;
    }
    atomic_store(&a->done, 1);
    return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static kv_it_server srv;

static void start_server(void)
{
    cr_assert_eq(kv_it_server_init(&srv, KV_IT_KVD, NULL), 0);
    cr_assert_eq(kv_it_server_start(&srv, 20000), 0);
}

static void stop_server(void)
{
    kv_it_server_destroy(&srv);
}

TestSuite(adv_read, .init = start_server, .fini = stop_server, .timeout = 600);

Test(adv_read, heavy_reads_keep_leases_alive)
{
    size_t n = n_keys();
    uint64_t t0 = kv_it_now_ms();
    load(&srv, n, 0);
    cr_log_info("loaded %zu keys in %llu ms", n, (unsigned long long)(kv_it_now_ms() - t0));

    kv_it_grpc *c = NULL;
    cr_assert_eq(kvli_connect(&srv, &c), 0);
    int64_t id = 0, ttl = 0;
    char msg[256];
    cr_assert_eq(kvli_grant(c, 2, 0, &id, &ttl, msg, sizeof msg), 0, "%s", msg);
    cr_assert_eq(kvli_put(c, "leased", "x", id, msg, sizeof msg), 0, "%s", msg);
    kvli_ka *ka = NULL;
    cr_assert_eq(kvli_ka_open(&ka, srv.client_port, 5000), 0);

    attack a = {.port = srv.client_port};
    pthread_t th;
    pthread_create(&th, NULL, attack_main, &a);

    /* Renew every 300 ms for 12 s (40 renewals) while the attack runs, then until its last
     * burst has been answered (the lease must live as long as it is renewed). */
    enum { RENEWALS = 40, MAX_RENEWALS = 1000 };
    uint64_t lat[MAX_RENEWALS];
    int dead = 0, n_lat = 0;
    for (int i = 0; i < MAX_RENEWALS && (i < RENEWALS || !atomic_load(&a.done)); i++) {
        if (i == RENEWALS)
            atomic_store(&a.stop, 1);
        uint64_t s0 = kv_it_now_ms();
        int rc = kvli_ka_send(ka, id, 5000);
        int64_t rid = 0, rttl = 0;
        if (rc == 0)
            rc = kvli_ka_recv(ka, &rid, &rttl, 5000);
        uint64_t d = kv_it_now_ms() - s0;
        cr_assert_eq(rc, 0, "renewal %d not answered within 5 s (%d): the loop is stalled", i, rc);
        lat[n_lat++] = d;
        if (rttl <= 0)
            dead++;
        if (d < 300)
            kvli_sleep_ms((unsigned)(300 - d));
    }
    atomic_store(&a.stop, 1);
    pthread_join(th, NULL);
    kvli_ka_close(ka);

    qsort(lat, (size_t)n_lat, sizeof lat[0], cmp_u64);
    uint64_t p99 = lat[(n_lat * 99 + 99) / 100 - 1], max = lat[n_lat - 1];
    cr_log_info("attack: %d bursts, %d heavy reads answered, %zu refused, %d errors; keepalive "
                "p50 %llu ms p99 %llu ms max %llu ms; %d renewals answered TTL <= 0",
                a.bursts, a.ok, a.refused, a.errors, (unsigned long long)lat[n_lat / 2],
                (unsigned long long)p99, (unsigned long long)max, dead);
    cr_assert_gt(a.ok, 0, "the attack must actually run heavy reads");
    cr_assert_eq(dead, 0, "%d renewals answered TTL 0: the lease expired although renewed on time",
                 dead);
    int64_t count = -1, left = 0;
    cr_assert_eq(kvli_ttl(c, id, 0, &left, NULL, NULL, msg, sizeof msg), 0, "%s", msg);
    cr_assert_eq(kvli_count(c, "leased", 0, &count, msg, sizeof msg), 0, "%s", msg);
    cr_log_info("lease ttl left %lld, leased keys %lld", (long long)left, (long long)count);
    cr_assert_eq(count, 1, "the leased key was deleted");
    uint64_t bound = ADV_ASAN ? 300 : 100;
    cr_assert_lt(p99, bound, "keepalive p99 %llu ms (bound %llu ms)", (unsigned long long)p99,
                 (unsigned long long)bound);
    kv_it_grpc_close(c);
}

/* ---- compaction ---- */

typedef struct putter {
    const kv_it_server *s;
    atomic_int stop;
    uint64_t max_ms;
    int puts, errors;
} putter;

static void *putter_main(void *p)
{
    putter *w = p;
    kv_it_grpc *c = NULL;
    if (kvli_connect(w->s, &c))
        return NULL;
    char msg[128];
    while (!atomic_load(&w->stop)) {
        uint64_t s0 = kv_it_now_ms();
        if (kvli_put(c, "writer", "v", 0, msg, sizeof msg) != 0)
            w->errors++;
        uint64_t d = kv_it_now_ms() - s0;
        if (d > w->max_ms)
            w->max_ms = d;
        w->puts++;
        kvli_sleep_ms(5);
    }
    kv_it_grpc_close(c);
    return NULL;
}

static int hash_kv(kv_it_grpc *c, int64_t rev, uint32_t *hash, int64_t *hdr_rev)
{
    Etcdserverpb__HashKVRequest h = ETCDSERVERPB__HASH_KVREQUEST__INIT;
    h.revision = rev;
    uint8_t buf[32], *resp = NULL;
    size_t len = etcdserverpb__hash_kvrequest__pack(&h, buf), rlen = 0;
    int st;
    char msg[128];
    int rc = kv_it_grpc_call(c, "/etcdserverpb.Maintenance/HashKV", buf, len, &resp, &rlen, 60000,
                             &st, msg, sizeof msg);
    if (rc)
        return rc;
    Etcdserverpb__HashKVResponse *r = etcdserverpb__hash_kvresponse__unpack(NULL, rlen, resp);
    free(resp);
    if (!r)
        return -EPROTO;
    *hash = r->hash;
    if (hdr_rev)
        *hdr_rev = r->header ? r->header->revision : 0;
    etcdserverpb__hash_kvresponse__free_unpacked(r, NULL);
    return 0;
}

Test(adv_read, compaction_does_not_stall_puts)
{
    size_t n = n_keys();
    load(&srv, n, 0);
    load(&srv, n, 1);
    load(&srv, n, 2); /* every key superseded twice: 2n revisions to remove */
    kv_it_grpc *c = NULL;
    cr_assert_eq(kvli_connect(&srv, &c), 0);
    uint32_t h_before = 0;
    int64_t rev = 0;
    cr_assert_eq(hash_kv(c, 0, &h_before, &rev), 0);

    putter w = {.s = &srv};
    pthread_t th;
    pthread_create(&th, NULL, putter_main, &w);
    kvli_sleep_ms(300);

    Etcdserverpb__CompactionRequest cq = ETCDSERVERPB__COMPACTION_REQUEST__INIT;
    cq.revision = rev;
    cq.physical = 1;
    uint8_t buf[32], *resp = NULL;
    size_t len = etcdserverpb__compaction_request__pack(&cq, buf), rlen = 0;
    int st = -1;
    char msg[256];
    uint64_t t0 = kv_it_now_ms();
    int rc = kv_it_grpc_call(c, "/etcdserverpb.KV/Compact", buf, len, &resp, &rlen, 120000, &st,
                             msg, sizeof msg);
    uint64_t took = kv_it_now_ms() - t0;
    free(resp);
    cr_assert_eq(rc, 0, "compact: %d %d %s", rc, st, msg);
    double pending = -1;
    int mrc = kvli_metric(&srv, "kvd_compaction_pending", &pending);
    kvli_sleep_ms(300);
    atomic_store(&w.stop, 1);
    pthread_join(th, NULL);
    cr_log_info("compaction of %zu superseded revisions (%zu keys x 2) took %llu ms; %d puts "
                "meanwhile, max put "
                "latency %llu ms, %d errors",
                2 * n, n, (unsigned long long)took, w.puts, (unsigned long long)w.max_ms, w.errors);
    cr_assert_eq(w.errors, 0);
    if (mrc == 0)
        cr_assert_eq(pending, 0, "Compact physical answered before the compaction finished");
    uint32_t h_after = 0;
    cr_assert_eq(hash_kv(c, rev, &h_after, NULL), KV_IT_GRPC_STATUS,
                 "HashKV at the compacted revision must fail as etcd's");
    uint64_t bound = ADV_ASAN ? 1000 : 400;
    cr_assert_lt(w.max_ms, bound, "a put waited %llu ms during compaction (bound %llu ms)",
                 (unsigned long long)w.max_ms, (unsigned long long)bound);
    kv_it_grpc_close(c);
}

Test(adv_read, reads_cancelled_on_their_workers_are_dropped)
{
    /* Enough data that the reads are still running when the connection goes away. */
    load(&srv, n_keys() / 4, 0);
    for (int i = 0; i < 5; i++)
        cr_assert_eq(burst_ex(srv.client_port, NULL, 1), 0);
    double pending = -1;
    for (int i = 0; i < 300; i++) {
        if (kvli_metric(&srv, "kvd_read_pending", &pending) == 0 && pending == 0)
            break;
        kvli_sleep_ms(100);
    }
    cr_assert_eq(pending, 0, "reads of cancelled calls must complete and be released");
    cr_assert(kv_it_server_alive(&srv));
    kv_it_grpc *c = NULL;
    cr_assert_eq(kvli_connect(&srv, &c), 0);
    int64_t count = -1;
    char msg[128];
    cr_assert_eq(kvli_count(c, "k", 1, &count, msg, sizeof msg), 0, "%s", msg);
    cr_assert_eq(count, (int64_t)(n_keys() / 4));
    kv_it_grpc_close(c);

    /* Shutdown while reads are queued and running: clean exit (no leak under ASan). */
    cr_assert_eq(burst_ex(srv.client_port, NULL, 1), 0);
    kvli_sleep_ms(50);
    cr_assert_eq(kv_it_server_stop(&srv, 30000), 0);
    char *log = NULL;
    cr_assert_eq(kv_it_server_log(&srv, &log), 0);
    cr_assert_null(strstr(log, "Sanitizer"), "%s", log);
    cr_assert_not_null(strstr(log, "kvd: stopped"), "%s", log);
    free(log);
}

Test(adv_read, full_read_queue_sheds_with_resource_exhausted)
{
    kv_it_server s2;
    const char *args[] = {"--read-workers=1", "--max-pending-reads=4", NULL};
    cr_assert_eq(kv_it_server_init(&s2, KV_IT_KVD, args), 0);
    cr_assert_eq(kv_it_server_start(&s2, 20000), 0);
    load(&s2, 20000, 0);
    size_t refused = 0;
    int ok = burst(s2.client_port, &refused);
    double m = -1;
    int mrc = kvli_metric(&s2, "kvd_read_refused_total", &m);
    kv_it_server_destroy(&s2);
    cr_log_info("bounded read queue: %d answered, %zu refused", ok, refused);
    cr_assert_geq(ok, 4, "the first reads are served");
    cr_assert_gt(refused, 0, "reads beyond --max-pending-reads get RESOURCE_EXHAUSTED");
    cr_assert_eq(ok + (int)refused, 6 * BURST_GROUPS, "every read answered one way or the other");
    cr_assert_eq(mrc, 0);
    cr_assert_eq(m, (double)refused);
}
