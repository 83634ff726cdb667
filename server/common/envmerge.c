/* envmerge: the environment of a command about to be started (see envmerge.h). */
#include "common/envmerge.h"

#include <stdlib.h>
#include <string.h>

extern char **environ;

char **kv_env_merge(const char *const *add)
{
    size_t n = 0, k = 0;
    while (environ && environ[n])
        n++;
    while (add && add[k])
        k++;
    char **env = calloc(n + k + 1, sizeof *env);
    if (!env)
        return NULL;
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        const char *eq = strchr(environ[i], '=');
        size_t nl = eq ? (size_t)(eq - environ[i]) : strlen(environ[i]);
        int replaced = 0;
        for (size_t j = 0; j < k && !replaced; j++)
            replaced = strncmp(add[j], environ[i], nl) == 0 && (add[j][nl] == '=' || !add[j][nl]);
        if (!replaced)
            env[m++] = environ[i];
    }
    for (size_t j = 0; j < k; j++)
        if (strchr(add[j], '=')) /* a bare "NAME" only removes NAME */
            env[m++] = (char *)add[j];
    env[m] = NULL;
    return env;
}
