/* pcacks: shared by the power-loss tests (pcacks.h). */
#include "pcacks.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

uint64_t kv_pc_rng(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

uint64_t kv_pc_seed(void)
{
    const char *v = getenv("KVD_POWERCUT_SEED");
    if (v && *v)
        return strtoull(v, NULL, 0);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 32);
}

int kv_pc_env_int(const char *name, int dflt)
{
    const char *v = getenv(name);
    return v && *v ? atoi(v) : dflt;
}

static int kv_cmp(const void *a, const void *b)
{
    const Mvccpb__KeyValue *x = *(Mvccpb__KeyValue *const *)a, *y = *(Mvccpb__KeyValue *const *)b;
    size_t n = x->key.len < y->key.len ? x->key.len : y->key.len;
    int c = memcmp(x->key.data, y->key.data, n);
    return c ? c : (x->key.len > y->key.len) - (x->key.len < y->key.len);
}

void kv_pc_sort(Etcdserverpb__RangeResponse *r)
{
    if (r->n_kvs > 1)
        qsort(r->kvs, r->n_kvs, sizeof *r->kvs, kv_cmp);
}

static Mvccpb__KeyValue *find(Etcdserverpb__RangeResponse *r, const char *key)
{
    Mvccpb__KeyValue probe = MVCCPB__KEY_VALUE__INIT, *pp = &probe;
    probe.key.data = (uint8_t *)key;
    probe.key.len = strlen(key);
    if (!r->n_kvs)
        return NULL;
    Mvccpb__KeyValue **hit = bsearch(&pp, r->kvs, r->n_kvs, sizeof *r->kvs, kv_cmp);
    return hit ? *hit : NULL;
}

void kv_pc_check(Etcdserverpb__RangeResponse *r, kv_pc_ack *const *acks, const size_t *counts,
                 size_t n_lists, size_t *lost, size_t *changed,
                 void (*problem)(void *arg, const char *text), void *arg)
{
    char msg[512];
    *lost = *changed = 0;
    for (size_t i = 0; i < n_lists; i++) {
        for (size_t j = 0; j < counts[i]; j++) {
            const kv_pc_ack *a = &acks[i][j];
            Mvccpb__KeyValue *kv = find(r, a->key);
            if (!kv) {
                if (!(*lost)++) {
                    snprintf(msg, sizeof msg, "acknowledged put lost: %s (rev %" PRId64 ")", a->key,
                             a->rev);
                    problem(arg, msg);
                }
            } else if (kv->value.len != a->vlen || memcmp(kv->value.data, a->val, a->vlen) != 0 ||
                       kv->mod_revision != a->rev || kv->create_revision != a->rev ||
                       kv->version != 1) {
                if (!(*changed)++) {
                    snprintf(msg, sizeof msg,
                             "acknowledged put changed: %s rev %" PRId64 " len %u, now mod "
                             "%" PRId64 " create %" PRId64 " version %" PRId64 " len %zu",
                             a->key, a->rev, a->vlen, kv->mod_revision, kv->create_revision,
                             kv->version, kv->value.len);
                    problem(arg, msg);
                }
            }
        }
    }
}
