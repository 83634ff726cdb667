/*
 * fuzz_h2_server - arbitrary client bytes into a server connection of an in-process kvd
 * (fuzz_kvd.h): kvd's socket read path, nghttp2 session with kvd's callbacks
 * (server/grpc/grpc_conn.c), the gRPC call layer (grpc_call.c: routing, header checks,
 * deframing, limits, deadlines, pause/resume) and the real services (Range answered from the
 * store, writes proposed and applied by the node, leases, maintenance, cluster).
 *
 * Input: the client byte stream of one connection, starting with the HTTP/2 preface. A 0xff
 * byte sequence "\xff\xffSYNC\xff\xff" splits it into chunks; after each chunk the harness
 * waits until the server processed it and the apply path drained, so later bytes see the
 * effects (responses, applied writes). Corpus: corpus/fuzz_h2_server (made by gen_corpus.c),
 * dictionary: fuzz_h2_server.dict.
 */
#include "fuzz.h"
#include "fuzz_kvd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static kv_fuzz_kvd *g_kvd; /* the one kvd of this process (libFuzzer gives no context arg) */

static const uint8_t SYNC[] = {0xff, 0xff, 'S', 'Y', 'N', 'C', 0xff, 0xff};

typedef struct chunker {
    const uint8_t *p;
    size_t n, off;
    size_t out_bytes; /* server bytes received */
} chunker;

static void count_out(void *arg, const uint8_t *p, size_t n)
{
    (void)p;
    ((chunker *)arg)->out_bytes += n;
}

static int next_chunk(void *arg, const uint8_t **p, size_t *n)
{
    chunker *ch = arg;
    if (ch->off >= ch->n)
        return 1;
    const uint8_t *start = ch->p + ch->off;
    size_t left = ch->n - ch->off;
    const uint8_t *sep = memmem(start, left, SYNC, sizeof(SYNC));
    size_t len = sep ? (size_t)(sep - start) : left;
    *p = start;
    *n = len;
    ch->off += len + (sep ? sizeof(SYNC) : 0);
    return 0;
}

static void teardown(void)
{
    if (g_kvd) {
        kv_fuzz_kvd_stop(g_kvd);
        free(g_kvd);
        g_kvd = NULL;
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    g_kvd = calloc(1, sizeof(*g_kvd));
    if (g_kvd == NULL || kv_fuzz_kvd_start(g_kvd) != 0) {
        fprintf(stderr, "fuzz_h2_server: cannot start kvd\n");
        abort();
    }
    atexit(teardown);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    chunker ch = {data, size, 0, 0};
    kv_fuzz_kvd_session(g_kvd, next_chunk, count_out, &ch);
    if (getenv("KV_FUZZ_VERBOSE"))
        fprintf(stderr, "fuzz_h2_server: %zu bytes in, %zu bytes out, revision %lld\n", size,
                ch.out_bytes, (long long)kv_node_revision(g_kvd->srv.api.node));
    if (kv_fuzz_kvd_maybe_reset(g_kvd) != 0)
        abort();
    return 0;
}
