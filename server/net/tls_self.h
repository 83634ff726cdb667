/*
 * tls_self: a self-signed certificate, as etcd's transport.SelfCert makes for --auto-tls,
 * --peer-auto-tls (kvd) and the grpc-proxy's --auto-tls: an ECDSA P-256 key and an X.509 v3
 * certificate (subject O=etcd, serverAuth and clientAuth, the given hosts as SANs), written
 * as cert.pem and key.pem (mode 0600) in a directory. An existing pair there is reused, so a
 * restart keeps its certificate.
 *
 * Blocking file I/O: call at startup, before the loop runs. Any thread, no shared state.
 */
#ifndef KV_NET_TLS_SELF_H
#define KV_NET_TLS_SELF_H

#include <stddef.h>

/* Makes (or reuses) dir/cert.pem and dir/key.pem for hosts (n of them; IP literals become
 * IP SANs, other names DNS SANs), valid years years. Creates dir (mode 0700) if needed.
 * Returns 0 or a negative errno with a one-line reason in err. */
int kv_tls_self_cert(const char *dir, const char *const *hosts, size_t n, unsigned years, char *err,
                     size_t errlen);

#endif
