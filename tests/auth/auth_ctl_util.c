/* auth_ctl_util: see auth_ctl_util.h. */
#include "auth_ctl_util.h"

#include <stdio.h>
#include <string.h>

int acu_argv(const char *cmd, char *buf, size_t cap, const char **argv, int n, int max)
{
    snprintf(buf, cap, "%s", cmd);
    for (char *save = NULL, *w = strtok_r(buf, " ", &save); w && n < max - 1;
         w = strtok_r(NULL, " ", &save))
        argv[n++] = w;
    argv[n] = NULL;
    return n;
}

void acu_output(const char *out, const char *err, char *dst, size_t cap)
{
    size_t o = 0;
    dst[0] = 0;
    const char *parts[2] = {out, err};
    for (int p = 0; p < 2; p++)
        for (const char *line = parts[p]; line && *line;) {
            const char *nl = strchr(line, '\n');
            size_t len = nl ? (size_t)(nl - line + 1) : strlen(line);
            if (strncmp(line, "{\"level\"", 8) != 0 && o + len < cap) {
                memcpy(dst + o, line, len);
                o += len;
                dst[o] = 0;
            }
            line += len;
        }
}
