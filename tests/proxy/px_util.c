/* px_util: see px_util.h. */
#include "px_util.h"
#include "kvt_kvc.h"

#include "grpc_raw.h"
#include "kvclient.h"
#include "rpc.pb-c.h"

#include <criterion/criterion.h>

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int px_cluster_start(kvt_cluster *c, int n)
{
    kvt_cluster_opts o;
    kvt_cluster_opts_default(&o, n);
    int r = kvt_cluster_init(c, &o);
    if (r)
        return r;
    return kvt_cluster_start(c, 60000);
}

int px_start_on_follower(px *x, kvt_cluster *c, const char *const *extra, int *follower,
                         int *leader)
{
    int r = px_cluster_start(c, 3);
    if (r)
        return r;
    if ((*leader = kvt_cluster_wait_leader(c, 10000, NULL)) < 0)
        return -EAGAIN;
    *follower = (*leader + 1) % 3;
    int order[3] = {*follower, (*leader + 2) % 3, *leader};
    return px_start(x, c, order, 3, extra);
}

int px_start(px *x, kvt_cluster *c, const int *order, int n, const char *const *extra)
{
    x->port = 0;
    return px_start_on(x, c, order, n, extra);
}

int px_start_on(px *x, kvt_cluster *c, const int *order, int n, const char *const *extra)
{
    char eps[KVT_MAX_MEMBERS * 40] = "--endpoints=";
    char listen[64], metrics[64];
    size_t len = strlen(eps);
    if (!order)
        n = c->n;
    for (int k = 0; k < n; k++) {
        int i = order ? order[k] : k;
        len +=
            (size_t)snprintf(eps + len, sizeof eps - len, "%s%s", k ? "," : "", c->m[i].endpoint);
    }
    int r = x->port ? 0 : kvt_port_free(&x->port);
    x->metrics_port = 0;
    if (!r && !x->no_metrics_addr)
        r = kvt_port_free(&x->metrics_port);
    if (r)
        return r;
    snprintf(x->endpoint, sizeof x->endpoint, "127.0.0.1:%u", x->port);
    snprintf(listen, sizeof listen, "--listen-addr=127.0.0.1:%u", x->port);
    snprintf(metrics, sizeof metrics, "--metrics-addr=http://127.0.0.1:%u", x->metrics_port);
    int ln = snprintf(x->log, sizeof x->log, "%.4000s/proxy-%u.log", c->root.path, x->port);
    if (ln < 0 || (size_t)ln >= sizeof x->log)
        return -ENAMETOOLONG;
    const char *argv[64];
    int a = 0;
    for (int k = 0; x->wrap && x->wrap[k] && a < 12; k++)
        argv[a++] = x->wrap[k];
    argv[a++] = c->bin;
    argv[a++] = "grpc-proxy";
    argv[a++] = "start";
    argv[a++] = eps;
    argv[a++] = listen;
    if (!x->no_metrics_addr)
        argv[a++] = metrics;
    for (int k = 0; extra && extra[k] && a < 62; k++)
        argv[a++] = extra[k];
    argv[a] = NULL;
    kvt_proc_init(&x->proc, x->log);
    r = kvt_proc_spawn(&x->proc, argv);
    if (r)
        return r;
    uint64_t end = kvt_now_ms() + 10000;
    while (kvt_now_ms() < end) {
        if (!kvt_proc_alive(&x->proc))
            return -ECHILD;
        kv_it_grpc *g = NULL;
        kv_it_grpc_opts o = {.set_window = 1, .window = 1u << 24, .conn_window = 1u << 26};
        o.ssl_ctx = x->probe_ssl_ctx;
        if (kv_it_grpc_open_opts(&g, "127.0.0.1", x->port, 1000, &o) == 0) {
            uint8_t *resp = NULL;
            size_t rl = 0;
            int st = -1;
            char msg[256];
            int cr = kv_it_grpc_call(g, "/etcdserverpb.Maintenance/Status", NULL, 0, &resp, &rl,
                                     2000, &st, msg, sizeof msg);
            free(resp);
            kv_it_grpc_close(g);
            if (cr == 0)
                return 0;
        }
        kvt_sleep_ms(50);
    }
    return -ETIMEDOUT;
}

void px_stop(px *x)
{
    kvt_proc_kill9(&x->proc);
}

double px_metric_sum_text(const char *text, const char *name, const char *contains)
{
    double sum = 0;
    size_t nl = strlen(name);
    for (const char *p = text; p && *p;) {
        const char *eol = strchr(p, '\n');
        size_t ll = eol ? (size_t)(eol - p) : strlen(p);
        if (p[0] != '#' && ll > nl && strncmp(p, name, nl) == 0 && (p[nl] == '{' || p[nl] == ' ')) {
            char line[1024];
            snprintf(line, sizeof line, "%.*s", (int)ll, p);
            char *sp = strrchr(line, ' ');
            if (sp && (!contains || strstr(line, contains)))
                sum += strtod(sp + 1, NULL);
        }
        p = eol ? eol + 1 : NULL;
    }
    return sum;
}

double px_metric(px *x, const char *series)
{
    int status = 0;
    char *body = NULL;
    /* without --metrics-addr, the listener's /metrics (the proxy's own, kvd only) */
    uint16_t port = x->metrics_port ? x->metrics_port : x->port;
    int r = kvt_http_get(port, "/metrics", 5000, &status, &body);
    cr_assert(r == 0 && status == 200, "proxy /metrics: rc %d status %d", r, status);
    double v = -1;
    if (kvt_metric_value(body, series, &v) != 0)
        v = -1;
    free(body);
    return v;
}

int px_ctl(px *x, uint32_t timeout_ms, kvt_cmd_result *res, ...)
{
    const char *argv[64];
    char ep[64];
    snprintf(ep, sizeof ep, "--endpoints=%s", x->endpoint);
    const char *ctl = getenv("KV_ETCDCTL_BIN");
    int n = 0;
    argv[n++] = ctl && *ctl ? ctl : "/usr/bin/etcdctl";
    argv[n++] = ep;
    va_list ap;
    va_start(ap, res);
    const char *a;
    while ((a = va_arg(ap, const char *)) != NULL && n < 63)
        argv[n++] = a;
    va_end(ap);
    argv[n] = NULL;
    static const char *const env[] = {"ETCDCTL_API=3", NULL};
    return kvt_run(argv, env, NULL, 0, timeout_ms, res);
}

double px_member_started(kvt_cluster *c, int i, const char *method)
{
    char *body = NULL;
    int r = kvt_member_metrics(c, i, &body);
    cr_assert(r == 0, "metrics of member %d: %d", i, r);
    char want[128];
    snprintf(want, sizeof want, "grpc_method=\"%s\"", method);
    double v = px_metric_sum_text(body, "grpc_server_started_total", want);
    free(body);
    return v;
}

int px_ka_resp(const uint8_t *m, size_t n, int64_t *id, int64_t *ttl)
{
    Etcdserverpb__LeaseKeepAliveResponse *r =
        etcdserverpb__lease_keep_alive_response__unpack(NULL, n, m);
    if (r == NULL)
        return -EBADMSG;
    *id = r->id;
    *ttl = r->ttl;
    etcdserverpb__lease_keep_alive_response__free_unpacked(r, NULL);
    return 0;
}

kvc_client *px_client(const char *endpoint)
{
    return kvt_kvc_open(endpoint);
}

int px_leases_dead(const char *endpoint, const int64_t *ids, size_t n)
{
    kvc_client *c = px_client(endpoint);
    kvc_error e;
    int dead = 0;
    for (size_t i = 0; i < n; i++) {
        kvc_lease_ttl_result t;
        cr_assert_eq(kvc_lease_time_to_live(c, ids[i], 0, 5000, &t, &e), 0, "%s", e.message);
        dead += t.ttl <= 0;
        kvc_lease_ttl_result_free(&t);
    }
    kvc_close(c);
    return dead;
}
