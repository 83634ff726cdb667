/*
 * service_auth: etcdserverpb.Auth (etcd 3.4 semantics; state in LMDB, mvcc/auth_store.h).
 *
 *   Writes (AuthEnable, AuthDisable, User*, Role* changes) are raft proposals applied by
 *   server/apply/apply_auth.c. UserAdd and UserChangePassword hash the password FIRST, on
 *   the auth hash worker (api/auth_srv.h: PBKDF2-HMAC-SHA256, bounded queue), and propose the
 *   request with hashed_password set and the clear password removed: apply stays a pure
 *   function of the log and the clear password never reaches the log.
 *   Reads (UserGet, UserList, RoleGet, RoleList) are linearizable, as etcd 3.4's (which sends
 *   them through raft): they wait for the ReadIndex barrier (node/node.h kv_node_read_index,
 *   as the linearizable Range), then check the caller (admin, or self for UserGet/RoleGet)
 *   and read this member's committed state on the loop.
 *   Authenticate (etcd 3.4 v3_server.go + apply.go Authenticate): after the same barrier
 *   (etcd linearizableReadNotify), the password is checked on the hash worker of the
 *   receiving member against the user's stored hash; then this member
 *   draws a token prefix (auth/auth_tokens.h kv_auth_tokens_gen; refused with "etcdserver:
 *   too many requests" if its token table is full) and proposes kvdpb.AuthAuthenticate{name,
 *   prefix, tag of the verified password record} (never the password). Every member applies
 *   it (apply/apply_authn.c) and puts the token "<prefix>.<index>" in its own table
 *   (api/auth_srv.h kv_auth_on_applied), so a token is valid on every member once that member
 *   applied the entry; the client's answer is the applied response on this member.
 * When auth is enabled every method but Authenticate needs the root role (etcd
 * needAdminPermission); with auth disabled anyone may call them (UserList is then empty on a
 * fresh store, AuthEnable fails without a root user, Authenticate answers "etcdserver:
 * authentication is not enabled"). The writes are proposed with the caller and the auth
 * revision of that check (InternalRequest auth_user / auth_revision, etcd's request header;
 * no user, and a nonzero revision, while auth is disabled), and apply_auth.c checks the root
 * role again at apply.
 * Loop thread only, but the hash work functions (run on the worker, job memory only).
 */
#include "api/auth_read.h"
#include "api/auth_srv.h"
#include "apply/internal_req.h"
#include "api/services.h"
#include "auth.pb-c.h"
#include "auth/auth_fairq.h"
#include "auth/auth_hash.h"
#include "internal.pb-c.h"
#include "mvcc/auth_store.h"
#include "node/read_pool.h"
#include "api/api.h"

#include "rpc.pb-c.h"

#include <openssl/crypto.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum job_kind { J_VERIFY, J_ADD, J_PASSWD };

struct kv_auth_job {
    kv_list link; /* a->jobs */
    kv_auth *a;
    kv_grpc_call *call; /* NULL once cancelled */
    uint64_t conn;      /* the call's connection (auth/auth_fairq.h ranks by it) */
    int queued;         /* in a->fairq, not yet handed to the hash worker */
    enum job_kind kind;
    char *name;
    char *pw;
    size_t pwlen;
    char *stored; /* J_VERIFY: the stored hash */
    size_t storedlen;
    uint32_t iterations;
    int ok; /* J_VERIFY: match; J_ADD/J_PASSWD: 0 or -errno */
    char hashed[KV_AUTH_HASH_MAX];
    Authpb__UserAddOptions *opts; /* J_ADD: copied options (may be NULL) */
    /* J_ADD/J_PASSWD: the caller the entry is proposed as (kv_auth_require_admin_as) */
    char caller[KV_AUTH_MAX_NAME + 1];
    uint64_t caller_rev; /* never 0 (kv_auth_require_admin_as): 1 with auth disabled */
};

static void job_free(kv_auth_job *j)
{
    if (j->pw) {
        OPENSSL_cleanse(j->pw, j->pwlen);
        free(j->pw);
    }
    OPENSSL_cleanse(j->hashed, sizeof j->hashed);
    free(j->name);
    free(j->stored);
    free(j->opts);
    free(j);
}

static void job_unlink(kv_auth_job *j)
{
    kv_list_remove(&j->link);
}

static void job_work(void *arg)
{
    kv_auth_job *j = arg;
    if (j->kind == J_VERIFY)
        j->ok = kv_auth_hash_verify(j->pw, j->pwlen, j->stored, j->storedlen);
    else
        j->ok = kv_auth_hash(j->pw, j->pwlen, j->iterations, j->hashed);
}

static void job_done(void *arg, int status);

/* Hands the best-ranked queued job to the hash worker when it is idle (one job at a time,
 * so the order of service is auth_fairq's, not the worker queue's FIFO). */
static void pump(kv_auth *a)
{
    kv_auth_job *j;
    while (!a->closing && a->running == 0 && (j = kv_auth_fairq_pop(a->fairq))) {
        j->queued = 0;
        int rc = kv_read_pool_submit(a->hash_pool, job_work, job_done, j);
        if (rc == 0) {
            a->running++;
            return;
        }
        job_unlink(j);
        if (j->call)
            kv_reply_etcd_err(j->call, rc == -EBUSY ? KV_ERR_TOO_MANY_REQUESTS : KV_ERR_STOPPED);
        job_free(j);
    }
}

/* Queues j (owned from here on) in the fair queue (auth/auth_fairq.h: a connection whose
 * password checks keep failing cannot hold a place a better-ranked job needs). 0, or 1 after
 * answering the call. */
static int job_submit(kv_grpc_call *call, kv_auth_job *j)
{
    kv_api *s = kv_grpc_call_app(call);
    kv_auth *a = s->auth;
    if (!a || a->closing) { /* the member's core is not running */
        job_free(j);
        kv_reply_etcd_err(call, KV_ERR_STOPPED);
        return 1;
    }
    j->a = a;
    j->call = call;
    j->conn = kv_grpc_call_conn_id(call);
    j->iterations = a->iterations;
    void *ev = NULL;
    int rc = kv_auth_fairq_push(a->fairq, j->conn, j, &ev);
    if (j->kind == J_VERIFY) /* every login attempt counts until one succeeds */
        kv_auth_fairq_charge(a->fairq, j->conn);
    if (rc < 0) {
        a->hashes_refused++;
        job_free(j);
        kv_reply_etcd_err(call, KV_ERR_TOO_MANY_REQUESTS);
        return 1;
    }
    j->queued = 1;
    kv_list_insert_head(&a->jobs, &j->link);
    if (ev) { /* a worse-ranked job lost its place: shed as if it had been refused */
        kv_auth_job *e = ev;
        a->hashes_refused++;
        a->hashes_evicted++;
        job_unlink(e);
        if (e->call)
            kv_reply_etcd_err(e->call, KV_ERR_TOO_MANY_REQUESTS);
        job_free(e);
    }
    pump(a);
    return 0;
}

void kv_auth_jobs_drain(kv_auth *a)
{
    kv_auth_job *j;
    while (a->fairq && (j = kv_auth_fairq_pop(a->fairq))) {
        job_unlink(j);
        if (j->call)
            kv_reply_etcd_err(j->call, KV_ERR_STOPPED);
        job_free(j);
    }
}

/* ---- the read barrier (etcd 3.4: these reads go through raft; Authenticate waits for
 * linearizableReadNotify) ---- */

static void on_cancel(kv_grpc_call *call)
{
    kv_api *s = kv_grpc_call_app(call);
    if (kv_auth_read_cancel(call))
        return; /* freed when the barrier completes */
    kv_list *e;
    if (s->auth) {
        kv_list_foreach(e, &s->auth->jobs) {
            kv_auth_job *j = kv_list_data(e, kv_auth_job, link);
            if (j->call != call)
                continue;
            if (j->queued && kv_auth_fairq_remove(s->auth->fairq, j) == 0) {
                job_unlink(j); /* not started: its place goes to the next job */
                job_free(j);
                return;
            }
            j->call = NULL; /* the hash finishes; nothing is sent or proposed */
            return;
        }
    }
    if (kv_grpc_call_data(call))
        kv_propose_cancel(call);
}

/* Proposes msg as entry field on behalf of user ("" when auth was disabled at the check) at
 * auth revision rev (never 0, kv_auth_require_admin_as): kv_propose_unary wraps it with
 * s->auth->cur_user / cur_revision (services.c), set here for the call only and restored
 * after. */
static void propose_as(kv_grpc_call *call, int field, const uint8_t *msg, size_t len,
                       const char *user, uint64_t rev)
{
    kv_api *s = kv_grpc_call_app(call);
    kv_auth *a = s->auth;
    if (!a) { /* no auth runtime (core not started): nothing to carry the caller in */
        kv_propose_unary(call, field, msg, len);
        return;
    }
    char saved_user[sizeof a->cur_user];
    uint64_t saved_rev = a->cur_revision;
    memcpy(saved_user, a->cur_user, sizeof saved_user);
    snprintf(a->cur_user, sizeof a->cur_user, "%s", user);
    a->cur_revision = rev;
    kv_propose_unary(call, field, msg, len);
    memcpy(a->cur_user, saved_user, sizeof saved_user);
    a->cur_revision = saved_rev;
}

static void propose_msg(kv_grpc_call *call, int field, const ProtobufCMessage *m, const char *user,
                        uint64_t rev)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf) {
        kv_reply_etcd_err(call, KV_ERR_NOMEM);
        return;
    }
    protobuf_c_message_pack(m, buf);
    propose_as(call, field, buf, n, user, rev);
    free(buf);
}

/* JWT mode: the applied entry's simple token (in the table since the auth hook ran) names
 * the user; it is dropped and a JWT with the current auth revision answers instead (etcd's
 * tokenJWT.assign at apply; signing costs about 1 ms of loop time, once per login after the
 * password hash ran on the hash worker, see auth/auth_jwt.h). */
static void reply_jwt(kv_grpc_call *call, kv_api *s, Etcdserverpb__AuthenticateResponse *r)
{
    kv_auth *a = s->auth;
    char user[KV_AUTH_MAX_NAME + 1];
    const char *u = kv_auth_tokens_lookup(a->tokens, r->token, uv_now(s->loop), NULL);
    snprintf(user, sizeof user, "%s", u ? u : "");
    kv_auth_tokens_drop(a->tokens, r->token);
    kv_auth_tx tx;
    uint64_t rev = 0;
    int rc = kv_store_auth_read_begin(s->store, &tx);
    if (rc == 0) {
        rc = kv_auth_get_revision(&tx, &rev);
        kv_store_auth_read_end(&tx);
    }
    if (rc || !user[0]) {
        kv_reply_etcd_err(call, KV_ERR_STORAGE);
        return;
    }
    char *jwt = NULL;
    rc = kv_jwt_sign(a->jwt, user, rev, (uint64_t)time(NULL), &jwt);
    if (rc) {
        kv_reply_etcd_err(call, rc == -EPERM ? KV_ERR_JWT_VERIFY_ONLY : KV_ERR_REQUEST_INTERNAL);
        return;
    }
    char *simple = r->token;
    r->token = jwt;
    kv_reply_message(call, &r->base);
    r->token = simple;
    free(jwt);
}

/* The Authenticate entry applied on this member (node completion, loop): the node's auth
 * hook put the token in this member's table just before (unless the table was full). */
static void on_authenticated(void *arg, kv_result *res)
{
    kv_grpc_call *call = arg;
    kv_api *s = kv_grpc_call_app(call);
    kv_grpc_call_set_data(call, NULL);
    if (res->err != KV_ERR_NONE) {
        kv_reply_result_err(call, res);
        return;
    }
    Etcdserverpb__AuthenticateResponse *r =
        etcdserverpb__authenticate_response__unpack(NULL, res->resp_len, res->resp);
    int held = r && r->token && s->auth &&
               kv_auth_tokens_lookup(s->auth->tokens, r->token, uv_now(s->loop), NULL);
    if (!held) { /* the table filled up meanwhile: the token is not valid here */
        etcdserverpb__authenticate_response__free_unpacked(r, NULL);
        kv_reply_etcd_err(call, s->auth ? KV_ERR_TOO_MANY_REQUESTS : KV_ERR_STOPPED);
        return;
    }
    if (s->auth->jwt) {
        reply_jwt(call, s, r);
    } else {
        kv_reply_result(call, res);
    }
    etcdserverpb__authenticate_response__free_unpacked(r, NULL);
}

static void finish_authenticate(kv_grpc_call *call, kv_auth_job *j)
{
    kv_api *s = kv_grpc_call_app(call);
    if (!j->ok) { /* charged when it was asked for (job_submit) */
        kv_reply_etcd_err(call, KV_ERR_AUTH_FAILED);
        return;
    }
    kv_auth_fairq_clear(j->a->fairq, j->conn);
    /* etcd re-checks against the current state (checkedRevision): the user may have been
     * deleted, or its password changed, while the hash ran. */
    kv_auth_tx tx;
    if (kv_store_auth_read_begin(s->store, &tx)) {
        kv_reply_etcd_err(call, KV_ERR_STORAGE);
        return;
    }
    int en = 0;
    uint8_t *v = NULL;
    size_t n = 0;
    int rc = kv_auth_get_enabled(&tx, &en);
    if (rc == 0 && en)
        rc = kv_auth_get(&tx, KV_AUTH_USER, j->name, strlen(j->name), &v, &n);
    kv_store_auth_read_end(&tx);
    Authpb__User *u = rc == 0 && en ? authpb__user__unpack(NULL, n, v) : NULL;
    free(v);
    if (rc == 0 && !en) {
        kv_reply_etcd_err(call, KV_ERR_AUTH_NOT_ENABLED);
        return;
    }
    if (!u || u->password.len != j->storedlen ||
        memcmp(u->password.data, j->stored, j->storedlen) != 0) {
        authpb__user__free_unpacked(u, NULL);
        kv_reply_etcd_err(call, rc && rc != -ENOENT ? KV_ERR_STORAGE : KV_ERR_AUTH_FAILED);
        return;
    }
    uint64_t tag = kv_auth_pwtag(u->password.data, u->password.len);
    authpb__user__free_unpacked(u, NULL);
    /* The table bound: refused before proposing (every member holds every token, so this
     * member's table stands for the cluster's). */
    if (kv_auth_tokens_full(s->auth->tokens, uv_now(s->loop))) {
        s->auth->tokens_refused++;
        kv_reply_etcd_err(call, KV_ERR_TOO_MANY_REQUESTS);
        return;
    }
    char pre[KV_AUTH_TOKEN_PREFIX_LEN + 1];
    if (kv_auth_tokens_gen(pre)) {
        kv_reply_etcd_err(call, KV_ERR_REQUEST_INTERNAL);
        return;
    }
    Kvdpb__AuthAuthenticate aa = KVDPB__AUTH_AUTHENTICATE__INIT;
    aa.name = j->name;
    aa.simple_token = pre;
    aa.pwtag = tag;
    Kvdpb__InternalRequest ir = KVDPB__INTERNAL_REQUEST__INIT;
    ir.request_case = KVDPB__INTERNAL_REQUEST__REQUEST_AUTH_AUTHENTICATE;
    ir.auth_authenticate = &aa;
    size_t n2 = kvdpb__internal_request__get_packed_size(&ir);
    uint8_t *req = malloc(n2 ? n2 : 1);
    if (!req) {
        kv_reply_etcd_err(call, KV_ERR_NOMEM);
        return;
    }
    kvdpb__internal_request__pack(&ir, req);
    kv_node_req *h = NULL;
    rc = kv_node_propose(s->node, req, n2, on_authenticated, call, &h); /* takes req */
    if (rc < 0) {
        kv_reply_propose_error(call, rc);
        return;
    }
    kv_grpc_call_set_data(call, h);
}

static void job_done(void *arg, int status)
{
    kv_auth_job *j = arg;
    kv_auth *a = j->a;
    a->running--;
    job_unlink(j);
    kv_grpc_call *call = j->call;
    if (!call) {
        job_free(j);
        pump(a);
        return;
    }
    if (status != 0) {
        kv_reply_etcd_err(call, KV_ERR_STOPPED);
    } else if (j->kind == J_VERIFY) {
        finish_authenticate(call, j);
    } else if (j->ok < 0) {
        kv_reply_etcd_err(call, KV_ERR_REQUEST_INTERNAL);
    } else if (j->kind == J_ADD) {
        Etcdserverpb__AuthUserAddRequest r = ETCDSERVERPB__AUTH_USER_ADD_REQUEST__INIT;
        r.name = j->name;
        r.hashed_password = j->hashed;
        r.options = j->opts;
        propose_msg(call, KV_IREQ_AUTH_USER_ADD, &r.base, j->caller, j->caller_rev);
    } else {
        Etcdserverpb__AuthUserChangePasswordRequest r =
            ETCDSERVERPB__AUTH_USER_CHANGE_PASSWORD_REQUEST__INIT;
        r.name = j->name;
        r.hashed_password = j->hashed;
        propose_msg(call, KV_IREQ_AUTH_USER_CHANGE_PASSWORD, &r.base, j->caller, j->caller_rev);
    }
    job_free(j);
    pump(a);
}

static kv_auth_job *job_new(enum job_kind kind, const char *name, const char *pw)
{
    kv_auth_job *j = calloc(1, sizeof *j);
    if (!j)
        return NULL;
    j->kind = kind;
    j->pwlen = strlen(pw);
    if (!(j->name = strdup(name)) || !(j->pw = strdup(pw))) {
        job_free(j);
        return NULL;
    }
    return j;
}

/* ---- Authenticate ---- */

static void do_authenticate(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    kv_api *s = kv_grpc_call_app(call);
    Etcdserverpb__AuthenticateRequest *r =
        etcdserverpb__authenticate_request__unpack(NULL, len, msg);
    if (!r) {
        kv_reply_etcd_err(call, KV_ERR_GRPC_UNMARSHAL);
        return;
    }
    kv_auth_tx tx;
    if (kv_store_auth_read_begin(s->store, &tx)) {
        etcdserverpb__authenticate_request__free_unpacked(r, NULL);
        kv_reply_etcd_err(call, KV_ERR_STORAGE);
        return;
    }
    int en = 0, err = 0;
    uint8_t *v = NULL;
    size_t n = 0;
    int rc = kv_auth_get_enabled(&tx, &en);
    if (rc == 0 && !en)
        err = KV_ERR_AUTH_NOT_ENABLED;
    else if (rc == 0)
        rc =
            r->name[0] ? kv_auth_get(&tx, KV_AUTH_USER, r->name, strlen(r->name), &v, &n) : -ENOENT;
    kv_store_auth_read_end(&tx);
    Authpb__User *u = NULL;
    if (!err && (rc == -ENOENT || rc == -EINVAL))
        err = KV_ERR_AUTH_FAILED;
    else if (!err && rc)
        err = KV_ERR_STORAGE;
    else if (!err && !(u = authpb__user__unpack(NULL, n, v)))
        err = KV_ERR_STORAGE;
    free(v);
    if (!err && ((u->options && u->options->no_password) || u->password.len == 0))
        err = KV_ERR_AUTH_FAILED; /* etcd: a user added with --no-password cannot log in */
    kv_auth_job *j = NULL;
    if (!err && !(j = job_new(J_VERIFY, r->name, r->password)))
        err = KV_ERR_NOMEM;
    if (!err && !(j->stored = malloc(u->password.len))) {
        job_free(j);
        err = KV_ERR_NOMEM;
    }
    if (!err) {
        memcpy(j->stored, u->password.data, u->password.len);
        j->storedlen = u->password.len;
    }
    authpb__user__free_unpacked(u, NULL);
    etcdserverpb__authenticate_request__free_unpacked(r, NULL);
    if (err) {
        kv_reply_etcd_err(call, (kv_etcd_err)err);
        return;
    }
    job_submit(call, j);
}

/* etcd 3.4 v3_server.go Authenticate: linearizableReadNotify, then the password check. */
static void on_authenticate(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    kv_auth_after_barrier(call, msg, len, do_authenticate);
}

/* ---- writes ---- */

static void on_user_add(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    Etcdserverpb__AuthUserAddRequest *r =
        etcdserverpb__auth_user_add_request__unpack(NULL, len, msg);
    if (!r) {
        kv_reply_etcd_err(call, KV_ERR_GRPC_UNMARSHAL);
        return;
    }
    char who[KV_AUTH_MAX_NAME + 1];
    uint64_t rev;
    if (kv_auth_require_admin_as(call, who, sizeof who, &rev))
        goto out;
    if (!r->name[0]) {
        kv_reply_etcd_err(call, KV_ERR_USER_EMPTY);
        goto out;
    }
    if (r->options && r->options->no_password) {
        Etcdserverpb__AuthUserAddRequest nr = ETCDSERVERPB__AUTH_USER_ADD_REQUEST__INIT;
        nr.name = r->name;
        nr.options = r->options;
        propose_msg(call, KV_IREQ_AUTH_USER_ADD, &nr.base, who, rev);
        goto out;
    }
    kv_auth_job *j = job_new(J_ADD, r->name, r->password);
    if (j && r->options && (j->opts = malloc(sizeof *j->opts))) {
        authpb__user_add_options__init(j->opts);
        j->opts->no_password = r->options->no_password;
    }
    if (!j) {
        kv_reply_etcd_err(call, KV_ERR_NOMEM);
        goto out;
    }
    snprintf(j->caller, sizeof j->caller, "%s", who);
    j->caller_rev = rev;
    job_submit(call, j);
out:
    if (r->password)
        OPENSSL_cleanse(r->password, strlen(r->password));
    etcdserverpb__auth_user_add_request__free_unpacked(r, NULL);
}

static void on_user_change_password(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    Etcdserverpb__AuthUserChangePasswordRequest *r =
        etcdserverpb__auth_user_change_password_request__unpack(NULL, len, msg);
    if (!r) {
        kv_reply_etcd_err(call, KV_ERR_GRPC_UNMARSHAL);
        return;
    }
    char who[KV_AUTH_MAX_NAME + 1];
    uint64_t rev;
    if (!kv_auth_require_admin_as(call, who, sizeof who, &rev)) {
        kv_auth_job *j = job_new(J_PASSWD, r->name, r->password);
        if (!j) {
            kv_reply_etcd_err(call, KV_ERR_NOMEM);
        } else {
            snprintf(j->caller, sizeof j->caller, "%s", who);
            j->caller_rev = rev;
            job_submit(call, j);
        }
    }
    if (r->password)
        OPENSSL_cleanse(r->password, strlen(r->password));
    etcdserverpb__auth_user_change_password_request__free_unpacked(r, NULL);
}

/* Requests proposed as the client sent them (no secrets), after the admin check, with the
 * caller of that check. */
static const struct {
    const char *path;
    int field;
} plain[] = {
    {"/etcdserverpb.Auth/AuthEnable", KV_IREQ_AUTH_ENABLE},
    {"/etcdserverpb.Auth/AuthDisable", KV_IREQ_AUTH_DISABLE},
    {"/etcdserverpb.Auth/UserDelete", KV_IREQ_AUTH_USER_DELETE},
    {"/etcdserverpb.Auth/UserGrantRole", KV_IREQ_AUTH_USER_GRANT_ROLE},
    {"/etcdserverpb.Auth/UserRevokeRole", KV_IREQ_AUTH_USER_REVOKE_ROLE},
    {"/etcdserverpb.Auth/RoleAdd", KV_IREQ_AUTH_ROLE_ADD},
    {"/etcdserverpb.Auth/RoleDelete", KV_IREQ_AUTH_ROLE_DELETE},
    {"/etcdserverpb.Auth/RoleGrantPermission", KV_IREQ_AUTH_ROLE_GRANT_PERMISSION},
    {"/etcdserverpb.Auth/RoleRevokePermission", KV_IREQ_AUTH_ROLE_REVOKE_PERMISSION},
};

static void on_plain_write(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    const char *path = kv_grpc_call_method(call);
    for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++)
        if (strcmp(plain[i].path, path) == 0) {
            char who[KV_AUTH_MAX_NAME + 1];
            uint64_t rev;
            if (kv_auth_require_admin_as(call, who, sizeof who, &rev))
                return;
            propose_as(call, plain[i].field, msg, len, who, rev);
            return;
        }
    kv_reply_etcd_err(call, KV_ERR_REQUEST_INTERNAL);
}

#define A(m) "/etcdserverpb.Auth/" m

const kv_grpc_method kv_service_auth[] = {
    {A("AuthEnable"), 0, on_plain_write, NULL, on_cancel},
    {A("AuthDisable"), 0, on_plain_write, NULL, on_cancel},
    {A("Authenticate"), 0, on_authenticate, NULL, on_cancel},
    {A("UserAdd"), 0, on_user_add, NULL, on_cancel},
    {A("UserGet"), 0, kv_auth_on_user_get, NULL, on_cancel},
    {A("UserList"), 0, kv_auth_on_list, NULL, on_cancel},
    {A("UserDelete"), 0, on_plain_write, NULL, on_cancel},
    {A("UserChangePassword"), 0, on_user_change_password, NULL, on_cancel},
    {A("UserGrantRole"), 0, on_plain_write, NULL, on_cancel},
    {A("UserRevokeRole"), 0, on_plain_write, NULL, on_cancel},
    {A("RoleAdd"), 0, on_plain_write, NULL, on_cancel},
    {A("RoleGet"), 0, kv_auth_on_role_get, NULL, on_cancel},
    {A("RoleList"), 0, kv_auth_on_list, NULL, on_cancel},
    {A("RoleDelete"), 0, on_plain_write, NULL, on_cancel},
    {A("RoleGrantPermission"), 0, on_plain_write, NULL, on_cancel},
    {A("RoleRevokePermission"), 0, on_plain_write, NULL, on_cancel},
};
const size_t kv_service_auth_len = sizeof(kv_service_auth) / sizeof(kv_service_auth[0]);
