/*
 * adv_startup: the startup defects (hardening).
 *
 * D2  two kvd processes on one data dir: the second must exit at once with a clear error
 *     naming the holder's pid (it used to start, and both acknowledged different writes at
 *     the same revision).
 * D11 a kvd started on another member's data dir with flags that give other member/cluster
 *     ids must refuse to start (it used to serve that data under the new ids, silently).
 * D10 corrupted data.mdb: 30 deterministic corruptions (bit flips, overwritten pages, byte
 *     bursts) of a copy of a populated data dir; on each kvd must either refuse to start with
 *     a clear message, or start and serve correct values or an error (DATA_LOSS/INTERNAL):
 *     never crash (SIGSEGV/SIGBUS/abort), never hang, never return a wrong value or lose a key
 *     silently. Before the fix: a startup hang inside LMDB, and keys silently missing.
 *
 * kvd only (these are kvd's own startup checks); under KV_TEST_SERVER=etcd the tests skip.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "grpc_raw.h"
#include "harness.h"
#include "rpc.pb-c.h"

#define N_KEYS 240
#define TRIALS 30
#define PAGE 4096

static int is_kvd(void)
{
    return kv_it_kind_from_env() == KV_IT_KVD;
}

static void srv_init(kv_it_server *s, const char *const *extra)
{
    int rc = kv_it_server_init(s, KV_IT_KVD, extra);
    cr_assert_eq(rc, 0, "init kvd (%s): %d", s->bin, rc);
}

static char *srv_log(const kv_it_server *s)
{
    char *log = NULL;
    cr_assert_eq(kv_it_server_log(s, &log), 0);
    return log;
}

/* Unary call; returns the gRPC status (0 OK), *resp malloc'd on OK. */
static int call(kv_it_grpc *c, const char *method, const uint8_t *req, size_t len, uint8_t **resp,
                size_t *rlen, char *msg, size_t msgcap)
{
    int st = -1;
    *resp = NULL;
    *rlen = 0;
    int rc = kv_it_grpc_call(c, method, req, len, resp, rlen, 10000, &st, msg, msgcap);
    cr_assert(rc == 0 || rc == KV_IT_GRPC_STATUS, "%s: transport error %d", method, rc);
    return st;
}

static void put(kv_it_grpc *c, const char *key, const uint8_t *val, size_t vlen, int64_t lease)
{
    Etcdserverpb__PutRequest p = ETCDSERVERPB__PUT_REQUEST__INIT;
    p.key = (ProtobufCBinaryData){strlen(key), (uint8_t *)key};
    p.value = (ProtobufCBinaryData){vlen, (uint8_t *)val};
    p.lease = lease;
    size_t len = etcdserverpb__put_request__get_packed_size(&p);
    uint8_t *buf = malloc(len), *resp;
    cr_assert(buf);
    etcdserverpb__put_request__pack(&p, buf);
    size_t rl;
    char msg[256];
    int st = call(c, "/etcdserverpb.KV/Put", buf, len, &resp, &rl, msg, sizeof(msg));
    cr_assert_eq(st, 0, "put %s: status %d %s", key, st, msg);
    free(resp);
    free(buf);
}

/* Value of key i: a pattern derived from i; every 40th key is 20 KB (LMDB overflow pages). */
static size_t value_of(int i, uint8_t *out, size_t cap)
{
    size_t n = i % 40 == 0 ? 20000 : 40 + (size_t)(i % 7);
    cr_assert(n <= cap);
    for (size_t k = 0; k < n; k++)
        out[k] = (uint8_t)('a' + (i * 31 + (int)k) % 26);
    return n;
}

/* ---- D2 ---- */

Test(startup, second_process_on_same_data_dir_exits_at_once_naming_holder)
{
    if (!is_kvd())
        cr_skip_test("kvd only");
    kv_it_server a, b;
    srv_init(&a, NULL);
    cr_assert_eq(kv_it_server_start(&a, 20000), 0, "start first kvd");
    srv_init(&b, NULL);
    snprintf(b.data_dir, sizeof(b.data_dir), "%s", a.data_dir); /* same data dir */
    uint64_t t0 = kv_it_now_ms();
    int rc = kv_it_server_start(&b, 10000);
    uint64_t took = kv_it_now_ms() - t0;
    char *log = srv_log(&b);
    cr_assert_eq(rc, -ECHILD, "a second kvd on the same data dir must exit (rc %d); its log:\n%s",
                 rc, log);
    cr_expect_lt(took, 5000, "the second kvd must exit at once, took %llu ms",
                 (unsigned long long)took);
    char want[64];
    snprintf(want, sizeof(want), "pid %d", (int)a.pid);
    cr_expect(strstr(log, "in use by another kvd process") && strstr(log, want),
              "the error must name the holder (%s); log:\n%s", want, log);
    free(log);
    cr_assert(kv_it_server_alive(&a), "the first kvd keeps running");

    /* The lock dies with its holder: after kill -9 the data dir is usable again. */
    cr_assert_eq(kv_it_server_kill9(&a), 0);
    cr_assert_eq(kv_it_server_start(&a, 20000), 0, "restart after kill -9 (stale lock file)");
    kv_it_server_destroy(&b);
    kv_it_server_destroy(&a);
}

/* ---- D11 ---- */

Test(startup, other_members_data_dir_with_contradicting_flags_is_refused)
{
    if (!is_kvd())
        cr_skip_test("kvd only");
    kv_it_server a, b;
    srv_init(&a, NULL);
    cr_assert_eq(kv_it_server_start(&a, 20000), 0);
    kv_it_grpc *c = NULL;
    cr_assert_eq(kv_it_grpc_open(&c, "127.0.0.1", a.client_port, 5000), 0);
    put(c, "owned-by-a", (const uint8_t *)"x", 1, 0);
    kv_it_grpc_close(c);
    cr_assert_eq(kv_it_server_stop(&a, 5000), 0);

    /* Another member (other peer URL, other cluster token) pointed at a's data dir. */
    static const char *const other[] = {"--initial-cluster-token=another-cluster", NULL};
    srv_init(&b, other);
    snprintf(b.data_dir, sizeof(b.data_dir), "%s", a.data_dir);
    int rc = kv_it_server_start(&b, 10000);
    char *log = srv_log(&b);
    cr_assert_eq(rc, -ECHILD, "kvd must refuse another member's data dir (rc %d); log:\n%s", rc,
                 log);
    cr_expect(strstr(log, "refusing to start") && strstr(log, "belongs to member") &&
                  strstr(log, "--initial-cluster-token"),
              "clear error expected; log:\n%s", log);
    free(log);

    /* The rightful owner still starts on it, with its data. */
    cr_assert_eq(kv_it_server_start(&a, 20000), 0, "the owner restarts on its data dir");
    kv_it_server_destroy(&b);
    kv_it_server_destroy(&a);
}

/* ---- D10 ---- */

static uint64_t rng_next(uint64_t *s)
{
    uint64_t x = *s; /* xorshift64*, deterministic */
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1DULL;
}

static uint8_t *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    cr_assert(f, "open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc((size_t)n);
    cr_assert(buf);
    cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return buf;
}

static void write_file(const char *path, const uint8_t *buf, size_t len)
{
    FILE *f = fopen(path, "wb");
    cr_assert(f, "open %s", path);
    cr_assert_eq(fwrite(buf, 1, len, f), len);
    cr_assert_eq(fclose(f), 0);
}

/* Reads every key of the fixture; values must be right, or the call must fail with
 * DATA_LOSS or INTERNAL (corruption found); a missing key is a failure (every key exists).
 * Returns the number of correct values seen. */
static int check_reads(kv_it_server *s, const char *what)
{
    kv_it_grpc *c = NULL;
    cr_assert_eq(kv_it_grpc_open(&c, "127.0.0.1", s->client_port, 5000), 0, "%s: connect", what);
    int good = 0, errors = 0;
    uint8_t want[20000];
    for (int i = 0; i < N_KEYS; i += 3) {
        char key[32];
        snprintf(key, sizeof(key), "key-%04d", i);
        Etcdserverpb__RangeRequest r = ETCDSERVERPB__RANGE_REQUEST__INIT;
        r.key = (ProtobufCBinaryData){strlen(key), (uint8_t *)key};
        uint8_t buf[64], *resp;
        size_t len = etcdserverpb__range_request__pack(&r, buf), rl;
        char msg[256] = "";
        int st = -1;
        int rc = kv_it_grpc_call(c, "/etcdserverpb.KV/Range", buf, len, &resp, &rl, 10000, &st, msg,
                                 sizeof(msg));
        cr_assert(rc == 0 || rc == KV_IT_GRPC_STATUS,
                  "%s: get %s: transport error %d (server alive: %d)", what, key, rc,
                  kv_it_server_alive(s));
        if (st != 0) {
            cr_assert(st == 15 || st == 13, "%s: get %s: unexpected status %d %s", what, key, st,
                      msg);
            errors++;
            continue;
        }
        Etcdserverpb__RangeResponse *res = etcdserverpb__range_response__unpack(NULL, rl, resp);
        free(resp);
        cr_assert(res, "%s: get %s: undecodable response", what, key);
        cr_assert_eq(res->n_kvs, 1, "%s: get %s: the key is missing (served silently)", what, key);
        if (res->n_kvs == 1) {
            size_t n = value_of(i, want, sizeof(want));
            cr_assert(res->kvs[0]->value.len == n && memcmp(res->kvs[0]->value.data, want, n) == 0,
                      "%s: get %s returned a wrong value (%zu bytes)", what, key,
                      res->kvs[0]->value.len);
            good++;
        }
        etcdserverpb__range_response__free_unpacked(res, NULL);
    }
    kv_it_grpc_close(c);
    if (errors)
        cr_log_info("%s: %d reads failed with DATA_LOSS/INTERNAL", what, errors);
    return good;
}

Test(startup, corrupted_data_file_is_refused_or_served_safely_never_crashes)
{
    if (!is_kvd())
        cr_skip_test("kvd only");
    kv_it_server s;
    srv_init(&s, NULL);
    cr_assert_eq(kv_it_server_start(&s, 20000), 0);
    kv_it_grpc *c = NULL;
    cr_assert_eq(kv_it_grpc_open(&c, "127.0.0.1", s.client_port, 5000), 0);
    /* A lease with keys attached (lease records), three revisions of every key (index dups),
     * 20 KB values (overflow pages). Values never change, so any value served must be right. */
    Etcdserverpb__LeaseGrantRequest g = ETCDSERVERPB__LEASE_GRANT_REQUEST__INIT;
    g.ttl = 100000;
    g.id = 0x6b76640000000001LL; /* fixed, so the file layout (and the trials) are the same */
    uint8_t gb[32], *resp;
    size_t glen = etcdserverpb__lease_grant_request__pack(&g, gb), rl;
    char msg[256];
    cr_assert_eq(call(c, "/etcdserverpb.Lease/LeaseGrant", gb, glen, &resp, &rl, msg, sizeof(msg)),
                 0);
    Etcdserverpb__LeaseGrantResponse *gr =
        etcdserverpb__lease_grant_response__unpack(NULL, rl, resp);
    cr_assert(gr);
    int64_t lease = gr->id;
    etcdserverpb__lease_grant_response__free_unpacked(gr, NULL);
    free(resp);
    static uint8_t val[20000];
    for (int round = 0; round < 3; round++)
        for (int i = 0; i < N_KEYS; i++) {
            char key[32];
            snprintf(key, sizeof(key), "key-%04d", i);
            size_t n = value_of(i, val, sizeof(val));
            put(c, key, val, n, i % 5 == 0 ? lease : 0);
        }
    kv_it_grpc_close(c);
    cr_assert_eq(check_reads(&s, "pristine"), (N_KEYS + 2) / 3);
    cr_assert_eq(kv_it_server_stop(&s, 5000), 0);

    char path[PATH_MAX + 16];
    snprintf(path, sizeof(path), "%s/data.mdb", s.data_dir);
    size_t len;
    uint8_t *pristine = read_file(path, &len);
    cr_assert_geq(len, 16 * PAGE, "fixture too small: %zu bytes", len);
    uint8_t *bad = malloc(len);
    cr_assert(bad);
    /* LMDB's own pages (meta, branch, leaf, fixed-key leaf: flags at byte 10 of the page
     * header) are where a corruption can derail LMDB itself; most trials aim at them. */
    size_t pages = len / PAGE, n_tree = 0;
    size_t *tree = calloc(pages, sizeof(*tree));
    cr_assert(tree);
    for (size_t pg = 0; pg < pages; pg++) {
        uint8_t f = pristine[pg * PAGE + 10], f2 = pristine[pg * PAGE + 11];
        if (f2 == 0 && (f == 0x01 || f == 0x02 || f == 0x08 || f == 0x20))
            tree[n_tree++] = pg;
    }
    cr_assert_geq(n_tree, 8, "fixture has only %zu tree pages", n_tree);
    uint64_t seed = 0x6b76642d38ULL; /* fixed: the same 30 corruptions every run */
    int refused = 0, served = 0;
    for (int t = 0; t < TRIALS; t++) {
        memcpy(bad, pristine, len);
        char what[128];
        switch (t % 3) {
        case 0: { /* one bit flip, anywhere in the file on odd trials */
            size_t off = tree[rng_next(&seed) % n_tree] * PAGE + rng_next(&seed) % PAGE;
            if (t % 2)
                off = rng_next(&seed) % len;
            bad[off] ^= (uint8_t)(1u << (rng_next(&seed) % 8));
            snprintf(what, sizeof(what), "trial %d: bit flip at %zu (page %zu)", t, off,
                     off / PAGE);
            break;
        }
        case 1: { /* one page overwritten with random bytes */
            size_t pg = tree[rng_next(&seed) % n_tree];
            for (size_t k = 0; k < PAGE; k++)
                bad[pg * PAGE + k] = (uint8_t)rng_next(&seed);
            snprintf(what, sizeof(what), "trial %d: page %zu overwritten", t, pg);
            break;
        }
        default: { /* 32 random bytes flipped in one page (a torn or scribbled write) */
            size_t pg = tree[rng_next(&seed) % n_tree];
            for (int k = 0; k < 32; k++)
                bad[pg * PAGE + rng_next(&seed) % PAGE] ^= (uint8_t)(1 + rng_next(&seed) % 255);
            snprintf(what, sizeof(what), "trial %d: 32 bytes scribbled in page %zu", t, pg);
            break;
        }
        }
        write_file(path, bad, len);
        int rc = kv_it_server_start(&s, 15000);
        if (rc == 0) {
            served++;
            int good = check_reads(&s, what);
            cr_assert(kv_it_server_alive(&s), "%s: kvd died while serving", what);
            cr_log_info("%s: started, %d values served correctly", what, good);
            cr_assert_eq(kv_it_server_stop(&s, 5000), 0);
        } else {
            char *log = srv_log(&s);
            cr_assert_eq(rc, -ECHILD, "%s: kvd neither started nor exited (hang?): %d", what, rc);
            cr_assert(strstr(log, "kvd: refusing to start") ||
                          strstr(log, "cannot open data dir") || strstr(log, "kvd: startup failed"),
                      "%s: kvd exited without a clear message (crash?); log:\n%s", what, log);
            cr_log_info("%s: refused: %.300s", what, strstr(log, "kvd: "));
            free(log);
            refused++;
        }
    }
    cr_log_info("%d trials: %d refused, %d served", TRIALS, refused, served);
    cr_expect_gt(refused, 0, "the startup check must catch some of the corruptions");
    free(tree);
    free(bad);
    free(pristine);
    kv_it_server_destroy(&s);
}
