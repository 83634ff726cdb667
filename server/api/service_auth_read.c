/*
 * service_auth_read: the reads of etcdserverpb.Auth (UserList, RoleList, UserGet, RoleGet) and
 * the ReadIndex barrier they and Authenticate wait behind (api/auth_read.h). Loop thread only.
 */
#include "api/auth_read.h"
#include "api/auth_srv.h"
#include "api/services.h"
#include "auth.pb-c.h"
#include "mvcc/auth_store.h"
#include "api/api.h"

#include "rpc.pb-c.h"

#include <openssl/crypto.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct kv_auth_read {
    kv_list link;       /* a->reads while a != NULL */
    kv_auth *a;         /* NULL once detached (kv_auth_reads_detach) */
    kv_grpc_call *call; /* NULL once the RPC was cancelled */
    kv_auth_read_fn fn;
    size_t len;
    uint8_t msg[]; /* copy of the request (Authenticate: holds the password) */
};

static void read_unlink(kv_auth_read *r)
{
    if (!r->a)
        return;
    kv_list_remove(&r->link);
    r->a = NULL;
}

static void read_free(kv_auth_read *r)
{
    OPENSSL_cleanse(r->msg, r->len);
    free(r);
}

void kv_auth_reads_detach(kv_auth *a)
{
    kv_list *e;
    while ((e = kv_list_head(&a->reads)))
        read_unlink(kv_list_data(e, kv_auth_read, link));
}

static void on_read_index(void *arg, int status)
{
    kv_auth_read *r = arg;
    read_unlink(r);
    kv_grpc_call *call = r->call;
    if (call && status == 0)
        r->fn(call, r->msg, r->len);
    else if (call)
        kv_reply_etcd_err(call, status == -EAGAIN      ? KV_ERR_NO_LEADER
                                : status == -EBUSY     ? KV_ERR_TOO_MANY_REQUESTS
                                : status == -ECANCELED ? KV_ERR_STOPPED
                                                       : KV_ERR_TIMEOUT);
    read_free(r);
}

void kv_auth_after_barrier(kv_grpc_call *call, const uint8_t *msg, size_t len, kv_auth_read_fn fn)
{
    kv_api *s = kv_grpc_call_app(call);
    if (!s->node || !s->auth) {
        kv_reply_etcd_err(call, KV_ERR_STOPPED);
        return;
    }
    kv_auth_read *r = malloc(sizeof *r + len);
    if (!r) {
        kv_reply_etcd_err(call, KV_ERR_NOMEM);
        return;
    }
    kv_auth *a = s->auth;
    r->a = a;
    r->call = call;
    r->fn = fn;
    r->len = len;
    if (len)
        memcpy(r->msg, msg, len);
    kv_list_insert_head(&a->reads, &r->link);
    int rc = kv_node_read_index(s->node, on_read_index, r);
    if (rc == 1) { /* nothing to wait for */
        on_read_index(r, 0);
    } else if (rc < 0) {
        read_unlink(r);
        read_free(r);
        kv_reply_propose_error(call, rc);
    }
}

int kv_auth_read_cancel(kv_grpc_call *call)
{
    kv_api *s = kv_grpc_call_app(call);
    if (!s->auth)
        return 0;
    kv_list *e;
    kv_list_foreach(e, &s->auth->reads) {
        kv_auth_read *r = kv_list_data(e, kv_auth_read, link);
        if (r->call == call) {
            r->call = NULL; /* freed when the barrier completes */
            return 1;
        }
    }
    return 0;
}

/* ---- UserList, RoleList, UserGet, RoleGet ---- */

typedef struct names {
    char **v;
    size_t n, cap;
    int err;
} names;

static int name_fn(void *arg, const uint8_t *name, size_t nlen, const uint8_t *val, size_t vlen)
{
    (void)val;
    (void)vlen;
    names *x = arg;
    if (x->n == x->cap) {
        size_t cap = x->cap ? 2 * x->cap : 16;
        char **nv = realloc(x->v, cap * sizeof *nv);
        if (!nv)
            return -ENOMEM;
        x->v = nv;
        x->cap = cap;
    }
    char *v = malloc(nlen + 1); /* name is not NUL-terminated: no strndup */
    if (!v)
        return -ENOMEM;
    memcpy(v, name, nlen);
    v[nlen] = '\0';
    x->v[x->n++] = v;
    return 0;
}

static void names_free(names *x)
{
    for (size_t i = 0; i < x->n; i++)
        free(x->v[i]);
    free(x->v);
}

static void do_list(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    (void)msg;
    (void)len;
    kv_api *s = kv_grpc_call_app(call);
    if (kv_auth_require_admin(call))
        return;
    int roles = strcmp(kv_grpc_call_method(call), "/etcdserverpb.Auth/RoleList") == 0;
    kv_auth_tx tx;
    names x = {0};
    int rc = kv_store_auth_read_begin(s->store, &tx);
    if (rc == 0) {
        rc = kv_auth_walk(&tx, roles ? KV_AUTH_ROLE : KV_AUTH_USER, name_fn, &x);
        kv_store_auth_read_end(&tx);
    }
    if (rc) {
        names_free(&x);
        kv_reply_etcd_err(call, rc == -ENOMEM ? KV_ERR_NOMEM : KV_ERR_STORAGE);
        return;
    }
    Etcdserverpb__ResponseHeader h = ETCDSERVERPB__RESPONSE_HEADER__INIT;
    kv_fill_header(call, &h, KV_HDR_REVISION_NOW);
    if (roles) {
        Etcdserverpb__AuthRoleListResponse r = ETCDSERVERPB__AUTH_ROLE_LIST_RESPONSE__INIT;
        r.header = &h;
        r.roles = x.v;
        r.n_roles = x.n;
        kv_reply_message(call, &r.base);
    } else {
        Etcdserverpb__AuthUserListResponse r = ETCDSERVERPB__AUTH_USER_LIST_RESPONSE__INIT;
        r.header = &h;
        r.users = x.v;
        r.n_users = x.n;
        kv_reply_message(call, &r.base);
    }
    names_free(&x);
}

/* etcd 3.4 authApplierV3.UserGet/RoleGet: root, or a user asking about itself / a role it
 * has. 0 go on, 1 answered. */
static int require_admin_or_self(kv_grpc_call *call, const char *user, const char *role)
{
    kv_auth_caller c;
    if (kv_auth_caller_begin(call, &c))
        return 1;
    int e = kv_auth_caller_admin_err(&c);
    if (e && c.found && user && strcmp(user, c.user) == 0)
        e = 0;
    for (size_t i = 0; e && c.found && role && i < c.n_user_roles; i++)
        if (strcmp(c.user_roles[i], role) == 0)
            e = 0;
    kv_auth_caller_end(&c);
    if (e) {
        kv_reply_etcd_err(call, (kv_etcd_err)e);
        return 1;
    }
    return 0;
}

/* Reads one record: 0 (*out unpacked), or 1 after answering. */
static int read_record(kv_grpc_call *call, char kind, const char *name, ProtobufCMessage **out)
{
    kv_api *s = kv_grpc_call_app(call);
    kv_auth_tx tx;
    uint8_t *v = NULL;
    size_t n = 0;
    int rc = kv_store_auth_read_begin(s->store, &tx);
    if (rc == 0) {
        rc = name[0] ? kv_auth_get(&tx, kind, name, strlen(name), &v, &n) : -ENOENT;
        kv_store_auth_read_end(&tx);
    }
    if (rc == -ENOENT || rc == -EINVAL) {
        kv_reply_etcd_err(call,
                          kind == KV_AUTH_USER ? KV_ERR_USER_NOT_FOUND : KV_ERR_ROLE_NOT_FOUND);
        return 1;
    }
    *out = rc ? NULL
              : protobuf_c_message_unpack(kind == KV_AUTH_USER ? &authpb__user__descriptor
                                                               : &authpb__role__descriptor,
                                          NULL, n, v);
    free(v);
    if (!*out) {
        kv_reply_etcd_err(call, rc == -ENOMEM ? KV_ERR_NOMEM : KV_ERR_STORAGE);
        return 1;
    }
    return 0;
}

static void do_user_get(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    Etcdserverpb__AuthUserGetRequest *r =
        etcdserverpb__auth_user_get_request__unpack(NULL, len, msg);
    if (!r) {
        kv_reply_etcd_err(call, KV_ERR_GRPC_UNMARSHAL);
        return;
    }
    ProtobufCMessage *m;
    if (!require_admin_or_self(call, r->name, NULL) &&
        !read_record(call, KV_AUTH_USER, r->name, &m)) {
        Authpb__User *u = (Authpb__User *)m;
        Etcdserverpb__ResponseHeader h = ETCDSERVERPB__RESPONSE_HEADER__INIT;
        kv_fill_header(call, &h, KV_HDR_REVISION_NOW);
        Etcdserverpb__AuthUserGetResponse resp = ETCDSERVERPB__AUTH_USER_GET_RESPONSE__INIT;
        resp.header = &h;
        resp.roles = u->roles;
        resp.n_roles = u->n_roles;
        kv_reply_message(call, &resp.base);
        authpb__user__free_unpacked(u, NULL);
    }
    etcdserverpb__auth_user_get_request__free_unpacked(r, NULL);
}

static void do_role_get(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    Etcdserverpb__AuthRoleGetRequest *r =
        etcdserverpb__auth_role_get_request__unpack(NULL, len, msg);
    if (!r) {
        kv_reply_etcd_err(call, KV_ERR_GRPC_UNMARSHAL);
        return;
    }
    ProtobufCMessage *m;
    if (!require_admin_or_self(call, NULL, r->role) &&
        !read_record(call, KV_AUTH_ROLE, r->role, &m)) {
        Authpb__Role *role = (Authpb__Role *)m;
        Etcdserverpb__ResponseHeader h = ETCDSERVERPB__RESPONSE_HEADER__INIT;
        kv_fill_header(call, &h, KV_HDR_REVISION_NOW);
        Etcdserverpb__AuthRoleGetResponse resp = ETCDSERVERPB__AUTH_ROLE_GET_RESPONSE__INIT;
        resp.header = &h;
        resp.perm = role->keypermission;
        resp.n_perm = role->n_keypermission;
        kv_reply_message(call, &resp.base);
        authpb__role__free_unpacked(role, NULL);
    }
    etcdserverpb__auth_role_get_request__free_unpacked(r, NULL);
}

void kv_auth_on_list(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    kv_auth_after_barrier(call, msg, len, do_list);
}

void kv_auth_on_user_get(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    kv_auth_after_barrier(call, msg, len, do_user_get);
}

void kv_auth_on_role_get(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    kv_auth_after_barrier(call, msg, len, do_role_get);
}
