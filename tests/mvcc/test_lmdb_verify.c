/*
 * test_mvcc_lmdb_verify: the LMDB structure verifier (server/mvcc/lmdb_verify.c) on files
 * written by liblmdb itself (docs/corruption.md, "The data file").
 *  - sound files pass, with every feature kvd's stores use (named databases, DUPSORT with
 *    sub-pages and sub-databases, DUPFIXED, overflow values, deletes, free pages) and the
 *    entry counts LMDB reports (mdb_stat);
 *  - truncation at any page boundary is refused;
 *  - targeted damage a random overwrite rarely produces is refused: two keys of a leaf page
 *    swapped (order), a branch child pointing at a page already reached (cycle), an odd node
 *    offset, a node key running past the page, a leaf page's flags changed to branch;
 *  - a current meta on the wrong page for its txnid (LMDB's readers would take the other,
 *    older meta, whose trees are not walked) is refused.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mvcc/lmdb_verify.h"

#define PAGE 4096

typedef struct fx {
    char dir[64];
    uint8_t *img;
    size_t len;
    uint64_t entries; /* what mdb_stat says, all trees */
} fx;

#define CK(x) cr_assert_eq((x), 0, "%s", #x)

static void build(fx *f)
{
    strcpy(f->dir, "/tmp/kvd-lmdbv-XXXXXX");
    cr_assert(mkdtemp(f->dir));
    MDB_env *env;
    CK(mdb_env_create(&env));
    CK(mdb_env_set_maxdbs(env, 8));
    CK(mdb_env_set_mapsize(env, 256u << 20));
    CK(mdb_env_open(env, f->dir, MDB_NOSYNC, 0600));
    MDB_dbi a, d, x;
    for (int round = 0; round < 2; round++) {
        MDB_txn *t;
        CK(mdb_txn_begin(env, NULL, 0, &t));
        CK(mdb_dbi_open(t, "plain", MDB_CREATE, &a));
        CK(mdb_dbi_open(t, "dups", MDB_CREATE | MDB_DUPSORT, &d));
        CK(mdb_dbi_open(t, "fixed", MDB_CREATE | MDB_DUPSORT | MDB_DUPFIXED, &x));
        static char v[9000];
        for (int i = 0; i < 3000; i++) {
            char k[32];
            snprintf(k, sizeof k, "key-%06d", (i * 7919) % 3000);
            size_t vl = i % 101 == 0 ? 8000 : 16 + (size_t)(i % 200);
            memset(v, 'a' + (i + round) % 26, vl);
            MDB_val K = {strlen(k), k}, V = {vl, v};
            CK(mdb_put(t, a, &K, &V, 0));
            for (int j = 0; j < (i % 100 == 0 ? 300 : 1 + i % 3); j++) {
                uint64_t n = (uint64_t)j * 977 + (uint64_t)round;
                char dv[32];
                snprintf(dv, sizeof dv, "dup-%d-%d", j, round);
                MDB_val D = {strlen(dv), dv}, X = {8, &n};
                CK(mdb_put(t, d, &K, &D, 0));
                CK(mdb_put(t, x, &K, &X, 0));
            }
        }
        for (int i = round; i < 3000; i += 5) {
            char k[32];
            snprintf(k, sizeof k, "key-%06d", i);
            MDB_val K = {strlen(k), k};
            mdb_del(t, a, &K, NULL);
        }
        CK(mdb_txn_commit(t));
    }
    MDB_txn *t;
    CK(mdb_txn_begin(env, NULL, MDB_RDONLY, &t));
    MDB_stat st;
    f->entries = 3; /* the main database's records of the three named ones */
    MDB_dbi dbis[3] = {a, d, x};
    for (int i = 0; i < 3; i++) {
        CK(mdb_stat(t, dbis[i], &st));
        f->entries += st.ms_entries;
    }
    CK(mdb_stat(t, 0, &st)); /* FREE_DBI */
    f->entries += st.ms_entries;
    mdb_txn_abort(t);
    mdb_env_close(env);
    char p[128];
    snprintf(p, sizeof p, "%s/data.mdb", f->dir);
    FILE *fp = fopen(p, "rb");
    cr_assert(fp);
    fseek(fp, 0, SEEK_END);
    f->len = (size_t)ftell(fp);
    fseek(fp, 0, SEEK_SET);
    f->img = malloc(f->len);
    cr_assert_eq(fread(f->img, 1, f->len, fp), f->len);
    fclose(fp);
}

static void destroy(fx *f)
{
    char p[128];
    snprintf(p, sizeof p, "%s/data.mdb", f->dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/lock.mdb", f->dir);
    unlink(p);
    rmdir(f->dir);
    free(f->img);
}

static uint16_t get16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

/* First page at or after `from` whose header says page number pg and flags `flags` with at
 * least `min_nodes` nodes; 0 if none. */
static size_t find_page(const fx *f, uint16_t flags, size_t min_nodes, size_t from)
{
    for (size_t pg = from; pg < f->len / PAGE; pg++) {
        const uint8_t *p = f->img + pg * PAGE;
        uint64_t no;
        memcpy(&no, p, 8);
        if (no == pg && get16(p + 10) == flags && (get16(p + 12) - 16u) / 2 >= min_nodes)
            return pg;
    }
    return 0;
}

static int verify(const uint8_t *img, size_t len, char *err, size_t cap)
{
    return kv_lmdb_verify_mem(img, len, "test image", NULL, err, cap);
}

Test(lmdb_verify, sound_files_pass_with_lmdbs_entry_counts)
{
    fx f;
    build(&f);
    char err[512];
    kv_lmdb_verify_stats st;
    cr_assert_eq(kv_lmdb_verify_mem(f.img, f.len, "x", &st, err, sizeof err), 0, "%s", err);
    cr_assert_eq(st.psize, PAGE);
    cr_assert_eq(st.entries, f.entries, "entries %llu, mdb_stat %llu",
                 (unsigned long long)st.entries, (unsigned long long)f.entries);
    cr_assert_lt(st.pages, st.last_pg + 1, "the free pages are not read");
    char p[128];
    snprintf(p, sizeof p, "%s/data.mdb", f.dir);
    cr_assert_eq(kv_lmdb_verify_path(p, 0, NULL, err, sizeof err), 0, "%s", err);
    cr_assert_eq(kv_lmdb_verify_path("/nonexistent/data.mdb", 0, NULL, err, sizeof err), -ENOENT);
    destroy(&f);
}

Test(lmdb_verify, truncated_files_are_refused)
{
    fx f;
    build(&f);
    char err[512];
    /* the last page reached by the current meta is near the end: cut anywhere before it */
    kv_lmdb_verify_stats st;
    cr_assert_eq(kv_lmdb_verify_mem(f.img, f.len, "x", &st, err, sizeof err), 0, "%s", err);
    size_t need = (st.last_pg + 1) * PAGE;
    for (size_t cut = 0; cut < need; cut += need / 37 + 1)
        cr_assert_eq(verify(f.img, cut, err, sizeof err), -EBADMSG, "cut at %zu passed", cut);
    cr_assert_eq(verify(f.img, need - 1, err, sizeof err), -EBADMSG);
    cr_assert_eq(verify(f.img, need, err, sizeof err), 0, "%s", err);
    destroy(&f);
}

Test(lmdb_verify, targeted_damage_is_refused)
{
    fx f;
    build(&f);
    uint8_t *bad = malloc(f.len);
    cr_assert(bad);
    char err[512];
    int checked = 0;
    /* keys out of order: swap the first two node pointers of leaf pages */
    for (size_t pg = find_page(&f, 0x02, 3, 2); pg; pg = find_page(&f, 0x02, 3, pg + 1)) {
        memcpy(bad, f.img, f.len);
        uint8_t *p = bad + pg * PAGE;
        uint16_t a = get16(p + 16), b = get16(p + 18);
        put16(p + 16, b);
        put16(p + 18, a);
        int rc = verify(bad, f.len, err, sizeof err);
        /* a free page left over from the first round is not reached: it passes */
        if (rc == 0)
            continue;
        cr_assert_eq(rc, -EBADMSG);
        cr_assert(strstr(err, "out of order"), "%s", err);
        checked++;
        break;
    }
    /* a cycle: a branch page's second child is its first */
    for (size_t br = find_page(&f, 0x01, 2, 2); br; br = find_page(&f, 0x01, 2, br + 1)) {
        memcpy(bad, f.img, f.len);
        uint8_t *p = bad + br * PAGE;
        uint8_t *n0 = p + get16(p + 16), *n1 = p + get16(p + 18);
        memcpy(n1, n0, 6); /* child page number: lo, hi, flags */
        int rc = verify(bad, f.len, err, sizeof err);
        if (rc == 0)
            continue; /* a free page */
        cr_assert_eq(rc, -EBADMSG);
        cr_assert(strstr(err, "reached twice") || strstr(err, "range") || strstr(err, "order"),
                  "%s", err);
        checked++;
        break;
    }
    /* an odd node offset, and a key running past the page, on a leaf page that is reached */
    for (size_t pg = find_page(&f, 0x02, 2, 2); pg; pg = find_page(&f, 0x02, 2, pg + 1)) {
        memcpy(bad, f.img, f.len);
        if (verify(bad, f.len, err, sizeof err) != 0)
            break;
        bad[pg * PAGE + 16] |= 1;
        int rc = verify(bad, f.len, err, sizeof err);
        if (rc == 0)
            continue; /* a free page */
        cr_assert_eq(rc, -EBADMSG);
        cr_assert(strstr(err, "bad offset"), "%s", err);
        memcpy(bad, f.img, f.len);
        uint8_t *q = bad + pg * PAGE;
        put16(q + get16(q + 16) + 6, 5000); /* key size of node 0 */
        cr_assert_eq(verify(bad, f.len, err, sizeof err), -EBADMSG);
        cr_assert(strstr(err, "key too long"), "%s", err);
        memcpy(bad, f.img, f.len);
        put16(bad + pg * PAGE + 10, 0x01); /* a leaf that claims to be a branch */
        cr_assert_eq(verify(bad, f.len, err, sizeof err), -EBADMSG);
        checked++;
        break;
    }
    cr_assert_eq(checked, 3, "only %d of the damages found a page to test", checked);
    free(bad);
    destroy(&f);
}

Test(lmdb_verify, a_current_meta_on_the_wrong_page_is_refused)
{
    fx f;
    build(&f);
    char err[512];
    uint8_t *bad = malloc(f.len);
    cr_assert(bad);
    /* meta body: magic, version, address, mapsize, two db records (48 each), last page,
     * then the txnid */
    size_t txn_off = 16 + 24 + 2 * 48 + 8;
    uint64_t t0, t1;
    memcpy(&t0, f.img + txn_off, 8);
    memcpy(&t1, f.img + PAGE + txn_off, 8);
    size_t cur = t1 > t0 ? 1 : 0;
    uint64_t tc = cur ? t1 : t0;
    cr_assert_eq(tc & 1u, cur, "liblmdb wrote txn %llu on meta page %zu", (unsigned long long)tc,
                 cur);
    /* one more than its own txnid: still the newest meta, now on the wrong page */
    memcpy(bad, f.img, f.len);
    uint64_t moved = tc + 1;
    memcpy(bad + cur * PAGE + txn_off, &moved, 8);
    cr_assert_eq(verify(bad, f.len, err, sizeof err), -EBADMSG);
    cr_assert(strstr(err, "belongs on meta page"), "%s", err);
    /* two more: the right page again, and the file passes */
    moved = tc + 2;
    memcpy(bad + cur * PAGE + txn_off, &moved, 8);
    cr_assert_eq(verify(bad, f.len, err, sizeof err), 0, "%s", err);
    free(bad);
    destroy(&f);
}
