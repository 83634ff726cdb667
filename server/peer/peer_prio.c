/*
 * peer_prio.c - the per-peer priority send queue (renewals ahead of bulk
 * writes).
 *
 * Each peer has two send queues feeding its one message stream: the ordinary queue (raft
 * messages, forwarded proposals; bounded by max_queue_bytes) and a small priority queue
 * (forwarded lease renewals / TimeToLive and their answers, raft heartbeats and their
 * answers; bounded by max_prio_queue_bytes, --peer-max-priority-queue-bytes). At every frame
 * boundary the stream takes the priority queue first, so a renewal never waits behind megabytes of
 * appends, and is never dropped because appends filled the ordinary queue. A frame already partly
 * written is finished first (frames are not interleaved on the wire). Frames of one queue arrive in
 * order; a priority frame may overtake ordinary frames queued before it.
 *
 * A full priority queue refuses the frame (-EAGAIN) and a dropped connection drops the queued
 * frames: the senders (lease_fwd.c, lease_fwd_serve.c) then retry or let the request time
 * out, which drops a renewal without an answer; neither ends a client's keepalive stream.
 *
 * Metrics per peer: kvd_peer_priority_queued_bytes (depth), kvd_peer_priority_frames_sent_total
 * (frames taken from it), kvd_peer_priority_frames_dropped_total (queue full).
 * Loop thread only. Frames are owned by the queue until written or dropped.
 */
#include "peer/peer_delay.h"
#include "peer/peer_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int kv_peer_net_send_prio(kv_peer_net *n, uint64_t to, uint32_t type, const uint8_t *buf,
                          size_t len)
{
    kv_peer *p = NULL;
    int rc = kv_peer_send_check(n, to, type, buf, len, n ? n->cfg.max_prio_queue_bytes : 0, &p);
    if (rc < 0)
        return rc;
    /* the delay failpoint holds the node's own frames (raft heartbeats) like every raft
     * frame; lease frames bypass it (peer_delay.h) */
    if (type < KV_PEER_DELAY_BYPASS_MIN && kv_peer_delay_tx(p, type, buf, len, &rc))
        return rc;
    rc = kv_peer_send_gate(p);
    if (rc != 0)
        return rc > 0 ? 0 : rc;
    if (p->pq_bytes + 8 + len > n->cfg.max_prio_queue_bytes) {
        kv_metric_inc(p->m_dropped);
        kv_metric_inc(p->m_pq_dropped);
        return -EAGAIN;
    }
    peer_qframe *f = kv_peer_frame_new(type, buf, len);
    if (!f) {
        kv_metric_inc(p->m_dropped);
        return -ENOMEM;
    }
    kv_list_insert_tail(&p->pq, &f->link);
    p->pq_bytes += f->len;
    kv_metric_set(p->m_pq_queued, (double)p->pq_bytes);
    kv_metric_inc(p->m_sent);
    if (p->conn)
        kv_peer_conn_resume_msg(p->conn);
    return 0;
}

size_t kv_peer_prio_drop_all(kv_peer *p)
{
    size_t n = 0;
    kv_list *e;
    while ((e = kv_list_head(&p->pq))) {
        kv_list_remove(e);
        free(kv_list_data(e, peer_qframe, link));
        n++;
    }
    p->pq_bytes = 0;
    kv_metric_set(p->m_pq_queued, 0);
    return n;
}

/* The first frame of queue q, NULL if it is empty. */
static peer_qframe *first(const kv_list *q)
{
    kv_list *e = kv_list_head(q);
    return e ? kv_list_data(e, peer_qframe, link) : NULL;
}

/* Copies from the first frame of the queue (q, bytes) into buf; pops the frame once it is
 * all written. Returns the bytes copied; *done is set when a frame completed. */
static size_t take(kv_list *q, size_t *bytes, uint8_t *buf, size_t room, int *done)
{
    peer_qframe *f = first(q);
    size_t n = f->len - f->off;
    if (n > room)
        n = room;
    memcpy(buf, f->data + f->off, n);
    f->off += n;
    *done = f->off == f->len;
    if (*done) {
        kv_list_remove(&f->link);
        *bytes -= f->len;
        free(f);
    }
    return n;
}

size_t kv_peer_msg_fill(kv_peer *p, uint8_t *buf, size_t length)
{
    size_t n = 0;
    int taken_q = 0, taken_pq = 0;
    while (n < length) {
        int done = 0;
        /* An ordinary frame partly written goes first; else the priority queue. */
        peer_qframe *f = first(&p->q);
        if (f && (f->off > 0 || kv_list_empty(&p->pq))) {
            n += take(&p->q, &p->queued_bytes, buf + n, length - n, &done);
            taken_q = 1;
        } else if (!kv_list_empty(&p->pq)) {
            n += take(&p->pq, &p->pq_bytes, buf + n, length - n, &done);
            taken_pq = 1;
            if (done)
                kv_metric_inc(p->m_pq_served);
        } else {
            break;
        }
    }
    if (taken_q)
        kv_metric_set(p->m_queued, (double)p->queued_bytes);
    if (taken_pq)
        kv_metric_set(p->m_pq_queued, (double)p->pq_bytes);
    return n;
}

void kv_peer_prio_metrics_init(kv_peer_net *n, kv_peer *p, const char *labels)
{
    if (!n->metrics)
        return;
    p->m_pq_queued = kv_metrics_gauge(
        n->metrics, "kvd_peer_priority_queued_bytes",
        "Bytes in the peer's priority queue (lease renewals and their answers, sent ahead of "
        "raft traffic; bounded by --peer-max-priority-queue-bytes).",
        labels);
    p->m_pq_served =
        kv_metrics_counter(n->metrics, "kvd_peer_priority_frames_sent_total",
                           "Frames written to the peer from its priority queue.", labels);
    p->m_pq_dropped =
        kv_metrics_counter(n->metrics, "kvd_peer_priority_frames_dropped_total",
                           "Priority frames dropped because the priority queue was full.", labels);
}
