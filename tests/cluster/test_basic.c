/*
 * cluster_basic: 3- and 5-member clusters start from the README's flags; every member
 * reports the same leader and term; writes through every member are seen at once by
 * linearizable reads through every other member. Target: KV_TEST_SERVER=etcd|kvd.
 */
#include "cl_util.h"

#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <stdio.h>
#include <string.h>

static kvt_cluster g_c; /* the fixture of the running test (fini destroys it) */

static void fini(void)
{
    kvt_cluster_destroy(&g_c);
}

/* endpoint status over all members: n entries, one leader, one term, index within a window. */
static void check_status(int n)
{
    cl_ep_status st[KVT_MAX_MEMBERS];
    int got = 0, ok = 0;
    uint64_t deadline = kvt_now_ms() + 10000;
    while (!ok && kvt_now_ms() < deadline) {
        cr_assert_eq(cl_endpoint_status(&g_c, st, KVT_MAX_MEMBERS, &got), 0);
        cr_assert_eq(got, n, "endpoint status lists %d members, want %d", got, n);
        uint64_t lo = UINT64_MAX, hi = 0;
        int leaders = 0;
        for (int i = 0; i < got; i++) {
            cr_assert_eq(st[i].leader, st[0].leader, "%s names leader %" PRIx64 ", %s %" PRIx64,
                         st[i].endpoint, st[i].leader, st[0].endpoint, st[0].leader);
            cr_assert_eq(st[i].raft_term, st[0].raft_term, "terms differ");
            leaders += st[i].member_id == st[i].leader;
            lo = st[i].raft_index < lo ? st[i].raft_index : lo;
            hi = st[i].raft_index > hi ? st[i].raft_index : hi;
        }
        cr_assert_eq(leaders, 1, "exactly one member is the leader (%d)", leaders);
        cr_assert_neq(st[0].leader, 0);
        ok = hi - lo <= 2;
        if (!ok)
            kvt_sleep_ms(100);
        else
            fprintf(stderr, "  term %" PRIu64 ", raft index %" PRIu64 "..%" PRIu64 "\n",
                    st[0].raft_term, lo, hi);
    }
    cr_assert(ok, "raft indexes of the members never came within 2 of each other");
}

/* `endpoint status --cluster` and `endpoint health --cluster` through ONE member reach all. */
static void check_cluster_flag(int n)
{
    kvt_cmd_result res;
    cr_assert_eq(
        kvt_ctl(&g_c, 0, 20000, &res, "endpoint", "status", "--cluster", "-w", "json", NULL), 0);
    cr_assert_eq(res.exit_code, 0, "endpoint status --cluster: %s%s", res.out, res.err);
    int count = 0;
    for (const char *p = res.out; (p = strstr(p, "\"Endpoint\"")) != NULL; p++)
        count++;
    cr_assert_eq(count, n, "endpoint status --cluster lists %d, want %d: %s", count, n, res.out);
    kvt_cmd_result_free(&res);
    cr_assert_eq(kvt_ctl(&g_c, 0, 20000, &res, "endpoint", "health", "--cluster", NULL), 0);
    cr_assert_eq(res.exit_code, 0, "endpoint health --cluster: %s%s", res.out, res.err);
    count = 0;
    for (const char *p = res.out; (p = strstr(p, "is healthy")) != NULL; p++)
        count++;
    for (const char *p = res.err; (p = strstr(p, "is healthy")) != NULL; p++)
        count++;
    cr_assert_eq(count, n, "endpoint health --cluster: %s%s", res.out, res.err);
    kvt_cmd_result_free(&res);
}

Test(cluster_basic, start3, .fini = fini, .timeout = 120)
{
    cr_assert_eq(cl_start(&g_c, 3, 0), 0);
    check_status(3);
    check_cluster_flag(3);
}

Test(cluster_basic, start5, .fini = fini, .timeout = 120)
{
    cr_assert_eq(cl_start(&g_c, 5, 0), 0);
    check_status(5);
    check_cluster_flag(5);
}

Test(cluster_basic, write_every_member_read_every_other, .fini = fini, .timeout = 120)
{
    cr_assert_eq(cl_start(&g_c, 3, 0), 0);
    int n = g_c.n;
    for (int k = 0; k < 50; k++) {
        char key[32], val[32], err[256];
        snprintf(key, sizeof(key), "/basic/k%02d", k % 10);
        snprintf(val, sizeof(val), "v%d", k);
        int w = k % n;
        int r = kvt_put(&g_c, w, key, val, 5000, NULL, err, sizeof(err));
        cr_assert_eq(r, 0, "put %s through %s: %d %s", key, g_c.m[w].name, r, err);
        for (int d = 1; d < n; d++) {
            int rd = (w + d) % n;
            char got[64];
            int found = 0;
            r = kvt_get(&g_c, rd, key, 0, 5000, got, sizeof(got), &found, NULL, err, sizeof(err));
            cr_assert_eq(r, 0, "get %s through %s: %d %s", key, g_c.m[rd].name, r, err);
            cr_assert(found && strcmp(got, val) == 0,
                      "linearizable get %s through %s after put through %s: '%s', want '%s'", key,
                      g_c.m[rd].name, g_c.m[w].name, found ? got : "(none)", val);
        }
    }
}

/* The fixture: a member whose port was taken by another process between the pick and its
 * bind is moved to new ports (its advertised peer URL, the proxy, stays). */
Test(cluster_basic, member_moved_when_its_port_is_taken, .fini = fini, .timeout = 120)
{
    kvt_cluster_opts o;
    kvt_cluster_opts_default(&o, 3);
    cr_assert_eq(kvt_cluster_init(&g_c, &o), 0);
    uint16_t taken = g_c.m[1].client_port;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(taken)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    cr_assert_eq(listen(fd, 1), 0);
    int r = kvt_cluster_start(&g_c, 60000);
    close(fd);
    cr_assert_eq(r, 0, "start with a taken port: %d", r);
    cr_assert_neq(g_c.m[1].client_port, taken);
    char err[256];
    cr_assert_eq(kvt_put(&g_c, 1, "/basic/moved", "yes", 5000, NULL, err, sizeof(err)), 0, "%s",
                 err);
}
