/* snap_stream: see snap_stream.h. */
#include "snap_stream.h"

#include "rpc.pb-c.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nghttp2/nghttp2.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

typedef struct dl {
    int sock, out;
    nghttp2_session *sess;
    int32_t stream_id;
    uint8_t body[5]; /* framed empty SnapshotRequest */
    size_t body_off;
    uint8_t hdr[5];
    size_t hdr_len;
    uint8_t *msg;
    size_t msg_len, msg_need;
    uint64_t bytes;
    int grpc_status, closed, failed;
    char grpc_message[256];
} dl;

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static int write_all(int fd, const uint8_t *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int deliver(dl *d)
{
    Etcdserverpb__SnapshotResponse *r =
        etcdserverpb__snapshot_response__unpack(NULL, d->msg_len, d->msg);
    if (r == NULL)
        return -EPROTO;
    int rc = write_all(d->out, r->blob.data, r->blob.len);
    d->bytes += r->blob.len;
    etcdserverpb__snapshot_response__free_unpacked(r, NULL);
    return rc;
}

static int on_data(nghttp2_session *s, uint8_t flags, int32_t sid, const uint8_t *data, size_t len,
                   void *ud)
{
    dl *d = ud;
    (void)s;
    (void)flags;
    if (sid != d->stream_id)
        return 0;
    while (len) {
        if (d->hdr_len < 5) {
            size_t n = 5 - d->hdr_len < len ? 5 - d->hdr_len : len;
            memcpy(d->hdr + d->hdr_len, data, n);
            d->hdr_len += n;
            data += n;
            len -= n;
            if (d->hdr_len < 5)
                break;
            d->msg_need = (size_t)d->hdr[1] << 24 | (size_t)d->hdr[2] << 16 |
                          (size_t)d->hdr[3] << 8 | d->hdr[4];
            if (d->hdr[0] != 0 || d->msg_need > KVCTL_SNAP_MAX_MSG) {
                d->failed = -EMSGSIZE;
                return NGHTTP2_ERR_CALLBACK_FAILURE;
            }
            uint8_t *m = realloc(d->msg, d->msg_need ? d->msg_need : 1);
            if (m == NULL) {
                d->failed = -ENOMEM;
                return NGHTTP2_ERR_CALLBACK_FAILURE;
            }
            d->msg = m;
            d->msg_len = 0;
        }
        size_t n = d->msg_need - d->msg_len < len ? d->msg_need - d->msg_len : len;
        memcpy(d->msg + d->msg_len, data, n);
        d->msg_len += n;
        data += n;
        len -= n;
        if (d->msg_len == d->msg_need) {
            int rc = deliver(d);
            if (rc < 0) {
                d->failed = rc;
                return NGHTTP2_ERR_CALLBACK_FAILURE;
            }
            d->hdr_len = 0;
        }
    }
    return 0;
}

static int on_header(nghttp2_session *s, const nghttp2_frame *frame, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags, void *ud)
{
    dl *d = ud;
    (void)s;
    (void)flags;
    if (frame->hd.stream_id != d->stream_id)
        return 0;
    if (namelen == 11 && memcmp(name, "grpc-status", 11) == 0) {
        char tmp[16];
        size_t n = valuelen < sizeof(tmp) - 1 ? valuelen : sizeof(tmp) - 1;
        memcpy(tmp, value, n);
        tmp[n] = 0;
        d->grpc_status = atoi(tmp);
    } else if (namelen == 12 && memcmp(name, "grpc-message", 12) == 0) {
        size_t o = 0;
        for (size_t i = 0; i < valuelen && o + 1 < sizeof(d->grpc_message); i++) {
            if (value[i] == '%' && i + 2 < valuelen) {
                char hex[3] = {(char)value[i + 1], (char)value[i + 2], 0};
                d->grpc_message[o++] = (char)strtol(hex, NULL, 16);
                i += 2;
            } else {
                d->grpc_message[o++] = (char)value[i];
            }
        }
        d->grpc_message[o] = 0;
    }
    return 0;
}

static int on_close(nghttp2_session *s, int32_t sid, uint32_t code, void *ud)
{
    dl *d = ud;
    (void)s;
    if (sid == d->stream_id) {
        d->closed = 1;
        if (code != NGHTTP2_NO_ERROR && d->grpc_status < 0)
            d->failed = -ECONNRESET;
    }
    return 0;
}

static ssize_t read_body(nghttp2_session *s, int32_t sid, uint8_t *buf, size_t length,
                         uint32_t *data_flags, nghttp2_data_source *src, void *ud)
{
    dl *d = ud;
    (void)s;
    (void)sid;
    (void)src;
    size_t n = 5 - d->body_off < length ? 5 - d->body_off : length;
    memcpy(buf, d->body + d->body_off, n);
    d->body_off += n;
    if (d->body_off == 5)
        *data_flags |= NGHTTP2_DATA_FLAG_EOF;
    return (ssize_t)n;
}

static int flush_out(dl *d, uint64_t deadline)
{
    for (;;) {
        const uint8_t *data;
        ssize_t n = nghttp2_session_mem_send(d->sess, &data);
        if (n < 0)
            return -EPROTO;
        if (n == 0)
            return 0;
        size_t off = 0;
        while (off < (size_t)n) {
            ssize_t w = send(d->sock, data + off, (size_t)n - off, MSG_NOSIGNAL);
            if (w > 0) {
                off += (size_t)w;
                continue;
            }
            if (w < 0 && errno != EAGAIN && errno != EINTR)
                return -errno;
            uint64_t t = now_ms();
            if (t >= deadline)
                return -ETIMEDOUT;
            struct pollfd p = {.fd = d->sock, .events = POLLOUT};
            poll(&p, 1, (int)(deadline - t));
        }
    }
}

static int read_in(dl *d, uint64_t deadline)
{
    uint8_t buf[65536];
    for (;;) {
        ssize_t r = recv(d->sock, buf, sizeof(buf), 0);
        if (r > 0) {
            if (nghttp2_session_mem_recv(d->sess, buf, (size_t)r) < 0)
                return d->failed ? d->failed : -EPROTO;
            return 0;
        }
        if (r == 0)
            return -ECONNRESET;
        if (errno != EAGAIN && errno != EINTR)
            return -errno;
        uint64_t t = now_ms();
        if (t >= deadline)
            return -ETIMEDOUT;
        struct pollfd p = {.fd = d->sock, .events = POLLIN};
        poll(&p, 1, (int)(deadline - t));
    }
}

static int dial(const char *endpoint, char *authority, size_t alen, uint64_t deadline)
{
    const char *p = endpoint;
    if (strncmp(p, "http://", 7) == 0)
        p += 7;
    char host[256];
    const char *colon = strrchr(p, ':');
    if (colon == NULL || (size_t)(colon - p) >= sizeof(host))
        return -EINVAL;
    memcpy(host, p, (size_t)(colon - p));
    host[colon - p] = 0;
    snprintf(authority, alen, "%s", p);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
    if (getaddrinfo(host, colon + 1, &hints, &ai) != 0 || ai == NULL)
        return -EHOSTUNREACH;
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int rc = fd < 0 ? -errno : 0;
    if (rc == 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
        rc = -errno;
        if (rc == -EINPROGRESS) {
            uint64_t t = now_ms();
            struct pollfd pf = {.fd = fd, .events = POLLOUT};
            int soerr = 0;
            socklen_t sl = sizeof(soerr);
            if (poll(&pf, 1, t < deadline ? (int)(deadline - t) : 0) <= 0)
                rc = -ETIMEDOUT;
            else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 && soerr)
                rc = -soerr;
            else
                rc = 0;
        }
    }
    freeaddrinfo(ai);
    if (rc < 0) {
        if (fd >= 0)
            close(fd);
        return rc;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
}

int kvctl_snapshot_download(const char *endpoint, int fd, uint32_t timeout_ms, uint64_t *bytes,
                            char *err, size_t errlen)
{
    uint64_t deadline = now_ms() + timeout_ms;
    dl d = {.sock = -1, .out = fd, .grpc_status = -1};
    nghttp2_session_callbacks *cbs = NULL;
    char authority[300];
    int rc = dial(endpoint, authority, sizeof authority, deadline);
    if (rc < 0) {
        snprintf(err, errlen, "dial %s: %s", endpoint, strerror(-rc));
        return -1;
    }
    d.sock = rc;
    rc = -ENOMEM;
    if (nghttp2_session_callbacks_new(&cbs))
        goto out;
    nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_close);
    if (nghttp2_session_client_new(&d.sess, cbs, &d))
        goto out;
    nghttp2_settings_entry iv[] = {{NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 4 << 20}};
    nghttp2_submit_settings(d.sess, NGHTTP2_FLAG_NONE, iv, 1);
    nghttp2_session_set_local_window_size(d.sess, NGHTTP2_FLAG_NONE, 0, 16 << 20);
    char tmo[32];
    snprintf(tmo, sizeof(tmo), "%um", timeout_ms);
#define NV(n, v) {(uint8_t *)(n), (uint8_t *)(v), strlen(n), strlen(v), NGHTTP2_NV_FLAG_NONE}
    nghttp2_nv hdrs[] = {
        NV(":method", "POST"),
        NV(":scheme", "http"),
        NV(":path", "/etcdserverpb.Maintenance/Snapshot"),
        NV(":authority", authority),
        NV("content-type", "application/grpc"),
        NV("te", "trailers"),
        NV("grpc-timeout", tmo),
    };
#undef NV
    nghttp2_data_provider dp = {.read_callback = read_body};
    d.stream_id =
        nghttp2_submit_request(d.sess, NULL, hdrs, sizeof(hdrs) / sizeof(hdrs[0]), &dp, NULL);
    rc = -EPROTO;
    if (d.stream_id < 0)
        goto out;
    while (!d.closed) {
        if ((rc = flush_out(&d, deadline)) != 0)
            goto out;
        if (d.closed)
            break;
        if ((rc = read_in(&d, deadline)) != 0)
            goto out;
    }
    rc = d.failed;
out:
    if (cbs)
        nghttp2_session_callbacks_del(cbs);
    if (d.sess)
        nghttp2_session_del(d.sess);
    close(d.sock);
    free(d.msg);
    *bytes = d.bytes;
    if (rc == -ETIMEDOUT) {
        snprintf(err, errlen, "context deadline exceeded");
        return -1;
    }
    if (rc < 0) {
        snprintf(err, errlen, "snapshot stream from %s: %s", endpoint, strerror(-rc));
        return -1;
    }
    if (d.grpc_status != 0) {
        static const char *const names[] = {"OK",
                                            "Canceled",
                                            "Unknown",
                                            "InvalidArgument",
                                            "DeadlineExceeded",
                                            "NotFound",
                                            "AlreadyExists",
                                            "PermissionDenied",
                                            "ResourceExhausted",
                                            "FailedPrecondition",
                                            "Aborted",
                                            "OutOfRange",
                                            "Unimplemented",
                                            "Internal",
                                            "Unavailable",
                                            "DataLoss",
                                            "Unauthenticated"};
        if (d.grpc_status > 0 && d.grpc_status <= 16)
            snprintf(err, errlen, "rpc error: code = %s desc = %s", names[d.grpc_status],
                     d.grpc_message);
        else
            snprintf(err, errlen, "rpc error: code = %d desc = %s", d.grpc_status, d.grpc_message);
        return -1;
    }
    return 0;
}
