/*
 * test_corrupt_judge: the periodic check's verdict (corrupt/corrupt_check.h kv_corrupt_judge)
 * and the corruption-check flags (docs/corruption.md).
 */
#include "daemon/config.h"
#include "corrupt/corrupt_check.h"
#include "mvcc/store.h"

#include <criterion/criterion.h>

#include <errno.h>

static kv_corrupt_answer ans(uint64_t id, int status, uint32_t hash, int64_t crev)
{
    kv_corrupt_answer a = {.id = id, .status = status, .hash = hash, .compact_rev = crev};
    return a;
}

Test(corrupt_judge, all_equal_is_consistent)
{
    kv_corrupt_answer a[2] = {ans(2, 0, 7, 5), ans(3, 0, 7, 5)};
    uint64_t bad[4];
    cr_assert_eq(kv_corrupt_judge(1, 7, 5, a, 2, bad, 4), 0);
}

Test(corrupt_judge, one_follower_differs_is_named)
{
    kv_corrupt_answer a[2] = {ans(2, 0, 7, 5), ans(3, 0, 8, 5)};
    uint64_t bad[4];
    cr_assert_eq(kv_corrupt_judge(1, 7, 5, a, 2, bad, 4), 1);
    cr_assert_eq(bad[0], 3);
}

Test(corrupt_judge, leader_in_the_minority_names_itself)
{
    kv_corrupt_answer a[2] = {ans(2, 0, 8, 5), ans(3, 0, 8, 5)};
    uint64_t bad[4];
    cr_assert_eq(kv_corrupt_judge(1, 7, 5, a, 2, bad, 4), 1);
    cr_assert_eq(bad[0], 1);
}

Test(corrupt_judge, two_members_blame_the_follower_as_etcd)
{
    kv_corrupt_answer a[1] = {ans(2, 0, 8, 5)};
    uint64_t bad[4];
    cr_assert_eq(kv_corrupt_judge(1, 7, 5, a, 1, bad, 4), 1);
    cr_assert_eq(bad[0], 2);
}

Test(corrupt_judge, other_compact_revision_or_error_is_not_compared)
{
    kv_corrupt_answer a[4] = {ans(2, 0, 8, 6), ans(3, KV_STORE_ERR_FUTURE_REV, 0, 0),
                              ans(4, -ETIMEDOUT, 0, 5), ans(5, KV_STORE_ERR_COMPACTED, 9, 5)};
    uint64_t bad[4];
    cr_assert_eq(kv_corrupt_judge(1, 7, 5, a, 4, bad, 4), 0);
}

Test(corrupt_judge, bad_is_bounded)
{
    kv_corrupt_answer a[3] = {ans(2, 0, 8, 5), ans(3, 0, 9, 5), ans(4, 0, 7, 5)};
    uint64_t bad[1] = {0};
    /* 2 disagree, 1 agrees: the leader is the odd one out */
    cr_assert_eq(kv_corrupt_judge(1, 7, 5, a, 3, bad, 1), 1);
    cr_assert_eq(bad[0], 1);
    kv_corrupt_answer b[4] = {ans(2, 0, 8, 5), ans(3, 0, 9, 5), ans(4, 0, 7, 5), ans(5, 0, 7, 5)};
    cr_assert_eq(kv_corrupt_judge(1, 7, 5, b, 4, bad, 1), 1); /* 2 vs 2: followers, capped */
    cr_assert_eq(bad[0], 2);
}

Test(corrupt_flags, defaults_and_parsing)
{
    kv_config cfg;
    kv_config_default(&cfg);
    cr_assert_eq(cfg.corrupt_check_time_ms, 60000, "periodic check on by default (60 s)");
    cr_assert_eq(cfg.initial_corrupt_check, 0, "initial check off by default (etcd 3.4)");
    char *argv[] = {"kvd", "--experimental-corrupt-check-time=2m",
                    "--experimental-initial-corrupt-check", NULL};
    char err[256];
    cr_assert_eq(kv_config_parse(&cfg, 3, argv, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(cfg.corrupt_check_time_ms, 120000);
    cr_assert_eq(cfg.initial_corrupt_check, 1);
    char *off[] = {"kvd", "--experimental-corrupt-check-time", "0", NULL};
    cr_assert_eq(kv_config_parse(&cfg, 3, off, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(cfg.corrupt_check_time_ms, 0);
}
