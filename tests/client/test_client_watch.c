/*
 * test_client_watch.c - the libkvclient watch API: events in order with
 * their revisions and prev_kv; many watchers share one stream and one connection; resume
 * after a server restart from the last seen revision with no duplicate and no missed event;
 * the compacted case reported (at creation and on resume); a response larger than the
 * client's bound cancels the watcher with a visible error instead of being buffered;
 * a slow callback loses nothing; lease expiry gives DELETE events (one revision) to a prefix
 * watcher.
 *
 * Runs against KV_TEST_SERVER=etcd|kvd. Until kvd serves Watch, every test fails at its
 * first kvc_watch_create with a message saying the server answered UNIMPLEMENTED.
 */
#include "testutil.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static struct kvt_server srv;

static void setup(void)
{
    cr_assert_eq(kvt_server_start(&srv), 0, "server start");
}

static void teardown(void)
{
    kvt_server_stop(&srv);
}

TestSuite(client_watch, .init = setup, .fini = teardown, .timeout = 90);

/* What a callback saw: a copy of every event (key, type, revisions), bounded. */
#define REC_MAX 20000
struct rec_ev {
    char key[64];
    char prev[64];
    int type, has_prev;
    int64_t mod, create, version;
};
struct rec {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct rec_ev *ev;
    size_t n;
    int canceled, status, progress;
    int64_t compact_rev, progress_rev;
    char reason[256];
    unsigned sleep_ms; /* slow consumer */
};

static void rec_init(struct rec *r)
{
    memset(r, 0, sizeof *r);
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    r->ev = calloc(REC_MAX, sizeof *r->ev);
    cr_assert(r->ev);
}

static void rec_free(struct rec *r)
{
    free(r->ev);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
}

static void copy_str(char *dst, size_t cap, const uint8_t *p, size_t n)
{
    if (n >= cap)
        n = cap - 1;
    memcpy(dst, p, n);
    dst[n] = '\0';
}

static void on_watch(void *arg, const kvc_watch_response *wr)
{
    struct rec *r = arg;
    if (r->sleep_ms)
        kvt_sleep_ms(r->sleep_ms);
    pthread_mutex_lock(&r->mu);
    for (size_t i = 0; i < wr->n_events && r->n < REC_MAX; i++) {
        struct rec_ev *e = &r->ev[r->n++];
        const kvc_event *we = &wr->events[i];
        copy_str(e->key, sizeof e->key, we->kv.key, we->kv.key_len);
        e->type = we->type;
        e->mod = we->kv.mod_revision;
        e->create = we->kv.create_revision;
        e->version = we->kv.version;
        e->has_prev = we->has_prev_kv;
        if (we->has_prev_kv)
            copy_str(e->prev, sizeof e->prev, we->prev_kv.value, we->prev_kv.value_len);
    }
    if (wr->progress_notify) {
        r->progress++;
        r->progress_rev = wr->header.revision;
    }
    if (wr->canceled) {
        r->canceled = 1;
        r->status = wr->status;
        r->compact_rev = wr->compact_revision;
        snprintf(r->reason, sizeof r->reason, "%s", wr->cancel_reason);
    }
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

/* Waits until r has n events (or is canceled) for at most ms; returns the count. */
static size_t rec_wait(struct rec *r, size_t n, unsigned ms)
{
    uint64_t end = kvt_now_ms() + ms;
    pthread_mutex_lock(&r->mu);
    while (r->n < n && !r->canceled && kvt_now_ms() < end) {
        pthread_mutex_unlock(&r->mu);
        kvt_sleep_ms(5);
        pthread_mutex_lock(&r->mu);
    }
    size_t got = r->n;
    pthread_mutex_unlock(&r->mu);
    return got;
}

static int rec_canceled(struct rec *r, unsigned ms)
{
    uint64_t end = kvt_now_ms() + ms;
    for (;;) {
        pthread_mutex_lock(&r->mu);
        int c = r->canceled;
        pthread_mutex_unlock(&r->mu);
        if (c || kvt_now_ms() >= end)
            return c;
        kvt_sleep_ms(5);
    }
}

/* kvc_watch_create, failing the test with a clear message (UNIMPLEMENTED: a kvd without the
 * Watch service). */
static kvc_watch *watch(kvc_client *c, const char *key, const kvc_watch_opts *o, struct rec *r,
                        kvc_header *created)
{
    kvc_watch *w = NULL;
    kvc_error e;
    memset(&e, 0, sizeof e);
    int rc = kvc_watch_create(c, key, strlen(key), o, 10000, on_watch, r, &w, created, &e);
    cr_assert_eq(rc, 0, "kvc_watch_create(%s) on %s failed: %d %s%s", key, srv.kind, rc, e.message,
                 rc == -KVC_UNIMPLEMENTED
                     ? " -- the server answered UNIMPLEMENTED for Watch: a server without the "
                       "watch service"
                     : "");
    return w;
}

static int64_t put(kvc_client *c, const char *k, const char *v)
{
    kvc_put_result pr;
    kvc_error e;
    cr_assert_eq(kvc_put(c, k, strlen(k), v, strlen(v), NULL, 5000, &pr, &e), 0, "put %s: %s", k,
                 e.message);
    int64_t rev = pr.header.revision;
    kvc_put_result_free(&pr);
    return rev;
}

static int64_t del(kvc_client *c, const char *k)
{
    kvc_delete_result dr;
    kvc_error e;
    cr_assert_eq(kvc_delete(c, k, strlen(k), NULL, 5000, &dr, &e), 0, "del %s: %s", k, e.message);
    int64_t rev = dr.header.revision;
    kvc_delete_result_free(&dr);
    return rev;
}

Test(client_watch, events_in_order_with_revisions_and_prev_kv)
{
    kvc_client *c = kvt_client(srv.endpoint);
    struct rec r;
    rec_init(&r);
    put(c, "w/a", "0");
    kvc_watch_opts o = {.prefix = 1, .prev_kv = 1};
    kvc_header h;
    kvc_watch *w = watch(c, "w/", &o, &r, &h);
    cr_assert_gt(h.revision, 0, "created header revision");
    cr_assert_eq(kvc_watch_next_revision(w), h.revision + 1);
    int64_t r1 = put(c, "w/a", "1");
    int64_t r2 = put(c, "w/b", "2");
    int64_t r3 = del(c, "w/a");
    put(c, "other", "x"); /* outside the prefix */
    int64_t r4 = put(c, "w/c", "3");
    cr_assert_eq(rec_wait(&r, 4, 5000), 4);
    kvt_sleep_ms(200);
    cr_assert_eq(r.n, 4, "exactly 4 events, got %zu", r.n);
    cr_assert_str_eq(r.ev[0].key, "w/a");
    cr_assert_eq(r.ev[0].type, KVC_EVENT_PUT);
    cr_assert_eq(r.ev[0].mod, r1);
    cr_assert_eq(r.ev[0].version, 2);
    cr_assert(r.ev[0].has_prev);
    cr_assert_str_eq(r.ev[0].prev, "0");
    cr_assert_eq(r.ev[1].mod, r2);
    cr_assert_eq(r.ev[1].create, r2);
    cr_assert_not(r.ev[1].has_prev);
    cr_assert_eq(r.ev[2].type, KVC_EVENT_DELETE);
    cr_assert_eq(r.ev[2].mod, r3);
    cr_assert_str_eq(r.ev[2].prev, "1");
    cr_assert_str_eq(r.ev[3].key, "w/c");
    cr_assert_eq(r.ev[3].mod, r4);
    cr_assert_eq(kvc_watch_next_revision(w), r4 + 1);

    /* history: a second watcher from revision r1 replays the same events */
    struct rec r_hist;
    rec_init(&r_hist);
    kvc_watch_opts oh = {.prefix = 1, .start_revision = r1, .filters = KVC_FILTER_NODELETE};
    kvc_watch *wh = watch(c, "w/", &oh, &r_hist, NULL);
    cr_assert_eq(rec_wait(&r_hist, 3, 5000), 3);
    cr_assert_eq(r_hist.ev[0].mod, r1);
    cr_assert_eq(r_hist.ev[1].mod, r2);
    cr_assert_eq(r_hist.ev[2].mod, r4, "the DELETE is filtered out");

    /* progress request: every synced watcher hears the current revision */
    kvc_error e;
    cr_assert_eq(kvc_watch_progress(c, &e), 0, "%s", e.message);
    uint64_t end = kvt_now_ms() + 5000;
    while (kvt_now_ms() < end) {
        pthread_mutex_lock(&r.mu);
        int p = r.progress;
        pthread_mutex_unlock(&r.mu);
        if (p)
            break;
        kvt_sleep_ms(10);
    }
    cr_assert_eq(r.progress, 1, "progress notification after kvc_watch_progress");
    cr_assert_eq(r.progress_rev, r4, "progress at the store revision");

    /* cancelled watcher hears nothing more */
    kvc_watch_cancel(w);
    put(c, "w/d", "4");
    cr_assert_eq(rec_wait(&r_hist, 4, 5000), 4);
    cr_assert_eq(r.n, 4);
    kvc_watch_cancel(wh);
    kvc_close(c);
    rec_free(&r);
    rec_free(&r_hist);
    cr_assert_eq(kvt_leaks(), 0, "leak-free (under ASan)");
}

Test(client_watch, many_watchers_share_one_stream)
{
    kvc_client *c = kvt_client(srv.endpoint);
    enum { N = 50 };
    static struct rec r[N];
    kvc_watch *w[N];
    for (int i = 0; i < N; i++) {
        rec_init(&r[i]);
        char key[16];
        snprintf(key, sizeof key, "m/%d", i % 5);
        kvc_watch_opts o = {.prefix = (i % 2)};
        w[i] = watch(c, i % 2 ? "m/" : key, &o, &r[i], NULL);
    }
    for (int i = 0; i < 5; i++) {
        char key[16];
        snprintf(key, sizeof key, "m/%d", i);
        put(c, key, "v");
    }
    for (int i = 0; i < N; i++) {
        size_t want = i % 2 ? 5 : 1;
        cr_assert_eq(rec_wait(&r[i], want, 5000), want, "watcher %d", i);
    }
    cr_assert_eq(kvt_count_established(srv.client_port), 1, "one connection for all watchers");
    for (int i = 0; i < N; i++) {
        kvc_watch_cancel(w[i]);
        rec_free(&r[i]);
    }
    kvc_close(c);
}

/* A client whose reconnect is slow, so that writes land while its watch stream is down. */
static kvc_client *slow_reconnect_client(void)
{
    const char *eps[] = {srv.endpoint};
    kvc_config cfg;
    kvc_config_default(&cfg);
    cfg.endpoints = eps;
    cfg.n_endpoints = 1;
    cfg.backoff_base_ms = 4000; /* next attempt 2-4 s after a failure */
    cfg.backoff_max_ms = 4000;
    kvc_client *c;
    kvc_error e;
    cr_assert_eq(kvc_open(&c, &cfg, &e), 0, "%s", e.message);
    return c;
}

Test(client_watch, resume_after_server_restart_without_duplicates_or_misses)
{
    kvc_client *wc = slow_reconnect_client();
    struct rec r;
    rec_init(&r);
    kvc_watch_opts o = {.prefix = 1};
    kvc_watch *w = watch(wc, "r/", &o, &r, NULL);
    kvc_client *pc = kvt_client(srv.endpoint);
    int64_t revs[60];
    int n = 0;
    char key[32];
    for (; n < 20; n++) {
        snprintf(key, sizeof key, "r/%d", n);
        revs[n] = put(pc, key, "v");
    }
    cr_assert_eq(rec_wait(&r, 20, 5000), 20);
    /* Restart: the watch client waits >= 2 s between connection attempts; the writer writes at
     * once, so these events happen while the watcher's stream is down. */
    kvt_server_signal(&srv, SIGKILL);
    cr_assert_eq(kvt_server_restart(&srv), 0, "restart");
    for (; n < 40; n++) {
        snprintf(key, sizeof key, "r/%d", n);
        revs[n] = put(pc, key, "v");
    }
    int64_t gap_end = revs[n - 1];
    cr_assert_eq(rec_wait(&r, 40, 15000), 40, "events written while disconnected are replayed");
    for (; n < 60; n++) {
        snprintf(key, sizeof key, "r/%d", n);
        revs[n] = put(pc, key, "v");
    }
    cr_assert_eq(rec_wait(&r, 60, 10000), 60);
    kvt_sleep_ms(300);
    cr_assert_eq(r.n, 60, "no duplicate: %zu events for 60 puts", r.n);
    for (int i = 0; i < 60; i++)
        cr_assert_eq(r.ev[i].mod, revs[i], "event %d: revision %lld, expected %lld", i,
                     (long long)r.ev[i].mod, (long long)revs[i]);
    kvc_stats st;
    kvc_stats(wc, &st);
    cr_assert_geq(st.reconnects, 1, "the watch client reconnected");
    cr_assert_gt(gap_end, revs[19]);
    cr_assert_not(r.canceled);
    kvc_watch_cancel(w);
    kvc_close(pc);
    kvc_close(wc);
    rec_free(&r);
    cr_assert_eq(kvt_leaks(), 0, "leak-free (under ASan)");
}

static void compact(kvc_client *c, int64_t rev)
{
    kvc_error e;
    cr_assert_eq(kvc_compact(c, rev, 1, 0, 5000, NULL, &e), 0, "compact: %s", e.message);
}

Test(client_watch, compacted_start_revision_is_reported)
{
    kvc_client *c = kvt_client(srv.endpoint);
    int64_t first = put(c, "c/a", "1");
    put(c, "c/a", "2");
    int64_t last = put(c, "c/a", "3");
    compact(c, last);
    struct rec r;
    rec_init(&r);
    kvc_watch_opts o = {.start_revision = first};
    kvc_watch *w = watch(c, "c/a", &o, &r, NULL);
    cr_assert(rec_canceled(&r, 5000), "compacted watcher is canceled");
    cr_assert_eq(r.compact_rev, last);
    cr_assert_eq(r.status, -KVC_OUT_OF_RANGE);
    cr_assert_str_eq(r.reason, "etcdserver: mvcc: required revision has been compacted");
    cr_assert_eq(r.n, 0);
    kvc_watch_cancel(w);
    kvc_close(c);
    rec_free(&r);
}

Test(client_watch, compaction_while_disconnected_is_reported_on_resume)
{
    kvc_client *wc = slow_reconnect_client();
    kvc_client *pc = kvt_client(srv.endpoint);
    struct rec r;
    rec_init(&r);
    kvc_watch_opts o = {.prefix = 1};
    kvc_watch *w = watch(wc, "k/", &o, &r, NULL);
    put(pc, "k/1", "a");
    cr_assert_eq(rec_wait(&r, 1, 5000), 1);
    kvt_server_signal(&srv, SIGKILL);
    cr_assert_eq(kvt_server_restart(&srv), 0, "restart");
    put(pc, "k/2", "b");
    int64_t last = put(pc, "k/3", "c");
    compact(pc, last);
    cr_assert(rec_canceled(&r, 15000), "resumed watcher is canceled: its revision was compacted");
    cr_assert_eq(r.compact_rev, last);
    cr_assert_eq(r.n, 1, "nothing delivered past the compaction");
    kvc_watch_cancel(w);
    kvc_close(pc);
    kvc_close(wc);
    rec_free(&r);
    cr_assert_eq(kvt_leaks(), 0, "leak-free (under ASan)");
}

Test(client_watch, oversized_response_cancels_with_a_visible_error)
{
    const char *eps[] = {srv.endpoint};
    kvc_config cfg;
    kvc_config_default(&cfg);
    cfg.endpoints = eps;
    cfg.n_endpoints = 1;
    cfg.max_response_bytes = 8192;
    kvc_client *wc;
    kvc_error e;
    cr_assert_eq(kvc_open(&wc, &cfg, &e), 0, "%s", e.message);
    kvc_client *pc = kvt_client(srv.endpoint);
    struct rec r;
    rec_init(&r);
    kvc_watch_opts o = {.prefix = 1, .fragment = 1};
    kvc_watch *w = watch(wc, "big/", &o, &r, NULL);
    put(pc, "big/small", "x");
    cr_assert_eq(rec_wait(&r, 1, 5000), 1);
    /* one txn, one revision, ~40 KB of events: more than the client accepts */
    static char val[2048];
    memset(val, 'v', sizeof val - 1);
    kvc_txn *t = kvc_txn_new();
    for (int i = 0; i < 20; i++) {
        char key[32];
        snprintf(key, sizeof key, "big/%02d", i);
        cr_assert_eq(kvc_txn_put(t, KVC_TXN_SUCCESS, key, strlen(key), val, strlen(val), NULL), 0);
    }
    kvc_txn_result tr;
    cr_assert_eq(kvc_txn_commit(pc, t, 0, 5000, &tr, &e), 0, "%s", e.message);
    kvc_txn_result_free(&tr);
    kvc_txn_free(t);
    cr_assert(rec_canceled(&r, 5000), "the watcher is canceled, not buffered without bound");
    cr_assert_eq(r.status, -KVC_RESOURCE_EXHAUSTED, "status %d (%s)", r.status, r.reason);
    cr_assert(strstr(r.reason, "exceeds"), "reason: %s", r.reason);
    cr_assert_eq(r.n, 1, "no partial delivery of the txn's events");
    kvc_watch_cancel(w);
    kvc_close(pc);
    kvc_close(wc);
    rec_free(&r);
    cr_assert_eq(kvt_leaks(), 0, "leak-free (under ASan)");
}

Test(client_watch, slow_callback_loses_nothing)
{
    kvc_client *wc = kvt_client(srv.endpoint);
    kvc_client *pc = kvt_client(srv.endpoint);
    struct rec r;
    rec_init(&r);
    r.sleep_ms = 2; /* per response: far slower than the writer below */
    kvc_watch_opts o = {.prefix = 1};
    kvc_watch *w = watch(wc, "s/", &o, &r, NULL);
    enum { N = 1000 };
    int64_t first = 0, last = 0;
    for (int i = 0; i < N; i++) {
        char key[32];
        snprintf(key, sizeof key, "s/%d", i % 37);
        last = put(pc, key, "v");
        if (!first)
            first = last;
    }
    cr_assert_eq(rec_wait(&r, N, 30000), N, "all %d events delivered", N);
    for (int i = 0; i < N; i++)
        cr_assert_eq(r.ev[i].mod, first + i);
    cr_assert_not(r.canceled);
    kvc_watch_cancel(w);
    kvc_close(pc);
    kvc_close(wc);
    rec_free(&r);
    cr_assert_eq(kvt_leaks(), 0, "leak-free (under ASan)");
}

Test(client_watch, close_with_live_watchers_frees_them)
{
    kvc_client *c = kvt_client(srv.endpoint);
    struct rec r;
    rec_init(&r);
    kvc_watch_opts o = {.prefix = 1};
    kvc_watch *w1 = watch(c, "x/", &o, &r, NULL);
    kvc_watch *w2 = watch(c, "x/", &o, &r, NULL);
    (void)w1;
    (void)w2;
    put(c, "x/1", "v");
    cr_assert_eq(rec_wait(&r, 2, 5000), 2);
    kvc_close(c); /* frees both watchers; no callback after this */
    rec_free(&r);
    cr_assert_eq(kvt_leaks(), 0);
}

Test(client_watch, lease_expiry_delivers_delete_events)
{
    kvc_client *c = kvt_client(srv.endpoint);
    struct rec r;
    rec_init(&r);
    kvc_lease_grant_result g;
    kvc_error e;
    cr_assert_eq(kvc_lease_grant(c, 2, 0, 0, 5000, &g, &e), 0, "grant: %s", e.message);
    kvc_watch_opts o = {.prefix = 1, .prev_kv = 1};
    kvc_watch *w = watch(c, "agents/", &o, &r, NULL);
    kvc_put_opts po = {.lease = g.id};
    cr_assert_eq(kvc_put(c, "agents/a1", 9, "up", 2, &po, 5000, NULL, &e), 0, "%s", e.message);
    cr_assert_eq(kvc_put(c, "agents/a2", 9, "up", 2, &po, 5000, NULL, &e), 0, "%s", e.message);
    /* no keepalive: the lease expires (etcd may round a short TTL up) */
    cr_assert_eq(rec_wait(&r, 4, 30000), 4, "two PUTs then two DELETEs on expiry, got %zu", r.n);
    cr_assert_eq(r.ev[2].type, KVC_EVENT_DELETE);
    cr_assert_eq(r.ev[3].type, KVC_EVENT_DELETE);
    cr_assert_eq(r.ev[2].mod, r.ev[3].mod, "one revoke: one revision");
    cr_assert_str_eq(r.ev[2].prev, "up");
    kvc_watch_cancel(w);
    kvc_close(c);
    rec_free(&r);
}

/* ---- a TCP proxy the test can cut: the watch client's connection goes through it, the
 * writer's does not, so writes land deterministically while the watcher is disconnected ---- */

#define PX_MAX 16
struct proxy {
    int lfd, port, upstream;
    pthread_t th;
    pthread_mutex_t mu;
    int blocked, stop, cut;
    int a[PX_MAX], b[PX_MAX]; /* client side, server side; -1 = free */
};

static void *proxy_main(void *arg)
{
    struct proxy *p = arg;
    char buf[65536];
    for (;;) {
        pthread_mutex_lock(&p->mu);
        int stop = p->stop, cut = p->cut, blocked = p->blocked;
        p->cut = 0;
        pthread_mutex_unlock(&p->mu);
        if (stop)
            break;
        if (cut)
            for (int i = 0; i < PX_MAX; i++)
                if (p->a[i] >= 0) {
                    close(p->a[i]);
                    close(p->b[i]);
                    p->a[i] = p->b[i] = -1;
                }
        struct pollfd fds[1 + 2 * PX_MAX];
        int n = 0;
        fds[n++] = (struct pollfd){.fd = p->lfd, .events = POLLIN};
        for (int i = 0; i < PX_MAX; i++)
            if (p->a[i] >= 0) {
                fds[n++] = (struct pollfd){.fd = p->a[i], .events = POLLIN};
                fds[n++] = (struct pollfd){.fd = p->b[i], .events = POLLIN};
            }
        if (poll(fds, (nfds_t)n, 20) <= 0)
            continue;
        if (fds[0].revents & POLLIN) {
            int c = accept(p->lfd, NULL, NULL);
            if (c >= 0 && blocked) {
                close(c); /* refused while blocked */
            } else if (c >= 0) {
                int u = socket(AF_INET, SOCK_STREAM, 0);
                struct sockaddr_in sa = {.sin_family = AF_INET,
                                         .sin_port = htons((uint16_t)p->upstream),
                                         .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
                int slot = -1;
                for (int i = 0; i < PX_MAX && slot < 0; i++)
                    if (p->a[i] < 0)
                        slot = i;
                if (u < 0 || slot < 0 || connect(u, (struct sockaddr *)&sa, sizeof sa) != 0) {
                    close(c);
                    if (u >= 0)
                        close(u);
                } else {
                    p->a[slot] = c;
                    p->b[slot] = u;
                }
            }
        }
        for (int k = 1; k < n; k++) {
            if (!(fds[k].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            for (int i = 0; i < PX_MAX; i++) {
                if (p->a[i] < 0 || (fds[k].fd != p->a[i] && fds[k].fd != p->b[i]))
                    continue;
                int to = fds[k].fd == p->a[i] ? p->b[i] : p->a[i];
                ssize_t r = read(fds[k].fd, buf, sizeof buf);
                if (r <= 0 || write(to, buf, (size_t)r) != r) {
                    close(p->a[i]);
                    close(p->b[i]);
                    p->a[i] = p->b[i] = -1;
                }
                break;
            }
        }
    }
    for (int i = 0; i < PX_MAX; i++)
        if (p->a[i] >= 0) {
            close(p->a[i]);
            close(p->b[i]);
        }
    close(p->lfd);
    return NULL;
}

static void proxy_start(struct proxy *p, int upstream)
{
    memset(p, 0, sizeof *p);
    for (int i = 0; i < PX_MAX; i++)
        p->a[i] = p->b[i] = -1;
    p->upstream = upstream;
    pthread_mutex_init(&p->mu, NULL);
    p->lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof sa;
    cr_assert(p->lfd >= 0 && bind(p->lfd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
              listen(p->lfd, 16) == 0 && getsockname(p->lfd, (struct sockaddr *)&sa, &sl) == 0);
    p->port = ntohs(sa.sin_port);
    cr_assert_eq(pthread_create(&p->th, NULL, proxy_main, p), 0);
}

/* Drop every proxied connection and refuse new ones until proxy_set_blocked(p, 0). */
static void proxy_set_blocked(struct proxy *p, int blocked)
{
    pthread_mutex_lock(&p->mu);
    p->blocked = blocked;
    if (blocked)
        p->cut = 1;
    pthread_mutex_unlock(&p->mu);
    kvt_sleep_ms(100); /* one poll round */
}

static void proxy_stop(struct proxy *p)
{
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->th, NULL);
    pthread_mutex_destroy(&p->mu);
}

static kvc_client *proxied_client(const struct proxy *p)
{
    char ep[32];
    snprintf(ep, sizeof ep, "127.0.0.1:%d", p->port);
    const char *eps[] = {ep};
    kvc_config cfg;
    kvc_config_default(&cfg);
    cfg.endpoints = eps;
    cfg.n_endpoints = 1;
    cfg.backoff_base_ms = 20;
    cfg.backoff_max_ms = 100;
    kvc_client *c;
    kvc_error e;
    cr_assert_eq(kvc_open(&c, &cfg, &e), 0, "%s", e.message);
    return c;
}

Test(client_watch, resume_after_connection_loss_replays_the_gap_exactly)
{
    struct proxy px;
    proxy_start(&px, srv.client_port);
    kvc_client *wc = proxied_client(&px);
    kvc_client *pc = kvt_client(srv.endpoint);
    struct rec r;
    rec_init(&r);
    kvc_watch_opts o = {.prefix = 1};
    kvc_watch *w = watch(wc, "g/", &o, &r, NULL);
    int64_t revs[60];
    char key[32];
    int n = 0;
    for (; n < 20; n++) {
        snprintf(key, sizeof key, "g/%d", n % 7);
        revs[n] = put(pc, key, "v");
    }
    cr_assert_eq(rec_wait(&r, 20, 5000), 20);
    proxy_set_blocked(&px, 1); /* the watcher is disconnected and cannot reconnect */
    for (; n < 40; n++) {
        snprintf(key, sizeof key, "g/%d", n % 7);
        revs[n] = put(pc, key, "v");
    }
    kvt_sleep_ms(300);
    cr_assert_eq(r.n, 20, "nothing can arrive while disconnected");
    proxy_set_blocked(&px, 0);
    cr_assert_eq(rec_wait(&r, 40, 10000), 40, "the 20 events of the gap are replayed");
    for (; n < 60; n++) {
        snprintf(key, sizeof key, "g/%d", n % 7);
        revs[n] = put(pc, key, "v");
    }
    cr_assert_eq(rec_wait(&r, 60, 10000), 60);
    kvt_sleep_ms(300);
    cr_assert_eq(r.n, 60, "no duplicate: %zu events for 60 puts", r.n);
    for (int i = 0; i < 60; i++)
        cr_assert_eq(r.ev[i].mod, revs[i], "event %d: revision %lld, expected %lld", i,
                     (long long)r.ev[i].mod, (long long)revs[i]);
    cr_assert_not(r.canceled);
    kvc_stats st;
    kvc_stats(wc, &st);
    cr_assert_geq(st.reconnects, 1);
    kvc_watch_cancel(w);
    kvc_close(pc);
    kvc_close(wc);
    proxy_stop(&px);
    rec_free(&r);
    cr_assert_eq(kvt_leaks(), 0, "leak-free (under ASan)");
}

Test(client_watch, compaction_during_connection_loss_is_reported)
{
    struct proxy px;
    proxy_start(&px, srv.client_port);
    kvc_client *wc = proxied_client(&px);
    kvc_client *pc = kvt_client(srv.endpoint);
    struct rec r;
    rec_init(&r);
    kvc_watch_opts o = {.prefix = 1};
    kvc_watch *w = watch(wc, "h/", &o, &r, NULL);
    put(pc, "h/1", "a");
    cr_assert_eq(rec_wait(&r, 1, 5000), 1);
    proxy_set_blocked(&px, 1);
    put(pc, "h/2", "b");
    int64_t last = put(pc, "h/3", "c");
    compact(pc, last);
    proxy_set_blocked(&px, 0);
    cr_assert(rec_canceled(&r, 10000), "the resumed watcher is canceled: compacted");
    cr_assert_eq(r.compact_rev, last);
    cr_assert_eq(r.status, -KVC_OUT_OF_RANGE);
    cr_assert_eq(r.n, 1, "nothing delivered past the compaction");
    kvc_watch_cancel(w);
    kvc_close(pc);
    kvc_close(wc);
    proxy_stop(&px);
    rec_free(&r);
}
