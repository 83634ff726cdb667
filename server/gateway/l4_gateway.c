/* l4_gateway.c - etcd's L4 gateway on libuv; see l4_gateway.h. */
#include "gateway/l4_gateway.h"

#include "common/dns_srv.h"
#include "common/go_duration.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <signal.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#define GW_MAX_ENDPOINTS 16
#define GW_HIGH_WATER (1u << 20) /* bytes queued to one side before the other stops reading */
#define GW_LOW_WATER (256u << 10)

typedef struct gw_endpoint {
    char host[256];
    int port;
    uint64_t down_until; /* uv_now ms: skipped until then after a refused connection */
} gw_endpoint;

typedef struct gw {
    uv_loop_t *loop;
    uv_tcp_t listener;
    uv_signal_t sigint, sigterm;
    gw_endpoint ep[GW_MAX_ENDPOINTS];
    size_t n_ep, next;
    uint64_t retry_delay_ms;
    unsigned max_conns, n_conns;
} gw;

struct gw_pair;

typedef struct gw_side {
    uv_tcp_t tcp;
    struct gw_pair *pair;
    size_t queued; /* bytes written to this side, not yet sent */
    int reading;
} gw_side;

typedef struct gw_pair {
    gw *g;
    gw_side client, upstream;
    uv_connect_t connect;
    size_t tries, ep;
    int closing, open_handles;
    int redialing; /* the upstream handle is closing before a dial to the next endpoint */
} gw_pair;

typedef struct gw_write {
    uv_write_t req;
    gw_side *to;
    size_t len;
    char data[];
} gw_write;

static gw_side *other(gw_side *s)
{
    return s == &s->pair->client ? &s->pair->upstream : &s->pair->client;
}

static void on_closed(uv_handle_t *h)
{
    gw_side *s = h->data;
    gw_pair *p = s->pair;
    if (--p->open_handles == 0) {
        p->g->n_conns--;
        free(p);
    }
}

/* Closes both sides; the pair is freed in the last close callback. */
static void pair_close(gw_pair *p)
{
    if (p->closing)
        return;
    p->closing = 1;
    uv_close((uv_handle_t *)&p->client.tcp, on_closed);
    if (!p->redialing) /* else on_redial_closed sees closing and counts it */
        uv_close((uv_handle_t *)&p->upstream.tcp, on_closed);
}

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)h;
    (void)suggested;
    gw_write *w = malloc(sizeof(*w) + 64 * 1024);
    *buf = w ? uv_buf_init(w->data, 64 * 1024) : uv_buf_init(NULL, 0);
}

static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf);

static void set_reading(gw_side *s, int on)
{
    if (s->reading == on || s->pair->closing)
        return;
    s->reading = on;
    if (on)
        uv_read_start((uv_stream_t *)&s->tcp, alloc_cb, on_read);
    else
        uv_read_stop((uv_stream_t *)&s->tcp);
}

static void on_written(uv_write_t *req, int status)
{
    gw_write *w = (gw_write *)req;
    gw_side *to = w->to;
    to->queued -= w->len;
    free(w);
    if (status < 0) {
        pair_close(to->pair);
        return;
    }
    if (to->queued <= GW_LOW_WATER)
        set_reading(other(to), 1); /* the side feeding `to` may read again */
}

static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf)
{
    gw_side *from = st->data;
    gw_write *w = buf->base ? (gw_write *)(buf->base - offsetof(gw_write, data)) : NULL;
    if (n <= 0) {
        free(w);
        if (n < 0) /* EOF or error: the L4 gateway closes both ends, as etcd's */
            pair_close(from->pair);
        return;
    }
    gw_side *to = other(from);
    w->to = to;
    w->len = (size_t)n;
    uv_buf_t b = uv_buf_init(w->data, (unsigned)n);
    if (uv_write(&w->req, (uv_stream_t *)&to->tcp, &b, 1, on_written) < 0) {
        free(w);
        pair_close(from->pair);
        return;
    }
    to->queued += (size_t)n;
    if (to->queued > GW_HIGH_WATER)
        set_reading(from, 0); /* bounded: resume in on_written */
}

static void try_connect(gw_pair *p);

/* The failed upstream handle is closed: a fresh one dials the next endpoint. */
static void on_redial_closed(uv_handle_t *h)
{
    gw_side *s = h->data;
    gw_pair *p = s->pair;
    p->redialing = 0;
    if (p->closing || uv_tcp_init(p->g->loop, &p->upstream.tcp) != 0) {
        on_closed(h); /* counts the upstream handle as closed */
        pair_close(p);
        return;
    }
    p->upstream.tcp.data = &p->upstream;
    uv_tcp_nodelay(&p->upstream.tcp, 1);
    try_connect(p);
}

static void on_connected(uv_connect_t *req, int status)
{
    gw_pair *p = req->data;
    if (p->closing)
        return;
    if (status < 0) {
        gw_endpoint *e = &p->g->ep[p->ep];
        e->down_until = uv_now(p->g->loop) + p->g->retry_delay_ms;
        fprintf(stderr,
                "kvd gateway: endpoint %s:%d refused a connection (%s); skipped for "
                "%" PRIu64 " ms\n",
                e->host, e->port, uv_strerror(status), p->g->retry_delay_ms);
        /* a handle whose connect failed cannot dial again: close it, then use a new one */
        p->redialing = 1;
        uv_close((uv_handle_t *)&p->upstream.tcp, on_redial_closed);
        return;
    }
    set_reading(&p->client, 1);
    set_reading(&p->upstream, 1);
}

/* Dials the next endpoint that is not marked down (all down: every one, in turn). */
static void try_connect(gw_pair *p)
{
    gw *g = p->g;
    uint64_t now = uv_now(g->loop);
    while (p->tries < g->n_ep) {
        size_t i = g->next++ % g->n_ep;
        p->tries++;
        if (g->ep[i].down_until > now && p->tries < g->n_ep)
            continue;
        struct sockaddr_storage sa;
        if (uv_ip4_addr(g->ep[i].host, g->ep[i].port, (struct sockaddr_in *)&sa) != 0 &&
            uv_ip6_addr(g->ep[i].host, g->ep[i].port, (struct sockaddr_in6 *)&sa) != 0)
            continue;
        p->ep = i;
        p->connect.data = p;
        if (uv_tcp_connect(&p->connect, &p->upstream.tcp, (struct sockaddr *)&sa, on_connected) ==
            0)
            return;
    }
    pair_close(p); /* no endpoint answered */
}

static void on_accept(uv_stream_t *server, int status)
{
    gw *g = server->data;
    if (status < 0)
        return;
    gw_pair *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return;
    p->g = g;
    p->client.pair = p->upstream.pair = p;
    p->client.tcp.data = &p->client;
    p->upstream.tcp.data = &p->upstream;
    uv_tcp_init(g->loop, &p->client.tcp);
    uv_tcp_init(g->loop, &p->upstream.tcp);
    p->open_handles = 2;
    g->n_conns++;
    if (uv_accept(server, (uv_stream_t *)&p->client.tcp) != 0 || g->n_conns > g->max_conns) {
        pair_close(p); /* over --max-connections: refused at once */
        return;
    }
    uv_tcp_nodelay(&p->client.tcp, 1);
    uv_tcp_nodelay(&p->upstream.tcp, 1);
    try_connect(p);
}

/* Shutdown: every connection's pair is closed (freed in its close callbacks), the other
 * handles (listener, signals) closed plainly. */
static void close_any(uv_handle_t *h, void *arg)
{
    gw *g = arg;
    if (uv_is_closing(h))
        return;
    if (h->data == g || h->data == NULL)
        uv_close(h, NULL);
    else
        pair_close(((gw_side *)h->data)->pair);
}

static void on_signal(uv_signal_t *h, int sig)
{
    (void)sig;
    uv_stop(h->loop);
}

/* host:port, http://host:port or https://host:port ("localhost" is 127.0.0.1). */
static int parse_hostport(const char *s, size_t n, char *host, size_t cap, int *port)
{
    char buf[300];
    if (n >= sizeof(buf))
        return -EINVAL;
    memcpy(buf, s, n);
    buf[n] = '\0';
    char *h = buf;
    if (strncmp(h, "http://", 7) == 0)
        h += 7;
    else if (strncmp(h, "https://", 8) == 0)
        h += 8;
    char *colon = strrchr(h, ':');
    if (colon == NULL || colon == h)
        return -EINVAL;
    *colon = '\0';
    char *end;
    long p = strtol(colon + 1, &end, 10);
    if (*end != '\0' && strcmp(end, "/") != 0)
        return -EINVAL;
    if (p <= 0 || p > 65535)
        return -EINVAL;
    if (h[0] == '[') { /* [::1] */
        h++;
        size_t l = strlen(h);
        if (l == 0 || h[l - 1] != ']')
            return -EINVAL;
        h[l - 1] = '\0';
    }
    const char *name = strcmp(h, "localhost") == 0 ? "127.0.0.1" : h;
    if (strlen(name) >= cap)
        return -EINVAL;
    memcpy(host, name, strlen(name) + 1);
    *port = (int)p;
    return 0;
}

/* --retry-delay: Go's time.ParseDuration, as etcd's DurationVar ("1m", "1m30s", "500ms", "0";
 * a lone number other than 0 is refused, as etcd refuses it). Negative is refused; in whole
 * milliseconds ("1.5ms" is 1). */
static int parse_duration_ms(const char *v, uint64_t *out)
{
    int64_t ns = 0;
    if (kv_go_duration_parse(v, 0, &ns) < 0 || ns < 0)
        return -EINVAL;
    *out = (uint64_t)(ns / KV_NS_PER_MS);
    return 0;
}

/* A host name in an endpoint becomes its first address, once, at start (the loop dials IP
 * literals): etcd's gateway resolves at each dial, so a changed name needs a restart here. */
static int resolve_endpoint(gw_endpoint *e)
{
    struct sockaddr_storage sa;
    if (uv_ip4_addr(e->host, e->port, (struct sockaddr_in *)&sa) == 0 ||
        uv_ip6_addr(e->host, e->port, (struct sockaddr_in6 *)&sa) == 0)
        return 0;
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
    if (getaddrinfo(e->host, NULL, &hints, &ai) != 0 || !ai) {
        fprintf(stderr, "kvd gateway: --endpoints: cannot resolve '%s'\n", e->host);
        return -ENOENT;
    }
    const void *a = ai->ai_family == AF_INET
                        ? (const void *)&((struct sockaddr_in *)ai->ai_addr)->sin_addr
                        : (const void *)&((struct sockaddr_in6 *)ai->ai_addr)->sin6_addr;
    char ip[INET6_ADDRSTRLEN];
    inet_ntop(ai->ai_family, a, ip, sizeof ip);
    freeaddrinfo(ai);
    snprintf(e->host, sizeof e->host, "%s", ip);
    return 0;
}

/* etcd's gateway discoverEndpoints: the SRV records' client endpoints, checked as etcd does
 * unless insecure (https:// only, a TCP connection made); *out a malloc'd comma list. */
static int discover(const char *domain, const char *name, int insecure, char **out)
{
    char **eps = NULL, err[2048];
    size_t n = 0;
    if (kv_srv_client_endpoints(domain, name, &eps, &n, err, sizeof err) < 0) {
        fprintf(stderr, "kvd gateway: %s\n", err);
        return -ENOENT;
    }
    if (!insecure) {
        n = kv_srv_keep_secure(eps, n, 5000, err, sizeof err);
        if (err[0])
            fprintf(stderr, "kvd gateway: warning: %s\n", err);
    }
    size_t len = 1;
    for (size_t i = 0; i < n; i++)
        len += strlen(eps[i]) + 1;
    char *s = calloc(1, len);
    for (size_t i = 0; s && i < n; i++) {
        strcat(s, i ? "," : "");
        strcat(s, eps[i]);
    }
    kv_srv_endpoints_free(eps, n);
    if (!s)
        return -ENOMEM;
    fprintf(stderr, "kvd gateway: using discovered endpoints [%s]\n", s);
    *out = s;
    return 0;
}

static int parse_args(gw *g, int argc, char **argv, char *lhost, int *lport)
{
    const char *endpoints = "127.0.0.1:2379", *listen = "127.0.0.1:23790";
    const char *srv = NULL, *srv_name = NULL;
    char *found = NULL;
    int started = 0, insecure_discovery = 0, rc = -EINVAL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "start") == 0) {
            started = 1;
            continue;
        }
        if (strncmp(a, "--", 2) != 0) {
            fprintf(stderr, "kvd gateway: unexpected argument '%s'\n", a);
            return -EINVAL;
        }
        a += 2;
        const char *eq = strchr(a, '=');
        size_t nl = eq ? (size_t)(eq - a) : strlen(a);
        if (nl == 18 && strncmp(a, "insecure-discovery", 18) == 0) { /* a boolean */
            insecure_discovery = !eq || strcmp(eq + 1, "true") == 0;
            continue;
        }
        const char *v = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : "");
        if (nl == 9 && strncmp(a, "endpoints", 9) == 0)
            endpoints = v;
        else if (nl == 13 && strncmp(a, "discovery-srv", 13) == 0)
            srv = v[0] ? v : NULL;
        else if (nl == 18 && strncmp(a, "discovery-srv-name", 18) == 0)
            srv_name = v;
        else if (nl == 15 && strncmp(a, "trusted-ca-file", 15) == 0)
            ; /* etcd checks discovered endpoints with a plain TCP dial: the CA is not used */
        else if (nl == 11 && strncmp(a, "listen-addr", 11) == 0)
            listen = v;
        else if (nl == 11 && strncmp(a, "retry-delay", 11) == 0) {
            if (parse_duration_ms(v, &g->retry_delay_ms) < 0) {
                fprintf(stderr, "kvd gateway: --retry-delay: invalid duration '%s'\n", v);
                return -EINVAL;
            }
        } else if (nl == 15 && strncmp(a, "max-connections", 15) == 0) {
            g->max_conns = (unsigned)strtoul(v, NULL, 10);
            if (g->max_conns == 0) {
                fprintf(stderr, "kvd gateway: --max-connections must be positive\n");
                return -EINVAL;
            }
        } else {
            fprintf(stderr, "kvd gateway: unknown or unsupported flag '--%.*s'\n", (int)nl, a);
            return -EINVAL;
        }
    }
    if (!started) {
        fprintf(stderr, "usage: kvd gateway start [--endpoints=h:p,...] [--listen-addr=h:p] "
                        "[--retry-delay=1m] [--max-connections=N] [--discovery-srv=DOMAIN "
                        "[--discovery-srv-name=NAME] [--insecure-discovery]]\n");
        return -EINVAL;
    }
    if (parse_hostport(listen, strlen(listen), lhost, 256, lport) < 0) {
        fprintf(stderr, "kvd gateway: --listen-addr: want host:port, got '%s'\n", listen);
        return -EINVAL;
    }
    if (srv) {
        if ((rc = discover(srv, srv_name, insecure_discovery, &found)) < 0)
            return rc;
        endpoints = found;
        rc = -EINVAL; /* until the endpoints are read */
    }
    for (const char *p = endpoints; *p;) {
        const char *c = strchr(p, ',');
        size_t n = c ? (size_t)(c - p) : strlen(p);
        if (n > 0) {
            if (g->n_ep == GW_MAX_ENDPOINTS) {
                fprintf(stderr, "kvd gateway: --endpoints: at most %d\n", GW_MAX_ENDPOINTS);
                goto out;
            }
            gw_endpoint *e = &g->ep[g->n_ep];
            if (parse_hostport(p, n, e->host, sizeof(e->host), &e->port) < 0) {
                fprintf(stderr, "kvd gateway: --endpoints: bad endpoint '%.*s'\n", (int)n, p);
                goto out;
            }
            if (resolve_endpoint(e) < 0)
                goto out;
            g->n_ep++;
        }
        if (c == NULL)
            break;
        p = c + 1;
    }
    if (g->n_ep == 0) { /* etcd: "no endpoints found" */
        fprintf(stderr, "kvd gateway: %s\n",
                srv ? "no endpoints found" : "--endpoints: no endpoint");
        goto out;
    }
    rc = 0;
out:
    free(found);
    return rc;
}

int kv_gateway_main(int argc, char **argv)
{
    gw *g = calloc(1, sizeof(*g));
    if (g == NULL)
        return 1;
    uv_loop_t loop;
    char lhost[256];
    int lport = 0, rc = 2;
    g->retry_delay_ms = 60000; /* etcd's default */
    g->max_conns = 10000;
    if (parse_args(g, argc, argv, lhost, &lport) < 0)
        goto out_free;
    rc = 1;
    if (uv_loop_init(&loop) != 0)
        goto out_free;
    g->loop = &loop;
    struct sockaddr_storage sa;
    if (uv_ip4_addr(lhost, lport, (struct sockaddr_in *)&sa) != 0 &&
        uv_ip6_addr(lhost, lport, (struct sockaddr_in6 *)&sa) != 0) {
        fprintf(stderr, "kvd gateway: --listen-addr: '%s' is not an IP address\n", lhost);
        goto out_loop;
    }
    uv_tcp_init(&loop, &g->listener);
    g->listener.data = g;
    g->sigint.data = g->sigterm.data = g;
    int e = uv_tcp_bind(&g->listener, (struct sockaddr *)&sa, 0);
    if (e == 0)
        e = uv_listen((uv_stream_t *)&g->listener, 511, on_accept);
    if (e != 0) {
        fprintf(stderr, "kvd gateway: cannot listen on %s:%d: %s\n", lhost, lport, uv_strerror(e));
        goto out_close;
    }
    uv_signal_init(&loop, &g->sigint);
    uv_signal_init(&loop, &g->sigterm);
    g->sigint.data = g->sigterm.data = g;
    uv_signal_start(&g->sigint, on_signal, SIGINT);
    uv_signal_start(&g->sigterm, on_signal, SIGTERM);
    fprintf(stderr, "kvd gateway: ready to proxy client requests to %zu endpoint(s) on %s:%d\n",
            g->n_ep, lhost, lport);
    uv_run(&loop, UV_RUN_DEFAULT);
    rc = 0;
out_close:
    /* close every handle (connections too), then let the close callbacks free them */
    uv_walk(&loop, close_any, g);
    uv_run(&loop, UV_RUN_DEFAULT);
out_loop:
    uv_loop_close(&loop);
out_free:
    free(g);
    return rc;
}
