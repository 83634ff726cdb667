/* auth_apply_util: see auth_apply_util.h. */
#include "auth_apply_util.h"

#include <criterion/criterion.h>
#include <stdlib.h>

#include "auth.pb-c.h"
#include "auth/auth_tokens.h"
#include "mvcc/auth_store.h"
#include "rpc.pb-c.h"

void aau_apply(kvt_store *t, Kvdpb__InternalRequest *ir, kv_etcd_err want)
{
    kv_result r;
    kvt_store_apply(t, ir, &r);
    if (want == 0)
        cr_assert_eq(KVT_STORE_CODE(r), 0, "unexpected error %d: %s", KVT_STORE_CODE(r),
                     KVT_STORE_MSG(r));
    else {
        cr_assert_eq(KVT_STORE_CODE(r), kv_etcd_err_code(want), "code %d (%s)", KVT_STORE_CODE(r),
                     KVT_STORE_MSG(r));
        cr_assert_str_eq(KVT_STORE_MSG(r), kv_etcd_err_msg(want));
    }
    free(r.resp);
}

void aau_user_add(kvt_store *t, const char *name, kv_etcd_err want)
{
    Etcdserverpb__AuthUserAddRequest u = ETCDSERVERPB__AUTH_USER_ADD_REQUEST__INIT;
    u.name = (char *)name;
    u.hashed_password = "pbkdf2-sha256$1000$00$00";
    Kvdpb__InternalRequest ir = KVDPB__INTERNAL_REQUEST__INIT;
    ir.request_case = KVDPB__INTERNAL_REQUEST__REQUEST_AUTH_USER_ADD;
    ir.auth_user_add = &u;
    aau_apply(t, &ir, want);
}

void aau_user_delete(kvt_store *t, const char *name, kv_etcd_err want)
{
    Etcdserverpb__AuthUserDeleteRequest r = ETCDSERVERPB__AUTH_USER_DELETE_REQUEST__INIT;
    r.name = (char *)name;
    Kvdpb__InternalRequest ir = KVDPB__INTERNAL_REQUEST__INIT;
    ir.request_case = KVDPB__INTERNAL_REQUEST__REQUEST_AUTH_USER_DELETE;
    ir.auth_user_delete = &r;
    aau_apply(t, &ir, want);
}

void aau_grant_role(kvt_store *t, const char *user, const char *role, kv_etcd_err want)
{
    Etcdserverpb__AuthUserGrantRoleRequest g = ETCDSERVERPB__AUTH_USER_GRANT_ROLE_REQUEST__INIT;
    g.user = (char *)user;
    g.role = (char *)role;
    Kvdpb__InternalRequest ir = KVDPB__INTERNAL_REQUEST__INIT;
    ir.request_case = KVDPB__INTERNAL_REQUEST__REQUEST_AUTH_USER_GRANT_ROLE;
    ir.auth_user_grant_role = &g;
    aau_apply(t, &ir, want);
}

void aau_role_add(kvt_store *t, const char *name, kv_etcd_err want)
{
    Etcdserverpb__AuthRoleAddRequest r = ETCDSERVERPB__AUTH_ROLE_ADD_REQUEST__INIT;
    r.name = (char *)name;
    Kvdpb__InternalRequest ir = KVDPB__INTERNAL_REQUEST__INIT;
    ir.request_case = KVDPB__INTERNAL_REQUEST__REQUEST_AUTH_ROLE_ADD;
    ir.auth_role_add = &r;
    aau_apply(t, &ir, want);
}

void aau_role_delete(kvt_store *t, const char *name, kv_etcd_err want)
{
    Etcdserverpb__AuthRoleDeleteRequest r = ETCDSERVERPB__AUTH_ROLE_DELETE_REQUEST__INIT;
    r.role = (char *)name;
    Kvdpb__InternalRequest ir = KVDPB__INTERNAL_REQUEST__INIT;
    ir.request_case = KVDPB__INTERNAL_REQUEST__REQUEST_AUTH_ROLE_DELETE;
    ir.auth_role_delete = &r;
    aau_apply(t, &ir, want);
}

void aau_role_grant(kvt_store *t, const char *role, int type, const char *key, const char *end,
                    kv_etcd_err want)
{
    Authpb__Permission p = AUTHPB__PERMISSION__INIT;
    p.permtype = (Authpb__Permission__Type)type;
    p.key = kvt_bin(key);
    p.range_end = kvt_bin(end);
    Etcdserverpb__AuthRoleGrantPermissionRequest g =
        ETCDSERVERPB__AUTH_ROLE_GRANT_PERMISSION_REQUEST__INIT;
    g.name = (char *)role;
    g.perm = &p;
    Kvdpb__InternalRequest ir = KVDPB__INTERNAL_REQUEST__INIT;
    ir.request_case = KVDPB__INTERNAL_REQUEST__REQUEST_AUTH_ROLE_GRANT_PERMISSION;
    ir.auth_role_grant_permission = &g;
    aau_apply(t, &ir, want);
}

void aau_enable(kvt_store *t, kv_etcd_err want)
{
    Etcdserverpb__AuthEnableRequest e = ETCDSERVERPB__AUTH_ENABLE_REQUEST__INIT;
    Kvdpb__InternalRequest ir = KVDPB__INTERNAL_REQUEST__INIT;
    ir.request_case = KVDPB__INTERNAL_REQUEST__REQUEST_AUTH_ENABLE;
    ir.auth_enable = &e;
    aau_apply(t, &ir, want);
}

uint64_t aau_revision(kvt_store *t)
{
    kv_auth_tx tx;
    cr_assert_eq(kv_store_auth_read_begin(t->s, &tx), 0);
    uint64_t r = 0;
    cr_assert_eq(kv_auth_get_revision(&tx, &r), 0);
    kv_store_auth_read_end(&tx);
    return r;
}

static int fold(void *arg, const uint8_t *name, size_t nlen, const uint8_t *val, size_t vlen)
{
    uint64_t *h = arg;
    *h = *h * 31 + kv_auth_pwtag(name, nlen);
    *h = *h * 31 + kv_auth_pwtag(val, vlen);
    return 0;
}

uint64_t aau_auth_digest(kvt_store *t)
{
    kv_auth_tx tx;
    cr_assert_eq(kv_store_auth_read_begin(t->s, &tx), 0);
    uint64_t h = 0, rev = 0;
    int en = 0;
    cr_assert_eq(kv_auth_walk(&tx, KV_AUTH_USER, fold, &h), 0);
    cr_assert_eq(kv_auth_walk(&tx, KV_AUTH_ROLE, fold, &h), 0);
    cr_assert_eq(kv_auth_get_revision(&tx, &rev), 0);
    cr_assert_eq(kv_auth_get_enabled(&tx, &en), 0);
    kv_store_auth_read_end(&tx);
    return h * 31 + rev * 7 + (uint64_t)en;
}
