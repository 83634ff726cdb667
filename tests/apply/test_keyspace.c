/* Unit tests of the keyspace operations the applier runs (mvcc/keyspace.h, mvcc/range.h):
 * plain C arguments, 0 / negative errno results, commit and abort of one request. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kvt_store.h"
#include "mvcc/keyspace.h"
#include "mvcc/range.h"

static const uint8_t *B(const char *s)
{
    return (const uint8_t *)s;
}

/* Runs one request context in a batch of its own at the next index; commit or abort. */
typedef struct req {
    kvt_store *t;
    kv_store_batch *b;
    kv_ks *ks;
} req;

static void req_begin(req *r, kvt_store *t)
{
    r->t = t;
    cr_assert_eq(kv_store_batch_begin(t->s, &r->b), 0);
    cr_assert_eq(kv_ks_begin(t->s, r->b, &r->ks), 0);
}

static void req_end(req *r, int commit)
{
    if (commit)
        cr_assert_eq(kv_ks_commit(r->ks, 0), 0);
    else
        kv_ks_abort(r->ks);
    kv_ks_batch_mark_applied(r->b, ++r->t->index, 1);
    cr_assert_eq(kv_store_batch_commit(r->t->s, r->b), 0);
}

static int count_kv(void *arg, const kv_ks_kv *kv)
{
    (void)kv;
    (*(int *)arg)++;
    return 0;
}

Test(keyspace, put_get_delete_and_revisions)
{
    kvt_store t;
    kvt_store_open(&t, NULL);
    req r;
    req_begin(&r, &t);
    cr_assert_eq(kv_ks_rev(r.ks), 1);
    cr_assert_eq(kv_ks_put(r.ks, B("a"), 1, B("1"), 1, 0), 0);
    cr_assert_eq(kv_ks_put(r.ks, B("b"), 1, B("2"), 1, 0), 0);
    cr_assert_eq(kv_ks_read_rev(r.ks), 2); /* the request's writes share revision 2 */
    kv_ks_kv *kv;
    cr_assert_eq(kv_ks_get(r.ks, B("a"), 1, &kv), 0);
    cr_assert_eq(kv->value_len, 1);
    cr_assert_eq(memcmp(kv->value, "1", 1), 0);
    cr_assert_eq(kv->create_revision, 2);
    cr_assert_eq(kv->version, 1);
    free(kv);
    cr_assert_eq(kv_ks_get(r.ks, B("zz"), 2, &kv), -ENOENT);
    cr_assert_null(kv);
    req_end(&r, 1);
    cr_assert_eq(kvt_store_rev(&t), 2);

    req_begin(&r, &t);
    int64_t deleted = -1;
    int seen = 0;
    cr_assert_eq(kv_ks_delete_range(r.ks, B("a"), 1, B("c"), 1, &deleted, count_kv, &seen), 0);
    cr_assert_eq(deleted, 2);
    cr_assert_eq(seen, 2);
    cr_assert_eq(kv_ks_end_rev(r.ks), 3);
    req_end(&r, 1);
    cr_assert_null(kvt_store_get(&t, "a", 0));

    /* nothing to delete: no revision */
    req_begin(&r, &t);
    cr_assert_eq(kv_ks_delete_range(r.ks, B("a"), 1, NULL, 0, &deleted, NULL, NULL), 0);
    cr_assert_eq(deleted, 0);
    cr_assert_eq(kv_ks_end_rev(r.ks), 3);
    req_end(&r, 1);
    cr_assert_eq(kvt_store_rev(&t), 3);
    kvt_store_close(&t);
}

Test(keyspace, abort_keeps_nothing)
{
    kvt_store t;
    kvt_store_open(&t, NULL);
    req r;
    req_begin(&r, &t);
    cr_assert_eq(kv_ks_put(r.ks, B("a"), 1, B("1"), 1, 0), 0);
    cr_assert_eq(kv_ks_lease_grant(r.ks, 5, 10), 0);
    req_end(&r, 0);
    cr_assert_eq(kvt_store_rev(&t), 1);
    cr_assert_null(kvt_store_get(&t, "a", 0));
    req_begin(&r, &t);
    cr_assert_eq(kv_ks_lease_get(r.ks, 5, NULL), -ENOENT);
    /* one request context at a time per batch */
    kv_ks *other;
    cr_assert_eq(kv_ks_begin(t.s, r.b, &other), -EBUSY);
    req_end(&r, 0);
    kvt_store_close(&t);
}

Test(keyspace, lease_errnos)
{
    kv_store_config cfg;
    kv_store_config_default(&cfg);
    cfg.max_keys_per_lease = 1;
    kvt_store t;
    kvt_store_open(&t, &cfg);
    req r;
    req_begin(&r, &t);
    cr_assert_eq(kv_ks_lease_grant(r.ks, 0, 10), -EINVAL);
    cr_assert_eq(kv_ks_lease_grant(r.ks, 5, 9000000001LL), -ERANGE);
    cr_assert_eq(kv_ks_lease_grant(r.ks, 5, 10), 0);
    cr_assert_eq(kv_ks_lease_grant(r.ks, 5, 10), -EEXIST);
    int64_t ttl = 0;
    cr_assert_eq(kv_ks_lease_get(r.ks, 5, &ttl), 0);
    cr_assert_eq(ttl, 10);
    cr_assert_eq(kv_ks_put(r.ks, B("a"), 1, B("1"), 1, 5), 0);
    cr_assert_eq(kv_ks_put(r.ks, B("b"), 1, B("1"), 1, 5), -EDQUOT);
    cr_assert_eq(kv_ks_lease_checkpoint(r.ks, 5, 7), 0);
    cr_assert_eq(kv_ks_lease_checkpoint(r.ks, 6, 7), -ENOENT);
    cr_assert_eq(kv_ks_lease_revoke(r.ks, 6), -ENOENT);
    cr_assert_eq(kv_ks_lease_revoke(r.ks, 5), 0);
    kv_ks_kv *kv;
    cr_assert_eq(kv_ks_get(r.ks, B("a"), 1, &kv), -ENOENT);
    req_end(&r, 1);
    kvt_store_close(&t);
}

Test(keyspace, compact_and_range)
{
    kvt_store t;
    kvt_store_open(&t, NULL);
    kvt_store_put(&t, "k1", "a", 0);
    kvt_store_put(&t, "k2", "b", 0);
    kvt_store_put(&t, "k1", "c", 0);
    req r;
    req_begin(&r, &t);
    cr_assert_eq(kv_ks_compact(r.ks, 10), KV_STORE_ERR_FUTURE_REV);
    cr_assert_eq(kv_ks_compact(r.ks, 3), 0);
    cr_assert_eq(kv_ks_compact_rev(r.ks), 3);
    cr_assert_eq(kv_ks_compact(r.ks, 3), KV_STORE_ERR_COMPACTED);
    req_end(&r, 1);

    kv_range_opts o = {.key = B("k"), .key_len = 1, .end = B("l"), .end_len = 1};
    kv_range_result rr;
    cr_assert_eq(kv_store_range_read(t.s, &o, &rr), 0);
    cr_assert_eq(rr.n, 2);
    cr_assert_eq(rr.count, 2);
    cr_assert_eq(rr.revision, 4);
    kvt_store_expect_kv(rr.kvs[0], "k1", "c");
    kv_range_result_free(&rr);
    o.sort_order = KV_RANGE_SORT_DESCEND;
    o.limit = 1;
    cr_assert_eq(kv_store_range_read(t.s, &o, &rr), 0);
    cr_assert_eq(rr.n, 1);
    cr_assert(rr.more);
    kvt_store_expect_kv(rr.kvs[0], "k2", "b");
    kv_range_result_free(&rr);
    o.revision = 2;
    cr_assert_eq(kv_store_range_read(t.s, &o, &rr), KV_STORE_ERR_COMPACTED);
    cr_assert_eq(rr.revision, 4);
    o.revision = 9;
    cr_assert_eq(kv_store_range_read(t.s, &o, &rr), KV_STORE_ERR_FUTURE_REV);

    /* a request's range sees its own writes */
    req_begin(&r, &t);
    cr_assert_eq(kv_ks_put(r.ks, B("k3"), 2, B("d"), 1, 0), 0);
    kv_range_opts all = {.key = B("k"), .key_len = 1, .end = B("l"), .end_len = 1};
    cr_assert_eq(kv_ks_range(r.ks, &all, &rr), 0);
    cr_assert_eq(rr.n, 3);
    cr_assert_eq(rr.revision, 5);
    kv_range_result_free(&rr);
    int n = 0;
    size_t visited = 0;
    cr_assert_eq(kv_ks_walk(r.ks, B("k"), 1, B("l"), 1, count_kv, &n, &visited), 0);
    cr_assert_eq(n, 3);
    cr_assert_eq(visited, 3);
    req_end(&r, 0);
    kvt_store_close(&t);
}

static int count_alarm(void *arg, uint64_t member, int type)
{
    (void)member, (void)type;
    (*(int *)arg)++;
    return 0;
}

Test(keyspace, alarm_errnos)
{
    kvt_store t;
    kvt_store_open(&t, NULL);
    req r;
    req_begin(&r, &t);
    cr_assert_eq(kv_ks_alarm_activate(r.ks, 1, 9), -EINVAL);
    cr_assert_eq(kv_ks_alarm_activate(r.ks, 1, KV_ALARM_NOSPACE), 0);
    cr_assert_eq(kv_ks_alarm_activate(r.ks, 1, KV_ALARM_NOSPACE), 0); /* already active */
    cr_assert_eq(kv_ks_alarms(r.ks), 1u << KV_ALARM_NOSPACE);
    for (uint64_t m = 2; m <= KV_KS_MAX_ALARMS; m++)
        cr_assert_eq(kv_ks_alarm_activate(r.ks, m, KV_ALARM_NOSPACE), 0);
    cr_assert_eq(kv_ks_alarm_activate(r.ks, 1000, KV_ALARM_NOSPACE), -EMLINK);
    int n = 0;
    cr_assert_eq(kv_ks_alarm_walk(r.ks, count_alarm, &n), 0);
    cr_assert_eq(n, KV_KS_MAX_ALARMS);
    cr_assert_eq(kv_ks_alarm_deactivate(r.ks, 1000, KV_ALARM_NOSPACE), -ENOENT);
    cr_assert_eq(kv_ks_alarm_deactivate(r.ks, 1, KV_ALARM_NOSPACE), 0);
    req_end(&r, 1);
    cr_assert_eq(kv_store_alarms(t.s), 1u << KV_ALARM_NOSPACE); /* 63 members still */
    kvt_store_close(&t);
}
