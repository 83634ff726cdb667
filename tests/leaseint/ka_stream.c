/* ka_stream: see ka_stream.h. */
#include "ka_stream.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <nghttp2/nghttp2.h>

#include "rpc.pb-c.h"

#define KVLI_IN_LIMIT (16u * 1024u * 1024u)

struct kvli_ka {
    int fd;
    nghttp2_session *sess;
    int32_t stream_id;
    uint8_t *out; /* framed requests not yet given to nghttp2 */
    size_t out_len, out_off, out_cap;
    uint8_t *in; /* response bytes (framed) not yet parsed */
    size_t in_len, in_cap;
    int grpc_status;
    int closed;
    int failed;
};

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static int on_header(nghttp2_session *s, const nghttp2_frame *frame, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags, void *ud)
{
    kvli_ka *ka = ud;
    (void)s;
    (void)flags;
    if (frame->hd.stream_id == ka->stream_id && namelen == 11 &&
        memcmp(name, "grpc-status", 11) == 0) {
        char tmp[16];
        size_t n = valuelen < sizeof(tmp) - 1 ? valuelen : sizeof(tmp) - 1;
        memcpy(tmp, value, n);
        tmp[n] = 0;
        ka->grpc_status = atoi(tmp);
    }
    return 0;
}

static int on_data(nghttp2_session *s, uint8_t flags, int32_t stream_id, const uint8_t *data,
                   size_t len, void *ud)
{
    kvli_ka *ka = ud;
    (void)s;
    (void)flags;
    if (stream_id != ka->stream_id)
        return 0;
    if (ka->in_len + len > KVLI_IN_LIMIT) {
        ka->failed = -EMSGSIZE;
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    }
    if (ka->in_len + len > ka->in_cap) {
        size_t cap = ka->in_cap ? ka->in_cap : 4096;
        while (cap < ka->in_len + len)
            cap *= 2;
        uint8_t *p = realloc(ka->in, cap);
        if (!p) {
            ka->failed = -ENOMEM;
            return NGHTTP2_ERR_CALLBACK_FAILURE;
        }
        ka->in = p;
        ka->in_cap = cap;
    }
    memcpy(ka->in + ka->in_len, data, len);
    ka->in_len += len;
    return 0;
}

static int on_close(nghttp2_session *s, int32_t stream_id, uint32_t error_code, void *ud)
{
    kvli_ka *ka = ud;
    (void)s;
    (void)error_code;
    if (stream_id == ka->stream_id)
        ka->closed = 1;
    return 0;
}

static ssize_t read_body(nghttp2_session *s, int32_t stream_id, uint8_t *buf, size_t length,
                         uint32_t *data_flags, nghttp2_data_source *src, void *ud)
{
    kvli_ka *ka = ud;
    (void)s;
    (void)stream_id;
    (void)src;
    (void)data_flags;
    size_t n = ka->out_len - ka->out_off;
    if (n == 0)
        return NGHTTP2_ERR_DEFERRED;
    if (n > length)
        n = length;
    memcpy(buf, ka->out + ka->out_off, n);
    ka->out_off += n;
    if (ka->out_off == ka->out_len)
        ka->out_off = ka->out_len = 0;
    return (ssize_t)n;
}

static int flush_out(kvli_ka *ka, uint64_t deadline)
{
    for (;;) {
        const uint8_t *data;
        ssize_t n = nghttp2_session_mem_send(ka->sess, &data);
        if (n < 0)
            return -EPROTO;
        if (n == 0)
            return 0;
        size_t off = 0;
        while (off < (size_t)n) {
            ssize_t w = send(ka->fd, data + off, (size_t)n - off, MSG_NOSIGNAL);
            if (w > 0) {
                off += (size_t)w;
                continue;
            }
            if (w < 0 && errno != EAGAIN && errno != EINTR)
                return -errno;
            uint64_t t = now_ms();
            if (t >= deadline)
                return -ETIMEDOUT;
            struct pollfd p = {.fd = ka->fd, .events = POLLOUT};
            poll(&p, 1, (int)(deadline - t));
        }
    }
}

static int read_in(kvli_ka *ka, uint64_t deadline)
{
    uint8_t buf[16384];
    for (;;) {
        ssize_t r = recv(ka->fd, buf, sizeof(buf), 0);
        if (r > 0) {
            if (nghttp2_session_mem_recv(ka->sess, buf, (size_t)r) < 0)
                return ka->failed ? ka->failed : -EPROTO;
            return 0;
        }
        if (r == 0)
            return -ECONNRESET;
        if (errno != EAGAIN && errno != EINTR)
            return -errno;
        uint64_t t = now_ms();
        if (t >= deadline)
            return -ETIMEDOUT;
        struct pollfd p = {.fd = ka->fd, .events = POLLIN};
        poll(&p, 1, (int)(deadline - t));
    }
}

int kvli_ka_open(kvli_ka **out, uint16_t port, uint32_t timeout_ms)
{
    int rc = -ENOMEM;
    nghttp2_session_callbacks *cbs = NULL;
    uint64_t deadline = now_ms() + timeout_ms;
    kvli_ka *ka = calloc(1, sizeof(*ka));
    if (!ka)
        return -ENOMEM;
    ka->fd = -1;
    ka->grpc_status = -1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ka->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (ka->fd < 0) {
        rc = -errno;
        goto fail;
    }
    int one = 1;
    setsockopt(ka->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(ka->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        if (errno != EINPROGRESS) {
            rc = -errno;
            goto fail;
        }
        struct pollfd p = {.fd = ka->fd, .events = POLLOUT};
        if (poll(&p, 1, (int)timeout_ms) <= 0) {
            rc = -ETIMEDOUT;
            goto fail;
        }
        int soerr = 0;
        socklen_t sl = sizeof(soerr);
        getsockopt(ka->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
        if (soerr) {
            rc = -soerr;
            goto fail;
        }
    }
    if (nghttp2_session_callbacks_new(&cbs))
        goto fail;
    nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_close);
    if (nghttp2_session_client_new(&ka->sess, cbs, ka))
        goto fail;
    nghttp2_session_callbacks_del(cbs);
    cbs = NULL;
    nghttp2_submit_settings(ka->sess, NGHTTP2_FLAG_NONE, NULL, 0);
    char authority[32];
    snprintf(authority, sizeof(authority), "127.0.0.1:%u", port);
#define NV(n, v) {(uint8_t *)(n), (uint8_t *)(v), strlen(n), strlen(v), NGHTTP2_NV_FLAG_NONE}
    nghttp2_nv hdrs[] = {
        NV(":method", "POST"),
        NV(":scheme", "http"),
        NV(":path", "/etcdserverpb.Lease/LeaseKeepAlive"),
        NV(":authority", authority),
        NV("content-type", "application/grpc"),
        NV("te", "trailers"),
    };
#undef NV
    nghttp2_data_provider dp = {.read_callback = read_body};
    ka->stream_id =
        nghttp2_submit_request(ka->sess, NULL, hdrs, sizeof(hdrs) / sizeof(hdrs[0]), &dp, NULL);
    if (ka->stream_id < 0) {
        rc = -EPROTO;
        goto fail;
    }
    if ((rc = flush_out(ka, deadline)))
        goto fail;
    *out = ka;
    return 0;
fail:
    if (cbs)
        nghttp2_session_callbacks_del(cbs);
    kvli_ka_close(ka);
    return rc;
}

void kvli_ka_close(kvli_ka *ka)
{
    if (!ka)
        return;
    if (ka->sess)
        nghttp2_session_del(ka->sess);
    if (ka->fd >= 0)
        close(ka->fd);
    free(ka->out);
    free(ka->in);
    free(ka);
}

int kvli_ka_grpc_status(const kvli_ka *ka)
{
    return ka->grpc_status;
}

int kvli_ka_send(kvli_ka *ka, int64_t id, uint32_t timeout_ms)
{
    if (ka->closed)
        return -ECONNRESET;
    Etcdserverpb__LeaseKeepAliveRequest r = ETCDSERVERPB__LEASE_KEEP_ALIVE_REQUEST__INIT;
    r.id = id;
    size_t len = etcdserverpb__lease_keep_alive_request__get_packed_size(&r);
    if (ka->out_len + 5 + len > ka->out_cap) {
        size_t cap = ka->out_cap ? ka->out_cap * 2 : 1024;
        while (cap < ka->out_len + 5 + len)
            cap *= 2;
        uint8_t *p = realloc(ka->out, cap);
        if (!p)
            return -ENOMEM;
        ka->out = p;
        ka->out_cap = cap;
    }
    uint8_t *f = ka->out + ka->out_len;
    f[0] = 0;
    f[1] = (uint8_t)(len >> 24);
    f[2] = (uint8_t)(len >> 16);
    f[3] = (uint8_t)(len >> 8);
    f[4] = (uint8_t)len;
    etcdserverpb__lease_keep_alive_request__pack(&r, f + 5);
    ka->out_len += 5 + len;
    nghttp2_session_resume_data(ka->sess, ka->stream_id);
    return flush_out(ka, now_ms() + timeout_ms);
}

int kvli_ka_recv(kvli_ka *ka, int64_t *id, int64_t *ttl, uint32_t timeout_ms)
{
    uint64_t deadline = now_ms() + timeout_ms;
    for (;;) {
        if (ka->in_len >= 5) {
            size_t mlen = ((size_t)ka->in[1] << 24) | ((size_t)ka->in[2] << 16) |
                          ((size_t)ka->in[3] << 8) | (size_t)ka->in[4];
            if (ka->in[0] != 0)
                return -EPROTO;
            if (ka->in_len >= 5 + mlen) {
                Etcdserverpb__LeaseKeepAliveResponse *r =
                    etcdserverpb__lease_keep_alive_response__unpack(NULL, mlen, ka->in + 5);
                memmove(ka->in, ka->in + 5 + mlen, ka->in_len - 5 - mlen);
                ka->in_len -= 5 + mlen;
                if (!r)
                    return -EPROTO;
                *id = r->id;
                *ttl = r->ttl;
                etcdserverpb__lease_keep_alive_response__free_unpacked(r, NULL);
                return 0;
            }
        }
        if (ka->closed || ka->failed)
            return ka->failed ? ka->failed : -ECONNRESET;
        int rc = flush_out(ka, deadline);
        if (rc)
            return rc;
        if ((rc = read_in(ka, deadline)))
            return rc;
        flush_out(ka, deadline); /* window updates, settings ack */
    }
}
