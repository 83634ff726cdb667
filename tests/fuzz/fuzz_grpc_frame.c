/*
 * fuzz_grpc_frame - the gRPC wire helpers of server/grpc/grpc_wire.c.
 *
 * Input: byte 0 selects the target, the rest is its input.
 *   0..1  deframer: bytes 1-2 pick max_len (0..65535) and a chunk-size seed; the rest is a
 *         DATA byte stream fed in chunks of varying size (1..256 bytes). The callback checks
 *         each message against max_len and sometimes stops the feed (KV_GRPC_DF_STOPPED),
 *         after which feeding resumes at *consumed, as grpc_call.c does.
 *   2     grpc-timeout parser (result must be within the spec's range).
 *   3     grpc-message percent-encoding: decode(encode(x)) == x (up to the first NUL).
 * Invariants checked (abort on violation): consumed <= fed, messages never exceed max_len,
 * the deframer's buffered bytes never exceed max_len, a body is reassembled byte-exact
 * (its bytes are compared with a copy kept by the harness when the body arrived in pieces
 * that the harness can locate: every body is checked against the input stream).
 */
#include "fuzz.h"
#include "grpc/grpc_wire.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct frame_ctx {
    size_t max_len;
    unsigned n_msgs;
    uint8_t seed;
    const uint8_t *stream; /* the whole DATA stream */
    size_t stream_len;
    size_t stream_pos; /* where the next message's prefix starts in stream */
} frame_ctx;

static int on_msg(void *arg, const uint8_t *msg, size_t len)
{
    frame_ctx *f = arg;
    if (len > f->max_len)
        abort();
    /* The message is the 5-byte prefix's body in the original stream. */
    if (f->stream_pos + 5 + len > f->stream_len)
        abort();
    if (len && memcmp(msg, f->stream + f->stream_pos + 5, len) != 0)
        abort();
    f->stream_pos += 5 + len;
    f->n_msgs++;
    return ((f->seed + f->n_msgs) % 5) == 0; /* sometimes stop, as a paused call does */
}

static void fuzz_deframer(const uint8_t *data, size_t size)
{
    if (size < 2)
        return;
    frame_ctx f = {0};
    f.max_len = (size_t)data[0] << 8 | data[1];
    f.seed = data[0] ^ data[1];
    data += 2;
    size -= 2;
    f.stream = data;
    f.stream_len = size;
    kv_grpc_deframer d;
    kv_grpc_deframer_init(&d, f.max_len);
    size_t off = 0;
    unsigned step = 0;
    while (off < size) {
        size_t chunk = 1 + ((f.seed * 31u + step * 17u) % 256u);
        step++;
        if (chunk > size - off)
            chunk = size - off;
        size_t fed = 0;
        while (fed < chunk) {
            size_t consumed = 0;
            int rc =
                kv_grpc_deframer_feed(&d, data + off + fed, chunk - fed, &consumed, on_msg, &f);
            if (consumed > chunk - fed)
                abort();
            fed += consumed;
            if (kv_grpc_deframer_buffered(&d) > f.max_len)
                abort();
            if (rc < 0)
                goto done; /* the deframer is unusable after an error, as in grpc_call.c */
            if (rc == 0 && fed != chunk)
                abort();
        }
        off += chunk;
    }
    /* Every complete message must have been delivered. */
    if (!kv_grpc_deframer_partial(&d) && f.stream_pos != size)
        abort();
done:
    kv_grpc_deframer_free(&d);
}

static void fuzz_timeout(const uint8_t *data, size_t size)
{
    uint64_t ms = 0;
    if (kv_grpc_parse_timeout((const char *)data, size, &ms) == 0) {
        /* 8 digits of hours is the largest value the spec allows. */
        if (ms > 99999999ULL * 3600ULL * 1000ULL)
            abort();
    }
}

static void fuzz_percent(const uint8_t *data, size_t size)
{
    char *in = malloc(size + 1);
    if (in == NULL)
        return;
    memcpy(in, data, size);
    in[size] = '\0';
    char *enc = kv_grpc_percent_encode(in);
    if (enc != NULL) {
        size_t elen = strlen(enc);
        for (size_t i = 0; i < elen; i++)
            if (enc[i] < 0x20 || enc[i] > 0x7e)
                abort();
        char *dec = malloc(elen + 1);
        if (dec != NULL) {
            size_t dlen = kv_grpc_percent_decode(enc, elen, dec);
            if (dlen != strlen(in) || memcmp(dec, in, dlen) != 0)
                abort();
            free(dec);
        }
        free(enc);
    }
    /* Decoding arbitrary (possibly malformed) escapes. */
    char *out = malloc(size + 1);
    if (out != NULL) {
        if (kv_grpc_percent_decode((const char *)data, size, out) > size)
            abort();
        free(out);
    }
    free(in);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    switch (data[0] & 3) {
    case 0:
    case 1:
        fuzz_deframer(data + 1, size - 1);
        break;
    case 2:
        fuzz_timeout(data + 1, size - 1);
        break;
    default:
        fuzz_percent(data + 1, size - 1);
        break;
    }
    (void)kv_grpc_code_name(size > 1 ? (int)data[1] - 8 : 0);
    return 0;
}
