/* grpc_h2raw.c - HTTP/2 streams of the client port that are not gRPC (grpc_http1.h, "HTTP/2
 * streams that are not gRPC"): the request is handed to the HTTP/1 handler as one HTTP/1.1
 * request on a connection of its own (a pseudo connection that lives as long as the stream),
 * and the handler's HTTP/1.1 response is turned back into HTTP/2 HEADERS and DATA.
 *
 * Why a bridge and not a second handler: the handler (server/http/client_http.c) already holds
 * every rule of etcd's HTTP API (gateway routes, the shared stream limit, health, metrics, its
 * bounds and error bodies); running the same code for both framings keeps one answer per
 * request. Loop thread only. */
#include "grpc/grpc_internal.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define RAW_MAX_HEAD 16384 /* a response head longer than this is not the handler's */

/* Response parser states. */
enum { R_HEAD, R_BODY, R_UNTIL_END, R_CHUNK_SIZE, R_CHUNK_DATA, R_CHUNK_CRLF, R_LAST, R_DONE };

struct kv_grpc_raw {
    kv_grpc_conn *pc;  /* the handler's view of this stream (no socket, no session) */
    void *st;          /* the handler's per-connection state; NULL once released */
    kv_grpc_buf body;  /* request body until END_STREAM, at most `limit` bytes */
    size_t body_total; /* DATA bytes received (may pass the limit: the handler answers 413) */
    size_t limit;      /* the server's max_request_bytes */
    kv_grpc_buf head;  /* response head not yet complete */
    int rstate;
    uint64_t left; /* bytes left in the body or the current chunk */
    char line[20]; /* chunk-size line */
    size_t line_len;
};

size_t kv_grpc_raw_held(const kv_grpc_call *call)
{
    /* A reset or finished stream holds nothing any more: its body is freed with the call, but
     * counting it until then would keep the connection's and the server's totals up after a
     * shed, and the shedding loops would reset every other partial request too. */
    if (!call->raw || call->reset || call->finished)
        return 0;
    return kv_grpc_buf_size(&call->raw->body);
}

void kv_grpc_raw_set_method(kv_grpc_call *call, const uint8_t *v, size_t n)
{
    /* kept on the call until the stream turns out to be raw */
    size_t k = n < sizeof(call->raw_method) - 1 ? n : sizeof(call->raw_method) - 1;
    memcpy(call->raw_method, v, k);
    call->raw_method[k] = 0;
}

int kv_grpc_raw_start(kv_grpc_call *call)
{
    kv_grpc_conn *c = call->conn;
    kv_grpc_server *s = c->srv;
    kv_grpc_raw *r = calloc(1, sizeof(*r));
    kv_grpc_conn *pc = calloc(1, sizeof(*pc));
    if (!r || !pc)
        goto nomem;
    pc->srv = s;
    pc->id = c->id;
    kv_list_init(&pc->calls); /* empty: a pseudo connection is on no list and has no call */
    kv_list_init(&pc->zombies);
    kv_list_init(&pc->resume);
    kv_list_init(&pc->fifo_link);
    kv_list_init(&pc->link);
    kv_list_init(&pc->dirty_link);
    kv_list_init(&pc->hk_link);
    pc->raw_call = call;
    pc->detected = 1;
    r->pc = pc;
    r->limit = s->cfg.max_request_bytes; /* kvd: --max-request-bytes + 512 KiB, the handler's */
    r->st = s->http1_ops->open(s->http1_arg, pc);
    if (!r->st)
        goto nomem;
    pc->http1 = r->st;
    call->raw = r;
    call->counted = 1;       /* not a gRPC request: kept out of the gRPC series */
    call->trailers_sent = 1; /* the response ends with its last DATA frame, no trailers */
    return 0;
nomem:
    free(pc);
    free(r);
    return -ENOMEM;
}

void kv_grpc_raw_on_data(kv_grpc_call *call, const uint8_t *data, size_t len)
{
    kv_grpc_raw *r = call->raw;
    kv_grpc_conn *c = call->conn;
    if (call->finished || !r->st) {
        nghttp2_session_consume(c->h2, call->stream_id, len);
        return;
    }
    r->body_total += len;
    if (r->body_total > r->limit) { /* kept out: the handler answers 413 from the length */
        kv_grpc_buf_free(&r->body);
        nghttp2_session_consume(c->h2, call->stream_id, len);
        kv_grpc_call_account(call);
        return;
    }
    if (kv_grpc_buf_append(&r->body, data, len) != 0) {
        nghttp2_session_consume(c->h2, call->stream_id, len);
        kv_grpc_call_reset(call, NGHTTP2_INTERNAL_ERROR, NULL);
        return;
    }
    kv_grpc_call_account(call);
    /* Held until END_STREAM, as a gRPC message is held until it is whole: the stream's window
     * is returned at once (a body may be larger than it), the connection's only while the
     * connection's held input is under its budget (kv_grpc_conn_credit), and the held body
     * counts as a partial request that relief and the process-wide cap can shed. */
    nghttp2_session_consume_stream(c->h2, call->stream_id, len);
    kv_grpc_conn_credit(c, len);
}

/* Appends printf output to b. 0 or -ENOMEM. */
static int bprintf(kv_grpc_buf *b, const char *fmt, const char *a)
{
    char tmp[128];
    int n = snprintf(tmp, sizeof(tmp), fmt, a);
    if (n < (int)sizeof(tmp))
        return kv_grpc_buf_append(b, tmp, (size_t)n);
    char *big = malloc((size_t)n + 1);
    if (!big)
        return -ENOMEM;
    snprintf(big, (size_t)n + 1, fmt, a);
    int rc = kv_grpc_buf_append(b, big, (size_t)n);
    free(big);
    return rc;
}

/* 1 if s holds a byte that may not appear in an HTTP/1.1 request line (a control byte, a
 * space, DEL): it would end the line the handler parses and start another request. */
static int breaks_request_line(const char *s)
{
    for (; s && *s; s++)
        if ((unsigned char)*s <= ' ' || *s == 0x7f)
            return 1;
    return 0;
}

void kv_grpc_raw_on_remote_close(kv_grpc_call *call)
{
    kv_grpc_raw *r = call->raw;
    call->half_close_done = 1;
    if (call->finished || !r->st)
        return;
    kv_grpc_server *s = call->conn->srv;
    char num[32];
    kv_grpc_buf req = {0};
    const char *ct = call->content_type, *auth = call->meta[1];
    /* A :path over KV_GRPC_MAX_PATH was not kept: give the handler one just as long, so it
     * answers 431 as it does for HTTP/1. */
    char longpath[KV_GRPC_MAX_PATH + 2];
    const char *path = call->path;
    if (!path && call->path_too_long) {
        memset(longpath, 'x', sizeof(longpath) - 1);
        longpath[0] = '/';
        longpath[sizeof(longpath) - 1] = 0;
        path = longpath;
    }
    if (breaks_request_line(path) || breaks_request_line(call->raw_method)) {
        kv_grpc_call_reset(call, NGHTTP2_PROTOCOL_ERROR, NULL); /* as Go's http2 server */
        return;
    }
    snprintf(num, sizeof(num), "%zu", r->body_total);
    int rc = bprintf(&req, "%s ", call->raw_method[0] ? call->raw_method : "GET");
    rc = rc ? rc
            : bprintf(&req, "%s HTTP/1.1\r\nHost: h2\r\nConnection: close\r\n", path ? path : "/");
    rc = rc ? rc : bprintf(&req, "Content-Length: %s\r\n", num);
    if (ct && !strpbrk(ct, "\r\n"))
        rc = rc ? rc : bprintf(&req, "Content-Type: %s\r\n", ct);
    if (auth && !strpbrk(auth, "\r\n"))
        rc = rc ? rc : bprintf(&req, "Authorization: %s\r\n", auth);
    rc = rc ? rc : kv_grpc_buf_append(&req, "\r\n", 2);
    /* the head, then the body from where it is held (the handler buffers a partial request):
     * no copy of the body. A head the handler answers at once (413) makes it ignore the body. */
    if (rc == 0)
        rc = s->http1_ops->recv(r->st, req.p + req.off, kv_grpc_buf_size(&req));
    kv_grpc_buf_free(&req);
    if (rc == 0 && r->st && !call->reset && kv_grpc_buf_size(&r->body))
        rc = s->http1_ops->recv(r->st, r->body.p + r->body.off, kv_grpc_buf_size(&r->body));
    kv_grpc_buf_free(&r->body);
    kv_grpc_call_account(call);
    if (rc < 0)
        kv_grpc_call_reset(call, NGHTTP2_INTERNAL_ERROR, NULL);
}

void kv_grpc_raw_release(kv_grpc_call *call)
{
    kv_grpc_raw *r = call->raw;
    if (!r || !r->st)
        return;
    void *st = r->st;
    r->st = NULL;
    r->pc->closing = 1;
    r->pc->http1 = NULL;
    call->conn->srv->http1_ops->close(st);
}

void kv_grpc_raw_free(kv_grpc_call *call)
{
    kv_grpc_raw *r = call->raw;
    if (!r)
        return;
    kv_grpc_raw_release(call);
    kv_grpc_buf_free(&r->body);
    kv_grpc_buf_free(&r->head);
    free(r->pc);
    free(r);
    call->raw = NULL;
}

/* ---- the handler's output: HTTP/1.1 response -> HTTP/2 ---- */

/* The response is complete: END_STREAM once the queued body is read. */
static void raw_done(kv_grpc_call *call)
{
    kv_grpc_conn *c = call->conn;
    call->raw->rstate = R_DONE;
    if (call->finished)
        return;
    call->finished = 1;
    call->app_done = 1;
    if (!c->closing && !call->stream_closed) {
        nghttp2_session_resume_data(c->h2, call->stream_id);
        kv_grpc_srv_mark_dirty(c);
    }
}

static int queue_body(kv_grpc_call *call, const char *p, size_t n)
{
    kv_grpc_conn *c = call->conn;
    if (!n)
        return 0;
    size_t before = kv_grpc_buf_size(&call->outq);
    if (kv_grpc_buf_append(&call->outq, p, n) != 0)
        return -ENOMEM;
    c->out_app_bytes += n;
    kv_grpc_srv_watch(c);
    if (before == 0)
        call->out_progress = uv_now(c->srv->loop);
    kv_grpc_conn_sync(c);
    nghttp2_session_resume_data(c->h2, call->stream_id);
    kv_grpc_srv_mark_dirty(c);
    return 0;
}

static void lower(char *dst, const char *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = (char)tolower((unsigned char)src[i]);
}

/* Parses a complete head (NUL-terminated, ends with the empty line) and submits HEADERS.
 * Returns 0, 1 for an interim (1xx) response, or a negative error. */
static int submit_head(kv_grpc_call *call, char *head)
{
    kv_grpc_raw *r = call->raw;
    kv_grpc_conn *c = call->conn;
    if (strncmp(head, "HTTP/1.", 7) != 0 || strlen(head) < 12)
        return -EPROTO;
    char status[4] = {head[9], head[10], head[11], 0};
    if (!isdigit((unsigned char)status[0]) || !isdigit((unsigned char)status[1]) ||
        !isdigit((unsigned char)status[2]))
        return -EPROTO;
    if (status[0] == '1')
        return 1;
    enum { MAX_NV = 16 };
    nghttp2_nv nva[MAX_NV];
    char names[MAX_NV][48];
    size_t n = 0;
    nva[n++] = (nghttp2_nv){(uint8_t *)":status", (uint8_t *)status, 7, 3, NGHTTP2_NV_FLAG_NONE};
    long long clen = -1;
    int chunked = 0;
    for (char *p = strstr(head, "\r\n"); p && p[2] != '\r' && p[2]; p = strstr(p + 2, "\r\n")) {
        char *name = p + 2, *e = strstr(name, "\r\n"), *colon = strchr(name, ':');
        if (!e || !colon || colon > e)
            return -EPROTO;
        size_t nl = (size_t)(colon - name);
        char *v = colon + 1;
        while (*v == ' ')
            v++;
        size_t vl = (size_t)(e - v);
        if ((nl == 10 && strncasecmp(name, "connection", 10) == 0) ||
            (nl == 10 && strncasecmp(name, "keep-alive", 10) == 0))
            continue; /* connection-specific: not allowed in HTTP/2 */
        if (nl == 17 && strncasecmp(name, "transfer-encoding", 17) == 0) {
            chunked = 1;
            continue;
        }
        if (nl == 14 && strncasecmp(name, "content-length", 14) == 0) {
            clen = strtoll(v, NULL, 10);
            continue; /* HEAD answers carry the length without the body: leave it out */
        }
        if (n == MAX_NV || nl >= sizeof(names[0]))
            continue;
        lower(names[n], name, nl);
        nva[n] = (nghttp2_nv){(uint8_t *)names[n], (uint8_t *)v, nl, vl, NGHTTP2_NV_FLAG_NONE};
        n++;
    }
    nghttp2_data_provider prd;
    prd.source.ptr = call;
    prd.read_callback = kv_grpc_call_data_source_read;
    int rv = nghttp2_submit_response(c->h2, call->stream_id, nva, n, &prd);
    if (rv != 0)
        return rv == NGHTTP2_ERR_NOMEM ? -ENOMEM : -ECONNRESET;
    call->headers_sent = 1;
    kv_grpc_srv_mark_dirty(c);
    if (chunked) {
        r->rstate = R_CHUNK_SIZE;
    } else if (clen >= 0) {
        r->rstate = R_BODY;
        r->left = (uint64_t)clen;
        if (clen == 0)
            raw_done(call);
    } else {
        r->rstate = R_UNTIL_END;
    }
    return 0;
}

/* Takes one line (up to '\n') of a chunked body into r->line. Returns the bytes used. */
static size_t take_line(kv_grpc_raw *r, const char *p, size_t n, int *complete)
{
    size_t i = 0;
    *complete = 0;
    while (i < n) {
        char ch = p[i++];
        if (ch == '\n') {
            *complete = 1;
            break;
        }
        if (r->line_len < sizeof(r->line) - 1)
            r->line[r->line_len++] = ch;
    }
    r->line[r->line_len] = 0;
    return i;
}

/* Queues up to r->left bytes of the body as DATA. Returns the bytes taken, or -ENOMEM. */
static long take_left(kv_grpc_call *call, const char *p, size_t n)
{
    kv_grpc_raw *r = call->raw;
    size_t used = n < r->left ? n : (size_t)r->left;
    if (queue_body(call, p, used) != 0)
        return -ENOMEM;
    r->left -= used;
    return (long)used;
}

static int parse(kv_grpc_call *call, const char *p, size_t n)
{
    kv_grpc_raw *r = call->raw;
    while (n && r->rstate != R_DONE) {
        int complete = 0;
        size_t used = 0;
        switch (r->rstate) {
        case R_HEAD: {
            size_t before = kv_grpc_buf_size(&r->head);
            if (kv_grpc_buf_append(&r->head, p, n) != 0 || kv_grpc_buf_append(&r->head, "", 1))
                return -ENOMEM;
            r->head.len--; /* the NUL stays past the live bytes */
            char *h = (char *)r->head.p + r->head.off;
            char *end = strstr(h, "\r\n\r\n");
            if (!end)
                return kv_grpc_buf_size(&r->head) > RAW_MAX_HEAD ? -EPROTO : 0;
            size_t hl = (size_t)(end - h) + 4;
            end[2] = 0;
            int rc = submit_head(call, h);
            if (rc < 0)
                return rc;
            used = hl - before;
            kv_grpc_buf_free(&r->head);
            break;
        }
        case R_BODY:
        case R_CHUNK_DATA: {
            long k = take_left(call, p, n);
            if (k < 0)
                return (int)k;
            used = (size_t)k;
            if (!r->left && r->rstate == R_BODY)
                raw_done(call);
            else if (!r->left)
                r->rstate = R_CHUNK_CRLF;
            break;
        }
        case R_UNTIL_END:
            used = n;
            if (queue_body(call, p, used) != 0)
                return -ENOMEM;
            break;
        case R_CHUNK_SIZE:
            used = take_line(r, p, n, &complete);
            if (complete) {
                char *e = NULL;
                r->left = strtoull(r->line, &e, 16);
                if (e == r->line)
                    return -EPROTO;
                r->line_len = 0;
                r->rstate = r->left ? R_CHUNK_DATA : R_LAST;
            }
            break;
        case R_CHUNK_CRLF:
        case R_LAST:
            used = take_line(r, p, n, &complete);
            if (complete) {
                int last = r->rstate == R_LAST && r->line_len <= 1;
                r->line_len = 0;
                if (last)
                    raw_done(call);
                else if (r->rstate == R_CHUNK_CRLF)
                    r->rstate = R_CHUNK_SIZE;
            }
            break;
        }
        p += used;
        n -= used;
    }
    return 0;
}

int kv_grpc_raw_write(kv_grpc_call *call, const void *data, size_t len)
{
    kv_grpc_conn *c = call->conn;
    if (!call->raw || !call->raw->st || c->closing || call->stream_closed || call->reset)
        return -ECONNRESET;
    int rc = parse(call, data, len);
    if (rc < 0) {
        kv_grpc_call_reset(call, NGHTTP2_INTERNAL_ERROR, NULL);
        return rc == -ENOMEM ? -ENOMEM : -ECONNRESET;
    }
    return 0;
}

void kv_grpc_raw_end(kv_grpc_call *call)
{
    kv_grpc_raw *r = call->raw;
    if (!r || call->reset || call->finished)
        return;
    if (!call->headers_sent) { /* ended without a response: nothing to say */
        kv_grpc_call_reset(call, NGHTTP2_INTERNAL_ERROR, NULL);
        return;
    }
    raw_done(call);
}
