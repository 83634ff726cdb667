/*
 * tls_setup: builds kvd's TLS contexts (server/net/tls.h) from the configuration: the client
 * port's server context and the peer port's server and client contexts, each counting
 * kvd_tls_handshakes_total{port=...} and kvd_tls_handshake_failures_total{port=...} and
 * logging failures to stderr ("kvd: tls (client): TLS handshake with ... failed: ...").
 * Loop thread (startup) only.
 */
#ifndef KV_TLS_SETUP_H
#define KV_TLS_SETUP_H

#include <stddef.h>

#include "daemon/config.h"
#include "metrics/metrics.h"
#include "net/tls.h"

/* Client port: a server context from --cert-file/--key-file/--trusted-ca-file/
 * --client-cert-auth, or *out = NULL if no client or metrics listen URL is https. metrics may be
 * NULL. Returns 0 or a negative errno with a message in err. The caller unrefs *out. */
int kv_tls_setup_client_port(const kv_config *cfg, kv_metrics *metrics, kv_tls_ctx **out, char *err,
                             size_t errlen);

/* Peer port: server (accept) and client (dial) contexts from the --peer-* flags, or NULL
 * when no --peer-cert-file and no --peer-trusted-ca-file is given and no peer URL is https.
 * The caller unrefs both. */
int kv_tls_setup_peer(const kv_config *cfg, kv_metrics *metrics, kv_tls_ctx **server,
                      kv_tls_ctx **client, char *err, size_t errlen);

#endif
