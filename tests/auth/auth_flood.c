/* auth_flood: a wrong-password login flood with legitimate logins (see auth_flood.h). */
#include "auth_flood.h"

#include "grpc_raw.h"
#include "rpc.pb-c.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define AUTH_PATH "/etcdserverpb.Auth/Authenticate"

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

typedef struct conn {
    kv_it_grpc *c;
    kv_it_grpc_stream *st;
    uint64_t started; /* legitimate logins: when sent */
    int done;
} conn;

static size_t pack_auth(const char *user, const char *pw, uint8_t *buf, size_t cap)
{
    Etcdserverpb__AuthenticateRequest r = ETCDSERVERPB__AUTHENTICATE_REQUEST__INIT;
    r.name = (char *)user;
    r.password = (char *)pw;
    size_t n = etcdserverpb__authenticate_request__get_packed_size(&r);
    return n <= cap ? etcdserverpb__authenticate_request__pack(&r, buf) : 0;
}

static int send_auth(conn *k, const uint8_t *req, size_t n)
{
    k->st = kv_it_grpc_stream_start(k->c, AUTH_PATH, NULL);
    if (!k->st)
        return -ENOMEM;
    return kv_it_grpc_send_msg(k->st, req, n, 1);
}

/* One non-blocking I/O step over every connection (poll up to wait_ms). */
static void io_all(conn *ks, int n, uint32_t wait_ms)
{
    if (n <= 0)
        return;
    struct pollfd *p = calloc((size_t)n, sizeof *p);
    if (!p)
        return;
    for (int i = 0; i < n; i++) {
        p[i].fd = ks[i].c && !kv_it_grpc_conn_closed(ks[i].c) ? kv_it_grpc_fd(ks[i].c) : -1;
        p[i].events =
            (short)(POLLIN | (p[i].fd >= 0 && kv_it_grpc_want_write(ks[i].c) ? POLLOUT : 0));
    }
    poll(p, (nfds_t)(unsigned)n, (int)wait_ms);
    for (int i = 0; i < n; i++)
        if (p[i].fd >= 0)
            kv_it_grpc_io(ks[i].c, (p[i].revents & (POLLIN | POLLHUP | POLLERR)) != 0);
    free(p);
}

int af_run(const af_opts *o, af_result *r)
{
    memset(r, 0, sizeof *r);
    uint8_t bad[1024], good[1024];
    size_t nbad = pack_auth(o->flood_user, o->flood_pw, bad, sizeof bad);
    size_t ngood = pack_auth(o->user, o->pw, good, sizeof good);
    if (!nbad || !ngood || o->n_flood < 1 || o->n_logins < 1)
        return -EINVAL;
    int nk = o->n_flood + o->n_logins;
    conn *ks = calloc((size_t)nk, sizeof *ks);
    if (!ks)
        return -ENOMEM;
    conn *fl = ks, *lg = ks + o->n_flood;
    int rc = 0;
    for (int i = 0; i < o->n_flood; i++) {
        if (kv_it_grpc_open(&fl[i].c, "127.0.0.1", o->port, 5000) == 0 &&
            send_auth(&fl[i], bad, nbad) == 0)
            r->flood_conns++;
    }
    if (r->flood_conns < o->n_flood / 2) {
        rc = -ECONNREFUSED;
        goto out;
    }
    uint64_t t0 = now_ms(), next = t0 + o->warmup_ms;
    int sent = 0, finished = 0;
    while (finished < o->n_logins) {
        uint64_t t = now_ms();
        if (sent < o->n_logins && t >= next) {
            conn *k = &lg[sent++];
            next += o->interval_ms;
            k->started = t;
            if (kv_it_grpc_open(&k->c, "127.0.0.1", o->port, 5000) || send_auth(k, good, ngood)) {
                k->done = 1;
                r->logins_other++;
                finished++;
            }
        }
        io_all(ks, o->n_flood + sent, 2);
        t = now_ms();
        for (int i = 0; i < o->n_flood; i++) { /* the flood: re-send at once */
            conn *k = &fl[i];
            if (!k->c || kv_it_grpc_conn_closed(k->c) || !k->st || !k->st->closed)
                continue;
            r->flood_answers++;
            if (k->st->grpc_status == 3 /* INVALID_ARGUMENT: authentication failed */)
                r->flood_failed++;
            kv_it_grpc_stream_free(k->st);
            k->st = NULL;
            send_auth(k, bad, nbad);
        }
        for (int i = 0; i < sent; i++) {
            conn *k = &lg[i];
            if (k->done)
                continue;
            int closed = k->st && k->st->closed;
            int dead =
                !closed && (kv_it_grpc_conn_closed(k->c) || t >= k->started + o->login_timeout_ms);
            if (!closed && !dead)
                continue;
            k->done = 1;
            finished++;
            if (closed && k->st->grpc_status == 0) {
                uint64_t ms = t - k->started;
                r->logins_ok++;
                r->login_sum_ms += ms;
                if (ms > r->login_max_ms)
                    r->login_max_ms = ms;
            } else if (closed && k->st->grpc_status == 8) {
                r->logins_refused++;
            } else {
                r->logins_other++;
            }
            kv_it_grpc_close(k->c); /* frees its streams */
            k->c = NULL;
            k->st = NULL;
        }
    }
out:
    for (int i = 0; i < nk; i++)
        kv_it_grpc_close(ks[i].c);
    free(ks);
    return rc;
}
