/*
 * ops_snapshot: Operations against real kvd processes.
 *  - etcdctl 3.4 `snapshot save` works against kvd and its `snapshot status` reads the file
 *    (an etcd 3.4 snapshot, bbolt): kvctl's status prints the same hash, revision and keys.
 *  - kvctl snapshot save/status/restore round trip: the restored member runs under new member
 *    and cluster ids with every key (same revisions), the compaction point and the leases,
 *    and the same Hash.
 *  - A corrupted or truncated snapshot is refused by restore.
 *  - Maintenance.Hash is stable without writes and changes with them.
 *  - Snapshots taken while writes and a keepalive stream go on do not stall them.
 *  - Auto-compaction (revision and periodic modes) compacts; bad flags refuse to start.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "grpc_raw.h"
#include "harness.h"
#include "ka_stream.h"
#include "kvt_util.h"
#include "leaseint_util.h"
#include "rpc.pb-c.h"

#include <openssl/sha.h>

#if defined(__SANITIZE_ADDRESS__)
#define OPS_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define OPS_ASAN 1
#endif
#endif
#ifndef OPS_ASAN
#define OPS_ASAN 0
#endif

static char kvctl_bin[4096], etcdctl_bin[4096];

static void bins(void)
{
    cr_assert_eq(kv_it_kvctl_bin(kvctl_bin, sizeof kvctl_bin), 0, "kvctl not built: %s", kvctl_bin);
    cr_assert_eq(kv_it_etcdctl_bin(etcdctl_bin, sizeof etcdctl_bin), 0, "no etcdctl: %s",
                 etcdctl_bin);
}

static void start(kv_it_server *s, const char *const *extra)
{
    cr_assert_eq(kv_it_server_init(s, KV_IT_KVD, extra), 0);
    cr_assert_eq(kv_it_server_start(s, 20000), 0, "kvd did not start");
}

/* Puts n keys "k%07zu" with vsize-byte values, 128 per Txn. */
static void load(kv_it_grpc *c, size_t n, size_t vsize, unsigned round)
{
    enum { B = 128 };
    char keys[B][32];
    char *vals = malloc(B * (vsize + 1));
    Etcdserverpb__PutRequest puts[B];
    Etcdserverpb__RequestOp ops[B], *opp[B];
    for (size_t i = 0; i < n;) {
        size_t m = 0;
        for (; m < B && i < n; m++, i++) {
            snprintf(keys[m], sizeof keys[m], "k%07zu", i);
            char *v = vals + m * (vsize + 1);
            for (size_t j = 0; j < vsize; j++)
                v[j] = (char)('a' + (i * 7 + j + round) % 26);
            etcdserverpb__put_request__init(&puts[m]);
            puts[m].key.data = (uint8_t *)keys[m];
            puts[m].key.len = strlen(keys[m]);
            puts[m].value.data = (uint8_t *)v;
            puts[m].value.len = vsize;
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
        etcdserverpb__txn_request__pack(&t, buf);
        size_t rlen = 0;
        int st = -1;
        char msg[128];
        int rc = kv_it_grpc_call(c, "/etcdserverpb.KV/Txn", buf, len, &resp, &rlen, 30000, &st, msg,
                                 sizeof msg);
        free(buf);
        free(resp);
        cr_assert_eq(rc, 0, "load txn: %d %s", rc, msg);
    }
    free(vals);
}

static int call(kv_it_grpc *c, const char *method, const ProtobufCMessage *req,
                const ProtobufCMessageDescriptor *rd, ProtobufCMessage **out, char *msg, size_t cap)
{
    size_t len = protobuf_c_message_get_packed_size(req);
    uint8_t *buf = malloc(len ? len : 1), *resp = NULL;
    protobuf_c_message_pack(req, buf);
    size_t rlen = 0;
    int st = -1;
    int rc = kv_it_grpc_call(c, method, buf, len, &resp, &rlen, 30000, &st, msg, cap);
    free(buf);
    if (rc == 0) {
        *out = protobuf_c_message_unpack(rd, NULL, rlen, resp);
        rc = *out ? 0 : -EPROTO;
    }
    free(resp);
    return rc;
}

static void hash(kv_it_grpc *c, uint32_t *h, int64_t *rev)
{
    Etcdserverpb__HashRequest req = ETCDSERVERPB__HASH_REQUEST__INIT;
    Etcdserverpb__HashResponse *r = NULL;
    char msg[256] = "";
    int rc =
        call(c, "/etcdserverpb.Maintenance/Hash", &req.base,
             &etcdserverpb__hash_response__descriptor, (ProtobufCMessage **)&r, msg, sizeof msg);
    cr_assert_eq(rc, 0, "Hash: %d %s", rc, msg);
    *h = r->hash;
    *rev = r->header->revision;
    etcdserverpb__hash_response__free_unpacked(r, NULL);
}

static Etcdserverpb__StatusResponse *status(kv_it_grpc *c)
{
    Etcdserverpb__StatusRequest req = ETCDSERVERPB__STATUS_REQUEST__INIT;
    Etcdserverpb__StatusResponse *r = NULL;
    char msg[256] = "";
    int rc =
        call(c, "/etcdserverpb.Maintenance/Status", &req.base,
             &etcdserverpb__status_response__descriptor, (ProtobufCMessage **)&r, msg, sizeof msg);
    cr_assert_eq(rc, 0, "Status: %d %s", rc, msg);
    return r;
}

static Etcdserverpb__RangeResponse *range_all(kv_it_grpc *c)
{
    Etcdserverpb__RangeRequest req = ETCDSERVERPB__RANGE_REQUEST__INIT;
    req.key.data = (uint8_t *)"\0";
    req.key.len = 1;
    req.range_end.data = (uint8_t *)"\0";
    req.range_end.len = 1;
    Etcdserverpb__RangeResponse *r = NULL;
    char msg[256] = "";
    int rc = call(c, "/etcdserverpb.KV/Range", &req.base, &etcdserverpb__range_response__descriptor,
                  (ProtobufCMessage **)&r, msg, sizeof msg);
    cr_assert_eq(rc, 0, "Range: %d %s", rc, msg);
    return r;
}

static void compact(kv_it_grpc *c, int64_t rev)
{
    Etcdserverpb__CompactionRequest req = ETCDSERVERPB__COMPACTION_REQUEST__INIT;
    req.revision = rev;
    /* Physical: answered once the compacted revisions are gone. A compaction runs in steps
     * (docs/ARCHITECTURE.md "Compaction"), and Hash covers every stored record, so the Hash
     * compared with a snapshot's must be taken after the last step. */
    req.physical = 1;
    Etcdserverpb__CompactionResponse *r = NULL;
    char msg[256] = "";
    int rc = call(c, "/etcdserverpb.KV/Compact", &req.base,
                  &etcdserverpb__compaction_response__descriptor, (ProtobufCMessage **)&r, msg,
                  sizeof msg);
    cr_assert_eq(rc, 0, "Compact: %d %s", rc, msg);
    etcdserverpb__compaction_response__free_unpacked(r, NULL);
}

/* kvctl (or etcdctl) with --endpoints of s. */
static void ctl(const kv_it_server *s, const char *bin, kv_it_cmd_result *res, const char *a1,
                const char *a2, const char *a3, const char *a4)
{
    memset(res, 0, sizeof *res);
    cr_assert_eq(kv_it_ctl(s, bin, NULL, 60000, res, a1, a2, a3, a4, NULL), 0);
}

static int64_t json_int(const char *s, const char *field)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", field);
    const char *p = strstr(s, pat);
    cr_assert_not_null(p, "no %s in %s", field, s);
    return strtoll(p + strlen(pat), NULL, 10);
}

static void flip_byte(const char *path, off_t off)
{
    int fd = open(path, O_RDWR);
    cr_assert_geq(fd, 0);
    uint8_t b;
    cr_assert_eq(pread(fd, &b, 1, off), 1);
    b ^= 0x5a;
    cr_assert_eq(pwrite(fd, &b, 1, off), 1);
    close(fd);
}

static off_t file_size(const char *path)
{
    struct stat st;
    cr_assert_eq(stat(path, &st), 0, "%s: %s", path, strerror(errno));
    return st.st_size;
}

Test(ops, snapshot_save_status_restore_round_trip, .timeout = 120)
{
    bins();
    kv_it_server s1, s2;
    start(&s1, NULL);
    kv_it_grpc *c = NULL;
    cr_assert_eq(kvli_connect(&s1, &c), 0);
    load(c, 3000, 40, 0);
    load(c, 1000, 40, 1); /* second versions of the first 1000 keys */
    char msg[256];
    int64_t lease = 0, ttl = 0;
    cr_assert_eq(kvli_grant(c, 600, 0, &lease, &ttl, msg, sizeof msg), 0, "%s", msg);
    for (int i = 0; i < 10; i++) {
        char k[32];
        snprintf(k, sizeof k, "leased/%d", i);
        cr_assert_eq(kvli_put(c, k, "x", lease, msg, sizeof msg), 0, "%s", msg);
    }
    Etcdserverpb__StatusResponse *st1 = status(c);
    compact(c, st1->header->revision - 5);
    uint32_t h1;
    int64_t rev1;
    hash(c, &h1, &rev1);

    char f1[2048], f2[2048];
    snprintf(f1, sizeof f1, "%s/etcdctl.db", s1.dir);
    snprintf(f2, sizeof f2, "%s/kvctl.db", s1.dir);
    kv_it_cmd_result r;
    /* etcdctl 3.4 snapshot save against kvd */
    ctl(&s1, etcdctl_bin, &r, "snapshot", "save", f1, NULL);
    cr_assert_eq(r.exit_code, 0, "etcdctl snapshot save: %s", r.err);
    cr_assert_not_null(strstr(r.out, "Snapshot saved at"), "%s", r.out);
    kv_it_cmd_result_free(&r);
    cr_assert_eq(file_size(f1) % 512, 32, "no SHA-256 trailer");
    /* the snapshot is an etcd 3.4 one (bbolt): etcdctl's status reads it, kvctl's agrees */
    memset(&r, 0, sizeof r);
    const char *argv_est[] = {etcdctl_bin, "snapshot", "status", "-w", "json", f1, NULL};
    cr_assert_eq(kv_it_run(argv_est, NULL, NULL, 0, 30000, &r), 0);
    cr_assert_eq(r.exit_code, 0, "etcdctl snapshot status: %s", r.err);
    int64_t ehash = json_int(r.out, "hash"), ekeys = json_int(r.out, "totalKey");
    cr_assert_eq(json_int(r.out, "revision"), rev1, "%s", r.out);
    kv_it_cmd_result_free(&r);
    const char *argv_st[] = {kvctl_bin, "snapshot", "status", "-w", "json", f1, NULL};
    cr_assert_eq(kv_it_run(argv_st, NULL, NULL, 0, 30000, &r), 0);
    cr_assert_eq(r.exit_code, 0, "kvctl snapshot status: %s", r.err);
    cr_assert_eq(json_int(r.out, "hash"), ehash, "kvctl %s vs etcdctl hash %lld", r.out,
                 (long long)ehash);
    cr_assert_eq(json_int(r.out, "totalKey"), ekeys, "%s", r.out);
    cr_assert_eq(json_int(r.out, "revision"), rev1);
    kv_it_cmd_result_free(&r);
    /* kvctl save */
    ctl(&s1, kvctl_bin, &r, "snapshot", "save", f2, NULL);
    cr_assert_eq(r.exit_code, 0, "kvctl snapshot save: %s", r.err);
    cr_assert_eq(strcmp(r.out, "") != 0 && strstr(r.out, "Snapshot saved at ") == r.out, 1, "%s",
                 r.out);
    kv_it_cmd_result_free(&r);
    const char *argv_st2[] = {kvctl_bin, "snapshot", "status", "-w", "json", f2, NULL};
    cr_assert_eq(kv_it_run(argv_st2, NULL, NULL, 0, 30000, &r), 0);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    cr_assert_eq(json_int(r.out, "hash"), ehash, "%s", r.out); /* the same state */
    kv_it_cmd_result_free(&r);

    /* restore into a new member of a new cluster */
    const char *extra2[] = {"--initial-cluster-token=ops-restored", NULL};
    cr_assert_eq(kv_it_server_init(&s2, KV_IT_KVD, extra2), 0);
    rmdir(s2.data_dir);
    char ic[256], ap[128], dd[4200];
    snprintf(ic, sizeof ic, "--initial-cluster=kvit=http://127.0.0.1:%u", s2.peer_port);
    snprintf(ap, sizeof ap, "--initial-advertise-peer-urls=http://127.0.0.1:%u", s2.peer_port);
    snprintf(dd, sizeof dd, "--data-dir=%s", s2.data_dir);
    const char *argv_rs[] = {kvctl_bin,
                             "snapshot",
                             "restore",
                             f1,
                             "--name=kvit",
                             ic,
                             ap,
                             dd,
                             "--initial-cluster-token=ops-restored",
                             NULL};
    cr_assert_eq(kv_it_run(argv_rs, NULL, NULL, 0, 60000, &r), 0);
    cr_assert_eq(r.exit_code, 0, "kvctl snapshot restore: %s", r.err);
    kv_it_cmd_result_free(&r);
    /* restoring again over an existing dir is refused */
    cr_assert_eq(kv_it_run(argv_rs, NULL, NULL, 0, 60000, &r), 0);
    cr_assert_neq(r.exit_code, 0);
    cr_assert_not_null(strstr(r.err, "exists"), "%s", r.err);
    kv_it_cmd_result_free(&r);
    cr_assert_eq(kv_it_server_start(&s2, 20000), 0, "kvd did not start on the restored dir");
    kv_it_grpc *c2 = NULL;
    cr_assert_eq(kvli_connect(&s2, &c2), 0);
    Etcdserverpb__StatusResponse *st2 = status(c2);
    cr_assert_neq(st2->header->member_id, st1->header->member_id, "same member id");
    cr_assert_neq(st2->header->cluster_id, st1->header->cluster_id, "same cluster id");
    cr_assert_eq(st2->header->revision, rev1);
    Etcdserverpb__RangeResponse *a = range_all(c), *b = range_all(c2);
    cr_assert_eq(a->n_kvs, 3010);
    cr_assert_eq(b->n_kvs, a->n_kvs);
    for (size_t i = 0; i < a->n_kvs; i++) {
        Mvccpb__KeyValue *x = a->kvs[i], *y = b->kvs[i];
        cr_assert(x->key.len == y->key.len && memcmp(x->key.data, y->key.data, x->key.len) == 0);
        cr_assert(x->value.len == y->value.len &&
                  memcmp(x->value.data, y->value.data, x->value.len) == 0);
        cr_assert_eq(x->create_revision, y->create_revision);
        cr_assert_eq(x->mod_revision, y->mod_revision);
        cr_assert_eq(x->version, y->version);
        cr_assert_eq(x->lease, y->lease);
    }
    int64_t left = 0;
    size_t nk = 0;
    cr_assert_eq(kvli_ttl(c2, lease, 1, &left, NULL, &nk, msg, sizeof msg), 0, "%s", msg);
    cr_assert_gt(left, 0, "lease lost");
    cr_assert_eq(nk, 10, "lease keys");
    uint32_t h2;
    int64_t rev2;
    hash(c2, &h2, &rev2);
    cr_assert_eq(h2, h1, "restored store hashes differently");
    /* the compaction point is kept */
    kv_it_cmd_result_free(&r);
    char revarg[64];
    snprintf(revarg, sizeof revarg, "--rev=%lld", (long long)(st1->header->revision - 6));
    ctl(&s2, etcdctl_bin, &r, "get", "k0000001", revarg, NULL);
    cr_assert_neq(r.exit_code, 0);
    cr_assert_not_null(strstr(r.err, "compacted"), "%s", r.err);
    kv_it_cmd_result_free(&r);
    etcdserverpb__range_response__free_unpacked(a, NULL);
    etcdserverpb__range_response__free_unpacked(b, NULL);
    etcdserverpb__status_response__free_unpacked(st1, NULL);
    etcdserverpb__status_response__free_unpacked(st2, NULL);
    kv_it_grpc_close(c);
    kv_it_grpc_close(c2);
    kv_it_server_destroy(&s1);
    kv_it_server_destroy(&s2);
}

Test(ops, corrupt_snapshot_is_refused, .timeout = 60)
{
    bins();
    kv_it_server s;
    start(&s, NULL);
    kv_it_grpc *c = NULL;
    cr_assert_eq(kvli_connect(&s, &c), 0);
    load(c, 500, 40, 0);
    char f[2048], dir[2100], dd[2200];
    snprintf(f, sizeof f, "%s/snap.db", s.dir);
    kv_it_cmd_result r;
    ctl(&s, kvctl_bin, &r, "snapshot", "save", f, NULL);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    kv_it_cmd_result_free(&r);
    off_t size = file_size(f);
    flip_byte(f, size / 2);
    snprintf(dir, sizeof dir, "%s/restored", s.dir);
    snprintf(dd, sizeof dd, "--data-dir=%s", dir);
    const char *argv_rs[] = {kvctl_bin, "snapshot", "restore", f, dd, NULL};
    cr_assert_eq(kv_it_run(argv_rs, NULL, NULL, 0, 30000, &r), 0);
    cr_assert_neq(r.exit_code, 0, "a corrupt snapshot was restored");
    cr_assert_not_null(strstr(r.err, "corrupt"), "%s", r.err);
    kv_it_cmd_result_free(&r);
    cr_assert_neq(access(dir, F_OK), 0, "restore left a data dir behind");
    /* truncated (no checksum any more) */
    flip_byte(f, size / 2);
    cr_assert_eq(truncate(f, size - 7), 0);
    cr_assert_eq(kv_it_run(argv_rs, NULL, NULL, 0, 30000, &r), 0);
    cr_assert_neq(r.exit_code, 0, "a truncated snapshot was restored");
    cr_assert_not_null(strstr(r.err, "hash"), "%s", r.err);
    kv_it_cmd_result_free(&r);
    cr_assert_neq(access(dir, F_OK), 0);
    /* a file with a valid checksum that is not a kvd store */
    uint8_t junk[8192 + SHA256_DIGEST_LENGTH];
    cr_assert_eq(kv_it_random_bytes(junk, 8192), 0);
    SHA256(junk, 8192, junk + 8192);
    FILE *fp = fopen(f, "wb");
    cr_assert_not_null(fp);
    cr_assert_eq(fwrite(junk, 1, sizeof junk, fp), sizeof junk);
    fclose(fp);
    cr_assert_eq(kv_it_run(argv_rs, NULL, NULL, 0, 30000, &r), 0);
    cr_assert_neq(r.exit_code, 0, "a non-kvd file was restored");
    cr_assert_not_null(strstr(r.err, "not a kvd snapshot"), "%s", r.err);
    kv_it_cmd_result_free(&r);
    cr_assert_neq(access(dir, F_OK), 0, "restore left a data dir behind");
    kv_it_grpc_close(c);
    kv_it_server_destroy(&s);
}

Test(ops, hash_changes_with_writes, .timeout = 60)
{
    kv_it_server s;
    start(&s, NULL);
    kv_it_grpc *c = NULL;
    cr_assert_eq(kvli_connect(&s, &c), 0);
    char msg[256];
    cr_assert_eq(kvli_put(c, "a", "1", 0, msg, sizeof msg), 0, "%s", msg);
    uint32_t h1, h2, h3;
    int64_t r1, r2, r3;
    hash(c, &h1, &r1);
    hash(c, &h2, &r2);
    cr_assert_eq(h1, h2, "hash not stable without writes");
    cr_assert_eq(r1, r2);
    cr_assert_eq(kvli_put(c, "a", "2", 0, msg, sizeof msg), 0, "%s", msg);
    hash(c, &h3, &r3);
    cr_assert_neq(h3, h1, "hash did not change with a write");
    cr_assert_eq(r3, r1 + 1);
    kv_it_grpc_close(c);
    kv_it_server_destroy(&s);
}

/* ---- snapshot under load ---- */

typedef struct writer {
    const kv_it_server *s;
    atomic_int stop;
    uint64_t puts, max_ms;
    int err;
} writer;

static void *writer_main(void *p)
{
    writer *w = p;
    kv_it_grpc *c = NULL;
    if (kvli_connect(w->s, &c) != 0) {
        w->err = 1;
        return NULL;
    }
    char msg[128], key[32];
    while (!atomic_load(&w->stop)) {
        snprintf(key, sizeof key, "w%06llu", (unsigned long long)(w->puts % 1000));
        uint64_t t0 = kv_it_now_ms();
        if (kvli_put(c, key, "value", 0, msg, sizeof msg) != 0) {
            w->err = 1;
            break;
        }
        uint64_t d = kv_it_now_ms() - t0;
        if (d > w->max_ms)
            w->max_ms = d;
        w->puts++;
    }
    kv_it_grpc_close(c);
    return NULL;
}

typedef struct snapper {
    const kv_it_server *s;
    int rounds, ok, tried;
    atomic_int done;
    uint64_t ms;
    char why[512]; /* the first failed save: how long it took, its exit and stderr's tail */
} snapper;

static void *snapper_main(void *p)
{
    snapper *sn = p;
    char f[2048];
    snprintf(f, sizeof f, "%s/load.db", sn->s->dir);
    uint64_t t0 = kv_it_now_ms();
    if (getenv("KV_OPS_NO_SNAPSHOT")) { /* baseline for the figures: the same 2 s, no snapshot */
        kvli_sleep_ms(2000);
        sn->ms = kv_it_now_ms() - t0;
        atomic_store(&sn->done, 1);
        return NULL;
    }
    /* at least `rounds` snapshots, and for at least 2 s */
    for (int i = 0; i < sn->rounds || kv_it_now_ms() - t0 < 2000; i++) {
        kv_it_cmd_result r;
        memset(&r, 0, sizeof r);
        uint64_t s0 = kv_it_now_ms();
        if (kv_it_ctl(sn->s, kvctl_bin, NULL, 60000, &r, "--command-timeout=60s", "snapshot",
                      "save", f, NULL) == 0 &&
            r.exit_code == 0)
            sn->ok++;
        else if (sn->why[0] == 0) {
            size_t el = r.err ? strlen(r.err) : 0;
            snprintf(sn->why, sizeof sn->why, "save %d after %llu ms, exit %d%s: %s", i,
                     (unsigned long long)(kv_it_now_ms() - s0), r.exit_code,
                     r.timed_out ? " (killed at the timeout)" : "",
                     el > 400 ? r.err + el - 400 : (r.err ? r.err : ""));
        }
        kv_it_cmd_result_free(&r);
        sn->tried++;
    }
    sn->ms = kv_it_now_ms() - t0;
    atomic_store(&sn->done, 1);
    return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* KV_TEST_SERVER=etcd runs this one against etcd (same client, same load) for comparison. */
Test(ops, snapshot_does_not_stall_writes_or_keepalives, .timeout = 180)
{
    bins();
    kv_it_server s;
    cr_assert_eq(kv_it_server_init(&s, kv_it_kind_from_env(), NULL), 0);
    cr_assert_eq(kv_it_server_start(&s, 20000), 0, "server did not start");
    kv_it_grpc *c = NULL;
    cr_assert_eq(kvli_connect(&s, &c), 0);
    size_t n = OPS_ASAN ? 20000 : 60000;
    const char *e = getenv("KV_OPS_KEYS");
    if (e && atol(e) > 0)
        n = (size_t)atol(e);
    uint64_t t0 = kv_it_now_ms();
    load(c, n, 200, 0);
    cr_log_info("loaded %zu keys in %llu ms", n, (unsigned long long)(kv_it_now_ms() - t0));
    char msg[256];
    int64_t id = 0, ttl = 0;
    cr_assert_eq(kvli_grant(c, 2, 0, &id, &ttl, msg, sizeof msg), 0, "%s", msg);
    kvli_ka *ka = NULL;
    cr_assert_eq(kvli_ka_open(&ka, s.client_port, 5000), 0);

    writer w = {.s = &s};
    snapper sn = {.s = &s, .rounds = 3};
    pthread_t tw, ts;
    pthread_create(&tw, NULL, writer_main, &w);
    pthread_create(&ts, NULL, snapper_main, &sn);
    enum { MAX = 2000 };
    static uint64_t lat[MAX];
    int n_lat = 0, dead = 0;
    while (!atomic_load(&sn.done) && n_lat < MAX) {
        uint64_t s0 = kv_it_now_ms();
        int rc = kvli_ka_send(ka, id, 5000);
        int64_t rid = 0, rttl = 0;
        if (rc == 0)
            rc = kvli_ka_recv(ka, &rid, &rttl, 5000);
        uint64_t d = kv_it_now_ms() - s0;
        cr_assert_eq(rc, 0, "renewal not answered within 5 s during a snapshot (%d)", rc);
        lat[n_lat++] = d;
        if (rttl <= 0)
            dead++;
        if (d < 50)
            kvli_sleep_ms((unsigned)(50 - d));
    }
    uint64_t puts_during = w.puts;
    atomic_store(&w.stop, 1);
    pthread_join(ts, NULL);
    pthread_join(tw, NULL);
    kvli_ka_close(ka);
    if (sn.ok != sn.tried) { /* what the member says about its snapshots, for the failure */
        char *slog = NULL;
        kv_it_server_log(&s, &slog);
        for (char *l = slog ? strstr(slog, "snapshot") : NULL; l; l = strstr(l + 1, "snapshot")) {
            char *b = l, *e = strchr(l, '\n');
            while (b > slog && b[-1] != '\n')
                b--;
            cr_log_info("member: %.*s", (int)(e ? e - b : (long)strlen(b)), b);
            if (!e)
                break;
            l = e;
        }
        free(slog);
    }
    cr_assert_eq(sn.ok, sn.tried, "snapshot save failed (%d of %d): %s", sn.tried - sn.ok, sn.tried,
                 sn.why);
    if (sn.tried == 0) {
        cr_log_info("baseline without snapshots: %llu puts in %llu ms, put max %llu ms",
                    (unsigned long long)w.puts, (unsigned long long)sn.ms,
                    (unsigned long long)w.max_ms);
        kv_it_grpc_close(c);
        kv_it_server_destroy(&s);
        return;
    }
    cr_assert_eq(w.err, 0, "a put failed during the snapshots");
    cr_assert_gt(n_lat, 0);
    qsort(lat, (size_t)n_lat, sizeof lat[0], cmp_u64);
    uint64_t p99 = lat[(n_lat * 99 + 99) / 100 - 1];
    char *log = NULL;
    kv_it_server_log(&s, &log);
    const char *mb = log ? strstr(log, "kvd: snapshot: sent") : NULL;
    char snapf[2048];
    snprintf(snapf, sizeof snapf, "%s/load.db", s.dir);
    double mbytes = (double)file_size(snapf) / 1e6;
    cr_log_info("%s: %d snapshots of %.1f MB in %llu ms (%.1f MB/s end to end; %.80s); %llu puts "
                "meanwhile, put max %llu ms; keepalive p50 %llu ms p99 %llu ms max %llu ms (%d "
                "renewals)",
                kv_it_kind_name(s.kind), sn.ok, mbytes, (unsigned long long)sn.ms,
                sn.ms ? mbytes * sn.ok * 1000.0 / (double)sn.ms : 0.0, mb ? mb : "?",
                (unsigned long long)puts_during, (unsigned long long)w.max_ms,
                (unsigned long long)lat[n_lat / 2], (unsigned long long)p99,
                (unsigned long long)lat[n_lat - 1], n_lat);
    free(log);
    cr_assert_eq(dead, 0, "a renewal answered TTL 0");
    cr_assert_gt(puts_during, 0, "no write completed during the snapshots");
    uint64_t bound = OPS_ASAN ? 300 : 100;
    cr_assert_lt(p99, bound, "keepalive p99 %llu ms during snapshots (bound %llu ms)",
                 (unsigned long long)p99, (unsigned long long)bound);
    cr_assert_lt(w.max_ms, OPS_ASAN ? 3000 : 1000, "a put waited %llu ms during a snapshot",
                 (unsigned long long)w.max_ms);
    kv_it_grpc_close(c);
    kv_it_server_destroy(&s);
}

/* ---- starting kvctl while other threads allocate ---- */

#if OPS_ASAN
/* <sanitizer/allocator_interface.h>, which GCC 12 does not ship (its libasan has the call) */
int __sanitizer_install_malloc_and_free_hooks(void (*malloc_hook)(const volatile void *, size_t),
                                              void (*free_hook)(const volatile void *));

static pid_t hook_parent;
static atomic_int *hook_child_allocs; /* MAP_SHARED: counted by the forked children */

static void count_child_malloc(const volatile void *p, size_t n)
{
    (void)p;
    (void)n;
    if (hook_child_allocs && getpid() != hook_parent)
        atomic_fetch_add(hook_child_allocs, 1);
}

static void ignore_free(const volatile void *p)
{
    (void)p;
}

typedef struct churn {
    atomic_int stop;
} churn;

/* The writer's part in the snapshot test: allocations of many small size classes meanwhile. */
static void *churn_main(void *p)
{
    churn *ch = p;
    void *keep[64] = {0};
    for (size_t i = 0; !atomic_load(&ch->stop); i++) {
        free(keep[i % 64]);
        keep[i % 64] = malloc(16 + (i * 37) % 2048);
    }
    for (size_t i = 0; i < 64; i++)
        free(keep[i]);
    return NULL;
}
#endif

/* A command the tests start (tests/lib kvt_run, here with an environment to add, as kv_it_ctl
 * adds ETCDCTL_API) allocates nothing between the fork and the exec, so an allocator lock held
 * by another thread at the fork cannot stop it: under ASan such a child hung in putenv until
 * its 60 s kill (the snapshot test's "snapshot save" the member never saw). Before kvt_run
 * built the environment in the parent, this failed at the first command. */
Test(ops, commands_started_beside_allocating_threads_allocate_nothing_before_exec, .timeout = 120)
{
#if !OPS_ASAN
    cr_skip_test("ASan's allocator is the one that is not fork-safe (glibc's malloc is)");
#else
    bins();
    hook_parent = getpid();
    hook_child_allocs =
        mmap(NULL, sizeof(atomic_int), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(hook_child_allocs, MAP_FAILED);
    atomic_init(hook_child_allocs, 0);
    cr_assert_neq(__sanitizer_install_malloc_and_free_hooks(count_child_malloc, ignore_free), 0);
    churn ch = {0};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, churn_main, &ch), 0);
    const char *argv[] = {kvctl_bin, "version", NULL};
    const char *env[] = {"ETCDCTL_API=3", NULL};
    for (int i = 0; i < 10; i++) {
        kv_it_cmd_result r;
        int rc = kv_it_run(argv, env, NULL, 0, 30000, &r);
        int code = r.exit_code, timed_out = r.timed_out;
        kv_it_cmd_result_free(&r);
        cr_assert_eq(rc, 0);
        cr_assert_eq(timed_out, 0, "kvctl %d did not finish within 30 s (child hung before exec?)",
                     i);
        cr_assert_eq(code, 0, "kvctl version %d: exit %d", i, code);
        cr_assert_eq(atomic_load(hook_child_allocs), 0,
                     "the forked child allocated %d time(s) before exec (spawn %d)",
                     atomic_load(hook_child_allocs), i);
    }
    atomic_store(&ch.stop, 1);
    pthread_join(t, NULL);
#endif
}

/* ---- auto-compaction ---- */

static void wait_compacted(kv_it_server *s, const char *key, int64_t rev, uint32_t timeout_ms)
{
    char revarg[64];
    snprintf(revarg, sizeof revarg, "--rev=%lld", (long long)rev);
    uint64_t deadline = kv_it_now_ms() + timeout_ms;
    for (;;) {
        kv_it_cmd_result r;
        ctl(s, etcdctl_bin, &r, "get", key, revarg, NULL);
        int compacted = r.exit_code != 0 && strstr(r.err, "compacted") != NULL;
        kv_it_cmd_result_free(&r);
        if (compacted)
            return;
        cr_assert_lt(kv_it_now_ms(), deadline, "revision %lld not compacted after %u ms",
                     (long long)rev, timeout_ms);
        kvli_sleep_ms(100);
    }
}

Test(ops, auto_compaction_revision_mode, .timeout = 60)
{
    bins();
    kv_it_server s;
    const char *extra[] = {"--auto-compaction-mode=revision", "--auto-compaction-retention=5",
                           "--auto-compaction-interval=200ms", NULL};
    start(&s, extra);
    kv_it_grpc *c = NULL;
    cr_assert_eq(kvli_connect(&s, &c), 0);
    char msg[256];
    for (int i = 0; i < 30; i++)
        cr_assert_eq(kvli_put(c, "k", "v", 0, msg, sizeof msg), 0, "%s", msg);
    /* revision 31 now: the compactor keeps the last 5 (compacts at 26) */
    wait_compacted(&s, "k", 20, 10000);
    kv_it_cmd_result r;
    ctl(&s, etcdctl_bin, &r, "get", "k", "--rev=27", NULL);
    cr_assert_eq(r.exit_code, 0, "revision 27 must be kept: %s", r.err);
    kv_it_cmd_result_free(&r);
    double ok = 0;
    cr_assert_eq(kvli_metric(&s, "kvd_auto_compactions_total{result=\"ok\"}", &ok), 0);
    cr_assert_geq(ok, 1);
    char *log = NULL;
    kv_it_server_log(&s, &log);
    cr_assert_not_null(log);
    /* a slow build may compact once mid-load (at 23, say) before the final 26: any finish counts;
     * what matters is checked above (20 compacted, 27 kept) */
    cr_assert_not_null(strstr(log, "auto-compaction: finished at revision "), "%s", log);
    free(log);
    kv_it_grpc_close(c);
    kv_it_server_destroy(&s);
}

Test(ops, auto_compaction_periodic_mode, .timeout = 60)
{
    bins();
    kv_it_server s;
    const char *extra[] = {"--auto-compaction-mode=periodic", "--auto-compaction-retention=1s",
                           NULL};
    start(&s, extra);
    kv_it_grpc *c = NULL;
    cr_assert_eq(kvli_connect(&s, &c), 0);
    char msg[256];
    for (int i = 0; i < 10; i++)
        cr_assert_eq(kvli_put(c, "k", "v", 0, msg, sizeof msg), 0, "%s", msg);
    /* samples of ~1 s ago are compacted once 1 s has passed */
    wait_compacted(&s, "k", 5, 10000);
    kv_it_grpc_close(c);
    kv_it_server_destroy(&s);
}

Test(ops, bad_auto_compaction_flags_refuse_to_start, .timeout = 60)
{
    kv_it_server s;
    const char *extra[] = {"--auto-compaction-mode=revision", "--auto-compaction-retention=1h",
                           NULL};
    cr_assert_eq(kv_it_server_init(&s, KV_IT_KVD, extra), 0);
    cr_assert_neq(kv_it_server_start(&s, 10000), 0, "kvd started with a bad retention");
    char *log = NULL;
    kv_it_server_log(&s, &log);
    cr_assert_not_null(log);
    cr_assert_not_null(strstr(log, "auto-compaction-retention"), "%s", log);
    free(log);
    kv_it_server_destroy(&s);
}

/* Periodic --auto-compaction-retention is read as etcd 3.4 reads it (embed/etcd.go
 * parseCompactionRetention): a whole number is hours, anything else Go's time.ParseDuration.
 * The period shows in the start line: it is sampled every min(P, 1h)/10. "1m30s" and Go's two
 * micro signs are taken; what Go refuses is refused, also "1e3s" (strtod's exponent: 1000 s
 * before) and "1.5" (etcd: a missing unit). */
Test(ops, auto_compaction_retention_is_read_as_go_reads_a_duration, .timeout = 120)
{
    static const struct {
        const char *retention, *want; /* want NULL: refused */
    } cases[] = {
        {"1m30s", "retention 1m30s, check every 9000 ms"},
        {"1h30m", "retention 1h30m, check every 360000 ms"}, /* at most 1h/10 */
        {"2", "retention 2, check every 360000 ms"},         /* hours */
        {"45000000\xc2\xb5s", "retention 45000000\xc2\xb5s, check every 4500 ms"},
        {"1m29s1000000\xce\xbcs", "retention 1m29s1000000\xce\xbcs, check every 9000 ms"},
        {"1e3s", NULL},
        {"1.5", NULL},
        {"-1h", NULL},
        {"5124095576031", NULL}, /* hours past a uint64 of ms: it wrapped to ~34 minutes */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char flag[96];
        snprintf(flag, sizeof flag, "--auto-compaction-retention=%s", cases[i].retention);
        const char *extra[] = {"--auto-compaction-mode=periodic", flag, NULL};
        kv_it_server s;
        cr_assert_eq(kv_it_server_init(&s, KV_IT_KVD, extra), 0);
        int rc = kv_it_server_start(&s, 20000);
        char *log = NULL;
        kv_it_server_log(&s, &log);
        cr_assert_not_null(log);
        if (cases[i].want) {
            cr_assert_eq(rc, 0, "%s: kvd did not start: %s", flag, kvt_str_tail(log, 2000));
            cr_assert_not_null(strstr(log, cases[i].want), "%s: no '%s': %s", flag, cases[i].want,
                               kvt_str_tail(log, 2000));
        } else {
            char want[128];
            snprintf(want, sizeof want,
                     "invalid --auto-compaction-retention \"%s\" for mode periodic",
                     cases[i].retention);
            cr_assert_neq(rc, 0, "%s: kvd started", flag);
            cr_assert_not_null(strstr(log, want), "%s: %s", flag, kvt_str_tail(log, 2000));
        }
        free(log);
        kv_it_server_destroy(&s);
    }
}

/* ---- a slow snapshot reader: the server must wait (bounded buffer), not buffer the store ---- */

#include <openssl/evp.h>

/* A Snapshot stream on its own connection (tests/lib grpc_raw) with nghttp2's default 64 KiB
 * windows and a small socket receive buffer: while the test does not pump it, the server's
 * send buffer fills. */
typedef struct slow {
    kv_it_grpc *conn;
    kv_it_grpc_stream *st; /* owned by conn */
    FILE *out;
    int status;
    uint64_t bytes;
    uint8_t *all; /* every blob byte received, for the checksum (a few MB) */
} slow;

/* Opens a Snapshot stream on its own connection and sends the request; reads nothing. */
static void slow_open(slow *w, uint16_t port, const char *f)
{
    memset(w, 0, sizeof *w);
    w->status = -1;
    w->out = fopen(f, "wb");
    cr_assert_not_null(w->out);
    kv_it_grpc_opts o = {.rcvbuf = 16384};
    cr_assert_eq(kv_it_grpc_open_opts(&w->conn, "127.0.0.1", port, 5000, &o), 0);
    w->st = kv_it_grpc_stream_start(w->conn, "/etcdserverpb.Maintenance/Snapshot", NULL);
    cr_assert_not_null(w->st);
    cr_assert_eq(kv_it_grpc_send_msg(w->st, "", 0, 1), 0); /* an empty SnapshotRequest */
    cr_assert_eq(kv_it_grpc_flush(w->conn, 5000), 0);
}

/* The client goes away mid-stream. */
static void slow_abandon(slow *w)
{
    kv_it_grpc_close(w->conn);
    fclose(w->out);
}

static void slow_drain(slow *w)
{
    uint64_t deadline = kv_it_now_ms() + 15000;
    for (;;) {
        uint64_t t = kv_it_now_ms();
        cr_assert_lt(t, deadline, "snapshot stream stalled after %llu bytes",
                     (unsigned long long)w->bytes);
        uint8_t *m = NULL;
        size_t len = 0;
        int rc = kv_it_grpc_stream_recv(w->st, &m, &len, (uint32_t)(deadline - t));
        if (rc == -ECONNRESET && w->st->closed)
            break;
        cr_assert_eq(rc, 0, "snapshot stream: %d after %llu bytes", rc,
                     (unsigned long long)w->bytes);
        Etcdserverpb__SnapshotResponse *r = etcdserverpb__snapshot_response__unpack(NULL, len, m);
        free(m);
        cr_assert_not_null(r);
        fwrite(r->blob.data, 1, r->blob.len, w->out);
        uint8_t *grown = realloc(w->all, w->bytes + r->blob.len + 1);
        cr_assert_not_null(grown);
        w->all = grown;
        memcpy(w->all + w->bytes, r->blob.data, r->blob.len);
        w->bytes += r->blob.len;
        etcdserverpb__snapshot_response__free_unpacked(r, NULL);
    }
    w->status = w->st->grpc_status;
    slow_abandon(w);
}

Test(ops, slow_snapshot_reader_is_flow_controlled, .timeout = 120)
{
    kv_it_server s;
    const char *extra[] = {"--max-send-buffer-bytes=262144", NULL};
    start(&s, extra);
    kv_it_grpc *c = NULL;
    cr_assert_eq(kvli_connect(&s, &c), 0);
    load(c, 8000, 200, 0);
    char msg[256];
    int64_t id = 0, ttl = 0;
    cr_assert_eq(kvli_grant(c, 2, 0, &id, &ttl, msg, sizeof msg), 0, "%s", msg);
    kvli_ka *ka = NULL;
    cr_assert_eq(kvli_ka_open(&ka, s.client_port, 5000), 0);

    char f[2048];
    snprintf(f, sizeof f, "%s/slow.db", s.dir);
    slow w;
    slow_open(&w, s.client_port, f);

    /* do not read for 1.5 s: the server's send buffer fills; renewals must still be prompt */
    uint64_t worst = 0;
    for (int i = 0; i < 15; i++) {
        uint64_t s0 = kv_it_now_ms();
        int64_t rid = 0, rttl = 0;
        cr_assert_eq(kvli_ka_send(ka, id, 5000), 0);
        cr_assert_eq(kvli_ka_recv(ka, &rid, &rttl, 5000), 0);
        cr_assert_gt(rttl, 0);
        uint64_t d = kv_it_now_ms() - s0;
        if (d > worst)
            worst = d;
        if (d < 100)
            kvli_sleep_ms((unsigned)(100 - d));
    }
    double refused = 0, running = 0;
    cr_assert_eq(
        kvli_metric(&s, "kvd_grpc_requests_refused_total{reason=\"send_buffer\"}", &refused), 0);
    cr_assert_eq(kvli_metric(&s, "kvd_snapshots_running", &running), 0);
    cr_log_info("slow reader: keepalive worst %llu ms; send-buffer refusals %.0f",
                (unsigned long long)worst, refused);
    cr_assert_gt(refused, 0, "the send buffer never filled: the test did not exercise the wait");
    cr_assert_eq(running, 1);
    cr_assert_lt(worst, OPS_ASAN ? 300 : 100, "keepalive waited %llu ms",
                 (unsigned long long)worst);

    /* now read it all: the stream completes with a valid checksum */
    slow_drain(&w);
    cr_assert_eq(w.status, 0, "grpc-status %d", w.status);
    cr_assert_gt(w.bytes, 1 << 20);
    cr_assert_eq(w.bytes % 512, 32);
    uint8_t *all = w.all; /* checked from memory: no second open of the file */
    uint8_t sum[32];
    SHA256(all, w.bytes - 32, sum);
    cr_assert_eq(memcmp(sum, all + w.bytes - 32, 32), 0, "SHA-256 trailer mismatch");
    free(all);
    cr_assert_eq(kvli_metric(&s, "kvd_snapshots_running", &running), 0);
    cr_assert_eq(running, 0);
    kvli_ka_close(ka);
    kv_it_grpc_close(c);
    kv_it_server_destroy(&s);
}

Test(ops, concurrent_snapshots_are_bounded, .timeout = 120)
{
    bins();
    kv_it_server s;
    const char *extra[] = {"--max-snapshots=1", "--max-send-buffer-bytes=262144", NULL};
    start(&s, extra);
    kv_it_grpc *c = NULL;
    cr_assert_eq(kvli_connect(&s, &c), 0);
    load(c, 8000, 200, 0);
    char f[2048], f2[2100];
    snprintf(f, sizeof f, "%s/slow.db", s.dir);
    snprintf(f2, sizeof f2, "%s/second.db", s.dir);
    slow w;
    slow_open(&w, s.client_port, f);
    double running = 0;
    uint64_t deadline = kv_it_now_ms() + 10000;
    while (kvli_metric(&s, "kvd_snapshots_running", &running) != 0 || running < 1) {
        cr_assert_lt(kv_it_now_ms(), deadline, "the first snapshot did not start");
        kvli_sleep_ms(20);
    }
    kv_it_cmd_result r;
    ctl(&s, kvctl_bin, &r, "snapshot", "save", f2, NULL);
    cr_assert_neq(r.exit_code, 0, "a second snapshot ran beyond --max-snapshots=1");
    cr_assert_not_null(strstr(r.err, "too many requests"), "%s", r.err);
    kv_it_cmd_result_free(&r);
    double refused = 0;
    cr_assert_eq(kvli_metric(&s, "kvd_snapshots_refused_total", &refused), 0);
    cr_assert_eq(refused, 1);
    slow_drain(&w);
    free(w.all);
    cr_assert_eq(w.status, 0);
    ctl(&s, kvctl_bin, &r, "snapshot", "save", f2, NULL);
    cr_assert_eq(r.exit_code, 0, "snapshot after the first one ended: %s", r.err);
    kv_it_cmd_result_free(&r);
    kv_it_grpc_close(c);
    kv_it_server_destroy(&s);
}

Test(ops, cancelled_snapshot_releases_its_slot, .timeout = 120)
{
    bins();
    kv_it_server s;
    const char *extra[] = {"--max-snapshots=1", "--max-send-buffer-bytes=262144", NULL};
    start(&s, extra);
    kv_it_grpc *c = NULL;
    cr_assert_eq(kvli_connect(&s, &c), 0);
    load(c, 8000, 200, 0);
    char f[2048], f2[2100];
    snprintf(f, sizeof f, "%s/slow.db", s.dir);
    snprintf(f2, sizeof f2, "%s/after.db", s.dir);
    for (int round = 0; round < 2; round++) {
        slow w;
        slow_open(&w, s.client_port, f);
        double running = 0, refused = 0;
        uint64_t deadline = kv_it_now_ms() + 10000;
        /* round 0: the stream waits on a full send buffer; round 1: cancelled at once */
        while (round == 0 &&
               (kvli_metric(&s, "kvd_grpc_requests_refused_total{reason=\"send_buffer\"}",
                            &refused) != 0 ||
                refused < 1)) {
            cr_assert_lt(kv_it_now_ms(), deadline, "the stream never waited");
            kvli_sleep_ms(20);
        }
        slow_abandon(&w); /* the client goes away mid-stream */
        free(w.all);
        deadline = kv_it_now_ms() + 10000;
        while (kvli_metric(&s, "kvd_snapshots_running", &running) != 0 || running != 0) {
            cr_assert_lt(kv_it_now_ms(), deadline, "the cancelled snapshot kept its slot");
            kvli_sleep_ms(20);
        }
    }
    kv_it_cmd_result r;
    ctl(&s, kvctl_bin, &r, "snapshot", "save", f2, NULL);
    cr_assert_eq(r.exit_code, 0, "snapshot after cancelled ones: %s", r.err);
    kv_it_cmd_result_free(&r);
    cr_assert_eq(kv_it_server_alive(&s), 1);
    kv_it_grpc_close(c);
    kv_it_server_destroy(&s);
}
