/* conc_util: bound, authorization and key names of the election and lock services
 * (see conc_util.h). */
#include "api/conc_util.h"

#include "api/auth_srv.h"
#include "api/services.h"
#include "mvcc/auth_store.h"
#include "lease/lessor.h"
#include "api/api.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int kv_conc_admit(kv_grpc_call *call)
{
    kv_api *s = kv_grpc_call_app(call);
    if (s->conc_waiters >= s->cfg->max_concurrency_waiters) {
        kv_metric_inc(s->m_conc_refused);
        kv_reply_etcd_err(call, KV_ERR_TOO_MANY_REQUESTS);
        return 1;
    }
    s->conc_waiters++;
    kv_metric_set(s->m_conc_waiters, (double)s->conc_waiters);
    return 0;
}

void kv_conc_release(kv_api *s)
{
    if (s->conc_waiters > 0)
        s->conc_waiters--;
    kv_metric_set(s->m_conc_waiters, (double)s->conc_waiters);
}

int kv_conc_admit_lease(kv_grpc_call *call, int64_t id)
{
    kv_api *s = kv_grpc_call_app(call);
    switch (kv_lessor_check_grant(s->lessor, id)) {
    case 0:
    case -EEXIST: /* decided at apply, from the log (apply_lease.c) */
        return 0;
    case -ENOSPC:
        kv_reply_etcd_err(call, KV_ERR_TOO_MANY_LEASES);
        return 1;
    default:
        kv_reply_etcd_err(call, KV_ERR_INVALID_LEASE_ID);
        return 1;
    }
}

int kv_conc_authorize(kv_grpc_call *call, const kv_conc_perm *perms, size_t n, kv_conc_ident *id)
{
    memset(id, 0, sizeof(*id));
    kv_auth_caller c;
    if (kv_auth_caller_begin(call, &c))
        return 1;
    int err = 0;
    if (c.enabled) {
        for (size_t i = 0; i < n && !err; i++)
            if (!kv_auth_caller_may(&c, perms[i].want, perms[i].key, perms[i].klen, perms[i].end,
                                    perms[i].end ? perms[i].elen : 0))
                err = kv_auth_caller_deny_err(&c);
        /* proposals carry the caller and the auth revision it was checked at (auth_gate.c) */
        snprintf(id->user, sizeof(id->user), "%s", c.user);
        id->auth_revision = c.revision;
    }
    kv_auth_caller_end(&c);
    if (err) {
        kv_reply_step_err(call, (kv_etcd_err)err, NULL); /* etcd: a step's error */
        return 1;
    }
    return 0;
}

void kv_conc_ident_refresh(struct kv_api *s, kv_conc_ident *id)
{
    kv_auth_tx tx;
    if (kv_store_auth_read_begin(s->store, &tx) != 0)
        return; /* the proposal goes as it is */
    int en = 0;
    uint64_t rev = 0;
    if (kv_auth_get_enabled(&tx, &en) == 0 && en && kv_auth_get_revision(&tx, &rev) == 0 &&
        rev > id->auth_revision)
        id->auth_revision = rev;
    kv_store_auth_read_end(&tx);
}

int kv_conc_prefix(const uint8_t *name, size_t nlen, uint8_t **pfx, uint8_t **end)
{
    *pfx = malloc(nlen + 1);
    *end = malloc(nlen + 1);
    if (*pfx == NULL || *end == NULL) {
        free(*pfx);
        free(*end);
        *pfx = *end = NULL;
        return -ENOMEM;
    }
    if (nlen) {
        memcpy(*pfx, name, nlen);
        memcpy(*end, name, nlen);
    }
    (*pfx)[nlen] = '/';
    (*end)[nlen] = '/' + 1; /* clientv3.GetPrefixRangeEnd of "<name>/" */
    return 0;
}

int kv_conc_key(const uint8_t *name, size_t nlen, int64_t lease, uint8_t **key, size_t *klen)
{
    char hex[24];
    int hl = snprintf(hex, sizeof(hex), "%" PRIx64, (uint64_t)lease);
    *key = malloc(nlen + 1 + (size_t)hl);
    if (*key == NULL)
        return -ENOMEM;
    if (nlen)
        memcpy(*key, name, nlen);
    (*key)[nlen] = '/';
    memcpy(*key + nlen + 1, hex, (size_t)hl);
    *klen = nlen + 1 + (size_t)hl;
    return 0;
}
