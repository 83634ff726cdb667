/*
 * tls_auto: etcd's --auto-tls and --peer-auto-tls. A member started with one of them and no
 * certificate of its own gets a self-signed one: an ECDSA P-256 key and an X.509 v3
 * certificate (subject O=etcd, serverAuth and clientAuth, SANs from the listen URLs' hosts,
 * valid --self-signed-cert-validity years) written as cert.pem and key.pem (mode 0600) under
 * <data-dir>/fixtures/client or <data-dir>/fixtures/peer. An existing pair there is reused,
 * as etcd's transport.SelfCert does, so a restart keeps its certificate.
 *
 * What follows from a self-signed certificate (etcd's behaviour):
 *   - the client port serves TLS with it and does not require client certificates;
 *   - on the peer port, members present it both ways and do not verify each other's
 *     certificates (the dialer skips verification: there is no CA to verify against).
 * A certificate given with --cert-file / --peer-cert-file wins: the auto flag is then ignored
 * with a warning, as etcd does.
 *
 * Called once at startup, after the data dir exists and is locked, before the TLS contexts
 * are built (tls_setup.h). Loop thread, before the loop runs. Returns 0 or a negative errno
 * with a one-line reason in err.
 */
#ifndef KV_TLS_AUTO_H
#define KV_TLS_AUTO_H

#include <stddef.h>

#include "daemon/config.h"
#include "net/tls_self.h"

/* Fills cfg's cert/key paths (and cfg->peer_auto_verify_off) from the generated or reused
 * pair when --auto-tls / --peer-auto-tls apply. */
int kv_tls_auto_prepare(kv_config *cfg, char *err, size_t errlen);

#endif
