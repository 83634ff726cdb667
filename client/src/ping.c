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
 * keepalive_call_ms (kvd grpc-proxy's --upstream-answer-timeout) checks sooner, and only for
 * unary and server-streaming calls: once calls are in flight and nothing was read on the
 * connection for that long since the first call sent after its last read (cancelled calls
 * count: a proxy's clients may give up on each call before the member is found silent), a
 * PING goes out at once (still at most one per 10 s), and nothing back within
 * keepalive_call_ms more gives the connection up. A live member acks the PING while a slow
 * call waits (a Lock, a Campaign), so only a silent connection is left. The check is armed
 * when the first unanswered call goes out (kvc_ping_on_call_sent), so a hung member is left
 * about 2 x keepalive_call_ms after it went silent.
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

static void ping_timer_cb(uv_timer_t *t);

static void arm(kvc_client *c, uint64_t ms)
{
    uv_timer_start(&c->ping_timer, ping_timer_cb, ms ? ms : 1, 0);
}

/* keepalive_time_ms: ms until an idle connection with streams is due a PING (0: now);
 * UINT64_MAX when off. */
static uint64_t idle_due(const kvc_client *c, uint64_t now)
{
    uint32_t every = c->cfg.keepalive_time_ms;
    if (!every)
        return UINT64_MAX;
    uint64_t idle = now - c->last_read_at;
    if (idle < every)
        return every - idle;
    return has_streams(c) ? 0 : every;
}

/* keepalive_call_ms: ms until the connection, with calls in flight and silent since the
 * first call sent after its last read (unanswered_since: a call cancelled meanwhile still
 * counts, the member owed it an answer), is due a PING (0: now); UINT64_MAX when off. Pings
 * stay KVC_MIN_KEEPALIVE_TIME_MS apart (members count closer ones as strikes). */
static uint64_t call_due(const kvc_client *c, uint64_t now)
{
    uint32_t quiet = c->cfg.keepalive_call_ms;
    if (!quiet)
        return UINT64_MAX;
    if (c->inflight.n == 0 || !c->unanswered_since)
        return quiet / 2 ? quiet / 2 : 1; /* look again: a call sent now is checked in time */
    uint64_t from = c->unanswered_since > c->last_read_at ? c->unanswered_since : c->last_read_at;
    uint64_t silent = now - from, due = silent < quiet ? quiet - silent : 0;
    if (c->last_ping_at && c->last_ping_at + KVC_MIN_KEEPALIVE_TIME_MS > now + due)
        due = c->last_ping_at + KVC_MIN_KEEPALIVE_TIME_MS - now;
    return due;
}

static void ping_timer_cb(uv_timer_t *t)
{
    kvc_client *c = t->data;
    struct kvc_conn *cn = c->conn;
    if (c->closing || !cn || cn->dead || !cn->ready)
        return; /* no connection: the next one re-arms (kvc_ping_on_ready) */
    uint64_t now = uv_now(t->loop);
    if (c->ping_sent_at) {
        /* bytes came since (the ack or anything else; same millisecond included): alive */
        if (c->last_read_at < c->ping_sent_at) {
            char why[200];
            if (c->ping_for_call)
                snprintf(why, sizeof why,
                         "a call and a keepalive ping went unanswered for %u ms (member hung?): "
                         "trying the next endpoint",
                         c->ping_timeout);
            else
                snprintf(why, sizeof why,
                         "keepalive ping unanswered for %u ms (member hung?): trying the next "
                         "endpoint",
                         c->ping_timeout);
            c->ping_sent_at = 0;
            KVC_STAT_INC(c, ping_timeouts);
            kvc_conn_fail(c, why);
            return;
        }
        c->ping_sent_at = 0;
    }
    uint64_t idle = idle_due(c, now), call = call_due(c, now);
    if (idle && call) { /* nothing due yet */
        arm(c, idle < call ? idle : call);
        return;
    }
    if (nghttp2_submit_ping(cn->h2, NGHTTP2_FLAG_NONE, NULL) != 0) {
        arm(c, c->cfg.keepalive_time_ms ? c->cfg.keepalive_time_ms : c->cfg.keepalive_call_ms);
        return;
    }
    c->ping_for_call = idle != 0;
    c->ping_timeout = idle == 0 ? c->cfg.keepalive_timeout_ms : c->cfg.keepalive_call_ms;
    c->ping_sent_at = now;
    c->last_ping_at = now;
    kvc_conn_flush(c);
    arm(c, c->ping_timeout);
}

void kvc_ping_init(kvc_client *c)
{
    uv_timer_init(&c->lg->loop, &c->ping_timer);
    c->ping_timer.data = c;
    c->open_handles++;
}

void kvc_ping_on_ready(kvc_client *c)
{
    if (!c->cfg.keepalive_time_ms && !c->cfg.keepalive_call_ms)
        return;
    uint64_t now = uv_now(&c->lg->loop);
    c->ping_sent_at = 0;
    c->last_ping_at = 0; /* a new connection: the member has seen no PING from us */
    c->last_read_at = now;
    c->unanswered_since = 0;
    uint64_t idle = idle_due(c, now), call = call_due(c, now);
    arm(c, idle < call ? idle : call);
}

void kvc_ping_on_read(kvc_client *c)
{
    c->last_read_at = uv_now(&c->lg->loop);
}

void kvc_ping_on_call_sent(kvc_client *c)
{
    /* the first call sent since the last read starts the silence (later ones do not move it) */
    if (c->unanswered_since > c->last_read_at)
        return;
    uint64_t now = uv_now(&c->lg->loop);
    c->unanswered_since = now;
    /* check when that silence is due, not at the next idle look (up to quiet/2 later) */
    if (c->cfg.keepalive_call_ms && !c->ping_sent_at && c->conn && c->conn->ready &&
        !c->conn->dead) {
        uint64_t due = call_due(c, now);
        if (due < uv_timer_get_due_in(&c->ping_timer))
            arm(c, due);
    }
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
