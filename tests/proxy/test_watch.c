/*
 * proxy_watch: watch coalescing and watch failover of `kvd grpc-proxy start`, seen from raw
 * gRPC Watch streams (tests/lib/grpc_raw.h: every response the proxy sends is decoded, nothing
 * is deduplicated on the client side):
 *   - 100 client watchers of key "k" over 20 connections (5 creates sent at once per stream)
 *     share ONE upstream watcher: kvd_proxy_watch_upstream_watchers 1, the member's
 *     kvd_watchers 1, kvd_proxy_watch_coalesced_total 99; every watcher gets every one of 50
 *     puts exactly once, in order, under its own watch_id;
 *   - watchers of one key with different prev_kv and filters share one upstream watcher too,
 *     and each gets only its own events;
 *   - a watcher created mid-stream (after 25 puts were delivered) gets a Created whose header
 *     revision is at least the 25th put's, then exactly the puts after that revision;
 *   - a WatchCancelRequest is answered (canceled, same id) and that watcher gets nothing more;
 *     closing every client stream cancels the upstream watcher (member's kvd_watchers 0);
 *   - kill -9 of the member the proxy watches through (3 members; one upstream watcher per
 *     upstream stream, --max-watchers-per-upstream-stream=1): the client streams stay open and
 * every watcher (two sharing key "f", two prefix "g" watchers with prev_kv) gets exactly the events
 * a surviving member's own history holds after its Created revision, including the ones written
 * while the proxy had no upstream stream;
 *   - the same when the revision to resume from was compacted meanwhile (member stopped,
 *     writes and a compaction on the others, then its kill -9): the client watcher gets
 *     etcd's compacted response (compact_revision, canceled) on its still open stream;
 *   - 2,500 watchers of distinct keys spread over upstream streams at the proxy's own limit,
 *     and 1,000 over a member's lower --max-watchers-per-stream, learned from its refusal;
 *     after a kill -9 of that member the learned limit goes back to the flag's and the 1,000
 *     resume on one upstream stream of the next member (kvd's default limit);
 *   - a watcher that asks for fragments shares the upstream watcher of one that does not, and
 *     gets a 2.1 MB response split at 1.5 MiB as a member would split it;
 *   - a current watcher joins an upstream watcher begun in the history once that one showed it
 *     caught up; two history watchers' upstream watchers merge once they stand at one
 *     revision.
 */
#include "px_util.h"

#include "grpc_raw.h"
#include "kvclient.h"
#include "rpc.pb-c.h"

#include <criterion/criterion.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXEV 256
#define MAXW 8

typedef struct wst {
    int64_t id;
    int64_t created_rev;
    int canceled;
    int64_t compact_rev;
    int n;
    int64_t revs[MAXEV];
    int prevs; /* events that carried a prev_kv */
    int dels;  /* DELETE events */
} wst;

typedef struct conn {
    kv_it_grpc *g;
    kv_it_grpc_stream *st;
    wst w[MAXW];
    int nw, n_created, bad;
    int64_t progress_rev; /* header revision of the last answer to a WatchProgressRequest */
} conn;

static kvt_cluster g_c;
static px g_x;

static void fini(void)
{
    px_stop(&g_x);
    kvt_cluster_destroy(&g_c);
}

static void on_msg(void *arg, const uint8_t *m, size_t n)
{
    conn *c = arg;
    Etcdserverpb__WatchResponse *r = etcdserverpb__watch_response__unpack(NULL, n, m);
    if (!r) {
        c->bad++;
        return;
    }
    if (r->created) {
        if (c->n_created < MAXW) {
            wst *w = &c->w[c->n_created++];
            w->id = r->watch_id;
            w->created_rev = r->header ? r->header->revision : -1;
            if (r->canceled)
                c->bad++;
        }
    } else if (r->watch_id == -1 && r->n_events == 0) {
        c->progress_rev = r->header ? r->header->revision : -1;
    } else {
        wst *w = NULL;
        for (int i = 0; i < c->n_created; i++)
            if (c->w[i].id == r->watch_id)
                w = &c->w[i];
        if (!w) {
            c->bad++;
        } else {
            if (r->canceled)
                w->canceled = 1;
            if (r->compact_revision)
                w->compact_rev = r->compact_revision;
            for (size_t i = 0; i < r->n_events && w->n < MAXEV; i++) {
                w->revs[w->n++] = r->events[i]->kv->mod_revision;
                w->prevs += r->events[i]->prev_kv != NULL;
                w->dels += r->events[i]->type == MVCCPB__EVENT__EVENT_TYPE__DELETE;
            }
        }
    }
    etcdserverpb__watch_response__free_unpacked(r, NULL);
}

/* Pumps every connection once (no wait) and decodes what arrived. */
static void pump(conn *cs, int n)
{
    for (int i = 0; i < n; i++) {
        if (!cs[i].g)
            continue;
        (void)kv_it_grpc_pump(cs[i].g, 0);
        (void)kv_it_grpc_stream_take(cs[i].st, on_msg, &cs[i]);
    }
}

#define F_NOPUT 1
#define F_NODELETE 2

static void send_create_f(conn *c, const char *key, const char *end, int prev_kv, int64_t start,
                          int filters)
{
    Etcdserverpb__WatchCreateRequest cr = ETCDSERVERPB__WATCH_CREATE_REQUEST__INIT;
    Etcdserverpb__WatchRequest r = ETCDSERVERPB__WATCH_REQUEST__INIT;
    Etcdserverpb__WatchCreateRequest__FilterType f[2];
    if (filters & F_NOPUT)
        f[cr.n_filters++] = ETCDSERVERPB__WATCH_CREATE_REQUEST__FILTER_TYPE__NOPUT;
    if (filters & F_NODELETE)
        f[cr.n_filters++] = ETCDSERVERPB__WATCH_CREATE_REQUEST__FILTER_TYPE__NODELETE;
    cr.filters = f;
    cr.key.data = (uint8_t *)key;
    cr.key.len = strlen(key);
    if (end) {
        cr.range_end.data = (uint8_t *)end;
        cr.range_end.len = strlen(end);
    }
    cr.prev_kv = prev_kv;
    cr.start_revision = start;
    r.request_union_case = ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_CREATE_REQUEST;
    r.create_request = &cr;
    uint8_t b[256];
    size_t n = etcdserverpb__watch_request__pack(&r, b);
    cr_assert_eq(kv_it_grpc_send_msg(c->st, b, n, 0), 0);
    c->nw++;
}

static void send_create(conn *c, const char *key, const char *end, int prev_kv, int64_t start)
{
    send_create_f(c, key, end, prev_kv, start, 0);
}

static void send_cancel(conn *c, int64_t id)
{
    Etcdserverpb__WatchCancelRequest cr = ETCDSERVERPB__WATCH_CANCEL_REQUEST__INIT;
    Etcdserverpb__WatchRequest r = ETCDSERVERPB__WATCH_REQUEST__INIT;
    cr.watch_id = id;
    r.request_union_case = ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_CANCEL_REQUEST;
    r.cancel_request = &cr;
    uint8_t b[32];
    size_t n = etcdserverpb__watch_request__pack(&r, b);
    cr_assert_eq(kv_it_grpc_send_msg(c->st, b, n, 0), 0);
}

static void conn_open(conn *c)
{
    memset(c, 0, sizeof *c);
    cr_assert_eq(kv_it_grpc_open(&c->g, "127.0.0.1", g_x.port, 5000), 0);
    c->st = kv_it_grpc_stream_start(c->g, "/etcdserverpb.Watch/Watch", NULL);
    cr_assert_not_null(c->st);
}

static void conn_close(conn *c)
{
    kv_it_grpc_close(c->g);
    c->g = NULL;
}

static int all_created(conn *cs, int n)
{
    for (int i = 0; i < n; i++)
        if (cs[i].g && cs[i].n_created < cs[i].nw)
            return 0;
    return 1;
}

/* Every live watcher of cs has at least `want` events (want_of: per watcher, if not NULL). */
static int all_have(conn *cs, int n, int want)
{
    for (int i = 0; i < n; i++)
        for (int k = 0; cs[i].g && k < cs[i].n_created; k++)
            if (!cs[i].w[k].canceled && cs[i].w[k].n < want)
                return 0;
    return 1;
}

static void pump_until(conn *cs, int n, int (*done)(conn *, int, int), int arg, uint32_t ms,
                       const char *what)
{
    uint64_t end = kvt_now_ms() + ms;
    while (!done(cs, n, arg) && kvt_now_ms() < end) {
        pump(cs, n);
        kvt_sleep_ms(1);
    }
    pump(cs, n);
    cr_assert(done(cs, n, arg), "timed out waiting for %s", what);
}

static int created_cb(conn *cs, int n, int arg)
{
    (void)arg;
    return all_created(cs, n);
}

/* The range cache's own upstream watch would be one more member watcher (and one more
 * upstream Watch stream): these tests count the watch coalescing's alone. */
#define NO_CACHE "--max-cache-entries=0"
static const char *const no_cache[] = {NO_CACHE, NULL};

static double member_watchers(int i)
{
    char *body = NULL;
    cr_assert_eq(kvt_member_metrics(&g_c, i, &body), 0);
    double v = px_metric_sum_text(body, "kvd_watchers", NULL);
    free(body);
    return v;
}

static int64_t put(kvc_client *c, const char *key, int i)
{
    char v[32];
    int vl = snprintf(v, sizeof v, "v%d", i);
    kvc_put_result pr;
    kvc_error e;
    cr_assert_eq(kvc_put(c, key, strlen(key), v, (size_t)vl, NULL, 5000, &pr, &e), 0, "%s",
                 e.message);
    int64_t rev = pr.header.revision;
    kvc_put_result_free(&pr);
    return rev;
}

#define NCONN 20
#define PERCONN 5
#define NPUT 50

Test(proxy_watch, hundred_watchers_share_one_upstream_watcher, .fini = fini, .timeout = 180)
{
    cr_assert_eq(px_cluster_start(&g_c, 1), 0, "cluster");
    cr_assert_eq(px_start(&g_x, &g_c, NULL, 0, no_cache), 0, "proxy");
    static conn cs[NCONN + 1];
    for (int i = 0; i < NCONN; i++) {
        conn_open(&cs[i]);
        for (int k = 0; k < PERCONN; k++)
            send_create(&cs[i], "k", NULL, 0, 0);
    }
    pump_until(cs, NCONN, created_cb, 0, 10000, "100 Created");
    for (int i = 0; i < NCONN; i++)
        for (int k = 0; k < PERCONN; k++)
            for (int j = 0; j < k; j++)
                cr_assert_neq(cs[i].w[k].id, cs[i].w[j].id, "distinct ids on one stream");
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_watchers"), NCONN * PERCONN);
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_watch_upstream_watchers"), 1);
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_watch_coalesced_total"), NCONN * PERCONN - 1);
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_watch_upstream_streams"), 1);
    cr_assert_eq(member_watchers(0), 1, "the member has one watcher");

    kvc_client *direct = px_client(g_c.m[0].endpoint);
    int64_t revs[NPUT + 1];
    for (int i = 0; i < NPUT / 2; i++)
        revs[i] = put(direct, "k", i);
    pump_until(cs, NCONN, all_have, NPUT / 2, 10000, "the first 25 events");

    /* a watcher added mid-stream */
    conn *j = &cs[NCONN];
    conn_open(j);
    send_create(j, "k", NULL, 0, 0);
    pump_until(cs, NCONN + 1, created_cb, 0, 5000, "the joiner's Created");
    int64_t jrev = j->w[0].created_rev;
    cr_assert_geq(jrev, revs[NPUT / 2 - 1], "joiner's Created revision %lld < %lld",
                  (long long)jrev, (long long)revs[NPUT / 2 - 1]);
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_watch_upstream_watchers"), 1);

    for (int i = NPUT / 2; i < NPUT; i++)
        revs[i] = put(direct, "k", i);
    pump_until(cs, NCONN + 1, all_have, NPUT / 2, 10000, "the joiner's 25 events");
    pump_until(cs, NCONN, all_have, NPUT, 10000, "50 events");
    kvt_sleep_ms(200);
    pump(cs, NCONN + 1);
    for (int i = 0; i < NCONN; i++) {
        cr_assert_eq(cs[i].bad, 0, "conn %d: an unexpected response", i);
        for (int k = 0; k < PERCONN; k++) {
            wst *w = &cs[i].w[k];
            cr_assert_eq(w->n, NPUT, "conn %d watcher %d: %d events", i, k, w->n);
            for (int e = 0; e < NPUT; e++)
                cr_assert_eq(w->revs[e], revs[e], "conn %d watcher %d event %d", i, k, e);
        }
    }
    cr_assert_eq(j->bad, 0);
    cr_assert_eq(j->w[0].n, NPUT / 2, "the joiner got %d events", j->w[0].n);
    for (int e = 0; e < NPUT / 2; e++)
        cr_assert_eq(j->w[0].revs[e], revs[NPUT / 2 + e], "joiner event %d", e);

    /* a watcher from the history (start_revision of put 41 <= the delivered revision) gets
     * its own upstream watcher and exactly the puts from there on; once it has caught up to
     * where the shared one stands, the two merge */
    static conn h[1];
    conn_open(&h[0]);
    send_create(&h[0], "k", NULL, 0, revs[40]);
    pump_until(h, 1, all_have, NPUT - 40, 5000, "the history watcher's 10 events");
    kvt_sleep_ms(100);
    pump(h, 1);
    cr_assert_eq(h[0].bad, 0);
    cr_assert_eq(h[0].w[0].n, NPUT - 40, "history watcher: %d events", h[0].w[0].n);
    for (int e = 0; e < NPUT - 40; e++)
        cr_assert_eq(h[0].w[0].revs[e], revs[40 + e]);
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_watch_upstream_watchers"), 1, "not merged");
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_watch_merged_total"), 1);
    conn_close(&h[0]);

    /* a WatchProgressRequest is answered from what was delivered */
    Etcdserverpb__WatchProgressRequest pq = ETCDSERVERPB__WATCH_PROGRESS_REQUEST__INIT;
    Etcdserverpb__WatchRequest pr = ETCDSERVERPB__WATCH_REQUEST__INIT;
    pr.request_union_case = ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_PROGRESS_REQUEST;
    pr.progress_request = &pq;
    uint8_t pb[16];
    cr_assert_eq(kv_it_grpc_send_msg(cs[1].st, pb, etcdserverpb__watch_request__pack(&pr, pb), 0),
                 0);
    uint64_t pend = kvt_now_ms() + 5000;
    while (cs[1].progress_rev == 0 && kvt_now_ms() < pend) {
        pump(cs, 2);
        kvt_sleep_ms(1);
    }
    /* a response carries all of a revision's events (no fragments upstream): the last
     * event's revision is complete, and it is the answer, as a member's would be */
    cr_assert(cs[1].progress_rev == revs[NPUT - 1], "progress answer %lld, last event %lld",
              (long long)cs[1].progress_rev, (long long)revs[NPUT - 1]);

    /* cancel the first watcher of conn 0 */
    send_cancel(&cs[0], cs[0].w[0].id);
    uint64_t end = kvt_now_ms() + 5000;
    while (!cs[0].w[0].canceled && kvt_now_ms() < end) {
        pump(cs, 1);
        kvt_sleep_ms(1);
    }
    cr_assert(cs[0].w[0].canceled, "cancel answered");
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_watchers"), NCONN * PERCONN);
    revs[NPUT] = put(direct, "k", NPUT);
    pump_until(cs, NCONN, all_have, NPUT + 1, 10000, "event 51");
    kvt_sleep_ms(200);
    pump(cs, NCONN + 1);
    cr_assert_eq(cs[0].w[0].n, NPUT, "the canceled watcher got an event");
    cr_assert_eq(cs[0].w[1].revs[NPUT], revs[NPUT]);
    cr_assert_eq(cs[0].bad, 0);

    for (int i = 0; i <= NCONN; i++)
        conn_close(&cs[i]);
    end = kvt_now_ms() + 5000;
    while ((px_metric(&g_x, "kvd_proxy_watchers") != 0 || member_watchers(0) != 0) &&
           kvt_now_ms() < end)
        kvt_sleep_ms(50);
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_watchers"), 0);
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_watch_upstream_watchers"), 0);
    cr_assert_eq(member_watchers(0), 0, "the upstream watcher was canceled");
    fprintf(stderr,
            "proxy_watch: 100 watchers over 20 connections + 1 joiner: 1 upstream watcher, "
            "%d events each, exactly once, in order\n",
            NPUT);
    kvc_close(direct);
}

static void count_events(void *arg, const kvc_watch_response *r)
{
    atomic_fetch_add((atomic_int *)arg, (int)r->n_events);
}

static int gauge_is(const char *series, double want, uint32_t ms)
{
    uint64_t end = kvt_now_ms() + ms;
    while (px_metric(&g_x, series) != want && kvt_now_ms() < end)
        kvt_sleep_ms(20);
    return px_metric(&g_x, series) == want;
}

/* One kvd member with the given extra flags (NULL-terminated, may be NULL) and the proxy in
 * front of it (no range cache). */
static void one_member_and_proxy(const char *const *member_flags)
{
    kvt_cluster_opts o;
    kvt_cluster_opts_default(&o, 1);
    o.kvd_args = member_flags;
    cr_assert_eq(kvt_cluster_init(&g_c, &o), 0);
    cr_assert_eq(kvt_cluster_start(&g_c, 60000), 0, "cluster");
    cr_assert_eq(px_start(&g_x, &g_c, NULL, 0, no_cache), 0, "proxy");
}

/* A one-member cluster and the proxy (no range cache), a client of the member in *direct, and
 * 10 puts of key, their revisions in revs[0..10). */
static void ten_puts(const char *key, kvc_client **direct, int64_t *revs)
{
    one_member_and_proxy(NULL);
    *direct = px_client(g_c.m[0].endpoint);
    for (int i = 0; i < 10; i++)
        revs[i] = put(*direct, key, i);
}

/* A new connection to the proxy with one watcher of key from revision start, created, and its
 * first `want` events. */
static void history_watcher(conn *h, const char *key, int64_t start, int want)
{
    conn_open(h);
    send_create(h, key, NULL, 0, start);
    pump_until(h, 1, created_cb, 0, 5000, "a history watcher's Created");
    pump_until(h, 1, all_have, want, 5000, "a history watcher's events");
}

/* A current watcher (a new connection cur) of key joins the upstream watcher of hist, a
 * history watcher that has received exactly the events at revisions before[0..n): 1 upstream
 * watcher, one more coalesced than `coalesced0`, a Created at revision `created`; then a put of
 * key reaches both, the current watcher gets only it, and the member holds one watcher for
 * both. Closes both connections. */
static void current_joins(conn *hist, conn *cur, const char *key, int64_t created,
                          double coalesced0, const int64_t *before, int n, kvc_client *direct)
{
    conn_open(cur);
    send_create(cur, key, NULL, 0, 0);
    pump_until(cur, 1, created_cb, 0, 5000, "the current watcher's Created");
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_watch_upstream_watchers"), 1,
                 "the current watcher did not join the history watcher");
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_watch_coalesced_total"), coalesced0 + 1);
    cr_assert_eq(cur->w[0].created_rev, created, "Created at %lld, want %lld",
                 (long long)cur->w[0].created_rev, (long long)created);
    int64_t r = put(direct, key, n + 100);
    pump_until(hist, 1, all_have, n + 1, 5000, "the history watcher's next event");
    pump_until(cur, 1, all_have, 1, 5000, "the current watcher's event");
    kvt_sleep_ms(200);
    pump(hist, 1);
    pump(cur, 1);
    cr_assert_eq(cur->w[0].n, 1, "the current watcher got %d events", cur->w[0].n);
    cr_assert_eq(cur->w[0].revs[0], r);
    cr_assert_eq(hist->w[0].n, n + 1, "the history watcher got %d events", hist->w[0].n);
    for (int e = 0; e < n; e++)
        cr_assert_eq(hist->w[0].revs[e], before[e], "history event %d", e);
    cr_assert_eq(hist->w[0].revs[n], r);
    cr_assert_eq(hist->bad + cur->bad, 0);
    cr_assert_eq(member_watchers(0), 1, "the member holds one watcher for both");
    conn_close(hist);
    conn_close(cur);
}

/* A watcher from the current revision joins an upstream watcher that began in the history once
 * that one has shown it caught up, as etcd's proxy merges a broadcast that reached the
 * others' revision. The history watcher's catch-up ends below the member's revision (a put of
 * another key came last), so nothing shows it caught up yet: a current watcher then gets an
 * upstream watcher of its own. A put of the key comes to the history watcher with the header
 * revision of its event, the proof; a current watcher created after it shares the upstream
 * watcher, has a Created at that revision, and gets only what follows. Before, every current
 * watcher of such a key cost an upstream watcher of its own for as long as the history one
 * lived. */
Test(proxy_watch, current_watcher_joins_a_caught_up_history_watcher, .fini = fini, .timeout = 180)
{
    if (kvt_target_from_env() != KV_TEST_SERVER_KVD)
        cr_skip_test("kvd's proxy (etcd 3.4's merges broadcasts later, its own way)");
    kvc_client *direct;
    int64_t revs[10];
    ten_puts("hk", &direct, revs);
    int64_t other = put(direct, "other", 0);
    /* the member's watch hub has made `other` visible (its event reached a watcher from that
     * revision): the history watcher's catch-up responses carry it as their header revision */
    static atomic_int seen;
    atomic_store(&seen, 0);
    kvc_watch_opts wo = {.start_revision = other};
    kvc_watch *ow = NULL;
    kvc_error e;
    cr_assert_eq(
        kvc_watch_create(direct, "other", 5, &wo, 5000, count_events, &seen, &ow, NULL, &e), 0,
        "%s", e.message);
    for (uint64_t end = kvt_now_ms() + 5000; atomic_load(&seen) < 1 && kvt_now_ms() < end;)
        kvt_sleep_ms(5);
    cr_assert_eq(atomic_load(&seen), 1, "the member's watcher of `other`");
    kvc_watch_cancel(ow);

    static conn h[3];
    history_watcher(&h[0], "hk", revs[2], 8);
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_watch_upstream_watchers"), 1);
    double coalesced0 = px_metric(&g_x, "kvd_proxy_watch_coalesced_total");

    /* not shown caught up: a current watcher gets its own upstream watcher */
    conn_open(&h[1]);
    send_create(&h[1], "hk", NULL, 0, 0);
    pump_until(&h[1], 1, created_cb, 0, 5000, "the first current watcher's Created");
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_watch_upstream_watchers"), 2,
                 "a current watcher joined a history watcher still catching up");
    conn_close(&h[1]);
    cr_assert(gauge_is("kvd_proxy_watch_upstream_watchers", 1, 5000), "the second one canceled");

    /* the proof: an event at its response's header revision */
    int64_t r10 = put(direct, "hk", 10);
    pump_until(h, 1, all_have, 9, 5000, "the history watcher's 9th event");
    cr_assert_eq(h[0].w[0].revs[8], r10);

    int64_t before[9];
    memcpy(before, revs + 2, 8 * sizeof before[0]);
    before[8] = r10;
    current_joins(&h[0], &h[2], "hk", r10, coalesced0, before, 9, direct);
    kvc_close(direct);
}

/* A quiet range: nothing is put to the history watcher's key after its catch-up, so no event
 * shows it caught up; the member's progress notification does (it sends one only to a synced
 * watcher, every --watch-progress-notify-interval: here 1 s instead of etcd's 10 minutes, the
 * operator's lever, docs/proxy.md). After it, a current watcher of the key joins the history
 * watcher's upstream watcher, its Created at the notification's revision. Control: with the
 * members' default interval the join does not happen within the wait (2 upstream watchers). */
Test(proxy_watch, quiet_history_watcher_is_joined_after_a_progress_notification, .fini = fini,
     .timeout = 180)
{
    if (kvt_target_from_env() != KV_TEST_SERVER_KVD)
        cr_skip_test("kvd's proxy (etcd 3.4's merges broadcasts later, its own way)");
    static const char *const member_flags[] = {"--watch-progress-notify-interval=1s", NULL};
    one_member_and_proxy(member_flags);
    kvc_client *direct = px_client(g_c.m[0].endpoint);
    int64_t revs[5];
    for (int i = 0; i < 5; i++)
        revs[i] = put(direct, "qk", i);
    int64_t other = put(direct, "other", 0); /* the member's revision: not an event of qk */
    static conn h[2];
    history_watcher(&h[0], "qk", revs[1], 4);
    double coalesced0 = px_metric(&g_x, "kvd_proxy_watch_coalesced_total");
    kvt_sleep_ms(2500); /* two notification periods of the member */
    pump(h, 1);
    current_joins(&h[0], &h[1], "qk", other, coalesced0, revs + 1, 4, direct);
    kvc_close(direct);
}

/* Two watchers of one key from two past revisions: the second starts below where the first
 * has delivered, so it gets an upstream watcher of its own. Once its catch-up reaches the
 * revision the first one stands at, the two merge (etcd's proxy coalesces broadcasts the same
 * way): 1 upstream watcher, 1 at the member, and each client watcher gets every later put
 * exactly once. Before, both upstream watchers lived as long as their client watchers. */
Test(proxy_watch, history_watchers_merge_at_one_revision, .fini = fini, .timeout = 180)
{
    if (kvt_target_from_env() != KV_TEST_SERVER_KVD)
        cr_skip_test("kvd's proxy (etcd 3.4's merges only broadcasts of under 5 receivers)");
    kvc_client *direct;
    int64_t revs[12];
    ten_puts("mk", &direct, revs);
    static conn h[2];
    history_watcher(&h[0], "mk", revs[2], 8);
    history_watcher(&h[1], "mk", revs[5], 5);
    cr_assert(gauge_is("kvd_proxy_watch_upstream_watchers", 1, 5000),
              "the two upstream watchers did not merge: %.0f",
              px_metric(&g_x, "kvd_proxy_watch_upstream_watchers"));
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_watch_merged_total"), 1);
    revs[10] = put(direct, "mk", 10);
    revs[11] = put(direct, "mk", 11);
    pump_until(&h[0], 1, all_have, 10, 5000, "the first watcher's 10 events");
    pump_until(&h[1], 1, all_have, 7, 5000, "the second watcher's 7 events");
    kvt_sleep_ms(200);
    pump(h, 2);
    cr_assert_eq(h[0].w[0].n, 10, "first watcher: %d events", h[0].w[0].n);
    cr_assert_eq(h[1].w[0].n, 7, "second watcher: %d events", h[1].w[0].n);
    for (int e = 0; e < 10; e++)
        cr_assert_eq(h[0].w[0].revs[e], revs[2 + e]);
    for (int e = 0; e < 7; e++)
        cr_assert_eq(h[1].w[0].revs[e], revs[5 + e]);
    cr_assert_eq(h[0].bad + h[1].bad, 0);
    cr_assert_eq(member_watchers(0), 1, "the member holds one watcher for both");
    conn_close(&h[0]);
    conn_close(&h[1]);
    kvc_close(direct);
}

/* Watchers of one key with different options (prev_kv, the NOPUT and NODELETE filters) share
 * one upstream watcher, as behind etcd's proxy, and each sees only what it asked for: the
 * events its filters keep, prev_kv only if it asked, nothing at all when every event of a
 * response is filtered out. Before, each option set cost its own upstream watcher. */
Test(proxy_watch, watchers_with_different_options_share_one_upstream_watcher, .fini = fini,
     .timeout = 120)
{
    cr_assert_eq(px_cluster_start(&g_c, 1), 0, "cluster");
    cr_assert_eq(px_start(&g_x, &g_c, NULL, 0, no_cache), 0, "proxy");
    static const struct {
        int prev_kv, filters;
        int n, prevs, dels; /* what it must see of: put v1, put v2, delete */
    } want[] = {
        {0, 0, 3, 0, 1},          {1, 0, 3, 2, 1},          {0, F_NOPUT, 1, 0, 1},
        {0, F_NODELETE, 2, 0, 0}, {1, F_NODELETE, 2, 1, 0}, {1, F_NOPUT, 1, 1, 1},
    };
    const int nw = (int)(sizeof want / sizeof want[0]);
    static conn cs[2];
    conn_open(&cs[0]);
    for (int i = 0; i < nw; i++)
        send_create_f(&cs[0], "o", NULL, want[i].prev_kv, 0, want[i].filters);
    pump_until(cs, 1, created_cb, 0, 10000, "6 Created");
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_watch_upstream_watchers"), 1);
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_watch_coalesced_total"), nw - 1);
    cr_assert_eq(member_watchers(0), 1, "the member has one watcher");

    kvc_client *direct = px_client(g_c.m[0].endpoint);
    int64_t r1 = put(direct, "o", 1);
    int64_t r2 = put(direct, "o", 2);
    kvc_delete_result dr;
    kvc_error e;
    cr_assert_eq(kvc_delete(direct, "o", 1, NULL, 5000, &dr, &e), 0, "%s", e.message);
    int64_t r3 = dr.header.revision;
    kvc_delete_result_free(&dr);
    /* a put on another key, watched by a plain watcher on a second stream: once it has it,
     * everything before it reached the proxy's fan-out */
    conn_open(&cs[1]);
    send_create(&cs[1], "p", NULL, 0, 0);
    pump_until(cs, 2, created_cb, 0, 10000, "the marker's Created");
    put(direct, "p", 0);
    uint64_t end = kvt_now_ms() + 10000;
    while (cs[1].w[0].n < 1 && kvt_now_ms() < end) {
        pump(cs, 2);
        kvt_sleep_ms(1);
    }
    kvt_sleep_ms(200);
    pump(cs, 2);
    cr_assert_eq(cs[1].w[0].n, 1, "the marker event");
    cr_assert_eq(cs[0].bad, 0);
    for (int i = 0; i < nw; i++) {
        wst *w = &cs[0].w[i];
        cr_assert_eq(w->n, want[i].n, "watcher %d (prev_kv %d, filters %d): %d events", i,
                     want[i].prev_kv, want[i].filters, w->n);
        cr_assert_eq(w->prevs, want[i].prevs, "watcher %d: %d events with prev_kv", i, w->prevs);
        cr_assert_eq(w->dels, want[i].dels, "watcher %d: %d deletes", i, w->dels);
        if (w->n == 3)
            cr_assert(w->revs[0] == r1 && w->revs[1] == r2 && w->revs[2] == r3);
    }
    cr_assert_eq(cs[0].w[2].revs[0], r3, "NOPUT: the delete only");
    cr_assert(cs[0].w[3].revs[0] == r1 && cs[0].w[3].revs[1] == r2, "NODELETE: the puts");
    fprintf(stderr,
            "proxy_watch: %d watchers of one key with different options: 1 upstream "
            "watcher, each saw its own events\n",
            nw);
    conn_close(&cs[0]);
    conn_close(&cs[1]);
    kvc_close(direct);
}

typedef struct truth {
    pthread_mutex_t mu;
    int n;
    int64_t revs[MAXEV];
} truth;

static void truth_cb(void *arg, const kvc_watch_response *r)
{
    truth *t = arg;
    pthread_mutex_lock(&t->mu);
    for (size_t i = 0; i < r->n_events && t->n < MAXEV; i++)
        t->revs[t->n++] = r->events[i].kv.mod_revision;
    pthread_mutex_unlock(&t->mu);
}

/* The events of [key, end) after rev, from member i's own history. */
static int history(int i, const char *key, const char *end, int64_t rev, int want, int64_t *out)
{
    kvc_client *c = px_client(g_c.m[i].endpoint);
    static truth t;
    memset(&t, 0, sizeof t);
    pthread_mutex_init(&t.mu, NULL);
    kvc_watch_opts o = {.start_revision = rev + 1};
    if (end) {
        o.range_end = (const uint8_t *)end;
        o.range_end_len = strlen(end);
    }
    kvc_watch *w = NULL;
    kvc_error e;
    cr_assert_eq(kvc_watch_create(c, key, strlen(key), &o, 5000, truth_cb, &t, &w, NULL, &e), 0,
                 "%s", e.message);
    uint64_t stop = kvt_now_ms() + 5000;
    int n = 0;
    while (kvt_now_ms() < stop) {
        pthread_mutex_lock(&t.mu);
        n = t.n;
        pthread_mutex_unlock(&t.mu);
        if (n >= want)
            break;
        kvt_sleep_ms(10);
    }
    kvt_sleep_ms(100);
    pthread_mutex_lock(&t.mu);
    n = t.n;
    memcpy(out, t.revs, sizeof t.revs);
    pthread_mutex_unlock(&t.mu);
    kvc_watch_cancel(w);
    kvc_close(c);
    return n;
}

#define FCONN 4
#define FBEFORE 20
#define FAFTER 30

Test(proxy_watch, failover_keeps_client_streams_without_gap_or_repeat, .fini = fini, .timeout = 240)
{
    cr_assert_eq(px_cluster_start(&g_c, 3), 0, "cluster");
    int up = 0; /* the member the proxy watches through: first in --endpoints */
    int order[3] = {0, 1, 2};
    /* one upstream watcher per upstream stream: two streams to resume */
    static const char *const flags[] = {"--max-watchers-per-upstream-stream=1", NO_CACHE, NULL};
    cr_assert_eq(px_start(&g_x, &g_c, order, 3, flags), 0, "proxy");
    static conn cs[FCONN];
    for (int i = 0; i < FCONN; i++) {
        conn_open(&cs[i]);
        if (i < 2) {
            send_create(&cs[i], "f", NULL, 0, 0);
        } else {
            send_create(&cs[i], "g", "h", 1, 0);
        }
    }
    pump_until(cs, FCONN, created_cb, 0, 10000, "Created");
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_watch_upstream_watchers"), 2);
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_watch_upstream_streams"), 2);
    int64_t crev = cs[0].w[0].created_rev;
    int64_t grev = cs[2].w[0].created_rev;

    const char *eps[] = {g_c.m[1].endpoint, g_c.m[2].endpoint};
    kvc_config cfg;
    kvc_config_default(&cfg);
    cfg.endpoints = eps;
    cfg.n_endpoints = 2;
    kvc_client *wr = NULL;
    kvc_error e;
    cr_assert_eq(kvc_open(&wr, &cfg, &e), 0, "%s", e.message);
    int nf = 0, ng = 0;
    for (int i = 0; i < FBEFORE; i++) {
        put(wr, i % 2 ? "f" : "g1", i);
        nf += i % 2;
        ng += !(i % 2);
    }
    pump_until(cs, 2, all_have, nf, 10000, "events before the kill");
    /* the last revision before the kill has two events of g..h (one Txn): the resume starts
     * after it, and neither event comes again */
    kvc_txn *t = kvc_txn_new();
    cr_assert_not_null(t);
    cr_assert_eq(kvc_txn_put(t, KVC_TXN_SUCCESS, "g1", 2, "t", 1, NULL), 0);
    cr_assert_eq(kvc_txn_put(t, KVC_TXN_SUCCESS, "g2", 2, "t", 1, NULL), 0);
    kvc_txn_result tr;
    cr_assert_eq(kvc_txn_commit(wr, t, 0, 10000, &tr, &e), 0, "txn: %s", e.message);
    kvc_txn_result_free(&tr);
    kvc_txn_free(t);
    ng += 2;
    pump_until(cs + 2, 2, all_have, ng, 10000, "the Txn's two events");

    cr_assert_eq(kvt_member_kill9(&g_c, up), 0);
    for (int i = FBEFORE; i < FBEFORE + FAFTER; i++) {
        char v[32];
        int vl = snprintf(v, sizeof v, "v%d", i);
        const char *k = i % 2 ? "f" : "g2";
        int rc = -1;
        uint64_t end = kvt_now_ms() + 15000;
        while (rc != 0 && kvt_now_ms() < end) {
            /* a put refused for no leader was not applied; one that timed out may have
             * been: the history below is the truth either way */
            rc = kvc_put(wr, k, strlen(k), v, (size_t)vl, NULL, 2000, NULL, &e);
            if (rc != 0)
                kvt_sleep_ms(100);
        }
        cr_assert_eq(rc, 0, "put after the kill: %s", e.message);
        pump(cs, FCONN);
    }
    int64_t hf[MAXEV], hg[MAXEV];
    int tf = history(1, "f", NULL, crev, nf + FAFTER / 2, hf);
    int tg = history(1, "g", "h", grev, ng + FAFTER / 2, hg);
    cr_assert_geq(tf, nf + FAFTER / 2);
    cr_assert_geq(tg, ng + FAFTER / 2);
    uint64_t end = kvt_now_ms() + 20000;
    while (kvt_now_ms() < end && !(cs[0].w[0].n >= tf && cs[1].w[0].n >= tf && cs[2].w[0].n >= tg &&
                                   cs[3].w[0].n >= tg)) {
        pump(cs, FCONN);
        kvt_sleep_ms(1);
    }
    kvt_sleep_ms(300);
    pump(cs, FCONN);
    for (int i = 0; i < FCONN; i++) {
        wst *w = &cs[i].w[0];
        const int64_t *h = i < 2 ? hf : hg;
        int want = i < 2 ? tf : tg;
        cr_assert_eq(cs[i].bad, 0, "conn %d: unexpected response", i);
        cr_assert_eq(kv_it_grpc_conn_closed(cs[i].g), 0, "conn %d closed", i);
        cr_assert(!cs[i].st->closed, "conn %d: client stream ended", i);
        cr_assert_eq(w->n, want, "conn %d: %d events, history has %d", i, w->n, want);
        for (int k = 0; k < want; k++)
            cr_assert_eq(w->revs[k], h[k], "conn %d event %d: rev %lld, history %lld", i, k,
                         (long long)w->revs[k], (long long)h[k]);
        if (i >= 2)
            cr_assert_eq(w->prevs, want - 2, "prev_kv kept (all but the first puts of g1, g2)");
    }
    double opened = px_metric(&g_x, "kvd_proxy_watch_upstream_streams_opened_total");
    double resumed = px_metric(&g_x, "kvd_proxy_watch_resumed_total");
    cr_assert_geq(opened, 4, "both upstream streams re-opened");
    cr_assert_geq(resumed, 2);
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_watch_upstream_streams"), 2);
    fprintf(stderr,
            "proxy_watch: kill -9 of the upstream member: 4 client streams kept, %d + %d events "
            "each as in the history, no gap, no repeat; upstream streams opened %.0f, watchers "
            "resumed %.0f\n",
            tf, tg, opened, resumed);
    for (int i = 0; i < FCONN; i++)
        conn_close(&cs[i]);
    kvc_close(wr);
}

Test(proxy_watch, failover_onto_a_compacted_revision_answers_compacted, .fini = fini,
     .timeout = 240)
{
    cr_assert_eq(px_cluster_start(&g_c, 3), 0, "cluster");
    int order[3] = {0, 1, 2};
    cr_assert_eq(px_start(&g_x, &g_c, order, 3, no_cache), 0, "proxy");
    static conn cs[1];
    conn_open(&cs[0]);
    send_create(&cs[0], "c", NULL, 0, 0);
    pump_until(cs, 1, created_cb, 0, 10000, "Created");
    const char *eps[] = {g_c.m[1].endpoint, g_c.m[2].endpoint};
    kvc_config cfg;
    kvc_config_default(&cfg);
    cfg.endpoints = eps;
    cfg.n_endpoints = 2;
    kvc_client *wr = NULL;
    kvc_error e;
    cr_assert_eq(kvc_open(&wr, &cfg, &e), 0, "%s", e.message);
    for (int i = 0; i < 3; i++)
        put(wr, "c", i);
    pump_until(cs, 1, all_have, 3, 10000, "3 events");
    /* Two more watchers join the upstream watcher (start revision > its last revision): one
     * from a revision above the one compacted below, one from that revision itself (a member
     * compacts a watcher only below it). The compaction is not theirs. */
    int64_t crev = cs[0].w[0].revs[2] + 5, ahead = cs[0].w[0].revs[2] + 20;
    double coalesced = px_metric(&g_x, "kvd_proxy_watch_coalesced_total");
    send_create(&cs[0], "c", NULL, 0, ahead);
    send_create(&cs[0], "c", NULL, 0, crev);
    pump_until(cs, 1, created_cb, 0, 10000, "Created of the watchers ahead");
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_watch_coalesced_total"), coalesced + 2,
                 "the watchers ahead joined the upstream watcher");
    cr_assert_eq(kvt_member_pause(&g_c, 0), 0);
    int64_t rev = 0;
    for (int i = 3; i < 8; i++) {
        int rc = -1;
        uint64_t end = kvt_now_ms() + 15000;
        while (rc != 0 && kvt_now_ms() < end) {
            char v[8];
            int vl = snprintf(v, sizeof v, "v%d", i);
            kvc_put_result pr;
            rc = kvc_put(wr, "c", 1, v, (size_t)vl, NULL, 2000, &pr, &e);
            if (rc == 0) {
                rev = pr.header.revision;
                kvc_put_result_free(&pr);
            } else {
                kvt_sleep_ms(100);
            }
        }
        cr_assert_eq(rc, 0, "put with the member stopped: %s", e.message);
    }
    cr_assert_geq(rev, crev);
    cr_assert_eq(kvc_compact(wr, crev, 1, 0, 5000, NULL, &e), 0, "compact: %s", e.message);
    pump(cs, 1);
    cr_assert_eq(cs[0].w[0].n, 3, "no event while the member is stopped");
    cr_assert_eq(kvt_member_kill9(&g_c, 0), 0);
    uint64_t end = kvt_now_ms() + 20000;
    while (!cs[0].w[0].canceled && kvt_now_ms() < end) {
        pump(cs, 1);
        kvt_sleep_ms(1);
    }
    cr_assert(cs[0].w[0].canceled, "compacted answer relayed");
    cr_assert_eq(cs[0].w[0].compact_rev, crev, "compact_revision %lld, compacted at %lld",
                 (long long)cs[0].w[0].compact_rev, (long long)crev);
    cr_assert_lt(rev, ahead);
    /* The watchers ahead stay and get their events from their start revision, exactly once. */
    int64_t last = rev;
    while (last < ahead + 2)
        last = put(wr, "c", (int)(last - rev));
    const int64_t from[2] = {ahead, crev};
    int want[2];
    for (int i = 0; i < 2; i++) {
        wst *w = &cs[0].w[1 + i];
        want[i] = (int)(last - from[i] + 1);
        end = kvt_now_ms() + 20000;
        while (w->n < want[i] && !w->canceled && kvt_now_ms() < end) {
            pump(cs, 1);
            kvt_sleep_ms(1);
        }
        cr_assert(!w->canceled, "the watcher from %lld was canceled (compact_revision %lld)",
                  (long long)from[i], (long long)w->compact_rev);
        cr_assert_eq(w->n, want[i], "the watcher from %lld got %d events, want %d",
                     (long long)from[i], w->n, want[i]);
        for (int k = 0; k < want[i]; k++)
            cr_assert_eq(w->revs[k], from[i] + k);
    }
    /* The compacted upstream watcher was canceled on the member, which keeps a compacted
     * watcher until its client cancels it: the member holds the re-created one alone. */
    double held = 0;
    end = kvt_now_ms() + 5000;
    while ((held = member_watchers(1) + member_watchers(2)) != 1 && kvt_now_ms() < end)
        kvt_sleep_ms(50);
    cr_assert_eq(held, 1, "watchers on the surviving members: %.0f", held);
    cr_assert_eq(cs[0].bad, 0);
    cr_assert(!cs[0].st->closed, "the client stream stays open");
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_watchers"), 2);
    fprintf(stderr,
            "proxy_watch: resume onto compacted revision: compact_revision %lld relayed; the "
            "watchers from %lld and %lld stayed and got their %d and %d events\n",
            (long long)crev, (long long)ahead, (long long)crev, want[0], want[1]);
    conn_close(&cs[0]);
    kvc_close(wr);
}

#define BCONN 64
#define BPUT 200

/* The fan-out at a larger scale, with its cost: 512 watchers of one key over 64 connections,
 * 200 puts; every watcher gets all 200, in order; the proxy's CPU per client message. */
Test(proxy_watch, fan_out_512_watchers, .fini = fini, .timeout = 180)
{
    cr_assert_eq(px_cluster_start(&g_c, 1), 0, "cluster");
    cr_assert_eq(px_start(&g_x, &g_c, NULL, 0, no_cache), 0, "proxy");
    static conn cs[BCONN];
    for (int i = 0; i < BCONN; i++) {
        conn_open(&cs[i]);
        for (int k = 0; k < MAXW; k++)
            send_create(&cs[i], "b", NULL, 0, 0);
    }
    pump_until(cs, BCONN, created_cb, 0, 20000, "512 Created");
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_watch_upstream_watchers"), 1);
    cr_assert_eq(member_watchers(0), 1);
    kvc_client *direct = px_client(g_c.m[0].endpoint);
    static int64_t revs[BPUT];
    double cpu0 = px_metric(&g_x, "process_cpu_seconds_total");
    uint64_t t0 = kvt_now_ms();
    for (int i = 0; i < BPUT; i++) {
        revs[i] = put(direct, "b", i);
        pump(cs, BCONN);
    }
    pump_until(cs, BCONN, all_have, BPUT, 30000, "200 events at 512 watchers");
    uint64_t took = kvt_now_ms() - t0;
    double cpu = px_metric(&g_x, "process_cpu_seconds_total") - cpu0;
    kvt_sleep_ms(200);
    pump(cs, BCONN);
    for (int i = 0; i < BCONN; i++) {
        cr_assert_eq(cs[i].bad, 0);
        for (int k = 0; k < MAXW; k++) {
            cr_assert_eq(cs[i].w[k].n, BPUT, "conn %d watcher %d: %d events", i, k, cs[i].w[k].n);
            for (int e = 0; e < BPUT; e++)
                cr_assert_eq(cs[i].w[k].revs[e], revs[e]);
        }
    }
    double msgs = (double)BCONN * MAXW * BPUT;
    fprintf(stderr,
            "proxy_watch: 512 watchers x 200 puts (1 upstream watcher): %.0f client messages in "
            "%llu ms (puts included), proxy CPU %.2f s = %.1f us per client message\n",
            msgs, (unsigned long long)took, cpu, cpu * 1e6 / msgs);
    for (int i = 0; i < BCONN; i++)
        conn_close(&cs[i]);
    kvc_close(direct);
}

#define NKEYS 2500

typedef struct many {
    int created, bad;
    int64_t ev_id[8], ev_rev[8];
    int n_ev;
} many;

static void many_msg(void *arg, const uint8_t *m, size_t n)
{
    many *x = arg;
    Etcdserverpb__WatchResponse *r = etcdserverpb__watch_response__unpack(NULL, n, m);
    if (!r) {
        x->bad++;
        return;
    }
    if (r->created) {
        x->bad += r->canceled || r->watch_id != x->created;
        x->created++;
    } else {
        for (size_t i = 0; i < r->n_events && x->n_ev < 8; i++) {
            x->ev_id[x->n_ev] = r->watch_id;
            x->ev_rev[x->n_ev++] = r->events[i]->kv->mod_revision;
        }
    }
    etcdserverpb__watch_response__free_unpacked(r, NULL);
}

/* Watchers of keys <prefix>0000 .. <prefix>(n-1) on c's one stream; waits until all are
 * created (60 s) and checks that none was refused. */
static void create_distinct(conn *c, many *x, char prefix, int n)
{
    for (int i = 0; i < n; i++) {
        char k[16];
        snprintf(k, sizeof k, "%c%04d", prefix, i);
        send_create(c, k, NULL, 0, 0);
    }
    uint64_t end = kvt_now_ms() + 60000;
    while (x->created < n && x->bad == 0 && kvt_now_ms() < end) {
        (void)kv_it_grpc_pump(c->g, 5);
        (void)kv_it_grpc_stream_take(c->st, many_msg, x);
    }
    cr_assert_eq(x->bad, 0, "a create was refused (or answered out of order)");
    cr_assert_eq(x->created, n, "%d Created", x->created);
}

/* A put on each of the 3 keys <prefix><keys[i]>, straight to member m, reaches exactly
 * watcher keys[i] with the put's revision. */
static void events_routed(conn *c, many *x, int m, char prefix, const int keys[3])
{
    kvc_client *direct = px_client(g_c.m[m].endpoint);
    int64_t revs[3];
    for (int i = 0; i < 3; i++) {
        char k[16];
        snprintf(k, sizeof k, "%c%04d", prefix, keys[i]);
        revs[i] = put(direct, k, i);
    }
    uint64_t end = kvt_now_ms() + 10000;
    while (x->n_ev < 3 && kvt_now_ms() < end) {
        (void)kv_it_grpc_pump(c->g, 5);
        (void)kv_it_grpc_stream_take(c->st, many_msg, x);
    }
    cr_assert_eq(x->n_ev, 3);
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(x->ev_id[i], keys[i], "event %d to watcher %lld", i, (long long)x->ev_id[i]);
        cr_assert_eq(x->ev_rev[i], revs[i]);
    }
    kvc_close(direct);
}

/* 2,500 watchers of distinct keys on one client stream: 2,500 upstream watchers over 3
 * upstream streams (--max-watchers-per-upstream-stream=1000), each event to its watcher. */
Test(proxy_watch, distinct_keys_spread_over_upstream_streams, .fini = fini, .timeout = 180)
{
    cr_assert_eq(px_cluster_start(&g_c, 1), 0, "cluster");
    static const char *const flags[] = {"--max-watchers-per-upstream-stream=1000", NO_CACHE, NULL};
    cr_assert_eq(px_start(&g_x, &g_c, NULL, 0, flags), 0, "proxy");
    static conn c;
    static many x;
    conn_open(&c);
    create_distinct(&c, &x, 'd', NKEYS);
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_watch_upstream_watchers"), NKEYS);
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_watch_upstream_streams"), 3);
    cr_assert_eq(member_watchers(0), NKEYS);
    events_routed(&c, &x, 0, 'd', (const int[3]){0, 1500, NKEYS - 1});
    conn_close(&c);
    uint64_t end = kvt_now_ms() + 10000;
    while (member_watchers(0) != 0 && kvt_now_ms() < end)
        kvt_sleep_ms(50);
    cr_assert_eq(member_watchers(0), 0, "every upstream watcher canceled");
}

#define NSMALL 1000
#define MEMBER_CAP 300

/* A member whose --max-watchers-per-stream (300) is below the proxy's
 * --max-watchers-per-upstream-stream (10,000): 1,000 watchers of distinct keys through the
 * proxy are all created, none refused. The member refuses the 301st create on the first
 * upstream stream; the proxy learns its limit (kvd_proxy_watch_upstream_stream_cap 300) and
 * spreads the 1,000 upstream watchers over 4 streams, and each event reaches its watcher. */
Test(proxy_watch, member_watchers_per_stream_limit_is_learned, .fini = fini, .timeout = 180)
{
    if (kvt_target_from_env() != KV_TEST_SERVER_KVD)
        cr_skip_test("kvd's --max-watchers-per-stream");
    static const char *const member_flags[] = {"--max-watchers-per-stream=300", NULL};
    one_member_and_proxy(member_flags);
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_watch_upstream_stream_cap"), 10000);
    static conn c;
    static many x;
    conn_open(&c);
    create_distinct(&c, &x, 's', NSMALL);
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_watch_upstream_stream_cap"), MEMBER_CAP);
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_watch_upstream_watchers"), NSMALL);
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_watch_upstream_streams"), 4);
    cr_assert_eq(member_watchers(0), NSMALL);
    events_routed(&c, &x, 0, 's', (const int[3]){0, MEMBER_CAP + 1, NSMALL - 1});
    conn_close(&c);
}

/* The learned limit is the member's, not the cluster's: 3 members, the proxy's first endpoint
 * m0 with --max-watchers-per-stream=300, m1 and m2 with kvd's default (10,000). 1,000
 * watchers of distinct keys through the proxy: kvd_proxy_watch_upstream_stream_cap 300, 4
 * upstream streams on m0. kill -9 of m0: the proxy fails over, the cap goes back to the
 * flag's 10,000 before the streams for the next member are opened, and the 1,000 upstream
 * watchers are resumed there on ONE stream (without the reset: 4 streams, cap 300 for
 * ever); every watcher is still there and each put reaches its own watcher. */
Test(proxy_watch, learned_watchers_per_stream_limit_resets_on_failover, .fini = fini,
     .timeout = 240)
{
    if (kvt_target_from_env() != KV_TEST_SERVER_KVD)
        cr_skip_test("kvd's --max-watchers-per-stream");
    kvt_cluster_opts o;
    kvt_cluster_opts_default(&o, 3);
    cr_assert_eq(kvt_cluster_init(&g_c, &o), 0);
    static const char *const m0_flags[] = {"--max-watchers-per-stream=300", NULL};
    g_c.m[0].args = m0_flags; /* m1, m2: the default */
    cr_assert_eq(kvt_cluster_start(&g_c, 60000), 0, "cluster");
    int order[3] = {0, 1, 2}; /* m0 first in --endpoints: the member the proxy uses first */
    cr_assert_eq(px_start(&g_x, &g_c, order, 3, no_cache), 0, "proxy");
    static conn c;
    static many x;
    conn_open(&c);
    create_distinct(&c, &x, 'r', NSMALL);
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_watch_upstream_stream_cap"), MEMBER_CAP);
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_watch_upstream_streams"), 4);
    cr_assert_eq(member_watchers(0), NSMALL, "the proxy watches through m0");

    cr_assert_eq(kvt_member_kill9(&g_c, 0), 0);
    /* failed over: every upstream watcher resumed on a survivor (m1, the next endpoint, or
     * m2 if the proxy's client moved on once more) and the upstream streams settled */
    uint64_t end = kvt_now_ms() + 30000;
    double on1 = 0, on2 = 0, streams = -1, cap = -1;
    for (;;) {
        (void)kv_it_grpc_pump(c.g, 0);
        (void)kv_it_grpc_stream_take(c.st, many_msg, &x);
        on1 = member_watchers(1);
        on2 = member_watchers(2);
        streams = px_metric(&g_x, "kvd_proxy_watch_upstream_streams");
        cap = px_metric(&g_x, "kvd_proxy_watch_upstream_stream_cap");
        if ((on1 + on2 == NSMALL && (on1 == 0 || on2 == 0)) || kvt_now_ms() >= end)
            break;
        kvt_sleep_ms(100);
    }
    double resumed = px_metric(&g_x, "kvd_proxy_watch_resumed_total");
    fprintf(stderr,
            "proxy_watch: kill -9 of m0 (--max-watchers-per-stream=300): upstream watchers on "
            "m1 %.0f, m2 %.0f; upstream streams %.0f, stream cap %.0f, resumed %.0f\n",
            on1, on2, streams, cap, resumed);
    cr_assert_eq(on1 + on2, NSMALL, "every upstream watcher resumed on one survivor");
    cr_assert_geq(resumed, NSMALL);
    cr_assert_eq(cap, 10000, "learned cap back to the flag after the failover: %.0f", cap);
    cr_assert_eq(streams, 1, "the resumed watchers on one upstream stream: %.0f", streams);
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_watch_upstream_watchers"), NSMALL);
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_watchers"), NSMALL, "no client watcher lost");
    cr_assert(!c.st->closed, "the client stream stays open");
    cr_assert_geq(kvt_cluster_wait_writable(&g_c, 15000), 0, "a leader after the kill");
    events_routed(&c, &x, on1 ? 1 : 2, 'r', (const int[3]){0, MEMBER_CAP + 1, NSMALL - 1});
    cr_assert_eq(x.bad, 0);
    conn_close(&c);
}

/* A failover re-sends every upstream watcher's create at once. With
 * --max-upstream-send-bytes=4096 the 1,000 creates (about 25 KiB) do not fit in the new
 * stream's send buffer: the ones past it wait for it to drain, and the client stream and its
 * 1,000 watchers stay. The creates went up one at a time before the kill (a client stream's
 * creates are answered in order), so the small buffer was never full then. When a resumed
 * create that did not fit ended its client streams, this stream was closed and every watcher
 * lost. */
Test(proxy_watch, a_failover_larger_than_the_upstream_send_buffer_keeps_every_watcher, .fini = fini,
     .timeout = 240)
{
    cr_assert_eq(px_cluster_start(&g_c, 3), 0, "cluster");
    int order[3] = {0, 1, 2};
    static const char *const small[] = {NO_CACHE, "--max-upstream-send-bytes=4096", NULL};
    cr_assert_eq(px_start(&g_x, &g_c, order, 3, small), 0, "proxy");
    static conn c;
    static many x;
    conn_open(&c);
    create_distinct(&c, &x, 'b', NSMALL);
    cr_assert_eq(member_watchers(0), NSMALL, "the proxy watches through m0");
    double resumed0 = px_metric(&g_x, "kvd_proxy_watch_resumed_total");

    cr_assert_eq(kvt_member_kill9(&g_c, 0), 0);
    uint64_t t0 = kvt_now_ms(), end = t0 + 60000;
    double on1 = 0, on2 = 0;
    for (;;) {
        (void)kv_it_grpc_pump(c.g, 0);
        (void)kv_it_grpc_stream_take(c.st, many_msg, &x);
        on1 = member_watchers(1);
        on2 = member_watchers(2);
        if (on1 + on2 >= NSMALL || c.st->closed || kvt_now_ms() >= end)
            break;
        kvt_sleep_ms(100);
    }
    double resumed = px_metric(&g_x, "kvd_proxy_watch_resumed_total") - resumed0;
    fprintf(stderr,
            "proxy_watch: kill -9 of m0 with --max-upstream-send-bytes=4096: %.0f upstream "
            "watchers resumed on m1 + m2 (%.0f + %.0f) in %llu ms\n",
            resumed, on1, on2, (unsigned long long)(kvt_now_ms() - t0));
    cr_assert(!c.st->closed, "the client stream was ended");
    cr_assert_eq(on1 + on2, NSMALL, "every upstream watcher resumed");
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_watchers"), NSMALL, "no client watcher lost");
    cr_assert_geq(kvt_cluster_wait_writable(&g_c, 15000), 0, "a leader after the kill");
    events_routed(&c, &x, on1 ? 1 : 2, 'b', (const int[3]){0, NSMALL / 2, NSMALL - 1});
    cr_assert_eq(x.bad, 0);
    conn_close(&c);
}

#define BIGV (700 * 1024)

typedef struct frag_log {
    int n;
    int64_t id[8];
    size_t events[8];
    int fragment[8];
    int created, bad;
} frag_log;

static void frag_msg(void *arg, const uint8_t *m, size_t n)
{
    frag_log *x = arg;
    Etcdserverpb__WatchResponse *r = etcdserverpb__watch_response__unpack(NULL, n, m);
    if (!r) {
        x->bad++;
        return;
    }
    if (r->created) {
        x->bad += r->canceled;
        x->created++;
    } else if (r->n_events && x->n < 8) {
        x->id[x->n] = r->watch_id;
        x->events[x->n] = r->n_events;
        x->fragment[x->n++] = r->fragment;
    }
    etcdserverpb__watch_response__free_unpacked(r, NULL);
}

static void send_create_frag(conn *c, const char *key, const char *end, int fragment)
{
    Etcdserverpb__WatchCreateRequest cr = ETCDSERVERPB__WATCH_CREATE_REQUEST__INIT;
    Etcdserverpb__WatchRequest r = ETCDSERVERPB__WATCH_REQUEST__INIT;
    cr.key.data = (uint8_t *)key;
    cr.key.len = strlen(key);
    cr.range_end.data = (uint8_t *)end;
    cr.range_end.len = strlen(end);
    cr.fragment = fragment;
    r.request_union_case = ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_CREATE_REQUEST;
    r.create_request = &cr;
    uint8_t b[64];
    size_t n = etcdserverpb__watch_request__pack(&r, b);
    cr_assert_eq(kv_it_grpc_send_msg(c->st, b, n, 0), 0);
    c->nw++;
}

/* A watcher that asks for fragments shares the upstream watcher of one that does not: a Txn
 * of 3 values of 700 KiB (one revision, one upstream response of 2.1 MB; the member takes
 * requests up to 4 MiB) reaches the plain watcher in one message of 3 events and the fragment
 * watcher, as a member splits at etcd's default 1.5 MiB, in two: 2 events (fragment set),
 * then 1 (not set). One upstream watcher. */
Test(proxy_watch, fragment_watcher_shares_and_gets_fragments, .fini = fini, .timeout = 180)
{
    if (kvt_target_from_env() != KV_TEST_SERVER_KVD)
        cr_skip_test("kvd's proxy (etcd 3.4's proxy does not share or split fragment watchers)");
    static const char *const member_flags[] = {"--max-request-bytes=4194304", NULL};
    one_member_and_proxy(member_flags);
    static conn plain, frag;
    conn_open(&plain);
    conn_open(&frag);
    send_create_frag(&plain, "big/", "big0", 0);
    static frag_log xp, xf;
    uint64_t end = kvt_now_ms() + 10000;
    while (xp.created < 1 && kvt_now_ms() < end) {
        (void)kv_it_grpc_pump(plain.g, 5);
        (void)kv_it_grpc_stream_take(plain.st, frag_msg, &xp);
    }
    send_create_frag(&frag, "big/", "big0", 1);
    while (xf.created < 1 && kvt_now_ms() < end) {
        (void)kv_it_grpc_pump(frag.g, 5);
        (void)kv_it_grpc_stream_take(frag.st, frag_msg, &xf);
    }
    cr_assert_eq(xp.created + xf.created, 2, "both created");
    cr_assert_eq(xp.bad + xf.bad, 0);
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_watch_upstream_watchers"), 1, "one upstream watcher");

    char *v = malloc(BIGV);
    cr_assert_not_null(v);
    memset(v, 'v', BIGV);
    kvc_txn *t = kvc_txn_new();
    cr_assert_not_null(t);
    const char *keys[3] = {"big/a", "big/b", "big/c"};
    for (int i = 0; i < 3; i++)
        cr_assert_eq(kvc_txn_put(t, KVC_TXN_SUCCESS, keys[i], strlen(keys[i]), v, BIGV, NULL), 0);
    kvc_client *direct = px_client(g_c.m[0].endpoint);
    kvc_txn_result tr;
    kvc_error e;
    cr_assert_eq(kvc_txn_commit(direct, t, 0, 10000, &tr, &e), 0, "txn: %s", e.message);
    kvc_txn_result_free(&tr);
    kvc_txn_free(t);
    free(v);
    end = kvt_now_ms() + 15000;
    while ((xp.n < 1 || xf.n < 2) && kvt_now_ms() < end) {
        (void)kv_it_grpc_pump(plain.g, 5);
        (void)kv_it_grpc_stream_take(plain.st, frag_msg, &xp);
        (void)kv_it_grpc_pump(frag.g, 5);
        (void)kv_it_grpc_stream_take(frag.st, frag_msg, &xf);
    }
    kvt_sleep_ms(200);
    (void)kv_it_grpc_pump(plain.g, 5);
    (void)kv_it_grpc_stream_take(plain.st, frag_msg, &xp);
    (void)kv_it_grpc_pump(frag.g, 5);
    (void)kv_it_grpc_stream_take(frag.st, frag_msg, &xf);
    fprintf(stderr,
            "proxy_watch: fragments: plain %d message(s) (%zu events), fragment watcher %d\n", xp.n,
            xp.n ? xp.events[0] : 0, xf.n);
    cr_assert_eq(xp.n, 1, "plain watcher: %d messages", xp.n);
    cr_assert_eq(xp.events[0], 3);
    cr_assert_eq(xp.fragment[0], 0);
    cr_assert_eq(xf.n, 2, "fragment watcher: %d messages", xf.n);
    cr_assert_eq(xf.events[0], 2);
    cr_assert_eq(xf.fragment[0], 1);
    cr_assert_eq(xf.events[1], 1);
    cr_assert_eq(xf.fragment[1], 0);
    cr_assert_eq(xp.bad + xf.bad, 0);
    conn_close(&plain);
    conn_close(&frag);
    kvc_close(direct);
}

/* Requests behind a create still waiting for its Created (a member that does not answer)
 * are not copied without end: one is held, and the stream's input pauses, so the rest waits
 * in the transport under its window and buffer bounds (kvd_proxy_watchers counts the held
 * copies); once the member answers, every request is served, in order. */
Test(proxy_watch, requests_behind_a_blocked_create_wait_in_the_transport, .fini = fini,
     .timeout = 120)
{
    cr_assert_eq(px_cluster_start(&g_c, 1), 0, "cluster");
    cr_assert_eq(px_start(&g_x, &g_c, NULL, 0, no_cache), 0, "proxy");
    static conn cs[1];
    conn_open(&cs[0]);
    send_create(&cs[0], "b0", NULL, 0, 0);
    pump_until(cs, 1, created_cb, 0, 10000, "Created");
    cr_assert_eq(kvt_member_pause(&g_c, 0), 0);
    for (int i = 1; i < MAXW; i++) {
        char k[8];
        snprintf(k, sizeof k, "b%d", i);
        send_create(&cs[0], k, NULL, 0, 0);
    }
    uint64_t end = kvt_now_ms() + 1000;
    while (kvt_now_ms() < end) {
        pump(cs, 1);
        kvt_sleep_ms(5);
    }
    double held = px_metric(&g_x, "kvd_proxy_watchers");
    cr_assert_eq(kvt_member_resume(&g_c, 0), 0);
    pump_until(cs, 1, created_cb, 0, 20000, "every Created once the member answers");
    fprintf(stderr, "proxy_watch: %d creates behind a blocked one: %.0f watchers and copies held\n",
            MAXW - 2, held);
    cr_assert_leq(held, 3, "requests behind a blocked create were copied: %.0f", held);
    cr_assert_eq(cs[0].bad, 0);
    cr_assert_eq(px_metric(&g_x, "kvd_proxy_watchers"), MAXW);
    conn_close(&cs[0]);
}
