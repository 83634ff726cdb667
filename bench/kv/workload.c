/* workload: see workload.h. */
#include "workload.h"
#include "harness.h"
#include "rpc_client.h"
#include "rpc.pb-c.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

enum { PHASE_WARMUP = 0, PHASE_MEASURE = 1, PHASE_STOP = 2 };

typedef struct shared {
    const kv_bench_params *p;
    kv_it_rpc_group *group; /* one client I/O thread for all clients (each its own connection) */
    char *value;            /* value_size bytes of 'v' */
    atomic_int phase;
    atomic_uint ready;    /* --client-threads: clients connected (or failed to) */
    atomic_uint finished; /* async: clients that issue no more calls */
} shared;

typedef struct client {
    shared *sh;
    uint32_t id;
    kv_it_rpc *conn;
    uint64_t x;       /* key PRNG state */
    uint8_t *buf;     /* the packed request */
    uint64_t t0;      /* when the call in flight was issued */
    int issued;       /* the phase it was issued in */
    uint32_t *lat_us; /* measured latencies */
    size_t n, cap;
    int rc;
    char err[256];
} client;

const char *kv_bench_kind_name(kv_bench_kind k)
{
    return k == KV_BENCH_PUT ? "put" : "range";
}

static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static int record(client *c, uint32_t us)
{
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 65536;
        uint32_t *p = realloc(c->lat_us, cap * sizeof(*p));
        if (!p)
            return -ENOMEM;
        c->lat_us = p;
        c->cap = cap;
    }
    c->lat_us[c->n++] = us;
    return 0;
}

/* Packs the next request of c into buf; returns its length and sets *method. */
static size_t next_request(client *c, uint8_t *buf, const char **method)
{
    const kv_bench_params *p = c->sh->p;
    c->x ^= c->x << 13;
    c->x ^= c->x >> 7;
    c->x ^= c->x << 17;
    char key[32];
    int kl = snprintf(key, sizeof(key), "bench/%08u", (uint32_t)(c->x % p->keyspace));
    if (p->kind == KV_BENCH_PUT) {
        Etcdserverpb__PutRequest req = ETCDSERVERPB__PUT_REQUEST__INIT;
        req.key = (ProtobufCBinaryData){(size_t)kl, (uint8_t *)key};
        req.value = (ProtobufCBinaryData){p->value_size, (uint8_t *)c->sh->value};
        *method = "/etcdserverpb.KV/Put";
        return etcdserverpb__put_request__pack(&req, buf);
    }
    Etcdserverpb__RangeRequest req = ETCDSERVERPB__RANGE_REQUEST__INIT;
    req.key = (ProtobufCBinaryData){(size_t)kl, (uint8_t *)key};
    req.serializable = p->serializable != 0;
    *method = "/etcdserverpb.KV/Range";
    return etcdserverpb__range_request__pack(&req, buf);
}

/* Records the latency of a call issued in phase `issued` that ended at t1. */
static int completed(client *c, int issued, uint64_t t1)
{
    if (issued != PHASE_MEASURE ||
        atomic_load_explicit(&c->sh->phase, memory_order_relaxed) != PHASE_MEASURE)
        return 0;
    uint64_t d = t1 - c->t0;
    return record(c, d > UINT32_MAX ? UINT32_MAX : (uint32_t)d);
}

/* --client-threads: one thread per client making synchronous calls. */
static void *client_main(void *arg)
{
    client *c = arg;
    const kv_bench_params *p = c->sh->p;
    const char *ep = p->n_endpoints ? p->endpoints[c->id % p->n_endpoints] : p->endpoint;
    c->rc = kv_it_rpc_open_in(&c->conn, c->sh->group, ep, p->timeout_ms, c->err, sizeof(c->err));
    atomic_fetch_add(&c->sh->ready, 1);
    if (c->rc)
        return NULL;
    for (;;) {
        int phase = atomic_load_explicit(&c->sh->phase, memory_order_relaxed);
        if (phase == PHASE_STOP)
            break;
        const char *method;
        size_t len = next_request(c, c->buf, &method);
        uint8_t *resp = NULL;
        size_t rl = 0;
        c->t0 = now_us();
        c->rc = kv_it_rpc_call(c->conn, method, c->buf, len, &resp, &rl, p->timeout_ms, c->err,
                               sizeof(c->err));
        uint64_t t1 = now_us();
        if (resp)
            kv_it_rpc_free(resp);
        if (c->rc || (c->rc = completed(c, phase, t1)))
            break;
    }
    kv_it_rpc_close(c->conn);
    c->conn = NULL;
    return NULL;
}

/* The default driver: every client's calls run on the group's one I/O thread; each
 * completion records its latency and issues that client's next call from the callback
 * (closed loop, one call in flight per client), so the benchmark spends no thread switch
 * per call and leaves the CPU to the servers. */
static void async_issue(client *c);

static void async_done(void *arg, int status, const char *reason, uint8_t *resp, size_t rl)
{
    client *c = arg;
    uint64_t t1 = now_us();
    (void)rl;
    if (resp)
        kv_it_rpc_free(resp);
    if (status) {
        c->rc = status;
        snprintf(c->err, sizeof(c->err), "%s", reason);
    } else {
        c->rc = completed(c, c->issued, t1);
    }
    if (c->rc) {
        atomic_fetch_add(&c->sh->finished, 1);
        return;
    }
    async_issue(c);
}

static void async_issue(client *c)
{
    const kv_bench_params *p = c->sh->p;
    c->issued = atomic_load_explicit(&c->sh->phase, memory_order_relaxed);
    if (c->issued == PHASE_STOP) {
        atomic_fetch_add(&c->sh->finished, 1);
        return;
    }
    const char *method;
    size_t len = next_request(c, c->buf, &method);
    c->t0 = now_us();
    c->rc = kv_it_rpc_call_async(c->conn, method, c->buf, len, p->timeout_ms, async_done, c, c->err,
                                 sizeof(c->err));
    if (c->rc)
        atomic_fetch_add(&c->sh->finished, 1);
}

/* utime+stime of the server process(es) in seconds. */
static double server_cpu(const kv_bench_params *p)
{
    double total = 0, v = 0;
    if (p->n_pids == 0)
        return kv_it_proc_cpu(p->server_pid, &v) == 0 ? v : 0;
    for (uint32_t i = 0; i < p->n_pids; i++)
        if (kv_it_proc_cpu(p->pids[i], &v) == 0)
            total += v;
    return total;
}

/* utime+stime of this process (every client thread and the I/O thread) in seconds. */
static double self_cpu(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru))
        return 0;
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec / 1e6;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static void sleep_ms(uint32_t ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0)
        ;
}

/* Async driver: opens every client's connection from this thread, then starts each
 * client's first call; the calls that follow are issued by the completions. */
static int async_start(shared *sh, client *cs, uint32_t n, char *errbuf, size_t errcap)
{
    const kv_bench_params *p = sh->p;
    for (uint32_t i = 0; i < n; i++) {
        const char *ep = p->n_endpoints ? p->endpoints[i % p->n_endpoints] : p->endpoint;
        int rc = kv_it_rpc_open_in(&cs[i].conn, sh->group, ep, p->timeout_ms, cs[i].err,
                                   sizeof(cs[i].err));
        if (rc) {
            snprintf(errbuf, errcap, "client %u: %s", i, cs[i].err);
            for (uint32_t j = 0; j < i; j++) { /* none has a call in flight yet */
                kv_it_rpc_close(cs[j].conn);
                cs[j].conn = NULL;
            }
            return rc;
        }
    }
    for (uint32_t i = 0; i < n; i++)
        async_issue(&cs[i]);
    return 0;
}

/* Waits until no client has a call in flight. libkvclient completes every call by its
 * deadline, so a call still in flight 5 s after the timeout is a client bug: the callbacks
 * may still touch this run's state, so the process stops there. */
static void async_drain(shared *sh, uint32_t n)
{
    uint64_t deadline = kv_it_now_ms() + sh->p->timeout_ms + 5000;
    while (atomic_load(&sh->finished) < n) {
        if (kv_it_now_ms() > deadline) {
            fprintf(stderr, "workload: %u of %u clients still have a call in flight\n",
                    n - atomic_load(&sh->finished), n);
            abort();
        }
        sleep_ms(1);
    }
}

int kv_bench_run(const kv_bench_params *p, kv_bench_result *r, char *errbuf, size_t errcap)
{
    int rc = 0;
    memset(r, 0, sizeof(*r));
    shared sh = {.p = p};
    atomic_init(&sh.phase, PHASE_WARMUP);
    atomic_init(&sh.ready, 0);
    atomic_init(&sh.finished, 0);
    client *cs = calloc(p->clients, sizeof(*cs));
    pthread_t *th = calloc(p->clients, sizeof(*th));
    uint32_t started = 0; /* threads started, or (async) clients that may have a call */
    if (!cs || !th || !(sh.value = malloc(p->value_size ? p->value_size : 1))) {
        rc = -ENOMEM;
        goto out;
    }
    memset(sh.value, 'v', p->value_size);
    for (uint32_t i = 0; i < p->clients; i++) {
        cs[i].sh = &sh;
        cs[i].id = i;
        cs[i].x = 0x9E3779B97F4A7C15ull * (i + 1);
        if (!(cs[i].buf = malloc(p->value_size + 256))) {
            rc = -ENOMEM;
            goto out;
        }
    }
    if ((rc = kv_it_rpc_group_new(&sh.group)) < 0) {
        snprintf(errbuf, errcap, "client loop group: %d", rc);
        goto out;
    }
    if (p->client_threads) {
        for (uint32_t i = 0; i < p->clients; i++) {
            if (pthread_create(&th[i], NULL, client_main, &cs[i])) {
                rc = -EAGAIN;
                snprintf(errbuf, errcap, "pthread_create");
                atomic_store(&sh.phase, PHASE_STOP);
                goto join;
            }
            started++;
        }
        uint64_t deadline = kv_it_now_ms() + 30000;
        while (atomic_load(&sh.ready) < p->clients && kv_it_now_ms() < deadline)
            sleep_ms(5);
    } else {
        started = p->clients;
        if ((rc = async_start(&sh, cs, p->clients, errbuf, errcap))) {
            atomic_store(&sh.phase, PHASE_STOP);
            goto join;
        }
    }
    sleep_ms(p->warmup_ms);
    if (p->window_cb)
        p->window_cb(p->window_arg, 1);
    double cpu0 = server_cpu(p), self0 = self_cpu();
    uint64_t t0 = now_us();
    atomic_store(&sh.phase, PHASE_MEASURE);
    sleep_ms(p->duration_ms);
    atomic_store(&sh.phase, PHASE_STOP);
    uint64_t t1 = now_us();
    double cpu1 = server_cpu(p);
    r->client_cpu_s = self_cpu() - self0;
    if (p->window_cb)
        p->window_cb(p->window_arg, 0);
    if (p->server_pid > 0)
        kv_it_proc_rss(p->server_pid, &r->rss);
    r->seconds = (double)(t1 - t0) / 1e6;
    r->cpu_s = cpu1 - cpu0;
join:
    if (p->client_threads) {
        for (uint32_t i = 0; i < started; i++)
            pthread_join(th[i], NULL);
    } else {
        /* a client whose open failed never issued a call: count it finished */
        uint32_t idle = 0;
        for (uint32_t i = 0; i < p->clients; i++)
            idle += cs[i].conn == NULL;
        atomic_fetch_add(&sh.finished, idle);
        async_drain(&sh, p->clients);
        for (uint32_t i = 0; i < p->clients; i++) {
            kv_it_rpc_close(cs[i].conn);
            cs[i].conn = NULL;
        }
    }
    size_t total = 0;
    for (uint32_t i = 0; i < started; i++) {
        if (cs[i].rc && !rc) {
            rc = cs[i].rc;
            snprintf(errbuf, errcap, "client %u: %s", i, cs[i].err);
        }
        total += cs[i].n;
    }
    if (rc)
        goto out;
    uint32_t *all = malloc((total ? total : 1) * sizeof(*all));
    if (!all) {
        rc = -ENOMEM;
        goto out;
    }
    size_t o = 0;
    for (uint32_t i = 0; i < started; i++) {
        if (cs[i].n) /* lat_us is NULL for a client that completed no call in the window */
            memcpy(all + o, cs[i].lat_us, cs[i].n * sizeof(*all));
        o += cs[i].n;
    }
    qsort(all, total, sizeof(*all), cmp_u32);
    r->ops = total;
    r->ops_per_s = r->seconds > 0 ? (double)total / r->seconds : 0;
    if (total) {
        r->p50_ms = all[(total - 1) * 50 / 100] / 1000.0;
        r->p99_ms = all[(total - 1) * 99 / 100] / 1000.0;
        r->max_ms = all[total - 1] / 1000.0;
    }
    free(all);
out:
    kv_it_rpc_group_free(sh.group); /* every client is closed by now */
    for (uint32_t i = 0; cs && i < p->clients; i++) {
        free(cs[i].lat_us);
        free(cs[i].buf);
    }
    free(cs);
    free(sh.value);
    free(th);
    return rc;
}
