/* kv_env_merge (server/common/envmerge.h): a child's environment built before the fork. */
#include "common/envmerge.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

extern char **environ;

static const char *find(char **env, const char *name)
{
    size_t nl = strlen(name);
    const char *hit = NULL;
    for (size_t i = 0; env[i]; i++)
        if (strncmp(env[i], name, nl) == 0 && env[i][nl] == '=') {
            cr_assert_null(hit, "%s appears twice", name);
            hit = env[i] + nl + 1;
        }
    return hit;
}

static size_t count(char **env)
{
    size_t n = 0;
    while (env[n])
        n++;
    return n;
}

Test(envmerge, replaces_appends_and_removes)
{
    cr_assert_eq(setenv("KVT_EM_A", "old", 1), 0);
    cr_assert_eq(setenv("KVT_EM_B", "keep", 1), 0);
    cr_assert_eq(setenv("KVT_EM_GONE", "x", 1), 0);
    size_t before = count(environ);
    const char *add[] = {"KVT_EM_A=new", "KVT_EM_C=added", "KVT_EM_GONE", "KVT_EM_NONE", NULL};
    char **env = kv_env_merge(add);
    cr_assert_not_null(env);
    cr_assert_str_eq(find(env, "KVT_EM_A"), "new");
    cr_assert_str_eq(find(env, "KVT_EM_B"), "keep");
    cr_assert_str_eq(find(env, "KVT_EM_C"), "added");
    cr_assert_null(find(env, "KVT_EM_GONE"));
    cr_assert_null(find(env, "KVT_EM_NONE"));
    cr_assert_eq(count(env), before, "one replaced, one added, one removed: %zu vs %zu", count(env),
                 before);
    /* a prefix of a name is another name */
    const char *add2[] = {"KVT_EM=short", NULL};
    char **env2 = kv_env_merge(add2);
    cr_assert_str_eq(find(env2, "KVT_EM_A"), "old");
    cr_assert_str_eq(find(env2, "KVT_EM"), "short");
    free(env2);
    free(env);
    /* nothing to add: a copy of environ */
    char **same = kv_env_merge(NULL);
    cr_assert_eq(count(same), count(environ));
    for (size_t i = 0; environ[i]; i++)
        cr_assert_eq(same[i], environ[i]);
    free(same);
}
