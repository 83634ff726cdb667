/* tls_auto.c - self-signed certificates for --auto-tls / --peer-auto-tls; see tls_auto.h. */
#include "daemon/tls_auto.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* One side (client or peer): generate or reuse <data-dir>/fixtures/<side>, fill the paths. */
static int prepare_side(const kv_config *cfg, const char *side, const kv_url *urls, size_t n,
                        char *cert, char *key, size_t cap, char *err, size_t errlen)
{
    const char *hosts[KV_MAX_URLS];
    for (size_t i = 0; i < n; i++)
        hosts[i] = urls[i].host;
    char dir[768];
    if (snprintf(dir, sizeof(dir), "%s/fixtures/%s", cfg->data_dir, side) >= (int)sizeof(dir)) {
        snprintf(err, errlen, "--data-dir too long for --%sauto-tls",
                 strcmp(side, "peer") == 0 ? "peer-" : "");
        return -ENAMETOOLONG;
    }
    int rc = kv_tls_self_cert(dir, hosts, n, cfg->self_signed_cert_validity, err, errlen);
    if (rc < 0)
        return rc;
    if (snprintf(cert, cap, "%s/cert.pem", dir) >= (int)cap ||
        snprintf(key, cap, "%s/key.pem", dir) >= (int)cap) {
        snprintf(err, errlen, "%s: path too long", dir);
        return -ENAMETOOLONG;
    }
    return 0;
}

int kv_tls_auto_prepare(kv_config *cfg, char *err, size_t errlen)
{
    int rc;
    if (cfg->auto_tls && cfg->cert_file[0]) {
        fprintf(stderr, "kvd: warning: ignoring client auto TLS since certs given\n");
    } else if (cfg->auto_tls) {
        rc = prepare_side(cfg, "client", cfg->listen_client, cfg->n_listen_client, cfg->cert_file,
                          cfg->key_file, sizeof(cfg->cert_file), err, errlen);
        if (rc < 0)
            return rc;
    }
    if (cfg->peer_auto_tls && cfg->peer_cert_file[0]) {
        fprintf(stderr, "kvd: warning: ignoring peer auto TLS since certs given\n");
    } else if (cfg->peer_auto_tls) {
        rc = prepare_side(cfg, "peer", cfg->listen_peer, cfg->n_listen_peer, cfg->peer_cert_file,
                          cfg->peer_key_file, sizeof(cfg->peer_cert_file), err, errlen);
        if (rc < 0)
            return rc;
        cfg->peer_auto_verify_off = 1;
    }
    return 0;
}
