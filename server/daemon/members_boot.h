/*
 * members_boot: the initial membership of a member's store, from its flags.
 *
 * The initial members are the --initial-cluster entries grouped by name (a member may list
 * several peer URLs), with the ids of kv_identity_compute (etcd's NewClusterFromURLsMap): name
 * and peer URLs set, no client URLs (a member publishes them once it is serving), not
 * learners. Loop thread (or before the loop runs); no batch may be open.
 */
#ifndef KV_MEMBERS_BOOT_H
#define KV_MEMBERS_BOOT_H

#include "daemon/config.h"
#include "daemon/identity.h"
#include "internal.pb-c.h"
#include "mvcc/store.h"

#include <stddef.h>

/* Builds the initial member list: *out is a malloc'd array of *n malloc'd members, freed with
 * kv_store_members_free (mvcc/members.h). 0 or -ENOMEM / -EINVAL. */
int kv_members_from_config(const kv_config *cfg, const kv_identity *id, Kvdpb__Member ***out,
                           size_t *n);

/* Writes the initial members into an empty members table in a batch of its own
 * (kv_store_members_bootstrap: idempotent, a restart changes nothing). Returns 1 if written,
 * 0 if the table was already initialised, < 0 on error. */
int kv_members_bootstrap_config(kv_store *st, const kv_config *cfg, const kv_identity *id);

/* The packed kvdpb.InternalRequest member_publish of this member (etcd's publish: its id, its
 * name and its advertised client URLs), which the node proposes once it has a leader so that
 * every member lists this one as started with its client URLs. *out is malloc'd (the caller
 * owns it, e.g. passes it to kv_node_propose). 0 or -ENOMEM. */
int kv_members_publish_request(const kv_config *cfg, const kv_identity *id, uint8_t **out,
                               size_t *len);

#endif
