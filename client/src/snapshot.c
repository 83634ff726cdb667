/*
 * snapshot.c - Maintenance.Snapshot, the server-streaming download of the member's store:
 * kvc_snapshot() over the call machinery of call.c (kvc_call_stream_async), so it runs on the
 * client's connection, h2c or TLS, with its auth token, deadline and error reporting.
 *
 * Each SnapshotResponse is unpacked and its blob handed to the caller's on_chunk on the I/O
 * thread while the DATA frames are read: nothing is kept, so memory is one message (at most
 * kvc_config.max_response_bytes) whatever the snapshot's size, and a slow on_chunk pushes
 * back on the server through HTTP/2 flow control.
 *
 * The state shared by the I/O thread and the waiting caller is reference counted (as call.c's
 * sync_ctx): the caller may give up on a stuck loop, after which on_chunk is never called
 * again (it refers to the caller's arg).
 */
#include "internal.h"
#include "rpc.pb-c.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PATH_SNAPSHOT "/etcdserverpb.Maintenance/Snapshot"

struct snap_ctx {
    pthread_mutex_t mu; /* everything below; held while on_chunk runs */
    pthread_cond_t cv;
    atomic_int refs; /* the caller and the call */
    int done;
    int abandoned; /* the caller stopped waiting: on_chunk must not run any more */
    int status;
    kvc_error err;
    kvc_snapshot_chunk_cb on_chunk;
    void *arg;
    uint64_t bytes;     /* blob bytes delivered */
    uint64_t remaining; /* remaining_bytes of the last message */
    uint64_t nmsgs;
};

static void snap_unref(struct snap_ctx *s)
{
    if (atomic_fetch_sub(&s->refs, 1) == 1) {
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->cv);
        free(s);
    }
}

/* I/O thread: one SnapshotResponse. */
static int snap_on_msg(void *arg, const uint8_t *m, size_t n, kvc_error *err)
{
    struct snap_ctx *s = arg;
    Etcdserverpb__SnapshotResponse *r = etcdserverpb__snapshot_response__unpack(NULL, n, m);
    if (!r)
        return kvc_fail(err, KVC_INTERNAL, "kvclient: cannot decode a SnapshotResponse");
    int rc = 0;
    pthread_mutex_lock(&s->mu);
    if (s->abandoned) {
        rc = kvc_fail(err, KVC_CANCELLED, "kvclient: snapshot abandoned by the caller");
    } else {
        int urc = s->on_chunk(s->arg, r->blob.data, r->blob.len, r->remaining_bytes);
        if (urc != 0) {
            rc = kvc_fail(err, KVC_CANCELLED,
                          "kvclient: snapshot cancelled by on_chunk (returned %d)", urc);
        } else {
            s->bytes += r->blob.len;
            s->remaining = r->remaining_bytes;
            s->nmsgs++;
        }
    }
    pthread_mutex_unlock(&s->mu);
    etcdserverpb__snapshot_response__free_unpacked(r, NULL);
    return rc;
}

/* I/O thread: the call ended (exactly once). */
static void snap_on_done(void *arg, int status, const kvc_error *err, uint8_t *resp,
                         size_t resp_len)
{
    struct snap_ctx *s = arg;
    (void)resp_len;
    kvc_free(resp); /* NULL for a streaming call */
    pthread_mutex_lock(&s->mu);
    s->status = status;
    if (status != 0 && err) {
        s->err = *err;
    } else if (status == 0 && (s->nmsgs == 0 || s->remaining != 0)) {
        /* OK, but the stream stopped before the last message (remaining_bytes 0) */
        s->status = kvc_fail(&s->err, KVC_DATA_LOSS,
                             "kvclient: snapshot stream ended with %llu bytes remaining",
                             (unsigned long long)s->remaining);
    }
    s->done = 1;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    snap_unref(s);
}

int kvc_snapshot(kvc_client *c, kvc_snapshot_chunk_cb on_chunk, void *arg, uint32_t timeout_ms,
                 uint64_t *bytes, kvc_error *err)
{
    if (bytes)
        *bytes = 0;
    if (!c || !on_chunk)
        return kvc_fail(err, KVC_INVALID_ARGUMENT, "kvclient: invalid argument");
    if (kvc_loop_on_thread(c->lg))
        return kvc_fail(err, KVC_FAILED_PRECONDITION,
                        "kvclient: synchronous call from the I/O thread (kvc_snapshot)");
    struct snap_ctx *s = calloc(1, sizeof *s);
    if (!s)
        return kvc_fail(err, KVC_RESOURCE_EXHAUSTED, "kvclient: out of memory");
    pthread_mutex_init(&s->mu, NULL);
    kvc_cond_init_monotonic(&s->cv);
    atomic_init(&s->refs, 2);
    s->on_chunk = on_chunk;
    s->arg = arg;
    /* SnapshotRequest has no fields: its encoding is empty. */
    int rc = kvc_call_stream_async(c, PATH_SNAPSHOT, NULL, 0, timeout_ms, snap_on_msg, snap_on_done,
                                   s, err);
    if (rc != 0) {
        atomic_store(&s->refs, 1);
        snap_unref(s);
        return rc;
    }
    pthread_mutex_lock(&s->mu);
    kvc_wait_done(&s->mu, &s->cv, &s->done, &s->abandoned, timeout_ms);
    if (bytes)
        *bytes = s->bytes;
    if (s->done) {
        rc = s->status;
        if (rc != 0 && err)
            *err = s->err;
    } else {
        rc = kvc_fail(err, KVC_DEADLINE_EXCEEDED, "kvclient: deadline exceeded (I/O stalled)");
    }
    pthread_mutex_unlock(&s->mu);
    snap_unref(s);
    return rc;
}
