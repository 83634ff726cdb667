/*
 * conn_tls.c - TLS for https:// endpoints: the client context (kvc_open) and the
 * per-connection layer between the socket and the nghttp2 session (server/net/tls.h, OpenSSL
 * memory BIOs; compiled into the library, not exported). I/O thread, except kvc_tls_open.
 */
#include "internal.h"
#include "net/tls.h"

#include <errno.h>
#include <stdio.h>

int kvc_tls_open(kvc_client *c, const kvc_config *cfg, kvc_error *err)
{
    int any = 0;
    for (size_t i = 0; i < c->n_eps; i++)
        any |= c->eps[i].tls;
    if (!any)
        return 0;
    kv_tls_options o = {.cert_file = cfg->cert_file,
                        .key_file = cfg->key_file,
                        .ca_file = cfg->ca_file,
                        .server = 0,
                        .insecure_skip_verify = cfg->insecure_skip_verify,
                        .label = "kvclient"};
    char why[200] = "";
    int rc = kv_tls_ctx_new(&c->tls, &o, why, sizeof why);
    if (rc == -ENOMEM)
        return kvc_fail(err, KVC_RESOURCE_EXHAUSTED, "kvclient: out of memory");
    if (rc < 0)
        return kvc_fail(err, KVC_INVALID_ARGUMENT, "kvclient: TLS: %s", why);
    return 0;
}

int kvc_tls_conn_start(struct kvc_conn *cn)
{
    kvc_client *c = cn->c;
    const struct kvc_endpoint *ep = &c->eps[c->ep_idx];
    if (!ep->tls || !c->tls)
        return 0;
    const char *verify = c->server_name[0] ? c->server_name : ep->host;
    int rc = kv_tls_conn_new(c->tls, ep->text, verify, &cn->tls);
    if (rc < 0)
        return rc;
    return kv_tls_conn_start(cn->tls);
}

static int plain_in(void *arg, const uint8_t *p, size_t n)
{
    struct kvc_conn *cn = arg;
    ssize_t rv = nghttp2_session_mem_recv(cn->h2, p, n);
    if (rv < 0)
        return (int)rv; /* an nghttp2 error (negative, below -500) */
    return cn->dead ? 1 : 0;
}

int kvc_tls_conn_recv(struct kvc_conn *cn, const uint8_t *in, size_t len, char *why, size_t cap)
{
    int rc = kv_tls_conn_recv(cn->tls, in, len, plain_in, cn);
    if (rc == 0 || rc == 1)
        return 0;
    if (rc <= -500)
        snprintf(why, cap, "HTTP/2 protocol error: %s", nghttp2_strerror(rc));
    else if (kv_tls_conn_established(cn->tls))
        snprintf(why, cap, "TLS error: %s", kv_tls_conn_error(cn->tls));
    else
        snprintf(why, cap, "TLS handshake failed: %s",
                 kv_tls_conn_error(cn->tls)[0] ? kv_tls_conn_error(cn->tls) : "protocol error");
    return -1;
}
