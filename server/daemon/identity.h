/*
 * identity: member and cluster IDs, derived exactly as etcd derives them so that the same
 * flags give the same IDs (etcd: membership.computeMemberId and RaftCluster.genID):
 *   member_id  = first 8 bytes (big-endian) of SHA-1(sorted peer URLs joined, cluster token)
 *   cluster_id = first 8 bytes (big-endian) of SHA-1(sorted member ids, 8 bytes BE each)
 */
#ifndef KV_IDENTITY_H
#define KV_IDENTITY_H

#include "daemon/config.h"

#include <stdint.h>

typedef struct kv_identity {
    uint64_t member_id; /* this member */
    uint64_t cluster_id;
    uint64_t member_ids[KV_MAX_MEMBERS]; /* in --initial-cluster order */
    size_t n_members;
} kv_identity;

/* Computes ids for every member of cfg->initial_cluster. Peer URLs of a member are the
 * initial-cluster entries that carry its name. */
int kv_identity_compute(const kv_config *cfg, kv_identity *out);

/* One member's id from its peer URLs: kv_members_compute_id (mvcc/members.h). */

#endif
