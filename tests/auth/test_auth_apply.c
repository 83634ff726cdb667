/*
 * test_auth_apply.c - the auth entries of the applier (server/apply/apply_auth.c) on a real
 * store: etcd 3.4's rules and errors (root user and role for AuthEnable, root protections
 * while enabled, role grants and revocations, RoleDelete stripping the role from users),
 * the auth revision bumped by every change, state surviving a reopen, and the apply-time
 * check of KV writes (etcd authApplierV3): an entry checked at an older auth revision is
 * refused with "etcdserver: revision of auth store is old", an unchecked one (proposed
 * while auth was disabled) with "etcdserver: user name is empty". The Authenticate entry
 * (server/apply/apply_authn.c): refused when auth is disabled, for an unknown user or a
 * password record whose tag differs from the entry's; on success the token
 * "<prefix>.<index>" and the result flag that makes every member (quiet too) assign it,
 * with nothing stored but the applied index.
 */
#include <criterion/criterion.h>

#include <stdlib.h>
#include <string.h>

#include "kvt_store.h"
#include "auth_apply_util.h"
#include "auth.pb-c.h"
#include "common/etcd_errors.h"
#include "auth/auth_tokens.h"
#include "mvcc/auth_store.h"

#include <stdio.h>

static kvt_store g_t;

static void setup(void)
{
    kvt_store_open(&g_t, NULL);
}

static void teardown(void)
{
    kvt_store_close(&g_t);
}

static void put_as(uint64_t auth_rev, kv_etcd_err want)
{
    Etcdserverpb__PutRequest p = ETCDSERVERPB__PUT_REQUEST__INIT;
    p.key = kvt_bin("k");
    p.value = kvt_bin("v");
    Kvdpb__InternalRequest ir = KVDPB__INTERNAL_REQUEST__INIT;
    ir.request_case = KVDPB__INTERNAL_REQUEST__REQUEST_PUT;
    ir.put = &p;
    ir.auth_user = "root";
    ir.auth_revision = auth_rev;
    aau_apply(&g_t, &ir, want);
}

/* The roles of user (comma-joined) as stored. */
static void roles_of(const char *user, char *out, size_t cap)
{
    kv_auth_tx tx;
    cr_assert_eq(kv_store_auth_read_begin(g_t.s, &tx), 0);
    uint8_t *v;
    size_t n;
    cr_assert_eq(kv_auth_get(&tx, KV_AUTH_USER, user, strlen(user), &v, &n), 0);
    kv_store_auth_read_end(&tx);
    Authpb__User *u = authpb__user__unpack(NULL, n, v);
    free(v);
    cr_assert_not_null(u);
    out[0] = 0;
    for (size_t i = 0; i < u->n_roles; i++) {
        strncat(out, u->roles[i], cap - strlen(out) - 2);
        if (i + 1 < u->n_roles)
            strcat(out, ",");
    }
    authpb__user__free_unpacked(u, NULL);
}

Test(auth_apply, etcd_rules_and_revision, .init = setup, .fini = teardown)
{
    cr_assert_eq(aau_revision(&g_t), 0);
    aau_enable(&g_t, KV_ERR_ROOT_USER_NOT_EXIST);
    aau_user_add(&g_t, "", KV_ERR_USER_EMPTY);
    aau_user_add(&g_t, "root", 0);
    cr_assert_eq(aau_revision(&g_t), 1);
    aau_user_add(&g_t, "root", KV_ERR_USER_ALREADY_EXIST);
    aau_enable(&g_t, KV_ERR_ROOT_ROLE_NOT_EXIST);
    aau_grant_role(&g_t, "root", "root", 0); /* the root role needs no record */
    aau_grant_role(&g_t, "root", "root", 0); /* already granted: success, no change */
    cr_assert_eq(aau_revision(&g_t), 2);
    aau_grant_role(&g_t, "nobody", "root", KV_ERR_USER_NOT_FOUND);
    aau_grant_role(&g_t, "root", "nosuch", KV_ERR_ROLE_NOT_FOUND);
    aau_role_add(&g_t, "", KV_ERR_ROLE_EMPTY);
    aau_role_add(&g_t, "b", 0);
    aau_role_add(&g_t, "a", 0);
    aau_role_add(&g_t, "a", KV_ERR_ROLE_ALREADY_EXIST);
    aau_user_add(&g_t, "ann", 0);
    aau_grant_role(&g_t, "ann", "b", 0);
    aau_grant_role(&g_t, "ann", "a", 0);
    char r[256];
    roles_of("ann", r, sizeof r);
    cr_assert_str_eq(r, "a,b", "roles kept sorted");
    aau_user_delete(&g_t, "root", 0); /* auth disabled: root may be deleted... */
    aau_user_add(&g_t, "root", 0);    /* ...and added again */
    aau_grant_role(&g_t, "root", "root", 0);
    uint64_t before = aau_revision(&g_t);
    aau_enable(&g_t, 0);
    cr_assert_eq(aau_revision(&g_t), before, "etcd's AuthEnable does not bump the revision");
    aau_enable(&g_t, 0); /* already enabled: success */
    aau_user_delete(&g_t, "root", KV_ERR_INVALID_AUTH_MGMT);
    aau_role_delete(&g_t, "root", KV_ERR_INVALID_AUTH_MGMT);
    aau_role_delete(&g_t, "a", 0);
    roles_of("ann", r, sizeof r);
    cr_assert_str_eq(r, "b", "RoleDelete strips the role from its users");
    aau_role_delete(&g_t, "a", KV_ERR_ROLE_NOT_FOUND);
    aau_user_delete(&g_t, "nobody", KV_ERR_USER_NOT_FOUND);
    /* survives a reopen */
    uint64_t rev = aau_revision(&g_t);
    kvt_store_reopen(&g_t);
    cr_assert_eq(aau_revision(&g_t), rev);
    aau_user_delete(&g_t, "root", KV_ERR_INVALID_AUTH_MGMT); /* still enabled */
}

Test(auth_apply, kv_writes_checked_at_the_current_auth_revision, .init = setup, .fini = teardown)
{
    aau_user_add(&g_t, "root", 0);
    aau_grant_role(&g_t, "root", "root", 0);
    put_as(0, 0); /* auth disabled: no check */
    aau_enable(&g_t, 0);
    uint64_t rev = aau_revision(&g_t);
    put_as(rev, 0);
    put_as(rev + 1, 0);
    put_as(0, KV_ERR_USER_EMPTY); /* proposed unchecked, applied with auth on */
    aau_role_add(&g_t, "r", 0);   /* an auth change: revision + 1 */
    cr_assert_eq(aau_revision(&g_t), rev + 1);
    put_as(rev, KV_ERR_AUTH_OLD_REVISION);
    put_as(rev + 1, 0);
}

/* ---- Authenticate through the log (apply_authn.c) ---- */

#define HASHED "pbkdf2-sha256$1000$00$00"

/* A digest of everything the auth database and the keyspace hold (but the applied index). */
static uint64_t state(void)
{
    kv_store_status st;
    cr_assert_eq(kv_store_get_status(g_t.s, &st), 0);
    return aau_auth_digest(&g_t) + (uint64_t)st.revision * 131;
}

static uint64_t applied(void)
{
    kv_store_status st;
    cr_assert_eq(kv_store_get_status(g_t.s, &st), 0);
    return st.applied_index;
}

/* Applies an Authenticate entry (quiet: as on a member nobody waits on). Returns the result
 * (caller frees r->resp). */
static void authn(const char *name, const char *prefix, uint64_t pwtag, int quiet, kv_result *r)
{
    Kvdpb__AuthAuthenticate a = KVDPB__AUTH_AUTHENTICATE__INIT;
    a.name = (char *)name;
    a.simple_token = (char *)prefix;
    a.pwtag = pwtag;
    Kvdpb__InternalRequest ir = KVDPB__INTERNAL_REQUEST__INIT;
    ir.request_case = KVDPB__INTERNAL_REQUEST__REQUEST_AUTH_AUTHENTICATE;
    ir.auth_authenticate = &a;
    size_t n = kvdpb__internal_request__get_packed_size(&ir);
    uint8_t *buf = malloc(n);
    kvdpb__internal_request__pack(&ir, buf);
    kv_store_batch *b;
    cr_assert_eq(kv_store_batch_begin(g_t.s, &b), 0);
    kv_store_batch_set_quiet(b, quiet);
    kv_header_info h = {11, 22, 33};
    cr_assert_eq(kv_store_apply(g_t.s, b, ++g_t.index, buf, n, &h, r), 0);
    free(buf);
    cr_assert_eq(kv_store_batch_commit(g_t.s, b), 0);
}

static void authn_refused(const char *name, uint64_t pwtag, kv_etcd_err want)
{
    uint64_t before = state(), idx = applied();
    kv_result r;
    authn(name, "abcdefghijklmnop", pwtag, 0, &r);
    cr_assert_eq(KVT_STORE_CODE(r), kv_etcd_err_code(want), "code %d (%s)", KVT_STORE_CODE(r),
                 KVT_STORE_MSG(r));
    cr_assert_str_eq(KVT_STORE_MSG(r), kv_etcd_err_msg(want));
    cr_assert_eq(r.auth_tokens, KV_RESULT_AUTH_NONE, "no token for a refused entry");
    cr_assert_null(r.resp);
    cr_assert_eq(state(), before);
    cr_assert_eq(applied(), idx + 1, "the index counts as applied");
}

Test(auth_apply, authenticate_entry, .init = setup, .fini = teardown)
{
    uint64_t tag = kv_auth_pwtag((const uint8_t *)HASHED, strlen(HASHED));
    kvt_store_put(&g_t, "k", "v", 0); /* keyspace revisions to compare */
    int64_t kvrev = kvt_store_put(&g_t, "k2", "v", 0);
    aau_user_add(&g_t, "root", 0);
    aau_grant_role(&g_t, "root", "root", 0);
    aau_user_add(&g_t, "ann", 0);
    authn_refused("ann", tag, KV_ERR_AUTH_NOT_ENABLED);
    aau_enable(&g_t, 0);
    authn_refused("nobody", tag, KV_ERR_AUTH_FAILED);
    authn_refused("", tag, KV_ERR_AUTH_FAILED);
    authn_refused("ann", tag + 1, KV_ERR_AUTH_FAILED); /* password changed since the check */

    /* success: the token is prefix.index, the header the store revision and the member's
     * ids; nothing is stored but the applied index */
    uint64_t before = state(), idx = applied();
    kv_result r;
    authn("ann", "abcdefghijklmnop", tag, 0, &r);
    cr_assert_eq(KVT_STORE_CODE(r), 0, "%s", KVT_STORE_MSG(r));
    cr_assert_eq(r.auth_tokens, KV_RESULT_AUTH_ASSIGN);
    cr_assert_eq(state(), before, "Authenticate changes no stored state");
    cr_assert_eq(applied(), idx + 1);
    Etcdserverpb__AuthenticateResponse *ar =
        etcdserverpb__authenticate_response__unpack(NULL, r.resp_len, r.resp);
    cr_assert_not_null(ar);
    char want[64];
    snprintf(want, sizeof want, "abcdefghijklmnop.%llu", (unsigned long long)(idx + 1));
    cr_assert_str_eq(ar->token, want);
    cr_assert_not_null(ar->header);
    cr_assert_eq(ar->header->revision, kvrev);
    cr_assert_eq(ar->header->cluster_id, 11);
    cr_assert_eq(ar->header->member_id, 22);
    etcdserverpb__authenticate_response__free_unpacked(ar, NULL);
    free(r.resp);

    /* quiet (a follower): no response, but the flag that makes it assign the token */
    authn("ann", "ponmlkjihgfedcba", tag, 1, &r);
    cr_assert_eq(KVT_STORE_CODE(r), 0, "%s", KVT_STORE_MSG(r));
    cr_assert_eq(r.auth_tokens, KV_RESULT_AUTH_ASSIGN);
    cr_assert_null(r.resp);
    cr_assert_eq(state(), before);

    /* the same entry applied again (replay) is skipped: no second assignment */
    uint64_t last = g_t.index;
    g_t.index = last - 1;
    authn("ann", "ponmlkjihgfedcba", tag, 1, &r);
    cr_assert_eq(r.skipped, 1);
    cr_assert_eq(r.auth_tokens, KV_RESULT_AUTH_NONE);
    g_t.index = last;

    /* a deleted user's token is refused at apply */
    Etcdserverpb__AuthUserDeleteRequest d = ETCDSERVERPB__AUTH_USER_DELETE_REQUEST__INIT;
    d.name = "ann";
    Kvdpb__InternalRequest ir = KVDPB__INTERNAL_REQUEST__INIT;
    ir.request_case = KVDPB__INTERNAL_REQUEST__REQUEST_AUTH_USER_DELETE;
    ir.auth_user_delete = &d;
    aau_apply(&g_t, &ir, 0);
    authn_refused("ann", tag, KV_ERR_AUTH_FAILED);

    /* AuthDisable applied: the flag that makes every member drop its tokens */
    Etcdserverpb__AuthDisableRequest dis = ETCDSERVERPB__AUTH_DISABLE_REQUEST__INIT;
    Kvdpb__InternalRequest ird = KVDPB__INTERNAL_REQUEST__INIT;
    ird.request_case = KVDPB__INTERNAL_REQUEST__REQUEST_AUTH_DISABLE;
    ird.auth_disable = &dis;
    kvt_store_apply(&g_t, &ird, &r);
    cr_assert_eq(KVT_STORE_CODE(r), 0, "%s", KVT_STORE_MSG(r));
    cr_assert_eq(r.auth_tokens, KV_RESULT_AUTH_CLEAR);
    free(r.resp);
    authn_refused("root", tag, KV_ERR_AUTH_NOT_ENABLED);
}
