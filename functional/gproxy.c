/*
 * gproxy: the functional suite's gRPC proxies (--proxies N, fn.h). Each is a child process
 * `<kvd> grpc-proxy start` (or `etcd grpc-proxy start` for --target etcd) with the same
 * flags: --endpoints (every member's client URL, through that member's upstream relay),
 * --listen-addr, --metrics-addr. The stressers dial the proxies (kv_fn_client_endpoints);
 * the fault injector and the checkers keep talking to the members directly. Main thread
 * only, except kv_fn_client_endpoints (read-only).
 */
#include "fn.h"
#include "kvt_util.h"

#include "kvclient.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

int kv_fn_proxies_init(kv_fn_cluster *c, int n)
{
    if (n < 0 || n > KV_FN_MAX_PROXIES)
        return -EINVAL;
    for (int i = 0; i < n; i++) {
        kv_fn_gproxy *p = &c->gp[i];
        const char *root = c->root;
        int dl = snprintf(p->dir, sizeof(p->dir), "%s/p%d", root, i);
        if (dl < 0 || (size_t)dl >= sizeof(p->dir))
            return -ENAMETOOLONG;
        if (mkdir(p->dir, 0755) != 0 && errno != EEXIST)
            return -errno;
        char log[PATH_MAX + 16];
        snprintf(log, sizeof(log), "%s/proxy.log", p->dir);
        kvt_proc_init(&p->proc, log);
        int r = kvt_port_free(&p->port);
        if (r == 0)
            r = kvt_port_free(&p->metrics_port);
        if (r)
            return r;
        if (p->metrics_port == p->port && (r = kvt_port_free(&p->metrics_port)) != 0)
            return r;
        snprintf(p->endpoint, sizeof(p->endpoint), "127.0.0.1:%u", p->port);
    }
    for (int k = 0; n > 0 && k < c->n; k++) {
        int r = kvt_port_free(&c->up_port[k]);
        if (r == 0)
            r = kvt_proxy_start(&c->up[k], c->up_port[k], c->m[k].client_port,
                                (uint64_t)c->up_port[k] * 7919u + (uint64_t)k);
        if (r)
            return r;
    }
    c->n_proxies = n;
    return 0;
}

int kv_fn_proxies_busiest_upstream(kv_fn_cluster *c, uint32_t window_ms)
{
    uint64_t b0[KV_FN_MAX_MEMBERS] = {0}, b, d;
    uint32_t nc;
    for (int k = 0; k < c->n; k++)
        if (c->up[k])
            kvt_proxy_stats(c->up[k], &b0[k], &d, &nc);
    kvt_sleep_ms(window_ms);
    int best = 0;
    uint64_t most = 0;
    for (int k = 0; k < c->n; k++) {
        if (!c->up[k])
            continue;
        kvt_proxy_stats(c->up[k], &b, &d, &nc);
        if (b - b0[k] > most) {
            most = b - b0[k];
            best = k;
        }
    }
    return best;
}

int kv_fn_proxy_start(kv_fn_cluster *c, int i)
{
    kv_fn_gproxy *p = &c->gp[i];
    if (p->proc.pid)
        return 0;
    char a_ep[32 + KV_FN_MAX_MEMBERS * 24], a_la[64], a_ma[64];
    size_t len = (size_t)snprintf(a_ep, sizeof(a_ep), "--endpoints=");
    for (int k = 0; k < c->n; k++)
        len += (size_t)snprintf(a_ep + len, sizeof(a_ep) - len, "%s127.0.0.1:%u", k ? "," : "",
                                c->up_port[k]);
    snprintf(a_la, sizeof(a_la), "--listen-addr=%s", p->endpoint);
    snprintf(a_ma, sizeof(a_ma), "--metrics-addr=http://127.0.0.1:%u", p->metrics_port);
    const char *argv[] = {c->bin, "grpc-proxy", "start", a_ep, a_la, a_ma, NULL};
    return kvt_proc_spawn(&p->proc, argv);
}

/* 0 when a Range through proxy i is answered. */
static int proxy_ready(const kv_fn_gproxy *p, uint32_t timeout_ms)
{
    kvc_config cfg;
    kvc_config_default(&cfg);
    const char *eps[1] = {p->endpoint};
    cfg.endpoints = eps;
    cfg.n_endpoints = 1;
    cfg.dial_timeout_ms = timeout_ms;
    kvc_client *kc = NULL;
    int r = kvc_open(&kc, &cfg, NULL);
    if (r)
        return r;
    kvc_range_result rr = {0};
    kvc_range_opts ro = {.count_only = 1};
    r = kvc_get(kc, "/fn/proxy-ready", 15, &ro, timeout_ms, &rr, NULL);
    kvc_range_result_free(&rr);
    kvc_close(kc);
    return r;
}

int kv_fn_proxies_start(kv_fn_cluster *c, uint32_t timeout_ms)
{
    int r = 0;
    for (int i = 0; i < c->n_proxies && r == 0; i++)
        r = kv_fn_proxy_start(c, i);
    if (r)
        return r;
    int64_t deadline = kv_fn_now_us() + (int64_t)timeout_ms * 1000;
    for (int i = 0; i < c->n_proxies; i++) {
        while ((r = proxy_ready(&c->gp[i], 1000)) != 0 && kv_fn_now_us() < deadline) {
            if (!kvt_proc_alive(&c->gp[i].proc))
                return -ECHILD;
            kvt_sleep_ms(100);
        }
        if (r)
            return r;
    }
    return 0;
}

void kv_fn_proxies_stop(kv_fn_cluster *c)
{
    for (int i = 0; i < c->n_proxies; i++)
        if (c->gp[i].proc.pid)
            kvt_proc_kill9(&c->gp[i].proc);
    for (int k = 0; k < KV_FN_MAX_MEMBERS; k++) {
        kvt_proxy_stop(c->up[k]);
        c->up[k] = NULL;
    }
}

int kv_fn_client_endpoints(const kv_fn_cluster *c, int rot, const char **eps)
{
    int n = c->n_proxies > 0 ? c->n_proxies : c->n;
    if (rot < 0)
        rot = -rot;
    for (int k = 0; k < n; k++)
        eps[k] = c->n_proxies > 0 ? c->gp[(rot + k) % n].endpoint : c->m[(rot + k) % n].endpoint;
    return n;
}
