#include "daemon/identity.h"

#include "common/byteorder.h"
#include "daemon/initial_cluster.h"
#include "mvcc/members.h"

#include <errno.h>
#include <openssl/sha.h>
#include <stdlib.h>
#include <string.h>

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int kv_identity_compute(const kv_config *cfg, kv_identity *out)
{
    memset(out, 0, sizeof(*out));
    /* Group initial-cluster entries by name (a member may list several peer URLs). */
    for (size_t i = 0; i < cfg->n_initial_cluster; i++) {
        if (!kv_initial_cluster_first(cfg, i))
            continue;
        const char *name = cfg->initial_cluster[i].name;
        const char *urls[KV_MAX_URLS];
        size_t n = kv_initial_cluster_urls(cfg, name, urls, KV_MAX_URLS);
        uint64_t id = kv_members_compute_id(urls, n, cfg->initial_cluster_token);
        if (strcmp(name, cfg->name) == 0)
            out->member_id = id;
        out->member_ids[out->n_members++] = id;
    }
    if (out->member_id == 0)
        return -ENOENT;
    uint64_t sorted[KV_MAX_MEMBERS];
    memcpy(sorted, out->member_ids, out->n_members * sizeof(uint64_t));
    qsort(sorted, out->n_members, sizeof(uint64_t), cmp_u64);
    unsigned char buf[8 * KV_MAX_MEMBERS];
    for (size_t i = 0; i < out->n_members; i++)
        kv_put_be64(buf + 8 * i, sorted[i]);
    unsigned char md[SHA_DIGEST_LENGTH];
    SHA1(buf, 8 * out->n_members, md);
    out->cluster_id = kv_be64(md);
    return 0;
}
