/* kvt_proxy: a small TCP relay with blackhole and delay faults (see kvt_proxy.h). One thread,
 * poll(). Moved here from functional/proxy.c. */
#include "kvt_proxy.h"
#include "kvt_util.h"

#include <pthread.h>
#include <stdio.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define PX_MAX_PAIRS 64
#define PX_QUEUE_CAP (8u << 20)
#define PX_CHUNK 16384

typedef struct chunk {
    struct chunk *next;
    int64_t release_us;
    size_t len, off;
    uint8_t data[];
} chunk;

typedef struct dirq {
    chunk *head, *tail;
    size_t bytes;
    int64_t last_release;
} dirq;

typedef struct pair {
    int down, up;                /* dialer side, member side */
    int tagged;                  /* first bytes from the dialer inspected */
    char from[KVT_PROXY_ID_LEN]; /* X-Server-From of the dialer's first request, or "" */
    int tainted; /* bytes were dropped: closed once the blackhole is lifted (TCP never
                  * loses bytes inside a live stream, so the peers must redial) */
    dirq rx;     /* down -> up: into the member */
    dirq tx;     /* up -> down: out of the member */
} pair;

struct kvt_proxy {
    int lfd;
    uint16_t to_port;
    pthread_t th;
    pthread_mutex_t mu;
    int stop;
    int bh_tx, bh_rx;
    uint32_t delay_ms, jitter_ms;
    uint64_t rng;
    uint64_t bytes, dropped;
    char block_from[KVT_PROXY_MAX_BLOCK][KVT_PROXY_ID_LEN];
    pair pairs[PX_MAX_PAIRS];
    int n_pairs;
};

static void q_clear(dirq *q)
{
    chunk *c = q->head;
    while (c) {
        chunk *n = c->next;
        free(c);
        c = n;
    }
    memset(q, 0, sizeof(*q));
}

static void pair_close(kvt_proxy *p, int i)
{
    pair *pr = &p->pairs[i];
    close(pr->down);
    close(pr->up);
    q_clear(&pr->rx);
    q_clear(&pr->tx);
    p->pairs[i] = p->pairs[--p->n_pairs];
}

static void set_nb(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, fl | O_NONBLOCK);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

static void do_accept(kvt_proxy *p)
{
    /* close-on-exec: a member or proxy spawned later must not inherit the relay's end (it
     * would keep the connection open after the relay closes it, e.g. when a blackhole lifts) */
    int fd = accept4(p->lfd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0)
        return;
    if (p->n_pairs >= PX_MAX_PAIRS) {
        close(fd);
        return;
    }
    int up = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    pthread_mutex_lock(&p->mu);
    uint16_t to_port = p->to_port;
    pthread_mutex_unlock(&p->mu);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(to_port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (up < 0 || connect(up, (struct sockaddr *)&a, sizeof(a)) != 0) {
        if (up >= 0)
            close(up);
        close(fd);
        return;
    }
    set_nb(fd);
    set_nb(up);
    pair *pr = &p->pairs[p->n_pairs++];
    memset(pr, 0, sizeof(*pr));
    pr->down = fd;
    pr->up = up;
}

/* Records the dialer's member id from the first request on a connection (etcd's peer
 * requests carry "X-Server-From: <hex id>"). */
static void tag_pair(pair *pr, const uint8_t *buf, size_t len)
{
    static const char hdr[] = "X-Server-From: ";
    pr->tagged = 1;
    for (size_t i = 0; i + sizeof(hdr) - 1 < len; i++) {
        if (memcmp(buf + i, hdr, sizeof(hdr) - 1) != 0)
            continue;
        size_t o = 0;
        for (size_t k = i + sizeof(hdr) - 1;
             k < len && buf[k] != '\r' && buf[k] != '\n' && o + 1 < sizeof(pr->from); k++)
            pr->from[o++] = (char)buf[k];
        pr->from[o] = '\0';
        return;
    }
}

/* 1 if the pair's dialer is blocked (caller holds p->mu). */
static int pair_blocked(const kvt_proxy *p, const pair *pr)
{
    if (!pr->from[0])
        return 0;
    for (int i = 0; i < KVT_PROXY_MAX_BLOCK; i++)
        if (p->block_from[i][0] && strcmp(p->block_from[i], pr->from) == 0)
            return 1;
    return 0;
}

/* Reads from src into q. Returns -1 when the connection ended. */
static int pump_in(kvt_proxy *p, pair *pr, int src, dirq *q, int blackhole, int64_t now)
{
    uint8_t buf[PX_CHUNK];
    ssize_t r = read(src, buf, sizeof(buf));
    if (r == 0)
        return -1;
    if (r < 0)
        return (errno == EAGAIN || errno == EINTR) ? 0 : -1;
    if (!pr->tagged && src == pr->down)
        tag_pair(pr, buf, (size_t)r);
    pthread_mutex_lock(&p->mu);
    blackhole |= pair_blocked(p, pr);
    uint32_t d = p->delay_ms, j = p->jitter_ms;
    p->rng = p->rng * 6364136223846793005ULL + 1442695040888963407ULL;
    uint64_t rnd = p->rng >> 33;
    if (blackhole)
        p->dropped += (uint64_t)r;
    else
        p->bytes += (uint64_t)r;
    pthread_mutex_unlock(&p->mu);
    if (blackhole) {
        pr->tainted = 1;
        return 0;
    }
    int64_t delay = (int64_t)d * 1000;
    if (j)
        delay += (int64_t)(rnd % (2ULL * j * 1000 + 1)) - (int64_t)j * 1000;
    if (delay < 0)
        delay = 0;
    chunk *c = malloc(sizeof(*c) + (size_t)r);
    if (!c)
        return -1;
    memcpy(c->data, buf, (size_t)r);
    c->len = (size_t)r;
    c->off = 0;
    c->next = NULL;
    c->release_us = now + delay;
    if (c->release_us < q->last_release)
        c->release_us = q->last_release; /* keep byte order */
    q->last_release = c->release_us;
    if (q->tail)
        q->tail->next = c;
    else
        q->head = c;
    q->tail = c;
    q->bytes += (size_t)r;
    return 0;
}

static int pump_out(int dst, dirq *q, int64_t now)
{
    while (q->head && q->head->release_us <= now) {
        chunk *c = q->head;
        ssize_t w = write(dst, c->data + c->off, c->len - c->off);
        if (w < 0)
            return (errno == EAGAIN || errno == EINTR) ? 0 : -1;
        c->off += (size_t)w;
        if (c->off < c->len)
            return 0;
        q->bytes -= c->len;
        q->head = c->next;
        if (!q->head)
            q->tail = NULL;
        free(c);
    }
    return 0;
}

static void *proxy_main(void *arg)
{
    kvt_proxy *p = arg;
    struct pollfd pf[1 + 2 * PX_MAX_PAIRS];
    for (;;) {
        pthread_mutex_lock(&p->mu);
        int stop = p->stop, bh_tx = p->bh_tx, bh_rx = p->bh_rx;
        pthread_mutex_unlock(&p->mu);
        if (stop)
            break;
        int64_t now = kvt_now_us();
        int timeout = 20;
        int n = 0;
        pf[n++] = (struct pollfd){.fd = p->lfd, .events = POLLIN};
        for (int i = 0; i < p->n_pairs; i++) {
            pair *pr = &p->pairs[i];
            short ed = 0, eu = 0;
            if (pr->rx.bytes < PX_QUEUE_CAP)
                ed |= POLLIN;
            if (pr->tx.bytes < PX_QUEUE_CAP)
                eu |= POLLIN;
            if (pr->rx.head) {
                if (pr->rx.head->release_us <= now)
                    eu |= POLLOUT;
                else if ((pr->rx.head->release_us - now) / 1000 < timeout)
                    timeout = (int)((pr->rx.head->release_us - now) / 1000) + 1;
            }
            if (pr->tx.head) {
                if (pr->tx.head->release_us <= now)
                    ed |= POLLOUT;
                else if ((pr->tx.head->release_us - now) / 1000 < timeout)
                    timeout = (int)((pr->tx.head->release_us - now) / 1000) + 1;
            }
            pf[n++] = (struct pollfd){.fd = pr->down, .events = ed};
            pf[n++] = (struct pollfd){.fd = pr->up, .events = eu};
        }
        int r = poll(pf, (nfds_t)n, timeout);
        if (r < 0 && errno != EINTR)
            break;
        now = kvt_now_us();
        if (pf[0].revents & POLLIN)
            do_accept(p);
        /* Walk pairs from the end so pair_close (swap with last) is safe; pairs accepted
         * in this round are beyond the poll set and skipped. */
        int polled = (n - 1) / 2;
        for (int i = polled - 1; i >= 0; i--) {
            pair *pr = &p->pairs[i];
            short rd = pf[1 + 2 * i].revents, ru = pf[2 + 2 * i].revents;
            int bad = 0;
            if (pr->tainted) {
                pthread_mutex_lock(&p->mu);
                bad = !bh_rx && !bh_tx && !pair_blocked(p, pr);
                pthread_mutex_unlock(&p->mu);
            }
            if (!bad && (rd & (POLLIN | POLLHUP | POLLERR)))
                bad |= pump_in(p, pr, pr->down, &pr->rx, bh_rx, now) < 0;
            if (!bad && (ru & (POLLIN | POLLHUP | POLLERR)))
                bad |= pump_in(p, pr, pr->up, &pr->tx, bh_tx, now) < 0;
            if (!bad)
                bad |= pump_out(pr->up, &pr->rx, now) < 0;
            if (!bad)
                bad |= pump_out(pr->down, &pr->tx, now) < 0;
            if (bad)
                pair_close(p, i);
        }
    }
    while (p->n_pairs > 0)
        pair_close(p, p->n_pairs - 1);
    return NULL;
}

int kvt_proxy_start(kvt_proxy **out, uint16_t listen_port, uint16_t to_port, uint64_t seed)
{
    kvt_proxy *p = calloc(1, sizeof(*p));
    if (!p)
        return -ENOMEM;
    p->to_port = to_port;
    p->rng = seed | 1;
    pthread_mutex_init(&p->mu, NULL);
    p->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(p->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(listen_port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (p->lfd < 0 || bind(p->lfd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        listen(p->lfd, 64) != 0) {
        int e = -errno;
        if (p->lfd >= 0)
            close(p->lfd);
        pthread_mutex_destroy(&p->mu);
        free(p);
        return e;
    }
    set_nb(p->lfd);
    if (pthread_create(&p->th, NULL, proxy_main, p) != 0) {
        close(p->lfd);
        pthread_mutex_destroy(&p->mu);
        free(p);
        return -EAGAIN;
    }
    *out = p;
    return 0;
}

void kvt_proxy_stop(kvt_proxy *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->th, NULL);
    close(p->lfd);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

void kvt_proxy_set(kvt_proxy *p, int blackhole_tx, int blackhole_rx, uint32_t delay_ms,
                   uint32_t jitter_ms)
{
    pthread_mutex_lock(&p->mu);
    p->bh_tx = blackhole_tx;
    p->bh_rx = blackhole_rx;
    p->delay_ms = delay_ms;
    p->jitter_ms = jitter_ms > delay_ms ? delay_ms : jitter_ms;
    pthread_mutex_unlock(&p->mu);
}

void kvt_proxy_stats(kvt_proxy *p, uint64_t *bytes, uint64_t *dropped, uint32_t *conns)
{
    pthread_mutex_lock(&p->mu);
    *bytes = p->bytes;
    *dropped = p->dropped;
    *conns = (uint32_t)p->n_pairs;
    pthread_mutex_unlock(&p->mu);
}

int kvt_proxy_block_from(kvt_proxy *p, const char *from_id, int on)
{
    int rc = on ? -ENOSPC : 0;
    pthread_mutex_lock(&p->mu);
    for (int i = 0; i < KVT_PROXY_MAX_BLOCK; i++) {
        if (strcmp(p->block_from[i], from_id) == 0) {
            if (!on)
                p->block_from[i][0] = '\0';
            rc = 0;
            if (on)
                break;
        }
    }
    for (int i = 0; on && rc && i < KVT_PROXY_MAX_BLOCK; i++) {
        if (!p->block_from[i][0]) {
            snprintf(p->block_from[i], sizeof(p->block_from[i]), "%s", from_id);
            rc = 0;
        }
    }
    pthread_mutex_unlock(&p->mu);
    return rc;
}

void kvt_proxy_set_target(kvt_proxy *p, uint16_t to_port)
{
    pthread_mutex_lock(&p->mu);
    p->to_port = to_port;
    pthread_mutex_unlock(&p->mu);
}
