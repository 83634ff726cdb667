/*
 * cluster_disk_full: a follower whose file system fills (its data dir on an 8 MiB tmpfs; the
 * leader's and the other follower's disks are roomy) raises NOSPACE through the leader when
 * less than 2 MiB are left, instead of failing a persist and stopping: the alarm is listed on
 * every member (with the follower's id), the leader then refuses puts with etcd's no-space
 * error, and the follower keeps running and serving. Needs root (mount); CI runs as root.
 */
#include "cl_util.h"

#include <criterion/criterion.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>

static kvt_cluster g_c;
static int g_small = -1; /* the member on the tmpfs */

static void fini(void)
{
    for (int i = 0; i < g_c.n; i++)
        if (kvt_member_running(&g_c, i))
            kvt_member_kill9(&g_c, i);
    if (g_small >= 0)
        umount2(g_c.m[g_small].data_dir, MNT_DETACH);
    kvt_cluster_destroy(&g_c);
}

Test(cluster_disk_full, follower_raises_nospace_and_keeps_running, .fini = fini, .timeout = 600)
{
    kvt_cluster_opts o;
    kvt_cluster_opts_default(&o, 3);
    cr_assert_eq(kvt_cluster_init(&g_c, &o), 0);
    g_small = 2;
    kvt_member *m = &g_c.m[g_small];
    /* the WAL preallocates its segments (64 MiB by default): 1 MiB ones fit the 8 MiB disk */
    static const char *const small_args[] = {"--wal-segment-bytes=1048576", NULL};
    m->args = small_args;
    mkdir(m->data_dir, 0700);
    cr_assert_eq(mount("tmpfs", m->data_dir, "tmpfs", 0, "size=8m"), 0,
                 "mount an 8 MiB tmpfs on %s: %s (needs root)", m->data_dir, strerror(errno));
    int r = kvt_cluster_start(&g_c, 60000);
    if (r)
        kvt_cluster_dump(&g_c);
    cr_assert_eq(r, 0, "cluster start: %d", r);
    int l = kvt_cluster_wait_leader(&g_c, 20000, NULL);
    cr_assert_geq(l, 0);
    char err[256];
    if (l == g_small) {
        cr_assert_eq(kvt_cluster_move_leader(&g_c, 0, 20000, err, sizeof(err)), 0, "%s", err);
        l = 0;
    }
    kvt_status st;
    cr_assert_eq(kvt_member_status(&g_c, g_small, &st, 10000), 0);
    uint64_t small_id = st.id;
    cr_assert_eq(kvt_put(&g_c, l, "/full/first", "v1", 20000, NULL, err, sizeof(err)), 0, "%s",
                 err);

    /* Puts of 4000 bytes through the leader until one is refused. */
    static char val[4001];
    memset(val, 'f', sizeof(val) - 1);
    int acked = 0, refused = 0;
    for (int i = 0; i < 10000 && !refused; i++) {
        char key[32];
        snprintf(key, sizeof(key), "/full/%05d", i);
        err[0] = 0;
        int pr = kvt_put(&g_c, l, key, val, 20000, NULL, err, sizeof(err));
        if (pr == 0) {
            acked++;
            continue;
        }
        cr_assert(kvt_member_running(&g_c, g_small),
                  "the follower stopped after %d puts (put error: %s)", acked, err);
        if (strstr(err, "database space exceeded"))
            refused = 1;
        else
            cr_assert_fail("put %d: unexpected error: %s", i, err);
    }
    fprintf(stderr, "  %d puts acknowledged before the no-space refusal\n", acked);
    cr_assert(refused, "no put was refused in 10000 (the tmpfs never filled?)");
    cr_assert(kvt_member_running(&g_c, g_small), "the follower on the full disk stopped");

    /* Listed on every member, with the follower's id. */
    char want[64];
    snprintf(want, sizeof(want), "memberID:%" PRIu64 " alarm:NOSPACE", small_id);
    for (int i = 0; i < g_c.n; i++) {
        kvt_cmd_result res;
        cr_assert_eq(kvt_ctl(&g_c, i, 20000, &res, "alarm", "list", NULL), 0);
        cr_assert(res.exit_code == 0 && strstr(res.out, want), "alarm list on %s: %s%s (want %s)",
                  g_c.m[i].name, res.out, res.err, want);
        kvt_cmd_result_free(&res);
    }
    /* The follower still serves what it has. */
    cr_assert_geq(cl_wait_value(&g_c, g_small, "/full/first", "v1", 1, 20000), 0);
    char *log = NULL;
    cr_assert_eq(kvt_member_log(&g_c, g_small, 65536, &log), 0);
    cr_assert_not_null(strstr(log, "raised through the leader"), "%s", log);
    cr_assert_null(strstr(log, "fatal"), "%s", log);
    free(log);
}
