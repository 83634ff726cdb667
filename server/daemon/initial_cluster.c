/* initial_cluster: --initial-cluster grouped by member name (see initial_cluster.h). */
#include "daemon/initial_cluster.h"

#include <string.h>

bool kv_initial_cluster_first(const kv_config *cfg, size_t i)
{
    for (size_t j = 0; j < i; j++)
        if (strcmp(cfg->initial_cluster[j].name, cfg->initial_cluster[i].name) == 0)
            return false;
    return true;
}

size_t kv_initial_cluster_urls(const kv_config *cfg, const char *name, const char **urls,
                               size_t max)
{
    size_t n = 0;
    for (size_t j = 0; j < cfg->n_initial_cluster && n < max; j++)
        if (strcmp(cfg->initial_cluster[j].name, name) == 0)
            urls[n++] = cfg->initial_cluster[j].url.text;
    return n;
}
