/*
 * kvfunctional: the functional (fault-injection) suite runner; functional/run wraps it.
 * Usage: see usage() and README.md. Exit status: 0 when no case failed, 1 otherwise,
 * 2 on a usage or setup error.
 */
#include "cases.h"
#include "kvt_util.h"

#include <errno.h>
#include <regex.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *f)
{
    fprintf(f, "usage: kvfunctional [--cases REGEX] [--profile quick|full] [--members 1|3|5]\n"
               "                    [--seed N] [--target kvd|etcd] [--keep] [--lease-load N]\n"
               "                    [--proxies N]\n"
               "                    [--inject-bug stale-read|lease-vanish|lease-outlive|\n"
               "                                  lease-lag|lease-stale-renew|\n"
               "                                  drop-watch-event|server-drop-watch-event]\n"
               "                    [--list] [--check-history FILE] [--check-watch FILE]\n");
}

/* Runs a case with its stdout captured, then prints its line with the watch verdict
 * (watch.c fills *ws while the workload stops) inserted before "live=": the case line is
 * written by cases.c, which this hook leaves alone. A failing watch check fails the case. */
static kv_fn_result run_case(const kv_fn_case *k, kv_fn_cluster *c, const kv_fn_run_opts *o,
                             kv_fn_watch_sink *ws)
{
    ws->checked = 0;
    fflush(stdout);
    FILE *tmp = tmpfile();
    int saved = tmp ? dup(1) : -1;
    if (saved < 0 || dup2(fileno(tmp), 1) < 0) {
        if (saved >= 0)
            close(saved);
        if (tmp)
            fclose(tmp);
        kv_fn_result res = kv_fn_case_run(k, c, o);
        printf("    watch=%s %s\n", ws->checked ? kv_fn_verdict_name(ws->verdict) : "-",
               ws->checked && ws->verdict != KV_FN_PASS ? ws->report : "");
        return ws->checked && ws->verdict != KV_FN_PASS ? KV_FN_RES_FAIL : res;
    }
    kv_fn_result res = kv_fn_case_run(k, c, o);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    long len = ftell(tmp) >= 0 ? (fseek(tmp, 0, SEEK_END), ftell(tmp)) : 0;
    char *out = len > 0 ? malloc((size_t)len + 1) : NULL;
    size_t got = 0;
    if (out) {
        rewind(tmp);
        got = fread(out, 1, (size_t)len, tmp);
        out[got] = '\0';
    }
    fclose(tmp);
    int wfail = ws->checked && ws->verdict != KV_FN_PASS;
    char *nl = out ? strchr(out, '\n') : NULL;
    char *live = out ? strstr(out, " live=") : NULL;
    if (!out || !nl || !live || live > nl) { /* not the expected line: print as is */
        fputs(out ? out : "", stdout);
        printf("    watch=%s %s\n", ws->checked ? kv_fn_verdict_name(ws->verdict) : "-",
               wfail ? ws->report : "");
    } else {
        char *st = strstr(out, " PASS  ");
        if (wfail && st && st < nl)
            memcpy(st + 1, "FAIL", 4);
        fwrite(out, 1, (size_t)(live - out), stdout);
        printf(" watch=%s", ws->checked ? kv_fn_verdict_name(ws->verdict) : "-");
        fwrite(live, 1, (size_t)(nl + 1 - live), stdout);
        if (wfail)
            printf("    watch: %s\n", ws->report);
        if (wfail && ws->path[0])
            printf("    watch history: %s (replay: functional/run --check-watch FILE)\n", ws->path);
        fputs(nl + 1, stdout);
    }
    free(out);
    fflush(stdout);
    return wfail ? KV_FN_RES_FAIL : res;
}

int main(int argc, char **argv)
{
    const char *cases_re = NULL, *profile = "quick", *target = "kvd", *check = NULL;
    const char *check_watch = NULL;
    kv_fn_watch_sink wsink = {0};
    int server_drop = 0;
    int members = 3, list = 0, lease_load = -1; /* -1: the profile's default */
    int proxies = 0; /* gRPC proxies in front of the members (gproxy.c) */
    kv_fn_run_opts o = {.seed = 1,
                        .pre_ms = 1500,
                        .hold_ms = 3000,
                        .post_ms = 1500,
                        .live_bound_ms = 20000,
                        .lin_budget_ms = 20000,
                        .lease_slack_us = 3000000};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--cases") && val) {
            cases_re = val;
            i++;
        } else if (!strcmp(a, "--profile") && val) {
            profile = val;
            i++;
        } else if (!strcmp(a, "--members") && val) {
            members = atoi(val);
            i++;
        } else if (!strcmp(a, "--seed") && val) {
            o.seed = strtoull(val, NULL, 10);
            i++;
        } else if (!strcmp(a, "--target") && val) {
            target = val;
            i++;
        } else if (!strcmp(a, "--check-history") && val) {
            check = val;
            i++;
        } else if (!strcmp(a, "--check-watch") && val) {
            check_watch = val;
            i++;
        } else if (!strcmp(a, "--inject-bug") && val) {
            if (!strcmp(val, "drop-watch-event"))
                wsink.inject_drop = 1;
            else if (!strcmp(val, "server-drop-watch-event"))
                server_drop = 1;
            else if (!strcmp(val, "stale-read"))
                o.inject = KV_FN_INJECT_STALE_READ;
            else if (!strcmp(val, "lease-vanish"))
                o.inject = KV_FN_INJECT_LEASE_VANISH;
            else if (!strcmp(val, "lease-outlive"))
                o.inject = KV_FN_INJECT_LEASE_OUTLIVE;
            else if (!strcmp(val, "lease-lag"))
                o.inject = KV_FN_INJECT_LEASE_LAG;
            else if (!strcmp(val, "lease-stale-renew"))
                o.inject = KV_FN_INJECT_LEASE_STALE_RENEW;
            else {
                usage(stderr);
                return 2;
            }
            i++;
        } else if (!strcmp(a, "--proxies") && val) {
            proxies = atoi(val);
            i++;
        } else if (!strcmp(a, "--lease-load") && val) {
            lease_load = atoi(val);
            i++;
        } else if (!strcmp(a, "--keep")) {
            o.keep_all = 1;
        } else if (!strcmp(a, "--list")) {
            list = 1;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else {
            usage(stderr);
            return 2;
        }
    }
    if (check_watch)
        return kv_fn_watch_file_check(check_watch, wsink.inject_drop);
    if (check)
        return kv_fn_check_file(check, &o);
    int full = !strcmp(profile, "full");
    if (!full && strcmp(profile, "quick")) {
        usage(stderr);
        return 2;
    }
    if (lease_load < 0)
        lease_load = full ? 20000 : 0;
    if (full) {
        o.pre_ms = 3000;
        o.hold_ms = 6000;
        o.post_ms = 3000;
    }
    kv_fn_target t;
    if (!strcmp(target, "kvd"))
        t = KV_FN_TARGET_KVD;
    else if (!strcmp(target, "etcd"))
        t = KV_FN_TARGET_ETCD;
    else {
        usage(stderr);
        return 2;
    }
    if (members < 1 || members > KV_FN_MAX_MEMBERS || members % 2 == 0) {
        fprintf(stderr, "kvfunctional: --members must be 1, 3 or 5\n");
        return 2;
    }
    if (proxies < 0 || proxies > KV_FN_MAX_PROXIES) {
        fprintf(stderr, "kvfunctional: --proxies must be 0..%d\n", KV_FN_MAX_PROXIES);
        return 2;
    }
    if (server_drop) { /* kvd's watch failpoint (server/watch/watch_failpoint.c) */
        if (t != KV_FN_TARGET_KVD) {
            fprintf(stderr, "kvfunctional: server-drop-watch-event needs --target kvd\n");
            return 2;
        }
        setenv("KVD_FAILPOINT_WATCH_DROP_EVENT", "300", 1);
    }
    if (t == KV_FN_TARGET_KVD) { /* kvd's disk failpoints, off until signalled (cases.h) */
        char ms[16];
        snprintf(ms, sizeof(ms), "%u", KV_FN_SLOW_FSYNC_MS);
        setenv("KVD_FAILPOINT_FSYNC_DELAY_MS", ms, 1);
        setenv("KVD_FAILPOINT_FSYNC_EIO", "1", 1);
        /* the peer delay failpoint for DELAY / RANDOM_DELAY cases (cases.h) */
        setenv("KVD_FAILPOINT_PEER_DELAY_MS", KV_FN_PEER_DELAY, 1);
        setenv("KVD_FAILPOINT_PEER_RANDOM_DELAY_MS", KV_FN_PEER_RANDOM_DELAY, 1);
    }
    regex_t re;
    if (cases_re && regcomp(&re, cases_re, REG_EXTENDED | REG_NOSUB) != 0) {
        fprintf(stderr, "kvfunctional: bad --cases regex\n");
        return 2;
    }
    const kv_fn_case *sel[64];
    size_t n_sel = 0;
    for (size_t i = 0; i < kv_fn_n_cases && n_sel < 64; i++) {
        const kv_fn_case *k = &kv_fn_cases[i];
        if (cases_re ? regexec(&re, k->name, 0, NULL, 0) == 0 : (full || k->quick))
            sel[n_sel++] = k;
    }
    if (cases_re)
        regfree(&re);
    if (list) {
        for (size_t i = 0; i < n_sel; i++)
            printf("%s\n", sel[i]->name);
        return 0;
    }
    signal(SIGPIPE, SIG_IGN);
    char prefix[64];
    snprintf(prefix, sizeof(prefix), "kvfunctional-%s", target);
    kvt_tmpdir run_dir; /* under $TMPDIR; removed at the end unless kept (below) */
    int trc = kvt_tmpdir_create(&run_dir, prefix);
    if (trc) {
        fprintf(stderr, "kvfunctional: temp dir: %s\n", strerror(-trc));
        return 2;
    }
    const char *root = run_dir.path;
    o.root = root;
    printf("kvfunctional: target=%s members=%d proxies=%d profile=%s seed=%llu cases=%zu dir=%s\n",
           target, members, proxies, profile, (unsigned long long)o.seed, n_sel, root);
    fflush(stdout);
    static kv_fn_cluster c;
    int r = kv_fn_cluster_init(&c, t, members, root, o.seed);
    if (r == 0)
        r = kv_fn_proxies_init(&c, proxies);
    for (size_t i = 0; i < n_sel; i++) /* _UNTIL_TRIGGER_SNAPSHOT: snapshot often */
        if (sel[i]->until_snapshot)
            c.snapshot_count = KV_FN_SNAPSHOT_COUNT;
    char pc_lib[1024];
    const char *pe = getenv("KV_POWERCUT_SO"), *bd = getenv("KV_BUILD_DIR");
    snprintf(pc_lib, sizeof(pc_lib), "%s/tests/crash/libkvd_powercut.so", bd && *bd ? bd : "build");
    if (pe && *pe)
        snprintf(pc_lib, sizeof(pc_lib), "%s", pe);
    o.powercut_lib = access(pc_lib, R_OK) == 0 ? pc_lib : NULL;
    if (r) {
        fprintf(stderr, "kvfunctional: cluster setup failed: %s (binary %s)\n", strerror(-r),
                c.bin);
        kv_fn_cluster_stop(&c);
        return 2;
    }
    wsink.root = root;
    wsink.keep_all = o.keep_all;
    c.watch = &wsink;
    int passed = 0, failed = 0, skipped = 0;
    const char *all_skip = NULL;
    r = kv_fn_cluster_start(&c, 30000);
    if (r == -ENOTSUP && t == KV_FN_TARGET_KVD && members > 1 &&
        strstr(c.start_error, "multi-member")) {
        all_skip = "multi-member kvd not available";
        printf("kvd refused to start: %s\n", c.start_error);
    } else if (r) {
        printf("kvfunctional: cluster did not start: %s %s\n", strerror(-r), c.start_error);
        kv_fn_cluster_stop(&c);
        printf("0 passed, %zu failed\n", n_sel);
        printf("kept: %s\n", root);
        return 1;
    }
    if (!all_skip && proxies > 0 && (r = kv_fn_proxies_start(&c, 20000)) != 0) {
        printf("kvfunctional: the gRPC proxies did not start: %s (logs: %s/p*/proxy.log)\n",
               strerror(-r), root);
        kv_fn_cluster_stop(&c);
        printf("0 passed, %zu failed\nkept: %s\n", n_sel, root);
        return 1;
    }
    kv_fn_leaseload *ll = NULL;
    if (!all_skip && lease_load > 0) {
        char lerr[256] = "";
        r = kv_fn_leaseload_start(&ll, &c, lease_load, 20, 5000, 5000, lerr, sizeof(lerr));
        if (r) {
            printf("kvfunctional: %s (%d)\n", lerr, r);
            kv_fn_cluster_stop(&c);
            printf("0 passed, %zu failed\nkept: %s\n", n_sel, root);
            return 1;
        }
        uint64_t kept, lost, resp;
        int ncl;
        double gs;
        kv_fn_leaseload_counts(ll, &kept, &lost, &resp, &ncl, &gs);
        printf("lease-load: %llu leases (TTL 20 s) kept alive on %d connections, granted in "
               "%.1fs\n",
               (unsigned long long)kept, ncl, gs);
        fflush(stdout);
        o.leaseload = ll;
    }
    for (size_t i = 0; i < n_sel; i++) {
        const char *why = all_skip ? all_skip : kv_fn_case_skip_reason(sel[i], &c);
        if (why) {
            printf("%-42s SKIP  %s\n", sel[i]->name, why);
            fflush(stdout);
            skipped++;
            continue;
        }
        kv_fn_result res = run_case(sel[i], &c, &o, &wsink);
        if (res == KV_FN_RES_PASS)
            passed++;
        else if (res == KV_FN_RES_SKIP)
            skipped++;
        else
            failed++;
    }
    kv_fn_leaseload_free(ll);
    kv_fn_cluster_stop(&c);
    if (failed || o.keep_all)
        printf("kept: %s (member data dirs and logs, histories of failed cases)\n", root);
    else
        kvt_tmpdir_destroy(&run_dir); /* also kept with KV_TEST_KEEP_DIRS=1 */
    if (skipped)
        printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    else
        printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
