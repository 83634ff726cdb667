/* auth_srv: auth runtime state and caller resolution (see auth_srv.h). */
#include "api/auth_srv.h"

#include "api/services.h"
#include "auth.pb-c.h"
#include "auth/auth_fairq.h"
#include "internal.pb-c.h"
#include "mvcc/auth_store.h"
#include "node/read_pool.h"
#include "api/api.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ROOT "root"

static void on_sweep(uv_timer_t *t)
{
    kv_auth *a = t->data;
    kv_auth_tokens_sweep(a->tokens, uv_now(a->srv->loop));
}

static double m_pending(void *arg)
{
    kv_auth *a = arg;
    return (double)(kv_auth_fairq_len(a->fairq) + a->running);
}

static double m_evicted(void *arg)
{
    return (double)((kv_auth *)arg)->hashes_evicted;
}

static double m_failing(void *arg)
{
    return (double)kv_auth_fairq_sources(((kv_auth *)arg)->fairq);
}

static double m_refused(void *arg)
{
    return (double)((kv_auth *)arg)->hashes_refused;
}

static double m_tokens(void *arg)
{
    return (double)kv_auth_tokens_count(((kv_auth *)arg)->tokens);
}

static double m_tokens_refused(void *arg)
{
    return (double)((kv_auth *)arg)->tokens_refused;
}

static void on_timer_closed(uv_handle_t *h)
{
    free(h);
}

int kv_auth_start(struct kv_api *srv, kv_auth **out)
{
    const kv_api_config *cfg = srv->cfg;
    kv_auth *a = calloc(1, sizeof *a);
    if (!a)
        return -ENOMEM;
    kv_list_init(&a->jobs);
    kv_list_init(&a->reads);
    a->srv = srv;
    a->iterations = cfg->auth_hash_iterations ? cfg->auth_hash_iterations : 100000;
    uint64_t ttl = (uint64_t)(cfg->auth_token_ttl ? cfg->auth_token_ttl : 300) * 1000;
    int rc = kv_auth_tokens_init(&a->tokens, cfg->auth_max_tokens, ttl);
    if (rc)
        goto fail;
    if (strncmp(cfg->auth_token, "jwt", 3) == 0) {
        char err[512];
        if ((rc = kv_jwt_new(cfg->auth_token, &a->jwt, err, sizeof err)) != 0) {
            fprintf(stderr, "kvd: error: %s\n", err); /* config validation says it first */
            goto fail;
        }
    }
    uint32_t maxq = cfg->auth_max_pending_hashes ? cfg->auth_max_pending_hashes : 64;
    /* the worker gets one job at a time (service_auth.c pump); the bound is the fair queue's */
    rc = kv_read_pool_init(&a->hash_pool, srv->loop, 1, 2, NULL);
    if (rc)
        goto fail;
    rc = kv_auth_fairq_new(&a->fairq, maxq, KV_AUTH_FAIRQ_DEFAULT_SOURCES);
    if (rc)
        goto fail;
    if (!(a->sweep = calloc(1, sizeof *a->sweep))) {
        rc = -ENOMEM;
        goto fail;
    }
    uv_timer_init(srv->loop, a->sweep);
    a->sweep->data = a;
    uv_timer_start(a->sweep, on_sweep, 1000, 1000);
    uv_unref((uv_handle_t *)a->sweep);
    if (srv->metrics) {
        kv_metrics_gauge_fn(srv->metrics, "kvd_auth_hash_pending",
                            "Password hashes queued or running (--auth-max-pending-hashes)",
                            m_pending, a);
        kv_metrics_counter_fn(srv->metrics, "kvd_auth_hash_refused_total",
                              "Password hashes refused or evicted: queue full (too many requests)",
                              m_refused, a);
        kv_metrics_counter_fn(srv->metrics, "kvd_auth_hash_evicted_total",
                              "Queued password hashes that lost their place to a better-ranked "
                              "one (a connection with fewer failed checks)",
                              m_evicted, a);
        kv_metrics_gauge_fn(srv->metrics, "kvd_auth_failing_connections",
                            "Connections whose login attempts never succeeded (ranked last) "
                            "(built-in bound 4096)",
                            m_failing, a);
        kv_metrics_gauge_fn(srv->metrics, "kvd_auth_tokens",
                            "Live simple tokens on this member (--auth-max-tokens)", m_tokens, a);
        kv_metrics_counter_fn(srv->metrics, "kvd_auth_tokens_refused_total",
                              "Authenticate refused: token table full (too many requests)",
                              m_tokens_refused, a);
        a->metrics = srv->metrics;
    }
    *out = a;
    return 0;
fail:
    kv_auth_stop(a);
    return rc;
}

void kv_auth_stop(kv_auth *a)
{
    if (!a)
        return;
    if (a->metrics)
        kv_metrics_gauge_fn_remove(a->metrics, a);
    a->closing = 1;
    kv_read_pool_close(a->hash_pool); /* completes the running job (done runs) */
    kv_auth_jobs_drain(a);
    kv_auth_fairq_free(a->fairq);
    kv_auth_reads_detach(a);
    if (a->sweep) {
        uv_timer_stop(a->sweep);
        uv_close((uv_handle_t *)a->sweep, on_timer_closed);
    }
    kv_auth_tokens_free(a->tokens);
    kv_jwt_free(a->jwt);
    free(a);
}

/* ---- replicated tokens ---- */

void kv_auth_on_applied(void *arg, int kind, uint64_t index, const uint8_t *entry, size_t len)
{
    kv_api *s = arg;
    kv_auth *a = s->auth;
    if (!a)
        return; /* core not running: tokens are memory only anyway */
    if (kind == KV_RESULT_AUTH_CLEAR) {
        kv_auth_tokens_clear(a->tokens);
        return;
    }
    if (kind != KV_RESULT_AUTH_ASSIGN)
        return;
    Kvdpb__InternalRequest *ir = kvdpb__internal_request__unpack(NULL, len, entry);
    if (!ir || ir->request_case != KVDPB__INTERNAL_REQUEST__REQUEST_AUTH_AUTHENTICATE) {
        kvdpb__internal_request__free_unpacked(ir, NULL);
        return;
    }
    const Kvdpb__AuthAuthenticate *r = ir->auth_authenticate;
    char token[KV_AUTH_TOKEN_MAX];
    int n = snprintf(token, sizeof token, "%s.%" PRIu64, r->simple_token, index);
    int rc = n > 0 && (size_t)n < sizeof token
                 ? kv_auth_tokens_put(a->tokens, token, r->name, r->pwtag, uv_now(s->loop))
                 : -EINVAL;
    if (rc) /* full: the token is not valid on this member (its proposer answers an error) */
        a->tokens_refused++;
    kvdpb__internal_request__free_unpacked(ir, NULL);
}

/* ---- caller resolution ---- */

static int load_user(kv_auth_tx *tx, const char *name, Authpb__User **u)
{
    uint8_t *v;
    size_t n;
    *u = NULL;
    if (!name[0])
        return -ENOENT;
    int rc = kv_auth_get(tx, KV_AUTH_USER, name, strlen(name), &v, &n);
    if (rc)
        return rc == -EINVAL ? -ENOENT : rc;
    *u = authpb__user__unpack(NULL, n, v);
    free(v);
    return *u ? 0 : -EBADMSG;
}

static int load_perms(kv_auth_tx *tx, const Authpb__User *u, kv_auth_caller *c)
{
    size_t total = 0;
    if (u->n_roles && (!(c->roles = calloc(u->n_roles, sizeof *c->roles)) ||
                       !(c->user_roles = calloc(u->n_roles, sizeof *c->user_roles))))
        return -ENOMEM;
    for (size_t i = 0; i < u->n_roles; i++) {
        if (!(c->user_roles[c->n_user_roles] = strdup(u->roles[i])))
            return -ENOMEM;
        c->n_user_roles++;
        if (strcmp(u->roles[i], ROOT) == 0)
            c->root = true;
        uint8_t *v;
        size_t n;
        int rc = u->roles[i][0]
                     ? kv_auth_get(tx, KV_AUTH_ROLE, u->roles[i], strlen(u->roles[i]), &v, &n)
                     : -ENOENT;
        if (rc == -ENOENT || rc == -EINVAL)
            continue; /* a deleted role grants nothing */
        if (rc)
            return rc;
        Authpb__Role *r = authpb__role__unpack(NULL, n, v);
        free(v);
        if (!r)
            return -EBADMSG;
        c->roles[c->n_roles++] = r;
        total += r->n_keypermission;
    }
    if (total && !(c->perms = calloc(total, sizeof *c->perms)))
        return -ENOMEM;
    for (size_t i = 0; i < c->n_roles; i++) {
        Authpb__Role *r = c->roles[i];
        for (size_t j = 0; j < r->n_keypermission; j++) {
            Authpb__Permission *p = r->keypermission[j];
            c->perms[c->n_perms++] = (kv_auth_perm){(int)p->permtype, p->key.data, p->key.len,
                                                    p->range_end.data, p->range_end.len};
        }
    }
    return 0;
}

int kv_auth_caller_open(kv_grpc_call *call, kv_auth_caller *c)
{
    kv_api *s = kv_grpc_call_app(call);
    kv_auth *a = s->auth;
    memset(c, 0, sizeof *c);
    kv_auth_tx tx;
    int rc = kv_store_auth_read_begin(s->store, &tx);
    if (rc)
        goto storage;
    int en = 0;
    if ((rc = kv_auth_get_enabled(&tx, &en)) || (rc = kv_auth_get_revision(&tx, &c->revision))) {
        kv_store_auth_read_end(&tx);
        goto storage;
    }
    if (!en) {
        kv_store_auth_read_end(&tx);
        if (a && kv_auth_tokens_count(a->tokens)) /* etcd AuthDisable: tokens invalidated */
            kv_auth_tokens_clear(a->tokens);
        return 0;
    }
    c->enabled = true;
    const char *token = kv_grpc_call_header(call, "token");
    if (!token)
        token = kv_grpc_call_header(call, "authorization");
    uint64_t tag = 0;
    bool by_token = false;
    if (token && a && a->jwt) {
        /* etcd tokenJWT.info: a bad or expired JWT is "invalid auth token" (clientv3 then
         * authenticates again); the token's revision is the one its requests carry, so a
         * write with a token older than the last auth change is "revision of auth store is
         * old" at apply (etcd isOpPermitted), which clientv3 also answers by re-login. */
        uint64_t jrev = 0;
        if (kv_jwt_verify(a->jwt, token, (uint64_t)time(NULL), c->user, sizeof c->user, &jrev)) {
            kv_store_auth_read_end(&tx);
            return KV_ERR_INVALID_AUTH_TOKEN;
        }
        if (jrev < c->revision)
            c->revision = jrev;
    } else if (token && a) {
        const char *u = kv_auth_tokens_lookup(a->tokens, token, uv_now(s->loop), &tag);
        if (!u || strlen(u) >= sizeof c->user) {
            kv_store_auth_read_end(&tx);
            return KV_ERR_INVALID_AUTH_TOKEN;
        }
        snprintf(c->user, sizeof c->user, "%s", u);
        by_token = true;
    } else if (token) {
        kv_store_auth_read_end(&tx);
        return KV_ERR_INVALID_AUTH_TOKEN;
    } else if (s->cfg->client_cert_auth) {
        const char *cn = kv_grpc_call_peer_cn(call);
        if (cn && cn[0] && strlen(cn) < sizeof c->user)
            snprintf(c->user, sizeof c->user, "%s", cn);
    }
    if (!c->user[0]) {
        kv_store_auth_read_end(&tx);
        c->anonymous = true;
        return 0;
    }
    Authpb__User *u = NULL;
    rc = load_user(&tx, c->user, &u);
    if (rc == 0 && by_token && kv_auth_pwtag(u->password.data, u->password.len) != tag)
        rc = -ENOENT; /* password changed since the token was issued */
    if (rc == -ENOENT && by_token) {
        kv_auth_tokens_drop(a->tokens, token);
        authpb__user__free_unpacked(u, NULL);
        kv_store_auth_read_end(&tx);
        return KV_ERR_INVALID_AUTH_TOKEN;
    }
    if (rc == 0) {
        c->found = true;
        rc = load_perms(&tx, u, c);
    } else if (rc == -ENOENT) {
        rc = 0; /* a certificate user without a record: denied by the checks */
    }
    authpb__user__free_unpacked(u, NULL);
    kv_store_auth_read_end(&tx);
    if (rc) {
        kv_auth_caller_end(c);
        goto storage;
    }
    return 0;
storage:
    return rc == -ENOMEM ? KV_ERR_NOMEM : KV_ERR_STORAGE;
}

int kv_auth_caller_begin(kv_grpc_call *call, kv_auth_caller *c)
{
    int err = kv_auth_caller_open(call, c);
    if (err)
        kv_reply_etcd_err(call, (kv_etcd_err)err);
    return err ? 1 : 0;
}

void kv_auth_caller_end(kv_auth_caller *c)
{
    for (size_t i = 0; i < c->n_roles; i++)
        authpb__role__free_unpacked(c->roles[i], NULL);
    free(c->roles);
    free(c->perms);
    for (size_t i = 0; i < c->n_user_roles; i++)
        free(c->user_roles[i]);
    free(c->user_roles);
    c->user_roles = NULL;
    c->n_user_roles = 0;
    c->roles = NULL;
    c->perms = NULL;
    c->n_roles = c->n_perms = 0;
}

bool kv_auth_caller_may(const kv_auth_caller *c, int want, const uint8_t *key, size_t klen,
                        const uint8_t *end, size_t elen)
{
    if (!c->enabled || c->root)
        return true;
    if (!c->found)
        return false;
    return kv_auth_perm_allows(c->perms, c->n_perms, want, key, klen, end, elen);
}

int kv_auth_caller_deny_err(const kv_auth_caller *c)
{
    return c->anonymous ? KV_ERR_USER_EMPTY : KV_ERR_PERMISSION_DENIED;
}

int kv_auth_caller_admin_err(const kv_auth_caller *c)
{
    if (!c->enabled || c->root)
        return 0;
    if (c->anonymous)
        return KV_ERR_USER_EMPTY;
    if (!c->found)
        return KV_ERR_USER_NOT_FOUND;
    return KV_ERR_PERMISSION_DENIED;
}

int kv_auth_require_admin_as(kv_grpc_call *call, char *user, size_t cap, uint64_t *revision)
{
    if (cap)
        user[0] = '\0';
    *revision = 0;
    kv_auth_caller c;
    if (kv_auth_caller_begin(call, &c))
        return 1;
    int e = kv_auth_caller_admin_err(&c);
    if (!e && cap) {
        snprintf(user, cap, "%s", c.enabled ? c.user : "");
        /* never 0: a nonzero auth_revision marks an entry whose caller apply_auth.c checks;
         * 0 is an older member's entry, applied as it was (etcd's revision starts at 1) */
        *revision = c.revision ? c.revision : 1;
    }
    kv_auth_caller_end(&c);
    if (e) {
        kv_reply_etcd_err(call, (kv_etcd_err)e);
        return 1;
    }
    return 0;
}

int kv_auth_require_admin(kv_grpc_call *call)
{
    char user[KV_AUTH_MAX_NAME + 1];
    uint64_t revision;
    return kv_auth_require_admin_as(call, user, sizeof user, &revision);
}
