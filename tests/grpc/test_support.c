/* test_support.c - see test_support.h. */
#include "test_support.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

/* ---------------- server side: test app ---------------- */

typedef struct later_ctx {
    uv_timer_t t;
    kv_grpc_call *call;
} later_ctx;

static void later_closed(uv_handle_t *hd)
{
    free(hd->data);
}

/* Answers a held unary call from a timer, like an app waiting for raft to apply. */
static void later_fire(uv_timer_t *t)
{
    later_ctx *l = t->data;
    if (l->call) {
        static const uint8_t reply[] = "async-reply";
        kv_grpc_call_send(l->call, reply, sizeof(reply) - 1);
        kv_grpc_call_finish(l->call, KV_GRPC_OK, NULL);
    }
    uv_close((uv_handle_t *)&l->t, later_closed);
}

static void on_cancel(kv_grpc_call *call);

/* kv_grpc_call_send, counted: an on_cancel that runs meanwhile is one the transport ran
 * inside the app's own send (it must not: the app may be walking what on_cancel frees). */
static int app_send(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    harness *h = kv_grpc_call_app(call);
    h->in_send++;
    int rc = kv_grpc_call_send(call, msg, len);
    h->in_send--;
    return rc;
}

static void unary_cancel(kv_grpc_call *call)
{
    later_ctx *l = kv_grpc_call_data(call);
    if (l)
        l->call = NULL;
    on_cancel(call);
}

static void echo_unary(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    /* "later": answered after 150 ms; "slow": after 700 ms, once the 250 ms timeout scan has
     * passed the idle connection twice (test_live.c timeout_scan_...) */
    int slow = len == 4 && memcmp(msg, "slow", 4) == 0;
    if (slow || (len == 5 && memcmp(msg, "later", 5) == 0)) {
        harness *h = kv_grpc_call_app(call);
        later_ctx *l = calloc(1, sizeof(*l));
        uv_timer_init(&h->loop, &l->t);
        l->t.data = l;
        l->call = call;
        kv_grpc_call_set_data(call, l);
        uv_timer_start(&l->t, later_fire, slow ? 700 : 150, 0);
        return;
    }
    if (len == 4 && memcmp(msg, "fail", 4) == 0) {
        kv_grpc_call_finish(call, KV_GRPC_INVALID_ARGUMENT, "bad arg: \xc3\xbc 100%\n");
        return;
    }
    if (len == 5 && memcmp(msg, "token", 5) == 0) {
        const char *tok = kv_grpc_call_header(call, "token");
        tok = tok ? tok : "(none)";
        kv_grpc_call_send(call, (const uint8_t *)tok, strlen(tok));
        kv_grpc_call_finish(call, KV_GRPC_OK, NULL);
        return;
    }
    if (len == 4 && memcmp(msg, "hold", 4) == 0)
        return; /* never answered: deadline or cancel ends it */
    if (len > 4 && len < 16 && memcmp(msg, "big:", 4) == 0) {
        /* "big:N": an answer of N bytes, larger than the request (test_live.c) */
        char num[16];
        memcpy(num, msg + 4, len - 4);
        num[len - 4] = '\0';
        size_t n = strtoul(num, NULL, 10);
        uint8_t *b = malloc(n ? n : 1);
        if (b == NULL) {
            kv_grpc_call_finish(call, KV_GRPC_RESOURCE_EXHAUSTED, "out of memory");
            return;
        }
        memset(b, 'b', n);
        int rc = app_send(call, b, n);
        free(b);
        kv_grpc_call_finish(call, rc == 0 ? KV_GRPC_OK : KV_GRPC_RESOURCE_EXHAUSTED,
                            rc == 0 ? NULL : "send buffer full");
        return;
    }
    if (len == 5 && memcmp(msg, "abort", 5) == 0) {
        kv_grpc_call_abort(call); /* e.g. a committed write whose response cannot be sent */
        return;
    }
    if (app_send(call, msg, len) != 0) {
        kv_grpc_call_finish(call, KV_GRPC_RESOURCE_EXHAUSTED, "send buffer full");
        return;
    }
    kv_grpc_call_finish(call, KV_GRPC_OK, NULL);
}

static void on_cancel(kv_grpc_call *call)
{
    harness *h = kv_grpc_call_app(call);
    atomic_fetch_add(&h->cancels, 1);
    if (h->in_send)
        atomic_fetch_add(&h->cancels_in_send, 1);
}

typedef struct resume_ctx {
    uv_timer_t t;
    kv_grpc_call *call;
} resume_ctx;

static void resume_closed(uv_handle_t *hd)
{
    free(hd->data);
}

static void resume_fire(uv_timer_t *t)
{
    resume_ctx *r = t->data;
    if (r->call) {
        kv_grpc_call_set_data(r->call, NULL);
        kv_grpc_call_resume_recv(r->call);
    }
    uv_close((uv_handle_t *)&r->t, resume_closed);
}

static void echo_stream(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    if (app_send(call, msg, len) != 0) {
        kv_grpc_call_finish(call, KV_GRPC_RESOURCE_EXHAUSTED, "send buffer full");
        return;
    }
    if (len == 5 && memcmp(msg, "pause", 5) == 0) {
        /* pause for 100 ms, then resume from a timer */
        harness *h = kv_grpc_call_app(call);
        resume_ctx *r = calloc(1, sizeof(*r));
        uv_timer_init(&h->loop, &r->t);
        r->t.data = r;
        r->call = call;
        kv_grpc_call_set_data(call, r);
        kv_grpc_call_pause_recv(call);
        uv_timer_start(&r->t, resume_fire, 100, 0);
    }
}

static void stream_half_close(kv_grpc_call *call)
{
    harness *h = kv_grpc_call_app(call);
    atomic_fetch_add(&h->half_closes, 1);
    kv_grpc_call_finish(call, KV_GRPC_OK, NULL);
}

static void stream_cancel(kv_grpc_call *call)
{
    resume_ctx *r = kv_grpc_call_data(call);
    if (r)
        r->call = NULL;
    on_cancel(call);
}

static const kv_grpc_method test_methods[] = {
    {"/test.Echo/Unary", 0, echo_unary, NULL, unary_cancel},
    {"/test.Echo/Stream", 1, echo_stream, stream_half_close, stream_cancel},
    {"/test.Echo/Priority", 0, echo_unary, NULL, unary_cancel}, /* see test_conn_saturation.c */
};

static void health_hook(void *app, kv_http_health_done_fn done, void *ctx)
{
    harness *h = app;
    switch (atomic_load(&h->health_mode)) {
    case HEALTH_OK:
        done(ctx, 1, NULL);
        break;
    case HEALTH_FAIL:
        done(ctx, 0, "raft: no \"leader\"");
        break;
    default:
        h->slow_done = done; /* answered at stop, after the connection is gone */
        h->slow_ctx = ctx;
        break;
    }
}

static void loop_thread(void *arg)
{
    harness *h = arg;
    uv_run(&h->loop, UV_RUN_DEFAULT);
}

static void stop_cb(uv_async_t *a)
{
    harness *h = a->data;
    kv_grpc_server_close(h->grpc, NULL, NULL);
    kv_http_server_close(h->http, NULL, NULL);
    if (h->slow_done) {
        h->slow_done(h->slow_ctx, 1, NULL); /* late answer: must be a safe no-op */
        h->slow_done = NULL;
    }
    uv_close((uv_handle_t *)a, NULL);
}

static void die(const char *what, int rv)
{
    fprintf(stderr, "harness: %s failed: %d\n", what, rv);
    abort();
}

void harness_start(harness *h, const kv_grpc_config *cfg, const kv_http_config *http_cfg)
{
    int rv;
    /* libuv writes with write(2): a peer that reset the connection would raise SIGPIPE.
     * Servers using this transport must ignore it (kvd's main() does). */
    signal(SIGPIPE, SIG_IGN);
    memset(h, 0, sizeof(*h));
    if ((rv = uv_loop_init(&h->loop)) != 0)
        die("uv_loop_init", rv);
    if ((rv = kv_metrics_new(&h->metrics, 0)) != 0)
        die("kv_metrics_new", rv);
    rv = kv_grpc_server_init(&h->grpc, &h->loop, cfg, test_methods,
                             sizeof(test_methods) / sizeof(test_methods[0]), h, h->metrics);
    if (rv)
        die("kv_grpc_server_init", rv);
    if ((rv = kv_grpc_server_listen(h->grpc, "127.0.0.1", 0)) != 0)
        die("kv_grpc_server_listen", rv);
    h->grpc_port = kv_grpc_server_port(h->grpc);
    rv = kv_http_server_init(&h->http, &h->loop, http_cfg, h->metrics, health_hook, h);
    if (rv)
        die("kv_http_server_init", rv);
    if ((rv = kv_http_server_listen(h->http, "127.0.0.1", 0)) != 0)
        die("kv_http_server_listen", rv);
    h->http_port = kv_http_server_port(h->http);
    uv_async_init(&h->loop, &h->stop, stop_cb);
    h->stop.data = h;
    if ((rv = uv_thread_create(&h->thread, loop_thread, h)) != 0)
        die("uv_thread_create", rv);
}

void harness_stop(harness *h)
{
    uv_async_send(&h->stop);
    uv_thread_join(&h->thread);
    h->loop_close_rv = uv_loop_close(&h->loop);
    size_t len;
    if (kv_metrics_render(h->metrics, &h->metrics_text, &len) != 0)
        h->metrics_text = NULL;
    kv_metrics_free(h->metrics);
    h->metrics = NULL;
}

/* ---------------- client side (HTTP/1.1; the HTTP/2 client is tests/lib grpc_raw) ----------------
 */

int tcp_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in sa = {0};
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

char *http_get(int port, const char *path)
{
    int fd = tcp_connect(port);
    if (fd < 0)
        return NULL;
    char req[512];
    int n = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: localhost\r\n\r\n", path);
    if (send(fd, req, (size_t)n, MSG_NOSIGNAL) != n) {
        close(fd);
        return NULL;
    }
    size_t cap = 4096, len = 0;
    char *out = malloc(cap);
    for (;;) {
        if (len + 1024 > cap) {
            cap *= 2;
            out = realloc(out, cap);
        }
        ssize_t r = recv(fd, out + len, cap - len - 1, 0);
        if (r <= 0)
            break;
        len += (size_t)r;
    }
    close(fd);
    out[len] = 0;
    return out;
}

double metric_value(const char *text, const char *series)
{
    const char *p = strstr(text, series);
    double v = -1;
    if (p)
        sscanf(p + strlen(series), "%lf", &v);
    return v;
}
