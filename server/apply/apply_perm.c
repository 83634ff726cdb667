/* apply_perm: etcd 3.4's apply-time lease permission check (etcdserver/apply_auth.go
 * authApplierV3.checkLeasePuts, auth/store.go IsAdminPermitted + IsPutPermitted): a
 * LeaseRevoke, or a Put that attaches a key to a lease, needs WRITE permission on every key
 * already attached to that lease (etcd: "the specified lease is already attached with a key
 * that cannot be written by this user. It means the user cannot revoke the lease so
 * attaching the lease to the newly written key should be forbidden").
 *
 * The caller is the entry's auth_user, checked against the auth state of the apply
 * transaction (mvcc/auth_store.h) and the lease's keys as the request sees them
 * (kv_ks_lease_keys): a pure function of the log. Per etcd, a root user passes whatever the
 * auth revision; any other user is refused with "revision of auth store is old" if the
 * entry's auth_revision is behind, else "permission denied" on the first key it cannot
 * write (or if the user no longer exists). A lease with no keys (or no lease) passes.
 * Apply worker only; the caller has checked that auth is enabled. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "apply/apply_int.h"
#include "auth.pb-c.h"
#include "auth/auth_perm.h"
#include "mvcc/auth_store.h"

#define ROOT "root"
#define STOP_OK 1      /* walk stopped: the caller is root */
#define STOP_REFUSED 2 /* walk stopped: refused, p->err set */

typedef struct perm_ctx {
    kv_auth_tx tx;
    const char *user;
    uint64_t arev, rev;
    int loaded, found, root;
    Authpb__Role **roles;
    size_t n_roles;
    kv_auth_perm *perms;
    size_t n_perms;
    kv_etcd_err err;
} perm_ctx;

static void perm_free(perm_ctx *p)
{
    for (size_t i = 0; i < p->n_roles; i++)
        authpb__role__free_unpacked(p->roles[i], NULL);
    free(p->roles);
    free(p->perms);
}

/* The user's roles and permissions, as server/api/auth_srv.c load_perms (loop side). */
static int perm_load(perm_ctx *p)
{
    p->loaded = 1;
    uint8_t *v;
    size_t n;
    Authpb__User *u;
    int rc = kv_apply_auth_user(&p->tx, p->user ? p->user : "", &u);
    if (rc == -ENOENT || rc == -EINVAL)
        return 0; /* no such user: every check fails (etcd getUser nil) */
    if (rc)
        return rc;
    p->found = 1;
    size_t total = 0;
    if (u->n_roles && !(p->roles = calloc(u->n_roles, sizeof *p->roles))) {
        rc = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < u->n_roles && !p->root; i++) {
        const char *role = u->roles[i];
        if (strcmp(role, ROOT) == 0) {
            p->root = 1;
            break;
        }
        rc = role[0] ? kv_auth_get(&p->tx, KV_AUTH_ROLE, role, strlen(role), &v, &n) : -ENOENT;
        if (rc == -ENOENT || rc == -EINVAL) {
            rc = 0;
            continue; /* a deleted role grants nothing */
        }
        if (rc)
            goto out;
        Authpb__Role *r = authpb__role__unpack(NULL, n, v);
        free(v);
        if (!r) {
            rc = -EBADMSG;
            goto out;
        }
        p->roles[p->n_roles++] = r;
        total += r->n_keypermission;
    }
    if (total && !(p->perms = calloc(total, sizeof *p->perms))) {
        rc = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < p->n_roles; i++)
        for (size_t j = 0; j < p->roles[i]->n_keypermission; j++) {
            const Authpb__Permission *pm = p->roles[i]->keypermission[j];
            p->perms[p->n_perms++] = (kv_auth_perm){(int)pm->permtype, pm->key.data, pm->key.len,
                                                    pm->range_end.data, pm->range_end.len};
        }
out:
    authpb__user__free_unpacked(u, NULL);
    return rc;
}

static int key_fn(void *arg, const uint8_t *key, size_t klen)
{
    perm_ctx *p = arg;
    if (!p->loaded) {
        int rc = perm_load(p);
        if (rc)
            return rc;
    }
    if (p->root)
        return STOP_OK; /* etcd checkLeasePutsKeys: IsAdminPermitted first */
    if (p->arev < p->rev) {
        p->err = KV_ERR_AUTH_OLD_REVISION;
        return STOP_REFUSED;
    }
    if (!p->found ||
        !kv_auth_perm_allows(p->perms, p->n_perms, KV_PERM_WRITE, key, klen, NULL, 0)) {
        p->err = KV_ERR_PERMISSION_DENIED;
        return STOP_REFUSED;
    }
    return 0;
}

static int check_lease(kv_actx *a, perm_ctx *p, int64_t lease)
{
    if (lease == 0)
        return 0;
    int rc = kv_ks_lease_keys(a->ks, lease, key_fn, p);
    if (rc == STOP_REFUSED) {
        kv_apply_err(a->res, p->err);
        return 1;
    }
    return rc == STOP_OK ? 0 : rc;
}

static int check_ops(kv_actx *a, perm_ctx *p, Etcdserverpb__RequestOp **ops, size_t n);

static int check_txn(kv_actx *a, perm_ctx *p, const Etcdserverpb__TxnRequest *t)
{
    int rc = check_ops(a, p, t->success, t->n_success);
    return rc ? rc : check_ops(a, p, t->failure, t->n_failure);
}

/* Both branches, nested txns too (the arrival check in auth_gate.c does the same); the
 * nesting was bounded before the entry was unpacked (applier.c). */
static int check_ops(kv_actx *a, perm_ctx *p, Etcdserverpb__RequestOp **ops, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int rc = 0;
        if (ops[i]->request_case == ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT)
            rc = check_lease(a, p, ops[i]->request_put->lease);
        else if (ops[i]->request_case == ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_TXN)
            rc = check_txn(a, p, ops[i]->request_txn);
        if (rc)
            return rc;
    }
    return 0;
}

int kv_apply_lease_perm(kv_actx *a, const Kvdpb__InternalRequest *ir, uint64_t auth_rev)
{
    perm_ctx p = {.user = ir->auth_user, .arev = ir->auth_revision, .rev = auth_rev};
    kv_ks_auth_tx(a->ks, &p.tx);
    int rc = 0;
    switch (ir->request_case) {
    case KVDPB__INTERNAL_REQUEST__REQUEST_PUT:
        rc = check_lease(a, &p, ir->put->lease);
        break;
    case KVDPB__INTERNAL_REQUEST__REQUEST_TXN:
        rc = check_txn(a, &p, ir->txn);
        break;
    case KVDPB__INTERNAL_REQUEST__REQUEST_LEASE_REVOKE:
        rc = check_lease(a, &p, ir->lease_revoke->id);
        break;
    default:
        break;
    }
    perm_free(&p);
    return rc;
}
