/*
 * members_join: how a member joining an existing cluster learns its own id, as etcd 3.4 does
 * (etcdserver/cluster_util.go getClusterFromRemotePeers + membership
 * ValidateClusterAndAssignIDs): before it serves anything it asks the peers of
 * --initial-cluster (itself excluded) for GET <peer URL>/members over HTTP/1.1 on the peer
 * port (served by server/peer/peer_h1.c as etcd's JSON: [{"id":N,"peerURLs":[...],"name":..,
 * "clientURLs":[..],"isLearner":true}]) and takes the id of the member whose peer URLs are its
 * own. `member add` may have drawn that id (a removed member's URL: service_cluster.c
 * new_member_id), so it cannot be derived from the flags (docs/ARCHITECTURE.md "Membership").
 *
 * Bounds: each peer gets KV_MEMBERS_JOIN_TIMEOUT_MS (connect, TLS handshake, request and
 * answer), the answer at most KV_MEMBERS_JOIN_MAX_BYTES. Threads: kv_members_join_lookup
 * blocks (sockets with poll deadlines): call it before the loop runs, as etcd does before it
 * starts its server. The JSON functions run on any thread.
 */
#ifndef KV_MEMBERS_JOIN_H
#define KV_MEMBERS_JOIN_H

#include "daemon/config.h"
#include "daemon/identity.h"
#include "internal.pb-c.h"

#include <stddef.h>
#include <stdint.h>

#define KV_MEMBERS_JOIN_TIMEOUT_MS 10000 /* per peer, as etcd's 10 s */
#define KV_MEMBERS_JOIN_MAX_BYTES (1 << 20)

struct kv_tls_ctx;

/* etcd's JSON of the member list (etcd 3.4 membership.Member): ids as JSON numbers, name and
 * clientURLs omitted when empty, isLearner only when true. *out is malloc'd ('\0'-terminated,
 * *len bytes without it). 0 or -ENOMEM. */
int kv_members_json(const Kvdpb__Member *const *m, size_t n, char **out, size_t *len);

/* Parses that JSON (unknown fields are skipped). *out: a malloc'd array of *n members
 * (kv_store_members_free). 0, -EINVAL (not a JSON array of members, or over the limits of
 * mvcc/members.h) or -ENOMEM. */
int kv_members_parse_json(const char *json, size_t len, Kvdpb__Member ***out, size_t *n);

/* The member of m[0..n) whose peer URLs are exactly urls[0..n_urls) (any order), or NULL. */
const Kvdpb__Member *kv_members_match_urls(Kvdpb__Member *const *m, size_t n,
                                           const char *const *urls, size_t n_urls);

/* Asks the --initial-cluster peers other than cfg->name, in order, for their member list
 * (tls_client: for https peer URLs; may be NULL) and sets id->member_id to the id of the
 * member whose peer URLs are this member's (--initial-advertise-peer-urls, else its
 * --initial-cluster entries); every other --initial-cluster member found by its URLs gets its
 * listed id in id->member_ids. Blocks up to KV_MEMBERS_JOIN_TIMEOUT_MS per peer URL.
 * Returns 0; -EHOSTUNREACH when no peer answered ("could not fetch the cluster's member list
 * from any of <urls>: ..." in err); -ENOENT when the list lacks this member ("this member's
 * peer URLs <...> are not in the cluster's member list: run `member add` first"). */
int kv_members_join_lookup(const kv_config *cfg, struct kv_tls_ctx *tls_client, kv_identity *id,
                           char *err, size_t errlen);

#endif
