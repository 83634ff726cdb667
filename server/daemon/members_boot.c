/* members_boot: the initial membership from the flags (see members_boot.h). */
#include "daemon/members_boot.h"

#include "daemon/initial_cluster.h"

#include "mvcc/members.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int kv_members_from_config(const kv_config *cfg, const kv_identity *id, Kvdpb__Member ***out,
                           size_t *n)
{
    *out = NULL;
    *n = 0;
    Kvdpb__Member **v = calloc(KV_MAX_MEMBERS, sizeof(*v));
    if (!v)
        return -ENOMEM;
    size_t cnt = 0;
    int rc = 0;
    for (size_t i = 0; i < cfg->n_initial_cluster && rc == 0; i++) {
        if (!kv_initial_cluster_first(cfg, i))
            continue;
        const char *name = cfg->initial_cluster[i].name;
        if (cnt >= id->n_members) {
            rc = -EINVAL;
            break;
        }
        Kvdpb__Member *m = calloc(1, sizeof(*m));
        if (!m) {
            rc = -ENOMEM;
            break;
        }
        kvdpb__member__init(m);
        v[cnt++] = m;
        m->id = id->member_ids[cnt - 1];
        /* every URL of the name (at most KV_MAX_MEMBERS entries exist) */
        const char *urls[KV_MAX_MEMBERS];
        size_t nu = kv_initial_cluster_urls(cfg, name, urls, KV_MAX_MEMBERS);
        if (!(m->name = strdup(name)) || !(m->peer_urls = calloc(nu, sizeof(char *)))) {
            rc = -ENOMEM;
            break;
        }
        for (size_t j = 0; j < nu; j++) {
            if (!(m->peer_urls[m->n_peer_urls] = strdup(urls[j]))) {
                rc = -ENOMEM;
                break;
            }
            m->n_peer_urls++;
        }
    }
    if (rc) {
        kv_store_members_free(v, cnt);
        return rc;
    }
    *out = v;
    *n = cnt;
    return 0;
}

int kv_members_bootstrap_config(kv_store *st, const kv_config *cfg, const kv_identity *id)
{
    Kvdpb__Member **v;
    size_t n;
    int rc = kv_members_from_config(cfg, id, &v, &n);
    if (rc)
        return rc;
    kv_store_batch *b;
    if ((rc = kv_store_batch_begin(st, &b)) == 0) {
        rc = kv_store_members_bootstrap(st, b, (const Kvdpb__Member *const *)v, n);
        if (rc < 0)
            kv_store_batch_abort(st, b);
        else if (rc == 1) {
            int c = kv_store_batch_commit(st, b);
            if (c < 0)
                rc = c;
        } else
            kv_store_batch_abort(st, b);
    }
    kv_store_members_free(v, n);
    return rc;
}

int kv_members_publish_request(const kv_config *cfg, const kv_identity *id, uint8_t **out,
                               size_t *len)
{
    char *urls[KV_MAX_URLS];
    size_t n = cfg->n_advertise_client < KV_MAX_URLS ? cfg->n_advertise_client : KV_MAX_URLS;
    for (size_t i = 0; i < n; i++)
        urls[i] = (char *)cfg->advertise_client[i].text;
    Kvdpb__Member m = KVDPB__MEMBER__INIT;
    m.id = id->member_id;
    m.name = (char *)cfg->name;
    m.client_urls = urls;
    m.n_client_urls = n;
    Kvdpb__InternalRequest ir = KVDPB__INTERNAL_REQUEST__INIT;
    ir.request_case = KVDPB__INTERNAL_REQUEST__REQUEST_MEMBER_PUBLISH;
    ir.member_publish = &m;
    size_t sz = kvdpb__internal_request__get_packed_size(&ir);
    if (!(*out = malloc(sz)))
        return -ENOMEM;
    *len = kvdpb__internal_request__pack(&ir, *out);
    return 0;
}
