/* client_http.c - HTTP/1.1 on the client port: /health, /version, /metrics and the
 * grpc-gateway JSON API (see client_http.h). */
#include "http/client_http.h"

#include "common/list.h"
#include "grpc/grpc_http1.h"
#include "http/gateway.h"
#include "http/http_server.h"
#include "http/json_pb.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define HEALTH_SCAN_MS 250
/* etcd's /health sets no Content-Type: Go's sniffing says text/plain */
#define HEALTH_CTYPE "text/plain; charset=utf-8"

typedef struct hconn hconn;

/* One /health check in flight. Outlives its connection if the hook answers late. */
typedef struct health_req {
    hconn *hc; /* NULL once the connection is gone or answered by the timeout */
    uint64_t deadline;
    kv_list link; /* h->health_list while hc != NULL */
} health_req;

/* The label values of etcd_http_*: the methods etcd's client port answers, then the rest. */
static const char *const http_methods[] = {"GET",  "PUT",     "POST", "DELETE",
                                           "HEAD", "OPTIONS", "other"};
#define N_HTTP_METHODS (sizeof(http_methods) / sizeof(http_methods[0]))

struct kv_client_http {
    kv_client_http_config cfg;
    uv_loop_t *loop;
    uv_timer_t timer;    /* health timeouts */
    kv_list health_list; /* health_req.link, newest first */
    kv_metric *m_requests, *m_bad;
    /* etcd's series (docs/metrics.md "Client HTTP"): per HTTP method of a fixed set */
    kv_metric *m_received[N_HTTP_METHODS], *m_success[N_HTTP_METHODS];
    kv_metric *m_health_ok, *m_health_fail;
    /* gateway calls in flight (client_http.h "Gateway calls share one stream limit") */
    uint32_t active;
    kv_list waiting; /* hconn.wait_link: complete gateway requests waiting for a slot, in order */
    size_t n_waiting;
    uv_timer_t wake; /* 0 ms: starts waiting requests outside the callback that freed a slot */
    int closing, handles_open;
    kv_metric *m_waiting, *m_waited;
};

/* ST_WAITING: a complete gateway request waits for a slot; it stays in `in` and is parsed
 * again when its turn comes. */
enum { ST_IDLE, ST_HEALTH, ST_UNARY, ST_STREAM, ST_WAITING, ST_PPROF };

struct hconn {
    kv_client_http *h;
    kv_grpc_conn *c;
    char *in;
    size_t in_len, in_cap;
    int state;
    int keep_alive; /* of the request being answered */
    int closing;    /* a response with Connection: close was queued */
    int in_process; /* process() is on the stack */
    health_req *hr;
    kv_pprof_req *pr; /* a CPU profile being taken for this connection (ST_PPROF) */
    /* gateway call */
    kv_grpc_call *call;
    kv_gw_route rt;
    uint8_t *resp;
    size_t resp_len;
    int got_resp;
    int head_method;   /* HEAD: no body */
    int sent_continue; /* "100 Continue" written for the request being received */
    int http_method;   /* index in http_methods of the request being answered; -1: none */
    uint64_t t0_ns;    /* when it was complete (etcd_http_successful_duration_seconds) */
    int counted;       /* the call holds one of h->active */
    kv_list wait_link; /* h->waiting while ST_WAITING */
};

/* ---- output ---- */

/* The request is complete: etcd_http_received_total. */
static void http_begin(hconn *hc, const char *method)
{
    size_t i = 0;
    while (i + 1 < N_HTTP_METHODS && strcmp(http_methods[i], method) != 0)
        i++;
    hc->http_method = (int)i;
    hc->t0_ns = uv_hrtime();
    kv_metric_inc(hc->h->m_received[i]);
}

/* Its response head: etcd_http_failed_total (status >= 400, by status) or the duration. */
static void http_end(hconn *hc, int status)
{
    kv_client_http *h = hc->h;
    int i = hc->http_method;
    if (i < 0 || !h->cfg.metrics)
        return;
    hc->http_method = -1;
    if (status >= 400) {
        char l[64];
        snprintf(l, sizeof(l), "code=\"%d\",method=\"%s\"", status < 600 ? status : 599,
                 http_methods[i]);
        kv_metric_inc(kv_metrics_counter(
            h->cfg.metrics, "etcd_http_failed_total",
            "Counter of handle failures of requests (non-watches), by method (GET/PUT etc.) and "
            "code (400, 500 etc.).",
            l));
        return;
    }
    kv_metric_observe(h->m_success[i], (double)(uv_hrtime() - hc->t0_ns) / 1e9);
}

/* extra: more header lines ("Name: v\r\n"...) or NULL. */
static void write_head_x(hconn *hc, int status, const char *ctype, long long len, int chunked,
                         const char *extra)
{
    http_end(hc, status);
    char head[1024]; /* the fixed lines, at most one 256-byte extra line */
    /* etcd's client port wraps every HTTP handler in its CORS handler; its grpc-proxy's
     * listener does not */
    static const char cors[] = "Access-Control-Allow-Headers: accept, content-type, "
                               "authorization\r\n"
                               "Access-Control-Allow-Methods: POST, GET, OPTIONS, PUT, DELETE\r\n"
                               "Access-Control-Allow-Origin: *\r\n";
    int n = snprintf(head, sizeof(head), "HTTP/1.1 %d %s\r\n%sContent-Type: %s\r\n", status,
                     kv_gw_status_text(status), hc->h->cfg.grpc_proxy ? "" : cors, ctype);
    if (chunked) /* grpc-gateway forwards the gRPC response header */
        n += snprintf(head + n, sizeof(head) - (size_t)n,
                      "Grpc-Metadata-Content-Type: application/grpc\r\n"
                      "Transfer-Encoding: chunked\r\n");
    else
        n += snprintf(head + n, sizeof(head) - (size_t)n, "Content-Length: %lld\r\n", len);
    if (extra)
        n += snprintf(head + n, sizeof(head) - (size_t)n, "%s", extra);
    if (!hc->keep_alive)
        n += snprintf(head + n, sizeof(head) - (size_t)n, "Connection: close\r\n");
    n += snprintf(head + n, sizeof(head) - (size_t)n, "\r\n");
    kv_grpc_http1_write(hc->c, head, (size_t)n < sizeof(head) ? (size_t)n : sizeof(head) - 1);
}

static void write_head(hconn *hc, int status, const char *ctype, long long len, int chunked)
{
    write_head_x(hc, status, ctype, len, chunked, NULL);
}

/* A complete response; ends the request. */
static void respond_x(hconn *hc, int status, const char *ctype, const char *extra, const char *body,
                      size_t len)
{
    write_head_x(hc, status, ctype, (long long)len, 0, extra);
    if (len && !hc->head_method)
        kv_grpc_http1_write(hc->c, body, len);
    hc->state = ST_IDLE;
    if (!hc->keep_alive) {
        hc->closing = 1;
        kv_grpc_http1_end(hc->c);
    }
}

static void respond(hconn *hc, int status, const char *ctype, const char *body, size_t len)
{
    respond_x(hc, status, ctype, NULL, body, len);
}

static void respond_text(hconn *hc, int status, const char *text)
{
    respond(hc, status, "text/plain; charset=utf-8", text, strlen(text));
}

/* Malformed or over-limit input: answer and close. */
static void respond_close(hconn *hc, int status, const char *text)
{
    hc->keep_alive = 0;
    kv_metric_inc(hc->h->m_bad);
    respond_text(hc, status, text);
}

static void respond_health(hconn *hc, int ok, const char *reason)
{
    kv_metric_inc(ok ? hc->h->m_health_ok : hc->h->m_health_fail);
    if (ok) {
        static const char body[] = "{\"health\":\"true\"}";
        respond(hc, 200, HEALTH_CTYPE, body, sizeof(body) - 1);
        return;
    }
    static const char body[] = "{\"health\":\"false\"}"; /* etcd 3.4's body */
    char line[256];
    kv_http_health_reason_line(line, sizeof(line), reason);
    respond_x(hc, 503, HEALTH_CTYPE, line, body, sizeof(body) - 1);
}

/* grpc-gateway v1's error body (runtime.DefaultHTTPError). */
static void respond_grpc_error(hconn *hc, int code, const char *msg)
{
    kv_jbuf b = {0};
    char num[32];
    const char *m = msg ? msg : "";
    kv_jbuf_puts(&b, "{\"error\":");
    kv_jbuf_str(&b, m, strlen(m));
    kv_jbuf_puts(&b, ",\"message\":");
    kv_jbuf_str(&b, m, strlen(m));
    snprintf(num, sizeof(num), ",\"code\":%d}", code);
    kv_jbuf_puts(&b, num);
    if (b.oom) {
        kv_jbuf_free(&b);
        respond_close(hc, 500, "out of memory\n");
        return;
    }
    respond(hc, kv_gw_http_status(code), "application/json", b.p, b.len);
    kv_jbuf_free(&b);
}

static void write_chunk(hconn *hc, const char *p, size_t n)
{
    char hdr[32];
    int k = snprintf(hdr, sizeof(hdr), "%zx\r\n", n);
    kv_grpc_http1_write(hc->c, hdr, (size_t)k);
    kv_grpc_http1_write(hc->c, p, n);
    kv_grpc_http1_write(hc->c, "\r\n", 2);
}

/* ---- health ---- */

static void health_unlink(health_req *hr)
{
    kv_list_remove(&hr->link); /* harmless if it is on no list */
}

static void health_done(void *ctx, int ok, const char *reason)
{
    health_req *hr = ctx;
    hconn *hc = hr->hc;
    if (hc) {
        health_unlink(hr);
        hc->hr = NULL;
    }
    free(hr);
    if (hc && hc->state == ST_HEALTH)
        respond_health(hc, ok, reason);
}

static void health_timer_cb(uv_timer_t *t)
{
    kv_client_http *h = t->data;
    uint64_t now = uv_now(h->loop);
    kv_list *e, *next;
    kv_list_foreach_safe(e, next, &h->health_list) {
        health_req *hr = kv_list_data(e, health_req, link);
        if (hr->deadline > now)
            continue;
        hconn *hc = hr->hc;
        health_unlink(hr);
        hr->hc = NULL; /* freed when the hook answers */
        hc->hr = NULL;
        respond_health(hc, 0, "timeout");
    }
    if (kv_list_empty(&h->health_list))
        uv_timer_stop(&h->timer);
}

static void start_health(hconn *hc)
{
    kv_client_http *h = hc->h;
    if (!h->cfg.health) {
        respond_health(hc, 1, NULL);
        return;
    }
    health_req *hr = calloc(1, sizeof(*hr));
    if (!hr) {
        respond_health(hc, 0, "out of memory");
        return;
    }
    hr->hc = hc;
    hr->deadline = uv_now(h->loop) + h->cfg.health_timeout_ms;
    kv_list_insert_head(&h->health_list, &hr->link);
    hc->hr = hr;
    hc->state = ST_HEALTH;
    if (!uv_is_active((uv_handle_t *)&h->timer))
        uv_timer_start(&h->timer, health_timer_cb, HEALTH_SCAN_MS, HEALTH_SCAN_MS);
    h->cfg.health(h->cfg.app, health_done, hr); /* may answer synchronously */
}

/* ---- /debug/pprof/ ---- */

static void pprof_reply(void *ctx, int status, const char *ctype, const char *extra,
                        const char *body, size_t len)
{
    hconn *hc = ctx;
    hc->pr = NULL;
    respond_x(hc, status, ctype, extra, body, len);
}

static void start_pprof(hconn *hc, const char *path, const char *query)
{
    hc->state = ST_PPROF; /* reset to ST_IDLE by the reply */
    kv_pprof_http_handle(hc->h->cfg.pprof, path, query, pprof_reply, hc, &hc->pr);
}

/* ---- gateway calls ---- */

static void on_wake(uv_timer_t *t);

/* One slot of the stream limit is free again: waiting requests start from the wake timer, not
 * from inside the handler callback that freed it. */
static void slot_release(hconn *hc)
{
    kv_client_http *h = hc->h;
    if (!hc->counted)
        return;
    hc->counted = 0;
    h->active--;
    if (!kv_list_empty(&h->waiting) && !h->closing)
        uv_timer_start(&h->wake, on_wake, 0, 0);
}

static void wait_unlink(hconn *hc)
{
    kv_client_http *h = hc->h;
    if (kv_list_empty(&hc->wait_link))
        return; /* not waiting */
    kv_list_remove(&hc->wait_link);
    h->n_waiting--;
    kv_metric_set(h->m_waiting, (double)h->n_waiting);
}

static int sink_send(void *arg, const uint8_t *msg, size_t len)
{
    hconn *hc = arg;
    if (hc->state == ST_STREAM) {
        ProtobufCMessage *m = protobuf_c_message_unpack(hc->rt.out, NULL, len, msg);
        if (!m)
            return -EINVAL;
        kv_jbuf b = {0};
        kv_jbuf_puts(&b, "{\"result\":");
        kv_pb_to_json(m, &b);
        kv_jbuf_puts(&b, "}\n");
        protobuf_c_message_free_unpacked(m, NULL);
        int rc = b.oom ? -ENOMEM : 0;
        if (rc == 0)
            write_chunk(hc, b.p, b.len);
        kv_jbuf_free(&b);
        return rc;
    }
    uint8_t *copy = malloc(len ? len : 1);
    if (!copy)
        return -ENOMEM;
    memcpy(copy, msg, len);
    free(hc->resp);
    hc->resp = copy;
    hc->resp_len = len;
    hc->got_resp = 1;
    return 0;
}

static size_t sink_queued(void *arg)
{
    hconn *hc = arg;
    return kv_grpc_http1_pending(hc->c);
}

static void process(hconn *hc);

static void sink_finish(void *arg, int status, const char *msg)
{
    hconn *hc = arg;
    kv_grpc_call *call = hc->call;
    hc->call = NULL;
    kv_grpc_local_free(call); /* finished: no on_cancel */
    slot_release(hc);
    if (hc->state == ST_STREAM) {
        if (status != 0) {
            /* grpc-gateway v1's streaming error object */
            kv_jbuf b = {0};
            char num[96];
            const char *m = msg ? msg : (status < 0 ? "stream reset" : "");
            int code = status < 0 ? 13 : status;
            snprintf(num, sizeof(num),
                     "{\"error\":{\"grpc_code\":%d,\"http_code\":%d,\"message\":", code,
                     kv_gw_http_status(code));
            kv_jbuf_puts(&b, num);
            kv_jbuf_str(&b, m, strlen(m));
            kv_jbuf_puts(&b, ",\"http_status\":");
            const char *t = kv_gw_status_text(kv_gw_http_status(code));
            kv_jbuf_str(&b, t, strlen(t));
            kv_jbuf_puts(&b, "}}\n");
            if (!b.oom)
                write_chunk(hc, b.p, b.len);
            kv_jbuf_free(&b);
        }
        kv_grpc_http1_write(hc->c, "0\r\n\r\n", 5);
        hc->state = ST_IDLE;
        if (!hc->keep_alive || status < 0) {
            hc->closing = 1;
            kv_grpc_http1_end(hc->c);
        }
    } else if (status < 0) { /* aborted: the outcome is unknown; say so and close */
        hc->keep_alive = 0;
        respond_grpc_error(hc, 13, "transport: the response could not be delivered");
    } else if (status != 0) {
        respond_grpc_error(hc, status, msg);
    } else {
        ProtobufCMessage *m =
            protobuf_c_message_unpack(hc->rt.out, NULL, hc->got_resp ? hc->resp_len : 0,
                                      hc->resp ? hc->resp : (const uint8_t *)"");
        kv_jbuf b = {0};
        if (m) {
            kv_pb_to_json(m, &b);
            protobuf_c_message_free_unpacked(m, NULL);
        }
        if (!m || b.oom)
            respond_grpc_error(hc, 13, "grpc-gateway: cannot marshal the response");
        else
            respond(hc, 200, "application/json", b.p, b.len);
        kv_jbuf_free(&b);
    }
    free(hc->resp);
    hc->resp = NULL;
    hc->resp_len = 0;
    hc->got_resp = 0;
    /* The next pipelined request is taken from process() (on the stack) or once the output is
     * written (drained), never from inside the handler that finished this call. */
}

static const kv_grpc_local_sink gw_sink = {sink_send, sink_finish, sink_queued};

#define GW_MAX_STREAM_OBJECTS 1024 /* request objects of one streaming body */

typedef struct packed_msg {
    uint8_t *p;
    size_t n;
} packed_msg;

/* Packs a parsed request (freed here) into out. */
static int pack_request(ProtobufCMessage *req, packed_msg *out)
{
    out->n = protobuf_c_message_get_packed_size(req);
    out->p = malloc(out->n ? out->n : 1);
    if (out->p)
        protobuf_c_message_pack(req, out->p);
    protobuf_c_message_free_unpacked(req, NULL);
    return out->p ? 0 : -ENOMEM;
}

/* auth: the request's Authorization header (NULL: none), forwarded as grpc-gateway does. */
static void start_gateway(hconn *hc, const char *path, const char *body, size_t blen,
                          const char *auth, size_t alen)
{
    if (kv_gw_lookup(path, &hc->rt) != 0) {
        respond_text(hc, 404, "Not Found\n"); /* grpc-gateway's runtime: no pattern matched */
        return;
    }
    /* grpc-gateway decodes the body's first JSON value for a unary method (the rest is
     * ignored) and each value in turn for a streaming one. */
    char err[160];
    packed_msg *msgs = calloc(GW_MAX_STREAM_OBJECTS, sizeof(*msgs));
    size_t n = 0, off = 0;
    int rc = msgs ? 0 : -ENOMEM;
    while (rc == 0 && n < GW_MAX_STREAM_OBJECTS) {
        ProtobufCMessage *req = NULL;
        size_t used = 0;
        rc = kv_json_to_pb_next(hc->rt.in, body + off, blen - off, &req, &used, err, sizeof(err));
        if (rc < 0)
            break;
        off += used;
        if (!req && n > 0)
            break;  /* only white space left */
        if (!req) { /* an empty body: the empty request */
            req = malloc(hc->rt.in->sizeof_message);
            if (!req) {
                rc = -ENOMEM;
                break;
            }
            protobuf_c_message_init(hc->rt.in, req);
        }
        if ((rc = pack_request(req, &msgs[n])) < 0)
            break;
        n++;
        if (!hc->rt.streaming)
            break;
    }
    if (rc == 0 && n == GW_MAX_STREAM_OBJECTS && off < blen) {
        rc = -EINVAL;
        snprintf(err, sizeof(err), "more than %d request objects", GW_MAX_STREAM_OBJECTS);
    }
    if (rc == 0) {
        rc = kv_grpc_local_new(hc->c, hc->rt.grpc_path, &gw_sink, hc, &hc->call);
        if (rc == 0 && auth && kv_grpc_local_set_authorization(hc->call, auth, alen) < 0) {
            kv_grpc_local_free(hc->call);
            hc->call = NULL;
            rc = -ENOMEM;
        }
        if (rc == 0) {
            hc->counted = 1;
            hc->h->active++;
        }
        if (rc == -ENOENT) {
            char m[160];
            snprintf(m, sizeof(m), "unknown method %s", hc->rt.grpc_path);
            respond_grpc_error(hc, 12, m);
        }
    } else if (rc == -EINVAL) {
        respond_grpc_error(hc, 3, err); /* grpc-gateway: InvalidArgument for a bad body */
    }
    if (rc == -ENOMEM)
        respond_close(hc, 500, "out of memory\n");
    if (rc == 0) {
        if (hc->rt.streaming) {
            hc->state = ST_STREAM;
            write_head(hc, 200, "application/json", 0, 1);
        } else {
            hc->state = ST_UNARY;
        }
        kv_grpc_call *call = hc->call;
        for (size_t i = 0; i < n && hc->call == call; i++)
            kv_grpc_local_deliver(call, msgs[i].p, msgs[i].n);
        /* the body ended: a stream's client half-close */
        if (hc->rt.streaming && hc->call == call)
            kv_grpc_local_half_close(call);
    }
    for (size_t i = 0; msgs && i < n; i++)
        free(msgs[i].p);
    free(msgs);
}

/* ---- request parsing ---- */

/* End of the request head: the first empty line. Lines end with CRLF or, as Go's
 * net/textproto (etcd's server) tolerates, a bare LF. Returns the head's length including
 * that empty line, or 0 if it has not arrived. */
static size_t head_end(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (p[i] != '\n')
            continue;
        size_t j = i + 1; /* start of the next line */
        if (j < n && p[j] == '\n')
            return j + 1;
        if (j + 1 < n && p[j] == '\r' && p[j + 1] == '\n')
            return j + 2;
    }
    return 0;
}

/* The line starting at p, before end: *eol is set to its terminator (CR of CRLF, or a bare
 * LF), and the start of the next line is returned; NULL if the line has no LF or holds a CR
 * elsewhere (a bare CR is not a line end: refused, as Go does). */
static char *line_next(char *p, char *end, char **eol)
{
    char *lf = memchr(p, '\n', (size_t)(end - p));
    if (!lf)
        return NULL;
    char *e = lf > p && lf[-1] == '\r' ? lf - 1 : lf;
    if (memchr(p, '\r', (size_t)(e - p)))
        return NULL;
    *eol = e;
    return lf + 1;
}

static int is_token(const char *s, size_t n)
{
    if (!n)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && (!s[i] || !strchr("!#$%&'*+-.^_`|~", s[i])))
            return 0;
    return 1;
}

/* Parses and answers the request at the front of hc->in. Returns the bytes it used, 0 if it is
 * not complete yet, or -1 if the connection must close (a response was queued). */
static long take_request(hconn *hc)
{
    kv_client_http *h = hc->h;
    size_t head_len = head_end(hc->in, hc->in_len);
    if (!head_len) {
        if (hc->in_len > h->cfg.max_header_bytes) {
            respond_close(hc, 431, "431 Request Header Fields Too Large\n");
            return -1;
        }
        return 0;
    }
    if (head_len > h->cfg.max_header_bytes) {
        respond_close(hc, 431, "431 Request Header Fields Too Large\n");
        return -1;
    }
    char *head_stop = hc->in + head_len;
    /* No NUL anywhere in the head: not in a token, a value or the target (Go refuses it). */
    if (memchr(hc->in, '\0', head_len)) {
        respond_close(hc, 400, "400 Bad Request\n");
        return -1;
    }
    /* request line */
    char *line = hc->in, *le = NULL;
    char *hp = line_next(line, head_stop, &le);
    char *sp1 = hp ? memchr(line, ' ', (size_t)(le - line)) : NULL;
    char *sp2 = sp1 ? memchr(sp1 + 1, ' ', (size_t)(le - sp1 - 1)) : NULL;
    if (!sp1 || !sp2 || !is_token(line, (size_t)(sp1 - line)) || sp2 == sp1 + 1 || sp1[1] != '/') {
        respond_close(hc, 400, "400 Bad Request\n");
        return -1;
    }
    size_t vlen = (size_t)(le - sp2 - 1);
    int minor;
    if (vlen == 8 && memcmp(sp2 + 1, "HTTP/1.1", 8) == 0)
        minor = 1;
    else if (vlen == 8 && memcmp(sp2 + 1, "HTTP/1.0", 8) == 0)
        minor = 0;
    else {
        respond_close(hc, vlen == 8 && memcmp(sp2 + 1, "HTTP/", 5) == 0 ? 505 : 400,
                      "400 Bad Request\n");
        return -1;
    }
    char method[16], target[1024];
    size_t mlen = (size_t)(sp1 - line), tlen = (size_t)(sp2 - sp1 - 1);
    if (mlen >= sizeof(method) || tlen >= sizeof(target)) {
        respond_close(hc, mlen >= sizeof(method) ? 400 : 431, "400 Bad Request\n");
        return -1;
    }
    memcpy(method, line, mlen);
    method[mlen] = '\0';
    memcpy(target, sp1 + 1, tlen);
    target[tlen] = '\0';
    char *q = strchr(target, '?');
    if (q)
        *q = '\0';
    const char *query = q ? q + 1 : NULL;
    /* headers */
    long long clen = -1;
    int conn_close = !minor, conn_keep = 0, chunked = 0, expect = 0;
    const char *auth = NULL; /* first Authorization header, in hc->in */
    size_t alen = 0;
    for (char *p = hp, *next = NULL; p < head_stop; p = next) {
        char *e = NULL;
        next = line_next(p, head_stop, &e);
        if (!next) {
            respond_close(hc, 400, "400 Bad Request\n");
            return -1;
        }
        if (e == p)
            break; /* the empty line that ends the head */
        char *colon = memchr(p, ':', (size_t)(e - p));
        if (!colon || !is_token(p, (size_t)(colon - p))) {
            respond_close(hc, 400, "400 Bad Request: malformed header\n");
            return -1;
        }
        char *v = colon + 1;
        while (v < e && (*v == ' ' || *v == '\t'))
            v++;
        size_t nlen = (size_t)(colon - p), vl = (size_t)(e - v);
        while (vl && (v[vl - 1] == ' ' || v[vl - 1] == '\t'))
            vl--;
        if (nlen == 14 && strncasecmp(p, "content-length", 14) == 0) {
            long long x = 0;
            if (!vl || clen >= 0) {
                respond_close(hc, 400, "400 Bad Request: bad Content-Length\n");
                return -1;
            }
            for (size_t i = 0; i < vl; i++) {
                if (!isdigit((unsigned char)v[i]) || x > (1LL << 40)) {
                    respond_close(hc, 400, "400 Bad Request: bad Content-Length\n");
                    return -1;
                }
                x = x * 10 + (v[i] - '0');
            }
            clen = x;
        } else if (nlen == 10 && strncasecmp(p, "connection", 10) == 0) {
            if (vl == 5 && strncasecmp(v, "close", 5) == 0)
                conn_close = 1;
            else if (vl == 10 && strncasecmp(v, "keep-alive", 10) == 0)
                conn_keep = 1;
        } else if (nlen == 17 && strncasecmp(p, "transfer-encoding", 17) == 0) {
            chunked = 1;
        } else if (nlen == 13 && strncasecmp(p, "authorization", 13) == 0) {
            if (!auth) {
                auth = v;
                alen = vl;
            }
        } else if (nlen == 6 && strncasecmp(p, "expect", 6) == 0) {
            expect = vl == 12 && strncasecmp(v, "100-continue", 12) == 0;
        }
    }
    hc->keep_alive = minor ? !conn_close : conn_keep;
    if (chunked) { /* not supported: bodies need a Content-Length */
        respond_close(hc, 411, "411 Length Required\n");
        return -1;
    }
    if (clen < 0)
        clen = 0;
    if ((unsigned long long)clen > h->cfg.max_body_bytes) {
        respond_close(hc, 413, "413 Request Entity Too Large\n");
        return -1;
    }
    if (hc->in_len - head_len < (size_t)clen) {
        /* curl sends "Expect: 100-continue" for bodies over 1 KiB and waits for it (Go's
         * server answers it when the handler reads the body) */
        if (expect && minor && !hc->sent_continue) {
            hc->sent_continue = 1;
            kv_grpc_http1_write(hc->c, "HTTP/1.1 100 Continue\r\n\r\n", 25);
        }
        return 0; /* body incomplete */
    }
    hc->sent_continue = 0;
    /* etcd's grpc-proxy mux has /health, /metrics and pprof only: the member-only branches
     * (/version, the gateway, CORS preflights) are skipped there and the chain's last
     * branch answers 404 */
    int proxy = h->cfg.grpc_proxy;
    int gateway = !proxy && !h->cfg.no_gateway; /* etcd: --enable-grpc-gateway, member only */
    if (gateway && h->cfg.max_streams && h->active >= h->cfg.max_streams &&
        strcmp(method, "POST") == 0 && strncmp(target, "/v3", 3) == 0) {
        /* every stream slot is taken: wait, as etcd's gateway waits for its connection's
         * stream quota, until a call ends or the client gives up (on_close) */
        hc->state = ST_WAITING;
        kv_list_insert_tail(&h->waiting, &hc->wait_link);
        h->n_waiting++;
        kv_metric_set(h->m_waiting, (double)h->n_waiting);
        kv_metric_inc(h->m_waited);
        kv_grpc_http1_waiting(hc->c, 0); /* not idle: the idle timeout does not apply */
        return -2;
    }
    /* a complete request */
    kv_metric_inc(h->m_requests);
    http_begin(hc, method);
    kv_grpc_http1_waiting(hc->c, 0);
    const char *body = hc->in + head_len;
    hc->head_method = strcmp(method, "HEAD") == 0;
    if (!proxy && strcmp(method, "OPTIONS") == 0) { /* etcd's CORS: every preflight */
        respond(hc, 200, "text/plain; charset=utf-8", "", 0);
    } else if (strcmp(target, "/health") == 0 || strcmp(target, "/metrics") == 0 ||
               (!proxy && strcmp(target, "/version") == 0)) {
        /* etcd: /health and /version allow GET only; promhttp's /metrics any method */
        if (target[1] != 'm' && strcmp(method, "GET") != 0) {
            respond_text(hc, 405, "Method Not Allowed\n");
        } else if (target[1] == 'h') {
            start_health(hc);
        } else if (target[1] == 'v') {
            char b[256];
            int n = snprintf(b, sizeof(b), "{\"etcdserver\":\"%s\",\"etcdcluster\":\"3.4.0\"}",
                             h->cfg.server_version ? h->cfg.server_version : "3.4.0");
            respond(hc, 200, "application/json", b, (size_t)n);
        } else {
            char *out = NULL;
            size_t len = 0;
            if (h->cfg.metrics && kv_metrics_render(h->cfg.metrics, &out, &len) != 0) {
                respond_close(hc, 500, "out of memory\n");
            } else {
                respond(hc, 200, "text/plain; version=0.0.4; charset=utf-8", out ? out : "", len);
                free(out);
            }
        }
    } else if (h->cfg.pprof && kv_pprof_http_match(target)) {
        start_pprof(hc, target, query); /* Go's pprof handlers take any method */
    } else if (gateway && strncmp(target, "/v3", 3) == 0) {
        if (strcmp(method, "POST") != 0) /* grpc-gateway: only POST patterns exist */
            respond_text(hc, 405, "Method Not Allowed\n");
        else
            start_gateway(hc, target, body, (size_t)clen, auth, alen);
    } else {
        respond_text(hc, 404, "404 page not found\n"); /* Go's http.NotFound */
    }
    return (long)(head_len + (size_t)clen);
}

/* Answers buffered requests while none is in progress and the client reads its answers: a
 * client that pipelines requests and does not read gets no more than --max-send-buffer-bytes
 * queued for it (kv_grpc_http1_paused), then the next request waits until the output is
 * written (on_drained), as Go's net/http writes one answer before it reads the next request.
 * Without it, one connection sending "GET /metrics" in a loop filled memory with answers. */
static void process(hconn *hc)
{
    if (hc->in_process)
        return;
    hc->in_process = 1;
    while (hc->state == ST_IDLE && !hc->closing && !kv_grpc_http1_paused(hc->c)) {
        long used = take_request(hc);
        if (used < 0)
            break;
        if (used == 0) {
            kv_grpc_http1_waiting(hc->c, 1);
            break;
        }
        memmove(hc->in, hc->in + used, hc->in_len - (size_t)used);
        hc->in_len -= (size_t)used;
    }
    hc->in_process = 0;
    if (hc->in_cap > 65536 && hc->in_len == 0 && hc->state == ST_IDLE) {
        free(hc->in); /* idle connections keep no large buffer */
        hc->in = NULL;
        hc->in_cap = 0;
        kv_grpc_http1_hold(hc->c, 0);
    }
}

/* ---- transport hooks ---- */

static void *on_open(void *arg, kv_grpc_conn *c)
{
    hconn *hc = calloc(1, sizeof(*hc));
    if (!hc)
        return NULL;
    hc->h = arg;
    hc->c = c;
    kv_list_init(&hc->wait_link);
    hc->keep_alive = 1;
    hc->http_method = -1;
    return hc;
}

static int on_recv(void *st, const uint8_t *in, size_t len)
{
    hconn *hc = st;
    kv_client_http *h = hc->h;
    if (hc->closing)
        return 0; /* answering, then closing: ignore the rest */
    size_t limit = h->cfg.max_header_bytes + h->cfg.max_body_bytes;
    if (hc->in_len + len > limit) {
        /* pipelining past the bound while answers wait for the reader: the connection ends
         * (the transport has no read pause; Go's server would stop reading instead) */
        if (hc->state == ST_IDLE && kv_grpc_http1_paused(hc->c)) {
            kv_metric_inc(h->m_bad);
            return -ENOBUFS;
        }
        if (hc->state == ST_IDLE) { /* cannot be one valid request: say why */
            kv_metric_inc(h->m_bad);
            hc->keep_alive = 0;
            respond_text(hc, 413, "413 Request Entity Too Large\n");
            return 0;
        }
        return -ENOBUFS; /* pipelining past the bound while a request is answered */
    }
    if (hc->in_len + len + 1 > hc->in_cap) {
        size_t cap = hc->in_cap ? hc->in_cap : 4096;
        while (cap < hc->in_len + len + 1)
            cap *= 2;
        if (kv_grpc_http1_hold(hc->c, cap) != 0) { /* the process-wide buffer cap */
            if (hc->state != ST_IDLE)
                return -ENOBUFS;
            kv_metric_inc(h->m_bad);
            hc->keep_alive = 0;
            respond_text(hc, 503, "503 Service Unavailable: server buffers full\n");
            return 0;
        }
        char *p = realloc(hc->in, cap);
        if (!p)
            return -ENOMEM;
        hc->in = p;
        hc->in_cap = cap;
    }
    memcpy(hc->in + hc->in_len, in, len);
    hc->in_len += len;
    hc->in[hc->in_len] = '\0';
    process(hc);
    return 0;
}

/* Starts waiting gateway requests, in arrival order, while slots are free. */
static void on_wake(uv_timer_t *t)
{
    kv_client_http *h = t->data;
    kv_list *e;
    while ((e = kv_list_head(&h->waiting)) &&
           (!h->cfg.max_streams || h->active < h->cfg.max_streams)) {
        hconn *hc = kv_list_data(e, hconn, wait_link);
        wait_unlink(hc);
        hc->state = ST_IDLE;
        process(hc); /* parses the request again and starts its call */
    }
}

static void on_drained(void *st)
{
    hconn *hc = st;
    if (hc->state == ST_IDLE && !hc->closing && hc->in_len)
        process(hc);
}

static void on_close(void *st)
{
    hconn *hc = st;
    if (hc->hr) { /* the hook answers later into a detached request */
        health_unlink(hc->hr);
        hc->hr->hc = NULL;
    }
    if (hc->state == ST_WAITING)
        wait_unlink(hc);
    kv_pprof_http_cancel(hc->pr); /* a profile for nobody: discarded */
    hc->pr = NULL;
    kv_grpc_call *call = hc->call;
    hc->call = NULL;
    hc->state = ST_IDLE;
    kv_grpc_local_free(call); /* on_cancel if the handler still owns it */
    slot_release(hc);
    free(hc->resp);
    free(hc->in);
    free(hc);
}

static const kv_grpc_http1_ops http1_ops = {on_open, on_recv, on_drained, on_close};

int kv_client_http_new(kv_client_http **out, const kv_client_http_config *cfg, uv_loop_t *loop)
{
    kv_client_http *h = calloc(1, sizeof(*h));
    if (!h)
        return -ENOMEM;
    kv_list_init(&h->health_list);
    kv_list_init(&h->waiting);
    h->cfg = *cfg;
    if (!h->cfg.max_header_bytes)
        h->cfg.max_header_bytes = 8192;
    if (!h->cfg.max_body_bytes)
        h->cfg.max_body_bytes = KV_GRPC_DEFAULT_MAX_REQUEST_BYTES;
    if (!h->cfg.health_timeout_ms)
        h->cfg.health_timeout_ms = 5000;
    h->loop = loop;
    uv_timer_init(loop, &h->timer);
    h->timer.data = h;
    uv_timer_init(loop, &h->wake);
    h->wake.data = h;
    h->handles_open = 2;
    if (cfg->metrics) {
        h->m_requests = kv_metrics_counter(cfg->metrics, "kvd_client_http_requests_total",
                                           "HTTP/1.x requests on the client port.", NULL);
        h->m_bad = kv_metrics_counter(
            cfg->metrics, "kvd_client_http_rejected_total",
            "HTTP/1.x requests on the client port refused as malformed or over a bound.", NULL);
        double b[13];
        kv_metrics_exp_buckets(b, 0.0005, 2,
                               13); /* etcd v2http: ExponentialBuckets(0.0005, 2, 13) */
        for (size_t i = 0; i < N_HTTP_METHODS; i++) {
            char l[48];
            snprintf(l, sizeof(l), "method=\"%s\"", http_methods[i]);
            h->m_received[i] = kv_metrics_counter(
                cfg->metrics, "etcd_http_received_total",
                "Counter of requests received into the system (successfully parsed and authd).", l);
            h->m_success[i] = kv_metrics_histogram(
                cfg->metrics, "etcd_http_successful_duration_seconds",
                "Bucketed histogram of processing time (s) of successfully handled requests "
                "(non-watches), by method (GET/PUT etc.).",
                l, b, 13);
        }
        h->m_health_ok = kv_metrics_counter(cfg->metrics, "etcd_server_health_success",
                                            "The total number of successful health checks", NULL);
        h->m_health_fail = kv_metrics_counter(cfg->metrics, "etcd_server_health_failures",
                                              "The total number of failed health checks", NULL);
        h->m_waiting = kv_metrics_gauge(
            cfg->metrics, "kvd_client_http_gateway_waiting",
            "grpc-gateway requests waiting for a stream slot (--max-concurrent-streams gateway "
            "calls are in flight).",
            NULL);
        h->m_waited =
            kv_metrics_counter(cfg->metrics, "kvd_client_http_gateway_waited_total",
                               "grpc-gateway requests that had to wait for a stream slot.", NULL);
    }
    *out = h;
    return 0;
}

void kv_client_http_attach(kv_client_http *h, kv_grpc_server *s)
{
    kv_grpc_server_set_http1(s, &http1_ops, h);
}

static void timer_closed(uv_handle_t *t)
{
    kv_client_http *h = t->data;
    if (--h->handles_open == 0)
        free(h);
}

void kv_client_http_free(kv_client_http *h)
{
    if (!h)
        return;
    kv_list *e;
    while ((e = kv_list_head(&h->health_list))) {
        health_req *hr = kv_list_data(e, health_req, link);
        health_unlink(hr);
        hr->hc = NULL;
    }
    h->closing = 1;
    uv_close((uv_handle_t *)&h->timer, timer_closed);
    uv_close((uv_handle_t *)&h->wake, timer_closed);
}
