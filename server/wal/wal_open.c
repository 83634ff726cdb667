/* wal_open: the WAL's lifecycle: open with recovery (wal.h "Recovery": a bad record at the
 * tail of the last segment is a torn write and is cut; anywhere else the log is corrupt and
 * refused, naming the segment file and the offset), close, stats. Caller's thread. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/dir_sync.h"
#include "wal/wal_int.h"

#define DEF_TAIL_BYTES ((size_t)8 << 20)
#define MIN_SEGMENT_BYTES 4096ull

static void say(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || !errlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* Applies one valid record of segment s at off (the same rules as the write path).
 * -EBADMSG: the record is malformed or breaks the log's order. */
static int apply_rec(kv_wal *w, struct kv_wal_seg *s, uint64_t off, uint8_t type, const uint8_t *p,
                     uint32_t len)
{
    switch (type) {
    case KV_WAL_REC_ENTRY: {
        if (len < 17)
            return -EBADMSG;
        struct raft_entry e = {
            .index = kv_be64(p), .term = kv_be64(p + 8), .type = p[16], .len = len - 17};
        /* no data kept: open's memory does not grow with the log; read from here when asked */
        int rc = kv_wal_idx_push(w, &e, NULL, s->seq, off);
        if (rc)
            return rc;
        if (e.index > s->max_index)
            s->max_index = e.index;
        return 0;
    }
    case KV_WAL_REC_HARDSTATE:
        if (len != 24)
            return -EBADMSG;
        w->hs = (struct raft_hard_state){
            .term = kv_be64(p), .vote = kv_be64(p + 8), .commit = kv_be64(p + 16)};
        w->have_hs = true;
        return 0;
    case KV_WAL_REC_SNAPSHOT: {
        struct raft_snapshot_meta m;
        int rc = kv_snap_meta_get(p, len, &m);
        return rc ? rc : kv_wal_idx_snapshot(w, &m);
    }
    }
    return -EBADMSG;
}

static void seg_path(const kv_wal *w, const struct kv_wal_seg *s, char *buf, size_t cap)
{
    char name[64];
    kv_wal_seg_name(name, sizeof name, s->seq, s->first);
    snprintf(buf, cap, "%s/%s", w->dir, name);
}

/* A bad record is a torn write only if part of it never reached the disk: then the part of
 * it in one of the 512-byte sectors it covers reads as the zeros the space past the records
 * always holds (preallocated, or re-zeroed by the cut at open). A bit flip at rest leaves no
 * such sector: corruption, even in the last segment (etcd's rule, docs/raftlog.md
 * "Recovery"). map[0..size) is the file; the record starts at off; its extent is its
 * header's length, or the rest of the file when that is past the end. */
static bool looks_torn(const uint8_t *map, uint64_t off, uint64_t size)
{
    uint64_t end = size;
    if (size - off >= KV_WAL_HDR && off + KV_WAL_HDR + kv_be32(map + off + 4) < end)
        end = off + KV_WAL_HDR + kv_be32(map + off + 4);
    const uint64_t sector = 512;
    for (uint64_t lo = off; lo < end;) {
        uint64_t hi = (lo / sector + 1) * sector;
        if (hi > end)
            hi = end;
        uint64_t i = lo;
        while (i < hi && map[i] == 0)
            i++;
        if (i == hi)
            return true;
        lo = hi;
    }
    return false;
}

/* A torn write never makes a record's length larger than it was: the bytes of its header that
 * did not reach the disk read as zeros, and zeroing bytes of a big-endian length can only
 * shrink it. So when a whole record lies inside the extent a bad record's header claims, the
 * header was damaged at rest (a bit flip that grew the length would otherwise stretch the
 * extent over the zeros past the last record, look torn, and cut the acknowledged records
 * behind it). The extent is as looks_torn's. A candidate is checked only if its header and
 * payload could follow the log read so far (plausible: the records after a damaged one do),
 * then by its CRC; ordinary data (a payload of small integers, say) rarely passes the first
 * test, and at most KV_WAL_SCAN_CRC_BYTES of CRC input are spent: past it the answer is 1
 * (refuse to start rather than cut what may be acknowledged). A payload that embeds a valid,
 * plausible record can make a real torn write read as corruption: the member then refuses to
 * start and says so; it never loses a record. */
#define KV_WAL_SCAN_CRC_BYTES ((uint64_t)256 << 20)
static bool plausible(const kv_wal *w, const uint8_t *h, uint32_t len, uint64_t extent)
{
    const uint8_t *p = h + KV_WAL_HDR;
    uint64_t last = kv_wal_last(w), window = extent / KV_WAL_HDR + 2;
    uint64_t term = w->have_hs ? w->hs.term : 0;
    switch (h[0]) {
    case KV_WAL_REC_ENTRY: /* index: an overwrite (>= first) up to one past the last, or so */
        return len >= 17 && kv_be64(p) > w->snap.index && kv_be64(p) <= last + window &&
               kv_be64(p + 8) >= 1 && kv_be64(p + 8) <= term + window;
    case KV_WAL_REC_HARDSTATE: /* terms never go back; a commit within the log */
        return len == 24 && kv_be64(p) >= term && kv_be64(p) <= term + window &&
               kv_be64(p + 16) <= last + window;
    case KV_WAL_REC_SNAPSHOT:
        return len >= 16 && kv_be64(p) >= w->snap.index && kv_be64(p) <= last + window;
    }
    return false;
}

static bool record_inside(const kv_wal *w, const uint8_t *map, uint64_t off, uint64_t size)
{
    uint64_t end = size;
    if (size - off >= KV_WAL_HDR && off + KV_WAL_HDR + kv_be32(map + off + 4) < end)
        end = off + KV_WAL_HDR + kv_be32(map + off + 4);
    uint64_t budget = KV_WAL_SCAN_CRC_BYTES;
    for (uint64_t p = off + 1; p + KV_WAL_HDR <= end; p++) {
        const uint8_t *h = map + p;
        uint32_t len = kv_be32(h + 4);
        if (h[0] < KV_WAL_REC_ENTRY || h[0] > KV_WAL_REC_SNAPSHOT || h[1] || h[2] || h[3] ||
            (uint64_t)len > end - p - KV_WAL_HDR || !plausible(w, h, len, end - off))
            continue; /* not a whole record inside the extent that could follow the log */
        if (len > budget)
            return true;
        budget -= len;
        uint8_t type;
        uint32_t rlen;
        if (kv_wal_rec_check(h, end - p, &type, &rlen) == 0)
            return true;
    }
    return false;
}

/* 1 if map[off, end) holds only zero bytes. */
static int all_zero(const uint8_t *map, uint64_t off, uint64_t end)
{
    static const uint8_t zero[4096];
    while (off < end) {
        size_t n = end - off < sizeof zero ? (size_t)(end - off) : sizeof zero;
        if (memcmp(map + off, zero, n))
            return 0;
        off += n;
    }
    return 1;
}

/* Reads every record of segments[k]; sets its size (end of records). */
static int scan_seg(kv_wal *w, size_t k, char *err, size_t errlen)
{
    struct kv_wal_seg *s = &w->segs[k];
    bool last = k + 1 == w->n_segs;
    char path[4200];
    struct stat st;
    seg_path(w, s, path, sizeof path);
    if (fstat(s->fd, &st)) {
        say(err, errlen, "wal: %s: %s", path, strerror(errno));
        return -errno;
    }
    s->alloc = (uint64_t)st.st_size;
    uint8_t *map = NULL;
    if (st.st_size) {
        map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, s->fd, 0);
        if (map == MAP_FAILED) {
            int rc = -errno;
            say(err, errlen, "wal: %s: mmap: %s", path, strerror(errno));
            return rc;
        }
    }
    uint64_t off = 0;
    const char *why = NULL;
    bool torn_ok = false;
    int rc = 0;
    for (;;) {
        uint8_t type = 0;
        uint32_t len = 0;
        int r = kv_wal_rec_check(map ? map + off : NULL, s->alloc - off, &type, &len);
        if (r == 1) {
            /* The end. Before the last segment nothing was ever written past it (rotation
             * follows a synced batch, and the rest is preallocated): a zero header with bytes
             * after it is a block lost at rest, and the entries after it would vanish. */
            if (!last && !all_zero(map, off, s->alloc))
                why = "a record header reads as zeros, but written bytes follow it in a segment "
                      "that is not the last (a block lost at rest)";
            break;
        }
        if (r < 0) {
            why = "bad record (CRC, length or type; no sector of it reads as unwritten, or a "
                  "whole record starts inside the length its header claims)";
            torn_ok = looks_torn(map, off, s->alloc) && !record_inside(w, map, off, s->alloc);
            break;
        }
        rc = apply_rec(w, s, off, type, map + off + KV_WAL_HDR, len);
        if (rc == -EBADMSG) {
            why = "record breaks the log (malformed, or an entry out of order)";
            rc = 0;
            break;
        }
        if (rc) {
            say(err, errlen, "wal: %s offset %" PRIu64 ": %s", path, off, strerror(-rc));
            break;
        }
        off += KV_WAL_HDR + len;
    }
    if (map)
        munmap(map, (size_t)st.st_size);
    if (rc)
        return rc;
    s->size = off;
    if (why && !(last && torn_ok)) {
        say(err, errlen,
            "wal: corrupt log: segment %s offset %" PRIu64 ": %s; refusing to start "
            "(docs/raftlog.md, \"Recovery\")",
            path, off, why);
        return -EBADMSG;
    }
    if (why) { /* a torn write at the tail: never synced, never acknowledged */
        w->torn_seq = s->seq;
        w->torn_off = off;
    }
    if (last && off < s->alloc) {
        /* Re-zero the rest (a torn tail, or stray bytes past the end a power cut may have
         * left) so that later appends never sit before old garbage. */
        if ((rc = kv_wal_seg_cut(w, s, off))) {
            say(err, errlen, "wal: %s: cutting at %" PRIu64 ": %s", path, off, strerror(-rc));
            return rc;
        }
    }
    return 0;
}

static int open_dir(kv_wal *w, const char *dir, char *err, size_t errlen)
{
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        int rc = -errno;
        say(err, errlen, "wal: mkdir %s: %s", dir, strerror(errno));
        return rc;
    }
    /* The directory's entry must survive a power cut: synced whether this open made it or
     * found it (an earlier run may have died, or its sync failed, between the mkdir or the
     * import's rename and this sync; the import then drops the LMDB copy of the log). */
    w->fsyncs++;
    int rc = kv_dir_fsync_parent(dir);
    if (rc < 0) {
        say(err, errlen, "wal: syncing the directory that holds %s: %s", dir, strerror(-rc));
        return rc;
    }
    w->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (w->dirfd < 0) {
        rc = -errno;
        say(err, errlen, "wal: open %s: %s", dir, strerror(errno));
        return rc;
    }
    return 0;
}

static int open_segs(kv_wal *w, char *err, size_t errlen)
{
    int rc = kv_wal_seg_list(w->dirfd, &w->segs, &w->n_segs);
    if (rc) {
        say(err, errlen, "wal: listing %s: %s", w->dir, strerror(-rc));
        return rc;
    }
    w->cap_segs = w->n_segs;
    for (size_t k = 0; k < w->n_segs; k++)
        w->segs[k].fd = -1;
    for (size_t k = 0; k + 1 < w->n_segs; k++) {
        if (w->segs[k + 1].seq != w->segs[k].seq + 1) {
            say(err, errlen,
                "wal: corrupt log: segments %016" PRIx64 " to %016" PRIx64
                " missing in %s; refusing to start",
                w->segs[k].seq + 1, w->segs[k + 1].seq - 1, w->dir);
            return -EBADMSG;
        }
    }
    for (size_t k = 0; k < w->n_segs; k++) {
        char name[64];
        kv_wal_seg_name(name, sizeof name, w->segs[k].seq, w->segs[k].first);
        int flags = (k + 1 == w->n_segs ? O_RDWR : O_RDONLY) | O_CLOEXEC;
        w->segs[k].fd = openat(w->dirfd, name, flags);
        if (w->segs[k].fd < 0) {
            rc = -errno;
            say(err, errlen, "wal: open %s/%s: %s", w->dir, name, strerror(errno));
            return rc;
        }
    }
    if (w->n_segs)
        return 0;
    struct kv_wal_seg s;
    if ((rc = kv_wal_seg_create(w, 1, 1, &s))) {
        say(err, errlen, "wal: creating the first segment in %s: %s", w->dir, strerror(-rc));
        return rc;
    }
    if (!(w->segs = malloc(sizeof *w->segs))) {
        close(s.fd);
        return -ENOMEM;
    }
    w->segs[0] = s;
    w->n_segs = w->cap_segs = 1;
    return 0;
}

int kv_wal_open(kv_wal **out, const char *dir, const struct kv_wal_opts *o, char *err,
                size_t errlen)
{
    *out = NULL;
    say(err, errlen, "%s", "");
    kv_wal *w = calloc(1, sizeof *w);
    if (!w || !(w->dir = strdup(dir))) {
        free(w);
        return -ENOMEM;
    }
    w->dirfd = -1;
    w->opening = true;
    if (o)
        w->o = *o;
    if (!w->o.segment_bytes)
        w->o.segment_bytes = KV_WAL_DEFAULT_SEGMENT_BYTES;
    if (w->o.segment_bytes < MIN_SEGMENT_BYTES)
        w->o.segment_bytes = MIN_SEGMENT_BYTES;
    if (!w->o.tail_bytes)
        w->o.tail_bytes = DEF_TAIL_BYTES;
    int rc = open_dir(w, dir, err, errlen);
    if (!rc)
        rc = open_segs(w, err, errlen);
    if (rc)
        goto fail;
    w->first = w->cache_lo = w->segs[0].first ? w->segs[0].first : 1;
    for (size_t k = 0; k < w->n_segs; k++)
        if ((rc = scan_seg(w, k, err, errlen)))
            goto fail;
    w->cache_lo = kv_wal_last(w) + 1; /* nothing cached yet: the scan kept no entry data */
    if (w->first != w->snap.index + 1) {
        say(err, errlen,
            "wal: corrupt log: entries %" PRIu64 "..%" PRIu64
            " are missing before segment %s/%016" PRIx64 "-%016" PRIx64
            ".wal offset 0; refusing to start",
            (uint64_t)w->snap.index + 1, (uint64_t)w->first - 1, w->dir, w->segs[0].seq,
            (uint64_t)w->segs[0].first);
        rc = -EBADMSG;
        goto fail;
    }
    w->synced_snap = w->snap;
    w->synced_hs = w->hs;
    w->synced_have_hs = w->have_hs;
    w->opening = false;
    kv_wal_storage_init(w);
    *out = w;
    return 0;
fail:
    kv_wal_close(w);
    return rc;
}

void kv_wal_close(kv_wal *w)
{
    if (!w)
        return;
    for (size_t k = 0; k < w->n_segs; k++)
        if (w->segs[k].fd >= 0)
            close(w->segs[k].fd);
    free(w->segs);
    if (w->dirfd >= 0)
        close(w->dirfd);
    kv_wal_idx_free(w);
    free(w->pend);
    free(w->dir);
    free(w);
}

int kv_wal_is_empty(const kv_wal *w)
{
    return !w->have_hs && w->snap.index == 0 && w->n_ents == 0;
}

int kv_wal_error(const kv_wal *w)
{
    return w->err;
}

void kv_wal_stats(const kv_wal *w, struct kv_wal_stats *s)
{
    uint64_t bytes = 0;
    for (size_t i = 0; i < w->n_segs; i++)
        bytes += w->segs[i].size;
    *s = (struct kv_wal_stats){.bytes = bytes,
                               .first = w->snap.index + 1,
                               .last = w->n_ents ? kv_wal_last(w) : w->snap.index,
                               .segments = w->n_segs,
                               .first_seq = w->n_segs ? w->segs[0].seq : 0,
                               .fsyncs = w->fsyncs,
                               .cached_bytes = w->cached_bytes,
                               .torn_seq = w->torn_seq,
                               .torn_off = w->torn_off};
}
