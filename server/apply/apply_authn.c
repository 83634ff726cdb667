/* apply_authn: the Authenticate entry (kvdpb.AuthAuthenticate, etcd 3.4 apply.go Authenticate
 * + auth/store.go Authenticate). The proposing member verified the password against the
 * user's password record whose tag (auth/auth_tokens.h kv_auth_pwtag) the entry carries
 * (the clear password never enters the log); here, in log order on every member:
 *   - auth disabled -> "etcdserver: authentication is not enabled";
 *   - user missing, added with no password, or its password record's tag != pwtag (deleted
 *     or changed since the check) -> "etcdserver: authentication failed, invalid user ID or
 *     password";
 *   - otherwise success: res->auth_tokens = KV_RESULT_AUTH_ASSIGN (quiet or not) so that the
 *     node hands the entry to the server after the batch (node/node.h kv_node_set_auth_hook),
 *     which inserts the token "<simple_token>.<index>" (etcd: prefix + "." + consistent
 *     index) in this member's memory; the response (a local waiter only) is
 *     AuthenticateResponse{header (revision = store revision), token}.
 * A pure function of the log: no clock, no randomness; nothing in LMDB changes (the request's
 * child transaction is committed empty, only the applied index moves). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apply/apply_int.h"
#include "auth.pb-c.h"
#include "auth/auth_tokens.h"
#include "mvcc/auth_store.h"

int kv_apply_authenticate(kv_actx *a, const Kvdpb__AuthAuthenticate *r, uint64_t index,
                          ProtobufCMessage **msg, Etcdserverpb__ResponseHeader **hdr)
{
    kv_auth_tx tx;
    kv_ks_auth_tx(a->ks, &tx);
    int en = 0;
    int rc = kv_auth_get_enabled(&tx, &en);
    if (rc)
        return rc;
    if (!en) {
        kv_apply_err(a->res, KV_ERR_AUTH_NOT_ENABLED);
        return 1;
    }
    const char *name = r->name ? r->name : "";
    const char *pre = r->simple_token ? r->simple_token : "";
    Authpb__User *u;
    rc = kv_apply_auth_user(&tx, name, &u);
    if (rc == -ENOENT || rc == -EINVAL) {
        kv_apply_err(a->res, KV_ERR_AUTH_FAILED);
        return 1;
    }
    if (rc)
        return rc;
    int ok = !(u->options && u->options->no_password) && u->password.len > 0 &&
             kv_auth_pwtag(u->password.data, u->password.len) == r->pwtag;
    authpb__user__free_unpacked(u, NULL);
    /* a token this member could not hold is refused the same way on every member */
    if (!ok || !pre[0] || strlen(pre) + 22 > KV_AUTH_TOKEN_MAX) {
        kv_apply_err(a->res, KV_ERR_AUTH_FAILED);
        return 1;
    }
    a->res->auth_tokens = KV_RESULT_AUTH_ASSIGN;
    if (a->quiet)
        return 0;
    char token[KV_AUTH_TOKEN_MAX];
    snprintf(token, sizeof token, "%s.%" PRIu64, pre, index);
    Etcdserverpb__AuthenticateResponse *resp = malloc(sizeof *resp);
    Etcdserverpb__ResponseHeader *h = kv_apply_header(kv_ks_rev(a->ks));
    char *t = strdup(token);
    if (!resp || !h || !t) {
        free(resp);
        free(h);
        free(t);
        return -ENOMEM;
    }
    etcdserverpb__authenticate_response__init(resp);
    resp->header = h;
    resp->token = t;
    *msg = &resp->base;
    *hdr = h;
    return 0;
}
