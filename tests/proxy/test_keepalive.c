/*
 * proxy_keepalive: keepalive folding through `kvd grpc-proxy start` (docs/proxy.md):
 *   - 1,000 leases (TTL 3 s) kept alive by 50 libkvclient clients, each with its own
 *     connection to the proxy, for 7 s: none is lost and each still has TTL > 0 on the member;
 *   - one more lease kept alive by all 50 clients at once;
 *   - the member sees exactly ONE LeaseKeepAlive stream from the proxy
 *     (grpc_server_started_total{grpc_method="LeaseKeepAlive"} grows by 1), the proxy reports
 *     kvd_proxy_upstream_keepalive_streams 1, 50 client streams, and fewer renewals sent up
 *     as many answers as client requests, in fewer batches than renewals;
 *   - 20 requests for one lease read in one loop turn (one write on one connection, 20
 *     streams) go up as ONE renewal, and each stream gets the leader's answer.
 *   - one stream cannot take every pending slot (--max-pending-renewals-per-stream).
 *   - with --renewal-batch-delay=1s, 10 requests of 10 connections over ~200 ms go up in ONE
 *     batch, about 1 s after the first; a delay past 1s is refused at start.
 * Figures are logged to stderr.
 */
#include "px_util.h"

#include "grpc_raw.h"
#include "kvclient.h"

#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_CLIENTS 50
#define PER_CLIENT 20
#define TTL 3

static kvt_cluster g_c;
static px g_x;

static void fini(void)
{
    px_stop(&g_x);
    kvt_cluster_destroy(&g_c);
}

Test(proxy_keepalive, many_clients_one_upstream_stream_no_lease_lost, .fini = fini, .timeout = 240)
{
    cr_assert_eq(px_cluster_start(&g_c, 1), 0, "cluster");
    cr_assert_eq(px_start(&g_x, &g_c, NULL, 0, NULL), 0, "proxy");
    double started0 = px_member_started(&g_c, 0, "LeaseKeepAlive");

    kvc_loop_group *lg = NULL;
    kvc_error e;
    cr_assert_eq(kvc_loop_group_new(&lg, &e), 0);
    static kvc_client *cl[N_CLIENTS];
    static kvc_keepalive *ka[N_CLIENTS][PER_CLIENT + 1];
    static int64_t ids[N_CLIENTS][PER_CLIENT];
    const char *eps[] = {g_x.endpoint};
    for (int i = 0; i < N_CLIENTS; i++) {
        kvc_config cfg;
        kvc_config_default(&cfg);
        cfg.endpoints = eps;
        cfg.n_endpoints = 1;
        cfg.loop_group = lg;
        cr_assert_eq(kvc_open(&cl[i], &cfg, &e), 0, "%s", e.message);
    }
    kvc_lease_grant_result g;
    cr_assert_eq(kvc_lease_grant(cl[0], TTL, 0, 0, 5000, &g, &e), 0, "%s", e.message);
    int64_t shared = g.id;
    for (int i = 0; i < N_CLIENTS; i++) {
        for (int k = 0; k < PER_CLIENT; k++) {
            cr_assert_eq(kvc_lease_grant(cl[i], TTL, 0, 0, 5000, &g, &e), 0, "%s", e.message);
            ids[i][k] = g.id;
            cr_assert_eq(kvc_lease_keepalive(cl[i], g.id, TTL, NULL, NULL, &ka[i][k], &e), 0, "%s",
                         e.message);
        }
        cr_assert_eq(kvc_lease_keepalive(cl[i], shared, TTL, NULL, NULL, &ka[i][PER_CLIENT], &e), 0,
                     "%s", e.message);
    }
    kvt_sleep_ms(7000); /* more than two TTLs: only renewals through the proxy keep them */

    int lost = 0;
    for (int i = 0; i < N_CLIENTS; i++)
        for (int k = 0; k <= PER_CLIENT; k++)
            lost += kvc_keepalive_lost(ka[i][k]) != 0;
    cr_assert_eq(lost, 0, "%d keepalives lost", lost);
    int dead = px_leases_dead(g_c.m[0].endpoint, &ids[0][0], N_CLIENTS * PER_CLIENT);
    cr_assert_eq(dead, 0, "%d leases expired on the member", dead);

    double started = px_member_started(&g_c, 0, "LeaseKeepAlive") - started0;
    double up = px_metric(&g_x, "kvd_proxy_upstream_keepalive_streams");
    double opened = px_metric(&g_x, "kvd_proxy_upstream_keepalive_streams_opened_total");
    double streams = px_metric(&g_x, "kvd_proxy_keepalive_client_streams");
    double req = px_metric(&g_x, "kvd_proxy_keepalive_requests_total");
    double sent = px_metric(&g_x, "kvd_proxy_renewals_sent_total");
    double batches = px_metric(&g_x, "kvd_proxy_renewal_batches_total");
    double answers = px_metric(&g_x, "kvd_proxy_keepalive_responses_total");
    fprintf(stderr,
            "proxy_keepalive: %d clients, %d leases + 1 shared: member LeaseKeepAlive streams "
            "started %.0f; proxy: upstream streams %.0f (opened %.0f), client streams %.0f, "
            "requests %.0f, renewals sent up %.0f in %.0f batches, answers %.0f\n",
            N_CLIENTS, N_CLIENTS * PER_CLIENT, started, up, opened, streams, req, sent, batches,
            answers);
    cr_assert_eq(started, 1, "the member saw %.0f LeaseKeepAlive streams", started);
    cr_assert_eq(up, 1);
    cr_assert_eq(opened, 1);
    cr_assert_eq(streams, N_CLIENTS);
    cr_assert(batches < sent, "batches %.0f renewals %.0f", batches, sent);

    /* Every request answered: the counters are read one scrape at a time while renewals
     * still flow, so stop them first and wait (bounded) until the answers catch up. */
    for (int i = 0; i < N_CLIENTS; i++)
        for (int k = 0; k <= PER_CLIENT; k++)
            kvc_keepalive_stop(ka[i][k]);
    for (int t = 0; t < 50; t++) {
        req = px_metric(&g_x, "kvd_proxy_keepalive_requests_total");
        answers = px_metric(&g_x, "kvd_proxy_keepalive_responses_total");
        if (answers == req)
            break;
        kvt_sleep_ms(100);
    }
    cr_assert_eq(answers, req, "every request answered: %.0f requests, %.0f answers", req, answers);

    for (int i = 0; i < N_CLIENTS; i++)
        kvc_close(cl[i]);
    kvc_loop_group_free(lg);
}

/* 20 streams on one connection ask for the same lease in one write: the proxy reads them in
 * one loop turn and sends ONE renewal up; each stream gets the leader's answer. */
Test(proxy_keepalive, requests_of_one_loop_turn_fold_into_one_renewal, .fini = fini, .timeout = 120)
{
    cr_assert_eq(px_cluster_start(&g_c, 1), 0, "cluster");
    cr_assert_eq(px_start(&g_x, &g_c, NULL, 0, NULL), 0, "proxy");
    kvc_client *c = px_client(g_x.endpoint);
    kvc_error e;
    kvc_lease_grant_result g;
    cr_assert_eq(kvc_lease_grant(c, 60, 0, 0, 5000, &g, &e), 0, "%s", e.message);
    kvc_close(c);

    kv_it_grpc *h = NULL;
    cr_assert_eq(kv_it_grpc_open(&h, "127.0.0.1", g_x.port, 5000), 0);
    kv_it_grpc_stream *st[20];
    uint8_t req[16];
    size_t rl = 0;
    uint64_t v = (uint64_t)g.id;
    req[rl++] = 0x08;
    do {
        req[rl++] = (uint8_t)((v & 0x7f) | (v >> 7 ? 0x80 : 0));
        v >>= 7;
    } while (v);
    double sent0 = px_metric(&g_x, "kvd_proxy_renewals_sent_total");
    for (int i = 0; i < 20; i++) {
        st[i] = kv_it_grpc_stream_start(h, "/etcdserverpb.Lease/LeaseKeepAlive", NULL);
        cr_assert_not_null(st[i]);
        cr_assert_eq(kv_it_grpc_send_msg(st[i], req, rl, 0), 0);
    }
    cr_assert_eq(kv_it_grpc_flush(h, 5000), 0); /* one write */
    for (int i = 0; i < 20; i++) {
        uint8_t *m = NULL;
        size_t n = 0;
        cr_assert_eq(kv_it_grpc_stream_recv(st[i], &m, &n, 5000), 0, "answer on stream %d", i);
        int64_t id = 0, ttl = 0;
        cr_assert_eq(px_ka_resp(m, n, &id, &ttl), 0);
        free(m);
        cr_assert_eq(id, g.id);
        cr_assert(ttl > 50 && ttl <= 60, "ttl %lld", (long long)ttl);
    }
    double sent = px_metric(&g_x, "kvd_proxy_renewals_sent_total") - sent0;
    fprintf(stderr, "proxy_keepalive: 20 requests of one loop turn -> %.0f renewal(s) up\n", sent);
    cr_assert_eq(sent, 1, "%.0f renewals sent for 20 requests of one turn", sent);
    kv_it_grpc_close(h);
}

/* LeaseKeepAliveRequest{ID: id} */
static size_t ka_req(uint8_t *req, int64_t id)
{
    size_t rl = 0;
    uint64_t v = (uint64_t)id;
    req[rl++] = 0x08;
    do {
        req[rl++] = (uint8_t)((v & 0x7f) | (v >> 7 ? 0x80 : 0));
        v >>= 7;
    } while (v);
    return rl;
}

/* A one-member cluster and the proxy with the extra flags; n leases of TTL 60 s granted
 * through the proxy, their ids in ids. */
static void start_with_leases(const char *const *flags, int64_t *ids, int n)
{
    cr_assert_eq(px_cluster_start(&g_c, 1), 0, "cluster");
    cr_assert_eq(px_start(&g_x, &g_c, NULL, 0, flags), 0, "proxy");
    kvc_client *c = px_client(g_x.endpoint);
    kvc_error e;
    for (int i = 0; i < n; i++) {
        kvc_lease_grant_result g;
        cr_assert_eq(kvc_lease_grant(c, 60, 0, 0, 5000, &g, &e), 0, "%s", e.message);
        ids[i] = g.id;
    }
    kvc_close(c);
}

/* Per-stream fairness (--max-pending-renewals-per-stream=5): one stream that sends 20
 * renewals of 20 leases in one write is ended with etcd's "too many requests" once it has 5
 * waiting; another client's stream, in the same loop turn, is answered. */
Test(proxy_keepalive, one_stream_cannot_take_every_pending_slot, .fini = fini, .timeout = 120)
{
    static const char *const flags[] = {"--max-pending-renewals-per-stream=5", NULL};
    int64_t ids[21];
    start_with_leases(flags, ids, 21);
    kv_it_grpc *greedy = NULL, *other = NULL;
    cr_assert_eq(kv_it_grpc_open(&greedy, "127.0.0.1", g_x.port, 5000), 0);
    cr_assert_eq(kv_it_grpc_open(&other, "127.0.0.1", g_x.port, 5000), 0);
    kv_it_grpc_stream *gs =
        kv_it_grpc_stream_start(greedy, "/etcdserverpb.Lease/LeaseKeepAlive", NULL);
    kv_it_grpc_stream *os =
        kv_it_grpc_stream_start(other, "/etcdserverpb.Lease/LeaseKeepAlive", NULL);
    cr_assert(gs && os);
    uint8_t req[16];
    for (int i = 0; i < 20; i++)
        cr_assert_eq(kv_it_grpc_send_msg(gs, req, ka_req(req, ids[i]), 0), 0);
    cr_assert_eq(kv_it_grpc_send_msg(os, req, ka_req(req, ids[20]), 0), 0);
    cr_assert_eq(kv_it_grpc_flush(greedy, 5000), 0); /* one write: one loop turn */
    cr_assert_eq(kv_it_grpc_flush(other, 5000), 0);
    uint8_t *m = NULL;
    size_t n = 0;
    cr_assert_eq(kv_it_grpc_stream_recv(os, &m, &n, 5000), 0, "the other stream is answered");
    int64_t id = 0, ttl = 0;
    cr_assert_eq(px_ka_resp(m, n, &id, &ttl), 0);
    free(m);
    cr_assert_eq(id, ids[20]);
    cr_assert(ttl > 0);
    kv_it_grpc_wait(greedy, gs, 5000);
    fprintf(stderr,
            "proxy_keepalive: 20 renewals on one stream, per-stream bound 5: status %d "
            "\"%s\"\n",
            gs->grpc_status, gs->grpc_message);
    cr_assert_eq(gs->grpc_status, 8, "the greedy stream: status %d", gs->grpc_status);
    cr_assert_str_eq(gs->grpc_message, "etcdserver: too many requests");
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_refused_total{reason=\"stream_renewals\"}"), 1);
    kv_it_grpc_close(greedy);
    kv_it_grpc_close(other);
}

/* --renewal-batch-delay=1s: 10 connections each send a renewal, 20 ms apart (10 loop turns).
 * They go up in ONE batch, which leaves 1 s after the first request arrived, and each stream
 * gets the leader's answer. Without the flag each turn's request would go up on its own. */
Test(proxy_keepalive, renewal_batch_delay_gathers_turns_into_one_batch, .fini = fini,
     .timeout = 120)
{
    static const char *const flags[] = {"--renewal-batch-delay=1s", NULL};
    int64_t ids[10];
    start_with_leases(flags, ids, 10);
    kv_it_grpc *h[10];
    kv_it_grpc_stream *st[10];
    for (int i = 0; i < 10; i++) {
        cr_assert_eq(kv_it_grpc_open(&h[i], "127.0.0.1", g_x.port, 5000), 0);
        st[i] = kv_it_grpc_stream_start(h[i], "/etcdserverpb.Lease/LeaseKeepAlive", NULL);
        cr_assert_not_null(st[i]);
    }
    double sent0 = px_metric(&g_x, "kvd_proxy_renewals_sent_total");
    double batches0 = px_metric(&g_x, "kvd_proxy_renewal_batches_total");
    uint8_t req[16];
    uint64_t t0 = kvt_now_ms();
    for (int i = 0; i < 10; i++) {
        cr_assert_eq(kv_it_grpc_send_msg(st[i], req, ka_req(req, ids[i]), 0), 0);
        cr_assert_eq(kv_it_grpc_flush(h[i], 5000), 0);
        kvt_sleep_ms(20);
    }
    uint64_t span = kvt_now_ms() - t0, first = 0;
    for (int i = 0; i < 10; i++) {
        uint8_t *m = NULL;
        size_t n = 0;
        cr_assert_eq(kv_it_grpc_stream_recv(st[i], &m, &n, 5000), 0, "answer on stream %d", i);
        if (i == 0)
            first = kvt_now_ms() - t0;
        int64_t id = 0, ttl = 0;
        cr_assert_eq(px_ka_resp(m, n, &id, &ttl), 0);
        free(m);
        cr_assert_eq(id, ids[i]);
        cr_assert(ttl > 50 && ttl <= 60, "ttl %lld", (long long)ttl);
    }
    double sent = px_metric(&g_x, "kvd_proxy_renewals_sent_total") - sent0;
    double batches = px_metric(&g_x, "kvd_proxy_renewal_batches_total") - batches0;
    fprintf(stderr,
            "proxy_keepalive: --renewal-batch-delay=1s: 10 requests over %llu ms -> %.0f "
            "renewals in %.0f batch(es), the first answered after %llu ms\n",
            (unsigned long long)span, sent, batches, (unsigned long long)first);
    cr_assert_eq(sent, 10, "%.0f renewals sent for 10 leases", sent);
    cr_assert_eq(batches, 1, "%.0f batches for requests within the delay", batches);
    cr_assert(first >= 900, "the first request was answered after %llu ms, before the delay",
              (unsigned long long)first);
    for (int i = 0; i < 10; i++)
        kv_it_grpc_close(h[i]);

    /* past its bound: refused at start, with the flag named */
    const char *argv[] = {g_c.bin, "grpc-proxy", "start", "--renewal-batch-delay=2s", NULL};
    kvt_cmd_result r;
    cr_assert_eq(kvt_run(argv, NULL, NULL, 0, 15000, &r), 0);
    fprintf(stderr, "proxy_keepalive: --renewal-batch-delay=2s: exit %d, %s", r.exit_code, r.err);
    cr_assert(!r.timed_out && r.exit_code != 0, "exit %d", r.exit_code);
    cr_assert(strstr(r.err, "--renewal-batch-delay: '2s' is over 1s") != NULL, "%s", r.err);
    kvt_cmd_result_free(&r);
}
