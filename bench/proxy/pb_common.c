/*
 * pb_common.c - what the proxy benchmarks share (pb_common.h).
 */
#include "pb_common.h"

#include "grpc_raw.h"
#include "harness.h"
#include "kvt_util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

uint64_t pb_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

uint64_t pb_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

double pb_cpu_s(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    unsigned long ut = 0, st = 0;
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
        return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

int pb_metric(uint16_t port, const char *name, const char *label, double *v)
{
    int status = 0;
    char *body = NULL;
    *v = 0;
    int rc = kv_it_http_get(port, "/metrics", 3000, &status, &body);
    if (rc == 0 && status != 200)
        rc = -EPROTO;
    if (rc == 0)
        rc = kv_it_metric_sum(body, name, label, v, NULL);
    free(body);
    return rc;
}

int pb_start_proxies(kv_bc_cluster *c, struct pb_proxy *px, int p, const char *kvd_flag)
{
    char eps[256];
    snprintf(eps, sizeof eps, "--endpoints=%s,%s,%s", c->m[0].endpoint, c->m[1].endpoint,
             c->m[2].endpoint);
    for (int i = 0; i < p; i++) {
        int rc;
        do {
            if ((rc = kvt_port_free(&px[i].port)) || (rc = kvt_port_free(&px[i].mport)))
                return rc;
        } while (px[i].port == px[i].mport);
        snprintf(px[i].ep, sizeof px[i].ep, "127.0.0.1:%u", px[i].port);
        snprintf(px[i].log, sizeof px[i].log, "%s/proxy%d.log", c->dir, i + 1);
        char a_l[96], a_m[96];
        snprintf(a_l, sizeof a_l, "--listen-addr=127.0.0.1:%u", px[i].port);
        snprintf(a_m, sizeof a_m, "--metrics-addr=http://127.0.0.1:%u", px[i].mport);
        const char *argv[9] = {c->bin, "grpc-proxy", "start", eps, a_l, a_m, NULL, NULL, NULL};
        if (c->kind == KV_IT_KVD) {
            argv[6] = "--max-connections=200000";
            argv[7] = kvd_flag;
        }
        kvt_proc_init(&px[i].proc, px[i].log);
        if ((rc = kvt_proc_spawn(&px[i].proc, argv)))
            return rc;
    }
    for (int i = 0; i < p; i++) {
        uint64_t deadline = kvt_now_ms() + 20000;
        int st = -1;
        while (!kv_bc_answers_range(px[i].port, &st) || st != 0) {
            if (!kvt_proc_alive(&px[i].proc) || kvt_now_ms() > deadline) {
                fprintf(stderr, "proxy %d not ready (log %s)\n", i + 1, px[i].log);
                return -ETIMEDOUT;
            }
            kvt_sleep_ms(100);
        }
    }
    return 0;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double pb_median(const void *rs, size_t size, int n, size_t off)
{
    double v[16];
    int k = 0;
    for (int i = 0; i < n && k < 16; i++) {
        const char *r = (const char *)rs + (size_t)i * size;
        if (*(const int *)r)
            v[k++] = *(const double *)(r + off);
    }
    if (!k)
        return -1;
    qsort(v, (size_t)k, sizeof v[0], cmp_d);
    return k % 2 ? v[k / 2] : (v[k / 2 - 1] + v[k / 2]) / 2;
}

int pb_cluster_and_proxies(kv_bc_cluster *c, kv_it_kind kind, struct pb_proxy *px, int p,
                           const char *kvd_flag, int *leader)
{
    char why[1024];
    int rc = kv_bc_cluster_start(c, kind, 3, NULL, 30000, why, sizeof why);
    if (rc) {
        fprintf(stderr, "cluster: %s\n", why);
        return rc;
    }
    if ((*leader = kv_bc_leader(c)) < 0) {
        kvt_sleep_ms(2000);
        *leader = kv_bc_leader(c);
    }
    if (*leader < 0) {
        fprintf(stderr, "no leader\n");
        return *leader;
    }
    return pb_start_proxies(c, px, p, kvd_flag);
}

int pb_client(const char *ep, kvc_loop_group *lg, kvc_client **out)
{
    const char *eps[1] = {ep};
    kvc_config cfg;
    kvc_config_default(&cfg);
    cfg.endpoints = eps;
    cfg.n_endpoints = 1;
    cfg.loop_group = lg;
    kvc_error e;
    if (kvc_open(out, &cfg, &e) != 0) {
        fprintf(stderr, "client of %s: %s\n", ep, e.message);
        return -EIO;
    }
    return 0;
}
