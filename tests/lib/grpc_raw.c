/* grpc_raw: see grpc_raw.h. */
#include "grpc_raw.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <limits.h>
#include <openssl/ssl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

struct kv_it_grpc {
    int fd;   /* -1 for a no_socket connection */
    SSL *ssl; /* opts.ssl_ctx: TLS over fd */
    nghttp2_session *sess;
    char authority[64];
    uint8_t *pend; /* frames produced, not yet taken by the socket */
    size_t pend_len, pend_off, pend_cap;
    kv_it_grpc_stream *streams;
    int conn_closed;
    int goaway;
    int failed;               /* a callback's error (-EMSGSIZE, -ENOMEM) */
    uint64_t frames_recv[10]; /* frames received by type (DATA .. CONTINUATION) */
};

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static int grow(uint8_t **buf, size_t *cap, size_t need)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap : 4096;
    while (n < need)
        n *= 2;
    uint8_t *p = realloc(*buf, n);
    if (!p)
        return -ENOMEM;
    *buf = p;
    *cap = n;
    return 0;
}

static kv_it_grpc_stream *stream_of(nghttp2_session *s, int32_t id)
{
    return nghttp2_session_get_stream_user_data(s, id);
}

static void percent_decode(const uint8_t *v, size_t vl, char *out, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < vl && o + 1 < cap; i++) {
        if (v[i] == '%' && i + 2 < vl) {
            char hex[3] = {(char)v[i + 1], (char)v[i + 2], 0};
            out[o++] = (char)strtol(hex, NULL, 16);
            i += 2;
        } else {
            out[o++] = (char)v[i];
        }
    }
    out[o] = 0;
}

static int on_header(nghttp2_session *s, const nghttp2_frame *frame, const uint8_t *name, size_t nl,
                     const uint8_t *value, size_t vl, uint8_t flags, void *ud)
{
    (void)flags;
    (void)ud;
    kv_it_grpc_stream *st = stream_of(s, frame->hd.stream_id);
    if (!st)
        return 0;
    char tmp[16];
    size_t n = vl < sizeof(tmp) - 1 ? vl : sizeof(tmp) - 1;
    memcpy(tmp, value, n);
    tmp[n] = 0;
    if (nl == 7 && memcmp(name, ":status", 7) == 0)
        st->http_status = atoi(tmp);
    else if (nl == 11 && memcmp(name, "grpc-status", 11) == 0)
        st->grpc_status = atoi(tmp);
    else if (nl == 12 && memcmp(name, "grpc-message", 12) == 0)
        percent_decode(value, vl, st->grpc_message, sizeof(st->grpc_message));
    return 0;
}

static int on_data(nghttp2_session *s, uint8_t flags, int32_t id, const uint8_t *data, size_t len,
                   void *ud)
{
    kv_it_grpc *c = ud;
    (void)flags;
    kv_it_grpc_stream *st = stream_of(s, id);
    if (!st)
        return 0;
    st->received += len;
    if (st->discard)
        return 0;
    if (st->dlen + len > KV_IT_GRPC_STREAM_LIMIT) {
        c->failed = -EMSGSIZE;
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    }
    if (grow(&st->data, &st->dcap_, st->dlen + len)) {
        c->failed = -ENOMEM;
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    }
    memcpy(st->data + st->dlen, data, len);
    st->dlen += len;
    return 0;
}

static int on_close(nghttp2_session *s, int32_t id, uint32_t code, void *ud)
{
    (void)ud;
    kv_it_grpc_stream *st = stream_of(s, id);
    if (st) {
        st->closed = 1;
        st->close_code = code;
    }
    return 0;
}

static int on_frame(nghttp2_session *s, const nghttp2_frame *f, void *ud)
{
    kv_it_grpc *c = ud;
    (void)s;
    if (f->hd.type < sizeof(c->frames_recv) / sizeof(c->frames_recv[0]))
        c->frames_recv[f->hd.type]++;
    if (f->hd.type == NGHTTP2_GOAWAY)
        c->goaway = 1;
    return 0;
}

static ssize_t read_body(nghttp2_session *s, int32_t id, uint8_t *buf, size_t length,
                         uint32_t *data_flags, nghttp2_data_source *src, void *ud)
{
    (void)src;
    (void)ud;
    kv_it_grpc_stream *st = stream_of(s, id);
    if (!st) /* freed by the caller */
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    size_t n = 0;
    if (st->out_off_ < st->out_len_) {
        n = st->out_len_ - st->out_off_;
        n = n < length ? n : length;
        memcpy(buf, st->out_ + st->out_off_, n);
        st->out_off_ += n;
        if (st->out_off_ == st->out_len_)
            st->out_off_ = st->out_len_ = 0;
    } else if (st->ref_off_ < st->ref_len_) {
        n = st->ref_len_ - st->ref_off_;
        n = n < length ? n : length;
        memcpy(buf, st->ref_ + st->ref_off_, n);
        st->ref_off_ += n;
        if (st->ref_off_ == st->ref_len_) {
            st->ref_ = NULL;
            st->ref_off_ = st->ref_len_ = 0;
        }
    }
    if (st->out_len_ == 0 && st->ref_len_ == 0) {
        if (st->out_eof_)
            *data_flags |= NGHTTP2_DATA_FLAG_EOF;
        else if (n == 0)
            return NGHTTP2_ERR_DEFERRED;
    }
    return (ssize_t)n;
}

/* Moves every frame nghttp2 wants to send into c->pend. */
static int produce(kv_it_grpc *c)
{
    if (c->pend_off == c->pend_len)
        c->pend_off = c->pend_len = 0;
    for (;;) {
        const uint8_t *data;
        ssize_t n = nghttp2_session_mem_send(c->sess, &data);
        if (n < 0)
            return -EPROTO;
        if (n == 0)
            return 0;
        if (grow(&c->pend, &c->pend_cap, c->pend_len + (size_t)n))
            return -ENOMEM;
        memcpy(c->pend + c->pend_len, data, (size_t)n);
        c->pend_len += (size_t)n;
    }
}

static int conn_error(kv_it_grpc *c, int rc)
{
    c->conn_closed = 1;
    return c->failed ? c->failed : rc;
}

/* TLS: SSL_write / SSL_read's result as send / recv's (-1 with errno, 0 at the end). */
static ssize_t tls_io(kv_it_grpc *c, int rc)
{
    if (rc > 0)
        return rc;
    int e = SSL_get_error(c->ssl, rc);
    if (e == SSL_ERROR_ZERO_RETURN)
        return 0;
    errno = e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE ? EAGAIN : EPROTO;
    return -1;
}

/* Writes pending bytes without blocking: 0 (maybe some left) or an error. */
static int write_some(kv_it_grpc *c)
{
    if (c->conn_closed)
        return conn_error(c, -ECONNRESET);
    if (c->fd < 0)
        return 0;
    while (c->ssl && c->pend_off < c->pend_len) {
        size_t n = c->pend_len - c->pend_off;
        ssize_t w =
            tls_io(c, SSL_write(c->ssl, c->pend + c->pend_off, n > INT_MAX ? INT_MAX : (int)n));
        if (w < 0)
            return errno == EAGAIN ? 0 : conn_error(c, -errno);
        c->pend_off += (size_t)w;
    }
    while (c->pend_off < c->pend_len) {
        ssize_t w = send(c->fd, c->pend + c->pend_off, c->pend_len - c->pend_off,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return 0;
            return conn_error(c, -errno);
        }
        c->pend_off += (size_t)w;
    }
    return 0;
}

/* Reads what the socket has (at most max_reads recv calls) and feeds nghttp2. */
static int read_some(kv_it_grpc *c, int max_reads)
{
    uint8_t buf[65536];
    for (int i = 0; i < max_reads; i++) {
        ssize_t r = c->ssl ? tls_io(c, SSL_read(c->ssl, buf, (int)sizeof(buf)))
                           : recv(c->fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (r == 0)
            return conn_error(c, -ECONNRESET);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return 0;
            return conn_error(c, -errno);
        }
        if (nghttp2_session_mem_recv(c->sess, buf, (size_t)r) < 0)
            return conn_error(c, -EPROTO);
    }
    return 0;
}

int kv_it_grpc_io(kv_it_grpc *c, int readable)
{
    int rc;
    if (c->conn_closed)
        return conn_error(c, -ECONNRESET);
    if (readable && (rc = read_some(c, 64)))
        return rc;
    if ((rc = produce(c)))
        return conn_error(c, rc);
    return write_some(c);
}

int kv_it_grpc_want_write(kv_it_grpc *c)
{
    return c->pend_off < c->pend_len || nghttp2_session_want_write(c->sess);
}

int kv_it_grpc_fd(const kv_it_grpc *c)
{
    return c->fd;
}

int kv_it_grpc_flush(kv_it_grpc *c, uint32_t timeout_ms)
{
    uint64_t deadline = now_ms() + timeout_ms;
    int rc;
    if ((rc = produce(c)))
        return conn_error(c, rc);
    if (c->fd < 0)
        return c->conn_closed ? -ECONNRESET : 0;
    for (;;) {
        if ((rc = write_some(c)))
            return rc;
        if (c->pend_off == c->pend_len)
            return 0;
        uint64_t t = now_ms();
        if (t >= deadline)
            return -ETIMEDOUT;
        struct pollfd p = {.fd = c->fd, .events = POLLOUT};
        poll(&p, 1, (int)(deadline - t));
    }
}

int kv_it_grpc_pump(kv_it_grpc *c, uint32_t wait_ms)
{
    uint64_t deadline = now_ms() + wait_ms;
    int rc;
    if (c->fd < 0)
        return -ENOTCONN;
    for (;;) {
        if ((rc = kv_it_grpc_io(c, 0)))
            return rc;
        struct pollfd p = {.fd = c->fd, .events = POLLIN};
        if (c->pend_off < c->pend_len)
            p.events |= POLLOUT;
        uint64_t t = now_ms();
        int left = t >= deadline ? 0 : (int)(deadline - t);
        int n = poll(&p, 1, left);
        if (n > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR))) {
            if ((rc = read_some(c, 1)))
                return rc;
            return kv_it_grpc_io(c, 0); /* window updates, SETTINGS ack */
        }
        if (n <= 0 && now_ms() >= deadline)
            return 0;
    }
}

int kv_it_grpc_wait(kv_it_grpc *c, kv_it_grpc_stream *st, uint32_t timeout_ms)
{
    uint64_t deadline = now_ms() + timeout_ms;
    for (;;) {
        if (st && st->closed)
            return 1;
        if (c->conn_closed)
            return st ? st->closed : 1;
        uint64_t t = now_ms();
        if (t >= deadline)
            return 0;
        uint64_t left = deadline - t;
        kv_it_grpc_pump(c, left < 20 ? (uint32_t)left : 20);
    }
}

int kv_it_grpc_wait_bytes(kv_it_grpc *c, kv_it_grpc_stream *st, size_t n, uint32_t timeout_ms)
{
    uint64_t deadline = now_ms() + timeout_ms;
    while (st->received < n && !st->closed && !c->conn_closed && now_ms() < deadline)
        kv_it_grpc_pump(c, 20);
    return st->received >= n;
}

int kv_it_grpc_conn_closed(const kv_it_grpc *c)
{
    return c->conn_closed;
}

int kv_it_grpc_goaway(const kv_it_grpc *c)
{
    return c->goaway;
}

nghttp2_session *kv_it_grpc_session(kv_it_grpc *c)
{
    return c->sess;
}

uint64_t kv_it_grpc_frames_received(const kv_it_grpc *c, uint8_t type)
{
    return type < sizeof(c->frames_recv) / sizeof(c->frames_recv[0]) ? c->frames_recv[type] : 0;
}

int kv_it_grpc_input(kv_it_grpc *c, const uint8_t *data, size_t len)
{
    if (c->conn_closed)
        return conn_error(c, -ECONNRESET);
    if (nghttp2_session_mem_recv(c->sess, data, len) < 0)
        return conn_error(c, -EPROTO);
    return 0;
}

size_t kv_it_grpc_output(kv_it_grpc *c, uint8_t *out, size_t cap)
{
    if (produce(c))
        return 0;
    size_t n = c->pend_len - c->pend_off;
    if (n > cap)
        n = cap;
    memcpy(out, c->pend + c->pend_off, n);
    c->pend_off += n;
    return n;
}

static int connect_to(kv_it_grpc *c, const char *host, uint16_t port, uint32_t timeout_ms,
                      int rcvbuf)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
        return -EINVAL;
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0)
        return -errno;
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (rcvbuf > 0)
        setsockopt(c->fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    if (connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
        return 0;
    if (errno != EINPROGRESS)
        return -errno;
    struct pollfd p = {.fd = c->fd, .events = POLLOUT};
    if (poll(&p, 1, (int)timeout_ms) <= 0)
        return -ETIMEDOUT;
    int soerr = 0;
    socklen_t sl = sizeof(soerr);
    getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
    return soerr ? -soerr : 0;
}

/* The TLS handshake over the connected socket, bounded by timeout_ms. */
static int tls_handshake(kv_it_grpc *c, SSL_CTX *ctx, uint32_t timeout_ms)
{
    /* OpenSSL writes with write(2), not send(MSG_NOSIGNAL): a peer that closed must not kill
     * the test with SIGPIPE */
    struct sigaction old;
    if (sigaction(SIGPIPE, NULL, &old) == 0 && old.sa_handler == SIG_DFL)
        signal(SIGPIPE, SIG_IGN);
    c->ssl = SSL_new(ctx);
    if (!c->ssl || !SSL_set_fd(c->ssl, c->fd))
        return -ENOMEM;
    SSL_set_mode(c->ssl, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    SSL_set_connect_state(c->ssl);
    uint64_t end = now_ms() + timeout_ms;
    for (;;) {
        int rc = SSL_do_handshake(c->ssl);
        if (rc == 1)
            return 0;
        int e = SSL_get_error(c->ssl, rc);
        if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE)
            return -EPROTO;
        uint64_t now = now_ms();
        if (now >= end)
            return -ETIMEDOUT;
        struct pollfd p = {.fd = c->fd, .events = e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT};
        poll(&p, 1, (int)(end - now));
    }
}

int kv_it_grpc_open_opts(kv_it_grpc **out, const char *host, uint16_t port, uint32_t timeout_ms,
                         const kv_it_grpc_opts *opts)
{
    static const kv_it_grpc_opts zero;
    int rc = -ENOMEM;
    nghttp2_session_callbacks *cbs = NULL;
    if (!opts)
        opts = &zero;
    kv_it_grpc *c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    c->fd = -1;
    snprintf(c->authority, sizeof(c->authority), "%s:%u", host ? host : "localhost", port);
    if (!opts->no_socket && (rc = connect_to(c, host, port, timeout_ms, opts->rcvbuf)))
        goto fail;
    if (!opts->no_socket && opts->ssl_ctx && (rc = tls_handshake(c, opts->ssl_ctx, timeout_ms)))
        goto fail;
    rc = -ENOMEM;
    if (nghttp2_session_callbacks_new(&cbs))
        goto fail;
    nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_close);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame);
    if (nghttp2_session_client_new(&c->sess, cbs, c))
        goto fail;
    nghttp2_settings_entry iv[2];
    size_t niv = 0;
    if (opts->max_concurrent)
        iv[niv++] =
            (nghttp2_settings_entry){NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, opts->max_concurrent};
    if (opts->set_window)
        iv[niv++] = (nghttp2_settings_entry){NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, opts->window};
    rc = -EPROTO;
    if (nghttp2_submit_settings(c->sess, NGHTTP2_FLAG_NONE, niv ? iv : NULL, niv))
        goto fail;
    if (opts->conn_window && nghttp2_session_set_local_window_size(c->sess, NGHTTP2_FLAG_NONE, 0,
                                                                   (int32_t)opts->conn_window))
        goto fail;
    if ((rc = kv_it_grpc_flush(c, timeout_ms)))
        goto fail;
    nghttp2_session_callbacks_del(cbs);
    *out = c;
    return 0;
fail:
    if (cbs)
        nghttp2_session_callbacks_del(cbs);
    kv_it_grpc_close(c);
    return rc;
}

int kv_it_grpc_open(kv_it_grpc **out, const char *host, uint16_t port, uint32_t timeout_ms)
{
    kv_it_grpc_opts o = {.set_window = 1, .window = 1u << 24, .conn_window = 1u << 26};
    return kv_it_grpc_open_opts(out, host, port, timeout_ms, &o);
}

static void stream_release(kv_it_grpc_stream *st)
{
    free(st->out_);
    free(st->data);
    free(st);
}

void kv_it_grpc_close(kv_it_grpc *c)
{
    if (!c)
        return;
    if (c->sess)
        nghttp2_session_del(c->sess);
    SSL_free(c->ssl);
    if (c->fd >= 0)
        close(c->fd);
    for (kv_it_grpc_stream *st = c->streams, *n; st; st = n) {
        n = st->next_;
        stream_release(st);
    }
    free(c->pend);
    free(c);
}

kv_it_grpc_stream *kv_it_grpc_stream_start(kv_it_grpc *c, const char *path,
                                           const kv_it_grpc_req *req)
{
    static const kv_it_grpc_req none;
    if (!req)
        req = &none;
    size_t nmd = 0;
    while (req->metadata && req->metadata[nmd] && req->metadata[nmd + 1])
        nmd += 2;
    kv_it_grpc_stream *st = calloc(1, sizeof(*st));
    nghttp2_nv *nva = calloc(7 + nmd / 2, sizeof(*nva));
    if (!st || !nva) {
        free(st);
        free(nva);
        return NULL;
    }
    st->grpc_status = -1;
    st->conn_ = c;
#define NV(n, v) (nghttp2_nv){(uint8_t *)(n), (uint8_t *)(v), strlen(n), strlen(v), 0}
    size_t nv = 0;
    nva[nv++] = NV(":method", req->method ? req->method : "POST");
    nva[nv++] = NV(":scheme", "http");
    nva[nv++] = NV(":path", path);
    nva[nv++] = NV(":authority", req->authority ? req->authority : c->authority);
    nva[nv++] = NV("content-type", req->content_type ? req->content_type : "application/grpc");
    nva[nv++] = NV("te", "trailers");
    if (req->timeout)
        nva[nv++] = NV("grpc-timeout", req->timeout);
    for (size_t i = 0; i < nmd; i += 2)
        nva[nv++] = NV(req->metadata[i], req->metadata[i + 1]);
#undef NV
    nghttp2_data_provider dp = {.source.ptr = NULL, .read_callback = read_body};
    st->id = nghttp2_submit_request(c->sess, NULL, nva, nv, &dp, st);
    free(nva);
    if (st->id < 0) {
        free(st);
        return NULL;
    }
    st->next_ = c->streams;
    c->streams = st;
    return st;
}

int kv_it_grpc_send_raw(kv_it_grpc_stream *st, const void *data, size_t n, int eof)
{
    if (st->closed || st->out_eof_)
        return -EPIPE;
    if (st->ref_len_)
        return -EBUSY;
    if (n) {
        if (grow(&st->out_, &st->out_cap_, st->out_len_ + n))
            return -ENOMEM;
        memcpy(st->out_ + st->out_len_, data, n);
        st->out_len_ += n;
    }
    if (eof)
        st->out_eof_ = 1;
    nghttp2_session_resume_data(st->conn_->sess, st->id);
    return 0;
}

int kv_it_grpc_send_ref(kv_it_grpc_stream *st, const void *data, size_t n, int eof)
{
    if (st->closed || st->out_eof_)
        return -EPIPE;
    if (st->ref_len_ || st->out_len_)
        return -EBUSY;
    st->ref_ = data;
    st->ref_len_ = n;
    st->ref_off_ = 0;
    if (eof)
        st->out_eof_ = 1;
    nghttp2_session_resume_data(st->conn_->sess, st->id);
    return 0;
}

int kv_it_grpc_send_msg(kv_it_grpc_stream *st, const void *msg, size_t n, int eof)
{
    uint8_t hdr[5] = {0, (uint8_t)(n >> 24), (uint8_t)(n >> 16), (uint8_t)(n >> 8), (uint8_t)n};
    int rc = kv_it_grpc_send_raw(st, hdr, 5, 0);
    return rc ? rc : kv_it_grpc_send_raw(st, msg, n, eof);
}

void kv_it_grpc_stream_cancel(kv_it_grpc_stream *st)
{
    if (!st->closed)
        nghttp2_submit_rst_stream(st->conn_->sess, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_CANCEL);
}

void kv_it_grpc_stream_free(kv_it_grpc_stream *st)
{
    if (!st)
        return;
    kv_it_grpc *c = st->conn_;
    kv_it_grpc_stream_cancel(st);
    nghttp2_session_set_stream_user_data(c->sess, st->id, NULL);
    for (kv_it_grpc_stream **pp = &c->streams; *pp; pp = &(*pp)->next_) {
        if (*pp == st) {
            *pp = st->next_;
            break;
        }
    }
    stream_release(st);
}

static size_t frame_len(const uint8_t *p)
{
    return ((size_t)p[1] << 24) | ((size_t)p[2] << 16) | ((size_t)p[3] << 8) | (size_t)p[4];
}

int kv_it_grpc_stream_take(kv_it_grpc_stream *st,
                           void (*fn)(void *arg, const uint8_t *msg, size_t len), void *arg)
{
    size_t off = 0;
    int n = 0, rc = 0;
    while (off + 5 <= st->dlen) {
        const uint8_t *p = st->data + off;
        size_t l = frame_len(p);
        if (p[0] != 0) {
            rc = -EPROTO;
            break;
        }
        if (off + 5 + l > st->dlen)
            break;
        off += 5 + l;
        fn(arg, p + 5, l);
        n++;
    }
    if (off) {
        memmove(st->data, st->data + off, st->dlen - off);
        st->dlen -= off;
    }
    return rc ? rc : n;
}

size_t kv_it_grpc_stream_msgs(const kv_it_grpc_stream *st, size_t idx, const uint8_t **msg,
                              size_t *len)
{
    size_t off = 0, count = 0;
    while (off + 5 <= st->dlen) {
        size_t l = frame_len(st->data + off);
        if (off + 5 + l > st->dlen)
            break;
        if (count == idx && msg) {
            *msg = st->data + off + 5;
            *len = l;
        }
        count++;
        off += 5 + l;
    }
    return count;
}

int kv_it_grpc_stream_next(kv_it_grpc_stream *st, uint8_t **msg, size_t *len)
{
    if (st->dlen < 5)
        return 0;
    if (st->data[0] != 0)
        return -EPROTO;
    size_t l = frame_len(st->data);
    if (st->dlen < 5 + l)
        return 0;
    uint8_t *m = malloc(l ? l : 1);
    if (!m)
        return -ENOMEM;
    memcpy(m, st->data + 5, l);
    memmove(st->data, st->data + 5 + l, st->dlen - 5 - l);
    st->dlen -= 5 + l;
    *msg = m;
    *len = l;
    return 1;
}

int kv_it_grpc_stream_recv(kv_it_grpc_stream *st, uint8_t **msg, size_t *len, uint32_t timeout_ms)
{
    uint64_t deadline = now_ms() + timeout_ms;
    kv_it_grpc *c = st->conn_;
    for (;;) {
        int rc = kv_it_grpc_stream_next(st, msg, len);
        if (rc)
            return rc < 0 ? rc : 0;
        if (st->closed)
            return -ECONNRESET;
        if (c->conn_closed)
            return conn_error(c, -ECONNRESET);
        uint64_t t = now_ms();
        if (t >= deadline)
            return -ETIMEDOUT;
        if ((rc = kv_it_grpc_pump(c, (uint32_t)(deadline - t))))
            return rc;
    }
}

int kv_it_grpc_call(kv_it_grpc *c, const char *method, const uint8_t *req, size_t req_len,
                    uint8_t **resp, size_t *resp_len, uint32_t timeout_ms, int *status,
                    char *message, size_t message_cap)
{
    uint64_t deadline = now_ms() + timeout_ms;
    int rc = 0;
    *resp = NULL;
    *resp_len = 0;
    *status = -1;
    if (message && message_cap)
        message[0] = 0;
    if (c->conn_closed)
        return conn_error(c, -ECONNRESET);
    char tmo[32];
    snprintf(tmo, sizeof(tmo), "%um", timeout_ms);
    kv_it_grpc_req rq = {.timeout = tmo};
    kv_it_grpc_stream *st = kv_it_grpc_stream_start(c, method, &rq);
    if (!st)
        return -EPROTO;
    if ((rc = kv_it_grpc_send_msg(st, req, req_len, 1)))
        goto out;
    while (!st->closed) {
        uint64_t t = now_ms();
        if (t >= deadline) {
            rc = -ETIMEDOUT;
            goto out;
        }
        if ((rc = kv_it_grpc_pump(c, (uint32_t)(deadline - t))))
            goto out;
    }
    kv_it_grpc_io(c, 0); /* window updates etc; best effort */
    if (c->failed) {
        rc = c->failed;
        goto out;
    }
    if (st->grpc_status < 0) {
        rc = st->close_code != NGHTTP2_NO_ERROR ? -ECONNRESET : -EPROTO;
        goto out;
    }
    *status = st->grpc_status;
    if (message && message_cap)
        snprintf(message, message_cap, "%s", st->grpc_message);
    if (st->grpc_status != 0) {
        rc = KV_IT_GRPC_STATUS;
        goto out;
    }
    uint8_t *m = NULL;
    size_t mlen = 0;
    rc = kv_it_grpc_stream_next(st, &m, &mlen);
    if (rc <= 0) {
        rc = rc < 0 ? rc : -EPROTO;
        goto out;
    }
    *resp = m;
    *resp_len = mlen;
    rc = 0;
out:
    kv_it_grpc_stream_free(st);
    return rc;
}
