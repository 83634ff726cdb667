/*
 * auth_apply_util: helpers shared by the apply-level auth tests (test_auth_apply.c,
 * test_auth_leaseperm.c). Each builds one kvdpb.InternalRequest auth entry, applies it to the
 * test store t (tests/lib/kvt_store.h) at its next index and asserts the result: want 0 =
 * success, otherwise the exact gRPC code and message of that etcd error
 * (common/etcd_errors.h). Criterion assertions: call from a test only.
 */
#ifndef KV_TESTS_AUTH_APPLY_UTIL_H
#define KV_TESTS_AUTH_APPLY_UTIL_H

#include <stdint.h>

#include "kvt_store.h"
#include "common/etcd_errors.h"
#include "internal.pb-c.h"

void aau_apply(kvt_store *t, Kvdpb__InternalRequest *ir, kv_etcd_err want);
/* A user with a fixed (well-formed) hashed password. */
void aau_user_add(kvt_store *t, const char *name, kv_etcd_err want);
void aau_user_delete(kvt_store *t, const char *name, kv_etcd_err want);
void aau_grant_role(kvt_store *t, const char *user, const char *role, kv_etcd_err want);
void aau_role_add(kvt_store *t, const char *name, kv_etcd_err want);
void aau_role_delete(kvt_store *t, const char *name, kv_etcd_err want);
/* type: authpb.Permission.Type; end "" = the single key. */
void aau_role_grant(kvt_store *t, const char *role, int type, const char *key, const char *end,
                    kv_etcd_err want);
void aau_enable(kvt_store *t, kv_etcd_err want);
/* The committed auth revision. */
uint64_t aau_revision(kvt_store *t);
/* A digest of the auth database: every user and role record, the revision, the enabled flag
 * (equal digests: nothing in it changed). */
uint64_t aau_auth_digest(kvt_store *t);

#endif
