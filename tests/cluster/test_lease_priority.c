/*
 * cluster_lease_priority: renewals are served ahead of bulk writes (docs/ARCHITECTURE.md, Leases:
 * "Renewals ahead of bulk writes"). A 3-member kvd cluster with small write bounds is flooded with
 * large Puts through the leader and through a follower until writes are shed with "etcdserver: too
 * many requests", while 200 leases with a 3 s TTL are kept alive through all three members (one
 * LeaseKeepAlive stream per member, renewing every TTL/3 as clients do) and read back with
 * LeaseTimeToLive every 250 ms. Asserted: no lease expires, every renewal and every lease read is
 * answered (none shed, none dropped), and writes were shed (the cluster really was overloaded).
 * Figures (slowest renewal / read per member, priority frames) go to stderr.
 * This is a guard of the property: the renewal path shares no write bound (lessor memory on
 * the leader, own forward queue on followers), so it also held on the code before the peer
 * priority queue; the ordering itself is tested in tests/peer/test_peer_prio.c and
 * tests/grpc/test_conn_saturation.c.
 * Clients: grpc_raw (tests/lib), so every answer and every status is seen.
 */
#include "cl_util.h"
#include "grpc_raw.h"
#include "rpc.pb-c.h"

#include <criterion/criterion.h>

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static kvt_cluster g_c;

static void fini(void)
{
    kvt_cluster_destroy(&g_c);
}

#define LP_LEASES 200
#define LP_TTL 3
#define LP_FLOOD_MS 15000u
#define LP_CLIENTS 7   /* 3 keepalive connections (one per member), 4 writers */
#define LP_INFLIGHT 32 /* pipelined Puts per writer connection */
/* The flood's values. Under ASan+UBSan this test's own client (instrumented too) and three
 * instrumented members share 2 cores: with 256 KiB values the client alone took most of a
 * core and the members got so little CPU that a follower read its renewal stream seconds
 * late (CPU starvation of the whole process, not renewals queued behind writes). 64 KiB
 * values still overload the write path (every run sheds), at a quarter of the bytes. */
#if defined(__SANITIZE_ADDRESS__)
#define LP_VAL (64 * 1024)
#else
#define LP_VAL (256 * 1024)
#endif
#define LP_TTL_PROBE_MS 250
#define LP_MAX_RENEWALS 4096 /* per member: 67 leases x 3 per second x ~20 s */

static double metric(int i, const char *series)
{
    return cl_metric(&g_c, i, series);
}

static double metric_sum(int i, const char *name)
{
    return cl_metric_sum(&g_c, i, name);
}

/* TimeToLive of id through g: remaining TTL (-1: unknown lease). */
static int64_t ttl_of(kv_it_grpc *g, int64_t id)
{
    Etcdserverpb__LeaseTimeToLiveRequest req = ETCDSERVERPB__LEASE_TIME_TO_LIVE_REQUEST__INIT;
    req.id = id;
    uint8_t buf[32];
    size_t len = etcdserverpb__lease_time_to_live_request__pack(&req, buf);
    uint8_t *resp = NULL;
    size_t rlen = 0;
    int status = -1;
    char msg[160] = "";
    int rc = kv_it_grpc_call(g, "/etcdserverpb.Lease/LeaseTimeToLive", buf, len, &resp, &rlen,
                             10000, &status, msg, sizeof(msg));
    cr_assert_eq(rc, 0, "timetolive: rc %d status %d '%s'", rc, status, msg);
    Etcdserverpb__LeaseTimeToLiveResponse *r =
        etcdserverpb__lease_time_to_live_response__unpack(NULL, rlen, resp);
    free(resp);
    cr_assert_not_null(r);
    int64_t ttl = r->ttl;
    etcdserverpb__lease_time_to_live_response__free_unpacked(r, NULL);
    return ttl;
}

/* ---- clients: a keepalive connection per member (one LeaseKeepAlive stream renewing that
 * member's share of the leases every TTL/3, as agents do), and writer connections (a
 * pipeline of large Puts each) ---- */

typedef struct client {
    int member, idx, renew, write;
    atomic_int *stop;
    atomic_int ready; /* 1 once connected, -1 on failure */
    kv_it_grpc *g;
    /* writes */
    long ok, shed, shed_conn, other;
    char other_msg[600];
    /* keepalive */
    kv_it_grpc_stream *ka;
    int64_t ids[LP_LEASES];
    int n;
    long sent, answered, expired, ka_shed, ka_errors, bad;
    uint64_t sent_at[LP_MAX_RENEWALS]; /* answers come in order on one stream */
    uint64_t max_lat_ms;
    char err[600];
    /* lease reads: a LeaseTimeToLive every LP_TTL_PROBE_MS */
    kv_it_grpc_stream *q;
    uint64_t q_at, q_max_ms;
    int q_next;
    long q_sent, q_ok, q_dead, q_shed, q_errors;
    char q_err[600];
} client;

static void ka_open(client *k)
{
    k->ka = kv_it_grpc_stream_start(k->g, "/etcdserverpb.Lease/LeaseKeepAlive", NULL);
    if (!k->ka)
        k->bad++;
}

/* Takes every answer received on k's keepalive stream; an ended stream is counted and
 * reopened. */
static void ka_drain(client *k)
{
    if (!k->ka)
        return;
    uint8_t *msg;
    size_t len;
    while (kv_it_grpc_stream_next(k->ka, &msg, &len) == 1) {
        Etcdserverpb__LeaseKeepAliveResponse *r =
            etcdserverpb__lease_keep_alive_response__unpack(NULL, len, msg);
        free(msg);
        if (!r) {
            k->bad++;
            continue;
        }
        if (k->answered < k->sent && k->answered < LP_MAX_RENEWALS) {
            uint64_t lat = kvt_now_ms() - k->sent_at[k->answered];
            if (lat > k->max_lat_ms)
                k->max_lat_ms = lat;
        }
        k->answered++;
        if (r->ttl <= 0)
            k->expired++;
        etcdserverpb__lease_keep_alive_response__free_unpacked(r, NULL);
    }
    if (k->ka->closed) {
        if (k->ka->grpc_status == 8)
            k->ka_shed++;
        else
            k->ka_errors++;
        snprintf(k->err, sizeof(k->err), "stream ended: %d %u '%s'", k->ka->grpc_status,
                 k->ka->close_code, k->ka->grpc_message);
        /* its unanswered renewals will never be answered: count them as such */
        kv_it_grpc_stream_free(k->ka);
        ka_open(k);
    }
}

static void ka_renew_all(client *k)
{
    if (!k->ka)
        return;
    for (int i = 0; i < k->n; i++) {
        Etcdserverpb__LeaseKeepAliveRequest req = ETCDSERVERPB__LEASE_KEEP_ALIVE_REQUEST__INIT;
        req.id = k->ids[i];
        uint8_t buf[32];
        size_t len = etcdserverpb__lease_keep_alive_request__pack(&req, buf);
        if (kv_it_grpc_send_msg(k->ka, buf, len, 0) != 0) {
            k->bad++;
            continue;
        }
        if (k->sent < LP_MAX_RENEWALS)
            k->sent_at[k->sent] = kvt_now_ms();
        k->sent++;
    }
}

/* One LeaseTimeToLive at a time on k's connection: checks the answer of the last one, starts
 * the next every LP_TTL_PROBE_MS. */
static void ttl_probe(client *k, int start)
{
    if (k->q && k->q->closed) {
        uint64_t lat = kvt_now_ms() - k->q_at;
        if (lat > k->q_max_ms)
            k->q_max_ms = lat;
        uint8_t *msg;
        size_t len;
        if (k->q->grpc_status == 0 && kv_it_grpc_stream_next(k->q, &msg, &len) == 1) {
            Etcdserverpb__LeaseTimeToLiveResponse *r =
                etcdserverpb__lease_time_to_live_response__unpack(NULL, len, msg);
            free(msg);
            if (r && r->ttl > 0)
                k->q_ok++;
            else
                k->q_dead++;
            if (r)
                etcdserverpb__lease_time_to_live_response__free_unpacked(r, NULL);
        } else if (k->q->grpc_status == 8) {
            k->q_shed++;
            snprintf(k->q_err, sizeof(k->q_err), "%d '%s'", k->q->grpc_status, k->q->grpc_message);
        } else {
            k->q_errors++;
            snprintf(k->q_err, sizeof(k->q_err), "%d %u '%s'", k->q->grpc_status, k->q->close_code,
                     k->q->grpc_message);
        }
        kv_it_grpc_stream_free(k->q);
        k->q = NULL;
    }
    if (!start || k->q || k->n == 0 || kvt_now_ms() < k->q_at + LP_TTL_PROBE_MS)
        return;
    Etcdserverpb__LeaseTimeToLiveRequest req = ETCDSERVERPB__LEASE_TIME_TO_LIVE_REQUEST__INIT;
    req.id = k->ids[k->q_next++ % k->n];
    uint8_t buf[32];
    size_t len = etcdserverpb__lease_time_to_live_request__pack(&req, buf);
    k->q = kv_it_grpc_stream_start(k->g, "/etcdserverpb.Lease/LeaseTimeToLive", NULL);
    if (!k->q || kv_it_grpc_send_msg(k->q, buf, len, 1) != 0) {
        k->bad++;
        return;
    }
    k->q_at = kvt_now_ms();
    k->q_sent++;
}

static void put_done(client *w, kv_it_grpc_stream *st)
{
    if (st->grpc_status == 0)
        w->ok++;
    else if (st->grpc_status == 8 && strcmp(st->grpc_message, "etcdserver: too many requests") == 0)
        w->shed++;
    else if (st->grpc_status == 8 || st->close_code == 7 /* REFUSED_STREAM */)
        w->shed_conn++; /* the connection's receive budget (--max-recv-buffer-bytes) */
    else {
        w->other++;
        snprintf(w->other_msg, sizeof(w->other_msg), "%d %u '%s'", st->grpc_status, st->close_code,
                 st->grpc_message);
    }
}

static void *client_run(void *arg)
{
    client *w = arg;
    if (kv_it_grpc_open(&w->g, "127.0.0.1", g_c.m[w->member].client_port, 5000) != 0) {
        atomic_store(&w->ready, -1);
        return NULL;
    }
    if (w->renew)
        ka_open(w);
    atomic_store(&w->ready, 1);
    while (atomic_load(&w->ready) == 1 && !atomic_load(w->stop)) /* leases are granted */
        kvt_sleep_ms(10);
    char *val = malloc(LP_VAL);
    uint8_t *buf = malloc(LP_VAL + 128);
    memset(val, 'v', LP_VAL);
    char key[48];
    Etcdserverpb__PutRequest req = ETCDSERVERPB__PUT_REQUEST__INIT;
    req.value.data = (uint8_t *)val;
    req.value.len = LP_VAL;
    kv_it_grpc_stream *st[LP_INFLIGHT] = {0};
    uint64_t seq = 0, next = kvt_now_ms();
    while (!atomic_load(w->stop) && !kv_it_grpc_conn_closed(w->g)) {
        if (w->renew && kvt_now_ms() >= next) {
            ka_renew_all(w);
            next += LP_TTL * 1000 / 3;
        }
        for (int i = 0; i < LP_INFLIGHT && w->write; i++) {
            if (st[i] && st[i]->closed) {
                put_done(w, st[i]);
                kv_it_grpc_stream_free(st[i]);
                st[i] = NULL;
            }
            if (!st[i]) {
                snprintf(key, sizeof(key), "/flood/%d/%" PRIu64, w->idx, seq++ % 512);
                req.key.data = (uint8_t *)key;
                req.key.len = strlen(key);
                size_t len = etcdserverpb__put_request__pack(&req, buf);
                st[i] = kv_it_grpc_stream_start(w->g, "/etcdserverpb.KV/Put", NULL);
                if (st[i])
                    kv_it_grpc_send_msg(st[i], buf, len, 1);
            }
        }
        if (kv_it_grpc_pump(w->g, 5) != 0)
            break;
        if (w->renew) {
            ka_drain(w);
            ttl_probe(w, 1);
        }
    }
    for (int i = 0; i < LP_INFLIGHT; i++)
        kv_it_grpc_stream_free(st[i]);
    /* Answers still on their way: the flood is over, they arrive promptly. */
    for (uint64_t end = kvt_now_ms() + 5000; w->renew && (w->answered < w->sent || w->q) &&
                                             kvt_now_ms() < end && !kv_it_grpc_conn_closed(w->g);) {
        kv_it_grpc_pump(w->g, 10);
        ka_drain(w);
        ttl_probe(w, 0);
    }
    free(buf);
    free(val);
    return NULL;
}

Test(cluster_lease_priority, renewals_ahead_of_bulk_writes, .fini = fini, .timeout = 240)
{
    static const char *const args[] = {"--max-pending-proposals=16", "--max-forwarded-proposals=8",
                                       NULL};
    kvt_cluster_opts o;
    kvt_cluster_opts_default(&o, 3);
    o.heartbeat_ms = 100;
    o.election_ms = 3000;
    o.kvd_args = args;
    cr_assert_eq(kvt_cluster_init(&g_c, &o), 0);
    int r = kvt_cluster_start(&g_c, 60000);
    if (r)
        kvt_cluster_dump(&g_c);
    cr_assert_eq(r, 0, "cluster start: %d", r);
    int l = kvt_cluster_wait_leader(&g_c, 10000, NULL);
    cr_assert_geq(l, 0);
    int f = cl_other(&g_c, l, -1);
    cr_assert_geq(f, 0);

    atomic_int stop = 0;
    client *cl = calloc(LP_CLIENTS, sizeof(*cl));
    cr_assert_not_null(cl);
    pthread_t th[LP_CLIENTS];
    /* 0..2: one keepalive connection per member; then writers through the leader and a
     * follower. */
    for (int i = 0; i < LP_CLIENTS; i++) {
        cl[i].member = i < 3 ? i : (i % 2 ? l : f);
        cl[i].idx = i;
        cl[i].renew = i < 3;
        cl[i].write = i >= 3;
        cl[i].stop = &stop;
        cr_assert_eq(pthread_create(&th[i], NULL, client_run, &cl[i]), 0);
    }
    for (int i = 0; i < LP_CLIENTS; i++) {
        while (atomic_load(&cl[i].ready) == 0)
            kvt_sleep_ms(10);
        cr_assert_eq(atomic_load(&cl[i].ready), 1, "client %d could not connect", i);
    }
    kv_it_grpc *lg = NULL;
    cr_assert_eq(kv_it_grpc_open(&lg, "127.0.0.1", g_c.m[l].client_port, 5000), 0);
    for (int i = 0; i < LP_LEASES; i++) {
        client *k = &cl[i % 3];
        k->ids[k->n++] = cl_lease_grant(lg, LP_TTL);
    }
    double expired0 = metric(l, "kvd_lease_expired_total");
    for (int i = 0; i < LP_CLIENTS; i++)
        atomic_store(&cl[i].ready, 2); /* go */
    kvt_sleep_ms(LP_FLOOD_MS);
    atomic_store(&stop, 1);
    for (int i = 0; i < LP_CLIENTS; i++)
        pthread_join(th[i], NULL);
    /* Every lease is still alive (asked through the leader), checked first: nobody renews them
     * any more, so the figures below (dozens of /metrics fetches, seconds under ASan) must not
     * run down their 3 s TTL before the question is asked (CI once saw exactly that). */
    int dead = 0;
    for (int m = 0; m < 3; m++)
        for (int i = 0; i < cl[m].n; i++)
            dead += ttl_of(lg, cl[m].ids[i]) <= 0;

    long wok = 0, wshed = 0, wshed_conn = 0, wother = 0;
    for (int i = 0; i < LP_CLIENTS; i++) {
        wok += cl[i].ok;
        wshed += cl[i].shed;
        wshed_conn += cl[i].shed_conn;
        wother += cl[i].other;
        if (cl[i].other)
            fprintf(stderr, "  client %d (%s): writes failed otherwise, e.g. %s\n", i,
                    g_c.m[cl[i].member].name, cl[i].other_msg);
    }
    long sent = 0, answered = 0, expired = 0, shed = 0, errs = 0, bad = 0, q_sent = 0, q_ok = 0;
    for (int m = 0; m < 3; m++) {
        fprintf(stderr,
                "  %s (%s): renewals sent %ld answered %ld (slowest %" PRIu64 " ms) expired %ld; "
                "streams shed %ld, ended otherwise %ld %s; peer frames dropped %.0f\n",
                g_c.m[m].name, m == l ? "leader" : "follower", cl[m].sent, cl[m].answered,
                cl[m].max_lat_ms, cl[m].expired, cl[m].ka_shed, cl[m].ka_errors, cl[m].err,
                metric_sum(m, "kvd_peer_frames_dropped_total"));
        sent += cl[m].sent;
        answered += cl[m].answered;
        expired += cl[m].expired;
        shed += cl[m].ka_shed;
        errs += cl[m].ka_errors;
        bad += cl[m].bad;
        fprintf(stderr,
                "  %s: TimeToLive sent %ld: %ld alive, %ld dead, %ld shed, %ld failed %s "
                "(slowest %" PRIu64 " ms)\n",
                g_c.m[m].name, cl[m].q_sent, cl[m].q_ok, cl[m].q_dead, cl[m].q_shed, cl[m].q_errors,
                cl[m].q_err, cl[m].q_max_ms);
        q_sent += cl[m].q_sent;
        q_ok += cl[m].q_ok;
    }
    fprintf(stderr,
            "  writes: %ld ok, %ld shed (too many requests), %ld refused by the connection's "
            "receive budget, %ld other\n",
            wok, wshed, wshed_conn, wother);
    /* the forwarders' own view (docs/metrics.md "Leases"): where unanswered renewals went */
    static const char *const fwd[] = {
        "kvd_lease_fwd_batches_total",  "kvd_lease_fwd_resent_total",
        "kvd_lease_fwd_timeouts_total", "kvd_lease_fwd_shed_total",
        "kvd_lease_fwd_served_total",   "kvd_lease_fwd_held_refused_total",
        "kvd_lease_fwd_pending",        "kvd_lease_fwd_held"};
    for (int m = 0; m < 3; m++)
        fprintf(stderr, "  %s: heartbeats answered while its ready was in flight: %.0f\n",
                g_c.m[m].name, metric_sum(m, "kvd_raft_heartbeats_answered_early_total"));
    for (int m = 0; m < 3; m++) {
        fprintf(stderr, "  %s forwarder:", g_c.m[m].name);
        for (size_t k = 0; k < sizeof(fwd) / sizeof(fwd[0]); k++)
            fprintf(stderr, " %s %.0f", fwd[k] + strlen("kvd_lease_fwd_"), metric_sum(m, fwd[k]));
        /* the renewals' time inside the member (receipt to answer queued), by path */
        for (int fw = 0; fw < 2; fw++) {
            char sum[128], cnt[128];
            const char *path = fw ? "forwarded" : "local";
            snprintf(sum, sizeof(sum), "kvd_lease_renewal_duration_seconds_sum{path=\"%s\"}", path);
            snprintf(cnt, sizeof(cnt), "kvd_lease_renewal_duration_seconds_count{path=\"%s\"}",
                     path);
            double n = metric(m, cnt);
            if (n > 0)
                fprintf(stderr, "; %s renewals %.0f, mean %.0f ms inside the member", path, n,
                        1000.0 * metric(m, sum) / n);
        }
        fprintf(stderr, "\n");
    }
    double expired1 = metric(l, "kvd_lease_expired_total");
    double served = metric_sum(l, "kvd_peer_priority_frames_sent_total");
    fprintf(stderr,
            "  leader: %.0f leases expired during the run; %.0f frames (lease answers, "
            "heartbeats) sent from its priority queues\n",
            expired1 - expired0, served);

    kv_it_grpc_close(lg);
    for (int i = 0; i < LP_CLIENTS; i++)
        kv_it_grpc_close(cl[i].g);
    free(cl);

    cr_expect_gt(wshed, 0, "writes were never shed: the cluster was not overloaded");
    cr_expect_eq(bad, 0, "client-side failures (stream start, send, decode)");
    cr_expect_eq(shed, 0, "renewal streams shed with RESOURCE_EXHAUSTED");
    cr_expect_eq(errs, 0, "renewal streams ended otherwise");
    cr_expect_eq(answered, sent, "renewals left unanswered: %ld of %ld", sent - answered, sent);
    cr_expect_eq(expired, 0, "renewals answered with TTL 0 (lease gone)");
    cr_expect_gt(q_sent, 0);
    cr_expect_eq(q_ok, q_sent, "lease reads (TimeToLive) not answered alive: %ld of %ld",
                 q_sent - q_ok, q_sent);
    cr_expect_eq(expired1 - expired0, 0, "leases expired on the leader");
    cr_expect_eq(dead, 0, "leases not alive after the run");
}
