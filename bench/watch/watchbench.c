/*
 * watchbench: Watch fan-out and catch-up, kvd vs etcd 3.4 (issue 11 section 6; not a test).
 *
 * 1. Fan-out: --watchers watchers on one prefix spread over --streams client connections
 *    (one libkvclient client = one connection = one Watch stream), a writer putting
 *    --rate puts/s for --duration s (async, paced). Each value carries its send time, so
 *    every delivered event gives a latency (histogram, ~3% buckets). Reported: events
 *    delivered / expected, p50 / p99 delivery latency, server CPU (utime+stime delta) over
 *    the window plus the drain, CPU per delivered event.
 * 2. Catch-up: --catchup-events puts, then --catchup-watchers watchers created from the
 *    revision before them: time until every watcher has received every event.
 *
 * Servers are started by the integration harness (same flags as the tests, fresh data dir).
 * Client callbacks run on --loops shared I/O threads; the client competes with the server
 * for the same CPUs, so compare kvd and etcd within one run.
 */
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "kvclient.h"

typedef struct opts {
    int watchers, streams, rate, duration, catchup_watchers, catchup_events, value_size;
    int loops, drain;
    int do_kvd, do_etcd, do_fanout, do_catchup;
} opts;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- latency histogram: 32 sub-buckets per power of two of microseconds ---- */

#define HB 32
#define HN (40 * HB)
struct hist {
    atomic_uint_least64_t b[HN];
    atomic_uint_least64_t n;
};

static int hidx(uint64_t us)
{
    if (us < HB)
        return (int)us;
    int e = 63 - __builtin_clzll(us); /* us in [2^e, 2^(e+1)) */
    int sub = (int)((us >> (e - 5)) & (HB - 1));
    int i = (e - 4) * HB + sub;
    return i < HN ? i : HN - 1;
}

static double hval(int i)
{
    if (i < HB)
        return i;
    int e = i / HB + 4, sub = i % HB;
    return (double)(1ull << e) * (1.0 + (sub + 0.5) / HB);
}

static double hquant(struct hist *h, double q)
{
    uint64_t n = atomic_load(&h->n), want = (uint64_t)ceil(q * (double)n), acc = 0;
    for (int i = 0; i < HN; i++) {
        acc += atomic_load(&h->b[i]);
        if (acc >= want && acc > 0)
            return hval(i) / 1000.0; /* ms */
    }
    return 0;
}

/* ---- fan-out ---- */

struct fan {
    struct hist h;
    atomic_uint_least64_t delivered;
    atomic_uint_least64_t canceled;
};

static void on_fan(void *arg, const kvc_watch_response *r)
{
    struct fan *f = arg;
    uint64_t t = now_ns();
    for (size_t i = 0; i < r->n_events; i++) {
        const kvc_event *e = &r->events[i];
        if (e->kv.value_len >= 8) {
            uint64_t sent;
            memcpy(&sent, e->kv.value, 8);
            uint64_t us = t > sent ? (t - sent) / 1000 : 0;
            atomic_fetch_add_explicit(&f->h.b[hidx(us)], 1, memory_order_relaxed);
            atomic_fetch_add_explicit(&f->h.n, 1, memory_order_relaxed);
        }
    }
    atomic_fetch_add_explicit(&f->delivered, r->n_events, memory_order_relaxed);
    if (r->canceled)
        atomic_fetch_add(&f->canceled, 1);
}

struct writer {
    kvc_client *c;
    int rate, duration, value_size;
    atomic_int inflight;
    atomic_uint_least64_t failed, done;
    uint64_t sent;
};

static void on_put(void *arg, int status, const kvc_error *err, kvc_put_result *r)
{
    struct writer *w = arg;
    (void)err;
    if (status)
        atomic_fetch_add(&w->failed, 1);
    else
        kvc_put_result_free(r);
    atomic_fetch_add(&w->done, 1);
    atomic_fetch_sub(&w->inflight, 1);
}

static void *writer_main(void *arg)
{
    struct writer *w = arg;
    uint8_t *val = calloc(1, (size_t)w->value_size);
    uint64_t start = now_ns(), period = 1000000000ull / (uint64_t)w->rate;
    uint64_t total = (uint64_t)w->rate * (uint64_t)w->duration;
    for (uint64_t i = 0; i < total; i++) {
        uint64_t at = start + i * period, t = now_ns();
        if (at > t) {
            struct timespec ts = {.tv_sec = (time_t)((at - t) / 1000000000ull),
                                  .tv_nsec = (long)((at - t) % 1000000000ull)};
            nanosleep(&ts, NULL);
        }
        if (atomic_load(&w->inflight) > 5000) /* server far behind: don't queue unboundedly */
            continue;
        char key[32];
        snprintf(key, sizeof key, "bw/%" PRIu64, i % 1000);
        uint64_t ts = now_ns();
        memcpy(val, &ts, 8);
        atomic_fetch_add(&w->inflight, 1);
        if (kvc_put_async(w->c, key, strlen(key), val, (size_t)w->value_size, NULL, 10000, on_put,
                          w, NULL) != 0) {
            atomic_fetch_sub(&w->inflight, 1);
            atomic_fetch_add(&w->failed, 1);
            continue;
        }
        w->sent++;
    }
    free(val);
    return NULL;
}

static kvc_client *open_client(const char *ep, kvc_loop_group *lg)
{
    const char *eps[] = {ep};
    kvc_config cfg;
    kvc_config_default(&cfg);
    cfg.endpoints = eps;
    cfg.n_endpoints = 1;
    cfg.loop_group = lg;
    cfg.dial_timeout_ms = 10000;
    kvc_client *c = NULL;
    kvc_error e;
    if (kvc_open(&c, &cfg, &e) != 0) {
        fprintf(stderr, "watchbench: kvc_open: %s\n", e.message);
        exit(1);
    }
    return c;
}

struct result {
    double p50, p99, cpu_s, cpu_us_per_event, delivered_ratio, puts_per_s, catchup_s;
    uint64_t delivered, expected;
    int ok;
};

static int create_watchers(kvc_client **cs, int nc, int nw, int64_t rev, kvc_watch_cb cb,
                           void *args, size_t arg_size, kvc_watch **ws)
{
    for (int i = 0; i < nw; i++) {
        kvc_watch_opts o = {.prefix = 1, .start_revision = rev};
        kvc_error e;
        void *arg = (char *)args + (size_t)i * arg_size;
        if (kvc_watch_create(cs[i % nc], "bw/", 3, &o, 30000, cb, arg, &ws[i], NULL, &e) != 0) {
            fprintf(stderr, "watchbench: watch %d: %s (code %d)%s\n", i, e.message, e.code,
                    e.code == KVC_UNIMPLEMENTED ? " -- the server does not implement Watch" : "");
            return -1;
        }
    }
    return 0;
}

static int fanout(const opts *o, kv_it_server *s, kvc_loop_group **lgs, struct result *res)
{
    memset(res, 0, sizeof *res);
    kvc_client **cs = calloc((size_t)o->streams, sizeof *cs);
    kvc_watch **ws = calloc((size_t)o->watchers, sizeof *ws);
    struct fan *f = calloc(1, sizeof *f);
    for (int i = 0; i < o->streams; i++)
        cs[i] = open_client(s->endpoint, lgs[i % o->loops]);
    uint64_t t0 = now_ns();
    if (create_watchers(cs, o->streams, o->watchers, 0, on_fan, f, 0, ws) != 0)
        return -1;
    fprintf(stderr, "  %d watchers on %d streams created in %.1f s\n", o->watchers, o->streams,
            (double)(now_ns() - t0) / 1e9);
    struct writer w = {.c = open_client(s->endpoint, NULL),
                       .rate = o->rate,
                       .duration = o->duration,
                       .value_size = o->value_size < 8 ? 8 : o->value_size};
    double cpu0 = 0, cpu1 = 0;
    kv_it_proc_cpu(s->pid, &cpu0);
    pthread_t th;
    uint64_t w0 = now_ns();
    pthread_create(&th, NULL, writer_main, &w);
    pthread_join(th, NULL);
    while (atomic_load(&w.inflight) > 0 &&
           now_ns() - w0 < (uint64_t)(o->duration + 30) * 1000000000ull)
        usleep(10000);
    double put_s = (double)(now_ns() - w0) / 1e9;
    uint64_t ok_puts = atomic_load(&w.done) - atomic_load(&w.failed);
    uint64_t expected = ok_puts * (uint64_t)o->watchers;
    uint64_t dl = now_ns() + (uint64_t)o->drain * 1000000000ull;
    while (atomic_load(&f->delivered) < expected && now_ns() < dl)
        usleep(20000);
    kv_it_proc_cpu(s->pid, &cpu1);
    res->delivered = atomic_load(&f->delivered);
    res->expected = expected;
    res->delivered_ratio = expected ? (double)res->delivered / (double)expected : 0;
    res->p50 = hquant(&f->h, 0.50);
    res->p99 = hquant(&f->h, 0.99);
    res->cpu_s = cpu1 - cpu0;
    res->cpu_us_per_event = res->delivered ? res->cpu_s * 1e6 / (double)res->delivered : 0;
    res->puts_per_s = (double)ok_puts / put_s;
    res->ok = atomic_load(&w.failed) == 0 && atomic_load(&f->canceled) == 0;
    if (atomic_load(&w.failed))
        fprintf(stderr, "  %" PRIu64 " puts failed\n", (uint64_t)atomic_load(&w.failed));
    for (int i = 0; i < o->watchers; i++)
        kvc_watch_cancel(ws[i]);
    for (int i = 0; i < o->streams; i++)
        kvc_close(cs[i]);
    kvc_close(w.c);
    free(cs);
    free(ws);
    free(f);
    return 0;
}

/* ---- catch-up ---- */

struct cu {
    atomic_uint_least64_t got;
    uint64_t want;
    atomic_int *synced;
};

static void on_cu(void *arg, const kvc_watch_response *r)
{
    struct cu *c = arg;
    uint64_t g =
        atomic_fetch_add_explicit(&c->got, r->n_events, memory_order_relaxed) + r->n_events;
    if (g >= c->want && g - r->n_events < c->want)
        atomic_fetch_add(c->synced, 1);
}

static int load(kv_it_server *s, int n, int value_size)
{
    struct writer w = {.c = open_client(s->endpoint, NULL)};
    uint8_t *val = calloc(1, (size_t)value_size);
    for (int i = 0; i < n; i++) {
        while (atomic_load(&w.inflight) >= 256)
            usleep(200);
        char key[32];
        snprintf(key, sizeof key, "bw/%d", i % 1000);
        atomic_fetch_add(&w.inflight, 1);
        if (kvc_put_async(w.c, key, strlen(key), val, (size_t)value_size, NULL, 30000, on_put, &w,
                          NULL) != 0) {
            atomic_fetch_sub(&w.inflight, 1);
            i--;
            usleep(1000);
        }
    }
    while (atomic_load(&w.inflight) > 0)
        usleep(1000);
    kvc_close(w.c);
    free(val);
    if (atomic_load(&w.failed)) {
        fprintf(stderr, "watchbench: %" PRIu64 " loading puts failed\n",
                (uint64_t)atomic_load(&w.failed));
        return -1;
    }
    return 0;
}

static int catchup(const opts *o, kv_it_server *s, kvc_loop_group **lgs, struct result *res)
{
    kvc_client *c0 = open_client(s->endpoint, NULL);
    kvc_range_result rr;
    kvc_error e;
    if (kvc_get(c0, "x", 1, NULL, 10000, &rr, &e) != 0) {
        fprintf(stderr, "watchbench: get: %s\n", e.message);
        return -1;
    }
    int64_t start_rev = rr.header.revision + 1;
    kvc_range_result_free(&rr);
    kvc_close(c0);
    uint64_t l0 = now_ns();
    if (load(s, o->catchup_events, o->value_size) != 0)
        return -1;
    fprintf(stderr, "  loaded %d events in %.1f s\n", o->catchup_events,
            (double)(now_ns() - l0) / 1e9);
    int nc = o->streams < o->catchup_watchers ? o->streams : o->catchup_watchers;
    kvc_client **cs = calloc((size_t)nc, sizeof *cs);
    kvc_watch **ws = calloc((size_t)o->catchup_watchers, sizeof *ws);
    struct cu *cus = calloc((size_t)o->catchup_watchers, sizeof *cus);
    atomic_int synced = 0;
    for (int i = 0; i < o->catchup_watchers; i++) {
        cus[i].want = (uint64_t)o->catchup_events;
        cus[i].synced = &synced;
    }
    for (int i = 0; i < nc; i++)
        cs[i] = open_client(s->endpoint, lgs[i % o->loops]);
    double cpu0 = 0, cpu1 = 0;
    kv_it_proc_cpu(s->pid, &cpu0);
    uint64_t t0 = now_ns();
    if (create_watchers(cs, nc, o->catchup_watchers, start_rev, on_cu, cus, sizeof *cus, ws) != 0)
        return -1;
    uint64_t dl = t0 + 600ull * 1000000000ull;
    while (atomic_load(&synced) < o->catchup_watchers && now_ns() < dl)
        usleep(10000);
    res->catchup_s = (double)(now_ns() - t0) / 1e9;
    kv_it_proc_cpu(s->pid, &cpu1);
    res->cpu_s = cpu1 - cpu0;
    res->ok = atomic_load(&synced) == o->catchup_watchers;
    uint64_t got = 0;
    for (int i = 0; i < o->catchup_watchers; i++)
        got += atomic_load(&cus[i].got);
    res->delivered = got;
    res->expected = (uint64_t)o->catchup_watchers * (uint64_t)o->catchup_events;
    for (int i = 0; i < o->catchup_watchers; i++)
        kvc_watch_cancel(ws[i]);
    for (int i = 0; i < nc; i++)
        kvc_close(cs[i]);
    free(cs);
    free(ws);
    free(cus);
    return 0;
}

static int parse(int argc, char **argv, opts *o)
{
    *o = (opts){.watchers = 10000,
                .streams = 100,
                .rate = 1000,
                .duration = 10,
                .catchup_watchers = 1000,
                .catchup_events = 100000,
                .value_size = 64,
                .loops = 2,
                .drain = 60,
                .do_kvd = 1,
                .do_etcd = 1,
                .do_fanout = 1,
                .do_catchup = 1};
    static const struct option lo[] = {{"watchers", 1, 0, 'w'},
                                       {"streams", 1, 0, 's'},
                                       {"rate", 1, 0, 'r'},
                                       {"duration", 1, 0, 'd'},
                                       {"catchup-watchers", 1, 0, 'W'},
                                       {"catchup-events", 1, 0, 'E'},
                                       {"value-size", 1, 0, 'v'},
                                       {"loops", 1, 0, 'l'},
                                       {"drain", 1, 0, 'D'},
                                       {"server", 1, 0, 'S'},
                                       {"only", 1, 0, 'o'},
                                       {"help", 0, 0, 'h'},
                                       {0, 0, 0, 0}};
    int ch;
    while ((ch = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        switch (ch) {
        case 'w':
            o->watchers = atoi(optarg);
            break;
        case 's':
            o->streams = atoi(optarg);
            break;
        case 'r':
            o->rate = atoi(optarg);
            break;
        case 'd':
            o->duration = atoi(optarg);
            break;
        case 'W':
            o->catchup_watchers = atoi(optarg);
            break;
        case 'E':
            o->catchup_events = atoi(optarg);
            break;
        case 'v':
            o->value_size = atoi(optarg);
            break;
        case 'l':
            o->loops = atoi(optarg);
            break;
        case 'D':
            o->drain = atoi(optarg);
            break;
        case 'S':
            o->do_kvd = strcmp(optarg, "etcd") != 0;
            o->do_etcd = strcmp(optarg, "kvd") != 0;
            break;
        case 'o':
            o->do_fanout = strcmp(optarg, "catchup") != 0;
            o->do_catchup = strcmp(optarg, "fanout") != 0;
            break;
        default:
            fprintf(stderr, "usage: watchbench [--watchers 10000] [--streams 100] [--rate 1000] "
                            "[--duration 10] [--catchup-watchers 1000] [--catchup-events 100000] "
                            "[--value-size 64] [--loops 2] [--drain 60] [--server kvd|etcd|both] "
                            "[--only fanout|catchup]\n");
            return -1;
        }
    }
    if (o->watchers < 1 || o->streams < 1 || o->rate < 1 || o->duration < 1 || o->loops < 1 ||
        o->catchup_watchers < 1 || o->catchup_events < 1)
        return -1;
    return 0;
}

static int run_server(const opts *o, kv_it_kind kind, kvc_loop_group **lgs, struct result *fr,
                      struct result *cr)
{
    kv_it_server s;
    memset(fr, 0, sizeof *fr);
    memset(cr, 0, sizeof *cr);
    for (int phase = 0; phase < 2; phase++) {
        if ((phase == 0 && !o->do_fanout) || (phase == 1 && !o->do_catchup))
            continue;
        if (kv_it_server_init(&s, kind, NULL) != 0 || kv_it_server_start(&s, 30000) != 0) {
            fprintf(stderr, "watchbench: cannot start %s\n", kv_it_kind_name(kind));
            return -1;
        }
        fprintf(stderr, "%s: %s\n", kv_it_kind_name(kind), phase == 0 ? "fan-out" : "catch-up");
        int rc = phase == 0 ? fanout(o, &s, lgs, fr) : catchup(o, &s, lgs, cr);
        kv_it_server_destroy(&s);
        if (rc != 0)
            return -1;
    }
    return 0;
}

static void print(const char *name, const opts *o, const struct result *f, const struct result *c)
{
    if (o->do_fanout)
        printf("%-5s fan-out : puts/s %.0f, events %" PRIu64 "/%" PRIu64
               " (%.3f), latency p50 %.2f ms p99 %.2f ms, server CPU %.2f s (%.2f us/event)%s\n",
               name, f->puts_per_s, f->delivered, f->expected, f->delivered_ratio, f->p50, f->p99,
               f->cpu_s, f->cpu_us_per_event, f->ok ? "" : "  [errors]");
    if (o->do_catchup)
        printf("%-5s catch-up: %d watchers x %d events: %s %.2f s (events %" PRIu64 "/%" PRIu64
               "), server CPU %.2f s\n",
               name, o->catchup_watchers, o->catchup_events,
               c->ok ? "all synced in" : "NOT all synced after", c->catchup_s, c->delivered,
               c->expected, c->cpu_s);
}

int main(int argc, char **argv)
{
    opts o;
    if (parse(argc, argv, &o) != 0)
        return 2;
    kvc_loop_group **lgs = calloc((size_t)o.loops, sizeof *lgs);
    for (int i = 0; i < o.loops; i++)
        if (kvc_loop_group_new(&lgs[i], NULL) != 0)
            return 1;
    printf("watchbench: fan-out %d watchers / %d streams, %d puts/s x %d s; catch-up %d "
           "watchers x %d events; %d client I/O threads\n",
           o.watchers, o.streams, o.rate, o.duration, o.catchup_watchers, o.catchup_events,
           o.loops);
    struct result kf, kc, ef, ec;
    int have_k = 0, have_e = 0;
    char bin[4096];
    if (o.do_etcd && kv_it_server_bin(KV_IT_ETCD, bin, sizeof bin) == 0)
        have_e = run_server(&o, KV_IT_ETCD, lgs, &ef, &ec) == 0;
    if (o.do_kvd && kv_it_server_bin(KV_IT_KVD, bin, sizeof bin) == 0)
        have_k = run_server(&o, KV_IT_KVD, lgs, &kf, &kc) == 0;
    if (have_e)
        print("etcd", &o, &ef, &ec);
    if (have_k)
        print("kvd", &o, &kf, &kc);
    if (have_k && have_e) {
        if (o.do_fanout)
            printf("kvd/etcd fan-out: p99 %.2f (target <= 1), CPU %.2f (target <= 0.33)\n",
                   ef.p99 > 0 ? kf.p99 / ef.p99 : 0, ef.cpu_s > 0 ? kf.cpu_s / ef.cpu_s : 0);
        if (o.do_catchup)
            printf("kvd/etcd catch-up time: %.2f\n",
                   ec.catchup_s > 0 ? kc.catchup_s / ec.catchup_s : 0);
    }
    for (int i = 0; i < o.loops; i++)
        kvc_loop_group_free(lgs[i]);
    free(lgs);
    return have_k || have_e ? 0 : 1;
}
