/* peer_snap.c - snapshot files: reading one into an HTTP/2 body in chunks (sender) and writing
 * a body into snap_dir, fsync, rename, hand-over (receiver). Blocking file I/O in chunks of at
 * most one HTTP/2 DATA frame on the loop thread. */
#include "peer/peer_internal.h"
#include "common/byteorder.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int kv_peer_snap_out_open(kv_peer *p, const uint8_t *hdr, size_t hdr_len, const char *path,
                          void (*done)(void *, int), void *arg, peer_snap_out **out)
{
    (void)p;
    peer_snap_out *so = calloc(1, sizeof(*so));
    if (!so)
        return -ENOMEM;
    so->prefix = malloc(4 + hdr_len);
    if (!so->prefix) {
        free(so);
        return -ENOMEM;
    }
    so->fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (so->fd < 0 || fstat(so->fd, &st) != 0) {
        int rc = -errno;
        if (so->fd >= 0)
            close(so->fd);
        free(so->prefix);
        free(so);
        return rc;
    }
    kv_put_be32(so->prefix, (uint32_t)hdr_len);
    if (hdr_len)
        memcpy(so->prefix + 4, hdr, hdr_len);
    so->prefix_len = 4 + hdr_len;
    so->file_size = (uint64_t)st.st_size;
    so->peer = p;
    so->done = done;
    so->arg = arg;
    *out = so;
    return 0;
}

void kv_peer_snap_out_free(peer_snap_out *so)
{
    if (!so)
        return;
    if (so->fd >= 0)
        close(so->fd);
    free(so->prefix);
    free(so);
}

void kv_peer_snap_out_finish(kv_peer *p, int status)
{
    peer_snap_out *so = p->sout;
    if (!so)
        return;
    p->sout = NULL;
    if (p->conn) {
        kv_list *e;
        kv_list_foreach(e, &p->conn->streams) {
            peer_stream *s = kv_list_data(e, peer_stream, link);
            if (s->sout != so)
                continue;
            s->sout = NULL;
            if (status != 0 && !p->conn->closing && p->conn->h2 && s->id > 0) {
                nghttp2_submit_rst_stream(p->conn->h2, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_CANCEL);
                kv_peer_conn_mark_dirty(p->conn);
            }
        }
    }
    if (status == 0)
        kv_metric_inc(p->m_snap_sent);
    else
        kv_peer_log(p->net, "sending snapshot %llu to peer %llx failed: %s",
                    (unsigned long long)so->id, (unsigned long long)p->id, strerror(-status));
    void (*done)(void *, int) = so->done;
    void *arg = so->arg;
    kv_peer_snap_out_free(so);
    done(arg, status);
}

static ssize_t snap_read_cb(nghttp2_session *h2, int32_t stream_id, uint8_t *buf, size_t length,
                            uint32_t *data_flags, nghttp2_data_source *src, void *ud)
{
    (void)h2;
    (void)stream_id;
    (void)ud;
    peer_stream *s = src->ptr;
    peer_snap_out *so = s->sout;
    if (!so)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    size_t n = 0;
    if (so->prefix_off < so->prefix_len) {
        n = so->prefix_len - so->prefix_off < length ? so->prefix_len - so->prefix_off : length;
        memcpy(buf, so->prefix + so->prefix_off, n);
        so->prefix_off += n;
    }
    while (n < length && so->file_off < so->file_size) {
        size_t want = length - n;
        if (want > so->file_size - so->file_off)
            want = (size_t)(so->file_size - so->file_off);
        ssize_t r = pread(so->fd, buf + n, want, (off_t)so->file_off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            kv_peer_log(so->peer->net, "reading snapshot for peer %llx: %s",
                        (unsigned long long)so->peer->id, r < 0 ? strerror(errno) : "file shrank");
            return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
        }
        n += (size_t)r;
        so->file_off += (uint64_t)r;
    }
    if (so->prefix_off == so->prefix_len && so->file_off == so->file_size)
        *data_flags |= NGHTTP2_DATA_FLAG_EOF;
    return (ssize_t)n;
}

void kv_peer_snap_data_provider(nghttp2_data_provider *prd, peer_stream *s)
{
    prd->source.ptr = s;
    prd->read_callback = snap_read_cb;
}

void kv_peer_snap_metrics_init(kv_peer_net *n, kv_peer *p, const char *labels)
{
    if (!n->metrics)
        return;
    p->m_snap_refused = kv_metrics_counter(
        n->metrics, "kvd_peer_snapshots_refused_total",
        "Snapshots from the peer refused: larger than --max-snapshot-bytes.", labels);
    p->m_snap_offers_ignored = kv_metrics_counter(
        n->metrics, "kvd_peer_snapshot_offers_ignored_total",
        "Snapshot offers from the peer ignored: 2 of its snapshots already in progress.", labels);
}

int kv_peer_snap_in_open(kv_peer_net *n, peer_snap_in **out)
{
    peer_snap_in *in = calloc(1, sizeof(*in));
    if (!in)
        return -ENOMEM;
    if (snprintf(in->tmp, sizeof(in->tmp), "%s/.peer-snap-XXXXXX", n->snap_dir) >=
        (int)sizeof(in->tmp)) {
        free(in);
        return -ENAMETOOLONG;
    }
    in->fd = mkstemp(in->tmp);
    if (in->fd < 0) {
        int rc = -errno;
        kv_peer_log(n, "cannot create a snapshot file in %s: %s", n->snap_dir, strerror(errno));
        free(in);
        return rc;
    }
    *out = in;
    return 0;
}

void kv_peer_snap_in_data(kv_peer_net *n, peer_snap_in *in, const uint8_t *d, size_t len)
{
    while (len > 0 && in->len_got < 4) {
        in->lenb[in->len_got++] = *d++;
        len--;
        if (in->len_got == 4) {
            in->hdr_len = kv_be32(in->lenb);
            if (in->hdr_len > n->cfg.max_frame_bytes) {
                in->err = -EMSGSIZE;
                return;
            }
            if (in->hdr_len > 0 && !(in->hdr = malloc(in->hdr_len))) {
                in->err = -ENOMEM;
                return;
            }
        }
    }
    if (in->err)
        return;
    if (len > 0 && in->hdr_got < in->hdr_len) {
        size_t take = in->hdr_len - in->hdr_got < len ? in->hdr_len - in->hdr_got : len;
        memcpy(in->hdr + in->hdr_got, d, take);
        in->hdr_got += take;
        d += take;
        len -= take;
    }
    if (len > 0 && n->cfg.max_snapshot_bytes &&
        (uint64_t)len > n->cfg.max_snapshot_bytes - in->file_bytes) {
        in->err = -EFBIG; /* the caller resets the stream (kv_peer_snap_in_refuse) */
        return;
    }
    in->file_bytes += len;
    while (len > 0) {
        ssize_t w = write(in->fd, d, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0) {
            in->err = -errno;
            return;
        }
        d += w;
        len -= (size_t)w;
    }
}

void kv_peer_snap_in_abort(peer_snap_in *in)
{
    if (!in)
        return;
    if (in->fd >= 0) {
        close(in->fd);
        unlink(in->tmp);
    }
    free(in->hdr);
    free(in);
}

static void fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

int kv_peer_snap_in_finish(kv_peer *p, peer_snap_in *in)
{
    kv_peer_net *n = p->net;
    char final[4096 + 64];
    int rc = in->err;
    if (rc == 0 && (in->len_got < 4 || in->hdr_got < in->hdr_len))
        rc = -EPROTO;
    if (rc == 0 && fsync(in->fd) != 0)
        rc = -errno;
    if (rc != 0) {
        kv_peer_log(n, "receiving a snapshot from peer %llx failed: %s", (unsigned long long)p->id,
                    strerror(-rc));
        kv_peer_snap_in_abort(in);
        return rc;
    }
    close(in->fd);
    in->fd = -1;
    /* the mkstemp suffix keeps names unique across restarts */
    const char *suffix = strrchr(in->tmp, '-') + 1;
    snprintf(final, sizeof(final), "%s/peer-%llx-%s.snap", n->snap_dir, (unsigned long long)p->id,
             suffix);
    if (rename(in->tmp, final) != 0) {
        rc = -errno;
        unlink(in->tmp);
        kv_peer_log(n, "renaming a snapshot from peer %llx failed: %s", (unsigned long long)p->id,
                    strerror(-rc));
        free(in->hdr);
        free(in);
        return rc;
    }
    fsync_dir(n->snap_dir);
    kv_metric_inc(p->m_snap_recv);
    if (n->h.on_snapshot)
        n->h.on_snapshot(n->h.arg, p->id, in->hdr, in->hdr_len, final);
    else
        unlink(final);
    free(in->hdr);
    free(in);
    return 0;
}
