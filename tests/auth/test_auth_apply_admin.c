/*
 * test_auth_apply_admin.c - the admin check of the auth management entries at apply
 * (server/apply/apply_auth.c; etcd 3.4 etcdserver/apply_auth.go authApplierV3.Apply:
 * needAdminPermission(r) -> auth/store.go IsAdminPermitted), on a real store. With auth
 * enabled every auth management entry (AuthEnable and AuthDisable too) needs its auth_user
 * (InternalRequest field 71, proposed with the caller by server/api/service_auth.c) to be a
 * stored user with the root role: none is "etcdserver: user name is empty" (also an entry
 * proposed while auth was disabled and applied after AuthEnable), an unknown one
 * "etcdserver: user name not found", one without the root role "etcdserver: permission
 * denied"; a refused entry changes nothing. The auth revision is not compared (etcd's
 * IsAdminPermitted does not). With auth disabled nothing is checked.
 * The race this closes: alice, root when she sent UserChangePassword{root} to member B, lost
 * the root role through member A before B's entry was applied; it is refused.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kvt_store.h"
#include "auth_apply_util.h"
#include "auth.pb-c.h"
#include "common/etcd_errors.h"
#include "auth/auth_tokens.h"
#include "mvcc/auth_store.h"

#define HASHED "pbkdf2-sha256$1000$00$00"
#define HASHED2 "pbkdf2-sha256$1000$11$11"

static kvt_store g_t;

static void setup(void)
{
    kvt_store_open(&g_t, NULL);
}

static void teardown(void)
{
    kvt_store_close(&g_t);
}

/* Applies ir as proposed by user (NULL: no caller, as an entry proposed while auth was
 * disabled, which carries the auth revision but no user) at the current auth revision,
 * expecting want. */
static void apply_as(const char *user, Kvdpb__InternalRequest *ir, kv_etcd_err want)
{
    ir->auth_user = (char *)(user ? user : "");
    ir->auth_revision = aau_revision(&g_t);
    aau_apply(&g_t, ir, want);
}

/* Applies the auth management entry of kind c whose request is msg, as user, expecting want.
 * The oneof's members are pointers in one union: msg goes in through auth_enable, and the
 * packer (kvt_store_apply) reads it as the member that c names. */
static void entry_as(const char *user, Kvdpb__InternalRequest__RequestCase c, void *msg,
                     kv_etcd_err want)
{
    Kvdpb__InternalRequest ir = KVDPB__INTERNAL_REQUEST__INIT;
    ir.request_case = c;
    ir.auth_enable = msg;
    apply_as(user, &ir, want);
}

static void user_add_as(const char *user, const char *name, kv_etcd_err want)
{
    Etcdserverpb__AuthUserAddRequest r = ETCDSERVERPB__AUTH_USER_ADD_REQUEST__INIT;
    r.name = (char *)name;
    r.hashed_password = HASHED;
    entry_as(user, KVDPB__INTERNAL_REQUEST__REQUEST_AUTH_USER_ADD, &r, want);
}

static void passwd_as(const char *user, const char *name, const char *hashed, kv_etcd_err want)
{
    Etcdserverpb__AuthUserChangePasswordRequest r =
        ETCDSERVERPB__AUTH_USER_CHANGE_PASSWORD_REQUEST__INIT;
    r.name = (char *)name;
    r.hashed_password = (char *)hashed;
    entry_as(user, KVDPB__INTERNAL_REQUEST__REQUEST_AUTH_USER_CHANGE_PASSWORD, &r, want);
}

static void revoke_role_as(const char *user, const char *name, const char *role, kv_etcd_err want)
{
    Etcdserverpb__AuthUserRevokeRoleRequest r = ETCDSERVERPB__AUTH_USER_REVOKE_ROLE_REQUEST__INIT;
    r.name = (char *)name;
    r.role = (char *)role;
    entry_as(user, KVDPB__INTERNAL_REQUEST__REQUEST_AUTH_USER_REVOKE_ROLE, &r, want);
}

static void disable_as(const char *user, kv_etcd_err want)
{
    Etcdserverpb__AuthDisableRequest r = ETCDSERVERPB__AUTH_DISABLE_REQUEST__INIT;
    entry_as(user, KVDPB__INTERNAL_REQUEST__REQUEST_AUTH_DISABLE, &r, want);
}

/* Every other kind of auth management entry, as user, in this order: each expecting want. */
static void all_others_as(const char *user, kv_etcd_err want)
{
    Etcdserverpb__AuthEnableRequest en = ETCDSERVERPB__AUTH_ENABLE_REQUEST__INIT;
    Etcdserverpb__AuthUserDeleteRequest ud = ETCDSERVERPB__AUTH_USER_DELETE_REQUEST__INIT;
    ud.name = "bob";
    Etcdserverpb__AuthUserGrantRoleRequest ug = ETCDSERVERPB__AUTH_USER_GRANT_ROLE_REQUEST__INIT;
    ug.user = "alice";
    ug.role = "root";
    Etcdserverpb__AuthRoleAddRequest ra = ETCDSERVERPB__AUTH_ROLE_ADD_REQUEST__INIT;
    ra.name = "newrole";
    Authpb__Permission p = AUTHPB__PERMISSION__INIT;
    p.permtype = AUTHPB__PERMISSION__TYPE__READWRITE;
    p.key = kvt_bin("x");
    Etcdserverpb__AuthRoleGrantPermissionRequest rg =
        ETCDSERVERPB__AUTH_ROLE_GRANT_PERMISSION_REQUEST__INIT;
    rg.name = "r";
    rg.perm = &p;
    Etcdserverpb__AuthRoleRevokePermissionRequest rr =
        ETCDSERVERPB__AUTH_ROLE_REVOKE_PERMISSION_REQUEST__INIT;
    rr.role = "r";
    rr.key = kvt_bin("a");
    Etcdserverpb__AuthRoleDeleteRequest rd = ETCDSERVERPB__AUTH_ROLE_DELETE_REQUEST__INIT;
    rd.role = "r";
    const struct {
        Kvdpb__InternalRequest__RequestCase c;
        void *msg;
    } entries[] = {
        {KVDPB__INTERNAL_REQUEST__REQUEST_AUTH_ENABLE, &en},
        {KVDPB__INTERNAL_REQUEST__REQUEST_AUTH_USER_DELETE, &ud},
        {KVDPB__INTERNAL_REQUEST__REQUEST_AUTH_USER_GRANT_ROLE, &ug},
        {KVDPB__INTERNAL_REQUEST__REQUEST_AUTH_ROLE_ADD, &ra},
        {KVDPB__INTERNAL_REQUEST__REQUEST_AUTH_ROLE_GRANT_PERMISSION, &rg},
        {KVDPB__INTERNAL_REQUEST__REQUEST_AUTH_ROLE_REVOKE_PERMISSION, &rr},
        {KVDPB__INTERNAL_REQUEST__REQUEST_AUTH_ROLE_DELETE, &rd},
    };
    for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++)
        entry_as(user, entries[i].c, entries[i].msg, want);
}

/* A digest of the auth database: users, roles, revision, enabled flag. */
static uint64_t auth_state(void)
{
    return aau_auth_digest(&g_t);
}

static int user_exists(const char *name)
{
    kv_auth_tx tx;
    cr_assert_eq(kv_store_auth_read_begin(g_t.s, &tx), 0);
    uint8_t *v = NULL;
    size_t n = 0;
    int rc = kv_auth_get(&tx, KV_AUTH_USER, name, strlen(name), &v, &n);
    kv_store_auth_read_end(&tx);
    free(v);
    cr_assert(rc == 0 || rc == -ENOENT, "kv_auth_get: %d", rc);
    return rc == 0;
}

/* The stored password hash of name equals hashed. */
static int password_is(const char *name, const char *hashed)
{
    kv_auth_tx tx;
    cr_assert_eq(kv_store_auth_read_begin(g_t.s, &tx), 0);
    uint8_t *v = NULL;
    size_t n = 0;
    cr_assert_eq(kv_auth_get(&tx, KV_AUTH_USER, name, strlen(name), &v, &n), 0);
    kv_store_auth_read_end(&tx);
    Authpb__User *u = authpb__user__unpack(NULL, n, v);
    free(v);
    cr_assert_not_null(u);
    int eq =
        u->password.len == strlen(hashed) && memcmp(u->password.data, hashed, u->password.len) == 0;
    authpb__user__free_unpacked(u, NULL);
    return eq;
}

/* root (root role), alice (role r: READWRITE on "a"), bob; auth enabled. All applied before
 * AuthEnable, without a caller (auth disabled: nothing is checked). */
static void fixture(void)
{
    aau_user_add(&g_t, "root", 0);
    aau_grant_role(&g_t, "root", "root", 0);
    aau_role_add(&g_t, "r", 0);
    aau_role_grant(&g_t, "r", AUTHPB__PERMISSION__TYPE__READWRITE, "a", "", 0);
    aau_user_add(&g_t, "alice", 0);
    aau_grant_role(&g_t, "alice", "r", 0);
    aau_user_add(&g_t, "bob", 0);
    aau_enable(&g_t, 0); /* auth disabled: AuthEnable without a caller passes */
}

Test(auth_apply_admin, needs_a_root_caller, .init = setup, .fini = teardown)
{
    fixture();
    uint64_t before = auth_state(), rev = aau_revision(&g_t);
    user_add_as("alice", "carol", KV_ERR_PERMISSION_DENIED); /* no root role */
    user_add_as(NULL, "carol", KV_ERR_USER_EMPTY);           /* no caller */
    user_add_as("", "carol", KV_ERR_USER_EMPTY);             /* an empty one */
    user_add_as("ghost", "carol", KV_ERR_USER_NOT_FOUND);    /* no such user */
    cr_assert(!user_exists("carol"), "a refused UserAdd adds nothing");
    cr_assert_eq(auth_state(), before, "nor bumps the auth revision");
    user_add_as("root", "carol", 0);
    cr_assert(user_exists("carol"));
    cr_assert_eq(aau_revision(&g_t), rev + 1);
}

Test(auth_apply_admin, every_entry_kind_is_checked, .init = setup, .fini = teardown)
{
    fixture();
    uint64_t before = auth_state();
    user_add_as("alice", "carol", KV_ERR_PERMISSION_DENIED);
    passwd_as("alice", "root", HASHED2, KV_ERR_PERMISSION_DENIED);
    revoke_role_as("alice", "alice", "r", KV_ERR_PERMISSION_DENIED);
    all_others_as("alice", KV_ERR_PERMISSION_DENIED);
    disable_as("alice", KV_ERR_PERMISSION_DENIED);
    all_others_as(NULL, KV_ERR_USER_EMPTY);
    disable_as(NULL, KV_ERR_USER_EMPTY);
    cr_assert_eq(auth_state(), before, "no refused entry changed anything");
    /* root may do them all (the entries' own rules then apply) */
    passwd_as("root", "bob", HASHED2, 0);
    all_others_as("root", 0); /* AuthEnable while enabled: a no-op */
    cr_assert(!user_exists("bob"));
    disable_as("root", 0);
    /* auth disabled: nothing is checked, a caller or not */
    user_add_as(NULL, "dave", 0);
    user_add_as("alice", "erin", 0);
}

/* The race of the defect: alice had the root role when a member checked her
 * UserChangePassword{root}; root revoked it (through another member) and that entry was
 * applied first. */
Test(auth_apply_admin, caller_who_lost_root_is_refused, .init = setup, .fini = teardown)
{
    fixture();
    Etcdserverpb__AuthUserGrantRoleRequest g = ETCDSERVERPB__AUTH_USER_GRANT_ROLE_REQUEST__INIT;
    g.user = "alice";
    g.role = "root";
    entry_as("root", KVDPB__INTERNAL_REQUEST__REQUEST_AUTH_USER_GRANT_ROLE, &g, 0);
    uint64_t checked_at = aau_revision(&g_t);   /* B checks alice here: she is root */
    revoke_role_as("root", "alice", "root", 0); /* A's revoke, applied first */
    Etcdserverpb__AuthUserChangePasswordRequest r =
        ETCDSERVERPB__AUTH_USER_CHANGE_PASSWORD_REQUEST__INIT;
    r.name = "root";
    r.hashed_password = HASHED2;
    Kvdpb__InternalRequest ir = KVDPB__INTERNAL_REQUEST__INIT;
    ir.request_case = KVDPB__INTERNAL_REQUEST__REQUEST_AUTH_USER_CHANGE_PASSWORD;
    ir.auth_user_change_password = &r;
    ir.auth_user = "alice";
    ir.auth_revision = checked_at;
    uint64_t before = auth_state();
    aau_apply(&g_t, &ir, KV_ERR_PERMISSION_DENIED);
    cr_assert(password_is("root", HASHED), "root's password unchanged");
    cr_assert_eq(auth_state(), before);
    /* a root caller passes whatever auth revision it was checked at (etcd: not compared) */
    ir.auth_user = "root";
    aau_apply(&g_t, &ir, 0);
    cr_assert(password_is("root", HASHED2));
}

/* An entry proposed while auth was disabled (no caller), e.g. by a member that had not yet
 * applied AuthEnable, and applied after it: refused, as in etcd. */
Test(auth_apply_admin, proposed_before_enable_applied_after, .init = setup, .fini = teardown)
{
    fixture();
    uint64_t before = auth_state();
    user_add_as(NULL, "late", KV_ERR_USER_EMPTY);
    all_others_as(NULL, KV_ERR_USER_EMPTY);
    cr_assert_eq(auth_state(), before);
}

/* An entry of an older kvd (auth_revision 0, no caller) is applied as that kvd applied it,
 * so that a log replayed after an upgrade gives the same state. */
Test(auth_apply_admin, an_older_members_entry_is_applied_unchecked, .init = setup, .fini = teardown)
{
    fixture();
    aau_user_add(&g_t, "legacy", 0);
    cr_assert(user_exists("legacy"));
}
