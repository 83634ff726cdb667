/*
 * ping.c - HTTP/2 keepalive pings on the client's connection (kvc_config.keepalive_time_ms,
 * keepalive_timeout_ms), as grpc-go's client keepalive that clientv3's DialKeepAliveTime and
 * etcdctl's --keepalive-time / --keepalive-timeout configure.
 *
 * A member that hangs (stopped, overloaded to silence, a half-open TCP connection) ends no
 * stream and sends no GOAWAY, so nothing else tells the client to move: its watch, keepalive
 * and raw streams would wait until the kernel gives up on the socket. With keepalive on,
 * once the connection has read nothing for keepalive_time_ms while it carries a stream, the
 * client sends a PING; when neither the ack nor any other byte arrives within
 * keepalive_timeout_ms, the connection is given up (kvc_conn_fail: the streams end or move,
 * the client goes to its next endpoint).
 *
 * As grpc-go's client (PermitWithoutStream false) it pings only while a call or stream is
 * open: members enforce a minimum interval between pings (--grpc-keepalive-min-time, 5 s)
 * and count a ping on a connection without calls as abuse. keepalive_time_ms below 10 s is
 * raised to 10 s, as grpc-go does: twice the members' minimum, so a ping that a busy member
 * measures a little early is not a strike.
 *
 * All functions run on the I/O thread. The timer is the client's (ping_timer); it only
 * acts on the current connection, and kvc_ping_on_ready re-arms it for each new one.
 */
#include "internal.h"

#include <stdio.h>

static int has_streams(const kvc_client *c)
{
    return c->inflight.n > 0 || c->ka.stream_open || c->wt.stream_open || c->bidi.n_open > 0;
}

static void ping_timer_cb(uv_timer_t *t)
{
    kvc_client *c = t->data;
    struct kvc_conn *cn = c->conn;
    if (c->closing || !cn || cn->dead || !cn->ready)
        return; /* no connection: the next one re-arms (kvc_ping_on_ready) */
    uint64_t now = uv_now(t->loop);
    uint32_t every = c->cfg.keepalive_time_ms;
    if (c->ping_sent_at) {
        /* bytes came since (the ack or anything else; same millisecond included): alive */
        if (c->last_read_at >= c->ping_sent_at) {
            c->ping_sent_at = 0;
            uv_timer_start(t, ping_timer_cb, every, 0);
            return;
        }
        char why[160];
        snprintf(why, sizeof why,
                 "keepalive ping unanswered for %u ms (member hung?): trying the next endpoint",
                 c->cfg.keepalive_timeout_ms);
        c->ping_sent_at = 0;
        KVC_STAT_INC(c, ping_timeouts);
        kvc_conn_fail(c, why);
        return;
    }
    uint64_t idle = now - c->last_read_at;
    if (idle < every) { /* read recently: no ping needed yet */
        uv_timer_start(t, ping_timer_cb, every - idle, 0);
        return;
    }
    if (!has_streams(c) || nghttp2_submit_ping(cn->h2, NGHTTP2_FLAG_NONE, NULL) != 0) {
        uv_timer_start(t, ping_timer_cb, every, 0);
        return;
    }
    c->ping_sent_at = now;
    kvc_conn_flush(c);
    uv_timer_start(t, ping_timer_cb, c->cfg.keepalive_timeout_ms, 0);
}

void kvc_ping_init(kvc_client *c)
{
    uv_timer_init(&c->lg->loop, &c->ping_timer);
    c->ping_timer.data = c;
    c->open_handles++;
}

void kvc_ping_on_ready(kvc_client *c)
{
    if (!c->cfg.keepalive_time_ms)
        return;
    c->ping_sent_at = 0;
    c->last_read_at = uv_now(&c->lg->loop);
    uv_timer_start(&c->ping_timer, ping_timer_cb, c->cfg.keepalive_time_ms, 0);
}

void kvc_ping_on_read(kvc_client *c)
{
    c->last_read_at = uv_now(&c->lg->loop);
}

void kvc_ping_stop(kvc_client *c)
{
    c->ping_sent_at = 0;
    uv_timer_stop(&c->ping_timer);
}

void kvc_ping_close(kvc_client *c)
{
    uv_timer_stop(&c->ping_timer);
    uv_close((uv_handle_t *)&c->ping_timer, kvc_handle_closed_cb);
}
