#include "api/require_leader.h"

#include "common/etcd_errors.h"
#include "common/etcd_status.h"
#include "metrics/metrics.h"
#include "node/node.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define NO_LEADER_CHECKS 3 /* etcd's maxNoLeaderCnt */

struct kv_require_leader {
    uv_timer_t timer;
    kv_api *api;
    kv_grpc_server *const *servers; /* borrowed */
    const size_t *n_servers;        /* borrowed: read at each check */
    uint32_t misses;                /* consecutive checks without a leader */
    kv_metric *m_ended;
};

static int wants_leader(kv_grpc_call *call)
{
    const char *v = kv_grpc_call_header(call, "hasleader");
    return v && strcmp(v, "true") == 0;
}

int kv_api_is_learner(const kv_api *a)
{
    if (a->node == NULL)
        return 0;
    kv_node_raft_status st;
    kv_node_get_raft_status(a->node, &st);
    return st.is_learner;
}

/* etcd 3.4 on a learner (its unary and stream interceptors): Status, a serializable Range
 * (checked by the Range itself once decoded, service_kv.c) and Snapshot; any other call is
 * refused UNAVAILABLE "etcdserver: rpc not supported for learner", so that clients move on. */
static int learner_refuses(kv_grpc_call *call)
{
    static const char *const allowed[] = {"/etcdserverpb.Maintenance/Status",
                                          "/etcdserverpb.Maintenance/Snapshot",
                                          "/etcdserverpb.KV/Range"};
    if (!kv_api_is_learner(kv_grpc_call_app(call)))
        return 0;
    const char *m = kv_grpc_call_method(call);
    for (size_t i = 0; i < sizeof allowed / sizeof allowed[0]; i++)
        if (strcmp(m, allowed[i]) == 0)
            return 0;
    kv_grpc_call_finish(call, kv_etcd_err_code(KV_ERR_NOT_SUPPORTED_FOR_LEARNER),
                        kv_etcd_err_msg(KV_ERR_NOT_SUPPORTED_FOR_LEARNER));
    return 1;
}

int kv_require_leader_admit(kv_grpc_call *call)
{
    if (learner_refuses(call))
        return 1;
    if (!wants_leader(call))
        return 0;
    kv_api *a = kv_grpc_call_app(call);
    if (kv_node_leader(a->node) != 0)
        return 0;
    kv_grpc_call_finish(call, kv_etcd_err_code(KV_ERR_NO_LEADER),
                        kv_etcd_err_msg(KV_ERR_NO_LEADER));
    return 1;
}

static void on_check(uv_timer_t *t)
{
    kv_require_leader *r = t->data;
    if (kv_node_leader(r->api->node) != 0) {
        r->misses = 0;
        return;
    }
    if (++r->misses < NO_LEADER_CHECKS)
        return;
    size_t ended = 0;
    for (size_t i = 0; i < *r->n_servers; i++)
        ended += kv_grpc_server_end_streams(r->servers[i], "hasleader", "true",
                                            kv_etcd_err_code(KV_ERR_NO_LEADER),
                                            kv_etcd_err_msg(KV_ERR_NO_LEADER));
    if (ended && r->m_ended)
        kv_metric_add(r->m_ended, (int64_t)ended);
}

int kv_require_leader_start(kv_require_leader **out, kv_api *a, kv_grpc_server *const *servers,
                            const size_t *n, uint32_t interval_ms)
{
    *out = NULL;
    kv_require_leader *r = calloc(1, sizeof *r);
    if (!r)
        return -ENOMEM;
    r->api = a;
    r->servers = servers;
    r->n_servers = n;
    if (a->metrics)
        r->m_ended = kv_metrics_counter(
            a->metrics, "kvd_require_leader_streams_ended_total",
            "Streams with hasleader=true metadata ended because the member had no leader.", NULL);
    int rc = uv_timer_init(a->loop, &r->timer);
    if (rc < 0) {
        free(r);
        return rc;
    }
    r->timer.data = r;
    uv_timer_start(&r->timer, on_check, interval_ms ? interval_ms : 1000,
                   interval_ms ? interval_ms : 1000);
    *out = r;
    return 0;
}

static void free_cb(uv_handle_t *h)
{
    free(h->data);
}

void kv_require_leader_stop(kv_require_leader *r)
{
    if (!r)
        return;
    uv_timer_stop(&r->timer);
    uv_close((uv_handle_t *)&r->timer, free_cb);
}
