/*
 * fuzz_lease - the lease stream and the lessor, through an in-process kvd (fuzz_kvd.h):
 * LeaseKeepAlive request decoding and renewals (server/api/service_lease.c on_keepalive,
 * kv_lessor_renew), grants/revokes through the apply path into the lessor's map and heap
 * (kv_lessor_check_grant, clamp_ttl, on_granted/on_revoked), TimeToLive with keys, Leases,
 * and stream half-close / reset while renewals are in flight.
 *
 * Input: a script of records <op><len><len bytes of payload> (payload = a protobuf message
 * as the client would send it; the harness adds gRPC and HTTP/2 framing with fuzz_h2c.h):
 *   op % 8 == 0  LeaseGrant(payload)          unary
 *             1  LeaseRevoke(payload)         unary
 *             2  LeaseKeepAlive message       on the current keepalive stream (opened on
 *                                             first use; up to 8 streams per input)
 *             3  LeaseTimeToLive(payload)     unary
 *             4  LeaseLeases(payload)         unary
 *             5  half-close the keepalive stream (the next op 2 opens a new one)
 *             6  reset (RST_STREAM CANCEL) the keepalive stream
 *             7  sync: the bytes so far are sent and the harness waits until the server
 *                processed them and the apply path drained (grants become leases)
 * Responses are parsed by the client session (stream states, flow control).
 */
#include "fuzz.h"
#include "fuzz_h2c.h"
#include "fuzz_kvd.h"
#include "lease/lessor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static kv_fuzz_kvd *g_kvd; /* the one kvd of this process (libFuzzer gives no context arg) */

typedef struct script {
    const uint8_t *p;
    size_t n, off;
    kv_fuzz_h2c *cli;
    int ka;       /* current keepalive stream handle, -1 none */
    int ka_count; /* keepalive streams opened */
    int done;
} script;

static void unary(script *s, const char *path, const uint8_t *msg, size_t len)
{
    int h = kv_fuzz_h2c_open(s->cli, path, NULL);
    if (h < 0)
        return;
    kv_fuzz_h2c_send(s->cli, h, msg, len);
    kv_fuzz_h2c_end(s->cli, h);
}

/* Runs records up to the next sync (or the end) and returns the client bytes to send. */
static int next_chunk(void *arg, const uint8_t **p, size_t *n)
{
    script *s = arg;
    if (s->done || kv_fuzz_h2c_failed(s->cli))
        return 1;
    while (s->off + 2 <= s->n) {
        uint8_t op = s->p[s->off] & 7;
        size_t len = s->p[s->off + 1];
        s->off += 2;
        if (len > s->n - s->off)
            len = s->n - s->off;
        const uint8_t *msg = s->p + s->off;
        s->off += len;
        if (op == 7)
            break;
        switch (op) {
        case 0:
            unary(s, "/etcdserverpb.Lease/LeaseGrant", msg, len);
            break;
        case 1:
            unary(s, "/etcdserverpb.Lease/LeaseRevoke", msg, len);
            break;
        case 2:
            if (s->ka < 0 && s->ka_count < 8) {
                s->ka = kv_fuzz_h2c_open(s->cli, "/etcdserverpb.Lease/LeaseKeepAlive", NULL);
                s->ka_count++;
            }
            if (s->ka >= 0)
                kv_fuzz_h2c_send(s->cli, s->ka, msg, len);
            break;
        case 3:
            unary(s, "/etcdserverpb.Lease/LeaseTimeToLive", msg, len);
            break;
        case 4:
            unary(s, "/etcdserverpb.Lease/LeaseLeases", msg, len);
            break;
        case 5:
            if (s->ka >= 0)
                kv_fuzz_h2c_end(s->cli, s->ka);
            s->ka = -1;
            break;
        default:
            if (s->ka >= 0)
                kv_fuzz_h2c_reset(s->cli, s->ka);
            s->ka = -1;
            break;
        }
    }
    if (s->off + 2 > s->n)
        s->done = 1;
    if (kv_fuzz_h2c_pull(s->cli, p, n) != 0)
        return 1;
    return 0;
}

static void on_out(void *arg, const uint8_t *p, size_t n)
{
    script *s = arg;
    kv_fuzz_h2c_recv(s->cli, p, n);
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
        fprintf(stderr, "fuzz_lease: cannot start kvd\n");
        abort();
    }
    atexit(teardown);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    script s = {.p = data, .n = size, .ka = -1};
    if (kv_fuzz_h2c_new(&s.cli) != 0)
        return 0;
    kv_fuzz_kvd_session(g_kvd, next_chunk, on_out, &s);
    /* The server must always speak valid HTTP/2 to a valid client. */
    if (kv_fuzz_h2c_failed(s.cli)) {
        fprintf(stderr, "fuzz_lease: the server sent bytes the client session rejects\n");
        abort();
    }
    if (getenv("KV_FUZZ_VERBOSE"))
        fprintf(stderr, "fuzz_lease: %u response frames, %zu leases\n",
                kv_fuzz_h2c_responses(s.cli), kv_lessor_count(g_kvd->srv.api.lessor));
    kv_fuzz_h2c_free(s.cli);
    if (kv_fuzz_kvd_maybe_reset(g_kvd) != 0)
        abort();
    return 0;
}
