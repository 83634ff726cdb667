/*
 * sendbuf.h - the outgoing byte queue of a long-lived client-streaming gRPC call (the shared
 * Watch and LeaseKeepAlive streams): framed messages are appended on the I/O thread and
 * drained by the stream's nghttp2 data source read callback.
 *
 * Ownership: the buffer owns buf (kvc_sendbuf_free). A zeroed struct is an empty buffer.
 * Thread: the client's I/O thread only. Internal to libkvclient (not exported).
 */
#ifndef KVC_SENDBUF_H
#define KVC_SENDBUF_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct kvc_sendbuf {
    uint8_t *buf;
    size_t len, off, cap; /* bytes [off, len) are still to be sent */
    int deferred;         /* the read callback deferred the stream: resume it on append */
};

/* Append a gRPC message frame (5-byte prefix, uncompressed) with an n-byte payload, keeping
 * the bytes not yet read (len - off) <= max; the bytes already read are reclaimed (moved
 * out) when the allocation is full and they are at least as many as the unread ones (so a
 * byte is moved a bounded number of times however full the buffer stays), or before the
 * bytes held would pass 2 * max: the allocation stays under 4 * max. Returns where the
 * caller writes the payload, or NULL when the unread bytes would exceed max or on
 * out-of-memory (nothing appended). A stream whose reader keeps taking some of the bytes
 * without ever emptying the buffer is not refused for the bytes it already sent. */
uint8_t *kvc_sendbuf_frame(struct kvc_sendbuf *b, size_t n, size_t max);
/* nghttp2 data source read: copy up to length bytes into out; when nothing is pending, set
 * deferred and return NGHTTP2_ERR_DEFERRED. The buffer is rewound once drained. */
ssize_t kvc_sendbuf_read(struct kvc_sendbuf *b, uint8_t *out, size_t length);
/* Drop the pending bytes (the stream is gone); keeps the allocation and deferred. */
void kvc_sendbuf_clear(struct kvc_sendbuf *b);
void kvc_sendbuf_free(struct kvc_sendbuf *b);

#endif
