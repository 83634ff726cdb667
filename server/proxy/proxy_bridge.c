/*
 * proxy_bridge.c - events from libkvclient's I/O thread to the proxy's loop (contract in
 * proxy_bridge.h).
 */
#include "proxy/proxy_bridge.h"

#include "common/status.h"

#include <stdlib.h>
#include <string.h>

kv_proxy_ev *kv_proxy_ev_new(int kind, void *target, int code, const void *data, size_t len)
{
    kv_proxy_ev *ev = calloc(1, sizeof *ev);
    if (!ev)
        return NULL;
    ev->buf = malloc(len + 1);
    if (!ev->buf) {
        free(ev);
        return NULL;
    }
    if (len)
        memcpy(ev->buf, data, len);
    ev->buf[len] = 0;
    ev->len = len;
    ev->buf_free = free;
    ev->kind = kind;
    ev->target = target;
    ev->code = code;
    return ev;
}

void kv_proxy_ev_free(kv_proxy_ev *ev)
{
    if (!ev)
        return;
    if (ev->buf_free)
        ev->buf_free(ev->buf);
    free(ev);
}

static kv_proxy_ev *take_all(kv_proxy_bridge *b)
{
    pthread_mutex_lock(&b->mu);
    kv_proxy_ev *ev = b->head;
    b->head = b->tail = NULL;
    b->queued = 0;
    pthread_mutex_unlock(&b->mu);
    return ev;
}

static void run(kv_proxy_bridge *b, kv_proxy_ev *ev)
{
    while (ev) {
        kv_proxy_ev *next = ev->next;
        ev->next = NULL;
        b->handle(b->app, ev);
        ev = next;
    }
}

static void on_async(uv_async_t *a)
{
    kv_proxy_bridge *b = a->data;
    run(b, take_all(b));
}

int kv_proxy_bridge_init(kv_proxy_bridge *b, uv_loop_t *loop,
                         void (*handle)(void *app, kv_proxy_ev *ev), void *app)
{
    memset(b, 0, sizeof *b);
    int rc = uv_async_init(loop, &b->async, on_async);
    if (rc < 0)
        return rc;
    b->handle = handle; /* set: the bridge must be closed */
    b->app = app;
    b->async.data = b;
    pthread_mutex_init(&b->mu, NULL);
    return 0;
}

void kv_proxy_bridge_post(kv_proxy_bridge *b, kv_proxy_ev *ev)
{
    ev->next = NULL;
    pthread_mutex_lock(&b->mu);
    if (b->tail)
        b->tail->next = ev;
    else
        b->head = ev;
    b->tail = ev;
    b->queued++;
    pthread_mutex_unlock(&b->mu);
    uv_async_send(&b->async);
}

void kv_proxy_bridge_drain(kv_proxy_bridge *b)
{
    kv_proxy_ev *ev;
    while ((ev = take_all(b)) != NULL)
        run(b, ev);
}

void kv_proxy_bridge_close(kv_proxy_bridge *b)
{
    kv_proxy_bridge_drain(b);
    uv_close((uv_handle_t *)&b->async, NULL);
    pthread_mutex_destroy(&b->mu);
}

size_t kv_proxy_bridge_queued(kv_proxy_bridge *b)
{
    pthread_mutex_lock(&b->mu);
    size_t n = b->queued;
    pthread_mutex_unlock(&b->mu);
    return n;
}

void kv_proxy_bridge_post_reply(kv_proxy_bridge *b, int kind, void *target, int code,
                                const char *msg, uint8_t *resp, size_t len,
                                void (*resp_free)(void *))
{
    kv_proxy_ev *ev = NULL;
    if (code == 0) {
        ev = calloc(1, sizeof *ev);
        if (ev) {
            ev->kind = kind;
            ev->target = target;
            ev->buf = resp;
            ev->len = len;
            ev->buf_free = resp_free;
            resp = NULL;
        }
    } else {
        if (!msg)
            msg = "";
        ev = kv_proxy_ev_new(kind, target, code, msg, strlen(msg));
    }
    if (resp && resp_free)
        resp_free(resp);
    if (!ev)
        ev = kv_proxy_ev_new(kind, target, KV_GRPC_RESOURCE_EXHAUSTED, "", 0);
    if (ev)
        kv_proxy_bridge_post(b, ev);
}
