/*
 * px_connmem: what an agent connection costs a gRPC server in memory. Opens n h2c
 * connections (tests/lib's grpc_raw), each with one LeaseKeepAlive stream that has sent one
 * renewal of a shared lease and read its answer -- the state of an agent between two
 * renewals -- and reads a process's VmRSS (/proc/PID/status). Used by tests/proxy's
 * proxy_conn_mem and bench/conn's connbench (docs/proxy.md, server/grpc/README.md).
 *
 * Ownership: px_connmem is caller-owned; px_connmem_close frees what px_connmem_open made
 * (also after a failed open). Threads: one caller thread. Every wait is bounded.
 */
#ifndef PX_CONNMEM_H
#define PX_CONNMEM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct kv_it_grpc kv_it_grpc;
typedef struct kv_it_grpc_stream kv_it_grpc_stream;

typedef struct px_connmem {
    kv_it_grpc **conn;
    kv_it_grpc_stream **st;
    int n; /* connections open */
} px_connmem;

/* Opens n connections to 127.0.0.1:port (in batches of 100: connect, stream, renewal of
 * lease, then every answer of the batch, 10 s each); over TLS when ssl_ctx (an SSL_CTX *
 * offering ALPN h2) is given, else h2c. 0, or a negative errno with err set. */
int px_connmem_open(px_connmem *m, uint16_t port, void *ssl_ctx, int64_t lease, int n, char *err,
                    size_t cap);
/* One more renewal on every stream, answers awaited. 0 or a negative errno with err set. */
int px_connmem_renew(px_connmem *m, int64_t lease, char *err, size_t cap);
void px_connmem_close(px_connmem *m);

#endif
