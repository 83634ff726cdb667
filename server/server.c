/*
 * server.c: starting and stopping one member's core (see server.h). kvd's main() and the
 * in-process fuzz harness (tests/fuzz/fuzz_kvd.c) both use it, so the harness exercises the
 * member exactly as kvd builds it.
 */
#include "server.h"

#include "leases.h"
#include "members_boot.h"
#include "node/read_pool.h"
#include "watch/watch_hub.h"

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
    int rc = kv_watch_hub_init(&s->watch, s->loop, s->store, &wc, kv_node_header(s->node),
                               kv_node_revision(s->node), s->metrics);
    if (rc < 0)
        return rc;
    kv_node_set_commit_hook(s->node, on_commit, s->watch);
    return 0;
}

int kv_server_start_core(kv_server *s)
{
    const kv_config *cfg = s->cfg;
    kv_header_info hdr = {
        .cluster_id = s->id.cluster_id, .member_id = s->id.member_id, .raft_term = 1};
    kv_node_config nc = {.max_pending = cfg->max_pending_proposals,
                         .max_health_waiters = cfg->max_health_probes};
    /* The initial membership from the flags (idempotent; issue 9 section 5). */
    int rc = kv_members_bootstrap_config(s->store, cfg, &s->id);
    if (rc < 0)
        goto fail;
    rc = kv_node_init(&s->node, s->loop, s->store, &nc, &hdr, s->metrics);
    if (rc < 0)
        goto fail;
    rc = kv_leases_start(s);
    if (rc < 0)
        goto fail;
    rc = kv_read_pool_init(&s->read_pool, s->loop, cfg->read_workers, cfg->max_pending_reads,
                           s->metrics);
    if (rc < 0)
        goto fail;
    rc = start_watch(s);
    if (rc < 0)
        goto fail;
    return 0;
fail:
    kv_server_stop_core(s);
    return rc;
}

void kv_server_stop_core(kv_server *s)
{
    if (s->lessor)
        kv_leases_stop(s);
    if (s->node)
        kv_node_set_commit_hook(s->node, NULL, NULL);
    kv_watch_hub_close(s->watch);
    s->watch = NULL;
    if (s->node)
        kv_node_close(s->node);
    s->node = NULL;
    kv_read_pool_close(s->read_pool); /* joins the reader threads */
    s->read_pool = NULL;
}
