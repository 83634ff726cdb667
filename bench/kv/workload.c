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
#include <time.h>
#include <unistd.h>

enum { PHASE_WARMUP = 0, PHASE_MEASURE = 1, PHASE_STOP = 2 };

typedef struct shared {
    const kv_bench_params *p;
    kv_it_rpc_group *group; /* one client I/O thread for all clients (each its own connection) */
    atomic_int phase;
    atomic_uint ready;
} shared;

typedef struct client {
    shared *sh;
    uint32_t id;
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

static void *client_main(void *arg)
{
    client *c = arg;
    const kv_bench_params *p = c->sh->p;
    kv_it_rpc *conn = NULL;
    uint8_t *buf = NULL;
    char *value = NULL;
    uint64_t x = 0x9E3779B97F4A7C15ull * (c->id + 1);
    const char *ep = p->n_endpoints ? p->endpoints[c->id % p->n_endpoints] : p->endpoint;
    c->rc = kv_it_rpc_open_in(&conn, c->sh->group, ep, p->timeout_ms, c->err, sizeof(c->err));
    atomic_fetch_add(&c->sh->ready, 1);
    if (c->rc)
        return NULL;
    size_t vs = p->value_size;
    value = malloc(vs ? vs : 1);
    buf = malloc(vs + 256);
    if (!value || !buf) {
        c->rc = -ENOMEM;
        goto out;
    }
    memset(value, 'v', vs);
    for (;;) {
        int phase = atomic_load_explicit(&c->sh->phase, memory_order_relaxed);
        if (phase == PHASE_STOP)
            break;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        char key[32];
        int kl = snprintf(key, sizeof(key), "bench/%08u", (uint32_t)(x % p->keyspace));
        size_t len;
        const char *method;
        if (p->kind == KV_BENCH_PUT) {
            Etcdserverpb__PutRequest req = ETCDSERVERPB__PUT_REQUEST__INIT;
            req.key = (ProtobufCBinaryData){(size_t)kl, (uint8_t *)key};
            req.value = (ProtobufCBinaryData){vs, (uint8_t *)value};
            len = etcdserverpb__put_request__pack(&req, buf);
            method = "/etcdserverpb.KV/Put";
        } else {
            Etcdserverpb__RangeRequest req = ETCDSERVERPB__RANGE_REQUEST__INIT;
            req.key = (ProtobufCBinaryData){(size_t)kl, (uint8_t *)key};
            req.serializable = p->serializable != 0;
            len = etcdserverpb__range_request__pack(&req, buf);
            method = "/etcdserverpb.KV/Range";
        }
        uint8_t *resp = NULL;
        size_t rl = 0;
        uint64_t t0 = now_us();
        c->rc = kv_it_rpc_call(conn, method, buf, len, &resp, &rl, p->timeout_ms, c->err,
                               sizeof(c->err));
        uint64_t t1 = now_us();
        if (resp)
            kv_it_rpc_free(resp);
        if (c->rc)
            break;
        if (phase == PHASE_MEASURE &&
            atomic_load_explicit(&c->sh->phase, memory_order_relaxed) == PHASE_MEASURE) {
            uint64_t d = t1 - t0;
            if ((c->rc = record(c, d > UINT32_MAX ? UINT32_MAX : (uint32_t)d)))
                break;
        }
    }
out:
    kv_it_rpc_close(conn);
    free(buf);
    free(value);
    return NULL;
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

int kv_bench_run(const kv_bench_params *p, kv_bench_result *r, char *errbuf, size_t errcap)
{
    int rc = 0;
    memset(r, 0, sizeof(*r));
    shared sh = {.p = p};
    atomic_init(&sh.phase, PHASE_WARMUP);
    atomic_init(&sh.ready, 0);
    client *cs = calloc(p->clients, sizeof(*cs));
    pthread_t *th = calloc(p->clients, sizeof(*th));
    uint32_t started = 0;
    if (!cs || !th) {
        rc = -ENOMEM;
        goto out;
    }
    if ((rc = kv_it_rpc_group_new(&sh.group)) < 0) {
        snprintf(errbuf, errcap, "client loop group: %d", rc);
        goto out;
    }
    for (uint32_t i = 0; i < p->clients; i++) {
        cs[i].sh = &sh;
        cs[i].id = i;
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
    sleep_ms(p->warmup_ms);
    if (p->window_cb)
        p->window_cb(p->window_arg, 1);
    double cpu0 = server_cpu(p);
    uint64_t t0 = now_us();
    atomic_store(&sh.phase, PHASE_MEASURE);
    sleep_ms(p->duration_ms);
    atomic_store(&sh.phase, PHASE_STOP);
    uint64_t t1 = now_us();
    double cpu1 = server_cpu(p);
    if (p->window_cb)
        p->window_cb(p->window_arg, 0);
    if (p->server_pid > 0)
        kv_it_proc_rss(p->server_pid, &r->rss);
    r->seconds = (double)(t1 - t0) / 1e6;
    r->cpu_s = cpu1 - cpu0;
join:
    for (uint32_t i = 0; i < started; i++)
        pthread_join(th[i], NULL);
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
    kv_it_rpc_group_free(sh.group); /* every client thread has closed its client by now */
    for (uint32_t i = 0; cs && i < p->clients; i++)
        free(cs[i].lat_us);
    free(cs);
    free(th);
    return rc;
}
