/* apply_auth: the auth management entries (etcd 3.4 auth/store.go: AuthEnable, AuthDisable,
 * UserAdd, UserDelete, UserChangePassword, UserGrantRole, UserRevokeRole, RoleAdd,
 * RoleDelete, RoleGrantPermission, RoleRevokePermission) on the "auth" LMDB database
 * (mvcc/auth_store.h), in the request's child transaction: they commit with the applied
 * index. Passwords arrive hashed (hashed_password, computed by the proposing member off the
 * loop, server/api/service_auth.c), so this stays a pure function of the log. Every change
 * bumps the auth revision (etcd commitRevision). The caller's admin permission is checked
 * twice: by the proposing member when the request arrives (server/api/service_auth.c), and
 * here at apply (etcd authApplierV3.Apply, needAdminPermission: every entry of this file,
 * AuthEnable too), so a caller who lost the root role in between is refused: with auth
 * enabled in the apply transaction, the entry's auth_user (proposed with the caller, as KV
 * writes) must be set ("etcdserver: user name is empty", also an entry proposed while auth
 * was disabled), name a stored user ("etcdserver: user name not found") that has the root
 * role ("etcdserver: permission denied"), else nothing changes. As etcd's IsAdminPermitted,
 * the entry's auth_revision is not compared; but it is never 0 on these entries (the
 * proposer sets it even with auth disabled), and an entry with 0, an older kvd's, is
 * applied unchecked, as that kvd did.
 *
 * kv_apply_auth_check is etcd's authApplierV3 for the KV writes and LeaseRevoke, with auth
 * enabled: a Put, DeleteRange or Txn needs a user (auth_revision != 0, else "user name is
 * empty") checked at the current auth revision (else "revision of auth store is old"); a
 * Put or Txn put with a lease, and a LeaseRevoke, need WRITE on every key attached to the
 * lease (apply_perm.c, etcd checkLeasePuts). A LeaseRevoke without a user (auth_revision 0)
 * is the lessor's revoke of an expired lease (server/lease/leases.c), which etcd runs as root: it
 * is never refused. A client LeaseRevoke proposed while auth was disabled and applied after
 * AuthEnable also has none, and is applied too (kvd cannot tell it from the lessor's; etcd
 * would refuse it with "user name is empty" when the lease has keys): the window is one
 * AuthEnable entry wide and the revoke was allowed when it was made. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "apply/apply_int.h"
#include "auth.pb-c.h"
#include "mvcc/auth_store.h"

#define ROOT "root"

static int str_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int kv_apply_auth_user(const kv_auth_tx *tx, const char *name, Authpb__User **out)
{
    uint8_t *v;
    size_t n;
    *out = NULL;
    if (!name[0])
        return -ENOENT;
    int rc = kv_auth_get(tx, KV_AUTH_USER, name, strlen(name), &v, &n);
    if (rc)
        return rc;
    *out = authpb__user__unpack(NULL, n, v);
    free(v);
    return *out ? 0 : -EBADMSG;
}

static int get_role(const kv_auth_tx *tx, const char *name, Authpb__Role **out)
{
    uint8_t *v;
    size_t n;
    *out = NULL;
    if (!name[0])
        return -ENOENT;
    int rc = kv_auth_get(tx, KV_AUTH_ROLE, name, strlen(name), &v, &n);
    if (rc)
        return rc;
    *out = authpb__role__unpack(NULL, n, v);
    free(v);
    return *out ? 0 : -EBADMSG;
}

static int put_msg(const kv_auth_tx *tx, char kind, const char *name, const ProtobufCMessage *m)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf)
        return -ENOMEM;
    protobuf_c_message_pack(m, buf);
    int rc = kv_auth_put(tx, kind, name, strlen(name), buf, n);
    free(buf);
    return rc;
}

static int has_role(const Authpb__User *u, const char *role)
{
    for (size_t i = 0; i < u->n_roles; i++)
        if (strcmp(u->roles[i], role) == 0)
            return 1;
    return 0;
}

/* A user record with roles minus `drop` (NULL: all kept) plus `add` (NULL: none), sorted. */
static int put_user_roles(const kv_auth_tx *tx, const Authpb__User *u, const char *drop,
                          const char *add)
{
    Authpb__User nu = *u;
    char **roles = calloc(u->n_roles + 1, sizeof *roles);
    if (!roles)
        return -ENOMEM;
    size_t n = 0;
    for (size_t i = 0; i < u->n_roles; i++)
        if (!drop || strcmp(u->roles[i], drop) != 0)
            roles[n++] = u->roles[i];
    if (add)
        roles[n++] = (char *)add;
    qsort(roles, n, sizeof *roles, str_cmp);
    nu.roles = roles;
    nu.n_roles = n;
    char name[KV_AUTH_MAX_NAME + 1];
    size_t nl = u->name.len < KV_AUTH_MAX_NAME ? u->name.len : KV_AUTH_MAX_NAME;
    memcpy(name, u->name.data, nl);
    name[nl] = 0;
    int rc = put_msg(tx, KV_AUTH_USER, name, &nu.base);
    free(roles);
    return rc;
}

/* 0 ok, 1 request error set, < 0 storage. */
static int map_err(kv_actx *a, int rc, kv_etcd_err notfound)
{
    if (rc == -ENOENT) {
        kv_apply_err(a->res, notfound);
        return 1;
    }
    if (rc == -EINVAL) { /* a name LMDB cannot hold: no such record can exist */
        kv_apply_err(a->res, notfound);
        return 1;
    }
    return rc;
}

static int enabled(const kv_auth_tx *tx)
{
    int e = 0;
    return kv_auth_get_enabled(tx, &e) == 0 && e;
}

/* etcd 3.4 IsAdminPermitted on the apply transaction: 0 when auth is disabled or the entry's
 * auth_user is a stored user with the root role; 1 refused (res set: USER_EMPTY,
 * USER_NOT_FOUND or PERMISSION_DENIED); < 0 storage. Reads only tx and ir. An entry with
 * auth_revision 0 was proposed by an older kvd, which never sets it on these entries: it is
 * applied as that kvd applied it, so that a log replayed after an upgrade gives the state it
 * gave before. */
static int admin_permitted(kv_actx *a, const kv_auth_tx *tx, const Kvdpb__InternalRequest *ir)
{
    if (ir->auth_revision == 0)
        return 0;
    const char *user = ir->auth_user;
    int en = 0;
    int rc = kv_auth_get_enabled(tx, &en);
    if (rc || !en)
        return rc;
    if (!user || !user[0]) {
        kv_apply_err(a->res, KV_ERR_USER_EMPTY);
        return 1;
    }
    Authpb__User *u;
    rc = kv_apply_auth_user(tx, user, &u);
    if (rc)
        return map_err(a, rc, KV_ERR_USER_NOT_FOUND);
    int root = has_role(u, ROOT);
    authpb__user__free_unpacked(u, NULL);
    if (!root) {
        kv_apply_err(a->res, KV_ERR_PERMISSION_DENIED);
        return 1;
    }
    return 0;
}

static int auth_enable(kv_actx *a, const kv_auth_tx *tx)
{
    if (enabled(tx))
        return 0; /* etcd: already enabled, nothing changes */
    Authpb__User *u;
    int rc = kv_apply_auth_user(tx, ROOT, &u);
    if (rc)
        return map_err(a, rc, KV_ERR_ROOT_USER_NOT_EXIST);
    int root = has_role(u, ROOT);
    authpb__user__free_unpacked(u, NULL);
    if (!root) {
        kv_apply_err(a->res, KV_ERR_ROOT_ROLE_NOT_EXIST);
        return 1;
    }
    return kv_auth_set_enabled(tx, 1); /* etcd does not bump the revision here */
}

static int auth_disable(const kv_auth_tx *tx)
{
    if (!enabled(tx))
        return 0;
    int rc = kv_auth_set_enabled(tx, 0);
    return rc ? rc : kv_auth_bump_revision(tx, NULL);
}

static int user_add(kv_actx *a, const kv_auth_tx *tx, const Etcdserverpb__AuthUserAddRequest *r)
{
    if (!r->name[0]) {
        kv_apply_err(a->res, KV_ERR_USER_EMPTY);
        return 1;
    }
    Authpb__User *u;
    int rc = kv_apply_auth_user(tx, r->name, &u);
    if (rc == 0) {
        authpb__user__free_unpacked(u, NULL);
        kv_apply_err(a->res, KV_ERR_USER_ALREADY_EXIST);
        return 1;
    }
    if (rc == -EINVAL) { /* over KV_AUTH_MAX_NAME (etcd has no limit; kvd's bound) */
        kv_apply_err(a->res, KV_ERR_REQUEST_TOO_LARGE);
        return 1;
    }
    if (rc != -ENOENT)
        return rc;
    Authpb__User nu = AUTHPB__USER__INIT;
    Authpb__UserAddOptions opt = AUTHPB__USER_ADD_OPTIONS__INIT;
    nu.name.data = (uint8_t *)r->name;
    nu.name.len = strlen(r->name);
    int nopw = r->options && r->options->no_password;
    if (!nopw) {
        nu.password.data = (uint8_t *)r->hashed_password;
        nu.password.len = strlen(r->hashed_password);
    }
    if (r->options) {
        opt.no_password = r->options->no_password;
        nu.options = &opt;
    }
    if ((rc = put_msg(tx, KV_AUTH_USER, r->name, &nu.base)))
        return rc;
    return kv_auth_bump_revision(tx, NULL);
}

static int user_delete(kv_actx *a, const kv_auth_tx *tx, const char *name)
{
    if (enabled(tx) && strcmp(name, ROOT) == 0) {
        kv_apply_err(a->res, KV_ERR_INVALID_AUTH_MGMT);
        return 1;
    }
    int rc = name[0] ? kv_auth_del(tx, KV_AUTH_USER, name, strlen(name)) : -ENOENT;
    if (rc)
        return map_err(a, rc, KV_ERR_USER_NOT_FOUND);
    return kv_auth_bump_revision(tx, NULL);
}

static int user_passwd(kv_actx *a, const kv_auth_tx *tx,
                       const Etcdserverpb__AuthUserChangePasswordRequest *r)
{
    Authpb__User *u;
    int rc = kv_apply_auth_user(tx, r->name, &u);
    if (rc)
        return map_err(a, rc, KV_ERR_USER_NOT_FOUND);
    Authpb__User nu = *u;
    nu.password.data = (uint8_t *)r->hashed_password;
    nu.password.len = strlen(r->hashed_password);
    rc = put_msg(tx, KV_AUTH_USER, r->name, &nu.base);
    authpb__user__free_unpacked(u, NULL);
    return rc ? rc : kv_auth_bump_revision(tx, NULL);
}

static int user_grant(kv_actx *a, const kv_auth_tx *tx,
                      const Etcdserverpb__AuthUserGrantRoleRequest *r)
{
    Authpb__User *u;
    int rc = kv_apply_auth_user(tx, r->user, &u);
    if (rc)
        return map_err(a, rc, KV_ERR_USER_NOT_FOUND);
    if (strcmp(r->role, ROOT) != 0) {
        Authpb__Role *role;
        if ((rc = get_role(tx, r->role, &role))) {
            authpb__user__free_unpacked(u, NULL);
            return map_err(a, rc, KV_ERR_ROLE_NOT_FOUND);
        }
        authpb__role__free_unpacked(role, NULL);
    }
    if (has_role(u, r->role)) { /* etcd: a warning, success, no new revision */
        authpb__user__free_unpacked(u, NULL);
        return 0;
    }
    rc = put_user_roles(tx, u, NULL, r->role);
    authpb__user__free_unpacked(u, NULL);
    return rc ? rc : kv_auth_bump_revision(tx, NULL);
}

static int user_revoke(kv_actx *a, const kv_auth_tx *tx,
                       const Etcdserverpb__AuthUserRevokeRoleRequest *r)
{
    if (enabled(tx) && strcmp(r->name, ROOT) == 0 && strcmp(r->role, ROOT) == 0) {
        kv_apply_err(a->res, KV_ERR_INVALID_AUTH_MGMT);
        return 1;
    }
    Authpb__User *u;
    int rc = kv_apply_auth_user(tx, r->name, &u);
    if (rc)
        return map_err(a, rc, KV_ERR_USER_NOT_FOUND);
    if (!has_role(u, r->role)) {
        authpb__user__free_unpacked(u, NULL);
        kv_apply_err(a->res, KV_ERR_ROLE_NOT_GRANTED);
        return 1;
    }
    rc = put_user_roles(tx, u, r->role, NULL);
    authpb__user__free_unpacked(u, NULL);
    return rc ? rc : kv_auth_bump_revision(tx, NULL);
}

static int role_add(kv_actx *a, const kv_auth_tx *tx, const char *name)
{
    if (!name[0]) {
        kv_apply_err(a->res, KV_ERR_ROLE_EMPTY);
        return 1;
    }
    Authpb__Role *role;
    int rc = get_role(tx, name, &role);
    if (rc == 0) {
        authpb__role__free_unpacked(role, NULL);
        kv_apply_err(a->res, KV_ERR_ROLE_ALREADY_EXIST);
        return 1;
    }
    if (rc == -EINVAL) { /* over KV_AUTH_MAX_NAME (etcd has no limit; kvd's bound) */
        kv_apply_err(a->res, KV_ERR_REQUEST_TOO_LARGE);
        return 1;
    }
    if (rc != -ENOENT)
        return rc;
    Authpb__Role nr = AUTHPB__ROLE__INIT;
    nr.name.data = (uint8_t *)name;
    nr.name.len = strlen(name);
    if ((rc = put_msg(tx, KV_AUTH_ROLE, name, &nr.base)))
        return rc;
    return kv_auth_bump_revision(tx, NULL);
}

typedef struct strip_ctx {
    const kv_auth_tx *tx;
    const char *role;
    int rc;
} strip_ctx;

static int strip_fn(void *arg, const uint8_t *name, size_t nlen, const uint8_t *val, size_t vlen)
{
    (void)name;
    (void)nlen;
    strip_ctx *c = arg;
    Authpb__User *u = authpb__user__unpack(NULL, vlen, val);
    if (!u)
        return -EBADMSG;
    int rc = 0;
    if (has_role(u, c->role))
        rc = put_user_roles(c->tx, u, c->role, NULL); /* LMDB cursors stay valid over puts */
    authpb__user__free_unpacked(u, NULL);
    return rc;
}

static int role_delete(kv_actx *a, const kv_auth_tx *tx, const char *name)
{
    if (enabled(tx) && strcmp(name, ROOT) == 0) {
        kv_apply_err(a->res, KV_ERR_INVALID_AUTH_MGMT);
        return 1;
    }
    int rc = name[0] ? kv_auth_del(tx, KV_AUTH_ROLE, name, strlen(name)) : -ENOENT;
    if (rc)
        return map_err(a, rc, KV_ERR_ROLE_NOT_FOUND);
    strip_ctx c = {tx, name, 0};
    if ((rc = kv_auth_walk(tx, KV_AUTH_USER, strip_fn, &c)))
        return rc;
    return kv_auth_bump_revision(tx, NULL);
}

static int bytes_eq(const ProtobufCBinaryData *a, const ProtobufCBinaryData *b)
{
    return a->len == b->len && (a->len == 0 || memcmp(a->data, b->data, a->len) == 0);
}

static int bytes_cmp(const ProtobufCBinaryData *a, const ProtobufCBinaryData *b)
{
    size_t n = a->len < b->len ? a->len : b->len;
    int c = n ? memcmp(a->data, b->data, n) : 0;
    return c ? c : (a->len < b->len ? -1 : a->len > b->len);
}

static int perm_cmp(const void *x, const void *y)
{
    const Authpb__Permission *a = *(Authpb__Permission *const *)x;
    const Authpb__Permission *b = *(Authpb__Permission *const *)y;
    return bytes_cmp(&a->key, &b->key);
}

static int role_grant(kv_actx *a, const kv_auth_tx *tx,
                      const Etcdserverpb__AuthRoleGrantPermissionRequest *r)
{
    Authpb__Role *role;
    int rc = get_role(tx, r->name, &role);
    if (rc)
        return map_err(a, rc, KV_ERR_ROLE_NOT_FOUND);
    Authpb__Permission empty = AUTHPB__PERMISSION__INIT;
    const Authpb__Permission *p = r->perm ? r->perm : &empty;
    int found = 0;
    for (size_t i = 0; i < role->n_keypermission; i++)
        if (bytes_eq(&role->keypermission[i]->key, &p->key) &&
            bytes_eq(&role->keypermission[i]->range_end, &p->range_end)) {
            role->keypermission[i]->permtype = p->permtype; /* update the existing one */
            found = 1;
        }
    Authpb__Permission **perms = role->keypermission;
    size_t n = role->n_keypermission;
    Authpb__Permission **np = NULL;
    Authpb__Permission add = *p;
    if (!found) {
        if (!(np = calloc(n + 1, sizeof *np))) {
            authpb__role__free_unpacked(role, NULL);
            return -ENOMEM;
        }
        if (n)
            memcpy(np, perms, n * sizeof *np);
        np[n++] = &add;
        /* etcd sorts by key (sort.Sort, not stable); keep ties in insertion order */
        for (size_t i = n - 1; i > 0 && perm_cmp(&np[i - 1], &np[i]) > 0; i--) {
            Authpb__Permission *t = np[i];
            np[i] = np[i - 1];
            np[i - 1] = t;
        }
        role->keypermission = np;
        role->n_keypermission = n;
    }
    rc = put_msg(tx, KV_AUTH_ROLE, r->name, &role->base);
    if (np) {
        role->keypermission = perms;
        role->n_keypermission = n - 1;
        free(np);
    }
    authpb__role__free_unpacked(role, NULL);
    return rc ? rc : kv_auth_bump_revision(tx, NULL);
}

static int role_revoke(kv_actx *a, const kv_auth_tx *tx,
                       const Etcdserverpb__AuthRoleRevokePermissionRequest *r)
{
    Authpb__Role *role;
    int rc = get_role(tx, r->role, &role);
    if (rc)
        return map_err(a, rc, KV_ERR_ROLE_NOT_FOUND);
    size_t n = role->n_keypermission, k = 0;
    Authpb__Permission **perms = role->keypermission;
    Authpb__Permission **dropped = calloc(n ? n : 1, sizeof *dropped);
    size_t nd = 0;
    if (!dropped) {
        authpb__role__free_unpacked(role, NULL);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        if (bytes_eq(&perms[i]->key, &r->key) && bytes_eq(&perms[i]->range_end, &r->range_end))
            dropped[nd++] = perms[i];
        else
            perms[k++] = perms[i];
    }
    if (nd == 0) {
        free(dropped);
        authpb__role__free_unpacked(role, NULL);
        kv_apply_err(a->res, KV_ERR_PERMISSION_NOT_GRANTED);
        return 1;
    }
    role->n_keypermission = k;
    rc = put_msg(tx, KV_AUTH_ROLE, r->role, &role->base);
    for (size_t i = 0; i < nd; i++) /* back in the array, so free_unpacked frees them */
        perms[k + i] = dropped[i];
    role->n_keypermission = n;
    free(dropped);
    authpb__role__free_unpacked(role, NULL);
    return rc ? rc : kv_auth_bump_revision(tx, NULL);
}

int kv_apply_auth_check(kv_actx *a, const Kvdpb__InternalRequest *ir)
{
    switch (ir->request_case) {
    case KVDPB__INTERNAL_REQUEST__REQUEST_PUT:
    case KVDPB__INTERNAL_REQUEST__REQUEST_DELETE_RANGE:
    case KVDPB__INTERNAL_REQUEST__REQUEST_TXN:
    case KVDPB__INTERNAL_REQUEST__REQUEST_LEASE_REVOKE:
        break;
    default:
        return 0;
    }
    kv_auth_tx tx;
    kv_ks_auth_tx(a->ks, &tx);
    int en = 0;
    uint64_t rev = 0;
    int rc = kv_auth_get_enabled(&tx, &en);
    if (rc == 0 && en)
        rc = kv_auth_get_revision(&tx, &rev);
    if (rc || !en)
        return rc;
    if (ir->request_case == KVDPB__INTERNAL_REQUEST__REQUEST_LEASE_REVOKE)
        /* No user: the lessor's own revoke of an expired lease (server/lease/leases.c), which etcd
         * runs as root (WithRoot); also a client revoke proposed while auth was disabled. */
        return ir->auth_revision == 0 ? 0 : kv_apply_lease_perm(a, ir, rev);
    if (ir->auth_revision == 0) { /* etcd isOpPermitted: revision 0 = no user */
        kv_apply_err(a->res, KV_ERR_USER_EMPTY);
        return 1;
    }
    if (ir->auth_revision < rev) {
        kv_apply_err(a->res, KV_ERR_AUTH_OLD_REVISION);
        return 1;
    }
    return kv_apply_lease_perm(a, ir, rev); /* puts with a lease (apply_perm.c) */
}

/* The response of kind d: only a header (every auth write response has field 1 = header). */
static int header_only(kv_actx *a, const ProtobufCMessageDescriptor *d, ProtobufCMessage **msg,
                       Etcdserverpb__ResponseHeader **hdr)
{
    ProtobufCMessage *m = calloc(1, d->sizeof_message);
    if (!m)
        return -ENOMEM;
    d->message_init(m);
    const ProtobufCFieldDescriptor *f = protobuf_c_message_descriptor_get_field(d, 1);
    Etcdserverpb__ResponseHeader *h = kv_apply_header(kv_ks_rev(a->ks));
    if (!h || !f) {
        free(h);
        free(m);
        return -ENOMEM;
    }
    *(Etcdserverpb__ResponseHeader **)((char *)m + f->offset) = h;
    *msg = m;
    *hdr = h;
    return 0;
}

int kv_apply_auth(kv_actx *a, const Kvdpb__InternalRequest *ir, ProtobufCMessage **msg,
                  Etcdserverpb__ResponseHeader **hdr)
{
    kv_auth_tx tx;
    kv_ks_auth_tx(a->ks, &tx);
    const ProtobufCMessageDescriptor *d;
    int rc;
    a->res->barrier = KV_RESULT_BARRIER_AUTH; /* request admission reads it (apply.h) */
    /* etcd authApplierV3.Apply: needAdminPermission is true for every entry here */
    if ((rc = admin_permitted(a, &tx, ir)))
        return rc;
    switch (ir->request_case) {
    case KVDPB__INTERNAL_REQUEST__REQUEST_AUTH_ENABLE:
        rc = auth_enable(a, &tx);
        d = &etcdserverpb__auth_enable_response__descriptor;
        break;
    case KVDPB__INTERNAL_REQUEST__REQUEST_AUTH_DISABLE:
        rc = auth_disable(&tx);
        d = &etcdserverpb__auth_disable_response__descriptor;
        break;
    case KVDPB__INTERNAL_REQUEST__REQUEST_AUTH_USER_ADD:
        rc = user_add(a, &tx, ir->auth_user_add);
        d = &etcdserverpb__auth_user_add_response__descriptor;
        break;
    case KVDPB__INTERNAL_REQUEST__REQUEST_AUTH_USER_DELETE:
        rc = user_delete(a, &tx, ir->auth_user_delete->name);
        d = &etcdserverpb__auth_user_delete_response__descriptor;
        break;
    case KVDPB__INTERNAL_REQUEST__REQUEST_AUTH_USER_CHANGE_PASSWORD:
        rc = user_passwd(a, &tx, ir->auth_user_change_password);
        d = &etcdserverpb__auth_user_change_password_response__descriptor;
        break;
    case KVDPB__INTERNAL_REQUEST__REQUEST_AUTH_USER_GRANT_ROLE:
        rc = user_grant(a, &tx, ir->auth_user_grant_role);
        d = &etcdserverpb__auth_user_grant_role_response__descriptor;
        break;
    case KVDPB__INTERNAL_REQUEST__REQUEST_AUTH_USER_REVOKE_ROLE:
        rc = user_revoke(a, &tx, ir->auth_user_revoke_role);
        d = &etcdserverpb__auth_user_revoke_role_response__descriptor;
        break;
    case KVDPB__INTERNAL_REQUEST__REQUEST_AUTH_ROLE_ADD:
        rc = role_add(a, &tx, ir->auth_role_add->name);
        d = &etcdserverpb__auth_role_add_response__descriptor;
        break;
    case KVDPB__INTERNAL_REQUEST__REQUEST_AUTH_ROLE_DELETE:
        rc = role_delete(a, &tx, ir->auth_role_delete->role);
        d = &etcdserverpb__auth_role_delete_response__descriptor;
        break;
    case KVDPB__INTERNAL_REQUEST__REQUEST_AUTH_ROLE_GRANT_PERMISSION:
        rc = role_grant(a, &tx, ir->auth_role_grant_permission);
        d = &etcdserverpb__auth_role_grant_permission_response__descriptor;
        break;
    case KVDPB__INTERNAL_REQUEST__REQUEST_AUTH_ROLE_REVOKE_PERMISSION:
        rc = role_revoke(a, &tx, ir->auth_role_revoke_permission);
        d = &etcdserverpb__auth_role_revoke_permission_response__descriptor;
        break;
    default:
        kv_apply_err(a->res, KV_ERR_EMPTY_INTERNAL_REQ);
        return 1;
    }
    if (rc != 0 || a->quiet)
        return rc;
    return header_only(a, d, msg, hdr);
}
