/*
 * snapshot_stream: Maintenance.Snapshot (server streaming) and Maintenance.Hash.
 *
 * Snapshot, as etcd's v3rpc maintenance.go: a stream of SnapshotResponse{remaining_bytes,
 * blob}, then one last message whose blob is the SHA-256 of all the bytes before it
 * (remaining_bytes 0). The file is an etcd 3.4 snapshot (a bbolt file: mvcc/snapshot.h
 * kv_store_snapshot_bbolt, bbolt/bbolt.h), so etcdctl's snapshot status/restore read it.
 *  1. The store from ONE LMDB read transaction (consistent, writes go on meanwhile) written as
 *     that file into an anonymous temporary file (O_TMPFILE) in the data dir, on a libuv
 *     worker thread (bounded buffers).
 *  2. Chunks of KV_SNAPSHOT_CHUNK bytes (at most a quarter of --max-send-buffer-bytes, so that
 *     one always fits) are read and hashed on a worker thread (one read in flight), then
 *     handed to the transport on the loop. The next chunk is read only after the previous one
 *     was accepted; when the connection's send buffer is full (-ENOBUFS) the same chunk is
 *     retried from a timer (1 ms, doubling up to 32 ms): memory per snapshot is one chunk, and
 *     the loop never reads the disk nor hashes.
 * Bounds: at most --max-snapshots (default 2) snapshots at once (each holds a temporary copy of the
 * store on disk); beyond it RESOURCE_EXHAUSTED "etcdserver: too many requests"
 * (gauge kvd_snapshots_running, counter kvd_snapshots_refused_total).
 * A cancelled call (client gone) stops at the next step; the temporary file is unlinked from
 * the start, so nothing is left behind whatever happens.
 *
 * Hash: mvcc/snapshot.h kv_store_hash_all on a reader thread (api/read_req.h).
 * Threads: everything here runs on the loop thread except the *_work functions.
 */
#include "api/read_req.h"
#include "api/services.h"
#include "api/snapshot_stream.h"
#include "mvcc/snapshot.h"
#include "rpc.pb-c.h"
#include "api/api.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define KV_SNAPSHOT_CHUNK (256 * 1024)
#define KV_SNAPSHOT_RETRY_MS 1 /* first retry after -ENOBUFS; doubles up to: */
#define KV_SNAPSHOT_RETRY_MAX_MS 32

typedef struct snap_ctx {
    kv_api *s;
    kv_grpc_call *call; /* NULL once cancelled */
    int fd;
    int64_t size, off;
    int rc;      /* worker result */
    uint64_t t0; /* uv_now at start */
    uint64_t copy_ms;
    EVP_MD_CTX *md;
    uint8_t *chunk; /* chunk_max bytes */
    size_t chunk_len, chunk_max;
    uint8_t *packed; /* the SnapshotResponse waiting to be accepted */
    size_t packed_len;
    int final; /* packed is the checksum message */
    uv_work_t work;
    uv_timer_t timer;
    int timer_init, busy; /* busy: a worker job or timer owns the ctx */
    int copied;
    uint64_t retry_ms; /* current -ENOBUFS retry delay */
    kv_metric *running;
} snap_ctx;

static void step(snap_ctx *c);

static void snap_free_cb(uv_handle_t *h)
{
    free(h->data);
}

static void snap_free(snap_ctx *c)
{
    if (c->fd >= 0)
        close(c->fd);
    EVP_MD_CTX_free(c->md);
    free(c->chunk);
    free(c->packed);
    if (c->running)
        kv_metric_gauge_add(c->running, -1);
    if (c->timer_init) {
        c->timer.data = c;
        uv_close((uv_handle_t *)&c->timer, snap_free_cb);
    } else {
        free(c);
    }
}

/* Finishes with KV_ERR_SNAPSHOT_FAILED, "etcdserver: snapshot failed: <why>". */
static void reply_snapshot_failed(kv_grpc_call *call, const char *why)
{
    char d[160];
    snprintf(d, sizeof d, ": %s", why);
    kv_reply_etcd_err_detail(call, KV_ERR_SNAPSHOT_FAILED, d);
}

static void fail(snap_ctx *c, const char *why)
{
    if (c->call) {
        kv_grpc_call_set_data(c->call, NULL);
        reply_snapshot_failed(c->call, why);
        c->call = NULL;
    }
    snap_free(c);
}

static void copy_work(uv_work_t *w)
{
    snap_ctx *c = w->data;
    c->rc = kv_store_snapshot_bbolt(c->s->store, c->fd, &c->size);
}

static void read_work(uv_work_t *w)
{
    snap_ctx *c = w->data;
    int64_t left = c->size - c->off;
    size_t want = left < (int64_t)c->chunk_max ? (size_t)left : c->chunk_max;
    size_t got = 0;
    c->rc = 0;
    while (got < want) {
        ssize_t r = pread(c->fd, c->chunk + got, want - got, c->off + (int64_t)got);
        if (r <= 0) {
            c->rc = r < 0 ? -errno : -EIO;
            return;
        }
        got += (size_t)r;
    }
    if (EVP_DigestUpdate(c->md, c->chunk, got) != 1)
        c->rc = -EIO;
    c->chunk_len = got;
}

static int pack_response(snap_ctx *c, const uint8_t *blob, size_t len, uint64_t remaining)
{
    Etcdserverpb__SnapshotResponse r = ETCDSERVERPB__SNAPSHOT_RESPONSE__INIT;
    r.remaining_bytes = remaining;
    r.blob.data = (uint8_t *)blob;
    r.blob.len = len;
    size_t n = etcdserverpb__snapshot_response__get_packed_size(&r);
    free(c->packed);
    c->packed = malloc(n ? n : 1);
    if (c->packed == NULL)
        return -ENOMEM;
    c->packed_len = etcdserverpb__snapshot_response__pack(&r, c->packed);
    return 0;
}

static void after_work(uv_work_t *w, int status)
{
    snap_ctx *c = w->data;
    c->busy = 0;
    if (c->call == NULL) {
        snap_free(c);
        return;
    }
    if (status < 0 || c->rc < 0) {
        int e = status < 0 ? status : c->rc;
        fprintf(stderr, "kvd: error: snapshot failed: %s\n", strerror(-e));
        fail(c, strerror(-e));
        return;
    }
    if (!c->copied) {
        c->copied = 1;
        c->copy_ms = uv_now(c->s->loop) - c->t0;
        fprintf(
            stderr,
            "kvd: snapshot: wrote %lld bytes (etcd format) from one read transaction in %llu ms, "
            "streaming\n",
            (long long)c->size, (unsigned long long)c->copy_ms);
    } else {
        c->off += (int64_t)c->chunk_len;
        if (pack_response(c, c->chunk, c->chunk_len, (uint64_t)(c->size - c->off)) < 0) {
            fail(c, "out of memory");
            return;
        }
        c->chunk_len = 0;
    }
    step(c);
}

static void on_timer(uv_timer_t *t)
{
    snap_ctx *c = t->data;
    c->busy = 0;
    if (c->call == NULL) {
        snap_free(c);
        return;
    }
    step(c);
}

/* Sends the pending message (if any), then starts the next read or finishes. */
static void step(snap_ctx *c)
{
    if (c->packed) {
        int rc = kv_grpc_call_send(c->call, c->packed, c->packed_len);
        if (rc == -ENOBUFS) {
            c->retry_ms = c->retry_ms ? c->retry_ms * 2 : KV_SNAPSHOT_RETRY_MS;
            if (c->retry_ms > KV_SNAPSHOT_RETRY_MAX_MS)
                c->retry_ms = KV_SNAPSHOT_RETRY_MAX_MS;
            c->busy = 1;
            uv_timer_start(&c->timer, on_timer, c->retry_ms, 0);
            return;
        }
        c->retry_ms = 0;
        if (rc < 0) { /* connection closing: on_cancel follows (or already ran) */
            kv_grpc_call_set_data(c->call, NULL);
            kv_reply_etcd_err(c->call, KV_ERR_SNAPSHOT_CLOSED);
            c->call = NULL;
            snap_free(c);
            return;
        }
        free(c->packed);
        c->packed = NULL;
        if (c->final) {
            uint64_t ms = uv_now(c->s->loop) - c->t0;
            fprintf(stderr, "kvd: snapshot: sent %lld bytes + SHA-256 in %llu ms (%.1f MB/s)\n",
                    (long long)c->size, (unsigned long long)ms,
                    ms ? (double)c->size / 1e3 / (double)ms : 0.0);
            kv_grpc_call_set_data(c->call, NULL);
            kv_grpc_call_finish(c->call, KV_GRPC_OK, NULL);
            c->call = NULL;
            snap_free(c);
            return;
        }
    }
    if (c->off >= c->size) {
        uint8_t sum[EVP_MAX_MD_SIZE];
        unsigned sl = 0;
        if (EVP_DigestFinal_ex(c->md, sum, &sl) != 1 || pack_response(c, sum, sl, 0) < 0) {
            fail(c, "checksum");
            return;
        }
        c->final = 1;
        step(c);
        return;
    }
    c->busy = 1;
    c->work.data = c;
    int rc = uv_queue_work(c->s->loop, &c->work, read_work, after_work);
    if (rc < 0) {
        c->busy = 0;
        fail(c, "cannot queue work");
    }
}

/* A message must fit in the connection's send buffer (--max-send-buffer-bytes, at least 64 KiB)
 * or it would be refused forever: at most a quarter of it. */
static void start_copy(snap_ctx *c)
{
    c->work.data = c;
    if (uv_queue_work(c->s->loop, &c->work, copy_work, after_work) < 0) {
        c->busy = 0;
        fail(c, "cannot queue work");
    }
}

/* Read your writes (node.h kv_node_read_visible): a write this member acknowledged before its
 * LMDB commit returned is in the snapshot, as etcd commits its pending writes before it takes
 * one. Loop thread. A call cancelled meanwhile (kv_snapshot_on_cancel left the ctx to us) is
 * freed here. */
static void on_visible(void *arg, int status)
{
    snap_ctx *c = arg;
    if (c->call == NULL) {
        c->busy = 0;
        snap_free(c);
    } else if (status < 0) {
        c->busy = 0;
        fail(c, status == -ETIMEDOUT ? "timed out waiting for an acknowledged write's commit"
                                     : "member stopping");
    } else {
        start_copy(c);
    }
}

static size_t chunk_size(const kv_api *s)
{
    size_t max = s->cfg->max_send_buffer_bytes / 4;
    if (max == 0 || max > KV_SNAPSHOT_CHUNK)
        max = KV_SNAPSHOT_CHUNK;
    return max < 4096 ? 4096 : max;
}

void kv_snapshot_on_message(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    kv_api *s = kv_grpc_call_app(call);
    (void)msg;
    (void)len;
    if (kv_grpc_call_data(call) != NULL)
        return; /* a second request message on the stream: ignored (etcd reads one) */
    kv_metric *running = NULL;
    if (s->metrics) {
        running = kv_metrics_gauge(s->metrics, "kvd_snapshots_running",
                                   "Maintenance.Snapshot streams in progress", NULL);
        if (running && kv_metric_value(running) >= (double)s->cfg->max_snapshots) {
            kv_metric *ref = kv_metrics_counter(s->metrics, "kvd_snapshots_refused_total",
                                                "Snapshots refused (too many at once)", NULL);
            if (ref)
                kv_metric_inc(ref);
            kv_reply_etcd_err(call, KV_ERR_TOO_MANY_REQUESTS);
            return;
        }
    }
    snap_ctx *c = calloc(1, sizeof(*c));
    char path[4096];
    int fd = -1;
    /* an anonymous file (O_TMPFILE): nothing is left behind even after a crash; else a named
     * one, unlinked at once */
    if (c)
        fd = open(s->cfg->data_dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (c && fd < 0 &&
        (size_t)snprintf(path, sizeof path, "%s/snapshot.tmp.XXXXXX", s->cfg->data_dir) <
            sizeof path) {
        fd = mkostemp(path, O_CLOEXEC);
        if (fd >= 0)
            unlink(path);
    }
    if (c == NULL || fd < 0 || (c->md = EVP_MD_CTX_new()) == NULL ||
        EVP_DigestInit_ex(c->md, EVP_sha256(), NULL) != 1 ||
        (c->chunk = malloc(chunk_size(s))) == NULL || uv_timer_init(s->loop, &c->timer) < 0) {
        if (fd >= 0)
            close(fd);
        if (c) {
            EVP_MD_CTX_free(c->md);
            free(c->chunk);
            free(c);
        }
        reply_snapshot_failed(call, "cannot create temporary file");
        return;
    }
    c->timer_init = 1;
    c->chunk_max = chunk_size(s);
    c->timer.data = c;
    c->s = s;
    c->call = call;
    c->fd = fd;
    c->running = running;
    if (running)
        kv_metric_gauge_add(running, 1);
    c->t0 = uv_now(s->loop);
    kv_grpc_call_set_data(call, c);
    c->busy = 1; /* the wait below, then the copy, own the ctx */
    int rc = s->node ? kv_node_read_visible(s->node, on_visible, c) : 1;
    if (rc == 1)
        start_copy(c);
    else if (rc < 0) {
        c->busy = 0;
        fail(c, rc == -EBUSY ? "too many reads waiting" : "member stopping");
    }
}

void kv_snapshot_on_half_close(kv_grpc_call *call)
{
    (void)call; /* the request arrived already; the stream goes on */
}

void kv_snapshot_on_cancel(kv_grpc_call *call)
{
    snap_ctx *c = kv_grpc_call_data(call);
    if (c == NULL)
        return;
    c->call = NULL;
    if (!c->busy)
        snap_free(c);
    else if (uv_is_active((uv_handle_t *)&c->timer)) {
        uv_timer_stop(&c->timer);
        snap_free(c);
    }
    /* else the visibility wait (on_visible) or a worker job (after_work) owns it and frees it */
}

/* Maintenance.Hash on a reader thread. */
static int hash_read(kv_store *store, const uint8_t *msg, size_t len, const kv_header_info *h,
                     kv_result *res)
{
    memset(res, 0, sizeof(*res));
    Etcdserverpb__HashRequest *req = etcdserverpb__hash_request__unpack(NULL, len, msg);
    if (req == NULL) {
        kv_result_set_err(res, KV_ERR_GRPC_UNMARSHAL);
        return 0;
    }
    etcdserverpb__hash_request__free_unpacked(req, NULL);
    uint32_t hash = 0;
    int64_t rev = 0;
    int rc = kv_store_hash_all(store, &hash, &rev);
    if (rc < 0)
        return rc;
    Etcdserverpb__HashResponse r = ETCDSERVERPB__HASH_RESPONSE__INIT;
    Etcdserverpb__ResponseHeader hd = ETCDSERVERPB__RESPONSE_HEADER__INIT;
    hd.cluster_id = h->cluster_id;
    hd.member_id = h->member_id;
    hd.raft_term = h->raft_term;
    hd.revision = rev;
    r.header = &hd;
    r.hash = hash;
    size_t n = etcdserverpb__hash_response__get_packed_size(&r);
    res->resp = malloc(n ? n : 1);
    if (res->resp == NULL)
        return -ENOMEM;
    res->resp_len = etcdserverpb__hash_response__pack(&r, res->resp);
    res->revision = rev;
    return 0;
}

void kv_hash_on_message(kv_grpc_call *call, const uint8_t *msg, size_t len)
{
    kv_read_unary(call, hash_read, msg, len);
}
