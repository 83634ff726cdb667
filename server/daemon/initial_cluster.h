/*
 * initial_cluster: --initial-cluster grouped by member name. A member may list several peer
 * URLs ("a=http://h1:2380,a=http://h2:2380,b=..."), as etcd's URLsMap; members are numbered
 * in the order their names first appear. Used for the member ids (identity.c), the bootstrap
 * member list (members_boot.c) and a joining member's lookup (members_join.c). Pure
 * functions over a parsed kv_config; any thread.
 */
#ifndef KV_INITIAL_CLUSTER_H
#define KV_INITIAL_CLUSTER_H

#include "daemon/config.h"

#include <stdbool.h>
#include <stddef.h>

/* Whether cfg->initial_cluster[i] is the first entry with its name, i.e. starts a member.
 * Precondition: i < cfg->n_initial_cluster. */
bool kv_initial_cluster_first(const kv_config *cfg, size_t i);

/* The peer URLs listed for name, in flag order, at most max of them: urls[k] points at
 * cfg->initial_cluster[...].url.text (owned by cfg). Returns how many (0: name not listed). */
size_t kv_initial_cluster_urls(const kv_config *cfg, const char *name, const char **urls,
                               size_t max);

#endif
