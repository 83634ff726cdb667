/* wal_write: the write path (wal.h): records are encoded into a batch buffer as the caller
 * adds them (and applied to the in-memory log at once); kv_wal_sync writes the batch at the
 * end of the active segment with one fdatasync, starting a new segment first when the active
 * one reached --wal-segment-bytes; kv_wal_release deletes the segments no longer needed.
 * Caller's thread (one at a time). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "wal/wal_int.h"

#define SNAP_MAX (24 + 16 * RAFT_MAX_NODES)
#define HEAD_MAX (2 * KV_WAL_HDR + SNAP_MAX + 24)

static int latch(kv_wal *w, int rc)
{
    if (rc && !w->err)
        w->err = rc;
    return rc;
}

/* Room for one more record of payload len in the batch; returns its offset. */
static int reserve(kv_wal *w, size_t len, size_t *off)
{
    size_t need = w->pend_len + KV_WAL_HDR + len;
    if (need > w->pend_cap) {
        size_t cap = w->pend_cap ? w->pend_cap : 4096;
        while (cap < need)
            cap *= 2;
        uint8_t *p = realloc(w->pend, cap);
        if (!p)
            return -ENOMEM;
        w->pend = p;
        w->pend_cap = cap;
    }
    *off = w->pend_len;
    w->pend_len = need;
    return 0;
}

int kv_wal_append(kv_wal *w, const struct raft_entry *e, size_t n)
{
    if (w->err)
        return w->err;
    if (!n)
        return 0;
    if (e[0].index <= w->snap.index || e[0].index > kv_wal_last(w) + 1)
        return -EINVAL;
    for (size_t k = 0; k < n; k++)
        if (e[k].index != e[0].index + k || e[k].len > UINT32_MAX - 17 - KV_WAL_HDR)
            return -EINVAL;
    for (size_t k = 0; k < n; k++) {
        size_t off;
        void *copy = NULL;
        if (e[k].len && !(copy = malloc(e[k].len)))
            return latch(w, -ENOMEM);
        if (reserve(w, 17 + e[k].len, &off)) {
            free(copy);
            return latch(w, -ENOMEM);
        }
        uint8_t *p = w->pend + off + KV_WAL_HDR;
        kv_put_be64(p, e[k].index);
        kv_put_be64(p + 8, e[k].term);
        p[16] = e[k].type;
        if (e[k].len) {
            memcpy(p + 17, e[k].data, e[k].len);
            memcpy(copy, e[k].data, e[k].len);
        }
        kv_wal_rec_seal(w->pend + off, KV_WAL_REC_ENTRY, (uint32_t)(17 + e[k].len));
        int rc = kv_wal_idx_push(w, &e[k], copy, KV_WAL_SEG_PENDING, off);
        if (rc) { /* checked above: only -ENOMEM here */
            free(copy);
            return latch(w, rc == -EBADMSG ? -EINVAL : rc);
        }
        if (!w->pend_min || e[k].index < w->pend_min)
            w->pend_min = e[k].index;
        if (e[k].index > w->pend_max)
            w->pend_max = e[k].index;
    }
    return 0;
}

static void put_hs(uint8_t *rec, const struct raft_hard_state *hs)
{
    kv_put_be64(rec + KV_WAL_HDR, hs->term);
    kv_put_be64(rec + KV_WAL_HDR + 8, hs->vote);
    kv_put_be64(rec + KV_WAL_HDR + 16, hs->commit);
    kv_wal_rec_seal(rec, KV_WAL_REC_HARDSTATE, 24);
}

static void put_snap(uint8_t *rec, const struct raft_snapshot_meta *m)
{
    kv_snap_meta_put(rec + KV_WAL_HDR, m);
    kv_wal_rec_seal(rec, KV_WAL_REC_SNAPSHOT, (uint32_t)kv_snap_meta_size(m));
}

int kv_wal_set_hard_state(kv_wal *w, const struct raft_hard_state *hs)
{
    size_t off;
    if (w->err)
        return w->err;
    if (reserve(w, 24, &off))
        return latch(w, -ENOMEM);
    put_hs(w->pend + off, hs);
    w->hs = *hs;
    w->have_hs = true;
    return 0;
}

int kv_wal_set_snapshot(kv_wal *w, const struct raft_snapshot_meta *m)
{
    size_t off;
    if (w->err)
        return w->err;
    if (m->index < w->snap.index || m->conf.n_voters > RAFT_MAX_NODES ||
        m->conf.n_learners > RAFT_MAX_NODES)
        return -EINVAL;
    if (reserve(w, kv_snap_meta_size(m), &off))
        return latch(w, -ENOMEM);
    put_snap(w->pend + off, m);
    return latch(w, kv_wal_idx_snapshot(w, m));
}

/* Starts segment seq + 1; the caller writes the head records into it. */
static int rotate(kv_wal *w)
{
    struct kv_wal_seg *cur = &w->segs[w->n_segs - 1];
    raft_index first = w->pend_min ? w->pend_min : kv_wal_last(w) + 1;
    if (w->n_segs == w->cap_segs) {
        size_t cap = w->cap_segs ? w->cap_segs * 2 : 8;
        struct kv_wal_seg *v = realloc(w->segs, cap * sizeof *v);
        if (!v)
            return -ENOMEM;
        w->segs = v;
        w->cap_segs = cap;
        cur = &w->segs[w->n_segs - 1];
    }
    struct kv_wal_seg s;
    int rc = kv_wal_seg_create(w, cur->seq + 1, first, &s);
    if (rc)
        return rc;
    w->segs[w->n_segs++] = s;
    return 0;
}

static int write_all(int fd, struct iovec *iov, int n, uint64_t off)
{
    while (n) {
        ssize_t r = pwritev(fd, iov, n, (off_t)off);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        off += (uint64_t)r;
        while (n && (size_t)r >= iov->iov_len) {
            r -= (ssize_t)iov->iov_len;
            iov++;
            n--;
        }
        if (n) {
            iov->iov_base = (uint8_t *)iov->iov_base + r;
            iov->iov_len -= (size_t)r;
        }
    }
    return 0;
}

int kv_wal_sync(kv_wal *w)
{
    if (w->err)
        return w->err;
    if (!w->pend_len)
        return 0;
    int rc;
    if (w->segs[w->n_segs - 1].size >= w->o.segment_bytes && (rc = rotate(w)))
        return latch(w, rc);
    struct kv_wal_seg *s = &w->segs[w->n_segs - 1];
    uint8_t head[HEAD_MAX];
    size_t head_len = 0;
    if (s->size == 0) {
        /* Every segment starts with the snapshot and hard state in force, so that the
         * segments before it can be deleted (kv_wal_release). */
        put_snap(head, &w->synced_snap);
        head_len = KV_WAL_HDR + kv_snap_meta_size(&w->synced_snap);
        if (w->synced_have_hs) {
            put_hs(head + head_len, &w->synced_hs);
            head_len += KV_WAL_HDR + 24;
        }
    }
    uint64_t base = s->size + head_len, total = head_len + w->pend_len;
    if ((rc = kv_wal_seg_reserve(s, s->size + total, w->o.segment_bytes / 4)))
        return latch(w, rc);
    struct iovec iov[2] = {{head, head_len}, {w->pend, w->pend_len}};
    if ((rc = write_all(s->fd, head_len ? iov : iov + 1, head_len ? 2 : 1, s->size)))
        return latch(w, rc);
    if (!w->o.no_sync) {
        w->fsyncs++;
        if (fdatasync(s->fd))
            return latch(w, -errno);
    }
    if (w->pend_min) {
        for (raft_index i = w->pend_min > w->first ? w->pend_min : w->first;
             i <= kv_wal_last(w) && w->n_ents; i++) {
            struct kv_wal_ent *e = kv_wal_ent_at(w, i);
            if (e->seg == KV_WAL_SEG_PENDING) {
                e->seg = s->seq;
                e->off += base;
            }
        }
        if (w->pend_max > s->max_index)
            s->max_index = w->pend_max;
    }
    s->size += total;
    w->synced_snap = w->snap;
    w->synced_hs = w->hs;
    w->synced_have_hs = w->have_hs;
    w->pend_len = 0;
    w->pend_min = w->pend_max = 0;
    kv_wal_idx_evict(w);
    return 0;
}

int kv_wal_release(kv_wal *w, raft_index applied)
{
    if (w->err)
        return w->err;
    raft_index bound = applied < w->synced_snap.index ? applied : w->synced_snap.index;
    size_t n = 0;
    while (n + 1 < w->n_segs && w->segs[n].max_index <= bound)
        n++;
    for (size_t k = 0; k < n; k++) {
        char name[64];
        kv_wal_seg_name(name, sizeof name, w->segs[k].seq, w->segs[k].first);
        close(w->segs[k].fd);
        w->segs[k].fd = -1;
        if (unlinkat(w->dirfd, name, 0) && errno != ENOENT) {
            int rc = -errno;
            memmove(w->segs, w->segs + k + 1, (w->n_segs - k - 1) * sizeof *w->segs);
            w->n_segs -= k + 1;
            return latch(w, rc);
        }
    }
    if (!n)
        return 0;
    memmove(w->segs, w->segs + n, (w->n_segs - n) * sizeof *w->segs);
    w->n_segs -= n;
    int rc = kv_wal_fsync_dir(w);
    return rc ? latch(w, rc) : (int)n;
}
