/* ka_stream: see ka_stream.h. */
#include "ka_stream.h"

#include <errno.h>
#include <stdlib.h>

#include "grpc_raw.h"
#include "rpc.pb-c.h"

struct kvli_ka {
    kv_it_grpc *conn;
    kv_it_grpc_stream *st; /* owned by conn */
};

int kvli_ka_open(kvli_ka **out, uint16_t port, uint32_t timeout_ms)
{
    kvli_ka *ka = calloc(1, sizeof(*ka));
    if (!ka)
        return -ENOMEM;
    int rc = kv_it_grpc_open_opts(&ka->conn, "127.0.0.1", port, timeout_ms, NULL);
    if (rc)
        goto fail;
    ka->st = kv_it_grpc_stream_start(ka->conn, "/etcdserverpb.Lease/LeaseKeepAlive", NULL);
    if (!ka->st) {
        rc = -EPROTO;
        goto fail;
    }
    if ((rc = kv_it_grpc_flush(ka->conn, timeout_ms)))
        goto fail;
    *out = ka;
    return 0;
fail:
    kvli_ka_close(ka);
    return rc;
}

void kvli_ka_close(kvli_ka *ka)
{
    if (!ka)
        return;
    kv_it_grpc_close(ka->conn);
    free(ka);
}

int kvli_ka_grpc_status(const kvli_ka *ka)
{
    return ka->st->grpc_status;
}

int kvli_ka_send(kvli_ka *ka, int64_t id, uint32_t timeout_ms)
{
    if (ka->st->closed)
        return -ECONNRESET;
    Etcdserverpb__LeaseKeepAliveRequest r = ETCDSERVERPB__LEASE_KEEP_ALIVE_REQUEST__INIT;
    r.id = id;
    uint8_t buf[32];
    size_t len = etcdserverpb__lease_keep_alive_request__pack(&r, buf);
    int rc = kv_it_grpc_send_msg(ka->st, buf, len, 0);
    return rc ? rc : kv_it_grpc_flush(ka->conn, timeout_ms);
}

int kvli_ka_recv(kvli_ka *ka, int64_t *id, int64_t *ttl, uint32_t timeout_ms)
{
    uint8_t *m = NULL;
    size_t len = 0;
    int rc = kv_it_grpc_stream_recv(ka->st, &m, &len, timeout_ms);
    if (rc)
        return rc;
    Etcdserverpb__LeaseKeepAliveResponse *r =
        etcdserverpb__lease_keep_alive_response__unpack(NULL, len, m);
    free(m);
    if (!r)
        return -EPROTO;
    *id = r->id;
    *ttl = r->ttl;
    etcdserverpb__lease_keep_alive_response__free_unpacked(r, NULL);
    return 0;
}
