/*
 * fncluster: member replacement, snapshot save/restore and metrics of the functional suite's
 * cluster (implemented in cluster.c, next to the rest of kv_fn_cluster). Main thread only.
 * Functions return 0 or a negative errno unless stated otherwise.
 */
#ifndef KV_FN_CLUSTER_H
#define KV_FN_CLUSTER_H

#include "fn.h"

#include <stddef.h>
#include <stdint.h>

/* Maintenance.Status of member i: its leader's id and its raft index (either may be NULL);
 * also refreshes c->m[i].member_id. */
int kv_fn_member_status(kv_fn_cluster *c, int i, uint32_t timeout_ms, uint64_t *leader,
                        uint64_t *raft_index);
/* Highest raft index reported by a running member, 0 if none answers. */
uint64_t kv_fn_cluster_raft_index(kv_fn_cluster *c, uint32_t timeout_ms);
/* Cluster.MemberRemove of member i (c->m[i].member_id must be known) through any other
 * running member, retried until timeout_ms (a new leader may still be being elected); err
 * gets the last refusal. */
int kv_fn_cluster_member_remove(kv_fn_cluster *c, int i, uint32_t timeout_ms, char *err,
                                size_t errlen);
/* Cluster.MemberAdd of member i on a new peer URL (a fresh proxy port: kvd never re-admits
 * a removed id, and ids derive from the URLs) through any other running member,
 * retried until timeout_ms; sets c->m[i].member_id to the new id and c->m[i].existing. */
int kv_fn_cluster_member_add(kv_fn_cluster *c, int i, uint32_t timeout_ms, char *err,
                             size_t errlen);
/* Deletes member i's data directory (the member must not be running). */
int kv_fn_member_wipe(kv_fn_cluster *c, int i);
/* `<ctl> snapshot save <path>` against member i; err gets the tool's stderr on failure. */
int kv_fn_member_snapshot_save(kv_fn_cluster *c, int i, const char *path, char *err, size_t errlen);
/* `<ctl> snapshot restore <path>` into member i's (absent) data directory, as member m<i> of
 * a new cluster of all c->n members; the next start is --initial-cluster-state=new. */
int kv_fn_member_snapshot_restore(kv_fn_cluster *c, int i, const char *path, char *err,
                                  size_t errlen);
/* Sum of the samples of the metrics named in names (NULL-terminated; a sample matches when
 * its name equals one of them, labels ignored) on member i's /metrics; negative errno when
 * the page cannot be fetched. */
int64_t kv_fn_member_metric(kv_fn_cluster *c, int i, const char *const *names);
/* The same on gRPC proxy i's --metrics-addr (-ESRCH when it is not running). */
int64_t kv_fn_proxy_metric(kv_fn_cluster *c, int i, const char *const *names);

#endif
