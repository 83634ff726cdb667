/*
 * kvd: one member of a kvd cluster.
 *
 * main() owns every piece of state (no mutable globals elsewhere) and one libuv loop, which
 * runs the network, the apply path and the lessor. Startup opens the LMDB environment and reads
 * a few meta records: it never rebuilds an in-memory copy of the keyspace, whatever the data
 * size (lesson 9), and logs how long it took.
 */
#include "api/services.h"
#include "common/clock.h"
#include "common/version.h"
#include "daemon/config.h"
#include "daemon/crash_report.h"
#include "daemon/datadir_lock.h"
#include "daemon/etcd_datadir.h"
#include "grpc/grpc_server.h"
#include "http/client_http.h"
#include "http/http_server.h"
#include "daemon/identity.h"
#include "daemon/members_join.h"
#include "metrics/metrics.h"
#include "metrics/process_metrics.h"
#include "mvcc/store.h"
#include "mvcc/verify.h"
#include "peer/peer_net.h"
#include "peer/peer_delay.h"
#include "api/auto_compact.h"
#include "api/require_leader.h"
#include "daemon/server.h"
#include "gateway/l4_gateway.h"
#include "proxy/proxy.h"
#include "daemon/tls_auto.h"
#include "daemon/tls_setup.h"
#include "daemon/sd_notify.h"
#include "daemon/srv_boot.h"
#include "corrupt/corrupt_check.h"
#include "log/log.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#ifndef KVD_VERSION /* the project version, set by server/CMakeLists.txt */
#define KVD_VERSION "0.1.0"
#endif

typedef struct kvd_main {
    uv_loop_t loop;
    kv_config cfg;
    kv_server srv;
    kv_grpc_method methods[KV_SERVICES_MAX];
    size_t n_methods;
    kv_grpc_server *grpc[KV_MAX_URLS];
    size_t n_grpc;
    kv_http_server *http[KV_MAX_URLS];
    size_t n_http;
    uv_signal_t sigint, sigterm, sigusr1, sigusr2;
    int isolated; /* failpoint: cut off from the peers (SIGUSR2) */
    int stopping;
    int lock_fd;                /* data dir lock (datadir_lock.h), held for the process lifetime */
    kv_auto_compact *autoc;     /* auto-compactor (api/auto_compact.h), NULL when off */
    kv_require_leader *reqlead; /* hasleader streams' monitor (api/require_leader.h) */
    kv_tls_ctx *client_tls;     /* https client listeners' context (tls_setup.h), else NULL */
    kv_client_http *chttp;      /* HTTP/1.1 on the client port (http/client_http.h) */
    kv_pprof_http *pprof;       /* --enable-pprof: its /debug/pprof/ (http/pprof_http.h) */
    kv_log_sink log;            /* stderr's lines: --log-level/-format/-outputs (log/log.h) */
    /* failpoint (peer_delay.h): SIGRTMIN+3 toggles KVD_FAILPOINT_PEER_DELAY_MS=D[,J],
     * SIGRTMIN+4 KVD_FAILPOINT_PEER_RANDOM_DELAY_MS=D[,J]; [k].ms 0: not armed */
    uv_signal_t sigdelay[2];
    struct {
        uint32_t ms, jitter_ms;
    } delay[2];
    int delayed; /* 0 off, else 1 + the index of the setting on */
} kvd_main;

static const char *bind_host(const kv_url *u)
{
    return strcmp(u->host, "localhost") == 0 ? "127.0.0.1" : u->host;
}

/* /health: a barrier through the apply path, so a stalled apply fails it (lesson 13). */
typedef struct health_req {
    kv_http_health_done_fn done;
    void *ctx;
    kv_server *s;
} health_req;

static void on_health_barrier(void *arg, int status)
{
    health_req *h = arg;
    kv_node_raft_status rs;
    kv_node_get_raft_status(h->s->api.node, &rs);
    if (status == 0 && rs.leader == 0) { /* etcd 3.4: no leader, not healthy */
        h->done(h->ctx, 0, "no leader");
        free(h);
        return;
    }
    /* etcd 3.4: /health is false while any alarm is active. */
    unsigned alarms = status == 0 ? kv_node_alarms(h->s->api.node) : 0;
    if (alarms)
        h->done(h->ctx, 0,
                (alarms & (1u << KV_ALARM_CORRUPT)) ? "alarm CORRUPT active"
                                                    : "alarm NOSPACE active");
    else
        h->done(h->ctx, status == 0, status == 0 ? "" : "apply path stopped");
    free(h);
}

static void health_hook(void *app, kv_http_health_done_fn done, void *ctx)
{
    kv_server *s = app;
    kv_node_raft_status rs;
    kv_node_get_raft_status(s->api.node, &rs);
    if (rs.leader == 0) { /* etcd 3.4: no leader, not healthy; nothing to wait for */
        done(ctx, 0, "no leader");
        return;
    }
    health_req *h = malloc(sizeof(*h));
    if (h == NULL) {
        done(ctx, 0, "out of memory");
        return;
    }
    h->done = done;
    h->ctx = ctx;
    h->s = s;
    int rc = kv_node_health_barrier(s->api.node, on_health_barrier, h);
    if (rc < 0) {
        free(h);
        done(ctx, 0,
             rc == -EBUSY ? "too many health probes waiting on the apply path" : "server stopping");
    }
}

static void on_closed_cb(void *arg)
{
    (void)arg;
}

static void on_signal(uv_signal_t *sig, int signum)
{
    kvd_main *m = sig->data;
    if (m->stopping)
        return;
    m->stopping = 1;
    fprintf(stderr, "kvd: received %s, shutting down\n", strsignal(signum));
    kv_sd_notify(getenv("NOTIFY_SOCKET"), "STOPPING=1"); /* systemd Type=notify */
    kv_require_leader_stop(m->reqlead);                  /* before the servers it scans close */
    m->reqlead = NULL;
    for (size_t i = 0; i < m->n_grpc; i++)
        kv_grpc_server_close(m->grpc[i], on_closed_cb, NULL);
    kv_client_http_free(m->chttp); /* after its connections (closed above) */
    m->chttp = NULL;
    kv_pprof_http_free(m->pprof); /* after the connections that held its requests */
    m->pprof = NULL;
    for (size_t i = 0; i < m->n_http; i++)
        kv_http_server_close(m->http[i], on_closed_cb, NULL);
    kv_auto_compact_stop(m->autoc); /* before the node closes */
    m->autoc = NULL;
    kv_server_stop_core(&m->srv);
    uv_close((uv_handle_t *)&m->sigint, NULL);
    uv_close((uv_handle_t *)&m->sigterm, NULL);
    if (m->cfg.enable_failpoints)
        uv_close((uv_handle_t *)&m->sigusr1, NULL);
    if (m->cfg.enable_failpoints)
        uv_close((uv_handle_t *)&m->sigusr2, NULL);
    for (int k = 0; k < 2; k++)
        if (m->delay[k].ms > 0)
            uv_close((uv_handle_t *)&m->sigdelay[k], NULL);
}

/* SIGUSR2 (--enable-failpoints): isolates the member from its peers, or heals it (partition
 * tests: every peer frame in and out is dropped, connections stay up). */
static void on_isolate_signal(uv_signal_t *sig, int signum)
{
    (void)signum;
    kvd_main *m = sig->data;
    if (m->srv.api.peers == NULL)
        return;
    m->isolated = !m->isolated;
    kv_peer_net_set_isolated(m->srv.api.peers, m->isolated);
    fprintf(stderr, "kvd: warning: failpoint: peers %s\n", m->isolated ? "isolated" : "reachable");
}

/* SIGRTMIN+3 / +4 (--enable-failpoints, KVD_FAILPOINT_PEER_DELAY_MS / _RANDOM_DELAY_MS =
 * D[,J]): every peer frame sent and received is held D (+-J) ms, or no longer (functional
 * DELAY / RANDOM_DELAY cases). Another setting's signal switches to that setting. */
static void on_delay_signal(uv_signal_t *sig, int signum)
{
    kvd_main *m = sig->data;
    int k = signum == SIGRTMIN + 4;
    if (m->srv.api.peers == NULL)
        return;
    m->delayed = m->delayed == 1 + k ? 0 : 1 + k;
    int rc = kv_peer_net_set_delay(m->srv.api.peers, m->delayed ? m->delay[k].ms : 0,
                                   m->delayed ? m->delay[k].jitter_ms : 0);
    fprintf(stderr, "kvd: warning: failpoint: peer delay %s (%u ms +-%u)%s\n",
            m->delayed ? "on" : "off", m->delay[k].ms, m->delay[k].jitter_ms,
            rc < 0 ? " failed" : "");
}

static void on_failpoint_signal(uv_signal_t *sig, int signum)
{
    kvd_main *m = sig->data;
    (void)signum;
    int stalled = !kv_node_stalled(m->srv.api.node);
    kv_node_set_stalled(m->srv.api.node, stalled);
    fprintf(stderr, "kvd: warning: failpoint: apply path %s\n", stalled ? "stalled" : "resumed");
}

/* Identity: the ids the flags give must be the ones the data dir was created
 * with, or this process would serve another member's data under a new identity. */
static int check_identity(kvd_main *m, int store_if_missing, char *err, size_t errlen)
{
    kv_server *s = &m->srv;
    kv_store_identity want = {.member_id = s->id.member_id, .cluster_id = s->id.cluster_id};
    snprintf(want.name, sizeof(want.name), "%s", m->cfg.name);
    kv_store_identity have;
    if (store_if_missing && m->srv.joining)
        return 0; /* stored once the cluster id is known (server.c on_cluster_id) */
    int rc = kv_store_identity_check(s->api.store, &want, &have, store_if_missing);
    if (strcmp(m->cfg.initial_cluster_state, "existing") == 0) {
        /* A member that joined an existing cluster took the cluster's id from its peers: the
         * stored one is authoritative; a fresh one learns it from the first peer (joining). */
        if (rc == -EEXIST && have.member_id == want.member_id) {
            m->srv.id.cluster_id = have.cluster_id;
            return 0;
        }
        /* A member that learned its id from the cluster's member list (members_join.h) keeps
         * it across restarts, as etcd reads its id from its WAL: the stored id of the member
         * of this name wins over the derived one (--initial-member-id, if given, must match). */
        if (rc == -EEXIST && !m->cfg.initial_member_id[0] && strcmp(have.name, want.name) == 0) {
            for (size_t k = 0; k < s->id.n_members; k++)
                if (s->id.member_ids[k] == s->id.member_id)
                    s->id.member_ids[k] = have.member_id;
            s->id.member_id = have.member_id;
            s->id.cluster_id = have.cluster_id;
            return 0;
        }
        if (rc == 1 && !store_if_missing) {
            m->srv.joining = 1;
            return 0;
        }
    }
    if (rc == -EEXIST && have.member_id == want.member_id && strcmp(have.name, want.name) == 0) {
        /* Same member, other cluster id: --initial-cluster lists today's members (one was added
         * or removed since this data dir was bootstrapped). As in etcd, the initial-cluster
         * flags only bootstrap; the stored identity and membership are authoritative. */
        fprintf(stderr,
                "kvd: warning: --initial-cluster gives cluster %016llx, but data dir %s was "
                "bootstrapped "
                "in cluster %016llx: using the stored cluster and membership (the initial-cluster "
                "flags are ignored on restart, as in etcd)\n",
                (unsigned long long)want.cluster_id, m->cfg.data_dir,
                (unsigned long long)have.cluster_id);
        m->srv.id.cluster_id = have.cluster_id;
        return 0;
    }
    if (rc == -EEXIST)
        snprintf(err, errlen,
                 "data dir %s belongs to member %016llx (name \"%s\") of cluster %016llx, but "
                 "the flags give member %016llx (name \"%s\") of cluster %016llx: check --name, "
                 "--initial-cluster and --initial-cluster-token, or use another --data-dir",
                 m->cfg.data_dir, (unsigned long long)have.member_id, have.name,
                 (unsigned long long)have.cluster_id, (unsigned long long)want.member_id, want.name,
                 (unsigned long long)want.cluster_id);
    else if (rc == -EBADMSG)
        snprintf(err, errlen, "data dir %s: the stored member identity is corrupt",
                 m->cfg.data_dir);
    else if (rc < 0)
        snprintf(err, errlen, "data dir %s: cannot check the member identity: %s", m->cfg.data_dir,
                 strerror(-rc));
    return rc < 0 ? rc : 0;
}

static int start_listeners(kvd_main *m)
{
    const kv_config *cfg = &m->cfg;
    kv_grpc_config gc;
    kv_grpc_config_default(&gc);
    /* etcd: the gRPC transport admits --max-request-bytes + 512 KiB (grpcOverheadBytes); between
     * the two the server answers "etcdserver: request is too large" (api/services.c). */
    gc.max_request_bytes = cfg->max_request_bytes + 512 * 1024;
    gc.max_concurrent_streams = cfg->max_concurrent_streams;
    gc.max_send_buffer_bytes = cfg->max_send_buffer_bytes;
    gc.max_connections = cfg->max_connections;
    /* Transport hardening. The buffer cap is process-wide: split across listeners. */
    gc.max_response_bytes = cfg->max_response_bytes;
    gc.max_buffered_bytes =
        cfg->max_buffered_bytes / (cfg->n_listen_client ? cfg->n_listen_client : 1);
    gc.max_recv_buffer_bytes = cfg->max_recv_buffer_bytes;
    gc.handshake_timeout_ms = cfg->grpc_handshake_timeout_ms;
    gc.max_connection_idle_ms = cfg->grpc_max_connection_idle_ms;
    gc.keepalive_min_time_ms = cfg->grpc_keepalive_min_time_ms;
    gc.ping_interval_ms = cfg->grpc_keepalive_interval_ms;
    gc.ping_timeout_ms = cfg->grpc_keepalive_timeout_ms;
    gc.send_stall_timeout_ms = cfg->send_stall_timeout_ms;
    gc.max_pending_request_bytes =
        cfg->max_pending_request_bytes / (cfg->n_listen_client ? cfg->n_listen_client : 1);
    gc.priority_methods = kv_service_priority_methods; /* renewals ahead of bulk writes */
    gc.admit = kv_require_leader_admit;                /* etcd's WithRequireLeader ("hasleader") */
    m->n_methods = kv_services_collect(m->methods, KV_SERVICES_MAX);
    if (m->n_methods == 0)
        return -E2BIG;
    char terr[1024];
    int trc = kv_tls_setup_client_port(cfg, m->srv.api.metrics, &m->client_tls, terr, sizeof(terr));
    if (trc < 0) {
        fprintf(stderr, "kvd: error: client TLS: %s\n", terr);
        return trc;
    }
    /* HTTP/1.1 on the client port, as etcd: /health, /version, /metrics, grpc-gateway (unless
     * --enable-grpc-gateway=false), and /debug/pprof/ with --enable-pprof. */
    if (cfg->enable_pprof) {
        if (kv_pprof_http_new(&m->pprof, &m->loop) != 0)
            return -ENOMEM;
        fprintf(stderr, "kvd: pprof is enabled under /debug/pprof on the client URLs\n");
    }
    kv_client_http_config chc = {
        .metrics = m->srv.api.metrics,
        .health = health_hook,
        .app = &m->srv,
        .server_version = KV_ETCD_SERVER_VERSION,
        .max_body_bytes = gc.max_request_bytes,
        .max_streams = cfg->max_concurrent_streams, /* etcd: the gateway's one connection */
        .pprof = m->pprof,
        .no_gateway = !cfg->enable_grpc_gateway, /* etcd's --enable-grpc-gateway */
    };
    int hrc = kv_client_http_new(&m->chttp, &chc, &m->loop);
    if (hrc < 0)
        return hrc;
    (void)kv_process_metrics_register(m->srv.api.metrics); /* process_* next to kvd_* */
    for (size_t i = 0; i < cfg->n_listen_client; i++) {
        const kv_url *u = &cfg->listen_client[i];
        gc.tls = u->tls ? m->client_tls : NULL;
        int rc = kv_grpc_server_init(&m->grpc[m->n_grpc], &m->loop, &gc, m->methods, m->n_methods,
                                     &m->srv.api, m->srv.api.metrics);
        if (rc < 0)
            return rc;
        m->n_grpc++;
        kv_client_http_attach(m->chttp, m->grpc[m->n_grpc - 1]);
        rc = kv_grpc_server_listen(m->grpc[m->n_grpc - 1], bind_host(u), u->port);
        if (rc < 0) {
            fprintf(stderr, "kvd: error: listen on %s: %s\n", u->text, uv_strerror(rc));
            return rc;
        }
        fprintf(stderr, "kvd: serving client requests on %s\n", u->text);
    }
    for (size_t i = 0; i < cfg->n_listen_metrics; i++) {
        const kv_url *u = &cfg->listen_metrics[i];
        kv_http_config hc;
        kv_http_config_default(&hc);
        hc.max_connections = cfg->metrics_max_connections;
        hc.request_timeout_ms = cfg->metrics_request_timeout_ms;
        hc.tls = u->tls ? m->client_tls : NULL; /* etcd: https uses the client TLS info */
        int rc = kv_http_server_init(&m->http[m->n_http], &m->loop, &hc, m->srv.api.metrics,
                                     health_hook, &m->srv);
        if (rc < 0)
            return rc;
        m->n_http++;
        rc = kv_http_server_listen(m->http[m->n_http - 1], bind_host(u), u->port);
        if (rc < 0) {
            fprintf(stderr, "kvd: error: listen on %s: %s\n", u->text, uv_strerror(rc));
            return rc;
        }
        fprintf(stderr, "kvd: serving /metrics and /health on %s\n", u->text);
    }
    return 0;
}

int main(int argc, char **argv)
{
    static kvd_main m; /* main()'s state: large, so not on the stack */
    char err[2048];
    int rc;

    signal(SIGPIPE, SIG_IGN);
    if (kv_crash_report_install() < 0) /* a fatal signal's stack on stderr: crash_report.h */
        fprintf(stderr, "kvd: warning: cannot install the crash report handler\n");
    if (argc > 1 && strcmp(argv[1], "gateway") == 0) /* etcd gateway start: l4_gateway.h */
        return kv_gateway_main(argc - 1, argv + 1);
    if (argc > 1 && strcmp(argv[1], "grpc-proxy") == 0) /* etcd grpc-proxy start: proxy.h */
        return kv_proxy_main(argc - 1, argv + 1);
    kv_config_default(&m.cfg);
    rc = kv_config_parse_env(&m.cfg, argc, argv, err, sizeof(err)); /* flags, then KVD_* */
    if (rc == 1) {
        int version_only = 0; /* --version: the version line alone, as etcd --version */
        for (int i = 1; i < argc; i++)
            version_only |= strcmp(argv[i], "--version") == 0;
        printf("kvd %s (etcd v3 API 3.4)\n%s", KVD_VERSION, version_only ? "" : kv_config_usage());
        return 0;
    }
    if (rc < 0) {
        fprintf(stderr, "kvd: %s\n", err);
        return 2;
    }
    if (!m.cfg.enable_failpoints) { /* apply/apply_gate.c, node/node_snap.c: tests only */
        unsetenv("KVD_FAILPOINT_CORRUPT_PUT");
        unsetenv("KVD_FAILPOINT_SNAPSHOT_COPY_DELAY_MS");
    }
    /* From here on stderr is the log stream: each line leveled, filtered, maybe JSON. */
    {
        kv_log_level ll = KV_LOG_INFO;
        kv_log_format lf = KV_LOG_TEXT;
        kv_log_level_parse(m.cfg.log_level, &ll); /* validated by kv_config_parse() */
        kv_log_format_parse(m.cfg.log_format, &lf);
        rc = kv_log_sink_open(&m.log, lf, ll, m.cfg.log_outputs, err, sizeof(err));
        if (rc < 0) {
            fprintf(stderr, "kvd: fatal: %s\n", err);
            return 2;
        }
        rc = kv_log_install(&m.log);
        if (rc < 0) {
            fprintf(stderr, "kvd: fatal: cannot set up logging: %s\n", strerror(-rc));
            return 2;
        }
    }

    if (m.cfg.discovery_srv[0]) { /* etcd's --discovery-srv: before anything reads the cluster */
        char found[4096];
        rc = kv_srv_boot(&m.cfg, found, sizeof found, err, sizeof err);
        if (rc < 0) {
            fprintf(stderr, "kvd: fatal: SRV discovery: %s\n", err);
            return 1;
        }
        fprintf(stderr, "kvd: got bootstrap from DNS (%s): %s\n", m.cfg.discovery_srv, found);
    }
    uint64_t t0 = kv_mono_ms();
    kv_server *s = &m.srv;
    s->cfg = &m.cfg;
    if (uv_loop_init(&m.loop) != 0) {
        fprintf(stderr, "kvd: fatal: cannot create event loop\n");
        return 1;
    }
    s->api.loop = &m.loop;
    rc = kv_identity_compute(&m.cfg, &s->id);
    if (rc < 0) {
        fprintf(stderr, "kvd: fatal: cannot compute member id\n");
        return 1;
    }
    if (m.cfg.initial_member_id[0]) {
        /* A member added at the peer URLs of a removed one got a drawn id (service_cluster.c
         * new_member_id): it is told, as `member add` printed it. */
        uint64_t given = strtoull(m.cfg.initial_member_id, NULL, 16);
        for (size_t k = 0; k < s->id.n_members; k++)
            if (s->id.member_ids[k] == s->id.member_id)
                s->id.member_ids[k] = given;
        s->id.member_id = given;
    }
    rc = kv_metrics_new(&s->api.metrics, 0);
    if (rc < 0)
        goto fail;

    if (mkdir(m.cfg.data_dir, 0700) < 0 && errno != EEXIST) {
        fprintf(stderr, "kvd: fatal: cannot create data dir %s: %s\n", m.cfg.data_dir,
                strerror(errno));
        return 1;
    }
    /* The data dir's own entry must survive a power cut before anything in it is
     * acknowledged: a new dir whose parent was never synced can vanish whole. Every start, not
     * only when mkdir made it: a first start that died before this sync left it unsynced. */
    rc = kv_datadir_sync(m.cfg.data_dir, KV_DATADIR_SYNC_PARENT, err, sizeof(err));
    if (rc == -EACCES || rc == -EPERM) {
        /* a parent this user may not open (a dir made for it by an operator): its entry was
         * made and synced by someone else; say so rather than refuse to start */
        fprintf(stderr,
                "kvd: warning: %s; the data dir's own entry is as durable as whoever "
                "made it left it\n",
                err);
    } else if (rc < 0) {
        fprintf(stderr, "kvd: fatal: %s\n", err);
        return 1;
    }
    /* One process per data dir: two corrupt it. */
    rc = kv_datadir_lock(m.cfg.data_dir, &m.lock_fd, err, sizeof(err));
    if (rc < 0) {
        fprintf(stderr, "kvd: fatal: %s\n", err);
        return 1;
    }
    /* --auto-tls / --peer-auto-tls: make or reuse the self-signed pairs in the data dir
     * before any TLS context is built (tls_auto.h). */
    rc = kv_tls_auto_prepare(&m.cfg, err, sizeof(err));
    if (rc < 0) {
        fprintf(stderr, "kvd: fatal: %s\n", err);
        return 1;
    }
    /* A defragment killed mid-copy leaves its partial copy behind (as large as the data);
     * under the lock no defragment runs, so it is garbage (docs/ARCHITECTURE.md, Defragment). */
    int64_t freed = kv_store_defrag_cleanup(m.cfg.data_dir);
    if (freed < 0)
        fprintf(stderr,
                "kvd: warning: cannot remove %s/defrag.tmp left by an interrupted defragment: "
                "%s\n",
                m.cfg.data_dir, strerror((int)-freed));
    else if (freed > 0)
        fprintf(stderr,
                "kvd: warning: removed %s/defrag.tmp (%lld bytes) left by an interrupted "
                "defragment\n",
                m.cfg.data_dir, (long long)freed);
    /* The dir `etcdctl snapshot restore` wrote, with kvd started where etcd was: import its
     * db once (etcd_datadir.h); a live etcd member's dir is refused. */
    rc = kv_etcd_datadir_adopt(m.cfg.data_dir, err, sizeof(err));
    if (rc < 0) {
        fprintf(stderr, "kvd: refusing to start: %s\n", err);
        return 1;
    }
    if (rc > 0)
        fprintf(stderr, "kvd: %s\n", err);
    /* Check the LMDB file before LMDB trusts it: its whole structure (LMDB crashes on a
     * corrupt page, docs/corruption.md), then the bounded walk and record checks. */
    rc = 0;
    if (m.cfg.startup_verify_full)
        rc = kv_store_verify_structure(m.cfg.data_dir, err, sizeof(err));
    if (rc == 0)
        rc = kv_store_verify_file(m.cfg.data_dir, m.cfg.startup_verify_records, err, sizeof(err));
    if (rc < 0) {
        fprintf(stderr, "kvd: refusing to start: %s\n", err);
        return 1;
    }
    kv_store_config sc;
    kv_store_config_default(&sc);
    sc.dir = m.cfg.data_dir;
    sc.quota_bytes = m.cfg.quota_backend_bytes ? m.cfg.quota_backend_bytes : sc.quota_bytes;
    sc.max_keys_per_lease = m.cfg.max_keys_per_lease;
    sc.unsafe_no_fsync = m.cfg.unsafe_no_fsync;
    rc = kv_store_open(&s->api.store, &sc);
    if (rc < 0) {
        fprintf(stderr, "kvd: fatal: cannot open data dir %s: %s\n", m.cfg.data_dir, strerror(-rc));
        return 1;
    }
    /* LMDB never syncs a directory: data.mdb made by this (first) start, and kvd.lock, are
     * durable names only once the data dir is synced, before the node acknowledges anything
     * (with the raft log in data.mdb no later sync of the dir would come). */
    rc = kv_datadir_sync(m.cfg.data_dir, KV_DATADIR_SYNC_SELF, err, sizeof(err));
    if (rc < 0) {
        fprintf(stderr, "kvd: fatal: %s\n", err);
        kv_store_close(s->api.store);
        return 1;
    }
    rc = kv_store_verify_records(s->api.store, m.cfg.startup_verify_records, err, sizeof(err));
    if (rc == 0)
        rc = check_identity(&m, 0, err, sizeof(err));
    if (rc < 0) {
        fprintf(stderr, "kvd: refusing to start: %s\n", err);
        kv_store_close(s->api.store);
        return 1;
    }
    if (s->joining && !m.cfg.initial_member_id[0]) {
        /* As etcd's joiner (getClusterFromRemotePeers): the id `member add` gave this member's
         * peer URLs comes from the cluster's member list, asked of the --initial-cluster
         * peers before anything runs (members_join.h; docs/ARCHITECTURE.md "Membership"). */
        kv_tls_ctx *tsrv = NULL, *tcli = NULL;
        rc = kv_tls_setup_peer(&m.cfg, NULL, &tsrv, &tcli, err, sizeof(err));
        if (rc == 0)
            rc = kv_members_join_lookup(&m.cfg, tcli, &s->id, err, sizeof(err));
        kv_tls_ctx_unref(tsrv);
        kv_tls_ctx_unref(tcli);
        if (rc < 0) {
            fprintf(stderr, "kvd: refusing to start: %s\n", err);
            kv_store_close(s->api.store);
            return 1;
        }
    }
    if (s->joining)
        fprintf(stderr, "kvd: joining as member %016llx%s\n", (unsigned long long)s->id.member_id,
                m.cfg.initial_member_id[0] ? " (--initial-member-id)"
                                           : " (from the cluster's member list)");

    rc = kv_server_start_core(s);
    if (rc < 0)
        goto fail;
    rc = kv_auto_compact_start(&m.autoc, &s->api, err, sizeof(err));
    if (rc == -EINVAL) {
        fprintf(stderr, "kvd: refusing to start: %s\n", err);
        return 1;
    }
    if (rc < 0)
        goto fail;

    kv_store_status ss;
    kv_store_get_status(s->api.store, &ss);
    fprintf(stderr,
            "kvd: member %016llx (%s) of cluster %016llx, data dir %s: startup took %llu ms "
            "(applied index %llu, revision %lld, %llu keys)\n",
            (unsigned long long)s->id.member_id, m.cfg.name, (unsigned long long)s->id.cluster_id,
            m.cfg.data_dir, (unsigned long long)(kv_mono_ms() - t0),
            (unsigned long long)ss.applied_index, (long long)ss.revision,
            (unsigned long long)ss.keys);

    /* etcd's CheckInitialHashKV: before serving clients, not on a fresh data dir (etcd: only
     * when the member was initialized; docs/corruption.md). */
    if (m.cfg.initial_corrupt_check && ss.applied_index > 0 &&
        kv_corrupt_initial_check(s->corrupt, err, sizeof(err)) != 0) {
        fprintf(stderr, "kvd: refusing to start: %s\n", err);
        kv_auto_compact_stop(m.autoc);
        kv_server_stop_core(s);
        uv_run(&m.loop, UV_RUN_DEFAULT); /* the closed handles' callbacks */
        kv_store_close(s->api.store);
        uv_loop_close(&m.loop);
        kv_metrics_free(s->api.metrics);
        kv_datadir_unlock(m.lock_fd);
        return 1;
    }
    rc = start_listeners(&m);
    if (rc < 0)
        goto fail;
    rc = kv_require_leader_start(&m.reqlead, &s->api, m.grpc, &m.n_grpc, m.cfg.election_timeout_ms);
    if (rc < 0)
        goto fail;
    /* Serving: this data dir now belongs to these ids. The raft node already runs (the
     * initial corruption check ran the loop to ask the peers): one of its ready cycles may hold
     * the store's write batch open (-EBUSY); let the loop finish it, then check again. */
    uint64_t busy_until = kv_mono_ms() + 30000;
    while ((rc = check_identity(&m, 1, err, sizeof(err))) == -EBUSY && kv_mono_ms() < busy_until)
        uv_run(&m.loop, UV_RUN_ONCE);
    if (rc < 0) {
        fprintf(stderr, "kvd: refusing to start: %s\n", err);
        return 1;
    }

    uv_signal_init(&m.loop, &m.sigint);
    uv_signal_init(&m.loop, &m.sigterm);
    m.sigint.data = m.sigterm.data = &m;
    uv_signal_start(&m.sigint, on_signal, SIGINT);
    uv_signal_start(&m.sigterm, on_signal, SIGTERM);
    if (m.cfg.enable_failpoints) {
        uv_signal_init(&m.loop, &m.sigusr1);
        m.sigusr1.data = &m;
        uv_signal_start(&m.sigusr1, on_failpoint_signal, SIGUSR1);
        uv_signal_init(&m.loop, &m.sigusr2);
        m.sigusr2.data = &m;
        uv_signal_start(&m.sigusr2, on_isolate_signal, SIGUSR2);
        static const char *const dvar[2] = {"KVD_FAILPOINT_PEER_DELAY_MS",
                                            "KVD_FAILPOINT_PEER_RANDOM_DELAY_MS"};
        for (int k = 0; k < 2; k++) {
            const char *pd = getenv(dvar[k]);
            if (pd && kv_peer_delay_parse(pd, &m.delay[k].ms, &m.delay[k].jitter_ms) < 0)
                fprintf(stderr, "kvd: warning: bad %s '%s' (D[,J])\n", dvar[k], pd);
            if (pd && m.delay[k].ms > 0) {
                uv_signal_init(&m.loop, &m.sigdelay[k]);
                m.sigdelay[k].data = &m;
                uv_signal_start(&m.sigdelay[k], on_delay_signal, SIGRTMIN + 3 + k);
            }
        }
    }
    fprintf(stderr, "kvd: ready to serve client requests\n");
    rc = kv_sd_notify(getenv("NOTIFY_SOCKET"), "READY=1\nSTATUS=ready to serve client requests");
    if (rc < 0)
        fprintf(stderr, "kvd: warning: cannot notify systemd at $NOTIFY_SOCKET: %s\n",
                strerror(-rc));

    uv_run(&m.loop, UV_RUN_DEFAULT);

    kv_store_close(s->api.store);
    kv_tls_ctx_unref(m.client_tls);
    uv_loop_close(&m.loop);
    kv_metrics_free(s->api.metrics);
    kv_datadir_unlock(m.lock_fd);
    fprintf(stderr, "kvd: stopped\n");
    return 0;

fail:
    fprintf(stderr, "kvd: startup failed: %s\n", strerror(rc < 0 ? -rc : rc));
    return 1;
}
