/*
 * conc_util: what the election and lock services share besides their client
 * (conc_client.h): the bound on calls in progress, the caller's authorization and identity,
 * and the key names of etcd 3.4's clientv3/concurrency (docs/ARCHITECTURE.md "Election and
 * lock").
 *
 * Bound: Campaign, Lock and Observe calls in progress on this member (they may wait
 * indefinitely) are at most --max-concurrency-waiters; past it a call is answered
 * RESOURCE_EXHAUSTED "etcdserver: too many requests" (kvd_concurrency_refused_total;
 * kvd_concurrency_waiters is the gauge).
 * Loop thread only.
 */
#ifndef KV_API_CONC_UTIL_H
#define KV_API_CONC_UTIL_H

#include "api/conc_client.h"
#include "grpc/grpc_server.h"

#include <stddef.h>
#include <stdint.h>

struct kv_api;

/* Takes one place of the bound: 0, or 1 when the call was answered RESOURCE_EXHAUSTED. */
int kv_conc_admit(kv_grpc_call *call);
/* Gives the place back (once per successful kv_conc_admit). */
void kv_conc_release(struct kv_api *s);

/* The session lease Campaign/Lock grant for lease 0 (id from kv_lessor_new_id): the lessor's
 * admission as for LeaseGrant (service_lease.c): 0, or 1 when the call was answered
 * ("etcdserver: too many leases", a full lease map). */
int kv_conc_admit_lease(kv_grpc_call *call, int64_t id);

/* One key-range permission the call needs: want is KV_PERM_READ or KV_PERM_WRITE
 * (auth/auth_perm.h); end NULL: the key alone. */
typedef struct kv_conc_perm {
    int want;
    const uint8_t *key;
    size_t klen;
    const uint8_t *end;
    size_t elen;
} kv_conc_perm;

/* Resolves the caller and checks perms (as auth_gate.c does for KV calls; nothing when auth
 * is disabled), and fills *id with the identity its proposals carry. Returns 0 to go on, or
 * 1 when the call was answered: a denied caller gets UNKNOWN "etcdserver: permission denied" /
 * "etcdserver: user name is empty" (etcd's code for a step's error, conc_client.h); an
 * invalid token is answered by kv_auth_caller_begin with its own code (api/auth_srv.h). */
int kv_conc_authorize(kv_grpc_call *call, const kv_conc_perm *perms, size_t n, kv_conc_ident *id);
/* Moves id to the auth revision of now when auth is on and the store's is newer: for the
 * member's own undo of a Campaign or Lock key (kv_conc_acquire's cleanup), which the apply
 * would otherwise refuse ("revision of auth store is old", or "user name is empty" when auth
 * was enabled meanwhile), leaving the key behind. */
void kv_conc_ident_refresh(struct kv_api *s, kv_conc_ident *id);

/* "<name>/" and the end of that prefix ("<name>0"): *pfx and *end are malloc'd, of length
 * nlen + 1 each. Returns 0 or -ENOMEM. */
int kv_conc_prefix(const uint8_t *name, size_t nlen, uint8_t **pfx, uint8_t **end);
/* "<name>/<lease in lowercase hex>" (clientv3/concurrency: fmt "%s%x"); malloc'd, length in
 * *klen. Returns 0 or -ENOMEM. */
int kv_conc_key(const uint8_t *name, size_t nlen, int64_t lease, uint8_t **key, size_t *klen);

#endif
