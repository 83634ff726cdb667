/*
 * fuzz_bbolt: etcd 3.4 snapshots (bbolt files) as `kvctl snapshot status|restore` read them
 * (server/bbolt/bbolt.h, mvcc/snapshot.h; README "Moving from etcd, and back").
 *
 * Once per process a pristine snapshot is written with kvd's bbolt writer in etcd's layout:
 * "key" with 600 revisions (puts, a second version, tombstones, values larger than a page:
 * overflow pages; enough records for branch pages), "lease" with leases, "meta" with the
 * consistent index and compaction revisions, "auth"/"authUsers"/"authRoles", "members".
 *
 * Input (as fuzz_lmdb_pages): byte 0 = mode; bit 0: truncate the image by
 * (byte 1 << 8 | byte 2) * 61 bytes. Then records <page (1)> <offset (2, big endian)> <n (1)>
 * <n bytes>: the bytes are written at that offset of page (page % pages) of the image (the
 * meta pages included), clipped to the image. An input with no records and no truncation is
 * the pristine image.
 *
 * Each input: the image goes to a temporary file, kv_bbolt_snapshot_status reads it, and when
 * that accepts it kv_bbolt_restore_dir turns it into a data dir, which is then removed.
 * Invariants: the pristine image is accepted and restores; nothing crashes, hangs or reads
 * out of bounds (ASan); a refusal comes with a message; a refused restore leaves no data dir.
 */
#include "fuzz.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bbolt/bbolt.h"
#include "common/byteorder.h"
#include "common/varint.h"
#include "mvcc/snapshot.h"

#define PSIZE 4096u

typedef struct bb_fuzz {
    char dir[256];
    char file[300];
    char data[300];
    uint8_t *image;
    size_t len;
} bb_fuzz;

static bb_fuzz *g_bf;

/* field (wire type 2) */
static size_t lenfield(uint8_t *p, int num, const void *d, size_t n)
{
    size_t o = 0;
    p[o++] = (uint8_t)(num << 3 | 2);
    o += kv_varint_put(p + o, n);
    memcpy(p + o, d, n);
    return o + n;
}

static size_t intfield(uint8_t *p, int num, uint64_t v)
{
    size_t o = 0;
    p[o++] = (uint8_t)(num << 3);
    return o + kv_varint_put(p + o, v);
}

#define CHECK(x)                                                                                   \
    do {                                                                                           \
        if ((x) != 0)                                                                              \
            abort();                                                                               \
    } while (0)

static void write_pristine(int fd)
{
    kv_bb_writer *w;
    CHECK(kv_bb_writer_new(&w, fd));
    static uint8_t v[12000];
    uint8_t k[32];
    size_t n;
    CHECK(kv_bb_bucket_begin(w, "alarm", 5));
    CHECK(kv_bb_bucket_end(w));
    CHECK(kv_bb_bucket_begin(w, "auth", 4));
    CHECK(kv_bb_put(w, "authEnabled", 11, "\1", 1));
    kv_put_be64(k, 7);
    CHECK(kv_bb_put(w, "authRevision", 12, k, 8));
    CHECK(kv_bb_bucket_end(w));
    CHECK(kv_bb_bucket_begin(w, "authRoles", 9));
    { /* authpb.Role{name "r", keyPermission [{permType READWRITE, key "a", range_end "b"}]} */
        uint8_t perm[32], role[64];
        size_t pl = intfield(perm, 1, 2);
        pl += lenfield(perm + pl, 2, "a", 1);
        pl += lenfield(perm + pl, 3, "b", 1);
        size_t rl = lenfield(role, 1, "r", 1);
        rl += lenfield(role + rl, 2, perm, pl);
        CHECK(kv_bb_put(w, "r", 1, role, rl));
    }
    CHECK(kv_bb_bucket_end(w));
    CHECK(kv_bb_bucket_begin(w, "authUsers", 9));
    {
        static const char h[] = "$2a$10$TB0/RuInsqbcO7Ody.OrV.V1Tss8IeiURBvTCtfrpB2dcj7vdwudO";
        uint8_t u[128];
        size_t ul = lenfield(u, 1, "alice", 5);
        ul += lenfield(u + ul, 2, h, strlen(h));
        ul += lenfield(u + ul, 3, "r", 1);
        CHECK(kv_bb_put(w, "alice", 5, u, ul));
    }
    CHECK(kv_bb_bucket_end(w));
    CHECK(kv_bb_bucket_begin(w, "key", 3));
    for (int64_t rev = 2; rev < 602; rev++) {
        char key[32];
        int i = (int)(rev % 250);
        snprintf(key, sizeof key, "key/%03d", i);
        kv_put_be64(k, (uint64_t)rev);
        k[8] = '_';
        kv_put_be64(k + 9, 0);
        int tomb = rev % 97 == 0;
        if (tomb) {
            k[17] = 't';
            n = lenfield(v, 1, key, strlen(key));
            CHECK(kv_bb_put(w, k, 18, v, n));
            continue;
        }
        int64_t create = rev < 252 ? rev : rev - 250;
        n = lenfield(v, 1, key, strlen(key));
        n += intfield(v + n, 2, (uint64_t)create);
        n += intfield(v + n, 3, (uint64_t)rev);
        n += intfield(v + n, 4, rev < 252 ? 1 : 2);
        size_t vl = rev % 101 == 0 ? 9000 : 20;
        uint8_t val[9000];
        memset(val, 'a' + (int)(rev % 26), vl);
        n += lenfield(v + n, 5, val, vl);
        if (i % 50 == 1)
            n += intfield(v + n, 6, 1000 + (uint64_t)(i % 3));
        CHECK(kv_bb_put(w, k, 17, v, n));
    }
    CHECK(kv_bb_bucket_end(w));
    CHECK(kv_bb_bucket_begin(w, "lease", 5));
    for (int id = 1000; id < 1003; id++) {
        kv_put_be64(k, (uint64_t)id);
        n = intfield(v, 1, (uint64_t)id);
        n += intfield(v + n, 2, 600);
        CHECK(kv_bb_put(w, k, 8, v, n));
    }
    CHECK(kv_bb_bucket_end(w));
    CHECK(kv_bb_bucket_begin(w, "members", 7));
    static const char m[] = "{\"id\":1,\"peerURLs\":[\"http://127.0.0.1:2380\"],\"name\":\"a\"}";
    CHECK(kv_bb_put(w, "1", 1, m, strlen(m)));
    CHECK(kv_bb_bucket_end(w));
    CHECK(kv_bb_bucket_begin(w, "meta", 4));
    kv_put_be64(k, 900);
    CHECK(kv_bb_put(w, "consistent_index", 16, k, 8));
    kv_put_be64(k, 100);
    k[8] = '_';
    kv_put_be64(k + 9, 0);
    CHECK(kv_bb_put(w, "finishedCompactRev", 18, k, 17));
    kv_put_be64(k, 120);
    CHECK(kv_bb_put(w, "scheduledCompactRev", 19, k, 17));
    CHECK(kv_bb_bucket_end(w));
    int64_t size = 0;
    CHECK(kv_bb_writer_finish(w, &size));
    kv_bb_writer_free(w);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    g_bf = calloc(1, sizeof(*g_bf));
    if (g_bf == NULL)
        abort();
    snprintf(g_bf->dir, sizeof g_bf->dir, "/tmp/fuzz_bbolt.XXXXXX");
    if (mkdtemp(g_bf->dir) == NULL)
        abort();
    snprintf(g_bf->file, sizeof g_bf->file, "%s/snap.db", g_bf->dir);
    snprintf(g_bf->data, sizeof g_bf->data, "%s/restored", g_bf->dir);
    int fd = open(g_bf->file, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        abort();
    write_pristine(fd);
    off_t len = lseek(fd, 0, SEEK_END);
    g_bf->image = malloc((size_t)len);
    if (g_bf->image == NULL || pread(fd, g_bf->image, (size_t)len, 0) != len)
        abort();
    g_bf->len = (size_t)len;
    close(fd);
    return 0;
}

static void rm_data(const char *dir)
{
    char p[400];
    static const char *const files[] = {"data.mdb", "lock.mdb"};
    for (size_t i = 0; i < 2; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        unlink(p);
    }
    rmdir(dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (g_bf == NULL)
        LLVMFuzzerInitialize(NULL, NULL);
    size_t len = g_bf->len, pages = len / PSIZE;
    uint8_t *img = malloc(len);
    if (img == NULL)
        abort();
    memcpy(img, g_bf->image, len);
    size_t p = 0;
    int pristine = 1;
    if (size >= 1 && (data[0] & 1) && size >= 3) {
        size_t cut = ((size_t)data[1] << 8 | data[2]) * 61;
        len = cut < len ? len - cut : 0;
        pristine = cut == 0;
        p = 3;
    } else if (size >= 1) {
        p = 1;
    }
    while (p + 4 <= size) {
        size_t pg = data[p] % pages, off = (size_t)data[p + 1] << 8 | data[p + 2], n = data[p + 3];
        p += 4;
        if (n > size - p)
            n = size - p;
        size_t at = pg * PSIZE + off;
        for (size_t i = 0; i < n && at + i < len; i++)
            img[at + i] = data[p + i];
        p += n;
        pristine = 0;
    }
    int fd = open(g_bf->file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || (len && write(fd, img, len) != (ssize_t)len))
        abort();
    close(fd);
    free(img);
    kv_snapshot_status st;
    char msg[512] = "";
    int rc = kv_bbolt_snapshot_status(g_bf->file, (int64_t)len, &st, msg, sizeof msg);
    if (rc != 0) {
        if (msg[0] == '\0' || pristine)
            abort(); /* a refusal says why; the pristine image is accepted */
        return 0;
    }
    msg[0] = '\0';
    rc = kv_bbolt_restore_dir(g_bf->file, (int64_t)len, g_bf->data, msg, sizeof msg);
    if (rc != 0) {
        if (msg[0] == '\0' || access(g_bf->data, F_OK) == 0 || pristine)
            abort(); /* a refusal says why and leaves nothing behind */
        return 0;
    }
    rm_data(g_bf->data);
    return 0;
}
