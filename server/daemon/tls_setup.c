/* tls_setup.c - kvd's TLS contexts from the flags; see tls_setup.h. */
#include "daemon/tls_setup.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct tls_hooks {
    kv_metric *ok, *fail;
} tls_hooks;

static void on_handshake(void *arg, int ok)
{
    tls_hooks *h = arg;
    kv_metric_inc(ok ? h->ok : h->fail);
}

static void on_log(void *arg, const char *line)
{
    (void)arg;
    fprintf(stderr, "kvd: %s\n", line);
}

static int make_ctx(kv_metrics *metrics, const char *port, kv_tls_options *o, kv_tls_ctx **out,
                    char *err, size_t errlen)
{
    tls_hooks *h = calloc(1, sizeof(*h));
    if (!h)
        return -ENOMEM;
    char labels[32];
    snprintf(labels, sizeof(labels), "port=\"%s\"", port);
    if (metrics) {
        h->ok = kv_metrics_counter(metrics, "kvd_tls_handshakes_total",
                                   "TLS handshakes completed, by port.", labels);
        h->fail = kv_metrics_counter(metrics, "kvd_tls_handshake_failures_total",
                                     "TLS handshakes that failed (bad certificate, wrong CA, "
                                     "garbage, plain HTTP on a TLS port), by port.",
                                     labels);
    }
    o->label = port;
    o->on_handshake = on_handshake;
    o->log = on_log;
    o->arg = h;
    o->free_arg = free;
    int rc = kv_tls_ctx_new(out, o, err, errlen);
    if (rc < 0)
        free(h);
    return rc;
}

static const char *opt(const char *s)
{
    return s[0] ? s : NULL;
}

/* --cipher-suites as an OpenSSL list in buf; NULL when unset (the transport's policy). */
static int ciphers_of(const kv_config *cfg, char *buf, size_t cap, const char **out, char *err,
                      size_t errlen)
{
    *out = NULL;
    if (!cfg->cipher_suites[0])
        return 0;
    int rc = kv_tls_cipher_list(cfg->cipher_suites, buf, cap, err, errlen);
    if (rc == 0 && buf[0])
        *out = buf;
    return rc;
}

int kv_tls_setup_client_port(const kv_config *cfg, kv_metrics *metrics, kv_tls_ctx **out, char *err,
                             size_t errlen)
{
    *out = NULL;
    int any = 0;
    for (size_t i = 0; i < cfg->n_listen_client; i++)
        any |= cfg->listen_client[i].tls;
    for (size_t i = 0; i < cfg->n_listen_metrics; i++)
        any |= cfg->listen_metrics[i].tls; /* https --listen-metrics-urls share it, as etcd */
    if (!any)
        return 0;
    char cbuf[2048];
    const char *ciphers;
    int rc = ciphers_of(cfg, cbuf, sizeof(cbuf), &ciphers, err, errlen);
    if (rc < 0)
        return rc;
    kv_tls_options o = {.cert_file = opt(cfg->cert_file),
                        .key_file = opt(cfg->key_file),
                        .ca_file = opt(cfg->trusted_ca_file),
                        .server = 1,
                        /* etcd 3.4 TLSInfo.ServerConfig: a trusted CA requires certificates */
                        .verify_peer = cfg->client_cert_auth || cfg->trusted_ca_file[0],
                        .crl_file = opt(cfg->client_crl_file),
                        .ciphers = ciphers};
    return make_ctx(metrics, "client", &o, out, err, errlen);
}

int kv_tls_setup_peer(const kv_config *cfg, kv_metrics *metrics, kv_tls_ctx **server,
                      kv_tls_ctx **client, char *err, size_t errlen)
{
    *server = *client = NULL;
    int any = cfg->peer_cert_file[0] || cfg->peer_trusted_ca_file[0];
    for (size_t i = 0; i < cfg->n_listen_peer; i++)
        any |= cfg->listen_peer[i].tls;
    for (size_t i = 0; i < cfg->n_initial_cluster; i++)
        any |= cfg->initial_cluster[i].url.tls;
    if (!any)
        return 0;
    char cbuf[2048];
    const char *ciphers;
    int rc = ciphers_of(cfg, cbuf, sizeof(cbuf), &ciphers, err, errlen);
    if (rc < 0)
        return rc;
    if (cfg->peer_cert_file[0]) {
        kv_tls_options so = {.cert_file = opt(cfg->peer_cert_file),
                             .key_file = opt(cfg->peer_key_file),
                             .ca_file = opt(cfg->peer_trusted_ca_file),
                             .server = 1,
                             .verify_peer =
                                 cfg->peer_client_cert_auth || cfg->peer_trusted_ca_file[0],
                             .crl_file = opt(cfg->peer_crl_file),
                             .ciphers = ciphers,
                             .allowed_cn = opt(cfg->peer_cert_allowed_cn),
                             .allowed_hostname = opt(cfg->peer_cert_allowed_hostname)};
        rc = make_ctx(metrics, "peer", &so, server, err, errlen);
        if (rc < 0)
            return rc;
    }
    /* The dialer presents the same certificate (etcd: peer cert is also the client cert). */
    kv_tls_options co = {.cert_file = opt(cfg->peer_cert_file),
                         .key_file = opt(cfg->peer_key_file),
                         .ca_file = opt(cfg->peer_trusted_ca_file),
                         .server = 0,
                         /* --peer-auto-tls: self-signed on every side, nothing to verify
                          * against (etcd: InsecureSkipVerify for self-signed peers) */
                         .insecure_skip_verify = cfg->peer_auto_verify_off,
                         /* with https peers from DNS SRV and no trusted CA: the domain */
                         .server_name = opt(cfg->peer_server_name),
                         .ciphers = ciphers,
                         .allowed_cn = opt(cfg->peer_cert_allowed_cn),
                         .allowed_hostname = opt(cfg->peer_cert_allowed_hostname)};
    rc = make_ctx(metrics, "peer", &co, client, err, errlen);
    if (rc < 0) {
        kv_tls_ctx_unref(*server);
        *server = NULL;
    }
    return rc;
}
