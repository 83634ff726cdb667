/*
 * watchfan - the watch fan-out of one grpc-proxy: W watchers of one key, over C client
 * connections to the proxy, in front of a 3-member cluster; kvd (`kvd grpc-proxy start`) vs
 * etcd 3.4 (`etcd grpc-proxy start`) in one run. See bench/README.md, "Watch fan-out".
 *
 *   watchfan [-k kvd|etcd|both] [-w watchers] [-c connections] [-m puts] [-R puts_per_s]
 *            [-r repeats]
 *
 * Per server kind: the cluster and one proxy; C libkvclient clients of the proxy on one I/O
 * thread (a loop group), each with W/C watchers of the key "wf" (one Watch stream per client);
 * then M puts of "wf" to the leader at R per second, each value the time it was sent (us).
 * Every event's delivery latency (arrival at the watcher - the put's send time) goes into a
 * histogram of 0.1 ms buckets. Reported: events delivered (of W x M), delivery p50/p99, the
 * proxy's CPU per delivered event and the leader's per put (utime + stime over the puts and
 * the drain), and the watchers the members hold (kvd_watchers / etcd's
 * etcd_debugging_mvcc_watcher_total, summed over the members). The watchers' own thread runs on
 * the same 2 cores: the latencies include it.
 */
#include "cluster.h"
#include "pb_common.h"

#include "kvt_util.h"

#include <kvclient.h>

#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WF_HIST 100000 /* 0.1 ms buckets: up to 10 s */
#define WF_MAX_CONNS 1000

struct wf_opts {
    int both, w, c, m, rate, repeats;
    kv_it_kind kind;
};

struct wf_result {
    int ok;
    double delivered, p50_ms, p99_ms, us_proxy_per_event, us_leader_per_put, member_watchers;
};

/* The watchers' callbacks all run on the one I/O thread of the loop group. */
static atomic_llong g_events;
static uint64_t *g_hist;

static void wf_on_watch(void *arg, const kvc_watch_response *r)
{
    (void)arg;
    uint64_t now = pb_now_us();
    for (size_t i = 0; i < r->n_events; i++) {
        char buf[32];
        size_t n =
            r->events[i].kv.value_len < sizeof buf - 1 ? r->events[i].kv.value_len : sizeof buf - 1;
        memcpy(buf, r->events[i].kv.value, n);
        buf[n] = 0;
        uint64_t sent = strtoull(buf, NULL, 10);
        uint64_t b = now > sent ? (now - sent) / 100 : 0;
        g_hist[b < WF_HIST ? b : WF_HIST - 1]++;
    }
    atomic_fetch_add(&g_events, (long long)r->n_events);
}

static double wf_hist_q(double q, long long total)
{
    long long want = (long long)(q * (double)total), seen = 0;
    for (int i = 0; i < WF_HIST; i++)
        if ((seen += (long long)g_hist[i]) > want)
            return (double)i / 10.0;
    return (double)WF_HIST / 10.0;
}

static double wf_member_watchers(const kv_bc_cluster *c)
{
    const char *name = c->kind == KV_IT_KVD ? "kvd_watchers" : "etcd_debugging_mvcc_watcher_total";
    double total = 0;
    for (int i = 0; i < c->n; i++) {
        double v;
        if (pb_metric(c->m[i].metrics_port, name, NULL, &v) == 0)
            total += v;
    }
    return total;
}

static int wf_run_one(const struct wf_opts *o, kv_it_kind kind, struct wf_result *r)
{
    memset(r, 0, sizeof *r);
    memset(g_hist, 0, WF_HIST * sizeof *g_hist);
    atomic_store(&g_events, 0);
    kv_bc_cluster *c = calloc(1, sizeof *c);
    struct pb_proxy *px = calloc(1, sizeof *px);
    kvc_client **cl = calloc((size_t)o->c, sizeof *cl);
    kvc_watch **wt = calloc((size_t)o->w, sizeof *wt);
    kvc_loop_group *lg = NULL;
    kvc_client *put = NULL;
    kvc_error e;
    int rc = -ENOMEM, nw = 0;
    if (!c || !px || !cl || !wt)
        goto out;
    int leader;
    if ((rc = pb_cluster_and_proxies(c, kind, px, 1, NULL, &leader)))
        goto out;
    if (kvc_loop_group_new(&lg, &e) != 0) {
        rc = -EIO;
        goto out;
    }
    for (int i = 0; i < o->c; i++)
        if ((rc = pb_client(px->ep, lg, &cl[i])))
            goto out;
    for (; nw < o->w; nw++)
        if (kvc_watch_create(cl[nw % o->c], "wf", 2, NULL, 10000, wf_on_watch, NULL, &wt[nw], NULL,
                             &e) != 0) {
            fprintf(stderr, "watcher %d: %s\n", nw, e.message);
            rc = -EIO;
            goto out;
        }
    r->member_watchers = wf_member_watchers(c);

    if ((rc = pb_client(c->m[leader].endpoint, NULL, &put)))
        goto out;
    double p0 = pb_cpu_s(px->proc.pid), l0 = pb_cpu_s(c->m[leader].proc.pid);
    uint64_t next = pb_now_us(), period = 1000000u / (uint64_t)o->rate;
    for (int i = 0; i < o->m; i++) {
        char val[32];
        int vl = snprintf(val, sizeof val, "%llu", (unsigned long long)pb_now_us());
        if (kvc_put(put, "wf", 2, val, (size_t)vl, NULL, 5000, NULL, &e) != 0)
            fprintf(stderr, "put %d: %s\n", i, e.message);
        next += period;
        uint64_t now = pb_now_us();
        if (next > now)
            kvt_sleep_ms((uint32_t)((next - now) / 1000));
    }
    long long want = (long long)o->w * o->m;
    for (uint64_t end = pb_now_ms() + 30000; atomic_load(&g_events) < want && pb_now_ms() < end;)
        kvt_sleep_ms(20);
    double p1 = pb_cpu_s(px->proc.pid), l1 = pb_cpu_s(c->m[leader].proc.pid);
    long long got = atomic_load(&g_events);
    r->delivered = (double)got;
    r->p50_ms = wf_hist_q(0.50, got);
    r->p99_ms = wf_hist_q(0.99, got);
    r->us_proxy_per_event = got ? 1e6 * (p1 - p0) / (double)got : -1;
    r->us_leader_per_put = 1e6 * (l1 - l0) / o->m;
    r->ok = 1;
    rc = 0;
out:
    for (int i = 0; wt && i < nw; i++)
        kvc_watch_cancel(wt[i]);
    for (int i = 0; cl && i < o->c; i++)
        kvc_close(cl[i]);
    kvc_close(put);
    if (lg)
        kvc_loop_group_free(lg);
    if (px)
        kvt_proc_term(&px->proc, 3000);
    if (c)
        kv_bc_cluster_destroy(c);
    free(c);
    free(px);
    free(cl);
    free(wt);
    return rc;
}

static void wf_usage(void)
{
    fprintf(stderr, "usage: watchfan [-k kvd|etcd|both] [-w watchers] [-c connections] "
                    "[-m puts] [-R puts_per_s] [-r repeats]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    struct wf_opts o = {.both = 1, .w = 1000, .c = 100, .m = 500, .rate = 100, .repeats = 1};
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            wf_usage();
        if (!strcmp(a, "-k")) {
            o.both = !strcmp(v, "both");
            o.kind = !strcmp(v, "etcd") ? KV_IT_ETCD : KV_IT_KVD;
        } else if (!strcmp(a, "-w"))
            o.w = atoi(v);
        else if (!strcmp(a, "-c"))
            o.c = atoi(v);
        else if (!strcmp(a, "-m"))
            o.m = atoi(v);
        else if (!strcmp(a, "-R"))
            o.rate = atoi(v);
        else if (!strcmp(a, "-r"))
            o.repeats = atoi(v);
        else
            wf_usage();
    }
    if (o.w < 1 || o.c < 1 || o.c > WF_MAX_CONNS || o.c > o.w || o.m < 1 || o.rate < 1 ||
        o.rate > 100000 || o.repeats < 1 || o.repeats > 16)
        wf_usage();
    g_hist = calloc(WF_HIST, sizeof *g_hist);
    if (!g_hist)
        return 1;
    kv_it_kind kinds[2] = {KV_IT_KVD, KV_IT_ETCD};
    int nk = o.both ? 2 : 1;
    if (!o.both)
        kinds[0] = o.kind;
    static struct wf_result res[2][16];
    for (int rep = 0; rep < o.repeats; rep++)
        for (int k = 0; k < nk; k++) {
            struct wf_result *r = &res[k][rep];
            int rc = wf_run_one(&o, kinds[k], r);
            printf("# %s run %d: %s; %.0f of %lld events, p50 %.1f ms, p99 %.1f ms, proxy "
                   "%.2f us/event, leader %.1f us/put, %.0f watchers at the members\n",
                   kv_it_kind_name(kinds[k]), rep + 1, rc ? strerror(-rc) : "ok", r->delivered,
                   (long long)o.w * o.m, r->p50_ms, r->p99_ms, r->us_proxy_per_event,
                   r->us_leader_per_put, r->member_watchers);
            fflush(stdout);
        }
    printf("\nwatchfan: %d watchers of one key over %d connections to 1 proxy, %d puts at %d/s, "
           "%d repeat(s) (medians)\n",
           o.w, o.c, o.m, o.rate, o.repeats);
    static const struct {
        const char *name;
        size_t off;
    } rows[] = {
        {"events delivered", offsetof(struct wf_result, delivered)},
        {"delivery latency p50 (ms)", offsetof(struct wf_result, p50_ms)},
        {"delivery latency p99 (ms)", offsetof(struct wf_result, p99_ms)},
        {"proxy CPU us per delivered event", offsetof(struct wf_result, us_proxy_per_event)},
        {"leader CPU us per put", offsetof(struct wf_result, us_leader_per_put)},
        {"watchers held by the members", offsetof(struct wf_result, member_watchers)},
    };
    printf("%-34s %12s %12s %8s\n", "", "kvd", "etcd", "kvd/etcd");
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        double v[2] = {-1, -1};
        for (int k = 0; k < nk; k++)
            v[kinds[k] == KV_IT_KVD ? 0 : 1] =
                pb_median(res[k], sizeof res[k][0], o.repeats, rows[i].off);
        char ratio[16] = "-";
        if (v[0] >= 0 && v[1] > 0)
            snprintf(ratio, sizeof ratio, "%.2f", v[0] / v[1]);
        printf("%-34s %12.2f %12.2f %8s\n", rows[i].name, v[0], v[1], ratio);
    }
    free(g_hist);
    return 0;
}
