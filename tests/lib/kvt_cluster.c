/* kvt_cluster: see kvt_cluster.h. */

#include "kvt_cluster.h"
#include "grpc_raw.h"

#include "rpc.pb-c.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

kvt_target kvt_target_from_env(void)
{
    const char *t = getenv("KV_TEST_SERVER");
    return t && strcmp(t, "etcd") == 0 ? KV_TEST_SERVER_ETCD : KV_TEST_SERVER_KVD;
}

const char *kvt_target_name(kvt_target t)
{
    return t == KV_TEST_SERVER_ETCD ? "etcd" : "kvd";
}

void kvt_cluster_opts_default(kvt_cluster_opts *o, int n)
{
    memset(o, 0, sizeof(*o));
    o->target = kvt_target_from_env();
    o->n = n;
    o->heartbeat_ms = 50;
    o->election_ms = 500;
    o->token = "kvt";
    o->seed = 1;
}

static void env_path(char *buf, size_t cap, const char *env, const char *dflt)
{
    const char *e = getenv(env);
    snprintf(buf, cap, "%s", e && *e ? e : dflt);
}

/* 1 if port is one of the ports of a slot other than i (or of slot i's proxy). */
static int port_in_use(const kvt_cluster *c, int i, uint16_t port)
{
    for (int k = 0; k < c->n || k <= i; k++) {
        const kvt_member *o = &c->m[k];
        if (port == o->proxy_port ||
            (k != i && (port == o->client_port || port == o->peer_port || port == o->metrics_port)))
            return 1;
    }
    return 0;
}

/* Picks distinct free ports for slot i: client, peer, metrics (and the proxy's if
 * with_proxy), none used by another slot. */
static int pick_ports(kvt_cluster *c, int i, int with_proxy)
{
    kvt_member *m = &c->m[i];
    uint16_t p[4] = {0, 0, 0, 0};
    int want = with_proxy ? 4 : 3;
    if (!with_proxy)
        p[3] = m->proxy_port;
    m->client_port = m->peer_port = m->metrics_port = 0;
    if (with_proxy)
        m->proxy_port = 0;
    for (int k = 0, tries = 0; k < want; tries++) {
        if (tries > 1000)
            return -EADDRINUSE;
        int r = kvt_port_free(&p[k]);
        if (r)
            return r;
        int dup = port_in_use(c, i, p[k]);
        for (int q = 0; q < k && !dup; q++)
            dup = p[q] == p[k];
        if (!with_proxy)
            dup |= p[k] == p[3];
        if (!dup)
            k++;
    }
    m->client_port = p[0];
    m->peer_port = p[1];
    m->metrics_port = p[2];
    m->proxy_port = p[3];
    return 0;
}

static void set_urls(kvt_member *m)
{
    snprintf(m->endpoint, sizeof(m->endpoint), "127.0.0.1:%u", m->client_port);
    snprintf(m->client_url, sizeof(m->client_url), "http://127.0.0.1:%u", m->client_port);
    snprintf(m->peer_url, sizeof(m->peer_url), "http://127.0.0.1:%u", m->proxy_port);
}

/* "s" when peer URLs are https. */
static const char *peer_s(const kvt_cluster *c)
{
    return c->o.peer_https ? "s" : "";
}

/* The member's unary connection (kvt_member.conn), or a fresh one when another thread holds
 * it (kv_it_grpc is one thread's). A cached connection is reused only if it is to the same
 * port and has nothing pending that ends it (EOF, GOAWAY: the member exited or restarted).
 * On 0, *cached says whether conn_give must unlock the member's cache. */
static int conn_take(kvt_member *m, uint32_t timeout_ms, kv_it_grpc **g, int *cached)
{
    *cached = pthread_mutex_trylock(&m->conn_mu) == 0;
    if (!*cached)
        return kv_it_grpc_open(g, "127.0.0.1", m->client_port, timeout_ms);
    if (m->conn) {
        struct pollfd p = {.fd = kv_it_grpc_fd(m->conn), .events = POLLIN};
        int readable = poll(&p, 1, 0) == 1;
        if (m->conn_port != m->client_port || (readable && kv_it_grpc_io(m->conn, 1) != 0) ||
            kv_it_grpc_conn_closed(m->conn) || kv_it_grpc_goaway(m->conn)) {
            kv_it_grpc_close(m->conn);
            m->conn = NULL;
        }
    }
    if (!m->conn) {
        int r = kv_it_grpc_open(&m->conn, "127.0.0.1", m->client_port, timeout_ms);
        if (r) {
            m->conn = NULL;
            pthread_mutex_unlock(&m->conn_mu);
            return r;
        }
        m->conn_port = m->client_port;
    }
    *g = m->conn;
    return 0;
}

/* Returns a connection from conn_take. One that failed (r < 0: after a transport error it is
 * unusable) or timed out is closed, never reused. */
static void conn_give(kvt_member *m, kv_it_grpc *g, int cached, int r)
{
    if (!cached) {
        kv_it_grpc_close(g);
        return;
    }
    if (r < 0) {
        kv_it_grpc_close(m->conn);
        m->conn = NULL;
    }
    pthread_mutex_unlock(&m->conn_mu);
}

/* Drops the member's cached connection (its process is being stopped or replaced). */
static void conn_drop(kvt_member *m)
{
    pthread_mutex_lock(&m->conn_mu);
    kv_it_grpc_close(m->conn);
    m->conn = NULL;
    pthread_mutex_unlock(&m->conn_mu);
}

static int slot_init(kvt_cluster *c, int i)
{
    kvt_member *m = &c->m[i];
    memset(m, 0, sizeof(*m));
    pthread_mutex_init(&m->conn_mu, NULL);
    m->idx = i;
    snprintf(m->name, sizeof(m->name), "m%d", i);
    if (snprintf(m->dir, sizeof(m->dir), "%s/m%d", c->root.path, i) >= (int)sizeof(m->dir) ||
        snprintf(m->data_dir, sizeof(m->data_dir), "%s/m%d/data", c->root.path, i) >=
            (int)sizeof(m->data_dir))
        return -ENAMETOOLONG;
    if (mkdir(m->dir, 0755) != 0 && errno != EEXIST)
        return -errno;
    char log[PATH_MAX + 16];
    snprintf(log, sizeof(log), "%s/member.log", m->dir);
    kvt_proc_init(&m->proc, log);
    /* Ports are picked then released; a proxy that cannot bind its port retries. */
    for (int attempt = 0;; attempt++) {
        int r = pick_ports(c, i, 1);
        if (r)
            return r;
        r = kvt_proxy_start(&m->proxy, m->proxy_port, m->peer_port, c->o.seed + (uint64_t)i * 7919);
        if (r == 0)
            break;
        if (attempt == 4)
            return r;
    }
    set_urls(m);
    return 0;
}

/* Re-picks member i's client, peer and metrics ports (its advertised peer URL, the proxy,
 * stays) after another process took one of them. */
static int move_member(kvt_cluster *c, int i)
{
    kvt_member *m = &c->m[i];
    int r = pick_ports(c, i, 0);
    if (r)
        return r;
    kvt_proxy_set_target(m->proxy, m->peer_port);
    set_urls(m);
    fprintf(stderr, "kvt: %s: a port was taken, moved to client %u peer %u metrics %u\n", m->name,
            m->client_port, m->peer_port, m->metrics_port);
    return 0;
}

/* 1 if member i's last run exited because a port was in use. */
static int port_was_taken(const kvt_cluster *c, int i)
{
    char *log = NULL;
    if (kvt_member_log(c, i, 16384, &log) != 0)
        return 0;
    const char *last = log, *p = log;
    while ((p = strstr(p, "=== kvt: start")) != NULL)
        last = p++;
    int taken = kvt_log_port_taken(last);
    free(log);
    return taken;
}

int kvt_cluster_init(kvt_cluster *c, const kvt_cluster_opts *o)
{
    memset(c, 0, sizeof(*c));
    if (o->n < 1 || o->n > KVT_MAX_MEMBERS)
        return -EINVAL;
    c->o = *o;
    if (!c->o.token)
        c->o.token = "kvt";
    if (o->target == KV_TEST_SERVER_ETCD) {
        env_path(c->bin, sizeof(c->bin), "KV_ETCD_BIN", "/usr/bin/etcd");
    } else {
        const char *e = getenv("KV_KVD_BIN");
        const char *b = getenv("KV_BUILD_DIR");
        if (e && *e)
            snprintf(c->bin, sizeof(c->bin), "%s", e);
        else
            snprintf(c->bin, sizeof(c->bin), "%s/server/kvd", b && *b ? b : "build");
    }
    env_path(c->ctl, sizeof(c->ctl), "KV_ETCDCTL_BIN", "/usr/bin/etcdctl");
    if (access(c->bin, X_OK) != 0)
        return -ENOENT;
    int r = kvt_tmpdir_create(&c->root, "kvt-cluster");
    if (r)
        return r;
    for (int i = 0; i < o->n; i++) {
        r = slot_init(c, i);
        c->n = i + 1;
        if (r) {
            kvt_cluster_destroy(c);
            return r;
        }
        c->m[i].in_config = 1;
    }
    return 0;
}

void kvt_cluster_destroy(kvt_cluster *c)
{
    for (int i = 0; i < c->n; i++) {
        conn_drop(&c->m[i]);
        pthread_mutex_destroy(&c->m[i].conn_mu);
        kvt_proc_kill9(&c->m[i].proc);
        kvt_proxy_stop(c->m[i].proxy);
        c->m[i].proxy = NULL;
    }
    c->n = 0;
    kvt_tmpdir_destroy(&c->root);
}

int kvt_cluster_add_slot(kvt_cluster *c, int *idx)
{
    if (c->n >= KVT_MAX_MEMBERS)
        return -ENOSPC;
    int i = c->n;
    int r = slot_init(c, i);
    if (r) {
        kvt_proxy_stop(c->m[i].proxy);
        c->m[i].proxy = NULL;
        return r;
    }
    c->n++;
    c->m[i].join = 1;
    *idx = i;
    return 0;
}

int kvt_member_start(kvt_cluster *c, int i)
{
    kvt_member *m = &c->m[i];
    char a_data[PATH_MAX + 16], a_lc[80], a_ac[80], a_lp[80], a_iap[80], a_lm[80], a_ic[1024],
        a_hb[48], a_el[48], a_sc[48], a_tok[96];
    snprintf(a_data, sizeof(a_data), "--data-dir=%s", m->data_dir);
    snprintf(a_lc, sizeof(a_lc), "--listen-client-urls=%s", m->client_url);
    snprintf(a_ac, sizeof(a_ac), "--advertise-client-urls=%s", m->client_url);
    snprintf(a_lp, sizeof(a_lp), "--listen-peer-urls=http%s://127.0.0.1:%u", peer_s(c),
             m->peer_port);
    snprintf(a_iap, sizeof(a_iap), "--initial-advertise-peer-urls=http%s://%s", peer_s(c),
             m->peer_url + 7);
    snprintf(a_lm, sizeof(a_lm), "--listen-metrics-urls=http://127.0.0.1:%u", m->metrics_port);
    size_t len = (size_t)snprintf(a_ic, sizeof(a_ic), "--initial-cluster=");
    int first = 1;
    for (int k = 0; k < c->n; k++) {
        if (!c->m[k].in_config)
            continue;
        len += (size_t)snprintf(a_ic + len, sizeof(a_ic) - len, "%s%s=http%s://%s",
                                first ? "" : ",", c->m[k].name, peer_s(c), c->m[k].peer_url + 7);
        first = 0;
    }
    snprintf(a_hb, sizeof(a_hb), "--heartbeat-interval=%u", c->o.heartbeat_ms);
    snprintf(a_el, sizeof(a_el), "--election-timeout=%u", c->o.election_ms);
    snprintf(a_sc, sizeof(a_sc), "--snapshot-count=%" PRIu64, c->o.snapshot_count);
    snprintf(a_tok, sizeof(a_tok), "--initial-cluster-token=%s", c->o.token);
    const char *argv[48];
    int n = 0;
    argv[n++] = c->bin;
    argv[n++] = "--name";
    argv[n++] = m->name;
    argv[n++] = a_data;
    argv[n++] = a_lc;
    argv[n++] = a_ac;
    argv[n++] = a_lp;
    argv[n++] = a_iap;
    argv[n++] = a_ic;
    argv[n++] = m->join ? "--initial-cluster-state=existing" : "--initial-cluster-state=new";
    argv[n++] = a_tok;
    argv[n++] = a_hb;
    argv[n++] = a_el;
    argv[n++] = a_lm;
    if (c->o.snapshot_count)
        argv[n++] = a_sc;
    if (c->o.target == KV_TEST_SERVER_KVD)
        argv[n++] = "--enable-failpoints";
    else
        argv[n++] = "--pre-vote=true";
    for (int k = 0;
         c->o.target == KV_TEST_SERVER_KVD && c->o.kvd_args && c->o.kvd_args[k] && n < 47; k++)
        argv[n++] = c->o.kvd_args[k];
    for (int k = 0; c->o.target == KV_TEST_SERVER_KVD && m->args && m->args[k] && n < 47; k++)
        argv[n++] = m->args[k];
    /* KVT_KVD_ARGS: flags for every kvd member of every test, split on blanks (ctest runs a
     * suite again with them, e.g. --experimental-wal: tests/cluster/CMakeLists.txt). */
    char envargs[512];
    const char *ea = getenv("KVT_KVD_ARGS");
    if (c->o.target == KV_TEST_SERVER_KVD && ea && strlen(ea) < sizeof(envargs)) {
        strcpy(envargs, ea);
        for (char *save = NULL, *t = strtok_r(envargs, " ", &save); t && n < 47;
             t = strtok_r(NULL, " ", &save))
            argv[n++] = t;
    }
    argv[n] = NULL;
    m->partitioned = 0; /* a fresh kvd process starts connected */
    return kvt_proc_spawn_env(&m->proc, argv, m->env);
}

int kvt_member_running(kvt_cluster *c, int i)
{
    return kvt_proc_alive(&c->m[i].proc);
}

/* One unary call to member i on a fresh connection. */
static int call(kvt_cluster *c, int i, const char *method, const uint8_t *req, size_t req_len,
                uint8_t **resp, size_t *resp_len, uint32_t timeout_ms, char *err, size_t err_cap)
{
    char tmp[256];
    if (!err) {
        err = tmp;
        err_cap = sizeof(tmp);
    }
    if (err_cap)
        err[0] = '\0';
    kv_it_grpc *g = NULL;
    int cached = 0;
    int r = conn_take(&c->m[i], timeout_ms, &g, &cached);
    if (r) {
        snprintf(err, err_cap, "connect: %s", strerror(-r));
        return r;
    }
    int status = -1;
    r = kv_it_grpc_call(g, method, req, req_len, resp, resp_len, timeout_ms, &status, err, err_cap);
    conn_give(&c->m[i], g, cached, r);
    if (r == KV_IT_GRPC_STATUS)
        return KVT_GRPC_ERR;
    if (r < 0 && err_cap)
        snprintf(err, err_cap, "transport: %s", strerror(-r));
    return r;
}

int kvt_member_status(kvt_cluster *c, int i, kvt_status *st, uint32_t timeout_ms)
{
    Etcdserverpb__StatusRequest req = ETCDSERVERPB__STATUS_REQUEST__INIT;
    uint8_t buf[16];
    size_t len = etcdserverpb__status_request__pack(&req, buf);
    uint8_t *resp = NULL;
    size_t resp_len = 0;
    int r = call(c, i, "/etcdserverpb.Maintenance/Status", buf, len, &resp, &resp_len, timeout_ms,
                 NULL, 0);
    if (r)
        return r;
    Etcdserverpb__StatusResponse *s = etcdserverpb__status_response__unpack(NULL, resp_len, resp);
    free(resp);
    if (!s)
        return -EPROTO;
    memset(st, 0, sizeof(*st));
    st->id = s->header ? s->header->member_id : 0;
    st->revision = s->header ? s->header->revision : 0;
    st->leader = s->leader;
    st->term = s->raftterm;
    st->index = s->raftindex;
    st->applied = s->raftappliedindex;
    st->learner = s->islearner;
    etcdserverpb__status_response__free_unpacked(s, NULL);
    if (st->id)
        c->m[i].id = st->id;
    return 0;
}

int kvt_member_wait_ready(kvt_cluster *c, int i, uint32_t timeout_ms)
{
    uint64_t deadline = kvt_now_ms() + timeout_ms;
    for (;;) {
        if (!kvt_proc_alive(&c->m[i].proc))
            return -ECHILD;
        kvt_status st;
        if (kvt_member_status(c, i, &st, 1000) == 0)
            return 0;
        if (kvt_now_ms() >= deadline)
            return -ETIMEDOUT;
        kvt_sleep_ms(50);
    }
}

int kvt_member_kill9(kvt_cluster *c, int i)
{
    conn_drop(&c->m[i]);
    return kvt_proc_kill9(&c->m[i].proc);
}

int kvt_member_stop(kvt_cluster *c, int i, uint32_t grace_ms)
{
    conn_drop(&c->m[i]);
    return kvt_proc_term(&c->m[i].proc, grace_ms);
}

int kvt_member_restart(kvt_cluster *c, int i, uint32_t timeout_ms)
{
    conn_drop(&c->m[i]);
    kvt_proc_kill9(&c->m[i].proc);
    for (int attempt = 0;; attempt++) {
        int r = kvt_member_start(c, i);
        if (r == 0)
            r = kvt_member_wait_ready(c, i, timeout_ms);
        /* Another process took one of its ports while it was down: move it (3x). */
        if (r != -ECHILD || attempt == 3 || !port_was_taken(c, i) || move_member(c, i) != 0)
            return r;
    }
}

int kvt_member_pause(kvt_cluster *c, int i)
{
    return kvt_proc_pause(&c->m[i].proc);
}

int kvt_member_resume(kvt_cluster *c, int i)
{
    return kvt_proc_resume(&c->m[i].proc);
}

int kvt_member_partition(kvt_cluster *c, int i, int on)
{
    kvt_member *m = &c->m[i];
    on = !!on;
    if (m->partitioned == on)
        return 0;
    if (c->o.target == KV_TEST_SERVER_KVD) {
        /* --enable-failpoints: SIGUSR2 toggles peer isolation. The member's loop takes the
         * signal later: wait until it logged the new state, so that what the caller does
         * next happens with it in effect (bounded: 5 s). */
        int r = kvt_proc_signal(&m->proc, SIGUSR2);
        if (r)
            return r;
        m->partitioned = on;
        const char *want = on ? "failpoint: peers isolated" : "failpoint: peers reachable";
        for (uint64_t t0 = kvt_now_ms(); kvt_now_ms() - t0 < 5000; kvt_sleep_ms(2)) {
            char *log = NULL;
            if (kvt_member_log(c, i, 65536, &log) != 0)
                continue;
            const char *last = NULL;
            for (const char *p = strstr(log, "failpoint: peers "); p;
                 p = strstr(p + 1, "failpoint: peers "))
                last = p;
            int done = last && strncmp(last, want, strlen(want)) == 0;
            free(log);
            if (done)
                return 0;
        }
        return -ETIMEDOUT;
    }
    if (!m->id) {
        kvt_status st;
        int r = kvt_member_status(c, i, &st, 2000);
        if (r)
            return r < 0 ? r : -EIO;
    }
    char hex[KVT_PROXY_ID_LEN];
    snprintf(hex, sizeof(hex), "%" PRIx64, m->id);
    kvt_proxy_set(m->proxy, on, on, 0, 0);
    for (int k = 0; k < c->n; k++) {
        if (k == i || !c->m[k].proxy)
            continue;
        int r = kvt_proxy_block_from(c->m[k].proxy, hex, on);
        if (r)
            return r;
    }
    m->partitioned = on;
    return 0;
}

int kvt_member_log(const kvt_cluster *c, int i, size_t max_bytes, char **out)
{
    FILE *f = fopen(c->m[i].proc.log_path, "r");
    if (!f)
        return -errno;
    fseeko(f, 0, SEEK_END);
    off_t size = ftello(f);
    off_t start = size > (off_t)max_bytes ? size - (off_t)max_bytes : 0;
    char *buf = malloc((size_t)(size - start) + 1);
    if (!buf) {
        fclose(f);
        return -ENOMEM;
    }
    fseeko(f, start, SEEK_SET);
    size_t got = fread(buf, 1, (size_t)(size - start), f);
    buf[got] = '\0';
    fclose(f);
    *out = buf;
    return 0;
}

static void dump_log(const kvt_cluster *c, int i)
{
    char *log = NULL;
    if (kvt_member_log(c, i, 4096, &log) == 0) {
        fprintf(stderr, "kvt: --- tail of %s's log (%s) ---\n%s\n--- end ---\n", c->m[i].name,
                c->m[i].proc.log_path, log);
        free(log);
    }
}

int kvt_cluster_start(kvt_cluster *c, uint32_t timeout_ms)
{
    for (int i = 0; i < c->n; i++) {
        if (!c->m[i].in_config || kvt_proc_alive(&c->m[i].proc))
            continue;
        int r = kvt_member_start(c, i);
        if (r)
            return r;
    }
    uint64_t deadline = kvt_now_ms() + timeout_ms;
    int moves = 0;
    for (;;) {
        for (int i = 0; i < c->n; i++) {
            if (c->m[i].in_config && !kvt_proc_alive(&c->m[i].proc)) {
                /* A port picked free was taken before the member bound it: move it. */
                if (moves < 3 * c->n && port_was_taken(c, i) && move_member(c, i) == 0 &&
                    kvt_member_start(c, i) == 0) {
                    moves++;
                    continue;
                }
                fprintf(stderr, "kvt: %s exited at start\n", c->m[i].name);
                dump_log(c, i);
                return -ECHILD;
            }
        }
        uint64_t now = kvt_now_ms();
        if (now >= deadline)
            return -ETIMEDOUT;
        if (kvt_cluster_leader(c) >= 0 &&
            kvt_cluster_wait_writable(c, (uint32_t)(deadline - now)) >= 0) {
            int all = 1; /* every member up and answering (a late exit is handled above) */
            for (int i = 0; i < c->n && all; i++) {
                kvt_status st;
                all = !c->m[i].in_config ||
                      (kvt_proc_alive(&c->m[i].proc) && kvt_member_status(c, i, &st, 1000) == 0);
            }
            if (all)
                break;
            kvt_sleep_ms(50);
            continue;
        }
        kvt_sleep_ms(100);
    }
    return 0; /* every member's id is known (Status) */
}

int kvt_cluster_index_of(kvt_cluster *c, uint64_t id)
{
    if (!id)
        return -1;
    for (int k = 0; k < c->n; k++)
        if (c->m[k].id == id)
            return k;
    for (int k = 0; k < c->n; k++) {
        kvt_status st;
        if (!c->m[k].id && kvt_proc_alive(&c->m[k].proc) && !c->m[k].proc.stopped &&
            kvt_member_status(c, k, &st, 1000) == 0 && st.id == id)
            return k;
    }
    return -1;
}

int kvt_cluster_leader(kvt_cluster *c)
{
    for (int i = 0; i < c->n; i++) {
        kvt_member *m = &c->m[i];
        if (!kvt_proc_alive(&m->proc) || m->proc.stopped || m->partitioned)
            continue;
        kvt_status st;
        if (kvt_member_status(c, i, &st, 1000) != 0 || !st.leader)
            continue;
        int l = kvt_cluster_index_of(c, st.leader);
        if (l < 0 || !kvt_proc_alive(&c->m[l].proc) || c->m[l].proc.stopped)
            continue;
        kvt_status ls;
        if (l == i ? 1 : kvt_member_status(c, l, &ls, 1000) == 0 && ls.leader == ls.id)
            return l;
    }
    return -1;
}

int kvt_cluster_wait_leader(kvt_cluster *c, uint32_t timeout_ms, uint64_t *waited_ms)
{
    uint64_t t0 = kvt_now_ms();
    for (;;) {
        int l = kvt_cluster_leader(c);
        uint64_t now = kvt_now_ms();
        if (l >= 0) {
            if (waited_ms)
                *waited_ms = now - t0;
            return l;
        }
        if (now - t0 >= timeout_ms)
            return -ETIMEDOUT;
        kvt_sleep_ms(20);
    }
}

int kvt_put(kvt_cluster *c, int i, const char *key, const char *val, uint32_t timeout_ms,
            int64_t *rev, char *err, size_t err_cap)
{
    Etcdserverpb__PutRequest req = ETCDSERVERPB__PUT_REQUEST__INIT;
    req.key.data = (uint8_t *)key;
    req.key.len = strlen(key);
    req.value.data = (uint8_t *)val;
    req.value.len = strlen(val);
    size_t len = etcdserverpb__put_request__get_packed_size(&req);
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf)
        return -ENOMEM;
    etcdserverpb__put_request__pack(&req, buf);
    uint8_t *resp = NULL;
    size_t resp_len = 0;
    int r =
        call(c, i, "/etcdserverpb.KV/Put", buf, len, &resp, &resp_len, timeout_ms, err, err_cap);
    free(buf);
    if (r)
        return r;
    Etcdserverpb__PutResponse *p = etcdserverpb__put_response__unpack(NULL, resp_len, resp);
    free(resp);
    if (!p)
        return -EPROTO;
    if (rev)
        *rev = p->header ? p->header->revision : 0;
    etcdserverpb__put_response__free_unpacked(p, NULL);
    return 0;
}

int kvt_get(kvt_cluster *c, int i, const char *key, int serializable, uint32_t timeout_ms,
            char *val, size_t val_cap, int *found, int64_t *rev, char *err, size_t err_cap)
{
    Etcdserverpb__RangeRequest req = ETCDSERVERPB__RANGE_REQUEST__INIT;
    req.key.data = (uint8_t *)key;
    req.key.len = strlen(key);
    req.serializable = serializable ? 1 : 0;
    size_t len = etcdserverpb__range_request__get_packed_size(&req);
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf)
        return -ENOMEM;
    etcdserverpb__range_request__pack(&req, buf);
    uint8_t *resp = NULL;
    size_t resp_len = 0;
    int r =
        call(c, i, "/etcdserverpb.KV/Range", buf, len, &resp, &resp_len, timeout_ms, err, err_cap);
    free(buf);
    if (r)
        return r;
    Etcdserverpb__RangeResponse *p = etcdserverpb__range_response__unpack(NULL, resp_len, resp);
    free(resp);
    if (!p)
        return -EPROTO;
    if (rev)
        *rev = p->header ? p->header->revision : 0;
    if (found)
        *found = p->n_kvs > 0;
    if (val && val_cap) {
        val[0] = '\0';
        if (p->n_kvs > 0) {
            size_t n = p->kvs[0]->value.len < val_cap - 1 ? p->kvs[0]->value.len : val_cap - 1;
            memcpy(val, p->kvs[0]->value.data, n);
            val[n] = '\0';
        }
    }
    etcdserverpb__range_response__free_unpacked(p, NULL);
    return 0;
}

int kvt_cluster_wait_writable(kvt_cluster *c, uint32_t timeout_ms)
{
    uint64_t t0 = kvt_now_ms();
    for (;;) {
        for (int i = 0; i < c->n; i++) {
            kvt_member *m = &c->m[i];
            if (!kvt_proc_alive(&m->proc) || m->proc.stopped || m->partitioned)
                continue;
            if (kvt_put(c, i, "/kvt/liveness", "x", 2000, NULL, NULL, 0) == 0)
                return (int)(kvt_now_ms() - t0);
        }
        if (kvt_now_ms() - t0 >= timeout_ms)
            return -ETIMEDOUT;
        kvt_sleep_ms(50);
    }
}

int kvt_compact(kvt_cluster *c, int i, int64_t rev, uint32_t timeout_ms, char *err, size_t err_cap)
{
    Etcdserverpb__CompactionRequest req = ETCDSERVERPB__COMPACTION_REQUEST__INIT;
    req.revision = rev;
    req.physical = 1;
    uint8_t buf[32];
    size_t len = etcdserverpb__compaction_request__pack(&req, buf);
    uint8_t *resp = NULL;
    size_t resp_len = 0;
    int r = call(c, i, "/etcdserverpb.KV/Compact", buf, len, &resp, &resp_len, timeout_ms, err,
                 err_cap);
    free(resp);
    return r;
}

int kvt_member_hash(kvt_cluster *c, int i, int64_t rev, uint32_t timeout_ms, uint32_t *hash,
                    char *err, size_t err_cap)
{
    Etcdserverpb__HashKVRequest req = ETCDSERVERPB__HASH_KVREQUEST__INIT;
    req.revision = rev;
    uint8_t buf[32];
    size_t len = etcdserverpb__hash_kvrequest__pack(&req, buf);
    uint8_t *resp = NULL;
    size_t resp_len = 0;
    int r = call(c, i, "/etcdserverpb.Maintenance/HashKV", buf, len, &resp, &resp_len, timeout_ms,
                 err, err_cap);
    if (r)
        return r;
    Etcdserverpb__HashKVResponse *h = etcdserverpb__hash_kvresponse__unpack(NULL, resp_len, resp);
    free(resp);
    if (!h)
        return -EPROTO;
    *hash = h->hash;
    etcdserverpb__hash_kvresponse__free_unpacked(h, NULL);
    return 0;
}

int kvt_cluster_hash(kvt_cluster *c, int via, uint32_t *hashes, int64_t *rev, uint32_t timeout_ms)
{
    char err[256];
    int64_t r_rev = 0;
    int r =
        kvt_get(c, via, "/kvt/liveness", 0, timeout_ms, NULL, 0, NULL, &r_rev, err, sizeof(err));
    if (r) {
        fprintf(stderr, "kvt: hash: range via %s: %d %s\n", c->m[via].name, r, err);
        return r < 0 ? r : -EIO;
    }
    *rev = r_rev;
    uint64_t deadline = kvt_now_ms() + timeout_ms;
    for (int i = 0; i < c->n; i++) {
        hashes[i] = 0;
        if (!kvt_proc_alive(&c->m[i].proc))
            continue;
        for (;;) {
            r = kvt_member_hash(c, i, r_rev, 2000, &hashes[i], err, sizeof(err));
            if (r == 0)
                break;
            if (kvt_now_ms() >= deadline) {
                fprintf(stderr, "kvt: hash: %s at %" PRId64 ": %d %s\n", c->m[i].name, r_rev, r,
                        err);
                return -ETIMEDOUT;
            }
            kvt_sleep_ms(100);
        }
    }
    return 0;
}

int kvt_cluster_move_leader(kvt_cluster *c, int to, uint32_t timeout_ms, char *err, size_t err_cap)
{
    int l = kvt_cluster_wait_leader(c, timeout_ms, NULL);
    if (l < 0)
        return l;
    if (!c->m[to].id) {
        kvt_status st;
        int r = kvt_member_status(c, to, &st, timeout_ms);
        if (r)
            return r < 0 ? r : -EIO;
    }
    Etcdserverpb__MoveLeaderRequest req = ETCDSERVERPB__MOVE_LEADER_REQUEST__INIT;
    req.targetid = c->m[to].id;
    uint8_t buf[32];
    size_t len = etcdserverpb__move_leader_request__pack(&req, buf);
    uint8_t *resp = NULL;
    size_t resp_len = 0;
    int r = call(c, l, "/etcdserverpb.Maintenance/MoveLeader", buf, len, &resp, &resp_len,
                 timeout_ms, err, err_cap);
    free(resp);
    return r;
}

int kvt_ctl(kvt_cluster *c, int i, uint32_t timeout_ms, kvt_cmd_result *res, ...)
{
    const char *argv[64];
    char ep[16 + KVT_MAX_MEMBERS * 40];
    size_t len = (size_t)snprintf(ep, sizeof(ep), "--endpoints=");
    int first = 1;
    for (int k = 0; k < c->n; k++) {
        if (i >= 0 ? k != i : !c->m[k].in_config || !kvt_proc_alive(&c->m[k].proc))
            continue;
        len += (size_t)snprintf(ep + len, sizeof(ep) - len, "%s%s", first ? "" : ",",
                                c->m[k].endpoint);
        first = 0;
    }
    int n = 0;
    argv[n++] = c->ctl;
    argv[n++] = ep;
    va_list ap;
    va_start(ap, res);
    const char *a;
    while ((a = va_arg(ap, const char *)) != NULL) {
        if (n == 63) {
            va_end(ap);
            return -E2BIG;
        }
        argv[n++] = a;
    }
    va_end(ap);
    argv[n] = NULL;
    static const char *const env[] = {"ETCDCTL_API=3", NULL};
    return kvt_run(argv, env, NULL, 0, timeout_ms, res);
}

int kvt_member_metrics(kvt_cluster *c, int i, char **body)
{
    int status = 0;
    int r = kvt_http_get(c->m[i].metrics_port, "/metrics", 5000, &status, body);
    if (r)
        return r;
    if (status != 200) {
        free(*body);
        *body = NULL;
        return -EPROTO;
    }
    return 0;
}

void kvt_cluster_dump(kvt_cluster *c)
{
    for (int i = 0; i < c->n; i++) {
        kvt_member *m = &c->m[i];
        kvt_status st;
        int alive = kvt_proc_alive(&m->proc);
        int r = alive && !m->proc.stopped ? kvt_member_status(c, i, &st, 1000) : -ESRCH;
        if (r == 0)
            fprintf(stderr,
                    "kvt: %s id %" PRIx64 " leader %" PRIx64 " term %" PRIu64 " index %" PRIu64
                    " applied %" PRIu64 "%s\n",
                    m->name, st.id, st.leader, st.term, st.index, st.applied,
                    m->partitioned ? " (partitioned)" : "");
        else
            fprintf(stderr, "kvt: %s: %s, Status: %d\n", m->name,
                    !alive ? "not running" : (m->proc.stopped ? "paused" : "running"), r);
        if (alive)
            dump_log(c, i);
    }
}
