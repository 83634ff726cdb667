/*
 * adv_longkeys: keys longer than LMDB's 511-byte key limit through the real
 * client, against kvd and a real etcd running the same etcdctl (ETCDCTL_API=3) commands:
 * put, get --prefix / ranges / --from-key / --limit / --rev / sort / keys-only, del ranges
 * with --prev-kv, txn compares on a long key, compaction, a watch replaying every event,
 * and a lease whose revoke deletes long keys. The normalized outputs must be equal (same
 * keys in the same order, same revisions). Skipped without /usr/bin/etcd.
 */
#include <criterion/criterion.h>
#include "kvt_skip.h"
#include <criterion/logging.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "normalize.h"

#define CMD_TIMEOUT_MS 30000
#define READY_TIMEOUT_MS 20000
#define MAX_ARGS 12

static kv_it_server srv[2]; /* 0: etcd, 1: kvd */
static char etcdctl[PATH_MAX];

static void teardown(void)
{
    for (int i = 0; i < 2; i++)
        kv_it_server_destroy(&srv[i]);
}

static void start_or_die(kv_it_server *s, kv_it_kind kind)
{
    int rc = kv_it_server_init(s, kind, NULL);
    cr_assert_eq(rc, 0, "init %s (binary %s): %d", kv_it_kind_name(kind), s->bin, rc);
    rc = kv_it_server_start(s, READY_TIMEOUT_MS);
    if (rc) {
        char *log = NULL;
        kv_it_server_log(s, &log);
        cr_log_error("%s log:\n%s", kv_it_kind_name(kind), log ? log : "");
        free(log);
    }
    cr_assert_eq(rc, 0, "start %s: %d", kv_it_kind_name(kind), rc);
}

/* etcdctl with argv (NULL-terminated) against s; returns "exit=N\n<stdout>-- stderr:..."
 * normalized (malloc'd). timeout_ms bounds a watch (its output so far is kept). */
static char *ctl(const kv_it_server *s, const char *stdin_data, uint32_t timeout_ms,
                 const char *const *args, char **raw)
{
    const char *argv[MAX_ARGS + 4];
    char ep[96];
    int n = 0;
    snprintf(ep, sizeof ep, "--endpoints=%s", s->endpoint);
    argv[n++] = etcdctl;
    argv[n++] = ep;
    for (int i = 0; args[i] && n < MAX_ARGS + 2; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    static const char *const env[] = {"ETCDCTL_API=3", NULL};
    kv_it_cmd_result r;
    cr_assert_eq(
        kv_it_run(argv, env, stdin_data, stdin_data ? strlen(stdin_data) : 0, timeout_ms, &r), 0);
    char *norm = kv_it_normalize(r.out);
    char *errs = kv_it_stderr_lines(r.err);
    cr_assert(norm && errs);
    size_t cap = strlen(norm) + strlen(errs) + 64;
    char *res = malloc(cap);
    cr_assert(res);
    /* a watch ends by timeout on both servers: its exit status is not compared */
    snprintf(res, cap, "exit=%d\n%s-- stderr:\n%s", timeout_ms < CMD_TIMEOUT_MS ? 0 : r.exit_code,
             norm, errs);
    if (raw)
        *raw = strdup(r.out);
    free(norm);
    free(errs);
    kv_it_cmd_result_free(&r);
    return res;
}

static int mismatches;

/* Runs the step on both servers and expects equal outputs; returns kvd's output. */
static char *both(const char *stdin_data, uint32_t timeout_ms, const char *const *args)
{
    char *a = ctl(&srv[0], stdin_data, timeout_ms, args, NULL);
    char *b = ctl(&srv[1], stdin_data, timeout_ms, args, NULL);
    char what[160];
    snprintf(what, sizeof what, "%s %s %.40s%s", args[0], args[1] ? args[1] : "",
             args[1] && args[2] ? args[2] : "",
             args[1] && args[2] && strlen(args[2]) > 40 ? "..." : "");
    if (strcmp(a, b) != 0) {
        mismatches++;
        /* long keys make huge outputs: show the first difference */
        size_t i = 0;
        while (a[i] && a[i] == b[i])
            i++;
        size_t from = i > 200 ? i - 200 : 0;
        cr_expect_fail("step '%s' differs at byte %zu:\n--- etcd: ...%.400s\n--- kvd:  ...%.400s",
                       what, i, a + from, b + from);
    }
    /* only the compacted read is meant to fail (checked by its caller) */
    if (strstr(b, "compacted") == NULL)
        cr_expect(strncmp(b, "exit=0\n", 7) == 0, "step '%s' failed on kvd: %.300s", what, b);
    free(a);
    return b;
}

static char *mk(const char *prefix, char fill, size_t n, const char *tail)
{
    size_t pl = strlen(prefix), tl = strlen(tail);
    char *k = malloc(n + tl + 1);
    cr_assert(k && n >= pl);
    memcpy(k, prefix, pl);
    memset(k + pl, fill, n - pl);
    memcpy(k + n, tail, tl);
    k[n + tl] = 0;
    return k;
}

static int cmp_str(const void *a, const void *b)
{
    const char *x = *(char *const *)a, *y = *(char *const *)b;
    size_t xl = strlen(x), yl = strlen(y), n = xl < yl ? xl : yl;
    int c = memcmp(x, y, n);
    return c ? c : xl < yl ? -1 : xl > yl ? 1 : 0;
}

/* Lease ID from "lease 694d7c3a5e2f4a04 granted with TTL(100s)". */
static void lease_id(const char *out, char *id, size_t cap)
{
    const char *p = strstr(out, "lease ");
    cr_assert_not_null(p, "lease grant output: %s", out);
    p += 6;
    size_t n = strcspn(p, " ");
    cr_assert(n > 0 && n < cap);
    memcpy(id, p, n);
    id[n] = 0;
}

#define NK 24

Test(adv_longkeys, etcdctl_long_keys_same_as_etcd, .fini = teardown, .timeout = 900)
{
    char etcd[PATH_MAX];
    if (kv_it_server_bin(KV_IT_ETCD, etcd, sizeof etcd) != 0)
        KVT_SKIP_MISSING("no reference etcd at %s", etcd);
    cr_assert_eq(kv_it_etcdctl_bin(etcdctl, sizeof etcdctl), 0, "etcdctl missing: %s", etcdctl);
    start_or_die(&srv[0], KV_IT_ETCD);
    start_or_die(&srv[1], KV_IT_KVD);

    /* keys around the 511-byte boundary, sharing the first 500 bytes, differing at 448/511 */
    char *k[NK];
    size_t n = 0;
    const size_t lens[] = {1 + 2, 448, 510, 511, 512, 513, 700, 4096, 20000};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++)
        k[n++] = mk("p/", 'm', lens[i], "");
    const char *tails[] = {"a", "b", "z", "aa", "A", "ma", "mz"};
    for (size_t i = 0; i < sizeof tails / sizeof tails[0]; i++)
        k[n++] = mk("p/", 'm', 500, tails[i]);
    const size_t at[] = {447, 448, 510, 511};
    for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
        k[n] = mk("p/", 'm', 900, "");
        k[n++][at[i]] = 'c';
        k[n] = mk("p/", 'm', 900, "");
        k[n++][at[i]] = 'q';
    }
    cr_assert_leq(n, NK);
    for (size_t i = 0; i < n; i++) {
        char v[16];
        size_t j = (i * 7 + 3) % n;
        snprintf(v, sizeof v, "v%zu", j);
        free(both(NULL, CMD_TIMEOUT_MS, (const char *[]){"put", k[j], v, NULL}));
    }
    free(both(NULL, CMD_TIMEOUT_MS, (const char *[]){"put", "p0", "outside", NULL}));
    char *sorted[NK];
    memcpy(sorted, k, n * sizeof *k);
    qsort(sorted, n, sizeof *sorted, cmp_str);

    /* the key order of get --prefix, also checked on its own against the sorted list */
    char *raw = NULL;
    const char *const gp[] = {"get", "p/", "--prefix", "--keys-only", NULL};
    char *a = ctl(&srv[0], NULL, CMD_TIMEOUT_MS, gp, NULL);
    char *b = ctl(&srv[1], NULL, CMD_TIMEOUT_MS, gp, &raw);
    cr_expect_str_eq(a, b, "get --prefix --keys-only differs");
    const char *p = raw;
    for (size_t i = 0; i < n; i++) {
        size_t l = strlen(sorted[i]);
        cr_assert(strncmp(p, sorted[i], l) == 0 && p[l] == '\n', "kvd key %zu out of order", i);
        p += l + 1;
        while (*p == '\n')
            p++;
    }
    free(raw);
    free(a);
    free(b);

    const char *const steps[][MAX_ARGS] = {
        {"get", "p/", "--prefix", NULL},
        {"get", "p/", "--prefix", "--limit", "5", "-w", "json", NULL},
        {"get", "p/", "--prefix", "--sort-by=KEY", "--order=DESCEND", "--keys-only", NULL},
        {"get", "p/", "--prefix", "--sort-by=VALUE", "--order=ASCEND", "--keys-only", NULL},
        {"get", "p/", "--prefix", "--rev", "12", "--keys-only", NULL},
        {"get", sorted[4], sorted[17], "--keys-only", NULL},
        {"get", sorted[9], "--from-key", "--keys-only", NULL},
        {"get", sorted[11], "-w", "json", NULL},
        {"get", sorted[n - 1], "--prefix", "--keys-only", NULL},
    };
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++)
        free(both(NULL, CMD_TIMEOUT_MS, steps[i]));

    /* txn: compare on a long key's value, put/get of long keys */
    size_t tl = strlen(sorted[6]) + strlen(sorted[7]) * 3 + 200;
    char *txn = malloc(tl);
    snprintf(txn, tl, "value(\"%s\") = \"v%zu\"\n\nput %s yes\nget %s\n\nput %s no\n\n", sorted[6],
             (size_t)0, sorted[7], sorted[7], sorted[7]);
    free(both(txn, CMD_TIMEOUT_MS, (const char *[]){"txn", NULL}));
    /* a compare that holds: read the value first */
    free(both(NULL, CMD_TIMEOUT_MS, (const char *[]){"put", sorted[6], "cmpval", NULL}));
    snprintf(txn, tl, "value(\"%s\") = \"cmpval\"\n\nput %s yes\nget %s\n\nput %s no\n\n",
             sorted[6], sorted[7], sorted[7], sorted[7]);
    free(both(txn, CMD_TIMEOUT_MS, (const char *[]){"txn", "-w", "json", NULL}));
    free(txn);

    /* delete a range crossing the boundary, with prev kvs (key order) */
    free(both(NULL, CMD_TIMEOUT_MS,
              (const char *[]){"del", sorted[3], sorted[12], "--prev-kv", NULL}));
    free(
        both(NULL, CMD_TIMEOUT_MS, (const char *[]){"get", "p/", "--prefix", "--keys-only", NULL}));

    /* a lease on long keys; its revoke deletes them (one revision, key order) */
    char ids[2][64];
    for (int s = 0; s < 2; s++) {
        char *out = NULL;
        free(ctl(&srv[s], NULL, CMD_TIMEOUT_MS, (const char *[]){"lease", "grant", "300", NULL},
                 &out));
        lease_id(out, ids[s], sizeof ids[s]);
        free(out);
    }
    char *lk[3] = {mk("q/", 'z', 3000, ""), mk("q/", 'a', 700, ""), mk("q/", 'a', 512, "")};
    for (int i = 0; i < 3; i++) {
        char *r[2];
        for (int s = 0; s < 2; s++) {
            char opt[160];
            snprintf(opt, sizeof opt, "--lease=%s", ids[s]);
            r[s] = ctl(&srv[s], NULL, CMD_TIMEOUT_MS,
                       (const char *[]){"put", lk[i], "l", opt, NULL}, NULL);
        }
        cr_expect_str_eq(r[0], r[1], "put with lease %d", i);
        free(r[0]);
        free(r[1]);
    }
    /* (json would show the lease ids, which differ) */
    char *got = both(NULL, CMD_TIMEOUT_MS, (const char *[]){"get", "q/", "--prefix", NULL});
    cr_expect(strstr(got, lk[0]) && strstr(got, lk[1]) && strstr(got, lk[2]), "3 leased keys");
    free(got);
    for (int s = 0; s < 2; s++) {
        char *out = NULL;
        free(ctl(&srv[s], NULL, CMD_TIMEOUT_MS, (const char *[]){"lease", "revoke", ids[s], NULL},
                 &out));
        cr_expect(strstr(out, "revoked") != NULL, "revoke on server %d: %s", s, out);
        free(out);
    }
    free(both(NULL, CMD_TIMEOUT_MS, (const char *[]){"get", "q/", "--prefix", "-w", "json", NULL}));

    /* compaction keeps the latest revisions of long keys */
    free(both(NULL, CMD_TIMEOUT_MS, (const char *[]){"compaction", "20", NULL}));
    free(both(NULL, CMD_TIMEOUT_MS,
              (const char *[]){"get", "p/", "--prefix", "--rev", "20", "--keys-only", NULL}));
    got =
        both(NULL, CMD_TIMEOUT_MS, (const char *[]){"get", "p/", "--prefix", "--rev", "19", NULL});
    cr_expect(strstr(got, "required revision has been compacted") != NULL, "%.300s", got);
    free(got);

    /* a watch from revision 20 replays every later event, long keys included, in order */
    free(both(NULL, 4000, (const char *[]){"watch", "--prefix", "p/", "--rev", "20", NULL}));
    /* a watch on one long key and on a range between long keys */
    char *w1 = both(NULL, 3000, (const char *[]){"watch", sorted[6], "--rev", "21", NULL});
    cr_expect(strstr(w1, "PUT") && strstr(w1, "DELETE"), "watch on one long key: %.200s", w1);
    free(w1);
    w1 = both(NULL, 3000, (const char *[]){"watch", sorted[2], sorted[14], "--rev", "21", NULL});
    cr_expect(strstr(w1, "DELETE") != NULL, "watch on a range of long keys: %.200s", w1);
    free(w1);
    got = both(NULL, 4000,
               (const char *[]){"watch", "--prefix", "q/", "--rev", "20", "--prev-kv", NULL});
    char *del = strstr(got, "DELETE");
    cr_expect(del && strstr(del, lk[2]) && strstr(got, "PUT"), "watch saw the puts and the revoke");
    free(got);

    /* a key of 1,000,000 bytes (argv cannot carry it: a txn from stdin), within etcd's
     * default --max-request-bytes of 1.5 MiB */
    char *huge = mk("r/", 'h', 1000000, "");
    size_t hl = strlen(huge) + 64;
    char *ht = malloc(hl);
    snprintf(ht, hl, "\nput %s big\n\n\n", huge);
    free(both(ht, CMD_TIMEOUT_MS, (const char *[]){"txn", NULL}));
    got =
        both(NULL, CMD_TIMEOUT_MS, (const char *[]){"get", "r/", "--prefix", "--keys-only", NULL});
    cr_expect(strstr(got, huge) != NULL, "the 1,000,000-byte key is stored");
    free(got);
    free(both(NULL, CMD_TIMEOUT_MS, (const char *[]){"del", "r/", "--prefix", NULL}));
    free(huge);
    free(ht);

    cr_log_info("%d steps differ (etcd vs kvd)", mismatches);
    cr_expect_eq(mismatches, 0);
    for (size_t i = 0; i < n; i++)
        free(k[i]);
    for (int i = 0; i < 3; i++)
        free(lk[i]);
}
