/* tls.c - TLS over OpenSSL memory BIOs; see tls.h. */
#include "net/tls.h"
#include "common/clock.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#define TLS12_CIPHERS "ECDHE+AESGCM:ECDHE+CHACHA20:!aNULL:!eNULL:!MD5:!DSS:!PSK:!SRP"
#define RELOAD_CHECK_MS 1000
#define LOG_BURST 20 /* log lines per second per context */

typedef struct file_sig {
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;
} file_sig;

struct kv_tls_ctx {
    int refs;
    SSL_CTX *ssl; /* new connections use this one */
    char *cert_file, *key_file, *ca_file, *crl_file;
    char *ciphers, *allowed_cn, *allowed_hostname, *server_name;
    int server, verify_peer, insecure;
    char label[32];
    void (*on_handshake)(void *arg, int ok);
    void (*log)(void *arg, const char *line);
    void *arg;
    void (*free_arg)(void *arg);
    file_sig sig[4]; /* cert, key, CA, CRL */
    uint64_t last_check_ms;
    int force_check;
    uint64_t log_window_ms;
    unsigned log_count, log_dropped;
};

struct kv_tls_conn {
    kv_tls_ctx *ctx;
    SSL *ssl;
    BIO *rbio, *wbio; /* owned by ssl */
    int established, failed, saw_first;
    int http1;        /* kv_tls_conn_http1(): ALPN never selects h2 */
    uint8_t *pending; /* plaintext written before the handshake completed */
    size_t pending_len;
    char who[64];
    char cn[256];
    char err[256];
};

static void ctx_log(kv_tls_ctx *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void ctx_log(kv_tls_ctx *x, const char *fmt, ...)
{
    if (!x->log)
        return;
    uint64_t now = kv_mono_ms();
    if (now - x->log_window_ms >= 1000) {
        if (x->log_dropped) {
            char msg[96];
            snprintf(msg, sizeof(msg), "tls (%s): %u similar log lines suppressed", x->label,
                     x->log_dropped);
            x->log(x->arg, msg);
        }
        x->log_window_ms = now;
        x->log_count = x->log_dropped = 0;
    }
    if (x->log_count++ >= LOG_BURST) {
        x->log_dropped++;
        return;
    }
    char line[512];
    int n = snprintf(line, sizeof(line), "tls (%s): ", x->label);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
    va_end(ap);
    x->log(x->arg, line);
}

/* The first queued OpenSSL error as text (clears the queue). */
/* Go's crypto/tls text of a TLS alert (alert.go), or NULL: etcd operators and etcd's own
 * tests look for these words in the log ("remote error: tls: bad certificate"). */
static const char *go_alert_text(int alert)
{
    switch (alert) {
    case 10:
        return "unexpected message";
    case 20:
        return "bad record MAC";
    case 40:
        return "handshake failure";
    case 42:
        return "bad certificate";
    case 43:
        return "unsupported certificate";
    case 44:
        return "revoked certificate";
    case 45:
        return "expired certificate";
    case 46:
        return "unknown certificate";
    case 48:
        return "unknown certificate authority";
    case 70:
        return "protocol version not supported";
    case 80:
        return "internal error";
    case 116:
        return "certificate required";
    case 120:
        return "no application protocol";
    default:
        return NULL;
    }
}

static void ssl_err_text(char *buf, size_t cap, const char *fallback)
{
    unsigned long e = ERR_get_error();
    if (e) {
        ERR_error_string_n(e, buf, cap);
        /* An alert the peer sent (OpenSSL: reason = 1000 + alert): also in Go's words. */
        int reason = ERR_GET_REASON(e);
        const char *go = reason >= SSL_AD_REASON_OFFSET && reason < SSL_AD_REASON_OFFSET + 256
                             ? go_alert_text(reason - SSL_AD_REASON_OFFSET)
                             : NULL;
        size_t n = strlen(buf);
        if (go && n < cap)
            snprintf(buf + n, cap - n, " (remote error: tls: %s)", go);
    } else {
        snprintf(buf, cap, "%s", fallback);
    }
    ERR_clear_error();
}

static int alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                       const unsigned char *in, unsigned int inlen, void *arg)
{
    (void)arg;
    const kv_tls_conn *t = SSL_get_app_data(ssl);
    const char *want = t && t->http1 ? "http/1.1" : "h2";
    size_t wl = strlen(want);
    for (unsigned i = 0; i < inlen;) {
        unsigned l = in[i];
        if (i + 1 + l > inlen)
            break;
        if (l == wl && memcmp(in + i + 1, want, wl) == 0) {
            *out = in + i + 1;
            *outlen = (unsigned char)wl;
            return SSL_TLSEXT_ERR_OK;
        }
        i += 1 + l;
    }
    return SSL_TLSEXT_ERR_NOACK; /* no ALPN in the answer, as Go's server */
}

static void sig_of(const char *path, file_sig *s)
{
    struct stat st;
    memset(s, 0, sizeof(*s));
    if (path && stat(path, &st) == 0) {
        s->dev = st.st_dev;
        s->ino = st.st_ino;
        s->size = st.st_size;
        s->mtime = st.st_mtim;
    }
}

/* 1 if the store's CRLs list cert's serial number (etcd's checkCRL: any issuer). */
static int revoked(X509_STORE_CTX *sc, X509 *cert)
{
    STACK_OF(X509_OBJECT) *objs = X509_STORE_get0_objects(X509_STORE_CTX_get0_store(sc));
    for (int i = 0; i < sk_X509_OBJECT_num(objs); i++) {
        X509_CRL *crl = X509_OBJECT_get0_X509_CRL(sk_X509_OBJECT_value(objs, i));
        X509_REVOKED *rev = NULL;
        if (crl && X509_CRL_get0_by_serial(crl, &rev, X509_get_serialNumber(cert)) == 1)
            return 1;
    }
    return 0;
}

/* The extra checks etcd makes on a verified chain: no certificate in it is revoked by the
 * CRL file (--client-crl-file, --peer-crl-file), and the leaf matches --peer-cert-allowed-cn
 * or --peer-cert-allowed-hostname. The SSL_CTX's app data is its kv_tls_ctx, which outlives
 * every SSL_CTX it built (connections hold a reference on it). */
static int verify_cb(int ok, X509_STORE_CTX *sc)
{
    if (!ok)
        return 0;
    SSL *ssl = X509_STORE_CTX_get_ex_data(sc, SSL_get_ex_data_X509_STORE_CTX_idx());
    const kv_tls_ctx *x = ssl ? SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl)) : NULL;
    X509 *cert = X509_STORE_CTX_get_current_cert(sc);
    if (x == NULL || cert == NULL)
        return ok;
    if (x->crl_file && revoked(sc, cert)) {
        X509_STORE_CTX_set_error(sc, X509_V_ERR_CERT_REVOKED);
        return 0;
    }
    if (X509_STORE_CTX_get_error_depth(sc) != 0)
        return 1;
    if (x->allowed_cn) {
        char cn[256] = "";
        X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn, sizeof(cn));
        if (strcmp(cn, x->allowed_cn) != 0) {
            X509_STORE_CTX_set_error(sc, X509_V_ERR_CERT_REJECTED); /* bad_certificate, as Go */
            return 0;
        }
    }
    if (x->allowed_hostname) {
        int m = X509_check_ip_asc(cert, x->allowed_hostname, 0);
        if (m < 0) /* not an IP literal: a host name */
            m = X509_check_host(cert, x->allowed_hostname, 0, 0, NULL);
        if (m != 1) {
            X509_STORE_CTX_set_error(sc, X509_V_ERR_HOSTNAME_MISMATCH);
            return 0;
        }
    }
    return 1;
}

/* Adds the CRLs of a PEM (or DER) file to c's store, without CRL_CHECK: a certificate is
 * refused only when a CRL lists it, as etcd. 0 or -EINVAL. */
static int load_crl(SSL_CTX *c, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        snprintf(err, errlen, "cannot open CRL file %s: %s", path, strerror(errno));
        return -EINVAL;
    }
    int n = 0;
    X509_CRL *crl;
    while ((crl = PEM_read_X509_CRL(f, NULL, NULL, NULL)) != NULL) {
        X509_STORE_add_crl(SSL_CTX_get_cert_store(c), crl);
        X509_CRL_free(crl); /* the store holds its own reference */
        n++;
    }
    if (n == 0) {
        rewind(f);
        crl = d2i_X509_CRL_fp(f, NULL);
        if (crl != NULL) {
            X509_STORE_add_crl(SSL_CTX_get_cert_store(c), crl);
            X509_CRL_free(crl);
            n++;
        }
    }
    fclose(f);
    ERR_clear_error();
    if (n == 0) {
        snprintf(err, errlen, "CRL file %s holds no certificate revocation list", path);
        return -EINVAL;
    }
    return 0;
}

static SSL_CTX *build_ssl_ctx(const kv_tls_ctx *x, char *err, size_t errlen)
{
    ERR_clear_error();
    SSL_CTX *c = SSL_CTX_new(x->server ? TLS_server_method() : TLS_client_method());
    if (!c) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    SSL_CTX_set_min_proto_version(c, TLS1_2_VERSION);
    SSL_CTX_set_max_proto_version(c, TLS1_3_VERSION);
    SSL_CTX_set_options(c, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION |
                               SSL_OP_CIPHER_SERVER_PREFERENCE);
    SSL_CTX_set_mode(c, SSL_MODE_RELEASE_BUFFERS); /* idle connections hold no record buffers */
    if (SSL_CTX_set_cipher_list(c, x->ciphers ? x->ciphers : TLS12_CIPHERS) != 1) {
        snprintf(err, errlen, "cannot set the cipher list");
        goto fail;
    }
    if (x->cert_file) {
        if (SSL_CTX_use_certificate_chain_file(c, x->cert_file) != 1) {
            char e[200];
            ssl_err_text(e, sizeof(e), "?");
            snprintf(err, errlen, "cannot load certificate %s: %s", x->cert_file, e);
            goto fail;
        }
        if (SSL_CTX_use_PrivateKey_file(c, x->key_file ? x->key_file : x->cert_file,
                                        SSL_FILETYPE_PEM) != 1 ||
            SSL_CTX_check_private_key(c) != 1) {
            char e[200];
            ssl_err_text(e, sizeof(e), "?");
            snprintf(err, errlen, "cannot load key %s: %s", x->key_file ? x->key_file : "?", e);
            goto fail;
        }
    } else if (x->server) {
        snprintf(err, errlen, "a TLS listener needs a certificate and a key");
        goto fail;
    }
    if (x->ca_file) {
        if (SSL_CTX_load_verify_locations(c, x->ca_file, NULL) != 1) {
            char e[200];
            ssl_err_text(e, sizeof(e), "?");
            snprintf(err, errlen, "cannot load CA file %s: %s", x->ca_file, e);
            goto fail;
        }
        if (x->server) {
            STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(x->ca_file);
            if (names)
                SSL_CTX_set_client_CA_list(c, names);
        }
    } else if (!x->server && !x->insecure) {
        SSL_CTX_set_default_verify_paths(c);
    }
    if (x->crl_file && load_crl(c, x->crl_file, err, errlen) < 0)
        goto fail;
    SSL_CTX_set_app_data(c, (void *)x);
    int extra = x->crl_file || x->allowed_cn || x->allowed_hostname;
    if (x->server) {
        SSL_CTX_set_alpn_select_cb(c, alpn_select, NULL);
        if (x->verify_peer)
            SSL_CTX_set_verify(c, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT,
                               extra ? verify_cb : NULL);
        else
            SSL_CTX_set_verify(c, SSL_VERIFY_NONE, NULL);
        /* One session id context per server kind (needed for resumption with client certs). */
        SSL_CTX_set_session_id_context(c, (const unsigned char *)"kvd", 3);
    } else {
        static const unsigned char alpn[] = {2, 'h', '2'};
        SSL_CTX_set_alpn_protos(c, alpn, sizeof(alpn));
        SSL_CTX_set_verify(c, x->insecure ? SSL_VERIFY_NONE : SSL_VERIFY_PEER,
                           x->allowed_cn || x->allowed_hostname ? verify_cb : NULL);
    }
    ERR_clear_error();
    return c;
fail:
    ERR_clear_error();
    SSL_CTX_free(c);
    return NULL;
}

static char *dup_or_null(const char *s)
{
    return s && *s ? strdup(s) : NULL;
}

static void ctx_free(kv_tls_ctx *x)
{
    SSL_CTX_free(x->ssl);
    if (x->free_arg)
        x->free_arg(x->arg);
    free(x->cert_file);
    free(x->key_file);
    free(x->ca_file);
    free(x->crl_file);
    free(x->ciphers);
    free(x->allowed_cn);
    free(x->allowed_hostname);
    free(x->server_name);
    free(x);
}

int kv_tls_ctx_new(kv_tls_ctx **out, const kv_tls_options *o, char *err, size_t errlen)
{
    *out = NULL;
    kv_tls_ctx *x = calloc(1, sizeof(*x));
    if (!x)
        return -ENOMEM;
    x->refs = 1;
    x->server = o->server;
    x->verify_peer = o->verify_peer;
    x->insecure = o->insecure_skip_verify;
    x->on_handshake = o->on_handshake;
    x->log = o->log;
    x->arg = o->arg;
    /* free_arg is taken only on success: on failure the caller still owns arg */
    snprintf(x->label, sizeof(x->label), "%s", o->label ? o->label : "tls");
    x->cert_file = dup_or_null(o->cert_file);
    x->key_file = dup_or_null(o->key_file);
    x->ca_file = dup_or_null(o->ca_file);
    x->crl_file = dup_or_null(o->crl_file);
    x->ciphers = dup_or_null(o->ciphers);
    x->allowed_cn = dup_or_null(o->allowed_cn);
    x->allowed_hostname = dup_or_null(o->allowed_hostname);
    x->server_name = dup_or_null(o->server_name);
    if ((o->cert_file && *o->cert_file && !x->cert_file) ||
        (o->key_file && *o->key_file && !x->key_file) ||
        (o->ca_file && *o->ca_file && !x->ca_file) ||
        (o->crl_file && *o->crl_file && !x->crl_file) ||
        (o->ciphers && *o->ciphers && !x->ciphers) ||
        (o->allowed_cn && *o->allowed_cn && !x->allowed_cn) ||
        (o->allowed_hostname && *o->allowed_hostname && !x->allowed_hostname) ||
        (o->server_name && *o->server_name && !x->server_name)) {
        ctx_free(x);
        return -ENOMEM;
    }
    if (x->cert_file && !x->key_file) {
        snprintf(err, errlen, "a certificate file needs a key file");
        ctx_free(x);
        return -EINVAL;
    }
    if (x->server && x->verify_peer && !x->ca_file) {
        snprintf(err, errlen, "client certificate authentication needs a trusted CA file");
        ctx_free(x);
        return -EINVAL;
    }
    sig_of(x->cert_file, &x->sig[0]);
    sig_of(x->key_file, &x->sig[1]);
    sig_of(x->ca_file, &x->sig[2]);
    sig_of(x->crl_file, &x->sig[3]);
    x->ssl = build_ssl_ctx(x, err, errlen);
    if (!x->ssl) {
        ctx_free(x);
        return -EINVAL;
    }
    x->last_check_ms = kv_mono_ms();
    x->free_arg = o->free_arg;
    *out = x;
    return 0;
}

void kv_tls_ctx_ref(kv_tls_ctx *x)
{
    x->refs++;
}

void kv_tls_ctx_unref(kv_tls_ctx *x)
{
    if (x && --x->refs == 0)
        ctx_free(x);
}

void kv_tls_ctx_recheck(kv_tls_ctx *x)
{
    if (x)
        x->force_check = 1;
}

static int sig_eq(const file_sig *a, const file_sig *b)
{
    return a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
           a->mtime.tv_sec == b->mtime.tv_sec && a->mtime.tv_nsec == b->mtime.tv_nsec;
}

static void maybe_reload(kv_tls_ctx *x)
{
    uint64_t now = kv_mono_ms();
    if (!x->force_check && now - x->last_check_ms < RELOAD_CHECK_MS)
        return;
    x->force_check = 0;
    x->last_check_ms = now;
    file_sig s[4];
    sig_of(x->cert_file, &s[0]);
    sig_of(x->key_file, &s[1]);
    sig_of(x->ca_file, &s[2]);
    sig_of(x->crl_file, &s[3]);
    if (sig_eq(&s[0], &x->sig[0]) && sig_eq(&s[1], &x->sig[1]) && sig_eq(&s[2], &x->sig[2]) &&
        sig_eq(&s[3], &x->sig[3]))
        return;
    char err[300];
    SSL_CTX *n = build_ssl_ctx(x, err, sizeof(err));
    if (!n) {
        /* Keep the signature old so the next check retries (the files may be mid-write). */
        ctx_log(x, "reloading the certificate failed, keeping the previous one: %s", err);
        return;
    }
    memcpy(x->sig, s, sizeof(s));
    SSL_CTX_free(x->ssl); /* connections using it hold their own reference */
    x->ssl = n;
    ctx_log(x, "reloaded the certificate files (they changed)");
}

int kv_tls_conn_new(kv_tls_ctx *x, const char *who, const char *verify_host, kv_tls_conn **out)
{
    *out = NULL;
    maybe_reload(x);
    kv_tls_conn *t = calloc(1, sizeof(*t));
    if (!t)
        return -ENOMEM;
    snprintf(t->who, sizeof(t->who), "%s", who ? who : "?");
    ERR_clear_error();
    t->ssl = SSL_new(x->ssl);
    t->rbio = BIO_new(BIO_s_mem());
    t->wbio = BIO_new(BIO_s_mem());
    if (!t->ssl || !t->rbio || !t->wbio) {
        BIO_free(t->rbio);
        BIO_free(t->wbio);
        SSL_free(t->ssl);
        free(t);
        ERR_clear_error();
        return -ENOMEM;
    }
    BIO_set_mem_eof_return(t->rbio, -1); /* empty = "retry", not EOF */
    BIO_set_mem_eof_return(t->wbio, -1);
    SSL_set_bio(t->ssl, t->rbio, t->wbio);
    SSL_set_app_data(t->ssl, t); /* alpn_select reads t->http1 */
    if (x->server) {
        SSL_set_accept_state(t->ssl);
    } else {
        SSL_set_connect_state(t->ssl);
        if (x->server_name)
            verify_host = x->server_name;
        if (verify_host && *verify_host && !x->insecure) {
            X509_VERIFY_PARAM *vp = SSL_get0_param(t->ssl);
            if (X509_VERIFY_PARAM_set1_ip_asc(vp, verify_host) != 1) {
                ERR_clear_error();
                SSL_set_tlsext_host_name(t->ssl, verify_host);
                SSL_set1_host(t->ssl, verify_host);
            }
        } else if (verify_host && *verify_host) {
            SSL_set_tlsext_host_name(t->ssl, verify_host);
        }
    }
    ERR_clear_error();
    x->refs++;
    t->ctx = x;
    *out = t;
    return 0;
}

void kv_tls_conn_http1(kv_tls_conn *t)
{
    t->http1 = 1;
}

void kv_tls_conn_free(kv_tls_conn *t)
{
    if (!t)
        return;
    /* Closed (by either side, or a handshake timeout) before the handshake completed: a failed
     * handshake too, as Go's "TLS handshake error from ...: EOF" in etcd. */
    if (!t->established && !t->failed) {
        if (t->ctx->on_handshake)
            t->ctx->on_handshake(t->ctx->arg, 0);
        ctx_log(t->ctx, "TLS handshake with %s did not complete (%s)", t->who,
                t->saw_first || !t->ctx->server ? "connection closed or timed out"
                                                : "no bytes received");
    }
    SSL_free(t->ssl); /* frees the BIOs */
    free(t->pending);
    kv_tls_ctx_unref(t->ctx);
    free(t);
}

static void fail(kv_tls_conn *t, const char *why)
{
    snprintf(t->err, sizeof(t->err), "%s", why);
    if (!t->established && !t->failed && t->ctx->on_handshake)
        t->ctx->on_handshake(t->ctx->arg, 0);
    if (!t->established)
        ctx_log(t->ctx, "TLS handshake with %s failed: %s", t->who, why);
    else
        ctx_log(t->ctx, "TLS error on the connection with %s: %s", t->who, why);
    t->failed = 1;
}

/* The reason of a failed SSL call (verification result first). */
static void failure_reason(kv_tls_conn *t, int sslerr, char *buf, size_t cap)
{
    long vr = SSL_get_verify_result(t->ssl);
    const kv_tls_ctx *x = t->ctx;
    if ((vr == X509_V_ERR_CERT_REJECTED && x->allowed_cn) ||
        (vr == X509_V_ERR_HOSTNAME_MISMATCH && x->allowed_hostname)) {
        /* etcd's words for its allowed-CN/hostname rule (transport/listener.go) */
        snprintf(buf, cap, "client certificate authentication failed (the certificate's %s)",
                 x->allowed_cn ? "CN is not --peer-cert-allowed-cn"
                               : "names do not include --peer-cert-allowed-hostname");
        ERR_clear_error();
        return;
    }
    if (vr != X509_V_OK) {
        snprintf(buf, cap, "certificate verify failed: %s", X509_verify_cert_error_string(vr));
        ERR_clear_error();
        return;
    }
    if (sslerr == SSL_ERROR_SYSCALL || sslerr == SSL_ERROR_ZERO_RETURN) {
        ssl_err_text(buf, cap, "connection closed during the handshake");
        return;
    }
    ssl_err_text(buf, cap, "protocol error");
}

static int flush_pending(kv_tls_conn *t)
{
    if (!t->pending_len)
        return 0;
    uint8_t *p = t->pending;
    size_t n = t->pending_len;
    t->pending = NULL;
    t->pending_len = 0;
    int rc = kv_tls_conn_write(t, p, n);
    free(p);
    return rc;
}

static void on_established(kv_tls_conn *t)
{
    t->established = 1;
    X509 *peer = SSL_get1_peer_certificate(t->ssl);
    if (peer) {
        X509_NAME *nm = X509_get_subject_name(peer);
        if (nm && X509_NAME_get_text_by_NID(nm, NID_commonName, t->cn, sizeof(t->cn)) < 0)
            t->cn[0] = '\0';
        X509_free(peer);
    }
    ERR_clear_error();
    if (t->ctx->on_handshake)
        t->ctx->on_handshake(t->ctx->arg, 1);
}

static int looks_like_http(const uint8_t *in, size_t len)
{
    static const char *const starts[] = {"PRI *", "GET /", "HEAD ", "POST ", "PUT /", "OPTIO"};
    for (size_t i = 0; i < sizeof(starts) / sizeof(starts[0]); i++) {
        size_t l = strlen(starts[i]);
        size_t m = len < l ? len : l;
        if (m >= 3 && memcmp(in, starts[i], m) == 0)
            return 1;
    }
    return 0;
}

int kv_tls_conn_start(kv_tls_conn *t)
{
    ERR_clear_error();
    int r = SSL_do_handshake(t->ssl);
    if (r == 1) {
        on_established(t);
        return flush_pending(t);
    }
    int e = SSL_get_error(t->ssl, r);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        ERR_clear_error();
        return 0;
    }
    char why[256];
    failure_reason(t, e, why, sizeof(why));
    fail(t, why);
    return -EPROTO;
}

int kv_tls_conn_recv(kv_tls_conn *t, const uint8_t *in, size_t len,
                     int (*on_plain)(void *arg, const uint8_t *p, size_t n), void *arg)
{
    if (t->failed)
        return -EPROTO;
    if (len == 0)
        return 0;
    if (!t->saw_first) {
        t->saw_first = 1;
        /* A TLS connection starts with a handshake record (type 22). */
        if (t->ctx->server && in[0] != 0x16 && looks_like_http(in, len)) {
            static const char resp[] = "HTTP/1.0 400 Bad Request\r\n\r\n"
                                       "Client sent an HTTP request to an HTTPS server.\n";
            BIO_write(t->wbio, resp, (int)sizeof(resp) - 1);
            fail(t, in[0] == 'P' ? "client sent plain HTTP/2 (h2c) to a TLS port, closing"
                                 : "client sent plain HTTP to a TLS port, closing");
            return -EPROTO;
        }
    }
    if (BIO_write(t->rbio, in, (int)len) != (int)len) {
        fail(t, "out of memory");
        return -ENOMEM;
    }
    if (!t->established) {
        int rc = kv_tls_conn_start(t);
        if (rc < 0 || !t->established)
            return rc;
    }
    uint8_t buf[16384];
    for (;;) {
        ERR_clear_error();
        int n = SSL_read(t->ssl, buf, sizeof(buf));
        if (n > 0) {
            int rc = on_plain(arg, buf, (size_t)n);
            if (rc != 0)
                return rc;
            continue;
        }
        int e = SSL_get_error(t->ssl, n);
        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
            ERR_clear_error();
            return 0;
        }
        if (e == SSL_ERROR_ZERO_RETURN) {
            ERR_clear_error();
            snprintf(t->err, sizeof(t->err), "the peer closed the TLS session");
            return -ECONNRESET;
        }
        char why[256];
        failure_reason(t, e, why, sizeof(why));
        fail(t, why);
        return -EPROTO;
    }
}

int kv_tls_conn_write(kv_tls_conn *t, const uint8_t *p, size_t len)
{
    if (t->failed)
        return -EPROTO;
    if (len == 0)
        return 0;
    if (!t->established) {
        if (t->pending_len + len > KV_TLS_PENDING_MAX)
            return -ENOBUFS;
        uint8_t *np = realloc(t->pending, t->pending_len + len);
        if (!np)
            return -ENOMEM;
        memcpy(np + t->pending_len, p, len);
        t->pending = np;
        t->pending_len += len;
        return 0;
    }
    while (len > 0) {
        ERR_clear_error();
        int chunk = len > (1u << 30) ? (1 << 30) : (int)len;
        int n = SSL_write(t->ssl, p, chunk);
        if (n <= 0) {
            char why[256];
            failure_reason(t, SSL_get_error(t->ssl, n), why, sizeof(why));
            fail(t, why);
            return -EPROTO;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

size_t kv_tls_conn_out_pending(const kv_tls_conn *t)
{
    return BIO_ctrl_pending(t->wbio);
}

size_t kv_tls_conn_out_read(kv_tls_conn *t, uint8_t *buf, size_t cap)
{
    if (cap == 0 || BIO_ctrl_pending(t->wbio) == 0)
        return 0;
    int n = BIO_read(t->wbio, buf, cap > INT32_MAX ? INT32_MAX : (int)cap);
    return n > 0 ? (size_t)n : 0;
}

int kv_tls_conn_drain(kv_tls_conn *t, int (*emit)(void *arg, const uint8_t *p, size_t n), void *arg)
{
    char *p = NULL;
    long n = BIO_get_mem_data(t->wbio, &p);
    if (n <= 0)
        return 0;
    int rc = emit(arg, (const uint8_t *)p, (size_t)n);
    (void)BIO_reset(t->wbio); /* a read-write memory BIO: reset drops the data */
    return rc;
}

int kv_tls_conn_established(const kv_tls_conn *t)
{
    return t->established;
}

const char *kv_tls_conn_peer_cn(const kv_tls_conn *t)
{
    return t->cn;
}

const char *kv_tls_conn_error(const kv_tls_conn *t)
{
    return t->err;
}
