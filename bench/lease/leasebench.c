/*
 * leasebench: the lease keepalive benchmark (not a test).
 *
 * For each server (kvd, and a single-member etcd 3.4 when /usr/bin/etcd exists, both
 * started the same way by tests/integration/harness.c): grant --leases leases of --ttl
 * seconds, put one key per lease, then keep every lease alive for --duration seconds
 * through one long-lived LeaseKeepAlive stream per connection (--conns connections, leases
 * split evenly over the streams), renewing each lease every TTL/3. One thread, one libuv
 * loop, tests/lib's HTTP/2 client in its non-blocking mode (bench/lease/lbconn.c).
 *
 * Reported per server: leases lost (keys missing at the end, and renewals answered with
 * TTL 0), server CPU seconds over the keepalive phase (utime+stime from /proc/<pid>/stat),
 * RSS before granting and after the keys are in (-> bytes per lease), renewals sent and
 * answered; then the kvd/etcd ratios and the targets (kvd CPU <= etcd/5, <= 300 B per
 * lease).
 *
 * With --members 3 the servers are 3-member kvd and etcd clusters
 * (bench/cluster/cluster.c); the connections are spread over the members, CPU is reported
 * per member, and a probe thread (lbprobe.c) measures put latency on the leader idle and
 * under the keepalive load and counts the peer connections. With --peer-tls both
 * clusters' peer URLs are https:// with certificates made for the run by
 * tests/tls/gen_certs.sh (in a temp dir removed at the end), and the peer TLS handshakes are
 * reported (kvd: kvd_tls_handshakes_total{port="peer"} at the start and end of the window).
 * See bench/lease/README.md.
 *
 * Defaults are a short run (2,000 leases, 15 s). The full run:
 *   leasebench --leases 20000 --duration 60
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "cluster.h"
#include "harness.h"
#include "kvt_proc.h"
#include "kvt_util.h"
#include "lbconn.h"
#include "lbprobe.h"
#include "rpc.pb-c.h"

#define LB_KEY_PREFIX "lb/"
#define LB_PHASE_TIMEOUT_MS 300000u

typedef struct lb_opts {
    size_t leases;
    int ttl;
    int duration;
    int conns;
    int inflight;
    int warm;  /* unary calls per load connection before the RSS baseline */
    int chunk; /* leases granted+put between renewal catch-ups */
    int want_kvd, want_etcd;
    int members;    /* 1: one server (harness.c); 3 or 5: a cluster (bench/cluster/cluster.c) */
    int load_conns; /* connections for the grants/puts (default: --conns) */
    int probe_idle; /* seconds of put probe before the setup (idle latency); 0 = none */
    int probe_ms;   /* put probe interval, ms */
    const char *extra[2]; /* --kvd-args / --etcd-args (cluster mode) */
    int peer_tls;         /* --peer-tls: https:// peer URLs (cluster mode) */
    char cert_dir[1100];  /* gen_certs.sh output for --peer-tls; "" otherwise */
} lb_opts;

/* The servers under test: one (harness.c) or the members of a cluster. Connection k of a
 * kind goes to member (leader + k) % n, so the connections spread evenly and
 * connection 0 is on the leader. */
typedef struct lb_target {
    int kvd; /* kind: kvd (1) or etcd (0) */
    int n, leader;
    uint16_t client[KV_BC_MAX_MEMBERS], metrics[KV_BC_MAX_MEMBERS], peer[KV_BC_MAX_MEMBERS];
    pid_t pid[KV_BC_MAX_MEMBERS];
    kv_bc_cluster *cl; /* NULL for one server */
} lb_target;

typedef struct lb_run lb_run;

/* One connection: a load connection (unary grants/puts) or a keepalive connection (one
 * LeaseKeepAlive stream renewing leases [lo, hi)). */
typedef struct lb_slot {
    lb_run *r;
    lb_conn *c;
    size_t lo, hi;
} lb_slot;

typedef struct lb_item {
    lb_slot *s;
    size_t i;
} lb_item;

enum { PH_IDLE, PH_CONNECT, PH_WARM, PH_GRANT, PH_PUT, PH_COUNT, PH_DRAIN };

struct lb_run {
    uv_loop_t loop;
    const lb_opts *o;
    const lb_target *t;
    lb_slot *load, *ka;
    lb_item *items;
    int64_t *ids;
    uint64_t *due; /* next renewal per lease, ms; 0 = not granted yet */
    int phase;
    size_t next, end, done, want, errors, ready; /* unary work: [next, end) left, want calls */
    int failed, renewing, reset_noted;
    char first_error[160];  /* of the grants and puts */
    char reset_reason[160]; /* why the first keepalive stream the server ended ended */
    size_t *retry, n_retry; /* shed grants/puts waiting for the next tick */
    uint64_t retries, retries_unavail, warm_errors;
    char err[160];
    int64_t key_count, lease_count;
    uint64_t ka_sent, ka_recv, ka_zero, period_ms;
    int64_t *sorted_ids;   /* ids sorted, once the setup is done (NULL before) */
    unsigned char *zeroed; /* per sorted id: answered TTL 0 at least once */
    uv_timer_t tick, timeout, wake;
};

/* Resident memory of pid split as /proc/<pid>/status does: anonymous (heap, stacks) and
 * file-backed (for kvd mostly LMDB's memory map, i.e. page cache). Bytes. */
typedef struct lb_rss {
    uint64_t total, anon, file;
} lb_rss;

typedef struct lb_result {
    int ok;
    char err[256];
    double grant_s, put_s;
    /* fresh; connections open and warm; half / all leases in; end of keepalive */
    lb_rss rss_fresh, rss0, rss_half, rss1, rss2;
    double lease_mem; /* kvd_lease_memory_bytes after grant+put, or -1 */
    double cpu_ka;
    uint64_t ka_sent, ka_recv, ka_zero; /* measured window; ka_zero: whole run */
    uint64_t ka_resets;                 /* keepalive streams ended by the server, whole run */
    uint64_t retries, warm_errors;      /* grants/puts shed and retried; warm-up refusals */
    uint64_t retries_unavail;           /* grants/puts retried after UNAVAILABLE/timeout */
    size_t setup_errors;                /* grants/puts that failed otherwise (not retried) */
    char setup_error[160];
    char reset_reason[160];
    int64_t keys_end, leases_end;
    size_t lost;
    /* cluster and probe figures (also for one server) */
    int kvd, n, leader, leader_end;
    double cpu_m[KV_BC_MAX_MEMBERS]; /* utime+stime over the window, per member */
    lb_rss rss_end_m[KV_BC_MAX_MEMBERS];
    size_t leases_zeroed; /* distinct leases answered TTL 0 after the setup */
    double idle_p50, idle_p99, idle_max, load_p50, load_p99, load_max;
    size_t idle_n, load_n;
    uint64_t idle_err, load_err;
    char probe_error[128];
    lb_peer_stats peers_idle, peers_load;
    /* kvd metrics summed over members: window deltas of the forwarding counters, end
     * values of the others; -1 when absent */
    double fwd_renewals, fwd_batches, fwd_shed, fwd_timeouts, fwd_retried, fwd_resent;
    double fwd_coalesced;
    double expired, revoked, peer_connected, ka_shed;
    double heap_m[KV_BC_MAX_MEMBERS];
    /* --peer-tls, summed over members, at the start (0) and end (1) of the window; -1 when
     * absent. kvd: kvd_tls_handshakes_total / kvd_tls_handshake_failures_total
     * {port="peer"} and kvd_peer_connects_total. */
    double hs[2], hs_fail[2], connects[2];
    char hs_metrics[160]; /* etcd: metric names containing "handshake", "" if none */
} lb_result;

static uint64_t now_ms(void)
{
    return kv_it_now_ms();
}

static int read_rss(pid_t pid, lb_rss *out)
{
    char path[64], line[256];
    memset(out, 0, sizeof(*out));
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -errno;
    while (fgets(line, sizeof(line), f)) {
        unsigned long long kb;
        if (sscanf(line, "VmRSS: %llu kB", &kb) == 1)
            out->total = kb * 1024u;
        else if (sscanf(line, "RssAnon: %llu kB", &kb) == 1)
            out->anon = kb * 1024u;
        else if (sscanf(line, "RssFile: %llu kB", &kb) == 1)
            out->file = kb * 1024u;
    }
    fclose(f);
    return 0;
}

static void set_err(lb_run *r, const char *what, int code)
{
    if (!r->failed) {
        r->failed = 1;
        snprintf(r->err, sizeof(r->err), "%s (%d)", what, code);
    }
    uv_stop(&r->loop);
}

static void on_conn_event(lb_conn *c, void *arg, int err)
{
    lb_slot *s = arg;
    (void)c;
    set_err(s->r, "connection failed", err);
}

/* First renewal of lease i: a deterministic point in (0, period] after its grant, so the
 * renewals spread evenly whatever the grant rate. */
static uint64_t first_due(const lb_run *r, size_t i, uint64_t now)
{
    uint64_t h = (uint64_t)i * 0x9E3779B97F4A7C15ull;
    return now + 1 + (h >> 33) % r->period_ms;
}

static void pump(lb_slot *s);

static void on_unary(lb_conn *c, void *arg, int status, const char *gmsg, const uint8_t *msg,
                     size_t len)
{
    lb_item *it = arg;
    lb_slot *s = it->s;
    lb_run *r = s->r;
    (void)c;
    int shed = status != 0 && strstr(gmsg, "too many requests");
    /* UNAVAILABLE ("leader changed", "no leader", transport) or a timeout: a cluster
     * changing leader. The call may have been applied; a retried grant then leaves an
     * orphan lease without a key (it expires), a retried put is idempotent. */
    int unavail = status == 14 || status == 4 || status == -1 ||
                  (status != 0 && (strstr(gmsg, "leader") || strstr(gmsg, "timed out")));
    if ((shed || unavail) && (r->phase == PH_GRANT || r->phase == PH_PUT) &&
        r->n_retry < r->o->leases) {
        /* Overload shed by the server (etcd: more than 5000 writes between commit and
         * apply; kvd: --max-pending-proposals) or a leader change: retry on the next
         * tick, as a client would. */
        r->retry[r->n_retry++] = it->i;
        if (shed)
            r->retries++;
        else
            r->retries_unavail++;
        return;
    }
    if (status != 0 && r->phase == PH_WARM) {
        r->warm_errors++; /* warm-up writes only load the server */
    } else if (status != 0) {
        if (!r->errors++)
            snprintf(r->first_error, sizeof(r->first_error), "grpc-status %d \"%s\"", status, gmsg);
    } else if (r->phase == PH_GRANT) {
        Etcdserverpb__LeaseGrantResponse *g =
            etcdserverpb__lease_grant_response__unpack(NULL, len, msg);
        if (g && g->id) {
            r->ids[it->i] = g->id;
            r->due[it->i] = first_due(r, it->i, now_ms());
        } else {
            r->errors++;
        }
        if (g)
            etcdserverpb__lease_grant_response__free_unpacked(g, NULL);
    } else if (r->phase == PH_COUNT) {
        if (it->i == 0) {
            Etcdserverpb__RangeResponse *rr = etcdserverpb__range_response__unpack(NULL, len, msg);
            r->key_count = rr ? rr->count : -1;
            if (rr)
                etcdserverpb__range_response__free_unpacked(rr, NULL);
        } else {
            Etcdserverpb__LeaseLeasesResponse *l =
                etcdserverpb__lease_leases_response__unpack(NULL, len, msg);
            r->lease_count = l ? (int64_t)l->n_leases : -1;
            if (l)
                etcdserverpb__lease_leases_response__free_unpacked(l, NULL);
        }
    }
    r->done++;
    if (r->next == r->end && r->done == r->want)
        uv_stop(&r->loop);
    else
        pump(s);
}

/* Starts the phase's call number i on s. */
static int submit(lb_slot *s, size_t i)
{
    lb_run *r = s->r;
    uint8_t buf[128];
    {
        lb_item *it = r->phase == PH_WARM ? &r->items[0] : &r->items[i];
        it->s = s;
        it->i = i;
        size_t len;
        const char *method;
        if (r->phase == PH_WARM) {
            /* A write that changes nothing (Txn whose compare fails, empty failure branch),
             * at the same concurrency as the grants: brings per-connection memory (streams
             * the server retains, buffers) and the write path's in-flight high-water to
             * their steady state before the baseline. */
            Etcdserverpb__Compare cmp = ETCDSERVERPB__COMPARE__INIT;
            cmp.result = ETCDSERVERPB__COMPARE__COMPARE_RESULT__EQUAL;
            cmp.target = ETCDSERVERPB__COMPARE__COMPARE_TARGET__VERSION;
            cmp.key.data = (uint8_t *)"lbwarm";
            cmp.key.len = 6;
            cmp.target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_VERSION;
            cmp.version = 1; /* the key never exists */
            Etcdserverpb__PutRequest wp = ETCDSERVERPB__PUT_REQUEST__INIT;
            wp.key = cmp.key;
            Etcdserverpb__RequestOp op = ETCDSERVERPB__REQUEST_OP__INIT;
            op.request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT;
            op.request_put = &wp;
            Etcdserverpb__Compare *cmps[1] = {&cmp};
            Etcdserverpb__RequestOp *ops[1] = {&op};
            Etcdserverpb__TxnRequest t = ETCDSERVERPB__TXN_REQUEST__INIT;
            t.n_compare = 1;
            t.compare = cmps;
            t.n_success = 1;
            t.success = ops;
            len = etcdserverpb__txn_request__pack(&t, buf);
            method = "/etcdserverpb.KV/Txn";
        } else if (r->phase == PH_GRANT) {
            Etcdserverpb__LeaseGrantRequest g = ETCDSERVERPB__LEASE_GRANT_REQUEST__INIT;
            g.ttl = r->o->ttl;
            len = etcdserverpb__lease_grant_request__pack(&g, buf);
            method = "/etcdserverpb.Lease/LeaseGrant";
        } else {
            char key[32];
            snprintf(key, sizeof(key), LB_KEY_PREFIX "%08zu", i);
            Etcdserverpb__PutRequest p = ETCDSERVERPB__PUT_REQUEST__INIT;
            p.key.data = (uint8_t *)key;
            p.key.len = strlen(key);
            p.value.data = (uint8_t *)"agent-alive";
            p.value.len = 11;
            p.lease = r->ids[i];
            len = etcdserverpb__put_request__pack(&p, buf);
            method = "/etcdserverpb.KV/Put";
        }
        int rc = lb_conn_unary(s->c, method, buf, len, on_unary, it);
        if (rc) {
            set_err(r, "submit", rc);
            return rc;
        }
    }
    return 0;
}

/* Starts calls on s until its in-flight bound or the end of the phase's work. */
static void pump(lb_slot *s)
{
    lb_run *r = s->r;
    while (lb_conn_inflight(s->c) < (size_t)r->o->inflight && r->next < r->end)
        if (submit(s, r->next++))
            return;
}

/* Resubmits the calls the server shed, spread over the load connections. */
static void retry_shed(lb_run *r)
{
    if (!r->n_retry || (r->phase != PH_GRANT && r->phase != PH_PUT))
        return;
    size_t n = r->n_retry;
    r->n_retry = 0;
    for (size_t j = 0; j < n; j++)
        if (submit(&r->load[j % (size_t)r->o->load_conns], r->retry[j]))
            return;
    for (int k = 0; k < r->o->load_conns; k++)
        lb_conn_flush(r->load[k].c);
}

static void on_timeout(uv_timer_t *t)
{
    static const char *const names[] = {"idle", "connect", "warm-up", "grant",
                                        "put",  "count",   "drain"};
    lb_run *r = t->data;
    char what[96];
    snprintf(what, sizeof(what), "%s phase timed out (%zu of %zu done, %zu connections ready)",
             names[r->phase], r->done, r->want, r->ready);
    set_err(r, what, -ETIMEDOUT);
}

static void on_wake(uv_timer_t *t)
{
    lb_run *r = t->data;
    uv_stop(&r->loop);
}

/* Runs the loop until the phase stops it, bounded by timeout_ms. */
static int run_phase(lb_run *r, uint64_t timeout_ms)
{
    uv_update_time(&r->loop); /* the loop's clock is stale after a blocking pause */
    uv_timer_start(&r->timeout, on_timeout, timeout_ms, 0);
    uv_run(&r->loop, UV_RUN_DEFAULT);
    uv_timer_stop(&r->timeout);
    return r->failed ? -EIO : 0;
}

/* Runs the loop (renewals go on) for ms milliseconds. */
static int run_for(lb_run *r, uint64_t ms)
{
    r->phase = PH_IDLE;
    uv_update_time(&r->loop);
    uv_timer_start(&r->wake, on_wake, ms, 0);
    uv_run(&r->loop, UV_RUN_DEFAULT);
    uv_timer_stop(&r->wake);
    return r->failed ? -EIO : 0;
}

/* Grants (PH_GRANT) or puts (PH_PUT) for leases [from, to), over the load connections. */
static int unary_phase(lb_run *r, int phase, size_t from, size_t to)
{
    if (to <= from)
        return 0;
    r->phase = phase;
    r->next = from;
    r->end = to;
    r->want = to - from;
    r->done = 0;
    for (int k = 0; k < r->o->load_conns; k++) {
        pump(&r->load[k]);
        lb_conn_flush(r->load[k].c);
    }
    return run_phase(r, LB_PHASE_TIMEOUT_MS);
}

static int count_phase(lb_run *r)
{
    r->phase = PH_COUNT;
    r->next = r->end = 0; /* nothing for pump() */
    r->want = 2;
    r->done = 0;
    r->key_count = r->lease_count = -1;
    uint8_t buf[64];
    char end[] = LB_KEY_PREFIX;
    end[sizeof(end) - 2]++;
    Etcdserverpb__RangeRequest q = ETCDSERVERPB__RANGE_REQUEST__INIT;
    q.key.data = (uint8_t *)LB_KEY_PREFIX;
    q.key.len = strlen(LB_KEY_PREFIX);
    q.range_end.data = (uint8_t *)end;
    q.range_end.len = strlen(end);
    q.count_only = 1;
    size_t len = etcdserverpb__range_request__pack(&q, buf);
    lb_slot *s = &r->ka[0];
    r->items[0] = (lb_item){s, 0};
    r->items[1] = (lb_item){s, 1};
    int rc = lb_conn_unary(s->c, "/etcdserverpb.KV/Range", buf, len, on_unary, &r->items[0]);
    if (!rc)
        rc = lb_conn_unary(s->c, "/etcdserverpb.Lease/LeaseLeases", buf, 0, on_unary, &r->items[1]);
    if (rc)
        return rc;
    lb_conn_flush(s->c);
    return run_phase(r, 30000);
}

static void on_ka(lb_conn *c, void *arg, int64_t id, int64_t ttl)
{
    lb_slot *s = arg;
    (void)c;
    s->r->ka_recv++;
    if (ttl <= 0) {
        s->r->ka_zero++;
        if (s->r->sorted_ids) {
            size_t lo = 0, hi = s->r->o->leases;
            while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (s->r->sorted_ids[mid] < id)
                    lo = mid + 1;
                else
                    hi = mid;
            }
            if (lo < s->r->o->leases && s->r->sorted_ids[lo] == id)
                s->r->zeroed[lo] = 1;
        }
    }
    if (s->r->phase == PH_DRAIN && s->r->ka_recv >= s->r->ka_sent)
        uv_stop(&s->r->loop);
}

/* Every 20 ms: each keepalive stream sends the renewals that are due (each lease every
 * TTL/3 from its grant, answered or not: no resends, so no renewal storm). */
static void on_tick(uv_timer_t *t)
{
    lb_run *r = t->data;
    retry_shed(r);
    if (!r->renewing)
        return;
    uint64_t now = now_ms();
    for (int k = 0; k < r->o->conns; k++) {
        lb_slot *s = &r->ka[k];
        size_t sent = 0;
        if (!lb_conn_ka_open_p(s->c)) {
            /* The server ended the stream: note why, open a new one (as clientv3 does). */
            int st = -1;
            const char *m = NULL;
            lb_conn_ka_resets(s->c, &st, &m);
            if (!r->reset_noted) {
                r->reset_noted = 1;
                snprintf(r->reset_reason, sizeof(r->reset_reason), "grpc-status %d \"%s\"", st,
                         m ? m : "");
            }
            int rc = lb_conn_ka_open(s->c, on_ka, s);
            if (rc) {
                set_err(r, "keepalive reopen", rc);
                return;
            }
        }
        for (size_t i = s->lo; i < s->hi; i++) {
            if (!r->due[i] || r->due[i] > now)
                continue;
            int rc = lb_conn_ka_send(s->c, r->ids[i]);
            if (rc) {
                set_err(r, "keepalive send", rc);
                return;
            }
            r->ka_sent++;
            r->due[i] += r->period_ms;
            sent++;
        }
        if (sent)
            lb_conn_flush(s->c);
    }
}

static void close_walk(uv_handle_t *h, void *arg)
{
    (void)arg;
    if (!uv_is_closing(h))
        uv_close(h, NULL);
}

/* Connects count connections (lb_conn_open connects at once). */
static int open_conns(lb_run *r, lb_slot *slots, int count)
{
    r->phase = PH_CONNECT;
    r->ready = 0;
    for (int k = 0; k < count; k++) {
        uint16_t port = r->t->client[(r->t->leader + k) % r->t->n];
        int rc = lb_conn_open(&r->loop, port, on_conn_event, &slots[k], &slots[k].c);
        if (rc) {
            set_err(r, "connect", rc);
            return rc;
        }
        r->ready++;
    }
    return 0;
}

/* Closes the connections; their memory is released while the loop runs. */
static void close_conns(lb_slot *slots, int count)
{
    for (int k = 0; k < count; k++) {
        lb_conn_close(slots[k].c);
        slots[k].c = NULL;
    }
}

/* Runs the loop until every renewal sent so far is answered, at most timeout_ms. */
static int catch_up(lb_run *r, uint64_t timeout_ms)
{
    uint64_t deadline = now_ms() + timeout_ms;
    while (r->ka_recv < r->ka_sent && now_ms() < deadline) {
        int rc = run_for(r, 50);
        if (rc)
            return rc;
    }
    return 0;
}

/* Sum over the samples of metric name whose labels contain label (NULL: any) on the member
 * with this metrics port; -1 if absent. */
static double get_metric_l(uint16_t metrics_port, const char *name, const char *label)
{
    double v = -1;
    int st = 0;
    char *body = NULL;
    if (kv_it_http_get(metrics_port, "/metrics", 3000, &st, &body) == 0 && st == 200 &&
        kv_it_metric_sum(body, name, label, &v, NULL) != 0)
        v = -1;
    free(body);
    return v;
}

static double get_metric(uint16_t metrics_port, const char *name)
{
    return get_metric_l(metrics_port, name, NULL);
}

/* Sum of metric name{label} over the members; -1 if no member exports it. */
static double sum_metric_l(const lb_target *t, const char *name, const char *label)
{
    double total = 0;
    int found = 0;
    for (int i = 0; i < t->n; i++) {
        double v = get_metric_l(t->metrics[i], name, label);
        if (v >= 0) {
            total += v;
            found++;
        }
    }
    return found ? total : -1;
}

/* Peer TLS figures of kvd (see lb_result.hs) into slot w (0 start, 1 end of the window). */
static void peer_tls_sample(const lb_target *t, lb_result *res, int w)
{
    res->hs[w] = sum_metric_l(t, "kvd_tls_handshakes_total", "port=\"peer\"");
    res->hs_fail[w] = sum_metric_l(t, "kvd_tls_handshake_failures_total", "port=\"peer\"");
    res->connects[w] = sum_metric_l(t, "kvd_peer_connects_total", NULL);
}

/* Names of the metrics of member 0 that contain "handshake" (etcd 3.4 has none that we
 * know of: this checks), comma-separated into out; "" if none. */
static void find_handshake_metrics(const lb_target *t, char *out, size_t cap)
{
    out[0] = 0;
    int st = 0;
    char *body = NULL;
    if (kv_it_http_get(t->metrics[0], "/metrics", 3000, &st, &body) != 0 || st != 200 || !body) {
        snprintf(out, cap, "(metrics not read)");
        free(body);
        return;
    }
    size_t used = 0;
    char last[128] = "";
    for (char *line = body; line && *line;) {
        char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        size_t name_len = strcspn(line, "{ \n");
        if (line[0] != '#' && name_len > 0 && name_len <= len && name_len < sizeof(last)) {
            char name[128];
            memcpy(name, line, name_len);
            name[name_len] = 0;
            if (strstr(name, "handshake") && strcmp(name, last) != 0 && used + name_len + 2 < cap) {
                used += (size_t)snprintf(out + used, cap - used, "%s%s", used ? "," : "", name);
                snprintf(last, sizeof(last), "%s", name);
            }
        }
        line = nl ? nl + 1 : NULL;
    }
    free(body);
}

/* Sum of metric name over the members; -1 if no member exports it. */
static double sum_metric(const lb_target *t, const char *name)
{
    double total = 0;
    int found = 0;
    for (int i = 0; i < t->n; i++) {
        double v = get_metric(t->metrics[i], name);
        if (v >= 0) {
            total += v;
            found++;
        }
    }
    return found ? total : -1;
}

static double delta(double a, double b)
{
    return a >= 0 && b >= 0 ? b - a : -1;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Runs the put probe (and, for a cluster, the peer-connection counter) for ms
 * milliseconds in its thread while the calling thread sleeps; for the idle figures. */
static void probe_idle(const lb_target *t, const lb_opts *o, lb_result *res)
{
    lb_probe p = {.port = t->client[t->leader], .interval_ms = (uint32_t)o->probe_ms};
    if (t->n > 1) {
        p.n_peer = t->n;
        memcpy(p.peer_ports, t->peer, sizeof(uint16_t) * (size_t)t->n);
    }
    if (lb_probe_start(&p) == 0) {
        struct timespec ts = {.tv_sec = o->probe_idle};
        while (nanosleep(&ts, &ts) < 0)
            ;
        lb_probe_stop(&p);
    }
    res->idle_n = p.n_lat;
    res->idle_err = p.errors;
    res->idle_p50 = lb_probe_pct(&p, 0.50);
    res->idle_p99 = lb_probe_pct(&p, 0.99);
    res->idle_max = lb_probe_pct(&p, 1.0);
    if (p.errors)
        snprintf(res->probe_error, sizeof(res->probe_error), "idle: %.100s", p.first_error);
    res->peers_idle = p.peers;
    lb_probe_free(&p);
}

static int measure(const lb_target *t, const lb_opts *o, lb_result *res)
{
    memset(res, 0, sizeof(*res));
    lb_run *r = calloc(1, sizeof(*r));
    lb_probe probe = {0};
    int rc = -ENOMEM;
    if (!r)
        return -ENOMEM;
    pid_t lpid = t->pid[t->leader];
    res->kvd = t->kvd;
    res->n = t->n;
    res->leader = t->leader;
    r->o = o;
    r->t = t;
    r->period_ms = (uint64_t)o->ttl * 1000u / 3u;
    r->load = calloc((size_t)o->load_conns, sizeof(*r->load));
    r->ka = calloc((size_t)o->conns, sizeof(*r->ka));
    r->items = calloc(o->leases + 2, sizeof(*r->items));
    r->ids = calloc(o->leases, sizeof(*r->ids));
    r->due = calloc(o->leases, sizeof(*r->due));
    r->retry = calloc(o->leases, sizeof(*r->retry));
    r->sorted_ids = NULL;
    r->zeroed = calloc(o->leases, 1);
    int64_t *sorted = calloc(o->leases, sizeof(*sorted));
    if (!r->load || !r->ka || !r->items || !r->ids || !r->due || !r->retry || !r->zeroed || !sorted)
        goto out;
    uv_loop_init(&r->loop);
    uv_timer_init(&r->loop, &r->tick);
    uv_timer_init(&r->loop, &r->timeout);
    uv_timer_init(&r->loop, &r->wake);
    r->tick.data = r->timeout.data = r->wake.data = r;
    for (int k = 0; k < o->load_conns; k++)
        r->load[k].r = r;
    for (int k = 0; k < o->conns; k++) {
        r->ka[k].r = r;
        r->ka[k].lo = o->leases * (size_t)k / (size_t)o->conns;
        r->ka[k].hi = o->leases * (size_t)(k + 1) / (size_t)o->conns;
    }

    sleep(1);
    read_rss(lpid, &res->rss_fresh);
    res->idle_p50 = res->idle_p99 = res->idle_max = -1;
    if (o->probe_idle > 0)
        probe_idle(t, o, res);

    /* The keepalive streams are open from the start and renew each lease every TTL/3 from
     * its grant, so no lease can expire while the others are being set up. */
    if ((rc = open_conns(r, r->ka, o->conns)))
        goto fail;
    for (int k = 0; k < o->conns; k++)
        if ((rc = lb_conn_ka_open(r->ka[k].c, on_ka, &r->ka[k]))) {
            set_err(r, "keepalive open", rc);
            goto fail;
        }
    r->renewing = 1;
    uv_timer_start(&r->tick, on_tick, 20, 20);

    /* Grants and puts run on their own load connections. A server may keep per-connection
     * state that grows with the number of calls up to a bound (kvd's nghttp2 sessions
     * retain up to max-concurrent-streams closed streams each): that is not a per-lease
     * cost, so each load connection first makes --warm-calls writes that change nothing, and the
     * baseline is taken after them. Two halves, RSS after each: the second half's growth
     * is the marginal cost per lease, free of one-time high-water allocations (allocator
     * arenas, LMDB's page lists) of the first burst of writes. */
    if ((rc = open_conns(r, r->load, o->load_conns)))
        goto fail;
    if ((rc = unary_phase(r, PH_WARM, 0, (size_t)o->warm * (size_t)o->load_conns)))
        goto fail;
    if ((rc = run_for(r, 1000)))
        goto fail;
    read_rss(lpid, &res->rss0); /* connections open and warm, nothing granted */
    size_t half = o->leases / 2;
    for (int h = 0; h < 2; h++) {
        size_t from = h ? half : 0, to = h ? o->leases : half;
        /* In chunks of --chunk leases, each followed by a pause until every renewal sent
         * so far is answered: a server whose renewals wait for pending writes to apply
         * (etcd 3.4's LeaseRenew waits for the applied index) must not lose leases just
         * because the setup writes and the renewals overlap. */
        for (size_t c0 = from; c0 < to; c0 += (size_t)o->chunk) {
            size_t c1 = c0 + (size_t)o->chunk < to ? c0 + (size_t)o->chunk : to;
            uint64_t t0 = now_ms();
            if ((rc = unary_phase(r, PH_GRANT, c0, c1)))
                goto fail;
            uint64_t t1 = now_ms();
            if ((rc = unary_phase(r, PH_PUT, c0, c1)))
                goto fail;
            uint64_t t2 = now_ms();
            res->grant_s += (double)(t1 - t0) / 1000.0;
            res->put_s += (double)(t2 - t1) / 1000.0;
            if (c1 / 10000 != c0 / 10000 || c1 == o->leases)
                fprintf(stderr, "leasebench: %s: %zu of %zu leases granted and put (%.0f s)\n",
                        t->kvd ? "kvd" : "etcd", c1, o->leases, res->grant_s + res->put_s);
            if ((rc = catch_up(r, 10000)))
                goto fail;
        }
        if ((rc = run_for(r, 1000)))
            goto fail;
        read_rss(lpid, h ? &res->rss1 : &res->rss_half);
    }
    close_conns(r->load, o->load_conns);
    /* Failed grants/puts (e.g. a put whose lease expired meanwhile) do not stop the run:
     * their keys are missing at the end and they are reported. */
    res->setup_errors = r->errors;
    snprintf(res->setup_error, sizeof(res->setup_error), "%s", r->first_error);
    res->retries_unavail = r->retries_unavail;
    res->retries = r->retries;
    res->warm_errors = r->warm_errors;
    res->lease_mem = t->kvd ? get_metric(t->metrics[t->leader], "kvd_lease_memory_bytes") : -1;
    memcpy(sorted, r->ids, o->leases * sizeof(*sorted));
    qsort(sorted, o->leases, sizeof(*sorted), cmp_i64);
    r->sorted_ids = sorted;

    /* The measured window: keepalive traffic only, plus the put probe on the leader. */
    double f0[7] = {-1, -1, -1, -1, -1, -1, -1};
    static const char *const fwd_names[7] = {
        "kvd_lease_fwd_renewals_total", "kvd_lease_fwd_batches_total", "kvd_lease_fwd_shed_total",
        "kvd_lease_fwd_timeouts_total", "kvd_lease_fwd_retried_total", "kvd_lease_fwd_resent_total",
        "kvd_lease_fwd_coalesced_total"};
    if (t->kvd)
        for (int k = 0; k < 7; k++)
            f0[k] = sum_metric(t, fwd_names[k]);
    double cpu0[KV_BC_MAX_MEMBERS] = {0}, cpu1[KV_BC_MAX_MEMBERS] = {0};
    uint64_t sent0 = r->ka_sent, recv0 = r->ka_recv;
    probe.port = t->client[t->leader];
    probe.interval_ms = (uint32_t)o->probe_ms;
    if (t->n > 1) {
        probe.n_peer = t->n;
        memcpy(probe.peer_ports, t->peer, sizeof(uint16_t) * (size_t)t->n);
    }
    res->hs[0] = res->hs[1] = res->hs_fail[0] = res->hs_fail[1] = -1;
    res->connects[0] = res->connects[1] = -1;
    if (o->peer_tls && t->kvd)
        peer_tls_sample(t, res, 0);
    for (int i = 0; i < t->n; i++)
        kv_it_proc_cpu(t->pid[i], &cpu0[i]);
    if (lb_probe_start(&probe))
        fprintf(stderr, "leasebench: put probe did not start\n");
    rc = run_for(r, (uint64_t)o->duration * 1000u);
    for (int i = 0; i < t->n; i++)
        kv_it_proc_cpu(t->pid[i], &cpu1[i]);
    lb_probe_stop(&probe);
    if (rc)
        goto fail;
    if (o->peer_tls && t->kvd)
        peer_tls_sample(t, res, 1);
    else if (o->peer_tls)
        find_handshake_metrics(t, res->hs_metrics, sizeof(res->hs_metrics));
    r->renewing = 0;
    res->cpu_ka = cpu1[t->leader] - cpu0[t->leader];
    for (int i = 0; i < t->n; i++) {
        res->cpu_m[i] = cpu1[i] - cpu0[i];
        read_rss(t->pid[i], &res->rss_end_m[i]);
    }
    res->ka_sent = r->ka_sent - sent0;
    res->ka_recv = r->ka_recv - recv0;
    res->load_n = probe.n_lat;
    res->load_err = probe.errors;
    res->load_p50 = lb_probe_pct(&probe, 0.50);
    res->load_p99 = lb_probe_pct(&probe, 0.99);
    res->load_max = lb_probe_pct(&probe, 1.0);
    if (probe.errors)
        snprintf(res->probe_error, sizeof(res->probe_error), "load: %.100s", probe.first_error);
    res->peers_load = probe.peers;
    if (t->kvd) {
        double *dst[7] = {&res->fwd_renewals, &res->fwd_batches, &res->fwd_shed,
                          &res->fwd_timeouts, &res->fwd_retried, &res->fwd_resent,
                          &res->fwd_coalesced};
        for (int k = 0; k < 7; k++)
            *dst[k] = delta(f0[k], sum_metric(t, fwd_names[k]));
    }
    read_rss(lpid, &res->rss2);
    if (r->ka_recv < r->ka_sent) { /* wait for the last answers */
        r->phase = PH_DRAIN;
        run_phase(r, 5000);
        if (r->failed && strstr(r->err, "timed out")) {
            fprintf(stderr, "leasebench: %" PRIu64 " renewals unanswered\n",
                    r->ka_sent - r->ka_recv);
            r->failed = 0;
        }
        if (r->failed)
            goto fail;
    }
    res->ka_zero = r->ka_zero;
    for (size_t i = 0; i < o->leases; i++)
        res->leases_zeroed += r->zeroed[i];
    for (int k = 0; k < o->conns; k++)
        res->ka_resets += lb_conn_ka_resets(r->ka[k].c, NULL, NULL);
    snprintf(res->reset_reason, sizeof(res->reset_reason), "%s", r->reset_reason);
    for (int k = 0; k < o->conns; k++) {
        lb_conn_ka_end(r->ka[k].c);
        lb_conn_flush(r->ka[k].c);
    }

    if ((rc = count_phase(r)))
        goto fail;
    res->keys_end = r->key_count;
    res->leases_end = r->lease_count;
    res->lost = r->key_count >= 0 && (size_t)r->key_count <= o->leases
                    ? o->leases - (size_t)r->key_count
                    : o->leases;
    res->leader_end = t->cl ? kv_bc_leader(t->cl) : 0;
    if (t->kvd) {
        res->expired = sum_metric(t, "kvd_lease_expired_total");
        res->revoked = sum_metric(t, "kvd_lease_revoked_total");
        res->peer_connected = sum_metric(t, "kvd_peer_connected");
        res->ka_shed = sum_metric(t, "kvd_lease_fwd_shed_total");
        for (int i = 0; i < t->n; i++)
            res->heap_m[i] = get_metric(t->metrics[i], "kvd_lease_heap_size");
    }
    res->ok = 1;
    rc = 0;
    goto close;
fail:
    snprintf(res->err, sizeof(res->err), "%s", r->err[0] ? r->err : "failed");
close:
    lb_probe_free(&probe);
    close_conns(r->load, o->load_conns);
    close_conns(r->ka, o->conns);
    uv_walk(&r->loop, close_walk, NULL);
    while (uv_run(&r->loop, UV_RUN_DEFAULT)) /* again if a uv_stop was pending */
        ;
    uv_loop_close(&r->loop);
out:
    free(r->load);
    free(r->ka);
    free(r->items);
    free(r->ids);
    free(r->due);
    free(r->retry);
    free(r->zeroed);
    free(sorted);
    free(r);
    return rc;
}

static double per_lease(uint64_t before, uint64_t after, size_t n)
{
    return ((double)after - (double)before) / (double)n;
}

static void print_result(const char *name, const lb_opts *o, const lb_result *x)
{
    if (!x->ok) {
        printf("%-5s FAILED: %s\n", name, x->err);
        return;
    }
    const double mib = 1048576.0;
    printf("%-5s grant %.2fs put %.2fs | keepalive %ds: renewals sent %" PRIu64 " answered %" PRIu64
           " ttl0 %" PRIu64 " | server CPU %.2fs (%.1f us/renewal)\n",
           name, x->grant_s, x->put_s, o->duration, x->ka_sent, x->ka_recv, x->ka_zero, x->cpu_ka,
           x->ka_recv ? x->cpu_ka * 1e6 / (double)x->ka_recv : 0.0);
    printf("%-5s RSS MiB total/anon/file: fresh %.1f/%.1f/%.1f | %d+%d conns open, warm "
           "%.1f/%.1f/%.1f | half the leases in %.1f/%.1f/%.1f | all in %.1f/%.1f/%.1f | end of "
           "keepalive %.1f/%.1f/%.1f\n",
           name, x->rss_fresh.total / mib, x->rss_fresh.anon / mib, x->rss_fresh.file / mib,
           o->conns, o->load_conns, x->rss0.total / mib, x->rss0.anon / mib, x->rss0.file / mib,
           x->rss_half.total / mib, x->rss_half.anon / mib, x->rss_half.file / mib,
           x->rss1.total / mib, x->rss1.anon / mib, x->rss1.file / mib, x->rss2.total / mib,
           x->rss2.anon / mib, x->rss2.file / mib);
    printf("%-5s RSS added per lease incl. its key (all leases, vs warm baseline): total "
           "%.0f B, anon %.0f B, file %.0f B",
           name, per_lease(x->rss0.total, x->rss1.total, o->leases),
           per_lease(x->rss0.anon, x->rss1.anon, o->leases),
           per_lease(x->rss0.file, x->rss1.file, o->leases));
    size_t n2 = o->leases - o->leases / 2;
    printf("\n%-5s marginal RSS per lease (second half, %zu leases): total %.0f B, anon %.0f B, "
           "file %.0f B",
           name, n2, per_lease(x->rss_half.total, x->rss1.total, n2),
           per_lease(x->rss_half.anon, x->rss1.anon, n2),
           per_lease(x->rss_half.file, x->rss1.file, n2));
    if (x->lease_mem >= 0)
        printf(" | kvd_lease_memory_bytes %.0f (%.0f B/lease)", x->lease_mem,
               x->lease_mem / (double)o->leases);
    printf("\n%-5s end: keys %" PRId64 " leases %" PRId64 " lost %zu", name, x->keys_end,
           x->leases_end, x->lost);
    if (x->retries || x->warm_errors)
        printf(" | writes shed (\"too many requests\"): %" PRIu64 " grants/puts retried, %" PRIu64
               " warm-up writes",
               x->retries, x->warm_errors);
    if (x->retries_unavail)
        printf(" | grants/puts retried after UNAVAILABLE/leader change/timeout: %" PRIu64,
               x->retries_unavail);
    if (x->setup_errors)
        printf(" | grants/puts FAILED: %zu (first: %s)", x->setup_errors, x->setup_error);
    if (x->ka_resets)
        printf(" | keepalive streams ended by the server: %" PRIu64 " (first: %s), reopened",
               x->ka_resets, x->reset_reason);
    printf("\n");
}

/* Cluster, probe and metric lines of one result (after print_result). */
static void print_extra(const char *name, const lb_opts *o, const lb_result *x)
{
    if (!x->ok)
        return;
    double rps = (double)x->ka_recv / (double)o->duration;
    printf("%-5s renewals answered/s %.0f (expected %.0f) | leases answered TTL 0 after setup: "
           "%zu | leases at the end %" PRId64 " of %zu\n",
           name, rps, (double)o->leases * 3.0 / (double)o->ttl, x->leases_zeroed, x->leases_end,
           o->leases);
    double tot = 0;
    printf("%-5s CPU over the window per member (us/renewal):", name);
    for (int i = 0; i < x->n; i++) {
        tot += x->cpu_m[i];
        printf(" %s%d %.2fs (%.1f)", i == x->leader ? "leader m" : "m", i + 1, x->cpu_m[i],
               x->ka_recv ? x->cpu_m[i] * 1e6 / (double)x->ka_recv : 0.0);
    }
    printf(" | all %.2fs (%.1f)\n", tot, x->ka_recv ? tot * 1e6 / (double)x->ka_recv : 0.0);
    if (x->n > 1) {
        const double mib = 1048576.0;
        printf("%-5s RSS MiB at the end per member:", name);
        for (int i = 0; i < x->n; i++)
            printf(" m%d %.1f", i + 1, x->rss_end_m[i].total / mib);
        printf(" | leader at start m%d, at end %s%d\n", x->leader + 1,
               x->leader_end >= 0 ? "m" : "none ", x->leader_end >= 0 ? x->leader_end + 1 : 0);
        printf("%-5s peer connections ESTABLISHED (ss-equivalent, /proc/net/tcp): idle max %d | "
               "window max %d last %d, distinct seen %d%s | TIME-WAIT max idle %d window %d\n",
               name, x->peers_idle.est_max, x->peers_load.est_max, x->peers_load.est_last,
               x->peers_load.n_distinct, x->peers_load.overflow ? "+" : "", x->peers_idle.tw_max,
               x->peers_load.tw_max);
    }
    if (o->peer_tls && x->kvd)
        printf("%-5s peer TLS (all members): kvd_tls_handshakes_total{port=\"peer\"} window start "
               "%.0f end %.0f | kvd_tls_handshake_failures_total{port=\"peer\"} start %.0f end "
               "%.0f | kvd_peer_connects_total start %.0f end %.0f | peer connections opened in "
               "the window (seen by the probe) %d\n",
               name, x->hs[0], x->hs[1], x->hs_fail[0], x->hs_fail[1], x->connects[0],
               x->connects[1], x->peers_load.n_distinct - x->peers_load.n_first);
    else if (o->peer_tls)
        printf("%-5s peer TLS: handshake metrics exported: %s | peer connections opened in the "
               "window (seen by the probe, each a full TLS handshake; lower bound) %d of %d "
               "distinct\n",
               name, x->hs_metrics[0] ? x->hs_metrics : "none",
               x->peers_load.n_distinct - x->peers_load.n_first, x->peers_load.n_distinct);
    printf("%-5s put probe on the leader every %d ms: idle (%zu puts) p50 %.2f p99 %.2f max %.2f "
           "ms | keepalive window (%zu puts) p50 %.2f p99 %.2f max %.2f ms",
           name, o->probe_ms, x->idle_n, x->idle_p50, x->idle_p99, x->idle_max, x->load_n,
           x->load_p50, x->load_p99, x->load_max);
    if (x->idle_err || x->load_err)
        printf(" | errors idle %" PRIu64 " load %" PRIu64 " (first %s)", x->idle_err, x->load_err,
               x->probe_error);
    printf("\n");
    if (x->kvd) {
        printf("%-5s kvd metrics: window: forwarded renewals %.0f in %.0f batches (%.1f per "
               "batch), shed %.0f, timeouts %.0f, retried %.0f, resent %.0f, coalesced %.0f | end: "
               "expired %.0f "
               "revoked %.0f peer_connected %.0f heap sizes",
               name, x->fwd_renewals, x->fwd_batches,
               x->fwd_batches > 0 ? x->fwd_renewals / x->fwd_batches : 0.0, x->fwd_shed,
               x->fwd_timeouts, x->fwd_retried, x->fwd_resent, x->fwd_coalesced, x->expired,
               x->revoked, x->peer_connected);
        for (int i = 0; i < x->n; i++)
            printf(" m%d %.0f", i + 1, x->heap_m[i]);
        printf("\n");
    }
}

static double cpu_all(const lb_result *x)
{
    double t = 0;
    for (int i = 0; i < x->n; i++)
        t += x->cpu_m[i];
    return t;
}

/* CPU per renewal (us) of the leader (which = 0), of the followers on average (1), of all
 * members (2). */
static double us_per_renewal(const lb_result *x, int which)
{
    if (!x->ok || !x->ka_recv)
        return -1;
    double c = which == 0 ? x->cpu_m[x->leader] : which == 2 ? cpu_all(x) : 0;
    if (which == 1) {
        if (x->n < 2)
            return -1;
        c = (cpu_all(x) - x->cpu_m[x->leader]) / (x->n - 1);
    }
    return c * 1e6 / (double)x->ka_recv;
}

static void cell(double v, const char *fmt)
{
    if (v < 0)
        printf(" | -");
    else {
        printf(" | ");
        printf(fmt, v);
    }
}

static void row(const char *label, double k, double e, const char *fmt, int ratio)
{
    printf("| %s", label);
    cell(k, fmt);
    cell(e, fmt);
    if (ratio && k >= 0 && e > 0)
        printf(" | %.3f |\n", k / e);
    else
        printf(" | |\n");
}

/* The summary as a markdown table (for bench/lease/README.md). */
static void print_table(const lb_opts *o, const lb_result *k, const lb_result *e)
{
    lb_result none;
    memset(&none, 0, sizeof(none));
    if (!k->ok)
        k = &none;
    if (!e->ok)
        e = &none;
#define V(x, f) ((x)->ok ? (double)(f) : -1.0)
    printf("\n| %zu agents, %d member(s), %d s | kvd | etcd 3.4 | kvd / etcd |\n", o->leases,
           o->members, o->duration);
    printf("|---|---|---|---|\n");
    row("renewals answered / s", V(k, k->ka_recv / (double)o->duration),
        V(e, e->ka_recv / (double)o->duration), "%.0f", 0);
    row("keys lost (of granted)", V(k, k->lost), V(e, e->lost), "%.0f", 0);
    row("leases remaining at the end", V(k, k->leases_end), V(e, e->leases_end), "%.0f", 0);
    row("leases answered TTL 0 (distinct, after setup)", V(k, k->leases_zeroed),
        V(e, e->leases_zeroed), "%.0f", 0);
    row("renewal answers with TTL 0 (whole run)", V(k, k->ka_zero), V(e, e->ka_zero), "%.0f", 0);
    row("CPU per renewal, leader (us)", us_per_renewal(k, 0), us_per_renewal(e, 0), "%.1f", 1);
    if (o->members > 1)
        row("CPU per renewal, each follower (us)", us_per_renewal(k, 1), us_per_renewal(e, 1),
            "%.1f", 1);
    row("CPU per renewal, all members (us)", us_per_renewal(k, 2), us_per_renewal(e, 2), "%.1f", 1);
    row("RSS added per lease on the leader (B)",
        V(k, per_lease(k->rss0.total, k->rss1.total, o->leases)),
        V(e, per_lease(e->rss0.total, e->rss1.total, o->leases)), "%.0f", 1);
    if (o->members > 1) {
        row("peer connections ESTABLISHED, max in window", V(k, k->peers_load.est_max),
            V(e, e->peers_load.est_max), "%.0f", 0);
        row("distinct peer connections seen in window", V(k, k->peers_load.n_distinct),
            V(e, e->peers_load.n_distinct), "%.0f", 0);
        row("peer sockets in TIME-WAIT, max in window", V(k, k->peers_load.tw_max),
            V(e, e->peers_load.tw_max), "%.0f", 0);
    }
    if (o->peer_tls) {
        /* etcd 3.4 exports no handshake counter: only the connections are shown for it. */
        row("peer TLS handshakes, all members, window start (kvd: both ends count)", V(k, k->hs[0]),
            -1, "%.0f", 0);
        row("peer TLS handshakes, all members, window end", V(k, k->hs[1]), -1, "%.0f", 0);
        row("peer TLS handshakes failed, all members, window end", V(k, k->hs_fail[1]), -1, "%.0f",
            0);
        row("peer connections opened in the window (each a TLS handshake)",
            V(k, k->peers_load.n_distinct - k->peers_load.n_first),
            V(e, e->peers_load.n_distinct - e->peers_load.n_first), "%.0f", 0);
    }
    row("put p50 idle (ms)", V(k, k->idle_p50), V(e, e->idle_p50), "%.2f", 1);
    row("put p99 idle (ms)", V(k, k->idle_p99), V(e, e->idle_p99), "%.2f", 1);
    row("put p50 under keepalive load (ms)", V(k, k->load_p50), V(e, e->load_p50), "%.2f", 1);
    row("put p99 under keepalive load (ms)", V(k, k->load_p99), V(e, e->load_p99), "%.2f", 1);
#undef V
    printf("\n");
}

static void print_targets(const lb_opts *o, const lb_result *rk, const lb_result *re)
{
    if (!rk->ok)
        return;
    int lost =
        rk->lost || rk->ka_zero || (rk->leases_end >= 0 && (size_t)rk->leases_end != o->leases);
    printf("target kvd leases lost = 0: %s (%zu keys missing, %" PRId64
           " of %zu leases left, %" PRIu64 " renewals answered TTL 0)\n",
           lost ? "MISSED" : "MET", rk->lost, rk->leases_end, o->leases, rk->ka_zero);
    double pl = per_lease(rk->rss0.total, rk->rss1.total, o->leases);
    double pm = per_lease(rk->rss_half.total, rk->rss1.total, o->leases - o->leases / 2);
    if (o->leases < 10000)
        printf("target kvd adds <= 300 B RSS/lease (leader): not judged below 10,000 leases\n");
    else
        printf("target kvd adds <= 300 B RSS/lease (leader): all leases %.0f B %s (anonymous "
               "%.0f B); marginal %.0f B %s\n",
               pl, pl <= 300 ? "MET" : "MISSED", per_lease(rk->rss0.anon, rk->rss1.anon, o->leases),
               pm, pm <= 300 ? "MET" : "MISSED");
    if (rk->idle_p99 > 0 && rk->load_p99 >= 0)
        printf("target kvd put p99 under keepalive load <= 2x idle: %.2f ms vs %.2f ms (x%.2f) "
               "%s\n",
               rk->load_p99, rk->idle_p99, rk->load_p99 / rk->idle_p99,
               rk->load_p99 <= 2 * rk->idle_p99 ? "MET" : "MISSED");
    if (re->ok) {
        for (int w = 0; w < 3; w++) {
            if (w == 1 && o->members < 2)
                continue;
            double a = us_per_renewal(rk, w), b = us_per_renewal(re, w);
            static const char *const what[3] = {"leader", "each follower", "all members"};
            if (a >= 0 && b > 0)
                printf("target kvd CPU per renewal <= etcd / 5 (%s): %.1f vs %.1f us (1/%.1f) %s\n",
                       what[w], a, b, b / (a > 0 ? a : 1e-9), a <= b / 5 ? "MET" : "MISSED");
        }
    } else {
        printf("target kvd CPU per renewal <= etcd / 5: not judged (no etcd result)\n");
    }
}

static int run_single(kv_it_kind kind, const lb_opts *o, lb_result *res)
{
    kv_it_server srv;
    int rc = kv_it_server_init(&srv, kind, NULL);
    if (rc) {
        snprintf(res->err, sizeof(res->err), "init %s: %d (%.100s)", kv_it_kind_name(kind), rc,
                 srv.bin);
        return rc;
    }
    rc = kv_it_server_start(&srv, 30000);
    if (rc) {
        snprintf(res->err, sizeof(res->err), "start %s: %d (log in %.100s)", kv_it_kind_name(kind),
                 rc, srv.log_path);
        kv_it_server_destroy(&srv);
        return rc;
    }
    lb_target t = {.kvd = kind == KV_IT_KVD, .n = 1, .leader = 0};
    t.client[0] = srv.client_port;
    t.metrics[0] = srv.metrics_port;
    t.peer[0] = srv.peer_port;
    t.pid[0] = srv.pid;
    rc = measure(&t, o, res);
    kv_it_server_destroy(&srv);
    return rc;
}

static int run_cluster(kv_it_kind kind, const lb_opts *o, lb_result *res)
{
    kv_bc_cluster *c = calloc(1, sizeof(*c));
    char why[1024];
    int rc;
    if (!c)
        return -ENOMEM;
    rc = kv_bc_cluster_start_tls(c, kind, o->members, o->extra[kind == KV_IT_KVD ? 0 : 1],
                                 o->peer_tls ? o->cert_dir : NULL, 60000, why, sizeof(why));
    if (rc) {
        snprintf(res->err, sizeof(res->err), "start %s cluster: %.200s", kv_it_kind_name(kind),
                 why);
        goto out;
    }
    lb_target t = {.kvd = kind == KV_IT_KVD, .n = o->members, .cl = c};
    t.leader = -ENOENT;
    for (int tries = 0; tries < 50 && t.leader < 0; tries++) {
        t.leader = kv_bc_leader(c);
        if (t.leader < 0)
            usleep(200000);
    }
    if (t.leader < 0) {
        rc = t.leader;
        snprintf(res->err, sizeof(res->err), "no leader in the %s cluster", kv_it_kind_name(kind));
        goto out;
    }
    for (int i = 0; i < o->members; i++) {
        t.client[i] = c->m[i].client_port;
        t.metrics[i] = c->m[i].metrics_port;
        t.peer[i] = c->m[i].peer_port;
        t.pid[i] = c->m[i].proc.pid;
    }
    printf("%-5s cluster of %d in %s, %s peers, leader m%d; keepalive connections per member:",
           kv_it_kind_name(kind), o->members, c->dir, o->peer_tls ? "https (TLS)" : "http",
           t.leader + 1);
    for (int i = 0; i < o->members; i++) {
        int per = 0;
        for (int k = 0; k < o->conns; k++)
            per += (t.leader + k) % o->members == i;
        printf(" m%d %d", i + 1, per);
    }
    printf("\n");
    fflush(stdout);
    rc = measure(&t, o, res);
    if (!res->ok || res->lost || res->ka_zero)
        printf("%-5s member logs: %s/m*.log (kept only with KV_TEST_KEEP_DIRS=1)\n",
               kv_it_kind_name(kind), c->dir);
out:
    kv_bc_cluster_destroy(c);
    free(c);
    return rc;
}

static int run_server(kv_it_kind kind, const lb_opts *o, lb_result *res)
{
    return o->members > 1 ? run_cluster(kind, o, res) : run_single(kind, o, res);
}

/* Makes a CA and the peer certificates for --peer-tls with tests/tls/gen_certs.sh in a fresh
 * temp dir d (o->cert_dir = <d>/certs; the caller removes d with kvt_tmpdir_destroy). The
 * script is found under $KV_SOURCE_DIR, else the source tree this was built from. */
static int make_certs(lb_opts *o, kvt_tmpdir *d)
{
    const char *src = getenv("KV_SOURCE_DIR");
    char script[2048];
    snprintf(script, sizeof(script), "%s/tests/tls/gen_certs.sh",
             src && *src ? src : LB_SOURCE_DIR);
    int rc = kvt_tmpdir_create(d, "lbcerts");
    if (rc) {
        fprintf(stderr, "leasebench: temp dir: %s\n", strerror(-rc));
        return rc;
    }
    snprintf(o->cert_dir, sizeof(o->cert_dir), "%.1000s/certs", d->path);
    const char *argv[] = {"/bin/sh", script, o->cert_dir, NULL};
    kvt_cmd_result r = {0};
    rc = kvt_run(argv, NULL, NULL, 0, 60000, &r);
    if (rc == 0 && (r.timed_out || r.exit_code != 0)) {
        fprintf(stderr, "leasebench: %s %s failed (exit %d): %s\n", script, o->cert_dir,
                r.exit_code, r.err ? r.err : "");
        rc = -EIO;
    }
    if (rc != -EIO && rc < 0)
        fprintf(stderr, "leasebench: cannot run %s: %s\n", script, strerror(-rc));
    kvt_cmd_result_free(&r);
    return rc;
}

static void usage(const char *argv0)
{
    fprintf(stderr,
            "usage: %s [--leases N] [--ttl S] [--duration S] [--conns N] [--inflight N]\n"
            "          [--warm-calls N] [--chunk N] [--members 1|3|5] [--load-conns N]\n"
            "          [--probe-idle S] [--probe-ms MS] [--kvd-args 'ARGS'] [--etcd-args 'ARGS']\n"
            "          [--server kvd|etcd|both] [--peer-tls]\n"
            "defaults: 2000 leases, TTL 10 s, 15 s, 100 keepalive connections, as many load\n"
            "connections, 16 unary calls in flight per load connection, 1100 no-op warm-up\n"
            "writes per load connection (about), setup in chunks of 1000 leases, each followed\n"
            "by a renewal catch-up pause, one member, 10 s of idle put probe (one put every\n"
            "10 ms on the leader, again during the keepalive window), both servers (etcd only\n"
            "if /usr/bin/etcd or KV_ETCD_BIN exists).\n"
            "With --members 3 every connection k goes to member (leader + k) %% 3.\n"
            "Full run (bench/lease/README.md): --leases 20000 --duration 60\n"
            "Agents on a cluster: --members 3 --leases 20000 --duration 60 (and --leases 100000)\n"
            "--peer-tls (with --members 3|5): https:// peer URLs with certificates made for the\n"
            "run (tests/tls/gen_certs.sh), peer TLS handshakes reported\n",
            argv0);
}

int main(int argc, char **argv)
{
    lb_opts o = {.leases = 2000,
                 .ttl = 10,
                 .duration = 15,
                 .conns = 100,
                 .inflight = 16,
                 .warm = 1100,
                 .chunk = 1000,
                 .members = 1,
                 .load_conns = 0,
                 .probe_idle = 10,
                 .probe_ms = 10};
    const char *which = "both";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--peer-tls")) { /* the only option without a value */
            o.peer_tls = 1;
            continue;
        }
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v || strncmp(a, "--", 2) != 0) {
            usage(argv[0]);
            return 2;
        }
        i++;
        if (!strcmp(a, "--leases"))
            o.leases = strtoul(v, NULL, 10);
        else if (!strcmp(a, "--ttl"))
            o.ttl = atoi(v);
        else if (!strcmp(a, "--duration"))
            o.duration = atoi(v);
        else if (!strcmp(a, "--conns"))
            o.conns = atoi(v);
        else if (!strcmp(a, "--inflight"))
            o.inflight = atoi(v);
        else if (!strcmp(a, "--warm-calls"))
            o.warm = atoi(v);
        else if (!strcmp(a, "--chunk"))
            o.chunk = atoi(v);
        else if (!strcmp(a, "--members"))
            o.members = atoi(v);
        else if (!strcmp(a, "--load-conns"))
            o.load_conns = atoi(v);
        else if (!strcmp(a, "--probe-idle"))
            o.probe_idle = atoi(v);
        else if (!strcmp(a, "--probe-ms"))
            o.probe_ms = atoi(v);
        else if (!strcmp(a, "--kvd-args"))
            o.extra[0] = v;
        else if (!strcmp(a, "--etcd-args"))
            o.extra[1] = v;
        else if (!strcmp(a, "--server"))
            which = v;
        else {
            usage(argv[0]);
            return 2;
        }
    }
    if (o.load_conns == 0)
        o.load_conns = o.conns;
    if (o.leases == 0 || o.ttl < 3 || o.duration < 1 || o.conns < 1 || o.inflight < 1 ||
        o.warm < 0 || o.chunk < 1 || (size_t)o.conns > o.leases || o.members < 1 ||
        o.members > KV_BC_MAX_MEMBERS || o.load_conns < 1 || o.probe_idle < 0 || o.probe_ms < 1 ||
        (o.peer_tls && o.members < 2)) {
        usage(argv[0]);
        return 2;
    }
    char etcd_bin[4096];
    int have_etcd = kv_it_server_bin(KV_IT_ETCD, etcd_bin, sizeof(etcd_bin)) == 0;
    o.want_kvd = strcmp(which, "etcd") != 0;
    o.want_etcd = strcmp(which, "kvd") != 0 && have_etcd;
    printf("leasebench: %zu leases x 1 key, TTL %ds, renewed every TTL/3 for %ds over %d "
           "keepalive connections (one LeaseKeepAlive stream each, %zu leases per stream), "
           "%d load connections, %d member(s)\n",
           o.leases, o.ttl, o.duration, o.conns, o.leases / (size_t)o.conns, o.load_conns,
           o.members);
    if (!have_etcd && strcmp(which, "kvd") != 0)
        printf("etcd: %s not found, measuring kvd only\n", etcd_bin);
    kvt_tmpdir cert_root = {{0}};
    if (o.peer_tls) {
        if (make_certs(&o, &cert_root)) {
            kvt_tmpdir_destroy(&cert_root);
            return 1;
        }
        printf("peer TLS: https:// peer URLs, --peer-client-cert-auth, certificates made for "
               "this run in %s (removed at the end)\n",
               o.cert_dir);
    }
    fflush(stdout);

    lb_result rk = {0}, re = {0};
    int bad = 0;
    if (o.want_kvd) {
        run_server(KV_IT_KVD, &o, &rk);
        print_result("kvd", &o, &rk);
        print_extra("kvd", &o, &rk);
        fflush(stdout);
        bad |= !rk.ok || rk.lost || rk.ka_zero;
    }
    if (o.want_etcd) {
        run_server(KV_IT_ETCD, &o, &re);
        print_result("etcd", &o, &re);
        print_extra("etcd", &o, &re);
        fflush(stdout);
        bad |= !re.ok;
    }
    kvt_tmpdir_destroy(&cert_root);
    print_table(&o, &rk, &re);
    if (o.want_kvd)
        print_targets(&o, &rk, &re);
    return bad ? 1 : 0;
}
