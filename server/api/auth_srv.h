/*
 * auth_srv: this member's auth runtime state and the resolution of a
 * call's caller. The replicated state (enabled flag, auth revision, users, roles) is in LMDB
 * (mvcc/auth_store.h, changed only by applied log entries, server/apply/apply_auth.c); what
 * lives here is per member, as in etcd:
 *   - simple tokens (auth/auth_tokens.h), with a 1 s sweep timer. Tokens are replicated
 *     through the log (etcd 3.4): every member inserts the token of each applied
 *     Authenticate entry and drops them all on an applied AuthDisable (kv_auth_on_applied,
 *     the node's auth hook), so a token is valid on every member that applied its entry;
 *     TTL and renewals are per member; the table is memory only (lost on restart);
 *   - the password hash workers: one niced thread (node/read_pool.h) fed one job at a time
 *     from a fair queue (auth/auth_fairq.h) bounded by --auth-max-pending-hashes (beyond:
 *     RESOURCE_EXHAUSTED "etcdserver: too many requests"), so PBKDF2 never runs on the loop,
 *     a flood of Authenticate calls cannot delay keepalives, and connections that keep
 *     sending wrong passwords rank behind every other login (docs/ARCHITECTURE.md
 *     "Authentication").
 * Metrics: kvd_auth_hash_pending, kvd_auth_hash_refused_total, kvd_auth_hash_evicted_total,
 * kvd_auth_failing_connections, kvd_auth_tokens, kvd_auth_tokens_refused_total.
 *
 * Caller resolution (etcd AuthInfoFromCtx + AuthInfoFromTLS): when auth is enabled, the
 * "token" (or "authorization") metadata names a simple token; an unknown or expired token,
 * or one whose user was deleted or whose password changed since, is UNAUTHENTICATED
 * "etcdserver: invalid auth token". Without a token and with --client-cert-auth, the verified
 * client certificate's CN is the user name. Otherwise the caller is anonymous (checks then
 * fail with "etcdserver: user name is empty", as etcd).
 *
 * Threads: loop thread only (the hash workers run only the hash functions on job memory).
 */
#ifndef KV_API_AUTH_SRV_H
#define KV_API_AUTH_SRV_H

#include "auth/auth_jwt.h"
#include "common/list.h"
#include "auth/auth_perm.h"
#include "auth/auth_tokens.h"
#include "mvcc/auth_store.h"
#include "grpc/grpc_server.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

struct kv_api;
struct kv_read_pool;
typedef struct kv_auth_job kv_auth_job;
typedef struct kv_auth_read kv_auth_read;

typedef struct kv_auth {
    struct kv_api *srv;
    kv_auth_tokens *tokens;
    /* --auth-token jwt,...: tokens are signed JWTs (auth/auth_jwt.h), verified statelessly;
     * the table above then only carries an applied Authenticate to its completion
     * (service_auth.c on_authenticated). NULL: simple tokens. */
    kv_jwt *jwt;
    struct kv_read_pool *hash_pool;
    uv_timer_t *sweep;
    uint32_t iterations;
    kv_list jobs;                /* kv_auth_job: hash jobs not completed (their calls may be
                                    cancelled), newest first */
    struct kv_auth_fairq *fairq; /* hash jobs waiting for the worker (service_auth.c) */
    uint32_t running;            /* jobs handed to hash_pool, done not yet run (0 or 1) */
    int closing;                 /* kv_auth_stop under way: nothing more is handed over */
    uint64_t hashes_evicted;     /* kvd_auth_hash_evicted_total (also in hashes_refused) */
    kv_list reads; /* kv_auth_read: calls waiting for the ReadIndex barrier (service_auth.c),
                      newest first */
    uint64_t hashes_refused;    /* kvd_auth_hash_refused_total */
    uint64_t tokens_refused;    /* kvd_auth_tokens_refused_total */
    struct kv_metrics *metrics; /* borrowed; NULL = none */
    /* The caller of the gated KV write being handled (set by auth_gate.c around the method's
     * on_message, read by kv_propose_unary): proposed with the entry, re-checked at apply. */
    char cur_user[KV_AUTH_MAX_NAME + 1];
    uint64_t cur_revision; /* 0 = none */
    /* The gated call being handled passed its gate (set around the method's on_message, read
     * by read_req.c) at auth generation cur_gen (node.h kv_node_auth_generation): a read
     * served after a barrier at another generation is checked again (kv_auth_recheck). */
    bool cur_gated;
    uint64_t cur_gen;
    /* The gated call being handled is a linearizable Range the gate refused (anonymous, or
     * no read permission): etcd (v3_server.go Range) answers that refusal only after the
     * ReadIndex barrier, so a token-less read through a member that cannot serve is answered
     * "request timed out" or "no leader", not "user name is empty" (the grpc-proxy's probe
     * relies on it). Set around the method's on_message; the Range takes the barrier path
     * (service_kv.c) and read_req.c checks again after it (kv_auth_recheck). */
    bool cur_denied;
} kv_auth;

/* Starts the state (tokens, hash worker, sweep timer) from srv->cfg. 0 or negative errno. */
int kv_auth_start(struct kv_api *srv, kv_auth **out);
/* Stops it: queued hash jobs complete as cancelled, the running one is joined; tokens
 * freed; the timer handle is freed in its close callback (run the loop afterwards). */
void kv_auth_stop(kv_auth *a);

/* The resolved caller of one call. */
typedef struct kv_auth_caller {
    bool enabled;                    /* auth is enabled (committed state); false: no checks apply */
    bool anonymous;                  /* no token, no certificate user */
    bool found;                      /* the user record exists */
    bool root;                       /* the user has the root role */
    char user[KV_AUTH_MAX_NAME + 1]; /* NUL-terminated */
    kv_auth_perm *perms;             /* the user's permissions over all its roles (malloc'd) */
    size_t n_perms;
    void **roles; /* unpacked authpb.Role records the perms point into */
    size_t n_roles;
    uint64_t revision; /* auth revision read */
    char **user_roles; /* the user's role names, as granted (malloc'd copies) */
    size_t n_user_roles;
} kv_auth_caller;

/* Resolves the caller of call. 0: go on (c filled, free with kv_auth_caller_end); 1: the
 * call was answered with an error (invalid token, storage error). */
int kv_auth_caller_begin(kv_grpc_call *call, kv_auth_caller *c);
/* The same without answering: 0 (c filled, free with kv_auth_caller_end), or the
 * kv_etcd_err the call gets (c holds nothing to free). */
int kv_auth_caller_open(kv_grpc_call *call, kv_auth_caller *c);
void kv_auth_caller_end(kv_auth_caller *c);
/* Key-range check (auth/auth_perm.h semantics; root may do everything). */
bool kv_auth_caller_may(const kv_auth_caller *c, int want, const uint8_t *key, size_t klen,
                        const uint8_t *end, size_t elen);
/* The error a denied key request gets: "user name is empty" for an anonymous caller,
 * "permission denied" otherwise (etcd isOpPermitted). */
int kv_auth_caller_deny_err(const kv_auth_caller *c);
/* etcd IsAdminPermitted: 0 if allowed (auth disabled, or the caller has the root role),
 * else the kv_etcd_err to answer. */
int kv_auth_caller_admin_err(const kv_auth_caller *c);

/* Answers every hash job still waiting in the fair queue "etcdserver: server stopped" and
 * frees it (kv_auth_stop, after the worker closed). service_auth.c. */
void kv_auth_jobs_drain(kv_auth *a);

/* Unlinks the calls waiting for the read barrier from a (kv_auth_stop: their barrier
 * completes later, when the node closes). service_auth.c. */
void kv_auth_reads_detach(kv_auth *a);

/* The node's auth hook (node/node.h kv_node_set_auth_hook; arg: the kv_api, registered
 * by daemon/server.c): on every member, for an applied Authenticate entry (kind
 * KV_RESULT_AUTH_ASSIGN) the token "<simple_token>.<index>" is put in this member's table with
 * the entry's user and password tag and this member's TTL; for an applied AuthDisable
 * (KV_RESULT_AUTH_CLEAR) every token is dropped. A full table (--auth-max-tokens) leaves the
 * token invalid here (kvd_auth_tokens_refused_total). Loop thread. */
void kv_auth_on_applied(void *arg, int kind, uint64_t index, const uint8_t *entry, size_t len);

/* etcd 3.4 checks a linearizable Range's permission after its ReadIndex barrier
 * (v3_server.go doSerialize): the gate of call's method (auth_gate.c) again, on the state this
 * member applied by then, so a token or permission an acknowledged write took away is refused
 * through a follower too. 0: go on; 1: answered with the error. Loop thread. */
int kv_auth_recheck(kv_grpc_call *call, const uint8_t *msg, size_t len);

/* Admin gate for a call: 0 go on, 1 answered. */
int kv_auth_require_admin(kv_grpc_call *call);
/* The same, and the caller an auth management entry is proposed as (etcd's request header,
 * InternalRequest auth_user / auth_revision, checked again at apply by apply_auth.c): the
 * user into user[0..cap) ("" with auth disabled) and the auth revision read into *revision,
 * never 0 (0 marks an older member's entry, which the apply does not check). On 1 (answered)
 * both are "" and 0. */
int kv_auth_require_admin_as(kv_grpc_call *call, char *user, size_t cap, uint64_t *revision);

/* Wraps the on_message of every method that etcd 3.4 authorizes (KV, Watch create,
 * LeaseRevoke, admin Maintenance/Cluster calls, token validity for other writes) in
 * methods[0..n) (services.c) with the check of auth_gate.c. */
void kv_auth_wrap_methods(kv_grpc_method *methods, size_t n);

#endif
