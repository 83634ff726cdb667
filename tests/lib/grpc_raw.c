/* grpc_raw: see grpc_raw.h. */
#include "grpc_raw.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <nghttp2/nghttp2.h>

#define RESP_LIMIT (64u * 1024u * 1024u)

struct kv_it_grpc {
    int fd;
    nghttp2_session *sess;
    char authority[64];
    /* per-call state */
    int32_t stream_id;
    uint8_t *body; /* framed request */
    size_t body_len, body_off;
    uint8_t *resp;
    size_t resp_len, resp_cap;
    int grpc_status;
    char grpc_message[256];
    int closed;
    int failed;
};

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static ssize_t on_send(nghttp2_session *s, const uint8_t *data, size_t len, int flags, void *ud)
{
    (void)s;
    (void)flags;
    (void)ud;
    (void)data;
    (void)len;
    return NGHTTP2_ERR_WOULDBLOCK; /* we use mem_send */
}

static int on_header(nghttp2_session *s, const nghttp2_frame *frame, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags, void *ud)
{
    kv_it_grpc *c = ud;
    (void)s;
    (void)flags;
    if (frame->hd.stream_id != c->stream_id)
        return 0;
    if (namelen == 11 && memcmp(name, "grpc-status", 11) == 0) {
        char tmp[16];
        size_t n = valuelen < sizeof(tmp) - 1 ? valuelen : sizeof(tmp) - 1;
        memcpy(tmp, value, n);
        tmp[n] = 0;
        c->grpc_status = atoi(tmp);
    } else if (namelen == 12 && memcmp(name, "grpc-message", 12) == 0) {
        /* percent-decode */
        size_t o = 0;
        for (size_t i = 0; i < valuelen && o + 1 < sizeof(c->grpc_message); i++) {
            if (value[i] == '%' && i + 2 < valuelen) {
                char hex[3] = {(char)value[i + 1], (char)value[i + 2], 0};
                c->grpc_message[o++] = (char)strtol(hex, NULL, 16);
                i += 2;
            } else {
                c->grpc_message[o++] = (char)value[i];
            }
        }
        c->grpc_message[o] = 0;
    }
    return 0;
}

static int on_data(nghttp2_session *s, uint8_t flags, int32_t stream_id, const uint8_t *data,
                   size_t len, void *ud)
{
    kv_it_grpc *c = ud;
    (void)s;
    (void)flags;
    if (stream_id != c->stream_id)
        return 0;
    if (c->resp_len + len > RESP_LIMIT) {
        c->failed = -EMSGSIZE;
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    }
    if (c->resp_len + len > c->resp_cap) {
        size_t cap = c->resp_cap ? c->resp_cap : 4096;
        while (cap < c->resp_len + len)
            cap *= 2;
        uint8_t *p = realloc(c->resp, cap);
        if (!p) {
            c->failed = -ENOMEM;
            return NGHTTP2_ERR_CALLBACK_FAILURE;
        }
        c->resp = p;
        c->resp_cap = cap;
    }
    memcpy(c->resp + c->resp_len, data, len);
    c->resp_len += len;
    return 0;
}

static int on_close(nghttp2_session *s, int32_t stream_id, uint32_t error_code, void *ud)
{
    kv_it_grpc *c = ud;
    (void)s;
    if (stream_id == c->stream_id) {
        c->closed = 1;
        if (error_code != NGHTTP2_NO_ERROR && c->grpc_status < 0)
            c->failed = -ECONNRESET;
    }
    return 0;
}

static ssize_t read_body(nghttp2_session *s, int32_t stream_id, uint8_t *buf, size_t length,
                         uint32_t *data_flags, nghttp2_data_source *src, void *ud)
{
    kv_it_grpc *c = ud;
    (void)s;
    (void)stream_id;
    (void)src;
    size_t n = c->body_len - c->body_off;
    if (n > length)
        n = length;
    memcpy(buf, c->body + c->body_off, n);
    c->body_off += n;
    if (c->body_off == c->body_len)
        *data_flags |= NGHTTP2_DATA_FLAG_EOF;
    return (ssize_t)n;
}

/* Writes everything nghttp2 wants to send, bounded by deadline. */
static int flush_out(kv_it_grpc *c, uint64_t deadline)
{
    for (;;) {
        const uint8_t *data;
        ssize_t n = nghttp2_session_mem_send(c->sess, &data);
        if (n < 0)
            return -EPROTO;
        if (n == 0)
            return 0;
        size_t off = 0;
        while (off < (size_t)n) {
            ssize_t w = send(c->fd, data + off, (size_t)n - off, MSG_NOSIGNAL);
            if (w > 0) {
                off += (size_t)w;
                continue;
            }
            if (w < 0 && errno != EAGAIN && errno != EINTR)
                return -errno;
            uint64_t t = now_ms();
            if (t >= deadline)
                return -ETIMEDOUT;
            struct pollfd p = {.fd = c->fd, .events = POLLOUT};
            poll(&p, 1, (int)(deadline - t));
        }
    }
}

/* Reads once (waiting up to deadline) and feeds nghttp2. */
static int read_in(kv_it_grpc *c, uint64_t deadline)
{
    uint8_t buf[65536];
    for (;;) {
        ssize_t r = recv(c->fd, buf, sizeof(buf), 0);
        if (r > 0) {
            ssize_t m = nghttp2_session_mem_recv(c->sess, buf, (size_t)r);
            if (m < 0)
                return c->failed ? c->failed : -EPROTO;
            return 0;
        }
        if (r == 0)
            return -ECONNRESET;
        if (errno != EAGAIN && errno != EINTR)
            return -errno;
        uint64_t t = now_ms();
        if (t >= deadline)
            return -ETIMEDOUT;
        struct pollfd p = {.fd = c->fd, .events = POLLIN};
        poll(&p, 1, (int)(deadline - t));
    }
}

int kv_it_grpc_open(kv_it_grpc **out, const char *host, uint16_t port, uint32_t timeout_ms)
{
    int rc = -ENOMEM;
    nghttp2_session_callbacks *cbs = NULL;
    kv_it_grpc *c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    c->fd = -1;
    snprintf(c->authority, sizeof(c->authority), "%s:%u", host, port);

    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
        rc = -EINVAL;
        goto fail;
    }
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0) {
        rc = -errno;
        goto fail;
    }
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        if (errno != EINPROGRESS) {
            rc = -errno;
            goto fail;
        }
        struct pollfd p = {.fd = c->fd, .events = POLLOUT};
        if (poll(&p, 1, (int)timeout_ms) <= 0) {
            rc = -ETIMEDOUT;
            goto fail;
        }
        int soerr = 0;
        socklen_t sl = sizeof(soerr);
        getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
        if (soerr) {
            rc = -soerr;
            goto fail;
        }
    }
    if (nghttp2_session_callbacks_new(&cbs))
        goto fail;
    nghttp2_session_callbacks_set_send_callback(cbs, on_send);
    nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_close);
    if (nghttp2_session_client_new(&c->sess, cbs, c))
        goto fail;
    nghttp2_session_callbacks_del(cbs);
    cbs = NULL;
    nghttp2_settings_entry iv[] = {{NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1 << 24}};
    nghttp2_submit_settings(c->sess, NGHTTP2_FLAG_NONE, iv, 1);
    nghttp2_session_set_local_window_size(c->sess, NGHTTP2_FLAG_NONE, 0, 1 << 26);
    rc = flush_out(c, now_ms() + timeout_ms);
    if (rc)
        goto fail;
    *out = c;
    return 0;
fail:
    if (cbs)
        nghttp2_session_callbacks_del(cbs);
    kv_it_grpc_close(c);
    return rc;
}

void kv_it_grpc_close(kv_it_grpc *c)
{
    if (!c)
        return;
    if (c->sess)
        nghttp2_session_del(c->sess);
    if (c->fd >= 0)
        close(c->fd);
    free(c->resp);
    free(c->body);
    free(c);
}

int kv_it_grpc_call(kv_it_grpc *c, const char *method, const uint8_t *req, size_t req_len,
                    uint8_t **resp, size_t *resp_len, uint32_t timeout_ms, int *status,
                    char *message, size_t message_cap)
{
    uint64_t deadline = now_ms() + timeout_ms;
    int rc;
    *resp = NULL;
    *resp_len = 0;
    *status = -1;
    if (message && message_cap)
        message[0] = 0;

    free(c->body);
    c->body = malloc(req_len + 5);
    if (!c->body)
        return -ENOMEM;
    c->body[0] = 0;
    c->body[1] = (uint8_t)(req_len >> 24);
    c->body[2] = (uint8_t)(req_len >> 16);
    c->body[3] = (uint8_t)(req_len >> 8);
    c->body[4] = (uint8_t)req_len;
    if (req_len)
        memcpy(c->body + 5, req, req_len);
    c->body_len = req_len + 5;
    c->body_off = 0;
    c->resp_len = 0;
    c->grpc_status = -1;
    c->grpc_message[0] = 0;
    c->closed = 0;
    c->failed = 0;

    char tmo[32];
    snprintf(tmo, sizeof(tmo), "%um", timeout_ms);
#define NV(n, v) {(uint8_t *)(n), (uint8_t *)(v), strlen(n), strlen(v), NGHTTP2_NV_FLAG_NONE}
    nghttp2_nv hdrs[] = {
        NV(":method", "POST"),
        NV(":scheme", "http"),
        NV(":path", method),
        NV(":authority", c->authority),
        NV("content-type", "application/grpc"),
        NV("te", "trailers"),
        NV("grpc-timeout", tmo),
    };
#undef NV
    nghttp2_data_provider dp = {.read_callback = read_body};
    c->stream_id =
        nghttp2_submit_request(c->sess, NULL, hdrs, sizeof(hdrs) / sizeof(hdrs[0]), &dp, NULL);
    if (c->stream_id < 0)
        return -EPROTO;
    while (!c->closed) {
        rc = flush_out(c, deadline);
        if (rc)
            return rc;
        if (c->closed)
            break;
        rc = read_in(c, deadline);
        if (rc)
            return rc;
    }
    flush_out(c, deadline); /* window updates etc; best effort */
    if (c->failed)
        return c->failed;
    *status = c->grpc_status;
    if (message && message_cap) {
        snprintf(message, message_cap, "%s", c->grpc_message);
    }
    if (c->grpc_status < 0)
        return -EPROTO;
    if (c->grpc_status != 0)
        return KV_IT_GRPC_STATUS;
    if (c->resp_len < 5)
        return -EPROTO;
    size_t mlen = ((size_t)c->resp[1] << 24) | ((size_t)c->resp[2] << 16) |
                  ((size_t)c->resp[3] << 8) | (size_t)c->resp[4];
    if (c->resp[0] != 0 || mlen + 5 > c->resp_len)
        return -EPROTO;
    uint8_t *m = malloc(mlen ? mlen : 1);
    if (!m)
        return -ENOMEM;
    memcpy(m, c->resp + 5, mlen);
    *resp = m;
    *resp_len = mlen;
    return 0;
}
