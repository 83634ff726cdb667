/*
 * server_corrupt_pages: a data file with one page overwritten by random bytes is detected, not
 * served wrongly and not crashed on (docs/corruption.md, "The data file").
 *
 * A real data dir of 60,000 keys (about 20 MB, default flags) is built with kvd and stopped.
 * For seeds 1..12 a copy of data.mdb gets one page (chosen by the seed among all its pages,
 * most of them beyond the first 10,000 records of each tree) overwritten with random bytes;
 * kvd is started on it and, if it starts, serves a full Range of every key and a HashKV.
 * Each seed must end in one of:
 *   - kvd refuses to start, exiting normally (no signal) with "refusing to start" naming the
 *     corrupt file;
 *   - kvd serves the right data (the page was free): all 60,000 keys with their values and
 *     the pristine HashKV, and stops cleanly;
 *   - the reads fail with DATA_LOSS/INTERNAL, the CORRUPT alarm is raised, kvd stays up.
 * Before the full verifier, seeds reaching a tree page past the bounded startup walk killed
 * kvd inside liblmdb (mdb_assert abort or SIGSEGV) on the Range or the HashKV.
 *
 * kvd only (kvd's own data file).
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "grpc_raw.h"
#include "harness.h"
#include "rpc.pb-c.h"

#define N_KEYS 60000
#define TXN_PUTS 128
#define VAL_LEN 240
#define PAGE 4096
#define SEEDS 12

static void key_of(int i, char *out, size_t cap)
{
    snprintf(out, cap, "key-%06d", i);
}

static size_t val_of(int i, uint8_t *out)
{
    size_t n = VAL_LEN + (size_t)(i % 17);
    for (size_t k = 0; k < n; k++)
        out[k] = (uint8_t)('a' + (i * 131 + (int)k * 7) % 26);
    return n;
}

static void load(kv_it_grpc *c)
{
    static char keys[TXN_PUTS][32];
    static uint8_t vals[TXN_PUTS][VAL_LEN + 32];
    Etcdserverpb__PutRequest puts[TXN_PUTS];
    Etcdserverpb__RequestOp ops[TXN_PUTS], *opp[TXN_PUTS];
    for (int i = 0; i < N_KEYS;) {
        size_t n = 0;
        for (; n < TXN_PUTS && i < N_KEYS; n++, i++) {
            key_of(i, keys[n], sizeof keys[n]);
            etcdserverpb__put_request__init(&puts[n]);
            puts[n].key = (ProtobufCBinaryData){strlen(keys[n]), (uint8_t *)keys[n]};
            puts[n].value = (ProtobufCBinaryData){val_of(i, vals[n]), vals[n]};
            etcdserverpb__request_op__init(&ops[n]);
            ops[n].request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT;
            ops[n].request_put = &puts[n];
            opp[n] = &ops[n];
        }
        Etcdserverpb__TxnRequest t = ETCDSERVERPB__TXN_REQUEST__INIT;
        t.n_success = n;
        t.success = opp;
        size_t len = etcdserverpb__txn_request__get_packed_size(&t);
        uint8_t *buf = malloc(len), *resp = NULL;
        cr_assert(buf);
        etcdserverpb__txn_request__pack(&t, buf);
        size_t rlen = 0;
        int st = -1;
        char msg[128] = "";
        int rc = kv_it_grpc_call(c, "/etcdserverpb.KV/Txn", buf, len, &resp, &rlen, 30000, &st, msg,
                                 sizeof msg);
        cr_assert(rc == 0 && st == 0, "load txn at key %d: rc %d status %d %s", i, rc, st, msg);
        free(buf);
        free(resp);
    }
}

/* Outcome of one call against a possibly corrupt member. */
enum { RES_OK, RES_REFUSED, RES_DEAD };

/* Full Range of every key: RES_OK with all keys and values right; RES_REFUSED with DATA_LOSS or
 * INTERNAL; RES_DEAD on a transport error (the member died). A wrong answer fails the test. */
static int full_range(kv_it_server *s, const char *what)
{
    kv_it_grpc *c = NULL;
    if (kv_it_grpc_open(&c, "127.0.0.1", s->client_port, 5000) != 0)
        return RES_DEAD;
    uint8_t zero = 0;
    Etcdserverpb__RangeRequest r = ETCDSERVERPB__RANGE_REQUEST__INIT;
    r.key = (ProtobufCBinaryData){1, &zero};
    r.range_end = (ProtobufCBinaryData){1, &zero};
    uint8_t buf[64], *resp = NULL;
    size_t len = etcdserverpb__range_request__pack(&r, buf), rl = 0;
    char msg[256] = "";
    int st = -1;
    int rc = kv_it_grpc_call(c, "/etcdserverpb.KV/Range", buf, len, &resp, &rl, 60000, &st, msg,
                             sizeof msg);
    kv_it_grpc_close(c);
    if (rc != 0 && rc != KV_IT_GRPC_STATUS)
        return RES_DEAD;
    if (st != 0) {
        cr_assert(st == 15 || st == 13, "%s: Range: unexpected status %d %s", what, st, msg);
        cr_log_info("%s: Range refused: %d %s", what, st, msg);
        return RES_REFUSED;
    }
    Etcdserverpb__RangeResponse *res = etcdserverpb__range_response__unpack(NULL, rl, resp);
    free(resp);
    cr_assert(res, "%s: undecodable Range response", what);
    cr_assert_eq(res->n_kvs, (size_t)N_KEYS, "%s: Range served %zu keys of %d", what, res->n_kvs,
                 N_KEYS);
    uint8_t want[VAL_LEN + 32];
    for (int i = 0; i < N_KEYS; i++) {
        char key[32];
        key_of(i, key, sizeof key);
        size_t n = val_of(i, want);
        Mvccpb__KeyValue *kv = res->kvs[i];
        cr_assert(kv->key.len == strlen(key) && memcmp(kv->key.data, key, kv->key.len) == 0 &&
                      kv->value.len == n && memcmp(kv->value.data, want, n) == 0,
                  "%s: Range served a wrong key or value at %d", what, i);
    }
    etcdserverpb__range_response__free_unpacked(res, NULL);
    return RES_OK;
}

static int hash_kv(kv_it_server *s, uint32_t *hash, const char *what)
{
    kv_it_grpc *c = NULL;
    if (kv_it_grpc_open(&c, "127.0.0.1", s->client_port, 5000) != 0)
        return RES_DEAD;
    Etcdserverpb__HashKVRequest h = ETCDSERVERPB__HASH_KVREQUEST__INIT;
    uint8_t buf[32], *resp = NULL;
    size_t len = etcdserverpb__hash_kvrequest__pack(&h, buf), rl = 0;
    char msg[256] = "";
    int st = -1;
    int rc = kv_it_grpc_call(c, "/etcdserverpb.Maintenance/HashKV", buf, len, &resp, &rl, 60000,
                             &st, msg, sizeof msg);
    kv_it_grpc_close(c);
    if (rc != 0 && rc != KV_IT_GRPC_STATUS)
        return RES_DEAD;
    if (st != 0) {
        cr_assert(st == 15 || st == 13, "%s: HashKV: unexpected status %d %s", what, st, msg);
        return RES_REFUSED;
    }
    Etcdserverpb__HashKVResponse *r = etcdserverpb__hash_kvresponse__unpack(NULL, rl, resp);
    free(resp);
    cr_assert(r, "%s: undecodable HashKV response", what);
    *hash = r->hash;
    etcdserverpb__hash_kvresponse__free_unpacked(r, NULL);
    return RES_OK;
}

/* 1 if Maintenance.Alarm GET lists CORRUPT. */
static int corrupt_alarm(kv_it_server *s)
{
    kv_it_grpc *c = NULL;
    if (kv_it_grpc_open(&c, "127.0.0.1", s->client_port, 5000) != 0)
        return 0;
    Etcdserverpb__AlarmRequest a = ETCDSERVERPB__ALARM_REQUEST__INIT;
    uint8_t buf[32], *resp = NULL;
    size_t len = etcdserverpb__alarm_request__pack(&a, buf), rl = 0;
    char msg[256] = "";
    int st = -1, found = 0;
    int rc = kv_it_grpc_call(c, "/etcdserverpb.Maintenance/Alarm", buf, len, &resp, &rl, 10000, &st,
                             msg, sizeof msg);
    kv_it_grpc_close(c);
    if (rc == 0 && st == 0) {
        Etcdserverpb__AlarmResponse *r = etcdserverpb__alarm_response__unpack(NULL, rl, resp);
        for (size_t i = 0; r && i < r->n_alarms; i++)
            found |= r->alarms[i]->alarm == ETCDSERVERPB__ALARM_TYPE__CORRUPT;
        if (r)
            etcdserverpb__alarm_response__free_unpacked(r, NULL);
    }
    free(resp);
    return found;
}

static void note(char *list, size_t cap, uint64_t seed)
{
    size_t o = strlen(list);
    snprintf(list + o, cap - o, " %llu", (unsigned long long)seed);
}

static uint64_t rng_next(uint64_t *s)
{
    uint64_t x = *s; /* xorshift64*, deterministic */
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1DULL;
}

static uint8_t *slurp(const char *path, size_t *len)
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

static void spill(const char *path, const uint8_t *buf, size_t len)
{
    FILE *f = fopen(path, "wb");
    cr_assert(f, "open %s", path);
    cr_assert_eq(fwrite(buf, 1, len, f), len);
    cr_assert_eq(fclose(f), 0);
}

Test(server_corrupt_pages, one_random_page_is_refused_or_served_right_never_crashes, .timeout = 900)
{
    if (kv_it_kind_from_env() != KV_IT_KVD)
        cr_skip_test("kvd's own data file"); /* the suite also runs against etcd */
    kv_it_server s;
    cr_assert_eq(kv_it_server_init(&s, KV_IT_KVD, NULL), 0);
    cr_assert_eq(kv_it_server_start(&s, 30000), 0);
    kv_it_grpc *c = NULL;
    cr_assert_eq(kv_it_grpc_open(&c, "127.0.0.1", s.client_port, 5000), 0);
    load(c);
    kv_it_grpc_close(c);
    uint32_t pristine_hash = 0;
    cr_assert_eq(full_range(&s, "pristine"), RES_OK);
    cr_assert_eq(hash_kv(&s, &pristine_hash, "pristine"), RES_OK);
    cr_assert_eq(kv_it_server_stop(&s, 10000), 0);

    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/data.mdb", s.data_dir);
    size_t len;
    uint8_t *pristine = slurp(path, &len);
    cr_assert_geq(len, 4000 * PAGE, "fixture too small: %zu bytes", len);
    uint8_t *bad = malloc(len);
    cr_assert(bad);
    size_t pages = len / PAGE;
    int crashed = 0, refused = 0, served = 0, detected = 0;
    char crashed_seeds[128] = "";
    for (uint64_t seed = 1; seed <= SEEDS; seed++) {
        uint64_t r = seed * 0x9E3779B97F4A7C15ULL;
        memcpy(bad, pristine, len);
        size_t pg = 2 + (size_t)(rng_next(&r) % (pages - 2));
        uint8_t old_flags = pristine[pg * PAGE + 10];
        for (size_t k = 0; k < PAGE; k++)
            bad[pg * PAGE + k] = (uint8_t)rng_next(&r);
        spill(path, bad, len);
        char what[96];
        snprintf(what, sizeof what, "seed %llu: page %zu of %zu (flags were %#x)",
                 (unsigned long long)seed, pg, pages, old_flags);
        int rc = kv_it_server_start(&s, 60000);
        if (rc != 0) {
            char *log = NULL;
            cr_assert_eq(kv_it_server_log(&s, &log), 0);
            int status = s.proc.last_status;
            const char *why = strstr(log, "kvd: refusing to start");
            if (rc != -ECHILD || !WIFEXITED(status) || WEXITSTATUS(status) == 0 || !why) {
                size_t ll = strlen(log);
                cr_log_error("%s: kvd did not start and did not refuse cleanly (rc %d, status "
                             "%#x); log tail:\n%s",
                             what, rc, (unsigned)status, log + (ll > 1500 ? ll - 1500 : 0));
                note(crashed_seeds, sizeof crashed_seeds, seed);
                crashed++;
                kv_it_server_kill9(&s);
            } else {
                cr_log_info("%s: refused to start: %.200s", what, why);
                refused++;
            }
            free(log);
            continue;
        }
        uint32_t h = 0;
        int rr = full_range(&s, what);
        int hr = rr == RES_DEAD ? RES_DEAD : hash_kv(&s, &h, what);
        int alive = kv_it_server_alive(&s);
        if (rr == RES_DEAD || hr == RES_DEAD || !alive) {
            cr_log_error("%s: kvd died serving it (Range %d, HashKV %d)", what, rr, hr);
            crashed++;
            note(crashed_seeds, sizeof crashed_seeds, seed);
            kv_it_server_kill9(&s);
            continue;
        }
        if (hr == RES_OK && rr == RES_OK) {
            cr_assert_eq(h, pristine_hash, "%s: HashKV %u differs from the pristine %u", what, h,
                         pristine_hash);
            served++;
            cr_log_info("%s: served correctly", what);
        } else {
            cr_assert(corrupt_alarm(&s), "%s: reads refused but no CORRUPT alarm", what);
            detected++;
            cr_log_info("%s: reads refused, CORRUPT alarm raised", what);
        }
        cr_assert_eq(kv_it_server_stop(&s, 10000), 0, "%s: stop", what);
        cr_assert(WIFEXITED(s.proc.last_status), "%s: kvd ended by a signal at stop (%#x)", what,
                  s.proc.last_status);
    }
    cr_log_info("%d seeds: %d refused at start, %d served correctly, %d detected while serving, "
                "%d crashed",
                SEEDS, refused, served, detected, crashed);
    cr_assert_eq(crashed, 0, "kvd crashed on a corrupt page for seeds%s", crashed_seeds);
    free(bad);
    free(pristine);
    kv_it_server_destroy(&s);
}
