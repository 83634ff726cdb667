/* etcd_metrics.c - member-level etcd series; see etcd_metrics.h. */
#include "daemon/etcd_metrics.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

/* One store status read serves every series of one scrape (it walks LMDB's free list). */
#define STATUS_CACHE_MS 500

struct kv_etcd_metrics;

/* The argument of one op_count series. */
struct op_series {
    struct kv_etcd_metrics *e;
    size_t field; /* offsetof(kv_store_ops, ...) */
};

static const struct {
    const char *name, *help;
    size_t field;
} OPS[] = {
    {"etcd_mvcc_range_total", "Total number of ranges seen by this member.",
     offsetof(kv_store_ops, ranges)},
    {"etcd_mvcc_put_total", "Total number of puts seen by this member.",
     offsetof(kv_store_ops, puts)},
    {"etcd_mvcc_delete_total", "Total number of deletes seen by this member.",
     offsetof(kv_store_ops, deletes)},
    {"etcd_mvcc_txn_total", "Total number of txns seen by this member.",
     offsetof(kv_store_ops, txns)},
};
#define N_OPS (sizeof(OPS) / sizeof(OPS[0]))

struct kv_etcd_metrics {
    kv_server *s;
    uint64_t at_ms;
    int ok;
    kv_store_status ss;
    struct op_series ops[N_OPS];
};

static const kv_store_status *status(struct kv_etcd_metrics *e)
{
    uint64_t now = uv_now(e->s->api.loop);
    if (!e->ok || now - e->at_ms >= STATUS_CACHE_MS || now < e->at_ms) {
        e->ok = kv_store_get_status(e->s->api.store, &e->ss) == 0;
        e->at_ms = now;
    }
    return e->ok ? &e->ss : NULL;
}

static double one(void *arg)
{
    (void)arg;
    return 1;
}

static double db_size(void *arg)
{
    const kv_store_status *ss = status(arg);
    return ss ? (double)ss->db_size : 0;
}

static double db_in_use(void *arg)
{
    const kv_store_status *ss = status(arg);
    return ss ? (double)ss->db_size_in_use : 0;
}

static double keys(void *arg)
{
    const kv_store_status *ss = status(arg);
    return ss ? (double)ss->keys : 0;
}

/* One etcd_mvcc_*_total counter: a field of the store's kv_store_ops. */
static double op_count(void *arg)
{
    const struct op_series *o = arg;
    kv_store_ops ops;
    kv_store_get_ops(o->e->s->api.store, &ops);
    return (double)*(const uint64_t *)((const char *)&ops + o->field);
}

static double quota(void *arg)
{
    struct kv_etcd_metrics *e = arg;
    return (double)kv_store_quota(e->s->api.store);
}

int kv_etcd_metrics_start(kv_server *s)
{
    if (!s->api.metrics || s->etcd_metrics)
        return 0;
    struct kv_etcd_metrics *e = calloc(1, sizeof(*e));
    if (!e)
        return -ENOMEM;
    e->s = s;
    s->etcd_metrics = e;
    kv_metrics *m = s->api.metrics;
    char l[96];
    snprintf(l, sizeof(l), "server_id=\"%llx\"", (unsigned long long)s->id.member_id);
    kv_metrics_gauge_fn_labeled(
        m, "etcd_server_id",
        "Server or member ID in hexadecimal format. 1 for 'server_id' label with current ID.", l,
        one, e);
    kv_metrics_gauge_fn_labeled(
        m, "etcd_server_version",
        "Which version is running. 1 for 'server_version' label with current version.",
        "server_version=\"" KV_ETCD_SERVER_VERSION "\"", one, e);
    kv_metrics_gauge_fn_labeled(m, "etcd_cluster_version",
                                "Which version is running. 1 for 'cluster_version' label with "
                                "current cluster version",
                                "cluster_version=\"" KV_ETCD_CLUSTER_VERSION "\"", one, e);
    kv_metrics_gauge_fn(m, "etcd_server_quota_backend_bytes",
                        "Current backend storage quota size in bytes.", quota, e);
    kv_metrics_gauge_fn(m, "etcd_mvcc_db_total_size_in_bytes",
                        "Total size of the underlying database physically allocated in bytes.",
                        db_size, e);
    kv_metrics_gauge_fn(m, "etcd_mvcc_db_total_size_in_use_in_bytes",
                        "Total size of the underlying database logically in use in bytes.",
                        db_in_use, e);
    kv_metrics_gauge_fn(m, "etcd_debugging_mvcc_keys_total", "Total number of keys.", keys, e);
    for (size_t i = 0; i < N_OPS; i++) {
        e->ops[i] = (struct op_series){e, OPS[i].field};
        kv_metrics_counter_fn(m, OPS[i].name, OPS[i].help, op_count, &e->ops[i]);
    }
    return 0;
}

void kv_etcd_metrics_stop(kv_server *s)
{
    if (!s->etcd_metrics)
        return;
    kv_metrics_gauge_fn_remove(s->api.metrics, s->etcd_metrics);
    for (size_t i = 0; i < N_OPS; i++)
        kv_metrics_gauge_fn_remove(s->api.metrics, &s->etcd_metrics->ops[i]);
    free(s->etcd_metrics);
    s->etcd_metrics = NULL;
}
