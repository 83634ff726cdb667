/*
 * ops_snapshot_corrupt: `kvctl snapshot status` and `kvctl snapshot restore` on truncated and
 * corrupt snapshot files (docs/corruption.md, "Snapshots"). A real snapshot of a kvd store
 * (3,000 keys; an etcd 3.4 snapshot, a bbolt file: bbolt/bbolt.h) is saved with kvctl, then
 * damaged:
 *  - truncated_snapshot_is_refused_without_a_signal: cut at several lengths (inside the meta
 *    pages, inside the data, just before the SHA-256 trailer) and given a fresh SHA-256 or
 *    none: status and restore (--skip-hash-check where there is no trailer) exit non-zero
 *    with a message naming the file, never by a signal (status used to die of SIGBUS), and
 *    restore leaves no data dir behind;
 *  - corrupt_page_with_recomputed_sha_is_refused: one B-tree page at a time (up to 40 of
 *    them) overwritten with random bytes and the SHA-256 recomputed, so the checksum cannot
 *    tell: status and restore never die by a signal; a file status refuses is never
 *    restored, and a file status accepts restores (the page was one no tree reaches: free
 *    pages left over from older transactions); most damaged pages are refused (before:
 *    restore accepted every one of them, writing data dirs that crash the member serving
 *    them, and status read them through LMDB unchecked).
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/sha.h>

#include "grpc_raw.h"
#include "harness.h"
#include "kvt_util.h"
#include "rpc.pb-c.h"

#define PAGE 4096
#define SHA_LEN 32

static char kvctl_bin[4096];

static void load(kv_it_grpc *c, size_t n)
{
    enum { B = 128 };
    char keys[B][32], vals[B][64];
    Etcdserverpb__PutRequest puts[B];
    Etcdserverpb__RequestOp ops[B], *opp[B];
    for (size_t i = 0; i < n;) {
        size_t m = 0;
        for (; m < B && i < n; m++, i++) {
            snprintf(keys[m], sizeof keys[m], "k%07zu", i);
            snprintf(vals[m], sizeof vals[m], "value-%zu-%0*d", i, (int)(i % 40), 0);
            etcdserverpb__put_request__init(&puts[m]);
            puts[m].key = (ProtobufCBinaryData){strlen(keys[m]), (uint8_t *)keys[m]};
            puts[m].value = (ProtobufCBinaryData){strlen(vals[m]), (uint8_t *)vals[m]};
            etcdserverpb__request_op__init(&ops[m]);
            ops[m].request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT;
            ops[m].request_put = &puts[m];
            opp[m] = &ops[m];
        }
        Etcdserverpb__TxnRequest t = ETCDSERVERPB__TXN_REQUEST__INIT;
        t.n_success = m;
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
        free(buf);
        free(resp);
        cr_assert(rc == 0 && st == 0, "load txn: %d %d %s", rc, st, msg);
    }
}

/* A saved snapshot: its bytes (data + SHA-256 trailer) and a scratch dir. */
typedef struct fixture {
    kv_it_server s;
    uint8_t *snap;
    size_t len; /* with the trailer */
    char file[2048], dir[2100];
} fixture;

static void fixture_make(fixture *f)
{
    cr_assert_eq(kv_it_kvctl_bin(kvctl_bin, sizeof kvctl_bin), 0, "kvctl not built: %s", kvctl_bin);
    cr_assert_eq(kv_it_server_init(&f->s, KV_IT_KVD, NULL), 0);
    cr_assert_eq(kv_it_server_start(&f->s, 20000), 0, "kvd did not start");
    kv_it_grpc *c = NULL;
    cr_assert_eq(kv_it_grpc_open(&c, "127.0.0.1", f->s.client_port, 5000), 0);
    load(c, 3000);
    kv_it_grpc_close(c);
    snprintf(f->file, sizeof f->file, "%s/snap.db", f->s.dir);
    snprintf(f->dir, sizeof f->dir, "%s/restored", f->s.dir);
    kv_it_cmd_result r;
    cr_assert_eq(kv_it_ctl(&f->s, kvctl_bin, NULL, 60000, &r, "snapshot", "save", f->file, NULL),
                 0);
    cr_assert_eq(r.exit_code, 0, "kvctl snapshot save: %s", r.err);
    kv_it_cmd_result_free(&r);
    cr_assert_eq(kv_it_server_stop(&f->s, 10000), 0);
    FILE *fp = fopen(f->file, "rb");
    cr_assert(fp);
    fseek(fp, 0, SEEK_END);
    f->len = (size_t)ftell(fp);
    fseek(fp, 0, SEEK_SET);
    f->snap = malloc(f->len);
    cr_assert(f->snap);
    cr_assert_eq(fread(f->snap, 1, f->len, fp), f->len);
    fclose(fp);
    cr_assert_eq(f->len % 512, SHA_LEN, "no SHA-256 trailer");
    cr_assert_geq(f->len, 20 * PAGE, "snapshot too small: %zu bytes", f->len);
}

static void fixture_free(fixture *f)
{
    free(f->snap);
    kv_it_server_destroy(&f->s);
}

/* Writes data (n bytes) to the snapshot file, followed by its SHA-256 when with_sha. */
static void write_snap(const fixture *f, const uint8_t *data, size_t n, int with_sha)
{
    FILE *fp = fopen(f->file, "wb");
    cr_assert(fp);
    cr_assert_eq(fwrite(data, 1, n, fp), n);
    if (with_sha) {
        uint8_t sum[SHA_LEN];
        SHA256(data, n, sum);
        cr_assert_eq(fwrite(sum, 1, SHA_LEN, fp), (size_t)SHA_LEN);
    }
    cr_assert_eq(fclose(fp), 0);
}

/* Runs kvctl snapshot status/restore on the file: returns its exit code; fails the test if
 * it was killed by a signal or timed out. out/err freed by the caller via r. */
static int run_ctl(const fixture *f, const char *verb, int skip_hash, kv_it_cmd_result *r,
                   const char *what)
{
    char dd[2200];
    snprintf(dd, sizeof dd, "--data-dir=%s", f->dir);
    const char *argv_st[] = {kvctl_bin, "snapshot", "status", f->file, NULL};
    const char *argv_rs[] = {kvctl_bin, "snapshot", "restore",
                             f->file,   dd,         skip_hash ? "--skip-hash-check" : NULL,
                             NULL};
    const char *const *argv = strcmp(verb, "status") == 0 ? argv_st : argv_rs;
    cr_assert_eq(kv_it_run(argv, NULL, NULL, 0, 60000, r), 0);
    cr_assert(!r->timed_out, "%s: kvctl snapshot %s hung", what, verb);
    cr_assert(r->exit_code < 128, "%s: kvctl snapshot %s was killed by signal %d; stderr: %s", what,
              verb, r->exit_code - 128, r->err);
    return r->exit_code;
}

static void expect_refused(const fixture *f, const char *verb, int skip_hash, const char *what)
{
    kv_it_cmd_result r;
    int code = run_ctl(f, verb, skip_hash, &r, what);
    cr_assert_neq(code, 0, "%s: kvctl snapshot %s accepted it: %s", what, verb, r.out);
    cr_assert(strstr(r.err, f->file) != NULL || strstr(r.err, "hash") != NULL,
              "%s: kvctl snapshot %s: no clear message: %s", what, verb, r.err);
    kv_it_cmd_result_free(&r);
    cr_assert_neq(access(f->dir, F_OK), 0, "%s: restore left a data dir behind", what);
}

Test(ops_snapshot_corrupt, truncated_snapshot_is_refused_without_a_signal, .timeout = 300)
{
    if (kv_it_kind_from_env() != KV_IT_KVD)
        cr_skip_test("kvd snapshots"); /* the suite also runs against etcd */
    fixture f;
    fixture_make(&f);
    size_t data = f.len - SHA_LEN;
    const size_t cuts[] = {0,        100,         PAGE + 100, 2 * PAGE,
                           data / 2, data - PAGE, data - 512, data - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        for (int with_sha = 0; with_sha <= 1; with_sha++) {
            char what[96];
            snprintf(what, sizeof what, "cut at %zu of %zu bytes, %s SHA-256", cuts[i], data,
                     with_sha ? "recomputed" : "no");
            write_snap(&f, f.snap, cuts[i], with_sha);
            expect_refused(&f, "status", 0, what);
            expect_refused(&f, "restore", !with_sha, what);
        }
    }
    /* the untouched snapshot still works */
    write_snap(&f, f.snap, data, 1);
    kv_it_cmd_result r;
    cr_assert_eq(run_ctl(&f, "status", 0, &r, "pristine"), 0, "%s", r.err);
    kv_it_cmd_result_free(&r);
    fixture_free(&f);
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

Test(ops_snapshot_corrupt, corrupt_page_with_recomputed_sha_is_refused, .timeout = 600)
{
    if (kv_it_kind_from_env() != KV_IT_KVD)
        cr_skip_test("kvd snapshots");
    fixture f;
    fixture_make(&f);
    size_t data = f.len - SHA_LEN, pages = data / PAGE;
    /* B-tree pages of the bbolt file (branch 0x01, leaf 0x02) by their header: page id (8),
     * flags (2). */
    size_t *tree = calloc(pages, sizeof *tree), n_tree = 0;
    cr_assert(tree);
    for (size_t pg = 2; pg < pages; pg++) {
        const uint8_t *h = f.snap + pg * PAGE;
        uint16_t fl = (uint16_t)(h[8] | h[9] << 8);
        uint64_t no = 0;
        memcpy(&no, h, sizeof no);
        if (no == pg && (fl == 0x01 || fl == 0x02))
            tree[n_tree++] = pg;
    }
    cr_assert_geq(n_tree, 8, "only %zu tree pages", n_tree);
    uint8_t *bad = malloc(data);
    cr_assert(bad);
    uint64_t seed = 0x736e6170ULL;
    size_t step = n_tree > 40 ? n_tree / 40 : 1;
    int refused = 0, accepted = 0;
    for (size_t t = 0; t < n_tree; t += step) {
        size_t pg = tree[t];
        memcpy(bad, f.snap, data);
        for (size_t k = 0; k < PAGE; k++)
            bad[pg * PAGE + k] = (uint8_t)rng_next(&seed);
        write_snap(&f, bad, data, 1);
        char what[64];
        snprintf(what, sizeof what, "page %zu of %zu overwritten", pg, pages);
        kv_it_cmd_result r;
        int st = run_ctl(&f, "status", 0, &r, what);
        kv_it_cmd_result_free(&r);
        if (st != 0) {
            expect_refused(&f, "restore", 0, what);
            refused++;
        } else {
            /* a page no tree reaches (left over from an older transaction) */
            cr_assert_eq(run_ctl(&f, "restore", 0, &r, what), 0,
                         "%s: status passes, restore "
                         "refuses: %s",
                         what, r.err);
            kv_it_cmd_result_free(&r);
            kvt_rmtree(f.dir);
            accepted++;
        }
    }
    cr_log_info("%d corrupt pages refused, %d unused pages accepted", refused, accepted);
    cr_assert_gt(refused, 0);
    /* how many B-tree-looking pages are free depends on the store's history: a bound, not a
     * count (48 refused, 9 free in the run of docs/corruption.md) */
    cr_assert_leq(accepted, refused, "too many corrupt pages accepted: %d of %d", accepted,
                  accepted + refused);
    free(bad);
    free(tree);
    fixture_free(&f);
}
