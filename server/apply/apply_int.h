/*
 * apply_int: private declarations shared by the files of the applier (server/apply/).
 * Not for use outside server/apply/. The contract of the entry points is in apply/apply.h.
 */
#ifndef KV_APPLY_INT_H
#define KV_APPLY_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "apply/apply.h"
#include "auth.pb-c.h"
#include "common/etcd_errors.h"
#include "internal.pb-c.h"
#include "kv.pb-c.h"
#include "mvcc/auth_store.h"
#include "mvcc/keyspace.h"
#include "mvcc/store.h"
#include "rpc.pb-c.h"

/* One entry being applied. quiet: nobody on this member waits for the response, so the
 * handlers build none (*msg stays NULL); the keyspace operations are the same. */
typedef struct kv_actx {
    kv_ks *ks;
    kv_result *res;
    bool quiet;
    uint32_t max_txn_ops;
    size_t max_key;
    uint64_t index; /* the entry's log index (apply_authn.c: the token's suffix) */
    /* operations run for this entry (counted in the batch once it commits) */
    unsigned ranges, puts, deletes;
} kv_actx;

/* Request errors (the request changes nothing): res->err = e, res->detail "". */
void kv_apply_err(kv_result *res, kv_etcd_err e);
/* res->err = e with a detail appended to e's message (printf format: " (limit %d)"). */
void kv_apply_err_detail(kv_result *res, kv_etcd_err e, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A response header with revision rev (malloc'd), NULL on -ENOMEM. */
Etcdserverpb__ResponseHeader *kv_apply_header(int64_t rev);
/* The lease must exist: 0, 1 = LEASE_NOT_FOUND set in res, < 0 storage error. */
int kv_apply_lease_exists(kv_actx *a, int64_t id);

/* Handlers of one request kind (apply_kv.c, apply_lease.c, apply_cluster.c). Each returns 0
 * (with, unless a->quiet, *msg set to the malloc'd response and *hdr to its header), 1 =
 * request error in a->res, or < 0 (storage failure, -EBADMSG corruption, -ENOMEM). */
int kv_apply_put(kv_actx *a, const Etcdserverpb__PutRequest *p, ProtobufCMessage **msg,
                 Etcdserverpb__ResponseHeader **hdr);
int kv_apply_delete(kv_actx *a, const Etcdserverpb__DeleteRangeRequest *d, ProtobufCMessage **msg,
                    Etcdserverpb__ResponseHeader **hdr);
int kv_apply_txn(kv_actx *a, const Etcdserverpb__TxnRequest *t, ProtobufCMessage **msg,
                 Etcdserverpb__ResponseHeader **hdr);
int kv_apply_compact(kv_actx *a, const Etcdserverpb__CompactionRequest *c, ProtobufCMessage **msg,
                     Etcdserverpb__ResponseHeader **hdr);
int kv_apply_lease_grant(kv_actx *a, const Etcdserverpb__LeaseGrantRequest *g,
                         ProtobufCMessage **msg, Etcdserverpb__ResponseHeader **hdr);
int kv_apply_lease_revoke(kv_actx *a, const Etcdserverpb__LeaseRevokeRequest *r,
                          ProtobufCMessage **msg, Etcdserverpb__ResponseHeader **hdr);
int kv_apply_lease_checkpoint(kv_actx *a, const Etcdserverpb__LeaseCheckpointRequest *r,
                              ProtobufCMessage **msg, Etcdserverpb__ResponseHeader **hdr);
int kv_apply_alarm(kv_actx *a, const Etcdserverpb__AlarmRequest *ar, ProtobufCMessage **msg,
                   Etcdserverpb__ResponseHeader **hdr);
int kv_apply_members(kv_actx *a, const Kvdpb__InternalRequest *ir, ProtobufCMessage **msg,
                     Etcdserverpb__ResponseHeader **hdr);
/* etcd's apply-time auth check of a Put, DeleteRange or Txn (apply_auth.c): with auth
 * enabled, the entry's auth_revision (the revision its permissions were checked at by the
 * proposing member) must be the current one. 0 ok, 1 refused (res set), < 0 storage. */
int kv_apply_auth_check(kv_actx *a, const Kvdpb__InternalRequest *ir);
/* Auth management entries (apply_auth.c): AuthEnable ... RoleRevokePermission. With auth
 * enabled each needs its auth_user to be a stored user with the root role (etcd
 * IsAdminPermitted), else it is refused and changes nothing. 0 ok, 1 refused (res set),
 * < 0 storage. */
int kv_apply_auth(kv_actx *a, const Kvdpb__InternalRequest *ir, ProtobufCMessage **msg,
                  Etcdserverpb__ResponseHeader **hdr);
/* Authenticate through the log (apply_authn.c): sets res->auth_tokens on success. */
int kv_apply_authenticate(kv_actx *a, const Kvdpb__AuthAuthenticate *r, uint64_t index,
                          ProtobufCMessage **msg, Etcdserverpb__ResponseHeader **hdr);

/* ---- apply_range.c ---- */
/* Static checks of a range request (empty key, sort options). 1 = error set in res. */
int kv_range_check(const Etcdserverpb__RangeRequest *r, kv_result *res);
/* A (validated) Range op of a txn at the request's read revision. out NULL: quiet (the range
 * still runs: a corrupt record fails the txn on every member). 0 (*out malloc'd), 1 =
 * request error in a->res, < 0 error. */
int kv_apply_range_op(kv_actx *a, const Etcdserverpb__RangeRequest *r,
                      Etcdserverpb__RangeResponse **out);

/* ---- apply_check.c: static request validation (etcd api/v3rpc/key.go) ---- */
/* etcd's checkTxnRequest + checkIntervals. maxkey: longest key a put may have.
 * 1 = error set in res, 0 ok, < 0 -ENOMEM. */
int kv_txn_check(const Etcdserverpb__TxnRequest *t, uint32_t max_ops, size_t maxkey,
                 kv_result *res);
int kv_put_check(const Etcdserverpb__PutRequest *p, size_t maxkey, kv_result *res);

/* ---- apply_gate.c: etcd's capped (NOSPACE) and corrupt appliers ---- */
/* 1 = refused (res set), 0 = go on. */
int kv_apply_gate(unsigned alarms, const Kvdpb__InternalRequest *ir, kv_result *res);
/* Test failpoint KVD_FAILPOINT_CORRUPT_PUT (apply_gate.c): may alter a Put's value. */
void kv_apply_failpoint(Kvdpb__InternalRequest *ir);
/* 1 if the request grows the store (Put, LeaseGrant, Txn with a put): what the quota and
 * NOSPACE refuse. */
int kv_apply_is_growth(const Kvdpb__InternalRequest *ir);

/* The stored user record `name` (apply_auth.c), unpacked into *out (free with
 * authpb__user__free_unpacked). 0; -ENOENT (no such user, or name empty), -EINVAL (a name
 * the store cannot hold), -EBADMSG (undecodable record), or a storage error. */
int kv_apply_auth_user(const kv_auth_tx *tx, const char *name, Authpb__User **out);

/* ---- apply_perm.c: etcd's checkLeasePuts at apply ---- */
/* With auth enabled (the caller checked; auth_rev = the current auth revision): a Put with a
 * lease, every put with a lease in a Txn (both branches, nested), or a LeaseRevoke of entry
 * ir needs its auth_user to be root or to have WRITE on every key attached to the lease.
 * 0 ok, 1 refused (res: PERMISSION_DENIED or AUTH_OLD_REVISION), < 0 storage. */
int kv_apply_lease_perm(kv_actx *a, const Kvdpb__InternalRequest *ir, uint64_t auth_rev);

#endif
