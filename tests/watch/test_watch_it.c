/*
 * it_watch: the Watch service of a real kvd process.
 *
 * - etcdctl 3.4 watch (history with --rev, --prefix, ranges, --prev-kv, live events from a
 *   txn and a delete, watch -i, compacted start revision), lock and elect give the same output
 *   against kvd as against a real etcd running the same script (skipped without /usr/bin/etcd).
 * - Lease expiry produces a DELETE event to a prefix watcher.
 * - A watcher that never reads (a grpc_raw stream whose socket the test stops reading) while
 *   WRITE_TXNS x TXN_OPS events are written: kvd's anonymous memory stays bounded, and once the
 *   client reads again it receives every event exactly once, in revision order; a second stalled
 *   watcher overtaken by a compaction gets the compacted response instead.
 * - With every commit held 500 ms after its apply (failpoint), a Watch from before an
 *   acknowledged Compact gets the compacted response at once, never the history's events.
 */
#include <criterion/criterion.h>
#include "kvt_skip.h"
#include <criterion/logging.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "grpc_raw.h"
#include "harness.h"
#include "normalize.h"
#include "rpc.pb-c.h"

#define READY_MS 20000

static void start(kv_it_server *s, kv_it_kind kind, const char *const *extra)
{
    cr_assert_eq(kv_it_server_init(s, kind, extra), 0);
    int rc = kv_it_server_start(s, READY_MS);
    if (rc != 0) {
        char *log = NULL;
        kv_it_server_log(s, &log);
        cr_log_error("server log:\n%s", log ? log : "");
        free(log);
    }
    cr_assert_eq(rc, 0, "%s did not start", kv_it_kind_name(kind));
}

/* Runs a /bin/sh script with EP (endpoint) and CTL (etcdctl) set; returns stdout+stderr with
 * the Go client's JSON log lines removed, normalized. */
static char *run_script(const kv_it_server *s, const char *script, uint32_t timeout_ms)
{
    char ctl[PATH_MAX], ep[128], ctlenv[PATH_MAX + 8];
    cr_assert_eq(kv_it_etcdctl_bin(ctl, sizeof(ctl)), 0);
    snprintf(ep, sizeof(ep), "EP=%s", s->endpoint);
    snprintf(ctlenv, sizeof(ctlenv), "CTL=%s", ctl);
    const char *env[] = {ep, ctlenv, "ETCDCTL_API=3", NULL};
    const char *argv[] = {"/bin/sh", "-c", script, NULL};
    kv_it_cmd_result r;
    cr_assert_eq(kv_it_run(argv, env, NULL, 0, timeout_ms, &r), 0);
    cr_assert(!r.timed_out, "script timed out:\n%s", script);
    char *o = kv_it_stderr_lines(r.out);
    char *n = kv_it_normalize(o);
    free(o);
    kv_it_cmd_result_free(&r);
    return n;
}

#define E "\"$CTL\" --endpoints=$EP "
/* Lease ids differ between servers: lock and election keys end in one. */
#define NOLEASE " 2>&1 | grep -v '^{\"level\"' | sed -E 's#/[0-9a-f]+$#/LEASE#'"

static const char *const scenarios[] = {
    /* history */
    E "put foo bar >/dev/null; " E "put foo baz >/dev/null; " E "put a/1 x >/dev/null; " E
      "put a/2 y >/dev/null; " E "del foo >/dev/null; " E "put b z >/dev/null; "
      "printf '\\nput a/3 t1\\nput a/4 t2\\n\\n\\n' | " E "txn 2>&1; "
      "timeout 1.5 " E "watch --rev=1 --prefix a 2>&1; echo rc=$?; "
      "timeout 1.5 " E "watch --rev=2 foo --prev-kv 2>&1; "
      "timeout 1.5 " E "watch --rev=1 a/2 c 2>&1; "
      "timeout 1.5 " E "watch --rev=1 --prefix '' 2>&1; "
      "timeout 1.5 " E "watch --rev=7 --prefix a --prev-kv 2>&1; true",
    /* live events: txn, delete range, prev_kv */
    "(timeout 3 " E "watch --prefix l --prev-kv > live.out 2>&1 &); sleep 1; " E
    "put l/1 one >/dev/null; " E "put l/1 two >/dev/null; "
    "printf '\\nput l/2 a\\nput l/3 b\\ndel l/1\\n\\n\\n' | " E "txn 2>&1; " E
    "del --prefix l >/dev/null; " E
    "put other x >/dev/null; sleep 1.5; cat live.out; rm -f live.out",
    /* interactive */
    E "put i1 v >/dev/null; " E "put i2 w >/dev/null; "
      "(printf 'watch --rev=1 i1\\nwatch --rev=1 --prefix i\\n'; sleep 2) | timeout 1.5 " E
      "watch -i 2>&1 | sort; true",
    /* compacted start revision and a future one */
    E "put c v1 >/dev/null; " E "put c v2 >/dev/null; " E "put c v3 >/dev/null; " E
      "compaction 3 >/dev/null; "
      "timeout 1.5 " E "watch --rev=2 c 2>&1; echo rc=$?; "
      "timeout 1.5 " E "watch --rev=3 c 2>&1; "
      "(timeout 2 " E "watch --rev=6 c > fut.out 2>&1 &); sleep 0.7; " E "put c v4 >/dev/null; " E
      "put c v5 >/dev/null; sleep 1.6; cat fut.out; rm -f fut.out",
    /* lock and elect (clientv3/concurrency wait on watches) */
    E "lock mylock echo got-it" NOLEASE "; "
      "(timeout 4 " E "lock mylock sleep 1.5 >/dev/null 2>&1 &); sleep 0.6; "
      "timeout 5 " E "lock mylock echo second" NOLEASE "; "
      "(timeout 5 " E "elect myelection p1 > el.out 2>&1 &); sleep 0.8; "
      "timeout 2 " E "elect -l myelection" NOLEASE "; "
      "sleep 4; sed -E 's#/[0-9a-f]+$#/LEASE#' el.out | grep -v '^{\"level\"'; rm -f el.out",
};

Test(watch_it, etcdctl_same_output_as_against_etcd, .timeout = 300)
{
    char etcd[PATH_MAX];
    if (kv_it_server_bin(KV_IT_ETCD, etcd, sizeof(etcd)) != 0)
        KVT_SKIP_MISSING("no reference etcd at %s", etcd);
    for (size_t i = 0; i < sizeof(scenarios) / sizeof(scenarios[0]); i++) {
        kv_it_server k, e;
        start(&k, KV_IT_KVD, NULL);
        start(&e, KV_IT_ETCD, NULL);
        char cwd_script[8192];
        /* each run in its own directory for its temp files */
        snprintf(cwd_script, sizeof(cwd_script), "cd %s && %s", k.dir, scenarios[i]);
        char *ok = run_script(&k, cwd_script, 60000);
        snprintf(cwd_script, sizeof(cwd_script), "cd %s && %s", e.dir, scenarios[i]);
        char *oe = run_script(&e, cwd_script, 60000);
        cr_log_info("scenario %zu output (etcd):\n%s", i, oe);
        cr_expect_str_eq(ok, oe, "scenario %zu differs:\n--- kvd\n%s\n--- etcd\n%s", i, ok, oe);
        cr_assert(strlen(oe) > 0);
        free(ok);
        free(oe);
        kv_it_server_destroy(&k);
        kv_it_server_destroy(&e);
    }
}

Test(watch_it, lease_expiry_deletes_reach_prefix_watcher, .timeout = 120)
{
    kv_it_server k;
    start(&k, KV_IT_KVD, NULL);
    char script[4096];
    snprintf(script, sizeof(script),
             "cd %s && L=$(" E "lease grant 2 | awk '{print $2}'); " E
             "put svc/agent1 up --lease=$L >/dev/null; " E "put svc/static x >/dev/null; "
             "(timeout 6 " E "watch --prefix svc/ > w.out 2>&1 &); sleep 5.5; cat w.out",
             k.dir);
    char *o = run_script(&k, script, 60000);
    cr_assert_str_eq(o, "DELETE\nsvc/agent1\n", "got:\n%s", o);
    free(o);
    kv_it_server_destroy(&k);
}

/* ---- a raw HTTP/2 watcher that can stop reading ---- */

/* A raw Watch stream (tests/lib grpc_raw) whose reader the test drives: no pump, no read. */
typedef struct h2w {
    kv_it_grpc *conn;
    kv_it_grpc_stream *st; /* owned by conn */
    int closed;
    /* what was received */
    int created, compacted;
    int64_t compact_rev;
    int64_t next_rev; /* next revision expected (checks order, no gap, no duplicate) */
    int64_t events;
    int sub_seen; /* events seen of revision next_rev - 1 */
    int64_t want_rev;
    kv_it_grpc_stream *st2; /* a second stream on the same connection (limits test) */
    char log[8192];         /* transcript of the responses (protocol comparison test) */
    size_t log_len;
    int n_resp;
    int bad;
    char why[256];
} h2w;

/* Processes every complete response the stream holds. */
static void h2w_parse(h2w *h)
{
    uint8_t *m = NULL;
    size_t ml = 0;
    int rc;
    while ((rc = kv_it_grpc_stream_next(h->st, &m, &ml)) == 1) {
        Etcdserverpb__WatchResponse *r = etcdserverpb__watch_response__unpack(NULL, ml, m);
        free(m);
        cr_assert_not_null(r);
        h->n_resp++;
        if (h->log_len < sizeof(h->log) - 512) {
            int w = snprintf(h->log + h->log_len, sizeof(h->log) - h->log_len,
                             "id=%lld created=%d canceled=%d compact=%lld reason='%s' "
                             "fragment=%d rev=%lld events=",
                             (long long)r->watch_id, r->created, r->canceled,
                             (long long)r->compact_revision, r->cancel_reason, r->fragment,
                             r->header ? (long long)r->header->revision : -1LL);
            h->log_len += (size_t)w;
            for (size_t i = 0; i < r->n_events && h->log_len < sizeof(h->log) - 128; i++) {
                Mvccpb__Event *e = r->events[i];
                w = snprintf(h->log + h->log_len, sizeof(h->log) - h->log_len,
                             "[%d %.*s=%.*s c%lld m%lld v%lld]", e->type, (int)e->kv->key.len,
                             e->kv->key.data, (int)e->kv->value.len, e->kv->value.data,
                             (long long)e->kv->create_revision, (long long)e->kv->mod_revision,
                             (long long)e->kv->version);
                /* a truncated entry (a long value) fills the transcript: stop there */
                h->log_len = w < 0 || (size_t)w >= sizeof(h->log) - h->log_len
                                 ? sizeof(h->log) - 2
                                 : h->log_len + (size_t)w;
            }
            h->log[h->log_len++] = '\n';
            h->log[h->log_len] = 0;
        }
        if (r->created)
            h->created = 1;
        if (r->compact_revision) {
            h->compacted = 1;
            h->compact_rev = r->compact_revision;
        }
        for (size_t i = 0; i < r->n_events; i++) {
            int64_t rev = r->events[i]->kv->mod_revision;
            if (rev == h->next_rev - 1) {
                h->sub_seen++;
            } else if (rev == h->next_rev || h->next_rev == 0) {
                h->next_rev = rev + 1;
                h->sub_seen = 1;
            } else if (!h->bad) {
                h->bad = 1;
                snprintf(h->why, sizeof(h->why), "event of revision %lld, expected %lld",
                         (long long)rev, (long long)h->next_rev);
            }
            h->events++;
        }
        etcdserverpb__watch_response__free_unpacked(r, NULL);
    }
    cr_assert_eq(rc, 0, "watch stream: bad gRPC frame");
}

/* Reads and processes whatever arrives for up to ms (returns early when cond holds). */
static void h2w_pump(h2w *h, int ms, int (*cond)(h2w *))
{
    uint64_t end = kv_it_now_ms() + (uint64_t)ms;
    while (kv_it_now_ms() < end && !(cond && cond(h)) && !h->closed) {
        int rc = kv_it_grpc_pump(h->conn, 50);
        h2w_parse(h);
        if (rc || h->st->closed)
            h->closed = 1;
    }
}

static int is_created(h2w *h)
{
    return h->created;
}

/* A gRPC-framed WatchRequest creating a watcher on prefix, queued on st (no END_STREAM). */
static void send_create(kv_it_grpc_stream *st, const char *prefix, int64_t start_rev)
{
    Etcdserverpb__WatchCreateRequest c = ETCDSERVERPB__WATCH_CREATE_REQUEST__INIT;
    char end[64];
    snprintf(end, sizeof(end), "%s", prefix);
    end[strlen(end) - 1]++;
    c.key = (ProtobufCBinaryData){strlen(prefix), (uint8_t *)prefix};
    c.range_end = (ProtobufCBinaryData){strlen(end), (uint8_t *)end};
    c.start_revision = start_rev;
    Etcdserverpb__WatchRequest r = ETCDSERVERPB__WATCH_REQUEST__INIT;
    r.request_union_case = ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_CREATE_REQUEST;
    r.create_request = &c;
    uint8_t buf[256];
    size_t ml = etcdserverpb__watch_request__get_packed_size(&r);
    cr_assert_leq(ml, sizeof(buf));
    etcdserverpb__watch_request__pack(&r, buf);
    cr_assert_eq(kv_it_grpc_send_msg(st, buf, ml, 0), 0);
}

static kv_it_grpc_stream *start_watch(h2w *h)
{
    kv_it_grpc_stream *st = kv_it_grpc_stream_start(h->conn, "/etcdserverpb.Watch/Watch", NULL);
    cr_assert_not_null(st);
    return st;
}

/* Connects with nghttp2's default windows; rcvbuf > 0 sets a small socket receive buffer. */
static void h2w_connect(h2w *h, uint16_t port, int rcvbuf)
{
    memset(h, 0, sizeof(*h));
    kv_it_grpc_opts o = {.rcvbuf = rcvbuf};
    cr_assert_eq(kv_it_grpc_open_opts(&h->conn, "127.0.0.1", port, 5000, &o), 0);
}

static int has_status2(h2w *h)
{
    return h->st2->grpc_status >= 0;
}

static void h2w_open(h2w *h, uint16_t port, const char *prefix, int64_t start_rev)
{
    h2w_connect(h, port, 4096); /* a small receive buffer, so the stall shows at once */
    h->st = start_watch(h);
    send_create(h->st, prefix, start_rev);
    h2w_pump(h, 5000, is_created);
    cr_assert(h->created, "no created response");
}

static void h2w_close(h2w *h)
{
    kv_it_grpc_close(h->conn);
}

static int64_t rss_anon(pid_t pid)
{
    char p[64], line[256];
    snprintf(p, sizeof(p), "/proc/%d/status", (int)pid);
    FILE *f = fopen(p, "r");
    cr_assert_not_null(f);
    long long kb = -1;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "RssAnon: %lld kB", &kb) == 1)
            break;
    fclose(f);
    return kb * 1024;
}

#define TXN_OPS 128
#define WRITE_TXNS 600 /* 76,800 events of ~300 bytes: ~23 MB of responses */
#define VALUE_LEN 256

static void write_events(kv_it_grpc *g, int txns, int base)
{
    char val[VALUE_LEN];
    memset(val, 'v', sizeof(val));
    for (int t = 0; t < txns; t++) {
        Etcdserverpb__PutRequest puts[TXN_OPS];
        Etcdserverpb__RequestOp ops[TXN_OPS], *pops[TXN_OPS];
        char keys[TXN_OPS][32];
        for (int i = 0; i < TXN_OPS; i++) {
            snprintf(keys[i], sizeof(keys[i]), "s/%d/%d", base + t, i);
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
        uint8_t *buf = malloc(len);
        etcdserverpb__txn_request__pack(&x, buf);
        uint8_t *resp = NULL;
        size_t rlen = 0;
        int st = -1;
        char msg[128];
        int rc = kv_it_grpc_call(g, "/etcdserverpb.KV/Txn", buf, len, &resp, &rlen, 20000, &st, msg,
                                 sizeof(msg));
        free(buf);
        free(resp);
        cr_assert_eq(rc, 0, "txn failed: %d %d %s", rc, st, msg);
    }
}

static int caught_up_one(h2w *h)
{
    return h->bad || h->next_rev > h->want_rev;
}

static int caught_up(h2w *h)
{
    return h->compacted || h->bad || (h->next_rev > h->want_rev && h->sub_seen == TXN_OPS);
}

static int64_t put_one(kv_it_grpc *g, const char *k)
{
    Etcdserverpb__PutRequest p = ETCDSERVERPB__PUT_REQUEST__INIT;
    p.key = (ProtobufCBinaryData){strlen(k), (uint8_t *)k};
    uint8_t buf[128], *resp = NULL;
    size_t len = etcdserverpb__put_request__pack(&p, buf), rlen = 0;
    int st;
    char msg[128];
    cr_assert_eq(kv_it_grpc_call(g, "/etcdserverpb.KV/Put", buf, len, &resp, &rlen, 20000, &st, msg,
                                 sizeof(msg)),
                 0);
    Etcdserverpb__PutResponse *r = etcdserverpb__put_response__unpack(NULL, rlen, resp);
    int64_t rev = r->header->revision;
    etcdserverpb__put_response__free_unpacked(r, NULL);
    free(resp);
    return rev;
}

static void compact(kv_it_grpc *g, int64_t rev)
{
    Etcdserverpb__CompactionRequest c = ETCDSERVERPB__COMPACTION_REQUEST__INIT;
    c.revision = rev;
    uint8_t buf[64], *resp = NULL;
    size_t len = etcdserverpb__compaction_request__pack(&c, buf), rlen = 0;
    int st;
    char msg[128];
    cr_assert_eq(kv_it_grpc_call(g, "/etcdserverpb.KV/Compact", buf, len, &resp, &rlen, 60000, &st,
                                 msg, sizeof(msg)),
                 0, "compact: %s", msg);
    free(resp);
}

static double metric(const kv_it_server *s, const char *name)
{
    int status = 0;
    char *body = NULL;
    cr_assert_eq(kv_it_http_get(s->metrics_port, "/metrics", 5000, &status, &body), 0);
    double v = -1;
    kv_it_metric_value(body, name, &v);
    free(body);
    return v;
}

Test(watch_it, stalled_watcher_bounded_memory_then_caught_up_or_compacted, .timeout = 600)
{
    kv_it_server k;
    const char *extra[] = {"--watch-send-buffer-bytes=262144", NULL};
    start(&k, KV_IT_KVD, extra);
    kv_it_grpc *g;
    cr_assert_eq(kv_it_grpc_open(&g, "127.0.0.1", k.client_port, 5000), 0);
    /* The same write load once without watchers first: kvd's steady-state memory for it (the
     * WAL's in-memory tail of recent entries, 8 MiB, allocator arenas) is then in the baseline,
     * and what grows below is what the stalled watchers cost. */
    write_events(g, WRITE_TXNS, 1000000);
    int64_t r0 = put_one(g, "warmup");

    h2w a, b;
    h2w_open(&a, k.client_port, "s/", 0); /* will catch up */
    h2w_open(&b, k.client_port, "s/", 0); /* will be overtaken by a compaction */
    int64_t base = rss_anon(k.pid);
    /* neither client reads its socket from now on */
    write_events(g, WRITE_TXNS, 0);
    int64_t last = r0 + WRITE_TXNS;
    int64_t grown = rss_anon(k.pid) - base;
    cr_log_info("stalled watchers: %d events written, kvd RssAnon grew %lld KiB, unsynced %.0f, "
                "slow %.0f",
                WRITE_TXNS * TXN_OPS, (long long)(grown / 1024), metric(&k, "kvd_watch_unsynced"),
                metric(&k, "kvd_watch_slow_total"));
    /* ~23 MB of responses per watcher were written; buffered they would be ~46 MB (measured
     * growth after the warm-up: 1.6-1.8 MiB). Under ASan the allocator's quarantine keeps freed
     * memory resident, so only the release build checks. */
#if !defined(__SANITIZE_ADDRESS__)
    cr_assert_lt(grown, 6 << 20, "kvd memory grew %lld bytes with two stalled watchers",
                 (long long)grown);
#endif
    cr_assert_eq(metric(&k, "kvd_watch_unsynced"), 2);
    cr_assert_geq(metric(&k, "kvd_watch_slow_total"), 2);

    /* a: reads again -> every event once, in order */
    a.want_rev = last;
    uint64_t t0 = kv_it_now_ms();
    h2w_pump(&a, 30000, caught_up);
    cr_assert(!a.bad, "%s", a.why);
    if (!kv_it_server_alive(&k)) {
        char *log = NULL;
        kv_it_server_log(&k, &log);
        cr_assert_fail("kvd died: %s", log);
    }
    cr_assert(!a.compacted);
    cr_assert_eq(a.next_rev, last + 1,
                 "next_rev %lld (want %lld), %lld events, closed %d, unsynced %.0f",
                 (long long)a.next_rev, (long long)last + 1, (long long)a.events, a.closed,
                 metric(&k, "kvd_watch_unsynced"));
    cr_assert_eq(a.events, (int64_t)WRITE_TXNS * TXN_OPS);
    cr_log_info("stalled watcher caught up %lld events in %llu ms", (long long)a.events,
                (unsigned long long)(kv_it_now_ms() - t0));
    /* b: a compaction passes it while it is stalled -> compacted response, no silent loss */
    int64_t crev = last - 10;
    compact(g, crev);
    b.want_rev = last;
    h2w_pump(&b, 120000, caught_up);
    cr_assert(!b.bad, "%s", b.why);
    cr_assert(b.compacted || b.next_rev == last + 1, "b neither caught up nor compacted");
    cr_assert(b.compacted, "b was overtaken by the compaction");
    cr_assert_eq(b.compact_rev, crev);
    cr_log_info("overtaken watcher: %lld events, then compacted at %lld", (long long)b.events,
                (long long)b.compact_rev);
    /* whatever b got before the compaction response is a gap-free prefix (checked by bad) */
    cr_assert_eq(metric(&k, "kvd_watch_unsynced"), 0);
    h2w_close(&a);
    h2w_close(&b);
    kv_it_grpc_close(g);
    kv_it_server_destroy(&k);
}

static int compacted_or_event(h2w *h)
{
    return h->compacted || h->events > 0;
}

/* An acknowledged Compact is what the next Watch is created against (etcd: a start revision
 * below it is answered with the compact revision, never with events). The member holds
 * every commit 500 ms after its apply (failpoint): an answer sent before its commit would
 * leave that long a window in which a watcher from before the compaction still got the
 * history's events. */
Test(watch_it, acknowledged_compaction_refuses_an_older_start_at_once, .timeout = 120)
{
    kv_it_server k;
    setenv("KVD_FAILPOINT_LEADER_APPLY_COMMIT_DELAY_MS", "500", 1);
    start(&k, KV_IT_KVD, NULL);
    unsetenv("KVD_FAILPOINT_LEADER_APPLY_COMMIT_DELAY_MS");
    kv_it_grpc *g;
    cr_assert_eq(kv_it_grpc_open(&g, "127.0.0.1", k.client_port, 5000), 0);
    for (int round = 0; round < 3; round++) {
        int64_t first = put_one(g, "c/k"), last = first;
        for (int i = 0; i < 4; i++)
            last = put_one(g, "c/k");
        compact(g, last);
        h2w h;
        h2w_connect(&h, k.client_port, 0);
        h.st = start_watch(&h);
        send_create(h.st, "c/", first);
        h2w_pump(&h, 5000, compacted_or_event);
        cr_assert(!h.bad, "%s", h.why);
        cr_assert_eq(h.events, 0, "round %d: %lld events from before the acknowledged compaction",
                     round, (long long)h.events);
        cr_assert(h.compacted, "round %d: no compacted response", round);
        cr_assert_eq(h.compact_rev, last);
        h2w_close(&h);
    }
    kv_it_grpc_close(g);
    kv_it_server_destroy(&k);
}

Test(watch_it, watch_streams_per_connection_bound, .timeout = 120)
{
    kv_it_server k;
    const char *extra[] = {"--max-watch-streams-per-connection=1", NULL};
    start(&k, KV_IT_KVD, extra);
    h2w a;
    h2w_open(&a, k.client_port, "x/", 0);
    a.st2 = start_watch(&a);
    send_create(a.st2, "y/", 0);
    h2w_pump(&a, 10000, has_status2);
    cr_assert_eq(a.st2->grpc_status, 8, "second watch stream on the connection: grpc-status %d",
                 a.st2->grpc_status);
    cr_assert_eq(metric(&k, "kvd_watch_streams"), 1);
    /* the first stream still works */
    kv_it_grpc *g;
    cr_assert_eq(kv_it_grpc_open(&g, "127.0.0.1", k.client_port, 5000), 0);
    int64_t rev = put_one(g, "x/1");
    a.want_rev = rev;
    h2w_pump(&a, 10000, caught_up_one);
    cr_assert_eq(a.events, 1);
    cr_assert_eq(a.next_rev, rev + 1);
    kv_it_grpc_close(g);
    h2w_close(&a);
    kv_it_server_destroy(&k);
}

static size_t append_req(uint8_t *buf, size_t off, const Etcdserverpb__WatchRequest *r)
{
    size_t ml = etcdserverpb__watch_request__get_packed_size(r);
    buf[off] = 0;
    buf[off + 1] = (uint8_t)(ml >> 24);
    buf[off + 2] = (uint8_t)(ml >> 16);
    buf[off + 3] = (uint8_t)(ml >> 8);
    buf[off + 4] = (uint8_t)ml;
    etcdserverpb__watch_request__pack(r, buf + off + 5);
    return off + 5 + ml;
}

static size_t add_create(uint8_t *buf, size_t off, const char *key, const char *end, int64_t id)
{
    Etcdserverpb__WatchCreateRequest c = ETCDSERVERPB__WATCH_CREATE_REQUEST__INIT;
    c.key = (ProtobufCBinaryData){strlen(key), (uint8_t *)key};
    if (end)
        c.range_end = (ProtobufCBinaryData){strlen(end), (uint8_t *)end};
    c.watch_id = id;
    Etcdserverpb__WatchRequest r = ETCDSERVERPB__WATCH_REQUEST__INIT;
    r.request_union_case = ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_CREATE_REQUEST;
    r.create_request = &c;
    return append_req(buf, off, &r);
}

static int got8(h2w *h)
{
    return h->n_resp >= 8;
}

static int got10(h2w *h)
{
    return h->n_resp >= 10;
}

static int cmp_lines(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The control protocol and one event, as a transcript; event responses (one per watcher, in an
 * order etcd does not define) sorted. Caller frees. */
static char *protocol_transcript(kv_it_kind kind)
{
    kv_it_server k;
    start(&k, kind, NULL);
    h2w h;
    h2w_connect(&h, k.client_port, 0);

    uint8_t *buf = malloc(4096);
    size_t off = 0;
    off = add_create(buf, off, "a", NULL, 0); /* auto id 0 */
    off = add_create(buf, off, "a", "b", 0);  /* auto id 1 */
    off = add_create(buf, off, "c", NULL, 5); /* client id 5 */
    off = add_create(buf, off, "c", NULL, 5); /* duplicate id */
    off = add_create(buf, off, "b", "a", 0);  /* empty range */
    Etcdserverpb__WatchCancelRequest cc = ETCDSERVERPB__WATCH_CANCEL_REQUEST__INIT;
    Etcdserverpb__WatchRequest r = ETCDSERVERPB__WATCH_REQUEST__INIT;
    r.request_union_case = ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_CANCEL_REQUEST;
    r.cancel_request = &cc;
    cc.watch_id = 1;
    off = append_req(buf, off, &r);
    cc.watch_id = 42; /* unknown: no answer */
    off = append_req(buf, off, &r);
    Etcdserverpb__WatchProgressRequest pr = ETCDSERVERPB__WATCH_PROGRESS_REQUEST__INIT;
    r.request_union_case = ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_PROGRESS_REQUEST;
    r.progress_request = &pr;
    off = append_req(buf, off, &r);
    off = add_create(buf, off, "a", NULL, 0); /* auto: next free id */
    h.st = start_watch(&h);
    cr_assert_eq(kv_it_grpc_send_raw(h.st, buf, off, 0), 0); /* the stream stays open */
    free(buf);
    h2w_pump(&h, 10000, got8);
    kv_it_grpc *g;
    cr_assert_eq(kv_it_grpc_open(&g, "127.0.0.1", k.client_port, 5000), 0);
    put_one(g, "a");
    h2w_pump(&h, 10000, got10);
    usleep(300000);
    h2w_pump(&h, 300, NULL); /* nothing more may come */
    kv_it_grpc_close(g);
    /* sort the lines after the 8th (event responses) */
    char *lines[64];
    size_t n = 0;
    for (char *p = strtok(h.log, "\n"); p && n < 64; p = strtok(NULL, "\n"))
        lines[n++] = p;
    if (n > 8)
        qsort(lines + 8, n - 8, sizeof(char *), cmp_lines);
    size_t cap = 16384, len = 0;
    char *out = malloc(cap);
    out[0] = 0;
    for (size_t i = 0; i < n; i++)
        len += (size_t)snprintf(out + len, cap - len, "%s\n", lines[i]);
    h2w_close(&h);
    kv_it_server_destroy(&k);
    return out;
}

Test(watch_it, protocol_same_as_etcd, .timeout = 120)
{
    char etcd[PATH_MAX];
    if (kv_it_server_bin(KV_IT_ETCD, etcd, sizeof(etcd)) != 0)
        KVT_SKIP_MISSING("no reference etcd at %s", etcd);
    char *ok = protocol_transcript(KV_IT_KVD);
    char *oe = protocol_transcript(KV_IT_ETCD);
    cr_log_info("etcd transcript:\n%s", oe);
    cr_expect_str_eq(ok, oe, "--- kvd\n%s\n--- etcd\n%s", ok, oe);
    free(ok);
    free(oe);
}

/* A watch response that can never be sent (over --max-response-bytes) ends the stream with
 * RESOURCE_EXHAUSTED and grpc-go's text, as etcd's stream ends when its send fails; before,
 * the stream stayed open and silent for good. */
Test(watch_it, an_unsendable_response_ends_the_stream, .timeout = 120)
{
    kv_it_server k;
    const char *extra[] = {"--max-response-bytes=65536", NULL};
    start(&k, KV_IT_KVD, extra);
    h2w a;
    h2w_open(&a, k.client_port, "big/", 0);
    kv_it_grpc *g;
    cr_assert_eq(kv_it_grpc_open(&g, "127.0.0.1", k.client_port, 5000), 0);
    static uint8_t val[70000];
    memset(val, 'v', sizeof val);
    Etcdserverpb__PutRequest p = ETCDSERVERPB__PUT_REQUEST__INIT;
    p.key = (ProtobufCBinaryData){5, (uint8_t *)"big/1"};
    p.value = (ProtobufCBinaryData){sizeof val, val};
    size_t len = etcdserverpb__put_request__get_packed_size(&p);
    uint8_t *buf = malloc(len), *resp = NULL;
    cr_assert_not_null(buf);
    etcdserverpb__put_request__pack(&p, buf);
    size_t rlen = 0;
    int st = -1;
    char msg[256];
    cr_assert_eq(kv_it_grpc_call(g, "/etcdserverpb.KV/Put", buf, len, &resp, &rlen, 20000, &st, msg,
                                 sizeof msg),
                 0);
    cr_assert_eq(st, 0, "put: %d %s", st, msg);
    free(buf);
    free(resp);
    h2w_pump(&a, 10000, NULL);
    cr_assert(a.closed, "the watch stream stayed open after a response it cannot send");
    cr_assert_eq(a.st->grpc_status, 8, "grpc-status %d", a.st->grpc_status);
    cr_assert(a.st->grpc_message && strstr(a.st->grpc_message, "trying to send message larger"),
              "%s", a.st->grpc_message ? a.st->grpc_message : "(none)");
    cr_assert_eq(a.events, 0);
    cr_assert_eq(metric(&k, "kvd_watch_streams"), 0);
    kv_it_grpc_close(g);
    h2w_close(&a);
    kv_it_server_destroy(&k);
}
