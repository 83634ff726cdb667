/*
 * fuzz_lmdb_pages: corrupt pages of a real kvd data file, then verify and read it
 * (docs/corruption.md, "The data file").
 *
 * Once per process a small real store is written through kvd's own apply path (keys with
 * several revisions, values large enough for LMDB overflow pages, one key with hundreds of
 * revisions (a duplicate sub-database in "kidx"), a long key, deletes, a compaction, leases)
 * and its data.mdb is kept in memory as the pristine image.
 *
 * Input: byte 0 = mode; bit 0: truncate the image by (byte 1 << 8 | byte 2) * 61 bytes.
 * Then records <page (1)> <offset (2, big endian)> <n (1)> <n bytes>: the bytes are written
 * at that offset of page (page % pages) of the image (the meta pages included), clipped to
 * the image. An input with no records and no truncation is the pristine image.
 *
 * Each input: kv_lmdb_verify_mem on the image. Invariants: the pristine image verifies; the
 * verifier never crashes or reads out of bounds (ASan). When it passes, the image is
 * written to a data dir and opened as kvd opens it, and every record is read through LMDB
 * (kv_store_verify_records over everything, HashKV, Maintenance Hash, a Range of every key):
 * this must not crash either (errors are fine: record checksums catch damaged values).
 */
#include "fuzz.h"
#include "fuzz_kvd.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "apply/internal_req.h"
#include "apply/apply.h"
#include "mvcc/lmdb_verify.h"
#include "mvcc/snapshot.h"
#include "mvcc/store.h"
#include "mvcc/verify.h"
#include "rpc.pb-c.h"

#define PSIZE 4096u

typedef struct pages_fuzz {
    char dir[256];  /* where the pristine store was written */
    char work[256]; /* where each accepted image is opened */
    uint8_t *image;
    size_t len;
} pages_fuzz;

static pages_fuzz *g_pf;

static int apply(kv_store *s, kv_store_batch *b, uint64_t *index, int field,
                 const ProtobufCMessage *m)
{
    size_t len = protobuf_c_message_get_packed_size(m);
    uint8_t *msg = malloc(len ? len : 1), *ir = NULL;
    size_t irlen;
    int rc = -1;
    if (msg == NULL)
        return -1;
    protobuf_c_message_pack(m, msg);
    if (kv_internal_wrap((enum kv_ireq_field)field, 0, msg, len, &ir, &irlen) == 0) {
        kv_result res;
        rc = kv_store_apply(s, b, ++*index, ir, irlen, NULL, &res);
        if (rc == 0 && (int)res.err != 0) {
            fprintf(stderr, "fuzz_lmdb_pages: seed request failed: %s\n", kv_etcd_err_msg(res.err));
            rc = -1;
        }
        if (rc == 0)
            free(res.resp);
    }
    free(ir);
    free(msg);
    return rc;
}

static int put(kv_store *s, kv_store_batch *b, uint64_t *index, const char *k, size_t vlen,
               int64_t lease)
{
    static uint8_t v[6000];
    for (size_t i = 0; i < vlen && i < sizeof v; i++)
        v[i] = (uint8_t)('a' + (i * 7 + *index) % 26);
    Etcdserverpb__PutRequest p = ETCDSERVERPB__PUT_REQUEST__INIT;
    p.key = (ProtobufCBinaryData){strlen(k), (uint8_t *)k};
    p.value = (ProtobufCBinaryData){vlen < sizeof v ? vlen : sizeof v, v};
    p.lease = lease;
    return apply(s, b, index, KV_IREQ_PUT, &p.base);
}

static int seed(kv_store *s)
{
    uint64_t index = 0;
    int rc = 0;
    for (int round = 0; round < 3 && rc == 0; round++) {
        kv_store_batch *b;
        if (kv_store_batch_begin(s, &b) != 0)
            return -1;
        if (round == 0) {
            Etcdserverpb__LeaseGrantRequest g = ETCDSERVERPB__LEASE_GRANT_REQUEST__INIT;
            g.id = 7;
            g.ttl = 1000;
            rc = apply(s, b, &index, KV_IREQ_LEASE_GRANT, &g.base);
        }
        for (int i = 0; i < 300 && rc == 0; i++) {
            char k[32];
            snprintf(k, sizeof k, "key/%04d", (i * 37) % 300);
            rc = put(s, b, &index, k, i % 60 == 0 ? 5000 : 10 + (size_t)(i % 90), i % 9 ? 0 : 7);
        }
        for (int i = 0; i < 150 && rc == 0; i++) /* one key with many revisions */
            rc = put(s, b, &index, "hot", 8, 0);
        if (rc == 0) {
            char longkey[700];
            memset(longkey, 'L', sizeof longkey - 1);
            longkey[sizeof longkey - 1] = 0;
            longkey[0] = (char)('0' + round);
            rc = put(s, b, &index, longkey, 20, 0);
        }
        if (rc == 0 && round == 1) {
            Etcdserverpb__DeleteRangeRequest d = ETCDSERVERPB__DELETE_RANGE_REQUEST__INIT;
            d.key = (ProtobufCBinaryData){6, (uint8_t *)"key/00"};
            d.range_end = (ProtobufCBinaryData){6, (uint8_t *)"key/01"};
            rc = apply(s, b, &index, KV_IREQ_DELETE_RANGE, &d.base);
        }
        if (rc == 0 && round == 2) {
            Etcdserverpb__CompactionRequest c = ETCDSERVERPB__COMPACTION_REQUEST__INIT;
            c.revision = 200;
            c.physical = 1;
            rc = apply(s, b, &index, KV_IREQ_COMPACTION, &c.base);
        }
        if (rc != 0) {
            kv_store_batch_abort(s, b);
            return -1;
        }
        if (kv_store_batch_commit(s, b) != 0)
            return -1;
    }
    return 0;
}

static int read_file(const char *path, uint8_t **out, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    *out = n > 0 ? malloc((size_t)n) : NULL;
    int rc = *out && fread(*out, 1, (size_t)n, f) == (size_t)n ? 0 : -1;
    fclose(f);
    *len = (size_t)n;
    return rc;
}

static void teardown(void)
{
    if (g_pf) {
        kv_fuzz_rmdir(g_pf->dir);
        kv_fuzz_rmdir(g_pf->work);
        free(g_pf->image);
        free(g_pf);
        g_pf = NULL;
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    g_pf = calloc(1, sizeof *g_pf);
    if (!g_pf || kv_fuzz_mkdtemp(g_pf->dir, sizeof g_pf->dir, "kvd-fuzz-pages") != 0 ||
        kv_fuzz_mkdtemp(g_pf->work, sizeof g_pf->work, "kvd-fuzz-pages-w") != 0)
        abort();
    kv_store_config sc;
    kv_store_config_default(&sc);
    sc.dir = g_pf->dir;
    sc.quota_bytes = 64u << 20;
    kv_store *s = NULL;
    if (kv_store_open(&s, &sc) != 0 || seed(s) != 0) {
        fprintf(stderr, "fuzz_lmdb_pages: cannot write the store\n");
        abort();
    }
    kv_store_close(s);
    char path[400];
    snprintf(path, sizeof path, "%s/data.mdb", g_pf->dir);
    if (read_file(path, &g_pf->image, &g_pf->len) != 0 || g_pf->len < 8 * PSIZE)
        abort();
    atexit(teardown);
    return 0;
}

/* Reads everything of an accepted image the way kvd serves it. Errors are fine. */
static void read_all(const uint8_t *img, size_t len)
{
    char path[400];
    snprintf(path, sizeof path, "%s/data.mdb", g_pf->work);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || write(fd, img, len) != (ssize_t)len)
        abort();
    close(fd);
    snprintf(path, sizeof path, "%s/lock.mdb", g_pf->work);
    unlink(path);
    kv_store_config sc;
    kv_store_config_default(&sc);
    sc.dir = g_pf->work;
    sc.quota_bytes = 64u << 20;
    sc.unsafe_no_fsync = 1;
    kv_store *s = NULL;
    if (kv_store_open(&s, &sc) != 0)
        return;
    char err[512];
    (void)kv_store_verify_records(s, UINT64_MAX, err, sizeof err);
    uint32_t h;
    int64_t rev, crev;
    (void)kv_store_hash_kv(s, 0, &h, &crev);
    (void)kv_store_hash_all(s, &h, &rev);
    uint8_t zero = 0;
    Etcdserverpb__RangeRequest r = ETCDSERVERPB__RANGE_REQUEST__INIT;
    r.key = (ProtobufCBinaryData){1, &zero};
    r.range_end = (ProtobufCBinaryData){1, &zero};
    uint8_t buf[64];
    size_t rl = etcdserverpb__range_request__pack(&r, buf);
    kv_result res;
    if (kv_store_range(s, buf, rl, NULL, &res) == 0 && (int)res.err == 0)
        free(res.resp);
    kv_store_close(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    pages_fuzz *pf = g_pf;
    uint8_t *img = malloc(pf->len);
    if (!img)
        abort();
    memcpy(img, pf->image, pf->len);
    size_t len = pf->len, pages = len / PSIZE, off = 1;
    int edited = 0;
    if (size >= 3 && (data[0] & 1u)) {
        size_t cut = ((size_t)data[1] << 8 | data[2]) * 61u;
        len = cut < len ? len - cut : 0;
        off = 3;
        edited = 1;
    }
    while (off + 4 <= size) {
        size_t pg = data[off] % pages, at = (size_t)data[off + 1] << 8 | data[off + 2];
        size_t n = data[off + 3];
        off += 4;
        if (n > size - off)
            n = size - off;
        size_t base = pg * PSIZE + at % PSIZE;
        for (size_t i = 0; i < n && base + i < pf->len; i++)
            img[base + i] = data[off + i];
        off += n;
        edited = 1;
    }
    char err[512];
    kv_lmdb_verify_stats st;
    int rc = kv_lmdb_verify_mem(img, len, "fuzzed image", &st, err, sizeof err);
    if (!edited && rc != 0) {
        fprintf(stderr, "fuzz_lmdb_pages: the pristine image fails: %s\n", err);
        abort();
    }
    if (rc != 0 && rc != -EBADMSG) {
        fprintf(stderr, "fuzz_lmdb_pages: verifier error %d: %s\n", rc, err);
        abort();
    }
    if (rc == 0)
        read_all(img, len);
    free(img);
    return 0;
}
