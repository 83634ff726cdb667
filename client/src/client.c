/*
 * client.c - kvc_open / kvc_close, configuration defaults, command dispatch, stats.
 */
#include "internal.h"
#include "net/tls.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void kvc_config_default(kvc_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->dial_timeout_ms = KVC_DEFAULT_DIAL_TIMEOUT_MS;
    cfg->max_pending = KVC_DEFAULT_MAX_PENDING;
    cfg->keepalive_queue_len = KVC_DEFAULT_KA_QUEUE_LEN;
    cfg->max_response_bytes = KVC_DEFAULT_MAX_RESPONSE;
    cfg->backoff_base_ms = KVC_DEFAULT_BACKOFF_BASE_MS;
    cfg->backoff_max_ms = KVC_DEFAULT_BACKOFF_MAX_MS;
}

const char *kvc_version(void)
{
    return "0.1.0";
}

void kvc_handle_closed_cb(uv_handle_t *h)
{
    kvc_client_handle_closed(h->data);
}

void kvc_client_handle_closed(kvc_client *c)
{
    c->open_handles--;
    if (c->closing && c->open_handles == 0 && c->close_waiter) {
        struct kvc_waiter *w = c->close_waiter;
        c->close_waiter = NULL;
        kvc_waiter_signal(w, 0, NULL); /* last touch of c on the I/O thread */
    }
}

static void loop_open(kvc_client *c, struct kvc_waiter *w)
{
    uv_timer_init(&c->lg->loop, &c->conn_timer);
    c->conn_timer.data = c;
    c->open_handles++;
    kvc_ping_init(c);
    kvc_ka_init(c);
    kvc_watch_init(c);
    c->state = CS_IDLE;
    kvc_conn_demand(c); /* eager connect */
    kvc_waiter_signal(w, 0, NULL);
}

/* I/O thread: kvc_failover. The drain completes once the connection's last call and stream
 * are gone (kvc_conn_flush checks it): at once when nothing is in flight. */
static void failover_loop(kvc_client *c, const char *reason)
{
    kvc_conn_drain(c, reason);
    kvc_conn_flush(c);
}

static void loop_close(kvc_client *c, struct kvc_waiter *w)
{
    c->closing = 1;
    c->close_waiter = w;
    kvc_calls_fail_all(c, KVC_CANCELLED, "kvclient: client closed");
    kvc_ka_close_all(c);
    kvc_watch_close_all(c);
    kvc_bidi_close_all(c);
    kvc_conn_close_handles(c);
}

void kvc_dispatch(struct kvc_cmd *cmd)
{
    kvc_client *c = cmd->c;
    switch (cmd->type) {
    case CMD_OPEN:
        loop_open(c, cmd->w);
        break;
    case CMD_CALL:
        kvc_call_start(cmd->p);
        break;
    case CMD_KA_ADD: {
        kvc_error e;
        int rc = kvc_ka_add(c, cmd->p, &e);
        kvc_waiter_signal(cmd->w, rc, rc ? &e : NULL);
        kvc_conn_flush(c);
    } break;
    case CMD_KA_STOP:
        kvc_ka_stop_loop(c, cmd->p);
        kvc_waiter_signal(cmd->w, 0, NULL);
        break;
    case CMD_CLOSE:
        loop_close(c, cmd->w);
        break;
    case CMD_WATCH_ADD:
        kvc_watch_add_loop(c, cmd->p);
        break;
    case CMD_WATCH_CANCEL:
        kvc_watch_cancel_loop(c, cmd->p);
        kvc_waiter_signal(cmd->w, 0, NULL);
        break;
    case CMD_BIDI_OPEN:
        kvc_bidi_open_loop(c, cmd->p);
        break;
    case CMD_BIDI_KICK:
        kvc_bidi_kick_loop(c, cmd->p);
        break;
    case CMD_BIDI_FREE:
        kvc_bidi_free_loop(c, cmd->p);
        if (cmd->w)
            kvc_waiter_signal(cmd->w, 0, NULL);
        break;
    case CMD_BIDI_FAILOVER:
        kvc_bidi_failover_loop(c, cmd->p);
        if (cmd->w)
            kvc_waiter_signal(cmd->w, 0, NULL);
        break;
    case CMD_FAILOVER:
        failover_loop(c, cmd->p);
        if (cmd->w)
            kvc_waiter_signal(cmd->w, 0, NULL);
        break;
    case CMD_BIDI_RECV:
        kvc_bidi_recv_loop(c, cmd->p);
        if (cmd->w)
            kvc_waiter_signal(cmd->w, 0, NULL);
        break;
    case CMD_CALL_CANCEL:
        kvc_waiter_signal(cmd->w, kvc_call_cancel_loop(cmd->p), NULL);
        break;
    case CMD_WATCH_PROGRESS: {
        kvc_error e;
        int rc = kvc_watch_progress_loop(c, &e);
        kvc_waiter_signal(cmd->w, rc, rc ? &e : NULL);
    } break;
    }
}

int kvc_open(kvc_client **out, const kvc_config *cfg, kvc_error *err)
{
    if (!out)
        return kvc_fail(err, KVC_INVALID_ARGUMENT, "kvclient: invalid argument");
    *out = NULL;
    if (!cfg || !cfg->endpoints || cfg->n_endpoints == 0)
        return kvc_fail(err, KVC_INVALID_ARGUMENT, "kvclient: no endpoints configured");
    if (cfg->loop_group && kvc_loop_on_thread(cfg->loop_group))
        return kvc_fail(err, KVC_FAILED_PRECONDITION,
                        "kvclient: kvc_open from the I/O thread of its own loop group");
    kvc_client *c = calloc(1, sizeof *c);
    if (!c)
        return kvc_fail(err, KVC_RESOURCE_EXHAUSTED, "kvclient: out of memory");
    kv_list_init(&c->waiting.list);
    kv_list_init(&c->inflight.list);
    kv_list_init(&c->retrying.list);
    kv_list_init(&c->ka.all);
    kv_list_init(&c->wt.all);
    kv_list_init(&c->wt.q);
    int rc;
    c->cfg = *cfg;
    c->cfg.endpoints = NULL;
    kvc_config d;
    kvc_config_default(&d);
    if (!c->cfg.dial_timeout_ms)
        c->cfg.dial_timeout_ms = d.dial_timeout_ms;
    if (!c->cfg.max_pending)
        c->cfg.max_pending = d.max_pending;
    if (!c->cfg.keepalive_queue_len)
        c->cfg.keepalive_queue_len = d.keepalive_queue_len;
    if (!c->cfg.max_response_bytes)
        c->cfg.max_response_bytes = d.max_response_bytes;
    if (!c->cfg.backoff_base_ms)
        c->cfg.backoff_base_ms = d.backoff_base_ms;
    if (!c->cfg.backoff_max_ms)
        c->cfg.backoff_max_ms = d.backoff_max_ms;
    if (c->cfg.backoff_max_ms < c->cfg.backoff_base_ms)
        c->cfg.backoff_max_ms = c->cfg.backoff_base_ms;
    if (c->cfg.keepalive_time_ms && c->cfg.keepalive_time_ms < KVC_MIN_KEEPALIVE_TIME_MS)
        c->cfg.keepalive_time_ms = KVC_MIN_KEEPALIVE_TIME_MS;
    if (!c->cfg.keepalive_timeout_ms)
        c->cfg.keepalive_timeout_ms = KVC_DEFAULT_KEEPALIVE_TIMEOUT_MS;
    c->eps = calloc(cfg->n_endpoints, sizeof *c->eps);
    if (!c->eps) {
        rc = kvc_fail(err, KVC_RESOURCE_EXHAUSTED, "kvclient: out of memory");
        goto fail;
    }
    c->n_eps = cfg->n_endpoints;
    for (size_t i = 0; i < c->n_eps; i++) {
        rc = kvc_endpoint_parse(&c->eps[i], cfg->endpoints[i], err);
        if (rc != 0)
            goto fail;
    }
    c->cfg.ca_file = c->cfg.cert_file = c->cfg.key_file = NULL; /* not kept: loaded here */
    if (cfg->auth_token) {
        if (strlen(cfg->auth_token) >= sizeof c->auth_token) {
            rc = kvc_fail(err, KVC_INVALID_ARGUMENT, "kvclient: auth token too long");
            goto fail;
        }
        snprintf(c->auth_token, sizeof c->auth_token, "%s", cfg->auth_token);
    }
    c->cfg.auth_token = NULL; /* kept in c->auth_token */
    if (cfg->server_name) {
        if (strlen(cfg->server_name) >= sizeof c->server_name) {
            rc = kvc_fail(err, KVC_INVALID_ARGUMENT, "kvclient: server name too long");
            goto fail;
        }
        snprintf(c->server_name, sizeof c->server_name, "%s", cfg->server_name);
    }
    c->cfg.server_name = NULL; /* kept in c->server_name */
    rc = kvc_tls_open(c, cfg, err);
    if (rc != 0)
        goto fail;
    c->rng = cfg->seed ? cfg->seed : (uv_hrtime() ^ ((uint64_t)(uintptr_t)c << 16));
    if (!c->rng)
        c->rng = 0x9E3779B97F4A7C15ULL;
    if (cfg->loop_group) {
        c->lg = cfg->loop_group;
    } else {
        rc = kvc_loop_group_new(&c->lg, err);
        if (rc != 0)
            goto fail;
        c->own_lg = 1;
    }
    (void)kvc_loop_run_cmd(c, &c->open_cmd, CMD_OPEN, NULL, NULL);
    *out = c;
    return 0;
fail:
    kv_tls_ctx_unref(c->tls);
    free(c->eps);
    free(c);
    return rc;
}

void kvc_failover(kvc_client *c, const char *reason)
{
    if (!c)
        return;
    if (!reason)
        reason = "the caller asked for the next endpoint";
    if (kvc_loop_on_thread(c->lg)) {
        failover_loop(c, reason);
        return;
    }
    struct kvc_cmd cmd;
    (void)kvc_loop_run_cmd(c, &cmd, CMD_FAILOVER, (void *)(uintptr_t)reason, NULL);
}

void kvc_close(kvc_client *c)
{
    if (!c)
        return;
    (void)kvc_loop_run_cmd(c, &c->close_cmd, CMD_CLOSE, NULL, NULL);
    if (c->own_lg)
        kvc_loop_group_free(c->lg);
    free(c->ka.heap);
    kvc_idmap_free(&c->ka.map);
    kvc_sendbuf_free(&c->ka.out);
    kvc_rbuf_free(&c->ka.s.rb);
    kvc_watch_free_sched(c);
    kv_tls_ctx_unref(c->tls);
    free(c->eps);
    free(c);
}

#define LD(f) atomic_load_explicit(&c->st.f, memory_order_relaxed)
void kvc_stats_get(kvc_client *c, kvc_stats *out)
{
    memset(out, 0, sizeof *out);
    if (!c)
        return;
    out->renewals_sent = LD(renewals_sent);
    out->responses_received = LD(responses_received);
    out->responses_dropped = LD(responses_dropped);
    out->reconnects = LD(reconnects);
    out->leases_lost = LD(leases_lost);
    out->leases_active = LD(leases_active);
    out->calls_started = LD(calls_started);
    out->calls_failed = LD(calls_failed);
    out->calls_retried = LD(calls_retried);
    out->queue_full = LD(queue_full);
    out->connects = LD(connects);
    out->ping_timeouts = LD(ping_timeouts);
}
