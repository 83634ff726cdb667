/*
 * crash_powercut_model: the power-cut model of directory operations, on a temp dir (no kvd).
 * pcdirops (a script of file and directory operations) runs under the powercut shim, then
 * kv_pc_replay loses power and the test looks at what is left. This is the control for the
 * directory half of the model: a file written and fsynced, but whose directory was not,
 * vanishes in a rollback-all replay; a rename, an unlink or a mkdir without the parent's
 * fsync is undone (the unlinked file comes back from the graveyard with its synced content);
 * a later fsync of the parent makes each of them stay; the subset mode keeps a prefix.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pcjournal.h"
#include "pcmember.h"
#include "kvt_util.h"

#ifndef KV_PCDIROPS_BIN
#error "KV_PCDIROPS_BIN must name the pcdirops helper"
#endif

typedef struct pcm {
    char root[PATH_MAX];
    char dir[PATH_MAX + 16];
    char journal[PATH_MAX + 16];
    char path[PATH_MAX + 64];
} pcm;

static void pcm_init(pcm *t)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(t->root, sizeof t->root, "%.900s/pcmodel-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    cr_assert(mkdtemp(t->root), "mkdtemp: %s", strerror(errno));
    snprintf(t->dir, sizeof t->dir, "%s/data", t->root);
    snprintf(t->journal, sizeof t->journal, "%s/journal", t->root);
    cr_assert_eq(mkdir(t->dir, 0700), 0); /* made before the shim: durable */
}

static void pcm_fini(pcm *t)
{
    cr_assert_eq(kvt_rmtree(t->root), 0);
}

/* Runs pcdirops with ops (NULL-terminated) in t->dir under the shim. Returns its wait status. */
static int pcm_run(pcm *t, uint64_t kill_at, const char *const *ops)
{
    const char *argv[32] = {KV_PCDIROPS_BIN};
    int n = 1;
    for (; ops[n - 1] && n < 31; n++)
        argv[n] = ops[n - 1];
    argv[n] = NULL;
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        char ka[32];
        snprintf(ka, sizeof ka, "%" PRIu64, kill_at);
        setenv("LD_PRELOAD", kv_pc_shim_path(), 1);
        setenv("POWERCUT_DIR", t->dir, 1);
        setenv("POWERCUT_JOURNAL", t->journal, 1);
        setenv("POWERCUT_KILL_AT", ka, 1);
        const char *asan = getenv("ASAN_OPTIONS");
        char asan_new[1024];
        snprintf(asan_new, sizeof asan_new, "%s%sverify_asan_link_order=0", asan ? asan : "",
                 asan && *asan ? ":" : "");
        setenv("ASAN_OPTIONS", asan_new, 1);
        if (chdir(t->dir) == 0)
            execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    int status = 0;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    return status;
}

static void pcm_ok(pcm *t, const char *const *ops)
{
    int st = pcm_run(t, 0, ops);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "pcdirops failed (status 0x%x)", st);
}

static kv_pc_stats pcm_replay(pcm *t, kv_pc_mode mode, uint64_t seed)
{
    kv_pc_stats st;
    char err[512] = "";
    int rc = kv_pc_replay(t->journal, mode, seed, &st, err, sizeof err);
    cr_assert_eq(rc, 0, "replay: %s", err);
    cr_assert_eq(st.escapes, 0, "escape: %s", st.escape);
    char graves[PATH_MAX + 64];
    snprintf(graves, sizeof graves, "%s%s", t->journal, KV_PC_GRAVES_SUFFIX);
    cr_assert(access(graves, F_OK) != 0, "the replay left the graveyard %s", graves);
    return st;
}

/* The content of dir/name, or NULL when there is no such file (static buffer). */
static const char *pcm_read(pcm *t, const char *name)
{
    static char buf[256];
    snprintf(t->path, sizeof t->path, "%s/%s", t->dir, name);
    FILE *f = fopen(t->path, "rb");
    if (!f)
        return NULL;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return buf;
}

static int pcm_exists(pcm *t, const char *name)
{
    struct stat sb;
    snprintf(t->path, sizeof t->path, "%s/%s", t->dir, name);
    return lstat(t->path, &sb) == 0;
}

#define OPS(...) ((const char *const[]){__VA_ARGS__, NULL})

Test(powercut_model, file_fsynced_but_not_its_dir_vanishes)
{
    pcm t;
    pcm_init(&t);
    pcm_ok(&t, OPS("create:f", "write:f:hello", "fsync:f"));
    kv_pc_stats st = pcm_replay(&t, KV_PC_ROLLBACK_ALL, 1);
    cr_expect(!pcm_exists(&t, "f"), "f survived: its directory entry was never synced");
    cr_expect_eq(st.dirops, 1);
    cr_expect_eq(st.dirops_undone, 1);
    pcm_fini(&t);
}

Test(powercut_model, dir_fsync_makes_the_file_stay)
{
    pcm t;
    pcm_init(&t);
    pcm_ok(&t, OPS("create:f", "write:f:hello", "fsync:f", "fsync:."));
    kv_pc_stats st = pcm_replay(&t, KV_PC_ROLLBACK_ALL, 1);
    const char *c = pcm_read(&t, "f");
    cr_expect(c && !strcmp(c, "hello"), "f: %s", c ? c : "(missing)");
    cr_expect_eq(st.dirops_durable, 1);
    cr_expect_eq(st.dirops_undone, 0);
    pcm_fini(&t);
}

Test(powercut_model, rename_without_dir_fsync_is_undone)
{
    pcm t;
    pcm_init(&t);
    pcm_ok(&t, OPS("create:a", "write:a:A", "fsync:a", "create:b", "write:b:B", "fsync:b",
                   "fsync:.", "rename:a:b"));
    pcm_replay(&t, KV_PC_ROLLBACK_ALL, 1);
    const char *a = pcm_read(&t, "a");
    cr_expect(a && !strcmp(a, "A"), "a: %s", a ? a : "(missing)");
    const char *b = pcm_read(&t, "b");
    cr_expect(b && !strcmp(b, "B"), "the file the rename replaced: %s", b ? b : "(missing)");
    pcm_fini(&t);
}

Test(powercut_model, rename_then_dir_fsync_stays)
{
    pcm t;
    pcm_init(&t);
    pcm_ok(&t, OPS("create:a", "write:a:A", "fsync:a", "fsync:.", "rename:a:b", "fsync:."));
    pcm_replay(&t, KV_PC_ROLLBACK_ALL, 1);
    cr_expect(!pcm_exists(&t, "a"));
    const char *b = pcm_read(&t, "b");
    cr_expect(b && !strcmp(b, "A"), "b: %s", b ? b : "(missing)");
    pcm_fini(&t);
}

Test(powercut_model, unlink_without_dir_fsync_comes_back_with_synced_content)
{
    pcm t;
    pcm_init(&t);
    /* The second write was never synced: the file comes back with what was. */
    pcm_ok(&t, OPS("create:f", "write:f:old", "fsync:f", "fsync:.", "write:f:new", "unlink:f"));
    pcm_replay(&t, KV_PC_ROLLBACK_ALL, 1);
    const char *c = pcm_read(&t, "f");
    cr_expect(c && !strcmp(c, "old"), "f: %s", c ? c : "(missing)");
    pcm_fini(&t);
}

Test(powercut_model, unlink_then_dir_fsync_stays)
{
    pcm t;
    pcm_init(&t);
    pcm_ok(&t, OPS("create:f", "write:f:old", "fsync:f", "fsync:.", "unlink:f", "fsync:."));
    pcm_replay(&t, KV_PC_ROLLBACK_ALL, 1);
    cr_expect(!pcm_exists(&t, "f"));
    pcm_fini(&t);
}

Test(powercut_model, mkdir_without_parent_fsync_takes_its_synced_content)
{
    pcm t;
    pcm_init(&t);
    pcm_ok(&t, OPS("mkdir:d", "create:d/f", "write:d/f:x", "fsync:d/f", "fsync:d"));
    kv_pc_stats st = pcm_replay(&t, KV_PC_ROLLBACK_ALL, 1);
    cr_expect(!pcm_exists(&t, "d"), "d survived: the data dir was never synced after mkdir");
    cr_expect_eq(st.dirops_durable, 1); /* d/f in d */
    pcm_fini(&t);
}

Test(powercut_model, rmdir_without_parent_fsync_is_undone)
{
    pcm t;
    pcm_init(&t);
    pcm_ok(&t, OPS("mkdir:d", "fsync:.", "rmdir:d"));
    pcm_replay(&t, KV_PC_ROLLBACK_ALL, 1);
    cr_expect(pcm_exists(&t, "d"));
    pcm_fini(&t);
}

Test(powercut_model, kill_before_the_dir_fsync)
{
    pcm t;
    pcm_init(&t);
    /* Tracked operations: 1 create, 2 write, 3 fsync f, 4 fsync dir: the cut before 4. */
    int st = pcm_run(&t, 4, OPS("create:f", "write:f:x", "fsync:f", "fsync:."));
    cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "status 0x%x", st);
    cr_expect(pcm_exists(&t, "f"));
    pcm_replay(&t, KV_PC_ROLLBACK_ALL, 1);
    cr_expect(!pcm_exists(&t, "f"));
    pcm_fini(&t);
}

Test(powercut_model, subset_keeps_a_prefix)
{
    int seen[4] = {0};
    for (uint64_t seed = 1; seed <= 24; seed++) {
        pcm t;
        pcm_init(&t);
        pcm_ok(&t, OPS("create:f1", "create:f2", "create:f3"));
        pcm_replay(&t, KV_PC_ROLLBACK_SUBSET, seed * 0x9e3779b97f4a7c15ull);
        int e1 = pcm_exists(&t, "f1"), e2 = pcm_exists(&t, "f2"), e3 = pcm_exists(&t, "f3");
        cr_expect(e1 >= e2 && e2 >= e3, "not a prefix: %d %d %d (seed %" PRIu64 ")", e1, e2, e3,
                  seed);
        seen[e1 + e2 + e3] = 1;
        pcm_fini(&t);
    }
    cr_expect(seen[0] && seen[3], "24 seeds never kept none or all: %d %d %d %d", seen[0], seen[1],
              seen[2], seen[3]);
}
