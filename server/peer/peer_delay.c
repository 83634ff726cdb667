/*
 * peer_delay.c - the peer delay failpoint (peer_delay.h): per peer and direction a FIFO of
 * held frames with monotonic due times, all driven by one uv_timer of the net.
 */
#include "peer/peer_delay.h"

#include "common/list.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "peer/peer_internal.h"

typedef struct delay_frame {
    kv_list link; /* delay_fifo.frames */
    uint64_t due;
    uint32_t type;
    size_t len;
    uint8_t data[];
} delay_frame;

typedef struct delay_fifo {
    kv_list frames; /* delay_frame.link, oldest (first due) first */
    size_t bytes;
    uint64_t last_due;
} delay_fifo;

#define DIR_TX 0
#define DIR_RX 1

typedef struct delay_slot {
    uint64_t id; /* 0: free */
    delay_fifo q[2];
} delay_slot;

struct kv_peer_delay {
    kv_peer_net *net;
    uv_timer_t timer;
    uint32_t delay_ms, jitter_ms; /* delay_ms 0: off */
    uint64_t rng;
    int closing;
    size_t held_bytes;
    delay_slot slots[KV_PEER_MAX_PEERS * 2];
    kv_metric *m_delayed, *m_bytes;
};

int kv_peer_delay_parse(const char *s, uint32_t *delay_ms, uint32_t *jitter_ms)
{
    if (!s || !delay_ms || !jitter_ms)
        return -EINVAL;
    char *end;
    errno = 0;
    unsigned long d = strtoul(s, &end, 10), j = 0;
    if (end == s || errno || d == 0 || d > 600000)
        return -EINVAL;
    if (*end == ',') {
        const char *js = end + 1;
        j = strtoul(js, &end, 10);
        if (end == js || errno || j > d)
            return -EINVAL;
    }
    if (*end)
        return -EINVAL;
    *delay_ms = (uint32_t)d;
    *jitter_ms = (uint32_t)j;
    return 0;
}

static uint64_t rng_next(struct kv_peer_delay *d)
{
    uint64_t x = d->rng;
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    return d->rng = x;
}

/* An empty slot for peer id (0: free). */
static void slot_reset(delay_slot *s, uint64_t id)
{
    memset(s, 0, sizeof(*s));
    s->id = id;
    kv_list_init(&s->q[0].frames);
    kv_list_init(&s->q[1].frames);
}

/* The first (earliest due) frame of q, NULL if none. */
static delay_frame *fifo_first(const delay_fifo *q)
{
    kv_list *e = kv_list_head(&q->frames);
    return e ? kv_list_data(e, delay_frame, link) : NULL;
}

static delay_slot *slot_find(struct kv_peer_delay *d, uint64_t id, int create)
{
    delay_slot *free_slot = NULL;
    for (size_t i = 0; i < sizeof(d->slots) / sizeof(d->slots[0]); i++) {
        delay_slot *s = &d->slots[i];
        if (s->id == id)
            return s;
        if (!free_slot &&
            (s->id == 0 || (kv_list_empty(&s->q[0].frames) && kv_list_empty(&s->q[1].frames))))
            free_slot = s;
    }
    if (!create || !free_slot)
        return NULL;
    slot_reset(free_slot, id);
    return free_slot;
}

static void timer_cb(uv_timer_t *t);

static void rearm(struct kv_peer_delay *d)
{
    uint64_t next = UINT64_MAX;
    for (size_t i = 0; i < sizeof(d->slots) / sizeof(d->slots[0]); i++)
        for (int k = 0; k < 2; k++) {
            const delay_frame *f = fifo_first(&d->slots[i].q[k]);
            if (f && f->due < next)
                next = f->due;
        }
    if (next == UINT64_MAX) {
        uv_timer_stop(&d->timer);
        return;
    }
    uint64_t now = uv_now(d->net->loop);
    uv_timer_start(&d->timer, timer_cb, next > now ? next - now : 0, 0);
}

static void held_bytes_sub(struct kv_peer_delay *d, delay_fifo *q, size_t len)
{
    q->bytes -= len;
    d->held_bytes -= len;
    kv_metric_set(d->m_bytes, (double)d->held_bytes);
}

static void timer_cb(uv_timer_t *t)
{
    struct kv_peer_delay *d = t->data;
    kv_peer_net *n = d->net;
    uv_update_time(n->loop);
    uint64_t now = uv_now(n->loop);
    int progress = 1;
    while (progress && !d->closing && !n->closing) {
        progress = 0;
        for (size_t i = 0; i < sizeof(d->slots) / sizeof(d->slots[0]); i++) {
            delay_slot *s = &d->slots[i];
            for (int k = 0; k < 2; k++) {
                delay_fifo *q = &s->q[k];
                delay_frame *f = fifo_first(q);
                if (!f || f->due > now)
                    continue;
                kv_list_remove(&f->link);
                held_bytes_sub(d, q, 8 + f->len);
                kv_peer *p = kv_peer_find(n, s->id);
                if (p && k == DIR_TX)
                    (void)kv_peer_send_now(p, f->type, f->data, f->len);
                else if (p)
                    kv_peer_deliver_now(p, f->type, f->data, f->len);
                free(f);
                progress = 1;
                if (d->closing || n->closing)
                    return;
            }
        }
    }
    rearm(d);
}

static void delay_closed(uv_handle_t *h)
{
    struct kv_peer_delay *d = h->data;
    kv_peer_net *n = d->net;
    free(d);
    kv_peer_handle_closed(n);
}

int kv_peer_net_set_delay(kv_peer_net *n, uint32_t delay_ms, uint32_t jitter_ms)
{
    if (!n || n->closing || jitter_ms > delay_ms)
        return -EINVAL;
    if (!n->delay) {
        if (delay_ms == 0)
            return 0;
        struct kv_peer_delay *d = calloc(1, sizeof(*d));
        if (!d)
            return -ENOMEM;
        d->net = n;
        for (size_t i = 0; i < sizeof(d->slots) / sizeof(d->slots[0]); i++)
            slot_reset(&d->slots[i], 0);
        d->rng = (n->cfg.seed ^ n->cfg.self_id) | 1;
        uv_timer_init(n->loop, &d->timer);
        d->timer.data = d;
        n->n_handles++;
        if (n->metrics) {
            d->m_delayed = kv_metrics_counter(
                n->metrics, "kvd_peer_frames_delayed_total",
                "Peer frames held by the delay failpoint (sent and received).", NULL);
            d->m_bytes =
                kv_metrics_gauge(n->metrics, "kvd_peer_delayed_bytes",
                                 "Peer frame bytes held by the delay failpoint now.", NULL);
        }
        n->delay = d;
    }
    n->delay->delay_ms = delay_ms;
    n->delay->jitter_ms = jitter_ms;
    return 0;
}

static int delay_push(struct kv_peer_delay *d, kv_peer *p, int dir, uint32_t type,
                      const uint8_t *buf, size_t len)
{
    kv_peer_net *n = d->net;
    delay_slot *s = slot_find(d, p->id, d->delay_ms > 0);
    if (!s)
        return 1; /* off with nothing held (or no slot): not delayed */
    delay_fifo *q = &s->q[dir];
    if (d->delay_ms == 0 && kv_list_empty(&q->frames))
        return 1;
    size_t bound = n->cfg.max_queue_bytes;
    size_t used = q->bytes + (dir == DIR_TX ? p->queued_bytes : 0);
    if (used + 8 + len > bound)
        return -EAGAIN;
    delay_frame *f = malloc(sizeof(*f) + len);
    if (!f)
        return -ENOMEM;
    uint64_t now = uv_now(n->loop);
    int64_t due = (int64_t)now + d->delay_ms;
    if (d->jitter_ms)
        due += (int64_t)(rng_next(d) % (2u * d->jitter_ms + 1)) - (int64_t)d->jitter_ms;
    if (due < (int64_t)now)
        due = (int64_t)now;
    f->due = (uint64_t)due < q->last_due ? q->last_due : (uint64_t)due;
    q->last_due = f->due;
    f->type = type;
    f->len = len;
    if (len)
        memcpy(f->data, buf, len);
    kv_list_insert_tail(&q->frames, &f->link);
    q->bytes += 8 + len;
    d->held_bytes += 8 + len;
    kv_metric_set(d->m_bytes, (double)d->held_bytes);
    kv_metric_inc(d->m_delayed);
    if (!uv_is_active((uv_handle_t *)&d->timer) || f == fifo_first(q))
        rearm(d);
    return 0;
}

int kv_peer_delay_tx(kv_peer *p, uint32_t type, const uint8_t *buf, size_t len, int *rc)
{
    struct kv_peer_delay *d = p->net->delay;
    if (!d || d->closing || !p->up || p->net->isolated)
        return 0; /* the send path's own answer (-ENOTCONN / dropped while isolated) */
    int r = delay_push(d, p, DIR_TX, type, buf, len);
    if (r == 1)
        return 0;
    if (r != 0) /* m_sent is counted when the frame is released to the queue */
        kv_metric_inc(p->m_dropped);
    *rc = r;
    return 1;
}

int kv_peer_delay_rx(kv_peer *p, uint32_t type, const uint8_t *buf, size_t len)
{
    struct kv_peer_delay *d = p->net->delay;
    if (!d || d->closing)
        return 0;
    int r = delay_push(d, p, DIR_RX, type, buf, len);
    if (r == 1)
        return 0;
    if (r != 0)
        kv_metric_inc(p->m_dropped);
    return 1;
}

size_t kv_peer_delay_tx_bytes(const kv_peer_net *n, uint64_t id)
{
    const struct kv_peer_delay *d = n ? n->delay : NULL;
    if (!d)
        return 0;
    for (size_t i = 0; i < sizeof(d->slots) / sizeof(d->slots[0]); i++)
        if (d->slots[i].id == id)
            return d->slots[i].q[DIR_TX].bytes;
    return 0;
}

void kv_peer_delay_close(kv_peer_net *n)
{
    struct kv_peer_delay *d = n ? n->delay : NULL;
    if (!d || d->closing)
        return;
    d->closing = 1;
    for (size_t i = 0; i < sizeof(d->slots) / sizeof(d->slots[0]); i++)
        for (int k = 0; k < 2; k++) {
            kv_list *e;
            while ((e = kv_list_head(&d->slots[i].q[k].frames))) {
                kv_list_remove(e);
                free(kv_list_data(e, delay_frame, link));
            }
        }
    n->delay = NULL;
    uv_close((uv_handle_t *)&d->timer, delay_closed);
}
