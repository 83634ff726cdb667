/*
 * test_client_sendbuf: libkvclient's outgoing byte queue (client/src/sendbuf.h), the bound of
 * every stream's and kvc_bidi's send buffer (max_send_bytes). The bound counts the bytes not
 * yet taken by HTTP/2; the ones already taken are reclaimed. When it counted every byte
 * appended since the buffer last ran empty, a stream whose reader kept taking part of the
 * bytes without ever emptying it was refused with a few bytes pending (RESOURCE_EXHAUSTED
 * "kvclient: stream send buffer full").
 */
#include "../../client/src/sendbuf.h"

#include <criterion/criterion.h>

#include <nghttp2/nghttp2.h>
#include <stdint.h>
#include <string.h>

#define MAX 1000u

Test(client_sendbuf, the_bound_counts_the_bytes_not_yet_taken)
{
    struct kvc_sendbuf b = {0};
    uint8_t out[64];
    /* 95-byte payloads: 100-byte frames. A reader that takes 60 bytes after each append never
     * empties the buffer: 40 bytes more stay behind at each round. */
    size_t appended = 0;
    for (int i = 0; i < 20; i++) {
        uint8_t *d = kvc_sendbuf_frame(&b, 95, MAX);
        cr_assert_not_null(d, "append %d refused with %zu bytes pending (%zu appended)", i,
                           b.len - b.off, appended);
        memset(d, (int)i, 95);
        appended += 100;
        cr_assert_eq(kvc_sendbuf_read(&b, out, 60), 60);
    }
    cr_assert_gt(appended, MAX, "the test appended no more than the bound: it proves nothing");
    cr_assert_eq(b.len - b.off, 20u * 40u);
    /* the bytes already read were moved out: the allocation stays under 4 x the bound */
    cr_assert_lt(b.cap, 4u * MAX, "allocation %zu: the bytes already taken were kept", b.cap);
    /* the bound still holds for what is pending */
    cr_assert_null(kvc_sendbuf_frame(&b, 200, MAX), "800 pending + 205 > 1000 was taken");
    cr_assert_not_null(kvc_sendbuf_frame(&b, 195, MAX), "800 pending + 200 = 1000 was refused");
    /* drained: every byte comes out, then the reader is deferred */
    size_t left = b.len - b.off, got = 0;
    ssize_t r;
    while ((r = kvc_sendbuf_read(&b, out, sizeof out)) > 0)
        got += (size_t)r;
    cr_assert_eq(r, NGHTTP2_ERR_DEFERRED);
    cr_assert_eq(got, left);
    kvc_sendbuf_free(&b);
}

Test(client_sendbuf, reclaimed_bytes_keep_the_frames_intact)
{
    struct kvc_sendbuf b = {0};
    uint8_t out[7], all[4096];
    size_t n_all = 0;
    /* frames of payload i (1..30 bytes of value i), read 7 bytes at a time in between: the
     * allocation (256 bytes first) fills while bytes are pending, and the read ones are moved
     * out */
    for (int i = 1; i <= 30; i++) {
        uint8_t *d = kvc_sendbuf_frame(&b, (size_t)i, 1024);
        cr_assert_not_null(d, "frame %d", i);
        memset(d, i, (size_t)i);
        ssize_t r = kvc_sendbuf_read(&b, out, sizeof out);
        cr_assert_gt(r, 0);
        memcpy(all + n_all, out, (size_t)r);
        n_all += (size_t)r;
    }
    ssize_t r;
    while ((r = kvc_sendbuf_read(&b, out, sizeof out)) > 0) {
        memcpy(all + n_all, out, (size_t)r);
        n_all += (size_t)r;
    }
    /* the byte stream is the 30 frames back to back: 5-byte prefix (0, big-endian length),
     * then the payload */
    size_t at = 0;
    for (int i = 1; i <= 30; i++) {
        cr_assert_leq(at + 5 + (size_t)i, n_all);
        cr_assert_eq(all[at], 0);
        cr_assert_eq(all[at + 4], i, "frame %d's length", i);
        for (int k = 0; k < i; k++)
            cr_assert_eq(all[at + 5 + (size_t)k], i, "frame %d byte %d", i, k);
        at += 5 + (size_t)i;
    }
    cr_assert_eq(at, n_all);
    kvc_sendbuf_free(&b);
}
