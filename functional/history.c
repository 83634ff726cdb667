/* history: text files of recorded histories, for replaying the checkers (fn.h). */
#include "fn.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int kv_fn_history_write(const char *path, const kv_fn_op *ops, size_t n_ops,
                        const kv_fn_lease_info *leases, size_t n_leases, const kv_fn_lease_ev *lev,
                        size_t n_lev, const kv_fn_window *w, size_t n_w)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -errno;
    fprintf(f,
            "# kvfunctional history v1: op key type(0 put,1 get) client call_us ret_us "
            "value(- absent; ret -1 unknown) rev mod_rev | lease idx ttl_us abandoned | lev lease "
            "type(0 renew,1 read) present call_us ret_us | win start_us heal_us\n");
    for (size_t i = 0; i < n_ops; i++)
        fprintf(f, "op %d %d %d %" PRId64 " %" PRId64 " %s %" PRId64 " %" PRId64 "\n", ops[i].key,
                ops[i].type, ops[i].client, ops[i].call_us,
                ops[i].ret_us == KV_FN_INF ? -1 : ops[i].ret_us,
                ops[i].value[0] ? ops[i].value : "-", ops[i].rev, ops[i].mod_rev);
    for (size_t i = 0; i < n_leases; i++)
        fprintf(f, "lease %zu %" PRId64 " %d\n", i, leases[i].ttl_us, leases[i].abandoned);
    for (size_t i = 0; i < n_lev; i++)
        fprintf(f, "lev %d %d %d %" PRId64 " %" PRId64 "\n", lev[i].lease, lev[i].type,
                lev[i].present, lev[i].call_us, lev[i].ret_us);
    for (size_t i = 0; i < n_w; i++)
        fprintf(f, "win %" PRId64 " %" PRId64 "\n", w[i].start_us, w[i].heal_us);
    return fclose(f) == 0 ? 0 : -EIO;
}

static int grow(void **a, size_t *cap, size_t n, size_t sz)
{
    if (n < *cap)
        return 0;
    size_t nc = *cap ? *cap * 2 : 256;
    void *na = realloc(*a, nc * sz);
    if (!na)
        return -ENOMEM;
    *a = na;
    *cap = nc;
    return 0;
}

int kv_fn_history_read(const char *path, kv_fn_op **ops, size_t *n_ops, kv_fn_lease_info **leases,
                       size_t *n_leases, kv_fn_lease_ev **lev, size_t *n_lev, kv_fn_window **w,
                       size_t *n_w)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -errno;
    size_t c1 = 0, c2 = 0, c3 = 0, c4 = 0;
    *ops = NULL;
    *leases = NULL;
    *lev = NULL;
    *w = NULL;
    *n_ops = *n_leases = *n_lev = *n_w = 0;
    char line[512];
    int r = 0;
    while (r == 0 && fgets(line, sizeof(line), f)) {
        if (strncmp(line, "op ", 3) == 0) {
            if ((r = grow((void **)ops, &c1, *n_ops, sizeof(**ops))))
                break;
            kv_fn_op *o = &(*ops)[*n_ops];
            memset(o, 0, sizeof(*o));
            char v[48];
            int got = sscanf(line, "op %d %d %d %" SCNd64 " %" SCNd64 " %47s %" SCNd64 " %" SCNd64,
                             &o->key, &o->type, &o->client, &o->call_us, &o->ret_us, v, &o->rev,
                             &o->mod_rev);
            if (got != 6 && got != 8) {
                r = -EINVAL;
                break;
            }
            if (o->ret_us < 0)
                o->ret_us = KV_FN_INF;
            snprintf(o->value, sizeof(o->value), "%s", strcmp(v, "-") == 0 ? "" : v);
            (*n_ops)++;
        } else if (strncmp(line, "lease ", 6) == 0) {
            if ((r = grow((void **)leases, &c2, *n_leases, sizeof(**leases))))
                break;
            kv_fn_lease_info *l = &(*leases)[*n_leases];
            size_t idx;
            if (sscanf(line, "lease %zu %" SCNd64 " %d", &idx, &l->ttl_us, &l->abandoned) != 3) {
                r = -EINVAL;
                break;
            }
            (*n_leases)++;
        } else if (strncmp(line, "lev ", 4) == 0) {
            if ((r = grow((void **)lev, &c3, *n_lev, sizeof(**lev))))
                break;
            kv_fn_lease_ev *e = &(*lev)[*n_lev];
            if (sscanf(line, "lev %d %d %d %" SCNd64 " %" SCNd64, &e->lease, &e->type, &e->present,
                       &e->call_us, &e->ret_us) != 5) {
                r = -EINVAL;
                break;
            }
            (*n_lev)++;
        } else if (strncmp(line, "win ", 4) == 0) {
            if ((r = grow((void **)w, &c4, *n_w, sizeof(**w))))
                break;
            kv_fn_window *x = &(*w)[*n_w];
            if (sscanf(line, "win %" SCNd64 " %" SCNd64, &x->start_us, &x->heal_us) != 2) {
                r = -EINVAL;
                break;
            }
            (*n_w)++;
        }
    }
    fclose(f);
    if (r) {
        free(*ops);
        free(*leases);
        free(*lev);
        free(*w);
        *ops = NULL;
        *leases = NULL;
        *lev = NULL;
        *w = NULL;
    }
    return r;
}
