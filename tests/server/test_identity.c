#include "daemon/config.h"
#include "daemon/identity.h"
#include "mvcc/members.h"

#include <criterion/criterion.h>

/* etcd 3.4 started with no flags reports member 8e9e05c52164694d in cluster
 * cdf818194e3a8c32; the same flags must give kvd the same ids. */
Test(identity, default_member_matches_etcd)
{
    kv_config c;
    char err[128];
    char *argv[] = {"kvd"};
    kv_config_default(&c);
    cr_assert_eq(kv_config_parse(&c, 1, argv, err, sizeof(err)), 0);
    kv_identity id;
    cr_assert_eq(kv_identity_compute(&c, &id), 0);
    cr_assert_eq(id.member_id, 0x8e9e05c52164694dULL, "member %llx",
                 (unsigned long long)id.member_id);
    cr_assert_eq(id.cluster_id, 0xcdf818194e3a8c32ULL, "cluster %llx",
                 (unsigned long long)id.cluster_id);
    cr_assert_eq(id.n_members, 1);
}

Test(identity, token_and_urls_change_the_id)
{
    const char *a[] = {"http://127.0.0.1:2380"};
    const char *b[] = {"http://127.0.0.1:2381"};
    uint64_t x = kv_members_compute_id(a, 1, "etcd-cluster");
    cr_assert_neq(x, kv_members_compute_id(a, 1, "other"));
    cr_assert_neq(x, kv_members_compute_id(b, 1, "etcd-cluster"));
    const char *ab[] = {"http://b:1", "http://a:1"};
    const char *ba[] = {"http://a:1", "http://b:1"};
    cr_assert_eq(kv_members_compute_id(ab, 2, "t"), kv_members_compute_id(ba, 2, "t"));
}
