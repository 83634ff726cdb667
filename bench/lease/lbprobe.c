/* lbprobe: see lbprobe.h. */
#include "lbprobe.h"

#include "grpc_raw.h"
#include "harness.h"
#include "rpc.pb-c.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void sleep_ms(uint64_t ms)
{
    struct timespec ts = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0)
        ;
}

static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static int is_peer(const uint16_t *ports, int n, unsigned p)
{
    for (int i = 0; i < n; i++)
        if (ports[i] == p)
            return 1;
    return 0;
}

static void remember(lb_peer_stats *st, uint32_t key)
{
    for (int i = 0; i < st->n_distinct; i++)
        if (st->seen[i] == key)
            return;
    if (st->n_distinct == LB_PROBE_MAX_CONNS) {
        st->overflow = 1;
        return;
    }
    st->seen[st->n_distinct++] = key;
}

/* /proc/net/tcp lines: "sl local rem st ..." with local/rem as HEXADDR:HEXPORT and st hex
 * (01 ESTABLISHED, 06 TIME_WAIT). */
static void scan(const char *path, const uint16_t *ports, int n, lb_peer_stats *st, int *est,
                 int *tw)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof(line), f)) {
        char local[64], rem[64];
        unsigned state;
        if (sscanf(line, " %*[^:]: %63s %63s %x", local, rem, &state) != 3)
            continue;
        const char *lc = strrchr(local, ':'), *rc = strrchr(rem, ':');
        if (!lc || !rc)
            continue;
        unsigned lp = (unsigned)strtoul(lc + 1, NULL, 16), rp = (unsigned)strtoul(rc + 1, NULL, 16);
        if (state == 0x01 && is_peer(ports, n, lp)) {
            (*est)++;
            remember(st, (uint32_t)lp << 16 | rp);
        } else if (state == 0x06 && (is_peer(ports, n, lp) || is_peer(ports, n, rp))) {
            (*tw)++;
        }
    }
    fclose(f);
}

int lb_peer_sample(const uint16_t *ports, int n, lb_peer_stats *st)
{
    int est = 0, tw = 0;
    scan("/proc/net/tcp", ports, n, st, &est, &tw);
    scan("/proc/net/tcp6", ports, n, st, &est, &tw);
    if (st->samples == 0)
        st->n_first = st->n_distinct;
    st->samples++;
    st->est_last = est;
    if (est > st->est_max)
        st->est_max = est;
    if (tw > st->tw_max)
        st->tw_max = tw;
    return 0;
}

static void note_error(lb_probe *p, const char *what, int code)
{
    if (!p->errors++)
        snprintf(p->first_error, sizeof(p->first_error), "%s (%d)", what, code);
}

static void record(lb_probe *p, double ms)
{
    if (p->n_lat == p->cap_lat) {
        size_t cap = p->cap_lat ? p->cap_lat * 2 : 4096;
        double *n = realloc(p->lat_ms, cap * sizeof(*n));
        if (!n)
            return;
        p->lat_ms = n;
        p->cap_lat = cap;
    }
    p->lat_ms[p->n_lat++] = ms;
}

static void *probe_main(void *arg)
{
    lb_probe *p = arg;
    kv_it_grpc *g = NULL;
    uint8_t req[64];
    size_t req_len = 0;
    if (p->port) {
        Etcdserverpb__PutRequest put = ETCDSERVERPB__PUT_REQUEST__INIT;
        put.key.data = (uint8_t *)"lbprobe";
        put.key.len = 7;
        put.value.data = (uint8_t *)"0123456789abcdef";
        put.value.len = 16;
        req_len = etcdserverpb__put_request__pack(&put, req);
    }
    uint64_t next = now_us(), next_peer = next;
    while (!atomic_load(&p->stop)) {
        uint64_t t = now_us();
        if (p->n_peer && t >= next_peer) {
            lb_peer_sample(p->peer_ports, p->n_peer, &p->peers);
            next_peer = t + 1000000u;
        }
        if (!p->port) {
            sleep_ms(50);
            continue;
        }
        if (t < next) {
            sleep_ms((next - t + 999) / 1000);
            continue;
        }
        next = (next + p->interval_ms * 1000u > t) ? next + p->interval_ms * 1000u : t;
        if (!g) {
            int rc = kv_it_grpc_open(&g, "127.0.0.1", p->port, 2000);
            if (rc) {
                note_error(p, "connect", rc);
                g = NULL;
                sleep_ms(100);
                continue;
            }
        }
        uint8_t *resp = NULL;
        size_t rl = 0;
        int status = -1;
        char msg[128] = "";
        uint64_t t0 = now_us();
        int rc = kv_it_grpc_call(g, "/etcdserverpb.KV/Put", req, req_len, &resp, &rl, 5000, &status,
                                 msg, sizeof(msg));
        uint64_t t1 = now_us();
        free(resp);
        if (rc < 0) { /* transport failure: the connection is unusable */
            note_error(p, "call", rc);
            kv_it_grpc_close(g);
            g = NULL;
            continue;
        }
        if (rc || status != 0) {
            note_error(p, msg, status);
            continue;
        }
        record(p, (double)(t1 - t0) / 1000.0);
    }
    kv_it_grpc_close(g);
    return NULL;
}

int lb_probe_start(lb_probe *p)
{
    atomic_store(&p->stop, 0);
    if (!p->interval_ms)
        p->interval_ms = 10;
    int rc = pthread_create(&p->th, NULL, probe_main, p);
    if (rc)
        return -rc;
    p->running = 1;
    return 0;
}

void lb_probe_stop(lb_probe *p)
{
    if (!p->running)
        return;
    atomic_store(&p->stop, 1);
    pthread_join(p->th, NULL);
    p->running = 0;
}

void lb_probe_free(lb_probe *p)
{
    lb_probe_stop(p);
    free(p->lat_ms);
    p->lat_ms = NULL;
    p->n_lat = p->cap_lat = 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double lb_probe_pct(lb_probe *p, double q)
{
    if (!p->n_lat)
        return -1;
    qsort(p->lat_ms, p->n_lat, sizeof(double), cmp_double);
    size_t i = (size_t)(q * (double)(p->n_lat - 1) + 0.5);
    return p->lat_ms[i < p->n_lat ? i : p->n_lat - 1];
}
