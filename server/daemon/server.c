/*
 * server.c: starting and stopping one member's core (see daemon/server.h). kvd's main() and the
 * in-process fuzz harness (tests/fuzz/fuzz_kvd.c) both use it, so the harness exercises the
 * member exactly as kvd builds it.
 */
#include "daemon/server.h"

#include "api/services.h"
#include "daemon/etcd_metrics.h"
#include "daemon/heap_trim.h"
#include "daemon/tls_setup.h"

#include "corrupt/corrupt_check.h"
#include "lease/lease_fwd.h"
#include "lease/leases.h"
#include "daemon/members_boot.h"
#include "daemon/members_join.h"
#include "mvcc/members.h"
#include "node/read_pool.h"
#include "api/auth_srv.h"
#include "peer/peer_net.h"
#include "watch/watch_hub.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* heap_trim's activity: trims follow applied writes. */
static uint64_t applied_index(void *arg)
{
    return kv_node_applied_index(arg);
}

static void on_commit(void *arg, int64_t revision)
{
    kv_watch_hub_notify(arg, revision);
}

/* The watch hub reads committed revisions back from LMDB after each batch (node hook). */
static int start_watch(kv_server *s)
{
    kv_watch_config wc;
    kv_watch_config_default(&wc);
    wc.max_watchers_per_stream = s->cfg->max_watchers_per_stream;
    wc.max_streams_per_conn = s->cfg->max_watch_streams_per_conn;
    wc.stream_send_buffer_bytes = s->cfg->watch_send_buffer_bytes;
    wc.max_response_bytes = s->cfg->max_request_bytes;
    wc.progress_interval_ms = s->cfg->watch_progress_interval_ms;
    if (s->cfg->enable_failpoints) /* testing: watch_failpoint.c */
        wc.fp_drop_event_at = kv_watch_fp_env();
    int rc = kv_watch_hub_init(&s->api.watch, s->api.loop, s->api.store, &wc,
                               kv_node_header(s->api.node), kv_node_revision(s->api.node),
                               s->api.metrics);
    if (rc < 0)
        return rc;
    kv_node_set_commit_hook(s->api.node, on_commit, s->api.watch);
    return 0;
}

/* The api's narrow view of the flags (api/api.h); strings point into *s->cfg. */
static void api_config(kv_server *s)
{
    const kv_config *c = s->cfg;
    kv_api_config *a = &s->api_cfg;
    a->name = c->name;
    a->data_dir = c->data_dir;
    a->initial_cluster_token = c->initial_cluster_token;
    for (size_t i = 0; i < c->n_advertise_client && i < KV_API_MAX_URLS; i++)
        a->advertise_client[a->n_advertise_client++] = c->advertise_client[i].text;
    a->strict_reconfig_check = c->strict_reconfig_check;
    a->max_request_bytes = c->max_request_bytes;
    a->max_txn_ops = c->max_txn_ops;
    a->max_keys_per_lease = c->max_keys_per_lease;
    a->max_send_buffer_bytes = c->max_send_buffer_bytes;
    a->max_snapshots = c->max_snapshots;
    a->max_watch_streams_per_conn = c->max_watch_streams_per_conn;
    a->max_concurrency_waiters = c->max_concurrency_waiters;
    a->auto_compaction_mode = c->auto_compaction_mode;
    a->auto_compaction_retention = c->auto_compaction_retention;
    a->auto_compaction_interval_ms = c->auto_compaction_interval_ms;
    a->client_cert_auth = c->client_cert_auth;
    a->auth_token = c->auth_token;
    a->auth_token_ttl = c->auth_token_ttl;
    a->auth_hash_iterations = c->auth_hash_iterations;
    a->auth_max_pending_hashes = c->auth_max_pending_hashes;
    a->auth_max_tokens = c->auth_max_tokens;
}

/* MemberList before the members table is written: the flags' view (api/api.h). */
static int flags_members(void *arg, Kvdpb__Member ***out, size_t *n)
{
    kv_server *s = arg;
    return kv_members_from_config(s->cfg, &s->id, out, n);
}

static void peer_on_message(void *arg, uint64_t from, uint32_t type, const uint8_t *buf, size_t len)
{
    kv_node_on_peer_message(((kv_server *)arg)->api.node, from, type, buf, len);
}

static void peer_on_snapshot(void *arg, uint64_t from, const uint8_t *hdr, size_t hdr_len,
                             const char *path)
{
    /* A file install would refuse stops the member once raft took its message: drop it here
     * (the leader sends another one after its next probe). */
    int rc = kv_store_snapshot_check(path);
    if (rc < 0) {
        fprintf(stderr,
                "kvd: warning: dropping a snapshot from %016llx: %s is not a kvd data file (%s)\n",
                (unsigned long long)from, path, strerror(-rc));
        unlink(path);
        return;
    }
    kv_node_on_peer_snapshot(((kv_server *)arg)->api.node, from, hdr, hdr_len, path);
}

static int store_identity(void *arg)
{
    kv_server *s = arg;
    kv_store_identity want = {.member_id = s->id.member_id, .cluster_id = s->id.cluster_id}, have;
    snprintf(want.name, sizeof(want.name), "%s", s->cfg->name);
    int rc = kv_store_identity_check(s->api.store, &want, &have, 1);
    return rc < 0 ? rc : 0;
}

static void identity_stored(void *arg, int status)
{
    (void)arg;
    if (status < 0)
        fprintf(stderr, "kvd: error: storing the member identity failed: %s\n", strerror(-status));
}

/* A joining member learned the cluster id from its peers: adopt it and record it. */
static void peer_on_cluster_id(void *arg, uint64_t cluster_id)
{
    kv_server *s = arg;
    s->id.cluster_id = cluster_id;
    s->joining = 0;
    kv_node_set_cluster_id(s->api.node, cluster_id);
    fprintf(stderr, "kvd: joined cluster %016llx\n", (unsigned long long)cluster_id);
    if (kv_node_exclusive(s->api.node, store_identity, identity_stored, s) < 0)
        fprintf(stderr,
                "kvd: warning: cannot record the member identity now; it is recorded at the "
                "next start\n");
}

/* The first peer URL --initial-cluster gives the k-th member (identity.c's order). */
static const char *member_url(const kv_config *cfg, size_t k)
{
    size_t seen = 0;
    for (size_t i = 0; i < cfg->n_initial_cluster; i++) {
        int first = 1;
        for (size_t j = 0; j < i; j++)
            first &= strcmp(cfg->initial_cluster[j].name, cfg->initial_cluster[i].name) != 0;
        if (!first)
            continue;
        if (seen++ == k)
            return cfg->initial_cluster[i].url.text;
    }
    return NULL;
}

/* The peer URL of member id: --initial-cluster first, then the members table. */
static int member_peer_url(kv_server *s, uint64_t id, char *url, size_t cap)
{
    for (size_t k = 0; k < s->id.n_members; k++) {
        const char *u = member_url(s->cfg, k);
        if (s->id.member_ids[k] == id && u) {
            snprintf(url, cap, "%s", u);
            return 0;
        }
    }
    Kvdpb__Member *m = NULL;
    if (kv_store_member_get(s->api.store, id, &m) != 0 || m == NULL)
        return -ENOENT;
    int rc = m->n_peer_urls ? 0 : -ENOENT;
    if (rc == 0)
        snprintf(url, cap, "%s", m->peer_urls[0]);
    kvdpb__member__free_unpacked(m, NULL);
    return rc;
}

/* A configuration change applied: connect to an added member (its peer URL is in the members
 * table by then), drop a removed one. */
static void on_conf_change(void *arg, int op, uint64_t id)
{
    kv_server *s = arg;
    if (op == KV_NODE_MEMBER_REMOVE && id == s->id.member_id) {
        /* etcd: a removed member stops ("the member has been permanently removed from the
         * cluster"); its data dir cannot rejoin (the id stays removed). */
        fprintf(stderr, "kvd: warning: this member was removed from the cluster; shutting down\n");
        raise(SIGTERM);
        return;
    }
    if (s->api.peers == NULL || id == s->id.member_id)
        return;
    if (op == KV_NODE_MEMBER_REMOVE) {
        kv_peer_net_remove_peer(s->api.peers, id);
        return;
    }
    char url[256];
    if (member_peer_url(s, id, url, sizeof(url)) == 0)
        kv_peer_net_add_peer(s->api.peers, id, url);
}

/* etcd's GET /members on the peer port (peer/peer_h1.c): the committed member list, or the
 * flags' view while the table is empty (as MemberList, api/service_cluster.c). */
static int peer_members_json(void *arg, char **json, size_t *len)
{
    kv_server *s = arg;
    Kvdpb__Member **m = NULL;
    size_t n = 0;
    int rc = kv_store_members_list(s->api.store, &m, &n);
    if (rc == 0 && n == 0)
        rc = kv_members_from_config(s->cfg, &s->id, &m, &n);
    if (rc == 0)
        rc = kv_members_json((const Kvdpb__Member *const *)m, n, json, len);
    kv_store_members_free(m, n);
    return rc;
}

/* A peer connection went down: forwarded lease requests in flight on it are asked again. */
static void peer_on_state(void *arg, uint64_t id, int up)
{
    kv_server *s = arg;
    if (!up)
        kv_lease_fwd_peer_down(s->api.lease_fwd, id);
}

static int start_peers(kv_server *s, const char *snap_dir)
{
    const kv_config *cfg = s->cfg;
    kv_peer_net_config pc;
    kv_peer_net_config_default(&pc);
    pc.self_id = s->id.member_id;
    pc.cluster_id = s->id.cluster_id;
    for (size_t i = 0; i < cfg->n_listen_peer && i < 8; i++)
        pc.listen_urls[pc.n_listen++] = cfg->listen_peer[i].text;
    for (size_t k = 0; k < s->id.n_members && pc.n_peers < 16; k++) {
        const char *url = member_url(cfg, k);
        if (s->id.member_ids[k] == s->id.member_id || url == NULL)
            continue;
        pc.peers[pc.n_peers].id = s->id.member_ids[k];
        snprintf(pc.peers[pc.n_peers].url, sizeof(pc.peers[pc.n_peers].url), "%s", url);
        pc.n_peers++;
    }
    pc.snap_dir = snap_dir;
    if (cfg->peer_max_queue_bytes)
        pc.max_queue_bytes = cfg->peer_max_queue_bytes;
    if (cfg->peer_max_prio_queue_bytes)
        pc.max_prio_queue_bytes = cfg->peer_max_prio_queue_bytes;
    pc.max_pending_conns = cfg->peer_max_pending_conns;
    pc.handshake_timeout_ms = cfg->peer_handshake_timeout_ms;
    pc.max_snapshot_bytes = cfg->max_snapshot_bytes
                                ? cfg->max_snapshot_bytes
                                : 2 * (uint64_t)kv_store_map_size(kv_store_quota(s->api.store));
    pc.seed = s->id.member_id;
    /* Redial a lost peer at least once per election timeout: a restarted member must hear
     * from the leader (the lower id dials) long before it would give up and campaign. */
    if (cfg->election_timeout_ms && pc.dial_backoff_max_ms > cfg->election_timeout_ms)
        pc.dial_backoff_max_ms = cfg->election_timeout_ms;
    pc.joining = s->joining;
    char terr[1024];
    int trc = kv_tls_setup_peer(cfg, s->api.metrics, &pc.tls_server, &pc.tls_client, terr,
                                sizeof(terr)); /* the net takes its own references */
    if (trc < 0) {
        fprintf(stderr, "kvd: error: peer TLS: %s\n", terr);
        return trc;
    }
    kv_peer_handler h = {.arg = s,
                         .on_message = peer_on_message,
                         .on_snapshot = peer_on_snapshot,
                         .on_peer_state = peer_on_state,
                         .on_cluster_id = peer_on_cluster_id,
                         .members_json = peer_members_json};
    int rc = kv_peer_net_start(&s->api.peers, s->api.loop, &pc, &h, s->api.metrics);
    kv_tls_ctx_unref(pc.tls_server);
    kv_tls_ctx_unref(pc.tls_client);
    if (rc < 0) {
        fprintf(stderr, "kvd: error: cannot start the peer transport: %s\n", strerror(-rc));
        return rc;
    }
    kv_node_attach_peers(s->api.node, s->api.peers);
    kv_node_set_conf_hook(s->api.node, on_conf_change, s);
    return 0;
}

int kv_server_start_core(kv_server *s)
{
    const kv_config *cfg = s->cfg;
    api_config(s);
    s->api.cfg = &s->api_cfg;
    s->api.member_id = s->id.member_id;
    s->api.flags_members = flags_members;
    s->api.flags_members_arg = s;
    kv_api_metrics_init(&s->api);
    kv_header_info hdr = {
        .cluster_id = s->id.cluster_id, .member_id = s->id.member_id, .raft_term = 1};
    char snap_dir[600];
    snprintf(snap_dir, sizeof(snap_dir), "%s/snap", cfg->data_dir);
    if (mkdir(snap_dir, 0700) != 0 && errno != EEXIST) {
        fprintf(stderr, "kvd: error: cannot create %s: %s\n", snap_dir, strerror(errno));
        return -errno;
    }
    kv_node_config nc = {.max_pending = cfg->max_pending_proposals,
                         .max_health_waiters = cfg->max_health_probes,
                         .compact_batch_revs = cfg->compaction_batch_limit,
                         .voters = s->id.member_ids,
                         .n_voters = s->id.n_members,
                         .heartbeat_ms = cfg->heartbeat_interval_ms,
                         .election_ms = cfg->election_timeout_ms,
                         .snapshot_count = cfg->snapshot_count,
                         .snap_dir = snap_dir};
    nc.max_pending_reads = cfg->max_pending_read_index;
    nc.max_inbox_bytes = cfg->max_raft_inbox_bytes;
    nc.max_inbox_msgs = cfg->max_raft_inbox_messages;
    nc.max_forwarded = cfg->max_forwarded_proposals;
    nc.max_log_bytes = cfg->max_raft_log_bytes;
    nc.enable_failpoints = cfg->enable_failpoints; /* node/disk_failpoint.c */
    char wal_dir[600];
    snprintf(wal_dir, sizeof(wal_dir), "%s/wal", cfg->data_dir);
    nc.wal_dir = wal_dir; /* node_log.c: used with --experimental-wal, refused without it */
    nc.use_wal = cfg->experimental_wal;
    nc.wal_segment_bytes = cfg->wal_segment_bytes;
    nc.unsafe_no_fsync = cfg->unsafe_no_fsync;
    /* The initial membership from the flags (idempotent). */
    int rc = kv_members_bootstrap_config(s->api.store, cfg, &s->id);
    if (rc < 0)
        goto fail;
    rc = kv_node_init(&s->api.node, s->api.loop, s->api.store, &nc, &hdr, s->api.metrics);
    if (rc < 0)
        goto fail;
    /* Always, as etcd: a single member listens on its peer URLs too, so `member add` can
     * grow it (e2e TestIssue6361; cluster_membership one_member_grows_to_three). A new single
     * member whose peer URLs kvd cannot listen on (a unix:// URL, a bad peer certificate)
     * serves anyway, as before, and says that it cannot be grown (e2e TestEtcdUnixPeers). */
    rc = start_peers(s, snap_dir);
    if (rc < 0 && s->id.n_members <= 1 && strcmp(cfg->initial_cluster_state, "existing") != 0) {
        fprintf(stderr,
                "kvd: warning: this single member does not listen on its peer URLs (%s): it "
                "serves clients, but `member add` cannot grow it until it does\n",
                strerror(-rc));
        rc = 0;
    }
    if (rc < 0)
        goto fail;
    uint8_t *pub = NULL;
    size_t pub_len = 0;
    if (kv_members_publish_request(cfg, &s->id, &pub, &pub_len) == 0)
        kv_node_set_publish(s->api.node, pub, pub_len); /* takes pub */
    kv_leases_deps ld = {
        .loop = s->api.loop, .store = s->api.store, .node = s->api.node, .metrics = s->api.metrics};
    kv_leases_config lc = {.election_ms = cfg->election_timeout_ms,
                           .max_ttl_s = cfg->max_lease_ttl_s,
                           .revoke_rate = cfg->lease_revoke_rate,
                           .checkpoint_rate = cfg->lease_checkpoint_rate,
                           .checkpoint_interval_ms = cfg->lease_checkpoint_interval_ms,
                           .lead_at_start = s->id.n_members <= 1 &&
                                            strcmp(cfg->initial_cluster_state, "existing") != 0};
    rc = kv_leases_start(&s->leases, &ld, &lc);
    if (rc < 0)
        goto fail;
    s->api.lessor = kv_leases_lessor(s->leases);
    kv_lease_fwd_deps fd = {.loop = s->api.loop,
                            .node = s->api.node,
                            .lessor = s->api.lessor,
                            .metrics = s->api.metrics,
                            .calls = &kv_service_lease_call_ops,
                            .max_pending = cfg->max_pending_lease_forwards,
                            .election_ms = cfg->election_timeout_ms,
                            .heartbeat_ms = cfg->heartbeat_interval_ms};
    rc = kv_lease_fwd_start(&s->api.lease_fwd, &fd);
    if (rc < 0)
        goto fail;
    rc = kv_read_pool_init(&s->api.read_pool, s->api.loop, cfg->read_workers,
                           cfg->max_pending_reads, s->api.metrics);
    if (rc < 0)
        goto fail;
    rc = start_watch(s);
    if (rc < 0)
        goto fail;
    kv_corrupt_deps cd = {.loop = s->api.loop,
                          .metrics = s->api.metrics,
                          .store = s->api.store,
                          .node = s->api.node,
                          .read_pool = s->api.read_pool,
                          .member_id = s->id.member_id,
                          .has_peers = s->api.peers != NULL,
                          .election_ms = cfg->election_timeout_ms};
    rc = kv_corrupt_start(&s->corrupt, &cd, cfg->corrupt_check_time_ms);
    if (rc < 0)
        goto fail;
    rc = kv_auth_start(&s->api, &s->api.auth);
    if (rc < 0)
        goto fail;
    rc = kv_heap_trim_start(&s->heap_trim, s->api.loop, cfg->malloc_trim_interval_ms, applied_index,
                            s->api.node, s->api.metrics);
    if (rc < 0)
        goto fail;
    rc = kv_etcd_metrics_start(s);
    if (rc < 0)
        goto fail;
    kv_node_set_auth_hook(s->api.node, kv_auth_on_applied, &s->api); /* replicated tokens */
    return 0;
fail:
    kv_server_stop_core(s);
    return rc;
}

void kv_server_stop_core(kv_server *s)
{
    kv_etcd_metrics_stop(s);
    kv_heap_trim_stop(s->heap_trim); /* before the node closes */
    s->heap_trim = NULL;
    kv_corrupt_stop(s->corrupt); /* before the node closes */
    s->corrupt = NULL;
    if (s->api.node)
        kv_node_set_auth_hook(s->api.node, NULL, NULL);
    kv_auth_stop(s->api.auth); /* joins the hash worker */
    s->api.auth = NULL;
    kv_lease_fwd_stop(s->api.lease_fwd);
    s->api.lease_fwd = NULL;
    kv_leases_stop(s->leases);
    s->leases = NULL;
    s->api.lessor = NULL;
    if (s->api.node)
        kv_node_set_commit_hook(s->api.node, NULL, NULL);
    kv_watch_hub_close(s->api.watch);
    s->api.watch = NULL;
    if (s->api.node)
        kv_node_close(s->api.node); /* detaches it from the peer transport too */
    s->api.node = NULL;
    kv_peer_net_close(s->api.peers);
    s->api.peers = NULL;
    kv_read_pool_close(s->api.read_pool); /* joins the reader threads */
    s->api.read_pool = NULL;
}
