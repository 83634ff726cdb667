/*
 * cluster_membership: etcdctl member add (the new member joins with
 * --initial-cluster-state existing and catches up), member remove, member add --learner +
 * member promote, etcdctl move-leader to a chosen follower; `member list` is the same on
 * every member after each step.
 * replace_member_on_the_same_url: a failed member is replaced on the same host and port
 * (remove, wipe its data dir, etcdctl member add of the same peer URL, start it with
 * --initial-cluster-state existing and nothing else, as etcd), three times in a row: each new
 * id differs from every removed one, the joiner learns it from its peers' member list (GET
 * /members on the peer port), joins and serves; a fourth cycle passes the id with
 * --initial-member-id (the override). HashKV is equal on every member.
 * join_without_member_add_is_refused: a member started with --initial-cluster-state existing
 * whose peer URL was never added stops at once with "... are not in the cluster's member
 * list: run `member add` first"; with no peer answering it stops with "could not fetch the
 * cluster's member list from any of ...".
 * a_member_restarted_between_the_record_and_its_configuration_entry: a follower killed right
 * after it applied a member add's record entry (failpoint) applies the configuration entry
 * after its restart with the record it staged, and lists the new member like the others.
 */
#include "cl_util.h"

#include <criterion/criterion.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static kvt_cluster g_c;    /* fixture of the running test */
static int g_learner = -1; /* a learner rejects MemberList (etcd 3.4): not asked */

static void fini(void)
{
    kvt_cluster_destroy(&g_c);
}

/* Runs etcdctl through every running configured member; asserts exit 0; returns stdout
 * (caller frees). */
static char *ctl_ok(const char *what, const char *a1, const char *a2, const char *a3,
                    const char *a4)
{
    kvt_cmd_result res;
    int r = kvt_ctl(&g_c, -1, 20000, &res, a1, a2, a3, a4, NULL);
    cr_assert_eq(r, 0, "%s: spawn %d", what, r);
    cr_assert_eq(res.exit_code, 0, "%s: exit %d: %s%s", what, res.exit_code, res.out, res.err);
    free(res.err);
    return res.out;
}

static int cmp_lines(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* `member list` through member i, lines sorted and joined; *count receives the line count. */
static char *member_list(int i, int *count)
{
    kvt_cmd_result res;
    if (kvt_ctl(&g_c, i, 10000, &res, "member", "list", NULL) != 0)
        return NULL;
    if (res.exit_code != 0) {
        kvt_cmd_result_free(&res);
        return NULL;
    }
    char *lines[32];
    int n = 0;
    for (char *save = NULL, *t = strtok_r(res.out, "\n", &save); t && n < 32;
         t = strtok_r(NULL, "\n", &save))
        lines[n++] = t;
    qsort(lines, (size_t)n, sizeof(lines[0]), cmp_lines);
    char *out = calloc(1, res.out_len + (size_t)n + 1);
    for (int k = 0; out && k < n; k++) {
        strcat(out, lines[k]);
        strcat(out, "\n");
    }
    kvt_cmd_result_free(&res);
    *count = n;
    return out;
}

/* Waits until every running configured member lists the same `want` members, all
 * "started", and the listing contains `must` (may be NULL). */
static void wait_member_lists(int want, const char *must)
{
    uint64_t deadline = kvt_now_ms() + 20000;
    char *last = NULL;
    for (;;) {
        free(last);
        last = NULL;
        int same = 1;
        for (int i = 0; i < g_c.n && same; i++) {
            if (!g_c.m[i].in_config || !kvt_member_running(&g_c, i) || i == g_learner)
                continue;
            int cnt = 0;
            char *l = member_list(i, &cnt);
            same = l && cnt == want && !strstr(l, "unstarted") && (!must || strstr(l, must)) &&
                   (!last || strcmp(l, last) == 0);
            free(last);
            last = l;
        }
        if (same) {
            fprintf(stderr, "  member list on every member:\n%s", last);
            free(last);
            return;
        }
        if (kvt_now_ms() >= deadline) {
            fprintf(stderr, "  member list never settled; last seen:\n%s\n",
                    last ? last : "(none)");
            free(last);
            cr_assert_fail("member list not consistent with %d started members", want);
        }
        kvt_sleep_ms(200);
    }
}

/* Adds a member in a new slot *j (etcdctl member add [--learner] through member `via`, or
 * every running member when via < 0), starts it with --initial-cluster-state existing;
 * returns its id. etcd refuses a new member ("unhealthy
 * cluster") until every member has been connected for 5 s: retried for 30 s. */
static uint64_t add_member(int *j, int learner, int via)
{
    cr_assert_eq(kvt_cluster_add_slot(&g_c, j), 0);
    kvt_member *m = &g_c.m[*j];
    char purl[80];
    snprintf(purl, sizeof(purl), "--peer-urls=%s", m->peer_url);
    uint64_t t0 = kvt_now_ms(), id = 0;
    for (;;) {
        kvt_cmd_result res;
        int r = kvt_ctl(&g_c, via, 20000, &res, "member", "add", m->name, purl,
                        learner ? "--learner" : NULL, NULL);
        cr_assert_eq(r, 0);
        if (res.exit_code == 0) {
            const char *p = strstr(res.out, "Member ");
            cr_assert(p && sscanf(p, "Member %" SCNx64, &id) == 1, "member add output: %s",
                      res.out);
            kvt_cmd_result_free(&res);
            break;
        }
        if (kvt_now_ms() - t0 > 30000)
            cr_assert_fail("member add: exit %d: %s%s", res.exit_code, res.out, res.err);
        kvt_cmd_result_free(&res);
        kvt_sleep_ms(500);
    }
    fprintf(stderr, "  member add %s%s accepted after %" PRIu64 " ms\n", m->name,
            learner ? " --learner" : "", kvt_now_ms() - t0);
    m->in_config = 1;
    t0 = kvt_now_ms();
    cr_assert_eq(kvt_member_start(&g_c, *j), 0);
    cr_assert_eq(kvt_member_wait_ready(&g_c, *j, 30000), 0, "%s did not start", m->name);
    fprintf(stderr, "  %s (%" PRIx64 ") serving %" PRIu64 " ms after its start\n", m->name, id,
            kvt_now_ms() - t0);
    return id;
}

Test(cluster_membership, add_remove_learner_move_leader, .fini = fini, .timeout = 300)
{
    cr_assert_eq(cl_start(&g_c, 3, 0), 0);
    int l = kvt_cluster_wait_leader(&g_c, 10000, NULL);
    cr_assert_geq(l, 0);
    char err[256];
    cr_assert_eq(kvt_put(&g_c, l, "/mem/k", "before-add", 5000, NULL, err, sizeof(err)), 0, "%s",
                 err);
    wait_member_lists(3, NULL);

    /* Add a 4th voting member; it catches up. */
    int j = -1;
    uint64_t id = add_member(&j, 0, -1);
    int w = cl_wait_value(&g_c, j, "/mem/k", "before-add", 1, 30000);
    cr_assert_geq(w, 0, "the added member did not catch up");
    fprintf(stderr, "  %s caught up in %d ms\n", g_c.m[j].name, w);
    cr_assert_eq(kvt_put(&g_c, j, "/mem/k", "through-m3", 5000, NULL, err, sizeof(err)), 0,
                 "put through the added member: %s", err);
    wait_member_lists(4, g_c.m[j].name);

    /* Remove it. */
    char hex[32];
    snprintf(hex, sizeof(hex), "%" PRIx64, id);
    g_c.m[j].in_config = 0;
    free(ctl_ok("member remove", "member", "remove", hex, NULL));
    if (kvt_proc_wait(&g_c.m[j].proc, 10000) == 0)
        fprintf(stderr, "  removed member %s exited by itself\n", g_c.m[j].name);
    kvt_member_kill9(&g_c, j);
    wait_member_lists(3, NULL);
    l = kvt_cluster_wait_leader(&g_c, 10000, NULL);
    cr_assert_geq(l, 0);
    cr_assert_eq(kvt_put(&g_c, l, "/mem/k", "after-remove", 5000, NULL, err, sizeof(err)), 0, "%s",
                 err);

    /* Learner, then promote (retried until the learner is in sync). */
    int ln = -1;
    uint64_t lid = add_member(&ln, 1, -1);
    g_learner = ln;
    wait_member_lists(4, "true");
    cr_assert_geq(cl_wait_value(&g_c, ln, "/mem/k", "after-remove", 1, 30000), 0,
                  "the learner did not catch up");
    /* etcd 3.4 on a learner: a serializable Range (above) and Status are served; a write or
     * a linearizable Range is refused UNAVAILABLE, so that clients move on */
    cr_assert_neq(kvt_put(&g_c, ln, "/mem/k", "through-learner", 5000, NULL, err, sizeof(err)), 0,
                  "a learner took a write");
    cr_assert(strstr(err, "etcdserver: rpc not supported for learner"), "put: %s", err);
    char val[64];
    int found = -1;
    err[0] = 0;
    cr_assert_neq(
        kvt_get(&g_c, ln, "/mem/k", 0, 5000, val, sizeof val, &found, NULL, err, sizeof err), 0,
        "a learner served a linearizable read");
    cr_assert(strstr(err, "etcdserver: rpc not supported for learner"), "get: %s", err);
    /* the same through the HTTP gateway, whose calls are in-process */
    char url[128];
    snprintf(url, sizeof url, "http://%s/v3/kv/put", g_c.m[ln].endpoint);
    const char *put_argv[] = {"/usr/bin/curl",
                              "-sS",
                              "--max-time",
                              "10",
                              "-X",
                              "POST",
                              "-d",
                              "{\"key\":\"bWVt\",\"value\":\"Z3c=\"}",
                              url,
                              NULL};
    kvt_cmd_result hr;
    cr_assert_eq(kvt_run(put_argv, NULL, NULL, 0, 20000, &hr), 0);
    int refused = strstr(hr.out, "rpc not supported for learner") != NULL;
    fprintf(stderr, "  gateway put on the learner: %s%s\n", hr.out, hr.err);
    kvt_cmd_result_free(&hr);
    cr_assert(refused, "the learner took a write through the HTTP gateway");
    kvt_status lst;
    cr_assert_eq(kvt_member_status(&g_c, ln, &lst, 5000), 0, "Status on the learner");
    snprintf(hex, sizeof(hex), "%" PRIx64, lid);
    uint64_t t0 = kvt_now_ms();
    for (;;) {
        kvt_cmd_result res;
        cr_assert_eq(kvt_ctl(&g_c, -1, 20000, &res, "member", "promote", hex, NULL), 0);
        int ok = res.exit_code == 0;
        if (!ok && kvt_now_ms() - t0 > 20000)
            cr_assert_fail("member promote: %s%s", res.out, res.err);
        kvt_cmd_result_free(&res);
        if (ok)
            break;
        kvt_sleep_ms(200);
    }
    g_learner = -1;
    fprintf(stderr, "  learner %s promoted after %" PRIu64 " ms\n", g_c.m[ln].name,
            kvt_now_ms() - t0);
    wait_member_lists(4, NULL);
    int cnt = 0;
    char *list = member_list(ln, &cnt);
    cr_assert_not_null(list);
    cr_assert_null(strstr(list, "true"), "a learner is still listed: %s", list);
    free(list);

    /* Leader transfer to a chosen follower (the promoted member). */
    l = kvt_cluster_wait_leader(&g_c, 10000, NULL);
    cr_assert_geq(l, 0);
    int t = l == ln ? cl_other(&g_c, l, -1) : ln;
    snprintf(hex, sizeof(hex), "%" PRIx64, g_c.m[t].id);
    t0 = kvt_now_ms();
    free(ctl_ok("move-leader", "move-leader", hex, NULL, NULL));
    int nl = -1;
    while (kvt_now_ms() - t0 < 10000 && (nl = kvt_cluster_leader(&g_c)) != t)
        kvt_sleep_ms(20);
    cr_assert_eq(nl, t, "leader is %d after move-leader to %s", nl, g_c.m[t].name);
    fprintf(stderr, "  leadership moved %s -> %s in %" PRIu64 " ms\n", g_c.m[l].name, g_c.m[t].name,
            kvt_now_ms() - t0);
    cr_assert_eq(kvt_put(&g_c, t, "/mem/k", "after-move", 5000, NULL, err, sizeof(err)), 0, "%s",
                 err);
    for (int i = 0; i < g_c.n; i++)
        if (g_c.m[i].in_config)
            cr_assert_geq(cl_wait_value(&g_c, i, "/mem/k", "after-move", 0, 10000), 0);
    wait_member_lists(4, NULL);
    cl_assert_hash_equal(&g_c, t);
}

/* Value of an unlabelled metric of member i, -1 if absent. */
static double member_metric(int i, const char *series)
{
    char *body = NULL;
    cr_assert_eq(kvt_member_metrics(&g_c, i, &body), 0);
    double v = -1;
    if (kvt_metric_value(body, series, &v) != 0)
        v = -1;
    free(body);
    return v;
}

/* A member that joins after the log holding configuration changes was compacted gets the
 * membership from the snapshot (raft's ConfState and the member table travel in it): it lists
 * the right members, counts in the quorum, can lead, and restarts from its installed state. */
/* A member add is two entries: the record (peer URLs), then the configuration entry the
 * leader proposes once the first applied. A follower killed between the two (failpoint
 * KVD_FAILPOINT_MEMBER_STAGED, right after the commit that applied the record) restarts and
 * applies the configuration entry with the record it staged in its store. When the record
 * lived only in memory, the restarted member refused the configuration entry ("member not
 * found") and its member list lacked the new member for good: it never dialed it. */
Test(cluster_membership, a_member_restarted_between_the_record_and_its_configuration_entry,
     .fini = fini, .timeout = 300)
{
    cr_assert_eq(cl_start(&g_c, 3, 0), 0);
    int l = kvt_cluster_wait_leader(&g_c, 10000, NULL);
    cr_assert_geq(l, 0);
    int f = cl_other(&g_c, l, -1);
    cr_assert_geq(f, 0);
    kvt_member_kill9(&g_c, f);
    const char *env[2] = {"KVD_FAILPOINT_MEMBER_STAGED=kill", NULL};
    g_c.m[f].env = env;
    cr_assert_eq(kvt_member_start(&g_c, f), 0);
    cr_assert_eq(kvt_member_wait_ready(&g_c, f, 30000), 0, "%s did not start", g_c.m[f].name);
    wait_member_lists(3, NULL);
    /* Not through f: etcdctl would retry the add on another member once f died at the
     * failpoint, and that member refuses it while f is down ("unhealthy cluster"). */
    int j = -1;
    add_member(&j, 0, l);
    int waited = cl_wait_exit(&g_c, f, 30000);
    g_c.m[f].env = NULL;
    cr_assert_geq(waited, 0, "%s was not killed at the failpoint", g_c.m[f].name);
    cr_assert(cl_log_has(&g_c, f, "failpoint: killed after staging a member record"),
              "%s died, but not at the failpoint", g_c.m[f].name);
    cr_assert_eq(kvt_member_start(&g_c, f), 0);
    cr_assert_eq(kvt_member_wait_ready(&g_c, f, 30000), 0, "%s did not restart", g_c.m[f].name);
    wait_member_lists(4, g_c.m[j].name);
    cl_assert_hash_equal(&g_c, l);
}

Test(cluster_membership, joiner_gets_membership_from_a_snapshot, .fini = fini, .timeout = 300)
{
    cr_assert_eq(cl_start(&g_c, 3, 20), 0); /* --snapshot-count 20: the log compacts soon */
    int l = kvt_cluster_wait_leader(&g_c, 10000, NULL);
    cr_assert_geq(l, 0);
    char err[256], key[32], hex[32];
    /* Two configuration entries: add a voter, then remove it. */
    int j = -1;
    uint64_t id = add_member(&j, 0, -1);
    snprintf(hex, sizeof(hex), "%" PRIx64, id);
    g_c.m[j].in_config = 0;
    free(ctl_ok("member remove", "member", "remove", hex, NULL));
    (void)kvt_proc_wait(&g_c.m[j].proc, 10000);
    kvt_member_kill9(&g_c, j);
    wait_member_lists(3, NULL);
    /* Enough writes that every member compacts its log past both entries. */
    for (int k = 0; k < 200; k++) {
        snprintf(key, sizeof(key), "/snapconf/%03d", k);
        l = kvt_cluster_wait_leader(&g_c, 10000, NULL);
        cr_assert_eq(kvt_put(&g_c, l, key, "v", 5000, NULL, err, sizeof(err)), 0, "%s", err);
    }
    /* The joiner cannot be sent those entries: it must install a snapshot. */
    int n = -1;
    add_member(&n, 0, -1);
    cr_assert_geq(cl_wait_value(&g_c, n, "/snapconf/199", "v", 1, 30000), 0,
                  "the joiner did not catch up");
    double installs = member_metric(n, "kvd_snapshot_installs_total");
    fprintf(stderr, "  joiner %s installed %.0f snapshot(s)\n", g_c.m[n].name, installs);
    cr_assert_geq(installs, 1, "the joiner caught up without a snapshot: the test proves nothing");
    wait_member_lists(4, g_c.m[n].name);
    int cnt = 0;
    char *list = member_list(n, &cnt);
    cr_assert_eq(cnt, 4, "joiner's member list: %s", list);
    cr_assert_null(strstr(list, hex), "the removed member %s is back in: %s", hex, list);
    free(list);
    /* It counts in the quorum and can lead. */
    cr_assert_eq(kvt_cluster_move_leader(&g_c, n, 10000, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(kvt_put(&g_c, n, "/snapconf/led", "by-joiner", 5000, NULL, err, sizeof(err)), 0,
                 "%s", err);
    /* With one original member down, the remaining 3 of 4 (joiner included) are a quorum. */
    int down = cl_other(&g_c, n, -1);
    cr_assert_geq(down, 0);
    kvt_member_kill9(&g_c, down);
    l = kvt_cluster_wait_leader(&g_c, 10000, NULL);
    cr_assert_geq(l, 0);
    cr_assert_eq(kvt_put(&g_c, l, "/snapconf/quorum", "3of4", 5000, NULL, err, sizeof(err)), 0,
                 "no quorum without %s: %s", g_c.m[down].name, err);
    /* The joiner restarts from its installed snapshot and log. */
    cr_assert_eq(kvt_member_restart(&g_c, n, 30000), 0);
    cr_assert_geq(cl_wait_value(&g_c, n, "/snapconf/quorum", "3of4", 0, 30000), 0);
    int rr = kvt_member_restart(&g_c, down, 30000);
    if (rr != 0) {
        char *log = NULL;
        (void)kvt_member_log(&g_c, down, 8192, &log);
        cr_assert_fail("restart of %s: %d; its log:\n%s", g_c.m[down].name, rr, log ? log : "");
    }
    wait_member_lists(4, NULL);
    cl_assert_hash_equal(&g_c, n);
}

Test(cluster_membership, replace_member_on_the_same_url, .fini = fini, .timeout = 600)
{
    cr_assert_eq(cl_start(&g_c, 3, 0), 0);
    int l = kvt_cluster_wait_leader(&g_c, 10000, NULL);
    cr_assert_geq(l, 0);
    int j = l == 2 ? 1 : 2; /* a follower */
    kvt_member *m = &g_c.m[j];
    kvt_status st;
    cr_assert_eq(kvt_member_status(&g_c, j, &st, 10000), 0);
    uint64_t ids[5] = {st.id};
    char err[256], hex[32], purl[80], idarg[64];
    snprintf(purl, sizeof(purl), "--peer-urls=%s", m->peer_url);
    const char *args[] = {idarg, NULL};
    wait_member_lists(3, NULL);
    for (int cycle = 1; cycle <= 4; cycle++) {
        /* remove, stop, wipe */
        snprintf(hex, sizeof(hex), "%" PRIx64, ids[cycle - 1]);
        m->in_config = 0;
        free(ctl_ok("member remove", "member", "remove", hex, NULL));
        (void)kvt_proc_wait(&m->proc, 10000);
        kvt_member_kill9(&g_c, j);
        cr_assert_eq(kvt_rmtree(m->data_dir), 0, "remove %s", m->data_dir);
        wait_member_lists(2, NULL);
        /* add the same peer URL again (retried while the cluster settles) */
        uint64_t t0 = kvt_now_ms(), id = 0;
        for (;;) {
            kvt_cmd_result res;
            cr_assert_eq(kvt_ctl(&g_c, -1, 20000, &res, "member", "add", m->name, purl, NULL), 0);
            if (res.exit_code == 0) {
                const char *p = strstr(res.out, "Member ");
                cr_assert(p && sscanf(p, "Member %" SCNx64, &id) == 1, "member add: %s", res.out);
                kvt_cmd_result_free(&res);
                break;
            }
            if (kvt_now_ms() - t0 > 30000)
                cr_assert_fail("cycle %d: member add of %s: exit %d: %s%s", cycle, m->peer_url,
                               res.exit_code, res.out, res.err);
            kvt_cmd_result_free(&res);
            kvt_sleep_ms(500);
        }
        for (int k = 0; k < cycle; k++)
            cr_assert_neq(id, ids[k], "cycle %d: the new id %" PRIx64 " was removed before", cycle,
                          id);
        ids[cycle] = id;
        fprintf(stderr, "  cycle %d: %s re-added as %" PRIx64 "\n", cycle, m->name, id);
        /* start it as a joiner: it learns its id from the cluster's member list (cycles
         * 1-3, as etcd), or is told with --initial-member-id (cycle 4, the override) */
        snprintf(idarg, sizeof(idarg), "--initial-member-id=%" PRIx64, id);
        m->args = cycle == 4 ? args : NULL;
        m->join = 1;
        m->in_config = 1;
        m->id = 0;
        cr_assert_eq(kvt_member_start(&g_c, j), 0);
        int rdy = kvt_member_wait_ready(&g_c, j, 60000);
        if (rdy != 0) {
            char *log = NULL;
            (void)kvt_member_log(&g_c, j, 8192, &log);
            cr_assert_fail("cycle %d: %s did not start: %d; its log:\n%s", cycle, m->name, rdy,
                           log ? log : "");
        }
        kvt_status js;
        cr_assert_eq(kvt_member_status(&g_c, j, &js, 10000), 0);
        cr_assert_eq(js.id, id, "cycle %d: joined as %" PRIx64 ", member add gave %" PRIx64, cycle,
                     js.id, id);
        char key[32], val[32];
        snprintf(key, sizeof(key), "/replace/%d", cycle);
        snprintf(val, sizeof(val), "v%d", cycle);
        l = kvt_cluster_wait_leader(&g_c, 20000, NULL);
        cr_assert_geq(l, 0);
        cr_assert_eq(kvt_put(&g_c, l, key, val, 10000, NULL, err, sizeof(err)), 0, "%s", err);
        cr_assert_geq(cl_wait_value(&g_c, j, key, val, 0, 30000), 0,
                      "cycle %d: the re-added member does not serve %s", cycle, key);
        cr_assert_eq(kvt_put(&g_c, j, key, "through-it", 10000, NULL, err, sizeof(err)), 0,
                     "cycle %d: put through the re-added member: %s", cycle, err);
        wait_member_lists(3, NULL);
    }
    cl_assert_hash_equal(&g_c, j);
}

/* Waits up to 30 s for member j to exit; asserts a non-zero status and that its log holds
 * want. */
static void assert_refused(int j, const char *want)
{
    int w = kvt_proc_wait(&g_c.m[j].proc, 30000);
    char *log = NULL;
    (void)kvt_member_log(&g_c, j, 16384, &log);
    int st = g_c.m[j].proc.last_status;
    cr_assert(w == 0 && WIFEXITED(st) && WEXITSTATUS(st) != 0,
              "the joiner did not stop with an error (wait %d, status %d); its log:\n%s", w, st,
              log ? log : "");
    cr_assert(log && strstr(log, want), "the joiner's log lacks \"%s\":\n%s", want, log ? log : "");
    const char *last = strstr(log, "kvd: refusing");
    for (const char *q = last; q; q = strstr(q + 1, "kvd: refusing"))
        last = q;
    fprintf(stderr, "  joiner refused as expected:\n%s", last ? last : "");
    free(log);
}

Test(cluster_membership, join_without_member_add_is_refused, .fini = fini, .timeout = 300)
{
    cr_assert_eq(cl_start(&g_c, 3, 0), 0);
    cr_assert_geq(kvt_cluster_wait_leader(&g_c, 10000, NULL), 0);
    int j;
    cr_assert_eq(kvt_cluster_add_slot(&g_c, &j), 0); /* never `member add`ed */
    g_c.m[j].in_config = 1;
    cr_assert_eq(kvt_member_start(&g_c, j), 0);
    assert_refused(j, "are not in the cluster's member list: run `member add` first");
    /* nobody answers: every member of its --initial-cluster is down */
    for (int i = 0; i < 3; i++)
        cr_assert_eq(kvt_member_kill9(&g_c, i), 0);
    kvt_cmd_result rr;
    const char *rm[] = {"/bin/rm", "-rf", g_c.m[j].data_dir, NULL};
    cr_assert_eq(kvt_run(rm, NULL, NULL, 0, 20000, &rr), 0);
    kvt_cmd_result_free(&rr);
    cr_assert_eq(kvt_member_start(&g_c, j), 0);
    assert_refused(j, "could not fetch the cluster's member list from any of ");
}

/* etcd's "start one, then add members": a single member listens on its peer URLs from the
 * start, so `member add` grows it to three, and the joiners get the data written before. */
Test(cluster_membership, one_member_grows_to_three, .fini = fini, .timeout = 300)
{
    cr_assert_eq(cl_start(&g_c, 1, 0), 0);
    int l = kvt_cluster_wait_leader(&g_c, 10000, NULL);
    cr_assert_eq(l, 0);
    char err[256];
    cr_assert_eq(kvt_put(&g_c, 0, "/grow/k", "from-one", 5000, NULL, err, sizeof(err)), 0, "%s",
                 err);
    int j1 = -1, j2 = -1;
    add_member(&j1, 0, -1);
    wait_member_lists(2, NULL);
    cr_assert_geq(cl_wait_value(&g_c, j1, "/grow/k", "from-one", 1, 30000), 0,
                  "the first joiner does not have the key written before it");
    add_member(&j2, 0, -1);
    wait_member_lists(3, NULL);
    l = kvt_cluster_wait_leader(&g_c, 10000, NULL);
    cr_assert_geq(l, 0);
    cr_assert_eq(kvt_put(&g_c, l, "/grow/k2", "from-three", 5000, NULL, err, sizeof(err)), 0, "%s",
                 err);
    for (int i = 0; i < g_c.n; i++)
        cr_assert_geq(cl_wait_value(&g_c, i, "/grow/k2", "from-three", 1, 30000), 0,
                      "m%d does not have the write made by three members", i + 1);
}
