/* members_boot: the initial membership from the flags (see members_boot.h). */
#include "members_boot.h"

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
        const char *name = cfg->initial_cluster[i].name;
        int seen = 0;
        for (size_t j = 0; j < i; j++)
            seen |= strcmp(cfg->initial_cluster[j].name, name) == 0;
        if (seen)
            continue;
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
        if (!(m->name = strdup(name)) ||
            !(m->peer_urls = calloc(cfg->n_initial_cluster, sizeof(char *)))) {
            rc = -ENOMEM;
            break;
        }
        for (size_t j = i; j < cfg->n_initial_cluster; j++) {
            if (strcmp(cfg->initial_cluster[j].name, name) != 0)
                continue;
            if (!(m->peer_urls[m->n_peer_urls] = strdup(cfg->initial_cluster[j].url.text))) {
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
