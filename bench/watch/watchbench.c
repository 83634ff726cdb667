/*
 * watchbench: Watch benchmarks, kvd vs etcd on the same machine (not a test).
 *
 *   watchbench catchup [WATCHERS STREAMS EVENTS]   default 1000 10 100000
 *     EVENTS events are written (txns of 128 puts), then WATCHERS watchers on one prefix,
 *     spread over STREAMS streams of one connection, start from the first of them. Reports the
 *     time until every watcher has received every event, the server's CPU time meanwhile, and
 *     the latency of puts issued every 10 ms during the catch-up (writes must not stall).
 *   watchbench live [WATCHERS STREAMS RATE SECONDS]  default 1000 10 100 10
 *     WATCHERS watchers on one prefix; a writer puts RATE/s for SECONDS s (value = send time).
 *     Reports delivery latency (first event of each response) and the server's CPU time.
 *   watchbench idle [WATCHERS STREAMS CLIENTS SECONDS ROUNDS]  default 100000 10 8 5 3
 *     CLIENTS clients put (closed loop, own connections) for SECONDS s, alternately without
 *     watchers and with WATCHERS idle single-key watchers (STREAMS streams, keys nobody
 *     writes; closed after each phase), ROUNDS phases with and ROUNDS + 1 without; reports
 *     median puts/s, their ratio and the server's CPU per put. Idle watchers must cost the
 *     writes nothing.
 *   watchbench stalled [EVENTS]                     default 1000000
 *     One watcher stops reading its socket while EVENTS events are written. Reports the
 *     server's anonymous memory growth (max over the run), then reads again and reports the
 *     time to receive everything (or the compacted response), checking order and count.
 *
 * Each mode runs against kvd ($KV_BUILD_DIR/server/kvd) and etcd (/usr/bin/etcd), one after
 * the other, started by the integration harness. Run: bench/watch/run.sh.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "grpc_raw.h"
#include "harness.h"
#include "rpc.pb-c.h"

#define TXN_OPS 128
#define VALUE_LEN 100

/* One connection of watch streams (tests/lib's HTTP/2 client, grpc_raw.h): each stream sends
 * its create requests once (borrowed from body[i] until sent) and is read with
 * kv_it_grpc_stream_take after every pump. */
typedef struct wconn {
    kv_it_grpc *g;
    kv_it_grpc_stream **st;
    uint8_t **body; /* create requests per stream, sent once */
    size_t *body_len;
    size_t n_st;
    int64_t *count; /* events per watcher (index: stream * per + watch id) */
    size_t per;     /* watchers per stream */
    int64_t *next_rev;
    int compacted, bad, closed;
    int64_t created; /* created responses (watch_id >= 0, not canceled) */
    int64_t total;
    double *lat; /* live mode: delivery latency samples (ms) */
    size_t n_lat, cap_lat;
} wconn;

/* A message of stream si of c (kv_it_grpc_stream_take's callback argument). */
typedef struct wmsg_ctx {
    wconn *c;
    size_t si;
} wmsg_ctx;

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static void handle(wconn *c, size_t si, const uint8_t *m, size_t ml)
{
    Etcdserverpb__WatchResponse *r = etcdserverpb__watch_response__unpack(NULL, ml, m);
    if (r == NULL) {
        c->bad = 1;
        return;
    }
    if (r->compact_revision)
        c->compacted = 1;
    if (r->created && !r->canceled)
        c->created++;
    if (r->n_events && r->watch_id >= 0 && (size_t)r->watch_id < c->per) {
        size_t w = si * c->per + (size_t)r->watch_id;
        for (size_t i = 0; i < r->n_events; i++) {
            int64_t rev = r->events[i]->kv->mod_revision;
            if (rev < c->next_rev[w])
                c->bad = 1;
            c->next_rev[w] = rev;
        }
        c->count[w] += (int64_t)r->n_events;
        if (c->lat && c->n_lat < c->cap_lat && r->events[0]->kv->value.len > 0 &&
            r->events[0]->kv->value.len < 32) {
            char tb[32];
            memcpy(tb, r->events[0]->kv->value.data, r->events[0]->kv->value.len);
            tb[r->events[0]->kv->value.len] = 0;
            c->lat[c->n_lat++] = now_ms() - atof(tb);
        }
        c->total += (int64_t)r->n_events;
    }
    etcdserverpb__watch_response__free_unpacked(r, NULL);
}

static void on_msg(void *arg, const uint8_t *m, size_t ml)
{
    wmsg_ctx *x = arg;
    handle(x->c, x->si, m, ml);
}

/* Handles every complete response received on c's streams; a stream that ended (or a closed
 * connection) marks c closed. */
static void conn_take(wconn *c)
{
    for (size_t i = 0; i < c->n_st; i++) {
        wmsg_ctx x = {c, i};
        if (kv_it_grpc_stream_take(c->st[i], on_msg, &x) < 0)
            c->bad = 1;
        if (c->st[i]->closed)
            c->closed = 1;
    }
    if (kv_it_grpc_conn_closed(c->g))
        c->closed = 1;
}

/* A watcher on the prefix, or (single) on the key prefix itself, appended to body. */
static int append_create(uint8_t **body, size_t *body_len, const char *prefix, int64_t start,
                         int single)
{
    Etcdserverpb__WatchCreateRequest c = ETCDSERVERPB__WATCH_CREATE_REQUEST__INIT;
    char end[64];
    snprintf(end, sizeof(end), "%s", prefix);
    end[strlen(end) - 1]++;
    c.key = (ProtobufCBinaryData){strlen(prefix), (uint8_t *)prefix};
    if (!single)
        c.range_end = (ProtobufCBinaryData){strlen(end), (uint8_t *)end};
    c.start_revision = start;
    Etcdserverpb__WatchRequest r = ETCDSERVERPB__WATCH_REQUEST__INIT;
    r.request_union_case = ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_CREATE_REQUEST;
    r.create_request = &c;
    size_t ml = etcdserverpb__watch_request__get_packed_size(&r);
    uint8_t *b = realloc(*body, *body_len + 5 + ml);
    if (!b)
        return -ENOMEM;
    *body = b;
    uint8_t *d = b + *body_len;
    d[0] = 0;
    d[1] = (uint8_t)(ml >> 24);
    d[2] = (uint8_t)(ml >> 16);
    d[3] = (uint8_t)(ml >> 8);
    d[4] = (uint8_t)ml;
    etcdserverpb__watch_request__pack(&r, d + 5);
    *body_len += 5 + ml;
    return 0;
}

/* Closes the connection and frees its buffers (not lat, the caller's); safe twice. */
static void conn_free(wconn *c)
{
    kv_it_grpc_close(c->g); /* frees the streams */
    for (size_t i = 0; c->body && i < c->n_st; i++)
        free(c->body[i]);
    free(c->body);
    free(c->body_len);
    free(c->st);
    free(c->count);
    free(c->next_rev);
    c->g = NULL;
    c->body = NULL;
    c->body_len = NULL;
    c->st = NULL;
    c->count = c->next_rev = NULL;
    c->n_st = 0;
}

/* streams streams of per watchers each on one connection (1 MiB stream, 16 MiB connection
 * windows); prefix NULL: per single-key watchers per stream on "idle/<stream>/<i>" (nobody
 * writes). The create requests are written as the pumps go (flow control). */
static int conn_open(wconn *c, uint16_t port, size_t streams, size_t per, const char *prefix,
                     int64_t start)
{
    const kv_it_grpc_opts o = {.set_window = 1, .window = 1u << 20, .conn_window = 16u << 20};
    memset(c, 0, sizeof(*c));
    int rc = kv_it_grpc_open_opts(&c->g, "127.0.0.1", port, 5000, &o);
    if (rc)
        return rc;
    c->n_st = streams;
    c->per = per;
    c->st = calloc(streams, sizeof(*c->st));
    c->body = calloc(streams, sizeof(*c->body));
    c->body_len = calloc(streams, sizeof(*c->body_len));
    c->count = calloc(streams * per, sizeof(int64_t));
    c->next_rev = calloc(streams * per, sizeof(int64_t));
    rc = -ENOMEM;
    if (!c->st || !c->body || !c->body_len || !c->count || !c->next_rev)
        goto fail;
    for (size_t i = 0; i < streams; i++) {
        for (size_t w = 0; w < per; w++) {
            char k[48];
            if (prefix == NULL)
                snprintf(k, sizeof(k), "idle/%zu/%zu", i, w);
            if ((rc = append_create(&c->body[i], &c->body_len[i], prefix ? prefix : k, start,
                                    prefix == NULL)))
                goto fail;
        }
        rc = -EPROTO;
        if (!(c->st[i] = kv_it_grpc_stream_start(c->g, "/etcdserverpb.Watch/Watch", NULL)))
            goto fail;
        if ((rc = kv_it_grpc_send_ref(c->st[i], c->body[i], c->body_len[i], 0)))
            goto fail;
    }
    if ((rc = kv_it_grpc_io(c->g, 0)))
        goto fail;
    return 0;
fail:
    fprintf(stderr, "watchbench: watch connection to port %u: %s\n", port, strerror(-rc));
    conn_free(c);
    c->closed = 1;
    return rc;
}

/* Reads for up to ms or until every watcher has `want` events (or a compaction). */
static void conn_pump(wconn *c, int ms, int64_t want)
{
    uint64_t end = kv_it_now_ms() + (uint64_t)ms;
    while (c->g && kv_it_now_ms() < end && !c->closed && !c->compacted) {
        if (want >= 0 && c->total >= want * (int64_t)(c->n_st * c->per))
            break;
        int rc = kv_it_grpc_pump(c->g, 50);
        conn_take(c);
        if (rc)
            c->closed = 1;
    }
}

static int64_t write_txns(kv_it_grpc *g, int64_t events, const char *prefix)
{
    char val[VALUE_LEN];
    memset(val, 'v', sizeof(val));
    int64_t rev = 0;
    for (int64_t t = 0; t * TXN_OPS < events; t++) {
        Etcdserverpb__PutRequest puts[TXN_OPS];
        Etcdserverpb__RequestOp ops[TXN_OPS], *pops[TXN_OPS];
        char keys[TXN_OPS][48];
        for (int i = 0; i < TXN_OPS; i++) {
            snprintf(keys[i], sizeof(keys[i]), "%s%lld/%d", prefix, (long long)t, i);
            etcdserverpb__put_request__init(&puts[i]);
            puts[i].key = (ProtobufCBinaryData){strlen(keys[i]), (uint8_t *)keys[i]};
            puts[i].value = (ProtobufCBinaryData){sizeof(val), (uint8_t *)val};
            etcdserverpb__request_op__init(&ops[i]);
            ops[i].request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT;
            ops[i].request_put = &puts[i];
            pops[i] = &ops[i];
        }
        Etcdserverpb__TxnRequest x = ETCDSERVERPB__TXN_REQUEST__INIT;
        x.success = pops;
        x.n_success = TXN_OPS;
        size_t len = etcdserverpb__txn_request__get_packed_size(&x);
        uint8_t *buf = malloc(len), *resp = NULL;
        etcdserverpb__txn_request__pack(&x, buf);
        size_t rlen = 0;
        int st;
        char msg[128];
        int rc = kv_it_grpc_call(g, "/etcdserverpb.KV/Txn", buf, len, &resp, &rlen, 30000, &st, msg,
                                 sizeof(msg));
        free(buf);
        if (rc == 0) {
            Etcdserverpb__TxnResponse *r = etcdserverpb__txn_response__unpack(NULL, rlen, resp);
            if (r) {
                rev = r->header->revision;
                etcdserverpb__txn_response__free_unpacked(r, NULL);
            }
        } else {
            fprintf(stderr, "txn failed: %d %s\n", rc, msg);
        }
        free(resp);
    }
    return rev;
}

static int64_t rss_anon(pid_t pid)
{
    char p[64], line[256];
    snprintf(p, sizeof(p), "/proc/%d/status", (int)pid);
    FILE *f = fopen(p, "r");
    long long kb = -1;
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "RssAnon: %lld kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return kb * 1024;
}

/* ---- put latency probe (its own thread and connection) ---- */

typedef struct probe {
    uint16_t port;
    volatile int stop;
    double lat[100000];
    size_t n;
    double rlat[100000]; /* Range (served on the loop, no write path) */
    size_t rn;
} probe;

static void *probe_main(void *arg)
{
    probe *p = arg;
    kv_it_grpc *g;
    if (kv_it_grpc_open(&g, "127.0.0.1", p->port, 5000) != 0)
        return NULL;
    while (!p->stop && p->n < 100000) {
        Etcdserverpb__PutRequest r = ETCDSERVERPB__PUT_REQUEST__INIT;
        r.key = (ProtobufCBinaryData){5, (uint8_t *)"probe"};
        uint8_t buf[64], *resp = NULL;
        size_t len = etcdserverpb__put_request__pack(&r, buf), rlen;
        int st;
        char msg[64];
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        kv_it_grpc_call(g, "/etcdserverpb.KV/Put", buf, len, &resp, &rlen, 30000, &st, msg,
                        sizeof(msg));
        clock_gettime(CLOCK_MONOTONIC, &b);
        free(resp);
        p->lat[p->n++] =
            (double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) / 1e6;
        Etcdserverpb__RangeRequest rr = ETCDSERVERPB__RANGE_REQUEST__INIT;
        rr.key = r.key;
        len = etcdserverpb__range_request__pack(&rr, buf);
        clock_gettime(CLOCK_MONOTONIC, &a);
        kv_it_grpc_call(g, "/etcdserverpb.KV/Range", buf, len, &resp, &rlen, 30000, &st, msg,
                        sizeof(msg));
        clock_gettime(CLOCK_MONOTONIC, &b);
        free(resp);
        p->rlat[p->rn++] =
            (double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) / 1e6;
        usleep(10000);
    }
    kv_it_grpc_close(g);
    return NULL;
}

static int cmpd(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void run_catchup(kv_it_kind kind, size_t watchers, size_t streams, int64_t events)
{
    kv_it_server s;
    if (kv_it_server_init(&s, kind, NULL) || kv_it_server_start(&s, 30000)) {
        fprintf(stderr, "cannot start %s\n", kv_it_kind_name(kind));
        return;
    }
    kv_it_grpc *g;
    kv_it_grpc_open(&g, "127.0.0.1", s.client_port, 5000);
    int64_t last = write_txns(g, events, "w/");
    int64_t first = last - (events / TXN_OPS) + 1;
    probe *pr = calloc(1, sizeof(*pr));
    pr->port = s.client_port;
    pthread_t th;
    /* baseline: the same probe for 2 s without watchers */
    pthread_create(&th, NULL, probe_main, pr);
    usleep(2000000);
    pr->stop = 1;
    pthread_join(th, NULL);
    qsort(pr->lat, pr->n, sizeof(double), cmpd);
    qsort(pr->rlat, pr->rn, sizeof(double), cmpd);
    printf("baseline %-4s (no watchers): puts n=%zu p50=%.2f ms p99=%.2f ms; ranges p50=%.2f ms\n",
           kv_it_kind_name(kind), pr->n, pr->n ? pr->lat[pr->n / 2] : 0,
           pr->n ? pr->lat[pr->n * 99 / 100] : 0, pr->rn ? pr->rlat[pr->rn / 2] : 0);
    memset(pr, 0, sizeof(*pr));
    pr->port = s.client_port;
    pthread_create(&th, NULL, probe_main, pr);
    double cpu0 = 0, cpu1 = 0;
    kv_it_proc_cpu(s.pid, &cpu0);
    uint64_t t0 = kv_it_now_ms();
    wconn c;
    conn_open(&c, s.client_port, streams, watchers / streams, "w/", first);
    conn_pump(&c, 600000, (events / TXN_OPS) * TXN_OPS);
    uint64_t ms = kv_it_now_ms() - t0;
    kv_it_proc_cpu(s.pid, &cpu1);
    pr->stop = 1;
    pthread_join(th, NULL);
    qsort(pr->lat, pr->n, sizeof(double), cmpd);
    qsort(pr->rlat, pr->rn, sizeof(double), cmpd);
    printf("catchup %-4s watchers=%zu streams=%zu events=%lld: all received %lld/%lld events in "
           "%llu ms, server cpu %.2f s, %s; puts meanwhile n=%zu p50=%.2f ms p99=%.2f ms max=%.2f "
           "ms; ranges p50=%.2f ms p99=%.2f ms\n",
           kv_it_kind_name(kind), watchers, streams, (long long)events, (long long)c.total,
           (long long)(events / TXN_OPS * TXN_OPS * (int64_t)watchers), (unsigned long long)ms,
           cpu1 - cpu0, c.bad ? "ORDER ERROR" : "in order", pr->n, pr->n ? pr->lat[pr->n / 2] : 0,
           pr->n ? pr->lat[pr->n * 99 / 100] : 0, pr->n ? pr->lat[pr->n - 1] : 0,
           pr->rn ? pr->rlat[pr->rn / 2] : 0, pr->rn ? pr->rlat[pr->rn * 99 / 100] : 0);
    fflush(stdout);
    free(pr);
    conn_free(&c);
    kv_it_grpc_close(g);
    kv_it_server_destroy(&s);
}

typedef struct writer {
    uint16_t port;
    int rate, seconds;
    int64_t done;
} writer;

static void *writer_main(void *arg)
{
    writer *wr = arg;
    kv_it_grpc *g;
    if (kv_it_grpc_open(&g, "127.0.0.1", wr->port, 5000) != 0)
        return NULL;
    double start = now_ms(), period = 1000.0 / wr->rate;
    for (int64_t i = 0; i < (int64_t)wr->rate * wr->seconds; i++) {
        double due = start + (double)i * period;
        double d = due - now_ms();
        if (d > 0)
            usleep((useconds_t)(d * 1000));
        char key[32], val[32];
        snprintf(key, sizeof(key), "live/%lld", (long long)(i % 1000));
        snprintf(val, sizeof(val), "%.3f", now_ms());
        Etcdserverpb__PutRequest r = ETCDSERVERPB__PUT_REQUEST__INIT;
        r.key = (ProtobufCBinaryData){strlen(key), (uint8_t *)key};
        r.value = (ProtobufCBinaryData){strlen(val), (uint8_t *)val};
        uint8_t buf[128], *resp = NULL;
        size_t len = etcdserverpb__put_request__pack(&r, buf), rlen;
        int st;
        char msg[64];
        kv_it_grpc_call(g, "/etcdserverpb.KV/Put", buf, len, &resp, &rlen, 30000, &st, msg,
                        sizeof(msg));
        free(resp);
        wr->done++;
    }
    kv_it_grpc_close(g);
    return NULL;
}

/* live: WATCHERS watchers on one prefix over STREAMS streams; a writer puts RATE/s for SECONDS s
 * (value = send time); reports delivery latency (first event of each response) and server CPU. */
static void run_live(kv_it_kind kind, size_t watchers, size_t streams, int rate, int seconds)
{
    kv_it_server s;
    if (kv_it_server_init(&s, kind, NULL) || kv_it_server_start(&s, 30000)) {
        fprintf(stderr, "cannot start %s\n", kv_it_kind_name(kind));
        return;
    }
    wconn c;
    conn_open(&c, s.client_port, streams, watchers / streams, "live/", 0);
    conn_pump(&c, 3000, -1); /* creates */
    c.cap_lat = 2000000;
    c.lat = malloc(c.cap_lat * sizeof(double));
    writer wr = {s.client_port, rate, seconds, 0};
    double cpu0 = 0, cpu1 = 0;
    kv_it_proc_cpu(s.pid, &cpu0);
    pthread_t th;
    pthread_create(&th, NULL, writer_main, &wr);
    int64_t want = (int64_t)rate * seconds;
    conn_pump(&c, seconds * 1000 + 30000, want);
    pthread_join(th, NULL);
    kv_it_proc_cpu(s.pid, &cpu1);
    qsort(c.lat, c.n_lat, sizeof(double), cmpd);
    printf("live    %-4s watchers=%zu streams=%zu puts=%d/s x %d s: received %lld/%lld events, "
           "delivery p50=%.2f ms p99=%.2f ms (n=%zu), server cpu %.2f s%s\n",
           kv_it_kind_name(kind), watchers, streams, rate, seconds, (long long)c.total,
           (long long)(want * (int64_t)watchers), c.n_lat ? c.lat[c.n_lat / 2] : 0,
           c.n_lat ? c.lat[c.n_lat * 99 / 100] : 0, c.n_lat, cpu1 - cpu0,
           c.bad ? ", ORDER ERROR" : "");
    fflush(stdout);
    free(c.lat);
    c.lat = NULL;
    conn_free(&c);
    kv_it_server_destroy(&s);
}

/* ---- idle: closed-loop puts by several clients, with and without idle watchers ---- */

typedef struct putter {
    uint16_t port;
    int id;
    volatile int *go; /* 1 measure, 2 stop */
    int64_t done;     /* puts completed while *go == 1 */
    int errors;
} putter;

static void *putter_main(void *arg)
{
    putter *p = arg;
    kv_it_grpc *g;
    if (kv_it_grpc_open(&g, "127.0.0.1", p->port, 5000) != 0) {
        p->errors++;
        return NULL;
    }
    char val[64];
    memset(val, 'v', sizeof(val));
    for (int64_t i = 0; *p->go != 2; i++) {
        char key[48];
        snprintf(key, sizeof(key), "put/%d/%lld", p->id, (long long)(i % 1000));
        Etcdserverpb__PutRequest r = ETCDSERVERPB__PUT_REQUEST__INIT;
        r.key = (ProtobufCBinaryData){strlen(key), (uint8_t *)key};
        r.value = (ProtobufCBinaryData){sizeof(val), (uint8_t *)val};
        uint8_t buf[160], *resp = NULL;
        size_t len = etcdserverpb__put_request__pack(&r, buf), rlen;
        int st;
        char msg[64];
        int go = *p->go;
        int rc = kv_it_grpc_call(g, "/etcdserverpb.KV/Put", buf, len, &resp, &rlen, 30000, &st, msg,
                                 sizeof(msg));
        free(resp);
        if (rc != 0 || st != 0) {
            p->errors++;
            continue;
        }
        if (go == 1 && *p->go == 1)
            p->done++;
    }
    kv_it_grpc_close(g);
    return NULL;
}

/* clients putters for 1 s warm-up + seconds measured; returns puts/s; *cpu: the server's CPU
 * seconds over the measured part. */
static double put_phase(uint16_t port, pid_t pid, int clients, int seconds, wconn *pump,
                        int *errors, double *cpu)
{
    volatile int go = 0;
    putter *ps = calloc((size_t)clients, sizeof(*ps));
    pthread_t *th = calloc((size_t)clients, sizeof(*th));
    for (int i = 0; i < clients; i++) {
        ps[i] = (putter){port, i, &go, 0, 0};
        pthread_create(&th[i], NULL, putter_main, &ps[i]);
    }
    /* the watchers' connection is read meanwhile (nothing should arrive) */
    if (pump)
        conn_pump(pump, 1000, -1);
    else
        usleep(1000000);
    double t0 = now_ms(), c0 = 0, c1 = 0;
    kv_it_proc_cpu(pid, &c0);
    go = 1;
    if (pump)
        conn_pump(pump, seconds * 1000, -1);
    else
        usleep((useconds_t)seconds * 1000000);
    go = 2;
    double ms = now_ms() - t0;
    kv_it_proc_cpu(pid, &c1);
    *cpu = c1 - c0;
    int64_t done = 0;
    for (int i = 0; i < clients; i++) {
        pthread_join(th[i], NULL);
        done += ps[i].done;
        *errors += ps[i].errors;
    }
    free(ps);
    free(th);
    return (double)done * 1000.0 / ms;
}

static double median(double *v, size_t n)
{
    qsort(v, n, sizeof(double), cmpd);
    return n ? (n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2) : 0;
}

/* Alternates phases without and with the idle watchers (rounds with, rounds + 1 without,
 * after one unmeasured phase that creates the keys); medians. The disk and the machine drift
 * during a run: alternating keeps that out of the ratio. */
static void run_idle(kv_it_kind kind, size_t watchers, size_t streams, int clients, int seconds,
                     int rounds)
{
    kv_it_server s;
    if (kv_it_server_init(&s, kind, NULL) || kv_it_server_start(&s, 30000)) {
        fprintf(stderr, "cannot start %s\n", kv_it_kind_name(kind));
        return;
    }
    if (rounds < 1)
        rounds = 1;
    if (rounds > 15)
        rounds = 15;
    int errors = 0;
    double wo[16], wi[16], cwo[16], cwi[16], cpu;
    size_t nwo = 0, nwi = 0;
    int64_t created = -1, got = 0;
    uint64_t create_ms = 0;
    char list[512] = "";
    size_t ll = 0;
    put_phase(s.client_port, s.pid, clients, seconds, NULL, &errors, &cpu); /* creates the keys */
    for (int r = 0; r <= rounds; r++) {
        wo[nwo] = put_phase(s.client_port, s.pid, clients, seconds, NULL, &errors, &cpu);
        cwo[nwo] = wo[nwo] > 0 ? cpu * 1e6 / (wo[nwo] * seconds) : 0;
        ll += (size_t)snprintf(list + ll, sizeof(list) - ll, "%s%.0f", r ? " " : "", wo[nwo]);
        nwo++;
        if (r == rounds)
            break;
        wconn c;
        uint64_t t0 = kv_it_now_ms();
        conn_open(&c, s.client_port, streams, watchers / streams, NULL, 0);
        while (c.created < (int64_t)(watchers / streams * streams) && !c.closed &&
               kv_it_now_ms() - t0 < 300000)
            conn_pump(&c, 200, -1);
        create_ms = kv_it_now_ms() - t0;
        if (created < 0 || c.created < created)
            created = c.created;
        wi[nwi] = put_phase(s.client_port, s.pid, clients, seconds, &c, &errors, &cpu);
        cwi[nwi] = wi[nwi] > 0 ? cpu * 1e6 / (wi[nwi] * seconds) : 0;
        ll += (size_t)snprintf(list + ll, sizeof(list) - ll, " [%.0f]", wi[nwi]);
        nwi++;
        got += c.total;
        conn_free(&c);
        usleep(500000); /* the server drops the watchers */
    }
    double mo = median(wo, nwo), mi = median(wi, nwi);
    printf("idle    %-4s clients=%d %d s x %d rounds: puts/s without watchers %.0f, with %lld idle "
           "single-key watchers (%zu streams, created in %llu ms) %.0f: ratio %.2f; server CPU "
           "per put %.0f / %.0f us (medians; phases in order, [with]: %s); events received %lld, "
           "errors %d\n",
           kv_it_kind_name(kind), clients, seconds, rounds, mo, (long long)created, streams,
           (unsigned long long)create_ms, mi, mo > 0 ? mi / mo : 0, median(cwo, nwo),
           median(cwi, nwi), list, (long long)got, errors);
    fflush(stdout);
    kv_it_server_destroy(&s);
}

static void run_stalled(kv_it_kind kind, int64_t events)
{
    kv_it_server s;
    if (kv_it_server_init(&s, kind, NULL) || kv_it_server_start(&s, 30000)) {
        fprintf(stderr, "cannot start %s\n", kv_it_kind_name(kind));
        return;
    }
    kv_it_grpc *g;
    kv_it_grpc_open(&g, "127.0.0.1", s.client_port, 5000);
    wconn c;
    conn_open(&c, s.client_port, 1, 1, "s/", 0);
    conn_pump(&c, 1000, -1); /* created */
    int64_t base = rss_anon(s.pid), peak = base;
    uint64_t t0 = kv_it_now_ms();
    for (int64_t done = 0; done < events; done += 128 * 100) {
        write_txns(g, 128 * 100, "s/");
        int64_t r = rss_anon(s.pid);
        if (r > peak)
            peak = r;
    }
    uint64_t wms = kv_it_now_ms() - t0;
    t0 = kv_it_now_ms();
    int64_t want = (events + 128 * 100 - 1) / (128 * 100) * 128 * 100;
    conn_pump(&c, 600000, want);
    printf("stalled %-4s events=%lld: writes took %llu ms, server RssAnon %lld KiB -> peak %lld "
           "KiB (+%lld KiB); then received %lld events in %llu ms%s%s\n",
           kv_it_kind_name(kind), (long long)want, (unsigned long long)wms,
           (long long)(base / 1024), (long long)(peak / 1024), (long long)((peak - base) / 1024),
           (long long)c.total, (unsigned long long)(kv_it_now_ms() - t0),
           c.compacted ? ", compacted response" : "", c.bad ? ", ORDER ERROR" : "");
    fflush(stdout);
    conn_free(&c);
    kv_it_grpc_close(g);
    kv_it_server_destroy(&s);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "catchup";
    const char *only = getenv("WB_SERVER"); /* kvd | etcd | unset = both */
    kv_it_kind kinds[] = {KV_IT_KVD, KV_IT_ETCD};
    for (int k = 0; k < 2; k++) {
        if (only && strcmp(only, kv_it_kind_name(kinds[k])) != 0)
            continue;
        if (strcmp(mode, "live") == 0)
            run_live(kinds[k], argc > 2 ? (size_t)atoll(argv[2]) : 1000,
                     argc > 3 ? (size_t)atoll(argv[3]) : 10, argc > 4 ? atoi(argv[4]) : 100,
                     argc > 5 ? atoi(argv[5]) : 10);
        else if (strcmp(mode, "idle") == 0)
            run_idle(kinds[k], argc > 2 ? (size_t)atoll(argv[2]) : 100000,
                     argc > 3 ? (size_t)atoll(argv[3]) : 10, argc > 4 ? atoi(argv[4]) : 8,
                     argc > 5 ? atoi(argv[5]) : 5, argc > 6 ? atoi(argv[6]) : 3);
        else if (strcmp(mode, "stalled") == 0)
            run_stalled(kinds[k], argc > 2 ? atoll(argv[2]) : 1000000);
        else
            run_catchup(kinds[k], argc > 2 ? (size_t)atoll(argv[2]) : 1000,
                        argc > 3 ? (size_t)atoll(argv[3]) : 10, argc > 4 ? atoll(argv[4]) : 100000);
    }
    return 0;
}
