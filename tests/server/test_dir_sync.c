/* test_dir_sync: the one directory-sync helper (server/base/dir_sync.h) that the WAL and the
 * daemon's data dir use: the parent of a path, whatever its slashes, and the syncs. */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/dir_sync.h"

static void parent_is(const char *path, const char *want)
{
    char out[64];
    cr_assert_eq(kv_dir_parent(path, out, sizeof out), 0, "%s", path);
    cr_assert_str_eq(out, want, "the parent of \"%s\"", path);
}

Test(dir_sync, the_parent_of_a_path)
{
    parent_is("a/b", "a");
    parent_is("a/b/", "a"); /* a trailing slash names b, not a file in b */
    parent_is("a/b//", "a");
    parent_is("a//b", "a");
    parent_is("/x/y/z", "/x/y");
    parent_is("/x", "/");
    parent_is("//x", "/");
    parent_is("/", "/");
    parent_is("b", ".");
    parent_is("b/", ".");
    parent_is("./b", ".");
}

Test(dir_sync, a_parent_too_long_for_the_buffer_is_refused)
{
    char out[4];
    cr_assert_eq(kv_dir_parent("abcd/e", out, sizeof out), -ENAMETOOLONG);
    cr_assert_eq(kv_dir_parent("abc/e", out, sizeof out), 0);
    cr_assert_str_eq(out, "abc");
}

Test(dir_sync, syncs_a_directory_and_its_parent)
{
    char tmpl[] = "/tmp/kvd-dirsync-XXXXXX";
    cr_assert_not_null(mkdtemp(tmpl));
    char sub[64];
    snprintf(sub, sizeof sub, "%s/d/", tmpl);
    cr_assert_eq(mkdir(sub, 0700), 0);
    cr_assert_eq(kv_dir_fsync(sub), 0);
    cr_assert_eq(kv_dir_fsync_parent(sub), 0);
    char missing[80];
    snprintf(missing, sizeof missing, "%s/none/x", tmpl);
    cr_assert_eq(kv_dir_fsync_parent(missing), -ENOENT);
    char file[80];
    snprintf(file, sizeof file, "%s/f", tmpl);
    FILE *f = fopen(file, "w");
    cr_assert_not_null(f);
    fclose(f);
    cr_assert_eq(kv_dir_fsync(file), -ENOTDIR, "a file is not a directory");
    unlink(file);
    rmdir(sub);
    rmdir(tmpl);
}
